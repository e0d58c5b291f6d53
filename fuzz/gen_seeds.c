/* fuzz/gen_seeds.c - writes each fuzz target's starting inputs.

   gen_seeds DIR  writes DIR/fuzz_hello/, DIR/fuzz_frame/, DIR/fuzz_store/
   and DIR/fuzz_shm/: a handful of small, valid inputs each (hellos,
   frames, store requests and replies, segment records), made with the
   library's own encoders, so they follow the protocol when it changes.
   The input layouts are in fuzz/fuzz.h.  `make fuzz` builds and runs this
   first. */
#define DIST_IMPLEMENTATION
#include "dist.h"
#include "fuzz.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

/* ---- a byte buffer ------------------------------------------------------- */

typedef struct buf { uint8_t b[16384]; size_t n; } buf;

static void put(buf *o, const void *p, size_t n) {
    if (o->n + n > sizeof o->b) { fprintf(stderr, "gen_seeds: a seed outgrew its buffer\n"); exit(1); }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put8(buf *o, unsigned v) { uint8_t b = (uint8_t)v; put(o, &b, 1); }
static void put32(buf *o, uint32_t v) { uint8_t b[4]; dist__put32(b, v); put(o, b, 4); }
static void put64(buf *o, uint64_t v) { uint8_t b[8]; dist__put64(b, v); put(o, b, 8); }
static void puts_(buf *o, const char *s) { put(o, s, strlen(s)); }
static void reason(buf *o, const char *s) { put32(o, (uint32_t)strlen(s)); puts_(o, s); }   /* a refusal's */

static const char *g_dir;
static int g_count;

static void save(const char *target, const char *name, const buf *o) {
    char path[1024];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", g_dir, target);
    if (mkdir(path, 0777) != 0 && errno != EEXIST) { perror(path); exit(1); }
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, target, name);
    f = fopen(path, "wb");
    if (!f || fwrite(o->b, 1, o->n, f) != o->n || fclose(f) != 0) { perror(path); exit(1); }
    g_count++;
}

/* ---- handshake ------------------------------------------------------------- */

static void hello(buf *o, int purpose, uint64_t job, int rank, int world, int secret, int status) {
    dist__hello h;
    uint8_t b[DIST__HELLO_SIZE];
    memset(&h, 0, sizeof h);
    h.magic = DIST__MAGIC; h.version = DIST__PROTOCOL_VERSION; h.purpose = (uint16_t)purpose;
    h.job = job; h.rank = rank; h.world = world; h.status = status;
    h.flags = secret ? DIST__HELLO_SECRET : 0;
    for (int i = 0; i < 32; i++) h.nonce[i] = (uint8_t)(0xa0 + i);
    dist__hello_encode(&h, b);
    put(o, b, sizeof b);
}

static void zero_proof(buf *o) { uint8_t z[DIST__PROOF_SIZE] = { 0 }; put(o, z, sizeof z); }

