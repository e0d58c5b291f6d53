/* dist.h - v0.1.0 - torch.distributed for C: rendezvous, a TCP mesh,
   point-to-point with requests, a key-value store and a launcher.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_IMPLEMENTATION
      #include "dist.h"
   in ONE C or C++ file; include "dist.h" without the define everywhere else.
   Link with -lpthread.

QUICK START
   A program that runs on every rank (start four with `distrun -n 4 ./prog`,
   or call dist_spawn from an ordinary program):

      #define DIST_IMPLEMENTATION
      #include "dist.h"
      #include <stdio.h>

      int main(void) {
          dist_t *world;
          if (dist_init(&world, NULL) != DIST_OK) {      // env:// by default
              fprintf(stderr, "%s\n", dist_error_message(NULL));
              return 1;
          }
          int rank = dist_rank(world), n = dist_world_size(world);
          float x = (float)rank;
          if (rank == 0) {
              for (int src = 1; src < n; src++) {
                  dist_recv(world, &x, 1, DIST_FLOAT32, src, 0);
                  printf("rank 0 got %g from rank %d\n", x, src);
              }
          } else {
              dist_send(world, &x, 1, DIST_FLOAT32, 0, 0);
          }
          dist_destroy(world);
          return 0;
      }

COMPILE-TIME OPTIONS
   Define these before including dist.h.
   DIST_IMPLEMENTATION       where: one file.  Compile the implementation.
   DIST_STATIC               where: the implementation file (and any file
                             that includes the declarations in the same TU).
                             Make every function static: private to one TU.
   DIST_MALLOC(sz)/DIST_FREE(p)/DIST_REALLOC(p,sz)
                             where: the implementation file.  Your allocator.
                             Define all three or none.
   DIST_ASSERT(x)            where: the implementation file.  Checks of the
                             library's own invariants (never of user input or
                             network bytes, which return errors).  Default:
                             assert().

RUN-TIME ENVIRONMENT (read by dist_init when the config leaves a field zero)
   MASTER_ADDR, MASTER_PORT  where rank 0 hosts the store (env://)
   RANK, WORLD_SIZE          this process's rank and the job's size
   LOCAL_RANK                rank on this host (informational)
   OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS
                             fallbacks for RANK/WORLD_SIZE, so a program
                             runs unchanged under mpirun or srun
   DIST_INIT_METHOD          env://, tcp://host:port or file:///path
   DIST_TIMEOUT              seconds every blocking call may wait (300)
   DIST_SOCKET_IFNAME        network interface whose address the mesh uses
   DIST_SECRET               shared secret every connection must know
   DIST_DEBUG                info | detail: log to stderr

STEP BY STEP
   1. dist_init(&world, &cfg) joins the job.  Rank 0 hosts a key-value store
      on MASTER_ADDR:MASTER_PORT; every rank publishes the address of its
      own listening socket there, then the ranks connect a full TCP mesh
      with a versioned handshake that rejects strangers.
   2. Point-to-point: dist_send / dist_recv block; dist_isend / dist_irecv
      return a request that dist_wait completes (and frees) and dist_test
      polls.  Messages from one rank to another with the same tag never
      overtake each other.  A receive names the exact count and dtype the
      sender sends; anything else fails both clearly.
   3. dist_store_* reads and writes the job's key-value store.
   4. dist_destroy(world) waits (bounded) for every rank to arrive, then
      closes everything.

INIT METHODS
   env://            MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (as torchrun)
   tcp://host:port   rank and world size from the config or environment;
                     IPv6 as tcp://[::1]:29500
   file:///path      a file on a shared file system: rank 0 writes the
                     store's address into it under an fcntl lock, the
                     others read it.  Rank 0 removes it at dist_destroy.
   A URL may end in ?rank=R&world_size=N as in torch.

ERRORS AND LOGGING
   Every fallible call returns a dist_result: DIST_OK (0) or a negative
   code; dist_result_name() names it.  dist_error_message(comm) is the last
   detailed sentence for that communicator, e.g.
      "recv #12 from rank 2 (tag 7): rank 2 sent 1000 x float32, this rank
       expects 999 x float32"
   and dist_error_message(NULL) the calling thread's last one (the only
   place a failed dist_init can report).  After a peer is lost, every
   request that needs it fails within a second, naming that rank.
   Logging goes to cfg.logger; DIST_DEBUG=info|detail logs to stderr.  The
   library never prints on its own, never calls exit() or abort().

THREADS
   A communicator may be used from several threads at once.  Each world
   runs one progress thread, which moves data while the caller computes;
   a thread that waits on a request drives the sockets itself, so small
   messages see no thread hand-off.  Requests are owned by the thread that
   waits on them.

WHAT IT DOES NOT DO (yet)
   - shared memory between ranks on one host (TCP loopback only)
   - collectives, groups (a later version of this file)
   - receive with a wildcard tag, or into a larger buffer than was sent

LICENSE
   See end of file.
*/
#ifndef DIST_H
#define DIST_H

