#!/usr/bin/env bash
# Tests for the launcher: tests/test_distrun.sh
# Expects a built launcher at $DISTRUN (default build/distrun); builds only a
# small C helper with ${CC:-cc}.  Every launcher run is bounded by a time
# limit, so the script cannot hang.  Exit status 0 when every check passes.
set -u

DISTRUN=${DISTRUN:-build/distrun}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $DISTRUN in /*) ;; *) DISTRUN=$PWD/$DISTRUN ;; esac
if [ ! -x "$DISTRUN" ]; then
    echo "FAIL: no launcher at $DISTRUN (build it first)"
    exit 1
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/test_distrun.XXXXXX")
# (processes the leftover checks start are killed whatever the outcome)
trap 'for f in "$T"/left.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2> /dev/null; done; rm -rf "$T"' EXIT
FAILS=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; for l in "$@"; do echo "     $l"; done; FAILS=$((FAILS + 1)); }
now_ms() { date +%s%3N; }

# The helper prints, on one line, what a rank sees: its environment
# (DIST_STORE_HOSTED among it), its open fds, and whether the store that
# distrun hosts answers a connection at MASTER_PORT (on this host).
cat > "$T/helper.c" <<'EOF'
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *env(const char *n) { const char *v = getenv(n); return v ? v : "-"; }

static void print_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int self = d ? dirfd(d) : -1, first = 1;
    struct dirent *e;
    printf(" fds=");
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == self) continue;
        printf("%s%s", first ? "" : ",", e->d_name);
        first = 0;
    }
    if (d) closedir(d);
}

static void check_store(void) {
    struct sockaddr_in sa;
    int c;
    if (getenv("DIST_STORE_LISTEN_FD")) { printf(" store=listen-fd-set"); return; }
    if (strcmp(env("MASTER_ADDR"), "127.0.0.1") != 0) { printf(" store=remote"); return; }
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)atoi(env("MASTER_PORT")));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&sa, sizeof sa) != 0) { printf(" store=no-connect"); return; }
    close(c);
    printf(" store=ok");
}

int main(void) {
    printf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s MASTER_ADDR=%s MASTER_PORT=%s hosted=%s",
           env("RANK"), env("WORLD_SIZE"), env("LOCAL_RANK"), env("LOCAL_WORLD_SIZE"), env("GROUP_RANK"),
           env("MASTER_ADDR"), env("MASTER_PORT"), env("DIST_STORE_HOSTED"));
    print_fds();
    check_store();
    printf(" joining=%s restarts=%s\n", env("DIST_JOINING"), env("DIST_RESTART_COUNT"));
    return 0;
}
EOF
if ! ${CC:-cc} -std=c11 -Wall -o "$T/helper" "$T/helper.c"; then
    echo "FAIL: cannot compile the test helper"
    exit 1
fi

# The notice distrun prints when it sets OMP_NUM_THREADS=1 (several ranks,
# the variable unset): checked on its own below, left out of ERR elsewhere.
OMP_NOTICE='^distrun: OMP_NUM_THREADS=1 for each rank, as [0-9]* share this node (set OMP_NUM_THREADS to choose)$'
unset OMP_NUM_THREADS
HOST=$(uname -n)

# run LIMIT ARGS...: the launcher with a time limit; sets RC, OUT, ERR (but
# the OMP notice), ERR_ALL, MS
run() {
    local limit=$1 t0
    shift
    t0=$(now_ms)
    timeout -s KILL "$limit" "$DISTRUN" "$@" > "$T/out" 2> "$T/err" < /dev/null
    RC=$?
    MS=$(( $(now_ms) - t0 ))
    OUT=$(cat "$T/out")
    ERR_ALL=$(cat "$T/err")
    ERR=$(grep -v "$OMP_NOTICE" "$T/err")
}

# The summary's description of where and when the first failure happened
WHEN_RE=" on $HOST at [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3} \\([0-9]+\\.[0-9]{3} s after the start\\)"

# ---- environment, single node ------------------------------------------
run 10 -n 3 "$T/helper"
port=$(sed -n 's/^\[0\] .*MASTER_PORT=\([0-9]*\).*/\1/p' "$T/out")
ok=1
for r in 0 1 2; do
    grep -q "^\[$r\] RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port " "$T/out" || ok=0
done
if [ "$RC" = 0 ] && [ -n "$port" ] && [ "$port" -gt 0 ] && [ $ok = 1 ] && [ -z "$ERR" ]; then
    pass "env per rank (single node, port $port)"
else
    fail "env per rank (single node)" "rc=$RC" "$OUT" "$ERR"
fi

# ---- the store is distrun's (hosted); no fds leak -------------------------
# fd 9 is open in the launcher (and DIST_STORE_LISTEN_FD=9 in its
# environment, as an older launcher above it would set); no rank may see
# either.
DIST_STORE_LISTEN_FD=9 run 10 -n 3 "$T/helper" 9> "$T/leak"
if grep -q '^\[0\] .* hosted=1 fds=0,1,2 store=ok joining=- restarts=0$' "$T/out" &&
   grep -q '^\[1\] .* hosted=1 fds=0,1,2 store=ok joining=- restarts=0$' "$T/out" &&
   grep -q '^\[2\] .* hosted=1 fds=0,1,2 store=ok joining=- restarts=0$' "$T/out"; then
    pass "the store is distrun's: every rank has DIST_STORE_HOSTED=1, none an fd of it, and MASTER_PORT answers; no leaked fds"
