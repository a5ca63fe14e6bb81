"""A DCGAN generator (100 -> 512 -> 256 -> 128 -> 64 -> 3 channels) forward and
backward through mxdeconv's oneDNN path, checked against the NumPy path.

Run: python examples/dcgan.py [--batch 8]
"""
import argparse
import time

import numpy as np

import mxdeconv
from mxdeconv import nd

LAYERS = [  # (in channels, out channels, MXNet parameters)
    (100, 512, dict(kernel=(4, 4), num_filter=512)),
    (512, 256, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256)),
    (256, 128, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128)),
    (128, 64, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64)),
    (64, 3, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3)),
]


def generator(x, weights):
    """Deconvolutions only (activations are not part of this package)."""
    outputs = [x]
    for weight, (_, _, params) in zip(weights, LAYERS):
        outputs.append(nd.Deconvolution(outputs[-1], weight, **params))
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = nd.array(rng.standard_normal((args.batch, 100, 1, 1)).astype(np.float32))
    weights = [nd.array(0.02 * rng.standard_normal((cin, cout, 4, 4)).astype(np.float32))
               for cin, cout, _ in LAYERS]
    print(mxdeconv.runtime_info())

    with mxdeconv.autograd.train_mode():
        start = time.perf_counter()
        outputs = generator(x, weights)
        image = outputs[-1]
        print(f"forward: {image.shape} in {1e3 * (time.perf_counter() - start):.1f} ms, "
              f"implementation {mxdeconv.last_impl()}, last layout {image.layout}")
        grad = nd.ones(image.shape)
        for layer in reversed(range(len(LAYERS))):
            grad, weight_grad, _ = nd.Deconvolution_backward(
                grad, outputs[layer], weights[layer], **LAYERS[layer][2])
        print(f"backward: data grad {grad.shape}, first weight grad {weight_grad.shape}")

    with mxdeconv.use_impl("numpy"):
        reference = generator(nd.array(x.asnumpy()), [nd.array(w.asnumpy()) for w in weights])
    diff = np.abs(image.asnumpy() - reference[-1].asnumpy()).max()
    print(f"max |oneDNN - NumPy| on the image: {diff:.2e}")
    assert diff < 1e-4, diff


if __name__ == "__main__":
    main()
