"""``python -m mxdeconv``: the runtime report and the self-check."""
import re
import subprocess
import sys

import mxdeconv
from mxdeconv import __main__ as cli


def test_python_m_mxdeconv_prints_the_runtime_and_passes_its_check():
    result = subprocess.run([sys.executable, "-m", "mxdeconv"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    info = mxdeconv.runtime_info()
    assert re.search(rf"^oneDNN +{re.escape(info['onednn_version'])}$", result.stdout, re.M)
    assert re.search(rf"^cpu_isa +{info['cpu_isa']}$", result.stdout, re.M)
    for expected in ("plan cache", "tuning", "threads", "self-check"):
        assert expected in result.stdout, result.stdout
    assert result.stdout.rstrip().endswith(": ok"), result.stdout


def test_no_check_prints_the_runtime_only(capsys):
    assert cli.main(["--no-check"]) == 0
    out = capsys.readouterr().out
    assert "threads" in out and "self-check" not in out


def test_the_check_fails_when_onednn_disagrees(monkeypatch, capsys):
    real = cli._run

    def wrong(impl, arrays):
        results = real(impl, arrays)
        return results if impl == "numpy" else (results[0] + 1.0,) + results[1:]

    monkeypatch.setattr(cli, "_run", wrong)
    assert cli.main([]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_switched_off_onednn_skips_the_comparison(capsys):
    previous = mxdeconv.set_onednn_enabled(False)
    try:
        assert cli.main([]) == 0
    finally:
        mxdeconv.set_onednn_enabled(previous)
    assert "skipped" in capsys.readouterr().out
