"""Record what MXNet 1.9.1's Gluon ``nn.BatchNorm`` does, as test fixtures for
``tests/gluon/test_batchnorm.py``.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python scripts/make_mxnet_batchnorm_fixtures.py

Writes into tests/data/batchnorm/ (a few tens of KB), or into the folder given
as the first argument (tests/gluon/test_batchnorm.py reruns MXNet so when an
MXNet venv exists, to check the committed files):

* ``cases.npz``: single layers, each with its inputs and MXNet's results:
  inference with given statistics (2-D, 3-D, 4-D and 5-D data, ``axis=-1``,
  ``scale=False``, ``center=False``, ``use_global_stats=True``), and one
  training step (``autograd.record()``, backward of ``(y * head).sum()``):
  the output, the gradients of data, gamma and beta, and the running
  statistics after the backward;
* ``generator_init.params`` / ``generator_final.params``: ``save_parameters``
  of a DCGAN-style generator (Conv2DTranspose, BatchNorm, Activation blocks)
  before and after ``STEPS`` Adam steps on an L2 loss, and
  ``generator_collect.params``, the same final parameters saved by
  ``collect_params().save`` (full names);
* ``generator.npz``: ``z``, ``target``, each step's loss, the inference output
  after training, and the parameter names MXNet gives (``collect_params()``
  and ``save_parameters``' keys), as JSON text.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                   "batchnorm")
SEED = 20261205
STEPS = 5

#: name -> (data shape, BatchNorm kwargs); channels are data.shape[axis].
CASES = {
    "2d": ((6, 3), {}),
    "3d": ((4, 2, 5), {}),
    "4d": ((3, 4, 5, 5), {}),
    "5d": ((2, 3, 2, 3, 4), {}),
    "axis_last": ((3, 4, 5, 2), {"axis": -1}),
    "no_scale": ((3, 4, 3, 3), {"scale": False}),
    "no_center": ((3, 4, 3, 3), {"center": False}),
    "global_stats": ((3, 4, 3, 3), {"use_global_stats": True}),
    "momentum_eps": ((3, 4, 3, 3), {"momentum": 0.7, "epsilon": 1e-3}),
}


def layer_case(rng, name, shape, kwargs):
    axis = kwargs.get("axis", 1)
    channels = shape[axis]
    bn = nn.BatchNorm(in_channels=channels, **kwargs)
    bn.initialize()
    params = {"gamma": rng.uniform(0.5, 1.5, channels), "beta": rng.uniform(-0.5, 0.5, channels),
              "running_mean": rng.uniform(-0.5, 0.5, channels),
              "running_var": rng.uniform(0.5, 2.0, channels)}
    for key, value in params.items():
        getattr(bn, key).set_data(nd.array(value.astype(np.float32)))
    x = (rng.normal(0, 2, shape) + 0.7).astype(np.float32)
    head = rng.normal(0, 1, shape).astype(np.float32)
    out = {f"{name}/x": x, f"{name}/head": head, f"{name}/kwargs": np.array(json.dumps(kwargs))}
    out.update({f"{name}/{k}": v.astype(np.float32) for k, v in params.items()})
    out[f"{name}/inference"] = bn(nd.array(x)).asnumpy()
    xs = nd.array(x)
    xs.attach_grad()
    with autograd.record():
        y = bn(xs)
        loss = (y * nd.array(head)).sum()
    loss.backward()
    out[f"{name}/train_out"] = y.asnumpy()
    out[f"{name}/grad_x"] = xs.grad.asnumpy()
    for key in ("gamma", "beta"):  # none without scale / center (grad_req='null')
        param = getattr(bn, key)
        if param.grad_req != "null":
            out[f"{name}/grad_{key}"] = param.grad().asnumpy()
    out[f"{name}/running_mean_after"] = bn.running_mean.data().asnumpy()
    out[f"{name}/running_var_after"] = bn.running_var.data().asnumpy()
    return out


def generator():
    """nz=8 -> 16 -> 8 -> 3 channels, 1x1 -> 4x4 -> 8x8 -> 16x16, as MXNet's DCGAN
    example builds its generator (Conv2DTranspose without bias, BatchNorm, relu;
    tanh at the end)."""
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2DTranspose(16, 4, 1, 0, use_bias=False, in_channels=8))
        net.add(nn.BatchNorm())
        net.add(nn.Activation("relu"))
        net.add(nn.Conv2DTranspose(8, 4, 2, 1, use_bias=False, in_channels=16))
        net.add(nn.BatchNorm())
        net.add(nn.Activation("relu"))
        net.add(nn.Conv2DTranspose(3, 4, 2, 1, use_bias=False, in_channels=8))
        net.add(nn.Activation("tanh"))
    return net


def generator_fixture(rng):
    net = generator()
    net.initialize(mx.init.Normal(0.2))
    z = rng.normal(0, 1, (4, 8, 1, 1)).astype(np.float32)
    target = rng.uniform(-1, 1, (4, 3, 16, 16)).astype(np.float32)
    net(nd.array(z))  # completes BatchNorm's deferred shapes before saving
    net.save_parameters(os.path.join(OUT, "generator_init.params"))
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01,
                                                           "beta1": 0.5})
    l2 = gluon.loss.L2Loss()
    losses = []
    for _ in range(STEPS):
        with autograd.record():
            loss = l2(net(nd.array(z)), nd.array(target))
        loss.backward()
        trainer.step(z.shape[0])
        losses.append(loss.mean().asscalar())
    net.save_parameters(os.path.join(OUT, "generator_final.params"))
    net.collect_params().save(os.path.join(OUT, "generator_collect.params"))
    image = net(nd.array(z)).asnumpy()
    names = {"collect_params": list(net.collect_params().keys()),
             "save_parameters": list(nd.load(os.path.join(OUT, "generator_final.params")))}
    np.savez(os.path.join(OUT, "generator.npz"), z=z, target=target,
             losses=np.array(losses, dtype=np.float32), image=image,
             names=np.array(json.dumps(names)))
    print(f"generator losses {losses}", file=sys.stderr)


def main():
    global OUT
    if len(sys.argv) > 1:
        OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    mx.random.seed(SEED)
    rng = np.random.RandomState(SEED)
    arrays = {}
    for name, (shape, kwargs) in CASES.items():
        arrays.update(layer_case(rng, name, shape, kwargs))
    np.savez(os.path.join(OUT, "cases.npz"), **arrays)
    generator_fixture(rng)
    print(f"wrote {sorted(os.listdir(OUT))} with MXNet {mx.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
