/* fuzz/fuzz_dump.c - the flight recorder's dumps, as a job report reads
   them from the store (any rank, or a stranger who can write the store,
   may have written them).

   The input is up to FUZZ_DUMP_WORLD ranks' dumps separated by 0x01 bytes
   (an empty piece: that rank sent none).  Every piece goes through
   dist__dump_parse (a dump that parses has every field within the limits
   the report relies on), then all of them through dist__report_build into
   a buffer of a size byte 0 chooses: the report must end, NUL-terminated,
   within the buffer.  Committed seeds: fuzz/corpus/fuzz_dump (a real
   8-rank report's dumps). */
#define FUZZ_TARGET
#include "fuzz.h"
#define DIST_IMPLEMENTATION
#include "dist.h"

#define FUZZ_DUMP_WORLD 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *texts[FUZZ_DUMP_WORLD] = { 0 };
    size_t lens[FUZZ_DUMP_WORLD] = { 0 };
    char out[8192];
    size_t cap, off = 1, n;
    int k = 0;
    if (size < 1) return 0;
    cap = 1 + (size_t)data[0] * 32;          /* 1 .. 8161 bytes */
    while (off <= size && k < FUZZ_DUMP_WORLD) {
        const uint8_t *end = off < size ? (const uint8_t *)memchr(data + off, 1, size - off) : NULL;
        size_t len = (end ? (size_t)(end - data) : size) - off;
        if (len) {
            dist__dump d;
            texts[k] = (char *)malloc(len + 1);
            if (!texts[k]) break;
            memcpy(texts[k], data + off, len);
            texts[k][len] = 0;
            lens[k] = len;
            if (dist__dump_parse(texts[k], len, &d) == 0) {
                for (int i = 0; i < d.nops; i++) {
                    const dist__dop *x = &d.ops[i];
                    FUZZ_CHECK(x->dtype >= 0 && x->dtype < DIST_DTYPE_COUNT);
                    FUZZ_CHECK(x->peer >= -1 && x->peer < d.world && x->waiting_on >= -1 && x->waiting_on < d.world);
                    FUZZ_CHECK(x->type != 'c' || (x->kind > DIST__COLL_NONE && x->kind < DIST__COLL_KINDS));
                }
                FUZZ_CHECK(d.rank >= 0 && d.rank < d.world && d.ncomms <= 64);
            }
            DIST_FREE(d.ops);
        }
        k++;
        if (!end) break;
        off = (size_t)(end - data) + 1;
    }
    memset(out, 0x5a, sizeof out);
    n = dist__report_build(FUZZ_DUMP_WORLD, texts, lens, -1, NULL, out, cap);
    FUZZ_CHECK(n < cap && out[n] == 0 && strlen(out) == n);
    for (int i = 0; i < FUZZ_DUMP_WORLD; i++) free(texts[i]);
    return 0;
}
