// TIMEOUT: 300
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_p2p_big.c - large point-to-point messages between 2 ranks.

   (a) one 1 GiB message (1<<30 x uint8) from rank 0 to rank 1; the receiver
       checks it against a pattern it generates itself and reports GB/s;
   (b) both ranks call blocking dist_send to each other at the same moment,
       then dist_recv: with 64 KiB (sent eagerly, within the receiver's
       flow-control budget) no deadlock, contents checked; with 256 MiB
       (a send that large waits for its receive, as MPI_Send may) both
       sends time out after the communicator's timeout (3 s here), and the
       sentence names the peer and says to use dist_isend;
   (c) 256 MiB with dist_isend/dist_irecv (both post the send first): no
       deadlock, contents checked.
   Over shared memory, (a) also checks that both ends copied part of it.
   Each part runs in its own dist_spawn and frees its buffers, so at most
   about 1 GiB + 1 GiB (part a) is allocated at a time.  Patterns are a
   xorshift stream keyed by (part, sender): the receiver never sees a copy
   of the sender's buffer. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

typedef struct {
    atomic_int claimed[2];
    atomic_int sent[2];            /* (b) 256 MiB: its blocking send has returned */
    char msg[2][512];
    char note[2][256];
} shared_t;
static shared_t *sh;

/* FAIL(...) and OK(call) (testutil.h): each rank's first failure */
DEFINE_FAIL_AT(2, &sh->claimed[rank], sh->msg[rank])

/* Pattern: 64-bit words of a xorshift stream (sizes here are multiples of 8). */
static uint64_t seed_of(uint64_t a, uint64_t b) {
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (x ^ (x >> 31)) | 1;
}
static void fill(uint64_t *p, size_t words, uint64_t s) {
    for (size_t i = 0; i < words; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        p[i] = s;
    }
}
/* Index of the first word that differs, or SIZE_MAX. */
static size_t verify(const uint64_t *p, size_t words, uint64_t s) {
    for (size_t i = 0; i < words; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        if (p[i] != s) return i;
    }
    return SIZE_MAX;
}

#define GIB ((size_t)1 << 30)
#define MIB256 ((size_t)256 << 20)

/* (a) 1 GiB, rank 0 -> rank 1.  Rank 1 posts its irecv first and tells
   rank 0, so the data goes straight into the user's buffer; the time runs
   from that "ready" message to the completed receive. */
static int part_a(dist_t *w, void *arg) {
    int rank = dist_rank(w);
    int32_t ready = 1;
    (void)arg;
    uint64_t *buf = malloc(GIB);
    if (!buf) return FAIL("cannot allocate 1 GiB");
    if (rank == 0) {
        fill(buf, GIB / 8, seed_of(1, 0));
        OK(dist_recv(w, &ready, 1, DIST_INT32, 1, 1));
        double t0 = now_s();
        OK(dist_send(w, buf, GIB, DIST_UINT8, 1, 2));
        snprintf(sh->note[0], sizeof sh->note[0], "send returned after %.2f s", now_s() - t0);
        /* Over shared memory, where each may access the other's memory,
           both ends copy a large payload: the sender waiting for its ACK
           writes pieces of it, the receiver reads the others.  (White
           box: the engine's count of the bytes this rank wrote.) */
        {
            const dist__peer *p = &w->eng->peers[1];
            if (p->shm && p->ref_min && !(p->shm->coop_wrote > 0 && p->shm->coop_wrote < GIB)) {
                free(buf);
                return FAIL("over shared memory the sender wrote %llu of the 1 GiB itself; want some but not all",
                            (unsigned long long)p->shm->coop_wrote);
            }
            if (p->shm && p->ref_min)
                snprintf(sh->note[0] + strlen(sh->note[0]), sizeof sh->note[0] - strlen(sh->note[0]), "; it wrote %.0f%% of it itself",
                         100.0 * (double)p->shm->coop_wrote / (double)GIB);
        }
    } else {
        dist_req_t *r;
        memset(buf, 0xA5, GIB);   /* nonzero: the pages are really touched (malloc+memset 0 may become calloc) */
        OK(dist_irecv(w, buf, GIB, DIST_UINT8, 0, 2, &r));
        double t0 = now_s();
        OK(dist_send(w, &ready, 1, DIST_INT32, 0, 1));
        OK(dist_wait(r));
        double el = now_s() - t0;
        size_t at = verify(buf, GIB / 8, seed_of(1, 0));
        if (at != SIZE_MAX) { free(buf); return FAIL("1 GiB message differs from the pattern at byte %zu", at * 8); }
        snprintf(sh->note[1], sizeof sh->note[1], "1 GiB in %.2f s = %.2f GB/s", el, (double)GIB / el / 1e9);
    }
    free(buf);
    return 0;
}

