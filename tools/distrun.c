/* distrun - start the ranks of a dist job (what torchrun is to PyTorch).

   usage: distrun [options] PROG [ARGS...]        (distrun --help lists them)

   distrun starts --nproc-per-node (-n, -np) copies of PROG on this node.
   Each gets the torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK,
   LOCAL_WORLD_SIZE, GROUP_RANK (the node rank), MASTER_ADDR and
   MASTER_PORT, DIST_MAX_RESTARTS (--max-restarts, 0 by default: a
   program that needs restarts can say so at its start), and
   OMP_NUM_THREADS=1 when several ranks share the node and
   the user did not set it (as torchrun does; a notice says so).  Every line
   a rank writes is relayed with a "[RANK] " prefix (stdout to stdout, stderr
   to stderr), or Open MPI's "[1,RANK]<stdout>:" with --tag-output; with
   --log-dir each stream goes to a file of its own instead, byte for byte,
   and --tee copies it to the terminal as well.  SIGINT, SIGTERM and SIGHUP
   are forwarded to every rank; a second SIGINT kills them.  When a rank
   fails, the others get SIGTERM, then SIGKILL after --kill-grace seconds,
   and distrun exits with the failed rank's status.

   The summary names the root cause: the rank that failed first in time,
   not the first whose end distrun happened to see.  Each end is stamped
   when it happens (POSIX: in the SIGCHLD handler, which fires for the
   first of several children that end together; Windows: the process's
   exit time), and a failure reported later but stamped earlier takes the
   blame.  A rank that distrun itself signalled and that ended after that
   was stopped, never the cause.  Each node's distrun knows its own ranks
   only: on several nodes, each names the first failure among its own.

   distrun on node 0 hosts the job's store itself (dist.h's
   dist_store_host_start), on MASTER_ADDR and --master-port (or a free port
   on one node), for the job's whole life, and tells the ranks so
   (DIST_STORE_HOSTED=1): rank 0 joins it as the others do.  So the store
   outlives any rank, rank 0 included, and the survivors of a death can
   still agree and shrink (dist_agree, dist_shrink); and no other process
   can take the port between choosing it and using it.

   With --trace DIR (or DIST_TRACE=DIR in its environment) each rank gets
   DIST_TRACE=DIR, and dist.h writes what the rank does to
   DIR/rank<RANK>.trace.json (Chrome's trace event format, on the job's
   clock).  When the job ends, failed or not, distrun on node 0 merges those
   files into DIR/trace.json, for Perfetto (ui.perfetto.dev) or
   chrome://tracing, and says on one line how many ranks it merged and which
   files were missing or did not read, and why.  tools/dist_timeline.c
   draws a trace as a page; it reads traces with this file's JSON reader,
   and given DIR it merges the rank files itself, with this file's merge
   (the sections "trace files"): for jobs started without distrun, such as
   dist_spawn's.

   Each rank runs in its own process group, so a signal reaches everything a
   rank started and the terminal's Ctrl-C reaches distrun alone (which
   forwards it once).  Hence ranks get /dev/null as stdin when distrun's
   stdin is a terminal: a background group reading it would be stopped.
   What a rank leaves running dies with it: when a rank ends, distrun kills
   what is left of its group; on Linux distrun is also a child subreaper,
   so what left the group (setsid) is adopted by distrun and killed when the
   job ends, and each rank gets PR_SET_PDEATHSIG (distrun killed outright
   takes its ranks along; their own children it cannot reach then).

   Layout.  The launcher (options, environment, output relay, stopping, exit
   status) is written once.  What an operating system does differently is in
   one section at the end of the file, "platform", which implements the
   plat_* functions declared before the launcher, once for POSIX (Linux,
   macOS) and once for Windows: start a rank with its environment, relay its
   output, wait for something to happen, stop or kill a rank, catch Ctrl-C,
   open the store's socket.  The few file functions that the trace merge
   needs (open, remove, rename, list a directory) come with it instead, in
   "trace files: the merge", for dist_timeline has the merge too.

   Windows (x64, Vista or later) does the same with these differences:
   - Each rank is a CreateProcessW with a new environment block (distrun's
     environment plus the variables above), its own process group and
     exactly the handles it needs, in a job object of its own with
     KILL_ON_JOB_CLOSE: what the rank starts is in its job too, and is
     terminated when the rank ends, and every rank's job when distrun ends,
     even when it is killed.
   - Ctrl-C, Ctrl-Break and closing the console count as SIGINT, SIGTERM and
     SIGHUP (exit 130, 143, 129).  They are forwarded as CTRL_BREAK_EVENT to
     each rank's process group (the only console event that can be aimed at
     one group; a C program's default handler exits); a rank that shares no
     console with distrun (distrun has none, or Wine) cannot be sent one and
     is terminated at once instead.  "SIGKILL" is TerminateJobObject: the
     rank and all it started.
   - Output comes through named pipes read with overlapped I/O on one
     completion port, so relaying stays single-threaded as on POSIX.
   - A rank's exit code is passed on as it is (Windows has 32-bit codes and
     no "killed by signal"); 127 when PROG cannot be started.
   - Arguments are re-quoted by the CommandLineToArgvW rules, and taken from
     the wide command line, so they reach PROG unchanged (as UTF-8 inside).

   Plain C11 (+ POSIX, or + Win32), with dist.h (for the store):
      cc -std=c11 -O2 -Wall -Wextra -Wpedantic -I. -o build/distrun tools/distrun.c -pthread -lm
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
#ifndef DISTRUN_TRACE_READER_ONLY
/* The store is dist.h's (dist_store_host_start). */
#define DIST_IMPLEMENTATION
#include "dist.h"
#endif

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
#  include <dirent.h>                       /* a trace directory's files; /proc */
#  include <fcntl.h>
#  include <netdb.h>
#  include <poll.h>
#  include <signal.h>
#  include <unistd.h>
#  include <netinet/in.h>
#  include <sys/resource.h>
#  include <sys/socket.h>
#  include <sys/stat.h>
#  include <sys/uio.h>
#  include <sys/wait.h>
#  ifdef __linux__
#    include <sys/prctl.h>
#    include <sys/syscall.h>               /* close_range */
#  endif
#endif

/* ---- trace files: a strict JSON reader ------------------------------------
   With DIST_TRACE=DIR each rank writes its operations to
   DIR/rank<RANK>.trace.json, in Chrome's trace event format, and distrun
   merges them when the job ends (see "the merge" below).  Those files are
   read here: a pull reader over a file read whole, which builds no tree
   (the merge needs no more of an event than where it begins and ends, and
   its ts: a file of tens of MB holds hundreds of thousands of events) and
   whose errors name a line and column.  It takes strict JSON (RFC 8259:
   UTF-8, no trailing commas, no comments, no NaN): a file that is not is
   one that Perfetto may refuse too, or a rank's file cut short.

   tools/dist_timeline.c shares this reader and the merge: it defines
   DISTRUN_TRACE_READER_ONLY and includes this file, which then gives the
   sections "trace files" alone (the reader, events, the merge and the file
   functions of the platform that the merge needs), not the launcher.  (So
   distrun.c stays one file to copy beside dist.h.)  The few functions that
   only one of the two uses are marked TRACE_MAYBE_UNUSED. */

/* Each level of arrays and objects is a call deeper in the reader: a
   bound on the stack.  A trace has four. */
#define JSON_MAX_DEPTH 256

#if defined(__GNUC__) || defined(__clang__)
#  define TRACE_MAYBE_UNUSED __attribute__((unused))   /* (one of the two users needs it) */
#else
#  define TRACE_MAYBE_UNUSED
#endif

typedef struct json_reader {
    const char *text, *end;     /* the whole text, with a NUL at end */
    const char *p;              /* the next byte to read */
    int depth;                  /* arrays and objects open */
    char error[300];            /* the first error: "line L, column C: what" */
} json_reader;

/* A string as the text has it, between its quotes (escapes not decoded). */
typedef struct json_string { const char *raw; size_t len; int escaped; } json_string;

/* A loop over an object's members or an array's elements. */
typedef struct json_iter { size_t n; char close; } json_iter;

static void json_init(json_reader *r, const char *text, size_t len) {
    memset(r, 0, sizeof *r);
    r->text = r->p = text;
    r->end = text + len;
}

static int json_is_digit(int c) { return c >= '0' && c <= '9'; }

/* Line and column (from 1; a column counts bytes) of at. */
static void json_position(const json_reader *r, const char *at, unsigned long long *line, unsigned long long *col) {
    const char *bol = r->text;
    *line = 1;
    for (const char *q = r->text; q < at; q++)
        if (*q == '\n') { (*line)++; bol = q + 1; }
    *col = (unsigned long long)(at - bol) + 1;
}

/* What is at `at`, for an error: "'x'", "byte 0xNN" or "the end of the file". */
static const char *json_found(const json_reader *r, const char *at, char *buf, size_t n) {
    unsigned char c = at < r->end ? (unsigned char)*at : 0;
    if (at >= r->end) return "the end of the file";
    if (c >= 0x20 && c < 0x7F) snprintf(buf, n, "'%c'", c);
    else snprintf(buf, n, "byte 0x%02X", c);
    return buf;
}

/* Records the first error (later ones follow from it); returns -1. */
static int json_fail(json_reader *r, const char *at, const char *fmt, ...) {
    unsigned long long line, col;
    char what[200];
    va_list ap;
    if (r->error[0]) return -1;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    json_position(r, at, &line, &col);
    snprintf(r->error, sizeof r->error, "line %llu, column %llu: %s%s", line, col, what,
             at >= r->end ? " (the file ends there: was it cut short?)" : "");
    return -1;
}

/* The next byte that is not white space (not passed), or -1 at the end. */
static int json_peek(json_reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
    return r->p < r->end ? (unsigned char)*r->p : -1;
}

static int json_expected(json_reader *r, const char *what) {
    char b[16];
    return json_fail(r, r->p, "expected %s, found %s", what, json_found(r, r->p, b, sizeof b));
}

static int json_hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        int c = (unsigned char)p[k], d = json_is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

/* An escape, at its backslash: passed, or an error. */
static int json_pass_escape(json_reader *r) {
    const char *at = r->p;
    unsigned hi, lo;
    if (r->p + 1 < r->end && r->p[1] && strchr("\"\\/bfnrt", r->p[1])) { r->p += 2; return 0; }
    if (r->p + 1 >= r->end || r->p[1] != 'u') return json_fail(r, at, "not an escape JSON has");
    if (r->end - r->p < 6 || json_hex4(r->p + 2, &hi) != 0) return json_fail(r, at, "\\u must have four hex digits");
    r->p += 6;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return json_fail(r, at, "\\u%04X is the second half of a surrogate pair, alone", hi);
    if (hi < 0xD800 || hi > 0xDBFF) return 0;
    if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' || json_hex4(r->p + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
        return json_fail(r, at, "\\u%04X is the first half of a surrogate pair, without its second", hi);
    r->p += 6;
    return 0;
}

/* A UTF-8 sequence, at its first byte (not ASCII): passed, or an error
   (not UTF-8, overlong, a surrogate, past U+10FFFF). */
