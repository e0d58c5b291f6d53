/* distrun - start the ranks of a dist job (what torchrun is to PyTorch).

   usage: distrun [options] PROG [ARGS...]        (distrun --help lists them)

   distrun starts --nproc-per-node copies of PROG on this node.  Each gets the
   torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
   GROUP_RANK (the node rank), MASTER_ADDR and MASTER_PORT.  Every line a rank
   writes is relayed with a "[RANK] " prefix (stdout to stdout, stderr to
   stderr).  SIGINT, SIGTERM and SIGHUP are forwarded to every rank; a second
   SIGINT kills them.  When a rank fails, the others get SIGTERM, then SIGKILL
   after --kill-grace seconds, and distrun exits with the failed rank's status.

   On one node without --master-port, distrun binds the store's listening
   socket itself and hands the open socket to rank 0 (DIST_STORE_LISTEN_FD),
   so no other process can take the port between choosing it and using it.

   Each rank runs in its own process group, so a signal reaches everything a
   rank started and the terminal's Ctrl-C reaches distrun alone (which
   forwards it once).  Hence ranks get /dev/null as stdin when distrun's
   stdin is a terminal: a background group reading it would be stopped.

   Plain C11 + POSIX (Linux); it does not include dist.h.
      cc -std=c11 -O2 -Wall -Wextra -Wpedantic -D_GNU_SOURCE \
         -o build/distrun tools/distrun.c
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#ifdef __linux__
#  include <sys/prctl.h>
#  include <sys/syscall.h>                 /* close_range */
#endif

#define MAX_NPROC      4096
#define MAX_SECONDS    1e8
#define LINE_MAX_BYTES (64 * 1024)  /* longer lines are cut; every piece gets a prefix */
#define READ_CHUNK     (64 * 1024)
#define DRAIN_READS    16           /* bound on reads from an exited rank's pipe */
#define REAP_EVERY_MS  1000         /* wake at least this often, whatever happens */

enum { EXIT_LAUNCH = 1, EXIT_USAGE = 2, EXIT_TIMEOUT = 124, EXIT_EXEC = 127 };

/* ---- options ------------------------------------------------------------ */

typedef struct options {
    int nproc;              /* ranks on this node */
    int nnodes;
    int node_rank;
    const char *master_addr;
    int master_port;        /* 0: distrun picks one (single node only) */
    double kill_grace_s;
    double timeout_s;       /* 0: no limit */
    int prefix;             /* relay output with "[RANK] " prefixes */
    const char *run_id;     /* --run-id, else $DIST_RUN_ID, else (one node) random */
    char run_buf[40];
    char **argv;            /* PROG ARGS..., NULL-terminated */
} options;

enum opt_id { OPT_NPROC, OPT_NNODES, OPT_NODE_RANK, OPT_MASTER_ADDR, OPT_MASTER_PORT,
              OPT_KILL_GRACE, OPT_TIMEOUT, OPT_NO_PREFIX, OPT_RUN_ID, OPT_HELP };

typedef struct long_opt { const char *name; enum opt_id id; int has_arg; } long_opt;

static const long_opt long_opts[] = {
    { "nproc-per-node", OPT_NPROC,       1 },
    { "nnodes",         OPT_NNODES,      1 },
    { "node-rank",      OPT_NODE_RANK,   1 },
    { "master-addr",    OPT_MASTER_ADDR, 1 },
    { "master-port",    OPT_MASTER_PORT, 1 },
    { "kill-grace",     OPT_KILL_GRACE,  1 },
    { "timeout",        OPT_TIMEOUT,     1 },
    { "no-prefix",      OPT_NO_PREFIX,   0 },
    { "run-id",         OPT_RUN_ID,      1 },
    { "help",           OPT_HELP,        0 },
};