/* (b)/(c): both ranks send `bytes` to each other at once, then receive. */
static int exchange(dist_t *w, int nonblocking, size_t bytes) {
    int rank = dist_rank(w), peer = 1 - rank;
    int32_t token = rank;
    uint64_t *out = malloc(bytes), *in = malloc(bytes);
    if (!out || !in) { free(out); free(in); return FAIL("cannot allocate 2 x %zu bytes", bytes); }
    fill(out, bytes / 8, seed_of(2 + (uint64_t)nonblocking, (uint64_t)rank));
    memset(in, 0xA5, bytes);
    /* line up: each has sent its token before either starts the big send */
    OK(dist_send(w, &token, 1, DIST_INT32, peer, 3));
    OK(dist_recv(w, &token, 1, DIST_INT32, peer, 3));
    if (token != peer) return FAIL("sync token %d", token);
    if (!nonblocking && bytes > ((size_t)1 << 20)) {
        /* Each send waits for the other's receive: both time out, saying why. */
        double t0 = now_s();
        dist_result r = dist_send(w, out, bytes / 4, DIST_FLOAT32, peer, 4);
        double el = now_s() - t0;
        const char *m = dist_error_message(w);
        char who[32];
        /* The peer's send began a little later (much, under Wine on a busy
           machine) and times out later: it must not see this rank shut
           down first.  Both wait until both sends have returned. */
        atomic_store(&sh->sent[rank], 1);
        for (double t1 = now_s(); !atomic_load(&sh->sent[peer]) && now_s() - t1 < 30.0;) sleep_ms(5);
        snprintf(who, sizeof who, "rank %d", peer);
        free(out); free(in);
        if (r != DIST_ERR_TIMEOUT) return FAIL("both blocking 256 MiB sends first: rank %d's send returned %s, want DIST_ERR_TIMEOUT (\"%s\")",
                                               rank, dist_result_name(r), m);
        if (!strstr(m, who) || !strstr(m, "dist_isend"))
            return FAIL("the timeout's sentence does not name %s and say to use dist_isend: \"%s\"", who, m);
        if (el < 2.5 || el > 8.0) return FAIL("the send timed out after %.2f s; the timeout is 3 s", el);
        snprintf(sh->note[rank], sizeof sh->note[rank], "timed out after %.1f s as it should", el);
        return 0;
    }
    if (!nonblocking) {
        OK(dist_send(w, out, bytes / 4, DIST_FLOAT32, peer, 4));
        OK(dist_recv(w, in, bytes / 4, DIST_FLOAT32, peer, 4));
    } else {
        dist_req_t *rq[2];
        OK(dist_isend(w, out, bytes / 4, DIST_FLOAT32, peer, 5, &rq[0]));
        OK(dist_irecv(w, in, bytes / 4, DIST_FLOAT32, peer, 5, &rq[1]));
        OK(dist_wait_all(2, rq));
    }
    size_t at = verify(in, bytes / 8, seed_of(2 + (uint64_t)nonblocking, (uint64_t)peer));
    free(out); free(in);
    if (at != SIZE_MAX) return FAIL("%zu bytes from rank %d differ at byte %zu", bytes, peer, at * 8);
    return 0;
}
static int part_b1(dist_t *w, void *arg) { (void)arg; return exchange(w, 0, (size_t)64 << 10); }
static int part_b2(dist_t *w, void *arg) { (void)arg; return exchange(w, 0, MIB256); }
static int part_c(dist_t *w, void *arg) { (void)arg; return exchange(w, 1, MIB256); }

int main(void) {
    static const struct { const char *name; int (*fn)(dist_t *, void *); } parts[] = {
        { "1GiB_rank0_to_rank1", part_a },
        { "64KiB_both_blocking_send_first", part_b1 },
        { "256MiB_both_blocking_send_first_times_out", part_b2 },
        { "256MiB_both_isend_irecv", part_c },
    };
    int failed = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        dist_config cfg = { 0 };
        cfg.timeout_ms = parts[i].fn == part_b2 ? 3000 : 60000;   /* generous: sanitizers slow the copies down */
        memset(sh, 0, sizeof *sh);
        double t0 = now_s();
        int rc = spawn_job(2, parts[i].fn, NULL, &cfg);
        double el = now_s() - t0;
        int bad = rc != 0 || atomic_load(&sh->claimed[0]) || atomic_load(&sh->claimed[1]);
        if (!bad) {
            printf("ok   n=2 %s (%.2f s)", parts[i].name, el);
            for (int r = 0; r < 2; r++) if (sh->note[r][0]) printf("  rank %d: %s", r, sh->note[r]);
            printf("\n");
            continue;
        }
        failed++;
        printf("FAIL n=2 %s (%.2f s): dist_spawn returned %d%s%s\n", parts[i].name, el, rc, rc ? ": " : "",
               rc ? dist_error_message(NULL) : "");
        for (int r = 0; r < 2; r++) if (sh->msg[r][0]) printf("     rank %d: %s\n", r, sh->msg[r]);
    }
    munmap(sh, sizeof *sh);
    printf("%d failed\n", failed);
    return failed ? 1 : 0;
}
