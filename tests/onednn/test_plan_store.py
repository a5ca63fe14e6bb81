"""The plan cache on disk: kept across processes, and untrusted input.

Whatever the file, its directory or its lock hold (junk in any field of an
entry, a FIFO, a device, a huge or deeply nested document, a directory that
cannot be used, a lock held by a stuck process), a call succeeds with the right
result, quickly, and the process warns once and keeps its choices in memory.
Cases that depend on process state (what was read, warned or given up) run in
a fresh process each, with a timeout, so a hang fails instead of blocking.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from helpers import CHOOSE, run_fresh
from mxdeconv.onednn import plan_store

CACHE = "plans-v2.json"


_run = run_fresh


def _ok(run):
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run


def _warnings(run):
    return run.stderr.count("mxdeconv plan cache")



#: Three new small layers, timed: each tunes and writes (or tries to); all ones,
#: so each sum is exact.  Prints one JSON line per layer.
LAYERS = """
    import json, time
    import mxdeconv
    from mxdeconv import nd
    from mxdeconv.onednn import planner as plans
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    for size in (5, 6, 7):
        params = dict(kernel=(3, 3), num_filter=3)
        x, w = nd.ones((1, 4, size, size)), nd.ones((4, 3, 3, 3))
        begun = time.perf_counter()
        total = float(nd.Deconvolution(x, w, **params).asnumpy().sum())
        seconds = time.perf_counter() - begun
        plan = plans.forward_plan(infer_geometry(parse_params(params), x.shape),
                                  "float32", False, False)
        print(json.dumps({"sum": total, "expected": 4 * 9 * size * size * 3,
                          "seconds": seconds, "threads": plan.threads,
                          "caller": mxdeconv.get_num_threads(),
                          "path": mxdeconv.plan_cache_path()}))
    """


def _layers(run):
    """The LAYERS results, each checked: the right sum on a sane thread count."""
    results = [json.loads(line) for line in _ok(run).stdout.splitlines()]
    assert len(results) == 3
    for result in results:
        assert result["sum"] == result["expected"]
        assert result["threads"] in (1, result["caller"])
    return results


# -- kept across processes ------------------------------------------------------------
def test_a_tuned_choice_is_kept_on_disk_and_taken_from_a_private_file(tmp_path):
    first = _ok(_run(CHOOSE, tmp_path, MXDECONV_TUNE="eager"))
    assert "tuned:" in first.stdout
    files = list(tmp_path.glob("plans-v*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["entries"]
    second = _ok(_run(CHOOSE, tmp_path))
    assert "kept from an earlier tuning on this machine" in second.stdout
    assert "checked again" not in second.stdout


def test_a_first_choice_is_kept_on_disk_and_tuned_on_the_next_process_calls(tmp_path):
    first = _ok(_run(CHOOSE, tmp_path))
    assert "first correct candidate; tuned on this layer's later calls" in first.stdout
    second = _ok(_run(CHOOSE, tmp_path))
    assert ("first correct candidate, kept from an earlier run on this machine; tuned on "
            "this layer's later calls") in second.stdout


REVALIDATE = """
    import json
    import mxdeconv
    from mxdeconv import nd
    x, w = nd.ones((2, 32, 6, 6)), nd.ones((32, 32, 3, 3))
    kw = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=32)
    expected = nd.Deconvolution(x, w, **kw).asnumpy()
    before = mxdeconv.explain(x, w, **kw).splitlines()[4]
    for _ in range(3):
        assert (nd.Deconvolution(x, w, **kw).asnumpy() == expected).all()
    mxdeconv.finish_tuning()
    print(json.dumps([before, mxdeconv.explain(x, w, **kw).splitlines()[4]]))
