/* fuzz/fuzz_frame.c - frames from a peer, through the engine's receive path.

   The stream after the input's small preamble (layout: fuzz/fuzz.h) is
   what rank 1 sends to rank 0 of a world of FUZZ_FRAME_WORLD, delivered
   the way the engine meets it: over a TCP connection (a socketpair, in
   writes of a fuzzed size, then maybe the peer's close) or over a
   shared-memory ring (starting anywhere in the ring, so frames cross its
   end; maybe the doorbell socket's end after it), and read by
   dist__peer_read, the function the progress engine calls for a peer with
   bytes (the transport's `readable` for the end of a shared-memory peer),
   followed, as the engine does, by dist__peer_pull (copies by reference
   from the sender's memory) and dist__peer_write (what the frames made
   this side owe: CTS, ACK, CREDIT, refusals, pulled messages).  So every
   byte goes through dist__frame_decode, announcements and their payload
   pieces, the flow-control budget, the abort notice (dist__on_abort), the
   collective descriptor checks (dist__desc_differs through
   dist__coll_mismatch, dist__coll_check_early and dist__coll_check_late),
   the match index (posted receives, unexpected messages), combining
   receives (dist__rx_reduce_step), and the control frames about this
   side's own sends (CTS, ACK, CANCEL, CREDIT, PULL).  Receives posted
   after the stream meet the unexpected messages (dist__post_recv,
   dist__take).

   Each receive's buffer is exactly its size, so ASan sees any byte a frame
   makes the engine write past it.  The first 40 bytes of the stream also
   go through dist__frame_decode directly: a header that decodes
   re-encodes to the same bytes and its fields are within the claimed
   limits. */
#define FUZZ_TARGET
#define FUZZ_ALLOC_CAP ((size_t)16 << 20)   /* a frame may claim up to 1 TiB */
#include "fuzz.h"
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>

static void fuzz_log(dist_log_level level, const char *msg, void *user) {
    (void)level; (void)user;
    FUZZ_CHECK_STR(msg, 512);
}

/* The memory a by-reference frame may point at (FUZZ_REF_ADDR). */
static void ref_region(void) {
    static int done;
    void *m;
    if (done) return;
    done = 1;
    m = mmap((void *)(uintptr_t)FUZZ_REF_ADDR, FUZZ_REF_BYTES, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED) return;
    if ((uint64_t)(uintptr_t)m != FUZZ_REF_ADDR) { munmap(m, FUZZ_REF_BYTES); return; }
    for (size_t i = 0; i < FUZZ_REF_BYTES; i++) ((uint8_t *)m)[i] = (uint8_t)i;
}

static void check_frame(const dist__frame *f) {
    FUZZ_CHECK(f->kind > DIST__FRAME_NONE && f->kind < DIST__FRAME_KINDS);
    FUZZ_CHECK(f->nbytes <= DIST__MAX_MESSAGE);
    FUZZ_CHECK(!f->flags || f->kind == DIST__FRAME_DATA || f->kind == DIST__FRAME_COLL);
    if (f->kind == DIST__FRAME_DATA) {
        FUZZ_CHECK(f->dtype < DIST_DTYPE_COUNT && f->count * dist_dtype_size((dist_dtype)f->dtype) == f->nbytes);
        FUZZ_CHECK(f->tag >= 0 && f->tag <= INT_MAX);
    } else if (f->kind == DIST__FRAME_COLL) {
        FUZZ_CHECK(f->dtype < DIST_DTYPE_COUNT && f->op < DIST_OP_COUNT);
        FUZZ_CHECK((f->coll & 15) > DIST__COLL_NONE && (f->coll & 15) < DIST__COLL_KINDS);
        FUZZ_CHECK(f->nbytes % dist_dtype_size((dist_dtype)f->dtype) == 0 && f->tag >= 0 && f->count <= DIST__MAX_MESSAGE);
    } else if (f->kind == DIST__FRAME_ABORT) {
        FUZZ_CHECK(f->nbytes <= DIST__MAX_ABORT_TEXT && f->tag >= 0);
    } else if (f->kind != DIST__FRAME_PAYLOAD) {
        FUZZ_CHECK(f->nbytes == 0);
    }
}

