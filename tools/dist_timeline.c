/* dist_timeline - draw a dist trace as a timeline: a page to open in a browser.

   usage: dist_timeline [-o OUT] [--svg] TRACE.json
          dist_timeline [-o OUT] [--svg] DIR

   TRACE.json is a trace in Chrome's trace event format: the one distrun
   merges when run with --trace DIR (DIR/trace.json), or one rank's
   (DIR/rank<RANK>.trace.json).

   DIR is a directory of rank files that no distrun merged: those of a job
   started otherwise (dist_spawn's ranks, say) with DIST_TRACE=DIR.
   dist_timeline merges DIR/rank0.trace.json, rank1, ... up to the highest
   rank whose file is there into DIR/trace.json, as distrun does and with
   its code (the same file, the same otherData, written under a temporary
   name and renamed; a rank's file missing below the highest, or one that
   does not read, is named on stderr, and the others merged), says so on
   one line in distrun's words ("dist_timeline: trace of 4 ranks merged
   into DIR/trace.json"), and draws DIR/trace.json.  A directory without a
   rank's file is an error.

   OUT (default: TRACE with .html for .json; for DIR, DIR/trace.html)
   is a self-contained HTML page holding one SVG, which needs no JavaScript:
   - a row per thread of each process, labeled with their names (for dist:
     a process per rank, and in it a row for the collectives and one for the
     point-to-point operations of each communicator), processes in their
     sort order;
   - a time axis from the first event, its ticks in µs, ms or s;
   - each complete event ("ph":"X") a box from its start to its end,
     colored by its name (a fixed palette: each collective its own color,
     send and recv grey, anything else light brown), outlined red when its
     "result" is not "ok"; its tooltip (hover) gives its name, seq, sizes,
     start, duration and result, and the rest of its args;
   - each instant event ("i") a small black mark (dist's "dropped": events
     the rank's buffer had no room for);
   - a legend of the names drawn.
   --svg writes the SVG alone (OUT default: TRACE with .svg).

   Traces are read with distrun.c's JSON reader (strict; an error names the
   line and column) and merged with its merge, which this file includes:
   dist_timeline is built from tools/dist_timeline.c and tools/distrun.c
   side by side.  It reads the
   trace twice over its text, once to find the rows and the time span, once
   to draw, and keeps no events in memory.

   exit status: 0; 1 when the trace cannot be read or the output written
   (a sentence on stderr names the file and where), or DIR holds no rank's
   file or none that merged (it names DIR); 2 for bad arguments.

      cc -std=c11 -O2 -Wall -Wextra -Wpedantic -o build/dist_timeline tools/dist_timeline.c -lm
*/
#define DISTRUN_TRACE_READER_ONLY
#include "distrun.c"

/* ---- geometry (px) and palette -------------------------------------------- */

enum {
    LABEL_W = 210,          /* the row labels */
    PLOT_W = 1100,          /* the time axis */
    RIGHT_PAD = 20,
    HEAD_H = 64,            /* the title line, the legend, the tick labels */
    PROC_H = 18,            /* a process's name, above its rows */
    ROW_H = 20,             /* a thread's row */
    BOX_H = 14,             /* a box in it */
    LABEL_CHARS = 34        /* longer names are cut, with "..." */
};

/* Each name its own color; names not here get OTHER_COLOR. */
static const struct { const char *name, *color; } palette[] = {
    { "all_reduce", "#1f77b4" },     { "broadcast", "#ff7f0e" },  { "reduce", "#2ca02c" },
    { "all_gather", "#9467bd" },     { "gather", "#8c564b" },     { "reduce_scatter", "#17becf" },
    { "scatter", "#bcbd22" },        { "all_to_all", "#e377c2" }, { "barrier", "#393b79" },
    { "send", "#8f8f8f" },           { "recv", "#b8b8b8" },
};
#define NPALETTE ((int)(sizeof palette / sizeof palette[0]))
#define OTHER_COLOR   "#c49c94"
#define FAILED_COLOR  "#d62728"     /* the outline of an event whose result is not "ok" */
#define INSTANT_COLOR "#000000"