"""


def test_a_kept_tuned_choice_is_re_validated_now_and_then(tmp_path):
    """One process start in MXDECONV_REVALIDATE_EVERY times a kept tuned
    choice again beside the candidates its tuning ran close to it, and keeps
    the winner; the others take it as it is."""
    _ok(_run(CHOOSE, tmp_path, MXDECONV_TUNE="eager"))
    kept = _ok(_run(REVALIDATE, tmp_path, MXDECONV_REVALIDATE_EVERY="0"))
    before, after = json.loads(kept.stdout)
    assert before.startswith("  check: kept from an earlier tuning on this machine:"), before
    assert after == before
    again = _ok(_run(REVALIDATE, tmp_path, MXDECONV_REVALIDATE_EVERY="1"))
    before, after = json.loads(again.stdout)
    assert ("kept from an earlier tuning on this machine; re-validated on this layer's "
            "later calls beside the") in before
    assert "(one process start in 1)" in before
    assert after.startswith("  check: tuned"), after
    # The winner is kept for the next processes, as any tuning's.
    taken = _ok(_run(CHOOSE, tmp_path))
    assert "kept from an earlier tuning on this machine" in taken.stdout


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no file ownership here")
@pytest.mark.parametrize("writable", ["file", "folder"])
def test_a_choice_from_a_file_others_can_write_is_checked_again(tmp_path, writable):
    """A kept choice is a verdict of the check: taken at its word only from a
    file that nobody but this user can have written."""
    _ok(_run(CHOOSE, tmp_path, MXDECONV_TUNE="eager"))
    target = tmp_path / CACHE if writable == "file" else tmp_path
    target.chmod(target.stat().st_mode | 0o022)
    second = _ok(_run(CHOOSE, tmp_path))
    assert "kept from an earlier tuning on this machine (checked again" in second.stdout


def test_concurrent_processes_keep_the_cache_file_whole(tmp_path):
    code = """
        import sys
        from mxdeconv import nd
        size = int(sys.argv[1])
        nd.Deconvolution(nd.ones((1, 16, size, size)), nd.ones((16, 8, 3, 3)),
                         kernel=(3, 3), num_filter=8)
        """
    env = dict(os.environ, MXDECONV_CACHE_DIR=str(tmp_path))
    runs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(size)],
                             env=env, stderr=subprocess.PIPE, text=True)
            for size in range(3, 9)]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()[-3000:]
    entries = json.loads((tmp_path / CACHE).read_text())["entries"]
    sizes = {json.loads(key)[6][2] for key in entries}
    assert sizes == set(range(3, 9))
    assert not list(tmp_path.glob(".plans-*"))   # no temporary file left


def test_an_empty_cache_dir_keeps_choices_in_memory():
    run = _ok(_run(CHOOSE + "print(mxdeconv.plan_cache_path())", "", MXDECONV_TUNE="eager"))
    assert "tuned:" in run.stdout and run.stdout.splitlines()[-1] == "None"
    assert _warnings(run) == 0


# -- junk in the file -----------------------------------------------------------------
@pytest.mark.parametrize("content", ["{not json", '{"format": 99, "entries": {}}',
                                     '{"format": 1, "entries": []}', '{"format": 2.0}',
                                     "\x00\xff", "[" * 100000 + "]" * 100000,
                                     '{"format": 2, "entries": {"k": 1e999999}}'])
def test_a_corrupt_or_stale_cache_file_is_ignored_with_one_warning(tmp_path, content):
    (tmp_path / CACHE).write_bytes(content.encode("latin-1"))
    run = _run(LAYERS, tmp_path, timeout=60)
    _layers(run)
    assert _warnings(run) == 1 and "not a valid plan cache" in run.stderr
    assert len(json.loads((tmp_path / CACHE).read_text())["entries"]) == 3  # replaced


#: Seeds the file with the layer's entry, then for each (field, value) writes
#: that value into the entry, drops what the process remembers, calls again
#: (the good entry first: the control, which must be taken from the file).
CORRUPT = """
    import json, os, sys, time
    import mxdeconv
    from mxdeconv import nd
    from mxdeconv.onednn import planner as plans
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    path = os.path.join(os.environ["MXDECONV_CACHE_DIR"], "plans-v2.json")
    params = dict(kernel=(3, 3), num_filter=3)
    x, w = nd.ones((1, 4, 5, 5)), nd.ones((4, 3, 3, 3))
    geom = infer_geometry(parse_params(params), x.shape)
    nd.Deconvolution(x, w, **params)
    good = json.load(open(path))
    (key, entry), = good["entries"].items()
    for field, value in [["index", entry["index"]]] + json.load(open(sys.argv[1])):
        bad = dict(entry, **{field: value})
        if field == "index":   # else found by its variant and layouts, whatever its index
            bad.pop("variant")
        with open(path, "w") as stream:   # Infinity and NaN as Python writes them
            json.dump({"format": 2, "entries": {key: bad}}, stream)
        plans.clear_choices()
        mxdeconv.clear_cache()
        begun = time.perf_counter()
        total = float(nd.Deconvolution(x, w, **params).asnumpy().sum())
        seconds = time.perf_counter() - begun
        plan = plans.forward_plan(geom, "float32", False, False)
        kept = json.load(open(path))["entries"][key]
        print(json.dumps({"case": [field, repr(value)], "sum": total, "seconds": seconds,
                          "threads": plan.threads, "how": plan.choice.how,
                          "caller": mxdeconv.get_num_threads(),
                          "rewritten": plans._kept_choice(kept, geom) is not None}))
    """

_INF, _NAN = float("inf"), float("nan")
BAD_FIELDS = {
    "threads": [100000, 2**31 - 1, 1024, 1e12, -1, 0, True, "2", 2.0, None, _INF],
    "index": [_INF, -1, 10**9, True, 1.0, "0", None, 10**100],
    "impl": [None, 7, "x" * 100000, "no:such:kernel"],
    "tuned": [None, 1, "true", 0.0],
    "measured": ["junk", {"a": 1}, [["c", _INF, 1e-6, "v"]], [["c", 1, _NAN, "v"]],
                 [["c", 1, _INF, "v"]], [["c", 1, -1.0, "v"]], [["c", 1, 1e-6]],
                 [["c", True, 1e-6, "v"]], [[1, 1, 1e-6, "v"]], [["c" * 10**5, 1, 1e-6, "v"]],
                 [["c", 1, 1e-6, "v"]] * 100000],
}


@pytest.mark.parametrize("field", sorted(BAD_FIELDS))
def test_a_junk_field_in_an_entry_is_tuned_again(tmp_path, field):
    """threads=100000 crashed the next process, 2**31-1 hung it, 1024 ran 600x
    slower on 1026 OS threads; Infinity or 1e12 raised OverflowError on every
    call: now the entry is refused, the layer tuned again and the entry replaced."""
    cases = [[field, value] for value in BAD_FIELDS[field]]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "cache").mkdir()
    run = _ok(_run(CORRUPT, tmp_path / "cache", args=[str(tmp_path / "cases.json")],
                   OMP_NUM_THREADS="2",    # so 1024 is never the caller's count
                   MXDECONV_TUNE="eager"))  # each entry tuned at once
    control, *results = [json.loads(line) for line in run.stdout.splitlines()]
    assert control["how"] == "kept from an earlier tuning on this machine", control
    assert len(results) == len(cases)
    for result in results:
        assert result["sum"] == 2700.0, result
        assert result["threads"] in (1, result["caller"]), result
        assert result["how"] != "kept from an earlier tuning on this machine", result
        assert result["rewritten"], result
        assert result["seconds"] < 30, result   # generous: a tiny layer tunes in ms
    assert _warnings(run) == 0   # a refused entry is tuned again, silently


#: Where an entry says its candidate is found (its variant and layouts): a
#: shortcut, not a verdict.  Junk there, or a place holding another kernel,
#: leaves the entry's choice found by its index.
BAD_LOCATORS = {
    "variant": [None, "nchw", [], [1, 2, 3, 4, 5], ["x" * 100000, "any", True, False, ""],
                ["no_such_family", "any", True, False, ""], ["any", "any", 1, 0, ""],
                ["any", "plain", False, False, "conv:bwd_data+"] * 2,
                ["channels_last", "plain", False, False, "conv:bwd_data+"]],
    "layouts": [-1, None, ["a"], "x" * 100000, "(('nchw', (1, 4, 5, 5), 'f32', 400),)"],
}


@pytest.mark.parametrize("field", sorted(BAD_LOCATORS))
def test_a_junk_locator_in_an_entry_falls_back_to_the_index(tmp_path, field):
    cases = [[field, value] for value in BAD_LOCATORS[field]]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "cache").mkdir()
    run = _ok(_run(CORRUPT, tmp_path / "cache", args=[str(tmp_path / "cases.json")],
                   OMP_NUM_THREADS="2", MXDECONV_TUNE="eager"))
    for result in (json.loads(line) for line in run.stdout.splitlines()):
        assert result["sum"] == 2700.0, result
        assert result["how"] == "kept from an earlier tuning on this machine", result
    assert _warnings(run) == 0


def test_a_kept_choice_is_built_from_its_variant_alone(tmp_path):
    """A new process with a filled cache enumerates only the kept candidate's
    variant (each oneDNN descriptor before it costs up to a millisecond)."""
    script = """
        import json
        import mxdeconv
        from mxdeconv import nd
        from mxdeconv.onednn._loader import extension as ops
        real, calls = ops.forward_candidates, []
        def spy(*args, **kwargs):
            calls.append(kwargs.get("variant"))
            return real(*args, **kwargs)
        ops.forward_candidates = spy
        params = dict(kernel=(3, 3), num_filter=3)
        x, w = nd.ones((1, 4, 5, 5)), nd.ones((4, 3, 3, 3))
        total = float(nd.Deconvolution(x, w, **params).asnumpy().sum())
        print(json.dumps({"sum": total, "calls": calls}))
    """
    first = _ok(_run(script, tmp_path, MXDECONV_TUNE="eager"))
    assert json.loads(first.stdout.splitlines()[-1])["calls"][0] is None  # chose: all of them
    entry, = json.loads((tmp_path / CACHE).read_text())["entries"].values()
    assert isinstance(entry["variant"], list) and isinstance(entry["layouts"], str)
    again = json.loads(_ok(_run(script, tmp_path, MXDECONV_TUNE="eager")).stdout.splitlines()[-1])
    assert again["sum"] == 2700.0
    assert again["calls"] == [entry["variant"]], again


# -- files that are not files ---------------------------------------------------------
def _fifo(path):
    os.mkfifo(path)


def _device(path):
    os.symlink("/dev/zero", path)


def _oversized(path):
    with open(path, "wb") as stream:   # sparse: costs no disk
        stream.truncate(plan_store.MAX_BYTES + 1)


@pytest.mark.parametrize("make", [_fifo, _device, _oversized])
def test_a_cache_that_is_no_regular_bounded_file_is_never_read(tmp_path, make):
    """A FIFO blocked the first call forever, /dev/zero raised MemoryError."""
    make(tmp_path / CACHE)
    run = _run(LAYERS, tmp_path, timeout=60)
    _layers(run)
    assert _warnings(run) == 1 and "cannot be read" in run.stderr
    assert not list(tmp_path.glob(".plans-*"))


# -- directories that cannot be used --------------------------------------------------
def _unusable_directories(tmp_path):
    (tmp_path / "afile").write_text("")
    yield "name too long", tmp_path / ("x" * 300)
    yield "under a file", tmp_path / "afile" / "cache"
    yield "procfs", "/proc/self"


def test_an_unusable_cache_directory_warns_once_and_never_waits(tmp_path):
    """ENAMETOOLONG and PermissionError used to raise on every call; /proc/self
    waited out the lock timeout on every new layer."""
    for name, directory in _unusable_directories(tmp_path):
        run = _run(LAYERS, directory, timeout=60, MXDECONV_TUNE="eager")  # written at once
        results = _layers(run)
        assert _warnings(run) == 1, (name, run.stderr[-2000:])
        assert max(r["seconds"] for r in results) < 8, name   # /proc/self: 10 s each
        assert results[-1]["path"] is None, name   # memory only, as plan_cache_path says


@pytest.mark.skipif(os.geteuid() == 0, reason="root enters any directory (the cases above "
                                              "fail for root too)")
def test_a_cache_directory_that_cannot_be_entered(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    try:
        run = _run(LAYERS, locked / "cache", timeout=60)
        _layers(run)
        assert _warnings(run) == 1 and "PermissionError" in run.stderr
    finally:
        locked.chmod(0o700)


def test_first_choices_are_written_once_at_exit_and_an_unusable_directory_warns_once(
        tmp_path):
    run = _ok(_run(LAYERS, tmp_path))
    assert len(json.loads((tmp_path / CACHE).read_text())["entries"]) == 3
    for name, directory in _unusable_directories(tmp_path):
        run = _run(LAYERS, directory, timeout=60)
        _layers(run)
        assert _warnings(run) == 1, (name, run.stderr[-2000:])


def test_a_lock_held_by_a_stuck_process_costs_one_short_wait(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time, filelock
            lock = filelock.FileLock({str(tmp_path / (CACHE + ".lock"))!r})
            lock.acquire()
            print("held", flush=True)
            time.sleep(120)
            """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        counting = textwrap.dedent("""
            import filelock
            attempts = []
            class Counting(filelock.FileLock):
                def acquire(self, *args, **kwargs):
                    attempts.append(self.timeout)
                    return super().acquire(*args, **kwargs)
            filelock.FileLock = Counting
            """) + textwrap.dedent(LAYERS) + "\nprint(json.dumps({'attempts': attempts}))\n"
        run = _run(counting, tmp_path, timeout=60, MXDECONV_TUNE="eager")  # written at once
        lines = _ok(run).stdout.splitlines()
        attempts = json.loads(lines[-1])["attempts"]
        run.stdout = "\n".join(lines[:-1])
        results = _layers(run)
    finally:
        holder.kill()
        holder.wait()
    assert attempts == [plan_store.LOCK_SECONDS]   # one try, then memory only
    assert plan_store.LOCK_SECONDS <= 5
    assert results[0]["seconds"] < 12   # generous: LOCK_SECONDS and the tuning
    assert sum(r["seconds"] for r in results) < 20   # was 10 s for every layer
    assert _warnings(run) == 1 and "could not be written" in run.stderr


