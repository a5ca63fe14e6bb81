"""Deconvolution configurations shared by the test files: a Hypothesis strategy and
hand-picked edge cases, each a :class:`Config` that knows its MXNet kwargs, its
shapes (computed here and in ``reference``, never by ``mxdeconv``), random
inputs and the reference results."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np
from hypothesis import strategies as st

from reference import mxnet_pads, output_spatial, reference_backward, reference_forward

Shape = Tuple[int, ...]
REQS = ("write", "inplace", "add", "null")
#: Largest input spatial extent drawn per number of spatial dims (keeps the
#: pure-Python reference fast).
MAX_SPATIAL = {1: 5, 2: 4, 3: 3}


@dataclass(frozen=True)
class Config:
    batch: int
    num_group: int
    in_per_group: int
    out_per_group: int
    spatial: Shape
    kernel: Shape
    stride: Shape
    dilate: Shape
    pad: Shape
    adj: Shape
    target_shape: Shape = ()  # () or all zeros: not used
    no_bias: bool = True

    # -- shapes ---------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.kernel)

    @property
    def in_channels(self) -> int:
        return self.num_group * self.in_per_group

    @property
    def num_filter(self) -> int:
        return self.num_group * self.out_per_group

    @property
    def data_shape(self) -> Shape:
        return (self.batch, self.in_channels) + self.spatial

    @property
    def weight_shape(self) -> Shape:
        return (self.in_channels, self.out_per_group) + self.kernel

    @property
    def bias_shape(self) -> Optional[Shape]:
        return None if self.no_bias else (self.num_filter,)

    @property
    def pads(self) -> Tuple[Shape, Shape]:
        """(pad_l, pad_r) from the independent reference helper."""
        return mxnet_pads(self.kernel, self.stride, self.dilate, self.pad, self.adj,
                          self.target_shape, self.spatial)

    @property
    def out_spatial(self) -> Shape:
        return output_spatial(self.spatial, self.kernel, self.stride, self.dilate,
                              *self.pads)

    @property
    def out_shape(self) -> Shape:
        return (self.batch, self.num_filter) + self.out_spatial

    @property
    def max_terms(self) -> int:
        """The most products summed into any one element of any result.

        forward: C_in/G * K (+ bias); data grad: OC/G * K; weight grad: N * in
        pixels; bias grad: N * out pixels.
        """
        taps = math.prod(self.kernel)
        return max(self.in_per_group * taps + 1, self.out_per_group * taps,
                   self.batch * math.prod(self.spatial),
                   self.batch * math.prod(self.out_spatial))

    def kwargs(self) -> Dict[str, object]:
        """MXNet's keyword arguments for this configuration."""
        kw = dict(kernel=self.kernel, stride=self.stride, dilate=self.dilate, pad=self.pad,
                  adj=self.adj, num_filter=self.num_filter, num_group=self.num_group,
                  no_bias=self.no_bias)
        if self.target_shape:
            kw["target_shape"] = self.target_shape
        return kw

    # -- values ---------------------------------------------------------------
    def arrays(self, seed: int, dtype=np.float64):
        """Random (data, weight, bias) in [-1, 1); bias is None when no_bias."""
        rng = np.random.default_rng(seed)
        draw = lambda shape: rng.uniform(-1, 1, size=shape).astype(dtype)  # noqa: E731
        bias = None if self.no_bias else draw(self.bias_shape)
        return draw(self.data_shape), draw(self.weight_shape), bias

    def out_grad(self, seed: int, dtype=np.float64) -> np.ndarray:
        rng = np.random.default_rng(seed + 1)
        return rng.uniform(-1, 1, size=self.out_shape).astype(dtype)

    def _geometry_args(self):
        pad_l, pad_r = self.pads
        return dict(kernel=self.kernel, stride=self.stride, dilate=self.dilate,
                    pad_l=pad_l, pad_r=pad_r, num_group=self.num_group)

    def ref_forward(self, data, weight, bias) -> np.ndarray:
        return reference_forward(data, weight, bias, **self._geometry_args())

    def ref_backward(self, out_grad, data, weight):
        return reference_backward(out_grad, data, weight, with_bias=not self.no_bias,
                                  **self._geometry_args())


def full_size(spatial: int, kernel: int, stride: int, dilate: int) -> int:
    """Uncropped output length."""
    return stride * (spatial - 1) + dilate * (kernel - 1) + 1


