/* dist_cuda.h - v0.1.0 - dist's collectives and point-to-point on CUDA
   device memory: a staged path over dist.h's transports, reduction kernels
   compiled at run time, and an NCCL backend.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_CUDA_IMPLEMENTATION
      #include "dist_cuda.h"
   in ONE C or C++ file (usually the one that defines DIST_IMPLEMENTATION
   too; dist_cuda.h includes dist.h itself); include "dist_cuda.h" without
   the define everywhere else.  No CUDA header is needed and nothing CUDA
   is linked: the implementation opens the driver (libcuda.so.1), NVRTC
   and NCCL with dlopen when a communicator is made (link with -ldl on old
   glibc).  A program built with dist_cuda.h runs on a machine without
   CUDA; dist_cuda_init then says why it cannot.

QUICK START
      dist_t *world;
      dist_cuda_t *gpu;
      dist_init(&world, NULL);                           // env://, e.g. under distrun
      dist_cuda_config cc = {0};                         // device: LOCAL_RANK % devices
      if (dist_cuda_init(world, &cc, &gpu) != DIST_OK) {
          fprintf(stderr, "%s\n", dist_cuda_error_message());
          return 1;
      }
      float *x;                                          // cudaMalloc'ed, n floats
      ...
      dist_cuda_all_reduce(gpu, x, n, DIST_FLOAT32, DIST_SUM, stream);
      cudaStreamSynchronize(stream);                     // before the host reads x
      dist_cuda_destroy(gpu);
      dist_destroy(world);

DESIGN NOTES
   Why twins (dist_cuda_all_reduce on a dist_cuda_t) and not device
   pointers in dist_all_reduce.  A device pointer needs a device, a
   context and a stream, and the call must say where it is ordered; the
   core calls have no stream.  Detecting pointer kinds inside dist.h would
   also make every host call pay a driver query and pull CUDA into the
   core.  So a dist_cuda_t, made over any dist_t (a world or a group),
   holds the device, its streams and staging buffers, and every call
   takes the stream it is ordered on, as NCCL's calls do.

   Stream ordering.  A call runs after the work already on `stream` (NULL:
   the legacy default stream) and work enqueued on `stream` after it sees
   its results.  The host may get control back before the results are in
   device memory: synchronise the stream (or wait on an event recorded on
   it) before reading them on the host.  Buffers must stay allocated
   until then.  The staged path returns once its last copy is enqueued;
   NCCL returns once its kernel is enqueued.

   Backends.  DIST_CUDA_STAGED works everywhere dist.h does (TCP, shared
   memory, any number of GPUs or hosts): each call cuts the buffers into
   chunks; chunk k is copied to pinned host memory on one stream while
   chunk k-1 goes through dist.h's collective on the host (its
   communicator's worker thread) and chunk k-2 is copied back on another
   stream, so the copies hide behind the network.  The reductions of the
   staged path run on the host, where the bytes already are: reducing on
   the device would add a copy up and a copy down per ring step.
   DIST_CUDA_NCCL maps every call to NCCL (gather, scatter and all_to_all
   as grouped send/recv); its ncclUniqueId travels through dist.h's store.
   AUTO picks NCCL when it loads, else the staged path.

   Kernels.  The reduction kernels (every dtype x op, fp16 and bf16
   combined in float and rounded to nearest even as dist.h does on the
   host, 16-byte vector loads, grid-stride loops) are CUDA C source inside
   this header, compiled by NVRTC at first use for the device's own
   architecture and kept for the process.  dist_cuda_reduce runs one on
   device buffers; dist_cuda_compile_kernels compiles them for any
   architecture without a device (the tests check them for warnings).

   Errors.  Every call returns a dist_result; dist_cuda_error_message()
   is the calling thread's last sentence, naming the operation, the
   device, the sizes and the driver's, NVRTC's or NCCL's own words.
   DIST_ERR_NO_DEVICE: no driver, no device, or no NVRTC when a kernel
   is needed.  DIST_ERR_CUDA / DIST_ERR_NCCL: a call of theirs failed;
   after one the communicator is failed (NCCL's is aborted) and later
   calls return DIST_ERR_FAILED.

COMPILE-TIME OPTIONS
   DIST_CUDA_IMPLEMENTATION  where: one file.  Compile the implementation.
   DIST_CUDA_NO_NCCL         where: the implementation file.  Leave the
                             NCCL backend out (it is never loaded).
   DIST_STATIC, DIST_MALLOC/DIST_FREE/DIST_REALLOC as in dist.h.

RUN-TIME ENVIRONMENT
   DIST_CUDA_BACKEND         auto | staged | nccl: when the config leaves it
   DIST_CUDA_LIBCUDA, DIST_CUDA_LIBNVRTC, DIST_CUDA_LIBNCCL
                             the libraries' file names or paths, when the
                             defaults (libcuda.so.1; libnvrtc.so.13, .12,
                             .so; libnccl.so.2) are not the ones to load

THREADS
   A dist_cuda_t is used by one thread at a time (as its dist_t is).

WHAT IT DOES NOT DO (yet)
   CUDA IPC between ranks on the same host (the staged path serves them
   through shared memory), and the _async twins (the calls are already
   ordered on a stream).
*/
#ifndef DIST_CUDA_H
#define DIST_CUDA_H

#include "dist.h"
#if DIST_VERSION_MAJOR != 0 || DIST_VERSION_MINOR != 1
#  error "dist_cuda.h v0.1 needs dist.h v0.1"
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaStream_t and CUstream are both this type. */
typedef struct CUstream_st *dist_cuda_stream;

typedef enum dist_cuda_backend {
    DIST_CUDA_AUTO = 0,      /* NCCL when it loads, else STAGED */
    DIST_CUDA_STAGED = 1,    /* copies through pinned host memory and dist.h */
    DIST_CUDA_NCCL = 2       /* NCCL (not in builds with DIST_CUDA_NO_NCCL) */
} dist_cuda_backend;

typedef struct dist_cuda_config {
    int device;              /* CUDA device ordinal, plus one (0: the local
                                rank modulo the number of devices)           */
    dist_cuda_backend backend; /* 0: $DIST_CUDA_BACKEND, else AUTO          */
    size_t chunk_bytes;      /* the staged path's chunk (0: 1 MiB; at least
                                4 KiB)                                       */
} dist_cuda_config;

typedef struct dist_cuda dist_cuda_t;

/* The calling thread's last error sentence ("" when none). */
DIST_API const char *dist_cuda_error_message(void);

/* Made by every rank of `d` (collective: NCCL's id travels through d's
   store); uses d for the staged path, so d must outlive it. */
DIST_API dist_result dist_cuda_init(dist_t *d, const dist_cuda_config *cfg, dist_cuda_t **out);
DIST_API dist_result dist_cuda_destroy(dist_cuda_t *c);
DIST_API dist_cuda_backend dist_cuda_backend_of(const dist_cuda_t *c);
DIST_API int dist_cuda_device(const dist_cuda_t *c);

/* The collectives and point-to-point of dist.h, on device buffers, ordered
   on `stream`.  Counts and layouts as in dist.h (count is one rank's
   block). */
