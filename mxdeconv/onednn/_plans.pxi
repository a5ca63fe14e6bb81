# Included by _ops.pyx (one module, textual include): candidate plans (the
# implementations and layouts oneDNN offers for a geometry) and the forward,
# backward-data and backward-weights plans built from them.

# ----------------------------------------------------------------------------
# Candidate plans
# ----------------------------------------------------------------------------
#: Layout families tried for the data tensors (src, dst and their gradients):
#: oneDNN's own choice first, then each explicit family.
FAMILIES = ("any", "blocked16", "blocked8", "channels_last", "plain")
_FAMILY_TAGS = {
    "blocked16": {3: dnnl_aBc16b, 4: dnnl_aBcd16b, 5: dnnl_aBcde16b},
    "blocked8": {3: dnnl_aBc8b, 4: dnnl_aBcd8b, 5: dnnl_aBcde8b},
    "channels_last": {3: dnnl_acb, 4: dnnl_acdb, 5: dnnl_acdeb},
    "plain": _PLAIN_TAGS,
}


cdef MemoryDesc family_md(tuple dims, str dtype, str family):
    cdef dnnl_format_tag_t tag = dnnl_format_tag_any
    if family != "any":
        tag = _FAMILY_TAGS[family][len(dims)]
    return new_md(dims, dtype, tag, ROLE_DATA)


def bias_loop_blocks(dims, str family):
    """The bias loops' (planes, blocks, rows, width) over a float32 tensor of
    ``dims`` in the layout family ``family`` (one of FAMILIES but "any"), or
    None where they do not walk it: what they read from the descriptor's
    strides and blocks (for tests)."""
    cdef ChannelBlocks blocks = channel_blocks(family_md(tuple(dims), "float32", family))
    return None if blocks.planes == 0 else (blocks.planes, blocks.blocks, blocks.rows,
                                            blocks.width)


cdef class Candidate:
    """One way oneDNN offers to run a pass: a descriptor positioned on one
    implementation, and how it was asked for.  ``build()`` creates its plan
    (compiling the kernel): candidates are cheap, plans are not."""

    @property
    def is_reference(self):
        """oneDNN's reference kernels: correct but orders of magnitude slower."""
        return "ref" in self.impl.rpartition("+")[2]

    def build(self):
        return self.builder(self)

    def __repr__(self):
        weights = ", plain weights" if self.weights == "plain" else ""
        bias = "" if self.bias_fused else ", bias added separately"
        if self.direct and not self.bias_fused:
            bias = ", bias added by mxdeconv"
        act = ""
        if self.act_type is not None:
            if not self.act_fused:
                act = f", {self.act_type} by a separate eltwise primitive"
            elif self.bias_fused:
                act = f", {self.act_type} fused"
            else:
                act = f", {self.act_type} fused into the bias addition"
        return f"Candidate({self.impl}, {self.family} layouts{weights}{bias}{act})"


cdef class ForwardPlan:
    """The forward pass of one geometry: a deconvolution primitive; when the
    bias cannot be fused, a binary primitive that adds it in place; and the
    activation (``act_type``, None: none) fused as an eltwise post-op of the
    last of these (``act_fused``) or run by an eltwise primitive in place."""

    cdef int run(self, void *src, void *weights, void *bias, void *dst,
                 bint activate=True) except -1:
        cdef void *handles[4]
        cdef int n = 0
        handles[n] = src
        n += 1
        handles[n] = weights
        n += 1
        if self.bias_fused and self.bias is not None:
            handles[n] = bias
            n += 1
        handles[n] = dst
        self.prim.run(handles)
        cdef int threads = loop_team(self.threads)
        if self.bias_blocks.planes and bias != NULL:
            with nogil:
                add_bias(<float *>dst, <const float *>bias, &self.bias_blocks, threads)
        if self.bias_prim is not None:
            handles[0] = dst
            handles[1] = bias
            handles[2] = dst
            self.bias_prim.run(handles)
        if activate and self.act_prim is not None:
            handles[0] = dst
            handles[1] = dst
            self.act_prim.run(handles)
        return 0

    def run_plain(self, src, weights, bias, dst_init=None, bint activate=True):
        """Run on default-layout NumPy arrays; returns the default-layout result
        (for the plan-time check: every tensor lies between guard zones of
        NaNs and dst starts as NaNs, see guarded_buffer).
        ``dst_init`` seeds dst (the plan's sum post-op, if any, adds onto it).
        ``activate`` False stops before a separate activation primitive (the
        pre-activation, for the plan-time check; a fused one cannot be skipped)."""
        if not activate and self.act_fused:
            raise MXNetError(f"run_plain: activate must be True for a plan with the "
                             f"{self.act_type} activation fused, got activate=False")
        src_buf = guarded_from_plain(self.src, src)
        wei_buf = guarded_from_plain(self.weights, weights)
        bias_buf = None if self.bias is None else guarded_from_plain(self.bias, bias)
        if dst_init is None:
            dst_buf = guarded_buffer(self.dst.desc.size, True)
        else:
            dst_buf = guarded_from_plain(self.dst, dst_init)
        self.run(data_ptr(src_buf), data_ptr(wei_buf),
                 NULL if bias_buf is None else data_ptr(bias_buf), data_ptr(dst_buf),
                 activate)
        check_guards("forward", (src_buf, wei_buf, bias_buf, dst_buf))
        return self.dst.to_plain(dst_buf, None)


