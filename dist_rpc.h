/* dist_rpc.h - v0.1.0 - torch.distributed.rpc for C: calls between named
   workers, futures, remote references, and the typed values they carry,
   on top of dist.h.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_RPC_IMPLEMENTATION
      #include "dist_rpc.h"
   in ONE C or C++ file (usually the one that defines DIST_IMPLEMENTATION
   too; dist_rpc.h includes dist.h itself); include "dist_rpc.h" without
   the define everywhere else.

QUICK START: RPC
   Every worker registers the same functions by name, joins (rank, world
   size and rendezvous as for dist_init: {0} reads the environment, e.g.
   under distrun), calls, and leaves:

      static dist_value_t *add(dist_rpc_call_t *call, const dist_value_t *args) {
          int64_t a, b;
          if (dist_value_unpack(args, "[II]", &a, &b) != DIST_OK) {
              dist_rpc_call_fail(call, "%s", dist_rpc_error_message());
              return NULL;
          }
          return dist_value_int(a + b);
      }
      ...
      dist_rpc_register("add", add);
      dist_rpc_config cfg = {0};
      cfg.name = rank == 0 ? "agent" : NULL;            // NULL: "worker<rank>"
      if (dist_rpc_init(&cfg) != DIST_OK) { puts(dist_rpc_error_message()); return 1; }
      dist_value_t *sum = NULL;
      if (dist_rpc_sync("worker1", "add", dist_value_pack("[II]", (int64_t)2, (int64_t)3), &sum) == DIST_OK)
          ...                                            // 5; a failure names worker, function and why
      dist_value_free(sum);
      dist_rpc_shutdown(1);                             // waits for everyone's calls and references

   dist_rpc_async gives a future (wait, test, then, wait_all).  A handler
   may wait on calls of its own, or defer and answer later from anywhere.

QUICK START: REMOTE REFERENCES
   dist_remote runs a function on a worker that keeps the result (the
   owner); you hold a reference, pass it on in arguments and results (pack
   'R'), and fetch a copy when you need one:

      dist_rref_t *param;
      dist_remote("ps", "make_weights", dist_value_pack("[ii]", 64, 32), &param);
      dist_rpc_sync("trainer1", "train", dist_value_pack("[R]", param), NULL);
      dist_value_t *w;
      if (dist_rref_to_here(param, 0, &w) == DIST_OK) ... ;   // a failed remote() says so here
      dist_value_free(w);
      dist_rref_free(param);        // the owner frees the value once nobody holds it

QUICK START: VALUES
   An RPC's arguments and result are one value: an int, a float, a string,
   bytes, a tensor (dtype, shape, data) or a list of values.  Build one with
   a format string, read it back the same way; every getter checks the type
   and fails with a sentence instead of crashing:

      dist_value_t *args = dist_value_pack("[isf]", 42, "observer", 0.5);
      int n; const char *who; double eps;
      if (dist_value_unpack(args, "[isf]", &n, &who, &eps) != DIST_OK)
          fprintf(stderr, "%s\n", dist_rpc_error_message());
      dist_value_free(args);

   Format characters (pack reads the arguments, unpack stores through
   pointers to them):
      n        none                  (no argument)
      i        int                   int / int *
      I        int64_t               int64_t / int64_t *
      f        double (or float)     double / double *
      s        string                const char * / const char **
      b        bytes                 const void *, size_t / const void **, size_t *
      t        tensor                dist_dtype, int ndim, const int64_t *shape,
                                     const void *data (copied) / dist_tensor_view *
      v        any value             dist_value_t * (taken over) / const dist_value_t **
      R        RRef                  dist_rref_t * (one more reference) /
                                     dist_rref_t ** (borrowed)
      [ ... ]  a list of the items between the brackets
      *        unpack only: skip one item
   Unpacking a list reads its first items; fewer items than the format asks
   for is an error, more is not.  What unpack hands out points into the
   value and lives as long as it does.

   Or one item at a time: dist_value_int(42), dist_value_list() +
   dist_value_append(list, item), dist_value_item(list, i),
   dist_value_get_int(v, &x)...

WIRE FORMAT
   Little-endian, one type byte per value, then:
      int i64 | float f64 | string u32 length, the bytes, a NUL |
      bytes u32 length, the bytes | list u32 count, the items |
      tensor u8 dtype, u8 ndim, i64 shape[ndim], u8 where (0: the data
      follows, after zero bytes up to an 8-byte boundary of the message;
      1: it travels separately, as u32 index of the out-of-band buffer) |
      none: nothing.
   The decoder checks every byte before use: known types and dtypes, ndim
   at most DIST_RPC_MAX_DIMS, shapes that fit the message (no overflow),
   lengths within what is left, strings NUL-terminated without a NUL
   inside, lists no deeper than DIST_RPC_MAX_DEPTH, nothing left over.  A
   decoded value points into the message it came from: strings, bytes and
   inline tensors are not copied (inline tensor data is 8-byte aligned).
   Nothing that travels can carry code.

COMPILE-TIME OPTIONS
   DIST_RPC_IMPLEMENTATION   where: one file.  Compile the implementation.
   DIST_RPC_MAX_MESSAGE      where: the implementation file.  Largest
                             encoded value accepted (default 1 GiB).
   DIST_RPC_APART_BYTES      where: the implementation file.  A tensor of at
                             least this many bytes (default 64 KiB) travels
                             beside an RPC message, not inside it: sent from
                             its own memory, received into its final place.
   DIST_RPC_MAX_ITEMS        where: the implementation file.  Most values
                             (list items at every depth) one decoded value
                             may hold (default 2^20), so a small message
                             cannot ask for a huge allocation.
   DIST_STATIC, DIST_MALLOC/DIST_FREE/DIST_REALLOC as in dist.h.

THREADS
   A value belongs to one thread at a time.  Each thread has its own last
   error sentence (dist_rpc_error_message).
*/
/* The implementation needs POSIX threads; they are requested before the
   first system header where that is possible (include dist_rpc.h first, or
   build with -D_GNU_SOURCE); the clocks come from dist.h and C11. */
#if defined(DIST_RPC_IMPLEMENTATION) && defined(__linux__) && !defined(_GNU_SOURCE)
#  define _GNU_SOURCE
#endif

#ifndef DIST_RPC_H
#define DIST_RPC_H

#include "dist.h"            /* declarations (and its implementation where DIST_IMPLEMENTATION is defined) */
#if DIST_VERSION_MAJOR != 0 || DIST_VERSION_MINOR != 1
#  error "dist_rpc.h v0.1 needs dist.h v0.1"
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIST_RPC_MAX_DIMS  8
#define DIST_RPC_MAX_DEPTH 64

typedef struct dist_value dist_value_t;

typedef enum dist_value_type {
    DIST_VALUE_NONE = 0,
    DIST_VALUE_INT = 1,
    DIST_VALUE_FLOAT = 2,
    DIST_VALUE_STRING = 3,
    DIST_VALUE_BYTES = 4,
    DIST_VALUE_LIST = 5,
    DIST_VALUE_TENSOR = 6,
    DIST_VALUE_RREF = 7              /* a remote reference (travels only in RPC messages) */
} dist_value_type;

typedef struct dist_rref dist_rref_t;

/* A tensor as a value holds it: row-major, `nbytes` = product of the shape
   x the dtype's size. */
typedef struct dist_tensor_view {
    dist_dtype dtype;
    int ndim;
    int64_t shape[DIST_RPC_MAX_DIMS];
    void *data;
    size_t nbytes;
} dist_tensor_view;

/* The calling thread's last error sentence ("" when none). */
DIST_API const char *dist_rpc_error_message(void);

/* Building.  Each returns NULL only when out of memory (or, for tensors, on
   a bad shape: the sentence says which). */
DIST_API dist_value_t *dist_value_none(void);
DIST_API dist_value_t *dist_value_int(int64_t x);
DIST_API dist_value_t *dist_value_float(double x);
DIST_API dist_value_t *dist_value_string(const char *s);                /* copied */
DIST_API dist_value_t *dist_value_bytes(const void *p, size_t n);       /* copied */
/* data NULL: zeros.  Copied. */
DIST_API dist_value_t *dist_value_tensor(dist_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* Not copied: `data` must stay valid and unchanged while the value lives
   (an argument that is sent without any copy into a message). */
DIST_API dist_value_t *dist_value_tensor_borrow(dist_dtype dtype, int ndim, const int64_t *shape, void *data);
/* Not copied either, and yours no more: `release(data, user)` runs once,
   when the value is freed (on the thread that frees it).  NULL (a bad
   shape, out of memory): nothing is released, the data is still yours. */
DIST_API dist_value_t *dist_value_tensor_wrap(dist_dtype dtype, int ndim, const int64_t *shape, void *data,
                                              void (*release)(void *data, void *user), void *user);
/* A reference to `r` (one more reference: the value holds it until freed). */
DIST_API dist_value_t *dist_value_rref(dist_rref_t *r);
DIST_API dist_value_t *dist_value_list(void);
/* Takes `item` over (also when it fails: then it is freed). */
DIST_API dist_result dist_value_append(dist_value_t *list, dist_value_t *item);
/* A value from a format (see QUICK START).  NULL on a bad format or out of
   memory; dist_rpc_error_message() says which.  Values passed with 'v' are
   taken over either way. */
DIST_API dist_value_t *dist_value_pack(const char *fmt, ...);
/* A deep copy, yours (its references are new ones to the same values). */
DIST_API dist_value_t *dist_value_copy(const dist_value_t *v);
/* Frees a value and everything in it.  NULL is fine. */
DIST_API void dist_value_free(dist_value_t *v);

/* Reading. */
DIST_API dist_value_type dist_value_kind(const dist_value_t *v);      /* NONE for NULL */
DIST_API const char *dist_value_type_name(dist_value_type t);          /* "string" */
/* Items of a list, bytes of a string or bytes, elements of a tensor; 0
   otherwise. */
DIST_API size_t dist_value_len(const dist_value_t *v);
/* Item i of a list; NULL when `v` is not a list or i is out of range. */
DIST_API const dist_value_t *dist_value_item(const dist_value_t *list, size_t i);
DIST_API dist_result dist_value_get_int(const dist_value_t *v, int64_t *out);
DIST_API dist_result dist_value_get_float(const dist_value_t *v, double *out);  /* an int converts */
DIST_API dist_result dist_value_get_string(const dist_value_t *v, const char **out);
DIST_API dist_result dist_value_get_bytes(const dist_value_t *v, const void **data, size_t *n);
DIST_API dist_result dist_value_get_tensor(const dist_value_t *v, dist_tensor_view *out);
/* Borrowed: valid while `v` lives (dist_rref_keep it to hold on longer). */
DIST_API dist_result dist_value_get_rref(const dist_value_t *v, dist_rref_t **out);
DIST_API dist_result dist_value_unpack(const dist_value_t *v, const char *fmt, ...);
/* Deep equality (tensors: same dtype, shape and bytes). */
DIST_API int dist_value_equal(const dist_value_t *a, const dist_value_t *b);

/* Encoding to bytes and back, for tests and for anyone who stores values.
   dist_value_encode writes at most `cap` bytes and sets *len to the size
   the encoding needs (call with cap 0 to learn it); DIST_ERR_TRUNCATED when
   it did not fit.  Every tensor travels inline. */
DIST_API dist_result dist_value_encode(const dist_value_t *v, void *buf, size_t cap, size_t *len);
/* Decodes a copy of `len` bytes; DIST_ERR_PROTOCOL with a sentence when
   they are not one well-formed value. */
DIST_API dist_result dist_value_decode(const void *buf, size_t len, dist_value_t **out);

/* ---- RPC ----
   One agent per process (as torch.distributed.rpc): dist_rpc_init joins
   the job, dist_rpc_shutdown leaves it.  Functions are registered by name
   (the same names on every worker), before or after init. */
typedef struct dist_rpc_call dist_rpc_call_t;   /* one incoming call, while its handler runs */
typedef struct dist_future dist_future_t;

/* A handler: returns the result (taken over; NULL: none), or calls
   dist_rpc_call_fail and returns NULL, or calls dist_rpc_call_defer and
   answers later with dist_rpc_call_reply (from any thread). */
typedef dist_value_t *(*dist_rpc_fn)(dist_rpc_call_t *call, const dist_value_t *args);

typedef struct dist_rpc_config {
    dist_config dist;        /* rendezvous, rank, world size, secret: as for
                                dist_init ({0}: the environment)          */
    const char *name;        /* this worker's name, unique in the job;
                                NULL: "worker<rank>"                       */
    int num_threads;         /* handler threads; 0: 4                       */
    int timeout_ms;          /* default timeout of a call; 0: 60 s; < 0:
                                none                                        */
} dist_rpc_config;

typedef struct dist_worker_info {
    char name[128];
    int rank;
} dist_worker_info;

#define DIST_RPC_DEFAULT_TIMEOUT 0      /* a call's timeout_ms: the agent's default */
#define DIST_RPC_NO_TIMEOUT     (-1)    /* a call's timeout_ms: wait as long as it takes */

DIST_API dist_result dist_rpc_init(const dist_rpc_config *cfg);
/* graceful: waits (bounded by the default timeout) until every worker has
   called dist_rpc_shutdown and finished its outstanding calls, then
   leaves; not graceful: fails what is outstanding and leaves at once. */
DIST_API dist_result dist_rpc_shutdown(int graceful);
DIST_API dist_result dist_rpc_register(const char *name, dist_rpc_fn fn);
/* name NULL: this worker. */
DIST_API dist_result dist_rpc_get_worker_info(const char *name, dist_worker_info *info);
DIST_API int dist_rpc_world_size(void);

/* Calls `fn` on worker `to` with `args` (taken over, also on failure; NULL:
   none).  sync waits for the result (*ret, yours to free); async returns a
   future.  The _timeout forms take a per-call timeout (0: the default,
   DIST_RPC_NO_TIMEOUT: none). */
DIST_API dist_result dist_rpc_sync(const char *to, const char *fn, dist_value_t *args, dist_value_t **ret);
DIST_API dist_result dist_rpc_async(const char *to, const char *fn, dist_value_t *args, dist_future_t **fut);
DIST_API dist_result dist_rpc_sync_timeout(const char *to, const char *fn, dist_value_t *args, int timeout_ms, dist_value_t **ret);
DIST_API dist_result dist_rpc_async_timeout(const char *to, const char *fn, dist_value_t *args, int timeout_ms, dist_future_t **fut);

/* Futures.  wait: until done or `timeout_ms` (0: no limit of its own; the
   call's timeout still applies); the future's result (DIST_OK,
   DIST_ERR_REMOTE, DIST_ERR_UNKNOWN_FUNCTION, DIST_ERR_TIMEOUT,
   DIST_ERR_PEER_LOST...), or DIST_ERR_TIMEOUT when only this wait ran out.
   then: `cb` runs once, when the future is done (at once if it is), on the
   thread that completes it: keep it short and never wait in it. */
DIST_API dist_result dist_future_wait(dist_future_t *f, int timeout_ms);
DIST_API dist_result dist_future_test(dist_future_t *f, int *done);
DIST_API dist_result dist_future_then(dist_future_t *f, void (*cb)(dist_future_t *f, void *user), void *user);
/* Waits for all, within one `timeout_ms` (0: none of its own); the first
   failure, DIST_OK if none. */
DIST_API dist_result dist_future_wait_all(int n, dist_future_t **fs, int timeout_ms);
DIST_API const dist_value_t *dist_future_value(const dist_future_t *f);   /* NULL until done */
DIST_API dist_value_t *dist_future_take(dist_future_t *f);                 /* the value, now yours */
DIST_API dist_result dist_future_result(const dist_future_t *f);          /* DIST_OK while pending */
DIST_API const char *dist_future_error(const dist_future_t *f);           /* "" when none */
DIST_API void dist_future_free(dist_future_t *f);                         /* pending is fine */

/* Inside a handler. */
DIST_API int dist_rpc_call_caller(const dist_rpc_call_t *call);            /* the caller's rank */
DIST_API const char *dist_rpc_call_function(const dist_rpc_call_t *call);
DIST_API void dist_rpc_call_fail(dist_rpc_call_t *call, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
DIST_API void dist_rpc_call_defer(dist_rpc_call_t *call);
/* Answers a deferred call (result taken over); the call is gone after. */
DIST_API dist_result dist_rpc_call_reply(dist_rpc_call_t *call, dist_value_t *result);
/* Answers a deferred call with what `f` brings (its value or its error)
   when it completes; takes `f` over. */
DIST_API dist_result dist_rpc_call_forward(dist_rpc_call_t *call, dist_future_t *f);

/* ---- Remote references ----
   dist_remote runs `fn` on worker `to` and leaves the result there, on its
   owner: you get a reference at once, before the call is done.  A
   reference travels in arguments and results (dist_value_rref, pack 'R')
   to any worker, the owner included; each worker that holds one is a user,
   and the owner frees the value exactly once, when the last reference
   anywhere is freed.  A remote() that failed reports its error on the
   reference's next use (to_here, local_value).  Every handle you get
   (dist_remote, dist_rref_new, dist_rref_keep) is freed with
   dist_rref_free; one borrowed from a value is not.  A graceful shutdown
   waits until every worker's references are let go of: it lets go of
   the user references you still hold for you; your handles stay valid
   (an owner's value too) until you free them, but travel no more. */
DIST_API dist_result dist_remote(const char *to, const char *fn, dist_value_t *args, dist_rref_t **rref);
DIST_API dist_result dist_remote_timeout(const char *to, const char *fn, dist_value_t *args, int timeout_ms, dist_rref_t **rref);
/* A reference to `value` (taken over), owned by this worker. */
DIST_API dist_result dist_rref_new(dist_value_t *value, dist_rref_t **rref);
DIST_API int dist_rref_is_owner(const dist_rref_t *r);
/* The owner's name and rank. */
DIST_API dist_result dist_rref_owner(const dist_rref_t *r, dist_worker_info *info);
/* 1 once the owner knows of this reference (always on the owner): from
   then on the value cannot be freed under it. */
DIST_API int dist_rref_confirmed_by_owner(const dist_rref_t *r);
/* Owner only: the value itself (borrowed, lives as long as `r`), once the
   remote() that makes it is done (waits at most the agent's timeout). */
DIST_API dist_result dist_rref_local_value(dist_rref_t *r, const dist_value_t **out);
/* A copy of the value, fetched from the owner (*out yours to free);
   timeout_ms as for calls. */
DIST_API dist_result dist_rref_to_here(dist_rref_t *r, int timeout_ms, dist_value_t **out);
/* One more reference to `r` (returns `r`). */
DIST_API dist_rref_t *dist_rref_keep(dist_rref_t *r);
DIST_API void dist_rref_free(dist_rref_t *r);
/* What this worker holds now: values it owns, and references to values
   owned elsewhere (its user forks, released ones included until the owner
   has heard).  NULL pointers are fine. */
DIST_API void dist_rpc_rref_counts(int *owned, int *users);

#ifdef __cplusplus
}
#endif
#endif /* DIST_RPC_H */

/* Stop now if you only need the API; the implementation follows. */

#if defined(DIST_RPC_IMPLEMENTATION) && !defined(DIST_RPC_IMPLEMENTATION_DONE)
#define DIST_RPC_IMPLEMENTATION_DONE

/* Index:
   [SECTION] configuration and errors
   [SECTION] values: nodes, building, reading
   [SECTION] values: format strings
   [SECTION] values: the wire format
*/

/* [SECTION] configuration and errors */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <limits.h>
#include <pthread.h>
#include <time.h>

#if defined(DIST_MALLOC) && defined(DIST_FREE) && defined(DIST_REALLOC)
#elif !defined(DIST_MALLOC) && !defined(DIST_FREE) && !defined(DIST_REALLOC)
#  define DIST_MALLOC(sz)      malloc(sz)
#  define DIST_FREE(p)         free(p)
#  define DIST_REALLOC(p, sz)  realloc(p, sz)
#else
#  error "dist_rpc.h: define all of DIST_MALLOC, DIST_FREE and DIST_REALLOC, or none"
#endif
#ifndef DIST_RPC_MAX_MESSAGE
#  define DIST_RPC_MAX_MESSAGE ((size_t)1 << 30)
#endif
#ifndef DIST_RPC_MAX_ITEMS
#  define DIST_RPC_MAX_ITEMS   ((size_t)1 << 20)
#endif
#ifdef __cplusplus
#  define DIST_RPC__TLS thread_local
#else
#  define DIST_RPC__TLS _Thread_local
#endif
#if defined(__GNUC__)
#  define DIST_RPC__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define DIST_RPC__PRINTF(a, b)
#endif

static DIST_RPC__TLS char dist_rpc__error[512];

static dist_result dist_rpc__fail(dist_result code, const char *fmt, ...) DIST_RPC__PRINTF(2, 3);
static dist_result dist_rpc__fail(dist_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dist_rpc__error, sizeof dist_rpc__error, fmt, ap);
    va_end(ap);
    return code;
}

DIST_API const char *dist_rpc_error_message(void) { return dist_rpc__error; }

/* [SECTION] values: nodes, building, reading
   A value is a tree of nodes.  A built value owns each node and its data;
   a decoded one is a single block (every node, the item arrays and a copy
   of the message) freed at once, so a decode costs one allocation and
   strings, bytes and inline tensors point into the message. */
