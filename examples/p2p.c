/* p2p.c - point-to-point communication: one rank sends, another receives.

   SMOKE: distrun -n 4 {} --smoke

   Run it (any number of ranks, 2 or more is the interesting case):
      make build/distrun build/examples/p2p && build/distrun -n 4 build/examples/p2p

   This is the "Point-to-Point Communication" section of PyTorch's tutorial
   "Writing Distributed Applications with PyTorch", in C.  The same program
   runs in every process ("rank"); each asks dist_rank() who it is and acts
   accordingly.  The launcher, build/distrun, starts the N copies, tells each
   its rank and where to meet (environment variables), and prefixes every
   line a rank prints with "[RANK] ".

   What it shows:
     1. Blocking dist_send / dist_recv: a token travels once around a ring of
        ranks (0 -> 1 -> ... -> N-1 -> 0); every rank adds its own rank to it
        before passing it on, so rank 0 gets back 0+1+...+(N-1).
     2. Non-blocking dist_isend / dist_irecv: every rank sends an array to
        its right-hand neighbour and receives one from its left-hand
        neighbour at the same time, does other work while the messages
        travel, and then dist_wait()s for both.

   With --smoke it prints nothing but problems and one summary line; either
   way every rank checks what it received against the value it must be
   (computed here, without communication) and exits with status 1 if
   anything is wrong. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <string.h>

#define ARRAY_LEN 4   /* elements in the array of part 2 */

/* Every dist_* call returns DIST_OK (0) or an error code;
   dist_error_message() then holds a sentence saying what went wrong.  A
   failed call is not something a tutorial can carry on from, so stop. */
#define CHECK(call)                                                          \
    do {                                                                     \
        dist_result r_ = (call);                                             \
        if (r_ != DIST_OK) {                                                 \
            fprintf(stderr, "%s failed: %s: %s\n", #call,                    \
                    dist_result_name(r_), dist_error_message(world));        \
            return 1;                                                        \
        }                                                                    \
    } while (0)

static int errors = 0;   /* how many of this rank's checks failed */

static void expect_int(const char *what, long long got, long long want) {
    if (got != want) {
        fprintf(stderr, "WRONG: %s is %lld, expected %lld\n", what, got, want);
        errors++;
    }
}

