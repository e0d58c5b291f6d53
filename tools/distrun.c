/* distrun - start the ranks of a dist job (what torchrun is to PyTorch).

   usage: distrun [options] PROG [ARGS...]        (distrun --help lists them)

   distrun starts --nproc-per-node copies of PROG on this node.  Each gets the
   torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
   GROUP_RANK (the node rank), MASTER_ADDR and MASTER_PORT.  Every line a rank
   writes is relayed with a "[RANK] " prefix (stdout to stdout, stderr to
   stderr).  SIGINT, SIGTERM and SIGHUP are forwarded to every rank; a second
   SIGINT kills them.  When a rank fails, the others get SIGTERM, then SIGKILL
   after --kill-grace seconds, and distrun exits with the failed rank's status.

   distrun on node 0 hosts the job's store itself (dist.h's
   dist_store_host_start), on MASTER_ADDR and --master-port (or a free port
   on one node), for the job's whole life, and tells the ranks so
   (DIST_STORE_HOSTED=1): rank 0 joins it as the others do.  So the store
   outlives any rank, rank 0 included, and the survivors of a death can
   still agree and shrink (dist_agree, dist_shrink); and no other process
   can take the port between choosing it and using it.

   Each rank runs in its own process group, so a signal reaches everything a
   rank started and the terminal's Ctrl-C reaches distrun alone (which
   forwards it once).  Hence ranks get /dev/null as stdin when distrun's
   stdin is a terminal: a background group reading it would be stopped.

   Layout.  The launcher (options, environment, output relay, stopping, exit
   status) is written once.  What an operating system does differently is in
   one section at the end of the file, "platform", which implements the
   plat_* functions declared before the launcher, once for POSIX (Linux,
   macOS) and once for Windows: start a rank with its environment, relay its
   output, wait for something to happen, stop or kill a rank, catch Ctrl-C,
   open the store's socket.

   Windows (x64, Vista or later) does the same with these differences:
   - Each rank is a CreateProcessW with a new environment block (distrun's
     environment plus the variables above), its own process group and
     exactly the handles it needs; a job object with KILL_ON_JOB_CLOSE takes
     every process of the job along when distrun ends, even when it is
     killed.  (So, unlike POSIX, what a rank leaves running ends with
     distrun.)
   - Ctrl-C, Ctrl-Break and closing the console count as SIGINT, SIGTERM and
     SIGHUP (exit 130, 143, 129).  They are forwarded as CTRL_BREAK_EVENT to
     each rank's process group (the only console event that can be aimed at
     one group; a C program's default handler exits); a rank that shares no
     console with distrun (distrun has none, or Wine) cannot be sent one and
     is terminated at once instead.  "SIGKILL" is TerminateProcess.
   - Output comes through named pipes read with overlapped I/O on one
     completion port, so relaying stays single-threaded as on POSIX.
   - A rank's exit code is passed on as it is (Windows has 32-bit codes and
     no "killed by signal"); 127 when PROG cannot be started.
   - Arguments are re-quoted by the CommandLineToArgvW rules, and taken from
     the wide command line, so they reach PROG unchanged (as UTF-8 inside).

   Plain C11 (+ POSIX, or + Win32), with dist.h (for the store):
      cc -std=c11 -O2 -Wall -Wextra -Wpedantic -I. -o build/distrun tools/distrun.c -pthread
      x86_64-w64-mingw32-gcc -std=c11 -O2 -Wall -Wextra -I. -o distrun.exe tools/distrun.c -lws2_32
      cl /std:c11 /O2 /W4 /I. tools\distrun.c ws2_32.lib
*/
#if !defined(_WIN32) && !defined(_GNU_SOURCE)
#  define _GNU_SOURCE               /* pipe2, strsignal, ... under -std=c11 */
#endif
#ifdef _WIN32
#  ifndef WIN32_LEAN_AND_MEAN
#    define WIN32_LEAN_AND_MEAN
#  endif
#  if !defined(_WIN32_WINNT) || _WIN32_WINNT < 0x0600
#    undef _WIN32_WINNT
#    define _WIN32_WINNT 0x0600     /* CancelIoEx, GetTickCount64, the handle list */
#  endif
#  if defined(_MSC_VER) && !defined(_CRT_SECURE_NO_WARNINGS)
#    define _CRT_SECURE_NO_WARNINGS /* getenv, strerror, vfprintf */
#  endif
#endif
/* The store is dist.h's (dist_store_host_start). */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#  include <winsock2.h>
#  include <ws2tcpip.h>
#  include <windows.h>
#  include <shellapi.h>             /* CommandLineToArgvW */
#  include <wchar.h>
#  ifdef _MSC_VER
#    pragma comment(lib, "shell32.lib")
#  endif
#else
#  include <fcntl.h>
#  include <netdb.h>
#  include <poll.h>
#  include <signal.h>
#  include <unistd.h>
#  include <netinet/in.h>
#  include <sys/resource.h>
#  include <sys/socket.h>
#  include <sys/uio.h>
#  include <sys/wait.h>
#  ifdef __linux__
#    include <sys/prctl.h>
#    include <sys/syscall.h>               /* close_range */
#  endif
#endif

#define MAX_NPROC      4096
#define MAX_SECONDS    1e8
#define LINE_MAX_BYTES (64 * 1024)  /* longer lines are cut; every piece gets a prefix */
#define READ_CHUNK     (64 * 1024)
#define DRAIN_READS    16           /* bound on reads from an exited rank's pipe */
#define REAP_EVERY_MS  1000         /* wake at least this often, whatever happens */

enum { EXIT_LAUNCH = 1, EXIT_USAGE = 2, EXIT_TIMEOUT = 124, EXIT_EXEC = 127 };

/* The signals the launcher speaks of.  Windows has none of these; its
   console events are given these numbers, so exit codes (128 + N) agree. */
#ifdef _WIN32
enum { DR_SIGHUP = 1, DR_SIGINT = 2, DR_SIGKILL = 9, DR_SIGTERM = 15 };
#else
enum { DR_SIGHUP = SIGHUP, DR_SIGINT = SIGINT, DR_SIGKILL = SIGKILL, DR_SIGTERM = SIGTERM };
#endif

/* ---- what each platform keeps per stream, rank and job ------------------- */

struct child;
#ifdef _WIN32
typedef struct plat_stream {
    HANDLE h;               /* distrun's end of the rank's named pipe */
    OVERLAPPED ov;          /* the one read in flight */
    char *rbuf;             /* what it reads into */
    int pending;            /* a read is in flight: ov and rbuf must stay */
    struct child *owner;
} plat_stream;
typedef struct plat_child {
    HANDLE process, wait;   /* the process; its registered wait */
    int exited;             /* it has ended; its pipes are being drained */
    DWORD code;             /* its exit code */
    int64_t drain_until;    /* stop waiting for the pipes' end then */
    int drain_reads;        /* reads since it ended */
} plat_child;
typedef struct plat_job { int draining; /* ranks that ended, pipes still open */ } plat_job;
#else
typedef struct plat_stream { int fd; /* read end of the rank's pipe; -1 when closed */ } plat_stream;
typedef struct plat_child { char none; /* the pid is all */ } plat_child;
typedef struct plat_job {
    struct pollfd *pfd;     /* scratch for poll: wake pipe, then streams */
    struct stream **pstream;
} plat_job;
#endif

typedef struct stream stream;
typedef struct child child;
typedef struct job job;
typedef struct rank_env rank_env;

/* ---- the platform interface (implemented at the end of the file) ------- */

/* Windows: argv again, as UTF-8, from the wide command line. */
static void plat_args(int *argc, char ***argv);
static uint64_t plat_random64(void);
static int64_t plat_now_ms(void);                /* monotonic */
/* Before ranks start: signals or the console handler, stdio, limits,
   j->stdin_tty.  -1 (message printed) when distrun cannot go on. */
