// TIMEOUT: 120
// WINDOWS: yes
/* test_auth.c - authentication of every connection (store and mesh) by an
   HMAC-SHA256 challenge-response under the job's secret (DIST_SECRET or
   cfg.secret).

   1. Primitives against published vectors (hard-coded digests are the
      independent reference): SHA-256 against the FIPS 180-2 / NIST vectors
      ("", "abc", the 448- and 896-bit messages, one million 'a', also fed in
      odd-sized pieces through dist__sha256_init/update/final) and messages
      of 'a' around the padding boundaries (digests from Python's hashlib);
      HMAC-SHA256 against RFC 4231 test cases 1-7 (case 5 truncated to 128
      bits), also with the data split into several parts; dist__key_from
      (no secret, empty, short, 64 bytes, longer than a block: hashed as
      HMAC does); dist__equal_ct.
   2. Jobs this program forks (tcp://127.0.0.1:PORT, cfg rank and world
      size, a short cfg.timeout_ms), so each rank can have its own secret:
      a. 3 ranks, one secret (cfg.secret on ranks 0 and 2, DIST_SECRET on
         rank 1; rank 2's cfg.secret wins over a wrong DIST_SECRET): init,
         an all_reduce (float32 sum) exact on every rank, destroy.
      b. rank 2 has another secret: its dist_init fails promptly (well before
         the timeout) with DIST_ERR_INIT and a message about the secret;
         ranks 0 and 1 fail promptly too (within 1.5 s: the store gives up
         on a rank that could not prove the secret a quarter of the
         timeout after the others joined), saying "rank 2 could not prove
         the job's secret".
      b'. rank 0 (the store) has another secret: ranks 1 and 2 fail
         promptly, and so does rank 0 ("ranks 1, 2 could not prove ...").
      c. rank 2 has no secret, ranks 0 and 1 have one: rank 2's message says
         that the store has a secret and this process has none; 0 and 1
         fail promptly naming rank 2.
      c'. rank 2 has a secret, ranks 0 and 1 have none: rank 2's message says
         the store has no secret and this process requires one; 0 and 1
         fail promptly naming rank 2.
      d. 3 ranks, no secret anywhere: works (the default path).
   3. Strangers at the store while a job with a secret runs all_reduces
      (results exact every iteration): this program, knowing the secret but
      not using it, connects to the store's port and tries (i) a correct
      hello with a wrong key (the store's proof must not verify under the
      wrong key, and must under the job's secret; the wrong proof is refused
      with a reason naming the secret), (i') no secret at all, (v) the
      store's own proof sent back (reflection), (ii) an HTTP request, (iv)
      80 random bytes, (iii) a connection silent for 1 s, and one left
      silent until the store drops it.  Each is answered or closed within a
      few seconds (poll, never blocking), the job keeps going meanwhile, the
      store logs each refusal, records none of them ("dist/rejected" stays
      unset), still serves the ranks, and dist_destroy succeeds everywhere.
   4. The proof function: role 'C' differs from role 'A' for the same
      hellos (no reflection); changing any byte of either hello changes the
      proof; dist__proof_check accepts the right proof and rejects every
      one-bit change of it, a wrong key and the other role, with the reasons
      the hello's secret flag calls for; fresh hellos have fresh nonces.
   5. Strangers at a rank's mesh port during dist_init (found through /proc
      while rank 2 is held back): rank 0 greets, its proof verifies under
      the job's secret; a wrong key, a reflected proof, no secret and a
      wrong job id are each dropped (and logged by rank 0); then rank 2
      joins and the job works.

   Every multi-process part runs under its own deadline (children killed
   then); limits are scaled by DIST_TIMEOUT_SCALE.  One line per check
   ("ok   ..." or "FAIL ...: ..."); exit 0 only if every check passed.

   On Windows (no fork) each rank is this program started again, which
   runs main silently up to its job's fork_ranks (testutil.h): what main
   does before a job's start must be the same there and harmless, so the
   shared slots are cleared, and jobs waited for and judged, in the first
   process only.  Rank 0's mesh port is found through GetExtendedTcpTable
   and, under Wine, a walk of its handles (listening_ports in
   tests/compat/windows/testutil_sockets.h), and must still be there 20 ms
   later (rank 0 also listens for a moment while it makes a wake-up
   pair there). */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#ifdef _WIN32
#  include <testutil_sockets.h>
#endif

#define MAXP   3
#define MAXJ   4
#define LOGCAP 6144

static const char *const SECRET = "correct horse battery staple";
static const char *const OTHER  = "correct horse battery stable";

/* ---- hex ------------------------------------------------------------------- */

static void to_hex(const uint8_t *b, size_t n, char *out) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) { out[2 * i] = d[b[i] >> 4]; out[2 * i + 1] = d[b[i] & 15]; }
    out[2 * n] = 0;
}

