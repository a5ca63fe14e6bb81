"""Errors shared by every module."""


class MXNetError(ValueError):
    """Raised for every invalid operator argument, as MXNet raises ``MXNetError``.

    It subclasses :class:`ValueError` so that generic ``except ValueError``
    handlers written for NumPy-style code still catch it.
    """


class OneDNNMemoryError(MemoryError):
    """oneDNN ran out of memory (``dnnl_out_of_memory``), as pyarrow's
    ``check_status`` maps an out-of-memory status to ``ArrowMemoryError``.

    It says nothing about the kernel or the arguments: the planner takes it as
    no verdict on a candidate being checked, and a call passes it on.
    """


class Float16OverflowWarning(RuntimeWarning):
    """A float16 result held a finite value beyond float16's range (65504).

    The NumPy fallback computes float16 in float32 and rounds the result to
    float16: such values are stored as +-inf, and this warning says so before
    anything is written.  ``warnings.simplefilter("error",
    Float16OverflowWarning)`` turns it into an exception that leaves every
    output untouched.
    """


class KernelDefectWarning(RuntimeWarning):
    """A oneDNN kernel gave a wrong result on a layer's geometry and was replaced.

    The planner checks every new oneDNN plan once, on the real geometry,
    against an independent computation before its result reaches anyone (see
    :mod:`mxdeconv.onednn.kernel_check`).  This warning names the rejected kernel and
    the geometry; the call itself runs on a kernel that agreed (or on the
    NumPy path when none did), so results stay correct.  It is raised once
    per kernel and geometry.
    """
