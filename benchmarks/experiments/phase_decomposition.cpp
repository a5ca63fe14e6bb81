// Sub-pixel (phase) decomposition of a 2-D transposed convolution against oneDNN 3.2's
// direct strided plans: a measurement kept for issue 22 (docs/performance.rst,
// "Phase-decomposed plans"), not part of the package.  For each layer and pass it times
// every implementation oneDNN offers for the direct deconvolution (and the convolution
// it is made of), and the s^2 stride-1 convolutions of the decomposition plus the pass
// that interleaves their quarter outputs, and checks both against a naive reference.
//
// Build (from the repository root, in the project's venv, with oneDNN's headers:
// pip install onednn-devel-cpu-gomp==2023.2.0); .ci/run builds it this way and runs
// the self-test, so that it keeps compiling against the oneDNN the package uses:
//   D=$(python -c 'import sysconfig; print(sysconfig.get_paths()["data"])')
//   g++ -O2 -std=c++17 -I$D/include -L$D/lib benchmarks/experiments/phase_decomposition.cpp
//       -o /tmp/phase -l:libdnnl.so.3 -Wl,-rpath,$D/lib -fopenmp     (one command line)
// Run:   OMP_NUM_THREADS=2 /tmp/phase [layer-index ...]   (0-4; 5 is a tiny self-test)
//        ONEDNN_MAX_CPU_ISA=AVX2 for the AVX2 kernel family; PASSES=f|d|w for some passes;
//        MINTOTAL=seconds, the least time a timing block takes (default 0.1).
//
// Weight layout of the layer: MXNet (C_in, C_out, k, k) == oneDNN deconv dims (OC, IC, k, k) in iohw.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
using dims = memory::dims;
using vf = std::vector<float>;

static engine eng(engine::kind::cpu, 0);

// Calls f(tap, out) for each tap of input pixel (ih, iw) that lands inside
// the OH x OW output: tap (kh, kw) = kh * k + kw lands on pixel out = oh * OW
// + ow, oh = ih * s + kh - p, ow = iw * s + kw - p (the naive references).
template <class F>
static void for_each_tap(int ih, int iw, int k, int s, int p, int OH, int OW, F &&f) {
    for (int kh = 0; kh < k; ++kh) {
        int oh = ih * s + kh - p;
        if (oh < 0 || oh >= OH) continue;
        for (int kw = 0; kw < k; ++kw) {
            int ow = iw * s + kw - p;
            if (ow < 0 || ow >= OW) continue;
            f(kh * k + kw, oh * OW + ow);
        }
    }
}
static stream strm(eng);

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static int g_minreps = 20;
static double g_mintotal = 0.1;
// CPU ticks used by other processes (all busy ticks minus this process's): contention detector
static long long other_ticks() {
    FILE *f = fopen("/proc/stat", "r");
    long long v[10] = {0};
    if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8) {}
    fclose(f);
    long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    f = fopen("/proc/self/stat", "r");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    char *p = strrchr(buf, ')') + 2; // field 3 onwards
    long long ut = 0, st = 0;
    int field = 3;
    for (char *tok = strtok(p, " "); tok; tok = strtok(nullptr, " "), ++field) {
        if (field == 14) ut = atoll(tok);
        if (field == 15) { st = atoll(tok); break; }
    }
    return busy - ut - st;
}
static bool g_contended = false;   // the last med() had no clean block
static int g_dirty_blocks = 0;
// min over clean blocks (>= g_minreps runs and >= g_mintotal s each) of the block medians
template <class F> static double med(F &&f) {
    for (int i = 0; i < 3; ++i) f();
    double best = 1e30, bestdirty = 1e30;
    int clean = 0;
    for (int attempt = 0; attempt < 6 && clean < 2; ++attempt) {
        std::vector<double> t;
        long long o0 = other_ticks();
        double t0 = now();
        while ((int)t.size() < g_minreps || (now() - t0 < g_mintotal && t.size() < 3000)) {
            double a = now();
            f();
            t.push_back(now() - a);
        }
        double el = now() - t0;
        long long o1 = other_ticks();
        std::sort(t.begin(), t.end());
        double m = t[t.size() / 2];
        // other processes used more than 3 ticks + 4% of the 2 cores: contended block
        if (o1 - o0 > 3 + (long long)(0.04 * el * 100 * 2)) {
            ++g_dirty_blocks;
            bestdirty = std::min(bestdirty, m);
            usleep(300000);
            continue;
        }
        ++clean;
        best = std::min(best, m);
    }
    g_contended = clean == 0;
    return clean ? best : bestdirty;
}

static std::string fmt(const memory::desc &md) {
    if (md.get_format_kind() != memory::format_kind::blocked) return "nonblk";
    int nd = md.get_ndims();
    auto st = md.get_strides();
    auto pd = md.get_padded_dims();
    int nb = md.get_inner_nblks();
    auto ib = md.get_inner_blks();
    auto ii = md.get_inner_idxs();
    std::vector<int> order(nd);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return st[a] > st[b]; });
    std::string s;
    for (int k : order) {
        bool blocked = false;
        for (int j = 0; j < nb; ++j) blocked |= ii[j] == k;
        s += char((blocked ? 'A' : 'a') + k);
    }
    for (int j = 0; j < nb; ++j) s += std::to_string(ib[j]) + char('a' + ii[j]);
    return s;
}
static const char *tname(tag t) {
    switch (t) {
    case tag::any: return "any";
    case tag::nchw: return "nchw";
    case tag::nhwc: return "nhwc";
    case tag::nChw16c: return "nChw16c";
    case tag::nChw8c: return "nChw8c";
    default: return "?";
    }
}
// the plain/blocked activation tag a 4-D md is in (tag::undef if none of ours)
static tag act_tag(const memory::desc &md) {
    for (tag t : {tag::nchw, tag::nhwc, tag::nChw16c, tag::nChw8c})
        if (memory::desc(md.get_dims(), dt::f32, t) == md) return t;
    return tag::undef;
}

static memory mk(const memory::desc &md) { return memory(md, eng); }
static void load(memory &dst, const vf &v, const dims &d, tag t) {
    memory src({d, dt::f32, t}, eng, const_cast<float *>(v.data()));
    reorder(src, dst).execute(strm, src, dst);
    strm.wait();
}
static vf store(const memory &m, tag t) {
    auto d = m.get_desc().get_dims();
    size_t n = 1;
    for (auto x : d) n *= x;
    vf v(n);
    memory dst({d, dt::f32, t}, eng, v.data());
    reorder(m, dst).execute(strm, const_cast<memory &>(m), dst);
    strm.wait();
    return v;
}
static double maxdiff(const vf &a, const vf &b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (double)std::fabs(a[i] - b[i]));
    return m;
}
static double maxabs(const vf &a) {
    double m = 0;
    for (float x : a) m = std::max(m, (double)std::fabs(x));
    return m;
}

struct Layer {
    const char *name;
    int N, C, H, W, OC, k, s, p;
};