/* ---- what the first reading finds ------------------------------------------- */

typedef struct row {
    double pid, tid;
    char *name;             /* thread_name, or NULL */
    double sort;            /* thread_sort_index, else tid */
    int has_sort;
    const char *proc_name;  /* its process's, once the rows are known (or NULL) */
    double proc_sort;       /* its process's sort index */
    double y;               /* its top, once laid out */
} row;

typedef struct process {
    double pid;
    char *name;             /* process_name, or NULL */
    double sort;            /* process_sort_index, else pid */
} process;

typedef struct timeline {
    const char *path;
    row *rows;
    size_t nrows, rows_cap;
    process *procs;
    size_t nprocs, procs_cap, last_proc;
    double t0, t1;          /* the first event's start, the last one's end (µs) */
    size_t nevents;         /* events drawn ("X" and "i") */
    int used[NPALETTE + 1]; /* names drawn (the last: others) */
    int failed, instants;   /* some event failed; some instant events */
    double world;           /* otherData's, or -1 */
    char missing[256];      /* otherData's "missing" ranks, as text ("" none) */
    char *scratch;          /* decoded strings */
    size_t scratch_cap;
    FILE *out;
} timeline;

static const char *out_path;    /* the output being written: removed on an error */

static void die(const char *fmt, ...) {
    va_list ap;
    fputs("dist_timeline: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (out_path) remove(out_path);
    exit(1);
}

static void *grow(void *p, size_t *cap, size_t size) {
    size_t want = *cap ? *cap * 2 : 64;
    void *np = want > ((size_t)-1) / size ? NULL : realloc(p, want * size);
    if (!np) die("out of memory (%llu items of %llu bytes)", (unsigned long long)want, (unsigned long long)size);
    *cap = want;
    return np;
}

/* s decoded, in t's scratch (valid until the next call). */
static const char *decoded(timeline *t, const json_string *s) {
    if (s->len + 1 > t->scratch_cap) {
        free(t->scratch);
        t->scratch_cap = s->len + 1;
        if (!(t->scratch = malloc(t->scratch_cap))) die("out of memory (a string of %llu bytes)", (unsigned long long)s->len);
    }
    json_decode(s, t->scratch);
    return t->scratch;
}

static char *copy_string(timeline *t, const json_string *s) {
    const char *d = decoded(t, s);
    char *c = malloc(strlen(d) + 1);
    if (!c) die("out of memory");
    return strcpy(c, d);
}

/* (A process's metadata comes together: the last one found is tried first.) */
static process *find_process(timeline *t, double pid) {
    if (t->last_proc < t->nprocs && t->procs[t->last_proc].pid == pid) return &t->procs[t->last_proc];
    for (t->last_proc = 0; t->last_proc < t->nprocs; t->last_proc++)
        if (t->procs[t->last_proc].pid == pid) return &t->procs[t->last_proc];
    if (t->nprocs == t->procs_cap) t->procs = grow(t->procs, &t->procs_cap, sizeof *t->procs);
    t->procs[t->nprocs] = (process){ pid, NULL, pid };
    return &t->procs[t->nprocs++];
}

/* Rows are collected as they come (one more each time the (pid, tid) is
   not the last one's), then sorted and made unique. */
static row *add_row(timeline *t, double pid, double tid) {
    row *last = t->nrows ? &t->rows[t->nrows - 1] : NULL;
    if (last && last->pid == pid && last->tid == tid) return last;
    if (t->nrows == t->rows_cap) t->rows = grow(t->rows, &t->rows_cap, sizeof *t->rows);
    t->rows[t->nrows] = (row){ pid, tid, NULL, tid, 0, NULL, pid, 0 };
    return &t->rows[t->nrows++];
}

static int compare_row_keys(const void *pa, const void *pb) {
    const row *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

static row *find_row(timeline *t, double pid, double tid) {
    row key = { pid, tid, NULL, 0, 0, NULL, 0, 0 };
    return bsearch(&key, t->rows, t->nrows, sizeof *t->rows, compare_row_keys);
}

/* Member `key` of the args object that begins at `args`: a string into *s
   or a number into *v.  1 when found so, 0 when not, -1 on an error. */
static int arg_of(json_reader *r, const char *args, const char *key, json_string *s, double *v) {
    json_iter it;
    json_string k;
    int more, found = 0;
    if (!args) return 0;
    r->p = args;
    if (json_open(r, &it, '{') != 0) return -1;
    while ((more = json_next(r, &it, &k)) > 0) {
        int c = json_peek(r);
        if (json_string_is(&k, key) && s && c == '"') found = json_read_string(r, s) == 0;
        else if (json_string_is(&k, key) && v && (c == '-' || json_is_digit(c))) found = json_read_number(r, v) == 0;
        else if (json_skip(r) != 0) return -1;
        if (r->error[0]) return -1;
    }
    return more < 0 ? -1 : found;
}

static int palette_index(const json_string *name) {
    for (int i = 0; i < NPALETTE; i++)
        if (json_string_is(name, palette[i].name)) return i;
    return NPALETTE;
}

/* Its result is there and not "ok". */
static int event_failed(json_reader *r, const trace_event *ev) {
    json_string result;
    const char *at = r->p;
    int rc = arg_of(r, ev->args, "result", &result, NULL);
    r->p = at;
    return rc == 1 && !json_string_is(&result, "ok");
}

/* ---- the first reading: names, rows, the time span ---------------------------- */

static int note_metadata(json_reader *r, const trace_event *ev, timeline *t) {
    json_string s;
    double v;
    int is_process = json_string_is(&ev->name, "process_name") || json_string_is(&ev->name, "process_sort_index");
    int is_name = json_string_is(&ev->name, "process_name") || json_string_is(&ev->name, "thread_name");
    int is_sort = json_string_is(&ev->name, "process_sort_index") || json_string_is(&ev->name, "thread_sort_index");
    int rc = is_name ? arg_of(r, ev->args, "name", &s, NULL) : is_sort ? arg_of(r, ev->args, "sort_index", NULL, &v) : 0;
    if (rc <= 0) return rc;
    if (is_process) {
        process *p = find_process(t, ev->pid);
        if (is_name) { free(p->name); p->name = copy_string(t, &s); }
        else p->sort = v;
    } else {
        row *w = add_row(t, ev->pid, ev->tid);
        if (is_name) { free(w->name); w->name = copy_string(t, &s); }
        else { w->sort = v; w->has_sort = 1; }
    }
    return 0;
}

static int note_event(json_reader *r, const trace_event *ev, void *user) {
    timeline *t = user;
    const char *after = r->p;
    int rc = 0;
    if (trace_is_meta(ev)) {
        rc = note_metadata(r, ev, t);
    } else if (json_string_is(&ev->ph, "X") || json_string_is(&ev->ph, "i") || json_string_is(&ev->ph, "I")) {
        double end = ev->ts + (ev->has_dur ? ev->dur : 0);
        if (t->nevents == 0 || ev->ts < t->t0) t->t0 = ev->ts;
        if (t->nevents == 0 || end > t->t1) t->t1 = end;
        t->nevents++;
        add_row(t, ev->pid, ev->tid);
        if (json_string_is(&ev->ph, "X")) {
            t->used[palette_index(&ev->name)] = 1;
            t->failed |= event_failed(r, ev);
        } else {
            t->instants = 1;
        }
    }
    r->p = after;
    return r->error[0] ? -1 : rc;     /* (event_failed's error: args that is not an object) */
}

static int compare_process_pids(const void *pa, const void *pb) {
    const process *a = pa, *b = pb;
    return a->pid < b->pid ? -1 : a->pid > b->pid;
}

/* Rows made unique (a row's name and sort index kept from whichever copy
   had them), each with its process's name and sort index. */
static void unique_rows(timeline *t) {
    size_t k = 0;
    if (t->nrows > 0) qsort(t->rows, t->nrows, sizeof *t->rows, compare_row_keys);
    for (size_t i = 0; i < t->nrows; i++) {
        row *w = &t->rows[i];
        if (k > 0 && compare_row_keys(&t->rows[k - 1], w) == 0) {
            row *keep = &t->rows[k - 1];
            if (!keep->name) keep->name = w->name;
            else free(w->name);
            if (!keep->has_sort && w->has_sort) { keep->sort = w->sort; keep->has_sort = 1; }
            continue;
        }
        t->rows[k++] = *w;
    }
    t->nrows = k;
    if (t->nprocs > 0) qsort(t->procs, t->nprocs, sizeof *t->procs, compare_process_pids);
    for (size_t i = 0; i < t->nrows; i++) {
        process key = { t->rows[i].pid, NULL, 0 }, *p = t->nprocs ? bsearch(&key, t->procs, t->nprocs, sizeof key, compare_process_pids) : NULL;
        t->rows[i].proc_name = p ? p->name : NULL;
        t->rows[i].proc_sort = p ? p->sort : t->rows[i].pid;
    }
}

/* otherData: "world", and "missing" as "1, 3". */
static int note_other_data(json_reader *r, const char *other, timeline *t) {
    json_iter it, list;
    json_string k;
    int more, inner;
    double v;
    t->world = -1;
    if (!other) return 0;
    if (trace_object_number(r, other, "world", &t->world) < 0) return -1;
    r->p = other;
    if (json_open(r, &it, '{') != 0) return -1;
    while ((more = json_next(r, &it, &k)) > 0) {
        if (!json_string_is(&k, "missing") || json_peek(r) != '[') { if (json_skip(r) != 0) return -1; continue; }
        if (json_open(r, &list, '[') != 0) return -1;
        while ((inner = json_next(r, &list, NULL)) > 0) {
            size_t len = strlen(t->missing);
            int c = json_peek(r);
            if (c != '-' && !json_is_digit(c)) { if (json_skip(r) != 0) return -1; continue; }
            if (json_read_number(r, &v) != 0) return -1;
            if (len + 24 < sizeof t->missing) snprintf(t->missing + len, sizeof t->missing - len, "%s%.15g", len ? ", " : "", v);
            else if (len + 4 < sizeof t->missing && strcmp(t->missing + len - 3, "...") != 0) strcat(t->missing, "...");
        }
        if (inner < 0) return -1;
    }
    return more < 0 ? -1 : 0;
}

/* ---- layout --------------------------------------------------------------------- */

static int compare_display(const void *pa, const void *pb) {
    const row *a = *(row *const *)pa, *b = *(row *const *)pb;
    if (a->proc_sort != b->proc_sort) return a->proc_sort < b->proc_sort ? -1 : 1;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->sort != b->sort) return a->sort < b->sort ? -1 : 1;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

/* The rows in display order (each process's name line above its rows), their
   y set; returns the order, and the height in *height. */
static row **lay_out(timeline *t, double *height) {
    row **order = malloc((t->nrows ? t->nrows : 1) * sizeof *order);
    double y = HEAD_H;
    if (!order) die("out of memory (%llu rows)", (unsigned long long)t->nrows);
    for (size_t i = 0; i < t->nrows; i++) order[i] = &t->rows[i];
    if (t->nrows > 0) qsort(order, t->nrows, sizeof *order, compare_display);
    for (size_t i = 0; i < t->nrows; i++) {
        if (i == 0 || order[i]->pid != order[i - 1]->pid) y += PROC_H;
        order[i]->y = y;
        y += ROW_H;
    }
    *height = y + 10;
    return order;
}

static double x_of(const timeline *t, double ts) { return LABEL_W + (ts - t->t0) / (t->t1 - t->t0) * PLOT_W; }

/* ---- writing -------------------------------------------------------------------- */

/* p[0..n) as XML text (also fit for an attribute's value): the five
   characters escaped, control characters (which XML 1.0 forbids) as spaces. */
static void put_text(FILE *f, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(c < 0x20 && c != '\n' && c != '\t' ? ' ' : c, f); break;
        }
    }
}