static int plat_init(job *j);
/* While ranks start, stop signals wait (POSIX: blocked). */
static void plat_hold_signals(int hold);
/* Start c with env set, its output into c->out and c->err unless
   --no-prefix.  Sets c->pid.  0, or the exit code for the job when it
   cannot (message printed). */
static int plat_start_rank(job *j, child *c, const rank_env *env);
/* Send sig (DR_SIGKILL: kill outright) to c and all it started; 1 if sent. */
static int plat_signal_rank(child *c, int sig);
/* Wait at most timeout_ms for output, ended ranks or a signal.  Output goes
   to feed() and close_stream(); each ended rank to rank_ended(). */
static void plat_wait(job *j, int timeout_ms);
static int plat_take_signal(void);               /* next stop signal caught, or 0 */
/* Write prefix, p[0..n) and a newline in one piece: lines of different
   ranks never interleave.  Output that cannot be written is dropped. */
static void plat_write_line(int fd, const char *prefix, const char *p, size_t n);
static void plat_close_stream(stream *s);
static const char *plat_signal_name(int sig);
/* After the loop; 0 if the job's memory may be freed. */
static int plat_finish(job *j);

/* ---- options ------------------------------------------------------------ */

typedef struct options {
    int nproc;              /* ranks on this node */
    int nnodes;             /* nodes at most (--nnodes MIN:MAX: MAX) */
    int nnodes_min;         /* nodes that form the job (MIN); the others' ranks join it */
    int max_restarts;       /* ranks of this node that fail are restarted, this many times in all */
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
              OPT_KILL_GRACE, OPT_TIMEOUT, OPT_NO_PREFIX, OPT_RUN_ID, OPT_MAX_RESTARTS, OPT_HELP };

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
    { "max-restarts",   OPT_MAX_RESTARTS, 1 },
    { "help",           OPT_HELP,        0 },
};

static void print_usage(FILE *f) {
    fputs("usage: distrun [options] PROG [ARGS...]\n"
          "\n"
          "Start the ranks of a dist job: --nproc-per-node copies of PROG on this node.\n"
          "\n"
          "options:\n"
          "  -n, --nproc-per-node N  ranks on this node (default 1)\n"
          "      --nnodes M          nodes in the job (default 1); MIN:MAX: the first MIN\n"
          "                          nodes form it, the ranks of the others join it when\n"
          "                          its ranks call dist_grow (an elastic job)\n"
          "      --max-restarts N    restart a rank of this node that fails, N times in\n"
          "                          all, instead of stopping the job: the new process\n"
          "                          joins the running job (DIST_JOINING=1) when its ranks\n"
          "                          call dist_grow, and dist_restart_count() says how\n"
          "                          many times it was restarted (default 0)\n"
          "      --node-rank K       this node's index, 0..M-1 (default 0)\n"
          "      --master-addr HOST  node 0's address, where its distrun hosts the job's\n"
          "                          store (default 127.0.0.1)\n"
          "      --master-port P     its port; required with --nnodes > 1.  Without it\n"
          "                          the store listens on a free port\n"
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
    case OPT_NNODES: {
        const char *colon = strchr(v, ':');
        if (colon) {
            char lo[32];
            size_t n = (size_t)(colon - v);
            ok = n > 0 && n < sizeof lo;
            if (ok) { memcpy(lo, v, n); lo[n] = 0; }
            ok = ok && !parse_int(lo, 1, INT_MAX, &o->nnodes_min) && !parse_int(colon + 1, 1, INT_MAX, &o->nnodes) && o->nnodes_min <= o->nnodes;
        } else {
            ok = !parse_int(v, 1, INT_MAX, &o->nnodes);
            o->nnodes_min = o->nnodes;
        }
        want = "a positive count, or MIN:MAX";
        break;
    }
    case OPT_MAX_RESTARTS: ok = !parse_int(v, 0, INT_MAX, &o->max_restarts); want = "a count"; break;
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
    *o = (options){ .nproc = 1, .nnodes = 1, .nnodes_min = 1, .master_addr = "127.0.0.1", .kill_grace_s = 3, .prefix = 1 };
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
        snprintf(o->run_buf, sizeof o->run_buf, "distrun-%016llx", (unsigned long long)plat_random64());
        o->run_id = o->run_buf;
    }
}

/* ---- the job ------------------------------------------------------------ */

struct stream {
    int open;               /* distrun's end of the rank's pipe is open */
    int out_fd;             /* where its lines go: 1 or 2 */
    char *buf;              /* the pending partial line */
    size_t len, cap;
    plat_stream p;
};

struct child {
    long pid;               /* 0 when not running (ended, or never started) */
    int rank;
    int restarts;           /* times it was restarted */
    char prefix[24];        /* "[RANK] " */
    stream out, err;
    plat_child p;
};

struct job {
    options opt;
    child *kids;
    int nkids, running;
    int stopping;           /* the job is being shut down; first reason wins */
    int killed;             /* SIGKILL has been sent */
    int64_t kill_at;        /* when stopping: SIGKILL whatever is left then */
    int64_t deadline;       /* --timeout, or 0 */
    int exit_code;
    int restarts;           /* ranks restarted so far (--max-restarts) */
    int port;               /* MASTER_PORT of the ranks */
    int stdin_tty;          /* distrun's stdin is a terminal (a console) */
    char summary[320];      /* the one line printed at the end, if any */
    dist_store_host *store; /* node 0: the job's store (dist.h) */
    plat_job p;
};

/* A rank's variables, in the order they are set; value NULL: unset. */
typedef struct env_var { const char *name, *value; } env_var;
struct rank_env { env_var v[14]; int n; char num[10][24]; };

static int64_t seconds_to_ms(double s) { return (int64_t)(s * 1000.0 + 0.5); }

/* ---- relaying output ---------------------------------------------------- */

/* Keep a partial line until its newline comes.  A line longer than
   LINE_MAX_BYTES goes out in pieces, each with the prefix, so the output
   stays line-structured and memory stays bounded. */
