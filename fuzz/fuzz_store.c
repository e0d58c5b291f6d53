/* fuzz/fuzz_store.c - the store's protocol, both ends.

   Server (byte 0 without FUZZ_STORE_CLIENT): a store of world size 1..4
   with two client connections, built by hand (no thread, no sockets), gets
   the input's records appended to a connection's input buffer, as
   dist__store_read does, and runs dist__store_serve on it: the hello
   (dist__hello_prefix_check on a partial one, dist__hello_decode), the
   proof, then requests (dist__store_parts, dist__store_execute).  Each
   connection starts either before the handshake or past it; connection
   0 may get a valid proof from the harness after its hello, so requests
   from a rank that just joined are fuzzed too.  Parked requests are served
   again as the store thread does, and at the end their deadline passes.
   Every reply the store queues is parsed back and must be well formed.

   Client (FUZZ_STORE_CLIENT): the input's bytes are what the store answers
   (through a socketpair, then the end of the stream) to one of the public
   store calls, or to the rendezvous's questions (dist__rendezvous_fatal,
   dist__rendezvous_timeout): dist__store_call parses them, and the caller
   copies values into fixed-size buffers.  Layout: fuzz/fuzz.h. */
#define FUZZ_TARGET
#include "fuzz.h"
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <sys/socket.h>

static void fuzz_log(dist_log_level level, const char *msg, void *user) {
    (void)level; (void)user;
    FUZZ_CHECK_STR(msg, 512);
}

/* ---- server ----------------------------------------------------------------- */

#define NCONN 2

static dist__store_server *server_new(int world, int secret) {
    dist__store_server *sv = (dist__store_server *)DIST_MALLOC(sizeof *sv);
    FUZZ_CHECK(sv != NULL);
    memset(sv, 0, sizeof *sv);
    sv->listen_fd = DIST__NO_SOCKET;
    sv->wake.rfd = sv->wake.wfd = -1;
    sv->world = world;
    sv->timeout_ms = 10;
    dist__key_from(secret ? FUZZ_SECRET : NULL, &sv->key);
    sv->log.logger.func = fuzz_log; sv->log.level = DIST_LOG_DEBUG; sv->log.rank = 0;
    pthread_mutex_init(&sv->lock, NULL);
    sv->joined = (unsigned char *)calloc((size_t)world, 1);
    sv->bad_claim_ms = (int64_t *)calloc((size_t)world, sizeof(int64_t));
    sv->conns = (dist__store_conn *)calloc(NCONN, sizeof *sv->conns);
    sv->nconns = sv->cap_conns = NCONN;
    for (int i = 0; i < NCONN; i++) {
        dist__store_conn *c = &sv->conns[i];
        c->fd = DIST__NO_SOCKET;     /* the peer's address is then "?" */
        c->rank = -1;
    }
    return sv;
}

static void conn_join(dist__store_server *sv, dist__store_conn *c, int rank) {
    if (sv->joined[rank]) return;
    sv->joined[rank] = 1;
    c->rank = rank;
    c->hello_done = 1;
}

/* The replies a connection has queued, parsed as a rank would.  *stage:
   0 the store's hello and proof come next, 1 its verdict on our proof,
   2 responses, 3 nothing (refused).  A refusal is a hello with a non-zero
   status and a reason, in place of either hello. */
static void check_output(dist__store_conn *c, int *stage) {
    size_t off = c->out_off;
    FUZZ_CHECK(c->out_off <= c->out_len && c->out_len <= c->out_cap);
    while (off < c->out_len) {
        size_t left = c->out_len - off;
        const uint8_t *p = c->out + off;
        if (*stage == 0 || *stage == 1) {
            dist__hello h;
            char why[200];
            FUZZ_CHECK(left >= DIST__HELLO_SIZE);
            FUZZ_CHECK(dist__hello_decode(p, &h, why, sizeof why) == 0 && h.purpose == DIST__PURPOSE_STORE);
            off += DIST__HELLO_SIZE;
            if (h.status != 0) {
                uint32_t rl;
                FUZZ_CHECK(c->out_len - off >= 4);
                rl = dist__get32(c->out + off);
                FUZZ_CHECK(c->out_len - off - 4 == rl && rl > 0);
                FUZZ_CHECK(c->closing);
                *stage = 3;
                return;
            }
            if (*stage == 0) {
                FUZZ_CHECK(c->out_len - off >= DIST__PROOF_SIZE);
                off += DIST__PROOF_SIZE;
            }
            (*stage)++;
        } else if (*stage == 2) {
            uint32_t body, has_val;
            FUZZ_CHECK(left >= DIST__STORE_RESP_HDR);
            body = dist__get32(p);
            has_val = dist__get32(p + 8);
            FUZZ_CHECK(has_val <= 1 && left >= 4 + (size_t)body);
            if (has_val) FUZZ_CHECK(body >= DIST__STORE_RESP_HDR && dist__get32(p + 20) == body - DIST__STORE_RESP_HDR);
            else FUZZ_CHECK(body == DIST__STORE_RESP_HDR - 4);
            off += 4 + (size_t)body;
        } else {
            FUZZ_CHECK(0);   /* bytes after a refusal */
        }
    }
}

