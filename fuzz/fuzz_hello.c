/* fuzz/fuzz_hello.c - the handshake: a peer's hello and proof.

   Every input goes through the pure decoders: dist__hello_prefix_check on
   every prefix, dist__hello_decode (a hello that decodes re-encodes to the
   same bytes, with every field within the limits the decoder claims), and
   dist__proof_check with and without a secret (a proof made by
   dist__proof holds, the fuzzed one is refused with the reason that fits
   the flags); reasons end within the buffer they were given.  Then, as
   byte 0 says, the same bytes are
   - the peer's side of a mesh connection: dist__mesh_handshake, fed in
     pieces as poll delivers them;
   - the store's side of a rank's hello exchange: dist__store_hello_exchange,
     reading from a socket.
   With FUZZ_HELLO_ASSIST the harness makes the peer's proof valid (after
   the mesh hello; for the store, a thread answers the rank's hello with
   the input's hello and a valid proof), so the checks after the proof are
   reached too.  Everything else runs on the fuzzer's thread.  Layout:
   fuzz/fuzz.h. */
#define FUZZ_TARGET
#include "fuzz.h"
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <sys/socket.h>

static void fuzz_log(dist_log_level level, const char *msg, void *user) {
    (void)level; (void)user;
    FUZZ_CHECK_STR(msg, 512);
}

/* A reason buffer: `cap` bytes offered, the rest must stay untouched. */
#define WHY_BYTES 400
static char why_blank[WHY_BYTES];
static void why_reset(char *why) {
    if (!why_blank[0]) memset(why_blank, 0x5a, WHY_BYTES);
    memcpy(why, why_blank, WHY_BYTES);
}
static void why_check(const char *why, size_t cap) {
    FUZZ_CHECK_STR(why, cap);
    FUZZ_CHECK(memcmp(why + cap, why_blank, WHY_BYTES - cap) == 0);
}
static void why_untouched(const char *why) { FUZZ_CHECK(memcmp(why, why_blank, WHY_BYTES) == 0); }

static void check_hello_fields(const dist__hello *h) {
    FUZZ_CHECK(h->magic == DIST__MAGIC);
    FUZZ_CHECK(h->version == DIST__PROTOCOL_VERSION);
    FUZZ_CHECK(h->purpose == DIST__PURPOSE_MESH || h->purpose == DIST__PURPOSE_STORE);
    FUZZ_CHECK(h->world >= 1 && h->world <= DIST__MAX_WORLD);
    FUZZ_CHECK(h->rank >= 0 && h->rank < h->world);
}

/* This side's hello, deterministic (the library's has a random nonce). */
static void my_hello(uint8_t *b, int purpose, int rank, int world, const dist__key *key) {
    dist__hello h;
    memset(&h, 0, sizeof h);
    h.magic = DIST__MAGIC; h.version = DIST__PROTOCOL_VERSION; h.purpose = (uint16_t)purpose;
    h.job = FUZZ_HELLO_JOB; h.rank = rank; h.world = world;
    h.flags = key->set ? DIST__HELLO_SECRET : 0;
    for (int i = 0; i < 32; i++) h.nonce[i] = (uint8_t)(i * 7 + 1);
    dist__hello_encode(&h, b);
}

