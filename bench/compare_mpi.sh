#!/usr/bin/env bash
# bench/compare_mpi.sh - dist.h's collectives against OpenMPI's, same sizes,
# same timing method, interleaved in one run (this machine is shared and
# noisy).  Needs OpenMPI (Debian: openmpi-bin libopenmpi-dev); installs it
# with apt-get when missing and running as root.  The project itself never
# depends on MPI.
#
#   bench/compare_mpi.sh [-n RANKS] [-o COLLECTIVE] [-t tcp|shm] [-r ROUNDS] [-b MIN] [-e MAX]
#
# -t tcp runs MPI with --mca btl tcp,self and dist.h with DIST_TRANSPORT=tcp;
# -t shm runs both with their defaults.  Prints, per size, the median over
# the rounds of each side's busbw (GB/s) and time (us).
set -euo pipefail
cd "$(dirname "$0")/.."
n=2 coll=all_reduce transport=tcp rounds=3 minb=8 maxb=64M
while getopts "n:o:t:r:b:e:" opt; do
    case $opt in
        n) n=$OPTARG ;; o) coll=$OPTARG ;; t) transport=$OPTARG ;; r) rounds=$OPTARG ;;
        b) minb=$OPTARG ;; e) maxb=$OPTARG ;; *) exit 2 ;;
    esac
done
if ! command -v mpicc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
    else
        echo "compare_mpi: OpenMPI (mpicc, mpirun) is not installed" >&2; exit 77
    fi
fi
build=${BUILD_DIR:-build}
make -s "$build/bench/coll_bench" >/dev/null
mkdir -p "$build/mpi"
mpicc -O2 bench/mpi_ref.c -o "$build/mpi/mpi_ref"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mca=()
if [ "$transport" = tcp ]; then mca=(--mca btl tcp,self); export DIST_TRANSPORT=tcp; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
    "$build/bench/coll_bench" -N "$n" -o "$coll" -b "$minb" -e "$maxb" -f 4 | grep -v '^#' | awk '{print $1, $5, $7}' > "$tmp/dist.$r"
    timeout 600 mpirun -n "$n" "${mca[@]}" "$build/mpi/mpi_ref" -o "$coll" -b "$minb" -e "$maxb" -f 4 2>/dev/null \
        | grep -v '^#' | awk '{print $1, $2, $4}' > "$tmp/mpi.$r"
done
echo "# $coll, $n ranks, float32 sum, transport $transport, median of $rounds interleaved rounds"
printf '# %10s %12s %12s %12s %12s %8s\n' bytes "dist us" "mpi us" "dist busbw" "mpi busbw" "dist/mpi"
paste "$tmp"/dist.* "$tmp"/mpi.* | awk -v R="$rounds" '
function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                               return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
{ for (i = 0; i < R; i++) { dt[i + 1] = $(3 * i + 2); db[i + 1] = $(3 * i + 3); mt[i + 1] = $(3 * (R + i) + 2); mb[i + 1] = $(3 * (R + i) + 3) }
  a = med(db, R); b = med(mb, R)
  printf "  %10d %12.2f %12.2f %12.3f %12.3f %8.2f\n", $1, med(dt, R), med(mt, R), a, b, (b > 0 ? a / b : 0) }'
