"""gluon.Trainer, the optimizers and the lr_schedulers against MXNet 1.9.1.

The cases are tests/data/trainer_cases.py's; scripts/fixtures/make_mxnet_trainer_fixtures.py
ran the same code under MXNet 1.9.1 and recorded every step's parameters and
learning rate in tests/data/mxnet_trainer.npz.  The rest checks the Trainer's
own rules: stale gradients, skipped parameters, argument errors, save_states /
load_states, and that a failed call changes nothing.
"""
import io
import pickle
import sys
import warnings
import zipfile

import numpy as np
import pytest

import mxdeconv
from mxdeconv import MXNetError, autograd, gluon, lr_scheduler, nd, optimizer
from mxdeconv.autograd import tape

from helpers import DATA

sys.path.insert(0, str(DATA))
import trainer_cases as cases  # noqa: E402

FIXTURE = np.load(DATA / "mxnet_trainer.npz")
# Parameters of order 0.1-1 after <= 6 float32 updates whose gradients are sums of
# 5 broadcast products: MXNet's and NumPy's summation orders differ by ~1e-7 (measured
# <= 1.2e-7).  A wrong rule, learning rate or step count is off by > 1e-3.
ATOL = 2e-6


def case_inputs(name):
    return {key: FIXTURE[f"{name}/init/{key}"] for key in list(cases.SHAPES) + ["x", "y"]}


def run_case(name, after_step=None):
    with warnings.catch_warnings():
        # MXNet's warning when learning_rate replaces the scheduler's base_lr
        warnings.filterwarnings("ignore", "learning rate from ``lr_scheduler``", UserWarning)
        return cases.run_optimizer_case(cases.OPTIMIZER_CASES[name], case_inputs(name),
                                        autograd, gluon, nd, lr_scheduler, after_step)


def assert_matches_fixture(name, history, rates):
    for key, values in history.items():
        want = FIXTURE[f"{name}/{key}"]
        np.testing.assert_allclose(values, want, rtol=0, atol=ATOL, err_msg=f"{name}/{key}")
    np.testing.assert_allclose(rates, FIXTURE[f"{name}/learning_rate"], rtol=1e-12)


@pytest.mark.parametrize("name", sorted(cases.OPTIMIZER_CASES))
def test_trainer_steps_match_mxnet(name):
    history, rates = run_case(name)
    assert_matches_fixture(name, history, rates)
    init = case_inputs(name)
    for key in ("w", "b"):  # the check is not void: the learning parameters moved
        assert np.abs(history[key][-1] - init[key]).max() > 1e-3
    assert (history["f"] == init["f"]).all()  # grad_req="null": skipped


@pytest.mark.parametrize("name", sorted(cases.OPTIMIZER_CASES))
def test_save_and_load_states_continue_as_mxnet(name, tmp_path):
    """After step 2 the states go to a file and a new Trainer (another optimizer)
    loads them: the run continues exactly as MXNet's uninterrupted one.  The new
    Trainer's rescale_grad stays its own, as in MXNet (the file holds the last
    step's 1 / batch_size product)."""
    path = tmp_path / "trainer.states"
    rescale = cases.OPTIMIZER_CASES[name]["params"].get("rescale_grad", 1.0)

    def reload(step, trainer, params):
        if step != 2:
            return None
        trainer.save_states(str(path))
        fresh = gluon.Trainer(params, "rmsprop", {"learning_rate": 123.0,
                                                  "rescale_grad": rescale})
        fresh.load_states(str(path))
        assert type(fresh.optimizer) is type(trainer.optimizer)
        return fresh

    assert_matches_fixture(name, *run_case(name, reload))


def quadratic_params(**kwargs):
    params = {}
    for name, values in (("a", [1.0, -2.0]), ("b", [0.5])):
        param = gluon.Parameter(name, shape=(len(values),), **kwargs)
        param.initialize()
        param.set_data(values)
        params[name] = param
    return params


def backward(params, use=("a", "b")):
    with autograd.record():
        loss = sum(((params[n].data() - 3) ** 2).sum() for n in use)
    loss.backward()


def values(params):
    return {n: p.data().asnumpy().copy() for n, p in params.items()}


