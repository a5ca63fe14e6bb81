"""Deconvolution parameters and shape inference with MXNet 1.9.1's semantics.

:class:`DeconvolutionParam` holds the operator's arguments, normalised the way
MXNet's ``DeconvolutionParam`` is (empty ``stride``/``dilate`` become ones,
empty ``pad``/``adj`` zeros).  :func:`infer_geometry` turns a parameter set and
a data shape into everything an implementation needs: the effective left and
right crop per spatial dimension, the output shape and the expected weight and
bias shapes.  Every invalid combination raises :class:`~mxdeconv.MXNetError`
naming the field and the values.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple

from mxdeconv._core.args import bool_arg
from mxdeconv._core.errors import MXNetError

Shape = Tuple[int, ...]

#: The default (and only accepted) layout for each number of spatial dims.
DEFAULT_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
#: MXNet's axis names in its ``adj`` messages, per number of spatial dims.
_AXIS_NAMES = {1: ("x",), 2: ("y", "x"), 3: ("d", "h", "w")}
# Accepted for compatibility with MXNet's signature; they only tune cuDNN or
# MXNet's temporary-space planner and have no meaning here.
_IGNORED_FIELDS = ("workspace", "cudnn_tune", "cudnn_off")
_FIELDS = ("kernel", "stride", "dilate", "pad", "adj", "target_shape",
           "num_filter", "num_group", "no_bias", "layout") + _IGNORED_FIELDS
#: Largest accepted entry of any shape-like parameter and of num_filter and
#: num_group (MXNet stores num_filter/num_group as uint32; oneDNN's dims are
#: int64, and products of two such entries must not overflow them).
MAX_PARAM = 2**31 - 1
_CUDNN_TUNE = (None, "off", "limited_workspace", "fastest")
_UINT64_LIMIT = 2**64


def _cached_hash(instance: Any) -> int:
    """Hash a frozen dataclass by its fields once, then reuse the value."""
    try:
        return instance.__dict__["_hash"]
    except KeyError:
        value = hash(tuple(getattr(instance, f) for f in instance.__dataclass_fields__))
        object.__setattr__(instance, "_hash", value)
        return value


# -- MXNet's text forms -------------------------------------------------------------
# MXNet's Python front end hands every attribute to dmlc's parameter parser as
# text (str(value)), so MXNet code may spell any of them as a string:
# ``kernel="(3, 3)"``, ``num_filter="6"``, ``no_bias="true"``.  A str given here is
# read as that parser reads it (dmlc-core parameter.h: FieldEntry<int>/<bool>/
# <optional<int>>; mxnet tuple.h: Tuple operator>>), quirks included, so that what
# MXNet 1.9.1 accepts is accepted and means the same (tests/data/attr_forms.py
# records MXNet's verdicts).  Only a str takes this path: other values are checked
# as before.
_SPACE = frozenset(" \t\n\v\f\r")  # C's isspace
_DIGITS = frozenset("0123456789")
#: A shape's text that leaves its number of dimensions unknown (MXNet's "None").
UNKNOWN_SHAPE = None
_SHAPE_FORMS = "'(3, 3)', '[3, 3]' or '3'"


class _BadText(Exception):
    """The text does not parse; the caller words the error."""


def _read_int(text: str, pos: int) -> Tuple[int, int]:
    """``istream >> integer`` at ``pos``: leading whitespace, a sign, decimal digits."""
    end = len(text)
    while pos < end and text[pos] in _SPACE:
        pos += 1
    start = pos
    if pos < end and text[pos] in "+-":
        pos += 1
    first_digit = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos == first_digit:
        raise _BadText
    return int(text[start:pos]), pos


def _expect_end(text: str, pos: int) -> None:
    """dmlc's FieldEntryBase::Set: only whitespace may follow the value."""
    if any(ch not in _SPACE for ch in text[pos:]):
        raise _BadText


