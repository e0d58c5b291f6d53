/* tests/mixed_rpc.c - one dist_rpc.h worker of a job whose workers run on
   Linux and on Windows (under Wine, on the same machine):
   tests/windows/mixed_job.sh starts them.

   Joins by env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DIST_RUN_ID:
   a config of zeros) as "worker<rank>", then calls every other worker:
   1. rpc_sync "whoami": the peer's platform, for the sentences below;
   2. rpc_async "add" 1000 times, all in flight, then wait_all: each sum;
   3. rpc_sync "tensors": a 5 MiB float32 tensor [1024, 1280] and a 2.4 MB
      int64 tensor [3, 100003] (out of band both ways), which the callee
      checks element by element and answers with 2x+1 of the first and the
      bitwise complement of the second (both wrapped, not copied): checked
      here element by element;
   4. rpc_sync "boom", a handler that fails: DIST_ERR_REMOTE, and the
      sentence carries the handler's message with the peer's platform;
   5. dist_remote "make_ref" (a list: the owner's platform, a 1 MiB uint8
      tensor), dist_rref_to_here: checked; then passed back to its owner
      ("ref_check", an 'R' argument), which reads it with
      dist_rref_local_value and checks it there;
   then dist_rpc_shutdown(1).  Prints "ok   worker R (platform): N checks,
   peers ..." or "FAIL worker R (platform): ...", exits 0 or 1.

   Linux:   cc -std=c11 -O2 -Wall -Wextra -Werror -I. tests/mixed_rpc.c -o mixed_rpc -pthread -lm
   Windows: x86_64-w64-mingw32-gcc -std=c11 -O2 -Wall -Wextra -Werror -I. tests/mixed_rpc.c -o mixed_rpc.exe -lws2_32 */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collcheck.h"   /* for collcheck_mix64 */

#ifdef _WIN32
#  define PLATFORM "windows"
#else
#  define PLATFORM "linux"
#endif

#define NASYNC 1000
#define T1_ROWS 1024
#define T1_COLS 1280
#define T2_ROWS 3
#define T2_COLS 100003
#define REF_BYTES (1u << 20)

static int g_rank;
static long g_checks;
static char g_fail[1024];

#if defined(__MINGW32__) && !defined(__clang__)
__attribute__((format(gnu_printf, 2, 3)))
#elif defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int fail(int line, const char *fmt, ...) {
    va_list ap;
    if (g_fail[0]) return 1;
    int k = snprintf(g_fail, sizeof g_fail, "line %d: ", line);
    va_start(ap, fmt);
    vsnprintf(g_fail + k, sizeof g_fail - (size_t)k, fmt, ap);
    va_end(ap);
    return 1;
}
#define FAIL(...) fail(__LINE__, __VA_ARGS__)

#define mix64 collcheck_mix64

/* Element i of the float32 tensor for seed s: an integer below 2^20, so
   that 2x+1 is exact. */
static float t1_at(uint64_t s, size_t i) { return (float)(mix64(s + i) % 1000003u); }
static int64_t t2_at(uint64_t s, size_t i) { return (int64_t)mix64(~s + i); }
static uint8_t ref_at(uint64_t s, size_t i) { return (uint8_t)(mix64(s ^ (i / 8)) >> (8 * (i % 8))); }

/* The first index where a tensor view differs from what it should be
   (kind 1: t1_at x mul + add as float32; 2: t2_at, complemented when
   `neg`; 3: ref_at), or -1; -2 when dtype or shape are wrong. */
