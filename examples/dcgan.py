"""A DCGAN generator (100 -> 512 -> 256 -> 128 -> 64 -> 3 channels, each layer
with a bias, ReLU between layers) forward and backward through mxdeconv's oneDNN
path, checked against the NumPy path.

Run: python examples/dcgan.py [--batch 8]
"""
import argparse
import time

import numpy as np

import mxdeconv
from mxdeconv import nd

LAYERS = [  # (in channels, out channels, MXNet parameters)
    (100, 512, dict(kernel=(4, 4), num_filter=512, no_bias=False)),
    (512, 256, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256, no_bias=False)),
    (256, 128, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128, no_bias=False)),
    (128, 64, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64, no_bias=False)),
    (64, 3, dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3, no_bias=False)),
]


def generator(x, weights, biases):
    """Deconvolution + bias, ReLU between layers; returns every layer's output."""
    outputs = [x]
    for layer, (weight, bias, (_, _, params)) in enumerate(zip(weights, biases, LAYERS)):
        y = nd.Deconvolution(outputs[-1], weight, bias, **params)
        outputs.append(y if layer == len(LAYERS) - 1 else nd.relu(y))
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = nd.array(rng.standard_normal((args.batch, 100, 1, 1)).astype(np.float32))
    weights = [nd.array(0.02 * rng.standard_normal((cin, cout, 4, 4)).astype(np.float32))
               for cin, cout, _ in LAYERS]
    biases = [nd.array(0.1 * rng.standard_normal(cout).astype(np.float32))
              for _, cout, _ in LAYERS]
    print(mxdeconv.runtime_info())

    with mxdeconv.autograd.train_mode():
        start = time.perf_counter()
        outputs = generator(x, weights, biases)
        image = outputs[-1]
        print(f"forward: {image.shape} in {1e3 * (time.perf_counter() - start):.1f} ms, "
              f"implementation {mxdeconv.last_impl()}, last layout {image.layout}")
        # Backward through the deconvolutions only (the ReLUs' masks are left out
        # to keep the example short; mxdeconv.autograd does the whole chain).
        grad = nd.ones(image.shape)
        for layer in reversed(range(len(LAYERS))):
            grad, weight_grad, bias_grad = nd.Deconvolution_backward(
                grad, outputs[layer], weights[layer], biases[layer], **LAYERS[layer][2])
        print(f"backward: data grad {grad.shape}, first weight grad {weight_grad.shape}, "
              f"first bias grad {bias_grad.shape}")

    with mxdeconv.use_impl("numpy"):
        reference = generator(nd.array(x.asnumpy()), [nd.array(w.asnumpy()) for w in weights],
                              [nd.array(b.asnumpy()) for b in biases])
    diff = np.abs(image.asnumpy() - reference[-1].asnumpy()).max()
    print(f"max |oneDNN - NumPy| on the image (biases included): {diff:.2e}")
    assert diff < 1e-4, diff


if __name__ == "__main__":
    main()