def test_sgd_rule_and_rescale_grad():
    params = quadratic_params()
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1, "rescale_grad": 2.0})
    backward(params)
    trainer.step(4)  # gradients 2 * (w - 3), scaled by 2 / 4
    np.testing.assert_allclose(params["a"].data().asnumpy(), [1 + 0.1 * 2, -2 + 0.1 * 5])
    assert trainer.learning_rate == 0.1 and trainer.optimizer.rescale_grad == 0.5


def test_float64_parameters_update_in_float64():
    params = quadratic_params(dtype="float64")
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.25})
    backward(params)
    trainer.step(1)
    assert params["a"].data().dtype == np.float64
    np.testing.assert_array_equal(params["a"].data().asnumpy(), [1 + 0.25 * 4, -2 + 0.25 * 10])


def test_stale_gradient_raises_and_changes_nothing():
    params = quadratic_params()
    trainer = gluon.Trainer(params, "adam")
    backward(params, use=("a",))  # b's gradient is stale
    before = values(params)
    with pytest.raises(MXNetError, match="Parameter `b`.*has not been updated by backward"):
        trainer.step(1)
    assert all((before[n] == v).all() for n, v in values(params).items())
    assert trainer.optimizer.num_update == 0 and not trainer._states
    trainer.step(1, ignore_stale_grad=True)  # a is updated, b skipped
    after = values(params)
    assert (after["a"] != before["a"]).all() and (after["b"] == before["b"]).all()
    assert trainer.optimizer._index_update_count == {0: 1}
    # a step marks the gradients stale: another step needs another backward
    with pytest.raises(MXNetError, match="Parameter `a`"):
        trainer.step(1)


def test_backward_marks_gradients_fresh():
    x = nd.ones((2,))
    x.attach_grad()
    assert not tape.fresh_grad(x)
    with autograd.record():
        y = (x * 3).sum()
    y.backward()
    assert tape.fresh_grad(x)
    tape.set_fresh_grad(x, False)
    assert not tape.fresh_grad(x)
    x.grad[:] = 1  # a write that is not a backward does not make it fresh (MXNet's rule)
    assert not tape.fresh_grad(x)


def test_grad_req_null_and_add():
    params = quadratic_params()
    params["b"].grad_req = "null"
    params["a"].grad_req = "add"
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1})
    backward(params)
    backward(params)  # "add": the gradients of both backward passes
    trainer.step(1)
    np.testing.assert_allclose(params["a"].data().asnumpy(), [1 + 0.1 * 8, -2 + 0.1 * 20])
    assert params["b"].data().asnumpy().tolist() == [0.5]


def test_lr_mult_and_wd_mult():
    params = quadratic_params()
    params["a"].lr_mult, params["b"].wd_mult = 0.5, 0.0
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1, "wd": 0.5})
    backward(params)
    trainer.step(1)
    np.testing.assert_allclose(params["a"].data().asnumpy(),
                               [1 - 0.05 * (0.5 * 1 - 4), -2 - 0.05 * (0.5 * -2 - 10)], rtol=1e-6)
    np.testing.assert_allclose(params["b"].data().asnumpy(), [0.5 + 0.1 * 5])
    with pytest.raises(TypeError, match="lr_mult must be a real number"):
        params["a"].lr_mult = "fast"
    with pytest.raises(MXNetError, match="wd_mult must be a finite"):
        gluon.Parameter("p", wd_mult=float("nan"))
    assert params["a"].lr_mult == 0.5


def test_params_forms_and_order():
    params = quadratic_params()
    by_dict = gluon.Trainer({"z": params["a"], "y": params["b"]}, "sgd")
    assert by_dict._params == [params["b"], params["a"]]  # sorted keys, as MXNet
    assert gluon.Trainer((params["a"],), "sgd")._params == [params["a"]]
    layer = gluon.Conv1DTranspose(2, 3, in_channels=1, prefix="up_")
    layer.initialize()
    trainer = gluon.Trainer(layer.collect_params(), "SGD")
    assert [p.name for p in trainer._params] == ["up_bias", "up_weight"]
    with pytest.raises(TypeError, match="params must be a ParameterDict"):
        gluon.Trainer(params["a"], "sgd")
    with pytest.raises(TypeError, match="Parameters, not one holding"):
        gluon.Trainer([params["a"], nd.ones((2,))], "sgd")
    with pytest.raises(MXNetError, match="twice"):
        gluon.Trainer([params["a"], params["a"]], "sgd")
    with pytest.raises(MXNetError, match="has not been initialized"):
        gluon.Trainer([gluon.Parameter("new", shape=(2,))], "sgd")


