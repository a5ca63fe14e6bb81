#!/usr/bin/env bash
# Build the compiled modules with AddressSanitizer + UndefinedBehaviorSanitizer
# and run the test suite under it.
#
#   scripts/qa/sanitize.sh                   # whole suite
#   scripts/qa/sanitize.sh tests/ops/test_errors.py -k alias   # any pytest arguments
#
# The build happens in a copy of the sources (build/sanitize/, or
# $MXDECONV_SANITIZE_DIR), so the normal in-place extension of this checkout is
# left alone.  Python itself is not instrumented, so the ASan runtime must be
# loaded first (LD_PRELOAD); leak detection is off because CPython keeps its
# arenas and interned objects until exit.  oneDNN's JIT-generated kernels are
# not instrumented either (ASan sees them as plain code and checks nothing in
# them), which is fine: what is checked is every load and store of the four
# compiled modules' C (_core/buffers.c, _core/_ndbase.c, onednn/_ops.c, ops/_exec.c).
# Every ASan/UBSan report is written to $DIR/logs/ and makes the script fail.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${MXDECONV_SANITIZE_DIR:-$ROOT/build/sanitize}"
LOGS="$DIR/logs"
CC="${CC:-gcc}"

rm -rf "$DIR/src" "$LOGS"
mkdir -p "$DIR/src" "$LOGS"
# The checkout's files, tracked or not, without ignored ones (no built extension,
# no caches, nothing under build/).
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | \
    xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -C "$DIR/src" -xf -

echo "== building the extension with -fsanitize=address,undefined in $DIR/src"
(cd "$DIR/src" && MXDECONV_SANITIZE=1 CC="$CC" python setup.py -q build_ext --inplace --force \
    > "$DIR/build.log" 2>&1) || { tail -40 "$DIR/build.log"; exit 1; }
# Every compiled module (_core.buffers, _core._ndbase, onednn._ops, ops._exec)
# must be the instrumented one.
mapfile -t SOS < <(find "$DIR/src/mxdeconv" -name '*.so' | sort)
if [ "${#SOS[@]}" -eq 0 ]; then
    echo "error: the build left no extension under $DIR/src/mxdeconv" >&2
    exit 1
fi
for SO in "${SOS[@]}"; do
    if [[ "$(ldd "$SO")" != *libasan* ]]; then
        echo "error: $SO is not linked against libasan" >&2
        exit 1
    fi
done

LIBASAN="$($CC -print-file-name=libasan.so)"
export LD_PRELOAD="$LIBASAN"
# detect_leaks=0: CPython's own allocations would all count as leaks.
# oneDNN JIT: ASan's default allocator and signal handlers are compatible with
# Xbyak's mmap'ed code; keep ASan from intercepting SIGSEGV that oneDNN does not
# raise anyway, and report instead of aborting so that every report is logged.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=0:abort_on_error=0:handle_segv=1:allocator_may_return_null=1:detect_stack_use_after_return=0:log_path=$LOGS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=0:log_path=$LOGS/ubsan"
export PYTHONMALLOC=malloc   # let ASan see every Python-level allocation too
export MXDECONV_FUZZ_EXAMPLES="${MXDECONV_FUZZ_EXAMPLES:-200}"

echo "== pytest under ASan/UBSan (LD_PRELOAD=$LIBASAN)"
cd "$DIR/src"
status=0
python -c "import mxdeconv, mxdeconv.onednn._ops as o; print(o.__file__, mxdeconv.runtime_info())"
python -m pytest -q -p no:cacheprovider "${@:-tests}" || status=$?

reports=$(ls "$LOGS" 2>/dev/null | wc -l)
if [ "$reports" -ne 0 ]; then
    echo "== $reports sanitizer report file(s) in $LOGS:" >&2
    for f in "$LOGS"/*; do echo "--- $f" >&2; head -60 "$f" >&2; done
    exit 1
fi
echo "== sanitizer reports: none (pytest exit status $status)"
exit "$status"