cdef Primitive bias_add_primitive(Geometry g, Layout dst, activation=None):
    """dst += bias, broadcast over every axis but the channels (in place);
    ``activation`` (an act_type) then applies to the sum as a post-op."""
    bias_dims = (1, g.dst_dims[1]) + (1,) * (len(g.dst_dims) - 2)
    cdef MemoryDesc bias = new_md(bias_dims, g.dtype, _PLAIN_TAGS[len(bias_dims)], ROLE_DATA)
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef Attr attr = Attr(False, activation)
    check(dnnl_binary_primitive_desc_create(&pd.pd, engine(), dnnl_binary_add,
                                            dst.desc.md, bias.md, dst.desc.md, attr.attr),
          f"bias addition on {dst.name}")
    return make_primitive(pd, [(DNNL_ARG_SRC_0, dst.desc), (DNNL_ARG_SRC_1, bias),
                               (DNNL_ARG_DST, dst.desc)])


cdef Primitive eltwise_primitive(str act_type, Layout dst):
    """dst = act(dst) in place: the activation when it is not fused."""
    cdef int alg
    cdef float alpha, beta
    alg, alpha, beta = _eltwise(act_type)
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    check(dnnl_eltwise_forward_primitive_desc_create(
              &pd.pd, engine(), dnnl_forward_inference, <dnnl_alg_kind_t>alg, dst.desc.md,
              dst.desc.md, alpha, beta, NULL),
          f"{act_type} eltwise on {dst.name}")
    return make_primitive(pd, [(DNNL_ARG_SRC, dst.desc), (DNNL_ARG_DST, dst.desc)])