# -- locating the directory -----------------------------------------------------------
NO_HOME = textwrap.dedent("""
    import platformdirs
    def no_home(*args, **kwargs):
        raise RuntimeError("could not determine the home directory")
    platformdirs.user_cache_dir = no_home
    """)


def test_no_home_directory_never_fails_the_import(tmp_path):
    """platformdirs raised RuntimeError at import when HOME was unset and the
    uid had no passwd entry (simulated here; the real case is tested below)."""
    run = _run(NO_HOME + textwrap.dedent(LAYERS), None, timeout=60, cwd=tmp_path)
    results = _layers(run)
    assert results[0]["path"] is None and _warnings(run) == 1
    assert "no cache directory" in run.stderr
    assert not list(tmp_path.iterdir())


def test_no_home_directory_for_real(tmp_path):
    """HOME unset and a uid without a passwd entry (a user namespace)."""
    command = ["unshare", "--user", "--map-user=12345", "--map-group=12345", "true"]
    if shutil.which("unshare") is None or subprocess.run(command,
                                                         capture_output=True).returncode:
        pytest.skip("unshare --user is not available here")
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("HOME", "XDG_CACHE_HOME", "MXDECONV_CACHE_DIR")}
    code = textwrap.dedent("""
        import mxdeconv
        from mxdeconv import nd
        print(mxdeconv.plan_cache_path())
        print(float(nd.Deconvolution(nd.ones((1, 4, 5, 5)), nd.ones((4, 3, 3, 3)),
                                     kernel=(3, 3), num_filter=3).asnumpy().sum()))
        """)
    run = _ok(subprocess.run(command[:-1] + [sys.executable, "-c", code], env=environment,
                             capture_output=True, text=True, timeout=60, cwd=tmp_path))
    assert run.stdout.split() == ["None", "2700.0"]