static int json_pass_utf8(json_reader *r) {
    const unsigned char *s = (const unsigned char *)r->p;
    unsigned c = s[0], cp, min, need;
    if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; min = 0x10000; }
    else return json_fail(r, r->p, "byte 0x%02X is not UTF-8", c);
    for (unsigned k = 1; k <= need; k++) {
        if (r->p + k >= r->end || (s[k] & 0xC0) != 0x80) return json_fail(r, r->p, "byte 0x%02X begins no UTF-8 sequence that follows", c);
        cp = cp << 6 | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return json_fail(r, r->p, "not UTF-8 (an overlong form, a surrogate or past U+10FFFF)");
    r->p += need + 1;
    return 0;
}

static int json_read_string(json_reader *r, json_string *s) {
    const char *open;
    if (json_peek(r) != '"') return json_expected(r, "a string");
    open = r->p++;
    s->escaped = 0;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') {
            s->raw = open + 1;
            s->len = (size_t)(r->p - s->raw);
            r->p++;
            return 0;
        }
        if (c < 0x20) return json_fail(r, r->p, "a control character (0x%02X) in a string", c);
        if (c == '\\') { s->escaped = 1; if (json_pass_escape(r) != 0) return -1; }
        else if (c >= 0x80) { if (json_pass_utf8(r) != 0) return -1; }
        else r->p++;
    }
    return json_fail(r, open, "the file ends inside the string that begins here (was it cut short?)");
}

/* The next character of a string that the reader passed, at *src, as
   UTF-8 into out (1 to 4 bytes, their count returned). */
static size_t json_decode_char(const char **src, char out[4]) {
    const char *p = *src;
    unsigned cp, lo;
    if (*p != '\\') { out[0] = *p; *src = p + 1; return 1; }
    switch (p[1]) {
    case 'b': out[0] = '\b'; break;
    case 'f': out[0] = '\f'; break;
    case 'n': out[0] = '\n'; break;
    case 'r': out[0] = '\r'; break;
    case 't': out[0] = '\t'; break;
    case 'u': break;
    default:  out[0] = p[1]; break;           /* " \ / */
    }
    if (p[1] != 'u') { *src = p + 2; return 1; }
    json_hex4(p + 2, &cp);
    *src = p + 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {        /* the reader saw its second half */
        json_hex4(p + 8, &lo);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        *src = p + 12;
    }
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* s decoded into out, which has room for s->len + 1 bytes (decoding never
   lengthens a string); a NUL after it; its length. */
static TRACE_MAYBE_UNUSED size_t json_decode(const json_string *s, char *out) {
    const char *p = s->raw, *end = s->raw + s->len;
    size_t n = 0;
    while (p < end) n += json_decode_char(&p, out + n);
    out[n] = '\0';
    return n;
}

/* s is the string lit (decoded). */
static int json_string_is(const json_string *s, const char *lit) {
    const char *p = s->raw, *end = s->raw + s->len;
    size_t n = strlen(lit), at = 0;
    if (!s->raw) return 0;
    if (!s->escaped) return s->len == n && memcmp(s->raw, lit, n) == 0;
    while (p < end) {
        char ch[4];
        size_t k = json_decode_char(&p, ch);
        if (at + k > n || memcmp(lit + at, ch, k) != 0) return 0;
        at += k;
    }
    return at == n;
}

static int json_read_number(json_reader *r, double *v) {
    const char *q, *s;
    int c = json_peek(r);
    if (c != '-' && !json_is_digit(c)) return json_expected(r, "a number");
    q = s = r->p;
    /* (the text ends in a NUL, which no test below passes) */
    if (*q == '-') q++;
    if (*q == '0') q++;
    else if (json_is_digit(*q)) while (json_is_digit(*q)) q++;
    else return json_fail(r, q, "a digit must follow '-'");
    if (*q == '.') {
        if (!json_is_digit(*++q)) return json_fail(r, q, "a digit must follow the decimal point");
        while (json_is_digit(*q)) q++;
    }
    if (*q == 'e' || *q == 'E') {
        if (*++q == '+' || *q == '-') q++;
        if (!json_is_digit(*q)) return json_fail(r, q, "a digit must follow the exponent's 'e'");
        while (json_is_digit(*q)) q++;
    }
    *v = strtod(s, NULL);      /* (what it reads is the JSON number: the grammar is checked) */
    if (!isfinite(*v)) return json_fail(r, s, "the number is too large for a double");
    r->p = q;
    return 0;
}

/* An object's '{' or an array's '[', passed; then json_next. */
static int json_open(json_reader *r, json_iter *it, char open) {
    if (json_peek(r) != open) return json_expected(r, open == '{' ? "an object ('{')" : "an array ('[')");
    if (r->depth >= JSON_MAX_DEPTH) return json_fail(r, r->p, "arrays and objects nested deeper than %d", JSON_MAX_DEPTH);
    r->depth++;
    r->p++;
    it->n = 0;
    it->close = open == '{' ? '}' : ']';
    return 0;
}

/* 1 when an element of the array follows (to be read next), or a member of
   the object (its name read into *key, the ':' passed: its value is next);
   0 at the end (passed); -1 on an error. */
static int json_next(json_reader *r, json_iter *it, json_string *key) {
    int c = json_peek(r);
    if (c == it->close) { r->p++; r->depth--; return 0; }
    if (it->n > 0) {
        if (c != ',') return json_expected(r, it->close == '}' ? "',' or '}' after an object's member" : "',' or ']' after an array's element");
        r->p++;
    }
    it->n++;
    if (it->close == ']') return 1;
    if (json_peek(r) != '"') return json_expected(r, "a member's name (a string)");
    if (json_read_string(r, key) != 0) return -1;
    if (json_peek(r) != ':') return json_expected(r, "':' after a member's name");
    r->p++;
    return 1;
}

static int json_pass_literal(json_reader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return json_expected(r, "a value");
    r->p += n;
    return 0;
}

/* Any value, passed (and checked). */
static int json_skip(json_reader *r) {
    int c = json_peek(r), more;
    json_iter it;
    json_string s;
    double v;
    switch (c) {
    case '{': case '[':
        if (json_open(r, &it, (char)c) != 0) return -1;
        while ((more = json_next(r, &it, &s)) > 0)
            if (json_skip(r) != 0) return -1;
        return more;
    case '"': return json_read_string(r, &s);
    case 't': return json_pass_literal(r, "true");
    case 'f': return json_pass_literal(r, "false");
    case 'n': return json_pass_literal(r, "null");
    default:
        if (c == '-' || json_is_digit(c)) return json_read_number(r, &v);
        return json_expected(r, "a value");
    }
}

/* All of f, with a NUL after it: 0, or -1 with errno set. */
static int json_read_file(FILE *f, char **text, size_t *len) {
    size_t cap = 64 * 1024, n = 0, got;
    char *b = malloc(cap), *nb;
    if (!b) { errno = ENOMEM; return -1; }
    for (;;) {
        if (cap - n < 2) {
            if (cap > ((size_t)-1) / 2 || !(nb = realloc(b, cap * 2))) { free(b); errno = ENOMEM; return -1; }
            b = nb;
            cap *= 2;
        }
        got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got > 0) continue;
        if (ferror(f)) { int e = errno ? errno : EIO; free(b); errno = e; return -1; }
        break;
    }
    b[n] = '\0';
    *text = b;
    *len = n;
    return 0;
}

/* ---- trace files: events ---------------------------------------------------
   Chrome's trace event format: {"traceEvents":[EVENT,...], ...}, each event
   an object with "ph" (its phase: "X" complete, "i" instant, "M" metadata,
   ...), a numeric "pid", a numeric "ts" in µs (but metadata) and, for "X",
   a numeric "dur".  What else an event has the reader checks as JSON and
   leaves to its user. */

typedef struct trace_event {
    const char *start, *end;            /* its text, from '{' to past '}' */
    size_t index;                       /* its place in traceEvents, from 0 */
    json_string ph, name, cat, scope;   /* (scope: "s"); raw NULL when absent */
    double pid, tid, ts, dur;
    int has_tid, has_ts, has_dur;
    const char *args;                   /* where its "args" value begins, or NULL */
} trace_event;

/* Called with each event; 0 to go on, else -1 (with r's error set). */
typedef int (*trace_event_fn)(json_reader *r, const trace_event *ev, void *user);

static int trace_is_meta(const trace_event *ev) { return json_string_is(&ev->ph, "M"); }

/* The value of member `key` of event ev, a number, into *v. */
static int trace_field_number(json_reader *r, const trace_event *ev, const json_string *key, double *v, int *has) {
    int c = json_peek(r);
    if (c != '-' && !json_is_digit(c))
        return json_fail(r, r->p, "traceEvents[%llu]: \"%.*s\" is not a number", (unsigned long long)ev->index, (int)key->len, key->raw);
    *has = 1;
    return json_read_number(r, v);
}

static int trace_field_string(json_reader *r, const trace_event *ev, const json_string *key, json_string *s) {
    if (json_peek(r) != '"')
        return json_fail(r, r->p, "traceEvents[%llu]: \"%.*s\" is not a string", (unsigned long long)ev->index, (int)key->len, key->raw);
    return json_read_string(r, s);
}

static int trace_read_event(json_reader *r, trace_event *ev) {
    json_iter it;
    json_string key;
    int more, has_pid = 0, rc;
    size_t index = ev->index;
    memset(ev, 0, sizeof *ev);
    ev->index = index;
    if (json_peek(r) != '{') return json_fail(r, r->p, "traceEvents[%llu] is not an object", (unsigned long long)index);
    ev->start = r->p;
    if (json_open(r, &it, '{') != 0) return -1;
    while ((more = json_next(r, &it, &key)) > 0) {
        if (json_string_is(&key, "ph")) rc = trace_field_string(r, ev, &key, &ev->ph);
        else if (json_string_is(&key, "name")) rc = trace_field_string(r, ev, &key, &ev->name);
        else if (json_string_is(&key, "cat")) rc = trace_field_string(r, ev, &key, &ev->cat);
        else if (json_string_is(&key, "s")) rc = trace_field_string(r, ev, &key, &ev->scope);
        else if (json_string_is(&key, "pid")) rc = trace_field_number(r, ev, &key, &ev->pid, &has_pid);
        else if (json_string_is(&key, "tid")) rc = trace_field_number(r, ev, &key, &ev->tid, &ev->has_tid);
        else if (json_string_is(&key, "ts")) rc = trace_field_number(r, ev, &key, &ev->ts, &ev->has_ts);
        else if (json_string_is(&key, "dur")) rc = trace_field_number(r, ev, &key, &ev->dur, &ev->has_dur);
        else {
            json_peek(r);
            if (json_string_is(&key, "args")) ev->args = r->p;
            rc = json_skip(r);
        }
        if (rc != 0) return -1;
    }
    if (more < 0) return -1;
    ev->end = r->p;
    if (!ev->ph.raw) return json_fail(r, ev->start, "traceEvents[%llu] has no \"ph\"", (unsigned long long)index);
    if (!has_pid) return json_fail(r, ev->start, "traceEvents[%llu] has no \"pid\"", (unsigned long long)index);
    if (!ev->has_ts && !trace_is_meta(ev)) return json_fail(r, ev->start, "traceEvents[%llu] has no \"ts\" (only metadata, \"ph\":\"M\", may lack one)", (unsigned long long)index);
    if (!ev->has_dur && json_string_is(&ev->ph, "X")) return json_fail(r, ev->start, "traceEvents[%llu] is a complete event (\"ph\":\"X\") without \"dur\"", (unsigned long long)index);
    return 0;
}