static void seeds_hello(void) {
    const char *T = "fuzz_hello";
    buf o;
    /* rank 0 accepts rank 2; the harness proves rank 2's side */
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_ACCEPTED | FUZZ_HELLO_ASSIST); put8(&o, 0); put8(&o, 0);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB, 2, FUZZ_HELLO_WORLD, 0, 0);
    save(T, "mesh-accept-assisted", &o);
    /* rank 2 called rank 1, both with a secret, in pieces of 7 bytes */
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_SECRET | FUZZ_HELLO_ASSIST); put8(&o, 7); put8(&o, 2);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB, 1, FUZZ_HELLO_WORLD, 1, 0);
    save(T, "mesh-connect-secret-chunked", &o);
    /* a proof that does not hold (the peer has no secret, this side has) */
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_SECRET); put8(&o, 0); put8(&o, 3);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB, 2, FUZZ_HELLO_WORLD, 0, 0);
    zero_proof(&o);
    save(T, "mesh-bad-proof", &o);
    /* the peer's rank is connected already: seen at its hello (accepted),
       or at its proof (called) */
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_ACCEPTED | FUZZ_HELLO_ASSIST | FUZZ_HELLO_TAKEN); put8(&o, 0); put8(&o, 0);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB, 1, FUZZ_HELLO_WORLD, 0, 0);
    save(T, "mesh-rank-taken", &o);
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_ASSIST | FUZZ_HELLO_TAKEN); put8(&o, 0); put8(&o, 2);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB, 1, FUZZ_HELLO_WORLD, 0, 0);
    save(T, "mesh-rank-taken-called", &o);
    /* another job, another world size */
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_ACCEPTED); put8(&o, 0); put8(&o, 0);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB + 1, 1, FUZZ_HELLO_WORLD, 0, 0);
    save(T, "mesh-other-job", &o);
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_ACCEPTED); put8(&o, 0); put8(&o, 0);
    hello(&o, DIST__PURPOSE_MESH, FUZZ_HELLO_JOB, 1, FUZZ_HELLO_WORLD + 2, 0, 0);
    save(T, "mesh-other-world", &o);
    /* strangers: a wrong magic, an old protocol version */
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_STORE); put8(&o, 1); put8(&o, 0);
    puts_(&o, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    save(T, "stranger-http", &o);
    o.n = 0; put8(&o, FUZZ_HELLO_MESH | FUZZ_HELLO_STORE); put8(&o, 3); put8(&o, 0);
    put32(&o, DIST__MAGIC); put8(&o, DIST__PROTOCOL_VERSION - 1); put8(&o, 0);
    save(T, "old-version", &o);
    /* the store answers a rank: its hello and a proof, then a verdict */
    o.n = 0; put8(&o, FUZZ_HELLO_STORE); put8(&o, 0); put8(&o, 1);
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 0, 0);
    zero_proof(&o);
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 0, 0);
    save(T, "store-answer", &o);
    /* the store knows the secret: the rank's proof goes out, the verdict comes */
    o.n = 0; put8(&o, FUZZ_HELLO_STORE | FUZZ_HELLO_ASSIST | FUZZ_HELLO_SECRET); put8(&o, 0); put8(&o, 1);
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 1, 0);
    zero_proof(&o);                                  /* replaced by the valid one */
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 1, 0);
    save(T, "store-answer-assisted", &o);
    o.n = 0; put8(&o, FUZZ_HELLO_STORE | FUZZ_HELLO_ASSIST); put8(&o, 0); put8(&o, 1);
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 0, 0);
    zero_proof(&o);
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 0, 1);
    reason(&o, "rank 1 joined twice (again)");
    save(T, "store-verdict-refusal", &o);
    /* the store refuses a rank, with a reason */
    o.n = 0; put8(&o, FUZZ_HELLO_STORE | FUZZ_HELLO_SECRET); put8(&o, 0); put8(&o, 2);
    hello(&o, DIST__PURPOSE_STORE, 0, 0, FUZZ_HELLO_WORLD, 0, 1);
    reason(&o, "rank 2 joined twice");
    save(T, "store-refusal", &o);
}

/* ---- frames ---------------------------------------------------------------- */

static void frame(buf *o, int kind, int dtype, int op, int coll, uint32_t comm, int64_t tag, uint64_t count,
                  uint64_t nbytes, int32_t root) {
    dist__frame f;
    uint8_t b[DIST__HDR_SIZE];
    memset(&f, 0, sizeof f);
    f.kind = (uint8_t)kind; f.dtype = (uint8_t)dtype; f.op = (uint8_t)op; f.coll = (uint8_t)coll;
    f.comm = comm; f.tag = tag; f.count = count; f.nbytes = nbytes; f.root = root;
    dist__frame_encode(&f, b);
    put(o, b, sizeof b);
}

/* An announcement: the header with its trailer (rendezvous id, and the
   payload's address in the sender's memory, or 0 when it travels later);
   prompt: by reference and paid for, copied at once. */
static void announce(buf *o, int kind, int dtype, int op, int coll, uint32_t comm, int64_t tag, uint64_t count,
                     uint64_t nbytes, uint64_t sid, uint64_t addr, int prompt) {
    size_t at = o->n;
    frame(o, kind, dtype, op, coll, comm, tag, count, nbytes, 0);
    o->b[at] |= DIST__FRAME_RTS | (prompt ? DIST__FRAME_PROMPT : 0);
    put64(o, sid);
    put64(o, addr);
}

static void payload(buf *o, size_t n) { for (size_t i = 0; i < n; i++) put8(o, (unsigned)(i * 13 + 5)); }