static void print_usage(FILE *f) {
    fputs("usage: distrun [options] PROG [ARGS...]\n"
          "\n"
          "Start the ranks of a dist job: --nproc-per-node copies of PROG on this node.\n"
          "\n"
          "options:\n"
          "  -n, --nproc-per-node N  ranks on this node (default 1)\n"
          "      --nnodes M          nodes in the job (default 1)\n"
          "      --node-rank K       this node's index, 0..M-1 (default 0)\n"
          "      --master-addr HOST  where rank 0 hosts the store (default 127.0.0.1)\n"
          "      --master-port P     its port; required with --nnodes > 1.  Without it\n"
          "                          distrun opens the store's socket on a free port and\n"
          "                          hands it to rank 0 (DIST_STORE_LISTEN_FD)\n"
          "      --kill-grace S      seconds from SIGTERM to SIGKILL when stopping (3)\n"
          "      --timeout S         stop the whole job after S seconds (exit 124)\n"
          "      --no-prefix         ranks write straight to stdout and stderr, without\n"
          "                          the \"[RANK] \" line prefix\n"
          "      --run-id ID         this launch's identity (DIST_RUN_ID), the same on\n"
          "                          every node; the store turns away ranks of other\n"
          "                          launches.  Default: $DIST_RUN_ID, else on one node a\n"
          "                          random one; with --nnodes > 1 give one (or set\n"
          "                          DIST_RUN_ID alike on every node)\n"
          "  -h, --help              show this help\n"
          "Long options also take --opt=VALUE, and underscores (--nproc_per_node).\n"
          "\n"
          "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
          "MASTER_ADDR, MASTER_PORT (global rank = node rank * N + local rank) and,\n"
          "when there is one, DIST_RUN_ID.\n"
          "\n"
          "exit status: 0 when every rank exits 0; else the first failed rank's code\n"
          "(128+N when killed by signal N), 124 on --timeout, 128+N when distrun got\n"
          "signal N, 127 when PROG cannot be run, 2 for bad arguments.\n", f);
}

static void usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("distrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nTry 'distrun --help' for more information.\n", stderr);
    va_end(ap);
    exit(EXIT_USAGE);
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_seconds(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > MAX_SECONDS) return -1;
    *out = v;
    return 0;
}

/* torchrun spells its options with underscores (--nproc_per_node); accept both. */
static const long_opt *find_long_opt(const char *given, size_t len) {
    for (size_t k = 0; k < sizeof long_opts / sizeof long_opts[0]; k++) {
        const char *name = long_opts[k].name;
        size_t i = 0;
        if (strlen(name) != len) continue;
        while (i < len && (given[i] == '_' ? '-' : given[i]) == name[i]) i++;
        if (i == len) return &long_opts[k];
    }
    return NULL;
}

static const long_opt *opt_by_id(enum opt_id id) {
    for (size_t k = 0; k < sizeof long_opts / sizeof long_opts[0]; k++)
        if (long_opts[k].id == id) return &long_opts[k];
    return NULL;
}

static void apply_option(options *o, const long_opt *lo, const char *v) {
    int ok = 0;
    const char *want = "";
    switch (lo->id) {
    case OPT_NPROC:       ok = !parse_int(v, 1, MAX_NPROC, &o->nproc);   want = "a count from 1 to 4096"; break;
    case OPT_NNODES:      ok = !parse_int(v, 1, INT_MAX, &o->nnodes);    want = "a positive count"; break;
    case OPT_NODE_RANK:   ok = !parse_int(v, 0, INT_MAX, &o->node_rank); want = "a node index"; break;
    case OPT_MASTER_PORT: ok = !parse_int(v, 1, 65535, &o->master_port); want = "a port from 1 to 65535"; break;
    case OPT_MASTER_ADDR: ok = v[0] != '\0'; o->master_addr = v;        want = "a host name or address"; break;
    case OPT_KILL_GRACE:  ok = !parse_seconds(v, &o->kill_grace_s);      want = "seconds"; break;
    case OPT_TIMEOUT:     ok = !parse_seconds(v, &o->timeout_s) && o->timeout_s > 0; want = "seconds > 0"; break;
    case OPT_NO_PREFIX:   ok = 1; o->prefix = 0; break;
    case OPT_RUN_ID:      ok = v[0] != '\0'; o->run_id = v;             want = "an identity"; break;
    case OPT_HELP:        print_usage(stdout); exit(0);
    }
    if (!ok) usage_error("--%s: expected %s, got '%s'", lo->name, want, v);
}

/* Options come first; the first word that is not one (or the word after
   "--") is PROG, and everything after it is PROG's, untouched. */
