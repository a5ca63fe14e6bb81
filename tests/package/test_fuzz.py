"""Fuzzing the public entry points with arbitrary, also invalid, arguments.

Each example draws a whole call: forward or backward, parameters whose entries
may be missing, of the wrong length, zero, negative, huge or of the wrong Python
type, data of any rank and channel count, weight/bias/out_grad/out/grads of
perturbed shapes and dtypes, a req (valid or not) and the implementation.  An
independent oracle (:func:`expected_outcome`, written from MXNet's rules, not
from ``mxdeconv.semantics.attributes``) says whether the call is valid and what the output
shape is.  Then

* a valid call must return the float64 reference's values (within a
  dtype-dependent tolerance), with MXNet's req semantics on the targets;
* an invalid one must raise ``MXNetError`` or ``TypeError`` -- never anything
  else, never a crash -- and leave every input and target untouched.

CI runs ``MXDECONV_FUZZ_EXAMPLES`` examples (default 400).  The long run,
>= 10^5 examples in chunks with fresh seeds, is ``python scripts/qa/fuzz.py``
(see docs/reliability.md).
"""
from __future__ import annotations

import contextlib
import math
import numbers
import os
import warnings
from collections import Counter
from typing import Any, Dict, Optional, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings
from hypothesis import strategies as st

import mxdeconv
from helpers import nd_keeping_dtype
from mxdeconv import MXNetError, nd
from reference import mxnet_pads, output_spatial, reference_backward, reference_forward
from strategies import configs

MAX = 2**31 - 1           # the documented largest parameter entry
HUGE = [2**31, 2**40, 2**63, 10**20]  # all above MAX: rejected, never allocated
REQS = ("write", "inplace", "add", "null")
DTYPES = (np.float32, np.float64, np.float16)
CI_EXAMPLES = int(os.environ.get("MXDECONV_FUZZ_EXAMPLES", "400"))
#: Outcome counts of every example run in this process (read by scripts/qa/fuzz.py).
STATS: Counter = Counter()
MISSING = object()        # a keyword left out of the call


# -- drawing arbitrary calls -------------------------------------------------------
def entry(valid: st.SearchStrategy, huge: list) -> st.SearchStrategy:
    """Mostly a valid integer, sometimes out of range or of a wrong type."""
    return st.one_of(
        valid, valid, valid, valid, valid, valid,
        st.integers(-2, 0),
        st.sampled_from(huge),
        st.sampled_from([2.0, True, "2", None]),
        valid.map(np.int64))


JUNK = st.sampled_from([2.0, True, "2", None, 1.5, "x", (), [], (1, 2.5)])


def junk_for(field: str, ndim: int) -> st.SearchStrategy:
    """An arbitrary replacement value for parameter ``field`` (valid or not)."""
    if field in ("kernel", "stride", "dilate", "pad", "adj", "target_shape"):
        valid = {"kernel": st.integers(1, 3), "stride": st.integers(1, 3),
                 "dilate": st.integers(1, 2), "target_shape": st.integers(0, 12)}.get(
                     field, st.integers(0, 2))
        huge = ([MAX, MAX + 1, 2**63] if field == "kernel" else
                HUGE if field in ("stride", "dilate") else [MAX] + HUGE)
        lengths = st.sampled_from([ndim, ndim, 0, 1, 2, 3, 4])
        return st.one_of(
            lengths.flatmap(lambda n: st.lists(entry(valid, huge), min_size=n, max_size=n)
                            .map(tuple)),
            st.lists(entry(valid, huge), min_size=ndim, max_size=ndim),
            entry(valid, huge), JUNK)
    if field in ("num_filter", "num_group"):
        return entry(st.integers(1, 6), [MAX + 1, 2**40])
    return {"no_bias": st.sampled_from([0, 1, 2, None, "no", np.bool_(False), True, False]),
            "layout": st.sampled_from([None, "NCHW", "NCW", "NCDHW", "NHWC", 3]),
            "workspace": st.sampled_from([0, 1024, -1, "x", 2.0]),
            "cudnn_tune": st.sampled_from([None, "off", "fastest", "slow", 1]),
            "cudnn_off": st.sampled_from([True, False, 3, None]),
            "kernal": st.just((3,))}[field]