static int trace_read_events(json_reader *r, trace_event_fn on_event, void *user) {
    json_iter it;
    trace_event ev;
    int more;
    if (json_open(r, &it, '[') != 0) return -1;
    ev.index = 0;
    while ((more = json_next(r, &it, NULL)) > 0) {
        if (trace_read_event(r, &ev) != 0 || on_event(r, &ev, user) != 0) return -1;
        ev.index++;
    }
    return more;
}

/* A trace's text, read: each event to on_event, in order; *other_data gets
   where "otherData"'s value begins (NULL: none).  0, or -1 with r's error. */
static int trace_walk(json_reader *r, trace_event_fn on_event, void *user, const char **other_data) {
    json_iter it;
    json_string key;
    int more, seen = 0;
    *other_data = NULL;
    if (json_peek(r) != '{') return json_expected(r, "a trace: an object with \"traceEvents\"");
    if (json_open(r, &it, '{') != 0) return -1;
    while ((more = json_next(r, &it, &key)) > 0) {
        int rc;
        if (json_string_is(&key, "traceEvents")) {
            if (seen++) return json_fail(r, key.raw - 1, "a second \"traceEvents\"");
            rc = trace_read_events(r, on_event, user);
        } else {
            json_peek(r);
            if (json_string_is(&key, "otherData")) *other_data = r->p;
            rc = json_skip(r);
        }
        if (rc != 0) return -1;
    }
    if (more < 0) return -1;
    if (!seen) return json_fail(r, r->p - 1, "the trace has no \"traceEvents\"");
    if (json_peek(r) != -1) return json_fail(r, r->p, "more after the trace's end");
    return 0;
}

/* Member `key` of the object whose value begins at `at`, when it is a
   number: 1 (in *v), 0 when it has none (or not a number), -1 on an error. */
static int trace_object_number(json_reader *r, const char *at, const char *key, double *v) {
    json_iter it;
    json_string k;
    int more, found = 0;
    r->p = at;
    if (json_open(r, &it, '{') != 0) return -1;
    while ((more = json_next(r, &it, &k)) > 0) {
        int c = json_peek(r);
        if (json_string_is(&k, key) && (c == '-' || json_is_digit(c))) {
            if (json_read_number(r, v) != 0) return -1;
            found = 1;
        } else if (json_skip(r) != 0) {
            return -1;
        }
    }
    return more < 0 ? -1 : found;
}

/* ---- trace files: the merge --------------------------------------------------
   When a job traced with DIST_TRACE=DIR ends, however it ends, the files
   of its ranks 0..WORLD-1 (and of ranks that joined past it, when they left
   one) are merged into DIR/trace.json: every event of every file that reads
   as a trace, metadata first, then by ts, written under a temporary name
   and renamed.  A file that is missing or does not read (a rank killed
   while writing it) is named, with why, and the others are merged all the
   same.  Its otherData says "world", the "ranks" merged, those "missing",
   and each merged rank's "clock_error_us" (as its file says it: how far its
   clock may be from the job's; -1 when it does not say), so a reader knows
   how much two ranks' times may disagree.  distrun does it on node 0 when
   its ranks end (merge_trace, with the job's world); dist_timeline given
   DIR does it for the ranks whose files DIR holds (0 to the highest one
   there), with the same functions and words. */

/* ---- the platform's part of it: files (the rest is at the end) ------------ */

#ifdef _WIN32
/* s (UTF-8) as UTF-16, malloc'd; NULL (errno ENOMEM) when out of memory. */
static wchar_t *utf8_to_wide(const char *s) {
    int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, NULL, 0);
    wchar_t *w = n > 0 ? malloc((size_t)n * sizeof *w) : NULL;
    if (!w) { errno = ENOMEM; return NULL; }
    MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n);
    return w;
}
#endif

static uint64_t plat_random64(void);
/* Paths are in UTF-8 (Windows: they go to the wide functions). */
static FILE *plat_fopen(const char *path, const char *mode);
/* 0, or -1 with errno set (ENOENT: there was none). */
static int plat_remove_file(const char *path);
/* Rename from to to, replacing to if it exists: 0, or -1 with errno set. */
static int plat_replace_file(const char *from, const char *to);
/* 1 when path is a directory (that can be looked at), else 0. */
static TRACE_MAYBE_UNUSED int plat_is_dir(const char *path);
/* 1 + the highest R of the files rank<R>.trace.json in dir (0: none); -1
   (errno set) when dir cannot be listed. */
static TRACE_MAYBE_UNUSED int plat_trace_ranks(const char *dir);

/* R, when name is rank<R>.trace.json as trace_path writes it; else -1. */
static TRACE_MAYBE_UNUSED int trace_file_rank(const char *name) {
    int r = 0, digits = 0;
    if (strncmp(name, "rank", 4) != 0) return -1;
    for (name += 4; json_is_digit(*name); name++, digits++) {
        if (digits == 9 || (digits == 1 && r == 0)) return -1;     /* (no leading zeros; < 1e9) */
        r = r * 10 + (*name - '0');
    }
    return digits > 0 && strcmp(name, ".trace.json") == 0 ? r : -1;
}

#ifndef _WIN32
static uint64_t plat_random64(void) {
    unsigned char b[8] = { 0 };
    unsigned long long x = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) { if (fread(b, 1, sizeof b, f) == sizeof b) memcpy(&x, b, sizeof x); fclose(f); }
    return x;
}

static FILE *plat_fopen(const char *path, const char *mode) { return fopen(path, mode); }

static int plat_remove_file(const char *path) { return unlink(path); }

static int plat_replace_file(const char *from, const char *to) { return rename(from, to); }

static int plat_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int plat_trace_ranks(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int last = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        int r = trace_file_rank(e->d_name);
        if (r >= last) last = r + 1;
    }
    closedir(d);
    return last;
}
#else
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

static FILE *plat_fopen(const char *path, const char *mode) {
    wchar_t *w = utf8_to_wide(path), *m = utf8_to_wide(mode);
    FILE *f = w && m ? _wfopen(w, m) : NULL;
    free(w);
    free(m);
    return f;
}

static int plat_remove_file(const char *path) {
    wchar_t *w = utf8_to_wide(path);
    int rc = w ? _wremove(w) : -1;
    free(w);
    return rc;
}

/* (rename() will not replace a file on Windows) */
static int plat_replace_file(const char *from, const char *to) {
    wchar_t *wf = utf8_to_wide(from), *wt = utf8_to_wide(to);
    int rc = -1;
    if (wf && wt) {
        if (MoveFileExW(wf, wt, MOVEFILE_REPLACE_EXISTING)) rc = 0;
        else {
            DWORD err = GetLastError();
            errno = err == ERROR_FILE_NOT_FOUND || err == ERROR_PATH_NOT_FOUND ? ENOENT
                  : err == ERROR_ACCESS_DENIED || err == ERROR_SHARING_VIOLATION ? EACCES : EIO;
        }
    }
    free(wf);
    free(wt);
    return rc;
}

static int plat_is_dir(const char *path) {
    wchar_t *w = utf8_to_wide(path);
    DWORD attr = w ? GetFileAttributesW(w) : INVALID_FILE_ATTRIBUTES;
    free(w);
    return attr != INVALID_FILE_ATTRIBUTES && (attr & FILE_ATTRIBUTE_DIRECTORY);
}

static int plat_trace_ranks(const char *dir) {
    size_t n = strlen(dir) + 3;
    char *pattern = malloc(n), name[4 * MAX_PATH];
    wchar_t *w;
    WIN32_FIND_DATAW fd;
    HANDLE h;
    int last = 0;
    if (!pattern) { errno = ENOMEM; return -1; }
    snprintf(pattern, n, "%s/*", dir);
    w = utf8_to_wide(pattern);
    free(pattern);
    if (!w) return -1;
    h = FindFirstFileW(w, &fd);
    free(w);
    if (h == INVALID_HANDLE_VALUE) {
        DWORD err = GetLastError();
        if (err == ERROR_FILE_NOT_FOUND) return 0;
        errno = err == ERROR_PATH_NOT_FOUND ? ENOENT : err == ERROR_ACCESS_DENIED ? EACCES : EIO;
        return -1;
    }
    do {
        if (WideCharToMultiByte(CP_UTF8, 0, fd.cFileName, -1, name, (int)sizeof name, NULL, NULL) > 0) {
            int r = trace_file_rank(name);
            if (r >= last) last = r + 1;
        }
    } while (FindNextFileW(h, &fd));
    FindClose(h);
    return last;
}
#endif

/* ---- the merge itself ---------------------------------------------------------- */

static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* DIR/rank<R>.trace.json, or DIR/trace.json for rank -1; NULL when out of memory. */
static char *trace_path(const char *dir, int rank) {
    size_t n = strlen(dir) + 40;
    char *p = malloc(n);
    if (!p) return NULL;
    if (rank < 0) snprintf(p, n, "%s/trace.json", dir);
    else snprintf(p, n, "%s/rank%d.trace.json", dir, rank);
    return p;
}

/* One event of the merge: its text in its file's, and what orders it. */
typedef struct trace_piece {
    const char *text;
    size_t len;
    double ts;
    int meta;               /* metadata ("ph":"M") goes first, by file */
    int file;
    size_t index;           /* its place in its file */
} trace_piece;

typedef struct trace_merge {
    trace_piece *pieces;
    size_t n, cap;
    int file;               /* the rank whose file is being read */
    char **texts;           /* each rank's file, read whole: the pieces point into them */
    int *merged, *missing;  /* ranks whose files are in, and those that are not */
    double *clock_err;      /* each merged rank's clock uncertainty (us; -1 not said) */
    int nmerged, nmissing;
} trace_merge;

static int add_piece(json_reader *r, const trace_event *ev, void *user) {
    trace_merge *m = user;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 4096;
        trace_piece *np = cap > ((size_t)-1) / sizeof *np ? NULL : realloc(m->pieces, cap * sizeof *np);
        if (!np) return json_fail(r, ev->start, "out of memory after %llu events", (unsigned long long)m->n);
        m->pieces = np;
        m->cap = cap;
    }
    m->pieces[m->n++] = (trace_piece){ ev->start, (size_t)(ev->end - ev->start), ev->ts, trace_is_meta(ev), m->file, ev->index };
    return 0;
}