static long tensor_differs(const dist_tensor_view *v, int kind, uint64_t s, float mul, float add, int neg) {
    static const int64_t sh1[2] = { T1_ROWS, T1_COLS }, sh2[2] = { T2_ROWS, T2_COLS }, sh3[1] = { REF_BYTES };
    const int64_t *sh = kind == 1 ? sh1 : kind == 2 ? sh2 : sh3;
    dist_dtype dt = kind == 1 ? DIST_FLOAT32 : kind == 2 ? DIST_INT64 : DIST_UINT8;
    int nd = kind == 3 ? 1 : 2;
    size_t n = (size_t)sh[0] * (size_t)(nd == 2 ? sh[1] : 1);
    const uint8_t *p = (const uint8_t *)v->data;
    if (v->dtype != dt || v->ndim != nd || v->shape[0] != sh[0] || (nd == 2 && v->shape[1] != sh[1]) ||
        v->nbytes != n * dist_dtype_size(dt) || (n && !p))
        return -2;
    for (size_t i = 0; i < n; i++) {
        if (kind == 1) {
            float x, want = t1_at(s, i) * mul + add;
            memcpy(&x, p + 4 * i, 4);
            if (memcmp(&x, &want, 4) != 0) return (long)i;
        } else if (kind == 2) {
            int64_t x, want = neg ? ~t2_at(s, i) : t2_at(s, i);
            memcpy(&x, p + 8 * i, 8);
            if (x != want) return (long)i;
        } else if (p[i] != ref_at(s, i)) {
            return (long)i;
        }
    }
    return -1;
}

/* ---- handlers (the same on every worker) --------------------------------- */
static dist_value_t *h_whoami(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)call; (void)args;
    return dist_value_string(PLATFORM);
}

static dist_value_t *h_add(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t a, b;
    if (dist_value_unpack(args, "[II]", &a, &b) != DIST_OK) {
        dist_rpc_call_fail(call, "add: %s", dist_rpc_error_message());
        return NULL;
    }
    return dist_value_int(a + b);
}

static void release(void *data, void *user) { (void)user; free(data); }

/* [t1, t2, seed]: checks both, answers [2 x t1 + 1, ~t2]. */
static dist_value_t *h_tensors(dist_rpc_call_t *call, const dist_value_t *args) {
    dist_tensor_view a, b;
    int64_t seed;
    long at;
    int64_t sh1[2] = { T1_ROWS, T1_COLS }, sh2[2] = { T2_ROWS, T2_COLS };
    size_t n1 = (size_t)T1_ROWS * T1_COLS, n2 = (size_t)T2_ROWS * T2_COLS;
    float *o1;
    int64_t *o2;
    dist_value_t *r1, *r2;
    if (dist_value_unpack(args, "[ttI]", &a, &b, &seed) != DIST_OK) {
        dist_rpc_call_fail(call, "tensors: %s", dist_rpc_error_message());
        return NULL;
    }
    if ((at = tensor_differs(&a, 1, (uint64_t)seed, 1.0f, 0.0f, 0)) != -1) {
        dist_rpc_call_fail(call, "tensors on %s: float32 argument differs at %ld (-2: dtype or shape)", PLATFORM, at);
        return NULL;
    }
    if ((at = tensor_differs(&b, 2, (uint64_t)seed, 0, 0, 0)) != -1) {
        dist_rpc_call_fail(call, "tensors on %s: int64 argument differs at %ld (-2: dtype or shape)", PLATFORM, at);
        return NULL;
    }
    o1 = (float *)malloc(n1 * sizeof *o1);
    o2 = (int64_t *)malloc(n2 * sizeof *o2);
    if (!o1 || !o2) { free(o1); free(o2); dist_rpc_call_fail(call, "out of memory"); return NULL; }
    for (size_t i = 0; i < n1; i++) { float x; memcpy(&x, (const uint8_t *)a.data + 4 * i, 4); o1[i] = 2.0f * x + 1.0f; }
    for (size_t i = 0; i < n2; i++) { int64_t x; memcpy(&x, (const uint8_t *)b.data + 8 * i, 8); o2[i] = ~x; }
    r1 = dist_value_tensor_wrap(DIST_FLOAT32, 2, sh1, o1, release, NULL);
    if (!r1) free(o1);
    r2 = dist_value_tensor_wrap(DIST_INT64, 2, sh2, o2, release, NULL);
    if (!r2) free(o2);
    if (!r1 || !r2) { dist_value_free(r1); dist_value_free(r2); dist_rpc_call_fail(call, "tensor_wrap failed"); return NULL; }
    return dist_value_pack("[vv]", r1, r2);
}

