"""Build the oneDNN extension against oneDNN from PyPI.

``onednn-devel-cpu-gomp`` (headers) and ``onednn-cpu-gomp`` (libdnnl.so.3)
install their files under the environment's data prefix; their wheel RECORDs
say exactly where, so the paths are read from the installed distributions
rather than guessed (under pip's build isolation that prefix is a temporary
folder, which is why the runtime also preloads the library: see _loader.py).
"""
import glob
import os
from importlib import metadata
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _installed_file(distribution: str, suffix: str) -> Path:
    dist = metadata.distribution(distribution)
    for entry in dist.files or ():
        if str(entry).replace("\\", "/").endswith(suffix):
            return Path(dist.locate_file(entry)).resolve()
    raise RuntimeError(f"{distribution} does not provide {suffix}: "
                       f"pip install {distribution}==2023.2.0")


dnnl_header = _installed_file("onednn-devel-cpu-gomp", "include/oneapi/dnnl/dnnl.h")
dnnl_library = _installed_file("onednn-cpu-gomp", "libdnnl.so.3")

# MXDECONV_SANITIZE=1: AddressSanitizer + UndefinedBehaviorSanitizer build of the
# extension (compile and link), for scripts/qa/sanitize.sh; run it with the ASan
# runtime preloaded (LD_PRELOAD=$(gcc -print-file-name=libasan.so)).
SANITIZE = os.environ.get("MXDECONV_SANITIZE", "").strip().lower() not in ("", "0", "no", "off")
SANITIZER_FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]

COMMON = dict(
    include_dirs=[str(dnnl_header.parents[2]), numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-O1"] + SANITIZER_FLAGS if SANITIZE else ["-O2"],
    extra_link_args=SANITIZER_FLAGS if SANITIZE else [],
    language="c",
)
extensions = [
    # Aligned array memory, for the NDArray layer and the oneDNN layer.
    Extension("mxdeconv._core.buffers", sources=["mxdeconv/_core/buffers.pyx"], **COMMON),
    # An NDArray's fields, which the compiled hot path reads as C struct members.
    Extension("mxdeconv._core._ndbase", sources=["mxdeconv/_core/_ndbase.pyx"], **COMMON),
    # The oneDNN layer: the only module that calls oneDNN.
    Extension(
        "mxdeconv.onednn._ops",
        sources=["mxdeconv/onednn/_ops.pyx"],
        # _ops.pyx includes its sections from these files: editing one rebuilds it.
        depends=sorted(glob.glob("mxdeconv/onednn/*.pxi")),
        library_dirs=[str(dnnl_library.parent)],
        libraries=[":libdnnl.so.3", "gomp"],
        # site-packages/mxdeconv/onednn/_ops*.so -> <prefix>/lib, where the runtime
        # wheel puts libdnnl.so.3; editable installs rely on the preload in _loader.py.
        runtime_library_dirs=["$ORIGIN/../../../.."],
        # OpenMP for the bias loop's prange (oneDNN's own runtime, GNU OpenMP).
        **dict(COMMON, extra_compile_args=COMMON["extra_compile_args"] + ["-fopenmp"])),
    # NDArrays in and out of oneDNN plans, and prepared calls: reaches oneDNN
    # only through _ops' C-level interface (_ops.pxd).
    Extension("mxdeconv.ops._exec", sources=["mxdeconv/ops/_exec.pyx"], **COMMON),
    # The public entries (Deconvolution, Deconvolution_backward): the prepared
    # call of a repeated signature (through _exec.pxd), else the full path.
    Extension("mxdeconv.ops._fastpath", sources=["mxdeconv/ops/_fastpath.pyx"], **COMMON),
]


def _without_absolute_rpaths(command):
    """A link command without the rpaths the interpreter's own build put in it.

    A Python built with ``-Wl,-rpath,<prefix>/lib`` in its LDFLAGS (pyenv's,
    for one) hands that flag to every extension it links (sysconfig's
    LDSHARED), so the extensions' RUNPATH would name a folder of the build
    machine.  Only ``$ORIGIN``-relative rpaths (runtime_library_dirs above,
    which the compiler adds apart from this command) belong in a wheel."""
    kept = []
    for arg in command:
        options = arg[len("-Wl,"):].split(",") if arg.startswith("-Wl,") else []
        if len(options) == 2 and options[0] in ("-rpath", "-R"):
            path = options[1]                      # -Wl,-rpath,DIR
        elif len(options) == 1 and options[0].startswith("-rpath="):
            path = options[0][len("-rpath="):]     # -Wl,-rpath=DIR
        elif len(options) == 1 and options[0].startswith("-R"):
            path = options[0][len("-R"):]          # -Wl,-RDIR
        else:
            path = None
        if path is not None and not path.startswith("$ORIGIN"):
            continue
        kept.append(arg)
    return kept


class BuildExt(build_ext):
    """build_ext that links without the build machine's absolute rpaths."""

    def build_extensions(self):
        for attribute in ("linker_so", "linker_so_cxx"):
            command = getattr(self.compiler, attribute, None)
            if isinstance(command, list):
                setattr(self.compiler, attribute, _without_absolute_rpaths(command))
        super().build_extensions()


setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}),
      cmdclass={"build_ext": BuildExt})
