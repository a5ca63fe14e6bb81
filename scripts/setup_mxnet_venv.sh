#!/usr/bin/env bash
# Create the MXNet 1.9.1 venv that benchmarks/peer_mxnet.py runs in.
#
#   scripts/setup_mxnet_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to $MXNET_VENV, else .venv-mxnet in the repository root.
# PYTHON selects the interpreter (default: python3.11, else python3); MXNet 1.9.1
# wheels exist for CPython up to 3.11 here, and it needs NumPy < 1.24 (it uses
# np.bool, removed in 1.24), hence the pins.  Re-running on an existing venv
# re-checks the pins and the import.  benchmarks/run.py finds the default
# location by itself; point it elsewhere with MXNET_VENV=... or --mxnet-python.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${MXNET_VENV:-$repo_root/.venv-mxnet}}"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
pins=(numpy==1.23.5 mxnet==1.9.1)

echo "creating MXNet venv at $venv with $python ($("$python" --version 2>&1))"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet "${pins[@]}"

# MXNet imports fine but fails later without its MKLDNN (oneDNN) backend: check both.
"$venv/bin/python" - <<'PY'
import mxnet as mx, numpy as np
assert mx.__version__ == "1.9.1", mx.__version__
assert np.__version__ == "1.23.5", np.__version__
assert mx.runtime.Features().is_enabled("MKLDNN"), "this MXNet build lacks MKLDNN"
y = mx.nd.Deconvolution(mx.nd.ones((1, 2, 3, 3)), mx.nd.ones((2, 1, 2, 2)),
                        kernel=(2, 2), num_filter=1, no_bias=True)
assert y.shape == (1, 1, 4, 4) and float(y.asnumpy().max()) == 8.0, y
print(f"ok: mxnet {mx.__version__} (MKLDNN), numpy {np.__version__}")
PY
echo "use it with: MXNET_VENV=$venv python benchmarks/run.py   (the default location needs nothing)"
