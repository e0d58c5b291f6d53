/* rpc_autograd.c - distributed autograd in its smallest form: two tensors
   that live on another process, a loss computed here, gradients that flow
   back to where the tensors live, and an optimizer step that runs there.

   SMOKE: distrun -n 2 {} --smoke

   Build and run it (two processes on this machine):
      make build/distrun build/examples/rpc_autograd
      build/distrun -n 2 build/examples/rpc_autograd            # prints
      build/distrun -n 2 build/examples/rpc_autograd --smoke    # checks too

   This is the example of PyTorch's "Distributed Autograd Design" page,
   step for step:

      # on worker0, with worker1 running rpc.init_rpc too
      with dist_autograd.context() as context_id:
          rref1 = rpc.remote("worker1", random_tensor)      # lives on worker1
          rref2 = rpc.remote("worker1", random_tensor)
          loss = rref1.to_here() + rref2.to_here()          # computed here
          dist_autograd.backward(context_id, [loss.sum()])
          dist_optim = DistributedOptimizer(optim.SGD, [rref1, rref2], lr=0.05)
          dist_optim.step(context_id)

   The words, for a reader who knows C but not distributed training:
   - A worker is one process of the job, with a name ("worker0",
     "worker1").  RPC (remote procedure call): worker0 asks worker1 to run
     a function registered there by name, and gets the result back.
   - A remote reference (RRef) is a handle to a value that stays on the
     worker that made it (its owner).  to_here() fetches a copy.
   - Autograd: every tensor operation records how it was computed, so
     "backward" can walk the record in reverse and compute d(loss)/d(x)
     for each tensor x that "requires grad" (a parameter).
   - Distributed autograd: the record spans processes.  Inside a context,
     every tensor that crosses to another worker leaves a note on both
     sides; backward follows the notes, sends each gradient back across,
     and the gradients pile up in the context on the worker that holds
     the tensor - here worker1 - not in the tensor itself, so several
     passes (several trainers) can run at once without mixing.
   - The distributed optimizer holds the RRefs of the parameters; its step
     asks each owner to update its own tensors with the gradients the
     context collected there.  The data never moves to worker0.

   Since loss = sum(a + b), d(loss)/d(a[i][j]) = 1 for every element: the
   gradients are all 1.0 and one SGD step with learning rate 0.05 moves
   every element down by exactly 0.05 (in float arithmetic), which --smoke
   checks bit for bit.  Every line is printed by one printf; distrun puts
   "[rank] " before it. */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <stdio.h>
#include <string.h>

#define LR 0.05f

/* ---- functions any worker can be asked to run (registered on all) ---- */

/* "random_tensor" [seed] -> a random [3,3] tensor that requires grad (a
   parameter), as a value that holds the tensor itself: when this runs
   under dist_remote the value stays here, on its owner, and the owner's
   optimizer later updates this very tensor. */
static dist_value_t *random_tensor(dist_rpc_call_t *call, const dist_value_t *args) {
    const int64_t shape[2] = { 3, 3 };
    int64_t seed = 0;
    if (dist_value_unpack(args, "[I]", &seed) != DIST_OK) {
        dist_rpc_call_fail(call, "random_tensor: %s", dist_rpc_error_message());
        return NULL;
    }
    dist_tensor_t *t = dist_tensor_randn(2, shape, 1.0f, (uint64_t)seed);
    if (!t) {
        dist_rpc_call_fail(call, "random_tensor: %s", dist_rpc_error_message());
        return NULL;
    }
    dist_tensor_set_requires_grad(t, 1);
    dist_value_t *v = dist_value_from_tensor(t);
    dist_tensor_release(t);                   /* the value holds the tensor now */
    return v;
}

/* "grad_in_context" [rref, ctx], run on the rref's owner (called with
   dist_rref_rpc_sync, which puts the reference first): a copy of the
   gradient context `ctx` accumulated here for the tensor the reference
   holds.  Only the owner can answer: the gradient lives nowhere else. */
static dist_value_t *grad_in_context(dist_rpc_call_t *call, const dist_value_t *args) {
    dist_rref_t *r = NULL;
    int64_t ctx = 0;
    if (dist_value_unpack(args, "[RI]", &r, &ctx) != DIST_OK) {
        dist_rpc_call_fail(call, "grad_in_context: %s", dist_rpc_error_message());
        return NULL;
    }
    dist_tensor_t *param = dist_rref_local_tensor(r);      /* the owner's tensor itself */
    dist_tensor_t *grad = NULL;
    if (!param) {
        dist_rpc_call_fail(call, "grad_in_context: the reference holds no tensor");
        return NULL;
    }
    if (dist_autograd_get_gradients(ctx, 1, &param, &grad) != DIST_OK) {
        dist_rpc_call_fail(call, "grad_in_context: %s", dist_rpc_error_message());
        return NULL;
    }
    if (!grad) {
        dist_rpc_call_fail(call, "grad_in_context: context %lld holds no gradient for this tensor", (long long)ctx);
        return NULL;
    }
    dist_tensor_t *copy = dist_tensor_detach(grad);     /* the context's own keeps changing */
    dist_tensor_release(grad);
    dist_value_t *v = dist_value_from_tensor(copy);
    dist_tensor_release(copy);
    return v;
}

