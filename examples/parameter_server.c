/* parameter_server.c - one parameter server and N trainers teach a small
   network to recognise Fashion-MNIST clothes, with distributed autograd
   and a distributed optimizer.

   SMOKE: distrun -n 3 {} --smoke --data {data}

   Build and run (rank 0 is the server "ps", ranks 1.. are "trainer1"..):
      make build/distrun build/examples/parameter_server \
           build/data/t10k-images-idx3-ubyte build/data/t10k-labels-idx1-ubyte
      build/distrun -n 3 build/examples/parameter_server            # 2 trainers
      build/distrun -n 3 build/examples/parameter_server --smoke    # small, checked
   Options: --epochs E (3), --batch B (64, per trainer), --lr X (0.01; SGD
   with momentum 0.9), --data DIR (default: build/data from the repository
   root, else ../data beside the program).  Two trainers reach about 83%
   test accuracy in 3 epochs, in a few seconds.  Why lr 0.01: the pixels
   are standardised (mean 0, deviation 1), momentum 0.9 makes each step
   about 10x the learning rate, and every trainer's updates land on the
   same parameters; with 0.05 the loss stalls near 0.8 (about 72%), in one
   process without RPC as well.

   This is PyTorch's tutorial "Implementing a Parameter Server Using
   Distributed RPC Framework", in C.  The words, for a C programmer new to
   distributed training:
   - The model is a multilayer perceptron (MLP): 784 pixels -> 128 hidden
     units (ReLU) -> 10 scores ("logits"), one per kind of garment.  Its
     parameters (two weight matrices, two bias vectors) live ONLY on the
     parameter server.
   - Each trainer owns a shard of the training images.  For each batch it
     sends the pixels to the server by RPC (a remote procedure call: "run
     your function 'forward' on this and send me the result"); the server
     runs the model and returns the logits; the trainer computes the loss
     (cross entropy: how wrong the scores are) itself.
   - Distributed autograd: because this happens inside an autograd
     context, the returned logits remember that they came from the server.
     dist_autograd_backward computes d(loss)/d(logits) on the trainer,
     sends it back to the server, and the server continues backward
     through its layers; the parameter gradients stay on the server, kept
     in the context (so two trainers' passes do not mix).
   - The distributed optimizer holds remote references (RRefs) to the
     parameters; its step asks their owner (the server) to apply SGD with
     the gradients of this context.  Ending the context frees them.
   - Asynchronous, "hogwild" training: the server answers calls on a pool
     of handler threads, so trainers' forwards, backwards and optimizer
     steps run at the same time and the parameters change between one
     trainer's forward and its backward.  (A step does not write them in
     the middle of a forward: forwards read them under the parameter lock,
     which every optimizer step takes for writing.)  Nobody waits for the
     slowest trainer; the small inconsistencies act like noise in SGD and
     training still converges.  The PyTorch tutorial does the same.  (Each
     trainer builds its own distributed optimizer, so the server holds one
     SGD, with its own momentum, per trainer, as in the tutorial.)
   - The server's main thread has nothing to do but wait: as in the
     tutorial (run_parameter_server is init_rpc, then rpc.shutdown()), it
     waits in the graceful dist_rpc_shutdown, which returns once every
     trainer has finished and called it too.  Then it tests the model.

   Data: Fashion-MNIST's 10,000-image test split, which `make` unpacks into
   build/data: the first 8,000 images train, the last 2,000 test.  If DIR
   also holds train-images-idx3-ubyte and train-labels-idx1-ubyte (the
   60,000-image training split), the trainers use those and the server
   tests on all of t10k.  The files must be unpacked (gunzip -k NAME.gz).

   --smoke trains on 384 images for 5 epochs and checks: the gradients
   reached the server (every parameter's gradient in the context is
   non-zero), each trainer's loss on a fixed batch fell, and the test
   accuracy rose well above what the untrained model scores.  Any failed
   check makes its worker exit non-zero. */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIXELS 784
#define HIDDEN 128
#define CLASSES 10
#define MSG dist_rpc_error_message()

/* ---- options ---- */
typedef struct {
    int smoke, epochs, batch;
    float lr, momentum;
    char data[4096];
} options;
static options opt = { 0, 3, 64, 0.01f, 0.9f, "" };

