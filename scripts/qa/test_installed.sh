#!/usr/bin/env bash
# Run the test suite against the mxdeconv installed in the current Python
# environment (a wheel, an sdist install), not against the source tree.
#
#   scripts/qa/test_installed.sh [SOURCE_ROOT] [pytest arguments...]
#
# `python` on PATH is the environment under test: it needs mxdeconv and the
# `test` extra installed.  tests/ (and scripts/, whose recorded MXNet cases
# and soak loop some tests load, and examples/, the Dask recipe that
# tests/package/test_dask.py runs) are copied from SOURCE_ROOT (default: this
# script's repository) into a temporary folder with a pytest.ini of its own,
# and pytest runs there, so the repository's mxdeconv/ is on no path.  Left
# out: the kernel-family reruns (tests/package/test_kernel_families.py: the
# same suite again under other ISAs, for the source tree's CI) and the tests
# marked source_tree (they read docs/ or pyproject.toml; skipped with that
# reason).  Fails if the mxdeconv that Python imports is not an installed one.
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
shift || true
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests" "$root/scripts" "$root/examples" "$work/"
find "$work" -name __pycache__ -prune -exec rm -rf {} +
cat > "$work/pytest.ini" <<'INI'
[pytest]
testpaths = tests
pythonpath = tests
addopts = -ra -p no:cacheprovider -p no:benchmark
INI
cd "$work"
python - <<'PY'
import sysconfig
from pathlib import Path

import mxdeconv

where = Path(mxdeconv.__file__).resolve()
installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
print(f"mxdeconv {mxdeconv.__version__} from {where.parent}")
if not any(folder in where.parents for folder in installed):
    raise SystemExit(f"mxdeconv is imported from {where}, not from the environment's "
                     f"site-packages {sorted(map(str, installed))}")
PY
export MXDECONV_TEST_INSTALLED=1     # tests/package/test_installed.py runs
python -m pytest --ignore tests/package/test_kernel_families.py "$@"
