"""The shipped plan database: tuned choices for common layers, and a predictor
for the rest.

As MIOpen ships a System Find-Db, mxdeconv ships ``plan_db.json`` beside
this module: for a grid of layer shapes taken from real models, each pass and
mode, thread count and kernel family (``ONEDNN_MAX_CPU_ISA``), the candidate
that tuning chose (``scripts/make_plan_db.py`` makes it and records how, on
which machine and when).  The planner asks :meth:`PlanDatabase.predict` for a
new layer pass before it falls back on oneDNN's first choice:

* a layer the database holds, or one whose nearest neighbours (in a space of
  log channel counts, log sizes, kernel, stride, dilation, groups, batch and
  threads) all chose the same candidate, is predicted *confidently*: the
  planner runs that candidate from the first call and does not tune it;
* any other prediction is a hint: that candidate is tried first, and the
  layer is tuned on its calls as any new layer.

A prediction is never a verdict: its plan passes the same checks as any
other.  The user's own plan cache (what tuning measured on this machine)
takes precedence over the database, as MIOpen's user Find-Db does.
"""
from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from mxdeconv.semantics.attributes import DeconvGeometry

#: The file's format; its history: docs/changelog.rst.
FORMAT = 1
#: The database shipped with the package.
SHIPPED = Path(__file__).with_name("plan_db.json")
#: How many nearest records must agree for a confident prediction, and how far
#: (in feature units: about one doubling of one size) the farthest may be.
NEIGHBOURS, CONFIDENT_DISTANCE = 3, 1.5
#: Kernel families in the order of the ISAs oneDNN dispatches to (see _family).
ISA_ORDER = ("sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core",
             "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx",
             "avx512_core_amx_fp16")


class LayerKey(NamedTuple):
    """What must match exactly for one record to speak for another layer."""

    what: str          # "forward", "backward_weights", "backward_data"
    dtype: str
    training: bool     # forward only (False for the backward passes)
    ndim: int


class Choice(NamedTuple):
    """A candidate, independent of the layer's shape: oneDNN's implementation
    and mxdeconv's variant (layout families, bias and activation fused,
    direct), and whether it ran on one thread rather than the caller's."""

    variant: Tuple[Any, ...]
    impl: str
    one_thread: bool


@dataclass(frozen=True)
class Prediction:
    """A choice for a layer pass, how sure, and where it came from."""

    choice: Choice
    confident: bool
    source: str


def features(geom: DeconvGeometry, threads: int) -> Tuple[float, ...]:
    """A layer pass as a point: log2 sizes (one unit: one doubling), and flags
    for the kernel classes that change which kernels win (dilation, taps that
    do not overlap, a bias)."""
    param = geom.param
    groups = param.num_group
    batch, in_channels = geom.data_shape[:2]
    log = math.log2
    return (log(batch), log(in_channels // groups), log(param.num_filter // groups),
            log(groups), log(math.prod(geom.spatial_in)), log(math.prod(param.kernel)),
            log(math.prod(param.stride)),
            2.0 * any(d > 1 for d in param.dilate),
            2.0 * all(k <= s for k, s in zip(param.kernel, param.stride)),
            1.0 * (geom.bias_shape is not None), log(threads))


def _distance(one: Sequence[float], other: Sequence[float]) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(one, other)))


@dataclass(frozen=True)
class _Record:
    features: Tuple[float, ...]
    choice: Choice


def _family(isa: str, families: Sequence[str]) -> Optional[str]:
    """The recorded kernel family closest to this CPU's (``isa``): the highest
    one it can run, else the lowest above it (float32 runs the same
    ``avx512_core`` kernels on every AVX-512 family; a predicted kernel this
    CPU lacks is simply not offered, and the layer is planned as without a
    database)."""
    rank = {name: i for i, name in enumerate(ISA_ORDER)}
    mine = rank.get(isa)
    if mine is None:
        return isa if isa in families else None
    known = [f for f in families if f in rank]
    below = [f for f in known if rank[f] <= mine]
    if below:
        return max(below, key=lambda f: rank[f])
    return min(known, key=lambda f: rank[f]) if known else None


def _choice_of(value: Any) -> Optional[Choice]:
    """A record's choice if well formed (the file is the package's own, but a
    damaged install must not fail a call)."""
    if not isinstance(value, dict):
        return None
    variant, impl, one = value.get("variant"), value.get("impl"), value.get("one_thread")
    if not (isinstance(variant, list) and len(variant) == 5 and isinstance(impl, str)
            and type(one) is bool):
        return None
    return Choice(tuple(variant), impl, one)


class PlanDatabase:
    """The records of one database file, read on first use; :meth:`predict`."""

    def __init__(self, path: Optional[Path] = SHIPPED) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._records: Optional[Dict[Tuple[str, str, str, bool, int], List[_Record]]] = None
        self.made: Dict[str, Any] = {}

    def _loaded(self) -> Dict[Tuple[str, str, str, bool, int], List[_Record]]:
        with self._lock:
            if self._records is None:
                self._records = {}
                try:
                    document = json.loads(Path(self._path).read_text()) \
                        if self._path is not None else {}
                except (OSError, ValueError):
                    document = {}  # no database: oneDNN's first choice, then tuning
                if isinstance(document, dict) and document.get("format") == FORMAT:
                    self.made = document.get("made", {})
                    for record in document.get("records", ()):
                        self._add(record)
            return self._records

    def _add(self, record: Any) -> None:
        try:
            layer = record["layer"]
            geom = geometry_of_layer(layer)
            key = (record["isa"], record["pass"], record["dtype"], bool(record["training"]),
                   len(geom.spatial_in))
            entry = _Record(features(geom, int(record["threads"])), _choice_of(record["choice"]))
        except (KeyError, TypeError, ValueError):
            return
        if entry.choice is not None:
            self._records.setdefault(key, []).append(entry)

    def families(self) -> List[str]:
        """The kernel families the database holds records for."""
        return sorted({key[0] for key in self._loaded()})

    def predict(self, layer: LayerKey, geom: DeconvGeometry, threads: int,
                isa: str) -> Optional[Prediction]:
        """The choice for ``geom``'s pass ``layer`` on ``threads`` threads of a
        CPU whose oneDNN dispatches to ``isa``; None when the database holds
        nothing comparable."""
        records = self._loaded()
        family = _family(isa, {key[0] for key in records})
        if family is None:
            return None
        candidates = records.get((family, layer.what, layer.dtype, layer.training, layer.ndim))
        if not candidates:
            return None
        point = features(geom, threads)
        ranked = sorted(candidates, key=lambda r: _distance(point, r.features))
        nearest = ranked[0]
        distance = _distance(point, nearest.features)
        where = f"the shipped plan database ({family})"
        if distance == 0.0:
            return Prediction(nearest.choice, True, f"{where}: this layer")
        close = [r for r in ranked[:NEIGHBOURS]
                 if _distance(point, r.features) <= CONFIDENT_DISTANCE]
        agree = len(close) == NEIGHBOURS and all(r.choice == nearest.choice for r in close)
        what = (f"{where}: its {NEIGHBOURS} nearest layers agree" if agree else
                f"{where}: the nearest layer (distance {distance:.2f})")
        return Prediction(nearest.choice, agree, what)


def geometry_of_layer(layer: Dict[str, Any]) -> DeconvGeometry:
    """The geometry of a record's ``layer`` (data shape and MXNet parameters)."""
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    params = dict(layer["params"])
    for name, value in params.items():
        if isinstance(value, list):
            params[name] = tuple(value)
    return infer_geometry(parse_params(params), tuple(layer["data"]))