static void put_decoded(timeline *t, FILE *f, const json_string *s) {
    const char *d = decoded(t, s);
    put_text(f, d, strlen(d));
}

/* A label: cut to LABEL_CHARS characters (not inside a UTF-8 sequence). */
static void put_label(FILE *f, const char *s) {
    size_t n = 0, chars = 0;
    while (s[n] && chars < LABEL_CHARS) {
        n++;
        while ((s[n] & 0xC0) == 0x80) n++;
        chars++;
    }
    put_text(f, s, n);
    if (s[n]) fputs("...", f);
}

/* A time in µs, in the unit that reads best. */
static void format_time(double us, char *buf, size_t n) {
    double a = fabs(us);
    if (a >= 1e6) snprintf(buf, n, "%.6g s", us / 1e6);
    else if (a >= 1e3) snprintf(buf, n, "%.6g ms", us / 1e3);
    else snprintf(buf, n, "%.6g \xC2\xB5s", us);
}

/* Ticks 1, 2 or 5 times a power of ten apart, some 10 over the span, each
   labeled in one unit (µs, ms or s) with the decimals its step needs. */
static void put_axis(const timeline *t, FILE *f, double height) {
    double span = t->t1 - t->t0, raw = span / 10, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
    double unit = step >= 1e6 ? 1e6 : step >= 1e3 ? 1e3 : 1;
    const char *uname = unit == 1e6 ? "s" : unit == 1e3 ? "ms" : "\xC2\xB5s";
    int decimals = step / unit >= 1 ? 0 : (int)ceil(-log10(step / unit) - 1e-9);
    fputs("<g class=\"axis\" font-size=\"11\" fill=\"#333333\">\n", f);
    for (int k = 0; k * step <= span * (1 + 1e-9); k++) {
        double x = x_of(t, t->t0 + k * step);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e2e2e2\" shape-rendering=\"crispEdges\"/>",
                x, HEAD_H - 4, x, height - 10);
        if (k == 0) fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">0</text>\n", x, HEAD_H - 8);
        else fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%.*f %s</text>\n", x, HEAD_H - 8, decimals, k * step / unit, uname);
    }
    fputs("</g>\n", f);
}

