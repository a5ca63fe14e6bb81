"""Record what real MXNet 1.9.1 does with the NDArray basics, as a test fixture.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python scripts/make_mxnet_ndarray_fixtures.py

Each case is a few lines of Python written against ``nd`` (and ``np``,
``autograd``, ``cpu``) on fresh arrays (see ``fresh``), valid for both MXNet and
mxdeconv; the last line is the result.  The script writes
tests/data/mxnet_ndarray.json: per case the result's dtype, shape and values,
a Python value, or the error MXNet raised (class and first line), and per
gradient case the gradients of its inputs.  tests/ndarray/test_ndarray.py runs the same
code under mxdeconv and compares, with the deviations it lists and explains.
Integer division by zero is not recorded: it kills MXNet's process (SIGFPE).
"""
import json
import os

import numpy as np

CASES = [
    # -- nd.array's dtype: float32 for anything but an NDArray (issue 21)
    ("nd.array(NumPy float64)", "nd.array(np.array([1.5, -2.25]))"),
    ("nd.array(NumPy float16)", "nd.array(np.array([1.5, 2], dtype=np.float16))"),
    ("nd.array(NumPy int64)", "nd.array(np.array([3, -4]))"),
    ("nd.array(NumPy bool)", "nd.array(np.array([True, False]))"),
    ("nd.array(NumPy float64) + nd.ones", "nd.array(np.ones(2)) + nd.ones((2,))"),
    ("nd.array(float64 NDArray)", "nd.array(nd.array([1, 2], dtype='float64'))"),
    ("nd.array(NumPy float64, dtype=float64)", "nd.array(np.ones(2), dtype='float64')"),
    # -- NumPy scalars on either side are numbers
    ("NumPy float64 < float32", "np.float64(1.5) < nd.array([1, 2])"),
    ("NumPy float64 > float32", "np.float64(1.5) > nd.array([1, 2])"),
    ("NumPy float32 + float32", "np.float32(1.5) + nd.array([1, 2])"),
    ("NumPy int64 * int32", "np.int64(3) * nd.array([1, 2], dtype='int32')"),
    # -- exclude=True with no axis reduces every axis
    ("sum(exclude=True)", "y.sum(exclude=True)"),
    ("mean(axis=(), exclude=True)", "y.mean(axis=(), exclude=True)"),
    # -- variadic functions take separate arrays
    ("nd.concat(list)", "nd.concat([f, g])"),
    ("nd.stack(list)", "nd.stack([f, g])"),
    # -- arithmetic: the result keeps the operands' dtype; scalars are cast first
    ("int32 / 2", "i / 2"),
    ("int32 / 2.5", "i / 2.5"),
    ("int32 * 2.5", "i * 2.5"),
    ("int32 + 2.7", "i + 2.7"),
    ("int32 % 3", "i % 3"),
    ("int32 % 0", "i % 0"),
    ("float32 % 3", "f % 3"),
    ("float32 % -3", "f % -3"),
    ("float32 % 0", "f % 0"),
    ("float32 / 0", "f / 0"),
    ("float32 % float32", "f % g"),
    ("int32 ** 2", "i ** 2"),
    ("int32 ** -1", "j ** -1"),
    ("int32 ** 0.5", "j ** 0.5"),
    ("2 ** float32", "2 ** f"),
    ("float32 ** 0.5", "f ** 0.5"),
    ("float32 ** float32", "nd.array([2.0, 3]) ** nd.array([3.0, 2])"),
    ("3 - float32", "3 - f"),
    ("2 / int32", "2 / j"),
    ("-int32", "-i"),
    ("-uint8", "-u"),
    ("abs(int32)", "abs(i)"),
    ("uint8 + 10 wraps", "u + 10"),
    ("int8 * 2 wraps", "b * 2"),
    ("float16 / 3", "h / 3"),
    ("float16 + 70000", "h + 70000"),
    ("float32 + True", "f + True"),
    ("float32 - numpy int64", "f - np.int64(1)"),
    ("int32.sqrt()", "j.sqrt()"),
    ("int32.exp()", "j.exp()"),
    ("float32.square()", "f.square()"),
    ("float32.sign()", "f.sign()"),
    # -- comparisons: 0/1 in the operands' dtype
    ("float32 == 5", "f == 5"),
    ("int32 < 1", "i < 1"),
    ("float32 >= float32", "f >= g"),
    ("float32 != float32", "f != g"),
    ("5 > float32", "5 > f"),
    # -- broadcasting and operand errors
    ("(2, 3) + (3,)", "nd.ones((2, 3)) + nd.arange(3)"),
    ("(2, 3) * (2, 1)", "nd.ones((2, 3)) * nd.array([[1], [2]])"),
    ("(2, 3) + (2,)", "nd.ones((2, 3)) + nd.ones((2,))"),
    ("float32 + float64", "f + nd.ones((4,), dtype='float64')"),
    ("float32 + int32", "f + i"),
    ("float32 + None", "f + None"),
    ("float32 == None", "f == None"),
    ("float32 + list", "f + [1, 2, 3, 4]"),
    ("float32 // 2", "f // 2"),
    # -- truth values and Python numbers
    ("bool of one element", "bool(f[3])"),
    ("bool of four elements", "bool(f)"),
    ("float() of an NDArray", "float(f[0])"),
    ("len", "len(x)"),
    ("iteration", "[a.shape for a in x]"),
    ("iteration 1-D", "[a.asnumpy().tolist() for a in j]"),
    # -- indexing: read
    ("x[1]", "x[1]"),
    ("x[-1]", "x[-1]"),
    ("x[1, 2]", "x[1, 2]"),
    ("x[(0, 1)]", "x[(0, 1)]"),
    ("f[0] of 1-D", "f[0]"),
    ("x[:, 1]", "x[:, 1]"),
    ("x[:, 1:2]", "x[:, 1:2]"),
    ("x[1, 1:3]", "x[1, 1:3]"),
    ("x[1:3]", "x[1:3]"),
    ("x[5:9]", "x[5:9]"),
    ("x[::2]", "x[::2]"),
    ("x[::-1]", "x[::-1]"),
    ("x[:, ::-1]", "x[:, ::-1]"),
    ("x[None]", "x[None]"),
    ("x[..., 1]", "x[..., 1]"),
    ("x[..., None]", "x[..., None]"),
    ("x[0, None]", "x[0, None]"),
    ("x[[0, 2]]", "x[[0, 2]]"),
    ("x[[-1]]", "x[[-1]]"),
    ("x[[0, 2], [1, 3]]", "x[[0, 2], [1, 3]]"),
    ("x[:, [0, 2]]", "x[:, [0, 2]]"),
    ("x[[[0], [1]]]", "x[[[0], [1]]]"),
    ("x[numpy ints]", "x[np.array([0, 2])]"),
    ("x[NDArray float indices]", "x[nd.array([2, 0])]"),
    ("x[range(2)]", "x[range(2)]"),
    ("x[np.int64(1)]", "x[np.int64(1)]"),
    ("x[True]", "x[True]"),
    ("y[[0, 1], :, [0, 2]]", "y[[0, 1], :, [0, 2]]"),
    ("x[:] is x", "x[:] is x"),
    ("x[5]", "x[5]"),
    ("x[-4]", "x[-4]"),
    ("x[:, 9]", "x[:, 9]"),
    ("x[[5]]", "x[[5]]"),
    ("x[0, 0, 0]", "x[0, 0, 0]"),
    ("x[1.0]", "x[1.0]"),
    ("x['a']", "x['a']"),
    ("x[NumPy bool mask]", "x[np.array([True, False, True])]"),
    # -- views: basic indexing of one block and reshape share memory
    ("x[1:3] is a view", "v = x[1:3]\nv[:] = -1\nx"),
    ("x[1] is a view", "v = x[1]\nv[:] = -1\nx"),
    ("x[1, :2] is a view", "v = x[1, :2]\nv[:] = -1\nx"),
    # -- integers only: a (1,)-shaped view, on 1-D and n-D (issue 21)
    ("f[2] is a view", "v = f[2]\nv[:] = 100\nf"),
    ("f[-1] is a view", "v = f[-1]\nv[:] = 100\nf"),
    ("x[1, 2] is a view", "v = x[1, 2]\nv[:] = 100\nx"),
    ("y[1, 2, 3] is a view", "v = y[1, 2, 3]\nv[:] = 100\ny"),
    ("y[..., 1, 2, 3] shape", "y[..., 1, 2, 3]"),
    ("f[2] += 1 through the view", "v = f[2]\nv += 1\nf"),
    ("x[1, 2] reads", "x[1, 2]"),
    ("x[:, 1:2] is a copy", "v = x[:, 1:2]\nv[:] = -1\nx"),
    ("x[[0]] is a copy", "v = x[[0]]\nv[:] = -1\nx"),
    ("reshape is a view", "v = x.reshape((-1,))\nv[:] = -1\nx"),
    ("flatten is a copy", "v = x.flatten()\nv[:] = -1\nx"),
    ("T is a copy", "v = x.T\nv[:] = -1\nx"),
    # -- indexing: write
    ("x[0] = 5", "x[0] = 5\nx"),
    ("x[1, 2] = 5", "x[1, 2] = 5\nx"),
    ("x[:, 1] = numpy", "x[:, 1] = np.array([7, 8, 9])\nx"),
    ("x[1:3] = NDArray", "x[1:3] = nd.ones((2, 4)) * 2\nx"),
    ("x[:] = row broadcast", "x[:] = nd.array([1, 2, 3, 4])\nx"),
    ("x[0] = leading ones", "x[0] = nd.ones((1, 1, 4))\nx"),
    ("x[0] = list", "x[0] = [1, 2, 3, 4]\nx"),
    ("x[[0, 1], [1, 2]] = 5", "x[[0, 1], [1, 2]] = 5\nx"),
    ("x[::2] = 1", "x[::2] = 1\nx"),
    ("x[:, ::-1] = arange", "x[:, ::-1] = nd.arange(4)\nx"),
    ("x[:] = float64 NDArray", "x[:] = nd.ones((3, 4), dtype='float64') * 3\nx"),
    ("int32[:] = 2.7", "i[:] = 2.7\ni"),
    ("float16[:] = 1e40", "h[:] = 1e40\nh"),
    ("x[0] = wrong shape", "x[0] = nd.ones((3,))\nx"),
    ("x[5] = 1", "x[5] = 1\nx"),
    ("x[0] = 'a'", "x[0] = 'a'\nx"),
    # -- in-place operators: same array, same dtype
    ("int32 += 2.7", "k = i\ni += 2.7\n(k is i, i.asnumpy().tolist(), np.dtype(i.dtype).name)"),
    ("int32 /= 2", "i /= 2\ni"),
    ("float32 -= 1", "f -= 1\nf"),
    ("float32 *= NDArray", "f *= g\nf"),
    ("float32 %= 3", "f %= 3\nf"),
    ("float32 += broadcast row", "x += nd.arange(4)\nx"),
    ("float32 += float64", "f += nd.ones((4,), dtype='float64')\nf"),
    ("(4,) += (2, 4)", "f += nd.ones((2, 4))\nf"),
    # -- reshape and friends
    ("reshape (0, -1)", "y.reshape((0, -1)).shape"),
    ("reshape (4, 0, 2)", "y.reshape((4, 0, 2)).shape"),
    ("reshape (-2,)", "y.reshape((-2,)).shape"),
    ("reshape (-2, 1, 1)", "y.reshape((-2, 1, 1)).shape"),
    ("reshape (-3, 4)", "y.reshape((-3, 4)).shape"),
    ("reshape (0, -3)", "y.reshape((0, -3)).shape"),
    ("reshape (-3, -2)", "y.reshape((-3, -2)).shape"),
    ("reshape (-4, 1, 2, -2)", "y.reshape((-4, 1, 2, -2)).shape"),
    ("reshape (2, -4, -1, 3, -2)", "y.reshape((2, -4, -1, 3, -2)).shape"),
    ("reshape reverse (-1, 0)", "nd.zeros((10, 5, 4)).reshape((-1, 0), reverse=True).shape"),
    ("reshape reverse (0, -1)", "y.reshape((0, -1), reverse=True).shape"),
    ("reshape(4, 6)", "y.reshape(4, 6).shape"),
    ("reshape(shape=)", "y.reshape(shape=(4, 6)).shape"),
    ("reshape to ()", "nd.ones((1,)).reshape(()).shape"),
    ("reshape values", "y.reshape((4, -1))"),
    ("reshape (5, 5)", "y.reshape((5, 5))"),
    ("reshape (-1, -1)", "y.reshape((-1, -1))"),
    ("reshape (-5,)", "y.reshape((-5,))"),
    ("reshape (0, 0, 0, 0)", "y.reshape((0, 0, 0, 0))"),
    ("reshape (2, -3)", "x.reshape((2, -3))"),
    ("reshape (-4, -1, -1, 3)", "x.reshape((-4, -1, -1, 4))"),
    ("reshape (-4, 4, -1, 4)", "x.reshape((-4, 5, -1, 4))"),
    ("reshape order=", "x.reshape((4, 3), order='F')"),
    ("flatten", "y.flatten()"),
    ("flatten 1-D", "j.flatten()"),
    ("T", "y.T"),
    ("T of 1-D is itself", "j.T is j"),
    ("transpose()", "y.transpose()"),
    ("transpose(axes=)", "y.transpose(axes=(1, 0, 2))"),
    ("transpose(tuple)", "y.transpose((2, 0, 1))"),
    ("transpose((0, 0))", "x.transpose(axes=(0, 0))"),
    # -- issue 21, item 6
    ("transpose(2, 0, 1)", "y.transpose(2, 0, 1)"),
    ("transpose((-1, 0, 1))", "y.transpose((-1, 0, 1))"),
    ("transpose(axes=(0, -1, 1))", "y.transpose(axes=(0, -1, 1))"),
    ("nd.transpose(axes=(-1, 0, 1))", "nd.transpose(y, axes=(-1, 0, 1))"),
    ("sign(nan)", "nd.array([np.nan, -2, 0, 3]).sign()"),
    ("nd.sign(nan)", "nd.sign(nd.array([np.nan]))"),
    ("sum(keepdims=1)", "y.sum(keepdims=1)"),
    ("dtype is the type", "y.dtype is np.float32"),
    ("dtype as a dict key", "{np.float32: 'f', np.int32: 'i'}[y.dtype]"),
    ("y[[0, 1], None] shape", "y[[0, 1], None]"),
    ("y[:, None, [0, 1]] shape", "y[:, None, [0, 1]]"),
    ("expand_dims", "x.expand_dims(1)"),
    ("expand_dims(-1)", "x.expand_dims(-1).shape"),
    ("squeeze", "nd.ones((2, 1, 3, 1)).squeeze().shape"),
    ("squeeze(axis)", "nd.ones((2, 1, 3, 1)).squeeze(axis=1).shape"),
    ("squeeze all ones", "nd.ones((1, 1)).squeeze().shape"),
    # -- reductions: every axis gives (1,); integers stay integers
    ("sum", "y.sum()"),
    ("sum(axis=0)", "y.sum(axis=0)"),
    ("sum(axis=(0, 2))", "y.sum(axis=(0, 2))"),
    ("sum(axis=-1)", "y.sum(axis=-1)"),
    ("sum(1, keepdims)", "y.sum(1, keepdims=True)"),
    ("sum(keepdims) all", "y.sum(keepdims=True)"),
    ("sum(exclude)", "y.sum(axis=1, exclude=True)"),
    ("sum(axis=(), )", "y.sum(axis=())"),
    ("sum(exclude) of every axis", "x.sum(axis=(0, 1), exclude=True)"),
    ("sum of 1-D over axis 0", "j.sum(axis=0)"),
    ("sum int32", "i.sum()"),
    ("sum float16", "nd.ones((5000,), dtype='float16').sum()"),
    ("mean", "y.mean(axis=1)"),
    ("mean int32", "nd.array([6, 7], dtype='int32').mean()"),
    ("mean(keepdims)", "x.mean(axis=0, keepdims=True)"),
    ("mean float16", "nd.ones((5000,), dtype='float16').mean()"),
    ("max(axis=1)", "y.max(axis=1)"),
    ("min", "y.min()"),
    ("max int32", "i.max()"),
    ("prod", "nd.array([1, 2, 3]).prod()"),
    ("prod(axis=1)", "nd.array([[1, 2], [3, 4]]).prod(axis=1)"),
    ("norm", "nd.array([3, 4]).norm()"),
    ("norm(axis=1)", "nd.array([[3, 4], [6, 8]]).norm(axis=1)"),
    ("norm(ord=1)", "nd.array([[3, -4], [6, 8]]).norm(ord=1, axis=1)"),
    ("norm(keepdims)", "x.norm(keepdims=True)"),
    ("norm(ord=3)", "x.norm(ord=3)"),
    ("sum(axis=5)", "x.sum(axis=5)"),
    ("sum(axis=(0, 0))", "x.sum(axis=(0, 0))"),
    ("max of empty", "nd.ones((0, 3)).max()"),
    # -- joining and new arrays
    ("concat (default dim=1)", "nd.concat(nd.ones((2, 3)), nd.zeros((2, 1)))"),
    ("concat(dim=0)", "nd.concat(nd.ones((2, 3)), nd.zeros((1, 3)), dim=0)"),
    ("concat(dim=-1)", "nd.concat(nd.ones((2, 3)), nd.zeros((2, 1)), dim=-1).shape"),
    ("concat(num_args=2)", "nd.concat(nd.ones((2, 3)), nd.zeros((2, 1)), num_args=2).shape"),
    ("concat of one", "nd.concat(nd.ones((2, 3))).shape"),
    ("concat of none", "nd.concat()"),
    ("concat shape mismatch", "nd.concat(nd.ones((2, 3)), nd.zeros((1, 3)))"),
    ("concat dtype mismatch", "nd.concat(nd.ones((2, 3)), nd.zeros((2, 3), dtype='float64'))"),
    ("stack", "nd.stack(nd.ones((2, 3)), nd.zeros((2, 3)), axis=1)"),
    ("stack(axis=-1)", "nd.stack(nd.ones((2, 3)), nd.zeros((2, 3)), axis=-1).shape"),
    ("stack shape mismatch", "nd.stack(nd.ones((2, 3)), nd.ones((2, 1)))"),
    ("nd.zeros_like int32", "nd.zeros_like(i)"),
    ("nd.ones_like float16", "nd.ones_like(h)"),
    ("x.zeros_like()", "f.zeros_like()"),
    ("x.ones_like()", "f.ones_like()"),
    ("full int32 2.5", "nd.full((2,), 2.5, dtype='int32')"),
    ("full", "nd.full((2, 2), 3)"),
    ("arange(3)", "nd.arange(3)"),
    ("arange(1, 4, 0.5)", "nd.arange(1, 4, 0.5)"),
    ("arange(3, repeat=2)", "nd.arange(3, repeat=2)"),
    ("arange int32", "nd.arange(0, 3, dtype='int32')"),
    ("arange(3, 0, -1)", "nd.arange(3, 0, -1)"),
    ("arange(2.0, 3)", "nd.arange(2.0, 3)"),
    ("arange step 0", "nd.arange(0, 3, 0)"),
    ("nd.array(5)", "nd.array(5).shape"),
    ("nd.array(np int64)", "np.dtype(nd.array(np.array([1, 2])).dtype).name"),
    ("zeros(shape, ctx, dtype)", "nd.zeros((2,), cpu(), 'float64')"),
    ("ones(ctx=)", "nd.ones((2,), ctx=cpu())"),
    ("array(ctx=, dtype=)", "nd.array([1.5, 2], ctx=cpu(), dtype='int32')"),
    ("empty(ctx=).shape", "nd.empty((2, 3), ctx=cpu()).shape"),
    # -- conversions and copies
    ("astype int32", "nd.array([1.7, -1.7]).astype('int32')"),
    ("astype copy=False", "f.astype('float32', copy=False) is f"),
    ("astype copy=False other dtype", "f.astype('float64', copy=False) is f"),
    ("copy", "f.copy()"),
    ("copyto NDArray of another dtype",
     "nd.array([1.5, 2.5]).copyto(nd.zeros((2,), dtype='int32'))"),
    ("copyto returns the target", "t = nd.zeros((4,))\nf.copyto(t) is t"),
    ("copyto wrong shape", "f.copyto(nd.zeros((3,)))"),
    ("copyto context", "f.copyto(cpu())"),
    ("copyto junk", "f.copyto(3)"),
    ("as_in_context", "f.as_in_context(cpu()) is f"),
    ("asscalar", "float(nd.array([2.5]).asscalar())"),
    ("asscalar of two", "f.asscalar()"),
    # -- random: shapes, dtypes and argument checks (the numbers differ)
    ("uniform() shape", "nd.random.uniform().shape"),
    ("uniform dtype", "np.dtype(nd.random.uniform(shape=(2,)).dtype).name"),
    ("uniform NDArray params", "nd.random.uniform(nd.zeros((2,)), nd.ones((2,)), shape=3).shape"),
    ("normal float64", "np.dtype(nd.random.normal(0, 1, (2, 2), dtype='float64').dtype).name"),
    ("normal out=", "t = nd.zeros((2, 2))\nnd.random.normal(out=t) is t"),
    ("uniform int32", "nd.random.uniform(shape=(2,), dtype='int32')"),
    ("uniform low > high", "nd.random.uniform(2, 1, shape=2)"),
    ("normal scale < 0", "nd.random.normal(0, -1, shape=2)"),
    ("uniform in range", "r = nd.random.uniform(-2, -1, shape=(100,))\n"
                         "(bool((r >= -2).prod().asscalar()), bool((r < -1).prod().asscalar()))"),
    ("seed repeats", "mxr.seed(3)\na = nd.random.uniform(shape=4).asnumpy()\n"
                     "mxr.seed(3)\nbool((a == nd.random.uniform(shape=4).asnumpy()).all())"),
    ("waitall", "nd.waitall()"),
    # -- autograd rules for writes
    ("in-place into a variable while recording",
     "w = nd.ones((2,))\nw.attach_grad()\nwith autograd.record():\n    w += 1\nw"),
    ("in-place into a result while recording",
     "w = nd.ones((2,))\nw.attach_grad()\nwith autograd.record():\n    z = w * 2\n    z += 1\nz"),
    ("in-place of a gradient operand while recording",
     "w = nd.ones((2,))\nw.attach_grad()\nc = nd.ones((2,))\n"
     "with autograd.record():\n    c *= w * 3\nc"),
    ("setitem into a variable while recording",
     "w = nd.ones((2,))\nw.attach_grad()\nwith autograd.record():\n    w[0] = 5\nw"),
    ("setitem of a gradient value while recording",
     "w = nd.ones((2,))\nw.attach_grad()\nc = nd.zeros((3,))\n"
     "with autograd.record():\n    c[1:3] = w * 2\nc"),
    ("plain in-place while recording",
     "c = nd.ones((2,))\nwith autograd.record():\n    c += 1\nc"),
    ("plain setitem while recording",
     "c = nd.ones((2,))\nwith autograd.record():\n    c[0] = 5\nc"),
    ("copyto into a variable while recording",
     "w = nd.ones((2,))\nw.attach_grad()\nwith autograd.record():\n"
     "    nd.zeros((2,)).copyto(w)\nw"),
    ("sgd", "w = nd.array([1.0, 2.0])\nw.attach_grad()\nfor _ in range(2):\n"
            "    with autograd.record():\n        l = (w * w).sum()\n    l.backward()\n"
            "    w[:] = w - 0.1 * w.grad\nw -= 0.1 * w.grad\nw"),
]

