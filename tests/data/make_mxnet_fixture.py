"""Produce the MXNet 1.9.1 fixture for tests/gluon/test_gluon.py.  Run it with MXNet's
interpreter (MXNet 1.9.1, NumPy 1.23.5; see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python tests/data/make_mxnet_fixture.py [OUTPUT_DIR] [SEED]

It writes, in OUTPUT_DIR (default: this folder):

* ``mxnet_<layer>.npz``: each layer's parameters exactly as exported from MXNet,
  ``{name: param.data().asnumpy() for name, param in net.collect_params().items()}``
  (MXNet's full names, e.g. ``conv1_weight``);
* ``mxnet_gluon_io.npz``: for each layer ``<layer>_input``, ``<layer>_output``,
  ``<layer>_head_grad`` and MXNet autograd's ``<layer>_data_grad``,
  ``<layer>_weight_grad`` (and ``<layer>_bias_grad``), plus ``default_weight`` /
  ``default_bias`` of a layer initialised with MXNet's defaults.

The test runs this script itself (with another seed) when MXNet's venv exists,
and otherwise checks against the committed files.
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mxnet_layers import DEFAULT_LAYER, LAYERS  # noqa: E402


def main(out_dir, seed):
    rng = np.random.RandomState(seed)
    mx.random.seed(seed)
    io = {}
    for key, (cls_name, kwargs, in_shape) in sorted(LAYERS.items()):
        net = getattr(gluon.nn, cls_name)(bias_initializer=mx.init.Uniform(0.5), **kwargs)
        net.initialize(mx.init.Uniform(0.5))
        # Export before the forward: MXNet 1.9.1 reorders the weight into its
        # oneDNN layout during the forward, and reading it afterwards
        # intermittently returns the blocked bytes in plain order (a permuted
        # weight with the right sum).
        params = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
        x = mx.nd.array(rng.uniform(-1, 1, in_shape).astype(np.float32))
        x.attach_grad()
        with autograd.record():
            y = net(x)
        head = mx.nd.array(rng.uniform(-1, 1, y.shape).astype(np.float32))
        y.backward(head)
        mx.nd.waitall()
        np.savez(os.path.join(out_dir, "mxnet_%s.npz" % key), **params)
        io[key + "_input"] = x.asnumpy()
        io[key + "_output"] = y.asnumpy()
        io[key + "_head_grad"] = head.asnumpy()
        io[key + "_data_grad"] = x.grad.asnumpy()
        io[key + "_weight_grad"] = net.weight.grad().asnumpy()
        if net.bias is not None:
            io[key + "_bias_grad"] = net.bias.grad().asnumpy()
    cls_name, kwargs = DEFAULT_LAYER
    net = getattr(gluon.nn, cls_name)(**kwargs)
    net.initialize()  # MXNet's defaults: Block.initialize(init=Uniform()), bias 'zeros'
    io["default_weight"] = net.weight.data().asnumpy()
    io["default_bias"] = net.bias.data().asnumpy()
    np.savez(os.path.join(out_dir, "mxnet_gluon_io.npz"), **io)
    print("MXNet %s, NumPy %s: wrote %s" % (mx.__version__, np.__version__, out_dir))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)),
         int(sys.argv[2]) if len(sys.argv) > 2 else 0)