static void check_server(dist__store_server *sv) {
    FUZZ_CHECK(sv->nkv >= 0 && sv->nkv <= sv->cap_kv);
    for (int i = 0; i < sv->nkv; i++) {
        size_t kl = strlen(sv->kv[i].key);
        FUZZ_CHECK(kl >= 1 && kl <= DIST__MAX_KEY && sv->kv[i].vlen <= DIST__MAX_VALUE + 32);
        for (int j = 0; j < i; j++) FUZZ_CHECK(strcmp(sv->kv[i].key, sv->kv[j].key) != 0);   /* one entry per key */
    }
    FUZZ_CHECK_STR(sv->fatal, sizeof sv->fatal);
    for (int i = 0; i < sv->nconns; i++) {
        dist__store_conn *c = &sv->conns[i];
        FUZZ_CHECK(c->in_len <= c->in_cap || c->in_cap == 0);
        /* a rank that joined, or a newcomer of this launch (dist_grow: no rank yet) */
        if (c->hello_done) FUZZ_CHECK(c->rank == -1 || (c->rank >= 0 && c->rank < sv->world && sv->joined[c->rank]));
        if (c->proof_due) FUZZ_CHECK(!c->hello_done);
    }
}

/* Bytes for connection `c`, as dist__store_read appends them. */
static void deliver(dist__store_server *sv, dist__store_conn *c, const uint8_t *b, size_t n) {
    size_t cap = c->in_cap;
    if (c->closing) return;
    if (dist__grow((void **)&c->in, &cap, c->in_len + n + 1, 1) != 0) { c->closing = 1; return; }
    c->in_cap = cap;
    memcpy(c->in + c->in_len, b, n);
    c->in_len += n;
    if (c->in_len > DIST__STORE_MAX_BODY + 4 + 65536) { c->closing = 1; return; }
    if (!c->parked) dist__store_serve(sv, c);
}

/* One turn of the store thread after reads: parked requests again, and
   what was queued goes out (here: checked and dropped). */
static void turn(dist__store_server *sv, int *stage) {
    for (int i = 0; i < sv->nconns; i++) {
        dist__store_conn *c = &sv->conns[i];
        if (c->parked) dist__store_serve(sv, c);
        check_output(c, &stage[i]);
        c->out_len = c->out_off = 0;
    }
    check_server(sv);
}

/* The proof of a rank that knows the secret, after its hello. */
static void assist_proof(dist__store_server *sv, dist__store_conn *c, int *assisted) {
    uint8_t proof[DIST__PROOF_SIZE];
    if (*assisted || !c->proof_due || c->in_len != 0) return;
    dist__proof(&sv->key, 'C', c->peer_hello, c->my_hello, proof);
    *assisted = 1;
    deliver(sv, c, proof, sizeof proof);
}