cdef ForwardPlan build_forward(Geometry g, Candidate c):
    cdef ForwardPlan plan = ForwardPlan.__new__(ForwardPlan)
    cdef PrimitiveDesc pd = c.pd
    cdef MemoryDesc conv_weights
    plan.impl, plan.family, plan.bias_fused = c.impl, c.family, c.bias_fused
    plan.act_type, plan.act_fused, plan.direct = c.act_type, c.act_fused, c.direct
    plan.threads = omp_get_max_threads()
    if c.direct:  # a backward-data convolution: dst is its diff_src
        plan.src = make_layout(pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA), ROLE_DATA,
                               g.data_shape)
        conv_weights = pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS, g.grouped)
        plan.weights = make_layout(swap_weight_axes(conv_weights, g.grouped), ROLE_WEIGHTS,
                                   g.weight_shape, g.groups)
        plan.dst = make_layout(pd.query(dnnl_query_diff_src_md, 0, ROLE_DATA), ROLE_DATA,
                               g.out_shape)
        args = [(DNNL_ARG_DIFF_DST, plan.src.desc), (DNNL_ARG_WEIGHTS, conv_weights)]
    else:
        plan.src = make_layout(pd.query(dnnl_query_src_md, 0, ROLE_DATA), ROLE_DATA,
                               g.data_shape)
        plan.weights = make_layout(pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS, g.grouped),
                                   ROLE_WEIGHTS, g.weight_shape, g.groups)
        plan.dst = make_layout(pd.query(dnnl_query_dst_md, 0, ROLE_DATA), ROLE_DATA,
                               g.out_shape)
        args = [(DNNL_ARG_SRC, plan.src.desc), (DNNL_ARG_WEIGHTS, plan.weights.desc)]
    if g.has_bias:
        if c.bias_fused:
            bias_desc = pd.query(dnnl_query_weights_md, 1, ROLE_BIAS)
            args.append((DNNL_ARG_BIAS, bias_desc))
        elif c.direct:
            bias_desc = plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1)
            plan.bias_blocks = channel_blocks(plan.dst.desc)
            if not plan.bias_blocks.planes:
                raise MXNetError(f"{c!r}: mxdeconv's bias loop does not know dst layout "
                                 f"{plan.dst.name}")
        else:
            bias_desc = plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1)
            # The activation follows the bias: fused, it rides on the addition.
            plan.bias_prim = bias_add_primitive(g, plan.dst,
                                                c.act_type if c.act_fused else None)
        plan.bias = make_layout(bias_desc, ROLE_BIAS, g.bias_dims)
    args.append((DNNL_ARG_DIFF_SRC if c.direct else DNNL_ARG_DST, plan.dst.desc))
    plan.prim = make_primitive(pd, args)
    if c.act_type is not None and not c.act_fused:
        plan.act_prim = eltwise_primitive(c.act_type, plan.dst)
    return plan


def _enumerate(make_pd, builder, list variants, act_type=None, skip=None, only=None,
               own=None):
    """Candidates of one pass: for each variant (data layout family, weights
    layout family, bias fused?, activation fused?, direct convolution?),
    oneDNN's implementations in its order; duplicates once, and those
    ``skip(candidate)`` declines, left out; reference kernels last.
    ``own``, mxdeconv's own plans (an iterable, read when reached; those of
    ``only``'s variant alone when it is given), come right after oneDNN's first
    choice (the tuner, bounded in time, reaches them early).  With ``only``,
    that variant's alone (none if it is not one of ``variants``: the value
    may come from the plan cache); their indices are then not the positions
    in the full enumeration."""
    if only is not None:
        variants = [v for v in variants if v == tuple(only)]
    seen = set()
    deferred = []
    cdef Candidate c
    cdef PrimitiveDesc pd
    cdef int index = 0
    for family, weights, fused, act_fused, direct in variants:
        pd = make_pd(family, weights, fused, act_fused, direct)
        while pd is not None:
            c = Candidate.__new__(Candidate)
            c.pd, c.family, c.weights, c.bias_fused = pd.clone(), family, weights, fused
            c.act_type, c.act_fused, c.direct = act_type, act_fused, bool(direct)
            c.impl, c.builder = direct + pd.impl(), builder
            c.variant = (family, weights, fused, act_fused, direct)
            c.layouts = _pd_layout_keys(c.pd)
            key = (c.impl, fused, act_fused, c.layouts)
            if key not in seen and not (skip is not None and skip(c)):
                seen.add(key)
                if c.is_reference:
                    deferred.append(c)
                else:
                    c.index = index
                    index += 1
                    yield c
                    if own is not None:
                        for c in own:
                            c.index = index
                            index += 1
                            yield c
                        own = None
            if not pd.next_impl():
                pd = None
    if own is not None:   # ``only`` one of theirs, or oneDNN offered only reference kernels
        for c in own:
            c.index = index
            index += 1
            yield c
    for c in deferred:
        c.index = index
        index += 1
        yield c


