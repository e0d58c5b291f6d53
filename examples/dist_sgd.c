/* dist_sgd.c - synchronous data-parallel SGD: every rank trains the same
   small network on its own share of the data, and they average their
   gradients after every step so that they all take the same step.

   SMOKE: distrun -n 4 {} --smoke --data {data}
   SMOKE: distrun -n 4 --max-restarts 1 {} --elastic --smoke --data {data}

   This is the "Distributed Training" section of PyTorch's tutorial
   "Writing Distributed Applications with PyTorch", in C:
      - the training set is shuffled with a seed that is the same on every
        rank, and each rank takes its own contiguous slice of the shuffled
        indices (the tutorial's DataPartitioner);
      - a global batch of 128 images is split across the ranks, 128/world
        images each (43 + 43 + 42 on 3 ranks);
      - every rank computes the gradient of its slice of the batch, then
        one dist_all_reduce averages the gradients of all ranks, so every
        rank holds the gradient of the whole global batch and takes the
        same SGD step (the tutorial's average_gradients);
      - the parameters therefore stay identical on every rank, bit for bit,
        which the program checks at the end.
   The model is a two-layer perceptron, 784 -> 128 ReLU -> 10, on 28x28
   grey images of 10 classes, with dist_rpc.h's tensors (autograd and the
   SGD optimizer; no RPC agent: only dist.h's collectives travel).

   Run it (from the repository root):
      make build/examples/dist_sgd build/distrun build/data/t10k-images-idx3-ubyte build/data/t10k-labels-idx1-ubyte && build/distrun -n 4 build/examples/dist_sgd
   It prints (distrun prefixes each line with the rank that wrote it):
      [0] dist_sgd: 4 ranks, global batch 128 (32+32+32+32), 62 steps per epoch, ...
      [0] start: parameters bitwise identical on all 4 ranks (101770 floats, ...)
      [0] epoch 1/3  train loss 0.9089  test loss 0.5250  test accuracy 80.90% ...
      [0] epoch 2/3  train loss 0.5003  test loss 0.4807  test accuracy 82.60% ...
      [0] epoch 3/3  train loss 0.4172  test loss 0.4517  test accuracy 83.55% ...
      [0] end: parameters bitwise identical on all 4 ranks (101770 floats, ...)
      [0] 3 epochs in 1.25 s; rank 0 spent 0.54 s in the gradients' all_reduce ...
   (1.3 to 1.8 s on a 2-core machine, with 1 rank as with 4: 4 ranks
   sharing 2 cores are no faster, and wait for each other, which the
   all_reduce time shows.)

   Options:
      --epochs N    passes over the training set (3)
      --data DIR    a directory of MNIST-format IDX files (build/data from
                    the repository root, else ../data beside the program)
      --lr X        the learning rate to start with (0.05); it falls to 0
                    along half a cosine (SGD with momentum 0.9).  0.1
                    overshoots in the first steps: the loss of the smoke
                    run climbs back up at its end
      --seed N      the seed of the parameters and the shuffles (1234)
      --per-tensor  one all_reduce per parameter's gradient instead of one
                    over a flat buffer of all of them (to compare the time)
      --progress    rank 0 draws a progress bar on stderr (for a terminal)
      --smoke       one epoch on 2,048 training and 512 test images (well
                    under a second) that checks its own result: it exits
                    with 1 unless the training loss fell, the parameters
                    are bitwise identical on every rank and the test
                    accuracy is above 40%
      --elastic     a rank dies mid-epoch and comes back (see below)
      --kill-step N with --elastic: the step of epoch 1 it dies in, from 1
                    (31 of 62; 6 of 16 with --smoke)
      --kill-rank R with --elastic: which rank dies (2); -1: none, to see
                    what the elastic loop costs by itself

   --elastic: surviving a death.  Run it under distrun's restart option:
      build/distrun -n 4 --max-restarts 1 build/examples/dist_sgd --elastic
   In step 31 of epoch 1, rank 2 kills itself (SIGKILL; TerminateProcess
   on Windows) just before the step's all_reduce, as a crash or the OOM
   killer would.  The others' all_reduce fails (DIST_ERR_PEER_LOST); they
   agree that it did (dist_agree), make a communicator of the 3 survivors
   (dist_shrink) and redo the step from the same parameters, each taking
   its share of the same global batch at its new position (43 + 43 + 42).
   distrun starts a new process in the dead one's place (DIST_JOINING=1,
   DIST_RESTART_COUNT=1): its dist_init waits until the members admit it.
   They call dist_grow every 10 steps; after step 40 it admits the
   newcomer, rank 0 broadcasts the parameters, their momentum, the epoch,
   the step and the epoch's losses so far, and 4 ranks train on from
   step 41.  After each change the members check that they hold the same
   parameters bit for bit, and rank 0 says so (distrun's own line aside):
      [2] rank 2 dies now, in step 31 of epoch 1, before its all_reduce (SIGKILL)
      [0] step 31 of epoch 1: the gradients' all_reduce failed on 4 ranks (rank 2 of 4 lost after 0.1 ms); agree 0.9 ms, shrink 2.6 ms: 3 ranks go on, and redo the step
      [0]   (here: DIST_ERR_PEER_LOST: all_reduce #1: rank 1 reported: rank 2 closed its connection without saying goodbye (did it exit or crash?))
      [0] after the shrink in step 31 of epoch 1: parameters bitwise identical on all 3 ranks (101770 floats and their momentum, FNV-1a e54a6e954e05138f); the failed step changed nothing (the hash from before it)
      [0] step 31 of epoch 1 done on 3 ranks, 18.6 ms after its all_reduce failed
      [0] after step 40 of epoch 1: dist_grow(c, 1) admitted 1 newcomer in 2.5 ms: 4 ranks
      [2] restarted (restart 1), joined the job as rank 3 of 4, 140 ms after it started; training from step 41 of epoch 1
      [0] after step 40 of epoch 1, 1 newcomer in: parameters bitwise identical on all 4 ranks (101770 floats and their momentum, FNV-1a 16fa7b9fc3218507)
      [0] epoch 1/3  train loss 0.9089  test loss 0.5250  test accuracy 80.90% (1618/2000)  0.98 s
      ...
      [0] epoch 3/3  train loss 0.4172  test loss 0.4517  test accuracy 83.55% (1671/2000)  0.90 s
      [0] end: parameters bitwise identical on all 4 ranks (101770 floats and their momentum, FNV-1a daef79d3da99fb8c)
      [0] elastic: 3 epochs in 2.73 s, final test accuracy 83.55%; sizes 4 -> 3 -> 4 (4 from the start, 3 from step 31 of epoch 1, 4 from step 41 of epoch 1)
      [0]   time lost to the failure: 18.8 ms from the start of the all_reduce that failed to the end of the first step on the survivors (it failed after 0.1 ms; agree 0.9, shrink 2.6, check 4.0, the step again 11.1); the run averaged 14.7 ms a step
      [0]   time lost to the join: 15.3 ms (the dist_grow that admitted 1 newcomer 2.5, the state's broadcast 5.2, the check 7.6; a dist_grow that admits nobody takes 5.0 ms on average, 18 of them); the newcomer was admitted 140 ms after it started and had done its first step at 156 ms
      [0]   rank 0 spent 0.71 s in the gradients' all_reduce, 0.68 s in dist_agree
      [0] elastic ok: test accuracy 83.55% >= 80%, parameters bitwise identical on all 4 ranks after every change
   (4 ranks on a loaded 2-core machine: the times vary by several times
   from run to run.)  The losses and accuracies are those of the run
   without a failure, to the printed digit or nearly: the same global
   batches, whoever computes them (the sums come out in another order, so
   the parameters differ from that run's in their last bits).  The run
   exits with 1 unless the rank died, the survivors went on as 3 and were
   4 again, the parameters were identical after each change and the test
   accuracy is at least 80% (with --smoke: above 40%, and the loss fell).
   distrun says that it restarted the rank, and exits with 0.  Without
   --max-restarts distrun stops the whole job when the rank dies (exit
   137).

   How: every collective of the loop is followed by dist_agree on "it
   worked here" (a round trip to the store), because a collective can
   fail on some ranks and succeed on others, and nothing is applied
   before all say yes: a step that failed is redone from the same
   parameters on the shrunk communicator.  Ranks are positions in the
   current communicator, so every rank shuffles every row of the data
   (not only its own, see "who trains on what") and can take over any.
   While the job is smaller than it started, dist_grow waits for the
   missing ranks (distrun restarts a rank that died or stops the job), and
   the end of the run is a grow point too, so that a rank that dies late
   is not left waiting to join a job that has finished.
   The momentum is kept in this program, not in dist_optim_sgd (whose
   buffers a newcomer could not be sent): the optimizer runs with
   momentum 0 on the gradient already folded into the buffer, the same
   update bit for bit.

   Data: build/data holds t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte,
   the 10,000-image test split of Fashion-MNIST (make unpacks them from
   examples/data): the program trains on the first 8,000 and tests on the
   last 2,000.  If DIR also holds train-images-idx3-ubyte and
   train-labels-idx1-ubyte (Fashion-MNIST's or MNIST's 60,000-image
   training split), it trains on those and tests on all 10,000.

   Rank 0 prints the loss and the test accuracy after each epoch.  With
   --progress it draws a progress bar on stderr too, meant for a terminal,
   so under distrun with --no-prefix (distrun relays prefixed lines through
   a pipe, where a bar's carriage returns make a mess):
      build/distrun --no-prefix -n 4 build/examples/dist_sgd --progress

   The same program runs with any number of ranks, and 1, 2, 3 or 4 ranks
   train on the same global batches (see "who trains on what"): they
   compute the same gradient, up to the order in which floats are added,
   and print the same losses and accuracies, to the last digit or nearly.
   That is the point of synchronous data parallelism: W ranks with batches
   of 128/W take exactly the steps of one process with batches of 128,
   W times faster when the compute dominates. */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"        /* its tensors; it includes dist.h */

#include <errno.h>
#include <math.h>
#include <signal.h>          /* raise(SIGKILL): --elastic's victim (on Windows,
                                TerminateProcess, which dist.h's <windows.h> declares) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GLOBAL_BATCH 128     /* images per step, summed over all ranks */