/* Where the legend's next entry goes after one labeled `label` at x (a
   guess at the text's width: 11px sans-serif is some 6 px a character). */
static double legend_next(double x, const char *label) { return x + 30 + 6.2 * (double)strlen(label); }

static void put_legend(const timeline *t, FILE *f) {
    double x = LABEL_W;
    fputs("<g class=\"legend\" font-size=\"11\" shape-rendering=\"crispEdges\">\n", f);
    for (int i = 0; i <= NPALETTE; i++) {
        const char *name = i < NPALETTE ? palette[i].name : "other", *color = i < NPALETTE ? palette[i].color : OTHER_COLOR;
        if (!t->used[i]) continue;
        fprintf(f, "<rect x=\"%.0f\" y=\"28\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"38\">%s</text>\n",
                x, color, x + 16, name);
        x = legend_next(x, name);
    }
    if (t->failed) {
        fprintf(f, "<rect x=\"%.0f\" y=\"29\" width=\"10\" height=\"10\" fill=\"#ffffff\" stroke=\"%s\" stroke-width=\"2\"/>"
                   "<text x=\"%.0f\" y=\"38\">failed (result not ok)</text>\n", x + 1, FAILED_COLOR, x + 16);
        x = legend_next(x, "failed (result not ok)");
    }
    if (t->instants)
        fprintf(f, "<path d=\"M%.0f 30 h10 l-5 8 z\" fill=\"%s\"/><text x=\"%.0f\" y=\"38\">instant</text>\n", x, INSTANT_COLOR, x + 16);
    fputs("</g>\n", f);
}

