"""The benchmark's layer set, as data, and the arithmetic every contender shares.

A :class:`Layer` is a name, a data shape without the batch dimension and the
MXNet ``Deconvolution`` keyword arguments.  A :class:`Case` is one layer at one
batch size.  The geometry here (pad/adj from ``target_shape``, output shape)
is a small independent re-implementation of MXNet 1.9.1's shape rules, kept
separate from mxdeconv on purpose: the harness must not trust the package it
measures.  It is also what the PyTorch peer needs to translate the arguments.

This module imports only the standard library (plus NumPy inside
:func:`make_inputs`), so every process of the harness can use it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

Shape = Tuple[int, ...]

#: Batch sizes measured by default.
DEFAULT_BATCHES: Tuple[int, ...] = (1, 32)


@dataclass(frozen=True)
class Layer:
    """One deconvolution layer: ``data_shape`` is ``(C_in, *spatial)`` (no batch)."""

    name: str
    description: str
    data_shape: Shape
    kwargs: Mapping[str, Any]
    batches: Tuple[int, ...] = DEFAULT_BATCHES
    #: Why ``batches`` differs from the default, printed with the results.
    batch_note: str = ""
    #: Batch sizes measured by ``--quick`` (empty: not in the quick set).
    quick: Tuple[int, ...] = ()


def _layer(name: str, description: str, data_shape: Shape, **kwargs: Any) -> Layer:
    options = {key: kwargs.pop(key) for key in ("batches", "batch_note", "quick")
               if key in kwargs}
    return Layer(name, description, tuple(data_shape), dict(kwargs), **options)


LAYERS: List[Layer] = [
    _layer("dcgan_g1", "DCGAN generator: z 100 -> 512, 1x1 -> 4x4",
           (100, 1, 1), kernel=(4, 4), num_filter=512, no_bias=False),
    _layer("dcgan_g2", "DCGAN generator: 512 -> 256, 4x4 -> 8x8",
           (512, 4, 4), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256,
           no_bias=False, quick=(1, 32)),
    _layer("dcgan_g3", "DCGAN generator: 256 -> 128, 8x8 -> 16x16",
           (256, 8, 8), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128,
           no_bias=False),
    _layer("dcgan_g4", "DCGAN generator: 128 -> 64, 16x16 -> 32x32",
           (128, 16, 16), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64,
           no_bias=False),
    _layer("dcgan_g5", "DCGAN generator: 64 -> 3 (RGB), 32x32 -> 64x64",
           (64, 32, 32), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3,
           no_bias=False),
    _layer("fcn_up2x", "FCN/U-Net 2x upsampling: 256 -> 128, k2 s2, 32x32 -> 64x64",
           (256, 32, 32), kernel=(2, 2), stride=(2, 2), num_filter=128, no_bias=False,
           quick=(1,)),
    _layer("fcn_bilinear_dw", "FCN bilinear-style upsampling, depthwise (num_group=64), "
           "56x56 -> 112x112",
           (64, 56, 56), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64,
           num_group=64, no_bias=False),
    _layer("dilated", "dilated (dilate 2) k3 s2 upsampling: 64 -> 64, 32x32 -> 64x64",
           (64, 32, 32), kernel=(3, 3), stride=(2, 2), dilate=(2, 2), pad=(2, 2),
           adj=(1, 1), num_filter=64, no_bias=False),
    _layer("target_shape", "target_shape=(64, 64) k3 s2: 128 -> 64, 32x32 -> 64x64 "
           "(implies pad 1, adj 1)",
           (128, 32, 32), kernel=(3, 3), stride=(2, 2), target_shape=(64, 64),
           num_filter=64, no_bias=False, quick=(1,)),
    _layer("audio1d", "1-D audio upsampling: 128 -> 64, k16 s8, length 1024 -> 8192",
           (128, 1024), kernel=(16,), stride=(8,), pad=(4,), num_filter=64,
           no_bias=False, quick=(1,)),
    _layer("volume3d", "3-D: 64 -> 32, k4 s2 p1, 8x16x16 -> 16x32x32",
           (64, 8, 16, 16), kernel=(4, 4, 4), stride=(2, 2, 2), pad=(1, 1, 1),
           num_filter=32, no_bias=False),
    _layer("tiny", "tiny layer for per-call overhead: 8 -> 8, k3, 4x4 -> 6x6",
           (8, 4, 4), kernel=(3, 3), num_filter=8, no_bias=False, batches=(1,),
           batch_note="batch 1 only: it measures per-call overhead", quick=(1,)),
]

#: The layer whose timings give the per-call overhead figures.
OVERHEAD_LAYER = "tiny"


def layer_by_name(name: str) -> Layer:
    for layer in LAYERS:
        if layer.name == name:
            return layer
    raise KeyError(f"unknown layer {name!r}; known: {', '.join(known.name for known in LAYERS)}")


def _per_dim(kwargs: Mapping[str, Any], key: str, ndim: int, default: int) -> Shape:
    value = tuple(kwargs.get(key) or ())
    return value if value else (default,) * ndim


@dataclass(frozen=True)
class Geometry:
    """Resolved deconvolution arithmetic for one data shape (MXNet 1.9.1 rules)."""

    kernel: Shape
    stride: Shape
    dilate: Shape
    pad: Shape
    adj: Shape
    num_filter: int
    num_group: int
    no_bias: bool
    out_spatial: Shape

    @property
    def ndim(self) -> int:
        return len(self.kernel)


def resolve(data_shape: Shape, kwargs: Mapping[str, Any]) -> Geometry:
    """Resolve defaults and ``target_shape`` into explicit pad/adj and the output size.

    >>> resolve((1, 128, 32, 32), {"kernel": (3, 3), "stride": (2, 2),
    ...                            "target_shape": (64, 64), "num_filter": 64}).pad
    (1, 1)
    """
    kernel = tuple(kwargs["kernel"])
    ndim = len(kernel)
    stride = _per_dim(kwargs, "stride", ndim, 1)
    dilate = _per_dim(kwargs, "dilate", ndim, 1)
    spatial = tuple(data_shape[2:])
    full = tuple(stride[a] * (spatial[a] - 1) + dilate[a] * (kernel[a] - 1) + 1
                 for a in range(ndim))
    target = tuple(kwargs.get("target_shape") or ())
    if any(target):
        totals = tuple(f - t for f, t in zip(full, target))
        if any(t < 0 for t in totals):
            raise ValueError(f"too big target shape {target} for data {data_shape}")
        adj = tuple(t % 2 for t in totals)
        pad = tuple((t + 1) // 2 for t in totals)
    else:
        pad = _per_dim(kwargs, "pad", ndim, 0)
        adj = _per_dim(kwargs, "adj", ndim, 0)
    out_spatial = tuple(f - 2 * p + a for f, p, a in zip(full, pad, adj))
    return Geometry(kernel=kernel, stride=stride, dilate=dilate, pad=pad, adj=adj,
                    num_filter=int(kwargs["num_filter"]),
                    num_group=int(kwargs.get("num_group", 1)),
                    no_bias=bool(kwargs.get("no_bias", True)), out_spatial=out_spatial)


@dataclass(frozen=True)
class Case:
    """One layer at one batch size: everything a contender needs to set up."""

    layer: Layer
    batch: int
    geometry: Geometry = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "geometry", resolve(self.data_shape, self.kwargs))

    @property
    def key(self) -> str:
        return f"{self.layer.name}/b{self.batch}"

    @property
    def kwargs(self) -> Dict[str, Any]:
        return dict(self.layer.kwargs)

    @property
    def data_shape(self) -> Shape:
        return (self.batch,) + self.layer.data_shape

    @property
    def weight_shape(self) -> Shape:
        g = self.geometry
        return (self.layer.data_shape[0], g.num_filter // g.num_group) + g.kernel

    @property
    def bias_shape(self) -> Optional[Shape]:
        return None if self.geometry.no_bias else (self.geometry.num_filter,)

    @property
    def out_shape(self) -> Shape:
        return (self.batch, self.geometry.num_filter) + self.geometry.out_spatial

    @property
    def forward_flops(self) -> int:
        """``2 * N * C_in * prod(in_spatial) * (C_out / groups) * prod(kernel)``.

        This counts every (input pixel, tap) product, including taps whose
        target pixel is cropped away by ``pad``: a convention, not the work a
        direct algorithm must do (it skips those), so padded layers can show a
        little more GFLOP/s than the arithmetic really done.
        """
        g = self.geometry
        return (2 * self.batch * self.layer.data_shape[0] * math.prod(self.data_shape[2:])
                * (g.num_filter // g.num_group) * math.prod(g.kernel))

    @property
    def useful_fraction(self) -> float:
        """Share of the counted (input pixel, tap) products that land inside the output.

        Per dim, input ``i`` through tap ``k`` lands at ``i*stride + k*dilate - pad``;
        products outside ``[0, out)`` are cropped away.  The dims are independent.
        """
        g, fraction = self.geometry, 1.0
        for axis, size in enumerate(self.data_shape[2:]):
            hits = sum(1 for i in range(size) for k in range(g.kernel[axis])
                       if 0 <= i * g.stride[axis] + k * g.dilate[axis] - g.pad[axis]
                       < g.out_spatial[axis])
            fraction *= hits / (size * g.kernel[axis])
        return fraction

    @property
    def backward_flops(self) -> int:
        """Data gradient plus weight gradient: twice the forward."""
        return 2 * self.forward_flops

    def describe(self) -> Dict[str, Any]:
        g = self.geometry
        return {"layer": self.layer.name, "batch": self.batch,
                "description": self.layer.description, "batch_note": self.layer.batch_note,
                "data_shape": list(self.data_shape), "weight_shape": list(self.weight_shape),
                "bias_shape": None if self.bias_shape is None else list(self.bias_shape),
                "out_shape": list(self.out_shape), "kwargs": jsonable(self.kwargs),
                "resolved_pad": list(g.pad), "resolved_adj": list(g.adj),
                "forward_flops": self.forward_flops, "backward_flops": self.backward_flops,
                "useful_fraction": self.useful_fraction}


def jsonable(kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """Tuples become lists, so the kwargs survive a JSON round trip unchanged."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}


