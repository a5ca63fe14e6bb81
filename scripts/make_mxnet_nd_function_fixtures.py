"""Record what real MXNet 1.9.1 does with the ``nd`` function forms
(``nd.mean``, ``nd.square``, ``nd.clip``, ``nd.dot``, ``nd.LeakyReLU``, ...),
as a test fixture.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python scripts/make_mxnet_nd_function_fixtures.py

The cases are written as those of scripts/make_mxnet_ndarray_fixtures.py
(whose ``run``, ``encode`` and ``record`` this script uses): a few lines of
Python against ``nd`` on fresh arrays (see ``fresh``), the last line the
result.  It writes tests/data/mxnet_nd_functions.json: per case the result's
dtype, shape and values, a Python value, or the error MXNet raised, and per
gradient case the gradients of its inputs (the head is summed by
``backward``'s ones).  tests/ndarray/test_nd_functions.py runs the same code
under mxdeconv and compares, with the deviations it lists and explains.

Left out: what kills MXNet's process (``LeakyReLU`` ``rrelu`` in training
mode: a segmentation fault; integer division by zero: SIGFPE).
"""
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_mxnet_ndarray_fixtures as basics  # noqa: E402

UNARY = ["abs", "sign", "sqrt", "rsqrt", "square", "exp", "expm1", "log", "log1p", "log2",
         "log10", "negative", "reciprocal", "floor", "ceil", "round", "rint", "trunc", "fix",
         "sigmoid", "tanh", "relu", "sin", "cos", "tan"]
BINARY = ["add", "subtract", "multiply", "divide", "true_divide", "modulo", "power", "maximum",
          "minimum", "equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal"]
BROADCAST = ["add", "plus", "sub", "minus", "mul", "div", "mod", "power", "maximum", "minimum",
             "equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal",
             "logical_and", "logical_or", "logical_xor"]

CASES = [
    # -- the line
    ("mean(square(out - target))", "nd.mean(nd.square(m - nd.ones((2, 3))))"),
    ("mean(square(out - target)) with autograd",
     "w = nd.array([[1, 2], [3, 4]])\nw.attach_grad()\nt = nd.array([[0, 2], [5, 4]])\n"
     "with autograd.record():\n    l = nd.mean(nd.square(w - t))\nl.backward()\n"
     "(l.asnumpy().tolist(), w.grad.asnumpy().tolist())"),
]
# -- one input: values, integers (computed in floats and truncated), float16
CASES += [(f"{name}", f"nd.{name}(v)") for name in UNARY]
CASES += [(f"{name} of halves", f"nd.{name}(r)") for name in
          ("round", "rint", "fix", "floor", "ceil", "trunc")]
CASES += [(f"{name} int32", f"nd.{name}(k)") for name in UNARY]
CASES += [(f"{name} float16", f"nd.{name}(q)") for name in
          ("sqrt", "exp", "log", "sigmoid", "tanh", "rsqrt", "reciprocal")]
CASES += [
    ("reciprocal int32 with 0", "nd.reciprocal(nd.array([0, 1, 2, -1], dtype='int32'))"),
    ("abs int8 -128", "nd.abs(nd.array([-128], dtype='int8'))"),
    ("negative uint8", "nd.negative(nd.array([3], dtype='uint8'))"),
    ("exp float64", "nd.exp(d)"),
    ("exp(out=)", "t = nd.zeros((6,))\nnd.exp(v, out=t) is t"),
    ("exp(out=) values", "t = nd.zeros((6,))\nnd.exp(v, out=t)\nt"),
    ("exp(out=) wrong shape", "nd.exp(v, out=nd.zeros((3,)))"),
    ("exp(out=) wrong dtype", "nd.exp(v, out=nd.zeros((6,), dtype='float64'))"),
    ("exp(name=)", "nd.exp(v, name='e')"),
    ("exp of NumPy", "nd.exp(np.zeros(2))"),
    ("exp of a number", "nd.exp(1)"),
    ("exp of a list", "nd.exp([1, 2])"),
    ("sqrt(x, out=x)", "nd.sqrt(p, out=p)\np"),
    # -- clip, smooth_l1
    ("clip", "nd.clip(m, -3, 3)"),
    ("clip a_min > a_max", "nd.clip(m, 3, -3)"),
    ("clip int32 by floats", "nd.clip(k, -3.5, 3.5)"),
    ("clip float16", "nd.clip(nd.array([1, 5], dtype='float16'), 0.1, 2.2)"),
    ("clip NumPy bound", "nd.clip(m, np.float32(-1), 2)"),
    ("clip(out=)", "t = nd.zeros((6,))\nnd.clip(v, 0, 1, out=t)\nt"),
    ("clip keyword bounds", "nd.clip(m, a_min=0, a_max=2)"),
    ("clip without a_max", "nd.clip(m, -3)"),
    ("clip a_min string", "nd.clip(m, 'x', 3)"),
    ("clip a_min None", "nd.clip(m, None, 3)"),
    ("clip a_min True", "nd.clip(m, True, 3)"),
    ("smooth_l1", "nd.smooth_l1(nd.array([-2, -0.5, 0, 0.3, 1, 1.5]))"),
    ("smooth_l1 scalar=2",
     "nd.smooth_l1(nd.array([-2, -0.5, 0, 0.2, 0.25, 0.3, 1.5]), scalar=2.0)"),
    ("smooth_l1 scalar=0", "nd.smooth_l1(nd.array([1, -2]), scalar=0)"),
    ("smooth_l1 int32", "nd.smooth_l1(k, scalar=1.0)"),
]
# -- two inputs: nd.add(lhs, rhs) and its kind
CASES += [(f"{name}(array, 2)", f"nd.{name}(m, 2)") for name in BINARY]
CASES += [(f"{name}(2, array)", f"nd.{name}(2, m)") for name in BINARY]
CASES += [(f"{name} broadcast", f"nd.{name}(m, nd.array([[1], [-4]]))") for name in BINARY]
CASES += [(f"{name}(3, 2)", f"nd.{name}(3, 2)") for name in BINARY]
CASES += [
    ("divide int32", "nd.divide(k, 2)"),
    ("modulo(-3, 2)", "nd.modulo(-3, 2)"),
    ("maximum int32 by 2.7", "nd.maximum(nd.array([1, 5], dtype='int32'), 2.7)"),
    ("power int32", "nd.power(nd.array([2, 3], dtype='int32'), 2)"),
    ("power keywords", "nd.power(base=m, exp=2)"),
    ("add NumPy scalar", "nd.add(np.float32(2), m)"),
    ("add list", "nd.add(m, [1, 2, 3])"),
    ("add dtype mismatch", "nd.add(m, nd.ones((3,), dtype='float64'))"),
    ("add shapes mismatch", "nd.add(m, nd.ones((2,)))"),
]
# -- two NDArrays: broadcast_*, elemwise_*
CASES += [(f"broadcast_{name}", f"nd.broadcast_{name}(m, nd.array([2, -2, 3]))")
          for name in BROADCAST]