def test_a_tilde_is_expanded(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    run = _run(LAYERS, "~/plans", timeout=60, cwd=work, HOME=str(home))
    results = _layers(run)
    assert results[0]["path"] == str(home / "plans" / CACHE)
    assert len(json.loads((home / "plans" / CACHE).read_text())["entries"]) == 3
    assert not list(work.iterdir())   # no folder named '~'
    # No such home to expand it with: memory only, never a folder named '~...'.
    run = _run(LAYERS, "~no-such-user-of-mxdeconv/plans", timeout=60, cwd=work)
    assert _layers(run)[0]["path"] is None and _warnings(run) == 1
    assert not list(work.iterdir())


# -- what a writer leaves --------------------------------------------------------------
def test_a_writer_removes_stale_temporary_files_of_its_format_only(tmp_path):
    """A writer killed mid-write left its temporary file (as big as the cache)."""
    stale = [tmp_path / ".plans-v2-killed.json",
             tmp_path / ".plans-ab_12xyz.json"]   # an earlier version's name
    for path in stale:
        path.write_text("{" * 1000)
    others = [tmp_path / ".plans-v3-other.json", tmp_path / "notes.json",
              tmp_path / ".plans-v3-x_1.json"]
    for other in others:
        other.write_text("{}")
    store = plan_store.PlanStore(tmp_path / CACHE)
    store.put("key", {"index": 0})
    assert not any(path.exists() for path in stale)
    assert all(other.exists() for other in others)
    assert json.loads((tmp_path / CACHE).read_text()) == {
        "format": 2, "entries": {"key": {"index": 0}}}


def test_writes_stop_after_the_first_failure(tmp_path):
    directory = tmp_path / "cache"
    store = plan_store.PlanStore(directory / CACHE)
    directory.write_text("")   # a file where the directory should be
    with pytest.warns(RuntimeWarning, match="cannot be read"):
        store.put("a", {"index": 0})
    directory.unlink()
    store.put("b", {"index": 1})   # no warning, and no attempt any more
    assert not directory.exists()
    assert store.get("a") == {"index": 0} and store.get("b") == {"index": 1}
    assert store.path is None


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   NotImplementedError("flock: ENOSYS (filelock 3.x)"),
                                   ValueError("anything else")])
