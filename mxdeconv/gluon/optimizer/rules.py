"""The built-in optimizers of :mod:`mxdeconv.gluon.optimizer` (``SGD``, ``NAG``,
``Adam``, ``RMSProp``): each update is a NumPy function of the current values,
computed for every parameter of a step before any is written (see that module
for the rules, MXNet 1.9.1's CPU kernels).

>>> from mxdeconv.gluon.optimizer.rules import SGD
>>> SGD(momentum=0.9)._state_count()
1
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray, write_values, zeros

from .._args import _bool_arg, _real_arg
from .base import Item, Optimizer, _optional_real, register

__all__ = ["Adam", "NAG", "RMSProp", "SGD"]


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


class _Builtin(Optimizer):
    """An optimizer whose update is a NumPy function of the current values:
    :meth:`_prepare` computes every new weight and state before any is written."""

    def _state_count(self) -> int:
        """How many state arrays :meth:`create_state` makes (0: the state is None)."""
        raise NotImplementedError

    def create_state(self, index: Any, weight: NDArray) -> Any:
        count = self._state_count()
        arrays = tuple(zeros(weight.shape, dtype=weight.dtype) for _ in range(count))
        return None if not count else arrays[0] if count == 1 and self._single else arrays

    _single = True  # one state array is returned bare (SGD, NAG), not as a 1-tuple

    def _state_arrays(self, state: Any) -> Tuple[NDArray, ...]:
        return () if state is None else (state,) if isinstance(state, NDArray) else tuple(state)

    def _clip(self, values: np.ndarray, kind: type) -> np.ndarray:
        # MXNet passes clip_gradient on when truthy; its kernels clip when it is >= 0.
        if self.clip_gradient and self.clip_gradient >= 0:
            bound = kind(np.float32(self.clip_gradient))
            return np.clip(values, -bound, bound)
        return values

    def _rule(self, index: Any, w: np.ndarray, g: np.ndarray, states: List[np.ndarray],
              lr: Any, wd: Any, kind: type) -> np.ndarray:
        """The new weight (``states`` updated in place), in ``kind`` arithmetic."""
        raise NotImplementedError

    def _lrs_wds(self, indices: Sequence[Any]) -> Tuple[List[float], List[float]]:
        self._update_count(list(indices))
        return self._get_lrs(indices), self._get_wds(indices)

    def _groups(self, items: Sequence[Item]) -> List[List[Item]]:
        """The items that share one learning-rate lookup: one each."""
        return [[item] for item in items]

    def _prepare(self, items: Sequence[Item]) -> List[Callable[[], None]]:
        commits = []
        for group in self._groups(items):
            lrs, wds = self._lrs_wds([item[0] for item in group])
            for (index, weight, grad, state), lr, wd in zip(group, lrs, wds):
                commits.append(self._computed(index, weight, grad, state, lr, wd))
        return commits

    def _computed(self, index: Any, weight: NDArray, grad: NDArray, state: Any, lr: float,
                  wd: float) -> Callable[[], None]:
        kind = _compute_dtype(weight.dtype).type
        arrays = self._state_arrays(state)
        states = [arr._plain().astype(kind) for arr in arrays]
        with np.errstate(all="ignore"):  # inf and NaN as MXNet's kernels give them
            new = self._rule(index, weight._plain().astype(kind), grad._plain().astype(kind),
                             states, kind(np.float32(lr)), kind(np.float32(wd)), kind)

        def commit() -> None:
            write_values(new, weight)
            for arr, values in zip(arrays, states):
                write_values(values, arr)
        return commit

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        if isinstance(index, (list, tuple)):
            items = list(zip(index, weight, grad, state))
        else:
            items = [(index, weight, grad, state)]
        for commit in self._prepare(items):
            commit()

    def _hyper(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self._HYPER}


def _momentum_arg(value: Any) -> float:
    return _real_arg("momentum", value, minimum=0.0)


@register
class SGD(_Builtin):
    """Stochastic gradient descent with momentum and weight decay (see the module
    for the rule).  ``lazy_update`` is accepted (it only concerns sparse arrays).

    >>> from mxdeconv import nd, optimizer
    >>> sgd, weight = optimizer.SGD(learning_rate=0.5, wd=0.1), nd.array([1.0])
    >>> sgd.update(0, weight, nd.array([0.2]), sgd.create_state(0, weight))
    >>> weight.asnumpy()                  # 1 - 0.5 * (0.1 * 1 + 0.2)
    array([0.85], dtype=float32)
    """

    _HYPER = ("momentum", "lazy_update")

    def __init__(self, momentum: float = 0.0, lazy_update: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.momentum = _momentum_arg(momentum)
        self.lazy_update = _bool_arg("lazy_update", lazy_update)
        self.aggregate_num = int(os.getenv("MXNET_OPTIMIZER_AGGREGATION_SIZE", "4"))

    def _state_count(self) -> int:
        return 1 if self.momentum != 0.0 else 0

    def _groups(self, items: Sequence[Item]) -> List[List[Item]]:
        # MXNet's Updater: by dtype (first seen first), aggregate_num at a time.
        if self.aggregate_num <= 0:
            return super()._groups(items)
        by_dtype: Dict[Any, List[Item]] = {}
        for item in items:
            by_dtype.setdefault(item[1].dtype, []).append(item)
        size = self.aggregate_num
        return [same[i:i + size] for same in by_dtype.values() for i in range(0, len(same), size)]

    def _rule(self, index: Any, w: np.ndarray, g: np.ndarray, states: List[np.ndarray],
              lr: Any, wd: Any, kind: type) -> np.ndarray:
        g = self._clip(kind(np.float32(self.rescale_grad)) * g, kind)
        if self.momentum > 0:
            mom = states[0]
            mom *= kind(np.float32(self.momentum))
            mom -= lr * (wd * w + g)
            return w + mom
        return w - lr * (wd * w + g)


@register
class NAG(_Builtin):
    """Nesterov accelerated gradient (see the module for the rule).

    >>> from mxdeconv import nd, optimizer
    >>> nag, weight = optimizer.NAG(learning_rate=0.1, momentum=0.5), nd.array([1.0])
    >>> state = nag.create_state(0, weight)
    >>> nag.update(0, weight, nd.array([1.0]), state)
    >>> weight.asnumpy(), state.asnumpy()      # 1 + 1.5 * (0 - 0.1 * 1), 0 - 0.1 * 1
    (array([0.85], dtype=float32), array([-0.1], dtype=float32))
    """

    _HYPER = ("momentum",)

    def __init__(self, momentum: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.momentum = _momentum_arg(momentum)

    def _state_count(self) -> int:
        return 1 if self.momentum != 0.0 else 0

    def _rule(self, index: Any, w: np.ndarray, g: np.ndarray, states: List[np.ndarray],
              lr: Any, wd: Any, kind: type) -> np.ndarray:
        g = self._clip(kind(np.float32(self.rescale_grad)) * g, kind)
        if not states:  # MXNet's sgd_update
            return (kind(1) - lr * wd) * w - lr * g
        momentum = kind(np.float32(self.momentum))
        mom = states[0]
        mom *= momentum
        new = w - mom + (momentum + kind(1)) * (mom - lr * (g + wd * w))
        # MXNet's kernel writes the weight first and reads it back for the state:
        # its weight decay term there uses the new weight.
        mom -= lr * (g + wd * new)
        return new


def _decay_arg(name: str, value: Any) -> float:
    value = _real_arg(name, value, minimum=0.0)
    if value >= 1.0:
        raise MXNetError(f"{name} must be in [0, 1), got {name}={value!r}")
    return value


@register
class Adam(_Builtin):
    """Adam, with MXNet's bias correction folded into the learning rate (see the
    module for the rule).  Default ``learning_rate=0.001``.

    >>> from mxdeconv import nd, optimizer
    >>> adam, weight = optimizer.Adam(learning_rate=0.1), nd.array([1.0, 1.0])
    >>> adam.update(0, weight, nd.array([3.0, -0.5]), adam.create_state(0, weight))
    >>> weight.asnumpy().round(5)         # the first step moves each weight by about lr
    array([0.9, 1.1], dtype=float32)
    """

    _HYPER = ("beta1", "beta2", "epsilon", "lazy_update")
    _single = False

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, lazy_update: bool = True, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1 = _decay_arg("beta1", beta1)
        self.beta2 = _decay_arg("beta2", beta2)
        self.epsilon = _real_arg("epsilon", epsilon, minimum=0.0)
        self.lazy_update = _bool_arg("lazy_update", lazy_update)

    def _state_count(self) -> int:
        return 2

    def _lrs_wds(self, indices: Sequence[Any]) -> Tuple[List[float], List[float]]:
        lrs, wds = super()._lrs_wds(indices)
        for i, index in enumerate(indices):
            t = self._index_update_count[index]
            lrs[i] *= math.sqrt(1. - self.beta2 ** t) / (1. - self.beta1 ** t)
        return lrs, wds

    def _rule(self, index: Any, w: np.ndarray, g: np.ndarray, states: List[np.ndarray],
              lr: Any, wd: Any, kind: type) -> np.ndarray:
        g = self._clip(g * kind(np.float32(self.rescale_grad)) + w * wd, kind)
        beta1, beta2 = kind(np.float32(self.beta1)), kind(np.float32(self.beta2))
        mean, var = states
        mean[...] = beta1 * mean + (kind(1) - beta1) * g
        var[...] = beta2 * var + (kind(1) - beta2) * g * g
        return w - lr * mean / (np.sqrt(var) + kind(np.float32(self.epsilon)))


@register
class RMSProp(_Builtin):
    """RMSProp: Tieleman & Hinton's (``centered=False``) or Graves's
    (``centered=True``); see the module for the rules.  Default
    ``learning_rate=0.001``.

    >>> from mxdeconv import nd, optimizer
    >>> rms, weight = optimizer.RMSProp(learning_rate=0.1, gamma1=0.0), nd.array([1.0])
    >>> rms.update(0, weight, nd.array([2.0]), rms.create_state(0, weight))
    >>> weight.asnumpy()                  # 1 - 0.1 * 2 / sqrt(2 * 2)
    array([0.9], dtype=float32)
    """

    _HYPER = ("gamma1", "gamma2", "epsilon", "centered", "clip_weights")
    _single = False

    def __init__(self, learning_rate: float = 0.001, gamma1: float = 0.9, gamma2: float = 0.9,
                 epsilon: float = 1e-8, centered: bool = False,
                 clip_weights: Optional[float] = None, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1 = _real_arg("gamma1", gamma1, minimum=0.0)
        self.gamma2 = _real_arg("gamma2", gamma2, minimum=0.0)
        self.epsilon = _real_arg("epsilon", epsilon, minimum=0.0)
        self.centered = _bool_arg("centered", centered)
        self.clip_weights = _optional_real("clip_weights", clip_weights)

    def _state_count(self) -> int:
        return 3 if self.centered else 1

    def _rule(self, index: Any, w: np.ndarray, g: np.ndarray, states: List[np.ndarray],
              lr: Any, wd: Any, kind: type) -> np.ndarray:
        g = self._clip(kind(np.float32(self.rescale_grad)) * g + wd * w, kind)
        gamma1, eps = kind(np.float32(self.gamma1)), kind(np.float32(self.epsilon))
        n = states[0]
        if not self.centered:
            n[...] = (kind(1) - gamma1) * (g * g) + gamma1 * n
            new = w - lr * (g / np.sqrt(n + eps))
        else:
            _, mean, delta = states
            n[...] = (kind(1) - gamma1) * g * g + gamma1 * n
            mean[...] = (kind(1) - gamma1) * g + gamma1 * mean
            delta[...] = (kind(np.float32(self.gamma2)) * delta
                          - lr * (g / np.sqrt(n - mean * mean + eps)))
            new = w + delta
        if self.clip_weights and self.clip_weights >= 0:
            bound = kind(np.float32(self.clip_weights))
            new = np.clip(new, -bound, bound)
        return new