static void parse_args(int argc, char **argv, options *o) {
    int i = 1;
    *o = (options){ .nproc = 1, .nnodes = 1, .master_addr = "127.0.0.1", .kill_grace_s = 3, .prefix = 1 };
    while (i < argc) {
        const char *a = argv[i], *val = NULL;
        const long_opt *lo;
        if (strcmp(a, "--") == 0) { i++; break; }
        if (a[0] != '-' || a[1] == '\0') break;
        i++;
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
            if (!(lo = find_long_opt(a + 2, len))) usage_error("unknown option '%.*s'", (int)len + 2, a);
            if (eq && !lo->has_arg) usage_error("option '--%s' takes no value", lo->name);
            if (eq) val = eq + 1;
        } else if (a[1] == 'n') {
            lo = opt_by_id(OPT_NPROC);
            if (a[2]) val = a + 2;                 /* -n4 */
        } else if (a[1] == 'h' && a[2] == '\0') {
            lo = opt_by_id(OPT_HELP);
        } else {
            usage_error("unknown option '%s'", a);
            return;
        }
        if (lo->has_arg && !val) {
            if (i >= argc) usage_error("option '%s' needs a value", a);
            val = argv[i++];
        }
        apply_option(o, lo, val);
    }
    if (i >= argc) usage_error("no program to run");
    o->argv = argv + i;
    if (o->node_rank >= o->nnodes)
        usage_error("--node-rank %d is out of range for --nnodes %d", o->node_rank, o->nnodes);
    if (o->nnodes > 1 && o->master_port == 0)
        usage_error("--master-port is required with --nnodes > 1 (every node must agree on it)");
    if ((long long)o->nnodes * o->nproc > INT_MAX)
        usage_error("--nnodes %d x --nproc-per-node %d ranks is too many", o->nnodes, o->nproc);
    if (!o->run_id && getenv("DIST_RUN_ID") && getenv("DIST_RUN_ID")[0]) o->run_id = getenv("DIST_RUN_ID");
    if (!o->run_id && o->nnodes == 1) {    /* one node: this distrun is the whole launch */
        unsigned char b[8] = { 0 };
        unsigned long long x = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
        FILE *f = fopen("/dev/urandom", "rb");
        if (f) { if (fread(b, 1, sizeof b, f) == sizeof b) memcpy(&x, b, sizeof x); fclose(f); }
        snprintf(o->run_buf, sizeof o->run_buf, "distrun-%016llx", x);
        o->run_id = o->run_buf;
    }
}

/* ---- the job ------------------------------------------------------------ */

typedef struct stream {
    int fd;                 /* read end of the rank's pipe; -1 when closed */
    int out_fd;             /* where its lines go: 1 or 2 */
    char *buf;              /* the pending partial line */
    size_t len, cap;
} stream;

typedef struct child {
    pid_t pid;              /* 0 when not running (reaped, or never started) */
    int rank;
    char prefix[24];        /* "[RANK] " */
    stream out, err;
} child;

typedef struct job {
    options opt;
    child *kids;
    int nkids, running;
    int stopping;           /* the job is being shut down; first reason wins */
    int killed;             /* SIGKILL has been sent */
    int64_t kill_at;        /* when stopping: SIGKILL whatever is left then */
    int64_t deadline;       /* --timeout, or 0 */
    int exit_code;
    int stdin_tty;          /* distrun's stdin is a terminal */
    char summary[320];      /* the one line printed at the end, if any */
    sig_atomic_t seen_int, seen_term, seen_hup;
    struct pollfd *pfd;     /* scratch for poll: wake pipe, then streams */
    stream **pstream;
} job;

static volatile sig_atomic_t got_int, got_term, got_hup;
static int wake_pipe[2] = { -1, -1 };
static sigset_t orig_mask;             /* the mask distrun started with */
static struct rlimit orig_nofile;
static int nofile_raised;

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t seconds_to_ms(double s) { return (int64_t)(s * 1000.0 + 0.5); }

/* ---- signals: a self-pipe wakes poll; counters say what arrived --------- */

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (sig == SIGINT) got_int++;
    else if (sig == SIGTERM) got_term++;
    else if (sig == SIGHUP) got_hup++;
    ssize_t r = write(wake_pipe[1], &b, 1);     /* full pipe: a wake-up is pending anyway */
    (void)r;
    errno = saved;
}

static const int caught_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD };
#define NCAUGHT ((int)(sizeof caught_signals / sizeof caught_signals[0]))

static void caught_set(sigset_t *set) {
    sigemptyset(set);
    for (int i = 0; i < NCAUGHT; i++) sigaddset(set, caught_signals[i]);
}

