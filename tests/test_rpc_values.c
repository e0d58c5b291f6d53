// WINDOWS: yes
/* test_rpc_values.c - dist_rpc.h's values: building, reading, format
   strings, the wire format and its decoder.

   1. Round trips: 2000 random values (every type, nested lists, tensors of
      every dtype with 0-4 dimensions, empty strings and lists) are encoded,
      decoded and compared with dist_value_equal; re-encoding the decoded
      value gives the same bytes (one encoding per value).  The expected
      bytes of a few small values are written out by hand from the format
      the header documents (the independent reference for the layout).
   2. The decoder on bad bytes: every proper prefix of every encoding fails
      with DIST_ERR_PROTOCOL; every single-byte change either fails or
      decodes to a value that re-encodes to exactly the changed bytes;
      hand-made hostile inputs (a 2^32-1 list count, 2^32-1 string length,
      a shape whose product overflows, 9 dimensions, unknown type and
      dtype, non-zero padding, an out-of-band tensor, lists nested past
      the limit, a string with a NUL inside, trailing bytes) fail with a
      sentence naming the problem.
   3. pack/unpack: every format character, nested lists, skips, too few
      items, wrong types (the sentence names the position, the item, what
      it is and what was asked), int range, malformed formats; 'v'
      arguments are taken over even when pack fails (LeakSanitizer under
      make sanitize).
   4. Getters: type mismatches return DIST_ERR_TYPE with a sentence; an int
      reads as a float; NULL values; dist_value_len; appending to a
      decoded list is refused; borrowed tensors are not copied. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_*.c) */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist.h"
#include "dist_rpc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int g_failures_here = 0;
#define CHECK_(cond, ...)                                         \
    do {                                                          \
        if (!(cond)) {                                            \
            printf("FAIL line %d: ", __LINE__);                   \
            printf(__VA_ARGS__);                                  \
            printf("\n");                                         \
            g_failures_here++;                                    \
        }                                                         \
    } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull; return mix64(g_rng); }
static size_t rndn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* A random value, at most `depth` lists deep. */
static dist_value_t *random_value(int depth) {
    int kind = (int)rndn(depth > 0 ? 7 : 6);
    switch (kind) {
    case 0: return dist_value_none();
    case 1: return dist_value_int((int64_t)rnd());
    case 2: { double x; uint64_t b = rnd(); memcpy(&x, &b, 8); if (isnan(x)) x = 1.5; return dist_value_float(x); }
    case 3: {
        char s[40];
        size_t n = rndn(sizeof s);
        for (size_t i = 0; i < n; i++) s[i] = (char)(1 + rndn(255));
        s[n] = 0;
        return dist_value_string(s);
    }
    case 4: {
        uint8_t b[50];
        size_t n = rndn(sizeof b);
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
        return dist_value_bytes(b, n);
    }
    case 5: {
        int64_t shape[4];
        int nd = (int)rndn(5);
        size_t n = 1;
        dist_dtype dt = (dist_dtype)rndn(DIST_DTYPE_COUNT);
        for (int d = 0; d < nd; d++) { shape[d] = (int64_t)rndn(4); n *= (size_t)shape[d]; }
        uint8_t *data = malloc(n * dist_dtype_size(dt) + 1);
        for (size_t i = 0; i < n * dist_dtype_size(dt); i++) data[i] = (uint8_t)rnd();
        dist_value_t *v = dist_value_tensor(dt, nd, shape, data);
        free(data);
        return v;
    }
    default: {
        dist_value_t *l = dist_value_list();
        size_t n = rndn(5);
        for (size_t i = 0; i < n; i++) dist_value_append(l, random_value(depth - 1));
        return l;
    }
    }
}

static uint8_t *encode(const dist_value_t *v, size_t *len) {
    dist_value_encode(v, NULL, 0, len);
    uint8_t *b = malloc(*len ? *len : 1);
    if (dist_value_encode(v, b, *len, len) != DIST_OK) { free(b); return NULL; }
    return b;
}