/* The title line, each process's name line, each row's label. */
static void put_rows(timeline *t, FILE *f, row **order, double width) {
    char span[32];
    size_t nproc = 0;
    for (size_t i = 0; i < t->nrows; i++) nproc += i == 0 || order[i]->pid != order[i - 1]->pid;
    format_time(t->t1 - t->t0, span, sizeof span);
    fputs("<text x=\"6\" y=\"16\" font-size=\"13\" font-weight=\"bold\">", f);
    put_text(f, t->path, strlen(t->path));
    fprintf(f, ": %llu events, %llu process%s", (unsigned long long)t->nevents, (unsigned long long)nproc, nproc == 1 ? "" : "es");
    if (t->nevents > 0) fprintf(f, ", %s", span);
    if (t->world >= 0) fprintf(f, ", world %.15g", t->world);
    if (t->missing[0]) { fputs(", missing ranks: ", f); put_text(f, t->missing, strlen(t->missing)); }
    fputs("</text>\n<g class=\"rows\" font-size=\"11\">\n", f);
    for (size_t i = 0; i < t->nrows; i++) {
        row *w = order[i];
        char num[64];
        if (i == 0 || w->pid != order[i - 1]->pid) {
            if (i > 0) fputs("</g>\n", f);
            fprintf(f, "<g class=\"process\" data-pid=\"%.15g\">\n", w->pid);
            fprintf(f, "<rect x=\"0\" y=\"%.0f\" width=\"%.0f\" height=\"1\" fill=\"#999999\" shape-rendering=\"crispEdges\"/>", w->y - PROC_H, width);
            fprintf(f, "<text x=\"4\" y=\"%.0f\" font-weight=\"bold\">", w->y - 5);
            snprintf(num, sizeof num, "process %.15g", w->pid);
            put_label(f, w->proc_name ? w->proc_name : num);
            fputs("</text>\n", f);
        }
        fprintf(f, "<g class=\"thread\" data-tid=\"%.15g\"><text x=\"14\" y=\"%.0f\">", w->tid, w->y + 14);
        snprintf(num, sizeof num, "thread %.15g", w->tid);
        put_label(f, w->name ? w->name : num);
        fputs("</text></g>\n", f);
    }
    if (t->nrows > 0) fputs("</g>\n", f);
    fputs("</g>\n", f);
}

