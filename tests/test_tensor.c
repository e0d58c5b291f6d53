// WINDOWS: yes
/* test_tensor.c - dist_rpc.h's float32 tensors, reverse-mode autograd and
   local optimizers, in one process (no workers).  Every reference below is
   written here, in double precision, from the documented semantics (numpy
   broadcasting, torch's nn.Linear, torch.optim.SGD and torch.optim.Adam),
   not from the library's code.

   1. Gradients: for every operation, random inputs of several shapes
      (broadcasting [N,C]+[C], [N,C]*[N,1], [2,3,4]+[3,1], 4-D, a scalar on
      either side, sub and div broadcast on either side; log on positive
      inputs, div away from 0, relu away from 0; matmul [5,7]x[7,3] and
      other non-square shapes; linear with and without bias; softmax and
      log_softmax over the last dimension of 1-D to 4-D inputs; nll_loss
      and cross_entropy with targets; dropout with the mask it drew; sum,
      mean; a tensor used twice by one operation; a composed graph where
      leaves and intermediates are used more than once), loss = sum(op(in)
      * R) with a fixed random R, and every input's gradient compared with
      central differences of the float64 reference forward (relative
      tolerance 1e-3).  Inputs that do not require a gradient get none.
      The same graph run backward twice doubles .grad; zero_grad resets.
      Dropout: the same seed gives the same mask, each element is 0 or
      1/(1-p), about p of them are 0, not training (and p = 0) gives the
      input itself.
   2. Forward values of the same runs against the float64 reference
      (relative 1e-5 of the size of the terms that make each element).
   3. requires_grad propagation, no_grad (nested; no graph; backward on its
      result fails with a sentence), detach, backward's errors (a root of
      more than one element without a gradient, a gradient of the wrong
      size, NULL, nothing requiring a gradient) with sentences, shape
      errors naming the shapes (matmul [2,3]x[2,3], broadcast mismatch,
      linear, nll targets out of range), NULL in gives NULL out through a
      chain, constructors (full, scalar, randn, uniform: seeded), and, in
      child processes (a crash there fails the check without taking this
      test down): a leaf whose requires_grad is turned off after a graph
      was built on it, and broadcasting against an empty dimension.
   4. Optimizers: SGD (plain, momentum, weight decay, both) and Adam (with
      and without weight decay, other betas and eps) over 5 steps on two
      parameters, gradients from backward of a known loss, against a
      float64 reference of torch's update rules (relative 1e-6); a
      parameter that first gets a gradient at step 3 (torch skips a
      parameter without a gradient, and its Adam step count starts when
      it first gets one); argument errors.
   5. Sanity check (not a reference comparison): a 2-16-2 tanh MLP with
      cross_entropy trained 200 steps with SGD+momentum and with Adam on a
      separable toy set: the loss falls below 0.1 of where it started.
   6. matmul against a naive float64 triple loop ([5,7]x[7,3], [64,784]x
      [784,128], [17,300]x[300,600] across the kernel's blocks, empty
      shapes), matmul and linear (784 -> 128, batch 64) backward against
      float64 formulas; the GFLOP/s of that matmul and of linear forward +
      backward are printed (not asserted).
   7. dist_value_from_tensor / dist_tensor_from_value: float32 and float64
      values, through the wire format too; the value holds the tensor (no
      copy) after the caller released it; bad values are refused with a
      sentence.
   8. Memory: a chain of 200000 operations goes backward and is released
      (no recursion on the first input); everything here runs clean under
      `make sanitize T=test_tensor` (AddressSanitizer, LeakSanitizer,
      UBSan).
   9. cat and stack (a new dimension) along each dimension, negative ones,
      empty pieces, scalars: forward against an index map written here,
      the gradient of sum(out * R) is R at each input's elements (an input
      that needs none gets none); sum(stack(800 scalars)) gives each
      gradient 1; shape and dimension errors with sentences.
   The exit status is non-zero when any check failed. */
// TIMEOUT: 300
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_*.c) */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist.h"
#include "dist_rpc.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#  include <sys/wait.h>
#endif
#include <unistd.h>

#include "testutil.h"

static int g_fails = 0;
#define TCHECK(cond, ...)                                         \
    do {                                                          \
        if (!(cond)) {                                            \
            printf("FAIL line %d: ", __LINE__);                   \
            printf(__VA_ARGS__);                                  \
            printf("\n");                                         \
            g_fails++;                                            \
        }                                                         \
    } while (0)
#define MSG() dist_rpc_error_message()
#define HAS(s) (strstr(dist_rpc_error_message(), (s)) != NULL)

/* One line for a group: "ok   ..." when none of its checks failed. */
static void group_line(int fails_before, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void group_line(int fails_before, const char *fmt, ...) {
    va_list ap;
    int n = g_fails - fails_before;
    printf(n ? "FAIL " : "ok   ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (n) printf(" -- %d check(s) failed", n);
    printf("\n");
}

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static double urand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(mix64(g_rng) >> 11) * (1.0 / 9007199254740992.0);
}
static double urange(double lo, double hi) { return lo + (hi - lo) * urand(); }

static const char *shape_str(int nd, const int64_t *s, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && o < cap; d++) o += (size_t)snprintf(buf + o, cap - o, d ? ",%lld" : "%lld", (long long)s[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}
static const char *tshape(const dist_tensor_t *t, char *buf, size_t cap) {
    int64_t s[4] = { 0 };
    int nd = dist_tensor_ndim(t);
    for (int d = 0; d < nd; d++) s[d] = dist_tensor_dim(t, d);
    return shape_str(nd, s, buf, cap);
}

/* ------------------------------------------------------------------------
   The float64 reference: tensors of doubles and every operation on them.
   `mag`, where an operation sets it, is the size of the terms that make
   each output element (sum of |terms|): the scale of its rounding error. */
typedef struct {
    int ndim;
    int64_t shape[4];
    size_t n;
    double *d, *mag;
} rten;

static rten rt_make(int ndim, const int64_t *shape, int with_mag) {
    rten r;
    memset(&r, 0, sizeof r);
    r.ndim = ndim;
    r.n = 1;
    for (int i = 0; i < ndim; i++) { r.shape[i] = shape[i]; r.n *= (size_t)shape[i]; }
    r.d = (double *)calloc(r.n ? r.n : 1, sizeof(double));
    if (with_mag) r.mag = (double *)calloc(r.n ? r.n : 1, sizeof(double));
    if (!r.d || (with_mag && !r.mag)) { fprintf(stderr, "out of memory\n"); abort(); }
    return r;
}
static void rt_free(rten *r) { free(r->d); free(r->mag); r->d = r->mag = NULL; }
static rten rt_from(dist_tensor_t *t) {
    int64_t s[4] = { 0 };
    int nd = dist_tensor_ndim(t);
    for (int d = 0; d < nd; d++) s[d] = dist_tensor_dim(t, d);
    rten r = rt_make(nd, s, 0);
    const float *x = dist_tensor_data(t);
    for (size_t i = 0; i < r.n; i++) r.d[i] = x[i];
    return r;
}

enum { R_ADD, R_SUB, R_MUL, R_DIV };
static rten r_bin(const rten *a, const rten *b, int op) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t sh[4] = { 0 }, da[4] = { 0 }, db[4] = { 0 };
    for (int d = 0; d < nd; d++) {                   /* numpy: aligned at the end, a 1 stretches */
        int ka = d - (nd - a->ndim), kb = d - (nd - b->ndim);
        da[d] = ka >= 0 ? a->shape[ka] : 1;
        db[d] = kb >= 0 ? b->shape[kb] : 1;
        if (da[d] == db[d]) sh[d] = da[d];
        else if (da[d] == 1) sh[d] = db[d];
        else if (db[d] == 1) sh[d] = da[d];
        else { fprintf(stderr, "reference: shapes do not broadcast\n"); abort(); }
    }
    rten o = rt_make(nd, sh, 1);
    for (size_t i = 0; i < o.n; i++) {
        size_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int d = nd - 1; d >= 0; d--) {
            size_t idx = rem % (size_t)sh[d];
            rem /= (size_t)sh[d];
            if (da[d] != 1) ia += idx * sa;
            if (db[d] != 1) ib += idx * sb;
            sa *= (size_t)da[d];
            sb *= (size_t)db[d];
        }
        double x = a->d[ia], y = b->d[ib];
        switch (op) {
        case R_ADD: o.d[i] = x + y; o.mag[i] = fabs(x) + fabs(y); break;
        case R_SUB: o.d[i] = x - y; o.mag[i] = fabs(x) + fabs(y); break;
        case R_MUL: o.d[i] = x * y; o.mag[i] = fabs(x * y); break;
        default: o.d[i] = x / y; o.mag[i] = fabs(x / y); break;
        }
    }
    return o;
}

enum { U_NEG, U_SCALE, U_RELU, U_TANH, U_SIGMOID, U_EXP, U_LOG };
static rten r_un(const rten *a, int op, double s) {
    rten o = rt_make(a->ndim, a->shape, 0);
    for (size_t i = 0; i < o.n; i++) {
        double x = a->d[i];
        switch (op) {
        case U_NEG: o.d[i] = -x; break;
        case U_SCALE: o.d[i] = s * x; break;
        case U_RELU: o.d[i] = x > 0 ? x : 0; break;
        case U_TANH: o.d[i] = tanh(x); break;
        case U_SIGMOID: o.d[i] = 1.0 / (1.0 + exp(-x)); break;
        case U_EXP: o.d[i] = exp(x); break;
        default: o.d[i] = log(x); break;
        }
    }
    return o;
}

static rten r_matmul(const rten *a, const rten *b) {
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1], sh[2] = { m, n };
    rten o = rt_make(2, sh, 1);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, g = 0;
            for (int64_t p = 0; p < k; p++) { s += a->d[i * k + p] * b->d[p * n + j]; g += fabs(a->d[i * k + p] * b->d[p * n + j]); }
            o.d[i * n + j] = s;
            o.mag[i * n + j] = g;
        }
    return o;
}

/* x [N,in], w [out,in], b [out] or NULL: x w^T + b. */
static rten r_linear(const rten *x, const rten *w, const rten *b) {
    int64_t N = x->shape[0], in = x->shape[1], out = w->shape[0], sh[2] = { N, out };
    rten o = rt_make(2, sh, 1);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < out; j++) {
            double s = b ? b->d[j] : 0, g = b ? fabs(b->d[j]) : 0;
            for (int64_t p = 0; p < in; p++) { s += x->d[i * in + p] * w->d[j * in + p]; g += fabs(x->d[i * in + p] * w->d[j * in + p]); }
            o.d[i * out + j] = s;
            o.mag[i * out + j] = g;
        }
    return o;
}

static rten r_reduce(const rten *a, int mean) {
    rten o = rt_make(0, NULL, 1);
    double s = 0, g = 0;
    for (size_t i = 0; i < a->n; i++) { s += a->d[i]; g += fabs(a->d[i]); }
    o.d[0] = mean ? (a->n ? s / (double)a->n : 0) : s;
    o.mag[0] = mean ? (a->n ? g / (double)a->n : 0) : g;
    return o;
}

static rten r_softmax(const rten *a, int logsm) {
    rten o = rt_make(a->ndim, a->shape, 1);
    int64_t c = a->shape[a->ndim - 1], rows = (int64_t)(a->n / (size_t)c);
    for (int64_t r = 0; r < rows; r++) {
        const double *x = a->d + r * c;
        double mx = x[0], z = 0;
        for (int64_t j = 1; j < c; j++) if (x[j] > mx) mx = x[j];
        for (int64_t j = 0; j < c; j++) z += exp(x[j] - mx);
        for (int64_t j = 0; j < c; j++) {
            if (logsm) {
                o.d[r * c + j] = x[j] - mx - log(z);
                o.mag[r * c + j] = fabs(x[j]) + fabs(mx) + fabs(log(z));
            } else {
                o.d[r * c + j] = exp(x[j] - mx) / z;
                o.mag[r * c + j] = o.d[r * c + j];
            }
        }
    }
    return o;
}

static rten r_nll(const rten *a, const int64_t *target) {
    rten o = rt_make(0, NULL, 1);
    int64_t n = a->shape[0], c = a->shape[1];
    for (int64_t i = 0; i < n; i++) { o.d[0] -= a->d[i * c + target[i]]; o.mag[0] += fabs(a->d[i * c + target[i]]); }
    o.d[0] /= (double)n;
    o.mag[0] /= (double)n;
    return o;
}

/* ------------------------------------------------------------------------
   Operations under test: the library's and the reference's, by number. */
enum {
    O_ADD, O_SUB, O_MUL, O_DIV, O_NEG, O_SCALE, O_RELU, O_TANH, O_SIGMOID, O_EXP, O_LOG, O_MATMUL, O_SUM, O_MEAN, O_SOFTMAX,
    O_LOG_SOFTMAX, O_NLL, O_CE, O_NLL_OF_LSM, O_DROPOUT, O_LINEAR, O_LINEAR_NB, O_ADD_SELF, O_MUL_SELF, O_COMPOSITE
};

typedef struct {
    int op;
    float s;                     /* scale */
    const int64_t *target;       /* nll, cross_entropy */
    float p;                     /* dropout */
    uint64_t seed;
    const unsigned char *kept;   /* dropout: the mask drawn for `seed` */
} opctx;

/* The composed graph, in x [4,3], w [5,3], b [5], v [5,2], u [3,2]:
   z = matmul(tanh(lin)^2 + tanh(lin), v) with lin = linear(x, w, b);
   out = log_softmax(z) + matmul(x, u) - 0.5 sigmoid(z).
   x, z and tanh(lin) are each used twice. */
static dist_tensor_t *lib_composite(dist_tensor_t *const *in) {
    dist_tensor_t *lin = dist_tensor_linear(in[0], in[1], in[2]);
    dist_tensor_t *h = dist_tensor_tanh(lin);
    dist_tensor_t *hh = dist_tensor_mul(h, h);
    dist_tensor_t *y = dist_tensor_add(hh, h);
    dist_tensor_t *z = dist_tensor_matmul(y, in[3]);
    dist_tensor_t *ls = dist_tensor_log_softmax(z);
    dist_tensor_t *xu = dist_tensor_matmul(in[0], in[4]);
    dist_tensor_t *s1 = dist_tensor_add(ls, xu);
    dist_tensor_t *sg = dist_tensor_sigmoid(z);
    dist_tensor_t *sc = dist_tensor_scale(sg, 0.5f);
    dist_tensor_t *out = dist_tensor_sub(s1, sc);
    dist_tensor_t *tmp[] = { lin, h, hh, y, z, ls, xu, s1, sg, sc };
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) dist_tensor_release(tmp[i]);
    return out;
}