static dist_value_t *h_boom(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)args;
    dist_rpc_call_fail(call, "deliberate failure on %s (code %d)", PLATFORM, 42);
    return NULL;
}

/* [seed] -> [platform, 1 MiB uint8 tensor] */
static dist_value_t *h_make_ref(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t seed, shape[1] = { REF_BYTES };
    uint8_t *p;
    dist_value_t *t;
    if (dist_value_unpack(args, "[I]", &seed) != DIST_OK) { dist_rpc_call_fail(call, "make_ref: %s", dist_rpc_error_message()); return NULL; }
    if (!(p = (uint8_t *)malloc(REF_BYTES))) { dist_rpc_call_fail(call, "out of memory"); return NULL; }
    for (size_t i = 0; i < REF_BYTES; i++) p[i] = ref_at((uint64_t)seed, i);
    t = dist_value_tensor(DIST_UINT8, 1, shape, p);
    free(p);
    return t ? dist_value_pack("[sv]", PLATFORM, t) : NULL;
}

/* Checks a make_ref value: [platform, tensor of seed]; "" when right. */
static const char *ref_value_wrong(const dist_value_t *v, const char *platform, uint64_t seed, char *why, size_t cap) {
    const char *who = NULL;
    dist_tensor_view t;
    long at;
    if (dist_value_unpack(v, "[st]", &who, &t) != DIST_OK) { snprintf(why, cap, "unpack: %s", dist_rpc_error_message()); return why; }
    if (strcmp(who, platform) != 0) { snprintf(why, cap, "made on \"%s\", expected \"%s\"", who, platform); return why; }
    if ((at = tensor_differs(&t, 3, seed, 0, 0, 0)) != -1) { snprintf(why, cap, "tensor differs at %ld (-2: dtype or shape)", at); return why; }
    return "";
}

/* [R, seed], on the owner: the value itself, checked. */
static dist_value_t *h_ref_check(dist_rpc_call_t *call, const dist_value_t *args) {
    dist_rref_t *r = NULL;
    int64_t seed;
    const dist_value_t *v = NULL;
    dist_result res;
    char why[640];
    if (dist_value_unpack(args, "[RI]", &r, &seed) != DIST_OK) { dist_rpc_call_fail(call, "ref_check: %s", dist_rpc_error_message()); return NULL; }
    if (!dist_rref_is_owner(r)) { dist_rpc_call_fail(call, "ref_check on %s: not the owner", PLATFORM); return NULL; }
    if ((res = dist_rref_local_value(r, &v)) != DIST_OK) {
        dist_rpc_call_fail(call, "ref_check on %s: local_value: %s: %s", PLATFORM, dist_result_name(res), dist_rpc_error_message());
        return NULL;
    }
    if (*ref_value_wrong(v, PLATFORM, (uint64_t)seed, why, sizeof why)) {
        dist_rpc_call_fail(call, "ref_check on %s: %s", PLATFORM, why);
        return NULL;
    }
    return dist_value_int(1);
}

