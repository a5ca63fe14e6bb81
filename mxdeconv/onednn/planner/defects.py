"""Known oneDNN 3.2 defects (candidates tried last, or not offered, on the
geometries where a kernel is known to be wrong: docs/kernel_check.rst; the
layers whose deconvolution descriptors are slow to make), and the one
:class:`~mxdeconv.KernelDefectWarning` per kernel and geometry a
disagreeing candidate raises."""
from __future__ import annotations

import warnings
from typing import Any, Callable

from .. import kernel_check
from .._loader import extension as _ops
from mxdeconv._core.errors import KernelDefectWarning
from mxdeconv.semantics.attributes import DeconvGeometry


def _known_suspect(geom: DeconvGeometry) -> Callable[[Any], bool]:
    """Candidates of a kernel known to be wrong on some geometries of this
    kind: oneDNN 3.2's brgemm deconvolution (``brg_conv:<isa>+brgconv_strided``)
    with the forward bias fused (docs/kernel_check.rst; the same kernel behind
    the convolution wrapper, ``conv:any+...``, is right).  A first plan tries
    them last, which saves running a defective one on the layers it breaks;
    the tuner still times and checks them, and on the layers where they are
    right they can win."""
    def suspect(candidate: Any) -> bool:
        # A sub-grid plan's kernel is its sub-grid layer's, with the bias fused.
        impl = candidate.impl.removeprefix(_ops.SUBGRID)
        return (geom.bias_shape is not None and candidate.bias_fused
                and impl.startswith("brg_conv:") and "brgconv_strided" in impl)
    return suspect


#: From this input width (the last axis) on, oneDNN 3.2's deconvolution
#: descriptors are slow to make: their cost grows with the width (measured on
#: an AVX-512 CPU, the brgemm deconvolution's: 5-16 ms at width 128, 20-40 at
#: 512, 75 at 1024, 670 on a 1-D layer of 8000 samples; the same under AVX2),
#: and each backward pass's descriptor needs the forward's.  The direct
#: convolution that runs the same kernel (the deconvolution's twin,
#: ``conv:bwd_data+...`` for the forward) costs a fifteenth to a twentieth.
SLOW_DESCRIPTOR_WIDTH = 128


def slow_deconvolution_descriptors(geom: DeconvGeometry) -> bool:
    """Whether ``geom``'s deconvolution descriptors are slow to make
    (SLOW_DESCRIPTOR_WIDTH): its passes enumerate each layout pair's direct
    convolution before the deconvolution, so that a new layer's first plan,
    in every pass, costs no deconvolution descriptor."""
    return geom.spatial_in[-1] >= SLOW_DESCRIPTOR_WIDTH


def deconvolution_family(variant: Any) -> bool:
    """Whether a candidate of ``variant`` is oneDNN's deconvolution primitive
    (not a direct convolution, nor one of mxdeconv's own plans: those name
    their kind in the variant's last field)."""
    return variant[4] == ""


def _taps_without_data(geom: DeconvGeometry, axis: int) -> bool:
    """Whether a kernel tap along ``axis`` meets no data pixel (only the crop):
    tap k reaches output pixels i * stride + k * dilate - pad_l, i < in."""
    param = geom.param
    stride, dilate, pad = param.stride[axis], param.dilate[axis], geom.pad_l[axis]
    size_in, size_out = geom.spatial_in[axis], geom.spatial_out[axis]
    for tap in range(param.kernel[axis]):
        first = max(0, -(-(pad - tap * dilate) // stride))  # the first i reaching pixel >= 0
        if not (first < size_in and first * stride + tap * dilate - pad < size_out):
            return True
    return False


def _known_defective(geom: DeconvGeometry, dtype: str) -> Callable[[Any], bool]:
    """Candidates of a kernel known to give wrong results on this geometry
    *some* of the time, so that the check cannot rule them out: oneDNN 3.2's
    bfloat16 backward weights (``...jit_bf16:...``) on a strided axis where a
    kernel tap meets only the crop (a layer of 1x1 images, k3 s2 p1) write
    garbage into that tap's gradient, from memory they never initialise:
    wrong in most checks (93%) but right in some, so passing the check proves
    nothing (docs/kernel_check.rst).  On CPUs with AMX the bfloat16
    ``brgconv_bwd_w:avx512_core_amx`` does the same on the same layers
    (garbage, NaN or 1e33, in the crop taps' gradient).  They are no
    candidates there."""
    bad_axes = dtype == "bfloat16" and any(
        geom.param.stride[a] > 1 and _taps_without_data(geom, a)
        for a in range(len(geom.spatial_in)))

    def defective(candidate: Any) -> bool:
        return bad_axes and any(name in candidate.impl for name in DEFECTIVE_BF16_WEIGHTS)
    return defective


#: bfloat16 backward-weights kernels that leave crop taps' gradients
#: uninitialised (see _known_defective).
DEFECTIVE_BF16_WEIGHTS = ("jit_bf16", "brgconv_bwd_w")


def _warn(warned: set, candidate: Any, geom: DeconvGeometry, reason: str) -> None:
    """Warn once (per ``warned``, a planner's set) that ``candidate`` disagreed."""
    if isinstance(reason, kernel_check.Unverifiable):
        return  # not a verdict on the kernel: the check cannot see its errors here
    _warn_once(warned, (candidate.impl, candidate.family, candidate.bias_fused,
                        getattr(candidate, "act_type", None),
                        getattr(candidate, "act_fused", False), geom),
               repr(candidate), geom, reason)


def _warn_once(warned: set, key: tuple, name: str, geom: DeconvGeometry, reason: str) -> None:
    if key in warned:
        return
    warned.add(key)
    warnings.warn(KernelDefectWarning(
        f"oneDNN kernel {name} gave a wrong result on data {geom.data_shape} -> "
        f"{geom.out_shape}, kernel={geom.param.kernel}, stride={geom.param.stride}, "
        f"dilate={geom.param.dilate}, pad_l={geom.pad_l}, pad_r={geom.pad_r}, "
        f"num_group={geom.param.num_group}, bias={geom.bias_shape is not None}: {reason}; "
        "another plan is used instead"), stacklevel=3)