static void server(unsigned flags, int world, const uint8_t *b, size_t n) {
    dist__store_server *sv = server_new(world, (flags & FUZZ_STORE_SECRET) != 0);
    int stage[NCONN] = { 0, 0 };
    int assisted = 0;
    size_t off = 0;
    if (flags & FUZZ_STORE_C0_JOINED) { conn_join(sv, &sv->conns[0], 0); stage[0] = 2; }
    if (flags & FUZZ_STORE_C1_JOINED) {
        int r = 1 % world;
        if (!sv->joined[r]) { conn_join(sv, &sv->conns[1], r); stage[1] = 2; }
    }
    while (off < n) {
        unsigned rec = b[off++];
        int ci = (rec & 0x80) ? 1 : 0;
        size_t len = rec & 0x7f;
        dist__store_conn *c = &sv->conns[ci];
        int assist = ci == 0 && (flags & FUZZ_STORE_ASSIST);
        if (len == 0 || len > n - off) len = n - off;
        if (assist && !assisted && !c->hello_done && !c->proof_due && c->in_len + len > DIST__HELLO_SIZE) {
            /* the hello alone first: its proof goes between */
            size_t k = DIST__HELLO_SIZE - DIST__MIN(c->in_len, (size_t)DIST__HELLO_SIZE);
            deliver(sv, c, b + off, k);
            off += k; len -= k;
            assist_proof(sv, c, &assisted);
        }
        deliver(sv, c, b + off, len);
        off += len;
        if (assist) assist_proof(sv, c, &assisted);
        turn(sv, stage);
    }
    /* the parked requests' time runs out (and then that of the requests
       behind them, which may park in turn) */
    for (int round = 0;; round++) {
        int parked = 0;
        for (int i = 0; i < sv->nconns; i++)
            if (sv->conns[i].parked) { sv->conns[i].park_deadline = dist__now_ms() - 1; parked = 1; }
        if (!parked) break;
        FUZZ_CHECK(round < 10000);   /* each round answers a request */
        turn(sv, stage);
    }
    dist__store_server_free(sv);
}

/* ---- client ----------------------------------------------------------------- */

static dist_t *client_new(int fd) {
    dist_t *d = (dist_t *)calloc(1, sizeof *d);
    d->top = d; d->rank = 1; d->world = 2; d->timeout_ms = 10;
    d->store_fd = fd;
    pthread_mutex_init(&d->err_lock, NULL);
    pthread_mutex_init(&d->store_lock, NULL);
    return d;
}

static void client(int call, const uint8_t *b, size_t n) {
    int sv[2];
    dist_t *d;
    dist_result r = DIST_OK;
    uint8_t buf[8];
    size_t len = 12345;
    int64_t num = 0;
    int flag = -7;
    const char *keys[3] = { "alpha", "beta", "gamma" };
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dist__set_nonblocking(sv[0], 1);
    dist__set_nonblocking(sv[1], 1);
    for (size_t off = 0; off < n;) {
        ssize_t w = send(sv[1], b + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);   /* the requests still go in; the replies end here */
    d = client_new(sv[0]);
    dist__thread_error[0] = 0;
    switch (call) {
    case FUZZ_CALL_SET: r = dist_store_set(d, "alpha", "value", 5); break;
    case FUZZ_CALL_GET:
        r = dist_store_get(d, "alpha", buf, sizeof buf, &len);
        if (r == DIST_OK || r == DIST_ERR_TRUNCATED) FUZZ_CHECK(len <= DIST__MAX_VALUE + 64);
        if (r == DIST_OK) FUZZ_CHECK(len <= sizeof buf);
        break;
    case FUZZ_CALL_ADD: r = dist_store_add(d, "alpha", 3, &num); break;
    case FUZZ_CALL_WAIT: r = dist_store_wait(d, keys, 3, 5); break;
    case FUZZ_CALL_CHECK:
        r = dist_store_check(d, keys, 2, &flag);
        FUZZ_CHECK(r == DIST_OK || flag == 0);
        break;
    case FUZZ_CALL_CAS:
        r = dist_store_compare_set(d, "alpha", "old", 3, "new", 3, buf, sizeof buf, &len);
        if (r == DIST_OK) FUZZ_CHECK(len <= sizeof buf);
        break;
    case FUZZ_CALL_DELETE:
        r = dist_store_delete(d, "alpha", &flag);
        if (r != DIST_OK) FUZZ_CHECK(flag == 0);
        break;
    default:
        /* what dist_init asks when the job may not form, or timed out */
        r = dist__rendezvous_fatal(d, dist__now_ms());
        if (r == DIST_OK) r = dist__rendezvous_timeout(d, "the fuzzer");
        break;
    }
    FUZZ_CHECK(r <= 0 && r > -100);
    FUZZ_CHECK_STR(d->err, sizeof d->err);
    FUZZ_CHECK_STR(dist__thread_error, sizeof dist__thread_error);
    if (r != DIST_OK) FUZZ_CHECK(dist__thread_error[0] != 0);
    dist__close(sv[0]);
    dist__close(sv[1]);
    DIST_FREE(d->store_buf);
    pthread_mutex_destroy(&d->err_lock);
    pthread_mutex_destroy(&d->store_lock);
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (data[0] & FUZZ_STORE_CLIENT) client(data[1] % FUZZ_CALL_COUNT, data + 2, size - 2);
    else server(data[0], 1 + (data[1] & 3), data + 2, size - 2);
    return 0;
}
