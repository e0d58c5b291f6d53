#!/usr/bin/env bash
# tests/test_docs.sh - the headers' documentation says what the code does.
#
# For each of dist.h, dist_rpc.h, dist_cuda.h:
#   - the section index near the top of the implementation lists exactly
#     the [SECTION] banners, in the order they appear;
#   - every DIST_* name a user can set that the header tests in an #if,
#     #ifdef, #ifndef or #elif (with or without a default after it) is
#     named in the opening comment (its COMPILE-TIME OPTIONS table), or in
#     that of the header it belongs to (DIST_RPC_* dist_rpc.h's, DIST_CUDA_*
#     dist_cuda.h's; an extension header's may be in dist.h's).  Not settable: include
#     guards (*_H, *_DONE), DIST_VERSION_* (dist.h defines them) and the
#     private DIST__*;
#   - every environment variable the code reads (getenv("DIST_...") or
#     dist__getenv("...")) is named in the opening comment.
# Prints one line per problem and exits 1 if there is any.
set -u
cd "$(dirname "$0")/.."
bad=0
for h in dist.h dist_rpc.h dist_cuda.h; do
    [ -f "$h" ] || continue
    python3 - "$h" <<'PY' || bad=1
import re, sys
h = sys.argv[1]
src = open(h).read()
problems = []
# the opening comment: from the start to the first "*/"
opening = src[:src.index('*/')]
# 1. index == banners
m = re.search(r"/\* Index[^\n]*:\n(.*?)\*/", src, re.S)
banners = [b.strip().rstrip('*/').strip() for b in re.findall(r'^/\* \[SECTION\] ([^\n]*)$', src, re.M)]
if m:
    listed = [l.strip()[len('[SECTION] '):].strip() for l in m.group(1).splitlines() if l.strip().startswith('[SECTION]')]
    if listed != banners:
        for b in banners:
            if b not in listed: problems.append('section "%s" has a banner but is not in the index' % b)
        for l in listed:
            if l not in banners: problems.append('the index lists "%s", which has no banner' % l)
        if not problems: problems.append('the index lists the sections in another order than their banners')
elif banners:
    problems.append('%d [SECTION] banners but no index' % len(banners))
# 2. every settable DIST_* name tested by the preprocessor is documented
def opening_of(path):
    try:
        t = open(path).read()
        return t[:t.index('*/')]
    except (OSError, ValueError):
        return ''
owner = lambda n: 'dist_cuda.h' if n.startswith('DIST_CUDA_') else 'dist_rpc.h' if n.startswith('DIST_RPC_') else 'dist.h'
tested = set()
for line in src.splitlines():
    if re.match(r'\s*#\s*(if|ifdef|ifndef|elif)\b', line):
        tested |= set(re.findall(r'\b(DIST_[A-Z][A-Z0-9_]*)', line))
for name in sorted(tested):
    if name.endswith('_H') or name.endswith('_DONE') or name.startswith('DIST_VERSION_'): continue
    docs = [opening, opening_of(owner(name))] + ([opening_of('dist.h')] if h != 'dist.h' else [])
    if not any(re.search(r'\b%s\b' % name, d) for d in docs):
        problems.append('option %s (tested by #if/#ifdef/#ifndef) is not in the opening comment' % name)
# 3. environment variables
for name in sorted(set(re.findall(r'getenv\("([A-Z][A-Z0-9_]*)"\)', src))):
    if not re.search(r'\b%s\b' % name, opening): problems.append('environment variable %s is read but not in the opening comment' % name)
for p in problems: print('%s: %s' % (h, p))
print('%s: %s' % (h, 'ok' if not problems else '%d problem(s)' % len(problems)))
sys.exit(1 if problems else 0)
PY
done
exit $bad