CASES += [
    ("broadcast_div int32", "nd.broadcast_div(k, nd.array([2, 2, 2], dtype='int32'))"),
    ("broadcast_add column", "nd.broadcast_add(m, nd.array([[10], [20]]))"),
    ("broadcast_add scalar", "nd.broadcast_add(m, 2)"),
    ("broadcast_add bad shapes", "nd.broadcast_add(m, nd.ones((2,)))"),
    ("broadcast_add(out=)", "t = nd.zeros((2, 3))\nnd.broadcast_add(m, m, out=t)\nt"),
    ("elemwise_add", "nd.elemwise_add(m, m)"),
    ("elemwise_sub", "nd.elemwise_sub(m, nd.ones((2, 3)))"),
    ("elemwise_mul", "nd.elemwise_mul(m, m)"),
    ("elemwise_div", "nd.elemwise_div(m, nd.full((2, 3), 2))"),
    ("elemwise_add broadcast", "nd.elemwise_add(m, nd.array([1, 2, 3]))"),
    ("elemwise_add scalar", "nd.elemwise_add(m, 1)"),
    ("elemwise_add dtypes", "nd.elemwise_add(m, nd.ones((2, 3), dtype='float64'))"),
    # -- where
    ("where", "nd.where(nd.array([[1, 0, 1], [0, 0, 1]]), m, -m)"),
    ("where row condition", "nd.where(nd.array([1, 0]), m, -m)"),
    ("where int32 condition", "nd.where(nd.array([[1, 0, 1], [0, 0, 1]], dtype='int32'), m, -m)"),
    ("where NaN condition", "nd.where(nd.array([np.nan, 0]), nd.array([1, 2]), nd.array([3, 4]))"),
    ("where(out=)", "t = nd.zeros((2,))\nnd.where(nd.array([1, 0]), nd.array([1, 2]), "
                    "nd.array([3, 4]), out=t)\nt"),
    ("where broadcast condition", "nd.where(nd.array([1, 0, 1]), m, -m)"),
    ("where scalar y", "nd.where(nd.array([[1, 0, 1], [0, 0, 1]]), m, 0)"),
    ("where x, y dtypes", "nd.where(nd.array([1, 0]), nd.array([1, 2]), "
                          "nd.ones((2,), dtype='float64'))"),
    ("where x, y shapes", "nd.where(nd.array([1, 0]), nd.array([1, 2]), nd.array([3, 4, 5]))"),
]
# -- reductions
CASES += [(f"{name}", f"nd.{name}(y)") for name in ("sum", "mean", "max", "min", "prod")]
CASES += [(f"{name}(axis=1)", f"nd.{name}(y, axis=1)") for name in
          ("sum", "mean", "max", "min", "prod")]