/* Decodes b; when accepted, the value must re-encode to the same bytes. */
static int decode_canonical(const uint8_t *b, size_t len, int *accepted) {
    dist_value_t *v = NULL;
    dist_result r = dist_value_decode(b, len, &v);
    *accepted = r == DIST_OK;
    if (r != DIST_OK) return r == DIST_ERR_PROTOCOL && strstr(dist_rpc_error_message(), "decode:") != NULL;
    size_t l2;
    uint8_t *b2 = encode(v, &l2);
    int same = b2 && l2 == len && memcmp(b, b2, len) == 0;
    free(b2);
    dist_value_free(v);
    return same;
}

static void test_round_trips(void) {
    int bad = 0, prefix_bad = 0, mut_bad = 0;
    size_t total = 0, mutations = 0, accepted_mut = 0;
    for (int it = 0; it < 2000; it++) {
        dist_value_t *v = random_value(3), *w = NULL;
        size_t len;
        uint8_t *b = encode(v, &len);
        if (!b || dist_value_decode(b, len, &w) != DIST_OK || !dist_value_equal(v, w)) {
            if (bad++ < 3) printf("FAIL round trip %d: %s\n", it, dist_rpc_error_message());
        } else {
            size_t l2;
            uint8_t *b2 = encode(w, &l2);
            if (!b2 || l2 != len || memcmp(b, b2, len) != 0) bad++;
            free(b2);
        }
        total += len;
        if (it % 4 == 0) {
            for (size_t i = 0; i < len; i++) {
                dist_value_t *z = NULL;
                dist_result r = dist_value_decode(b, i, &z);
                if (r != DIST_ERR_PROTOCOL) { if (prefix_bad++ < 3) printf("FAIL prefix %zu of %zu: %s\n", i, len, dist_result_name(r)); dist_value_free(z); }
            }
            for (size_t i = 0; i < len; i++) {
                uint8_t save = b[i];
                for (int k = 0; k < 3; k++) {
                    int acc;
                    b[i] = k == 0 ? (uint8_t)(save ^ (1u << rndn(8))) : k == 1 ? 0xff : (uint8_t)rnd();
                    if (b[i] == save) continue;
                    mutations++;
                    if (!decode_canonical(b, len, &acc)) { if (mut_bad++ < 3) printf("FAIL mutation at %zu of %zu\n", i, len); }
                    accepted_mut += acc;
                }
                b[i] = save;
            }
        }
        free(b);
        dist_value_free(v);
        dist_value_free(w);
    }
    CHECK_(bad == 0, "%d of 2000 random values did not round-trip", bad);
    CHECK_(prefix_bad == 0, "%d proper prefixes were not refused with DIST_ERR_PROTOCOL", prefix_bad);
    CHECK_(mut_bad == 0, "%d single-byte changes were neither refused nor canonical", mut_bad);
    printf("ok   2000 random values round-trip (%zu bytes), every prefix refused, %zu single-byte changes: %zu refused, %zu decode canonically\n",
           total, mutations, mutations - accepted_mut, accepted_mut);
}

/* Hand-written expected encodings, from the documented layout. */
static void test_layout(void) {
    static const uint8_t want_int[] = { 1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };          /* int -2 */
    static const uint8_t want_str[] = { 3, 2, 0, 0, 0, 'h', 'i', 0 };
    static const uint8_t want_list[] = { 5, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f };        /* [none, 1.0] */
    /* tensor int32 shape [2] = {1, -1}: type, dtype, ndim, shape, where = 12
       bytes, then 4 bytes of padding to offset 16, then 8 bytes of data */
    static const uint8_t want_tensor[] = { 6, DIST_INT32, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff };
    int32_t td[2] = { 1, -1 };
    int64_t ts[1] = { 2 };
    struct { const char *name; dist_value_t *v; const uint8_t *want; size_t n; } c[] = {
        { "int -2", dist_value_int(-2), want_int, sizeof want_int },
        { "string \"hi\"", dist_value_string("hi"), want_str, sizeof want_str },
        { "[none, 1.0]", dist_value_pack("[nf]", 1.0), want_list, sizeof want_list },
        { "int32 tensor [2]", dist_value_tensor(DIST_INT32, 1, ts, td), want_tensor, sizeof want_tensor },
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        size_t len;
        uint8_t *b = encode(c[i].v, &len);
        CHECK_(b && len == c[i].n && memcmp(b, c[i].want, len) == 0, "layout of %s differs from the documented bytes", c[i].name);
        free(b);
        dist_value_free(c[i].v);
    }
    printf("ok   the documented layout: int, string, list, tensor with padding\n");
}

