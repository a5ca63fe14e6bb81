"""The shipped plan database: tuned choices for common layers, and a predictor
for the rest.

As MIOpen ships a System Find-Db, mxdeconv ships ``plan_db.json`` beside
this module: for a grid of layer shapes taken from real models, each pass and
mode, thread count and kernel family (``ONEDNN_MAX_CPU_ISA``), the candidate
that tuning chose there and the candidates that ran within NEAR_RATIO of it,
with their times relative to the fastest (``scripts/make_plan_db.py`` makes
it and records how, on which machine and when).  The planner asks
:meth:`PlanDatabase.predict` for a new layer pass before it falls back on
oneDNN's first choice:

* the layer itself (same shape, batch and threads) is predicted
  *confidently*, and so is a layer whose NEIGHBOURS nearest records (in a
  space of log channel counts, log sizes, kernel, stride, dilation, groups,
  batch and threads) lie within CONFIDENT_DISTANCE and each ran the predicted
  candidate within WITHIN of its fastest: the planner runs that candidate
  from the first call and does not tune it;
* otherwise the prediction is a *hint*: the candidate the nearest records ran
  best on the whole (a distance-weighted mean of log relative times), which
  the layer starts on, and a *shortlist*, the candidates any of them ran
  within SHORTLIST_RATIO of its fastest, which are all the tuner times.

A prediction is never a verdict: its plan passes the same checks as any
other.  The user's own plan cache (what tuning measured on this machine)
takes precedence over the database, as MIOpen's user Find-Db does.
"""
from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

from mxdeconv.semantics.attributes import DeconvGeometry

#: The file's format; its history: docs/changelog.rst.  Format 4 is JSON
#: lines: a header (format, how it was made, the candidates, and the names of
#: the G groups: one kernel family, pass, dtype, mode and number of
#: dimensions each); then each group's index, a line (its records' points in
#: feature space, choices and near candidates, as columns); then each
#: group's layers, a line (each record's thread count and layer: for people
#: and tools).  A process parses the header and the index lines of the groups
#: its layers use, and of a group's records the choices of those a
#: prediction weighs (a training step's three predictions in a new process:
#: 2.8 ms, against 3.25 with every record of the three groups parsed).
FORMAT = 4
#: The database shipped with the package.
SHIPPED = Path(__file__).with_name("plan_db.json")
#: A record keeps the candidates that ran within NEAR_RATIO of its fastest (at
#: most NEAR_KEPT of them); one it did not keep counts as UNKEPT_RATIO.
NEAR_RATIO, NEAR_KEPT, UNKEPT_RATIO = 1.5, 10, 3.0
#: How many nearest records a prediction weighs, how far (in feature units:
#: about one doubling of one size) they may lie for a confident one, and how
#: close to each one's fastest the candidate must have run there.  Held out
#: of the runs of 2026-12-05 (AVX-512 with AMX, 1 and 2 threads), a distance
#: of 1.5 made 30 of 608 predictions confident, all of them right; 2.5 made
#: 129, 83%.  Those of the shipped database: 32, all right.
NEIGHBOURS, CONFIDENT_DISTANCE, WITHIN = 3, 1.5, 1.05
#: The tuner's shortlist for a hinted layer: what any of the nearest records
#: ran within this ratio of its fastest: held out of records taken on a quiet
#: machine (AVX-512 with AMX, 2 threads), the best of such a shortlist was
#: within 5% of the layer's fastest on 92% of them, from 7 of 18 candidates on
#: average.
SHORTLIST_RATIO = 1.3
#: A neighbour's weight: 1 / (WEIGHT_OFFSET + its distance).
WEIGHT_OFFSET = 0.25
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
    """A choice for a layer pass, how sure, where it came from, and the
    candidates worth timing (the shortlist, the choice among them)."""

    choice: Choice
    confident: bool
    source: str
    shortlist: FrozenSet[Choice] = frozenset()
    #: Each candidate the nearest records name: its expected time over the best's.
    ratios: Dict[Choice, float] = field(default_factory=dict)
    #: (variant, implementation) of every candidate any record of the layer's
    #: group names: what the database measured for this pass at all.
    named: FrozenSet[Tuple[Tuple[Any, ...], str]] = frozenset()

    def ratio(self, variant: Tuple[Any, ...], impl: str) -> Optional[float]:
        """The expected time over the best's of a candidate (either thread
        choice), None when no near record names it."""
        found = [r for c, r in self.ratios.items()
                 if c.impl == impl and tuple(c.variant) == tuple(variant)]
        return min(found) if found else None


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