// one spatial dim of one output phase r (oh = s*m + r)
struct Ph1 {
    int r, t, K, padl, padr, M;
    std::vector<int> taps; // forward conv weight position a -> full kernel index (flipped)
    int bpadl, bpadr;      // the transposed (bwd-data) stride-1 conv of this phase
};
static Ph1 phase1(int in, int k, int s, int p, int out, int r) {
    Ph1 q;
    q.r = r;
    q.t = ((r + p) % s + s) % s;
    int c = (r + p - q.t) / s;
    q.K = (k - q.t + s - 1) / s;
    q.padl = q.K - 1 - c;
    q.M = (out - r + s - 1) / s;
    q.padr = q.M - in - q.padl + q.K - 1;
    for (int a = 0; a < q.K; ++a) q.taps.push_back(q.t + s * (q.K - 1 - a));
    q.bpadl = q.K - 1 - q.padl;
    q.bpadr = in - q.M - q.bpadl + q.K - 1;
    return q;
}

// strided view of phase (rh, rw) of a full (N, C, s*M, s*M') tensor, 6-D (N,C,M,1,M',1)
static memory::desc phase_view6(const memory::desc &full, int s, int rh, int rw) {
    auto d = full.get_dims();
    auto r6 = full.reshape({d[0], d[1], d[2] / s, s, d[3] / s, s});
    return r6.submemory_desc({d[0], d[1], d[2] / s, 1, d[3] / s, 1}, {0, 0, 0, rh, 0, rw});
}
static memory::desc as6(const memory::desc &q) {
    auto d = q.get_dims();
    return q.reshape({d[0], d[1], d[2], 1, d[3], 1});
}

static bool is_ref(const std::string &impl) { return impl.find("ref") != std::string::npos || impl.find("sse41") != std::string::npos; }

static double gflops(double macs, double sec) { return 2 * macs / sec / 1e9; }

static void line(const char *pass, const char *variant, const char *tg, const std::string &impl,
                 const std::string &fmts, double sec, double macs, double err, double tol) {
    if (sec > 0)
        printf("  %-6s %-22s %-8s %-48s %-34s %9.3f ms%s %7.1f GF/s  err %.2e %s\n", pass, variant, tg,
               impl.c_str(), fmts.c_str(), sec * 1e3, g_contended ? "*" : " ", gflops(macs, sec), err, err <= tol ? "ok" : "WRONG");
    else
        printf("  %-6s %-22s %-8s %-48s %-34s   (not timed)          err %.2e %s\n", pass, variant, tg,
               impl.c_str(), fmts.c_str(), err, err <= tol ? "ok" : "WRONG");
    fflush(stdout);
}

struct Best {
    double t = 1e30;
    std::string desc;
    void upd(double tt, const std::string &d) {
        if (tt < t) { t = tt; desc = d; }
    }
};

static void run_layer(const Layer &L) {
    const int N = L.N, C = L.C, H = L.H, W = L.W, OC = L.OC, k = L.k, s = L.s, p = L.p;
    const int OH = s * (H - 1) + k - 2 * p, OW = s * (W - 1) + k - 2 * p;
    const double macs = (double)N * C * H * W * OC * k * k;
    printf("\n=== %s: %dx%dx%dx%d -> %d k%d s%d p%d (out %dx%d), %.3g MACs ===\n", L.name, N, C, H, W, OC, k,
           s, p, OH, OW, macs);
    if (OH % s || OW % s) { printf("  output not a multiple of s: skipped\n"); return; }
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.f, 1.f);
    vf X((size_t)N * C * H * W), Wm((size_t)C * OC * k * k), B(OC), dY((size_t)N * OC * OH * OW);
    for (auto *v : {&X, &Wm, &B, &dY})
        for (auto &x : *v) x = nd(rng);

    // ---- naive references
    double t0 = now();
    vf Yref((size_t)N * OC * OH * OW, 0.f), dXref((size_t)N * C * H * W, 0.f), dWref(Wm.size(), 0.f), dBref(OC, 0.f);
#pragma omp parallel for collapse(2)
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            float *y = &Yref[((size_t)n * OC + o) * OH * OW];
            for (int i = 0; i < C; ++i) {
                const float *x = &X[((size_t)n * C + i) * H * W];
                const float *w = &Wm[((size_t)i * OC + o) * k * k];
                for (int ih = 0; ih < H; ++ih)
                    for (int iw = 0; iw < W; ++iw) {
                        float xv = x[ih * W + iw];
                        for_each_tap(ih, iw, k, s, p, OH, OW,
                                     [&](int tap, int out) { y[out] += xv * w[tap]; });
                    }
            }
        }
    vf YrefNB = Yref; // without bias
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o)
            for (int j = 0; j < OH * OW; ++j) Yref[((size_t)n * OC + o) * OH * OW + j] += B[o];
#pragma omp parallel for collapse(2)
    for (int n = 0; n < N; ++n)
        for (int i = 0; i < C; ++i) {
            float *dx = &dXref[((size_t)n * C + i) * H * W];
            for (int o = 0; o < OC; ++o) {
                const float *dy = &dY[((size_t)n * OC + o) * OH * OW];
                const float *w = &Wm[((size_t)i * OC + o) * k * k];
                for (int ih = 0; ih < H; ++ih)
                    for (int iw = 0; iw < W; ++iw) {
                        float acc = 0;
                        for_each_tap(ih, iw, k, s, p, OH, OW,
                                     [&](int tap, int out) { acc += dy[out] * w[tap]; });
                        dx[ih * W + iw] += acc;
                    }
            }
        }