static void pure_decoders(const uint8_t *b, size_t n, size_t cap) {
    char why[WHY_BYTES];
    int prefix_failed = 0;
    /* prefixes: once refused, every longer prefix is refused too */
    for (size_t k = 0; k <= n && k <= DIST__HELLO_SIZE; k++) {
        int r;
        why_reset(why);
        r = dist__hello_prefix_check(b, k, why, cap);
        FUZZ_CHECK(r == 0 || r == -1);
        if (r == 0) { FUZZ_CHECK(!prefix_failed); why_untouched(why); }
        else { why_check(why, cap); prefix_failed = 1; }
    }
    if (n >= DIST__HELLO_SIZE) {
        dist__hello h, h2;
        uint8_t enc[DIST__HELLO_SIZE];
        int r;
        why_reset(why);
        r = dist__hello_decode(b, &h, why, cap);
        FUZZ_CHECK(r == 0 || r == -1);
        if (r == 0) {
            FUZZ_CHECK(!prefix_failed);           /* the prefix check agrees with the whole */
            check_hello_fields(&h);
            dist__hello_encode(&h, enc);
            FUZZ_CHECK(memcmp(enc, b, 64) == 0);  /* bytes 64..79 are reserved, sent as zero */
            why_reset(why);
            FUZZ_CHECK(dist__hello_decode(enc, &h2, why, cap) == 0);
            FUZZ_CHECK(h.magic == h2.magic && h.version == h2.version && h.purpose == h2.purpose &&
                       h.job == h2.job && h.rank == h2.rank && h.world == h2.world && h.flags == h2.flags &&
                       h.status == h2.status && memcmp(h.nonce, h2.nonce, 32) == 0);
        } else {
            why_check(why, cap);
            FUZZ_CHECK(cap == 1 || why[0] != 0);
        }
    }
    if (n >= DIST__HELLO_SIZE + DIST__PROOF_SIZE) {
        const uint8_t *peer = b, *proof = b + DIST__HELLO_SIZE;
        int peer_has = (dist__get32(peer + 24) & DIST__HELLO_SECRET) != 0;
        for (int s = 0; s < 2; s++) {
            dist__key key;
            uint8_t mine[DIST__HELLO_SIZE], good[DIST__PROOF_SIZE];
            dist__key_from(s ? FUZZ_SECRET : NULL, &key);
            my_hello(mine, DIST__PURPOSE_MESH, 0, 2, &key);
            {   /* one role per input: the proofs cost a few SHA-256 blocks each */
                int role = b[2] & 1;
                char rc = role ? 'A' : 'C';
                int r;
                why_reset(why);
                r = dist__proof_check(&key, rc, peer, mine, proof, why, cap);
                dist__proof(&key, rc, peer, mine, good);
                FUZZ_CHECK(r == (memcmp(good, proof, 32) == 0 ? 0 : -1));
                if (r != 0) {
                    why_check(why, cap);
                    if (cap >= 100) {  /* the reason names the side that lacks the secret */
                        if (peer_has && !key.set) FUZZ_CHECK(strstr(why, "this job has none") != NULL);
                        else if (!peer_has && key.set) FUZZ_CHECK(strstr(why, "requires one") != NULL);
                        else FUZZ_CHECK(strstr(why, "does not know") != NULL);
                    }
                }
                /* the right proof holds; the other role's, or one bit off, does not */
                why_reset(why);
                FUZZ_CHECK(dist__proof_check(&key, rc, peer, mine, good, why, cap) == 0);
                why_untouched(why);
                good[b[0] % 32] ^= (uint8_t)(1u << (b[1] % 8));
                FUZZ_CHECK(dist__proof_check(&key, rc, peer, mine, good, why, cap) == -1);
                good[b[0] % 32] ^= (uint8_t)(1u << (b[1] % 8));
                FUZZ_CHECK(dist__proof_check(&key, role ? 'C' : 'A', peer, mine, good, why, cap) == -1);
            }
        }
    }
}

static dist_t *comm_new(int rank, int world, int secret) {
    dist_t *d = (dist_t *)calloc(1, sizeof *d);
    dist__log log;
    memset(&log, 0, sizeof log);
    log.logger.func = fuzz_log; log.level = DIST_LOG_DEBUG; log.rank = rank;
    d->top = d; d->rank = rank; d->world = world; d->timeout_ms = 10; d->job = FUZZ_HELLO_JOB;
    d->store_fd = DIST__NO_SOCKET;
    dist__key_from(secret ? FUZZ_SECRET : NULL, &d->key);
    pthread_mutex_init(&d->err_lock, NULL);
    pthread_mutex_init(&d->store_lock, NULL);
    d->eng = dist__engine_new(rank, world, world, &log);
    FUZZ_CHECK(d->eng != NULL);
    return d;
}

static void comm_free(dist_t *d) {
    dist__engine_free(d->eng);
    dist__close(d->store_fd);
    DIST_FREE(d->store_buf);
    pthread_mutex_destroy(&d->err_lock);
    pthread_mutex_destroy(&d->store_lock);
    free(d);
}