def _layer_features(layer: Dict[str, Any], threads: int) -> Tuple[float, ...]:
    """:func:`features` of a record's layer, read from its data shape and
    MXNet parameters directly (the geometry's checks cost 0.1 ms a record, 40 ms
    for a training step's three groups); the tests hold the two equal."""
    data, params = layer["data"], layer["params"]
    ndim = len(data) - 2
    kernel = params["kernel"]
    stride = params.get("stride") or [1] * ndim
    dilate = params.get("dilate") or [1] * ndim
    groups = int(params.get("num_group", 1))
    log = math.log2
    if len(kernel) != ndim or len(stride) != ndim or len(dilate) != ndim:
        raise ValueError("a layer's kernel, stride and dilate must have its dimensions")
    return (log(data[0]), log(data[1] // groups), log(params["num_filter"] // groups),
            log(groups), log(math.prod(data[2:])), log(math.prod(kernel)),
            log(math.prod(stride)),
            2.0 * any(d > 1 for d in dilate),
            2.0 * all(k <= s for k, s in zip(kernel, stride)),
            1.0 * (not params.get("no_bias", True)), log(threads))


#: How many coordinates a point has (features' and _layer_features' length).
FEATURES = 11


def _distance(one: Sequence[float], other: Sequence[float]) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(one, other)))


@dataclass(frozen=True)
class _Record:
    features: Tuple[float, ...]
    choice: Choice
    near: Dict[Choice, float]   # candidate -> its time over the fastest's

    def ratio(self, choice: Choice) -> float:
        return self.near.get(choice, UNKEPT_RATIO)


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


#: A group of records: (kernel family, pass, dtype, training, spatial dims).
GroupKey = Tuple[str, str, str, bool, int]


def group_name(key: GroupKey) -> str:
    """A group's name in the file: its key's fields joined by "|"."""
    isa, what, dtype, training, ndim = key
    return f"{isa}|{what}|{dtype}|{int(training)}|{ndim}"


def _group_key(name: Any) -> Optional[GroupKey]:
    """The key a group's name stands for (None: not one)."""
    parts = name.split("|") if isinstance(name, str) else []
    if len(parts) != 5 or parts[3] not in ("0", "1") or not parts[4].isdigit():
        return None
    return parts[0], parts[1], parts[2], parts[3] == "1", int(parts[4])


def file_text(records: Sequence[Dict[str, Any]], made: Dict[str, Any],
              choices: Sequence[Dict[str, Any]]) -> str:
    """A database file of ``records`` (each naming its kernel family ``isa``,
    its ``pass``, ``dtype``, ``training``, ``threads``, ``layer``, ``choice``
    and ``near`` candidates; one that does not is left out); ``choices``, the
    candidates the records name by index; ``made``, how the file was made."""
    groups: Dict[str, List[Tuple[Tuple[float, ...], Dict[str, Any]]]] = {}
    for record in records:
        try:
            name = group_name((record["isa"], record["pass"], record["dtype"],
                               bool(record["training"]), len(record["layer"]["data"]) - 2))
            point = _layer_features(record["layer"], int(record["threads"]))
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue
        groups.setdefault(name, []).append((point, record))
    index = [{"points": [list(point) for point, _ in group],
              "choice": [r.get("choice") for _, r in group],
              "near": [r.get("near", []) for _, r in group]} for group in groups.values()]
    layers = [[{"threads": r["threads"], "layer": r["layer"]} for _, r in group]
              for group in groups.values()]
    header = {"format": FORMAT, "made": made, "choices": list(choices),
              "groups": list(groups)}
    return "\n".join(json.dumps(part, separators=(",", ":"))
                     for part in [header, *index, *layers]) + "\n"


