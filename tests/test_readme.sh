#!/usr/bin/env bash
# tests/test_readme.sh - the README's commands work as written.
#
#   quick start   the code block after the comment that names this test is
#                 written to prog.c in an empty directory, beside copies of
#                 the headers and of tools/distrun.c (as a user vendors
#                 them); the sh block after it runs there as it is written;
#                 what it prints on stdout must be the block after that.
#   link lines    every `cc ... # HEADER` line of the README's sh blocks
#                 builds, as written, a program that implements HEADER
#                 (dist_rpc.h and dist_cuda.h: with dist.h), which then
#                 runs; each header's opening comment gives the same line.
#                 Flags this machine cannot miss (-pthread and -ldl are in
#                 glibc's libc since 2.34) must be there all the same.
#   make targets  every `make ...` the README shows (code blocks and inline
#                 code) names targets the Makefile has (make -n: nothing
#                 is built or run).
# Prints FAIL lines and exits 1 on any problem.
# TIMEOUT: 300
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_readme.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# ---- the README's pieces, extracted once -----------------------------------
python3 - "$tmp" <<'PY' || { echo "FAIL could not read the README's blocks (see above)"; exit 1; }
import os, re, sys
out = sys.argv[1]
readme = open('README.md').read()
blocks = [(m.start(), m.group(1), m.group(2)) for m in re.finditer(r'^```([a-z]*)\n(.*?)^```$', readme, re.S | re.M)]

# quick start: the three blocks after the marker
mark = readme.find('<!-- tests/test_readme.sh')
after = [b for b in blocks if b[0] > mark] if mark >= 0 else []
if len(after) < 3 or after[0][1] != 'c' or after[1][1] != 'sh' or after[2][1] != '':
    sys.exit('README.md: no "<!-- tests/test_readme.sh" comment followed by a c block, an sh block and an output block')
os.makedirs(out + '/quick')
open(out + '/quick/prog.c', 'w').write(after[0][2])
open(out + '/quick.sh', 'w').write(after[1][2])
open(out + '/quick.expected', 'w').write(after[2][2])

# link lines: "cc ... # dist_rpc.h ..." in sh blocks
links = []
for _, lang, text in blocks:
    if lang != 'sh': continue
    for line in text.splitlines():
        m = re.match(r'\s*((?:cc|gcc|clang)\s.*?)\s*#\s*(dist(?:_rpc|_cuda)?\.h)\b', line)
        if m: links.append((m.group(2), m.group(1)))
if not links:
    sys.exit('README.md: no sh line "cc ... # HEADER" saying how to build a program with a header')
with open(out + '/links', 'w') as f:
    for h, cmd in links: f.write('%s\t%s\n' % (h, cmd))

# each header's own line (its opening comment, up to the first "*/")
with open(out + '/header_lines', 'w') as f:
    for h in ('dist.h', 'dist_rpc.h', 'dist_cuda.h'):
        if not os.path.exists(h): continue
        opening = open(h).read().split('*/')[0]
        for line in opening.splitlines():
            if re.match(r'\s*(cc|gcc|clang)\s+-std=\S+.*\sprog\.c\b', line):
                f.write('%s\t%s\n' % (h, ' '.join(line.split())))

# make targets: code-block lines and inline code that start with "make "
cmds = []
for _, lang, text in blocks:
    cmds += [l.strip() for l in text.splitlines() if l.strip().startswith('make ')]
cmds += re.findall(r'`(make [^`]*)`', readme)
targets = []
for c in cmds:
    c = re.split(r'\s(?:&&|\|\||;|#)', c)[0]
    for t in c.split()[1:]:
        if t.startswith('-') or '=' in t: continue
        if t not in targets: targets.append(t)
open(out + '/targets', 'w').write('\n'.join(targets) + '\n')
PY