enum { DIST_RPC__OWN_NODE = 1, DIST_RPC__OWN_DATA = 2, DIST_RPC__OWN_BLOCK = 4, DIST_RPC__OWN_RREFS = 8, DIST_RPC__OWN_PART = 16 };
#define DIST_RPC__ERRLEN 400

/* An RRef's id, and a fork's (one user's reference): the worker that made
   it and that worker's counter. */
typedef struct { uint32_t rank; uint64_t id; } dist_rpc__id;

/* [SECTION] RPC: remote references */
static void dist_rpc__rref_drop(dist_rref_t *r);
static int dist_rpc__rref_same(const dist_rref_t *a, const dist_rref_t *b);

struct dist_value {
    uint8_t type, own;
    uint8_t dtype, ndim;
    union {
        int64_t i;
        double f;
        struct { uint8_t *p; size_t n; } s;                  /* string (NUL after n), bytes */
        struct { dist_value_t **items; size_t n, cap; } list;
        struct { uint8_t *data; size_t nbytes; int64_t *shape; void (*release)(void *, void *); void *user; } t;
        struct { dist_rref_t *ref; uint32_t owner; dist_rpc__id rid, fid, pfid; } r;   /* ids as decoded, until taken in */
    } u;
};

static const char *const dist_rpc__type_names[] = { "none", "int", "float", "string", "bytes", "list", "tensor", "rref" };

DIST_API const char *dist_value_type_name(dist_value_type t) {
    return (unsigned)t < sizeof dist_rpc__type_names / sizeof *dist_rpc__type_names ? dist_rpc__type_names[t] : "unknown";
}

static dist_value_t *dist_rpc__node(int type) {
    dist_value_t *v = (dist_value_t *)DIST_MALLOC(sizeof *v);
    if (!v) { dist_rpc__fail(DIST_ERR_NOMEM, "value: out of memory"); return NULL; }
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)type;
    v->own = DIST_RPC__OWN_NODE;
    return v;
}

DIST_API dist_value_t *dist_value_none(void) { return dist_rpc__node(DIST_VALUE_NONE); }

DIST_API dist_value_t *dist_value_int(int64_t x) {
    dist_value_t *v = dist_rpc__node(DIST_VALUE_INT);
    if (v) v->u.i = x;
    return v;
}

DIST_API dist_value_t *dist_value_float(double x) {
    dist_value_t *v = dist_rpc__node(DIST_VALUE_FLOAT);
    if (v) v->u.f = x;
    return v;
}

/* A string or bytes node holding a copy of n bytes (and a NUL). */
static dist_value_t *dist_rpc__blob(int type, const void *p, size_t n) {
    dist_value_t *v;
    if (n > DIST_RPC_MAX_MESSAGE) { dist_rpc__fail(DIST_ERR_INVALID, "value: %s of %zu bytes exceeds the limit", dist_rpc__type_names[type], n); return NULL; }
    if (n && !p) { dist_rpc__fail(DIST_ERR_INVALID, "value: NULL %s pointer for %zu bytes", dist_rpc__type_names[type], n); return NULL; }
    if (!(v = dist_rpc__node(type))) return NULL;
    v->u.s.p = (uint8_t *)DIST_MALLOC(n + 1);
    if (!v->u.s.p) { DIST_FREE(v); dist_rpc__fail(DIST_ERR_NOMEM, "value: out of memory for %zu bytes", n); return NULL; }
    if (n) memcpy(v->u.s.p, p, n);
    v->u.s.p[n] = 0;
    v->u.s.n = n;
    v->own |= DIST_RPC__OWN_DATA;
    return v;
}

DIST_API dist_value_t *dist_value_string(const char *s) {
    if (!s) { dist_rpc__fail(DIST_ERR_INVALID, "value: NULL string"); return NULL; }
    return dist_rpc__blob(DIST_VALUE_STRING, s, strlen(s));
}

DIST_API dist_value_t *dist_value_bytes(const void *p, size_t n) { return dist_rpc__blob(DIST_VALUE_BYTES, p, n); }

/* Checks a tensor's dtype and shape; its size in bytes, or -1. */
static int dist_rpc__tensor_bytes(dist_dtype dtype, int ndim, const int64_t *shape, size_t *nbytes) {
    size_t es = dist_dtype_size(dtype), n = 1;
    if (es == 0) return dist_rpc__fail(DIST_ERR_INVALID, "tensor: unknown dtype %d", (int)dtype), -1;
    if (ndim < 0 || ndim > DIST_RPC_MAX_DIMS) return dist_rpc__fail(DIST_ERR_INVALID, "tensor: %d dimensions (at most %d)", ndim, DIST_RPC_MAX_DIMS), -1;
    if (ndim && !shape) return dist_rpc__fail(DIST_ERR_INVALID, "tensor: NULL shape for %d dimensions", ndim), -1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return dist_rpc__fail(DIST_ERR_INVALID, "tensor: dimension %d is %lld", d, (long long)shape[d]), -1;
        if (shape[d] && n > DIST_RPC_MAX_MESSAGE / (size_t)shape[d])
            return dist_rpc__fail(DIST_ERR_INVALID, "tensor: the shape is larger than the limit of %zu bytes", (size_t)DIST_RPC_MAX_MESSAGE), -1;
        n *= (size_t)shape[d];
    }
    if (n > DIST_RPC_MAX_MESSAGE / es)
        return dist_rpc__fail(DIST_ERR_INVALID, "tensor: %zu x %s is larger than the limit of %zu bytes", n, dist_dtype_name(dtype),
                              (size_t)DIST_RPC_MAX_MESSAGE), -1;
    *nbytes = n * es;
    return 0;
}

static dist_value_t *dist_rpc__tensor(dist_dtype dtype, int ndim, const int64_t *shape, const void *data, int copy) {
    size_t nbytes;
    dist_value_t *v;
    if (dist_rpc__tensor_bytes(dtype, ndim, shape, &nbytes) != 0) return NULL;
    if (!copy && nbytes && !data) { dist_rpc__fail(DIST_ERR_INVALID, "tensor: NULL data to borrow"); return NULL; }
    if (!(v = dist_rpc__node(DIST_VALUE_TENSOR))) return NULL;
    v->dtype = (uint8_t)dtype; v->ndim = (uint8_t)ndim;
    /* the shape, then (when copied) the data, in one block */
    v->u.t.shape = (int64_t *)DIST_MALLOC(sizeof(int64_t) * DIST_RPC_MAX_DIMS + (copy ? nbytes : 0));
    if (!v->u.t.shape) { DIST_FREE(v); dist_rpc__fail(DIST_ERR_NOMEM, "tensor: out of memory for %zu bytes", nbytes); return NULL; }
    v->own |= DIST_RPC__OWN_DATA;
    if (ndim) memcpy(v->u.t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    v->u.t.nbytes = nbytes;
    if (copy) {
        v->u.t.data = (uint8_t *)(v->u.t.shape + DIST_RPC_MAX_DIMS);
        if (data && nbytes) memcpy(v->u.t.data, data, nbytes);
        else if (nbytes) memset(v->u.t.data, 0, nbytes);
    } else {
        v->u.t.data = (uint8_t *)data;
    }
    return v;
}

DIST_API dist_value_t *dist_value_tensor(dist_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    return dist_rpc__tensor(dtype, ndim, shape, data, 1);
}

DIST_API dist_value_t *dist_value_tensor_borrow(dist_dtype dtype, int ndim, const int64_t *shape, void *data) {
    return dist_rpc__tensor(dtype, ndim, shape, data, 0);
}

DIST_API dist_value_t *dist_value_tensor_wrap(dist_dtype dtype, int ndim, const int64_t *shape, void *data,
                                              void (*release)(void *, void *), void *user) {
    dist_value_t *v = dist_rpc__tensor(dtype, ndim, shape, data, 0);
    if (v) { v->u.t.release = release; v->u.t.user = user; }
    return v;
}

DIST_API dist_value_t *dist_value_list(void) { return dist_rpc__node(DIST_VALUE_LIST); }

DIST_API dist_value_t *dist_value_rref(dist_rref_t *r) {
    dist_value_t *v;
    if (!r) { dist_rpc__fail(DIST_ERR_INVALID, "value: NULL rref"); return NULL; }
    if ((v = dist_rpc__node(DIST_VALUE_RREF))) v->u.r.ref = dist_rref_keep(r);
    return v;
}

/* Lets go of the references in a decoded block (its nodes are not freed
   one by one). */
static void dist_rpc__drop_rrefs(dist_value_t *v) {
    if (v->type == DIST_VALUE_LIST)
        for (size_t i = 0; i < v->u.list.n; i++) dist_rpc__drop_rrefs(v->u.list.items[i]);
    else if (v->type == DIST_VALUE_RREF && v->u.r.ref) { dist_rpc__rref_drop(v->u.r.ref); v->u.r.ref = NULL; }
}

DIST_API void dist_value_free(dist_value_t *v) {
    if (!v) return;
    if (v->own & DIST_RPC__OWN_BLOCK) {                  /* a decoded value: one block */
        if (v->own & DIST_RPC__OWN_RREFS) dist_rpc__drop_rrefs(v);
        DIST_FREE(v);
        return;
    }
    if (v->type == DIST_VALUE_LIST) {
        for (size_t i = 0; i < v->u.list.n; i++) dist_value_free(v->u.list.items[i]);
        DIST_FREE(v->u.list.items);
    } else if (v->type == DIST_VALUE_TENSOR) {
        if (v->u.t.release) v->u.t.release(v->u.t.data, v->u.t.user);
        if (v->own & DIST_RPC__OWN_DATA) DIST_FREE(v->u.t.shape);
    } else if (v->type == DIST_VALUE_RREF) {
        if (v->u.r.ref) dist_rpc__rref_drop(v->u.r.ref);
    } else if (v->own & DIST_RPC__OWN_DATA) {
        DIST_FREE(v->u.s.p);
    }
    if (v->own & DIST_RPC__OWN_NODE) DIST_FREE(v);
}

DIST_API dist_value_t *dist_value_copy(const dist_value_t *v) {
    dist_value_t *c;
    if (!v) { dist_rpc__fail(DIST_ERR_INVALID, "copy: NULL value"); return NULL; }
    switch (v->type) {
    case DIST_VALUE_INT: return dist_value_int(v->u.i);
    case DIST_VALUE_FLOAT: return dist_value_float(v->u.f);
    case DIST_VALUE_STRING: case DIST_VALUE_BYTES: return dist_rpc__blob(v->type, v->u.s.p, v->u.s.n);
    case DIST_VALUE_TENSOR: return dist_rpc__tensor((dist_dtype)v->dtype, v->ndim, v->u.t.shape, v->u.t.data, 1);
    case DIST_VALUE_RREF:
        if (!v->u.r.ref) { dist_rpc__fail(DIST_ERR_INVALID, "copy: an rref that could not be taken in"); return NULL; }
        return dist_value_rref(v->u.r.ref);
    case DIST_VALUE_LIST:
        if (!(c = dist_value_list())) return NULL;
        for (size_t i = 0; i < v->u.list.n; i++)
            if (dist_value_append(c, dist_value_copy(v->u.list.items[i])) != DIST_OK) { dist_value_free(c); return NULL; }
        return c;
    default: return dist_value_none();
    }
}

DIST_API dist_result dist_value_append(dist_value_t *list, dist_value_t *item) {
    if (!item) return dist_rpc__fail(DIST_ERR_INVALID, "append: NULL item (did building it fail?)");
    if (!list || list->type != DIST_VALUE_LIST || !(list->own & DIST_RPC__OWN_NODE)) {
        dist_value_free(item);
        return dist_rpc__fail(DIST_ERR_TYPE, "append: the target is %s, not a list that was built",
                              list ? dist_value_type_name((dist_value_type)list->type) : "NULL");
    }
    if (list->u.list.n == list->u.list.cap) {
        size_t cap = list->u.list.cap ? list->u.list.cap * 2 : 4;
        dist_value_t **items = (dist_value_t **)DIST_REALLOC(list->u.list.items, cap * sizeof *items);
        if (!items) { dist_value_free(item); return dist_rpc__fail(DIST_ERR_NOMEM, "append: out of memory"); }
        list->u.list.items = items;
        list->u.list.cap = cap;
    }
    list->u.list.items[list->u.list.n++] = item;
    return DIST_OK;
}

DIST_API dist_value_type dist_value_kind(const dist_value_t *v) { return v ? (dist_value_type)v->type : DIST_VALUE_NONE; }

DIST_API size_t dist_value_len(const dist_value_t *v) {
    if (!v) return 0;
    switch (v->type) {
    case DIST_VALUE_LIST: return v->u.list.n;
    case DIST_VALUE_STRING: case DIST_VALUE_BYTES: return v->u.s.n;
    case DIST_VALUE_TENSOR: return v->u.t.nbytes / dist_dtype_size((dist_dtype)v->dtype);
    default: return 0;
    }
}

DIST_API const dist_value_t *dist_value_item(const dist_value_t *list, size_t i) {
    if (!list || list->type != DIST_VALUE_LIST || i >= list->u.list.n) return NULL;
    return list->u.list.items[i];
}

/* A type mismatch: says what the value is (and a short view of it). */
static dist_result dist_rpc__wrong(const char *what, const dist_value_t *v, dist_value_type want) {
    char view[64] = "";
    if (!v) return dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL value, expected %s", what, dist_value_type_name(want));
    if (v->type == DIST_VALUE_INT) snprintf(view, sizeof view, " (%lld)", (long long)v->u.i);
    else if (v->type == DIST_VALUE_FLOAT) snprintf(view, sizeof view, " (%g)", v->u.f);
    else if (v->type == DIST_VALUE_STRING) snprintf(view, sizeof view, " (\"%.40s%s\")", (const char *)v->u.s.p, v->u.s.n > 40 ? "..." : "");
    else if (v->type == DIST_VALUE_LIST || v->type == DIST_VALUE_BYTES) snprintf(view, sizeof view, " of %zu", dist_value_len(v));
    return dist_rpc__fail(DIST_ERR_TYPE, "%s: the value is %s %s%s, not %s %s", what, v->type == DIST_VALUE_INT ? "an" : "a",
                          dist_value_type_name((dist_value_type)v->type), view, want == DIST_VALUE_INT ? "an" : "a",
                          dist_value_type_name(want));
}

DIST_API dist_result dist_value_get_int(const dist_value_t *v, int64_t *out) {
    if (!v || v->type != DIST_VALUE_INT) return dist_rpc__wrong("get_int", v, DIST_VALUE_INT);
    *out = v->u.i;
    return DIST_OK;
}

DIST_API dist_result dist_value_get_float(const dist_value_t *v, double *out) {
    if (v && v->type == DIST_VALUE_INT) { *out = (double)v->u.i; return DIST_OK; }
    if (!v || v->type != DIST_VALUE_FLOAT) return dist_rpc__wrong("get_float", v, DIST_VALUE_FLOAT);
    *out = v->u.f;
    return DIST_OK;
}

DIST_API dist_result dist_value_get_string(const dist_value_t *v, const char **out) {
    if (!v || v->type != DIST_VALUE_STRING) return dist_rpc__wrong("get_string", v, DIST_VALUE_STRING);
    *out = (const char *)v->u.s.p;
    return DIST_OK;
}

DIST_API dist_result dist_value_get_bytes(const dist_value_t *v, const void **data, size_t *n) {
    if (!v || v->type != DIST_VALUE_BYTES) return dist_rpc__wrong("get_bytes", v, DIST_VALUE_BYTES);
    *data = v->u.s.p;
    *n = v->u.s.n;
    return DIST_OK;
}

DIST_API dist_result dist_value_get_tensor(const dist_value_t *v, dist_tensor_view *out) {
    if (!v || v->type != DIST_VALUE_TENSOR) return dist_rpc__wrong("get_tensor", v, DIST_VALUE_TENSOR);
    memset(out, 0, sizeof *out);
    out->dtype = (dist_dtype)v->dtype;
    out->ndim = v->ndim;
    if (v->ndim) memcpy(out->shape, v->u.t.shape, sizeof(int64_t) * v->ndim);
    out->data = v->u.t.data;
    out->nbytes = v->u.t.nbytes;
    return DIST_OK;
}

DIST_API dist_result dist_value_get_rref(const dist_value_t *v, dist_rref_t **out) {
    if (!v || v->type != DIST_VALUE_RREF) return dist_rpc__wrong("get_rref", v, DIST_VALUE_RREF);
    if (!v->u.r.ref) return dist_rpc__fail(DIST_ERR_NOMEM, "get_rref: this reference could not be taken in when it arrived (out of memory)");
    *out = v->u.r.ref;
    return DIST_OK;
}

DIST_API int dist_value_equal(const dist_value_t *a, const dist_value_t *b) {
    if (!a || !b) return a == b;
    if (a->type != b->type) return 0;
    switch (a->type) {
    case DIST_VALUE_NONE: return 1;
    case DIST_VALUE_INT: return a->u.i == b->u.i;
    case DIST_VALUE_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;   /* bitwise: NaN equals itself */
    case DIST_VALUE_STRING: case DIST_VALUE_BYTES:
        return a->u.s.n == b->u.s.n && (a->u.s.n == 0 || memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0);
    case DIST_VALUE_LIST:
        if (a->u.list.n != b->u.list.n) return 0;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!dist_value_equal(a->u.list.items[i], b->u.list.items[i])) return 0;
        return 1;
    case DIST_VALUE_TENSOR:
        if (a->dtype != b->dtype || a->ndim != b->ndim || a->u.t.nbytes != b->u.t.nbytes) return 0;
        if (a->ndim && memcmp(a->u.t.shape, b->u.t.shape, sizeof(int64_t) * a->ndim) != 0) return 0;
        return a->u.t.nbytes == 0 || memcmp(a->u.t.data, b->u.t.data, a->u.t.nbytes) == 0;
    case DIST_VALUE_RREF: return dist_rpc__rref_same(a->u.r.ref, b->u.r.ref);
    default: return 0;
    }
}

/* [SECTION] values: format strings */

/* Builds the items of `fmt` from `*pos` up to a ']' (or the end when
   depth is 0) into `list`.  -1 on failure, the sentence set. */
static int dist_rpc__pack_items(dist_value_t *list, const char *fmt, size_t *pos, int depth, va_list *ap) {
    for (;;) {
        char c = fmt[*pos];
        dist_value_t *item = NULL;
        if (c == 0) {
            if (depth > 0) return dist_rpc__fail(DIST_ERR_INVALID, "pack \"%s\": a '[' is not closed", fmt), -1;
            return 0;
        }
        (*pos)++;
        switch (c) {
        case ' ': continue;
        case ']':
            if (depth == 0) return dist_rpc__fail(DIST_ERR_INVALID, "pack \"%s\": ']' at %zu closes nothing", fmt, *pos - 1), -1;
            return 0;
        case 'n': item = dist_value_none(); break;
        case 'i': item = dist_value_int(va_arg(*ap, int)); break;
        case 'I': item = dist_value_int(va_arg(*ap, int64_t)); break;
        case 'f': item = dist_value_float(va_arg(*ap, double)); break;
        case 's': item = dist_value_string(va_arg(*ap, const char *)); break;
        case 'b': {
            const void *p = va_arg(*ap, const void *);
            size_t n = va_arg(*ap, size_t);
            item = dist_value_bytes(p, n);
            break;
        }
        case 't': {
            dist_dtype dt = (dist_dtype)va_arg(*ap, int);
            int nd = va_arg(*ap, int);
            const int64_t *shape = va_arg(*ap, const int64_t *);
            const void *data = va_arg(*ap, const void *);
            item = dist_value_tensor(dt, nd, shape, data);
            break;
        }
        case 'R': item = dist_value_rref(va_arg(*ap, dist_rref_t *)); break;
        case 'v':
            item = va_arg(*ap, dist_value_t *);
            if (!item) return dist_rpc__fail(DIST_ERR_INVALID, "pack \"%s\": NULL value for 'v' at %zu", fmt, *pos - 1), -1;
            break;
        case '[':
            if (depth + 1 >= DIST_RPC_MAX_DEPTH) return dist_rpc__fail(DIST_ERR_INVALID, "pack \"%s\": lists nested deeper than %d", fmt, DIST_RPC_MAX_DEPTH), -1;
            if (!(item = dist_value_list())) return -1;
            if (dist_rpc__pack_items(item, fmt, pos, depth + 1, ap) != 0) { dist_value_free(item); return -1; }
            break;
        default:
            return dist_rpc__fail(DIST_ERR_INVALID, "pack \"%s\": unknown format character '%c' at %zu", fmt, c, *pos - 1), -1;
        }
        if (!item) return -1;
        if (dist_value_append(list, item) != DIST_OK) return -1;
    }
}

/* Skips the rest of a format after a failure, taking over (freeing) every
   'v' argument, as promised. */
