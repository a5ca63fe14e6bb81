"""Errors shared by every module."""


class MXNetError(ValueError):
    """Raised for every invalid operator argument, as MXNet raises ``MXNetError``.

    It subclasses :class:`ValueError` so that generic ``except ValueError``
    handlers written for NumPy-style code still catch it.
    """
