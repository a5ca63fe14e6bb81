"""``benchmarks/contended.py``'s figure: each block's mean step time, the
median over rounds, so that a team that stalls beside the hog shows it."""
import sys

import pytest

import helpers

sys.path.insert(0, str(helpers.ROOT / "benchmarks"))
contended = pytest.importorskip("contended")

pytestmark = pytest.mark.source_tree  # benchmarks/ is not beside an installed mxdeconv


def _contender(blocks):
    contender = object.__new__(contended.Contender)  # no worker process
    contender.times = {("layer", "infer", "contended"): blocks}
    return contender


def test_a_stalling_team_counts_by_its_blocks_means():
    """Nine fast steps and one stall a block: the median step says 1 ms,
    what a program meets is the block's mean."""
    stalling = _contender([[0.001] * 9 + [0.035]] * 3)
    assert stalling.median_ms("layer", "infer", "contended") == pytest.approx(4.4)


def test_the_median_is_over_the_rounds():
    rounds = _contender([[0.001] * 10, [0.002] * 10, [0.050] * 10])
    assert rounds.median_ms("layer", "infer", "contended") == pytest.approx(2.0)
