/* dist_rpc.h - v0.1.0 - torch.distributed.rpc for C: calls between named
   workers, futures, remote references, and the typed values they carry,
   on top of dist.h.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_RPC_IMPLEMENTATION
      #include "dist_rpc.h"
   in ONE C or C++ file (usually the one that defines DIST_IMPLEMENTATION
   too, before any other #include there, as dist.h asks; dist_rpc.h
   includes dist.h itself); include "dist_rpc.h" without the define
   everywhere else.  Link with -pthread -lm (the math library: tensors and
   optimizers; Windows: -lws2_32, see dist.h):
      cc -std=c11 -O2 prog.c -o prog -pthread -lm

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

QUICK START: TENSORS AND DISTRIBUTED AUTOGRAD
   dist_tensor_t is a float32 tensor (up to 4-D) with reverse-mode
   autograd: the ops of an MLP policy or classifier, backward, no_grad,
   SGD and Adam.  Across workers, parameters live on their owners; the
   forward pass sends tensors by RPC inside a context, and backward and the
   optimizer step reach every worker the pass touched (torch's
   dist_autograd and DistributedOptimizer):

      // on "ps": a layer's weights, and a handler that runs it
      w = dist_tensor_randn(2, (int64_t[]){16, 8}, 0.3f, seed);
      dist_tensor_set_requires_grad(w, 1);
      static dist_value_t *forward(dist_rpc_call_t *call, const dist_value_t *args) {
          dist_tensor_t *x = dist_tensor_from_value(dist_value_item(args, 0));
          dist_tensor_t *y = dist_tensor_tanh(...linear(x, w, NULL)...);
          ...return dist_value_from_tensor(y);           // (release x and y: the value holds y)
      }
      // "params" returns dist_rref_params(1, &w): the weights' RRefs

      // on the trainer
      dist_remote_optim_t *opt;                       // once, over the RRefs from "params"
      dist_remote_optim_sgd(n, params, 0.1f, 0.9f, 0.0f, &opt);
      int64_t ctx;
      dist_autograd_context_begin(&ctx);
      dist_rpc_sync("ps", "forward", dist_value_pack("[v]", dist_value_from_tensor(x)), &ret);
      dist_tensor_t *y = dist_tensor_from_value(ret);  // requires grad: linked to ps
      dist_tensor_t *loss = dist_tensor_cross_entropy(y, targets);
      dist_autograd_backward(ctx, loss);               // gradients land on ps, in the context
      dist_remote_optim_step(opt, ctx);                // ps updates w
      dist_autograd_context_end(ctx);

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
                             cannot ask for a huge allocation.  Besides, a
                             decoded value takes at most 32 times its
                             encoded size + 1 MiB (its tensors aside): a
                             list of a million nones is refused.
   DIST_RPC_MAX_THREADS      where: the implementation file.  Most handler
                             threads an agent runs, those lent to replace
                             handlers that wait on nested calls included
                             (default 64; at least num_threads).
   DIST_RPC_MAX_INFLIGHT     where: the implementation file.  Most calls
                             from a worker to one worker not answered yet
                             (default 1024); more wait (see calls).
   DIST_STATIC, DIST_MALLOC/DIST_FREE/DIST_REALLOC as in dist.h.

THREADS
   An agent runs two kinds of threads of its own:
   - the listener receives every message, each worker's in the order it
     sent them; one that waits for its tensors holds up only its sender's
     later messages, and fails alone (its caller gets the
     error) when their data stops for the world's timeout (DIST_TIMEOUT).
     Replies complete futures on the listener, and dist_future_then
     callbacks run there: keep them short, and never wait in one.
   - handler threads (num_threads, default 4) run the calls, in the order
     they came.  A handler that waits on a future (a nested call) lends its
     place: another handler thread takes the queue, so nested calls never
     deadlock and never run on a thread that holds the waiting handler's
     locks, no_grad or autograd context; up to DIST_RPC_MAX_THREADS in all.
     Each call starts with the thread's RPC and autograd state cleared and
     has it restored after.
   Any thread may call the API.  A value belongs to one thread at a time.
   Each thread has its own last error sentence (dist_rpc_error_message),
   no_grad depth and current autograd context.

LOGGING
   Lines go where dist.h's go (dist_log): the config's dist.logger, or
   stderr under DIST_DEBUG=info|detail (any other value fails
   dist_rpc_init with DIST_ERR_INIT, saying so), "[rank R] rpc: " first.
   info: the worker up (its name and rank, every worker's name and rank,
   how long init took), workers that joined, left or are gone, shutdown
   (how long; why it failed, at WARN); detail adds the agent's threads
   and the start of a shutdown.  Calls, replies and references log
   nothing below WARN.
*/
/* The implementation reaches the OS only through dist.h's platform layer
   (compiled here too when this file is implemented without dist.h's).
   Asked for before the first system header, POSIX gives it a monotonic
   clock; in a file that included a system header first it still builds
   (under -std=c11 on C11's calendar clock).  A file that implements
   dist.h too follows dist.h's rule: dist_rpc.h (or dist.h) before any
   system header. */
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
    int num_threads;         /* handler threads running calls at once; 0: 4.
                                One that waits on a nested call lends its
                                place to another thread (DIST_RPC_MAX_THREADS
                                in all)                                     */
    int timeout_ms;          /* default timeout of a call; 0: 60 s; < 0:
                                none                                        */
    int dynamic;             /* 1: workers join and leave while the job
                                runs (see DYNAMIC WORKERS); every worker
                                the job starts with sets it alike.  A
                                newcomer (dist.join = 1 or DIST_JOINING=1)
                                is dynamic anyway                          */
} dist_rpc_config;

typedef struct dist_worker_info {
    char name[128];
    int rank;
} dist_worker_info;

#define DIST_RPC_DEFAULT_TIMEOUT 0      /* a call's timeout_ms: the agent's default */
#define DIST_RPC_NO_TIMEOUT     (-1)    /* a call's timeout_ms: wait as long as it takes */

DIST_API dist_result dist_rpc_init(const dist_rpc_config *cfg);
/* graceful: waits until every worker has called dist_rpc_shutdown and
   finished its outstanding calls, then leaves.  The wait for the others
   lasts as long as calls keep reaching this worker, and up to the default
   timeout after the last one (a worker that shuts down first and serves
   meanwhile stays as long as it is used); each later step is bounded by
   the default timeout.  A worker that died (or shut down not gracefully)
   is not waited for: the live ones wait for each other all the same,
   serving meanwhile, and then return DIST_ERR_PEER_LOST naming it (at
   once when it was rank 0 and hosted the store: the launcher can host it,
   dist_store_host_start).  Not graceful: fails what is outstanding and
   leaves at once.  In a dynamic job a worker leaves alone: see DYNAMIC
   WORKERS. */
DIST_API dist_result dist_rpc_shutdown(int graceful);
DIST_API dist_result dist_rpc_register(const char *name, dist_rpc_fn fn);
/* name NULL: this worker.  In a dynamic job, the worker of that name now;
   DIST_ERR_PEER_LOST, naming it, when it left or died and nobody took
   the name since. */
DIST_API dist_result dist_rpc_get_worker_info(const char *name, dist_worker_info *info);
/* The workers of the job (a dynamic job: those alive now). */
DIST_API int dist_rpc_world_size(void);
/* Up to `cap` of them into `out`, by rank; returns how many there are. */
DIST_API int dist_rpc_get_worker_infos(dist_worker_info *out, int cap);

/* DYNAMIC WORKERS
   With cfg.dynamic = 1 on every worker the job starts with, workers join
   and leave while it runs (torch.distributed.rpc without a world size):
   - Joining: a process started with dist.join = 1 (or DIST_JOINING=1,
     as distrun --max-restarts sets it for a restarted rank), the job's
     init method, run id and secret, calls dist_rpc_init.  The running
     agents admit it on their own (their listeners watch for newcomers and
     run dist_grow among themselves; their applications do nothing), and
     dist_rpc_init returns once it is a worker every other can call by
     name, and it them.  Its rank is a new one, never used before.
   - Names: a newcomer takes the name of a worker that left or died (a
     restarted observer comes back as "observer3"): it is a new
     incarnation, and everything that referred to the old one fails (see
     below).  A name held by a live worker is refused: that dist_rpc_init
     fails saying so.  NULL: "worker<rank>".
   - Leaving: dist_rpc_shutdown(1) on one worker is that worker leaving,
     not the job ending: it waits for its own calls' answers, lets go of
     the references it holds, tells every worker it leaves, serves every
     call they made before they heard, and goes.  The others go on.
   - Departed workers (left, or died: SIGKILL, a lost host): a call to one
     fails at once with DIST_ERR_PEER_LOST naming it (those pending when it
     died fail within the listener's sweep, 50 ms); an RRef it owned fails
     on use (to_here) naming it; the references it held to values owned
     elsewhere are let go of, so those values are freed when the rest let
     go; its name is free for a newcomer.
   - dist_rpc_world_size and dist_rpc_get_worker_infos count the workers
     alive now; poll them to learn of newcomers (an agent picking its
     observers each round).
   The store must outlive any worker that may die: host it in the
   launcher (distrun does; dist_store_host_start), not on rank 0. */

/* Calls `fn` on worker `to` with `args` (taken over, also on failure; NULL:
   none).  sync waits for the result (*ret, yours to free); async returns a
   future.  The _timeout forms take a per-call timeout (0: the default,
   DIST_RPC_NO_TIMEOUT: none).  Backpressure: at most DIST_RPC_MAX_INFLIGHT
   calls from this worker to one worker are unanswered at a time; a call
   past that waits (within its timeout) for an answer, so a loop of async
   calls runs at the callee's pace and neither side's memory grows with
   it.  (Calls from a then-callback, which runs on the listener, never
   wait: they may exceed the window.) */
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
#if defined(__MINGW32__) && !defined(__clang__)
    __attribute__((format(gnu_printf, 2, 3)))      /* (formatted by C99's printf: see dist.h) */
#elif defined(__GNUC__)
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

/* ---- Tensors and autograd ----
   A float32 tensor of 0 to 4 dimensions, row-major, reference counted:
   every function that returns one gives you a reference, released with
   dist_tensor_release (NULL is fine).  Operations build a graph when an
   input requires a gradient (and no_grad is off on this thread);
   dist_tensor_backward runs it in reverse and adds the gradients into the
   leaves that require one (dist_tensor_grad).  An operation returns NULL
   on bad shapes or out of memory, with a sentence in
   dist_rpc_error_message; passing NULL in gives NULL out, so a chain of
   operations needs one check at its end.  A tensor is for one thread at a
   time (a reference may cross threads). */
typedef struct dist_tensor dist_tensor_t;
#define DIST_TENSOR_MAX_DIMS 4

/* data NULL: zeros.  Copied. */
DIST_API dist_tensor_t *dist_tensor_new(int ndim, const int64_t *shape, const float *data);
DIST_API dist_tensor_t *dist_tensor_full(int ndim, const int64_t *shape, float x);
DIST_API dist_tensor_t *dist_tensor_scalar(float x);
/* Normal(0, stddev) or uniform [lo, hi), from a seed (same seed, same tensor
   on every machine). */
DIST_API dist_tensor_t *dist_tensor_randn(int ndim, const int64_t *shape, float stddev, uint64_t seed);
DIST_API dist_tensor_t *dist_tensor_uniform(int ndim, const int64_t *shape, float lo, float hi, uint64_t seed);
DIST_API dist_tensor_t *dist_tensor_retain(dist_tensor_t *t);
DIST_API void dist_tensor_release(dist_tensor_t *t);
DIST_API int dist_tensor_ndim(const dist_tensor_t *t);
DIST_API int64_t dist_tensor_dim(const dist_tensor_t *t, int i);    /* i < 0 counts from the end */
DIST_API size_t dist_tensor_numel(const dist_tensor_t *t);
DIST_API float *dist_tensor_data(dist_tensor_t *t);                  /* numel floats, row-major */
DIST_API float dist_tensor_item(const dist_tensor_t *t);             /* element 0 (a loss) */
/* A leaf that requires a gradient (a parameter). */
DIST_API void dist_tensor_set_requires_grad(dist_tensor_t *t, int on);
DIST_API int dist_tensor_requires_grad(const dist_tensor_t *t);
/* The gradient backward accumulated (borrowed; NULL before any). */
DIST_API dist_tensor_t *dist_tensor_grad(const dist_tensor_t *t);
DIST_API void dist_tensor_zero_grad(dist_tensor_t *t);
/* d(root)/d(leaf) for every leaf below `root`, added to the leaves'
   gradients.  root must hold one element (a loss) unless `grad` (its
   gradient, the shape of root) is given. */
DIST_API dist_result dist_tensor_backward(dist_tensor_t *root, const dist_tensor_t *grad);
/* A copy that is a leaf (no graph, no gradient). */
DIST_API dist_tensor_t *dist_tensor_detach(const dist_tensor_t *t);
/* Until the matching exit, this thread's operations build no graph. */
DIST_API void dist_no_grad_enter(void);
DIST_API void dist_no_grad_exit(void);

/* Elementwise, with broadcasting (numpy's rules: shapes aligned at the
   end, a dimension of 1 stretches): a [N,C] + a bias [C]. */
