"""The file of :meth:`Trainer.save_states <mxdeconv.gluon.Trainer.save_states>`:
an ``.npz`` archive (never a pickle) holding

* ``meta``: UTF-8 JSON as uint8 bytes: the format name and version, the optimizer
  (its registered name, constructor arguments, ``lr``, update counts,
  ``lr_mult``/``wd_mult`` tables), the lr_scheduler (class name and attributes)
  and, per parameter index, how many state arrays it has;
* ``state_<index>_<k>``: the ``k``-th state array of parameter ``index``
  (momentum, Adam's mean and variance, RMSProp's n, g, delta).

MXNet 1.9.1 pickles its updater instead; this layout is mxdeconv's own and is
read back only by :func:`load`, which treats the file as untrusted: anything
that is not exactly such a file, or does not fit the Trainer's parameters,
raises :class:`~mxdeconv.MXNetError` before anything changes.
"""
from __future__ import annotations

import io
import json
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from mxdeconv._core.errors import MXNetError
from mxdeconv._core.files import replace_atomically
from mxdeconv.ndarray.ndarray import NDArray, array

from .files import _NpzArchive
from .lr_scheduler import SCHEDULERS
from .optimizer import Optimizer
from .optimizer.rules import _Builtin
from .parameter import Parameter

__all__ = ["FORMAT", "VERSION", "check_state", "load", "save"]

FORMAT = "mxdeconv.gluon.Trainer states"
VERSION = 1
#: The largest ``meta`` member read (the JSON of a Trainer is a few KB).
MAX_META_BYTES = 1 << 24

# A scheduler's attributes and the types each may hold, from one made with
# placeholder arguments (the attributes are the same for every instance).
_SCHEDULER_ARGS: Dict[str, Dict[str, Any]] = {
    "FactorScheduler": {"step": 1}, "MultiFactorScheduler": {"step": [1]},
    "PolyScheduler": {"max_update": 1}, "CosineScheduler": {"max_update": 1}}


def _arrays(state: Any) -> Tuple[NDArray, ...]:
    return () if state is None else (state,) if isinstance(state, NDArray) else tuple(state)


def check_state(state: Any, data: NDArray, name: str) -> None:
    """Refuse an optimizer state that does not fit the parameter's values."""
    for arr in _arrays(state):
        if arr.shape != data.shape or arr.dtype != data.dtype:
            raise MXNetError(f"Trainer.step: the optimizer state of Parameter '{name}' has "
                             f"shape {arr.shape} and dtype {arr.dtype} but the parameter has "
                             f"shape {data.shape} and dtype {data.dtype} (states loaded for "
                             "other parameters, or the parameter's shape changed)")


def _registered_name(optimizer: Optimizer) -> str:
    for name, cls in Optimizer.opt_registry.items():
        if cls is type(optimizer) and issubclass(cls, _Builtin):
            return name
    raise MXNetError(f"save_states stores the built-in optimizers (SGD, NAG, Adam, RMSProp), "
                     f"got a {type(optimizer).__name__}")