def test_deferred_initialisation():
    layer = gluon.Conv2DTranspose(2, 3)  # in_channels from the first batch
    layer.initialize()
    trainer = gluon.Trainer(layer.collect_params(), "adam", {"learning_rate": 0.1})
    with autograd.record():
        loss = layer(nd.ones((1, 4, 2, 2))).sum()
    loss.backward()
    before = layer.weight.data().asnumpy().copy()
    trainer.step(1)
    assert layer.weight.shape == (4, 2, 3, 3)
    assert np.abs(layer.weight.data().asnumpy() - before).max() == pytest.approx(0.1, abs=1e-5)


def test_optimizer_names_and_instances():
    params = quadratic_params()
    for name, cls in (("Adam", optimizer.Adam), ("NAG", optimizer.NAG),
                      ("rmsProp", optimizer.RMSProp), ("sgd", optimizer.SGD)):
        assert type(gluon.Trainer(params, name).optimizer) is cls
    adam = optimizer.Adam(learning_rate=0.5)
    trainer = gluon.Trainer(params, adam)
    assert trainer.optimizer is adam and adam.param_dict[0] is params["a"]
    with pytest.raises(MXNetError, match=r"Trainer: optimizer must be one of 'adam', 'nag', "
                                         r".*got 'adamw'"):
        gluon.Trainer(params, "adamw")
    with pytest.raises(MXNetError, match="optimizer_params must be None"):
        gluon.Trainer(params, adam, {"learning_rate": 0.1})
    with pytest.raises(TypeError, match="optimizer must be an optimizer name"):
        gluon.Trainer(params, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentun'"):
        gluon.Trainer(params, "sgd", {"momentun": 0.9})
    with pytest.raises(TypeError, match="optimizer_params must be a dict"):
        gluon.Trainer(params, "sgd", [("learning_rate", 0.1)])


@pytest.mark.parametrize("name,kwargs,error,message", [
    ("sgd", {"learning_rate": "0.1"}, TypeError, "learning_rate must be a real number"),
    ("sgd", {"momentum": -0.5}, MXNetError, "momentum must be a finite real number >= 0"),
    ("sgd", {"wd": float("inf")}, MXNetError, "wd must be a finite real number"),
    ("adam", {"beta1": 1.0}, MXNetError, r"beta1 must be in \[0, 1\)"),
    ("rmsprop", {"centered": "yes"}, TypeError, "centered must be a bool"),
    ("sgd", {"lr_scheduler": 0.1}, TypeError, "lr_scheduler must be an LRScheduler"),
    ("sgd", {"sym": object()}, MXNetError, "sym must be None"),
    ("nag", {"begin_num_update": -1}, TypeError, "begin_num_update must be an int >= 0"),
])
def test_optimizer_argument_errors(name, kwargs, error, message):
    with pytest.raises(error, match=message):
        optimizer.create(name, **kwargs)


def test_trainer_argument_errors():
    params = quadratic_params()
    trainer = gluon.Trainer(params, "sgd", kvstore="local", update_on_kvstore=False)
    with pytest.raises(MXNetError, match="kvstore must be 'device', 'local' or None"):
        gluon.Trainer(params, "sgd", kvstore="dist_sync")
    with pytest.raises(MXNetError, match="compression_params must be None"):
        gluon.Trainer(params, "sgd", compression_params={"type": "2bit"})
    backward(params)
    before = values(params)
    for bad, error in ((0, MXNetError), (-2, MXNetError), ("4", TypeError),
                       (float("nan"), MXNetError)):
        with pytest.raises(error, match="batch_size"):
            trainer.step(bad)
    with pytest.raises(TypeError, match="ignore_stale_grad must be a bool"):
        trainer.step(1, ignore_stale_grad="no")
    with autograd.record():
        with pytest.raises(MXNetError, match="inside autograd.record"):
            trainer.step(1)
    assert all((before[n] == v).all() for n, v in values(params).items())
    trainer.step(1)  # the gradients are still fresh: nothing was consumed


def test_set_learning_rate_and_schedulers():
    params = quadratic_params()
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1})
    trainer.set_learning_rate(0.05)
    assert trainer.learning_rate == 0.05
    schedule = lr_scheduler.MultiFactorScheduler(step=[1], factor=0.5, base_lr=0.2)
    trainer = gluon.Trainer(params, "sgd", {"lr_scheduler": schedule})
    assert trainer.learning_rate == 0.2
    with pytest.raises(MXNetError, match="LRScheduler of the optimizer has already been defined"):
        trainer.set_learning_rate(0.1)
    with pytest.warns(UserWarning, match="overwritten by ``learning_rate``"):
        gluon.Trainer(params, "sgd", {"learning_rate": 0.3, "lr_scheduler": schedule})
    assert schedule.base_lr == 0.3
    with pytest.raises(MXNetError, match="Factor must be no more than 1"):
        lr_scheduler.FactorScheduler(step=2, factor=2.0)
    with pytest.raises(MXNetError, match="increasing integer list"):
        lr_scheduler.MultiFactorScheduler(step=[3, 2])
    with pytest.raises(TypeError, match="step must be an int"):
        lr_scheduler.FactorScheduler(step=2.5)
    with pytest.raises(MXNetError, match="warmup_mode must be one of"):
        lr_scheduler.PolyScheduler(max_update=3, warmup_mode="cubic")