static rten ref_composite(const rten *in) {
    rten lin = r_linear(&in[0], &in[1], &in[2]);
    rten h = r_un(&lin, U_TANH, 0);
    rten hh = r_bin(&h, &h, R_MUL);
    rten y = r_bin(&hh, &h, R_ADD);
    rten z = r_matmul(&y, &in[3]);
    rten ls = r_softmax(&z, 1);
    rten xu = r_matmul(&in[0], &in[4]);
    rten s1 = r_bin(&ls, &xu, R_ADD);
    rten sg = r_un(&z, U_SIGMOID, 0);
    rten sc = r_un(&sg, U_SCALE, 0.5);
    rten out = r_bin(&s1, &sc, R_SUB);
    rten *tmp[] = { &lin, &h, &hh, &y, &z, &ls, &xu, &s1, &sg, &sc };
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) rt_free(tmp[i]);
    free(out.mag);                      /* judged by its own size (a composition of roundings) */
    out.mag = NULL;
    return out;
}

static dist_tensor_t *lib_op(const opctx *cx, dist_tensor_t *const *in) {
    switch (cx->op) {
    case O_ADD: return dist_tensor_add(in[0], in[1]);
    case O_SUB: return dist_tensor_sub(in[0], in[1]);
    case O_MUL: return dist_tensor_mul(in[0], in[1]);
    case O_DIV: return dist_tensor_div(in[0], in[1]);
    case O_NEG: return dist_tensor_neg(in[0]);
    case O_SCALE: return dist_tensor_scale(in[0], cx->s);
    case O_RELU: return dist_tensor_relu(in[0]);
    case O_TANH: return dist_tensor_tanh(in[0]);
    case O_SIGMOID: return dist_tensor_sigmoid(in[0]);
    case O_EXP: return dist_tensor_exp(in[0]);
    case O_LOG: return dist_tensor_log(in[0]);
    case O_MATMUL: return dist_tensor_matmul(in[0], in[1]);
    case O_SUM: return dist_tensor_sum(in[0]);
    case O_MEAN: return dist_tensor_mean(in[0]);
    case O_SOFTMAX: return dist_tensor_softmax(in[0]);
    case O_LOG_SOFTMAX: return dist_tensor_log_softmax(in[0]);
    case O_NLL: return dist_tensor_nll_loss(in[0], cx->target);
    case O_CE: return dist_tensor_cross_entropy(in[0], cx->target);
    case O_NLL_OF_LSM: {
        dist_tensor_t *lp = dist_tensor_log_softmax(in[0]), *t = dist_tensor_nll_loss(lp, cx->target);
        dist_tensor_release(lp);
        return t;
    }
    case O_DROPOUT: return dist_tensor_dropout(in[0], cx->p, cx->seed, 1);
    case O_LINEAR: return dist_tensor_linear(in[0], in[1], in[2]);
    case O_LINEAR_NB: return dist_tensor_linear(in[0], in[1], NULL);
    case O_ADD_SELF: return dist_tensor_add(in[0], in[0]);
    case O_MUL_SELF: return dist_tensor_mul(in[0], in[0]);
    default: return lib_composite(in);
    }
}

static rten ref_op(const opctx *cx, const rten *in) {
    switch (cx->op) {
    case O_ADD: return r_bin(&in[0], &in[1], R_ADD);
    case O_SUB: return r_bin(&in[0], &in[1], R_SUB);
    case O_MUL: return r_bin(&in[0], &in[1], R_MUL);
    case O_DIV: return r_bin(&in[0], &in[1], R_DIV);
    case O_NEG: return r_un(&in[0], U_NEG, 0);
    case O_SCALE: return r_un(&in[0], U_SCALE, cx->s);
    case O_RELU: return r_un(&in[0], U_RELU, 0);
    case O_TANH: return r_un(&in[0], U_TANH, 0);
    case O_SIGMOID: return r_un(&in[0], U_SIGMOID, 0);
    case O_EXP: return r_un(&in[0], U_EXP, 0);
    case O_LOG: return r_un(&in[0], U_LOG, 0);
    case O_MATMUL: return r_matmul(&in[0], &in[1]);
    case O_SUM: return r_reduce(&in[0], 0);
    case O_MEAN: return r_reduce(&in[0], 1);
    case O_SOFTMAX: return r_softmax(&in[0], 0);
    case O_LOG_SOFTMAX: return r_softmax(&in[0], 1);
    case O_NLL: return r_nll(&in[0], cx->target);
    case O_CE: case O_NLL_OF_LSM: {
        rten lp = r_softmax(&in[0], 1), o = r_nll(&lp, cx->target);
        rt_free(&lp);
        /* -x_t + max + log z per row: the terms of a row's loss */
        int64_t n = in[0].shape[0], c = in[0].shape[1];
        o.mag[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            double mx = in[0].d[i * c], z = 0;
            for (int64_t j = 1; j < c; j++) if (in[0].d[i * c + j] > mx) mx = in[0].d[i * c + j];
            for (int64_t j = 0; j < c; j++) z += exp(in[0].d[i * c + j] - mx);
            o.mag[0] += (fabs(in[0].d[i * c + cx->target[i]]) + fabs(mx) + fabs(log(z))) / (double)n;
        }
        return o;
    }
    case O_DROPOUT: {
        rten o = rt_make(in[0].ndim, in[0].shape, 0);
        for (size_t i = 0; i < o.n; i++) o.d[i] = cx->kept[i] ? in[0].d[i] / (1.0 - (double)cx->p) : 0.0;
        return o;
    }
    case O_LINEAR: return r_linear(&in[0], &in[1], &in[2]);
    case O_LINEAR_NB: return r_linear(&in[0], &in[1], NULL);
    case O_ADD_SELF: return r_bin(&in[0], &in[0], R_ADD);
    case O_MUL_SELF: return r_bin(&in[0], &in[0], R_MUL);
    default: return ref_composite(in);
    }
}

/* ------------------------------------------------------------------------
   Comparing. */
static double g_fwd_worst, g_grad_worst;      /* the largest error / (tolerance scale) seen */
static int g_fwd_cases, g_grad_cases, g_grad_elems;

/* got vs ref, element by element: |got - ref| <= rtol * scale, scale being
   mag[i] when given, else |ref[i]| + floor * max|ref|. */
static int cmp_arr(const char *what, const float *got, const double *ref, const double *mag, size_t n, double rtol, double floor_frac,
                   double *worst) {
    double mx = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, mag ? mag[i] : fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        double scale = (mag ? mag[i] : fabs(ref[i])) + floor_frac * mx, err = fabs((double)got[i] - ref[i]);
        if (scale < 1e-30) scale = 1e-30;
        if (worst && err / scale > *worst) *worst = err / scale;
        if (!(err <= rtol * scale)) {
            if (bad < 3) printf("FAIL %s: element %zu is %.9g, the reference %.9g (error %.3g, tolerance %.3g)\n", what, i, (double)got[i], ref[i], err, rtol * scale);
            bad++;
        }
    }
    if (bad > 3) printf("FAIL %s: ... %d of %zu elements wrong\n", what, bad, n);
    g_fails += bad ? 1 : 0;
    return bad;
}

/* ------------------------------------------------------------------------
   Group 1 and 2: one operation's forward and gradients. */
typedef struct {
    int ndim;
    int64_t shape[4];
    double lo, hi;
    int away;                    /* random sign, magnitude in [lo, hi) */
    int nograd;
} inspec;

static inspec S(int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    inspec s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    s.shape[0] = d0; s.shape[1] = d1; s.shape[2] = d2; s.shape[3] = d3;
    s.lo = -1; s.hi = 1;
    return s;
}
static inspec S0(void) { return S(0, 0, 0, 0, 0); }
static inspec S1(int64_t a) { return S(1, a, 0, 0, 0); }
static inspec S2(int64_t a, int64_t b) { return S(2, a, b, 0, 0); }
static inspec S3(int64_t a, int64_t b, int64_t c) { return S(3, a, b, c, 0); }
static inspec S4(int64_t a, int64_t b, int64_t c, int64_t d) { return S(4, a, b, c, d); }
static inspec range(inspec s, double lo, double hi) { s.lo = lo; s.hi = hi; return s; }
static inspec away(inspec s) { s.lo = 0.3; s.hi = 1.5; s.away = 1; return s; }
static inspec nograd(inspec s) { s.nograd = 1; return s; }

static double ref_loss(const opctx *cx, const rten *in, const float *R) {
    rten o = ref_op(cx, in);
    double L = 0;
    for (size_t i = 0; i < o.n; i++) L += o.d[i] * R[i];
    rt_free(&o);
    return L;
}

static void check_op(const char *name, const opctx *cx, int nin, const inspec *sp) {
    dist_tensor_t *in[5] = { 0 }, *out = NULL, *Rt = NULL, *prod = NULL, *loss = NULL;
    rten rin[5], ro;
    float *R = NULL;
    char what[200], s1[64], s2[64];
    int any_grad = 0;
    memset(rin, 0, sizeof rin);
    memset(&ro, 0, sizeof ro);
    for (int k = 0; k < nin; k++) {
        size_t n = 1;
        for (int d = 0; d < sp[k].ndim; d++) n *= (size_t)sp[k].shape[d];
        float *buf = (float *)malloc((n ? n : 1) * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            double x = urange(sp[k].lo, sp[k].hi);
            buf[i] = (float)(sp[k].away && urand() < 0.5 ? -x : x);
        }
        in[k] = dist_tensor_new(sp[k].ndim, sp[k].shape, buf);
        free(buf);
        if (!in[k]) { TCHECK(0, "%s: tensor_new: %s", name, MSG()); goto done; }
        if (!sp[k].nograd) { dist_tensor_set_requires_grad(in[k], 1); any_grad = 1; }
        TCHECK(dist_tensor_requires_grad(in[k]) == !sp[k].nograd, "%s: input %d requires_grad", name, k);
        rin[k] = rt_from(in[k]);
    }
    out = lib_op(cx, in);
    if (!out) { TCHECK(0, "%s: the operation returned NULL: %s", name, MSG()); goto done; }
    ro = ref_op(cx, rin);
    {
        int same = dist_tensor_ndim(out) == ro.ndim && dist_tensor_numel(out) == ro.n;
        for (int d = 0; same && d < ro.ndim; d++) same = dist_tensor_dim(out, d) == ro.shape[d];
        TCHECK(same, "%s: the result is %s, the reference %s", name, tshape(out, s1, sizeof s1), shape_str(ro.ndim, ro.shape, s2, sizeof s2));
        if (!same) goto done;
    }
    TCHECK(dist_tensor_requires_grad(out) == any_grad, "%s: the result's requires_grad is %d (inputs: %d)", name, dist_tensor_requires_grad(out), any_grad);
    snprintf(what, sizeof what, "%s forward", name);
    cmp_arr(what, dist_tensor_data(out), ro.d, ro.mag, ro.n, 1e-5, ro.mag ? 0 : 1e-3, &g_fwd_worst);
    g_fwd_cases++;

    /* loss = sum(out * R) */
    R = (float *)malloc((ro.n ? ro.n : 1) * sizeof(float));
    for (size_t i = 0; i < ro.n; i++) R[i] = (float)urange(-1, 1);
    Rt = dist_tensor_new(ro.ndim, ro.shape, R);
    prod = dist_tensor_mul(out, Rt);
    loss = dist_tensor_sum(prod);
    if (!loss) { TCHECK(0, "%s: loss: %s", name, MSG()); goto done; }
    {
        float lv = dist_tensor_item(loss);
        double L = 0, M = 0;
        for (size_t i = 0; i < ro.n; i++) { L += ro.d[i] * R[i]; M += fabs(ro.d[i] * R[i]) + (ro.mag ? ro.mag[i] * fabs(R[i]) : 0); }
        snprintf(what, sizeof what, "%s loss", name);
        cmp_arr(what, &lv, &L, &M, 1, 1e-5, 0, &g_fwd_worst);
    }
    if (!any_grad) {
        TCHECK(dist_tensor_backward(loss, NULL) == DIST_ERR_INVALID && HAS("requires a gradient"), "%s: backward without gradients: \"%s\"", name, MSG());
        goto done;
    }
    {
        dist_result r = dist_tensor_backward(loss, NULL);
        TCHECK(r == DIST_OK, "%s: backward: %d %s", name, (int)r, MSG());
        if (r != DIST_OK) goto done;
    }
    for (int k = 0; k < nin; k++) {
        dist_tensor_t *g = dist_tensor_grad(in[k]);
        if (sp[k].nograd) { TCHECK(g == NULL, "%s: input %d does not require a gradient but got one", name, k); continue; }
        if (!g || dist_tensor_numel(g) != rin[k].n || dist_tensor_ndim(g) != rin[k].ndim) {
            TCHECK(0, "%s: input %d's gradient is %s, the input %s", name, k, g ? tshape(g, s1, sizeof s1) : "missing", shape_str(rin[k].ndim, rin[k].shape, s2, sizeof s2));
            continue;
        }
        double *num = (double *)calloc(rin[k].n ? rin[k].n : 1, sizeof(double));
        for (size_t j = 0; j < rin[k].n; j++) {
            double v = rin[k].d[j], h = 1e-5 * fmax(1.0, fabs(v)), lp, lm;
            rin[k].d[j] = v + h;
            lp = ref_loss(cx, rin, R);
            rin[k].d[j] = v - h;
            lm = ref_loss(cx, rin, R);
            rin[k].d[j] = v;
            num[j] = (lp - lm) / (2 * h);
        }
        snprintf(what, sizeof what, "%s d/d(input %d %s)", name, k, shape_str(rin[k].ndim, rin[k].shape, s1, sizeof s1));
        cmp_arr(what, dist_tensor_data(g), num, NULL, rin[k].n, 1e-3, 1e-2, &g_grad_worst);
        g_grad_elems += (int)rin[k].n;
        free(num);
    }
    g_grad_cases++;
done:
    for (int k = 0; k < nin; k++) { dist_tensor_release(in[k]); rt_free(&rin[k]); }
    rt_free(&ro);
    dist_tensor_release(out);
    dist_tensor_release(Rt);
    dist_tensor_release(prod);
    dist_tensor_release(loss);
    free(R);
}