static void expect_refused(const char *name, const uint8_t *b, size_t len, const char *needle) {
    dist_value_t *v = NULL;
    dist_result r = dist_value_decode(b, len, &v);
    CHECK_(r == DIST_ERR_PROTOCOL && strstr(dist_rpc_error_message(), needle), "%s: %s \"%s\" (expected DIST_ERR_PROTOCOL mentioning \"%s\")", name,
           dist_result_name(r), dist_rpc_error_message(), needle);
    if (r == DIST_OK) dist_value_free(v);
}

static void test_hostile(void) {
    uint8_t b[64];
    memset(b, 0, sizeof b);
    b[0] = 5; b[1] = b[2] = b[3] = b[4] = 0xff;                 /* a list of 2^32-1 items in 5 bytes */
    expect_refused("list count 2^32-1", b, 5, "items");
    b[0] = 3;                                                   /* a string of 2^32-1 bytes */
    expect_refused("string length 2^32-1", b, 5, "needs");
    b[0] = 4;
    expect_refused("bytes length 2^32-1", b, 5, "needs");
    /* tensor, uint8, 2 dims of 2^62 and 8 */
    memset(b, 0, sizeof b);
    b[0] = 6; b[1] = DIST_UINT8; b[2] = 2;
    b[3 + 7] = 0x40; b[11] = 8;
    expect_refused("tensor shape overflow", b, 20, "limit");
    b[2] = 9;
    expect_refused("tensor of 9 dims", b, 20, "dimensions");
    b[1] = 99; b[2] = 1;
    expect_refused("tensor dtype 99", b, 20, "dtype");
    /* negative dimension */
    memset(b, 0, sizeof b);
    b[0] = 6; b[1] = DIST_UINT8; b[2] = 1; memset(b + 3, 0xff, 8);
    expect_refused("tensor dimension -1", b, 12, "dimension");
    /* out-of-band tensor: where = 1 */
    memset(b, 0, sizeof b);
    b[0] = 6; b[1] = DIST_UINT8; b[2] = 0; b[3] = 1;
    expect_refused("out-of-band tensor", b, 8, "elsewhere");
    /* non-zero padding: uint8 scalar tensor, 4 bytes of head then 4 of pad then 1 byte */
    memset(b, 0, sizeof b);
    b[0] = 6; b[1] = DIST_UINT8; b[2] = 0; b[3] = 0; b[5] = 1;
    expect_refused("non-zero padding", b, 9, "padding");
    b[5] = 0;
    { dist_value_t *v = NULL; CHECK_(dist_value_decode(b, 9, &v) == DIST_OK, "a scalar uint8 tensor with zero padding: %s", dist_rpc_error_message()); dist_value_free(v); }
    expect_refused("unknown type 8", (const uint8_t *)"\x08", 1, "unknown value type");
    expect_refused("an rref outside an RPC message", (const uint8_t *)"\x07", 1, "outside an RPC message");
    expect_refused("trailing byte", (const uint8_t *)"\x00\x00", 2, "after the value");
    expect_refused("empty input", b, 0, "needs 1");
    expect_refused("string with a NUL inside", (const uint8_t *)"\x03\x02\x00\x00\x00" "a\x00\x00", 8, "NUL");
    expect_refused("string without its NUL", (const uint8_t *)"\x03\x02\x00\x00\x00" "ab!", 8, "NUL");
    {   /* lists nested past the limit: [[[[...]]]] with one item each */
        uint8_t deep[5 * 70 + 1];
        for (int i = 0; i < 70; i++) { deep[5 * i] = 5; deep[5 * i + 1] = 1; deep[5 * i + 2] = deep[5 * i + 3] = deep[5 * i + 4] = 0; }
        deep[5 * 70] = 0;
        expect_refused("lists nested 70 deep", deep, sizeof deep, "deeper");
    }
    {   /* more items than DIST_RPC_MAX_ITEMS, each one byte (none) */
        size_t n = ((size_t)1 << 20) + 1, len = 5 + n;
        uint8_t *big = calloc(len, 1);
        big[0] = 5; big[1] = (uint8_t)n; big[2] = (uint8_t)(n >> 8); big[3] = (uint8_t)(n >> 16); big[4] = (uint8_t)(n >> 24);
        expect_refused("2^20+1 items", big, len, "items");
        big[1] = 0;                                             /* exactly 2^20 nones: ~80 MiB decoded from 1 MiB */
        expect_refused("a list of 2^20 nones", big, len - 1, "decoded");
        free(big);
    }
    {   /* 2^20 ints (9 MiB): as many items, 9 bytes each: accepted */
        size_t n = (size_t)1 << 20, len = 5 + 9 * n;
        uint8_t *big = calloc(len, 1);
        dist_value_t *v = NULL;
        int64_t x = -1;
        big[0] = 5; big[1] = (uint8_t)n; big[2] = (uint8_t)(n >> 8); big[3] = (uint8_t)(n >> 16); big[4] = (uint8_t)(n >> 24);
        for (size_t i = 0; i < n; i++) { big[5 + 9 * i] = 1; big[5 + 9 * i + 1] = (uint8_t)i; big[5 + 9 * i + 2] = (uint8_t)(i >> 8); big[5 + 9 * i + 3] = (uint8_t)(i >> 16); }
        CHECK_(dist_value_decode(big, len, &v) == DIST_OK && dist_value_len(v) == n && dist_value_get_int(dist_value_item(v, n - 1), &x) == DIST_OK &&
               x == (int64_t)(n - 1), "a list of 2^20 ints: %s", dist_rpc_error_message());
        dist_value_free(v);
        free(big);
    }
    printf("ok   hostile inputs refused with a reason: huge counts and lengths, shape overflow, dims, dtype, padding, depth, NULs, trailing bytes, "
           "2^20 nones (more memory decoded than 32 x the bytes); 2^20 ints decoded\n");
}

