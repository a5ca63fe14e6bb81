"""The default team follows the load (``onednn.cpu_load.LoadFollower``): it
shrinks when its threads wait for a CPU, grows back when a CPU is idle or a
probe finds one, and stays out of the way of every count the user chose.

No time is asserted: the follower is fed readings of a fake ``/proc/stat``, a
fake run-queue count and a fake clock; the fresh-process tests replace its look.
"""
import os
import sys

import pytest

from mxdeconv.onednn import cpu_load
from mxdeconv.onednn.cpu_load import (LOOK_INTERVAL, MAX_GAP, PROBE_FIRST, PROBE_MAX,
                                      CpuTimes, LoadFollower, run_queue_seconds)
from helpers import run_fresh

TICKS = cpu_load._TICKS


def _stat_text(idle, steal):
    """A /proc/stat whose CPUs have been idle and stolen for the given ticks."""
    cpus = [(500, 3, 200, i, 7, 0, 1, st, 0, 0) for i, st in zip(idle, steal)]
    total = [sum(column) for column in zip(*cpus)]
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{n} " + " ".join(map(str, fields)) for n, fields in enumerate(cpus)]
    lines += ["intr 12345 0 0", "ctxt 999", "procs_running 3"]
    return "\n".join(lines) + "\n"


class FakeMachine:
    """A /proc/stat file in ``tmp_path`` and a run-queue count the test moves on."""

    def __init__(self, tmp_path, cpus):
        self.path = tmp_path / "stat"
        self.idle = [0.0] * cpus      # seconds: the file holds whole ticks
        self.steal = [0.0] * cpus
        self.waited = 0.0
        self.write()

    def write(self):
        self.path.write_text(_stat_text([round(i * TICKS) for i in self.idle],
                                        [round(s * TICKS) for s in self.steal]))

    def waits(self):
        return self.waited


# -- reading the counts -------------------------------------------------------------------
def test_cpu_times_reads_the_total_line_when_the_mask_holds_every_cpu(tmp_path):
    machine = FakeMachine(tmp_path, 4)
    machine.idle, machine.steal = [1.0, 2.0, 0.0, 0.5], [0.0, 0.1, 0.0, 0.0]
    machine.write()
    for mask in (None, {0, 1, 2, 3}):
        idle, steal, cpus = CpuTimes(mask, str(machine.path)).read()
        assert cpus == 4
        assert idle == pytest.approx(3.5 + 4 * 7 / TICKS)     # idle and iowait
        assert steal == pytest.approx(0.1)


def test_cpu_times_counts_only_the_affinity_masks_cpus(tmp_path):
    machine = FakeMachine(tmp_path, 4)
    machine.idle, machine.steal = [1.0, 2.0, 0.0, 0.5], [0.0, 0.2, 0.0, 0.3]
    machine.write()
    idle, steal, cpus = CpuTimes({1, 3}, str(machine.path)).read()
    assert (idle, steal, cpus) == (pytest.approx(2.5 + 2 * 7 / TICKS), pytest.approx(0.5), 2)


@pytest.mark.parametrize("text", ["", "cpu  1 2 3\n", "cpu  a b c d e f g h\ncpu0 1\n",
                                  "intr 1 2 3\n"])
def test_an_unreadable_or_foreign_stat_reads_as_unknown(tmp_path, text):
    path = tmp_path / "stat"
    path.write_text(text)
    assert CpuTimes(None, str(path)).read() is None
    assert CpuTimes(None, str(tmp_path / "missing")).read() is None


