#!/usr/bin/env bash
# tests/windows/mixed_job.sh [BUILD_DIR] - jobs whose ranks run on Linux and
# on Windows at once: native Linux processes and Windows programs under Wine
# on this machine, one job over loopback TCP (env://).
#
# Builds tests/mixed_rank.c and tests/mixed_rpc.c twice into BUILD_DIR
# (default build/windows): for Linux (cc) and for Windows
# (x86_64-w64-mingw32-gcc), both -std=c11 -O2 -Wall -Wextra -Werror (again
# only when a source or header is newer than the program).  Then the jobs,
# each on a free port with its own DIST_RUN_ID, every process under
# `timeout -k 5 120`:
#   mixed_rank (tests/collcheck.h's every collective x dtype x op, checked
#   against a reference, then send/recv and isend/irecv of 8 B, 64 KiB and
#   3 MiB between every pair, both ways):
#     n=4 L W L W          ranks 0, 2 Linux and 1, 3 Windows: ring and tree
#                          neighbours alternate; Linux ranks share memory
#                          with each other, Windows ranks too, the rest TCP
#     n=4 L W L W tcp      DIST_TRANSPORT=tcp: TCP between every pair
#     n=4 L W L W ring     DIST_ALGO=ring
#     n=4 L W L W tree     DIST_ALGO=tree
#     n=3 W L W            rank 0 (the store's host) on Windows
#     n=4 W W W W          Windows alone: a world on one host, so the
#                          shared-memory collectives (slots, segments)
#   Each rank checks it shares memory with exactly the peers of its own OS
#   (none with tcp), from the library's log (MIXED_EXPECT_SHM).
#   mixed_rpc (rpc_sync, 1000 rpc_async in flight, 5 + 2.4 MB tensors each
#   way checked element by element, a remote handler's error message, an
#   RRef: remote, to_here, back to its owner):
#     n=2 L W, and n=2 W L
# One line per job, "ok   ..." or "FAIL ..." with each rank's last lines.
# Exit 0 when all passed, 77 (one line why) without MinGW-w64 or Wine, 1
# otherwise.  Wine's prefix: $WINEPREFIX, default /tmp/wineprefix-mixed
# (made on the first run, ~20 s).
# TIMEOUT: 300
set -u

cd "$(dirname "$0")/../.."
out=${1:-build/windows}
WCC=${MINGW_CC:-x86_64-w64-mingw32-gcc}
LCC=${CC:-cc}
command -v "$WCC" >/dev/null 2>&1 || { echo "skip: no MinGW-w64 compiler ($WCC; apt install gcc-mingw-w64-x86-64)"; exit 77; }
WINE=$(command -v wine || command -v wine64) || { echo "skip: Wine is not installed (apt install wine64)"; exit 77; }
command -v timeout >/dev/null 2>&1 || { echo "skip: no timeout(1)"; exit 77; }
export WINEPREFIX=${WINEPREFIX:-/tmp/wineprefix-mixed} WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
# what a caller's environment could change in the jobs
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT DIST_RUN_ID DIST_INIT_METHOD DIST_TRANSPORT DIST_ALGO \
      DIST_SECRET DIST_STORE_LISTEN_FD DIST_EAGER_BYTES DIST_SOCKET_IFNAME DIST_DEBUG DIST_SPIN_US MIXED_EXPECT_SHM \
      OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS TORCHELASTIC_RUN_ID
mkdir -p "$out"
out=$(cd "$out" && pwd)
T=$(mktemp -d "$out/mixed.XXXXXX")
START=$(date +%s%3N)
PIDS=()
FAILS=0
NJOBS=0

