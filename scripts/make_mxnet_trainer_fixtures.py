#!/usr/bin/env python
"""Record what MXNet 1.9.1's ``gluon.Trainer``, optimizers, learning-rate
schedulers and ``gluon.loss`` compute, for ``tests/gluon/test_trainer.py``,
``tests/gluon/test_loss.py`` and ``tests/package/test_porting.py``.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh),
from the repository root, in a few seconds::

    .venv-mxnet/bin/python scripts/make_mxnet_trainer_fixtures.py

The cases are ``tests/data/trainer_cases.py``'s (the tests run the same code
under mxdeconv).  Writes:

* ``tests/data/mxnet_trainer.npz``: per optimizer case the initial values, ``x``
  and ``y``, the parameters after every ``trainer.step`` (``<case>/<name>``,
  shape ``(steps, *shape)``) and ``trainer.learning_rate`` after every step;
* ``tests/data/mxnet_loss.npz``: per loss case its inputs, the head gradient,
  the loss and the gradients of pred and label;
* ``tests/data/porting/trainer_init.params``, ``trainer.npz``,
  ``trainer_final.params``: the generator of ``tests/data/porting/trainer_loop.py``
  before training (``save_parameters``), the fixed ``z`` and ``target`` and each
  step's loss, and the generator after ``PORT_STEPS`` steps.

MXNet runs its default (MKL-DNN) float32 path.  Any change here changes the
fixtures; the tests read every number they check from them.
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, lr_scheduler, nd

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "tests", "data")
sys.path.insert(0, DATA)
import trainer_cases as cases  # noqa: E402

PORT_STEPS = 25
PORT_BATCH = 8


def optimizer_fixtures(rng):
    arrays = {}
    for name, case in cases.OPTIMIZER_CASES.items():
        inputs = cases.optimizer_inputs(rng)
        history, rates = cases.run_optimizer_case(case, inputs, autograd, gluon, nd,
                                                  lr_scheduler)
        for key, values in inputs.items():
            arrays[f"{name}/init/{key}"] = values
        for key, values in history.items():
            arrays[f"{name}/{key}"] = values
        arrays[f"{name}/learning_rate"] = np.array(rates, dtype=np.float64)
        moved = {key: float(np.abs(values[-1] - inputs[key]).max())
                 for key, values in history.items()}
        print(f"{name}: lr {rates}, moved {moved}", file=sys.stderr)
    np.savez_compressed(os.path.join(DATA, "mxnet_trainer.npz"), **arrays)


def loss_fixtures(rng):
    arrays = {}
    for name, case in cases.LOSS_CASES.items():
        inputs = cases.loss_inputs(case[2], rng)
        shape = cases.run_loss_case(case, inputs, autograd, gluon, nd)[0].shape
        head = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        loss, pred_grad, label_grad = cases.run_loss_case(case, inputs, autograd, gluon, nd,
                                                          head)
        for key, values in inputs.items():
            arrays[f"{name}/{key}"] = values
        arrays[f"{name}/head"] = head
        arrays[f"{name}/loss"] = loss
        arrays[f"{name}/pred_grad"] = pred_grad
        arrays[f"{name}/label_grad"] = label_grad
        print(f"{name}: loss {loss.shape} {loss.ravel()[:3]}", file=sys.stderr)
    np.savez_compressed(os.path.join(DATA, "mxnet_loss.npz"), **arrays)


def porting_fixture(rng):
    """tests/data/porting/trainer_loop.py, run as it is under MXNet."""
    out = os.path.join(DATA, "porting")
    with open(os.path.join(out, "trainer_loop.py")) as handle:
        program = handle.read()
    namespace = {"__name__": "trainer_loop"}
    exec(compile(program, "trainer_loop.py", "exec"), namespace)
    net = namespace["build_generator"]()
    # Weights large enough that relu and tanh are not linear; biases zero.
    net.initialize(mx.init.Normal(0.25))
    net.save_parameters(os.path.join(out, "trainer_init.params"))
    z = rng.normal(0, 1, (PORT_BATCH, 8, 1, 1)).astype(np.float32)
    target = rng.uniform(-0.8, 0.8, (PORT_BATCH, 3, 16, 16)).astype(np.float32)
    losses = namespace["train"](net, z, target, PORT_STEPS)
    net.save_parameters(os.path.join(out, "trainer_final.params"))
    np.savez_compressed(os.path.join(out, "trainer.npz"), z=z, target=target,
                        losses=np.array(losses, dtype=np.float32))
    print(f"porting losses: {losses}", file=sys.stderr)


def main():
    mx.random.seed(cases.SEED)
    rng = np.random.RandomState(cases.SEED)
    optimizer_fixtures(rng)
    loss_fixtures(rng)
    porting_fixture(rng)
    print(f"wrote the Trainer and loss fixtures with MXNet {mx.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
