"""The planner's keys: what a plan is chosen for (pass, geometry, dtype, mode,
threads, whether tuned).  Equal to, and hashed as, the plain tuples the
compiled layers' primitive caches are keyed by."""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

from mxdeconv.semantics.attributes import DeconvGeometry


class ForwardKey(NamedTuple):
    """A forward pass's planner key (equal to, and hashed as, the plain tuple the
    compiled layer's primitive cache is keyed by)."""

    what: str            # "forward"
    geom: DeconvGeometry
    dtype: str
    training: bool
    accumulate: bool     # req=add: a sum post-op
    act_type: Optional[str]
    threads: int
    tuning: bool


class BackwardKey(NamedTuple):
    """A backward pass's planner key."""

    what: str            # "backward_weights" or "backward_data"
    geom: DeconvGeometry
    dtype: str
    threads: int
    tuning: bool


PlanKey = Union[ForwardKey, BackwardKey]
