"""What the planner decides for a key (:class:`Choice`, with the candidates it
timed, :class:`Measured`), or that no oneDNN plan can run it
(:class:`Unavailable`); the two backward passes' plans together
(:class:`BackwardPlans`); whether a plan is final (:func:`settled`,
:func:`provisional`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, FrozenSet, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:  # annotations only: tuner imports this module (a Choice's tuner is a
    # tuner._Tuner), and import-linter leaves TYPE_CHECKING imports out of its contracts
    from .keys import PlanKey
    from .tuner import _Tuner


@dataclass(frozen=True)
class Unavailable:
    """No oneDNN plan can run this pass; ``reason`` says why."""

    reason: str


@dataclass
class Measured:
    """One candidate the tuner timed: its end-to-end seconds for the mode."""

    candidate: str
    threads: int
    seconds: float
    verdict: str = "not checked (a faster candidate agreed)"


class PutOff(NamedTuple):
    """A candidate that costs a new layer's first call more than it saves over
    its first few, put off while another stands in for it
    (tuner._put_off_units): a deconvolution whose descriptor is slow to make
    (defects.slow_deconvolution_descriptors), or a GEMM plan the plan
    database hints at (tuner.hint_put_off)."""

    variant: Tuple[Any, ...]
    impl: str
    #: What the candidate is, for its choice's ``how`` once it runs.
    how: str
    #: Final once it runs (a tuned choice from the plan cache); else tuned
    #: among the shortlist from then on, as a hint near its best is.
    final: bool
    #: Why it is put off, for the choices' ``how``.
    why: str = "its descriptor is slow to make here"


@dataclass
class Choice:
    """What the planner decided for one key, kept for the process."""

    index: Optional[int]               # the chosen candidate's position, None: none
    threads: int = 1
    impl: str = ""
    how: str = "first correct candidate"   # or "tuned", "kept from an earlier run"
    rejected: List[Tuple[str, str]] = field(default_factory=list)  # (candidate, why)
    measured: List[Measured] = field(default_factory=list)
    seconds: float = 0.0               # time spent choosing
    reason: str = ""                   # why nothing was chosen
    transient: bool = False            # nothing chosen for now (memory), not for good
    tuner: Optional[_Tuner] = field(default=None, repr=False)  # tuning on later calls
    #: The candidate's variant and its layouts' text (Candidate.variant and
    #: .layouts): _rebuild enumerates that variant only.  None: unknown.
    found_at: Optional[Tuple[Tuple[Any, ...], str]] = None
    #: Not yet through the kernel check: each result is checked on sampled
    #: elements until the key's next visit to the planner runs it (_confirm).
    provisional: bool = False
    key: Optional["PlanKey"] = field(default=None, repr=False)  # the planner key
    #: Predicted confidently by the shipped plan database: never tuned.
    confident: bool = False
    #: The candidate came from the plan database, found in its variant only:
    #: ``index`` counts within that variant, not in the full enumeration.
    from_database: bool = False
    #: The candidates the tuner times (the database's shortlist for a hinted
    #: layer, as (variant, impl) pairs; the candidate chosen first is timed too);
    #: None: every candidate.
    shortlist: Optional[FrozenSet[Tuple[Tuple[Any, ...], str]]] = None
    #: Calls of the key before its tuner's first unit (see tuner.TUNE_AFTER_CALLS).
    tune_after_calls: int = 0
    #: A kept tuned choice re-validated on this process's calls: the names
    #: (``repr``) of the candidates its tuning ran within REVALIDATE_WITHIN of
    #: it, which its tuner times beside it; None: not re-validated.
    rivals: Optional[FrozenSet[str]] = None
    #: The candidate put off (PutOff) that this choice stands in for on the
    #: first calls: its tuner replaces it with that one (tuner._put_off_units).
    put_off: Optional[PutOff] = None

    def describe(self) -> str:
        """What explain() prints: the choice, the check, the alternatives."""
        if self.index is None:
            return f"no oneDNN plan: {self.reason}"
        if self.provisional:
            text = (f"{self.how}: {self.impl} on {self.threads} thread(s), provisional: "
                    f"its results are checked on sampled elements until the kernel check "
                    f"(exact small-integer inputs) runs on this layer's next call")
        else:
            text = (f"{self.how}: {self.impl} on {self.threads} thread(s), checked on this "
                    f"geometry against the NumPy path (exact small-integer inputs) and "
                    f"agreed ({self.seconds * 1e3:.1f} ms to choose)")
        if self.tuner is not None:
            text += (f"; tuning on this layer's calls: {self.tuner.steps} step(s), "
                     f"{self.tuner.seconds * 1e3:.1f} ms so far")
        for candidate, why in self.rejected:
            text += f"; rejected {candidate}: {why}"
        if self.measured:
            text += "\n  measured (end to end for this mode):"
            for m in sorted(self.measured, key=lambda m: m.seconds):
                text += (f"\n    {m.seconds * 1e6:10.1f} us  {m.candidate} on {m.threads} "
                         f"thread(s): {m.verdict}")
        return text


def _found_at(candidate: Any) -> Optional[Tuple[Tuple[Any, ...], str]]:
    """Where ``candidate`` is found again (None for one without a variant:
    the tests' planted candidates)."""
    variant = getattr(candidate, "variant", None)
    return None if variant is None else (variant, str(candidate.layouts))


def _found_as(candidate: Any, choice: Choice) -> bool:
    """Whether ``candidate`` is the one ``choice`` names by where it is found
    (its variant and layouts) and its implementation."""
    return choice.found_at is not None and candidate.impl == choice.impl and \
        _found_at(candidate) == choice.found_at


def _same(one: Choice, other: Choice) -> bool:
    """Whether two choices name the same candidate: a database's choice's index
    is its variant's, so where it is found counts too."""
    return (one.index, one.threads, one.impl, one.found_at, one.from_database) == \
        (other.index, other.threads, other.impl, other.found_at, other.from_database)


def settled(plan: Any) -> bool:
    """Whether ``plan`` (a forward plan or BackwardPlans) is final: not a first
    choice whose layer is still tuned on its calls (a prepared call of such a
    plan serves only until the next unit is due: :func:`serve`), nor a
    provisional one."""
    if isinstance(plan, BackwardPlans):
        return settled(plan.data) and settled(plan.weights)
    return plan.choice.tuner is None and not plan.choice.provisional


def provisional(plan: Any) -> bool:
    """Whether a pass's plan (not BackwardPlans) is provisional: each of its
    results must pass :mod:`~mxdeconv.onednn.result_check` (then
    :func:`refuse` it if one does not)."""
    return plan.choice.provisional


@dataclass(frozen=True)
class BackwardPlans:
    """The two backward passes of one geometry."""

    data: Any
    weights: Any