/* A posted receive (fuzz/fuzz.h). */
static void recv_spec(buf *o, unsigned bits, unsigned tag, int dtype, unsigned count, int op, int coll, int algo) {
    put8(o, bits); put8(o, tag); put8(o, (unsigned)dtype); put8(o, count);
    put8(o, (unsigned)(op | ((coll - 1) << 3) | (algo << 7)));
}

#define AR_RING (DIST__COLL_ALL_REDUCE | DIST__ALGO_RING << 4)

static void seeds_frame(void) {
    const char *T = "fuzz_frame";
    buf o;
    /* TCP: a message for a posted receive, one nobody asked for yet and its
       late receive, then goodbye and the close */
    o.n = 0; put8(&o, FUZZ_FRAME_EOF); put8(&o, 0); put8(&o, 2);
    recv_spec(&o, 0, 5, DIST_FLOAT32, 4, 0, 1, 0);
    recv_spec(&o, FUZZ_RECV_LATE | FUZZ_RECV_ANY, 6, DIST_INT64, 2, 0, 1, 0);
    frame(&o, DIST__FRAME_DATA, DIST_FLOAT32, 0, 0, 0, 5, 4, 16, 0); payload(&o, 16);
    frame(&o, DIST__FRAME_DATA, DIST_INT64, 0, 0, 0, 6, 2, 16, 0); payload(&o, 16);
    frame(&o, DIST__FRAME_BYE, 0, 0, 0, 0, 0, 0, 0, 0);
    save(T, "tcp-data-bye", &o);
    /* the same in writes of 5 bytes, a size mismatch, and no close */
    o.n = 0; put8(&o, 0); put8(&o, 5); put8(&o, 1);
    recv_spec(&o, 0, 5, DIST_FLOAT32, 3, 0, 1, 0);
    frame(&o, DIST__FRAME_DATA, DIST_FLOAT32, 0, 0, 0, 5, 4, 16, 0); payload(&o, 16);
    frame(&o, DIST__FRAME_DATA, DIST_UINT8, 0, 0, FUZZ_FRAME_GROUP, 9, 3, 3, 0); payload(&o, 3);
    save(T, "tcp-mismatch-chunked", &o);
    /* collectives: a combining receive of the running one, an early frame
       that disagrees, a late one of the collective that ended, an abort */
    o.n = 0; put8(&o, FUZZ_FRAME_COLL_STATE | FUZZ_FRAME_EOF); put8(&o, 0); put8(&o, 1);
    recv_spec(&o, FUZZ_RECV_COLL | FUZZ_RECV_REDUCE, 4, DIST_FLOAT32, 4, DIST_SUM, DIST__COLL_ALL_REDUCE, 1);
    frame(&o, DIST__FRAME_COLL, DIST_FLOAT32, DIST_SUM, AR_RING, 0, 4, 4, 12, 0); payload(&o, 12);
    frame(&o, DIST__FRAME_COLL, DIST_FLOAT32, DIST_SUM, AR_RING, 0, 3, 5, 4, 0); payload(&o, 4);
    frame(&o, DIST__FRAME_ABORT, 0, 0, 0, 0, 4, 0, 14, -4); puts_(&o, "rank 1 says no");
    save(T, "tcp-collectives", &o);
    o.n = 0; put8(&o, FUZZ_FRAME_COLL_STATE); put8(&o, 0); put8(&o, 0);
    frame(&o, DIST__FRAME_COLL, DIST_FLOAT32, DIST_SUM, AR_RING, 0, 4, 4, 8, 1); payload(&o, 8);
    frame(&o, DIST__FRAME_COLL, DIST_INT32, DIST_MAX, DIST__COLL_BROADCAST, FUZZ_FRAME_GROUP, 1, 2, 8, 0); payload(&o, 8);
    save(T, "tcp-collective-early", &o);
    /* shared memory: payloads by reference (read from this process), a
       combining one, the ACK a by-reference send waits for */
    o.n = 0; put8(&o, FUZZ_FRAME_SHM | FUZZ_FRAME_ACK_WAIT); put8(&o, 200); put8(&o, 2);
    recv_spec(&o, 0, 1, DIST_UINT8, 200, 0, 1, 0);
    recv_spec(&o, FUZZ_RECV_COLL | FUZZ_RECV_REDUCE | FUZZ_RECV_IN_FIRST | FUZZ_RECV_GROUP, 2, DIST_BFLOAT16, 30,
              DIST_MAX, DIST__COLL_REDUCE, 0);
    announce(&o, DIST__FRAME_DATA, DIST_UINT8, 0, 0, 0, 1, 200, 200, 7, FUZZ_REF_ADDR + 64, 1);
    announce(&o, DIST__FRAME_COLL, DIST_BFLOAT16, DIST_MAX, DIST__COLL_REDUCE, FUZZ_FRAME_GROUP, 2, 30, 40, 8, FUZZ_REF_ADDR, 0);
    frame(&o, DIST__FRAME_ACK, 0, 0, 0, 0, 1, 0, 0, 0);
    frame(&o, DIST__FRAME_DATA, DIST_FLOAT16, 0, 0, 0, 3, 2, 4, 0); payload(&o, 4);
    save(T, "shm-by-reference", &o);
    /* shared memory: a message nobody asked for, larger than the ring (its
       receive, posted late, expects fewer), with the peer asleep
       (doorbells); one by reference filled at once, one that waits */
    o.n = 0; put8(&o, FUZZ_FRAME_SHM | FUZZ_FRAME_SLEEPING); put8(&o, 99); put8(&o, 2);
    recv_spec(&o, FUZZ_RECV_LATE, 8, DIST_FLOAT64, 120, 0, 1, 0);
    recv_spec(&o, FUZZ_RECV_LATE | FUZZ_RECV_ANY, 9, DIST_INT8, 200, 0, 1, 0);
    frame(&o, DIST__FRAME_DATA, DIST_FLOAT64, 0, 0, 0, 8, 1100, 8800, 0); payload(&o, 8800);
    announce(&o, DIST__FRAME_DATA, DIST_INT8, 0, 0, 0, 9, 200, 200, 3, FUZZ_REF_ADDR, 1);
    announce(&o, DIST__FRAME_DATA, DIST_INT8, 0, 0, 0, 9, 100000, 100000, 4, FUZZ_REF_ADDR, 0);
    frame(&o, DIST__FRAME_CANCEL, 0, 0, 0, 0, 4, 0, 0, 0);
    save(T, "shm-unexpected", &o);
    /* TCP rendezvous: an announcement its receive takes (CTS goes out), its
       payload in two pieces; one nobody takes yet, then withdrawn; our
       announced send asked for (CTS) and one refused; credit back; a
       PULL for our queued send; the peer waits for credit */
    o.n = 0; put8(&o, FUZZ_FRAME_ACK_WAIT); put8(&o, 0); put8(&o, 2);
    recv_spec(&o, 0, 4, DIST_INT32, 100, 0, 1, 0);
    recv_spec(&o, FUZZ_RECV_LATE, 6, DIST_UINT8, 50, 0, 1, 0);
    announce(&o, DIST__FRAME_DATA, DIST_INT32, 0, 0, 0, 4, 100, 400, 11, 0, 0);
    frame(&o, DIST__FRAME_PAYLOAD, 0, 0, 0, 0, 11, 0, 160, 0); payload(&o, 160);
    frame(&o, DIST__FRAME_PAYLOAD, 0, 0, 0, 0, 11, 160, 240, 0); payload(&o, 240);
    announce(&o, DIST__FRAME_DATA, DIST_UINT8, 0, 0, 0, 6, 50, 50, 12, 0, 0);
    frame(&o, DIST__FRAME_CANCEL, 0, 0, 0, 0, 12, 0, 0, 0);
    frame(&o, DIST__FRAME_CTS, 0, 0, 0, 0, 1, 0, 0, 0);
    frame(&o, DIST__FRAME_CANCEL, 0, 0, 0, 0, 2, DIST__REFUSED_MISMATCH, 0, 1);
    frame(&o, DIST__FRAME_CREDIT, 0, 0, 0, 0, 0, 4096, 0, 0);
    frame(&o, DIST__FRAME_PULL, 0, 0, DIST__FRAME_DATA, 0, 3, 0, 0, 0);
    frame(&o, DIST__FRAME_BLOCKED, 0, 0, 0, 0, 0, 600, 0, 0);
    frame(&o, DIST__FRAME_BYE, 0, 0, 0, 0, 0, 0, 0, 0);
    save(T, "tcp-rendezvous", &o);
    /* more than the budget allows: the peer is failed */
    o.n = 0; put8(&o, FUZZ_FRAME_TIGHT); put8(&o, 0); put8(&o, 0);
    for (int i = 0; i < 8; i++) { frame(&o, DIST__FRAME_DATA, DIST_UINT8, 0, 0, 0, 5, 1000, 1000, 0); payload(&o, 1000); }
    save(T, "tcp-over-budget", &o);
    /* a header that is not one */
    o.n = 0; put8(&o, 0); put8(&o, 0); put8(&o, 0);
    puts_(&o, "this is not a frame header, it is forty.");
    save(T, "bad-magic", &o);
}

