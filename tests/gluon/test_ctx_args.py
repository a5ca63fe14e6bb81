"""``ctx=`` wherever MXNet 1.9.1's Gluon API takes one: CPU contexts are accepted
(a Context, ``"cpu"``/``"cpu(0)"``, or a list of them), a GPU raises MXNetError,
anything else TypeError, and a refused call changes nothing."""
import re

import numpy as np
import pytest

import mxdeconv
from mxdeconv import MXNetError, gluon, nd

CPU_FORMS = [None, mxdeconv.cpu(), mxdeconv.cpu(0), "cpu", "cpu(0)", [mxdeconv.cpu(0)],
             (mxdeconv.cpu(0), "cpu(0)")]
GPU_FORMS = [mxdeconv.gpu(0), "gpu(1)", [mxdeconv.cpu(0), mxdeconv.gpu(0)]]
JUNK = [(3, TypeError, r"ctx must be a Context .*got 3 of type int"),
        ("tpu", MXNetError, r"ctx must be a context such as 'cpu\(0\)', got 'tpu'"),
        ([], MXNetError, r"ctx must name at least one context, got \[\]"),
        ([mxdeconv.cpu(), 0], TypeError, r"ctx must be a Context .*got 0 of type int")]
GPU_MESSAGE = r"ctx=gpu\(\d\): mxdeconv runs on the CPU only"


def _layer(**kwargs):
    return gluon.Conv2DTranspose(2, 3, in_channels=2, **kwargs)


# -- Block / ParameterDict / Parameter .initialize(ctx=) -----------------------------------
INITIALIZERS = {
    "block": lambda layer, ctx: layer.initialize(ctx=ctx),
    "parameter_dict": lambda layer, ctx: layer.collect_params().initialize(ctx=ctx),
    "parameter": lambda layer, ctx: layer.weight.initialize(ctx=ctx),
}


@pytest.mark.parametrize("how", sorted(INITIALIZERS))
@pytest.mark.parametrize("ctx", CPU_FORMS, ids=repr)
def test_initialize_takes_cpu_contexts(how, ctx):
    layer = _layer()
    INITIALIZERS[how](layer, ctx)
    assert layer.weight.data().shape == (2, 2, 3, 3)
    assert set(layer.weight.list_ctx()) == {mxdeconv.cpu(0)}


@pytest.mark.parametrize("how", sorted(INITIALIZERS))
@pytest.mark.parametrize("ctx", GPU_FORMS, ids=repr)
def test_initialize_refuses_a_gpu(how, ctx):
    layer = _layer()
    with pytest.raises(MXNetError, match=GPU_MESSAGE):
        INITIALIZERS[how](layer, ctx)
    with pytest.raises(MXNetError, match="has not been initialized"):
        layer.weight.data()


@pytest.mark.parametrize("how", sorted(INITIALIZERS))
@pytest.mark.parametrize("ctx, error, pattern", JUNK, ids=[repr(j[0]) for j in JUNK])
def test_initialize_refuses_junk(how, ctx, error, pattern):
    layer = _layer()
    with pytest.raises(error) as info:
        INITIALIZERS[how](layer, ctx)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


def test_a_refused_ctx_leaves_an_initialized_layer_as_it_was():
    layer = _layer()
    layer.initialize(init=gluon.One())
    with pytest.raises(MXNetError, match=GPU_MESSAGE):
        layer.initialize(init=gluon.Zero(), ctx=mxdeconv.gpu(), force_reinit=True)
    assert layer.weight.data().asnumpy().min() == 1.0
    assert layer.weight.list_ctx() == [mxdeconv.cpu(0)]


def test_deferred_initialization_keeps_its_contexts():
    layer = gluon.Conv2DTranspose(2, 3)
    layer.initialize(ctx=[mxdeconv.cpu(0), mxdeconv.cpu(1)])
    assert layer.weight.list_ctx() == [mxdeconv.cpu(0), mxdeconv.cpu(1)]
    layer(nd.ones((1, 4, 3, 3)))
    assert layer.weight.list_ctx() == [mxdeconv.cpu(0), mxdeconv.cpu(1)]
    assert layer.weight.data(mxdeconv.cpu(1)) is layer.weight.data(mxdeconv.cpu(0))