def _read_shape(text: str) -> Optional[Shape]:
    """MXNet's ``Tuple<int64>`` operator>> (tuple.h), then only whitespace.

    ``"3"`` is the 1-tuple ``(3,)``; ``"(3, 3)"``, ``"[3,3]"``, ``"(3,)"`` and ``"()"``
    are tuples (brackets may even mismatch, entries may end in ``L``); ``"None"``
    is the shape of unknown rank (returned as None)."""
    pos, end = 0, len(text)
    while True:
        if pos == end:
            raise _BadText
        ch = text[pos]
        if ch in _DIGITS or ch == "-":
            value, pos = _read_int(text, pos)
            _expect_end(text, pos)
            return (value,)
        pos += 1
        if ch in "([":
            break
        if ch not in _SPACE:
            if ch == "N":  # `is >> word`: the rest of "None"
                while pos < end and text[pos] in _SPACE:
                    pos += 1
                start = pos
                while pos < end and text[pos] not in _SPACE:
                    pos += 1
                if text[start:pos] == "one":
                    _expect_end(text, pos)
                    return UNKNOWN_SHAPE
            raise _BadText
    while pos < end and text[pos] in _SPACE:
        pos += 1
    if pos < end and text[pos] in ")]":
        _expect_end(text, pos + 1)
        return ()
    entries = []
    while True:
        value, pos = _read_int(text, pos)
        entries.append(value)
        while pos < end and text[pos] in _SPACE:
            pos += 1
        ch = text[pos] if pos < end else ""
        pos += 1
        if ch == "L":
            ch = text[pos] if pos < end else ""
            pos += 1
        if ch == ",":
            while pos < end and text[pos] in _SPACE:
                pos += 1
            if pos < end and text[pos] in ")]":
                pos += 1
                break
        elif ch and ch in ")]":
            break
        else:
            raise _BadText
    _expect_end(text, pos)
    return tuple(entries)


def parse_shape_text(name: str, text: str) -> Optional[Shape]:
    """A shape written as MXNet's text (see :func:`_read_shape`); None for ``"None"``.

    >>> parse_shape_text("kernel", "(3, 3)"), parse_shape_text("kernel", "3")
    ((3, 3), (3,))
    """
    try:
        return _read_shape(text)
    except _BadText:
        raise MXNetError(f"Invalid Parameter format for {name} expect Shape(tuple) such as "
                         f"{_SHAPE_FORMS} but value={text!r}") from None


def parse_int_text(name: str, text: str) -> int:
    """An integer written as text (``istream >> int``): ``"6"``, ``" 6 "``, ``"+6"``;
    not ``"6.0"``, ``"6L"`` or ``"0x6"``."""
    try:
        value, pos = _read_int(text, 0)
        _expect_end(text, pos)
    except _BadText:
        raise MXNetError(f"Invalid Parameter format for {name} expect int such as '6' "
                         f"but value={text!r}") from None
    return value


def parse_bool_text(name: str, text: str) -> bool:
    """dmlc's FieldEntry<bool>: ``true``/``false``/``1``/``0`` in any case, nothing else."""
    lower = text.lower() if text.isascii() else text
    if lower in ("true", "1"):
        return True
    if lower in ("false", "0"):
        return False
    raise MXNetError(f"Invalid Parameter format for {name} expect boolean ('true', 'false', "
                     f"'1' or '0', any case) but value={text!r}")


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} "
                        f"of type {type(value).__name__}")
    return int(value)


def _as_bool(name: str, value: Any) -> bool:
    """True/False, NumPy's bools, or the integers 0 and 1 (MXNet parses "0"/"1")."""
    return bool_arg(name, value)


def _as_shape(name: str, value: Any) -> Shape:
    """Accept an int, a tuple/list of ints or None (empty), like MXNet's TShape."""
    if value is None:
        return ()
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (tuple, list)):
        return tuple(_as_int(f"{name}[{i}]", v) for i, v in enumerate(value))
    raise TypeError(f"{name} must be a tuple of integers, got {value!r} "
                    f"of type {type(value).__name__}")


# An attribute is checked as its Python value, or parsed when given as MXNet's text.
def _int_field(name: str, value: Any) -> int:
    return parse_int_text(name, value) if isinstance(value, str) else _as_int(name, value)


