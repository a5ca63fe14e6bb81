"""``MXNET_MKLDNN_ENABLED=0`` carried over from an MXNet program: still honoured
(the NumPy path runs), but it warns once, naming the cost and
``MXDECONV_ONEDNN=0``; ``MXDECONV_ONEDNN=0`` alone, or both, do not warn.
Each case imports mxdeconv in a fresh interpreter (the variables are read at
import)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import mxdeconv
print(json.dumps({"enabled": mxdeconv.onednn_enabled(),
                  "warnings": [(w.category.__name__, str(w.message)) for w in caught]}))
"""


def probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MXDECONV_ONEDNN", "MXNET_MKLDNN_ENABLED")}
    done = subprocess.run([sys.executable, "-c", PROBE], env=dict(clean, **env),
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def mkldnn_warnings(result: dict) -> list:
    return [w for w in result["warnings"] if "MXNET_MKLDNN_ENABLED" in w[1]]


def test_mxnet_variable_is_honoured_with_one_warning() -> None:
    result = probe(MXNET_MKLDNN_ENABLED="0")
    assert result["enabled"] is False
    found = mkldnn_warnings(result)
    assert len(found) == 1
    category, message = found[0]
    assert category == "UserWarning"
    assert "NumPy path" in message and "slower" in message and "MXDECONV_ONEDNN=0" in message


@pytest.mark.parametrize("env", [{"MXDECONV_ONEDNN": "0"},
                                 {"MXDECONV_ONEDNN": "0", "MXNET_MKLDNN_ENABLED": "0"},
                                 {"MXNET_MKLDNN_ENABLED": "1"}])
def test_no_warning_when_meant_or_on(env: dict) -> None:
    result = probe(**env)
    assert mkldnn_warnings(result) == []
    assert result["enabled"] is (env.get("MXDECONV_ONEDNN") != "0")
