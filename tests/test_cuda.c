// TIMEOUT: 300
// WINDOWS: yes, but for the NVRTC compile checks where no NVRTC DLL loads (under Wine), and the two stub-driver cases (a Linux library)
/* test_cuda.c - dist_cuda.h.
   Without a GPU (what CI has):
   - our declarations of CUDA's types and constants match cuda.h and nccl.h
     (checked at compile time where those headers are installed);
   - the reduction kernels compile with NVRTC, with nothing in its log, for
     sm_80 and sm_90 and the oldest architecture this NVRTC has among
     sm_70/sm_75 (NVRTC 13 dropped sm_70: said on a line of its own);
   - dist_cuda_init in a 2-rank job fails with DIST_ERR_NO_DEVICE and a
     sentence, with no driver, with the toolkit's stub driver, and with a
     driver path that does not exist, and so it does with backend IPC
     (asked in the config, or DIST_CUDA_BACKEND=ipc); an unknown
     DIST_CUDA_BACKEND is refused; every call refuses NULL.
   On a machine with a device, tests/test_cuda_gpu.c runs the GPU checks.
   Exit 0: all passed; 77: skipped (no NVRTC); 1: a check failed.
   Windows (mingw-w64, under Wine: no nvcuda.dll, no NVRTC DLL): the same
   checks through LoadLibrary, with C:\nonexistent\nvcuda.dll for the path
   that does not exist; without NVRTC, dist_cuda_compile_kernels must fail
   with DIST_ERR_NO_DEVICE saying so (and naming DIST_CUDA_LIBNVRTC's path
   when that is set), and the compile checks are left out, said on a line
   ("skip (Windows): ..."), not the whole test; the stub driver's cases are
   left out (the toolkit's stub is a Linux library; CUDA for Windows has
   none), each said on a line. */
