# Included by _ops.pyx (one module, textual include): what the layer reports
# about itself: oneDNN's version, the CPU ISA it dispatches to, and the
# reorder counters.

# ----------------------------------------------------------------------------
# Version and ISA
# ----------------------------------------------------------------------------
# Named as oneDNN names them (ONEDNN_MAX_CPU_ISA), keyed by the header's enum.
_ISA_NAMES = {dnnl_cpu_isa_sse41: "sse41", dnnl_cpu_isa_avx: "avx", dnnl_cpu_isa_avx2: "avx2",
              dnnl_cpu_isa_avx2_vnni: "avx2_vnni", dnnl_cpu_isa_avx2_vnni_2: "avx2_vnni_2",
              dnnl_cpu_isa_avx512_core: "avx512_core",
              dnnl_cpu_isa_avx512_core_vnni: "avx512_core_vnni",
              dnnl_cpu_isa_avx512_core_bf16: "avx512_core_bf16",
              dnnl_cpu_isa_avx512_core_fp16: "avx512_core_fp16",
              dnnl_cpu_isa_avx512_core_amx: "avx512_core_amx",
              dnnl_cpu_isa_avx512_core_amx_fp16: "avx512_core_amx_fp16"}


def onednn_version():
    """oneDNN's version as ``"major.minor.patch"`` (the library actually loaded)."""
    cdef const dnnl_version_t *v = dnnl_version()
    return f"{v.major}.{v.minor}.{v.patch}"


def cpu_isa():
    """The instruction set oneDNN's CPU kernels dispatch to on this machine."""
    cdef int isa = <int>dnnl_get_effective_cpu_isa()
    return _ISA_NAMES.get(isa, hex(isa))


# ----------------------------------------------------------------------------
# Statistics (reorders, cache) for tests and users
# ----------------------------------------------------------------------------
_reorders = {}


def reorder_counts():
    """How many reorders ran, per tensor: ``data``, ``weights``, ``bias``,
    ``out_grad`` (inputs into a primitive's layout), ``out`` (results into a
    given target's layout) and ``to_default`` (blocked arrays made plain)."""
    return dict(_reorders)


def reset_reorder_counts():
    _reorders.clear()
