"""The transposed-convolution layers: :class:`Conv1DTranspose`,
:class:`Conv2DTranspose` and :class:`Conv3DTranspose`, with MXNet 1.9.1 Gluon's
constructor arguments."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple


from mxdeconv.ops import deconvolution
from mxdeconv import nd
from mxdeconv.semantics.activations import ACT_TYPES
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray

from ._args import (_choice_arg, _int_arg, _int_attr, _tuple_attr, _type_error,
                    _use_bias_arg, _values_arg)
from .block import Block
from mxdeconv.initializer import _initializer_arg
from .parameter import Parameter


class _ConvTranspose(Block):
    """Shared implementation of the transposed-convolution layers.

    The constructor checks every argument (type, range, tuple length, and what
    MXNet's shape inference rejects when the layer is built) before it creates
    anything.  Methods check theirs before changing anything: after an error
    the parameters hold what they held before.
    """

    _ndim = 2
    _layout = "NCHW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 layout: Optional[str] = None, activation: Optional[str] = None,
                 use_bias: bool = True, weight_initializer: Any = None,
                 bias_initializer: Any = "zeros", in_channels: int = 0,
                 prefix: Optional[str] = None, params: Any = None) -> None:
        ndim = self._ndim
        _choice_arg("layout", layout, (self._layout, None))
        self._activation = _choice_arg("activation", activation, (None,) + ACT_TYPES)
        if params is not None:
            raise MXNetError(f"sharing parameters through params= is not supported: params "
                             f"must be None, got {params!r:.80}")
        if prefix is not None and not isinstance(prefix, str):
            raise _type_error("prefix", "a string or None", prefix)
        self._channels = _int_attr("channels", channels, minimum=1)
        in_channels = _int_arg("in_channels", in_channels)  # 0: from the first batch
        self._kwargs: Dict[str, Any] = {
            "kernel": _tuple_attr("kernel_size", kernel_size, ndim, minimum=1,
                                  literal_length=True),
            "stride": _tuple_attr("strides", strides, ndim, minimum=1),
            "dilate": _tuple_attr("dilation", dilation, ndim, minimum=1),
            "pad": _tuple_attr("padding", padding, ndim),
            "adj": _tuple_attr("output_padding", output_padding, ndim, literal_length=True),
            "num_filter": self._channels, "num_group": _int_attr("groups", groups, minimum=1),
            "no_bias": not _use_bias_arg(use_bias), "layout": self._layout}
        self._check_divisible("channels", self._channels)
        if in_channels:
            self._check_divisible("in_channels", in_channels)
        self.outpad = self._kwargs["adj"]
        if any(a >= s for a, s in zip(self.outpad, self._kwargs["stride"])):
            raise MXNetError(f"output_padding must be smaller than strides in every dim, got "
                             f"output_padding={self.outpad} and strides={self._kwargs['stride']}")
        _initializer_arg("weight_initializer", weight_initializer)
        _initializer_arg("bias_initializer", bias_initializer)
        Block.__init__(self, prefix, params)
        self.weight = Parameter(self.prefix + "weight", self._weight_shape(in_channels),
                                init=weight_initializer)
        self.bias = (None if self._kwargs["no_bias"] else
                     Parameter(self.prefix + "bias", (self._channels,), init=bias_initializer))

    def _check_divisible(self, name: str, value: int, context: str = "") -> None:
        groups = self._kwargs["num_group"]
        if value % groups:
            raise MXNetError(f"{context}{name}={value} must be divisible by groups={groups}")

    def _weight_shape(self, in_channels: int) -> Tuple[int, ...]:
        """MXNet's Deconvolution weight: ``(in_channels, channels // groups, *kernel)``."""
        return ((in_channels, self._channels // self._kwargs["num_group"])
                + self._kwargs["kernel"])

    @property
    def _in_channels(self) -> int:
        """0 until the first batch or a loaded weight gives it."""
        return self.weight.shape[0]

    # -- MXNet Block API --------------------------------------------------------
    def _alias(self) -> str:
        return "conv"  # MXNet's _Conv._alias: every convolution layer is conv<n>_

    def _check_loaded_shape(self, param: Parameter, shape: Tuple[int, ...], where: str) -> None:
        super()._check_loaded_shape(param, shape, where)
        if param is self.weight:
            self._check_divisible("in_channels", shape[0], f"{where}: ")

    # -- forward ------------------------------------------------------------------
    def __call__(self, x: Any) -> NDArray:
        return self.forward(x)

    def forward(self, x: Any) -> NDArray:
        """Run ``nd.Deconvolution`` with the layer's parameters (and activation).

        ``x`` is an NDArray, or anything of real numbers :meth:`Parameter.set_data`
        takes (copied, as ``nd.array`` does).  A deferred weight is initialised for
        ``x``'s channels, and kept only if the call succeeds: a bad first batch
        leaves it deferred."""
        if not isinstance(x, NDArray):
            _values_arg("data", x)  # a TypeError for strings or objects, not NumPy's
            x = nd.array(x)
        pending = None
        if self.weight._data is None and self.weight._deferred is not None:
            pending = self.weight._deferred_data(self._weight_shape(self._data_channels(x)))
        weight = self.weight.data() if pending is None else pending
        bias = None if self.bias is None else self.bias.data()
        if self._activation is None:
            out = nd.Deconvolution(x, weight, bias, **self._kwargs)
        else:  # one operator: oneDNN fuses the activation into the deconvolution
            out = deconvolution.DeconvolutionActivation(x, weight, bias,
                                                        act_type=self._activation,
                                                        **self._kwargs)
        if pending is not None:
            self.weight._install(pending)
        assert out is not None  # no out= and req "write": a new array
        return out

    def _data_channels(self, x: NDArray) -> int:
        """``x``'s channels, checked as the weight's first dim before it is created."""
        if x.ndim != self._ndim + 2 or x.shape[1] < 1:
            raise MXNetError(f"data must have {self._ndim + 2} dimensions ({self._layout}) and "
                             f"at least one channel, got data shape {x.shape}")
        self._check_divisible("data channels", x.shape[1])
        return x.shape[1]

    def __repr__(self) -> str:
        kw, ndim = self._kwargs, self._ndim
        text = (f"{type(self).__name__}({self._in_channels or None} -> {self._channels}, "
                f"kernel_size={kw['kernel']}, stride={kw['stride']}")
        if kw["pad"] != (0,) * ndim:
            text += f", padding={kw['pad']}"
        if kw["dilate"] != (1,) * ndim:
            text += f", dilation={kw['dilate']}"
        if kw["adj"] != (0,) * ndim:
            text += f", output_padding={kw['adj']}"
        if kw["num_group"] != 1:
            text += f", groups={kw['num_group']}"
        if self.bias is None:
            text += ", bias=False"
        if self._activation:
            text += f", Activation({self._activation})"
        return text + ")"


class Conv1DTranspose(_ConvTranspose):
    """Transposed 1-D convolution over ``(N, C, W)`` (MXNet Gluon's ``Conv1DTranspose``).

    ``out_width = (width-1)*strides - 2*padding + dilation*(kernel_size-1) + 1 + output_padding``

    >>> from mxdeconv import gluon, nd
    >>> layer = gluon.Conv1DTranspose(4, kernel_size=3, strides=2, in_channels=2)
    >>> layer.initialize()
    >>> layer(nd.ones((1, 2, 5))).shape
    (1, 4, 11)
    """

    _ndim, _layout = 1, "NCW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 layout: str = "NCW", activation: Optional[str] = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, output_padding, dilation,
                         groups, layout, activation, use_bias, weight_initializer,
                         bias_initializer, in_channels, **kwargs)


class Conv2DTranspose(_ConvTranspose):
    """Transposed 2-D convolution over ``(N, C, H, W)`` (MXNet Gluon's ``Conv2DTranspose``).

    Per spatial dim: ``out = (in-1)*strides - 2*padding + dilation*(kernel_size-1) + 1
    + output_padding``.  ``in_channels=0`` defers the weight's shape to the
    first forward.

    >>> from mxdeconv import gluon, nd
    >>> layer = gluon.Conv2DTranspose(6, kernel_size=(3, 3), strides=(2, 2),
    ...                               padding=(1, 1), output_padding=(1, 1), groups=2)
    >>> layer.initialize()
    >>> layer(nd.ones((1, 4, 5, 5))).shape, layer.weight.shape
    ((1, 6, 10, 10), (4, 3, 3, 3))
    """

    _ndim, _layout = 2, "NCHW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: Any = (0, 0), output_padding: Any = (0, 0),
                 dilation: Any = (1, 1), groups: int = 1, layout: str = "NCHW",
                 activation: Optional[str] = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, output_padding, dilation,
                         groups, layout, activation, use_bias, weight_initializer,
                         bias_initializer, in_channels, **kwargs)


class Conv3DTranspose(_ConvTranspose):
    """Transposed 3-D convolution over ``(N, C, D, H, W)`` (MXNet Gluon's ``Conv3DTranspose``).

    >>> from mxdeconv import gluon, nd
    >>> layer = gluon.Conv3DTranspose(2, kernel_size=2, strides=2, in_channels=3,
    ...                               use_bias=False)
    >>> layer.initialize()
    >>> layer(nd.ones((1, 3, 2, 2, 2))).shape
    (1, 2, 4, 4, 4)
    """

    _ndim, _layout = 3, "NCDHW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1, 1),
                 padding: Any = (0, 0, 0), output_padding: Any = (0, 0, 0),
                 dilation: Any = (1, 1, 1), groups: int = 1, layout: str = "NCDHW",
                 activation: Optional[str] = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, output_padding, dilation,
                         groups, layout, activation, use_bias, weight_initializer,
                         bias_initializer, in_channels, **kwargs)