@st.composite
def configs(draw, ndims=(1, 2, 3), min_batch: int = 1, max_batch: int = 2,
            target: Optional[bool] = None, no_bias: Optional[bool] = None,
            channels=st.integers(1, 2), max_groups: int = 3,
            max_spatial: Optional[int] = None) -> Config:
    """A valid configuration: every output dim >= 1, adj < stride.

    ``target``: None draws whether to use target_shape, True/False forces it.
    ``channels``: strategy for the input and output channels per group.
    """
    ndim = draw(st.sampled_from(ndims))
    small = st.integers(1, 3)
    kernel = tuple(draw(small) for _ in range(ndim))
    stride = tuple(draw(small) for _ in range(ndim))
    dilate = tuple(draw(st.integers(1, 2)) for _ in range(ndim))
    spatial = tuple(draw(st.integers(1, max_spatial or MAX_SPATIAL[ndim]))
                    for _ in range(ndim))
    adj = tuple(draw(st.integers(0, s - 1)) for s in stride)
    full = [full_size(*args) for args in zip(spatial, kernel, stride, dilate)]
    use_target = draw(st.booleans()) if target is None else target
    if use_target:
        # Reachable targets; with stride 1 only an even total (adj = 0) is valid.
        target_shape = tuple(
            draw(st.integers(1, f).filter(lambda t, f=f, s=s: s > 1 or (f - t) % 2 == 0))
            for f, s in zip(full, stride))
        # pad and adj are ignored with a target shape: draw them anyway.
        pad = tuple(draw(st.integers(0, 2)) for _ in range(ndim))
    else:
        target_shape = ()
        # output = full - 2*pad + adj must stay >= 1
        pad = tuple(draw(st.integers(0, min(2, (f + a - 1) // 2))) for f, a in zip(full, adj))
    return Config(
        batch=draw(st.integers(min_batch, max_batch)),
        num_group=draw(st.integers(1, max_groups)),
        in_per_group=draw(channels),
        out_per_group=draw(channels),
        spatial=spatial, kernel=kernel, stride=stride, dilate=dilate, pad=pad, adj=adj,
        target_shape=target_shape,
        no_bias=draw(st.booleans()) if no_bias is None else no_bias)


seeds = st.integers(0, 2**32 - 1)
#: Channel counts per group that make oneDNN choose blocked layouts (16-wide
#: blocks; 17 needs a padded block, 8 a half one).
wide_channels = st.sampled_from([8, 16, 17])
reqs = st.sampled_from(REQS)


def _edge(**fields) -> Config:
    base = dict(batch=2, num_group=1, in_per_group=2, out_per_group=2, no_bias=False)
    return Config(**{**base, **fields})


#: Cases that catch off-by-one crops: adj > pad (negative right crop), odd
#: target totals (adj inferred as 1), anisotropic everything, 3-D dilation.
EDGE_CASES = {
    # 1x2x5x5 -> 3, k3 s2 pad 0 adj 1: 12x12 output, right crop -1.
    "adj_gt_pad_2d": _edge(batch=1, out_per_group=3, spatial=(5, 5), kernel=(3, 3),
                           stride=(2, 2), dilate=(1, 1), pad=(0, 0), adj=(1, 1)),
    "kernel1_stride3_adj2": _edge(spatial=(3,), kernel=(1,), stride=(3,), dilate=(1,),
                                  pad=(0,), adj=(2,)),
    "target_odd_total_1d": _edge(spatial=(4,), kernel=(3,), stride=(2,), dilate=(1,),
                                 pad=(0,), adj=(0,), target_shape=(8,)),
    "target_pad2_adj1_1d": _edge(spatial=(3,), kernel=(2,), stride=(3,), dilate=(2,),
                                 pad=(0,), adj=(0,), target_shape=(6,)),
    "target_2d_mixed": _edge(num_group=2, in_per_group=1, spatial=(3, 2), kernel=(3, 2),
                             stride=(2, 3), dilate=(1, 2), pad=(1, 1), adj=(1, 0),
                             target_shape=(6, 5)),
    "anisotropic_2d": _edge(spatial=(3, 4), kernel=(3, 2), stride=(2, 3), dilate=(2, 1),
                            pad=(0, 1), adj=(1, 2)),
    "groups3_2d": _edge(num_group=3, in_per_group=2, out_per_group=1, spatial=(3, 3),
                        kernel=(2, 2), stride=(1, 2), dilate=(1, 1), pad=(1, 0),
                        adj=(0, 1)),
    "dilated_3d_groups": _edge(num_group=2, in_per_group=1, spatial=(2, 3, 2),
                               kernel=(2, 3, 2), stride=(1, 2, 2), dilate=(2, 1, 2),
                               pad=(1, 1, 0), adj=(0, 1, 1)),
    "target_3d": _edge(spatial=(2, 2, 3), kernel=(3, 2, 2), stride=(2, 1, 2),
                       dilate=(1, 2, 1), pad=(0, 0, 0), adj=(0, 0, 0),
                       target_shape=(4, 2, 6)),
}


#: Wide channel counts (blocked, padded layouts) in every dimensionality, with
#: and without groups.
BLOCKED_CASES = {
    "1d_c16": _edge(batch=1, in_per_group=16, out_per_group=16, spatial=(4,), kernel=(3,),
                    stride=(2,), dilate=(1,), pad=(1,), adj=(1,)),
    "2d_c17_g2": _edge(batch=1, num_group=2, in_per_group=17, out_per_group=8,
                       spatial=(3, 2), kernel=(2, 3), stride=(2, 1), dilate=(1, 2),
                       pad=(0, 1), adj=(1, 0)),
    "3d_c16": _edge(batch=1, in_per_group=16, out_per_group=16, spatial=(2, 2, 2),
                    kernel=(2, 2, 2), stride=(2, 2, 2), dilate=(1, 1, 1), pad=(0, 0, 0),
                    adj=(0, 1, 0)),
    "3d_c8_g2": _edge(batch=1, num_group=2, in_per_group=8, out_per_group=8,
                      spatial=(2, 2, 2), kernel=(2, 1, 2), stride=(1, 2, 2),
                      dilate=(2, 1, 1), pad=(0, 0, 1), adj=(0, 1, 1)),
    "3d_c1_g2": _edge(batch=1, num_group=2, in_per_group=1, out_per_group=1,
                      spatial=(2, 1, 2), kernel=(1, 1, 2), stride=(1, 1, 2),
                      dilate=(1, 1, 1), pad=(0, 0, 0), adj=(0, 0, 1)),
}
