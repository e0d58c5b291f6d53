/* tests/topo_rank.c - one rank of tests/test_topo.sh, run inside its host's
   network namespace (env:// from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

   topo_rank bytes DEV   for all_reduce (16 MiB of float32), all_gather
                         (16 MiB of output) and broadcast (16 MiB, root
                         n-1): the first rank of each host reads the bytes
                         its host sent through DEV (/proc/net/dev, inside
                         the namespace) between two barriers around one
                         call, and prints
                           "bytes COLL host H sent S bound B retransmitted R payload P"
                         (S: through DEV, headers and acknowledgements
                         included; R: TCP segments its namespace
                         retransmitted; P: what its connections to other
                         hosts sent, retransmissions left out)
                         with B the bound (all_reduce 2(H-1)/H x 16 MiB,
                         all_gather (H-1)/H, broadcast 1).  Every rank
                         checks its result against a serial reference
                         (integers: exact) and prints "FAIL ..." if not.
   topo_rank loop        16 MiB all_reduces until one fails (at most 600),
                         then prints "failed RANK T_NS RESULT MESSAGE"
                         (T_NS: CLOCK_MONOTONIC, the same clock in every
                         namespace of the machine) and destroys; "done"
                         if none failed.  DIST_TIMEOUT sets the timeout.
   topo_rank now         prints CLOCK_MONOTONIC in ns (for the script).
   Exit status 0 unless something could not run or a check failed. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long long tx_bytes(const char *dev) {
    FILE *f = fopen("/proc/net/dev", "r");
    char line[512], name[64];
    long long v[16], out = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!c) continue;
        *c = ' ';
        if (sscanf(line, " %63s %lld %lld %lld %lld %lld %lld %lld %lld %lld", name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
                   &v[8]) == 10 && strcmp(name, dev) == 0)
            out = v[8];
    }
    fclose(f);
    return out;
}

/* TCP segments this namespace retransmitted (RetransSegs, /proc/net/snmp). */
static long long retrans_segs(void) {
    FILE *f = fopen("/proc/net/snmp", "r");
    char head[1024], vals[1024];
    long long out = -1;
    if (!f) return -1;
    while (fgets(head, sizeof head, f) && fgets(vals, sizeof vals, f)) {
        char *hs, *vs, *h, *v;
        if (strncmp(head, "Tcp:", 4) != 0) continue;
        for (h = strtok_r(head, " \n", &hs), v = strtok_r(vals, " \n", &vs); h && v; h = strtok_r(NULL, " \n", &hs), v = strtok_r(NULL, " \n", &vs))
            if (strcmp(h, "RetransSegs") == 0) out = atoll(v);
        break;
    }
    fclose(f);
    return out;
}

/* Payload bytes this namespace's TCP connections to other hosts have sent,
   retransmissions left out: bytes_sent - bytes_retrans of every
   established socket whose ends have different addresses (ss -tin: the
   kernel's tcp_info).  What the algorithm sent, without the headers and
   acknowledgements that /proc/net/dev also counts (under load the
   receiver acknowledges more often). */
static long long payload_sent(void) {
    FILE *f = popen("ss -tinH 2>/dev/null", "r");
    char line[4096], local[128] = "", peer[128] = "";
    long long out = 0;
    int remote = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (line[0] != ' ' && line[0] != '\t') {        /* State Recv-Q Send-Q Local:Port Peer:Port */
            char st[32];
            remote = sscanf(line, "%31s %*s %*s %127s %127s", st, local, peer) == 3 && strcmp(st, "ESTAB") == 0;
            if (remote) {
                char *lc = strrchr(local, ':'), *pc = strrchr(peer, ':');
                if (lc) *lc = 0;
                if (pc) *pc = 0;
                remote = strcmp(local, peer) != 0 && strncmp(peer, "127.", 4) != 0;
            }
        } else if (remote) {
            const char *b = strstr(line, "bytes_sent:"), *r = strstr(line, "bytes_retrans:");
            if (b) out += atoll(b + 11);
            if (r) out -= atoll(r + 14);
            remote = 0;
        }
    }
    pclose(f);
    return out;
}

