"""A DCGAN generator (100 -> 512 -> 256 -> 128 -> 64 -> 3 channels, each layer
with a bias, ``nd.relu`` between layers), forward and backward through
mxdeconv's autograd (the ReLUs included) on the oneDNN path, checked against
the same on the NumPy path.

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
    """Deconvolution + bias, ReLU between layers; returns the image."""
    y = x
    for layer, (weight, bias, (_, _, params)) in enumerate(zip(weights, biases, LAYERS)):
        y = nd.Deconvolution(y, weight, bias, **params)
        if layer < len(LAYERS) - 1:
            y = nd.relu(y)
    return y


def train_step(x, weights, biases):
    """Forward under autograd.record() (training mode), then backward from
    ones; returns the image, the weight and bias gradients and the times."""
    for array in weights + biases:
        array.attach_grad()
    start = time.perf_counter()
    with mxdeconv.autograd.record():
        image = generator(x, weights, biases)
    middle = time.perf_counter()
    image.backward()      # out_grad=None: ones, the gradient of image.sum()
    end = time.perf_counter()
    return image, [w.grad for w in weights], [b.grad for b in biases], (middle - start,
                                                                        end - middle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 100, 1, 1)).astype(np.float32)
    weights = [(0.02 * rng.standard_normal((cin, cout, 4, 4))).astype(np.float32)
               for cin, cout, _ in LAYERS]
    biases = [(0.1 * rng.standard_normal(cout)).astype(np.float32) for _, cout, _ in LAYERS]
    print(mxdeconv.runtime_info())

    image, weight_grads, bias_grads, (forward_s, backward_s) = train_step(
        nd.array(x), [nd.array(w) for w in weights], [nd.array(b) for b in biases])
    print(f"forward: {image.shape} in {1e3 * forward_s:.1f} ms (first calls: planning "
          f"included), image layout {image.layout}")
    print(f"backward: {len(weight_grads)} weight and bias gradients in "
          f"{1e3 * backward_s:.1f} ms, first weight grad {weight_grads[0].shape}, "
          f"implementation {mxdeconv.last_impl()}")

    with mxdeconv.use_impl("numpy"):
        reference = train_step(nd.array(x), [nd.array(w) for w in weights],
                               [nd.array(b) for b in biases])
    pairs = ([("image", image, reference[0])]
             + [(f"weight {i} grad", a, b) for i, (a, b) in enumerate(zip(weight_grads,
                                                                          reference[1]))]
             + [(f"bias {i} grad", a, b) for i, (a, b) in enumerate(zip(bias_grads,
                                                                        reference[2]))])
    worst, name = max((float(np.abs(a.asnumpy() - b.asnumpy()).max())
                       / (float(np.abs(b.asnumpy()).max()) or 1.0), name)
                      for name, a, b in pairs)
    print(f"oneDNN vs NumPy, image and every gradient: largest difference {worst:.1e} "
          f"of the magnitude ({name})")
    # float32 sums in different orders; a bias gradient sums 8 x 32 x 32 terms.
    assert worst < 1e-3, (worst, name)


if __name__ == "__main__":
    main()