def _bool_field(name: str, value: Any) -> bool:
    return parse_bool_text(name, value) if isinstance(value, str) else _as_bool(name, value)


def _shape_field(name: str, value: Any) -> Shape:
    if not isinstance(value, str):
        return _as_shape(name, value)
    shape = parse_shape_text(name, value)
    if shape is UNKNOWN_SHAPE and name == "target_shape":
        return ()  # MXNet only checks the other shapes' rank against the kernel's
    if shape is UNKNOWN_SHAPE:
        raise MXNetError(f"{name}={value!r} leaves the number of dimensions unknown; "
                         f"give {name} as a shape such as {_SHAPE_FORMS}")
    return shape


def _enum_field(name: str, value: Any) -> Any:
    """dmlc's optional enum: the text "None" is None; any other value stays as given."""
    return None if isinstance(value, str) and value == "None" else value


@dataclass(frozen=True)
class DeconvolutionParam:
    """The arguments of ``Deconvolution``, validated and normalised.

    All shape-like fields are tuples with one entry per spatial dimension
    (``target_shape`` may stay empty).  Build one with :meth:`from_kwargs`.

    >>> p = DeconvolutionParam.from_kwargs(kernel=(3, 3), num_filter=8)
    >>> p.stride, p.pad, p.no_bias
    ((1, 1), (0, 0), True)
    """

    kernel: Shape
    num_filter: int
    stride: Shape
    dilate: Shape
    pad: Shape
    adj: Shape
    target_shape: Shape
    num_group: int = 1
    no_bias: bool = True
    layout: str = "NCHW"

    def __hash__(self) -> int:  # cached: parameters key every primitive lookup
        return _cached_hash(self)

    @property
    def ndim(self) -> int:
        """Number of spatial dimensions (1, 2 or 3)."""
        return len(self.kernel)

    @property
    def uses_target_shape(self) -> bool:
        """MXNet infers pad and adj from ``target_shape`` when any entry is non-zero."""
        return any(self.target_shape)

    def dilated_kernel(self, axis: int) -> int:
        return self.dilate[axis] * (self.kernel[axis] - 1) + 1

    @classmethod
    def from_kwargs(cls, kernel: Any = None, num_filter: Any = None, *,
                    stride: Any = (), dilate: Any = (), pad: Any = (),
                    adj: Any = (), target_shape: Any = (), num_group: Any = 1,
                    no_bias: Any = True, layout: Optional[str] = None,
                    workspace: Any = 512, cudnn_tune: Any = None,
                    cudnn_off: Any = False) -> "DeconvolutionParam":
        """Validate MXNet-style keyword arguments and normalise them."""
        # Ignored (see _IGNORED_FIELDS) but type-checked as MXNet does.
        cudnn_tune, layout = _enum_field("cudnn_tune", cudnn_tune), _enum_field("layout", layout)
        # A uint64 in MXNet, read as istream does: a negative number wraps around.
        if not -_UINT64_LIMIT < _int_field("workspace", workspace) < _UINT64_LIMIT:
            raise MXNetError(f"workspace must fit MXNet's uint64 (a negative one wraps "
                             f"around, as in MXNet), got workspace={workspace}")
        if not (cudnn_tune is None or isinstance(cudnn_tune, str) and cudnn_tune in _CUDNN_TUNE):
            raise MXNetError(f"cudnn_tune must be one of {_CUDNN_TUNE}, got {cudnn_tune!r}")
        _bool_field("cudnn_off", cudnn_off)
        if kernel is None:
            raise MXNetError("Required parameter kernel of Shape(tuple) is not presented")
        if num_filter is None:
            raise MXNetError("Required parameter num_filter of int is not presented")
        kernel = _shape_field("kernel", kernel)
        ndim = len(kernel)
        if ndim not in DEFAULT_LAYOUTS:
            raise MXNetError(f"kernel must have 1, 2 or 3 dimensions, got kernel={kernel}")
        if any(k <= 0 for k in kernel):
            raise MXNetError(f"incorrect kernel size: kernel={kernel}; every entry must be >= 1")
        if any(k > MAX_PARAM for k in kernel):
            raise MXNetError(f"incorrect kernel size: kernel={kernel}; every entry must be "
                             f"<= {MAX_PARAM}")

        def per_dim(name: str, value: Any, default: int, minimum: int,
                    allow_empty: bool = False) -> Shape:
            shape = _shape_field(name, value)
            if not shape:
                return () if allow_empty else (default,) * ndim
            if len(shape) != ndim:
                raise MXNetError(
                    f"{name} must have the same number of dimensions as kernel, "
                    f"but kernel={kernel} while {name}={shape}")
            if any(v < minimum for v in shape):
                raise MXNetError(f"incorrect {name}: {name}={shape}; "
                                 f"every entry must be >= {minimum}")
            if any(v > MAX_PARAM for v in shape):
                raise MXNetError(f"incorrect {name}: {name}={shape}; "
                                 f"every entry must be <= {MAX_PARAM}")
            return shape

        stride_t = per_dim("stride", stride, 1, 1)
        dilate_t = per_dim("dilate", dilate, 1, 1)
        pad_t = per_dim("pad", pad, 0, 0)
        adj_t = per_dim("adj", adj, 0, 0)
        target_t = per_dim("target_shape", target_shape, 0, 0, allow_empty=True)

        num_filter = _int_field("num_filter", num_filter)
        num_group = _int_field("num_group", num_group)
        for name, value in (("num_filter", num_filter), ("num_group", num_group)):
            if value < 1:
                raise MXNetError(f"{name} must be >= 1, got {name}={value}")
            if value > MAX_PARAM:
                raise MXNetError(f"{name} must be <= {MAX_PARAM}, got {name}={value}")
        if num_filter % num_group:
            raise MXNetError("output num_filter must divide group size: "
                             f"num_filter={num_filter}, num_group={num_group}")
        no_bias = _bool_field("no_bias", no_bias)

        expected_layout = DEFAULT_LAYOUTS[ndim]
        if layout is not None and not isinstance(layout, str):
            raise TypeError(f"layout must be a string or None, got {layout!r} "
                            f"of type {type(layout).__name__}")
        if layout is not None and layout != expected_layout:
            raise MXNetError(
                f"layout {layout!r} is not supported for a {ndim}-D deconvolution: "
                f"only {expected_layout!r} (or None) is")
        for axis, name in enumerate(_AXIS_NAMES[ndim]):
            if not any(target_t) and adj_t[axis] >= stride_t[axis]:
                raise MXNetError(
                    f"adj({name}) must be samller than stride[{axis}]: "
                    f"adj={adj_t}, stride={stride_t}")
        return cls(kernel=kernel, num_filter=num_filter, stride=stride_t,
                   dilate=dilate_t, pad=pad_t, adj=adj_t, target_shape=target_t,
                   num_group=num_group, no_bias=no_bias, layout=expected_layout)


