"""Learning-rate schedules (MXNet 1.9.1's ``mx.lr_scheduler``, also reachable as
``mxdeconv.lr_scheduler``): a scheduler maps the optimizer's ``num_update``, the
largest number of updates any parameter has had, to a learning rate.

Schedulers keep state, as MXNet's do: :class:`FactorScheduler` and
:class:`MultiFactorScheduler` lower their ``base_lr`` as ``num_update`` passes
their steps, and never raise it again.

>>> from mxdeconv import lr_scheduler
>>> schedule = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
>>> [schedule(n) for n in range(1, 7)]
[0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
"""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, List

from mxdeconv._core.args import is_int
from mxdeconv._core.errors import MXNetError

from ._args import _choice_arg, _real_arg, _type_error

__all__ = ["CosineScheduler", "FactorScheduler", "LRScheduler", "MultiFactorScheduler",
           "PolyScheduler"]


def _steps_arg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not is_int(value):
        raise _type_error(name, "an int", value)
    return int(value)


class LRScheduler:
    """The base class: ``scheduler(num_update)`` returns the learning rate.

    ``warmup_steps`` updates first go from ``warmup_begin_lr`` to ``base_lr``
    (``warmup_mode="linear"``) or stay at ``warmup_begin_lr`` (``"constant"``).

    >>> from mxdeconv import lr_scheduler
    >>> class Halving(lr_scheduler.LRScheduler):
    ...     def __call__(self, num_update):
    ...         return self.base_lr / 2 ** num_update
    >>> Halving(base_lr=1.0)(3)
    0.125
    """

    def __init__(self, base_lr: float = 0.01, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        self.base_lr = _real_arg("base_lr", base_lr)
        self.warmup_steps = _steps_arg("warmup_steps", warmup_steps)
        self.warmup_final_lr = self.base_lr
        self.warmup_begin_lr = _real_arg("warmup_begin_lr", warmup_begin_lr)
        if self.warmup_begin_lr > self.warmup_final_lr:
            raise MXNetError(f"Base lr has to be higher than warmup_begin_lr: base_lr="
                             f"{self.base_lr}, warmup_begin_lr={self.warmup_begin_lr}")
        if self.warmup_steps < 0:
            raise MXNetError(f"Warmup steps has to be positive or 0, got warmup_steps="
                             f"{self.warmup_steps}")
        self.warmup_mode = _choice_arg("warmup_mode", warmup_mode, ("linear", "constant"))

    def get_warmup_lr(self, num_update: int) -> float:
        """The learning rate of update ``num_update`` (< ``warmup_steps``) of the warmup."""
        if self.warmup_mode == "linear":
            increase = ((self.warmup_final_lr - self.warmup_begin_lr)
                        * float(num_update) / float(self.warmup_steps))
            return self.warmup_begin_lr + increase
        return self.warmup_begin_lr

    def __call__(self, num_update: int) -> float:
        raise NotImplementedError("an LRScheduler subclass defines __call__")

    def _state(self) -> Dict[str, Any]:
        """What :meth:`~mxdeconv.gluon.Trainer.save_states` stores (numbers, strings
        and lists of numbers)."""
        return dict(vars(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_lr={self.base_lr})"


class FactorScheduler(LRScheduler):
    """``base_lr * factor ** floor((num_update - 1) / step)``, never below
    ``stop_factor_lr`` (MXNet's rule: the rate changes after ``step``, ``2 * step``,
    ... updates).

    >>> from mxdeconv import lr_scheduler
    >>> schedule = lr_scheduler.FactorScheduler(step=10, factor=0.9, base_lr=1.0)
    >>> schedule(10), schedule(11)
    (1.0, 0.9)
    """

    def __init__(self, step: int, factor: float = 1, stop_factor_lr: float = 1e-8,
                 base_lr: float = 0.01, warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.step = _steps_arg("step", step)
        if self.step < 1:
            raise MXNetError(f"Schedule step must be greater or equal than 1 round, got "
                             f"step={self.step}")
        self.factor = _real_arg("factor", factor)
        if self.factor > 1.0:
            raise MXNetError(f"Factor must be no more than 1 to make lr reduce, got "
                             f"factor={self.factor}")
        self.stop_factor_lr = _real_arg("stop_factor_lr", stop_factor_lr)
        self.count = 0

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr *= self.factor
            if self.base_lr < self.stop_factor_lr:
                self.base_lr = self.stop_factor_lr
                logging.info("Update[%d]: now learning rate arrived at %0.5e, will not "
                             "change in the future", num_update, self.base_lr)
            else:
                logging.info("Update[%d]: Change learning rate to %0.5e", num_update,
                             self.base_lr)
        return self.base_lr


class MultiFactorScheduler(LRScheduler):
    """``base_lr * factor ** k`` once ``num_update`` is past ``step[k - 1]`` (an
    increasing list of update counts).

    >>> from mxdeconv import lr_scheduler
    >>> schedule = lr_scheduler.MultiFactorScheduler(step=[2, 4], factor=0.1, base_lr=1.0)
    >>> [round(schedule(n), 6) for n in range(1, 6)]
    [1.0, 1.0, 0.1, 0.1, 0.01]
    """

    def __init__(self, step: List[int], factor: float = 1, base_lr: float = 0.01,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, (list, tuple)) or not step:
            raise _type_error("step", "a non-empty list of ints", step)
        steps = [_steps_arg(f"step[{i}]", s) for i, s in enumerate(step)]
        for i, value in enumerate(steps):
            if i and value <= steps[i - 1]:
                raise MXNetError(f"Schedule step must be an increasing integer list, got "
                                 f"step={steps}")
            if value < 1:
                raise MXNetError(f"Schedule step must be greater or equal than 1 round, got "
                                 f"step={steps}")
        self.factor = _real_arg("factor", factor)
        if self.factor > 1.0:
            raise MXNetError(f"Factor must be no more than 1 to make lr reduce, got "
                             f"factor={self.factor}")
        self.step = steps
        self.cur_step_ind = 0
        self.count = 0

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while self.cur_step_ind <= len(self.step) - 1:
            if num_update > self.step[self.cur_step_ind]:
                self.count = self.step[self.cur_step_ind]
                self.cur_step_ind += 1
                self.base_lr *= self.factor
                logging.info("Update[%d]: Change learning rate to %0.5e", num_update,
                             self.base_lr)
            else:
                return self.base_lr
        return self.base_lr


class PolyScheduler(LRScheduler):
    """``final_lr + (base_lr - final_lr) * (1 - n / max_update) ** pwr`` for ``n``
    (updates after the warmup) up to ``max_update``; later calls return the last
    rate computed (``final_lr`` once ``max_update`` was reached), as MXNet's.

    >>> from mxdeconv import lr_scheduler
    >>> schedule = lr_scheduler.PolyScheduler(max_update=10, base_lr=1.0, pwr=1)
    >>> schedule(0), schedule(5), schedule(10), schedule(20)
    (1.0, 0.5, 0.0, 0.0)
    """

    def __init__(self, max_update: int, base_lr: float = 0.01, pwr: float = 2,
                 final_lr: float = 0, warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.max_update = _steps_arg("max_update", max_update)
        if self.max_update < 1:
            raise MXNetError(f"maximum number of updates must be strictly positive, got "
                             f"max_update={self.max_update}")
        self.power = _real_arg("pwr", pwr)
        self.base_lr_orig = self.base_lr
        self.final_lr = _real_arg("final_lr", final_lr)
        self.max_steps = self.max_update - self.warmup_steps

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update <= self.max_update:
            self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr) * pow(
                1 - float(num_update - self.warmup_steps) / float(self.max_steps), self.power)
        return self.base_lr


class CosineScheduler(LRScheduler):
    """``final_lr + (base_lr - final_lr) * (1 + cos(pi * n / max_update)) / 2`` for
    ``n`` (updates after the warmup) up to ``max_update``; later calls return the
    last rate computed, as :class:`PolyScheduler`'s.

    >>> from mxdeconv import lr_scheduler
    >>> schedule = lr_scheduler.CosineScheduler(max_update=10, base_lr=1.0)
    >>> schedule(0), round(schedule(5), 6), schedule(10), schedule(20)
    (1.0, 0.5, 0.0, 0.0)
    """

    def __init__(self, max_update: int, base_lr: float = 0.01, final_lr: float = 0,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.max_update = _steps_arg("max_update", max_update)
        if self.max_update < 1:
            raise MXNetError(f"maximum number of updates must be strictly positive, got "
                             f"max_update={self.max_update}")
        self.base_lr_orig = self.base_lr
        self.final_lr = _real_arg("final_lr", final_lr)
        self.max_steps = self.max_update - self.warmup_steps

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update <= self.max_update:
            self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr) * (
                1 + math.cos(math.pi * (num_update - self.warmup_steps) / self.max_steps)) / 2
        return self.base_lr


#: The schedulers save_states can store and load_states recreate, by class name.
SCHEDULERS = {cls.__name__: cls for cls in (FactorScheduler, MultiFactorScheduler,
                                            PolyScheduler, CosineScheduler)}
