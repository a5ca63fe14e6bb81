"""Errors shared by every module."""


class MXNetError(ValueError):
    """Raised for every invalid operator argument, as MXNet raises ``MXNetError``.

    It subclasses :class:`ValueError` so that generic ``except ValueError``
    handlers written for NumPy-style code still catch it.
    """


class Float16OverflowWarning(RuntimeWarning):
    """A float16 result held a finite value beyond float16's range (65504).

    The NumPy fallback computes float16 in float32 and rounds the result to
    float16: such values are stored as +-inf, and this warning says so before
    anything is written.  ``warnings.simplefilter("error",
    Float16OverflowWarning)`` turns it into an exception that leaves every
    output untouched.
    """
