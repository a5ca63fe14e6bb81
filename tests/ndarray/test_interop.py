"""Interop: __array__, DLPack export (__dlpack__, __dlpack_device__), nd.from_dlpack,
nd.array of foreign tensors.  The PyTorch tests skip where torch is not installed
(CI); the NumPy ones always run."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

import mxdeconv
from mxdeconv import MXNetError, nd
from reference import reference_forward

# A layer for which oneDNN on AVX-512 picks blocked layouts (see test_layouts).
BLOCKED = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=32)


#: oneDNN's own first choice: blocked layouts here on every run (conftest).
pytestmark = pytest.mark.usefixtures("onednn_first_choice")


def _blocked_output():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((2, 32, 6, 6)).astype(np.float32)
    weight = (0.1 * rng.standard_normal((32, 32, 3, 3))).astype(np.float32)
    out = nd.Deconvolution(data, weight, **BLOCKED)
    expected = reference_forward(data, weight, None, kernel=(3, 3), stride=(2, 2),
                                 dilate=(1, 1), pad_l=(1, 1), pad_r=(0, 0), num_group=1)
    return out, expected


def _needs_blocked(arr):
    if arr.layout == "default":
        pytest.skip("oneDNN chose the plain layout on this CPU; nothing to reorder")


# -- __array__ ----------------------------------------------------------------------
def test_asarray_is_a_view_of_the_default_layout_buffer():
    x = nd.array([1.0, 2.0])
    view = np.asarray(x)
    assert np.shares_memory(view, np.asarray(x))
    view[0] = 9
    assert x.asnumpy().tolist() == [9.0, 2.0]
    assert not np.shares_memory(x.asnumpy(), view)         # asnumpy copies


def test_asarray_reorders_a_blocked_array_once_in_place():
    out, expected = _blocked_output()
    _needs_blocked(out)
    mxdeconv.reset_reorder_counts()
    first = np.asarray(out)
    assert out.layout == "default"
    second = np.asarray(out)
    assert np.shares_memory(first, second)
    assert mxdeconv.reorder_counts().get("to_default", 0) == 1
    assert_allclose(first, expected, rtol=1e-4, atol=1e-4)


def test_asarray_dtype_and_copy():
    x = nd.ones((2,))
    converted = np.asarray(x, dtype=np.float64)
    assert converted.dtype == np.float64 and not np.shares_memory(converted, np.asarray(x))
    assert not np.shares_memory(x.__array__(copy=True), np.asarray(x))
    with pytest.raises(ValueError, match="without a copy"):
        x.__array__(np.float64, copy=False)


# -- DLPack with NumPy ------------------------------------------------------------------
def test_numpy_from_dlpack_is_zero_copy():
    x = nd.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.__dlpack_device__() == (1, 0)
    view = np.from_dlpack(x)
    assert view.shape == (2, 3) and view.dtype == np.float32
    assert np.shares_memory(view, np.asarray(x))
    view[1, 2] = -1
    assert x.asnumpy()[1, 2] == -1


def test_numpy_from_dlpack_of_a_blocked_array_sees_the_default_layout():
    out, expected = _blocked_output()
    _needs_blocked(out)
    view = np.from_dlpack(out)
    assert out.layout == "default"
    assert np.shares_memory(view, np.asarray(out))
    assert_allclose(view, expected, rtol=1e-4, atol=1e-4)


def test_nd_from_dlpack_shares_memory_both_ways():
    values = np.zeros((2, 3), np.float32)
    x = nd.from_dlpack(values)
    assert x.shape == (2, 3) and x.layout == "default"
    values[0, 1] = 4
    assert x.asnumpy()[0, 1] == 4
    np.asarray(x)[1, 0] = 5
    assert values[1, 0] == 5


def test_nd_from_dlpack_accepts_capsules_and_ndarrays():
    x = nd.array([[1.0, 2.0]])
    assert nd.from_dlpack(x).asnumpy().tolist() == [[1.0, 2.0]]
    read = nd.from_dlpack(nd.to_dlpack_for_read(x))
    assert read.asnumpy().tolist() == [[1.0, 2.0]]
    write = nd.from_dlpack(nd.to_dlpack_for_write(x))
    np.asarray(write)[0, 0] = 7
    assert x.asnumpy()[0, 0] == 7


def test_nd_from_dlpack_refuses_to_copy_silently():
    with pytest.raises(MXNetError, match="C-contiguous"):
        nd.from_dlpack(np.zeros((3, 2), np.float32).T)
    with pytest.raises(TypeError, match="unsupported dtype"):
        nd.from_dlpack(np.zeros(3, np.int16))


def test_from_dlpack_result_feeds_deconvolution():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    weight = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    y = nd.Deconvolution(nd.from_dlpack(data), nd.from_dlpack(weight), kernel=(2, 2),
                         num_filter=3)
    expected = reference_forward(data, weight, None, kernel=(2, 2), stride=(1, 1),
                                 dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0), num_group=1)
    assert_allclose(y.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_array_default_dtypes():
    """float32 from anything but an NDArray, as in MXNet 1.9.1 (a port's
    ``nd.array(np.random.randn(...))`` runs on oneDNN)."""
    assert nd.array([1.5, 2.5]).dtype == np.float32
    assert nd.array(np.ones(2)).dtype == np.float32
    assert nd.array(np.ones(2, np.float16)).dtype == np.float32
    assert nd.array(np.ones(2, np.int64)).dtype == np.float32
    assert nd.array(np.ones(2), dtype="float64").dtype == np.float64
    assert nd.array(nd.array(np.ones(2), dtype="float64")).dtype == np.float64


# -- PyTorch ------------------------------------------------------------------------------
def test_torch_from_dlpack_is_zero_copy():
    torch = pytest.importorskip("torch")
    x = nd.array(np.arange(4, dtype=np.float32))
    t = torch.from_dlpack(x)
    assert t.data_ptr() == np.asarray(x).ctypes.data
    t[0] = 42
    assert x.asnumpy()[0] == 42


def test_torch_from_dlpack_of_a_blocked_array():
    torch = pytest.importorskip("torch")
    out, expected = _blocked_output()
    _needs_blocked(out)
    t = torch.from_dlpack(out)
    assert out.layout == "default" and t.data_ptr() == np.asarray(out).ctypes.data
    assert_allclose(t.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_nd_from_dlpack_of_a_torch_tensor_is_zero_copy():
    torch = pytest.importorskip("torch")
    t = torch.zeros(2, 3)
    x = nd.from_dlpack(t)
    assert np.asarray(x).ctypes.data == t.data_ptr()
    t[1, 1] = 3
    assert x.asnumpy()[1, 1] == 3
    with pytest.raises(MXNetError, match="C-contiguous"):
        nd.from_dlpack(t.T)


def test_nd_array_of_torch_tensors_copies():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    x = nd.array(t)
    assert x.dtype == np.float32 and x.asnumpy().tolist() == t.tolist()
    assert np.asarray(x).ctypes.data != t.data_ptr()
    assert nd.array(t.T).asnumpy().tolist() == t.T.tolist()         # strided: fine, copied
    assert nd.array(t.requires_grad_()).shape == (2, 3)             # detached for the copy
    assert nd.array(torch.ones(2, dtype=torch.float64)).dtype == np.float32  # as MXNet
    assert nd.array(torch.ones(2, dtype=torch.float64), dtype="float64").dtype == np.float64


def test_deconvolution_agrees_with_torch_conv_transpose_through_dlpack():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    data = torch.randn(2, 4, 5, 5, generator=gen)
    weight = torch.randn(4, 3, 3, 3, generator=gen)  # both use (C_in, C_out/G, *k)
    bias = torch.randn(6, generator=gen)
    expected = torch.nn.functional.conv_transpose2d(data, weight, bias, stride=2, padding=1,
                                                    output_padding=1, groups=2)
    y = nd.Deconvolution(nd.from_dlpack(data), nd.array(weight), nd.from_dlpack(bias),
                         kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
                         num_filter=6, num_group=2, no_bias=False)
    result = torch.from_dlpack(y)
    assert_allclose(result.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
