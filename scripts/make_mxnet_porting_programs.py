"""Run the MXNet 1.9.1 programs of tests/data/porting/programs/ under real MXNet
and record what they compute, for tests/package/test_porting_programs.py
(which runs the same text under mxdeconv with only its import lines changed).

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python scripts/make_mxnet_porting_programs.py

Each program is a module written as MXNet users write them, with three
functions: ``data()`` (its inputs, from NumPy's seeded legacy generator, the
same numbers under any NumPy), ``build()`` (the network, initialised) and
``train(net, data, workdir)`` (what it computes: losses, outputs...).  Its
``INPUTS`` (default ``("x",)``) name the arrays the network is called on.

For each program this writes, beside it (or into the folder given as the
first argument: tests/package/test_porting_programs.py reruns MXNet so when an
MXNet venv exists, to check that the committed files are what MXNet computes):

* ``<name>_init.params``: ``save_parameters`` of the network right after
  ``build()`` and one inference call (which completes deferred shapes), so
  that mxdeconv starts from MXNet's random initial values;
* ``<name>.npz``: every array ``train`` returned.
"""
import os
import sys
import tempfile

import mxnet as mx
import numpy as np

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        "porting", "programs")


def load_program(path):
    namespace = {"__name__": os.path.splitext(os.path.basename(path))[0]}
    with open(path) as handle:
        exec(compile(handle.read(), path, "exec"), namespace)
    return namespace


def record(path, out):
    program = load_program(path)
    data = program["data"]()
    net = program["build"]()
    inputs = [mx.nd.array(data[key]) for key in program.get("INPUTS", ("x",))]
    net(*inputs)  # inference: completes deferred shapes, changes no statistic
    base = os.path.join(out, os.path.splitext(os.path.basename(path))[0])
    net.save_parameters(base + "_init.params")
    with tempfile.TemporaryDirectory() as workdir:
        results = program["train"](net, data, workdir)
    np.savez(base + ".npz", **{k: np.asarray(v) for k, v in results.items()})
    print(f"{os.path.basename(path)}: losses {list(np.round(results['losses'], 5))}",
          file=sys.stderr)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else PROGRAMS
    mx.random.seed(20261205)
    np.random.seed(20261205)
    for name in sorted(os.listdir(PROGRAMS)):
        if name.endswith(".py"):
            record(os.path.join(PROGRAMS, name), out)


if __name__ == "__main__":
    main()