static void append_partial(child *c, stream *s, const char *p, size_t n) {
    while (n > 0) {
        if (s->len == LINE_MAX_BYTES) { plat_write_line(s->out_fd, c->prefix, s->buf, s->len); s->len = 0; }
        size_t take = n < LINE_MAX_BYTES - s->len ? n : LINE_MAX_BYTES - s->len;
        if (s->len + take > s->cap) {
            size_t want = s->cap ? s->cap * 2 : 256;
            while (want < s->len + take) want *= 2;
            if (want > LINE_MAX_BYTES) want = LINE_MAX_BYTES;
            char *nb = realloc(s->buf, want);
            if (!nb) {   /* out of memory: pass the bytes on now rather than lose them */
                plat_write_line(s->out_fd, c->prefix, p, take);
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

/* Bytes a rank wrote: every complete line goes out with its prefix. */
static void feed(child *c, stream *s, const char *p, size_t n) {
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) : n;
        if (nl && s->len == 0 && seg <= LINE_MAX_BYTES) {
            plat_write_line(s->out_fd, c->prefix, p, seg);      /* the common case: no copy */
        } else {
            append_partial(c, s, p, seg);
            if (nl) { plat_write_line(s->out_fd, c->prefix, s->buf, s->len); s->len = 0; }
        }
        if (!nl) return;
        p += seg + 1;
        n -= seg + 1;
    }
}

/* A last line without a newline still gets printed, as a line of its own. */
static void close_stream(child *c, stream *s) {
    if (!s->open) return;
    if (s->len > 0) plat_write_line(s->out_fd, c->prefix, s->buf, s->len);
    plat_close_stream(s);
    free(s->buf);
    s->open = 0;
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* ---- starting ranks ----------------------------------------------------- */

static const char *env_num(rank_env *e, long v) {
    char *b = e->num[e->n < 10 ? e->n : 9];
    snprintf(b, sizeof e->num[0], "%ld", v);
    return b;
}

static void env_add(rank_env *e, const char *name, const char *value) {
    e->v[e->n].name = name;
    e->v[e->n].value = value;
    e->n++;
}

/* What a rank's environment gets besides distrun's own.  A rank of a node
   past --nnodes MIN, or a restarted one, joins the running job. */
static void make_rank_env(const job *j, int local, int port, rank_env *e) {
    const options *o = &j->opt;
    const child *c = &j->kids[local];
    e->n = 0;
    env_add(e, "RANK", env_num(e, (long)o->node_rank * o->nproc + local));
    env_add(e, "WORLD_SIZE", env_num(e, (long)o->nnodes_min * o->nproc));
    env_add(e, "DIST_JOINING", o->node_rank >= o->nnodes_min || c->restarts > 0 ? "1" : NULL);
    env_add(e, "DIST_RESTART_COUNT", env_num(e, c->restarts));
    env_add(e, "LOCAL_RANK", env_num(e, local));
    env_add(e, "LOCAL_WORLD_SIZE", env_num(e, o->nproc));
    env_add(e, "GROUP_RANK", env_num(e, o->node_rank));
    env_add(e, "MASTER_PORT", env_num(e, port));
    env_add(e, "MASTER_ADDR", o->master_addr);
    if (o->run_id) env_add(e, "DIST_RUN_ID", o->run_id);
    env_add(e, "DIST_STORE_HOSTED", "1");         /* node 0's distrun hosts it */
    env_add(e, "DIST_STORE_LISTEN_FD", NULL);     /* (an older launcher's, above this one) */
}

static int start_rank(job *j, int local, int port) {
    rank_env e;
    int rc;
    make_rank_env(j, local, port, &e);
    rc = plat_start_rank(j, &j->kids[local], &e);
    if (rc == 0) j->running++;
    return rc;
}

/* ---- stopping ----------------------------------------------------------- */

static int signal_all(job *j, int sig) {
    int n = 0;
    for (int i = 0; i < j->nkids; i++)
        if (j->kids[i].pid > 0) n += plat_signal_rank(&j->kids[i], sig);
    return n;
}

/* Begin shutting the job down (once): send sig to every running rank and
   SIGKILL what is left after the grace period.  Returns how many got it. */
static int begin_stop(job *j, int exit_code, int sig) {
    j->stopping = 1;
    j->exit_code = exit_code;
    j->kill_at = plat_now_ms() + seconds_to_ms(j->opt.kill_grace_s);
    return signal_all(j, sig);
}

static void kill_all(job *j) {
    signal_all(j, DR_SIGKILL);
    j->killed = 1;
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* c has ended (its exit code, or the signal that killed it) and its pipes
   are drained: close them, and stop the job if it failed. */
static void rank_ended(job *j, child *c, int code, int sig) {
    long pid = c->pid;
    char what[96];
    int status, others;
    close_stream(c, &c->out);
    close_stream(c, &c->err);
    c->pid = 0;
    j->running--;
    if (j->stopping || (sig == 0 && code == 0)) return;
    if (j->restarts < j->opt.max_restarts) {
        /* --max-restarts: a new process in its place, which joins the
           running job (the others go on: they shrink, and admit it with
           dist_grow) */
        int rc;
        char how[64];
        if (sig == 0) snprintf(how, sizeof how, "exited with code %d", code);
        else snprintf(how, sizeof how, "was killed by signal %d (%s)", sig, plat_signal_name(sig));
        j->restarts++;
        c->restarts++;
        fprintf(stderr, "distrun: rank %d (pid %ld) %s; restarting it (restart %d of %d) to join the running job\n", c->rank, pid, how,
                j->restarts, j->opt.max_restarts);
        rc = start_rank(j, (int)(c - j->kids), j->port);
        if (rc == 0) return;
        code = rc; sig = 0;
    }
    if (sig == 0) {
        status = code;
        if ((unsigned)code > 255)   /* Windows: an NTSTATUS, such as 0xC0000005 */
            snprintf(what, sizeof what, "exited with code 0x%08X", (unsigned)code);
        else
            snprintf(what, sizeof what, "exited with code %d", code);
    } else {
        status = 128 + sig;
        snprintf(what, sizeof what, "was killed by signal %d (%s)", sig, plat_signal_name(sig));
    }
    others = begin_stop(j, status, DR_SIGTERM);
    snprintf(j->summary, sizeof j->summary, "distrun: rank %d (pid %ld) %s", c->rank, pid, what);
    if (others > 0)
        snprintf(j->summary + strlen(j->summary), sizeof j->summary - strlen(j->summary),
                 "; stopped %d other rank%s", others, plural(others));
}

/* SIGINT/SIGTERM/SIGHUP: forward it to every rank.  A SIGINT while the job
   is already stopping means "now": SIGKILL. */
static void on_stop_signal(job *j, int sig) {
    int n;
    if (j->stopping) {
        if (sig == DR_SIGINT && !j->killed) kill_all(j);
        return;
    }
    n = begin_stop(j, 128 + sig, sig);
    snprintf(j->summary, sizeof j->summary, "distrun: got signal %d (%s); forwarded it to %d rank%s",
             sig, plat_signal_name(sig), n, plural(n));
}

static void handle_signals(job *j) {
    int sig;
    while ((sig = plat_take_signal()) != 0) on_stop_signal(j, sig);
}

static void check_deadlines(job *j) {
    int64_t now = plat_now_ms();
    if (!j->stopping && j->deadline && now >= j->deadline) {
        int n = begin_stop(j, EXIT_TIMEOUT, DR_SIGTERM);
        snprintf(j->summary, sizeof j->summary, "distrun: timed out after %g s (--timeout); stopped %d rank%s",
                 j->opt.timeout_s, n, plural(n));
    }
    if (j->stopping && !j->killed && now >= j->kill_at) kill_all(j);
}

/* ---- the loop ----------------------------------------------------------- */

static int wait_timeout(const job *j) {
    int64_t now = plat_now_ms(), t = now + REAP_EVERY_MS;
    if (!j->stopping && j->deadline && j->deadline < t) t = j->deadline;
    if (j->stopping && !j->killed && j->kill_at < t) t = j->kill_at;
    return t <= now ? 0 : (int)(t - now);
}

/* Everything happens here: output, exits, signals, deadlines.  Each pass
   waits at most until the next deadline (or REAP_EVERY_MS), so the loop
   cannot hang on anything but a rank that ignores SIGKILL. */
static void run(job *j) {
    while (j->running > 0) {
        plat_wait(j, wait_timeout(j));
        handle_signals(j);
        check_deadlines(j);
    }
}

static int init_job(job *j) {
    j->nkids = j->opt.nproc;
    j->kids = calloc((size_t)j->nkids, sizeof *j->kids);
    if (!j->kids) { fputs("distrun: out of memory\n", stderr); return -1; }
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        c->rank = j->opt.node_rank * j->opt.nproc + i;
        snprintf(c->prefix, sizeof c->prefix, "[%d] ", c->rank);
        c->out.out_fd = 1;
        c->err.out_fd = 2;
    }
    return 0;
}

/* Start every rank.  Stop signals wait meanwhile (they are handled once the
   loop starts); a rank that cannot be started stops the job. */
static void start_all(job *j) {
    int port = j->opt.master_port;
    plat_hold_signals(1);   /* (before the store's thread starts: the signals stay this thread's) */
    if (j->opt.node_rank == 0) {
        /* The store is distrun's, on node 0, for the job's whole life: it
           outlives any rank (rank 0 included), so survivors can agree and
           shrink, and the ranks find it at MASTER_ADDR:MASTER_PORT. */
        dist_config hc;
        memset(&hc, 0, sizeof hc);
        hc.run_id = j->opt.run_id;
        /* bound now, served once the ranks are started (no fork while
           the store's thread runs: see dist__store_host_open) */
        if (dist__store_host_open(&j->store, &hc, j->opt.nnodes_min * j->opt.nproc, j->opt.master_addr, port) != DIST_OK) {
            fprintf(stderr, "distrun: %s\n", dist_error_message(NULL));
            j->stopping = 1;
            j->exit_code = EXIT_LAUNCH;
        } else port = dist_store_host_port(j->store);
    }
    j->port = port;
    fflush(NULL);           /* or each forked child would print distrun's buffered output again */
    for (int i = 0; i < j->nkids && !j->stopping; i++) {
        int rc = start_rank(j, i, port);
        if (rc != 0) {
            int n = begin_stop(j, rc, DR_SIGTERM);
            if (n > 0) snprintf(j->summary, sizeof j->summary, "distrun: stopped %d rank%s", n, plural(n));
        }
    }
    if (j->store && dist__store_host_run(j->store) != DIST_OK) {
        int n;
        fprintf(stderr, "distrun: %s\n", dist_error_message(NULL));
        n = begin_stop(j, EXIT_LAUNCH, DR_SIGTERM);
        if (n > 0) snprintf(j->summary, sizeof j->summary, "distrun: stopped %d rank%s", n, plural(n));
    }
    plat_hold_signals(0);
}

static void free_job(job *j) {
    if (plat_finish(j) != 0) return;   /* I/O still in flight into it: leave it */
    for (int i = 0; i < j->nkids; i++) { free(j->kids[i].out.buf); free(j->kids[i].err.buf); }
    free(j->kids);
}

int main(int argc, char **argv) {
    job j;
    memset(&j, 0, sizeof j);
    plat_args(&argc, &argv);
    parse_args(argc, argv, &j.opt);
    if (init_job(&j) != 0) return EXIT_LAUNCH;
    if (plat_init(&j) != 0) return EXIT_LAUNCH;
    if (j.opt.timeout_s > 0) j.deadline = plat_now_ms() + seconds_to_ms(j.opt.timeout_s);
    start_all(&j);
    run(&j);
    dist_store_host_stop(j.store);
    if (j.summary[0]) fprintf(stderr, "%s\n", j.summary);
    free_job(&j);
    return j.exit_code;
}

/* ======================================================================== */
/* ---- platform ----------------------------------------------------------- */
/* ======================================================================== */

#ifndef _WIN32
/* ---- POSIX: fork/exec, process groups, pipes polled with a self-pipe --- */

static volatile sig_atomic_t got_int, got_term, got_hup;
static sig_atomic_t seen_int, seen_term, seen_hup;
static int wake_pipe[2] = { -1, -1 };
static sigset_t orig_mask;             /* the mask distrun started with */
static struct rlimit orig_nofile;
static int nofile_raised;

static void plat_args(int *argc, char ***argv) { (void)argc; (void)argv; }

static uint64_t plat_random64(void) {
    unsigned char b[8] = { 0 };
    unsigned long long x = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) { if (fread(b, 1, sizeof b, f) == sizeof b) memcpy(&x, b, sizeof x); fclose(f); }
    return x;
}

static int64_t plat_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *plat_signal_name(int sig) { return strsignal(sig); }

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

static int plat_take_signal(void) {
    if (seen_int != got_int) { seen_int++; return SIGINT; }
    if (seen_term != got_term) { seen_term++; return SIGTERM; }
    if (seen_hup != got_hup) { seen_hup++; return SIGHUP; }
    return 0;
}

/* Signals stay blocked while ranks are forked, so a Ctrl-C cannot run
   distrun's handler inside a half-set-up child. */
static void plat_hold_signals(int hold) {
    sigset_t set;
    if (hold) {
        caught_set(&set);
        sigprocmask(SIG_BLOCK, &set, &orig_mask);
        return;
    }
    set = orig_mask;
    for (int i = 0; i < NCAUGHT; i++) sigdelset(&set, caught_signals[i]);
    sigprocmask(SIG_SETMASK, &set, NULL);
}

/* ---- relaying output ---------------------------------------------------- */

/* One writev per line, so lines of different ranks never interleave.  Output
   that cannot be written (reader gone) is dropped: the ranks must keep
   running and be drained regardless. */
static void plat_write_line(int fd, const char *prefix, const char *p, size_t n) {
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

static void plat_close_stream(stream *s) {
    close(s->p.fd);
    s->p.fd = -1;
}

/* Read what the pipe holds: one chunk when called from poll (so a chatty
   rank cannot starve the others), or until empty when draining an exited
   rank (bounded, since a leftover grandchild may still be writing). */
static void pump(child *c, stream *s, int drain) {
    static char chunk[READ_CHUNK];
    int reads = 0;
    while (s->open && reads < (drain ? DRAIN_READS : 1)) {
        ssize_t r = read(s->p.fd, chunk, sizeof chunk);
        if (r > 0) { feed(c, s, chunk, (size_t)r); reads++; continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        close_stream(c, s);            /* EOF or error */
    }
}

/* ---- starting ranks ----------------------------------------------------- */

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

/* A rank sees stdio and nothing else: like Python's subprocess, distrun
   does not pass on fds it inherited. */
static void close_other_fds(void) { close_fd_range(3, ~0U); }

/* The rank's environment, made before the fork: distrun's own with the
   rank's variables replaced.  (The child may not allocate: a rank
   restarted while the store's thread runs is forked from a process with
   two threads, and a lock that thread held at the fork, the allocator's,
   would stay held in the child forever.) */
static char **make_envp(const rank_env *env) {
    extern char **environ;
    size_t n = 0, k = 0;
    char **v;
    for (char **p = environ; p && *p; p++) n++;
    if ((v = calloc(n + (size_t)env->n + 1, sizeof *v)) == NULL) return NULL;
    for (char **p = environ; p && *p; p++) {
        int ours = 0;
        for (int i = 0; i < env->n && !ours; i++) {
            size_t l = strlen(env->v[i].name);
            ours = strncmp(*p, env->v[i].name, l) == 0 && (*p)[l] == '=';
        }
        if (!ours) v[k++] = *p;
    }
    for (int i = 0; i < env->n; i++) {
        size_t l;
        if (!env->v[i].value) continue;
        l = strlen(env->v[i].name) + strlen(env->v[i].value) + 2;
        if ((v[k] = malloc(l)) == NULL) break;
        snprintf(v[k++], l, "%s=%s", env->v[i].name, env->v[i].value);
    }
    v[k] = NULL;
    return v;
}

static void free_envp(char **v) {
    extern char **environ;
    size_t n = 0;
    if (!v) return;
    for (char **p = environ; p && *p; p++) n++;
    for (size_t i = 0; v[i]; i++) {
        int inherited = 0;
        for (size_t e = 0; e < n && !inherited; e++) inherited = v[i] == environ[e];
        if (!inherited) free(v[i]);
    }
    free(v);
}

/* PROG as execvp would find it (PATH searched when it has no slash),
   found before the fork; NULL: not found (errno says why). */
static char *find_prog(const char *prog) {
    const char *path = getenv("PATH");
    int saved = ENOENT;
    if (strchr(prog, '/')) return strdup(prog);
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t dl = strcspn(path, ":"), l = dl + strlen(prog) + 2;
        char *f = malloc(l);
        if (!f) return NULL;
        snprintf(f, l, "%.*s%s%s", (int)dl, dl ? path : ".", "/", prog);
        if (access(f, X_OK) == 0) return f;
        if (errno != ENOENT) saved = errno;
        free(f);
        path += dl + (path[dl] == ':');
    }
    errno = saved;
    return NULL;
}

/* In the forked child, up to exec: only calls that allocate nothing (see
   make_envp). */
static void exec_rank(const job *j, char *const *envp, const char *prog, const int out[2], const int err[2], pid_t launcher) {
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
    close_other_fds();
    execve(prog, j->opt.argv, envp);
    {   /* (write(2) alone: see above) */
        static const char a[] = "distrun: cannot execute '";
        const char *b = j->opt.argv[0], *e = strerror(errno);
        if (write(2, a, sizeof a - 1) < 0 || write(2, b, strlen(b)) < 0 || write(2, "': ", 3) < 0 || write(2, e, strlen(e)) < 0 ||
            write(2, "\n", 1) < 0) _exit(EXIT_EXEC);
    }
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

static int plat_start_rank(job *j, child *c, const rank_env *env) {
    int out[2] = { -1, -1 }, err[2] = { -1, -1 };
    pid_t launcher = getpid(), pid;
    char **envp, *prog = find_prog(j->opt.argv[0]);
    if (!prog) {
        fprintf(stderr, "distrun: cannot execute '%s': %s\n", j->opt.argv[0], strerror(errno));
        return EXIT_EXEC;
    }
    if ((envp = make_envp(env)) == NULL) {
        fprintf(stderr, "distrun: out of memory for rank %d's environment\n", c->rank);
        free(prog);
        return EXIT_LAUNCH;
    }
    if (j->opt.prefix && (make_pipe(out) != 0 || make_pipe(err) != 0)) {
        fprintf(stderr, "distrun: cannot create pipes for rank %d: %s\n", c->rank, strerror(errno));
        close_pair(out);
        close_pair(err);
        free_envp(envp); free(prog);
        return EXIT_LAUNCH;
    }
    pid = fork();
    if (pid == 0) exec_rank(j, envp, prog, out, err, launcher);
    free_envp(envp); free(prog);
    if (out[1] >= 0) { close(out[1]); close(err[1]); }
    if (pid < 0) {
        fprintf(stderr, "distrun: cannot start rank %d: %s\n", c->rank, strerror(errno));
        if (out[0] >= 0) { close(out[0]); close(err[0]); }
        return EXIT_LAUNCH;
    }
    setpgid(pid, pid);      /* also here, so the group exists before we might signal it */
    c->pid = pid;
    c->out.p.fd = out[0];
    c->out.open = out[0] >= 0;
    c->err.p.fd = err[0];
    c->err.open = err[0] >= 0;
    return 0;
}

/* ---- stopping and waiting ----------------------------------------------- */

static int plat_signal_rank(child *c, int sig) {
    pid_t pid = (pid_t)c->pid;
    if (kill(-pid, sig) != 0) kill(pid, sig);    /* it left its group */
    return 1;
}

static void reap(job *j) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        for (int i = 0; i < j->nkids; i++) {
            child *c = &j->kids[i];
            if (c->pid != pid) continue;
            pump(c, &c->out, 1);       /* everything it wrote is in the pipes by now */
            pump(c, &c->err, 1);
            if (WIFEXITED(status)) rank_ended(j, c, WEXITSTATUS(status), 0);
            else rank_ended(j, c, 0, WTERMSIG(status));
            break;
        }
    }
}

static child *stream_owner(job *j, stream *s) {
    for (int i = 0; i < j->nkids; i++)
        if (s == &j->kids[i].out || s == &j->kids[i].err) return &j->kids[i];
    return NULL;
}

static int collect_pollfds(job *j) {
    int n = 1;
    j->p.pfd[0] = (struct pollfd){ wake_pipe[0], POLLIN, 0 };
    for (int i = 0; i < j->nkids; i++) {
        stream *ss[2] = { &j->kids[i].out, &j->kids[i].err };
        for (int k = 0; k < 2; k++) {
            if (!ss[k]->open) continue;
            j->p.pfd[n] = (struct pollfd){ ss[k]->p.fd, POLLIN, 0 };
            j->p.pstream[n++] = ss[k];
        }
    }
    return n;
}

static void plat_wait(job *j, int timeout_ms) {
    struct pollfd *pfd = j->p.pfd;
    int n = collect_pollfds(j);
    if (poll(pfd, (nfds_t)n, timeout_ms) < 0 && errno != EINTR) {
        perror("distrun: poll");
        if (!j->stopping) begin_stop(j, EXIT_LAUNCH, SIGTERM);
        kill_all(j);
    }
    if (pfd[0].revents) drain_wake_pipe();
    for (int k = 1; k < n; k++) {
        stream *s = j->p.pstream[k];
        if (!pfd[k].revents) continue;
        child *c = stream_owner(j, s);
        /* a child that exited meanwhile was already drained by reap */
        if (c && s->open && s->p.fd == pfd[k].fd) pump(c, s, 0);
    }
    reap(j);
}

/* ---- setting up --------------------------------------------------------- */

/* Inherited closed stdio would let a pipe or the store socket land on fd
   0..2 and be clobbered by dup2 in the child. */
static void ensure_stdio_open(void) {
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) >= 0) continue;
        int nfd = open("/dev/null", O_RDWR);
        if (nfd >= 0 && nfd != fd) close(nfd);
    }
}

