"""A small MXNet-style NDArray whose buffer may hold a oneDNN blocked layout.

An :class:`NDArray` owns one buffer.  In the *default* layout the buffer is a
C-contiguous NumPy array of the logical shape.  After a oneDNN primitive it
may instead hold a *blocked* layout (``nChw16c`` and friends): the buffer is
then raw bytes described by a layout object from the oneDNN extension, which
also says which logical tensor the bytes hold (its role, data or weights, and
the NDArray shape), and the array turns back to the default layout only when
someone needs plain memory (``asnumpy()``, ``__array__``, the NumPy fallback,
:meth:`NDArray.reorder_to_default`).  This is MXNet's ``Reorder2DefaultAsync``
made synchronous.

Two rules keep the state safe:

* The buffer and its layout change together, atomically: they are one tuple,
  read once by every operation, and replaced by compare-and-swap, so threads
  reading one blocked array never see a layout that does not match its bytes.
* Memory visible outside mxdeconv (a NumPy view from ``np.asarray``, a DLPack
  export or import, a ``detach()``, an NDArray view from indexing or
  ``reshape``) is *exposed*: such an array keeps its buffer
  for good, so the view never goes stale.  Operators that prefer another layout
  (an inference weight) then reorder into a temporary on every call instead of
  swapping the buffer.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Optional, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import ints_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.context import Context, context_arg, current_context
from mxdeconv._core._ndbase import NDArrayBase
from mxdeconv._core.buffers import POOL_MIN_BYTES, aligned_empty
from mxdeconv._core.dtypes import (
    as_dtype, is_bfloat16, is_float_dtype, is_ndarray_dtype, ndarray_dtype_names)
from .methods import NDArrayMethods

__all__ = ["DEFAULT_LAYOUT", "NDArray", "array", "as_ndarray", "empty",
           "from_dlpack", "is_float_dtype", "ones", "to_dlpack_for_read",
           "to_dlpack_for_write", "zeros"]

DEFAULT_LAYOUT = "default"
# Guards the compare-and-swap of an NDArray's state; held for a few bytecodes,
# never while a reorder runs.
_STATE_LOCK = threading.Lock()


class NDArray(NDArrayMethods, NDArrayBase):
    """An n-dimensional array on the CPU, in MXNet's style.

    Arithmetic, comparisons, reductions, indexing and shape methods follow
    MXNet 1.9.1 and are computed by NumPy through its array protocols (see
    :mod:`mxdeconv.ndarray.methods` and :mod:`mxdeconv.ndarray.numpy_protocols`): NumPy
    functions called on NDArrays return NDArrays too.

    >>> from mxdeconv import nd
    >>> x = nd.array([[1, 2], [3, 4]])
    >>> x.shape, x.dtype, x.layout
    ((2, 2), dtype('float32'), 'default')
    >>> (x - 1)[1].asnumpy(), (x > 2).asnumpy().tolist()
    (array([2., 3.], dtype=float32), [[0.0, 0.0], [1.0, 1.0]])
    """

    # The fields live in the compiled base class (declared in _ndbase.pxd).
    __slots__ = ()

    def __init__(self, buffer: np.ndarray, layout: Any = None) -> None:
        # Internal constructor: `buffer` is owned by the new array from now on.
        # layout None: `buffer` is the C-contiguous default-layout array; else a
        # oneDNN layout object (see _ops.Layout) describing raw bytes.
        if not isinstance(buffer, np.ndarray):
            raise TypeError(f"NDArray(buffer) takes a NumPy array (use nd.array() to copy "
                            f"any array-like), got {type(buffer).__name__}")
        self._state = (buffer, layout)
        if layout is None:
            self._shape, self._dtype = tuple(buffer.shape), buffer.dtype
        else:
            self._shape, self._dtype = layout.shape, layout.np_dtype

    # -- basic properties -------------------------------------------------
    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def context(self) -> Context:
        """The device: always ``cpu(0)``."""
        return current_context()

    ctx = context

    @property
    def layout(self) -> str:
        """``"default"`` for plain row-major memory, else the oneDNN format name.

        Blocked names use MXNet/oneDNN's letters, e.g. ``"nChw16c"`` for
        activations or ``"gOIhw16i16o"``-style names for weights.
        """
        layout = self._state[1]
        return DEFAULT_LAYOUT if layout is None else layout.name

    # -- layout changes (atomic: see the module docstring) -------------------
    def _plain(self) -> np.ndarray:
        """The default-layout buffer, after turning a blocked one plain in place."""
        while True:
            state = self._state
            buffer, layout = state
            if layout is None:
                return buffer
            plain = layout.to_plain(buffer)
            with _STATE_LOCK:
                if self._state is state:
                    self._state = (plain, None)
                    return plain
            # Another thread changed the state meanwhile: use what it left.

    def _adopt(self, state: Tuple[np.ndarray, Any], buffer: np.ndarray, layout: Any) -> bool:
        """Replace ``state`` (as read earlier) by the same values held in ``buffer``
        and ``layout``, unless the memory is exposed or the state changed since."""
        with _STATE_LOCK:
            if self._exposed or self._state is not state:
                return False
            self._state = (buffer, layout)
            return True

    def _expose(self) -> np.ndarray:
        """The default-layout buffer, marked as visible outside mxdeconv for good."""
        while True:
            buffer = self._plain()
            with _STATE_LOCK:
                if self._state[0] is buffer:
                    self._exposed = True
                    return buffer

    def _bump(self) -> None:
        """Record a write through mxdeconv (cached copies of the values are stale)."""
        self._version += 1

    def reorder_to_default(self) -> "NDArray":
        """Turn a blocked buffer into plain row-major memory, in place; returns self.

        >>> from mxdeconv import nd
        >>> nd.ones((1, 16, 2, 2)).reorder_to_default().layout
        'default'
        """
        self._plain()
        return self

    # -- reading ------------------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        """A NumPy copy of the values (the array turns to the default layout first).

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).asnumpy()
        array([1., 1.], dtype=float32)
        """
        values = self._plain()
        if values.nbytes < POOL_MIN_BYTES:
            return values.copy()
        # A large copy takes a pooled block: fresh pages would fault on every call.
        copied = aligned_empty(values.shape, values.dtype)
        np.copyto(copied, values)
        return copied

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """``np.asarray(arr)``: a view of the default-layout buffer (a blocked array
        is turned into the default layout first, in place); a copy only when
        ``copy=True`` or another ``dtype`` is asked for (``copy=False`` then raises).

        A view makes the array *exposed*: it keeps this buffer for good, so
        writes through the view always reach it.

        >>> import numpy as np
        >>> from mxdeconv import nd
        >>> x = nd.zeros((2,))
        >>> view = np.asarray(x)
        >>> view[0] = 5
        >>> x.asnumpy()
        array([5., 0.], dtype=float32)
        """
        if dtype is not None and as_dtype(dtype) != self._dtype:
            if copy is False:
                raise MXNetError(f"cannot view a {self._dtype} NDArray as {as_dtype(dtype)} "
                                 "without a copy")
            return self._plain().astype(as_dtype(dtype))
        if copy:
            return self._plain().copy()
        return self._expose()

    def asscalar(self) -> Any:
        """The value of a one-element array as a Python number.

        >>> from mxdeconv import nd
        >>> nd.array([2.5]).asscalar()
        2.5
        """
        if self.size != 1:
            raise MXNetError(f"The current array is not a scalar: shape {self._shape}")
        return self._plain().reshape(()).item()

    def wait_to_read(self) -> None:
        """MXNet compatibility: every operation here is synchronous.

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).wait_to_read()
        """

    def wait_to_write(self) -> None:
        """MXNet compatibility: every operation here is synchronous.

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).wait_to_write()
        """

    def __repr__(self) -> str:
        dims = "x".join(str(d) for d in self._shape)
        return f"\n{self._plain()!s}\n<NDArray {dims} @cpu(0)>"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]

    # -- copying and pickling: always the values, in the default layout ---------
    def __reduce__(self) -> Tuple[Any, Tuple[np.ndarray]]:
        return _same_dtype_copy, (self._plain().copy(),)

    def __copy__(self) -> "NDArray":
        return _same_dtype_copy(self._plain())

    def __deepcopy__(self, memo: Any) -> "NDArray":
        return _same_dtype_copy(self._plain())

    # -- autograd (see mxdeconv.autograd) -----------------------------------
    def attach_grad(self, grad_req: str = "write", stype: Any = None) -> None:
        """Make this array a variable: backward puts its gradient in :attr:`grad`.

        ``grad_req`` is ``"write"`` (each backward overwrites), ``"add"``
        (backward calls accumulate) or ``"null"`` (no gradient).  The gradient
        starts as zeros, in this array's shape and dtype.

        >>> from mxdeconv import autograd, nd
        >>> x = nd.array([1.0, 2.0])
        >>> x.attach_grad()
        >>> with autograd.record():
        ...     y = x * x
        >>> y.backward()
        >>> x.grad.asnumpy()
        array([2., 4.], dtype=float32)
        """
        if stype not in (None, "default"):
            raise MXNetError(f"stype {stype!r} is not supported: only dense arrays")
        if not isinstance(grad_req, str):
            raise TypeError(f"attach_grad: grad_req must be a string, one of "
                            f"{tape.GRAD_REQS}, got {grad_req!r} of type "
                            f"{type(grad_req).__name__}")
        if grad_req not in tape.GRAD_REQS:
            raise MXNetError(f"grad_req must be one of {tape.GRAD_REQS}, got {grad_req!r}")
        tape.set_variable(self, zeros(self._shape, dtype=self._dtype), grad_req)

    @property
    def grad(self) -> Optional["NDArray"]:
        """The gradient attached by :meth:`attach_grad` (None if there is none)."""
        return self._grad

    @property
    def grad_req(self) -> str:
        """``"write"``, ``"add"`` or ``"null"`` (set by :meth:`attach_grad`)."""
        return self._grad_req

    def backward(self, out_grad: Optional["NDArray"] = None, retain_graph: bool = False,
                 train_mode: bool = True) -> None:
        """Backpropagate from this array, the result of recorded operators.

        ``out_grad`` is the gradient of the loss with respect to this array
        (None: ones).  See :func:`mxdeconv.autograd.backward`.

        >>> from mxdeconv import autograd, nd
        >>> x = nd.array([3.0])
        >>> x.attach_grad()
        >>> with autograd.record():
        ...     y = x * 2
        >>> y.backward(nd.array([10.0]))
        >>> x.grad.asnumpy()
        array([20.], dtype=float32)
        """
        tape.backward([self], [out_grad], retain_graph=retain_graph, train_mode=train_mode)

    def _ones_like(self) -> "NDArray":
        """Ones of this shape and dtype (the tape's default head gradient)."""
        return ones(self._shape, dtype=self._dtype)

    def detach(self) -> "NDArray":
        """A new array sharing this one's memory, outside any recorded graph.

        Both arrays are in the default layout from then on (shared memory is
        exposed memory: neither swaps its buffer).

        >>> from mxdeconv import nd
        >>> x = nd.ones((2,))
        >>> x.detach().shape
        (2,)
        """
        detached = NDArray(self._expose())
        detached._exposed = True
        return detached

    # -- set by the modules that build on NDArray --------------------------------
    # numpy_protocols.install(), indexing.install() and reductions.install() set
    # these on the class when the package is imported (mxdeconv/ndarray/__init__.py):
    # this module never imports those, which import it.
    if TYPE_CHECKING:
        def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any,
                            **kwargs: Any) -> Any: ...
        def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any: ...
        def __getitem__(self, key: Any) -> Any: ...
        def __setitem__(self, key: Any, value: Any) -> None: ...
        def astype(self, dtype: Any, copy: bool = True) -> Any: ...
        def copyto(self, other: Any) -> Any: ...
        def as_in_context(self, context: Any) -> Any: ...
        def _reshape_copy(self, shape: Any) -> "NDArray": ...
        def argmax(self, axis: Any = None, keepdims: bool = False) -> Any: ...
        def argmin(self, axis: Any = None, keepdims: bool = False) -> Any: ...

    # -- DLPack ---------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """Export the default-layout buffer as a DLPack capsule, without a copy.

        A blocked array is turned into the default layout first (in place), so
        ``np.from_dlpack(arr)`` or ``torch.from_dlpack(arr)`` always sees plain
        row-major memory, shared with this array for good (the array is then
        exposed: it never swaps its buffer).  Keyword arguments
        (``max_version``, ``dl_device``, ``copy``) are passed on to NumPy's
        exporter.  bfloat16 arrays cannot be exported: NumPy's exporter has no
        DLPack code for ml_dtypes' bfloat16.

        >>> import numpy as np
        >>> from mxdeconv import nd
        >>> x = nd.ones((2, 2))
        >>> np.shares_memory(np.from_dlpack(x), np.asarray(x))
        True
        """
        if is_bfloat16(self._dtype):
            raise MXNetError("a bfloat16 NDArray cannot be exported through DLPack (NumPy's "
                             "exporter has no bfloat16 code): convert it first, e.g. "
                             "arr.astype('float32')")
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if stream is not None:
            kwargs["stream"] = stream
        return self._expose().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(1, 0)``: DLPack's ``kDLCPU``, device 0."""
        return (1, 0)