class _Group:
    """One group's index: every record's point, parsed at once (a prediction
    ranks them all), and each record's choice and near candidates, parsed when
    the record is among a prediction's nearest (a group's records in full cost
    about 0.9 ms, its JSON and points about 0.5)."""

    def __init__(self, index: Any, choice: Callable[[Any], Optional[Choice]]) -> None:
        self._choice = choice
        self.points: List[Tuple[int, Tuple[float, ...]]] = []  # (record, point)
        self._columns: List[Tuple[Any, Any]] = []              # (choice, near) per record
        self._records: Dict[int, Optional[_Record]] = {}
        self._named: Optional[FrozenSet[Tuple[Tuple[Any, ...], str]]] = None
        try:
            columns = list(zip(index["points"], index["choice"], index["near"], strict=True))
        except (KeyError, TypeError, ValueError):
            return  # columns that do not match: no record is known for sure
        for position, (point, chosen, near) in enumerate(columns):
            try:
                point = tuple(float(v) for v in point)
            except (TypeError, ValueError):
                continue
            if len(point) == FEATURES and all(map(math.isfinite, point)):
                self.points.append((position, point))
        self._columns = [(chosen, near) for _, chosen, near in columns]

    def record(self, position: int, point: Tuple[float, ...]) -> Optional[_Record]:
        """The record at ``position`` (whose point is ``point``), None when its
        choice or near candidates are not well formed."""
        if position not in self._records:
            self._records[position] = self._parsed(point, *self._columns[position])
        return self._records[position]

    def _parsed(self, point: Tuple[float, ...], choice: Any, near: Any) -> Optional[_Record]:
        chosen = self._choice(choice)
        ratios = {}
        try:
            for named, ratio in near:
                candidate = self._choice(named)
                if candidate is not None and isinstance(ratio, (int, float)) \
                        and math.isfinite(ratio) and ratio >= 1.0:
                    ratios[candidate] = float(ratio)
        except (TypeError, ValueError):
            return None
        if chosen is None:
            return None
        ratios.setdefault(chosen, 1.0)
        return _Record(point, chosen, ratios)

    def named(self) -> FrozenSet[Tuple[Tuple[Any, ...], str]]:
        """(variant, implementation) of every candidate the group's records
        name, chosen or near (Prediction.named)."""
        if self._named is None:
            found = set()
            for chosen, near in self._columns:
                found.add(self._choice(chosen))
                try:
                    found.update(self._choice(pair[0]) for pair in near)
                except (TypeError, IndexError, KeyError):
                    pass
            self._named = frozenset((tuple(c.variant), c.impl) for c in found
                                    if c is not None)
        return self._named


