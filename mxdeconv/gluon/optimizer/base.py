"""The optimizer base of :mod:`mxdeconv.gluon.optimizer`: :class:`Optimizer`
(learning rates and weight decays per parameter, the states, the registry),
:func:`create` and :func:`register`.  The built-in optimizers' rules are in
:mod:`.rules`, which imports this module (never the other way round)."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from mxdeconv._core.args import is_int
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray

from .._args import _bool_arg, _real_arg, _type_error
from ..lr_scheduler import LRScheduler

__all__ = ["Optimizer", "create", "register"]

#: (index, weight, grad, state) of one parameter to update.
Item = Tuple[Any, NDArray, NDArray, Any]


def _optional_real(name: str, value: Any) -> Optional[float]:
    return None if value is None else _real_arg(name, value)


class Optimizer:
    """The base class (MXNet's ``mx.optimizer.Optimizer``, same arguments).

    ``learning_rate`` None means the scheduler's ``base_lr``, or 0.01 without a
    scheduler; given with a scheduler, it replaces the scheduler's ``base_lr``
    (with a warning when they differ).  A subclass defines :meth:`create_state`
    and :meth:`update`, and :meth:`register` makes it known by name.

    >>> from mxdeconv import lr_scheduler, optimizer
    >>> opt = optimizer.SGD(lr_scheduler=lr_scheduler.FactorScheduler(2, 0.5, base_lr=1.0))
    >>> opt.learning_rate
    1.0
    """

    #: lower-case name -> class, see :meth:`register`.
    opt_registry: Dict[str, type] = {}
    #: The constructor arguments of a subclass, beyond the base class's, that
    #: save_states stores.
    _HYPER: Tuple[str, ...] = ()

    def __init__(self, rescale_grad: float = 1., param_idx2name: Optional[dict] = None,
                 wd: float = 0., clip_gradient: Optional[float] = None,
                 learning_rate: Optional[float] = None,
                 lr_scheduler: Optional[LRScheduler] = None, sym: Any = None,
                 begin_num_update: int = 0, multi_precision: bool = False,
                 param_dict: Optional[dict] = None) -> None:
        self.rescale_grad = _real_arg("rescale_grad", rescale_grad)
        if lr_scheduler is not None and not isinstance(lr_scheduler, LRScheduler):
            raise _type_error("lr_scheduler", "an LRScheduler or None", lr_scheduler)
        learning_rate = _optional_real("learning_rate", learning_rate)
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is None and learning_rate is None:
            learning_rate = 0.01
        self.lr = learning_rate
        if lr_scheduler is not None and learning_rate is not None \
                and lr_scheduler.base_lr != learning_rate:
            warnings.warn("learning rate from ``lr_scheduler`` has been overwritten by "
                          "``learning_rate`` in optimizer.", UserWarning, stacklevel=2)
            lr_scheduler.base_lr = learning_rate
        self.wd = _real_arg("wd", wd)
        self.clip_gradient = _optional_real("clip_gradient", clip_gradient)
        if sym is not None:
            raise MXNetError("sym must be None: mxdeconv has no Symbol API (set lr_mult and "
                             "wd_mult on the Gluon Parameters instead)")
        if isinstance(begin_num_update, bool) or not is_int(begin_num_update) \
                or begin_num_update < 0:
            raise _type_error("begin_num_update", "an int >= 0", begin_num_update)
        self.begin_num_update = self.num_update = int(begin_num_update)
        self._index_update_count: Dict[Any, int] = {}
        self.multi_precision = _bool_arg("multi_precision", multi_precision)
        if param_idx2name is not None and not isinstance(param_idx2name, dict):
            raise _type_error("param_idx2name", "a dict of parameter indexes to names",
                              param_idx2name)
        self.idx2name = dict(param_idx2name or {})
        if param_dict is not None and not isinstance(param_dict, dict):
            raise _type_error("param_dict", "a dict of parameter indexes to Parameters",
                              param_dict)
        self.param_dict = param_dict if param_dict else {}
        self.aggregate_num = 0
        self.set_lr_mult({})
        self.set_wd_mult({})

    @staticmethod
    def register(klass: type) -> type:
        """Make an Optimizer subclass known to :func:`create` by its lower-case name."""
        if not isinstance(klass, type) or not issubclass(klass, Optimizer):
            raise _type_error("klass", "an Optimizer subclass", klass)
        Optimizer.opt_registry[klass.__name__.lower()] = klass
        return klass

    @staticmethod
    def create_optimizer(name: str, **kwargs: Any) -> "Optimizer":
        """The optimizer registered as ``name`` (any case), made with ``kwargs``."""
        if not isinstance(name, str):
            raise _type_error("optimizer", "an optimizer name (str) or an Optimizer", name)
        if name.lower() not in Optimizer.opt_registry:
            known = ", ".join(repr(n) for n in sorted(Optimizer.opt_registry))
            raise MXNetError(f"optimizer must be one of {known}, got {name!r}")
        return Optimizer.opt_registry[name.lower()](**kwargs)

    @property
    def learning_rate(self) -> float:
        """The current learning rate: the scheduler's at ``num_update``, or ``lr``."""
        if self.lr_scheduler is not None:
            return self.lr_scheduler(self.num_update)
        assert self.lr is not None  # without a scheduler, __init__ set one
        return self.lr

    def set_learning_rate(self, lr: float) -> None:
        """Set ``lr``; refused when a scheduler sets the learning rate (as in MXNet)."""
        lr = _real_arg("lr", lr)
        if self.lr_scheduler is not None:
            raise MXNetError("LRScheduler of the optimizer has already been defined. Note that "
                             "set_learning_rate can mutate the value of the learning rate of the "
                             "optimizer only when the LRScheduler of the optimizer is undefined.")
        self.lr = lr

    def set_lr_mult(self, args_lr_mult: dict) -> None:
        """Learning-rate multipliers by parameter index or name (a Parameter's own
        ``lr_mult`` wins for the Trainer's parameters)."""
        if not isinstance(args_lr_mult, dict):
            raise _type_error("args_lr_mult", "a dict", args_lr_mult)
        self.lr_mult = {k: _real_arg(f"args_lr_mult[{k!r}]", v) for k, v in args_lr_mult.items()}

    def set_wd_mult(self, args_wd_mult: dict) -> None:
        """Weight-decay multipliers by index or name; as MXNet, names in
        ``param_idx2name`` not ending in ``_weight`` or ``_gamma`` default to 0."""
        if not isinstance(args_wd_mult, dict):
            raise _type_error("args_wd_mult", "a dict", args_wd_mult)
        self.wd_mult = {n: 0.0 for n in self.idx2name.values()
                        if not str(n).endswith(("_weight", "_gamma"))}
        self.wd_mult.update({k: _real_arg(f"args_wd_mult[{k!r}]", v)
                             for k, v in args_wd_mult.items()})

    def _update_count(self, index: Any) -> None:
        for idx in index if isinstance(index, (list, tuple)) else [index]:
            count = self._index_update_count.get(idx, self.begin_num_update) + 1
            self._index_update_count[idx] = count
            self.num_update = max(count, self.num_update)

    def _mults(self, indices: Sequence[Any], base: float, attr: str,
               table: Dict[Any, float]) -> List[float]:
        values = []
        for index in indices:
            if index in self.param_dict:
                values.append(base * getattr(self.param_dict[index], attr))
            elif index in table:
                values.append(base * table[index])
            elif index in self.idx2name:
                values.append(base * table.get(self.idx2name[index], 1.0))
            else:
                values.append(base)
        return values

    def _get_lrs(self, indices: Sequence[Any]) -> List[float]:
        return self._mults(indices, self.learning_rate, "lr_mult", self.lr_mult)

    def _get_wds(self, indices: Sequence[Any]) -> List[float]:
        return self._mults(indices, self.wd, "wd_mult", self.wd_mult)

    def _get_lr(self, index: Any) -> float:
        return self._get_lrs([index])[0]

    def _get_wd(self, index: Any) -> float:
        return self._get_wds([index])[0]

    def create_state(self, index: Any, weight: NDArray) -> Any:
        """The state a weight's updates carry (None, an NDArray or a tuple of them)."""
        return None

    def create_state_multi_precision(self, index: Any, weight: NDArray) -> Any:
        return self.create_state(index, weight)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        """Update ``weight`` in place from ``grad`` and ``state``."""
        raise NotImplementedError("an Optimizer subclass defines update()")

    def update_multi_precision(self, index: Any, weight: NDArray, grad: NDArray,
                               state: Any) -> None:
        self.update(index, weight, grad, state)

    # -- what the Trainer calls -------------------------------------------------------
    def _counters(self) -> Tuple[int, Dict[Any, int], Dict[str, Any]]:
        scheduler = {} if self.lr_scheduler is None else dict(vars(self.lr_scheduler))
        return self.num_update, dict(self._index_update_count), scheduler

    def _restore_counters(self, saved: Tuple[int, Dict[Any, int], Dict[str, Any]]) -> None:
        self.num_update, self._index_update_count, scheduler = saved[0], dict(saved[1]), saved[2]
        if self.lr_scheduler is not None:
            vars(self.lr_scheduler).update(scheduler)

    def _prepare(self, items: Sequence[Item]) -> List[Callable[[], None]]:
        """Work out the updates of ``items`` and return the functions that write
        them.  A subclass defining only :meth:`update` updates when they run."""
        def writer(item: Item) -> Callable[[], None]:
            return lambda: self.update_multi_precision(*item)
        return [writer(item) for item in items]


register: Callable[[type], type] = Optimizer.register


def create(name: str, **kwargs: Any) -> Optimizer:
    """``Optimizer.create_optimizer``: the optimizer registered as ``name``.

    >>> from mxdeconv import optimizer
    >>> type(optimizer.create("Adam", learning_rate=0.1)).__name__
    'Adam'
    """
    return Optimizer.create_optimizer(name, **kwargs)