static void test_pack_unpack(void) {
    float data[6] = { 1, 2, 3, 4, 5, 6 };
    int64_t shape[2] = { 2, 3 };
    dist_value_t *inner = dist_value_string("taken");
    dist_value_t *v = dist_value_pack("[ i I f s b t [n [v]] ]", -7, (int64_t)1 << 40, 0.25, "obs", "xyz", (size_t)3, DIST_FLOAT32, 2, shape, data, inner);
    CHECK_(v != NULL, "pack: %s", dist_rpc_error_message());
    if (!v) return;
    int i; int64_t I; double f; const char *s, *s2; const void *bp; size_t bn; dist_tensor_view t; const dist_value_t *any;
    dist_result r = dist_value_unpack(v, "[iIfsbt[n[s]]]", &i, &I, &f, &s, &bp, &bn, &t, &s2);
    CHECK_(r == DIST_OK && i == -7 && I == ((int64_t)1 << 40) && f == 0.25 && strcmp(s, "obs") == 0 && bn == 3 && memcmp(bp, "xyz", 3) == 0 &&
               t.dtype == DIST_FLOAT32 && t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3 && t.nbytes == 24 &&
               memcmp(t.data, data, 24) == 0 && t.data != (void *)data && strcmp(s2, "taken") == 0,
           "unpack of everything: %s", dist_rpc_error_message());
    r = dist_value_unpack(v, "[**f*v]", &f, &any);
    CHECK_(r == DIST_OK && dist_value_kind(any) == DIST_VALUE_BYTES, "skips and 'v': %s", dist_rpc_error_message());
    r = dist_value_unpack(v, "[f]", &f);
    CHECK_(r == DIST_OK && f == -7.0, "an int reads as a float: %s", dist_rpc_error_message());
    r = dist_value_unpack(v, "[is]", &i, &s);
    CHECK_(r == DIST_ERR_TYPE && strstr(dist_rpc_error_message(), "'s' at 2 (item 1)") && strstr(dist_rpc_error_message(), "an int") &&
               strstr(dist_rpc_error_message(), "not a string"),
           "a wrong type names position, item, what it is and what was asked: \"%s\"", dist_rpc_error_message());
    r = dist_value_unpack(v, "[I*******]", &I);
    CHECK_(r == DIST_ERR_TYPE && strstr(dist_rpc_error_message(), "only 7 items"), "too few items: \"%s\"", dist_rpc_error_message());
    r = dist_value_unpack(v, "[*i]", &i);
    CHECK_(r == DIST_ERR_TYPE && strstr(dist_rpc_error_message(), "does not fit an int"), "int range: \"%s\"", dist_rpc_error_message());
    r = dist_value_unpack(v, "[q]");
    CHECK_(r == DIST_ERR_INVALID && strstr(dist_rpc_error_message(), "unknown format character"), "unknown format character: \"%s\"", dist_rpc_error_message());
    r = dist_value_unpack(v, "[i", &i);
    CHECK_(r == DIST_ERR_INVALID && strstr(dist_rpc_error_message(), "not closed"), "unclosed '[': \"%s\"", dist_rpc_error_message());
    r = dist_value_unpack(v, "s", &s);
    CHECK_(r == DIST_ERR_TYPE && strstr(dist_rpc_error_message(), "a list of 7"), "the top is a list: \"%s\"", dist_rpc_error_message());
    dist_value_free(v);

    /* pack failures take over 'v' values (LeakSanitizer checks) and say why */
    v = dist_value_pack("[v q v]", dist_value_int(1), dist_value_int(2));
    CHECK_(v == NULL && strstr(dist_rpc_error_message(), "unknown format character 'q'"), "pack with 'q': \"%s\"", dist_rpc_error_message());
    v = dist_value_pack("[v] v", dist_value_int(1), dist_value_int(2));
    CHECK_(v == NULL && strstr(dist_rpc_error_message(), "2 values at the top"), "two values at the top: \"%s\"", dist_rpc_error_message());
    v = dist_value_pack("[s v]", (const char *)NULL, dist_value_int(3));
    CHECK_(v == NULL && strstr(dist_rpc_error_message(), "NULL string"), "pack of a NULL string: \"%s\"", dist_rpc_error_message());
    v = dist_value_pack("[[i]", 1);
    CHECK_(v == NULL && strstr(dist_rpc_error_message(), "not closed"), "pack unclosed: \"%s\"", dist_rpc_error_message());
    v = dist_value_pack("i]", 1);
    CHECK_(v == NULL && strstr(dist_rpc_error_message(), "closes nothing"), "pack stray ']': \"%s\"", dist_rpc_error_message());
    int64_t bad_shape[1] = { -2 };
    v = dist_value_pack("t", DIST_FLOAT32, 1, bad_shape, data);
    CHECK_(v == NULL && strstr(dist_rpc_error_message(), "dimension 0 is -2"), "pack of a bad tensor: \"%s\"", dist_rpc_error_message());
    v = dist_value_pack("i", 5);
    CHECK_(v && dist_value_kind(v) == DIST_VALUE_INT, "a single value packs bare");
    dist_value_free(v);
    printf("ok   pack/unpack: every format character, skips, wrong types, too few items, int range, bad formats, 'v' taken on failure\n");
}