else
    fail "hosted store / fd leaks" "rc=$RC" "$OUT" "$ERR"
fi

# ---- environment, multi-node ---------------------------------------------
run 10 --nnodes 2 --node_rank=1 --master-addr 10.1.2.3 --master-port 29555 --nproc-per-node 2 "$T/helper"
if [ "$RC" = 0 ] &&
   grep -q '^\[2\] RANK=2 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=10.1.2.3 MASTER_PORT=29555 hosted=1 fds=0,1,2 store=remote joining=- restarts=0$' "$T/out" &&
   grep -q '^\[3\] RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=10.1.2.3 MASTER_PORT=29555 hosted=1 fds=0,1,2 store=remote joining=- restarts=0$' "$T/out" &&
   [ "$(wc -l < "$T/out")" = 2 ]; then
    pass "env per rank (--nnodes 2 --node-rank 1, given port: node 0 hosts the store)"
else
    fail "env per rank (multi-node)" "rc=$RC" "$OUT" "$ERR"
fi

# ---- --master-port on one node: the store listens there ------------------
# (a port another test's connection holds is tried again with the next)
for try in 0 1 2 3 4; do
    mp=$((30000 + ($$ + try * 7919) % 20000))
    run 10 -n 2 --master-port $mp "$T/helper"
    printf '%s\n' "$ERR" | grep -q 'Address already in use' || break
done
if [ "$RC" = 0 ] && grep -q "^\[0\] RANK=0 .*MASTER_PORT=$mp hosted=1 fds=0,1,2 store=ok joining=- restarts=0\$" "$T/out" &&
   grep -q "^\[1\] RANK=1 .*MASTER_PORT=$mp hosted=1 fds=0,1,2 store=ok joining=- restarts=0\$" "$T/out"; then
    pass "--master-port on one node: distrun's store listens on it"
else
    fail "--master-port on one node" "rc=$RC" "$OUT" "$ERR"
fi

# ---- output prefixing ----------------------------------------------------
run 10 -n 2 sh -c 'echo "out $RANK"; echo "err $RANK" >&2; printf "two\nlines\n"; printf "partial $RANK"'
exp_out=$(printf '[0] out 0\n[0] two\n[0] lines\n[0] partial 0\n[1] out 1\n[1] two\n[1] lines\n[1] partial 1')
got_out=$(sort -s -t']' -k1,1 "$T/out")
if [ "$RC" = 0 ] && [ "$got_out" = "$exp_out" ] && [ "$(printf '%s\n' "$ERR" | sort)" = "$(printf '[0] err 0\n[1] err 1')" ]; then
    pass "stdout/stderr lines prefixed, partial last line flushed"
else
    fail "prefixing" "rc=$RC" "$OUT" "$ERR"
fi

# a 200000-byte line comes out in pieces, each prefixed, nothing lost
run 10 -n 1 sh -c 'head -c 200000 /dev/zero | tr "\0" x; echo; echo end'
if [ "$RC" = 0 ] && [ "$(grep -vc '^\[0\] ' "$T/out")" = 0 ] &&
   [ "$(grep '^\[0\] x' "$T/out" | sed 's/^\[0\] //' | tr -d '\n' | wc -c)" = 200000 ] &&
   [ "$(tail -n 1 "$T/out")" = "[0] end" ]; then
    pass "long line split into prefixed pieces, no bytes lost"
else
    fail "long line" "rc=$RC" "$(head -c 300 "$T/out")"
fi

run 10 -n 2 --no-prefix sh -c 'echo "plain $RANK"'
if [ "$RC" = 0 ] && [ "$(sort "$T/out")" = "$(printf 'plain 0\nplain 1')" ]; then
    pass "--no-prefix"
else
    fail "--no-prefix" "rc=$RC" "$OUT" "$ERR"
fi

# ---- all succeed: exit 0, silent -----------------------------------------
run 10 -n 4 true
if [ "$RC" = 0 ] && [ -z "$OUT$ERR" ]; then pass "all ranks exit 0: exit 0, no output"; else fail "all succeed" "rc=$RC" "$OUT" "$ERR"; fi

# ---- one rank fails: the others are stopped quickly ------------------------
run 20 -n 4 sh -c 'if [ "$RANK" = 2 ]; then sleep 0.2; exit 3; fi; sleep 20'
if [ "$RC" = 3 ] && [ "$MS" -lt 5000 ] && [ "$(printf '%s\n' "$ERR" | grep -c '^distrun:')" = 1 ] &&
   printf '%s\n' "$ERR" | grep -Eq "^distrun: rank 2 \\(pid [0-9]+\\) exited with code 3$WHEN_RE, the first to fail; distrun stopped ranks 0, 1, 3\$"; then
    pass "rank 2 exits 3: others stopped in ${MS} ms, exit 3, one summary line"
else
    fail "failure stops others" "rc=$RC ms=$MS" "$ERR"
fi

# ---- a rank killed by a signal -------------------------------------------
run 20 -n 4 sh -c 'if [ "$RANK" = 1 ]; then sleep 0.2; kill -KILL $$; fi; sleep 20'
if [ "$RC" = 137 ] && [ "$MS" -lt 5000 ] &&
   printf '%s\n' "$ERR" | grep -Eq "^distrun: rank 1 \\(pid [0-9]+\\) was killed by signal 9 \\(Killed\\)$WHEN_RE, the first to fail; distrun stopped ranks 0, 2, 3\$"; then
    pass "rank 1 killed by SIGKILL: exit 137, summary names the signal"