static opctx OP(int op) {
    opctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    return c;
}

#define CASE(name, ctx, ...)                                                      \
    do {                                                                          \
        inspec sp_[] = { __VA_ARGS__ };                                           \
        opctx cx_ = (ctx);                                                        \
        check_op(name, &cx_, (int)(sizeof sp_ / sizeof *sp_), sp_);               \
    } while (0)

/* Dropout: the mask for (shape, p, seed), from the library on ones; each
   element must be 0 or 1/(1-p).  kept[i] = 1 where it was kept. */
static unsigned char *dropout_mask(int nd, const int64_t *shape, float p, uint64_t seed, size_t *n_out) {
    dist_tensor_t *ones = dist_tensor_full(nd, shape, 1.0f), *d = dist_tensor_dropout(ones, p, seed, 1);
    size_t n = dist_tensor_numel(ones);
    unsigned char *kept = (unsigned char *)calloc(n ? n : 1, 1);
    double keep = 1.0 / (1.0 - (double)p);
    int bad = 0;
    if (!d) { TCHECK(0, "dropout on ones: %s", MSG()); dist_tensor_release(ones); free(kept); return NULL; }
    for (size_t i = 0; i < n; i++) {
        float m = dist_tensor_data(d)[i];
        kept[i] = m != 0.0f;
        if (m != 0.0f && !(fabs(m - keep) <= 1e-6 * keep)) bad++;
    }
    TCHECK(!bad, "dropout p=%g: %d element(s) neither 0 nor 1/(1-p) = %g", (double)p, bad, keep);
    dist_tensor_release(ones);
    dist_tensor_release(d);
    *n_out = n;
    return kept;
}

static void test_dropout_grad(const char *name, inspec sp, float p, uint64_t seed) {
    size_t n;
    unsigned char *kept = dropout_mask(sp.ndim, sp.shape, p, seed, &n);
    if (!kept) return;
    opctx c = OP(O_DROPOUT);
    c.p = p; c.seed = seed; c.kept = kept;
    check_op(name, &c, 1, &sp);
    free(kept);
}

static void test_gradients(void) {
    int before = g_fails;
    int64_t t5[5] = { 2, 0, 3, 1, 3 }, t1[1] = { 2 }, t6[6] = { 0, 1, 2, 3, 3, 0 };
    opctx c;

    /* elementwise with broadcasting */
    CASE("add [4,5]+[4,5]", OP(O_ADD), S2(4, 5), S2(4, 5));
    CASE("add [6,4]+[4]", OP(O_ADD), S2(6, 4), S1(4));
    CASE("add [4]+[6,4]", OP(O_ADD), S1(4), S2(6, 4));
    CASE("add [2,3,4]+[3,1]", OP(O_ADD), S3(2, 3, 4), S2(3, 1));
    CASE("add []+[3,4]", OP(O_ADD), S0(), S2(3, 4));
    CASE("add [3,4]+[]", OP(O_ADD), S2(3, 4), S0());
    CASE("add [3,1]+[1,4]", OP(O_ADD), S2(3, 1), S2(1, 4));
    CASE("add [2,3,1,4]+[3,5,1]", OP(O_ADD), S4(2, 3, 1, 4), S3(3, 5, 1));
    CASE("add []+[]", OP(O_ADD), S0(), S0());
    CASE("sub [4,5]-[5]", OP(O_SUB), S2(4, 5), S1(5));
    CASE("sub [5]-[4,5]", OP(O_SUB), S1(5), S2(4, 5));
    CASE("sub [3,1]-[3,4]", OP(O_SUB), S2(3, 1), S2(3, 4));
    CASE("sub []-[2,3]", OP(O_SUB), S0(), S2(2, 3));
    CASE("sub [2,3,4]-[4]", OP(O_SUB), S3(2, 3, 4), S1(4));
    CASE("mul [5,4]*[5,1]", OP(O_MUL), S2(5, 4), S2(5, 1));
    CASE("mul [5,1]*[5,4]", OP(O_MUL), S2(5, 1), S2(5, 4));
    CASE("mul [4,5]*[4,5]", OP(O_MUL), S2(4, 5), S2(4, 5));
    CASE("mul [2,3,4]*[3,1]", OP(O_MUL), S3(2, 3, 4), S2(3, 1));
    CASE("mul []*[2,3]", OP(O_MUL), S0(), S2(2, 3));
    CASE("mul [2,1,3]*[4,1] (both stretch)", OP(O_MUL), S3(2, 1, 3), S2(4, 1));
    CASE("div [4,5]/[4,5]", OP(O_DIV), S2(4, 5), away(S2(4, 5)));
    CASE("div [4,5]/[5]", OP(O_DIV), S2(4, 5), away(S1(5)));
    CASE("div [5]/[4,5]", OP(O_DIV), S1(5), away(S2(4, 5)));
    CASE("div [4,1]/[4,3]", OP(O_DIV), S2(4, 1), away(S2(4, 3)));
    CASE("div [2,3]/[]", OP(O_DIV), S2(2, 3), away(S0()));
    CASE("div []/[2,3]", OP(O_DIV), S0(), away(S2(2, 3)));
    CASE("div [2,3,4]/[3,1]", OP(O_DIV), S3(2, 3, 4), away(S2(3, 1)));
    /* one side without a gradient */
    CASE("mul [3,4]*[4] (b no grad)", OP(O_MUL), S2(3, 4), nograd(S1(4)));
    CASE("div [3,4]/[3,1] (a no grad)", OP(O_DIV), nograd(S2(3, 4)), away(S2(3, 1)));
    CASE("sub [3,4]-[4] (b no grad)", OP(O_SUB), S2(3, 4), nograd(S1(4)));
    CASE("add [3,4]+[4] (neither needs a gradient)", OP(O_ADD), nograd(S2(3, 4)), nograd(S1(4)));
    /* one tensor as both operands */
    CASE("add(x, x) [3,4]", OP(O_ADD_SELF), S2(3, 4));
    CASE("mul(x, x) [3,4]", OP(O_MUL_SELF), S2(3, 4));

    /* elementwise, one input */
    CASE("neg [3,4]", OP(O_NEG), S2(3, 4));
    c = OP(O_SCALE); c.s = -1.7f;
    CASE("scale -1.7 [2,3,4]", c, S3(2, 3, 4));
    c.s = 0.0f;
    CASE("scale 0 [5]", c, S1(5));
    CASE("relu [4,5] (away from 0)", OP(O_RELU), away(S2(4, 5)));
    CASE("relu [2,3,2,2] (away from 0)", OP(O_RELU), away(S4(2, 3, 2, 2)));
    CASE("tanh [3,4]", OP(O_TANH), range(S2(3, 4), -2, 2));
    CASE("tanh []", OP(O_TANH), S0());
    CASE("sigmoid [3,4]", OP(O_SIGMOID), range(S2(3, 4), -3, 3));
    CASE("sigmoid [2,2,3]", OP(O_SIGMOID), range(S3(2, 2, 3), -6, 6));
    CASE("exp [3,4]", OP(O_EXP), range(S2(3, 4), -2, 2));
    CASE("log [3,4] (positive)", OP(O_LOG), range(S2(3, 4), 0.2, 3));
    CASE("log [7] (positive)", OP(O_LOG), range(S1(7), 0.5, 20));

    /* matmul, linear */
    CASE("matmul [5,7]x[7,3]", OP(O_MATMUL), S2(5, 7), S2(7, 3));
    CASE("matmul [1,4]x[4,6]", OP(O_MATMUL), S2(1, 4), S2(4, 6));
    CASE("matmul [6,1]x[1,2]", OP(O_MATMUL), S2(6, 1), S2(1, 2));
    CASE("matmul [3,3]x[3,3]", OP(O_MATMUL), S2(3, 3), S2(3, 3));
    CASE("matmul [4,9]x[9,2] (b no grad)", OP(O_MATMUL), S2(4, 9), nograd(S2(9, 2)));
    CASE("matmul [4,9]x[9,2] (a no grad)", OP(O_MATMUL), nograd(S2(4, 9)), S2(9, 2));
    CASE("linear x[5,7] w[3,7] b[3]", OP(O_LINEAR), S2(5, 7), S2(3, 7), S1(3));
    CASE("linear x[1,4] w[6,4] b[6]", OP(O_LINEAR), S2(1, 4), S2(6, 4), S1(6));
    CASE("linear x[5,7] w[3,7] (no bias)", OP(O_LINEAR_NB), S2(5, 7), S2(3, 7));
    CASE("linear x[4,3] (no grad) w[2,3] b[2]", OP(O_LINEAR), nograd(S2(4, 3)), S2(2, 3), S1(2));
    CASE("linear x[4,3] w[2,3] (no grad) b[2]", OP(O_LINEAR), S2(4, 3), nograd(S2(2, 3)), S1(2));

    /* reductions */
    CASE("sum [3,4]", OP(O_SUM), S2(3, 4));
    CASE("sum [2,3,4]", OP(O_SUM), S3(2, 3, 4));
    CASE("sum []", OP(O_SUM), S0());
    CASE("mean [3,4]", OP(O_MEAN), S2(3, 4));
    CASE("mean [2,3,4]", OP(O_MEAN), S3(2, 3, 4));
    CASE("mean [7]", OP(O_MEAN), S1(7));

    /* softmax, log_softmax, losses */
    CASE("softmax [4,6]", OP(O_SOFTMAX), range(S2(4, 6), -3, 3));
    CASE("softmax [2,3,5]", OP(O_SOFTMAX), range(S3(2, 3, 5), -3, 3));
    CASE("softmax [7]", OP(O_SOFTMAX), range(S1(7), -3, 3));
    CASE("softmax [2,2,2,3]", OP(O_SOFTMAX), range(S4(2, 2, 2, 3), -3, 3));
    CASE("softmax [3,4] (large logits)", OP(O_SOFTMAX), range(S2(3, 4), 40, 45));
    CASE("log_softmax [4,6]", OP(O_LOG_SOFTMAX), range(S2(4, 6), -3, 3));
    CASE("log_softmax [2,3,5]", OP(O_LOG_SOFTMAX), range(S3(2, 3, 5), -3, 3));
    CASE("log_softmax [7]", OP(O_LOG_SOFTMAX), range(S1(7), -3, 3));
    CASE("log_softmax [3,4] (large logits)", OP(O_LOG_SOFTMAX), range(S2(3, 4), 40, 45));
    c = OP(O_NLL); c.target = t5;
    CASE("nll_loss [5,4]", c, range(S2(5, 4), -3, 0));
    c.target = t1;
    CASE("nll_loss [1,3]", c, range(S2(1, 3), -3, 0));
    c = OP(O_CE); c.target = t5;
    CASE("cross_entropy [5,4]", c, range(S2(5, 4), -3, 3));
    c.target = t6;
    CASE("cross_entropy [6,4]", c, range(S2(6, 4), -3, 3));
    c.target = t1;
    CASE("cross_entropy [1,3]", c, range(S2(1, 3), -3, 3));
    c = OP(O_NLL_OF_LSM); c.target = t5;
    CASE("nll_loss(log_softmax) [5,4]", c, range(S2(5, 4), -3, 3));

    /* dropout, with the mask it drew */
    test_dropout_grad("dropout p=0.3 [6,5]", S2(6, 5), 0.3f, 77);
    test_dropout_grad("dropout p=0.5 [2,3,4]", S3(2, 3, 4), 0.5f, 1234567);
    test_dropout_grad("dropout p=0.9 [40]", S1(40), 0.9f, 5);

    /* a composed graph: leaves and intermediates used more than once */
    CASE("composed graph", OP(O_COMPOSITE), S2(4, 3), S2(5, 3), S1(5), S2(5, 2), S2(3, 2));

    group_line(before, "gradients: %d cases (every operation, broadcasting both ways, 0-4 dims, shared inputs, a composed graph), %d elements "
               "against float64 central differences; worst error %.2g of the reference's size (tolerance 1e-3)",
               g_grad_cases, g_grad_elems, g_grad_worst);
}

/* Backward twice accumulates; zero_grad resets; a second backward after it
   gives the same gradient. */