/* pipe2(O_CLOEXEC) and SOCK_CLOEXEC where they exist (one step, no window
   for a fork to inherit the descriptor); pipe/socket + fcntl elsewhere
   (macOS).  distrun is single-threaded, so the window does not matter. */
#if !(defined(__linux__) || defined(__FreeBSD__) || defined(__NetBSD__) || defined(__OpenBSD__)) || !defined(SOCK_CLOEXEC)
static int cloexec(int fd) {
    if (fd >= 0) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    return fd;
}
#endif

static int cloexec_pipe(int p[2]) {
#if defined(__linux__) || defined(__FreeBSD__) || defined(__NetBSD__) || defined(__OpenBSD__)
    return pipe2(p, O_CLOEXEC);
#else
    if (pipe(p) != 0) return -1;
    cloexec(p[0]); cloexec(p[1]);
    return 0;
#endif
}

static int cloexec_socket(int family) {
#ifdef SOCK_CLOEXEC
    return socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
#else
    return cloexec(socket(family, SOCK_STREAM, 0));
#endif
}

static int setup_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (cloexec_pipe(wake_pipe) != 0) return -1;
    for (int i = 0; i < 2; i++) fcntl(wake_pipe[i], F_SETFL, fcntl(wake_pipe[i], F_GETFL) | O_NONBLOCK);
    sa.sa_handler = on_signal;
    caught_set(&sa.sa_mask);
    for (int i = 0; i < NCAUGHT; i++) {
        sa.sa_flags = SA_RESTART | (caught_signals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
        if (sigaction(caught_signals[i], &sa, NULL) != 0) return -1;
    }
    /* A reader that went away must not kill distrun while ranks still run. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void drain_wake_pipe(void) {
    unsigned char buf[256];
    while (read(wake_pipe[0], buf, sizeof buf) > 0) {}
}

/* ---- relaying output ---------------------------------------------------- */

/* One writev per line, so lines of different ranks never interleave.  Output
   that cannot be written (reader gone) is dropped: the ranks must keep
   running and be drained regardless. */
static void write_line(int fd, const char *prefix, const char *p, size_t n) {
    struct iovec iov[3] = {
        { (void *)prefix, strlen(prefix) }, { (void *)p, n }, { (void *)"\n", 1 },
    };
    struct iovec *v = iov;
    int cnt = 3, stalls = 0;
    while (cnt > 0) {
        ssize_t w = writev(fd, v, cnt);
        if (w < 0) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            if (errno == EINTR) continue;
            /* a non-blocking stdout shared with someone else: wait a bit */
            if (errno == EAGAIN && stalls++ < 10 && poll(&pf, 1, 1000) >= 0) continue;
            return;
        }
        while (cnt > 0 && (size_t)w >= v->iov_len) { w -= (ssize_t)v->iov_len; v++; cnt--; }
        if (cnt > 0) { v->iov_base = (char *)v->iov_base + w; v->iov_len -= (size_t)w; }
    }
}

/* Keep a partial line until its newline comes.  A line longer than
   LINE_MAX_BYTES goes out in pieces, each with the prefix, so the output
   stays line-structured and memory stays bounded. */
static void append_partial(child *c, stream *s, const char *p, size_t n) {
    while (n > 0) {
        if (s->len == LINE_MAX_BYTES) { write_line(s->out_fd, c->prefix, s->buf, s->len); s->len = 0; }
        size_t take = n < LINE_MAX_BYTES - s->len ? n : LINE_MAX_BYTES - s->len;
        if (s->len + take > s->cap) {
            size_t want = s->cap ? s->cap * 2 : 256;
            while (want < s->len + take) want *= 2;
            if (want > LINE_MAX_BYTES) want = LINE_MAX_BYTES;
            char *nb = realloc(s->buf, want);
            if (!nb) {   /* out of memory: pass the bytes on now rather than lose them */
                write_line(s->out_fd, c->prefix, p, take);
                p += take; n -= take;
                continue;
            }
            s->buf = nb;
            s->cap = want;
        }
        memcpy(s->buf + s->len, p, take);
        s->len += take;
        p += take; n -= take;
    }
}