def _variants(has_bias, act_flags=(False,), direct=None, bint direct_first=False):
    """(data family, weights family, bias fused, activation fused, direct) in
    the order oneDNN's own choice is reached first: every data family with
    oneDNN's weights layout, then with plain weights (no weight reorder in
    training), bias fused first, then the activation fused first
    (``act_flags``).  When ``direct`` is a direct convolution's name prefix
    (DIRECT_FORWARD, ...; "" in oneDNN's own variants), each layout pair's
    direct convolution (bias and activation separate) follows oneDNN's own
    deconvolution of that pair (the tuner, bounded in time, reaches them
    early), or precedes it with ``direct_first`` (where the deconvolution's
    descriptors cost tens of milliseconds, its direct twin's a twentieth)."""
    fused_flags = [True, False] if has_bias else [True]
    variants = []
    for fused in fused_flags:
        for act_fused in act_flags:
            for weights in ("any", "plain"):
                for family in FAMILIES:
                    own = (family, weights, fused, act_fused, "")
                    if direct is not None and fused == fused_flags[0] and \
                            act_fused == act_flags[0]:
                        twin = (family, weights, not has_bias, False, direct)
                        variants += [twin, own] if direct_first else [own, twin]
                    else:
                        variants.append(own)
    return variants


cdef MemoryDesc weights_md(Geometry g, str weights):
    if weights == "plain":
        return plain_md(g.weight_shape, g.dtype, ROLE_WEIGHTS, g.groups)
    return g.weights_any()


cdef tuple _pd_layout_keys(PrimitiveDesc pd):
    keys = []
    cdef const_dnnl_memory_desc_t md
    cdef MemoryDesc desc
    for what in (dnnl_query_src_md, dnnl_query_diff_src_md, dnnl_query_weights_md,
                 dnnl_query_diff_weights_md, dnnl_query_dst_md, dnnl_query_diff_dst_md):
        md = dnnl_primitive_desc_query_md(pd.pd, <dnnl_query_t>what, 0)
        if md != NULL:
            desc = wrap_md(md, ROLE_DATA)
            keys.append(desc.key)
    return tuple(keys)


def forward_candidates(geom, str dtype, bint training, bint accumulate, act_type=None,
                       bint fuse_activation=True, variant=None, ForwardHints hints=None,
                       bint direct_first=False):
    """The forward plans oneDNN offers for ``geom``, in order of preference:
    the bias fused into the primitive first, then added by a separate
    primitive; within each, the activation ``act_type`` (one of
    ELTWISE_ACTIVATIONS, or None) fused as a post-op first (unless
    ``fuse_activation`` is False), then run by a separate eltwise primitive;
    within each, oneDNN's own layout choice first (``variant``: see _enumerate;
    ``hints``: the layer's ForwardHints, shared with its other enumerations;
    ``direct_first``: see _variants)."""
    cdef Geometry g = Geometry.of(geom, dtype)
    if hints is None:
        hints = ForwardHints(geom, dtype)
    cdef Attr attr = Attr(accumulate)
    cdef Attr act_attr = attr
    cdef dnnl_prop_kind_t prop = dnnl_forward_training if training else dnnl_forward_inference
    act_flags = [False]
    if act_type is not None:
        if accumulate:
            raise MXNetError(f"forward_candidates: an activation (act_type={act_type!r}) "
                             "cannot follow req=add's sum (accumulate=True)")
        act_attr = Attr(False, act_type)
        act_flags = [True, False] if fuse_activation else [False]

    # A direct convolution takes neither the sum post-op nor a bias; mxdeconv's
    # bias loop adds float32 only.
    direct = DIRECT_FORWARD if dtype == "float32" and not accumulate else None

    def make_pd(family, weights, fused, act_fused, direct):
        if direct:
            return direct_conv_pd(g, PASS_FORWARD, family_md(g.src_dims, dtype, family),
                                  weights_md(g, weights), family_md(g.dst_dims, dtype, family),
                                  hints.conv())
        # The post-op goes on the deconvolution only when the bias is in it
        # too; with a separate bias it rides on the bias addition instead.
        pd = deconv_pd(g, PASS_FORWARD, prop, family_md(g.src_dims, dtype, family),
                       weights_md(g, weights), g.bias_any() if fused and g.has_bias else None,
                       family_md(g.dst_dims, dtype, family), None,
                       act_attr if act_fused and fused else attr)
        if (pd is not None and training and not accumulate and not act_fused and fused
                and family == "any" and weights == "any"):
            hints.offer_deconv(pd)  # forward_hint()'s very descriptor
        return pd

    return _enumerate(make_pd, lambda c: build_forward(g, c),
                      _variants(g.has_bias, act_flags, direct, direct_first), act_type,
                      _forward_skip, variant,
                      None if accumulate or act_type is not None else
                      _own_candidates("forward", geom, dtype, training, variant))


