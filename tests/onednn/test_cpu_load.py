"""Tuning under load: what other processes took of the CPUs while the tuner
timed candidates (``onednn.cpu_load``), and what the planner does with a
choice made then: keeps it for its process, and lets the next one tune again.

No time is asserted: the meter is fed readings, except in one test where a
busy child process must show up as others' CPU time.
"""
import subprocess
import sys
import time

import numpy as np
import pytest

import mxdeconv
from mxdeconv.onednn import cpu_load
from mxdeconv.onednn import planner as plans
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import planner_afresh


@pytest.fixture(autouse=True)
def watching(monkeypatch):
    """The suite runs unwatched (conftest.py); these tests watch."""
    monkeypatch.setattr(cpu_load, "watching", True)


def test_the_suite_runs_unwatched_and_the_environment_says_so(monkeypatch):
    import os
    assert os.environ["MXDECONV_LOAD_WATCH"] == "0"
    monkeypatch.setattr(cpu_load, "watching", False)
    load = cpu_load.ForeignLoad(Readings((0.0, 0.0, 2.0), (1.0, 2.0, 2.0)))
    load.begin()
    load.end()
    assert load.share() == 1.0 and not load.loaded()


class Readings:
    """A meter's clock: each reading (wall seconds, others' CPU seconds, CPUs)."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


def test_the_share_sums_the_intervals_between_begin_and_end():
    load = cpu_load.ForeignLoad(Readings((0.0, 10.0, 2.0), (0.1, 10.05, 2.0),
                                         (5.0, 99.0, 2.0), (5.5, 99.4, 2.0)))
    load.begin()
    load.end()
    assert load.share() is None   # 0.2 CPU seconds: under MIN_CPU_SECONDS, mostly rounding
    load.begin()                  # what others did between the intervals does not count
    load.end()
    assert load.others_seconds == pytest.approx(0.45)
    assert load.cpu_seconds == pytest.approx(1.2)
    assert load.share() == pytest.approx(0.375)
    assert load.loaded()


def test_what_others_take_of_the_cpus_a_team_leaves_free_does_not_count():
    """A team of 1 beside a process holding the other core of 2 times as on a
    quiet machine (the team that follows the load runs so); a team of 2 does not."""
    beside_hog = ((0.0, 0.0, 2.0), (1.0, 1.0, 2.0))
    alone = cpu_load.ForeignLoad(Readings(*beside_hog), team=1)
    whole = cpu_load.ForeignLoad(Readings(*beside_hog), team=2)
    for load in (alone, whole):
        load.begin()
        load.end()
    assert alone.share() == 0.0 and not alone.loaded()
    assert whole.share() == pytest.approx(0.5) and whole.loaded()
    # Others taking more than the spare core reach the team's.
    crowded = cpu_load.ForeignLoad(Readings((0.0, 0.0, 2.0), (1.0, 1.5, 2.0)), team=1)
    crowded.begin()
    crowded.end()
    assert crowded.share() == pytest.approx(0.5) and crowded.loaded()


def test_a_quiet_or_unknown_machine_is_not_loaded():
    quiet = cpu_load.ForeignLoad(Readings((0.0, 1.0, 4.0), (1.0, 1.2, 4.0)))
    quiet.begin()
    quiet.end()
    assert quiet.share() == pytest.approx(0.05) and not quiet.loaded()
    unknown = cpu_load.ForeignLoad(Readings(None, None))   # no /proc/stat
    unknown.begin()
    unknown.end()
    assert unknown.share() is None and not unknown.loaded()
    never_begun = cpu_load.ForeignLoad(Readings())
    never_begun.end()   # nothing read, nothing counted
    assert never_begun.share() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_a_busy_child_process_counts_as_others():
    load = cpu_load.ForeignLoad()
    spin = "import time\nend = time.perf_counter() + 1.5\nwhile time.perf_counter() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)   # past its interpreter's start
        load.begin()
        time.sleep(1.0)
        load.end()
    finally:
        child.wait()
    assert load.others_seconds > 0.6, (load.others_seconds, load.cpu_seconds)


@pytest.fixture
def eager_tuning(monkeypatch):
    with planner_afresh(tuning=True, eager=True, monkeypatch=monkeypatch):
        yield


class FixedLoad(cpu_load.ForeignLoad):
    """A meter that reports ``share`` of the CPUs taken, whatever happens."""

    share_taken = 0.0

    def __init__(self, team=None):
        super().__init__(Readings(), team)

    def begin(self):
        pass

    def end(self):
        self.others_seconds, self.cpu_seconds = self.share_taken * 100, 100.0


@pytest.mark.parametrize("taken", [0.0, 0.5])
def test_a_choice_tuned_under_load_is_kept_for_this_process_only(eager_tuning, monkeypatch,
                                                                  taken):
    monkeypatch.setattr(FixedLoad, "share_taken", taken)
    monkeypatch.setattr(plans.cpu_load, "ForeignLoad", FixedLoad)
    geom = infer_geometry(parse_params(dict(kernel=(3, 3), stride=(2, 2), num_filter=16)),
                          (2, 16, 6, 6))
    plan = plans.forward_plan(geom, "float32", False, False)
    choice = plan.choice
    assert choice.how.startswith("tuned")
    key = plans.ForwardKey("forward", geom, "float32", False, False, None,
                           mxdeconv.get_num_threads(), True)
    entry = plans.current_planner().store.get(plans._store_key(key, geom))
    assert entry is not None and entry["index"] == choice.index
    if taken:
        assert "other processes took 50% of the CPUs" in choice.how
        assert entry["tuned"] is False   # the next process tunes again, from this choice
    else:
        assert "other processes" not in choice.how
        assert entry["tuned"] is True
    x = np.ones(geom.data_shape, np.float32)
    assert mxdeconv.nd.Deconvolution(mxdeconv.nd.array(x), mxdeconv.nd.ones(geom.weight_shape),
                                     kernel=(3, 3), stride=(2, 2),
                                     num_filter=16).shape == geom.out_shape