DIST_API dist_tensor_t *dist_tensor_add(dist_tensor_t *a, dist_tensor_t *b);
DIST_API dist_tensor_t *dist_tensor_sub(dist_tensor_t *a, dist_tensor_t *b);
DIST_API dist_tensor_t *dist_tensor_mul(dist_tensor_t *a, dist_tensor_t *b);
DIST_API dist_tensor_t *dist_tensor_div(dist_tensor_t *a, dist_tensor_t *b);
DIST_API dist_tensor_t *dist_tensor_neg(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_scale(dist_tensor_t *a, float s);
DIST_API dist_tensor_t *dist_tensor_relu(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_tanh(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_sigmoid(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_exp(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_log(dist_tensor_t *a);
/* [M,K] x [K,N]. */
DIST_API dist_tensor_t *dist_tensor_matmul(dist_tensor_t *a, dist_tensor_t *b);
/* Of every element: a 0-dimensional tensor. */
DIST_API dist_tensor_t *dist_tensor_sum(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_mean(dist_tensor_t *a);
/* Over the last dimension. */
DIST_API dist_tensor_t *dist_tensor_softmax(dist_tensor_t *a);
DIST_API dist_tensor_t *dist_tensor_log_softmax(dist_tensor_t *a);
/* Mean over the N rows of -logp[i, target[i]]; logp is [N,C]. */
DIST_API dist_tensor_t *dist_tensor_nll_loss(dist_tensor_t *logp, const int64_t *target);
/* nll_loss(log_softmax(logits), target). */
DIST_API dist_tensor_t *dist_tensor_cross_entropy(dist_tensor_t *logits, const int64_t *target);
/* Training: each element zeroed with probability p (from `seed`), the rest
   scaled by 1/(1-p); not training: `a` itself (another reference). */
DIST_API dist_tensor_t *dist_tensor_dropout(dist_tensor_t *a, float p, uint64_t seed, int training);
/* n tensors joined along dimension `dim` (< 0 counts from the end): cat
   along an existing one (the shapes equal but along it), stack along a new
   one (the shapes equal; the result has one more dimension, of n).  The
   gradient goes back to each: summing 800 saved log-probabilities is
   sum(stack(800, lp, 0)), not 800 adds deep. */
DIST_API dist_tensor_t *dist_tensor_cat(int n, dist_tensor_t *const *tensors, int dim);
DIST_API dist_tensor_t *dist_tensor_stack(int n, dist_tensor_t *const *tensors, int dim);
/* x [N,in], w [out,in], b [out] or NULL: x w^T + b (torch's nn.Linear). */
DIST_API dist_tensor_t *dist_tensor_linear(dist_tensor_t *x, dist_tensor_t *w, dist_tensor_t *b);

/* Local optimizers over n parameters (references kept). */
typedef struct dist_optim dist_optim_t;
DIST_API dist_optim_t *dist_optim_sgd(int n, dist_tensor_t *const *params, float lr, float momentum, float weight_decay);
DIST_API dist_optim_t *dist_optim_adam(int n, dist_tensor_t *const *params, float lr, float beta1, float beta2, float eps, float weight_decay);
/* One update from each parameter's gradient (a parameter without one is
   left alone). */
DIST_API dist_result dist_optim_step(dist_optim_t *o);
DIST_API void dist_optim_zero_grad(dist_optim_t *o);
/* The parameter lock.  Every optimizer step on this worker, a local
   dist_optim_step or one a remote distributed optimizer runs here, writes
   its parameters holding this worker's parameter lock for writing.  Code
   that reads parameters while a step may run on another thread (an RPC
   handler running a forward pass while trainers step: hogwild training)
   holds it for reading between these two; readers run together, a step
   waits for them and they for it.  Do not nest them, nor step inside. */
DIST_API void dist_params_read_enter(void);
DIST_API void dist_params_read_exit(void);
DIST_API void dist_optim_free(dist_optim_t *o);

/* Tensors as values: a float32 tensor value that holds a reference to `t`
   (no copy: it carries the data as they are when it is sent), and a new
   tensor (a leaf, copied) from a float32 or float64 tensor value of at
   most 4 dimensions (NULL and a sentence otherwise). */
DIST_API dist_value_t *dist_value_from_tensor(dist_tensor_t *t);
DIST_API dist_tensor_t *dist_tensor_from_value(const dist_value_t *v);
/* The tensor a value made by dist_value_from_tensor holds (borrowed, no
   copy), or NULL for any other value: on an owner, the parameter itself. */
DIST_API dist_tensor_t *dist_value_as_tensor(const dist_value_t *v);

/* ---- Distributed autograd ----
   A context (torch's dist_autograd.context) gathers what one forward and
   backward pass did across workers.  While a context is current on a
   thread, every RPC it makes carries the context's id; a tensor sent in
   it that requires a gradient (a dist_value_from_tensor of one) records a
   send here, and the receiver's dist_tensor_from_value of it is a tensor
   that requires a gradient, linked to that send.  Handlers run in the
   caller's context, so calls they make, and their results, are recorded
   too, as is a to_here.  dist_autograd_backward runs the graph below the
   loss, sends each received tensor's gradient back to its sender, which
   goes on from there, and so on across every worker the pass touched
   (torch's FAST mode); it returns when all are done.  Gradients add up
   in the context, per tensor, on the worker that holds the tensor (not
   in the tensors' own grad).  Ending a context frees it here and on every
   worker it touched. */

/* Begins a context, current on this thread until it ends (one at a time
   per thread); its id is unique across the workers. */
DIST_API dist_result dist_autograd_context_begin(int64_t *ctx_id);
/* Ends it here and (notices, without waiting) on every worker it touched. */
DIST_API dist_result dist_autograd_context_end(int64_t ctx_id);
/* The context current on this thread (in a handler: the caller's), or 0. */
DIST_API int64_t dist_autograd_current_context(void);
/* Makes `ctx_id` current on this thread (0: none), e.g. in a thread of
   your own that works for the pass. */
DIST_API void dist_autograd_set_context(int64_t ctx_id);
/* The contexts this worker holds (its own and those others reached it
   with). */
DIST_API int dist_autograd_num_contexts(void);
/* Backward from `loss` (one element) across the workers, within the
   agent's default timeout per hop.  A worker that died or failed on the
   way fails it, with a sentence naming the worker. */
DIST_API dist_result dist_autograd_backward(int64_t ctx_id, dist_tensor_t *loss);
/* ...with a timeout of its own for the whole pass (0: the agent's default
   per hop; DIST_RPC_NO_TIMEOUT: none): DIST_ERR_TIMEOUT when it runs out
   (the hops under way finish or fail on their own). */
DIST_API dist_result dist_autograd_backward_timeout(int64_t ctx_id, dist_tensor_t *loss, int timeout_ms);
/* The gradients context `ctx_id` accumulated on this worker for tensors
   [0, n): grads[i] a reference to release (the context's own, which a
   later backward adds to), or NULL when tensor i got none. */
DIST_API dist_result dist_autograd_get_gradients(int64_t ctx_id, int n, dist_tensor_t *const *tensors, dist_tensor_t **grads);
/* Every gradient the context accumulated on this worker (torch's dict):
   *count says how many there are; the first min(cap, *count) pairs are
   filled, tensors[i] and grads[i] each a reference to release (call it
   with cap 0 to size the arrays).  In the order the tensors first got
   one. */
DIST_API dist_result dist_autograd_get_all_gradients(int64_t ctx_id, int cap, dist_tensor_t **tensors, dist_tensor_t **grads, int *count);

/* ---- Distributed optimizer (dist_remote_optim_*) ----
   Over parameters that live on their owners (RRefs whose value is a
   dist_value_from_tensor): one local optimizer per owner, made there;
   step runs each with the gradients a context accumulated on that owner,
   all owners in parallel, and returns when all are done. */
typedef struct dist_remote_optim dist_remote_optim_t;
DIST_API dist_result dist_remote_optim_sgd(int n, dist_rref_t *const *params, float lr, float momentum, float weight_decay, dist_remote_optim_t **out);
DIST_API dist_result dist_remote_optim_adam(int n, dist_rref_t *const *params, float lr, float beta1, float beta2, float eps, float weight_decay,
                                          dist_remote_optim_t **out);
DIST_API dist_result dist_remote_optim_step(dist_remote_optim_t *o, int64_t ctx_id);
/* ...with a timeout of its own for each owner's step (as a call's). */
DIST_API dist_result dist_remote_optim_step_timeout(dist_remote_optim_t *o, int64_t ctx_id, int timeout_ms);
/* Frees it here and (notices) on the owners. */
DIST_API void dist_remote_optim_free(dist_remote_optim_t *o);
/* The names these had until 2026-11 (deprecated: "dist_dist_" stuttered). */
#define dist_dist_optim_t            dist_remote_optim_t
#define dist_dist_optim_sgd          dist_remote_optim_sgd
#define dist_dist_optim_adam         dist_remote_optim_adam
#define dist_dist_optim_step         dist_remote_optim_step
#define dist_dist_optim_step_timeout dist_remote_optim_step_timeout
#define dist_dist_optim_free         dist_remote_optim_free

/* ---- RRef helpers (the tutorials' idioms) ----
   Calls `fn` on r's owner with the arguments [r, args...] (args: a list,
   whose items follow r; another value, which follows it; or NULL): in the
   handler, item 0 is the owner's reference, dist_rref_local_value or
   dist_rref_local_tensor give the object (torch's _remote_method).  As
   with dist_rpc_sync, `ret` may be NULL (the result is dropped). */
DIST_API dist_result dist_rref_rpc_sync(dist_rref_t *r, const char *fn, dist_value_t *args, dist_value_t **ret);
DIST_API dist_result dist_rref_rpc_async(dist_rref_t *r, const char *fn, dist_value_t *args, dist_future_t **fut);
DIST_API dist_result dist_rref_remote(dist_rref_t *r, const char *fn, dist_value_t *args, dist_rref_t **out);
/* Owner only: the tensor r's value holds (dist_value_as_tensor), or NULL. */
DIST_API dist_tensor_t *dist_rref_local_tensor(dist_rref_t *r);
/* A list of new RRefs, owned here, one per parameter (each value a
   dist_value_from_tensor): a module's parameter RRefs, to return from a
   handler (torch's _parameter_rrefs).  NULL and a sentence on failure. */
DIST_API dist_value_t *dist_rref_params(int n, dist_tensor_t *const *params);

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
   [SECTION] RPC: design notes
   [SECTION] RPC: registry and agent state
   [SECTION] RPC: messages
   [SECTION] RPC: the listener's inbox
   [SECTION] RPC: threads
   [SECTION] RPC: dynamic workers
   [SECTION] RPC: init and shutdown
   [SECTION] RPC: calls and futures
   [SECTION] RPC: inside a handler
   [SECTION] RPC: remote references
   [SECTION] tensors and autograd
   [SECTION] distributed autograd
*/

/* [SECTION] configuration and errors */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <limits.h>
#include <math.h>

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
#if defined(__MINGW32__) && !defined(__clang__)
#  define DIST_RPC__PRINTF(a, b) __attribute__((format(gnu_printf, a, b)))
#elif defined(__GNUC__)
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

/* Room for `need` elements of `size` bytes in the array whose pointer is
   at `p` (any element type: read and written with memcpy, in C and C++),
   capacity *cap: 0, or -1 when out of memory (nothing changed). */
static int dist_rpc__reserve(void *p, int *cap, int need, size_t size) {
    void *old, *np;
    int c = *cap ? *cap : 4;
    if (need <= *cap) return 0;
    while (c < need) c *= 2;
    memcpy(&old, p, sizeof old);
    if (!(np = DIST_REALLOC(old, (size_t)c * size))) return -1;
    memcpy(p, &np, sizeof np);
    *cap = c;
    return 0;
}

/* [SECTION] values: nodes, building, reading
   A value is a tree of nodes.  A built value owns each node and its data;
   a decoded one is a single block (every node, the item arrays and a copy
   of the message) freed at once, so a decode costs one allocation and
   strings, bytes and inline tensors point into the message. */
enum { DIST_RPC__OWN_NODE = 1, DIST_RPC__OWN_DATA = 2, DIST_RPC__OWN_BLOCK = 4, DIST_RPC__OWN_RREFS = 8, DIST_RPC__OWN_PART = 16,
       DIST_RPC__OWN_MARKS = 32 };   /* (a decoded value's root: some of its tensors carry a mark) */
#define DIST_RPC__ERRLEN 400

/* An RRef's id, and a fork's (one user's reference): the worker that made
   it and that worker's counter. */
typedef struct { uint32_t rank; uint64_t id; } dist_rpc__id;

/* Values hold references; what that takes is defined with them ([SECTION]
   RPC: remote references). */
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
        struct {
            uint8_t *data; size_t nbytes; int64_t *shape; void (*release)(void *, void *); void *user;
            void *mark;   /* what a layer above noted of it on its way in (a plain allocation, freed with the value; see the layer hook) */
        } t;
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
    if (n && !p) { dist_rpc__fail(DIST_ERR_INVALID, "value: NULL %s pointer for %zu byte%s", dist_rpc__type_names[type], n, DIST__PLURAL(n)); return NULL; }
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
    if (ndim && !shape) return dist_rpc__fail(DIST_ERR_INVALID, "tensor: NULL shape for %d dimension%s", ndim, DIST__PLURAL(ndim)), -1;
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

/* A mark on tensor `t` of the decoded value `root` (a plain allocation the
   value frees): what a layer above notes of a tensor on its way in. */
static void dist_rpc__value_mark(dist_value_t *root, dist_value_t *t, void *mark) {
    DIST_FREE(t->u.t.mark);
    t->u.t.mark = mark;
    root->own |= DIST_RPC__OWN_MARKS;
}

static void dist_rpc__drop_marks(dist_value_t *v) {
    if (v->type == DIST_VALUE_LIST)
        for (size_t i = 0; i < v->u.list.n; i++) dist_rpc__drop_marks(v->u.list.items[i]);
    else if (v->type == DIST_VALUE_TENSOR) { DIST_FREE(v->u.t.mark); v->u.t.mark = NULL; }
}

DIST_API void dist_value_free(dist_value_t *v) {
    if (!v) return;
    if (v->own & DIST_RPC__OWN_BLOCK) {                  /* a decoded value: one block */
        if (v->own & DIST_RPC__OWN_RREFS) dist_rpc__drop_rrefs(v);
        if (v->own & DIST_RPC__OWN_MARKS) dist_rpc__drop_marks(v);
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
            return dist_rpc__fail(DIST_ERR_TYPE, "%s: the %s has only %zu item%s", what, depth ? "list" : "value", nitems, DIST__PLURAL(nitems));
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
#ifndef DIST_RPC_MAX_THREADS
#  define DIST_RPC_MAX_THREADS 64             /* handler threads in all (see the agent's threads) */
#endif
#ifndef DIST_RPC_MAX_INFLIGHT
#  define DIST_RPC_MAX_INFLIGHT 1024          /* calls from here to one worker not answered yet (see calls) */
#endif

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
    if (n > cap || !buf) return dist_rpc__fail(DIST_ERR_TRUNCATED, "encode: the value needs %zu byte%s, the buffer holds %zu", n, DIST__PLURAL(n), cap);
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
    if (n > d->len - d->off) return dist_rpc__bad(d, "%s at byte %zu needs %zu byte%s, with %zu left", what, d->off, n, DIST__PLURAL(n),
                                                   d->len - d->off);
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
        if (n > d->len - d->off) return dist_rpc__bad(d, "a list of %u item%s at byte %zu, with %zu byte%s left", n, DIST__PLURAL(n), at,
                                                       d->len - d->off, DIST__PLURAL(d->len - d->off));
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
/* The most a decoded value may take besides its tensors sent apart (whose
   size the value declares and the limits bound): a node is ~80 bytes (a
   tensor's shape 64 more), an item as small as 1 byte (none). */
#define DIST_RPC__DECODED_MAX(len) ((size_t)32 * (len) + ((size_t)1 << 20))

static dist_result dist_rpc__decode_value(const void *buf, size_t len, int world, dist_value_t **out, size_t *parts) {
    dist_rpc__decoder d;
    size_t nodes_sz, items_sz, shapes_sz, msg_off, parts_off, total;
    uint8_t *block;
    if (!out) return dist_rpc__fail(DIST_ERR_INVALID, "decode: NULL result pointer");
    *out = NULL;
    if (len && !buf) return dist_rpc__fail(DIST_ERR_INVALID, "decode: NULL buffer of %zu byte%s", len, DIST__PLURAL(len));
    if (len > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %zu bytes exceed the limit of %zu", len, (size_t)DIST_RPC_MAX_MESSAGE);
    memset(&d, 0, sizeof d);
    d.b = (const uint8_t *)buf; d.len = len; d.world = world;
    d.nodes = 1;
    if (dist_rpc__decode(&d, NULL, 0) != 0) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %s", d.why);
    if (d.off != len) return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: %zu byte%s after the value (of %zu)", len - d.off, DIST__PLURAL(len - d.off), len);
    /* one block: nodes | item pointers | shapes | the message (8-aligned)
       | room for the tensors that travel apart (64-aligned) */
    nodes_sz = d.nodes * sizeof(dist_value_t);
    items_sz = d.items * sizeof(dist_value_t *);
    shapes_sz = d.shapes * sizeof(int64_t) * DIST_RPC_MAX_DIMS;
    msg_off = (nodes_sz + items_sz + shapes_sz + 15) & ~(size_t)15;
    parts_off = (msg_off + len + 63) & ~(size_t)63;
    total = parts_off + d.part_bytes;
    if (parts_off > DIST_RPC__DECODED_MAX(len))
        return dist_rpc__fail(DIST_ERR_PROTOCOL, "decode: a value of %zu bytes with %zu items would take %zu bytes decoded (at most 32 x its size "
                              "+ 1 MiB: a message cannot ask for far more memory than it brings)", len, d.nodes, parts_off);
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
      1 remote(), 2 one-way notice; a request's or a reply's: 4 the body
      begins with an autograd context, see that section) | 2 name length u16 |
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
   Threads.  A listener thread receives everything (through its inbox: a
   message on its way in from each worker, see there): requests go to a queue
   served by `num_threads` handler threads, replies complete futures (and
   run their then-callbacks) on the listener.  Every 50 ms it also fails
   futures whose deadline passed and those waiting on a worker that is gone
   (dist_iprobe on a tag nobody sends says PEER_LOST once a peer died or
   left).  A call runs on a thread that holds nothing of another call's:
   a handler that waits on a future (a nested call: agent -> observer ->
   agent) does not run queued calls meanwhile (they would inherit its
   locks, its no_grad and autograd state); it lends its place to another
   handler thread, started if none is idle, so `num_threads` calls may
   still run and nested calls never starve, up to DIST_RPC_MAX_THREADS
   threads in all (then queued calls wait for a handler to finish, and
   the agent logs it once).  Each call starts with the thread's RPC and
   autograd state cleared (its caller's autograd context, no no_grad), and
   it is restored after.
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
#define DIST_RPC__FLAG_CONTEXT 4             /* a request's or a reply's: the body begins with the context layer's prefix (the layer hook) */
#define DIST_RPC__RESERVED "dist_rpc."       /* the agent's own functions */
#define DIST_RPC__BUCKETS 256
#define DIST_RPC__PEND_BUCKETS 4096

typedef struct { char *name; dist_rpc_fn fn; } dist_rpc__entry;
static dist__mutex dist_rpc__reg_lock = DIST__MUTEX_INITIALIZER;
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
    dist_future_t *next, *prev;      /* the pending list */
    dist_future_t *hnext;            /* ...and its index by id */
    int listed;                      /* on them */
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
    int64_t ctx;                     /* the caller's context (0: none; the layer hook): the handler's, and its result's */
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
    int64_t parked_ns;               /* a fetch came first and waits (since then) */
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
static dist__mutex dist_rpc__lock = DIST__MUTEX_INITIALIZER;
static dist__cond dist_rpc__cond;       /* futures settled, shutdown progress; waited on with timeouts, so
                                           made by dist__cond_init (its clock) at the first init */
static int dist_rpc__cond_made;
static dist__cond dist_rpc__qcond = DIST__COND_INITIALIZER;    /* a call was queued: one idle handler wakes */
static struct {
    int up, closing, stopping;       /* closing: no new calls; stopping: threads end */
    dist_t *world;
    int rank, size, timeout_ms, nthreads;
    char (*names)[128];
    uint64_t next_id;
    dist_future_t *pending;          /* calls made here, not answered yet, newest first */
    dist_future_t *pend_ix[DIST_RPC__PEND_BUCKETS];   /* ...by id */
    int npending;
    int *inflight;                   /* ...to each worker (at most DIST_RPC_MAX_INFLIGHT, see calls) */
    dist_rpc_call_t *q_head, *q_tail, *deferred;
    int active;                      /* handlers running a call */
    int blocked;                     /* ...of which waiting on a future: their places are lent */
    int threads, idle, max_threads;  /* handler threads started, waiting for a call, the most */
    int cap_told;                    /* the cap was logged */
    int draining;                    /* a graceful shutdown waits for the handlers */
    int leaving;                     /* ...has begun (fetches of unknown RRefs wait 1 s at most) */
    dist__thread listener, *pool;
    dist_rref_t *owned[DIST_RPC__BUCKETS], *users[DIST_RPC__BUCKETS];
    int nowned, nusers, nforks;      /* entries, user forks held here, forks of users held by our entries */
    char *gone;                      /* the listener's: workers found gone */
    struct dist_rpc__inq_s *inbox;   /* the listener's: each worker's messages on their way in */
    int probe_at;
    uint32_t next_part;              /* the next tag for a tensor sent apart (offset in the span) */
    int64_t heard_ns;                /* when the listener last got a message (atomic) */
    /* dynamic workers (DYNAMIC WORKERS, "RPC: dynamic workers" below) */
    int dynamic;
    int cap;                         /* room in the per-worker arrays: the world's capacity (dynamic), its size otherwise */
    dist_t *members;                 /* the live workers as a communicator: dist_grow's, the world at first (the listener's) */
    dist_t *first;                   /* a newcomer's: what dist_init gave it (destroying it ends its world) */
    unsigned char *wstate;           /* each rank: DIST_RPC__W_* (under the lock; size and names grow before it is set) */
    unsigned char *acked;            /* leaving: the workers that heard it (under the lock) */
    int left_out;                    /* leaving: every worker heard: a call that comes now is turned away */
    int64_t joins_at;                /* the listener's: when it last looked for newcomers */
} dist_rpc__g;

enum { DIST_RPC__W_LIVE = 0, DIST_RPC__W_LEFT = 1, DIST_RPC__W_GONE = 2, DIST_RPC__W_NONE = 3 };

static dist_result dist_rpc__call(int to, const char *fn, const char *label, dist_value_t *args, int timeout_ms, dist_rref_t *rr,
                                  dist_future_t **out);
static void dist_rpc__notify(int to, const char *fn, dist_value_t *args);
static void dist_rpc__staff_locked(void);
static dist_result dist_rpc__answer(dist_rpc_call_t *c, dist_result code, dist_value_t *res, const char *text, int borrowed);

static DIST_RPC__TLS int dist_rpc__in_pool;     /* this thread is a handler thread */
static DIST_RPC__TLS int dist_rpc__on_listener; /* ...the listener */
static DIST_RPC__TLS int64_t dist_rpc__ctx_cur;  /* the context current on this thread (0: none): travels with its calls (the layer hook) */
static DIST_RPC__TLS int dist_rpc__no_grad;     /* dist_no_grad_enter depth on this thread */

/* dist.h's clock; threads, locks and conditions are dist.h's platform
   layer too (dist__mutex, dist__cond, dist__thread): this file makes no
   system call of its own. */
static int64_t dist_rpc__now_ns(void) { return dist_time_ns(); }

/* Waits on the agent's condition until `deadline_ns` (0: at most 100 ms). */
static void dist_rpc__cond_wait(int64_t deadline_ns) {
    int64_t now = dist_rpc__now_ns(), until = deadline_ns ? deadline_ns : now + 100000000;
    if (until > now + 100000000) until = now + 100000000;
    dist__cond_wait_ms(&dist_rpc__cond, &dist_rpc__lock, until > now ? (int)((until - now + 999999) / 1000000) : 0);
}

DIST_API dist_result dist_rpc_register(const char *name, dist_rpc_fn fn) {
    size_t n = name ? strlen(name) : 0;
    if (!name || n == 0 || n > DIST_RPC__MAX_NAME || !fn)
        return dist_rpc__fail(DIST_ERR_INVALID, "register: %s", !fn ? "NULL function" : "a name of 1 to 255 characters is needed");
    if (strncmp(name, DIST_RPC__RESERVED, strlen(DIST_RPC__RESERVED)) == 0)
        return dist_rpc__fail(DIST_ERR_INVALID, "register '%s': names that begin with \"" DIST_RPC__RESERVED "\" are the agent's own", name);
    dist__mutex_lock(&dist_rpc__reg_lock);
    for (int i = 0; i < dist_rpc__nreg; i++)
        if (strcmp(dist_rpc__reg[i].name, name) == 0) { dist_rpc__reg[i].fn = fn; dist__mutex_unlock(&dist_rpc__reg_lock); return DIST_OK; }
    if (dist_rpc__nreg == dist_rpc__capreg) {
        int cap = dist_rpc__capreg ? 2 * dist_rpc__capreg : 16;
        dist_rpc__entry *r = (dist_rpc__entry *)DIST_REALLOC(dist_rpc__reg, sizeof *r * (size_t)cap);
        if (!r) { dist__mutex_unlock(&dist_rpc__reg_lock); return dist_rpc__fail(DIST_ERR_NOMEM, "register: out of memory"); }
        dist_rpc__reg = r; dist_rpc__capreg = cap;
    }
    dist_rpc__reg[dist_rpc__nreg].name = (char *)DIST_MALLOC(n + 1);
    if (!dist_rpc__reg[dist_rpc__nreg].name) { dist__mutex_unlock(&dist_rpc__reg_lock); return dist_rpc__fail(DIST_ERR_NOMEM, "register: out of memory"); }
    memcpy(dist_rpc__reg[dist_rpc__nreg].name, name, n + 1);
    dist_rpc__reg[dist_rpc__nreg++].fn = fn;
    dist__mutex_unlock(&dist_rpc__reg_lock);
    return DIST_OK;
}

static dist_value_t *dist_rpc__h_fetch(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_fork(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_accept(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_delete(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_leave(dist_rpc_call_t *c, const dist_value_t *args);
static dist_value_t *dist_rpc__h_left(dist_rpc_call_t *c, const dist_value_t *args);
static void dist_rpc__drop_tables(void);
static void dist_rpc__release_users(void);
static void dist_rpc__peer_gone(int rank, const char *why);

/* A function of the agent's own (reserved name): the quick ones run on the
   listener, in the order their messages came. */
typedef struct dist_rpc__builtin { const char *name; dist_rpc_fn fn; int on_listener; } dist_rpc__builtin;

/* The layer hook.  The layers above RPC join it only through these
   tables, and the RPC core names none of their functions:
   - every layer may bring functions of its own (reserved names);
   - one of them, the context layer (distributed autograd), also joins
     messages: the core carries a context id with each call (the calling
     thread's dist_rpc__ctx_cur, made the handler's while it runs, and its
     result's), and for a message sent in a context asks the layer to
     record the send (`sent`, undone by `unsent` when the send fails) and
     to write a prefix before the body (`prefix_len`, `prefix`); on the
     way in, the flag DIST_RPC__FLAG_CONTEXT says a prefix is there:
     `strip` reads it off (into a dist_rpc__ctxin), `received` applies it
     to the decoded value (it may note things in a tensor's `mark`).
   `clear` runs when the agent shuts down.  dist_rpc__layers, defined at
   the end of the file, is the wiring. */
typedef struct { int64_t ctx; uint64_t msg; uint32_t n; const uint8_t *ord; } dist_rpc__ctxin;
typedef struct dist_rpc__layer {
    const char *name;
    const dist_rpc__builtin *fns;
    size_t nfns;
    size_t (*prefix_len)(const dist_value_t *v);
    int (*sent)(int to, const dist_value_t *v, int64_t ctx, uint64_t *msg, size_t *plen);
    void (*prefix)(const dist_value_t *v, int64_t ctx, uint64_t msg, uint8_t *p, size_t plen);
    void (*unsent)(int64_t ctx, uint64_t msg);
    int (*strip)(const uint8_t **body, size_t *blen, int from, dist_rpc__ctxin *a);
    int (*received)(dist_value_t *v, int from, const dist_rpc__ctxin *a);
    void (*clear)(void);
} dist_rpc__layer;
static const dist_rpc__layer *const *dist_rpc__layers(void);   /* NULL-terminated; the context layer first */
static const dist_rpc__layer *dist_rpc__ctx_layer(void) { return dist_rpc__layers()[0]; }

/* The agent's own functions: the RRef protocol. */
static const dist_rpc__builtin dist_rpc__builtins[] = {
    { DIST_RPC__RESERVED "fetch", dist_rpc__h_fetch, 0 },
    { DIST_RPC__RESERVED "fork", dist_rpc__h_fork, 1 },
    { DIST_RPC__RESERVED "accept", dist_rpc__h_accept, 1 },
    { DIST_RPC__RESERVED "delete", dist_rpc__h_delete, 1 },
    { DIST_RPC__RESERVED "leave", dist_rpc__h_leave, 1 },
    { DIST_RPC__RESERVED "left", dist_rpc__h_left, 1 },
};

static dist_rpc_fn dist_rpc__lookup(const char *name, int *on_listener) {
    dist_rpc_fn fn = NULL;
    *on_listener = 0;
    for (size_t i = 0; i < sizeof dist_rpc__builtins / sizeof *dist_rpc__builtins; i++)
        if (strcmp(dist_rpc__builtins[i].name, name) == 0) { *on_listener = dist_rpc__builtins[i].on_listener; return dist_rpc__builtins[i].fn; }
    for (const dist_rpc__layer *const *l = dist_rpc__layers(); *l; l++)
        for (size_t i = 0; i < (*l)->nfns; i++)
            if (strcmp((*l)->fns[i].name, name) == 0) { *on_listener = (*l)->fns[i].on_listener; return (*l)->fns[i].fn; }
    dist__mutex_lock(&dist_rpc__reg_lock);
    for (int i = 0; i < dist_rpc__nreg && !fn; i++)
        if (strcmp(dist_rpc__reg[i].name, name) == 0) fn = dist_rpc__reg[i].fn;
    dist__mutex_unlock(&dist_rpc__reg_lock);
    return fn;
}

/* The workers so far (dynamic: grows as newcomers join; their names are
   written before it does). */
static int dist_rpc__size(void) { return DIST__LOAD_ACQ(&dist_rpc__g.size); }

static const char *dist_rpc__name_of(int rank) {
    return dist_rpc__g.names && rank >= 0 && rank < dist_rpc__size() ? dist_rpc__g.names[rank] : "?";
}

/* Dynamic: whether worker `to` is not one to call any more (it left, died,
   or never became a worker), with the sentence why.  Lock held. */
static int dist_rpc__departed_locked(int to, char *why, size_t cap) {
    int st;
    if (!dist_rpc__g.dynamic || !dist_rpc__g.wstate || to == dist_rpc__g.rank || to < 0 || to >= dist_rpc__size()) return 0;
    st = dist_rpc__g.wstate[to];
    if (st == DIST_RPC__W_LIVE) return 0;
    if (st == DIST_RPC__W_LEFT) snprintf(why, cap, "worker '%s' (rank %d) left the job", dist_rpc__name_of(to), to);
    else if (st == DIST_RPC__W_GONE) snprintf(why, cap, "worker '%s' (rank %d) is gone (it died or lost its connection)", dist_rpc__name_of(to), to);
    else snprintf(why, cap, "rank %d is not a worker of the job (a newcomer that did not become one)", to);
    return 1;
}

/* Dynamic: worker r's connection failed (a call to it found so): it is
   gone from now on, before the listener's sweep looks (which lets go of
   its references).  Lock held. */
static void dist_rpc__mark_gone_locked(int r) {
    if (!dist_rpc__g.dynamic || !dist_rpc__g.wstate || r == dist_rpc__g.rank || r < 0 || r >= dist_rpc__size()) return;
    if (dist_rpc__g.wstate[r] == DIST_RPC__W_LIVE) dist_rpc__g.wstate[r] = DIST_RPC__W_GONE;
}

/* Whether worker r's connection stands (a probe: nothing is sent); when
   not, the engine's sentence in `why` (may be NULL). */
static int dist_rpc__alive(int r, char *why, size_t cap) {
    int found = 0;
    dist_status st;
    if (r == dist_rpc__g.rank) return 1;
    if (dist_iprobe(dist_rpc__g.world, r, DIST_RPC__TAG_NEVER, &found, &st) != DIST_ERR_PEER_LOST) return 1;
    if (why) snprintf(why, cap, "%.300s", dist_error_message(NULL));
    return 0;
}

/* A line "rpc: ..." through the world's logger (the config's dist.logger,
   or stderr under DIST_DEBUG: see dist_log); nothing is formatted when
   that level is not written.  Never on a call's path below WARN. */
static void dist_rpc__log(dist_log_level level, const char *fmt, ...) DIST_RPC__PRINTF(2, 3);
static void dist_rpc__log(dist_log_level level, const char *fmt, ...) {
    char line[500];
    va_list ap;
    dist_t *w = dist_rpc__g.world;
    if (!dist_log_enabled(w, level)) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    dist_log(w, level, "rpc: %s", line);
}

/* [SECTION] RPC: messages */

static int dist_rpc__forks_make(dist_rpc__fork *f, size_t n, int to);
static void dist_rpc__forks_undo(dist_rpc__fork *f, size_t n);

/* Sends one message: the header, the name, then the body (an encoded
   value, or `text`).  Each reference in the value travels as a new fork
   for the receiver, made here and undone when the send fails; in a
   context the context layer records the send (undone likewise) and
   writes its prefix before the body (the layer hook).  The limits
   are checked before anything is made; one exit frees what was. */
static dist_result dist_rpc__send(int to, int kind, int flags, int32_t status, uint64_t id, const char *name, const dist_value_t *v,
                                  const char *text, int64_t ctx) {
    size_t nlen = name ? strlen(name) : 0, blen = 0, total, nr = v ? dist_rpc__collect_rrefs(v, NULL, 0) : 0, plen = 0;
    uint64_t agmsg = 0;
    size_t nparts = v ? dist_rpc__collect_apart(v, NULL, 0) : 0;
    const dist_rpc__layer *cl = dist_rpc__ctx_layer();
    dist_rpc__fork few[4], *fk = few;
    dist_rpc__forks forks;
    const dist_value_t *few_parts[4], **parts = few_parts;
    uint32_t tag0 = 0;
    uint8_t *b = NULL;
    dist_result r = DIST_OK;
    int forked = 0, ag = ctx && (kind == DIST_RPC__REQUEST || kind == DIST_RPC__REPLY);
    memset(&forks, 0, sizeof forks);
    if (v) blen = dist_rpc__encode(v, NULL, 0, 0, &forks);    /* its size (no error sentence made) */
    else if (text) blen = strlen(text);
    if (ag) blen += cl->prefix_len(v);                       /* the context layer's prefix */
    if (nparts > DIST_RPC__TAG_SPAN / 4) return dist_rpc__fail(DIST_ERR_INVALID, "rpc: a value with %zu large tensors (at most %d)", nparts, DIST_RPC__TAG_SPAN / 4);
    if (blen > DIST_RPC_MAX_MESSAGE) return dist_rpc__fail(DIST_ERR_INVALID, "rpc: a value of %zu bytes exceeds the limit of %zu", blen, (size_t)DIST_RPC_MAX_MESSAGE);
    if (blen > 0xffffffffu) return dist_rpc__fail(DIST_ERR_INVALID, "rpc: a message body of %zu bytes is too large", blen);
    total = DIST_RPC__HDR + nlen + blen;
    if (nparts > 4 && !(parts = (const dist_value_t **)DIST_MALLOC(nparts * sizeof *parts))) {
        parts = few_parts;
        r = dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for %zu tensor%s", nparts, DIST__PLURAL(nparts));
        goto done;
    }
    if (nr > 4 && !(fk = (dist_rpc__fork *)DIST_MALLOC(nr * sizeof *fk))) {
        fk = few;
        r = dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for %zu rref%s", nr, DIST__PLURAL(nr));
        goto done;
    }
    if (!(b = (uint8_t *)DIST_MALLOC(total))) { r = dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for a %zu-byte message", total); goto done; }
    if (ag) {                                                /* the send recorded in its context */
        if (cl->sent(to, v, ctx, &agmsg, &plen) != 0) { r = DIST_ERR_NOMEM; goto done; }
        flags |= DIST_RPC__FLAG_CONTEXT;
    }
    if (nr) {
        dist_rpc__collect_rrefs(v, fk, 0);
        if (dist_rpc__forks_make(fk, nr, to) != 0) { r = DIST_ERR_INVALID; goto done; }
        forked = 1;
    }
    if (nparts) {
        dist_rpc__collect_apart(v, parts, 0);
        dist__mutex_lock(&dist_rpc__lock);
        if (dist_rpc__g.next_part + nparts > DIST_RPC__TAG_SPAN) dist_rpc__g.next_part = 0;
        tag0 = DIST_RPC__TAG_PARTS + dist_rpc__g.next_part;
        dist_rpc__g.next_part += (uint32_t)nparts;
        dist__mutex_unlock(&dist_rpc__lock);
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
    if (plen) cl->prefix(v, ctx, agmsg, b + DIST_RPC__HDR + nlen, plen);
    if (v) dist_rpc__encode(v, b + DIST_RPC__HDR + nlen + plen, blen - plen, 0, &forks);
    else if (blen > plen) memcpy(b + DIST_RPC__HDR + nlen + plen, text, blen - plen);
    r = dist_send(dist_rpc__g.world, b, total, DIST_UINT8, to, DIST_RPC__TAG);
    if (r != DIST_OK) {
        dist_rpc__fail(r, "rpc: sending to worker '%s' (rank %d): %s", dist_rpc__name_of(to), to, dist_error_message(NULL));
        goto done;
    }
    /* the large tensors, each from its own memory, in chunks, up to 16 on
       their way at once.  Synchronous sends: a chunk waits for the receive
       the receiver posts once it has read the message, and lands in place
       (an eager one that came first would be copied twice). */
    {
        dist_req_t *win[16];
        size_t nwin = 0, k = 0, off = 0, bytes = 0;
        while (r == DIST_OK && (k < nparts || nwin)) {
            if (k < nparts && off >= parts[k]->u.t.nbytes) { k++; off = 0; continue; }
            if (k < nparts && nwin < 16) {
                size_t n = parts[k]->u.t.nbytes - off < DIST_RPC__CHUNK ? parts[k]->u.t.nbytes - off : DIST_RPC__CHUNK;
                bytes = parts[k]->u.t.nbytes;
                r = dist_issend(dist_rpc__g.world, parts[k]->u.t.data + off, n, DIST_UINT8, to, (int)(tag0 + k), &win[nwin]);
                if (r == DIST_OK) nwin++;
                off += n;
                continue;
            }
            r = dist_wait_all((int)nwin, win);
            nwin = 0;
        }
        if (nwin) dist_wait_all((int)nwin, win);
        if (r != DIST_OK)
            dist_rpc__fail(r, "rpc: sending a tensor of %zu byte%s to worker '%s' (rank %d): %s", bytes, DIST__PLURAL(bytes), dist_rpc__name_of(to), to,
                           dist_error_message(NULL));
    }
    forked = 0;                          /* the message went: its forks are the receiver's (a part that fails fails the call there too) */
    agmsg = 0;
done:
    if (forked) dist_rpc__forks_undo(fk, nr);
    if (agmsg) cl->unsent(ctx, agmsg);
    if (fk != few) DIST_FREE(fk);
    if (parts != few_parts) DIST_FREE(parts);
    DIST_FREE(b);
    return r;
}

/* The pending calls (agent lock held): a list, newest first, indexed by
   id; each counts against its callee's window. */
static void dist_rpc__pending_add_locked(dist_future_t *f) {
    dist_future_t **b = &dist_rpc__g.pend_ix[f->id & (DIST_RPC__PEND_BUCKETS - 1)];
    f->prev = NULL;
    f->next = dist_rpc__g.pending;
    if (f->next) f->next->prev = f;
    dist_rpc__g.pending = f;
    f->hnext = *b;
    *b = f;
    f->listed = 1;
    dist_rpc__g.npending++;
    dist_rpc__g.inflight[f->to]++;
}

static void dist_rpc__pending_del_locked(dist_future_t *f) {
    dist_future_t **b = &dist_rpc__g.pend_ix[f->id & (DIST_RPC__PEND_BUCKETS - 1)];
    if (f->prev) f->prev->next = f->next; else dist_rpc__g.pending = f->next;
    if (f->next) f->next->prev = f->prev;
    for (; *b; b = &(*b)->hnext)
        if (*b == f) { *b = f->hnext; break; }
    f->next = f->prev = f->hnext = NULL;
    f->listed = 0;
    dist_rpc__g.npending--;
    dist_rpc__g.inflight[f->to]--;
}

static dist_future_t *dist_rpc__pending_find_locked(uint64_t id, int to) {
    dist_future_t *f = dist_rpc__g.pend_ix[id & (DIST_RPC__PEND_BUCKETS - 1)];
    while (f && (f->id != id || f->to != to)) f = f->hnext;
    return f;
}

/* Completes a future (agent lock held): records the outcome, takes it off
   the pending list, wakes the waiters; returns its callbacks to run once
   the lock is released. */
static dist_rpc__cb *dist_rpc__complete_locked(dist_future_t *f, dist_result res, dist_value_t *value, const char *fmt, ...)
    DIST_RPC__PRINTF(4, 5);
static dist_rpc__cb *dist_rpc__complete_locked(dist_future_t *f, dist_result res, dist_value_t *value, const char *fmt, ...) {
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
    if (f->listed) dist_rpc__pending_del_locked(f);
    cbs = f->cbs;
    f->cbs = NULL;
    if (!cbs) f->settled = 1;            /* nothing to run first: waiters may go */
    dist__cond_broadcast(&dist_rpc__cond);
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
    dist__mutex_lock(&dist_rpc__lock);
    if (!f->settled) { f->settled = 1; dist__cond_broadcast(&dist_rpc__cond); }
    f = dist_rpc__future_unref_locked(f);
    dist__mutex_unlock(&dist_rpc__lock);
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

/* Posts the receives of the `n` tensors of `v` that travel apart (tags
   tag0..), every chunk at once into its place: 0, or -1 (why in `why`). */
static int dist_rpc__post_parts(dist_value_t *v, size_t n, int from, uint32_t tag0, dist_req_t ***out, size_t *nout, char *why, size_t cap) {
    dist_value_t **nodes;
    dist_req_t **reqs;
    size_t nreq = 0, chunks = 0;
    dist_result r = DIST_OK;
    *out = NULL; *nout = 0;
    if (tag0 < DIST_RPC__TAG_PARTS || tag0 - DIST_RPC__TAG_PARTS > DIST_RPC__TAG_SPAN - n) {
        snprintf(why, cap, "%zu tensor%s sent apart under tag %u, outside the span", n, DIST__PLURAL(n), tag0);
        return -1;
    }
    if (!(nodes = (dist_value_t **)DIST_MALLOC(n * sizeof *nodes))) { snprintf(why, cap, "out of memory"); return -1; }
    dist_rpc__part_nodes(v, nodes, 0);
    for (size_t k = 0; k < n; k++) chunks += (nodes[k]->u.t.nbytes + DIST_RPC__CHUNK - 1) / DIST_RPC__CHUNK;
    if (!(reqs = (dist_req_t **)DIST_MALLOC((chunks ? chunks : 1) * sizeof *reqs))) { DIST_FREE(nodes); snprintf(why, cap, "out of memory"); return -1; }
    for (size_t k = 0; k < n && r == DIST_OK; k++)
        for (size_t off = 0; off < nodes[k]->u.t.nbytes && r == DIST_OK; off += DIST_RPC__CHUNK) {
            size_t len = nodes[k]->u.t.nbytes - off < DIST_RPC__CHUNK ? nodes[k]->u.t.nbytes - off : DIST_RPC__CHUNK;
            r = dist_irecv(dist_rpc__g.world, nodes[k]->u.t.data + off, len, DIST_UINT8, from, (int)(tag0 + k), &reqs[nreq]);
            if (r == DIST_OK) nreq++;
        }
    DIST_FREE(nodes);
    *out = reqs; *nout = nreq;
    if (r != DIST_OK) { snprintf(why, cap, "receiving a tensor: %.300s", dist_error_message(NULL)); return -1; }
    return 0;
}

/* What a value brought along, once everything of its message is here:
   its context's prefix applied (`a`, by the context layer), its references
   taken in.  On failure the value is freed. */
static dist_result dist_rpc__take(dist_value_t **v, int from, const dist_rpc__ctxin *a) {
    if (a && a->ctx && dist_rpc__ctx_layer()->received(*v, from, a) != 0) {
        dist_value_free(*v);                 /* (before any reference is taken in) */
        *v = NULL;
        return dist_rpc__fail(DIST_ERR_PROTOCOL, "rpc: a malformed %s context from worker '%s' (rank %d)", dist_rpc__ctx_layer()->name,
                              dist_rpc__name_of(from), from);
    }
    dist_rpc__take_in(*v, from);
    return DIST_OK;
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


/* A message on its way in (the listener's inbox, see there). */
enum { DIST_RPC__IN_BODY = 1, DIST_RPC__IN_PARTS, DIST_RPC__IN_DROP };
typedef struct dist_rpc__in_s {
    struct dist_rpc__in_s *next;     /* its sender's queue (or the free list) */
    int state;                       /* DIST_RPC__IN_* */
    uint8_t *buf;                    /* the message (kept for the next one when small) */
    size_t cap, len;
    dist_req_t *body;                /* its receive (IN_BODY) */
    dist_rpc__msg m;                 /* its header, parsed (IN_PARTS) */
    dist_value_t *v;                 /* its value, decoded */
    dist_rpc__ctxin cx;               /* its context prefix (points into buf) */
    dist_req_t **parts;              /* the receives of its tensors sent apart */
    size_t nreq, ndone;
    dist_result code;                /* not DIST_OK: the message failed, `why` says how */
    char why[DIST_RPC__ERRLEN];
    int64_t start_ns, deadline_ns;
} dist_rpc__in;
/* A worker's messages on their way in, in the order it sent them. */
typedef struct dist_rpc__inq_s { dist_rpc__in *head, *tail; int n; size_t bytes; } dist_rpc__inq;
#define DIST_RPC__IN_DEPTH 16                     /* messages of one worker on their way in at most... */
#define DIST_RPC__IN_BYTES ((size_t)8 << 20)      /* ...and bytes, besides the first */

/* A reply (or an error) from `from`, all of it here (or failed: in->code). */
static void dist_rpc__on_reply(int from, dist_rpc__in *in) {
    dist_future_t *f;
    dist_value_t *v = in->v;
    dist_result dr = in->code;
    dist_rpc__cb *cbs;
    int kind = in->m.kind;
    uint64_t id = in->m.id;
    int32_t status = in->m.status;
    const uint8_t *body = in->m.body;
    size_t blen = in->m.blen;
    char why[DIST_RPC__ERRLEN] = "";
    in->v = NULL;
    if (kind == DIST_RPC__REPLY && dr != DIST_OK) snprintf(why, sizeof why, "%.300s", in->why);
    else if (kind == DIST_RPC__REPLY && (dr = dist_rpc__take(&v, from, &in->cx)) != DIST_OK) snprintf(why, sizeof why, "%.300s", dist_rpc__error);
    if (kind != DIST_RPC__REPLY) { dist_value_free(v); v = NULL; }
    dist__mutex_lock(&dist_rpc__lock);
    f = dist_rpc__pending_find_locked(id, from);
    if (!f) {                                       /* it timed out here, or a stranger's id */
        dist__mutex_unlock(&dist_rpc__lock);
        dist_value_free(v);
        return;
    }
    if (kind == DIST_RPC__REPLY && dr == DIST_OK)
        cbs = dist_rpc__complete_locked(f, DIST_OK, v, NULL);
    else if (kind == DIST_RPC__REPLY && in->code != DIST_OK)
        cbs = dist_rpc__complete_locked(f, in->code, NULL, "rpc '%s' to worker '%s' (rank %d): the result %s", f->fn, dist_rpc__name_of(from), from, why);
    else if (kind == DIST_RPC__REPLY)
        cbs = dist_rpc__complete_locked(f, DIST_ERR_PROTOCOL, NULL, "rpc '%s' to worker '%s' (rank %d): the result could not be decoded: %s",
                                        f->fn, dist_rpc__name_of(from), from, why);
    else {
        dist_result code = (status <= DIST_ERR_INVALID && status >= -1000 && status != 0) ? (dist_result)status : DIST_ERR_REMOTE;
        int n = (int)(blen > 300 ? 300 : blen);
        cbs = dist_rpc__complete_locked(f, code, NULL, "rpc '%s' on worker '%s' (rank %d) failed: %.*s", f->fn, dist_rpc__name_of(from), from,
                                        n, (const char *)body);
    }
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__finish(f, cbs);
}

static dist_rref_t *dist_rpc__owned_locked(dist_rpc__id rid, int create);
static void dist_rpc__table_add_locked(dist_rref_t *r);
static int dist_rpc__fork_add_locked(dist_rref_t *e, dist_rpc__id fid, int holder);
static void dist_rpc__fill(dist_rref_t *e, dist_result code, dist_value_t *v, const char *text, const char *fn);
static void dist_rpc__expire_fetches(int64_t cutoff, const char *why);
static void dist_rpc__run_call(dist_rpc_call_t *c);
static void dist_rpc__unpin(dist_rref_t *e);

/* A request: queued for a handler thread (run here when it is one of the
   agent's quick ones), or answered at once when it cannot run.  A
   remote()'s RRef is made (or found, when a message about it came first)
   before anything else from its caller is handled. */
static void dist_rpc__on_request(int from, dist_rpc__in *in) {
    int on_listener = 0, flags = in->m.flags;
    uint64_t id = in->m.id;
    const char *name = in->m.name;
    dist_rpc_fn fn = dist_rpc__lookup(name, &on_listener);
    dist_rpc_call_t *c = NULL;
    dist_value_t *args = in->v;
    dist_rref_t *e = NULL;
    dist_result code = DIST_OK;
    int64_t ctx = in->cx.ctx;
    char why[DIST_RPC__ERRLEN];
    in->v = NULL;
    if (flags & DIST_RPC__FLAG_REMOTE) {
        dist_rpc__id rid;
        rid.rank = (uint32_t)from; rid.id = id;
        dist__mutex_lock(&dist_rpc__lock);
        e = dist_rpc__owned_locked(rid, from != dist_rpc__g.rank);
        if (!e) code = dist_rpc__g.rank == from ? DIST_ERR_PROTOCOL : DIST_ERR_NOMEM;
        else if (e->remote_seen) code = DIST_ERR_PROTOCOL;
        else if (from != dist_rpc__g.rank && dist_rpc__fork_add_locked(e, rid, from) != 0) code = DIST_ERR_NOMEM;
        else { e->remote_seen = 1; e->pins++; }
        dist__mutex_unlock(&dist_rpc__lock);
        if (code != DIST_OK) {
            dist_value_free(args);
            dist_rpc__send(from, DIST_RPC__ERROR, 0, code, id, NULL, NULL, code == DIST_ERR_NOMEM ? "the owner ran out of memory" : "a remote() with an id already used", 0);
            return;
        }
    }
    if (in->code != DIST_OK) {
        dist_value_free(args);
        code = in->code;
        snprintf(why, sizeof why, "its arguments %.300s", in->why);
    } else if (dist_rpc__take(&args, from, &in->cx) != DIST_OK) {
        code = DIST_ERR_PROTOCOL;
        snprintf(why, sizeof why, "its arguments could not be decoded: %.300s", dist_rpc__error);
    } else if (DIST__LOAD_ACQ(&dist_rpc__g.left_out) && !(flags & DIST_RPC__FLAG_ONEWAY) && !on_listener) {
        dist_value_free(args);                          /* (one that had not heard this worker leave) */
        code = DIST_ERR_PEER_LOST;
        snprintf(why, sizeof why, "worker '%s' (rank %d) left the job", dist_rpc__name_of(dist_rpc__g.rank), dist_rpc__g.rank);
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
        dist_rpc__send(from, DIST_RPC__ERROR, 0, code, id, NULL, NULL, why, 0);
        return;
    }
    memset(c, 0, sizeof *c);
    c->from = from; c->id = id; c->fn = fn; c->args = args; c->rref = e; c->refs = 1;
    c->oneway = (flags & DIST_RPC__FLAG_ONEWAY) != 0;
    c->ctx = ctx;
    snprintf(c->fn_name, sizeof c->fn_name, "%s", name);
    if (on_listener) { dist_rpc__run_call(c); return; }
    dist__mutex_lock(&dist_rpc__lock);
    if (dist_rpc__g.q_tail) dist_rpc__g.q_tail->next = c; else dist_rpc__g.q_head = c;
    dist_rpc__g.q_tail = c;
    dist_rpc__staff_locked();
    dist__mutex_unlock(&dist_rpc__lock);
}

static int dist_rpc__parse(const uint8_t *b, size_t n, dist_rpc__msg *m) {
    size_t nlen, blen;
    memset(m, 0, sizeof *m);
    if (n < DIST_RPC__HDR) return 0;
    nlen = (size_t)b[2] | ((size_t)b[3] << 8);
    blen = dist_rpc__get32(b + 16);
    if ((b[1] & ~(DIST_RPC__FLAG_REMOTE | DIST_RPC__FLAG_ONEWAY | DIST_RPC__FLAG_CONTEXT)) ||
        (b[1] & (DIST_RPC__FLAG_REMOTE | DIST_RPC__FLAG_ONEWAY)) == (DIST_RPC__FLAG_REMOTE | DIST_RPC__FLAG_ONEWAY) ||
        ((b[1] & ~DIST_RPC__FLAG_CONTEXT) && b[0] != DIST_RPC__REQUEST) ||
        ((b[1] & DIST_RPC__FLAG_CONTEXT) && b[0] != DIST_RPC__REQUEST && b[0] != DIST_RPC__REPLY) || (dist_rpc__get32(b + 20) != 0 && dist_rpc__get32(b + 20) - DIST_RPC__TAG_PARTS >= DIST_RPC__TAG_SPAN) ||
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

/* [SECTION] RPC: the listener's inbox
   Each worker's messages on their way in wait in a queue of their own, in
   the order it sent them (at most DIST_RPC__IN_DEPTH, and
   DIST_RPC__IN_BYTES besides the first).  The listener posts a message's
   receive as soon as a probe sees it; once it is here, its header is
   checked, its value decoded and the receives of its tensors that travel
   apart posted (into the value); once they are done, and the messages
   before it handled, it is handled.  So a worker's messages are handled in
   its order, and a sender that stalls holds up only its own: the listener
   serves the others meanwhile, woken by their messages (a stalled sender's
   later ones are taken in, not left where the probe would keep seeing
   them).  A message whose data stops for the world's timeout fails alone:
   its receives are withdrawn (dist_wait_timeout), a request's caller gets
   the error, a reply's future fails.  Memory: what the queues hold, each
   message of the size its header declared, checked against
   DIST_RPC_MAX_MESSAGE before anything is allocated. */
static void dist_rpc__in_fail(dist_rpc__in *in, dist_result code, const char *fmt, ...) DIST_RPC__PRINTF(3, 4);
static void dist_rpc__in_fail(dist_rpc__in *in, dist_result code, const char *fmt, ...) {
    va_list ap;
    if (in->code != DIST_OK) return;                 /* the first failure is the cause */
    in->code = code;
    va_start(ap, fmt);
    vsnprintf(in->why, sizeof in->why, fmt, ap);
    va_end(ap);
}

/* Takes a message nobody will read out of the engine: a receive of another
   size does not match it, and the engine drops it (an announced one is
   refused, so its sender stops waiting) and fails the receive at once. */
static void dist_rpc__discard(int from, const dist_status *st) {
    static uint8_t nothing[1];
    dist_req_t *r;
    if (dist_irecv(dist_rpc__g.world, nothing, st->nbytes == 1 ? 2 : 1, DIST_UINT8, from, DIST_RPC__TAG, &r) == DIST_OK)
        dist_wait_timeout(r, 0);
}

/* Whether worker `from`'s queue takes a message of `nbytes` more. */
static int dist_rpc__in_room(const dist_rpc__inq *q, size_t nbytes) {
    return q->n == 0 || (q->n < DIST_RPC__IN_DEPTH && q->bytes + nbytes <= DIST_RPC__IN_BYTES);
}

/* A probe saw a message from `from` (its queue has room): its receive,
   posted into an entry from the free list `*spare`. */
static void dist_rpc__in_start(dist_rpc__inq *q, dist_rpc__in **spare, int *nspare, int from, const dist_status *st) {
    size_t most = DIST_RPC__HDR + DIST_RPC__MAX_NAME + DIST_RPC_MAX_MESSAGE;
    dist_rpc__in *in = *spare;
    if (st->nbytes < DIST_RPC__HDR || st->nbytes > most || st->dtype != DIST_UINT8) {
        dist_rpc__discard(from, st);                 /* no message of ours: its sender checks these limits */
        return;
    }
    if (in) { *spare = in->next; (*nspare)--; }
    else if ((in = (dist_rpc__in *)DIST_MALLOC(sizeof *in)) != NULL) memset(in, 0, sizeof *in);
    else { dist_rpc__discard(from, st); return; }    /* out of memory: its caller learns by its timeout */
    if (st->nbytes > in->cap) {
        uint8_t *nb = (uint8_t *)DIST_MALLOC(st->nbytes);
        if (!nb) { in->next = *spare; *spare = in; (*nspare)++; dist_rpc__discard(from, st); return; }
        DIST_FREE(in->buf);
        in->buf = nb; in->cap = st->nbytes;
    }
    in->len = st->nbytes;
    if (dist_irecv(dist_rpc__g.world, in->buf, in->len, DIST_UINT8, from, DIST_RPC__TAG, &in->body) != DIST_OK) {
        in->next = *spare; *spare = in; (*nspare)++;
        return;
    }
    in->state = DIST_RPC__IN_BODY;
    in->code = DIST_OK;
    in->why[0] = 0;
    in->v = NULL;
    in->parts = NULL; in->nreq = in->ndone = 0;
    memset(&in->cx, 0, sizeof in->cx);
    in->start_ns = dist_rpc__now_ns();
    in->deadline_ns = in->start_ns + (int64_t)dist_timeout_ms(dist_rpc__g.world) * 1000000;
    in->next = NULL;
    if (q->tail) q->tail->next = in; else q->head = in;
    q->tail = in;
    if (q->n++) q->bytes += in->len;                 /* (the first one is not counted) */
}

/* The message is here: its header checked, its value decoded, the
   receives of its tensors posted.  0: go on; 1: drop it (malformed);
   2: the listener is asked to stop. */
static int dist_rpc__in_open(dist_rpc__in *in, int from) {
    const uint8_t *body;
    size_t blen, parts = 0;
    dist_result r;
    char why[DIST_RPC__ERRLEN];
    switch (dist_rpc__parse(in->buf, in->len, &in->m)) {
    case DIST_RPC__WAKE: return from == dist_rpc__g.rank ? 2 : 1;
    case DIST_RPC__REQUEST: case DIST_RPC__REPLY: break;
    case DIST_RPC__ERROR: return 0;                   /* its body is the error's text */
    default: return 1;
    }
    body = in->m.body; blen = in->m.blen;
    if ((in->m.flags & DIST_RPC__FLAG_CONTEXT) && dist_rpc__ctx_layer()->strip(&body, &blen, from, &in->cx) != 0) {
        memset(&in->cx, 0, sizeof in->cx);
        dist_rpc__in_fail(in, DIST_ERR_PROTOCOL, "came with a malformed %s context", dist_rpc__ctx_layer()->name);
        return 0;
    }
    if (blen == 0) {
        if (!(in->v = dist_value_none())) dist_rpc__in_fail(in, DIST_ERR_NOMEM, "could not be decoded: out of memory");
        return 0;
    }
    if ((r = dist_rpc__decode_value(body, blen, dist_rpc__g.size, &in->v, &parts)) != DIST_OK) {
        dist_rpc__in_fail(in, r, "could not be decoded: %.300s", dist_rpc__error);
        return 0;
    }
    if (parts && dist_rpc__post_parts(in->v, parts, from, in->m.tag0, &in->parts, &in->nreq, why, sizeof why) != 0)
        dist_rpc__in_fail(in, DIST_ERR_PROTOCOL, "could not be received: %s", why);
    return 0;
}

/* Withdraws what a message still waits for (at its deadline, or when the
   listener stops). */
static void dist_rpc__in_withdraw(dist_rpc__in *in) {
    if (in->state == DIST_RPC__IN_BODY && in->body) dist_wait_timeout(in->body, 0);
    in->body = NULL;
    for (; in->ndone < in->nreq; in->ndone++) dist_wait_timeout(in->parts[in->ndone], 0);
}

/* Moves a message on as far as it goes: 1 once it is complete (or failed,
   or dropped), 0 while it waits; 2 when the listener is asked to stop. */
static int dist_rpc__in_step(dist_rpc__in *in, int from, int64_t now) {
    int done = 0;
    if (in->state == DIST_RPC__IN_DROP) return 1;
    if (in->state == DIST_RPC__IN_BODY) {
        dist_result r = dist_test(in->body, &done);
        if (!done && r == DIST_OK) {
            if (now < in->deadline_ns) return 0;
            dist_rpc__in_withdraw(in);        /* half a message: its caller learns by its own timeout */
            in->state = DIST_RPC__IN_DROP;
            return 1;
        }
        r = dist_wait(in->body);
        in->body = NULL;
        if (r != DIST_OK) { in->state = DIST_RPC__IN_DROP; return 1; }   /* its sender is gone */
        DIST__STORE_RELAXED(&dist_rpc__g.heard_ns, now);
        in->state = DIST_RPC__IN_PARTS;
        switch (dist_rpc__in_open(in, from)) {
        case 0: break;
        case 1: in->state = DIST_RPC__IN_DROP; return 1;
        default: in->state = DIST_RPC__IN_DROP; return 2;
        }
    }
    while (in->ndone < in->nreq) {
        dist_result r = dist_test(in->parts[in->ndone], &done);
        if (!done && r == DIST_OK) break;
        r = dist_wait(in->parts[in->ndone]);
        in->parts[in->ndone++] = NULL;
        in->deadline_ns = now + (int64_t)dist_timeout_ms(dist_rpc__g.world) * 1000000;   /* it moves: the timeout is for a stall */
        if (r != DIST_OK) {
            dist_rpc__in_fail(in, r, "could not be received from worker '%s' (rank %d): %.300s", dist_rpc__name_of(from), from, dist_error_message(NULL));
            break;
        }
    }
    if (in->ndone < in->nreq && in->code == DIST_OK) {
        if (now < in->deadline_ns) return 0;
        dist_rpc__in_fail(in, DIST_ERR_TIMEOUT, "did not arrive: worker '%s' (rank %d) sent %zu of the %zu piece%s of its tensors, then "
                          "nothing for %.1f s", dist_rpc__name_of(from), from, in->ndone, in->nreq, DIST__PLURAL(in->nreq),
                          dist_timeout_ms(dist_rpc__g.world) / 1000.0);
    }
    dist_rpc__in_withdraw(in);
    if (in->code != DIST_OK) { dist_value_free(in->v); in->v = NULL; }   /* (before any reference in it is taken in) */
    return 1;
}

/* Puts a handled message's entry on the free list (a few kept, with their
   buffer when it is small). */
static void dist_rpc__in_recycle(dist_rpc__in *in, dist_rpc__in **spare, int *nspare) {
    dist_value_free(in->v);
    DIST_FREE(in->parts);
    in->v = NULL; in->parts = NULL; in->nreq = in->ndone = 0;
    in->state = 0;
    if (*nspare >= 64) { DIST_FREE(in->buf); DIST_FREE(in); return; }
    if (in->cap > ((size_t)64 << 10)) { DIST_FREE(in->buf); in->buf = NULL; in->cap = 0; }
    in->next = *spare;
    *spare = in;
    (*nspare)++;
}

/* Moves worker `from`'s messages on and handles those whose turn it is:
   1 when the listener is asked to stop. */
static int dist_rpc__in_poll(dist_rpc__inq *q, int from, int64_t now, dist_rpc__in **spare, int *nspare) {
    int stop = 0, head_done = 0;
    for (dist_rpc__in *in = q->head; in; in = in->next) {
        int k = dist_rpc__in_step(in, from, now);
        if (k == 2) stop = 1;
        if (in == q->head) head_done = k != 0;
    }
    while (q->head && head_done) {
        dist_rpc__in *in = q->head;
        if (!(q->head = in->next)) q->tail = NULL;
        if (--q->n && q->head) q->bytes -= q->head->len;   /* the next is the first now: not counted */
        if (in->state != DIST_RPC__IN_DROP) {
            if (in->m.kind == DIST_RPC__REQUEST) dist_rpc__on_request(from, in);
            else dist_rpc__on_reply(from, in);
        }
        dist_rpc__in_recycle(in, spare, nspare);
        head_done = q->head && dist_rpc__in_step(q->head, from, now) != 0;
    }
    return stop;
}

/* Fails the futures whose deadline passed, and those waiting on a worker
   that is gone (a probe on a tag nobody sends says so). */
static void dist_rpc__watch(void);
static void dist_rpc__sweep(void) {
    int64_t now = dist_rpc__now_ns();
    int gone_checked[64] = { 0 };
    for (;;) {
        dist_future_t *f, *hit = NULL;
        dist_rpc__cb *cbs = NULL;
        int to = -1;
        dist__mutex_lock(&dist_rpc__lock);
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
        dist__mutex_unlock(&dist_rpc__lock);
        if (hit) { dist_rpc__finish(hit, cbs); continue; }
        if (to < 0) break;
        {
            char why[DIST_RPC__ERRLEN];
            if (to < 64) gone_checked[to] = 1;
            if (dist_rpc__alive(to, why, sizeof why)) {
                if (to >= 64) break;          /* (large worlds: one peer per sweep) */
                continue;
            }
            for (;;) {                        /* every future waiting on that worker */
                dist__mutex_lock(&dist_rpc__lock);
                dist_rpc__mark_gone_locked(to);
                for (f = dist_rpc__g.pending; f && f->to != to; f = f->next) { }
                if (f) cbs = dist_rpc__complete_locked(f, DIST_ERR_PEER_LOST, NULL, "rpc '%s' to worker '%s' (rank %d): the worker is gone (%s)",
                                                       f->fn, dist_rpc__name_of(to), to, why);
                dist__mutex_unlock(&dist_rpc__lock);
                if (!f) break;
                dist_rpc__finish(f, cbs);
            }
        }
    }
    {   /* fetches of an RRef that no remote() made here within the agent's
           timeout, or within 1 s once this worker shuts down (their callers
           may be shutting down too, waiting for them before they say so) */
        char why[DIST_RPC__ERRLEN];
        int ms = dist_rpc__g.timeout_ms > 0 ? dist_rpc__g.timeout_ms : 60000, leaving;
        dist__mutex_lock(&dist_rpc__lock);
        leaving = dist_rpc__g.leaving;
        dist__mutex_unlock(&dist_rpc__lock);
        if (leaving && ms > 1000) ms = 1000;
        if (leaving)
            snprintf(why, sizeof why, "no remote() made this rref on worker '%s' before it shut down (an rref freed or never made)",
                     dist_rpc__name_of(dist_rpc__g.rank));
        else
            snprintf(why, sizeof why, "no remote() made this rref on worker '%s' within %.1f s (an rref freed or never made)",
                     dist_rpc__name_of(dist_rpc__g.rank), ms / 1000.0);
        dist_rpc__expire_fetches(now - (int64_t)ms * 1000000, why);
    }
    if (dist_rpc__g.dynamic) { dist_rpc__watch(); return; }
    /* Workers that hold or own references here, a few per sweep: the
       tables let go of those that are gone. */
    for (int k = 0; k < 8 && k < dist_rpc__g.size && dist_rpc__g.gone; k++) {
        int r = dist_rpc__g.probe_at++ % dist_rpc__g.size, any;
        char why[DIST_RPC__ERRLEN];
        dist__mutex_lock(&dist_rpc__lock);
        any = dist_rpc__g.nowned > 0 || dist_rpc__g.nusers > 0;
        dist__mutex_unlock(&dist_rpc__lock);
        if (!any) break;
        if (r == dist_rpc__g.rank || dist_rpc__g.gone[r]) continue;
        if (!dist_rpc__alive(r, why, sizeof why)) {
            dist_rpc__g.gone[r] = 1;
            dist_rpc__peer_gone(r, why);
        }
    }
}

/* [SECTION] RPC: threads */
/* The listener: takes in messages as a probe sees them, moves each
   worker's queue along (the inbox above), and sweeps for futures past
   their deadline.  When a round moved nothing it waits on the engine's
   event count (dist_wait_events), so a message's arrival and a piece of
   one completing wake it at once; at most 50 ms, for the sweep. */
static DIST__THREAD_RETURN dist_rpc__listen(void *arg) {
    dist_rpc__inq *inbox = dist_rpc__g.inbox;
    dist_rpc__in *spare = NULL;
    int64_t next_sweep = 0;
    int stop = 0, scan = 0, nspare = 0;
    (void)arg;
    dist_rpc__on_listener = 1;
    while (!stop) {
        uint64_t seen = dist_events(dist_rpc__g.world);
        dist_status st;
        dist_result r = DIST_OK;
        int found = 0, n = dist_rpc__g.size, busy = 0, taken = 0;
        int64_t now;
        /* the messages that arrived, a few a round */
        while (taken < 64 && (r = dist_iprobe(dist_rpc__g.world, DIST_ANY_SOURCE, DIST_RPC__TAG, &found, &st)) == DIST_OK && found) {
            if (!dist_rpc__in_room(&inbox[st.source], st.nbytes)) {
                /* from a worker whose queue is full: the others' */
                found = 0;
                for (int k = 0; k < n && !found; k++) {
                    int s = (scan + k) % n;
                    if (inbox[s].n < DIST_RPC__IN_DEPTH && dist_iprobe(dist_rpc__g.world, s, DIST_RPC__TAG, &found, &st) == DIST_OK && found &&
                        !dist_rpc__in_room(&inbox[s], st.nbytes))
                        found = 0;
                }
                scan = (scan + 1) % n;
                if (!found) break;
            }
            dist_rpc__in_start(&inbox[st.source], &spare, &nspare, st.source, &st);
            taken++;
        }
        now = dist_rpc__now_ns();
        for (int s = 0; s < n; s++) {
            if (!inbox[s].head) continue;
            if (dist_rpc__in_poll(&inbox[s], s, now, &spare, &nspare)) stop = 1;
            busy += inbox[s].head != NULL;
        }
        if (dist_rpc__now_ns() >= next_sweep) {
            dist_rpc__sweep();
            next_sweep = dist_rpc__now_ns() + 50000000;
        }
        dist__mutex_lock(&dist_rpc__lock);
        if (dist_rpc__g.stopping) stop = 1;
        else if (r != DIST_OK)                       /* every peer gone, or aborted: the sweep fails what waits */
            dist_rpc__cond_wait(dist_rpc__now_ns() + (busy ? 1000000 : 20000000));
        dist__mutex_unlock(&dist_rpc__lock);
        if (!stop && r == DIST_OK && taken < 64) dist_wait_events(dist_rpc__g.world, seen, 50);
    }
    for (int s = 0; s < dist_rpc__g.size; s++) {     /* what was on its way in */
        dist_rpc__inq *q = &inbox[s];
        while (q->head) {
            dist_rpc__in *in = q->head;
            q->head = in->next;
            dist_rpc__in_withdraw(in);
            dist_value_free(in->v);
            DIST_FREE(in->parts);
            DIST_FREE(in->buf);
            DIST_FREE(in);
        }
        memset(q, 0, sizeof *q);
    }
    while (spare) {
        dist_rpc__in *in = spare;
        spare = in->next;
        DIST_FREE(in->buf);
        DIST_FREE(in);
    }
    return DIST__THREAD_RETURN_VALUE;
}

static void dist_rpc__call_free(dist_rpc_call_t *c) {
    dist_value_free(c->args);
    DIST_FREE(c);
}

/* A deferred call is answered (perhaps on another thread, perhaps before
   its handler returns) and its handler returns: the last frees it. */
static void dist_rpc__call_unref(dist_rpc_call_t *c) {
    int last;
    dist__mutex_lock(&dist_rpc__lock);
    last = --c->refs == 0;
    dist__mutex_unlock(&dist_rpc__lock);
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
        if (code == DIST_OK) r = dist_rpc__send(c->from, DIST_RPC__REPLY, 0, 0, c->id, NULL, NULL, NULL, 0);
        else r = dist_rpc__send(c->from, DIST_RPC__ERROR, 0, code, c->id, NULL, NULL, text, 0);
        dist_rpc__unpin(e);
    } else if (c->oneway) {
        r = DIST_OK;
    } else if (code == DIST_OK) {
        r = dist_rpc__send(c->from, DIST_RPC__REPLY, 0, 0, c->id, NULL, res, NULL, c->ctx);   /* NULL: an empty body, none */
    } else {
        r = dist_rpc__send(c->from, DIST_RPC__ERROR, 0, code, c->id, NULL, NULL, text, 0);
    }
    if (!borrowed) dist_value_free(res);
    dist_rpc__call_unref(c);
    return r;
}

/* Runs one call on this thread and answers it, unless it was deferred. */
static void dist_rpc__run_call(dist_rpc_call_t *c) {
    int64_t outer = dist_rpc__ctx_cur;
    int outer_no_grad = dist_rpc__no_grad;
    dist_value_t *res;
    int deferred;
    dist_rpc__ctx_cur = c->ctx;                   /* the handler runs in its caller's autograd context */
    dist_rpc__no_grad = 0;
    res = c->fn(c, c->args);
    dist_rpc__ctx_cur = outer;
    dist_rpc__no_grad = outer_no_grad;
    dist__mutex_lock(&dist_rpc__lock);
    deferred = c->deferred;
    dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__run_call(c);
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__g.active--;
    if (dist_rpc__g.draining) dist__cond_broadcast(&dist_rpc__cond);
}

static DIST__THREAD_RETURN dist_rpc__handler_thread(void *arg) {
    (void)arg;
    dist_rpc__in_pool = 1;
    dist__mutex_lock(&dist_rpc__lock);
    while (!dist_rpc__g.stopping) {
        /* at most num_threads calls run at once (those waiting on a future not counted) */
        dist_rpc_call_t *c = dist_rpc__g.active - dist_rpc__g.blocked < dist_rpc__g.nthreads ? dist_rpc__pop_locked() : NULL;
        if (c) dist_rpc__run_unlocked(c);
        else {
            dist_rpc__g.idle++;
            dist__cond_wait(&dist_rpc__qcond, &dist_rpc__lock);
            dist_rpc__g.idle--;
        }
    }
    dist__mutex_unlock(&dist_rpc__lock);
    return DIST__THREAD_RETURN_VALUE;
}

/* A call is queued, or a handler began to wait on a future: if a place is
   free (fewer than num_threads calls running that do not wait), an idle
   handler takes the call, or a new one is started, up to
   DIST_RPC_MAX_THREADS (then the call waits for a handler to finish, and
   that is logged once).  Lock held. */
static void dist_rpc__staff_locked(void) {
    if (!dist_rpc__g.q_head || dist_rpc__g.stopping || dist_rpc__g.active - dist_rpc__g.blocked >= dist_rpc__g.nthreads) return;
    if (dist_rpc__g.idle > 0) { dist__cond_signal(&dist_rpc__qcond); return; }
    if (dist_rpc__g.threads < dist_rpc__g.max_threads &&
        dist__thread_start(&dist_rpc__g.pool[dist_rpc__g.threads], dist_rpc__handler_thread, NULL) == 0) {
        dist_rpc__g.threads++;
        return;
    }
    if (!dist_rpc__g.cap_told && dist_log_enabled(dist_rpc__g.world, DIST_LOG_WARN)) {
        dist_rpc__g.cap_told = 1;
        dist_rpc__log(DIST_LOG_WARN, "all %d handler threads are busy, %d of them waiting on nested calls: queued calls wait for one to finish "
                       "(DIST_RPC_MAX_THREADS)", dist_rpc__g.threads, dist_rpc__g.blocked);
    }
}

/* [SECTION] RPC: dynamic workers
   ---------------------------------------------------------------------------
   A dynamic job's workers are the ranks of the world communicator
   (dist_world): a rank is never reused, so a worker's rank is its
   incarnation, and calls and RRefs name the incarnation they meant.
   - Admission: each listener looks for newcomers every sweep
     (dist_joins_waiting, a store round trip); when there are, every live
     worker's listener calls dist_grow on `members` (the live workers as
     dist_grow and dist_shrink count them), which agrees on whom to admit
     and connects them.  The newcomers are the world's last ranks; each
     claims its name and publishes it ("dist_rpc/name/<rank>"), and the
     listeners read the names before the ranks count (size grows after).
   - Names: "dist_rpc/owner/<name>" holds the rank of the name's holder.
     A newcomer takes it with compare_set when the holder is gone (its
     connection from the newcomer's side failed or never formed: not a
     member of the grown communicator), so two newcomers never both get
     it; one whose holder is alive is refused and publishes "-".
   - State of each rank (wstate): live, left (it said so: "dist_rpc.leave",
     answered "dist_rpc.left"), gone (its connection failed, found by the
     listener's sweep), none (not a worker).  Calls to any but live fail at
     once; the sweep fails those pending on a gone one and lets go of the
     references it held (dist_rpc__peer_gone).
   - Leaving (dist_rpc_shutdown(1)): the worker's own calls finish, its
     user references are let go of (the owners hear before the notice,
     since messages between two workers keep their order), every live
     worker is told and answers (once it has, it makes no new call here:
     each call it made came before its answer), the calls that came are
     served, and a call from one that had not heard (a newcomer admitted
     meanwhile) is turned away. */
/* Reads the name rank r published ("dist_rpc/name/<r>": a flag, then the
   name; "-": a newcomer refused) into names[r], waiting until `deadline`
   while r is alive.  Returns its state. */
static int dist_rpc__learn(int r, int64_t deadline) {
    char key[64], v[130];
    size_t len = 0;
    snprintf(key, sizeof key, "dist_rpc/name/%d", r);
    for (;;) {
        const char *k = key;
        int exists = 0;
        if (dist_store_check(dist_rpc__g.world, &k, 1, &exists) == DIST_OK && exists &&
            dist_store_get(dist_rpc__g.world, key, v, sizeof v - 1, &len) == DIST_OK && len < sizeof v) {
            v[len] = 0;
            if (len < 2 || v[0] == '-') return DIST_RPC__W_NONE;
            v[sizeof dist_rpc__g.names[r]] = 0;            /* (a name has at most 127 characters) */
            memcpy(dist_rpc__g.names[r], v + 1, strlen(v + 1) + 1);
            return dist_rpc__alive(r, NULL, 0) ? DIST_RPC__W_LIVE : DIST_RPC__W_GONE;
        }
        if (!dist_rpc__alive(r, NULL, 0)) return DIST_RPC__W_GONE;
        if (dist_rpc__now_ns() >= deadline) return DIST_RPC__W_NONE;
        dist_store_wait(dist_rpc__g.world, &k, 1, 50);
    }
}

/* The ranks [from, to) become known: names, then the count, then states. */
static void dist_rpc__learn_range(int from, int to) {
    int64_t deadline = dist_rpc__now_ns() + (int64_t)(dist_rpc__g.timeout_ms > 0 ? dist_rpc__g.timeout_ms : 60000) * 1000000;
    unsigned char st[64];
    for (int r0 = from; r0 < to; r0 += 64) {
        int r1 = to - r0 > 64 ? r0 + 64 : to;
        for (int r = r0; r < r1; r++) st[r - r0] = (unsigned char)(r == dist_rpc__g.rank ? (int)DIST_RPC__W_LIVE : dist_rpc__learn(r, deadline));
        dist__mutex_lock(&dist_rpc__lock);
        for (int r = r0; r < r1; r++) dist_rpc__g.wstate[r] = st[r - r0];
        if (r1 > dist_rpc__g.size) DIST__STORE_REL(&dist_rpc__g.size, r1);
        dist__cond_broadcast(&dist_rpc__cond);
        dist__mutex_unlock(&dist_rpc__lock);
    }
}

/* The listener's: newcomers waiting are admitted (every live worker's
   listener does the same, and dist_grow agrees on whom). */
static void dist_rpc__admit(void) {
    dist_t *grown = NULL, *old = dist_rpc__g.members;
    int n0 = dist_rpc__size(), n1, k;
    dist_result r = dist_grow(old, 0, &grown);
    if (r != DIST_OK) {
        dist_rpc__log(DIST_LOG_WARN, "admitting newcomers (dist_grow) failed: %s", dist_error_message(old));
        return;
    }
    k = dist_newcomers(grown);
    n1 = dist_world_size(dist_rpc__g.world);
    dist_rpc__g.members = grown;
    if (old != dist_rpc__g.world && old != dist_rpc__g.first) dist_destroy(old);
    if (n1 > dist_rpc__g.cap) n1 = dist_rpc__g.cap;      /* (cannot be: dist_grow keeps to it) */
    if (k > 0 && n1 > n0) dist_rpc__learn_range(n0, n1);
    for (int r = n0; r < n1 && dist_log_enabled(dist_rpc__g.world, DIST_LOG_INFO); r++) {
        int st;
        dist__mutex_lock(&dist_rpc__lock);
        st = dist_rpc__g.wstate[r];
        dist__mutex_unlock(&dist_rpc__lock);
        if (st == DIST_RPC__W_LIVE) dist_rpc__log(DIST_LOG_INFO, "worker '%s' (rank %d) joined", dist_rpc__name_of(r), r);
    }
}

/* The listener's, each sweep: newcomers, and workers that went. */
static void dist_rpc__watch(void) {
    int n = dist_rpc__size(), waiting = 0;
    int64_t now = dist_rpc__now_ns();
    for (int r = 0; r < n; r++) {
        char why[DIST_RPC__ERRLEN];
        int worker;
        if (r == dist_rpc__g.rank || dist_rpc__g.gone[r]) continue;   /* (the listener's: let go of once) */
        dist__mutex_lock(&dist_rpc__lock);
        worker = dist_rpc__g.wstate[r] != DIST_RPC__W_NONE;    /* (gone too: a call may have found it first) */
        dist__mutex_unlock(&dist_rpc__lock);
        if (!worker || dist_rpc__alive(r, why, sizeof why)) continue;
        dist__mutex_lock(&dist_rpc__lock);
        if (dist_rpc__g.wstate[r] == DIST_RPC__W_LIVE) dist_rpc__g.wstate[r] = DIST_RPC__W_GONE;
        dist__cond_broadcast(&dist_rpc__cond);
        dist__mutex_unlock(&dist_rpc__lock);
        dist_rpc__g.gone[r] = 1;
        dist_rpc__peer_gone(r, why);
    }
    if (now - dist_rpc__g.joins_at < 50000000) return;
    dist_rpc__g.joins_at = now;
    if (dist_joins_waiting(dist_rpc__g.members, &waiting) == DIST_OK && waiting > 0) dist_rpc__admit();
}

static dist_value_t *dist_rpc__h_leave(dist_rpc_call_t *c, const dist_value_t *args) {
    (void)args;
    dist_rpc__log(DIST_LOG_INFO, "worker '%s' (rank %d) leaves the job", dist_rpc__name_of(c->from), c->from);
    dist__mutex_lock(&dist_rpc__lock);
    if (dist_rpc__g.wstate && c->from < dist_rpc__size() && dist_rpc__g.wstate[c->from] == DIST_RPC__W_LIVE)
        dist_rpc__g.wstate[c->from] = DIST_RPC__W_LEFT;
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__notify(c->from, DIST_RPC__RESERVED "left", dist_value_none());   /* no call of ours to it comes after this */
    return NULL;
}

static dist_value_t *dist_rpc__h_left(dist_rpc_call_t *c, const dist_value_t *args) {
    (void)args;
    dist__mutex_lock(&dist_rpc__lock);
    if (dist_rpc__g.acked && c->from < dist_rpc__size()) dist_rpc__g.acked[c->from] = 1;
    dist__cond_broadcast(&dist_rpc__cond);
    dist__mutex_unlock(&dist_rpc__lock);
    return NULL;
}

/* A newcomer's name: claimed (see above), published, and the others'
   learned. */
static dist_result dist_rpc__claim(const char *name) {
    char key[300], mine[16], v[32], pub[130], why[DIST_RPC__ERRLEN];
    size_t len = 0;
    int refused = -1;
    dist_result r;
    snprintf(key, sizeof key, "dist_rpc/owner/%s", name);
    snprintf(mine, sizeof mine, "%d", dist_rpc__g.rank);
    for (int tries = 0; tries < 100 && refused < 0; tries++) {
        const char *k = key;
        int exists = 0, holder;
        if ((r = dist_store_check(dist_rpc__g.world, &k, 1, &exists)) != DIST_OK) goto store;
        len = 0;
        if (exists && (r = dist_store_get(dist_rpc__g.world, key, v, sizeof v - 1, &len)) != DIST_OK) goto store;
        v[len < sizeof v ? len : sizeof v - 1] = 0;
        holder = exists ? atoi(v) : -1;
        if (holder >= 0 && holder != dist_rpc__g.rank && dist_rpc__alive(holder, NULL, 0)) { refused = holder; break; }
        if ((r = dist_store_compare_set(dist_rpc__g.world, key, v, exists ? len : 0, mine, strlen(mine), v, sizeof v - 1, &len)) != DIST_OK) goto store;
        v[len < sizeof v ? len : sizeof v - 1] = 0;
        if (strcmp(v, mine) == 0) break;                 /* ours (or another newcomer's: look again) */
    }
    snprintf(key, sizeof key, "dist_rpc/name/%d", dist_rpc__g.rank);
    snprintf(pub, sizeof pub, "%s%s", refused >= 0 ? "-" : "1", name);
    if ((r = dist_store_set(dist_rpc__g.world, key, pub, strlen(pub))) != DIST_OK) goto store;
    if (refused >= 0)
        return dist_rpc__fail(DIST_ERR_INIT, "rpc init (joining): the name '%s' belongs to a live worker (rank %d); a newcomer takes the "
                              "name of one that left or died, or a name of its own", name, refused);
    snprintf(dist_rpc__g.names[dist_rpc__g.rank], sizeof dist_rpc__g.names[0], "%s", name);
    dist_rpc__learn_range(0, dist_world_size(dist_rpc__g.world));
    return DIST_OK;
store:
    snprintf(why, sizeof why, "%.300s", dist_error_message(NULL));
    return dist_rpc__fail(r, "rpc init (joining): claiming the name '%s': %s", name, why);
}

/* Graceful leave (see above); the first failure's sentence in why. */
static void dist_rpc__leave(int64_t deadline, char *why, size_t cap) {
    int bound_s = (int)((deadline - dist_rpc__now_ns()) / 1000000000);
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__g.leaving = 1;
    while (dist_rpc__g.npending > 0 && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(deadline);
    if (dist_rpc__g.npending > 0 && !why[0])
        snprintf(why, cap, "%d call%s of this worker still outstanding after %d s", dist_rpc__g.npending,
                 DIST__PLURAL(dist_rpc__g.npending), bound_s);
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__release_users();
    dist__mutex_lock(&dist_rpc__lock);
    while (dist_rpc__g.nusers > 0 && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(deadline);
    if (dist_rpc__g.nusers > 0 && !why[0])
        snprintf(why, cap, "%d reference%s held here still unknown to their owners after %d s", dist_rpc__g.nusers,
                 DIST__PLURAL(dist_rpc__g.nusers), bound_s);
    dist__mutex_unlock(&dist_rpc__lock);
    for (;;) {                                           /* every live worker hears it (newcomers admitted meanwhile too) */
        int n = dist_rpc__size(), waiting = 0, to = -1;
        dist__mutex_lock(&dist_rpc__lock);
        for (int r = 0; r < n; r++) {
            /* (one that leaves too answers, but need not hear) */
            if (r == dist_rpc__g.rank || dist_rpc__g.wstate[r] != DIST_RPC__W_LIVE || dist_rpc__g.acked[r] == 1) continue;
            if (dist_rpc__g.acked[r] == 0 && to < 0) { to = r; dist_rpc__g.acked[r] = 2; }   /* told */
            waiting++;
        }
        if (to < 0 && waiting > 0 && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(dist_rpc__now_ns() + 20000000);
        dist__mutex_unlock(&dist_rpc__lock);
        if (to >= 0) { dist_rpc__notify(to, DIST_RPC__RESERVED "leave", dist_value_none()); continue; }
        if (!waiting) break;
        if (dist_rpc__now_ns() >= deadline) {
            if (!why[0]) snprintf(why, cap, "%d worker%s did not answer that this one leaves within %d s", waiting, DIST__PLURAL(waiting), bound_s);
            break;
        }
    }
    DIST__STORE_REL(&dist_rpc__g.left_out, 1);
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__g.draining = 1;
    while ((dist_rpc__g.q_head || dist_rpc__g.active || dist_rpc__g.deferred || dist_rpc__g.npending) && dist_rpc__now_ns() < deadline)
        dist_rpc__cond_wait(deadline);
    if ((dist_rpc__g.q_head || dist_rpc__g.active || dist_rpc__g.deferred) && !why[0])
        snprintf(why, cap, "calls made here before the others heard it leave were still running after %d s", bound_s);
    dist_rpc__g.closing = 1;
    dist__mutex_unlock(&dist_rpc__lock);
}

/* [SECTION] RPC: init and shutdown */
static void dist_rpc__stop_threads(void) {
    int started;
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__g.stopping = 1;                       /* no thread starts after this */
    started = dist_rpc__g.threads;
    dist__cond_broadcast(&dist_rpc__cond);
    dist__cond_broadcast(&dist_rpc__qcond);
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__send(dist_rpc__g.rank, DIST_RPC__WAKE, 0, 0, 0, NULL, NULL, NULL, 0);
    dist__thread_join(dist_rpc__g.listener);
    for (int i = 0; i < started; i++) dist__thread_join(dist_rpc__g.pool[i]);
}

/* Frees what is left once the threads are gone: queued and deferred calls,
   futures still pending (failed first, so their waiters return). */
static void dist_rpc__drain(const char *why) {
    for (;;) {
        dist_future_t *f;
        dist_rpc__cb *cbs;
        dist__mutex_lock(&dist_rpc__lock);
        f = dist_rpc__g.pending;
        if (f) cbs = dist_rpc__complete_locked(f, DIST_ERR_ABORTED, NULL, "rpc '%s' to worker '%s' (rank %d): %s", f->fn,
                                               dist_rpc__name_of(f->to), f->to, why);
        dist__mutex_unlock(&dist_rpc__lock);
        if (!f) break;
        dist_rpc__finish(f, cbs);
    }
    for (;;) {                       /* calls queued or deferred (freed without the lock: their values may hold references) */
        dist_rpc_call_t *c;
        dist__mutex_lock(&dist_rpc__lock);
        if ((c = dist_rpc__g.q_head)) dist_rpc__g.q_head = c->next;
        else if ((c = dist_rpc__g.deferred)) dist_rpc__g.deferred = c->next;
        else dist_rpc__g.q_tail = NULL;
        dist__mutex_unlock(&dist_rpc__lock);
        if (!c) break;
        dist_rpc__call_free(c);
    }
    dist_rpc__drop_tables();
    for (const dist_rpc__layer *const *l = dist_rpc__layers(); *l; l++)
        if ((*l)->clear) (*l)->clear();
}

static void dist_rpc__end_world(int graceful);
static void dist_rpc__free_arrays(void);

static void dist_rpc__teardown(int graceful_destroy) {
    dist_rpc__stop_threads();
    dist_rpc__drain("the agent was shut down");
    dist_rpc__end_world(graceful_destroy);
    dist_rpc__free_arrays();
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__g.up = 0; dist_rpc__g.left_out = 0; dist_rpc__g.dynamic = 0; dist_rpc__g.closing = 0; dist_rpc__g.stopping = 0; dist_rpc__g.draining = 0; dist_rpc__g.leaving = 0;
    dist__mutex_unlock(&dist_rpc__lock);
}

/* Publishes this worker's name and learns everyone's; names must be unique.
   Each is published as a flag ('1': the worker is dynamic, '0': not),
   then the name: a job's workers are all dynamic or none is. */
static dist_result dist_rpc__names(const char *mine) {
    char key[300], v[130];
    int n = dist_rpc__g.size;
    snprintf(key, sizeof key, "dist_rpc/name/%d", dist_rpc__g.rank);
    snprintf(v, sizeof v, "%c%s", dist_rpc__g.dynamic ? '1' : '0', mine);
    if (dist_store_set(dist_rpc__g.world, key, v, strlen(v)) != DIST_OK)
        return dist_rpc__fail(DIST_ERR_INIT, "rpc init: publishing the name: %s", dist_error_message(NULL));
    for (int r = 0; r < n; r++) {
        size_t len = 0;
        snprintf(key, sizeof key, "dist_rpc/name/%d", r);
        if (dist_store_get(dist_rpc__g.world, key, v, sizeof v - 1, &len) != DIST_OK || len > 128 || len < 2)
            return dist_rpc__fail(DIST_ERR_INIT, "rpc init: learning worker %d's name: %s", r, len > 128 || len < 2 ? "malformed" : dist_error_message(NULL));
        v[len] = 0;
        memcpy(dist_rpc__g.names[r], v + 1, len);
        if ((v[0] == '1') != (dist_rpc__g.dynamic != 0))
            return dist_rpc__fail(DIST_ERR_INIT, "rpc init: worker '%s' (rank %d) %s cfg.dynamic and this one (rank %d) %s; every worker a job "
                                  "starts with sets it alike", v + 1, r, v[0] == '1' ? "sets" : "does not set", dist_rpc__g.rank,
                                  dist_rpc__g.dynamic ? "does" : "does not");
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (strcmp(dist_rpc__g.names[a], dist_rpc__g.names[b]) == 0)
                return dist_rpc__fail(DIST_ERR_INIT, "rpc init: ranks %d and %d are both named '%s'; worker names must be unique", a, b,
                                      dist_rpc__g.names[a]);
    if (dist_rpc__g.dynamic) {                          /* the name's holder, for newcomers (dist_rpc__claim) */
        char r[16];
        snprintf(key, sizeof key, "dist_rpc/owner/%s", mine);
        snprintf(r, sizeof r, "%d", dist_rpc__g.rank);
        if (dist_store_set(dist_rpc__g.world, key, r, strlen(r)) != DIST_OK)
            return dist_rpc__fail(DIST_ERR_INIT, "rpc init: publishing the name: %s", dist_error_message(NULL));
    }
    return DIST_OK;
}

/* The agent's memory, each per-worker array with room for `cap` workers;
   NULL pointers are fine. */
static void dist_rpc__free_arrays(void) {
    DIST_FREE(dist_rpc__g.pool); DIST_FREE(dist_rpc__g.names); DIST_FREE(dist_rpc__g.gone); DIST_FREE(dist_rpc__g.inbox);
    DIST_FREE(dist_rpc__g.acked);
    dist_rpc__g.pool = NULL; dist_rpc__g.names = NULL; dist_rpc__g.gone = NULL; dist_rpc__g.inbox = NULL; dist_rpc__g.acked = NULL;
    dist__mutex_lock(&dist_rpc__lock);
    DIST_FREE(dist_rpc__g.inflight); DIST_FREE(dist_rpc__g.wstate);
    dist_rpc__g.inflight = NULL; dist_rpc__g.wstate = NULL;
    dist__mutex_unlock(&dist_rpc__lock);
}

static int dist_rpc__alloc_arrays(int cap, int live) {
    size_t n = (size_t)cap;
    dist_rpc__g.pool = (dist__thread *)DIST_MALLOC(sizeof(dist__thread) * (size_t)dist_rpc__g.max_threads);
    dist_rpc__g.names = (char (*)[128])DIST_MALLOC(sizeof *dist_rpc__g.names * n);
    dist_rpc__g.gone = (char *)DIST_MALLOC(n);
    dist_rpc__g.inbox = (dist_rpc__inq *)DIST_MALLOC(n * sizeof(dist_rpc__inq));
    dist_rpc__g.acked = (unsigned char *)DIST_MALLOC(n);
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__g.inflight = (int *)DIST_MALLOC(n * sizeof(int));
    dist_rpc__g.wstate = (unsigned char *)DIST_MALLOC(n);
    dist__mutex_unlock(&dist_rpc__lock);
    if (!dist_rpc__g.pool || !dist_rpc__g.names || !dist_rpc__g.gone || !dist_rpc__g.inbox || !dist_rpc__g.acked || !dist_rpc__g.inflight ||
        !dist_rpc__g.wstate)
        return -1;
    memset(dist_rpc__g.names, 0, sizeof *dist_rpc__g.names * n);
    memset(dist_rpc__g.gone, 0, n);
    memset(dist_rpc__g.inbox, 0, n * sizeof(dist_rpc__inq));
    memset(dist_rpc__g.acked, 0, n);
    memset(dist_rpc__g.inflight, 0, n * sizeof(int));
    for (int r = 0; r < cap; r++) dist_rpc__g.wstate[r] = r < live ? DIST_RPC__W_LIVE : DIST_RPC__W_NONE;
    return 0;
}

/* The INFO line of an agent that is up: its name and rank, and every
   worker's (the first few), the time init took. */
static void dist_rpc__log_up(const char *name, int joining, int64_t took_ns) {
    char list[300] = "";
    size_t len = 0;
    int n = dist_rpc__size(), shown = 0;
    for (int r = 0; r < n && len + 40 < sizeof list; r++, shown++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%.24s=%d", r ? ", " : "", dist_rpc__name_of(r), r);
    dist_rpc__log(DIST_LOG_INFO, "worker '%s' (rank %d) %s in %.2f s: %d worker%s: %s%s", name, dist_rpc__g.rank,
                  joining ? "joined a running job" : "is up", (double)took_ns / 1e9, n, DIST__PLURAL(n), list, shown < n ? ", ..." : "");
}

/* Ends this process's part of the job: the communicators the agent holds
   (a newcomer's first one last: destroying it ends its world). */
static void dist_rpc__end_world(int graceful) {
    dist_t *w = dist_rpc__g.world, *m = dist_rpc__g.members, *first = dist_rpc__g.first;
    if (!w) return;
    if (!graceful) dist_abort(w);
    if (m && m != w && m != first) dist_destroy(m);
    dist_destroy(first ? first : w);
    dist_rpc__g.world = dist_rpc__g.members = dist_rpc__g.first = NULL;
}

DIST_API dist_result dist_rpc_init(const dist_rpc_config *cfg) {
    dist_rpc_config c;
    char name[128];
    dist_result r;
    dist_t *got = NULL;
    int started = 0, joining;
    int64_t t0 = dist_rpc__now_ns();
    memset(&c, 0, sizeof c);
    if (cfg) c = *cfg;
    dist__mutex_lock(&dist_rpc__lock);
    r = dist_rpc__g.up ? DIST_ERR_INVALID : DIST_OK;
    if (r == DIST_OK) dist_rpc__g.up = 1;                /* claimed: a second init fails */
    if (r == DIST_OK && !dist_rpc__cond_made) { dist__cond_init(&dist_rpc__cond); dist_rpc__cond_made = 1; }
    dist__mutex_unlock(&dist_rpc__lock);
    if (r != DIST_OK) return dist_rpc__fail(r, "rpc init: this process already runs an agent (call dist_rpc_shutdown first)");
    if (c.name && (strlen(c.name) == 0 || strlen(c.name) > 127)) {
        dist_rpc__g.up = 0;
        return dist_rpc__fail(DIST_ERR_INVALID, "rpc init: a worker name has 1 to 127 characters");
    }
    if ((r = dist_init(&got, &c.dist)) != DIST_OK) {
        dist_rpc__g.up = 0;
        return dist_rpc__fail(r, "rpc init: %s", dist_error_message(NULL));
    }
    joining = dist_joined(got);
    dist_rpc__g.dynamic = c.dynamic || joining;
    dist_rpc__g.first = joining ? got : NULL;
    dist_rpc__g.world = dist_world(got);
    dist_rpc__g.members = got;
    dist_rpc__g.rank = dist_rank(dist_rpc__g.world);
    dist_rpc__g.size = dist_world_size(dist_rpc__g.world);
    dist_rpc__g.cap = dist_rpc__g.dynamic ? dist_world_capacity(dist_rpc__g.world) : dist_rpc__g.size;
    if (dist_rpc__g.cap < dist_rpc__g.size) dist_rpc__g.cap = dist_rpc__g.size;
    dist_rpc__g.timeout_ms = c.timeout_ms == 0 ? 60000 : c.timeout_ms;
    dist_rpc__g.nthreads = c.num_threads > 0 ? c.num_threads : 4;
    dist_rpc__g.next_id = 1;
    dist_rpc__g.max_threads = dist_rpc__g.nthreads > DIST_RPC_MAX_THREADS ? dist_rpc__g.nthreads : DIST_RPC_MAX_THREADS;
    dist_rpc__g.threads = dist_rpc__g.idle = dist_rpc__g.blocked = dist_rpc__g.cap_told = 0;
    dist_rpc__g.probe_at = 0;
    dist_rpc__g.left_out = 0;
    dist_rpc__g.joins_at = 0;
    if (c.name) snprintf(name, sizeof name, "%s", c.name);
    else snprintf(name, sizeof name, "worker%d", dist_rpc__g.rank);
    if (dist_rpc__alloc_arrays(dist_rpc__g.cap, joining ? 0 : dist_rpc__g.size) != 0) r = dist_rpc__fail(DIST_ERR_NOMEM, "rpc init: out of memory");
    else if (joining) {
        dist_rpc__g.size = 0;                            /* (it grows as the names are learned) */
        r = dist_rpc__claim(name);
    } else
        r = dist_rpc__names(name);
    if (r == DIST_OK && dist__thread_start(&dist_rpc__g.listener, dist_rpc__listen, NULL) != 0)
        r = dist_rpc__fail(DIST_ERR_SYSTEM, "rpc init: could not start the listener thread");
    if (r != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        snprintf(why, sizeof why, "%.300s", dist_rpc__error);
        dist_rpc__end_world(1);
        dist_rpc__free_arrays();
        dist_rpc__g.up = 0;
        return dist_rpc__fail(r, "%s", why);
    }
    /* under the lock: the listener may start one already (dist_rpc__staff_locked) */
    dist__mutex_lock(&dist_rpc__lock);
    while (dist_rpc__g.threads < dist_rpc__g.nthreads &&
           dist__thread_start(&dist_rpc__g.pool[dist_rpc__g.threads], dist_rpc__handler_thread, NULL) == 0)
        dist_rpc__g.threads++;
    started = dist_rpc__g.threads;
    dist__mutex_unlock(&dist_rpc__lock);
    if (started < dist_rpc__g.nthreads) {
        dist_rpc__teardown(0);
        return dist_rpc__fail(DIST_ERR_SYSTEM, "rpc init: could not start %d handler thread%s", c.num_threads, DIST__PLURAL(c.num_threads));
    }
    dist_rpc__log(DIST_LOG_DEBUG, "started the listener and %d handler thread%s (at most %d)", started, DIST__PLURAL(started),
                  dist_rpc__g.max_threads);
    if (dist_log_enabled(dist_rpc__g.world, DIST_LOG_INFO)) dist_rpc__log_up(name, joining, dist_rpc__now_ns() - t0);
    return DIST_OK;
}

/* A worker whose connection is gone (it died, or left without waiting for
   the others), its sentence in dist_rpc__error; -1 if none.  One that
   closed without a goodbye (died) comes before one that shut down: the
   first is the cause, the second (rank 0 and its store too) may only
   have given up because of it.  With `step`, one that came to that
   meeting point of the shutdown (below) did its part: not the cause. */
static int dist_rpc__came(const char *step, int r);
static int dist_rpc__gone_worker(const char *step) {
    int left = -1;
    char left_why[DIST_RPC__ERRLEN] = "";
    for (int r = 0; r < dist_rpc__g.size; r++) {
        char why[DIST_RPC__ERRLEN];
        if (dist_rpc__alive(r, why, sizeof why) || (step && dist_rpc__came(step, r))) continue;
        if (!strstr(why, "has shut down")) {
            dist_rpc__fail(DIST_ERR_PEER_LOST, "%s", why);
            return r;
        }
        if (left < 0) { left = r; memcpy(left_why, why, sizeof left_why); }
    }
    if (left >= 0) dist_rpc__fail(DIST_ERR_PEER_LOST, "%s", left_why);
    return left;
}

/* Graceful shutdown of a static job: no new calls from here; our calls
   finish; the workers meet (through the store) while each still serves;
   then our handlers finish and our references are let go of; the workers
   meet again; then everything stops.
   At a meeting point `step` each worker adds one to
   "dist_rpc/shutdown/<step>/count" and writes its key,
   "dist_rpc/shutdown/<step>/<rank>"; the one whose add made the count the
   world's size writes "dist_rpc/shutdown/<step>", the one key the others
   wait on.
   A worker that died never comes: once one is gone, the meeting is whole
   when every worker alive has written its key (a dead one's may be there
   or not).  Survivors may see a death at different times: the one that
   sees it first goes on to the next meeting point and waits there,
   serving, for one that has not seen it yet (which comes only after it
   passed this one); only the last point lets a worker go. */
#define DIST_RPC__MEET_KEYS 64           /* keys a store call takes at most (dist.h's) */

static void dist_rpc__meet_key(char *key, size_t cap, const char *step, int r) {
    if (r < 0) snprintf(key, cap, "dist_rpc/shutdown/%s", step);
    else snprintf(key, cap, "dist_rpc/shutdown/%s/%d", step, r);
}

/* Whether worker r wrote its key at `step` (a store failure: not). */
static int dist_rpc__came(const char *step, int r) {
    char key[64];
    const char *k = key;
    int exists = 0;
    dist_rpc__meet_key(key, sizeof key, step, r);
    return dist_store_check(dist_rpc__g.world, &k, 1, &exists) == DIST_OK && exists;
}

/* With a worker gone: 1 when every worker alive came to `step`; 0 when
   nobody is gone, or not all alive came (kp[0..*nkeys) then holds keys of
   those to wait for, some of them; none: wait for the meeting's own key);
   -1 when the store failed. */
static int dist_rpc__meet_rest(const char *step, char (*keys)[48], const char **kp, int *nkeys) {
    int n = dist_rpc__g.size, gone = 0, k = 0, all = 0;
    *nkeys = 0;
    for (int r = 0; r < n && !gone; r++) gone = !dist_rpc__alive(r, NULL, 0);
    if (!gone) return 0;
    for (int r = 0; r < n; r++) {
        if (dist_rpc__alive(r, NULL, 0)) {
            dist_rpc__meet_key(keys[k], sizeof keys[k], step, r);
            kp[k] = keys[k];
            k++;
        }
        if (k == DIST_RPC__MEET_KEYS || (k > 0 && r == n - 1)) {
            if (dist_store_check(dist_rpc__g.world, kp, k, &all) != DIST_OK) return -1;
            if (!all) { *nkeys = k; return 0; }
            k = 0;
        }
    }
    return 1;
}

/* Comes to meeting point `step` and waits until every worker is there or
   gone, up to `deadline`; with `extend`, up to `bound_ms` after the last
   message this worker heard if that is later (a worker that serves while
   it waits stays as long as it is used).  Returns 1 when the meeting took
   place (every worker came, or every one alive did: then the sentence
   names one that is gone without coming, DIST_ERR_PEER_LOST), 0 when not
   (the time ran out, the store failed: a sentence).  `what` is what the
   workers do to come ("call dist_rpc_shutdown").  A sentence already in
   why stays, and so does *code then. */
static int dist_rpc__meet(const char *step, const char *what, int64_t deadline, int bound_ms, int extend, char *why, size_t cap,
                          dist_result *code) {
    char all_key[64], count_key[80], keys[DIST_RPC__MEET_KEYS][48], store_why[150];
    const char *kp[DIST_RPC__MEET_KEYS], *ak = all_key;
    int n = dist_rpc__g.size, gone;
    int64_t arrived = 0;
    dist_rpc__meet_key(all_key, sizeof all_key, step, -1);
    snprintf(count_key, sizeof count_key, "%s/count", all_key);
    dist_rpc__meet_key(keys[0], sizeof keys[0], step, dist_rpc__g.rank);
    /* (counted first: the count is never below the keys there, and says
       how many came) */
    if (dist_store_add(dist_rpc__g.world, count_key, 1, &arrived) != DIST_OK || dist_store_set(dist_rpc__g.world, keys[0], "1", 1) != DIST_OK)
        goto store;
    if (arrived == n) dist_store_set(dist_rpc__g.world, all_key, "1", 1);
    for (;;) {
        int64_t now = dist_rpc__now_ns(), heard = DIST__LOAD_RELAXED(&dist_rpc__g.heard_ns);
        int64_t until = extend && heard + (int64_t)bound_ms * 1000000 > deadline ? heard + (int64_t)bound_ms * 1000000 : deadline;
        int all = 0, nk = 0, rest;
        dist_result w;
        if (dist_store_check(dist_rpc__g.world, &ak, 1, &all) != DIST_OK) goto store;
        if (all) return 1;
        if ((rest = dist_rpc__meet_rest(step, keys, kp, &nk)) < 0) goto store;
        if (rest > 0 || now >= until) {
            int64_t cur = arrived;
            dist_store_add(dist_rpc__g.world, count_key, 0, &cur);   /* how many did by now */
            if (rest > 0 && (cur >= n || (gone = dist_rpc__gone_worker(step)) < 0)) return 1;   /* (those gone came first) */
            if (why[0]) return rest > 0;
            if (rest > 0) {          /* it will never come: no use waiting for it */
                *code = DIST_ERR_PEER_LOST;
                snprintf(why, cap, "waiting for every worker to %s (%lld of %d did): worker '%s' (rank %d) is gone without doing so: %.250s", what,
                         (long long)cur, n, dist_rpc__name_of(gone), gone, dist_rpc__error);
                return 1;
            }
            *code = DIST_ERR_TIMEOUT;
            snprintf(why, cap, "waiting for every worker to %s: %lld of %d did within %.1f s%s", what, (long long)cur, n, bound_ms / 1000.0,
                     extend ? " of the last call here" : "");
            return 0;
        }
        w = dist_store_wait(dist_rpc__g.world, nk ? kp : &ak, nk ? nk : 1, until - now > 200000000 ? 200 : (int)((until - now) / 1000000) + 1);
        if (w != DIST_OK && w != DIST_ERR_TIMEOUT) goto store;
    }
store:
    snprintf(store_why, sizeof store_why, "%.140s", dist_error_message(NULL));
    if (!why[0] && (gone = dist_rpc__gone_worker(NULL)) >= 0) {   /* the store went with a worker that gave up on one: the cause */
        size_t l;
        *code = DIST_ERR_PEER_LOST;
        snprintf(why, cap, "worker '%s' (rank %d) is gone: %.250s", dist_rpc__name_of(gone), gone, dist_rpc__error);
        l = strlen(why);
        if (l + 40 < cap) snprintf(why + l, cap - l, " (and then the store: %s)", store_why);
    }
    if (!why[0]) snprintf(why, cap, "waiting for every worker to %s: %s", what, store_why);
    return 0;
}

DIST_API dist_result dist_rpc_shutdown(int graceful) {
    dist_result res = DIST_OK, why_code = DIST_ERR_TIMEOUT;
    char why[DIST_RPC__ERRLEN] = "";
    int64_t t0 = dist_rpc__now_ns();
    if (!dist_rpc__g.up || !dist_rpc__g.world) return dist_rpc__fail(DIST_ERR_INVALID, "rpc shutdown: no agent (dist_rpc_init first)");
    dist_rpc__log(DIST_LOG_DEBUG, "shutting down (%s)", !graceful ? "at once" : dist_rpc__g.dynamic ? "leaving the job" : "gracefully");
    if (graceful && dist_rpc__g.dynamic) {               /* this worker leaves; the job goes on */
        int bound = dist_rpc__g.timeout_ms > 0 ? dist_rpc__g.timeout_ms : 60000;
        dist_rpc__leave(dist_rpc__now_ns() + (int64_t)bound * 1000000, why, sizeof why);
        dist_rpc__log(why[0] ? DIST_LOG_WARN : DIST_LOG_INFO, "worker '%s' (rank %d) left the job in %.2f s%s%.300s",
                      dist_rpc__name_of(dist_rpc__g.rank), dist_rpc__g.rank, (double)(dist_rpc__now_ns() - t0) / 1e9, why[0] ? ": " : "", why);
        dist_rpc__teardown(1);
        return why[0] ? dist_rpc__fail(DIST_ERR_TIMEOUT, "rpc shutdown (leaving): %s", why) : DIST_OK;
    }
    if (!graceful) {
        dist__mutex_lock(&dist_rpc__lock);
        dist_rpc__g.closing = 1;
        dist__mutex_unlock(&dist_rpc__lock);
    } else {
        /* Calls stay open: handlers serving other workers may still make
           nested calls until everyone is done. */
        int bound = dist_rpc__g.timeout_ms > 0 ? dist_rpc__g.timeout_ms : 60000;
        int64_t deadline = dist_rpc__now_ns() + (int64_t)bound * 1000000;
        int together;                    /* every worker alive met here: the shutdown goes on with them */
        dist__mutex_lock(&dist_rpc__lock);
        dist_rpc__g.leaving = 1;
        while (dist_rpc__g.npending > 0 && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(deadline);
        if (dist_rpc__g.npending > 0)
            snprintf(why, sizeof why, "%d call%s of this worker still outstanding after %.1f s", dist_rpc__g.npending,
                     DIST__PLURAL(dist_rpc__g.npending), bound / 1000.0);
        dist__mutex_unlock(&dist_rpc__lock);
        /* A worker that shuts down first and serves the others meanwhile
           (observers, trainers' servers) waits as long as calls keep
           coming: the bound runs from the last message heard. */
        together = dist_rpc__meet("arrived", "call dist_rpc_shutdown", deadline, bound, 1, why, sizeof why, &why_code) &&
                   (!why[0] || why_code == DIST_ERR_PEER_LOST);
        /* the rest is bounded afresh from here (once all are here) */
        if (together && dist_rpc__now_ns() + (int64_t)bound * 1000000 > deadline) deadline = dist_rpc__now_ns() + (int64_t)bound * 1000000;
        if (together) {   /* every worker is here: a remote() that has not come will not */
            char ewhy[DIST_RPC__ERRLEN];
            snprintf(ewhy, sizeof ewhy, "no remote() made this rref on worker '%s' before it shut down (an rref freed or never made)",
                     dist_rpc__name_of(dist_rpc__g.rank));
            dist_rpc__expire_fetches(INT64_MAX, ewhy);
        }
        dist__mutex_lock(&dist_rpc__lock);
        dist_rpc__g.draining = 1;
        while ((dist_rpc__g.q_head || dist_rpc__g.active || dist_rpc__g.deferred || dist_rpc__g.npending) && dist_rpc__now_ns() < deadline)
            dist_rpc__cond_wait(deadline);
        dist__mutex_unlock(&dist_rpc__lock);
        /* References: the application's user forks are let go of here (its
           handles stay valid, detached); once every worker's owners have
           heard (the second meeting), no entry has a user left. */
        dist_rpc__release_users();
        dist__mutex_lock(&dist_rpc__lock);
        while ((dist_rpc__g.nusers > 0 || dist_rpc__g.npending > 0) && dist_rpc__now_ns() < deadline) dist_rpc__cond_wait(deadline);
        if (dist_rpc__g.nusers > 0) {
            if (!why[0])
                snprintf(why, sizeof why, "%d reference%s held here still unknown to their owners after %.1f s", dist_rpc__g.nusers,
                         DIST__PLURAL(dist_rpc__g.nusers), bound / 1000.0);
            together = 0;
        }
        dist__mutex_unlock(&dist_rpc__lock);
        if (together)                    /* (not all here: nobody to wait for) */
            dist_rpc__meet("released", "let go of its references", deadline, bound, 0, why, sizeof why, &why_code);
        dist__mutex_lock(&dist_rpc__lock);
        while ((dist_rpc__g.nforks > 0 || dist_rpc__g.q_head || dist_rpc__g.active || dist_rpc__g.npending) && dist_rpc__now_ns() < deadline)
            dist_rpc__cond_wait(deadline);
        if (dist_rpc__g.nforks > 0 && !why[0])
            snprintf(why, sizeof why, "%d reference%s to values owned here never let go of by their users", dist_rpc__g.nforks,
                     DIST__PLURAL(dist_rpc__g.nforks));
        dist_rpc__g.closing = 1;
        dist__mutex_unlock(&dist_rpc__lock);
    }
    /* after a failed graceful wait, the others are not leaving with us:
       waiting for their goodbyes would only last until they do */
    /* A worker that is gone: the others leave together without it, and
       their goodbyes tell them apart from it (a worker that closes without
       one is taken for the cause, dist_rpc__gone_worker). */
    dist_rpc__log(why[0] ? DIST_LOG_WARN : DIST_LOG_INFO, "worker '%s' (rank %d) shut down%s in %.2f s%s%.300s",
                  dist_rpc__name_of(dist_rpc__g.rank), dist_rpc__g.rank, graceful ? "" : " at once", (double)(dist_rpc__now_ns() - t0) / 1e9,
                  why[0] ? ": " : "", why);
    dist_rpc__teardown(graceful && (!why[0] || why_code == DIST_ERR_PEER_LOST));
    if (why[0]) res = dist_rpc__fail(why_code, "rpc shutdown: %s", why);
    return res;
}

DIST_API dist_result dist_rpc_get_worker_info(const char *name, dist_worker_info *info) {
    char why[200];
    int n = dist_rpc__size(), hit = -1, departed = 0;
    if (!info) return dist_rpc__fail(DIST_ERR_INVALID, "get_worker_info: NULL info");
    if (!dist_rpc__g.up || !dist_rpc__g.names) return dist_rpc__fail(DIST_ERR_INVALID, "get_worker_info: no agent (dist_rpc_init first)");
    if (!name) hit = dist_rpc__g.rank;
    /* the newest incarnation of the name (a dynamic job's names come back) */
    for (int r = n - 1; r >= 0 && hit < 0; r--)
        if (dist_rpc__g.names[r][0] && strcmp(dist_rpc__g.names[r], name) == 0) hit = r;
    if (hit < 0) return dist_rpc__fail(DIST_ERR_NOT_FOUND, "get_worker_info: no worker is named '%s'", name);
    dist__mutex_lock(&dist_rpc__lock);
    departed = dist_rpc__departed_locked(hit, why, sizeof why);
    dist__mutex_unlock(&dist_rpc__lock);
    if (departed) return dist_rpc__fail(DIST_ERR_PEER_LOST, "get_worker_info: %s", why);
    snprintf(info->name, sizeof info->name, "%s", dist_rpc__g.names[hit]);
    info->rank = hit;
    return DIST_OK;
}

DIST_API int dist_rpc_get_worker_infos(dist_worker_info *out, int cap) {
    int n = dist_rpc__size(), k = 0;
    char why[200];
    if (!dist_rpc__g.up || !dist_rpc__g.names) return 0;
    dist__mutex_lock(&dist_rpc__lock);
    for (int r = 0; r < n; r++) {
        if (dist_rpc__departed_locked(r, why, sizeof why)) continue;
        if (out && k < cap) {
            snprintf(out[k].name, sizeof out[k].name, "%s", dist_rpc__g.names[r]);
            out[k].rank = r;
        }
        k++;
    }
    dist__mutex_unlock(&dist_rpc__lock);
    return k;
}

DIST_API int dist_rpc_world_size(void) { return dist_rpc__g.up ? dist_rpc_get_worker_infos(NULL, 0) : 0; }

/* [SECTION] RPC: calls and futures */
/* Calls `fn` on rank `to` (args taken over); `label` names the call in
   error sentences (NULL: fn).  With `rr`, a remote(): the callee keeps the
   result as the RRef `rr`, whose id is the call's, tabled here before the
   request leaves. */
static dist_result dist_rpc__call(int to, const char *fn, const char *label, dist_value_t *args, int timeout_ms, dist_rref_t *rr,
                                  dist_future_t **out) {
    dist_future_t *f;
    dist_result r;
    /* the autograd context current here travels with the application's
       calls, remote()s and to_here, not with the agent's other messages */
    int64_t ctx = strncmp(fn, DIST_RPC__RESERVED, strlen(DIST_RPC__RESERVED)) != 0 || strcmp(fn, DIST_RPC__RESERVED "fetch") == 0 ? dist_rpc__ctx_cur : 0;
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
    dist__mutex_lock(&dist_rpc__lock);
    if (!dist_rpc__g.up || !dist_rpc__g.world || dist_rpc__g.closing) {
        int up = dist_rpc__g.up && dist_rpc__g.world;
        dist__mutex_unlock(&dist_rpc__lock);
        DIST_FREE(f); dist_value_free(args);
        return dist_rpc__fail(DIST_ERR_INVALID, "rpc '%s' to worker '%s': %s", label ? label : fn, dist_rpc__name_of(to),
                              up ? "this worker is shutting down" : "no agent (dist_rpc_init first)");
    }
    {
        char why[200];
        if (dist_rpc__departed_locked(to, why, sizeof why)) {   /* a departed worker: at once */
            dist__mutex_unlock(&dist_rpc__lock);
            DIST_FREE(f); dist_value_free(args);
            return dist_rpc__fail(DIST_ERR_PEER_LOST, "rpc '%s': %s", label ? label : fn, why);
        }
    }
    if (dist_rpc__g.inflight[to] >= DIST_RPC_MAX_INFLIGHT && !dist_rpc__on_listener) {
        /* its window is full: wait for an answer (a handler lends its
           place meanwhile); the listener never waits (it brings them) */
        int lent = 0;
        while (dist_rpc__g.inflight[to] >= DIST_RPC_MAX_INFLIGHT && !dist_rpc__g.closing &&
               (!f->deadline_ns || dist_rpc__now_ns() < f->deadline_ns)) {
            if (dist_rpc__in_pool && !lent) { lent = 1; dist_rpc__g.blocked++; dist_rpc__staff_locked(); }
            dist_rpc__cond_wait(f->deadline_ns);
        }
        if (lent) dist_rpc__g.blocked--;
        if (dist_rpc__g.inflight[to] >= DIST_RPC_MAX_INFLIGHT || dist_rpc__g.closing) {
            int n = dist_rpc__g.inflight[to], closing = dist_rpc__g.closing;
            dist__mutex_unlock(&dist_rpc__lock);
            DIST_FREE(f); dist_value_free(args);
            if (closing) return dist_rpc__fail(DIST_ERR_INVALID, "rpc '%s' to worker '%s': this worker is shutting down", label ? label : fn, dist_rpc__name_of(to));
            return dist_rpc__fail(DIST_ERR_TIMEOUT, "rpc '%s' to worker '%s' (rank %d): %d call%s to it still unanswered after %.1f s "
                                  "(at most DIST_RPC_MAX_INFLIGHT = %d at a time)", label ? label : fn, dist_rpc__name_of(to), to, n,
                                  DIST__PLURAL(n), timeout_ms / 1000.0, DIST_RPC_MAX_INFLIGHT);
        }
    }
    f->id = dist_rpc__g.next_id++;
    dist_rpc__pending_add_locked(f);
    if (rr) {
        rr->rid.rank = (uint32_t)dist_rpc__g.rank; rr->rid.id = f->id;
        rr->fid = rr->rid;                           /* the creator's fork has the RRef's id */
        dist_rpc__table_add_locked(rr);
    }
    dist__mutex_unlock(&dist_rpc__lock);
    r = dist_rpc__send(to, DIST_RPC__REQUEST, rr ? DIST_RPC__FLAG_REMOTE : 0, 0, f->id, fn, args, NULL, ctx);
    dist_value_free(args);
    if (r != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        dist_rpc__cb *cbs = NULL;
        int mine;
        snprintf(why, sizeof why, "%.300s", dist_rpc__error);
        dist__mutex_lock(&dist_rpc__lock);
        if (rr) rr->owner_has = 0;               /* the owner never heard of it */
        if (r == DIST_ERR_PEER_LOST) dist_rpc__mark_gone_locked(to);
        mine = !f->done;                     /* (or the sweep completed it meanwhile) */
        if (mine) cbs = dist_rpc__complete_locked(f, r, NULL, "rpc '%s' to worker '%s' (rank %d): %s", f->fn, dist_rpc__name_of(to), to, why);
        dist__mutex_unlock(&dist_rpc__lock);
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
    if ((r = dist_rpc_get_worker_info(to, wi)) != DIST_OK) {
        char why[DIST_RPC__ERRLEN];                     /* (the sentence is rewritten from a copy) */
        const char *w = dist_rpc__error;
        if (strncmp(w, "get_worker_info: ", 17) == 0) w += 17;
        snprintf(why, sizeof why, "%.330s", w);
        return dist_rpc__fail(r, "%s '%s': %s", what, fn, why);
    }
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

/* Waits (agent lock held) until `f` is done or `deadline_ns` (0: none).  A
   handler thread lends its place meanwhile (dist_rpc__staff_locked): it
   runs no other call itself, which would inherit what it holds. */
static void dist_rpc__wait_locked(dist_future_t *f, int64_t deadline_ns) {
    int lent = 0;
    while (!f->settled && (!deadline_ns || dist_rpc__now_ns() < deadline_ns)) {
        if (dist_rpc__in_pool && !lent) {
            lent = 1;
            dist_rpc__g.blocked++;
            dist_rpc__staff_locked();
        }
        dist_rpc__cond_wait(deadline_ns);
    }
    if (lent) dist_rpc__g.blocked--;
}

DIST_API dist_result dist_future_wait(dist_future_t *f, int timeout_ms) {
    dist_result r;
    if (!f) return dist_rpc__fail(DIST_ERR_INVALID, "future_wait: NULL future");
    dist__mutex_lock(&dist_rpc__lock);
    dist_rpc__wait_locked(f, timeout_ms > 0 ? dist_rpc__now_ns() + (int64_t)timeout_ms * 1000000 : 0);
    if (!f->settled) {
        dist__mutex_unlock(&dist_rpc__lock);
        return dist_rpc__fail(DIST_ERR_TIMEOUT, "future_wait: rpc '%s' to worker '%s' (rank %d) not done after %.1f s (still pending)", f->fn,
                              dist_rpc__name_of(f->to), f->to, timeout_ms / 1000.0);
    }
    r = f->result;
    if (r != DIST_OK) dist_rpc__fail(r, "%s", f->err);
    dist__mutex_unlock(&dist_rpc__lock);
    return r;
}

DIST_API dist_result dist_future_test(dist_future_t *f, int *done) {
    dist_result r;
    if (!f || !done) return dist_rpc__fail(DIST_ERR_INVALID, "future_test: NULL %s", f ? "`done`" : "future");
    dist__mutex_lock(&dist_rpc__lock);
    *done = f->settled;
    r = f->settled ? f->result : DIST_OK;
    if (r != DIST_OK) dist_rpc__fail(r, "%s", f->err);
    dist__mutex_unlock(&dist_rpc__lock);
    return r;
}

DIST_API dist_result dist_future_then(dist_future_t *f, void (*cb)(dist_future_t *, void *), void *user) {
    dist_rpc__cb *c;
    if (!f || !cb) return dist_rpc__fail(DIST_ERR_INVALID, "future_then: NULL %s", f ? "callback" : "future");
    if (!(c = (dist_rpc__cb *)DIST_MALLOC(sizeof *c))) return dist_rpc__fail(DIST_ERR_NOMEM, "future_then: out of memory");
    c->cb = cb; c->user = user; c->next = NULL;
    dist__mutex_lock(&dist_rpc__lock);
    if (!f->done) {
        dist_rpc__cb **pp = &f->cbs;
        while (*pp) pp = &(*pp)->next;                   /* in the order they were added */
        *pp = c;
        dist__mutex_unlock(&dist_rpc__lock);
        return DIST_OK;
    }
    dist__mutex_unlock(&dist_rpc__lock);
    cb(f, user);
    DIST_FREE(c);
    return DIST_OK;
}

DIST_API dist_result dist_future_wait_all(int n, dist_future_t **fs, int timeout_ms) {
    int64_t deadline = timeout_ms > 0 ? dist_rpc__now_ns() + (int64_t)timeout_ms * 1000000 : 0;
    dist_result first = DIST_OK;
    if (n < 0 || (n && !fs)) return dist_rpc__fail(DIST_ERR_INVALID, "future_wait_all: %d future%s at %p", n, DIST__PLURAL(n), (void *)fs);
    for (int i = 0; i < n; i++) {
        dist_result r;
        if (!fs[i]) continue;
        dist__mutex_lock(&dist_rpc__lock);
        dist_rpc__wait_locked(fs[i], deadline);
        r = fs[i]->settled ? fs[i]->result : DIST_ERR_TIMEOUT;
        if (first == DIST_OK && r != DIST_OK) {
            if (fs[i]->settled) dist_rpc__fail(r, "%s", fs[i]->err);
            else dist_rpc__fail(r, "future_wait_all: rpc '%s' to worker '%s' not done after %.1f s", fs[i]->fn, dist_rpc__name_of(fs[i]->to),
                                timeout_ms / 1000.0);
            first = r;
        }
        dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    v = f->done ? f->value : NULL;
    if (f->done) f->value = NULL;
    dist__mutex_unlock(&dist_rpc__lock);
    return v;
}

DIST_API dist_result dist_future_result(const dist_future_t *f) { return f && f->done ? f->result : DIST_OK; }
DIST_API const char *dist_future_error(const dist_future_t *f) { return f && f->done ? f->err : ""; }

DIST_API void dist_future_free(dist_future_t *f) {
    if (!f) return;
    dist__mutex_lock(&dist_rpc__lock);
    f = dist_rpc__future_unref_locked(f);
    dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    c->deferred = 1;
    c->refs++;
    c->next = dist_rpc__g.deferred;
    dist_rpc__g.deferred = c;
    dist__mutex_unlock(&dist_rpc__lock);
}

/* Answers a deferred call with `res` (freed unless borrowed) or, when
   code is not DIST_OK, with the error `text`; frees the call. */
static dist_result dist_rpc__answer(dist_rpc_call_t *c, dist_result code, dist_value_t *res, const char *text, int borrowed) {
    dist_rpc_call_t **pp;
    dist__mutex_lock(&dist_rpc__lock);
    for (pp = &dist_rpc__g.deferred; *pp && *pp != c; pp = &(*pp)->next) { }
    if (*pp) *pp = c->next;
    if (dist_rpc__g.draining) dist__cond_broadcast(&dist_rpc__cond);
    dist__mutex_unlock(&dist_rpc__lock);
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
    dist__cond_broadcast(&dist_rpc__cond);            /* a graceful shutdown counts them */
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
    if (dist_rpc__reserve(&e->forks, &e->capforks, e->nforks + 1, sizeof *e->forks) != 0) return -1;
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
            if (dist_rpc__g.nforks == 0) dist__cond_broadcast(&dist_rpc__cond);
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
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__after_do(&a);
}

static void dist_rpc__unpin(dist_rref_t *e) {
    dist__mutex_lock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    open_ = dist_rpc__g.up && dist_rpc__g.world && !dist_rpc__g.stopping;
    dist__mutex_unlock(&dist_rpc__lock);
    if (open_) dist_rpc__send(to, DIST_RPC__REQUEST, DIST_RPC__FLAG_ONEWAY, 0, 0, fn, args, NULL, 0);
    dist_value_free(args);
}

/* Makes the forks for the references in a message to `to` (see the
   protocol above); -1, the sentence set and nothing changed, when one
   cannot travel. */
enum { DIST_RPC__HOW_FORK = 1, DIST_RPC__HOW_PIN = 2, DIST_RPC__HOW_CHILD = 3 };
static int dist_rpc__forks_make(dist_rpc__fork *f, size_t n, int to) {
    size_t i;
    dist__mutex_lock(&dist_rpc__lock);
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
    dist__mutex_unlock(&dist_rpc__lock);
    if (i == n) return 0;
    dist_rpc__forks_undo(f, i);
    return -1;
}

static void dist_rpc__forks_undo(dist_rpc__fork *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        dist_rref_t *r = f[i].r;
        if (!f[i].how) continue;
        dist__mutex_lock(&dist_rpc__lock);
        if (f[i].how == DIST_RPC__HOW_PIN) r->pins--;
        else if (f[i].how == DIST_RPC__HOW_FORK) dist_rpc__fork_del_locked(r, f[i].fid);
        else r->children--;
        f[i].how = 0;
        dist_rpc__settle_unlock(r);
    }
}

static void dist_rpc__fork_done(dist_future_t *f, void *user) {
    dist_rref_t *r = (dist_rref_t *)user;
    dist__mutex_lock(&dist_rpc__lock);
    r->confirmed = 1;
    r->owner_has = f->result == DIST_OK;
    if (f->result != DIST_OK && r->code == DIST_OK) { r->code = f->result; snprintf(r->err, sizeof r->err, "%s", f->err); }
    dist__cond_broadcast(&dist_rpc__cond);
    dist__mutex_unlock(&dist_rpc__lock);
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
        dist__mutex_lock(&dist_rpc__lock);
        e = dist_rpc__owned_locked(v->u.r.rid, 1);
        if (e) e->refs++;
        if (e && from == dist_rpc__g.rank) e->pins--;   /* sent by this owner to itself */
        dist__mutex_unlock(&dist_rpc__lock);
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
        dist__mutex_lock(&dist_rpc__lock);
        dist_rpc__table_add_locked(r);
        dist__mutex_unlock(&dist_rpc__lock);
        v->u.r.ref = r;
        if (r->confirmed) return;
        if (dist_rpc__call(r->owner, DIST_RPC__RESERVED "fork", "rref fork",
                           dist_value_pack("[IIIIIII]", (int64_t)r->rid.rank, (int64_t)r->rid.id, (int64_t)r->fid.rank, (int64_t)r->fid.id,
                                           (int64_t)from, (int64_t)v->u.r.pfid.rank, (int64_t)v->u.r.pfid.id),
                           0, NULL, &f) != DIST_OK) {
            dist__mutex_lock(&dist_rpc__lock);
            r->confirmed = 1;
            r->code = DIST_ERR_INVALID;
            snprintf(r->err, sizeof r->err, "rref: the owner could not be told of this reference: %.300s", dist_rpc__error);
            dist__mutex_unlock(&dist_rpc__lock);
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
        if (!it || dist_value_get_int(it, &x[i]) != DIST_OK || (((ranks >> i) & 1) && (x[i] < 0 || x[i] >= dist_rpc__size()))) {
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
    dist__mutex_lock(&dist_rpc__lock);
    e = dist_rpc__owned_locked(dist_rpc__mkid(x[0], x[1]), 1);
    if (e) ok = dist_rpc__fork_add_locked(e, dist_rpc__mkid(x[2], x[3]), c->from) == 0;
    dist__mutex_unlock(&dist_rpc__lock);
    dist_rpc__notify((int)x[4], DIST_RPC__RESERVED "accept", dist_value_pack("[II]", x[5], x[6]));
    if (!ok) dist_rpc_call_fail(c, "%s", e ? "the owner ran out of memory" : "the value of this rref was already freed by its owner");
    return NULL;
}

/* accept [the parent's fid]: a child of that fork is known to the owner. */
static dist_value_t *dist_rpc__h_accept(dist_rpc_call_t *c, const dist_value_t *args) {
    int64_t x[2];
    dist_rref_t *r;
    if (dist_rpc__ids(c, args, 2, 0x1, x) != 0) return NULL;
    dist__mutex_lock(&dist_rpc__lock);
    r = dist_rpc__find_locked(0, dist_rpc__mkid(x[0], x[1]));
    if (r && r->children > 0) { r->children--; dist_rpc__settle_unlock(r); }
    else dist__mutex_unlock(&dist_rpc__lock);
    return NULL;
}

/* delete [rid, fid]: a user let go of its fork. */
static dist_value_t *dist_rpc__h_delete(dist_rpc_call_t *c, const dist_value_t *args) {
    int64_t x[4];
    dist_rref_t *e;
    if (dist_rpc__ids(c, args, 4, 0x5, x) != 0) return NULL;
    dist__mutex_lock(&dist_rpc__lock);
    e = dist_rpc__owned_locked(dist_rpc__mkid(x[0], x[1]), 0);
    if (e) { dist_rpc__fork_del_locked(e, dist_rpc__mkid(x[2], x[3])); dist_rpc__settle_unlock(e); }
    else dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    /* one this worker made is here or freed; another's remote() may still
       be on its way (the fetch waits for it, within the agent's timeout) */
    e = dist_rpc__owned_locked(dist_rpc__mkid(x[0], x[1]), x[0] != dist_rpc__g.rank);
    if (e && e->state == DIST_RPC__PENDING) {
        c->wnext = e->waiters;                          /* answered by dist_rpc__fill (or dist_rpc__expire_fetches) */
        e->waiters = c;
        if (!e->remote_seen && !e->parked_ns) e->parked_ns = dist_rpc__now_ns();
        dist__mutex_unlock(&dist_rpc__lock);
        return NULL;
    }
    if (e) e->pins++;
    dist__mutex_unlock(&dist_rpc__lock);
    if (!e) { dist_rpc__answer(c, DIST_ERR_NOT_FOUND, NULL, "the value of this rref was already freed by its owner", 0); return NULL; }
    dist_rpc__answer_fetch(c, e);
    dist_rpc__unpin(e);
    return NULL;
}

/* Fetches parked since before `cutoff` on an RRef no remote() has made
   here (a freed or forged id, or a remote() far too late) are answered
   with DIST_ERR_NOT_FOUND; the entry still waits for its remote(). */
static void dist_rpc__expire_fetches(int64_t cutoff, const char *why) {
    for (;;) {
        dist_rpc_call_t *w = NULL;
        dist__mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !w; b++)
            for (dist_rref_t *e = dist_rpc__g.owned[b]; e && !w; e = e->next)
                if (e->state == DIST_RPC__PENDING && !e->remote_seen && e->waiters && e->parked_ns && e->parked_ns <= cutoff) {
                    w = e->waiters;
                    e->waiters = NULL;
                    e->parked_ns = 0;
                }
        dist__mutex_unlock(&dist_rpc__lock);
        if (!w) return;
        while (w) {
            dist_rpc_call_t *next = w->wnext;
            dist_rpc__answer(w, DIST_ERR_NOT_FOUND, NULL, why, 0);
            w = next;
        }
    }
}

/* A remote()'s outcome: the value (taken over) or the error; the fetches
   parked on it are answered. */
static void dist_rpc__fill(dist_rref_t *e, dist_result code, dist_value_t *v, const char *text, const char *fn) {
    dist_rpc_call_t *w;
    dist__mutex_lock(&dist_rpc__lock);
    if (e->state != DIST_RPC__PENDING) {                /* (failed already: the agent shut down) */
        dist__mutex_unlock(&dist_rpc__lock);
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
    dist__cond_broadcast(&dist_rpc__cond);            /* local_value, to_here on the owner */
    dist__mutex_unlock(&dist_rpc__lock);
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
        dist__mutex_lock(&dist_rpc__lock);
        r->confirmed = 1;
        if (f->result != DIST_OK && r->code == DIST_OK) { r->code = f->result; snprintf(r->err, sizeof r->err, "%s", f->err); }
        dist__cond_broadcast(&dist_rpc__cond);
        dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    if (!dist_rpc__g.up || !dist_rpc__g.world) {
        dist__mutex_unlock(&dist_rpc__lock);
        DIST_FREE(e); dist_value_free(value);
        return dist_rpc__fail(DIST_ERR_INVALID, "rref_new: no agent (dist_rpc_init first)");
    }
    e->rid.rank = (uint32_t)dist_rpc__g.rank;
    e->rid.id = dist_rpc__g.next_id++;
    e->state = DIST_RPC__READY;
    e->remote_seen = e->confirmed = 1;
    e->value = value;
    dist_rpc__table_add_locked(e);
    dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    c = r->is_owner || (r->confirmed && r->owner_has);
    dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    res = dist_rpc__await_value_locked(r, dist_rpc__deadline(0), "rref_local_value");
    if (res == DIST_OK) *out = r->value;
    dist__mutex_unlock(&dist_rpc__lock);
    return res;
}

DIST_API dist_result dist_rref_to_here(dist_rref_t *r, int timeout_ms, dist_value_t **out) {
    dist_future_t *f = NULL;
    dist_result res;
    if (!r || !out) return dist_rpc__fail(DIST_ERR_INVALID, "rref_to_here: NULL %s", r ? "result pointer" : "rref");
    *out = NULL;
    dist__mutex_lock(&dist_rpc__lock);
    if (r->is_owner) {
        res = dist_rpc__await_value_locked(r, dist_rpc__deadline(timeout_ms), "rref_to_here");
        if (res == DIST_OK) r->pins++;                  /* the copy is made without the lock */
        dist__mutex_unlock(&dist_rpc__lock);
        if (res != DIST_OK) return res;
        *out = dist_value_copy(r->value);
        dist_rpc__unpin(r);
        return *out ? DIST_OK : dist_rpc__fail(DIST_ERR_NOMEM, "rref_to_here: out of memory for the copy");
    }
    if (r->code != DIST_OK) {                           /* its remote() failed: the next use says so */
        res = dist_rpc__fail(r->code, "%s", r->err);
        dist__mutex_unlock(&dist_rpc__lock);
        return res;
    }
    dist__mutex_unlock(&dist_rpc__lock);
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
    dist__mutex_lock(&dist_rpc__lock);
    r->refs++;
    dist__mutex_unlock(&dist_rpc__lock);
    return r;
}

DIST_API void dist_rref_free(dist_rref_t *r) {
    if (!r) return;
    dist__mutex_lock(&dist_rpc__lock);
    r->refs--;
    dist_rpc__settle_unlock(r);
}

DIST_API void dist_rpc_rref_counts(int *owned, int *users) {
    dist__mutex_lock(&dist_rpc__lock);
    if (owned) *owned = dist_rpc__g.nowned;
    if (users) *users = dist_rpc__g.nusers;
    dist__mutex_unlock(&dist_rpc__lock);
}

/* A worker is gone: the forks it held go with it, and references to what
   it owned can never be confirmed or let go of (their next use fails). */
static void dist_rpc__peer_gone(int rank, const char *why) {
    dist_rpc__log(DIST_LOG_INFO, "worker '%s' (rank %d) is gone: %.300s", dist_rpc__name_of(rank), rank, why);
    for (;;) {                                          /* entries with forks it held */
        dist_rref_t *e = NULL;
        dist__mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !e; b++)
            for (e = dist_rpc__g.owned[b]; e; e = e->next) {
                int hit = 0;
                for (int i = 0; i < e->nforks; i++)
                    if (e->forks[i].holder == rank) { dist_rpc__fork_del_locked(e, e->forks[i].fid); i--; hit = 1; }
                if (hit) break;
            }
        if (!e) { dist__mutex_unlock(&dist_rpc__lock); break; }
        dist_rpc__settle_unlock(e);
    }
    for (;;) {                                          /* our forks of what it owned */
        dist_rref_t *r = NULL;
        dist__mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !r; b++)
            for (r = dist_rpc__g.users[b]; r && r->owner != rank; r = r->next) { }
        if (!r) { dist__mutex_unlock(&dist_rpc__lock); break; }
        r->confirmed = 1; r->owner_has = 0; r->children = 0;
        if (r->code == DIST_OK) {
            r->code = DIST_ERR_PEER_LOST;
            snprintf(r->err, sizeof r->err, "rref: its owner, worker '%s' (rank %d), is gone (%.300s)", dist_rpc__name_of(rank), rank, why);
        }
        if (r->refs > 0) { r->detached = 1; dist_rpc__table_del_locked(r); dist__mutex_unlock(&dist_rpc__lock); continue; }
        dist_rpc__settle_unlock(r);
    }
}

/* Shutdown: lets go of every user fork here for the application (its
   handles stay valid, detached); they leave as their owners confirm. */
static void dist_rpc__release_users(void) {
    for (;;) {
        dist_rref_t *r = NULL;
        dist__mutex_lock(&dist_rpc__lock);
        for (int b = 0; b < DIST_RPC__BUCKETS && !r; b++)
            for (r = dist_rpc__g.users[b]; r && r->forced; r = r->next) { }
        if (r) { r->forced = 1; r->refs++; }
        dist__mutex_unlock(&dist_rpc__lock);
        if (!r) return;
        dist_rref_free(r);                              /* settles it */
    }
}

/* Teardown (the threads are gone): every entry and fork leaves the
   tables; what nothing here holds is freed, the rest is detached and freed
   when the application lets go. */
static void dist_rpc__drop_tables(void) {
    dist_rref_t *gone = NULL;
    dist__mutex_lock(&dist_rpc__lock);
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
    dist__mutex_unlock(&dist_rpc__lock);
    while (gone) {
        dist_rref_t *r = gone;
        gone = r->next;
        dist_value_free(r->value);
        DIST_FREE(r->forks);
        DIST_FREE(r);
    }
}

/* ---- RRef helpers (the tutorials' idioms) ---- */

/* [r] followed by the items of `args` (a list), or by `args`. */
static dist_value_t *dist_rpc__with_rref(dist_rref_t *r, dist_value_t *args) {
    dist_value_t *l = dist_value_list();
    dist_result res = l ? dist_value_append(l, dist_value_rref(r)) : DIST_ERR_NOMEM;
    if (args && args->type == DIST_VALUE_LIST) {
        int block = (args->own & DIST_RPC__OWN_BLOCK) != 0;        /* a decoded list: its items are copied */
        for (size_t i = 0; i < args->u.list.n && res == DIST_OK; i++)
            res = dist_value_append(l, block ? dist_value_copy(args->u.list.items[i]) : args->u.list.items[i]);
        if (!block) {
            size_t i = 0;                                           /* the items moved (or freed by append) stay out of args */
            for (; i < args->u.list.n; i++) args->u.list.items[i] = NULL;
            args->u.list.n = 0;
        }
        dist_value_free(args);
    } else if (args && res == DIST_OK) {
        res = dist_value_append(l, args);
    } else {
        dist_value_free(args);
    }
    if (res != DIST_OK) { dist_value_free(l); return NULL; }
    return l;
}

/* `need_out`: the result pointer `out` is required (NULL is accepted where
   dist_rpc_sync accepts it: the result is dropped). */
static dist_result dist_rpc__rref_target(const char *what, dist_rref_t *r, const void *out, int need_out, dist_worker_info *wi) {
    if (!r || (need_out && !out)) return dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL %s", what, r ? "result pointer" : "rref");
    return dist_rref_owner(r, wi);
}

DIST_API dist_result dist_rref_rpc_async(dist_rref_t *r, const char *fn, dist_value_t *args, dist_future_t **fut) {
    dist_worker_info wi;
    dist_result res;
    if (fut) *fut = NULL;
    if ((res = dist_rpc__rref_target("rref_rpc_async", r, fut, 1, &wi)) != DIST_OK) { dist_value_free(args); return res; }
    return dist_rpc_async(wi.name, fn, dist_rpc__with_rref(r, args), fut);
}

DIST_API dist_result dist_rref_rpc_sync(dist_rref_t *r, const char *fn, dist_value_t *args, dist_value_t **ret) {
    dist_worker_info wi;
    dist_result res;
    if (ret) *ret = NULL;
    if ((res = dist_rpc__rref_target("rref_rpc_sync", r, ret, 0, &wi)) != DIST_OK) { dist_value_free(args); return res; }
    return dist_rpc_sync(wi.name, fn, dist_rpc__with_rref(r, args), ret);
}

DIST_API dist_result dist_rref_remote(dist_rref_t *r, const char *fn, dist_value_t *args, dist_rref_t **out) {
    dist_worker_info wi;
    dist_result res;
    if (out) *out = NULL;
    if ((res = dist_rpc__rref_target("rref_remote", r, out, 1, &wi)) != DIST_OK) { dist_value_free(args); return res; }
    return dist_remote(wi.name, fn, dist_rpc__with_rref(r, args), out);
}

/* [SECTION] tensors and autograd
   A tensor is its shape, its data and, when an operation made it with an
   input that requires a gradient, that operation (op, inputs, what the
   backward pass needs).  backward sorts the graph below the root (depth
   first, post-order), gives every node a gradient buffer, walks it in
   reverse calling each operation's backward, and adds what reaches the
   leaves into their gradients.  Elementwise operations broadcast through
   one loop over the output with per-operand strides (0 where an operand's
   dimension stretches); matmul is one cache-blocked kernel for A B and
   A^T B (A B^T transposes B first). */
enum {
    DIST_T__LEAF = 0, DIST_T__ADD, DIST_T__SUB, DIST_T__MUL, DIST_T__DIV, DIST_T__NEG, DIST_T__SCALE, DIST_T__RELU, DIST_T__TANH,
    DIST_T__SIGMOID, DIST_T__EXP, DIST_T__LOG, DIST_T__MATMUL, DIST_T__SUM, DIST_T__MEAN, DIST_T__SOFTMAX, DIST_T__LOG_SOFTMAX,
    DIST_T__NLL, DIST_T__DROPOUT, DIST_T__LINEAR, DIST_T__CAT,
    DIST_T__RECV                     /* received by RPC in an autograd context: its gradient goes back to the sender */
};

struct dist_tensor {
    int refs;
    int ndim;
    int64_t shape[DIST_TENSOR_MAX_DIMS];
    size_t numel;
    float *data;
    int requires_grad;               /* a leaf's flag, or: an input of its operation needs one */
    dist_tensor_t *grad;             /* a leaf's accumulated gradient */
    int op;                          /* DIST_T__LEAF: made by the user (or no graph) */
    dist_tensor_t *in[3];
    dist_tensor_t **ins;             /* cat's and stack's inputs (nin of them; in[] unused) */
    int nin, cat_dim;                /* ...and the dimension they meet along (of the output) */
    float s;                         /* scale, dropout's 1/(1-p) */
    void *aux;                       /* nll's targets (int64), dropout's mask (float) */
    float *g;                        /* during backward: this node's gradient */
    unsigned mark;                   /* during backward: visited */
    dist_tensor_t *dead;             /* release's list of tensors to free */
};

/* A received tensor's link to its send (its aux). */
typedef struct { int64_t ctx; uint64_t msg; uint32_t slot; } dist_rpc__agtag;

DIST_API void dist_no_grad_enter(void) { dist_rpc__no_grad++; }
DIST_API void dist_no_grad_exit(void) { if (dist_rpc__no_grad > 0) dist_rpc__no_grad--; }

static const char *dist_rpc__shape_str(const dist_tensor_t *t, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int d = 0; d < t->ndim && o < cap; d++) o += (size_t)snprintf(buf + o, cap - o, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* A tensor of `shape` (data uninitialised unless `zero`). */
static dist_tensor_t *dist_rpc__tensor_make(int ndim, const int64_t *shape, int zero) {
    dist_tensor_t *t;
    size_t n = 1;
    if (ndim < 0 || ndim > DIST_TENSOR_MAX_DIMS) { dist_rpc__fail(DIST_ERR_INVALID, "tensor: %d dimensions (0 to %d)", ndim, DIST_TENSOR_MAX_DIMS); return NULL; }
    if (ndim && !shape) { dist_rpc__fail(DIST_ERR_INVALID, "tensor: NULL shape"); return NULL; }
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && n > (SIZE_MAX / 8) / (size_t)shape[d])) {
            dist_rpc__fail(DIST_ERR_INVALID, "tensor: dimension %d is %lld", d, (long long)shape[d]);
            return NULL;
        }
        n *= (size_t)shape[d];
    }
    if (!(t = (dist_tensor_t *)DIST_MALLOC(sizeof *t))) { dist_rpc__fail(DIST_ERR_NOMEM, "tensor: out of memory"); return NULL; }
    memset(t, 0, sizeof *t);
    t->data = (float *)DIST_MALLOC((n ? n : 1) * sizeof(float));
    if (!t->data) { DIST_FREE(t); dist_rpc__fail(DIST_ERR_NOMEM, "tensor: out of memory for %zu floats", n); return NULL; }
    if (zero) memset(t->data, 0, (n ? n : 1) * sizeof(float));
    t->refs = 1;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->numel = n;
    return t;
}

DIST_API dist_tensor_t *dist_tensor_new(int ndim, const int64_t *shape, const float *data) {
    dist_tensor_t *t = dist_rpc__tensor_make(ndim, shape, data == NULL);
    if (t && data) memcpy(t->data, data, t->numel * sizeof(float));
    return t;
}

DIST_API dist_tensor_t *dist_tensor_full(int ndim, const int64_t *shape, float x) {
    dist_tensor_t *t = dist_rpc__tensor_make(ndim, shape, 0);
    for (size_t i = 0; t && i < t->numel; i++) t->data[i] = x;
    return t;
}

DIST_API dist_tensor_t *dist_tensor_scalar(float x) { return dist_tensor_full(0, NULL, x); }

/* splitmix64: the seeded generator of randn, uniform and dropout. */
static uint64_t dist_rpc__mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double dist_rpc__unit(uint64_t *s) { return (double)(dist_rpc__mix(s) >> 11) * (1.0 / 9007199254740992.0); }   /* [0, 1) */

DIST_API dist_tensor_t *dist_tensor_uniform(int ndim, const int64_t *shape, float lo, float hi, uint64_t seed) {
    dist_tensor_t *t = dist_rpc__tensor_make(ndim, shape, 0);
    for (size_t i = 0; t && i < t->numel; i++) t->data[i] = (float)(lo + (hi - lo) * dist_rpc__unit(&seed));
    return t;
}

DIST_API dist_tensor_t *dist_tensor_randn(int ndim, const int64_t *shape, float stddev, uint64_t seed) {
    dist_tensor_t *t = dist_rpc__tensor_make(ndim, shape, 0);
    for (size_t i = 0; t && i < t->numel; i += 2) {             /* Box-Muller, two at a time */
        double u = 1.0 - dist_rpc__unit(&seed), v = dist_rpc__unit(&seed), r = sqrt(-2.0 * log(u));
        t->data[i] = (float)(stddev * r * cos(6.283185307179586 * v));
        if (i + 1 < t->numel) t->data[i + 1] = (float)(stddev * r * sin(6.283185307179586 * v));
    }
    return t;
}

DIST_API dist_tensor_t *dist_tensor_retain(dist_tensor_t *t) {
    if (t) DIST__FETCH_ADD(&t->refs, 1);
    return t;
}

/* Without recursion: a graph of any depth is freed through a list of the
   tensors whose last reference went. */
DIST_API void dist_tensor_release(dist_tensor_t *t) {
    dist_tensor_t *list = NULL;
    if (!t || DIST__FETCH_ADD(&t->refs, -1) != 1) return;
    t->dead = NULL;
    list = t;
    while (list) {
        t = list;
        list = t->dead;
        for (int i = 0; i < 4 + t->nin; i++) {
            dist_tensor_t *u = i < 3 ? t->in[i] : i == 3 ? t->grad : t->ins[i - 4];
            if (u && DIST__FETCH_ADD(&u->refs, -1) == 1) { u->dead = list; list = u; }
        }
        DIST_FREE(t->ins);
        DIST_FREE(t->aux);
        DIST_FREE(t->data);
        DIST_FREE(t);
    }
}

DIST_API int dist_tensor_ndim(const dist_tensor_t *t) { return t ? t->ndim : 0; }
DIST_API int64_t dist_tensor_dim(const dist_tensor_t *t, int i) {
    if (!t) return 0;
    if (i < 0) i += t->ndim;
    return i >= 0 && i < t->ndim ? t->shape[i] : 0;
}
DIST_API size_t dist_tensor_numel(const dist_tensor_t *t) { return t ? t->numel : 0; }
DIST_API float *dist_tensor_data(dist_tensor_t *t) { return t ? t->data : NULL; }
DIST_API float dist_tensor_item(const dist_tensor_t *t) { return t && t->numel ? t->data[0] : 0.0f; }
DIST_API void dist_tensor_set_requires_grad(dist_tensor_t *t, int on) { if (t && t->op == DIST_T__LEAF) t->requires_grad = on != 0; }
DIST_API int dist_tensor_requires_grad(const dist_tensor_t *t) { return t ? t->requires_grad : 0; }
DIST_API dist_tensor_t *dist_tensor_grad(const dist_tensor_t *t) { return t ? t->grad : NULL; }
DIST_API void dist_tensor_zero_grad(dist_tensor_t *t) { if (t && t->grad) memset(t->grad->data, 0, t->grad->numel * sizeof(float)); }

DIST_API dist_tensor_t *dist_tensor_detach(const dist_tensor_t *t) {
    if (!t) { dist_rpc__fail(DIST_ERR_INVALID, "detach: NULL tensor"); return NULL; }
    return dist_tensor_new(t->ndim, t->shape, t->data);
}

/* The result of an operation: its graph node when an input needs a
   gradient (inputs retained). */
static dist_tensor_t *dist_rpc__result(int op, int ndim, const int64_t *shape, dist_tensor_t *a, dist_tensor_t *b, dist_tensor_t *c) {
    dist_tensor_t *t = dist_rpc__tensor_make(ndim, shape, 0);
    if (!t) return NULL;
    if (!dist_rpc__no_grad && ((a && a->requires_grad) || (b && b->requires_grad) || (c && c->requires_grad))) {
        t->requires_grad = 1;
        t->op = op;
        t->in[0] = dist_tensor_retain(a); t->in[1] = dist_tensor_retain(b); t->in[2] = dist_tensor_retain(c);
    }
    return t;
}

/* ---- broadcasting ---- */
typedef struct { int64_t n[4]; int64_t sa[4], sb[4]; } dist_rpc__bc;

/* The output shape of a op b, and both operands' strides over it. */
static int dist_rpc__broadcast(const char *what, const dist_tensor_t *a, const dist_tensor_t *b, dist_rpc__bc *bc, int *ndim, int64_t *shape) {
    int64_t as[4], bs[4], sta = 1, stb = 1;
    char x[64], y[64];
    *ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < 4; d++) {                   /* aligned at the end, padded with 1s */
        as[d] = d < 4 - a->ndim ? 1 : a->shape[d - (4 - a->ndim)];
        bs[d] = d < 4 - b->ndim ? 1 : b->shape[d - (4 - b->ndim)];
        if (as[d] != bs[d] && as[d] != 1 && bs[d] != 1) {
            dist_rpc__fail(DIST_ERR_INVALID, "%s: shapes %s and %s do not broadcast", what, dist_rpc__shape_str(a, x, sizeof x), dist_rpc__shape_str(b, y, sizeof y));
            return -1;
        }
        bc->n[d] = as[d] == 1 ? bs[d] : as[d];       /* (an empty dimension stays empty against 1) */
    }
    for (int d = 3; d >= 0; d--) {
        bc->sa[d] = as[d] == 1 ? 0 : sta; sta *= as[d];
        bc->sb[d] = bs[d] == 1 ? 0 : stb; stb *= bs[d];
    }
    for (int d = 0; d < *ndim; d++) shape[d] = bc->n[4 - *ndim + d];
    return 0;
}

/* Runs `body` over every output element with ia, ib, io its offsets in a,
   b and the output (the inner loop has constant strides, so the compiler
   vectorises it). */
#define DIST_RPC__BC_LOOP(bc, body)                                                                       \
    do {                                                                                                   \
        int64_t io_ = 0;                                                                                   \
        for (int64_t i0 = 0; i0 < (bc).n[0]; i0++)                                                         \
            for (int64_t i1 = 0; i1 < (bc).n[1]; i1++)                                                     \
                for (int64_t i2 = 0; i2 < (bc).n[2]; i2++) {                                               \
                    int64_t ba_ = i0 * (bc).sa[0] + i1 * (bc).sa[1] + i2 * (bc).sa[2];                     \
                    int64_t bb_ = i0 * (bc).sb[0] + i1 * (bc).sb[1] + i2 * (bc).sb[2];                     \
                    int64_t sa3_ = (bc).sa[3], sb3_ = (bc).sb[3];                                          \
                    for (int64_t i3 = 0; i3 < (bc).n[3]; i3++, io_++) {                                    \
                        int64_t ia = ba_ + i3 * sa3_, ib = bb_ + i3 * sb3_, io = io_;                      \
                        body;                                                                              \
                    }                                                                                      \
                }                                                                                          \
    } while (0)

static dist_tensor_t *dist_rpc__binary(int op, const char *what, dist_tensor_t *a, dist_tensor_t *b) {
    dist_rpc__bc bc;
    int ndim;
    int64_t shape[4];
    dist_tensor_t *t;
    const float *x, *y;
    float *o;
    if (!a || !b) { dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL tensor (did an operation before fail?)", what); return NULL; }
    if (dist_rpc__broadcast(what, a, b, &bc, &ndim, shape) != 0 || !(t = dist_rpc__result(op, ndim, shape, a, b, NULL))) return NULL;
    x = a->data; y = b->data; o = t->data;
    switch (op) {
    case DIST_T__ADD: DIST_RPC__BC_LOOP(bc, o[io] = x[ia] + y[ib]); break;
    case DIST_T__SUB: DIST_RPC__BC_LOOP(bc, o[io] = x[ia] - y[ib]); break;
    case DIST_T__MUL: DIST_RPC__BC_LOOP(bc, o[io] = x[ia] * y[ib]); break;
    default: DIST_RPC__BC_LOOP(bc, o[io] = x[ia] / y[ib]); break;
    }
    return t;
}

DIST_API dist_tensor_t *dist_tensor_add(dist_tensor_t *a, dist_tensor_t *b) { return dist_rpc__binary(DIST_T__ADD, "add", a, b); }
DIST_API dist_tensor_t *dist_tensor_sub(dist_tensor_t *a, dist_tensor_t *b) { return dist_rpc__binary(DIST_T__SUB, "sub", a, b); }
DIST_API dist_tensor_t *dist_tensor_mul(dist_tensor_t *a, dist_tensor_t *b) { return dist_rpc__binary(DIST_T__MUL, "mul", a, b); }
DIST_API dist_tensor_t *dist_tensor_div(dist_tensor_t *a, dist_tensor_t *b) { return dist_rpc__binary(DIST_T__DIV, "div", a, b); }

/* ---- elementwise, one input ---- */
static dist_tensor_t *dist_rpc__unary(int op, const char *what, dist_tensor_t *a, float s) {
    dist_tensor_t *t;
    const float *x;
    float *o;
    size_t n;
    if (!a) { dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL tensor (did an operation before fail?)", what); return NULL; }
    if (!(t = dist_rpc__result(op, a->ndim, a->shape, a, NULL, NULL))) return NULL;
    t->s = s;
    x = a->data; o = t->data; n = a->numel;
    switch (op) {
    case DIST_T__NEG: for (size_t i = 0; i < n; i++) o[i] = -x[i]; break;
    case DIST_T__SCALE: for (size_t i = 0; i < n; i++) o[i] = s * x[i]; break;
    case DIST_T__RELU: for (size_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : 0.0f; break;
    case DIST_T__TANH: for (size_t i = 0; i < n; i++) o[i] = tanhf(x[i]); break;
    case DIST_T__SIGMOID: for (size_t i = 0; i < n; i++) o[i] = 1.0f / (1.0f + expf(-x[i])); break;
    case DIST_T__EXP: for (size_t i = 0; i < n; i++) o[i] = expf(x[i]); break;
    default: for (size_t i = 0; i < n; i++) o[i] = logf(x[i]); break;
    }
    return t;
}

DIST_API dist_tensor_t *dist_tensor_neg(dist_tensor_t *a) { return dist_rpc__unary(DIST_T__NEG, "neg", a, 0); }
DIST_API dist_tensor_t *dist_tensor_scale(dist_tensor_t *a, float s) { return dist_rpc__unary(DIST_T__SCALE, "scale", a, s); }
DIST_API dist_tensor_t *dist_tensor_relu(dist_tensor_t *a) { return dist_rpc__unary(DIST_T__RELU, "relu", a, 0); }
DIST_API dist_tensor_t *dist_tensor_tanh(dist_tensor_t *a) { return dist_rpc__unary(DIST_T__TANH, "tanh", a, 0); }
DIST_API dist_tensor_t *dist_tensor_sigmoid(dist_tensor_t *a) { return dist_rpc__unary(DIST_T__SIGMOID, "sigmoid", a, 0); }
DIST_API dist_tensor_t *dist_tensor_exp(dist_tensor_t *a) { return dist_rpc__unary(DIST_T__EXP, "exp", a, 0); }
DIST_API dist_tensor_t *dist_tensor_log(dist_tensor_t *a) { return dist_rpc__unary(DIST_T__LOG, "log", a, 0); }

/* ---- matmul ----
   C[m,n] += op(A) B with op(A) = A [m,k] (ta 0) or A^T, A being [k,m]
   (ta 1); B [k,n] row-major.  Over panels of k, C is computed in blocks
   of 4 rows x 16 columns held in registers (the compiler keeps acc in
   vector registers and vectorises the 16-wide loops even at -O2): each
   element of B loaded once per 4 rows, each of C once per panel.  The
   columns past the last full block, and the rows past the last 4, take
   the same loops with shorter bounds. */
#define DIST_RPC__MR 4
#define DIST_RPC__NR 16
static void dist_rpc__gemm(int ta, int64_t m, int64_t n, int64_t k, const float *A, const float *B, float *C) {
    enum { KB = 256 };
    for (int64_t p0 = 0; p0 < k; p0 += KB) {
        int64_t p1 = p0 + KB < k ? p0 + KB : k;
        for (int64_t i = 0; i < m; i += DIST_RPC__MR) {
            int mr = m - i < DIST_RPC__MR ? (int)(m - i) : DIST_RPC__MR;
            for (int64_t j = 0; j < n; j += DIST_RPC__NR) {
                float acc[DIST_RPC__MR][DIST_RPC__NR];
                memset(acc, 0, sizeof acc);
                if (mr == DIST_RPC__MR && n - j >= DIST_RPC__NR) {         /* a full block */
                    for (int64_t p = p0; p < p1; p++) {
                        const float *b = B + p * n + j;
                        for (int r = 0; r < DIST_RPC__MR; r++) {
                            float av = ta ? A[p * m + i + r] : A[(i + r) * k + p];
                            for (int q = 0; q < DIST_RPC__NR; q++) acc[r][q] += av * b[q];
                        }
                    }
                    for (int r = 0; r < DIST_RPC__MR; r++)
                        for (int q = 0; q < DIST_RPC__NR; q++) C[(i + r) * n + j + q] += acc[r][q];
                } else {                                                  /* an edge */
                    int nr = n - j < DIST_RPC__NR ? (int)(n - j) : DIST_RPC__NR;
                    for (int64_t p = p0; p < p1; p++) {
                        const float *b = B + p * n + j;
                        for (int r = 0; r < mr; r++) {
                            float av = ta ? A[p * m + i + r] : A[(i + r) * k + p];
                            for (int q = 0; q < nr; q++) acc[r][q] += av * b[q];
                        }
                    }
                    for (int r = 0; r < mr; r++)
                        for (int q = 0; q < nr; q++) C[(i + r) * n + j + q] += acc[r][q];
                }
            }
        }
    }
}

/* C[m,n] += A [m,k] B^T, B being [n,k]: B transposed into `scratch`
   (k*n floats) first. */
static void dist_rpc__gemm_nt(int64_t m, int64_t n, int64_t k, const float *A, const float *B, float *C, float *scratch) {
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++) scratch[p * n + j] = B[j * k + p];
    dist_rpc__gemm(0, m, n, k, A, scratch, C);
}

DIST_API dist_tensor_t *dist_tensor_matmul(dist_tensor_t *a, dist_tensor_t *b) {
    dist_tensor_t *t;
    int64_t shape[2];
    char x[64], y[64];
    if (!a || !b) { dist_rpc__fail(DIST_ERR_INVALID, "matmul: NULL tensor (did an operation before fail?)"); return NULL; }
    if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != b->shape[0]) {
        dist_rpc__fail(DIST_ERR_INVALID, "matmul: %s x %s (needs [M,K] x [K,N])", dist_rpc__shape_str(a, x, sizeof x), dist_rpc__shape_str(b, y, sizeof y));
        return NULL;
    }
    shape[0] = a->shape[0]; shape[1] = b->shape[1];
    if (!(t = dist_rpc__result(DIST_T__MATMUL, 2, shape, a, b, NULL))) return NULL;
    memset(t->data, 0, t->numel * sizeof(float));
    dist_rpc__gemm(0, shape[0], shape[1], a->shape[1], a->data, b->data, t->data);
    return t;
}

DIST_API dist_tensor_t *dist_tensor_linear(dist_tensor_t *x, dist_tensor_t *w, dist_tensor_t *b) {
    dist_tensor_t *t;
    int64_t shape[2];
    float *scratch;
    char s1[64], s2[64], s3[64];
    if (!x || !w) { dist_rpc__fail(DIST_ERR_INVALID, "linear: NULL tensor (did an operation before fail?)"); return NULL; }
    if (x->ndim != 2 || w->ndim != 2 || x->shape[1] != w->shape[1] || (b && (b->numel != (size_t)w->shape[0] || b->ndim != 1))) {
        dist_rpc__fail(DIST_ERR_INVALID, "linear: x %s, w %s, b %s (needs x [N,in], w [out,in], b [out])", dist_rpc__shape_str(x, s1, sizeof s1),
                       dist_rpc__shape_str(w, s2, sizeof s2), b ? dist_rpc__shape_str(b, s3, sizeof s3) : "none");
        return NULL;
    }
    shape[0] = x->shape[0]; shape[1] = w->shape[0];
    if (!(scratch = (float *)DIST_MALLOC((w->numel ? w->numel : 1) * sizeof(float)))) { dist_rpc__fail(DIST_ERR_NOMEM, "linear: out of memory"); return NULL; }
    if (!(t = dist_rpc__result(DIST_T__LINEAR, 2, shape, x, w, b))) { DIST_FREE(scratch); return NULL; }
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++) t->data[i * shape[1] + j] = b ? b->data[j] : 0.0f;
    dist_rpc__gemm_nt(shape[0], shape[1], x->shape[1], x->data, w->data, t->data, scratch);
    DIST_FREE(scratch);
    return t;
}

/* ---- reductions, softmax, losses ---- */
static dist_tensor_t *dist_rpc__reduce(int op, const char *what, dist_tensor_t *a) {
    dist_tensor_t *t;
    double acc = 0;
    if (!a) { dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL tensor (did an operation before fail?)", what); return NULL; }
    if (!(t = dist_rpc__result(op, 0, NULL, a, NULL, NULL))) return NULL;
    for (size_t i = 0; i < a->numel; i++) acc += a->data[i];
    t->data[0] = (float)(op == DIST_T__MEAN ? (a->numel ? acc / (double)a->numel : 0.0) : acc);
    return t;
}

DIST_API dist_tensor_t *dist_tensor_sum(dist_tensor_t *a) { return dist_rpc__reduce(DIST_T__SUM, "sum", a); }
DIST_API dist_tensor_t *dist_tensor_mean(dist_tensor_t *a) { return dist_rpc__reduce(DIST_T__MEAN, "mean", a); }

static dist_tensor_t *dist_rpc__softmax(int op, const char *what, dist_tensor_t *a) {
    dist_tensor_t *t;
    int64_t c, rows;
    if (!a) { dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL tensor (did an operation before fail?)", what); return NULL; }
    if (a->ndim < 1 || a->shape[a->ndim - 1] == 0) { dist_rpc__fail(DIST_ERR_INVALID, "%s: needs at least one dimension, not empty", what); return NULL; }
    if (!(t = dist_rpc__result(op, a->ndim, a->shape, a, NULL, NULL))) return NULL;
    c = a->shape[a->ndim - 1];
    rows = (int64_t)(a->numel / (size_t)c);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = a->data + r * c;
        float *o = t->data + r * c, mx = x[0];
        double z = 0;
        for (int64_t j = 1; j < c; j++) if (x[j] > mx) mx = x[j];
        for (int64_t j = 0; j < c; j++) z += exp((double)x[j] - mx);
        for (int64_t j = 0; j < c; j++)
            o[j] = op == DIST_T__SOFTMAX ? (float)(exp((double)x[j] - mx) / z) : (float)((double)x[j] - mx - log(z));
    }
    return t;
}

DIST_API dist_tensor_t *dist_tensor_softmax(dist_tensor_t *a) { return dist_rpc__softmax(DIST_T__SOFTMAX, "softmax", a); }
DIST_API dist_tensor_t *dist_tensor_log_softmax(dist_tensor_t *a) { return dist_rpc__softmax(DIST_T__LOG_SOFTMAX, "log_softmax", a); }

DIST_API dist_tensor_t *dist_tensor_nll_loss(dist_tensor_t *logp, const int64_t *target) {
    dist_tensor_t *t;
    int64_t n, c;
    double acc = 0;
    char x[64];
    if (!logp || !target) { dist_rpc__fail(DIST_ERR_INVALID, "nll_loss: NULL %s", logp ? "targets" : "tensor (did an operation before fail?)"); return NULL; }
    if (logp->ndim != 2 || logp->shape[0] == 0) {
        dist_rpc__fail(DIST_ERR_INVALID, "nll_loss: log-probabilities %s (needs [N,C], N > 0)", dist_rpc__shape_str(logp, x, sizeof x));
        return NULL;
    }
    n = logp->shape[0]; c = logp->shape[1];
    for (int64_t i = 0; i < n; i++)
        if (target[i] < 0 || target[i] >= c) { dist_rpc__fail(DIST_ERR_INVALID, "nll_loss: target %lld of row %lld is not a class 0..%lld", (long long)target[i], (long long)i, (long long)c - 1); return NULL; }
    if (!(t = dist_rpc__result(DIST_T__NLL, 0, NULL, logp, NULL, NULL))) return NULL;
    for (int64_t i = 0; i < n; i++) acc -= logp->data[i * c + target[i]];
    t->data[0] = (float)(acc / (double)n);
    if (t->op == DIST_T__NLL) {
        if (!(t->aux = DIST_MALLOC((size_t)n * sizeof(int64_t)))) { dist_tensor_release(t); dist_rpc__fail(DIST_ERR_NOMEM, "nll_loss: out of memory"); return NULL; }
        memcpy(t->aux, target, (size_t)n * sizeof(int64_t));
    }
    return t;
}

DIST_API dist_tensor_t *dist_tensor_cross_entropy(dist_tensor_t *logits, const int64_t *target) {
    dist_tensor_t *lp = dist_tensor_log_softmax(logits), *t = dist_tensor_nll_loss(lp, target);
    dist_tensor_release(lp);
    return t;
}

DIST_API dist_tensor_t *dist_tensor_dropout(dist_tensor_t *a, float p, uint64_t seed, int training) {
    dist_tensor_t *t;
    float *mask, keep;
    if (!a) { dist_rpc__fail(DIST_ERR_INVALID, "dropout: NULL tensor (did an operation before fail?)"); return NULL; }
    if (!(p >= 0.0f && p < 1.0f)) { dist_rpc__fail(DIST_ERR_INVALID, "dropout: p = %g (0 <= p < 1)", p); return NULL; }
    if (!training || p == 0.0f) return dist_tensor_retain(a);
    if (!(mask = (float *)DIST_MALLOC((a->numel ? a->numel : 1) * sizeof(float)))) { dist_rpc__fail(DIST_ERR_NOMEM, "dropout: out of memory"); return NULL; }
    if (!(t = dist_rpc__result(DIST_T__DROPOUT, a->ndim, a->shape, a, NULL, NULL))) { DIST_FREE(mask); return NULL; }
    keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < a->numel; i++) {
        mask[i] = dist_rpc__unit(&seed) < p ? 0.0f : keep;
        t->data[i] = a->data[i] * mask[i];
    }
    if (t->op == DIST_T__DROPOUT) t->aux = mask; else DIST_FREE(mask);
    return t;
}

/* ---- cat and stack ----
   The output is outer x (the inputs' rows, one after another) x inner
   along the dimension they meet: input i's block of rows_i x inner
   elements at each outer index (stack's inputs have one row each, in a
   dimension of their own). */
static void dist_rpc__cat_copy(dist_tensor_t *t, int backward) {
    int d = t->cat_dim;
    size_t outer = 1, inner = 1, row = (size_t)t->shape[d], off = 0;
    for (int k = 0; k < d; k++) outer *= (size_t)t->shape[k];
    for (int k = d + 1; k < t->ndim; k++) inner *= (size_t)t->shape[k];
    for (int i = 0; i < t->nin; i++) {
        dist_tensor_t *a = t->ins[i];
        size_t rows = a->ndim == t->ndim ? (size_t)a->shape[d] : 1, len = rows * inner;   /* (stack: one, in a dimension of its own) */
        if (backward && !a->g) { off += rows; continue; }
        for (size_t o = 0; o < outer; o++) {
            float *y = (backward ? t->g : t->data) + (o * row + off) * inner;
            if (backward) { float *ga = a->g + o * len; for (size_t k = 0; k < len; k++) ga[k] += y[k]; }
            else if (len) memcpy(y, a->data + o * len, len * sizeof(float));
        }
        off += rows;
    }
}

static dist_tensor_t *dist_rpc__cat(const char *what, int n, dist_tensor_t *const *ts, int dim, int stack) {
    int64_t shape[DIST_TENSOR_MAX_DIMS];
    int nd, grad = 0;
    dist_tensor_t *t;
    char b1[64], b2[64];
    if (n < 1 || !ts) { dist_rpc__fail(DIST_ERR_INVALID, "%s: %d tensors (at least 1)", what, n); return NULL; }
    for (int i = 0; i < n; i++) if (!ts[i]) { dist_rpc__fail(DIST_ERR_INVALID, "%s: tensor %d is NULL", what, i); return NULL; }
    nd = ts[0]->ndim + (stack ? 1 : 0);
    if (dim < 0) dim += nd;
    if (nd > DIST_TENSOR_MAX_DIMS || dim < 0 || dim >= nd || (!stack && nd == 0)) {
        dist_rpc__fail(DIST_ERR_INVALID, "%s: dimension %d of tensors of %d dimensions (the result has at most %d)", what, dim, ts[0]->ndim, DIST_TENSOR_MAX_DIMS);
        return NULL;
    }
    for (int k = 0, j = 0; k < nd; k++) shape[k] = stack && k == dim ? n : ts[0]->shape[j++];
    if (!stack) shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        const dist_tensor_t *a = ts[i];
        int bad = a->ndim != ts[0]->ndim;
        for (int k = 0; k < a->ndim && !bad; k++) bad = a->shape[k] != ts[0]->shape[k] && (stack || k != dim);
        if (bad) {
            dist_rpc__fail(DIST_ERR_INVALID, "%s: tensor %d is %s, tensor 0 %s (%s)", what, i, dist_rpc__shape_str(a, b1, sizeof b1),
                           dist_rpc__shape_str(ts[0], b2, sizeof b2), stack ? "stack needs one shape" : "cat needs one shape but along its dimension");
            return NULL;
        }
        if (!stack) shape[dim] += a->shape[dim];
        grad |= a->requires_grad;
    }
    if (!(t = dist_rpc__tensor_make(nd, shape, 0))) return NULL;
    if (!(t->ins = (dist_tensor_t **)DIST_MALLOC((size_t)n * sizeof *t->ins))) { dist_tensor_release(t); dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory", what); return NULL; }
    for (int i = 0; i < n; i++) t->ins[i] = ts[i];
    t->nin = n; t->cat_dim = dim;
    dist_rpc__cat_copy(t, 0);
    if (!dist_rpc__no_grad && grad) {
        t->requires_grad = 1;
        t->op = DIST_T__CAT;
        for (int i = 0; i < n; i++) dist_tensor_retain(ts[i]);
    } else {
        DIST_FREE(t->ins);                          /* no graph: nothing kept */
        t->ins = NULL; t->nin = 0;
    }
    return t;
}

DIST_API dist_tensor_t *dist_tensor_cat(int n, dist_tensor_t *const *ts, int dim) { return dist_rpc__cat("cat", n, ts, dim, 0); }
DIST_API dist_tensor_t *dist_tensor_stack(int n, dist_tensor_t *const *ts, int dim) { return dist_rpc__cat("stack", n, ts, dim, 1); }

/* ---- backward ---- */

/* Adds what node `t` (its gradient t->g) gives each input that needs one
   (into in->g).  -1 when out of memory. */
static int dist_rpc__backward_op(dist_tensor_t *t) {
    dist_tensor_t *a = t->in[0], *b = t->in[1], *c = t->in[2];
    const float *g = t->g, *y = t->data;
    float *ga = a && a->g ? a->g : NULL, *gb = b && b->g ? b->g : NULL, *gc = c && c->g ? c->g : NULL;
    size_t n = t->numel;
    if (t->op == DIST_T__CAT) {                     /* each input's block of the gradient, back where it came from */
        dist_rpc__cat_copy(t, 1);
        return 0;
    }
    if (!ga && !gb && !gc) return 0;                /* no input wants one (a leaf's flag turned off after the graph was built) */
    switch (t->op) {
    case DIST_T__ADD: case DIST_T__SUB: case DIST_T__MUL: case DIST_T__DIV: {
        dist_rpc__bc bc;
        int nd;
        int64_t sh[4];
        const float *x = a->data, *z = b->data;
        dist_rpc__broadcast("backward", a, b, &bc, &nd, sh);
        if (t->op == DIST_T__ADD) DIST_RPC__BC_LOOP(bc, { if (ga) ga[ia] += g[io]; if (gb) gb[ib] += g[io]; });
        else if (t->op == DIST_T__SUB) DIST_RPC__BC_LOOP(bc, { if (ga) ga[ia] += g[io]; if (gb) gb[ib] -= g[io]; });
        else if (t->op == DIST_T__MUL) DIST_RPC__BC_LOOP(bc, { if (ga) ga[ia] += g[io] * z[ib]; if (gb) gb[ib] += g[io] * x[ia]; });
        else DIST_RPC__BC_LOOP(bc, { if (ga) ga[ia] += g[io] / z[ib]; if (gb) gb[ib] -= g[io] * x[ia] / (z[ib] * z[ib]); });
        return 0;
    }
    case DIST_T__NEG: for (size_t i = 0; i < n; i++) ga[i] -= g[i]; return 0;
    case DIST_T__SCALE: for (size_t i = 0; i < n; i++) ga[i] += t->s * g[i]; return 0;
    case DIST_T__RELU: for (size_t i = 0; i < n; i++) ga[i] += y[i] > 0 ? g[i] : 0.0f; return 0;
    case DIST_T__TANH: for (size_t i = 0; i < n; i++) ga[i] += g[i] * (1.0f - y[i] * y[i]); return 0;
    case DIST_T__SIGMOID: for (size_t i = 0; i < n; i++) ga[i] += g[i] * y[i] * (1.0f - y[i]); return 0;
    case DIST_T__EXP: for (size_t i = 0; i < n; i++) ga[i] += g[i] * y[i]; return 0;
    case DIST_T__LOG: for (size_t i = 0; i < n; i++) ga[i] += g[i] / a->data[i]; return 0;
    case DIST_T__SUM: case DIST_T__MEAN: {
        float v = t->op == DIST_T__MEAN && a->numel ? g[0] / (float)a->numel : g[0];
        for (size_t i = 0; i < a->numel; i++) ga[i] += v;
        return 0;
    }
    case DIST_T__SOFTMAX: case DIST_T__LOG_SOFTMAX: {
        int64_t cols = a->shape[a->ndim - 1], rows = (int64_t)(a->numel / (size_t)cols);
        for (int64_t r = 0; r < rows; r++) {
            const float *gr = g + r * cols, *yr = y + r * cols;
            float *o = ga + r * cols;
            double dot = 0;
            if (t->op == DIST_T__SOFTMAX) {
                for (int64_t j = 0; j < cols; j++) dot += (double)gr[j] * yr[j];
                for (int64_t j = 0; j < cols; j++) o[j] += (float)(yr[j] * (gr[j] - dot));
            } else {
                for (int64_t j = 0; j < cols; j++) dot += gr[j];
                for (int64_t j = 0; j < cols; j++) o[j] += (float)(gr[j] - exp((double)yr[j]) * dot);
            }
        }
        return 0;
    }
    case DIST_T__NLL: {
        const int64_t *tg = (const int64_t *)t->aux;
        int64_t rows = a->shape[0], cols = a->shape[1];
        for (int64_t i = 0; i < rows; i++) ga[i * cols + tg[i]] -= g[0] / (float)rows;
        return 0;
    }
    case DIST_T__DROPOUT: {
        const float *mask = (const float *)t->aux;
        for (size_t i = 0; i < n; i++) ga[i] += g[i] * mask[i];
        return 0;
    }
    case DIST_T__MATMUL: {                              /* C = A B: dA += dC B^T, dB += A^T dC */
        int64_t m = a->shape[0], k = a->shape[1], nn = b->shape[1];
        if (ga) {
            float *scratch = (float *)DIST_MALLOC((b->numel ? b->numel : 1) * sizeof(float));
            if (!scratch) return -1;
            dist_rpc__gemm_nt(m, k, nn, g, b->data, ga, scratch);
            DIST_FREE(scratch);
        }
        if (gb) dist_rpc__gemm(1, k, nn, m, a->data, g, gb);
        return 0;
    }
    case DIST_T__LINEAR: {                              /* y = x w^T + b: dx += dy w, dw += dy^T x, db += rows of dy */
        int64_t rows = a->shape[0], in = a->shape[1], out = b->shape[0];
        if (ga) dist_rpc__gemm(0, rows, in, out, g, b->data, ga);
        if (gb) dist_rpc__gemm(1, out, in, rows, g, a->data, gb);
        if (gc) for (int64_t i = 0; i < rows; i++) for (int64_t j = 0; j < out; j++) gc[j] += g[i * out + j];
        return 0;
    }
    default: return 0;
    }
}

typedef struct { dist_tensor_t *t; int next; } dist_rpc__frame;

/* The nodes below roots[0..n) that need a gradient, inputs before
   outputs. */
static int dist_rpc__topo(int nroots, dist_tensor_t *const *roots, dist_tensor_t ***out, size_t *nout) {
    static unsigned gen;             /* (under the autograd lock) */
    unsigned mark = ++gen;
    size_t n = 0, cap = 64, sp = 0, scap = 64;
    dist_tensor_t **list = (dist_tensor_t **)DIST_MALLOC(cap * sizeof *list);
    dist_rpc__frame *st = (dist_rpc__frame *)DIST_MALLOC(scap * sizeof *st);
    if (!list || !st) goto nomem;
    for (int r = 0; r < nroots; r++) {
        if (!roots[r]->requires_grad || roots[r]->mark == mark) continue;
        roots[r]->mark = mark;
        st[sp].t = roots[r]; st[sp++].next = 0;
        while (sp) {                                /* depth first, iteratively: a deep graph does not overflow the stack */
            dist_tensor_t *t = st[sp - 1].t;
            if (st[sp - 1].next < 3 + t->nin) {
                int k = st[sp - 1].next++;
                dist_tensor_t *in = k < 3 ? t->in[k] : t->ins[k - 3];
                if (!in || !in->requires_grad || in->mark == mark) continue;
                in->mark = mark;
                if (sp == scap) {
                    dist_rpc__frame *ns = (dist_rpc__frame *)DIST_REALLOC(st, 2 * scap * sizeof *st);
                    if (!ns) goto nomem;
                    st = ns;
                    scap *= 2;
                }
                st[sp].t = in; st[sp++].next = 0;
                continue;
            }
            sp--;
            if (n == cap) {
                dist_tensor_t **nl = (dist_tensor_t **)DIST_REALLOC(list, 2 * cap * sizeof *list);
                if (!nl) goto nomem;
                list = nl; cap *= 2;
            }
            list[n++] = t;
        }
    }
    DIST_FREE(st);
    *out = list; *nout = n;
    return 0;
nomem:
    DIST_FREE(list); DIST_FREE(st);
    return -1;
}

/* Every backward pass on this worker holds it (they share the nodes'
   scratch fields), and it guards the autograd contexts. */
static dist__mutex dist_rpc__ag_lock = DIST__MUTEX_INITIALIZER;
typedef struct dist_rpc__actx dist_rpc__actx;
static dist_result dist_rpc__ag_leaf(dist_rpc__actx *cx, dist_tensor_t *t, const float *g);
static dist_result dist_rpc__ag_recv_grad(dist_rpc__actx *cx, dist_tensor_t *t, const char *what);

/* The engine (autograd lock held): backward from roots[0..n), each with
   its gradient rg[i] (NULL: 1, for a root of one element), into context
   `cx` (leaves' gradients there, received tensors' gradients in their
   records) or, without one, into the leaves' own gradients. */
static dist_result dist_rpc__engine(int nroots, dist_tensor_t *const *roots, const float *const *rg, dist_rpc__actx *cx, const char *what) {
    dist_tensor_t **list = NULL;
    size_t n = 0, i;
    dist_result res = DIST_OK;
    if (dist_rpc__topo(nroots, roots, &list, &n) != 0) return dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory", what);
    for (i = 0; i < n; i++)                        /* a received tensor needs its context: checked before anything changes */
        if (list[i]->op == DIST_T__RECV && (res = dist_rpc__ag_recv_grad(cx, list[i], what)) != DIST_OK) { DIST_FREE(list); return res; }
    for (i = 0; i < n; i++)
        if (!(list[i]->g = (float *)DIST_MALLOC((list[i]->numel ? list[i]->numel : 1) * sizeof(float)))) break;
        else memset(list[i]->g, 0, (list[i]->numel ? list[i]->numel : 1) * sizeof(float));
    if (i < n) { res = dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory for the gradients", what); n = i; goto out; }
    for (int r = 0; r < nroots; r++) {
        dist_tensor_t *t = roots[r];
        if (!t->requires_grad) continue;
        if (rg && rg[r]) for (size_t k = 0; k < t->numel; k++) t->g[k] += rg[r][k];
        else t->g[0] += 1.0f;
    }
    for (i = n; i-- > 0;) {
        dist_tensor_t *t = list[i];
        if (t->op == DIST_T__RECV) res = dist_rpc__ag_recv_grad(cx, t, NULL);
        else if (t->op != DIST_T__LEAF) res = dist_rpc__backward_op(t) != 0 ? dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory", what) : DIST_OK;
        else if (cx) res = dist_rpc__ag_leaf(cx, t, t->g);
        else if (!t->grad && !(t->grad = dist_tensor_new(t->ndim, t->shape, NULL))) res = DIST_ERR_NOMEM;
        else for (size_t k = 0; k < t->numel; k++) t->grad->data[k] += t->g[k];
        if (res != DIST_OK) break;
    }
out:
    for (i = 0; i < n; i++) { DIST_FREE(list[i]->g); list[i]->g = NULL; }
    DIST_FREE(list);
    return res;
}

DIST_API dist_result dist_tensor_backward(dist_tensor_t *root, const dist_tensor_t *grad) {
    dist_result res;
    char x[64], y[64];
    const float *rg;
    if (!root) return dist_rpc__fail(DIST_ERR_INVALID, "backward: NULL tensor (did an operation before fail?)");
    if (!grad && root->numel != 1)
        return dist_rpc__fail(DIST_ERR_INVALID, "backward: the root %s is not a single value: pass its gradient", dist_rpc__shape_str(root, x, sizeof x));
    if (grad && (grad->ndim != root->ndim || memcmp(grad->shape, root->shape, (size_t)root->ndim * sizeof root->shape[0]) != 0))
        return dist_rpc__fail(DIST_ERR_INVALID, "backward: a gradient %s for a root %s", dist_rpc__shape_str(grad, x, sizeof x), dist_rpc__shape_str(root, y, sizeof y));
    if (!root->requires_grad) return dist_rpc__fail(DIST_ERR_INVALID, "backward: nothing below this tensor requires a gradient");
    rg = grad ? grad->data : NULL;
    dist__mutex_lock(&dist_rpc__ag_lock);
    res = dist_rpc__engine(1, &root, &rg, NULL, "backward");
    dist__mutex_unlock(&dist_rpc__ag_lock);
    return res;
}

/* ---- optimizers ---- */
struct dist_optim {
    int n, adam;
    dist_tensor_t **p;
    float **state;                   /* per parameter: momentum (SGD), or m then v (Adam) */
    int64_t *steps;                  /* per parameter: the updates it had (torch counts from a parameter's first gradient) */
    float lr, momentum, wd, b1, b2, eps;
};

static dist_optim_t *dist_rpc__optim(int n, dist_tensor_t *const *params, int adam) {
    dist_optim_t *o;
    if (n < 0 || (n && !params)) { dist_rpc__fail(DIST_ERR_INVALID, "optimizer: %d parameter%s at %p", n, DIST__PLURAL(n), (const void *)params); return NULL; }
    for (int i = 0; i < n; i++)
        if (!params[i]) { dist_rpc__fail(DIST_ERR_INVALID, "optimizer: parameter %d is NULL", i); return NULL; }
    if (!(o = (dist_optim_t *)DIST_MALLOC(sizeof *o))) { dist_rpc__fail(DIST_ERR_NOMEM, "optimizer: out of memory"); return NULL; }
    memset(o, 0, sizeof *o);
    o->p = (dist_tensor_t **)DIST_MALLOC((size_t)(n ? n : 1) * sizeof *o->p);
    o->state = (float **)DIST_MALLOC((size_t)(n ? n : 1) * sizeof *o->state);
    o->steps = (int64_t *)DIST_MALLOC((size_t)(n ? n : 1) * sizeof *o->steps);
    if (!o->p || !o->state || !o->steps) { DIST_FREE(o->p); DIST_FREE(o->state); DIST_FREE(o->steps); DIST_FREE(o); dist_rpc__fail(DIST_ERR_NOMEM, "optimizer: out of memory"); return NULL; }
    memset(o->state, 0, (size_t)(n ? n : 1) * sizeof *o->state);
    memset(o->steps, 0, (size_t)(n ? n : 1) * sizeof *o->steps);
    o->n = n;
    o->adam = adam;
    for (int i = 0; i < n; i++) o->p[i] = dist_tensor_retain(params[i]);
    return o;
}

DIST_API dist_optim_t *dist_optim_sgd(int n, dist_tensor_t *const *params, float lr, float momentum, float weight_decay) {
    dist_optim_t *o = dist_rpc__optim(n, params, 0);
    if (o) { o->lr = lr; o->momentum = momentum; o->wd = weight_decay; }
    return o;
}

DIST_API dist_optim_t *dist_optim_adam(int n, dist_tensor_t *const *params, float lr, float beta1, float beta2, float eps, float weight_decay) {
    dist_optim_t *o = dist_rpc__optim(n, params, 1);
    if (o) { o->lr = lr; o->b1 = beta1; o->b2 = beta2; o->eps = eps; o->wd = weight_decay; }
    return o;
}

/* One update of parameter i from gradient `g` (torch's SGD and Adam). */
static int dist_rpc__optim_update(dist_optim_t *o, int i, const float *g) {
    dist_tensor_t *p = o->p[i];
    size_t n = p->numel;
    float *w = p->data;
    int64_t step = ++o->steps[i];
    if (!o->state[i] && (o->adam || o->momentum != 0.0f)) {
        size_t bytes = (n ? n : 1) * (o->adam ? 2 : 1) * sizeof(float);
        if (!(o->state[i] = (float *)DIST_MALLOC(bytes))) return -1;
        memset(o->state[i], 0, bytes);
    }
    if (!o->adam) {
        float *buf = o->state[i];
        for (size_t k = 0; k < n; k++) {
            float d = g[k] + o->wd * w[k];
            if (buf) { buf[k] = step == 1 ? d : o->momentum * buf[k] + d; d = buf[k]; }
            w[k] -= o->lr * d;
        }
    } else {
        float *m = o->state[i], *v = m + n;
        double c1 = 1.0 - pow(o->b1, (double)step), c2 = 1.0 - pow(o->b2, (double)step);
        for (size_t k = 0; k < n; k++) {
            float d = g[k] + o->wd * w[k];
            m[k] = o->b1 * m[k] + (1.0f - o->b1) * d;
            v[k] = o->b2 * v[k] + (1.0f - o->b2) * d * d;
            w[k] -= (float)(o->lr * (m[k] / c1) / (sqrt(v[k] / c2) + o->eps));
        }
    }
    return 0;
}

/* Steps write parameters under it (before the autograd lock, never
   inside it); dist_params_read_enter/exit read under it.
   A mutex and a condition (a reader-writer lock is not in every
   platform's basic set), preferring writers: a step waiting keeps new
   readers out, so a stream of forwards cannot starve it. */
static struct {
    dist__mutex m;
    dist__cond c;
    int readers, writer, writers_waiting;
} dist_rpc__param_lock = { DIST__MUTEX_INITIALIZER, DIST__COND_INITIALIZER, 0, 0, 0 };
DIST_API void dist_params_read_enter(void) {
    dist__mutex_lock(&dist_rpc__param_lock.m);
    while (dist_rpc__param_lock.writer || dist_rpc__param_lock.writers_waiting) dist__cond_wait(&dist_rpc__param_lock.c, &dist_rpc__param_lock.m);
    dist_rpc__param_lock.readers++;
    dist__mutex_unlock(&dist_rpc__param_lock.m);
}
DIST_API void dist_params_read_exit(void) {
    dist__mutex_lock(&dist_rpc__param_lock.m);
    if (--dist_rpc__param_lock.readers == 0) dist__cond_broadcast(&dist_rpc__param_lock.c);
    dist__mutex_unlock(&dist_rpc__param_lock.m);
}
static void dist_rpc__params_write_enter(void) {
    dist__mutex_lock(&dist_rpc__param_lock.m);
    dist_rpc__param_lock.writers_waiting++;
    while (dist_rpc__param_lock.writer || dist_rpc__param_lock.readers) dist__cond_wait(&dist_rpc__param_lock.c, &dist_rpc__param_lock.m);
    dist_rpc__param_lock.writers_waiting--;
    dist_rpc__param_lock.writer = 1;
    dist__mutex_unlock(&dist_rpc__param_lock.m);
}
static void dist_rpc__params_write_exit(void) {
    dist__mutex_lock(&dist_rpc__param_lock.m);
    dist_rpc__param_lock.writer = 0;
    dist__cond_broadcast(&dist_rpc__param_lock.c);
    dist__mutex_unlock(&dist_rpc__param_lock.m);
}

DIST_API dist_result dist_optim_step(dist_optim_t *o) {
    int bad = -1;
    if (!o) return dist_rpc__fail(DIST_ERR_INVALID, "optim_step: NULL optimizer");
    dist_rpc__params_write_enter();
    for (int i = 0; i < o->n && bad < 0; i++)
        if (o->p[i]->grad && dist_rpc__optim_update(o, i, o->p[i]->grad->data) != 0) bad = i;
    dist_rpc__params_write_exit();
    if (bad >= 0) return dist_rpc__fail(DIST_ERR_NOMEM, "optim_step: out of memory for parameter %d's state", bad);
    return DIST_OK;
}

DIST_API void dist_optim_zero_grad(dist_optim_t *o) {
    for (int i = 0; o && i < o->n; i++) dist_tensor_zero_grad(o->p[i]);
}

DIST_API void dist_optim_free(dist_optim_t *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) { dist_tensor_release(o->p[i]); DIST_FREE(o->state[i]); }
    DIST_FREE(o->p);
    DIST_FREE(o->state);
    DIST_FREE(o->steps);
    DIST_FREE(o);
}

/* ---- tensors as values ---- */
static void dist_rpc__tensor_value_release(void *data, void *user) { (void)data; dist_tensor_release((dist_tensor_t *)user); }

DIST_API dist_value_t *dist_value_from_tensor(dist_tensor_t *t) {
    dist_value_t *v;
    if (!t) { dist_rpc__fail(DIST_ERR_INVALID, "value_from_tensor: NULL tensor"); return NULL; }
    v = dist_value_tensor_wrap(DIST_FLOAT32, t->ndim, t->shape, t->data, dist_rpc__tensor_value_release, t);
    if (v) dist_tensor_retain(t);
    return v;
}

DIST_API dist_tensor_t *dist_tensor_from_value(const dist_value_t *v) {
    dist_tensor_view tv;
    dist_tensor_t *t;
    if (dist_value_get_tensor(v, &tv) != DIST_OK) return NULL;
    if ((tv.dtype != DIST_FLOAT32 && tv.dtype != DIST_FLOAT64) || tv.ndim > DIST_TENSOR_MAX_DIMS) {
        dist_rpc__fail(DIST_ERR_TYPE, "tensor_from_value: a %s tensor of %d dimension%s (float32 or float64, at most %d)", dist_dtype_name(tv.dtype),
                       tv.ndim, DIST__PLURAL(tv.ndim), DIST_TENSOR_MAX_DIMS);
        return NULL;
    }
    if (!(t = dist_rpc__tensor_make(tv.ndim, tv.shape, 0))) return NULL;
    if (tv.dtype == DIST_FLOAT32) memcpy(t->data, tv.data, t->numel * sizeof(float));
    else for (size_t i = 0; i < t->numel; i++) t->data[i] = (float)((const double *)tv.data)[i];
    if (v->u.t.mark && !dist_rpc__no_grad) {       /* received in an autograd context (its mark): linked to its send */
        dist_rpc__agtag *tag = (dist_rpc__agtag *)DIST_MALLOC(sizeof *tag);
        if (!tag) { dist_tensor_release(t); dist_rpc__fail(DIST_ERR_NOMEM, "tensor_from_value: out of memory"); return NULL; }
        *tag = *(const dist_rpc__agtag *)v->u.t.mark;
        t->aux = tag;
        t->op = DIST_T__RECV;
        t->requires_grad = 1;
    }
    return t;
}

DIST_API dist_tensor_t *dist_value_as_tensor(const dist_value_t *v) {
    return v && v->type == DIST_VALUE_TENSOR && v->u.t.release == dist_rpc__tensor_value_release ? (dist_tensor_t *)v->u.t.user : NULL;
}


DIST_API dist_tensor_t *dist_rref_local_tensor(dist_rref_t *r) {
    const dist_value_t *v = NULL;
    return r && dist_rref_local_value(r, &v) == DIST_OK ? dist_value_as_tensor(v) : NULL;
}

DIST_API dist_value_t *dist_rref_params(int n, dist_tensor_t *const *params) {
    dist_value_t *l;
    if (n < 0 || (n && !params)) { dist_rpc__fail(DIST_ERR_INVALID, "rref_params: %d parameter%s, NULL array", n, DIST__PLURAL(n)); return NULL; }
    if (!(l = dist_value_list())) return NULL;
    for (int i = 0; i < n; i++) {
        dist_rref_t *r = NULL;
        dist_result res = params[i] ? dist_rref_new(dist_value_from_tensor(params[i]), &r) : dist_rpc__fail(DIST_ERR_INVALID, "rref_params: parameter %d is NULL", i);
        if (res == DIST_OK) res = dist_value_append(l, dist_value_rref(r));
        dist_rref_free(r);
        if (res != DIST_OK) { dist_value_free(l); return NULL; }
    }
    return l;
}

/* [SECTION] distributed autograd
   A request or a reply made in an autograd context has flag
   DIST_RPC__FLAG_CONTEXT, and its body begins with
      0 context id u64 | 8 message id u64 (0 when no tensor in it needs a
      gradient) | 16 n u32 | 20 n x u32: the ordinals, increasing, of
      those tensors among the value's tensors (counted depth first)
   then the value.  The sender records a send (message id -> the tensors,
   retained); the receiver a recv (message id -> each tensor's size) and
   marks those tensor nodes, so that dist_tensor_from_value makes them
   DIST_T__RECV nodes.  Both note the other worker as touched.  A context
   id is (creator rank + 1) << 48 | its counter there; a message id the
   same with the sender's rank, so (context, message) names one send.
   Backward: the engine runs the local graph; a RECV node's gradient adds
   into its recv record; then each recv touched goes back to its sender as
   "ag_grads" [context, message, [gradient or none per tensor]], where the
   engine runs from the send's tensors, and so on.  Each "ag_grads" is
   answered once everything it set off is done (deferred, no thread
   waits), so the root's backward returns when the whole pass is.
   Contexts end with "ag_end" notices to the touched workers, which pass
   them on (a context they no longer hold stops it). */
#define DIST_RPC__AG_HDR 20

typedef struct { uint64_t msg; int to, n; dist_tensor_t **t; } dist_rpc__ag_send;
typedef struct { uint64_t msg; int from, n, touched; size_t *numel; float **g; } dist_rpc__ag_recv;
typedef struct { dist_tensor_t *t, *g; } dist_rpc__ag_grad;
struct dist_rpc__actx {
    int64_t id;
    dist_rpc__actx *next;
    int *known; int nknown, capknown;                  /* the workers it touched */
    dist_rpc__ag_send *sends; int nsends, capsends;
    dist_rpc__ag_recv *recvs; int nrecvs, caprecvs;
    dist_rpc__ag_grad *grads; int ngrads, capgrads;    /* the gradients of the tensors here */
};
typedef struct { int64_t id; dist_optim_t *o; } dist_rpc__ag_opt;
static struct {                                         /* under dist_rpc__ag_lock */
    dist_rpc__actx *ctxs;
    int nctxs;
    uint64_t next_ctx, next_msg;
    dist_rpc__ag_opt *opts; int nopts, capopts;         /* distributed optimizers' parts owned here */
    int64_t next_opt;
} dist_rpc__ag;

static int dist_rpc__my_rank(void) { return dist_rpc__g.up ? dist_rpc__g.rank : 0; }

static dist_rpc__actx *dist_rpc__ag_find(int64_t id) {
    dist_rpc__actx *c;
    for (c = dist_rpc__ag.ctxs; c && c->id != id; c = c->next) { }
    return c;
}

static dist_rpc__actx *dist_rpc__ag_get(int64_t id) {
    dist_rpc__actx *c = dist_rpc__ag_find(id);
    if (c || !(c = (dist_rpc__actx *)DIST_MALLOC(sizeof *c))) return c;
    memset(c, 0, sizeof *c);
    c->id = id;
    c->next = dist_rpc__ag.ctxs;
    dist_rpc__ag.ctxs = c;
    dist_rpc__ag.nctxs++;
    return c;
}

static dist_rpc__actx *dist_rpc__ag_unlink(int64_t id) {
    dist_rpc__actx **pp, *c;
    for (pp = &dist_rpc__ag.ctxs; *pp && (*pp)->id != id; pp = &(*pp)->next) { }
    if (!(c = *pp)) return NULL;
    *pp = c->next;
    dist_rpc__ag.nctxs--;
    return c;
}

static int dist_rpc__ag_touch(dist_rpc__actx *c, int rank) {
    for (int i = 0; i < c->nknown; i++) if (c->known[i] == rank) return 0;
    if (dist_rpc__reserve(&c->known, &c->capknown, c->nknown + 1, sizeof *c->known) != 0) return -1;
    c->known[c->nknown++] = rank;
    return 0;
}

/* Frees a context (unlinked; no lock needed: it is no one's now). */
static void dist_rpc__ag_free(dist_rpc__actx *c) {
    if (!c) return;
    for (int i = 0; i < c->nsends; i++) {
        for (int k = 0; k < c->sends[i].n; k++) dist_tensor_release(c->sends[i].t[k]);
        DIST_FREE(c->sends[i].t);
    }
    for (int i = 0; i < c->nrecvs; i++) {
        for (int k = 0; k < c->recvs[i].n; k++) DIST_FREE(c->recvs[i].g[k]);
        DIST_FREE(c->recvs[i].g);
        DIST_FREE(c->recvs[i].numel);
    }
    for (int i = 0; i < c->ngrads; i++) { dist_tensor_release(c->grads[i].t); dist_tensor_release(c->grads[i].g); }
    DIST_FREE(c->known); DIST_FREE(c->sends); DIST_FREE(c->recvs); DIST_FREE(c->grads);
    DIST_FREE(c);
}

static dist_rpc__ag_send *dist_rpc__ag_send_of(dist_rpc__actx *c, uint64_t msg) {
    for (int i = c->nsends; i-- > 0;) if (c->sends[i].msg == msg) return &c->sends[i];
    return NULL;
}

static dist_rpc__ag_recv *dist_rpc__ag_recv_of(dist_rpc__actx *c, uint64_t msg) {
    for (int i = c->nrecvs; i-- > 0;) if (c->recvs[i].msg == msg) return &c->recvs[i];
    return NULL;
}

/* Adds `g` into the context's gradient of leaf `t` (engine). */
static dist_result dist_rpc__ag_leaf(dist_rpc__actx *c, dist_tensor_t *t, const float *g) {
    dist_rpc__ag_grad *e = NULL;
    for (int i = 0; i < c->ngrads && !e; i++) if (c->grads[i].t == t) e = &c->grads[i];
    if (!e) {
        dist_tensor_t *z = dist_tensor_new(t->ndim, t->shape, NULL);
        if (!z || dist_rpc__reserve(&c->grads, &c->capgrads, c->ngrads + 1, sizeof *c->grads) != 0) {
            dist_tensor_release(z);
            return dist_rpc__fail(DIST_ERR_NOMEM, "dist_autograd_backward: out of memory for a gradient");
        }
        e = &c->grads[c->ngrads++];
        e->t = dist_tensor_retain(t);
        e->g = z;
    }
    for (size_t k = 0; k < t->numel; k++) e->g->data[k] += g[k];
    return DIST_OK;
}

/* A received tensor in the engine: with `what`, checks that it can take
   its gradient (the sentence names the problem); without, adds it into
   its recv record. */
static dist_result dist_rpc__ag_recv_grad(dist_rpc__actx *c, dist_tensor_t *t, const char *what) {
    const dist_rpc__agtag *tag = (const dist_rpc__agtag *)t->aux;
    dist_rpc__ag_recv *r = c ? dist_rpc__ag_recv_of(c, tag->msg) : NULL;
    if (what) {
        if (!c)
            return dist_rpc__fail(DIST_ERR_INVALID, "%s: the graph holds a tensor received by RPC in autograd context %lld: use dist_autograd_backward(%lld, ...)",
                                  what, (long long)tag->ctx, (long long)tag->ctx);
        if (tag->ctx != c->id)
            return dist_rpc__fail(DIST_ERR_INVALID, "%s: the graph holds a tensor received in autograd context %lld, not in %lld", what, (long long)tag->ctx,
                                  (long long)c->id);
        if (!r || tag->slot >= (uint32_t)r->n || r->numel[tag->slot] != t->numel)
            return dist_rpc__fail(DIST_ERR_INVALID, "%s: a tensor received in autograd context %lld has no record of its send here", what, (long long)c->id);
        return DIST_OK;
    }
    if (!r->g[tag->slot]) {
        if (!(r->g[tag->slot] = (float *)DIST_MALLOC((t->numel ? t->numel : 1) * sizeof(float))))
            return dist_rpc__fail(DIST_ERR_NOMEM, "dist_autograd_backward: out of memory");
        memset(r->g[tag->slot], 0, (t->numel ? t->numel : 1) * sizeof(float));
    }
    for (size_t k = 0; k < t->numel; k++) r->g[tag->slot][k] += t->g[k];
    r->touched = 1;
    return DIST_OK;
}

/* The tensors of `v` that carry a gradient, depth first: their number;
   their ordinals written (u32) at `ords`, the tensors into `ts`, when
   given. */
static uint32_t dist_rpc__ag_walk(const dist_value_t *v, uint32_t *ord, uint8_t *ords, dist_tensor_t **ts, uint32_t n) {
    if (v->type == DIST_VALUE_LIST) {
        for (size_t i = 0; i < v->u.list.n; i++) n = dist_rpc__ag_walk(v->u.list.items[i], ord, ords, ts, n);
    } else if (v->type == DIST_VALUE_TENSOR) {
        dist_tensor_t *t = dist_value_as_tensor(v);
        if (t && t->requires_grad) {
            if (ords) dist_rpc__put32(ords + 4 * (size_t)n, *ord);
            if (ts) ts[n] = dist_tensor_retain(t);
            n++;
        }
        (*ord)++;
    }
    return n;
}

/* A message to `to` in context `ctx` (dist_rpc__send): records it (the
   worker touched; a send when tensors in `v` need a gradient); its
   message id and prefix length.  -1 when out of memory. */
static int dist_rpc__ag_out(int to, const dist_value_t *v, int64_t ctx, uint64_t *msg, size_t *plen) {
    uint32_t ord = 0, n = v ? dist_rpc__ag_walk(v, &ord, NULL, NULL, 0) : 0;
    dist_rpc__actx *c;
    int bad = 0;
    *msg = 0;
    *plen = DIST_RPC__AG_HDR + 4 * (size_t)n;
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (!(c = dist_rpc__ag_get(ctx)) || dist_rpc__ag_touch(c, to) != 0) bad = 1;
    else if (n) {
        dist_tensor_t **ts = (dist_tensor_t **)DIST_MALLOC(n * sizeof *ts);
        if (!ts || dist_rpc__reserve(&c->sends, &c->capsends, c->nsends + 1, sizeof *c->sends) != 0) { DIST_FREE(ts); bad = 1; }
        else {
            dist_rpc__ag_send *s = &c->sends[c->nsends++];
            ord = 0;
            dist_rpc__ag_walk(v, &ord, NULL, ts, 0);
            *msg = ((uint64_t)(dist_rpc__my_rank() + 1) << 48) | (++dist_rpc__ag.next_msg & 0xffffffffffffull);
            s->msg = *msg; s->to = to; s->n = (int)n; s->t = ts;
        }
    }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (bad) dist_rpc__fail(DIST_ERR_NOMEM, "rpc: out of memory for autograd context %lld", (long long)ctx);
    return bad ? -1 : 0;
}

/* The size of a message's autograd prefix (what dist_rpc__ag_out sets). */
static size_t dist_rpc__ag_plen(const dist_value_t *v) {
    uint32_t ord = 0, n = v ? dist_rpc__ag_walk(v, &ord, NULL, NULL, 0) : 0;
    return DIST_RPC__AG_HDR + 4 * (size_t)n;
}

/* Forgets a send dist_rpc__ag_out recorded (the message did not go). */
static void dist_rpc__ag_unout(int64_t ctx, uint64_t msg) {
    dist_rpc__actx *c;
    dist__mutex_lock(&dist_rpc__ag_lock);
    if ((c = dist_rpc__ag_get(ctx)) != NULL)
        for (int i = c->nsends; i-- > 0;)
            if (c->sends[i].msg == msg) {
                dist_rpc__ag_send dead = c->sends[i];
                memmove(&c->sends[i], &c->sends[i + 1], (size_t)(c->nsends - i - 1) * sizeof *c->sends);
                c->nsends--;
                dist__mutex_unlock(&dist_rpc__ag_lock);
                for (int k = 0; k < dead.n; k++) dist_tensor_release(dead.t[k]);
                DIST_FREE(dead.t);
                return;
            }
    dist__mutex_unlock(&dist_rpc__ag_lock);
}

static void dist_rpc__ag_prefix(const dist_value_t *v, int64_t ctx, uint64_t msg, uint8_t *p, size_t plen) {
    uint32_t ord = 0;
    dist_rpc__put64(p, (uint64_t)ctx);
    dist_rpc__put64(p + 8, msg);
    dist_rpc__put32(p + 16, (uint32_t)((plen - DIST_RPC__AG_HDR) / 4));
    if (v) dist_rpc__ag_walk(v, &ord, p + DIST_RPC__AG_HDR, NULL, 0);
}

/* Reads and checks a message's autograd prefix (`from` sent it) and steps
   over it: 0, or -1 when malformed. */
static int dist_rpc__ag_strip(const uint8_t **body, size_t *blen, int from, dist_rpc__ctxin *a) {
    const uint8_t *b = *body;
    uint64_t creator;
    if (*blen < DIST_RPC__AG_HDR) return -1;
    a->ctx = (int64_t)dist_rpc__get64(b);
    a->msg = dist_rpc__get64(b + 8);
    a->n = dist_rpc__get32(b + 16);
    a->ord = b + DIST_RPC__AG_HDR;
    creator = (uint64_t)a->ctx >> 48;
    if (a->ctx <= 0 || creator == 0 || creator > (uint64_t)dist_rpc__size()) return -1;
    if (a->n > (*blen - DIST_RPC__AG_HDR) / 4) return -1;
    if (a->n ? (a->msg >> 48) != (uint64_t)from + 1 : a->msg != 0) return -1;
    for (uint32_t k = 1; k < a->n; k++)
        if (dist_rpc__get32(a->ord + 4 * (size_t)k) <= dist_rpc__get32(a->ord + 4 * (size_t)(k - 1))) return -1;
    *body += DIST_RPC__AG_HDR + 4 * (size_t)a->n;
    *blen -= DIST_RPC__AG_HDR + 4 * (size_t)a->n;
    return 0;
}

/* Marks the tensors of a decoded value (`root`) the prefix names (float32
   or float64 each) with their send, noting their sizes. */
static int dist_rpc__ag_mark(dist_value_t *root, dist_value_t *v, const dist_rpc__ctxin *a, uint32_t *ord, uint32_t *k, size_t *numel) {
    if (v->type == DIST_VALUE_LIST) {
        for (size_t i = 0; i < v->u.list.n; i++)
            if (dist_rpc__ag_mark(root, v->u.list.items[i], a, ord, k, numel) != 0) return -1;
    } else if (v->type == DIST_VALUE_TENSOR) {
        if (*k < a->n && dist_rpc__get32(a->ord + 4 * (size_t)*k) == *ord) {
            dist_rpc__agtag *tag;
            if (v->dtype != DIST_FLOAT32 && v->dtype != DIST_FLOAT64) return -1;
            if (!(tag = (dist_rpc__agtag *)DIST_MALLOC(sizeof *tag))) return -1;
            tag->ctx = a->ctx; tag->msg = a->msg; tag->slot = *k;
            dist_rpc__value_mark(root, v, tag);
            numel[*k] = v->u.t.nbytes / (v->dtype == DIST_FLOAT32 ? 4 : 8);
            (*k)++;
        }
        (*ord)++;
    }
    return 0;
}

/* A message from `from` in context a->ctx (decoded into `v`): the context
   (made here when new), the worker touched, the recv and its tensors
   marked.  -1 when the prefix does not fit the value (or no memory). */
static int dist_rpc__ag_in(dist_value_t *v, int from, const dist_rpc__ctxin *a) {
    uint32_t ord = 0, k = 0;
    size_t *numel = NULL;
    float **g = NULL;
    dist_rpc__actx *c;
    int bad = 0;
    if (a->n) {
        numel = (size_t *)DIST_MALLOC(a->n * sizeof *numel);
        g = (float **)DIST_MALLOC(a->n * sizeof *g);
        if (!numel || !g || dist_rpc__ag_mark(v, v, a, &ord, &k, numel) != 0 || k != a->n) { DIST_FREE(numel); DIST_FREE(g); return -1; }
        memset(g, 0, a->n * sizeof *g);
    }
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (!(c = dist_rpc__ag_get(a->ctx)) || dist_rpc__ag_touch(c, from) != 0) bad = 1;
    else if (a->n && (dist_rpc__ag_recv_of(c, a->msg) || dist_rpc__reserve(&c->recvs, &c->caprecvs, c->nrecvs + 1, sizeof *c->recvs) != 0)) bad = 1;
    else if (a->n) {
        dist_rpc__ag_recv *r = &c->recvs[c->nrecvs++];
        r->msg = a->msg; r->from = from; r->n = (int)a->n; r->touched = 0; r->numel = numel; r->g = g;
        numel = NULL; g = NULL;
    }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    DIST_FREE(numel); DIST_FREE(g);
    return bad ? -1 : 0;
}

/* After the engine (lock held): the gradients of the recvs it reached,
   as "ag_grads" arguments for their senders, taken out of the records. */
typedef struct { int to; dist_value_t *args; } dist_rpc__ag_hop;
static int dist_rpc__ag_hops(dist_rpc__actx *c, dist_rpc__ag_hop **out, int *nout) {
    int n = 0, cap = 0;
    dist_rpc__ag_hop *h = NULL;
    *out = NULL; *nout = 0;
    for (int i = 0; i < c->nrecvs; i++) {
        dist_rpc__ag_recv *r = &c->recvs[i];
        dist_value_t *gl;
        if (!r->touched) continue;
        if (dist_rpc__reserve(&h, &cap, n + 1, sizeof *h) != 0 || !(gl = dist_value_list())) goto nomem;
        for (int k = 0; k < r->n; k++) {
            int64_t len = (int64_t)r->numel[k];
            if (dist_value_append(gl, r->g[k] ? dist_value_tensor(DIST_FLOAT32, 1, &len, r->g[k]) : dist_value_none()) != DIST_OK) { dist_value_free(gl); goto nomem; }
            if (r->g[k]) memset(r->g[k], 0, (r->numel[k] ? r->numel[k] : 1) * sizeof(float));
        }
        r->touched = 0;
        h[n].to = r->from;
        if (!(h[n].args = dist_value_pack("[IIv]", c->id, (int64_t)r->msg, gl))) goto nomem;
        n++;
    }
    *out = h; *nout = n;
    return 0;
nomem:
    for (int i = 0; i < n; i++) dist_value_free(h[i].args);
    DIST_FREE(h);
    return -1;
}

/* Sends the hops (freed); their futures in fs. */
static void dist_rpc__ag_send_hops(dist_rpc__ag_hop *h, int n, dist_future_t **fs, int timeout_ms) {
    for (int i = 0; i < n; i++)
        dist_rpc__call(h[i].to, DIST_RPC__RESERVED "ag_grads", "distributed backward", h[i].args, timeout_ms, NULL, &fs[i]);
    DIST_FREE(h);
}

DIST_API dist_result dist_autograd_context_begin(int64_t *ctx_id) {
    dist_rpc__actx *c;
    if (!ctx_id) return dist_rpc__fail(DIST_ERR_INVALID, "autograd context_begin: NULL id pointer");
    *ctx_id = 0;
    if (dist_rpc__ctx_cur)
        return dist_rpc__fail(DIST_ERR_INVALID, "autograd context_begin: this thread is in autograd context %lld already (end it first: one at a time per thread)",
                              (long long)dist_rpc__ctx_cur);
    dist__mutex_lock(&dist_rpc__ag_lock);
    *ctx_id = (int64_t)(((uint64_t)(dist_rpc__my_rank() + 1) << 48) | (++dist_rpc__ag.next_ctx & 0xffffffffffffull));
    c = dist_rpc__ag_get(*ctx_id);
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (!c) { *ctx_id = 0; return dist_rpc__fail(DIST_ERR_NOMEM, "autograd context_begin: out of memory"); }
    dist_rpc__ctx_cur = *ctx_id;
    return DIST_OK;
}

/* Ends context `id` here and tells the workers it touched (but `skip`). */
static int dist_rpc__ag_end(int64_t id, int skip) {
    dist_rpc__actx *c;
    dist__mutex_lock(&dist_rpc__ag_lock);
    c = dist_rpc__ag_unlink(id);
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (!c) return -1;
    for (int i = 0; i < c->nknown; i++)
        if (c->known[i] != skip && c->known[i] != dist_rpc__g.rank) dist_rpc__notify(c->known[i], DIST_RPC__RESERVED "ag_end", dist_value_pack("[I]", id));
    dist_rpc__ag_free(c);
    return 0;
}

DIST_API dist_result dist_autograd_context_end(int64_t ctx_id) {
    if (dist_rpc__ctx_cur == ctx_id) dist_rpc__ctx_cur = 0;
    if (dist_rpc__ag_end(ctx_id, -1) != 0) return dist_rpc__fail(DIST_ERR_NOT_FOUND, "autograd context_end: no context %lld on this worker", (long long)ctx_id);
    return DIST_OK;
}

DIST_API int64_t dist_autograd_current_context(void) { return dist_rpc__ctx_cur; }
DIST_API void dist_autograd_set_context(int64_t ctx_id) { dist_rpc__ctx_cur = ctx_id; }

DIST_API int dist_autograd_num_contexts(void) {
    int n;
    dist__mutex_lock(&dist_rpc__ag_lock);
    n = dist_rpc__ag.nctxs;
    dist__mutex_unlock(&dist_rpc__ag_lock);
    return n;
}

static dist_value_t *dist_rpc__h_ag_end(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t id;
    if (dist_value_unpack(args, "[I]", &id) == DIST_OK) dist_rpc__ag_end(id, call->from);
    return NULL;
}

/* The engine in context `id` from roots with gradients, then the hops
   it set off (sent; their futures in *fs, *nfs of them). */
static dist_result dist_rpc__ag_run(int64_t id, int n, dist_tensor_t *const *roots, const float *const *rg, const char *what, int timeout_ms,
                                    dist_future_t ***fs, int *nfs) {
    dist_rpc__actx *c;
    dist_rpc__ag_hop *h = NULL;
    int nh = 0;
    dist_result res;
    *fs = NULL; *nfs = 0;
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (!(c = dist_rpc__ag_find(id))) res = dist_rpc__fail(DIST_ERR_NOT_FOUND, "%s: no autograd context %lld on worker '%s' (ended?)", what, (long long)id,
                                                          dist_rpc__name_of(dist_rpc__g.rank));
    else if ((res = dist_rpc__engine(n, roots, rg, c, what)) == DIST_OK && dist_rpc__ag_hops(c, &h, &nh) != 0)
        res = dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory", what);
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (res != DIST_OK || !nh) return res;
    if (!(*fs = (dist_future_t **)DIST_MALLOC((size_t)nh * sizeof **fs))) {
        for (int i = 0; i < nh; i++) dist_value_free(h[i].args);
        DIST_FREE(h);
        return dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory", what);
    }
    dist_rpc__ag_send_hops(h, nh, *fs, timeout_ms);
    *nfs = nh;
    return DIST_OK;
}

DIST_API dist_result dist_autograd_backward_timeout(int64_t ctx_id, dist_tensor_t *loss, int timeout_ms) {
    dist_future_t **fs;
    int nfs;
    dist_result res;
    char x[64];
    if (!loss) return dist_rpc__fail(DIST_ERR_INVALID, "dist_autograd_backward: NULL loss (did an operation before fail?)");
    if (loss->numel != 1)
        return dist_rpc__fail(DIST_ERR_INVALID, "dist_autograd_backward: the loss %s is not a single value", dist_rpc__shape_str(loss, x, sizeof x));
    if (!loss->requires_grad) return dist_rpc__fail(DIST_ERR_INVALID, "dist_autograd_backward: nothing below the loss requires a gradient");
    if ((res = dist_rpc__ag_run(ctx_id, 1, &loss, NULL, "dist_autograd_backward", timeout_ms, &fs, &nfs)) != DIST_OK || !nfs) return res;
    res = dist_future_wait_all(nfs, fs, timeout_ms > 0 ? timeout_ms : 0);
    if (res != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        snprintf(why, sizeof why, "%.330s", dist_rpc__error);
        dist_rpc__fail(res, "dist_autograd_backward (context %lld): %s", (long long)ctx_id, why);
    }
    for (int i = 0; i < nfs; i++) dist_future_free(fs[i]);
    DIST_FREE(fs);
    return res;
}

DIST_API dist_result dist_autograd_backward(int64_t ctx_id, dist_tensor_t *loss) {
    return dist_autograd_backward_timeout(ctx_id, loss, DIST_RPC_DEFAULT_TIMEOUT);
}

/* A hop's call, answered when the hops it set off are all done. */
typedef struct { dist_rpc_call_t *call; int left; dist_result code; char err[DIST_RPC__ERRLEN]; } dist_rpc__ag_join;

static void dist_rpc__ag_join_cb(dist_future_t *f, void *user) {
    dist_rpc__ag_join *j = (dist_rpc__ag_join *)user;
    int last;
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (f && f->result != DIST_OK && j->code == DIST_OK) { j->code = f->result; snprintf(j->err, sizeof j->err, "%s", f->err); }
    last = --j->left == 0;
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (!last) return;
    dist_rpc__answer(j->call, j->code, NULL, j->err, 0);
    DIST_FREE(j);
}

static dist_value_t *dist_rpc__h_ag_grads(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t id = 0, msg = 0;
    const dist_value_t *gl = NULL;
    dist_rpc__actx *c;
    dist_rpc__ag_send *s;
    dist_tensor_t **roots = NULL;
    const float **rg = NULL;
    dist_future_t **fs = NULL;
    int n = 0, nfs = 0;
    dist_rpc__ag_join *j;
    dist_result res;
    const char *me = dist_rpc__name_of(dist_rpc__g.rank);
    if (dist_value_unpack(args, "[II*]", &id, &msg) != DIST_OK || !(gl = dist_value_item(args, 2)) || gl->type != DIST_VALUE_LIST) {
        dist_rpc_call_fail(call, "distributed backward: malformed gradients");
        return NULL;
    }
    dist__mutex_lock(&dist_rpc__ag_lock);
    c = dist_rpc__ag_find(id);
    s = c ? dist_rpc__ag_send_of(c, (uint64_t)msg) : NULL;
    if (s && (size_t)s->n == gl->u.list.n) {
        roots = (dist_tensor_t **)DIST_MALLOC((size_t)s->n * sizeof *roots);
        rg = (const float **)DIST_MALLOC((size_t)s->n * sizeof *rg);
        for (int k = 0; roots && rg && k < s->n; k++) {
            const dist_value_t *g = gl->u.list.items[k];
            if (g->type == DIST_VALUE_NONE) continue;
            if (g->type != DIST_VALUE_TENSOR || g->dtype != DIST_FLOAT32 || g->u.t.nbytes != s->t[k]->numel * sizeof(float)) { n = -1; break; }
            roots[n] = s->t[k];
            rg[n++] = (const float *)g->u.t.data;
        }
    }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (!c || !s || (size_t)s->n != gl->u.list.n || n < 0 || !roots || !rg) {
        if (!c) dist_rpc_call_fail(call, "distributed backward: autograd context %lld is gone on worker '%s' (ended before its backward finished?)", (long long)id, me);
        else if (!s) dist_rpc_call_fail(call, "distributed backward: worker '%s' sent nothing as message %llx in autograd context %lld", me, (unsigned long long)msg, (long long)id);
        else if (roots && rg) dist_rpc_call_fail(call, "distributed backward: gradients that do not fit the %d tensor%s worker '%s' sent", s->n, DIST__PLURAL(s->n), me);
        else dist_rpc_call_fail(call, "distributed backward: out of memory on worker '%s'", me);
        DIST_FREE(roots); DIST_FREE(rg);
        return NULL;
    }
    /* (the send's tensors are retained by the context; a context ended
       meanwhile makes the engine fail, it does not free them under it) */
    res = n ? dist_rpc__ag_run(id, n, roots, rg, "distributed backward", 0, &fs, &nfs) : DIST_OK;
    DIST_FREE(roots); DIST_FREE(rg);
    if (res != DIST_OK) { dist_rpc_call_fail(call, "on worker '%s': %s", me, dist_rpc__error); return NULL; }
    if (!nfs) return dist_value_none();
    if (!(j = (dist_rpc__ag_join *)DIST_MALLOC(sizeof *j))) {
        dist_rpc_call_fail(call, "distributed backward: out of memory on worker '%s'", me);
        for (int i = 0; i < nfs; i++) dist_future_free(fs[i]);
        DIST_FREE(fs);
        return NULL;
    }
    memset(j, 0, sizeof *j);
    j->call = call;
    j->left = nfs + 1;
    dist_rpc_call_defer(call);
    for (int i = 0; i < nfs; i++) {
        if (dist_future_then(fs[i], dist_rpc__ag_join_cb, j) != DIST_OK) dist_rpc__ag_join_cb(NULL, j);
        dist_future_free(fs[i]);
    }
    DIST_FREE(fs);
    dist_rpc__ag_join_cb(NULL, j);
    return NULL;
}

DIST_API dist_result dist_autograd_get_gradients(int64_t ctx_id, int n, dist_tensor_t *const *tensors, dist_tensor_t **grads) {
    dist_rpc__actx *c;
    if (n < 0 || (n && (!tensors || !grads))) return dist_rpc__fail(DIST_ERR_INVALID, "dist_autograd_get_gradients: %d tensor%s, NULL arrays", n, DIST__PLURAL(n));
    for (int i = 0; i < n; i++) grads[i] = NULL;
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (!(c = dist_rpc__ag_find(ctx_id))) {
        dist__mutex_unlock(&dist_rpc__ag_lock);
        return dist_rpc__fail(DIST_ERR_NOT_FOUND, "dist_autograd_get_gradients: no autograd context %lld on this worker", (long long)ctx_id);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c->ngrads && !grads[i]; k++)
            if (c->grads[k].t == tensors[i]) grads[i] = dist_tensor_retain(c->grads[k].g);
    dist__mutex_unlock(&dist_rpc__ag_lock);
    return DIST_OK;
}

DIST_API dist_result dist_autograd_get_all_gradients(int64_t ctx_id, int cap, dist_tensor_t **tensors, dist_tensor_t **grads, int *count) {
    dist_rpc__actx *c;
    if (count) *count = 0;
    if (!count || cap < 0 || (cap && (!tensors || !grads)))
        return dist_rpc__fail(DIST_ERR_INVALID, "dist_autograd_get_all_gradients: capacity %d, NULL %s", cap, !count ? "count" : "arrays");
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (!(c = dist_rpc__ag_find(ctx_id))) {
        dist__mutex_unlock(&dist_rpc__ag_lock);
        return dist_rpc__fail(DIST_ERR_NOT_FOUND, "dist_autograd_get_all_gradients: no autograd context %lld on this worker", (long long)ctx_id);
    }
    *count = c->ngrads;
    for (int k = 0; k < c->ngrads && k < cap; k++) {
        tensors[k] = dist_tensor_retain(c->grads[k].t);
        grads[k] = dist_tensor_retain(c->grads[k].g);
    }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    return DIST_OK;
}

/* Teardown: every context and optimizer part goes. */
static void dist_rpc__ag_clear(void) {
    dist_rpc__actx *c;
    dist_rpc__ag_opt *o;
    int no;
    dist__mutex_lock(&dist_rpc__ag_lock);
    c = dist_rpc__ag.ctxs;
    dist_rpc__ag.ctxs = NULL;
    dist_rpc__ag.nctxs = 0;
    o = dist_rpc__ag.opts; no = dist_rpc__ag.nopts;
    dist_rpc__ag.opts = NULL; dist_rpc__ag.nopts = dist_rpc__ag.capopts = 0;
    dist__mutex_unlock(&dist_rpc__ag_lock);
    while (c) { dist_rpc__actx *next = c->next; dist_rpc__ag_free(c); c = next; }
    for (int i = 0; i < no; i++) dist_optim_free(o[i].o);
    DIST_FREE(o);
    dist_rpc__ctx_cur = 0;
}

/* The context layer (the layer hook in "RPC: registry"): what autograd
   adds to RPC. */
static const dist_rpc__builtin dist_rpc__ag_fns[] = {
    { DIST_RPC__RESERVED "ag_grads", dist_rpc__h_ag_grads, 0 },     /* gradients for a send */
    { DIST_RPC__RESERVED "ag_end", dist_rpc__h_ag_end, 1 },         /* a context ended */
};
static const dist_rpc__layer dist_rpc__ag_layer = {
    "autograd", dist_rpc__ag_fns, sizeof dist_rpc__ag_fns / sizeof *dist_rpc__ag_fns,
    dist_rpc__ag_plen, dist_rpc__ag_out, dist_rpc__ag_prefix, dist_rpc__ag_unout, dist_rpc__ag_strip, dist_rpc__ag_in,
    dist_rpc__ag_clear,                                              /* (the optimizers' parts too) */
};

/* ---- the distributed optimizer ---- */
typedef struct { int rank; int64_t id; } dist_rpc__dopt_part;
struct dist_remote_optim {
    int n;
    dist_rpc__dopt_part *own;                           /* one local optimizer per owner */
};

enum { DIST_RPC__OPT_SGD = 1, DIST_RPC__OPT_ADAM = 2 };

/* "optim_new" [kind, lr, a, b, eps, wd, [rrefs owned here]] -> its id. */
static dist_value_t *dist_rpc__h_optim_new(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t kind;
    double lr, a, b, eps, wd;
    const dist_value_t *rl = dist_value_item(args, 6);
    dist_tensor_t **ts;
    dist_optim_t *o;
    int n, bad = 0;
    int64_t id = 0;
    if (dist_value_unpack(args, "[Ifffff*]", &kind, &lr, &a, &b, &eps, &wd) != DIST_OK || !rl || rl->type != DIST_VALUE_LIST ||
        (kind != DIST_RPC__OPT_SGD && kind != DIST_RPC__OPT_ADAM)) {
        dist_rpc_call_fail(call, "distributed optimizer: malformed arguments");
        return NULL;
    }
    n = (int)rl->u.list.n;
    if (!(ts = (dist_tensor_t **)DIST_MALLOC((size_t)(n ? n : 1) * sizeof *ts))) { dist_rpc_call_fail(call, "distributed optimizer: out of memory"); return NULL; }
    for (int i = 0; i < n && !bad; i++) {
        dist_rref_t *r = NULL;
        const dist_value_t *v = NULL;
        if (dist_value_get_rref(rl->u.list.items[i], &r) != DIST_OK || !r->is_owner) {
            dist_rpc_call_fail(call, "distributed optimizer: parameter %d is not a reference owned by worker '%s'", i, dist_rpc__name_of(dist_rpc__g.rank));
            bad = 1;
        } else if (dist_rref_local_value(r, &v) != DIST_OK) {
            dist_rpc_call_fail(call, "distributed optimizer: parameter %d: %s", i, dist_rpc__error);
            bad = 1;
        } else if (!(ts[i] = dist_value_as_tensor(v))) {
            dist_rpc_call_fail(call, "distributed optimizer: parameter %d on worker '%s' holds %s %s, not a tensor made by dist_value_from_tensor", i,
                               dist_rpc__name_of(dist_rpc__g.rank), v && v->type == DIST_VALUE_INT ? "an" : "a", dist_value_type_name(dist_value_kind(v)));
            bad = 1;
        }
    }
    if (bad) { DIST_FREE(ts); return NULL; }
    o = kind == DIST_RPC__OPT_SGD ? dist_optim_sgd(n, ts, (float)lr, (float)a, (float)wd) : dist_optim_adam(n, ts, (float)lr, (float)a, (float)b, (float)eps, (float)wd);
    DIST_FREE(ts);
    dist__mutex_lock(&dist_rpc__ag_lock);
    if (o && dist_rpc__reserve(&dist_rpc__ag.opts, &dist_rpc__ag.capopts, dist_rpc__ag.nopts + 1, sizeof *dist_rpc__ag.opts) == 0) {
        id = ++dist_rpc__ag.next_opt;
        dist_rpc__ag.opts[dist_rpc__ag.nopts].id = id;
        dist_rpc__ag.opts[dist_rpc__ag.nopts++].o = o;
    }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    if (!id) { dist_optim_free(o); dist_rpc_call_fail(call, "distributed optimizer: out of memory on worker '%s'", dist_rpc__name_of(dist_rpc__g.rank)); return NULL; }
    return dist_value_int(id);
}

/* "optim_step" [id, context]: the local update with the context's
   gradients (a parameter without one is left alone). */
static dist_value_t *dist_rpc__h_optim_step(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t id, ctx;
    dist_optim_t *o = NULL;
    dist_rpc__actx *c = NULL;
    int bad = 0;
    if (dist_value_unpack(args, "[II]", &id, &ctx) != DIST_OK) { dist_rpc_call_fail(call, "distributed optimizer step: malformed arguments"); return NULL; }
    dist_rpc__params_write_enter();
    dist__mutex_lock(&dist_rpc__ag_lock);
    for (int i = 0; i < dist_rpc__ag.nopts && !o; i++) if (dist_rpc__ag.opts[i].id == id) o = dist_rpc__ag.opts[i].o;
    if (o && (c = dist_rpc__ag_find(ctx)))
        for (int i = 0; i < o->n && !bad; i++)
            for (int k = 0; k < c->ngrads; k++)
                if (c->grads[k].t == o->p[i]) { bad = dist_rpc__optim_update(o, i, c->grads[k].g->data) != 0; break; }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    dist_rpc__params_write_exit();
    if (!o) dist_rpc_call_fail(call, "distributed optimizer step: worker '%s' has no optimizer %lld (freed?)", dist_rpc__name_of(dist_rpc__g.rank), (long long)id);
    else if (!c) dist_rpc_call_fail(call, "distributed optimizer step: no autograd context %lld on worker '%s' (did the pass reach it?)", (long long)ctx,
                                    dist_rpc__name_of(dist_rpc__g.rank));
    else if (bad) dist_rpc_call_fail(call, "distributed optimizer step: out of memory on worker '%s'", dist_rpc__name_of(dist_rpc__g.rank));
    return NULL;
}

static dist_value_t *dist_rpc__h_optim_free(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t id;
    dist_optim_t *o = NULL;
    (void)call;
    if (dist_value_unpack(args, "[I]", &id) != DIST_OK) return NULL;
    dist__mutex_lock(&dist_rpc__ag_lock);
    for (int i = 0; i < dist_rpc__ag.nopts && !o; i++)
        if (dist_rpc__ag.opts[i].id == id) { o = dist_rpc__ag.opts[i].o; dist_rpc__ag.opts[i] = dist_rpc__ag.opts[--dist_rpc__ag.nopts]; }
    dist__mutex_unlock(&dist_rpc__ag_lock);
    dist_optim_free(o);
    return NULL;
}

DIST_API void dist_remote_optim_free(dist_remote_optim_t *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) dist_rpc__notify(o->own[i].rank, DIST_RPC__RESERVED "optim_free", dist_value_pack("[I]", o->own[i].id));
    DIST_FREE(o->own);
    DIST_FREE(o);
}

static dist_result dist_rpc__dopt(int kind, int n, dist_rref_t *const *params, const double hp[5], dist_remote_optim_t **out) {
    const char *what = kind == DIST_RPC__OPT_SGD ? "dist_remote_optim_sgd" : "dist_remote_optim_adam";
    dist_remote_optim_t *o;
    dist_result res = DIST_OK;
    if (!out) return dist_rpc__fail(DIST_ERR_INVALID, "%s: NULL result pointer", what);
    *out = NULL;
    if (n <= 0 || !params) return dist_rpc__fail(DIST_ERR_INVALID, "%s: %d parameter%s (at least one RRef)", what, n, DIST__PLURAL(n));
    for (int i = 0; i < n; i++) if (!params[i]) return dist_rpc__fail(DIST_ERR_INVALID, "%s: parameter %d is NULL", what, i);
    if (!(o = (dist_remote_optim_t *)DIST_MALLOC(sizeof *o)) || !(o->own = (dist_rpc__dopt_part *)DIST_MALLOC((size_t)n * sizeof *o->own))) {
        DIST_FREE(o);
        return dist_rpc__fail(DIST_ERR_NOMEM, "%s: out of memory", what);
    }
    o->n = 0;
    for (int i = 0; i < n && res == DIST_OK; i++) {               /* one optimizer per owner, over its parameters in order */
        int owner = params[i]->owner, seen = 0;
        dist_value_t *rl, *ret = NULL;
        dist_future_t *f = NULL;
        for (int k = 0; k < o->n && !seen; k++) seen = o->own[k].rank == owner;
        if (seen) continue;
        if (!(rl = dist_value_list())) { res = DIST_ERR_NOMEM; break; }
        for (int k = i; k < n; k++)
            if (params[k]->owner == owner && dist_value_append(rl, dist_value_rref(params[k])) != DIST_OK) { res = DIST_ERR_NOMEM; break; }
        if (res != DIST_OK) { dist_value_free(rl); break; }
        res = dist_rpc__call(owner, DIST_RPC__RESERVED "optim_new", "distributed optimizer",
                             dist_value_pack("[Ifffffv]", (int64_t)kind, hp[0], hp[1], hp[2], hp[3], hp[4], rl), 0, NULL, &f);
        if (res == DIST_OK) res = dist_future_wait(f, 0);
        if (res == DIST_OK && (!(ret = dist_future_take(f)) || dist_value_get_int(ret, &o->own[o->n].id) != DIST_OK))
            res = dist_rpc__fail(DIST_ERR_PROTOCOL, "%s: worker '%s' answered without an optimizer id", what, dist_rpc__name_of(owner));
        dist_value_free(ret);
        dist_future_free(f);
        if (res == DIST_OK) o->own[o->n++].rank = owner;
    }
    if (res != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        snprintf(why, sizeof why, "%.330s", dist_rpc__error);
        dist_remote_optim_free(o);
        return dist_rpc__fail(res, "%s: %s", what, why);
    }
    *out = o;
    return DIST_OK;
}

DIST_API dist_result dist_remote_optim_sgd(int n, dist_rref_t *const *params, float lr, float momentum, float weight_decay, dist_remote_optim_t **out) {
    double hp[5] = { lr, momentum, 0, 0, weight_decay };
    return dist_rpc__dopt(DIST_RPC__OPT_SGD, n, params, hp, out);
}

DIST_API dist_result dist_remote_optim_adam(int n, dist_rref_t *const *params, float lr, float beta1, float beta2, float eps, float weight_decay,
                                          dist_remote_optim_t **out) {
    double hp[5] = { lr, beta1, beta2, eps, weight_decay };
    return dist_rpc__dopt(DIST_RPC__OPT_ADAM, n, params, hp, out);
}

DIST_API dist_result dist_remote_optim_step_timeout(dist_remote_optim_t *o, int64_t ctx_id, int timeout_ms) {
    dist_future_t *few[8], **fs = few;
    dist_result res;
    if (!o) return dist_rpc__fail(DIST_ERR_INVALID, "dist_remote_optim_step: NULL optimizer");
    if (o->n > 8 && !(fs = (dist_future_t **)DIST_MALLOC((size_t)o->n * sizeof *fs))) return dist_rpc__fail(DIST_ERR_NOMEM, "dist_remote_optim_step: out of memory");
    for (int i = 0; i < o->n; i++)                                 /* every owner at once */
        dist_rpc__call(o->own[i].rank, DIST_RPC__RESERVED "optim_step", "distributed optimizer step", dist_value_pack("[II]", o->own[i].id, ctx_id),
                       timeout_ms, NULL, &fs[i]);
    res = dist_future_wait_all(o->n, fs, 0);
    if (res != DIST_OK) {
        char why[DIST_RPC__ERRLEN];
        snprintf(why, sizeof why, "%.330s", dist_rpc__error);
        dist_rpc__fail(res, "dist_remote_optim_step (context %lld): %s", (long long)ctx_id, why);
    }
    for (int i = 0; i < o->n; i++) dist_future_free(fs[i]);
    if (fs != few) DIST_FREE(fs);
    return res;
}

DIST_API dist_result dist_remote_optim_step(dist_remote_optim_t *o, int64_t ctx_id) {
    return dist_remote_optim_step_timeout(o, ctx_id, DIST_RPC_DEFAULT_TIMEOUT);
}

/* The optimizer's functions on the owners (a layer without messages). */
static const dist_rpc__builtin dist_rpc__opt_fns[] = {
    { DIST_RPC__RESERVED "optim_new", dist_rpc__h_optim_new, 0 },   /* made on an owner */
    { DIST_RPC__RESERVED "optim_step", dist_rpc__h_optim_step, 0 },
    { DIST_RPC__RESERVED "optim_free", dist_rpc__h_optim_free, 1 },
};
static const dist_rpc__layer dist_rpc__opt_layer = {
    "remote optimizer", dist_rpc__opt_fns, sizeof dist_rpc__opt_fns / sizeof *dist_rpc__opt_fns, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};

/* The wiring of the layer hook: the context layer first. */
static const dist_rpc__layer *const *dist_rpc__layers(void) {
    static const dist_rpc__layer *const layers[] = { &dist_rpc__ag_layer, &dist_rpc__opt_layer, NULL };
    return layers;
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