static int plat_init(job *j) {
    ensure_stdio_open();
    if (setup_signals() != 0) { perror("distrun: signals"); return -1; }
    j->p.pfd = calloc((size_t)j->nkids * 2 + 1, sizeof *j->p.pfd);
    j->p.pstream = calloc((size_t)j->nkids * 2 + 1, sizeof *j->p.pstream);
    if (!j->p.pfd || !j->p.pstream) { fputs("distrun: out of memory\n", stderr); return -1; }
    for (int i = 0; i < j->nkids; i++) j->kids[i].out.p.fd = j->kids[i].err.p.fd = -1;
    j->stdin_tty = isatty(0);
    raise_fd_limit(j->nkids);
    return 0;
}

static int plat_finish(job *j) {
    free(j->p.pfd);
    free(j->p.pstream);
    return 0;
}

#else /* _WIN32 */
/* ---- Windows: CreateProcessW, a job object, named pipes on a completion port */

#define PIPE_CHUNK    (16 * 1024)   /* each stream's read buffer */
#define DRAIN_IDLE_MS 100           /* an ended rank's pipe still open (something it started
                                       holds it): give up after this long without data */

enum { PKT_READ = 1, PKT_EXIT, PKT_WAKE };   /* what a completion packet is */

static HANDLE win_port;             /* reads, rank exits and console events arrive here */
static HANDLE win_job;              /* every rank, KILL_ON_JOB_CLOSE */
static HANDLE win_done;             /* set when distrun is done (a closing console waits for it) */
static volatile LONG win_got[3];    /* console events counted as SIGINT, SIGTERM, SIGHUP */
static LONG win_seen[3];
static const int win_sigs[3] = { DR_SIGINT, DR_SIGTERM, DR_SIGHUP };

