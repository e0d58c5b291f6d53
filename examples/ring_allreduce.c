/* ring_allreduce.c - all_reduce written by hand on point-to-point messages.

   SMOKE: distrun -n 4 {} --smoke

   Run it (any number of ranks; an optional size in MiB, default 4):
      make build/distrun build/examples/ring_allreduce && build/distrun -n 4 build/examples/ring_allreduce
      build/distrun -n 4 build/examples/ring_allreduce 16

   This is the section "Our Own Ring-Allreduce" of PyTorch's tutorial
   "Writing Distributed Applications with PyTorch", in C, and the step the
   tutorial leaves as an exercise.  all_reduce(SUM) leaves on every rank the
   element-wise sum of every rank's array.  Here it is built twice from
   dist_isend and dist_recv, with the ranks arranged in a ring (rank r sends
   to r+1 and receives from r-1, modulo N):

     1. naive_ring_allreduce, the tutorial's version: N-1 steps, in each of
        which every rank passes a WHOLE array to its right neighbour and adds
        the one it received from its left neighbour.  Correct, simple, and
        each rank sends (N-1) x the array.

     2. chunked_ring_allreduce, the bandwidth-optimal ring (Baidu's, NCCL's,
        Horovod's): the array is cut into N chunks.  A reduce-scatter phase
        (N-1 steps, one chunk per step) leaves each rank with the complete
        sum of one chunk; an all-gather phase (N-1 steps) passes the
        finished chunks around the ring.  Each rank sends 2 (N-1)/N x the
        array: for large N, about 2 arrays, however many ranks there are.

   Both are checked against dist_all_reduce and against a serial reference,
   then timed beside dist_all_reduce (which picks a pipelined ring,
   recursive halving-doubling, or shared memory; see dist.h COLLECTIVES).

   About checking floats: a float sum depends on the order of the additions,
   and the three methods add in different orders, so on arbitrary data they
   would differ in the last bits and == would be the wrong test.  The data
   here are small integers (|x| <= 50, so every partial sum of up to 300000
   ranks is an integer below 2^24, the range where float32 represents every
   integer exactly): every order gives the exact sum, and == is right.

   With --smoke it runs only the checks, on small and awkward sizes (fewer
   elements than ranks, counts that N does not divide, a message over
   64 KiB), prints problems and one summary line, and exits with status 1
   if any check failed on this rank. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stop at a failed call: print the library's sentence about it. */