/* ---- the caller's side ---------------------------------------------------- */
static int call_peer(const char *peer, int pr, char *peer_platform, size_t cap) {
    dist_value_t *ret = NULL;
    dist_result res;
    const char *s = NULL;
    uint64_t seed = mix64((uint64_t)g_rank * 1000 + (uint64_t)pr);

    /* 1. whoami */
    if ((res = dist_rpc_sync(peer, "whoami", NULL, &ret)) != DIST_OK)
        return FAIL("rpc_sync %s whoami: %s: %s", peer, dist_result_name(res), dist_rpc_error_message());
    if (dist_value_get_string(ret, &s) != DIST_OK) return FAIL("whoami from %s: %s", peer, dist_rpc_error_message());
    snprintf(peer_platform, cap, "%s", s);
    dist_value_free(ret); ret = NULL;
    g_checks++;

    /* 2. NASYNC asyncs in flight */
    {
        static dist_future_t *fs[NASYNC];
        int bad = 0;
        for (int i = 0; i < NASYNC; i++) {
            res = dist_rpc_async(peer, "add", dist_value_pack("[II]", (int64_t)i, (int64_t)i * 1000003 + g_rank), &fs[i]);
            if (res != DIST_OK) {
                for (int k = 0; k < i; k++) dist_future_free(fs[k]);
                return FAIL("rpc_async %s add #%d: %s: %s", peer, i, dist_result_name(res), dist_rpc_error_message());
            }
        }
        res = dist_future_wait_all(NASYNC, fs, 0);
        if (res != DIST_OK) bad = FAIL("wait_all of %d rpc_async to %s: %s: %s", NASYNC, peer, dist_result_name(res), dist_rpc_error_message());
        for (int i = 0; i < NASYNC; i++) {
            int64_t got = -1, want = (int64_t)i + (int64_t)i * 1000003 + g_rank;
            if (!bad && (dist_value_get_int(dist_future_value(fs[i]), &got) != DIST_OK || got != want))
                bad = FAIL("rpc_async %s add #%d: got %lld (%s), expected %lld", peer, i, (long long)got,
                           dist_future_error(fs[i]), (long long)want);
            dist_future_free(fs[i]);
        }
        if (bad) return 1;
        g_checks += NASYNC;
    }

    /* 3. tensors, several MiB each way */
    {
        int64_t sh1[2] = { T1_ROWS, T1_COLS }, sh2[2] = { T2_ROWS, T2_COLS };
        size_t n1 = (size_t)T1_ROWS * T1_COLS, n2 = (size_t)T2_ROWS * T2_COLS;
        float *d1 = (float *)malloc(n1 * sizeof *d1);
        int64_t *d2 = (int64_t *)malloc(n2 * sizeof *d2);
        dist_tensor_view a, b;
        long at;
        if (!d1 || !d2) return FAIL("out of memory");
        for (size_t i = 0; i < n1; i++) d1[i] = t1_at(seed, i);
        for (size_t i = 0; i < n2; i++) d2[i] = t2_at(seed, i);
        res = dist_rpc_sync(peer, "tensors",
                            dist_value_pack("[ttI]", DIST_FLOAT32, 2, sh1, (const void *)d1, DIST_INT64, 2, sh2, (const void *)d2,
                                            (int64_t)seed), &ret);
        free(d1); free(d2);
        if (res != DIST_OK) return FAIL("rpc_sync %s tensors: %s: %s", peer, dist_result_name(res), dist_rpc_error_message());
        if (dist_value_unpack(ret, "[tt]", &a, &b) != DIST_OK) return FAIL("tensors from %s: %s", peer, dist_rpc_error_message());
        if ((at = tensor_differs(&a, 1, seed, 2.0f, 1.0f, 0)) != -1)
            return FAIL("tensors from %s: float32 result differs at %ld (-2: dtype or shape)", peer, at);
        if ((at = tensor_differs(&b, 2, seed, 0, 0, 1)) != -1)
            return FAIL("tensors from %s: int64 result differs at %ld (-2: dtype or shape)", peer, at);
        dist_value_free(ret); ret = NULL;
        g_checks += 2;
    }

    /* 4. a remote failure */
    {
        char want[128];
        snprintf(want, sizeof want, "deliberate failure on %s (code 42)", peer_platform);
        res = dist_rpc_sync(peer, "boom", NULL, &ret);
        if (res != DIST_ERR_REMOTE || !strstr(dist_rpc_error_message(), want))
            return FAIL("rpc_sync %s boom: %s \"%s\", expected DIST_ERR_REMOTE with \"%s\"", peer, dist_result_name(res),
                        dist_rpc_error_message(), want);
        dist_value_free(ret); ret = NULL;
        g_checks++;
    }

    /* 5. a remote reference: to_here, then back to its owner */
    {
        dist_rref_t *r = NULL;
        char why[640];
        uint64_t rs = mix64(seed + 77);
        if ((res = dist_remote(peer, "make_ref", dist_value_pack("[I]", (int64_t)rs), &r)) != DIST_OK)
            return FAIL("remote %s make_ref: %s: %s", peer, dist_result_name(res), dist_rpc_error_message());
        if ((res = dist_rref_to_here(r, 0, &ret)) != DIST_OK) {
            dist_rref_free(r);
            return FAIL("to_here of %s's make_ref: %s: %s", peer, dist_result_name(res), dist_rpc_error_message());
        }
        if (*ref_value_wrong(ret, peer_platform, rs, why, sizeof why)) { dist_rref_free(r); return FAIL("to_here of %s's make_ref: %s", peer, why); }
        dist_value_free(ret); ret = NULL;
        res = dist_rpc_sync(peer, "ref_check", dist_value_pack("[RI]", r, (int64_t)rs), &ret);
        dist_rref_free(r);
        if (res != DIST_OK) return FAIL("rpc_sync %s ref_check: %s: %s", peer, dist_result_name(res), dist_rpc_error_message());
        dist_value_free(ret); ret = NULL;
        g_checks += 2;
    }
    return 0;
}