#define DIST_VERSION_MAJOR 0
#define DIST_VERSION_MINOR 1
#define DIST_VERSION_PATCH 0
#define DIST_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>

#ifndef DIST_API
#  ifdef DIST_STATIC
#    define DIST_API static
#  else
#    define DIST_API extern
#  endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results ---------------------------------------------------------
   One list, three ranges: core -1..-99, dist_cuda.h -100..-199,
   dist_rpc.h -200..-299. */
#define DIST_RESULT_LIST(X)                                                   \
    X(DIST_OK,               0, "success")                                  \
    X(DIST_ERR_INVALID,     -1, "invalid argument")                         \
    X(DIST_ERR_TIMEOUT,     -2, "timed out")                                \
    X(DIST_ERR_PEER_LOST,   -3, "a peer closed its connection or died")     \
    X(DIST_ERR_MISMATCH,    -4, "ranks called with different arguments")    \
    X(DIST_ERR_NOMEM,       -5, "out of memory")                            \
    X(DIST_ERR_SYSTEM,      -6, "an operating-system call failed")          \
    X(DIST_ERR_PROTOCOL,    -7, "malformed bytes from the network")         \
    X(DIST_ERR_INIT,        -8, "rendezvous or configuration failed")       \
    X(DIST_ERR_TRUNCATED,   -9, "the buffer is too small for the value")    \
    X(DIST_ERR_ABORTED,    -10, "the communicator was aborted")             \
    X(DIST_ERR_FAILED,     -11, "the communicator failed earlier")          \
    X(DIST_ERR_UNSUPPORTED,-12, "not supported by this build")              \
    X(DIST_ERR_NOT_FOUND,  -13, "no such key")                              \
    X(DIST_ERR_NO_DEVICE, -100, "no CUDA device or CUDA library")           \
    X(DIST_ERR_CUDA,      -101, "a CUDA call failed")                       \
    X(DIST_ERR_NCCL,      -102, "an NCCL call failed")                      \
    X(DIST_ERR_REMOTE,    -200, "the remote function failed")               \
    X(DIST_ERR_UNKNOWN_FUNCTION, -201, "no function of that name")          \
    X(DIST_ERR_TYPE,      -202, "value of another type")

typedef enum dist_result {
#define DIST__RESULT_ENUM(name, value, text) name = value,
    DIST_RESULT_LIST(DIST__RESULT_ENUM)
#undef DIST__RESULT_ENUM
    DIST_RESULT_FORCE_INT = -0x7fffffff
} dist_result;

/* ---- data types --------------------------------------------------------- */
#define DIST_DTYPE_LIST(X)           \
    X(DIST_INT8,     int8,     1)    \
    X(DIST_UINT8,    uint8,    1)    \
    X(DIST_INT32,    int32,    4)    \
    X(DIST_INT64,    int64,    8)    \
    X(DIST_FLOAT16,  float16,  2)    \
    X(DIST_BFLOAT16, bfloat16, 2)    \
    X(DIST_FLOAT32,  float32,  4)    \
    X(DIST_FLOAT64,  float64,  8)

typedef enum dist_dtype {
#define DIST__DTYPE_ENUM(name, text, size) name,
    DIST_DTYPE_LIST(DIST__DTYPE_ENUM)
#undef DIST__DTYPE_ENUM
    DIST_DTYPE_COUNT
} dist_dtype;

typedef enum dist_op { DIST_SUM, DIST_PRODUCT, DIST_MAX, DIST_MIN, DIST_AVG, DIST_OP_COUNT } dist_op;

#define DIST_ANY_SOURCE (-1)

typedef enum dist_log_level {
    DIST_LOG_ERROR = 1, DIST_LOG_WARN = 2, DIST_LOG_INFO = 3, DIST_LOG_DEBUG = 4
} dist_log_level;

typedef struct dist_logger {
    void (*func)(dist_log_level level, const char *message, void *user);
    void *user;
} dist_logger;

/* Zero is default: `dist_config cfg = {0};` takes everything from the
   environment.  Fields are only ever added at the end. */
typedef struct dist_config {
    const char *init_method; /* NULL: $DIST_INIT_METHOD, else "env://"        */
    int world_size;          /* 0: from the URL or environment; when > 0,
                                `rank` below is used as given                 */
    int rank;                /* this process's rank (used when world_size > 0)*/
    int timeout_ms;          /* 0: $DIST_TIMEOUT seconds, else 300 s; every
                                blocking call waits at most this long         */
    const char *secret;      /* NULL: $DIST_SECRET, else none.  Every peer
                                must know it to connect                      */
    const char *socket_ifname; /* NULL: $DIST_SOCKET_IFNAME, else the address
                                that reaches rank 0                           */
    dist_logger logger;      /* {0}: quiet, unless $DIST_DEBUG is set         */
    dist_log_level log_level;/* 0: DIST_LOG_WARN when a logger is given       */
    int local_rank;          /* 0: $LOCAL_RANK (informational)                */
    int store_listen_fd;     /* 0: none.  Rank 0 uses this listening socket
                                (fd + 1, so 0 stays "none") for the store
                                instead of binding; dist_spawn and distrun
                                pass it so no port can be stolen in between  */
} dist_config;