def test_the_run_queue_count_sums_the_threads_of_a_process(tmp_path):
    for tid, fields in (("11", "900 2000000000 4"), ("12", "5 500000000 1"),
                        ("13", "garbage")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(fields + "\n")
    (tmp_path / "14").mkdir()          # a thread that ended between the listing and the read
    assert run_queue_seconds(str(tmp_path)) == pytest.approx(2.5)
    assert run_queue_seconds(str(tmp_path / "missing")) is None
    if os.path.exists("/proc/self/task"):
        assert run_queue_seconds() is not None


# -- the follower -------------------------------------------------------------------------
class Run:
    """A follower on a fake machine of ``cpus`` CPUs, looking every LOOK_INTERVAL."""

    def __init__(self, tmp_path, cpus=2, most=2):
        self.machine = FakeMachine(tmp_path, cpus)
        self.follower = LoadFollower(most, CpuTimes(None, str(self.machine.path)),
                                     self.machine.waits)
        self.now = 100.0
        self.follower.look(self.now)

    def window(self, waiting, idle=0.0, steal=0.0, gap=LOOK_INTERVAL):
        """One window in which the process's threads wait ``waiting`` seconds
        per second for a CPU (a number, or a function of the team that runs
        the window), ``idle`` CPUs are idle and ``steal`` stolen; the team at
        its end."""
        if callable(waiting):
            waiting = waiting(self.follower.team)
        cpus = len(self.machine.idle)
        self.machine.waited += waiting * gap
        self.machine.idle = [i + idle * gap / cpus for i in self.machine.idle]
        self.machine.steal = [s + steal * gap / cpus for s in self.machine.steal]
        self.machine.write()
        self.now += gap
        return self.follower.look(self.now)

    def busy(self, waiting, steal=0.0):
        """Two windows of the same load (one is a burst, perhaps): the team after."""
        self.window(waiting, steal=steal)
        return self.window(waiting, steal=steal)

    def windows(self, seconds, waiting, idle=0.0):
        """Windows for ``seconds``: the teams they end with."""
        return [self.window(waiting, idle) for _ in range(round(seconds / LOOK_INTERVAL))]


def beside_a_hog(team):
    """How long a team's threads wait per second beside one busy process on
    2 cores (measured: a team of 2 about 0.5 s, a team of 1 under 0.1)."""
    return 0.54 if team == 2 else 0.07


def test_a_quiet_machine_keeps_the_whole_team(tmp_path):
    run = Run(tmp_path)
    assert set(run.windows(3, waiting=0.05)) == {2}


def test_one_busy_core_of_two_shrinks_the_team_and_probes_back_less_and_less(tmp_path):
    run = Run(tmp_path)
    assert run.busy(beside_a_hog) == 1
    teams = run.windows(8 * PROBE_MAX, waiting=beside_a_hog)
    probes = [i for i, team in enumerate(teams) if team == 2]
    # Each probe is one window at 2 threads, refused by the next.
    assert len(probes) >= 4
    assert all(teams[i + 1] == 1 for i in probes if i + 1 < len(teams))
    # The gaps between probes double from PROBE_FIRST up to PROBE_MAX.
    gaps = [(b - a) * LOOK_INTERVAL for a, b in zip(probes, probes[1:])]
    assert gaps[0] == pytest.approx(2 * PROBE_FIRST + LOOK_INTERVAL, abs=2 * LOOK_INTERVAL)
    assert gaps == sorted(gaps)
    assert gaps[-1] == pytest.approx(PROBE_MAX + LOOK_INTERVAL, abs=2 * LOOK_INTERVAL)
    # The cost: a window in some forty at the bigger team.
    assert teams.count(2) <= len(teams) / 20


def test_the_busy_process_leaving_frees_a_cpu_and_the_team_grows_at_once(tmp_path):
    run = Run(tmp_path)
    assert run.busy(0.54) == 1
    assert run.window(0.0, idle=1.0) == 2
    assert set(run.windows(1, waiting=0.02)) == {2}


def test_work_of_lower_priority_soaking_up_idle_time_is_probed_past(tmp_path):
    """No CPU is idle (a niced job takes what the team leaves), but the team's
    threads do not wait: the probe keeps the second thread."""
    run = Run(tmp_path)
    assert run.busy(0.54) == 1             # a real hog, then it leaves, the niced job stays
    teams = run.windows(PROBE_FIRST + 2 * LOOK_INTERVAL, waiting=0.05)
    assert teams[-1] == 2 and teams[0] == 1
    assert set(run.windows(2, waiting=0.1)) == {2}


def test_a_big_team_gives_up_as_many_threads_as_its_threads_wait(tmp_path):
    run = Run(tmp_path, cpus=16, most=16)
    assert run.busy(5.2) == 11             # others hold some 5 of 16 CPUs
    assert run.window(20.0) == 1           # everything busy: never below one thread
    assert run.window(0.0, idle=15.0) == 15
    assert run.window(0.0, idle=4.0) == 16  # not past the whole team


def test_a_burst_of_one_window_does_not_shrink_the_team(tmp_path):
    """A process starting, or the kernel's work, holds a core for a few tens of
    milliseconds: one window waits, the next does not."""
    run = Run(tmp_path)
    for _ in range(5):
        assert run.window(0.6) == 2
        assert run.window(0.02) == 2


def test_no_probe_while_even_one_thread_waits(tmp_path):
    """Two busy processes beside a team of 1 on 2 cores: its one thread waits
    too, and a second one would only wait more."""
    run = Run(tmp_path)
    assert run.busy(1.2) == 1
    assert set(run.windows(3 * PROBE_MAX, waiting=0.6)) == {1}


def test_steal_counts_as_waiting(tmp_path):
    """A vCPU the hypervisor gave to another guest stalls the team the same way."""
    run = Run(tmp_path)
    assert run.busy(0.0, steal=0.5) == 1


def test_a_long_gap_between_calls_says_nothing_about_the_load(tmp_path):
    """While the process did not call, whatever others did is not what its calls meet."""
    run = Run(tmp_path)
    for _ in range(4):
        assert run.window(1.0, gap=MAX_GAP * 2) == 2
    # The clock going backwards (a fake, or a bug) is no window either.
    run.now = 50.0
    assert run.follower.look(run.now) == 2
    assert run.busy(0.54) == 1


def test_an_unreadable_count_keeps_the_team(tmp_path):
    run = Run(tmp_path)
    assert run.busy(0.54) == 1
    run.machine.path.unlink()
    for _ in range(10):
        run.now += LOOK_INTERVAL
        assert run.follower.look(run.now) == 1
    assert not LoadFollower(2, CpuTimes(None, str(run.machine.path))).readable()
    assert not LoadFollower(2, waits=lambda: None).readable()


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
        from mxdeconv.onednn._loader import extension as ops
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
        from mxdeconv.onednn._loader import extension as ops
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
        from mxdeconv.onednn._loader import extension as ops
        print(ops.load_follower() is not None)
    """, tmp_path, MXDECONV_FOLLOW_LOAD="sometimes", OMP_NUM_THREADS=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert "MXDECONV_FOLLOW_LOAD='sometimes'" in result.stderr