CASES += [
    ("sum(axis=(0, 2), keepdims)", "nd.sum(y, axis=(0, 2), keepdims=True)"),
    ("sum(axis=1, exclude)", "nd.sum(y, axis=1, exclude=True)"),
    ("sum(axis=[0, 1])", "nd.sum(y, axis=[0, 1])"),
    ("sum(keepdims=1)", "nd.sum(m, axis=1, keepdims=1)"),
    ("sum(exclude=1)", "nd.sum(m, axis=0, exclude=1)"),
    ("sum(exclude=True) no axis", "nd.sum(m, exclude=True)"),
    ("sum(keepdims='a')", "nd.sum(m, axis=1, keepdims='a')"),
    ("sum(axis=0.5)", "nd.sum(m, axis=0.5)"),
    ("sum(axis='a')", "nd.sum(m, axis='a')"),
    ("sum(axis=2)", "nd.sum(m, axis=2)"),
    ("sum int32", "nd.sum(k)"),
    ("mean int32", "nd.mean(nd.array([6, 7], dtype='int32'))"),
    ("sum float16", "nd.sum(nd.ones((5000,), dtype='float16'))"),
    ("max(axis=-1, keepdims)", "nd.max(m, axis=-1, keepdims=True)"),
    ("min((0, 1), keepdims)", "nd.min(m, axis=(0, 1), keepdims=True)"),
    ("sum(out=)", "t = nd.zeros((3,))\nnd.sum(m, axis=0, out=t)\nt"),
    ("sum(out=) wrong shape", "nd.sum(v, out=nd.zeros((2,)))"),
    ("sum of nothing", "nd.sum()"),
    ("norm", "nd.norm(m)"),
    ("norm(axis=1)", "nd.norm(m, axis=1)"),
    ("norm(ord=1, axis=0, keepdims)", "nd.norm(m, ord=1, axis=0, keepdims=True)"),
    ("norm(keepdims=1)", "nd.norm(nd.array([[1, 5]]), axis=1, keepdims=1)"),
    ("norm(ord=3)", "nd.norm(m, ord=3)"),
    ("argmax", "nd.argmax(m)"),
    ("argmax(axis=1)", "nd.argmax(m, axis=1)"),
    ("argmax(axis=1, keepdims)", "nd.argmax(m, axis=1, keepdims=True)"),
    ("argmax(axis=1, keepdims=1)", "nd.argmax(m, axis=1, keepdims=1)"),
    ("argmax ties", "nd.argmax(nd.array([1, 3, 3]), axis=0)"),
    ("argmax int32", "nd.argmax(k, axis=0)"),
    ("argmax float16", "nd.argmax(q, axis=0)"),
    ("argmax float64", "nd.argmax(d, axis=0)"),
    ("argmax NaN", "nd.argmax(nd.array([1, np.nan, 3]), axis=0)"),
    ("argmax(axis=2)", "nd.argmax(m, axis=2)"),
    ("argmax(axis=(0, 1))", "nd.argmax(m, axis=(0, 1))"),
    ("argmin(axis=0)", "nd.argmin(m, axis=0)"),
    ("argmin keepdims without axis", "nd.argmin(nd.array([[3, 2], [1, 4]]), keepdims=True)"),
    ("pick", "nd.pick(m, nd.array([0, 2]))"),
    ("pick(axis=0)", "nd.pick(m, nd.array([0, 1, 1]), axis=0)"),
    ("pick(keepdims)", "nd.pick(m, nd.array([0, 2]), keepdims=True)"),
    ("pick clip", "nd.pick(m, nd.array([5, -1]))"),
    ("pick wrap", "nd.pick(m, nd.array([5, -1]), mode='wrap')"),
    ("pick fractions", "nd.pick(m, nd.array([0.7, 1.9]))"),
    ("pick int32 index", "nd.pick(m, nd.array([0, 2], dtype='int32'))"),
    ("pick index with the axis", "nd.pick(m, nd.array([[0], [2]]))"),
    ("pick int32 data", "nd.pick(k, nd.array([1]), axis=0)"),
    ("pick 3-D", "nd.pick(y, nd.array([[0, 1, 2, 3], [3, 2, 1, 0]]), axis=1)"),
    ("pick index shape", "nd.pick(m, nd.array([0, 2, 1]))"),
    ("pick axis=None", "nd.pick(m, nd.array([4]), axis=None)"),
    ("pick mode='raise'", "nd.pick(m, nd.array([0, 2]), mode='raise')"),
    # -- dot
    ("dot", "nd.dot(m, m.T)"),
    ("dot vectors", "nd.dot(nd.array([1, 2]), nd.array([3, 4]))"),
    ("dot matrix vector", "nd.dot(m, nd.array([1, 2, 3]))"),
    ("dot vector matrix", "nd.dot(nd.array([1, 2]), m)"),
    ("dot transpose_a", "nd.dot(m, m, transpose_a=True)"),
    ("dot transpose_b", "nd.dot(m, m, transpose_b=True)"),
    ("dot both transposed", "nd.dot(m, nd.ones((4, 2)), transpose_a=True, transpose_b=True)"),
    ("dot 3-D", "nd.dot(nd.ones((2, 3, 4)), nd.ones((4, 5, 6))).shape"),
    ("dot 3-D transpose_a",
     "nd.dot(nd.ones((4, 3, 2)), nd.ones((4, 5, 6)), transpose_a=True).shape"),
    ("dot 3-D transpose_b",
     "nd.dot(nd.ones((2, 3, 4)), nd.ones((6, 5, 4)), transpose_b=True).shape"),
    ("dot 3-D transpose_a values", "nd.dot(nd.arange(24).reshape((4, 3, 2)), nd.arange(4), "
                                   "transpose_a=True)"),
    ("dot 3-D values", "nd.dot(y, nd.arange(8).reshape((4, 2)))"),
    ("dot float64", "nd.dot(nd.ones((2, 3), dtype='float64'), nd.ones((3, 2), dtype='float64'))"),
    ("dot(out=)", "t = nd.zeros((2, 2))\nnd.dot(nd.ones((2, 3)), nd.ones((3, 2)), out=t)\nt"),
    ("dot shapes", "nd.dot(m, m)"),
    ("dot int32", "nd.dot(k, k)"),
    ("dot float16", "nd.dot(nd.ones((2, 3), dtype='float16'), nd.ones((3, 2), dtype='float16'))"),
    ("dot dtypes", "nd.dot(nd.ones((2, 3)), nd.ones((3, 2), dtype='float64'))"),
    ("dot scalar", "nd.dot(m, 2)"),
    ("dot transposed vectors", "nd.dot(nd.array([1, 2]), nd.array([3, 4]), transpose_a=True)"),
    # -- softmax
    ("softmax", "nd.softmax(m)"),
    ("softmax(axis=0)", "nd.softmax(m, axis=0)"),
    ("softmax 1-D", "nd.softmax(nd.array([1, 2, 3]))"),
    ("softmax temperature", "nd.softmax(m, temperature=2.0)"),
    ("softmax temperature 0", "nd.softmax(nd.array([1, 2]), temperature=0)"),
    ("softmax large", "nd.softmax(nd.array([1000, 0]))"),
    ("softmax float16", "nd.softmax(nd.array([1, 2, 3], dtype='float16'))"),
    ("softmax float64", "nd.softmax(nd.array([1, 2, 3], dtype='float64'))"),
    ("softmax dtype=float64", "nd.softmax(m, dtype='float64')"),
    ("softmax dtype=float16", "nd.softmax(nd.array([1, 2]), dtype='float16')"),
    ("softmax dtype=int32", "nd.softmax(nd.array([1, 2]), dtype='int32')"),
    ("softmax int32", "nd.softmax(k)"),
    ("softmax(axis=5)", "nd.softmax(m, axis=5)"),
    ("softmax(out=)", "t = nd.zeros((2,))\nnd.softmax(nd.array([1, 2]), out=t)\nt"),
    ("softmax use_length", "nd.softmax(m, length=nd.array([1, 2], dtype='int32'), "
                           "use_length=True)"),
    ("softmax use_length axis=0", "nd.softmax(m, axis=0, length=nd.array([1, 2, 1], "
                                  "dtype='int32'), use_length=True)"),
    ("softmax float length", "nd.softmax(m, length=nd.array([1, 2]), use_length=True)"),
    ("softmax length without use_length", "nd.softmax(m, length=nd.array([1, 2], "
                                          "dtype='int32'))"),
    ("softmax use_length without length", "nd.softmax(m, use_length=True)"),
    ("log_softmax", "nd.log_softmax(m)"),
    ("log_softmax(axis=0)", "nd.log_softmax(m, axis=0)"),
    ("log_softmax(axis=-2)", "nd.log_softmax(nd.ones((2, 3)), axis=-2)"),
    ("log_softmax temperature", "nd.log_softmax(m, temperature=0.5)"),
    ("log_softmax large", "nd.log_softmax(nd.array([1000, 0]))"),
    ("log_softmax dtype=float64", "nd.log_softmax(m, dtype='float64')"),
    ("log_softmax use_length", "nd.log_softmax(m, use_length=True)"),
    ("log_softmax int32", "nd.log_softmax(k)"),
    # -- shapes
    ("reshape", "nd.reshape(m, shape=(3, 2))"),
    ("reshape positional", "nd.reshape(m, (3, -1))"),
    ("reshape special values", "nd.reshape(y, (-3, -2)).shape"),
    ("reshape reverse", "nd.reshape(nd.ones((10, 5, 4)), shape=(-1, 0), reverse=True).shape"),
    ("reshape(out=)", "t = nd.zeros((3, 2))\nnd.reshape(m, shape=(3, 2), out=t)\nt"),
    ("reshape bad", "nd.reshape(m, (4, 2))"),
    ("nd.reshape copies", "t = nd.reshape(x, (-1,))\nt[:] = -1\nx"),
    ("transpose", "nd.transpose(m)"),
    ("transpose axes", "nd.transpose(y, axes=(1, 0, 2)).shape"),
    ("transpose axes list", "nd.transpose(y, axes=[2, 0, 1]).shape"),
    ("transpose axes ()", "nd.transpose(y, axes=()).shape"),
    ("transpose(out=)", "t = nd.zeros((3, 2))\nnd.transpose(m, out=t)\nt"),
    ("transpose bad axes", "nd.transpose(m, axes=(0, 0))"),
    ("flatten", "nd.flatten(y)"),
    ("Flatten 1-D", "nd.Flatten(nd.ones((3,))).shape"),
    ("nd.flatten copies", "t = nd.flatten(x)\nt[:] = -1\nx"),
    ("expand_dims", "nd.expand_dims(m, axis=1)"),
    ("expand_dims(-1)", "nd.expand_dims(m, -1).shape"),
    ("expand_dims(-3)", "nd.expand_dims(m, -3).shape"),
    ("expand_dims(3)", "nd.expand_dims(m, axis=3)"),
    ("expand_dims without axis", "nd.expand_dims(m)"),
    ("nd.expand_dims copies", "t = nd.expand_dims(x, 0)\nt[:] = -1\nx"),
    ("squeeze", "nd.squeeze(nd.ones((1, 2, 1))).shape"),
    ("squeeze(axis)", "nd.squeeze(nd.ones((1, 2, 1)), axis=(0, 2)).shape"),
    ("squeeze(axis=-1)", "nd.squeeze(nd.ones((2, 1)), axis=-1).shape"),
    ("squeeze all ones", "nd.squeeze(nd.ones((1, 1))).shape"),
    ("squeeze a long axis", "nd.squeeze(nd.ones((1, 2, 1)), axis=1)"),
    ("tile", "nd.tile(m, (2, 1))"),
    ("tile reps=", "nd.tile(m, reps=(2, 2))"),
    ("tile short reps", "nd.tile(m, (2,))"),
    ("tile long reps", "nd.tile(nd.array([1, 2]), (2, 1, 2))"),
    ("tile int32", "nd.tile(k, (2,))"),
    ("one_hot", "nd.one_hot(nd.array([1, 0, 5, -1]), 3)"),
    ("one_hot on off", "nd.one_hot(nd.array([1, 2.7]), 4, on_value=5, off_value=-1)"),
    ("one_hot dtype", "nd.one_hot(nd.array([[0, 1]]), 2, dtype='int32')"),
    ("one_hot depth 0", "nd.one_hot(nd.array([0, 1]), 0)"),
    ("broadcast_to", "nd.broadcast_to(nd.array([[1, 2, 3]]), shape=(2, 3))"),
    ("broadcast_to 0 keeps", "nd.broadcast_to(nd.array([[1], [2]]), shape=(0, 3))"),
    ("broadcast_to int shape", "nd.broadcast_to(nd.array([1]), shape=3)"),
    ("broadcast_to list", "nd.broadcast_to(nd.array([[1]]), shape=[2, 2])"),
    ("broadcast_to bad", "nd.broadcast_to(nd.array([[1, 2, 3]]), shape=(2, 4))"),
    ("broadcast_to more dims", "nd.broadcast_to(nd.array([1, 2, 3]), shape=(2, 3))"),
    ("broadcast_like", "nd.broadcast_like(nd.array([[1, 2, 3]]), nd.ones((2, 3)))"),
    ("broadcast_like axes", "nd.broadcast_like(nd.array([[1], [2]]), nd.ones((5, 4)), "
                            "lhs_axes=(1,), rhs_axes=(1,))"),
    ("broadcast_like negative axes", "nd.broadcast_like(nd.array([[1], [2]]), nd.ones((5, 4)), "
                                     "lhs_axes=(-1,), rhs_axes=(-1,))"),
    ("broadcast_like more dims", "nd.broadcast_like(nd.array([1, 2, 3]), nd.ones((2, 3)))"),
    ("broadcast_like bad", "nd.broadcast_like(nd.array([[1, 2], [2, 3]]), nd.ones((5, 4)))"),
    ("cast", "nd.cast(nd.array([1.7, -1.7]), dtype='int32')"),
    ("Cast", "nd.Cast(nd.array([1.7, -1.7]), 'float16')"),
    # -- LeakyReLU
    ("LeakyReLU", "nd.LeakyReLU(v)"),
    ("LeakyReLU leaky slope", "nd.LeakyReLU(v, act_type='leaky', slope=0.1)"),
    ("LeakyReLU negative slope", "nd.LeakyReLU(v, slope=-0.5)"),
    ("LeakyReLU elu", "nd.LeakyReLU(v, act_type='elu')"),
    ("LeakyReLU elu slope", "nd.LeakyReLU(v, act_type='elu', slope=1.0)"),
    ("LeakyReLU selu", "nd.LeakyReLU(v, act_type='selu')"),
    ("LeakyReLU gelu", "nd.LeakyReLU(v, act_type='gelu')"),
    ("LeakyReLU gelu large", "nd.LeakyReLU(nd.array([-10, -5, 3, 10]), act_type='gelu')"),
    ("LeakyReLU gelu float64", "nd.LeakyReLU(nd.array([-1, 2], dtype='float64'), "
                               "act_type='gelu')"),
    ("LeakyReLU elu float16", "nd.LeakyReLU(nd.array([-1, 2], dtype='float16'), "
                              "act_type='elu')"),
    ("LeakyReLU prelu", "nd.LeakyReLU(nd.array([[-1, 2], [-3, 4]]), gamma=nd.array([0.1, 0.5]), "
                        "act_type='prelu')"),
    ("LeakyReLU prelu one gamma", "nd.LeakyReLU(nd.array([[-1, 2], [-3, 4]]), "
                                  "gamma=nd.array([0.1]), act_type='prelu')"),
    ("LeakyReLU prelu 1-D", "nd.LeakyReLU(nd.array([-1, 2, -3]), gamma=nd.array([0.1, 0.2, 0.3]), "
                            "act_type='prelu')"),
    ("LeakyReLU prelu 3-D", "nd.LeakyReLU(nd.array([[[-1, 2], [-3, 4]]]), "
                            "gamma=nd.array([0.1, 0.5]), act_type='prelu')"),
    ("LeakyReLU prelu 4-D", "nd.LeakyReLU(-nd.ones((1, 2, 1, 2)), gamma=nd.array([0.1, 0.2]), "
                            "act_type='prelu')"),
    ("LeakyReLU prelu without gamma", "nd.LeakyReLU(v, act_type='prelu')"),
    ("LeakyReLU prelu bad gamma", "nd.LeakyReLU(nd.array([[-1, 2], [-3, 4]]), "
                                  "gamma=nd.array([0.1, 0.5, 0.3]), act_type='prelu')"),
    ("LeakyReLU gamma with leaky", "nd.LeakyReLU(v, gamma=nd.array([0.5]), act_type='leaky')"),
    # MXNet's rrelu returns [output, mask] (the mask uninitialized in inference).
    ("LeakyReLU rrelu in inference", "o = nd.LeakyReLU(v, act_type='rrelu')\n"
                                     "o[0] if isinstance(o, list) else o"),
    ("LeakyReLU rrelu bounds", "o = nd.LeakyReLU(v, act_type='rrelu', lower_bound=0.2, "
                               "upper_bound=0.4)\no[0] if isinstance(o, list) else o"),
    ("LeakyReLU rrelu result type", "type(nd.LeakyReLU(v, act_type='rrelu')).__name__"),
    ("LeakyReLU bad act_type", "nd.LeakyReLU(v, act_type='foo')"),
    ("LeakyReLU int32", "nd.LeakyReLU(k)"),
    ("LeakyReLU slope string", "nd.LeakyReLU(v, slope='a')"),
    ("LeakyReLU(out=)", "t = nd.zeros((6,))\nnd.LeakyReLU(v, out=t)\nt"),
    # -- out= and autograd: out becomes the recorded result
    ("exp(out=) recorded",
     "w = nd.array([1.0, 2.0])\nw.attach_grad()\nc = nd.zeros((2,))\n"
     "with autograd.record():\n    o = nd.exp(w, out=c)\no.backward()\n"
     "(o is c, c.asnumpy().tolist(), w.grad.asnumpy().tolist())"),
    ("broadcast_add(out=) recorded",
     "w = nd.array([1.0, 2.0])\nw.attach_grad()\nc = nd.zeros((2,))\n"
     "with autograd.record():\n    o = nd.broadcast_add(w, w * w, out=c)\no.backward()\n"
     "(o is c, c.asnumpy().tolist(), w.grad.asnumpy().tolist())"),
    ("sum(out=) recorded",
     "w = nd.array([1.0, 2.0])\nw.attach_grad()\nc = nd.zeros((1,))\n"
     "with autograd.record():\n    o = nd.sum(w * 3, out=c)\no.backward()\n"
     "(o is c, c.asnumpy().tolist(), w.grad.asnumpy().tolist())"),
    ("exp(out=variable) recording",
     "w = nd.array([1.0, 2.0])\nw.attach_grad()\nwith autograd.record():\n"
     "    o = nd.exp(w, out=w)\no"),
    ("rrelu recorded in predict mode",
     "w = nd.array([-2.0, 3.0])\nw.attach_grad()\n"
     "with autograd.record(train_mode=False):\n    o = nd.LeakyReLU(w, act_type='rrelu')\n"
     "o = o[0] if isinstance(o, list) else o\no.backward()\n"
     "(o.asnumpy().tolist(), w.grad.asnumpy().tolist())"),
]

