"""MXNet's binary NDArray files: nd.save / nd.load / nd.load_frombuffer and Gluon
checkpoints, against files written by real MXNet 1.9.1.

The fixtures in tests/data/params come from scripts/fixtures/make_params_fixtures.py
under MXNet 1.9.1: the files MXNet wrote, the values it wrote (expected.npz,
written by NumPy, so the values are checked independently of mxdeconv's
reader) and a manifest of names, dtypes and shapes.  mxdeconv must read them,
and write the same bytes for the same arrays.  test_live_mxnet_reads_mxdeconv
makes real MXNet read mxdeconv's files when an MXNet venv exists here.

The reader is fuzzed here at a modest example count (MXDECONV_PARAMS_FUZZ_EXAMPLES,
default 1000; the round-trip property runs a fifth of that);
``python scripts/qa/fuzz.py --params-files`` runs it long.
"""
from __future__ import annotations

import copy
import json
import os
import pickle
import re
import struct
import subprocess
import sys
from collections import Counter
from typing import Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

import mxdeconv
from mxdeconv import MXNetError, gluon, nd
from mxdeconv.io import ndarray_file as serialization
from mxdeconv._core.dtypes import bfloat16

from helpers import DATA as _DATA, FIXTURE_SCRIPTS, mxnet_python

BFLOAT16 = bfloat16()  # None without ml_dtypes
DATA = _DATA / "params"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
EXPECTED = dict(np.load(DATA / "expected.npz"))
DENSE = sorted(name for name, entry in MANIFEST.items() if "refused" not in entry)
SPARSE = sorted(name for name in MANIFEST if name.startswith("sparse_"))
IO = np.load(DATA / "gluon_io.npz")
LAYER = json.loads(str(IO["layer"]))
FUZZ_EXAMPLES = int(os.environ.get("MXDECONV_PARAMS_FUZZ_EXAMPLES", "1000"))
#: Outcomes of the reader fuzz in this process (read by scripts/qa/fuzz.py).
STATS: Counter = Counter()


def expected_arrays(name):
    """The arrays MXNet wrote into fixture ``name``, from expected.npz (NumPy's file)."""
    entry = MANIFEST[name]
    keys = entry["names"] or [str(i) for i in range(len(entry["dtypes"]))]
    arrays = []
    for key, dtype in zip(keys, entry["dtypes"]):
        values = EXPECTED[f"{name}/{key}"]
        arrays.append(values.view(BFLOAT16) if dtype == "bfloat16" else values)
    return arrays, entry["names"]


def needs(dtypes):
    if "bfloat16" in dtypes and BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")


def mxnet_bytes(name):
    return (DATA / name).read_bytes()


# -- reading MXNet's files -----------------------------------------------------------------
@pytest.mark.parametrize("name", DENSE)
def test_reads_mxnet_files(name):
    entry = MANIFEST[name]
    needs(entry["dtypes"])
    loaded = nd.load(str(DATA / name))
    arrays, names = expected_arrays(name)
    if names:
        assert isinstance(loaded, dict) and list(loaded) == names
        loaded = list(loaded.values())
    else:
        assert isinstance(loaded, list)
    assert len(loaded) == len(arrays)
    for got, want, dtype, shape in zip(loaded, arrays, entry["dtypes"], entry["shapes"]):
        assert isinstance(got, nd.NDArray)
        assert got.shape == tuple(shape) and got.dtype == want.dtype
        assert (str(got.dtype) if dtype != "bfloat16" else "bfloat16") == dtype
        assert got.asnumpy().tobytes() == np.ascontiguousarray(want).tobytes()  # NaNs too


@pytest.mark.parametrize("name", DENSE)
def test_load_frombuffer_equals_load(name):
    needs(MANIFEST[name]["dtypes"])
    by_file, by_buffer = nd.load(str(DATA / name)), nd.load_frombuffer(mxnet_bytes(name))
    assert type(by_file) is type(by_buffer)
    items = (by_file.items() if isinstance(by_file, dict) else enumerate(by_file))
    for key, array in items:
        assert_array_equal(by_buffer[key].asnumpy(), array.asnumpy())
    assert nd.load_frombuffer(bytearray(mxnet_bytes(name))).__class__ is type(by_file)


