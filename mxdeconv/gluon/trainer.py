"""MXNet 1.9.1 Gluon's ``Trainer``: applies an optimizer to a set of parameters
after each ``backward``."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from mxdeconv.autograd import tape
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.numpy_protocols import check_writable

from ._args import _bool_arg, _path_arg, _real_arg, _type_error
from .optimizer import Optimizer
from .parameter import Parameter
from . import trainer_states

__all__ = ["Trainer"]


class Trainer:
    """Applies an optimizer to a set of parameters (MXNet's ``gluon.Trainer``).

    Args:
        params: the parameters: a :class:`ParameterDict` (``net.collect_params()``)
            or a dict, taken in the order of their sorted keys as MXNet does, or a
            list of :class:`Parameter`.  They must be initialized (or have their
            initialisation deferred).
        optimizer: an optimizer name, any case (``"sgd"``, ``"nag"``, ``"adam"``,
            ``"rmsprop"``, or one added with :func:`mxdeconv.gluon.optimizer.register`),
            or an :class:`~mxdeconv.gluon.optimizer.Optimizer` (then without
            ``optimizer_params``).
        optimizer_params: the optimizer's arguments, e.g. ``{"learning_rate": 0.1,
            "momentum": 0.9, "wd": 1e-4, "clip_gradient": 1.0, "lr_scheduler": ...}``.
        kvstore, update_on_kvstore: accepted for MXNet compatibility: one CPU device
            needs no key-value store (``"device"``, ``"local"`` or None; a
            distributed store raises :class:`~mxdeconv.MXNetError`).
        compression_params: must be None (no gradient compression on one device).

    :meth:`step` scales the gradients by ``1 / batch_size`` (``rescale_grad``, times
    the ``rescale_grad`` given in ``optimizer_params``) and updates every
    parameter whose ``grad_req`` is not ``"null"``.

    >>> from mxdeconv import autograd, gluon, nd
    >>> layer = gluon.Conv2DTranspose(1, kernel_size=2, in_channels=1)
    >>> layer.initialize(gluon.Constant(0.5))
    >>> trainer = gluon.Trainer(layer.collect_params(), "sgd", {"learning_rate": 0.1})
    >>> loss_fn = gluon.loss.L2Loss()
    >>> x, target = nd.ones((4, 1, 1, 1)), nd.zeros((4, 1, 2, 2))
    >>> with autograd.record():
    ...     loss = loss_fn(layer(x), target)
    >>> loss.backward()
    >>> layer.weight.grad().asnumpy().ravel()     # 4 samples, each (0.5 - 0) / 4
    array([0.5, 0.5, 0.5, 0.5], dtype=float32)
    >>> trainer.step(batch_size=4)
    >>> layer.weight.data().asnumpy().ravel()     # 0.5 - 0.1 * 0.5 / 4
    array([0.4875, 0.4875, 0.4875, 0.4875], dtype=float32)
    """

    def __init__(self, params: Any, optimizer: Any, optimizer_params: Optional[dict] = None,
                 kvstore: Any = "device", compression_params: Optional[dict] = None,
                 update_on_kvstore: Optional[bool] = None) -> None:
        self._params = self._params_arg(params)
        self._param2idx = {param.name: i for i, param in enumerate(self._params)}
        self._contexts = self._check_contexts()
        if kvstore is not None and not isinstance(kvstore, str):
            raise _type_error("kvstore", "'device', 'local' or None", kvstore)
        if kvstore is not None and kvstore not in ("device", "local"):
            raise MXNetError(f"kvstore must be 'device', 'local' or None (mxdeconv trains on "
                             f"one CPU device, without a key-value store), got {kvstore!r}")
        if compression_params is not None:
            raise MXNetError(f"compression_params must be None (there is no gradient "
                             f"compression on one device), got {compression_params!r:.80}")
        if update_on_kvstore is not None:
            _bool_arg("update_on_kvstore", update_on_kvstore)
        if optimizer_params is not None and not isinstance(optimizer_params, dict):
            raise _type_error("optimizer_params", "a dict or None", optimizer_params)
        self._optimizer = self._init_optimizer(optimizer, optimizer_params or {})
        self._scale = self._optimizer.rescale_grad
        #: index -> the optimizer's state for that parameter (made at its first update)
        self._states: Dict[int, Any] = {}

    @staticmethod
    def _params_arg(params: Any) -> List[Parameter]:
        if isinstance(params, dict):
            params = [params[key] for key in sorted(params)]
        if not isinstance(params, (list, tuple)):
            raise _type_error("params", "a ParameterDict, a dict or a list of Parameters",
                              params)
        seen = set()
        for param in params:
            if not isinstance(param, Parameter):
                raise _type_error("params", "a list or dict of Parameters, not one holding",
                                  param)
            if id(param) in seen:
                raise MXNetError(f"params holds Parameter '{param.name}' twice: it would be "
                                 "updated twice each step")
            seen.add(id(param))
        return list(params)

    def _check_contexts(self) -> Optional[list]:
        contexts = None
        for param in self._params:
            ctx = param.list_ctx()
            if contexts is not None and contexts != ctx:
                raise MXNetError(f"All Parameters must be initialized on the same set of "
                                 f"contexts, but Parameter {param.name} is initialized on "
                                 f"{ctx} while previous Parameters are initialized on "
                                 f"{contexts}.")
            contexts = ctx
        return contexts

    def _init_optimizer(self, optimizer: Any, optimizer_params: dict) -> Optimizer:
        param_dict = dict(enumerate(self._params))
        if isinstance(optimizer, Optimizer):
            if optimizer_params:
                raise MXNetError("optimizer_params must be None if optimizer is an instance of "
                                 "Optimizer instead of str")
            optimizer.param_dict = param_dict
            return optimizer
        if not isinstance(optimizer, str):
            raise _type_error("optimizer", "an optimizer name (str) or an Optimizer",
                              optimizer)
        try:
            return Optimizer.create_optimizer(optimizer, param_dict=param_dict,
                                              **optimizer_params)
        except MXNetError as err:
            raise MXNetError(f"Trainer: {err}") from None

    # -- properties -------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate."""
        return self._optimizer.learning_rate

    @property
    def optimizer(self) -> Optimizer:
        """The optimizer (replaced by :meth:`load_states`)."""
        return self._optimizer

    def set_learning_rate(self, lr: float) -> None:
        """Set the optimizer's learning rate (refused when it has an lr_scheduler)."""
        self._optimizer.set_learning_rate(lr)

    # -- updates ----------------------------------------------------------------------
    def step(self, batch_size: float, ignore_stale_grad: bool = False) -> None:
        """One update of every parameter from its gradient, scaled by ``1 / batch_size``
        (pass 1 when the loss is already a mean).  Call it after ``backward()``,
        outside ``autograd.record()``.

        A parameter whose gradient no ``backward`` wrote since the last step (a
        *stale* one: the loss did not use it) raises :class:`~mxdeconv.MXNetError`,
        as in MXNet, unless ``ignore_stale_grad=True``, which skips it.  All
        checks come first: after an error no parameter and no optimizer state
        has changed.
        """
        scale = self._scale / self._batch_size_arg(batch_size)
        ignore_stale_grad = _bool_arg("ignore_stale_grad", ignore_stale_grad)
        self._update(scale, ignore_stale_grad)

    def allreduce_grads(self) -> None:
        """Sum the gradients over devices: nothing to do on one device."""

    def update(self, batch_size: float, ignore_stale_grad: bool = False) -> None:
        """:meth:`step` without :meth:`allreduce_grads` (the same on one device)."""
        self.step(batch_size, ignore_stale_grad)

    @staticmethod
    def _batch_size_arg(batch_size: Any) -> float:
        value = _real_arg("batch_size", batch_size)
        if value <= 0:
            raise MXNetError(f"batch_size must be positive, got batch_size={batch_size!r}")
        return value

    def _update(self, scale: float, ignore_stale_grad: bool) -> None:
        if tape.is_recording():
            raise MXNetError("Trainer.step: called inside autograd.record(); call it after "
                             "backward(), outside the record() scope")
        items = []
        for index, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            data = param.data()
            if not tape.fresh_grad(data):
                if ignore_stale_grad:
                    continue
                raise MXNetError(
                    f"Gradient of Parameter `{param.name}` on context {data.context} has not "
                    "been updated by backward since last `step`. This could mean a bug in "
                    "your model that made it only use a subset of the Parameters (Blocks) "
                    "for this iteration. If you are intentionally only using a subset, call "
                    "step with ignore_stale_grad=True to suppress this warning and skip "
                    "updating of Parameters with stale gradient")
            check_writable(f"Trainer.step: Parameter '{param.name}'", data)
            if index in self._states:
                trainer_states.check_state(self._states[index], data, param.name)
            items.append((index, data, param.grad()))
        states = {index: self._states[index] if index in self._states
                  else self._optimizer.create_state_multi_precision(index, data)
                  for index, data, _ in items}
        saved, rescale = self._optimizer._counters(), self._optimizer.rescale_grad
        self._optimizer.rescale_grad = scale
        try:
            commits = self._optimizer._prepare(
                [(index, data, grad, states[index]) for index, data, grad in items])
        except BaseException:
            self._optimizer._restore_counters(saved)
            self._optimizer.rescale_grad = rescale
            raise
        self._states.update(states)
        for commit in commits:
            commit()
        for _, data, _ in items:
            tape.set_fresh_grad(data, False)

    # -- states -----------------------------------------------------------------------
    def save_states(self, fname: str) -> None:
        """Save the optimizer and its states (momenta, moving averages, update
        counts, the lr_scheduler's position) to ``fname``, atomically.

        The file is an ``.npz`` archive of mxdeconv's own layout, never a pickle
        (MXNet pickles its updater): :meth:`load_states` reads it back; MXNet
        does not.  The parameters' ``lr_mult``/``wd_mult`` are not saved, as in
        MXNet.
        """
        trainer_states.save(_path_arg("fname", fname), self._optimizer, self._states)

    def load_states(self, fname: str) -> None:
        """Load what :meth:`save_states` wrote: the optimizer (replacing this one,
        as MXNet does) and its states, which must fit these parameters.  A file
        that is not such a file, or is damaged, or holds states of other shapes,
        raises :class:`~mxdeconv.MXNetError` and changes nothing."""
        optimizer, states = trainer_states.load(_path_arg("fname", fname), self._params)
        optimizer.param_dict = dict(enumerate(self._params))
        self._optimizer, self._states = optimizer, states

    def __repr__(self) -> str:
        return (f"Trainer({type(self._optimizer).__name__}, {len(self._params)} parameters, "
                f"learning_rate={self._optimizer.lr})")
