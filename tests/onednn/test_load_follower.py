"""The default team follows the load (``onednn.cpu_load.LoadFollower``): it
shrinks when other processes take the CPUs, grows back when they leave them,
and stays out of the way of every count the user chose.

No time is asserted: the follower is fed readings of a fake ``/proc/stat``
and a fake clock; the fresh-process tests replace its look.
"""
import os
import sys

import pytest

from mxdeconv.onednn import cpu_load
from mxdeconv.onednn.cpu_load import (LOOK_INTERVAL, MAX_GAP, SECONDS_PER_CPU, CpuTimes,
                                      LoadFollower)
from helpers import run_fresh

TICKS = cpu_load._TICKS


def _stat_text(per_cpu_busy, idle=1000, nice=0):
    """A /proc/stat whose CPUs have spent ``per_cpu_busy`` ticks busy each
    (half user, half system) and ``nice`` ticks on niced processes."""
    lines = []
    cpus = [(b // 2, nice, b - b // 2, idle, 0, 0, 0, 0, 0, 0) for b in per_cpu_busy]
    total = [sum(column) for column in zip(*cpus)]
    lines.append("cpu  " + " ".join(map(str, total)))
    lines += [f"cpu{i} " + " ".join(map(str, fields)) for i, fields in enumerate(cpus)]
    lines += ["intr 12345 0 0", "ctxt 999", "procs_running 3"]
    return "\n".join(lines) + "\n"


class FakeStat:
    """A /proc/stat file in ``tmp_path`` whose busy ticks the test moves on."""

    def __init__(self, tmp_path, cpus):
        self.path = tmp_path / "stat"
        self.busy = [0.0] * cpus         # seconds: the file holds whole ticks
        self.nice = 0
        self.write()

    def write(self):
        self.path.write_text(_stat_text([round(b * TICKS) for b in self.busy], nice=self.nice))

    def add(self, seconds_per_cpu):
        self.busy = [b + s for b, s in zip(self.busy, seconds_per_cpu)]
        self.write()


class Clock:
    """The process's own CPU seconds, as the test says."""

    def __init__(self):
        self.own = 0.0

    def __call__(self):
        return self.own


# -- reading /proc/stat -------------------------------------------------------------------
def test_cpu_times_reads_the_total_line_when_the_mask_holds_every_cpu(tmp_path):
    stat = FakeStat(tmp_path, 4)
    stat.add([1.0, 2.0, 0.0, 0.5])
    for mask in (None, {0, 1, 2, 3}):
        busy, cpus = CpuTimes(mask, str(stat.path), niced=False).read()
        assert (busy, cpus) == (pytest.approx(3.5), 4)


def test_cpu_times_counts_only_the_affinity_masks_cpus(tmp_path):
    stat = FakeStat(tmp_path, 4)
    stat.add([1.0, 2.0, 0.0, 0.5])
    busy, cpus = CpuTimes({1, 3}, str(stat.path), niced=False).read()
    assert (busy, cpus) == (pytest.approx(2.5), 2)


def test_niced_processes_count_only_for_a_niced_process(tmp_path):
    stat = FakeStat(tmp_path, 2)
    stat.nice = 3 * TICKS
    stat.write()
    assert CpuTimes(None, str(stat.path), niced=False).read()[0] == 0
    assert CpuTimes(None, str(stat.path), niced=True).read()[0] == pytest.approx(6.0)


@pytest.mark.parametrize("text", ["", "cpu  1 2 3\n", "cpu  a b c d e f g h\ncpu0 1\n",
                                  "intr 1 2 3\n"])
def test_an_unreadable_or_foreign_stat_reads_as_unknown(tmp_path, text):
    path = tmp_path / "stat"
    path.write_text(text)
    assert CpuTimes(None, str(path)).read() is None
    assert CpuTimes(None, str(tmp_path / "missing")).read() is None


# -- the follower -------------------------------------------------------------------------

class Run:
    """A follower on a fake machine of ``cpus`` CPUs, looking every LOOK_INTERVAL."""

    def __init__(self, tmp_path, cpus=2, most=2):
        self.stat, self.own = FakeStat(tmp_path, cpus), Clock()
        self.follower = LoadFollower(most, CpuTimes(None, str(self.stat.path), niced=False),
                                     self.own)
        self.now = 100.0
        self.follower.look(self.now)

    def window(self, others_per_cpu, own_cpus, gap=LOOK_INTERVAL):
        """One decision window (looks every ``gap``) in which others keep
        ``others_per_cpu`` of each CPU busy and this process ``own_cpus``
        CPUs; the team at its end."""
        cpus = len(self.stat.busy)
        seconds = SECONDS_PER_CPU * max(2, cpus)
        looks = max(1, round(seconds / gap))
        for _ in range(looks):
            self.stat.add([(others_per_cpu + own_cpus / cpus) * gap] * cpus)
            self.own.own += own_cpus * gap
            self.now += gap
            team = self.follower.look(self.now)
        return team


def test_a_quiet_machine_keeps_the_whole_team(tmp_path):
    run = Run(tmp_path)
    for _ in range(20):
        assert run.window(0.02, 2.0) == 2


def test_one_busy_core_of_two_shrinks_the_team_at_once_and_it_grows_back(tmp_path):
    run = Run(tmp_path)
    # A busy process takes 0.86 CPU beside a team of 2 (measured): one window shrinks it.
    assert run.window(0.43, 1.14) == 1
    # Beside a team of 1 it takes its whole core: the team stays at 1.
    for _ in range(5):
        assert run.window(0.5, 1.0) == 1
    # It stops: the next window grows the team back.
    assert run.window(0.0, 1.0) == 2


def test_a_part_of_a_core_taken_between_the_margins_keeps_the_team(tmp_path):
    """Others at 0.4 CPU neither take the second thread's core nor leave it free."""
    run = Run(tmp_path)
    assert run.window(0.5, 1.0) == 1
    for _ in range(3):
        assert run.window(0.2, 1.0) == 1
    assert run.window(0.1, 1.0) == 2
    for _ in range(3):
        assert run.window(0.2, 1.6) == 2


def test_half_a_core_taken_keeps_the_team(tmp_path):
    run = Run(tmp_path)
    for _ in range(5):
        assert run.window(0.2, 1.6) == 2


def test_a_big_team_gives_up_as_many_threads_as_cores_are_taken(tmp_path):
    run = Run(tmp_path, cpus=16, most=16)
    assert run.window(5 / 16, 11.0) == 11     # others hold 5 of 16 CPUs
    assert run.window(1.0, 1.0) == 1          # everything busy: never below one thread
    assert run.window(0.0, 1.0) == 16         # all free again: the whole team, not more


def test_a_long_gap_between_calls_says_nothing_about_the_load(tmp_path):
    """While the process did not call, whatever others did is not what its calls meet."""
    run = Run(tmp_path)
    for _ in range(4):
        assert run.window(1.0, 0.0, gap=MAX_GAP * 2) == 2
    # The clock going backwards (a fake, or a bug) is no window either.
    run.now = 50.0
    assert run.follower.look(run.now) == 2
    assert run.window(0.5, 1.0) == 1


def test_an_unreadable_stat_keeps_the_team(tmp_path):
    run = Run(tmp_path)
    assert run.window(0.5, 1.0) == 1
    run.stat.path.unlink()
    for _ in range(3):
        run.now += LOOK_INTERVAL
        assert run.follower.look(run.now) == 1


# -- in a process -------------------------------------------------------------------------
needs_two_cpus = pytest.mark.skipif(
    len(getattr(os, "sched_getaffinity", lambda _: range(os.cpu_count() or 1))(0)) < 2,
    reason="the follower runs only where the default team has 2 or more threads")


@needs_two_cpus
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_a_process_follows_the_load_with_the_same_results(tmp_path):
    """The team the follower chooses is the one the next call runs on, and a
    plan for either team gives the same result as the NumPy path."""
    result = run_fresh("""
        import time
        import numpy as np
        import mxdeconv
        from mxdeconv import nd
        from mxdeconv.onednn._loader import ops
        follower = ops.load_follower()
        assert follower is not None and follower.most >= 2, follower
        assert "following the load" in mxdeconv.runtime_info()["num_threads_source"]
        rng = np.random.default_rng(0)
        x = nd.array(rng.standard_normal((4, 64, 6, 6)).astype(np.float32))
        w = nd.array(rng.standard_normal((64, 32, 4, 4)).astype(np.float32))
        b = nd.array(rng.standard_normal(32).astype(np.float32))
        kw = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=32, no_bias=False)
        mxdeconv.set_onednn_enabled(False)
        expected = nd.Deconvolution(x, w, b, **kw).asnumpy()
        mxdeconv.set_onednn_enabled(True)
        teams = []
        for team in (1, follower.most, 1):
            follower.look = lambda now, team=team: team
            time.sleep(0.15)            # past the look interval
            got = nd.Deconvolution(x, w, b, **kw).asnumpy()
            teams.append(mxdeconv.get_num_threads())
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        print(teams, follower.most)
        assert "following the load: 1 of" in mxdeconv.runtime_info()["num_threads_source"]
        mxdeconv.set_num_threads(2)
        assert ops.load_follower() is None
        assert mxdeconv.runtime_info()["num_threads_source"] == "set_num_threads(2)"
    """, tmp_path, MXDECONV_FOLLOW_LOAD="on", OMP_NUM_THREADS=None)
    assert result.returncode == 0, result.stderr
    teams, most = result.stdout.split("]")
    assert teams.strip("[ ").split(", ") == ["1", most.strip(), "1"]


@pytest.mark.parametrize("env, why", [
    ({"MXDECONV_FOLLOW_LOAD": "off"}, "turned off"),
    ({"MXDECONV_FOLLOW_LOAD": "on", "OMP_NUM_THREADS": "2"}, "OMP_NUM_THREADS wins"),
])
def test_no_follower_where_the_count_is_not_the_default(tmp_path, env, why):
    result = run_fresh("""
        import mxdeconv
        from mxdeconv.onednn._loader import ops
        print(ops.load_follower(), mxdeconv.runtime_info()["num_threads_source"])
    """, tmp_path, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("None"), why
    assert "following the load" not in result.stdout


@needs_two_cpus
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_junk_in_the_switch_warns_and_follows(tmp_path):
    result = run_fresh("""
        import mxdeconv
        from mxdeconv.onednn._loader import ops
        print(ops.load_follower() is not None)
    """, tmp_path, MXDECONV_FOLLOW_LOAD="sometimes", OMP_NUM_THREADS=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert "MXDECONV_FOLLOW_LOAD='sometimes'" in result.stderr
