"""The installed package, as a user's ``pip install`` leaves it.

These run where scripts/qa/test_installed.sh tests an installed mxdeconv from a
copy of tests/ (it sets ``MXDECONV_TEST_INSTALLED=1``: the CI's wheel step,
cibuildwheel's test command); elsewhere they are skipped.  The CI's wheel step
also sets ``MXDECONV_TEST_NO_COMPILER=1``: there the environment has neither a
C compiler on PATH nor Cython, which proves the wheel needs neither.
"""
import importlib.util
import os
import shutil
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

import mxdeconv

pytestmark = pytest.mark.skipif(
    os.environ.get("MXDECONV_TEST_INSTALLED") != "1",
    reason="tests an installed mxdeconv: run by scripts/qa/test_installed.sh")

PACKAGE = Path(mxdeconv.__file__).resolve().parent
COMPILED = ["_core/buffers", "_core/_ndbase", "onednn/_ops", "ops/_exec", "ops/_fastpath"]


def test_mxdeconv_is_imported_from_site_packages():
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    assert PACKAGE.parent in installed, f"mxdeconv imported from {PACKAGE}"


def test_the_package_holds_its_modules_and_interfaces_but_no_build_inputs():
    files = [path.relative_to(PACKAGE) for path in PACKAGE.rglob("*")
             if path.is_file() and "__pycache__" not in path.parts]
    suffixes = {path.suffix for path in files}
    assert not suffixes & {".c", ".pyx", ".pxi", ".html"}, sorted(map(str, files))
    for module in COMPILED:
        assert len(list(PACKAGE.glob(f"{module}.*.so"))) == 1, module
        assert (PACKAGE / f"{module}.pyi").is_file(), module
    assert (PACKAGE / "py.typed").is_file()
    # For Cython code that cimports the NDArray base or the buffers.
    assert (PACKAGE / "_core" / "_ndbase.pxd").is_file()
    assert (PACKAGE / "_core" / "buffers.pxd").is_file()


def test_the_distribution_carries_its_license():
    dist = metadata.distribution("mxdeconv")
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    licenses = [entry for entry in dist.files if entry.name == "LICENSE"]
    assert licenses and "Apache License" in licenses[0].read_text()


def test_the_extension_loads_onednn_from_the_runtime_wheel():
    assert mxdeconv.runtime_info()["onednn_version"] == "3.2.0"  # raises if the extension failed
    libdnnl = [line for line in Path("/proc/self/maps").read_text().splitlines()
               if line.endswith("/libdnnl.so.3")]
    assert libdnnl, "libdnnl.so.3 is not mapped"
    assert Path(libdnnl[0].split()[-1]).resolve().parent == \
        (Path(sysconfig.get_paths()["data"]) / "lib").resolve()


@pytest.mark.skipif(os.environ.get("MXDECONV_TEST_NO_COMPILER") != "1",
                    reason="the CI's wheel step hides the compiler (MXDECONV_TEST_NO_COMPILER=1)")
def test_no_compiler_and_no_cython_here():
    """The environment these tests pass in could not have built anything."""
    for compiler in ("cc", "gcc", "c++", "g++", "clang", sysconfig.get_config_var("CC").split()[0]):
        assert shutil.which(compiler) is None, f"{compiler} is on PATH: {shutil.which(compiler)}"
    assert importlib.util.find_spec("Cython") is None