def test_writes_stop_after_the_first_write_failure(tmp_path, monkeypatch, error):
    """The file reads, but a write fails: one warning (never an error, even with
    warnings turned into errors), no write attempted again, choices in memory."""
    attempts = []

    def failing(path, *args, **kwargs):
        attempts.append(path)
        raise error

    monkeypatch.setattr(plan_store, "replace_atomically", failing)
    store = plan_store.PlanStore(tmp_path / CACHE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.put("a", {"index": 0})
        store.put("b", {"index": 1})
    assert len(attempts) == 1 and store.path is None
    assert store.get("a") == {"index": 0} and store.get("b") == {"index": 1}
    fresh = plan_store.PlanStore(tmp_path / CACHE)
    monkeypatch.setattr(plan_store, "replace_atomically", failing)
    with pytest.warns(RuntimeWarning, match="could not be written"):
        fresh.put("c", {"index": 2})


def test_the_trim_is_linear_and_keeps_the_newest():
    """Popping the oldest entry one at a time was quadratic: a 120k-entry file
    took 4.8 s to take one more layer, a 300k one 42 s."""
    for count in (120_000, 300_000):
        entries = {str(i): {"index": i} for i in range(count)}
        begun = time.perf_counter()
        kept = plan_store.trimmed(entries, plan_store.MAX_ENTRIES)
        assert time.perf_counter() - begun < 1.0   # about 10 ms; quadratic took seconds
        assert list(kept) == [str(i) for i in range(count - plan_store.MAX_ENTRIES, count)]
    small = {"a": {}, "b": {}}
    assert plan_store.trimmed(small, 5) is small


def test_a_full_cache_takes_a_new_layer_in_bounds(tmp_path):
    path = tmp_path / CACHE
    entries = {f"old{i}": {"index": i} for i in range(120_000)}
    path.write_text(json.dumps({"format": 2, "entries": entries}))
    store = plan_store.PlanStore(path)
    store.put("old5", {"index": -5})   # an updated entry becomes the newest
    store.put("new", {"index": 1})
    kept = json.loads(path.read_text())["entries"]
    assert len(kept) == plan_store.MAX_ENTRIES
    assert list(kept)[-2:] == ["old5", "new"]


def test_the_file_written_never_exceeds_what_a_reader_accepts(tmp_path):
    entries = {f"k{i}": {"text": "x" * 100} for i in range(100)}
    text = plan_store._serialized(entries, limit_bytes=3000)
    assert len(text) <= 3000
    kept = plan_store._parse(text.encode())
    assert list(kept) == list(entries)[-len(kept):] and len(kept) >= 20