MUTATIONS = ("param", "param", "param", "drop_param", "poison", "data_rank", "data_channels",
             "data_spatial", "data_type", "weight_shape", "weight_dtype", "bias_shape",
             "bias_dtype", "bias_presence", "out_grad_shape", "out_grad_dtype", "req",
             "reqs", "target_shape", "target_dtype", "train", "impl_onednn", "data_dtype")
PARAM_FIELDS = ("kernel", "stride", "dilate", "pad", "adj", "target_shape", "num_filter",
                "num_group", "no_bias", "layout", "workspace", "cudnn_tune", "cudnn_off",
                "kernal")


@st.composite
def calls(draw) -> Dict[str, Any]:
    """A valid call (from strategies.configs), then 0, 1 or more arbitrary mutations:
    about half of the examples stay valid."""
    # per-group channels: mostly 1-2; sometimes 8/16/17, where oneDNN picks blocked
    # (and padded) layouts
    channels = st.one_of(*[st.integers(1, 2)] * 15, st.sampled_from([8, 16, 17]))
    cfg = draw(configs(min_batch=0, max_batch=2, channels=channels, max_groups=2))
    ndim = cfg.ndim
    params: Dict[str, Any] = dict(cfg.kwargs())
    for name in ("stride", "dilate", "pad", "adj", "num_group"):  # defaults may be left out
        default = 0 if name in ("pad", "adj") else 1
        value = params[name]
        if (value == (default,) * ndim or value == default) and draw(st.booleans()):
            del params[name]
    for name in ("kernel", "stride", "pad"):  # other spellings of the same value
        if name in params and draw(st.integers(0, 3)) == 0:
            params[name] = draw(st.sampled_from([list, lambda v: tuple(map(np.int64, v))]))(
                params[name])
    dtype = draw(st.sampled_from([np.float32] * 4 + [np.float64, np.float16]))
    c = dict(params=params, data_shape=cfg.data_shape, weight_shape=cfg.weight_shape,
             bias_shape=cfg.bias_shape, dtype=dtype, weight_dtype=dtype, bias_dtype=dtype,
             data_dtype=None, data_kind="array", og_shape_error=False, og_dtype=dtype,
             as_numpy=draw(st.booleans()), backward=draw(st.booleans()),
             impl=draw(st.sampled_from([None, None, "numpy", "onednn"])),
             req=draw(st.sampled_from(REQS)), reqs=None,
             give_targets=draw(st.booleans()), target_shape_error=False, target_dtype=None,
             train=draw(st.sampled_from([None, True, False])), seed=draw(st.integers(0, 2**31)),
             poison=None)
    if c["impl"] == "onednn" and (dtype != np.float32 or cfg.batch == 0):
        c["impl"] = None  # stays valid unless mutated
    if c["backward"] and draw(st.booleans()):
        c["reqs"] = tuple(draw(st.sampled_from(REQS)) for _ in range(3))
    if not c["give_targets"] and (c["req"] == "add" or "add" in (c["reqs"] or ())):
        c["give_targets"] = True
    n_mutations = draw(st.sampled_from([0, 0, 0, 0, 1, 1, 1, 2, 3]))
    for kind in (draw(st.sampled_from(MUTATIONS)) for _ in range(n_mutations)):
        mutate(draw, c, kind, ndim)
    c["mutations"] = n_mutations
    return c