else
    fail "killed rank" "rc=$RC ms=$MS" "$ERR"
fi

# ---- a rank that ignores SIGTERM is killed after --kill-grace ---------------
run 20 -n 2 --kill-grace 0.5 sh -c 'if [ "$RANK" = 0 ]; then sleep 0.2; exit 1; fi; trap "" TERM; sleep 20'
if [ "$RC" = 1 ] && [ "$MS" -lt 4000 ]; then
    pass "rank ignoring SIGTERM is SIGKILLed after --kill-grace (${MS} ms)"
else
    fail "--kill-grace" "rc=$RC ms=$MS" "$ERR"
fi

# ---- exec failure -> 127 ---------------------------------------------------
run 10 -n 2 "$T/no-such-program"
if [ "$RC" = 127 ] && printf '%s\n' "$ERR" | grep -q "cannot execute '$T/no-such-program'" &&
   printf '%s\n' "$ERR" | grep -Eq '^distrun: rank [01] \(pid [0-9]+\) exited with code 127'; then
    pass "program that cannot be executed: exit 127"
else
    fail "exec failure" "rc=$RC" "$ERR"
fi

# ---- --max-restarts: a failed rank is restarted as a newcomer -------------
run 20 -n 3 --max-restarts 2 sh -c 'if [ "$DIST_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then kill -KILL $$; fi; sleep 0.3; echo "rank $RANK joining=${DIST_JOINING:-no} restarts=$DIST_RESTART_COUNT"'
if [ "$RC" = 0 ] && printf '%s\n' "$OUT" | grep -qx '\[1\] rank 1 joining=1 restarts=1' &&
   printf '%s\n' "$OUT" | grep -qx '\[0\] rank 0 joining=no restarts=0' && printf '%s\n' "$OUT" | grep -qx '\[2\] rank 2 joining=no restarts=0' &&
   printf '%s\n' "$ERR" | grep -q 'rank 1 (pid [0-9]*) was killed by signal 9 ([A-Za-z]*); restarting it (restart 1 of 2)'; then
    pass "--max-restarts: a killed rank restarts (DIST_JOINING=1, DIST_RESTART_COUNT=1), the others go on"
else
    fail "--max-restarts" "rc=$RC" "$OUT" "$ERR"
fi
run 20 -n 2 --max-restarts 1 sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 20'
if [ "$RC" = 3 ] && [ "$MS" -lt 10000 ] && printf '%s\n' "$ERR" | grep -q 'restart 1 of 1' &&
   printf '%s\n' "$ERR" | grep -Eq "rank 1 \\(pid [0-9]+\\) exited with code 3$WHEN_RE, the first to fail; distrun stopped rank 0\$"; then
    pass "--max-restarts used up: the next failure stops the job (exit 3)"
else
    fail "--max-restarts used up" "rc=$RC ms=$MS" "$ERR"
fi

# ---- --max-restarts with a dist program: the job trains on ----------------
# An elastic loop (all_reduce, agree, shrink on failure, dist_grow every 5
# steps, a broadcast when dist_newcomers says someone joined): rank 1 kills
# itself at step 20; distrun restarts it; the restarted process joins; the
# job ends at step 60 with 4 members, all at the same step with the same
# parameters.
cat > "$T/elastic.c" <<'EOF2'
#define DIST_IMPLEMENTATION
#include "dist.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#define G 16
int main(void) {
    dist_t *w = NULL, *c;
    int64_t p[G + 1] = { 0 }, v[G];
    int sync, rank = atoi(getenv("RANK") ? getenv("RANK") : "-1");
    uint64_t sum = 0;
    if (dist_init(&w, NULL) != DIST_OK) { fprintf(stderr, "init: %s\n", dist_error_message(NULL)); return 1; }
    c = w;
    sync = dist_joined(w);
    for (;;) {
        uint64_t ok;
        int alive = 0, n = dist_world_size(c);
        dist_result r;
        if (!sync && p[G] == 20 && rank == 1 && dist_restart_count() == 0) { fflush(NULL); raise(SIGKILL); }
        if (sync) r = dist_broadcast(c, p, G + 1, DIST_INT64, 0);
        else {
            for (int i = 0; i < G; i++) v[i] = 1;
            r = dist_all_reduce(c, v, G, DIST_INT64, DIST_SUM);
            for (int i = 0; r == DIST_OK && i < G; i++) if (v[i] != n) { fprintf(stderr, "bad sum\n"); return 1; }
        }
        ok = r == DIST_OK;
        if (dist_agree(c, &ok, &alive) != DIST_OK) { fprintf(stderr, "agree: %s\n", dist_error_message(c)); return 1; }
        if (!ok || alive < n) {
            dist_t *s = NULL;
            if (dist_shrink(c, &s) != DIST_OK) { fprintf(stderr, "shrink: %s\n", dist_error_message(c)); return 1; }
            c = s;
            continue;
        }
        if (sync) { sync = 0; continue; }
        for (int i = 0; i < G; i++) p[i] += v[i];
        p[G]++;
        if (p[G] % 5 == 0) {   /* admit whoever waits; at the end, wait for the fourth */
            dist_t *g = NULL;
            int need = p[G] >= 60 && n < 4 ? 4 - n : 0;
            if (dist_grow(c, need, &g) != DIST_OK) { fprintf(stderr, "grow: %s\n", dist_error_message(c)); return 1; }
            c = g;
            sync = dist_newcomers(g) > 0;
            if (sync) continue;
        }
        if (p[G] >= 60 && dist_world_size(c) == 4) break;
    }
    for (int i = 0; i <= G; i++) sum = sum * 1000003u + (uint64_t)p[i];
    printf("done size=%d step=%lld sum=%llx joined=%d restarts=%d\n", dist_world_size(c), (long long)p[G], (unsigned long long)sum,
           dist_joined(c), dist_restart_count());
    fflush(NULL);
    dist_abort(w);
    return 0;
}
EOF2
if ${CC:-cc} -std=c11 -O1 -I"$ROOT" -o "$T/elastic" "$T/elastic.c" -pthread -lm 2> "$T/cc.err"; then
    run 60 -n 4 --max-restarts 2 "$T/elastic"
    n_done=$(grep -c 'done size=4 ' "$T/out")
    n_sums=$(sed -n 's/.*done size=4 step=\([0-9]*\) sum=\([0-9a-f]*\) .*/\1 \2/p' "$T/out" | sort -u | wc -l)
    if [ "$RC" = 0 ] && [ "$n_done" = 4 ] && [ "$n_sums" = 1 ] && grep -q '^\[1\] done size=4 .* joined=1 restarts=1$' "$T/out" &&
       printf '%s\n' "$ERR" | grep -q 'restarting it (restart 1 of 2)'; then
        pass "--max-restarts with a dist program: rank 1 killed at step 20, restarted, joined; 4 ranks end at one step with one sum ($MS ms)"
    else
        fail "--max-restarts with a dist program" "rc=$RC done=$n_done distinct=$n_sums" "$OUT" "$ERR"
    fi
