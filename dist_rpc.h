/* dist_rpc.h - v0.1.0 - torch.distributed.rpc for C: typed values that
   travel between workers (this release), then RPC, futures and remote
   references on top of dist.h.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_RPC_IMPLEMENTATION
      #include "dist_rpc.h"
   in ONE C or C++ file (usually the one that defines DIST_IMPLEMENTATION
   too; dist_rpc.h includes dist.h itself); include "dist_rpc.h" without
   the define everywhere else.

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
   DIST_RPC_MAX_ITEMS        where: the implementation file.  Most values
                             (list items at every depth) one decoded value
                             may hold (default 2^20), so a small message
                             cannot ask for a huge allocation.
   DIST_STATIC, DIST_MALLOC/DIST_FREE/DIST_REALLOC as in dist.h.

THREADS
   A value belongs to one thread at a time.  Each thread has its own last
   error sentence (dist_rpc_error_message).
*/
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
    DIST_VALUE_TENSOR = 6
} dist_value_type;

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
DIST_API dist_value_t *dist_value_list(void);
/* Takes `item` over (also when it fails: then it is freed). */
DIST_API dist_result dist_value_append(dist_value_t *list, dist_value_t *item);
/* A value from a format (see QUICK START).  NULL on a bad format or out of
   memory; dist_rpc_error_message() says which.  Values passed with 'v' are
   taken over either way. */
DIST_API dist_value_t *dist_value_pack(const char *fmt, ...);
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

static DIST_RPC__TLS char dist_rpc__error[320];

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
enum { DIST_RPC__OWN_NODE = 1, DIST_RPC__OWN_DATA = 2, DIST_RPC__OWN_BLOCK = 4 };

struct dist_value {
    uint8_t type, own;
    uint8_t dtype, ndim;
    union {
        int64_t i;
        double f;
        struct { uint8_t *p; size_t n; } s;                  /* string (NUL after n), bytes */
        struct { dist_value_t **items; size_t n, cap; } list;
        struct { uint8_t *data; size_t nbytes; int64_t *shape; } t;
    } u;
};

static const char *const dist_rpc__type_names[] = { "none", "int", "float", "string", "bytes", "list", "tensor" };

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

DIST_API dist_value_t *dist_value_list(void) { return dist_rpc__node(DIST_VALUE_LIST); }

DIST_API void dist_value_free(dist_value_t *v) {
    if (!v || (v->own & DIST_RPC__OWN_BLOCK)) {
        if (v) DIST_FREE(v);                   /* a decoded value: one block */
        return;
    }
    if (v->type == DIST_VALUE_LIST) {
        for (size_t i = 0; i < v->u.list.n; i++) dist_value_free(v->u.list.items[i]);
        DIST_FREE(v->u.list.items);
    } else if (v->own & DIST_RPC__OWN_DATA) {
        if (v->type == DIST_VALUE_TENSOR) DIST_FREE(v->u.t.shape);
        else DIST_FREE(v->u.s.p);
    }
    if (v->own & DIST_RPC__OWN_NODE) DIST_FREE(v);
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
        if (!strchr("niIfsbtv*[", c)) return dist_rpc__fail(DIST_ERR_INVALID, "%s: unknown format character", what);
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

/* Writes (when `b` is not NULL and it fits in `cap`) the encoding of `v`
   at offset `off`; returns the offset after it.  Sizes are counted even
   past `cap`, so one pass both measures and writes. */
static size_t dist_rpc__encode(const dist_value_t *v, uint8_t *b, size_t cap, size_t off) {
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
        for (size_t i = 0; i < v->u.list.n; i++) off = dist_rpc__encode(v->u.list.items[i], b, cap, off);
        return off;
    case DIST_VALUE_TENSOR: {
        size_t head = 2 + 8 * (size_t)v->ndim + 1, pad;
        if (DIST_RPC__FITS(head)) {
            b[off] = v->dtype; b[off + 1] = v->ndim;
            for (int d = 0; d < v->ndim; d++) dist_rpc__put64(b + off + 2 + 8 * d, (uint64_t)v->u.t.shape[d]);
            b[off + head - 1] = DIST_RPC__WHERE_INLINE;
        }
        off += head;
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

DIST_API dist_result dist_value_encode(const dist_value_t *v, void *buf, size_t cap, size_t *len) {
    size_t n;
    if (!v || !len) return dist_rpc__fail(DIST_ERR_INVALID, "encode: NULL %s", v ? "length pointer" : "value");
    n = dist_rpc__encode(v, NULL, 0, 0);
    *len = n;
    if (n > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_INVALID, "encode: %zu bytes exceed the limit of %zu", n, (size_t)DIST_RPC_MAX_MESSAGE);
    if (n > cap || !buf) return dist_rpc__fail(DIST_ERR_TRUNCATED, "encode: the value needs %zu bytes, the buffer holds %zu", n, cap);
    dist_rpc__encode(v, (uint8_t *)buf, cap, 0);
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
    default: return dist_rpc__bad(d, "unknown value type %u at byte %zu", type, at);
    }
}

DIST_API dist_result dist_value_decode(const void *buf, size_t len, dist_value_t **out) {
    dist_rpc__decoder d;
    size_t nodes_sz, items_sz, shapes_sz, msg_off, total;
    uint8_t *block;
    if (!out) return dist_rpc__fail(DIST_ERR_INVALID, "decode: NULL result pointer");
    *out = NULL;
    if (len && !buf) return dist_rpc__fail(DIST_ERR_INVALID, "decode: NULL buffer of %zu bytes", len);
    if (len > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %zu bytes exceed the limit of %zu", len, (size_t)DIST_RPC_MAX_MESSAGE);
    memset(&d, 0, sizeof d);
    d.b = (const uint8_t *)buf; d.len = len;
    d.nodes = 1;
    if (dist_rpc__decode(&d, NULL, 0) != 0) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %s", d.why);
    if (d.off != len) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %zu bytes after the value (of %zu)", len - d.off, len);
    /* one block: nodes | item pointers | shapes | the message (8-aligned) */
    nodes_sz = d.nodes * sizeof(dist_value_t);
    items_sz = d.items * sizeof(dist_value_t *);
    shapes_sz = d.shapes * sizeof(int64_t) * DIST_RPC_MAX_DIMS;
    msg_off = (nodes_sz + items_sz + shapes_sz + 15) & ~(size_t)15;
    total = msg_off + len;
    block = (uint8_t *)DIST_MALLOC(total ? total : 1);
    if (!block) return dist_rpc__fail(DIST_ERR_NOMEM, "decode: out of memory for a value of %zu bytes", len);
    if (len) memcpy(block + msg_off, buf, len);
    d.b = block + msg_off; d.off = 0;
    d.node_pool = (dist_value_t *)block;
    d.item_pool = (dist_value_t **)(block + nodes_sz);
    d.shape_pool = (int64_t *)(block + nodes_sz + items_sz);
    d.nodes = 1; d.items = 0; d.shapes = 0;
    dist_rpc__decode(&d, d.node_pool, 0);      /* cannot fail: the same bytes passed above */
    d.node_pool[0].own = DIST_RPC__OWN_BLOCK;
    *out = d.node_pool;
    return DIST_OK;
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
