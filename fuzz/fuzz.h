/* fuzz/fuzz.h - what the fuzz targets and the seed generator share.

   The layout of each target's input (the seed generator writes inputs in
   it), and, in a target (FUZZ_TARGET defined before this header, and this
   header before dist.h), the allocator dist.h uses, the log sink, and
   small checks.

   Allocations above FUZZ_ALLOC_CAP fail (return NULL) instead of asking
   for the gigabytes a header may claim: the library must then report "out
   of memory" cleanly, and libFuzzer's malloc limit does not mistake a
   claimed size for a leak of memory. */
#ifndef DIST_FUZZ_H
#define DIST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- fuzz_hello: the handshake --------------------------------------------
   byte 0   flags (FUZZ_HELLO_*)
   byte 1   bytes per delivery to the mesh handshake (0: all at once)
   byte 2   the fuzzed side's rank; world size is FUZZ_HELLO_WORLD
   rest     the peer's bytes: hello (80), proof (32), whatever follows */
#define FUZZ_HELLO_MESH       0x01u  /* run dist__mesh_handshake on the bytes */
#define FUZZ_HELLO_STORE      0x02u  /* run the store client's hello exchange */
#define FUZZ_HELLO_SECRET     0x04u  /* this side has a secret */
#define FUZZ_HELLO_ACCEPTED   0x08u  /* mesh: this side accepted (else it connected) */
#define FUZZ_HELLO_ASSIST     0x10u  /* the harness follows the peer's hello with a valid proof */
#define FUZZ_HELLO_TAKEN      0x20u  /* mesh: the peer's rank is connected already */
#define FUZZ_HELLO_WORLD      4
#define FUZZ_HELLO_JOB        0x0123456789abcdefull
#define FUZZ_SECRET           "fuzz-secret"

/* ---- fuzz_frame: a peer's byte stream into the progress engine -------------
   byte 0   flags (FUZZ_FRAME_*)
   byte 1   TCP: bytes per write (0: all at once); shared memory: where in
            the ring the stream starts (x 61, to cross the ring's end)
   byte 2   number of receives to post (low 2 bits, 0..3), then per
            receive FUZZ_FRAME_RECV_SIZE bytes:
              0 FUZZ_RECV_* bits   1 tag (DATA) or sequence (COLL)
              2 dtype              3 count
              4 COLL only: op (bits 0-2, modulo the ops), collective
                (1 + bits 3-6, modulo the kinds), algorithm (bit 7)
   rest     the stream from rank 1 (this side is rank 0 of FUZZ_FRAME_WORLD)

   The world communicator has id 0, the group {0, 1} id FUZZ_FRAME_GROUP.
   With FUZZ_FRAME_COLL_STATE the world has finished collective 3 (an
   all_reduce of 4 x float32, sum) and runs collective 4 (the same).
   Rank 1 has granted this side a budget of 64 KiB (its first CREDIT);
   announcements by rank 1 carry rendezvous ids it chooses, payloads by
   reference point at FUZZ_REF_ADDR. */
#define FUZZ_FRAME_SHM        0x01u  /* over a shared-memory ring (else a TCP socket) */
#define FUZZ_FRAME_EOF        0x02u  /* the peer closes after the stream */
#define FUZZ_FRAME_COLL_STATE 0x04u  /* collectives done and active, as above */
#define FUZZ_FRAME_ACK_WAIT   0x08u  /* sends to rank 1 wait: announced by reference (shm; for its ACK) or for
                                        its CTS (TCP; sid 1), one queued for credit, one pulled ahead (PULL) */