# the running job's ranks (their timeout(1), which passes TERM on)
cleanup() {
    local p
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill -TERM "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

now_ms() { date +%s%3N; }
secs() { local ms=$(( $(now_ms) - $1 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; local l; for l in "$@"; do echo "     $l"; done; FAILS=$((FAILS + 1)); }

# ---- build ----------------------------------------------------------------
# stale BIN SOURCES...: whether BIN is missing or older than one of them
stale() {
    local bin=$1 f
    shift
    [ -e "$bin" ] || return 0
    for f in "$@"; do [ "$f" -nt "$bin" ] && return 0; done
    return 1
}
# build NAME: the Linux and the Windows program, side by side
build() {
    local name=$1 deps rcl=0 rcw=0 pl= pw=
    deps=(tests/$name.c tests/collcheck.h dist.h dist_rpc.h)
    if stale "$out/$name" "${deps[@]}"; then
        BUILT=$((BUILT + 1))
        "$LCC" -std=c11 -O2 -Wall -Wextra -Werror -I. "tests/$name.c" -o "$out/$name" -pthread -lm > "$T/cc-$name.log" 2>&1 &
        pl=$!
    fi
    if stale "$out/$name.exe" "${deps[@]}"; then
        BUILT=$((BUILT + 1))
        "$WCC" -std=c11 -O2 -Wall -Wextra -Werror -I. "tests/$name.c" -o "$out/$name.exe" -lws2_32 > "$T/cc-$name.exe.log" 2>&1 &
        pw=$!
    fi
    [ -n "$pl" ] && { wait "$pl"; rcl=$?; }
    [ -n "$pw" ] && { wait "$pw"; rcw=$?; }
    if [ $rcl -ne 0 ]; then
        rm -f "$out/$name"
        fail "$name builds for Linux ($LCC -std=c11 -O2 -Wall -Wextra -Werror)" "$(head -20 "$T/cc-$name.log")"
    fi
    if [ $rcw -ne 0 ]; then
        rm -f "$out/$name.exe"
        fail "$name builds for Windows ($WCC -std=c11 -O2 -Wall -Wextra -Werror)" "$(head -20 "$T/cc-$name.exe.log")"
    fi
    [ $rcl -eq 0 ] && [ $rcw -eq 0 ]
}
t0=$(now_ms)
BUILT=0
build mixed_rank && build mixed_rpc || exit 1
echo "     mixed_rank, mixed_rpc for Linux and Windows: $BUILT of 4 programs rebuilt ($(secs "$t0") s)"

# the first start makes the prefix; a program that cannot join says so on one line
t0=$(now_ms)
timeout -k 5 180 "$WINE" "$out/mixed_rank.exe" > "$T/warm" 2>&1 < /dev/null
if ! grep -q "(windows)" "$T/warm"; then
    echo "skip: Wine cannot run a Windows program here: $(tr -d '\r' < "$T/warm" | tail -1)"
    exit 77
fi
echo "     wine started ($(secs "$t0") s)"

# ---- jobs -----------------------------------------------------------------
free_port() {
    local p
    if command -v python3 >/dev/null 2>&1 &&
        p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null); then
        echo "$p"; return
    fi
    while :; do                 # nobody listening there (a refused connect)
        p=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
}

# job TITLE PROG KINDS [VAR=VALUE...]: one rank per letter of KINDS (L Linux,
# W Windows under Wine), the variables set for every rank; passes when
# every rank exits 0 and printed its "ok" line.
job() {
    local title=$1 prog=$2 kinds=$3 n=${#3} port id r k t0 ok=1 expect shm=1 v
    local -a pids=() rcs=() lines=()
    shift 3
    for v in "$@"; do [ "$v" = DIST_TRANSPORT=tcp ] && shm=0; done
    NJOBS=$((NJOBS + 1))
    port=$(free_port)
    id="mixed-$$-$NJOBS-$RANDOM"
    t0=$(now_ms)
    for ((r = 0; r < n; r++)); do
        k=${kinds:r:1}
        # shared memory with the other ranks of the same OS (none over tcp)
        expect=0
        [ $shm = 1 ] && expect=$(( $(tr -cd "$k" <<< "$kinds" | wc -c) - 1 ))
        local -a cmd=("$out/$prog")
        [ "$k" = W ] && cmd=("$WINE" "$out/$prog.exe")
        env "$@" RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DIST_RUN_ID=$id DIST_TIMEOUT=60 \
            MIXED_EXPECT_SHM=$expect timeout -k 5 120 "${cmd[@]}" > "$T/job$NJOBS.$r" 2>&1 < /dev/null &
        pids[r]=$!
        PIDS+=("$!")
    done
    for ((r = 0; r < n; r++)); do
        wait "${pids[r]}"
        rcs[r]=$?
    done
    PIDS=()
    for ((r = 0; r < n; r++)); do
        tr -d '\r' < "$T/job$NJOBS.$r" > "$T/job$NJOBS.$r.txt"
        if [ "${rcs[r]}" -ne 0 ] || ! grep -q '^ok   ' "$T/job$NJOBS.$r.txt"; then ok=0; fi
    done
    if [ $ok = 1 ]; then
        pass "$title ($(secs "$t0") s)"
        for ((r = 0; r < n; r++)); do echo "       $(grep '^ok   ' "$T/job$NJOBS.$r.txt" | head -1 | sed 's/^ok   //')"; done
        return
    fi
    for ((r = 0; r < n; r++)); do
        k=${kinds:r:1}
        lines+=("rank $r ($([ "$k" = W ] && echo windows || echo linux)), exit status ${rcs[r]}$([ "${rcs[r]}" = 124 ] && echo ': killed by timeout after 120 s'):")
        while IFS= read -r v; do lines+=("  $v"); done < <(tail -n 6 "$T/job$NJOBS.$r.txt")
    done
    fail "$title ($(secs "$t0") s)" "${lines[@]}"
}

job "mixed_rank n=4 L W L W (auto: shared memory L-L and W-W, TCP between OSes)" mixed_rank LWLW
job "mixed_rank n=4 L W L W DIST_TRANSPORT=tcp" mixed_rank LWLW DIST_TRANSPORT=tcp
job "mixed_rank n=4 L W L W DIST_ALGO=ring" mixed_rank LWLW DIST_ALGO=ring
job "mixed_rank n=4 L W L W DIST_ALGO=tree" mixed_rank LWLW DIST_ALGO=tree
job "mixed_rank n=3 W L W (the store on Windows)" mixed_rank WLW
job "mixed_rank n=4 W W W W (Windows alone: shared-memory collectives)" mixed_rank WWWW
job "mixed_rpc n=2 worker0 Linux, worker1 Windows" mixed_rpc LW
job "mixed_rpc n=2 worker0 Windows, worker1 Linux" mixed_rpc WL

echo "mixed_job: $FAILS of $NJOBS jobs failed ($(secs "$START") s)"
[ $FAILS -eq 0 ]
