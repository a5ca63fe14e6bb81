"""gluon.loss against MXNet 1.9.1: the loss values and the gradients of the
prediction and the label, for tests/data/trainer_cases.py's LOSS_CASES (recorded
by scripts/fixtures/make_mxnet_trainer_fixtures.py in tests/data/mxnet_loss.npz), then
the argument rules."""
import sys

import numpy as np
import pytest

from mxdeconv import MXNetError, autograd, gluon, nd

from helpers import DATA

sys.path.insert(0, str(DATA))
import trainer_cases as cases  # noqa: E402

FIXTURE = np.load(DATA / "mxnet_loss.npz")
# float32 sums of <= 18 terms of order 1-40 (log-sum-exp, means): MXNet and NumPy
# round and sum in other orders, measured <= 3.4e-6 on values of order 1-20.
RTOL, ATOL = 2e-6, 2e-6


def fixture_arrays(name):
    return {key: FIXTURE[f"{name}/{key}"] for key in ("pred", "label", "sample_weight",
                                                      "pos_weight")
            if f"{name}/{key}" in FIXTURE}


@pytest.mark.parametrize("name", sorted(cases.LOSS_CASES))
def test_loss_and_gradients_match_mxnet(name):
    loss, pred_grad, label_grad = cases.run_loss_case(
        cases.LOSS_CASES[name], fixture_arrays(name), autograd, gluon, nd,
        FIXTURE[f"{name}/head"])
    for got, key in ((loss, "loss"), (pred_grad, "pred_grad"), (label_grad, "label_grad")):
        want = FIXTURE[f"{name}/{key}"]
        assert got.shape == want.shape and got.dtype == np.float32, key
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * max(1, np.abs(want).max()),
                                   err_msg=f"{name}: {key}")
    assert np.abs(pred_grad).max() > 1e-3  # a gradient flowed


def test_reprs_names_and_aliases():
    assert repr(gluon.loss.L2Loss()) == "L2Loss(batch_axis=0, w=1.0)"
    assert repr(gluon.loss.L1Loss(batch_axis=1)) == "L1Loss(batch_axis=1, w=None)"
    assert gluon.loss.SigmoidBCELoss is gluon.loss.SigmoidBinaryCrossEntropyLoss
    assert gluon.loss.SoftmaxCELoss is gluon.loss.SoftmaxCrossEntropyLoss
    loss = gluon.loss.SoftmaxCELoss()
    assert loss.prefix.startswith("softmaxcrossentropyloss") and loss.prefix.endswith("_")
    assert gluon.loss.L1Loss(prefix="l1_").name == "l1"
    assert len(loss.collect_params()) == 0
    loss.initialize()
    loss.hybridize()


def test_pos_weight_by_keyword_or_position():
    bce = gluon.loss.SigmoidBCELoss()
    pred, label = nd.array([[0.5, -1.0, 2.0]]), nd.array([[1.0, 0.0, 1.0]])
    pos_weight = nd.array([[2.0, 1.0, 3.0]])
    by_position = bce(pred, label, None, pos_weight).asnumpy()
    np.testing.assert_array_equal(bce(pred, label, pos_weight=pos_weight).asnumpy(),
                                  by_position)
    assert (by_position > bce(pred, label).asnumpy()).all()


def test_numpy_inputs_and_large_logits():
    ce = gluon.loss.SoftmaxCrossEntropyLoss()
    loss = ce(np.array([[1000.0, 0.0], [0.0, -1000.0]], np.float32), np.array([1, 1]))
    np.testing.assert_allclose(loss.asnumpy(), [1000.0, 1000.0])
    bce = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    pred = nd.array([[-1000.0, 1000.0]])
    pred.attach_grad()
    with autograd.record():
        loss = bce(pred, nd.array([[1.0, 0.0]]))
    loss.backward()
    np.testing.assert_allclose(loss.asnumpy(), [1000.0])
    np.testing.assert_allclose(pred.grad.asnumpy(), [[-0.5, 0.5]])  # (sigmoid - label) / 2


def test_custom_loss_gets_the_nd_module():
    class Scaled(gluon.loss.Loss):
        def __init__(self, **kwargs):
            super().__init__(weight=3.0, batch_axis=0, **kwargs)

        def hybrid_forward(self, F, pred, label):
            assert F is nd
            return (self._weight * F.relu(pred - label)).mean(axis=0, exclude=True)

    np.testing.assert_array_equal(Scaled()(nd.array([[2.0, -1.0]]), nd.zeros((1, 2))).asnumpy(),
                                  [3.0])
    with pytest.raises(NotImplementedError, match="Loss defines no hybrid_forward"):
        gluon.loss.Loss(None, 0)(nd.ones((1,)), nd.ones((1,)))


@pytest.mark.parametrize("make,error,message", [
    (lambda: gluon.loss.L2Loss(weight=None), TypeError, "weight must be a number"),
    (lambda: gluon.loss.L1Loss(weight="2"), TypeError, "weight must be a real number"),
    (lambda: gluon.loss.L1Loss(batch_axis=0.0), TypeError, "batch_axis must be an int"),
    (lambda: gluon.loss.SoftmaxCELoss(axis="1"), TypeError, "axis must be an int"),
    (lambda: gluon.loss.SoftmaxCELoss(sparse_label="no"), TypeError, "sparse_label must be"),
    (lambda: gluon.loss.SigmoidBCELoss(from_sigmoid=2), TypeError, "from_sigmoid must be"),
    (lambda: gluon.loss.L2Loss(params={}), MXNetError, "params must be None"),
])
def test_constructor_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("call,error,message", [
    (lambda: gluon.loss.L2Loss()(nd.ones((2, 3)), nd.ones((2, 2))), MXNetError,
     r"label of shape \(2, 2\) cannot be reshaped to pred's shape \(2, 3\)"),
    (lambda: gluon.loss.L1Loss(batch_axis=2)(nd.ones((2, 3)), nd.ones((2, 3))), MXNetError,
     "L1Loss: batch_axis=2 is out of range"),
    (lambda: gluon.loss.SoftmaxCELoss(axis=2)(nd.ones((2, 3)), nd.ones((2,))), MXNetError,
     "SoftmaxCrossEntropyLoss: axis=2 is out of range"),
    (lambda: gluon.loss.SoftmaxCELoss()(nd.ones((2, 3)), nd.ones((3,))), MXNetError,
     r"pick: index has shape \(3,\), expected \(2,\)"),
    (lambda: gluon.loss.L2Loss()(nd.ones((2, 3)), nd.ones((2, 3)), nd.ones((3, 1))), MXNetError,
     "could not be broadcast"),
    (lambda: gluon.loss.L2Loss()("pred", nd.ones((2, 3))), TypeError, "L2Loss: pred must be"),
])
def test_call_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()