def _check_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    if dtype is None:
        raise TypeError(f"{name} must name a dtype, got None")
    try:
        dtype = as_dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{name} must name a dtype such as 'float32', got {dtype!r}: "
                        f"{error}") from None
    if not is_ndarray_dtype(dtype):
        raise TypeError(f"unsupported {name} {dtype}: mxdeconv arrays are "
                        f"{', '.join(ndarray_dtype_names())}")
    return dtype


def _shape_arg(shape: Any) -> Tuple[int, ...]:
    """An int or a sequence of non-negative ints, as MXNet's shape arguments."""
    entries = ints_arg("shape", shape)
    if any(extent < 0 for extent in entries):
        raise MXNetError(f"shape entries must be >= 0, got shape {entries}")
    return entries


def _host_values(source: Any) -> np.ndarray:
    """``source`` as a NumPy array of real numbers."""
    if isinstance(source, np.ndarray):
        values = source
    elif hasattr(source, "__dlpack__"):  # a foreign tensor (PyTorch, JAX, ...)
        if callable(getattr(source, "detach", None)):  # a torch tensor that requires grad
            source = source.detach()
        try:
            values = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            raise TypeError(f"cannot copy a {type(source).__name__} into an NDArray: "
                            f"NumPy cannot import it through DLPack ({error}); convert "
                            "it to float16/32/64 first") from None
    elif source is None or isinstance(source, (str, bytes, dict, set)):
        raise TypeError(f"source must be an NDArray, an array or (nested) numbers, "
                        f"got {type(source).__name__}")
    else:
        try:
            values = np.asarray(source)
        except ValueError as error:  # ragged nesting
            raise MXNetError(f"source is not a rectangular array: {error}") from None
    # Booleans, integers and real floats only: complex values would lose their
    # imaginary part, and strings, objects, dates or records are not numbers.
    if not (values.dtype.kind in "biuf" or is_float_dtype(values.dtype)):
        raise TypeError(f"source must hold real numbers, got values of dtype {values.dtype} "
                        f"from {type(source).__name__}")
    return values


