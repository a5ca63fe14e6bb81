"""Layout and state safety: arrays reused across roles and calls, threads, fork,
thread counts, autograd ``out=``, pickling, memory shared outside mxdeconv.

A blocked buffer means nothing without knowing which tensor it holds: a
weight's oneDNN dims are ``(O, I, *k)`` while its NDArray shape is
``(I, O, *k)``, so with C_in == num_filter a weight layout and an activation
layout can share dims.  Every test here compares with the independent
scatter-loop reference on fresh default-layout copies, and checks that no
input ever changes value.
"""
import copy
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import mxdeconv
from mxdeconv import MXNetError, autograd, nd
from reference import reference_backward, reference_forward

TOL = dict(rtol=1e-4, atol=1e-4)


#: oneDNN's own first choice: blocked layouts here on every run (conftest).
pytestmark = pytest.mark.usefixtures("onednn_first_choice")


def values(arr):
    """An NDArray's values without changing its layout (a test-only peek)."""
    buffer, layout = arr._state
    return buffer.copy() if layout is None else layout.to_plain(buffer, None)


class Layers:
    """Three layers through which one square shape S = (16, 16, *[3]*d) plays
    every role: data and out of A (k1), weight of B (k3 on a batch), weight and
    out of C (k3 on 1x1 data)."""

    def __init__(self, ndim):
        self.ndim = ndim
        self.k1, self.k3 = (1,) * ndim, (3,) * ndim
        self.square = (16, 16) + (3,) * ndim
        self.b_data = (2, 16) + (2,) * ndim
        self.b_out = (2, 16) + (4,) * ndim
        self.c_data = (16, 16) + (1,) * ndim
        self.a_weight = (16, 16) + self.k1

    def kwargs(self, kernel):
        return dict(kernel=kernel, num_filter=16)

    def ref(self, data, weight, kernel, bias=None):
        zero = (0,) * self.ndim
        return reference_forward(data, weight, bias, kernel=kernel, stride=(1,) * self.ndim,
                                 dilate=(1,) * self.ndim, pad_l=zero, pad_r=zero,
                                 num_group=1)

    def ref_backward(self, out_grad, data, weight, kernel):
        zero = (0,) * self.ndim
        return reference_backward(out_grad, data, weight, kernel=kernel,
                                  stride=(1,) * self.ndim, dilate=(1,) * self.ndim,
                                  pad_l=zero, pad_r=zero, num_group=1, with_bias=False)


