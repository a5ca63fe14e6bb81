"""The plan cache's trust model (docs/reliability.rst): a kept verdict is taken
as it is only from an entry that nobody but this user can have written, and
only when it names this library, CPU and candidate; every other entry's plan
is checked again, and a writer never carries a verdict it cannot vouch for
into a file of its own.

The defects are planted (no test may assume which kernels a CPU offers, nor
which of them are wrong): the first candidate oneDNN offers is replaced by a
plan that adds the bias twice, under the real candidate's name, position,
variant and layouts, so that a forged entry naming it is found and built.
"""
import json
import os
import stat
import warnings

import pytest

import mxdeconv
from mxdeconv import KernelDefectWarning
from mxdeconv.onednn import plan_store
from mxdeconv.onednn import planner as plans
from mxdeconv.onednn._loader import extension as _ops
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import CHOOSE, planner_afresh, run_fresh
from planted import WrongCandidate, WrongPlan

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no file ownership here")

PARAMS = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=8, no_bias=False)
GEOM = infer_geometry(parse_params(PARAMS), (2, 8, 5, 5))
CACHE = f"plans-v{plan_store.FORMAT}.json"


class Disguised(WrongCandidate):
    """A wrong plan under a real candidate's name, position and locator."""

    def __init__(self, real):
        super().__init__(real)
        for name in ("index", "impl", "family", "bias_fused", "is_reference", "variant",
                     "layouts"):
            setattr(self, name, getattr(real, name))

    def __repr__(self):
        return f"Candidate(planted, disguised as {self.impl})"


@pytest.fixture
def planted(monkeypatch):
    """oneDNN's first forward candidate (position 0) computes a wrong result;
    the planner starts afresh, tuning on calls (not eagerly)."""
    real = _ops.forward_candidates
    first = next(iter(real(GEOM, "float32", False, False)))
    signature = (first.impl, first.variant, str(first.layouts))

    def candidates(*args, **kwargs):  # also when enumerating one variant only
        return iter([Disguised(c) if (c.impl, c.variant, str(c.layouts)) == signature
                     else c for c in real(*args, **kwargs)])
    monkeypatch.setattr(_ops, "forward_candidates", candidates)
    with planner_afresh(tuning=True, eager=False):
        yield first


def _key():
    return plans.ForwardKey("forward", GEOM, "float32", False, False, None, _ops.get_num_threads(),
                            True)


def _forged_entry(real, verdict=True):
    """What an attacker writes: the defective candidate, tuned, and (with
    ``verdict``) a verdict naming exactly this library, CPU and candidate."""
    choice = plans.Choice(real.index, _ops.get_num_threads(), real.impl)
    entry = {"index": real.index, "threads": choice.threads, "impl": real.impl,
             "tuned": True, "measured": [], "variant": list(real.variant),
             "layouts": str(real.layouts)}
    if verdict:
        entry[plan_store.VERDICT] = plans._verdict(choice)
    return entry


def _write(path, entries, mode=0o600):
    path.write_text(json.dumps({"format": plan_store.FORMAT, "entries": entries}))
    path.chmod(mode)


def _use(monkeypatch, path):
    """A new process's view of the plan cache at ``path``: a fresh store, no
    choice in memory."""
    monkeypatch.setattr(plans.current_planner(), "store", plan_store.PlanStore(path))
    plans.clear_choices()
    mxdeconv.clear_cache()


def _plan_rejects_the_planted_one():
    """Plan the layer: the planted plan must be checked and refused."""
    with pytest.warns(KernelDefectWarning, match="planted, disguised"):
        plan = plans.forward_plan(GEOM, "float32", False, False)
    assert not isinstance(plan, WrongPlan)
    return plan