/* ---- the data set: IDX files (big-endian header, then unsigned bytes) ---- */

/* Images as floats (normalised), labels as int64 (what cross_entropy
   wants). */
typedef struct {
    int n;
    float *x;       /* n x 784 */
    int64_t *y;     /* n */
} dataset;

static double now_s(void) { return (double)dist_time_ns() * 1e-9; }   /* dist.h's monotonic clock */

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* dir/name into out: 0, or -1 when too long. */
static int path_of(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* All bytes of `path`: a malloc'ed buffer (*len bytes), or NULL with a
   sentence in err. */
static unsigned char *slurp(const char *path, size_t *len, char *err, size_t cap) {
    char gz[4200];
    FILE *f = fopen(path, "rb");
    if (!f) {
        int k = snprintf(gz, sizeof gz, "%s.gz", path);
        if (k > 0 && (size_t)k < sizeof gz && file_exists(gz))
            snprintf(err, cap, "%s: cannot open it, but %s.gz is there: unpack it (gunzip -k)", path, path);
        else
            snprintf(err, cap, "%s: cannot open it; for the built-in data run `make build/data/t10k-images-idx3-ubyte "
                     "build/data/t10k-labels-idx1-ubyte`, or point --data at a directory that holds it", path);
        return NULL;
    }
    size_t n = 0, capb = 1 << 20;
    unsigned char *buf = malloc(capb);
    for (;;) {
        if (!buf) break;
        if (n == capb) {
            unsigned char *b2 = realloc(buf, capb *= 2);
            if (!b2) { free(buf); buf = NULL; break; }
            buf = b2;
        }
        size_t got = fread(buf + n, 1, capb - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) { snprintf(err, cap, "%s: out of memory", path); return NULL; }
    if (bad) {
        snprintf(err, cap, "%s: read error", path);
        free(buf);
        return NULL;
    }
    if (n >= 2 && buf[0] == 0x1f && buf[1] == 0x8b) {
        snprintf(err, cap, "%s is gzip-compressed: unpack it first (gunzip)", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Reads an images file and its labels file, checking every header field
   and the sizes, into a dataset: 0, or -1 with a sentence in err. */
static int load_idx(const char *images, const char *labels, dataset *d, char *err, size_t cap) {
    size_t ni = 0, nl = 0;
    unsigned char *im = NULL, *lb = NULL;
    int rc = -1;
    memset(d, 0, sizeof *d);
    if (!(im = slurp(images, &ni, err, cap)) || !(lb = slurp(labels, &nl, err, cap))) goto out;
    /* images: magic 0x00000803 (unsigned bytes, 3 dimensions), count, rows, columns */
    if (ni < 16 || be32(im) != 0x803) {
        snprintf(err, cap, "%s: not an IDX images file (%zu bytes, magic 0x%08x; want 0x00000803: unsigned bytes, 3 dimensions)", images, ni,
                 ni >= 4 ? be32(im) : 0u);
        goto out;
    }
    uint32_t n = be32(im + 4), rows = be32(im + 8), cols = be32(im + 12);
    if (rows != 28 || cols != 28) { snprintf(err, cap, "%s: images of %ux%u pixels; this model wants 28x28", images, rows, cols); goto out; }
    if ((uint64_t)ni != 16 + (uint64_t)n * PIXELS) {
        snprintf(err, cap, "%s: the header says %u images of 28x28 (%llu bytes with the header), the file has %zu bytes", images, n,
                 (unsigned long long)(16 + (uint64_t)n * PIXELS), ni);
        goto out;
    }
    /* labels: magic 0x00000801 (unsigned bytes, 1 dimension), count */
    if (nl < 8 || be32(lb) != 0x801) {
        snprintf(err, cap, "%s: not an IDX labels file (%zu bytes, magic 0x%08x; want 0x00000801: unsigned bytes, 1 dimension)", labels, nl,
                 nl >= 4 ? be32(lb) : 0u);
        goto out;
    }
    if (be32(lb + 4) != n || (uint64_t)nl != 8 + (uint64_t)n) {
        snprintf(err, cap, "%s: the header says %u labels and the file has %zu bytes; %s has %u images", labels, be32(lb + 4), nl, images, n);
        goto out;
    }
    if (n == 0 || !(d->x = malloc((size_t)n * PIXELS * sizeof(float))) || !(d->y = malloc((size_t)n * sizeof(int64_t)))) {
        snprintf(err, cap, n ? "%s: out of memory" : "%s: no images", images);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (lb[8 + i] >= CLASSES) { snprintf(err, cap, "%s: label %u is %u, not a class 0..9", labels, i, lb[8 + i]); goto out; }
        d->y[i] = lb[8 + i];
    }
    /* Pixels 0..255 to roughly mean 0, deviation 1 (Fashion-MNIST's mean
       0.2860 and deviation 0.3530 of pixel/255), which SGD likes. */
    for (size_t k = 0; k < (size_t)n * PIXELS; k++) d->x[k] = ((float)im[16 + k] / 255.0f - 0.2860f) / 0.3530f;
    d->n = (int)n;
    rc = 0;
out:
    if (rc) { free(d->x); free(d->y); memset(d, 0, sizeof *d); }
    free(im);
    free(lb);
    return rc;
}

/* Images [from, to) of `all` as a dataset that points into it. */
static dataset slice(const dataset *all, int from, int to) {
    dataset s = { to - from, all->x + (size_t)from * PIXELS, all->y + from };
    return s;
}

/* The train and test sets, as the header comment says: 0, or -1 after
   printing why.  *owned gets what to free. */
static int load_data(dataset *train, dataset *test, dataset owned[2]) {
    char a[4200], b[4200], err[9000];
    memset(owned, 0, 2 * sizeof *owned);
    int full = path_of(a, sizeof a, opt.data, "train-images-idx3-ubyte") == 0 && file_exists(a);
    if (path_of(a, sizeof a, opt.data, "t10k-images-idx3-ubyte") || path_of(b, sizeof b, opt.data, "t10k-labels-idx1-ubyte")) {
        fprintf(stderr, "--data %s: the path is too long\n", opt.data);
        return -1;
    }
    if (load_idx(a, b, &owned[0], err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    if (full) {
        path_of(a, sizeof a, opt.data, "train-images-idx3-ubyte");
        path_of(b, sizeof b, opt.data, "train-labels-idx1-ubyte");
        if (load_idx(a, b, &owned[1], err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
        *train = owned[1];
        *test = owned[0];
    } else {
        if (owned[0].n < 1000) { fprintf(stderr, "%s: only %d images; want the 10,000 of t10k\n", a, owned[0].n); return -1; }
        int split = owned[0].n * 4 / 5;                 /* 8,000 of 10,000 */
        *train = slice(&owned[0], 0, split);
        *test = slice(&owned[0], split, owned[0].n);
    }
    if (opt.smoke && train->n > 384) train->n = 384;    /* a few hundred images */
    return 0;
}

/* ======================= the parameter server ======================= */

static dist_tensor_t *param[4];          /* W1 [128,784], b1 [128], W2 [10,128], b2 [10] */
static const char *param_name[4] = { "W1", "b1", "W2", "b2" };

/* Like torch's nn.Linear: weights and biases uniform in +-1/sqrt(inputs). */
static int make_model(void) {
    const int64_t s_w1[2] = { HIDDEN, PIXELS }, s_b1[1] = { HIDDEN }, s_w2[2] = { CLASSES, HIDDEN }, s_b2[1] = { CLASSES };
    float k1 = 1.0f / sqrtf((float)PIXELS), k2 = 1.0f / sqrtf((float)HIDDEN);
    param[0] = dist_tensor_uniform(2, s_w1, -k1, k1, 1);
    param[1] = dist_tensor_uniform(1, s_b1, -k1, k1, 2);
    param[2] = dist_tensor_uniform(2, s_w2, -k2, k2, 3);
    param[3] = dist_tensor_uniform(1, s_b2, -k2, k2, 4);
    for (int i = 0; i < 4; i++) {
        if (!param[i]) return -1;
        dist_tensor_set_requires_grad(param[i], 1);     /* these are what training changes */
    }
    return 0;
}

/* The model: linear, ReLU, linear.  NULL (and a sentence) on failure. */
static dist_tensor_t *model_forward(dist_tensor_t *x) {
    dist_tensor_t *h = dist_tensor_linear(x, param[0], param[1]);
    dist_tensor_t *a = dist_tensor_relu(h);
    dist_tensor_t *logits = dist_tensor_linear(a, param[2], param[3]);
    dist_tensor_release(h);              /* the graph keeps what backward needs */
    dist_tensor_release(a);
    return logits;
}

/* Fraction of `d` classified right, without building a graph. */
static double accuracy(const dataset *d) {
    int right = 0;
    dist_no_grad_enter();
    for (int i0 = 0; i0 < d->n; i0 += 500) {
        int nb = d->n - i0 < 500 ? d->n - i0 : 500;
        const int64_t shape[2] = { nb, PIXELS };
        dist_tensor_t *x = dist_tensor_new(2, shape, d->x + (size_t)i0 * PIXELS);
        dist_tensor_t *z = model_forward(x);
        if (!z) { dist_tensor_release(x); right = -1; break; }
        const float *s = dist_tensor_data(z);
        for (int i = 0; i < nb; i++) {
            int best = 0;
            for (int c = 1; c < CLASSES; c++) if (s[i * CLASSES + c] > s[i * CLASSES + best]) best = c;
            right += best == d->y[i0 + i];
        }
        dist_tensor_release(x);
        dist_tensor_release(z);
    }
    dist_no_grad_exit();
    return right < 0 ? -1.0 : (double)right / d->n;
}

static dataset ps_test;                  /* the server evaluates on it */

/* "forward" [x] -> the logits of batch x [B,784].  Runs on one of the
   server's handler threads, in the caller's autograd context: the
   returned dist_value_from_tensor carries the graph, so the trainer's
   backward comes back here and on through both layers.  Called outside
   any context (the trainers' loss probes) it builds no graph.  Several
   trainers' forwards run here at once, on different handler threads,
   while their optimizer steps run on others: the hogwild training
   described at the top.  A forward reads param[] under the parameter
   lock (dist_params_read_enter), so a step never writes a parameter in
   the middle of a matrix product: forwards run together, a step waits
   for the forwards under way and they for it. */
static dist_value_t *h_forward(dist_rpc_call_t *call, const dist_value_t *args) {
    int no_ctx = dist_autograd_current_context() == 0;
    dist_tensor_t *x = dist_tensor_from_value(dist_value_item(args, 0));
    if (no_ctx) dist_no_grad_enter();
    dist_params_read_enter();
    dist_tensor_t *logits = model_forward(x);
    dist_params_read_exit();
    if (no_ctx) dist_no_grad_exit();
    dist_tensor_release(x);
    if (!logits) { dist_rpc_call_fail(call, "forward: %s", MSG); return NULL; }
    dist_value_t *v = dist_value_from_tensor(logits);
    dist_tensor_release(logits);         /* the value holds it */
    return v;
}

/* "params" -> a list of 4 RRefs, one per parameter, owned here (torch:
   ParameterServer.get_param_rrefs).  The trainers' distributed optimizers
   are built over them. */
static dist_value_t *h_params(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)args;
    dist_value_t *v = dist_rref_params(4, param);
    if (!v) dist_rpc_call_fail(call, "params: %s", MSG);
    return v;
}

/* "grad_norms" [ctx] -> [|dW1|, |db1|, |dW2|, |db2|]: the lengths of the
   gradients context ctx holds here (-1: none).  A trainer calls it before
   ending its context, to see that backward reached the server. */
static dist_value_t *h_grad_norms(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t ctx = 0;
    dist_tensor_t *g[4] = { NULL, NULL, NULL, NULL };
    if (dist_value_unpack(args, "[I]", &ctx) != DIST_OK || dist_autograd_get_gradients(ctx, 4, param, g) != DIST_OK) {
        dist_rpc_call_fail(call, "grad_norms: %s", MSG);
        return NULL;
    }
    dist_value_t *out = dist_value_list();
    for (int i = 0; i < 4; i++) {
        double s = -1;
        if (g[i]) {
            const float *d = dist_tensor_data(g[i]);
            s = 0;
            for (size_t k = 0; k < dist_tensor_numel(g[i]); k++) s += (double)d[k] * d[k];
            s = sqrt(s);
        }
        dist_value_append(out, dist_value_float(s));
        dist_tensor_release(g[i]);
    }
    return out;
}

/* "evaluate" -> test accuracy now (a float), while training goes on. */
static dist_value_t *h_evaluate(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)args;
    double acc = ps_test.n ? accuracy(&ps_test) : -1;
    if (acc < 0) { dist_rpc_call_fail(call, "evaluate: %s", ps_test.n ? MSG : "not the server"); return NULL; }
    return dist_value_float(acc);
}

static double untrained_acc;             /* measured before the trainers can start */

/* The server: the handler threads do the work while the main thread
   waits in the graceful shutdown, which returns once every trainer is
   done and has shut down too (torch: rpc.shutdown() in
   run_parameter_server).  Then it tests the model, which it still holds. */
static int run_server(int trainers) {
    double acc0 = untrained_acc, t0 = now_s();
    printf("ps: MLP 784 -> %d (ReLU) -> %d; untrained test accuracy %.1f%% on %d images; waiting for %d trainer%s\n", HIDDEN, CLASSES, 100 * acc0,
           ps_test.n, trainers, trainers == 1 ? "" : "s");
    fflush(stdout);
    if (dist_rpc_shutdown(1) != DIST_OK) { fprintf(stderr, "ps: shutdown: %s\n", MSG); return 1; }
    double secs = now_s() - t0, acc = accuracy(&ps_test);
    printf("ps: test accuracy %.2f%% (%d images) after %d epoch%s with %d trainer%s, %.1f s of training\n", 100 * acc, ps_test.n, opt.epochs,
           opt.epochs == 1 ? "" : "s", trainers, trainers == 1 ? "" : "s", secs);
    if (opt.smoke) {
        if (!(acc >= acc0 + 0.2)) {
            fprintf(stderr, "ps: smoke check FAILED: test accuracy %.1f%% after training, %.1f%% before; want at least 20 points more\n", 100 * acc,
                    100 * acc0);
            return 1;
        }
        printf("ps: smoke check passed: accuracy rose from %.1f%% to %.1f%%\n", 100 * acc0, 100 * acc);
    } else if (acc < 0.80) {
        printf("ps: below the 80%% this example aims at; try --epochs %d\n", opt.epochs + 1);
    }
    return 0;
}

/* ============================ a trainer ============================ */

/* A copy of the batch `idx[0..nb)` of `d` as a tensor value (no autograd:
   inputs need no gradient) and its labels. */
static dist_value_t *batch_value(const dataset *d, const int *idx, int nb, float *buf, int64_t *labels) {
    const int64_t shape[2] = { nb, PIXELS };
    for (int i = 0; i < nb; i++) {
        memcpy(buf + (size_t)i * PIXELS, d->x + (size_t)idx[i] * PIXELS, PIXELS * sizeof(float));
        labels[i] = d->y[idx[i]];
    }
    return dist_value_tensor(DIST_FLOAT32, 2, shape, buf);
}

/* The loss of the model on a fixed batch (a probe, outside any context:
   nothing is recorded, nothing learns): >= 0, or -1 with a message. */
static double probe_loss(const dataset *d, int nb, float *buf, int64_t *labels) {
    int idx[64];
    dist_value_t *ret = NULL;
    for (int i = 0; i < nb; i++) idx[i] = i;
    if (dist_rpc_sync("ps", "forward", dist_value_pack("[v]", batch_value(d, idx, nb, buf, labels)), &ret) != DIST_OK) {
        fprintf(stderr, "probe forward: %s\n", MSG);
        return -1;
    }
    dist_tensor_t *z = dist_tensor_from_value(ret);
    dist_value_free(ret);
    dist_tensor_t *loss = dist_tensor_cross_entropy(z, labels);
    double l = loss ? dist_tensor_item(loss) : -1;
    dist_tensor_release(loss);
    dist_tensor_release(z);
    return l;
}

/* Asks the server for the gradient lengths of context ctx: 0 when all four
   are there and non-zero, else 1 with a message. */
static int check_grads(const char *me, int64_t ctx, int print) {
    dist_value_t *v = NULL;
    double n[4] = { 0, 0, 0, 0 };
    if (dist_rpc_sync("ps", "grad_norms", dist_value_pack("[I]", ctx), &v) != DIST_OK ||
        dist_value_unpack(v, "[ffff]", &n[0], &n[1], &n[2], &n[3]) != DIST_OK) {
        fprintf(stderr, "%s: grad_norms: %s\n", me, MSG);
        dist_value_free(v);
        return 1;
    }
    dist_value_free(v);
    if (print)
        printf("%s: gradients in context %lld on ps: |dW1| %.4f |db1| %.4f |dW2| %.4f |db2| %.4f\n", me, (long long)ctx, n[0], n[1], n[2], n[3]);
    for (int i = 0; i < 4; i++)
        if (!(n[i] > 0) || !isfinite(n[i])) {
            fprintf(stderr, "%s: smoke check FAILED: the gradient of %s in context %lld on ps has length %g (want > 0: did backward reach ps?)\n", me,
                    param_name[i], (long long)ctx, n[i]);
            return 1;
        }
    return 0;
}

/* The parameters' RRefs from the server, kept (4 handles to free). */
static int get_param_rrefs(dist_rref_t *out[4]) {
    dist_value_t *v = NULL;
    if (dist_rpc_sync("ps", "params", NULL, &v) != DIST_OK) return -1;
    for (int i = 0; i < 4; i++) {
        dist_rref_t *r = NULL;
        if (dist_value_get_rref(dist_value_item(v, (size_t)i), &r) != DIST_OK) { dist_value_free(v); return -1; }
        out[i] = dist_rref_keep(r);      /* borrowed from v: keep our own */
    }
    dist_value_free(v);
    return 0;
}

static int run_trainer(int k, int trainers, const dataset *train) {
    char me[32];
    snprintf(me, sizeof me, "trainer%d", k);
    /* This trainer's shard: a contiguous slice of the training images. */
    dataset shard = slice(train, (int)((int64_t)train->n * (k - 1) / trainers), (int)((int64_t)train->n * k / trainers));
    int nb = opt.batch, steps = shard.n / nb, bad = 0;      /* the last partial batch is dropped */
    if (steps == 0) { fprintf(stderr, "%s: %d image%s in my shard, fewer than a batch of %d\n", me, shard.n, shard.n == 1 ? "" : "s", nb); return 1; }
    float *buf = malloc((size_t)(nb > 64 ? nb : 64) * PIXELS * sizeof(float));
    int64_t *labels = malloc((size_t)(nb > 64 ? nb : 64) * sizeof(int64_t));
    int *order = malloc((size_t)shard.n * sizeof(int));
    if (!buf || !labels || !order) { fprintf(stderr, "%s: out of memory\n", me); return 1; }
    for (int i = 0; i < shard.n; i++) order[i] = i;

    dist_rref_t *prefs[4];
    dist_remote_optim_t *optim = NULL;
    if (get_param_rrefs(prefs) != 0) { fprintf(stderr, "%s: params: %s\n", me, MSG); return 1; }
    /* Built once: an SGD on the server over the 4 parameters (torch:
       DistributedOptimizer(optim.SGD, param_rrefs, lr=..., momentum=...)). */
    if (dist_remote_optim_sgd(4, prefs, opt.lr, opt.momentum, 0.0f, &optim) != DIST_OK) {
        fprintf(stderr, "%s: dist_remote_optim_sgd: %s\n", me, MSG);
        return 1;
    }
    int probe_n = shard.n < 64 ? shard.n : 64;
    double probe0 = opt.smoke ? probe_loss(&shard, probe_n, buf, labels) : 0;
    if (probe0 < 0) return 1;
    printf("%s: %d training images (%d batch%s of %d per epoch)%s\n", me, shard.n, steps, steps == 1 ? "" : "es", nb,
           opt.smoke ? ", smoke mode" : "");

    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)k;
    double t0 = now_s();
    int every = opt.smoke ? steps + 1 : 20;        /* a progress line every 20 batches */
    for (int epoch = 1; epoch <= opt.epochs && !bad; epoch++) {
        for (int i = shard.n - 1; i > 0; i--) {          /* shuffle (Fisher-Yates, xorshift) */
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            int j = (int)(rng % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        double epoch_sum = 0, window_sum = 0;
        int window = 0;
        for (int s = 0; s < steps && !bad; s++) {
            int64_t ctx = 0;
            dist_value_t *ret = NULL;
            /* 1. A context for this step's forward and backward pass. */
            if (dist_autograd_context_begin(&ctx) != DIST_OK) { fprintf(stderr, "%s: context_begin: %s\n", me, MSG); bad = 1; break; }
            /* 2. Forward on the server: our batch in, logits out. */
            dist_value_t *x = batch_value(&shard, order + (size_t)s * nb, nb, buf, labels);
            if (dist_rpc_sync("ps", "forward", dist_value_pack("[v]", x), &ret) != DIST_OK) {
                fprintf(stderr, "%s: forward on ps: %s\n", me, MSG);
                bad = 1;
            }
            /* 3. The loss here; the logits are linked to the server's graph. */
            dist_tensor_t *logits = bad ? NULL : dist_tensor_from_value(ret);
            dist_tensor_t *loss = dist_tensor_cross_entropy(logits, labels);
            dist_value_free(ret);
            if (!bad && !loss) { fprintf(stderr, "%s: loss: %s\n", me, MSG); bad = 1; }
            /* 4. Backward: gradients flow to the server, into this context. */
            if (!bad && dist_autograd_backward(ctx, loss) != DIST_OK) { fprintf(stderr, "%s: backward: %s\n", me, MSG); bad = 1; }
            /* (Look at what arrived there: once, and on every step in smoke mode.) */
            if (!bad && (opt.smoke || (epoch == 1 && s == 0))) bad = check_grads(me, ctx, epoch == 1 && s == 0);
            /* 5. The server's SGD applies this context's gradients. */
            if (!bad && dist_remote_optim_step(optim, ctx) != DIST_OK) { fprintf(stderr, "%s: optimizer step: %s\n", me, MSG); bad = 1; }
            /* 6. Done with this pass: its gradients are freed everywhere. */
            dist_autograd_context_end(ctx);
            if (loss) { epoch_sum += dist_tensor_item(loss); window_sum += dist_tensor_item(loss); window++; }
            dist_tensor_release(loss);
            dist_tensor_release(logits);
            if (!bad && window == every && s + 1 < steps) {
                printf("%s: epoch %d batch %3d/%d: loss %.4f (mean of the last %d)\n", me, epoch, s + 1, steps, window_sum / window, window);
                window_sum = 0;
                window = 0;
            }
        }
        if (!bad) printf("%s: epoch %d done: mean loss %.4f over its %d batch%s\n", me, epoch, epoch_sum / steps, steps,
                      steps == 1 ? "" : "es");
        /* The first trainer asks how the shared model does now. */
        if (!bad && k == 1 && !opt.smoke) {
            dist_value_t *v = NULL;
            double acc = 0;
            if (dist_rpc_sync("ps", "evaluate", NULL, &v) == DIST_OK && dist_value_get_float(v, &acc) == DIST_OK)
                printf("%s: after my epoch %d (%.1f s): test accuracy %.2f%%\n", me, epoch, now_s() - t0, 100 * acc);
            dist_value_free(v);
        }
    }
    if (!bad && opt.smoke) {
        double probe1 = probe_loss(&shard, probe_n, buf, labels);
        if (probe1 < 0) bad = 1;
        else if (!(probe1 < 0.8 * probe0)) {
            fprintf(stderr, "%s: smoke check FAILED: loss on my first %d image%s %.4f before training, %.4f after; want it down by 20%%\n", me,
                    probe_n, probe_n == 1 ? "" : "s", probe0, probe1);
            bad = 1;
        } else {
            printf("%s: smoke check passed: gradients reached ps on every step; loss on my first %d image%s %.4f -> %.4f\n", me, probe_n,
                   probe_n == 1 ? "" : "s", probe0, probe1);
        }
    }
    if (!bad) printf("%s: done, %d step%s in %.1f s\n", me, opt.epochs * steps, opt.epochs * steps == 1 ? "" : "s", now_s() - t0);
    dist_remote_optim_free(optim);
    for (int i = 0; i < 4; i++) dist_rref_free(prefs[i]);
    free(buf);
    free(labels);
    free(order);
    return bad;
}

/* =============================== main =============================== */

/* The default --data: build/data, where `make` unpacks the built-in data,
   seen from the repository root; started from elsewhere, ../data beside
   the program (build/examples/NAME, build\windows\NAME.exe: build/data). */
static void default_data_dir(char *out, size_t cap, const char *argv0) {
    const char *sep = NULL;
    snprintf(out, cap, "build/data");
    if (file_exists("build/data/t10k-images-idx3-ubyte") || !argv0) return;
    for (const char *p = argv0; *p; p++)
        if (*p == '/' || *p == '\\') sep = p;
    if (sep) snprintf(out, cap, "%.*s/../data", (int)(sep - argv0), argv0);
}

static int parse_args(int argc, char **argv) {
    default_data_dir(opt.data, sizeof opt.data, argv[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--smoke")) { opt.smoke = 1; continue; }
        if (!v) goto usage;
        i++;
        if (!strcmp(a, "--data")) snprintf(opt.data, sizeof opt.data, "%s", v);
        else if (!strcmp(a, "--epochs")) { opt.epochs = (int)strtol(v, &end, 10); if (*end || opt.epochs < 1) goto usage; }
        else if (!strcmp(a, "--batch")) { opt.batch = (int)strtol(v, &end, 10); if (*end || opt.batch < 1 || opt.batch > 4096) goto usage; }
        else if (!strcmp(a, "--lr")) { opt.lr = strtof(v, &end); if (*end || !(opt.lr > 0)) goto usage; }
        else goto usage;
    }
    if (opt.smoke) {                     /* small and fast: 384 images, 5 passes over them */
        opt.epochs = 5;
        opt.batch = 32;
    }
    return 0;
usage:
    fprintf(stderr, "usage: distrun -n N %s [--smoke] [--data DIR] [--epochs E] [--batch B] [--lr X]   (N >= 2: a server and N-1 trainers)\n",
            argv[0]);
    return -1;
}

int main(int argc, char **argv) {
    dataset train, test, owned[2];
    if (parse_args(argc, argv)) return 2;
    if (load_data(&train, &test, owned)) return 1;

    /* Every worker registers the same functions (only the server's are
       called); the server makes its model before it joins, so no call
       can come before the parameters exist. */
    dist_rpc_register("forward", h_forward);
    dist_rpc_register("params", h_params);
    dist_rpc_register("grad_norms", h_grad_norms);
    dist_rpc_register("evaluate", h_evaluate);
    /* The name must be chosen before joining: dist_env_rank reads the
       rank the launcher (distrun, mpirun, srun) gave this process, as
       dist_rpc_init will. */
    int rank = 0, world = 1;
    char name[32];
    if (dist_env_rank(&rank, &world) != DIST_OK) { fprintf(stderr, "%s\nrun it with a launcher: distrun -n 3 %s\n", dist_error_message(NULL), argv[0]); return 2; }
    if (rank == 0) {
        snprintf(name, sizeof name, "ps");
        ps_test = test;
        if (make_model()) { fprintf(stderr, "ps: making the model: %s\n", MSG); return 1; }
        untrained_acc = accuracy(&ps_test);
    } else {
        snprintf(name, sizeof name, "trainer%d", rank);
    }
    dist_rpc_config cfg = { 0 };         /* rank, world size, rendezvous: from distrun's environment */
    cfg.name = name;
    if (dist_rpc_init(&cfg) != DIST_OK) { fprintf(stderr, "%s: dist_rpc_init: %s\n", name, MSG); return 1; }
    int n = dist_rpc_world_size(), bad;
    if (n < 2) {
        fprintf(stderr, "%s: needs a server and at least one trainer: distrun -n 3 %s\n", name, argv[0]);
        dist_rpc_shutdown(0);
        return 1;
    }
    /* Every worker leaves with a graceful shutdown, which waits until all
       are done with their calls and references: the server's is where it
       waits for the trainers (see run_server); a trainer that failed
       leaves at once. */
    if (rank == 0) {
        bad = run_server(n - 1);
    } else {
        bad = run_trainer(rank, n - 1, &train);
        if (dist_rpc_shutdown(bad ? 0 : 1) != DIST_OK) { fprintf(stderr, "%s: shutdown: %s\n", name, MSG); bad = 1; }
    }
    for (int i = 0; i < 4; i++) dist_tensor_release(param[i]);
    free(owned[0].x); free(owned[0].y); free(owned[1].x); free(owned[1].y);
    return bad;
}
