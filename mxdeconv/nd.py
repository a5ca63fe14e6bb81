"""Imperative operators in MXNet's ``mx.nd`` style.

>>> import numpy as np
>>> from mxdeconv import nd
>>> x = nd.array(np.ones((1, 2, 3, 3)))
>>> w = nd.array(np.ones((2, 4, 3, 3)))
>>> y = nd.Deconvolution(x, w, kernel=(3, 3), stride=(2, 2), num_filter=4)
>>> y.shape
(1, 4, 7, 7)
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

from .deconvolution import deconvolution, deconvolution_backward
from .elementwise import add, multiply, relu
from .ndarray import (NDArray, array, empty, from_dlpack, ones, to_dlpack_for_read,
                      to_dlpack_for_write, zeros)

__all__ = ["Deconvolution", "Deconvolution_backward", "NDArray", "add", "array", "empty",
           "from_dlpack", "multiply", "ones", "relu", "to_dlpack_for_read",
           "to_dlpack_for_write", "zeros"]


def Deconvolution(data: Any, weight: Any, bias: Any = None, out: Optional[NDArray] = None,
                  req: str = "write", train: Optional[bool] = None,
                  **params: Any) -> Optional[NDArray]:
    """Transposed convolution with MXNet 1.9.1's ``Deconvolution`` semantics.

    Args:
        data: ``(N, C_in, *spatial)`` NDArray or NumPy array (NumPy is copied).
        weight: ``(C_in, num_filter // num_group, *kernel)``.
        bias: ``(num_filter,)`` when ``no_bias=False``, else None.
        out: optional NDArray of the output shape to write (or add) into.
        req: ``"write"``, ``"inplace"`` (same as write), ``"add"`` (accumulate
            into ``out``) or ``"null"`` (compute nothing, return ``out``).
        train: training mode for this call; None follows
            :func:`mxdeconv.autograd.is_training`.
        **params: MXNet's ``kernel``, ``stride``, ``dilate``, ``pad``, ``adj``,
            ``target_shape``, ``num_filter``, ``num_group``, ``no_bias``,
            ``layout``, ``workspace`` (ignored).

    Output size per spatial dim: ``stride*(in-1) + dilate*(k-1) + 1 - 2*pad + adj``
    (``pad``/``adj`` inferred from ``target_shape`` when it is set).  The result
    may hold a oneDNN blocked layout (see ``NDArray.layout``); reading it
    turns it to the default layout.

    Inside :func:`mxdeconv.autograd.record` the call is recorded for
    ``backward()`` when an input needs a gradient (with ``out=`` and
    ``req="add"`` only the new term is differentiated: the previous contents
    of ``out`` count as a constant).

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> y = nd.Deconvolution(np.ones((1, 1, 2)), np.ones((1, 1, 2)), kernel=(2,),
    ...                      stride=(2,), num_filter=1)
    >>> y.asnumpy()
    array([[[1., 1., 1., 1.]]])
    """
    return deconvolution(data, weight, bias, out=out, req=req, train=train, **params)


def Deconvolution_backward(out_grad: Any, data: Any, weight: Any, bias: Any = None,
                           req: Union[str, Sequence[str]] = "write",
                           grads: Optional[Sequence[Optional[NDArray]]] = None,
                           **params: Any) -> Tuple[Optional[NDArray], ...]:
    """Gradients of :func:`Deconvolution`: ``(data_grad, weight_grad, bias_grad)``.

    Args:
        out_grad: gradient of the loss with respect to the output.
        data, weight, bias: the forward inputs (bias only tells its shape).
        req: one string or three, for data, weight and bias: ``"write"``,
            ``"inplace"``, ``"add"`` (accumulate into the array in ``grads``)
            or ``"null"`` (not computed; None returned).
        grads: three NDArrays or Nones to write the gradients into; required
            where req is ``"add"``.
        **params: the forward's parameters.

    ``bias_grad`` is None when ``no_bias`` is True.  Weight gradients come
    back in the default layout (optimizer code reads plain memory).

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> dx, dw, db = nd.Deconvolution_backward(np.ones((1, 1, 4)), np.ones((1, 1, 2)),
    ...     np.ones((1, 1, 2)), np.zeros(1), kernel=(2,), stride=(2,), num_filter=1,
    ...     no_bias=False)
    >>> dx.asnumpy(), db.asnumpy()
    (array([[[2., 2.]]]), array([4.]))
    """
    return deconvolution_backward(out_grad, data, weight, bias, req=req, grads=grads,
                                  **params)
