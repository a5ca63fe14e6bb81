"""Type stubs for ``mxdeconv/ops/_exec.pyx``: NDArrays in and out of oneDNN
plans, and prepared calls."""
from typing import Any, Callable, Dict, Optional, Tuple, Union

from mxdeconv.onednn._ops import BackwardDataPlan, BackwardWeightsPlan, ForwardPlan
from mxdeconv.ndarray.ndarray import NDArray

_Grads = Tuple[Optional[NDArray], Optional[NDArray], Optional[NDArray]]


class Output:
    """Where a primitive writes one result, and how it reaches its target."""


class Serving:
    """How many more calls a prepared call of a plan still being tuned may serve."""

    calls_left: int
    generation: Any
    paid_by: Any


class PreparedForward:
    """A validated, planned forward signature on the oneDNN path."""

    serving: Serving

    def __init__(self, plan: ForwardPlan, training: bool, accumulate: bool, req: str,
                 act_type: Optional[str] = ...,
                 record: Optional[Callable[..., Any]] = ...) -> None: ...
    def run(self, data: NDArray, weight: NDArray, bias: Optional[NDArray],
            out: Optional[NDArray], params: Dict[str, Any]) -> NDArray: ...


class PreparedBackward:
    """A validated, planned backward signature on the oneDNN path."""

    serving: Serving

    def __init__(self, data_plan: BackwardDataPlan, weights_plan: BackwardWeightsPlan,
                 reqs: Tuple[str, ...]) -> None: ...
    def run(self, out_grad: NDArray, data: NDArray, weight: NDArray,
            grads: Tuple[Any, ...]) -> _Grads: ...


def deconv_forward(plan: ForwardPlan, data: NDArray, weight: NDArray,
                   bias: Optional[NDArray], out: Optional[NDArray], accumulate: bool,
                   training: bool) -> NDArray: ...
def deconv_backward(data_plan: BackwardDataPlan, weights_plan: BackwardWeightsPlan,
                    out_grad: NDArray, data: NDArray, weight: NDArray,
                    grads: Tuple[Any, ...], accumulate: Tuple[bool, ...],
                    needed: Tuple[bool, ...]) -> _Grads: ...
def keep(key: Tuple[Any, ...], prepared: Union[PreparedForward, PreparedBackward]) -> None: ...