static void pure_decode(const uint8_t *b, size_t n) {
    dist__frame f, g;
    uint8_t enc[DIST__HDR_MAX];
    char why[200];
    if (n < DIST__HDR_SIZE) return;
    for (size_t cap = 1; cap <= sizeof why; cap += sizeof why - 1) {
        memset(why, 0x5a, sizeof why);
        if (dist__frame_decode(b, &f, why, cap) != 0) {
            FUZZ_CHECK_STR(why, cap);
            for (size_t i = cap; i < sizeof why; i++) FUZZ_CHECK(why[i] == 0x5a);
            continue;
        }
        check_frame(&f);
        if (n >= dist__frame_size(&f)) {        /* its trailers */
            if (dist__frame_trailer(b, &f, why, cap) != 0) FUZZ_CHECK_STR(why, cap);
            else if (f.flags & DIST__FRAME_STAMP)
                FUZZ_CHECK(f.kind == DIST__FRAME_COLL && f.st_rank >= 0 && f.st_rank < DIST__MAX_WORLD && f.st_first <= f.st_last);
        }
        dist__frame_encode(&f, enc);
        FUZZ_CHECK(memcmp(enc, b, DIST__HDR_SIZE) == 0);
        FUZZ_CHECK(dist__frame_decode(enc, &g, why, cap) == 0);
        FUZZ_CHECK(memcmp(&f, &g, offsetof(dist__frame, root) + sizeof f.root) == 0 || (f.kind == g.kind &&
                   f.dtype == g.dtype && f.op == g.op && f.coll == g.coll && f.comm == g.comm && f.tag == g.tag &&
                   f.count == g.count && f.nbytes == g.nbytes && f.root == g.root));
    }
    /* two collective descriptors compared as a receive compares them */
    if (n >= 2 * DIST__HDR_SIZE && dist__frame_decode(b, &f, why, sizeof why) == 0 &&
        dist__frame_decode(b + DIST__HDR_SIZE, &g, why, sizeof why) == 0 &&
        f.kind == DIST__FRAME_COLL && g.kind == DIST__FRAME_COLL) {
        dist_t d;
        int differs;
        memset(&d, 0, sizeof d);
        d.rank = 0; d.world = 2;
        memset(why, 0x5a, sizeof why);
        differs = dist__desc_differs(&d, 1, &f, &g, b[0] & 1, why, sizeof why);
        FUZZ_CHECK(differs == 0 || differs == 1);
        if (differs) FUZZ_CHECK_STR(why, sizeof why);
        FUZZ_CHECK(dist__desc_differs(&d, 1, &f, &f, 1, why, sizeof why) == 0);
    }
}

/* ---- the engine of rank 0 and its peer rank 1 ---------------------------- */

typedef struct recv_spec {
    unsigned bits;
    dist_req_t *r;
    uint8_t *buf;
    size_t bytes;
} recv_spec;

typedef struct harness {
    dist__engine *e;
    dist__peer *p;
    dist_t *world, *group;
    int sv[2];
    uint8_t *rx_mem, *tx_mem;   /* shared memory: the rings */
    dist__shm_hdr *peer_hdr;
    dist_req_t *sends[4];
    uint8_t send_buf[3][512];
} harness;

#define RING_BYTES ((uint64_t)1 << 13)

static dist_t *comm_new(dist__engine *e, uint32_t id, int n, const int *members) {
    dist_t *d = (dist_t *)calloc(1, sizeof *d);
    d->eng = e; d->top = d; d->id = id; d->rank = 0; d->world = n; d->timeout_ms = 10;
    d->store_fd = DIST__NO_SOCKET;
    if (members) {
        d->members = (int *)malloc(sizeof(int) * (size_t)n);
        d->group_of = (int *)malloc(sizeof(int) * FUZZ_FRAME_WORLD);
        for (int i = 0; i < FUZZ_FRAME_WORLD; i++) d->group_of[i] = -1;
        for (int g = 0; g < n; g++) { d->members[g] = members[g]; d->group_of[members[g]] = g; }
    }
    FUZZ_CHECK(dist__comm_register(d) == DIST_OK);
    return d;
}

static void comm_free(dist_t *d) {
    free(d->members); free(d->group_of); free(d);
}