#define PIXELS       784     /* 28 x 28 */
#define HIDDEN       128
#define CLASSES      10
#define SEED         1234    /* the tutorial's torch.manual_seed(1234) */
#define MOMENTUM     0.9f
#define SMOKE_TRAIN  2048
#define SMOKE_TEST   512
/* The smoke run's bar for test accuracy after one epoch of 2,048 images
   (16 steps): it measures 70.5% with the default seed on 1 to 4 ranks,
   and from 66% to 75% with seeds 1 to 8.  Guessing gets 10%, and so does
   a model that does not learn (gradients lost, the wrong sign, a broken
   average); 40% leaves room for other data in --data. */
#define SMOKE_MIN_ACCURACY 0.40
/* --elastic: the step of epoch 1 (of 62; of 16 in the smoke run) in which
   the victim dies, how often the members call dist_grow, and the test
   accuracy the full run must reach (the issue's bar; 83.55% without
   failures).  The smoke run keeps SMOKE_MIN_ACCURACY. */
#define KILL_STEP            31
#define SMOKE_KILL_STEP      6
#define GROW_EVERY           10
#define ELASTIC_MIN_ACCURACY 0.80

/* ---- options ----------------------------------------------------------- */

typedef struct options {
    int epochs;
    const char *data_dir;
    float lr;
    int per_tensor;
    int progress;
    int smoke;
    uint64_t seed;
    int elastic;             /* --elastic: a rank dies, the others shrink, it rejoins */
    int kill_step;           /* --kill-step: the step of epoch 1 it dies in, from 1 (0: the default) */
    int kill_rank;           /* --kill-rank: which rank of the launch dies (-1: none) */
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: distrun -n N dist_sgd [--epochs N] [--data DIR] [--lr X] [--seed N] [--per-tensor] [--progress] [--smoke]\n"
               "       distrun -n N --max-restarts 1 dist_sgd --elastic [--kill-step N] [--kill-rank R] [options above]\n");
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* The default --data: build/data, where `make` unpacks the built-in data,
   seen from the repository root; started from elsewhere, ../data beside
   the program (build/examples/NAME, build\windows\NAME.exe: build/data). */
static const char *default_data_dir(const char *argv0) {
    static char dir[4096];
    const char *sep = NULL;
    snprintf(dir, sizeof dir, "build/data");
    if (file_exists("build/data/t10k-images-idx3-ubyte") || !argv0) return dir;
    for (const char *p = argv0; *p; p++)
        if (*p == '/' || *p == '\\') sep = p;
    if (sep) snprintf(dir, sizeof dir, "%.*s/../data", (int)(sep - argv0), argv0);
    return dir;
}

/* 0 to go on; 2 after a message about the arguments; -1 after --help.
   Every rank parses the same arguments, so only rank 0 speaks (we parse
   before joining the job: dist_env_rank reads the rank the launcher gave). */
static int parse_args(int argc, char **argv, options *o) {
    int rank = 0, world = 1;
    int quiet = dist_env_rank(&rank, &world) == DIST_OK && rank != 0;
    const char *kill_option = NULL;
    o->epochs = 3;
    o->data_dir = default_data_dir(argv[0]);
    o->lr = 0.05f;
    o->per_tensor = 0;
    o->progress = 0;
    o->smoke = 0;
    o->seed = SEED;
    o->elastic = 0;
    o->kill_step = 0;
    o->kill_rank = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        int bad = 0;
        if (strcmp(a, "--smoke") == 0) { o->smoke = 1; continue; }
        if (strcmp(a, "--per-tensor") == 0) { o->per_tensor = 1; continue; }
        if (strcmp(a, "--progress") == 0) { o->progress = 1; continue; }
        if (strcmp(a, "--elastic") == 0) { o->elastic = 1; continue; }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { if (!quiet) usage(stdout); return -1; }
        if (strcmp(a, "--epochs") != 0 && strcmp(a, "--data") != 0 && strcmp(a, "--lr") != 0 && strcmp(a, "--seed") != 0 &&
            strcmp(a, "--kill-step") != 0 && strcmp(a, "--kill-rank") != 0) {
            if (!quiet) { fprintf(stderr, "dist_sgd: unknown option %s\n", a); usage(stderr); }
            return 2;
        }
        if (!v) { if (!quiet) fprintf(stderr, "dist_sgd: %s needs a value\n", a); return 2; }
        i++;
        errno = 0;
        if (strcmp(a, "--data") == 0) {
            o->data_dir = v;
            bad = !*v;
        } else if (strcmp(a, "--epochs") == 0) {
            long n = strtol(v, &end, 10);
            bad = n < 1 || n > 1000;
            o->epochs = (int)n;
        } else if (strcmp(a, "--lr") == 0) {
            double x = strtod(v, &end);
            bad = !(x > 0 && x <= 10);
            o->lr = (float)x;
        } else if (strcmp(a, "--kill-step") == 0) {
            long n = strtol(v, &end, 10);
            bad = n < 1 || n > 1000000;
            o->kill_step = (int)n;
        } else if (strcmp(a, "--kill-rank") == 0) {
            long n = strtol(v, &end, 10);
            bad = n < -1 || n >= GLOBAL_BATCH;
            o->kill_rank = (int)n;
        } else {
            o->seed = strtoull(v, &end, 10);
            bad = *v == '-';
        }
        if (bad || errno || (end && (end == v || *end))) {
            if (!quiet) fprintf(stderr, "dist_sgd: %s %s: expected %s\n", a, v,
                                strcmp(a, "--epochs") == 0 ? "a number from 1 to 1000" : strcmp(a, "--lr") == 0 ? "a number above 0, at most 10"
                                : strcmp(a, "--seed") == 0 ? "a number from 0" : strcmp(a, "--kill-step") == 0 ? "a step from 1"
                                : strcmp(a, "--kill-rank") == 0 ? "a rank from 0, or -1 for none" : "a directory");
            return 2;
        }
        if (strcmp(a, "--kill-step") == 0 || strcmp(a, "--kill-rank") == 0) kill_option = a;
    }
    if (kill_option && !o->elastic) {
        if (!quiet) fprintf(stderr, "dist_sgd: %s goes with --elastic\n", kill_option);
        return 2;
    }
    if (o->smoke) o->epochs = 1;
    if (!o->kill_step) o->kill_step = o->smoke ? SMOKE_KILL_STEP : KILL_STEP;
    return 0;
}

/* ---- the data: MNIST's IDX files ----------------------------------------
   An IDX file is a 4-byte magic number (two zero bytes, a type byte, 0x08
   for unsigned bytes, and the number of dimensions), each dimension as a
   big-endian 32-bit number, then the data, row-major: the images file is
   [count][28][28] pixels (0 = background), the labels file [count] classes.
   Each rank reads the files itself; they are small, and reading them is
   simpler than sending them. */

typedef struct split {       /* images [i] at pixels + i * PIXELS, labels[i] */
    const uint8_t *pixels;
    const uint8_t *labels;
    int n;
} split;

typedef struct dataset {
    uint8_t *files[4];       /* what was read, freed at the end */
    split train, test;
    char what[160];
} dataset;

/* The whole file, or NULL with a sentence in err. */
static uint8_t *read_file(const char *path, size_t *len, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long size;
    if (!f) {
        int e = errno;
        char gz[4200];
        snprintf(gz, sizeof gz, "%s.gz", path);
        if (e == ENOENT && file_exists(gz))
            snprintf(err, cap, "%s: no such file, but %s.gz is there: unpack it (gunzip -k)", path, path);
        else if (e == ENOENT)
            snprintf(err, cap, "%s: no such file (make build/data/t10k-images-idx3-ubyte build/data/t10k-labels-idx1-ubyte "
                               "unpacks the built-in data; --data DIR reads another directory)", path);
        else
            snprintf(err, cap, "%s: %s", path, strerror(e));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, cap, "%s: cannot find its size: %s", path, strerror(errno));
    } else if (!(buf = (uint8_t *)malloc(size ? (size_t)size : 1))) {
        snprintf(err, cap, "%s: out of memory for %ld bytes", path, size);
    } else if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        snprintf(err, cap, "%s: read failed: %s", path, ferror(f) ? strerror(errno) : "the file got shorter");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)size : 0;
    return buf;
}

/* Reads an IDX file of unsigned bytes with `ndim` dimensions (1: labels,
   3: images) into *file; dims[] and *data describe it.  0, or -1 with a
   sentence naming the file. */
static int read_idx(const char *path, int ndim, uint32_t *dims, uint8_t **file, const uint8_t **data, char *err, size_t cap) {
    size_t len, header = 4 + 4 * (size_t)ndim, need = 1;
    uint8_t *b = read_file(path, &len, err, cap);
    if (!b) return -1;
    *file = b;
    if (len >= 2 && b[0] == 0x1f && b[1] == 0x8b)
        return snprintf(err, cap, "%s is gzip-compressed: unpack it first (gunzip)", path), -1;
    if (len < 4 || b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != ndim)
        return snprintf(err, cap, "%s is not an IDX file of %s: its magic number is %s%02x%02x%02x%02x, expected 0x000008%02x",
                        path, ndim == 1 ? "labels" : "images", len < 4 ? "(too short) 0x" : "0x",
                        len > 0 ? b[0] : 0, len > 1 ? b[1] : 0, len > 2 ? b[2] : 0, len > 3 ? b[3] : 0, ndim), -1;
    if (len < header)
        return snprintf(err, cap, "%s: truncated header (%zu bytes, %d dimensions need %zu)", path, len, ndim, header), -1;
    for (int d = 0; d < ndim; d++) {
        const uint8_t *p = b + 4 + 4 * d;
        dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (dims[d] == 0 || dims[d] > 100000000u)
            return snprintf(err, cap, "%s: dimension %d is %u", path, d, dims[d]), -1;
        need *= dims[d];     /* at most 1e8 per dimension and 3 of them: 1e24 > SIZE_MAX, so check */
        if (need > ((size_t)1 << 40))
            return snprintf(err, cap, "%s: dimensions too large", path), -1;
    }
    if (len - header != need)
        return snprintf(err, cap, "%s: %zu bytes of data after the header, but its dimensions need %zu (%s)", path,
                        len - header, need, len - header < need ? "truncated?" : "trailing bytes"), -1;
    *data = b + header;
    return 0;
}