#pragma omp parallel for collapse(2)
    for (int i = 0; i < C; ++i)
        for (int o = 0; o < OC; ++o) {
            float *dw = &dWref[((size_t)i * OC + o) * k * k];
            for (int n = 0; n < N; ++n) {
                const float *x = &X[((size_t)n * C + i) * H * W];
                const float *dy = &dY[((size_t)n * OC + o) * OH * OW];
                for (int ih = 0; ih < H; ++ih)
                    for (int iw = 0; iw < W; ++iw) {
                        float xv = x[ih * W + iw];
                        for_each_tap(ih, iw, k, s, p, OH, OW,
                                     [&](int tap, int out) { dw[tap] += xv * dy[out]; });
                    }
            }
        }
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o)
            for (int j = 0; j < OH * OW; ++j) dBref[o] += dY[((size_t)n * OC + o) * OH * OW + j];
    printf("  (naive references: %.1f s)\n", now() - t0);
    const double tolY = 1e-4 * maxabs(Yref) + 1e-4, tolX = 1e-4 * maxabs(dXref) + 1e-4,
                 tolW = 1e-4 * maxabs(dWref) + 1e-4;

    // ---- phases
    std::vector<Ph1> PH, PW;
    for (int r = 0; r < s; ++r) PH.push_back(phase1(H, k, s, p, OH, r));
    for (int r = 0; r < s; ++r) PW.push_back(phase1(W, k, s, p, OW, r));
    for (auto &q : PH)
        printf("  phase r=%d: t=%d K=%d pad %d/%d M=%d taps(fwd,flipped)=%d,%d  bwd-data pad %d/%d\n", q.r, q.t,
               q.K, q.padl, q.padr, q.M, q.taps[0], q.K > 1 ? q.taps[1] : -1, q.bpadl, q.bpadr);
    struct Phase {
        Ph1 h, w;
        vf fw, bw; // fwd conv weights (OC,C,Kh,Kw) oihw; bwd-data conv weights (C,OC,Kh,Kw) oihw
        vf Yq, Yq_nb, dYq;
    };
    std::vector<Phase> P;
    for (int rh = 0; rh < s; ++rh)
        for (int rw = 0; rw < s; ++rw) {
            Phase ph{PH[rh], PW[rw]};
            int Kh = ph.h.K, Kw = ph.w.K, Mh = ph.h.M, Mw = ph.w.M;
            ph.fw.resize((size_t)OC * C * Kh * Kw);
            ph.bw.resize((size_t)C * OC * Kh * Kw);
            for (int o = 0; o < OC; ++o)
                for (int i = 0; i < C; ++i)
                    for (int a = 0; a < Kh; ++a)
                        for (int b = 0; b < Kw; ++b) {
                            ph.fw[(((size_t)o * C + i) * Kh + a) * Kw + b] =
                                    Wm[(((size_t)i * OC + o) * k + ph.h.taps[a]) * k + ph.w.taps[b]];
                            // bwd-data: unflipped taps t + s*b
                            ph.bw[(((size_t)i * OC + o) * Kh + a) * Kw + b] =
                                    Wm[(((size_t)i * OC + o) * k + ph.h.t + s * a) * k + ph.w.t + s * b];
                        }
            ph.Yq.resize((size_t)N * OC * Mh * Mw);
            ph.Yq_nb.resize(ph.Yq.size());
            ph.dYq.resize(ph.Yq.size());
            for (int n = 0; n < N; ++n)
                for (int o = 0; o < OC; ++o)
                    for (int a = 0; a < Mh; ++a)
                        for (int b = 0; b < Mw; ++b) {
                            size_t qi = (((size_t)n * OC + o) * Mh + a) * Mw + b;
                            size_t fi = (((size_t)n * OC + o) * OH + s * a + rh) * OW + s * b + rw;
                            ph.Yq[qi] = Yref[fi];
                            ph.Yq_nb[qi] = YrefNB[fi];
                            ph.dYq[qi] = dY[fi];
                        }
            P.push_back(std::move(ph));
        }
    const int NP = (int)P.size();

    dims xd = {N, C, H, W}, yd = {N, OC, OH, OW}, wd = {OC, C, k, k}, bd = {OC}, st = {s, s}, pl = {p, p},
         pr = {p, p};
    std::vector<tag> tags = {tag::any, tag::nchw, tag::nhwc, get_effective_cpu_isa() == cpu_isa::avx2 ? tag::nChw8c : tag::nChw16c};
    memory::desc wany({OC, C, k, k}, dt::f32, tag::any);

    // ================= FORWARD =================
    for (prop_kind prop : {prop_kind::forward_inference, prop_kind::forward_training}) {
        if (!strchr(getenv("PASSES") ? getenv("PASSES") : "fdw", 'f')) break;
        const char *pn = prop == prop_kind::forward_inference ? "fwdI" : "fwdT";
        Best bestD, bestP, bestC;
        for (tag tg : tags) {
            // ---- direct deconvolution_forward, every implementation
            try {
                deconvolution_forward::primitive_desc pd(eng, prop, algorithm::deconvolution_direct,
                                                         memory::desc(xd, dt::f32, tg), wany,
                                                         memory::desc(bd, dt::f32, tag::x),
                                                         memory::desc(yd, dt::f32, tg), st, pl, pr);
                do {
                    std::string impl = pd.impl_info_str();
                    auto smd = pd.src_desc(), wmd = pd.weights_desc(), dmd = pd.dst_desc();
                    memory ms = mk(smd), mw = mk(wmd), mb = mk(pd.bias_desc()), md = mk(dmd);
                    load(ms, X, xd, tag::nchw);
                    load(mw, Wm, wd, tag::iohw);
                    load(mb, B, bd, tag::x);
                    deconvolution_forward prim(pd);
                    std::unordered_map<int, memory> args = {
                            {DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
                    prim.execute(strm, args);
                    strm.wait();
                    double err = maxdiff(store(md, tag::nchw), Yref);
                    double t = 0;
                    if (!is_ref(impl)) {
                        t = med([&] { prim.execute(strm, args); strm.wait(); });
                        if (err <= tolY) bestD.upd(t, std::string("deconv ") + tname(tg) + " " + impl);
                    }
                    // weight prep per training step: user iohw -> pd weights
                    std::string f = fmt(smd) + "/" + fmt(wmd) + "/" + fmt(dmd);
                    line(pn, "direct deconv", tname(tg), impl, f, t, macs, err, tolY);
                } while (pd.next_impl());
            } catch (dnnl::error &e) {
                printf("  %-6s direct deconv %-8s : %s\n", pn, tname(tg), e.what());
            }
            // ---- convolution_backward_data as the forward (no bias; bias would be one more pass)
            if (prop == prop_kind::forward_inference) try {
                    memory::desc cw({C, OC, k, k}, dt::f32, tag::any);
                    convolution_forward::primitive_desc hint(
                            eng, prop_kind::forward_training, algorithm::convolution_direct,
                            memory::desc(yd, dt::f32, tg), cw, memory::desc(xd, dt::f32, tg), st, pl, pr);
                    convolution_backward_data::primitive_desc pd(eng, algorithm::convolution_direct,
                                                                 memory::desc(yd, dt::f32, tg), cw,
                                                                 memory::desc(xd, dt::f32, tg), st, pl, pr, hint);
                    do {
                        std::string impl = pd.impl_info_str();
                        memory ms = mk(pd.diff_dst_desc()), mw = mk(pd.weights_desc()), md = mk(pd.diff_src_desc());
                        load(ms, X, xd, tag::nchw);
                        load(mw, Wm, {C, OC, k, k}, tag::oihw);
                        convolution_backward_data prim(pd);
                        std::unordered_map<int, memory> args = {
                                {DNNL_ARG_DIFF_DST, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, md}};
                        prim.execute(strm, args);
                        strm.wait();
                        double err = maxdiff(store(md, tag::nchw), YrefNB);
                        double t = 0;
                        if (!is_ref(impl)) {
                            t = med([&] { prim.execute(strm, args); strm.wait(); });
                            if (err <= tolY) bestC.upd(t, std::string("conv_bwd_data(nobias) ") + tname(tg) + " " + impl);
                        }
                        std::string f = fmt(pd.diff_dst_desc()) + "/" + fmt(pd.weights_desc()) + "/" +
                                        fmt(pd.diff_src_desc());
                        line(pn, "conv_bwd_data (nobias)", tname(tg), impl, f, t, macs, err, tolY);
                    } while (pd.next_impl());
                } catch (dnnl::error &e) {
                    printf("  %-6s conv_bwd_data %-8s : %s\n", pn, tname(tg), e.what());
                }

            // ---- decomposition: s*s stride-1 convolution_forward, best correct impl per phase
            struct PB {
                bool ok = false;
                double t = 1e30, err = 0;
                std::string impl, f;
                convolution_forward prim;
                memory ms, mw, mb, md;
            };
            std::vector<PB> pb(NP);
            // per phase, the best correct candidate per (src layout, dst layout) signature
            std::vector<std::map<std::string, PB>> bysig(NP);
            for (int q = 0; q < NP; ++q) {
                auto &ph = P[q];
                dims qd = {N, OC, ph.h.M, ph.w.M}, cwd = {OC, C, ph.h.K, ph.w.K};
                try {
                    convolution_forward::primitive_desc pd(
                            eng, prop, algorithm::convolution_direct, memory::desc(xd, dt::f32, tg),
                            memory::desc(cwd, dt::f32, tag::any), memory::desc(bd, dt::f32, tag::x),
                            memory::desc(qd, dt::f32, tg), {1, 1}, {ph.h.padl, ph.w.padl}, {ph.h.padr, ph.w.padr});
                    do {
                        std::string impl = pd.impl_info_str();
                        if (is_ref(impl)) {
                            printf("  %-6s phase%d %-8s %s (skipped)\n", pn, q, tname(tg), impl.c_str());
                            continue;
                        }
                        memory ms = mk(pd.src_desc()), mw = mk(pd.weights_desc()), mb = mk(pd.bias_desc()),
                               md = mk(pd.dst_desc());
                        load(ms, X, xd, tag::nchw);
                        load(mw, ph.fw, cwd, tag::oihw);
                        load(mb, B, bd, tag::x);
                        convolution_forward prim(pd);
                        std::unordered_map<int, memory> args = {
                                {DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
                        prim.execute(strm, args);
                        strm.wait();
                        double err = maxdiff(store(md, tag::nchw), ph.Yq);
                        double t = med([&] { prim.execute(strm, args); strm.wait(); });
                        std::string f = fmt(pd.src_desc()) + "/" + fmt(pd.weights_desc()) + "/" + fmt(pd.dst_desc());
                        char v[32];
                        snprintf(v, sizeof v, "phase%d (k%dx%d)", q, ph.h.K, ph.w.K);
                        line(pn, v, tname(tg), impl, f, t, macs / NP, err, tolY);
                        std::string sig = fmt(pd.src_desc()) + "->" + fmt(pd.dst_desc());
                        auto &slot = bysig[q][sig];
                        if (err <= tolY && t < slot.t) {
                            slot.ok = true;
                            slot.t = t;
                            slot.err = err;
                            slot.impl = impl;
                            slot.f = f;
                            slot.prim = prim;
                            slot.ms = ms;
                            slot.mw = mw;
                            slot.mb = mb;
                            slot.md = md;
                        }
                    } while (pd.next_impl());
                } catch (dnnl::error &e) {
                    printf("  %-6s phase%d %-8s : %s\n", pn, q, tname(tg), e.what());
                }
            }
            {   // the signature whose phases' sum is smallest (all phases read the same src layout)
                double bs = 1e30;
                std::string bsig;
                for (auto &kv : bysig[0]) {
                    double sum = 0;
                    bool ok = true;
                    for (int q = 0; q < NP; ++q) {
                        auto it = bysig[q].find(kv.first);
                        if (it == bysig[q].end() || !it->second.ok) { ok = false; break; }
                        sum += it->second.t;
                    }
                    if (ok) printf("  %-6s decomp %-8s signature %-24s sum of phase medians %.3f ms\n", pn, tname(tg), kv.first.c_str(), sum * 1e3);
                    if (ok && sum < bs) { bs = sum; bsig = kv.first; }
                }
                if (!bsig.empty())
                    for (int q = 0; q < NP; ++q) pb[q] = bysig[q][bsig];
            }
            bool all = true;
            for (auto &b : pb) all &= b.ok;
            if (!all) { printf("  %-6s decomposed %-8s: some phase has no correct non-ref impl\n", pn, tname(tg)); continue; }
            double tsum = 0;
            for (auto &b : pb) tsum += b.t;
            // interleave into a full dst in the quarters' layout
            tag ft = act_tag(pb[0].md.get_desc());
            bool same_src = true;
            for (auto &b : pb) same_src &= b.ms.get_desc() == pb[0].ms.get_desc();
            if (ft == tag::undef) { printf("  %-6s decomposed %-8s: quarter layout %s not interleavable here\n", pn, tname(tg), fmt(pb[0].md.get_desc()).c_str()); continue; }
            memory full = mk(memory::desc(yd, dt::f32, ft));
            std::vector<reorder> ro;
            std::vector<memory> rs, rd;
            std::string roimpl;
            try {
                for (int q = 0; q < NP; ++q) {
                    auto vmd = phase_view6(full.get_desc(), s, P[q].h.r, P[q].w.r);
                    memory a(as6(pb[q].md.get_desc()), eng, pb[q].md.get_data_handle());
                    memory b(vmd, eng, full.get_data_handle());
                    reorder::primitive_desc rpd(eng, a.get_desc(), eng, b.get_desc());
                    roimpl = rpd.impl_info_str();
                    ro.emplace_back(rpd);
                    rs.push_back(a);
                    rd.push_back(b);
                }
            } catch (dnnl::error &e) {
                printf("  %-6s interleave %-8s: %s\n", pn, tname(tg), e.what());
                continue;
            }
            auto interleave = [&] {
                for (int q = 0; q < NP; ++q) ro[q].execute(strm, rs[q], rd[q]);
                strm.wait();
            };
            auto pipeline = [&] {
                for (int q = 0; q < NP; ++q)
                    pb[q].prim.execute(strm, {{DNNL_ARG_SRC, pb[q].ms}, {DNNL_ARG_WEIGHTS, pb[q].mw},
                                              {DNNL_ARG_BIAS, pb[q].mb}, {DNNL_ARG_DST, pb[q].md}});
                for (int q = 0; q < NP; ++q) ro[q].execute(strm, rs[q], rd[q]);
                strm.wait();
            };
            pipeline();
            vf Yd = store(full, tag::nchw);
            double err = maxdiff(Yd, Yref);
            double ti = med(interleave), te = med(pipeline);
            std::string impls;
            for (auto &b : pb) impls += (impls.empty() ? "" : " | ") + b.impl;
            printf("  %-6s DECOMP %-8s sum-of-phase-medians %.3f ms + interleave %.3f ms (%s, into %s) = %.3f; "
                   "end-to-end median %.3f ms (%.1f GF/s); err vs ref %.2e %s; src layouts %s\n"
                   "         phase impls: %s\n",
                   pn, tname(tg), tsum * 1e3, ti * 1e3, roimpl.c_str(), tname(ft), (tsum + ti) * 1e3, te * 1e3,
                   gflops(macs, te), err, err <= tolY ? "ok" : "WRONG", same_src ? "identical" : "DIFFER", impls.c_str());
            fflush(stdout);
            if (err <= tolY) {
                bestP.upd(te, std::string("decomp ") + tname(tg) + " e2e [" + impls + "] conv-sum " +
                                      std::to_string(tsum * 1e3) + " ms + interleave " + std::to_string(ti * 1e3) + " ms");
            }
            // ---- try: each phase conv writing straight into the strided view of the full dst
            if (tg != tag::any) {
                std::vector<convolution_forward> vp;
                std::vector<memory> vd;
                std::string vimpl;
                bool ok = true;
                memory full2 = mk(memory::desc(yd, dt::f32, ft));
                for (int q = 0; q < NP && ok; ++q) {
                    auto &ph = P[q];
                    try {
                        memory::desc v6 = phase_view6(full2.get_desc(), s, ph.h.r, ph.w.r);
                        memory::desc v4 = v6.reshape({N, OC, ph.h.M, ph.w.M});
                        convolution_forward::primitive_desc pd(
                                eng, prop, algorithm::convolution_direct, pb[q].ms.get_desc(), pb[q].mw.get_desc(),
                                pb[q].mb.get_desc(), v4, {1, 1}, {ph.h.padl, ph.w.padl}, {ph.h.padr, ph.w.padr});
                        vimpl = pd.impl_info_str();
                        if (is_ref(vimpl)) ok = false;
                        vp.emplace_back(pd);
                        vd.emplace_back(v4, eng, full2.get_data_handle());
                    } catch (dnnl::error &e) {
                        vimpl = e.what();
                        ok = false;
                    }
                }
                if (!ok) {
                    printf("  %-6s conv-into-strided-view %-8s: %s\n", pn, tname(tg), vimpl.c_str());
                } else {
                    auto pv = [&] {
                        for (int q = 0; q < NP; ++q)
                            vp[q].execute(strm, {{DNNL_ARG_SRC, pb[q].ms}, {DNNL_ARG_WEIGHTS, pb[q].mw},
                                                 {DNNL_ARG_BIAS, pb[q].mb}, {DNNL_ARG_DST, vd[q]}});
                        strm.wait();
                    };
                    pv();
                    double e2 = maxdiff(store(full2, tag::nchw), Yref);
                    double tv = med(pv);
                    printf("  %-6s conv-into-strided-view %-8s: %s  %.3f ms (%.1f GF/s) err %.2e %s\n", pn, tname(tg),
                           vimpl.c_str(), tv * 1e3, gflops(macs, tv), e2, e2 <= tolY ? "ok" : "WRONG");
                    if (e2 <= tolY) bestP.upd(tv, std::string("decomp conv-into-view ") + tname(tg) + " " + vimpl);
                }
            }
            // ---- weight prep per training step (user iohw -> 4 sub-kernels in the phase convs' layouts)
            if (prop == prop_kind::forward_training) {
                std::vector<memory> plainq;
                std::vector<reorder> wro;
                for (int q = 0; q < NP; ++q) {
                    plainq.push_back(mk(memory::desc({OC, C, P[q].h.K, P[q].w.K}, dt::f32, tag::oihw)));
                    wro.emplace_back(plainq[q], pb[q].mw);
                }
                auto prep = [&] {
                    for (int q = 0; q < NP; ++q) {
                        auto &ph = P[q];
                        float *dst = (float *)plainq[q].get_data_handle();
                        int Kh = ph.h.K, Kw = ph.w.K;
#pragma omp parallel for collapse(2)
                        for (int o = 0; o < OC; ++o)
                            for (int i = 0; i < C; ++i)
                                for (int a = 0; a < Kh; ++a)
                                    for (int b = 0; b < Kw; ++b)
                                        dst[(((size_t)o * C + i) * Kh + a) * Kw + b] =
                                                Wm[(((size_t)i * OC + o) * k + ph.h.taps[a]) * k + ph.w.taps[b]];
                        wro[q].execute(strm, plainq[q], pb[q].mw);
                    }
                    strm.wait();
                };
                printf("  %-6s decomp %-8s training weight prep (extract+reorder x%d): %.3f ms\n", pn, tname(tg), NP,
                       med(prep) * 1e3);
            }
        }
        printf("  >>> %s BEST direct-family: %.3f ms (%.1f GF/s) %s\n", pn, bestD.t * 1e3, gflops(macs, bestD.t),
               bestD.desc.c_str());
        printf("  >>> %s BEST decomposed:    %.3f ms (%.1f GF/s) %s\n", pn, bestP.t * 1e3, gflops(macs, bestP.t),
               bestP.desc.c_str());
        if (bestC.t < 1e29)
            printf("  >>> %s BEST conv_bwd_data (no bias; bias pass extra): %.3f ms (%.1f GF/s) %s\n", pn, bestC.t * 1e3,
                   gflops(macs, bestC.t), bestC.desc.c_str());
        printf("  >>> %s ratio direct/decomposed = %.3f\n", pn, bestD.t / bestP.t);
        fflush(stdout);
    }

    const char *passes = getenv("PASSES") ? getenv("PASSES") : "fdw";
    // ================= BACKWARD DATA =================
    if (strchr(passes, 'd')) {
        const char *pn = "bwdD";
        Best bestD, bestP;
        for (tag tg : tags) {
            try {
                deconvolution_forward::primitive_desc hint(eng, prop_kind::forward_training,
                                                           algorithm::deconvolution_direct,
                                                           memory::desc(xd, dt::f32, tg), wany,
                                                           memory::desc(bd, dt::f32, tag::x),
                                                           memory::desc(yd, dt::f32, tg), st, pl, pr);
                deconvolution_backward_data::primitive_desc pd(eng, algorithm::deconvolution_direct,
                                                               memory::desc(xd, dt::f32, tg), wany,
                                                               memory::desc(yd, dt::f32, tg), st, pl, pr, hint);
                do {
                    std::string impl = pd.impl_info_str();
                    memory mdy = mk(pd.diff_dst_desc()), mw = mk(pd.weights_desc()), mdx = mk(pd.diff_src_desc());
                    load(mdy, dY, yd, tag::nchw);
                    load(mw, Wm, wd, tag::iohw);
                    deconvolution_backward_data prim(pd);
                    std::unordered_map<int, memory> args = {
                            {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx}};
                    prim.execute(strm, args);
                    strm.wait();
                    double err = maxdiff(store(mdx, tag::nchw), dXref);
                    double t = 0;
                    if (!is_ref(impl)) {
                        t = med([&] { prim.execute(strm, args); strm.wait(); });
                        if (err <= tolX) bestD.upd(t, std::string("deconv_bwd_data ") + tname(tg) + " " + impl);
                    }
                    line(pn, "deconv_bwd_data", tname(tg), impl,
                         fmt(pd.diff_dst_desc()) + "/" + fmt(pd.weights_desc()) + "/" + fmt(pd.diff_src_desc()), t,
                         macs, err, tolX);
                } while (pd.next_impl());
            } catch (dnnl::error &e) {
                printf("  %-6s deconv_bwd_data %-8s : %s\n", pn, tname(tg), e.what());
            }
            try { // strided convolution_forward of dY
                memory::desc cw({C, OC, k, k}, dt::f32, tag::any);
                convolution_forward::primitive_desc pd(eng, prop_kind::forward_training, algorithm::convolution_direct,
                                                       memory::desc(yd, dt::f32, tg), cw,
                                                       memory::desc(xd, dt::f32, tg), st, pl, pr);
                do {
                    std::string impl = pd.impl_info_str();
                    memory mdy = mk(pd.src_desc()), mw = mk(pd.weights_desc()), mdx = mk(pd.dst_desc());
                    load(mdy, dY, yd, tag::nchw);
                    load(mw, Wm, {C, OC, k, k}, tag::oihw);
                    convolution_forward prim(pd);
                    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mdx}};
                    prim.execute(strm, args);
                    strm.wait();
                    double err = maxdiff(store(mdx, tag::nchw), dXref);
                    double t = 0;
                    if (!is_ref(impl)) {
                        t = med([&] { prim.execute(strm, args); strm.wait(); });
                        if (err <= tolX) bestD.upd(t, std::string("conv_fwd_s") + std::to_string(s) + " " + tname(tg) + " " + impl);
                    }
                    line(pn, "conv_fwd stride-s", tname(tg), impl,
                         fmt(pd.src_desc()) + "/" + fmt(pd.weights_desc()) + "/" + fmt(pd.dst_desc()), t, macs, err, tolX);
                } while (pd.next_impl());
            } catch (dnnl::error &e) {
                printf("  %-6s conv_fwd stride-s %-8s : %s\n", pn, tname(tg), e.what());
            }
            // decomposition: s*s stride-1 convolution_forward over the dY quarters, summed (post-op sum)
            try {
                std::vector<convolution_forward> cp;
                std::vector<memory> qs, qw;
                memory mdx;
                std::string impls;
                double tsum = 0;
                for (int q = 0; q < NP; ++q) {
                    auto &ph = P[q];
                    dims qd = {N, OC, ph.h.M, ph.w.M}, cwd = {C, OC, ph.h.K, ph.w.K};
                    primitive_attr attr;
                    if (q > 0) {
                        post_ops po;
                        po.append_sum(1.f);
                        attr.set_post_ops(po);
                    }
                    memory::desc dxmd = q == 0 ? memory::desc(xd, dt::f32, tg) : mdx.get_desc();
                    memory::desc qmd = q == 0 ? memory::desc(qd, dt::f32, tg) : qs[0].get_desc();
                    convolution_forward::primitive_desc pd(eng, prop_kind::forward_training,
                                                           algorithm::convolution_direct, qmd,
                                                           memory::desc(cwd, dt::f32, tag::any), dxmd, {1, 1},
                                                           {ph.h.bpadl, ph.w.bpadl}, {ph.h.bpadr, ph.w.bpadr}, attr);
                    // best non-ref impl of this phase
                    double bt = 1e30;
                    convolution_forward bp;
                    memory bs, bw;
                    std::string bi;
                    do {
                        std::string impl = pd.impl_info_str();
                        if (is_ref(impl)) continue;
                        if (q > 0 && !(pd.dst_desc() == mdx.get_desc() && pd.src_desc() == qs[0].get_desc())) continue;
                        memory ms = mk(pd.src_desc()), mw = mk(pd.weights_desc());
                        memory md = q == 0 ? mk(pd.dst_desc()) : mdx;
                        load(ms, ph.dYq, qd, tag::nchw);
                        load(mw, ph.bw, cwd, tag::oihw);
                        convolution_forward prim(pd);
                        double t = med([&] {
                            prim.execute(strm, {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}});
                            strm.wait();
                        });
                        char v[40];
                        snprintf(v, sizeof v, "phase%d%s", q, q ? " (+sum)" : "");
                        line(pn, v, tname(tg), impl,
                             fmt(pd.src_desc()) + "/" + fmt(pd.weights_desc()) + "/" + fmt(pd.dst_desc()), t, macs / NP,
                             0, 1);
                        if (t < bt) {
                            bt = t; bp = prim; bs = ms; bw = mw; bi = impl;
                            if (q == 0) mdx = md;
                        }
                    } while (pd.next_impl());
                    if (bt > 1e29) throw dnnl::error(dnnl_unimplemented, "no non-ref impl for a phase");
                    cp.push_back(bp); qs.push_back(bs); qw.push_back(bw);
                    tsum += bt;
                    impls += (impls.empty() ? "" : " | ") + bi;
                }
                // de-interleave dY (full, in the quarters' layout) into the quarters
                tag ft = act_tag(qs[0].get_desc());
                std::string roimpl = "n/a";
                double ti = 0;
                std::vector<reorder> ro;
                std::vector<memory> rs, rd;
                memory full;
                if (ft != tag::undef) {
                    full = mk(memory::desc(yd, dt::f32, ft));
                    load(full, dY, yd, tag::nchw);
                    for (int q = 0; q < NP; ++q) {
                        memory a(phase_view6(full.get_desc(), s, P[q].h.r, P[q].w.r), eng, full.get_data_handle());
                        memory b(as6(qs[q].get_desc()), eng, qs[q].get_data_handle());
                        reorder::primitive_desc rpd(eng, a.get_desc(), eng, b.get_desc());
                        roimpl = rpd.impl_info_str();
                        ro.emplace_back(rpd); rs.push_back(a); rd.push_back(b);
                    }
                }
                auto pipeline = [&] {
                    for (size_t q = 0; q < ro.size(); ++q) ro[q].execute(strm, rs[q], rd[q]);
                    for (int q = 0; q < NP; ++q)
                        cp[q].execute(strm, {{DNNL_ARG_SRC, qs[q]}, {DNNL_ARG_WEIGHTS, qw[q]}, {DNNL_ARG_DST, mdx}});
                    strm.wait();
                };
                pipeline();
                double err = maxdiff(store(mdx, tag::nchw), dXref);
                if (getenv("DEBUGD")) {
                    for (size_t q = 0; q < ro.size(); ++q) ro[q].execute(strm, rs[q], rd[q]);
                    strm.wait();
                    for (int q = 0; q < NP; ++q) {
                        printf("   dbg q%d quarter err %.3g\n", q, maxdiff(store(qs[q], tag::nchw), P[q].dYq));
                        cp[q].execute(strm, {{DNNL_ARG_SRC, qs[q]}, {DNNL_ARG_WEIGHTS, qw[q]}, {DNNL_ARG_DST, mdx}});
                        strm.wait();
                        auto v = store(mdx, tag::nchw);
                        printf("   dbg after q%d maxabs %.3g\n", q, maxabs(v));
                    }
                }
                if (!ro.empty()) ti = med([&] { for (size_t q = 0; q < ro.size(); ++q) ro[q].execute(strm, rs[q], rd[q]); strm.wait(); });
                double te = med(pipeline);
                printf("  %-6s DECOMP %-8s sum-of-phase-medians %.3f ms + de-interleave %.3f ms (%s) = %.3f; end-to-end "
                       "%.3f ms (%.1f GF/s); err %.2e %s\n         phase impls: %s\n",
                       pn, tname(tg), tsum * 1e3, ti * 1e3, roimpl.c_str(), (tsum + ti) * 1e3, te * 1e3,
                       gflops(macs, te), err, err <= tolX ? "ok" : "WRONG", impls.c_str());
                if (err <= tolX && !ro.empty()) bestP.upd(te, std::string("decomp ") + tname(tg) + " [" + impls + "]");
            } catch (dnnl::error &e) {
                printf("  %-6s DECOMP %-8s : %s\n", pn, tname(tg), e.what());
            }
        }
        printf("  >>> %s BEST direct-family: %.3f ms (%.1f GF/s) %s\n", pn, bestD.t * 1e3, gflops(macs, bestD.t), bestD.desc.c_str());
        printf("  >>> %s BEST decomposed:    %.3f ms (%.1f GF/s) %s\n", pn, bestP.t * 1e3, gflops(macs, bestP.t), bestP.desc.c_str());
        printf("  >>> %s ratio direct/decomposed = %.3f\n", pn, bestD.t / bestP.t);
        fflush(stdout);
    }

    // ================= BACKWARD WEIGHTS =================
    if (strchr(passes, 'w')) {
        const char *pn = "bwdW";
        Best bestD, bestP;
        memory userW = mk(memory::desc(wd, dt::f32, tag::iohw)); // MXNet layout
        for (tag tg : tags) {
            try {
                deconvolution_forward::primitive_desc hint(eng, prop_kind::forward_training,
                                                           algorithm::deconvolution_direct,
                                                           memory::desc(xd, dt::f32, tg), wany,
                                                           memory::desc(bd, dt::f32, tag::x),
                                                           memory::desc(yd, dt::f32, tg), st, pl, pr);
                deconvolution_backward_weights::primitive_desc pd(eng, algorithm::deconvolution_direct,
                                                                  memory::desc(xd, dt::f32, tg), wany,
                                                                  memory::desc(bd, dt::f32, tag::x),
                                                                  memory::desc(yd, dt::f32, tg), st, pl, pr, hint);
                do {
                    std::string impl = pd.impl_info_str();
                    memory ms = mk(pd.src_desc()), mdy = mk(pd.diff_dst_desc()), mdw = mk(pd.diff_weights_desc()),
                           mdb = mk(pd.diff_bias_desc());
                    load(ms, X, xd, tag::nchw);
                    load(mdy, dY, yd, tag::nchw);
                    deconvolution_backward_weights prim(pd);
                    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_DIFF_DST, mdy},
                                                            {DNNL_ARG_DIFF_WEIGHTS, mdw}, {DNNL_ARG_DIFF_BIAS, mdb}};
                    prim.execute(strm, args);
                    strm.wait();
                    double err = std::max(maxdiff(store(mdw, tag::iohw), dWref),
                                          maxdiff(store(mdb, tag::x), dBref) * tolW / (1e-4 * maxabs(dBref) + 1e-4));
                    double t = 0, tr = 0;
                    if (!is_ref(impl)) {
                        t = med([&] { prim.execute(strm, args); strm.wait(); });
                        reorder back(mdw, userW);
                        tr = med([&] { back.execute(strm, mdw, userW); strm.wait(); });
                        if (err <= tolW) bestD.upd(t + tr, std::string("deconv_bwd_w ") + tname(tg) + " " + impl + " kernel " +
                                                                   std::to_string(t * 1e3) + " ms + dW->iohw " + std::to_string(tr * 1e3) + " ms");
                    }
                    line(pn, "deconv_bwd_w", tname(tg), impl,
                         fmt(pd.src_desc()) + "/" + fmt(pd.diff_weights_desc()) + "/" + fmt(pd.diff_dst_desc()), t, macs,
                         err, tolW);
                    if (t > 0) printf("         (+ diff_weights -> user iohw reorder %.3f ms)\n", tr * 1e3);
                } while (pd.next_impl());
            } catch (dnnl::error &e) {
                printf("  %-6s deconv_bwd_w %-8s : %s\n", pn, tname(tg), e.what());
            }
            // decomposition: de-interleave dY, s*s stride-1 convolution_backward_weights, gather the taps
            try {
                std::vector<convolution_backward_weights> cp;
                std::vector<memory> ms, mq, mw, mb, plainq;
                std::string impls;
                double tsum = 0;
                bool allok = true;
                for (int q = 0; q < NP; ++q) {
                    auto &ph = P[q];
                    dims qd = {N, OC, ph.h.M, ph.w.M}, cwd = {OC, C, ph.h.K, ph.w.K};
                    convolution_forward::primitive_desc hint(
                            eng, prop_kind::forward_training, algorithm::convolution_direct, memory::desc(xd, dt::f32, tg),
                            memory::desc(cwd, dt::f32, tag::any), memory::desc(bd, dt::f32, tag::x),
                            memory::desc(qd, dt::f32, tg), {1, 1}, {ph.h.padl, ph.w.padl}, {ph.h.padr, ph.w.padr});
                    convolution_backward_weights::primitive_desc pd(
                            eng, algorithm::convolution_direct, memory::desc(xd, dt::f32, tg),
                            memory::desc(cwd, dt::f32, tag::any), memory::desc(bd, dt::f32, tag::x),
                            memory::desc(qd, dt::f32, tg), {1, 1}, {ph.h.padl, ph.w.padl}, {ph.h.padr, ph.w.padr}, hint);
                    vf dwq_ref((size_t)OC * C * ph.h.K * ph.w.K), dbq_ref(OC, 0.f);
                    for (int o = 0; o < OC; ++o)
                        for (int i = 0; i < C; ++i)
                            for (int a = 0; a < ph.h.K; ++a)
                                for (int b = 0; b < ph.w.K; ++b)
                                    dwq_ref[(((size_t)o * C + i) * ph.h.K + a) * ph.w.K + b] =
                                            dWref[(((size_t)i * OC + o) * k + ph.h.taps[a]) * k + ph.w.taps[b]];
                    for (int n = 0; n < N; ++n)
                        for (int o = 0; o < OC; ++o)
                            for (int j = 0; j < ph.h.M * ph.w.M; ++j)
                                dbq_ref[o] += ph.dYq[((size_t)n * OC + o) * ph.h.M * ph.w.M + j];
                    double bt = 1e30;
                    convolution_backward_weights bp;
                    memory bs, bq, bw, bb;
                    std::string bi;
                    do {
                        std::string impl = pd.impl_info_str();
                        if (is_ref(impl)) continue;
                        if (q > 0 && !(pd.src_desc() == ms[0].get_desc() && pd.diff_dst_desc() == mq[0].get_desc())) continue;
                        memory s_ = mk(pd.src_desc()), q_ = mk(pd.diff_dst_desc()), w_ = mk(pd.diff_weights_desc()),
                               b_ = mk(pd.diff_bias_desc());
                        load(s_, X, xd, tag::nchw);
                        load(q_, ph.dYq, qd, tag::nchw);
                        convolution_backward_weights prim(pd);
                        std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, s_}, {DNNL_ARG_DIFF_DST, q_},
                                                                {DNNL_ARG_DIFF_WEIGHTS, w_}, {DNNL_ARG_DIFF_BIAS, b_}};
                        prim.execute(strm, args);
                        strm.wait();
                        double err = maxdiff(store(w_, tag::oihw), dwq_ref);
                        double t = med([&] { prim.execute(strm, args); strm.wait(); });
                        char v[40];
                        snprintf(v, sizeof v, "phase%d", q);
                        line(pn, v, tname(tg), impl,
                             fmt(pd.src_desc()) + "/" + fmt(pd.diff_weights_desc()) + "/" + fmt(pd.diff_dst_desc()), t,
                             macs / NP, err, tolW);
                        if (err <= tolW && t < bt) { bt = t; bp = prim; bs = s_; bq = q_; bw = w_; bb = b_; bi = impl; }
                    } while (pd.next_impl());
                    if (bt > 1e29) { allok = false; break; }
                    cp.push_back(bp); ms.push_back(bs); mq.push_back(bq); mw.push_back(bw); mb.push_back(bb);
                    plainq.push_back(mk(memory::desc(cwd, dt::f32, tag::oihw)));
                    tsum += bt;
                    impls += (impls.empty() ? "" : " | ") + bi;
                }
                if (!allok) throw dnnl::error(dnnl_unimplemented, "no correct non-ref impl for a phase");
                tag ft = act_tag(mq[0].get_desc());
                if (ft == tag::undef) throw dnnl::error(dnnl_unimplemented, "quarter layout not de-interleavable");
                memory full = mk(memory::desc(yd, dt::f32, ft));
                load(full, dY, yd, tag::nchw);
                std::vector<reorder> ro, wro;
                std::vector<memory> rs, rd;
                std::string roimpl;
                for (int q = 0; q < NP; ++q) {
                    memory a(phase_view6(full.get_desc(), s, P[q].h.r, P[q].w.r), eng, full.get_data_handle());
                    memory b(as6(mq[q].get_desc()), eng, mq[q].get_data_handle());
                    reorder::primitive_desc rpd(eng, a.get_desc(), eng, b.get_desc());
                    roimpl = rpd.impl_info_str();
                    ro.emplace_back(rpd); rs.push_back(a); rd.push_back(b);
                    wro.emplace_back(mw[q], plainq[q]);
                }
                vf dWout(Wm.size()), dBout(OC);
                auto deint = [&] { for (int q = 0; q < NP; ++q) ro[q].execute(strm, rs[q], rd[q]); strm.wait(); };
                auto gather = [&] {
                    for (int q = 0; q < NP; ++q) wro[q].execute(strm, mw[q], plainq[q]);
                    strm.wait();
                    for (int q = 0; q < NP; ++q) {
                        auto &ph = P[q];
                        const float *src = (const float *)plainq[q].get_data_handle();
                        int Kh = ph.h.K, Kw = ph.w.K;
#pragma omp parallel for collapse(2)
                        for (int o = 0; o < OC; ++o)
                            for (int i = 0; i < C; ++i)
                                for (int a = 0; a < Kh; ++a)
                                    for (int b = 0; b < Kw; ++b)
                                        dWout[(((size_t)i * OC + o) * k + ph.h.taps[a]) * k + ph.w.taps[b]] =
                                                src[(((size_t)o * C + i) * Kh + a) * Kw + b];
                    }
                    for (int o = 0; o < OC; ++o) {
                        float acc = 0;
                        for (int q = 0; q < NP; ++q) acc += ((const float *)mb[q].get_data_handle())[o];
                        dBout[o] = acc;
                    }
                };
                auto pipeline = [&] {
                    deint();
                    for (int q = 0; q < NP; ++q)
                        cp[q].execute(strm, {{DNNL_ARG_SRC, ms[q]}, {DNNL_ARG_DIFF_DST, mq[q]},
                                             {DNNL_ARG_DIFF_WEIGHTS, mw[q]}, {DNNL_ARG_DIFF_BIAS, mb[q]}});
                    strm.wait();
                    gather();
                };
                pipeline();
                double err = std::max(maxdiff(dWout, dWref), maxdiff(dBout, dBref) * tolW / (1e-4 * maxabs(dBref) + 1e-4));
                double ti = med(deint), tg_ = med(gather), te = med(pipeline);
                printf("  %-6s DECOMP %-8s sum-of-phase-medians %.3f ms + de-interleave dY %.3f ms (%s) + gather dW->iohw "
                       "%.3f ms = %.3f; end-to-end %.3f ms (%.1f GF/s); err %.2e %s\n         phase impls: %s\n",
                       pn, tname(tg), tsum * 1e3, ti * 1e3, roimpl.c_str(), tg_ * 1e3, (tsum + ti + tg_) * 1e3, te * 1e3,
                       gflops(macs, te), err, err <= tolW ? "ok" : "WRONG", impls.c_str());
                if (err <= tolW) bestP.upd(te, std::string("decomp ") + tname(tg) + " [" + impls + "]");
            } catch (dnnl::error &e) {
                printf("  %-6s DECOMP %-8s : %s\n", pn, tname(tg), e.what());
            }
        }
        printf("  >>> %s BEST direct-family (incl. dW->iohw): %.3f ms (%.1f GF/s) %s\n", pn, bestD.t * 1e3,
               gflops(macs, bestD.t), bestD.desc.c_str());
        printf("  >>> %s BEST decomposed (incl. de-interleave, gather): %.3f ms (%.1f GF/s) %s\n", pn, bestP.t * 1e3,
               gflops(macs, bestP.t), bestP.desc.c_str());
        printf("  >>> %s ratio direct/decomposed = %.3f\n", pn, bestD.t / bestP.t);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    std::vector<Layer> layers = {
            {"dcgan512", 32, 512, 4, 4, 256, 4, 2, 1},
            {"dcgan256", 32, 256, 8, 8, 128, 4, 2, 1},
            {"dcgan128", 32, 128, 16, 16, 64, 4, 2, 1},
            {"dcgan512-b1", 1, 512, 4, 4, 256, 4, 2, 1},
            {"fcn21", 1, 21, 16, 16, 21, 4, 2, 1},
            {"tiny", 2, 5, 3, 3, 7, 4, 2, 1},
    };
    if (const char *e = getenv("MINTOTAL")) g_mintotal = atof(e);
    auto v = dnnl_version();
    printf("oneDNN %d.%d.%d, cpu isa: %d (dnnl::cpu_isa enum), omp threads %d, MAX_CPU_ISA=%s\n", v->major, v->minor,
           v->patch, (int)get_effective_cpu_isa(), omp_get_max_threads(),
           getenv("ONEDNN_MAX_CPU_ISA") ? getenv("ONEDNN_MAX_CPU_ISA") : "(default)");
    std::vector<int> sel;
    for (int i = 1; i < argc; ++i) sel.push_back(atoi(argv[i]));
    if (sel.empty()) sel = {0, 1, 2, 3, 4};
    for (int i : sel) run_layer(layers[i]);
    printf("\n(contended timing blocks discarded: %d; '*' marks a time with no clean block)\n", g_dirty_blocks);
}