/* A collective's descriptor: all_reduce of 4 x float32, sum, root 0. */
static void coll_desc(dist__frame *f) {
    memset(f, 0, sizeof *f);
    f->kind = DIST__FRAME_COLL; f->coll = DIST__COLL_ALL_REDUCE | DIST__ALGO_RING << 4;
    f->dtype = DIST_FLOAT32; f->count = 4; f->op = DIST_SUM; f->root = 0;
}

/* A send of ours to rank 1 of `bytes`, tag `tag`. */
static dist_req_t *our_send(harness *h, int i, size_t bytes, int tag) {
    dist_req_t *r = dist__req_alloc(h->e);
    FUZZ_CHECK(r != NULL);
    dist__req_init(h->world, r, DIST__REQ_SEND, bytes, DIST_UINT8, 1, tag);
    r->sbuf = bytes <= sizeof h->send_buf[0] ? h->send_buf[i % 3] : (const uint8_t *)(uintptr_t)FUZZ_REF_ADDR;
    h->sends[i] = r;
    return r;
}

static void setup(harness *h, unsigned flags, unsigned where) {
    dist__log log;
    static const int pair[2] = { 0, 1 };
    memset(h, 0, sizeof *h);
    memset(&log, 0, sizeof log);
    log.logger.func = fuzz_log; log.level = DIST_LOG_DEBUG; log.rank = 0;
    h->e = dist__engine_new(0, FUZZ_FRAME_WORLD, FUZZ_FRAME_WORLD, &log);
    FUZZ_CHECK(h->e != NULL);
    h->e->budget = (flags & FUZZ_FRAME_TIGHT) ? 4096 : (uint64_t)1 << 20;
    h->p = &h->e->peers[1];
    h->p->rx.stage = (uint8_t *)malloc(DIST__STAGE_SIZE);
    h->p->budget = h->p->granted = h->p->credit = 64 << 10;     /* rank 1's first grant to us */
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, h->sv) == 0);
    dist__set_nonblocking(h->sv[0], 1);
    dist__set_nonblocking(h->sv[1], 1);
    h->p->fd = h->sv[0];
    h->e->shm.ntcp = 1;
    if (flags & FUZZ_FRAME_SHM) {
        dist__peer *p = h->p;
        dist__shm_link *l = (dist__shm_link *)calloc(1, sizeof *l);
        uint64_t start = (uint64_t)where * 61 % RING_BYTES;
        h->rx_mem = (uint8_t *)calloc(1, sizeof(dist__ring) + RING_BYTES);
        h->tx_mem = (uint8_t *)calloc(1, sizeof(dist__ring) + RING_BYTES);
        h->peer_hdr = (dist__shm_hdr *)calloc(1, sizeof *h->peer_hdr);
        h->peer_hdr->sleeping = (flags & FUZZ_FRAME_SLEEPING) != 0;
        l->can_read = 1; l->pid = (int)getpid();
        l->rx_ring = (dist__ring *)h->rx_mem; l->tx_ring = (dist__ring *)h->tx_mem;
        l->rx_ring->head = l->rx_ring->tail = start;
        l->peer_hdr = h->peer_hdr;
        l->ring_size = RING_BYTES;
        l->bell = h->sv[0];              /* as the mesh sets it: the doorbell is the connection */
        l->pull = (uint8_t *)malloc(DIST__STAGE_SIZE);
        p->shm = l;
        p->t = &dist__shm_transport;
        p->ref_min = 256;
        h->e->shm.ntcp = 0; h->e->shm.nshm = 1;
    }
    h->world = comm_new(h->e, 0, FUZZ_FRAME_WORLD, NULL);
    h->group = comm_new(h->e, FUZZ_FRAME_GROUP, 2, pair);
    if (flags & FUZZ_FRAME_COLL_STATE) {
        /* collective 3 ended and 4 runs, both with this descriptor (the
           view the receive path reads: dist__view_read) */
        coll_desc(&h->world->active);
        dist__view_begin(h->world, 3);
        dist__view_end(h->world, 3);
        dist__view_begin(h->world, 4);
        h->world->coll_seq = 4;
    }
    if (flags & FUZZ_FRAME_ACK_WAIT) {
        /* an announced send waiting for rank 1 (sid 1: by reference, for
           its ACK; over TCP, for its CTS), a queued one too large for the
           credit left, and a small one it may pull (tag 3) */
        dist_req_t *r = our_send(h, 0, 100000, 0);
        r->by_ref = (flags & FUZZ_FRAME_SHM) != 0;
        r->sid = ++h->p->next_sid;
        r->state = DIST__RS_ANNOUNCED;
        FUZZ_CHECK(dist__rdv_add(h->e, DIST__IX_RDV_SEND, 1, r->sid, &r->link, &r->ixq) == 0);
        r->rdv_counted = 1; h->p->rdv_out++;
        h->p->credit = 600;
        dist__post_send(h->e, our_send(h, 1, 400, 2));
        dist__post_send(h->e, our_send(h, 2, 300, 3));
    }
}