static void feed(child *c, stream *s, const char *p, size_t n) {
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) : n;
        if (nl && s->len == 0 && seg <= LINE_MAX_BYTES) {
            write_line(s->out_fd, c->prefix, p, seg);           /* the common case: no copy */
        } else {
            append_partial(c, s, p, seg);
            if (nl) { write_line(s->out_fd, c->prefix, s->buf, s->len); s->len = 0; }
        }
        if (!nl) return;
        p += seg + 1;
        n -= seg + 1;
    }
}

/* A last line without a newline still gets printed, as a line of its own. */
static void close_stream(child *c, stream *s) {
    if (s->fd < 0) return;
    if (s->len > 0) write_line(s->out_fd, c->prefix, s->buf, s->len);
    close(s->fd);
    free(s->buf);
    *s = (stream){ .fd = -1, .out_fd = s->out_fd };
}

/* Read what the pipe holds: one chunk when called from poll (so a chatty
   rank cannot starve the others), or until empty when draining an exited
   rank (bounded, since a leftover grandchild may still be writing). */
static void pump(child *c, stream *s, int drain) {
    static char chunk[READ_CHUNK];
    int reads = 0;
    while (s->fd >= 0 && reads < (drain ? DRAIN_READS : 1)) {
        ssize_t r = read(s->fd, chunk, sizeof chunk);
        if (r > 0) { feed(c, s, chunk, (size_t)r); reads++; continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        close_stream(c, s);            /* EOF or error */
    }
}

/* ---- starting ranks ----------------------------------------------------- */

/* The store's socket: bound on MASTER_ADDR, port chosen by the kernel.  It is
   CLOEXEC here, so only rank 0 (which clears the flag) inherits it. */
static int open_store_socket(const char *addr, int *port) {
    struct addrinfo hints, *res, *ai;
    int fd = -1, rc, err = 0;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if ((rc = getaddrinfo(addr, "0", &hints, &res)) != 0) {
        fprintf(stderr, "distrun: cannot resolve --master-addr '%s': %s\n", addr, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int one = 1;
        fd = cloexec_socket(ai->ai_family);
        if (fd < 0) { err = errno; continue; }
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0 ||
            getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
            err = errno;
            close(fd);
            fd = -1;
            continue;
        }
        *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    }
    freeaddrinfo(res);
    if (fd < 0) fprintf(stderr, "distrun: cannot listen on %s for the store: %s\n", addr, strerror(err));
    return fd;
}

/* Two pipes per rank need fds; lift the soft limit when a big job needs it.
   Ranks get the original limit back. */
static void raise_fd_limit(int nkids) {
    struct rlimit r;
    rlim_t need = (rlim_t)nkids * 4 + 64;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= need) return;
    orig_nofile = r;
    r.rlim_cur = (r.rlim_max == RLIM_INFINITY || r.rlim_max > need) ? need : r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) == 0) nofile_raised = 1;
}

static void close_fd_range(unsigned lo, unsigned hi) {
    if (lo > hi) return;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, lo, hi, 0) == 0) return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (unsigned fd = lo; fd <= hi && fd < (unsigned)max; fd++) close((int)fd);
}

/* A rank sees stdio, plus the store socket for rank 0, and nothing else:
   like Python's subprocess, distrun does not pass on fds it inherited. */
static void close_other_fds(int keep) {
    if (keep < 3) { close_fd_range(3, ~0U); return; }
    close_fd_range(3, (unsigned)keep - 1);
    close_fd_range((unsigned)keep + 1, ~0U);
}

static void set_env_int(const char *name, long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    if (setenv(name, buf, 1) != 0) {
        dprintf(2, "distrun: cannot set %s: %s\n", name, strerror(errno));
        _exit(EXIT_EXEC);
    }
}

static void set_rank_env(const options *o, int local, int store_fd, int port) {
    set_env_int("RANK", (long)o->node_rank * o->nproc + local);
    set_env_int("WORLD_SIZE", (long)o->nnodes * o->nproc);
    set_env_int("LOCAL_RANK", local);
    set_env_int("LOCAL_WORLD_SIZE", o->nproc);
    set_env_int("GROUP_RANK", o->node_rank);
    set_env_int("MASTER_PORT", port);
    if (setenv("MASTER_ADDR", o->master_addr, 1) != 0) _exit(EXIT_EXEC);
    if (o->run_id && setenv("DIST_RUN_ID", o->run_id, 1) != 0) _exit(EXIT_EXEC);
    /* a nested distrun must not pass its own parent's socket on */
    unsetenv("DIST_STORE_LISTEN_FD");
    if (store_fd >= 0) set_env_int("DIST_STORE_LISTEN_FD", store_fd);
}