static const char *win_error(DWORD err) {
    static char buf[256];
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, err, 0,
                             buf, sizeof buf, NULL);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '.')) buf[--n] = 0;
    if (n == 0) snprintf(buf, sizeof buf, "error %lu", (unsigned long)err);
    return buf;
}

/* The arguments as the user typed them, whatever the code page: from the
   wide command line, as UTF-8 (they go back to UTF-16 for the ranks). */
static void plat_args(int *argc, char ***argv) {
    int n = 0;
    LPWSTR *w = CommandLineToArgvW(GetCommandLineW(), &n);
    char **a = w && n > 0 ? calloc((size_t)n + 1, sizeof *a) : NULL;
    if (!a) { if (w) LocalFree(w); return; }           /* keep the C runtime's */
    for (int i = 0; i < n; i++) {
        int len = WideCharToMultiByte(CP_UTF8, 0, w[i], -1, NULL, 0, NULL, NULL);
        if (len <= 0 || !(a[i] = malloc((size_t)len))) { LocalFree(w); return; }
        WideCharToMultiByte(CP_UTF8, 0, w[i], -1, a[i], len, NULL, NULL);
    }
    LocalFree(w);
    *argc = n;
    *argv = a;
}

static uint64_t plat_random64(void) {
    typedef BOOLEAN (WINAPI *gen_fn)(PVOID, ULONG);
    LARGE_INTEGER q;
    uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)GetCurrentProcessId() << 32), r;
    HMODULE m = LoadLibraryA("advapi32.dll");
    gen_fn gen = m ? (gen_fn)(void (*)(void))GetProcAddress(m, "SystemFunction036") : NULL;  /* RtlGenRandom */
    QueryPerformanceCounter(&q);
    x ^= (uint64_t)q.QuadPart * 0x9E3779B97F4A7C15ull;
    if (gen && gen(&r, sizeof r)) x = r;
    return x;
}