class PlanDatabase:
    """The records of one database file, read on first use; :meth:`predict`.

    A group's records (family, pass, mode, dimensions) are parsed, and their
    layers become points in feature space, only when a layer of that group is
    first predicted: a process pays for the groups its layers use, not for
    the whole file; of a group, it parses the choices of the records a
    prediction weighs, not all of them."""

    def __init__(self, path: Optional[Path] = SHIPPED) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._texts: Optional[Dict[GroupKey, bytes]] = None
        self._groups: Dict[GroupKey, _Group] = {}
        #: The header's candidates as written, each parsed on first use.
        self._choice_values: List[Any] = []
        self._choices: Dict[int, Optional[Choice]] = {}
        self._families: List[str] = []
        self.made: Dict[str, Any] = {}

    def _loaded(self) -> Dict[GroupKey, bytes]:
        """The file's groups, each its index line, unparsed (locked by the
        caller)."""
        if self._texts is None:
            self._texts = {}
            try:
                lines = Path(self._path).read_bytes().split(b"\n") \
                    if self._path is not None else []
                header = json.loads(lines[0]) if lines else {}
            except (OSError, ValueError):
                header = {}  # no database: oneDNN's first choice, then tuning
            if isinstance(header, dict) and header.get("format") == FORMAT:
                made = header.get("made", {})
                self.made = made if isinstance(made, dict) else {}
                choices = header.get("choices", [])
                self._choice_values = choices if isinstance(choices, list) else []
                names = header.get("groups", [])
                for name, line in zip(names if isinstance(names, list) else (), lines[1:]):
                    key = _group_key(name)
                    if key is not None:
                        self._texts[key] = line
            self._families = sorted({key[0] for key in self._texts})
        return self._texts

    def _group(self, key: GroupKey) -> _Group:
        with self._lock:
            if key not in self._groups:
                text = self._loaded().get(key)
                try:
                    index = json.loads(text) if text is not None else {}
                except ValueError:
                    index = {}
                self._groups[key] = _Group(index, self._choice)
            return self._groups[key]

    def _choice(self, value: Any) -> Optional[Choice]:
        """A record's choice: inline, or an index into the file's ``choices``."""
        if type(value) is not int:
            return _choice_of(value)
        if value not in self._choices:
            self._choices[value] = _choice_of(self._choice_values[value]) \
                if 0 <= value < len(self._choice_values) else None
        return self._choices[value]

    def families(self) -> List[str]:
        """The kernel families the database holds records for."""
        with self._lock:
            self._loaded()
            return self._families

    def predict(self, layer: LayerKey, geom: DeconvGeometry, threads: int,
                isa: str) -> Optional[Prediction]:
        """The choice for ``geom``'s pass ``layer`` on ``threads`` threads of a
        CPU whose oneDNN dispatches to ``isa``; None when the database holds
        nothing comparable."""
        family = _family(isa, self.families())
        if family is None:
            return None
        group_key = (family, layer.what, layer.dtype, layer.training, layer.ndim)
        group = self._group(group_key)
        point = features(geom, threads)
        ranked: List[_Record] = []
        distances: List[float] = []
        with self._lock:  # records are parsed as they are reached
            for distance, position, record_point in sorted(
                    (_distance(point, p), i, p) for i, p in group.points):
                record = group.record(position, record_point)
                if record is not None:
                    ranked.append(record)
                    distances.append(distance)
                    if len(ranked) == NEIGHBOURS:
                        break
            named = group.named() if ranked else frozenset()
        if not ranked:
            return None
        where = f"the shipped plan database ({family})"
        if distances[0] == 0.0:
            nearest = ranked[0]
            return Prediction(nearest.choice, True, f"{where}: this layer",
                              _shortlist([nearest], nearest.choice), dict(nearest.near), named)
        weights = [1.0 / (WEIGHT_OFFSET + d) for d in distances]

        def score(choice: Choice) -> float:  # a weighted mean of log relative times
            return sum(w * math.log(r.ratio(choice)) for w, r in zip(weights, ranked))
        best = min(sorted({c for r in ranked for c in r.near}, key=repr), key=score)
        confident = (len(ranked) == NEIGHBOURS and distances[-1] <= CONFIDENT_DISTANCE
                     and all(r.ratio(best) <= WITHIN for r in ranked))
        what = (f"{where}: its {len(ranked)} nearest layers (distance up to "
                f"{distances[-1]:.2f}) ran it within {WITHIN - 1:.0%} of their fastest"
                if confident else
                f"{where}: the best of its {len(ranked)} nearest layers (distance "
                f"{distances[0]:.2f} to {distances[-1]:.2f})")
        total = sum(weights)
        ratios = {c: math.exp(score(c) / total) for c in {c for r in ranked for c in r.near}}
        return Prediction(best, confident, what, _shortlist(ranked, best), ratios, named)


def _shortlist(records: Sequence[_Record], best: Choice) -> FrozenSet[Choice]:
    """What any of ``records`` ran within SHORTLIST_RATIO of its fastest, and ``best``."""
    return frozenset({best} | {c for r in records for c, ratio in r.near.items()
                               if ratio <= SHORTLIST_RATIO})


def geometry_of_layer(layer: Dict[str, Any]) -> DeconvGeometry:
    """The geometry of a record's ``layer`` (data shape and MXNet parameters)."""
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    params = dict(layer["params"])
    for name, value in params.items():
        if isinstance(value, list):
            params[name] = tuple(value)
    return infer_geometry(parse_params(params), tuple(layer["data"]))
