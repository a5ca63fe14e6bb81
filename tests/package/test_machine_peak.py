"""``benchmarks/machine.py``: the fp32 peak the benchmark divides by."""
import sys

import pytest

import helpers


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.syspath_prepend(str(helpers.ROOT / "benchmarks"))
    import machine as module
    yield module
    sys.modules.pop("machine", None)


@pytest.mark.source_tree  # benchmarks/ is not beside an installed mxdeconv
def test_an_implausible_clock_gives_way_to_the_fma_loops_own_rate(machine, monkeypatch):
    """A VM that times the add chain at 21 GHz (a Firecracker guest did): the
    peak is what the FMA loop reached on every thread, not 21 GHz x 32."""
    monkeypatch.setattr(machine, "_measure", lambda threads, avx512: (21.0, [215.0, 210.0]))
    found = machine.detect(2)
    assert found.peak_gflops == pytest.approx(430.0)
    assert "FMA loop" in found.peak_source and "FMA loop" in found.describe()
    monkeypatch.setattr(machine, "_measure", lambda threads, avx512: (3.5, [224.0, 220.0]))
    sane = machine.detect(2)
    assert sane.peak_source == "threads x GHz x FLOP/cycle"
    assert sane.peak_gflops == pytest.approx(2 * 3.5 * 64)   # 224 / 3.5 = 64 per cycle