def _rand(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _blocked(layers, rng, role):
    """A square array left in a blocked layout by oneDNN, in ``role``."""
    if role == "weight":
        arr = nd.array(_rand(rng, layers.square, 0.2))
        with autograd.predict_mode():
            nd.Deconvolution(nd.array(_rand(rng, layers.b_data)), arr,
                             **layers.kwargs(layers.k3))
    else:  # the result of layer C: an activation-layout square array
        arr = nd.Deconvolution(nd.array(_rand(rng, layers.c_data)),
                               nd.array(_rand(rng, layers.square, 0.2)),
                               **layers.kwargs(layers.k3))
    if arr.layout == "default":
        pytest.skip("oneDNN chose plain layouts on this CPU: nothing blocked to reuse")
    return arr


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_a_blocked_weight_read_as_data_is_not_misread(ndim):
    layers, rng = Layers(ndim), np.random.default_rng(0)
    w = _blocked(layers, rng, "weight")
    before = values(w)
    a_weight = _rand(rng, layers.a_weight)
    y = nd.Deconvolution(w, a_weight, **layers.kwargs(layers.k1))
    np.testing.assert_allclose(y.asnumpy(), layers.ref(before, a_weight, layers.k1), **TOL)
    np.testing.assert_array_equal(values(w), before)


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("training", [False, True])
def test_a_blocked_result_used_as_a_weight_is_not_transposed(ndim, training):
    layers, rng = Layers(ndim), np.random.default_rng(1)
    r = _blocked(layers, rng, "result")
    before = values(r)
    data = _rand(rng, layers.b_data)
    with autograd.train_mode() if training else autograd.predict_mode():
        for _ in range(2):  # the second inference call uses the kept weight
            y = nd.Deconvolution(data, r, **layers.kwargs(layers.k3))
            np.testing.assert_allclose(y.asnumpy(), layers.ref(data, before, layers.k3),
                                       **TOL)
    np.testing.assert_array_equal(values(r), before)
    np.testing.assert_array_equal(r.asnumpy(), before)


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("req", ["write", "add"])
def test_a_blocked_weight_as_out_is_written_as_an_activation(ndim, req):
    layers, rng = Layers(ndim), np.random.default_rng(2)
    w = _blocked(layers, rng, "weight")
    before = values(w)
    data, weight = _rand(rng, layers.square), _rand(rng, layers.a_weight)
    nd.Deconvolution(data, weight, out=w, req=req, **layers.kwargs(layers.k1))
    expected = layers.ref(data, weight, layers.k1) + (before if req == "add" else 0)
    np.testing.assert_allclose(w.asnumpy(), expected, **TOL)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_blocked_arrays_as_out_grad_and_grads_of_another_role(ndim):
    layers, rng = Layers(ndim), np.random.default_rng(3)
    og = _blocked(layers, rng, "weight")           # a weight layout, read as out_grad of C
    grad_target = _blocked(layers, rng, "result")  # an activation layout, gets C's weight grad
    og_before = values(og)
    data, weight = _rand(rng, layers.c_data), _rand(rng, layers.square, 0.2)
    dx, dw, _ = nd.Deconvolution_backward(og, data, weight, grads=[None, grad_target, None],
                                          **layers.kwargs(layers.k3))
    ref_dx, ref_dw, _ = layers.ref_backward(og_before, data, weight, layers.k3)
    assert dw is grad_target
    np.testing.assert_allclose(dx.asnumpy(), ref_dx, **TOL)
    np.testing.assert_allclose(grad_target.asnumpy(), ref_dw, **TOL)
    np.testing.assert_array_equal(values(og), og_before)


class ArraysAcrossRoles(RuleBasedStateMachine):
    """Random sequences of calls reusing a pool of square NDArrays as data,
    weight, out, out_grad and gradient targets, in training and inference: every
    result equals the reference on fresh default-layout copies, and no input
    ever changes value."""

    ndim = 2

    @initialize()
    def setup(self):
        self.layers = Layers(self.ndim)
        self.rng = np.random.default_rng(11)
        self.pool = [nd.array(_rand(self.rng, self.layers.square, 0.3)) for _ in range(4)]
        self.truth = [values(a) for a in self.pool]
        self.a_weight = _rand(self.rng, self.layers.a_weight, 0.3)
        self.b_data = _rand(self.rng, self.layers.b_data)
        self.c_data = _rand(self.rng, self.layers.c_data)

    def _mode(self, training):
        return autograd.train_mode() if training else autograd.predict_mode()

    def _target(self, index):
        return None if index is None else self.pool[index]

    def _check_result(self, result, expected, k):
        """Check a float32 result against the float64 reference; what pool[k]
        now holds becomes its truth.  Results feed later calls, so values grow
        and float32 rounding grows with them: the tolerance scales with the
        result's magnitude, while a misread layout errs by that whole magnitude."""
        got = values(result)
        scale = float(np.abs(expected).max(initial=0.0))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 + 1e-6 * scale)
        if k is not None:
            self.truth[k] = got

    @rule(i=st.integers(0, 3), k=st.none() | st.integers(0, 3),
          req=st.sampled_from(["write", "add"]), training=st.booleans())
    def forward_a(self, i, k, req, training):
        """pool[i] as data of A; result into pool[k]."""
        if k is None:
            req = "write"
        expected = self.layers.ref(self.truth[i], self.a_weight, self.layers.k1)
        with self._mode(training):
            y = nd.Deconvolution(self.pool[i], self.a_weight, out=self._target(k), req=req,
                                 **self.layers.kwargs(self.layers.k1))
        if k is not None:
            expected = expected + (self.truth[k] if req == "add" else 0)
        self._check_result(y, expected, k)

    @rule(j=st.integers(0, 3), training=st.booleans())
    def forward_b(self, j, training):
        """pool[j] as the weight of B."""
        with self._mode(training):
            y = nd.Deconvolution(self.b_data, self.pool[j], **self.layers.kwargs(self.layers.k3))
        np.testing.assert_allclose(values(y), self.layers.ref(self.b_data, self.truth[j],
                                                              self.layers.k3), **TOL)

    @rule(j=st.integers(0, 3), k=st.none() | st.integers(0, 3), training=st.booleans())
    def forward_c(self, j, k, training):
        """pool[j] as the weight of C; result into pool[k]."""
        expected = self.layers.ref(self.c_data, self.truth[j], self.layers.k3)
        with self._mode(training):
            y = nd.Deconvolution(self.c_data, self.pool[j], out=self._target(k),
                                 **self.layers.kwargs(self.layers.k3))
        self._check_result(y, expected, k)

    @rule(i=st.integers(0, 3), j=st.integers(0, 3), k=st.none() | st.integers(0, 3))
    def backward_c(self, i, j, k):
        """pool[i] as out_grad and pool[j] as weight of C; weight grad into pool[k]."""
        _, ref_dw, _ = self.layers.ref_backward(self.truth[i], self.c_data, self.truth[j],
                                                self.layers.k3)
        _, dw, _ = nd.Deconvolution_backward(self.pool[i], self.c_data, self.pool[j],
                                             grads=[None, self._target(k), None],
                                             req=["null", "write", "null"],
                                             **self.layers.kwargs(self.layers.k3))
        self._check_result(dw, ref_dw, k)

    @rule(i=st.integers(0, 3), j=st.integers(0, 3), k=st.none() | st.integers(0, 3))
    def backward_a(self, i, j, k):
        """pool[i] as out_grad and pool[j] as data of A; data grad into pool[k]."""
        ref_dx, _, _ = self.layers.ref_backward(self.truth[i], self.truth[j], self.a_weight,
                                                self.layers.k1)
        dx, _, _ = nd.Deconvolution_backward(self.pool[i], self.pool[j], self.a_weight,
                                             grads=[self._target(k), None, None],
                                             req=["write", "null", "null"],
                                             **self.layers.kwargs(self.layers.k1))
        self._check_result(dx, ref_dx, k)

    @rule(i=st.integers(0, 3))
    def read(self, i):
        np.testing.assert_allclose(self.pool[i].asnumpy(), self.truth[i], **TOL)

    @invariant()
    def inputs_keep_their_values(self):
        if hasattr(self, "pool"):
            for arr, truth in zip(self.pool, self.truth):
                np.testing.assert_allclose(values(arr), truth, **TOL)