/* "<dir>/<name>-images-idx3-ubyte" and its labels, as one split. */
static int load_split(const char *dir, const char *name, uint8_t **files, split *s, char *err, size_t cap) {
    char ipath[4096], lpath[4096];
    uint32_t idims[3], ldims[1];
    snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte", dir, name);
    snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte", dir, name);
    if (read_idx(ipath, 3, idims, &files[0], &s->pixels, err, cap) != 0) return -1;
    if (read_idx(lpath, 1, ldims, &files[1], &s->labels, err, cap) != 0) return -1;
    if (idims[1] * idims[2] != PIXELS)
        return snprintf(err, cap, "%s: images of %u x %u pixels; this network takes 28 x 28", ipath, idims[1], idims[2]), -1;
    if (idims[0] != ldims[0])
        return snprintf(err, cap, "%s holds %u images but %s %u labels", ipath, idims[0], lpath, ldims[0]), -1;
    if (idims[0] > 1000000)
        return snprintf(err, cap, "%s: %u images (this example reads at most 1,000,000)", ipath, idims[0]), -1;
    for (uint32_t i = 0; i < ldims[0]; i++)
        if (s->labels[i] >= CLASSES)
            return snprintf(err, cap, "%s: label %u is %u, not a class 0 to 9", lpath, i, s->labels[i]), -1;
    s->n = (int)idims[0];
    return 0;
}

/* The 60k/10k splits when the train files are there, else the t10k split
   cut 8,000 / 2,000. */
static int load_data(const char *dir, int smoke, dataset *d, char *err, size_t cap) {
    char probe[4096];
    int have_train;
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte", dir);
    have_train = file_exists(probe);
    snprintf(probe, sizeof probe, "%s/train-labels-idx1-ubyte", dir);
    have_train |= file_exists(probe);       /* one of the two: load both, and say which is missing */
    if (load_split(dir, "t10k", &d->files[0], &d->test, err, cap) != 0) return -1;
    if (have_train) {
        if (load_split(dir, "train", &d->files[2], &d->train, err, cap) != 0) return -1;
        snprintf(d->what, sizeof d->what, "%s: train on train-* (%d images), test on t10k-* (%d)", dir, d->train.n, d->test.n);
    } else {
        int cut = d->test.n * 4 / 5;     /* 8,000 of 10,000 */
        if (d->test.n < 10)
            return snprintf(err, cap, "%s/t10k-images-idx3-ubyte: only %d images", dir, d->test.n), -1;
        d->train = d->test;
        d->train.n = cut;
        d->test.pixels += (size_t)cut * PIXELS;
        d->test.labels += cut;
        d->test.n -= cut;
        snprintf(d->what, sizeof d->what, "%s: t10k-* only: train on its first %d images, test on the last %d", dir, d->train.n, d->test.n);
    }
    if (smoke) {                         /* a subset: seconds, not minutes */
        if (d->train.n > SMOKE_TRAIN) d->train.n = SMOKE_TRAIN;
        if (d->test.n > SMOKE_TEST) d->test.n = SMOKE_TEST;
        snprintf(d->what + strlen(d->what), sizeof d->what - strlen(d->what), "; smoke: %d and %d", d->train.n, d->test.n);
    }
    return 0;
}

/* Images and labels of idx[0..n) into x, y.  Pixels are scaled to [0, 1]
   and then normalised with the mean and standard deviation of
   Fashion-MNIST's training images (0.2860, 0.3530; MNIST's, 0.1307 and
   0.3081, are near enough): inputs centred on 0 with unit spread let one
   learning rate suit every weight, and SGD converges faster. */
#define PIXEL_MEAN 0.2860f
#define PIXEL_STD  0.3530f
static void fill_batch(const split *s, const int *idx, int n, float *x, int64_t *y) {
    float table[256];
    for (int v = 0; v < 256; v++) table[v] = ((float)v / 255.0f - PIXEL_MEAN) / PIXEL_STD;
    for (int i = 0; i < n; i++) {
        const uint8_t *p = s->pixels + (size_t)idx[i] * PIXELS;
        for (int k = 0; k < PIXELS; k++) x[(size_t)i * PIXELS + k] = table[p[k]];
        y[i] = s->labels[idx[i]];
    }
}

/* ---- the seeded shuffle -------------------------------------------------
   splitmix64 and Fisher-Yates: the same seed gives the same permutation on
   every rank (and every machine), which is what lets each rank pick its
   slice without telling the others anything. */