/* In the forked child, up to exec.  distrun is single-threaded, so setenv
   and dprintf are safe here. */
static void exec_rank(const job *j, int local, const int out[2], const int err[2],
                      int store_fd, int port, pid_t launcher) {
    struct sigaction dfl;
    /* Its own process group: a signal for the rank reaches everything it
       started (a shell script's children too), and the terminal's Ctrl-C
       reaches distrun alone, which forwards it once. */
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);      /* distrun killed outright: take the ranks along */
    if (getppid() != launcher) _exit(EXIT_EXEC);
#else
    (void)launcher;
#endif
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int i = 0; i < NCAUGHT; i++) sigaction(caught_signals[i], &dfl, NULL);
    /* ignored dispositions survive exec; distrun ignores SIGPIPE, and a
       background shell may have started distrun with SIGINT ignored */
    sigaction(SIGPIPE, &dfl, NULL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
    if (nofile_raised) setrlimit(RLIMIT_NOFILE, &orig_nofile);
    if (out[1] >= 0 && (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)) _exit(EXIT_EXEC);
    /* A background process group that reads the terminal is stopped
       (SIGTTIN) and the job would stall; such a rank reads EOF instead.
       A pipe or file on stdin is passed on as usual. */
    if (j->stdin_tty) {
        int null = open("/dev/null", O_RDONLY);
        if (null > 0) { dup2(null, 0); close(null); }
    }
    if (store_fd >= 0 && fcntl(store_fd, F_SETFD, 0) != 0) _exit(EXIT_EXEC);
    close_other_fds(store_fd);
    set_rank_env(&j->opt, local, store_fd, port);
    execvp(j->opt.argv[0], j->opt.argv);
    dprintf(2, "distrun: cannot execute '%s': %s\n", j->opt.argv[0], strerror(errno));
    _exit(EXIT_EXEC);
}

static int make_pipe(int p[2]) {
    if (cloexec_pipe(p) != 0) return -1;
    /* only distrun's end is non-blocking; the rank writes as usual */
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    return 0;
}

static void close_pair(int p[2]) {
    for (int k = 0; k < 2; k++) if (p[k] >= 0) { close(p[k]); p[k] = -1; }
}

/* store_fd >= 0 only for rank 0. */
static int start_rank(job *j, int local, int store_fd, int port) {
    child *c = &j->kids[local];
    int out[2] = { -1, -1 }, err[2] = { -1, -1 };
    pid_t launcher = getpid(), pid;
    if (j->opt.prefix && (make_pipe(out) != 0 || make_pipe(err) != 0)) {
        fprintf(stderr, "distrun: cannot create pipes for rank %d: %s\n", c->rank, strerror(errno));
        close_pair(out);
        close_pair(err);
        return -1;
    }
    pid = fork();
    if (pid == 0) exec_rank(j, local, out, err, store_fd, port, launcher);
    if (out[1] >= 0) { close(out[1]); close(err[1]); }
    if (pid < 0) {
        fprintf(stderr, "distrun: cannot start rank %d: %s\n", c->rank, strerror(errno));
        if (out[0] >= 0) { close(out[0]); close(err[0]); }
        return -1;
    }
    setpgid(pid, pid);      /* also here, so the group exists before we might signal it */
    c->pid = pid;
    c->out.fd = out[0];
    c->err.fd = err[0];
    j->running++;
    return 0;
}

/* ---- stopping ----------------------------------------------------------- */

static void signal_rank(const child *c, int sig) {
    if (c->pid <= 0) return;
    if (kill(-c->pid, sig) != 0) kill(c->pid, sig);    /* it left its group */
}

static int signal_all(job *j, int sig) {
    int n = 0;
    for (int i = 0; i < j->nkids; i++)
        if (j->kids[i].pid > 0) { signal_rank(&j->kids[i], sig); n++; }
    return n;
}

/* Begin shutting the job down (once): send sig to every running rank and
   SIGKILL what is left after the grace period.  Returns how many got it. */