static int64_t plat_now_ms(void) { return (int64_t)GetTickCount64(); }

static const char *plat_signal_name(int sig) {
    switch (sig) {
    case DR_SIGINT:  return "Ctrl-C";
    case DR_SIGTERM: return "Ctrl-Break";
    case DR_SIGHUP:  return "console closed";
    case DR_SIGKILL: return "Killed";
    default:         return "signal";
    }
}

/* ---- console events: counted here, handled by the loop ----------------- */

static BOOL WINAPI on_console_event(DWORD ev) {
    int k = ev == CTRL_C_EVENT ? 0 : ev == CTRL_CLOSE_EVENT ? 2 : 1;   /* Break, logoff, shutdown: 1 */
    InterlockedIncrement(&win_got[k]);
    PostQueuedCompletionStatus(win_port, 0, PKT_WAKE, NULL);
    /* After these Windows ends distrun when the handler returns: let the
       loop stop the ranks first (Windows allows some seconds). */
    if (ev == CTRL_CLOSE_EVENT || ev == CTRL_LOGOFF_EVENT || ev == CTRL_SHUTDOWN_EVENT)
        WaitForSingleObject(win_done, INFINITE);
    return TRUE;
}

static int plat_take_signal(void) {
    for (int k = 0; k < 3; k++)
        if (win_seen[k] != InterlockedCompareExchange(&win_got[k], 0, 0)) { win_seen[k]++; return win_sigs[k]; }
    return 0;
}

/* Console events are only counted until the loop looks: nothing to hold. */
static void plat_hold_signals(int hold) { (void)hold; }

/* ---- relaying output ---------------------------------------------------- */

/* One WriteFile per line (prefix, line and newline in one buffer), so lines
   of different ranks never interleave.  Bytes pass unchanged (a rank's
   "\r\n" stays "\r\n").  What cannot be written is dropped. */
static void plat_write_line(int fd, const char *prefix, const char *p, size_t n) {
    static char line[32 + LINE_MAX_BYTES + 1];
    HANDLE h = GetStdHandle(fd == 2 ? STD_ERROR_HANDLE : STD_OUTPUT_HANDLE);
    size_t pl = strlen(prefix), total, off = 0;
    if (pl > 32) pl = 32;
    if (n > LINE_MAX_BYTES) n = LINE_MAX_BYTES;    /* the relay never passes more */
    if (!h || h == INVALID_HANDLE_VALUE) return;
    memcpy(line, prefix, pl);
    memcpy(line + pl, p, n);
    line[pl + n] = '\n';
    total = pl + n + 1;
    while (off < total) {
        DWORD w = 0;
        if (!WriteFile(h, line + off, (DWORD)(total - off), &w, NULL) || w == 0) return;
        off += w;
    }
}

/* The read in flight, if any, is cancelled; its packet still comes (into
   s->p.ov and s->p.rbuf, which stay) and is then ignored. */
static void plat_close_stream(stream *s) {
    if (s->p.pending) CancelIoEx(s->p.h, &s->p.ov);
    CloseHandle(s->p.h);
    s->p.h = NULL;
}

/* Ask for the next piece of s; its completion comes to the port (even when
   ReadFile finishes at once).  A broken pipe is the end of the stream. */
static void start_read(child *c, stream *s) {
    memset(&s->p.ov, 0, sizeof s->p.ov);
    if (ReadFile(s->p.h, s->p.rbuf, PIPE_CHUNK, NULL, &s->p.ov) || GetLastError() == ERROR_IO_PENDING) {
        s->p.pending = 1;
        return;
    }
    close_stream(c, s);
}

/* A named pipe (anonymous ones cannot do overlapped I/O): distrun's end
   reads overlapped on the port; the rank's end, *client, is inheritable. */
static int make_pipe(child *c, stream *s, HANDLE *client) {
    static LONG serial;
    char name[96];
    SECURITY_ATTRIBUTES sa = { sizeof sa, NULL, TRUE };
    snprintf(name, sizeof name, "\\\\.\\pipe\\distrun-%lu-%ld", (unsigned long)GetCurrentProcessId(),
             (long)InterlockedIncrement(&serial));
    s->p.h = CreateNamedPipeA(name, PIPE_ACCESS_INBOUND | FILE_FLAG_OVERLAPPED | FILE_FLAG_FIRST_PIPE_INSTANCE,
                              PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
                              1, 0, 64 * 1024, 0, NULL);
    if (s->p.h == INVALID_HANDLE_VALUE) { s->p.h = NULL; return -1; }
    *client = CreateFileA(name, GENERIC_WRITE | FILE_READ_ATTRIBUTES, 0, &sa, OPEN_EXISTING, 0, NULL);
    if (*client == INVALID_HANDLE_VALUE) *client = NULL;
    /* both ends exist, so this cannot wait (as libuv does it) */
    if (!*client || (!ConnectNamedPipe(s->p.h, NULL) && GetLastError() != ERROR_PIPE_CONNECTED) ||
        (!s->p.rbuf && !(s->p.rbuf = malloc(PIPE_CHUNK))) ||
        !CreateIoCompletionPort(s->p.h, win_port, PKT_READ, 0)) {
        DWORD err = GetLastError();
        if (*client) CloseHandle(*client);
        *client = NULL;
        CloseHandle(s->p.h);
        s->p.h = NULL;
        SetLastError(err ? err : ERROR_NOT_ENOUGH_MEMORY);
        return -1;
    }
    s->p.owner = c;
    return 0;
}

/* ---- starting ranks ----------------------------------------------------- */

typedef struct wbuf { wchar_t *p; size_t len, cap; int failed; } wbuf;

static void wb_put(wbuf *b, const wchar_t *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        wchar_t *np;
        while (cap < b->len + n + 1) cap *= 2;
        if (!(np = realloc(b->p, cap * sizeof *np))) { b->failed = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n * sizeof *s);
    b->len += n;
    b->p[b->len] = 0;
}

static void wb_putc(wbuf *b, wchar_t ch, size_t times) {
    while (times-- > 0) wb_put(b, &ch, 1);
}

static void wb_put_utf8(wbuf *b, const char *s) {
    int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, NULL, 0);
    wchar_t *w = n > 0 ? malloc((size_t)n * sizeof *w) : NULL;
    if (!w) { b->failed = 1; return; }
    MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n);
    wb_put(b, w, wcslen(w));
    free(w);
}

/* One argument, so that CommandLineToArgvW (and the C runtime) reads it
   back unchanged: quoted when empty or holding blanks or quotes; inside,
   backslashes are literal except before a quote, where 2n+1 of them stand
   for n and the quote, and before the closing quote, where 2n stand for n.
   The program name is read by other rules (no escapes; it cannot hold a
   quote), so it is only quoted. */
static void quote_arg(wbuf *b, const wchar_t *a, int program) {
    if (*a && !wcspbrk(a, L" \t\n\v\"")) { wb_put(b, a, wcslen(a)); return; }
    wb_putc(b, L'"', 1);
    if (program) { wb_put(b, a, wcslen(a)); wb_putc(b, L'"', 1); return; }
    for (;; a++) {
        size_t bs = 0;
        while (*a == L'\\') { a++; bs++; }
        if (!*a) { wb_putc(b, L'\\', bs * 2); break; }
        if (*a == L'"') { wb_putc(b, L'\\', bs * 2 + 1); wb_putc(b, L'"', 1); }
        else { wb_putc(b, L'\\', bs); wb_putc(b, *a, 1); }
    }
    wb_putc(b, L'"', 1);
}

