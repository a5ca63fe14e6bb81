"""The kernel check's projected comparison (Freivalds' check).

An exact float32 result is compared through random projections of its
channels, whose reference costs a channel count less than the full one.
These tests hold it to two things: a right result is accepted through the
projections alone (the full reference is never made), on every kind of
geometry; and a wrong one, whatever the defect, is refused with the same
element-by-element reason as before.  The "plans" here are the NumPy path's
float32 results (exact on the check's integer inputs), so the tests do not
depend on which kernels oneDNN offers on this CPU.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mxdeconv.onednn import kernel_check, projections
from mxdeconv.semantics import deconv_numpy
from mxdeconv.semantics.attributes import infer_geometry, parse_params

LAYERS = {
    "2-D k4 s2 p1": ((3, 24, 5, 5), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                         num_filter=40)),
    "grouped": ((2, 24, 6, 6), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_group=4,
                                    num_filter=16)),
    "depthwise": ((2, 8, 7, 7), dict(kernel=(3, 3), stride=(1, 1), pad=(1, 1), num_group=8,
                                     num_filter=8)),
    "1-D dilated": ((4, 16, 30), dict(kernel=(5,), stride=(3,), dilate=(2,), pad=(2,),
                                      num_filter=12)),
    "3-D adj": ((2, 8, 3, 4, 5), dict(kernel=(2, 3, 3), stride=(2, 2, 1), pad=(0, 1, 1),
                                      adj=(1, 1, 0), num_filter=6)),
    "target shape": ((1, 10, 6, 6), dict(kernel=(5, 5), stride=(3, 3), target_shape=(17, 18),
                                         num_filter=9)),
    "wide": ((2, 256, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128)),
}


def _geometry(name, bias=True):
    shape, params = LAYERS[name]
    return infer_geometry(parse_params(dict(params, no_bias=not bias)), shape)


def _float32(*arrays):
    """A plan's inputs as a float32 plan takes them: the check hands over its
    small integers as int8, and the binding converts them."""
    return [None if a is None else np.asarray(a, np.float32) for a in arrays]


class RightForward:
    """The NumPy path's float32 forward: exact on the check's inputs."""

    def __init__(self, geom):
        self.geom = geom

    def run_plain(self, src, weights, bias, dst_init=None):
        src, weights, bias, dst_init = _float32(src, weights, bias, dst_init)
        out = deconv_numpy.forward(self.geom, src, weights, bias)
        return out if dst_init is None else out + dst_init


class RightBackwardData(RightForward):
    def run_plain(self, diff_dst, weights):
        diff_dst, weights = _float32(diff_dst, weights)
        return deconv_numpy.backward(self.geom, diff_dst,
                                     np.zeros(self.geom.data_shape, np.float32), weights,
                                     need_weight=False, need_bias=False)[0]


class RightBackwardWeights(RightForward):
    def run_plain(self, src, diff_dst):
        src, diff_dst = _float32(src, diff_dst)
        return deconv_numpy.backward(self.geom, diff_dst, src,
                                     np.zeros(self.geom.weight_shape, np.float32),
                                     need_data=False)[1:]


def _defects(result):
    """Wrong results a kernel could give, each a copy of ``result`` (float32)."""
    flat_index = result.size // 3
    one_off = result.copy()
    one_off.flat[flat_index] += 1
    fraction = result.copy()
    fraction.flat[flat_index] += 0.0028  # an uninitialised read, within 0.5 of the integer
    pixel = result.copy()  # every channel of one pixel off by a bias-like vector
    pixel.reshape(result.shape[0], result.shape[1], -1)[-1, :, -1] += \
        np.arange(result.shape[1]) % 4 - 2 + (np.arange(result.shape[1]) % 4 >= 2)
    swapped = result.copy()  # two channels' values exchanged (a wrong channel offset)
    swapped[:, [0, -1]] = result[:, [-1, 0]]
    not_a_number = result.copy()
    not_a_number.flat[flat_index] = np.nan
    infinite = result.copy()
    infinite.flat[flat_index] = np.inf
    huge = result.copy()
    huge.flat[flat_index] = 2.0 ** 30
    return {"one off": one_off, "fraction": fraction, "pixel": pixel, "swapped": swapped,
            "nan": not_a_number, "inf": infinite, "huge": huge}


@pytest.fixture
def full_comparisons(monkeypatch):
    """The names of the element-by-element comparisons made."""
    made = []
    real = kernel_check._compare

    def compare(what, *args, **kwargs):
        made.append(what)
        return real(what, *args, **kwargs)
    monkeypatch.setattr(kernel_check, "_compare", compare)
    return made


def _check_and_plan(what, geom):
    if what in ("forward", "accumulate"):
        return (kernel_check.forward_check(geom, "float32", what == "accumulate"),
                RightForward(geom))
    if what == "backward_data":
        return kernel_check.backward_data_check(geom, "float32"), RightBackwardData(geom)
    return kernel_check.backward_weights_check(geom, "float32"), RightBackwardWeights(geom)


PASSES = ["forward", "accumulate", "backward_data", "backward_weights"]


@pytest.mark.parametrize("what", PASSES)
@pytest.mark.parametrize("name", list(LAYERS))
def test_a_right_result_is_accepted_through_the_projections_alone(what, name,
                                                                  full_comparisons):
    geom = _geometry(name, bias=name != "grouped")
    check, plan = _check_and_plan(what, geom)
    assert check(plan) is None
    # Only the bias gradient (a sum, cheap in full) is compared element by element.
    assert set(full_comparisons) <= {"backward bias"}


class Planted:
    """A right plan whose result gets ``defect`` (a function of the result)."""

    def __init__(self, plan, defect):
        self._plan, self._defect = plan, defect

    def run_plain(self, *inputs):
        result = self._plan.run_plain(*inputs)
        if isinstance(result, tuple):  # backward weights: the weight gradient
            return (self._defect(result[0]),) + tuple(result[1:])
        return self._defect(result)


@pytest.mark.parametrize("what", PASSES)
@pytest.mark.parametrize("defect", list(_defects(np.zeros((2, 4, 3), np.float32))))
@pytest.mark.parametrize("name", ["2-D k4 s2 p1", "grouped", "3-D adj", "wide"])
def test_every_defect_is_refused_with_the_element_by_element_reason(what, defect, name,
                                                                    full_comparisons):
    geom = _geometry(name)
    check, plan = _check_and_plan(what, geom)
    reason = check(Planted(plan, lambda result: _defects(result)[defect]))
    assert reason is not None and "values wrong" in reason, reason
    assert full_comparisons[0] != "backward bias"  # the projections refused it first
    assert check(plan) is None  # and the same check still accepts the right result


def test_a_wrong_result_that_fits_the_projected_bound_is_refused():
    """A defect confined to one pixel whose channel errors are random integers:
    the projections see it (each misses it with probability under 2**-20)."""
    geom = _geometry("wide")
    check, plan = _check_and_plan("forward", geom)
    rng = np.random.default_rng(3)

    def spread(result):
        wrong = result.copy()
        wrong[1, :, 2, 3] += rng.integers(-2, 3, geom.param.num_filter)
        wrong[1, 0, 2, 3] += 1  # never all zero
        return wrong
    assert "values wrong" in check(Planted(plan, spread))


def test_projections_need_float64_room_else_the_result_is_compared_in_full(full_comparisons):
    assert projections.Projection.fitting(0, 1, 2 ** 20, 2.0 ** 23) is None
    fitted = projections.Projection.fitting(0, 2, 64, 1000.0)
    assert fitted is not None and fitted.vectors.shape == (2, projections.PROJECTIONS, 32)
    assert np.abs(fitted.vectors).max() <= 2 ** 20
    # A layer whose sums reach float32's exact limit is compared in full.
    geom = infer_geometry(parse_params(dict(kernel=(64, 64), stride=(32, 32), num_filter=2,
                                            no_bias=True)), (1, 1100, 1, 1))
    check, plan = _check_and_plan("forward", geom)
    assert check(plan) is None
    assert full_comparisons == ["forward"]


def test_projections_are_exact_integers_of_the_values():
    fitted = projections.Projection.fitting(1, 3, 12, 100.0)
    values = np.random.default_rng(0).integers(-100, 101, (12, 7, 5)).astype(np.float32)
    projected = fitted.project(values)
    expected = np.einsum("gpc,gcx->gpx", fitted.vectors.astype(object),
                         values.reshape(3, 4, 35).astype(np.int64).astype(object))
    assert projected.shape == (3, projections.PROJECTIONS, 35)
    assert (projected == expected.astype(np.float64)).all()
    assert projections.exact_integers(values, 100.0)
    assert not projections.exact_integers(values, float(np.abs(values).max()) - 1)
    values.flat[5] = 0.5
    assert not projections.exact_integers(values, 100.0)


def test_both_backward_checks_share_one_projected_reference(monkeypatch):
    """A layer's backward-data and backward-weights checks run on the same
    call: one phase-wise pass over their shared out_grad gives both
    references, and no full reference is made for right results."""
    geom = _geometry("3-D adj")
    kernel_check._backward_case.cache_clear()
    made, narrowed = [], []
    real, real_narrow = kernel_check.deconv_numpy.backward, kernel_check._narrow_backward

    def backward(*args, **kwargs):
        made.append(args[0])
        return real(*args, **kwargs)

    def narrow_backward(*args, **kwargs):
        narrowed.append(args[0])
        return real_narrow(*args, **kwargs)
    monkeypatch.setattr(kernel_check.deconv_numpy, "backward", backward)
    monkeypatch.setattr(kernel_check, "_narrow_backward", narrow_backward)
    data_check, data_plan = _check_and_plan("backward_data", geom)
    weights_check, weights_plan = _check_and_plan("backward_weights", geom)
    assert data_check(data_plan) is None and weights_check(weights_plan) is None
    # (The "plans" here are the NumPy path's own backward: one call each.)
    assert narrowed == [geom] and len(made) == 2


def _narrow_layer_reference(geom, case):
    """The projected references as deconv_numpy computes them: im2col on the
    layer with PROJECTIONS data channels per group."""
    param = geom.param
    narrow = kernel_check._one_image_with(geom, param.num_group * projections.PROJECTIONS,
                                          param.num_filter)
    weight = case.data_projection.project(case.weight).reshape(narrow.weight_shape)
    image = case.weight_projection.project(case.image[0]).reshape(narrow.data_shape)
    data_grad, weight_grad, _ = deconv_numpy.backward(
        narrow, case.grad.astype(np.float64), image, weight, need_bias=False)
    return (data_grad.reshape(param.num_group, projections.PROJECTIONS, -1),
            weight_grad.reshape(param.num_group, projections.PROJECTIONS, -1))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_phase_wise_projected_references_are_im2cols(name):
    """The backward checks' projected references, computed phase by phase over
    out_grad, equal the NumPy path's im2col on the narrowed layer exactly
    (crops, adj, dilation, groups, depthwise, 1-D to 3-D)."""
    geom = _geometry(name)
    case = kernel_check._BackwardCase(geom)
    want = _narrow_layer_reference(geom, case)
    got = case.projected()
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@settings(max_examples=60, deadline=None)
@given(ndim=st.integers(1, 3), data=st.data())
def test_the_phase_wise_projected_references_on_random_layers(ndim, data):
    """As above, on random small layers: kernels up to 5, strides up to 3,
    dilations up to 2, any pad and adj below the stride, groups."""
    ints = lambda low, high: st.tuples(*[st.integers(low, high)] * ndim)  # noqa: E731
    kernel, stride, dilate = data.draw(ints(1, 5)), data.draw(ints(1, 3)), data.draw(ints(1, 2))
    pad = tuple(data.draw(st.integers(0, k - 1)) for k in kernel)
    adj = tuple(data.draw(st.integers(0, s - 1)) for s in stride)
    groups = data.draw(st.sampled_from([1, 2]))
    shape = (1, groups * data.draw(st.integers(1, 3))) + data.draw(ints(1, 6))
    try:
        geom = infer_geometry(parse_params(dict(
            kernel=kernel, stride=stride, dilate=dilate, pad=pad, adj=adj, num_group=groups,
            num_filter=groups * data.draw(st.integers(1, 3)))), shape)
    except ValueError:
        assume(False)
    case = kernel_check._BackwardCase(geom)
    assume(case.data_projection is not None and case.weight_projection is not None)
    want = _narrow_layer_reference(geom, case)
    got = case.projected()
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_backward_checks_of_several_layers_on_several_threads():
    """The shared backward case is one per layer, evicted as layers alternate,
    and made under a lock: checks of two layers on four threads at once all
    accept their right results and refuse their wrong ones."""
    import threading
    kernel_check._backward_case.cache_clear()
    names = ["grouped", "3-D adj"]
    results, errors = [], []

    def work(index):
        try:
            for round_ in range(3):
                geom = _geometry(names[(index + round_) % 2])
                for what in ("backward_data", "backward_weights"):
                    check, plan = _check_and_plan(what, geom)
                    results.append(check(plan) is None)
                    wrong = check(Planted(plan, lambda r: _defects(r)["one off"]))
                    results.append(wrong is not None and "values wrong" in wrong)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 4 * 3 * 2 * 2 and all(results)


def _malformed_results(result):
    """Results no kernel may return, whatever their values."""
    return {"first image only": result[:1], "no image": result[:0],
            "an image more": np.concatenate([result, result[:1] * 1]),
            "complex": result.astype(np.complex64) + 7j,
            "a list": result.tolist(), "a 0-d array": np.float32(1.0).reshape(())}


@pytest.mark.parametrize("what", PASSES)
@pytest.mark.parametrize("kind", list(_malformed_results(np.zeros((2, 3), np.float32))))
def test_a_result_of_the_wrong_shape_or_kind_is_refused_with_a_reason(what, kind):
    geom = _geometry("2-D k4 s2 p1")
    check, plan = _check_and_plan(what, geom)
    reason = check(Planted(plan, lambda result: _malformed_results(result)[kind]))
    assert isinstance(reason, str) and reason, kind


@pytest.mark.parametrize("got", [None, np.zeros(3, np.float32), (1, 2, 3)],
                         ids=["none", "an array", "three results"])
def test_a_backward_weights_result_that_is_not_a_pair_is_refused(got):
    check, _ = _check_and_plan("backward_weights", _geometry("grouped"))

    class Returns:
        def run_plain(self, *inputs):
            return got
    reason = check(Returns())
    assert isinstance(reason, str) and "backward weights" in reason


@pytest.mark.parametrize("what", ["forward", "backward_data"])
def test_no_channel_of_a_depthwise_1x1_layer_is_invisible(what):
    """The check's weights are never 0: with one weight per channel, a zero
    would hide a kernel that counts a channel's products twice."""
    geom = infer_geometry(parse_params(dict(kernel=(1, 1), num_group=16, num_filter=16,
                                            no_bias=True)), (2, 16, 3, 3))
    check, plan = _check_and_plan(what, geom)
    for channel in range(16):
        def doubled(result, channel=channel):
            bad = result.copy()
            bad[:, channel] *= 2
            return bad
        assert check(Planted(plan, doubled)) is not None, channel