static int begin_stop(job *j, int exit_code, int sig) {
    j->stopping = 1;
    j->exit_code = exit_code;
    j->kill_at = now_ms() + seconds_to_ms(j->opt.kill_grace_s);
    return signal_all(j, sig);
}

static void kill_all(job *j) {
    signal_all(j, SIGKILL);
    j->killed = 1;
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

static void on_rank_exit(job *j, child *c, int status) {
    pid_t pid = c->pid;
    char what[96];
    int code, others;
    pump(c, &c->out, 1);       /* everything it wrote is in the pipes by now */
    pump(c, &c->err, 1);
    close_stream(c, &c->out);
    close_stream(c, &c->err);
    c->pid = 0;
    j->running--;
    if (j->stopping || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) return;
    if (WIFEXITED(status)) {
        code = WEXITSTATUS(status);
        snprintf(what, sizeof what, "exited with code %d", code);
    } else {
        int sig = WTERMSIG(status);
        code = 128 + sig;
        snprintf(what, sizeof what, "was killed by signal %d (%s)", sig, strsignal(sig));
    }
    others = begin_stop(j, code, SIGTERM);
    snprintf(j->summary, sizeof j->summary, "distrun: rank %d (pid %ld) %s", c->rank, (long)pid, what);
    if (others > 0)
        snprintf(j->summary + strlen(j->summary), sizeof j->summary - strlen(j->summary),
                 "; stopped %d other rank%s", others, plural(others));
}

static void reap(job *j) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        for (int i = 0; i < j->nkids; i++)
            if (j->kids[i].pid == pid) { on_rank_exit(j, &j->kids[i], status); break; }
    }
}

/* SIGINT/SIGTERM/SIGHUP: forward it to every rank.  A SIGINT while the job
   is already stopping means "now": SIGKILL. */
static void on_stop_signal(job *j, int sig) {
    int n;
    if (j->stopping) {
        if (sig == SIGINT && !j->killed) kill_all(j);
        return;
    }
    n = begin_stop(j, 128 + sig, sig);
    snprintf(j->summary, sizeof j->summary, "distrun: got signal %d (%s); forwarded it to %d rank%s",
             sig, strsignal(sig), n, plural(n));
}

static void handle_signals(job *j) {
    while (j->seen_int != got_int) { j->seen_int++; on_stop_signal(j, SIGINT); }
    while (j->seen_term != got_term) { j->seen_term++; on_stop_signal(j, SIGTERM); }
    while (j->seen_hup != got_hup) { j->seen_hup++; on_stop_signal(j, SIGHUP); }
}

static void check_deadlines(job *j) {
    int64_t now = now_ms();
    if (!j->stopping && j->deadline && now >= j->deadline) {
        int n = begin_stop(j, EXIT_TIMEOUT, SIGTERM);
        snprintf(j->summary, sizeof j->summary, "distrun: timed out after %g s (--timeout); stopped %d rank%s",
                 j->opt.timeout_s, n, plural(n));
    }
    if (j->stopping && !j->killed && now >= j->kill_at) kill_all(j);
}

/* ---- the loop ----------------------------------------------------------- */

static int poll_timeout(const job *j) {
    int64_t now = now_ms(), t = now + REAP_EVERY_MS;
    if (!j->stopping && j->deadline && j->deadline < t) t = j->deadline;
    if (j->stopping && !j->killed && j->kill_at < t) t = j->kill_at;
    return t <= now ? 0 : (int)(t - now);
}

static child *stream_owner(job *j, stream *s) {
    for (int i = 0; i < j->nkids; i++)
        if (s == &j->kids[i].out || s == &j->kids[i].err) return &j->kids[i];
    return NULL;
}

static int collect_pollfds(job *j) {
    int n = 1;
    j->pfd[0] = (struct pollfd){ wake_pipe[0], POLLIN, 0 };
    for (int i = 0; i < j->nkids; i++) {
        stream *ss[2] = { &j->kids[i].out, &j->kids[i].err };
        for (int k = 0; k < 2; k++) {
            if (ss[k]->fd < 0) continue;
            j->pfd[n] = (struct pollfd){ ss[k]->fd, POLLIN, 0 };
            j->pstream[n++] = ss[k];
        }
    }
    return n;
}

/* Everything happens here: output, exits, signals, deadlines.  Each pass
   waits in poll at most until the next deadline (or REAP_EVERY_MS), so the
   loop cannot hang on anything but a rank that ignores SIGKILL. */