static int compare_pieces(const void *pa, const void *pb) {
    const trace_piece *a = pa, *b = pb;
    if (a->meta != b->meta) return a->meta ? -1 : 1;
    if (!a->meta && a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    if (a->file != b->file) return a->file < b->file ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Rank `rank`'s file at path read whole into *text and its events added to
   m: 0; else 1 when there is no such file, -1 when it does not read as a
   trace, with why in why (and m as it was). */
static int read_rank_trace(const char *path, int rank, trace_merge *m, char **text, char *why, size_t why_n) {
    size_t len, had = m->n;
    const char *other;
    double said, err;
    json_reader r;
    FILE *f = plat_fopen(path, "rb");
    *text = NULL;
    if (!f) {
        int absent = errno == ENOENT;
        snprintf(why, why_n, "%s: %s", path, strerror(errno));
        return absent ? 1 : -1;
    }
    if (json_read_file(f, text, &len) != 0) {
        snprintf(why, why_n, "%s: cannot read it: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    fclose(f);
    json_init(&r, *text, len);
    if (trace_walk(&r, add_piece, m, &other) == 0 && other && trace_object_number(&r, other, "rank", &said) == 1 && said != rank)
        json_fail(&r, other, "its otherData says it is rank %g's trace", said);
    if (!r.error[0]) {
        m->clock_err[m->nmerged] = other && trace_object_number(&r, other, "clock_error_us", &err) == 1 ? err : -1;
        r.error[0] = '\0';                   /* (a bad value only leaves it unsaid) */
        return 0;
    }
    snprintf(why, why_n, "%s: %s", path, r.error);
    m->n = had;
    free(*text);
    *text = NULL;
    return -1;
}

static void put_rank_list(FILE *f, const int *ranks, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ranks[i]);
    fputc(']', f);
}

/* The merge, into a temporary file renamed to DIR/trace.json; NULL, or why not. */
static const char *write_merged_trace(const char *dir, const trace_merge *m, int world, char *why, size_t why_n) {
    char *final = trace_path(dir, -1), *tmp = final ? malloc(strlen(final) + 32) : NULL;
    FILE *f = NULL;
    int ok;
    if (!tmp) { free(final); return "out of memory"; }
    snprintf(tmp, strlen(final) + 32, "%s.%016llx.tmp", final, (unsigned long long)plat_random64());
    if (!(f = plat_fopen(tmp, "wb"))) {
        snprintf(why, why_n, "cannot create '%s': %s", tmp, strerror(errno));
        free(final); free(tmp);
        return why;
    }
    fputs("{\"traceEvents\":[\n", f);
    for (size_t i = 0; i < m->n; i++) {
        fwrite(m->pieces[i].text, 1, m->pieces[i].len, f);
        fputs(i + 1 < m->n ? ",\n" : "\n", f);
    }
    fprintf(f, "],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"dist_trace\":1,\"world\":%d,\"ranks\":", world);
    put_rank_list(f, m->merged, m->nmerged);
    fputs(",\"missing\":", f);
    put_rank_list(f, m->missing, m->nmissing);
    fputs(",\"clock\":\"job\",\"clock_error_us\":[", f);
    for (int i = 0; i < m->nmerged; i++) fprintf(f, "%s%.3f", i ? "," : "", m->clock_err[i]);
    fputs("]}}\n", f);
    ok = !ferror(f);
    if (fclose(f) != 0) ok = 0;
    if (!ok) snprintf(why, why_n, "cannot write '%s': %s", tmp, strerror(errno));
    else if (plat_replace_file(tmp, final) != 0) { snprintf(why, why_n, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno)); ok = 0; }
    if (!ok) plat_remove_file(tmp);
    free(final);
    free(tmp);
    return ok ? NULL : why;
}

/* The files of ranks 0..world-1 into m, and those of ranks past it (that
   joined an elastic job) that exist; the trouble with each that is left out
   into line (the first 8). */
static void read_rank_traces(const char *dir, int world, int last, trace_merge *m, char *line, size_t line_n) {
    char why[400];
    size_t len;
    int rc, listed = 0;
    line[0] = '\0';
    for (int rank = 0; rank < last; rank++) {
        char *path = trace_path(dir, rank);
        m->file = rank;
        if (!path) snprintf(why, sizeof why, "out of memory");
        rc = path ? read_rank_trace(path, rank, m, &m->texts[rank], why, sizeof why) : -1;
        free(path);
        if (rc == 0) m->merged[m->nmerged++] = rank;
        if (rc == 0 || (rc > 0 && rank >= world)) continue;
        m->missing[m->nmissing++] = rank;
        len = strlen(line);
        if (listed++ < 8) snprintf(line + len, line_n - len, "%srank %d (%s)", listed > 1 ? ", " : "", rank, why);
    }
    len = strlen(line);
    if (listed > 8) snprintf(line + len, line_n - len, " and %d more", listed - 8);
}

/* The files of ranks 0..last-1 in dir merged into DIR/trace.json (world:
   the ranks the job was to have; of those past it, a file that is not there
   is not missing), and one line on stderr, "PROG: ...", says how it went: 0
   when DIR/trace.json was written, else -1. */
static int merge_rank_traces(const char *prog, const char *dir, int world, int last) {
    const char *failed = "out of memory";
    char line[2048], why[400];
    trace_merge m;
    memset(&m, 0, sizeof m);
    m.texts = calloc((size_t)last, sizeof *m.texts);
    m.merged = malloc((size_t)last * sizeof *m.merged);
    m.missing = malloc((size_t)last * sizeof *m.missing);
    m.clock_err = malloc((size_t)last * sizeof *m.clock_err);
    if (m.texts && m.merged && m.missing && m.clock_err) {
        read_rank_traces(dir, world, last, &m, line, sizeof line);
        if (m.n > 0) qsort(m.pieces, m.n, sizeof *m.pieces, compare_pieces);
        failed = m.nmerged == 0 ? NULL : write_merged_trace(dir, &m, world, why, sizeof why);
    }
    if (failed)
        fprintf(stderr, "%s: cannot merge the trace in %s: %s\n", prog, dir, failed);
    else if (m.nmerged == 0)
        fprintf(stderr, "%s: trace: no rank's file could be merged, so %s/trace.json is not written: %s\n", prog, dir, line);
    else if (m.nmissing == 0)
        fprintf(stderr, "%s: trace of %d rank%s merged into %s/trace.json\n", prog, m.nmerged, plural(m.nmerged), dir);
    else
        fprintf(stderr, "%s: trace of %d of %d ranks merged into %s/trace.json; missing: %s\n", prog, m.nmerged,
                m.nmerged + m.nmissing, dir, line);
    for (int rank = 0; m.texts && rank < last; rank++) free(m.texts[rank]);
    free(m.texts);
    free(m.merged);
    free(m.missing);
    free(m.clock_err);
    free(m.pieces);
    return failed || m.nmerged == 0 ? -1 : 0;
}

#ifndef DISTRUN_TRACE_READER_ONLY   /* (the rest is the launcher) */

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
enum { DR_SIGHUP = 1, DR_SIGINT = 2, DR_SIGKILL = 9, DR_SIGREPORT = 10 /* (never comes: no SIGUSR1) */, DR_SIGTERM = 15 };
#else
enum { DR_SIGHUP = SIGHUP, DR_SIGINT = SIGINT, DR_SIGKILL = SIGKILL, DR_SIGREPORT = SIGUSR1, DR_SIGTERM = SIGTERM };
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
    HANDLE job;             /* its job object: it and all it starts */
    int64_t ended_ns;       /* when it ended (plat_now_ns), from its exit time */
    int exited;             /* it has ended; its pipes are being drained */
    DWORD code;             /* its exit code */
    int64_t drain_until;    /* stop waiting for the pipes' end then */
    int drain_reads;        /* reads since it ended */
} plat_child;
typedef struct plat_job { int draining; /* ranks that ended, pipes still open */ } plat_job;
#else
typedef struct plat_stream { int fd; /* read end of the rank's pipe; -1 when closed */ } plat_stream;
typedef struct plat_child { int64_t started_ns; /* when forked: older SIGCHLD stamps are not its */ } plat_child;
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
static int64_t plat_now_ms(void);                /* monotonic */
static int64_t plat_now_ns(void);                /* monotonic, for stamping events */
static int64_t plat_wall_ms(void);               /* the wall clock: ms since 1970 */
/* wall_ms as local time, "2025-01-31 12:34:56.789" */
static void plat_format_time(int64_t wall_ms, char *buf, size_t n);
static void plat_hostname(char *buf, size_t n);
/* Make the directory path and those above it; 0, or -1 (errno set). */
static int plat_make_dirs(const char *path);
/* (plat_random64, plat_fopen, plat_remove_file and plat_replace_file are
   with the trace files, above: the merge needs them.) */
/* Before ranks start: signals or the console handler, stdio, limits,
   j->stdin_tty.  -1 (message printed) when distrun cannot go on. */
static int plat_init(job *j);
/* While ranks start, stop signals wait (POSIX: blocked). */
static void plat_hold_signals(int hold);
/* Start c with env set, its output into c->out and c->err when j->pipes
   (else it writes to distrun's stdout and stderr).  Sets c->pid.  0, or the
   exit code for the job when it cannot (message printed). */
static int plat_start_rank(job *j, child *c, const rank_env *env);
/* Send sig (DR_SIGKILL: kill outright) to c and all it started; 1 if sent. */
static int plat_signal_rank(child *c, int sig);
/* Wait at most timeout_ms for output, ended ranks or a signal.  Output goes
   to feed() and close_stream(); each ended rank, once what it left running
   is killed and its pipes are drained, to rank_ended() with the time it
   ended. */
static void plat_wait(job *j, int timeout_ms);
static int plat_take_signal(void);               /* next stop signal caught, or 0 */
/* Write prefix, p[0..n) and a newline in one piece: lines of different
   ranks never interleave.  Output that cannot be written is dropped. */
static void plat_write_line(int fd, const char *prefix, const char *p, size_t n);
static void plat_close_stream(stream *s);
static const char *plat_signal_name(int sig);
/* After the loop: kill what the ranks left that escaped them (POSIX);
   0 if the job's memory may be freed. */
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
    int prefix;             /* PREFIX_*: how relayed lines are marked */
    const char *log_dir;    /* --log-dir: each rank's stdout and stderr to files there */
    int tee;                /* --tee: TEE_* bits, streams also relayed with --log-dir */
    const char *run_id;     /* --run-id, else $DIST_RUN_ID, else (one node) random */
    const char *trace_dir;  /* --trace, else $DIST_TRACE: the ranks' traces go there */
    char run_buf[40];
    char **argv;            /* PROG ARGS..., NULL-terminated */
} options;

enum { PREFIX_RANK, PREFIX_NONE, PREFIX_TAG };      /* "[R] ", nothing, "[1,R]<stdout>:" */
enum { TEE_STDOUT = 1, TEE_STDERR = 2 };

enum opt_id { OPT_NPROC, OPT_NNODES, OPT_NODE_RANK, OPT_MASTER_ADDR, OPT_MASTER_PORT,
              OPT_KILL_GRACE, OPT_TIMEOUT, OPT_NO_PREFIX, OPT_TAG_OUTPUT, OPT_LOG_DIR, OPT_TEE,
              OPT_RUN_ID, OPT_MAX_RESTARTS, OPT_TRACE, OPT_HELP, OPT_VERSION };

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
    { "tag-output",     OPT_TAG_OUTPUT,  0 },      /* Open MPI's */
    { "log-dir",        OPT_LOG_DIR,     1 },
    { "output-filename", OPT_LOG_DIR,    1 },      /* Open MPI's spelling of it */
    { "tee",            OPT_TEE,         1 },
    { "run-id",         OPT_RUN_ID,      1 },
    { "max-restarts",   OPT_MAX_RESTARTS, 1 },
    { "trace",          OPT_TRACE,       1 },
    { "help",           OPT_HELP,        0 },
    { "version",        OPT_VERSION,     0 },
};

