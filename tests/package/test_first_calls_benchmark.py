"""``benchmarks/first_calls.py --steady``: a contender runs only while the
machine is at full speed (its FMA loop near the run's fastest probe)."""
import sys

import pytest

import helpers

sys.path.insert(0, str(helpers.ROOT / "benchmarks"))
first_calls = pytest.importorskip("first_calls")

pytestmark = pytest.mark.source_tree  # benchmarks/ is not beside an installed mxdeconv


def _gate(probes):
    readings, slept = iter(probes), []
    return first_calls.SpeedGate(lambda: next(readings), slept.append), slept


def test_the_gate_waits_out_a_slow_phase():
    gate, slept = _gate([480.0, 300.0, 310.0, 470.0])
    assert gate.wait() == 480.0 and not slept
    assert gate.wait() == 470.0
    assert slept == [first_calls.STEADY_WAIT] * 2


def test_the_gate_gives_up_after_its_tries():
    gate, slept = _gate([480.0] + [200.0] * (first_calls.STEADY_TRIES + 1))
    gate.wait()
    assert gate.wait() == 200.0 and len(slept) == first_calls.STEADY_TRIES


def test_an_unknown_speed_counts_as_full():
    gate, slept = _gate([None, None])
    assert gate.wait() is None and gate.fast(None) and not slept