/* The peer's bytes arrive at a pending mesh connection in pieces of
   `chunk`, as dist__mesh_connect reads them. */
static void mesh(unsigned flags, size_t chunk, int rank, const uint8_t *b, size_t n) {
    dist_t *d = comm_new(rank, FUZZ_HELLO_WORLD, (flags & FUZZ_HELLO_SECRET) != 0);
    dist__log_budget lb = { 0, 0, 0 };
    dist__pending_conn pc;
    int sv[2], done = 0, assisted = 0, expect;
    size_t off = 0;
    char why[WHY_BYTES];
    dist__hello h;
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dist__set_nonblocking(sv[0], 1);
    memset(&pc, 0, sizeof pc);
    pc.fd = sv[0];
    /* connector: it called a lower rank; acceptor: a higher one called */
    expect = (flags & FUZZ_HELLO_ACCEPTED) || rank == 0 ? -1 : rank - 1;
    pc.expect_rank = expect;
    my_hello(pc.mine, DIST__PURPOSE_MESH, rank, FUZZ_HELLO_WORLD, &d->key);
    if (flags & FUZZ_HELLO_TAKEN) {   /* the rank it will claim (when it claims the right one) */
        int other = expect >= 0 ? expect : (rank + 1) % FUZZ_HELLO_WORLD;
        d->eng->peers[other].fd = dup(sv[1]);
    }
    while (!done) {
        size_t room = sizeof pc.buf - pc.got, k;
        int r;
        const uint8_t *src;
        uint8_t proof[DIST__PROOF_SIZE];
        if (pc.hello_checked && !assisted && (flags & FUZZ_HELLO_ASSIST) && pc.got == DIST__HELLO_SIZE) {
            /* the proof a peer that knows the secret would send */
            char peer_role = expect >= 0 ? 'A' : 'C';
            dist__proof(&d->key, peer_role, pc.buf, pc.mine, proof);
            src = proof; k = sizeof proof; assisted = 1;
        } else {
            if (off >= n || room == 0) break;
            k = chunk ? DIST__MIN(chunk, n - off) : n - off;
            k = DIST__MIN(k, room);
            if ((flags & FUZZ_HELLO_ASSIST) && pc.got < DIST__HELLO_SIZE) k = DIST__MIN(k, DIST__HELLO_SIZE - pc.got);
            src = b + off; off += k;
        }
        memcpy(pc.buf + pc.got, src, k);
        pc.got += k;
        why_reset(why);
        r = dist__mesh_handshake(d, &pc, dist__now_ms() + 10, why, 200, &lb);
        FUZZ_CHECK(r >= -1 && r <= 1);
        if (r < 0) {
            why_check(why, 200);
            FUZZ_CHECK(pc.fd == DIST__NO_SOCKET);
            done = 1;
        } else if (r > 0) {
            /* in the mesh: its hello and proof held, the slot was free */
            FUZZ_CHECK(pc.fd == DIST__NO_SOCKET && pc.got == DIST__HELLO_SIZE + DIST__PROOF_SIZE);
            FUZZ_CHECK(dist__hello_decode(pc.buf, &h, why, 200) == 0);
            check_hello_fields(&h);
            FUZZ_CHECK(h.purpose == DIST__PURPOSE_MESH && h.job == d->job && h.world == d->world);
            FUZZ_CHECK(expect >= 0 ? h.rank == expect : h.rank > rank);
            FUZZ_CHECK(d->eng->peers[h.rank].fd == sv[0]);
            done = 1;
        } else {
            FUZZ_CHECK(pc.got < DIST__HELLO_SIZE + DIST__PROOF_SIZE);
        }
    }
    dist__close(pc.fd);   /* still pending (the engine owns an accepted one) */
    dist__close(sv[1]);
    comm_free(d);
}

/* The store's side when the harness assists: it knows the secret, so it
   reads the rank's hello and sends the input's hello with a valid proof
   over both (in place of the input's bytes 80..111), then the rest. */
typedef struct store_side { int fd; const uint8_t *b; size_t n; const dist__key *key; } store_side;

