"""``benchmarks/generator.py --smoke`` runs (mxdeconv alone, unfolded and
folded, images checked against each other) and prints its table."""
import subprocess
import sys

import pytest

import helpers

SCRIPT = helpers.ROOT / "benchmarks" / "generator.py"


@pytest.mark.source_tree  # benchmarks/ is not beside an installed mxdeconv
def test_the_generator_benchmark_runs_in_its_smoke_mode():
    run = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True,
                         text=True, timeout=300, cwd=helpers.ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "mxdeconv, folded" in run.stdout and "mxdeconv, unfolded" in run.stdout
    assert "max |diff| vs unfolded" in run.stdout
