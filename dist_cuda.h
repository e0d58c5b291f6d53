/* dist_cuda.h - v0.1.0 - dist's collectives and point-to-point on CUDA
   device memory: a staged path over dist.h's transports, CUDA IPC between
   the ranks of one host, reduction kernels compiled at run time, and an
   NCCL backend.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_CUDA_IMPLEMENTATION
      #include "dist_cuda.h"
   in ONE C or C++ file (usually the one that defines DIST_IMPLEMENTATION
   too, before any other #include there, as dist.h asks; dist_cuda.h
   includes dist.h itself); include "dist_cuda.h" without the define
   everywhere else.  No CUDA header is needed and nothing CUDA is linked:
   the implementation opens the driver (libcuda.so.1), NVRTC and NCCL with
   dlopen when a communicator is made.  Link with -pthread, and -ldl where
   dlopen is not in libc yet (glibc before 2.34; harmless after it;
   Windows: -lws2_32, see dist.h):
      cc -std=c11 -O2 prog.c -o prog -pthread -ldl
   A program built with dist_cuda.h runs on a machine without CUDA;
   dist_cuda_init then says why it cannot.

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
   NCCL returns once its kernel is enqueued; IPC returns once its work is
   done (it synchronises `stream`).

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
   DIST_CUDA_IPC serves ranks that are processes of one host: each call
   synchronises `stream`, all-gathers over the dist_t one small record per
   rank (the CUDA IPC handle of each buffer's allocation, the buffer's
   offset in it, and the call's count, dtype, op and root, so that ranks
   that disagree all fail with DIST_ERR_MISMATCH naming both), maps the
   peers' allocations and works on them directly: copies with
   cuMemcpyDtoDAsync, reductions with the kernels below, every rank
   writing only its own buffers.  all_reduce: rank j reduces slice j of
   every rank's buffer into its own, then copies each other slice from the
   rank that reduced it.  A call ends with the stream synchronised and a
   small dist_all_reduce in the place of a barrier: it returns once its
   results are in place and no peer still reads its buffers, and a rank
   that failed is named on the others (DIST_ERR_FAILED).  Mappings stay
   open for later calls (at most 64 + 2 x world size per communicator, the
   least recently used closed first; an allocation its owner has freed or
   reallocated is closed at the owner's next call; all at
   dist_cuda_destroy).  Free buffers between calls, never during one.
   Buffers CUDA IPC cannot share (cudaMallocAsync pools, managed memory,
   pinned host memory, cuMemMap'ed memory) and in-place forms in which a
   rank would overwrite what a peer still reads (all_gather with
   send == recv on a rank other than 0, scatter's recv == send at a root
   other than 0, reduce_scatter with recv elsewhere in send than the
   rank's own block, all_to_all with send == recv) take the staged path
   for that call, on every rank.  send, recv and barrier are the staged
   path's.  AUTO picks NCCL when it loads; else IPC when there are two or
   more ranks, all processes of this host, NVRTC loads on each, and at
   dist_cuda_init every rank could map every other rank's device memory
   (and reach its device, peer access); else the staged path.  With
   backend IPC asked for, each of those (but the count of ranks) is an
   error that dist_cuda_init returns on every rank.

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

   Logging.  Through the dist_t's logger (dist_log: cfg.logger, or
   stderr under DIST_DEBUG=info|detail), "[rank R] cuda: " first.  info:
   the device, backend and chunk size dist_cuda_init chose, and how long
   it took; a failed init's sentence (ERROR).  detail: why that backend
   (ranks on one host or more, NVRTC everywhere, a failed CUDA IPC probe),
   NCCL's communicator made, the kernels compiled (once, at first use),
   destroy.  Collectives log nothing.

COMPILE-TIME OPTIONS
   DIST_CUDA_IMPLEMENTATION  where: one file.  Compile the implementation.
   DIST_CUDA_NO_NCCL         where: the implementation file.  Leave the
                             NCCL backend out (it is never loaded).
   DIST_STATIC, DIST_MALLOC/DIST_FREE/DIST_REALLOC as in dist.h.

RUN-TIME ENVIRONMENT
   DIST_CUDA_BACKEND         auto | staged | nccl | ipc: when the config
                             leaves it
   DIST_CUDA_LIBCUDA, DIST_CUDA_LIBNVRTC, DIST_CUDA_LIBNCCL
                             the libraries' file names or paths, when the
                             defaults (libcuda.so.1; libnvrtc.so.13, .12,
                             .so; libnccl.so.2) are not the ones to load

THREADS
   A dist_cuda_t is used by one thread at a time (as its dist_t is).

WHAT IT DOES NOT DO (yet)
   The _async twins (the calls are already ordered on a stream), and
   point-to-point over CUDA IPC (the IPC backend sends and receives
   through the staged path).
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
    DIST_CUDA_AUTO = 0,      /* NCCL when it loads, else IPC when every rank is on this host, else STAGED */
    DIST_CUDA_STAGED = 1,    /* copies through pinned host memory and dist.h */
    DIST_CUDA_NCCL = 2,      /* NCCL (not in builds with DIST_CUDA_NO_NCCL) */
    DIST_CUDA_IPC = 3        /* every rank on one host: CUDA IPC, reducing in device memory */
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
   [SECTION] loading libraries
   [SECTION] the driver, NVRTC and NCCL, as function tables
   [SECTION] kernels: the CUDA C source
   [SECTION] kernels: compiling and loading
   [SECTION] communicator
   [SECTION] staged path: the chunk pipeline
   [SECTION] IPC backend
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

/* [SECTION] loading libraries
   Through dist.h's platform layer (dist__lib_open, dist__lib_sym), like
   every other system call: a port replaces that layer, not this file. */
static void *dist_cuda__open(const char *env, const char *const *names, char *why, size_t cap) {
    const char *own = dist__getenv(env);
    void *h = NULL;
    char err[200];
    why[0] = 0;
    if (own) {
        if (!(h = dist__lib_open(own, err, sizeof err))) snprintf(why, cap, "%s=%s: %s", env, own, err);
        return h;
    }
    for (int i = 0; names[i] && !h; i++)
        if (!(h = dist__lib_open(names[i], err, sizeof err)) && !why[0]) snprintf(why, cap, "%s", err);
    return h;
}