static void test_getters(void) {
    int64_t x; double f; const char *s; const void *p; size_t n; dist_tensor_view t;
    dist_value_t *v = dist_value_string("hello");
    CHECK_(dist_value_get_int(v, &x) == DIST_ERR_TYPE && strstr(dist_rpc_error_message(), "get_int: the value is a string (\"hello\"), not an int"),
           "get_int of a string: \"%s\"", dist_rpc_error_message());
    CHECK_(dist_value_get_float(v, &f) == DIST_ERR_TYPE, "get_float of a string");
    CHECK_(dist_value_get_bytes(v, &p, &n) == DIST_ERR_TYPE, "get_bytes of a string");
    CHECK_(dist_value_get_tensor(v, &t) == DIST_ERR_TYPE, "get_tensor of a string");
    CHECK_(dist_value_get_string(v, &s) == DIST_OK && strcmp(s, "hello") == 0 && dist_value_len(v) == 5, "get_string");
    CHECK_(dist_value_get_string(NULL, &s) == DIST_ERR_INVALID, "get_string(NULL)");
    CHECK_(dist_value_append(v, dist_value_int(1)) == DIST_ERR_TYPE, "append to a string");
    dist_value_free(v);
    CHECK_(dist_value_kind(NULL) == DIST_VALUE_NONE && dist_value_len(NULL) == 0 && dist_value_item(NULL, 0) == NULL, "NULL reads as none");
    /* a decoded list cannot grow */
    size_t len;
    v = dist_value_pack("[ii]", 1, 2);
    uint8_t *b = encode(v, &len);
    dist_value_t *w = NULL;
    CHECK_(dist_value_decode(b, len, &w) == DIST_OK && dist_value_len(w) == 2, "decode [1, 2]");
    CHECK_(dist_value_append(w, dist_value_int(3)) == DIST_ERR_TYPE, "append to a decoded list is refused");
    CHECK_(dist_value_item(w, 2) == NULL && dist_value_item(w, 1) && dist_value_get_int(dist_value_item(w, 1), &x) == DIST_OK && x == 2, "items");
    free(b);
    dist_value_free(v);
    dist_value_free(w);
    /* borrowed tensors are not copied; encoding reads them */
    float data[4] = { 1, 2, 3, 4 };
    int64_t shape[1] = { 4 };
    v = dist_value_tensor_borrow(DIST_FLOAT32, 1, shape, data);
    CHECK_(v && dist_value_get_tensor(v, &t) == DIST_OK && t.data == (void *)data && dist_value_len(v) == 4, "borrowed tensor");
    data[3] = 9;
    b = encode(v, &len);
    CHECK_(dist_value_decode(b, len, &w) == DIST_OK && dist_value_get_tensor(w, &t) == DIST_OK && ((float *)t.data)[3] == 9 &&
               (uintptr_t)t.data % 8 == 0,
           "a decoded tensor holds the borrowed data as it was when encoded, 8-byte aligned");
    free(b);
    dist_value_free(v);
    dist_value_free(w);
    v = dist_value_int(1);
    CHECK_(dist_value_encode(v, data, 3, &len) == DIST_ERR_TRUNCATED && len == 9 && strstr(dist_rpc_error_message(), "needs 9 bytes"),
           "encode into a small buffer: \"%s\"", dist_rpc_error_message());
    dist_value_free(v);
    printf("ok   getters: type errors with sentences, int as float, NULL, lengths, decoded lists are read-only, borrowed tensors\n");
}

int main(void) {
    test_start();
    test_layout();
    test_round_trips();
    test_hostile();
    test_pack_unpack();
    test_getters();
    printf("%s: %d check(s) failed\n", g_failures_here ? "FAIL" : "ok", g_failures_here);
    return g_failures_here ? 1 : 0;
}
