"""The CPUs a process can really run on (``mxdeconv._core.cpus``), on fake
cgroup trees built in tmp_path: ``proc`` holds the process's ``cgroup`` and
``mountinfo`` files, ``root`` the mounted hierarchies."""
import os
from pathlib import Path

import pytest

from mxdeconv._core.cpus import CpuLimits, UsableCpus, usable_cpus

V2_MOUNT = "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNT = ("32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup "
            "rw,cpu,cpuacct\n"
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n")


def fake(tmp_path: Path, cgroup: str, mountinfo: str, files: dict, affinity: int = 8):
    """A process in ``cgroup`` (the text of /proc/self/cgroup) with ``files``
    ({path under root: text}); returns its CpuLimits."""
    proc, root = tmp_path / "proc", tmp_path / "root"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(mountinfo)
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return CpuLimits(proc=proc, root=root, affinity=affinity)


def test_v2_max_is_no_limit(tmp_path):
    limits = fake(tmp_path, "0::/job\n", V2_MOUNT,
                  {"/sys/fs/cgroup/job/cpu.max": "max 100000\n"})
    assert limits.quota() is None
    assert limits.usable() == UsableCpus(8, "affinity mask (8 CPUs)")


def test_v2_quota_rounds_up(tmp_path):
    limits = fake(tmp_path, "0::/job\n", V2_MOUNT,
                  {"/sys/fs/cgroup/job/cpu.max": "150000 100000\n"})
    usable = limits.usable()
    assert usable.count == 2
    assert "cgroup v2 cpu.max 150000 100000" in usable.source
    assert "affinity mask: 8 CPUs" in usable.source


def test_v2_a_small_quota_is_one_cpu(tmp_path):
    limits = fake(tmp_path, "0::/job\n", V2_MOUNT,
                  {"/sys/fs/cgroup/job/cpu.max": "1000 100000\n"})
    assert limits.usable().count == 1


def test_v2_takes_the_smallest_quota_of_the_ancestors(tmp_path):
    """As Go's runtime does: a parent's limit binds its children (a pod's
    limit above a container's cgroup, say)."""
    limits = fake(tmp_path, "0::/pod/container\n", V2_MOUNT, {
        "/sys/fs/cgroup/cpu.max": "max 100000\n",
        "/sys/fs/cgroup/pod/cpu.max": "300000 100000\n",
        "/sys/fs/cgroup/pod/container/cpu.max": "max 100000\n"})
    usable = limits.usable()
    assert usable.count == 3 and "/pod " not in usable.source
    assert usable.source.endswith("sys/fs/cgroup/pod; affinity mask: 8 CPUs)")


def test_v2_the_child_may_be_the_tighter_one(tmp_path):
    limits = fake(tmp_path, "0::/pod/container\n", V2_MOUNT, {
        "/sys/fs/cgroup/pod/cpu.max": "400000 100000\n",
        "/sys/fs/cgroup/pod/container/cpu.max": "50000 100000\n"})
    assert limits.usable().count == 1


def test_v2_a_namespaced_mount_strips_its_root(tmp_path):
    """A mount whose root is the process's own cgroup (cgroup namespaces off,
    the container's cgroup bind-mounted): /proc/self/cgroup names the full path."""
    mount = "31 23 0:28 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    limits = fake(tmp_path, "0::/kubepods/pod1/c1\n", mount, {
        "/sys/fs/cgroup/cpu.max": "200000 100000\n",
        "/sys/fs/cgroup/c1/cpu.max": "max 100000\n"})
    assert limits.usable().count == 2


def test_v2_a_cgroup_outside_the_mount_reads_the_mount_point(tmp_path):
    mount = "31 23 0:28 /elsewhere /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    limits = fake(tmp_path, "0::/../job\n", mount,
                  {"/sys/fs/cgroup/cpu.max": "100000 100000\n"})
    assert limits.usable().count == 1