static void *dist_cuda__sym(void *lib, const char *name, int *missing) {
    void *p = dist__lib_sym(lib, name);
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
#define DIST_CUDA__IPC_HANDLE_SIZE 64
typedef struct { char reserved[DIST_CUDA__IPC_HANDLE_SIZE]; } dist_cuda__CUipcMemHandle;   /* CUipcMemHandle */
typedef struct { char bytes[16]; } dist_cuda__CUuuid;                                     /* CUuuid */
#define DIST_CUDA__IPC_LAZY_ENABLE_PEER_ACCESS 1     /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
#define DIST_CUDA__POINTER_BUFFER_ID 7               /* CU_POINTER_ATTRIBUTE_BUFFER_ID */

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
    X(dist_cuda__CUresult, MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2",                                        \
      (dist_cuda__CUdeviceptr dst, dist_cuda__CUdeviceptr src, size_t n, dist_cuda__CUstream s))             \
    X(dist_cuda__CUresult, MemGetAddressRange, "cuMemGetAddressRange_v2",                                  \
      (dist_cuda__CUdeviceptr *base, size_t *size, dist_cuda__CUdeviceptr p))                                \
    X(dist_cuda__CUresult, PointerGetAttribute, "cuPointerGetAttribute", (void *data, int attr, dist_cuda__CUdeviceptr p)) \
    X(dist_cuda__CUresult, IpcGetMemHandle, "cuIpcGetMemHandle", (dist_cuda__CUipcMemHandle *h, dist_cuda__CUdeviceptr p)) \
    X(dist_cuda__CUresult, IpcOpenMemHandle, "cuIpcOpenMemHandle_v2",                                      \
      (dist_cuda__CUdeviceptr *p, dist_cuda__CUipcMemHandle h, unsigned flags))                              \
    X(dist_cuda__CUresult, IpcCloseMemHandle, "cuIpcCloseMemHandle", (dist_cuda__CUdeviceptr p))            \
    X(dist_cuda__CUresult, DeviceGetUuid, "cuDeviceGetUuid_v2", (dist_cuda__CUuuid *u, dist_cuda__CUdevice d)) \
    X(dist_cuda__CUresult, DeviceCanAccessPeer, "cuDeviceCanAccessPeer", (int *can, dist_cuda__CUdevice d, dist_cuda__CUdevice peer)) \
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
static dist__mutex dist_cuda__load_lock = DIST__MUTEX_INITIALIZER;

/* A function pointer from dlsym's void * (copied: C and C++ both allow that). */
static void dist_cuda__set(void *field, void *p) { memcpy(field, &p, sizeof p); }
#define DIST_CUDA__LOAD(ret, name, sym, params) dist_cuda__set(&t->name, dist_cuda__sym(lib, sym, &missing));
#define DIST_CUDA__LOADER(fn, T, table, FUNCS, env, ...)                                                \
    static int fn(void) {                                                                                \
        static const char *const names[] = { __VA_ARGS__, NULL };                                        \
        T *t = &table;                                                                                   \
        dist__mutex_lock(&dist_cuda__load_lock);                                                       \
        if (t->state == 0) {                                                                             \
            int missing = 0;                                                                             \
            void *lib = dist_cuda__open(env, names, t->why, sizeof t->why);                              \
            if (lib) {                                                                                   \
                FUNCS(DIST_CUDA__LOAD)                                                                   \
                if (missing) snprintf(t->why, sizeof t->why, "%s lacks a function this library needs (too old?)", names[0]); \
            }                                                                                            \
            t->state = lib && !missing ? 1 : -1;                                                         \
        }                                                                                                \
        dist__mutex_unlock(&dist_cuda__load_lock);                                                     \
        return t->state;                                                                                 \
    }
#ifdef _WIN32
/* (NCCL has no Windows build: there the NCCL backend reports it cannot load
   it, and the staged one runs.) */
DIST_CUDA__LOADER(dist_cuda__load_driver, dist_cuda__driver_table, dist_cuda__cu, DIST_CUDA__DRIVER_FUNCS, "DIST_CUDA_LIBCUDA", "nvcuda.dll")
DIST_CUDA__LOADER(dist_cuda__load_nvrtc, dist_cuda__nvrtc_table, dist_cuda__rtc, DIST_CUDA__NVRTC_FUNCS, "DIST_CUDA_LIBNVRTC", "nvrtc64_130_0.dll",
                  "nvrtc64_120_0.dll", "nvrtc64_112_0.dll")
#ifndef DIST_CUDA_NO_NCCL
DIST_CUDA__LOADER(dist_cuda__load_nccl, dist_cuda__nccl_table, dist_cuda__nccl, DIST_CUDA__NCCL_FUNCS, "DIST_CUDA_LIBNCCL", "nccl.dll")
#endif
#else
DIST_CUDA__LOADER(dist_cuda__load_driver, dist_cuda__driver_table, dist_cuda__cu, DIST_CUDA__DRIVER_FUNCS, "DIST_CUDA_LIBCUDA", "libcuda.so.1")
DIST_CUDA__LOADER(dist_cuda__load_nvrtc, dist_cuda__nvrtc_table, dist_cuda__rtc, DIST_CUDA__NVRTC_FUNCS, "DIST_CUDA_LIBNVRTC", "libnvrtc.so.13", "libnvrtc.so.12",
                  "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so")
#ifndef DIST_CUDA_NO_NCCL
DIST_CUDA__LOADER(dist_cuda__load_nccl, dist_cuda__nccl_table, dist_cuda__nccl, DIST_CUDA__NCCL_FUNCS, "DIST_CUDA_LIBNCCL", "libnccl.so.2", "libnccl.so",
                  "/usr/local/cuda/lib64/libnccl.so.2")
#endif
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
    dist__mutex_lock(&dist_cuda__load_lock);
    if (!dist_cuda__kernel_src) {
        size_t n = 1;
        for (int i = 0; dist_cuda__kernel_parts[i]; i++) n += strlen(dist_cuda__kernel_parts[i]);
        if ((dist_cuda__kernel_src = (char *)DIST_MALLOC(n)) != NULL) {
            dist_cuda__kernel_src[0] = 0;
            for (int i = 0; dist_cuda__kernel_parts[i]; i++) strcat(dist_cuda__kernel_src, dist_cuda__kernel_parts[i]);
        }
    }
    dist__mutex_unlock(&dist_cuda__load_lock);
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
#define DIST_CUDA__IPC_MAPS 64           /* peers' allocations kept mapped (plus 2 per rank) */
#define DIST_CUDA__IPC_EXPORTS 64        /* own allocations remembered, with their handles */
#define DIST_CUDA__IPC_RETIRE 8          /* handles a record retires */
#define DIST_CUDA__IPC_RETIRE_QUEUE 128  /* retired handles waiting for a record */

/* One rank's part of an IPC call, all-gathered before any data moves
   (ranks of one host: one byte order, one layout). */
typedef struct {
    int64_t status;                      /* DIST_CUDA__IPC_OK, _STAGE or _FAILED */
    int64_t fatal;                       /* _FAILED: the communicator failed with it */
    int64_t kind, dtype, op, root;
    uint64_t count;
    int64_t nretired;
    struct {                             /* [0] the input (or the one buffer), [1] the output */
        int64_t present;
        uint64_t offset, size;           /* of the buffer in its allocation; the allocation's size */
        unsigned char handle[DIST_CUDA__IPC_HANDLE_SIZE];
    } buf[2];
    unsigned char retired[DIST_CUDA__IPC_RETIRE][DIST_CUDA__IPC_HANDLE_SIZE];  /* close these */
} dist_cuda__ipc_record;

typedef struct {                         /* an allocation of this rank's that a call shared */
    int in_use, exportable;
    unsigned long long id;               /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique in the process */
    dist_cuda__CUdeviceptr base;
    size_t size;
    unsigned long long used;             /* the call that last shared it */
    unsigned char handle[DIST_CUDA__IPC_HANDLE_SIZE];
} dist_cuda__ipc_export;

typedef struct {                         /* a peer's allocation, mapped here */
    int peer;                            /* -1: a free entry */
    dist_cuda__CUdeviceptr base;
    size_t size;                         /* as the driver maps it (not as the peer says) */
    unsigned long long used;
    unsigned char handle[DIST_CUDA__IPC_HANDLE_SIZE];
} dist_cuda__ipc_map;

static const char *const dist_cuda__backend_names[] = { "auto", "staged", "nccl", "ipc" };   /* (dist_cuda_backend order) */

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
    /* IPC (made when the backend is IPC) */
    dist_cuda__ipc_record ipc_mine, *ipc_all;       /* this call's records, rank by rank */
    int ipc_all_valid;                              /* ipc_all holds the last exchange (retirements to act on) */
    dist_cuda__ipc_map *ipc_maps;
    int ipc_nmaps;
    dist_cuda__ipc_export ipc_exports[DIST_CUDA__IPC_EXPORTS];
    unsigned char ipc_retire[DIST_CUDA__IPC_RETIRE_QUEUE][DIST_CUDA__IPC_HANDLE_SIZE];
    int ipc_retire_head, ipc_retire_n;
    dist_cuda__CUdeviceptr *ipc_ptrs;               /* world entries: a call's inputs */
    unsigned long long ipc_call;                    /* calls so far: the LRU clock */
    unsigned long long ipc_opens, ipc_closes;       /* mappings opened and closed (the tests read them) */
    unsigned long long ipc_staged;                  /* calls that took the staged path (the tests read it) */
    int ipc_fan_in;                                 /* inputs per reduction launch (0: DIST_CUDA__MAX_IN); the
                                                       tests set 2 to run the chained launches of n > 8 ranks */
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

/* The same, with the operation formatted. */
static dist_result dist_cuda__cu_failf(dist_cuda_t *c, dist_cuda__CUresult r, const char *fmt, ...) {
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dist_cuda__cu_fail(c, r, what);
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
        if (c->ipc_maps)                               /* IPC mappings: nothing of ours runs any more */
            for (int i = 0; i < c->ipc_nmaps; i++)
                if (c->ipc_maps[i].peer >= 0) dist_cuda__cu.IpcCloseMemHandle(c->ipc_maps[i].base);
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
    DIST_FREE(c->ipc_all);
    DIST_FREE(c->ipc_maps);
    DIST_FREE(c->ipc_ptrs);
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
    {
        int64_t t0 = dist_time_ns();
        if ((res = dist_cuda__nvrtc(arch, !exact, &image, NULL, log, sizeof log)) != DIST_OK) return res;
        dist_log(c->d, DIST_LOG_DEBUG, "cuda: NVRTC compiled the reduction kernels for sm_%d%s in %.2f s (once)", arch,
                 exact ? "" : " (the newest it knows up to the device's)", (double)(dist_time_ns() - t0) / 1e9);
    }
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

/* out = ins[0] op ... op ins[nin-1] on `stream` (nin at most
   DIST_CUDA__MAX_IN); `what` names the call for an error. */
static dist_result dist_cuda__launch_reduce(dist_cuda_t *c, void *out, const void *const *ins, int nin, size_t count, dist_dtype dtype, dist_op op,
                                            dist_cuda__CUstream stream, const char *what) {
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
    dist_cuda__CUresult r = dist_cuda__cu.LaunchKernel(c->kreduce[dtype][op == DIST_AVG ? DIST_SUM : op], blocks, 1, 1, 256, 1, 1, 0, stream,
                                                       params, NULL);
    if (r != 0)
        return dist_cuda__cu_failf(c, r, "%s: launching the reduction kernel (%d input%s of %zu x %s, %u block%s)", what, nin,
                                   DIST__PLURAL(nin), count, dist_dtype_name(dtype), blocks, DIST__PLURAL(blocks));
    return DIST_OK;
}

/* buf[i] /= divisor (DIST_AVG's last step) on `stream`. */
static dist_result dist_cuda__launch_avg(dist_cuda_t *c, void *buf, size_t count, dist_dtype dtype, int divisor, dist_cuda__CUstream stream,
                                         const char *what) {
    unsigned long long n = count;
    size_t most = (size_t)(c->sm_count > 0 ? c->sm_count : 1) * 16, want = count / 256 + 1;
    unsigned blocks = (unsigned)(want < most ? want : most);
    void *params[3];
    dist_result res;
    if ((res = dist_cuda__kernels(c)) != DIST_OK) return res;
    params[0] = &buf; params[1] = &n; params[2] = &divisor;
    dist_cuda__CUresult r = dist_cuda__cu.LaunchKernel(c->kavg[dtype], blocks, 1, 1, 256, 1, 1, 0, stream, params, NULL);
    if (r != 0) return dist_cuda__cu_failf(c, r, "%s: launching the averaging kernel (%zu x %s)", what, count, dist_dtype_name(dtype));
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
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: %d row%s of %s, too many for the %zu-byte staging chunk (cfg.chunk_bytes)", what,
                               c->rank, j->max_rows, DIST__PLURAL(j->max_rows), dist_dtype_name(j->dtype), c->slot_bytes);
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

/* [SECTION] IPC backend
   Ranks that are processes of one host read each other's device buffers
   through CUDA IPC mappings.  The rule that keeps it simple: a rank
   writes only its own buffers, and reads a peer's only between the
   record exchange that starts a call (by then every rank's stream has
   finished producing its inputs) and a sync point (stream synchronised,
   then a dist_all_reduce of "lowest failed rank") that every rank passes
   only once every rank's work of that phase is done.  So no peer still
   reads a buffer when its owner returns, and in a phase no buffer is
   written while a peer reads it (the in-place forms that would are sent
   to the staged path instead).

   Handles.  cuIpcGetMemHandle works on the base of a cuMemAlloc'ed
   allocation, so a buffer travels as (its allocation's handle, its
   offset in it).  Each rank remembers the allocations it has shared
   (DIST_CUDA__IPC_EXPORTS, by CU_POINTER_ATTRIBUTE_BUFFER_ID, which no
   later allocation reuses), so a buffer costs one attribute query per
   call.  A remembered allocation that is gone (its base has no or
   another buffer id) or is pushed out of that list is announced in the
   owner's next records as retired, and its peers close their mappings
   of it at the start of their next call.  Peers' mappings are cached by
   (rank, handle): CUDA gives a new allocation a new handle even at the
   same address, so a stale mapping is never used.  The cache holds
   DIST_CUDA__IPC_MAPS + 2 x world entries and closes the least recently
   used one, never one that the current call uses (a call uses at most
   world - 1). */
enum { DIST_CUDA__IPC_OK = 0, DIST_CUDA__IPC_STAGE = 1, DIST_CUDA__IPC_FAILED = 2 };

static const char *dist_cuda__op_name(int op) {
    static const char *const names[DIST_OP_COUNT] = { "sum", "product", "max", "min", "avg" };
    return op >= 0 && op < DIST_OP_COUNT ? names[op] : "invalid";
}

/* Block b of `count` elements split over n ranks (the first count % n
   blocks get one more), as dist.h splits them. */
static size_t dist_cuda__block_off(size_t count, int n, int b) {
    size_t rest = count % (size_t)n;
    return (size_t)b * (count / (size_t)n) + ((size_t)b < rest ? (size_t)b : rest);
}
static size_t dist_cuda__block_len(size_t count, int n, int b) { return count / (size_t)n + ((size_t)b < count % (size_t)n); }

static int dist_cuda__overlap(const void *a, size_t alen, const void *b, size_t blen) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* The job's buffers on this rank: slot 0 the input (the one buffer of
   broadcast, reduce and all_reduce), slot 1 the output; bytes needed from
   each (0: not used here). */
static int dist_cuda__one_buffer(const dist_cuda__job *j) {
    return j->kind == DIST_CUDA__BROADCAST || j->kind == DIST_CUDA__REDUCE || j->kind == DIST_CUDA__ALL_REDUCE;
}
static void dist_cuda__ipc_slots(const dist_cuda__job *j, const void **p, size_t *need) {
    const size_t b = j->count * dist_dtype_size(j->dtype);
    p[0] = j->in; p[1] = j->out;
    need[0] = dist_cuda__one_buffer(j) ? b : (size_t)j->in_rows * b;
    need[1] = dist_cuda__one_buffer(j) ? 0 : (size_t)j->out_rows * b;
}

/* 1 when this rank's buffers alias in a way the IPC algorithms cannot take
   (a rank would overwrite what a peer still reads): the call goes staged. */
static int dist_cuda__ipc_alias_needs_staging(const dist_cuda_t *c, const dist_cuda__job *j) {
    const size_t b = j->count * dist_dtype_size(j->dtype), all = b * (size_t)c->world;
    const char *in = (const char *)j->in, *out = (const char *)j->out;
    const int me = c->rank;
    switch (j->kind) {
    case DIST_CUDA__GATHER:           /* the root copies its own block first */
        return me == j->peer && dist_cuda__overlap(in, b, out + (size_t)me * b, b) && in != out + (size_t)me * b;
    case DIST_CUDA__ALL_GATHER:       /* peers read send while this rank fills recv */
        return dist_cuda__overlap(in, b, out, all) && in != out + (size_t)me * b;
    case DIST_CUDA__SCATTER:          /* peers read the root's send while it fills its recv */
        return me == j->peer && dist_cuda__overlap(out, b, in, all) && out != in + (size_t)me * b;
    case DIST_CUDA__REDUCE_SCATTER:   /* peers read send's other blocks */
        return dist_cuda__overlap(out, b, in, all) && out != in + (size_t)me * b;
    case DIST_CUDA__ALL_TO_ALL:       /* peers read send's blocks while this rank fills recv's */
        return dist_cuda__overlap(in, all, out, all) && !(c->world == 1 && in == out);
    default:
        return 0;
    }
}

/* A handle of this rank's that its peers should close. */
static void dist_cuda__ipc_retire(dist_cuda_t *c, const unsigned char *handle) {
    if (c->ipc_retire_n == DIST_CUDA__IPC_RETIRE_QUEUE) {       /* drop the oldest: its mappings close by LRU */
        c->ipc_retire_head = (c->ipc_retire_head + 1) % DIST_CUDA__IPC_RETIRE_QUEUE;
        c->ipc_retire_n--;
    }
    memcpy(c->ipc_retire[(c->ipc_retire_head + c->ipc_retire_n) % DIST_CUDA__IPC_RETIRE_QUEUE], handle, DIST_CUDA__IPC_HANDLE_SIZE);
    c->ipc_retire_n++;
}

/* The remembered allocation with buffer id `id`, or a slot for it (a
   free one, else the least recently used one not shared in this call,
   whose peers are told to close it). */
static dist_cuda__ipc_export *dist_cuda__ipc_export_slot(dist_cuda_t *c, unsigned long long id, int *found) {
    dist_cuda__ipc_export *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < DIST_CUDA__IPC_EXPORTS; i++) {
        dist_cuda__ipc_export *e = &c->ipc_exports[i];
        if (e->in_use && e->id == id) { *found = 1; return e; }
        if (!e->in_use) { if (!free_slot) free_slot = e; }
        else if (e->used != c->ipc_call && (!oldest || e->used < oldest->used)) oldest = e;
    }
    *found = 0;
    if (free_slot) return free_slot;
    if (oldest && oldest->exportable) dist_cuda__ipc_retire(c, oldest->handle);
    return oldest;               /* never NULL: a call shares at most 2 allocations */
}

/* Fills rec->buf[slot] for this rank's buffer p (need bytes from p).
   DIST_CUDA__IPC_STAGE: memory CUDA IPC cannot share; _FAILED: the buffer
   runs past its allocation (the sentence is set). */
static int dist_cuda__ipc_describe(dist_cuda_t *c, const dist_cuda__job *j, int slot, const void *p, size_t need, dist_cuda__ipc_record *rec) {
    const dist_cuda__CUdeviceptr dp = (dist_cuda__CUdeviceptr)(uintptr_t)p;
    unsigned long long id = 0;
    int found = 0;
    dist_cuda__ipc_export *e;
    /* memory that is no CUDA allocation at all is the staged path's to judge */
    if (dist_cuda__cu.PointerGetAttribute(&id, DIST_CUDA__POINTER_BUFFER_ID, dp) != 0) return DIST_CUDA__IPC_STAGE;
    if (!(e = dist_cuda__ipc_export_slot(c, id, &found))) return DIST_CUDA__IPC_STAGE;   /* cannot happen: see there */
    if (!found) {
        dist_cuda__CUipcMemHandle h;
        memset(e, 0, sizeof *e);
        e->in_use = 1;
        e->id = id;
        /* a failure here means "not shareable" (pools, managed, host, VMM
           memory), cached with the id, which no later allocation reuses */
        if (dist_cuda__cu.MemGetAddressRange(&e->base, &e->size, dp) == 0 && dist_cuda__cu.IpcGetMemHandle(&h, e->base) == 0) {
            e->exportable = 1;
            memcpy(e->handle, h.reserved, DIST_CUDA__IPC_HANDLE_SIZE);
        }
    }
    e->used = c->ipc_call;
    if (!e->exportable) return DIST_CUDA__IPC_STAGE;
    if (dp < e->base || dp - e->base > e->size || need > e->size - (size_t)(dp - e->base)) {
        size_t after = dp >= e->base && dp - e->base <= e->size ? e->size - (size_t)(dp - e->base) : 0;
        dist_cuda__fail(DIST_ERR_INVALID, "%s (%zu x %s, IPC) on rank %d: its %s buffer needs %zu byte%s, but its allocation (%zu byte%s) ends %zu byte%s after it",
                        dist_cuda__kind_names[j->kind], j->count, dist_dtype_name(j->dtype), c->rank, slot ? "output" : "input", need,
                        DIST__PLURAL(need), e->size, DIST__PLURAL(e->size), after, DIST__PLURAL(after));
        return DIST_CUDA__IPC_FAILED;
    }
    rec->buf[slot].present = 1;
    rec->buf[slot].offset = dp - e->base;
    rec->buf[slot].size = e->size;
    memcpy(rec->buf[slot].handle, e->handle, DIST_CUDA__IPC_HANDLE_SIZE);
    return DIST_CUDA__IPC_OK;
}

/* Remembered allocations this call did not share and that are gone
   (freed, or their address reused) become retired handles. */
static void dist_cuda__ipc_scan_exports(dist_cuda_t *c) {
    for (int i = 0; i < DIST_CUDA__IPC_EXPORTS; i++) {
        dist_cuda__ipc_export *e = &c->ipc_exports[i];
        unsigned long long id = 0;
        if (!e->in_use || e->used == c->ipc_call) continue;
        if (dist_cuda__cu.PointerGetAttribute(&id, DIST_CUDA__POINTER_BUFFER_ID, e->base) != 0 || id != e->id) {
            if (e->exportable) dist_cuda__ipc_retire(c, e->handle);
            e->in_use = 0;
        }
    }
}

static dist_result dist_cuda__ipc_close_map(dist_cuda_t *c, dist_cuda__ipc_map *m, const char *what) {
    dist_cuda__CUresult r = dist_cuda__cu.IpcCloseMemHandle(m->base);
    int peer = m->peer;
    m->peer = -1;
    c->ipc_closes++;
    if (r != 0) return dist_cuda__cu_failf(c, r, "%s (IPC): closing the mapping of rank %d's allocation (cuIpcCloseMemHandle)", what, peer);
    return DIST_OK;
}

/* The mappings of allocations the last exchange's records retired. */
static dist_result dist_cuda__ipc_close_retired(dist_cuda_t *c, const char *what) {
    dist_result res = DIST_OK, r;
    if (!c->ipc_all_valid) return DIST_OK;
    c->ipc_all_valid = 0;
    for (int k = 0; k < c->world; k++) {
        const dist_cuda__ipc_record *rec = &c->ipc_all[k];
        if (k == c->rank || rec->nretired < 0 || rec->nretired > DIST_CUDA__IPC_RETIRE) continue;
        for (int i = 0; i < (int)rec->nretired; i++)
            for (int m = 0; m < c->ipc_nmaps; m++)
                if (c->ipc_maps[m].peer == k && !memcmp(c->ipc_maps[m].handle, rec->retired[i], DIST_CUDA__IPC_HANDLE_SIZE)) {
                    if ((r = dist_cuda__ipc_close_map(c, &c->ipc_maps[m], what)) != DIST_OK && res == DIST_OK) res = r;
                    break;
                }
    }
    return res;
}

/* Where rank k's buffer in `slot` is in this process: this rank's own
   pointer, or k's allocation mapped here (opened at its first use). */
static dist_result dist_cuda__ipc_ptr(dist_cuda_t *c, const dist_cuda__job *j, int k, int slot, dist_cuda__CUdeviceptr *out) {
    const dist_cuda__ipc_record *rec = &c->ipc_all[k];
    dist_cuda__ipc_map *m = NULL, *victim = NULL;
    const char *what = dist_cuda__kind_names[j->kind];
    if (k == c->rank) {
        *out = (dist_cuda__CUdeviceptr)(uintptr_t)(slot ? j->out : j->in);
        return DIST_OK;
    }
    for (int i = 0; i < c->ipc_nmaps && !m; i++) {
        dist_cuda__ipc_map *e = &c->ipc_maps[i];
        if (e->peer == k && !memcmp(e->handle, rec->buf[slot].handle, DIST_CUDA__IPC_HANDLE_SIZE)) m = e;
        else if (e->peer < 0) { if (!victim || victim->peer >= 0) victim = e; }
        else if (e->used != c->ipc_call && (!victim || (victim->peer >= 0 && e->used < victim->used))) victim = e;
    }
    if (!m) {
        dist_cuda__CUipcMemHandle h;
        dist_cuda__CUdeviceptr base = 0;
        dist_cuda__CUresult r;
        dist_result res;
        if (!victim)             /* cannot happen: the cache outnumbers a call's mappings */
            return dist_cuda__fail(DIST_ERR_INVALID, "%s (IPC) on rank %d: no free mapping entry", what, c->rank);
        if (victim->peer >= 0 && (res = dist_cuda__ipc_close_map(c, victim, what)) != DIST_OK) return res;
        memcpy(h.reserved, rec->buf[slot].handle, DIST_CUDA__IPC_HANDLE_SIZE);
        if ((r = dist_cuda__cu.IpcOpenMemHandle(&base, h, DIST_CUDA__IPC_LAZY_ENABLE_PEER_ACCESS)) != 0)
            return dist_cuda__cu_failf(c, r, "%s (%zu x %s, IPC): mapping rank %d's allocation of %llu byte%s (cuIpcOpenMemHandle)", what,
                                       j->count, dist_dtype_name(j->dtype), k, (unsigned long long)rec->buf[slot].size,
                                       DIST__PLURAL(rec->buf[slot].size));
        m = victim;
        m->peer = k;
        m->base = base;
        if ((r = dist_cuda__cu.MemGetAddressRange(&base, &m->size, m->base)) != 0) {
            m->size = 0;         /* nothing in it is ever read */
            return dist_cuda__cu_failf(c, r, "%s (IPC): the size of rank %d's allocation as mapped here (cuMemGetAddressRange)", what, k);
        }
        memcpy(m->handle, rec->buf[slot].handle, DIST_CUDA__IPC_HANDLE_SIZE);
        c->ipc_opens++;
    }
    m->used = c->ipc_call;
    /* The record came from another process: the part of the buffer this
       call reads must lie inside the allocation the driver mapped.  (A
       peer's input holds one row, or world rows for scatter's root,
       reduce_scatter and all_to_all.) */
    {
        const size_t rows = j->kind == DIST_CUDA__SCATTER || j->kind == DIST_CUDA__REDUCE_SCATTER || j->kind == DIST_CUDA__ALL_TO_ALL ? (size_t)c->world : 1;
        const uint64_t need = (uint64_t)j->count * dist_dtype_size(j->dtype) * rows, off = rec->buf[slot].offset;
        if (!rec->buf[slot].present || off > m->size || need > m->size - off)
            return dist_cuda__fail(DIST_ERR_PROTOCOL, "%s (%zu x %s, IPC) on rank %d: rank %d described a buffer at offset %llu of an allocation of %zu byte%s, which cannot hold the %llu byte%s this call reads",
                                   what, j->count, dist_dtype_name(j->dtype), c->rank, k, (unsigned long long)off, m->size, DIST__PLURAL(m->size),
                                   (unsigned long long)need, DIST__PLURAL(need));
    }
    *out = m->base + rec->buf[slot].offset;
    return DIST_OK;
}

static dist_result dist_cuda__ipc_copy(dist_cuda_t *c, const dist_cuda__job *j, dist_cuda__CUdeviceptr dst, dist_cuda__CUdeviceptr src, size_t bytes,
                                       int from, dist_cuda__CUstream s) {
    dist_cuda__CUresult r;
    if (bytes == 0 || dst == src) return DIST_OK;
    if ((r = dist_cuda__cu.MemcpyDtoDAsync(dst, src, bytes, s)) != 0)
        return dist_cuda__cu_failf(c, r, "%s (%zu x %s, IPC): copying %zu byte%s from rank %d's buffer (cuMemcpyDtoDAsync)", dist_cuda__kind_names[j->kind],
                                   j->count, dist_dtype_name(j->dtype), bytes, DIST__PLURAL(bytes), from);
    return DIST_OK;
}

/* out = ins[0] op ... op ins[nin-1] (count elements), in launches of at
   most fan-in inputs: the first writes out, each later one takes out as
   its first input.  An input that is out itself goes first, before any
   launch writes out.  AVG divides at the end. */
static dist_result dist_cuda__ipc_reduce(dist_cuda_t *c, const dist_cuda__job *j, dist_cuda__CUdeviceptr out, dist_cuda__CUdeviceptr *ins, int nin,
                                         size_t count, dist_cuda__CUstream s) {
    const int fan = c->ipc_fan_in >= 2 && c->ipc_fan_in <= DIST_CUDA__MAX_IN ? c->ipc_fan_in : DIST_CUDA__MAX_IN;
    const char *what = dist_cuda__kind_names[j->kind];
    const void *batch[DIST_CUDA__MAX_IN];
    void *o = (void *)(uintptr_t)out;
    dist_result res;
    int done = 0;
    if (count == 0) return DIST_OK;
    for (int i = 1; i < nin; i++)
        if (ins[i] == out) { dist_cuda__CUdeviceptr t = ins[0]; ins[0] = ins[i]; ins[i] = t; break; }
    while (done < nin) {
        int m = 0;
        if (done > 0) batch[m++] = o;
        while (m < fan && done < nin) batch[m++] = (const void *)(uintptr_t)ins[done++];
        if (m == 1 && batch[0] == o) continue;                       /* one input, in place: nothing to do */
        if ((res = dist_cuda__launch_reduce(c, o, batch, m, count, j->dtype, j->op, s, what)) != DIST_OK) return res;
    }
    if (j->op == DIST_AVG && c->world > 1) return dist_cuda__launch_avg(c, o, count, j->dtype, c->world, s, what);
    return DIST_OK;
}

/* This rank's work in phase `phase` (all_reduce has two: reduce its
   slice, then gather the others), enqueued on s. */
static dist_result dist_cuda__ipc_phase(dist_cuda_t *c, const dist_cuda__job *j, int phase, dist_cuda__CUstream s) {
    const int n = c->world, me = c->rank, root = j->peer;
    const size_t es = dist_dtype_size(j->dtype), b = j->count * es;
    const dist_cuda__CUdeviceptr in = (dist_cuda__CUdeviceptr)(uintptr_t)j->in, out = (dist_cuda__CUdeviceptr)(uintptr_t)j->out;
    dist_cuda__CUdeviceptr *ptrs = c->ipc_ptrs, p = 0;
    dist_result res = DIST_OK;
    switch (j->kind) {
    case DIST_CUDA__BROADCAST:
        if (me != root && (res = dist_cuda__ipc_ptr(c, j, root, 0, &p)) == DIST_OK) res = dist_cuda__ipc_copy(c, j, out, p, b, root, s);
        break;
    case DIST_CUDA__REDUCE:
        if (me != root) break;
        for (int k = 0; k < n && res == DIST_OK; k++) res = dist_cuda__ipc_ptr(c, j, k, 0, &ptrs[k]);
        if (res == DIST_OK) res = dist_cuda__ipc_reduce(c, j, out, ptrs, n, j->count, s);
        break;
    case DIST_CUDA__ALL_REDUCE:
        if (phase == 0) {             /* slice me of every rank's buffer, into this rank's */
            const size_t off = dist_cuda__block_off(j->count, n, me) * es;
            for (int k = 0; k < n && res == DIST_OK; k++)
                if ((res = dist_cuda__ipc_ptr(c, j, k, 0, &ptrs[k])) == DIST_OK) ptrs[k] += off;
            if (res == DIST_OK) res = dist_cuda__ipc_reduce(c, j, out + off, ptrs, n, dist_cuda__block_len(j->count, n, me), s);
        } else {                      /* slice k from rank k, which reduced it */
            for (int k = 0; k < n && res == DIST_OK; k++) {
                const size_t off = dist_cuda__block_off(j->count, n, k) * es;
                if (k != me && (res = dist_cuda__ipc_ptr(c, j, k, 0, &p)) == DIST_OK)
                    res = dist_cuda__ipc_copy(c, j, out + off, p + off, dist_cuda__block_len(j->count, n, k) * es, k, s);
            }
        }
        break;
    case DIST_CUDA__GATHER:
    case DIST_CUDA__ALL_GATHER:       /* this rank's own block first: in may lie in out */
        if (j->kind == DIST_CUDA__GATHER && me != root) break;
        res = dist_cuda__ipc_copy(c, j, out + (size_t)me * b, in, b, me, s);
        for (int k = 0; k < n && res == DIST_OK; k++)
            if (k != me && (res = dist_cuda__ipc_ptr(c, j, k, 0, &p)) == DIST_OK) res = dist_cuda__ipc_copy(c, j, out + (size_t)k * b, p, b, k, s);
        break;
    case DIST_CUDA__SCATTER:
        if ((res = dist_cuda__ipc_ptr(c, j, root, 0, &p)) == DIST_OK) res = dist_cuda__ipc_copy(c, j, out, p + (size_t)me * b, b, root, s);
        break;
    case DIST_CUDA__REDUCE_SCATTER:   /* block me of every rank's send */
        for (int k = 0; k < n && res == DIST_OK; k++)
            if ((res = dist_cuda__ipc_ptr(c, j, k, 0, &ptrs[k])) == DIST_OK) ptrs[k] += (size_t)me * b;
        if (res == DIST_OK) res = dist_cuda__ipc_reduce(c, j, out, ptrs, n, j->count, s);
        break;
    case DIST_CUDA__ALL_TO_ALL:       /* block me of rank k's send into block k */
        for (int k = 0; k < n && res == DIST_OK; k++)
            if ((res = dist_cuda__ipc_ptr(c, j, k, 0, &p)) == DIST_OK) res = dist_cuda__ipc_copy(c, j, out + (size_t)k * b, p + (size_t)me * b, b, k, s);
        break;
    default:
        break;
    }
    return res;
}

/* The end of a phase, on every rank: this rank's work on s done, then a
   MIN over the ranks of (the lowest rank that failed, else n; 0 if a
   failure failed its communicator, else 1), which also stands in for a
   barrier.  A rank that failed returns its own error; the others
   DIST_ERR_FAILED, naming it. */
static dist_result dist_cuda__ipc_sync(dist_cuda_t *c, const dist_cuda__job *j, dist_cuda__CUstream s, dist_result local) {
    const char *what = dist_cuda__kind_names[j->kind];
    dist_cuda__CUresult r = dist_cuda__cu.StreamSynchronize(s);   /* after a failure too: nothing of ours may still run */
    int64_t v[2];
    dist_result code;
    if (local == DIST_OK && r != 0)
        local = dist_cuda__cu_failf(c, r, "%s (%zu x %s, IPC): waiting for its copies and kernels (cuStreamSynchronize)", what, j->count,
                                    dist_dtype_name(j->dtype));
    v[0] = local == DIST_OK ? c->world : c->rank;
    v[1] = c->failed ? 0 : 1;
    if ((code = dist_all_reduce(c->d, v, 2, DIST_INT64, DIST_MIN)) != DIST_OK) {
        char why[DIST_CUDA__ERRLEN];
        snprintf(why, sizeof why, "%s", dist_error_message(c->d));
        c->failed = 1;               /* peers may be anywhere in this call now */
        if (local != DIST_OK) return local;
        return dist_cuda__fail(code, "%s (%zu x %s, IPC) on rank %d: waiting for the other ranks: %s", what, j->count,
                               dist_dtype_name(j->dtype), c->rank, why);
    }
    if (v[1] == 0) c->failed = 1;
    if (local != DIST_OK) return local;
    if (v[0] < c->world)
        return dist_cuda__fail(DIST_ERR_FAILED, "%s (%zu x %s, IPC) on rank %d: rank %d failed in this call (its error says why)%s", what, j->count,
                               dist_dtype_name(j->dtype), c->rank, (int)v[0], c->failed ? "; the communicator failed with it" : "");
    return DIST_OK;
}

/* How rank k's record differs from this rank's ("" when it does not). */
static int dist_cuda__ipc_mismatch(const dist_cuda_t *c, int k, char *why, size_t cap) {
    const dist_cuda__ipc_record *a = &c->ipc_all[k], *me = &c->ipc_mine;
    const int r = c->rank;
    if (a->kind != me->kind)
        snprintf(why, cap, "rank %d called %s, rank %d called %s", k, a->kind >= 0 && a->kind <= DIST_CUDA__RECV ? dist_cuda__kind_names[a->kind] : "?", r,
                 dist_cuda__kind_names[me->kind]);
    else if (a->count != me->count || a->dtype != me->dtype)
        snprintf(why, cap, "rank %d passed %llu x %s, rank %d passed %llu x %s", k, (unsigned long long)a->count, dist_dtype_name((dist_dtype)a->dtype), r,
                 (unsigned long long)me->count, dist_dtype_name((dist_dtype)me->dtype));
    else if (a->op != me->op)
        snprintf(why, cap, "rank %d passed op %s, rank %d passed op %s", k, dist_cuda__op_name((int)a->op), r, dist_cuda__op_name((int)me->op));
    else if (a->root != me->root)
        snprintf(why, cap, "rank %d passed root %d, rank %d passed root %d", k, (int)a->root, r, (int)me->root);
    else
        return 0;
    return 1;
}

/* One collective on the IPC backend (see the section's comment). */
static dist_result dist_cuda__ipc_run(dist_cuda_t *c, const dist_cuda__job *j, dist_cuda__CUstream s) {
    const char *what = dist_cuda__kind_names[j->kind];
    dist_cuda__ipc_record *mine = &c->ipc_mine;
    dist_result local = DIST_OK, res;
    int failed = -1, fatal = 0, stage = 0;
    char why[DIST_CUDA__ERRLEN];
    c->ipc_call++;
    memset(mine, 0, sizeof *mine);
    mine->kind = j->kind; mine->dtype = j->dtype; mine->op = j->op; mine->root = j->peer; mine->count = j->count;
    mine->status = DIST_CUDA__IPC_OK;
    /* what the last exchange retired; then this rank's buffers */
    local = dist_cuda__ipc_close_retired(c, what);
    if (local == DIST_OK && j->count) {
        dist_cuda__CUresult r = dist_cuda__cu.StreamSynchronize(s);          /* the inputs are complete before a peer reads them */
        if (r != 0) {
            local = dist_cuda__cu_failf(c, r, "%s (%zu x %s, IPC): waiting for the caller's stream (cuStreamSynchronize)", what, j->count,
                                        dist_dtype_name(j->dtype));
        } else if (dist_cuda__ipc_alias_needs_staging(c, j)) {
            mine->status = DIST_CUDA__IPC_STAGE;
        } else {
            const void *p[2];
            size_t need[2];
            dist_cuda__ipc_slots(j, p, need);
            for (int slot = 0; slot < 2 && mine->status == DIST_CUDA__IPC_OK; slot++)
                if (need[slot]) mine->status = dist_cuda__ipc_describe(c, j, slot, p[slot], need[slot], mine);
            if (mine->status == DIST_CUDA__IPC_FAILED) local = DIST_ERR_INVALID;        /* describe set the sentence */
        }
    }
    if (local != DIST_OK) { mine->status = DIST_CUDA__IPC_FAILED; mine->fatal = c->failed; }
    dist_cuda__ipc_scan_exports(c);
    while (mine->nretired < DIST_CUDA__IPC_RETIRE && c->ipc_retire_n > 0) {
        memcpy(mine->retired[mine->nretired++], c->ipc_retire[c->ipc_retire_head], DIST_CUDA__IPC_HANDLE_SIZE);
        c->ipc_retire_head = (c->ipc_retire_head + 1) % DIST_CUDA__IPC_RETIRE_QUEUE;
        c->ipc_retire_n--;
    }
    /* the exchange: every rank's record, before any data moves */
    if ((res = dist_all_gather(c->d, mine, c->ipc_all, sizeof *mine, DIST_UINT8)) != DIST_OK) {
        snprintf(why, sizeof why, "%s", dist_error_message(c->d));
        if (local != DIST_OK) return local;
        return dist_cuda__fail(res, "%s (%zu x %s, IPC) on rank %d: exchanging buffer handles: %s", what, j->count, dist_dtype_name(j->dtype), c->rank, why);
    }
    c->ipc_all_valid = 1;
    for (int k = 0; k < c->world; k++) {
        if (c->ipc_all[k].status == DIST_CUDA__IPC_FAILED && failed < 0) failed = k;
        if (c->ipc_all[k].status == DIST_CUDA__IPC_FAILED && c->ipc_all[k].fatal) fatal = 1;
        if (c->ipc_all[k].status == DIST_CUDA__IPC_STAGE) stage = 1;
    }
    if (fatal) c->failed = 1;
    if (local != DIST_OK) return local;
    for (int k = 0; k < c->world; k++)
        if (dist_cuda__ipc_mismatch(c, k, why, sizeof why))
            return dist_cuda__fail(DIST_ERR_MISMATCH, "%s (IPC) on rank %d: %s", what, c->rank, why);
    if (failed >= 0)
        return dist_cuda__fail(DIST_ERR_FAILED, "%s (%zu x %s, IPC) on rank %d: rank %d failed in this call (its error says why)%s", what, j->count,
                               dist_dtype_name(j->dtype), c->rank, failed, fatal ? "; the communicator failed with it" : "");
    if (j->count == 0) return DIST_OK;
    if (stage) {                                       /* every rank saw the same records */
        c->ipc_staged++;
        return dist_cuda__staged(c, j, s);
    }
    for (int phase = 0; phase < (j->kind == DIST_CUDA__ALL_REDUCE ? 2 : 1); phase++)
        if ((res = dist_cuda__ipc_sync(c, j, s, dist_cuda__ipc_phase(c, j, phase, s))) != DIST_OK) return res;
    return DIST_OK;
}

/* The IPC backend's memory, made at init. */
static dist_result dist_cuda__open_ipc(dist_cuda_t *c) {
    c->ipc_nmaps = DIST_CUDA__IPC_MAPS + 2 * c->world;
    c->ipc_all = (dist_cuda__ipc_record *)DIST_MALLOC(sizeof *c->ipc_all * (size_t)c->world);
    c->ipc_maps = (dist_cuda__ipc_map *)DIST_MALLOC(sizeof *c->ipc_maps * (size_t)c->ipc_nmaps);
    c->ipc_ptrs = (dist_cuda__CUdeviceptr *)DIST_MALLOC(sizeof *c->ipc_ptrs * (size_t)c->world);
    if (!c->ipc_all || !c->ipc_maps || !c->ipc_ptrs) return dist_cuda__fail(DIST_ERR_NOMEM, "dist_cuda_init (IPC) on rank %d: out of memory", c->rank);
    for (int i = 0; i < c->ipc_nmaps; i++) c->ipc_maps[i].peer = -1;
    return DIST_OK;
}

/* ---- choosing the backend at init ----
   Which ranks share this host: dist__host_identity (the same boot, host
   name, user and namespaces; CUDA IPC handles name the exporting process,
   so its PID namespace is part of it). */
typedef struct {
    int64_t backend, pid, nvrtc;
    char host[256];
} dist_cuda__init_record;

typedef struct {
    int64_t ok, step, peer, result;
    unsigned char uuid[16];
    unsigned char handle[DIST_CUDA__IPC_HANDLE_SIZE];
} dist_cuda__probe_record;

/* The local ordinal of the device with this UUID, or -1. */
static int dist_cuda__device_by_uuid(const unsigned char *uuid, dist_cuda__CUdevice *dev) {
    int n = 0;
    if (dist_cuda__cu.DeviceGetCount(&n) != 0) return -1;
    for (int i = 0; i < n; i++) {
        dist_cuda__CUuuid u;
        if (dist_cuda__cu.DeviceGet(dev, i) == 0 && dist_cuda__cu.DeviceGetUuid(&u, *dev) == 0 && !memcmp(u.bytes, uuid, 16)) return i;
    }
    return -1;
}

/* Every rank maps every other rank's device memory once, at init (a
   4 KiB allocation each): what fails here would fail every call.  Two
   rounds, each all-gathered: export (handle and device UUID), then map
   (peer access where the devices differ, open, close).  0 when it
   worked; else the sentence is set and DIST_ERR_CUDA or
   DIST_ERR_UNSUPPORTED returned, on every rank. */
static dist_result dist_cuda__ipc_probe(dist_cuda_t *c) {
    const int n = c->world, me = c->rank;
    dist_cuda__probe_record mine, *all = (dist_cuda__probe_record *)DIST_MALLOC(sizeof *all * (size_t)n);
    dist_cuda__CUdeviceptr buf = 0;
    dist_cuda__CUipcMemHandle h;
    dist_cuda__CUuuid u;
    dist_cuda__CUresult r;
    dist_result res = DIST_OK;
    static const char *const steps[] = { "", "cuDeviceGetUuid", "cuMemAlloc", "cuIpcGetMemHandle", "cuDeviceCanAccessPeer", "peer access",
                                         "cuIpcOpenMemHandle", "cuIpcCloseMemHandle", "cuMemFree" };
    int bad = -1;
    char words[160];
    if (!all) return dist_cuda__fail(DIST_ERR_NOMEM, "dist_cuda_init (IPC) on rank %d: out of memory", me);
    memset(&mine, 0, sizeof mine);
    mine.ok = 1;
    mine.peer = -1;
    if ((r = dist_cuda__cu.DeviceGetUuid(&u, c->dev)) != 0) { mine.ok = 0; mine.step = 1; mine.result = r; }
    else if ((r = dist_cuda__cu.MemAlloc(&buf, 4096)) != 0) { mine.ok = 0; mine.step = 2; mine.result = r; buf = 0; }
    else if ((r = dist_cuda__cu.IpcGetMemHandle(&h, buf)) != 0) { mine.ok = 0; mine.step = 3; mine.result = r; }
    if (mine.ok) { memcpy(mine.uuid, u.bytes, 16); memcpy(mine.handle, h.reserved, DIST_CUDA__IPC_HANDLE_SIZE); }
    if ((res = dist_all_gather(c->d, &mine, all, sizeof mine, DIST_UINT8)) == DIST_OK) {
        for (int k = 0; k < n && bad < 0; k++)
            if (!all[k].ok) bad = k;
        if (bad < 0) {                                     /* round 2: map every peer's */
            mine.ok = 1;
            for (int k = 0; k < n && mine.ok; k++) {
                dist_cuda__CUdevice pd;
                dist_cuda__CUdeviceptr p = 0;
                int can = 0;
                if (k == me) continue;
                mine.peer = k;
                if (memcmp(all[k].uuid, all[me].uuid, 16) != 0 && dist_cuda__device_by_uuid(all[k].uuid, &pd) >= 0) {
                    if ((r = dist_cuda__cu.DeviceCanAccessPeer(&can, c->dev, pd)) != 0) { mine.ok = 0; mine.step = 4; mine.result = r; }
                    else if (!can) { mine.ok = 0; mine.step = 5; }
                }
                if (mine.ok) {
                    memcpy(h.reserved, all[k].handle, DIST_CUDA__IPC_HANDLE_SIZE);
                    if ((r = dist_cuda__cu.IpcOpenMemHandle(&p, h, DIST_CUDA__IPC_LAZY_ENABLE_PEER_ACCESS)) != 0) { mine.ok = 0; mine.step = 6; mine.result = r; }
                    else if ((r = dist_cuda__cu.IpcCloseMemHandle(p)) != 0) { mine.ok = 0; mine.step = 7; mine.result = r; }
                }
            }
            if (mine.ok) mine.peer = -1;
            if ((res = dist_all_gather(c->d, &mine, all, sizeof mine, DIST_UINT8)) == DIST_OK)
                for (int k = 0; k < n && bad < 0; k++)
                    if (!all[k].ok) bad = k;
        }
    }
    if (res != DIST_OK) {
        char why[DIST_CUDA__ERRLEN];
        snprintf(why, sizeof why, "%s", dist_error_message(c->d));
        res = dist_cuda__fail(res, "dist_cuda_init (IPC) on rank %d: trying CUDA IPC with the other ranks: %s", me, why);
    } else if (bad >= 0) {
        const dist_cuda__probe_record *b = &all[bad];
        if (b->step == 5)
            res = dist_cuda__fail(DIST_ERR_UNSUPPORTED, "dist_cuda_init (IPC) on rank %d: rank %d's device cannot access rank %d's device (no peer access), "
                                  "which the IPC backend's kernels need", me, bad, (int)b->peer);
        else if (b->peer >= 0)
            res = dist_cuda__fail(DIST_ERR_CUDA, "dist_cuda_init (IPC) on rank %d: rank %d could not map rank %d's device memory (%s: %s)", me, bad,
                                  (int)b->peer, steps[b->step > 0 && b->step <= 8 ? b->step : 0],
                                  dist_cuda__cu_words((dist_cuda__CUresult)b->result, words, sizeof words));
        else
            res = dist_cuda__fail(DIST_ERR_CUDA, "dist_cuda_init (IPC) on rank %d: rank %d could not share its device memory (%s: %s)", me, bad,
                                  steps[b->step > 0 && b->step <= 8 ? b->step : 0],
                                  dist_cuda__cu_words((dist_cuda__CUresult)b->result, words, sizeof words));
    }
    /* every rank has closed its mappings of it (or never made one) */
    if (buf && (r = dist_cuda__cu.MemFree(buf)) != 0 && res == DIST_OK) res = dist_cuda__cu_fail(c, r, "dist_cuda_init (IPC): cuMemFree");
    DIST_FREE(all);
    return res;
}

/* Between STAGED and IPC, on every rank of a job where every rank has a
   device and not every rank gets NCCL: one all-gather of what each rank
   asked for and where it runs, then the same decision everywhere (and
   the trial mapping when it is IPC).  Sets c->backend. */
static dist_result dist_cuda__choose(dist_cuda_t *c, dist_cuda_backend asked) {
    const char *const *names = dist_cuda__backend_names;
    const int n = c->world;
    dist_cuda__init_record mine, *all = (dist_cuda__init_record *)DIST_MALLOC(sizeof *all * (size_t)n);
    int ipc_asker = -1, other_asker = -1, remote = -1, twin = -1, no_rtc = -1;
    dist_result res = DIST_OK;
    c->backend = DIST_CUDA_STAGED;
    if (!all) return dist_cuda__fail(DIST_ERR_NOMEM, "dist_cuda_init on rank %d: out of memory", c->rank);
    memset(&mine, 0, sizeof mine);
    mine.backend = asked;
    mine.pid = (int64_t)dist__getpid();
    mine.nvrtc = dist_cuda__load_nvrtc() == 1;
    dist__host_identity(mine.host, sizeof mine.host);
    if ((res = dist_all_gather(c->d, &mine, all, sizeof mine, DIST_UINT8)) != DIST_OK) {
        char why[DIST_CUDA__ERRLEN];
        snprintf(why, sizeof why, "%s", dist_error_message(c->d));
        DIST_FREE(all);
        return dist_cuda__fail(DIST_ERR_INIT, "dist_cuda_init on rank %d: agreeing on a backend with the other ranks: %s", c->rank, why);
    }
    for (int k = 0; k < n; k++) {
        all[k].host[sizeof all[k].host - 1] = 0;
        if (all[k].backend == DIST_CUDA_IPC && ipc_asker < 0) ipc_asker = k;
        if ((all[k].backend == DIST_CUDA_STAGED || all[k].backend == DIST_CUDA_NCCL) && other_asker < 0) other_asker = k;
        if (strcmp(all[k].host, all[0].host) != 0 && remote < 0) remote = k;
        if (!all[k].nvrtc && no_rtc < 0) no_rtc = k;
        for (int m = 0; m < k && twin < 0; m++)
            if (all[m].pid == all[k].pid && !strcmp(all[m].host, all[k].host)) twin = m * n + k;
    }
    if (ipc_asker >= 0) {
        if (other_asker >= 0) {
            res = dist_cuda__fail(DIST_ERR_MISMATCH, "dist_cuda_init on rank %d: rank %d asked for backend ipc, rank %d for %s (ask alike, or auto)", c->rank,
                                  ipc_asker, other_asker, names[all[other_asker].backend]);
        } else if (remote >= 0) {
            const int l0 = (int)strcspn(all[0].host, "|"), lf = (int)strcspn(all[remote].host, "|");
            const int same_name = l0 == lf && !strncmp(all[0].host, all[remote].host, (size_t)l0);
            res = dist_cuda__fail(DIST_ERR_INVALID,
                                  "dist_cuda_init on rank %d: backend ipc needs every rank on one host, but rank 0 is on %.*s and rank %d on %.*s%s",
                                  c->rank, l0, all[0].host, remote, lf, all[remote].host, same_name ? " (another boot or PID namespace)" : "");
        } else if (twin >= 0) {
            res = dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init on rank %d: backend ipc needs one process per rank, but ranks %d and %d are one process",
                                  c->rank, twin / n, twin % n);
        } else {
            c->backend = DIST_CUDA_IPC;
        }
    } else if (other_asker < 0 && n > 1 && remote < 0 && twin < 0 && no_rtc < 0) {
        c->backend = DIST_CUDA_IPC;
    }
    DIST_FREE(all);
    if (res == DIST_OK && c->backend == DIST_CUDA_IPC && n > 1 && (res = dist_cuda__ipc_probe(c)) != DIST_OK && ipc_asker < 0 && !c->failed) {
        dist_log(c->d, DIST_LOG_DEBUG, "cuda: CUDA IPC between the ranks failed its probe (%s); the staged path serves", dist_cuda__error);
        c->backend = DIST_CUDA_STAGED;                        /* auto: the staged path serves */
        res = DIST_OK;
    }
    if (res == DIST_OK)
        dist_log(c->d, DIST_LOG_DEBUG, "cuda: backend %s (asked: %s; ranks on %s host%s, NVRTC %s)", names[c->backend], names[asked],
                 remote >= 0 ? "more than one" : "one", twin >= 0 ? ", two in one process" : "", no_rtc >= 0 ? "missing on a rank" : "on every rank");
    return res;
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
    dist_log(c->d, DIST_LOG_DEBUG, "cuda: NCCL communicator of %d ranks made (its id came from rank 0 through dist.h)", c->world);
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
/* Do two ranks of c use one device?  (Collective over c->d; -1 when the
   exchange failed.)  A device is its host and its UUID. */
static int dist_cuda__devices_shared(dist_cuda_t *c) {
    char key[300];
    dist_cuda__CUuuid u;
    int64_t mine = (int64_t)1469598103934665603ull, *all = (int64_t *)DIST_MALLOC(sizeof *all * (size_t)c->world);
    int shared = 0;
    memset(&u, 0, sizeof u);
    dist__host_identity(key, sizeof key);
    if (dist_cuda__cu.DeviceGetUuid(&u, c->dev) != 0) snprintf(u.bytes, sizeof u.bytes, "ordinal %d", c->ordinal);
    for (size_t i = 0; key[i]; i++) mine = (int64_t)(((uint64_t)mine ^ (unsigned char)key[i]) * 1099511628211ull);   /* FNV-1a */
    for (size_t i = 0; i < sizeof u.bytes; i++) mine = (int64_t)(((uint64_t)mine ^ (unsigned char)u.bytes[i]) * 1099511628211ull);
    if (!all || dist_all_gather(c->d, &mine, all, 1, DIST_INT64) != DIST_OK) { DIST_FREE(all); return -1; }
    for (int a = 0; a < c->world && !shared; a++)
        for (int b = a + 1; b < c->world && !shared; b++) shared = all[a] == all[b];
    DIST_FREE(all);
    return shared;
}

DIST_API dist_result dist_cuda_init(dist_t *d, const dist_cuda_config *cfg_in, dist_cuda_t **out) {
    dist_cuda_config cfg;
    dist_cuda_t *c;
    dist_result res;
    int64_t agree[2], t0 = dist_time_ns();
    int agreed;
    const char *env = getenv("DIST_CUDA_BACKEND");
    if (!out) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: NULL out");
    *out = NULL;
    if (!d) return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: NULL communicator");
    memset(&cfg, 0, sizeof cfg);
    if (cfg_in) cfg = *cfg_in;
    if (cfg.backend == DIST_CUDA_AUTO && env && *env) {
        if (!strcmp(env, "staged")) cfg.backend = DIST_CUDA_STAGED;
        else if (!strcmp(env, "nccl")) cfg.backend = DIST_CUDA_NCCL;
        else if (!strcmp(env, "ipc")) cfg.backend = DIST_CUDA_IPC;
        else if (strcmp(env, "auto") != 0)
            return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: DIST_CUDA_BACKEND=%s: want auto, staged, nccl or ipc", env);
    }
    if (cfg.backend < DIST_CUDA_AUTO || cfg.backend > DIST_CUDA_IPC)
        return dist_cuda__fail(DIST_ERR_INVALID, "dist_cuda_init: backend %d is not a dist_cuda_backend", (int)cfg.backend);
    if (!(c = (dist_cuda_t *)DIST_MALLOC(sizeof *c))) return dist_cuda__fail(DIST_ERR_NOMEM, "dist_cuda_init: out of memory");
    memset(c, 0, sizeof *c);
    c->d = d;
    c->rank = dist_rank(d);
    c->world = dist_world_size(d);
    c->backend = cfg.backend;
    res = dist_cuda__open_device(c, &cfg);
    /* Every rank must take the same path: agree on whether all have a
       device and NCCL (MIN over the ranks), and on the chunk size (MIN);
       then, when it is not NCCL, choose between STAGED and IPC. */
#ifndef DIST_CUDA_NO_NCCL
    agree[0] = res != DIST_OK ? -1 : (c->backend == DIST_CUDA_AUTO || c->backend == DIST_CUDA_NCCL) && dist_cuda__load_nccl() == 1 ? 1 : 0;
#else
    agree[0] = res != DIST_OK ? -1 : 0;
#endif
    agree[1] = cfg.chunk_bytes ? (int64_t)(cfg.chunk_bytes < 4096 ? 4096 : cfg.chunk_bytes) : (int64_t)1 << 20;
    agreed = dist_all_reduce(d, agree, 2, DIST_INT64, DIST_MIN) == DIST_OK;
    if (agreed && agree[0] == 1 && cfg.backend == DIST_CUDA_AUTO) {
        /* (every rank is here: all have a device and NCCL) NCCL takes one
           rank per device; ranks that share one go on to IPC or STAGED */
        int shared = dist_cuda__devices_shared(c);
        if (shared < 0) agreed = 0;
        else if (shared) agree[0] = 0;
    }
    if (!agreed) {
        char why[DIST_CUDA__ERRLEN];
        snprintf(why, sizeof why, "%s", dist_error_message(d));
        if (res == DIST_OK) res = dist_cuda__fail(DIST_ERR_INIT, "dist_cuda_init on rank %d: agreeing with the other ranks: %s", c->rank, why);
    } else if (res == DIST_OK && agree[0] < 0) {
        res = dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: another rank has no usable CUDA device (its error says why)", c->rank);
    } else if (agree[0] == 0) {
        /* every rank has a device, so every rank gets here and chooses alike */
        res = dist_cuda__choose(c, cfg.backend);
        if (res == DIST_OK && cfg.backend == DIST_CUDA_NCCL) {
#ifdef DIST_CUDA_NO_NCCL
            res = dist_cuda__fail(DIST_ERR_UNSUPPORTED, "dist_cuda_init: the NCCL backend was left out of this build (DIST_CUDA_NO_NCCL)");
#else
            res = dist_cuda__fail(DIST_ERR_NO_DEVICE, "dist_cuda_init on rank %d: backend NCCL, but %s", c->rank,
                                  dist_cuda__nccl.state == 1 ? "another rank cannot load NCCL" : dist_cuda__nccl.why);
#endif
        }
    }
    if (res == DIST_OK) {
        if (agree[0] == 1) c->backend = DIST_CUDA_NCCL;          /* else dist_cuda__choose set it */
#ifndef DIST_CUDA_NO_NCCL
        if (c->backend == DIST_CUDA_NCCL) res = dist_cuda__open_nccl(c);
        else
#endif
            res = dist_cuda__open_staged(c, (size_t)agree[1]);
        if (res == DIST_OK && c->backend == DIST_CUDA_IPC) res = dist_cuda__open_ipc(c);
    }
    if (res != DIST_OK) {
        dist_log(d, DIST_LOG_ERROR, "cuda: %s", dist_cuda__error);
        dist_cuda__close(c);
        return res;
    }
    dist_log(d, DIST_LOG_INFO, "cuda: device %d (%s, sm_%d), backend %s, chunks of %llu KiB; init took %.2f s", c->ordinal, c->device_name, c->sm,
             dist_cuda__backend_names[c->backend], (unsigned long long)(agree[1] >> 10), (double)(dist_time_ns() - t0) / 1e9);
    *out = c;
    return DIST_OK;
}

DIST_API dist_result dist_cuda_destroy(dist_cuda_t *c) {
    if (c) {
        dist_log(c->d, DIST_LOG_DEBUG, "cuda: destroying the communicator of device %d (backend %s)", c->ordinal, dist_cuda__backend_names[c->backend]);
        dist_cuda__close(c);
    }
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
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: %s %d is not %s rank in 0..%d", what, c->rank, p2p ? "peer" : "root", j->peer,
                               p2p ? "another" : "a", c->world - 1);
    if (j->count && ((j->in_rows && !j->in) || (j->out_rows && !j->out)))
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: NULL buffer for %zu x %s", what, c->rank, j->count, dist_dtype_name(j->dtype));
    if (j->count > ((size_t)1 << 62) / dist_dtype_size(j->dtype) / (size_t)c->world)
        return dist_cuda__fail(DIST_ERR_INVALID, "%s on rank %d: count %zu is too large", what, c->rank, j->count);
    DIST_CUDA__CHECK(c, dist_cuda__cu.CtxSetCurrent(c->ctx), "cuCtxSetCurrent");
#ifndef DIST_CUDA_NO_NCCL
    if (c->backend == DIST_CUDA_NCCL) return dist_cuda__nccl_run(c, j, stream);
#endif
    if (c->backend == DIST_CUDA_IPC && !p2p) return dist_cuda__ipc_run(c, j, stream);
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
    return dist_cuda__launch_reduce(c, dst, ins, 2, count, dtype, op, stream, "dist_cuda_reduce_local");
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