# (label, function of the inputs, inputs): gradients of the head's sum.
GRADIENTS = [
    ("mean(square(a - b))", "lambda a, b: nd.mean(nd.square(a - b))",
     [[[1.0, 2], [3, 4]], [[0.0, 2], [5, 4]]]),
    ("abs", "lambda a: nd.abs(a)", [[-1.0, 0, 2]]),
    ("sign", "lambda a: nd.sign(a) * a", [[-2.0, 0, 3]]),
    ("sqrt", "lambda a: nd.sqrt(a)", [[0.25, 4]]),
    ("rsqrt", "lambda a: nd.rsqrt(a)", [[0.25, 4]]),
    ("square", "lambda a: nd.square(a)", [[-1.5, 3]]),
    ("exp", "lambda a: nd.exp(a)", [[0.0, 1]]),
    ("expm1", "lambda a: nd.expm1(a)", [[0.0, 1]]),
    ("log", "lambda a: nd.log(a)", [[0.5, 4]]),
    ("log1p", "lambda a: nd.log1p(a)", [[0.0, 3]]),
    ("log2", "lambda a: nd.log2(a)", [[0.5, 4]]),
    ("log10", "lambda a: nd.log10(a)", [[0.5, 4]]),
    ("negative", "lambda a: nd.negative(a) * a", [[-1.0, 2]]),
    ("reciprocal", "lambda a: nd.reciprocal(a)", [[-2.0, 0.5]]),
    ("floor ceil round rint trunc fix",
     "lambda a: (nd.floor(a) + nd.ceil(a) + nd.round(a) + nd.rint(a) + nd.trunc(a) "
     "+ nd.fix(a)) * a", [[-1.5, 0.5, 2.3]]),
    ("sigmoid", "lambda a: nd.sigmoid(a)", [[-1.0, 0, 2]]),
    ("tanh", "lambda a: nd.tanh(a)", [[-1.0, 0, 2]]),
    ("sin", "lambda a: nd.sin(a)", [[-1.0, 0, 2]]),
    ("cos", "lambda a: nd.cos(a)", [[-1.0, 0, 2]]),
    ("tan", "lambda a: nd.tan(a)", [[-1.0, 0, 0.5]]),
    ("tile", "lambda a: nd.tile(a, (2, 3)) * nd.arange(12).reshape((2, 6))", [[[1.0, 2]]]),
    ("tile new axis", "lambda a: nd.tile(a, (3, 1)) * nd.arange(6).reshape((3, 2))",
     [[1.0, 2]]),
    ("relu", "lambda a: nd.relu(a)", [[-1.0, 0, 2]]),
    ("clip", "lambda a: nd.clip(a, -1, 1)", [[-2.0, -1, 0, 1, 2]]),
    ("smooth_l1", "lambda a: nd.smooth_l1(a)", [[-2.0, -1, -0.5, 0, 0.5, 1, 1.5]]),
    ("smooth_l1 scalar=2", "lambda a: nd.smooth_l1(a, scalar=2.0)",
     [[-2.0, -0.25, -0.1, 0, 0.2, 0.3]]),
    ("subtract", "lambda a, b: nd.subtract(a, b) * a", [[1.0, 2], [3.0, 5]]),
    ("divide", "lambda a, b: nd.divide(a, b)", [[1.0, 2], [4.0, 8]]),
    ("modulo", "lambda a, b: nd.modulo(a, b)", [[7.0, -7], [3.0, 3]]),
    ("power", "lambda a, b: nd.power(a, b)", [[1.0, 2], [2.0, 3]]),
    ("power by a number", "lambda a: nd.power(a, 3)", [[1.0, 2]]),
    ("maximum with ties", "lambda a, b: nd.maximum(a, b)", [[1.0, 2, 3], [3.0, 2, 1]]),
    ("minimum with ties", "lambda a, b: nd.minimum(a, b)", [[1.0, 2, 3], [3.0, 2, 1]]),
    ("maximum by a number", "lambda a: nd.maximum(a, 0)", [[-1.0, 0, 2]]),
    ("comparisons", "lambda a, b: (nd.equal(a, b) + nd.greater(a, b) + nd.lesser_equal(a, b)) * a",
     [[1.0, 2], [1.0, 3]]),
    ("broadcast_add", "lambda a, b: nd.broadcast_add(a, b)", [[[1.0, 2], [3, 4]], [[1.0], [2]]]),
    ("broadcast_sub", "lambda a, b: nd.broadcast_sub(a, b)", [[[1.0, 2], [3, 4]], [1.0, 2]]),
    ("broadcast_mul", "lambda a, b: nd.broadcast_mul(a, b)", [[[1.0, 2], [3, 4]], [[5.0, 6]]]),
    ("broadcast_div", "lambda a, b: nd.broadcast_div(a, b)", [[[1.0, 2], [3, 4]], [2.0, 4]]),
    ("broadcast_power", "lambda a, b: nd.broadcast_power(a, b)", [[[1.0, 2], [3, 4]], [2.0, 1]]),
    ("broadcast_maximum", "lambda a, b: nd.broadcast_maximum(a, b)",
     [[[1.0, 5], [3, 4]], [2.0, 4]]),
    ("broadcast_minimum", "lambda a, b: nd.broadcast_minimum(a, b)",
     [[[1.0, 5], [3, 4]], [2.0, 4]]),
    ("broadcast_greater", "lambda a, b: nd.broadcast_greater(a, b) * a",
     [[[1.0, 5], [3, 4]], [2.0, 4]]),
    ("elemwise_add", "lambda a, b: nd.elemwise_add(a, b) * a", [[1.0, 2], [3.0, 4]]),
    ("elemwise_sub", "lambda a, b: nd.elemwise_sub(a, b) * a", [[1.0, 2], [3.0, 4]]),
    ("elemwise_mul", "lambda a, b: nd.elemwise_mul(a, b)", [[1.0, 2], [3.0, 4]]),
    ("elemwise_div", "lambda a, b: nd.elemwise_div(a, b)", [[1.0, 2], [4.0, 8]]),
    ("where", "lambda c, a, b: nd.where(c, a, b) * nd.array([[1, 2], [3, 4]])",
     [[[1.0, 0], [0, 1]], [[1.0, 2], [3, 4]], [[5.0, 6], [7, 8]]]),
    ("where row condition", "lambda c, a, b: nd.where(c, a, b) * nd.array([[1, 2], [3, 4]])",
     [[0.0, 1], [[1.0, 2], [3, 4]], [[5.0, 6], [7, 8]]]),
    ("sum(axis=1)", "lambda a: nd.sum(a, axis=1) * nd.array([1, 2])", [[[1.0, 2], [3, 4]]]),
    ("sum(exclude)", "lambda a: nd.sum(a, axis=0, exclude=True) * nd.array([1, 2])",
     [[[1.0, 2], [3, 4]]]),
    ("mean(axis=0, keepdims)", "lambda a: nd.mean(a, axis=0, keepdims=True) * nd.array([[1, 2]])",
     [[[1.0, 2], [3, 4]]]),
    ("max with ties", "lambda a: nd.max(a, axis=1)", [[[1.0, 3, 3], [2, 1, 0]]]),
    ("min", "lambda a: nd.min(a)", [[[1.0, 2], [0, 4]]]),
    ("prod(axis=1)", "lambda a: nd.prod(a, axis=1)", [[[1.0, 2, 3], [4, 0, 6]]]),
    ("norm", "lambda a: nd.norm(a)", [[[3.0, 4], [0, 0]]]),
    ("norm(ord=1, axis=1)", "lambda a: nd.norm(a, ord=1, axis=1)", [[[3.0, -4], [1, 0]]]),
    ("argmax", "lambda a: nd.argmax(a, axis=1) * nd.array([1, 2])", [[[1.0, 3], [4, 2]]]),
    ("argmin", "lambda a: nd.argmin(a, axis=0)", [[[1.0, 3], [4, 2]]]),
    ("pick", "lambda a, i: nd.pick(a, i) * nd.array([1, 2])", [[[1.0, 2, 3], [4, 5, 6]], [2.0, 0]]),
    ("pick(axis=0, keepdims)", "lambda a, i: nd.pick(a, i, axis=0, keepdims=True)",
     [[[1.0, 2, 3], [4, 5, 6]], [1.0, 0, 1]]),
    ("dot", "lambda a, b: nd.dot(a, b) * nd.array([[1, 2], [3, 4]])",
     [[[1.0, 2, 3], [4, 5, 6]], [[1.0, -1], [2, 0], [0.5, 3]]]),
    ("dot transpose_a", "lambda a, b: nd.dot(a, b, transpose_a=True)",
     [[[1.0, 2, 3], [4, 5, 6]], [[1.0, -1], [2, 0]]]),
    ("dot transpose_b", "lambda a, b: nd.dot(a, b, transpose_b=True) * nd.array([[1, 2], [3, 4]])",
     [[[1.0, 2, 3], [4, 5, 6]], [[1.0, -1, 2], [0, 0.5, 3]]]),
    ("dot 3-D", "lambda a, b: nd.dot(a, b) * nd.arange(8).reshape((2, 2, 2))",
     [[[[1.0, 2], [3, 4]], [[5, 6], [7, 8]]], [[1.0, -1], [2, 0.5]]]),
    ("dot vectors", "lambda a, b: nd.dot(a, b)", [[1.0, 2], [3.0, 4]]),
    ("softmax", "lambda a: nd.softmax(a) * nd.array([[1, 2, 3], [4, 5, 6]])",
     [[[1.0, 2, 3], [1, -1, 0]]]),
    ("softmax(axis=0, temperature)",
     "lambda a: nd.softmax(a, axis=0, temperature=2.0) * nd.array([[1, 2, 3], [4, 5, 6]])",
     [[[1.0, 2, 3], [1, -1, 0]]]),
    ("log_softmax", "lambda a: nd.log_softmax(a) * nd.array([[1, 2, 3], [4, 5, 6]])",
     [[[1.0, 2, 3], [1, -1, 0]]]),
    ("log_softmax(temperature)",
     "lambda a: nd.log_softmax(a, temperature=0.5) * nd.array([[1, 2, 3], [4, 5, 6]])",
     [[[1.0, 2, 3], [1, -1, 0]]]),
    ("softmax cross-entropy", "lambda a, i: -nd.pick(nd.log_softmax(a), i)",
     [[[1.0, 2, 3], [1, -1, 0]], [2.0, 0]]),
    ("reshape", "lambda a: nd.reshape(a, (2, 2)) * nd.array([[1, 2], [3, 4]])", [[1.0, 2, 3, 4]]),
    ("transpose", "lambda a: nd.transpose(a, axes=(1, 0)) * nd.array([[1, 2], [3, 4]])",
     [[[1.0, 2], [3, 4]]]),
    ("flatten", "lambda a: nd.flatten(a) * nd.array([[1, 2], [3, 4]])",
     [[[[1.0], [2]], [[3], [4]]]]),
    ("expand_dims", "lambda a: nd.expand_dims(a, 0) * nd.array([[1, 2]])", [[1.0, 2]]),
    ("squeeze", "lambda a: nd.squeeze(a) * nd.array([1, 2])", [[[1.0], [2]]]),
    ("broadcast_to", "lambda a: nd.broadcast_to(a, (2, 3)) * nd.array([[1, 2, 3], [4, 5, 6]])",
     [[[1.0], [2]]]),
    ("broadcast_like", "lambda a, b: nd.broadcast_like(a, b) * nd.array([[1, 2, 3], [4, 5, 6]])",
     [[[1.0, 2, 3]], [[0.0, 0, 0], [0, 0, 0]]]),
    ("cast", "lambda a: nd.cast(a, 'float64') * 2", [[1.0, 2]]),
    ("LeakyReLU", "lambda a: nd.LeakyReLU(a)", [[-1.0, 0, 2]]),
    ("LeakyReLU negative slope", "lambda a: nd.LeakyReLU(a, slope=-0.5)", [[-1.0, 0, 2]]),
    ("LeakyReLU elu", "lambda a: nd.LeakyReLU(a, act_type='elu', slope=0.7)", [[-1.0, 0, 2]]),
    ("LeakyReLU selu", "lambda a: nd.LeakyReLU(a, act_type='selu')", [[-1.0, 0, 2]]),
    ("LeakyReLU gelu", "lambda a: nd.LeakyReLU(a, act_type='gelu')", [[-2.0, -0.5, 0, 1, 3]]),
    ("LeakyReLU prelu", "lambda a, g: nd.LeakyReLU(a, g, act_type='prelu')",
     [[[[-1.0, 2], [3, -4]], [[-5, 6], [0, -0.5]]], [0.1, 0.5]]),
    ("LeakyReLU prelu one gamma", "lambda a, g: nd.LeakyReLU(a, g, act_type='prelu')",
     [[[-1.0, 2], [3, -4]], [0.25]]),
]


def fresh(nd, np):
    """The arrays every case starts from: the NDArray basics' and these."""
    return dict(
        basics.fresh(nd, np),
        m=nd.array([[1, -2, 3], [-4, 5, -6]]),
        v=nd.array([-3, -1, -0.5, 0, 0.5, 2]),
        r=nd.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]),
        p=nd.array([0.25, 1, 4]),
        k=nd.array([3, -4, 5], dtype="int32"),
        q=nd.array([0.5, 2, 3], dtype="float16"),
        d=nd.array([0.5, 2, 3], dtype="float64"),
    )


def main():
    import mxnet as mx
    cases, gradients = basics.record(mx.nd, mx.nd.NDArray, mx.autograd, mx.cpu, mx.random,
                                     CASES, GRADIENTS, fresh)
    basics.write("mxnet_nd_functions.json", mx.__version__, cases, gradients)


if __name__ == "__main__":
    main()