def test_custom_optimizer_subclass():
    @optimizer.register
    class HalfStep(optimizer.Optimizer):
        def update(self, index, weight, grad, state):
            weight[:] = weight - 0.5 * grad * self.rescale_grad

    try:
        params = quadratic_params()
        trainer = gluon.Trainer(params, "halfstep")
        backward(params)
        trainer.step(2)
        np.testing.assert_allclose(params["a"].data().asnumpy(), [1 + 1.0, -2 + 2.5])
        with pytest.raises(MXNetError, match="built-in optimizers"):
            trainer.save_states("unused.states")
    finally:
        del optimizer.Optimizer.opt_registry["halfstep"]


def test_optimizer_update_is_mxnet_api():
    """Optimizer.update(index, weight, grad, state) on NDArrays, as MXNet code calls it."""
    adam = optimizer.Adam(learning_rate=0.1)
    weight = nd.array([1.0, -1.0])
    state = adam.create_state(0, weight)
    assert isinstance(state, tuple) and len(state) == 2
    adam.update(0, weight, nd.array([1.0, 1.0]), state)
    np.testing.assert_allclose(weight.asnumpy(), [0.9, -1.1], rtol=1e-6)
    assert adam.num_update == 1 and adam._index_update_count == {0: 1}
    rms = optimizer.RMSProp(centered=True)
    assert len(rms.create_state(0, weight)) == 3
    assert len(optimizer.RMSProp().create_state(0, weight)) == 1
    assert optimizer.SGD().create_state(0, weight) is None
    assert isinstance(optimizer.NAG(momentum=0.9).create_state(0, weight), mxdeconv.NDArray)


# -- save_states / load_states -------------------------------------------------------
def trained(opt="adam", steps=2, **kwargs):
    params = quadratic_params()
    trainer = gluon.Trainer(params, opt, dict({"learning_rate": 0.1}, **kwargs))
    for _ in range(steps):
        backward(params)
        trainer.step(1)
    return params, trainer


def test_states_round_trip(tmp_path):
    params, trainer = trained("sgd", momentum=0.9,
                              lr_scheduler=lr_scheduler.FactorScheduler(1, 0.5, base_lr=0.1))
    path = tmp_path / "t.states"
    trainer.save_states(str(path))
    other = gluon.Trainer(params, "adam")
    other.load_states(str(path))
    opt = other.optimizer
    assert type(opt) is optimizer.SGD and opt.momentum == 0.9 and opt.num_update == 2
    assert opt.lr_scheduler.base_lr == trainer.optimizer.lr_scheduler.base_lr == 0.05
    np.testing.assert_array_equal(other._states[0].asnumpy(), trainer._states[0].asnumpy())
    assert opt.param_dict[1] is params["b"]
    again = tmp_path / "again.states"
    other.save_states(str(again))
    with zipfile.ZipFile(path) as first, zipfile.ZipFile(again) as second:
        assert first.read("meta.npy") == second.read("meta.npy")