def _own_candidates(str which, geom, str dtype, bint training, variant):
    """mxdeconv's plans of pass ``which`` ("forward", without req=add's sum or
    an activation, "backward_data" or "backward_weights"): its GEMM plan
    (backward weights: transposed, then in MXNet's layout), then the
    sub-grid's (not of the backward data); those of ``variant`` alone when it
    is given."""
    if which == "forward":
        gemms = ((GEMM_FORWARD_VARIANT, lambda: gemm_forward_candidate(geom, dtype)),)
    elif which == "backward_data":
        gemms = ((GEMM_PLAIN_VARIANT, lambda: gemm_backward_data_candidate(geom, dtype)),)
    else:
        gemms = ((GEMM_VARIANT, lambda: gemm_backward_weights_candidate(geom, dtype)),
                 (GEMM_PLAIN_VARIANT,
                  lambda: gemm_backward_weights_candidate(geom, dtype, True)))
    for gemm_variant, make_gemm in gemms:
        if variant is None or tuple(variant) == gemm_variant:
            gemm = make_gemm()
            if gemm is not None:
                yield gemm
    if which != "backward_data":
        yield from subgrid_candidates(which, geom, dtype, training, variant)


#: oneDNN's convolution-based deconvolution (``ref_deconvolution``: a backward-
#: data convolution) names its implementations "conv:any+<convolution>".
CONVOLUTION_BASED = "conv:any+"
#: mxdeconv's names for the direct convolutions (see direct_conv_pd): the
#: forward runs "conv:bwd_data+<convolution>", the backward data
#: "conv:fwd+<convolution>", the backward weights "conv:bwd_weights+<convolution>".
DIRECT_FORWARD, DIRECT_BACKWARD_DATA = "conv:bwd_data+", "conv:fwd+"
DIRECT_BACKWARD_WEIGHTS = "conv:bwd_weights+"


def _forward_skip(Candidate c):
    return _slow_post_op(c) or _bias_loop_cannot_add(c)


def _bias_loop_cannot_add(Candidate c):
    """Whether ``c`` is a direct convolution with a bias whose dst (its
    diff_src) is in a layout mxdeconv's bias loop does not know."""
    return c.direct and not c.bias_fused and not loop_knows(c, dnnl_query_diff_src_md)


cdef bint loop_knows(Candidate c, dnnl_query_t what) except -1:
    """Whether mxdeconv's bias loops walk the layout ``c`` chose for ``what``."""
    return channel_blocks(c.pd.query(what, 0, ROLE_DATA)).planes > 0


def _slow_post_op(Candidate c):
    """Whether ``c`` has oneDNN apply its eltwise post-op in a scalar reference
    loop: a convolution-based deconvolution computes into a scratch buffer and
    runs its post-ops element by element (ref_deconvolution.cpp,
    compute_ref_attrs, v3.2); measured 2 to 5 times slower than the same
    kernel followed by an eltwise primitive, so it is not a candidate."""
    return c.act_fused and c.bias_fused and c.impl.startswith(CONVOLUTION_BASED)


cdef class BackwardDataPlan:
    """diff_src = backward data(diff_dst, weights)."""

    cdef int run(self, void *diff_dst, void *weights, void *diff_src) except -1:
        cdef void *handles[3]
        handles[0], handles[1], handles[2] = diff_dst, weights, diff_src
        return self.prim.run(handles)

    def run_plain(self, diff_dst, weights):
        dd = guarded_from_plain(self.diff_dst, diff_dst)
        wei = guarded_from_plain(self.weights, weights)
        out = guarded_buffer(self.diff_src.desc.size, True)
        self.run(data_ptr(dd), data_ptr(wei), data_ptr(out))
        check_guards("backward data", (dd, wei, out))
        return self.diff_src.to_plain(out, None)


