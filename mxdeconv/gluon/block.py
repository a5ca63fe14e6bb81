"""MXNet's ``Block`` API: :class:`Block` and :class:`HybridBlock` (automatic
names and ``name_scope()``, children and parameters registered by attribute,
initialisation, ``save_parameters`` / ``load_parameters``).  The containers
:class:`~mxdeconv.gluon.nn.Sequential` and ``HybridSequential`` build on them
(:mod:`mxdeconv.gluon.sequential`).

Custom blocks are written as in MXNet 1.9.1: children assigned as attributes
inside ``with self.name_scope():``, parameters made with ``self.params.get``,
and ``forward(x)`` (a :class:`Block`) or ``hybrid_forward(F, x, **params)`` (a
:class:`HybridBlock`, ``F`` being :mod:`mxdeconv.nd`, the parameters passed by
attribute name):

>>> from mxdeconv import gluon, nd
>>> class Up(gluon.HybridBlock):
...     def __init__(self, **kwargs):
...         super().__init__(**kwargs)
...         with self.name_scope():
...             self.deconv = gluon.nn.Conv2DTranspose(2, 4, strides=2, padding=1,
...                                                    in_channels=3)
...             self.scale = self.params.get("scale", shape=(1,), init="ones")
...     def hybrid_forward(self, F, x, scale):
...         return F.broadcast_mul(F.relu(self.deconv(x)), scale)
>>> net = Up(prefix="up_")
>>> net.initialize()
>>> net(nd.ones((1, 3, 4, 4))).shape
(1, 2, 8, 8)
>>> list(net.collect_params())
['up_scale', 'up_conv0_weight', 'up_conv0_bias']
>>> list(net._structural())                    # save_parameters' names
['scale', 'deconv.weight', 'deconv.bias']
"""
from __future__ import annotations

import contextlib
import io
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np

from mxdeconv import nd as _nd
from mxdeconv.io import ndarray_file
from mxdeconv._core.errors import MXNetError

from ._args import _bool_arg, _dtype_arg, _load_args, _path_arg, _type_error
from .files import _open_saved, _unprefixed
from mxdeconv.initializer import Uniform
from .parameter import Parameter, ParameterDict, _install_staged, _loaded_dtype, _staged


_name_counts: Dict[str, int] = {}
_name_lock = threading.Lock()
#: Per thread, the ``name_scope()`` blocks entered: (prefix, that scope's counts).
_scopes = threading.local()


def _auto_prefix(base: str, prefix: Optional[str] = None) -> str:
    """MXNet's block prefix (``_BlockScope.create``): outside any ``name_scope()``
    the given ``prefix``, else the alias and a per-alias count (``conv0_``,
    ``conv1_``, ...); inside a block's ``name_scope()`` that block's prefix comes
    first and the count is the scope's own (``hybridsequential0_conv0_``), and a
    given prefix is put after it too (as MXNet does)."""
    stack = getattr(_scopes, "stack", None)
    scope_prefix, counts = stack[-1] if stack else ("", _name_counts)
    if prefix is None:
        with _name_lock:
            count = counts.get(base, 0)
            counts[base] = count + 1
        prefix = f"{base}{count}_"
    return scope_prefix + prefix


def _indent(text: str, spaces: int) -> str:
    return text.replace("\n", "\n" + " " * spaces)