def test_load_frombuffer_reads_strided_and_shaped_buffers():
    """Any bytes-like buffer reads as its bytes, also a strided or 2-D view
    (a strided memoryview once raised BufferError)."""
    data = mxnet_bytes("gluon_conv2dtranspose.params")
    expected = nd.load_frombuffer(data)
    doubled = bytes(b for byte in data for b in (byte, 0))
    for buffer in (memoryview(doubled)[::2],
                   np.frombuffer(doubled, np.uint8)[::2],
                   np.frombuffer(data, np.uint8).reshape(1, -1)):
        loaded = nd.load_frombuffer(buffer)
        assert type(loaded) is type(expected)
        items = expected.items() if isinstance(expected, dict) else enumerate(expected)
        for key, array in items:
            assert_array_equal(loaded[key].asnumpy(), array.asnumpy())
    with pytest.raises(MXNetError):
        nd.load_frombuffer(memoryview(data)[1::2])   # other bytes: not a file


def test_format_facts_of_mxnet_files():
    """What MXNet 1.9.1 writes: the list magic, a reserved 0, V2 arrays (V3 under
    NumPy shape semantics), int64 extents, cpu(0)."""
    data = mxnet_bytes("list_dtypes.params")
    assert struct.unpack_from("<QQQ", data) == (0x112, 0, 8)
    magic, storage, ndim, d0, d1, dev_type, dev_id, flag = struct.unpack_from("<IiiqqiiI", data, 24)
    assert (magic, storage, ndim, d0, d1, dev_type, dev_id, flag) == \
        (serialization.V2_MAGIC, 0, 2, 2, 3, 1, 0, 0)
    assert struct.unpack_from("<I", mxnet_bytes("np_shape.params"), 24)[0] == \
        serialization.V3_MAGIC
    assert struct.unpack_from("<Ii", mxnet_bytes("np_shape.params"), 24)[1:] == (0,)
    assert struct.unpack_from("<Q", mxnet_bytes("empty_list.params"), 16)[0] == 0


# -- writing what MXNet writes ---------------------------------------------------------------
@pytest.mark.parametrize("name", DENSE)
def test_writes_mxnet_bytes_from_numpy(name, tmp_path):
    """The arrays from NumPy's record, written by mxdeconv: MXNet's exact bytes."""
    needs(MANIFEST[name]["dtypes"])
    arrays, names = expected_arrays(name)
    serialization.write_arrays(tmp_path / "out.params", arrays, names)
    assert (tmp_path / "out.params").read_bytes() == mxnet_bytes(name)


@pytest.mark.parametrize("name", DENSE)
def test_nd_save_of_loaded_arrays_writes_mxnet_bytes(name, tmp_path):
    needs(MANIFEST[name]["dtypes"])
    nd.save(str(tmp_path / "out.params"), nd.load(str(DATA / name)))
    assert (tmp_path / "out.params").read_bytes() == mxnet_bytes(name)


def test_nd_save_of_new_float_arrays_writes_mxnet_bytes(tmp_path):
    arrays, names = expected_arrays("dict_dtypes.params")
    floats = {key: nd.array(values, dtype=values.dtype) for key, values in zip(names, arrays)
              if values.dtype.kind == "f"}
    nd.save(tmp_path / "a.params", floats)        # an os.PathLike is accepted too
    reference = {key: values for key, values in zip(names, arrays) if values.dtype.kind == "f"}
    serialization.write_arrays(tmp_path / "b.params", list(reference.values()), list(reference))
    assert (tmp_path / "a.params").read_bytes() == (tmp_path / "b.params").read_bytes()


def test_single_ndarray_empty_list_and_empty_dict(tmp_path):
    nd.save(str(tmp_path / "one"), nd.ones((2,)))
    assert [a.shape for a in nd.load(str(tmp_path / "one"))] == [(2,)]
    nd.save(str(tmp_path / "list"), [])
    assert (tmp_path / "list").read_bytes() == mxnet_bytes("empty_list.params")
    nd.save(str(tmp_path / "dict"), {})      # as MXNet: no names, so it loads as a list
    assert (tmp_path / "dict").read_bytes() == mxnet_bytes("empty_list.params")
    assert nd.load(str(tmp_path / "dict")) == []


