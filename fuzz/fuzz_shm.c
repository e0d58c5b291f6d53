/* fuzz/fuzz_shm.c - shared memory as a peer describes it.

   Two ranks on one host agree on shared memory over their mesh connection:
   each sends a record saying where its segment is (pid, ring slot, ring
   size, segment size, an address to probe, the segment's name), and maps
   the other's segment by what that record and the segment's own header
   say (dist__shm_map_peer).  Here the record comes from the input (its pid
   and name replaced by this process's and a segment's, so the mapping is
   real), and so do the segment's size and first bytes.  A
   mapping that is taken must hold everything the engine will touch: the
   peer's ring and its collective area lie inside the segment and inside
   the file (touching a page past the file's end is SIGBUS).

   Then the ring functions (dist__ring_used, dist__ring_read,
   dist__ring_write) run on control words from the input, as a peer that
   writes garbage into the shared ring would leave them: nothing may be
   read or written outside the ring.  Layout: fuzz/fuzz.h. */
#define FUZZ_TARGET
#include "fuzz.h"
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <sys/mman.h>
#include <sys/uio.h>

/* The segment: `size` bytes (at least 1), starting with `head` (its
   owner's pid made this process's); named in f, mapped here at the
   return value. */
static void *segment(dist__shm_file *f, size_t size, const uint8_t *head, size_t n) {
    uint8_t hdr[sizeof(dist__shm_hdr)];
    void *m = dist__shm_create(f, size);
    FUZZ_CHECK(m != NULL && n <= sizeof hdr);
    memcpy(hdr, head, n);
    if (n >= offsetof(dist__shm_hdr, owner_pid) + 4) dist__put32(hdr + offsetof(dist__shm_hdr, owner_pid), (uint32_t)getpid());
    if (n > size) n = size;
    memcpy(m, hdr, n);
    return m;
}

static void map_peer(unsigned flags, size_t file_size, const uint8_t *rec_in, const uint8_t *head, size_t nhead) {
    dist__engine e;
    dist__peer p;
    uint8_t rec[FUZZ_SHM_REC_BYTES];
    dist__shm_file f;
    void *own;
    int pipefd[2] = { -1, -1 }, ok;
    if (file_size == 0) file_size = 1;
    own = segment(&f, file_size, head, nhead);
    memcpy(rec, rec_in, sizeof rec);
    dist__put32(rec + 4, (uint32_t)getpid());
    memset(rec + 64, 0, DIST__SHM_NAME);
    if (flags & FUZZ_SHM_BAD_FD) {
        FUZZ_CHECK(pipe(pipefd) == 0);           /* open, but not a segment */
        snprintf((char *)rec + 64, DIST__SHM_NAME, "/proc/%d/fd/%d", (int)getpid(), pipefd[0]);
    } else {
        memcpy(rec + 64, f.name, DIST__SHM_NAME);
    }
    memset(&e, 0, sizeof e);
    memset(&p, 0, sizeof p);
    p.rank = 1;
    p.fd = DIST__NO_SOCKET;
    ok = dist__shm_map_peer(&e, &p, rec);
    FUZZ_CHECK(ok == 0 || ok == 1);
    if (ok) {
        dist__shm_link *l = p.shm;
        uint8_t *seg = (uint8_t *)l->peer_seg, *ring = (uint8_t *)l->tx_ring;
        uint64_t rs = l->ring_size;
        uint8_t probe[8];
        dist__iov iov;
        dist__iov_set(&iov, probe, sizeof probe);
        FUZZ_CHECK(rs >= 4096 && (rs & (rs - 1)) == 0);
        FUZZ_CHECK(ring >= seg + DIST__SHM_HDR && ring + sizeof(dist__ring) + rs <= seg + l->peer_seg_size);
        FUZZ_CHECK(l->coll_area >= seg + DIST__SHM_HDR &&
                   l->coll_area + 4 * (size_t)DIST_SHM_COLL_BYTES <= seg + l->peer_seg_size);
        FUZZ_CHECK(l->fast_area >= l->coll_area + 4 * (size_t)DIST_SHM_COLL_BYTES &&
                   l->fast_area + DIST__FAST_AREA <= seg + l->peer_seg_size);
        FUZZ_CHECK(l->peer_seg_size <= file_size);   /* every page of the mapping is backed */
        FUZZ_CHECK(l->peer_hdr == (dist__shm_hdr *)seg && l->pid == (int)getpid());
        /* what the engine does first with a peer's ring and area */
        memset(probe, 0x42, sizeof probe);
        l->tx_ring->head = l->tx_ring->tail = 0;
        FUZZ_CHECK(dist__ring_write(l->tx_ring, rs, &iov, 1) == sizeof probe);
        l->coll_area[0] = 1;
        l->coll_area[4 * (size_t)DIST_SHM_COLL_BYTES - 1] = 1;
        dist__shm_link_free(&p);
    } else {
        FUZZ_CHECK(p.shm == NULL);
    }
    dist__shm_unmap(own, file_size);
    dist__shm_unname(&f);
    if (pipefd[0] >= 0) { close(pipefd[0]); close(pipefd[1]); }
}

/* A ring whose control words a peer has scribbled on. */
static void ring_garbage(const uint8_t *w, size_t n) {
    uint64_t size = (uint64_t)1 << (8 + (w[0] & 15));
    size_t cap = sizeof(dist__ring) + (size_t)size;
    dist__ring *r = (dist__ring *)malloc(cap);
    uint8_t buf[300];
    dist__iov iov[2];
    int64_t used;
    size_t got, put;
    FUZZ_CHECK(r != NULL);
    memset(r, 0, cap);
    r->head = dist__get64(w + 1);
    r->tail = dist__get64(w + 9);
    used = dist__ring_used(r, size);
    FUZZ_CHECK(used >= -1 && used <= (int64_t)size);
    got = dist__ring_read(r, size, buf, DIST__MIN(sizeof buf, (size_t)w[17] + 1));
    FUZZ_CHECK(got <= DIST__MIN(sizeof buf, (size_t)w[17] + 1));
    FUZZ_CHECK(used >= 0 || got == 0);
    dist__iov_set(&iov[0], w + 18, n - 18);
    dist__iov_set(&iov[1], buf, (size_t)w[17]);
    put = dist__ring_write(r, size, iov, 2);
    FUZZ_CHECK(put <= n - 18 + (size_t)w[17] && put <= size);
    free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t rec[FUZZ_SHM_REC_BYTES];
    size_t file_size, nrec, nhead;
    const uint8_t *b;
    if (size < 3) return 0;
    file_size = (size_t)dist__get16(data + 1) * 256;
    b = data + 3; size -= 3;
    memset(rec, 0, sizeof rec);
    nrec = DIST__MIN(size, (size_t)40);     /* the fields of a B record; the rest is zero */
    memcpy(rec, b, nrec);
    b += nrec; size -= nrec;
    nhead = DIST__MIN(size, sizeof(dist__shm_hdr));
    map_peer(data[0], file_size, rec, b, nhead);
    if (size >= 18) ring_garbage(b, size);
    return 0;
}
