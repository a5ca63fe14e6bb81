"""The reference itself, checked against hand-computed cases, its own adjoint
identities and (when installed) PyTorch's conv_transpose, so that the other
test files can trust it."""
import numpy as np
import pytest
from hypothesis import given, settings
from numpy.testing import assert_allclose, assert_array_equal

from reference import mxnet_pads, output_spatial, reference_backward, reference_forward
from strategies import EDGE_CASES, configs, seeds


def fwd_1d(data, taps, stride=1, dilate=1, pad_l=0, pad_r=0, bias=None):
    """One sample, one channel in and out, 1-D."""
    out = reference_forward(np.array(data, float)[None, None], np.array(taps, float)[None, None],
                            bias, (len(taps),), (stride,), (dilate,), (pad_l,), (pad_r,), 1)
    return out[0, 0]


# data [1, 2, 3] through kernel [10, 1] with stride 2: each input pixel i writes
# (10*x, x) to output pixels (2i, 2i+1).
@pytest.mark.parametrize("pad_l, pad_r, expected", [
    (0, 0, [10, 1, 20, 2, 30, 3]),
    (1, 1, [1, 20, 2, 30]),              # pad 1
    (1, 0, [1, 20, 2, 30, 3]),           # pad 1, adj 1
    (0, -1, [10, 1, 20, 2, 30, 3, 0]),   # pad 0, adj 1: grows by one zero
    (2, -1, [20, 2, 30, 3, 0]),          # pad 2, adj 3 (only valid with stride 4)
])
def test_forward_kernel_1_2_stride_2(pad_l, pad_r, expected):
    assert_array_equal(fwd_1d([1, 2, 3], [10, 1], stride=2, pad_l=pad_l, pad_r=pad_r),
                       expected)


def test_forward_stride_1_overlaps_sum():
    assert_array_equal(fwd_1d([1, 2, 3], [1, 10]), [1, 12, 23, 30])


def test_forward_dilation():
    # taps at offsets 0 and 2
    assert_array_equal(fwd_1d([1, 2, 3], [1, 10], dilate=2), [1, 2, 13, 20, 30])


def test_forward_stride_larger_than_kernel_leaves_zeros_and_bias():
    assert_array_equal(fwd_1d([1, 2], [5], stride=3, pad_r=-1, bias=np.array([0.5])),
                       [5.5, 0.5, 0.5, 10.5, 0.5])


def test_forward_2d_block_upsampling():
    data = np.array([[1., 2.], [3., 4.]])[None, None]
    out = reference_forward(data, np.ones((1, 1, 2, 2)), None, (2, 2), (2, 2), (1, 1),
                            (0, 0), (0, 0), 1)
    assert_array_equal(out[0, 0], [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]])


def test_forward_groups_and_channel_sum():
    data = np.array([[[1.], [2.], [3.], [4.]]])          # N=1, C=4, W=1
    weight = np.array([[[1.]], [[10.]], [[100.]], [[1000.]]])  # (C_in=4, OCg=1, k=1)
    one = ((1,), (1,), (1,), (0,), (0,))
    # two groups of two input channels: output channel g sums its own group
    assert_array_equal(reference_forward(data, weight, None, *one, 2)[0, :, 0], [21, 4300])
    # four groups: no mixing at all
    assert_array_equal(reference_forward(data, weight, np.array([1., 2, 3, 4]), *one, 4)[0, :, 0],
                       [2, 22, 303, 4004])
    # one group: everything sums into the single output channel
    assert_array_equal(reference_forward(data, weight, None, *one, 1)[0, :, 0], [4321])


def test_backward_hand_computed():
    og = np.arange(1., 7.)[None, None]           # (1, 1, 6)
    data = np.array([[[1., 2., 3.]]])
    weight = np.array([[[10., 1.]]])
    dgrad, wgrad, bgrad = reference_backward(og, data, weight, (2,), (2,), (1,), (0,), (0,), 1)
    # dgrad[i] = 10*og[2i] + og[2i+1]; wgrad[k] = sum_i data[i] * og[2i+k]
    assert_array_equal(dgrad, [[[12, 34, 56]]])
    assert_array_equal(wgrad, [[[1 + 6 + 15, 2 + 8 + 18]]])
    assert_array_equal(bgrad, [21])
    assert reference_backward(og, data, weight, (2,), (2,), (1,), (0,), (0,), 1,
                              with_bias=False)[2] is None