static void print_usage(FILE *f) {
    fputs("usage: distrun [options] PROG [ARGS...]\n"
          "\n"
          "Start the ranks of a dist job: --nproc-per-node copies of PROG on this node.\n"
          "\n"
          "options:\n"
          "  -n, -np, --nproc-per-node N\n"
          "                          ranks on this node (default 1)\n"
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
          "      --timeout S         stop the whole job after S seconds (exit 124), with\n"
          "                          a job report first (see below)\n"
          "      --no-prefix         ranks write straight to stdout and stderr, without\n"
          "                          the \"[RANK] \" line prefix (--tee: relayed without it)\n"
          "      --tag-output        prefix lines as Open MPI does: \"[1,RANK]<stdout>:\"\n"
          "                          (or <stderr>); the last of these two options wins\n"
          "      --log-dir DIR       each rank's output to files, not the terminal:\n"
          "                          DIR/rank<RANK>.out and DIR/rank<RANK>.err, as the\n"
          "                          rank wrote it (DIR is made; the files are emptied at\n"
          "                          the start, and a restarted rank appends to them).\n"
          "                          --output-filename DIR is the same\n"
          "      --tee T             with --log-dir, also relay to the terminal: 0 none,\n"
          "                          1 stdout, 2 stderr, 3 both (default 0)\n"
          "      --run-id ID         this launch's identity (DIST_RUN_ID), the same on\n"
          "                          every node; the store turns away ranks of other\n"
          "                          launches.  Default: $DIST_RUN_ID, else on one node a\n"
          "                          random one; with --nnodes > 1 give one (or set\n"
          "                          DIST_RUN_ID alike on every node)\n"
          "      --trace DIR         trace the job: each rank writes its operations to\n"
          "                          DIR/rank<RANK>.trace.json (DIST_TRACE=DIR; DIR is\n"
          "                          made), and when the job ends distrun (node 0)\n"
          "                          merges them into DIR/trace.json, a Chrome trace for\n"
          "                          Perfetto or chrome://tracing (dist_timeline draws\n"
          "                          it as a page).  Default: $DIST_TRACE\n"
          "  -h, --help              show this help\n"
          "  -V, --version           show distrun's version (dist.h's) and exit\n"
          "Long options also take --opt=VALUE, and underscores (--nproc_per_node).\n", f);
    /* (two strings: C99 compilers need not take one over 4095 bytes) */
    fputs("\n"
          "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
          "MASTER_ADDR, MASTER_PORT (global rank = node rank * N + local rank),\n"
          "when there is one, DIST_RUN_ID, with --trace DIST_TRACE, and\n"
          "OMP_NUM_THREADS=1 when N > 1 and OMP_NUM_THREADS is not set.  What a rank\n"
          "leaves running is killed when it ends.\n"
          "\n"
          "When a rank fails, distrun stops the others and names the first rank of this\n"
          "node to fail, with its host and time, and which ranks it stopped.  Before it\n"
          "stops them (and on --timeout) it asks the ranks' flight recorders (dist.h)\n"
          "what they are doing and prints that job report at the end: which rank is\n"
          "behind, which sent nothing, who waits in which collective for whom.\n"
          "SIGUSR1 (kill -USR1 <distrun's pid>) prints a job report now; the job goes on.\n"
          "exit status: 0 when every rank exits 0; else that rank's code (128+N when\n"
          "killed by signal N), 124 on --timeout, 128+N when distrun got signal N,\n"
          "127 when PROG cannot be run, 2 for bad arguments.\n", f);
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
    case OPT_NO_PREFIX:   ok = 1; o->prefix = PREFIX_NONE; break;
    case OPT_TAG_OUTPUT:  ok = 1; o->prefix = PREFIX_TAG; break;
    case OPT_LOG_DIR:     ok = v[0] != '\0'; o->log_dir = v;            want = "a directory"; break;
    case OPT_TEE:         ok = !parse_int(v, 0, TEE_STDOUT | TEE_STDERR, &o->tee); want = "0, 1, 2 or 3"; break;
    case OPT_RUN_ID:      ok = v[0] != '\0'; o->run_id = v;             want = "an identity"; break;
    case OPT_TRACE:       ok = v[0] != '\0'; o->trace_dir = v;          want = "a directory"; break;
    case OPT_HELP:        print_usage(stdout); exit(0);
    case OPT_VERSION:     printf("distrun (dist) %s\n", DIST_VERSION_STRING); exit(0);
    }
    if (!ok) usage_error("--%s: expected %s, got '%s'", lo->name, want, v);
}

/* Options come first; the first word that is not one (or the word after
   "--") is PROG, and everything after it is PROG's, untouched. */
static void parse_args(int argc, char **argv, options *o) {
    int i = 1;
    *o = (options){ .nproc = 1, .nnodes = 1, .nnodes_min = 1, .master_addr = "127.0.0.1", .kill_grace_s = 3,
                    .prefix = PREFIX_RANK };
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
        } else if (strcmp(a, "-np") == 0) {       /* mpirun's */
            lo = opt_by_id(OPT_NPROC);
        } else if (a[1] == 'n') {
            lo = opt_by_id(OPT_NPROC);
            if (a[2]) val = a + 2;                 /* -n4 */
        } else if (a[1] == 'h' && a[2] == '\0') {
            lo = opt_by_id(OPT_HELP);
        } else if (a[1] == 'V' && a[2] == '\0') {
            lo = opt_by_id(OPT_VERSION);
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
    if (o->tee && !o->log_dir)
        usage_error("--tee needs --log-dir (without it all output goes to the terminal)");
    if ((long long)o->nnodes * o->nproc > INT_MAX)
        usage_error("--nnodes %d x --nproc-per-node %d is too many ranks", o->nnodes, o->nproc);
    if (!o->run_id && getenv("DIST_RUN_ID") && getenv("DIST_RUN_ID")[0]) o->run_id = getenv("DIST_RUN_ID");
    if (!o->trace_dir && getenv("DIST_TRACE") && getenv("DIST_TRACE")[0]) o->trace_dir = getenv("DIST_TRACE");
    if (!o->run_id && o->nnodes == 1) {    /* one node: this distrun is the whole launch */
        snprintf(o->run_buf, sizeof o->run_buf, "distrun-%016llx", (unsigned long long)plat_random64());
        o->run_id = o->run_buf;
    }
}

/* ---- the job ------------------------------------------------------------ */

struct stream {
    int open;               /* distrun's end of the rank's pipe is open */
    int out_fd;             /* where its lines are relayed: 1 or 2 */
    int relay;              /* relay its lines there (else, with --log-dir, only log them) */
    FILE *log;              /* --log-dir: its file, which gets the bytes as they come */
    char prefix[40];        /* each relayed line's: "[RANK] ", "[1,RANK]<stdout>:" or "" */
    char *buf;              /* the pending partial line */
    size_t len, cap;
    plat_stream p;
};

struct child {
    long pid;               /* 0 when not running (ended, or never started) */
    int rank;
    int restarts;           /* times it was restarted */
    int signalled;          /* distrun has sent this process a stop signal */
    /* how its last process ended, for the summary */
    long end_pid;
    int end_code, end_sig;  /* exit code, or the signal that killed it */
    int64_t ended_ns;       /* when (plat_now_ns) */
    int failed;             /* it failed on its own: not after distrun's signal */
    stream out, err;
    plat_child p;
};

struct job {
    options opt;
    child *kids;
    int nkids, running;
    int stopping;           /* the job is being shut down; first reason wins */
    int64_t stop_ns;        /* when that began (plat_now_ns) */
    child *cause;           /* stopping for a failure: the rank that failed first */
    int killed;             /* SIGKILL has been sent */
    int64_t kill_at;        /* when stopping: SIGKILL whatever is left then */
    int64_t deadline;       /* --timeout, or 0 */
    int exit_code;
    int restarts;           /* ranks restarted so far (--max-restarts) */
    int port;               /* MASTER_PORT of the ranks */
    int stdin_tty;          /* distrun's stdin is a terminal (a console) */
    int pipes;              /* the ranks' output comes through distrun (relayed or logged) */
    int64_t start_ns, start_wall_ms;   /* distrun's start, to date a failure */
    char summary[320];      /* the one line printed at the end, if any (but a failure's) */
    dist_store_host *store; /* node 0: the job's store (dist.h) */
    char report[8192];      /* the job report taken when the job began to fail or timed out ("": none) */
    const child *report_cause; /* the rank that report names as the cause (NULL: none) */
    plat_job p;
};

/* A rank's variables, in the order they are set; value NULL: unset. */
typedef struct env_var { const char *name, *value; } env_var;
struct rank_env { env_var v[20]; int n; char num[12][24]; };

static int64_t seconds_to_ms(double s) { return (int64_t)(s * 1000.0 + 0.5); }

/* ---- relaying output ---------------------------------------------------- */

/* --log-dir: the bytes as the rank wrote them, flushed at once (so the file
   can be followed while the job runs).  A file that cannot be written is
   given up, once, with a message. */
static void log_bytes(stream *s, const char *p, size_t n) {
    if (fwrite(p, 1, n, s->log) == n && fflush(s->log) == 0) return;
    fprintf(stderr, "distrun: cannot write a log file (%s); no more output is written to it\n", strerror(errno));
    fclose(s->log);
    s->log = NULL;
}

/* Keep a partial line until its newline comes.  A line longer than
   LINE_MAX_BYTES goes out in pieces, each with the prefix, so the output
   stays line-structured and memory stays bounded. */