static void *store_side_run(void *arg) {
    store_side *st = (store_side *)arg;
    uint8_t mine[DIST__HELLO_SIZE], proof[DIST__PROOF_SIZE];
    int64_t deadline = dist__now_ms() + 1000;
    if (dist__io_all(st->fd, mine, sizeof mine, 0, deadline) == 0 &&
        dist__io_all(st->fd, (void *)st->b, DIST__MIN(st->n, (size_t)DIST__HELLO_SIZE), 1, deadline) == 0 &&
        st->n >= DIST__HELLO_SIZE) {
        dist__proof(st->key, 'A', st->b, mine, proof);
        if (dist__io_all(st->fd, proof, sizeof proof, 1, deadline) == 0 && st->n > DIST__HELLO_SIZE + DIST__PROOF_SIZE)
            dist__io_all(st->fd, (void *)(st->b + DIST__HELLO_SIZE + DIST__PROOF_SIZE),
                         st->n - DIST__HELLO_SIZE - DIST__PROOF_SIZE, 1, deadline);
    }
    shutdown(st->fd, SHUT_WR);
    return NULL;
}

/* The store's bytes, read by a rank saying hello to it. */
static void store_client(unsigned flags, int rank, const uint8_t *b, size_t n) {
    dist_t *d = comm_new(rank, FUZZ_HELLO_WORLD, (flags & FUZZ_HELLO_SECRET) != 0);
    dist__setup s;
    int sv[2], refused = -1, dropped = -1;
    dist_result r;
    store_side st;
    pthread_t helper;
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dist__set_nonblocking(sv[0], 1);
    dist__set_nonblocking(sv[1], 1);
    st.fd = sv[1]; st.b = b; st.n = n; st.key = &d->key;
    if (flags & FUZZ_HELLO_ASSIST) {
        FUZZ_CHECK(pthread_create(&helper, NULL, store_side_run, &st) == 0);
    } else {
        /* what does not fit is not sent: the exchange then ends at the close */
        for (size_t off = 0; off < n;) {
            ssize_t w = send(sv[1], b + off, n - off, MSG_NOSIGNAL);
            if (w <= 0) break;
            off += (size_t)w;
        }
        shutdown(sv[1], SHUT_WR);
    }
    d->store_fd = sv[0];
    memset(&s, 0, sizeof s);
    s.method = 'e'; s.rank = rank; s.world = FUZZ_HELLO_WORLD; s.timeout_ms = 10; s.listen_fd = DIST__NO_SOCKET;
    snprintf(s.host, sizeof s.host, "store.example");
    s.key = d->key;
    dist__thread_error[0] = 0;
    r = dist__store_hello_exchange(d, &s, dist__now_ms() + 10, &refused, &dropped);
    if (flags & FUZZ_HELLO_ASSIST) pthread_join(helper, NULL);
    FUZZ_CHECK(r == DIST_OK || r == DIST_ERR_INIT);
    FUZZ_CHECK(refused == 0 || refused == 1);
    FUZZ_CHECK(dropped == 0 || dropped == 1);
    FUZZ_CHECK(!(refused && dropped));          /* a refusal is read, not a drop to call again after */
    FUZZ_CHECK_STR(dist__thread_error, sizeof dist__thread_error);
    if (r != DIST_OK) FUZZ_CHECK(dist__thread_error[0] != 0);
    if (refused) FUZZ_CHECK(r == DIST_ERR_INIT && strstr(dist__thread_error, "refused this process") != NULL);
    if (r == DIST_OK) FUZZ_CHECK(n >= 2 * DIST__HELLO_SIZE + DIST__PROOF_SIZE);   /* hello, proof, verdict */
    dist__close(sv[1]);
    comm_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned flags;
    size_t chunk, n;
    int rank;
    const uint8_t *b;
    if (size < 3) return 0;
    flags = data[0]; chunk = data[1]; rank = data[2] % FUZZ_HELLO_WORLD;
    b = data + 3; n = size - 3;
    /* the reason buffer's size: 1, small, ample */
    pure_decoders(b, n, (size_t[]){ 1, 24, 300, 300 }[chunk % 4]);
    if (flags & FUZZ_HELLO_MESH) mesh(flags, chunk, rank, b, n);
    if (flags & FUZZ_HELLO_STORE) store_client(flags, rank, b, n);
    return 0;
}