static uint64_t next_random(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(int *a, int n, uint64_t seed) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next_random(&seed) % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- who trains on what -------------------------------------------------
   The tutorial's DataPartitioner: every rank shuffles the indices of the
   training set with the same seed, so all hold the same permutation, and
   each takes a contiguous slice of it as its partition.  A rank trains on
   its own partition only, every epoch (on a cluster it would need only
   that slice on its disk).

   The global batch of 128 is split as evenly as it goes: with 4 ranks 32
   each; when the world size does not divide 128 the first 128 % world
   ranks take one image more (3 ranks: 43 + 43 + 42), so a step still sees
   exactly 128 images, as with 1 rank, and average_gradients weighs each
   rank by its share.  More than 128 ranks would leave some with nothing
   to do: the program refuses them.

   The slices are sized by those shares, and laid out so that a run on any
   number of ranks trains on the same global batches as a run on 1 rank.
   Think of the permutation as 128 rows, one per place in the global batch
   (row i starts at i x steps, plus one for each longer row before it; the
   first n % 128 rows are one image longer):

      row   0: p[0]      p[1]      ...  p[steps-1]        rank 0 (rows 0-31)
      row   1: p[steps]  ...                              rank 0
      ...
      row  32: ...                                        rank 1 (rows 32-63)
      ...
      row 127: ...                                        rank 3 (rows 96-127)

   Rank r's partition is its rows, a contiguous slice of p.  Step k takes
   column k: each rank the k-th image of each of its rows.  Each epoch,
   each rank shuffles each of its rows with a seed made from the epoch and
   the row's number (not the rank's), as the tutorial's DataLoader shuffles
   a partition, so batches are new every epoch and still the same whatever
   the world size.  A row one image longer than `steps` leaves out one
   image per epoch, a random one (torch's drop_last).

   All ranks run the same number of steps, and they must: every step ends
   in a collective that all ranks have to join, and a rank that took one
   step more would wait for the others (here until the timeout). */

typedef struct plan {
    int steps;               /* steps per epoch: train images / 128 */
    int extra;               /* train images % 128: rows one image longer */
    int first_row;           /* this rank's rows: [first_row, first_row + batch) */
    int batch;               /* this rank's images per step */
    float weight;            /* batch * world / 128: see average_gradients */
} plan;

static int share_of_batch(int r, int world) { return GLOBAL_BATCH / world + (r < GLOBAL_BATCH % world); }

static int row_start(const plan *p, int row) { return row * p->steps + (row < p->extra ? row : p->extra); }
static int row_length(const plan *p, int row) { return p->steps + (row < p->extra); }

static plan make_plan(int n_train, int rank, int world) {
    plan p;
    p.steps = n_train / GLOBAL_BATCH;
    p.extra = n_train % GLOBAL_BATCH;
    p.first_row = 0;
    for (int q = 0; q < rank; q++) p.first_row += share_of_batch(q, world);
    p.batch = share_of_batch(rank, world);
    p.weight = (float)p.batch * (float)world / GLOBAL_BATCH;
    return p;
}

/* ---- the model ------------------------------------------------------------
   Every rank makes its parameters from the same seeds, so they start
   identical without a word between the ranks.  PyTorch's
   DistributedDataParallel broadcasts rank 0's parameters instead
   (dist_broadcast(world, data, n, DIST_FLOAT32, 0) per tensor would do it
   here): that also works when the ranks' random number generators differ
   (other seeds, other libraries or machines), at the cost of a broadcast.
   The check at the start of training catches any difference either way. */

typedef struct mlp {
    dist_tensor_t *p[4];     /* w1 [128,784], b1 [128], w2 [10,128], b2 [10] */
} mlp;

/* torch.nn.Linear's default: weights and biases uniform in +-1/sqrt(in). */
static int mlp_init(mlp *m, uint64_t seed) {
    const int64_t w1[2] = { HIDDEN, PIXELS }, b1[1] = { HIDDEN }, w2[2] = { CLASSES, HIDDEN }, b2[1] = { CLASSES };
    float a1 = 1.0f / sqrtf((float)PIXELS), a2 = 1.0f / sqrtf((float)HIDDEN);
    m->p[0] = dist_tensor_uniform(2, w1, -a1, a1, seed + 1);
    m->p[1] = dist_tensor_uniform(1, b1, -a1, a1, seed + 2);
    m->p[2] = dist_tensor_uniform(2, w2, -a2, a2, seed + 3);
    m->p[3] = dist_tensor_uniform(1, b2, -a2, a2, seed + 4);
    for (int i = 0; i < 4; i++) {
        if (!m->p[i]) return -1;
        dist_tensor_set_requires_grad(m->p[i], 1);
    }
    return 0;
}

/* Logits [N,10] of images x [N,784] (NULL with a sentence on failure). */
static dist_tensor_t *mlp_forward(mlp *m, dist_tensor_t *x) {
    dist_tensor_t *z = dist_tensor_linear(x, m->p[0], m->p[1]);
    dist_tensor_t *h = dist_tensor_relu(z);
    dist_tensor_t *logits = dist_tensor_linear(h, m->p[2], m->p[3]);
    dist_tensor_release(z);              /* the graph keeps what backward needs */
    dist_tensor_release(h);
    return logits;
}

static size_t mlp_numel(const mlp *m) {
    size_t n = 0;
    for (int i = 0; i < 4; i++) n += dist_tensor_numel(m->p[i]);
    return n;
}

/* ---- the distributed part ------------------------------------------------ */

#define CHECK(call, what)                                                            \
    do {                                                                             \
        dist_result r_ = (call);                                                     \
        if (r_ != DIST_OK) {                                                         \
            fprintf(stderr, "dist_sgd: %s: %s: %s\n", what, dist_result_name(r_),    \
                    dist_error_message(world));                                      \
            return -1;                                                               \
        }                                                                            \
    } while (0)

/* Averages every parameter's gradient over the ranks, in place.

   Each rank's gradient is the mean over its own images.  The gradient of
   the global batch is the mean over all 128 images:
      sum over ranks r of (batch_r / 128) * gradient_r
   With equal shares (world divides 128) that is the plain average of the
   ranks' gradients, DIST_AVG, which is what the tutorial does (all_reduce
   SUM, then divide by the world size).  With unequal shares each rank
   first multiplies its gradient by batch_r * world / 128 (1.0 when the
   shares are equal), and DIST_AVG's division by the world size leaves
   exactly the sum above.  `weight` is that factor times the learning-rate
   schedule's (lr_factor), one multiplication for both.

   One all_reduce over one flat buffer, rather than one per parameter as
   the tutorial does: each collective call has a fixed cost whatever its
   size (every rank must reach it, and the data crosses between ranks in
   several rounds: log2(world) for a tree, 2 x (world - 1) for a ring,
   each a message and a wait), which the two bias tensors, 128 and 10
   floats, would pay for almost nothing.  One large buffer pays it once
   and gets the library's bandwidth-optimal algorithm for all of it.  The
   price is copying 101,770 floats in and out, microseconds.  Measured
   with bench/coll_bench on 4 ranks of a 2-core machine: an all_reduce of
   10 floats takes ~6-9 us, of all 101,770 ~230 us, so three extra calls a
   step are ~5 ms over a whole run, lost here in the time ranks wait for
   each other (compare with --per-tensor).  It matters with many tensors
   (ResNet-50 has 161) and between hosts, where every round is a network
   round trip.  PyTorch's DistributedDataParallel does the same with
   "buckets" of 25 MB, and starts reducing a bucket while backward is
   still computing the gradients of the layers below it (overlap; here
   backward is one call, so there is nothing to overlap with). */
static dist_result average_gradients(dist_t *world, mlp *m, float *flat, float weight, int per_tensor, float *loss) {
    size_t off = 0;
    dist_result r;
    for (int i = 0; i < 4; i++) {
        dist_tensor_t *g = dist_tensor_grad(m->p[i]);
        if (weight != 1.0f) {
            float *d = dist_tensor_data(g);
            for (size_t k = 0; k < dist_tensor_numel(g); k++) d[k] *= weight;
        }
        if (per_tensor && (r = dist_all_reduce(world, dist_tensor_data(g), dist_tensor_numel(g), DIST_FLOAT32, DIST_AVG)) != DIST_OK) return r;
        if (!per_tensor) memcpy(flat + off, dist_tensor_data(g), dist_tensor_numel(g) * sizeof(float));
        off += dist_tensor_numel(g);
    }
    /* --elastic: this rank's loss, weighted like its gradient, rides along
       (one float more), so every rank learns the global batch's loss at
       once, whoever the ranks were at that step. */
    if (per_tensor) return loss ? dist_all_reduce(world, loss, 1, DIST_FLOAT32, DIST_AVG) : DIST_OK;
    if (loss) flat[off] = *loss;
    if ((r = dist_all_reduce(world, flat, off + (loss != NULL), DIST_FLOAT32, DIST_AVG)) != DIST_OK) return r;
    if (loss) *loss = flat[off];
    off = 0;
    for (int i = 0; i < 4; i++) {
        dist_tensor_t *g = dist_tensor_grad(m->p[i]);
        memcpy(dist_tensor_data(g), flat + off, dist_tensor_numel(g) * sizeof(float));
        off += dist_tensor_numel(g);
    }
    return DIST_OK;
}

/* FNV-1a over the bytes of every parameter. */
static uint64_t params_hash(mlp *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 4; i++) {
        const uint8_t *b = (const uint8_t *)dist_tensor_data(m->p[i]);
        for (size_t k = 0; k < dist_tensor_numel(m->p[i]) * sizeof(float); k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    return h;
}

/* Are the parameters the same, bit for bit, on every rank?  Each rank
   hashes its own and all_gather gives every rank everyone's hash, so every
   rank reaches the same verdict (and exits with the same status).  1 yes,
   0 no (rank 0 says which ranks differ), -1 when the collective failed. */
static int params_identical(dist_t *world, mlp *m, const char *when) {
    int rank = dist_rank(world), n = dist_world_size(world), same = 1;
    uint64_t mine = params_hash(m);
    int64_t *all = (int64_t *)malloc((size_t)n * sizeof *all);
    dist_result r;
    if (!all) return fprintf(stderr, "dist_sgd: out of memory\n"), -1;
    r = dist_all_gather(world, &mine, all, 1, DIST_INT64);
    if (r != DIST_OK) {
        fprintf(stderr, "dist_sgd: all_gather of the parameters' hashes: %s\n", dist_error_message(world));
        free(all);
        return -1;
    }
    for (int q = 1; q < n; q++) same &= all[q] == all[0];
    if (rank == 0) {
        if (same)
            printf("%s: parameters bitwise identical on %s %d rank%s (%zu floats, FNV-1a %016llx)\n", when, n == 1 ? "the" : "all", n,
                   n == 1 ? "" : "s", mlp_numel(m), (unsigned long long)all[0]);
        else
            for (int q = 0; q < n; q++)
                printf("%s: parameters DIFFER: rank %d's hash is %016llx%s\n", when, q, (unsigned long long)all[q],
                       all[q] == all[0] ? "" : " (not rank 0's)");
        fflush(stdout);
    }
    free(all);
    return same;
}

/* Test loss and accuracy: each rank evaluates its own slice of the test
   set (evaluate_slice: sums[0] its correct answers, sums[1] its loss times
   its images) and one all_reduce adds up the counts.  Every rank gets the
   result. */
static int evaluate_slice(dist_t *world, mlp *m, const split *test, double *sums) {
    int rank = dist_rank(world), n = dist_world_size(world);
    int lo = (int)((int64_t)test->n * rank / n), hi = (int)((int64_t)test->n * (rank + 1) / n);
    int idx[256];
    int64_t y[256];
    sums[0] = sums[1] = 0;
    dist_no_grad_enter();                /* no graph: nothing to differentiate */
    for (int start = lo; start < hi; start += 256) {
        int count = hi - start < 256 ? hi - start : 256;
        const int64_t shape[2] = { count, PIXELS };
        dist_tensor_t *x = dist_tensor_new(2, shape, NULL), *logits, *l;
        for (int i = 0; i < count; i++) idx[i] = start + i;
        if (x) fill_batch(test, idx, count, dist_tensor_data(x), y);
        logits = mlp_forward(m, x);
        l = dist_tensor_cross_entropy(logits, y);
        if (!l) {
            fprintf(stderr, "dist_sgd: evaluation: %s\n", dist_rpc_error_message());
            dist_tensor_release(x);
            dist_tensor_release(logits);
            dist_no_grad_exit();
            return -1;
        }
        sums[1] += (double)dist_tensor_item(l) * count;
        for (int i = 0; i < count; i++) {
            const float *row = dist_tensor_data(logits) + (size_t)i * CLASSES;
            int best = 0;
            for (int c = 1; c < CLASSES; c++) if (row[c] > row[best]) best = c;
            sums[0] += best == y[i];
        }
        dist_tensor_release(l);
        dist_tensor_release(logits);
        dist_tensor_release(x);
    }
    dist_no_grad_exit();
    return 0;
}

static int evaluate(dist_t *world, mlp *m, const split *test, double *loss, double *accuracy) {
    double sums[2];
    if (evaluate_slice(world, m, test, sums) != 0) return -1;
    CHECK(dist_all_reduce(world, sums, 2, DIST_FLOAT64, DIST_SUM), "all_reduce of the test results");
    *accuracy = sums[0] / test->n;
    *loss = sums[1] / test->n;
    return 0;
}

/* A bar on stderr (--progress), only for rank 0. */
static void progress(int epoch, int epochs, int step, int steps, float loss) {
    static const char bar[] = "##############################";
    int width = (int)sizeof bar - 1, done = step * width / steps;
    if (step < steps)
        fprintf(stderr, "\repoch %d/%d [%.*s%*s] %d/%d  rank 0 loss %.3f ", epoch, epochs, done, bar, width - done, "", step, steps, loss);
    else
        fprintf(stderr, "\r%*s\r", width + 50, "");      /* wipe it before the epoch's line */
    fflush(stderr);
}

/* ---- training ------------------------------------------------------------ */

typedef struct state {
    dist_t *world;
    const options *opt;
    const dataset *data;
    plan p;
    mlp m;
    dist_optim_t *sgd;
    dist_tensor_t *x;        /* this rank's batch [batch, 784], refilled each step */
    int64_t *y;              /* its labels */
    int *order;              /* the shuffled training indices (all of them) */
    int *idx;                /* this step's images */
    float *flat;             /* all gradients, one after the other */
    double *step_loss;       /* per step: the global batch's loss */
    double comm_s;           /* seconds in the gradients' all_reduce */
    /* --elastic */
    dist_t *c;               /* the communicator training runs on: the world, then what shrink and grow give */
    float *momentum;         /* SGD's momentum buffer, kept here (see train_elastic) */
    float *sync_buf;         /* the parameters and the momentum, on their way to a newcomer */
    double *sync_loss;       /* the epoch's step losses, likewise */
    int x_rows;              /* rows of x: this rank's share of the batch, which changes with the size */
    int order_epoch;         /* order holds the shuffles of the epochs up to this one */
    int64_t t_start;         /* when the process started (dist_time_ns) */
} state;

/* The learning rate falls from --lr to 0 along half a cosine over the
   run.  With a constant rate the test accuracy after the last step swings
   by a percent or two from one seed to the next (SGD keeps jumping around
   the minimum); decayed, it settles, and runs agree.  dist_optim_sgd
   takes its rate once, so the schedule scales the gradients instead: for
   plain SGD that is the same thing, and with momentum each gradient keeps
   the rate of its own step (torch's schedulers change the rate of the
   momentum already gathered too; over a few steps the difference fades). */
static float lr_factor(int step, int total_steps) {
    return (float)(0.5 * (1.0 + cos(3.141592653589793 * step / total_steps)));
}

/* Forward and backward over this step's images, s->idx[0..batch): every
   parameter gets the gradient of the mean loss over them, *loss that loss.
   0, or -1 with a message. */
static int local_gradients(state *s, int batch, float *loss) {
    dist_tensor_t *logits, *l;
    fill_batch(&s->data->train, s->idx, batch, dist_tensor_data(s->x), s->y);
    logits = mlp_forward(&s->m, s->x);
    l = dist_tensor_cross_entropy(logits, s->y);        /* mean over this rank's images */
    dist_tensor_release(logits);
    dist_optim_zero_grad(s->sgd);                       /* backward adds to the gradients */
    if (!l || dist_tensor_backward(l, NULL) != DIST_OK) {
        fprintf(stderr, "dist_sgd: rank %d: %s\n", dist_rank(s->world), dist_rpc_error_message());
        dist_tensor_release(l);
        return -1;
    }
    *loss = dist_tensor_item(l);
    dist_tensor_release(l);
    for (int i = 0; i < 4; i++)
        if (!dist_tensor_grad(s->m.p[i])) return fprintf(stderr, "dist_sgd: parameter %d got no gradient\n", i), -1;
    return 0;
}

/* One epoch: shuffle each of this rank's rows (the tutorial's DataLoader
   with shuffle=True), then for each step: forward, backward, average the
   gradients, step.  Afterwards every rank knows the global batch's loss at
   every step. */
static int train_epoch(state *s, int epoch) {
    dist_t *world = s->world;
    int rank = dist_rank(world), bar = rank == 0 && s->opt->progress;
    const plan *p = &s->p;
    for (int row = p->first_row; row < p->first_row + p->batch; row++)
        shuffle(s->order + row_start(p, row), row_length(p, row),
                s->opt->seed ^ ((uint64_t)(epoch + 1) << 40) ^ ((uint64_t)(row + 1) << 20));
    for (int step = 0; step < p->steps; step++) {
        int64_t t0;
        float c, loss;
        dist_result r;
        for (int j = 0; j < p->batch; j++) s->idx[j] = s->order[row_start(p, p->first_row + j) + step];
        if (local_gradients(s, p->batch, &loss) != 0) return -1;
        /* Weighted like the gradients, so the average below is the loss of
           the whole global batch. */
        s->step_loss[step] = (double)loss * s->p.weight;
        if (bar) progress(epoch + 1, s->opt->epochs, step, s->p.steps, loss);
        c = lr_factor(epoch * p->steps + step, s->opt->epochs * p->steps);
        t0 = dist_time_ns();
        if ((r = average_gradients(world, &s->m, s->flat, p->weight * c, s->opt->per_tensor, NULL)) != DIST_OK) {
            fprintf(stderr, "dist_sgd: all_reduce of the gradients: %s: %s\n", dist_result_name(r), dist_error_message(world));
            return -1;
        }
        s->comm_s += (double)(dist_time_ns() - t0) * 1e-9;
        if (dist_optim_step(s->sgd) != DIST_OK) {         /* the same step on every rank */
            fprintf(stderr, "dist_sgd: optimizer: %s\n", dist_rpc_error_message());
            return -1;
        }
    }
    if (bar) progress(epoch + 1, s->opt->epochs, s->p.steps, s->p.steps, 0.0f);
    /* The losses are for printing only, so they travel once an epoch. */
    CHECK(dist_all_reduce(world, s->step_loss, (size_t)s->p.steps, DIST_FLOAT64, DIST_AVG), "all_reduce of the losses");
    return 0;
}

static double mean(const double *a, int n) {
    double t = 0;
    for (int i = 0; i < n; i++) t += a[i];
    return n ? t / n : 0;
}

/* Trains and checks; the process's exit status. */
static int train(state *s) {
    dist_t *world = s->world;
    int rank = dist_rank(world), n = dist_world_size(world), ok = 1, same;
    const options *o = s->opt;
    double accuracy = 0, test_loss = 0, first = 0, last = 0;
    int64_t start = dist_time_ns();
    /* The tutorial's DataPartitioner: shuffle all indices with one seed,
       the same on every rank; this rank's partition is its rows. */
    for (int i = 0; i < s->data->train.n; i++) s->order[i] = i;
    shuffle(s->order, s->data->train.n, o->seed);
    if (rank == 0) {
        printf("dist_sgd: %d rank%s, global batch %d (", n, n == 1 ? "" : "s", GLOBAL_BATCH);
        for (int q = 0; q < n && q < 8; q++) printf("%s%d", q ? "+" : "", share_of_batch(q, n));
        printf("%s), %d steps per epoch, SGD lr %g (cosine to 0) momentum %g, %s\n", n > 8 ? "+..." : "", s->p.steps, (double)o->lr,
               (double)MOMENTUM, o->per_tensor ? "one all_reduce per parameter" : "one all_reduce of all gradients");
        printf("data %s\n", s->data->what);
        fflush(stdout);
    }
    if (params_identical(world, &s->m, "start") != 1) return 1;
    for (int epoch = 0; epoch < o->epochs; epoch++) {
        int64_t t0 = dist_time_ns();
        if (train_epoch(s, epoch) != 0) return 1;
        if (evaluate(world, &s->m, &s->data->test, &test_loss, &accuracy) != 0) return 1;
        if (rank == 0) {
            printf("epoch %d/%d  train loss %.4f  test loss %.4f  test accuracy %.2f%% (%d/%d)  %.2f s\n", epoch + 1, o->epochs,
                   mean(s->step_loss, s->p.steps), test_loss, 100 * accuracy, (int)lround(accuracy * s->data->test.n), s->data->test.n,
                   (double)(dist_time_ns() - t0) * 1e-9);
            fflush(stdout);
        }
    }
    if ((same = params_identical(world, &s->m, "end")) < 0) return 1;
    ok = same;
    if (rank == 0) {
        printf("%d epoch%s in %.2f s; rank 0 spent %.2f s in the gradients' all_reduce (waiting for the slowest rank included)\n",
               o->epochs, o->epochs == 1 ? "" : "s", (double)(dist_time_ns() - start) * 1e-9, s->comm_s);
        fflush(stdout);
    }
    if (o->smoke) {
        /* The checks.  step_loss and the accuracy came out of all_reduce,
           so every rank has the same numbers and the same verdict: every
           rank's exit status tells. */
        int k = s->p.steps / 4 > 0 ? s->p.steps / 4 : 1;
        first = mean(s->step_loss, k);
        last = mean(s->step_loss + s->p.steps - k, k);
        if (!(last < first)) {
            ok = 0;
            if (rank == 0) printf("smoke FAILED: the training loss did not decrease (first %d steps %.4f, last %d %.4f)\n", k, first, k, last);
        }
        if (!(accuracy > SMOKE_MIN_ACCURACY)) {
            ok = 0;
            if (rank == 0) printf("smoke FAILED: test accuracy %.2f%%, expected above %.0f%%\n", 100 * accuracy, 100 * SMOKE_MIN_ACCURACY);
        }
        if (rank == 0 && ok)
            printf("smoke ok: loss %.3f -> %.3f (mean of the first and last %d steps), test accuracy %.1f%% > %.0f%%, "
                   "parameters identical on %d rank%s\n", first, last, k, 100 * accuracy, 100 * SMOKE_MIN_ACCURACY, n, n == 1 ? "" : "s");
    }
    if (!same && rank == 0) printf("%sFAILED: the ranks' parameters differ\n", o->smoke ? "smoke " : "");
    fflush(stdout);
    return ok ? 0 : 1;
}

/* ---- --elastic: surviving a rank's death, and taking it back ------------
   The loop of README.md's "Surviving failures", around the same steps.
   The job's communicator c starts as the world.  Every collective the
   loop makes (the gradients' all_reduce, the state's broadcast to
   newcomers, the parameters' check, the evaluation) is followed by
   dist_agree on "mine succeeded": a collective can fail on some ranks and
   succeed on others (one that had its result before a peer died), so no
   rank acts on it until all say it worked.  When one did not, or a member
   is gone, every survivor calls dist_shrink(c) and does the same work
   again on the survivors' communicator: a failed step is redone from the
   same parameters, because nothing is applied before the agreement.

   The ranks are positions in c, so after a change each takes its share of
   the same global batch of 128 at its new position (43 + 43 + 42 on 3):
   the sequence of global batches does not depend on who is there, which
   is why every rank shuffles every row of the data here (the same on all
   of them), not only its own.

   Every GROW_EVERY steps, and after the last, every member calls
   dist_grow(c, k, &g): it admits the newcomers waiting (a rank distrun
   restarted), waiting for k of them while the job is k smaller than it
   started (distrun either restarts a rank that died or stops the job, so
   one is coming).  When dist_newcomers(g) says someone joined, rank 0 of g
   broadcasts where the job is (the job struct below), the parameters, the
   momentum and the epoch's step losses; the newcomer starts training from
   there.

   The momentum lives here, not in dist_optim_sgd: the optimizer keeps its
   buffers to itself, and a newcomer needs them.  dist_optim_sgd runs with
   momentum 0 on a gradient this program has already folded into the
   buffer (buf = 0.9 buf + g; then w -= lr buf), which is the same update,
   bit for bit.

   After each change of membership the members check that their
   parameters, momentum and step count are bitwise the same (a hash each,
   all_gather). */

#define MAX_CHANGES 16

/* Where the job is and what happened to it: the same on every member
   (every change is agreed on), sent whole to newcomers (all int64: one
   broadcast). */
typedef struct job_state {
    int64_t done;                     /* steps done, over all epochs */
    int64_t evals;                    /* epochs evaluated */
    int64_t start_size;               /* the size the job started with; dist_grow waits to get back to it */
    int64_t shrinks, newcomers;       /* failures survived, ranks admitted */
    int64_t correct;                  /* the last evaluation's right answers (of the test images) */
    int64_t nchanges;                 /* the sizes over time: change[i] = { steps done then, the new size } */
    int64_t change[MAX_CHANGES][2];
} job_state;
#define JOB_WORDS (sizeof(job_state) / sizeof(int64_t))

/* What each rank puts into a check. */
enum { R_PARAMS, R_MOMENTUM, R_DONE, R_UNTOUCHED, R_JOIN_NS, R_FIRST_NS, R_WORDS };

/* This rank's clock readings (dist_time_ns) of the first failure and the
   first admission; for printing. */
typedef struct timings {
    int64_t call, ret;                /* this step's all_reduce began, returned */
    int64_t fail_call, fail_ret, fail_agreed, fail_shrunk, fail_checked, fail_redone;
    int fail_step;                    /* steps done when it failed (-1: no failure yet) */
    int64_t grow_call, grow_ret, sync_done, join_checked;
    int admitted;                     /* newcomers the first admitting grow took */
    double idle_grow_s;               /* dist_grow calls that admitted nobody */
    int idle_grows;
    int64_t epoch_start;
    double agree_s;                   /* in dist_agree */
    int64_t admitted_at, first_step;  /* a newcomer: dist_init returned, its first step was done */
} timings;

static double ms(int64_t a, int64_t b) { return (double)(b - a) * 1e-6; }

static uint64_t floats_hash(const float *a, size_t n) {
    const uint8_t *b = (const uint8_t *)a;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < n * sizeof(float); k++) h = (h ^ b[k]) * 0x100000001b3ull;
    return h;
}

static void add_change(job_state *j, int size) {
    if (j->nchanges < MAX_CHANGES) {
        j->change[j->nchanges][0] = j->done;
        j->change[j->nchanges][1] = size;
    }
    j->nchanges++;
}

/* "step 31 of epoch 1" for a step index over all epochs (from 0), "the
   end" past the last. */
static const char *step_name(char *buf, size_t cap, int64_t done, int steps, int total) {
    if (done >= total) snprintf(buf, cap, "the end");
    else snprintf(buf, cap, "step %d of epoch %d", (int)(done % steps) + 1, (int)(done / steps) + 1);
    return buf;
}

/* The victim's end: no goodbye, no flush of anything but stdio, as a
   crash or an OOM kill would leave it. */
static void die_now(void) {
    fflush(NULL);
#ifdef _WIN32
    TerminateProcess(GetCurrentProcess(), 137);
#else
    raise(SIGKILL);
#endif
}

/* The epoch's shuffle of every row (see "who trains on what"): the same
   on every rank, so that any rank can take any rows. */
static void shuffle_rows(state *s, int epoch) {
    const plan *p = &s->p;
    for (int row = 0; row < GLOBAL_BATCH; row++)
        shuffle(s->order + row_start(p, row), row_length(p, row),
                s->opt->seed ^ ((uint64_t)(epoch + 1) << 40) ^ ((uint64_t)(row + 1) << 20));
}

/* Trains and checks with --elastic; the process's exit status. */
static int train_elastic(state *s) {
    const options *o = s->opt;
    dist_t *w = s->world;
    const int steps = s->p.steps, total = o->epochs * steps, kill_at = o->kill_rank >= 0 ? o->kill_step - 1 : -1;
    const int newcomer = dist_joined(w);
    const int victim = kill_at >= 0 && !newcomer && dist_restart_count() == 0 && dist_rank(w) == o->kill_rank;
    const size_t numel = mlp_numel(&s->m);
    const int bar_wanted = o->progress;
    job_state j, jt;                  /* jt: where the broadcast of j lands */
    timings t;
    int sync = newcomer, check = 1, grow = 0, have_state = !newcomer, final = 0, redo = 0, futile = 0, ok_all = 1;
    int64_t rec[R_WORDS], join_ns = 0, first_ns = 0, *all = NULL, start = dist_time_ns();
    uint64_t before = 0;              /* the parameters' hash when the planned kill's step began */
    int have_before = 0;
    double accuracy = 0, test_loss = 0;
    char when[160], sn[64];
    memset(&j, 0, sizeof j);
    memset(&t, 0, sizeof t);
    t.fail_step = -1;
    t.epoch_start = start;
    for (int i = 0; i < s->data->train.n; i++) s->order[i] = i;
    shuffle(s->order, s->data->train.n, o->seed);
    s->order_epoch = -1;
    if (!newcomer) {
        int n = dist_world_size(w);
        j.start_size = n;
        add_change(&j, n);
        snprintf(when, sizeof when, "start");
        if (dist_rank(w) == 0) {
            printf("dist_sgd --elastic: %d rank%s, global batch %d, %d steps per epoch, SGD lr %g (cosine to 0) momentum %g; ", n,
                   n == 1 ? "" : "s", GLOBAL_BATCH, steps, (double)o->lr, (double)MOMENTUM);
            if (kill_at >= 0) printf("rank %d dies in step %d of epoch 1; ", o->kill_rank, o->kill_step);
            else printf("nobody dies (--kill-rank -1); ");
            printf("dist_grow every %d steps\ndata %s\n", GROW_EVERY, s->data->what);
            fflush(stdout);
        }
    } else {
        t.admitted_at = dist_time_ns();
        snprintf(when, sizeof when, "a newcomer joined");
    }
    for (;;) {
        dist_t *c = s->c;
        int size = dist_world_size(c), rank = dist_rank(c), lead = rank == 0, alive = 0;
        enum { SYNC, CHECK, EVAL, STEP, GROW } act;
        static const char *const act_name[] = { "the broadcast of the state", "the check of the parameters", "the evaluation's all_reduce",
                                                "the gradients' all_reduce" };
        uint64_t ok;
        float loss_w = 0;
        double sums[2] = { 0, 0 };
        dist_result r = DIST_OK;
        char why[600] = "";
        if (sync) act = SYNC;
        else if (check) act = CHECK;
        else if (grow || (j.done == total && size < j.start_size)) act = GROW;     /* (at the end: the missing) */
        else if (j.evals < o->epochs && j.done == (j.evals + 1) * steps) act = EVAL;
        else if (j.done < total) act = STEP;
        else if (!final) { final = check = 1; snprintf(when, sizeof when, "end"); continue; }
        else break;
        if (size > GLOBAL_BATCH) {
            if (lead) fprintf(stderr, "dist_sgd: the job grew to %d ranks, more than the %d images of a batch\n", size, GLOBAL_BATCH);
            free(all);
            return 1;
        }

        if (act == GROW) {
            /* Admit whoever waits, waiting for as many as the job lost.
               dist_grow is an agreement itself: no dist_agree after it. */
            int want = j.start_size > size ? (int)j.start_size - size : 0, k;
            dist_t *bigger = NULL;
            int64_t g0 = dist_time_ns(), g1;
            grow = 0;
            if ((r = dist_grow(c, want, &bigger)) != DIST_OK) {
                fprintf(stderr, "dist_sgd: dist_grow after %s: %s%s\n", step_name(sn, sizeof sn, j.done - 1, steps, total), dist_error_message(c),
                        want ? " (--elastic waits for a rank that died to come back: run it under distrun --max-restarts 1)" : "");
                free(all);
                return 1;
            }
            g1 = dist_time_ns();
            k = dist_newcomers(bigger);
            if (k > 0 || dist_world_size(bigger) != size) {
                j.newcomers += k;
                add_change(&j, dist_world_size(bigger));
                sync = k > 0;
                check = 1;
                final = 0;                                /* (the end's check again, with them) */
                snprintf(when, sizeof when, "after %s, %d newcomer%s in", step_name(sn, sizeof sn, j.done - 1, steps, total), k, k == 1 ? "" : "s");
                if (k > 0 && !t.admitted) { t.admitted = k; t.grow_call = g0; t.grow_ret = g1; }
                if (lead) {
                    printf("after %s: dist_grow(c, %d) admitted %d newcomer%s in %.1f ms: %d rank%s\n", step_name(sn, sizeof sn, j.done - 1, steps, total),
                           want, k, k == 1 ? "" : "s", ms(g0, g1), dist_world_size(bigger), dist_world_size(bigger) == 1 ? "" : "s");
                    fflush(stdout);
                }
            } else {
                t.idle_grow_s += ms(g0, g1) * 1e-3;
                t.idle_grows++;
            }
            if (c != w) dist_destroy(c);
            s->c = bigger;
            continue;
        }

        /* ---- this round's work: one collective (or three, for SYNC) ---- */
        t.call = dist_time_ns();
        if (act == SYNC) {
            if (lead && !have_state) {
                fprintf(stderr, "dist_sgd: a newcomer became rank 0 before it had the job's state: every member that had it died\n");
                free(all);
                return 1;
            }
            if (lead) {
                size_t off = 0;
                jt = j;
                for (int i = 0; i < 4; i++) {
                    memcpy(s->sync_buf + off, dist_tensor_data(s->m.p[i]), dist_tensor_numel(s->m.p[i]) * sizeof(float));
                    off += dist_tensor_numel(s->m.p[i]);
                }
                memcpy(s->sync_buf + numel, s->momentum, numel * sizeof(float));
                memcpy(s->sync_loss, s->step_loss, (size_t)steps * sizeof(double));
            }
            r = dist_broadcast(c, &jt, JOB_WORDS, DIST_INT64, 0);
            if (r == DIST_OK) r = dist_broadcast(c, s->sync_buf, 2 * numel, DIST_FLOAT32, 0);
            if (r == DIST_OK) r = dist_broadcast(c, s->sync_loss, (size_t)steps, DIST_FLOAT64, 0);
        } else if (act == CHECK) {
            free(all);
            if (!(all = (int64_t *)malloc((size_t)size * R_WORDS * sizeof *all))) return fprintf(stderr, "dist_sgd: out of memory\n"), 1;
            rec[R_PARAMS] = (int64_t)params_hash(&s->m);
            rec[R_MOMENTUM] = (int64_t)floats_hash(s->momentum, numel);
            rec[R_DONE] = j.done;
            rec[R_UNTOUCHED] = have_before && j.done == kill_at ? rec[R_PARAMS] == (int64_t)before : -1;
            rec[R_JOIN_NS] = join_ns;
            rec[R_FIRST_NS] = first_ns;
            r = dist_all_gather(c, rec, all, R_WORDS, DIST_INT64);
        } else if (act == EVAL) {
            if (evaluate_slice(c, &s->m, &s->data->test, sums) != 0) { free(all); return 1; }
            r = dist_all_reduce(c, sums, 2, DIST_FLOAT64, DIST_SUM);
        } else {
            int epoch = (int)(j.done / steps), step = (int)(j.done % steps);
            plan p = make_plan(s->data->train.n, rank, size);
            float loss;
            while (s->order_epoch < epoch) shuffle_rows(s, ++s->order_epoch);
            if (p.batch != s->x_rows) {                   /* a new share of the batch */
                const int64_t shape[2] = { p.batch, PIXELS };
                dist_tensor_release(s->x);
                if (!(s->x = dist_tensor_new(2, shape, NULL))) { fprintf(stderr, "dist_sgd: out of memory\n"); free(all); return 1; }
                s->x_rows = p.batch;
            }
            for (int k = 0; k < p.batch; k++) s->idx[k] = s->order[row_start(&s->p, p.first_row + k) + step];
            if (local_gradients(s, p.batch, &loss) != 0) { free(all); return 1; }
            loss_w = loss * p.weight;
            if (lead && bar_wanted) progress(epoch + 1, o->epochs, step, steps, loss);
            if (j.done == kill_at && !have_before) {      /* to show that the failed step changes nothing */
                before = params_hash(&s->m);
                have_before = 1;
            }
            if (victim && j.done == kill_at) {
                printf("rank %d dies now, in %s, before its all_reduce (%s)\n", o->kill_rank, step_name(sn, sizeof sn, j.done, steps, total),
#ifdef _WIN32
                       "TerminateProcess"
#else
                       "SIGKILL"
#endif
                );
                die_now();
            }
            t.call = dist_time_ns();
            r = average_gradients(c, &s->m, s->flat, p.weight * lr_factor((int)j.done, total), o->per_tensor, &loss_w);
        }
        t.ret = dist_time_ns();

        /* ---- did it work everywhere? ---- */
        if (r != DIST_OK) snprintf(why, sizeof why, "%s: %s", dist_result_name(r), dist_error_message(c));
        ok = r == DIST_OK;
        r = dist_agree(c, &ok, &alive);
        t.agree_s += ms(t.ret, dist_time_ns()) * 1e-3;
        if (r != DIST_OK) {
            fprintf(stderr, "dist_sgd: dist_agree after %s: %s\n", act_name[act], dist_error_message(c));
            free(all);
            return 1;
        }
        if (!ok || alive < size) {
            /* No: the survivors go on without the dead, and do it again. */
            int64_t agreed = dist_time_ns(), shrunk;
            int dead[8], ndead = dist_failed_ranks(c, dead, 8);
            dist_t *smaller = NULL;
            if ((r = dist_shrink(c, &smaller)) != DIST_OK) {
                fprintf(stderr, "dist_sgd: dist_shrink after %s failed: %s\n", act_name[act], dist_error_message(c));
                free(all);
                return 1;
            }
            shrunk = dist_time_ns();
            if (dist_world_size(smaller) < size) futile = 0;
            else if (++futile >= 3) {                     /* failing with nobody lost: not a death, so give up */
                fprintf(stderr, "dist_sgd: %s failed 3 times with nobody lost: %s\n", act_name[act], why[0] ? why : "(on another rank)");
                free(all);
                return 1;
            }
            if (act == STEP && t.fail_step < 0) {
                t.fail_step = (int)j.done;
                t.fail_call = t.call; t.fail_ret = t.ret; t.fail_agreed = agreed; t.fail_shrunk = shrunk;
            }
            redo |= act == STEP;
            if (c != w) dist_destroy(c);                  /* (the world stays: it holds the connections) */
            s->c = smaller;
            j.shrinks++;
            add_change(&j, dist_world_size(smaller));
            check = 1;
            snprintf(when, sizeof when, "after the shrink in %s", step_name(sn, sizeof sn, j.done, steps, total));
            if (dist_rank(smaller) == 0) {
                printf("%s: %s failed on %d rank%s (", step_name(sn, sizeof sn, j.done, steps, total), act_name[act], size, size == 1 ? "" : "s");
                if (ndead > 0) {                          /* (those this rank has seen die: maybe not yet) */
                    printf("rank%s", ndead > 1 ? "s" : "");
                    for (int q = 0; q < ndead && q < 8; q++) printf("%s %d", q ? "," : "", dead[q]);
                    printf(" of %d lost", size);
                } else printf("%d of %d alive", alive, size);
                printf(" after %.1f ms); agree %.1f ms, shrink %.1f ms: %d rank%s go%s on%s\n", ms(t.call, t.ret), ms(t.ret, agreed),
                       ms(agreed, shrunk), dist_world_size(smaller), dist_world_size(smaller) == 1 ? "" : "s",
                       dist_world_size(smaller) == 1 ? "es" : "", act == STEP ? ", and redo the step" : "");
                if (why[0]) printf("  (here: %s)\n", why);
                fflush(stdout);
            }
            continue;
        }

        /* ---- yes: apply it ---- */
        if (act == SYNC) {
            if (!have_state) {                            /* a newcomer: the job's state, and where it is */
                size_t off = 0;
                j = jt;
                for (int i = 0; i < 4; i++) {
                    memcpy(dist_tensor_data(s->m.p[i]), s->sync_buf + off, dist_tensor_numel(s->m.p[i]) * sizeof(float));
                    off += dist_tensor_numel(s->m.p[i]);
                }
                memcpy(s->momentum, s->sync_buf + numel, numel * sizeof(float));
                memcpy(s->step_loss, s->sync_loss, (size_t)steps * sizeof(double));
                have_state = 1;
                join_ns = t.admitted_at - s->t_start;
                printf("restarted (restart %d), joined the job as rank %d of %d, %.0f ms after it started; training from %s\n",
                       dist_restart_count(), rank, size, ms(s->t_start, t.admitted_at), step_name(sn, sizeof sn, j.done, steps, total));
                fflush(stdout);
            }
            if (!t.sync_done && t.admitted) t.sync_done = dist_time_ns();
            sync = 0;
        } else if (act == CHECK) {
            int same = 1, untouched = -1;
            for (int q = 1; q < size; q++)
                for (int k = R_PARAMS; k <= R_DONE; k++) same &= all[q * R_WORDS + k] == all[k];
            for (int q = 0; q < size; q++) {
                int64_t u = all[q * R_WORDS + R_UNTOUCHED];
                if (u == 0) untouched = 0;
                else if (u == 1 && untouched < 0) untouched = 1;
            }
            if (lead) {
                if (same)
                    printf("%s: parameters bitwise identical on %s %d rank%s (%zu floats and their momentum, FNV-1a %016llx)%s\n", when,
                           size == 1 ? "the" : "all", size, size == 1 ? "" : "s", numel, (unsigned long long)all[R_PARAMS],
                           untouched == 1 ? "; the failed step changed nothing (the hash from before it)" : "");
                else
                    for (int q = 0; q < size; q++)
                        printf("%s: rank %d holds parameters %016llx, momentum %016llx after %lld step%s%s\n", when, q,
                               (unsigned long long)all[q * R_WORDS + R_PARAMS], (unsigned long long)all[q * R_WORDS + R_MOMENTUM],
                               (long long)all[q * R_WORDS + R_DONE], all[q * R_WORDS + R_DONE] == 1 ? "" : "s", q && memcmp(all + q * R_WORDS, all, 3 * sizeof *all) ? " (not rank 0's)" : "");
                if (untouched == 0) printf("%s: FAILED: the failed step changed a rank's parameters\n", when);
                fflush(stdout);
            }
            if (!same || untouched == 0) {
                if (lead) printf("%sFAILED: the ranks' parameters differ\n", o->smoke ? "smoke " : "");
                fflush(stdout);
                free(all);
                return 1;
            }
            if (t.sync_done && !t.join_checked) t.join_checked = dist_time_ns();
            if (t.fail_step >= 0 && !t.fail_checked) t.fail_checked = dist_time_ns();
            check = 0;
        } else if (act == EVAL) {
            j.correct = llround(sums[0]);
            accuracy = (double)j.correct / s->data->test.n;
            test_loss = sums[1] / s->data->test.n;
            j.evals++;
            if (lead) {
                if (bar_wanted) progress((int)j.evals, o->epochs, steps, steps, 0.0f);
                printf("epoch %d/%d  train loss %.4f  test loss %.4f  test accuracy %.2f%% (%d/%d)  %.2f s\n", (int)j.evals, o->epochs,
                       mean(s->step_loss, steps), test_loss, 100 * accuracy, (int)lround(accuracy * s->data->test.n), s->data->test.n,
                       ms(t.epoch_start, dist_time_ns()) * 1e-3);
                fflush(stdout);
            }
            t.epoch_start = dist_time_ns();
        } else {
            /* The agreed step: momentum, then SGD (see above). */
            size_t off = 0;
            for (int i = 0; i < 4; i++) {
                float *g = dist_tensor_data(dist_tensor_grad(s->m.p[i])), *buf = s->momentum + off;
                for (size_t k = 0; k < dist_tensor_numel(s->m.p[i]); k++) g[k] = buf[k] = MOMENTUM * buf[k] + g[k];
                off += dist_tensor_numel(s->m.p[i]);
            }
            if (dist_optim_step(s->sgd) != DIST_OK) {
                fprintf(stderr, "dist_sgd: optimizer: %s\n", dist_rpc_error_message());
                free(all);
                return 1;
            }
            s->step_loss[j.done % steps] = loss_w;
            s->comm_s += ms(t.call, t.ret) * 1e-3;
            j.done++;
            if (redo) {
                redo = 0;
                if (!t.fail_redone) {
                    t.fail_redone = dist_time_ns();
                    if (lead)
                        printf("%s done on %d rank%s, %.1f ms after its all_reduce failed\n", step_name(sn, sizeof sn, j.done - 1, steps, total), size,
                               size == 1 ? "" : "s", ms(t.fail_ret, t.fail_redone));
                    fflush(stdout);
                }
            }
            if (newcomer && !first_ns) first_ns = dist_time_ns() - s->t_start;
            grow = j.done % GROW_EVERY == 0 || j.done == total;
        }
    }

    /* ---- the verdict and the summary (every member has the same data) ---- */
    {
        dist_t *c = s->c;
        int size = dist_world_size(c), lead = dist_rank(c) == 0;
        double bar = o->smoke ? SMOKE_MIN_ACCURACY : ELASTIC_MIN_ACCURACY;
        accuracy = (double)j.correct / s->data->test.n;       /* (a newcomer admitted after the last evaluation has it from j) */
        int planned = kill_at >= 0 && j.nchanges == 3 && j.change[1][0] == kill_at && j.change[1][1] == j.start_size - 1 &&
                      j.change[2][1] == j.start_size && j.shrinks == 1 && j.newcomers == 1;
        for (int q = 0; q < size; q++)
            if (all[q * R_WORDS + R_JOIN_NS] > 0) { join_ns = all[q * R_WORDS + R_JOIN_NS]; first_ns = all[q * R_WORDS + R_FIRST_NS]; }
        if (lead) {
            printf("elastic: %d epoch%s in %.2f s, final test accuracy %.2f%%; sizes", o->epochs, o->epochs == 1 ? "" : "s",
                   ms(start, dist_time_ns()) * 1e-3, 100 * accuracy);
            for (int i = 0; i < j.nchanges && i < MAX_CHANGES; i++) printf("%s %d", i ? " ->" : "", (int)j.change[i][1]);
            printf(" (");
            for (int i = 0; i < j.nchanges && i < MAX_CHANGES; i++)
                printf("%s%d from %s", i ? ", " : "", (int)j.change[i][1], i ? step_name(sn, sizeof sn, j.change[i][0], steps, total) : "the start");
            printf("%s)\n", j.nchanges > MAX_CHANGES ? ", ..." : "");
            if (t.fail_step >= 0)
                printf("  time lost to the failure: %.1f ms from the start of the all_reduce that failed to the end of the first step on the "
                       "survivors (it failed after %.1f ms; agree %.1f, shrink %.1f, check %.1f, the step again %.1f); the run averaged "
                       "%.1f ms a step\n",
                       ms(t.fail_call, t.fail_redone), ms(t.fail_call, t.fail_ret), ms(t.fail_ret, t.fail_agreed), ms(t.fail_agreed, t.fail_shrunk),
                       ms(t.fail_shrunk, t.fail_checked), ms(t.fail_checked, t.fail_redone), ms(start, dist_time_ns()) / (total ? total : 1));
            if (t.admitted) {
                printf("  time lost to the join: %.1f ms (the dist_grow that admitted %d newcomer%s %.1f, the state's broadcast %.1f, the check "
                       "%.1f; a dist_grow that admits nobody takes %.1f ms on average, %d of them)", ms(t.grow_call, t.join_checked), t.admitted,
                       t.admitted == 1 ? "" : "s", ms(t.grow_call, t.grow_ret), ms(t.grow_ret, t.sync_done), ms(t.sync_done, t.join_checked),
                       t.idle_grows ? t.idle_grow_s * 1e3 / t.idle_grows : 0.0, t.idle_grows);
                if (join_ns > 0) printf("; the newcomer was admitted %.0f ms after it started", (double)join_ns * 1e-6);
                if (first_ns > 0) printf(" and had done its first step at %.0f ms", (double)first_ns * 1e-6);
                printf("\n");
            }
            printf("  rank 0 spent %.2f s in the gradients' all_reduce, %.2f s in dist_agree\n", s->comm_s, t.agree_s);
        }
        if (kill_at >= 0 && !planned) {
            ok_all = 0;
            if (lead) printf("%sFAILED: expected %d ranks, %d after the death in step %d, then %d again; had %d change%s of size, %lld shrink%s "
                             "and %lld newcomer%s\n", o->smoke ? "smoke " : "", (int)j.start_size, (int)j.start_size - 1, o->kill_step,
                             (int)j.start_size, (int)j.nchanges - 1, j.nchanges == 2 ? "" : "s", (long long)j.shrinks, j.shrinks == 1 ? "" : "s",
                             (long long)j.newcomers, j.newcomers == 1 ? "" : "s");
        }
        if (!(accuracy >= bar)) {
            ok_all = 0;
            if (lead) printf("%sFAILED: test accuracy %.2f%%, expected at least %.0f%%\n", o->smoke ? "smoke " : "", 100 * accuracy, 100 * bar);
        }
        if (o->smoke) {
            int k = steps / 4 > 0 ? steps / 4 : 1;
            double first = mean(s->step_loss, k), last = mean(s->step_loss + steps - k, k);
            if (!(last < first)) {
                ok_all = 0;
                if (lead) printf("smoke FAILED: the training loss did not decrease (first %d steps %.4f, last %d %.4f)\n", k, first, k, last);
            }
            if (lead && ok_all && kill_at >= 0)
                printf("elastic smoke ok: rank %d died in step %d, %d -> %d -> %d ranks, parameters identical after each change, "
                       "loss %.3f -> %.3f, test accuracy %.1f%% >= %.0f%%\n", o->kill_rank, o->kill_step, (int)j.start_size,
                       (int)j.start_size - 1, (int)j.start_size, first, last, 100 * accuracy, 100 * bar);
            else if (lead && ok_all)
                printf("elastic smoke ok: nobody died (--kill-rank -1), %d rank%s, loss %.3f -> %.3f, test accuracy %.1f%% >= %.0f%%\n",
                       size, size == 1 ? "" : "s", first, last, 100 * accuracy, 100 * bar);
        } else if (lead && ok_all)
            printf("elastic ok: test accuracy %.2f%% >= %.0f%%, parameters bitwise identical on %s %d rank%s after every change\n",
                   100 * accuracy, 100 * bar, size == 1 ? "the" : "all", size, size == 1 ? "" : "s");
        fflush(stdout);
        /* Leave together: when the verdict is a failure, the first rank
           to exit has distrun stop the others, which could cut rank 0's
           report short. */
        (void)dist_barrier(c);
    }
    free(all);
    return ok_all ? 0 : 1;
}

/* Did every rank get ready?  A rank that failed alone and quit would
   leave the others waiting in their next collective (until the timeout),
   so the ranks decide together and quit together: a MIN over the ranks of
   "my rank if I failed, else world size" is the lowest rank that failed,
   which is the one that explains (the others usually failed the same way).
   -1 when all are ready. */
static int first_failure(dist_t *world, int ok) {
    int32_t v = ok ? dist_world_size(world) : dist_rank(world);
    if (dist_all_reduce(world, &v, 1, DIST_INT32, DIST_MIN) != DIST_OK) {
        fprintf(stderr, "dist_sgd: all_reduce: %s\n", dist_error_message(world));
        return dist_rank(world);
    }
    return v < dist_world_size(world) ? v : -1;
}

int main(int argc, char **argv) {
    options opt;
    dataset data;
    state s;
    dist_t *world = NULL;
    char err[16384] = "";
    int rank, n, rc, ok, joined;
    int64_t t_start = dist_time_ns();
    if ((rc = parse_args(argc, argv, &opt)) != 0) return rc < 0 ? 0 : rc;
    /* --elastic kills a rank and waits for it to come back: without a
       restart the job would stop at the kill, so say so now.  (distrun
       --max-restarts says how many in DIST_MAX_RESTARTS, torchrun in
       TORCHELASTIC_MAX_RESTARTS.) */
    if (opt.elastic && opt.kill_rank >= 0) {
        const char *v = getenv("DIST_MAX_RESTARTS");
        if (!v || !*v) v = getenv("TORCHELASTIC_MAX_RESTARTS");
        if (!v || strtol(v, NULL, 10) < 1) {
            /* (every rank says it: the launcher names whichever ends first) */
            fprintf(stderr, "dist_sgd: --elastic kills rank %d and needs it restarted: run it under distrun --max-restarts 1, "
                            "e.g. distrun -n 4 --max-restarts 1 %s --elastic (--kill-rank -1 kills none)\n", opt.kill_rank, argv[0]);
            return 2;
        }
    }
    memset(&data, 0, sizeof data);
    memset(&s, 0, sizeof s);
    /* The data first: a rank that joins a running job (--elastic) is then
       ready to train as soon as it is admitted. */
    ok = load_data(opt.data_dir, opt.smoke, &data, err, sizeof err) == 0;
    if (dist_init(&world, NULL) != DIST_OK) {       /* env://: distrun sets RANK, WORLD_SIZE, MASTER_* */
        fprintf(stderr, "dist_sgd: %s\n", dist_error_message(NULL));
        for (int i = 0; i < 4; i++) free(data.files[i]);
        return 1;
    }
    joined = dist_joined(world);                    /* a rank restarted by distrun --max-restarts */
    rank = dist_rank(world);
    n = dist_world_size(world);
    if (n > GLOBAL_BATCH) {                         /* the same verdict everywhere: no need to agree */
        if (rank == 0) fprintf(stderr, "dist_sgd: %d ranks for a global batch of %d: at most %d\n", n, GLOBAL_BATCH, GLOBAL_BATCH);
        for (int i = 0; i < 4; i++) free(data.files[i]);
        dist_destroy(world);
        return 1;
    }
    if (ok) {
        int64_t bshape[2];
        s.world = s.c = world;
        s.opt = &opt;
        s.data = &data;
        s.t_start = t_start;
        s.p = make_plan(data.train.n, rank, n);
        bshape[0] = s.x_rows = s.p.batch; bshape[1] = PIXELS;
        s.x = dist_tensor_new(2, bshape, NULL);
        s.y = (int64_t *)malloc(GLOBAL_BATCH * sizeof *s.y);          /* room for any share */
        s.idx = (int *)malloc(GLOBAL_BATCH * sizeof *s.idx);
        s.order = (int *)malloc((size_t)data.train.n * sizeof *s.order);
        s.step_loss = (double *)malloc((size_t)(s.p.steps ? s.p.steps : 1) * sizeof *s.step_loss);
        if (mlp_init(&s.m, opt.seed) == 0) {
            size_t numel = mlp_numel(&s.m);
            s.flat = (float *)malloc((numel + 1) * sizeof(float));      /* + the loss (--elastic) */
            s.sgd = dist_optim_sgd(4, s.m.p, opt.lr, opt.elastic ? 0.0f : MOMENTUM, 0.0f);
            if (opt.elastic) {
                s.momentum = (float *)calloc(numel, sizeof(float));
                s.sync_buf = (float *)malloc(2 * numel * sizeof(float));
                s.sync_loss = (double *)malloc((size_t)(s.p.steps ? s.p.steps : 1) * sizeof *s.sync_loss);
            }
        }
        if (!s.x || !s.y || !s.idx || !s.order || !s.step_loss || !s.flat || !s.sgd ||
            (opt.elastic && (!s.momentum || !s.sync_buf || !s.sync_loss)))
            snprintf(err, sizeof err, "out of memory (or: %s)", dist_rpc_error_message()), ok = 0;
        else if (s.p.steps < 1)
            snprintf(err, sizeof err, "%d training images are fewer than one global batch of %d", data.train.n, GLOBAL_BATCH), ok = 0;
        else if (opt.elastic && opt.kill_rank >= 0 && !joined) {
            if (n < 2)
                snprintf(err, sizeof err, "--elastic kills a rank: it needs 2 ranks or more (--kill-rank -1 kills none)"), ok = 0;
            else if (opt.kill_rank >= n)
                snprintf(err, sizeof err, "--kill-rank %d: the job has ranks 0 to %d", opt.kill_rank, n - 1), ok = 0;
            else if (opt.kill_step > s.p.steps)
                snprintf(err, sizeof err, "--kill-step %d: epoch 1 has %d steps", opt.kill_step, s.p.steps), ok = 0;
        }
    }
    if (joined) {
        /* A newcomer: the members are in their loop, waiting to send it
           the job's state; nothing to agree on first. */
        if (!ok || !opt.elastic) fprintf(stderr, "dist_sgd: %s\n", ok ? "joined a running job, which only --elastic does" : err);
        rc = ok && opt.elastic ? train_elastic(&s) : 1;
    } else {
        rc = first_failure(world, ok);
        if (rc == rank) fprintf(stderr, "dist_sgd: %s\n", err);
        rc = rc >= 0 ? 1 : opt.elastic ? train_elastic(&s) : train(&s);
    }
    dist_optim_free(s.sgd);
    for (int i = 0; i < 4; i++) dist_tensor_release(s.m.p[i]);
    dist_tensor_release(s.x);
    free(s.y);
    free(s.idx);
    free(s.order);
    free(s.step_loss);
    free(s.flat);
    free(s.momentum);
    free(s.sync_buf);
    free(s.sync_loss);
    for (int i = 0; i < 4; i++) free(data.files[i]);
    if (s.c && s.c != world) dist_destroy(s.c);     /* --elastic: what shrink and grow gave */
    dist_destroy(world);
    return rc;
}