cdef class BackwardWeightsPlan:
    """diff_weights (and diff_bias) = backward weights(src, diff_dst)."""

    cdef int run(self, void *src, void *diff_dst, void *diff_weights,
                 void *diff_bias) except -1:
        cdef void *handles[4]
        handles[0], handles[1], handles[2], handles[3] = src, diff_dst, diff_weights, diff_bias
        self.prim.run(handles)
        cdef int threads = loop_team(self.threads)
        if self.bias_blocks.planes and diff_bias != NULL:
            with nogil:
                sum_bias(<const float *>diff_dst, <float *>diff_bias, &self.bias_blocks, threads)
        return 0

    def run_plain(self, src, diff_dst):
        """Returns ``(diff_weights, diff_bias or None)`` in the default layout."""
        src_buf = guarded_from_plain(self.src, src)
        dd = guarded_from_plain(self.diff_dst, diff_dst)
        dw = guarded_buffer(self.diff_weights.desc.size, True)
        db = None if self.diff_bias is None else guarded_buffer(self.diff_bias.desc.size, True)
        self.run(data_ptr(src_buf), data_ptr(dd), data_ptr(dw),
                 NULL if db is None else data_ptr(db))
        check_guards("backward weights", (src_buf, dd, dw, db))
        return (self.diff_weights.to_plain(dw, None),
                None if db is None else self.diff_bias.to_plain(db, None))


def backward_weights_candidates(geom, str dtype, variant=None, ForwardHints hints=None,
                                bint direct_first=False):
    """Backward-weights plans for ``geom`` (diff_bias included when there is a
    bias; ``variant``: see _enumerate; ``hints``, ``direct_first``: see
    forward_candidates)."""
    cdef Geometry g = Geometry.of(geom, dtype)
    if hints is None:
        hints = ForwardHints(geom, dtype)
    # mxdeconv's bias-gradient loop sums float32 only.
    direct = DIRECT_BACKWARD_WEIGHTS if dtype == "float32" else None

    def make_pd(family, weights, fused, act_fused, direct):
        if direct:
            return direct_conv_pd(g, PASS_BACKWARD_WEIGHTS,
                                  family_md(g.src_dims, dtype, family), weights_md(g, weights),
                                  family_md(g.dst_dims, dtype, family), hints.conv())
        return deconv_pd(g, PASS_BACKWARD_WEIGHTS, dnnl_backward_weights,
                         family_md(g.src_dims, dtype, family), weights_md(g, weights),
                         g.bias_any() if g.has_bias else None,
                         family_md(g.dst_dims, dtype, family), hints.deconv(), None)

    return _enumerate(make_pd, lambda c: build_backward_weights(g, c),
                      _variants(False, direct=direct, direct_first=direct_first),
                      skip=_bias_sum_cannot_read if g.has_bias else None, only=variant,
                      own=_own_candidates("backward_weights", geom, dtype, False, variant))


def _bias_sum_cannot_read(Candidate c):
    """Whether ``c`` is a direct convolution whose diff_dst (its src) is in a
    layout mxdeconv's bias-gradient loop does not know."""
    return c.direct and not loop_knows(c, dnnl_query_src_md)