# (label, function of the inputs, inputs): gradients of the head's sum.
GRADIENTS = [
    ("add broadcast", "lambda a, b: a + b", [[[1.0, 2], [3, 4]], [1.0, 2]]),
    ("subtract broadcast", "lambda a, b: a - b", [[[1.0, 2], [3, 4]], [1.0, 2]]),
    ("multiply", "lambda a, b: a * b * 3", [[1.0, 2], [4.0, 8]]),
    ("divide", "lambda a, b: a / b", [[1.0, 2], [4.0, 8]]),
    ("scalar / x", "lambda a: 2 / a", [[1.0, 2]]),
    ("x - scalar, scalar - x", "lambda a: (a - 2) * (5 - a)", [[1.0, 3]]),
    ("negative", "lambda a: -a * a", [[-1.0, 0, 2]]),
    ("power by a constant", "lambda a: a ** 3", [[1.0, 2]]),
    ("sqrt power at 0", "lambda a: a ** 0.5", [[0.0, 4]]),
    ("constant ** x", "lambda a: 2 ** a", [[1.0, 2]]),
    ("x ** y", "lambda a, b: a ** b", [[1.0, 2], [2.0, 3]]),
    ("mod", "lambda a, b: a % b", [[7.0, -7], [3.0, 3]]),
    ("abs", "lambda a: abs(a)", [[-1.0, 0, 2]]),
    ("sqrt", "lambda a: a.sqrt()", [[4.0, 9]]),
    ("exp", "lambda a: a.exp()", [[0.0, 1]]),
    ("log", "lambda a: a.log()", [[1.0, 4]]),
    ("square", "lambda a: a.square()", [[1.0, -3]]),
    ("comparison times x", "lambda a: (a > 0) * a", [[-1.0, 2]]),
    ("comparison alone", "lambda a: a > 0", [[-1.0, 2]]),
    ("sign", "lambda a: a.sign() * a", [[-2.0, 3]]),
    ("relu", "lambda a: nd.relu(a)", [[-1.0, 0, 2]]),
    ("sum(axis=0)", "lambda a: a.sum(axis=0) * nd.array([1, 2])", [[[1.0, 2], [3, 4]]]),
    ("sum", "lambda a: a.sum()", [[[1.0, 2], [3, 4]]]),
    ("mean", "lambda a: a.mean()", [[[1.0, 2], [3, 4]]]),
    ("mean(axis=1, keepdims)", "lambda a: a.mean(axis=1, keepdims=True) * nd.array([[1], [2]])",
     [[[1.0, 2], [3, 4]]]),
    ("max with ties", "lambda a: a.max()", [[1.0, 3, 3]]),
    ("min(axis=1)", "lambda a: a.min(axis=1)", [[[1.0, 2], [4, 3]]]),
    ("prod", "lambda a: a.prod()", [[1.0, 2, 3]]),
    ("norm", "lambda a: a.norm()", [[3.0, 4]]),
    ("norm(ord=1)", "lambda a: a.norm(ord=1)", [[3.0, -4]]),
    ("reshape", "lambda a: a.reshape((2, 2)) * nd.array([[1, 2], [3, 4]])", [[1.0, 2, 3, 4]]),
    ("reshape special values", "lambda a: a.reshape((-3,)) * nd.array([1, 2, 3, 4])",
     [[[1.0, 2], [3, 4]]]),
    ("T", "lambda a: a.T * nd.array([[1, 2], [3, 4]])", [[[1.0, 2], [3, 4]]]),
    ("transpose(axes)", "lambda a: a.transpose((1, 0, 2)) * nd.arange(8).reshape((2, 2, 2))",
     [[[[1.0, 2], [3, 4]], [[5, 6], [7, 8]]]]),
    ("flatten", "lambda a: a.flatten() * 2", [[[[1.0]], [[2.0]]]]),
    ("slice x[1:3]", "lambda a: a[1:3] * 2", [[1.0, 2, 3, 4]]),
    ("x[1]", "lambda a: a[1] * 2", [[[1.0, 2], [3, 4]]]),
    ("x[::2]", "lambda a: a[::2] * 2", [[1.0, 2, 3, 4]]),
    ("x[:, 1:]", "lambda a: a[:, 1:] * nd.array([[1], [2]])", [[[1.0, 2], [3, 4]]]),
    ("x[[0, 0, 1]]", "lambda a: a[[0, 0, 1]] * 2", [[1.0, 2, 3]]),
    ("copy", "lambda a: a.copy() * 2", [[1.0]]),
    ("astype", "lambda a: a.astype('float64') * 2", [[1.0]]),
    ("concat", "lambda a, b: nd.concat(a, b, dim=0) * nd.array([1, 2, 3])", [[1.0], [2.0, 3]]),
    ("stack", "lambda a, b: nd.stack(a, b) * nd.array([[1], [2]])", [[1.0], [2.0]]),
    ("expand_dims", "lambda a: a.expand_dims(0) * nd.array([[1, 2]])", [[1.0, 2]]),
]