static void run(job *j) {
    while (j->running > 0) {
        int n = collect_pollfds(j);
        if (poll(j->pfd, (nfds_t)n, poll_timeout(j)) < 0 && errno != EINTR) {
            perror("distrun: poll");
            if (!j->stopping) begin_stop(j, EXIT_LAUNCH, SIGTERM);
            kill_all(j);
        }
        if (j->pfd[0].revents) drain_wake_pipe();
        for (int k = 1; k < n; k++) {
            if (!j->pfd[k].revents) continue;
            child *c = stream_owner(j, j->pstream[k]);
            /* a child that exited meanwhile was already drained by reap */
            if (c && j->pstream[k]->fd == j->pfd[k].fd) pump(c, j->pstream[k], 0);
        }
        reap(j);
        handle_signals(j);
        check_deadlines(j);
    }
}

/* Inherited closed stdio would let a pipe or the store socket land on fd
   0..2 and be clobbered by dup2 in the child. */
static void ensure_stdio_open(void) {
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) >= 0) continue;
        int nfd = open("/dev/null", O_RDWR);
        if (nfd >= 0 && nfd != fd) close(nfd);
    }
}

static int init_job(job *j) {
    j->nkids = j->opt.nproc;
    j->kids = calloc((size_t)j->nkids, sizeof *j->kids);
    j->pfd = calloc((size_t)j->nkids * 2 + 1, sizeof *j->pfd);
    j->pstream = calloc((size_t)j->nkids * 2 + 1, sizeof *j->pstream);
    if (!j->kids || !j->pfd || !j->pstream) { fputs("distrun: out of memory\n", stderr); return -1; }
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        c->rank = j->opt.node_rank * j->opt.nproc + i;
        snprintf(c->prefix, sizeof c->prefix, "[%d] ", c->rank);
        c->out = (stream){ .fd = -1, .out_fd = 1 };
        c->err = (stream){ .fd = -1, .out_fd = 2 };
    }
    j->stdin_tty = isatty(0);
    if (j->opt.timeout_s > 0) j->deadline = now_ms() + seconds_to_ms(j->opt.timeout_s);
    return 0;
}

/* Fork every rank.  Signals stay blocked meanwhile so a Ctrl-C cannot run
   distrun's handler inside a half-set-up child; they are handled once the
   loop starts. */
static void start_all(job *j) {
    int store_fd = -1, port = j->opt.master_port;
    sigset_t caught;
    caught_set(&caught);
    sigprocmask(SIG_BLOCK, &caught, &orig_mask);
    if (port == 0 && (store_fd = open_store_socket(j->opt.master_addr, &port)) < 0) {
        j->stopping = 1;
        j->exit_code = EXIT_LAUNCH;
    }
    raise_fd_limit(j->nkids);
    fflush(NULL);           /* or each child would print distrun's buffered output again */
    for (int i = 0; i < j->nkids && !j->stopping; i++) {
        if (start_rank(j, i, i == 0 && j->opt.node_rank == 0 ? store_fd : -1, port) != 0) {
            int n = begin_stop(j, EXIT_LAUNCH, SIGTERM);
            if (n > 0) snprintf(j->summary, sizeof j->summary, "distrun: stopped %d rank%s", n, plural(n));
        }
    }
    if (store_fd >= 0) close(store_fd);   /* rank 0 has it now */
    sigset_t unblock = orig_mask;
    for (int i = 0; i < NCAUGHT; i++) sigdelset(&unblock, caught_signals[i]);
    sigprocmask(SIG_SETMASK, &unblock, NULL);
}

static void free_job(job *j) {
    for (int i = 0; i < j->nkids; i++) { free(j->kids[i].out.buf); free(j->kids[i].err.buf); }
    free(j->kids);
    free(j->pfd);
    free(j->pstream);
}

int main(int argc, char **argv) {
    job j;
    memset(&j, 0, sizeof j);
    parse_args(argc, argv, &j.opt);
    ensure_stdio_open();
    if (setup_signals() != 0) { perror("distrun: signals"); return EXIT_LAUNCH; }
    if (init_job(&j) != 0) return EXIT_LAUNCH;
    start_all(&j);
    run(&j);
    if (j.summary[0]) fprintf(stderr, "%s\n", j.summary);
    free_job(&j);
    return j.exit_code;
}
