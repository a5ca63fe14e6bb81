"""MXNet 1.9.1's ``gluon.contrib``: only ``contrib.nn.Identity``, which
skip-connection models import from there (``from mxnet.gluon.contrib.nn
import Identity``)."""
from . import nn

__all__ = ["nn"]