static void test_accumulate(void) {
    int before = g_fails;
    int64_t shp[5][2] = { { 4, 3 }, { 5, 3 }, { 5, 0 }, { 5, 2 }, { 3, 2 } };
    int nd[5] = { 2, 2, 1, 2, 2 };
    dist_tensor_t *in[5], *out, *Rt, *prod, *loss;
    float *g1[5];
    opctx cx = OP(O_COMPOSITE);
    for (int k = 0; k < 5; k++) {
        in[k] = dist_tensor_uniform(nd[k], shp[k], -1, 1, 100 + (uint64_t)k);
        dist_tensor_set_requires_grad(in[k], 1);
    }
    out = lib_op(&cx, in);
    Rt = dist_tensor_uniform(2, (const int64_t[]){ 4, 2 }, -1, 1, 99);
    prod = dist_tensor_mul(out, Rt);
    loss = dist_tensor_sum(prod);
    TCHECK(loss && dist_tensor_backward(loss, NULL) == DIST_OK, "accumulate: first backward: %s", MSG());
    for (int k = 0; k < 5; k++) {
        size_t n = dist_tensor_numel(in[k]);
        g1[k] = (float *)malloc(n * sizeof(float));
        memcpy(g1[k], dist_tensor_data(dist_tensor_grad(in[k])), n * sizeof(float));
    }
    TCHECK(dist_tensor_backward(loss, NULL) == DIST_OK, "accumulate: second backward: %s", MSG());
    for (int k = 0; k < 5; k++) {
        const float *g = dist_tensor_data(dist_tensor_grad(in[k]));
        int bad = 0;
        for (size_t i = 0; i < dist_tensor_numel(in[k]); i++) bad += g[i] != 2 * g1[k][i];
        TCHECK(!bad, "accumulate: input %d after two backward passes: %d element(s) are not twice the first gradient", k, bad);
    }
    for (int k = 0; k < 5; k++) dist_tensor_zero_grad(in[k]);
    for (int k = 0; k < 5; k++) {
        const float *g = dist_tensor_data(dist_tensor_grad(in[k]));
        int bad = 0;
        for (size_t i = 0; i < dist_tensor_numel(in[k]); i++) bad += g[i] != 0.0f;
        TCHECK(!bad, "zero_grad: input %d has %d non-zero element(s)", k, bad);
    }
    TCHECK(dist_tensor_backward(loss, NULL) == DIST_OK, "accumulate: third backward: %s", MSG());
    for (int k = 0; k < 5; k++) {
        const float *g = dist_tensor_data(dist_tensor_grad(in[k]));
        int bad = 0;
        for (size_t i = 0; i < dist_tensor_numel(in[k]); i++) bad += g[i] != g1[k][i];
        TCHECK(!bad, "accumulate: input %d after zero_grad and backward: %d element(s) differ from the first gradient", k, bad);
        free(g1[k]);
    }
    /* the same leaf reached by two roots: the gradients add */
    {
        dist_tensor_t *x = dist_tensor_uniform(1, (const int64_t[]){ 6 }, -1, 1, 5), *t1 = NULL, *t2 = NULL, *l1, *l2;
        dist_tensor_set_requires_grad(x, 1);
        t1 = dist_tensor_tanh(x);
        l1 = dist_tensor_sum(t1);
        t2 = dist_tensor_mul(x, x);
        l2 = dist_tensor_sum(t2);
        TCHECK(dist_tensor_backward(l1, NULL) == DIST_OK && dist_tensor_backward(l2, NULL) == DIST_OK, "two roots: %s", MSG());
        int bad = 0;
        for (int i = 0; i < 6; i++) {
            double xv = dist_tensor_data(x)[i], want = (1 - tanh(xv) * tanh(xv)) + 2 * xv;
            bad += !(fabs(dist_tensor_data(dist_tensor_grad(x))[i] - want) <= 1e-5 * (1 + fabs(want)));
        }
        TCHECK(!bad, "two roots: %d gradient element(s) are not the sum of both", bad);
        /* a leaf as its own root: d x / d x = 1 */
        dist_tensor_t *s = dist_tensor_scalar(3.0f);
        dist_tensor_set_requires_grad(s, 1);
        TCHECK(dist_tensor_backward(s, NULL) == DIST_OK && dist_tensor_grad(s) && dist_tensor_item(dist_tensor_grad(s)) == 1.0f, "backward of a leaf: %s", MSG());
        dist_tensor_t *tl[] = { x, t1, t2, l1, l2, s };
        for (size_t i = 0; i < sizeof tl / sizeof *tl; i++) dist_tensor_release(tl[i]);
    }
    /* backward with an explicit gradient of a non-scalar root */
    {
        dist_tensor_t *x = dist_tensor_uniform(2, (const int64_t[]){ 2, 3 }, -1, 1, 8), *c = dist_tensor_uniform(2, (const int64_t[]){ 2, 3 }, -1, 1, 9);
        dist_tensor_t *G = dist_tensor_uniform(2, (const int64_t[]){ 2, 3 }, -1, 1, 10), *y;
        dist_tensor_set_requires_grad(x, 1);
        y = dist_tensor_mul(x, c);
        TCHECK(dist_tensor_backward(y, G) == DIST_OK, "backward(y [2,3], G): %s", MSG());
        int bad = 0;
        for (int i = 0; i < 6 && dist_tensor_grad(x); i++) bad += dist_tensor_data(dist_tensor_grad(x))[i] != dist_tensor_data(G)[i] * dist_tensor_data(c)[i];
        TCHECK(dist_tensor_grad(x) && !bad, "backward(y, G): x.grad is not G * c");
        dist_tensor_release(x); dist_tensor_release(c); dist_tensor_release(G); dist_tensor_release(y);
    }
    for (int k = 0; k < 5; k++) dist_tensor_release(in[k]);
    dist_tensor_release(out); dist_tensor_release(Rt); dist_tensor_release(prod); dist_tensor_release(loss);
    group_line(before, "accumulation: two backward passes double .grad exactly, zero_grad resets, then the same gradient again; two roots add; "
               "a leaf as root; an explicit gradient for a [2,3] root");
}

static void test_dropout_semantics(void) {
    int before = g_fails;
    int64_t big[1] = { 20000 }, sh[2] = { 3, 4 };
    dist_tensor_t *ones = dist_tensor_full(1, big, 1.0f);
    dist_tensor_t *a = dist_tensor_dropout(ones, 0.25f, 42, 1), *b = dist_tensor_dropout(ones, 0.25f, 42, 1), *c = dist_tensor_dropout(ones, 0.25f, 43, 1);
    if (a && b && c) {
        size_t zeros = 0, diff_same = 0, diff_other = 0;
        for (size_t i = 0; i < 20000; i++) {
            zeros += dist_tensor_data(a)[i] == 0.0f;
            diff_same += dist_tensor_data(a)[i] != dist_tensor_data(b)[i];
            diff_other += dist_tensor_data(a)[i] != dist_tensor_data(c)[i];
        }
        TCHECK(diff_same == 0, "dropout: the same seed gave %zu different elements", diff_same);
        TCHECK(diff_other > 1000, "dropout: seeds 42 and 43 differ in only %zu of 20000 elements", diff_other);
        TCHECK(fabs((double)zeros / 20000 - 0.25) < 0.02, "dropout p=0.25 zeroed %zu of 20000", zeros);
    } else {
        TCHECK(0, "dropout of ones: %s", MSG());
    }
    dist_tensor_release(a); dist_tensor_release(b); dist_tensor_release(c); dist_tensor_release(ones);
    /* not training and p = 0: the input itself; gradient passes through */
    dist_tensor_t *x = dist_tensor_uniform(2, sh, -1, 1, 3);
    dist_tensor_set_requires_grad(x, 1);
    dist_tensor_t *e = dist_tensor_dropout(x, 0.5f, 7, 0), *z = dist_tensor_dropout(x, 0.0f, 7, 1);
    TCHECK(e == x && z == x, "dropout not training / p=0 returns the input itself (%p, %p, input %p)", (void *)e, (void *)z, (void *)x);
    if (e && z) {
        TCHECK(memcmp(dist_tensor_data(e), dist_tensor_data(x), 12 * sizeof(float)) == 0 && memcmp(dist_tensor_data(z), dist_tensor_data(x), 12 * sizeof(float)) == 0,
               "dropout not training / p=0: the values changed");
        dist_tensor_t *s = dist_tensor_sum(e);
        TCHECK(dist_tensor_backward(s, NULL) == DIST_OK && dist_tensor_grad(x) && dist_tensor_data(dist_tensor_grad(x))[5] == 1.0f, "dropout not training: gradient of sum is 1");
        dist_tensor_release(s);
    }
    dist_tensor_release(e); dist_tensor_release(z);
    /* bad p */
    TCHECK(dist_tensor_dropout(x, 1.0f, 1, 1) == NULL && HAS("p = 1"), "dropout p=1: \"%s\"", MSG());
    TCHECK(dist_tensor_dropout(x, -0.1f, 1, 1) == NULL && HAS("0 <= p < 1"), "dropout p=-0.1: \"%s\"", MSG());
    TCHECK(dist_tensor_dropout(x, NAN, 1, 1) == NULL, "dropout p=NaN is refused");
    dist_tensor_release(x);
    group_line(before, "dropout: same seed same mask, another seed another, p=0.25 zeroes 25%% (+-2%%) of 20000, kept ones are x/(1-p) (checked with "
               "gradients above), not training and p=0 give the input itself, bad p refused");
}

/* ------------------------------------------------------------------------
   Group 3: requires_grad, no_grad, errors. */
typedef int (*probe_fn)(void);

/* Runs fn in a child; 0 when it returned 0.  A crash or a non-zero return
   is a failure when `must`, else a note.  (Windows: the child is this
   program started again, run_in_process.) */
