"""MXNet's ``Block`` API: automatic names and ``name_scope()``, what a layer and a
container share (parameters, initialisation, ``save_parameters`` /
``load_parameters``), and the containers :class:`Sequential` and
:class:`HybridSequential`."""
from __future__ import annotations

import contextlib
import io
import re
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from mxdeconv.io import ndarray_file
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray

from ._args import (_bool_arg, _choice_arg, _contexts_arg, _dtype_arg, _is_int, _path_arg,
                    _type_error)
from .files import _open_saved, _unprefixed
from .initializers import Uniform
from .parameter import Parameter, ParameterDict

if TYPE_CHECKING:  # for annotations only: .layers imports this module
    from .layers import _ConvTranspose


_name_counts: Dict[str, int] = {}
_name_lock = threading.Lock()
#: Per thread, the ``name_scope()`` blocks entered: (prefix, that scope's counts).
_scopes = threading.local()


def _auto_prefix(base: str) -> str:
    """MXNet's automatic prefix: the block's alias and a per-alias count
    (every convolution layer's alias is ``conv``: ``conv0_``, ``conv1_``, ...);
    inside a container's ``name_scope()`` the container's prefix comes first and
    the count is the scope's own (``hybridsequential0_conv0_``)."""
    stack = getattr(_scopes, "stack", None)
    scope_prefix, counts = stack[-1] if stack else ("", _name_counts)
    with _name_lock:
        count = counts.get(base, 0)
        counts[base] = count + 1
    return f"{scope_prefix}{base}{count}_"


class _Block:
    """What MXNet's ``Block`` API shares between a layer and :class:`Sequential`:
    parameters by structural name (``weight``, ``0.weight``), initialisation,
    ``save_parameters`` / ``load_parameters``.  Subclasses define ``prefix`` and
    :meth:`_layers_by_key`."""

    prefix: str

    def _layers_by_key(self) -> Dict[str, Tuple["_ConvTranspose", Parameter]]:
        """``{structural name: (the layer that owns it, parameter)}``, in order."""
        raise NotImplementedError

    def _structural(self) -> Dict[str, Parameter]:
        return {key: param for key, (_, param) in self._layers_by_key().items()}

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
        return ParameterDict((p.name, p) for p in self._structural().values()
                             if pattern is None or pattern.match(p.name))

    @property
    def params(self) -> ParameterDict:
        return self.collect_params()

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
            np.savez(archive, **dict(zip(params, values)))
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
        path = _path_arg("filename", filename)
        contexts = _contexts_arg("ctx", ctx)
        allow_missing = _bool_arg("allow_missing", allow_missing)
        ignore_extra = _bool_arg("ignore_extra", ignore_extra)
        cast_dtype = _bool_arg("cast_dtype", cast_dtype)
        dtype_source = _choice_arg("dtype_source", dtype_source, ("current", "saved"))
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
                loaded_ctx = param._loaded_ctx(contexts, where)
                values = archive.read(saved_key, shape, saved_dtype)
                staged.append((param, param._new_data(values, dtype), loaded_ctx))
        for param, data, loaded_ctx in staged:
            param._install(data)
            param._ctx_list = loaded_ctx

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


class Sequential(_Block):
    """MXNet Gluon's ``nn.Sequential``: layers run one after another, their
    parameters saved and loaded under MXNet's structural names (``0.weight``,
    ``0.bias``, ``1.weight``, ...), so that MXNet's ``net.save_parameters``
    files of a sequential network load as they are.

    >>> from mxdeconv import gluon, nd
    >>> net = gluon.HybridSequential()
    >>> with net.name_scope():
    ...     net.add(gluon.Conv2DTranspose(4, 4, in_channels=2, activation="relu"),
    ...             gluon.Conv2DTranspose(1, 4, strides=2, padding=1, in_channels=4))
    >>> net.initialize()
    >>> net(nd.ones((1, 2, 1, 1))).shape
    (1, 1, 8, 8)
    >>> [name.split("_", 1)[1] for name in net.collect_params()]
    ['conv0_weight', 'conv0_bias', 'conv1_weight', 'conv1_bias']
    >>> len(net), net[1]
    (2, Conv2DTranspose(4 -> 1, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)))
    """

    _alias = "sequential"

    def __init__(self, prefix: Optional[str] = None, params: Any = None) -> None:
        if params is not None:
            raise MXNetError(f"sharing parameters through params= is not supported: params "
                             f"must be None, got {params!r:.80}")
        if prefix is not None and not isinstance(prefix, str):
            raise _type_error("prefix", "a string or None", prefix)
        self.prefix = _auto_prefix(self._alias) if prefix is None else prefix
        self._children: List[_Block] = []
        self._scope_counts: Dict[str, int] = {}

    @contextlib.contextmanager
    def name_scope(self) -> Iterator[None]:
        """Layers created inside get this container's prefix (MXNet's ``name_scope``)."""
        stack = getattr(_scopes, "stack", None)
        if stack is None:
            stack = _scopes.stack = []
        stack.append((self.prefix, self._scope_counts))
        try:
            yield
        finally:
            stack.pop()

    def add(self, *blocks: _Block) -> None:
        """Append ``blocks`` (layers or sequential containers), all checked first."""
        for block in blocks:
            if not isinstance(block, _Block):
                raise _type_error("block", "a Gluon layer or Sequential", block)
        self._children.extend(blocks)

    def _layers_by_key(self) -> Dict[str, Tuple["_ConvTranspose", Parameter]]:
        return {f"{index}.{key}": owned
                for index, child in enumerate(self._children)
                for key, owned in child._layers_by_key().items()}

    def __call__(self, x: Any) -> NDArray:
        return self.forward(x)

    def forward(self, x: Any) -> NDArray:
        """Each layer on the previous one's output."""
        for child in self._children:
            x = child(x)  # type: ignore[operator]
        return x

    def __getitem__(self, key: Any) -> Any:
        """A layer by index, or a new container of the same class holding a slice."""
        if isinstance(key, slice):
            net = type(self)(prefix=self.prefix)
            net.add(*self._children[key])
            return net
        if not _is_int(key):
            raise _type_error("key", "an int or a slice", key)
        return self._children[key]

    def __len__(self) -> int:
        return len(self._children)

    def __repr__(self) -> str:
        lines = [f"  ({index}): {child!r}".replace("\n", "\n  ")
                 for index, child in enumerate(self._children)]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


class HybridSequential(Sequential):
    """MXNet Gluon's ``nn.HybridSequential``: :class:`Sequential` (``hybridize()``
    is accepted; every call is imperative).

    >>> from mxdeconv import gluon
    >>> net = gluon.HybridSequential()
    >>> net.add(gluon.Conv1DTranspose(2, 3, in_channels=1))
    >>> net.hybridize()
    >>> net
    HybridSequential(
      (0): Conv1DTranspose(1 -> 2, kernel_size=(3,), stride=(1,))
    )
    """

    _alias = "hybridsequential"
