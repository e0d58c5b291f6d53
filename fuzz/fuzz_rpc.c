/* fuzz/fuzz_rpc.c - what dist_rpc.h reads from the network: an RPC
   message's header (dist_rpc__parse) and the value in its body
   (dist_value_decode).

   Input: byte 0 chooses what the rest is (even: a whole RPC message, odd:
   a value alone).  A message that parses must lie inside the input (name
   NUL-free, body within it); its body then goes to the value decoder as
   the listener would hand it over.  A value that decodes must be canonical
   (re-encoding gives the same bytes), equal to itself, and readable by
   every getter and by unpack without a crash (type mismatches answered
   with a sentence); one that does not decode must say why.  A message's
   body may also hold references (as in a job of 4 ranks): each one
   decoded names ranks below 4 and, not taken in by an agent, answers
   get_rref with a sentence.  A body with the autograd flag begins with a
   context prefix (dist_rpc__ag_strip, as from rank 1 of 4): what it names
   must be float tensors of the value, and each becomes a tensor that
   requires a gradient (dist_tensor_from_value) without a crash. */
#define FUZZ_TARGET
#include "fuzz.h"
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <stdio.h>

static void walk(const dist_value_t *v, int depth) {
    int64_t i; double f; const char *s; const void *p; size_t n; dist_tensor_view t;
    if (depth > DIST_RPC_MAX_DEPTH + 1) __builtin_trap();
    if (dist_value_get_int(v, &i) == DIST_OK && dist_value_kind(v) != DIST_VALUE_INT) __builtin_trap();
    if (dist_value_get_float(v, &f) != DIST_OK && (dist_value_kind(v) == DIST_VALUE_FLOAT || dist_value_kind(v) == DIST_VALUE_INT)) __builtin_trap();
    if (dist_value_get_string(v, &s) == DIST_OK && strlen(s) != dist_value_len(v)) __builtin_trap();
    if (dist_value_get_bytes(v, &p, &n) == DIST_OK && n != dist_value_len(v)) __builtin_trap();
    if (dist_value_get_tensor(v, &t) == DIST_OK) {
        size_t es = dist_dtype_size(t.dtype), e = 1;
        if (!es || t.ndim < 0 || t.ndim > DIST_RPC_MAX_DIMS || ((uintptr_t)t.data % 8 && t.nbytes)) __builtin_trap();
        for (int d = 0; d < t.ndim; d++) e *= (size_t)t.shape[d];
        if (e * es != t.nbytes) __builtin_trap();
        if (t.nbytes) { volatile uint8_t x = ((const uint8_t *)t.data)[t.nbytes - 1]; (void)x; }
    }
    if (dist_value_get_int(v, &i) != DIST_OK && !dist_rpc_error_message()[0]) __builtin_trap();
    if (dist_value_kind(v) == DIST_VALUE_RREF) {
        dist_rref_t *r = NULL;
        if (v->u.r.owner >= 4 || v->u.r.rid.rank >= 4 || v->u.r.fid.rank >= 4 || v->u.r.pfid.rank >= 4) __builtin_trap();
        if (dist_value_get_rref(v, &r) == DIST_OK || r || !dist_rpc_error_message()[0]) __builtin_trap();
    }
    for (size_t k = 0; k < dist_value_len(v) && dist_value_kind(v) == DIST_VALUE_LIST; k++) walk(dist_value_item(v, k), depth + 1);
}

/* A message's body as the listener decodes it, before taking references
   in: nothing may be read past the input, nothing leaks. */
static uint32_t marked(const dist_value_t *v, uint32_t n) {
    if (dist_value_kind(v) == DIST_VALUE_LIST)
        for (size_t k = 0; k < dist_value_len(v); k++) n = marked(dist_value_item(v, k), n);
    else if (dist_value_kind(v) == DIST_VALUE_TENSOR && v->u.t.mark) {
        dist_tensor_t *t = dist_tensor_from_value(v);
        if (!t || !dist_tensor_requires_grad(t) || (v->dtype != DIST_FLOAT32 && v->dtype != DIST_FLOAT64)) __builtin_trap();
        dist_tensor_release(t);
        n++;
    }
    return n;
}

static void body(const uint8_t *b, size_t n, int flags) {
    dist_value_t *v = NULL;
    dist_rpc__ctxin ag;
    memset(&ag, 0, sizeof ag);
    if ((flags & DIST_RPC__FLAG_CONTEXT)) {
        const uint8_t *b0 = b;
        if (dist_rpc__ag_strip(&b, &n, 1, &ag) != 0) return;
        if (b < b0 || ag.ord < b0 || ag.ord + 4 * (size_t)ag.n > b) __builtin_trap();
    }
    if (dist_rpc__decode_value(b, n, 4, &v, NULL) != DIST_OK) {
        if (v || !strstr(dist_rpc_error_message(), "decode")) __builtin_trap();
        return;
    }
    walk(v, 0);
    if (ag.n) {
        uint32_t ord = 0, k = 0;
        size_t *numel = (size_t *)malloc(ag.n * sizeof *numel);
        if (!numel) __builtin_trap();
        if (dist_rpc__ag_mark(v, v, &ag, &ord, &k, numel) == 0 && k == ag.n && marked(v, 0) != ag.n) __builtin_trap();
        free(numel);
    }
    dist_value_free(v);
}

static void value(const uint8_t *b, size_t n) {
    dist_value_t *v = NULL;
    if (dist_value_decode(b, n, &v) != DIST_OK) {
        if (v || !strstr(dist_rpc_error_message(), "decode")) __builtin_trap();
        return;
    }
    size_t len = 0;
    dist_value_encode(v, NULL, 0, &len);
    uint8_t *e = (uint8_t *)malloc(len ? len : 1);
    if (!e || dist_value_encode(v, e, len, &len) != DIST_OK || len != n || memcmp(e, b, n) != 0) __builtin_trap();
    free(e);
    if (!dist_value_equal(v, v)) __builtin_trap();
    walk(v, 0);
    {   /* unpack with a few formats: a sentence or a result, never a crash */
        int a; int64_t I; double f; const char *s; const void *p; size_t bn; dist_tensor_view t; const dist_value_t *any;
        (void)dist_value_unpack(v, "[isf]", &a, &s, &f);
        (void)dist_value_unpack(v, "[I[bt]v]", &I, &p, &bn, &t, &any);
        (void)dist_value_unpack(v, "[**[*]]");
        (void)dist_value_unpack(v, "t", &t);
        { dist_rref_t *r; (void)dist_value_unpack(v, "[R]", &r); }
    }
    dist_value_free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dist_rpc__g.size = 4;                   /* (as in a job of 4: the context's creator must be one of them) */
    if (size < 1) return 0;
    if (data[0] & 1) { value(data + 1, size - 1); return 0; }
    {
        dist_rpc__msg m;
        int k = dist_rpc__parse(data + 1, size - 1, &m);
        if (!k) return 0;
        if (m.body < data + 1 || m.body + m.blen > data + size) __builtin_trap();
        if (k == DIST_RPC__REQUEST && (strlen(m.name) == 0 || strlen(m.name) > DIST_RPC__MAX_NAME)) __builtin_trap();
        if (k == DIST_RPC__REQUEST || k == DIST_RPC__REPLY) { value(m.body, m.blen); body(m.body, m.blen, m.flags); }
    }
    return 0;
}