class Block:
    """MXNet Gluon's ``Block``: the base of every layer and container.

    ``Block(prefix=None, params=None)``: ``prefix`` names the block's
    parameters (default: the class name in lower case and a count, ``up0_``);
    sharing parameters through ``params=`` is not supported.  Assigning a
    :class:`Block` or a :class:`~mxdeconv.gluon.Parameter` to an attribute
    registers it (a child, saved as ``<attribute>.<name>``; a parameter, saved
    as ``<attribute>``), as in MXNet.  Subclasses define :meth:`forward`.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> class Twice(nn.Block):
    ...     def __init__(self, **kwargs):
    ...         super().__init__(**kwargs)
    ...         with self.name_scope():
    ...             self.up = nn.Conv1DTranspose(1, 2, strides=2, in_channels=1)
    ...     def forward(self, x):
    ...         return self.up(x) * 2
    >>> block = Twice(prefix="twice_")
    >>> block.initialize("ones")
    >>> block(nd.ones((1, 1, 2))).asnumpy()
    array([[[2., 2., 2., 2.]]], dtype=float32)
    >>> list(block.collect_params())
    ['twice_conv0_weight', 'twice_conv0_bias']
    """

    prefix: str
    if TYPE_CHECKING:  # set with object.__setattr__ in __init__ (__setattr__ reads them)
        _children: OrderedDict[str, Block]
        _reg_params: OrderedDict[str, Parameter]

    def __init__(self, prefix: Optional[str] = None, params: Any = None) -> None:
        if params is not None:
            raise MXNetError(f"sharing parameters through params= is not supported: params "
                             f"must be None, got {params!r:.80}")
        if prefix is not None and not isinstance(prefix, str):
            raise _type_error("prefix", "a string or None", prefix)
        object.__setattr__(self, "_children", OrderedDict())
        object.__setattr__(self, "_reg_params", OrderedDict())
        self.prefix = _auto_prefix(self._alias(), prefix)
        self._params = ParameterDict(self.prefix)
        self._scope_counts: Dict[str, int] = {}

    def _alias(self) -> str:
        """The base of automatic prefixes (MXNet's ``Block._alias``)."""
        return type(self).__name__.lower()

    def __setattr__(self, name: str, value: Any) -> None:
        """Register a child block or a parameter assigned as an attribute."""
        if isinstance(value, (Block, Parameter)):
            if "_children" not in self.__dict__:
                raise MXNetError(f"{type(self).__name__}: call super().__init__() before "
                                 f"assigning the {type(value).__name__} '{name}'")
            existing = self.__dict__.get(name)
            if existing is not None and not isinstance(value, type(existing)) and not \
                    isinstance(existing, type(value)):
                raise TypeError(f"Changing attribute type for {name} from {type(existing)} "
                                f"to {type(value)} is not allowed.")
            if isinstance(value, Block):
                self.register_child(value, name)
            else:
                self._reg_params[name] = value
                self._params.setdefault(value.name, value)
        elif name in self.__dict__.get("_children", {}) or name in self.__dict__.get(
                "_reg_params", {}):
            # None (or anything else) replacing a registered child or parameter
            self._children.pop(name, None)
            self._reg_params.pop(name, None)
        object.__setattr__(self, name, value)

    def register_child(self, block: "Block", name: Optional[str] = None) -> None:
        """Register ``block`` as a child (by attribute name, or its index)."""
        if not isinstance(block, Block):
            raise _type_error("block", "a Gluon Block", block)
        if name is None:
            name = str(len(self._children))
        self._children[name] = block

    def apply(self, fn: Any) -> "Block":
        """Call ``fn(block)`` on every child (recursively), then on this block;
        returns this block (MXNet's ``Block.apply``).

        >>> from mxdeconv.gluon import nn
        >>> net = nn.HybridSequential()
        >>> net.add(nn.Activation("relu"), nn.Dropout(0.1))
        >>> seen = []
        >>> net.apply(lambda block: seen.append(type(block).__name__)) is net, seen
        (True, ['Activation', 'Dropout', 'HybridSequential'])
        """
        if not callable(fn):
            raise _type_error("fn", "a function of a block", fn)
        for child in self._children.values():
            child.apply(fn)
        fn(self)
        return self

    @contextlib.contextmanager
    def name_scope(self) -> Iterator[None]:
        """Blocks created inside get this block's prefix (MXNet's ``name_scope``)."""
        stack = getattr(_scopes, "stack", None)
        if stack is None:
            stack = _scopes.stack = []
        stack.append((self.prefix, self._scope_counts))
        try:
            yield
        finally:
            stack.pop()

    def _layers_by_key(self) -> Dict[str, Tuple["Block", Parameter]]:
        """``{structural name: (the block that owns it, parameter)}``, in order:
        MXNet's ``_collect_params_with_prefix`` (own parameters by attribute,
        then each child's under ``<child name>.``)."""
        owned: Dict[str, Tuple[Block, Parameter]] = {
            key: (self, param) for key, param in self._reg_params.items()}
        for child_name, child in self._children.items():
            for key, item in child._layers_by_key().items():
                owned[f"{child_name}.{key}"] = item
        return owned

    def _structural(self) -> Dict[str, Parameter]:
        return {key: param for key, (_, param) in self._layers_by_key().items()}

    @staticmethod
    def _loaded_dtype(param: Parameter, saved: np.dtype, where: str, cast_dtype: bool,
                      dtype_source: str) -> np.dtype:
        return _loaded_dtype(param, saved, where, cast_dtype, dtype_source)

    def _check_loaded_shape(self, param: Parameter, shape: Tuple[int, ...], where: str) -> None:
        if not param._fits(shape):
            raise MXNetError(f"{where}: shape incompatible expected {param._shape_text()} "
                             f"vs saved {shape}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """What the block computes; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} defines no forward")

    def __repr__(self) -> str:
        children = "\n".join(f"  ({key}): {_indent(repr(block), 2)}"
                             for key, block in self._children.items())
        return f"{type(self).__name__}(\n{children}\n)" if children else \
            f"{type(self).__name__}()"

    @property
    def name(self) -> str:
        return self.prefix[:-1] if self.prefix.endswith("_") else self.prefix

    def collect_params(self, select: Optional[str] = None) -> ParameterDict:
        """The parameters by full name; ``select`` is a regular expression on it."""
        if select is not None and not isinstance(select, str):
            raise _type_error("select", "a regular expression (str) or None", select)
        try:
            pattern = re.compile(select) if select else None
        except re.error as err:
            raise MXNetError(f"select must be a regular expression, got {select!r}: "
                             f"{err}") from err
        collected = ParameterDict(self._params.prefix)
        self._collect_into(collected, pattern)
        return collected

    def _collect_into(self, collected: ParameterDict, pattern: Any) -> None:
        for param in list(self._params.values()) + list(self._reg_params.values()):
            if pattern is None or pattern.match(param.name):
                collected.setdefault(param.name, param)
        for child in self._children.values():
            child._collect_into(collected, pattern)

    @property
    def params(self) -> ParameterDict:
        """This block's own parameters (not its children's), by full name;
        ``params.get(name, **kwargs)`` makes ``prefix + name`` (MXNet's)."""
        return self._params

    def initialize(self, init: Any = None, ctx: Any = None, verbose: bool = False,
                   force_reinit: bool = False) -> None:
        """Initialise the parameters; ``init`` (default :class:`Uniform`, as MXNet's
        ``Block.initialize``) applies to those created without an initializer;
        ``ctx`` is a CPU context or a list of them (a GPU raises
        :class:`~mxdeconv.MXNetError`), see :meth:`Parameter.list_ctx`."""
        self.collect_params().initialize(Uniform() if init is None else init, ctx,
                                         verbose, force_reinit)

    def hybridize(self, active: bool = True, **kwargs: Any) -> None:
        """Accepted for MXNet compatibility; every call is imperative anyway."""
        _bool_arg("active", active)

    def cast(self, dtype: Any) -> None:
        """Cast every parameter to ``dtype`` (see :meth:`Parameter.cast`)."""
        dtype = _dtype_arg("dtype", dtype)
        for param in self._structural().values():
            param.cast(dtype)

    def save_parameters(self, filename: str, deduplicate: bool = False) -> None:
        """Save the parameters to ``filename``, under exactly that name, by their
        structural names (``weight`` and ``bias`` of a layer; ``0.weight``,
        ``0.bias``, ``1.weight``, ... of a :class:`Sequential`).

        A name ending in ``.npz`` gets a NumPy ``.npz`` archive; any other name
        (``.params``) gets MXNet's binary format, byte for byte what MXNet 1.9.1's
        ``save_parameters`` writes for the same block, so MXNet's
        ``load_parameters`` reads it.  The file is written
        beside ``filename`` and renamed over it: a failed save leaves no
        half-written file."""
        path = _path_arg("filename", filename)
        _bool_arg("deduplicate", deduplicate)
        params = self._structural()
        values = [param.data()._plain() for param in params.values()]
        if path.lower().endswith(".npz"):
            archive = io.BytesIO()
            # The keys are parameter names (NumPy's stub fears one named allow_pickle).
            np.savez(archive, **dict(zip(params, values)))  # type: ignore[arg-type]
            ndarray_file.write_atomically(path, [archive.getbuffer()], "filename")
        else:
            ndarray_file.write_arrays(path, values, list(params), argument="filename")

    def load_parameters(self, filename: str, ctx: Any = None, allow_missing: bool = False,
                        ignore_extra: bool = False, cast_dtype: bool = False,
                        dtype_source: str = "current") -> None:
        """Load an MXNet ``.params`` file or a ``.npz`` archive.

        The format is recognised by its first bytes, whatever the name: MXNet's
        NDArray files (``save_parameters``, ``collect_params().save``,
        ``mx.nd.save`` of a dict, ``export``/``save_checkpoint``) or NumPy ``.npz``
        archives (:meth:`save_parameters` to a ``.npz`` name, ``np.savez``).
        Keys are the structural names MXNet's ``save_parameters`` writes
        (``weight``/``bias`` for a lone layer, ``0.weight`` for a
        :class:`Sequential`), or the parameters' full names (``conv0_weight``, as
        ``collect_params().save`` writes them; for a lone layer any name ending
        in ``_weight``/``_bias``), each with or without ``save_checkpoint``'s
        ``arg:``/``aux:`` prefix.  As in MXNet,
        a dtype other than the parameter's is refused unless ``cast_dtype=True``
        (``dtype_source="saved"`` then adopts the file's dtype); an unknown
        ``in_channels`` is taken from the saved weight.  ``ctx`` is a CPU context
        or a list of them (as for :meth:`initialize`); for a parameter initialized
        already it must name the contexts it was initialized on.

        All or nothing: the names, shapes and dtypes of every array are checked
        and the arrays converted before any parameter changes, so after an error
        the layer holds what it held before.  The file is untrusted: it is never
        unpickled, and a file that is neither a valid NDArray file nor an ``.npz``
        archive of numeric arrays (a ``.npy`` file, object arrays, corrupt or
        truncated bytes) raises :class:`MXNetError`.
        """
        path, contexts, allow_missing, ignore_extra, cast_dtype, dtype_source = _load_args(
            filename, ctx, allow_missing, ignore_extra, cast_dtype, dtype_source)
        owners = self._layers_by_key()
        staged = []
        with _open_saved(path) as archive:
            for key, saved_key in self._match_saved(archive.keys, path, allow_missing,
                                                    ignore_extra).items():
                layer, param = owners[key]
                where = (f"Failed loading Parameter '{param.name}' from array "
                         f"'{saved_key}' of '{path}'")
                shape, saved_dtype = archive.header(saved_key)
                dtype = layer._loaded_dtype(param, saved_dtype, where, cast_dtype,
                                            dtype_source)
                layer._check_loaded_shape(param, shape, where)
                staged.append(_staged(param, archive, saved_key, shape, saved_dtype, dtype,
                                      contexts, where))
        _install_staged(staged)

    def _match_saved(self, saved_keys: Sequence[str], path: str, allow_missing: bool,
                     ignore_extra: bool) -> Dict[str, str]:
        """``{parameter key: saved key}``, each saved key with or without an
        ``arg:``/``aux:`` prefix: the structural name (``weight``, ``0.weight``),
        else the parameter's full name (``conv0_weight``, as ``collect_params().save``
        writes it), else, for a lone layer, any ``*_weight``."""
        matched = {}
        for key, param in self._structural().items():
            candidates = ([k for k in saved_keys if _unprefixed(k) == key]
                          or [k for k in saved_keys if _unprefixed(k) == param.name]
                          or ([k for k in saved_keys if _unprefixed(k).endswith("_" + key)]
                              if "." not in key else []))
            if len(candidates) > 1:
                raise MXNetError(f"{path}: several arrays could be '{key}': {candidates}")
            if candidates:
                matched[key] = candidates[0]
            elif not allow_missing:
                raise MXNetError(f"Parameter '{key}' is missing in file '{path}', which "
                                 f"contains {sorted(saved_keys)}. Set allow_missing=True to "
                                 "ignore missing parameters.")
        extra = sorted(set(saved_keys) - set(matched.values()))
        if extra and not ignore_extra:
            raise MXNetError(f"Parameters {extra} in file '{path}' are not in the layer. "
                             "Set ignore_extra=True to ignore them.")
        return matched


