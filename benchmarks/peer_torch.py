"""PyTorch peer: ``torch.nn.functional.conv_transpose{1,2,3}d`` on the CPU, in-process.

MXNet's ``(pad, adj)`` is PyTorch's ``(padding, output_padding)`` and both use
the ``(C_in, C_out/groups, *k)`` weight layout, so the same arrays go in
unchanged; ``target_shape`` is resolved to pad/adj by :func:`layers.resolve`.
The NumPy inputs are shared with ``torch.from_numpy`` (no copy).

Modes: inference forwards run under ``torch.inference_mode()``, the training
forward on leaf tensors with ``requires_grad=True`` (it records the graph, as
a training step would), ``bwd`` replays ``torch.autograd.grad`` on one recorded
graph with ``retain_graph=True``, and ``fwd+bwd`` records and differentiates
each iteration.  ``+asnumpy`` is ``Tensor.numpy()``, which is free (it shares
memory); it is kept for symmetry with the other contenders.
"""
from __future__ import annotations

from typing import Any, Collection, Dict, Optional

from contender import Prepared, prepare_steps, short_error
from layers import Case, Inputs


class TorchPeer:
    name = "PyTorch"

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._torch: Any = None
        self._problem: Optional[str] = None
        try:
            import torch
        except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
            self._problem = f"missing (import torch failed: {short_error(exc)})"
            return
        torch.set_num_threads(threads)
        self._torch = torch

    def status(self) -> Optional[str]:
        return self._problem

    def versions(self) -> Dict[str, str]:
        if self._torch is None:
            return {}
        return {"torch": self._torch.__version__,
                "torch_threads": str(self._torch.get_num_threads())}

    def prepare(self, case: Case, inputs: Inputs, modes: Collection[str]) -> Prepared:
        torch = self._torch
        functional = torch.nn.functional
        conv = {1: functional.conv_transpose1d, 2: functional.conv_transpose2d,
                3: functional.conv_transpose3d}[case.geometry.ndim]
        g = case.geometry
        options = dict(stride=g.stride, padding=g.pad, output_padding=g.adj,
                       groups=g.num_group, dilation=g.dilate)

        def tensor(array: Any, requires_grad: bool = False) -> Any:
            if array is None:
                return None
            return torch.from_numpy(array).requires_grad_(requires_grad)

        x, w, b = tensor(inputs.data), tensor(inputs.weight), tensor(inputs.bias)
        leaves = [t for t in (tensor(inputs.data, True), tensor(inputs.weight, True),
                              tensor(inputs.bias, True)) if t is not None]
        xg, wg = leaves[:2]
        bg = leaves[2] if len(leaves) > 2 else None
        out_grad = tensor(inputs.out_grad)

        def forward() -> Any:
            return conv(x, w, b, **options)

        def forward_train() -> Any:
            return conv(xg, wg, bg, **options)

        recorded = {}

        def backward(wanted: Any = leaves) -> Any:
            # Only the gradients asked for are computed (the engine passes
            # convolution_backward an output mask): "bwd_data", "bwd_weights".
            if "out" not in recorded:
                with torch.enable_grad():
                    recorded["out"] = forward_train()
            return torch.autograd.grad(recorded["out"], wanted, out_grad, retain_graph=True)

        def forward_backward() -> Any:
            return torch.autograd.grad(forward_train(), leaves, out_grad)

        prepared = prepare_steps({
            "fwd_train": (forward_train, torch.enable_grad),
            "fwd_infer": (forward, torch.inference_mode),
            "fwd_infer_asnumpy": (lambda: forward().numpy(), torch.inference_mode),
            "bwd": (backward, torch.enable_grad),
            "bwd_data": (lambda: backward(leaves[:1]), torch.enable_grad),
            "bwd_weights": (lambda: backward(leaves[1:]), torch.enable_grad),
            "fwd_bwd": (forward_backward, torch.enable_grad),
        }, modes)

        def output() -> Any:
            with torch.inference_mode():
                return forward().numpy().copy()

        prepared.output = output
        return prepared

    def close(self) -> None:
        pass