# -- the laundering of issue 31 -----------------------------------------------------------
def test_a_verdict_read_from_a_file_others_can_write_is_never_rewritten_as_vouched(
        tmp_path, monkeypatch, planted):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    path = folder / CACHE
    forged_key = plans._store_key(_key(), GEOM)
    _write(path, {forged_key: _forged_entry(planted)}, mode=0o666)
    # Any process that writes the store (here: one new entry of its own).
    _use(monkeypatch, path)
    plans.current_planner().store.put("an entry of this process", {"index": 0}, defer=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # now a private file...
    kept = json.loads(path.read_text())["entries"]
    assert plan_store.VERDICT not in kept[forged_key]   # ...without the forged verdict
    assert kept["an entry of this process"] == {"index": 0}
    # The next process: the entry is checked again, the planted plan refused.
    _use(monkeypatch, path)
    plan = _plan_rejects_the_planted_one()
    assert "checked again" not in plan.choice.how  # chosen afresh, not kept


def test_a_private_file_entry_without_a_verdict_is_checked_then_vouched_for(
        tmp_path, monkeypatch, planted):
    """Entries of earlier versions carry no verdict: checked once, then kept
    with this process's verdict (one deferred write)."""
    real = next((c for c in _ops.forward_candidates(GEOM, "float32", False, False)
                 if c.index > planted.index and not c.is_reference), None)
    if real is None:
        pytest.skip("this CPU offers one forward candidate for the layer")
    path = tmp_path / CACHE
    _write(path, {plans._store_key(_key(), GEOM): _forged_entry(real, verdict=False)})
    _use(monkeypatch, path)
    plan = plans.forward_plan(GEOM, "float32", False, False)
    assert plan.choice.how.endswith(
        "(checked again: its verdict was not reached on this library, CPU and candidate)")
    plans.current_planner().store.flush()
    kept = json.loads(path.read_text())["entries"][plans._store_key(_key(), GEOM)]
    assert kept[plan_store.VERDICT] == plans._verdict(plan.choice)
    _use(monkeypatch, path)
    plan = plans.forward_plan(GEOM, "float32", False, False)
    assert "checked again" not in plan.choice.how


@pytest.mark.parametrize("field, value", [("onednn", "3.1.0"), ("isa", "sse41"),
                                          ("check", -1), ("planner", -1),
                                          ("impl", "another kernel"), ("threads", 1000)])
def test_a_verdict_reached_on_another_build_cpu_or_candidate_is_not_applied(
        tmp_path, monkeypatch, planted, field, value):
    entry = _forged_entry(planted)
    entry[plan_store.VERDICT][field] = value
    path = tmp_path / CACHE
    _write(path, {plans._store_key(_key(), GEOM): entry})
    _use(monkeypatch, path)
    _plan_rejects_the_planted_one()


def test_a_forged_verdict_in_a_private_file_is_the_users_own(tmp_path, monkeypatch, planted):
    """The control: a file only this user can write is as trusted as the
    installed package (like __pycache__): its verdict is taken as it is."""
    path = tmp_path / CACHE
    _write(path, {plans._store_key(_key(), GEOM): _forged_entry(planted)})
    _use(monkeypatch, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDefectWarning)
        plan = plans.forward_plan(GEOM, "float32", False, False)
    assert isinstance(plan, WrongPlan)


# -- where the file lives ----------------------------------------------------------------
def _vouched(path):
    store = plan_store.PlanStore(path)
    store.get("k")
    return store.vouched("k")


def _entry_file(path, mode=0o600):
    _write(path, {"k": {"index": 0}}, mode)
    return path


def test_a_private_file_in_private_folders_is_vouched_for(tmp_path):
    assert _vouched(_entry_file(tmp_path / CACHE))


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_file_others_can_write_is_not(tmp_path, mode):
    assert not _vouched(_entry_file(tmp_path / CACHE, mode))


def test_a_symlink_is_judged_by_its_target_and_the_targets_folders(tmp_path):
    """The link's own folder is private; its target is a private file in a
    folder anyone can write (and so replace the file in)."""
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    target = _entry_file(public / CACHE)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (mine / CACHE).symlink_to(target)
    assert not _vouched(mine / CACHE)
    public.chmod(0o755)  # the control: the same link into a folder nobody else writes
    assert _vouched(mine / CACHE)


def test_a_private_folder_inside_a_folder_anyone_can_write_is_not_private(tmp_path):
    """Whoever can write a folder above can rename the folder and put another
    in its place; a sticky folder (/tmp) lets nobody rename what is not theirs."""
    public = tmp_path / "public"
    public.mkdir()
    mine = public / "mine"
    mine.mkdir(mode=0o700)
    path = _entry_file(mine / CACHE)
    public.chmod(0o777)
    assert not _vouched(path)
    public.chmod(0o1777)
    assert _vouched(path)


def test_a_file_with_another_hard_link_is_not_private(tmp_path):
    path = _entry_file(tmp_path / CACHE)
    os.link(path, tmp_path / "elsewhere.json")
    assert not _vouched(path)


def test_a_file_replaced_between_the_checks_and_the_read_is_not_private(
        tmp_path, monkeypatch):
    path = _entry_file(tmp_path / CACHE)
    real_safe = plan_store._safe_folders

    def swap_then_check(folder):
        other = _entry_file(tmp_path / "other.json")
        os.replace(other, path)  # another file under the same name, after the open
        return real_safe(folder)
    monkeypatch.setattr(plan_store, "_safe_folders", swap_then_check)
    assert not _vouched(path)


# -- across processes, as the issue reproduced it -------------------------------------------
OTHER = """
    from mxdeconv import nd
    nd.Deconvolution(nd.ones((1, 3, 4, 4)), nd.ones((3, 2, 3, 3)), kernel=(3, 3), num_filter=2)
    """


def _run(code, cache_dir, **env):
    run = run_fresh(code, cache_dir, timeout=300, **env)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_a_world_writable_entry_stays_unvouched_through_another_processs_write(tmp_path):
    """The issue's three steps: a world-writable cache holds the layer's entry;
    another process writes the store; a third takes the layer: checked again."""
    _run(CHOOSE, tmp_path, MXDECONV_TUNE="eager")
    path = tmp_path / CACHE
    path.chmod(0o666)
    _run(OTHER, tmp_path, MXDECONV_TUNE="eager")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "kept from an earlier tuning on this machine (checked again" in _run(CHOOSE, tmp_path)
    # That process vouched for it after its check: the next one takes it as it is.
    assert "checked again" not in _run(CHOOSE, tmp_path)