def mutate(draw, c: Dict[str, Any], kind: str, ndim: int) -> None:
    flip = lambda: draw(st.sampled_from([t for t in DTYPES if t != c["dtype"]]))  # noqa: E731
    if kind == "param":
        field = draw(st.sampled_from(PARAM_FIELDS))
        c["params"][field] = draw(junk_for(field, ndim))
    elif kind == "drop_param":
        c["params"].pop(draw(st.sampled_from(["kernel", "num_filter", "stride", "pad"])), None)
    elif kind == "data_rank":
        shape = c["data_shape"]
        c["data_shape"] = draw(st.sampled_from([shape[:-1], shape + (2,), shape[:1]]))
    elif kind == "data_channels":
        shape = c["data_shape"]
        c["data_shape"] = shape[:1] + (draw(st.integers(0, 5)),) + shape[2:]
    elif kind == "data_spatial":
        shape = list(c["data_shape"])
        if len(shape) > 2:
            shape[draw(st.integers(2, len(shape) - 1))] = draw(st.sampled_from([0, 1, 4]))
        c["data_shape"] = tuple(shape)
    elif kind == "data_type":
        c["data_kind"] = draw(st.sampled_from(["list", "none", "int", "scalar"]))
    elif kind == "data_dtype":
        c["data_dtype"] = flip()
    elif kind == "weight_shape":
        w = list(c["weight_shape"])
        axis = draw(st.integers(0, len(w) - 1))
        w[axis] += draw(st.sampled_from([-1, 1]))
        w = [max(v, 0) for v in w]
        c["weight_shape"] = tuple(w) if draw(st.booleans()) else tuple(w[:-1])
    elif kind == "weight_dtype":
        c["weight_dtype"] = flip()
    elif kind == "bias_shape":
        c["bias_shape"] = draw(st.sampled_from([(1,), (7,), (), (2, 2)]))
    elif kind == "bias_dtype":
        c["bias_dtype"] = flip()
    elif kind == "bias_presence":
        nf = c["params"].get("num_filter")
        c["bias_shape"] = None if c["bias_shape"] is not None else (
            nf if is_int(nf) and 1 <= nf <= 64 else 1,)
    elif kind == "out_grad_shape":
        c["og_shape_error"] = True
    elif kind == "out_grad_dtype":
        c["og_dtype"] = flip()
    elif kind == "req":
        c["req"] = draw(st.sampled_from(["bogus", None, 1, ["write"], "", "ADD"]))
    elif kind == "reqs":
        c["reqs"] = draw(st.one_of(st.lists(st.sampled_from(REQS + ("x", None)), min_size=0,
                                            max_size=4).map(tuple), st.just(5)))
        c["give_targets"] = draw(st.booleans())
    elif kind == "target_shape":
        c["give_targets"] = c["target_shape_error"] = True
    elif kind == "target_dtype":
        c["give_targets"], c["target_dtype"] = True, flip()
    elif kind == "train":
        c["train"] = draw(st.sampled_from(["yes", 2, 1.0]))
    elif kind == "impl_onednn":
        c["impl"] = "onednn"
    elif kind == "poison":  # still valid: NaN/inf must propagate
        c["poison"] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))


# -- the oracle ------------------------------------------------------------------------
def is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def norm_shape(value: Any, ndim: int, default: int, low: int, empty_ok: bool):
    """MXNet's reading of a shape-like field: None on error, else a tuple."""
    if value is MISSING or value is None:
        return () if empty_ok else (default,) * ndim
    if is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(is_int(v) for v in value):
        return None
    if len(value) == 0:
        return () if empty_ok else (default,) * ndim
    if len(value) != ndim or any(not low <= v <= MAX for v in value):
        return None
    return tuple(int(v) for v in value)


INTEGER_TEXT_FIELDS = ("kernel", "stride", "dilate", "pad", "adj", "target_shape",
                       "num_filter", "num_group", "workspace")