#define DIST_IMPLEMENTATION
#define DIST_CUDA_IMPLEMENTATION
#include "dist_cuda.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* ---- our CUDA declarations against CUDA's own headers ---------------------- */
#if defined(__has_include)
#  if __has_include(<cuda.h>)
#    include <cuda.h>
#    define HAVE_CUDA_H 1
_Static_assert(sizeof(dist_cuda__memcpy2d) == sizeof(CUDA_MEMCPY2D), "CUDA_MEMCPY2D size");
_Static_assert(offsetof(dist_cuda__memcpy2d, srcMemoryType) == offsetof(CUDA_MEMCPY2D, srcMemoryType), "srcMemoryType");
_Static_assert(offsetof(dist_cuda__memcpy2d, srcHost) == offsetof(CUDA_MEMCPY2D, srcHost), "srcHost");
_Static_assert(offsetof(dist_cuda__memcpy2d, srcDevice) == offsetof(CUDA_MEMCPY2D, srcDevice), "srcDevice");
_Static_assert(offsetof(dist_cuda__memcpy2d, srcPitch) == offsetof(CUDA_MEMCPY2D, srcPitch), "srcPitch");
_Static_assert(offsetof(dist_cuda__memcpy2d, dstMemoryType) == offsetof(CUDA_MEMCPY2D, dstMemoryType), "dstMemoryType");
_Static_assert(offsetof(dist_cuda__memcpy2d, dstHost) == offsetof(CUDA_MEMCPY2D, dstHost), "dstHost");
_Static_assert(offsetof(dist_cuda__memcpy2d, dstDevice) == offsetof(CUDA_MEMCPY2D, dstDevice), "dstDevice");
_Static_assert(offsetof(dist_cuda__memcpy2d, dstPitch) == offsetof(CUDA_MEMCPY2D, dstPitch), "dstPitch");
_Static_assert(offsetof(dist_cuda__memcpy2d, WidthInBytes) == offsetof(CUDA_MEMCPY2D, WidthInBytes), "WidthInBytes");
_Static_assert(offsetof(dist_cuda__memcpy2d, Height) == offsetof(CUDA_MEMCPY2D, Height), "Height");
_Static_assert(DIST_CUDA__MEM_HOST == CU_MEMORYTYPE_HOST && DIST_CUDA__MEM_DEVICE == CU_MEMORYTYPE_DEVICE, "CUmemorytype");
_Static_assert(DIST_CUDA__ATTR_CC_MAJOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major");
_Static_assert(DIST_CUDA__ATTR_CC_MINOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor");
_Static_assert(DIST_CUDA__ATTR_SM_COUNT == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "sm count");
_Static_assert(DIST_CUDA__STREAM_NON_BLOCKING == CU_STREAM_NON_BLOCKING && DIST_CUDA__EVENT_DISABLE_TIMING == CU_EVENT_DISABLE_TIMING &&
                   DIST_CUDA__HOSTALLOC_PORTABLE == CU_MEMHOSTALLOC_PORTABLE,
               "flags");
_Static_assert(sizeof(dist_cuda__CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
_Static_assert(sizeof(dist_cuda__CUipcMemHandle) == sizeof(CUipcMemHandle) && sizeof(CUipcMemHandle) == 64 &&
                   DIST_CUDA__IPC_HANDLE_SIZE == CU_IPC_HANDLE_SIZE, "CUipcMemHandle");
_Static_assert(sizeof(dist_cuda__CUuuid) == sizeof(CUuuid), "CUuuid");
_Static_assert(DIST_CUDA__IPC_LAZY_ENABLE_PEER_ACCESS == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS");
_Static_assert(DIST_CUDA__POINTER_BUFFER_ID == CU_POINTER_ATTRIBUTE_BUFFER_ID, "CU_POINTER_ATTRIBUTE_BUFFER_ID");
#  endif
#  if __has_include(<nccl.h>)
#    include <nccl.h>
#    define HAVE_NCCL_H 1
_Static_assert(sizeof(dist_cuda__ncclUniqueId) == sizeof(ncclUniqueId), "ncclUniqueId");
#  endif
#endif

static int g_fail;
#define TCHECK(cond, ...) do { if (!(cond)) { printf("FAIL "); printf(__VA_ARGS__); printf("\n"); g_fail++; } } while (0)

/* ---- the kernels through NVRTC --------------------------------------------- */
#ifdef _WIN32
/* (Windows) DIST_CUDA_LIBNVRTC naming a DLL that does not exist: refused
   with DIST_ERR_NO_DEVICE, the sentence naming it.  In a process of its
   own: the loader tries once per process. */
#define MISSING_NVRTC "C:\\nonexistent\\nvrtc64_120_0.dll"
static int nvrtc_missing_path(void) {
    char log[256];
    dist_result r;
    setenv("DIST_CUDA_LIBNVRTC", MISSING_NVRTC, 1);
    r = dist_cuda_compile_kernels(80, log, sizeof log);
    if (r != DIST_ERR_NO_DEVICE || !strstr(dist_cuda_error_message(), "DIST_CUDA_LIBNVRTC=" MISSING_NVRTC)) {
        printf("FAIL DIST_CUDA_LIBNVRTC=%s: dist_cuda_compile_kernels gave %s, \"%s\"; want DIST_ERR_NO_DEVICE naming the path\n", MISSING_NVRTC,
               dist_result_name(r), dist_cuda_error_message());
        return 1;
    }
    printf("ok   DIST_CUDA_LIBNVRTC=%s: dist_cuda_compile_kernels fails with DIST_ERR_NO_DEVICE: \"%s\"\n", MISSING_NVRTC, dist_cuda_error_message());
    return 0;
}
#endif

static int test_nvrtc(void) {
    char log[4096];
    int major = 0, minor = 0, n = 0, archs[128], oldest = 0;
    const char *cc = getenv("DIST_COMPILE_CHECKS");
    if (cc && !strcmp(cc, "0")) {         /* the sanitizer passes: compiling does not depend on them */
        printf("note: DIST_COMPILE_CHECKS=0: the kernels' NVRTC compile checks left out of this pass (make test runs them)\n");
        return 0;
    }
#ifdef _WIN32
    TCHECK(run_in_process(nvrtc_missing_path) == 0, "DIST_CUDA_LIBNVRTC=%s: the check's process failed", MISSING_NVRTC);
#endif
    if (dist_cuda_compile_kernels(80, log, sizeof log) == DIST_ERR_NO_DEVICE) {
#ifdef _WIN32
        /* the loader's answer is checked; the compile checks need NVRTC */
        const char *m = dist_cuda_error_message();
        if (!strstr(m, "cannot load NVRTC") || !strstr(m, "DIST_CUDA_LIBNVRTC")) {
            TCHECK(0, "without NVRTC, dist_cuda_compile_kernels: \"%s\" does not say it cannot load NVRTC, nor name DIST_CUDA_LIBNVRTC", m);
        } else {
            printf("ok   without NVRTC, dist_cuda_compile_kernels fails with DIST_ERR_NO_DEVICE: \"%s\"\n", m);
        }
        printf("skip (Windows): the kernels' NVRTC compile checks: no NVRTC DLL loads here (nvrtc64_130_0.dll, nvrtc64_120_0.dll, "
               "nvrtc64_112_0.dll; Wine has none)\n");
        return 0;
#else
        printf("skip: NVRTC cannot be loaded here (%s)\n", dist_cuda_error_message());
        return 77;
#endif
    }
    dist_cuda__rtc.nvrtcVersion(&major, &minor);
    dist_cuda__rtc.nvrtcGetNumSupportedArchs(&n);
    if (n > 0 && n <= 128) dist_cuda__rtc.nvrtcGetSupportedArchs(archs);
    for (int i = 0; i < n && i < 128; i++)
        if (archs[i] == 70 || (archs[i] == 75 && oldest != 70)) oldest = oldest == 70 ? 70 : archs[i];
    if (oldest != 70)
        printf("note: NVRTC %d.%d cannot compile for sm_70 (its oldest is sm_%d); sm_%d stands in for it\n", major, minor, n > 0 ? archs[0] : 0,
               oldest ? oldest : 75);
    const int want[3] = { oldest ? oldest : 75, 80, 90 };
    for (int i = 0; i < 3; i++) {
        dist_result r = dist_cuda_compile_kernels(want[i], log, sizeof log);
        TCHECK(r == DIST_OK && log[0] == 0, "NVRTC %d.%d, sm_%d: %s; log: %s", major, minor, want[i], r == DIST_OK ? "compiled" : dist_cuda_error_message(), log);
        if (r == DIST_OK && !log[0]) printf("ok   kernels compile with NVRTC %d.%d for sm_%d, no warnings\n", major, minor, want[i]);
    }
    TCHECK(dist_cuda_compile_kernels(5, log, sizeof log) == DIST_ERR_INVALID, "compile_kernels(5) should be refused");
    return 0;
}

/* ---- without a device -------------------------------------------------------- */
typedef struct {
    const char *libcuda; const char *says;
    dist_cuda_backend backend;           /* in the config */
    const char *env;                     /* DIST_CUDA_BACKEND, or NULL */
    dist_result want;                    /* 0: DIST_ERR_NO_DEVICE */
} nodev_case;

static int nodev_rank(dist_t *world, void *arg) {
    const nodev_case *k = (const nodev_case *)arg;
    const dist_result want = k->want ? k->want : DIST_ERR_NO_DEVICE;
    dist_cuda_t *c = (dist_cuda_t *)0x1;
    dist_cuda_config cc = { 0 };
    cc.backend = k->backend;
    dist_result r = dist_cuda_init(world, &cc, &c);
    if (r == DIST_OK) { dist_cuda_destroy(c); return 3; }        /* a device: not this test's case */
    if (r != want || c != NULL || !strstr(dist_cuda_error_message(), k->says)) {
        printf("FAIL rank %d: dist_cuda_init gave %s, out %p, \"%s\"; want %s, NULL, saying \"%s\"\n", dist_rank(world),
               dist_result_name(r), (void *)c, dist_cuda_error_message(), dist_result_name(want), k->says);
        return 1;
    }
    if (dist_rank(world) == 0) printf("     rank 0: \"%s\"\n", dist_cuda_error_message());
    return 0;
}


#define STUB_DRIVER "/usr/local/cuda/lib64/stubs/libcuda.so"
#ifdef _WIN32
#  define MISSING_DRIVER "C:\\nonexistent\\nvcuda.dll"
#  define DEFAULT_DRIVER "nvcuda.dll"
#else
#  define MISSING_DRIVER "/nonexistent/libcuda.so.1"
#  define DEFAULT_DRIVER "libcuda.so.1"
#endif

static void test_no_device(void) {
    static const nodev_case cases[] = {
        { NULL, "", DIST_CUDA_AUTO, NULL, DIST_OK },                      /* says: filled below */
        { STUB_DRIVER, "did not start", DIST_CUDA_AUTO, NULL, DIST_OK },
        { MISSING_DRIVER, "DIST_CUDA_LIBCUDA=" MISSING_DRIVER, DIST_CUDA_AUTO, NULL, DIST_OK },
        { NULL, "", DIST_CUDA_IPC, NULL, DIST_OK },                       /* backend IPC: the same */
        { STUB_DRIVER, "did not start", DIST_CUDA_IPC, NULL, DIST_OK },
        { NULL, "", DIST_CUDA_AUTO, "ipc", DIST_OK },
        { MISSING_DRIVER, "DIST_CUDA_LIBCUDA=" MISSING_DRIVER, DIST_CUDA_AUTO, "ipc", DIST_OK },
        { NULL, "DIST_CUDA_BACKEND=bogus: want auto, staged, nccl or ipc", DIST_CUDA_AUTO, "bogus", DIST_ERR_INVALID },
    };
    static const char *const names[] = { "auto", "staged", "nccl", "ipc" };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nodev_case k = cases[i];
        char how[96];
        if (k.env) snprintf(how, sizeof how, "DIST_CUDA_BACKEND=%s", k.env);
        else snprintf(how, sizeof how, "backend %s", names[k.backend]);
#ifdef _WIN32
        if (k.libcuda && strstr(k.libcuda, "stubs")) {
            printf("skip (Windows): 2 ranks, the toolkit's stub driver, %s: it is a Linux library (%s), and CUDA for Windows has no stub DLL\n",
                   how, k.libcuda);
            continue;
        }
#endif
        if (k.libcuda && access(k.libcuda, R_OK) != 0 && strstr(k.libcuda, "stubs")) {
            printf("note: no stub driver at %s; that case not run\n", k.libcuda);
            continue;
        }
        if (!k.libcuda && !k.says[0]) k.says = "dist_cuda_init on rank";
        if (k.libcuda) setenv("DIST_CUDA_LIBCUDA", k.libcuda, 1); else unsetenv("DIST_CUDA_LIBCUDA");
        if (k.env) setenv("DIST_CUDA_BACKEND", k.env, 1); else unsetenv("DIST_CUDA_BACKEND");
        int rc = spawn_job(2, nodev_rank, &k, NULL);   /* (Windows: in a process of its own, see testutil.h) */
        unsetenv("DIST_CUDA_LIBCUDA");
        unsetenv("DIST_CUDA_BACKEND");
        TCHECK(rc == 0, "2 ranks, driver %s, %s: dist_spawn returned %d: %s", k.libcuda ? k.libcuda : "(default)", how, rc, spawn_job_error());
        if (rc == 0)
            printf("ok   2 ranks, driver %s, %s: %s on both, with a sentence\n", k.libcuda ? k.libcuda : "(default: " DEFAULT_DRIVER ")", how,
                   dist_result_name(k.want ? k.want : DIST_ERR_NO_DEVICE));
    }
    /* every call refuses a NULL communicator */
    int x = 0, before = g_fail;
    TCHECK(dist_cuda_init(NULL, NULL, NULL) == DIST_ERR_INVALID, "init(NULL out)");
    dist_cuda_t *c = NULL;
    TCHECK(dist_cuda_init(NULL, NULL, &c) == DIST_ERR_INVALID && !c && strstr(dist_cuda_error_message(), "NULL communicator"), "init(NULL world): %s",
          dist_cuda_error_message());
    TCHECK(dist_cuda_all_reduce(NULL, &x, 1, DIST_INT32, DIST_SUM, NULL) == DIST_ERR_INVALID && strstr(dist_cuda_error_message(), "dist_cuda_all_reduce"),
          "all_reduce(NULL): %s", dist_cuda_error_message());
    TCHECK(dist_cuda_broadcast(NULL, &x, 1, DIST_INT32, 0, NULL) == DIST_ERR_INVALID, "broadcast(NULL)");
    TCHECK(dist_cuda_reduce(NULL, &x, 1, DIST_INT32, DIST_SUM, 0, NULL) == DIST_ERR_INVALID, "reduce(NULL)");
    TCHECK(dist_cuda_gather(NULL, &x, &x, 1, DIST_INT32, 0, NULL) == DIST_ERR_INVALID, "gather(NULL)");
    TCHECK(dist_cuda_all_gather(NULL, &x, &x, 1, DIST_INT32, NULL) == DIST_ERR_INVALID, "all_gather(NULL)");
    TCHECK(dist_cuda_scatter(NULL, &x, &x, 1, DIST_INT32, 0, NULL) == DIST_ERR_INVALID, "scatter(NULL)");
    TCHECK(dist_cuda_reduce_scatter(NULL, &x, &x, 1, DIST_INT32, DIST_SUM, NULL) == DIST_ERR_INVALID, "reduce_scatter(NULL)");
    TCHECK(dist_cuda_all_to_all(NULL, &x, &x, 1, DIST_INT32, NULL) == DIST_ERR_INVALID, "all_to_all(NULL)");
    TCHECK(dist_cuda_barrier(NULL, NULL) == DIST_ERR_INVALID, "barrier(NULL)");
    TCHECK(dist_cuda_send(NULL, &x, 1, DIST_INT32, 1, 0, NULL) == DIST_ERR_INVALID, "send(NULL)");
    TCHECK(dist_cuda_recv(NULL, &x, 1, DIST_INT32, 1, 0, NULL) == DIST_ERR_INVALID, "recv(NULL)");
    TCHECK(dist_cuda_reduce_local(NULL, &x, &x, 1, DIST_INT32, DIST_SUM, NULL) == DIST_ERR_INVALID, "reduce_local(NULL)");
    TCHECK(dist_cuda_destroy(NULL) == DIST_OK, "destroy(NULL)");
    TCHECK(dist_cuda_backend_of(NULL) == DIST_CUDA_AUTO && dist_cuda_device(NULL) == -1, "backend_of/device of NULL");
    printf("%s every call refuses a NULL communicator with a sentence naming the call\n", g_fail > before ? "FAIL" : "ok  ");
}

int main(void) {
    int skip = test_nvrtc();
#if !defined(HAVE_CUDA_H)
    printf("note: cuda.h not found: our declarations of CUDA's types were not compared with it\n");
#endif
    /* (Windows: asked in the first process alone; the processes that run
       main again take its answer) */
    if (first_value("cuda_device", first_process() ? cuda_have_device() : 0))
        printf("note: this machine has a CUDA device: the no-device checks do not apply (tests/test_cuda_gpu.c runs the GPU checks)\n");
    else
        test_no_device();
    if (g_fail) { printf("%d check(s) failed\n", g_fail); return 1; }
    return skip;
}
