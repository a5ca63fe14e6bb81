"""Type stubs for ``mxdeconv/ops/_fastpath.pyx``: the Deconvolution operator's
public entries, compiled, and the prepared-call lookup they start with."""
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from mxdeconv.ndarray.ndarray import NDArray


class Miss:
    """No prepared call for a signature; ``key`` is where to keep one (or None)."""

    @property
    def key(self) -> Optional[Tuple[Any, ...]]: ...


def Deconvolution(data: Any, weight: Any, bias: Any = ..., out: Optional[NDArray] = ...,
                  req: str = ..., train: Optional[bool] = ..., name: Optional[str] = ...,
                  **params: Any) -> Optional[NDArray]: ...
def Deconvolution_backward(out_grad: Any, data: Any, weight: Any, bias: Any = ...,
                           req: Union[str, Sequence[str]] = ...,
                           grads: Optional[Sequence[Optional[NDArray]]] = ...,
                           train: Optional[bool] = ..., name: Optional[str] = ...,
                           **params: Any) -> Tuple[Optional[NDArray], ...]: ...
def forward(data: Any, weight: Any, bias: Any, out: Any, req: Any, train: Any,
            params: Dict[str, Any], act_type: Optional[str] = ...) -> Union[NDArray, Miss]: ...