static void dist_rpc__pack_drain(const char *fmt, size_t pos, va_list *ap) {
    for (; fmt[pos]; pos++) {
        switch (fmt[pos]) {
        case 'i': (void)va_arg(*ap, int); break;
        case 'I': (void)va_arg(*ap, int64_t); break;
        case 'f': (void)va_arg(*ap, double); break;
        case 's': (void)va_arg(*ap, const char *); break;
        case 'b': (void)va_arg(*ap, const void *); (void)va_arg(*ap, size_t); break;
        case 't': (void)va_arg(*ap, int); (void)va_arg(*ap, int); (void)va_arg(*ap, const int64_t *); (void)va_arg(*ap, const void *); break;
        case 'v': dist_value_free(va_arg(*ap, dist_value_t *)); break;
        case 'R': (void)va_arg(*ap, dist_rref_t *); break;
        case 'n': case '[': case ']': case ' ': break;
        default: return;          /* an unknown character: the arguments' types are unknown from here */
        }
    }
}

DIST_API dist_value_t *dist_value_pack(const char *fmt, ...) {
    va_list ap;
    size_t pos = 0;
    dist_value_t *holder, *v = NULL;
    if (!fmt) { dist_rpc__fail(DIST_ERR_INVALID, "pack: NULL format"); return NULL; }
    va_start(ap, fmt);
    holder = dist_value_list();
    if (holder && dist_rpc__pack_items(holder, fmt, &pos, 0, &ap) == 0) {
        if (holder->u.list.n == 1) { v = holder->u.list.items[0]; holder->u.list.n = 0; }
        else dist_rpc__fail(DIST_ERR_INVALID, "pack \"%s\": %zu values at the top; wrap them in [ ] to make one list", fmt, holder->u.list.n);
    } else {
        dist_rpc__pack_drain(fmt, pos, &ap);
    }
    va_end(ap);
    dist_value_free(holder);
    return v;
}

/* Reads the items of `fmt` from `*pos` up to a ']' (or the end at depth
   0) out of `items` (the value itself at depth 0). */
static dist_result dist_rpc__unpack_items(const dist_value_t *const *items, size_t nitems, const char *fmt, size_t *pos, int depth,
                                          va_list *ap) {
    size_t k = 0;
    for (;;) {
        char c = fmt[*pos], what[96];
        const dist_value_t *v;
        int want = -1;
        if (c == 0) return depth > 0 ? dist_rpc__fail(DIST_ERR_INVALID, "unpack \"%s\": a '[' is not closed", fmt) : DIST_OK;
        (*pos)++;
        if (c == ' ') continue;
        if (c == ']') {
            if (depth == 0) return dist_rpc__fail(DIST_ERR_INVALID, "unpack \"%s\": ']' at %zu closes nothing", fmt, *pos - 1);
            return DIST_OK;
        }
        snprintf(what, sizeof what, "unpack \"%.40s\": '%c' at %zu (item %zu)", fmt, c, *pos - 1, k);
        if (!strchr("niIfsbtvR*[", c)) return dist_rpc__fail(DIST_ERR_INVALID, "%s: unknown format character", what);
        if (k >= nitems)
            return dist_rpc__fail(DIST_ERR_TYPE, "%s: the %s has only %zu item%s", what, depth ? "list" : "value", nitems, nitems == 1 ? "" : "s");
        v = items[k++];
        switch (c) {
        case 'n': want = DIST_VALUE_NONE; break;
        case 'i': case 'I': want = DIST_VALUE_INT; break;
        case 'f': want = v->type == DIST_VALUE_INT ? DIST_VALUE_INT : DIST_VALUE_FLOAT; break;
        case 's': want = DIST_VALUE_STRING; break;
        case 'b': want = DIST_VALUE_BYTES; break;
        case 't': want = DIST_VALUE_TENSOR; break;
        case 'R': want = DIST_VALUE_RREF; break;
        case '[': want = DIST_VALUE_LIST; break;
        default: break;
        }
        if (want >= 0 && v->type != want) return dist_rpc__wrong(what, v, (dist_value_type)want);
        switch (c) {
        case 'i':
            if (v->u.i < INT_MIN || v->u.i > INT_MAX)
                return dist_rpc__fail(DIST_ERR_TYPE, "%s: %lld does not fit an int ('I' reads int64_t)", what, (long long)v->u.i);
            *va_arg(*ap, int *) = (int)v->u.i;
            break;
        case 'I': *va_arg(*ap, int64_t *) = v->u.i; break;
        case 'f': dist_value_get_float(v, va_arg(*ap, double *)); break;
        case 's': *va_arg(*ap, const char **) = (const char *)v->u.s.p; break;
        case 'b': {
            const void **p = va_arg(*ap, const void **);
            size_t *n = va_arg(*ap, size_t *);
            dist_value_get_bytes(v, p, n);
            break;
        }
        case 't': dist_value_get_tensor(v, va_arg(*ap, dist_tensor_view *)); break;
        case 'v': *va_arg(*ap, const dist_value_t **) = v; break;
        case 'R': {
            dist_result r = dist_value_get_rref(v, va_arg(*ap, dist_rref_t **));
            if (r != DIST_OK) return r;
            break;
        }
        case '[': {
            dist_result r = dist_rpc__unpack_items((const dist_value_t *const *)v->u.list.items, v->u.list.n, fmt, pos, depth + 1, ap);
            if (r != DIST_OK) return r;
            break;
        }
        default: break;                                  /* 'n', '*' */
        }
    }
}

DIST_API dist_result dist_value_unpack(const dist_value_t *v, const char *fmt, ...) {
    va_list ap;
    size_t pos = 0;
    dist_result r;
    if (!v || !fmt) return dist_rpc__fail(DIST_ERR_INVALID, "unpack: NULL %s", v ? "format" : "value");
    va_start(ap, fmt);
    r = dist_rpc__unpack_items(&v, 1, fmt, &pos, 0, &ap);
    va_end(ap);
    return r;
}

/* [SECTION] values: the wire format */
static void dist_rpc__put32(uint8_t *b, uint32_t x) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(x >> (8 * i)); }
static void dist_rpc__put64(uint8_t *b, uint64_t x) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(x >> (8 * i)); }
static uint32_t dist_rpc__get32(const uint8_t *b) { uint32_t x = 0; for (int i = 3; i >= 0; i--) x = (x << 8) | b[i]; return x; }
static uint64_t dist_rpc__get64(const uint8_t *b) { uint64_t x = 0; for (int i = 7; i >= 0; i--) x = (x << 8) | b[i]; return x; }

#define DIST_RPC__WHERE_INLINE 0
#define DIST_RPC__WHERE_APART  1
#define DIST_RPC__PAD(off) ((8 - ((off) & 7)) & 7)

#define DIST_RPC__RREF_BYTES 40

/* How an RRef travels to one receiver: the fork made for it (the ids
   written), in the order the encoder meets references. */
typedef struct { dist_rref_t *r; uint32_t owner; dist_rpc__id rid, fid, pfid; int how; } dist_rpc__fork;
typedef struct {
    dist_rpc__fork *f; size_t n, at;
    size_t apart;                        /* tensors sent apart, counted as the encoder meets them */
} dist_rpc__forks;

/* In an RPC message, a tensor of at least this many bytes travels apart:
   sent from its own memory, received into its final place. */
#ifndef DIST_RPC_APART_BYTES
#  define DIST_RPC_APART_BYTES ((size_t)64 << 10)
#endif
#define DIST_RPC__CHUNK ((size_t)1 << 20)    /* ...in messages of this size */

/* Writes (when `b` is not NULL and it fits in `cap`) the encoding of `v`
   at offset `off`; returns the offset after it.  Sizes are counted even
   past `cap`, so one pass both measures and writes.  References are
   written from `fk` (only RPC messages carry them). */
static size_t dist_rpc__encode(const dist_value_t *v, uint8_t *b, size_t cap, size_t off, dist_rpc__forks *fk) {
#define DIST_RPC__FITS(n) (b && off + (n) <= cap)
    if (DIST_RPC__FITS(1)) b[off] = v->type;
    off += 1;
    switch (v->type) {
    case DIST_VALUE_INT: case DIST_VALUE_FLOAT: {
        uint64_t x;
        if (v->type == DIST_VALUE_INT) x = (uint64_t)v->u.i; else memcpy(&x, &v->u.f, 8);
        if (DIST_RPC__FITS(8)) dist_rpc__put64(b + off, x);
        return off + 8;
    }
    case DIST_VALUE_STRING: case DIST_VALUE_BYTES: {
        size_t extra = v->type == DIST_VALUE_STRING;
        if (DIST_RPC__FITS(4 + v->u.s.n + extra)) {
            dist_rpc__put32(b + off, (uint32_t)v->u.s.n);
            if (v->u.s.n) memcpy(b + off + 4, v->u.s.p, v->u.s.n);
            if (extra) b[off + 4 + v->u.s.n] = 0;
        }
        return off + 4 + v->u.s.n + extra;
    }
    case DIST_VALUE_LIST:
        if (DIST_RPC__FITS(4)) dist_rpc__put32(b + off, (uint32_t)v->u.list.n);
        off += 4;
        for (size_t i = 0; i < v->u.list.n; i++) off = dist_rpc__encode(v->u.list.items[i], b, cap, off, fk);
        return off;
    case DIST_VALUE_RREF:
        if (DIST_RPC__FITS(DIST_RPC__RREF_BYTES) && fk && fk->at < fk->n) {
            const dist_rpc__fork *f = &fk->f[fk->at++];
            dist_rpc__put32(b + off, f->owner);
            dist_rpc__put32(b + off + 4, f->rid.rank); dist_rpc__put64(b + off + 8, f->rid.id);
            dist_rpc__put32(b + off + 16, f->fid.rank); dist_rpc__put64(b + off + 20, f->fid.id);
            dist_rpc__put32(b + off + 28, f->pfid.rank); dist_rpc__put64(b + off + 32, f->pfid.id);
        }
        return off + DIST_RPC__RREF_BYTES;
    case DIST_VALUE_TENSOR: {
        size_t head = 2 + 8 * (size_t)v->ndim + 1, pad;
        int apart = fk && v->u.t.nbytes >= DIST_RPC_APART_BYTES;
        if (DIST_RPC__FITS(head)) {
            b[off] = v->dtype; b[off + 1] = v->ndim;
            for (int d = 0; d < v->ndim; d++) dist_rpc__put64(b + off + 2 + 8 * d, (uint64_t)v->u.t.shape[d]);
            b[off + head - 1] = apart ? DIST_RPC__WHERE_APART : DIST_RPC__WHERE_INLINE;
        }
        off += head;
        if (apart) {                                     /* its index among the parts */
            if (DIST_RPC__FITS(4)) dist_rpc__put32(b + off, (uint32_t)fk->apart);
            fk->apart++;
            return off + 4;
        }
        pad = DIST_RPC__PAD(off);
        if (DIST_RPC__FITS(pad + v->u.t.nbytes)) {
            memset(b + off, 0, pad);
            if (v->u.t.nbytes) memcpy(b + off + pad, v->u.t.data, v->u.t.nbytes);
        }
        return off + pad + v->u.t.nbytes;
    }
    default: return off;
    }
#undef DIST_RPC__FITS
}

/* The references in `v`, in encoding order, into out[0..] (NULL: only
   counted); how many. */
static size_t dist_rpc__collect_rrefs(const dist_value_t *v, dist_rpc__fork *out, size_t n) {
    if (v->type == DIST_VALUE_LIST)
        for (size_t i = 0; i < v->u.list.n; i++) n = dist_rpc__collect_rrefs(v->u.list.items[i], out, n);
    else if (v->type == DIST_VALUE_RREF) {
        if (out) { memset(&out[n], 0, sizeof out[n]); out[n].r = v->u.r.ref; }
        n++;
    }
    return n;
}

/* The tensors of `v` that travel apart in an RPC message, in encoding
   order, into out[0..] (NULL: only counted); how many. */
static size_t dist_rpc__collect_apart(const dist_value_t *v, const dist_value_t **out, size_t n) {
    if (v->type == DIST_VALUE_LIST)
        for (size_t i = 0; i < v->u.list.n; i++) n = dist_rpc__collect_apart(v->u.list.items[i], out, n);
    else if (v->type == DIST_VALUE_TENSOR && v->u.t.nbytes >= DIST_RPC_APART_BYTES) {
        if (out) out[n] = v;
        n++;
    }
    return n;
}

DIST_API dist_result dist_value_encode(const dist_value_t *v, void *buf, size_t cap, size_t *len) {
    size_t n;
    if (!v || !len) return dist_rpc__fail(DIST_ERR_INVALID, "encode: NULL %s", v ? "length pointer" : "value");
    if (dist_rpc__collect_rrefs(v, NULL, 0))
        return dist_rpc__fail(DIST_ERR_INVALID, "encode: the value holds an rref, which travels only as an RPC's argument or result");
    n = dist_rpc__encode(v, NULL, 0, 0, NULL);
    *len = n;
    if (n > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_INVALID, "encode: %zu bytes exceed the limit of %zu", n, (size_t)DIST_RPC_MAX_MESSAGE);
    if (n > cap || !buf) return dist_rpc__fail(DIST_ERR_TRUNCATED, "encode: the value needs %zu bytes, the buffer holds %zu", n, cap);
    dist_rpc__encode(v, (uint8_t *)buf, cap, 0, NULL);
    return DIST_OK;
}

/* The decoder.  Pass 1 (`out` NULL) checks every byte and counts nodes and
   list items; pass 2 builds the nodes in the block the first pass sized.
   Both walk the same code, so what was checked is what is built. */
typedef struct {
    const uint8_t *b;
    size_t len, off;
    size_t nodes, items;                 /* counted (pass 1) or handed out (pass 2) */
    dist_value_t *node_pool;
    dist_value_t **item_pool;
    int64_t *shape_pool; size_t shapes;
    int world;                           /* 0: no references nor parts may appear (not an RPC message) */
    size_t rrefs;
    size_t parts, part_bytes;            /* tensors whose data travels apart, and their room (64-byte aligned) */
    uint8_t *part_pool;
    char why[200];
} dist_rpc__decoder;

static int dist_rpc__bad(dist_rpc__decoder *d, const char *fmt, ...) DIST_RPC__PRINTF(2, 3);
static int dist_rpc__bad(dist_rpc__decoder *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof d->why, fmt, ap);
    va_end(ap);
    return -1;
}

static int dist_rpc__need(dist_rpc__decoder *d, size_t n, const char *what) {
    if (n > d->len - d->off) return dist_rpc__bad(d, "%s at byte %zu needs %zu bytes, %zu are left", what, d->off, n, d->len - d->off);
    return 0;
}

/* Decodes one value at d->off into `out` (pass 2) or just checks it. */
static int dist_rpc__decode(dist_rpc__decoder *d, dist_value_t *out, int depth) {
    const uint8_t *b = d->b;
    uint8_t type;
    size_t at = d->off;
    if (dist_rpc__need(d, 1, "a value")) return -1;
    type = b[d->off++];
    if (out) { memset(out, 0, sizeof *out); out->type = type; }
    switch (type) {
    case DIST_VALUE_NONE: return 0;
    case DIST_VALUE_INT: case DIST_VALUE_FLOAT:
        if (dist_rpc__need(d, 8, type == DIST_VALUE_INT ? "an int" : "a float")) return -1;
        if (out) {
            uint64_t x = dist_rpc__get64(b + d->off);
            if (type == DIST_VALUE_INT) out->u.i = (int64_t)x; else memcpy(&out->u.f, &x, 8);
        }
        d->off += 8;
        return 0;
    case DIST_VALUE_STRING: case DIST_VALUE_BYTES: {
        size_t n, extra = type == DIST_VALUE_STRING;
        if (dist_rpc__need(d, 4, "a length")) return -1;
        n = dist_rpc__get32(b + d->off);
        d->off += 4;
        if (dist_rpc__need(d, n + extra, type == DIST_VALUE_STRING ? "a string" : "bytes")) return -1;
        if (extra && (b[d->off + n] != 0 || memchr(b + d->off, 0, n)))
            return dist_rpc__bad(d, "the string at byte %zu is not NUL-terminated or holds a NUL", at);
        if (out) { out->u.s.p = (uint8_t *)(b + d->off); out->u.s.n = n; }
        d->off += n + extra;
        return 0;
    }
    case DIST_VALUE_LIST: {
        uint32_t n;
        dist_value_t **items = NULL;
        if (depth + 1 >= DIST_RPC_MAX_DEPTH) return dist_rpc__bad(d, "lists nested deeper than %d at byte %zu", DIST_RPC_MAX_DEPTH, at);
        if (dist_rpc__need(d, 4, "a list's count")) return -1;
        n = dist_rpc__get32(b + d->off);
        d->off += 4;
        if (n > d->len - d->off) return dist_rpc__bad(d, "a list of %u items at byte %zu, with %zu bytes left", n, at, d->len - d->off);
        if (n > DIST_RPC_MAX_ITEMS - d->items)
            return dist_rpc__bad(d, "a list of %u items at byte %zu takes the value past %zu items", n, at, (size_t)DIST_RPC_MAX_ITEMS);
        if (out) {
            items = d->item_pool + d->items;
            out->u.list.items = items;
            out->u.list.n = out->u.list.cap = n;
        }
        d->items += n;
        for (uint32_t i = 0; i < n; i++) {
            dist_value_t *child = NULL;
            if (out) { child = d->node_pool + d->nodes; items[i] = child; }
            d->nodes++;
            if (dist_rpc__decode(d, child, depth + 1) != 0) return -1;
        }
        return 0;
    }
    case DIST_VALUE_TENSOR: {
        uint8_t dtype, ndim, where;
        int64_t shape[DIST_RPC_MAX_DIMS];
        size_t nbytes, pad;
        if (dist_rpc__need(d, 2, "a tensor")) return -1;
        dtype = b[d->off]; ndim = b[d->off + 1];
        if (dist_dtype_size((dist_dtype)dtype) == 0) return dist_rpc__bad(d, "a tensor at byte %zu has unknown dtype %u", at, dtype);
        if (ndim > DIST_RPC_MAX_DIMS) return dist_rpc__bad(d, "a tensor at byte %zu has %u dimensions (at most %d)", at, ndim, DIST_RPC_MAX_DIMS);
        d->off += 2;
        if (dist_rpc__need(d, 8 * (size_t)ndim + 1, "a tensor's shape")) return -1;
        for (int k = 0; k < ndim; k++) shape[k] = (int64_t)dist_rpc__get64(b + d->off + 8 * k);
        d->off += 8 * (size_t)ndim;
        where = b[d->off++];
        if (dist_rpc__tensor_bytes((dist_dtype)dtype, ndim, shape, &nbytes) != 0)
            return dist_rpc__bad(d, "a tensor at byte %zu: %s", at, dist_rpc__error);
        if (where == DIST_RPC__WHERE_APART && d->world) {
            if (dist_rpc__need(d, 4, "a tensor's part index")) return -1;
            if (dist_rpc__get32(b + d->off) != d->parts || nbytes < DIST_RPC_APART_BYTES)
                return dist_rpc__bad(d, "a tensor at byte %zu is part %u (part %zu expected, of at least %zu bytes)", at, dist_rpc__get32(b + d->off),
                                     d->parts, (size_t)DIST_RPC_APART_BYTES);
            if (nbytes > DIST_RPC_MAX_MESSAGE - d->part_bytes)
                return dist_rpc__bad(d, "the tensors sent apart add up to more than the limit of %zu bytes", (size_t)DIST_RPC_MAX_MESSAGE);
            if (out) {
                out->own = DIST_RPC__OWN_PART;
                out->dtype = dtype; out->ndim = ndim;
                out->u.t.shape = d->shape_pool + DIST_RPC_MAX_DIMS * d->shapes;
                if (ndim) memcpy(out->u.t.shape, shape, sizeof(int64_t) * ndim);
                out->u.t.data = d->part_pool + d->part_bytes;
                out->u.t.nbytes = nbytes;
            }
            d->shapes++;
            d->parts++;
            d->part_bytes += (nbytes + 63) & ~(size_t)63;
            d->off += 4;
            return 0;
        }
        if (where != DIST_RPC__WHERE_INLINE) return dist_rpc__bad(d, "a tensor at byte %zu says its data is elsewhere (%u)", at, where);
        pad = DIST_RPC__PAD(d->off);
        if (dist_rpc__need(d, pad + nbytes, "a tensor's data")) return -1;
        for (size_t k = 0; k < pad; k++)          /* one encoding per value: padding is zero */
            if (b[d->off + k]) return dist_rpc__bad(d, "a tensor at byte %zu has non-zero padding", at);
        if (out) {
            out->dtype = dtype; out->ndim = ndim;
            out->u.t.shape = d->shape_pool + DIST_RPC_MAX_DIMS * d->shapes;
            if (ndim) memcpy(out->u.t.shape, shape, sizeof(int64_t) * ndim);
            out->u.t.data = (uint8_t *)(b + d->off + pad);
            out->u.t.nbytes = nbytes;
        }
        d->shapes++;
        d->off += pad + nbytes;
        return 0;
    }
    case DIST_VALUE_RREF: {
        uint32_t r[4];
        if (!d->world) return dist_rpc__bad(d, "an rref at byte %zu outside an RPC message", at);
        if (dist_rpc__need(d, DIST_RPC__RREF_BYTES, "an rref")) return -1;
        r[0] = dist_rpc__get32(b + d->off);
        r[1] = dist_rpc__get32(b + d->off + 4); r[2] = dist_rpc__get32(b + d->off + 16); r[3] = dist_rpc__get32(b + d->off + 28);
        for (int k = 0; k < 4; k++)
            if (r[k] >= (uint32_t)d->world) return dist_rpc__bad(d, "an rref at byte %zu names rank %u of %d", at, r[k], d->world);
        if (out) {
            out->u.r.owner = r[0];
            out->u.r.rid.rank = r[1]; out->u.r.rid.id = dist_rpc__get64(b + d->off + 8);
            out->u.r.fid.rank = r[2]; out->u.r.fid.id = dist_rpc__get64(b + d->off + 20);
            out->u.r.pfid.rank = r[3]; out->u.r.pfid.id = dist_rpc__get64(b + d->off + 32);
        }
        d->rrefs++;
        d->off += DIST_RPC__RREF_BYTES;
        return 0;
    }
    default: return dist_rpc__bad(d, "unknown value type %u at byte %zu", type, at);
    }
}