DIST_API dist_result dist_cuda_broadcast     (dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, int root, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_reduce        (dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, dist_op op, int root, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_all_reduce    (dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, dist_op op, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_gather        (dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_all_gather    (dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_scatter       (dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_reduce_scatter(dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_all_to_all    (dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_barrier       (dist_cuda_t *c, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_send          (dist_cuda_t *c, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_cuda_stream stream);
DIST_API dist_result dist_cuda_recv          (dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, int src, int tag, dist_cuda_stream stream);

/* dst[i] = op(dst[i], src[i]) on the device, with the library's kernel
   (AVG: the sum). */
DIST_API dist_result dist_cuda_reduce_local(dist_cuda_t *c, void *dst, const void *src, size_t count, dist_dtype dtype, dist_op op, dist_cuda_stream stream);

/* Compiles the reduction kernels with NVRTC for compute capability `sm`
   (e.g. 80 for sm_80), without a device.  log (if cap > 0) gets NVRTC's
   log, "" when it had nothing to say; DIST_ERR_NO_DEVICE when NVRTC
   cannot be loaded, DIST_ERR_CUDA when it refuses. */
DIST_API dist_result dist_cuda_compile_kernels(int sm, char *log, size_t cap);
/* The kernels' CUDA C source. */
DIST_API const char *dist_cuda_kernel_source(void);

#ifdef __cplusplus
}
#endif
#endif /* DIST_CUDA_H */

/* Stop now if you only need the API; the implementation follows. */

#if defined(DIST_CUDA_IMPLEMENTATION) && !defined(DIST_CUDA_IMPLEMENTATION_DONE)
#define DIST_CUDA_IMPLEMENTATION_DONE

/* Index:
   [SECTION] configuration and errors
   [SECTION] platform: loading libraries
   [SECTION] the driver, NVRTC and NCCL, as function tables
   [SECTION] kernels: the CUDA C source
   [SECTION] kernels: compiling and loading
   [SECTION] communicator
   [SECTION] staged path: the chunk pipeline
   [SECTION] NCCL backend
   [SECTION] the calls
*/

/* [SECTION] configuration and errors */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(DIST_MALLOC) && defined(DIST_FREE) && defined(DIST_REALLOC)
#elif !defined(DIST_MALLOC) && !defined(DIST_FREE) && !defined(DIST_REALLOC)
#  define DIST_MALLOC(sz)      malloc(sz)
#  define DIST_FREE(p)         free(p)
#  define DIST_REALLOC(p, sz)  realloc(p, sz)
#else
#  error "dist_cuda.h: define all of DIST_MALLOC, DIST_FREE and DIST_REALLOC, or none"
#endif

#if defined(__cplusplus)
#  define DIST_CUDA__TLS thread_local
#else
#  define DIST_CUDA__TLS _Thread_local
#endif

#define DIST_CUDA__ERRLEN 512
#define DIST_CUDA__SLOTS 4            /* chunks in flight in the staged path */
#define DIST_CUDA__MAX_IN 8           /* inputs of one reduction kernel launch */

static DIST_CUDA__TLS char dist_cuda__error[DIST_CUDA__ERRLEN];

static dist_result dist_cuda__fail(dist_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dist_cuda__error, sizeof dist_cuda__error, fmt, ap);
    va_end(ap);
    return code;
}

DIST_API const char *dist_cuda_error_message(void) { return dist_cuda__error; }

/* [SECTION] platform: loading libraries
   POSIX dlopen; a Windows port would use LoadLibrary/GetProcAddress here. */
#include <dlfcn.h>
#include <pthread.h>

static void *dist_cuda__open(const char *env, const char *const *names, char *why, size_t cap) {
    const char *own = getenv(env);
    void *h = NULL;
    why[0] = 0;
    if (own && *own) {
        if (!(h = dlopen(own, RTLD_NOW | RTLD_LOCAL))) snprintf(why, cap, "%s=%s: %s", env, own, dlerror());
        return h;
    }
    for (int i = 0; names[i] && !h; i++)
        if (!(h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) && !why[0]) snprintf(why, cap, "%s", dlerror());
    return h;
}

static void *dist_cuda__sym(void *lib, const char *name, int *missing) {
    void *p = dlsym(lib, name);
    if (!p) *missing = 1;
    return p;
}

/* [SECTION] the driver, NVRTC and NCCL, as function tables
   Our own declarations of the few types we use (cuda.h's layouts and
   values), so no CUDA header is needed to build.  tests/test_cuda.c checks
   them against cuda.h and nccl.h where those are installed. */
typedef int dist_cuda__CUresult;                 /* CUresult: 0 is CUDA_SUCCESS */
typedef int dist_cuda__CUdevice;
typedef unsigned long long dist_cuda__CUdeviceptr;
typedef struct CUctx_st *dist_cuda__CUcontext;
typedef struct CUmod_st *dist_cuda__CUmodule;
typedef struct CUfunc_st *dist_cuda__CUfunction;
typedef struct CUevent_st *dist_cuda__CUevent;
typedef struct CUstream_st *dist_cuda__CUstream;
typedef struct dist_cuda__memcpy2d {             /* CUDA_MEMCPY2D (v2) */
    size_t srcXInBytes, srcY;
    int srcMemoryType;                           /* CUmemorytype: 1 host, 2 device */
    const void *srcHost;
    dist_cuda__CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    dist_cuda__CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} dist_cuda__memcpy2d;
#define DIST_CUDA__MEM_HOST 1
#define DIST_CUDA__MEM_DEVICE 2
#define DIST_CUDA__ATTR_CC_MAJOR 75                /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define DIST_CUDA__ATTR_CC_MINOR 76
#define DIST_CUDA__ATTR_SM_COUNT 16                /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
#define DIST_CUDA__STREAM_NON_BLOCKING 1
#define DIST_CUDA__EVENT_DISABLE_TIMING 2
#define DIST_CUDA__HOSTALLOC_PORTABLE 1

/* X(return, name, symbol, parameters) */
#define DIST_CUDA__DRIVER_FUNCS(X)                                                                            \
    X(dist_cuda__CUresult, Init, "cuInit", (unsigned flags))                                                \
    X(dist_cuda__CUresult, DriverGetVersion, "cuDriverGetVersion", (int *v))                                \
    X(dist_cuda__CUresult, DeviceGetCount, "cuDeviceGetCount", (int *n))                                    \
    X(dist_cuda__CUresult, DeviceGet, "cuDeviceGet", (dist_cuda__CUdevice *d, int ordinal))                 \
    X(dist_cuda__CUresult, DeviceGetAttribute, "cuDeviceGetAttribute", (int *v, int attr, dist_cuda__CUdevice d)) \
    X(dist_cuda__CUresult, DeviceGetName, "cuDeviceGetName", (char *name, int len, dist_cuda__CUdevice d))  \
    X(dist_cuda__CUresult, DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (dist_cuda__CUcontext *c, dist_cuda__CUdevice d)) \
    X(dist_cuda__CUresult, DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (dist_cuda__CUdevice d)) \
    X(dist_cuda__CUresult, CtxSetCurrent, "cuCtxSetCurrent", (dist_cuda__CUcontext c))                      \
    X(dist_cuda__CUresult, MemAlloc, "cuMemAlloc_v2", (dist_cuda__CUdeviceptr *p, size_t bytes))           \
    X(dist_cuda__CUresult, MemFree, "cuMemFree_v2", (dist_cuda__CUdeviceptr p))                              \
    X(dist_cuda__CUresult, MemcpyHtoD, "cuMemcpyHtoD_v2", (dist_cuda__CUdeviceptr dst, const void *src, size_t n)) \
    X(dist_cuda__CUresult, MemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, dist_cuda__CUdeviceptr src, size_t n)) \
    X(dist_cuda__CUresult, MemHostAlloc, "cuMemHostAlloc", (void **p, size_t bytes, unsigned flags))         \
    X(dist_cuda__CUresult, MemFreeHost, "cuMemFreeHost", (void *p))                                         \
    X(dist_cuda__CUresult, Memcpy2DAsync, "cuMemcpy2DAsync_v2", (const dist_cuda__memcpy2d *m, dist_cuda__CUstream s)) \
    X(dist_cuda__CUresult, StreamCreate, "cuStreamCreate", (dist_cuda__CUstream *s, unsigned flags))        \
    X(dist_cuda__CUresult, StreamDestroy, "cuStreamDestroy_v2", (dist_cuda__CUstream s))                    \
    X(dist_cuda__CUresult, StreamSynchronize, "cuStreamSynchronize", (dist_cuda__CUstream s))               \
    X(dist_cuda__CUresult, StreamWaitEvent, "cuStreamWaitEvent", (dist_cuda__CUstream s, dist_cuda__CUevent e, unsigned flags)) \
    X(dist_cuda__CUresult, EventCreate, "cuEventCreate", (dist_cuda__CUevent *e, unsigned flags))           \
    X(dist_cuda__CUresult, EventDestroy, "cuEventDestroy_v2", (dist_cuda__CUevent e))                       \
    X(dist_cuda__CUresult, EventRecord, "cuEventRecord", (dist_cuda__CUevent e, dist_cuda__CUstream s))     \
    X(dist_cuda__CUresult, EventSynchronize, "cuEventSynchronize", (dist_cuda__CUevent e))                  \
    X(dist_cuda__CUresult, ModuleLoadData, "cuModuleLoadData", (dist_cuda__CUmodule *m, const void *image)) \
    X(dist_cuda__CUresult, ModuleUnload, "cuModuleUnload", (dist_cuda__CUmodule m))                         \
    X(dist_cuda__CUresult, ModuleGetFunction, "cuModuleGetFunction", (dist_cuda__CUfunction *f, dist_cuda__CUmodule m, const char *name)) \
    X(dist_cuda__CUresult, LaunchKernel, "cuLaunchKernel",                                                  \
      (dist_cuda__CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
       dist_cuda__CUstream s, void **params, void **extra))                                                   \
    X(dist_cuda__CUresult, GetErrorString, "cuGetErrorString", (dist_cuda__CUresult r, const char **s))     \
    X(dist_cuda__CUresult, GetErrorName, "cuGetErrorName", (dist_cuda__CUresult r, const char **s))

typedef int dist_cuda__nvrtcResult;              /* 0 is NVRTC_SUCCESS */
typedef struct _nvrtcProgram *dist_cuda__nvrtcProgram;
#define DIST_CUDA__NVRTC_FUNCS(X)                                                                              \
    X(dist_cuda__nvrtcResult, nvrtcVersion, "nvrtcVersion", (int *major, int *minor))                         \
    X(dist_cuda__nvrtcResult, nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", (int *n))              \
    X(dist_cuda__nvrtcResult, nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", (int *archs))                \
    X(dist_cuda__nvrtcResult, nvrtcCreateProgram, "nvrtcCreateProgram",                                       \
      (dist_cuda__nvrtcProgram *p, const char *src, const char *name, int nh, const char *const *h, const char *const *hn)) \
    X(dist_cuda__nvrtcResult, nvrtcDestroyProgram, "nvrtcDestroyProgram", (dist_cuda__nvrtcProgram *p))      \
    X(dist_cuda__nvrtcResult, nvrtcCompileProgram, "nvrtcCompileProgram", (dist_cuda__nvrtcProgram p, int n, const char *const *opts)) \
    X(dist_cuda__nvrtcResult, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", (dist_cuda__nvrtcProgram p, size_t *n)) \
    X(dist_cuda__nvrtcResult, nvrtcGetProgramLog, "nvrtcGetProgramLog", (dist_cuda__nvrtcProgram p, char *log)) \
    X(dist_cuda__nvrtcResult, nvrtcGetPTXSize, "nvrtcGetPTXSize", (dist_cuda__nvrtcProgram p, size_t *n))    \
    X(dist_cuda__nvrtcResult, nvrtcGetPTX, "nvrtcGetPTX", (dist_cuda__nvrtcProgram p, char *ptx))            \
    X(dist_cuda__nvrtcResult, nvrtcGetCUBINSize, "nvrtcGetCUBINSize", (dist_cuda__nvrtcProgram p, size_t *n)) \
    X(dist_cuda__nvrtcResult, nvrtcGetCUBIN, "nvrtcGetCUBIN", (dist_cuda__nvrtcProgram p, char *cubin))      \
    X(const char *, nvrtcGetErrorString, "nvrtcGetErrorString", (dist_cuda__nvrtcResult r))

typedef int dist_cuda__ncclResult;               /* 0 is ncclSuccess, 7 ncclInProgress */
typedef struct ncclComm *dist_cuda__ncclComm;
typedef struct { char internal[128]; } dist_cuda__ncclUniqueId;
#define DIST_CUDA__NCCL_FUNCS(X)                                                                               \
    X(dist_cuda__ncclResult, ncclGetVersion, "ncclGetVersion", (int *v))                                      \
    X(dist_cuda__ncclResult, ncclGetUniqueId, "ncclGetUniqueId", (dist_cuda__ncclUniqueId *id))               \
    X(dist_cuda__ncclResult, ncclCommInitRank, "ncclCommInitRank", (dist_cuda__ncclComm *c, int n, dist_cuda__ncclUniqueId id, int rank)) \
    X(dist_cuda__ncclResult, ncclCommDestroy, "ncclCommDestroy", (dist_cuda__ncclComm c))                     \
    X(dist_cuda__ncclResult, ncclCommAbort, "ncclCommAbort", (dist_cuda__ncclComm c))                         \
    X(const char *, ncclGetErrorString, "ncclGetErrorString", (dist_cuda__ncclResult r))                      \
    X(const char *, ncclGetLastError, "ncclGetLastError", (dist_cuda__ncclComm c))                            \
    X(dist_cuda__ncclResult, ncclAllReduce, "ncclAllReduce",                                                  \
      (const void *s, void *r, size_t n, int dt, int op, dist_cuda__ncclComm c, dist_cuda__CUstream st))      \
    X(dist_cuda__ncclResult, ncclBroadcast, "ncclBroadcast",                                                  \
      (const void *s, void *r, size_t n, int dt, int root, dist_cuda__ncclComm c, dist_cuda__CUstream st))    \
    X(dist_cuda__ncclResult, ncclReduce, "ncclReduce",                                                        \
      (const void *s, void *r, size_t n, int dt, int op, int root, dist_cuda__ncclComm c, dist_cuda__CUstream st)) \
    X(dist_cuda__ncclResult, ncclAllGather, "ncclAllGather",                                                  \
      (const void *s, void *r, size_t n, int dt, dist_cuda__ncclComm c, dist_cuda__CUstream st))              \
    X(dist_cuda__ncclResult, ncclReduceScatter, "ncclReduceScatter",                                          \
      (const void *s, void *r, size_t n, int dt, int op, dist_cuda__ncclComm c, dist_cuda__CUstream st))      \
    X(dist_cuda__ncclResult, ncclSend, "ncclSend", (const void *s, size_t n, int dt, int peer, dist_cuda__ncclComm c, dist_cuda__CUstream st)) \
    X(dist_cuda__ncclResult, ncclRecv, "ncclRecv", (void *r, size_t n, int dt, int peer, dist_cuda__ncclComm c, dist_cuda__CUstream st)) \
    X(dist_cuda__ncclResult, ncclGroupStart, "ncclGroupStart", (void))                                        \
    X(dist_cuda__ncclResult, ncclGroupEnd, "ncclGroupEnd", (void))

#define DIST_CUDA__FIELD(ret, name, sym, params) ret (*name) params;
/* Loaded once per process (state: 0 not tried, 1 loaded, -1 failed, with
   the reason kept). */
typedef struct { int state; char why[256]; DIST_CUDA__DRIVER_FUNCS(DIST_CUDA__FIELD) } dist_cuda__driver_table;
typedef struct { int state; char why[256]; DIST_CUDA__NVRTC_FUNCS(DIST_CUDA__FIELD) } dist_cuda__nvrtc_table;
typedef struct { int state; char why[256]; DIST_CUDA__NCCL_FUNCS(DIST_CUDA__FIELD) } dist_cuda__nccl_table;
static dist_cuda__driver_table dist_cuda__cu;
static dist_cuda__nvrtc_table dist_cuda__rtc;
#ifndef DIST_CUDA_NO_NCCL
static dist_cuda__nccl_table dist_cuda__nccl;
#endif
#undef DIST_CUDA__FIELD
static pthread_mutex_t dist_cuda__load_lock = PTHREAD_MUTEX_INITIALIZER;

/* A function pointer from dlsym's void * (copied: C and C++ both allow that). */
static void dist_cuda__set(void *field, void *p) { memcpy(field, &p, sizeof p); }
#define DIST_CUDA__LOAD(ret, name, sym, params) dist_cuda__set(&t->name, dist_cuda__sym(lib, sym, &missing));
#define DIST_CUDA__LOADER(fn, T, table, FUNCS, env, ...)                                                \
    static int fn(void) {                                                                                \
        static const char *const names[] = { __VA_ARGS__, NULL };                                        \
        T *t = &table;                                                                                   \
        pthread_mutex_lock(&dist_cuda__load_lock);                                                       \
        if (t->state == 0) {                                                                             \
            int missing = 0;                                                                             \
            void *lib = dist_cuda__open(env, names, t->why, sizeof t->why);                              \
            if (lib) {                                                                                   \
                FUNCS(DIST_CUDA__LOAD)                                                                   \
                if (missing) snprintf(t->why, sizeof t->why, "%s lacks a function this library needs (too old?)", names[0]); \
            }                                                                                            \
            t->state = lib && !missing ? 1 : -1;                                                         \
        }                                                                                                \
        pthread_mutex_unlock(&dist_cuda__load_lock);                                                     \
        return t->state;                                                                                 \
    }
DIST_CUDA__LOADER(dist_cuda__load_driver, dist_cuda__driver_table, dist_cuda__cu, DIST_CUDA__DRIVER_FUNCS, "DIST_CUDA_LIBCUDA", "libcuda.so.1")
DIST_CUDA__LOADER(dist_cuda__load_nvrtc, dist_cuda__nvrtc_table, dist_cuda__rtc, DIST_CUDA__NVRTC_FUNCS, "DIST_CUDA_LIBNVRTC", "libnvrtc.so.13", "libnvrtc.so.12",
                  "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so")
#ifndef DIST_CUDA_NO_NCCL
DIST_CUDA__LOADER(dist_cuda__load_nccl, dist_cuda__nccl_table, dist_cuda__nccl, DIST_CUDA__NCCL_FUNCS, "DIST_CUDA_LIBNCCL", "libnccl.so.2", "libnccl.so",
                  "/usr/local/cuda/lib64/libnccl.so.2")
#endif
#undef DIST_CUDA__LOAD

/* The driver's words for a result: "CUDA_ERROR_OUT_OF_MEMORY (out of memory)". */
static const char *dist_cuda__cu_words(dist_cuda__CUresult r, char *buf, size_t cap) {
    const char *name = NULL, *text = NULL;
    if (dist_cuda__cu.state == 1) {
        dist_cuda__cu.GetErrorName(r, &name);
        dist_cuda__cu.GetErrorString(r, &text);
    }
    if (name) snprintf(buf, cap, "%s (%s)", name, text ? text : "no description");
    else snprintf(buf, cap, "CUDA error %d", (int)r);
    return buf;
}

/* [SECTION] kernels: the CUDA C source
   dist_reduce_<dtype>_<op>(out, ins, nin, n): out[i] = ins[0][i] op ins[1][i]
   op ... op ins[nin-1][i], left to right (out may be ins[0]), each operation
   rounded as dist.h rounds it on the host, so host and device agree bit
   for bit.  dist_avg_<dtype>(buf, n, d): buf[i] / d, as dist.h's AVG.
   16-byte loads and stores when every pointer is 16-byte aligned, then
   the tail element by element; grid-stride loops. */
static const char *const dist_cuda__kernel_parts[] = {   /* pieces: ISO C caps a literal at 4095 chars */
    "typedef signed char i8; typedef unsigned char u8; typedef unsigned short u16;\n"
    "typedef int i32; typedef unsigned int u32; typedef long long i64; typedef unsigned long long u64;\n"
    "struct f16 { u16 b; }; struct bf16 { u16 b; };\n"
    "struct Ins { const void *p[8]; };\n"
    "__device__ __forceinline__ float u2f(u32 u) { return __uint_as_float(u); }\n"
    "__device__ __forceinline__ u32 f2u(float f) { return __float_as_uint(f); }\n"
    "__device__ __forceinline__ float f16_to_f32(u16 h) {\n"
    "    u32 o = (u32)(h & 0x7fff) << 13, e = o & 0x0f800000u;\n"
    "    u32 normal = o + ((u32)(127 - 15) << 23) + (e == 0x0f800000u ? (u32)(128 - 16) << 23 : 0u);\n"
    "    u32 sub = f2u(u2f(o + (113u << 23)) - u2f(113u << 23));\n"
    "    return u2f((e == 0 ? sub : normal) | (u32)(h & 0x8000) << 16);\n"
    "}\n"
    "__device__ __forceinline__ u16 f32_to_f16(float x) {\n"
    "    u32 f = f2u(x), sign = f & 0x80000000u, a = f ^ sign;\n"
    "    u32 special = a > 0x7f800000u ? 0x7e00u : 0x7c00u;\n"
    "    float magic = u2f((u32)((127 - 15) + (23 - 10) + 1) << 23);\n"
    "    u32 sub = f2u(u2f(a) + magic) - f2u(magic);\n"
    "    u32 normal = (a + ((u32)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;\n"
    "    u32 o = a >= (u32)(127 + 16) << 23 ? special : a < 113u << 23 ? sub : normal;\n"
    "    return (u16)(o | sign >> 16);\n"
    "}\n"
    "__device__ __forceinline__ float bf16_to_f32(u16 b) { return u2f((u32)b << 16); }\n"
    "__device__ __forceinline__ u16 f32_to_bf16(float f) {\n"
    "    u32 x = f2u(f);\n"
    "    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u);\n"
    "    return (u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n"
    "}\n",
    /* storage type S, computed in C */
    "template <typename S> struct Conv { typedef S C; __device__ static S in(S x) { return x; } __device__ static S out(S x) { return x; } };\n"
    "template <> struct Conv<f16> { typedef float C;\n"
    "    __device__ static float in(f16 x) { return f16_to_f32(x.b); }\n"
    "    __device__ static f16 out(float c) { f16 r; r.b = f32_to_f16(c); return r; } };\n"
    "template <> struct Conv<bf16> { typedef float C;\n"
    "    __device__ static float in(bf16 x) { return bf16_to_f32(x.b); }\n"
    "    __device__ static bf16 out(float c) { bf16 r; r.b = f32_to_bf16(c); return r; } };\n"
    /* integers wrap: computed in the unsigned type */
    "template <typename C> struct Wrap { typedef C U; };\n"
    "template <> struct Wrap<i8> { typedef u8 U; }; template <> struct Wrap<i32> { typedef u32 U; };\n"
    "template <> struct Wrap<i64> { typedef u64 U; };\n"
    "template <typename C, int OP> struct Op;\n"
    "template <typename C> struct Op<C, 0> { __device__ static C f(C a, C b) { typedef typename Wrap<C>::U U; return (C)(U)((U)a + (U)b); } };\n"
    "template <typename C> struct Op<C, 1> { __device__ static C f(C a, C b) { typedef typename Wrap<C>::U U; return (C)(U)((U)a * (U)b); } };\n"
    "template <typename C> struct Op<C, 2> { __device__ static C f(C a, C b) { return a > b || a != a ? a : b; } };\n"
    "template <typename C> struct Op<C, 3> { __device__ static C f(C a, C b) { return a < b || a != a ? a : b; } };\n"
    "template <typename S, int OP> __device__ __forceinline__ S red(S a, S b) {\n"
    "    return Conv<S>::out(Op<typename Conv<S>::C, OP>::f(Conv<S>::in(a), Conv<S>::in(b)));\n"
    "}\n"
    ,
    "template <typename S, int OP> __device__ void reduce_n(S *out, const Ins &ins, int nin, u64 n) {\n"
    "    enum { V = 16 / sizeof(S) };\n"
    "    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;\n"
    "    bool aligned = ((u64)out & 15u) == 0;\n"
    "    for (int j = 0; j < nin; j++) aligned = aligned && ((u64)ins.p[j] & 15u) == 0;\n"
    "    u64 nv = aligned ? n / V : 0;\n"
    "    for (u64 i = tid; i < nv; i += stride) {\n"
    "        union { uint4 v; S e[V]; } a, b;\n"
    "        a.v = ((const uint4 *)ins.p[0])[i];\n"
    "        for (int j = 1; j < nin; j++) {\n"
    "            b.v = ((const uint4 *)ins.p[j])[i];\n"
    "            for (int k = 0; k < V; k++) a.e[k] = red<S, OP>(a.e[k], b.e[k]);\n"
    "        }\n"
    "        ((uint4 *)out)[i] = a.v;\n"
    "    }\n"
    "    for (u64 i = nv * V + tid; i < n; i += stride) {\n"
    "        S a = ((const S *)ins.p[0])[i];\n"
    "        for (int j = 1; j < nin; j++) a = red<S, OP>(a, ((const S *)ins.p[j])[i]);\n"
    "        out[i] = a;\n"
    "    }\n"
    "}\n"
    ,
    "template <typename C> __device__ __forceinline__ C divide(C x, int d) { return (C)(x / d); }\n"
    "template <> __device__ __forceinline__ float divide<float>(float x, int d) { return x / (float)d; }\n"
    "template <> __device__ __forceinline__ double divide<double>(double x, int d) { return x / (double)d; }\n"
    "template <typename S> __device__ void avg(S *buf, u64 n, int d) {\n"
    "    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;\n"
    "    for (u64 i = tid; i < n; i += stride) buf[i] = Conv<S>::out(divide<typename Conv<S>::C>(Conv<S>::in(buf[i]), d));\n"
    "}\n"
    "#define KERNELS(name, S) \\\n"
    "extern \"C\" __global__ void dist_reduce_##name##_sum(S *o, Ins i, int k, u64 n) { reduce_n<S, 0>(o, i, k, n); } \\\n"
    "extern \"C\" __global__ void dist_reduce_##name##_product(S *o, Ins i, int k, u64 n) { reduce_n<S, 1>(o, i, k, n); } \\\n"
    "extern \"C\" __global__ void dist_reduce_##name##_max(S *o, Ins i, int k, u64 n) { reduce_n<S, 2>(o, i, k, n); } \\\n"
    "extern \"C\" __global__ void dist_reduce_##name##_min(S *o, Ins i, int k, u64 n) { reduce_n<S, 3>(o, i, k, n); } \\\n"
    "extern \"C\" __global__ void dist_avg_##name(S *b, u64 n, int d) { avg<S>(b, n, d); }\n"
    "KERNELS(int8, i8) KERNELS(uint8, u8) KERNELS(int32, i32) KERNELS(int64, i64)\n"
    "KERNELS(float16, f16) KERNELS(bfloat16, bf16) KERNELS(float32, float) KERNELS(float64, double)\n",
    NULL
};
static char *dist_cuda__kernel_src;             /* the pieces joined, made once */

DIST_API const char *dist_cuda_kernel_source(void) {
    pthread_mutex_lock(&dist_cuda__load_lock);
    if (!dist_cuda__kernel_src) {
        size_t n = 1;
        for (int i = 0; dist_cuda__kernel_parts[i]; i++) n += strlen(dist_cuda__kernel_parts[i]);
        if ((dist_cuda__kernel_src = (char *)DIST_MALLOC(n)) != NULL) {
            dist_cuda__kernel_src[0] = 0;
            for (int i = 0; dist_cuda__kernel_parts[i]; i++) strcat(dist_cuda__kernel_src, dist_cuda__kernel_parts[i]);
        }
    }
    pthread_mutex_unlock(&dist_cuda__load_lock);
    return dist_cuda__kernel_src;
}

static const char *const dist_cuda__op_names[DIST_OP_COUNT] = { "sum", "product", "max", "min", "sum" }; /* AVG: sum, then dist_avg */

/* [SECTION] kernels: compiling and loading */

/* The source compiled for compute capability sm: a cubin for sm_XY, or
   (ptx) PTX for compute_XY that the driver finishes.  *image is ours to
   free; log gets NVRTC's log. */
static dist_result dist_cuda__nvrtc(int sm, int ptx, char **image, size_t *size, char *log, size_t cap) {
    dist_cuda__nvrtcProgram prog = NULL;
    dist_cuda__nvrtcResult r;
    char arch[48];
    size_t n = 0;
    dist_result res = DIST_OK;
    if (log && cap) log[0] = 0;
    if (image) *image = NULL;
    if (dist_cuda__load_nvrtc() != 1)
        return dist_cuda__fail(DIST_ERR_NO_DEVICE, "cuda kernels: cannot load NVRTC, which compiles them: %s (set DIST_CUDA_LIBNVRTC to its path)",
                               dist_cuda__rtc.why);
    snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", sm);
    const char *opts[] = { arch, "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=false" };
    if (!dist_cuda_kernel_source()) return dist_cuda__fail(DIST_ERR_NOMEM, "cuda kernels: out of memory for their source");
    if ((r = dist_cuda__rtc.nvrtcCreateProgram(&prog, dist_cuda__kernel_src, "dist_cuda_kernels.cu", 0, NULL, NULL)) != 0)
        return dist_cuda__fail(DIST_ERR_CUDA, "cuda kernels: nvrtcCreateProgram: %s", dist_cuda__rtc.nvrtcGetErrorString(r));
    r = dist_cuda__rtc.nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    if (dist_cuda__rtc.nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1) {
        char *full = (char *)DIST_MALLOC(n);
        if (full && dist_cuda__rtc.nvrtcGetProgramLog(prog, full) == 0 && log && cap) snprintf(log, cap, "%s", full);
        DIST_FREE(full);
    }
    if (r != 0) {
        res = dist_cuda__fail(DIST_ERR_CUDA, "cuda kernels: NVRTC could not compile them for %s_%d: %s%s%.300s", ptx ? "compute" : "sm", sm,
                              dist_cuda__rtc.nvrtcGetErrorString(r), log && log[0] ? ": " : "", log ? log : "");
    } else if (image) {
        r = ptx ? dist_cuda__rtc.nvrtcGetPTXSize(prog, &n) : dist_cuda__rtc.nvrtcGetCUBINSize(prog, &n);
        if (r == 0 && !(*image = (char *)DIST_MALLOC(n ? n : 1))) res = dist_cuda__fail(DIST_ERR_NOMEM, "cuda kernels: out of memory (%zu bytes)", n);
        else if (r == 0) r = ptx ? dist_cuda__rtc.nvrtcGetPTX(prog, *image) : dist_cuda__rtc.nvrtcGetCUBIN(prog, *image);
        if (res == DIST_OK && r != 0) res = dist_cuda__fail(DIST_ERR_CUDA, "cuda kernels: reading NVRTC's output: %s", dist_cuda__rtc.nvrtcGetErrorString(r));
        if (res != DIST_OK) { DIST_FREE(*image); *image = NULL; }
        if (size) *size = n;
    }
    dist_cuda__rtc.nvrtcDestroyProgram(&prog);
    return res;
}

DIST_API dist_result dist_cuda_compile_kernels(int sm, char *log, size_t cap) {
    if (sm < 10 || sm > 1000) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_compile_kernels: %d is not a compute capability (80 means sm_80)", sm);
    return dist_cuda__nvrtc(sm, 0, NULL, NULL, log, cap);
}

/* The newest architecture NVRTC supports that is not newer than sm (0:
   none), and whether it is sm itself. */
static int dist_cuda__pick_arch(int sm, int *exact) {
    int n = 0, best = 0, archs[128];
    *exact = 0;
    if (dist_cuda__rtc.nvrtcGetNumSupportedArchs(&n) != 0 || n < 1 || n > 128 || dist_cuda__rtc.nvrtcGetSupportedArchs(archs) != 0) return 0;
    for (int i = 0; i < n; i++)
        if (archs[i] <= sm && archs[i] > best) best = archs[i];
    *exact = best == sm;
    return best;
}

/* [SECTION] communicator */
struct dist_cuda {
    dist_t *d;
    int rank, world, ordinal, sm, sm_count, failed;
    dist_cuda_backend backend;
    char device_name[96];
    dist_cuda__CUdevice dev;
    dist_cuda__CUcontext ctx;                       /* the device's primary context (cudart's too) */
    /* staged path */
    dist_cuda__CUstream up, down;                   /* device->host, host->device copies */
    dist_cuda__CUevent ev_user, ev_done, ev_up[DIST_CUDA__SLOTS], ev_down[DIST_CUDA__SLOTS];
    unsigned char *pinned;                          /* DIST_CUDA__SLOTS slots of slot_bytes */
    size_t slot_bytes;
    dist_req_t *req[DIST_CUDA__SLOTS];
    /* kernels, loaded at first use */
    dist_cuda__CUmodule module;
    dist_cuda__CUfunction kreduce[DIST_DTYPE_COUNT][4], kavg[DIST_DTYPE_COUNT];
    /* NCCL */
    dist_cuda__ncclComm nccl;
};

/* A driver call that must succeed: on failure, the sentence names the
   operation, the device and the driver's words. */
#define DIST_CUDA__CHECK(c, call, what)                                                                              \
    do {                                                                                                             \
        dist_cuda__CUresult r_ = (call);                                                                             \
        if (r_ != 0) return dist_cuda__cu_fail((c), r_, (what));                                                     \
    } while (0)

static dist_result dist_cuda__cu_fail(dist_cuda_t *c, dist_cuda__CUresult r, const char *what) {
    char words[160];
    if (c) c->failed = 1;
    return dist_cuda__fail(DIST_ERR_CUDA, "%s on rank %d, device %d (%s): %s", what, c ? c->rank : -1, c ? c->ordinal : -1,
                           c ? c->device_name : "?", dist_cuda__cu_words(r, words, sizeof words));
}

DIST_API dist_cuda_backend dist_cuda_backend_of(const dist_cuda_t *c) { return c ? c->backend : DIST_CUDA_AUTO; }
DIST_API int dist_cuda_device(const dist_cuda_t *c) { return c ? c->ordinal : -1; }

/* The device this rank uses, its context, and what it is. */
static dist_result dist_cuda__open_device(dist_cuda_t *c, const dist_cuda_config *cfg) {
    int n = 0, major = 0, minor = 0;
    char words[160];
    dist_cuda__CUresult r;
    if (dist_cuda__load_driver() != 1)
        return dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: no CUDA driver: %s", c->rank, dist_cuda__cu.why);
    if ((r = dist_cuda__cu.Init(0)) != 0)
        return dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: the CUDA driver did not start: %s", c->rank,
                               dist_cuda__cu_words(r, words, sizeof words));
    if ((r = dist_cuda__cu.DeviceGetCount(&n)) != 0 || n < 1)
        return dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: no CUDA device%s%s", c->rank, r ? ": " : "",
                               r ? dist_cuda__cu_words(r, words, sizeof words) : "");
    c->ordinal = cfg->device > 0 ? cfg->device - 1 : (dist_local_rank(c->d) > 0 ? dist_local_rank(c->d) : 0) % n;
    if (c->ordinal >= n)
        return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init on rank %d: device %d asked for (cfg.device %d), but this host has %d", c->rank,
                               c->ordinal, cfg->device, n);
    snprintf(c->device_name, sizeof c->device_name, "?");
    DIST_CUDA__CHECK(c, dist_cuda__cu.DeviceGet(&c->dev, c->ordinal), "dist_cuda_init: cuDeviceGet");
    dist_cuda__cu.DeviceGetName(c->device_name, (int)sizeof c->device_name, c->dev);
    DIST_CUDA__CHECK(c, dist_cuda__cu.DevicePrimaryCtxRetain(&c->ctx, c->dev), "dist_cuda_init: retaining the primary context");
    DIST_CUDA__CHECK(c, dist_cuda__cu.CtxSetCurrent(c->ctx), "dist_cuda_init: cuCtxSetCurrent");
    DIST_CUDA__CHECK(c, dist_cuda__cu.DeviceGetAttribute(&major, DIST_CUDA__ATTR_CC_MAJOR, c->dev), "dist_cuda_init: compute capability");
    DIST_CUDA__CHECK(c, dist_cuda__cu.DeviceGetAttribute(&minor, DIST_CUDA__ATTR_CC_MINOR, c->dev), "dist_cuda_init: compute capability");
    DIST_CUDA__CHECK(c, dist_cuda__cu.DeviceGetAttribute(&c->sm_count, DIST_CUDA__ATTR_SM_COUNT, c->dev), "dist_cuda_init: multiprocessor count");
    c->sm = major * 10 + minor;
    return DIST_OK;
}

/* Streams, events and pinned slots of the staged path. */
static dist_result dist_cuda__open_staged(dist_cuda_t *c, size_t chunk) {
    void *p = NULL;
    c->slot_bytes = chunk;
    DIST_CUDA__CHECK(c, dist_cuda__cu.StreamCreate(&c->up, DIST_CUDA__STREAM_NON_BLOCKING), "dist_cuda_init: cuStreamCreate");
    DIST_CUDA__CHECK(c, dist_cuda__cu.StreamCreate(&c->down, DIST_CUDA__STREAM_NON_BLOCKING), "dist_cuda_init: cuStreamCreate");
    DIST_CUDA__CHECK(c, dist_cuda__cu.EventCreate(&c->ev_user, DIST_CUDA__EVENT_DISABLE_TIMING), "dist_cuda_init: cuEventCreate");
    DIST_CUDA__CHECK(c, dist_cuda__cu.EventCreate(&c->ev_done, DIST_CUDA__EVENT_DISABLE_TIMING), "dist_cuda_init: cuEventCreate");
    for (int s = 0; s < DIST_CUDA__SLOTS; s++) {
        DIST_CUDA__CHECK(c, dist_cuda__cu.EventCreate(&c->ev_up[s], DIST_CUDA__EVENT_DISABLE_TIMING), "dist_cuda_init: cuEventCreate");
        DIST_CUDA__CHECK(c, dist_cuda__cu.EventCreate(&c->ev_down[s], DIST_CUDA__EVENT_DISABLE_TIMING), "dist_cuda_init: cuEventCreate");
    }
    DIST_CUDA__CHECK(c, dist_cuda__cu.MemHostAlloc(&p, DIST_CUDA__SLOTS * chunk, DIST_CUDA__HOSTALLOC_PORTABLE),
                     "dist_cuda_init: pinned staging memory (cuMemHostAlloc)");
    c->pinned = (unsigned char *)p;
    return DIST_OK;
}

/* Everything init made (whatever got made before a failure). */
static void dist_cuda__close(dist_cuda_t *c) {
    for (int s = 0; s < DIST_CUDA__SLOTS; s++)       /* before the memory they use goes */
        if (c->req[s]) { dist_wait(c->req[s]); c->req[s] = NULL; }
    if (dist_cuda__cu.state == 1 && c->ctx) {
        dist_cuda__cu.CtxSetCurrent(c->ctx);
        if (c->up) dist_cuda__cu.StreamSynchronize(c->up);
        if (c->down) dist_cuda__cu.StreamSynchronize(c->down);
#ifndef DIST_CUDA_NO_NCCL
        if (c->nccl) (c->failed ? dist_cuda__nccl.ncclCommAbort : dist_cuda__nccl.ncclCommDestroy)(c->nccl);
#endif
        if (c->pinned) dist_cuda__cu.MemFreeHost(c->pinned);
        for (int s = 0; s < DIST_CUDA__SLOTS; s++) {
            if (c->ev_up[s]) dist_cuda__cu.EventDestroy(c->ev_up[s]);
            if (c->ev_down[s]) dist_cuda__cu.EventDestroy(c->ev_down[s]);
        }
        if (c->ev_user) dist_cuda__cu.EventDestroy(c->ev_user);
        if (c->ev_done) dist_cuda__cu.EventDestroy(c->ev_done);
        if (c->up) dist_cuda__cu.StreamDestroy(c->up);
        if (c->down) dist_cuda__cu.StreamDestroy(c->down);
        if (c->module) dist_cuda__cu.ModuleUnload(c->module);
        dist_cuda__cu.DevicePrimaryCtxRelease(c->dev);
    }
    DIST_FREE(c);
}

/* The kernels for this device, compiled and loaded at first use. */
static dist_result dist_cuda__kernels(dist_cuda_t *c) {
    int exact = 0, arch;
    char *image = NULL, log[512];
    dist_result res;
    if (c->module) return DIST_OK;
    if (dist_cuda__load_nvrtc() != 1)
        return dist_cuda__fail(DIST_ERR_NO_DEVICE, "cuda kernels on rank %d: cannot load NVRTC, which compiles them: %s (set DIST_CUDA_LIBNVRTC to its path)",
                               c->rank, dist_cuda__rtc.why);
    if (!(arch = dist_cuda__pick_arch(c->sm, &exact)))
        return dist_cuda__fail(DIST_ERR_NO_DEVICE, "cuda kernels on rank %d: this NVRTC cannot compile for device %d (%s, sm_%d) or any older architecture",
                               c->rank, c->ordinal, c->device_name, c->sm);
    if ((res = dist_cuda__nvrtc(arch, !exact, &image, NULL, log, sizeof log)) != DIST_OK) return res;
    dist_cuda__CUresult r = dist_cuda__cu.ModuleLoadData(&c->module, image);
    DIST_FREE(image);
    if (r != 0) { c->module = NULL; return dist_cuda__cu_fail(c, r, "cuda kernels: cuModuleLoadData"); }
    for (int t = 0; t < DIST_DTYPE_COUNT; t++) {
        char name[64];
        for (int o = 0; o < 4; o++) {
            snprintf(name, sizeof name, "dist_reduce_%s_%s", dist_dtype_name((dist_dtype)t), dist_cuda__op_names[o]);
            DIST_CUDA__CHECK(c, dist_cuda__cu.ModuleGetFunction(&c->kreduce[t][o], c->module, name), "cuda kernels: cuModuleGetFunction");
        }
        snprintf(name, sizeof name, "dist_avg_%s", dist_dtype_name((dist_dtype)t));
        DIST_CUDA__CHECK(c, dist_cuda__cu.ModuleGetFunction(&c->kavg[t], c->module, name), "cuda kernels: cuModuleGetFunction");
    }
    return DIST_OK;
}

/* out = ins[0] op ... op ins[nin-1] on `stream`. */
static dist_result dist_cuda__launch_reduce(dist_cuda_t *c, void *out, const void *const *ins, int nin, size_t count, dist_dtype dtype, dist_op op,
                                            dist_cuda__CUstream stream) {
    struct { const void *p[DIST_CUDA__MAX_IN]; } in_ptrs;
    unsigned long long n = count;
    size_t per = 16 / dist_dtype_size(dtype), threads = (count + per - 1) / per;     /* one 16-byte vector each */
    size_t most = (size_t)(c->sm_count > 0 ? c->sm_count : 1) * 16, want = threads / 256 + 1;
    unsigned blocks = (unsigned)(want < most ? want : most);
    void *params[4];
    dist_result res;
    if ((res = dist_cuda__kernels(c)) != DIST_OK) return res;
    memset(&in_ptrs, 0, sizeof in_ptrs);
    for (int j = 0; j < nin; j++) in_ptrs.p[j] = ins[j];
    params[0] = &out; params[1] = &in_ptrs; params[2] = &nin; params[3] = &n;
    DIST_CUDA__CHECK(c, dist_cuda__cu.LaunchKernel(c->kreduce[dtype][op == DIST_AVG ? DIST_SUM : op], blocks, 1, 1, 256, 1, 1, 0,
                                                     stream, params, NULL),
                     "dist_cuda_reduce_local: launching the reduction kernel");
    return DIST_OK;
}

/* [SECTION] staged path: the chunk pipeline
   A call is a job: an input of in_rows rows of `count` elements (one
   rank's block each) at `in`, an output of out_rows rows at `out`, and
   the dist.h call that turns the input into the output on the host.
   Chunk k is columns [k*cols, (k+1)*cols) of every row; in a slot it is
   in_rows x len elements (the input) then out_rows x len (the output),
   or one area for calls that work in place.  cols comes from the slot
   size and the most rows the call has on any rank, so every rank cuts
   the same chunks.  Per iteration j: chunk j goes up (device to host) on
   `up`; chunk j-1, whose copy is waited for, goes to dist.h (which runs
   it on the communicator's worker thread); chunk j-2's dist.h request is
   waited for and its output goes down (host to device) on `down`.  A slot
   is reused DIST_CUDA__SLOTS chunks later, after its copy down (an event
   `up` waits on, on the device). */
typedef enum {
    DIST_CUDA__BROADCAST, DIST_CUDA__REDUCE, DIST_CUDA__ALL_REDUCE, DIST_CUDA__GATHER, DIST_CUDA__ALL_GATHER, DIST_CUDA__SCATTER,
    DIST_CUDA__REDUCE_SCATTER, DIST_CUDA__ALL_TO_ALL, DIST_CUDA__SEND, DIST_CUDA__RECV
} dist_cuda__kind;

static const char *const dist_cuda__kind_names[] = { "dist_cuda_broadcast", "dist_cuda_reduce", "dist_cuda_all_reduce", "dist_cuda_gather",
                                                     "dist_cuda_all_gather", "dist_cuda_scatter", "dist_cuda_reduce_scatter", "dist_cuda_all_to_all",
                                                     "dist_cuda_send", "dist_cuda_recv" };

typedef struct {
    dist_cuda__kind kind;
    dist_dtype dtype;
    dist_op op;
    int peer, tag;               /* root, or the other rank of a send/recv */
    size_t count;
    const void *in;
    void *out;
    int in_rows, out_rows;       /* on this rank */
    int max_rows;                /* in + out rows on the rank that has the most (one area in place) */
    int in_place;                /* input and output share one host area */
} dist_cuda__job;

/* The dist.h call for one chunk (len columns) on host memory. */
static dist_result dist_cuda__host_call(dist_cuda_t *c, const dist_cuda__job *j, void *hin, void *hout, size_t len, dist_req_t **req) {
    dist_t *d = c->d;
    switch (j->kind) {
    case DIST_CUDA__BROADCAST:      return dist_broadcast_async(d, hin, len, j->dtype, j->peer, req);
    case DIST_CUDA__REDUCE:         return dist_reduce_async(d, hin, len, j->dtype, j->op, j->peer, req);
    case DIST_CUDA__ALL_REDUCE:     return dist_all_reduce_async(d, hin, len, j->dtype, j->op, req);
    case DIST_CUDA__GATHER:         return dist_gather_async(d, hin, hout, len, j->dtype, j->peer, req);
    case DIST_CUDA__ALL_GATHER:     return dist_all_gather_async(d, hin, hout, len, j->dtype, req);
    case DIST_CUDA__SCATTER:        return dist_scatter_async(d, hin, hout, len, j->dtype, j->peer, req);
    case DIST_CUDA__REDUCE_SCATTER: return dist_reduce_scatter_async(d, hin, hout, len, j->dtype, j->op, req);
    case DIST_CUDA__ALL_TO_ALL:     return dist_all_to_all_async(d, hin, hout, len, j->dtype, req);
    case DIST_CUDA__SEND:           return dist_isend(d, hin, len, j->dtype, j->peer, j->tag, req);
    case DIST_CUDA__RECV:           return dist_irecv(d, hout, len, j->dtype, j->peer, j->tag, req);
    }
    return DIST_ERR_INVALID;
}

/* rows x width bytes between device memory (pitch dev_pitch) and a host
   area (rows packed), on stream s. */
static dist_cuda__CUresult dist_cuda__copy_rows(int up, unsigned long long dev, size_t dev_pitch, void *host, size_t width, int rows,
                                                dist_cuda__CUstream s) {
    dist_cuda__memcpy2d m;
    memset(&m, 0, sizeof m);
    if (rows < 1 || width == 0) return 0;
    if (up) {
        m.srcMemoryType = DIST_CUDA__MEM_DEVICE; m.srcDevice = dev; m.srcPitch = dev_pitch;
        m.dstMemoryType = DIST_CUDA__MEM_HOST; m.dstHost = host; m.dstPitch = width;
    } else {
        m.srcMemoryType = DIST_CUDA__MEM_HOST; m.srcHost = host; m.srcPitch = width;
        m.dstMemoryType = DIST_CUDA__MEM_DEVICE; m.dstDevice = dev; m.dstPitch = dev_pitch;
    }
    m.WidthInBytes = width;
    m.Height = (size_t)rows;
    return dist_cuda__cu.Memcpy2DAsync(&m, s);
}

static dist_result dist_cuda__staged(dist_cuda_t *c, const dist_cuda__job *j, dist_cuda__CUstream user) {
    const size_t es = dist_dtype_size(j->dtype), pitch = j->count * es;
    const size_t cols = c->slot_bytes / ((size_t)j->max_rows * es);
    const size_t nchunks = j->count ? (j->count + cols - 1) / cols : 1;
    const char *what = dist_cuda__kind_names[j->kind];
    dist_result res = DIST_OK;
    char why[DIST_CUDA__ERRLEN];
    if (cols == 0)
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: %d rows of %s do not fit the %zu-byte staging chunk (cfg.chunk_bytes)", what, c->rank,
                               j->max_rows, dist_dtype_name(j->dtype), c->slot_bytes);
    /* after the user's work on its stream, both directions */
    DIST_CUDA__CHECK(c, dist_cuda__cu.EventRecord(c->ev_user, user), "staged copy: cuEventRecord on the caller's stream");
    DIST_CUDA__CHECK(c, dist_cuda__cu.StreamWaitEvent(c->up, c->ev_user, 0), "staged copy: cuStreamWaitEvent");
    DIST_CUDA__CHECK(c, dist_cuda__cu.StreamWaitEvent(c->down, c->ev_user, 0), "staged copy: cuStreamWaitEvent");
    for (size_t it = 0; it < nchunks + 2 && res == DIST_OK; it++) {
        if (it < nchunks) {                                   /* chunk it: up */
            size_t k = it, s = k % DIST_CUDA__SLOTS, len = k + 1 < nchunks ? cols : j->count - k * cols;
            unsigned char *area = c->pinned + s * c->slot_bytes;
            if (k >= DIST_CUDA__SLOTS) DIST_CUDA__CHECK(c, dist_cuda__cu.StreamWaitEvent(c->up, c->ev_down[s], 0), "staged copy: cuStreamWaitEvent");
            DIST_CUDA__CHECK(c, dist_cuda__copy_rows(1, (unsigned long long)(uintptr_t)j->in + k * cols * es, pitch, area, len * es, j->in_rows, c->up),
                             "staged copy: device to host (cuMemcpy2DAsync)");
            DIST_CUDA__CHECK(c, dist_cuda__cu.EventRecord(c->ev_up[s], c->up), "staged copy: cuEventRecord");
        }
        if (it >= 1 && it - 1 < nchunks) {                    /* chunk it-1: through dist.h */
            size_t k = it - 1, s = k % DIST_CUDA__SLOTS, len = k + 1 < nchunks ? cols : j->count - k * cols;
            unsigned char *area = c->pinned + s * c->slot_bytes;
            DIST_CUDA__CHECK(c, dist_cuda__cu.EventSynchronize(c->ev_up[s]), "staged copy: waiting for a copy to the host");
            res = dist_cuda__host_call(c, j, area, j->in_place ? area : area + (size_t)j->in_rows * len * es, len, &c->req[s]);
        }
        if (res == DIST_OK && it >= 2) {                      /* chunk it-2: down */
            size_t k = it - 2, s = k % DIST_CUDA__SLOTS, len = k + 1 < nchunks ? cols : j->count - k * cols;
            unsigned char *area = c->pinned + s * c->slot_bytes;
            res = dist_wait(c->req[s]);
            c->req[s] = NULL;
            if (res == DIST_OK) {
                DIST_CUDA__CHECK(c, dist_cuda__copy_rows(0, (unsigned long long)(uintptr_t)j->out + k * cols * es, pitch,
                                                         j->in_place ? area : area + (size_t)j->in_rows * len * es, len * es, j->out_rows, c->down),
                                 "staged copy: host to device (cuMemcpy2DAsync)");
                DIST_CUDA__CHECK(c, dist_cuda__cu.EventRecord(c->ev_down[s], c->down), "staged copy: cuEventRecord");
            }
        }
    }
    if (res != DIST_OK) {
        /* dist.h's sentence, with what we were doing; the other requests
           fail or finish (the communicator's timeout bounds them) */
        snprintf(why, sizeof why, "%s", dist_error_message(c->d));
        for (int s = 0; s < DIST_CUDA__SLOTS; s++)
            if (c->req[s]) { dist_wait(c->req[s]); c->req[s] = NULL; }
        dist_cuda__cu.StreamSynchronize(c->up);
        dist_cuda__cu.StreamSynchronize(c->down);
        return dist_cuda__fail(res, "%s (%zu x %s, staged) on rank %d: %s", what, j->count, dist_dtype_name(j->dtype), c->rank, why);
    }
    /* the caller's stream goes on once everything is down */
    DIST_CUDA__CHECK(c, dist_cuda__cu.EventRecord(c->ev_done, c->down), "staged copy: cuEventRecord");
    DIST_CUDA__CHECK(c, dist_cuda__cu.StreamWaitEvent(user, c->ev_done, 0), "staged copy: cuStreamWaitEvent on the caller's stream");
    return DIST_OK;
}

/* [SECTION] NCCL backend */
#ifndef DIST_CUDA_NO_NCCL
/* ncclDataType_t in dist_dtype order; ncclRedOp_t in dist_op order. */
static const int dist_cuda__nccl_dtype[DIST_DTYPE_COUNT] = { 0 /* int8 */, 1 /* uint8 */, 2 /* int32 */, 4 /* int64 */,
                                                             6 /* float16 */, 9 /* bfloat16 */, 7 /* float32 */, 8 /* float64 */ };
static const int dist_cuda__nccl_op[DIST_OP_COUNT] = { 0 /* sum */, 1 /* prod */, 2 /* max */, 3 /* min */, 4 /* avg */ };

static dist_result dist_cuda__nccl_fail(dist_cuda_t *c, dist_cuda__ncclResult r, const char *what, const dist_cuda__job *j) {
    const char *last = c->nccl ? dist_cuda__nccl.ncclGetLastError(c->nccl) : NULL;
    c->failed = 1;
    if (j)
        return dist_cuda__fail(DIST_ERR_NCCL, "%s (%zu x %s, NCCL) on rank %d, device %d: %s%s%s", what, j->count, dist_dtype_name(j->dtype), c->rank,
                               c->ordinal, dist_cuda__nccl.ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    return dist_cuda__fail(DIST_ERR_NCCL, "%s on rank %d, device %d: %s%s%s", what, c->rank, c->ordinal, dist_cuda__nccl.ncclGetErrorString(r),
                           last && *last ? ": " : "", last ? last : "");
}

/* Rank 0's ncclUniqueId reaches every rank through dist.h (a broadcast
   on the communicator the caller gave, so a group gets its own). */
static dist_result dist_cuda__open_nccl(dist_cuda_t *c) {
    dist_cuda__ncclUniqueId id;
    dist_cuda__ncclResult r = 0;
    dist_result res;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) r = dist_cuda__nccl.ncclGetUniqueId(&id);
    /* a failure on rank 0 travels as an all-zero id the others refuse */
    if ((res = dist_broadcast(c->d, &id, sizeof id, DIST_UINT8, 0)) != DIST_OK)
        return dist_cuda__fail(res, "dist_cuda_init (NCCL) on rank %d: sending NCCL's id: %s", c->rank, dist_error_message(c->d));
    if (r != 0) return dist_cuda__nccl_fail(c, r, "dist_cuda_init: ncclGetUniqueId", NULL);
    {
        static const dist_cuda__ncclUniqueId zero = { { 0 } };
        if (memcmp(&id, &zero, sizeof id) == 0)
            return dist_cuda__fail(DIST_ERR_NCCL, "dist_cuda_init (NCCL) on rank %d: rank 0 could not make NCCL's id (its error says why)", c->rank);
    }
    if ((r = dist_cuda__nccl.ncclCommInitRank(&c->nccl, c->world, id, c->rank)) != 0) {
        c->nccl = NULL;
        return dist_cuda__nccl_fail(c, r, "dist_cuda_init: ncclCommInitRank", NULL);
    }
    return DIST_OK;
}

static dist_result dist_cuda__nccl_run(dist_cuda_t *c, const dist_cuda__job *j, dist_cuda__CUstream s) {
    const int dt = dist_cuda__nccl_dtype[j->dtype], op = dist_cuda__nccl_op[j->op];
    const size_t bytes = j->count * dist_dtype_size(j->dtype);
    const char *what = dist_cuda__kind_names[j->kind];
    dist_cuda__ncclComm nc = c->nccl;
    dist_cuda__ncclResult r = 0;
    switch (j->kind) {
    case DIST_CUDA__BROADCAST:      r = dist_cuda__nccl.ncclBroadcast(j->out, j->out, j->count, dt, j->peer, nc, s); break;
    case DIST_CUDA__REDUCE:         r = dist_cuda__nccl.ncclReduce(j->out, j->out, j->count, dt, op, j->peer, nc, s); break;
    case DIST_CUDA__ALL_REDUCE:     r = dist_cuda__nccl.ncclAllReduce(j->out, j->out, j->count, dt, op, nc, s); break;
    case DIST_CUDA__ALL_GATHER:     r = dist_cuda__nccl.ncclAllGather(j->in, j->out, j->count, dt, nc, s); break;
    case DIST_CUDA__REDUCE_SCATTER: r = dist_cuda__nccl.ncclReduceScatter(j->in, j->out, j->count, dt, op, nc, s); break;
    case DIST_CUDA__SEND:           r = dist_cuda__nccl.ncclSend(j->in, j->count, dt, j->peer, nc, s); break;
    case DIST_CUDA__RECV:           r = dist_cuda__nccl.ncclRecv(j->out, j->count, dt, j->peer, nc, s); break;
    case DIST_CUDA__GATHER: case DIST_CUDA__SCATTER: case DIST_CUDA__ALL_TO_ALL: {
        /* grouped sends and receives (NCCL has no such collective) */
        const int root_side = j->kind == DIST_CUDA__ALL_TO_ALL || c->rank == j->peer;
        if ((r = dist_cuda__nccl.ncclGroupStart()) != 0) break;
        for (int p = 0; p < c->world && r == 0; p++) {
            const char *in = (const char *)j->in, *out = (const char *)j->out;
            if (j->kind == DIST_CUDA__GATHER) {
                if (root_side) r = dist_cuda__nccl.ncclRecv((void *)(out + (size_t)p * bytes), j->count, dt, p, nc, s);
                if (r == 0 && p == j->peer) r = dist_cuda__nccl.ncclSend(in, j->count, dt, p, nc, s);
            } else if (j->kind == DIST_CUDA__SCATTER) {
                if (root_side) r = dist_cuda__nccl.ncclSend(in + (size_t)p * bytes, j->count, dt, p, nc, s);
                if (r == 0 && p == j->peer) r = dist_cuda__nccl.ncclRecv((void *)out, j->count, dt, p, nc, s);
            } else {
                r = dist_cuda__nccl.ncclSend(in + (size_t)p * bytes, j->count, dt, p, nc, s);
                if (r == 0) r = dist_cuda__nccl.ncclRecv((void *)(out + (size_t)p * bytes), j->count, dt, p, nc, s);
            }
        }
        dist_cuda__ncclResult e = dist_cuda__nccl.ncclGroupEnd();
        if (r == 0) r = e;
        break;
    }
    }
    return r == 0 ? DIST_OK : dist_cuda__nccl_fail(c, r, what, j);
}
#endif

/* [SECTION] the calls */
DIST_API dist_result dist_cuda_init(dist_t *d, const dist_cuda_config *cfg_in, dist_cuda_t **out) {
    dist_cuda_config cfg;
    dist_cuda_t *c;
    dist_result res;
    int64_t agree[2];
    const char *env = getenv("DIST_CUDA_BACKEND");
    if (!out) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: NULL out");
    *out = NULL;
    if (!d) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: NULL communicator");
    memset(&cfg, 0, sizeof cfg);
    if (cfg_in) cfg = *cfg_in;
    if (cfg.backend == DIST_CUDA_AUTO && env && *env) {
        if (!strcmp(env, "staged")) cfg.backend = DIST_CUDA_STAGED;
        else if (!strcmp(env, "nccl")) cfg.backend = DIST_CUDA_NCCL;
        else if (strcmp(env, "auto") != 0)
            return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: DIST_CUDA_BACKEND=%s: want auto, staged or nccl", env);
    }
    if (cfg.backend < DIST_CUDA_AUTO || cfg.backend > DIST_CUDA_NCCL)
        return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: backend %d is not a dist_cuda_backend", (int)cfg.backend);
    if (!(c = (dist_cuda_t *)DIST_MALLOC(sizeof *c))) return dist_cuda__fail(DIST_ERR_NOMEM, "dist_cuda_init: out of memory");
    memset(c, 0, sizeof *c);
    c->d = d;
    c->rank = dist_rank(d);
    c->world = dist_world_size(d);
    c->backend = cfg.backend;
    res = dist_cuda__open_device(c, &cfg);
    /* Every rank must take the same path: agree on whether all have a
       device and NCCL (MIN over the ranks), and on the chunk size (MIN). */
#ifndef DIST_CUDA_NO_NCCL
    agree[0] = res != DIST_OK ? -1 : c->backend != DIST_CUDA_STAGED && dist_cuda__load_nccl() == 1 ? 1 : 0;
#else
    agree[0] = res != DIST_OK ? -1 : 0;
#endif
    agree[1] = cfg.chunk_bytes ? (int64_t)(cfg.chunk_bytes < 4096 ? 4096 : cfg.chunk_bytes) : (int64_t)1 << 20;
    if (dist_all_reduce(d, agree, 2, DIST_INT64, DIST_MIN) != DIST_OK) {
        char why[DIST_CUDA__ERRLEN];
        snprintf(why, sizeof why, "%s", dist_error_message(d));
        if (res == DIST_OK) res = dist_cuda__fail(DIST_ERR_INIT, "dist_cuda_init on rank %d: agreeing with the other ranks: %s", c->rank, why);
    } else if (res == DIST_OK && agree[0] < 0) {
        res = dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: another rank has no usable CUDA device (its error says why)", c->rank);
    } else if (res == DIST_OK && cfg.backend == DIST_CUDA_NCCL && agree[0] == 0) {
#ifdef DIST_CUDA_NO_NCCL
        res = dist_cuda__fail(DIST_ERR_UNSUPPORTED, "dist_cuda_init: the NCCL backend was left out of this build (DIST_CUDA_NO_NCCL)");
#else
        res = dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: backend NCCL, but %s", c->rank,
                              dist_cuda__nccl.state == 1 ? "another rank cannot load NCCL" : dist_cuda__nccl.why);
#endif
    }
    if (res == DIST_OK) {
        c->backend = agree[0] == 1 ? DIST_CUDA_NCCL : DIST_CUDA_STAGED;
#ifndef DIST_CUDA_NO_NCCL
        if (c->backend == DIST_CUDA_NCCL) res = dist_cuda__open_nccl(c);
        else
#endif
            res = dist_cuda__open_staged(c, (size_t)agree[1]);
    }
    if (res != DIST_OK) { dist_cuda__close(c); return res; }
    *out = c;
    return DIST_OK;
}

DIST_API dist_result dist_cuda_destroy(dist_cuda_t *c) {
    if (c) dist_cuda__close(c);
    return DIST_OK;
}

/* Checks shared by the calls, then the job on the communicator's path. */
static dist_result dist_cuda__run(dist_cuda_t *c, dist_cuda__job *j, dist_cuda_stream stream) {
    const char *what = dist_cuda__kind_names[j->kind];
    int rooted = j->kind == DIST_CUDA__BROADCAST || j->kind == DIST_CUDA__REDUCE || j->kind == DIST_CUDA__GATHER || j->kind == DIST_CUDA__SCATTER;
    int p2p = j->kind == DIST_CUDA__SEND || j->kind == DIST_CUDA__RECV;
    if (!c) return dist_cuda__fail(DIST_ERR_INVALID, "%s: NULL communicator (did dist_cuda_init fail?)", what);
    if (c->failed) return dist_cuda__fail(DIST_ERR_FAILED, "%s on rank %d: the communicator failed earlier (see that error)", what, c->rank);
    if (dist_dtype_size(j->dtype) == 0) return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: dtype %d is not a dist_dtype", what, c->rank, (int)j->dtype);
    if ((unsigned)j->op >= DIST_OP_COUNT) return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: op %d is not a dist_op", what, c->rank, (int)j->op);
    if ((rooted || p2p) && (j->peer < 0 || j->peer >= c->world || (p2p && j->peer == c->rank)))
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: %s %d is not %s of the %d ranks", what, c->rank, p2p ? "peer" : "root", j->peer,
                               p2p ? "another" : "one", c->world);
    if (j->count && ((j->in_rows && !j->in) || (j->out_rows && !j->out)))
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: NULL buffer for %zu x %s", what, c->rank, j->count, dist_dtype_name(j->dtype));
    if (j->count > ((size_t)1 << 62) / dist_dtype_size(j->dtype) / (size_t)c->world)
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: count %zu is too large", what, c->rank, j->count);
    DIST_CUDA__CHECK(c, dist_cuda__cu.CtxSetCurrent(c->ctx), "cuCtxSetCurrent");
#ifndef DIST_CUDA_NO_NCCL
    if (c->backend == DIST_CUDA_NCCL) return dist_cuda__nccl_run(c, j, stream);
#endif
    return dist_cuda__staged(c, j, stream);
}

/* A job: kind, buffers with their rows here, the most rows any rank has. */
static dist_cuda__job dist_cuda__mkjob(dist_cuda__kind kind, const void *in, int in_rows, void *out, int out_rows, int max_rows, int in_place,
                                       size_t count, dist_dtype dtype, dist_op op, int peer) {
    dist_cuda__job j;
    memset(&j, 0, sizeof j);
    j.kind = kind; j.in = in; j.in_rows = in_rows; j.out = out; j.out_rows = out_rows; j.max_rows = max_rows; j.in_place = in_place;
    j.count = count; j.dtype = dtype; j.op = op; j.peer = peer;
    return j;
}

#define DIST_CUDA__W (c ? c->world : 1)
#define DIST_CUDA__ME (c ? c->rank : -1)

DIST_API dist_result dist_cuda_broadcast(dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, int root, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__BROADCAST, buf, DIST_CUDA__ME == root, buf, DIST_CUDA__ME != root, 1, 1, count, dtype, DIST_SUM, root);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_reduce(dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, dist_op op, int root, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__REDUCE, buf, 1, buf, DIST_CUDA__ME == root, 1, 1, count, dtype, op, root);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_all_reduce(dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, dist_op op, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__ALL_REDUCE, buf, 1, buf, 1, 1, 1, count, dtype, op, 0);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_gather(dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__GATHER, send, 1, recv, DIST_CUDA__ME == root ? DIST_CUDA__W : 0, 1 + DIST_CUDA__W, 0, count, dtype,
                                        DIST_SUM, root);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_all_gather(dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__ALL_GATHER, send, 1, recv, DIST_CUDA__W, 1 + DIST_CUDA__W, 0, count, dtype, DIST_SUM, 0);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_scatter(dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__SCATTER, send, DIST_CUDA__ME == root ? DIST_CUDA__W : 0, recv, 1, DIST_CUDA__W + 1, 0, count, dtype,
                                        DIST_SUM, root);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_reduce_scatter(dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op,
                                              dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__REDUCE_SCATTER, send, DIST_CUDA__W, recv, 1, DIST_CUDA__W + 1, 0, count, dtype, op, 0);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_all_to_all(dist_cuda_t *c, const void *send, void *recv, size_t count, dist_dtype dtype, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__ALL_TO_ALL, send, DIST_CUDA__W, recv, DIST_CUDA__W, 2 * DIST_CUDA__W, 0, count, dtype, DIST_SUM, 0);
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_send(dist_cuda_t *c, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__SEND, buf, 1, NULL, 0, 1, 1, count, dtype, DIST_SUM, dst);
    j.tag = tag;
    return dist_cuda__run(c, &j, stream);
}
DIST_API dist_result dist_cuda_recv(dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, int src, int tag, dist_cuda_stream stream) {
    dist_cuda__job j = dist_cuda__mkjob(DIST_CUDA__RECV, NULL, 0, buf, 1, 1, 1, count, dtype, DIST_SUM, src);
    j.tag = tag;
    return dist_cuda__run(c, &j, stream);
}
#undef DIST_CUDA__W
#undef DIST_CUDA__ME

