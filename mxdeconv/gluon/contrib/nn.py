"""MXNet 1.9.1's ``gluon.contrib.nn``: :class:`~mxdeconv.gluon.nn.Identity`
(the same class as ``gluon.nn.Identity``).

>>> from mxdeconv.gluon.contrib.nn import Identity
>>> from mxdeconv.gluon import nn
>>> Identity is nn.Identity
True
"""
from ..basic_layers import Identity

__all__ = ["Identity"]
