"""oneDNN's GEMM kernels made before a layer needs them, on an idle core.

A process's first single-precision GEMM in oneDNN generates its kernels, once
(``std::call_once``): about 25 ms on AVX-512, whoever calls it first.  A new
layer pays that on its first call wherever a GEMM plan runs (mxdeconv's
im2col and scatter plans, oneDNN's gemm convolutions): U-Net 512 -> 256's
first training step took 140 ms, and 107 ms with the kernels already made.

So loading the extension starts one thread that makes them
(:func:`mxdeconv.onednn._ops.set_gemm_up`, the GIL released) while the
process imports and sets up on its other core.  A GEMM called meanwhile
waits for them inside oneDNN, as it would have made them itself.  Not
started where the process may use one CPU only, or runs one thread
(``OMP_NUM_THREADS=1``, as Dask and Ray set for their workers): there it
would take the caller's core.  A fork waits for it to end: a child forked
while it ran would find the kernels half made, marked in progress by a
thread the child does not have, and its first GEMM would wait forever.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional

from mxdeconv._core.cpus import usable_cpus


class GemmSetup:
    """The thread that makes oneDNN's GEMM kernels (``set_up``), started once."""

    def __init__(self, set_up: Callable[[], Any]) -> None:
        self._set_up = set_up
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def start(self, threads: int) -> bool:
        """Start the thread, unless the process runs ``threads`` < 2 or may use
        one CPU only; whether it started."""
        if self._thread is not None or threads < 2 or usable_cpus().count < 2:
            return False
        self._thread = threading.Thread(target=self._run, name="mxdeconv-gemm-setup",
                                        daemon=False)
        os.register_at_fork(before=self.wait)
        self._thread.start()
        return True

    @property
    def started(self) -> bool:
        """Whether the thread started (the kernels made, or being made)."""
        return self._thread is not None

    def _run(self) -> None:
        try:
            self._set_up()
        except Exception as error:  # the first real GEMM reports its own failure
            self.error = error

    def wait(self) -> None:
        """Until the kernels are made (at once if the thread never started)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
