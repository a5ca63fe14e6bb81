# Declarations of the part of oneDNN's v3 C API that mxdeconv uses.
# Logic lives in _ops.pyx; this file only mirrors oneapi/dnnl/dnnl.h.
from libc.stdint cimport int32_t, int64_t


cdef extern from "oneapi/dnnl/dnnl.h" nogil:
    ctypedef int64_t dnnl_dim_t
    ctypedef dnnl_dim_t dnnl_dims_t[12]
    enum: DNNL_MAX_NDIMS

    ctypedef enum dnnl_status_t:
        dnnl_success
        dnnl_out_of_memory
        dnnl_invalid_arguments
        dnnl_unimplemented
        dnnl_last_impl_reached

    ctypedef enum dnnl_data_type_t:
        dnnl_data_type_undef
        dnnl_f16
        dnnl_bf16
        dnnl_f32
        dnnl_s8

    ctypedef enum dnnl_format_kind_t:
        dnnl_format_kind_undef
        dnnl_format_kind_any
        dnnl_blocked

    ctypedef enum dnnl_format_tag_t:
        dnnl_format_tag_undef
        dnnl_format_tag_any
        dnnl_a
        dnnl_abc
        dnnl_abcd
        dnnl_abcde
        dnnl_abcdef
        dnnl_bac
        dnnl_bacd
        dnnl_bacde
        dnnl_acbd
        dnnl_acbde
        dnnl_acbdef
        dnnl_acb
        dnnl_acdb
        dnnl_acdeb
        dnnl_abdc
        dnnl_abdec
        dnnl_abdefc
        dnnl_aBc16b
        dnnl_aBcd16b
        dnnl_aBcde16b
        dnnl_aBc8b
        dnnl_aBcd8b
        dnnl_aBcde8b

    ctypedef enum dnnl_prop_kind_t:
        dnnl_forward_training
        dnnl_forward_inference
        dnnl_backward_data
        dnnl_backward_weights

    ctypedef enum dnnl_alg_kind_t:
        dnnl_convolution_direct
        dnnl_deconvolution_direct
        dnnl_binary_add
        dnnl_eltwise_relu
        dnnl_eltwise_tanh
        dnnl_eltwise_soft_relu
        dnnl_eltwise_logistic

    ctypedef enum dnnl_engine_kind_t:
        dnnl_cpu

    ctypedef enum dnnl_stream_flags_t:
        dnnl_stream_default_flags

    ctypedef enum dnnl_query_t:
        dnnl_query_impl_info_str
        dnnl_query_src_md
        dnnl_query_diff_src_md
        dnnl_query_weights_md
        dnnl_query_diff_weights_md
        dnnl_query_dst_md
        dnnl_query_diff_dst_md
        dnnl_query_ndims_s32
        dnnl_query_dims
        dnnl_query_data_type
        dnnl_query_padded_dims
        dnnl_query_padded_offsets
        dnnl_query_submemory_offset_s64
        dnnl_query_format_kind
        dnnl_query_strides
        dnnl_query_inner_nblks_s32
        dnnl_query_inner_blks
        dnnl_query_inner_idxs

    ctypedef enum dnnl_cpu_isa_t:
        dnnl_cpu_isa_sse41
        dnnl_cpu_isa_avx
        dnnl_cpu_isa_avx2
        dnnl_cpu_isa_avx2_vnni
        dnnl_cpu_isa_avx2_vnni_2
        dnnl_cpu_isa_avx512_core
        dnnl_cpu_isa_avx512_core_vnni
        dnnl_cpu_isa_avx512_core_bf16
        dnnl_cpu_isa_avx512_core_fp16
        dnnl_cpu_isa_avx512_core_amx
        dnnl_cpu_isa_avx512_core_amx_fp16

    ctypedef struct dnnl_version_t:
        int major
        int minor
        int patch
        const char *hash
        unsigned cpu_runtime
        unsigned gpu_runtime

    struct dnnl_memory_desc
    ctypedef dnnl_memory_desc *dnnl_memory_desc_t
    ctypedef const dnnl_memory_desc *const_dnnl_memory_desc_t
    struct dnnl_memory
    ctypedef dnnl_memory *dnnl_memory_t
    struct dnnl_engine
    ctypedef dnnl_engine *dnnl_engine_t
    struct dnnl_stream
    ctypedef dnnl_stream *dnnl_stream_t
    struct dnnl_primitive_desc
    ctypedef dnnl_primitive_desc *dnnl_primitive_desc_t
    ctypedef const dnnl_primitive_desc *const_dnnl_primitive_desc_t
    struct dnnl_primitive
    ctypedef dnnl_primitive *dnnl_primitive_t
    ctypedef const dnnl_primitive *const_dnnl_primitive_t
    struct dnnl_primitive_attr
    ctypedef dnnl_primitive_attr *dnnl_primitive_attr_t
    ctypedef const dnnl_primitive_attr *const_dnnl_primitive_attr_t
    struct dnnl_post_ops
    ctypedef dnnl_post_ops *dnnl_post_ops_t

    ctypedef struct dnnl_exec_arg_t:
        int arg
        dnnl_memory_t memory

    enum:
        DNNL_ARG_SRC
        DNNL_ARG_SRC_0
        DNNL_ARG_SRC_1
        DNNL_ARG_DST
        DNNL_ARG_FROM
        DNNL_ARG_TO
        DNNL_ARG_WEIGHTS
        DNNL_ARG_BIAS
        DNNL_ARG_DIFF_SRC
        DNNL_ARG_DIFF_DST
        DNNL_ARG_DIFF_WEIGHTS
        DNNL_ARG_DIFF_BIAS

    void *DNNL_MEMORY_NONE

    const dnnl_version_t *dnnl_version()
    dnnl_status_t dnnl_get_primitive_cache_capacity(int *capacity)
    dnnl_status_t dnnl_set_primitive_cache_capacity(int capacity)
    dnnl_cpu_isa_t dnnl_get_effective_cpu_isa()

    dnnl_status_t dnnl_engine_create(dnnl_engine_t *engine, dnnl_engine_kind_t kind,
                                     size_t index)
    dnnl_status_t dnnl_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine,
                                     unsigned flags)
    dnnl_status_t dnnl_stream_wait(dnnl_stream_t stream)
    dnnl_status_t dnnl_stream_destroy(dnnl_stream_t stream)

    dnnl_status_t dnnl_memory_desc_create_with_tag(
        dnnl_memory_desc_t *memory_desc, int ndims, const dnnl_dims_t dims,
        dnnl_data_type_t data_type, dnnl_format_tag_t tag)
    dnnl_status_t dnnl_memory_desc_clone(dnnl_memory_desc_t *memory_desc,
                                         const_dnnl_memory_desc_t existing)
    dnnl_status_t dnnl_memory_desc_destroy(dnnl_memory_desc_t memory_desc)

    # Row-major single-precision GEMM: C = alpha * op(A) * op(B) + beta * C.
    dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                             dnnl_dim_t K, float alpha, const float *A, dnnl_dim_t lda,
                             const float *B, dnnl_dim_t ldb, float beta, float *C,
                             dnnl_dim_t ldc)
    dnnl_status_t dnnl_memory_desc_query(const_dnnl_memory_desc_t memory_desc,
                                         dnnl_query_t what, void *result)
    int dnnl_memory_desc_equal(const_dnnl_memory_desc_t lhs, const_dnnl_memory_desc_t rhs)
    size_t dnnl_memory_desc_get_size(const_dnnl_memory_desc_t memory_desc)
    dnnl_status_t dnnl_memory_desc_permute_axes(dnnl_memory_desc_t *out_memory_desc,
                                                const_dnnl_memory_desc_t in_memory_desc,
                                                const int *permutation)

    dnnl_status_t dnnl_memory_create(dnnl_memory_t *memory,
                                     const_dnnl_memory_desc_t memory_desc,
                                     dnnl_engine_t engine, void *handle)
    dnnl_status_t dnnl_memory_set_data_handle(dnnl_memory_t memory, void *handle)
    dnnl_status_t dnnl_memory_destroy(dnnl_memory_t memory)

    dnnl_status_t dnnl_primitive_attr_create(dnnl_primitive_attr_t *attr)
    dnnl_status_t dnnl_primitive_attr_destroy(dnnl_primitive_attr_t attr)
    dnnl_status_t dnnl_primitive_attr_set_post_ops(dnnl_primitive_attr_t attr,
                                                   const dnnl_post_ops *post_ops)
    dnnl_status_t dnnl_post_ops_create(dnnl_post_ops_t *post_ops)
    dnnl_status_t dnnl_post_ops_destroy(dnnl_post_ops_t post_ops)
    dnnl_status_t dnnl_post_ops_append_sum(dnnl_post_ops_t post_ops, float scale,
                                           int32_t zero_point, dnnl_data_type_t data_type)
    dnnl_status_t dnnl_post_ops_append_eltwise(dnnl_post_ops_t post_ops,
                                               dnnl_alg_kind_t alg_kind, float alpha,
                                               float beta)

    dnnl_status_t dnnl_primitive_desc_destroy(dnnl_primitive_desc_t primitive_desc)
    dnnl_status_t dnnl_primitive_desc_next_impl(dnnl_primitive_desc_t primitive_desc)
    dnnl_status_t dnnl_primitive_desc_clone(dnnl_primitive_desc_t *primitive_desc,
                                            const_dnnl_primitive_desc_t existing)
    dnnl_status_t dnnl_primitive_desc_query(const_dnnl_primitive_desc_t primitive_desc,
                                            dnnl_query_t what, int index, void *result)
    const_dnnl_memory_desc_t dnnl_primitive_desc_query_md(
        const_dnnl_primitive_desc_t primitive_desc, dnnl_query_t what, int index)

    dnnl_status_t dnnl_primitive_create(dnnl_primitive_t *primitive,
                                        const_dnnl_primitive_desc_t primitive_desc)
    dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive,
                                         dnnl_stream_t stream, int nargs,
                                         const dnnl_exec_arg_t *args)
    dnnl_status_t dnnl_primitive_destroy(dnnl_primitive_t primitive)

    dnnl_status_t dnnl_reorder_primitive_desc_create(
        dnnl_primitive_desc_t *reorder_primitive_desc,
        const_dnnl_memory_desc_t src_desc, dnnl_engine_t src_engine,
        const_dnnl_memory_desc_t dst_desc, dnnl_engine_t dst_engine,
        const_dnnl_primitive_attr_t attr)

    dnnl_status_t dnnl_binary_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_alg_kind_t alg_kind, const_dnnl_memory_desc_t src0_desc,
        const_dnnl_memory_desc_t src1_desc, const_dnnl_memory_desc_t dst_desc,
        const_dnnl_primitive_attr_t attr)

    dnnl_status_t dnnl_eltwise_forward_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_prop_kind_t prop_kind, dnnl_alg_kind_t alg_kind,
        const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t dst_desc,
        float alpha, float beta, const_dnnl_primitive_attr_t attr)

    dnnl_status_t dnnl_convolution_forward_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_prop_kind_t prop_kind, dnnl_alg_kind_t alg_kind,
        const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t weights_desc,
        const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc,
        const dnnl_dims_t strides, const dnnl_dims_t dilates,
        const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
        const_dnnl_primitive_attr_t attr)
    dnnl_status_t dnnl_convolution_backward_data_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_alg_kind_t alg_kind, const_dnnl_memory_desc_t diff_src_desc,
        const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t diff_dst_desc,
        const dnnl_dims_t strides, const dnnl_dims_t dilates,
        const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
        const_dnnl_primitive_desc_t hint_fwd_pd, const_dnnl_primitive_attr_t attr)

    dnnl_status_t dnnl_convolution_backward_weights_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_alg_kind_t alg_kind, const_dnnl_memory_desc_t src_desc,
        const_dnnl_memory_desc_t diff_weights_desc,
        const_dnnl_memory_desc_t diff_bias_desc, const_dnnl_memory_desc_t diff_dst_desc,
        const dnnl_dims_t strides, const dnnl_dims_t dilates,
        const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
        const_dnnl_primitive_desc_t hint_fwd_pd, const_dnnl_primitive_attr_t attr)

    dnnl_status_t dnnl_deconvolution_forward_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_prop_kind_t prop_kind, dnnl_alg_kind_t alg_kind,
        const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t weights_desc,
        const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc,
        const dnnl_dims_t strides, const dnnl_dims_t dilates,
        const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
        const_dnnl_primitive_attr_t attr)
    dnnl_status_t dnnl_deconvolution_backward_data_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_alg_kind_t alg_kind, const_dnnl_memory_desc_t diff_src_desc,
        const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t diff_dst_desc,
        const dnnl_dims_t strides, const dnnl_dims_t dilates,
        const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
        const_dnnl_primitive_desc_t hint_fwd_pd, const_dnnl_primitive_attr_t attr)
    dnnl_status_t dnnl_deconvolution_backward_weights_primitive_desc_create(
        dnnl_primitive_desc_t *primitive_desc, dnnl_engine_t engine,
        dnnl_alg_kind_t alg_kind, const_dnnl_memory_desc_t src_desc,
        const_dnnl_memory_desc_t diff_weights_desc,
        const_dnnl_memory_desc_t diff_bias_desc, const_dnnl_memory_desc_t diff_dst_desc,
        const dnnl_dims_t strides, const dnnl_dims_t dilates,
        const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
        const_dnnl_primitive_desc_t hint_fwd_pd, const_dnnl_primitive_attr_t attr)


cdef extern from "oneapi/dnnl/dnnl_debug.h" nogil:
    const char *dnnl_status2str(dnnl_status_t v)
    const char *dnnl_dt2str(dnnl_data_type_t v)


cdef extern from "omp.h" nogil:
    void omp_set_num_threads(int num_threads)
    int omp_get_max_threads()