# -- Parameter.data(ctx=) / grad(ctx=) ---------------------------------------------------
@pytest.mark.parametrize("method", ["data", "grad"])
def test_data_and_grad_take_a_context_they_were_initialized_on(method):
    layer = _layer()
    layer.initialize()
    get = getattr(layer.weight, method)
    for ctx in (None, mxdeconv.cpu(0), "cpu", "cpu(0)"):
        assert get(ctx) is get()
    with pytest.raises(MXNetError, match=re.escape(
            f"Parameter '{layer.weight.name}' was not initialized on context cpu(1). It was "
            "only initialized on [cpu(0)].")):
        get(mxdeconv.cpu(1))
    with pytest.raises(MXNetError, match=GPU_MESSAGE):
        get(mxdeconv.gpu(0))
    with pytest.raises(TypeError, match=r"ctx must be a Context .*got \[cpu\(0\)\] of type list"):
        get([mxdeconv.cpu(0)])
    with pytest.raises(TypeError, match=r"ctx must be a Context .*got 0 of type int"):
        get(0)


def test_data_checks_ctx_before_the_state():
    param = gluon.Parameter("w", shape=(2,))
    with pytest.raises(MXNetError, match=GPU_MESSAGE):
        param.data(mxdeconv.gpu(0))
    with pytest.raises(MXNetError, match="has not been initialized"):
        param.data(mxdeconv.cpu(0))


# -- list_ctx / reset_ctx ----------------------------------------------------------------
def test_list_ctx_and_reset_ctx():
    layer = _layer()
    with pytest.raises(MXNetError, match="has not been initialized"):
        layer.weight.list_ctx()
    with pytest.raises(MXNetError, match="Cannot reset context for Parameter"):
        layer.weight.reset_ctx(mxdeconv.cpu())
    with pytest.raises(MXNetError, match="Cannot reset context for Parameter"):
        layer.collect_params().reset_ctx(mxdeconv.cpu())
    layer.initialize(ctx="cpu(0)")
    params = layer.collect_params()
    assert params.list_ctx() == [mxdeconv.cpu(0)]
    params.reset_ctx([mxdeconv.cpu(0), "cpu(2)"])
    assert layer.bias.list_ctx() == [mxdeconv.cpu(0), mxdeconv.cpu(2)]
    assert layer.weight.data("cpu(2)") is layer.weight.data()
    with pytest.raises(MXNetError, match=GPU_MESSAGE):
        params.reset_ctx(mxdeconv.gpu(0))
    with pytest.raises(TypeError, match=r"ctx must be a Context .*got 1.5 of type float"):
        layer.weight.reset_ctx(1.5)
    assert params.list_ctx() == [mxdeconv.cpu(0), mxdeconv.cpu(2)]
    layer.weight.reset_ctx(None)
    assert layer.weight.list_ctx() == [mxdeconv.cpu(0)]


# -- load_parameters(ctx=) ---------------------------------------------------------------
def test_load_parameters_ctx(tmp_path):
    path = str(tmp_path / "p.npz")
    source = _layer()
    source.initialize(init=gluon.One())
    source.save_parameters(path)

    fresh = _layer()
    fresh.load_parameters(path, ctx="cpu(0)")
    assert fresh.weight.list_ctx() == [mxdeconv.cpu(0)]
    assert fresh.weight.data().asnumpy().min() == 1.0

    other = _layer()
    other.load_parameters(path, ctx=[mxdeconv.cpu(1)])
    assert other.bias.list_ctx() == [mxdeconv.cpu(1)]

    loaded = _layer()
    loaded.initialize(init=gluon.Zero())
    with pytest.raises(MXNetError, match=GPU_MESSAGE):
        loaded.load_parameters(path, ctx=mxdeconv.gpu(0))
    with pytest.raises(TypeError, match=r"ctx must be a Context .*got b'cpu\(0\)' of "
                                        r"type bytes"):
        loaded.load_parameters(path, ctx=b"cpu(0)")
    with pytest.raises(MXNetError, match=r"ctx=\[cpu\(1\)\] but it was initialized on "
                                         r"\[cpu\(0\)\]"):
        loaded.load_parameters(path, ctx=mxdeconv.cpu(1))
    assert np.all(loaded.weight.data().asnumpy() == 0)  # all or nothing
    loaded.load_parameters(path, ctx=mxdeconv.cpu(0))
    assert np.all(loaded.weight.data().asnumpy() == 1)
