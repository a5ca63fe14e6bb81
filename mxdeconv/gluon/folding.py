"""Inference speed-up, on by default: a transposed convolution followed by
``BatchNorm`` in a :class:`~mxdeconv.gluon.nn.Sequential` runs as one
Deconvolution.  Opt out with ``mxdeconv.gluon.folding.fold_batchnorm = False``
(or ``MXDECONV_FOLD_BATCHNORM=0`` in the environment, read at import).

In inference BatchNorm is an affine map per channel, ``y = (x - mean) * s +
beta`` with ``s = gamma / sqrt(running_var + eps)``, so the pair equals a
Deconvolution whose weight's output channels are scaled by ``s`` and whose
bias is ``(bias - mean) * s + beta``: one pass over the output instead of two.
The folded weight and bias are kept per pair and made again when any of the
six arrays changes (a new array or a write: ``set_data``, ``load_parameters``,
a Trainer step, a training backward moving the running statistics).

Folding happens only outside training and outside ``autograd.record()`` (a
recorded call must reach the original parameters), for a layer without its
own ``activation=`` whose parameters are all initialised, followed by a
``BatchNorm`` over ``axis=1`` of the same channels.  The folded result equals
the unfolded one to float32 rounding (``tests/gluon/test_folding.py``).

Why on by default: on MXNet's DCGAN example generator (nz=100, ngf=64, four
Conv2DTranspose + BatchNorm + relu blocks, 1x1 -> 64x64) the folded net ran
1.12-1.40x faster than the unfolded one at batch 64 and 1.12-1.18x at batch 1
(one thread, three measurements: medians of fresh processes and of paired
calls in one process, ``benchmarks/generator.py``, :doc:`performance`): besides
BatchNorm's own pass over the output, the
unfolded path reads the deconvolution's result back into the plain layout for
NumPy's BatchNorm, where the folded one only adds a bias (in the kernel or in
a oneDNN pass of its own, as the plan chose).  (An
earlier measurement of a single 128 -> 64 layer on a loaded machine could not
tell the two apart.)

>>> from mxdeconv import nd
>>> from mxdeconv.gluon import folding, nn
>>> net = nn.HybridSequential()
>>> net.add(nn.Conv2DTranspose(4, 4, in_channels=2, use_bias=False),
...         nn.BatchNorm(in_channels=4))
>>> net.initialize()
>>> folded = net(nd.ones((1, 2, 1, 1))).asnumpy()          # folded (the default)
>>> previous, folding.fold_batchnorm = folding.fold_batchnorm, False  # opt out
>>> bool(abs(folded - net(nd.ones((1, 2, 1, 1))).asnumpy()).max() < 1e-6)
True
>>> folding.fold_batchnorm = previous
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mxdeconv import nd as _nd
from mxdeconv.autograd import tape
from mxdeconv.ndarray.ndarray import NDArray, array

from .batchnorm import BatchNorm
from .layers import _ConvTranspose

__all__ = ["fold_batchnorm", "foldable", "folded_forward"]

#: Whether Sequential folds Deconvolution + BatchNorm pairs in inference (on by
#: default; ``MXDECONV_FOLD_BATCHNORM=0`` at import, or set it False, to opt out).
fold_batchnorm = os.environ.get("MXDECONV_FOLD_BATCHNORM", "1").strip() != "0"



def _arrays(conv: _ConvTranspose, bn: BatchNorm) -> Optional[Tuple[Optional[NDArray], ...]]:
    """The pair's six arrays (the bias may be None), or None while any is not
    initialised yet (deferred shapes: the unfolded path completes them)."""
    params = [conv.weight, bn.gamma, bn.beta, bn.running_mean, bn.running_var]
    if any(p._data is None for p in params) or (conv.bias is not None
                                                and conv.bias._data is None):
        return None
    return (conv.weight._data, None if conv.bias is None else conv.bias._data,
            bn.gamma._data, bn.beta._data, bn.running_mean._data, bn.running_var._data)


def foldable(first: Any, second: Any) -> bool:
    """Whether ``first`` then ``second`` may run folded now."""
    return (fold_batchnorm and isinstance(first, _ConvTranspose)
            and isinstance(second, BatchNorm) and first._activation is None
            and second._axis == 1 and not tape.is_training() and not tape.is_recording()
            and _arrays(first, second) is not None)


def _versions(arrays: Tuple[Optional[NDArray], ...]) -> Optional[Tuple[Any, ...]]:
    """What the folded arrays depend on: each array's version (a write through
    mxdeconv bumps it), or None when any array's memory is exposed (a NumPy
    view may have written it unseen: fold on every call, as ``ops._exec``
    treats an exposed weight)."""
    if any(a is not None and a._exposed for a in arrays):
        return None
    return tuple(None if a is None else a._version for a in arrays)


def _fold(conv: _ConvTranspose, bn: BatchNorm,
          arrays: Tuple[Optional[NDArray], ...]) -> Tuple[NDArray, NDArray]:
    # Every array but the bias is there (_arrays).
    first = arrays[0]
    assert first is not None
    values: List[Any] = [None if a is None else a.asnumpy().astype(np.float64) for a in arrays]
    weight, bias, gamma, beta, mean, var = values
    kwargs = bn._kwargs
    scale = (np.ones_like(var) if kwargs["fix_gamma"] else gamma) / np.sqrt(var + kwargs["eps"])
    groups = conv._kwargs["num_group"]
    # MXNet's weight (C_in, C_out / G, *k): output channel g * C_out / G + j is
    # column j of the rows of group g.
    c_in, per_group = weight.shape[:2]
    grouped = weight.reshape((groups, c_in // groups, per_group) + weight.shape[2:])
    factors = scale.reshape((groups, 1, per_group) + (1,) * (weight.ndim - 2))
    folded_weight = (grouped * factors).reshape(weight.shape)
    shift = np.zeros_like(scale) if bias is None else bias
    folded_bias = (shift - mean) * scale + beta
    dtype = first.dtype
    return array(folded_weight, dtype=dtype), array(folded_bias, dtype=dtype)


def folded_forward(conv: _ConvTranspose, bn: BatchNorm, x: Any,
                   cache: Dict[int, Tuple[Any, ...]]) -> NDArray:
    """``bn(conv(x))`` as one Deconvolution (see the module docstring); ``cache``
    keeps each pair's folded arrays with the key of the arrays they came from."""
    arrays = _arrays(conv, bn)
    assert arrays is not None  # foldable() saw them initialised
    versions = _versions(arrays)
    kept = cache.get(id(conv))
    # The arrays themselves are kept (not their ids, which a new array may reuse).
    if (kept is None or versions is None or kept[1] != versions
            or any(a is not b for a, b in zip(kept[0], arrays))):
        kept = (arrays, versions) + _fold(conv, bn, arrays)
        cache[id(conv)] = kept
    weight, bias = kept[2], kept[3]
    if not isinstance(x, NDArray):
        x = array(x)
    out = _nd.Deconvolution(x, weight, bias, **dict(conv._kwargs, no_bias=False))
    assert out is not None  # no out= and req "write": a new array
    return out