else
    fail "--max-restarts with a dist program: cannot compile it" "$(cat "$T/cc.err")"
fi

# ---- --nnodes MIN:MAX: nodes past MIN join the job ---------------------------
run 10 --nnodes 2:4 --node-rank 3 --master-addr 10.1.2.3 --master-port 29555 -n 2 "$T/helper"
if [ "$RC" = 0 ] && grep -q '^\[6\] RANK=6 WORLD_SIZE=4 .* joining=1 restarts=0$' "$T/out" && grep -q '^\[7\] RANK=7 WORLD_SIZE=4 .* joining=1 restarts=0$' "$T/out"; then
    pass "--nnodes 2:4: node 3's ranks join a job of 2 nodes (WORLD_SIZE=4, DIST_JOINING=1)"
else
    fail "--nnodes MIN:MAX, a node past MIN" "rc=$RC" "$OUT" "$ERR"
fi
run 10 --nnodes 2:4 --node-rank 1 --master-addr 10.1.2.3 --master-port 29555 -n 2 "$T/helper"
if [ "$RC" = 0 ] && grep -q '^\[2\] RANK=2 WORLD_SIZE=4 .* joining=- restarts=0$' "$T/out"; then
    pass "--nnodes 2:4: node 1's ranks form the job"
else
    fail "--nnodes MIN:MAX, a node below MIN" "rc=$RC" "$OUT" "$ERR"
fi

# ---- --timeout -> 124 -------------------------------------------------------
run 20 -n 3 --timeout 0.5 sleep 20
if [ "$RC" = 124 ] && [ "$MS" -lt 5000 ] &&
   printf '%s\n' "$ERR" | grep -q '^distrun: timed out after 0.5 s (--timeout); stopped 3 ranks$'; then
    pass "--timeout: exit 124 in ${MS} ms"
else
    fail "--timeout" "rc=$RC ms=$MS" "$ERR"
fi