def expected_outcome(c: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """None if the call is invalid, else the geometry the reference needs."""
    p = dict(c["params"])
    # MXNet's text attributes (dmlc's parser): a decimal integer reads as that
    # integer, and in a shape field as the 1-tuple of it.  "2" is the only such
    # text the strategies draw; "x" and the like stay invalid.
    for name in INTEGER_TEXT_FIELDS:
        if isinstance(p.get(name), str) and p[name].strip().isdigit():
            p[name] = int(p[name])
    known = {"kernel", "stride", "dilate", "pad", "adj", "target_shape", "num_filter",
             "num_group", "no_bias", "layout", "workspace", "cudnn_tune", "cudnn_off"}
    if set(p) - known:
        return None
    # MXNet's workspace is a uint64 read by dmlc's parser: a negative value wraps
    # around (-1 is accepted), one of 2**64 or more is refused.
    if "workspace" in p and not (is_int(p["workspace"]) and -2**64 < p["workspace"] < 2**64):
        return None
    if p.get("cudnn_tune") not in (None, "off", "limited_workspace", "fastest"):
        return None
    if "cudnn_off" in p and p["cudnn_off"] not in (True, False):  # 0/1 compare equal
        return None
    kernel = p.get("kernel")
    if kernel is None or is_int(kernel):
        kernel = (kernel,) if is_int(kernel) else None
    if not isinstance(kernel, (tuple, list)) or not all(is_int(k) for k in kernel):
        return None
    ndim = len(kernel)
    if ndim not in (1, 2, 3) or any(not 1 <= k <= MAX for k in kernel):
        return None
    stride = norm_shape(p.get("stride", MISSING), ndim, 1, 1, False)
    dilate = norm_shape(p.get("dilate", MISSING), ndim, 1, 1, False)
    pad = norm_shape(p.get("pad", MISSING), ndim, 0, 0, False)
    adj = norm_shape(p.get("adj", MISSING), ndim, 0, 0, False)
    target = norm_shape(p.get("target_shape", MISSING), ndim, 0, 0, True)
    if None in (stride, dilate, pad, adj, target):
        return None
    nf, groups = p.get("num_filter"), p.get("num_group", 1)
    if not (is_int(nf) and is_int(groups) and 1 <= nf <= MAX and 1 <= groups <= MAX):
        return None
    if nf % groups:
        return None
    no_bias = p.get("no_bias", True)
    if not (isinstance(no_bias, (bool, np.bool_)) or (is_int(no_bias) and no_bias in (0, 1))):
        return None
    layout = p.get("layout")
    if layout is not None and layout != {1: "NCW", 2: "NCHW", 3: "NCDHW"}[ndim]:
        return None
    use_target = any(target)
    if not use_target and any(a >= s for a, s in zip(adj, stride)):
        return None
    # data, weight, bias
    shape = c["data_shape"]
    if len(shape) != ndim + 2 or shape[1] == 0 or shape[1] % groups:
        return None
    if any(s < 1 for s in shape[2:]):
        return None
    full = [s * (i - 1) + d * (k - 1) + 1
            for i, k, s, d in zip(shape[2:], kernel, stride, dilate)]
    if use_target:
        totals = [f - t for f, t in zip(full, target)]
        if any(t < 0 for t in totals) or any(t % 2 >= s for t, s in zip(totals, stride)):
            return None
    pad_l, pad_r = mxnet_pads(kernel, stride, dilate, pad, adj, target, shape[2:])
    out_spatial = output_spatial(shape[2:], kernel, stride, dilate, pad_l, pad_r)
    if any(o <= 0 for o in out_spatial):
        return None
    if tuple(c["weight_shape"]) != (shape[1], nf // groups) + tuple(kernel):
        return None
    dtype = c["data_dtype"] or c["dtype"]
    if c["data_kind"] != "array" or c["weight_dtype"] != dtype:
        return None
    if bool(no_bias) != (c["bias_shape"] is None):
        return None
    if not no_bias and (c["bias_shape"] != (nf,) or c["bias_dtype"] != dtype):
        return None
    if c["backward"] and (c["og_shape_error"] or c["og_dtype"] != dtype):
        return None
    if not (c["train"] is None or isinstance(c["train"], bool)):
        return None
    out_shape = (shape[0], nf) + out_spatial
    return dict(kernel=tuple(kernel), stride=stride, dilate=dilate, pad_l=pad_l, pad_r=pad_r,
                num_group=groups, no_bias=bool(no_bias), out_shape=out_shape)


def req_outcome(c, valid_geom) -> Tuple[Optional[Tuple[str, ...]], bool]:
    """(the req per result, or None if the req/targets are invalid; targets given)."""
    if c["backward"]:
        reqs = c["reqs"] if c["reqs"] is not None else (c["req"],) * 3
        if not (isinstance(reqs, tuple) and len(reqs) == 3
                and all(isinstance(r, str) and r in REQS for r in reqs)):
            return None, c["give_targets"]
        if valid_geom is not None and valid_geom["no_bias"]:
            reqs = reqs[:2] + ("null",)
    else:
        reqs = (c["req"],)
        if not (isinstance(c["req"], str) and c["req"] in REQS):
            return None, c["give_targets"]
    give = c["give_targets"]
    dtype = c["data_dtype"] or c["dtype"]  # the call's dtype is data's
    if not give and any(r == "add" for r in reqs):
        return None, give  # req=add needs a target to add into
    if give and (c["target_shape_error"] or (c["target_dtype"] or c["dtype"]) != dtype):
        return None, give
    return reqs, give


# -- running one example -----------------------------------------------------------------
def tolerance(dtype, terms: int, scale: float):
    if dtype == np.float64:
        return 1e-9 * (1 + terms) * scale
    if dtype == np.float32:
        return 1e-4 * (1 + math.sqrt(terms)) * scale
    return 2e-3 * scale + 1e-4 * terms * scale  # float16: final rounding + f32 sums


def check_close(name, got, expected, dtype, terms, poisoned=False):
    """Close to the reference; with NaN/inf inputs, every non-finite reference entry
    must be non-finite in the result too (propagated, never masked), and the
    entries finite in both must be close.  (Where the reference is finite an
    implementation may still produce NaN: a kernel that multiplies an inf input by
    a padding zero the reference skips.)"""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape, (name, got.shape, expected.shape)
    finite = np.isfinite(expected)
    assert not np.isfinite(got[~finite]).any(), (name, "non-finite value masked")
    if poisoned:
        finite &= np.isfinite(got)
    else:
        assert np.isfinite(got[finite]).all(), (name, "non-finite from finite inputs")
    got, expected = got[finite], expected[finite]
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    err = float(np.abs(got - expected).max(initial=0))
    assert err <= tolerance(dtype, terms, scale), (name, err, scale, terms)


def run_call(c: Dict[str, Any]) -> None:
    rng = np.random.default_rng(c["seed"])
    dtype = c["dtype"]  # of everything but data (data_dtype may differ)

    def draw(shape, dt):
        return None if shape is None else rng.uniform(-1, 1, size=shape).astype(dt)

    geom = expected_outcome(c)
    data = draw(c["data_shape"], c["data_dtype"] or dtype)
    weight = draw(c["weight_shape"], c["weight_dtype"])
    bias = draw(c["bias_shape"], c["bias_dtype"])
    out_shape = geom["out_shape"] if geom else (1,)
    og_shape = out_shape + (1,) if c["og_shape_error"] else out_shape
    og = draw(og_shape, c["og_dtype"]) if c["backward"] else None
    reqs, give = req_outcome(c, geom)
    valid = geom is not None and reqs is not None
    if valid and c["impl"] == "onednn" and any(r != "null" for r in reqs):
        # a forced oneDNN cannot run float64/float16 or an empty batch (req=null
        # computes nothing and dispatches nothing)
        valid = (c["data_dtype"] or dtype) == np.float32 and c["data_shape"][0] > 0

    # targets: right shape/dtype unless the example asks for a wrong one
    tdtype = c["target_dtype"] or dtype
    if geom is not None:
        shapes = ([c["data_shape"], c["weight_shape"], c["bias_shape"] or (1,)]
                  if c["backward"] else [out_shape])
    else:
        shapes = [(1,)] * (3 if c["backward"] else 1)
    if c["target_shape_error"]:
        shapes = [tuple(s) + (1,) for s in shapes]
    targets = [nd_keeping_dtype(draw(s, tdtype)) for s in shapes] if give else None
    before_targets = [np.array(np.asarray(t), copy=True) for t in targets] if give else []

    if c["poison"] is not None:
        for a in (data, og):
            if a is not None and a.size:
                a.reshape(-1)[rng.integers(a.size)] = c["poison"]
    inputs = [data, weight, bias] if not c["backward"] else [og, data, weight, bias]
    before_inputs = [None if a is None else a.copy() for a in inputs]
    if not c["as_numpy"]:
        inputs = [None if a is None else nd_keeping_dtype(a) for a in inputs]
    index = 1 if c["backward"] else 0
    inputs[index] = {"array": lambda a: a, "list": lambda a: np.asarray(a).tolist(),
                     "none": lambda a: None, "int": lambda a: np.asarray(a).round().astype(
                         np.int64) if np.isfinite(np.asarray(a)).all() else np.int64(3),
                     "scalar": lambda a: np.float32(1)}[c["data_kind"]](inputs[index])
    if c["data_kind"] != "array":
        before_inputs[index] = None
    kwargs = dict(c["params"])
    if c["train"] is not None:
        kwargs["train"] = c["train"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from NaN/inf either
        warnings.simplefilter("ignore", mxdeconv.Float16OverflowWarning)
        try:
            with mxdeconv.use_impl(c["impl"]) if c["impl"] else contextlib.nullcontext():
                if c["backward"]:
                    req = c["reqs"] if c["reqs"] is not None else c["req"]
                    result = nd.Deconvolution_backward(
                        *inputs, req=req, grads=list(targets) if give else None, **kwargs)
                else:
                    result = nd.Deconvolution(*inputs, out=targets[0] if give else None,
                                              req=c["req"], **kwargs)
        except (MXNetError, TypeError) as error:
            STATS["error:" + type(error).__name__] += 1
            assert not valid, f"valid call raised {type(error).__name__}: {error}"
            for a, b in zip(inputs, before_inputs):
                if b is not None and isinstance(a, (np.ndarray, nd.NDArray)) \
                        and np.shape(a) == b.shape:
                    np.testing.assert_array_equal(np.asarray(a), b)
            for t, b in zip(targets or [], before_targets):
                np.testing.assert_array_equal(np.asarray(t), b)
            return
    assert valid, f"invalid call returned {result!r} (oracle: geometry {geom}, req {reqs})"
    STATS["valid:" + ("backward" if c["backward"] else "forward")] += 1
    for a, b in zip(inputs, before_inputs):
        if b is not None:
            np.testing.assert_array_equal(np.asarray(a), b)

    as64 = lambda a: None if a is None else a.astype(np.float64)  # noqa: E731
    args = {k: geom[k] for k in ("kernel", "stride", "dilate", "pad_l", "pad_r", "num_group")}
    k = math.prod(geom["kernel"])
    np_errors = np.errstate(invalid="ignore", over="ignore")
    np_errors.__enter__()
    if c["backward"]:
        expected = reference_backward(as64(og), as64(data), as64(weight),
                                      with_bias=not geom["no_bias"], **args)
        terms = max(c["data_shape"][0] * math.prod(out_shape[2:]),
                    out_shape[1] * k, 1)
        names = ("data_grad", "weight_grad", "bias_grad")
    else:
        expected = (reference_forward(as64(data), as64(weight),
                                      None if geom["no_bias"] else as64(bias), **args),)
        terms = c["data_shape"][1] * k + 1
        names = ("output",)
    np_errors.__exit__(None, None, None)
    results = result if c["backward"] else (result,)
    assert len(results) == len(names)
    for i, (name, got, exp, req) in enumerate(zip(names, results, expected, reqs)):
        if req == "null":
            assert got is None or (not c["backward"] and got is (targets[0] if give else None))
            if give:
                np.testing.assert_array_equal(np.asarray(targets[i]), before_targets[i])
            continue
        if exp is None:
            assert got is None
            continue
        if give:
            assert got is targets[i], name
            if req == "add":
                exp = exp + before_targets[i].astype(np.float64)
        check_close(name, got, exp, c["data_dtype"] or dtype, terms,
                    poisoned=c["poison"] is not None)


def make_fuzz_test(max_examples: int, seed: Optional[int] = None):
    """The fuzz property as a Hypothesis test of ``max_examples`` examples."""
    @settings(max_examples=max_examples, deadline=None, database=None if seed else
              settings.default.database,
              suppress_health_check=list(HealthCheck))
    @given(c=calls())
    def fuzz(c):
        STATS["examples"] += 1
        run_call(c)

    return hypothesis_seed(seed)(fuzz) if seed is not None else fuzz


test_fuzz_calls = make_fuzz_test(CI_EXAMPLES)


PARSER_PARAMS = st.dictionaries(
    st.sampled_from(["kernel", "stride", "dilate", "pad", "adj", "target_shape", "num_filter",
                     "num_group", "no_bias", "layout", "workspace", "cudnn_tune", "cudnn_off",
                     "kernal"]),
    st.one_of(st.none(), st.booleans(), st.integers(-3, 2**64), st.floats(),
              st.text(max_size=3), st.lists(st.integers(-3, 5), max_size=4).map(tuple),
              st.lists(st.one_of(st.integers(-1, 4), st.floats(0, 3)), max_size=3),
              st.lists(st.sampled_from([0, 1, 2, MAX, MAX + 1, 2**63]), max_size=3)))


def make_parser_test(max_examples: int, seed: Optional[int] = None):
    """The parser alone, on anything: a DeconvolutionParam or MXNetError/TypeError."""
    from mxdeconv.semantics.attributes import DeconvolutionParam, parse_params

    @settings(max_examples=max_examples, deadline=None, database=None if seed else
              settings.default.database, suppress_health_check=list(HealthCheck))
    @given(params=PARSER_PARAMS)
    def parser(params):
        STATS["parser_examples"] += 1
        try:
            param = parse_params(params)
        except (MXNetError, TypeError):
            STATS["parser_errors"] += 1
            return
        assert isinstance(param, DeconvolutionParam)
        assert 1 <= param.ndim <= 3 and all(1 <= k <= MAX for k in param.kernel)
        for field in (param.stride, param.dilate, param.pad, param.adj):
            assert len(field) == param.ndim and all(0 <= v <= MAX for v in field)
        assert 1 <= param.num_group <= param.num_filter <= MAX
        # the same dict parses to the same value, cached or not
        assert parse_params(dict(params)) == param

    return hypothesis_seed(seed)(parser) if seed is not None else parser


test_fuzz_parameter_parser = make_parser_test(CI_EXAMPLES)


# -- examples the exploring runs found, kept as fixed cases ---------------------------
def found_call(params: Dict[str, Any], data_shape: Tuple[int, ...], **overrides: Any):
    """A whole call as :func:`calls` draws it: float32, forward, no targets."""
    param_kernel = params["kernel"]
    ndim = 1 if isinstance(param_kernel, int) else len(param_kernel)
    groups, num_filter = params.get("num_group", 1), int(params["num_filter"])
    kernel = (param_kernel,) * ndim if isinstance(param_kernel, int) else tuple(param_kernel)
    c = dict(params=params, data_shape=data_shape,
             weight_shape=(data_shape[1], num_filter // groups, *kernel),
             bias_shape=None if params.get("no_bias", True) else (num_filter,),
             dtype=np.float32, weight_dtype=np.float32, bias_dtype=np.float32,
             data_dtype=None, data_kind="array", og_shape_error=False, og_dtype=np.float32,
             as_numpy=False, backward=False, impl=None, req="write", reqs=None,
             give_targets=False, target_shape_error=False, target_dtype=None, train=None,
             seed=0, poison=None, mutations=0)
    c.update(overrides)
    return c


FOUND = {
    # MXNet's uint64 workspace wraps a negative value: -1 is valid (the oracle
    # once called it invalid; an AVX2 CI run drew it).
    "workspace_minus_one_empty_batch": found_call(
        dict(kernel=(1,), stride=(2,), dilate=(2,), adj=(1,), num_filter=2, num_group=2,
             no_bias=False, workspace=-1), (0, 2, 1)),
    "workspace_minus_one": found_call(
        dict(kernel=(3, 3), stride=(2, 2), num_filter=4, no_bias=False, workspace=-1),
        (2, 4, 3, 3), backward=True),
    "workspace_2_to_64_refused": found_call(
        dict(kernel=(3, 3), num_filter=4, workspace=2**64), (1, 4, 3, 3)),
    # A decimal-integer text reads as that integer, as in MXNet's text attributes.
    "num_filter_text_empty_batch": found_call(
        dict(kernel=(3,), num_filter="2"), (0, 2, 4)),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_examples(name):
    run_call(dict(FOUND[name]))