int main(void) {
    dist_rpc_config cfg;
    dist_result res;
    int n, bad = 0;
    char peers[256] = "", pp[32];
    int64_t t0 = dist_time_ns();
    static const struct { const char *name; dist_rpc_fn fn; } fns[] = {
        { "whoami", h_whoami }, { "add", h_add }, { "tensors", h_tensors },
        { "boom", h_boom }, { "make_ref", h_make_ref }, { "ref_check", h_ref_check },
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) dist_rpc_register(fns[i].name, fns[i].fn);
    memset(&cfg, 0, sizeof cfg);        /* everything from the environment */
    if ((res = dist_rpc_init(&cfg)) != DIST_OK) {
        printf("FAIL worker %s (%s): dist_rpc_init: %s: %s\n", getenv("RANK") ? getenv("RANK") : "?", PLATFORM,
               dist_result_name(res), dist_rpc_error_message());
        return 1;
    }
    {
        dist_worker_info me;
        dist_rpc_get_worker_info(NULL, &me);
        g_rank = me.rank;
    }
    n = dist_rpc_world_size();
    for (int q = 0; q < n && !bad; q++) {
        char peer[32];
        if (q == g_rank) continue;
        snprintf(peer, sizeof peer, "worker%d", q);
        pp[0] = 0;
        bad = call_peer(peer, q, pp, sizeof pp);
        snprintf(peers + strlen(peers), sizeof peers - strlen(peers), "%s%s %s", peers[0] ? ", " : "", peer, pp[0] ? pp : "?");
    }
    res = dist_rpc_shutdown(1);
    if (res != DIST_OK && !bad) bad = FAIL("rpc_shutdown: %s: %s", dist_result_name(res), dist_rpc_error_message());
    if (bad)
        printf("FAIL worker %d (%s, %.1f s): %s\n", g_rank, PLATFORM, (double)(dist_time_ns() - t0) / 1e9, g_fail);
    else
        printf("ok   worker %d (%s): %ld checks, peers %s (%.1f s)\n", g_rank, PLATFORM, g_checks, peers,
               (double)(dist_time_ns() - t0) / 1e9);
    fflush(stdout);
    return bad ? 1 : 0;
}