/* The tooltip: name #seq, the row, start and duration, the other args as
   "key value", the result. */
static int put_tooltip(json_reader *r, const trace_event *ev, timeline *t, const row *w, FILE *f) {
    json_iter it;
    json_string k, s, result = { NULL, 0, 0 };
    double seq;
    char a[32], b[32];
    int more, first = 1;
    fputs("<title>", f);
    if (ev->name.raw) put_decoded(t, f, &ev->name);
    else fputs("(no name)", f);
    if (arg_of(r, ev->args, "seq", NULL, &seq) == 1) fprintf(f, " #%.15g", seq);
    fputc('\n', f);
    if (w->proc_name) { put_text(f, w->proc_name, strlen(w->proc_name)); fputs(w->name ? ", " : "", f); }
    if (w->name) put_text(f, w->name, strlen(w->name));
    format_time(ev->ts - t->t0, a, sizeof a);
    format_time(ev->dur, b, sizeof b);
    if (ev->has_dur) fprintf(f, "\nstart %s, duration %s", a, b);
    else fprintf(f, "\nat %s", a);
    if (ev->args) {
        r->p = ev->args;
        if (json_open(r, &it, '{') != 0) return -1;
        while ((more = json_next(r, &it, &k)) > 0) {
            const char *v0;
            int is_string = json_peek(r) == '"';
            v0 = r->p;
            if (json_string_is(&k, "result") && is_string) { if (json_read_string(r, &result) != 0) return -1; continue; }
            if (is_string ? json_read_string(r, &s) != 0 : json_skip(r) != 0) return -1;
            if (json_string_is(&k, "seq")) continue;
            fputs(first ? "\n" : ", ", f);
            first = 0;
            put_decoded(t, f, &k);
            fputc(' ', f);
            if (is_string) put_decoded(t, f, &s);
            else put_text(f, v0, (size_t)(r->p - v0));
        }
        if (more < 0) return -1;
    }
    if (result.raw) { fputs("\nresult ", f); put_decoded(t, f, &result); }
    fputs("</title>", f);
    return 0;
}

