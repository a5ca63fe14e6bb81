"""MXNet Gluon's containers: :class:`Sequential` and :class:`HybridSequential`,
blocks run one after another.  They sit above the layers: in inference a
transposed convolution followed by ``BatchNorm`` runs as one Deconvolution
(:mod:`mxdeconv.gluon.folding`, which builds on both layers)."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from mxdeconv.ndarray.ndarray import NDArray

from ._args import _is_int, _type_error
from .block import Block, HybridBlock, _indent
from .folding import foldable, folded_forward

__all__ = ["HybridSequential", "Sequential"]


class Sequential(Block):
    """MXNet Gluon's ``nn.Sequential``: layers run one after another, their
    parameters saved and loaded under MXNet's structural names (``0.weight``,
    ``0.bias``, ``1.weight``, ...), so that MXNet's ``net.save_parameters``
    files of a sequential network load as they are.

    >>> from mxdeconv import gluon, nd
    >>> net = gluon.HybridSequential()
    >>> with net.name_scope():
    ...     net.add(gluon.Conv2DTranspose(4, 4, in_channels=2, activation="relu"),
    ...             gluon.Conv2DTranspose(1, 4, strides=2, padding=1, in_channels=4))
    >>> net.initialize()
    >>> net(nd.ones((1, 2, 1, 1))).shape
    (1, 1, 8, 8)
    >>> [name.split("_", 1)[1] for name in net.collect_params()]
    ['conv0_weight', 'conv0_bias', 'conv1_weight', 'conv1_bias']
    >>> len(net), net[1]
    (2, Conv2DTranspose(4 -> 1, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)))
    """

    def __init__(self, prefix: Optional[str] = None, params: Any = None) -> None:
        super().__init__(prefix, params)
        # Folded Deconvolution + BatchNorm pairs (mxdeconv.gluon.folding), by layer.
        self._folded: Dict[int, Tuple[Any, ...]] = {}

    def add(self, *blocks: Block) -> None:
        """Append ``blocks`` (layers or containers), all checked first."""
        for block in blocks:
            if not isinstance(block, Block):
                raise _type_error("block", "a Gluon Block (a layer or a container)", block)
        for block in blocks:
            self.register_child(block)

    def forward(self, x: Any, *args: Any) -> Any:
        """Each block on the previous one's output (MXNet's: a tuple output
        feeds its first item as ``x`` and the rest as more arguments).  With
        :mod:`mxdeconv.gluon.folding` turned on, in inference a transposed
        convolution followed by ``BatchNorm`` runs as one Deconvolution."""
        children = list(self._children.values())
        index = 0
        while index < len(children):
            block = children[index]
            if (not args and index + 1 < len(children) and isinstance(x, NDArray)
                    and foldable(block, children[index + 1])):
                # foldable() checked the pair's types (a _ConvTranspose, a BatchNorm).
                x = folded_forward(block, children[index + 1], x,  # type: ignore[arg-type]
                                   self._folded)
                index += 2
            else:
                x = block(x, *args)
                index += 1
            args = ()
            if isinstance(x, (tuple, list)):
                args = tuple(x[1:])
                x = x[0]
        if args:
            x = (x,) + tuple(args)
        return x

    def __getitem__(self, key: Any) -> Any:
        """A block by index, or a new container of the same class holding a slice."""
        layers = list(self._children.values())
        if isinstance(key, slice):
            net = type(self)(prefix=self.prefix)
            net.add(*layers[key])
            return net
        if not _is_int(key):
            raise _type_error("key", "an int or a slice", key)
        return layers[key]

    def __len__(self) -> int:
        return len(self._children)

    def __repr__(self) -> str:
        lines = [f"  ({key}): {_indent(repr(child), 2)}"
                 for key, child in self._children.items()]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


class HybridSequential(Sequential, HybridBlock):
    """MXNet Gluon's ``nn.HybridSequential``: :class:`Sequential` (``hybridize()``
    is accepted; every call is imperative).

    >>> from mxdeconv import gluon
    >>> net = gluon.HybridSequential()
    >>> net.add(gluon.Conv1DTranspose(2, 3, in_channels=1))
    >>> net.hybridize()
    >>> net
    HybridSequential(
      (0): Conv1DTranspose(1 -> 2, kernel_size=(3,), stride=(1,))
    )
    """
