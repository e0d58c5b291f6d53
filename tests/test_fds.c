// TIMEOUT: 120
// WINDOWS: no, it lowers RLIMIT_NOFILE (ulimit -n), which Windows does not have
/* test_fds.c - a rendezvous that runs out of file descriptors: reported,
   never spun on.

   16 ranks join over TCP (timeout 3 s), each with its descriptor limit
   lowered (setrlimit, as `ulimit -n`) to LIMIT: enough for a rank that
   only connects to the others, not for rank 0, which also hosts the
   store's connections.  Checks:
     - every rank ends within its timeout + 6 s (rank 0 lingers up to 3 s
       for the others);
     - rank 0 fails with a sentence naming the limit ("file descriptors",
       "ulimit -n LIMIT");
     - rank 0 did not spin: its CPU time (user + system, from wait4) is
       under 30% of the timeout (accept failing with EMFILE in a loop took
       a whole core for the whole timeout);
     - the ranks that wait for it and can still reach the store say why
       too (reported; at least one must). */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define N 16
#define LIMIT 30

typedef struct out { int done, res; long ms; char msg[TEST_ERRLEN]; } out_t;
static out_t *g_out;

static void rank_main(int rank, int port, int lfd) {
    dist_config cfg;
    char url[64];
    dist_t *w = NULL;
    struct rlimit rl;
    long t0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, N, rank, scaled(3000), lfd);
    cfg.transport = "tcp";
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = LIMIT;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
    t0 = now_ms();
    g_out[rank].res = dist_init(&w, &cfg);
    g_out[rank].ms = now_ms() - t0;
    snprintf(g_out[rank].msg, sizeof g_out[rank].msg, "%s", g_out[rank].res == DIST_OK ? "" : dist_error_message(NULL));
    if (w) dist_destroy(w);
    g_out[rank].done = 1;
    _exit(0);
}

int main(void) {
    pid_t pid[N];
    struct rusage ru[N];
    int port = 0, lfd, failures = 0, told = 0;
    char want[64];
    long t0;
    test_start();
    g_out = mmap(NULL, sizeof *g_out * N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_out == MAP_FAILED) { perror("mmap"); return 1; }
    memset(g_out, 0, sizeof *g_out * N);
    lfd = listen_loopback(64, &port);
    t0 = now_ms();
    for (int r = 0; r < N; r++) {
        pid[r] = fork();
        if (pid[r] == 0) rank_main(r, port, lfd);
    }
    close(lfd);
    for (int r = 0; r < N; r++) {
        int st;
        memset(&ru[r], 0, sizeof ru[r]);
        while (wait4(pid[r], &st, WNOHANG, &ru[r]) == 0) {
            if (now_ms() - t0 > scaled(3000) + 6000 + 3000) { kill(pid[r], SIGKILL); wait4(pid[r], &st, 0, &ru[r]); break; }
            sleep_ms(10);
        }
    }
    for (int r = 0; r < N; r++) {
        if (!g_out[r].done) { fail("every rank ends", "rank %d did not end within %d ms", r, scaled(3000) + 9000); failures++; }
        else if (g_out[r].ms > scaled(3000) + 6000) { fail("every rank ends", "rank %d took %ld ms", r, g_out[r].ms); failures++; }
        if (r && strstr(g_out[r].msg, "file descriptors")) told++;
    }
    if (!failures) ok("16 ranks with ulimit -n %d: every rank ended within its timeout + 6 s", LIMIT);
    printf("       rank 0: %s after %ld ms: %s\n", dist_result_name((dist_result)g_out[0].res), g_out[0].ms, g_out[0].msg);
    printf("       rank 1: %s after %ld ms: %s\n", dist_result_name((dist_result)g_out[1].res), g_out[1].ms, g_out[1].msg);
    snprintf(want, sizeof want, "ulimit -n %d", LIMIT);
    if (g_out[0].res == DIST_OK || !strstr(g_out[0].msg, "file descriptors") || !strstr(g_out[0].msg, want))
        fail("rank 0 names the limit", "rank 0 said: %s", g_out[0].msg[0] ? g_out[0].msg : "(nothing: it joined)");
    else ok("rank 0 fails naming the limit (\"file descriptors\", \"%s\")", want);
    {
        double cpu = (double)ru[0].ru_utime.tv_sec + ru[0].ru_utime.tv_usec / 1e6 + (double)ru[0].ru_stime.tv_sec + ru[0].ru_stime.tv_usec / 1e6;
        double bound = 0.3 * scaled(3000) / 1000.0;
        if (cpu > bound) fail("rank 0 does not spin", "rank 0 used %.2f s of CPU in %.2f s (bound %.2f s)", cpu, g_out[0].ms / 1000.0, bound);
        else ok("rank 0 does not spin: %.2f s of CPU in %.2f s (bound %.2f s)", cpu, g_out[0].ms / 1000.0, bound);
    }
    if (told == 0) fail("the others say why", "no other rank's sentence mentions file descriptors");
    else ok("%d of the other %d ranks say why (\"file descriptors\")", told, N - 1);
    printf("%s\n", g_failures ? "some checks failed" : "all checks passed");
    return g_failures ? 1 : 0;
}