class HybridBlock(Block):
    """MXNet Gluon's ``HybridBlock``: :meth:`forward` calls
    ``hybrid_forward(F, x, *args, **params)`` with ``F`` the :mod:`mxdeconv.nd`
    module and this block's own parameters (by attribute name) as NDArrays.
    ``hybridize()`` is accepted; every call runs imperatively (there is no
    symbolic graph, so ``F`` is always ``nd``).

    >>> from mxdeconv import gluon, nd
    >>> class Scale(gluon.HybridBlock):
    ...     def __init__(self, **kwargs):
    ...         super().__init__(**kwargs)
    ...         self.alpha = self.params.get("alpha", shape=(1,), init=gluon.Constant(2.0))
    ...     def hybrid_forward(self, F, x, alpha):
    ...         return F.broadcast_mul(x, alpha)
    >>> block = Scale()
    >>> block.initialize()
    >>> block.hybridize()
    >>> block(nd.ones((2,))).asnumpy()
    array([2., 2.], dtype=float32)
    """

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        params = {name: param.data() for name, param in self._reg_params.items()}
        params.update(kwargs)
        return self.hybrid_forward(_nd, x, *args, **params)

    def hybrid_forward(self, F: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        """What the block computes, ``F`` being :mod:`mxdeconv.nd`; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} defines no hybrid_forward")

    def export(self, path: str, epoch: int = 0, remove_amp_cast: bool = True) -> None:
        raise MXNetError("HybridBlock.export writes a symbolic graph (-symbol.json), which "
                         "mxdeconv does not have; save the parameters with "
                         "save_parameters(path) instead")


#: The name the rest of the package knew the base by.
_Block = Block