/* ---- store ----------------------------------------------------------------- */

/* A request (dist__store_call's format). */
static void req(buf *o, int cmd, int64_t num, int nparts, const char *const *parts) {
    uint32_t body = DIST__STORE_REQ_HDR - 4;
    for (int i = 0; i < nparts; i++) body += 4 + (uint32_t)strlen(parts[i]);
    put32(o, body); put8(o, (unsigned)cmd); put8(o, (unsigned)nparts); put8(o, 0); put8(o, 0); put64(o, (uint64_t)num);
    for (int i = 0; i < nparts; i++) { put32(o, (uint32_t)strlen(parts[i])); puts_(o, parts[i]); }
}
#define REQ(o, cmd, num, ...) do { const char *p_[] = { __VA_ARGS__ }; req(o, cmd, num, (int)(sizeof p_ / sizeof *p_), p_); } while (0)

/* A response (dist__store_reply's format). */
static void resp(buf *o, int32_t status, int64_t num, const char *val) {
    uint32_t vlen = val ? (uint32_t)strlen(val) : 0;
    put32(o, DIST__STORE_RESP_HDR - 4 + (val ? 4 + vlen : 0));
    put32(o, (uint32_t)status); put32(o, val ? 1u : 0u); put64(o, (uint64_t)num);
    if (val) { put32(o, vlen); puts_(o, val); }
}