def select_cases(names: Optional[Sequence[str]], quick: bool,
                 batches: Optional[Sequence[int]] = None) -> List[Case]:
    """The cases to measure: named layers (or the quick set, or all) at their batches.

    ``quick`` uses each layer's quick batches where it has some; ``batches``
    restricts each layer to those of its batch sizes (a layer with none of them
    left is measured at its smallest).
    """
    layers = [layer_by_name(n) for n in names] if names else [
        layer for layer in LAYERS if layer.quick or not quick]
    cases = []
    for layer in layers:
        default = layer.quick if quick and layer.quick else layer.batches
        chosen = [b for b in default if batches is None or b in batches]
        cases.extend(Case(layer, b) for b in (chosen or [min(default)]))
    return cases


@dataclass
class Inputs:
    """The arrays every contender reads: same values, all float32, C-contiguous."""

    data: Any
    weight: Any
    bias: Optional[Any]
    out_grad: Any


def make_inputs(case: Case, seed: int = 0) -> Inputs:
    """Deterministic random inputs for ``case`` (weights scaled by 1/sqrt(fan-in))."""
    import numpy as np

    rng = np.random.default_rng(seed)
    fan_in = math.prod(case.weight_shape[1:])

    def normal(shape: Shape, scale: float = 1.0) -> np.ndarray:
        return np.ascontiguousarray((rng.standard_normal(shape) * scale).astype(np.float32))

    return Inputs(data=normal(case.data_shape),
                  weight=normal(case.weight_shape, 1.0 / math.sqrt(fan_in)),
                  bias=None if case.bias_shape is None else normal(case.bias_shape, 0.1),
                  out_grad=normal(case.out_shape))