static float val(int r, size_t i) { return (float)((int)((i * 2654435761u + (size_t)r * 40503u) % 13) - 6); }

int main(int argc, char **argv) {
    dist_t *w = NULL;
    int rank, n, H, bad = 0;
    size_t S = 16u << 20, N = S / sizeof(float);
    float *a;
    if (argc >= 2 && strcmp(argv[1], "now") == 0) { printf("%lld\n", (long long)mono_ns()); return 0; }
    if (argc < 2 || (strcmp(argv[1], "bytes") == 0 && argc < 3)) { fprintf(stderr, "usage: topo_rank bytes DEV | loop | now\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (dist_init(&w, NULL) != DIST_OK) { printf("FAIL init: %s\n", dist_error_message(NULL)); return 1; }
    rank = dist_rank(w); n = dist_world_size(w); H = dist_node_count(w);
    if ((a = (float *)malloc(S)) == NULL) return 1;
    if (strcmp(argv[1], "loop") == 0) {
        for (size_t i = 0; i < N; i++) a[i] = 0;
        for (int k = 0; k < 600; k++) {
            dist_result r = dist_all_reduce(w, a, N, DIST_FLOAT32, DIST_SUM);
            if (r != DIST_OK) {
                printf("failed %d %lld %s %s\n", rank, (long long)mono_ns(), dist_result_name(r), dist_error_message(w));
                dist_destroy(w);
                return 0;
            }
            if (k == 0) printf("looping %d\n", rank);
        }
        printf("done %d\n", rank);
        dist_destroy(w);
        return 0;
    }
    for (int op = 0; op < 3; op++) {
        static const char *names[] = { "all_reduce", "all_gather", "broadcast" };
        double f = op == 0 ? 2.0 * (H - 1) / H : op == 1 ? (double)(H - 1) / H : 1.0;
        long long before = 0, after = 0, rs0 = 0, rs1 = 0, p0 = 0, p1 = 0;
        size_t blk = N / (size_t)n;
        dist_result r;
        if (op == 0) for (size_t i = 0; i < N; i++) a[i] = val(rank, i);
        if (op == 1) for (size_t i = 0; i < blk; i++) a[(size_t)rank * blk + i] = val(rank, i);
        if (op == 2) for (size_t i = 0; i < N; i++) a[i] = rank == n - 1 ? val(99, i) : 0;
        dist_barrier(w);
        if (dist_local_rank(w) == 0) { before = tx_bytes(argv[2]); rs0 = retrans_segs(); p0 = payload_sent(); }
        dist_barrier(w);
        r = op == 0 ? dist_all_reduce(w, a, N, DIST_FLOAT32, DIST_SUM)
          : op == 1 ? dist_all_gather(w, a + (size_t)rank * blk, a, blk, DIST_FLOAT32)
                    : dist_broadcast(w, a, N, DIST_FLOAT32, n - 1);
        dist_barrier(w);
        if (dist_local_rank(w) == 0) { after = tx_bytes(argv[2]); rs1 = retrans_segs(); p1 = payload_sent(); }
        dist_barrier(w);
        if (r != DIST_OK) { printf("FAIL %s on rank %d: %s\n", names[op], rank, dist_error_message(w)); bad = 1; continue; }
        for (size_t i = 0; i < N; i++) {
            float want = 0;
            if (op == 0) for (int q = 0; q < n; q++) want += val(q, i);
            if (op == 1) want = i / blk < (size_t)n ? val((int)(i / blk), i % blk) : a[i];
            if (op == 2) want = val(99, i);
            if (a[i] != want) { printf("FAIL %s on rank %d: element %zu is %g, want %g\n", names[op], rank, i, a[i], want); bad = 1; break; }
        }
        if (dist_local_rank(w) == 0)
            printf("bytes %s host %d sent %lld bound %.0f retransmitted %lld payload %lld\n", names[op], dist_node(w, rank), after - before,
                   f * (double)(op == 1 ? blk * (size_t)n * 4 : S), rs1 - rs0, p1 - p0);
    }
    dist_destroy(w);
    return bad;
}