/* The server target's records: `b` goes to connection `conn` in records
   of `piece` bytes (0: as few as the 127-byte limit allows). */
static void to_conn(buf *o, int conn, const buf *b, int piece) {
    size_t most = piece ? (size_t)piece : 127;
    for (size_t off = 0; off < b->n;) {
        size_t k = DIST__MIN(most, b->n - off);
        put8(o, (unsigned)(conn << 7) | (unsigned)k);
        put(o, b->b + off, k);
        off += k;
    }
}

static void seeds_store(void) {
    const char *T = "fuzz_store";
    buf o, r;
    /* every command from a rank that has joined */
    r.n = 0;
    REQ(&r, DIST__STORE_SET, 0, "key", "value");
    REQ(&r, DIST__STORE_GET, 0, "key");
    REQ(&r, DIST__STORE_ADD, 5, "n");
    REQ(&r, DIST__STORE_ADD, -7, "n");
    REQ(&r, DIST__STORE_ADD, 1, "key");
    REQ(&r, DIST__STORE_CHECK, 0, "key", "n", "missing");
    REQ(&r, DIST__STORE_WAIT, 0, "key", "n");
    REQ(&r, DIST__STORE_CAS, 0, "key", "value", "other");
    REQ(&r, DIST__STORE_CAS, 1, "fresh", "", "new");
    REQ(&r, DIST__STORE_CAS, 0, "absent", "x", "y");
    REQ(&r, DIST__STORE_DELETE, 0, "key");
    REQ(&r, DIST__STORE_DELETE, 0, "key");
    REQ(&r, DIST__STORE_GET, 3, "key");            /* parks, then times out */
    REQ(&r, DIST__STORE_WAIT, INT64_MAX, "key");    /* parks for as long as a client may ask */
    o.n = 0; put8(&o, FUZZ_STORE_C0_JOINED); put8(&o, 1);
    to_conn(&o, 0, &r, 0);
    save(T, "server-commands", &o);
    /* a rank waits for a key another rank sets (parked, released) */
    o.n = 0; put8(&o, FUZZ_STORE_C0_JOINED | FUZZ_STORE_C1_JOINED); put8(&o, 1);
    r.n = 0; REQ(&r, DIST__STORE_WAIT, 1000, "ready", "go"); to_conn(&o, 1, &r, 0);
    r.n = 0; REQ(&r, DIST__STORE_SET, 0, "ready", "1"); REQ(&r, DIST__STORE_SET, 0, "go", ""); to_conn(&o, 0, &r, 0);
    r.n = 0; REQ(&r, DIST__STORE_GET, 0, "go"); to_conn(&o, 1, &r, 0);
    save(T, "server-park-release", &o);
    /* a rank's hello with the harness's proof, then requests; in pieces */
    o.n = 0; put8(&o, FUZZ_STORE_ASSIST | FUZZ_STORE_SECRET); put8(&o, 1);
    r.n = 0; hello(&r, DIST__PURPOSE_STORE, 0, 1, 2, 1, 0);
    REQ(&r, DIST__STORE_SET, 0, "dist/addr/1", "127.0.0.1 40000");
    REQ(&r, DIST__STORE_GET, 0, "dist/addr/0");
    to_conn(&o, 0, &r, 9);
    save(T, "server-handshake-assisted", &o);
    /* a rank of another world size: the job cannot form; the waiting rank hears why */
    o.n = 0; put8(&o, FUZZ_STORE_ASSIST | FUZZ_STORE_C1_JOINED); put8(&o, 3);
    r.n = 0; hello(&r, DIST__PURPOSE_STORE, 0, 0, 3, 0, 0); to_conn(&o, 0, &r, 0);
    r.n = 0; REQ(&r, DIST__STORE_GET, 0, "dist/addr/3"); to_conn(&o, 1, &r, 0);
    save(T, "server-fatal-world", &o);
    /* strangers: a hello without a proof, a wrong purpose, HTTP */
    o.n = 0; put8(&o, 0); put8(&o, 1);
    r.n = 0; hello(&r, DIST__PURPOSE_STORE, 0, 0, 2, 0, 0); zero_proof(&r); to_conn(&o, 0, &r, 0);
    r.n = 0; hello(&r, DIST__PURPOSE_MESH, 0, 1, 2, 0, 0); to_conn(&o, 1, &r, 0);
    save(T, "server-strangers", &o);
    o.n = 0; put8(&o, 0); put8(&o, 0);
    r.n = 0; puts_(&r, "GET /dist HTTP/1.1\r\n\r\n"); to_conn(&o, 0, &r, 2);
    save(T, "server-http", &o);
    /* a request whose parts do not add up, and one too large to take */
    o.n = 0; put8(&o, FUZZ_STORE_C0_JOINED | FUZZ_STORE_C1_JOINED); put8(&o, 2);
    r.n = 0; put32(&r, 20); put8(&r, DIST__STORE_SET); put8(&r, 2); put8(&r, 0); put8(&r, 0); put64(&r, 0);
    put32(&r, 3); puts_(&r, "abc"); put32(&r, 9); to_conn(&o, 0, &r, 0);
    r.n = 0; put32(&r, 0x7fffffff); to_conn(&o, 1, &r, 0);
    save(T, "server-malformed", &o);

    /* the client: a reply to each call */
    {
        static const struct { int call; const char *name; } calls[] = {
            { FUZZ_CALL_SET, "set" }, { FUZZ_CALL_GET, "get" }, { FUZZ_CALL_ADD, "add" },
            { FUZZ_CALL_WAIT, "wait" }, { FUZZ_CALL_CHECK, "check" }, { FUZZ_CALL_CAS, "compare-set" },
            { FUZZ_CALL_DELETE, "delete" }, { FUZZ_CALL_RENDEZVOUS, "rendezvous" },
        };
        for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
            char name[64];
            o.n = 0; put8(&o, FUZZ_STORE_CLIENT); put8(&o, (unsigned)calls[i].call);
            switch (calls[i].call) {
            case FUZZ_CALL_GET: resp(&o, DIST_OK, 0, "hello"); break;
            case FUZZ_CALL_ADD: resp(&o, DIST_OK, 8, NULL); break;
            case FUZZ_CALL_CHECK: resp(&o, DIST_OK, 1, NULL); break;
            case FUZZ_CALL_CAS: resp(&o, DIST_OK, 0, "new"); break;
            case FUZZ_CALL_DELETE: resp(&o, DIST_OK, 1, NULL); break;
            case FUZZ_CALL_RENDEZVOUS:   /* "dist/fatal" exists, and says why */
                resp(&o, DIST_OK, 1, NULL); resp(&o, DIST_OK, 0, "a rank of world size 3 joined"); break;
            default: resp(&o, DIST_OK, 0, NULL); break;
            }
            snprintf(name, sizeof name, "client-%s", calls[i].name);
            save(T, name, &o);
        }
    }
    o.n = 0; put8(&o, FUZZ_STORE_CLIENT); put8(&o, FUZZ_CALL_WAIT);
    resp(&o, DIST_ERR_TIMEOUT, 0, NULL); resp(&o, DIST_OK, 1, NULL); resp(&o, DIST_OK, 0, NULL);
    save(T, "client-wait-timeout", &o);
    o.n = 0; put8(&o, FUZZ_STORE_CLIENT); put8(&o, FUZZ_CALL_GET);
    resp(&o, DIST_OK, 0, "a value longer than the buffer");
    save(T, "client-get-truncated", &o);
    o.n = 0; put8(&o, FUZZ_STORE_CLIENT); put8(&o, FUZZ_CALL_GET);
    resp(&o, DIST_ERR_INIT, 0, "the job cannot form");
    save(T, "client-get-init", &o);
    o.n = 0; put8(&o, FUZZ_STORE_CLIENT); put8(&o, FUZZ_CALL_RENDEZVOUS);
    resp(&o, DIST_OK, 0, NULL); resp(&o, DIST_OK, 1, NULL); resp(&o, DIST_OK, 0, "rank 3 joined twice");
    save(T, "client-rendezvous-timeout", &o);
}

