#!/usr/bin/env bash
# TIMEOUT: 120
# tests/test_trace.sh - DIST_TRACE's files merged by distrun, drawn by
# dist_timeline, and the drawing seen in a browser.
#
# Most rank files are synthetic, written here in the format dist.h writes
# (tools/distrun.c, "tracing"), their clocks already aligned: 4
# ranks, each doing all_reduce #1..#20 of 8 floats, where rank 2 comes
# 2 ms late to every one (its boxes start later; every rank's ends at the
# same time); sends and recvs; a broadcast on a group; an instant event;
# one recv that fails (DIST_ERR_TIMEOUT).
#   (a) the merge: `distrun -n 4 --trace DIR` runs ranks that copy those
#       files into DIR; DIR/trace.json is JSON with every event of every
#       file once, metadata first then by ts, and otherData right.  A rank
#       file missing and one cut short are named on stderr (the bad one with
#       its line and column) and in "missing", the others merged; DIST_TRACE
#       from distrun's environment does the same as --trace; a failed job is
#       merged too, before its summary; a file left by an earlier job is
#       not taken for this one's.
#   (a2) the merge without distrun (ranks started otherwise, dist_spawn's):
#       `dist_timeline DIR` on a fresh DIR holding the same 4 files: exit 0,
#       one line in distrun's words ("dist_timeline: trace of 4 ranks merged
#       into DIR/trace.json"), DIR/trace.json right (as in (a)) and byte for
#       byte the one distrun merged in (a), no temporary file left, and
#       drawn into DIR/trace.html (checked as in (b)), or DIR/trace.svg with
#       --svg.  Rank 2's file missing (0, 1 and 3 there): exit 0, the line
#       names rank 2 missing as distrun does, 3 ranks merged.  An empty
#       DIR: exit 1, one sentence naming DIR, nothing written.
#   (b) the page: dist_timeline writes HTML whose SVG parses as XML, with 4
#       process rows, a box per event and the failed one outlined;
#       --svg writes the SVG alone; a bad trace is an error that names the
#       file, line and column.
#   (c) the picture: headless Chromium renders the page; the screenshot
#       (a PNG, decoded here) has the all_reduce color in 4 horizontal
#       bands, one per rank, rank 2's starting later than the others', and
#       the red outline in rank 1's rows.  The same check on a trace where
#       rank 2 is on time must fail, for that reason (the check can fail).
#       Without chromium (`make deps` installs it) this part cannot run: the
#       test then ends as a skip (exit 77) after (a) and (b), never a pass.
#   (d) a real job: 4 ranks of dist.h (built here) under distrun --trace,
#       20 rounds of all_reduce and 1 ms of work, rank 2 sleeping 30 ms (30 x
#       DIST_TIMEOUT_SCALE: well above what a loaded 2-core machine's
#       scheduler adds, some 4 ms with 4 ranks on it) more
#       before each all_reduce: merged whole; the clocks line up (by the
#       merged timestamps no all_reduce ends before every rank began it);
#       rank 2 enters its all_reduces 30 ms after the others (the median round); drawn and
#       rendered, its late arrival visible in the screenshot.
# Builds dist_timeline (make) when it is missing or old; needs python3.
set -u
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DISTRUN=${DISTRUN:-$BUILD_DIR/distrun}
case $DISTRUN in /*) ;; *) DISTRUN=$PWD/$DISTRUN ;; esac
TIMELINE=$BUILD_DIR/dist_timeline
case $TIMELINE in /*) ;; *) TIMELINE=$PWD/$TIMELINE ;; esac
scale=${DIST_TIMEOUT_SCALE:-1}
limit=$((30 * scale))
fails=0 checks=0
T=$(mktemp -d "${TMPDIR:-/tmp}/test_trace.XXXXXX")
trap 'rm -rf "$T"' EXIT

pass() { checks=$((checks + 1)); echo "ok   $1"; }
fail() {
    checks=$((checks + 1)) fails=$((fails + 1))
    echo "FAIL $1"
    [ -s "$T/out" ] && sed 's/^/     | /' "$T/out" | tail -n 20
    [ -s "$T/err" ] && sed 's/^/     ! /' "$T/err" | tail -n 20
}
# check WHAT CMD...: on a pass, what CMD printed is shown too (the measurements)
check() {
    local what=$1; shift
    if "$@" > "$T/out" 2> "$T/err"; then pass "$what"; sed 's/^/     | /' "$T/out" | tail -n 8; else fail "$what"; fi
}

command -v python3 > /dev/null 2>&1 || { echo "FAIL python3 is needed (the checks are written in it)"; exit 1; }
[ -x "$DISTRUN" ] || { echo "FAIL no launcher at $DISTRUN (make)"; exit 1; }
"$DISTRUN" --help | grep -q -- '--trace DIR' || { echo "FAIL $DISTRUN has no --trace: older than tools/distrun.c (make)"; exit 1; }
if ! make -s BUILD="$BUILD_DIR" "$BUILD_DIR/dist_timeline" > "$T/make" 2>&1; then
    cat "$T/make"; echo "FAIL dist_timeline did not build"; exit 1
fi

# ---- the checks, in Python -------------------------------------------------
cat > "$T/tr.py" <<'PY'
"""gen DIR [--on-time] | merged TRACE SRC RANKS MISSING | real TRACE | page HTML | svg SVG | png PNG [--together PX] [--no-failed]"""
import collections, json, struct, sys, zlib
from html.parser import HTMLParser
import xml.etree.ElementTree as ET

ALL_REDUCE = (0x1F, 0x77, 0xB4)      # dist_timeline's palette
FAILED = (0xD6, 0x27, 0x28)
T0 = 8123456000.0                    # a monotonic clock's µs
PERIOD = 3000.0

def gen(d, on_time):
    """4 ranks' files, in dist.h's format, one event per line."""
    tp = T0 + 1000 + 20 * PERIOD + 500
    for r in range(4):
        ev = [
            '{"ph":"M","pid":%d,"tid":0,"name":"process_name","args":{"name":"rank %d (node-a)"}}' % (r, r),
            '{"ph":"M","pid":%d,"tid":0,"name":"process_sort_index","args":{"sort_index":%d}}' % (r, r),
            '{"ph":"M","pid":%d,"tid":0,"name":"thread_name","args":{"name":"world: collectives"}}' % r,
            '{"ph":"M","pid":%d,"tid":1,"name":"thread_name","args":{"name":"world: point-to-point"}}' % r,
        ]
        if r < 2:
            ev.append('{"ph":"M","pid":%d,"tid":2,"name":"thread_name","args":{"name":"group 1: collectives"}}' % r)
        for i in range(1, 21):
            start = T0 + 1000 + (i - 1) * PERIOD
            end = start + 2100               # every rank's ends together
            if r == 2 and not on_time:
                start += 2000                # rank 2 comes 2 ms late
            ev.append('{"ph":"X","pid":%d,"tid":0,"cat":"collective","name":"all_reduce","ts":%.3f,"dur":%.3f,'
                      '"args":{"seq":%d,"count":8,"dtype":"float32","op":"sum","bytes":32,"algo":"ring","root":-1,"result":"ok"}}'
                      % (r, start, end - start, i))
        def p2p(name, tid, ts, dur, seq, peer, tag, result="ok"):
            ev.append('{"ph":"X","pid":%d,"tid":%d,"cat":"p2p","name":"%s","ts":%.3f,"dur":%.3f,'
                      '"args":{"seq":%d,"count":4,"dtype":"int32","peer":%d,"tag":%d,"bytes":16,"result":"%s"}}'
                      % (r, tid, name, ts, dur, seq, peer, tag, result))
        if r == 0: p2p("send", 1, tp, 30, 1, 1, 7)
        if r == 1: p2p("recv", 1, tp - 10, 45, 1, 0, 7)
        if r == 1: p2p("recv", 1, tp + 200, 5000, 2, 3, 9, "DIST_ERR_TIMEOUT")   # rank 3 never sends
        if r == 2: p2p("send", 1, tp + 100, 25, 1, 3, 7)
        if r == 3: p2p("recv", 1, tp + 90, 40, 1, 2, 7)
        if r < 2:
            ev.append('{"ph":"X","pid":%d,"tid":2,"cat":"collective","name":"broadcast","ts":%.3f,"dur":80.000,'
                      '"args":{"seq":1,"count":16,"dtype":"float32","op":"none","bytes":64,"algo":"tree","root":0,"result":"ok"}}'
                      % (r, tp + 6000))
        dropped = 12 if r == 3 else 0
        if dropped:
            ev.append('{"ph":"i","pid":%d,"tid":0,"s":"t","name":"dropped","ts":%.3f,"args":{"events":%d}}' % (r, tp + 6500, dropped))
        with open("%s/rank%d.trace.json" % (d, r), "w") as f:
            f.write('{"traceEvents":[\n' + ",\n".join(ev) + '\n],\n"displayTimeUnit":"ns",\n'
                    '"otherData":{"dist_trace":1,"rank":%d,"world":4,"clock":"job","clock_error_us":12.5,"dropped":%d}}\n'
                    % (r, dropped))

def merged(path, src, ranks, missing):
    ranks = [int(x) for x in ranks.split(",") if x]
    missing = [int(x) for x in missing.split(",") if x]
    with open(path) as f:
        t = json.load(f)
    evs = t["traceEvents"]
    want, errs = [], []
    for r in ranks:
        with open("%s/rank%d.trace.json" % (src, r)) as f:
            one = json.load(f)
        want += one["traceEvents"]
        errs.append(round(one.get("otherData", {}).get("clock_error_us", -1), 3))
    key = lambda e: json.dumps(e, sort_keys=True)
    got_c, want_c = collections.Counter(map(key, evs)), collections.Counter(map(key, want))
    if got_c != want_c:
        sys.exit("events differ: %d merged, %d in the rank files; extra %s; lost %s"
                 % (len(evs), len(want), list((got_c - want_c).elements())[:3], list((want_c - got_c).elements())[:3]))
    meta = [e["ph"] == "M" for e in evs]
    if meta != sorted(meta, reverse=True):
        sys.exit("metadata events are not all first")
    ts = [e["ts"] for e in evs if e["ph"] != "M"]
    if ts != sorted(ts):
        sys.exit("events are not sorted by ts")
    if sorted({e["pid"] for e in evs}) != ranks:
        sys.exit("pids %s, not the ranks %s" % (sorted({e["pid"] for e in evs}), ranks))
    other = {"dist_trace": 1, "world": 4, "ranks": ranks, "missing": missing, "clock": "job", "clock_error_us": errs}
    if t.get("otherData") != other:
        sys.exit("otherData is %s, not %s" % (t.get("otherData"), other))
    print("%d events from ranks %s, sorted, otherData %s" % (len(evs), ranks, json.dumps(other)))

def svg_tree(text):
    a, b = text.find("<svg"), text.rfind("</svg>")
    if a < 0 or b < 0:
        sys.exit("no <svg>...</svg>")
    return ET.fromstring(text[a:b + 6])

class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.seen = [], set()
    def handle_starttag(self, tag, attrs):
        self.seen.add(tag)
        if tag not in ("meta", "br", "img", "rect", "line", "path"):
            self.stack.append(tag)
    def handle_startendtag(self, tag, attrs):
        self.seen.add(tag)
    def handle_endtag(self, tag):
        if tag in ("rect", "line", "path"):
            return
        if not self.stack or self.stack[-1] != tag:
            sys.exit("HTML: </%s> closes <%s>" % (tag, self.stack[-1] if self.stack else "nothing"))
        self.stack.pop()

def svg_checks(root):
    ns = "{http://www.w3.org/2000/svg}"
    procs = [g for g in root.iter(ns + "g") if g.get("class") == "process"]
    if len(procs) != 4:
        sys.exit("%d process rows, not 4" % len(procs))
    threads = [len([g for g in p.iter(ns + "g") if g.get("class") == "thread"]) for p in procs]
    if threads != [3, 3, 2, 2]:
        sys.exit("thread rows per process %s, not [3, 3, 2, 2]" % threads)
    events = [g for g in root.iter(ns + "g") if g.get("class") == "events"][0]
    boxes = list(events.iter(ns + "rect"))
    reds = [b for b in boxes if b.get("stroke") == "#d62728"]
    blue = [b for b in boxes if b.get("fill") == "#1f77b4"]
    if len(boxes) != 80 + 5 + 2 or len(blue) != 80 or len(reds) != 1:
        sys.exit("%d boxes (%d all_reduce, %d outlined red): not 87, 80 and 1" % (len(boxes), len(blue), len(reds)))
    tip = blue[0].find(ns + "title").text
    if not tip.startswith("all_reduce #1\nrank 0 (node-a), world: collectives\nstart 0 ") or "count 8" not in tip or "result ok" not in tip:
        sys.exit("the first all_reduce's tooltip reads %r" % tip)
    if "result DIST_ERR_TIMEOUT" not in reds[0].find(ns + "title").text:
        sys.exit("the failed box's tooltip reads %r" % reds[0].find(ns + "title").text)
    marks = list(events.iter(ns + "path"))
    if len(marks) != 1:
        sys.exit("%d instant marks, not 1" % len(marks))
    return "%d process rows, threads %s, %d boxes, 1 outlined red, 1 instant mark" % (len(procs), threads, len(boxes))

def page(path):
    text = open(path, encoding="utf-8").read()
    p = Page()
    p.feed(text)
    p.close()
    if p.stack or not {"html", "head", "body", "svg", "title"} <= p.seen:
        sys.exit("HTML: unclosed %s, or missing html/head/body/svg/title" % p.stack)
    if "<script" in text:
        sys.exit("the page has a script: it must draw without one")
    print(svg_checks(svg_tree(text)))

def svg(path):
    root = ET.parse(path).getroot()
    if root.tag != "{http://www.w3.org/2000/svg}svg":
        sys.exit("the root is %s" % root.tag)
    print(svg_checks(root))

def read_png(path):
    """RGB rows of an 8-bit RGB or RGBA PNG, not interlaced."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("%s is not a PNG" % path)
    pos, idat = 8, []
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if depth != 8 or ctype not in (2, 6) or interlace:
        sys.exit("PNG depth %d, color type %d, interlace %d: not one this decoder reads" % (depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows = zlib.decompress(b"".join(idat)), w * bpp, []
    prev = bytearray(stride)
    for y in range(h):
        at = y * (stride + 1)
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        if kind == 1:
            for x in range(bpp, stride): line[x] = (line[x] + line[x - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for x in range(stride): line[x] = (line[x] + ((line[x - bpp] if x >= bpp else 0) + prev[x]) // 2) & 255
        elif kind == 4:
            for x in range(stride):
                a, b, c = (line[x - bpp] if x >= bpp else 0), prev[x], (prev[x - bpp] if x >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif kind != 0:
            sys.exit("PNG filter %d at row %d" % (kind, y))
        rows.append(line)
        prev = line
    return w, h, bpp, rows

def columns_of(row, w, bpp, color, tol=6):
    return [x for x in range(w)
            if abs(row[x * bpp] - color[0]) <= tol and abs(row[x * bpp + 1] - color[1]) <= tol and abs(row[x * bpp + 2] - color[2]) <= tol]

def png(path, together=2, failed=True):
    w, h, bpp, rows = read_png(path)
    hits = [columns_of(r, w, bpp, ALL_REDUCE) for r in rows]
    bands, y = [], 0
    while y < h:                          # rows of pixels with the color, together
        if len(hits[y]) < 3:
            y += 1
            continue
        top = y
        while y < h and len(hits[y]) >= 3:
            y += 1
        mid = hits[(top + y - 1) // 2]
        boxes = 1 + sum(1 for a, b in zip(mid, mid[1:]) if b > a + 1)
        starts = [b for a, b in zip([-2] + mid, mid) if b > a + 1]     # each box's left edge
        bands.append({"top": top, "bottom": y - 1, "boxes": boxes, "first": min(min(hits[k]) for k in range(top, y)), "starts": starts})
    ranks = [b for b in bands if b["boxes"] >= 10]   # (the legend's swatch is one box)
    print("all_reduce bands (top, bottom, boxes, first column):",
          ", ".join("%d-%d %d boxes from x=%d" % (b["top"], b["bottom"], b["boxes"], b["first"]) for b in bands))
    if len(ranks) != 4:
        sys.exit("%d bands of all_reduce boxes, not 4 (one per rank)" % len(ranks))
    first = [b["first"] for b in ranks]
    # round by round (the k-th box of each band): how far rank 2's left
    # edge is after the others', and how far apart the others' are; the
    # median over the rounds (a real job's ranks are not in step every time)
    rounds = min(len(b["starts"]) for b in ranks)
    lates = sorted(ranks[2]["starts"][k] - max(ranks[i]["starts"][k] for i in (0, 1, 3)) for k in range(rounds))
    spreads = sorted(max(ranks[i]["starts"][k] for i in (0, 1, 3)) - min(ranks[i]["starts"][k] for i in (0, 1, 3)) for k in range(rounds))
    late, spread = lates[rounds // 2], spreads[rounds // 2]
    print("rank 2's all_reduces start %d px after the latest of the others' (median of %d rounds; first boxes at %s); "
          "the others' %d px apart" % (late, rounds, first, spread))
    if together < 0:                      # a real job: the others closer together than rank 2 is late
        together = late // 2
    if spread > together:
        sys.exit("ranks 0, 1 and 3 do not start their all_reduces together (within %d px): %d px apart (median)" % (together, spread))
    if late < 15:
        sys.exit("rank 2's late arrival (2 ms, some 30 px) does not show: %d px" % late)
    red = sum(len(columns_of(rows[y], w, bpp, FAILED)) for y in range(ranks[1]["bottom"] + 1, ranks[2]["top"]))
    print("red outline pixels in rank 1's rows: %d" % red)
    if failed and red < 20:
        sys.exit("the failed recv's red outline is not in rank 1's rows")

def real(path, late_ms=2):
    """A real job's merged trace (case d): the clocks line up (no rank's
    all_reduce #k ends before every rank has begun it: its result needs
    them all), and rank 2's begin LATE_MS after the others' (it sleeps first)."""
    t = json.load(open(path))
    by = collections.defaultdict(dict)
    for e in t["traceEvents"]:
        if e["ph"] == "X" and e["tid"] == 0 and e["name"] == "all_reduce":
            by[e["args"]["seq"]][e["pid"]] = e
    if len(by) != 20 or any(len(v) != 4 for v in by.values()):
        sys.exit("%d all_reduces, %s ranks each: want 20 seen by 4" % (len(by), sorted({len(v) for v in by.values()})))
    worst = max(max(e["ts"] for e in v.values()) - min(e["ts"] + e["dur"] for e in v.values()) for v in by.values())
    # two ranks' clocks may disagree by their clock errors (half of each
    # one's best round trip to the store at init: microseconds, more when
    # the machine is loaded)
    errs = sorted(max(0, e) for e in t["otherData"]["clock_error_us"])
    if worst > 200 + sum(errs[-2:]):
        sys.exit("a rank's all_reduce ended %.1f us before another's began, more than 200 us and their clock errors (%s us): "
                 "the clocks do not line up" % (worst, errs))
    late = sorted(v[2]["ts"] - max(v[r]["ts"] for r in (0, 1, 3)) for v in by.values())
    if late[len(late) // 2] < 500 * late_ms:      # the median round (a loaded machine stalls some)
        sys.exit("rank 2 entered its all_reduces only %s us after the others, median %d (it sleeps %d ms first)"
                 % ([round(x) for x in late], round(late[len(late) // 2]), late_ms))
    print("all_reduces: the last rank in came %.1f us before the first one out, at worst (on aligned clocks it must be < 0); "
          "rank 2 entered %.0f-%.0f us after the others" % (-worst, late[0], late[-1]))

cmd = sys.argv[1]
if cmd == "gen": gen(sys.argv[2], "--on-time" in sys.argv)
elif cmd == "merged": merged(*sys.argv[2:6])
elif cmd == "page": page(sys.argv[2])
elif cmd == "real": real(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2)
elif cmd == "svg": svg(sys.argv[2])
elif cmd == "png":
    a = sys.argv[3:]
    png(sys.argv[2], int(a[a.index("--together") + 1]) if "--together" in a else 2, "--no-failed" not in a)
PY
tr() { python3 "$T/tr.py" "$@"; }

mkdir -p "$T/src" "$T/ontime"
tr gen "$T/src" && tr gen "$T/ontime" --on-time || { echo "FAIL could not write the synthetic rank files"; exit 1; }

# traced JOB_ENV... -- DISTRUN_ARGS...: ranks that copy $SRC's files into
# $DIST_TRACE (each its own, RANK from its environment); stderr in $T/err,
# status in $rc
traced() {
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout -k 5 "$limit" "$DISTRUN" --no-prefix "$@" > "$T/job.out" 2> "$T/job.err" < /dev/null
    rc=$?
    grep -v '^distrun: OMP_NUM_THREADS' "$T/job.err" > "$T/job.err2"
}
COPY='[ -n "$RANK" ] || exit 9; [ ! -f "$SRC/rank$RANK.trace.json" ] || cp "$SRC/rank$RANK.trace.json" "$DIST_TRACE/"'

# ---- (a) the merge ---------------------------------------------------------------
traced SRC="$T/src" -- -n 4 --trace "$T/d1" sh -c "$COPY"
check "distrun -n 4 --trace DIR: exit 0, one line: 'trace of 4 ranks merged into DIR/trace.json'" \
    sh -c "[ $rc = 0 ] && [ \"\$(cat '$T/job.err2')\" = 'distrun: trace of 4 ranks merged into $T/d1/trace.json' ]"
check "DIR/trace.json: every event of the 4 files once, metadata first, then by ts; otherData" \
    tr merged "$T/d1/trace.json" "$T/src" 0,1,2,3 ""
check "no temporary file left in DIR" sh -c "[ \"\$(ls '$T/d1' | sort | tr '\n' ' ')\" = 'rank0.trace.json rank1.trace.json rank2.trace.json rank3.trace.json trace.json ' ]"

# rank 1's file missing, rank 3's cut short (its rank killed while writing)
mkdir -p "$T/src2"
cp "$T/src/rank0.trace.json" "$T/src/rank2.trace.json" "$T/src2/"
head -c 3000 "$T/src/rank3.trace.json" > "$T/src2/rank3.trace.json"
traced SRC="$T/src2" -- -n 4 --trace "$T/d2" sh -c "$COPY"
check "a rank's file missing, one cut short: stderr names both, the bad one with line and column" \
    grep -Eqx "distrun: trace of 2 of 4 ranks merged into $T/d2/trace.json; missing: rank 1 \\($T/d2/rank1.trace.json: No such file or directory\\), rank 3 \\($T/d2/rank3.trace.json: line [0-9]+, column [0-9]+: .*cut short.*\\)" "$T/job.err2"
check "... and the others merged, ranks [0, 2], missing [1, 3]" tr merged "$T/d2/trace.json" "$T/src" 0,2 1,3

# DIST_TRACE in distrun's environment, a failing job: merged before the
# summary.  (Rank 2 fails once the 4 files are there, or the others could
# be stopped before they copy theirs.)
FAIL_LAST='[ $RANK != 2 ] && exit 0; n=0
while [ $(ls "$DIST_TRACE" | grep -c "^rank.\.trace\.json$") -lt 4 ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n + 1)); done
exit 3'
traced SRC="$T/src" DIST_TRACE="$T/d3" -- -n 4 sh -c "$COPY; $FAIL_LAST"
check "DIST_TRACE=DIR in distrun's environment, rank 2 failing: exit 3, the merge's line before the failure's" \
    sh -c "[ $rc = 3 ] && head -n 1 '$T/job.err2' | grep -qx 'distrun: trace of 4 ranks merged into $T/d3/trace.json' && sed -n 2p '$T/job.err2' | grep -q '^distrun: rank 2 (pid [0-9]*) exited with code 3'"
check "... all 4 ranks in it" tr merged "$T/d3/trace.json" "$T/src" 0,1,2,3 ""

# a file an earlier job left in DIR: not this job's (rank 0 writes none now)
mkdir -p "$T/d4"
cp "$T/src/rank0.trace.json" "$T/d4/"
traced SRC="$T/src" -- -n 2 --trace "$T/d4" sh -c "[ \$RANK = 0 ] || { $COPY; }"
check "a rank file an earlier job left in DIR is removed before the ranks start, not merged" \
    sh -c "[ \"\$(cat '$T/job.err2')\" = 'distrun: trace of 1 of 2 ranks merged into $T/d4/trace.json; missing: rank 0 ($T/d4/rank0.trace.json: No such file or directory)' ] && [ ! -e '$T/d4/rank0.trace.json' ]"

# ---- (a2) the merge without distrun: dist_timeline DIR ---------------------------
# timeline DIR [ARGS...]: dist_timeline ARGS DIR; stderr in $T/tl.err, status in $rc
timeline() {
    local dir=$1; shift
    "$TIMELINE" "$@" "$dir" > "$T/tl.out" 2> "$T/tl.err"
    rc=$?
}
mkdir -p "$T/m1"
cp "$T/src"/rank*.trace.json "$T/m1/"
timeline "$T/m1"
check "dist_timeline DIR (4 rank files, no distrun): exit 0, one line: 'dist_timeline: trace of 4 ranks merged into DIR/trace.json'" \
    sh -c "cat '$T/tl.err'; [ $rc = 0 ] && [ \"\$(cat '$T/tl.err')\" = 'dist_timeline: trace of 4 ranks merged into $T/m1/trace.json' ]"
check "... DIR/trace.json: every event of the 4 files once, metadata first, then by ts; otherData" \
    tr merged "$T/m1/trace.json" "$T/src" 0,1,2,3 ""
check "... byte for byte the trace.json distrun merged from the same files in (a)" cmp "$T/d1/trace.json" "$T/m1/trace.json"
check "... no temporary file left in DIR, DIR/trace.html written" \
    sh -c "[ \"\$(ls '$T/m1' | sort | tr '\n' ' ')\" = 'rank0.trace.json rank1.trace.json rank2.trace.json rank3.trace.json trace.html trace.json ' ]"
check "... DIR/trace.html: the page, as in (b)" tr page "$T/m1/trace.html"
check "dist_timeline --svg DIR: DIR/trace.svg, the bare SVG" \
    sh -c "'$TIMELINE' --svg '$T/m1' 2> /dev/null && python3 '$T/tr.py' svg '$T/m1/trace.svg'"

mkdir -p "$T/m2"
cp "$T/src/rank0.trace.json" "$T/src/rank1.trace.json" "$T/src/rank3.trace.json" "$T/m2/"
timeline "$T/m2"
check "dist_timeline DIR, rank 2's file missing: exit 0, the line names it as distrun does" \
    sh -c "cat '$T/tl.err'; [ $rc = 0 ] && [ \"\$(cat '$T/tl.err')\" = 'dist_timeline: trace of 3 of 4 ranks merged into $T/m2/trace.json; missing: rank 2 ($T/m2/rank2.trace.json: No such file or directory)' ]"
check "... ranks [0, 1, 3] merged, missing [2]" tr merged "$T/m2/trace.json" "$T/src" 0,1,3 2

mkdir -p "$T/m3"
timeline "$T/m3"
check "dist_timeline on an empty DIR: exit 1, one sentence naming DIR, no trace.json or trace.html left" \
    sh -c "cat '$T/tl.err'; [ $rc = 1 ] && [ \"\$(wc -l < '$T/tl.err')\" = 1 ] && grep -q '^dist_timeline: ' '$T/tl.err' && grep -qF '$T/m3' '$T/tl.err' && [ -z \"\$(ls -A '$T/m3')\" ]"

# ---- (d) real dist ranks ----------------------------------------------------------
# (Here, before the render part, which may end the test as a skip.)  4
# ranks of dist.h under `distrun --trace DIR`: 20 rounds of all_reduce and
# 1 ms of work, rank 2 sleeping 30 ms more before each all_reduce.
cat > "$T/ranks.c" <<'C'
#define DIST_IMPLEMENTATION
#include "dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(void) {
    dist_config cfg = { 0 };
    dist_t *w = NULL;
    float v[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    if (dist_init(&w, &cfg) != DIST_OK) { fprintf(stderr, "%s\n", dist_error_message(NULL)); return 1; }
    for (int i = 0; i < 20; i++) {
        struct timespec work = { 0, 1000000 }, late = { 0, 1000000L * atoi(getenv("LATE_MS") ? getenv("LATE_MS") : "2") };
        if (dist_rank(w) == 2) nanosleep(&late, NULL);
        if (dist_all_reduce(w, v, 8, DIST_FLOAT32, DIST_MAX) != DIST_OK) {
            fprintf(stderr, "%s\n", dist_error_message(w));
            return 1;
        }
        nanosleep(&work, NULL);
    }
    return dist_destroy(w) == DIST_OK ? 0 : 1;
}
C
if ! ${CC:-cc} -std=c11 -O2 -I. -pthread -o "$T/ranks" "$T/ranks.c" > "$T/make" 2>&1; then
    cat "$T/make"; echo "FAIL the rank program did not build"; exit 1
fi
late_ms=$((30 * scale))     # (under sanitizers the machine is busier: a larger delay to see)
traced LATE_MS=$late_ms -- -n 4 --trace "$T/real" "$T/ranks"
check "a real job (4 ranks of dist.h, rank 2 late): exit 0, 'trace of 4 ranks merged'" \
    sh -c "cat '$T/job.err2'; [ $rc = 0 ] && [ \"\$(cat '$T/job.err2')\" = 'distrun: trace of 4 ranks merged into $T/real/trace.json' ]"
check "... its trace.json: every event of the ranks' own files once, sorted; otherData" tr merged "$T/real/trace.json" "$T/real" 0,1,2,3 ""
check "... clocks aligned (no all_reduce ends before every rank began it), rank 2's $late_ms ms late" tr real "$T/real/trace.json" "$late_ms"
check "... dist_timeline draws it" "$TIMELINE" -o "$T/real.html" "$T/real/trace.json"

# ---- (b) the page -------------------------------------------------------------------
check "dist_timeline DIR/trace.json -o PAGE: exit 0" "$TIMELINE" -o "$T/page.html" "$T/d1/trace.json"
check "the page: HTML closed properly, no script; its SVG parses as XML: 4 process rows, a box per event, the failed one outlined red" \
    tr page "$T/page.html"
check "dist_timeline without -o: TRACE.html beside TRACE.json" sh -c "'$TIMELINE' '$T/d1/trace.json' && [ -s '$T/d1/trace.html' ]"
check "dist_timeline --svg: a bare SVG, the same drawing" sh -c "'$TIMELINE' --svg -o '$T/page.svg' '$T/d1/trace.json' && python3 '$T/tr.py' svg '$T/page.svg'"
"$TIMELINE" -o "$T/bad.html" "$T/src2/rank3.trace.json" > "$T/bad.out" 2> "$T/bad.err"
rc=$?
check "dist_timeline on a cut-short file: exit 1, a sentence naming the file, line and column, no page left" \
    sh -c "cat '$T/bad.err'; [ $rc = 1 ] && grep -Eq '^dist_timeline: $T/src2/rank3.trace.json: line [0-9]+, column [0-9]+: ' '$T/bad.err' && [ ! -e '$T/bad.html' ]"

# ---- (c) the picture ----------------------------------------------------------------
CHROMIUM=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$CHROMIUM" ]; then
    echo "$((checks - fails)) of $checks checks passed"
    [ "$fails" = 0 ] || exit 1
    echo "skip: the render checks (c): no chromium to render the page (make deps installs it: apt-get install chromium)"
    exit 77
fi
# shot HTML PNG: the page in headless Chromium, as a 1400x900 screenshot
shot() {
    rm -f "$2"
    timeout -k 5 $((60 * scale)) "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$T/chrome" --no-first-run --force-color-profile=srgb \
        --screenshot="$2" --window-size=1400,900 "file://$1" > "$T/chrome.log" 2>&1
    [ -s "$2" ] || { cat "$T/chrome.log"; return 1; }
}
check "headless Chromium renders the page" shot "$T/page.html" "$T/page.png"
check "the screenshot: all_reduce in 4 bands, rank 2's starting later (its late arrival shows), the failed recv outlined red" \
    tr png "$T/page.png"
check "the real job's page rendered" shot "$T/real.html" "$T/real.png"
check "... its screenshot: all_reduce in 4 bands, rank 2's starting later (the others together within half that)" tr png "$T/real.png" --together -1 --no-failed
# The control: the same files but rank 2 on time.  The check above must
# fail on its picture, and for the late arrival alone.
traced SRC="$T/ontime" -- -n 4 --trace "$T/d5" sh -c "$COPY"
control() { "$TIMELINE" -o "$T/ontime.html" "$T/d5/trace.json" && shot "$T/ontime.html" "$T/ontime.png"; }
control_fails() {
    tr png "$T/ontime.png" > "$T/control" 2>&1
    local st=$?
    cat "$T/control"
    [ $st != 0 ] && grep -q "^rank 2's late arrival .* does not show" "$T/control"
}
check "the control, rank 2 on time: merged, drawn, rendered" control
check "... where the screenshot check fails, saying rank 2's late arrival does not show (so it can fail)" control_fails

echo "$((checks - fails)) of $checks checks passed"
[ "$fails" = 0 ]