# ---- link lines: one program per header, built as the README says ----------
# (in the background, beside the quick start; each in a directory of its own)
n=0
while IFS=$'\t' read -r h cmd; do
    n=$((n + 1)); d=$tmp/link$n
    mkdir -p "$d" && cp dist.h dist_rpc.h dist_cuda.h "$d"/ 2>/dev/null
    case $h in
        dist.h)      impl="#define DIST_IMPLEMENTATION" ;;
        dist_rpc.h)  impl=$'#define DIST_IMPLEMENTATION\n#define DIST_RPC_IMPLEMENTATION' ;;
        dist_cuda.h) impl=$'#define DIST_IMPLEMENTATION\n#define DIST_CUDA_IMPLEMENTATION' ;;
    esac
    printf '%s\n#include "%s"\n#include <stdio.h>\nint main(void) { printf("%%s\\n", dist_version()); return 0; }\n' \
        "$impl" "$h" > "$d/prog.c"
    printf '%s\t%s\n' "$h" "$cmd" > "$d/what"
    # the line as written: prog.c -> prog, in that directory (unless the
    # quick start, a dist.h program, builds with that very line)
    if [ "$h" = dist.h ] && grep -qxF "$cmd" "$tmp/quick.sh"; then
        echo "quick start" > "$d/same"
    else
        ( cd "$d" && bash -c "$cmd" > build.log 2>&1; echo $? > build.rc ) &
    fi
    case " $cmd " in *" -pthread "*) ;; *) fail "README: '$cmd' ($h) does not link -pthread (glibc before 2.34 needs it)" ;; esac
    if [ "$h" = dist_cuda.h ]; then
        case " $cmd " in *" -ldl "*) ;; *) fail "README: '$cmd' ($h) does not link -ldl (dlopen is in libdl before glibc 2.34)" ;; esac
    fi
done < "$tmp/links"

# each header's own build line is the README's for it
while IFS=$'\t' read -r h line; do
    if ! awk -F'\t' -v h="$h" -v l="$line" '$1 == h { gsub(/[ \t]+/, " ", $2); if ($2 == l) found = 1 } END { exit !found }' "$tmp/links"; then
        fail "$h's opening comment says '$line'; the README gives another line for $h"
    fi
done < "$tmp/header_lines"
for h in dist.h dist_rpc.h dist_cuda.h; do
    [ -f "$h" ] || continue
    grep -q "^$h	" "$tmp/links" || fail "README: no 'cc ... # $h' line says how to build with $h"
    grep -q "^$h	" "$tmp/header_lines" || fail "$h: its opening comment gives no 'cc -std=... prog.c ...' line"
done

# ---- quick start -------------------------------------------------------------
q=$tmp/quick
cp dist.h dist_rpc.h dist_cuda.h "$q"/ 2>/dev/null
cp tools/distrun.c "$q"/
echo "+ in a directory with prog.c (README), dist.h, distrun.c:"
sed 's/^/+   /' "$tmp/quick.sh"
if ! (cd "$q" && bash -e "$tmp/quick.sh" > "$tmp/quick.out" 2> "$tmp/quick.err"); then
    fail "the README's quick start failed (exit status $?):"
    sed 's/^/    /' "$tmp/quick.err" | tail -n 20
elif ! diff -u "$tmp/quick.expected" "$tmp/quick.out" > "$tmp/quick.diff"; then
    fail "the README's quick start printed something else than the README shows (- README, + printed):"
    sed 's/^/    /' "$tmp/quick.diff"
else
    echo "ok   quick start: $(wc -l < "$tmp/quick.out") lines as the README shows"
fi

wait
for d in "$tmp"/link*/; do
    [ -f "$d/what" ] || continue
    IFS=$'\t' read -r h cmd < "$d/what"
    if [ -f "$d/same" ]; then
        echo "ok   $cmd   # $h (the quick start builds with it)"
    elif [ "$(cat "$d/build.rc")" != 0 ]; then
        fail "README: '$cmd' does not build a program with $h:"
        sed 's/^/    /' "$d/build.log" | tail -n 8
    elif ! out=$(cd "$d" && ./prog 2>&1); then
        fail "README: '$cmd' built a $h program that does not run: $out"
    else
        echo "ok   $cmd   # $h (runs: $out)"
    fi
done

# ---- make targets --------------------------------------------------------------
before=$fails
while read -r t; do
    [ -n "$t" ] || continue
    if ! make -n -C "$root" "$t" > "$tmp/make.out" 2>&1; then
        fail "README: 'make $t': the Makefile has no such target:"
        grep -m3 -iE 'no rule|error' "$tmp/make.out" | sed 's/^/    /'
    fi
done < "$tmp/targets"
[ $fails = "$before" ] && echo "ok   make targets the README names: $(tr '\n' ' ' < "$tmp/targets")"

if [ $fails -ne 0 ]; then
    echo "test_readme: $fails problem(s)"
    exit 1
fi
echo "test_readme: ok"
