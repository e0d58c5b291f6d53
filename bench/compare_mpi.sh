#!/usr/bin/env bash
# bench/compare_mpi.sh - dist.h's collectives against OpenMPI's, same sizes,
# same timing method, interleaved in one run (this machine is shared and
# noisy).  Needs OpenMPI (Debian: openmpi-bin libopenmpi-dev); installs it
# with apt-get when missing and running as root.  The project itself never
# depends on MPI.
#
#   bench/compare_mpi.sh [-n RANKS] [-o COLLECTIVE] [-t tcp|shm] [-r ROUNDS]
#                        [-b MIN] [-e MAX] [-l LIST] [-B DIR]
#
#   -n RANKS       default 2
#   -o COLLECTIVE  all_reduce (default), broadcast, reduce, gather,
#                  all_gather, scatter, reduce_scatter, all_to_all, sendrecv,
#                  barrier (coll_bench's --coll)
#   -t tcp|shm     default tcp: MPI with --mca btl tcp,self and dist.h with
#                  DIST_TRANSPORT=tcp; shm: both with their defaults
#   -r ROUNDS      default 3
#   -b, -e         smallest and largest size, x4 a step (default 8, 64M)
#   -l LIST        these sizes instead, comma-separated (8,64,1K,...,64M)
#   -B DIR         only build coll_bench and mpi_ref and copy them into DIR
#                  (compare_matrix.sh: one build for all its tables); the
#                  environment's COLL_BENCH and MPI_REF, when set, name the
#                  programs to run instead of building them
#
# Each round runs build/bench/coll_bench and mpi_ref (bench/mpi_ref.c, built
# with mpicc into build/mpi; `make bench` leaves it out) once each over all
# the sizes, which of the two goes first alternating from round to round.
# Both time the way OSU and nccl-tests do (back-to-back calls, no barrier
# between them; see bench/benchutil.h) and print nccl-tests' columns; the
# in-place ones are compared (dist.h's collectives work in place, MPI's
# with MPI_IN_PLACE): the mean time per call and the median per-call
# duration, each the mean over the ranks (nccl-tests' -a 1, both
# programs' default).  Printed per size: the MEDIAN OVER THE ROUNDS of each
# side's per-round mean and of its per-round median, in us,
#
#   bytes  dist_mean  mpi_mean  dist_med  mpi_med  mpi/dist  dist_busbw  mpi_busbw
#
# where mpi/dist = mpi_mean / dist_mean: dist.h's speed as a multiple of
# OpenMPI's (>= 1.0: dist.h at least as fast), and the busbw columns are
# the median over the rounds of each side's busbw (GB/s, from its mean, with
# nccl-tests' factors).  bench/compare_matrix.sh runs this over
# collectives, rank counts and transports.
set -euo pipefail
cd "$(dirname "$0")/.."
n=2 coll=all_reduce transport=tcp rounds=3 minb=8 maxb=64M list= snapshot=
while getopts "n:o:t:r:b:e:l:B:" opt; do
    case $opt in
        n) n=$OPTARG ;; o) coll=$OPTARG ;; t) transport=$OPTARG ;; r) rounds=$OPTARG ;;
        b) minb=$OPTARG ;; e) maxb=$OPTARG ;; l) list=$OPTARG ;; B) snapshot=$OPTARG ;; *) exit 2 ;;
    esac
done
case $transport in tcp|shm) ;; *) echo "compare_mpi: -t tcp or -t shm" >&2; exit 2 ;; esac
if ! command -v mpicc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
    else
        echo "compare_mpi: OpenMPI (mpicc, mpirun) is not installed" >&2; exit 77
    fi
fi
build=${BUILD_DIR:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The two programs: COLL_BENCH and MPI_REF when set (compare_matrix.sh
# builds them once for all its tables), else built here.  Either way they
# are copied into $tmp first, so that every round runs the same binaries
# even when dist.h changes (and someone rebuilds) during the run.
if [ -z "${COLL_BENCH:-}" ]; then
    make -s "$build/bench/coll_bench" >/dev/null
    COLL_BENCH=$build/bench/coll_bench
fi
if [ -z "${MPI_REF:-}" ]; then
    mkdir -p "$build/mpi"
    MPI_REF=$build/mpi/mpi_ref
    for src in bench/mpi_ref.c bench/benchutil.h dist.h; do     # rebuilt when a source is newer
        if [ ! -x "$MPI_REF" ] || [ "$src" -nt "$MPI_REF" ]; then
            mpicc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra bench/mpi_ref.c -o "$MPI_REF"
            break
        fi
    done
fi
cp "$COLL_BENCH" "$tmp/coll_bench"
cp "$MPI_REF" "$tmp/mpi_ref"
if [ -n "$snapshot" ]; then cp "$tmp/coll_bench" "$tmp/mpi_ref" "$snapshot/"; exit 0; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mca=()
if [ "$transport" = tcp ]; then mca=(--mca btl tcp,self); export DIST_TRANSPORT=tcp; fi
if [ -n "$list" ]; then sizes=(-l "$list"); else sizes=(-b "$minb" -e "$maxb" -f 4); fi
# One side's rows, reduced to: side round bytes mean median busbw (the
# in-place columns 11, 12 and 14 that bench_header() in bench/benchutil.h
# names; sendrecv, which has none in place, its out-of-place 6, 7 and 9).
cols='$11, $12, $14'
[ "$coll" = sendrecv ] && cols='$6, $7, $9'
run_dist() {
    "$tmp/coll_bench" --np "$n" --coll "$coll" "${sizes[@]}" \
        | awk -v r="$1" '!/^#/ { print "dist", r, $1, '"$cols"' }' >> "$tmp/rows"
}
run_mpi() {
    timeout 600 mpirun -n "$n" "${mca[@]}" "$tmp/mpi_ref" --coll "$coll" "${sizes[@]}" 2>"$tmp/mpi.err" \
        | awk -v r="$1" '!/^#/ { print "mpi", r, $1, '"$cols"' }' >> "$tmp/rows" || { cat "$tmp/mpi.err" >&2; exit 1; }
}
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then run_dist "$r"; run_mpi "$r"; else run_mpi "$r"; run_dist "$r"; fi
done
echo "# $coll, $n ranks, float sum, in-place columns, transport $transport: median over $rounds interleaved rounds of each side's"
echo "# per-round mean and median (us per call; back-to-back calls); mpi/dist = mpi mean / dist mean (>= 1: dist faster)"
printf '# %10s %10s %10s %10s %10s %8s %10s %10s\n' bytes "dist mean" "mpi mean" "dist med" "mpi med" mpi/dist "dist busbw" "mpi busbw"
awk '
function med(s,   a, k, i, j, t) {       # median of the space-separated numbers in s
    k = split(s, a, " ")
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
{ if (!($3 in seen)) { seen[$3] = 1; order[++nb] = $3 }
  mean[$1, $3] = mean[$1, $3] " " $4; mdn[$1, $3] = mdn[$1, $3] " " $5; bw[$1, $3] = bw[$1, $3] " " $6 }
END {
    for (i = 1; i <= nb; i++) {
        b = order[i]
        if (!(("dist", b) in mean) || !(("mpi", b) in mean)) continue
        dm = med(mean["dist", b]); mm = med(mean["mpi", b])
        printf "  %10d %10.2f %10.2f %10.2f %10.2f %8.2f %10.3f %10.3f\n", b, dm, mm, med(mdn["dist", b]), med(mdn["mpi", b]),
               (dm > 0 ? mm / dm : 0), med(bw["dist", b]), med(bw["mpi", b])
    }
}' "$tmp/rows"