static wchar_t *make_command_line(char **argv) {
    wbuf b = { 0 };
    for (int i = 0; argv[i]; i++) {
        wbuf arg = { 0 };
        wb_put_utf8(&arg, argv[i]);
        if (arg.failed) { b.failed = 1; break; }
        if (i > 0) wb_putc(&b, L' ', 1);
        quote_arg(&b, arg.p ? arg.p : L"", i == 0);
        free(arg.p);
    }
    if (b.failed) { free(b.p); return NULL; }
    return b.p;
}

/* "NAME=..." for one of name's spellings (Windows names ignore case). */
static int env_entry_is(const wchar_t *entry, const char *name) {
    size_t i = 0;
    for (; name[i]; i++) {
        wchar_t ch = entry[i];
        if (ch >= L'a' && ch <= L'z') ch = (wchar_t)(ch - L'a' + L'A');
        if (ch != (wchar_t)(unsigned char)name[i]) return 0;
    }
    return entry[i] == L'=';
}

/* distrun's environment without the rank's variables, then those that are
   set: a new block, "A=1\0B=2\0\0". */
static wchar_t *make_env_block(const rank_env *env) {
    wbuf b = { 0 };
    wchar_t *cur = GetEnvironmentStringsW();
    for (const wchar_t *p = cur; p && *p; p += wcslen(p) + 1) {
        int ours = 0;
        for (int i = 0; i < env->n && !ours; i++) ours = env_entry_is(p, env->v[i].name);
        if (!ours) wb_put(&b, p, wcslen(p) + 1);
    }
    if (cur) FreeEnvironmentStringsW(cur);
    for (int i = 0; i < env->n; i++) {
        if (!env->v[i].value) continue;
        wb_put_utf8(&b, env->v[i].name);
        wb_putc(&b, L'=', 1);
        wb_put_utf8(&b, env->v[i].value);
        wb_putc(&b, 0, 1);
    }
    wb_putc(&b, 0, 1);
    if (b.failed) { free(b.p); return NULL; }
    return b.p;
}

/* An inheritable copy of one of distrun's standard handles, or NULL. */
static HANDLE dup_std(DWORD which) {
    HANDLE h = GetStdHandle(which), d = NULL, self = GetCurrentProcess();
    if (!h || h == INVALID_HANDLE_VALUE || !DuplicateHandle(self, h, self, &d, 0, TRUE, DUPLICATE_SAME_ACCESS))
        return NULL;
    return d;
}

static HANDLE open_nul(void) {
    SECURITY_ATTRIBUTES sa = { sizeof sa, NULL, TRUE };
    HANDLE h = CreateFileW(L"NUL", GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE, &sa, OPEN_EXISTING, 0, NULL);
    return h == INVALID_HANDLE_VALUE ? NULL : h;
}

static VOID CALLBACK on_process_end(PVOID ctx, BOOLEAN timed_out) {
    (void)timed_out;
    PostQueuedCompletionStatus(win_port, 0, PKT_EXIT, (LPOVERLAPPED)ctx);
}

/* The rank gets exactly its three standard handles: the handle list keeps
   anything else distrun holds from it. */
static BOOL create_process(wchar_t *cmd, wchar_t *envblock, HANDLE std[3], PROCESS_INFORMATION *pi) {
    STARTUPINFOEXW si;
    HANDLE list[4];
    SIZE_T size = 0;
    DWORD flags = CREATE_UNICODE_ENVIRONMENT | CREATE_NEW_PROCESS_GROUP | CREATE_SUSPENDED, err;
    LPPROC_THREAD_ATTRIBUTE_LIST attrs = NULL;
    int nlist = 0;
    BOOL ok;
    for (int k = 0; k < 3; k++) {
        int dup = 0;
        for (int i = 0; i < nlist; i++) dup |= list[i] == std[k];
        if (std[k] && !dup) list[nlist++] = std[k];
    }
    memset(&si, 0, sizeof si);
    si.StartupInfo.cb = sizeof si.StartupInfo;
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = std[0];
    si.StartupInfo.hStdOutput = std[1];
    si.StartupInfo.hStdError = std[2];
    if (nlist > 0) {
        InitializeProcThreadAttributeList(NULL, 1, 0, &size);
        attrs = size ? malloc(size) : NULL;
        if (attrs && InitializeProcThreadAttributeList(attrs, 1, 0, &size)) {
            if (UpdateProcThreadAttribute(attrs, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, list,
                                          (SIZE_T)nlist * sizeof list[0], NULL, NULL)) {
                si.StartupInfo.cb = sizeof si;
                si.lpAttributeList = attrs;
                flags |= EXTENDED_STARTUPINFO_PRESENT;
            } else {
                DeleteProcThreadAttributeList(attrs);
                free(attrs);
                attrs = NULL;
            }
        } else {
            free(attrs);
            attrs = NULL;
        }
    }
    ok = CreateProcessW(NULL, cmd, NULL, NULL, nlist > 0, flags, envblock, NULL, &si.StartupInfo, pi);
    if (!ok && attrs && GetLastError() == ERROR_INVALID_PARAMETER) {
        /* Windows 7 cannot list console handles: inherit without the list */
        si.StartupInfo.cb = sizeof si.StartupInfo;
        ok = CreateProcessW(NULL, cmd, NULL, NULL, TRUE, flags & ~(DWORD)EXTENDED_STARTUPINFO_PRESENT,
                            envblock, NULL, &si.StartupInfo, pi);
    }
    err = GetLastError();
    if (attrs) { DeleteProcThreadAttributeList(attrs); free(attrs); }
    SetLastError(err);
    return ok;
}

static int plat_start_rank(job *j, child *c, const rank_env *env) {
    HANDLE std[3] = { NULL, NULL, NULL };
    PROCESS_INFORMATION pi;
    wchar_t *cmd = NULL, *envblock = NULL;
    int rc = EXIT_LAUNCH;
    BOOL made = FALSE;
    DWORD err = 0;
    if (j->opt.prefix) {
        if (make_pipe(c, &c->out, &std[1]) != 0 || make_pipe(c, &c->err, &std[2]) != 0) {
            fprintf(stderr, "distrun: cannot create pipes for rank %d: %s\n", c->rank, win_error(GetLastError()));
            goto done;
        }
    } else {
        std[1] = dup_std(STD_OUTPUT_HANDLE);
        std[2] = dup_std(STD_ERROR_HANDLE);
    }
    /* several ranks reading one console would fight over it: a console
       stdin becomes NUL, a pipe or file is passed on (as on POSIX) */
    std[0] = j->stdin_tty ? open_nul() : dup_std(STD_INPUT_HANDLE);
    cmd = make_command_line(j->opt.argv);
    envblock = make_env_block(env);
    if (!cmd || !envblock) {
        fprintf(stderr, "distrun: out of memory starting rank %d\n", c->rank);
        goto done;
    }
    made = create_process(cmd, envblock, std, &pi);
    err = GetLastError();
    if (!made) {
        if (err == ERROR_NOT_ENOUGH_MEMORY || err == ERROR_OUTOFMEMORY || err == ERROR_NO_SYSTEM_RESOURCES ||
            err == ERROR_COMMITMENT_LIMIT) {
            fprintf(stderr, "distrun: cannot start rank %d: %s\n", c->rank, win_error(err));
        } else {
            fprintf(stderr, "distrun: cannot execute '%s': %s\n", j->opt.argv[0], win_error(err));
            rc = EXIT_EXEC;
        }
        goto done;
    }
    /* in the job before it runs, so nothing it starts escapes the job */
    if (win_job && !AssignProcessToJobObject(win_job, pi.hProcess)) {
        static int warned;
        if (!warned++)
            fprintf(stderr, "distrun: cannot put rank %d in the job object (%s); ranks may outlive distrun\n",
                    c->rank, win_error(GetLastError()));
    }
    if (!RegisterWaitForSingleObject(&c->p.wait, pi.hProcess, on_process_end, c, INFINITE,
                                     WT_EXECUTEONLYONCE | WT_EXECUTEINWAITTHREAD)) {
        fprintf(stderr, "distrun: cannot watch rank %d: %s\n", c->rank, win_error(GetLastError()));
        TerminateProcess(pi.hProcess, EXIT_LAUNCH);
        CloseHandle(pi.hThread);
        CloseHandle(pi.hProcess);
        goto done;
    }
    ResumeThread(pi.hThread);
    CloseHandle(pi.hThread);
    c->pid = (long)pi.dwProcessId;
    c->p.process = pi.hProcess;
    c->p.exited = 0;
    rc = 0;
    if (j->opt.prefix) {
        c->out.open = c->err.open = 1;
        start_read(c, &c->out);
        start_read(c, &c->err);
    }
done:
    for (int k = 0; k < 3; k++) if (std[k]) CloseHandle(std[k]);     /* the rank has its copies */
    if (rc != 0) {
        if (c->out.p.h) { CloseHandle(c->out.p.h); c->out.p.h = NULL; }
        if (c->err.p.h) { CloseHandle(c->err.p.h); c->err.p.h = NULL; }
    }
    free(cmd);
    free(envblock);
    return rc;
}