/* ---- shared-memory records -------------------------------------------------- */

static void seeds_shm(void) {
    const char *T = "fuzz_shm";
    const uint64_t ring = 4096;
    const uint64_t size = DIST__SHM_HDR + 2 * (sizeof(dist__ring) + ring) + 4 * (uint64_t)DIST_SHM_COLL_BYTES + DIST__FAST_AREA;
    for (int v = 0; v < 3; v++) {
        buf o;
        dist__shm_hdr h;
        uint8_t rec[40];
        uint64_t file = v == 2 ? size / 2 : size;
        o.n = 0;
        put8(&o, v == 1 ? FUZZ_SHM_BAD_FD : 0);
        put8(&o, (unsigned)((file + 255) / 256 & 0xff)); put8(&o, (unsigned)((file + 255) / 256 >> 8));
        memset(rec, 0, sizeof rec);
        dist__put32(rec, 0x42736873u);               /* "B" record */
        dist__put32(rec + 12, 1);                    /* our slot in its segment */
        dist__put64(rec + 16, ring);
        dist__put64(rec + 24, size);
        dist__put64(rec + 32, FUZZ_REF_ADDR);
        put(&o, rec, sizeof rec);
        memset(&h, 0, sizeof h);
        h.magic = DIST__SHM_MAGIC; h.owner_rank = 1; h.owner_pid = 0; h.nrings = 2;
        h.ring_size = ring; h.seg_size = size;
        h.coll_off = size - 4 * (uint64_t)DIST_SHM_COLL_BYTES - DIST__FAST_AREA; h.coll_bytes = DIST_SHM_COLL_BYTES;
        h.fast_off = size - DIST__FAST_AREA; h.fast_bytes = DIST_SHM_FAST_BYTES; h.fast_slots = DIST__FAST_SLOTS;
        put(&o, &h, sizeof h);
        save(T, v == 0 ? "segment" : v == 1 ? "segment-bad-fd" : "segment-short-file", &o);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gen_seeds DIR\n"); return 2; }
    g_dir = argv[1];
    if (mkdir(g_dir, 0777) != 0 && errno != EEXIST) { perror(g_dir); return 1; }
    seeds_hello();
    seeds_frame();
    seeds_store();
    seeds_shm();
    printf("gen_seeds: %d seeds in %s\n", g_count, g_dir);
    return 0;
}
