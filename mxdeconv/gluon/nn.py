"""MXNet's ``gluon.nn``: the layer namespace a port imports as
``from mxdeconv.gluon import nn`` (MXNet: ``from mxnet.gluon import nn``).

The transposed convolutions (:mod:`mxdeconv.gluon.layers`), the containers
and the ``Block`` / ``HybridBlock`` bases for custom blocks
(:mod:`mxdeconv.gluon.block`), :class:`BatchNorm`
(:mod:`mxdeconv.gluon.batchnorm`) and the parameter-free layers
(:mod:`mxdeconv.gluon.basic_layers`), each defined once and gathered here.

>>> from mxdeconv import nd
>>> from mxdeconv.gluon import nn
>>> net = nn.HybridSequential()
>>> with net.name_scope():
...     net.add(nn.Conv2DTranspose(4, 4, strides=1, padding=0, in_channels=8, use_bias=False),
...             nn.BatchNorm(), nn.Activation("relu"))
>>> net.initialize()
>>> net(nd.ones((2, 8, 1, 1))).shape
(2, 4, 4, 4)
"""
from .basic_layers import (
    ELU, GELU, SELU, Activation, Dropout, Flatten, HybridLambda, Identity, Lambda, LeakyReLU,
    PReLU, Swish)
from .batchnorm import BatchNorm
from .block import Block, HybridBlock
from .sequential import HybridSequential, Sequential
from .layers import Conv1DTranspose, Conv2DTranspose, Conv3DTranspose

__all__ = ["Activation", "BatchNorm", "Block", "Conv1DTranspose", "Conv2DTranspose",
           "Conv3DTranspose", "Dropout", "ELU", "Flatten", "GELU", "HybridBlock",
           "HybridLambda", "HybridSequential", "Identity", "Lambda", "LeakyReLU", "PReLU",
           "SELU", "Sequential", "Swish"]