# ---- signals to the launcher ---------------------------------------------
# start_bg ARGS...: the launcher in the background, killed by a watchdog
# after 20 s if it is still there; wait_ready N: until N ranks said "ready".
start_bg() {
    "$DISTRUN" "$@" > "$T/out" 2> "$T/err" < /dev/null &
    BG=$!
    ( sleep 20; kill -KILL $BG ) > /dev/null 2>&1 &
    WD=$!
}
wait_ready() {
    for _ in $(seq 100); do
        [ "$(grep -c ' ready$' "$T/out")" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
finish_bg() {
    local t0
    t0=$(now_ms)
    wait $BG
    RC=$?
    MS=$(( $(now_ms) - t0 ))
    kill $WD 2> /dev/null
    wait $WD 2> /dev/null
    ERR=$(grep -v "$OMP_NOTICE" "$T/err")
}

start_bg -n 3 sh -c 'trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.05; done'
wait_ready 3
kill -TERM $BG
finish_bg
if [ "$RC" = 143 ] && [ "$(grep -c '^\[[0-2]\] got TERM$' "$T/out")" = 3 ] &&
   printf '%s\n' "$ERR" | grep -q '^distrun: got signal 15 (Terminated); forwarded it to 3 ranks$'; then
    pass "SIGTERM forwarded to every rank, exit 143"
else
    fail "SIGTERM forwarding" "rc=$RC" "$(cat "$T/out")" "$ERR"
fi

# ranks that ignore SIGINT: the first is forwarded, the second kills them
start_bg -n 2 --kill-grace 15 sh -c 'trap "" INT; echo ready; while :; do sleep 0.05; done'
wait_ready 2
kill -INT $BG
sleep 0.3
kill -0 $BG 2> /dev/null && alive=yes || alive=no
kill -INT $BG
finish_bg
if [ "$alive" = yes ] && [ "$RC" = 130 ] && [ "$MS" -lt 3000 ]; then
    pass "SIGINT forwarded; a second SIGINT kills the ranks (exit 130)"
else
    fail "second SIGINT" "alive after first=$alive rc=$RC ms=$MS" "$ERR"
fi

# ---- torchrun's and mpirun's habits ---------------------------------------
run 10 -np 3 "$T/helper"
if [ "$RC" = 0 ] && [ "$(grep -c '^\[[0-2]\] RANK=[0-2] WORLD_SIZE=3 ' "$T/out")" = 3 ]; then
    pass "-np 3 (mpirun's spelling) runs 3 ranks"
else
    fail "-np 3" "rc=$RC" "$OUT" "$ERR"
fi
run 10 --nproc_per_node=2 "$T/helper"
if [ "$RC" = 0 ] && [ "$(grep -c '^\[[01]\] RANK=[01] WORLD_SIZE=2 ' "$T/out")" = 2 ]; then
    pass "--nproc_per_node=2 (torchrun's spelling)"
else
    fail "--nproc_per_node=2" "rc=$RC" "$OUT" "$ERR"
fi

version=$(sed -n 's/^#define DIST_VERSION_STRING "\(.*\)"$/\1/p' "$ROOT/dist.h")
run 10 --version
out1=$OUT rc1=$RC
run 10 -V
if [ -n "$version" ] && [ "$rc1" = 0 ] && [ "$out1" = "distrun (dist) $version" ] && [ "$RC" = 0 ] && [ "$OUT" = "$out1" ]; then
    pass "--version and -V: 'distrun (dist) $version', dist.h's version"
else
    fail "--version" "rc=$rc1/$RC want 'distrun (dist) $version'" "$out1" "$OUT"
fi

# OMP_NUM_THREADS=1 with several ranks, unless the user set it; one notice
run 10 -n 2 sh -c 'echo "omp=${OMP_NUM_THREADS-unset}"'
if [ "$RC" = 0 ] && [ "$(sort "$T/out")" = "$(printf '[0] omp=1\n[1] omp=1')" ] &&
   [ "$(grep -c "$OMP_NOTICE" "$T/err")" = 1 ] && [ "$(grep -c "as 2 share" "$T/err")" = 1 ] && [ -z "$ERR" ]; then
    pass "-n 2: OMP_NUM_THREADS=1 in each rank, one notice"
else
    fail "OMP_NUM_THREADS with -n 2" "rc=$RC" "$OUT" "$ERR_ALL"
fi
OMP_NUM_THREADS=3 run 10 -n 2 sh -c 'echo "omp=${OMP_NUM_THREADS-unset}"'
if [ "$RC" = 0 ] && [ "$(sort "$T/out")" = "$(printf '[0] omp=3\n[1] omp=3')" ] && [ -z "$ERR_ALL" ]; then
    pass "OMP_NUM_THREADS set by the user: left alone, no notice"
else
    fail "OMP_NUM_THREADS set by the user" "rc=$RC" "$OUT" "$ERR_ALL"
fi
run 10 -n 1 sh -c 'echo "omp=${OMP_NUM_THREADS-unset}"'
if [ "$RC" = 0 ] && [ "$OUT" = "[0] omp=unset" ] && [ -z "$ERR_ALL" ]; then
    pass "-n 1: OMP_NUM_THREADS not set, no notice"
else
    fail "OMP_NUM_THREADS with -n 1" "rc=$RC" "$OUT" "$ERR_ALL"
fi

# --tag-output: Open MPI's prefixes
run 10 -n 2 --tag-output sh -c 'echo "out $RANK"; echo "err $RANK" >&2'
if [ "$RC" = 0 ] && [ "$(sort "$T/out")" = "$(printf '[1,0]<stdout>:out 0\n[1,1]<stdout>:out 1')" ] &&
   [ "$(printf '%s\n' "$ERR" | sort)" = "$(printf '[1,0]<stderr>:err 0\n[1,1]<stderr>:err 1')" ]; then
    pass "--tag-output: lines prefixed [1,RANK]<stdout>: and [1,RANK]<stderr>:"
else
    fail "--tag-output" "rc=$RC" "$OUT" "$ERR"
fi

# --log-dir: each rank's streams in files of their own, byte for byte, and
# nothing on the terminal; a restarted rank appends to them
LD="$T/logs/a/b"
run 10 -n 3 --log-dir "$LD" sh -c 'echo "out $RANK"; echo "err $RANK" >&2; printf "no newline $RANK"'
ok=1
for r in 0 1 2; do
    [ "$(cat "$LD/rank$r.out")" = "$(printf 'out %s\nno newline %s' $r $r)" ] || ok=0
    [ "$(od -An -c "$LD/rank$r.out" | tr -d ' \n' | tail -c 1)" = "$r" ] || ok=0    # as written: no newline added
    [ "$(cat "$LD/rank$r.err")" = "err $r" ] || ok=0
done
if [ "$RC" = 0 ] && [ $ok = 1 ] && [ -z "$OUT" ] && [ -z "$ERR" ] && [ "$(ls "$LD" | wc -l)" = 6 ]; then
    pass "--log-dir: DIR/rankR.out and .err (DIR made), as the ranks wrote them; nothing relayed"
else
    fail "--log-dir" "rc=$RC" "$OUT" "$ERR" "$(ls -l "$LD" 2>&1)" "$(head -c 300 "$LD/rank0.out" 2>&1)"
fi
run 10 -n 2 --log-dir "$LD" --max-restarts 1 sh -c 'echo "attempt $DIST_RESTART_COUNT of rank $RANK"; if [ "$RANK" = 1 ] && [ "$DIST_RESTART_COUNT" = 0 ]; then exit 5; fi'
if [ "$RC" = 0 ] && [ "$(cat "$LD/rank1.out")" = "$(printf 'attempt 0 of rank 1\nattempt 1 of rank 1')" ] &&
   [ "$(cat "$LD/rank0.out")" = "attempt 0 of rank 0" ] && [ ! -s "$LD/rank0.err" ]; then
    pass "--log-dir again: the files are emptied at the start; a restarted rank appends"
else
    fail "--log-dir with a restart" "rc=$RC" "$(cat "$LD/rank1.out")" "$ERR"
fi
run 10 -n 2 --log-dir "$T/logs/t" --tee 1 sh -c 'echo "out $RANK"; echo "err $RANK" >&2'
if [ "$RC" = 0 ] && [ "$(sort "$T/out")" = "$(printf '[0] out 0\n[1] out 1')" ] && [ -z "$ERR" ] &&
   [ "$(cat "$T/logs/t/rank1.out")" = "out 1" ] && [ "$(cat "$T/logs/t/rank1.err")" = "err 1" ]; then
    pass "--tee 1: stdout also relayed (prefixed), stderr only in the files"
else
    fail "--tee 1" "rc=$RC" "$OUT" "$ERR"
fi
run 10 -n 2 --output-filename "$T/logs/m" --tee 3 --tag-output sh -c 'echo "out $RANK"; echo "err $RANK" >&2'
if [ "$RC" = 0 ] && [ "$(sort "$T/out")" = "$(printf '[1,0]<stdout>:out 0\n[1,1]<stdout>:out 1')" ] &&
   [ "$(printf '%s\n' "$ERR" | sort)" = "$(printf '[1,0]<stderr>:err 0\n[1,1]<stderr>:err 1')" ] &&
   [ "$(cat "$T/logs/m/rank0.out")" = "out 0" ] && [ "$(cat "$T/logs/m/rank0.err")" = "err 0" ]; then
    pass "--output-filename (mpirun's) --tee 3 --tag-output: files, and both streams relayed with tags"
else
    fail "--output-filename --tee 3" "rc=$RC" "$OUT" "$ERR"
fi
: > "$T/notadir"
run 10 -n 1 --log-dir "$T/notadir/x" true
if [ "$RC" = 1 ] && printf '%s\n' "$ERR" | grep -q "^distrun: cannot make the log directory '$T/notadir/x': "; then
    pass "--log-dir that cannot be made: exit 1, said why"
else
    fail "--log-dir that cannot be made" "rc=$RC" "$ERR"
fi

# ---- the root cause: the first rank to fail in time ------------------------
run 20 -n 4 sh -c 'if [ "$RANK" = 3 ]; then exit 7; fi; sleep 20'
if [ "$RC" = 7 ] && [ "$MS" -lt 5000 ] && [ "$(printf '%s\n' "$ERR" | grep -c '^distrun:')" = 1 ] &&
   printf '%s\n' "$ERR" | grep -Eq "^distrun: rank 3 \\(pid [0-9]+\\) exited with code 7$WHEN_RE, the first to fail; distrun stopped ranks 0-2\$"; then
    pass "rank 3 exits 7 at once: named with its host and time, ranks 0-2 stopped by distrun"
else
    fail "root cause, rank 3" "rc=$RC ms=$MS" "$ERR"
fi
# rank 0 fails too, but only because distrun's SIGTERM makes it (exit 1)
run 20 -n 3 sh -c 'if [ "$RANK" = 2 ]; then sleep 0.3; exit 3; fi; trap "exit 1" TERM; sleep 20 & wait'
if [ "$RC" = 3 ] &&
   printf '%s\n' "$ERR" | grep -Eq "^distrun: rank 2 \\(pid [0-9]+\\) exited with code 3$WHEN_RE, the first to fail; distrun stopped ranks 0, 1\$"; then
    pass "ranks that exit 1 on distrun's SIGTERM are stopped, not the cause: rank 2 named, exit 3"
else
    fail "root cause vs ranks distrun stopped" "rc=$RC" "$ERR"
fi
# Rank 3 fails while distrun is stopped (SIGSTOP); 0.3 s later rank 0 fails
# too; then distrun goes on and finds both ended: rank 3 is the cause, though
# distrun would reap rank 0 (the older child) first.
mkdir -p "$T/rc"
"$DISTRUN" -n 4 sh -c 'case $RANK in
  3) while [ ! -e "$0/go" ]; do sleep 0.02; done; : > "$0/r3"; exit 7 ;;
  0) while [ ! -e "$0/r3" ]; do sleep 0.02; done; sleep 0.3; : > "$0/r0"; exit 1 ;;
  *) echo ready; sleep 20 ;;