ArraysAcrossRoles.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestArraysAcrossRoles = ArraysAcrossRoles.TestCase


class ArraysAcrossRoles3D(ArraysAcrossRoles):
    ndim = 3


ArraysAcrossRoles3D.TestCase.settings = settings(
    max_examples=8, stateful_step_count=10, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestArraysAcrossRoles3D = ArraysAcrossRoles3D.TestCase


# -- autograd: out= an array of the graph --------------------------------------------
def test_out_into_a_recorded_variable_raises_like_mxnet():
    rng = np.random.default_rng(4)
    x = nd.array(_rand(rng, (1, 4, 3, 3)))
    w = nd.array(_rand(rng, (4, 4, 1, 1)))
    x.attach_grad()
    w.attach_grad()
    before = x.asnumpy()
    with autograd.record():
        with pytest.raises(MXNetError, match="out: Assigning to NDArrays that are already "
                                             "in a computational graph"):
            nd.Deconvolution(x, w, out=x, kernel=(1, 1), num_filter=4)
        y = nd.Deconvolution(x, w, kernel=(1, 1), num_filter=4)
        with pytest.raises(MXNetError, match="Assigning to NDArrays"):
            nd.Deconvolution(x, w, out=y, kernel=(1, 1), num_filter=4)
    np.testing.assert_array_equal(x.asnumpy(), before)
    y.backward(nd.ones(y.shape))
    expected_dw = reference_backward(np.ones(y.shape), before, w.asnumpy(), kernel=(1, 1),
                                     stride=(1, 1), dilate=(1, 1), pad_l=(0, 0),
                                     pad_r=(0, 0), num_group=1)[1]
    np.testing.assert_allclose(w.grad.asnumpy(), expected_dw, **TOL)
    # Outside record() (or after backward freed the graph) out= is fine, as in MXNet.
    nd.Deconvolution(x, w, out=y, kernel=(1, 1), num_filter=4)


# -- threads ---------------------------------------------------------------------------
@pytest.fixture
def fast_switching():
    """Python threads switch every microsecond: races show up within few trials."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _in_threads(check, count=6):
    """Run ``check(n)`` for n in range(count), each in its own thread, all at once;
    fail with the first error any of them raised."""
    errors = []

    def run(n):
        try:
            check(n)
        except Exception as error:  # noqa: BLE001
            errors.append(error)
    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]


def test_threads_reading_and_using_one_blocked_array(fast_switching):
    layers, rng = Layers(2), np.random.default_rng(5)
    for trial in range(15):
        y = _blocked(layers, rng, "result")
        expected = values(y)
        a_weight = _rand(rng, layers.a_weight)
        expected_a = layers.ref(expected, a_weight, layers.k1)

        def reader(n):
            kind = n % 3
            for _ in range(3):
                if kind == 0:
                    np.testing.assert_array_equal(y.asnumpy(), expected)
                elif kind == 1:
                    np.testing.assert_array_equal(np.asarray(y), expected)
                else:
                    out = nd.Deconvolution(y, a_weight, **layers.kwargs(layers.k1))
                    np.testing.assert_allclose(out.asnumpy(), expected_a, **TOL)
        _in_threads(reader)


def _run_python(code, env=None, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


# -- fork ------------------------------------------------------------------------------
def test_a_forked_child_runs_after_the_parent_used_threads():
    run = _run_python("""
        import os, numpy as np, mxdeconv
        from mxdeconv import nd, MXNetError
        mxdeconv.set_num_threads(2)
        x, w = nd.ones((2, 16, 8, 8)), nd.ones((16, 16, 3, 3))
        expected = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=16).asnumpy()
        pid = os.fork()
        if pid == 0:
            import faulthandler
            faulthandler.dump_traceback_later(30, exit=True)  # never outlive the test
            code = 1
            try:
                got = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=16).asnumpy()
                grads = nd.Deconvolution_backward(nd.ones((2, 16, 10, 10)), x, w,
                                                  kernel=(3, 3), num_filter=16)
                assert np.array_equal(got, expected)
                assert mxdeconv.get_num_threads() == 1
                try:
                    mxdeconv.set_num_threads(2)
                except MXNetError as error:
                    assert "fork" in str(error)
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        assert mxdeconv.get_num_threads() == 2
        nd.Deconvolution(x, w, kernel=(3, 3), num_filter=16).asnumpy()
        print("ok")
        """, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


# -- thread counts ---------------------------------------------------------------------
@pytest.mark.parametrize("count, error, match", [
    (10**6, MXNetError, "count <= 1024"), (2**31, MXNetError, "count <= 1024"),
    (2**70, MXNetError, "count <= 1024"), (0, MXNetError, "count >= 1, got 0"),
    (-3, MXNetError, "count >= 1, got -3"), ("2", TypeError, "count must be an int"),
    (1.5, TypeError, "count must be an int, got 1.5"), (True, TypeError, "got True"),
    (None, TypeError, "got None")])
def test_set_num_threads_refuses_bad_counts(count, error, match):
    before = mxdeconv.get_num_threads()
    with pytest.raises(error, match=match):
        mxdeconv.set_num_threads(count)
    assert mxdeconv.get_num_threads() == before


def test_set_num_threads_accepts_numpy_integers_and_the_bound():
    before = mxdeconv.get_num_threads()
    try:
        mxdeconv.set_num_threads(np.int64(1))
        assert mxdeconv.get_num_threads() == 1
    finally:
        mxdeconv.set_num_threads(before)


def test_a_huge_omp_num_threads_is_clamped_with_a_warning():
    env = dict(os.environ, OMP_NUM_THREADS="1000000")
    run = _run_python("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import mxdeconv
        from mxdeconv import nd
        y = nd.Deconvolution(nd.ones((1, 4, 3, 3)), nd.ones((4, 4, 3, 3)), kernel=(3, 3),
                             num_filter=4).asnumpy()
        assert y.max() == 36, y.max()
        print(mxdeconv.get_num_threads(), [str(w.message) for w in caught])
        """, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    usable = len(os.sched_getaffinity(0))
    assert run.stdout.startswith(f"{usable} ") and "OMP_NUM_THREADS='1000000'" in run.stdout
    assert f"runs on this process's {usable} CPU(s)" in run.stdout