#ifdef _WIN32
static int probe(const char *what, probe_fn fn, int must) {
    unsigned long code = run_in_process(fn);
    if (code == 0) return 0;
    if (must) g_fails++;
    if (code > 255)
        printf("%s %s: the child crashed (exception 0x%08lx)\n", must ? "FAIL" : "note", what, code);
    else
        printf("%s %s: the child exited with status %lu%s\n", must ? "FAIL" : "note", what, code,
               code == 1 ? " (a sanitizer report on stderr?)" : "");
    return 1;
}
#else
static int probe(const char *what, probe_fn fn, int must) {
    pid_t pid;
    int st = 0;
    fflush(stdout);
    fflush(stderr);
    if ((pid = fork()) < 0) { TCHECK(0, "fork: %s", strerror(errno)); return -1; }
    if (pid == 0) {
        int rc = fn();
        fflush(stdout);
        _exit(rc);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (must) g_fails++;
    if (WIFSIGNALED(st))
        printf("%s %s: the child died of signal %d (%s)\n", must ? "FAIL" : "note", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        printf("%s %s: the child exited with status %d%s\n", must ? "FAIL" : "note", what, WEXITSTATUS(st),
               WEXITSTATUS(st) == 1 ? " (a sanitizer report on stderr?)" : "");
    return 1;
}
#endif

/* A leaf whose requires_grad is turned off after an operation used it:
   backward must not crash (any outcome but a crash is accepted).  One
   child per operation (g_toggle_op). */
static int g_toggle_op;
static const char *const g_toggle_names[] = { "tanh", "scale", "sum", "mean", "softmax", "log_softmax", "dropout", "nll_loss", "mul", "matmul", "linear" };
enum { N_TOGGLE = (int)(sizeof g_toggle_names / sizeof *g_toggle_names) };
static int probe_toggle(void) {
    int64_t sh[2] = { 1, 3 }, tg[1] = { 1 };
    dist_tensor_t *x = dist_tensor_uniform(2, sh, 0.1f, 1, 1), *y, *loss;
    dist_tensor_t *w = dist_tensor_uniform(2, (const int64_t[]){ 3, 3 }, 0.1f, 1, 2);
    dist_tensor_set_requires_grad(x, 1);
    switch (g_toggle_op) {
    case 0: y = dist_tensor_tanh(x); break;
    case 1: y = dist_tensor_scale(x, 2); break;
    case 2: y = dist_tensor_sum(x); break;
    case 3: y = dist_tensor_mean(x); break;
    case 4: y = dist_tensor_softmax(x); break;
    case 5: y = dist_tensor_log_softmax(x); break;
    case 6: y = dist_tensor_dropout(x, 0.5f, 3, 1); break;
    case 7: y = dist_tensor_nll_loss(x, tg); break;
    case 8: y = dist_tensor_mul(x, x); break;
    case 9: y = dist_tensor_matmul(x, w); break;
    default: y = dist_tensor_linear(x, w, NULL); break;
    }
    dist_tensor_set_requires_grad(x, 0);
    loss = dist_tensor_sum(y);
    dist_result r = dist_tensor_backward(loss, NULL);
    (void)r;
    dist_tensor_release(loss); dist_tensor_release(y); dist_tensor_release(x); dist_tensor_release(w);
    return 0;
}

/* numpy: a dimension of 0 against one of 1 gives 0 ([0,3] + [3] is [0,3],
   an empty batch plus a bias). */
static int probe_empty_broadcast(void) {
    int rc = 0;
    char s1[64];
    int64_t s03[2] = { 0, 3 }, s3[1] = { 3 }, s0[1] = { 0 }, s1d[1] = { 1 };
    dist_tensor_t *a = dist_tensor_new(2, s03, NULL), *b = dist_tensor_new(1, s3, NULL), *c = dist_tensor_new(1, s0, NULL), *d = dist_tensor_new(1, s1d, NULL);
    dist_tensor_t *ab = dist_tensor_add(a, b);
    if (!ab || dist_tensor_ndim(ab) != 2 || dist_tensor_dim(ab, 0) != 0 || dist_tensor_dim(ab, 1) != 3) {
        printf("     add [0,3]+[3]: %s (numpy: [0,3]) %s\n", ab ? tshape(ab, s1, sizeof s1) : "NULL", ab ? "" : MSG());
        rc = 2;
    }
    dist_tensor_t *cd = dist_tensor_mul(c, d);
    if (!cd || dist_tensor_ndim(cd) != 1 || dist_tensor_dim(cd, 0) != 0) {
        printf("     mul [0]*[1]: %s (numpy: [0]) %s\n", cd ? tshape(cd, s1, sizeof s1) : "NULL", cd ? "" : MSG());
        rc = 2;
    }
    dist_tensor_release(a); dist_tensor_release(b); dist_tensor_release(c); dist_tensor_release(d); dist_tensor_release(ab); dist_tensor_release(cd);
    return rc;
}

static void test_errors(void) {
    int before = g_fails;
    int64_t s23[2] = { 2, 3 }, s4[1] = { 4 }, s32[2] = { 3, 2 }, s234[3] = { 2, 3, 4 }, s43[2] = { 4, 3 }, s54[2] = { 5, 4 }, s5[1] = { 5 };
    dist_tensor_t *a = dist_tensor_uniform(2, s23, -1, 1, 1), *b = dist_tensor_uniform(2, s23, -1, 1, 2), *t, *u, *v;

    /* requires_grad propagation */
    TCHECK(!dist_tensor_requires_grad(a), "a new tensor does not require a gradient");
    t = dist_tensor_add(a, b);
    TCHECK(t && !dist_tensor_requires_grad(t), "an operation on tensors without gradients needs none");
    TCHECK(dist_tensor_backward(t, dist_tensor_grad(a)) == DIST_ERR_INVALID, "backward(x, NULL grad) of a [2,3] root is refused");
    dist_tensor_release(t);
    dist_tensor_set_requires_grad(a, 1);
    TCHECK(dist_tensor_requires_grad(a), "set_requires_grad(1)");
    t = dist_tensor_mul(a, b);
    u = dist_tensor_tanh(t);
    TCHECK(t && u && dist_tensor_requires_grad(t) && dist_tensor_requires_grad(u), "requires_grad propagates through mul and tanh");
    dist_tensor_set_requires_grad(u, 0);
    TCHECK(dist_tensor_requires_grad(u), "set_requires_grad on an operation's result is ignored (it stays in the graph)");
    TCHECK(dist_tensor_grad(u) == NULL, "a non-leaf has no .grad");
    /* backward errors */
    TCHECK(dist_tensor_backward(u, NULL) == DIST_ERR_INVALID && HAS("[2,3]") && HAS("not a single value"),
           "backward of a [2,3] root without a gradient: \"%s\"", MSG());
    v = dist_tensor_new(1, s4, NULL);
    TCHECK(dist_tensor_backward(u, v) == DIST_ERR_INVALID && HAS("[4]") && HAS("[2,3]"), "backward with a [4] gradient for a [2,3] root: \"%s\"", MSG());
    dist_tensor_release(v);
    TCHECK(dist_tensor_backward(NULL, NULL) == DIST_ERR_INVALID && HAS("NULL"), "backward(NULL): \"%s\"", MSG());
    TCHECK(dist_tensor_grad(a) == NULL, "the failed backward passes left no gradient");
    {
        /* a [3,2] gradient for a [2,3] root (same size, other shape) */
        dist_tensor_t *g32 = dist_tensor_full(2, s32, 1.0f);
        dist_result r = dist_tensor_backward(u, g32);
        if (r == DIST_OK) printf("note backward accepts a [3,2] gradient for a [2,3] root (it checks the element count, not the shape)\n");
        dist_tensor_release(g32);
        dist_tensor_zero_grad(a);
    }
    dist_tensor_release(t); dist_tensor_release(u);

    /* no_grad */
    dist_no_grad_enter();
    dist_no_grad_enter();
    t = dist_tensor_mul(a, b);
    dist_no_grad_exit();
    u = dist_tensor_sum(t);
    TCHECK(t && u && !dist_tensor_requires_grad(t) && !dist_tensor_requires_grad(u), "no_grad (nested): no graph");
    TCHECK(dist_tensor_backward(u, NULL) == DIST_ERR_INVALID && HAS("requires a gradient"), "backward of a no_grad result: \"%s\"", MSG());
    dist_tensor_release(t); dist_tensor_release(u);
    dist_no_grad_exit();
    dist_no_grad_exit();                                /* one too many: harmless */
    t = dist_tensor_mul(a, b);
    TCHECK(t && dist_tensor_requires_grad(t), "after no_grad_exit, operations build a graph again");
    dist_tensor_release(t);
    /* a no_grad region on another thread does not affect this one: skipped (one thread here) */

    /* detach */
    t = dist_tensor_scale(a, 2.0f);
    u = dist_tensor_detach(t);
    TCHECK(u && !dist_tensor_requires_grad(u) && u != t && dist_tensor_data(u) != dist_tensor_data(t) &&
               memcmp(dist_tensor_data(u), dist_tensor_data(t), 6 * sizeof(float)) == 0 && dist_tensor_ndim(u) == 2 && dist_tensor_dim(u, 1) == 3,
           "detach: a copy that is a leaf");
    v = dist_tensor_sum(u);
    TCHECK(v && !dist_tensor_requires_grad(v), "an operation on a detached tensor needs no gradient");
    TCHECK(dist_tensor_detach(NULL) == NULL && HAS("NULL"), "detach(NULL): \"%s\"", MSG());
    dist_tensor_release(t); dist_tensor_release(u); dist_tensor_release(v);

    /* shape errors name the shapes */
    TCHECK(dist_tensor_matmul(a, b) == NULL && HAS("[2,3] x [2,3]"), "matmul [2,3]x[2,3]: \"%s\"", MSG());
    t = dist_tensor_new(1, s4, NULL);
    TCHECK(dist_tensor_matmul(t, t) == NULL && HAS("[4] x [4]"), "matmul [4]x[4]: \"%s\"", MSG());
    TCHECK(dist_tensor_add(a, t) == NULL && HAS("add") && HAS("[2,3]") && HAS("[4]") && HAS("broadcast"), "add [2,3]+[4]: \"%s\"", MSG());
    TCHECK(dist_tensor_sub(t, a) == NULL && HAS("sub") && HAS("[4]") && HAS("[2,3]"), "sub [4]-[2,3]: \"%s\"", MSG());
    u = dist_tensor_new(3, s234, NULL);
    v = dist_tensor_new(2, s32, NULL);
    TCHECK(dist_tensor_mul(u, v) == NULL && HAS("mul") && HAS("[2,3,4]") && HAS("[3,2]"), "mul [2,3,4]*[3,2]: \"%s\"", MSG());
    TCHECK(dist_tensor_div(v, a) == NULL && HAS("div") && HAS("[3,2]") && HAS("[2,3]"), "div [3,2]/[2,3]: \"%s\"", MSG());
    dist_tensor_release(u); dist_tensor_release(v);
    {
        dist_tensor_t *x = dist_tensor_new(2, s43, NULL), *w = dist_tensor_new(2, s54, NULL), *w2 = dist_tensor_new(2, (const int64_t[]){ 5, 3 }, NULL);
        dist_tensor_t *b5 = dist_tensor_new(1, s5, NULL);
        TCHECK(dist_tensor_linear(x, w, b5) == NULL && HAS("linear") && HAS("[4,3]") && HAS("[5,4]"), "linear x[4,3] w[5,4]: \"%s\"", MSG());
        TCHECK(dist_tensor_linear(x, w2, t) == NULL && HAS("b [4]"), "linear with a [4] bias for 5 outputs: \"%s\"", MSG());
        TCHECK(dist_tensor_linear(t, w2, NULL) == NULL && HAS("x [4]"), "linear of a 1-D x: \"%s\"", MSG());
        u = dist_tensor_linear(x, w2, b5);
        TCHECK(u && dist_tensor_dim(u, 0) == 4 && dist_tensor_dim(u, 1) == 5, "linear x[4,3] w[5,3] b[5] works: %s", MSG());
        dist_tensor_release(u);
        dist_tensor_release(x); dist_tensor_release(w); dist_tensor_release(w2); dist_tensor_release(b5);
    }
    {
        int64_t tg_bad[2] = { 0, 3 }, tg_neg[2] = { -1, 0 }, tg_ok[2] = { 0, 2 };
        TCHECK(dist_tensor_nll_loss(b, tg_bad) == NULL && HAS("target 3") && HAS("row 1") && HAS("0..2"), "nll target 3 of 3 classes: \"%s\"", MSG());
        TCHECK(dist_tensor_nll_loss(b, tg_neg) == NULL && HAS("target -1") && HAS("row 0"), "nll target -1: \"%s\"", MSG());
        TCHECK(dist_tensor_cross_entropy(b, tg_bad) == NULL && HAS("target 3"), "cross_entropy target out of range: \"%s\"", MSG());
        TCHECK(dist_tensor_nll_loss(b, NULL) == NULL && HAS("NULL"), "nll NULL targets: \"%s\"", MSG());
        u = dist_tensor_new(3, s234, NULL);
        TCHECK(dist_tensor_nll_loss(u, tg_ok) == NULL && HAS("[2,3,4]") && HAS("[N,C]"), "nll of a 3-D tensor: \"%s\"", MSG());
        dist_tensor_release(u);
        u = dist_tensor_scalar(1);
        TCHECK(dist_tensor_softmax(u) == NULL && HAS("softmax"), "softmax of a scalar: \"%s\"", MSG());
        dist_tensor_release(u);
    }
    dist_tensor_release(t);

    /* NULL in, NULL out, through a chain */
    TCHECK(dist_tensor_add(NULL, a) == NULL && HAS("NULL"), "add(NULL, a): \"%s\"", MSG());
    t = dist_tensor_sum(dist_tensor_tanh(dist_tensor_matmul(a, b)));      /* matmul fails; nothing is made */
    TCHECK(t == NULL, "a chain after a failed operation is NULL");
    {
        int64_t tg[1] = { 0 };
        int nulls = 0;
        dist_tensor_t *(*un[])(dist_tensor_t *) = { dist_tensor_neg, dist_tensor_relu, dist_tensor_tanh, dist_tensor_sigmoid, dist_tensor_exp, dist_tensor_log,
                                                  dist_tensor_sum, dist_tensor_mean, dist_tensor_softmax, dist_tensor_log_softmax };
        dist_tensor_t *(*bin[])(dist_tensor_t *, dist_tensor_t *) = { dist_tensor_add, dist_tensor_sub, dist_tensor_mul, dist_tensor_div, dist_tensor_matmul };
        for (size_t i = 0; i < sizeof un / sizeof *un; i++) nulls += un[i](NULL) == NULL;
        for (size_t i = 0; i < sizeof bin / sizeof *bin; i++) nulls += (bin[i](NULL, a) == NULL) + (bin[i](a, NULL) == NULL);
        nulls += dist_tensor_scale(NULL, 2) == NULL;
        nulls += dist_tensor_nll_loss(NULL, tg) == NULL;
        nulls += dist_tensor_cross_entropy(NULL, tg) == NULL;
        nulls += dist_tensor_dropout(NULL, 0.5f, 1, 1) == NULL;
        nulls += dist_tensor_dropout(NULL, 0.5f, 1, 0) == NULL;
        nulls += dist_tensor_linear(NULL, a, NULL) == NULL;
        nulls += dist_tensor_linear(a, NULL, NULL) == NULL;
        TCHECK(nulls == 10 + 10 + 7, "NULL in gives NULL out: %d of 27 operations", nulls);
        TCHECK(dist_tensor_numel(NULL) == 0 && dist_tensor_ndim(NULL) == 0 && dist_tensor_data(NULL) == NULL && dist_tensor_item(NULL) == 0.0f &&
                   dist_tensor_grad(NULL) == NULL && !dist_tensor_requires_grad(NULL) && dist_tensor_retain(NULL) == NULL,
               "accessors of NULL");
        dist_tensor_release(NULL);
        dist_tensor_zero_grad(NULL);
        dist_tensor_set_requires_grad(NULL, 1);
    }

    /* constructors and accessors */
    {
        int64_t sh5[5] = { 1, 1, 1, 1, 1 }, neg[2] = { 2, -1 }, big[1] = { 10000 };
        TCHECK(dist_tensor_new(5, sh5, NULL) == NULL && HAS("5 dimensions"), "a 5-D tensor: \"%s\"", MSG());
        TCHECK(dist_tensor_new(2, neg, NULL) == NULL && HAS("-1"), "a dimension of -1: \"%s\"", MSG());
        TCHECK(dist_tensor_new(2, NULL, NULL) == NULL, "a NULL shape");
        t = dist_tensor_new(3, s234, NULL);
        int zero = 1;
        for (size_t i = 0; t && i < 24; i++) zero &= dist_tensor_data(t)[i] == 0.0f;
        TCHECK(t && zero && dist_tensor_numel(t) == 24 && dist_tensor_ndim(t) == 3 && dist_tensor_dim(t, -1) == 4 && dist_tensor_dim(t, -3) == 2 &&
                   dist_tensor_dim(t, 3) == 0 && dist_tensor_dim(t, -4) == 0,
               "new(NULL data): zeros; ndim, numel, dim(i), dim(-i)");
        dist_tensor_release(t);
        t = dist_tensor_full(2, s23, 2.5f);
        TCHECK(t && dist_tensor_data(t)[5] == 2.5f && dist_tensor_item(t) == 2.5f, "full");
        dist_tensor_release(t);
        t = dist_tensor_scalar(-4.0f);
        TCHECK(t && dist_tensor_ndim(t) == 0 && dist_tensor_numel(t) == 1 && dist_tensor_item(t) == -4.0f, "scalar");
        TCHECK(dist_tensor_retain(t) == t, "retain returns the tensor");
        dist_tensor_release(t); dist_tensor_release(t);
        dist_tensor_t *r1 = dist_tensor_randn(1, big, 2.0f, 9), *r2 = dist_tensor_randn(1, big, 2.0f, 9), *r3 = dist_tensor_randn(1, big, 2.0f, 10);
        dist_tensor_t *q1 = dist_tensor_uniform(1, big, -3.0f, 5.0f, 9);
        if (r1 && r2 && r3 && q1) {
            double m = 0, s = 0, qm = 0, qlo = 1e9, qhi = -1e9;
            for (int i = 0; i < 10000; i++) { m += dist_tensor_data(r1)[i]; s += (double)dist_tensor_data(r1)[i] * dist_tensor_data(r1)[i]; }
            m /= 10000;
            s = sqrt(s / 10000 - m * m);
            for (int i = 0; i < 10000; i++) { double q = dist_tensor_data(q1)[i]; qm += q; qlo = fmin(qlo, q); qhi = fmax(qhi, q); }
            qm /= 10000;
            TCHECK(memcmp(dist_tensor_data(r1), dist_tensor_data(r2), 10000 * sizeof(float)) == 0, "randn: the same seed gives the same tensor");
            TCHECK(memcmp(dist_tensor_data(r1), dist_tensor_data(r3), 10000 * sizeof(float)) != 0, "randn: another seed another tensor");
            TCHECK(fabs(m) < 0.1 && fabs(s - 2.0) < 0.1, "randn(stddev 2): mean %.3f, stddev %.3f", m, s);
            TCHECK(qlo >= -3.0 && qhi < 5.0 && fabs(qm - 1.0) < 0.1 && qlo < -2.9 && qhi > 4.9, "uniform [-3,5): min %.3f max %.3f mean %.3f", qlo, qhi, qm);
        } else {
            TCHECK(0, "randn/uniform: %s", MSG());
        }
        dist_tensor_release(r1); dist_tensor_release(r2); dist_tensor_release(r3); dist_tensor_release(q1);
    }
    dist_tensor_release(a);
    dist_tensor_release(b);

    /* in child processes: a crash there is a failed check, not the end of this test */
    {
        char crashed[300] = "", what[200];
        size_t o = 0;
        for (g_toggle_op = 0; g_toggle_op < N_TOGGLE; g_toggle_op++) {
            snprintf(what, sizeof what, "backward of sum(%s(x)) after set_requires_grad(x, 0) on a leaf the graph already uses (must not crash)",
                     g_toggle_names[g_toggle_op]);
            if (probe(what, probe_toggle, 1) && o < sizeof crashed) o += (size_t)snprintf(crashed + o, sizeof crashed - o, " %s", g_toggle_names[g_toggle_op]);
        }
        if (crashed[0]) printf("     (crashed for:%s)\n", crashed);
    }
    probe("broadcasting against an empty dimension ([0,3]+[3] is [0,3], [0]*[1] is [0], as numpy)", probe_empty_broadcast, 1);

    group_line(before, "requires_grad and no_grad: propagation, nested no_grad builds no graph (backward refuses with a sentence), detach; "
               "backward errors, shape errors (matmul, broadcast, linear, nll targets) and NULL chains with sentences; constructors");
}

/* ------------------------------------------------------------------------
   Group 4: optimizers against torch's update rules in float64. */
typedef struct {
    const char *name;
    int adam;
    float lr, mom, wd, b1, b2, eps;
    int quad;                    /* loss 0.5 sum(C p^2) (gradient C p) instead of sum(C p) (gradient C) */
    int late;                    /* the second parameter first gets a gradient at step 3 */
} optcase;

typedef struct {
    size_t n;
    double w[8], buf[8], m[8], v[8];
    int has_buf;
    int64_t step;
} refparam;

/* torch.optim.SGD (dampening 0, no nesterov) and torch.optim.Adam (no
   amsgrad), for one parameter that has gradient g this step. */
static void ref_update(const optcase *c, refparam *p, const double *g) {
    p->step++;
    if (!c->adam) {
        for (size_t k = 0; k < p->n; k++) {
            double d = g[k];
            if (c->wd != 0) d += (double)c->wd * p->w[k];
            if (c->mom != 0) {
                p->buf[k] = p->has_buf ? (double)c->mom * p->buf[k] + d : d;
                d = p->buf[k];
            }
            p->w[k] -= (double)c->lr * d;
        }
        p->has_buf = 1;
    } else {
        double bc1 = 1 - pow((double)c->b1, (double)p->step), bc2 = 1 - pow((double)c->b2, (double)p->step);
        for (size_t k = 0; k < p->n; k++) {
            double d = g[k];
            if (c->wd != 0) d += (double)c->wd * p->w[k];
            p->m[k] = (double)c->b1 * p->m[k] + (1 - (double)c->b1) * d;
            p->v[k] = (double)c->b2 * p->v[k] + (1 - (double)c->b2) * d * d;
            double denom = sqrt(p->v[k]) / sqrt(bc2) + (double)c->eps;
            p->w[k] -= (double)c->lr / bc1 * p->m[k] / denom;
        }
    }
}

static double g_opt_worst;

static void run_opt_case(const optcase *c) {
    int64_t sh0[2] = { 2, 3 }, sh1[1] = { 4 };
    dist_tensor_t *p[2], *C[2];
    refparam rp[2];
    double cref[2][8], w0[2][8];
    memset(rp, 0, sizeof rp);
    for (int i = 0; i < 2; i++) {
        float w[8], cc[8];
        size_t n = i ? 4 : 6;
        for (size_t k = 0; k < n; k++) {
            w[k] = (float)((urand() < 0.5 ? -1 : 1) * urange(0.5, 1.5));
            cc[k] = (float)((urand() < 0.5 ? -1 : 1) * urange(0.3, 1.0));
            rp[i].w[k] = w0[i][k] = w[k];
            cref[i][k] = cc[k];
        }
        rp[i].n = n;
        p[i] = dist_tensor_new(i ? 1 : 2, i ? sh1 : sh0, w);
        C[i] = dist_tensor_new(i ? 1 : 2, i ? sh1 : sh0, cc);
        dist_tensor_set_requires_grad(p[i], 1);
    }
    dist_optim_t *o = c->adam ? dist_optim_adam(2, p, c->lr, c->b1, c->b2, c->eps, c->wd) : dist_optim_sgd(2, p, c->lr, c->mom, c->wd);
    if (!o) { TCHECK(0, "%s: %s", c->name, MSG()); goto done; }
    for (int step = 1; step <= 5; step++) {
        int use1 = !(c->late && step <= 2);
        dist_tensor_t *terms[2] = { NULL, NULL }, *loss;
        dist_optim_zero_grad(o);
        for (int i = 0; i < 2; i++) {
            if (i == 1 && !use1) continue;
            dist_tensor_t *pc, *s;
            if (c->quad) {
                dist_tensor_t *pp = dist_tensor_mul(p[i], p[i]);
                pc = dist_tensor_mul(pp, C[i]);
                dist_tensor_release(pp);
                s = dist_tensor_sum(pc);
                terms[i] = dist_tensor_scale(s, 0.5f);
                dist_tensor_release(s);
            } else {
                pc = dist_tensor_mul(p[i], C[i]);
                terms[i] = dist_tensor_sum(pc);
            }
            dist_tensor_release(pc);
        }
        loss = terms[1] ? dist_tensor_add(terms[0], terms[1]) : dist_tensor_retain(terms[0]);
        TCHECK(loss && dist_tensor_backward(loss, NULL) == DIST_OK, "%s step %d: backward: %s", c->name, step, MSG());
        dist_tensor_release(terms[0]); dist_tensor_release(terms[1]); dist_tensor_release(loss);
        TCHECK(c->late && step <= 2 ? dist_tensor_grad(p[1]) == NULL : dist_tensor_grad(p[1]) != NULL, "%s step %d: the second parameter's gradient", c->name, step);
        TCHECK(dist_optim_step(o) == DIST_OK, "%s step %d: %s", c->name, step, MSG());
        for (int i = 0; i < 2; i++) {
            double g[8];
            if (i == 1 && !use1) continue;              /* torch: no gradient, no update, no step counted */
            for (size_t k = 0; k < rp[i].n; k++) g[k] = c->quad ? cref[i][k] * rp[i].w[k] : cref[i][k];
            ref_update(c, &rp[i], g);
        }
        for (int i = 0; i < 2; i++) {
            char what[160];
            double mag[8];
            for (size_t k = 0; k < rp[i].n; k++) mag[k] = fabs(rp[i].w[k]) + fabs(w0[i][k]);   /* w0 - sum of updates: the terms' size */
            snprintf(what, sizeof what, "%s: parameter %d after step %d", c->name, i, step);
            if (cmp_arr(what, dist_tensor_data(p[i]), rp[i].w, mag, rp[i].n, 1e-6, 0, &g_opt_worst)) goto done;
        }
    }
done:
    dist_optim_free(o);
    for (int i = 0; i < 2; i++) { dist_tensor_release(p[i]); dist_tensor_release(C[i]); }
}

static void test_optimizers(void) {
    int before = g_fails;
    const optcase cases[] = {
        { "SGD lr 0.1", 0, 0.1f, 0, 0, 0, 0, 0, 0, 0 },
        { "SGD lr 0.1 momentum 0.9", 0, 0.1f, 0.9f, 0, 0, 0, 0, 0, 0 },
        { "SGD lr 0.1 weight_decay 0.05", 0, 0.1f, 0, 0.05f, 0, 0, 0, 0, 0 },
        { "SGD lr 0.05 momentum 0.9 weight_decay 0.1 (quadratic loss)", 0, 0.05f, 0.9f, 0.1f, 0, 0, 0, 1, 0 },
        { "SGD lr 0.2 momentum 0.5 (quadratic loss)", 0, 0.2f, 0.5f, 0, 0, 0, 0, 1, 0 },
        { "Adam lr 0.01 (0.9, 0.999) eps 1e-8", 1, 0.01f, 0, 0, 0.9f, 0.999f, 1e-8f, 0, 0 },
        { "Adam lr 0.01 (0.9, 0.999) eps 1e-8 weight_decay 0.1 (quadratic loss)", 1, 0.01f, 0, 0.1f, 0.9f, 0.999f, 1e-8f, 1, 0 },
        { "Adam lr 0.05 (0.5, 0.8) eps 0.1 (quadratic loss)", 1, 0.05f, 0, 0, 0.5f, 0.8f, 0.1f, 1, 0 },
        { "SGD lr 0.1 momentum 0.9, a parameter that first gets a gradient at step 3", 0, 0.1f, 0.9f, 0, 0, 0, 0, 0, 1 },
        { "Adam lr 0.01 (0.9, 0.999), a parameter that first gets a gradient at step 3 (torch counts its steps from then)", 1, 0.01f, 0, 0, 0.9f, 0.999f, 1e-8f, 0, 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_opt_case(&cases[i]);
    /* argument errors */
    {
        dist_tensor_t *ps[2] = { NULL, NULL };
        TCHECK(dist_optim_sgd(1, ps, 0.1f, 0, 0) == NULL && HAS("parameter 0 is NULL"), "optimizer of a NULL parameter: \"%s\"", MSG());
        TCHECK(dist_optim_adam(-1, ps, 0.1f, 0.9f, 0.999f, 1e-8f, 0) == NULL && HAS("-1 parameters"), "optimizer of -1 parameters: \"%s\"", MSG());
        TCHECK(dist_optim_step(NULL) == DIST_ERR_INVALID && HAS("NULL"), "step(NULL): \"%s\"", MSG());
        dist_optim_t *o = dist_optim_sgd(0, NULL, 0.1f, 0, 0);
        TCHECK(o && dist_optim_step(o) == DIST_OK, "an optimizer of no parameters steps");
        dist_optim_zero_grad(o);
        dist_optim_free(o);
        dist_optim_free(NULL);
        dist_optim_zero_grad(NULL);
        /* the optimizer keeps its own references: the parameter outlives the caller's */
        ps[0] = dist_tensor_full(1, (const int64_t[]){ 3 }, 1.0f);
        dist_tensor_set_requires_grad(ps[0], 1);
        o = dist_optim_sgd(1, ps, 0.5f, 0, 0);
        dist_tensor_t *l = dist_tensor_sum(ps[0]);
        dist_tensor_backward(l, NULL);
        dist_tensor_release(l);
        dist_tensor_release(ps[0]);
        TCHECK(o && dist_optim_step(o) == DIST_OK, "stepping a parameter whose caller released it");
        dist_optim_free(o);
    }
    group_line(before, "optimizers: SGD (plain, momentum, weight decay, both) and Adam (with/without weight decay, other betas/eps), 5 steps on "
               "two parameters, against float64 torch update rules (worst error %.2g relative, tolerance 1e-6); late-gradient parameter; argument errors",
               g_opt_worst);
}

/* The parameter lock: a step waits for the readers under way (and leaves
   the parameter alone until they exit); readers run together. */
typedef struct { dist_optim_t *o; volatile int done; dist_result res; } lock_step;
static void *lock_step_thread(void *arg) {
    lock_step *ls = (lock_step *)arg;
    ls->res = dist_optim_step(ls->o);
    __atomic_store_n(&ls->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}
static void *lock_reader_thread(void *arg) {
    dist_params_read_enter();                 /* while the main thread reads too */
    __atomic_store_n((volatile int *)arg, 1, __ATOMIC_SEQ_CST);
    dist_params_read_exit();
    return NULL;
}
static void test_param_lock(void) {
    int before = g_fails, other = 0;
    float w_in_read = 0, w_after = 0;
    dist_tensor_t *w = dist_tensor_full(1, (const int64_t[]){ 4 }, 1.0f), *l;
    dist_tensor_set_requires_grad(w, 1);
    l = dist_tensor_sum(w);                   /* dl/dw = 1: one step of lr 0.5 makes w 0.5 */
    TCHECK(dist_tensor_backward(l, NULL) == DIST_OK, "param lock: backward: %s", MSG());
    lock_step ls = { dist_optim_sgd(1, &w, 0.5f, 0, 0), 0, DIST_OK };
    pthread_t th, rd;
    dist_params_read_enter();
    TCHECK(pthread_create(&rd, NULL, lock_reader_thread, &other) == 0, "param lock: pthread_create");
    pthread_join(rd, NULL);
    TCHECK(other == 1, "param lock: a second reader did not get in while the first read");
    TCHECK(pthread_create(&th, NULL, lock_step_thread, &ls) == 0, "param lock: pthread_create");
    usleep(100 * 1000);
    w_in_read = dist_tensor_data(w)[0];
    TCHECK(!__atomic_load_n(&ls.done, __ATOMIC_SEQ_CST) && w_in_read == 1.0f,
           "param lock: a step ran while a reader held the lock (done %d, w %g)", ls.done, (double)w_in_read);
    dist_params_read_exit();
    pthread_join(th, NULL);
    w_after = dist_tensor_data(w)[0];
    TCHECK(ls.res == DIST_OK && w_after == 0.5f, "param lock: after the reader left, the step gave w = %g (wanted 0.5): %s", (double)w_after, MSG());
    dist_optim_free(ls.o);
    dist_tensor_release(l);
    dist_tensor_release(w);
    group_line(before, "parameter lock: two readers at once; a step waits 100 ms for a reader (w stays 1), then runs (w 1 -> 0.5)");
}

/* ------------------------------------------------------------------------
   Group 5: a small MLP learns a separable toy set (sanity check). */
static void test_mlp(void) {
    int before = g_fails;
    enum { N = 128, H = 16 };
    float X[N * 2];
    int64_t Y[N], xs[2] = { N, 2 };
    char summary[2][160];
    for (int i = 0; i < N; i++) {
        double a, b, m;
        do { a = urange(-1, 1); b = urange(-1, 1); m = a - 0.7 * b + 0.2; } while (fabs(m) < 0.15);
        X[2 * i] = (float)a; X[2 * i + 1] = (float)b;
        Y[i] = m > 0;
    }
    dist_tensor_t *x = dist_tensor_new(2, xs, X);
    for (int kind = 0; kind < 2; kind++) {
        dist_tensor_t *w1 = dist_tensor_randn(2, (const int64_t[]){ H, 2 }, 1.0f, 11), *b1 = dist_tensor_new(1, (const int64_t[]){ H }, NULL);
        dist_tensor_t *w2 = dist_tensor_randn(2, (const int64_t[]){ 2, H }, 0.3f, 12), *b2 = dist_tensor_new(1, (const int64_t[]){ 2 }, NULL);
        dist_tensor_t *ps[4] = { w1, b1, w2, b2 };
        for (int i = 0; i < 4; i++) dist_tensor_set_requires_grad(ps[i], 1);
        dist_optim_t *o = kind == 0 ? dist_optim_sgd(4, ps, 0.3f, 0.9f, 0) : dist_optim_adam(4, ps, 0.03f, 0.9f, 0.999f, 1e-8f, 0);
        float l0 = 0, lN = 0;
        int correct = 0;
        for (int step = 0; step <= 200; step++) {
            if (step == 200) dist_no_grad_enter();           /* the final evaluation */
            dist_tensor_t *a1 = dist_tensor_linear(x, w1, b1), *h = dist_tensor_tanh(a1), *logits = dist_tensor_linear(h, w2, b2);
            dist_tensor_t *loss = dist_tensor_cross_entropy(logits, Y);
            if (!loss) { TCHECK(0, "mlp step %d: %s", step, MSG()); dist_tensor_release(a1); dist_tensor_release(h); dist_tensor_release(logits); break; }
            if (step == 0) l0 = dist_tensor_item(loss);
            if (step == 200) {
                lN = dist_tensor_item(loss);
                for (int i = 0; i < N; i++) correct += (dist_tensor_data(logits)[2 * i + 1] > dist_tensor_data(logits)[2 * i]) == (Y[i] == 1);
                dist_no_grad_exit();
            } else {
                dist_optim_zero_grad(o);
                TCHECK(dist_tensor_backward(loss, NULL) == DIST_OK, "mlp backward: %s", MSG());
                TCHECK(dist_optim_step(o) == DIST_OK, "mlp step: %s", MSG());
            }
            dist_tensor_release(a1); dist_tensor_release(h); dist_tensor_release(logits); dist_tensor_release(loss);
        }
        TCHECK(lN < 0.1f * l0, "mlp (%s): the loss went from %.4f to %.4f (wanted < 0.1 of the start)", kind ? "Adam" : "SGD", (double)l0, (double)lN);
        TCHECK(correct >= N - 2, "mlp (%s): %d of %d points classified right", kind ? "Adam" : "SGD", correct, N);
        snprintf(summary[kind], sizeof summary[kind], "%s %.3f -> %.4f, %d/%d right", kind ? "Adam lr 0.03" : "SGD lr 0.3 momentum 0.9", (double)l0, (double)lN, correct, N);
        dist_optim_free(o);
        for (int i = 0; i < 4; i++) dist_tensor_release(ps[i]);
    }
    dist_tensor_release(x);
    group_line(before, "sanity check (not a reference comparison): 2-16-2 tanh MLP, cross_entropy, 200 full-batch steps on %d separable points: %s; %s",
               N, summary[0], summary[1]);
}

/* ------------------------------------------------------------------------
   Group 6: matmul and linear against naive float64 loops, and speed. */
static void test_matmul_big(void) {
    int before = g_fails;
    const int64_t shapes[][3] = { { 5, 7, 3 }, { 64, 784, 128 }, { 17, 300, 600 }, { 1, 1, 1 }, { 3, 0, 4 }, { 0, 3, 2 }, { 130, 129, 513 } };
    double worst = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2], sa[2] = { m, k }, sb[2] = { k, n }, sc[2] = { m, n };
        char what[160];
        dist_tensor_t *A = dist_tensor_uniform(2, sa, -1, 1, 1000 + s), *B = dist_tensor_uniform(2, sb, -1, 1, 2000 + s), *G = dist_tensor_uniform(2, sc, -1, 1, 3000 + s);
        dist_tensor_set_requires_grad(A, 1);
        dist_tensor_set_requires_grad(B, 1);
        dist_tensor_t *Cm = dist_tensor_matmul(A, B);
        if (!Cm) { TCHECK(0, "matmul [%lld,%lld]x[%lld,%lld]: %s", (long long)m, (long long)k, (long long)k, (long long)n, MSG()); goto next; }
        rten ra = rt_from(A), rb = rt_from(B), rg = rt_from(G), rc = r_matmul(&ra, &rb);
        snprintf(what, sizeof what, "matmul [%lld,%lld]x[%lld,%lld]", (long long)m, (long long)k, (long long)k, (long long)n);
        cmp_arr(what, dist_tensor_data(Cm), rc.d, rc.mag, rc.n, 1e-5, 0, &worst);
        /* dA = G B^T, dB = A^T G */
        TCHECK(dist_tensor_backward(Cm, G) == DIST_OK, "%s backward: %s", what, MSG());
        if (m * k > 0) {
            rten da = rt_make(2, sa, 1), db = rt_make(2, sb, 1);
            for (int64_t i = 0; i < m; i++)
                for (int64_t p = 0; p < k; p++)
                    for (int64_t j = 0; j < n; j++) {
                        da.d[i * k + p] += rg.d[i * n + j] * rb.d[p * n + j];
                        da.mag[i * k + p] += fabs(rg.d[i * n + j] * rb.d[p * n + j]);
                        db.d[p * n + j] += ra.d[i * k + p] * rg.d[i * n + j];
                        db.mag[p * n + j] += fabs(ra.d[i * k + p] * rg.d[i * n + j]);
                    }
            snprintf(what, sizeof what, "matmul [%lld,%lld]x[%lld,%lld] dA", (long long)m, (long long)k, (long long)k, (long long)n);
            if (dist_tensor_grad(A)) cmp_arr(what, dist_tensor_data(dist_tensor_grad(A)), da.d, da.mag, da.n, 1e-5, 0, &worst);
            else TCHECK(0, "%s missing", what);
            snprintf(what, sizeof what, "matmul [%lld,%lld]x[%lld,%lld] dB", (long long)m, (long long)k, (long long)k, (long long)n);
            if (dist_tensor_grad(B)) cmp_arr(what, dist_tensor_data(dist_tensor_grad(B)), db.d, db.mag, db.n, 1e-5, 0, &worst);
            else TCHECK(0, "%s missing", what);
            rt_free(&da); rt_free(&db);
        }
        rt_free(&ra); rt_free(&rb); rt_free(&rg); rt_free(&rc);
    next:
        dist_tensor_release(A); dist_tensor_release(B); dist_tensor_release(G); dist_tensor_release(Cm);
    }

    /* linear 784 -> 128, batch 64: forward and backward against float64 */
    {
        int64_t N = 64, in = 784, out = 128, sx[2] = { N, in }, sw[2] = { out, in }, sbias[1] = { out }, sy[2] = { N, out };
        dist_tensor_t *x = dist_tensor_uniform(2, sx, 0, 1, 51), *w = dist_tensor_randn(2, sw, 0.05f, 52), *b = dist_tensor_uniform(1, sbias, -0.1f, 0.1f, 53);
        dist_tensor_t *G = dist_tensor_uniform(2, sy, -1, 1, 54), *y;
        for (int i = 0; i < 3; i++) dist_tensor_set_requires_grad(i == 0 ? x : i == 1 ? w : b, 1);
        y = dist_tensor_linear(x, w, b);
        rten rx = rt_from(x), rw = rt_from(w), rb = rt_from(b), rg = rt_from(G), ry = r_linear(&rx, &rw, &rb);
        if (y) {
            cmp_arr("linear 784->128 batch 64 forward", dist_tensor_data(y), ry.d, ry.mag, ry.n, 1e-5, 0, &worst);
            TCHECK(dist_tensor_backward(y, G) == DIST_OK, "linear backward: %s", MSG());
            rten dx = rt_make(2, sx, 1), dw = rt_make(2, sw, 1), db = rt_make(1, sbias, 1);
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < out; j++) {
                    double g = rg.d[i * out + j];
                    db.d[j] += g; db.mag[j] += fabs(g);
                    for (int64_t p = 0; p < in; p++) {
                        dx.d[i * in + p] += g * rw.d[j * in + p]; dx.mag[i * in + p] += fabs(g * rw.d[j * in + p]);
                        dw.d[j * in + p] += g * rx.d[i * in + p]; dw.mag[j * in + p] += fabs(g * rx.d[i * in + p]);
                    }
                }
            if (dist_tensor_grad(x) && dist_tensor_grad(w) && dist_tensor_grad(b)) {
                cmp_arr("linear 784->128 dx", dist_tensor_data(dist_tensor_grad(x)), dx.d, dx.mag, dx.n, 1e-5, 0, &worst);
                cmp_arr("linear 784->128 dw", dist_tensor_data(dist_tensor_grad(w)), dw.d, dw.mag, dw.n, 1e-5, 0, &worst);
                cmp_arr("linear 784->128 db", dist_tensor_data(dist_tensor_grad(b)), db.d, db.mag, db.n, 1e-5, 0, &worst);
            } else {
                TCHECK(0, "linear 784->128: a gradient is missing");
            }
            rt_free(&dx); rt_free(&dw); rt_free(&db);
        } else {
            TCHECK(0, "linear 784->128: %s", MSG());
        }
        rt_free(&rx); rt_free(&rw); rt_free(&rb); rt_free(&rg); rt_free(&ry);
        dist_tensor_release(x); dist_tensor_release(w); dist_tensor_release(b); dist_tensor_release(G); dist_tensor_release(y);
    }

    /* speed (printed, not asserted) */
    double gf_mm = 0, gf_lin = 0, gf_lin_x = 0;
    {
        int64_t sa[2] = { 64, 784 }, sb[2] = { 784, 128 }, sw[2] = { 128, 784 }, sbias[1] = { 128 }, sy[2] = { 64, 128 };
        dist_tensor_t *A = dist_tensor_uniform(2, sa, -1, 1, 1), *B = dist_tensor_uniform(2, sb, -1, 1, 2);
        dist_tensor_t *w = dist_tensor_randn(2, sw, 0.05f, 3), *bias = dist_tensor_new(1, sbias, NULL), *G = dist_tensor_uniform(2, sy, -1, 1, 4);
        double flop = 2.0 * 64 * 784 * 128;
        int iters = 0;
        int64_t t0 = now_ns();
        do {
            dist_tensor_release(dist_tensor_matmul(A, B));
            iters++;
        } while (secs_since(t0) < 0.3 || iters < 3);
        gf_mm = flop * iters / secs_since(t0) / 1e9;
        dist_tensor_set_requires_grad(w, 1);
        dist_tensor_set_requires_grad(bias, 1);
        for (int with_dx = 0; with_dx < 2; with_dx++) {
            if (with_dx) dist_tensor_set_requires_grad(A, 1);
            iters = 0;
            t0 = now_ns();
            do {
                dist_tensor_t *y = dist_tensor_linear(A, w, bias);
                dist_tensor_backward(y, G);
                dist_tensor_release(y);
                dist_tensor_zero_grad(w); dist_tensor_zero_grad(bias); dist_tensor_zero_grad(A);
                iters++;
            } while (secs_since(t0) < 0.3 || iters < 3);
            /* forward 2NKO, dW 2NKO, dx 2NKO (when x needs it) */
            double f = (with_dx ? 3 : 2) * flop;
            *(with_dx ? &gf_lin_x : &gf_lin) = f * iters / secs_since(t0) / 1e9;
        }
        dist_tensor_release(A); dist_tensor_release(B); dist_tensor_release(w); dist_tensor_release(bias); dist_tensor_release(G);
    }
    group_line(before, "matmul and linear vs naive float64 loops ([5,7]x[7,3], [64,784]x[784,128], [17,300]x[300,600], [130,129]x[129,513], empty; "
               "dA, dB; linear 784->128 batch 64 forward, dx, dw, db): worst %.2g of the terms' size (tolerance 1e-5)",
               worst);
    printf("     speed (one thread, not asserted): matmul [64,784]x[784,128] %.2f GFLOP/s; linear 784->128 batch 64 forward+backward "
           "%.2f GFLOP/s (dW, db only), %.2f GFLOP/s (dx too)%s\n",
           gf_mm, gf_lin, gf_lin_x,
#if defined(__SANITIZE_ADDRESS__)
           " [under AddressSanitizer: not representative]"
#else
           ""
#endif
    );
}

/* ------------------------------------------------------------------------
   Group 7: tensors as values. */
static void test_values(void) {
    int before = g_fails;
    int64_t sh[2] = { 3, 4 };
    dist_tensor_view tv;
    float saved[12];
    dist_tensor_t *t = dist_tensor_randn(2, sh, 1.0f, 77), *u, *w;
    dist_value_t *v = dist_value_from_tensor(t), *dec = NULL;
    float *tdata = dist_tensor_data(t);
    memcpy(saved, tdata, sizeof saved);
    TCHECK(v && dist_value_get_tensor(v, &tv) == DIST_OK && tv.dtype == DIST_FLOAT32 && tv.ndim == 2 && tv.shape[0] == 3 && tv.shape[1] == 4 &&
               tv.nbytes == 48 && tv.data == (void *)tdata,
           "value_from_tensor: a float32 [3,4] value over the tensor's own data (no copy)");
    tdata[0] = 123.0f;                                   /* no copy: the value sees it */
    TCHECK(dist_value_get_tensor(v, &tv) == DIST_OK && ((float *)tv.data)[0] == 123.0f, "the value carries the data as they are");
    tdata[0] = saved[0];
    dist_tensor_release(t);                              /* the value keeps it alive (ASan would see a use after free below) */
    TCHECK(dist_value_get_tensor(v, &tv) == DIST_OK && memcmp(tv.data, saved, sizeof saved) == 0, "the value holds the tensor after the caller released it");
    u = dist_tensor_from_value(v);
    TCHECK(u && dist_tensor_ndim(u) == 2 && dist_tensor_dim(u, 0) == 3 && dist_tensor_dim(u, 1) == 4 && memcmp(dist_tensor_data(u), saved, sizeof saved) == 0 &&
               dist_tensor_data(u) != tv.data && !dist_tensor_requires_grad(u),
           "tensor_from_value: a copy, a leaf");
    dist_tensor_release(u);
    /* through the wire format */
    {
        size_t len = 0;
        dist_value_encode(v, NULL, 0, &len);
        void *buf = malloc(len);
        TCHECK(dist_value_encode(v, buf, len, &len) == DIST_OK && dist_value_decode(buf, len, &dec) == DIST_OK, "encode/decode: %s", MSG());
        free(buf);
        w = dist_tensor_from_value(dec);
        TCHECK(w && dist_tensor_numel(w) == 12 && memcmp(dist_tensor_data(w), saved, sizeof saved) == 0, "tensor_from_value of a decoded value");
        dist_tensor_release(w);
        dist_value_free(dec);
    }
    dist_value_free(v);                                  /* releases the tensor (LeakSanitizer otherwise) */

    /* a graph node as a value: the value holds the node and its graph */
    {
        dist_tensor_t *x = dist_tensor_uniform(1, (const int64_t[]){ 5 }, -1, 1, 4), *y;
        dist_tensor_set_requires_grad(x, 1);
        y = dist_tensor_tanh(x);
        v = dist_value_from_tensor(y);
        dist_tensor_release(y);
        dist_tensor_release(x);
        TCHECK(v && dist_value_get_tensor(v, &tv) == DIST_OK && tv.shape[0] == 5, "a value of an operation's result");
        dist_value_free(v);
    }
    /* float64, 0-D, 4-D */
    {
        double d[8] = { 1.5, -2.25, 3.0e-8, 1e30, -0.0, 7.0, 1.0 / 3.0, 2.0 / 3.0 };
        int64_t s3[3] = { 2, 2, 2 }, s4[4] = { 1, 2, 1, 3 };
        v = dist_value_tensor(DIST_FLOAT64, 3, s3, d);
        t = dist_tensor_from_value(v);
        int bad = !t || dist_tensor_ndim(t) != 3 || dist_tensor_numel(t) != 8;
        for (int i = 0; !bad && i < 8; i++) bad = dist_tensor_data(t)[i] != (float)d[i];
        TCHECK(!bad, "tensor_from_value of a float64 [2,2,2] value: converted to float32 (%s)", MSG());
        dist_tensor_release(t);
        dist_value_free(v);
        float f = 2.5f, f6[6] = { 1, 2, 3, 4, 5, 6 };
        v = dist_value_tensor(DIST_FLOAT32, 0, NULL, &f);
        t = dist_tensor_from_value(v);
        TCHECK(t && dist_tensor_ndim(t) == 0 && dist_tensor_item(t) == 2.5f, "a 0-D value");
        dist_tensor_release(t);
        dist_value_free(v);
        v = dist_value_tensor(DIST_FLOAT32, 4, s4, f6);
        t = dist_tensor_from_value(v);
        TCHECK(t && dist_tensor_ndim(t) == 4 && dist_tensor_dim(t, 3) == 3 && dist_tensor_data(t)[5] == 6, "a 4-D value");
        dist_value_t *back = dist_value_from_tensor(t);
        TCHECK(back && dist_value_equal(back, v), "4-D: value -> tensor -> value is the same value");
        dist_value_free(back);
        dist_tensor_release(t);
        dist_value_free(v);
    }
    /* refused */
    {
        int32_t iv[3] = { 1, 2, 3 };
        int64_t s1[1] = { 3 }, s5[5] = { 1, 1, 1, 1, 1 };
        float f1 = 1;
        v = dist_value_tensor(DIST_INT32, 1, s1, iv);
        TCHECK(dist_tensor_from_value(v) == NULL && HAS("int32"), "an int32 tensor value: \"%s\"", MSG());
        dist_value_free(v);
        v = dist_value_tensor(DIST_FLOAT32, 5, s5, &f1);
        TCHECK(dist_tensor_from_value(v) == NULL && HAS("5 dimensions"), "a 5-D value: \"%s\"", MSG());
        dist_value_free(v);
        v = dist_value_int(3);
        TCHECK(dist_tensor_from_value(v) == NULL && strlen(MSG()) > 0, "an int value: \"%s\"", MSG());
        dist_value_free(v);
        TCHECK(dist_tensor_from_value(NULL) == NULL, "tensor_from_value(NULL)");
        TCHECK(dist_value_from_tensor(NULL) == NULL && HAS("NULL"), "value_from_tensor(NULL): \"%s\"", MSG());
    }
    group_line(before, "values: from_tensor holds the tensor without a copy (alive after release, sees changes), from_value copies float32 and float64 "
               "(0-D to 4-D, through encode/decode), int32 / 5-D / non-tensors refused with sentences");
}

/* ------------------------------------------------------------------------
   Group 8: memory. */
static int probe_deep_second_input(void) {
    /* y = add(c, y): the chain runs through each node's second input */
    dist_tensor_t *x = dist_tensor_scalar(1.0f), *c = dist_tensor_scalar(0.0f), *y;
    dist_tensor_set_requires_grad(x, 1);
    y = dist_tensor_retain(x);
    for (int i = 0; i < 100000; i++) {
        dist_tensor_t *n = dist_tensor_add(c, y);
        dist_tensor_release(y);
        y = n;
    }
    int rc = y && dist_tensor_backward(y, NULL) == DIST_OK && dist_tensor_item(dist_tensor_grad(x)) == 1.0f ? 0 : 2;
    dist_tensor_release(y);
    dist_tensor_release(x);
    dist_tensor_release(c);
    return rc;
}

static void test_memory(void) {
    int before = g_fails;
    /* a chain of 200000 operations through the first input: backward and release without recursion */
    dist_tensor_t *x = dist_tensor_scalar(0.5f), *y;
    dist_tensor_set_requires_grad(x, 1);
    y = dist_tensor_retain(x);
    for (int i = 0; i < 200000 && y; i++) {
        dist_tensor_t *n = (i & 1) ? dist_tensor_scale(y, 1.0f) : dist_tensor_add(y, y);
        dist_tensor_t *m = (i & 1) ? dist_tensor_retain(n) : dist_tensor_scale(n, 0.5f);      /* (y + y) / 2 = y */
        dist_tensor_release(n);
        dist_tensor_release(y);
        y = m;
    }
    TCHECK(y && dist_tensor_backward(y, NULL) == DIST_OK && dist_tensor_grad(x) && dist_tensor_item(dist_tensor_grad(x)) == 1.0f,
           "a chain of 200000 operations: backward gives 1 (%s)", MSG());
    dist_tensor_release(y);
    dist_tensor_release(x);
    int deep2 = probe("a chain of 100000 operations through the second input (y = add(c, y)), released", probe_deep_second_input, 1);
    group_line(before, "memory: a chain of 200000 operations goes backward and is released without recursion%s; %s",
               deep2 ? "" : " (and 100000 through the second input)",
#if defined(__SANITIZE_ADDRESS__)
               "this run is under AddressSanitizer + LeakSanitizer (leaks are reported at exit)"
#else
               "run `make sanitize T=test_tensor` for AddressSanitizer + LeakSanitizer"
#endif
    );
}

/* 9. cat and stack: forward against an index map written here, and the
   gradient of sum(out * R) with respect to each input, which is R at the
   input's elements (each input given its own requires_grad: one without
   gets none); the 800 saved log-probabilities of an RL episode summed as
   sum(stack(800, lp, 0)): each gets gradient 1; errors with sentences. */
static uint64_t cs_seed = 99;
static float cs_rand(void) { cs_seed = cs_seed * 6364136223846793005ull + 1442695040888963407ull; return (float)((cs_seed >> 40) % 1000) / 100.0f - 5.0f; }

static void check_join(const char *name, int stack, int n, int nd, const int64_t (*shapes)[4], int dim) {
    dist_tensor_t *in[8], *out, *Rt, *loss;
    int64_t oshape[5];
    int ond = nd + stack, d = dim < 0 ? dim + ond : dim, bad = 0;
    size_t total = 1, inner = 1, outer = 1, orow;
    float *R;
    for (int i = 0; i < n; i++) {
        size_t m = 1;
        for (int k = 0; k < nd; k++) m *= (size_t)shapes[i][k];
        float *x = (float *)malloc((m ? m : 1) * sizeof(float));
        for (size_t k = 0; k < m; k++) x[k] = cs_rand();
        in[i] = dist_tensor_new(nd, shapes[i], x);
        dist_tensor_set_requires_grad(in[i], i != 1);          /* input 1 gets no gradient */
        free(x);
    }
    for (int k = 0, j = 0; k < ond; k++) oshape[k] = stack && k == d ? n : shapes[0][j++];
    if (!stack) { oshape[d] = 0; for (int i = 0; i < n; i++) oshape[d] += shapes[i][d]; }
    for (int k = 0; k < ond; k++) total *= (size_t)oshape[k];
    for (int k = 0; k < d; k++) outer *= (size_t)oshape[k];
    for (int k = d + 1; k < ond; k++) inner *= (size_t)oshape[k];
    orow = (size_t)oshape[d];
    out = stack ? dist_tensor_stack(n, in, dim) : dist_tensor_cat(n, in, dim);
    TCHECK(out != NULL, "%s: %s", name, MSG());
    if (!out) { for (int i = 0; i < n; i++) dist_tensor_release(in[i]); return; }
    TCHECK(dist_tensor_ndim(out) == ond, "%s: %d dimensions, want %d", name, dist_tensor_ndim(out), ond);
    for (int k = 0; k < ond && k < dist_tensor_ndim(out); k++) TCHECK(dist_tensor_dim(out, k) == oshape[k], "%s: dimension %d is %lld, want %lld", name, k, (long long)dist_tensor_dim(out, k), (long long)oshape[k]);
    R = (float *)malloc((total ? total : 1) * sizeof(float));
    for (size_t k = 0; k < total; k++) R[k] = cs_rand();
    Rt = dist_tensor_new(ond, oshape, R);
    {
        dist_tensor_t *prod = dist_tensor_mul(out, Rt);
        loss = dist_tensor_sum(prod);
        dist_tensor_release(prod);              /* (the loss keeps it) */
    }
    TCHECK(loss && dist_tensor_backward(loss, NULL) == DIST_OK, "%s: backward: %s", name, MSG());
    /* every output element: which input, which element of it */
    for (size_t o = 0; o < outer; o++)
        for (size_t r = 0, i = 0, base = 0; r < orow; r++) {
            size_t rows_i = stack ? 1 : (size_t)shapes[i][d];
            while (r - base >= rows_i) { base += rows_i; i++; rows_i = stack ? 1 : (size_t)shapes[i][d]; }
            for (size_t k = 0; k < inner; k++) {
                size_t oi = (o * orow + r) * inner + k, ii = (o * rows_i + (r - base)) * inner + k;
                float want = dist_tensor_data(in[i])[ii];
                dist_tensor_t *g = dist_tensor_grad(in[i]);
                if (dist_tensor_data(out)[oi] != want) bad |= 1;
                if (i == 1 ? g != NULL : (!g || dist_tensor_data(g)[ii] != R[oi])) bad |= 2;
            }
        }
    TCHECK(!(bad & 1), "%s: an element of the result is not the input's element it should be", name);
    TCHECK(!(bad & 2), "%s: an input's gradient is not R at its elements (or input 1, which needs none, got one)", name);
    if (!(bad & 3)) printf("ok   %s: forward and gradients exact\n", name);
    dist_tensor_release(loss); dist_tensor_release(Rt); dist_tensor_release(out); free(R);
    for (int i = 0; i < n; i++) dist_tensor_release(in[i]);
}

static void test_cat_stack(void) {
    static const int64_t a[3][4] = { { 2, 3 }, { 2, 1 }, { 2, 4 } }, b[3][4] = { { 1, 3 }, { 4, 3 }, { 2, 3 } };
    static const int64_t c[4][4] = { { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 4 } }, v[3][4] = { { 5 }, { 5 }, { 5 } };
    static const int64_t sc[3][4] = { { 0 }, { 0 }, { 0 } }, e[3][4] = { { 2, 0 }, { 2, 3 }, { 2, 0 } };
    check_join("cat of [2,3],[2,1],[2,4] along 1", 0, 3, 2, a, 1);
    check_join("cat of [2,3],[2,1],[2,4] along -1", 0, 3, 2, a, -1);
    check_join("cat of [1,3],[4,3],[2,3] along 0", 0, 3, 2, b, 0);
    check_join("cat of 4 x [2,3,4] along 1", 0, 4, 3, c, 1);
    check_join("cat of [2,0],[2,3],[2,0] along 1 (empty pieces)", 0, 3, 2, e, 1);
    check_join("stack of 3 x [5] along 0", 1, 3, 1, v, 0);
    check_join("stack of 3 x [5] along 1", 1, 3, 1, v, 1);
    check_join("stack of 4 x [2,3,4] along 2", 1, 4, 3, c, 2);
    check_join("stack of 3 scalars", 1, 3, 0, sc, 0);
    {   /* an episode's 800 log-probabilities: one stack, one sum */
        dist_tensor_t *lp[800], *s, *loss;
        int bad = 0;
        for (int i = 0; i < 800; i++) { lp[i] = dist_tensor_scalar((float)i * 0.001f); dist_tensor_set_requires_grad(lp[i], 1); }
        s = dist_tensor_stack(800, lp, 0);
        loss = dist_tensor_sum(s);
        TCHECK(loss && dist_tensor_backward(loss, NULL) == DIST_OK, "sum(stack(800 scalars)): backward: %s", MSG());
        for (int i = 0; i < 800; i++) if (!dist_tensor_grad(lp[i]) || dist_tensor_data(dist_tensor_grad(lp[i]))[0] != 1.0f) bad++;
        TCHECK(!bad && loss && fabsf(dist_tensor_item(loss) - 319.6f) < 1e-3f, "sum(stack(800 scalars)): %d gradients not 1, sum %g (want 319.6)", bad,
               loss ? (double)dist_tensor_item(loss) : 0.0);
        if (!bad) printf("ok   sum(stack(800 scalars, each requiring a gradient)): value 319.6, every gradient 1\n");
        dist_tensor_release(loss); dist_tensor_release(s);
        for (int i = 0; i < 800; i++) dist_tensor_release(lp[i]);
    }
    {   /* errors */
        static const int64_t s23[2] = { 2, 3 }, s24[2] = { 2, 4 }, s5[4] = { 1, 1, 1, 1 };
        dist_tensor_t *x = dist_tensor_full(2, s23, 1.0f), *y = dist_tensor_full(2, s24, 1.0f), *z = dist_tensor_full(4, s5, 1.0f), *p[2] = { x, y }, *q[2] = { z, z }, *r;
        r = dist_tensor_cat(2, p, 0);
        TCHECK(!r && strstr(MSG(), "[2,4]") && strstr(MSG(), "[2,3]"), "cat of [2,3] and [2,4] along 0: %s \"%s\"", r ? "made" : "refused", MSG());
        dist_tensor_release(r);
        r = dist_tensor_stack(2, p, 0);
        TCHECK(!r && strstr(MSG(), "stack"), "stack of [2,3] and [2,4]: %s \"%s\"", r ? "made" : "refused", MSG());
        dist_tensor_release(r);
        r = dist_tensor_cat(2, p, 2);
        TCHECK(!r && strstr(MSG(), "dimension 2"), "cat along 2 of 2-D tensors: %s \"%s\"", r ? "made" : "refused", MSG());
        dist_tensor_release(r);
        r = dist_tensor_stack(2, q, 0);
        TCHECK(!r && strstr(MSG(), "at most 4"), "stack of 4-D tensors: %s \"%s\"", r ? "made" : "refused", MSG());
        dist_tensor_release(r);
        r = dist_tensor_cat(0, p, 0);
        TCHECK(!r, "cat of 0 tensors: made");
        dist_tensor_release(x); dist_tensor_release(y); dist_tensor_release(z);
        printf("ok   cat/stack errors: shapes that differ (named), a dimension out of range, more than 4 dimensions, no tensors\n");
    }
}

int main(void) {
    test_start();
    test_gradients();
    printf("%s forward values: %d cases against the float64 reference, worst error %.2g of the terms' size (tolerance 1e-5)\n",
           g_fwd_worst <= 1e-5 ? "ok  " : "FAIL", g_fwd_cases, g_fwd_worst);
    test_accumulate();
    test_dropout_semantics();
    test_errors();
    test_optimizers();
    test_param_lock();
    test_mlp();
    test_matmul_big();
    test_values();
    test_memory();
    test_cat_stack();
    printf("%s: %d check(s) failed\n", g_fails ? "FAIL" : "ok", g_fails);
    return g_fails ? 1 : 0;
}