cdef BackwardWeightsPlan build_backward_weights(Geometry g, Candidate c):
    cdef BackwardWeightsPlan plan = BackwardWeightsPlan.__new__(BackwardWeightsPlan)
    cdef MemoryDesc weights
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.direct = c.direct
    if c.direct:  # the convolution's src is diff_dst, its diff_dst is src
        plan.src = make_layout(c.pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA), ROLE_DATA,
                               g.data_shape)
        plan.diff_dst = make_layout(c.pd.query(dnnl_query_src_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.out_shape)
        weights = c.pd.query(dnnl_query_diff_weights_md, 0, ROLE_WEIGHTS, g.grouped)
        plan.diff_weights = make_layout(swap_weight_axes(weights, g.grouped), ROLE_WEIGHTS,
                                        g.weight_shape, g.groups)
        plan.prim = make_primitive(c.pd, [(DNNL_ARG_DIFF_DST, plan.src.desc),
                                          (DNNL_ARG_SRC, plan.diff_dst.desc),
                                          (DNNL_ARG_DIFF_WEIGHTS, weights)])
        if g.has_bias:
            plan.diff_bias = make_layout(plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1),
                                         ROLE_BIAS, g.bias_dims)
            plan.bias_blocks = channel_blocks(plan.diff_dst.desc)
            if not plan.bias_blocks.planes:
                raise MXNetError(f"{c!r}: mxdeconv's bias-gradient loop does not know "
                                 f"diff_dst layout {plan.diff_dst.name}")
        return plan
    plan.src = make_layout(c.pd.query(dnnl_query_src_md, 0, ROLE_DATA), ROLE_DATA,
                           g.data_shape)
    plan.diff_dst = make_layout(c.pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA),
                                ROLE_DATA, g.out_shape)
    plan.diff_weights = make_layout(
        c.pd.query(dnnl_query_diff_weights_md, 0, ROLE_WEIGHTS, g.grouped),
        ROLE_WEIGHTS, g.weight_shape, g.groups)
    args = [(DNNL_ARG_SRC, plan.src.desc), (DNNL_ARG_DIFF_DST, plan.diff_dst.desc),
            (DNNL_ARG_DIFF_WEIGHTS, plan.diff_weights.desc)]
    if g.has_bias:
        plan.diff_bias = make_layout(c.pd.query(dnnl_query_diff_weights_md, 1, ROLE_BIAS),
                                     ROLE_BIAS, g.bias_dims)
        args.append((DNNL_ARG_DIFF_BIAS, plan.diff_bias.desc))
    plan.prim = make_primitive(c.pd, args)
    return plan


def backward_data_candidates(geom, str dtype, variant=None, ForwardHints hints=None,
                             bint direct_first=False):
    """Backward-data plans for ``geom`` (``variant``: see _enumerate;
    ``hints``, ``direct_first``: see forward_candidates)."""
    cdef Geometry g = Geometry.of(geom, dtype)
    if hints is None:
        hints = ForwardHints(geom, dtype)

    def make_pd(family, weights, fused, act_fused, direct):
        if direct:
            return direct_conv_pd(g, PASS_BACKWARD_DATA, family_md(g.src_dims, dtype, family),
                                  weights_md(g, weights), family_md(g.dst_dims, dtype, family),
                                  None)
        return deconv_pd(g, PASS_BACKWARD_DATA, dnnl_backward_data,
                         family_md(g.src_dims, dtype, family), weights_md(g, weights), None,
                         family_md(g.dst_dims, dtype, family), hints.deconv(), None)

    return _enumerate(make_pd, lambda c: build_backward_data(g, c),
                      _variants(False, direct=DIRECT_BACKWARD_DATA, direct_first=direct_first),
                      only=variant,
                      own=_own_candidates("backward_data", geom, dtype, False, variant))


cdef BackwardDataPlan build_backward_data(Geometry g, Candidate c):
    cdef BackwardDataPlan plan = BackwardDataPlan.__new__(BackwardDataPlan)
    cdef MemoryDesc weights
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.direct = c.direct
    if c.direct:  # a forward convolution from diff_dst to diff_src
        plan.diff_dst = make_layout(c.pd.query(dnnl_query_src_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.out_shape)
        weights = c.pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS, g.grouped)
        plan.weights = make_layout(swap_weight_axes(weights, g.grouped), ROLE_WEIGHTS,
                                   g.weight_shape, g.groups)
        plan.diff_src = make_layout(c.pd.query(dnnl_query_dst_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.data_shape)
        args = [(DNNL_ARG_SRC, plan.diff_dst.desc), (DNNL_ARG_WEIGHTS, weights),
                (DNNL_ARG_DST, plan.diff_src.desc)]
    else:
        plan.diff_dst = make_layout(c.pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.out_shape)
        plan.weights = make_layout(c.pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS,
                                              g.grouped),
                                   ROLE_WEIGHTS, g.weight_shape, g.groups)
        plan.diff_src = make_layout(c.pd.query(dnnl_query_diff_src_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.data_shape)
        args = [(DNNL_ARG_DIFF_DST, plan.diff_dst.desc), (DNNL_ARG_WEIGHTS, plan.weights.desc),
                (DNNL_ARG_DIFF_SRC, plan.diff_src.desc)]
    plan.prim = make_primitive(c.pd, args)
    return plan