static int draw_event(json_reader *r, const trace_event *ev, void *user) {
    timeline *t = user;
    const char *after = r->p;
    FILE *f = t->out;
    int is_box = json_string_is(&ev->ph, "X"), rc = 0;
    row *w;
    if (!is_box && !json_string_is(&ev->ph, "i") && !json_string_is(&ev->ph, "I")) return 0;
    if (!(w = find_row(t, ev->pid, ev->tid))) return 0;     /* (the first reading found them all) */
    if (is_box) {
        int k = palette_index(&ev->name);
        /* on whole pixels (crisp: a short call is a pixel of its own color,
           not a blend); a pixel off the end of a box that has them to
           spare, so that calls back to back stay apart; at least a pixel */
        double x = floor(x_of(t, ev->ts) + 0.5), wd = floor(x_of(t, ev->ts + ev->dur) + 0.5) - x;
        wd = wd >= 3 ? wd - 1 : wd < 1 ? 1 : wd;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%d\" fill=\"%s\" shape-rendering=\"crispEdges\"", x,
                w->y + (ROW_H - BOX_H) / 2, wd, BOX_H, k < NPALETTE ? palette[k].color : OTHER_COLOR);
        if (event_failed(r, ev)) fprintf(f, " stroke=\"%s\" stroke-width=\"2\"", FAILED_COLOR);
    } else {
        fprintf(f, "<path d=\"M%.2f %.0f l-4 -7 h8 z\" fill=\"%s\"", x_of(t, ev->ts), w->y + ROW_H - 3, INSTANT_COLOR);
    }
    fputc('>', f);
    rc = put_tooltip(r, ev, t, w, f);
    fputs(is_box ? "</rect>\n" : "</path>\n", f);
    r->p = after;
    return rc;
}

static void put_svg(timeline *t, json_reader *r, FILE *f) {
    double height, width = LABEL_W + PLOT_W + RIGHT_PAD;
    row **order = lay_out(t, &height);
    const char *other;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\">\n", width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", width, height);
    put_rows(t, f, order, width);
    put_axis(t, f, height);
    put_legend(t, f);
    fputs("<g class=\"events\" shape-rendering=\"crispEdges\">\n", f);
    r->p = r->text;
    r->depth = 0;
    if (trace_walk(r, draw_event, t, &other) != 0) die("%s: %s", t->path, r->error);
    fputs("</g>\n</svg>\n", f);
    free(order);
}

/* ---- main ----------------------------------------------------------------------- */

static void usage(FILE *f) {
    fputs("usage: dist_timeline [-o OUT] [--svg] TRACE.json\n"
          "       dist_timeline [-o OUT] [--svg] DIR\n"
          "\n"
          "Draw a trace (distrun --trace DIR: DIR/trace.json, or one rank's\n"
          "DIR/rank<RANK>.trace.json) as a timeline: an HTML page with an SVG, a row\n"
          "per thread of each process, each operation a box colored by its name.\n"
          "Given DIR, first merge its rank files into DIR/trace.json as distrun does\n"
          "(for a job started without distrun), then draw that.\n"
          "\n"
          "  -o OUT      write it to OUT (default: TRACE with .html, or .svg)\n"
          "  --svg       write the SVG alone\n"
          "  -h, --help  show this help\n", f);
}

/* TRACE with .json (if it ends so) replaced by ext. */
static char *default_out(const char *trace, const char *ext) {
    size_t n = strlen(trace);
    char *out = malloc(n + strlen(ext) + 1);
    if (!out) die("out of memory");
    if (n >= 5 && strcmp(trace + n - 5, ".json") == 0) n -= 5;
    memcpy(out, trace, n);
    strcpy(out + n, ext);
    return out;
}

/* path[0..n), n > 1, ends in a separator that can go (not that of "/", nor
   of Windows' "C:\"). */