typedef struct dist dist_t;          /* a communicator */
typedef struct dist_req dist_req_t;  /* an operation in flight */

/* ---- version, results, errors ---- */
DIST_API const char *dist_version(void);
DIST_API const char *dist_result_name(dist_result r);     /* "DIST_ERR_TIMEOUT" */
DIST_API const char *dist_result_text(dist_result r);     /* "timed out" */
DIST_API size_t      dist_dtype_size(dist_dtype t);        /* 0 when invalid */
DIST_API const char *dist_dtype_name(dist_dtype t);       /* "float32" */
/* The last detailed sentence for this communicator; with NULL, the calling
   thread's last one (which is where a failed dist_init reports).  Never
   NULL; "" when nothing failed. */
DIST_API const char *dist_error_message(const dist_t *d);

/* ---- life cycle ---- */
DIST_API dist_result dist_init(dist_t **world, const dist_config *cfg);
DIST_API dist_result dist_destroy(dist_t *d);
DIST_API int dist_rank(const dist_t *d);
DIST_API int dist_world_size(const dist_t *d);
DIST_API int dist_local_rank(const dist_t *d);
DIST_API int dist_timeout_ms(const dist_t *d);

/* ---- point-to-point ----
   `count` is in elements of `dtype`.  A blocking dist_send returns once the
   buffer may be reused (the data is on its way or buffered); two ranks that
   both send first never deadlock.  dist_wait completes a request and frees
   it; dist_test only asks (call dist_wait afterwards; requests never waited
   on are reclaimed by dist_destroy).  Tags are >= 0. */
DIST_API dist_result dist_send (dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag);
DIST_API dist_result dist_recv (dist_t *d, void *buf, size_t count, dist_dtype dtype, int src, int tag);
DIST_API dist_result dist_isend(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_req_t **req);
DIST_API dist_result dist_irecv(dist_t *d, void *buf, size_t count, dist_dtype dtype, int src, int tag, dist_req_t **req);
DIST_API dist_result dist_wait(dist_req_t *req);
DIST_API dist_result dist_test(dist_req_t *req, int *done);
/* Waits for all (each is freed); returns the first failure, DIST_OK if none.
   NULL entries are skipped. */
DIST_API dist_result dist_wait_all(int n, dist_req_t **reqs);
/* For a completed receive (before dist_wait frees it): the rank it came
   from, which is how a DIST_ANY_SOURCE receive learns its sender. */
DIST_API int dist_req_source(const dist_req_t *req);

/* ---- the key-value store (hosted by rank 0, shared by the job) ----
   Keys are strings of 1..1024 bytes; values up to 64 MiB.  timeout_ms 0
   means the communicator's timeout.
   get        waits until `key` exists; copies at most `cap` bytes into buf
              and sets *len to the value's full size (DIST_ERR_TRUNCATED
              when cap < *len).
   add        adds `amount` to the integer stored at key (missing = 0) and
              returns the new value in *result (may be NULL).
   wait       waits until every key exists.
   compare_set  sets key to `desired` if its value equals `expected` (or if
              it is missing and expected_len == 0); the value after the call
              goes to out (as get).
   delete     *deleted (may be NULL) = 1 if the key existed.
   check      *exists = 1 if every key exists now; never waits. */
DIST_API dist_result dist_store_set(dist_t *d, const char *key, const void *value, size_t len);
DIST_API dist_result dist_store_get(dist_t *d, const char *key, void *buf, size_t cap, size_t *len);
DIST_API dist_result dist_store_add(dist_t *d, const char *key, int64_t amount, int64_t *result);
DIST_API dist_result dist_store_wait(dist_t *d, const char *const *keys, int nkeys, int timeout_ms);
DIST_API dist_result dist_store_compare_set(dist_t *d, const char *key,
                                            const void *expected, size_t expected_len,
                                            const void *desired, size_t desired_len,
                                            void *out, size_t cap, size_t *out_len);
DIST_API dist_result dist_store_delete(dist_t *d, const char *key, int *deleted);
DIST_API dist_result dist_store_check(dist_t *d, const char *const *keys, int nkeys, int *exists);

/* ---- local launch (torch.multiprocessing.spawn) ----
   Forks nprocs ranks of this program on this host.  Each runs
   fn(world, arg) with a communicator already initialised (over loopback on
   a port the parent picks, unless cfg names an init method); the child's
   process ends with fn's return value once dist_destroy has run.  Returns
   0 when every fn returned 0; otherwise stops the others (SIGTERM, then
   SIGKILL after 2 s) and returns the first failing rank's exit code (or
   128 + signal).  Returns -1 if it could not start. */
DIST_API int dist_spawn(int nprocs, int (*fn)(dist_t *world, void *arg), void *arg, const dist_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* DIST_H */

/* Stop now if you only need the API; the implementation follows. */