esac' "$T/rc" > "$T/out" 2> "$T/err" < /dev/null &
BG=$!
( sleep 20; kill -KILL $BG ) > /dev/null 2>&1 &
WD=$!
for _ in $(seq 100); do [ "$(grep -c ' ready$' "$T/out")" -ge 2 ] && break; sleep 0.05; done
kill -STOP $BG
: > "$T/rc/go"
for _ in $(seq 100); do [ -e "$T/rc/r0" ] && break; sleep 0.05; done
sleep 0.2
kill -CONT $BG
wait $BG
RC=$?
kill $WD 2> /dev/null
wait $WD 2> /dev/null
ERR=$(grep -v "$OMP_NOTICE" "$T/err")
if [ "$RC" = 7 ] && [ -e "$T/rc/r0" ] &&
   printf '%s\n' "$ERR" | grep -Eq "^distrun: rank 3 \\(pid [0-9]+\\) exited with code 7$WHEN_RE, the first to fail; then rank 0 failed too; distrun stopped ranks 1, 2\$"; then
    pass "two ranks fail while distrun is stopped: the first in time (rank 3) is named, not the first reaped"
else
    fail "root cause in time" "rc=$RC (want 7)" "$ERR"
fi

# ---- what a rank leaves running dies with it ---------------------------------
# Each rank starts a sleep in the background (rank 1 also one that ignores
# SIGTERM, and, where there is setsid, one that leaves the rank's process
# group); rank 1 exits 1 and rank 0 is stopped by distrun.
gone_all() {
    local f
    for f in "$T"/left.*; do
        [ -f "$f" ] || continue
        kill -0 "$(cat "$f")" 2> /dev/null && return 1
    done
    return 0
}
rm -f "$T"/left.*
setsid_cmd=:
command -v setsid > /dev/null 2>&1 && setsid_cmd='(exec setsid sleep 300) & echo $! > "$0/left.s$RANK";'
run 20 -n 2 sh -c 'sleep 300 & echo $! > "$0/left.$RANK"; (trap "" TERM; exec sleep 300) & echo $! > "$0/left.t$RANK"; '"$setsid_cmd"'
    sleep 0.2; [ "$RANK" = 1 ] && exit 1; sleep 20' "$T"