#define FUZZ_FRAME_SLEEPING   0x10u  /* shm: the peer sleeps (doorbells are sent) */
#define FUZZ_FRAME_TIGHT      0x20u  /* rank 1's flow-control budget here is 4 KiB (else 1 MiB) */
#define FUZZ_FRAME_WORLD      3
#define FUZZ_FRAME_GROUP      7u
#define FUZZ_FRAME_RECV_SIZE  5
#define FUZZ_RECV_COLL        0x01u  /* a collective's receive (else point-to-point) */
#define FUZZ_RECV_GROUP       0x02u  /* on the group (else the world) */
#define FUZZ_RECV_ANY         0x04u  /* from any source (point-to-point) */
#define FUZZ_RECV_LATE        0x08u  /* posted after the stream (meets unexpected messages) */
#define FUZZ_RECV_REDUCE      0x10u  /* combines what arrives (collective) */
#define FUZZ_RECV_IN_FIRST    0x20u  /* ...as op(incoming, buffer) */
/* By-reference payloads (shared memory) point into the sender's memory;
   here the sender is this process, and this region holds 0..255 repeated. */
#define FUZZ_REF_ADDR         ((uint64_t)0x40000000u)
#define FUZZ_REF_BYTES        ((size_t)1 << 20)

/* ---- fuzz_store: the store server and its client -------------------------
   byte 0   flags (FUZZ_STORE_*)
   byte 1   server: world size (1 + low 2 bits); client: which call
   rest     server: records, each a byte (bit 7: connection 1, else 0;
            low 7 bits: length, 0 = the rest of the input) and that many
            bytes delivered to that connection.  client: the store's
            replies, then the end of the stream. */
#define FUZZ_STORE_CLIENT     0x01u  /* fuzz the client (else the server) */
#define FUZZ_STORE_SECRET     0x02u  /* the job has a secret */
#define FUZZ_STORE_C0_JOINED  0x04u  /* connection 0 is past the handshake (rank 0) */
#define FUZZ_STORE_C1_JOINED  0x08u  /* connection 1 is past the handshake (rank 1 % world) */
#define FUZZ_STORE_ASSIST     0x10u  /* connection 0: the harness follows its hello with a valid proof */
enum { FUZZ_CALL_SET, FUZZ_CALL_GET, FUZZ_CALL_ADD, FUZZ_CALL_WAIT, FUZZ_CALL_CHECK, FUZZ_CALL_CAS,
       FUZZ_CALL_DELETE, FUZZ_CALL_RENDEZVOUS, FUZZ_CALL_COUNT };

/* ---- fuzz_shm: the shared-memory handshake's segment record --------------
   byte 0   flags (FUZZ_SHM_*)
   bytes 1..2  the segment file's size in 256-byte units (little-endian)
   then     the B record's first 40 bytes (the rest is zero; its pid and
            fd are replaced by this process's and the segment file's), then
            the segment's first bytes (its header; the owner's pid in it is
            replaced by this process's too).  The same bytes after the
            record are also a ring's control words as a peer left them:
            byte 0: the ring has 2^(8 + low 4 bits) bytes; 1..8 head,
            9..16 tail (u64); 17: bytes to read; then bytes to write. */
#define FUZZ_SHM_BAD_FD       0x01u  /* name a descriptor that is not the segment */
#define FUZZ_SHM_REC_BYTES    256

#ifdef FUZZ_TARGET
/* ---- in a target ---------------------------------------------------------- */
#include <stdio.h>

#ifndef FUZZ_ALLOC_CAP
#  define FUZZ_ALLOC_CAP ((size_t)80 << 20)   /* a store value and then some */
#endif
static void *fuzz_malloc(size_t n) { return n > FUZZ_ALLOC_CAP ? NULL : malloc(n); }
static void *fuzz_realloc(void *p, size_t n) { return n > FUZZ_ALLOC_CAP ? NULL : realloc(p, n); }
#define DIST_MALLOC(sz)     fuzz_malloc(sz)
#define DIST_FREE(p)        free(p)
#define DIST_REALLOC(p, sz) fuzz_realloc(p, sz)

/* An invariant the library claims: a failure aborts, so libFuzzer keeps
   the input (also in builds with NDEBUG). */
#define FUZZ_CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); abort(); } } while (0)

/* `s` is a string that ends within `cap` bytes. */
#define FUZZ_CHECK_STR(s, cap) FUZZ_CHECK(memchr((s), 0, (cap)) != NULL)

#endif /* FUZZ_TARGET */
#endif /* DIST_FUZZ_H */
