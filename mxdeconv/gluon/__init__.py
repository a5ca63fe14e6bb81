"""MXNet 1.9.1's Gluon: the layers of ``gluon.nn`` (:mod:`mxdeconv.gluon.nn`:
``Conv1DTranspose``, ``Conv2DTranspose``, ``Conv3DTranspose``, ``BatchNorm``,
``Activation``, ``Sequential``, ``Block`` / ``HybridBlock``...), parameters,
``Trainer`` and ``loss``.  The transposed convolutions, the containers and the
initializers are reachable here too (``gluon.Conv2DTranspose``), as before
``gluon.nn`` existed.

>>> import numpy as np
>>> from mxdeconv import gluon, nd
>>> layer = gluon.Conv2DTranspose(8, kernel_size=4, strides=2, padding=1, in_channels=16)
>>> layer.initialize()
>>> layer(nd.ones((1, 16, 5, 5))).shape
(1, 8, 10, 10)
>>> layer.weight.shape        # MXNet's weight: (C_in, channels // groups, *k)
(16, 8, 4, 4)

Initialisation follows MXNet 1.9.1 Gluon (line numbers of the 1.9.1 release,
``mxnet==1.9.1`` on PyPI):

* ``python/mxnet/gluon/block.py:640``:
  ``def initialize(self, init=initializer.Uniform(), ...)``;
* ``python/mxnet/initializer.py:506``: ``Uniform.__init__(self, scale=0.07)``,
  values in ``[-scale, scale]``;
* ``python/mxnet/gluon/parameter.py:463``:
  ``init = default_init if self.init is None else self.init``;
* ``python/mxnet/gluon/nn/conv_layers.py:590-593``: ``Conv2DTranspose`` (and the
  1-D/3-D ones) take ``weight_initializer=None, bias_initializer='zeros'``.

So a default layer has weights uniform in ``[-0.07, 0.07]`` and zero biases.
Random values come from NumPy's global generator (``np.random.seed`` makes them
repeatable); they cannot match MXNet's generator value for value, only in
distribution (``tests/test_gluon.py`` compares with a layer initialised by MXNet).

Parameters save to and load from MXNet's binary ``.params`` files (see
:mod:`mxdeconv.io.ndarray_file`) and ``.npz`` files of NumPy arrays, keyed
``weight`` and ``bias`` (the names MXNet's ``save_parameters`` uses for a
lone layer); :meth:`~_ConvTranspose.load_parameters` also accepts MXNet's
prefixed names such as ``conv0_weight`` and ``arg:conv0_weight``.
"""

from mxdeconv.initializer import (Constant, Initializer, MSRAPrelu, Mixed, Normal, One, Uniform,
                                  Xavier, Zero)
from .parameter import Parameter, ParameterDict
from .block import Block, HybridBlock
from .sequential import HybridSequential, Sequential
from .layers import Conv1DTranspose, Conv2DTranspose, Conv3DTranspose
# MXNet's gluon.nn: every layer (the ones above, BatchNorm, Activation, ...);
# gluon.contrib.nn.Identity, where MXNet 1.9.1 keeps it.
from . import contrib, nn
# Training: MXNet's gluon.Trainer and gluon.loss, with mx.optimizer and
# mx.lr_scheduler (also reachable as mxdeconv.optimizer and mxdeconv.lr_scheduler).
from . import loss, lr_scheduler, optimizer
from .trainer import Trainer

__all__ = ["Block", "Constant", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
           "HybridBlock", "HybridSequential", "Initializer", "MSRAPrelu", "Mixed", "Normal",
           "One", "Parameter", "ParameterDict", "Sequential", "Trainer", "Uniform", "Xavier",
           "Zero", "contrib", "loss", "lr_scheduler", "nn", "optimizer"]

# Still mxdeconv.gluon.X in reprs, error messages (tests/gluon/test_gluon_errors.py) and
# pickles, as before the split into modules.  doctest then finds the class docstrings
# here; examples in method docstrings need the defining module's __test__.
# (The initializers are mxdeconv.initializer's, MXNet's mx.init, and stay named so.)
for _cls in (Block, Conv1DTranspose, Conv2DTranspose, Conv3DTranspose, HybridBlock,
             HybridSequential, Parameter, ParameterDict, Sequential, Trainer):
    _cls.__module__ = __name__
del _cls