def test_zero_d_arrays_use_the_v3_form(tmp_path):
    arrays, _ = expected_arrays("np_shape.params")
    # np_shape=None: V3
    nd.save(str(tmp_path / "auto"), [nd.array(a, dtype=a.dtype) for a in arrays])
    assert (tmp_path / "auto").read_bytes() == mxnet_bytes("np_shape.params")
    nd.save(str(tmp_path / "v3"), [nd.ones((2,))], np_shape=True)
    assert struct.unpack_from("<I", (tmp_path / "v3").read_bytes(), 24)[0] == 0xF993FACA
    with pytest.raises(MXNetError, match=r"^data\[0\] is 0-d, which only the V3 form \(NumPy "
                                         r"shape semantics\) holds: pass np_shape=True or None$"):
        nd.save(str(tmp_path / "v2"), [nd.array(arrays[0])], np_shape=False)
    assert not (tmp_path / "v2").exists()


def test_blocked_arrays_are_saved_in_the_default_layout(tmp_path):
    rng = np.random.default_rng(0)
    x = nd.array(rng.standard_normal((1, 16, 4, 4), dtype=np.float32))
    w = nd.array(rng.standard_normal((16, 16, 3, 3), dtype=np.float32))
    y = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=16)
    with mxdeconv.use_impl("numpy"):
        expected = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=16).asnumpy()
    nd.save(str(tmp_path / "y"), {"y": y})
    assert_allclose(nd.load(str(tmp_path / "y"))["y"].asnumpy(), expected, rtol=1e-4, atol=1e-4)


DTYPES = ["float32", "float64", "float16", "uint8", "int8", "int32", "int64", "bool", "int16",
          "uint16", "uint32", "uint64"] + (["bfloat16"] if BFLOAT16 is not None else [])


@st.composite
def array_lists(draw):
    arrays = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(DTYPES))
        dtype = BFLOAT16 if name == "bfloat16" else np.dtype(name)
        shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=4)))
        raw = draw(st.binary(min_size=int(np.prod(shape)) * dtype.itemsize,
                             max_size=int(np.prod(shape)) * dtype.itemsize))
        values = np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape) \
            if dtype != np.bool_ else (np.frombuffer(raw, np.uint8) % 2).astype(bool).reshape(shape)
        arrays.append(values)
    names = draw(st.none() | st.lists(st.text(max_size=6).filter(lambda s: "\0" not in s),
                                      min_size=len(arrays), max_size=len(arrays), unique=True))
    return arrays, names