/* ---- worker0's side ---- */

/* The 9 numbers of a [3,3] tensor as three lines. */
static void print33(const char *title, const float *x) {
    printf("%s\n", title);
    for (int i = 0; i < 3; i++) printf("    %9.5f %9.5f %9.5f\n", (double)x[3 * i], (double)x[3 * i + 1], (double)x[3 * i + 2]);
}

/* A copy of the tensor an RRef holds (to_here), its 9 floats into out:
   0, or -1 with a message. */
static int fetch(dist_rref_t *r, float out[9], const char *what) {
    dist_value_t *v = NULL;
    if (dist_rref_to_here(r, DIST_RPC_DEFAULT_TIMEOUT, &v) != DIST_OK) {
        fprintf(stderr, "to_here(%s): %s\n", what, dist_rpc_error_message());
        return -1;
    }
    dist_tensor_t *t = dist_tensor_from_value(v);
    dist_value_free(v);
    if (!t || dist_tensor_numel(t) != 9) {
        fprintf(stderr, "to_here(%s): not a [3,3] tensor: %s\n", what, dist_rpc_error_message());
        dist_tensor_release(t);
        return -1;
    }
    memcpy(out, dist_tensor_data(t), 9 * sizeof(float));
    dist_tensor_release(t);
    return 0;
}

#define FAIL(...) do { fprintf(stderr, "worker0: " __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)