int main(int argc, char **argv) {
    int smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    /* Every printf below is followed by fflush(stdout): each line reaches
       the launcher as soon as it is printed, so the lines of the ranks come
       out in the order they print them (stdout is a pipe under distrun,
       which would hold everything until exit).  Line buffering, setvbuf's
       _IOLBF, would do it on POSIX systems, but not on Windows, where it
       means full buffering. */

    /* ---- Setup --------------------------------------------------------
       dist_init joins the job.  With a NULL config it reads RANK,
       WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment (what
       distrun sets, like torchrun; "env://" in PyTorch's words), meets the
       other ranks at rank 0's key-value store and connects to every one of
       them.  It returns once all N ranks are connected. */
    dist_t *world = NULL;
    if (dist_init(&world, NULL) != DIST_OK) {
        fprintf(stderr, "dist_init failed: %s\n", dist_error_message(NULL));
        return 1;
    }
    int rank = dist_rank(world);        /* who am I: 0 .. n-1 */
    int n = dist_world_size(world);     /* how many of us */
    int right = (rank + 1) % n;         /* neighbours on a ring */
    int left = (rank - 1 + n) % n;
    if (!smoke && rank == 0) printf("%d rank%s; rank r sends to rank (r+1) %% %d\n", n, n == 1 ? "" : "s", n);
    fflush(stdout);

    /* ---- 1. Blocking point-to-point ------------------------------------
       dist_send(world, buf, count, dtype, dst, tag) sends `count` elements
       of type `dtype` to rank `dst`; dist_recv(world, buf, count, dtype,
       src, tag) waits until that message from `src` has arrived and copies
       it into buf.  The receiver must name the same count and dtype as the
       sender (a mismatch is an error, not a silent truncation).  The tag is
       a number of your choice that keeps different conversations between
       the same two ranks apart.

       "Blocking" means the call returns only when it is safe to touch the
       buffer again: for dist_recv, when the data is in it; for dist_send,
       when the data has been handed over (sent or buffered).  A small
       message goes without waiting for the receiver; a large one (over
       1 MiB by default) waits until the receiver has posted its receive,
       as MPI_Send may.

       Rank 0 starts the token; everyone else first waits for it from the
       left, adds its rank, and passes it right.  Rank 0 receives it last,
       so the ranks take turns even though they all run at once. */
    int token = 0;
    if (rank == 0) {
        CHECK(dist_send(world, &token, 1, DIST_INT32, right, 0));
        CHECK(dist_recv(world, &token, 1, DIST_INT32, left, 0));
        if (!smoke) printf("1. blocking: the token came back from rank %d as %d (= 0+1+...+%d)\n", left, token, n - 1);
        fflush(stdout);
        expect_int("the token back at rank 0", token, (long long)n * (n - 1) / 2);
    } else {
        CHECK(dist_recv(world, &token, 1, DIST_INT32, left, 0));
        /* Independent reference: ranks 0..rank-1 have added themselves. */
        expect_int("the token received", token, (long long)rank * (rank - 1) / 2);
        if (!smoke) printf("1. blocking: got token %d from rank %d, passing %d to rank %d\n", token, left, token + rank, right);
        fflush(stdout);
        token += rank;
        CHECK(dist_send(world, &token, 1, DIST_INT32, right, 0));
    }

    /* ---- 2. Non-blocking point-to-point --------------------------------
       dist_isend and dist_irecv only start a transfer and return at once
       with a request (dist_req_t *).  The transfer proceeds in the
       background (dist.h runs a progress thread) while this rank does
       something else; dist_wait(req) then blocks until it is complete and
       frees the request.  dist_test(req, &done) asks without blocking.

       The rule that comes with this freedom: between dist_isend and its
       dist_wait, do not modify the buffer being sent (it may still be
       being read), and between dist_irecv and its dist_wait, do not read
       the buffer being received into (it may be half written).

       Here every rank sends ARRAY_LEN floats to its right neighbour and
       receives as many from its left neighbour.  Posting the receive
       before the send is a good habit: a message that finds its receive
       already posted goes straight into the user's buffer. */
    float mine[ARRAY_LEN], theirs[ARRAY_LEN];
    for (int i = 0; i < ARRAY_LEN; i++) mine[i] = (float)(10 * rank + i);
    dist_req_t *recv_req = NULL, *send_req = NULL;
    CHECK(dist_irecv(world, theirs, ARRAY_LEN, DIST_FLOAT32, left, 1, &recv_req));
    CHECK(dist_isend(world, mine, ARRAY_LEN, DIST_FLOAT32, right, 1, &send_req));

    /* ...work that does not touch `mine` or `theirs` overlaps the
       transfer.  Ours: compute what we expect to receive, and poll once to
       see whether the message is already here. */
    float expected[ARRAY_LEN];
    for (int i = 0; i < ARRAY_LEN; i++) expected[i] = (float)(10 * left + i);
    int done = 0;
    CHECK(dist_test(recv_req, &done));   /* only asks; still call dist_wait */

    CHECK(dist_wait(send_req));   /* `mine` may be reused from here on */
    CHECK(dist_wait(recv_req));   /* `theirs` is complete from here on */
    if (!smoke)
        printf("2. non-blocking: sent {%g, %g, %g, %g} to rank %d, hold {%g, %g, %g, %g} from rank %d%s\n",
               mine[0], mine[1], mine[2], mine[3], right,
               theirs[0], theirs[1], theirs[2], theirs[3], left,
               done ? " (it had already arrived when we first asked)" : "");
    fflush(stdout);
    for (int i = 0; i < ARRAY_LEN; i++) {
        /* Small integers are exact in float, so == is the right test. */
        if (theirs[i] != expected[i]) {
            fprintf(stderr, "WRONG: element %d received from rank %d is %g, expected %g\n",
                    i, left, theirs[i], expected[i]);
            errors++;
        }
    }

    /* ---- The end -------------------------------------------------------
       Every rank reports how many checks failed to rank 0 (with blocking
       sends, in the spirit of this example), and rank 0 prints the verdict.
       dist_destroy then waits for every rank to get there and closes the
       connections. */
    if (rank == 0) {
        int total = errors;
        for (int src = 1; src < n; src++) {
            int theirs_errors = 0;
            CHECK(dist_recv(world, &theirs_errors, 1, DIST_INT32, src, 2));
            total += theirs_errors;
        }
        if (total == 0)
            printf("p2p%s: all checks passed on %d rank%s\n", smoke ? " smoke" : "", n, n == 1 ? "" : "s");
        else
            printf("p2p%s: %d check%s FAILED across %d rank%s\n", smoke ? " smoke" : "", total, total == 1 ? "" : "s", n, n == 1 ? "" : "s");
    } else {
        CHECK(dist_send(world, &errors, 1, DIST_INT32, 0, 2));
    }
    CHECK(dist_destroy(world));
    return errors == 0 ? 0 : 1;
}