def damage(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        path.write_bytes(data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])
    elif how == "pickle":  # what MXNet's save_states writes
        path.write_bytes(pickle.dumps(({0: None}, "an optimizer")))
    elif how == "npy":
        np.save(open(path, "wb"), np.zeros(3))
    elif how == "other_npz":
        np.savez(open(path, "wb"), weight=np.zeros(3))
    else:
        with zipfile.ZipFile(path) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        meta = np.lib.format.read_array(io.BytesIO(members.pop("meta.npy")))
        text = meta.tobytes().decode()
        arrays = {name[:-4]: np.lib.format.read_array(io.BytesIO(raw))
                  for name, raw in members.items()}
        if how == "not_json":
            text = text[:-3]
        elif how == "format":
            text = text.replace("mxdeconv.gluon.Trainer states", "something else")
        elif how == "optimizer":
            text = text.replace('"optimizer": "adam"', '"optimizer": "os.system"')
        elif how == "argument":
            text = text.replace('"beta1": 0.9', '"beta1": "0.9"')
        elif how == "extra":
            arrays["state_9_0"] = np.zeros(2, np.float32)
        elif how == "shape":
            arrays["state_0_0"] = np.zeros(5, np.float32)
        elif how == "missing":
            del arrays["state_0_1"]
        np.savez(open(path, "wb"), meta=np.frombuffer(text.encode(), np.uint8), **arrays)


@pytest.mark.parametrize("how,message", [
    ("truncated", "not a states file"), ("flipped", "not a states file"),
    ("pickle", "MXNet's pickled states are not read"), ("npy", "a .npy file"),
    ("other_npz", "no 'meta' member"), ("not_json", "not JSON"),
    ("format", "does not name the format"), ("optimizer", "built-in optimizer's name"),
    ("argument", "arguments are invalid"), ("extra", r"unexpected members \[.state_9_0.\]"),
    ("shape", r"has shape \(5,\) but Parameter 'a' has shape \(2,\)"),
    ("missing", "array 'state_0_1' is missing"),
])
def test_load_states_refuses_damaged_or_foreign_files(tmp_path, how, message):
    params, trainer = trained("adam")
    path = tmp_path / "t.states"
    trainer.save_states(str(path))
    damage(path, how)
    opt, states = trainer.optimizer, dict(trainer._states)
    with pytest.raises(MXNetError, match=message):
        trainer.load_states(str(path))
    assert trainer.optimizer is opt and trainer._states == states


def test_load_states_checks_the_parameters(tmp_path):
    params, trainer = trained("adam")
    path = tmp_path / "t.states"
    trainer.save_states(str(path))
    other = gluon.Parameter("other", shape=(3,))
    other.initialize()
    with pytest.raises(MXNetError, match=r"has shape \(2,\) but Parameter 'other'"):
        gluon.Trainer([other, params["b"]], "adam").load_states(str(path))
    with pytest.raises(MXNetError, match="not one of this Trainer's 1 parameters"):
        gluon.Trainer([params["a"]], "adam").load_states(str(path))


def test_save_states_is_atomic(tmp_path):
    params, trainer = trained("sgd")
    path = tmp_path / "t.states"
    path.write_bytes(b"previous")
    trainer.optimizer.lr_scheduler = type("Mine", (lr_scheduler.LRScheduler,),
                                          {"__call__": lambda self, n: 0.1})()
    with pytest.raises(MXNetError, match="built-in lr_schedulers"):
        trainer.save_states(str(path))
    assert path.read_bytes() == b"previous" and sorted(p.name for p in tmp_path.iterdir()) == [
        "t.states"]
    with pytest.raises(MXNetError):
        trainer.load_states(str(tmp_path / "missing.states"))