static dist_req_t *post(harness *h, recv_spec *s, const uint8_t *spec) {
    unsigned bits = spec[0];
    dist_t *d = bits & FUZZ_RECV_GROUP ? h->group : h->world;
    dist_dtype dtype = (dist_dtype)(spec[2] % DIST_DTYPE_COUNT);
    size_t count = spec[3], es = dist_dtype_size(dtype);
    dist_req_t *r = dist__req_alloc(h->e);
    FUZZ_CHECK(r != NULL);
    if (bits & FUZZ_RECV_COLL) {
        /* as dist__coll_post: the descriptor, a block of the whole */
        r->comm = d; r->kind = DIST__REQ_RECV; r->peer = 1; r->source = -1;
        r->frame_kind = DIST__FRAME_COLL; r->comm_id = d->id;
        r->tag = spec[1]; r->dtype = dtype; r->count = count;
        r->nbytes = (count - count / 3) * es;
        r->coll = (uint8_t)(1 + ((spec[4] >> 3) & 15) % (DIST__COLL_KINDS - 1)) | (uint8_t)((spec[4] >> 7) << 4);
        r->op = (uint8_t)((spec[4] & 7) % DIST_OP_COUNT);
        r->root = 0;
        r->reduce = bits & FUZZ_RECV_REDUCE ? r->op + 1 : 0;
        r->in_first = (bits & FUZZ_RECV_IN_FIRST) != 0;
    } else {
        dist__req_init(d, r, DIST__REQ_RECV, count, dtype, bits & FUZZ_RECV_ANY ? DIST_ANY_SOURCE : 1, spec[1]);
    }
    s->bits = bits;
    s->bytes = (size_t)r->nbytes;
    s->buf = (uint8_t *)malloc(s->bytes ? s->bytes : 1);
    memset(s->buf, 0x11, s->bytes);
    r->rbuf = s->buf;
    s->r = r;
    dist__post_recv(h->e, r);
    return r;
}

/* What the engine does with a peer after reading: copies by reference,
   sends what it owes; the peer takes it. */
static void after_read(harness *h) {
    dist__peer *p = h->p;
    if (p->fd >= 0 && !dist__list_empty(&p->pullq)) dist__peer_pull(h->e, p);
    if (p->fd >= 0) dist__peer_write(h->e, p);
    if (p->shm) p->shm->tx_ring->head = p->shm->tx_ring->tail;
    {   /* TCP: the frames; shared memory: doorbells */
        uint8_t sink[4096];
        while (recv(h->sv[1], sink, sizeof sink, MSG_DONTWAIT) > 0) {}
    }
}