/* The barrier: dist.h's, once the work already on `stream` is done. */
DIST_API dist_result dist_cuda_barrier(dist_cuda_t *c, dist_cuda_stream stream) {
    dist_result res;
    if (!c) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_barrier: NULL communicator (did dist_cuda_init fail?)");
    if (c->failed) return dist_cuda__fail(DIST_ERR_FAILED, "dist_cuda_barrier on rank %d: the communicator failed earlier (see that error)", c->rank);
    DIST_CUDA__CHECK(c, dist_cuda__cu.CtxSetCurrent(c->ctx), "dist_cuda_barrier: cuCtxSetCurrent");
    DIST_CUDA__CHECK(c, dist_cuda__cu.StreamSynchronize(stream), "dist_cuda_barrier: waiting for the stream");
    if ((res = dist_barrier(c->d)) != DIST_OK) return dist_cuda__fail(res, "dist_cuda_barrier on rank %d: %s", c->rank, dist_error_message(c->d));
    return DIST_OK;
}

DIST_API dist_result dist_cuda_reduce_local(dist_cuda_t *c, void *dst, const void *src, size_t count, dist_dtype dtype, dist_op op,
                                            dist_cuda_stream stream) {
    const void *ins[2];
    if (!c) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_reduce_local: NULL communicator (did dist_cuda_init fail?)");
    if (dist_dtype_size(dtype) == 0 || (unsigned)op >= DIST_OP_COUNT)
        return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_reduce_local: dtype %d / op %d", (int)dtype, (int)op);
    if (count == 0) return DIST_OK;
    if (!dst || !src) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_reduce_local: NULL buffer for %zu x %s", count, dist_dtype_name(dtype));
    DIST_CUDA__CHECK(c, dist_cuda__cu.CtxSetCurrent(c->ctx), "dist_cuda_reduce_local: cuCtxSetCurrent");
    ins[0] = dst;
    ins[1] = src;
    return dist_cuda__launch_reduce(c, dst, ins, 2, count, dtype, op, stream);
}

#endif /* DIST_CUDA_IMPLEMENTATION */

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
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright law, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity for the benefit of the public at
large and to the detriment of all present and future heirs and successors to
this software under copyright law. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT
WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
------------------------------------------------------------------------------
*/