@settings(max_examples=max(FUZZ_EXAMPLES // 5, 20), deadline=None)
@given(case=array_lists())
def test_round_trip_every_dtype_and_shape(case, tmp_path_factory):
    arrays, names = case
    path = tmp_path_factory.mktemp("rt") / "x.params"
    serialization.write_arrays(str(path), arrays, names)
    loaded, loaded_names = serialization.read_arrays(str(path))
    assert loaded_names == (names or [])
    for got, want in zip(loaded, arrays):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()
    assert len(loaded) == len(arrays)


def test_big_endian_and_strided_numpy_arrays_are_written_little_endian(tmp_path):
    values = np.arange(12, dtype=">f8").reshape(3, 4)[:, ::2]
    serialization.write_arrays(str(tmp_path / "be"), [values])
    serialization.write_arrays(str(tmp_path / "le"), [np.ascontiguousarray(values, "<f8")])
    assert (tmp_path / "be").read_bytes() == (tmp_path / "le").read_bytes()


def test_legacy_v1_and_pre_v1_forms_are_read():
    """MXNet 1.9.1 still reads them (NDArray::LegacyLoad): V1 has no storage type,
    the form before it has no magic and uint32 extents."""
    values = np.arange(6, dtype="<f4")
    v1 = struct.pack("<Iiqqiii", serialization.V1_MAGIC, 2, 2, 3, 1, 0, 0) + values.tobytes()
    pre_v1 = struct.pack("<IIIiii", 2, 3, 2, 1, 0, 0) + values.tobytes()
    for array in (v1, pre_v1):
        data = struct.pack("<QQQ", 0x112, 0, 1) + array + struct.pack("<Q", 0)
        loaded = nd.load_frombuffer(data)
        assert len(loaded) == 1
        assert_array_equal(loaded[0].asnumpy(), values.reshape((2, 3) if array is v1 else (3, 2)))


def test_integer_arrays_keep_their_dtype():
    loaded = nd.load(str(DATA / "dict_dtypes.params"))
    assert loaded["int64"].dtype == np.int64 and loaded["bool"].dtype == np.bool_
    assert loaded["unicode_\u00e4\u00df"].asnumpy().tolist() == [1.5]
    for array in (loaded["int32"], loaded["bool"]):   # copies keep the dtype too
        for clone in (array.copy(), pickle.loads(pickle.dumps(array)), copy.deepcopy(array)):
            assert clone.dtype == array.dtype
            assert_array_equal(clone.asnumpy(), array.asnumpy())


def test_mxnet_v2_zero_d_file_is_refused_as_mxnet_refuses_it():
    """MXNet 1.9.1 saves a 0-d array outside NumPy shape semantics with ndim 0 in
    the V2 form, which means its 'none' array: MXNet then misparses the rest."""
    assert "MXNet cannot load it either" in MANIFEST["zero_d_v2.params"]["refused"]
    with pytest.raises(MXNetError, match=r"^cannot load file '.*zero_d_v2.params': at byte 32, "
                                         r"expected array 0's ndim in \[1, 32\] \(0 is MXNet's "
                                         r"empty 'none' array, which cannot be loaded; 0-d arrays "
                                         r"are saved in the V3 form\), got 0$"):
        nd.load(str(DATA / "zero_d_v2.params"))


# -- errors: hostile and wrong input ----------------------------------------------------------
def list_file(*arrays: bytes, names: Optional[list] = None, count: Optional[int] = None) -> bytes:
    head = struct.pack("<QQQ", 0x112, 0, len(arrays) if count is None else count)
    tail = struct.pack("<Q", len(names or []))
    for name in names or []:
        tail += struct.pack("<Q", len(name)) + name
    return head + b"".join(arrays) + tail


def v2_array(shape=(2,), flag=0, values=None, magic=0xF993FAC9, storage=0, device=(1, 0),
             ndim=None) -> bytes:
    ndim = len(shape) if ndim is None else ndim
    data = bytes(4 * int(np.prod(shape))) if values is None else values
    return (struct.pack(f"<Iii{len(shape)}q", magic, storage, ndim, *shape)
            + struct.pack("<iii", *device, flag) + data)


GOOD = list_file(v2_array(), names=[b"w"])
BAD = {
    "empty": (b"", r"at byte 0, expected the NDArray file magic \(8 bytes\), got the end of the "
                   r"data \(0 bytes left\): it is truncated"),
    "npz": (b"PK\x03\x04" + bytes(30), r"at byte 0, expected MXNet's NDArray file magic 0x112 "
                                       r"\(a file written by mx.nd.save or save_parameters\), "
                                       r"got 0x4034b50"),
    "truncated_header": (GOOD[:20], r"at byte 16, expected the number of arrays \(8 bytes\), "
                                    r"got the end of the data \(4 bytes left\): it is truncated"),
    "truncated_values": (GOOD[:58], r"at byte 56, expected array 0's values, shape \(2,\) of "
                                    r"float32 \(8 bytes\), got the end of the data \(2 bytes "
                                    r"left\): it is truncated"),
    "truncated_name": (GOOD[:-1], r"at byte 80, expected name 0 \(1 bytes\), got the end of the "
                                  r"data \(0 bytes left\): it is truncated"),
    "huge_count": (list_file(v2_array(), count=2**63),
                   r"at byte 16, expected at most 3 arrays in the 48 bytes left, got "
                   r"9223372036854775808"),
    "huge_ndim": (list_file(v2_array(ndim=2**31 - 1)),
                  r"at byte 32, expected array 0's ndim in \[1, 32\] \(0 is MXNet's empty 'none' "
                  r"array, which cannot be loaded; 0-d arrays are saved in the V3 form\), got "
                  r"2147483647"),
    "v2_ndim_0": (list_file(v2_array(shape=())), r"at byte 32, expected array 0's ndim in "
                                                  r"\[1, 32\] .*got 0"),
    "v3_unknown_shape": (list_file(v2_array(shape=(), ndim=-1, magic=0xF993FACA)),
                         r"at byte 32, expected array 0's ndim in \[0, 32\] \(-1 is an array of "
                         r"unknown shape, which cannot be loaded\), got -1"),
    "negative_extent": (list_file(v2_array(shape=(-1,), values=b"")),
                        r"at byte 36, expected array 0's extents >= 0, got shape \(-1,\)"),
    "huge_extents": (list_file(v2_array(shape=(2**30, 2**30), values=b"")),
                     r"at byte 64, expected array 0's values, shape \(1073741824, 1073741824\) "
                     r"of float32 \(4611686018427387904 bytes\), got the end of the data \(8 "
                     r"bytes left\): it is truncated"),
    "overflowing_extents": (list_file(v2_array(shape=(2**31, 2**31), values=b"")),
                            r"at byte 36, expected array 0's extents, with fewer than 2\*\*63 "
                            r"bytes of float32, got shape \(2147483648, 2147483648\)"),
    "overflowing_zero_size": (list_file(v2_array(shape=(0, 2**40, 2**40), values=b"")),
                              r"at byte 36, expected array 0's extents, with fewer than "
                              r"2\*\*63 bytes of float32, got shape \(0, 1099511627776, "
                              r"1099511627776\)"),
    "pre_v1_huge_ndim": (list_file(struct.pack("<I", 1000) + bytes(16)),
                         r"at byte 24, expected array 0's ndim in \[1, 32\] \(0 is MXNet's "
                         r"'none' array\), got 1000"),
    "storage": (list_file(v2_array(storage=7)),
                r"at byte 28, expected array 0's storage type 0 \(dense\), got 7"),
    "device": (list_file(v2_array(device=(9, 0))),
               r"at byte 44, expected array 0's device type, one of \{1: 'cpu', 2: 'gpu', 3: "
               r"'cpu_pinned', 5: 'cpu_shared'\}, got 9"),
    "device_id": (list_file(v2_array(device=(1, -3))),
                  r"at byte 48, expected array 0's device id >= 0, got -3"),
    "type_flag": (list_file(v2_array(flag=99)),
                  r"at byte 52, expected array 0's type flag, one of \[0, 1, 2, 3, 4, 5, 6, 7, 8, "
                  r"9, 10, 11, 12\] \(mshadow's\), got 99"),
    "name_count": (list_file(v2_array(), v2_array(), names=[b"a"]),
                   r"at byte 104, expected 0 names \(a list\) or 2 \(a dict, one per array\), "
                   r"got 1"),
    "name_utf8": (list_file(v2_array(), names=[b"\xff\xfe"]),
                  r"at byte 80, expected name 0 in UTF-8, got b'\\xff\\xfe'"),
    "name_length": (list_file(v2_array()) [:-8] + struct.pack("<QQ", 1, 2**64 - 1),
                    r"at byte 80, expected name 0 \(18446744073709551615 bytes\), got the end of "
                    r"the data \(0 bytes left\): it is truncated"),
    "duplicate_names": (list_file(v2_array(), v2_array(), names=[b"a", b"a"]),
                        r"at byte 129, expected name 1 unlike the names before it, got 'a' a "
                        r"second time"),
    "trailing": (GOOD + b"\x00", r"at byte 81, expected the end of the data, got 1 more bytes"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_hostile_bytes_raise_naming_offset_and_expectation(name, tmp_path):
    data, pattern = BAD[name]
    with pytest.raises(MXNetError) as info:
        nd.load_frombuffer(data)
    assert re.fullmatch("cannot load the buffer: " + pattern, str(info.value)), \
        str(info.value)
    path = tmp_path / "bad.params"
    path.write_bytes(data)
    with pytest.raises(MXNetError) as info:
        nd.load(str(path))
    assert str(info.value).startswith(f"cannot load file {str(path)!r}: at byte ")


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_files_are_refused_by_name(name):
    with pytest.raises(MXNetError) as info:
        nd.load(str(DATA / name))
    stype = "csr" if "csr" in name else "row_sparse"
    index = 1 if "csr" in name else 0
    start = 24 + 36 if index else 24  # after the list header and a dense 1-element array
    assert str(info.value) == (
        f"cannot load file {str(DATA / name)!r}: array {index} (at byte {start}) has {stype} "
        "storage: sparse arrays are not supported, only dense ones (convert it in MXNet "
        "with tostype('default') before saving)")


def test_bfloat16_without_ml_dtypes_is_refused(monkeypatch):
    monkeypatch.setattr(serialization, "_bfloat16", lambda: None)
    with pytest.raises(MXNetError, match=r"^cannot load file '.*bfloat16.params': array 0 is "
                                         r"bfloat16, which needs the ml_dtypes package"):
        nd.load(str(DATA / "bfloat16.params"))


TYPE_ERRORS = {
    "save_fname": (lambda p: nd.save(3, []), r"fname must be a path \(str or os.PathLike\), "
                                             r"got 3 of type int"),
    "save_data": (lambda p: nd.save(p, "x"), r"data must be an NDArray, a list of NDArrays or a "
                                             r"dict str -> NDArray, got str"),
    "save_numpy_item": (lambda p: nd.save(p, [nd.ones(1), np.ones(2)]),
                        r"data must be .*, got data\[1\] of type ndarray"),
    "save_key": (lambda p: nd.save(p, {1: nd.ones(1)}), r"data must be .*, got key 1 of type int"),
    "save_value": (lambda p: nd.save(p, {"a": [1.0]}), r"data must be .*, got data\['a'\] of "
                                                       r"type list"),
    "load_fname": (lambda p: nd.load(None), r"fname must be a path \(str or os.PathLike\), got "
                                            r"None of type NoneType"),
    "frombuffer_str": (lambda p: nd.load_frombuffer("abc"),
                       r"buf must be bytes-like \(bytes, bytearray, memoryview\), got str"),
    "frombuffer_int": (lambda p: nd.load_frombuffer(3),
                       r"buf must be bytes-like \(bytes, bytearray, memoryview\), got int"),
}


@pytest.mark.parametrize("name", sorted(TYPE_ERRORS))
def test_wrong_python_types_raise_type_error_naming_the_argument(name, tmp_path):
    call, pattern = TYPE_ERRORS[name]
    with pytest.raises(TypeError) as info:
        call(str(tmp_path / "x.params"))
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
    assert not (tmp_path / "x.params").exists()


def test_value_errors_on_save_and_missing_files(tmp_path):
    with pytest.raises(MXNetError, match=r"^data: a name must not contain NUL characters \(MXNet "
                                         r"cuts it there\), got 'a\\x00b'$"):
        nd.save(str(tmp_path / "x"), {"a\0b": nd.ones(1)})
    with pytest.raises(MXNetError, match=r"^cannot read fname='.*nothing': \[Errno 2\] No such "
                                         r"file or directory"):
        nd.load(str(tmp_path / "nothing"))
    with pytest.raises(MXNetError, match=r"^cannot write fname='.*/no-folder/x': \[Errno 2\] "):
        nd.save(str(tmp_path / "no-folder" / "x"), [nd.ones(1)])
    with pytest.raises(MXNetError, match=r"^arrays\[0\] has dtype complex64, which MXNet's "
                                         r"NDArray files cannot hold \(they hold float32, "):
        serialization.write_arrays(str(tmp_path / "c"), [np.ones(2, np.complex64)])
    assert sorted(os.listdir(tmp_path)) == []


# -- atomic save ----------------------------------------------------------------------------
def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "model.params"
    nd.save(str(path), {"w": nd.ones((3,))})
    before = path.read_bytes()

    def disk_full(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(MXNetError, match=r"^cannot write fname='.*model.params': \[Errno 28\] "
                                         r"No space left on device$"):
        nd.save(str(path), {"w": nd.zeros((1000,))})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.params"]


def test_interrupted_save_removes_its_temporary(tmp_path, monkeypatch):
    def interrupt(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        nd.save(str(tmp_path / "x.params"), [nd.ones(2)])
    assert os.listdir(tmp_path) == []


def test_saved_file_gets_the_usual_permissions(tmp_path):
    nd.save(str(tmp_path / "x.params"), [nd.ones(2)])
    (tmp_path / "plain").write_bytes(b"")
    assert (tmp_path / "x.params").stat().st_mode == (tmp_path / "plain").stat().st_mode


# -- fuzzing the reader -----------------------------------------------------------------------
SEEDS = [mxnet_bytes(name) for name in DENSE if "bfloat16" not in name or BFLOAT16 is not None]
LENGTH_FIELDS = [0, 8, 16]  # reserved, array count (fields at fixed offsets)


def check_reader(data: bytes) -> None:
    """Load ``data``: NDArrays, or MXNetError; never another exception."""
    STATS["examples"] += 1
    try:
        loaded = nd.load_frombuffer(data)
    except MXNetError as err:
        assert str(err).startswith("cannot load the buffer: "), str(err)
        STATS["refused"] += 1
        return
    STATS["loaded"] += 1
    for array in (loaded.values() if isinstance(loaded, dict) else loaded):
        assert isinstance(array, nd.NDArray)
        assert array.asnumpy().nbytes <= len(data)


@st.composite
def hostile_buffers(draw):
    kind = draw(st.sampled_from(["truncate", "flip", "random", "huge_field", "splice"]))
    data = bytearray(draw(st.sampled_from(SEEDS)))
    if kind == "truncate":
        return bytes(data[:draw(st.integers(0, len(data) - 1))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            position = draw(st.integers(0, len(data) - 1))
            data[position] ^= 1 << draw(st.integers(0, 7))
        return bytes(data)
    if kind == "random":
        head = struct.pack("<QQ", 0x112, 0) if draw(st.booleans()) else b""
        return head + draw(st.binary(max_size=200))
    if kind == "huge_field":  # any 4- or 8-byte field set to a huge or negative value
        size = draw(st.sampled_from([4, 8]))
        position = draw(st.sampled_from(LENGTH_FIELDS) | st.integers(0, len(data) - size))
        value = draw(st.sampled_from([2**(8 * size) - 1, 2**(8 * size - 1), 2**(8 * size - 1) - 1,
                                      2**31, 2**32 + 1, 10**6]))
        data[position:position + size] = (value % 2**(8 * size)).to_bytes(size, "little")
        return bytes(data)
    other = draw(st.sampled_from(SEEDS))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) + other[draw(st.integers(0, len(other))):]


def make_reader_test(max_examples: int, seed: Optional[int] = None):
    """The reader fuzz property as a Hypothesis test of ``max_examples`` examples."""
    @settings(max_examples=max_examples, deadline=None, database=None if seed else
              settings.default.database, suppress_health_check=list(HealthCheck))
    @given(data=hostile_buffers())
    def fuzz(data):
        check_reader(data)

    return hypothesis_seed(seed)(fuzz) if seed is not None else fuzz


test_fuzz_reader = make_reader_test(FUZZ_EXAMPLES)


@pytest.mark.parametrize("name", DENSE)
def test_every_truncation_of_every_fixture_is_refused(name):
    data = mxnet_bytes(name)
    if "bfloat16" in name and BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    for end in range(len(data)):
        with pytest.raises(MXNetError, match=r"^cannot load the buffer: at byte \d+, expected "):
            nd.load_frombuffer(data[:end])


# -- Gluon checkpoints ----------------------------------------------------------------------
GLUON_FILES = ["gluon_conv2dtranspose.params", "gluon_collect_params.params",
               "gluon_export-0000.params"]


@pytest.mark.parametrize("impl", ["numpy", "onednn"])
def test_mxnet_checkpoint_reproduces_mxnet_output(impl):
    layer = gluon.Conv2DTranspose(**LAYER)
    layer.load_parameters(str(DATA / "gluon_conv2dtranspose.params"))
    with mxdeconv.use_impl(impl):
        out = layer(nd.array(IO["input"])).asnumpy()
    assert_allclose(out, IO["output"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", GLUON_FILES)
def test_load_parameters_accepts_mxnet_names(name, tmp_path):
    """save_parameters' structural names, collect_params().save's prefixed names,
    export's arg:-prefixed names; recognised by the magic, whatever the file name."""
    layer = gluon.Conv2DTranspose(**LAYER)
    saved = nd.load(str(DATA / name))
    renamed = tmp_path / "checkpoint.bin"
    renamed.write_bytes(mxnet_bytes(name))
    layer.load_parameters(str(renamed))
    weight = [v for k, v in saved.items() if k.endswith("weight")][0]
    assert_array_equal(layer.weight.data().asnumpy(), weight.asnumpy())
    bias = [v for k, v in saved.items() if k.endswith("bias")][0]
    assert_array_equal(layer.bias.data().asnumpy(), bias.asnumpy())


def test_save_parameters_writes_what_mxnet_writes(tmp_path):
    """Loaded from MXNet's save_parameters file and saved again: MXNet's bytes, so
    MXNet's load_parameters reads it (test_live_mxnet_reads_mxdeconv checks that)."""
    layer = gluon.Conv2DTranspose(**LAYER)
    layer.load_parameters(str(DATA / "gluon_conv2dtranspose.params"))
    layer.save_parameters(str(tmp_path / "again.params"))
    assert (tmp_path / "again.params").read_bytes() == mxnet_bytes("gluon_conv2dtranspose.params")
    layer.save_parameters(str(tmp_path / "again.npz"))          # .npz stays NumPy's format
    with np.load(tmp_path / "again.npz") as archive:
        assert sorted(archive.files) == ["bias", "weight"]
    other = gluon.Conv2DTranspose(LAYER["channels"], LAYER["kernel_size"], strides=2, padding=1,
                                  output_padding=1, groups=2)        # in_channels from the file
    other.load_parameters(str(tmp_path / "again.params"))
    assert_allclose(other(nd.array(IO["input"])).asnumpy(), IO["output"], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(BFLOAT16 is None, reason="bfloat16 needs ml_dtypes")
def test_bfloat16_checkpoint_round_trip(tmp_path):
    layer = gluon.Conv2DTranspose(**LAYER)
    layer.initialize()
    layer.cast("bfloat16")
    layer.save_parameters(str(tmp_path / "bf16.params"))
    assert {a.dtype for a in nd.load(str(tmp_path / "bf16.params")).values()} == {BFLOAT16}
    other = gluon.Conv2DTranspose(**LAYER)
    with pytest.raises(MXNetError, match=r"dtype incompatible expected float32 vs saved "
                                         r"bfloat16. Set cast_dtype=True"):
        other.load_parameters(str(tmp_path / "bf16.params"))
    other.load_parameters(str(tmp_path / "bf16.params"), cast_dtype=True, dtype_source="saved")
    assert other.weight.data().dtype == BFLOAT16
    assert other.weight.data().asnumpy().tobytes() == layer.weight.data().asnumpy().tobytes()


def test_load_parameters_refuses_lists_and_corrupt_params(tmp_path):
    layer = gluon.Conv2DTranspose(**LAYER)
    layer.initialize()
    before = layer.weight.data().asnumpy()
    with pytest.raises(MXNetError, match=r"^filename='.*list_dtypes.params' holds a list of 8 "
                                         r"arrays without names \(as mx.nd.save of a list "
                                         r"writes\); parameters are loaded from named arrays"):
        layer.load_parameters(str(DATA / "list_dtypes.params"))
    (tmp_path / "cut.params").write_bytes(mxnet_bytes("gluon_conv2dtranspose.params")[:100])
    with pytest.raises(MXNetError, match=r"^cannot load file '.*cut.params': at byte \d+, "
                                         r"expected array 0's values, .*it is truncated$"):
        layer.load_parameters(str(tmp_path / "cut.params"))
    (tmp_path / "junk.params").write_bytes(b"junk" * 10)
    with pytest.raises(MXNetError, match=r"^cannot load file '.*junk.params': at byte 0, expected "
                                         r"MXNet's NDArray file magic 0x112"):
        layer.load_parameters(str(tmp_path / "junk.params"))
    assert_array_equal(layer.weight.data().asnumpy(), before)


def test_load_parameters_checks_mxnet_files_like_npz(tmp_path):
    """Missing, extra, dtype and shape checks apply to .params files as to .npz."""
    saved = nd.load(str(DATA / "gluon_conv2dtranspose.params"))
    layer = gluon.Conv2DTranspose(**LAYER)
    nd.save(str(tmp_path / "w.params"), {"weight": saved["weight"]})
    with pytest.raises(MXNetError, match="Parameter 'bias' is missing in file"):
        layer.load_parameters(str(tmp_path / "w.params"))
    layer.load_parameters(str(tmp_path / "w.params"), allow_missing=True)
    nd.save(str(tmp_path / "x.params"), dict(saved, extra=nd.ones(1)))
    with pytest.raises(MXNetError, match=r"Parameters \['extra'\] in file .* are not in the layer"):
        layer.load_parameters(str(tmp_path / "x.params"))
    layer.load_parameters(str(tmp_path / "x.params"), ignore_extra=True)
    nd.save(str(tmp_path / "d.params"), {k: v.astype("float64") for k, v in saved.items()})
    with pytest.raises(MXNetError, match=r"dtype incompatible expected float32 vs saved float64"):
        layer.load_parameters(str(tmp_path / "d.params"))
    layer.load_parameters(str(tmp_path / "d.params"), cast_dtype=True, dtype_source="saved")
    assert layer.weight.data().dtype == np.float64


# -- real MXNet reads mxdeconv's files --------------------------------------------------------
MXNET_PYTHON = mxnet_python()


@pytest.mark.skipif(MXNET_PYTHON is None,
                    reason="no MXNet 1.9.1 venv here (CI has none; the byte-equality tests "
                           "cover the same ground against MXNet's committed files)")
def test_live_mxnet_reads_mxdeconv(tmp_path):
    run = subprocess.run([MXNET_PYTHON, str(FIXTURE_SCRIPTS / "make_params_fixtures.py"),
                          "--verify-only", str(tmp_path), "--mxdeconv-python", sys.executable],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "all agree" in run.stdout