static void check_peer(harness *h, recv_spec *specs, int nspecs) {
    dist__peer *p = h->p;
    const dist__rx *x = &p->rx;
    FUZZ_CHECK_STR(p->why, sizeof p->why);
    FUZZ_CHECK(x->pos <= x->end && x->end <= DIST__STAGE_SIZE);
    FUZZ_CHECK(x->got <= DIST__HDR_MAX);
    /* what rank 1's messages hold here stays within its budget */
    FUZZ_CHECK(p->held + p->owed <= h->e->budget + DIST__MAX_MESSAGE * (uint64_t)(p->state != DIST__PEER_OK));
    if (x->in_payload && x->req && x->dst) {
        /* the rest of the payload fits in the buffer it goes to */
        for (int i = 0; i < nspecs; i++)
            if (specs[i].r == x->req)
                FUZZ_CHECK(x->dst >= specs[i].buf && (uint64_t)(x->dst - specs[i].buf) + x->left <= specs[i].bytes);
    }
    for (int i = 0; i < nspecs; i++) {
        dist_req_t *r = specs[i].r;
        if (!r) continue;
        if (r->err) FUZZ_CHECK_STR(r->err, DIST__ERRLEN);
        if (r->done == 1 && r->result != DIST_OK) FUZZ_CHECK(r->err && r->err[0] != 0);
        FUZZ_CHECK(r->moved <= r->nbytes);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    harness h;
    recv_spec specs[4];
    int nspecs, iters = 0;
    unsigned flags;
    size_t off, n, chunk;
    const uint8_t *b;
    ref_region();
    if (size < 3) return 0;
    flags = data[0]; chunk = data[1]; nspecs = data[2] & 3;
    if (size < 3 + (size_t)nspecs * FUZZ_FRAME_RECV_SIZE) return 0;
    b = data + 3 + (size_t)nspecs * FUZZ_FRAME_RECV_SIZE;
    n = size - 3 - (size_t)nspecs * FUZZ_FRAME_RECV_SIZE;
    pure_decode(b, n);

    setup(&h, flags, data[1]);
    memset(specs, 0, sizeof specs);
    for (int i = 0; i < nspecs; i++) {
        const uint8_t *spec = data + 3 + (size_t)i * FUZZ_FRAME_RECV_SIZE;
        if (!(spec[0] & FUZZ_RECV_LATE)) post(&h, &specs[i], spec);
    }
    /* the stream, as the engine would meet it */
    for (off = 0; h.p->fd >= 0 && iters < 4096; iters++) {
        size_t put = 0;
        if (off < n) {
            if (h.p->shm) {
                dist__ring *r = h.p->shm->rx_ring;
                dist__iov iov;
                dist__iov_set(&iov, b + off, n - off);
                put = dist__ring_write(r, RING_BYTES, &iov, 1);
                if (put < iov.iov_len) r->producer_waiting = 1;   /* as dist__peer_tx: room, please */
            } else {
                ssize_t w = send(h.sv[1], b + off, chunk ? DIST__MIN(chunk, n - off) : n - off, MSG_NOSIGNAL);
                put = w > 0 ? (size_t)w : 0;
            }
            off += put;
        } else if ((flags & FUZZ_FRAME_EOF) && h.sv[1] >= 0) {
            shutdown(h.sv[1], SHUT_WR);
            if (h.p->shm) {   /* the doorbell socket ends: what the ring holds is read first */
                h.p->t->readable(h.e, h.p);
                after_read(&h);
                check_peer(&h, specs, nspecs);
                break;
            }
        }
        {
            size_t before_pos = h.p->rx.pos, before_end = h.p->rx.end, before_hdr = h.p->rx.got;
            uint64_t before_left = h.p->rx.left;
            uint64_t before_head = h.p->shm ? h.p->shm->rx_ring->head : 0;
            int pulls = !dist__list_empty(&h.p->pullq);
            dist__peer_read(h.e, h.p);
            after_read(&h);
            check_peer(&h, specs, nspecs);
            if (off >= n && put == 0 && before_pos == h.p->rx.pos && before_end == h.p->rx.end &&
                before_hdr == h.p->rx.got && before_left == h.p->rx.left && !pulls &&
                (!h.p->shm || before_head == h.p->shm->rx_ring->head) && iters > 2)
                break;   /* nothing moves any more */
        }
    }
    /* receives posted now meet what arrived unexpectedly */
    for (int i = 0; i < nspecs; i++) {
        const uint8_t *spec = data + 3 + (size_t)i * FUZZ_FRAME_RECV_SIZE;
        if (spec[0] & FUZZ_RECV_LATE) post(&h, &specs[i], spec);
    }
    for (int k = 0; k < 64 && h.p->fd >= 0; k++) { dist__peer_read(h.e, h.p); after_read(&h); }
    check_peer(&h, specs, nspecs);

    /* the engine owns the requests and the peer's descriptors */
    dist__engine_free(h.e);
    FUZZ_CHECK(fcntl(h.sv[0], F_GETFD) == -1 && errno == EBADF);   /* its end of the connection is closed */
    dist__close(h.sv[1]);
    for (int i = 0; i < nspecs; i++) free(specs[i].buf);
    comm_free(h.world);
    comm_free(h.group);
    free(h.rx_mem); free(h.tx_mem); free(h.peer_hdr);   /* (the engine freed the link) */
    return 0;
}