#define CHECK(call)                                                          \
    do {                                                                     \
        dist_result r_ = (call);                                             \
        if (r_ != DIST_OK) {                                                 \
            fprintf(stderr, "%s failed: %s: %s\n", #call,                    \
                    dist_result_name(r_), dist_error_message(world));        \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* The same macro inside the all-reduce functions, which return the error. */
#define TRY(call)                                                            \
    do {                                                                     \
        dist_result r_ = (call);                                             \
        if (r_ != DIST_OK) return r_;                                        \
    } while (0)

enum { TAG_NAIVE = 1, TAG_REDUCE_SCATTER = 2, TAG_ALL_GATHER = 3 };

/* ---- 1. the tutorial's ring all-reduce ---------------------------------
   recv = sum over ranks of send.  In step i every rank sends the array it
   received in step i-1 (its own in step 0) to the right, receives the next
   one from the left, and adds it to the running sum.  After N-1 steps every
   array has visited every rank.

   Why two buffers, `a` and `b`, used in turn: dist_isend only STARTS the
   send; until its dist_wait the buffer must not change.  So the array being
   sent (say a) cannot also be the one we receive into; we receive into b,
   and in the next step send b and receive into a.  Posting the send with
   dist_isend before the blocking dist_recv matters too: every rank sends
   before it receives, so no rank waits for a neighbour that is itself
   waiting.  (A blocking dist_send would work here for small arrays, which
   go out without waiting for the receiver, but not for large ones: a send
   of over a quarter of DIST_EAGER_BYTES (1 MiB by default) waits until its
   receive is posted, as MPI's may, and a ring of them would wait for ever,
   or here until the timeout.  isend is the habit that always works.) */
static dist_result naive_ring_allreduce(dist_t *world, const float *send, float *recv, size_t count,
                                        float *a, float *b) {
    int rank = dist_rank(world), n = dist_world_size(world);
    int right = (rank + 1) % n, left = (rank - 1 + n) % n;
    memcpy(recv, send, count * sizeof *recv);   /* the running sum: our own first */
    memcpy(a, send, count * sizeof *a);         /* what we pass on first */
    float *out = a, *in = b;
    for (int step = 0; step < n - 1; step++) {
        dist_req_t *req;
        TRY(dist_isend(world, out, count, DIST_FLOAT32, right, TAG_NAIVE, &req));
        dist_result r = dist_recv(world, in, count, DIST_FLOAT32, left, TAG_NAIVE);
        if (r == DIST_OK)
            for (size_t i = 0; i < count; i++) recv[i] += in[i];
        dist_result w = dist_wait(req);     /* always wait: it frees the request */
        TRY(r);
        TRY(w);
        float *t = out; out = in; in = t;   /* send what we just received */
    }
    return DIST_OK;
}

/* ---- 2. the bandwidth-optimal ring ------------------------------------
   Cut the array into N chunks, chunk c being elements [lo(c), lo(c+1)):
   as equal as integer division allows (N need not divide count; chunks may
   be empty when count < N). */
static size_t chunk_lo(size_t count, int n, int c) { return count * (size_t)c / (size_t)n; }

/* Phase 1, reduce-scatter.  In step s, rank r sends chunk (r - s) to the
   right and receives chunk (r - s - 1) from the left, adding it into its
   own copy of that chunk.  The chunk it sends in step s is the one it
   finished adding in step s-1, so a partial sum grows by one rank's
   contribution at every hop: chunk c starts at rank c, and after N-1 hops
   it reaches rank c-1 = c+N-1 complete.  So after the phase rank r holds the
   full sum of chunk (r + 1) mod N.

      N = 3, chunk c of rank r written rc; "+" a sum so far
                   rank 0        rank 1        rank 2
      start        00 01 02      10 11 12      20 21 22
      step 0       sends 00      sends 11      sends 22    (to the right)
                   02+22         00+10         11+21       (what each adds)
      step 1       sends 02+22   sends 00+10   sends 11+21
                   01+11+21      02+22+12      00+10+20    (complete)
      rank r now holds chunk r+1 complete: 1, 2, 0.

   Phase 2, all-gather.  In step s, rank r sends chunk (r + 1 - s), which
   is complete, and receives chunk (r - s) from the left, straight into
   place: after N-1 steps every rank has every complete chunk.

   Each step moves 1/N of the array per rank, 2(N-1) steps in all: each
   rank sends 2(N-1)/N arrays, against N-1 for the naive version, and all
   N links of the ring are busy at once in every step.

   The send buffer (the chunk being sent) and the chunk being written in
   the same step are different chunks (N > 1), which is what the isend rule
   needs.  `scratch` holds one received chunk before it is added. */
static dist_result chunked_ring_allreduce(dist_t *world, const float *send, float *recv, size_t count,
                                          float *scratch) {
    int rank = dist_rank(world), n = dist_world_size(world);
    int right = (rank + 1) % n, left = (rank - 1 + n) % n;
    memcpy(recv, send, count * sizeof *recv);

    for (int s = 0; s < n - 1; s++) {                     /* reduce-scatter */
        int sc = ((rank - s) % n + n) % n, rc = ((rank - s - 1) % n + n) % n;
        size_t slo = chunk_lo(count, n, sc), shi = chunk_lo(count, n, sc + 1);
        size_t rlo = chunk_lo(count, n, rc), rhi = chunk_lo(count, n, rc + 1);
        dist_req_t *req;
        TRY(dist_isend(world, recv + slo, shi - slo, DIST_FLOAT32, right, TAG_REDUCE_SCATTER, &req));
        dist_result r = dist_recv(world, scratch, rhi - rlo, DIST_FLOAT32, left, TAG_REDUCE_SCATTER);
        if (r == DIST_OK)
            for (size_t i = 0; i < rhi - rlo; i++) recv[rlo + i] += scratch[i];
        dist_result w = dist_wait(req);
        TRY(r);
        TRY(w);
    }
    for (int s = 0; s < n - 1; s++) {                     /* all-gather */
        int sc = ((rank + 1 - s) % n + n) % n, rc = ((rank - s) % n + n) % n;
        size_t slo = chunk_lo(count, n, sc), shi = chunk_lo(count, n, sc + 1);
        size_t rlo = chunk_lo(count, n, rc), rhi = chunk_lo(count, n, rc + 1);
        dist_req_t *req;
        TRY(dist_isend(world, recv + slo, shi - slo, DIST_FLOAT32, right, TAG_ALL_GATHER, &req));
        dist_result r = dist_recv(world, recv + rlo, rhi - rlo, DIST_FLOAT32, left, TAG_ALL_GATHER);
        dist_result w = dist_wait(req);
        TRY(r);
        TRY(w);
    }
    return DIST_OK;
}

/* ---- the driver ---------------------------------------------------------- */

static dist_t *world;
static int rank, n;
static int errors;     /* this rank's failed checks */

/* Rank r's input: small integers, exact in float (see the top). */
static float input(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 101) - 50); }

