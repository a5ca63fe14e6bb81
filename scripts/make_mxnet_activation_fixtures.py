"""Record real MXNet 1.9.1 activations as a test fixture: Gluon's transposed
convolutions with ``activation=`` and ``nd.Activation`` alone.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python scripts/make_mxnet_activation_fixtures.py

Writes tests/data/mxnet_activation.npz:

* for layer case ``i``: ``layer/i/{input,weight,bias,head_grad,output,data_grad,
  weight_grad,bias_grad}`` and ``layer/i/spec`` (JSON: Gluon class and
  constructor arguments).  Weights and biases are fixed values set with
  ``set_data``; MXNet runs its default (MKL-DNN) path in float32.
* for each act_type: ``act/<act_type>/{x,head_grad,y,x_grad}`` of
  ``nd.Activation`` in float64 (MXNet's native path), on values that reach
  softrelu's threshold (20) and saturation.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

ACT_TYPES = ("relu", "sigmoid", "softrelu", "softsign", "tanh")
# (class, constructor arguments, input shape); every act_type on each.
LAYERS = [
    ("Conv1DTranspose", dict(channels=3, kernel_size=3, strides=2, padding=1, in_channels=4),
     (2, 4, 6)),
    ("Conv2DTranspose", dict(channels=4, kernel_size=3, strides=2, padding=1,
                             output_padding=1, groups=2, in_channels=6), (2, 6, 5, 4)),
    ("Conv3DTranspose", dict(channels=2, kernel_size=2, strides=2, use_bias=False,
                             in_channels=3), (1, 3, 2, 3, 2)),
]
# DCGAN's last layer, smaller batch and image: 64 -> 3, k4 s2 p1, tanh.
DCGAN = ("Conv2DTranspose", dict(channels=3, kernel_size=4, strides=2, padding=1,
                                 in_channels=64, activation="tanh"), (2, 64, 8, 8))


def layer_case(rng, cls_name, kwargs, in_shape):
    net = getattr(gluon.nn, cls_name)(**kwargs)
    net.initialize()
    weight = rng.uniform(-0.5, 0.5, net.weight.shape).astype(np.float32)
    net.weight.set_data(mx.nd.array(weight))
    record = {"weight": weight}
    if net.bias is not None:
        bias = rng.uniform(-1, 1, net.bias.shape).astype(np.float32)
        net.bias.set_data(mx.nd.array(bias))
        record["bias"] = bias
    x = mx.nd.array(rng.uniform(-1, 1, in_shape).astype(np.float32))
    x.attach_grad()
    with autograd.record():
        y = net(x)
    head = rng.uniform(-1, 1, y.shape).astype(np.float32)
    y.backward(mx.nd.array(head))
    mx.nd.waitall()
    record.update(input=x.asnumpy(), head_grad=head, output=y.asnumpy(),
                  data_grad=x.grad.asnumpy(), weight_grad=net.weight.grad().asnumpy())
    if net.bias is not None:
        record["bias_grad"] = net.bias.grad().asnumpy()
    return record


def activation_case(rng, act_type):
    x = np.concatenate([rng.uniform(-3, 3, 40), [-30.0, -1.0, 0.0, 1.0, 19.5, 20.0, 20.5, 25.0]])
    head = rng.uniform(-1, 1, x.shape)
    data = mx.nd.array(x, dtype="float64")
    data.attach_grad()
    with autograd.record():
        y = mx.nd.Activation(data, act_type=act_type)
    y.backward(mx.nd.array(head, dtype="float64"))
    return {"x": x, "head_grad": head, "y": y.asnumpy(), "x_grad": data.grad.asnumpy()}


def main():
    rng = np.random.default_rng(20261203)
    fixture = {"mxnet_version": np.array(mx.__version__)}
    cases = [(cls, dict(kwargs, activation=act), shape)
             for cls, kwargs, shape in LAYERS for act in ACT_TYPES] + [DCGAN]
    for index, (cls_name, kwargs, in_shape) in enumerate(cases):
        record = layer_case(rng, cls_name, kwargs, in_shape)
        fixture.update({f"layer/{index}/{key}": value for key, value in record.items()})
        fixture[f"layer/{index}/spec"] = np.array(json.dumps([cls_name, kwargs]))
    for act_type in ACT_TYPES:
        record = activation_case(rng, act_type)
        fixture.update({f"act/{act_type}/{key}": value for key, value in record.items()})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        "mxnet_activation.npz")
    np.savez_compressed(path, **fixture)
    print(f"wrote {len(cases)} layers and {len(ACT_TYPES)} activations from MXNet "
          f"{mx.__version__} to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