nleft=$(ls "$T"/left.* 2> /dev/null | wc -l)
if [ "$RC" = 1 ] && [ "$nleft" -ge 4 ] && gone_all; then
    pass "a failed rank's and a stopped rank's leftovers ($nleft, SIGTERM ignored$([ "$setsid_cmd" != : ] && echo ', setsid')) are gone when distrun returns"
else
    fail "leftovers of ranks" "rc=$RC left=$nleft" "$ERR" "$(for f in "$T"/left.*; do kill -0 "$(cat "$f")" 2> /dev/null && echo "alive: $f"; done)"
fi
rm -f "$T"/left.*
run 20 -n 2 sh -c 'sleep 300 & echo $! > "$0/left.$RANK"; '"$setsid_cmd"' sleep 0.2' "$T"
if [ "$RC" = 0 ] && gone_all; then
    pass "ranks that exit 0: their leftovers are gone too"
else
    fail "leftovers of ranks that exit 0" "rc=$RC" "$ERR"
fi
rm -f "$T"/left.*
start_bg -n 2 sh -c '(trap "" TERM; exec sleep 300) & echo $! > "$0/left.t$RANK"; '"$setsid_cmd"' echo ready; wait' "$T"
wait_ready 2
kill -TERM $BG
finish_bg
if [ "$RC" = 143 ] && [ "$(ls "$T"/left.* | wc -l)" -ge 2 ] && gone_all; then
    pass "distrun sent SIGTERM: what the ranks started is gone too (SIGTERM ignored$([ "$setsid_cmd" != : ] && echo ', setsid'))"
else
    fail "leftovers when distrun is stopped" "rc=$RC" "$ERR"
fi