@dataclass(frozen=True)
class DeconvGeometry:
    """What one (parameters, data shape) pair means concretely.

    ``pad_l`` is the crop at the start of each spatial dim and ``pad_r`` the
    crop at its end (``pad - adj``; negative when ``adj > pad``, i.e. the
    output is extended by zeros-in-the-input): exactly oneDNN's ``padding_l``
    and ``padding_r``.
    """

    param: DeconvolutionParam
    data_shape: Shape
    out_shape: Shape
    weight_shape: Shape
    bias_shape: Optional[Shape]
    pad_l: Shape
    pad_r: Shape
    adj: Shape

    def __hash__(self) -> int:  # cached: geometries key every primitive lookup
        return _cached_hash(self)

    @property
    def in_channels(self) -> int:
        return self.data_shape[1]

    @property
    def spatial_in(self) -> Shape:
        return self.data_shape[2:]

    @property
    def spatial_out(self) -> Shape:
        return self.out_shape[2:]


def _full_size(param: DeconvolutionParam, axis: int, size: int) -> int:
    """Output length before any crop: every input pixel's full kernel footprint."""
    return param.stride[axis] * (size - 1) + param.dilated_kernel(axis)


def infer_geometry(param: DeconvolutionParam, data_shape: Shape) -> DeconvGeometry:
    """Infer crops and shapes as MXNet's ``DeconvolutionShape`` does.

    >>> p = DeconvolutionParam.from_kwargs(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
    ...                                    num_filter=3)
    >>> infer_geometry(p, (1, 8, 5, 5)).out_shape
    (1, 3, 10, 10)
    """
    ndim = param.ndim
    if len(data_shape) != ndim + 2:
        axes = ", ".join(DEFAULT_LAYOUTS[ndim])
        raise MXNetError(
            f"data must have {ndim + 2} dimensions ({axes}) for kernel={param.kernel}, "
            f"got data shape {tuple(data_shape)} with {len(data_shape)}")
    if any(s < 0 for s in data_shape):
        raise MXNetError(f"data shape must be non-negative, got {data_shape}")
    batch, channels = data_shape[:2]
    if channels == 0 or channels % param.num_group:
        raise MXNetError("input num_filter must divide group size: data has "
                         f"{channels} channels, num_group={param.num_group}")
    spatial = data_shape[2:]
    if any(s < 1 for s in spatial):
        raise MXNetError(f"data spatial dims must be >= 1, got data shape {data_shape}")

    if param.uses_target_shape:
        pad, adj = [], []
        for axis in range(ndim):
            total = _full_size(param, axis, spatial[axis]) - param.target_shape[axis]
            if total < 0:
                raise MXNetError(
                    f"too big target shape: target_shape={param.target_shape} but at "
                    f"most {_full_size(param, axis, spatial[axis])} is reachable in "
                    f"dim {axis} from data shape {data_shape}")
            adj.append(total % 2)
            pad.append((total + 1) // 2)
        for axis, name in enumerate(_AXIS_NAMES[ndim]):
            if adj[axis] >= param.stride[axis]:
                raise MXNetError(
                    f"adj({name}) must be samller than stride[{axis}]: target_shape="
                    f"{param.target_shape} implies adj={tuple(adj)}, stride={param.stride}")
        pad_t, adj_t = tuple(pad), tuple(adj)
    else:
        pad_t, adj_t = param.pad, param.adj

    out_spatial = tuple(_full_size(param, a, spatial[a]) - 2 * pad_t[a] + adj_t[a]
                        for a in range(ndim))
    if any(o <= 0 for o in out_spatial):
        raise MXNetError(
            f"output size must be positive, got output spatial shape {out_spatial} from "
            f"data shape {data_shape}, kernel={param.kernel}, stride={param.stride}, "
            f"dilate={param.dilate}, pad={pad_t}, adj={adj_t}")
    return DeconvGeometry(
        param=param, data_shape=tuple(data_shape),
        out_shape=(batch, param.num_filter) + out_spatial,
        weight_shape=(channels, param.num_filter // param.num_group) + param.kernel,
        bias_shape=None if param.no_bias else (param.num_filter,),
        pad_l=pad_t, pad_r=tuple(p - a for p, a in zip(pad_t, adj_t)), adj=adj_t)


def parse_params(kwargs: Mapping[str, Any]) -> DeconvolutionParam:
    """``DeconvolutionParam.from_kwargs`` of a call's keyword arguments.

    Unknown keywords raise :class:`TypeError`, like a Python signature would.
    (A repeated call does not come here: its prepared call remembers the
    result, see ``ops/_fastpath.pyx``.)
    """
    unknown = sorted(set(kwargs) - set(_FIELDS))
    if unknown:
        raise TypeError(f"Deconvolution got unexpected keyword argument(s) {unknown}; "
                        f"accepted: {list(_FIELDS)}")
    return DeconvolutionParam.from_kwargs(**kwargs)


def check_shape(name: str, given: Sequence[int], expected: Sequence[int]) -> None:
    """Raise MXNet's shape-inconsistency error unless ``given == expected``."""
    if tuple(given) != tuple(expected):
        raise MXNetError(f"{name} shape mismatch: expected {tuple(expected)}, "
                         f"got {tuple(given)}")
