#!/usr/bin/env bash
# bench/compare_matrix.sh - dist.h against OpenMPI over the whole matrix:
# every collective x rank count x transport, one bench/compare_mpi.sh table
# each (per size: dist and MPI mean and median us per call, the median of
# each over the interleaved rounds, and mpi/dist = mpi mean / dist mean,
# >= 1.0 where dist.h is at least as fast).  Then a summary: per table, the
# smallest and the geometric mean of mpi/dist over its sizes.
#
#   bench/compare_matrix.sh [-o COLLS] [-n RANKS] [-t TRANSPORTS] [-r ROUNDS] [-l SIZES]
#
#   -o COLLS       comma-separated         default all_reduce,broadcast,all_gather
#   -n RANKS       comma-separated         default 2,4
#   -t TRANSPORTS  comma-separated         default shm,tcp
#   -r ROUNDS      rounds per table        default 3
#   -l SIZES       comma-separated bytes   default 8,64,1K,16K,256K,1M,4M,16M,64M
#
# tcp: MPI with --mca btl tcp,self, dist.h with DIST_TRANSPORT=tcp; shm:
# both with their defaults (see compare_mpi.sh, which also installs
# OpenMPI when it is missing).  With the defaults it takes about 4 minutes
# on the 2-core VM (4-rank TCP is the slowest: ~17 s a round).
set -euo pipefail
cd "$(dirname "$0")/.."
colls=all_reduce,broadcast,all_gather ranks=2,4 transports=shm,tcp rounds=3 sizes=8,64,1K,16K,256K,1M,4M,16M,64M
while getopts "o:n:t:r:l:" opt; do
    case $opt in
        o) colls=$OPTARG ;; n) ranks=$OPTARG ;; t) transports=$OPTARG ;; r) rounds=$OPTARG ;; l) sizes=$OPTARG ;;
        *) exit 2 ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
summary=$tmp/summary
# One build of both programs for every table (dist.h may change meanwhile).
bench/compare_mpi.sh -B "$tmp"
export COLL_BENCH=$tmp/coll_bench MPI_REF=$tmp/mpi_ref
for coll in ${colls//,/ }; do
    for n in ${ranks//,/ }; do
        for t in ${transports//,/ }; do
            out=$(bench/compare_mpi.sh -o "$coll" -n "$n" -t "$t" -r "$rounds" -l "$sizes")
            printf '%s\n\n' "$out"
            # column 6 of a row is mpi/dist
            awk -v name="$coll $n ranks $t" '!/^#/ && $6 > 0 { k++; lg += log($6); if (!mn || $6 < mn) { mn = $6; at = $1 } }
                END { printf "  %-26s %8.2f %8.2f %12d\n", name, k ? exp(lg / k) : 0, mn, at }' <<<"$out" >> "$summary"
        done
    done
done
echo "# summary: mpi/dist (mpi mean / dist mean; >= 1: dist.h at least as fast), over the sizes of each table"
printf '# %-26s %8s %8s %12s\n' "collective ranks transport" geomean min "min at bytes"
cat "$summary"