# ---- job reports (dist.h's flight recorder, through distrun's store) -------
# Four ranks make three all_reduces; then rank 1 sleeps (or fails) instead of
# making the fourth.  --timeout 4: distrun asks the ranks what they are doing
# before it stops them, and prints it: the others wait in all_reduce #4,
# rank 1 is behind.  SIGUSR1: the same report at once, the job going on.
cat > "$T/hang.c" <<'EOF2'
#define DIST_IMPLEMENTATION
#include "dist.h"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    dist_t *w;
    double x = 1;
    if (dist_init(&w, NULL) != DIST_OK) { fprintf(stderr, "%s\n", dist_error_message(NULL)); return 1; }
    for (int i = 0; i < 3; i++) dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM);
    if (argc > 1 && !strcmp(argv[1], "die")) {       /* rank 2 is killed; then 1, 3, 4 end without a word */
        if (dist_rank(w) == 2) raise(SIGKILL);
        if (dist_rank(w) % 2 || dist_rank(w) == 4) { usleep(300000); _exit(5); }
        sleep(5);                                   /* rank 0 answers, idle */
        return 0;
    }
    if (dist_rank(w) == 1) sleep(argc > 1 ? 100 : 3);
    if (dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM) != DIST_OK) { fprintf(stderr, "%s\n", dist_error_message(w)); return 1; }
    printf("sum %g\n", x);
    return dist_destroy(w) != DIST_OK;
}
EOF2
if ${CC:-cc} -std=c11 -O1 -I"$ROOT" -o "$T/hang" "$T/hang.c" -pthread -lm 2> "$T/cc.err"; then
    run 30 -n 4 --timeout 4 "$T/hang" forever
    if [ "$RC" = 124 ] && printf '%s\n' "$ERR" | grep -q '^distrun: job report: 4 of 4 ranks answered$' &&
       printf '%s\n' "$ERR" | grep -q '^distrun:   ranks 0, 2-3 wait in all_reduce #4 (1 x float64, sum)' &&
       printf '%s\n' "$ERR" | grep -q '^distrun:   rank 1 has not called collective #4: its last, all_reduce #3' &&
       printf '%s\n' "$ERR" | grep -q '^distrun:   likely cause: rank 1 is behind'; then
        pass "--timeout: the job report names rank 1, behind the others in all_reduce #4 ($MS ms)"
    else
        fail "--timeout job report" "rc=$RC" "$ERR"
    fi
    # SIGUSR1 while rank 1 sleeps 3 s: a report, then the job finishes (x = 1 on each of 4 ranks, summed four times: 256)
    timeout -s KILL 30 "$DISTRUN" -n 4 "$T/hang" > "$T/out" 2> "$T/err" < /dev/null &
    DPID=$!
    sleep 1.5
    pkill -USR1 -P "$DPID"     # (distrun, the child of timeout)
    wait "$DPID"
    RC=$?
    ERR=$(grep -v "$OMP_NOTICE" "$T/err")
    if [ "$RC" = 0 ] && [ "$(grep -c 'sum 256' "$T/out")" = 4 ] && printf '%s\n' "$ERR" | grep -q '^distrun: job report: 4 of 4 ranks answered$' &&
       printf '%s\n' "$ERR" | grep -q '^distrun:   ranks 0, 2-3 wait in all_reduce #4'; then
        pass "SIGUSR1: a job report while rank 1 is behind, and the job goes on (sums right)"
    else
        fail "SIGUSR1 job report" "rc=$RC" "$ERR" "$(cat "$T/out")"
    fi
    # rank 2 is killed, then ranks 1, 3 and 4 end while distrun waits for the
    # report: none of them answers, and the report's likely cause is the
    # rank the summary names (it guessed rank 1, the lowest silent one)
    run 30 -n 5 "$T/hang" die
    if [ "$RC" = 137 ] && printf '%s\n' "$ERR" | grep -Eq "^distrun: rank 2 \\(pid [0-9]+\\) was killed by signal 9 \\(Killed\\)$WHEN_RE, the first to fail" &&
       printf '%s\n' "$ERR" | grep -q '^distrun:   likely cause: rank 2 was killed by signal 9 (Killed) (the launcher saw it fail first)$' &&
       [ "$(printf '%s\n' "$ERR" | grep -c 'likely cause')" = 1 ]; then
        pass "rank 2 killed, then ranks 1, 3, 4 gone: the report's likely cause is rank 2, as the summary says ($MS ms)"
    else
        fail "the report's likely cause agrees with the summary" "rc=$RC" "$ERR"
    fi
    # a job of programs that are not dist's: no report, and no wait for one
    run 20 -n 2 --timeout 1 sleep 10
    if [ "$RC" = 124 ] && [ "$MS" -lt 6000 ] && ! printf '%s\n' "$ERR" | grep -q 'job report'; then
        pass "--timeout on ranks that are not dist programs: no report, no wait ($MS ms)"
    else
        fail "--timeout without dist ranks" "rc=$RC ms=$MS" "$ERR"
    fi
else
    fail "could not compile the job-report program" "$(cat "$T/cc.err")"
fi

# ---- the examples that need restarts say so at the start ------------------
ex=${BUILD_DIR:-$ROOT/build}/examples
# needs_restarts WHAT MESSAGE DISTRUN-ARGS...: exit 2 at once, saying MESSAGE
needs_restarts() {
    local what=$1 msg=$2
    shift 2
    run 30 "$@"
    if [ "$RC" = 2 ] && printf '%s\n' "$ERR" | grep -qF "$msg"; then
        pass "$what without --max-restarts: says it needs them at the start, exit 2 ($MS ms)"
    else
        fail "$what without --max-restarts" "rc=$RC ms=$MS" "$ERR"
    fi
}
if [ -x "$ex/rl_cartpole" ] && [ -x "$ex/dist_sgd" ]; then
    needs_restarts "rl_cartpole --chaos" "rl_cartpole: --chaos kills up to 10 observers and needs each restarted: run it under distrun --max-restarts 10" \
        -n 5 "$ex/rl_cartpole" --chaos --smoke
    needs_restarts "dist_sgd --elastic" "dist_sgd: --elastic kills rank 2 and needs it restarted: run it under distrun --max-restarts 1" \
        -n 4 "$ex/dist_sgd" --elastic --smoke
else
    fail "the examples are not built in $ex"
fi

# ---- arguments --------------------------------------------------------------
bad=0
for args in "-n 0 true" "--bogus true" "" "--nnodes 2 true" "--nnodes 2 --node-rank 2 --master-port 1 true" \
            "--master-port 70000 true" "--timeout x true" "-n" "--nnodes 3:2 --master-port 1 true" "--nnodes :2 true" \
            "--max-restarts -1 true" "--tee 1 true" "--log-dir /tmp --tee 4 true" "-np"; do
    # shellcheck disable=SC2086
    run 10 $args
    if [ "$RC" != 2 ] || ! printf '%s\n' "$ERR" | grep -q "^Try 'distrun --help'"; then
        bad=1
        fail "bad arguments '$args' -> exit 2" "rc=$RC" "$ERR"
    fi
done
[ $bad = 0 ] && pass "bad arguments: one error line plus a hint, exit 2"
run 10 --help
if [ "$RC" = 0 ] && printf '%s\n' "$OUT" | grep -q '^usage: distrun'; then pass "--help"; else fail "--help" "rc=$RC"; fi
run 10 -n2 -- "$T/helper" --not-an-option
if [ "$RC" = 0 ] && [ "$(wc -l < "$T/out")" = 2 ]; then pass "-n2 and -- before PROG"; else fail "-n2 --" "rc=$RC" "$ERR"; fi

if [ $FAILS = 0 ]; then
    echo "test_distrun: all checks passed"
    exit 0
fi
echo "test_distrun: $FAILS check(s) failed"
exit 1