static int worker0(int smoke) {
    const char *names[2] = { "a", "b" };
    dist_rref_t *rref[2] = { NULL, NULL };
    dist_tensor_t *t[2] = { NULL, NULL };
    float before[2][9], grad[2][9], after[2][9];
    int64_t ctx = 0;

    /* Everything between begin and end is one distributed forward and
       backward pass: the context's id travels with every RPC made here. */
    if (dist_autograd_context_begin(&ctx) != DIST_OK) FAIL("context_begin: %s", dist_rpc_error_message());
    printf("autograd context %lld begun\n", (long long)ctx);

    /* rpc.remote: worker1 runs random_tensor and keeps the result; we get
       references at once (the calls run while we go on). */
    for (int i = 0; i < 2; i++)
        if (dist_remote("worker1", "random_tensor", dist_value_pack("[I]", (int64_t)(100 + i)), &rref[i]) != DIST_OK)
            FAIL("remote(worker1, random_tensor): %s", dist_rpc_error_message());

    /* to_here inside the context: the copy that arrives requires grad and
       is linked to its owner's tensor, so gradients can go back. */
    for (int i = 0; i < 2; i++) {
        dist_value_t *v = NULL;
        if (dist_rref_to_here(rref[i], DIST_RPC_DEFAULT_TIMEOUT, &v) != DIST_OK) FAIL("to_here(%s): %s", names[i], dist_rpc_error_message());
        t[i] = dist_tensor_from_value(v);
        dist_value_free(v);
        if (!t[i]) FAIL("tensor_from_value(%s): %s", names[i], dist_rpc_error_message());
        if (!dist_tensor_requires_grad(t[i])) FAIL("to_here(%s) inside a context does not require grad", names[i]);
        memcpy(before[i], dist_tensor_data(t[i]), sizeof before[i]);
        char title[64];
        snprintf(title, sizeof title, "%s (owned by worker1), before the step:", names[i]);
        print33(title, before[i]);
    }

    /* The forward pass, here on worker0: loss = sum(a + b). */
    dist_tensor_t *s = dist_tensor_add(t[0], t[1]);
    dist_tensor_t *loss = dist_tensor_sum(s);
    if (!loss) FAIL("sum(a + b): %s", dist_rpc_error_message());
    printf("loss = sum(a + b) = %.5f\n", (double)dist_tensor_item(loss));

    /* Backward across the workers: d(loss)/d(a) and d(loss)/d(b) are sent
       back to worker1 and stored in the context there. */
    if (dist_autograd_backward(ctx, loss) != DIST_OK) FAIL("dist_autograd_backward: %s", dist_rpc_error_message());

    /* Ask the owner what it received (torch: dist_autograd.get_gradients
       on worker1).  dist_rref_rpc_sync runs the function on the RRef's
       owner with the RRef as the first argument. */
    for (int i = 0; i < 2; i++) {
        dist_value_t *v = NULL;
        if (dist_rref_rpc_sync(rref[i], "grad_in_context", dist_value_int(ctx), &v) != DIST_OK)
            FAIL("grad_in_context(%s): %s", names[i], dist_rpc_error_message());
        dist_tensor_t *g = dist_tensor_from_value(v);
        dist_value_free(v);
        if (!g || dist_tensor_numel(g) != 9) FAIL("grad_in_context(%s): not a [3,3] tensor", names[i]);
        memcpy(grad[i], dist_tensor_data(g), sizeof grad[i]);
        dist_tensor_release(g);
        char title[64];
        snprintf(title, sizeof title, "d(loss)/d(%s), held by worker1's context:", names[i]);
        print33(title, grad[i]);
    }

    /* The distributed optimizer: one SGD on worker1 over both tensors;
       step applies the context's gradients there. */
    dist_remote_optim_t *opt = NULL;
    if (dist_remote_optim_sgd(2, rref, LR, 0.0f, 0.0f, &opt) != DIST_OK) FAIL("dist_remote_optim_sgd: %s", dist_rpc_error_message());
    if (dist_remote_optim_step(opt, ctx) != DIST_OK) FAIL("dist_remote_optim_step: %s", dist_rpc_error_message());
    dist_remote_optim_free(opt);

    /* Ending the context frees its gradients here and on worker1. */
    if (dist_autograd_context_end(ctx) != DIST_OK) FAIL("context_end: %s", dist_rpc_error_message());
    dist_tensor_release(loss);
    dist_tensor_release(s);

    /* The tensors moved on worker1: fetch them again. */
    for (int i = 0; i < 2; i++) {
        if (fetch(rref[i], after[i], names[i]) != 0) return 1;
        char title[64];
        snprintf(title, sizeof title, "%s after one SGD step (lr %.2f):", names[i], (double)LR);
        print33(title, after[i]);
    }

    int bad = 0;
    if (smoke) {
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 9; k++) {
                float want = before[i][k] - LR * 1.0f;
                if (grad[i][k] != 1.0f) {
                    fprintf(stderr, "smoke: d(loss)/d(%s)[%d] is %.9g, want exactly 1\n", names[i], k, (double)grad[i][k]);
                    bad = 1;
                }
                if (memcmp(&after[i][k], &want, sizeof want) != 0) {
                    fprintf(stderr, "smoke: %s[%d] after the step is %.9g, want %.9g - 0.05 = %.9g\n", names[i], k, (double)after[i][k],
                            (double)before[i][k], (double)want);
                    bad = 1;
                }
            }
        if (bad) fprintf(stderr, "worker0: smoke check FAILED\n");
    }
    for (int i = 0; i < 2; i++) {
        dist_tensor_release(t[i]);
        dist_rref_free(rref[i]);               /* worker1 frees its tensor once nobody holds it */
    }
    return bad;
}

int main(int argc, char **argv) {
    int smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    if (argc > 2 || (argc == 2 && !smoke)) {
        fprintf(stderr, "usage: distrun -n 2 %s [--smoke]\n", argv[0]);
        return 2;
    }
    /* Every worker registers the same functions, then joins: {0} reads
       rank, world size and rendezvous from the environment distrun sets;
       the name defaults to "worker<rank>". */
    dist_rpc_register("random_tensor", random_tensor);
    dist_rpc_register("grad_in_context", grad_in_context);
    dist_rpc_config cfg = { 0 };
    if (dist_rpc_init(&cfg) != DIST_OK) {
        fprintf(stderr, "dist_rpc_init: %s\n", dist_rpc_error_message());
        return 1;
    }
    dist_worker_info me;
    dist_rpc_get_worker_info(NULL, &me);
    if (dist_rpc_world_size() != 2) {
        fprintf(stderr, "%s: this example wants exactly 2 workers (distrun -n 2), not %d\n", me.name, dist_rpc_world_size());
        dist_rpc_shutdown(0);
        return 1;
    }
    /* worker1 only serves: its RPC threads answer worker0's calls while
       its main thread waits in the graceful shutdown, which returns once
       every worker has finished and let go of its references. */
    int bad = me.rank == 0 ? worker0(smoke) : 0;
    if (dist_rpc_shutdown(bad ? 0 : 1) != DIST_OK) {
        fprintf(stderr, "%s: shutdown: %s\n", me.name, dist_rpc_error_message());
        bad = 1;
    }
    if (me.rank == 0 && !bad)
        printf(smoke ? "done; smoke check passed: gradients all 1.0 on worker1, after = before - 0.05 exactly\n" : "done\n");
    return bad;
}
