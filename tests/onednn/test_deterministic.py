"""Deterministic mode: a layer's plan, once chosen in a process, never changes;
the same inputs give bitwise the same results across calls, threads and
processes (at one thread count); explain() says so."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mxdeconv
from mxdeconv import autograd, nd
from mxdeconv.onednn import planner as plans
from mxdeconv.onednn.planner import confirm
from helpers import planner_afresh, run_threads

#: A big layer (it would run provisionally and tune on its calls otherwise),
#: and a small one (tried on one thread and the caller's otherwise).
LAYERS = [((8, 256, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128,
                                no_bias=False)),
          ((2, 16, 5, 5), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=8,
                               no_bias=False))]


@pytest.fixture
def deterministic(monkeypatch):
    was = plans.set_deterministic(True)
    monkeypatch.setattr(confirm, "PROVISIONAL_MACS", 0)  # would run provisionally otherwise
    with planner_afresh(tuning=True, eager=False, monkeypatch=monkeypatch):
        yield
    plans.set_deterministic(was)


def _inputs(shape, params, seed=0):
    rng = np.random.default_rng(seed)
    weight_shape = (shape[1], params["num_filter"]) + params["kernel"]
    return (nd.array(rng.standard_normal(shape, dtype=np.float32)),
            nd.array(rng.standard_normal(weight_shape, dtype=np.float32) * 0.05),
            nd.array(rng.standard_normal(params["num_filter"], dtype=np.float32)))


def _step(data, weight, bias, params):
    """One training step's forward result and gradients, as NumPy arrays."""
    data, weight, bias = (a.copy() for a in (data, weight, bias))
    for array in (data, weight, bias):
        array.attach_grad()
    with autograd.record():
        out = nd.Deconvolution(data, weight, bias, **params)
        loss = (out * out).sum()
    loss.backward()
    return [a.asnumpy() for a in (out, data.grad, weight.grad, bias.grad)]


def test_settings_and_explain(deterministic):
    assert mxdeconv.deterministic_enabled() and not mxdeconv.tuning_enabled()
    assert mxdeconv.set_tuning(True) is True   # asked for, still not tuned
    assert not mxdeconv.tuning_enabled()
    shape, params = LAYERS[0]
    data, weight, bias = _inputs(shape, params)
    nd.Deconvolution(data, weight, bias, **params)
    text = mxdeconv.explain(data, weight, bias, **params)
    assert "deterministic mode: checked before its first call, never tuned" in text
    assert "provisional" not in text and plans.pending() == 0
    with pytest.raises(TypeError, match="set_deterministic: enabled must be a bool"):
        mxdeconv.set_deterministic(1)


@pytest.mark.parametrize("shape, params", LAYERS)
def test_bitwise_the_same_across_calls_and_threads(deterministic, shape, params):
    data, weight, bias = _inputs(shape, params)
    first = _step(data, weight, bias, params)
    for _ in range(30):  # tuning on calls would have switched plans by now
        again = _step(data, weight, bias, params)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)

    def worker(_):
        for _ in range(5):
            for a, b in zip(first, _step(data, weight, bias, params)):
                np.testing.assert_array_equal(a, b)
    run_threads(worker, 4)
    assert plans.pending() == 0


RESULTS = """
    import sys
    import numpy as np
    from mxdeconv import nd
    rng = np.random.default_rng(0)
    x = nd.array(rng.standard_normal((8, 256, 4, 4), dtype=np.float32))
    w = nd.array(rng.standard_normal((256, 128, 4, 4), dtype=np.float32) * 0.05)
    b = nd.array(rng.standard_normal(128, dtype=np.float32))
    params = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128, no_bias=False)
    outs = [nd.Deconvolution(x, w, b, **params).asnumpy() for _ in range(int(sys.argv[1]))]
    grads = nd.Deconvolution_backward(nd.ones((8, 128, 8, 8)), x, w, b, **params)
    np.save(sys.argv[2], np.concatenate([outs[-1].ravel()] + [g.asnumpy().ravel()
                                                              for g in grads]))
    """


def test_bitwise_the_same_across_processes(tmp_path):
    env = dict(os.environ, MXDECONV_DETERMINISTIC="1", MXDECONV_CACHE_DIR=str(tmp_path))
    for calls, name in ((1, "one.npy"), (40, "forty.npy")):
        run = subprocess.run([sys.executable, "-c", textwrap.dedent(RESULTS), str(calls),
                              str(tmp_path / name)], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "one.npy"), np.load(tmp_path / "forty.npy"))