static void append_partial(stream *s, const char *p, size_t n) {
    while (n > 0) {
        if (s->len == LINE_MAX_BYTES) { plat_write_line(s->out_fd, s->prefix, s->buf, s->len); s->len = 0; }
        size_t take = n < LINE_MAX_BYTES - s->len ? n : LINE_MAX_BYTES - s->len;
        if (s->len + take > s->cap) {
            size_t want = s->cap ? s->cap * 2 : 256;
            while (want < s->len + take) want *= 2;
            if (want > LINE_MAX_BYTES) want = LINE_MAX_BYTES;
            char *nb = realloc(s->buf, want);
            if (!nb) {   /* out of memory: pass the bytes on now rather than lose them */
                plat_write_line(s->out_fd, s->prefix, p, take);
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

/* Bytes a rank wrote: into its log file as they are; every complete line
   relayed with its prefix. */
static void feed(stream *s, const char *p, size_t n) {
    if (s->log) log_bytes(s, p, n);
    if (!s->relay) return;
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) : n;
        if (nl && s->len == 0 && seg <= LINE_MAX_BYTES) {
            plat_write_line(s->out_fd, s->prefix, p, seg);      /* the common case: no copy */
        } else {
            append_partial(s, p, seg);
            if (nl) { plat_write_line(s->out_fd, s->prefix, s->buf, s->len); s->len = 0; }
        }
        if (!nl) return;
        p += seg + 1;
        n -= seg + 1;
    }
}

/* A last line without a newline still gets relayed, as a line of its own.
   The log file stays open: a restarted rank writes on into it. */
static void close_stream(stream *s) {
    if (!s->open) return;
    if (s->len > 0) plat_write_line(s->out_fd, s->prefix, s->buf, s->len);
    plat_close_stream(s);
    free(s->buf);
    s->open = 0;
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* --log-dir: DIR/rank<R>.out and .err, emptied now; restarts append. */
static int open_logs(job *j) {
    const char *dir = j->opt.log_dir;
    if (!dir) return 0;
    if (plat_make_dirs(dir) != 0) {
        fprintf(stderr, "distrun: cannot make the log directory '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < j->nkids; i++) {
        stream *ss[2] = { &j->kids[i].out, &j->kids[i].err };
        for (int k = 0; k < 2; k++) {
            size_t len = strlen(dir) + 32;
            char *path = malloc(len);
            if (!path) { fputs("distrun: out of memory\n", stderr); return -1; }
            snprintf(path, len, "%s/rank%d.%s", dir, j->kids[i].rank, k ? "err" : "out");
            ss[k]->log = plat_fopen(path, "wb");
            if (!ss[k]->log) {
                fprintf(stderr, "distrun: cannot create the log file '%s': %s\n", path, strerror(errno));
                free(path);
                return -1;
            }
            free(path);
        }
    }
    return 0;
}

/* ---- starting ranks ----------------------------------------------------- */

static const char *env_num(rank_env *e, long v) {
    char *b = e->num[e->n < 12 ? e->n : 11];
    snprintf(b, sizeof e->num[0], "%ld", v);
    return b;
}

static void env_add(rank_env *e, const char *name, const char *value) {
    e->v[e->n].name = name;
    e->v[e->n].value = value;
    e->n++;
}

/* Several ranks on one node, each with an OpenMP pool of one thread per
   core, would oversubscribe it: torchrun sets OMP_NUM_THREADS=1 unless the
   user chose a value, and so does distrun. */
static int sets_omp_threads(const options *o) { return o->nproc > 1 && !getenv("OMP_NUM_THREADS"); }

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
    env_add(e, "DIST_MAX_RESTARTS", env_num(e, o->max_restarts));
    env_add(e, "LOCAL_RANK", env_num(e, local));
    env_add(e, "LOCAL_WORLD_SIZE", env_num(e, o->nproc));
    env_add(e, "GROUP_RANK", env_num(e, o->node_rank));
    env_add(e, "MASTER_PORT", env_num(e, port));
    env_add(e, "MASTER_ADDR", o->master_addr);
    if (o->run_id) env_add(e, "DIST_RUN_ID", o->run_id);
    if (o->trace_dir) env_add(e, "DIST_TRACE", o->trace_dir);
    env_add(e, "DIST_STORE_HOSTED", "1");         /* node 0's distrun hosts it */
    env_add(e, "DIST_STORE_LISTEN_FD", NULL);     /* (an older launcher's, above this one) */
    if (sets_omp_threads(o)) env_add(e, "OMP_NUM_THREADS", "1");
}

static int start_rank(job *j, int local, int port) {
    rank_env e;
    child *c = &j->kids[local];
    int rc;
    make_rank_env(j, local, port, &e);
    c->signalled = 0;
    c->failed = 0;
    rc = plat_start_rank(j, c, &e);
    if (rc == 0) j->running++;
    return rc;
}

/* ---- stopping ----------------------------------------------------------- */

static int signal_all(job *j, int sig) {
    int n = 0;
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        if (c->pid > 0 && plat_signal_rank(c, sig)) { c->signalled = 1; n++; }
    }
    return n;
}

/* Begin shutting the job down (once): send sig to every running rank and
   SIGKILL what is left after the grace period.  Returns how many got it. */
static int begin_stop(job *j, int exit_code, int sig) {
    j->stopping = 1;
    j->exit_code = exit_code;
    j->stop_ns = plat_now_ns();     /* (before the signals: what they end, ends after this) */
    j->kill_at = plat_now_ms() + seconds_to_ms(j->opt.kill_grace_s);
    return signal_all(j, sig);
}

static void kill_all(job *j) {
    signal_all(j, DR_SIGKILL);
    j->killed = 1;
}

static int end_status(int code, int sig) { return sig ? 128 + sig : code; }

static void describe_end(char *b, size_t n, int code, int sig) {
    if (sig != 0)
        snprintf(b, n, "was killed by signal %d (%s)", sig, plat_signal_name(sig));
    else if ((unsigned)code > 255)      /* Windows: an NTSTATUS, such as 0xC0000005 */
        snprintf(b, n, "exited with code 0x%08X", (unsigned)code);
    else
        snprintf(b, n, "exited with code %d", code);
}

/* What the job is doing, from every rank's flight recorder (dist.h's job
   report, through the store distrun hosts): taken when a rank fails (before
   the others are stopped), on --timeout, and on SIGUSR1.  "" when no rank
   answered (ranks that are not dist programs, or all gone).  The ranks'
   monitors answer within a second; distrun waits at most 2.5 s. */
static void take_report(job *j, char *buf, size_t cap) {
    buf[0] = '\0';
    if (!j->store || dist_store_host_report(j->store, buf, cap, 2500) != DIST_OK) buf[0] = '\0';
}

/* The rank that failed first, as distrun saw it: the store host's reports
   give it as the likely cause (so a report never blames another rank than
   the summary does). */
static void note_cause(job *j) {
    char how[96];
    if (!j->store || !j->cause) return;
    describe_end(how, sizeof how, j->cause->end_code, j->cause->end_sig);
    dist_store_host_note_failure(j->store, j->cause->rank, how);
}

/* Each line of a report, as distrun's; without its likely cause when
   that is no longer the rank the summary names (skip_cause). */
static void print_report(const char *rep, int skip_cause) {
    for (const char *p = rep; *p; ) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (!skip_cause || strncmp(p, "  likely cause:", 15) != 0) fprintf(stderr, "distrun: %.*s\n", len, p);
        p += len + (nl != NULL);
    }
}

/* c has ended (its exit code, or the signal that killed it, at ended_ns)
   and its pipes are drained: close them, and stop the job if it failed.
   Ends are not always seen in the order they happened (several at once;
   on Windows, pipes that drain late), so the failure that stopped the job
   gives way to one seen later that happened earlier; and a rank that
   distrun had signalled and that ended after that was stopped, not failed. */
static void rank_ended(job *j, child *c, int code, int sig, int64_t ended_ns) {
    close_stream(&c->out);
    close_stream(&c->err);
    c->end_pid = c->pid;
    c->end_code = code;
    c->end_sig = sig;
    c->ended_ns = ended_ns;
    c->pid = 0;
    j->running--;
    c->failed = (sig != 0 || code != 0) && !(c->signalled && ended_ns > j->stop_ns);
    if (!c->failed) return;
    if (j->stopping) {
        if (j->cause && ended_ns < j->cause->ended_ns) {
            j->cause = c;
            j->exit_code = end_status(code, sig);
            note_cause(j);
        }
        return;
    }
    if (j->restarts < j->opt.max_restarts) {
        /* --max-restarts: a new process in its place, which joins the
           running job (the others go on: they shrink, and admit it with
           dist_grow) */
        int rc;
        char how[96];
        describe_end(how, sizeof how, code, sig);
        j->restarts++;
        c->restarts++;
        fprintf(stderr, "distrun: rank %d (pid %ld) %s; restarting it (restart %d of %d) to join the running job\n", c->rank,
                c->end_pid, how, j->restarts, j->opt.max_restarts);
        rc = start_rank(j, (int)(c - j->kids), j->port);
        if (rc == 0) return;
        c->end_code = code = rc;
        c->end_sig = sig = 0;
        c->failed = 1;
    }
    j->cause = c;
    note_cause(j);
    take_report(j, j->report, sizeof j->report);     /* (before the others are stopped) */
    j->report_cause = c;
    begin_stop(j, end_status(code, sig), DR_SIGTERM);
}

/* In the summary: the ranks that failed after the cause, and those that
   distrun stopped (they ended after its signal, whatever their status). */
static int failed_too(const job *j, const child *c) { return c->failed && c != j->cause; }
static int was_stopped(const job *j, const child *c) { return c->signalled && !c->failed && c->ended_ns > j->stop_ns; }

/* "rank 3" or "ranks 0-2, 5": those of which(j, c); bounded, with "..."
   when cut. */
static void list_ranks(const job *j, int (*which)(const job *, const child *), char *b, size_t n) {
    size_t len;
    int count = 0, first = -1;
    for (int i = 0; i < j->nkids; i++) count += which(j, &j->kids[i]);
    snprintf(b, n, "rank%s ", plural(count));
    for (int i = 0; i <= j->nkids; i++) {
        int in = i < j->nkids && which(j, &j->kids[i]);
        if (in && first < 0) first = i;
        if (in || first < 0) continue;
        len = strlen(b);
        if (len + 32 >= n) { snprintf(b + len, n - len, "%s...", b[len - 1] == ' ' ? "" : ", "); return; }
        snprintf(b + len, n - len, "%s%d", b[len - 1] == ' ' ? "" : ", ", j->kids[first].rank);
        len = strlen(b);
        if (i - 1 > first) snprintf(b + len, n - len, "%s%d", i - 1 > first + 1 ? "-" : ", ", j->kids[i - 1].rank);
        first = -1;
    }
}

/* The end of a job that a failure stopped: which rank failed first, how,
   where and when, and what happened to the others. */
static void print_failure_summary(const job *j) {
    const child *c = j->cause;
    char how[96], host[256], when[64], list[400];
    int64_t since_ns = c->ended_ns - j->start_ns;
    int others = 0, stopped = 0;
    describe_end(how, sizeof how, c->end_code, c->end_sig);
    plat_hostname(host, sizeof host);
    plat_format_time(j->start_wall_ms + since_ns / 1000000, when, sizeof when);
    for (int i = 0; i < j->nkids; i++) {
        others += failed_too(j, &j->kids[i]);
        stopped += was_stopped(j, &j->kids[i]);
    }
    fprintf(stderr, "distrun: rank %d (pid %ld) %s on %s at %s (%.3f s after the start)%s", c->rank, c->end_pid, how, host,
            when, (double)since_ns / 1e9,
            j->opt.nnodes > 1 ? ", the first of this node's ranks to fail" : j->nkids > 1 ? ", the first to fail" : "");
    if (others > 0) {
        list_ranks(j, failed_too, list, sizeof list);
        fprintf(stderr, "; then %s failed too", list);
    }
    if (stopped > 0) {
        list_ranks(j, was_stopped, list, sizeof list);
        fprintf(stderr, "; distrun stopped %s", list);
    }
    fputc('\n', stderr);
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
    while ((sig = plat_take_signal()) != 0) {
        if (sig == DR_SIGREPORT) {     /* a report now; the job goes on */
            char rep[8192];
            take_report(j, rep, sizeof rep);
            if (rep[0]) print_report(rep, 0);
            else fputs("distrun: job report: no rank answered (they are not dist programs, or not running)\n", stderr);
            continue;
        }
        on_stop_signal(j, sig);
    }
}

static void check_deadlines(job *j) {
    int64_t now = plat_now_ms();
    if (!j->stopping && j->deadline && now >= j->deadline) {
        int n;
        take_report(j, j->report, sizeof j->report);
        n = begin_stop(j, EXIT_TIMEOUT, DR_SIGTERM);
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

/* Each stream's prefix and where it goes: relayed (with its prefix) unless
   --log-dir takes it and --tee does not copy it. */
static void init_stream(const options *o, int rank, stream *s, int fd) {
    const char *name = fd == 1 ? "stdout" : "stderr";
    s->out_fd = fd;
    s->relay = !o->log_dir || (o->tee & (fd == 1 ? TEE_STDOUT : TEE_STDERR));
    if (o->prefix == PREFIX_RANK) snprintf(s->prefix, sizeof s->prefix, "[%d] ", rank);
    else if (o->prefix == PREFIX_TAG) snprintf(s->prefix, sizeof s->prefix, "[1,%d]<%s>:", rank, name);
    else s->prefix[0] = '\0';
}

static int init_job(job *j) {
    j->nkids = j->opt.nproc;
    j->kids = calloc((size_t)j->nkids, sizeof *j->kids);
    if (!j->kids) { fputs("distrun: out of memory\n", stderr); return -1; }
    /* through distrun unless the ranks may write straight to its stdout
       and stderr (--no-prefix, no --log-dir) */
    j->pipes = j->opt.prefix != PREFIX_NONE || j->opt.log_dir;
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        c->rank = j->opt.node_rank * j->opt.nproc + i;
        init_stream(&j->opt, c->rank, &c->out, 1);
        init_stream(&j->opt, c->rank, &c->err, 2);
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
    for (int i = 0; i < j->nkids; i++) {
        stream *ss[2] = { &j->kids[i].out, &j->kids[i].err };
        for (int k = 0; k < 2; k++) {
            free(ss[k]->buf);
            if (ss[k]->log) fclose(ss[k]->log);
        }
    }
    free(j->kids);
}

/* ---- tracing (DIST_TRACE) --------------------------------------------------
   With --trace DIR (or DIST_TRACE=DIR in distrun's environment) each rank
   gets DIST_TRACE=DIR, and dist.h writes its operations to
   DIR/rank<RANK>.trace.json, with timestamps on the job's clock (each rank's
   aligned to the launcher's at init).  When the job ends, however it ends,
   distrun on node 0 merges the files of ranks 0..WORLD_SIZE-1 into
   DIR/trace.json (how: "trace files: the merge", above).  On several
   nodes, node 0 reads what DIR holds when its own ranks end: a directory
   the nodes share, and the other nodes' ranks done by then, or those are
   named missing. */

/* Before the ranks start: DIR is made, and the files that this node's ranks
   are to write (and node 0's merge) are removed, so that a file an earlier
   job left is never merged as this one's. */
static int prepare_trace(const job *j) {
    const char *dir = j->opt.trace_dir;
    if (!dir) return 0;
    if (plat_make_dirs(dir) != 0) {
        fprintf(stderr, "distrun: cannot make the trace directory '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = j->opt.node_rank == 0 ? -1 : 0; i < j->nkids; i++) {
        char *path = trace_path(dir, i < 0 ? -1 : j->kids[i].rank);
        if (!path) { fputs("distrun: out of memory\n", stderr); return -1; }
        if (plat_remove_file(path) != 0 && errno != ENOENT) {
            fprintf(stderr, "distrun: cannot remove '%s', left by an earlier job: %s\n", path, strerror(errno));
            free(path);
            return -1;
        }
        free(path);
    }
    return 0;
}

/* Node 0, when the job has ended: the ranks' files merged into
   DIR/trace.json ("trace files: the merge"); one line says how it went. */
static void merge_trace(const job *j) {
    if (!j->opt.trace_dir || j->opt.node_rank != 0) return;
    merge_rank_traces("distrun", j->opt.trace_dir, j->opt.nnodes_min * j->opt.nproc, j->opt.nnodes * j->opt.nproc);
}

int main(int argc, char **argv) {
    job j;
    memset(&j, 0, sizeof j);
    plat_args(&argc, &argv);
    parse_args(argc, argv, &j.opt);
    if (init_job(&j) != 0) return EXIT_LAUNCH;
    if (plat_init(&j) != 0) return EXIT_LAUNCH;
    if (open_logs(&j) != 0) return EXIT_LAUNCH;
    if (prepare_trace(&j) != 0) return EXIT_LAUNCH;
    if (sets_omp_threads(&j.opt))
        fprintf(stderr, "distrun: OMP_NUM_THREADS=1 for each rank, as %d share this node (set OMP_NUM_THREADS to choose)\n",
                j.opt.nproc);
    j.start_ns = plat_now_ns();
    j.start_wall_ms = plat_wall_ms();
    if (j.opt.timeout_s > 0) j.deadline = plat_now_ms() + seconds_to_ms(j.opt.timeout_s);
    start_all(&j);
    run(&j);
    dist_store_host_stop(j.store);
    merge_trace(&j);
    if (j.cause) print_failure_summary(&j);
    else if (j.summary[0]) fprintf(stderr, "%s\n", j.summary);
    if (j.report[0]) print_report(j.report, j.report_cause != NULL && j.report_cause != j.cause);
    free_job(&j);
    return j.exit_code;
}

/* ======================================================================== */
/* ---- platform ----------------------------------------------------------- */
/* ======================================================================== */

#ifndef _WIN32
/* ---- POSIX: fork/exec, process groups, pipes polled with a self-pipe --- */

static volatile sig_atomic_t got_int, got_term, got_hup, got_usr1;
static sig_atomic_t seen_int, seen_term, seen_hup, seen_usr1;
static int wake_pipe[2] = { -1, -1 };
static sigset_t orig_mask;             /* the mask distrun started with */
static struct rlimit orig_nofile;
static int nofile_raised;

static void plat_args(int *argc, char ***argv) { (void)argc; (void)argv; }

static int64_t plat_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t plat_now_ms(void) { return plat_now_ns() / 1000000; }

static int64_t plat_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void plat_format_time(int64_t wall_ms, char *buf, size_t n) {
    time_t t = (time_t)(wall_ms / 1000);
    struct tm tm;
    char day[32];
    if (!localtime_r(&t, &tm) || !strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm)) {
        snprintf(buf, n, "%lld ms after 1970", (long long)wall_ms);
        return;
    }
    snprintf(buf, n, "%s.%03d", day, (int)(wall_ms % 1000));
}

static void plat_hostname(char *buf, size_t n) {
    if (gethostname(buf, n) != 0 || !buf[0]) snprintf(buf, n, "this host");
    buf[n - 1] = '\0';
}

/* Each directory on the way is made (that it exists, or cannot be made, is
   no error on the way: a path may pass through ones we cannot write); the
   last must be a directory at the end. */
static int plat_make_dirs(const char *path) {
    char *p = strdup(path);
    struct stat st;
    int err = 0;
    if (!p) return -1;
    for (char *q = p + 1;; q++) {
        char ch = *q;
        if (ch != '/' && ch != '\0') continue;
        *q = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) err = errno;
        *q = ch;
        if (!ch) break;
    }
    free(p);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    errno = err ? err : ENOTDIR;
    return -1;
}

static const char *plat_signal_name(int sig) { return strsignal(sig); }

/* ---- signals: a self-pipe wakes poll; counters say what arrived --------- */

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (sig == SIGINT) got_int++;
    else if (sig == SIGTERM) got_term++;
    else if (sig == SIGHUP) got_hup++;
    else if (sig == SIGUSR1) got_usr1++;
    ssize_t r = write(wake_pipe[1], &b, 1);     /* full pipe: a wake-up is pending anyway */
    (void)r;
    errno = saved;
}

/* When children ended: SIGCHLD's handler stamps the child it names (of
   several that end before it runs, the first: the others' SIGCHLDs merge
   into the pending one), so the order they failed in is known even when
   one pass of the loop reaps several.  Read by reap, in the same thread. */
#define CHILD_STAMPS 64
static volatile pid_t stamp_pid[CHILD_STAMPS];
static volatile int64_t stamp_ns[CHILD_STAMPS];
static volatile sig_atomic_t stamp_next;

static void on_child(int sig, siginfo_t *si, void *ctx) {
    int saved = errno, k = stamp_next;
    unsigned char b = (unsigned char)sig;
    (void)ctx;
    stamp_ns[k] = plat_now_ns();            /* (clock_gettime: async-signal-safe) */
    stamp_pid[k] = si->si_pid;
    stamp_next = (k + 1) % CHILD_STAMPS;
    ssize_t r = write(wake_pipe[1], &b, 1);
    (void)r;
    errno = saved;
}

/* When pid ended: its stamp (one after it started), else `reaped`, the
   time waitpid returned it.  (A child with no stamp ended after the one
   whose SIGCHLD it merged into, and that one's handler ran, at the latest,
   as the waitpid call returned: so the order holds.) */
static int64_t child_ended_at(pid_t pid, int64_t started_ns, int64_t reaped) {
    for (int k = 0; k < CHILD_STAMPS; k++)
        if (stamp_pid[k] == pid && stamp_ns[k] >= started_ns) return stamp_ns[k];
    return reaped;
}

static const int caught_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGCHLD };
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
    caught_set(&sa.sa_mask);
    for (int i = 0; i < NCAUGHT; i++) {
        if (caught_signals[i] == SIGCHLD) {
            sa.sa_sigaction = on_child;
            sa.sa_flags = SA_RESTART | SA_NOCLDSTOP | SA_SIGINFO;
        } else {
            sa.sa_handler = on_signal;
            sa.sa_flags = SA_RESTART;
        }
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
    if (seen_usr1 != got_usr1) { seen_usr1++; return SIGUSR1; }
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
static void pump(stream *s, int drain) {
    static char chunk[READ_CHUNK];
    int reads = 0;
    while (s->open && reads < (drain ? DRAIN_READS : 1)) {
        ssize_t r = read(s->p.fd, chunk, sizeof chunk);
        if (r > 0) { feed(s, chunk, (size_t)r); reads++; continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        close_stream(s);               /* EOF or error */
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
    if (j->pipes && (make_pipe(out) != 0 || make_pipe(err) != 0)) {
        fprintf(stderr, "distrun: cannot create pipes for rank %d: %s\n", c->rank, strerror(errno));
        close_pair(out);
        close_pair(err);
        free_envp(envp); free(prog);
        return EXIT_LAUNCH;
    }
    c->p.started_ns = plat_now_ns();
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

/* Each ended child: a rank is passed on with what it wrote and when it
   ended, after what it left running in its process group is killed.  (A
   group's id is not handed out again while it has members; once it has
   none, only a new process given the same number that made itself a group
   leader at once could be hit, and numbers are handed out in turn.)
   Anything else was adopted (PR_SET_CHILD_SUBREAPER) and is only reaped. */
static void reap(job *j) {
    for (;;) {
        int status;
        int64_t reaped;
        child *c = NULL;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        reaped = plat_now_ns();
        for (int i = 0; i < j->nkids && !c; i++)
            if (j->kids[i].pid == pid) c = &j->kids[i];
        if (!c) continue;
        kill(-pid, SIGKILL);
        pump(&c->out, 1);          /* everything it wrote is in the pipes by now */
        pump(&c->err, 1);
        if (WIFEXITED(status)) rank_ended(j, c, WEXITSTATUS(status), 0, child_ended_at(pid, c->p.started_ns, reaped));
        else rank_ended(j, c, 0, WTERMSIG(status), child_ended_at(pid, c->p.started_ns, reaped));
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
        if (c && s->open && s->p.fd == pfd[k].fd) pump(s, 0);
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
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
    /* What a rank starts and leaves behind comes to distrun, not to init:
       distrun reaps it, and kills it when the job ends (plat_finish). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
    if (setup_signals() != 0) { perror("distrun: signals"); return -1; }
    j->p.pfd = calloc((size_t)j->nkids * 2 + 1, sizeof *j->p.pfd);
    j->p.pstream = calloc((size_t)j->nkids * 2 + 1, sizeof *j->p.pstream);
    if (!j->p.pfd || !j->p.pstream) { fputs("distrun: out of memory\n", stderr); return -1; }
    for (int i = 0; i < j->nkids; i++) j->kids[i].out.p.fd = j->kids[i].err.p.fd = -1;
    j->stdin_tty = isatty(0);
    raise_fd_limit(j->nkids);
    return 0;
}

#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
/* distrun's children now: what escaped the ranks' groups (setsid) and was
   adopted.  Fills pids (up to n) and returns how many. */
static int adopted_children(pid_t *pids, int n) {
    pid_t self = getpid();
    int found = 0;
    struct dirent *e;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    while (found < n && (e = readdir(d)) != NULL) {
        char path[300], buf[512];
        const char *rp;
        long ppid;
        FILE *f;
        size_t len;
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        if (!(f = fopen(path, "r"))) continue;
        len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* "pid (comm) state ppid ...": comm may hold anything, ')' too */
        if (!(rp = strrchr(buf, ')')) || sscanf(rp + 1, " %*c %ld", &ppid) != 1 || ppid != (long)self) continue;
        pids[found++] = (pid_t)atol(e->d_name);
    }
    closedir(d);
    return found;
}

/* Kill what was adopted, then what that had started (adopted in turn as
   its parent dies), until nothing is left; bounded, in case some process
   keeps starting more. */
static void kill_adopted(void) {
    pid_t pids[256];
    for (int round = 0; round < 64; round++) {
        int n = adopted_children(pids, 256);
        if (n == 0) return;
        for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
        for (int i = 0; i < n; i++)
            while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR) {}
    }
}
#else
static void kill_adopted(void) {}
#endif

static int plat_finish(job *j) {
    kill_adopted();
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

static int64_t plat_now_ms(void) { return (int64_t)GetTickCount64(); }

static int64_t plat_now_ns(void) {
    static LARGE_INTEGER freq;
    LARGE_INTEGER t;
    if (!freq.QuadPart) QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&t);
    return (int64_t)(t.QuadPart / freq.QuadPart) * 1000000000 + (int64_t)(t.QuadPart % freq.QuadPart) * 1000000000 / freq.QuadPart;
}

/* FILETIME: 100 ns units since 1601 */
static int64_t filetime_100ns(FILETIME ft) { return (int64_t)(((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime); }

static int64_t plat_wall_ms(void) {
    FILETIME ft;
    GetSystemTimeAsFileTime(&ft);
    return filetime_100ns(ft) / 10000 - 11644473600000LL;
}

static void plat_format_time(int64_t wall_ms, char *buf, size_t n) {
    int64_t t = (wall_ms + 11644473600000LL) * 10000;
    FILETIME ft;
    SYSTEMTIME utc, local;
    ft.dwLowDateTime = (DWORD)(uint64_t)t;
    ft.dwHighDateTime = (DWORD)((uint64_t)t >> 32);
    if (!FileTimeToSystemTime(&ft, &utc) || !SystemTimeToTzSpecificLocalTime(NULL, &utc, &local)) {
        snprintf(buf, n, "%lld ms after 1970", (long long)wall_ms);
        return;
    }
    snprintf(buf, n, "%04u-%02u-%02u %02u:%02u:%02u.%03u", local.wYear, local.wMonth, local.wDay, local.wHour, local.wMinute,
             local.wSecond, local.wMilliseconds);
}

static void plat_hostname(char *buf, size_t n) {
    DWORD len = (DWORD)n;
    if (!GetComputerNameExA(ComputerNameDnsHostname, buf, &len) || !buf[0]) snprintf(buf, n, "this host");
}

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
static void start_read(stream *s) {
    memset(&s->p.ov, 0, sizeof s->p.ov);
    if (ReadFile(s->p.h, s->p.rbuf, PIPE_CHUNK, NULL, &s->p.ov) || GetLastError() == ERROR_IO_PENDING) {
        s->p.pending = 1;
        return;
    }
    close_stream(s);
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
    wchar_t *w = utf8_to_wide(s);
    if (!w) { b->failed = 1; return; }
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

/* A rank's job object: whatever is in it dies with its last handle,
   distrun's, so with distrun too, even when distrun is killed. */
static HANDLE new_rank_job(void) {
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION li;
    HANDLE job = CreateJobObjectW(NULL, NULL);
    memset(&li, 0, sizeof li);
    li.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    if (job && !SetInformationJobObject(job, JobObjectExtendedLimitInformation, &li, sizeof li)) {
        CloseHandle(job);
        job = NULL;
    }
    return job;
}

/* The rank has ended: what it started and left running goes too. */
static void end_rank_job(child *c, DWORD code) {
    if (!c->p.job) return;
    TerminateJobObject(c->p.job, code);
    CloseHandle(c->p.job);
    c->p.job = NULL;
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
    if (j->pipes) {
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
    /* in its job before it runs, so nothing it starts escapes the job */
    c->p.job = new_rank_job();
    if (!c->p.job || !AssignProcessToJobObject(c->p.job, pi.hProcess)) {
        static int warned;
        if (!warned++)
            fprintf(stderr, "distrun: cannot put rank %d in a job object (%s); what the ranks start may outlive them\n",
                    c->rank, win_error(GetLastError()));
        if (c->p.job) CloseHandle(c->p.job);
        c->p.job = NULL;
    }
    if (!RegisterWaitForSingleObject(&c->p.wait, pi.hProcess, on_process_end, c, INFINITE,
                                     WT_EXECUTEONLYONCE | WT_EXECUTEINWAITTHREAD)) {
        fprintf(stderr, "distrun: cannot watch rank %d: %s\n", c->rank, win_error(GetLastError()));
        TerminateProcess(pi.hProcess, EXIT_LAUNCH);
        end_rank_job(c, EXIT_LAUNCH);
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
    if (j->pipes) {
        c->out.open = c->err.open = 1;
        start_read(&c->out);
        start_read(&c->err);
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
   now.  SIGKILL: its job, the rank and all it started, is terminated. */
static int plat_signal_rank(child *c, int sig) {
    if (!c->p.process || c->p.exited) return 0;
    if (sig != DR_SIGKILL && GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, (DWORD)c->pid)) return 1;
    if (!c->p.job || !TerminateJobObject(c->p.job, (UINT)(128 + sig))) TerminateProcess(c->p.process, (UINT)(128 + sig));
    return 1;
}

/* Its process has ended and its pipes are drained (or given up on). */
static void finish_rank(job *j, child *c) {
    HANDLE h = c->p.process;
    j->p.draining--;
    c->p.exited = 0;
    c->p.process = NULL;             /* (before rank_ended: a restart puts its new process here) */
    rank_ended(j, c, (int)c->p.code, 0, c->p.ended_ns);
    CloseHandle(h);
}

/* When the process ended, from its exit time (rather than when distrun
   saw it: the order of failures is the order they happened in). */
static int64_t process_end_ns(HANDLE process) {
    FILETIME created, exited, kernel, user, now;
    int64_t t = plat_now_ns(), ago;
    GetSystemTimeAsFileTime(&now);
    if (!GetProcessTimes(process, &created, &exited, &kernel, &user)) return t;
    ago = (filetime_100ns(now) - filetime_100ns(exited)) * 100;
    return ago > 0 && ago < 10 * (int64_t)1000000000 ? t - ago : t;   /* (a clock step: now) */
}

/* What it wrote before it ended is in its pipes; it is finished when they
   end, or when no more comes for DRAIN_IDLE_MS (something it started keeps
   them open), or after 2 * DRAIN_READS more reads.  What it started ends
   now, with its job: so its pipes end too. */
static void process_ended(job *j, child *c) {
    if (!c->p.process || c->p.exited) return;
    if (c->p.wait) { UnregisterWaitEx(c->p.wait, INVALID_HANDLE_VALUE); c->p.wait = NULL; }
    if (!GetExitCodeProcess(c->p.process, &c->p.code)) c->p.code = EXIT_LAUNCH;
    c->p.ended_ns = process_end_ns(c->p.process);
    end_rank_job(c, c->p.code);
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
        close_stream(s);                    /* the pipe's end: the rank and all it started closed it */
    } else {
        if (n > 0) feed(s, s->p.rbuf, n);
        if (c->p.exited) {
            c->p.drain_until = plat_now_ms() + DRAIN_IDLE_MS;
            if (++c->p.drain_reads >= 2 * DRAIN_READS) { finish_rank(j, c); return; }
        }
        start_read(s);
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

/* ---- files (--log-dir, --trace) ----------------------------------------- */
/* (The rest, which the trace merge needs too, is with the trace files.) */

/* As on POSIX: each directory on the way, then the last must be one. */
static int plat_make_dirs(const char *path) {
    wchar_t *w = utf8_to_wide(path);
    DWORD attr;
    int err = 0;
    if (!w) return -1;
    for (wchar_t *q = w + 1;; q++) {
        wchar_t ch = *q;
        if (ch != L'/' && ch != L'\\' && ch != 0) continue;
        *q = 0;
        if (_wmkdir(w) != 0 && errno != EEXIST) err = errno;
        *q = ch;
        if (!ch) break;
    }
    attr = GetFileAttributesW(w);
    free(w);
    if (attr != INVALID_FILE_ATTRIBUTES && (attr & FILE_ATTRIBUTE_DIRECTORY)) return 0;
    errno = err ? err : ENOTDIR;
    return -1;
}

/* ---- setting up --------------------------------------------------------- */

static int plat_init(job *j) {
    DWORD mode;
    j->stdin_tty = GetConsoleMode(GetStdHandle(STD_INPUT_HANDLE), &mode) != 0;
    win_port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    win_done = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!win_port || !win_done) {
        fprintf(stderr, "distrun: cannot set up: %s\n", win_error(GetLastError()));
        return -1;
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
#endif /* DISTRUN_TRACE_READER_ONLY */