def test_v1_quota_minus_one_is_no_limit(tmp_path):
    limits = fake(tmp_path, "4:memory:/job\n3:cpu,cpuacct:/job\n0::/\n", V1_MOUNT, {
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"})
    assert limits.quota() is None
    assert limits.usable().count == 8


def test_v1_half_a_cpu_is_one(tmp_path):
    limits = fake(tmp_path, "4:memory:/job\n3:cpu,cpuacct:/job\n0::/\n", V1_MOUNT, {
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "50000\n",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"})
    usable = limits.usable()
    assert usable.count == 1
    assert "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us 50000/100000" in usable.source


def test_v1_nested_parents(tmp_path):
    limits = fake(tmp_path, "3:cpu,cpuacct:/docker/abc\n", V1_MOUNT, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us": "250000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert limits.usable().count == 3


def test_hybrid_v1_cpu_and_an_empty_v2_hierarchy(tmp_path):
    """systemd's hybrid layout: the cpu controller on v1, a v2 hierarchy
    without controllers (no cpu.max anywhere) at /sys/fs/cgroup/unified."""
    mounts = V1_MOUNT + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    limits = fake(tmp_path, "3:cpu,cpuacct:/job\n0::/job\n", mounts, {
        "/sys/fs/cgroup/unified/job/cgroup.procs": "",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "120000\n",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"})
    assert limits.usable().count == 2


def test_the_affinity_mask_wins_when_smaller(tmp_path):
    limits = fake(tmp_path, "0::/job\n", V2_MOUNT,
                  {"/sys/fs/cgroup/job/cpu.max": "400000 100000\n"}, affinity=2)
    assert limits.usable() == UsableCpus(2, "affinity mask (2 CPUs)")


def test_a_mount_point_with_a_space(tmp_path):
    mount = r"31 23 0:28 / /cg\040two rw - cgroup2 cgroup2 rw" + "\n"
    limits = fake(tmp_path, "0::/job\n", mount, {"/cg two/job/cpu.max": "100000 100000"})
    assert limits.usable().count == 1


@pytest.mark.parametrize("cpu_max", ["", "garbage", "max", "-5 100000", "0 100000",
                                     "100000 0", "100000 zero", "\x00\xff", "1e5 1e5",
                                     "99999999999999999999999 1"])
def test_garbage_cpu_max_falls_back(tmp_path, cpu_max):
    limits = fake(tmp_path, "0::/job\n", V2_MOUNT, {"/sys/fs/cgroup/job/cpu.max": cpu_max})
    usable = limits.usable()
    assert 1 <= usable.count <= 8


@pytest.mark.parametrize("cgroup, mountinfo", [
    ("", ""), ("garbage", "garbage"), ("0::relative\n", V2_MOUNT),
    ("::::\n", "1 2 3\n - \n"), ("0::/job\n", "31 23 0:28 / /sys/fs/cgroup - cgroup2\n"),
    ("\x00\x01\n", "\xff" * 50), ("3:cpu:/a/../../..\n", V1_MOUNT)])
def test_garbage_proc_files_fall_back_to_the_affinity_mask(tmp_path, cgroup, mountinfo):
    limits = fake(tmp_path, cgroup, mountinfo, {})
    assert limits.usable() == UsableCpus(8, "affinity mask (8 CPUs)")


def test_missing_files_and_folders_fall_back(tmp_path):
    limits = CpuLimits(proc=tmp_path / "nothing", root=tmp_path / "none", affinity=3)
    assert limits.usable() == UsableCpus(3, "affinity mask (3 CPUs)")
    v1_quota_only = fake(tmp_path, "3:cpu:/job\n", V1_MOUNT.replace("cpu,cpuacct", "cpu"),
                         {"/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us": "50000\n"})
    assert v1_quota_only.usable().count == 8   # no period: no limit


def test_a_cgroup_folder_that_is_a_file_never_raises(tmp_path):
    limits = fake(tmp_path, "0::/job/x\n", V2_MOUNT, {"/sys/fs/cgroup/job": "not a folder"})
    assert limits.usable().count == 8


def test_this_process():
    usable = usable_cpus()
    assert isinstance(usable, UsableCpus) and usable.count >= 1 and usable.source


def test_the_affinity_mask_read_is_carried_to_the_load_follower():
    """usable_cpus() hands on the mask it read (the load follower watches
    those CPUs), and a test's faked count carries none."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity mask on this system")
    usable = usable_cpus()
    assert usable.mask == frozenset(os.sched_getaffinity(0))
    assert usable.count <= len(usable.mask)
    assert CpuLimits(affinity=3).usable().mask is None