/* hex string -> bytes; returns the byte count */
static size_t from_hex(const char *h, uint8_t *out) {
    size_t n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

/* The digest's first strlen(want)/2 bytes are `want`; the digest's hex in got. */
static int digest_is(const uint8_t *d, const char *want, char got[65]) {
    to_hex(d, 32, got);
    return strncmp(got, want, strlen(want)) == 0;
}

/* ---- 1. SHA-256, HMAC-SHA256, keys ------------------------------------------- */

static void check_sha256(void) {
    static const struct { const char *name, *msg, *want; } v[] = {
        { "\"\"", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "\"abc\"", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "the 448-bit message", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
        { "the 896-bit message",
          "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
          "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
    };
    /* 'a' * n around the padding boundaries (55/56: the length fits or
       not; 64: a whole block); digests from Python's hashlib */
    static const struct { size_t n; const char *want; } as[] = {
        { 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
        { 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
        { 57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6" },
        { 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34" },
        { 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
        { 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0" },
        { 119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb" },
        { 120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c" },
        { 127, "c57e9278af78fa3cab38667bef4ce29d783787a2f731d4e12200270f0c32320a" },
        { 128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e" },
    };
    static const char *const million = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    static const size_t pieces[] = { 1, 3, 7, 13, 31, 63, 64, 65, 127, 1000, 4097, 0, 55, 56, 9 };
    uint8_t out[32];
    char got[65];
    char *m;
    int bad = 0;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        dist__sha256(v[i].msg, strlen(v[i].msg), out);
        if (digest_is(out, v[i].want, got)) ok("SHA-256 of %s (FIPS 180-2)", v[i].name);
        else fail("SHA-256", "of %s: %s, expected %s", v[i].name, got, v[i].want);
    }
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {   /* byte by byte */
        dist__sha256_ctx c;
        dist__sha256_init(&c);
        for (const char *p = v[i].msg; *p; p++) dist__sha256_update(&c, p, 1);
        dist__sha256_final(&c, out);
        if (!digest_is(out, v[i].want, got)) { fail("SHA-256 byte by byte", "of %s: %s, expected %s", v[i].name, got, v[i].want); bad++; }
    }
    if (!bad) ok("SHA-256 of the same messages fed one byte at a time");

    m = (char *)malloc(1000000);
    if (!m) { fail("SHA-256", "out of memory"); return; }
    memset(m, 'a', 1000000);
    dist__sha256(m, 1000000, out);
    if (digest_is(out, million, got)) ok("SHA-256 of one million 'a' (one call)");
    else fail("SHA-256", "of one million 'a': %s, expected %s", got, million);
    {
        dist__sha256_ctx c;
        size_t off = 0, k = 0;
        dist__sha256_init(&c);
        while (off < 1000000) {
            size_t take = pieces[k++ % (sizeof pieces / sizeof pieces[0])];
            if (take > 1000000 - off) take = 1000000 - off;
            dist__sha256_update(&c, m + off, take);
            off += take;
        }
        dist__sha256_final(&c, out);
        if (digest_is(out, million, got)) ok("SHA-256 of one million 'a' in odd-sized pieces (init/update/final, %zu updates)", k);
        else fail("SHA-256 in pieces", "of one million 'a': %s, expected %s", got, million);
    }
    bad = 0;
    for (size_t i = 0; i < sizeof as / sizeof as[0]; i++) {
        dist__sha256_ctx c;
        dist__sha256(m, as[i].n, out);
        if (!digest_is(out, as[i].want, got)) { fail("SHA-256", "of %zu x 'a': %s, expected %s", as[i].n, got, as[i].want); bad++; }
        dist__sha256_init(&c);   /* in two pieces split at every third byte */
        dist__sha256_update(&c, m, as[i].n / 3);
        dist__sha256_update(&c, m, as[i].n - as[i].n / 3);
        dist__sha256_final(&c, out);
        if (!digest_is(out, as[i].want, got)) { fail("SHA-256 in pieces", "of %zu x 'a': %s, expected %s", as[i].n, got, as[i].want); bad++; }
    }
    if (!bad) ok("SHA-256 of 55, 56, 57, 63, 64, 65, 119, 120, 127, 128 x 'a' (padding boundaries), whole and in pieces");
    free(m);
}

static void check_hmac(void) {
    /* RFC 4231, section 4: test cases 1-7 (key, data, HMAC-SHA-256) */
    static const struct { const char *key, *data, *want; } tc[] = {
        { "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
        { "4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
        { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
          "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
          "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe" },
        { "0102030405060708090a0b0c0d0e0f10111213141516171819",
          "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
          "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
        { "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c", "546573742057697468205472756e636174696f6e",
          "a3b6167473100ee06e0c796c2955552b" },   /* truncated to 128 bits */
        { NULL, "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b6579204669727374",
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
        { NULL,
          "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d73697a65206b657920616e642061206c"
          "6172676572207468616e20626c6f636b2d73697a6520646174612e20546865206b6579206e6565647320746f20626520686173686564206265"
          "666f7265206265696e6720757365642062792074686520484d414320616c676f726974686d2e",
          "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
    };
    uint8_t key[200], data[300], out[32];
    char got[65];
    for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) {
        size_t kl, dl;
        const void *parts[4];
        size_t lens[4];
        int bad = 0;
        if (tc[i].key) kl = from_hex(tc[i].key, key);
        else { memset(key, 0xaa, 131); kl = 131; }   /* cases 6 and 7: 131 bytes of 0xaa */
        dl = from_hex(tc[i].data, data);
        parts[0] = data; lens[0] = dl;
        dist__hmac_sha256(key, kl, 1, parts, lens, out);
        if (!digest_is(out, tc[i].want, got)) { fail("HMAC-SHA256", "RFC 4231 case %zu: %s, expected %s", i + 1, got, tc[i].want); continue; }
        /* the same data as 4 parts, one of them empty */
        parts[0] = data;            lens[0] = dl / 3;
        parts[1] = data + dl / 3;   lens[1] = 0;
        parts[2] = data + dl / 3;   lens[2] = dl / 2 - dl / 3;
        parts[3] = data + dl / 2;   lens[3] = dl - dl / 2;
        dist__hmac_sha256(key, kl, 4, parts, lens, out);
        if (!digest_is(out, tc[i].want, got)) { fail("HMAC-SHA256", "RFC 4231 case %zu as 4 parts: %s, expected %s", i + 1, got, tc[i].want); bad = 1; }
        if (!bad) ok("HMAC-SHA256 RFC 4231 case %zu (%zu-byte key, %zu-byte data%s), whole and in parts", i + 1, kl, dl, i == 4 ? ", first 16 bytes" : "");
    }
}

static void check_keys(void) {
    dist__key k;
    char longs[101], s64[65];
    uint8_t h[32], a[32], b[32];
    const void *parts[1] = { "message" };
    size_t lens[1] = { 7 };

    dist__key_from(NULL, &k);
    if (k.set == 0 && k.len == 0) ok("dist__key_from(NULL): no secret, empty key");
    else fail("dist__key_from(NULL)", "set %d len %zu", k.set, k.len);
    dist__key_from("", &k);
    if (k.set == 0 && k.len == 0) ok("dist__key_from(\"\"): no secret (an empty DIST_SECRET is as unset)");
    else fail("dist__key_from(\"\")", "set %d len %zu", k.set, k.len);
    dist__key_from("abc", &k);
    if (k.set == 1 && k.len == 3 && memcmp(k.k, "abc", 3) == 0) ok("dist__key_from(\"abc\"): the secret's bytes");
    else fail("dist__key_from(\"abc\")", "set %d len %zu", k.set, k.len);

    memset(s64, 'k', 64); s64[64] = 0;
    dist__key_from(s64, &k);
    dist__hmac_sha256(k.k, k.len, 1, parts, lens, a);
    dist__hmac_sha256(s64, 64, 1, parts, lens, b);
    if (k.len == 64 && memcmp(k.k, s64, 64) == 0 && memcmp(a, b, 32) == 0) ok("dist__key_from of a 64-byte secret keeps it as is");
    else fail("dist__key_from(64 bytes)", "len %zu", k.len);

    for (int i = 0; i < 100; i++) longs[i] = (char)('A' + i % 26);
    longs[100] = 0;
    dist__key_from(longs, &k);
    dist__sha256(longs, 100, h);
    dist__hmac_sha256(k.k, k.len, 1, parts, lens, a);
    dist__hmac_sha256(longs, 100, 1, parts, lens, b);
    if (k.set && k.len == 32 && memcmp(k.k, h, 32) == 0 && memcmp(a, b, 32) == 0)
        ok("dist__key_from of a 100-byte secret: its SHA-256 (HMAC's rule), same HMAC as the raw secret");
    else fail("dist__key_from(100 bytes)", "len %zu, key %s the secret's SHA-256, HMAC %s", k.len,
              memcmp(k.k, h, 32) == 0 ? "is" : "is not", memcmp(a, b, 32) == 0 ? "agrees" : "differs");

    {
        uint8_t x[32], y[32];
        int good = 1;
        memset(x, 7, 32); memcpy(y, x, 32);
        good &= dist__equal_ct(x, y, 32) == 1;
        good &= dist__equal_ct(x, y, 0) == 1;
        y[0] ^= 1;  good &= dist__equal_ct(x, y, 32) == 0;
        y[0] ^= 1; y[31] ^= 0x80; good &= dist__equal_ct(x, y, 32) == 0;
        good &= dist__equal_ct(x, y, 31) == 1;
        if (good) ok("dist__equal_ct: equal, first or last byte differs, length 0");
        else fail("dist__equal_ct", "wrong answer");
    }
}

/* ---- 4. the proof function ---------------------------------------------------- */

static void check_proofs(void) {
    dist__key key, wrong, none;
    dist__hello h;
    uint8_t ha[DIST__HELLO_SIZE], hb[DIST__HELLO_SIZE], hc[DIST__HELLO_SIZE], pc[32], pa[32], p[32];
    char why[200];
    int bad;

    dist__key_from(SECRET, &key);
    dist__key_from(OTHER, &wrong);
    dist__key_from(NULL, &none);
    dist__hello_make(&h, DIST__PURPOSE_MESH, 0x1234567890abcdefull, 1, 3, &key, ha);   /* the connecting end */
    dist__hello_make(&h, DIST__PURPOSE_MESH, 0x1234567890abcdefull, 0, 3, &key, hb);   /* the accepting end */

    dist__proof(&key, 'C', ha, hb, pc);
    dist__proof(&key, 'A', ha, hb, pa);
    if (memcmp(pc, pa, 32) != 0) ok("proof: role 'C' differs from role 'A' for the same hellos");
    else fail("proof roles", "role 'C' and role 'A' give the same proof (a proof could be reflected)");
    dist__proof(&key, 'C', hb, ha, p);
    if (memcmp(pc, p, 32) != 0) ok("proof: swapping the prover's and the verifier's hello changes it");
    else fail("proof order", "swapping the hellos gives the same proof");
    dist__proof(&key, 'C', ha, hb, p);
    if (memcmp(pc, p, 32) == 0) ok("proof: deterministic for the same key, role and hellos");
    else fail("proof", "two proofs of the same inputs differ");

    bad = 0;
    for (int which = 0; which < 2; which++)
        for (int i = 0; i < DIST__HELLO_SIZE; i++) {
            uint8_t *hh = which ? hb : ha;
            hh[i] ^= 0x5a;
            dist__proof(&key, 'C', ha, hb, p);
            hh[i] ^= 0x5a;
            if (memcmp(p, pc, 32) == 0) {
                if (bad++ < 3) fail("proof", "changing byte %d of the %s hello leaves the proof unchanged", i, which ? "verifier's" : "prover's");
            }
        }
    if (!bad) ok("proof: changing any one of the 2 x 80 hello bytes changes it");

    if (dist__proof_check(&key, 'C', ha, hb, pc, why, sizeof why) == 0) ok("proof_check accepts the right proof");
    else fail("proof_check", "rejects the right proof: %s", why);
    bad = 0;
    for (int bit = 0; bit < 256; bit++) {
        memcpy(p, pc, 32);
        p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        why[0] = 0;
        if (dist__proof_check(&key, 'C', ha, hb, p, why, sizeof why) == 0 || !strstr(why, "does not know the job's secret")) {
            if (bad++ < 3) fail("proof_check", "with bit %d of the proof flipped: %s", bit, why[0] ? why : "accepted");
        }
    }
    if (!bad) ok("proof_check rejects each of the 256 one-bit changes of the proof (\"does not know the job's secret\")");
    why[0] = 0;
    if (dist__proof_check(&key, 'C', ha, hb, pa, why, sizeof why) != 0) ok("proof_check rejects the other role's proof (reflection): %s", why);
    else fail("proof_check", "accepts a role 'A' proof as role 'C'");
    dist__proof(&wrong, 'C', ha, hb, p);
    why[0] = 0;
    if (dist__proof_check(&key, 'C', ha, hb, p, why, sizeof why) != 0 && strstr(why, "does not know the job's secret"))
        ok("proof_check rejects a proof made with another secret: %s", why);
    else fail("proof_check", "a proof made with another secret: %s", why[0] ? why : "accepted");

    /* a peer with no secret (its hello says so) checked by an end with one, and the reverse */
    dist__hello_make(&h, DIST__PURPOSE_MESH, 0x1234567890abcdefull, 1, 3, &none, hc);
    dist__proof(&none, 'C', hc, hb, p);
    why[0] = 0;
    if (dist__proof_check(&key, 'C', hc, hb, p, why, sizeof why) != 0 && strstr(why, "it has no secret and this job requires one"))
        ok("proof_check of a peer without a secret by an end with one: %s", why);
    else fail("proof_check", "a peer without a secret: %s", why[0] ? why : "accepted");
    why[0] = 0;
    if (dist__proof_check(&none, 'C', ha, hc, pc, why, sizeof why) != 0 && strstr(why, "it has a secret and this job has none"))
        ok("proof_check of a peer with a secret by an end without one: %s", why);
    else fail("proof_check", "a peer with a secret checked without one: %s", why[0] ? why : "accepted");
    {   /* no secret on either end: the empty key still proves the hellos */
        uint8_t hd[DIST__HELLO_SIZE];
        dist__hello_make(&h, DIST__PURPOSE_MESH, 0x1234567890abcdefull, 0, 3, &none, hd);
        dist__proof(&none, 'A', hd, hc, p);
        if (dist__proof_check(&none, 'A', hd, hc, p, why, sizeof why) == 0) ok("proof_check without a secret on either end accepts the right proof");
        else fail("proof_check", "no secret on either end: %s", why);
    }

    {   /* fresh nonces: two hellos made alike differ, and decode to the same fields */
        dist__hello d1, d2;
        uint8_t h1[DIST__HELLO_SIZE], h2[DIST__HELLO_SIZE];
        dist__hello_make(&h, DIST__PURPOSE_STORE, 77, 2, 3, &key, h1);
        dist__hello_make(&h, DIST__PURPOSE_STORE, 77, 2, 3, &key, h2);
        if (dist__hello_decode(h1, &d1, why, sizeof why) == 0 && dist__hello_decode(h2, &d2, why, sizeof why) == 0 &&
            d1.job == 77 && d1.rank == 2 && d1.world == 3 && d1.purpose == DIST__PURPOSE_STORE && (d1.flags & DIST__HELLO_SECRET) &&
            d1.status == 0 && memcmp(d1.nonce, d2.nonce, 32) != 0 && memcmp(h1 + 32, h2 + 32, 32) != 0 && memcmp(h1, h2, 32) == 0)
            ok("hellos made alike decode to their fields and differ only in their fresh 32-byte nonces");
        else fail("hello", "encode/decode or nonce freshness: %s", why);
    }
}

/* ---- jobs ------------------------------------------------------------------------ */

typedef struct slot {
    int started, init_done, finished, hung, signaled, exit_code;
    int init_res;
    long init_ms;
    int work_bad;                 /* 1: a check after init failed (why) */
    int destroy_res;
    long iters;                   /* all_reduces done (atomic) */
    int rejected_seen;            /* rank 0: "dist/rejected" existed after the strangers */
    char msg[DIST__ERRLEN + 64];  /* dist_init's / dist_destroy's message */
    char why[512];
    int nlog;
    char log[LOGCAP];             /* what the logger got, a line each */
} slot_t;

typedef struct ctl {
    int ready;                    /* ranks past dist_init (atomic) */
    int stop;                     /* the parent: end the all_reduce loop */
    int go;                       /* the parent: the held-back rank may start */
} ctl_t;

enum { W_ONCE = 0, W_LOOP, W_HOLD };

typedef struct job {
    const char *name;
    int n, port, timeout_ms, mode;
    const char *secret[MAXP];     /* cfg.secret (NULL: none there) */
    const char *env_secret[MAXP]; /* DIST_SECRET (NULL: unset) */
    slot_t *slots;
    ctl_t *ctl;
    pid_t pids[MAXP];
    long deadline;
} job_t;

typedef struct shared {
    slot_t slots[MAXJ][MAXP];
    ctl_t ctl[MAXJ];
} shared_t;

static shared_t *g_sh;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;

/* A rank's logger: every line into its slot (the store's thread logs too). */
static void log_fn(dist_log_level level, const char *message, void *user) {
    slot_t *sl = (slot_t *)user;
    size_t used, n = strlen(message);
    (void)level;
    pthread_mutex_lock(&g_log_lock);
    used = strlen(sl->log);
    if (used + n + 2 < sizeof sl->log) {
        memcpy(sl->log + used, message, n);
        sl->log[used + n] = '\n';
        sl->log[used + n + 1] = 0;
    }
    sl->nlog++;
    pthread_mutex_unlock(&g_log_lock);
}

static int count_in(const char *hay, const char *needle) {
    int c = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) c++;
    return c;
}

static void clear_env(void) {
    UNSET_ENV("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", LAUNCHER_ENV);
}

/* Writes the rank's first failure after init. */
#define rank_bad(sl, ...) note_first(&(sl)->work_bad, (sl)->why, sizeof (sl)->why, __VA_ARGS__)

/* One float32 all_reduce of `count` (+1 for the stop flag when flag >= 0)
   elements; every element checked exactly.  Returns the summed flag, or -1
   on a failure. */
static int reduce_once(dist_t *w, slot_t *sl, long it, size_t count, float flag) {
    int rank = dist_rank(w), n = dist_world_size(w);
    float *buf = (float *)malloc((count + 1) * sizeof *buf);
    float s1 = (float)(n * (n + 1) / 2), s0 = (float)(n * (n - 1) / 2);
    dist_result r;
    int res;
    if (!buf) { rank_bad(sl, "out of memory"); return -1; }
    for (size_t i = 0; i < count; i++) buf[i] = (float)((rank + 1) * (long)((i + (size_t)it) % 997) + rank);
    buf[count] = flag;
    r = dist_all_reduce(w, buf, count + 1, DIST_FLOAT32, DIST_SUM);
    if (r != DIST_OK) {
        rank_bad(sl, "all_reduce #%ld: %s: %s", it, dist_result_name(r), dist_error_message(w));
        free(buf);
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        float want = s1 * (float)((i + (size_t)it) % 997) + s0;
        if (buf[i] != want) {
            rank_bad(sl, "all_reduce #%ld: element %ld is %g, expected %g", it, (long)i, (double)buf[i], (double)want);   /* (not %zu: mingw checks note_first's format as the system printf's) */
            free(buf);
            return -1;
        }
    }
    res = buf[count] != 0;
    free(buf);
    return res;
}

static void child_main(job_t *j, int rank) {
    slot_t *sl = &j->slots[rank];
    ctl_t *ctl = j->ctl;
    dist_config cfg;
    dist_t *w = NULL;
    char url[64];
    long t0;
    dist_result r;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sl->started = 1;
    clear_env();
    if (j->env_secret[rank]) setenv("DIST_SECRET", j->env_secret[rank], 1);
    if (j->mode == W_HOLD && rank == j->n - 1) {   /* held back until the parent says go */
        long until = now_ms() + scaled(4000);
        while (!__atomic_load_n(&ctl->go, __ATOMIC_SEQ_CST) && now_ms() < until) sleep_ms(5);
    }
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, j->port, j->n, rank, j->timeout_ms, -1);
    cfg.secret = j->secret[rank];
    cfg.logger.func = log_fn;
    cfg.logger.user = sl;
    cfg.log_level = DIST_LOG_WARN;
    t0 = now_ms();
    r = dist_init(&w, &cfg);
    sl->init_ms = now_ms() - t0;
    sl->init_res = r;
    sl->init_done = 1;
    if (r != DIST_OK) {
        snprintf(sl->msg, sizeof sl->msg, "%s", dist_error_message(NULL));
        sl->finished = 1;
        exit(0);   /* not _exit: a leak checker (make sanitize) runs at exit */
    }
    __atomic_add_fetch(&ctl->ready, 1, __ATOMIC_SEQ_CST);

    if (j->mode == W_LOOP) {
        long start = now_ms(), cap = scaled(15000);
        for (long it = 0;; it++) {
            float flag = 0;
            int f;
            if (rank == 0 && (__atomic_load_n(&ctl->stop, __ATOMIC_SEQ_CST) || now_ms() - start > cap)) flag = 1;
            f = reduce_once(w, sl, it, it % 4 == 3 ? 65536 : 1024, flag);
            if (f < 0) break;
            __atomic_store_n(&sl->iters, it + 1, __ATOMIC_SEQ_CST);
            if (f) break;
        }
        if (!sl->work_bad) {   /* the store: nothing a stranger said was recorded; it still serves */
            char key[32], val[32], want[32];
            size_t len = 0;
            const char *rej = "dist/rejected";
            int exists = -1;
            if (rank == 0) {
                if ((r = dist_store_check(w, &rej, 1, &exists)) != DIST_OK) rank_bad(sl, "store_check: %s: %s", dist_result_name(r), dist_error_message(w));
                sl->rejected_seen = exists;
            }
            snprintf(key, sizeof key, "auth/%d", rank);
            snprintf(val, sizeof val, "value of %d", rank);
            if ((r = dist_store_set(w, key, val, strlen(val))) != DIST_OK)
                rank_bad(sl, "store_set after the strangers: %s: %s", dist_result_name(r), dist_error_message(w));
            snprintf(key, sizeof key, "auth/%d", (rank + 1) % j->n);
            snprintf(want, sizeof want, "value of %d", (rank + 1) % j->n);
            memset(val, 0, sizeof val);
            if ((r = dist_store_get(w, key, val, sizeof val - 1, &len)) != DIST_OK)
                rank_bad(sl, "store_get after the strangers: %s: %s", dist_result_name(r), dist_error_message(w));
            else if (len != strlen(want) || memcmp(val, want, len) != 0)
                rank_bad(sl, "store_get after the strangers: \"%s\", expected \"%s\"", val, want);
        }
    } else {
        if (reduce_once(w, sl, 0, 4099, 0) == 0) __atomic_store_n(&sl->iters, 1, __ATOMIC_SEQ_CST);
    }
    sl->destroy_res = dist_destroy(w);
    if (sl->destroy_res != DIST_OK) snprintf(sl->msg, sizeof sl->msg, "destroy: %s", dist_error_message(NULL));
    sl->finished = 1;
    exit(0);
}

/* A loopback port free now and not one of the `n` in used. */
static int distinct_port(const int *used, int n) {
    for (int tries = 0; tries < 100; tries++) {
        int p = free_port(AF_INET), dup = 0;
        if (p <= 0) continue;
        for (int i = 0; i < n; i++) dup |= used[i] == p;
        if (!dup) return p;
    }
    return -1;
}

/* A rank of the job (fork_ranks): child_main, which ends with exit().
   The port is the parent's (on Windows this process picked its own
   before it got here). */
static int job_rank(int rank, int port, int lfd, void *arg) {
    job_t *j = (job_t *)arg;
    (void)lfd;
    j->port = port;
    child_main(j, rank);
    return 1;
}

static void start_job(job_t *j, int idx, int deadline_ms) {
    j->slots = g_sh->slots[idx];
    j->ctl = &g_sh->ctl[idx];
    if (first_process()) {   /* (Windows: not again in the ranks, which replay main while other jobs run) */
        memset(j->slots, 0, sizeof(slot_t) * MAXP);
        memset(j->ctl, 0, sizeof *j->ctl);
    }
    if (fork_ranks(j->n, j->pids, j->port, -1, job_rank, j) != 0) { perror("fork"); exit(1); }
    j->deadline = now_ms() + scaled(deadline_ms);
}

/* Waits for every process of the jobs; kills what outlives its job's
   deadline.  (Windows: in a rank replaying main, the jobs before its own
   are the first process's: nothing to wait for.) */
static void wait_jobs(job_t **jobs, int nj) {
    if (!first_process()) return;
    for (;;) {
        int left = 0;
        for (int k = 0; k < nj; k++) {
            job_t *j = jobs[k];
            for (int i = 0; i < j->n; i++) {
                int st = 0;
                if (j->pids[i] <= 0) continue;
                if (waitpid(j->pids[i], &st, WNOHANG) == j->pids[i]) {
                    if (WIFSIGNALED(st)) j->slots[i].signaled = WTERMSIG(st);
                    else if (WIFEXITED(st)) j->slots[i].exit_code = WEXITSTATUS(st);
                    j->pids[i] = 0;
                } else if (now_ms() >= j->deadline) {
                    kill(j->pids[i], SIGKILL);
                    waitpid(j->pids[i], NULL, 0);
                    j->slots[i].hung = 1;
                    j->pids[i] = 0;
                } else {
                    left++;
                }
            }
        }
        if (!left) return;
        sleep_ms(5);
    }
}

static const char *slot_state(const slot_t *sl) {
    if (sl->hung) return "hung (killed at the deadline)";
    if (sl->signaled) return "died of a signal";
    if (!sl->finished) return "exited early";
    if (sl->exit_code) return "finished, but exited with a non-zero status (a sanitizer's report?)";
    return "finished";
}

/* Every rank joined, its checks passed and dist_destroy succeeded. */
static int job_ok(const job_t *j, char *why, size_t cap) {
    for (int i = 0; i < j->n; i++) {
        const slot_t *sl = &j->slots[i];
        if (sl->hung || sl->signaled || !sl->finished || sl->exit_code) {
            snprintf(why, cap, "rank %d %s (init %s)", i, slot_state(sl),
                     sl->init_done ? dist_result_name((dist_result)sl->init_res) : "not returned");
            return 0;
        }
        if (sl->init_res != DIST_OK) {
            snprintf(why, cap, "rank %d: dist_init: %s: %s", i, dist_result_name((dist_result)sl->init_res), sl->msg);
            return 0;
        }
        if (sl->work_bad) { snprintf(why, cap, "rank %d: %s", i, sl->why); return 0; }
        if (sl->iters < 1) { snprintf(why, cap, "rank %d did no all_reduce", i); return 0; }
        if (sl->destroy_res != DIST_OK) {
            snprintf(why, cap, "rank %d: dist_destroy: %s: %s", i, dist_result_name((dist_result)sl->destroy_res), sl->msg);
            return 0;
        }
    }
    return 1;
}

/* ---- 2. jobs with mismatched secrets ------------------------------------------------ */

/* A job that cannot form: the ranks in `bad` (a bit each) fail promptly with
   DIST_ERR_INIT and a message containing each of `want` (NULL-ended); the
   others fail promptly too (the store gives up on a rank whose process
   could not prove the secret once every other rank has joined), with
   DIST_ERR_INIT and a message containing each of `others_want`. */
typedef struct failcase {
    job_t job;
    unsigned bad;
    const char *want[3];
    const char *others_want[3];
} failcase_t;

static void judge_failcase(failcase_t *fc) {
    job_t *j = &fc->job;
    long prompt = scaled(1500), late = (long)j->timeout_ms + scaled(2000);
    char why[1024] = "", shown[DIST__ERRLEN + 200] = "";
    int good = 1;
    for (int i = 0; i < j->n && good; i++) {
        const slot_t *sl = &j->slots[i];
        if (sl->hung || sl->signaled || !sl->finished || sl->exit_code) {
            snprintf(why, sizeof why, "rank %d %s (init %s, %ld ms)", i, slot_state(sl),
                     sl->init_done ? dist_result_name((dist_result)sl->init_res) : "not returned", sl->init_done ? sl->init_ms : -1L);
            good = 0;
        } else if (sl->init_res == DIST_OK) {
            snprintf(why, sizeof why, "rank %d: dist_init succeeded", i);
            good = 0;
        } else if (fc->bad & (1u << i)) {
            if (sl->init_res != DIST_ERR_INIT) {
                snprintf(why, sizeof why, "rank %d: dist_init returned %s, expected DIST_ERR_INIT: %s", i,
                         dist_result_name((dist_result)sl->init_res), sl->msg);
                good = 0;
            } else if (sl->init_ms > prompt) {
                snprintf(why, sizeof why, "rank %d failed only after %ld ms (limit %ld ms, timeout %d ms): %s", i, sl->init_ms, prompt, j->timeout_ms, sl->msg);
                good = 0;
            }
            for (int k = 0; good && fc->want[k]; k++)
                if (!strstr(sl->msg, fc->want[k])) {
                    snprintf(why, sizeof why, "rank %d's message lacks \"%s\": %s", i, fc->want[k], sl->msg);
                    good = 0;
                }
            if (good && !shown[0]) snprintf(shown, sizeof shown, "rank %d in %ld ms: %s", i, sl->init_ms, sl->msg);
        } else if (sl->init_ms > late || (fc->others_want[0] && sl->init_ms > prompt)) {
            snprintf(why, sizeof why, "rank %d failed only after %ld ms (limit: %s): %s", i, sl->init_ms,
                     fc->others_want[0] ? "promptly" : "timeout + 2 s", sl->msg);
            good = 0;
        } else {
            for (int k = 0; good && fc->others_want[k]; k++)
                if (!strstr(sl->msg, fc->others_want[k]) || sl->init_res != DIST_ERR_INIT) {
                    snprintf(why, sizeof why, "rank %d (%s): its message lacks \"%s\": %s", i, dist_result_name((dist_result)sl->init_res),
                             fc->others_want[k], sl->msg);
                    good = 0;
                }
        }
    }
    if (good) {
        char others[1200] = "";
        int off = 0;
        for (int i = 0; i < j->n && off < (int)sizeof others - 1; i++)
            if (!(fc->bad & (1u << i)))
                off += snprintf(others + off, sizeof others - (size_t)off, "\n       rank %d %s in %ld ms: %s", i,
                                dist_result_name((dist_result)j->slots[i].init_res), j->slots[i].init_ms, j->slots[i].msg);
        ok("%s\n       %s%s", j->name, shown, others);
    } else {
        fail(j->name, "%s", why);
    }
}

static void check_jobs(void) {
    int ports[8] = { 0 }, np = 0;
    job_t a, d;
    failcase_t fc[4];
    job_t *all[4];
    char why[1024];
    long t0;

    /* a and d side by side */
    memset(&a, 0, sizeof a);
    a.name = "2a: 3 ranks, one secret (cfg.secret on 0 and 2, DIST_SECRET on 1; rank 2's cfg.secret wins over a wrong DIST_SECRET): all_reduce exact, destroy";
    a.n = 3; a.timeout_ms = scaled(3000); a.mode = W_ONCE;
    a.secret[0] = SECRET; a.env_secret[1] = SECRET; a.secret[2] = SECRET; a.env_secret[2] = OTHER;
    memset(&d, 0, sizeof d);
    d.name = "2d: 3 ranks, no secret anywhere: all_reduce exact, destroy";
    d.n = 3; d.timeout_ms = scaled(3000); d.mode = W_ONCE;
    a.port = distinct_port(ports, np); ports[np++] = a.port;
    d.port = distinct_port(ports, np); ports[np++] = d.port;
    t0 = now_ms();
    start_job(&a, 0, 8000);
    start_job(&d, 1, 8000);
    all[0] = &a; all[1] = &d;
    wait_jobs(all, 2);
    if (job_ok(&a, why, sizeof why)) ok("%s", a.name); else fail(a.name, "%s", why);
    if (job_ok(&d, why, sizeof why)) ok("%s", d.name); else fail(d.name, "%s", why);
    printf("     (2a and 2d: %.2f s)\n", (now_ms() - t0) / 1000.0);

    /* the four jobs that cannot form, side by side */
    memset(fc, 0, sizeof fc);
    fc[0].job.name = "2b: rank 2 has another secret: it fails promptly (DIST_ERR_INIT, about the secret), ranks 0 and 1 promptly too, naming it";
    fc[0].job.secret[0] = SECRET; fc[0].job.secret[1] = SECRET; fc[0].job.secret[2] = OTHER;
    fc[0].bad = 1u << 2;
    fc[0].want[0] = "secret";
    fc[0].want[1] = "rank 2";
    fc[0].others_want[0] = "rank 2 could not prove the job's secret";
    fc[1].job.name = "2b': rank 0 (the store) has another secret: ranks 1 and 2 fail promptly, rank 0 promptly too, naming them";
    fc[1].job.secret[0] = OTHER; fc[1].job.secret[1] = SECRET; fc[1].job.secret[2] = SECRET;
    fc[1].bad = (1u << 1) | (1u << 2);
    fc[1].want[0] = "does not know the job's secret";
    fc[1].others_want[0] = "ranks 1, 2 could not prove the job's secret";
    fc[2].job.name = "2c: rank 2 has no secret, ranks 0 and 1 have one: rank 2 says the store has a secret and it has none";
    fc[2].job.secret[0] = SECRET; fc[2].job.secret[1] = SECRET;
    fc[2].bad = 1u << 2;
    fc[2].want[0] = "it has a secret and this job has none";
    fc[2].want[1] = "DIST_SECRET";
    fc[2].others_want[0] = "rank 2 could not prove the job's secret";
    fc[3].job.name = "2c': rank 2 has a secret, ranks 0 and 1 none: rank 2 says the store has no secret and it requires one";
    fc[3].job.secret[2] = SECRET;
    fc[3].bad = 1u << 2;
    fc[3].want[0] = "it has no secret and this job requires one";
    fc[3].others_want[0] = "rank 2 could not prove the job's secret";
    t0 = now_ms();
    for (int k = 0; k < 4; k++) {
        fc[k].job.n = 3;
        fc[k].job.timeout_ms = scaled(3000);
        fc[k].job.mode = W_ONCE;
        fc[k].job.port = distinct_port(ports, np);
        ports[np++] = fc[k].job.port;
        all[k] = &fc[k].job;
        start_job(&fc[k].job, k, 8000);
    }
    wait_jobs(all, 4);
    for (int k = 0; k < 4; k++) judge_failcase(&fc[k]);
    printf("     (2b, 2b', 2c, 2c': %.2f s)\n", (now_ms() - t0) / 1000.0);
}

/* ---- strangers: sockets ------------------------------------------------------------- */

/* tcp_connect, send_all, recv_n (R_FULL, R_EOF, R_TIMEOUT), read_refusal and
   listening_ports are testutil.h's. */

/* After the store's verdict: the connection is closed before the deadline
   (1) with nothing more sent; 0 otherwise (why in `why`). */
static int expect_close(int fd, long deadline, char *why, size_t cap) {
    uint8_t b[64];
    size_t got = 0;
    int r = recv_n(fd, b, sizeof b, deadline, &got);
    if (r == R_EOF && got == 0) return 1;
    if (r == R_TIMEOUT) snprintf(why, cap, "the connection stayed open after the refusal");
    else snprintf(why, cap, "%zu more bytes after the refusal", got);
    return 0;
}

/* ---- 3. strangers at the store --------------------------------------------------------- */

enum { ST_WRONG_KEY, ST_NO_SECRET, ST_REFLECT };

/* A stranger that speaks the protocol: hello (with `key`, claiming rank 1),
   reads the store's hello and proof, checks that proof, then sends a proof
   (made with `key`, or the store's own proof sent back), and must be
   refused with a reason containing `want`. */
static void store_stranger(int port, int kind, const dist__key *right, const char *name, const char *want) {
    dist__key key;
    dist__hello h;
    uint8_t mine[DIST__HELLO_SIZE], in[DIST__HELLO_SIZE + DIST__PROOF_SIZE], proof[DIST__PROOF_SIZE];
    char why[300], reason[400], extra[300] = "";
    size_t got = 0;
    long t0 = now_ms(), deadline = t0 + scaled(3000);
    int fd = tcp_connect(port), r;
    if (fd < 0) { fail(name, "cannot connect to the store on port %d: %s", port, strerror(errno)); return; }
    dist__key_from(kind == ST_NO_SECRET ? NULL : OTHER, &key);
    dist__hello_make(&h, DIST__PURPOSE_STORE, 0, 1, 3, &key, mine);
    if (send_all(fd, mine, sizeof mine) != 0) { fail(name, "send hello: %s", strerror(errno)); close(fd); return; }
    if ((r = recv_n(fd, in, sizeof in, deadline, &got)) != R_FULL) {
        fail(name, "the store's hello and proof: %s after %zu bytes", r == R_EOF ? "closed" : "no answer in time", got);
        close(fd);
        return;
    }
    if (dist__hello_decode(in, &h, why, sizeof why) != 0 || h.status != 0 || h.purpose != DIST__PURPOSE_STORE ||
        !(h.flags & DIST__HELLO_SECRET)) {
        fail(name, "the store's hello: %s (status %d, purpose %u, flags %u)", why, (int)h.status, (unsigned)h.purpose, (unsigned)h.flags);
        close(fd);
        return;
    }
    /* The stranger cannot verify the store; with the job's secret one can. */
    if (dist__proof_check(&key, 'A', in, mine, in + DIST__HELLO_SIZE, why, sizeof why) == 0) {
        fail(name, "the store's proof verifies under the stranger's key");
        close(fd);
        return;
    }
    if (dist__proof_check(right, 'A', in, mine, in + DIST__HELLO_SIZE, why, sizeof why) != 0) {
        fail(name, "the store's proof does not verify under the job's secret: %s", why);
        close(fd);
        return;
    }
    if (kind == ST_REFLECT) memcpy(proof, in + DIST__HELLO_SIZE, sizeof proof);
    else dist__proof(&key, 'C', mine, in, proof);
    if (send_all(fd, proof, sizeof proof) != 0) { fail(name, "send proof: %s", strerror(errno)); close(fd); return; }
    r = read_refusal(fd, deadline, reason, sizeof reason);
    if (r == 1 && strstr(reason, want) && strstr(reason, "secret") && expect_close(fd, deadline, extra, sizeof extra))
        ok("%s: refused in %ld ms: \"%s\"", name, now_ms() - t0, reason);
    else if (r == 1)
        fail(name, "refusal \"%s\" (wanted \"%s\")%s%s", reason, want, extra[0] ? "; " : "", extra);
    else
        fail(name, "%s", r == 0 ? "closed without a refusal" : reason);
    close(fd);
}

/* A stranger sending 80 bytes that are no hello: refused or closed, promptly. */
static void junk_stranger(int port, const uint8_t *junk, const char *name) {
    char reason[400], extra[300] = "";
    long t0 = now_ms(), deadline = t0 + scaled(3000);
    int fd = tcp_connect(port), r;
    if (fd < 0) { fail(name, "cannot connect to the store: %s", strerror(errno)); return; }
    if (send_all(fd, junk, DIST__HELLO_SIZE) != 0) { fail(name, "send: %s", strerror(errno)); close(fd); return; }
    r = read_refusal(fd, deadline, reason, sizeof reason);
    if (r == 1 && expect_close(fd, deadline, extra, sizeof extra)) ok("%s: refused in %ld ms: \"%s\"", name, now_ms() - t0, reason);
    else if (r == 0) ok("%s: closed in %ld ms", name, now_ms() - t0);
    else fail(name, "%s%s%s", reason, extra[0] ? "; " : "", extra);
    close(fd);
}

static void check_store_strangers(void) {
    job_t j;
    job_t *all[1] = { &j };
    dist__key right;
    char why[1024], name[200];
    uint8_t junk[DIST__HELLO_SIZE];
    long t0, ready_by, it_before, it_after, silent_t0, silent2_t0, silent2_closed = -1;
    int silent, silent2;
    static const char http[] = "GET / HTTP/1.0\r\n\r\n";

    dist__key_from(SECRET, &right);
    memset(&j, 0, sizeof j);
    j.name = "3: a 3-rank job with a secret runs all_reduces while strangers knock at the store";
    j.n = 3; j.timeout_ms = scaled(3000); j.mode = W_LOOP;
    j.secret[0] = j.secret[1] = j.secret[2] = SECRET;
    j.port = distinct_port(NULL, 0);
    t0 = now_ms();
    start_job(&j, 0, 20000);
    if (!first_process()) return;   /* (Windows: a rank of a later job, replaying main) */
    ready_by = now_ms() + scaled(5000);
    while (__atomic_load_n(&j.ctl->ready, __ATOMIC_SEQ_CST) < j.n && now_ms() < ready_by) {
        int st;
        for (int i = 0; i < j.n; i++) if (j.pids[i] > 0 && waitpid(j.pids[i], &st, WNOHANG) == j.pids[i]) j.pids[i] = 0;
        sleep_ms(5);
    }
    if (__atomic_load_n(&j.ctl->ready, __ATOMIC_SEQ_CST) < j.n) {
        j.ctl->stop = 1;
        wait_jobs(all, 1);
        fail(j.name, "the job did not form: %s", job_ok(&j, why, sizeof why) ? "?" : why);
        return;
    }
    it_before = __atomic_load_n(&j.slots[0].iters, __ATOMIC_SEQ_CST);

    /* (iii) silent for 1 s while the others come and go; a second one stays
       silent until the store drops it */
    silent_t0 = now_ms();
    silent = tcp_connect(j.port);
    silent2_t0 = now_ms();
    silent2 = tcp_connect(j.port);
    if (silent < 0 || silent2 < 0) fail("3(iii) silent stranger", "cannot connect: %s", strerror(errno));

    store_stranger(j.port, ST_WRONG_KEY, &right, "3(i) stranger with a wrong key (its own proof of the store fails, the job's secret verifies it)",
                   "does not know the job's secret");
    store_stranger(j.port, ST_NO_SECRET, &right, "3(i') stranger with no secret", "it has no secret and this job requires one");
    store_stranger(j.port, ST_REFLECT, &right, "3(v) stranger sending the store's own proof back", "does not know the job's secret");
    memset(junk, 0, sizeof junk);
    memcpy(junk, http, sizeof http - 1);
    junk_stranger(j.port, junk, "3(ii) stranger sending \"GET / HTTP/1.0\" padded to 80 bytes");
    fill_bytes(junk, sizeof junk, 0x5eed5eedull);
    if (dist__get32(junk) == DIST__MAGIC) junk[0] ^= 1;
    junk_stranger(j.port, junk, "3(iv) stranger sending 80 random bytes");

    if (silent >= 0) {
        uint8_t b[16];
        size_t got = 0;
        long left = silent_t0 + 1000 - now_ms();
        int r = recv_n(silent, b, sizeof b, now_ms() + (left > 0 ? left : 0), &got);
        if (r == R_TIMEOUT && got == 0) ok("3(iii) stranger silent for 1 s: nothing sent to it, the store served the others meanwhile; closed");
        else fail("3(iii) silent stranger", "%s within 1 s (%zu bytes)", r == R_EOF ? "closed by the store" : "got data", got);
        close(silent);
    }
    it_after = __atomic_load_n(&j.slots[0].iters, __ATOMIC_SEQ_CST);
    if (it_after > it_before) ok("3: the job kept going while the strangers were served (%ld all_reduces during them)", it_after - it_before);
    else fail(j.name, "no all_reduce completed while the strangers were served");

    /* the second silent stranger: dropped by the store within its hello
       deadline (the job's timeout here) + 2 s; the job runs on meanwhile */
    if (silent2 >= 0) {
        uint8_t b[16];
        size_t got = 0;
        int r = recv_n(silent2, b, sizeof b, silent2_t0 + j.timeout_ms + scaled(2000), &got);
        silent2_closed = now_ms() - silent2_t0;
        if (r == R_EOF && got == 0) ok("3(iii') a stranger that never speaks is dropped by the store after %ld ms (timeout %d ms)", silent2_closed, j.timeout_ms);
        else fail("3(iii') silent stranger", "%s after %ld ms (%zu bytes)", r == R_TIMEOUT ? "still open" : "got data", silent2_closed, got);
        close(silent2);
    }
    /* the loop runs at least 2 s */
    while (now_ms() - t0 < 2000) sleep_ms(10);
    __atomic_store_n(&j.ctl->stop, 1, __ATOMIC_SEQ_CST);
    wait_jobs(all, 1);
    if (job_ok(&j, why, sizeof why))
        ok("%s: %ld all_reduces, each exact on every rank; store set/get still work; dist_destroy OK on all ranks (%.2f s)", j.name,
           j.slots[0].iters, (now_ms() - t0) / 1000.0);
    else fail(j.name, "%s", why);
    if (j.slots[0].finished && j.slots[0].rejected_seen == 0)
        ok("3: no stranger's refusal was recorded in the store (\"dist/rejected\" unset)");
    else if (j.slots[0].finished)
        fail("3 store record", "\"dist/rejected\" %s after the strangers", j.slots[0].rejected_seen == 1 ? "exists" : "could not be checked");
    {
        const char *log = j.slots[0].log;
        int refused = count_in(log, "store refused a client"), wrong = count_in(log, "does not know the job's secret"),
            none = count_in(log, "it has no secret and this job requires one"), junkn = count_in(log, "is not a dist rank");
        snprintf(name, sizeof name, "3: rank 0 logged each refusal (WARN \"store refused a client\")");
        if (refused >= 5 && wrong >= 2 && none >= 1 && junkn >= 2) ok("%s: %d lines", name, refused);
        else fail(name, "%d refusals (%d wrong secret, %d no secret, %d not a dist rank) in rank 0's log:\n%s", refused, wrong, none, junkn, log);
    }
}

/* ---- 5. strangers at a rank's mesh port during dist_init -------------------------------- */

enum { MS_WRONG_KEY, MS_REFLECT, MS_NO_SECRET, MS_WRONG_JOB };

/* Connects to rank 0's mesh port as a stranger claiming rank 2 and expects
   to be dropped.  Returns 1 when it went as expected. */
static int mesh_stranger(int port, int kind, const dist__key *right, char *what, size_t cap) {
    dist__key key;
    dist__hello h;
    uint8_t theirs[DIST__HELLO_SIZE], mine[DIST__HELLO_SIZE], proof[DIST__PROOF_SIZE], extra[16];
    char why[300];
    size_t got = 0;
    long t0 = now_ms(), deadline = t0 + scaled(3000);
    int fd = tcp_connect(port), r;
    if (fd < 0) { snprintf(what, cap, "cannot connect: %s", strerror(errno)); return 0; }
    /* the accepting rank greets first */
    if ((r = recv_n(fd, theirs, sizeof theirs, deadline, &got)) != R_FULL) {
        snprintf(what, cap, "rank 0's hello: %s after %zu bytes", r == R_EOF ? "closed" : "nothing in time", got);
        close(fd);
        return 0;
    }
    if (dist__hello_decode(theirs, &h, why, sizeof why) != 0 || h.purpose != DIST__PURPOSE_MESH || h.rank != 0 || h.world != 3 ||
        !(h.flags & DIST__HELLO_SECRET)) {
        snprintf(what, cap, "rank 0's hello: %s (purpose %u, rank %d, world %d, flags %u)", why, (unsigned)h.purpose, (int)h.rank,
                 (int)h.world, (unsigned)h.flags);
        close(fd);
        return 0;
    }
    dist__key_from(kind == MS_NO_SECRET ? NULL : OTHER, &key);
    dist__hello_make(&h, DIST__PURPOSE_MESH, kind == MS_WRONG_JOB ? h.job ^ 1 : h.job, 2, 3, &key, mine);
    if (send_all(fd, mine, sizeof mine) != 0) { snprintf(what, cap, "send hello: %s", strerror(errno)); close(fd); return 0; }
    if (kind == MS_WRONG_JOB) {   /* dropped before any proof */
        r = recv_n(fd, proof, sizeof proof, deadline, &got);
        close(fd);
        if (r == R_EOF && got == 0) { snprintf(what, cap, "dropped before any proof in %ld ms", now_ms() - t0); return 1; }
        snprintf(what, cap, "%s (%zu bytes)", r == R_TIMEOUT ? "left open" : "got data back", got);
        return 0;
    }
    if ((r = recv_n(fd, proof, sizeof proof, deadline, &got)) != R_FULL) {
        snprintf(what, cap, "rank 0's proof: %s after %zu bytes", r == R_EOF ? "closed" : "nothing in time", got);
        close(fd);
        return 0;
    }
    if (dist__proof_check(right, 'A', theirs, mine, proof, why, sizeof why) != 0) {
        snprintf(what, cap, "rank 0's proof does not verify under the job's secret: %s", why);
        close(fd);
        return 0;
    }
    if (dist__proof_check(&key, 'A', theirs, mine, proof, why, sizeof why) == 0) {
        snprintf(what, cap, "rank 0's proof verifies under the stranger's key");
        close(fd);
        return 0;
    }
    if (kind != MS_REFLECT) dist__proof(&key, 'C', mine, theirs, proof);
    if (send_all(fd, proof, sizeof proof) != 0) { snprintf(what, cap, "send proof: %s", strerror(errno)); close(fd); return 0; }
    r = recv_n(fd, extra, sizeof extra, deadline, &got);
    close(fd);
    if (r == R_EOF && got == 0) { snprintf(what, cap, "rank 0's proof verified under the job's secret; dropped in %ld ms", now_ms() - t0); return 1; }
    snprintf(what, cap, "after our proof: %s (%zu bytes)", r == R_TIMEOUT ? "left open" : "got data", got);
    return 0;
}

static void check_mesh_strangers(void) {
    job_t j;
    job_t *all[1] = { &j };
    dist__key right;
    char why[1024], what[400];
    int ports[8], np = -1, mesh_port = -1;
    long t0, until;
    static const struct { int kind; const char *name; } ms[] = {
        { MS_WRONG_KEY, "5: mesh stranger with a wrong key" },
        { MS_REFLECT,   "5: mesh stranger sending rank 0's own proof back" },
        { MS_NO_SECRET, "5: mesh stranger with no secret" },
        { MS_WRONG_JOB, "5: mesh stranger with a wrong job id" },
    };

    dist__key_from(SECRET, &right);
    memset(&j, 0, sizeof j);
    j.name = "5: strangers at rank 0's mesh port during dist_init, then rank 2 joins: all_reduce exact, destroy";
    j.n = 3; j.timeout_ms = scaled(6000); j.mode = W_HOLD;
    j.secret[0] = j.secret[1] = j.secret[2] = SECRET;
    j.port = distinct_port(NULL, 0);
    t0 = now_ms();
    start_job(&j, 0, 20000);
    /* rank 0's listening ports: the store's and, once it waits for the mesh, its own */
    until = now_ms() + scaled(4000);
    while (now_ms() < until && mesh_port < 0) {
        np = listening_ports(j.pids[0], ports, 8);
        if (np < 0) break;
        for (int i = 0; i < np; i++) if (ports[i] != j.port) mesh_port = ports[i];
#ifdef _WIN32
        /* (not a port rank 0 listens on for a moment to make a wake-up pair) */
        if (mesh_port >= 0 && !still_listening((int)j.pids[0], mesh_port, 20)) mesh_port = -1;
#endif
        if (mesh_port < 0) sleep_ms(10);
    }
    if (mesh_port < 0) {
        __atomic_store_n(&j.ctl->go, 1, __ATOMIC_SEQ_CST);
        wait_jobs(all, 1);
        if (np < 0) printf("note 5: /proc/%d/fd cannot be read here; the mesh strangers are left out\n", (int)j.pids[0]);
        else fail(j.name, "rank 0's mesh port did not show in /proc within %d ms", scaled(4000));
        return;
    }
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        what[0] = 0;
        if (mesh_stranger(mesh_port, ms[k].kind, &right, what, sizeof what)) ok("%s: %s", ms[k].name, what);
        else fail(ms[k].name, "%s", what);
    }
    __atomic_store_n(&j.ctl->go, 1, __ATOMIC_SEQ_CST);
    wait_jobs(all, 1);
    if (job_ok(&j, why, sizeof why)) ok("%s (%.2f s)", j.name, (now_ms() - t0) / 1000.0);
    else fail(j.name, "%s", why);
    {
        const char *log = j.slots[0].log;
        int dropped = count_in(log, "mesh: dropped a connection"), wrong = count_in(log, "does not know the job's secret"),
            none = count_in(log, "it has no secret and this job requires one"), job = count_in(log, "another job");
        if (dropped >= 4 && wrong >= 2 && none >= 1 && job >= 1)
            ok("5: rank 0 logged each dropped mesh stranger (%d WARN lines: %d wrong secret, %d no secret, %d another job)", dropped, wrong, none, job);
        else fail("5: rank 0's log of the dropped mesh strangers", "%d lines (%d wrong secret, %d no secret, %d another job):\n%s",
                  dropped, wrong, none, job, log);
    }
}

int main(void) {
    long t0;
    test_start();
    t0 = now_ms();
    signal(SIGPIPE, SIG_IGN);
    g_sh = (shared_t *)mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED) { perror("mmap"); return 1; }

    check_sha256();
    check_hmac();
    check_keys();
    check_proofs();
    printf("     (primitives and proofs: %.2f s)\n", (now_ms() - t0) / 1000.0);
    check_jobs();
    check_store_strangers();
    check_mesh_strangers();

    printf("%s: %d check(s) failed (%.1f s)\n", g_failures ? "FAIL" : "PASS", g_failures, (now_ms() - t0) / 1000.0);
    munmap(g_sh, sizeof *g_sh);
    return g_failures ? 1 : 0;
}