@pytest.mark.parametrize("params, shape", [
    (dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=32), (3, 24, 6, 6)),
    (dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64, num_group=2),
     (3, 48, 6, 6)),
    (dict(kernel=(2, 2), stride=(2, 2), num_filter=32), (3, 24, 6, 6)),   # GEMM scatter
    (dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2), pad=(2, 2), adj=(1, 1),
          num_filter=16), (2, 8, 6, 6)),                                  # sub-grid plans
    (dict(kernel=(8,), stride=(4,), pad=(2,), num_filter=32), (2, 16, 20)),
    (dict(kernel=(4, 4, 4), stride=(2, 2, 2), pad=(1, 1, 1), num_filter=32, num_group=2),
     (2, 32, 3, 4, 4))],
    ids=["overlapping", "grouped", "non-overlapping", "sub-grid", "1-D", "3-D grouped"])
def test_every_plan_takes_the_checks_int8_inputs_as_their_values(params, shape):
    """The check hands a float32 plan its small integers as int8, which the
    binding converts as it lays them out (by oneDNN's reorder into a blocked
    layout, by NumPy into a plain one): every candidate of every pass, oneDNN's
    and mxdeconv's own (GEMM, sub-grid), gives exactly what it gives on the
    same values in float32."""
    from mxdeconv import _ops
    geom = infer_geometry(parse_params(dict(params, no_bias=False)), shape)
    rng = np.random.default_rng(7)
    data, weight, out_grad = (rng.integers(-2, 2, size).astype(np.int8) for size in
                              (geom.data_shape, geom.weight_shape, geom.out_shape))
    bias = rng.integers(-2, 2, geom.bias_shape).astype(np.float32)
    passes = [(_ops.forward_candidates(geom, "float32", False, False), (data, weight, bias)),
              (_ops.backward_data_candidates(geom, "float32"), (out_grad, weight)),
              (_ops.backward_weights_candidates(geom, "float32"), (data, out_grad))]
    seen = set()
    for candidates, inputs in passes:
        for candidate in candidates:
            if candidate.is_reference:
                continue
            plan = candidate.build()
            widened = [a if a.dtype != np.int8 else a.astype(np.float32) for a in inputs]
            got, want = plan.run_plain(*inputs), plan.run_plain(*widened)
            for one, other in zip(*((got, want) if isinstance(got, tuple) else
                                    ((got,), (want,)))):
                assert np.array_equal(one, other), repr(candidate)
            seen.add(candidate.impl)
    assert len(seen) >= 3
