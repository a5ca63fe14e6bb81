"""Gluon parameters: :class:`Parameter` (a weight or bias, its gradient and its
initialisation) and :class:`ParameterDict`."""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mxdeconv.autograd import GRAD_REQS
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.context import Context, current_context
from mxdeconv._core.dtypes import is_operator_dtype, operator_dtype_names
from mxdeconv.io import ndarray_file
from mxdeconv.ndarray.ndarray import NDArray, array

from ._args import (_bool_arg, _choice_arg, _context_arg, _contexts_arg, _dtype_arg, _load_args,
                    _is_real, _path_arg, _real_arg, _tuple_arg, _type_error, _values_arg)
from .files import _open_saved, _unprefixed
from mxdeconv.initializer import Initializer, Uniform, _create_initializer, _initializer_arg


# -- parameters ------------------------------------------------------------------
class Parameter:
    """A layer's weight or bias: an NDArray, its gradient, and how to initialise it.

    A shape with a 0 is not known yet (``in_channels=0``): initialisation is
    deferred to the first forward, as in MXNet.  Every method checks its
    arguments before it changes anything: after an error the parameter holds
    what it held before.  ``lr_mult`` and ``wd_mult`` scale the learning rate
    and the weight decay a :class:`~mxdeconv.gluon.Trainer` applies to it (MXNet's
    attributes of the same names, default 1).

    >>> from mxdeconv import gluon
    >>> p = gluon.Parameter("w", shape=(2, 3))
    >>> p.initialize(init=gluon.One())
    >>> p.data().shape, p.grad().asnumpy().sum().item()
    ((2, 3), 0.0)
    >>> p.set_data([[1, 2, 3], [4, 5, 6]])      # cast to the parameter's dtype
    >>> p.data().asnumpy().dtype
    dtype('float32')
    >>> p.lr_mult, p.wd_mult
    (1.0, 1.0)
    """

    def __init__(self, name: str, shape: Any = (), dtype: Any = "float32",
                 init: Any = None, grad_req: str = "write",
                 allow_deferred_init: bool = True, lr_mult: float = 1.0,
                 wd_mult: float = 1.0, differentiable: bool = True) -> None:
        if not isinstance(name, str):
            raise _type_error("name", "a string", name)
        self.name = name
        self.shape = _tuple_arg("shape", shape)
        self.dtype = _dtype_arg("dtype", dtype)
        self.init = _initializer_arg("init", init)
        self.allow_deferred_init = _bool_arg("allow_deferred_init", allow_deferred_init)
        self._grad_req = _choice_arg("grad_req", grad_req, GRAD_REQS)
        # MXNet: a parameter that is not differentiable (BatchNorm's running
        # statistics) never gets a gradient, whatever grad_req says.
        self._differentiable = _bool_arg("differentiable", differentiable)
        if not self._differentiable:
            self._grad_req = "null"
        self._lr_mult = _real_arg("lr_mult", lr_mult)
        self._wd_mult = _real_arg("wd_mult", wd_mult)
        self._data: Optional[NDArray] = None
        self._deferred: Optional[Initializer] = None
        # The contexts it was initialized on (None until then): all CPU ones,
        # all naming the one array.
        self._ctx_list: Optional[List[Context]] = None

    def __repr__(self) -> str:
        return f"Parameter {self.name} (shape={self.shape}, dtype={self.dtype})"

    @property
    def grad_req(self) -> str:
        return self._grad_req

    @grad_req.setter
    def grad_req(self, value: str) -> None:
        value = _choice_arg("grad_req", value, GRAD_REQS)
        self._grad_req = value if self._differentiable else "null"
        if self._data is not None:
            self._attach(self._data)

    @property
    def lr_mult(self) -> float:
        """The factor on the Trainer's learning rate for this parameter."""
        return self._lr_mult

    @lr_mult.setter
    def lr_mult(self, value: float) -> None:
        self._lr_mult = _real_arg("lr_mult", value)

    @property
    def wd_mult(self) -> float:
        """The factor on the Trainer's weight decay for this parameter."""
        return self._wd_mult

    @wd_mult.setter
    def wd_mult(self, value: float) -> None:
        self._wd_mult = _real_arg("wd_mult", value)

    @property
    def shape_known(self) -> bool:
        return all(s > 0 for s in self.shape)

    def __deepcopy__(self, memo: Any) -> "Parameter":
        """A parameter with copies of the values and of the gradient (an NDArray's
        deep copy carries its values only, so the gradient is attached again)."""
        clone = copy.copy(self)
        memo[id(self)] = clone
        clone._ctx_list = None if self._ctx_list is None else list(self._ctx_list)
        if self._data is not None:
            clone._data = clone._attach(self._data.copy())
            if self._data._grad is not None and clone._data._grad is not None:
                clone._data._grad._plain()[...] = self._data._grad._plain()
        return clone

    def _attach(self, data: NDArray) -> NDArray:
        """Give ``data`` a gradient as ``grad_req`` says (none for ``"null"``)."""
        if self._grad_req == "null":
            data._grad, data._grad_req = None, "null"
        else:
            data.attach_grad(self._grad_req)
        return data

    def initialize(self, init: Any = None, ctx: Any = None,
                   default_init: Any = None, force_reinit: bool = False) -> None:
        """Fill the parameter: with ``init`` if given, else its own ``init``,
        else ``default_init`` (default :class:`Uniform`), as MXNet does.
        ``ctx``: a CPU context or a list of them (default ``cpu(0)``), see
        :meth:`list_ctx`; a GPU raises :class:`~mxdeconv.MXNetError`."""
        contexts = _contexts_arg("ctx", ctx)
        self._apply_init(self._plan_init(init, contexts, default_init, force_reinit))

    def _plan_init(self, init: Any, contexts: Optional[List[Context]], default_init: Any,
                   force_reinit: bool) -> Optional[Tuple[str, Any, List[Context]]]:
        """What :meth:`initialize` would do, worked out but not applied (so that a
        layer initialises all its parameters or none): None (nothing to do),
        ``("defer", initializer, contexts)`` or ``("data", NDArray, contexts)``.
        ``contexts`` comes checked by :func:`_contexts_arg`."""
        contexts = [current_context()] if contexts is None else contexts
        _initializer_arg("init", init)
        _initializer_arg("default_init", default_init)
        force_reinit = _bool_arg("force_reinit", force_reinit)
        if self._data is not None and not force_reinit:
            return None
        if init is None:
            init = self.init if self.init is not None else (
                default_init if default_init is not None else Uniform())
        initializer = _create_initializer(init)
        if not self.shape_known:
            if not self.allow_deferred_init:
                raise MXNetError(f"Cannot initialize Parameter '{self.name}' because it has "
                                 f"invalid shape: {self.shape}.")
            return ("defer", initializer, contexts)
        return ("data", self._new_data(initializer(self.name, self.shape, self.dtype)),
                contexts)

    def _apply_init(self, plan: Optional[Tuple[str, Any, List[Context]]]) -> None:
        if plan is None:
            return
        kind, value, contexts = plan
        if kind == "defer":
            self._data, self._deferred = None, value
        else:
            self._install(value)
        self._ctx_list = contexts

    def _deferred_data(self, shape: Tuple[int, ...]) -> NDArray:
        """The values of the deferred initialisation for the completed ``shape``,
        not installed yet (see :meth:`_install`)."""
        if self._deferred is None:
            raise MXNetError(f"Parameter '{self.name}' has not been initialized. You "
                             "should initialize parameters with Block.initialize()")
        shape = self._completed_shape(shape)
        return self._new_data(self._deferred(self.name, shape, self.dtype))

    def _fits(self, shape: Tuple[int, ...]) -> bool:
        """Whether data of ``shape`` fits (a 0, not known yet, fits any size >= 1)."""
        return len(shape) == len(self.shape) and all(
            given >= 1 and known in (0, given) for known, given in zip(self.shape, shape))

    def _shape_text(self) -> str:
        return f"{self.shape}" + ("" if self.shape_known else " (0: not known yet)")

    def _completed_shape(self, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """``shape``, checked by :meth:`_fits`."""
        if not self._fits(shape):
            raise MXNetError(f"Parameter '{self.name}' has shape {self._shape_text()}, "
                             f"cannot set data of shape {shape}")
        return tuple(shape)

    def _new_data(self, values: Any, dtype: Any = None) -> NDArray:
        """``values`` copied into a new NDArray of ``dtype`` (default: the parameter's)
        with its gradient attached; the parameter itself does not change."""
        return self._attach(array(values, dtype=self.dtype if dtype is None else dtype))

    def _install(self, data: NDArray) -> None:
        """Make ``data`` (from :meth:`_new_data`) the value, its shape and dtype too.
        Nothing here can fail: callers check and convert everything first."""
        self._data, self._deferred = data, None
        self.shape, self.dtype = data.shape, data.dtype
        if self._ctx_list is None:
            self._ctx_list = [current_context()]

    def data(self, ctx: Any = None) -> NDArray:
        """The parameter's NDArray (its ``.grad`` is :meth:`grad`).  ``ctx``, when
        given, must be one of :meth:`list_ctx` (as in MXNet)."""
        wanted = None if ctx is None else _context_arg("ctx", ctx)
        if self._data is None:
            if self._deferred is not None:
                raise MXNetError(
                    f"Parameter '{self.name}' has not been initialized yet because "
                    "initialization was deferred. Actual initialization happens during the "
                    "first forward pass. Please pass one batch of data through the network "
                    "before accessing Parameters.")
            raise MXNetError(f"Parameter '{self.name}' has not been initialized. You should "
                             "initialize parameters with Block.initialize()")
        assert self._ctx_list is not None  # set with the data
        if wanted is not None and wanted not in self._ctx_list:
            raise MXNetError(f"Parameter '{self.name}' was not initialized on context "
                             f"{wanted}. It was only initialized on {self._ctx_list}.")
        return self._data

    def grad(self, ctx: Any = None) -> NDArray:
        """The gradient backward writes (or adds) into (``ctx`` as for :meth:`data`)."""
        data = self.data(ctx)
        if data._grad is None:
            raise MXNetError(f"Cannot get gradient array for Parameter '{self.name}' "
                             "because grad_req='null'")
        return data._grad

    def _loaded_ctx(self, contexts: Optional[List[Context]], where: str) -> List[Context]:
        """The contexts after loading values onto ``ctx`` (checked by :func:`_contexts_arg`):
        as MXNet, those the parameter was initialized on, which ``ctx`` must match."""
        if self._ctx_list is None or (self._data is None and self._deferred is None):
            return [current_context()] if contexts is None else contexts
        if contexts is not None and set(contexts) != set(self._ctx_list):
            raise MXNetError(f"{where}: ctx={contexts} but it was initialized on "
                             f"{self._ctx_list}")
        return self._ctx_list

    def list_ctx(self) -> List[Context]:
        """The contexts given to :meth:`initialize` (or :meth:`reset_ctx`): CPU ones,
        all naming the same single array (MXNet keeps a copy per context).

        >>> import mxdeconv
        >>> from mxdeconv import gluon
        >>> p = gluon.Parameter("w", shape=(2,))
        >>> p.initialize(ctx=mxdeconv.cpu(0))
        >>> p.list_ctx()
        [cpu(0)]
        """
        if self._data is None and self._deferred is None:
            raise MXNetError(f"Parameter '{self.name}' has not been initialized")
        assert self._ctx_list is not None  # set with the data or the deferred init
        return list(self._ctx_list)

    def reset_ctx(self, ctx: Any) -> None:
        """Assign the parameter to ``ctx`` (a CPU context or a list of them; None:
        ``cpu(0)``); the values stay as they are."""
        contexts = _contexts_arg("ctx", ctx)
        if self._data is None and self._deferred is None:
            raise MXNetError(f"Cannot reset context for Parameter '{self.name}' because it "
                             "has not been initialized.")
        self._ctx_list = [current_context()] if contexts is None else contexts

    def set_data(self, value: Any) -> None:
        """Replace the values with ``value``: an NDArray, a NumPy array or a nested
        list of numbers (integers or floats, cast to the parameter's dtype as MXNet
        does) of exactly the parameter's shape; a shape still unknown is completed
        from it."""
        values = _values_arg("value", value)
        self._completed_shape(values.shape)
        self._install(self._new_data(values))

    def zero_grad(self) -> None:
        """Set the gradient to zeros."""
        if self._data is not None and self._data._grad is not None:
            grad = self._data._grad
            grad._plain()[...] = 0  # a write through mxdeconv: no view handed out
            grad._bump()

    def cast(self, dtype: Any) -> None:
        """Change the dtype of the values (and gradient): float16, float32, float64 or
        bfloat16 (with ml_dtypes)."""
        dtype = _dtype_arg("dtype", dtype)
        if self._data is None:
            self.dtype = dtype
        else:
            self._install(self._new_data(self._data.asnumpy(), dtype))


def _staged(param: "Parameter", archive: Any, key: str, shape: Tuple[int, ...],
            saved_dtype: np.dtype, dtype: np.dtype, contexts: Any,
            where: str) -> Tuple["Parameter", Any, Any]:
    """One saved array read and converted for ``param``, not yet installed: its
    contexts checked first (``where`` names it in errors)."""
    loaded_ctx = param._loaded_ctx(contexts, where)
    values = archive.read(key, shape, saved_dtype)
    return param, param._new_data(values, dtype), loaded_ctx


def _install_staged(staged: List[Tuple["Parameter", Any, Any]]) -> None:
    """Install what :func:`_staged` prepared for every parameter of a file: after
    every array was checked and converted, so a file loads all or nothing."""
    for param, data, loaded_ctx in staged:
        param._install(data)
        param._ctx_list = loaded_ctx


def _loaded_dtype(param: Parameter, saved: np.dtype, where: str, cast_dtype: bool,
                  dtype_source: str) -> np.dtype:
    """The dtype a saved array gets, as MXNet's ``cast_dtype``/``dtype_source`` say."""
    if saved.hasobject or not _is_real(saved):
        raise MXNetError(f"{where}: it must hold real numbers (an integer or "
                         f"floating-point dtype), got dtype {saved}")
    saved = saved.newbyteorder("=")  # the same numbers in this machine's byte order
    if saved == param.dtype:
        return param.dtype
    if not cast_dtype:
        raise MXNetError(f"{where}: dtype incompatible expected {param.dtype} vs saved "
                         f"{saved}. Set cast_dtype=True to cast the dtype of saved params.")
    if dtype_source == "current":
        return param.dtype
    if not is_operator_dtype(saved):
        raise MXNetError(f"{where}: dtype_source='saved' would make it {saved}, but a "
                         f"parameter's dtype must be one of {operator_dtype_names()}")
    return saved


class ParameterDict(dict):
    """``{full name: Parameter}``, with MXNet's bulk helpers.

    >>> from mxdeconv import gluon
    >>> layer = gluon.Conv1DTranspose(2, 3, in_channels=2, prefix="up_")
    >>> sorted(layer.collect_params())
    ['up_bias', 'up_weight']
    >>> layer.collect_params().setattr("grad_req", "null")
    >>> layer.bias.grad_req
    'null'
    >>> layer.collect_params().setattr("lr_mult", 0.1)
    >>> layer.weight.lr_mult
    0.1
    """

    #: The attributes :meth:`setattr` may set (those whose setter checks the value).
    SETTABLE = ("grad_req", "lr_mult", "wd_mult")

    def __init__(self, prefix: str = "", shared: Any = None) -> None:
        super().__init__()
        if not isinstance(prefix, str):
            raise _type_error("prefix", "a string", prefix)
        if shared is not None:
            raise MXNetError(f"sharing parameters through shared= is not supported: shared "
                             f"must be None, got {shared!r:.80}")
        self._prefix = prefix

    @property
    def prefix(self) -> str:
        """The prefix :meth:`get` puts before a name (the owning block's)."""
        return self._prefix

    def get(self, name: str, **kwargs: Any) -> Parameter:  # type: ignore[override]
        """MXNet's ``ParameterDict.get``: the parameter ``prefix + name``, made
        with ``kwargs`` (:class:`Parameter`'s arguments) when it does not exist
        yet; an existing one is returned as it is when ``kwargs`` agree with it
        (a 0 in ``shape`` matches any size and is completed).

        >>> from mxdeconv import gluon
        >>> params = gluon.ParameterDict("block0_")
        >>> params.get("gamma", shape=(3,), init="ones")
        Parameter block0_gamma (shape=(3,), dtype=float32)
        >>> params.get("gamma", shape=(0,)) is params["block0_gamma"]
        True
        """
        if not isinstance(name, str):
            raise _type_error("name", "a string", name)
        full = self._prefix + name
        param = dict.get(self, full)
        if param is None:
            param = Parameter(full, **kwargs)
            self[full] = param
            return param
        for key, value in kwargs.items():
            if key == "shape" and value is not None:
                shape = _tuple_arg("shape", value)
                if len(shape) != len(param.shape) or any(
                        want and have and want != have for want, have in zip(shape, param.shape)):
                    raise MXNetError(f"Cannot retrieve Parameter '{full}' because desired "
                                     f"attribute does not match with stored for attribute "
                                     f"'shape': desired '{shape}' vs stored '{param.shape}'.")
                if param._data is None:  # complete what is not known yet (0)
                    param.shape = tuple(have or want for want, have in zip(shape, param.shape))
            elif key == "dtype" and value is not None:
                if _dtype_arg("dtype", value) != param.dtype:
                    raise MXNetError(f"Cannot retrieve Parameter '{full}' because desired "
                                     f"attribute does not match with stored for attribute "
                                     f"'dtype': desired '{value}' vs stored '{param.dtype}'.")
        return param

    def save(self, filename: str, strip_prefix: str = "") -> None:
        """Save every parameter to ``filename`` (MXNet's NDArray file, as
        ``collect_params().save`` writes it) under its full name without
        ``strip_prefix``, which every name must start with."""
        path = _path_arg("filename", filename)
        if not isinstance(strip_prefix, str):
            raise _type_error("strip_prefix", "a string", strip_prefix)
        names, values = [], []
        for param in self.values():
            if not param.name.startswith(strip_prefix):
                raise MXNetError(f"Prefix '{strip_prefix}' is to be striped before saving, "
                                 f"but Parameter's name '{param.name}' does not start with "
                                 f"'{strip_prefix}'. strip_prefix={strip_prefix!r}")
            names.append(param.name[len(strip_prefix):])
            values.append(param.data()._plain())
        ndarray_file.write_arrays(path, values, names, argument="filename")

    def load(self, filename: str, ctx: Any = None, allow_missing: bool = False,
             ignore_extra: bool = False, restore_prefix: str = "", cast_dtype: bool = False,
             dtype_source: str = "current") -> None:
        """Load a file :meth:`save` (or MXNet's ``collect_params().save``,
        ``save_checkpoint``: ``arg:``/``aux:`` prefixes are stripped) wrote,
        matching full names (``restore_prefix`` + the saved name).  All or
        nothing, as :meth:`Block.load_parameters <mxdeconv.gluon.Block.load_parameters>`."""
        path, contexts, allow_missing, ignore_extra, cast_dtype, dtype_source = _load_args(
            filename, ctx, allow_missing, ignore_extra, cast_dtype, dtype_source)
        if not isinstance(restore_prefix, str):
            raise _type_error("restore_prefix", "a string", restore_prefix)
        for name in self:
            if not name.startswith(restore_prefix):
                raise MXNetError(f"restore_prefix is '{restore_prefix}' but Parameters name "
                                 f"'{name}' does not start with '{restore_prefix}'")
        staged = []
        with _open_saved(path) as archive:
            by_name: Dict[str, str] = {}
            for key in archive.keys:
                by_name[restore_prefix + _unprefixed(key)] = key
            if not allow_missing:
                for name in self:
                    if name not in by_name:
                        raise MXNetError(
                            f"Parameter '{name[len(restore_prefix):]}' is missing in file: "
                            f"{path}, which contains parameters: {sorted(archive.keys)}. "
                            "Please make sure source and target networks have the same "
                            "prefix.")
            for name, key in by_name.items():
                if name not in self:
                    if not ignore_extra:
                        raise MXNetError(
                            f"Parameter '{name[len(restore_prefix):]}' loaded from file: "
                            f"{path} is not present in ParameterDict, choices are: "
                            f"{sorted(self)}. Set ignore_extra to True to ignore.")
                    continue
                param = self[name]
                where = f"Failed loading Parameter '{name}' from array '{key}' of '{path}'"
                shape, saved_dtype = archive.header(key)
                dtype = _loaded_dtype(param, saved_dtype, where, cast_dtype, dtype_source)
                if not param._fits(shape):
                    raise MXNetError(f"{where}: shape incompatible expected "
                                     f"{param._shape_text()} vs saved {shape}")
                staged.append(_staged(param, archive, key, shape, saved_dtype, dtype,
                                      contexts, where))
        _install_staged(staged)

    def initialize(self, init: Any = None, ctx: Any = None, verbose: bool = False,
                   force_reinit: bool = False) -> None:
        """Initialise every parameter; ``init`` applies to those created without
        an initializer, ``ctx`` as for :meth:`Parameter.initialize`."""
        _initializer_arg("init", init)
        contexts = _contexts_arg("ctx", ctx)
        _bool_arg("verbose", verbose)
        force_reinit = _bool_arg("force_reinit", force_reinit)
        # Every parameter's values first, then all installed: all or nothing.
        plans = [(param, param._plan_init(None, contexts, init, force_reinit))
                 for param in self.values()]
        for param, plan in plans:
            param._apply_init(plan)

    def reset_ctx(self, ctx: Any) -> None:
        """:meth:`Parameter.reset_ctx` of every parameter (all checked first)."""
        _contexts_arg("ctx", ctx)
        params = list(self.values())
        for param in params:
            if param._data is None and param._deferred is None:
                raise MXNetError(f"Cannot reset context for Parameter '{param.name}' "
                                 "because it has not been initialized.")
        for param in params:
            param.reset_ctx(ctx)

    def list_ctx(self) -> List[Context]:
        """The contexts the parameters were initialized on, each once."""
        contexts: List[Context] = []
        for param in self.values():
            contexts += [c for c in param.list_ctx() if c not in contexts]
        return contexts

    def zero_grad(self) -> None:
        for param in self.values():
            param.zero_grad()

    def setattr(self, name: str, value: Any) -> None:
        """Set attribute ``name`` (``"grad_req"``, ``"lr_mult"`` or ``"wd_mult"``: the
        attributes whose setters check their value) to ``value`` on every parameter;
        a bad value changes none."""
        _choice_arg("name", name, self.SETTABLE)
        # checked before any parameter changes
        if name == "grad_req":
            _choice_arg("grad_req", value, GRAD_REQS)
        else:
            value = _real_arg(name, value)
        for param in self.values():
            setattr(param, name, value)


# Parameter's __module__ is mxdeconv.gluon (see __init__.py), so doctest finds the
# class docstring there, and the methods' examples, defined here, only through this.
__test__ = {"Parameter.list_ctx": Parameter.list_ctx}