static int ends_in_separator(const char *path, size_t n) {
#ifdef _WIN32
    return (path[n - 1] == '/' || path[n - 1] == '\\') && path[n - 2] != ':';
#else
    return path[n - 1] == '/';
#endif
}

/* DIR's rank files merged into DIR/trace.json, as distrun merges them (one
   line on stderr says how); its path.  Exits when there is nothing to draw. */
static char *merge_dir(const char *arg) {
    size_t n = strlen(arg);
    char *dir = malloc(n + 1), *trace;
    int last;
    if (!dir) die("out of memory");
    memcpy(dir, arg, n + 1);
    while (n > 1 && ends_in_separator(dir, n)) dir[--n] = '\0';      /* "DIR/" as "DIR" */
    last = plat_trace_ranks(dir);
    if (last < 0) die("cannot list the directory %s: %s", dir, strerror(errno));
    if (last == 0) die("no rank's trace file (rank<RANK>.trace.json) in the directory %s: nothing to merge", dir);
    if (last > 65536)       /* (dist's largest world: a stray file must not make it look for a billion) */
        die("the directory %s holds rank%d.trace.json, past the largest world dist forms (65536 ranks)", dir, last - 1);
    if (merge_rank_traces("dist_timeline", dir, last, last) != 0) exit(1);
    if (!(trace = trace_path(dir, -1))) die("out of memory");
    free(dir);
    return trace;
}

static char *read_trace(const char *path, size_t *len) {
    char *text;
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s: %s", path, strerror(errno));
    if (json_read_file(f, &text, len) != 0) die("cannot read %s: %s", path, strerror(errno));
    fclose(f);
    return text;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out_arg = NULL, *other;
    char *out, *text, *merged = NULL;
    int svg = 0, ok;
    size_t len;
    timeline t;
    json_reader r;
    FILE *f;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 == argc) { fputs("dist_timeline: -o needs a file name\n", stderr); return 2; }
        else if (strcmp(argv[i], "-o") == 0) out_arg = argv[++i];
        else if (strcmp(argv[i], "--svg") == 0) svg = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "dist_timeline: unknown option '%s'\n", argv[i]); usage(stderr); return 2; }
        else if (!in) in = argv[i];
        else { fprintf(stderr, "dist_timeline: one trace at a time ('%s', then '%s')\n", in, argv[i]); return 2; }
    }
    if (!in) { usage(stderr); return 2; }
    if (plat_is_dir(in)) in = merged = merge_dir(in);
    memset(&t, 0, sizeof t);
    t.path = in;
    text = read_trace(in, &len);
    json_init(&r, text, len);
    if (trace_walk(&r, note_event, &t, &other) != 0 || note_other_data(&r, other, &t) != 0) die("%s: %s", in, r.error);
    unique_rows(&t);
    if (t.nevents == 0 || !(t.t1 > t.t0)) t.t1 = t.t0 + 1;     /* (nothing, or a point: any scale will do) */
    out = out_arg ? NULL : default_out(in, svg ? ".svg" : ".html");
    if (!(f = t.out = fopen(out ? out : out_arg, "wb"))) die("cannot create %s: %s", out ? out : out_arg, strerror(errno));
    out_path = out ? out : out_arg;
    if (svg) {
        fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    } else {
        fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>dist timeline: ", f);
        put_text(f, in, strlen(in));
        fputs("</title>\n<style>body { margin: 8px; background: #ffffff; }</style>\n</head>\n<body>\n", f);
    }
    put_svg(&t, &r, f);
    if (!svg) fputs("</body>\n</html>\n", f);
    ok = !ferror(f);
    if (fclose(f) != 0) ok = 0;
    if (!ok) die("cannot write %s: %s", out_path, strerror(errno));
    for (size_t i = 0; i < t.nrows; i++) free(t.rows[i].name);
    for (size_t i = 0; i < t.nprocs; i++) free(t.procs[i].name);
    free(t.rows);
    free(t.procs);
    free(t.scratch);
    free(out);
    free(text);
    free(merged);
    return 0;
}