def save(path: str, optimizer: Optimizer, states: Dict[int, Any]) -> None:
    """Write ``optimizer`` and ``states`` to ``path`` (see the module), atomically."""
    name = _registered_name(optimizer)
    assert isinstance(optimizer, _Builtin)  # _registered_name refused any other
    scheduler = optimizer.lr_scheduler
    if scheduler is not None and type(scheduler) is not SCHEDULERS.get(type(scheduler).__name__):
        raise MXNetError(f"save_states stores the built-in lr_schedulers "
                         f"({', '.join(SCHEDULERS)}), got a {type(scheduler).__name__}")
    arguments = dict(rescale_grad=optimizer.rescale_grad, wd=optimizer.wd,
                     clip_gradient=optimizer.clip_gradient,
                     begin_num_update=optimizer.begin_num_update,
                     multi_precision=optimizer.multi_precision, **optimizer._hyper())
    arrays = {}
    for index, state in states.items():
        for k, arr in enumerate(_arrays(state)):
            values = arr.asnumpy()
            arrays[f"state_{index}_{k}"] = values if values.dtype.kind == "f" else \
                values.astype(np.float32)  # bfloat16: stored as float32
    meta = {"format": FORMAT, "version": VERSION, "optimizer": name, "arguments": arguments,
            "lr": optimizer.lr, "num_update": optimizer.num_update,
            "index_update_count": sorted(optimizer._index_update_count.items()),
            "lr_mult": list(optimizer.lr_mult.items()),
            "wd_mult": list(optimizer.wd_mult.items()),
            "idx2name": list(optimizer.idx2name.items()),
            "lr_scheduler": None if scheduler is None else {
                "class": type(scheduler).__name__, "attributes": scheduler._state()},
            "states": sorted((index, len(_arrays(state))) for index, state in states.items())}
    try:
        text = json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise MXNetError(f"save_states: the optimizer holds a value that cannot be saved: "
                         f"{err}") from err
    buffer = io.BytesIO()
    meta_bytes = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    # The keys are "state_<i>_<k>" (NumPy's stub fears one named allow_pickle).
    np.savez(buffer, meta=meta_bytes, **arrays)  # type: ignore[arg-type]
    replace_atomically(path, [buffer.getvalue()])


# -- loading ------------------------------------------------------------------------------
class _Corrupt(Exception):
    """What is wrong with the file (raised as MXNetError by :func:`load`)."""


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise _Corrupt(what)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _pairs(meta: dict, key: str) -> List[Tuple[Any, Any]]:
    value: Any = meta.get(key)  # untrusted (JSON), checked below
    _expect(isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 and
                                            isinstance(p[0], (int, str)) for p in value),
            f"'{key}' must be a list of [key, value] pairs")
    return [tuple(p) for p in value]


def _scheduler(spec: Any) -> Any:
    if spec is None:
        return None
    _expect(isinstance(spec, dict) and spec.get("class") in SCHEDULERS
            and isinstance(spec.get("attributes"), dict),
            f"lr_scheduler must be null or one of {sorted(SCHEDULERS)} with its attributes")
    cls = SCHEDULERS[spec["class"]]
    reference = vars(cls(**_SCHEDULER_ARGS[spec["class"]]))
    attributes = spec["attributes"]
    _expect(set(attributes) == set(reference),
            f"the {spec['class']} attributes must be {sorted(reference)}, got "
            f"{sorted(attributes)}")
    for key, value in attributes.items():
        model = reference[key]
        fits = (_is_number(value) if _is_number(model) else
                isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in value) if isinstance(model, list) else
                isinstance(value, type(model)))
        _expect(fits, f"lr_scheduler attribute {key!r} has a value of the wrong type: "
                      f"{value!r:.80}")
    scheduler = cls.__new__(cls)
    vars(scheduler).update(attributes)
    return scheduler


def _optimizer(meta: dict) -> _Builtin:
    # Untrusted values (JSON), each checked by _expect before use.
    name = meta.get("optimizer")
    arguments: Any = meta.get("arguments")
    cls: Any = Optimizer.opt_registry.get(name) if isinstance(name, str) else None
    _expect(cls is not None and issubclass(cls, _Builtin),
            f"optimizer must be a built-in optimizer's name, got {name!r:.80}")
    _expect(isinstance(arguments, dict), "'arguments' must be a dict")
    lr, num_update = meta.get("lr"), meta.get("num_update")
    _expect(lr is None or _is_number(lr), f"'lr' must be a number or null, got {lr!r:.80}")
    _expect(isinstance(num_update, int) and not isinstance(num_update, bool)
            and num_update >= 0, f"'num_update' must be an int >= 0, got {num_update!r:.80}")
    allowed = {"rescale_grad", "wd", "clip_gradient", "begin_num_update",
               "multi_precision"} | set(cls._HYPER)
    _expect(set(arguments) == allowed, f"the {cls.__name__} arguments must be "
                                       f"{sorted(allowed)}, got {sorted(arguments)}")
    try:
        optimizer = cls(learning_rate=0.01 if lr is None else lr, **arguments)
    except (TypeError, MXNetError) as err:
        raise _Corrupt(f"the {cls.__name__} arguments are invalid: {err}") from err
    optimizer.lr, optimizer.num_update = lr, num_update
    optimizer.lr_scheduler = _scheduler(meta.get("lr_scheduler"))
    counts = _pairs(meta, "index_update_count")
    _expect(all(isinstance(n, int) and not isinstance(n, bool) for _, n in counts),
            "update counts must be ints")
    optimizer._index_update_count = dict(counts)
    for key in ("lr_mult", "wd_mult"):
        pairs = _pairs(meta, key)
        _expect(all(_is_number(v) for _, v in pairs), f"'{key}' values must be numbers")
        setattr(optimizer, key, {k: float(v) for k, v in pairs})
    names = _pairs(meta, "idx2name")
    _expect(all(isinstance(v, str) for _, v in names), "'idx2name' values must be strings")
    optimizer.idx2name = dict(names)
    return optimizer