@pytest.mark.parametrize("args, expected", [
    # kernel, stride, dilate, pad, adj, target_shape, in_spatial
    (((3, 3), (2, 2), (1, 1), (0, 0), (1, 1), (), (5, 5)), ((0, 0), (-1, -1))),
    (((4,), (2,), (1,), (1,), (0,), (), (5,)), ((1,), (1,))),
    (((2,), (2,), (1,), (), (), (), (3,)), ((0,), (0,))),                 # empty = zeros
    (((3,), (2,), (1,), (2,), (1,), (8,), (4,)), ((1,), (0,))),          # full 9 -> 8
    (((2,), (3,), (2,), (0,), (0,), (6,), (3,)), ((2,), (1,))),          # full 9 -> 6
    (((3,), (2,), (1,), (1,), (1,), (0,), (4,)), ((1,), (0,))),          # all-zero target
    (((3, 3), (1, 1), (1, 1), (0, 0), (0, 0), (4, 6), (4, 4)), ((1, 0), (1, 0))),
])
def test_mxnet_pads(args, expected):
    assert mxnet_pads(*args) == expected


def test_output_spatial():
    assert output_spatial((5, 5), (3, 3), (2, 2), (1, 1), (0, 0), (-1, -1)) == (12, 12)
    assert output_spatial((4,), (3,), (2,), (1,), (1,), (0,)) == (8,)


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_target_shape_is_reached(name):
    cfg = EDGE_CASES[name]
    if cfg.target_shape:
        assert cfg.out_spatial == cfg.target_shape


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_off_by_one_crop_is_detectable(name):
    """Shifting the crop by one pixel changes the result beyond every tolerance
    used in this suite, so a comparison against the reference would catch it."""
    cfg = EDGE_CASES[name]
    data, weight, bias = cfg.arrays(seed=0)
    (pad_l, pad_r), last = cfg.pads, cfg.ndim - 1
    shift = lambda t, d: t[:last] + (t[last] + d,)  # noqa: E731
    moved = reference_forward(data, weight, bias, cfg.kernel, cfg.stride, cfg.dilate,
                              shift(pad_l, 1), shift(pad_r, -1), cfg.num_group)
    assert np.abs(moved - cfg.ref_forward(data, weight, bias)).max() > 1e-2


@settings(max_examples=80, deadline=None)
@given(cfg=configs(), seed=seeds)
def test_backward_is_adjoint_of_forward(cfg, seed):
    """<fwd(x, w), g> = <x, dgrad(g)> = <w, wgrad(g)> (forward is bilinear)."""
    data, weight, bias = cfg.arrays(seed)
    og = cfg.out_grad(seed)
    dgrad, wgrad, bgrad = cfg.ref_backward(og, data, weight)
    inner = np.sum(cfg.ref_forward(data, weight, None) * og)
    assert_allclose(np.sum(data * dgrad), inner, rtol=1e-12, atol=1e-12)
    assert_allclose(np.sum(weight * wgrad), inner, rtol=1e-12, atol=1e-12)
    if bias is not None:
        assert_allclose(np.sum(bias * bgrad),
                        np.sum((cfg.ref_forward(data, weight, bias)
                                - cfg.ref_forward(data, weight, None)) * og), atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(cfg=configs(), seed=seeds)
def test_matches_pytorch_conv_transpose(cfg, seed):
    """MXNet's (pad, adj) is PyTorch's (padding, output_padding) with the same
    weight layout (see design notes), an implementation written by others."""
    torch = pytest.importorskip("torch")
    conv = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
            3: torch.nn.functional.conv_transpose3d}[cfg.ndim]
    data, weight, bias = cfg.arrays(seed)
    pad_l, pad_r = cfg.pads
    as_t = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    expected = conv(as_t(data), as_t(weight), as_t(bias), stride=cfg.stride, padding=pad_l,
                    output_padding=tuple(left - right for left, right in zip(pad_l, pad_r)),
                    groups=cfg.num_group, dilation=cfg.dilate).numpy()
    got = cfg.ref_forward(data, weight, bias)
    assert got.shape == expected.shape == cfg.out_shape
    assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