def array(source: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """Copy ``source`` (array-like, NumPy array or NDArray) into a new NDArray.

    The default dtype is an NDArray's own dtype and ``float32`` for anything
    else (Python values, NumPy arrays of any dtype, DLPack tensors), as in
    MXNet 1.9.1: ``nd.array(np.random.randn(2, 2))`` is float32, and runs on
    oneDNN; pass ``dtype=`` to keep float64 or float16.  ``ctx`` is a CPU context (see
    :func:`mxdeconv._core.context.context_arg`).
    The data is always copied: the result never aliases ``source``.

    >>> import mxdeconv
    >>> from mxdeconv import nd
    >>> nd.array([1.5, 2.5], dtype="float64").dtype
    dtype('float64')
    >>> nd.array([1, 2], mxdeconv.cpu(), "int32").asnumpy()
    array([1, 2], dtype=int32)
    """
    if ctx is not None:
        context_arg("ctx", ctx)
    if isinstance(source, NDArray):
        values = source._plain()
        if dtype is None:
            dtype = values.dtype
    else:
        values = _host_values(source)
    if dtype is None:  # anything but an NDArray: float32, as in MXNet
        dtype = np.float32
    dtype = _check_dtype(dtype)
    buffer = aligned_empty(values.shape, dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # as NumPy's astype: inf on overflow
        np.copyto(buffer, values, casting="unsafe")
    return NDArray(buffer)


def write_values(values: np.ndarray, target: Optional[NDArray] = None, add: bool = False,
                 dtype: Any = None) -> NDArray:
    """Write ``values`` into ``target`` (or add them to it: ``add``), cast to its
    dtype, and return it; without a target, a new NDArray holding a copy in
    ``dtype`` (default: the values'), never a view of ``values``.  The one
    place results and gradients are stored into arrays (operators' ``out=``,
    ``req='add'``, gradient buffers).  Overflow to inf and NaN follow IEEE, as
    in MXNet, without NumPy's warnings."""
    if target is None:
        buffer = aligned_empty(values.shape, values.dtype if dtype is None else dtype)
        np.copyto(buffer, values, casting="unsafe")
        return NDArray(buffer)
    plain = target._plain()
    with np.errstate(over="ignore", invalid="ignore"):
        if add:
            np.add(plain, values, out=plain, casting="unsafe")
        else:
            np.copyto(plain, values, casting="unsafe")
    target._bump()
    return target


def _same_dtype_copy(values: np.ndarray) -> NDArray:
    """A new NDArray holding a copy of ``values`` in their dtype: the floats of
    :func:`array`, and also the integer and bool arrays that ``nd.load`` reads
    (which :func:`array` would turn into float32)."""
    buffer = aligned_empty(values.shape, values.dtype)
    np.copyto(buffer, values)
    return NDArray(buffer)


def empty(shape: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """An uninitialised NDArray in the default layout (``dtype`` None: float32).

    The arguments are MXNet's, in its order: ``nd.empty((2, 3), mx.cpu(), "float64")``.

    >>> from mxdeconv import nd
    >>> nd.empty((2, 3)).shape
    (2, 3)
    """
    if ctx is not None:
        context_arg("ctx", ctx)
    return NDArray(aligned_empty(_shape_arg(shape),
                                 np.dtype(np.float32) if dtype is None else _check_dtype(dtype)))


def zeros(shape: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """An NDArray of zeros (arguments as :func:`empty`).

    >>> from mxdeconv import nd
    >>> nd.zeros((2, 3)).shape
    (2, 3)
    """
    out = empty(shape, ctx, dtype)
    out._state[0].fill(0)
    return out


def ones(shape: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """An NDArray of ones (arguments as :func:`empty`).

    >>> from mxdeconv import nd
    >>> nd.ones((2,), dtype="float64").asnumpy()
    array([1., 1.])
    """
    out = empty(shape, ctx, dtype)
    out._state[0].fill(1)
    return out


class _Capsule:
    """Wrap a bare DLPack capsule (MXNet's ``to_dlpack_for_read`` style) for
    ``np.from_dlpack``, which takes objects with ``__dlpack__``."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule  # versioned or not: the importer reads its name

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)


def from_dlpack(source: Any) -> NDArray:
    """An NDArray sharing the memory of a DLPack tensor, without a copy.

    ``source`` is an object with ``__dlpack__`` (a PyTorch tensor, a NumPy
    array, another NDArray) or a DLPack capsule.  It must be a C-contiguous
    CPU tensor of a dtype NDArray holds (float16/32/64, bfloat16, int8, uint8,
    int32, int64); anything else raises rather than copying silently (use
    :func:`array` to copy).  Writes through either side are seen by the other:
    the NDArray is *exposed* and keeps that memory for good.  A tensor imported through a
    legacy (unversioned) capsule, such
    as :func:`to_dlpack_for_read` returns, is read-only: DLPack 0.x cannot say
    whether writing is allowed, so NumPy refuses it; the NDArray can still be
    an operator's input.

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> values = np.zeros((2, 3), dtype=np.float32)
    >>> x = nd.from_dlpack(values)
    >>> values[0, 0] = 7
    >>> float(x.asnumpy()[0, 0])
    7.0
    """
    if type(source).__name__ == "PyCapsule":
        source = _Capsule(source)
    elif not hasattr(source, "__dlpack__"):
        raise TypeError(f"from_dlpack: source must be a DLPack capsule or have __dlpack__, "
                        f"got {type(source).__name__}")
    try:
        view = np.from_dlpack(source)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        raise MXNetError(f"from_dlpack: cannot import {type(source).__name__}: {error} "
                         "(a capsule can be consumed once)") from None
    _check_dtype(view.dtype)
    if not view.flags.c_contiguous:
        raise MXNetError(f"from_dlpack: the tensor of shape {view.shape} is not C-contiguous "
                         f"(strides {view.strides}); make it contiguous or use nd.array()")
    imported = NDArray(view)
    imported._exposed = True
    return imported


def _require_ndarray(data: Any, name: str) -> NDArray:
    if not isinstance(data, NDArray):
        raise TypeError(f"{name}: data must be an NDArray, got {type(data).__name__}")
    return data


def to_dlpack_for_read(data: NDArray) -> Any:
    """A DLPack capsule of ``data``'s default-layout buffer (MXNet's name).

    It is a legacy (DLPack 0.x) capsule, which importers treat as read-only.

    >>> from mxdeconv import nd
    >>> nd.from_dlpack(nd.to_dlpack_for_read(nd.ones((2,)))).asnumpy()
    array([1., 1.], dtype=float32)
    """
    return _require_ndarray(data, "to_dlpack_for_read").__dlpack__()


def to_dlpack_for_write(data: NDArray) -> Any:
    """A writable DLPack capsule of ``data``'s default-layout buffer (MXNet's name).

    A versioned (DLPack 1.0) capsule where NumPy can make one (NumPy >= 2.1),
    so that importers may write through it; else the legacy capsule.

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> x = nd.zeros((2,))
    >>> view = nd.from_dlpack(nd.to_dlpack_for_write(x))
    >>> np.asarray(view)[1] = 3
    >>> x.asnumpy()
    array([0., 3.], dtype=float32)
    """
    data = _require_ndarray(data, "to_dlpack_for_write")
    try:
        return data.__dlpack__(max_version=(1, 0))
    except TypeError:  # NumPy < 2.1 exports legacy capsules only
        return data.__dlpack__()


def as_ndarray(value: Any, name: str) -> NDArray:
    """Accept a floating-point NDArray as is; copy a NumPy array in its own dtype
    (never alias the caller's memory; a float64 array computes in float64).
    Operators (Deconvolution, relu) take floats only."""
    if isinstance(value, NDArray):
        if not is_float_dtype(value._dtype):
            raise TypeError(f"{name} must be a floating-point array, got dtype {value._dtype} "
                            "(convert it with astype('float32'))")
        return value
    if isinstance(value, np.ndarray):
        if not is_float_dtype(value.dtype):
            raise TypeError(f"{name} must be a floating-point array, got dtype {value.dtype}")
        return array(value, dtype=value.dtype)
    raise TypeError(f"{name} must be an NDArray or a NumPy array, "
                    f"got {type(value).__name__}")