def fresh(nd, np):
    """The arrays every case starts from (new ones for each case)."""
    return dict(
        x=nd.arange(12).reshape((3, 4)),
        y=nd.arange(24).reshape((2, 3, 4)),
        f=nd.array([7.5, -7.5, 5, 0]),
        g=nd.array([1, -7.5, 5, 2]),
        i=nd.array([7, -7, 5, 0], dtype="int32"),
        j=nd.array([2, 3], dtype="int32"),
        u=nd.array([250, 3], dtype="uint8"),
        b=nd.array([100], dtype="int8"),
        h=nd.array([1.0, 2.0], dtype="float16"),
    )


def run(code, namespace):
    """Run a case: its statements, then its last line as the result."""
    *body, result = code.split("\n")
    exec("\n".join(body), namespace)  # noqa: S102 - the fixture's own code
    return eval(result, namespace)  # noqa: S307


def encode(value, array_type):
    """A JSON record of a case's result."""
    if isinstance(value, array_type):
        return {"dtype": np.dtype(value.dtype).name, "shape": list(value.shape),
                "values": value.asnumpy().tolist()}
    return {"python": json.loads(json.dumps(value))}  # tuples become lists


def record(nd, array_type, autograd, cpu, mxr, case_list=None, gradient_list=None,
           make_arrays=None):
    """Every case's outcome as JSON-ready records (``case_list``,
    ``gradient_list`` and ``make_arrays``: another script's, by default this
    one's ``CASES``, ``GRADIENTS`` and ``fresh``)."""
    case_list = CASES if case_list is None else case_list
    gradient_list = GRADIENTS if gradient_list is None else gradient_list
    make_arrays = fresh if make_arrays is None else make_arrays
    cases = []
    for label, code in case_list:
        namespace = dict(make_arrays(nd, np), nd=nd, np=np, autograd=autograd, cpu=cpu,
                         mxr=mxr)
        try:
            outcome = encode(run(code, namespace), array_type)
        except Exception as error:  # noqa: BLE001 - the outcome being recorded
            lines = [line for line in str(error).splitlines() if line.strip()]
            checks = [line for line in lines if "Check failed" in line or "Error" in line]
            outcome = {"error": type(error).__name__,
                       "message": (checks[-1] if checks else lines[0] if lines else "")[:300]}
        cases.append(dict(label=label, code=code, **outcome))
    gradients = []
    for label, function, inputs in gradient_list:
        arrays = [nd.array(values) for values in inputs]
        for arr in arrays:
            arr.attach_grad()
        with autograd.record():
            head = eval(function, dict(nd=nd))(*arrays)  # noqa: S307
        head.backward()
        gradients.append(dict(label=label, function=function, inputs=inputs,
                              grads=[arr.grad.asnumpy().tolist() for arr in arrays]))
    return cases, gradients


def write(filename, version, cases, gradients):
    """Write a fixture file ``tests/data/<filename>`` (this script's and
    make_mxnet_nd_function_fixtures.py's format)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        filename)
    with open(path, "w") as handle:
        json.dump({"mxnet_version": version, "cases": cases, "gradients": gradients},
                  handle, indent=1)
    print(f"wrote {len(cases)} cases and {len(gradients)} gradient cases to {path}")


def main():
    import mxnet as mx
    cases, gradients = record(mx.nd, mx.nd.NDArray, mx.autograd, mx.cpu, mx.random)
    write("mxnet_ndarray.json", mx.__version__, cases, gradients)


if __name__ == "__main__":
    main()