def _states(meta: dict, archive: _NpzArchive, optimizer: _Builtin,
            params: Sequence[Parameter]) -> Dict[int, Any]:
    entries = _pairs(meta, "states")
    count = optimizer._state_count()
    indices = [index for index, _ in entries]
    _expect(len(set(indices)) == len(indices), "a parameter index is listed twice")
    expected_members = {"meta"}
    states = {}
    for index, number in entries:
        _expect(isinstance(index, int) and 0 <= index < len(params),
                f"state index {index!r} is not one of this Trainer's {len(params)} parameters")
        _expect(number == count, f"parameter {index} has {number!r} state arrays; a "
                                 f"{type(optimizer).__name__} keeps {count}")
        param, arrays = params[index], []
        for k in range(count):
            key = f"state_{index}_{k}"
            expected_members.add(key)
            _expect(key in archive.keys, f"array '{key}' is missing")
            shape, dtype = archive.header(key)
            _expect(dtype.kind == "f", f"array '{key}' has dtype {dtype}, not a float dtype")
            _expect(not param.shape_known or shape == param.shape,
                    f"array '{key}' has shape {shape} but Parameter '{param.name}' has shape "
                    f"{param.shape}")
            arrays.append(array(archive.read(key, shape, dtype), dtype=param.dtype))
        states[index] = None if not count else arrays[0] if count == 1 and optimizer._single \
            else tuple(arrays)
    extra = sorted(set(archive.keys) - expected_members)
    _expect(not extra, f"unexpected members {extra[:5]}")
    return states


def load(path: str, params: Sequence[Parameter]) -> Tuple[Optimizer, Dict[int, Any]]:
    """The optimizer and states :func:`save` wrote to ``path``, checked against
    the Trainer's ``params`` (see the module)."""
    where = f"Trainer.load_states: fname={path!r}"
    try:
        with _NpzArchive(path) as archive:
            _expect("meta" in archive.keys, "it has no 'meta' member")
            shape, dtype = archive.header("meta")
            _expect(dtype == np.uint8 and len(shape) == 1 and shape[0] <= MAX_META_BYTES,
                    "its 'meta' member is not a UTF-8 text")
            try:
                meta = json.loads(archive.read("meta", shape, dtype).tobytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as err:
                raise _Corrupt(f"its 'meta' member is not JSON: {err}") from err
            _expect(isinstance(meta, dict) and meta.get("format") == FORMAT,
                    f"its 'meta' member does not name the format {FORMAT!r}")
            _expect(meta.get("version") == VERSION,
                    f"format version {meta.get('version')!r:.40} is not {VERSION}")
            optimizer = _optimizer(meta)
            states = _states(meta, archive, optimizer, params)
    except _Corrupt as err:
        raise MXNetError(f"{where} is not a states file Trainer.save_states wrote, or is "
                         f"damaged: {err}") from None
    except MXNetError as err:
        raise MXNetError(f"{where} is not a states file Trainer.save_states wrote (an .npz "
                         f"archive; MXNet's pickled states are not read): {err}") from None
    return optimizer, states