static float *floats(size_t count) {
    float *p = malloc((count ? count : 1) * sizeof *p);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

/* The three ways to all-reduce, behind one signature for the driver. */
typedef struct workspace { float *a, *b; } workspace;
enum { NAIVE, CHUNKED, LIBRARY, METHODS };
static const char *const method_name[METHODS] = { "naive ring (tutorial)", "chunked ring", "dist_all_reduce" };

static dist_result all_reduce_by(int method, const float *send, float *recv, size_t count, workspace *ws) {
    switch (method) {
    case NAIVE:   return naive_ring_allreduce(world, send, recv, count, ws->a, ws->b);
    case CHUNKED: return chunked_ring_allreduce(world, send, recv, count, ws->a);
    default:      /* the library's all_reduce works in place */
        memcpy(recv, send, count * sizeof *recv);
        return dist_all_reduce(world, recv, count, DIST_FLOAT32, DIST_SUM);
    }
}

/* Runs the three methods on `count` elements; each must equal the serial
   reference exactly (and therefore each other and dist_all_reduce). */
static void check(size_t count, workspace *ws) {
    float *send = floats(count), *recv = floats(count), *want = floats(count);
    for (size_t i = 0; i < count; i++) {
        send[i] = input(rank, i);
        float sum = 0;
        for (int r = 0; r < n; r++) sum += input(r, i);   /* the serial reference */
        want[i] = sum;
    }
    for (int m = 0; m < METHODS; m++) {
        for (size_t i = 0; i < count; i++) recv[i] = -12345.0f;   /* no stale results */
        CHECK(all_reduce_by(m, send, recv, count, ws));
        for (size_t i = 0; i < count; i++) {
            if (recv[i] != want[i]) {
                fprintf(stderr, "WRONG: %s of %zu float%s: element %zu is %g, expected %g\n",
                        method_name[m], count, count == 1 ? "" : "s", i, recv[i], want[i]);
                errors++;
                break;
            }
        }
    }
    free(send); free(recv); free(want);
}

/* Seconds per call of one method, as the slowest rank saw it: all ranks
   start together (barrier) and the time of the slowest rank is the time of
   the operation (all_reduce MAX of the ranks' times). */
static double time_it(int method, const float *send, float *recv, size_t count, workspace *ws, int iters) {
    for (int w = 0; w < 2; w++) CHECK(all_reduce_by(method, send, recv, count, ws));   /* warm-up */
    CHECK(dist_barrier(world));
    int64_t t0 = dist_time_ns();
    for (int it = 0; it < iters; it++) CHECK(all_reduce_by(method, send, recv, count, ws));
    double secs = (double)(dist_time_ns() - t0) / 1e9 / iters;
    CHECK(dist_all_reduce(world, &secs, 1, DIST_FLOAT64, DIST_MAX));
    return secs;
}

int main(int argc, char **argv) {
    int smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    double mib = argc > 1 && !smoke ? atof(argv[1]) : 4.0;
    if (mib <= 0) { fprintf(stderr, "usage: %s [--smoke | MiB]\n", argv[0]); return 2; }

    if (dist_init(&world, NULL) != DIST_OK) {
        fprintf(stderr, "dist_init failed: %s\n", dist_error_message(NULL));
        return 1;
    }
    rank = dist_rank(world);
    n = dist_world_size(world);

    size_t big = (size_t)(mib * 1024 * 1024) / sizeof(float);
    if (big == 0) big = 1;
    /* Awkward sizes for the smoke test: empty, fewer elements than ranks,
       counts N does not divide, and one over 64 KiB (dist.h's switch
       from small-message to large-message algorithms and transfers). */
    size_t smoke_sizes[] = { 0, 1, 3, (size_t)n + 1, 1000, 1003, 70001 };
    size_t largest = smoke ? 70001 : big;
    workspace ws = { floats(largest), floats(largest) };

    if (smoke) {
        for (size_t s = 0; s < sizeof smoke_sizes / sizeof *smoke_sizes; s++) check(smoke_sizes[s], &ws);
    } else {
        check(big, &ws);
        if (rank == 0) printf("%d rank%s, %zu float32 (%.2f MiB) per rank: the three all-reduces checked against the serial sum\n",
                              n, n == 1 ? "" : "s", big, (double)big * 4 / (1024.0 * 1024.0));

        /* Bandwidth.  algbw = bytes / time: how fast the array gets
           all-reduced.  busbw = algbw x 2(N-1)/N: the traffic through each
           rank's link that an optimal algorithm needs, per second, which
           is comparable across N (as in nccl-tests).  The naive ring moves
           (N-1) arrays per rank instead of 2(N-1)/N, so its busbw shows how
           much of the link it wastes on the same result. */
        float *send = floats(big), *recv = floats(big);
        for (size_t i = 0; i < big; i++) send[i] = input(rank, i);
        int iters = big <= (1u << 16) ? 100 : 10;
        if (rank == 0) printf("%-22s %12s %12s %12s\n", "method", "time (us)", "algbw GB/s", "busbw GB/s");
        for (int m = 0; m < METHODS; m++) {
            double secs = time_it(m, send, recv, big, &ws, iters);
            double bytes = (double)big * sizeof(float);
            double algbw = bytes / secs / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
            if (rank == 0) printf("%-22s %12.1f %12.3f %12.3f\n", method_name[m], secs * 1e6, algbw, busbw);
            fflush(stdout);         /* each row as soon as it is measured */
        }
        free(send); free(recv);
    }

    /* Everyone's verdict: the sum of the ranks' failed checks. */
    int32_t total = errors;
    CHECK(dist_all_reduce(world, &total, 1, DIST_INT32, DIST_SUM));
    if (rank == 0)
        printf("ring_allreduce%s: %s on %d rank%s\n", smoke ? " smoke" : "",
               total == 0 ? "all checks passed" : "some checks FAILED", n, n == 1 ? "" : "s");
    free(ws.a); free(ws.b);
    CHECK(dist_destroy(world));
    return errors == 0 ? 0 : 1;
}
