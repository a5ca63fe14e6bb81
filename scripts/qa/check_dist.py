"""Check an sdist and a wheel of mxdeconv hold what they must and nothing else.

    python scripts/qa/check_dist.py dist/mxdeconv-0.1.0.tar.gz dist/mxdeconv-0.1.0-*.whl

The sdist: what building needs (setup.py, pyproject.toml, MANIFEST.in, README,
LICENSE, every .py/.pyx/.pxd/.pxi/.pyi of the package), never what a build
leaves (generated C, compiled modules, bytecode).  The wheel: the package's
modules, its five compiled extensions, .pxd/.pyi/py.typed, the plan database and the license,
never the Cython sources, generated C, tests or a vendored library; each
extension's RUNPATH only ``$ORIGIN``-relative (no build-machine folder), and
its libraries those docs/packaging.rst lists.  Reads the ELF files with
pyelftools (auditwheel's dependency: the ``build`` extra).  Exit status 1 and
a list on any failure.
"""
import io
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
SOURCE_SUFFIXES = {".py", ".pyx", ".pxd", ".pxi", ".pyi"}
#: Data files the package ships (the plan database, where one was made).
SHIPPED_DATA = {"py.typed", "plan_db.json"}
BUILD_LEFTOVERS = {".c", ".so", ".html", ".pyc", ".pyo"}
COMPILED = ["mxdeconv/_core/buffers", "mxdeconv/_core/_ndbase", "mxdeconv/onednn/_ops",
            "mxdeconv/ops/_exec", "mxdeconv/ops/_fastpath"]
#: What the extensions may link: glibc, oneDNN (from onednn-cpu-gomp) and the
#: system's GNU OpenMP, the runtime oneDNN's library itself loads.
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
                  "ld-linux-x86-64.so.2", "libdnnl.so.3", "libgomp.so.1"}
#: The extension that links libdnnl.so.3 finds it in <prefix>/lib, where the
#: onednn-cpu-gomp wheel installs it: site-packages/mxdeconv/onednn/ -> <prefix>/lib.
OPS_RUNPATH = ["$ORIGIN/../../../.."]


def package_sources():
    """The package's source files in this checkout, relative to the root."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "mxdeconv").rglob("*")
                  if path.suffix in SOURCE_SUFFIXES or path.name in SHIPPED_DATA
                  if "__pycache__" not in path.parts)


def check_sdist(path):
    problems = []
    with tarfile.open(path) as archive:
        names = [member.name for member in archive.getmembers() if member.isfile()]
    top = PurePosixPath(names[0]).parts[0]
    inside = {str(PurePosixPath(*PurePosixPath(name).parts[1:])) for name in names}
    required = ["setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE",
                "PKG-INFO"] + package_sources()
    problems += [f"sdist lacks {name}" for name in required if name not in inside]
    problems += [f"sdist holds a build leftover: {name}" for name in sorted(inside)
                 if PurePosixPath(name).suffix in BUILD_LEFTOVERS or "__pycache__" in name]
    print(f"{path}: {len(inside)} files under {top}/, "
          f"{Path(path).stat().st_size / 1e6:.1f} MB")
    return problems


def elf_dynamic(data):
    """(NEEDED, RUNPATH + RPATH entries) of an ELF file's bytes."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    needed, paths = [], []
    for section in ELFFile(io.BytesIO(data)).iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RUNPATH":
                    paths += tag.runpath.split(":")
                elif tag.entry.d_tag == "DT_RPATH":
                    paths += tag.rpath.split(":")
    return needed, paths


def check_wheel(path):
    problems = []
    name = Path(path).name
    if "manylinux" not in name:
        problems.append(f"{name} has no manylinux tag (run auditwheel repair)")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        extensions = {}
        for entry in names:
            if entry.endswith(".so"):
                extensions[entry] = elf_dynamic(archive.read(entry))
    for entry in names:
        top = entry.split("/")[0]
        if top != "mxdeconv" and not (top.startswith("mxdeconv-") and top.endswith(".dist-info")):
            problems.append(f"wheel holds something outside the package: {entry}")
        elif PurePosixPath(entry).suffix in {".c", ".pyx", ".pxi", ".html", ".pyc"}:
            problems.append(f"wheel holds a build input or leftover: {entry}")
    wanted = [source for source in package_sources()
              if PurePosixPath(source).suffix not in {".pyx", ".pxi"}]
    problems += [f"wheel lacks {source}" for source in wanted if source not in names]
    if not any(entry.endswith(".dist-info/licenses/LICENSE") for entry in names):
        problems.append("wheel lacks the license (dist-info/licenses/LICENSE)")
    for module in COMPILED:
        found = [entry for entry in extensions if entry.startswith(module + ".")]
        if len(found) != 1:
            problems.append(f"wheel lacks the compiled module {module} (or has several)")
    for entry, (needed, paths) in sorted(extensions.items()):
        print(f"  {entry}: NEEDED {needed}, RUNPATH {paths}")
        problems += [f"{entry} links {library}, which docs/packaging.rst does not list"
                     for library in needed if library not in ALLOWED_NEEDED]
        problems += [f"{entry} has a build-machine RUNPATH entry: {entry_path}"
                     for entry_path in paths if not entry_path.startswith("$ORIGIN")]
        if "libdnnl.so.3" in needed and paths != OPS_RUNPATH:
            problems.append(f"{entry}: RUNPATH {paths}, expected {OPS_RUNPATH}")
    print(f"{path}: {len(names)} files, {Path(path).stat().st_size / 1e6:.1f} MB")
    return problems


def main(paths):
    if not paths:
        sys.exit(__doc__)
    problems = []
    for path in paths:
        problems += check_sdist(path) if path.endswith(".tar.gz") else check_wheel(path)
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