@pytest.mark.parametrize("value, warnings", [("99999999999999999999", 1), ("-5", 1),
                                             ("lots", 1), ("", 0)])
def test_junk_cache_capacity_in_the_environment_warns_and_uses_the_default(value, warnings):
    """Junk warns; an empty value is unset, as for every MXDECONV_ variable."""
    env = dict(os.environ, MXDECONV_PRIMITIVE_CACHE_CAPACITY=value)
    run = _run_python("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import mxdeconv
        print(mxdeconv.cache_info()["capacity"], len(caught))
        """, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["1024", str(warnings)]


# -- pickling and copying --------------------------------------------------------------
def test_pickle_and_deepcopy_of_blocked_arrays():
    layers, rng = Layers(2), np.random.default_rng(6)
    for role in ("weight", "result"):
        arr = _blocked(layers, rng, role)
        expected = values(arr)
        for clone in (pickle.loads(pickle.dumps(arr)), copy.deepcopy(arr), copy.copy(arr)):
            assert clone is not arr and clone.layout == "default"
            np.testing.assert_array_equal(clone.asnumpy(), expected)
        np.testing.assert_array_equal(values(arr), expected)


# -- memory shared outside mxdeconv ------------------------------------------------------
def test_a_numpy_view_of_an_inference_weight_never_goes_stale():
    layers, rng = Layers(2), np.random.default_rng(7)
    w = nd.array(_rand(rng, layers.square, 0.2))
    view = np.asarray(w)
    data = _rand(rng, layers.b_data)
    mxdeconv.reset_reorder_counts()
    with autograd.predict_mode():
        nd.Deconvolution(data, w, **layers.kwargs(layers.k3))
        assert w.layout == "default"  # exposed memory is never swapped for a blocked copy
        view[:] = _rand(rng, layers.square, 0.2)
        y = nd.Deconvolution(data, w, **layers.kwargs(layers.k3))
    np.testing.assert_allclose(y.asnumpy(), layers.ref(data, view, layers.k3), **TOL)
    assert np.shares_memory(view, np.asarray(w))


def test_dlpack_shared_weights_stay_shared():
    layers, rng = Layers(2), np.random.default_rng(8)
    host = _rand(rng, layers.square, 0.2)
    w = nd.from_dlpack(host)              # imported: shares host's memory
    exported = nd.array(_rand(rng, layers.square, 0.2))
    other = np.from_dlpack(exported)      # exported: shares exported's memory
    data = _rand(rng, layers.b_data)
    with autograd.predict_mode():
        for weight, memory in ((w, host), (exported, other)):
            nd.Deconvolution(data, weight, **layers.kwargs(layers.k3))
            memory[:] = 2 * memory
            y = nd.Deconvolution(data, weight, **layers.kwargs(layers.k3))
            np.testing.assert_allclose(y.asnumpy(), layers.ref(data, memory, layers.k3),
                                       **TOL)
            assert weight.layout == "default"


def test_detach_shares_memory_for_good():
    layers, rng = Layers(2), np.random.default_rng(9)
    w = nd.array(_rand(rng, layers.square, 0.2))
    d = w.detach()
    data = _rand(rng, layers.b_data)
    with autograd.predict_mode():
        nd.Deconvolution(data, d, **layers.kwargs(layers.k3))
        np.asarray(w)[:] = 0
        y = nd.Deconvolution(data, d, **layers.kwargs(layers.k3))
    np.testing.assert_array_equal(y.asnumpy(), 0)


# -- shapes and Python values ---------------------------------------------------------------
@pytest.mark.parametrize("make", [nd.zeros, nd.ones, nd.empty])
@pytest.mark.parametrize("shape", [(2, -1), -1, (-3,)])
def test_negative_shapes_are_refused(make, shape):
    with pytest.raises(MXNetError, match="shape entries must be >= 0"):
        make(shape)


@pytest.mark.parametrize("call, error, match", [
    (lambda: nd.zeros((2, 2.5)), TypeError, "shape entries must be ints"),
    (lambda: nd.zeros("3"), TypeError, "shape must be an int or a tuple"),
    (lambda: nd.array(None), TypeError, "got NoneType"),
    (lambda: nd.array("abc"), TypeError, "got str"),
    (lambda: nd.array([[1, 2], [3]]), MXNetError, "not a rectangular array"),
    (lambda: nd.array([object()]), TypeError, "must hold real numbers"),
    (lambda: nd.array([1, 2], dtype="int16"), TypeError, "unsupported dtype int16"),
    (lambda: nd.array([1, 2], dtype="complex64"), TypeError, "unsupported dtype complex64"),
    (lambda: nd.array([1, 2], dtype="nonsense"), TypeError, "dtype must name"),
    (lambda: nd.from_dlpack(5), TypeError, "from_dlpack: source must be"),
    (lambda: nd.from_dlpack(None), TypeError, "from_dlpack: source must be"),
    (lambda: nd.to_dlpack_for_read(5), TypeError, "to_dlpack_for_read: data must be"),
    (lambda: nd.to_dlpack_for_write("x"), TypeError, "to_dlpack_for_write: data must be"),
    (lambda: nd.ones((2,)) + 10**400, MXNetError, "does not fit"),
    (lambda: 10**400 * nd.ones((2,)), MXNetError, "does not fit"),
    (lambda: mxdeconv.set_cache_capacity(2**63), MXNetError, "cache capacity must be <="),
    (lambda: mxdeconv.set_cache_capacity("5"), TypeError, "capacity must be an int"),
    (lambda: mxdeconv.set_onednn_enabled("false"), TypeError, "enabled must be a bool"),
    (lambda: mxdeconv.set_onednn_enabled(None), TypeError, "enabled must be a bool"),
])
def test_bad_python_values_raise_clear_errors(call, error, match):
    enabled, capacity = mxdeconv.onednn_enabled(), mxdeconv.cache_info()["capacity"]
    with pytest.raises(error, match=match):
        call()
    assert mxdeconv.onednn_enabled() == enabled
    assert mxdeconv.cache_info()["capacity"] == capacity


def test_a_dlpack_capsule_consumed_twice_raises_mxnet_error():
    capsule = nd.to_dlpack_for_read(nd.ones((2,)))
    nd.from_dlpack(capsule)
    with pytest.raises(MXNetError, match="from_dlpack: cannot import"):
        nd.from_dlpack(capsule)


def test_bfloat16_dlpack_export_raises_mxnet_error():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    arr = nd.array(np.ones((2,), ml_dtypes.bfloat16), dtype="bfloat16")
    with pytest.raises(MXNetError, match="bfloat16 NDArray cannot be exported"):
        np.from_dlpack(arr)


def test_junk_onednn_switch_in_the_environment_warns():
    env = dict(os.environ, MXDECONV_ONEDNN="perhaps")
    run = _run_python("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import mxdeconv
        print(mxdeconv.onednn_enabled(), [str(w.message) for w in caught])
        """, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("True ") and "MXDECONV_ONEDNN='perhaps'" in run.stdout


# -- NDArray basics: writes, views and the cached training weight ------------------------
# Optimizer steps as MXNet users write them; each writes w through mxdeconv, which
# must bump w's version so that the training weight cached in the primitive's
# layout (w._derived) is reordered again.  The view-making update comes last:
# a view exposes w, and exposed weights are never cached.
SGD_UPDATES = [
    ("w[:] = w - lr * grad", lambda w, lr: w.__setitem__(slice(None), w - lr * w.grad)),
    ("w -= lr * grad", lambda w, lr: w.__isub__(lr * w.grad)),
    ("(w - lr * grad).copyto(w)", lambda w, lr: (w - lr * w.grad).copyto(w)),
    ("w *= 0.9", lambda w, lr: w.__imul__(0.9)),
    ("w[1:3] = w[1:3] * 2 (exposes w)", lambda w, lr: w.__setitem__(slice(1, 3), w[1:3] * 2)),
    ("w[:] = w - lr * grad, exposed", lambda w, lr: w.__setitem__(slice(None), w - lr * w.grad)),
]


def _training_step(data, weight, params):
    with autograd.record():
        y = nd.Deconvolution(data, weight, **params)
        loss = (y * y).mean()
    loss.backward()
    return y.asnumpy(), weight.grad.asnumpy()


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_a_training_loop_with_updates_matches_fresh_arrays(ndim):
    layers, rng = Layers(ndim), np.random.default_rng(20 + ndim)
    data = nd.array(_rand(rng, layers.b_data))
    w = nd.array(_rand(rng, layers.square, 0.2))
    w.attach_grad()
    params = layers.kwargs(layers.k3)
    cached = False
    for name, update in SGD_UPDATES:
        y, grad = _training_step(data, w, params)
        cached = cached or bool(w._derived)
        fresh = nd.array(w.asnumpy())  # the same values, no history
        fresh.attach_grad()
        y_fresh, grad_fresh = _training_step(data, fresh, params)
        np.testing.assert_array_equal(y, y_fresh, err_msg=f"before {name}")
        np.testing.assert_array_equal(grad, grad_fresh, err_msg=f"before {name}")
        before = w.asnumpy()
        update(w, 0.1)
        assert w.layout == "default" and not np.array_equal(w.asnumpy(), before), name
    if not cached:
        pytest.skip("oneDNN chose a plain weight layout on this CPU: nothing was cached")
    y, grad = _training_step(data, w, params)
    fresh = nd.array(w.asnumpy())
    fresh.attach_grad()
    np.testing.assert_array_equal(y, _training_step(data, fresh, params)[0])


def test_a_view_of_an_inference_weight_exposes_it_for_good():
    layers, rng = Layers(2), np.random.default_rng(24)
    w = nd.array(_rand(rng, layers.square, 0.2))
    rows = w[2:5]          # a view: w is exposed from now on
    data = _rand(rng, layers.b_data)
    with autograd.predict_mode():
        nd.Deconvolution(data, w, **layers.kwargs(layers.k3))
        assert w.layout == "default"  # never swapped for a blocked copy
        rows[:] = 0                   # reaches w's memory
        y = nd.Deconvolution(data, w, **layers.kwargs(layers.k3))
    expected = w.asnumpy()
    assert not expected[2:5].any()
    np.testing.assert_allclose(y.asnumpy(), layers.ref(data, expected, layers.k3), **TOL)


def test_basics_on_one_blocked_array_from_threads(fast_switching):
    layers, rng = Layers(2), np.random.default_rng(25)
    for trial in range(8):
        y = _blocked(layers, rng, "result")
        expected = values(y)
        checks = [
            (lambda: (y * 2 - 1).asnumpy(), expected * 2 - 1),
            (lambda: y.sum(axis=(2, 3)).asnumpy(), expected.sum(axis=(2, 3))),
            (lambda: y[3].asnumpy(), expected[3]),          # a view: exposes y
            (lambda: y[:, 1:2].asnumpy(), expected[:, 1:2]),  # a copy
            (lambda: y.reshape((0, -1)).asnumpy(), expected.reshape(16, -1)),
            (lambda: (y > 0).asnumpy(), (expected > 0).astype(np.float32)),
        ]

        def reader(index):
            for _ in range(3):
                call, wanted = checks[index % len(checks)]
                np.testing.assert_allclose(call(), wanted, rtol=1e-5, atol=1e-5)
        _in_threads(reader)
        np.testing.assert_array_equal(values(y), expected)


def test_views_as_deconvolution_data_and_out():
    layers, rng = Layers(2), np.random.default_rng(26)
    batch = nd.array(_rand(rng, (4, 16, 2, 2)))
    w = nd.array(_rand(rng, layers.square, 0.2))
    out = nd.zeros((4, 16, 4, 4))
    for start in (0, 2):  # mini-batches as views in, views of one result out
        nd.Deconvolution(batch[start:start + 2], w, out=out[start:start + 2],
                         **layers.kwargs(layers.k3))
    np.testing.assert_allclose(out.asnumpy(), layers.ref(batch.asnumpy(), w.asnumpy(),
                                                         layers.k3), **TOL)
    assert out.layout == "default" and batch._exposed and out._exposed
