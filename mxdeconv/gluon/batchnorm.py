"""MXNet 1.9.1 Gluon's ``nn.BatchNorm`` layer (the arithmetic is
:func:`mxdeconv.nd.BatchNorm`'s, :mod:`mxdeconv.ops.batchnorm`).

Its four parameters have MXNet's names and initializers, so checkpoints move
both ways unchanged: ``gamma`` (``'ones'``, learned unless ``scale=False``),
``beta`` (``'zeros'``, learned unless ``center=False``), ``running_mean``
(``'zeros'``) and ``running_var`` (``'ones'``), never learned
(``grad_req='null'``).  ``collect_params()`` names them
``batchnorm0_gamma``..., ``save_parameters`` ``gamma``... (``1.gamma`` as a
:class:`~mxdeconv.gluon.nn.Sequential`'s second block).

>>> from mxdeconv import autograd, nd
>>> from mxdeconv.gluon import nn
>>> bn = nn.BatchNorm(in_channels=2)
>>> bn.initialize()
>>> list(bn.collect_params())                  # doctest: +ELLIPSIS
['batchnorm..._gamma', 'batchnorm..._beta', 'batchnorm..._running_mean', 'batchnorm..._running_var']
>>> x = nd.array([[[1.0], [2.0]], [[3.0], [6.0]]])     # (N=2, C=2, W=1)
>>> with autograd.record():                    # training: the batch's statistics
...     y = bn(x)
>>> y.backward()                               # ... and the running ones move
>>> bn.running_mean.data().asnumpy(), bn.running_var.data().asnumpy()
(array([0.2, 0.4], dtype=float32), array([1. , 1.3], dtype=float32))
"""
from __future__ import annotations

from typing import Any, Dict

from mxdeconv import nd as _nd
from mxdeconv._core.args import int_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray

from ._args import _bool_arg, _dtype_arg, _int_arg, _real_arg
from .basic_layers import _data
from .block import HybridBlock

__all__ = ["BatchNorm"]


class BatchNorm(HybridBlock):
    """Batch normalisation over ``axis`` (MXNet's ``nn.BatchNorm``, same
    arguments and defaults): ``momentum=0.9``, ``epsilon=1e-5``,
    ``center=True``, ``scale=True``, ``use_global_stats=False``,
    ``in_channels=0`` (from the first batch).  In training (inside
    ``autograd.record()``) it normalises with the batch's statistics, and the
    backward updates the running ones (MXNet's CPU behaviour); outside
    training, and with ``use_global_stats=True``, it uses the running ones.
    """

    def __init__(self, axis: int = 1, momentum: float = 0.9, epsilon: float = 1e-5,
                 center: bool = True, scale: bool = True, use_global_stats: bool = False,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones",
                 running_mean_initializer: Any = "zeros",
                 running_variance_initializer: Any = "ones", in_channels: int = 0,
                 **kwargs: Any) -> None:
        axis = int_arg("axis", axis)
        momentum = _real_arg("momentum", momentum)
        epsilon = _real_arg("epsilon", epsilon)
        if epsilon < 0:
            raise MXNetError(f"epsilon must be >= 0, got epsilon={epsilon!r}")
        center, scale = _bool_arg("center", center), _bool_arg("scale", scale)
        use_global_stats = _bool_arg("use_global_stats", use_global_stats)
        in_channels = _int_arg("in_channels", in_channels)
        super().__init__(**kwargs)
        self._kwargs: Dict[str, Any] = {"axis": axis, "eps": epsilon, "momentum": momentum,
                                        "fix_gamma": not scale,
                                        "use_global_stats": use_global_stats}
        self._axis = axis
        if in_channels:
            self.in_channels = in_channels
        shape = (in_channels,)
        self.gamma = self.params.get("gamma", grad_req="write" if scale else "null",
                                     shape=shape, init=gamma_initializer,
                                     allow_deferred_init=True, differentiable=scale)
        self.beta = self.params.get("beta", grad_req="write" if center else "null",
                                    shape=shape, init=beta_initializer,
                                    allow_deferred_init=True, differentiable=center)
        self.running_mean = self.params.get("running_mean", grad_req="null", shape=shape,
                                            init=running_mean_initializer,
                                            allow_deferred_init=True, differentiable=False)
        self.running_var = self.params.get("running_var", grad_req="null", shape=shape,
                                           init=running_variance_initializer,
                                           allow_deferred_init=True, differentiable=False)

    def cast(self, dtype: Any) -> None:
        """As MXNet: float16 keeps float32 statistics (and parameters)."""
        if _dtype_arg("dtype", dtype).name == "float16":
            dtype = "float32"
        super().cast(dtype)

    def forward(self, x: Any) -> NDArray:
        """``nd.BatchNorm`` with the parameters; deferred ones (``in_channels=0``)
        are made for ``x``'s channels and kept only if the call succeeds."""
        x = _data("BatchNorm", x)
        if not -x.ndim <= self._axis < x.ndim:
            raise MXNetError(f"BatchNorm: axis={self._axis} is out of range for input of "
                             f"shape {x.shape}")
        channels = x.shape[self._axis]
        pending = {name: param._deferred_data((channels,))
                   for name, param in self._reg_params.items()
                   if param._data is None and param._deferred is not None}
        values = {name: pending[name] if name in pending else param.data()
                  for name, param in self._reg_params.items()}
        out = self.hybrid_forward(_nd, x, **values)
        for name, data in pending.items():
            self._reg_params[name]._install(data)
        return out

    def hybrid_forward(self, F: Any, x: Any, gamma: NDArray, beta: NDArray,
                       running_mean: NDArray, running_var: NDArray) -> NDArray:
        return F.BatchNorm(x, gamma, beta, running_mean, running_var, name="fwd",
                           **self._kwargs)

    def __repr__(self) -> str:
        content = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        channels = self.gamma.shape[0]
        return f"BatchNorm({content}, in_channels={channels if channels else None})"