/* Decodes a value; `world` > 0 in RPC messages (references, naming ranks
   below it, may appear; the caller takes them in). */
static dist_result dist_rpc__decode_value(const void *buf, size_t len, int world, dist_value_t **out, size_t *parts) {
    dist_rpc__decoder d;
    size_t nodes_sz, items_sz, shapes_sz, msg_off, parts_off, total;
    uint8_t *block;
    if (!out) return dist_rpc__fail(DIST_ERR_INVALID, "decode: NULL result pointer");
    *out = NULL;
    if (len && !buf) return dist_rpc__fail(DIST_ERR_INVALID, "decode: NULL buffer of %zu bytes", len);
    if (len > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %zu bytes exceed the limit of %zu", len, (size_t)DIST_RPC_MAX_MESSAGE);
    memset(&d, 0, sizeof d);
    d.b = (const uint8_t *)buf; d.len = len; d.world = world;
    d.nodes = 1;
    if (dist_rpc__decode(&d, NULL, 0) != 0) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %s", d.why);
    if (d.off != len) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %zu bytes after the value (of %zu)", len - d.off, len);
    /* one block: nodes | item pointers | shapes | the message (8-aligned)
       | room for the tensors that travel apart (64-aligned) */
    nodes_sz = d.nodes * sizeof(dist_value_t);
    items_sz = d.items * sizeof(dist_value_t *);
    shapes_sz = d.shapes * sizeof(int64_t) * DIST_RPC_MAX_DIMS;
    msg_off = (nodes_sz + items_sz + shapes_sz + 15) & ~(size_t)15;
    parts_off = (msg_off + len + 63) & ~(size_t)63;
    total = parts_off + d.part_bytes;
    if (parts) *parts = d.parts;
    block = (uint8_t *)DIST_MALLOC(total ? total : 1);
    if (!block) return dist_rpc__fail(DIST_ERR_NOMEM, "decode: out of memory for a value of %zu bytes", total);
    d.part_pool = block + parts_off;
    if (len) memcpy(block + msg_off, buf, len);
    d.b = block + msg_off; d.off = 0;
    d.node_pool = (dist_value_t *)block;
    d.item_pool = (dist_value_t **)(block + nodes_sz);
    d.shape_pool = (int64_t *)(block + nodes_sz + items_sz);
    d.nodes = 1; d.items = 0; d.shapes = 0; d.parts = 0; d.part_bytes = 0;
    dist_rpc__decode(&d, d.node_pool, 0);      /* cannot fail: the same bytes passed above */
    d.node_pool[0].own |= DIST_RPC__OWN_BLOCK | (d.rrefs ? DIST_RPC__OWN_RREFS : 0);
    *out = d.node_pool;
    return DIST_OK;
}

DIST_API dist_result dist_value_decode(const void *buf, size_t len, dist_value_t **out) {
    return dist_rpc__decode_value(buf, len, 0, out, NULL);
}


/* [SECTION] RPC: design notes
   Transport.  dist_rpc_init makes a dist.h world of its own; every RPC
   message is one dist.h message (uint8) with tag DIST_RPC__TAG:
      0 kind u8 (request, reply, error, wake) | 1 flags u8 (a request's:
      1 remote(), 2 one-way notice) | 2 name length u16 |
      4 status i32 (an error's dist_result) | 8 call id u64 |
     16 body length u32 | 20 tag u32 of the first tensor sent apart (0:
      none) | 24 the function's name | the body
   (a request's arguments or a reply's result as an encoded value; an
   error's sentence).  A tensor of DIST_RPC_APART_BYTES or more travels
   apart: the value says so (where 1, its index k), and its data follows
   the message as its own dist.h messages of up to 1 MiB with tag
   first + k, sent from the tensor's memory and received into the decoded
   value's block, where the receiver posts them as soon as it has read the
   message (so only what arrives before that is copied on the way).  Receivers size their buffer with dist_probe.  Every
   field is checked before use; a malformed message is dropped (and, when
   its call id can be trusted, answered with an error).
   Threads.  A listener thread receives everything: requests go to a queue
   served by `num_threads` handler threads, replies complete futures (and
   run their then-callbacks) on the listener.  Every 50 ms it also fails
   futures whose deadline passed and those waiting on a worker that is gone
   (dist_iprobe on a tag nobody sends says PEER_LOST once a peer died or
   left).  A handler thread that waits on a future runs queued calls
   meanwhile, so nested calls (agent -> observer -> agent) never starve
   even with one handler thread.
   Locks.  One agent lock guards the queue, the pending futures and every
   future's fields; nothing is sent or decoded under it. */

/* [SECTION] RPC: registry and agent state */
#define DIST_RPC__TAG        0x5250
#define DIST_RPC__TAG_NEVER  0x5251          /* nothing is ever sent with it */
#define DIST_RPC__TAG_PARTS  0x10000000      /* tensors sent apart: one tag each, from here... */
#define DIST_RPC__TAG_SPAN   0x04000000      /* ...within this span (reused round-robin) */
#define DIST_RPC__HDR        24
#define DIST_RPC__MAX_NAME   255
enum { DIST_RPC__REQUEST = 1, DIST_RPC__REPLY = 2, DIST_RPC__ERROR = 3, DIST_RPC__WAKE = 4 };
#define DIST_RPC__FLAG_REMOTE 1              /* a request's flag: the callee keeps the result as an RRef */
#define DIST_RPC__FLAG_ONEWAY 2              /* a request's flag: nobody waits for an answer (the protocol's notices) */
#define DIST_RPC__RESERVED "dist_rpc."       /* the agent's own functions */
#define DIST_RPC__BUCKETS 256

typedef struct { char *name; dist_rpc_fn fn; } dist_rpc__entry;
static pthread_mutex_t dist_rpc__reg_lock = PTHREAD_MUTEX_INITIALIZER;
static dist_rpc__entry *dist_rpc__reg;
static int dist_rpc__nreg, dist_rpc__capreg;

typedef struct dist_rpc__cb { void (*cb)(dist_future_t *, void *); void *user; struct dist_rpc__cb *next; } dist_rpc__cb;

struct dist_future {
    int refs;                        /* the user's, and the pending list's until done */
    int done;                        /* the outcome is known */
    int settled;                     /* ...and its callbacks have run: waiters return */
    dist_result result;
    dist_value_t *value;
    uint64_t id;
    int to;                          /* the callee's rank */
    int64_t deadline_ns;             /* 0: none */
    int timeout_ms;
    dist_rpc__cb *cbs;
    dist_future_t *next;             /* the pending list */
    char fn[64];
    char err[DIST_RPC__ERRLEN];
};

struct dist_rpc_call {
    dist_rpc_call_t *next;           /* the queue, then the deferred list */
    dist_rpc_call_t *wnext;          /* a fetch parked on its RRef */
    dist_rref_t *rref;               /* a remote(): the RRef that keeps the result (pinned) */
    int refs;                        /* the running handler's, and a deferred call's answer's */
    int oneway;                      /* no answer is sent */
    int from;
    uint64_t id;
    dist_rpc_fn fn;
    dist_value_t *args;
    int deferred, failed;
    char fn_name[DIST_RPC__MAX_NAME + 1];
    char err[DIST_RPC__ERRLEN];
};

enum { DIST_RPC__PENDING = 0, DIST_RPC__READY = 1, DIST_RPC__FAILED = 2 };

/* An RRef on this worker: the owner's entry (one per RRef, with the value
   and the forks of its users), or a user's fork.  Fields under the agent
   lock, except the ids, `is_owner` and `owner`, fixed once it is shared. */
struct dist_rref {
    int refs;                        /* handles and value nodes here */
    int is_owner, owner;
    dist_rpc__id rid;                /* the RRef */
    dist_rpc__id fid;                /* a user's: this fork */
    int tabled;                      /* in the owned or the user table */
    int detached;                    /* out of the tables for good: no messages, freed at refs 0 */
    int forced;                      /* shutdown let go of it for the application */
    /* a user's */
    int confirmed;                   /* the owner knows this fork (or never will: see code) */
    int owner_has;                   /* the owner holds this fork: tell it when it goes */
    int children;                    /* forks passed on, not yet known to the owner */
    /* the owner's */
    int state;                       /* DIST_RPC__PENDING until its remote() is done */
    int remote_seen;                 /* the remote() that makes it arrived */
    int pins;                        /* a running remote(), a fetch answering, sends to this worker */
    int nforks, capforks;
    struct { dist_rpc__id fid; int holder; } *forks;   /* users' forks, and the rank that holds each */
    dist_value_t *value;
    dist_rpc_call_t *waiters;        /* fetches parked until the value is there */
    dist_result code;                /* a failed remote() (or a fork that failed) */
    char err[DIST_RPC__ERRLEN];
    dist_rref_t *next;               /* the table's chain */
};

/* The agent: its lock, its condition (completions, queue changes), its
   state (zero before init). */
static pthread_mutex_t dist_rpc__lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dist_rpc__cond = PTHREAD_COND_INITIALIZER;     /* futures settled, shutdown progress */
static pthread_cond_t dist_rpc__qcond = PTHREAD_COND_INITIALIZER;    /* a call was queued: one idle handler wakes */
static struct {
    int up, closing, stopping;       /* closing: no new calls; stopping: threads end */
    dist_t *world;
    int rank, size, timeout_ms, nthreads;
    char (*names)[128];
    uint64_t next_id;
    dist_future_t *pending;
    int npending;
    dist_rpc_call_t *q_head, *q_tail, *deferred;
    int active;                      /* handlers running */
    int helping;                     /* handler threads waiting on a future (they run queued calls) */
    int draining;                    /* a graceful shutdown waits for the handlers */
    pthread_t listener, *pool;
    dist_rref_t *owned[DIST_RPC__BUCKETS], *users[DIST_RPC__BUCKETS];
    int nowned, nusers, nforks;      /* entries, user forks held here, forks of users held by our entries */
    char *gone;                      /* the listener's: workers found gone */
    int probe_at;
    uint32_t next_part;              /* the next tag for a tensor sent apart (offset in the span) */
} dist_rpc__g;

static dist_result dist_rpc__call(int to, const char *fn, const char *label, dist_value_t *args, int timeout_ms, dist_rref_t *rr,
                                  dist_future_t **out);
static void dist_rpc__notify(int to, const char *fn, dist_value_t *args);
static dist_result dist_rpc__answer(dist_rpc_call_t *c, dist_result code, dist_value_t *res, const char *text, int borrowed);

static DIST_RPC__TLS int dist_rpc__in_pool;     /* this thread is a handler thread */

/* dist.h's clock: this file needs no POSIX feature macros of its own (the
   only other clock it reads is C11's timespec_get). */
static int64_t dist_rpc__now_ns(void) { return dist_time_ns(); }

/* Waits on the agent's condition until `deadline_ns` (0: at most 100 ms). */
static void dist_rpc__cond_wait(int64_t deadline_ns) {
    struct timespec ts;
    int64_t now = dist_rpc__now_ns(), until = deadline_ns ? deadline_ns : now + 100000000, abs_ns;
    if (until > now + 100000000) until = now + 100000000;
    timespec_get(&ts, TIME_UTC);                         /* pthread_cond_timedwait's clock */
    abs_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (until - now);
    ts.tv_sec = (time_t)(abs_ns / 1000000000); ts.tv_nsec = (long)(abs_ns % 1000000000);
    pthread_cond_timedwait(&dist_rpc__cond, &dist_rpc__lock, &ts);
}

DIST_API dist_result dist_rpc_register(const char *name, dist_rpc_fn fn) {
    size_t n = name ? strlen(name) : 0;
    if (!name || n == 0 || n > DIST_RPC__MAX_NAME || !fn)
        return dist_rpc__fail(DIST_ERR_INVALID, "register: %s", !fn ? "NULL function" : "a name of 1 to 255 characters is needed");
    if (strncmp(name, DIST_RPC__RESERVED, strlen(DIST_RPC__RESERVED)) == 0)
        return dist_rpc__fail(DIST_ERR_INVALID, "register '%s': names that begin with \"" DIST_RPC__RESERVED "\" are the agent's own", name);
    pthread_mutex_lock(&dist_rpc__reg_lock);
    for (int i = 0; i < dist_rpc__nreg; i++)
        if (strcmp(dist_rpc__reg[i].name, name) == 0) { dist_rpc__reg[i].fn = fn; pthread_mutex_unlock(&dist_rpc__reg_lock); return DIST_OK; }
    if (dist_rpc__nreg == dist_rpc__capreg) {
        int cap = dist_rpc__capreg ? 2 * dist_rpc__capreg : 16;
        dist_rpc__entry *r = (dist_rpc__entry *)DIST_REALLOC(dist_rpc__reg, sizeof *r * (size_t)cap);
        if (!r) { pthread_mutex_unlock(&dist_rpc__reg_lock); return dist_rpc__fail(DIST_ERR_NOMEM, "register: out of memory"); }
        dist_rpc__reg = r; dist_rpc__capreg = cap;
    }
    dist_rpc__reg[dist_rpc__nreg].name = (char *)DIST_MALLOC(n + 1);
    if (!dist_rpc__reg[dist_rpc__nreg].name) { pthread_mutex_unlock(&dist_rpc__reg_lock); return dist_rpc__fail(DIST_ERR_NOMEM, "register: out of memory"); }
    memcpy(dist_rpc__reg[dist_rpc__nreg].name, name, n + 1);
    dist_rpc__reg[dist_rpc__nreg++].fn = fn;
    pthread_mutex_unlock(&dist_rpc__reg_lock);
    return DIST_OK;
}

static dist_value_t *dist_rpc__h_fetch(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_fork(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_accept(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_delete(dist_rpc_call_t *c, const dist_value_t *args);
static void dist_rpc__drop_tables(void);
static void dist_rpc__release_users(void);
static void dist_rpc__peer_gone(int rank, const char *why);

/* The agent's own functions: the RRef protocol.  The quick ones run on
   the listener, in the order their messages came. */
static const struct { const char *name; dist_rpc_fn fn; int on_listener; } dist_rpc__builtins[] = {
    { DIST_RPC__RESERVED "fetch", dist_rpc__h_fetch, 0 },
    { DIST_RPC__RESERVED "fork", dist_rpc__h_fork, 1 },
    { DIST_RPC__RESERVED "accept", dist_rpc__h_accept, 1 },
    { DIST_RPC__RESERVED "delete", dist_rpc__h_delete, 1 },
};

static dist_rpc_fn dist_rpc__lookup(const char *name, int *on_listener) {
    dist_rpc_fn fn = NULL;
    *on_listener = 0;
    for (size_t i = 0; i < sizeof dist_rpc__builtins / sizeof *dist_rpc__builtins; i++)
        if (strcmp(dist_rpc__builtins[i].name, name) == 0) { *on_listener = dist_rpc__builtins[i].on_listener; return dist_rpc__builtins[i].fn; }
    pthread_mutex_lock(&dist_rpc__reg_lock);
    for (int i = 0; i < dist_rpc__nreg && !fn; i++)
        if (strcmp(dist_rpc__reg[i].name, name) == 0) fn = dist_rpc__reg[i].fn;
    pthread_mutex_unlock(&dist_rpc__reg_lock);
    return fn;
}

static const char *dist_rpc__name_of(int rank) {
    return dist_rpc__g.names && rank >= 0 && rank < dist_rpc__g.size ? dist_rpc__g.names[rank] : "?";
}

/* [SECTION] RPC: messages */

static int dist_rpc__forks_make(dist_rpc__fork *f, size_t n, int to);
static void dist_rpc__forks_undo(dist_rpc__fork *f, size_t n);

/* Sends one message: the header, the name, then the body (an encoded
   value, or `text`).  Each reference in the value travels as a new fork
   for the receiver, made here and undone when the send fails. */
static dist_result dist_rpc__send(int to, int kind, int flags, int32_t status, uint64_t id, const char *name, const dist_value_t *v,
                                  const char *text) {
    size_t nlen = name ? strlen(name) : 0, blen = 0, total, nr = v ? dist_rpc__collect_rrefs(v, NULL, 0) : 0;
    size_t nparts = v ? dist_rpc__collect_apart(v, NULL, 0) : 0;
    dist_rpc__fork few[4], *fk = few;
    dist_rpc__forks forks;
    const dist_value_t *few_parts[4], **parts = few_parts;
    uint32_t tag0 = 0;
    uint8_t *b;
    dist_result r;
    memset(&forks, 0, sizeof forks);
    if (v) blen = dist_rpc__encode(v, NULL, 0, 0, &forks);    /* its size (no error sentence made) */
    else if (text) blen = strlen(text);
    if (nparts > DIST_RPC__TAG_SPAN / 4) return dist_rpc__fail(DIST_ERR_INVALID, "rpc: a value with %zu large tensors (at most %d)", nparts, DIST_RPC__TAG_SPAN / 4);
    if (nparts > 4 && !(parts = (const dist_value_t **)DIST_MALLOC(nparts * sizeof *parts)))
        return dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for %zu tensors", nparts);
    if (nparts) {
        dist_rpc__collect_apart(v, parts, 0);
        pthread_mutex_lock(&dist_rpc__lock);
        if (dist_rpc__g.next_part + nparts > DIST_RPC__TAG_SPAN) dist_rpc__g.next_part = 0;
        tag0 = DIST_RPC__TAG_PARTS + dist_rpc__g.next_part;
        dist_rpc__g.next_part += (uint32_t)nparts;
        pthread_mutex_unlock(&dist_rpc__lock);
    }
    if (blen > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_INVALID, "rpc: a value of %zu bytes exceeds the limit of %zu", blen, (size_t)DIST_RPC_MAX_MESSAGE);
    if (blen > 0xffffffffu) return dist_rpc__fail(DIST_ERR_INVALID, "rpc: a message body of %zu bytes is too large", blen);
    total = DIST_RPC__HDR + nlen + blen;
    if (nr > 4 && !(fk = (dist_rpc__fork *)DIST_MALLOC(nr * sizeof *fk))) {
        if (parts != few_parts) DIST_FREE(parts);
        return dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for %zu rrefs", nr);
    }
    if (nr) dist_rpc__collect_rrefs(v, fk, 0);
    if (nr && dist_rpc__forks_make(fk, nr, to) != 0) {
        if (fk != few) DIST_FREE(fk);
        if (parts != few_parts) DIST_FREE(parts);
        return DIST_ERR_INVALID;
    }
    if (!(b = (uint8_t *)DIST_MALLOC(total))) {
        dist_rpc__forks_undo(fk, nr);
        if (fk != few) DIST_FREE(fk);
        if (parts != few_parts) DIST_FREE(parts);
        return dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for a %zu-byte message", total);
    }
    memset(b, 0, DIST_RPC__HDR);
    b[0] = (uint8_t)kind;
    b[1] = (uint8_t)flags;
    b[2] = (uint8_t)nlen; b[3] = (uint8_t)(nlen >> 8);
    dist_rpc__put32(b + 4, (uint32_t)status);
    dist_rpc__put64(b + 8, id);
    dist_rpc__put32(b + 16, (uint32_t)blen);
    dist_rpc__put32(b + 20, tag0);
    if (nlen) memcpy(b + DIST_RPC__HDR, name, nlen);
    forks.f = fk; forks.n = nr; forks.at = 0; forks.apart = 0;
    if (v) dist_rpc__encode(v, b + DIST_RPC__HDR + nlen, blen, 0, &forks);
    else if (blen) memcpy(b + DIST_RPC__HDR + nlen, text, blen);
    r = dist_send(dist_rpc__g.world, b, total, DIST_UINT8, to, DIST_RPC__TAG);
    if (r != DIST_OK) {
        dist_rpc__fail(r, "rpc: sending to worker '%s' (rank %d): %s", dist_rpc__name_of(to), to, dist_error_message(dist_rpc__g.world));
        dist_rpc__forks_undo(fk, nr);
    }
    /* the large tensors, each from its own memory, in chunks (the receiver
       posts its receives once it has read the message: all but the first
       chunks land in place) */
    for (size_t k = 0; k < nparts && r == DIST_OK; k++)
        for (size_t off = 0; off < parts[k]->u.t.nbytes && r == DIST_OK; off += DIST_RPC__CHUNK) {
            size_t n = parts[k]->u.t.nbytes - off < DIST_RPC__CHUNK ? parts[k]->u.t.nbytes - off : DIST_RPC__CHUNK;
            r = dist_send(dist_rpc__g.world, parts[k]->u.t.data + off, n, DIST_UINT8, to, (int)(tag0 + k));
            if (r != DIST_OK)
                dist_rpc__fail(r, "rpc: sending a tensor of %zu bytes to worker '%s' (rank %d): %s", parts[k]->u.t.nbytes, dist_rpc__name_of(to), to,
                               dist_error_message(dist_rpc__g.world));
        }
    if (fk != few) DIST_FREE(fk);
    if (parts != few_parts) DIST_FREE(parts);
    DIST_FREE(b);
    return r;
}

/* Completes a future (agent lock held): records the outcome, takes it off
   the pending list, wakes the waiters; returns its callbacks to run once
   the lock is released. */
static dist_rpc__cb *dist_rpc__complete_locked(dist_future_t *f, dist_result res, dist_value_t *value, const char *fmt, ...)
    DIST_RPC__PRINTF(4, 5);
static dist_rpc__cb *dist_rpc__complete_locked(dist_future_t *f, dist_result res, dist_value_t *value, const char *fmt, ...) {
    dist_future_t **pp;
    dist_rpc__cb *cbs;
    f->done = 1;
    f->result = res;
    f->value = value;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->err, sizeof f->err, fmt, ap);
        va_end(ap);
    }
    for (pp = &dist_rpc__g.pending; *pp; pp = &(*pp)->next)
        if (*pp == f) { *pp = f->next; dist_rpc__g.npending--; break; }
    cbs = f->cbs;
    f->cbs = NULL;
    if (!cbs) f->settled = 1;            /* nothing to run first: waiters may go */
    pthread_cond_broadcast(&dist_rpc__cond);
    return cbs;
}

/* Drops a reference (lock held); the future when it was the last, to be
   freed with dist_rpc__future_destroy once the lock is released (its
   value may hold references, whose release takes the lock). */
static dist_future_t *dist_rpc__future_unref_locked(dist_future_t *f) {
    return --f->refs > 0 ? NULL : f;
}

static void dist_rpc__future_destroy(dist_future_t *f) {
    if (!f) return;
    dist_value_free(f->value);
    DIST_FREE(f);
}

/* Runs the callbacks of a future just completed, then drops the pending
   list's reference. */
static void dist_rpc__finish(dist_future_t *f, dist_rpc__cb *cbs) {
    while (cbs) {
        dist_rpc__cb *c = cbs;
        cbs = c->next;
        c->cb(f, c->user);
        DIST_FREE(c);
    }
    pthread_mutex_lock(&dist_rpc__lock);
    if (!f->settled) { f->settled = 1; pthread_cond_broadcast(&dist_rpc__cond); }
    f = dist_rpc__future_unref_locked(f);
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__future_destroy(f);
}

static void dist_rpc__take_in(dist_value_t *v, int from);

/* The tensors of a decoded value whose data travels apart, in order. */
static size_t dist_rpc__part_nodes(dist_value_t *v, dist_value_t **out, size_t n) {
    if (v->type == DIST_VALUE_LIST)
        for (size_t i = 0; i < v->u.list.n; i++) n = dist_rpc__part_nodes(v->u.list.items[i], out, n);
    else if (v->type == DIST_VALUE_TENSOR && (v->own & DIST_RPC__OWN_PART))
        out[n++] = v;
    return n;
}

/* Receives the `n` tensors of `v` that travel apart (tags tag0..) into
   their places: every chunk's receive posted at once, then all waited for
   within the world's timeout. */
static dist_result dist_rpc__recv_parts(dist_value_t *v, size_t n, int from, uint32_t tag0) {
    dist_value_t **nodes;
    dist_req_t **reqs;
    size_t nreq = 0, chunks = 0;
    dist_result r = DIST_OK;
    if (tag0 < DIST_RPC__TAG_PARTS || tag0 - DIST_RPC__TAG_PARTS > DIST_RPC__TAG_SPAN - n)
        return dist_rpc__fail(DIST_ERR_PROTOCOL, "rpc: %zu tensors sent apart under tag %u, outside the span", n, tag0);
    if (!(nodes = (dist_value_t **)DIST_MALLOC(n * sizeof *nodes))) return dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory");
    dist_rpc__part_nodes(v, nodes, 0);
    for (size_t k = 0; k < n; k++) chunks += (nodes[k]->u.t.nbytes + DIST_RPC__CHUNK - 1) / DIST_RPC__CHUNK;
    if (!(reqs = (dist_req_t **)DIST_MALLOC((chunks ? chunks : 1) * sizeof *reqs))) { DIST_FREE(nodes); return dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory"); }
    for (size_t k = 0; k < n && r == DIST_OK; k++)
        for (size_t off = 0; off < nodes[k]->u.t.nbytes && r == DIST_OK; off += DIST_RPC__CHUNK) {
            size_t len = nodes[k]->u.t.nbytes - off < DIST_RPC__CHUNK ? nodes[k]->u.t.nbytes - off : DIST_RPC__CHUNK;
            r = dist_irecv(dist_rpc__g.world, nodes[k]->u.t.data + off, len, DIST_UINT8, from, (int)(tag0 + k), &reqs[nreq]);
            if (r == DIST_OK) nreq++;
        }
    if (r != DIST_OK) dist_rpc__fail(r, "rpc: receiving a tensor from worker '%s' (rank %d): %s", dist_rpc__name_of(from), from,
                                     dist_error_message(dist_rpc__g.world));
    {
        dist_result w = dist_wait_all((int)nreq, reqs);
        if (w != DIST_OK && r == DIST_OK)
            r = dist_rpc__fail(w, "rpc: receiving %zu tensor(s) sent apart from worker '%s' (rank %d): %s", n, dist_rpc__name_of(from), from,
                               dist_error_message(dist_rpc__g.world));
    }
    DIST_FREE(reqs);
    DIST_FREE(nodes);
    return r;
}

/* Decodes a message's value (none when the body is empty), receives the
   tensors that travel apart and takes in the references it holds. */
static dist_result dist_rpc__take(const uint8_t *body, size_t blen, int from, uint32_t tag0, dist_value_t **out) {
    dist_result r;
    size_t parts = 0;
    *out = NULL;
    if (blen == 0) return (*out = dist_value_none()) ? DIST_OK : DIST_ERR_NOMEM;
    if ((r = dist_rpc__decode_value(body, blen, dist_rpc__g.size, out, &parts)) != DIST_OK) return r;
    if (parts && (r = dist_rpc__recv_parts(*out, parts, from, tag0)) != DIST_OK) {
        dist_value_free(*out);               /* (before any reference is taken in) */
        *out = NULL;
        return r;
    }
    dist_rpc__take_in(*out, from);
    return DIST_OK;
}

/* A reply (or an error) for call `id` from `from`. */
static void dist_rpc__on_reply(int kind, int from, uint64_t id, int32_t status, uint32_t tag0, const uint8_t *body, size_t blen) {
    dist_future_t *f;
    dist_value_t *v = NULL;
    dist_result dr = DIST_OK;
    dist_rpc__cb *cbs;
    char why[DIST_RPC__ERRLEN] = "";
    if (kind == DIST_RPC__REPLY && (dr = dist_rpc__take(body, blen, from, tag0, &v)) != DIST_OK) snprintf(why, sizeof why, "%.300s", dist_rpc__error);
    pthread_mutex_lock(&dist_rpc__lock);
    for (f = dist_rpc__g.pending; f; f = f->next)
        if (f->id == id && f->to == from) break;
    if (!f) {                                       /* it timed out here, or a stranger's id */
        pthread_mutex_unlock(&dist_rpc__lock);
        dist_value_free(v);
        return;
    }
    if (kind == DIST_RPC__REPLY && dr == DIST_OK)
        cbs = dist_rpc__complete_locked(f, DIST_OK, v, NULL);
    else if (kind == DIST_RPC__REPLY)
        cbs = dist_rpc__complete_locked(f, DIST_ERR_PROTOCOL, NULL, "rpc '%s' to worker '%s' (rank %d): the result could not be decoded: %s",
                                        f->fn, dist_rpc__name_of(from), from, why);
    else {
        dist_result code = (status <= DIST_ERR_INVALID && status >= -1000 && status != 0) ? (dist_result)status : DIST_ERR_REMOTE;
        int n = (int)(blen > 300 ? 300 : blen);
        cbs = dist_rpc__complete_locked(f, code, NULL, "rpc '%s' on worker '%s' (rank %d) failed: %.*s", f->fn, dist_rpc__name_of(from), from,
                                        n, (const char *)body);
    }
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__finish(f, cbs);
}

static dist_rref_t *dist_rpc__owned_locked(dist_rpc__id rid, int create);
static void dist_rpc__table_add_locked(dist_rref_t *r);
static int dist_rpc__fork_add_locked(dist_rref_t *e, dist_rpc__id fid, int holder);
static void dist_rpc__fill(dist_rref_t *e, dist_result code, dist_value_t *v, const char *text, const char *fn);
static void dist_rpc__run_call(dist_rpc_call_t *c);
static void dist_rpc__unpin(dist_rref_t *e);

/* A request: queued for a handler thread (run here when it is one of the
   agent's quick ones), or answered at once when it cannot run.  A
   remote()'s RRef is made (or found, when a message about it came first)
   before anything else from its caller is read. */
static void dist_rpc__on_request(int from, int flags, uint64_t id, uint32_t tag0, const char *name, const uint8_t *body, size_t blen) {
    int on_listener = 0;
    dist_rpc_fn fn = dist_rpc__lookup(name, &on_listener);
    dist_rpc_call_t *c;
    dist_value_t *args = NULL;
    dist_rref_t *e = NULL;
    dist_result code = DIST_OK;
    char why[DIST_RPC__ERRLEN];
    if (flags & DIST_RPC__FLAG_REMOTE) {
        dist_rpc__id rid;
        rid.rank = (uint32_t)from; rid.id = id;
        pthread_mutex_lock(&dist_rpc__lock);
        e = dist_rpc__owned_locked(rid, from != dist_rpc__g.rank);
        if (!e) code = dist_rpc__g.rank == from ? DIST_ERR_PROTOCOL : DIST_ERR_NOMEM;
        else if (e->remote_seen) code = DIST_ERR_PROTOCOL;
        else if (from != dist_rpc__g.rank && dist_rpc__fork_add_locked(e, rid, from) != 0) code = DIST_ERR_NOMEM;
        else { e->remote_seen = 1; e->pins++; }
        pthread_mutex_unlock(&dist_rpc__lock);
        if (code != DIST_OK) {
            dist_rpc__send(from, DIST_RPC__ERROR, 0, code, id, NULL, NULL, code == DIST_ERR_NOMEM ? "the owner ran out of memory" : "a remote() with an id already used");
            return;
        }
    }
    if (dist_rpc__take(body, blen, from, tag0, &args) != DIST_OK) {    /* (first: what travels apart is received either way) */
        code = DIST_ERR_PROTOCOL;
        snprintf(why, sizeof why, "its arguments could not be decoded: %.300s", dist_rpc__error);
    } else if (!fn || (e && on_listener)) {
        dist_value_free(args);
        code = DIST_ERR_UNKNOWN_FUNCTION;
        snprintf(why, sizeof why, "worker '%s' (rank %d) has no function '%s' (dist_rpc_register it on every worker)",
                 dist_rpc__name_of(dist_rpc__g.rank), dist_rpc__g.rank, name);
    } else if (!(c = (dist_rpc_call_t *)DIST_MALLOC(sizeof *c))) {
        dist_value_free(args);
        code = DIST_ERR_NOMEM;
        snprintf(why, sizeof why, "the callee ran out of memory");
    }
    if (code != DIST_OK) {
        if (e) {                                        /* the RRef holds the error for its users */
            dist_rpc__fill(e, code, NULL, why, name);
            dist_rpc__unpin(e);
        }
        dist_rpc__send(from, DIST_RPC__ERROR, 0, code, id, NULL, NULL, why);
        return;
    }
    memset(c, 0, sizeof *c);
    c->from = from; c->id = id; c->fn = fn; c->args = args; c->rref = e; c->refs = 1;
    c->oneway = (flags & DIST_RPC__FLAG_ONEWAY) != 0;
    snprintf(c->fn_name, sizeof c->fn_name, "%s", name);
    if (on_listener) { dist_rpc__run_call(c); return; }
    pthread_mutex_lock(&dist_rpc__lock);
    if (dist_rpc__g.q_tail) dist_rpc__g.q_tail->next = c; else dist_rpc__g.q_head = c;
    dist_rpc__g.q_tail = c;
    pthread_cond_signal(&dist_rpc__qcond);                   /* one idle handler */
    if (dist_rpc__g.helping) pthread_cond_broadcast(&dist_rpc__cond);   /* or one waiting on a future */
    pthread_mutex_unlock(&dist_rpc__lock);
}

/* A message's header, checked: its kind (0 when malformed), and where the
   name (NUL-terminated copy in `name`) and the body are. */
typedef struct {
    int kind, flags;
    uint32_t tag0;                       /* the first tag of the tensors sent apart (0: none) */
    int32_t status;
    uint64_t id;
    char name[DIST_RPC__MAX_NAME + 1];
    const uint8_t *body;
    size_t blen;
} dist_rpc__msg;

static int dist_rpc__parse(const uint8_t *b, size_t n, dist_rpc__msg *m) {
    size_t nlen, blen;
    memset(m, 0, sizeof *m);
    if (n < DIST_RPC__HDR) return 0;
    nlen = (size_t)b[2] | ((size_t)b[3] << 8);
    blen = dist_rpc__get32(b + 16);
    if ((b[1] & ~(DIST_RPC__FLAG_REMOTE | DIST_RPC__FLAG_ONEWAY)) || b[1] == (DIST_RPC__FLAG_REMOTE | DIST_RPC__FLAG_ONEWAY) ||
        (b[1] && b[0] != DIST_RPC__REQUEST) || (dist_rpc__get32(b + 20) != 0 && dist_rpc__get32(b + 20) - DIST_RPC__TAG_PARTS >= DIST_RPC__TAG_SPAN) ||
        nlen > DIST_RPC__MAX_NAME || DIST_RPC__HDR + nlen + blen != n)
        return 0;
    if (b[0] == DIST_RPC__REQUEST) {
        if (nlen == 0) return 0;
        memcpy(m->name, b + DIST_RPC__HDR, nlen);
        m->name[nlen] = 0;
        if (strlen(m->name) != nlen) return 0;                      /* a NUL inside */
    } else if (b[0] == DIST_RPC__REPLY || b[0] == DIST_RPC__ERROR || b[0] == DIST_RPC__WAKE) {
        if (nlen != 0) return 0;
    } else {
        return 0;
    }
    m->kind = b[0];
    m->flags = b[1];
    m->tag0 = dist_rpc__get32(b + 20);
    m->status = (int32_t)dist_rpc__get32(b + 4);
    m->id = dist_rpc__get64(b + 8);
    m->body = b + DIST_RPC__HDR + nlen;
    m->blen = blen;
    return m->kind;
}

/* Checks and dispatches one message (a malformed one is dropped); 1 when
   it asks the listener to stop. */
static int dist_rpc__on_message(const uint8_t *b, size_t n, int from) {
    dist_rpc__msg m;
    switch (dist_rpc__parse(b, n, &m)) {
    case DIST_RPC__WAKE: return from == dist_rpc__g.rank;
    case DIST_RPC__REQUEST: dist_rpc__on_request(from, m.flags, m.id, m.tag0, m.name, m.body, m.blen); return 0;
    case DIST_RPC__REPLY: case DIST_RPC__ERROR: dist_rpc__on_reply(m.kind, from, m.id, m.status, m.tag0, m.body, m.blen); return 0;
    default: return 0;
    }
}

/* Fails the futures whose deadline passed, and those waiting on a worker
   that is gone (a probe on a tag nobody sends says so). */
static void dist_rpc__sweep(void) {
    int64_t now = dist_rpc__now_ns();
    int gone_checked[64] = { 0 };
    for (;;) {
        dist_future_t *f, *hit = NULL;
        dist_rpc__cb *cbs = NULL;
        int to = -1;
        pthread_mutex_lock(&dist_rpc__lock);
        for (f = dist_rpc__g.pending; f && !hit; f = f->next) {
            if (f->deadline_ns && now >= f->deadline_ns) {
                hit = f;
                cbs = dist_rpc__complete_locked(f, DIST_ERR_TIMEOUT, NULL, "rpc '%s' to worker '%s' (rank %d): no answer within %.1f s",
                                                f->fn, dist_rpc__name_of(f->to), f->to, f->timeout_ms / 1000.0);
            } else if (f->to != dist_rpc__g.rank && (f->to >= 64 || !gone_checked[f->to])) {
                to = f->to;
                break;
            }
        }
        pthread_mutex_unlock(&dist_rpc__lock);
        if (hit) { dist_rpc__finish(hit, cbs); continue; }
        if (to < 0) break;
        {
            int found = 0;
            dist_status st;
            char why[DIST_RPC__ERRLEN];
            if (to < 64) gone_checked[to] = 1;
            if (dist_iprobe(dist_rpc__g.world, to, DIST_RPC__TAG_NEVER, &found, &st) != DIST_ERR_PEER_LOST) {
                if (to >= 64) break;          /* (large worlds: one peer per sweep) */
                continue;
            }
            snprintf(why, sizeof why, "%s", dist_error_message(dist_rpc__g.world));
            for (;;) {                        /* every future waiting on that worker */
                pthread_mutex_lock(&dist_rpc__lock);
                for (f = dist_rpc__g.pending; f && f->to != to; f = f->next) { }
                if (f) cbs = dist_rpc__complete_locked(f, DIST_ERR_PEER_LOST, NULL, "rpc '%s' to worker '%s' (rank %d): the worker is gone (%s)",
                                                       f->fn, dist_rpc__name_of(to), to, why);
                pthread_mutex_unlock(&dist_rpc__lock);
                if (!f) break;
                dist_rpc__finish(f, cbs);
            }
        }
    }
    /* Workers that hold or own references here, a few per sweep: the
       tables let go of those that are gone. */
    for (int k = 0; k < 8 && k < dist_rpc__g.size && dist_rpc__g.gone; k++) {
        int r = dist_rpc__g.probe_at++ % dist_rpc__g.size, found = 0, any;
        dist_status st;
        pthread_mutex_lock(&dist_rpc__lock);
        any = dist_rpc__g.nowned > 0 || dist_rpc__g.nusers > 0;
        pthread_mutex_unlock(&dist_rpc__lock);
        if (!any) break;
        if (r == dist_rpc__g.rank || dist_rpc__g.gone[r]) continue;
        if (dist_iprobe(dist_rpc__g.world, r, DIST_RPC__TAG_NEVER, &found, &st) == DIST_ERR_PEER_LOST) {
            char why[DIST_RPC__ERRLEN];
            snprintf(why, sizeof why, "%.300s", dist_error_message(dist_rpc__g.world));
            dist_rpc__g.gone[r] = 1;
            dist_rpc__peer_gone(r, why);
        }
    }
}

/* [SECTION] RPC: threads */
static void *dist_rpc__listen(void *arg) {
    uint8_t *buf = NULL;
    size_t cap = 0;
    int64_t next_sweep = 0;
    (void)arg;
    for (;;) {
        dist_status st;
        dist_result r = dist_probe(dist_rpc__g.world, DIST_ANY_SOURCE, DIST_RPC__TAG, 50, &st);
        if (r == DIST_OK) {
            if (st.nbytes + 1 > cap) {
                uint8_t *nb = (uint8_t *)DIST_REALLOC(buf, st.nbytes + 1);
                if (nb) { buf = nb; cap = st.nbytes + 1; }
            }
            /* out of memory: the message is taken into a zero-length read
               of nothing useful: receive it into what we have? no - leave it,
               its caller times out */
            if (st.nbytes + 1 <= cap && dist_recv(dist_rpc__g.world, buf, st.count, st.dtype, st.source, DIST_RPC__TAG) == DIST_OK &&
                dist_rpc__on_message(buf, st.nbytes, st.source))
                break;
        } else if (r != DIST_ERR_TIMEOUT) {
            pthread_mutex_lock(&dist_rpc__lock);      /* every peer gone, or aborted: the sweep fails what waits */
            if (!dist_rpc__g.stopping) dist_rpc__cond_wait(dist_rpc__now_ns() + 20000000);
            pthread_mutex_unlock(&dist_rpc__lock);
        }
        if (dist_rpc__now_ns() >= next_sweep) {
            dist_rpc__sweep();
            next_sweep = dist_rpc__now_ns() + 50000000;
        }
        pthread_mutex_lock(&dist_rpc__lock);
        r = dist_rpc__g.stopping ? DIST_ERR_ABORTED : DIST_OK;
        pthread_mutex_unlock(&dist_rpc__lock);
        if (r != DIST_OK) break;
    }
    DIST_FREE(buf);
    return NULL;
}

static void dist_rpc__call_free(dist_rpc_call_t *c) {
    dist_value_free(c->args);
    DIST_FREE(c);
}

/* A deferred call is answered (perhaps on another thread, perhaps before
   its handler returns) and its handler returns: the last frees it. */
static void dist_rpc__call_unref(dist_rpc_call_t *c) {
    int last;
    pthread_mutex_lock(&dist_rpc__lock);
    last = --c->refs == 0;
    pthread_mutex_unlock(&dist_rpc__lock);
    if (last) dist_rpc__call_free(c);
}

/* Sends the answer to call `c` (its result `res`, freed unless borrowed,
   or the error `text`) and frees the call.  A remote()'s result stays
   here, in its RRef: the caller only hears that it is done. */
static dist_result dist_rpc__deliver(dist_rpc_call_t *c, dist_result code, dist_value_t *res, const char *text, int borrowed) {
    dist_result r;
    if (c->rref) {
        dist_rref_t *e = c->rref;
        c->rref = NULL;
        dist_rpc__fill(e, code, borrowed ? NULL : res, text, c->fn_name);
        res = NULL;
        if (code == DIST_OK) r = dist_rpc__send(c->from, DIST_RPC__REPLY, 0, 0, c->id, NULL, NULL, NULL);
        else r = dist_rpc__send(c->from, DIST_RPC__ERROR, 0, code, c->id, NULL, NULL, text);
        dist_rpc__unpin(e);
    } else if (c->oneway) {
        r = DIST_OK;
    } else if (code == DIST_OK) {
        r = dist_rpc__send(c->from, DIST_RPC__REPLY, 0, 0, c->id, NULL, res, NULL);   /* NULL: an empty body, none */
    } else {
        r = dist_rpc__send(c->from, DIST_RPC__ERROR, 0, code, c->id, NULL, NULL, text);
    }
    if (!borrowed) dist_value_free(res);
    dist_rpc__call_unref(c);
    return r;
}

/* Runs one call on this thread and answers it, unless it was deferred. */
static void dist_rpc__run_call(dist_rpc_call_t *c) {
    dist_value_t *res = c->fn(c, c->args);
    int deferred;
    pthread_mutex_lock(&dist_rpc__lock);
    deferred = c->deferred;
    pthread_mutex_unlock(&dist_rpc__lock);
    if (deferred) { dist_value_free(res); dist_rpc__call_unref(c); }
    else dist_rpc__deliver(c, c->failed ? DIST_ERR_REMOTE : DIST_OK, res, c->err, 0);
}

/* Takes the next queued call (lock held), or NULL. */
static dist_rpc_call_t *dist_rpc__pop_locked(void) {
    dist_rpc_call_t *c = dist_rpc__g.q_head;
    if (!c) return NULL;
    dist_rpc__g.q_head = c->next;
    if (!dist_rpc__g.q_head) dist_rpc__g.q_tail = NULL;
    c->next = NULL;
    dist_rpc__g.active++;
    return c;
}

/* Runs a popped call without the lock, then takes the lock back. */
static void dist_rpc__run_unlocked(dist_rpc_call_t *c) {
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__run_call(c);
    pthread_mutex_lock(&dist_rpc__lock);
    dist_rpc__g.active--;
    if (dist_rpc__g.draining) pthread_cond_broadcast(&dist_rpc__cond);
}

static void *dist_rpc__handler_thread(void *arg) {
    (void)arg;
    dist_rpc__in_pool = 1;
    pthread_mutex_lock(&dist_rpc__lock);
    while (!dist_rpc__g.stopping) {
        dist_rpc_call_t *c = dist_rpc__pop_locked();
        if (c) dist_rpc__run_unlocked(c);
        else pthread_cond_wait(&dist_rpc__qcond, &dist_rpc__lock);
    }
    pthread_mutex_unlock(&dist_rpc__lock);
    return NULL;
}

/* [SECTION] RPC: init and shutdown */
static void dist_rpc__stop_threads(int started_pool) {
    pthread_mutex_lock(&dist_rpc__lock);
    dist_rpc__g.stopping = 1;
    pthread_cond_broadcast(&dist_rpc__cond);
    pthread_cond_broadcast(&dist_rpc__qcond);
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__send(dist_rpc__g.rank, DIST_RPC__WAKE, 0, 0, 0, NULL, NULL, NULL);
    pthread_join(dist_rpc__g.listener, NULL);
    for (int i = 0; i < started_pool; i++) pthread_join(dist_rpc__g.pool[i], NULL);
}

/* Frees what is left once the threads are gone: queued and deferred calls,
   futures still pending (failed first, so their waiters return). */
static void dist_rpc__drain(const char *why) {
    for (;;) {
        dist_future_t *f;
        dist_rpc__cb *cbs;
        pthread_mutex_lock(&dist_rpc__lock);
        f = dist_rpc__g.pending;
        if (f) cbs = dist_rpc__complete_locked(f, DIST_ERR_ABORTED, NULL, "rpc '%s' to worker '%s' (rank %d): %s", f->fn,
                                               dist_rpc__name_of(f->to), f->to, why);
        pthread_mutex_unlock(&dist_rpc__lock);
        if (!f) break;
        dist_rpc__finish(f, cbs);
    }
    for (;;) {                       /* calls queued or deferred (freed without the lock: their values may hold references) */
        dist_rpc_call_t *c;
        pthread_mutex_lock(&dist_rpc__lock);
        if ((c = dist_rpc__g.q_head)) dist_rpc__g.q_head = c->next;
        else if ((c = dist_rpc__g.deferred)) dist_rpc__g.deferred = c->next;
        else dist_rpc__g.q_tail = NULL;
        pthread_mutex_unlock(&dist_rpc__lock);
        if (!c) break;
        dist_rpc__call_free(c);
    }
    dist_rpc__drop_tables();
}

static void dist_rpc__teardown(int started_pool, int graceful_destroy) {
    dist_rpc__stop_threads(started_pool);
    dist_rpc__drain("the agent was shut down");
    if (graceful_destroy) dist_destroy(dist_rpc__g.world);
    else { dist_abort(dist_rpc__g.world); dist_destroy(dist_rpc__g.world); }
    DIST_FREE(dist_rpc__g.pool);
    DIST_FREE(dist_rpc__g.names);
    DIST_FREE(dist_rpc__g.gone);
    pthread_mutex_lock(&dist_rpc__lock);
    dist_rpc__g.world = NULL; dist_rpc__g.pool = NULL; dist_rpc__g.names = NULL; dist_rpc__g.gone = NULL;
    dist_rpc__g.up = 0; dist_rpc__g.closing = 0; dist_rpc__g.stopping = 0; dist_rpc__g.draining = 0;
    pthread_mutex_unlock(&dist_rpc__lock);
}

/* Publishes this worker's name and learns everyone's; names must be unique. */
static dist_result dist_rpc__names(const char *mine) {
    char key[64];
    int n = dist_rpc__g.size;
    snprintf(key, sizeof key, "dist_rpc/name/%d", dist_rpc__g.rank);
    if (dist_store_set(dist_rpc__g.world, key, mine, strlen(mine)) != DIST_OK)
        return dist_rpc__fail(DIST_ERR_INIT, "rpc init: publishing the name: %s", dist_error_message(dist_rpc__g.world));
    dist_rpc__g.names = (char (*)[128])DIST_MALLOC(sizeof *dist_rpc__g.names * (size_t)n);
    if (!dist_rpc__g.names) return dist_rpc__fail(DIST_ERR_NOMEM, "rpc init: out of memory for %d names", n);
    for (int r = 0; r < n; r++) {
        size_t len = 0;
        snprintf(key, sizeof key, "dist_rpc/name/%d", r);
        if (dist_store_get(dist_rpc__g.world, key, dist_rpc__g.names[r], 127, &len) != DIST_OK || len > 127)
            return dist_rpc__fail(DIST_ERR_INIT, "rpc init: learning worker %d's name: %s", r, dist_error_message(dist_rpc__g.world));
        dist_rpc__g.names[r][len] = 0;
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (strcmp(dist_rpc__g.names[a], dist_rpc__g.names[b]) == 0)
                return dist_rpc__fail(DIST_ERR_INIT, "rpc init: ranks %d and %d are both named '%s'; worker names must be unique", a, b,
                                      dist_rpc__g.names[a]);
    return DIST_OK;
}

DIST_API dist_result dist_rpc_init(const dist_rpc_config *cfg) {
    dist_rpc_config c;
    char name[128];
    dist_result r;
    int started = 0;
    memset(&c, 0, sizeof c);
    if (cfg) c = *cfg;
    pthread_mutex_lock(&dist_rpc__lock);
    r = dist_rpc__g.up ? DIST_ERR_INVALID : DIST_OK;
    if (r == DIST_OK) dist_rpc__g.up = 1;                /* claimed: a second init fails */
    pthread_mutex_unlock(&dist_rpc__lock);
    if (r != DIST_OK) return dist_rpc__fail(r, "rpc init: this process already runs an agent (call dist_rpc_shutdown first)");
    if (c.name && (strlen(c.name) == 0 || strlen(c.name) > 127)) {
        dist_rpc__g.up = 0;
        return dist_rpc__fail(DIST_ERR_INVALID, "rpc init: a worker name has 1 to 127 characters");
    }
    if ((r = dist_init(&dist_rpc__g.world, &c.dist)) != DIST_OK) {
        dist_rpc__g.up = 0;
        return dist_rpc__fail(r, "rpc init: %s", dist_error_message(NULL));
    }
    dist_rpc__g.rank = dist_rank(dist_rpc__g.world);
    dist_rpc__g.size = dist_world_size(dist_rpc__g.world);
    dist_rpc__g.timeout_ms = c.timeout_ms == 0 ? 60000 : c.timeout_ms;
    dist_rpc__g.nthreads = c.num_threads > 0 ? c.num_threads : 4;
    dist_rpc__g.next_id = 1;
    if (c.name) snprintf(name, sizeof name, "%s", c.name);
    else snprintf(name, sizeof name, "worker%d", dist_rpc__g.rank);
    if ((r = dist_rpc__names(name)) != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        snprintf(why, sizeof why, "%.300s", dist_rpc__error);
        dist_destroy(dist_rpc__g.world);
        DIST_FREE(dist_rpc__g.names);
        dist_rpc__g.names = NULL; dist_rpc__g.world = NULL; dist_rpc__g.up = 0;
        return dist_rpc__fail(r, "%s", why);
    }
    dist_rpc__g.pool = (pthread_t *)DIST_MALLOC(sizeof(pthread_t) * (size_t)dist_rpc__g.nthreads);
    dist_rpc__g.gone = (char *)DIST_MALLOC((size_t)dist_rpc__g.size);
    if (dist_rpc__g.gone) memset(dist_rpc__g.gone, 0, (size_t)dist_rpc__g.size);
    dist_rpc__g.probe_at = 0;
    if (!dist_rpc__g.pool || !dist_rpc__g.gone || pthread_create(&dist_rpc__g.listener, NULL, dist_rpc__listen, NULL) != 0) {
        dist_destroy(dist_rpc__g.world);
        DIST_FREE(dist_rpc__g.pool); DIST_FREE(dist_rpc__g.names); DIST_FREE(dist_rpc__g.gone);
        dist_rpc__g.pool = NULL; dist_rpc__g.names = NULL; dist_rpc__g.world = NULL; dist_rpc__g.up = 0; dist_rpc__g.gone = NULL;
        return dist_rpc__fail(DIST_ERR_SYSTEM, "rpc init: could not start the listener thread");
    }
    for (; started < dist_rpc__g.nthreads; started++)
        if (pthread_create(&dist_rpc__g.pool[started], NULL, dist_rpc__handler_thread, NULL) != 0) break;
    if (started < dist_rpc__g.nthreads) {
        dist_rpc__teardown(started, 0);
        return dist_rpc__fail(DIST_ERR_SYSTEM, "rpc init: could not start %d handler threads", c.num_threads);
    }
    return DIST_OK;
}

/* Graceful: no new calls from here; our calls finish; every worker says it
   is done (through the store) while this one still serves; then our
   handlers finish; then everything stops. */
DIST_API dist_result dist_rpc_shutdown(int graceful) {
    dist_result res = DIST_OK;
    char why[DIST_RPC__ERRLEN] = "";
    if (!dist_rpc__g.up || !dist_rpc__g.world) return dist_rpc__fail(DIST_ERR_INVALID, "rpc shutdown: no agent (dist_rpc_init first)");
    if (!graceful) {
        pthread_mutex_lock(&dist_rpc__lock);
        dist_rpc__g.closing = 1;
        pthread_mutex_unlock(&dist_rpc__lock);
    } else {
        /* Calls stay open: handlers serving other workers may still make
           nested calls until everyone is done. */
        int bound = dist_rpc__g.timeout_ms > 0 ? dist_rpc__g.timeout_ms : 60000;
        int64_t deadline = dist_rpc__now_ns() + (int64_t)bound * 1000000;
        int64_t arrived = 0;
        const char *key = "dist_rpc/shutdown/all";
        pthread_mutex_lock(&dist_rpc__lock);
        while (dist_rpc__g.npending > 0 && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(deadline);
        if (dist_rpc__g.npending > 0)
            snprintf(why, sizeof why, "%d call(s) of this worker were still outstanding after %.1f s", dist_rpc__g.npending, bound / 1000.0);
        pthread_mutex_unlock(&dist_rpc__lock);
        if (dist_store_add(dist_rpc__g.world, "dist_rpc/shutdown/count", 1, &arrived) != DIST_OK) {
            if (!why[0]) snprintf(why, sizeof why, "%s", dist_error_message(dist_rpc__g.world));
        } else {
            if (arrived == dist_rpc__g.size) dist_store_set(dist_rpc__g.world, key, "1", 1);
            int64_t left_ms = (deadline - dist_rpc__now_ns()) / 1000000;
            if (dist_store_wait(dist_rpc__g.world, &key, 1, left_ms > 0 ? (int)left_ms : 1) != DIST_OK && !why[0])
                snprintf(why, sizeof why, "waiting for every worker to call dist_rpc_shutdown: %.300s", dist_error_message(dist_rpc__g.world));
        }
        pthread_mutex_lock(&dist_rpc__lock);
        dist_rpc__g.draining = 1;
        while ((dist_rpc__g.q_head || dist_rpc__g.active || dist_rpc__g.deferred || dist_rpc__g.npending) && dist_rpc__now_ns() < deadline)
            dist_rpc__cond_wait(deadline);
        pthread_mutex_unlock(&dist_rpc__lock);
        /* References: the application's user forks are let go of here (its
           handles stay valid, detached); once every worker's owners have
           heard (a second count in the store), no entry has a user left. */
        dist_rpc__release_users();
        pthread_mutex_lock(&dist_rpc__lock);
        while ((dist_rpc__g.nusers > 0 || dist_rpc__g.npending > 0) && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(deadline);
        if (dist_rpc__g.nusers > 0 && !why[0])
            snprintf(why, sizeof why, "%d reference(s) held here were still unknown to their owners after %.1f s", dist_rpc__g.nusers, bound / 1000.0);
        pthread_mutex_unlock(&dist_rpc__lock);
        {
            const char *rkey = "dist_rpc/shutdown/released";
            int64_t left_ms = (deadline - dist_rpc__now_ns()) / 1000000;
            if (dist_store_add(dist_rpc__g.world, "dist_rpc/shutdown/released/count", 1, &arrived) != DIST_OK) {
                if (!why[0]) snprintf(why, sizeof why, "%s", dist_error_message(dist_rpc__g.world));
            } else {
                if (arrived == dist_rpc__g.size) dist_store_set(dist_rpc__g.world, rkey, "1", 1);
                if (dist_store_wait(dist_rpc__g.world, &rkey, 1, left_ms > 0 ? (int)left_ms : 1) != DIST_OK && !why[0])
                    snprintf(why, sizeof why, "waiting for every worker to let go of its references: %.300s", dist_error_message(dist_rpc__g.world));
            }
        }
        pthread_mutex_lock(&dist_rpc__lock);
        while ((dist_rpc__g.nforks > 0 || dist_rpc__g.q_head || dist_rpc__g.active || dist_rpc__g.npending) && dist_rpc__now_ns() < deadline)
            dist_rpc__cond_wait(deadline);
        if (dist_rpc__g.nforks > 0 && !why[0])
            snprintf(why, sizeof why, "%d reference(s) to values owned here were never let go of by their users", dist_rpc__g.nforks);
        dist_rpc__g.closing = 1;
        pthread_mutex_unlock(&dist_rpc__lock);
    }
    dist_rpc__teardown(dist_rpc__g.nthreads, graceful);
    if (why[0]) res = dist_rpc__fail(DIST_ERR_TIMEOUT, "rpc shutdown: %s", why);
    return res;
}

DIST_API dist_result dist_rpc_get_worker_info(const char *name, dist_worker_info *info) {
    if (!info) return dist_rpc__fail(DIST_ERR_INVALID, "get_worker_info: NULL info");
    if (!dist_rpc__g.up || !dist_rpc__g.names) return dist_rpc__fail(DIST_ERR_INVALID, "get_worker_info: no agent (dist_rpc_init first)");
    for (int r = 0; r < dist_rpc__g.size; r++)
        if (name ? strcmp(dist_rpc__g.names[r], name) == 0 : r == dist_rpc__g.rank) {
            snprintf(info->name, sizeof info->name, "%s", dist_rpc__g.names[r]);
            info->rank = r;
            return DIST_OK;
        }
    return dist_rpc__fail(DIST_ERR_NOT_FOUND, "get_worker_info: no worker is named '%s'", name);
}

DIST_API int dist_rpc_world_size(void) { return dist_rpc__g.up ? dist_rpc__g.size : 0; }

/* [SECTION] RPC: calls and futures */
/* Calls `fn` on rank `to` (args taken over); `label` names the call in
   error sentences (NULL: fn).  With `rr`, a remote(): the callee keeps the
   result as the RRef `rr`, whose id is the call's, tabled here before the
   request leaves. */
static dist_result dist_rpc__call(int to, const char *fn, const char *label, dist_value_t *args, int timeout_ms, dist_rref_t *rr,
                                  dist_future_t **out) {
    dist_future_t *f;
    dist_result r;
    *out = NULL;
    if (!args && !(args = dist_value_none())) return DIST_ERR_NOMEM;
    if (!(f = (dist_future_t *)DIST_MALLOC(sizeof *f))) { dist_value_free(args); return dist_rpc__fail(DIST_ERR_NOMEM, "rpc '%s': out of memory", fn); }
    memset(f, 0, sizeof *f);
    f->refs = 2;
    f->to = to;
    snprintf(f->fn, sizeof f->fn, "%s", label ? label : fn);
    if (timeout_ms == 0) timeout_ms = dist_rpc__g.timeout_ms;
    f->timeout_ms = timeout_ms;
    f->deadline_ns = timeout_ms > 0 ? dist_rpc__now_ns() + (int64_t)timeout_ms * 1000000 : 0;
    pthread_mutex_lock(&dist_rpc__lock);
    if (!dist_rpc__g.up || !dist_rpc__g.world || dist_rpc__g.closing) {
        int up = dist_rpc__g.up && dist_rpc__g.world;
        pthread_mutex_unlock(&dist_rpc__lock);
        DIST_FREE(f); dist_value_free(args);
        return dist_rpc__fail(DIST_ERR_INVALID, "rpc '%s' to worker '%s': %s", label ? label : fn, dist_rpc__name_of(to),
                              up ? "this worker is shutting down" : "no agent (dist_rpc_init first)");
    }
    f->id = dist_rpc__g.next_id++;
    f->next = dist_rpc__g.pending;
    dist_rpc__g.pending = f;
    dist_rpc__g.npending++;
    if (rr) {
        rr->rid.rank = (uint32_t)dist_rpc__g.rank; rr->rid.id = f->id;
        rr->fid = rr->rid;                           /* the creator's fork has the RRef's id */
        dist_rpc__table_add_locked(rr);
    }
    pthread_mutex_unlock(&dist_rpc__lock);
    r = dist_rpc__send(to, DIST_RPC__REQUEST, rr ? DIST_RPC__FLAG_REMOTE : 0, 0, f->id, fn, args, NULL);
    dist_value_free(args);
    if (r != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        dist_rpc__cb *cbs = NULL;
        int mine;
        snprintf(why, sizeof why, "%.300s", dist_rpc__error);
        pthread_mutex_lock(&dist_rpc__lock);
        if (rr) rr->owner_has = 0;               /* the owner never heard of it */
        mine = !f->done;                     /* (or the sweep completed it meanwhile) */
        if (mine) cbs = dist_rpc__complete_locked(f, r, NULL, "rpc '%s' to worker '%s' (rank %d): %s", f->fn, dist_rpc__name_of(to), to, why);
        pthread_mutex_unlock(&dist_rpc__lock);
        if (mine) dist_rpc__finish(f, cbs);
    }
    *out = f;
    return DIST_OK;
}

/* The checks of a call from the application: the worker by name, the
   function's name (not one of the agent's own). */
static dist_result dist_rpc__check_call(const char *what, const char *to, const char *fn, const void *out, dist_worker_info *wi) {
    dist_result r;
    if (!out || !to || !fn) return dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL %s", what, !out ? "result pointer" : !to ? "worker" : "function");
    if (strlen(fn) == 0 || strlen(fn) > DIST_RPC__MAX_NAME) return dist_rpc__fail(DIST_ERR_INVALID, "%s: a function name has 1 to 255 characters", what);
    if (strncmp(fn, DIST_RPC__RESERVED, strlen(DIST_RPC__RESERVED)) == 0)
        return dist_rpc__fail(DIST_ERR_INVALID, "%s '%s': names that begin with \"" DIST_RPC__RESERVED "\" are the agent's own", what, fn);
    if ((r = dist_rpc_get_worker_info(to, wi)) != DIST_OK) return dist_rpc__fail(r, "%s '%s': %s", what, fn, dist_rpc__error);
    return DIST_OK;
}

DIST_API dist_result dist_rpc_async_timeout(const char *to, const char *fn, dist_value_t *args, int timeout_ms, dist_future_t **out) {
    dist_worker_info wi;
    dist_result r;
    if (out) *out = NULL;
    if ((r = dist_rpc__check_call("rpc", to, fn, out, &wi)) != DIST_OK) { dist_value_free(args); return r; }
    return dist_rpc__call(wi.rank, fn, NULL, args, timeout_ms, NULL, out);
}

DIST_API dist_result dist_rpc_async(const char *to, const char *fn, dist_value_t *args, dist_future_t **fut) {
    return dist_rpc_async_timeout(to, fn, args, 0, fut);
}

DIST_API dist_result dist_rpc_sync_timeout(const char *to, const char *fn, dist_value_t *args, int timeout_ms, dist_value_t **ret) {
    dist_future_t *f = NULL;
    dist_result r;
    if (ret) *ret = NULL;
    if ((r = dist_rpc_async_timeout(to, fn, args, timeout_ms, &f)) != DIST_OK) return r;
    r = dist_future_wait(f, 0);
    if (r == DIST_OK && ret) *ret = dist_future_take(f);
    dist_future_free(f);
    return r;
}

DIST_API dist_result dist_rpc_sync(const char *to, const char *fn, dist_value_t *args, dist_value_t **ret) {
    return dist_rpc_sync_timeout(to, fn, args, 0, ret);
}

/* Waits (agent lock held) until `f` is done or `deadline_ns` (0: none); a
   handler thread runs queued calls meanwhile. */
static void dist_rpc__wait_locked(dist_future_t *f, int64_t deadline_ns) {
    while (!f->settled && (!deadline_ns || dist_rpc__now_ns() < deadline_ns)) {
        dist_rpc_call_t *c = dist_rpc__in_pool ? dist_rpc__pop_locked() : NULL;
        if (c) dist_rpc__run_unlocked(c);
        else {
            dist_rpc__g.helping += dist_rpc__in_pool;
            dist_rpc__cond_wait(deadline_ns);
            dist_rpc__g.helping -= dist_rpc__in_pool;
        }
    }
}

DIST_API dist_result dist_future_wait(dist_future_t *f, int timeout_ms) {
    dist_result r;
    if (!f) return dist_rpc__fail(DIST_ERR_INVALID, "future_wait: NULL future");
    pthread_mutex_lock(&dist_rpc__lock);
    dist_rpc__wait_locked(f, timeout_ms > 0 ? dist_rpc__now_ns() + (int64_t)timeout_ms * 1000000 : 0);
    if (!f->settled) {
        pthread_mutex_unlock(&dist_rpc__lock);
        return dist_rpc__fail(DIST_ERR_TIMEOUT, "future_wait: rpc '%s' to worker '%s' (rank %d) not done after %.1f s (still pending)", f->fn,
                              dist_rpc__name_of(f->to), f->to, timeout_ms / 1000.0);
    }
    r = f->result;
    if (r != DIST_OK) dist_rpc__fail(r, "%s", f->err);
    pthread_mutex_unlock(&dist_rpc__lock);
    return r;
}

DIST_API dist_result dist_future_test(dist_future_t *f, int *done) {
    dist_result r;
    if (!f || !done) return dist_rpc__fail(DIST_ERR_INVALID, "future_test: NULL %s", f ? "`done`" : "future");
    pthread_mutex_lock(&dist_rpc__lock);
    *done = f->settled;
    r = f->settled ? f->result : DIST_OK;
    if (r != DIST_OK) dist_rpc__fail(r, "%s", f->err);
    pthread_mutex_unlock(&dist_rpc__lock);
    return r;
}

DIST_API dist_result dist_future_then(dist_future_t *f, void (*cb)(dist_future_t *, void *), void *user) {
    dist_rpc__cb *c;
    if (!f || !cb) return dist_rpc__fail(DIST_ERR_INVALID, "future_then: NULL %s", f ? "callback" : "future");
    if (!(c = (dist_rpc__cb *)DIST_MALLOC(sizeof *c))) return dist_rpc__fail(DIST_ERR_NOMEM, "future_then: out of memory");
    c->cb = cb; c->user = user; c->next = NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    if (!f->done) {
        dist_rpc__cb **pp = &f->cbs;
        while (*pp) pp = &(*pp)->next;                   /* in the order they were added */
        *pp = c;
        pthread_mutex_unlock(&dist_rpc__lock);
        return DIST_OK;
    }
    pthread_mutex_unlock(&dist_rpc__lock);
    cb(f, user);
    DIST_FREE(c);
    return DIST_OK;
}

DIST_API dist_result dist_future_wait_all(int n, dist_future_t **fs, int timeout_ms) {
    int64_t deadline = timeout_ms > 0 ? dist_rpc__now_ns() + (int64_t)timeout_ms * 1000000 : 0;
    dist_result first = DIST_OK;
    if (n < 0 || (n && !fs)) return dist_rpc__fail(DIST_ERR_INVALID, "future_wait_all: %d futures at %p", n, (void *)fs);
    for (int i = 0; i < n; i++) {
        dist_result r;
        if (!fs[i]) continue;
        pthread_mutex_lock(&dist_rpc__lock);
        dist_rpc__wait_locked(fs[i], deadline);
        r = fs[i]->settled ? fs[i]->result : DIST_ERR_TIMEOUT;
        if (first == DIST_OK && r != DIST_OK) {
            if (fs[i]->settled) dist_rpc__fail(r, "%s", fs[i]->err);
            else dist_rpc__fail(r, "future_wait_all: rpc '%s' to worker '%s' not done after %.1f s", fs[i]->fn, dist_rpc__name_of(fs[i]->to),
                                timeout_ms / 1000.0);
            first = r;
        }
        pthread_mutex_unlock(&dist_rpc__lock);
    }
    if (first != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        snprintf(why, sizeof why, "%.300s", dist_rpc__error);
        dist_rpc__fail(first, "%s", why);
    }
    return first;
}

DIST_API const dist_value_t *dist_future_value(const dist_future_t *f) { return f && f->done ? f->value : NULL; }

DIST_API dist_value_t *dist_future_take(dist_future_t *f) {
    dist_value_t *v;
    if (!f) return NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    v = f->done ? f->value : NULL;
    if (f->done) f->value = NULL;
    pthread_mutex_unlock(&dist_rpc__lock);
    return v;
}

DIST_API dist_result dist_future_result(const dist_future_t *f) { return f && f->done ? f->result : DIST_OK; }
DIST_API const char *dist_future_error(const dist_future_t *f) { return f && f->done ? f->err : ""; }

DIST_API void dist_future_free(dist_future_t *f) {
    if (!f) return;
    pthread_mutex_lock(&dist_rpc__lock);
    f = dist_rpc__future_unref_locked(f);
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__future_destroy(f);
}

/* [SECTION] RPC: inside a handler */
DIST_API int dist_rpc_call_caller(const dist_rpc_call_t *c) { return c ? c->from : -1; }
DIST_API const char *dist_rpc_call_function(const dist_rpc_call_t *c) { return c ? c->fn_name : ""; }

DIST_API void dist_rpc_call_fail(dist_rpc_call_t *c, const char *fmt, ...) {
    va_list ap;
    if (!c) return;
    c->failed = 1;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt ? fmt : "(no message)", ap);
    va_end(ap);
}

DIST_API void dist_rpc_call_defer(dist_rpc_call_t *c) {
    if (!c || c->deferred) return;
    pthread_mutex_lock(&dist_rpc__lock);
    c->deferred = 1;
    c->refs++;
    c->next = dist_rpc__g.deferred;
    dist_rpc__g.deferred = c;
    pthread_mutex_unlock(&dist_rpc__lock);
}

/* Answers a deferred call with `res` (freed unless borrowed) or, when
   code is not DIST_OK, with the error `text`; frees the call. */
static dist_result dist_rpc__answer(dist_rpc_call_t *c, dist_result code, dist_value_t *res, const char *text, int borrowed) {
    dist_rpc_call_t **pp;
    pthread_mutex_lock(&dist_rpc__lock);
    for (pp = &dist_rpc__g.deferred; *pp && *pp != c; pp = &(*pp)->next) { }
    if (*pp) *pp = c->next;
    if (dist_rpc__g.draining) pthread_cond_broadcast(&dist_rpc__cond);
    pthread_mutex_unlock(&dist_rpc__lock);
    return dist_rpc__deliver(c, code, res, text, borrowed);
}

DIST_API dist_result dist_rpc_call_reply(dist_rpc_call_t *c, dist_value_t *res) {
    dist_value_t *none = NULL;
    if (!c || !c->deferred) { dist_value_free(res); return dist_rpc__fail(DIST_ERR_INVALID, "call_reply: %s", c ? "the call was not deferred (return the result instead)" : "NULL call"); }
    if (!res && !(res = none = dist_value_none())) return DIST_ERR_NOMEM;
    return dist_rpc__answer(c, DIST_OK, res, NULL, 0);
}

static void dist_rpc__forward_cb(dist_future_t *f, void *user) {
    dist_rpc_call_t *c = (dist_rpc_call_t *)user;
    if (f->result == DIST_OK) {
        dist_value_t *v = f->value;
        f->value = NULL;
        dist_rpc__answer(c, DIST_OK, v, NULL, 0);
    } else {
        dist_rpc__answer(c, f->result, NULL, f->err, 0);
    }
}

DIST_API dist_result dist_rpc_call_forward(dist_rpc_call_t *c, dist_future_t *f) {
    dist_result r;
    if (!c || !f || !c->deferred) {
        dist_future_free(f);
        return dist_rpc__fail(DIST_ERR_INVALID, "call_forward: %s", !c || !f ? "NULL call or future" : "defer the call first");
    }
    r = dist_future_then(f, dist_rpc__forward_cb, c);
    dist_future_free(f);
    return r;
}

/* [SECTION] RPC: remote references
   The protocol (torch's "Remote Reference Protocol").  An RRef's id is
   (the worker that made it, that worker's counter); each user's reference
   is a fork with an id of its own.  The owner keeps one entry per RRef:
   the value, and the set of its users' forks; it frees the value when the
   set is empty and no handle on the owner itself remains.
   - remote(): the creator's fork has the RRef's id; the owner adds it
     when the request arrives (on the listener, before anything later from
     the creator is read), and the reply confirms it.
   - Passing a reference makes a fork for the receiver when the message is
     made.  The owner adds it at once (owner -> user: confirmed on
     arrival).  A user counts it as a child and keeps its own fork until
     the owner has heard of the child: user -> owner, the owner tells the
     parent on arrival (accept); user -> user, the receiver asks the owner
     to add its fork (fork), and the owner tells the parent (accept).
   - A user's fork, once let go, confirmed and without children, tells the
     owner (delete).  So the owner's set never empties while a reference
     anywhere is alive or on its way.
   A message about an RRef may outrun the remote() that makes it (they
   travel on different connections): the owner then makes the entry,
   waiting for its value. */

static unsigned dist_rpc__hash(dist_rpc__id k) {
    return (unsigned)(((k.id * 0x9E3779B97F4A7C15ull) >> 40) ^ k.rank) % DIST_RPC__BUCKETS;
}

static int dist_rpc__id_eq(dist_rpc__id a, dist_rpc__id b) { return a.rank == b.rank && a.id == b.id; }

static dist_rref_t *dist_rpc__find_locked(int owned, dist_rpc__id k) {
    dist_rref_t *r = (owned ? dist_rpc__g.owned : dist_rpc__g.users)[dist_rpc__hash(k)];
    while (r && !dist_rpc__id_eq(owned ? r->rid : r->fid, k)) r = r->next;
    return r;
}

static void dist_rpc__table_add_locked(dist_rref_t *r) {
    dist_rref_t **t = r->is_owner ? dist_rpc__g.owned : dist_rpc__g.users;
    dist_rpc__id k = r->rid;
    unsigned h;
    if (!r->is_owner) k = r->fid;
    h = dist_rpc__hash(k);
    r->next = t[h];
    t[h] = r;
    r->tabled = 1;
    if (r->is_owner) dist_rpc__g.nowned++; else dist_rpc__g.nusers++;
}

static void dist_rpc__table_del_locked(dist_rref_t *r) {
    dist_rref_t **t = r->is_owner ? dist_rpc__g.owned : dist_rpc__g.users, **pp;
    dist_rpc__id k = r->rid;
    if (!r->is_owner) k = r->fid;
    pp = &t[dist_rpc__hash(k)];
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    r->next = NULL;
    r->tabled = 0;
    if (r->is_owner) dist_rpc__g.nowned--; else dist_rpc__g.nusers--;
    pthread_cond_broadcast(&dist_rpc__cond);            /* a graceful shutdown counts them */
}

static dist_rref_t *dist_rpc__rref_alloc(int is_owner, int owner) {
    dist_rref_t *r = (dist_rref_t *)DIST_MALLOC(sizeof *r);
    if (!r) return NULL;
    memset(r, 0, sizeof *r);
    r->is_owner = is_owner;
    r->owner = owner;
    r->refs = 1;
    return r;
}

/* The owner's entry for `rid`; made, waiting for its value, when `create`
   and it was not made here (an RRef made here that is gone stays gone). */
static dist_rref_t *dist_rpc__owned_locked(dist_rpc__id rid, int create) {
    dist_rref_t *e = dist_rpc__find_locked(1, rid);
    if (e || !create || rid.rank == (uint32_t)dist_rpc__g.rank) return e;
    if (!(e = dist_rpc__rref_alloc(1, dist_rpc__g.rank))) return NULL;
    e->refs = 0;
    e->rid = rid;
    e->confirmed = 1;
    dist_rpc__table_add_locked(e);
    return e;
}

static int dist_rpc__fork_add_locked(dist_rref_t *e, dist_rpc__id fid, int holder) {
    if (e->nforks == e->capforks) {
        int cap = e->capforks ? 2 * e->capforks : 4;
        void *f = DIST_REALLOC(e->forks, sizeof *e->forks * (size_t)cap);
        if (!f) return -1;
        memcpy(&e->forks, &f, sizeof f);                /* (the anonymous struct's pointer type, in C and C++) */
        e->capforks = cap;
    }
    e->forks[e->nforks].fid = fid;
    e->forks[e->nforks++].holder = holder;
    dist_rpc__g.nforks++;
    return 0;
}

static void dist_rpc__fork_del_locked(dist_rref_t *e, dist_rpc__id fid) {
    for (int i = 0; i < e->nforks; i++)
        if (dist_rpc__id_eq(e->forks[i].fid, fid)) {
            e->forks[i] = e->forks[--e->nforks];
            dist_rpc__g.nforks--;
            if (dist_rpc__g.nforks == 0) pthread_cond_broadcast(&dist_rpc__cond);
            return;
        }
}

/* What to do, without the lock, after a change to a reference. */
typedef struct {
    dist_rref_t *free_r;
    dist_value_t *free_v;
    int delete_to;                   /* -1: no message */
    dist_rpc__id rid, fid;
} dist_rpc__after;

/* Decides (lock held) what `r` needs now: an owner's entry goes when no
   fork, handle, pin or parked fetch remains and its value is there; a
   user's fork, let go (or released by shutdown), confirmed and without
   children, leaves the table and tells the owner. */
static void dist_rpc__settle_locked(dist_rref_t *r, dist_rpc__after *a) {
    memset(a, 0, sizeof *a);
    a->delete_to = -1;
    if (r->is_owner) {
        if (r->refs > 0 || r->nforks > 0 || r->pins > 0 || r->waiters || (r->state == DIST_RPC__PENDING && !r->detached)) return;
        if (r->tabled) dist_rpc__table_del_locked(r);
        a->free_v = r->value;
        r->value = NULL;
        a->free_r = r;
        return;
    }
    if (!r->tabled) {                                   /* detached, or released by shutdown */
        if (r->refs == 0) a->free_r = r;
        return;
    }
    if ((r->refs > 0 && !r->forced) || !r->confirmed || r->children > 0) return;
    dist_rpc__table_del_locked(r);
    if (r->owner_has && !r->detached) { a->delete_to = r->owner; a->rid = r->rid; a->fid = r->fid; }
    r->detached = 1;
    if (r->refs == 0) a->free_r = r;
}

static void dist_rpc__after_do(dist_rpc__after *a) {
    if (a->delete_to >= 0)
        dist_rpc__notify(a->delete_to, DIST_RPC__RESERVED "delete",
                         dist_value_pack("[IIII]", (int64_t)a->rid.rank, (int64_t)a->rid.id, (int64_t)a->fid.rank, (int64_t)a->fid.id));
    dist_value_free(a->free_v);                         /* (may let go of other references) */
    if (a->free_r) {
        DIST_FREE(a->free_r->forks);
        DIST_FREE(a->free_r);
    }
}

/* Settles `r` after a change made under the lock (which it releases). */
static void dist_rpc__settle_unlock(dist_rref_t *r) {
    dist_rpc__after a;
    dist_rpc__settle_locked(r, &a);
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__after_do(&a);
}

static void dist_rpc__unpin(dist_rref_t *e) {
    pthread_mutex_lock(&dist_rpc__lock);
    e->pins--;
    dist_rpc__settle_unlock(e);
}

static void dist_rpc__rref_drop(dist_rref_t *r) { dist_rref_free(r); }

static int dist_rpc__rref_same(const dist_rref_t *a, const dist_rref_t *b) {
    return a && b && dist_rpc__id_eq(a->rid, b->rid);
}

/* A notice of the protocol: a request nobody answers (args taken). */
static void dist_rpc__notify(int to, const char *fn, dist_value_t *args) {
    int open_;
    if (!args) return;                                  /* out of memory: the owner keeps the value (a leak, not a crash) */
    pthread_mutex_lock(&dist_rpc__lock);
    open_ = dist_rpc__g.up && dist_rpc__g.world && !dist_rpc__g.stopping;
    pthread_mutex_unlock(&dist_rpc__lock);
    if (open_) dist_rpc__send(to, DIST_RPC__REQUEST, DIST_RPC__FLAG_ONEWAY, 0, 0, fn, args, NULL);
    dist_value_free(args);
}

/* Makes the forks for the references in a message to `to` (see the
   protocol above); -1, the sentence set and nothing changed, when one
   cannot travel. */
enum { DIST_RPC__HOW_FORK = 1, DIST_RPC__HOW_PIN = 2, DIST_RPC__HOW_CHILD = 3 };
static int dist_rpc__forks_make(dist_rpc__fork *f, size_t n, int to) {
    size_t i;
    pthread_mutex_lock(&dist_rpc__lock);
    for (i = 0; i < n; i++) {
        dist_rref_t *r = f[i].r;
        if (!r || r->detached || !dist_rpc__g.up) {
            dist_rpc__fail(DIST_ERR_INVALID, "rpc: %s", !r ? "an rref that could not be taken in cannot be passed on"
                                                           : "an rref from an agent that was shut down cannot be passed on");
            break;
        }
        f[i].owner = (uint32_t)r->owner;
        f[i].rid = r->rid;
        f[i].fid.rank = (uint32_t)dist_rpc__g.rank;
        f[i].fid.id = dist_rpc__g.next_id++;
        if (r->is_owner && to == dist_rpc__g.rank) {
            r->pins++;                                  /* to itself: held until the message is read */
            f[i].how = DIST_RPC__HOW_PIN;
        } else if (r->is_owner) {
            if (dist_rpc__fork_add_locked(r, f[i].fid, to) != 0) { dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for an rref's fork"); break; }
            f[i].how = DIST_RPC__HOW_FORK;
        } else {
            f[i].pfid = r->fid;
            r->children++;
            f[i].how = DIST_RPC__HOW_CHILD;
        }
    }
    pthread_mutex_unlock(&dist_rpc__lock);
    if (i == n) return 0;
    dist_rpc__forks_undo(f, i);
    return -1;
}

static void dist_rpc__forks_undo(dist_rpc__fork *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        dist_rref_t *r = f[i].r;
        if (!f[i].how) continue;
        pthread_mutex_lock(&dist_rpc__lock);
        if (f[i].how == DIST_RPC__HOW_PIN) r->pins--;
        else if (f[i].how == DIST_RPC__HOW_FORK) dist_rpc__fork_del_locked(r, f[i].fid);
        else r->children--;
        f[i].how = 0;
        dist_rpc__settle_unlock(r);
    }
}

static void dist_rpc__fork_done(dist_future_t *f, void *user) {
    dist_rref_t *r = (dist_rref_t *)user;
    pthread_mutex_lock(&dist_rpc__lock);
    r->confirmed = 1;
    r->owner_has = f->result == DIST_OK;
    if (f->result != DIST_OK && r->code == DIST_OK) { r->code = f->result; snprintf(r->err, sizeof r->err, "%s", f->err); }
    pthread_cond_broadcast(&dist_rpc__cond);
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rref_free(r);                                  /* the reference this callback held */
}

/* Takes in the references of a value that came from `from` (on the
   listener): each becomes a handle here, and the owner and the parent hear
   what they must.  One that cannot be taken in (out of memory, or an RRef
   made here that is gone) stays NULL: dist_value_get_rref says so. */
static void dist_rpc__take_in(dist_value_t *v, int from) {
    if (v->type == DIST_VALUE_LIST) {
        for (size_t i = 0; i < v->u.list.n; i++) dist_rpc__take_in(v->u.list.items[i], from);
        return;
    }
    if (v->type != DIST_VALUE_RREF) return;
    if ((int)v->u.r.owner == dist_rpc__g.rank) {
        dist_rref_t *e;
        pthread_mutex_lock(&dist_rpc__lock);
        e = dist_rpc__owned_locked(v->u.r.rid, 1);
        if (e) e->refs++;
        if (e && from == dist_rpc__g.rank) e->pins--;   /* sent by this owner to itself */
        pthread_mutex_unlock(&dist_rpc__lock);
        v->u.r.ref = e;
        if (from != dist_rpc__g.rank)                   /* a user's child came home: the parent may let go */
            dist_rpc__notify(from, DIST_RPC__RESERVED "accept", dist_value_pack("[II]", (int64_t)v->u.r.pfid.rank, (int64_t)v->u.r.pfid.id));
        return;
    }
    {
        dist_rref_t *r = dist_rpc__rref_alloc(0, (int)v->u.r.owner);
        dist_future_t *f = NULL;
        if (!r) return;
        r->rid = v->u.r.rid;
        r->fid = v->u.r.fid;
        r->confirmed = r->owner_has = from == r->owner;
        if (!r->confirmed) r->refs++;                  /* held by the fork request's callback */
        pthread_mutex_lock(&dist_rpc__lock);
        dist_rpc__table_add_locked(r);
        pthread_mutex_unlock(&dist_rpc__lock);
        v->u.r.ref = r;
        if (r->confirmed) return;
        if (dist_rpc__call(r->owner, DIST_RPC__RESERVED "fork", "rref fork",
                           dist_value_pack("[IIIIIII]", (int64_t)r->rid.rank, (int64_t)r->rid.id, (int64_t)r->fid.rank, (int64_t)r->fid.id,
                                           (int64_t)from, (int64_t)v->u.r.pfid.rank, (int64_t)v->u.r.pfid.id),
                           0, NULL, &f) != DIST_OK) {
            pthread_mutex_lock(&dist_rpc__lock);
            r->confirmed = 1;
            r->code = DIST_ERR_INVALID;
            snprintf(r->err, sizeof r->err, "rref: the owner could not be told of this reference: %.300s", dist_rpc__error);
            pthread_mutex_unlock(&dist_rpc__lock);
            dist_rref_free(r);
            return;
        }
        dist_future_then(f, dist_rpc__fork_done, r);
        dist_future_free(f);
    }
}

/* Reads the ids the protocol's messages carry (all checked: ranks within
   the job). */
static int dist_rpc__ids(dist_rpc_call_t *c, const dist_value_t *args, int n, unsigned ranks, int64_t *x) {
    for (int i = 0; i < n; i++) {
        const dist_value_t *it = dist_value_item(args, (size_t)i);
        if (!it || dist_value_get_int(it, &x[i]) != DIST_OK || (((ranks >> i) & 1) && (x[i] < 0 || x[i] >= dist_rpc__g.size))) {
            dist_rpc_call_fail(c, "%s: malformed arguments", c->fn_name);
            return -1;
        }
    }
    return 0;
}

static dist_rpc__id dist_rpc__mkid(int64_t rank, int64_t id) {
    dist_rpc__id k;
    k.rank = (uint32_t)rank; k.id = (uint64_t)id;
    return k;
}

/* fork [rid, fid, parent, parent's fid]: a user's child asks the owner to
   add it; the parent hears (also when it failed, so it is not held). */
static dist_value_t *dist_rpc__h_fork(dist_rpc_call_t *c, const dist_value_t *args) {
    int64_t x[7];
    dist_rref_t *e;
    int ok = 0;
    if (dist_rpc__ids(c, args, 7, 0x35, x) != 0) return NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    e = dist_rpc__owned_locked(dist_rpc__mkid(x[0], x[1]), 1);
    if (e) ok = dist_rpc__fork_add_locked(e, dist_rpc__mkid(x[2], x[3]), c->from) == 0;
    pthread_mutex_unlock(&dist_rpc__lock);
    dist_rpc__notify((int)x[4], DIST_RPC__RESERVED "accept", dist_value_pack("[II]", x[5], x[6]));
    if (!ok) dist_rpc_call_fail(c, "%s", e ? "the owner ran out of memory" : "the value of this rref was already freed by its owner");
    return NULL;
}

/* accept [the parent's fid]: a child of that fork is known to the owner. */
static dist_value_t *dist_rpc__h_accept(dist_rpc_call_t *c, const dist_value_t *args) {
    int64_t x[2];
    dist_rref_t *r;
    if (dist_rpc__ids(c, args, 2, 0x1, x) != 0) return NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    r = dist_rpc__find_locked(0, dist_rpc__mkid(x[0], x[1]));
    if (r && r->children > 0) { r->children--; dist_rpc__settle_unlock(r); }
    else pthread_mutex_unlock(&dist_rpc__lock);
    return NULL;
}

/* delete [rid, fid]: a user let go of its fork. */
static dist_value_t *dist_rpc__h_delete(dist_rpc_call_t *c, const dist_value_t *args) {
    int64_t x[4];
    dist_rref_t *e;
    if (dist_rpc__ids(c, args, 4, 0x5, x) != 0) return NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    e = dist_rpc__owned_locked(dist_rpc__mkid(x[0], x[1]), 0);
    if (e) { dist_rpc__fork_del_locked(e, dist_rpc__mkid(x[2], x[3])); dist_rpc__settle_unlock(e); }
    else pthread_mutex_unlock(&dist_rpc__lock);
    return NULL;
}

/* Answers a fetch from a pinned entry whose value is there (or failed). */
static void dist_rpc__answer_fetch(dist_rpc_call_t *c, dist_rref_t *e) {
    if (e->state == DIST_RPC__READY) dist_rpc__answer(c, DIST_OK, e->value, NULL, 1);
    else dist_rpc__answer(c, e->code, NULL, e->err, 0);
}

/* fetch [rid]: the value (a copy travels), once it is there. */
static dist_value_t *dist_rpc__h_fetch(dist_rpc_call_t *c, const dist_value_t *args) {
    int64_t x[2];
    dist_rref_t *e;
    if (dist_rpc__ids(c, args, 2, 0x1, x) != 0) return NULL;
    dist_rpc_call_defer(c);
    pthread_mutex_lock(&dist_rpc__lock);
    e = dist_rpc__owned_locked(dist_rpc__mkid(x[0], x[1]), 1);
    if (e && e->state == DIST_RPC__PENDING) {
        c->wnext = e->waiters;                          /* answered by dist_rpc__fill */
        e->waiters = c;
        pthread_mutex_unlock(&dist_rpc__lock);
        return NULL;
    }
    if (e) e->pins++;
    pthread_mutex_unlock(&dist_rpc__lock);
    if (!e) { dist_rpc__answer(c, DIST_ERR_NOT_FOUND, NULL, "the value of this rref was already freed by its owner", 0); return NULL; }
    dist_rpc__answer_fetch(c, e);
    dist_rpc__unpin(e);
    return NULL;
}

/* A remote()'s outcome: the value (taken over) or the error; the fetches
   parked on it are answered. */
static void dist_rpc__fill(dist_rref_t *e, dist_result code, dist_value_t *v, const char *text, const char *fn) {
    dist_rpc_call_t *w;
    pthread_mutex_lock(&dist_rpc__lock);
    if (e->state != DIST_RPC__PENDING) {                /* (failed already: the agent shut down) */
        pthread_mutex_unlock(&dist_rpc__lock);
        dist_value_free(v);
        return;
    }
    if (code == DIST_OK && !v) v = dist_value_none();
    if (code == DIST_OK && v) {
        e->state = DIST_RPC__READY;
        e->value = v;
    } else {
        e->state = DIST_RPC__FAILED;
        e->code = code == DIST_OK ? DIST_ERR_NOMEM : code;
        snprintf(e->err, sizeof e->err, "remote() of '%.64s' failed: %.300s", fn,
                 code == DIST_OK ? "out of memory" : text ? text : "");
    }
    w = e->waiters;
    e->waiters = NULL;
    e->pins++;
    pthread_cond_broadcast(&dist_rpc__cond);            /* local_value, to_here on the owner */
    pthread_mutex_unlock(&dist_rpc__lock);
    if (code != DIST_OK) dist_value_free(v);
    while (w) {
        dist_rpc_call_t *next = w->wnext;
        dist_rpc__answer_fetch(w, e);
        w = next;
    }
    dist_rpc__unpin(e);
}

static void dist_rpc__created(dist_future_t *f, void *user) {
    dist_rref_t *r = (dist_rref_t *)user;
    if (r->is_owner) {
        if (f->result != DIST_OK) dist_rpc__fill(r, f->result, NULL, f->err, f->fn);   /* (no-op when the handler filled it) */
    } else {
        pthread_mutex_lock(&dist_rpc__lock);
        r->confirmed = 1;
        if (f->result != DIST_OK && r->code == DIST_OK) { r->code = f->result; snprintf(r->err, sizeof r->err, "%s", f->err); }
        pthread_cond_broadcast(&dist_rpc__cond);
        pthread_mutex_unlock(&dist_rpc__lock);
    }
    dist_rref_free(r);                                  /* the reference this callback held */
}

DIST_API dist_result dist_remote_timeout(const char *to, const char *fn, dist_value_t *args, int timeout_ms, dist_rref_t **out) {
    dist_worker_info wi;
    dist_future_t *f = NULL;
    dist_rref_t *r;
    dist_result res;
    if (out) *out = NULL;
    if ((res = dist_rpc__check_call("remote", to, fn, out, &wi)) != DIST_OK) { dist_value_free(args); return res; }
    if (!(r = dist_rpc__rref_alloc(wi.rank == dist_rpc__g.rank, wi.rank))) {
        dist_value_free(args);
        return dist_rpc__fail(DIST_ERR_NOMEM, "remote '%s': out of memory", fn);
    }
    r->refs = 2;                                        /* yours, and the callback's below */
    r->confirmed = r->is_owner;
    r->owner_has = 1;
    if ((res = dist_rpc__call(wi.rank, fn, NULL, args, timeout_ms, r, &f)) != DIST_OK) {
        DIST_FREE(r);                                   /* (never tabled) */
        return res;
    }
    dist_future_then(f, dist_rpc__created, r);
    dist_future_free(f);
    *out = r;
    return DIST_OK;
}

DIST_API dist_result dist_remote(const char *to, const char *fn, dist_value_t *args, dist_rref_t **rref) {
    return dist_remote_timeout(to, fn, args, 0, rref);
}

DIST_API dist_result dist_rref_new(dist_value_t *value, dist_rref_t **out) {
    dist_rref_t *e;
    if (!out) { dist_value_free(value); return dist_rpc__fail(DIST_ERR_INVALID, "rref_new: NULL result pointer"); }
    *out = NULL;
    if (!value) return dist_rpc__fail(DIST_ERR_INVALID, "rref_new: NULL value (did building it fail?)");
    if (!(e = dist_rpc__rref_alloc(1, dist_rpc__g.rank))) { dist_value_free(value); return dist_rpc__fail(DIST_ERR_NOMEM, "rref_new: out of memory"); }
    pthread_mutex_lock(&dist_rpc__lock);
    if (!dist_rpc__g.up || !dist_rpc__g.world) {
        pthread_mutex_unlock(&dist_rpc__lock);
        DIST_FREE(e); dist_value_free(value);
        return dist_rpc__fail(DIST_ERR_INVALID, "rref_new: no agent (dist_rpc_init first)");
    }
    e->rid.rank = (uint32_t)dist_rpc__g.rank;
    e->rid.id = dist_rpc__g.next_id++;
    e->state = DIST_RPC__READY;
    e->remote_seen = e->confirmed = 1;
    e->value = value;
    dist_rpc__table_add_locked(e);
    pthread_mutex_unlock(&dist_rpc__lock);
    *out = e;
    return DIST_OK;
}

DIST_API int dist_rref_is_owner(const dist_rref_t *r) { return r ? r->is_owner : 0; }

DIST_API dist_result dist_rref_owner(const dist_rref_t *r, dist_worker_info *info) {
    if (!r || !info) return dist_rpc__fail(DIST_ERR_INVALID, "rref_owner: NULL %s", r ? "info" : "rref");
    memset(info, 0, sizeof *info);
    info->rank = r->owner;
    snprintf(info->name, sizeof info->name, "%s", dist_rpc__name_of(r->owner));
    return DIST_OK;
}

DIST_API int dist_rref_confirmed_by_owner(const dist_rref_t *r) {
    int c;
    if (!r) return 0;
    pthread_mutex_lock(&dist_rpc__lock);
    c = r->is_owner || (r->confirmed && r->owner_has);
    pthread_mutex_unlock(&dist_rpc__lock);
    return c;
}

/* Waits (lock held) for an owner's value until `deadline_ns` (0: none);
   DIST_OK when it is there, else the error, sentence set. */
static dist_result dist_rpc__await_value_locked(dist_rref_t *e, int64_t deadline_ns, const char *what) {
    while (e->state == DIST_RPC__PENDING && (!deadline_ns || dist_rpc__now_ns() < deadline_ns)) dist_rpc__cond_wait(deadline_ns);
    if (e->state == DIST_RPC__READY) return DIST_OK;
    if (e->state == DIST_RPC__FAILED)
        return dist_rpc__fail(e->code, "%s on worker '%s' (rank %d): %s", what, dist_rpc__name_of(dist_rpc__g.rank), dist_rpc__g.rank, e->err);
    return dist_rpc__fail(DIST_ERR_TIMEOUT, "%s: the remote() that makes this value is not done yet (timed out)", what);
}

static int64_t dist_rpc__deadline(int timeout_ms) {
    if (timeout_ms == 0) timeout_ms = dist_rpc__g.timeout_ms;
    return timeout_ms > 0 ? dist_rpc__now_ns() + (int64_t)timeout_ms * 1000000 : 0;
}

DIST_API dist_result dist_rref_local_value(dist_rref_t *r, const dist_value_t **out) {
    dist_result res;
    if (!r || !out) return dist_rpc__fail(DIST_ERR_INVALID, "rref_local_value: NULL %s", r ? "result pointer" : "rref");
    *out = NULL;
    if (!r->is_owner)
        return dist_rpc__fail(DIST_ERR_INVALID, "rref_local_value: worker '%s' (rank %d) owns this value, not this worker (use dist_rref_to_here)",
                              dist_rpc__name_of(r->owner), r->owner);
    pthread_mutex_lock(&dist_rpc__lock);
    res = dist_rpc__await_value_locked(r, dist_rpc__deadline(0), "rref_local_value");
    if (res == DIST_OK) *out = r->value;
    pthread_mutex_unlock(&dist_rpc__lock);
    return res;
}

DIST_API dist_result dist_rref_to_here(dist_rref_t *r, int timeout_ms, dist_value_t **out) {
    dist_future_t *f = NULL;
    dist_result res;
    if (!r || !out) return dist_rpc__fail(DIST_ERR_INVALID, "rref_to_here: NULL %s", r ? "result pointer" : "rref");
    *out = NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    if (r->is_owner) {
        res = dist_rpc__await_value_locked(r, dist_rpc__deadline(timeout_ms), "rref_to_here");
        if (res == DIST_OK) r->pins++;                  /* the copy is made without the lock */
        pthread_mutex_unlock(&dist_rpc__lock);
        if (res != DIST_OK) return res;
        *out = dist_value_copy(r->value);
        dist_rpc__unpin(r);
        return *out ? DIST_OK : dist_rpc__fail(DIST_ERR_NOMEM, "rref_to_here: out of memory for the copy");
    }
    if (r->code != DIST_OK) {                           /* its remote() failed: the next use says so */
        res = dist_rpc__fail(r->code, "%s", r->err);
        pthread_mutex_unlock(&dist_rpc__lock);
        return res;
    }
    pthread_mutex_unlock(&dist_rpc__lock);
    res = dist_rpc__call(r->owner, DIST_RPC__RESERVED "fetch", "to_here", dist_value_pack("[II]", (int64_t)r->rid.rank, (int64_t)r->rid.id),
                         timeout_ms, NULL, &f);
    if (res != DIST_OK) return res;
    res = dist_future_wait(f, 0);
    if (res == DIST_OK) *out = dist_future_take(f);
    dist_future_free(f);
    return res;
}

DIST_API dist_rref_t *dist_rref_keep(dist_rref_t *r) {
    if (!r) return NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    r->refs++;
    pthread_mutex_unlock(&dist_rpc__lock);
    return r;
}

DIST_API void dist_rref_free(dist_rref_t *r) {
    if (!r) return;
    pthread_mutex_lock(&dist_rpc__lock);
    r->refs--;
    dist_rpc__settle_unlock(r);
}

DIST_API void dist_rpc_rref_counts(int *owned, int *users) {
    pthread_mutex_lock(&dist_rpc__lock);
    if (owned) *owned = dist_rpc__g.nowned;
    if (users) *users = dist_rpc__g.nusers;
    pthread_mutex_unlock(&dist_rpc__lock);
}

/* A worker is gone: the forks it held go with it, and references to what
   it owned can never be confirmed or let go of (their next use fails). */
static void dist_rpc__peer_gone(int rank, const char *why) {
    for (;;) {                                          /* entries with forks it held */
        dist_rref_t *e = NULL;
        pthread_mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !e; b++)
            for (e = dist_rpc__g.owned[b]; e; e = e->next) {
                int hit = 0;
                for (int i = 0; i < e->nforks; i++)
                    if (e->forks[i].holder == rank) { dist_rpc__fork_del_locked(e, e->forks[i].fid); i--; hit = 1; }
                if (hit) break;
            }
        if (!e) { pthread_mutex_unlock(&dist_rpc__lock); break; }
        dist_rpc__settle_unlock(e);
    }
    for (;;) {                                          /* our forks of what it owned */
        dist_rref_t *r = NULL;
        pthread_mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !r; b++)
            for (r = dist_rpc__g.users[b]; r && r->owner != rank; r = r->next) { }
        if (!r) { pthread_mutex_unlock(&dist_rpc__lock); break; }
        r->confirmed = 1; r->owner_has = 0; r->children = 0;
        if (r->code == DIST_OK) {
            r->code = DIST_ERR_PEER_LOST;
            snprintf(r->err, sizeof r->err, "rref: its owner, worker '%s' (rank %d), is gone (%.300s)", dist_rpc__name_of(rank), rank, why);
        }
        if (r->refs > 0) { r->detached = 1; dist_rpc__table_del_locked(r); pthread_mutex_unlock(&dist_rpc__lock); continue; }
        dist_rpc__settle_unlock(r);
    }
}

/* Shutdown: lets go of every user fork here for the application (its
   handles stay valid, detached); they leave as their owners confirm. */
static void dist_rpc__release_users(void) {
    for (;;) {
        dist_rref_t *r = NULL;
        pthread_mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !r; b++)
            for (r = dist_rpc__g.users[b]; r && r->forced; r = r->next) { }
        if (r) { r->forced = 1; r->refs++; }
        pthread_mutex_unlock(&dist_rpc__lock);
        if (!r) return;
        dist_rref_free(r);                              /* settles it */
    }
}

/* Teardown (the threads are gone): every entry and fork leaves the
   tables; what nothing here holds is freed, the rest is detached and freed
   when the application lets go. */
static void dist_rpc__drop_tables(void) {
    dist_rref_t *gone = NULL;
    pthread_mutex_lock(&dist_rpc__lock);
    for (int t = 0; t < 2; t++)
        for (int b = 0; b < DIST_RPC__BUCKETS; b++) {
            dist_rref_t **tab = t ? dist_rpc__g.users : dist_rpc__g.owned;
            while (tab[b]) {
                dist_rref_t *r = tab[b];
                dist_rpc__table_del_locked(r);
                r->detached = 1;
                r->nforks = 0; r->pins = 0; r->waiters = NULL; r->children = 0;
                if (r->is_owner && r->state == DIST_RPC__PENDING) {
                    r->state = DIST_RPC__FAILED;
                    r->code = DIST_ERR_ABORTED;
                    snprintf(r->err, sizeof r->err, "the agent was shut down before the value was made");
                }
                if (r->refs == 0) { r->next = gone; gone = r; }
            }
        }
    dist_rpc__g.nforks = 0;
    pthread_mutex_unlock(&dist_rpc__lock);
    while (gone) {
        dist_rref_t *r = gone;
        gone = r->next;
        dist_value_free(r->value);
        DIST_FREE(r->forks);
        DIST_FREE(r);
    }
}

#endif /* DIST_RPC_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the dist authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright law, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We also dedicate any and all copyright interest in the software to the
benefit of the public.
------------------------------------------------------------------------------
*/
