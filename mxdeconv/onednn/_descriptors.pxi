# Included by _ops.pyx (one module, textual include): Geometry and the one
# place that describes a deconvolution (or the convolution run directly) to
# oneDNN.

# ----------------------------------------------------------------------------
# Deconvolution descriptors: the one place that describes a deconvolution
# ----------------------------------------------------------------------------
cdef enum Pass:
    PASS_FORWARD, PASS_BACKWARD_DATA, PASS_BACKWARD_WEIGHTS


_PASS_NAMES = {PASS_FORWARD: "forward", PASS_BACKWARD_DATA: "backward data",
               PASS_BACKWARD_WEIGHTS: "backward weights"}


cdef class Geometry:
    """oneDNN's view of one DeconvGeometry: dims, strides, dilations, paddings."""
    cdef dnnl_dims_t strides, dilates, pad_l, pad_r
    cdef readonly tuple src_dims, weight_dims, bias_dims, dst_dims
    cdef readonly tuple data_shape, weight_shape, out_shape   # the NDArrays' shapes
    cdef readonly int groups
    cdef readonly bint grouped, has_bias
    cdef readonly str dtype

    @staticmethod
    cdef Geometry of(geom, str dtype):
        cdef Geometry g = Geometry.__new__(Geometry)
        cdef int i
        param = geom.param
        for i in range(param.ndim):
            g.strides[i] = param.stride[i]
            g.dilates[i] = param.dilate[i] - 1  # oneDNN counts the gaps
            g.pad_l[i] = geom.pad_l[i]
            g.pad_r[i] = geom.pad_r[i]
        g.groups = param.num_group
        g.grouped = g.groups > 1
        g.data_shape = g.src_dims = geom.data_shape
        g.out_shape = g.dst_dims = geom.out_shape
        g.weight_shape = geom.weight_shape
        g.weight_dims = onednn_weight_dims(geom.weight_shape, g.groups)
        g.has_bias = not param.no_bias
        g.bias_dims = (param.num_filter,)
        g.dtype = dtype
        return g

    cdef MemoryDesc weights_any(self):
        return new_md(self.weight_dims, self.dtype, dnnl_format_tag_any, ROLE_WEIGHTS,
                      self.grouped)

    cdef MemoryDesc bias_any(self):
        return new_md(self.bias_dims, self.dtype, dnnl_format_tag_any, ROLE_BIAS)

    def __repr__(self):
        return (f"src {self.src_dims}, weights {self.weight_dims}, dst {self.dst_dims}, "
                f"{self.dtype}")


cdef PrimitiveDesc deconv_pd(Geometry g, Pass which, dnnl_prop_kind_t prop,
                             MemoryDesc src, MemoryDesc weights, MemoryDesc bias,
                             MemoryDesc dst, PrimitiveDesc hint, Attr attr):
    """A primitive descriptor for one pass, or None when oneDNN has no
    implementation for it.  ``src``/``weights``/``bias``/``dst`` are the
    (diff_)src, (diff_)weights, (diff_)bias (None: no bias) and (diff_)dst
    descriptors of that pass."""
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef const_dnnl_memory_desc_t bias_md = bias.md if bias is not None else NULL
    cdef const_dnnl_primitive_desc_t hint_pd = hint.pd if hint is not None else NULL
    cdef const_dnnl_primitive_attr_t c_attr = attr.attr if attr is not None else NULL
    cdef dnnl_status_t status
    if which == PASS_FORWARD:
        status = dnnl_deconvolution_forward_primitive_desc_create(
            &pd.pd, engine(), prop, dnnl_deconvolution_direct, src.md, weights.md, bias_md,
            dst.md, g.strides, g.dilates, g.pad_l, g.pad_r, c_attr)
    elif which == PASS_BACKWARD_DATA:
        status = dnnl_deconvolution_backward_data_primitive_desc_create(
            &pd.pd, engine(), dnnl_deconvolution_direct, src.md, weights.md, dst.md,
            g.strides, g.dilates, g.pad_l, g.pad_r, hint_pd, c_attr)
    else:
        status = dnnl_deconvolution_backward_weights_primitive_desc_create(
            &pd.pd, engine(), dnnl_deconvolution_direct, src.md, weights.md, bias_md,
            dst.md, g.strides, g.dilates, g.pad_l, g.pad_r, hint_pd, c_attr)
    if status == dnnl_unimplemented:
        return None
    check(status, f"deconvolution descriptor ({_PASS_NAMES[which]}, {g!r})")
    pd.hint = hint
    return pd