/* ---- stopping and waiting ----------------------------------------------- */

/* Ctrl-Break to the rank's process group (it and what it started); without
   a console shared with the rank that cannot be sent, and it is terminated
   now.  SIGKILL: TerminateProcess (the job object takes the rest when
   distrun ends). */
static int plat_signal_rank(child *c, int sig) {
    if (!c->p.process || c->p.exited) return 0;
    if (sig != DR_SIGKILL && GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, (DWORD)c->pid)) return 1;
    TerminateProcess(c->p.process, (UINT)(128 + sig));
    return 1;
}

/* Its process has ended and its pipes are drained (or given up on). */
static void finish_rank(job *j, child *c) {
    HANDLE h = c->p.process;
    j->p.draining--;
    c->p.exited = 0;
    c->p.process = NULL;             /* (before rank_ended: a restart puts its new process here) */
    rank_ended(j, c, (int)c->p.code, 0);
    CloseHandle(h);
}

/* What it wrote before it ended is in its pipes; it is finished when they
   end, or when no more comes for DRAIN_IDLE_MS (something it started keeps
   them open), or after 2 * DRAIN_READS more reads. */
static void process_ended(job *j, child *c) {
    if (!c->p.process || c->p.exited) return;
    if (c->p.wait) { UnregisterWaitEx(c->p.wait, INVALID_HANDLE_VALUE); c->p.wait = NULL; }
    if (!GetExitCodeProcess(c->p.process, &c->p.code)) c->p.code = EXIT_LAUNCH;
    c->p.exited = 1;
    c->p.drain_until = plat_now_ms() + DRAIN_IDLE_MS;
    c->p.drain_reads = 0;
    j->p.draining++;
    if (!c->out.open && !c->err.open) finish_rank(j, c);
}

static void read_done(job *j, stream *s, BOOL ok, DWORD n) {
    child *c = s->p.owner;
    s->p.pending = 0;
    if (!s->open) return;                   /* closed meanwhile: its read was cancelled */
    if (!ok) {
        close_stream(c, s);                 /* the pipe's end: the rank and all it started closed it */
    } else {
        if (n > 0) feed(c, s, s->p.rbuf, n);
        if (c->p.exited) {
            c->p.drain_until = plat_now_ms() + DRAIN_IDLE_MS;
            if (++c->p.drain_reads >= 2 * DRAIN_READS) { finish_rank(j, c); return; }
        }
        start_read(c, s);
    }
    if (c->p.exited && !c->out.open && !c->err.open) finish_rank(j, c);
}

static void plat_wait(job *j, int timeout_ms) {
    int64_t now = plat_now_ms();
    DWORD wait = (DWORD)timeout_ms;
    for (int i = 0; i < j->nkids && j->p.draining > 0; i++) {
        const child *c = &j->kids[i];
        int64_t left = c->p.drain_until - now;
        if (c->p.exited && left < (int64_t)wait) wait = left > 0 ? (DWORD)left : 0;
    }
    for (int got = 0; got < 256; got++) {
        DWORD n = 0;
        ULONG_PTR key = 0;
        OVERLAPPED *ov = NULL;
        BOOL ok = GetQueuedCompletionStatus(win_port, &n, &key, &ov, got ? 0 : wait);
        if (!ov) {
            if (!ok && GetLastError() != WAIT_TIMEOUT) {
                /* the port failed (it cannot, really): stop the job, reap by polling */
                fprintf(stderr, "distrun: GetQueuedCompletionStatus: %s\n", win_error(GetLastError()));
                if (!j->stopping) begin_stop(j, EXIT_LAUNCH, DR_SIGTERM);
                kill_all(j);
                for (int i = 0; i < j->nkids; i++)
                    if (j->kids[i].p.process && WaitForSingleObject(j->kids[i].p.process, 0) == WAIT_OBJECT_0)
                        process_ended(j, &j->kids[i]);
                Sleep(10);
            }
            if (!ok) break;
            continue;                           /* PKT_WAKE: a console event */
        }
        if (key == PKT_EXIT) process_ended(j, (child *)(void *)ov);
        else read_done(j, (stream *)(void *)((char *)ov - offsetof(stream, p.ov)), ok, n);
    }
    now = plat_now_ms();
    for (int i = 0; i < j->nkids && j->p.draining > 0; i++)
        if (j->kids[i].p.exited && now >= j->kids[i].p.drain_until) finish_rank(j, &j->kids[i]);
}

/* ---- setting up --------------------------------------------------------- */

static int plat_init(job *j) {
    DWORD mode;
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION li;
    j->stdin_tty = GetConsoleMode(GetStdHandle(STD_INPUT_HANDLE), &mode) != 0;
    win_port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    win_done = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!win_port || !win_done) {
        fprintf(stderr, "distrun: cannot set up: %s\n", win_error(GetLastError()));
        return -1;
    }
    /* every process of the job dies with the job's last handle: distrun's */
    memset(&li, 0, sizeof li);
    li.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    win_job = CreateJobObjectW(NULL, NULL);
    if (!win_job || !SetInformationJobObject(win_job, JobObjectExtendedLimitInformation, &li, sizeof li)) {
        fprintf(stderr, "distrun: cannot create a job object (%s); ranks may outlive distrun\n",
                win_error(GetLastError()));
        if (win_job) CloseHandle(win_job);
        win_job = NULL;
    }
    /* Left as it came: started in a new process group (by an outer distrun,
       say), the console's Ctrl-C is ignored, as a background process group
       on POSIX does not get the terminal's SIGINT; the outer one forwards
       Ctrl-Break. */
    if (!SetConsoleCtrlHandler(on_console_event, TRUE)) {
        fprintf(stderr, "distrun: cannot catch console events: %s\n", win_error(GetLastError()));
        return -1;
    }
    return 0;
}

/* Reads cancelled when their pipes were closed still complete into the
   job's memory: wait for them (briefly), else keep the memory. */
static int plat_finish(job *j) {
    int64_t until = plat_now_ms() + 1000;
    int pending;
    SetEvent(win_done);
    for (;;) {
        DWORD n;
        ULONG_PTR key = 0;
        OVERLAPPED *ov = NULL;
        pending = 0;
        for (int i = 0; i < j->nkids; i++) pending += j->kids[i].out.p.pending + j->kids[i].err.p.pending;
        if (!pending || plat_now_ms() >= until) break;
        if ((GetQueuedCompletionStatus(win_port, &n, &key, &ov, 50) || ov) && key == PKT_READ)
            ((stream *)(void *)((char *)ov - offsetof(stream, p.ov)))->p.pending = 0;
    }
    if (pending) return 1;
    for (int i = 0; i < j->nkids; i++) { free(j->kids[i].out.p.rbuf); free(j->kids[i].err.p.rbuf); }
    return 0;
}

#endif /* _WIN32 */