cdef PrimitiveDesc forward_hint(Geometry g):
    """The forward pass the backward passes are planned against."""
    cdef MemoryDesc data_any = new_md(g.src_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef MemoryDesc out_any = new_md(g.dst_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef PrimitiveDesc hint = deconv_pd(
        g, PASS_FORWARD, dnnl_forward_training, data_any, g.weights_any(),
        g.bias_any() if g.has_bias else None, out_any, None, None)
    if hint is None:
        raise MXNetError(f"oneDNN has no deconvolution forward for {g!r}")
    return hint


cdef class ForwardHints:
    """The forward descriptors one layer's other passes are planned against
    (forward_hint(), conv_forward_hint()), each made when first needed and
    then shared: by both backward passes, by every enumeration of them, and by
    the forward's direct convolutions.  Making a deconvolution's forward
    descriptor cost 80-90 ms on a 1-D layer (kernel 16, stride 8: oneDNN 3.2
    sets its brgemm kernels up then), and each backward enumeration made its own."""
    cdef Geometry g
    cdef PrimitiveDesc _deconv, _conv
    cdef bint _conv_made

    def __init__(self, geom, str dtype):
        self.g = Geometry.of(geom, dtype)

    cdef PrimitiveDesc deconv(self):
        if self._deconv is None:
            self._deconv = forward_hint(self.g)
        return self._deconv

    cdef offer_deconv(self, PrimitiveDesc pd):
        """Take a copy of ``pd``, a training forward's descriptor made as
        forward_hint() makes it (before any next_impl), unless one is held."""
        if self._deconv is None:
            self._deconv = pd.clone()

    cdef PrimitiveDesc conv(self):
        """None when oneDNN has no forward convolution for the layer."""
        if not self._conv_made:
            self._conv = conv_forward_hint(self.g)
            self._conv_made = True
        return self._conv


cdef MemoryDesc swap_weight_axes(MemoryDesc weights, bint grouped):
    """``weights`` with its O and I axes swapped, over the same bytes: a
    deconvolution's weights ``([G,] O, I, *k)`` are its convolution's
    ``([G,] I, O, *k)`` (oneDNN's ref_deconvolution permutes them the same way)."""
    cdef int permutation[DNNL_MAX_NDIMS]
    cdef int i, first = 1 if grouped else 0
    cdef dnnl_memory_desc_t md = NULL
    for i in range(len(weights.dims)):
        permutation[i] = i
    permutation[first], permutation[first + 1] = first + 1, first
    check(dnnl_memory_desc_permute_axes(&md, weights.md, permutation),
          f"weight axes permutation ({weights!r})")
    try:
        return wrap_md(md, ROLE_WEIGHTS, grouped)
    finally:
        dnnl_memory_desc_destroy(md)


cdef PrimitiveDesc conv_forward_hint(Geometry g):
    """The forward convolution the backward-data and backward-weights
    convolutions of direct plans are planned against (as forward_hint() is
    for the deconvolution's backward passes), or None when oneDNN has none."""
    cdef PrimitiveDesc hint = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef MemoryDesc data_any = new_md(g.src_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef MemoryDesc out_any = new_md(g.dst_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef MemoryDesc weights_any = swap_weight_axes(g.weights_any(), g.grouped)
    cdef dnnl_status_t status = dnnl_convolution_forward_primitive_desc_create(
        &hint.pd, engine(), dnnl_forward_training, dnnl_convolution_direct, out_any.md,
        weights_any.md, NULL, data_any.md, g.strides, g.dilates, g.pad_l, g.pad_r, NULL)
    if status == dnnl_unimplemented:
        return None
    check(status, f"convolution descriptor (forward hint, {g!r})")
    return hint


cdef PrimitiveDesc direct_conv_pd(Geometry g, Pass which, MemoryDesc src, MemoryDesc weights,
                                  MemoryDesc dst, PrimitiveDesc hint):
    """The convolution that oneDNN 3.2 runs for a deconvolution pass, described
    directly, or None when oneDNN has no implementation for it: the forward is
    a backward-data convolution from ``src`` (the deconvolution's src) to
    ``dst``, the backward data a forward convolution from ``dst`` (the
    deconvolution's diff_dst) to ``src`` (its diff_src), the backward weights
    a backward-weights convolution whose src is ``dst`` (the deconvolution's
    diff_dst) and whose diff_dst is ``src`` (its src), without a bias.
    ``weights`` has the deconvolution's dims; ``hint`` is conv_forward_hint()
    (the two backward convolutions need it).  Run directly, the convolution
    skips the wrapper's nested execution and argument remapping (about 1 us
    per call)."""
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef MemoryDesc conv_weights = swap_weight_axes(weights, g.grouped)
    cdef dnnl_status_t status
    if which == PASS_BACKWARD_DATA:
        status = dnnl_convolution_forward_primitive_desc_create(
            &pd.pd, engine(), dnnl_forward_inference, dnnl_convolution_direct, dst.md,
            conv_weights.md, NULL, src.md, g.strides, g.dilates, g.pad_l, g.pad_r, NULL)
    elif hint is None:
        return None
    elif which == PASS_FORWARD:
        status = dnnl_convolution_backward_data_primitive_desc_create(
            &pd.pd, engine(), dnnl_convolution_direct, dst.md, conv_weights.md, src.md,
            g.strides, g.dilates, g.pad_l, g.pad_r, hint.pd, NULL)
    else:  # the convolution's src is the deconvolution's diff_dst, and vice versa
        status = dnnl_convolution_backward_weights_primitive_desc_create(
            &pd.pd, engine(), dnnl_convolution_direct, dst.md, conv_weights.md, NULL,
            src.md, g.strides, g.dilates, g.pad_l, g.pad_r, hint.pd, NULL)
    if status == dnnl_unimplemented:
        return None
    check(status, f"convolution descriptor (direct {_PASS_NAMES[which]}, {g!r})")
    pd.hint = hint
    return pd
