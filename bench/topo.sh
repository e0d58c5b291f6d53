#!/usr/bin/env bash
# bench/topo.sh - collectives across "hosts" on one machine: H network
# namespaces with L ranks each, their links shaped to a rate, and each
# collective's time printed beside the bound the links allow.
#
#   sudo bench/topo.sh [-H hosts] [-L ranks] [-r rate] [-p placement]
#                      [-s sizes] [-c colls] [-n iters] [-f flowcap] [-g]
#
#   -H N      hosts (namespaces), default 2
#   -L N      ranks per host, default 2
#   -r RATE   each host's link, both ways (tc's units: 1gbit, 500mbit),
#             default 1gbit
#   -p block|cyclic   ranks 0..L-1 on host 0 (block, the default), or
#             rank r on host r mod H (cyclic: srun's and mpirun's
#             placement)
#   -s LIST   sizes (coll_bench's -l), default 4M,16M,64M
#   -c LIST   collectives, default "all_reduce reduce_scatter all_gather
#             broadcast"
#   -n N      timed calls per size, default 5 (after 1 untimed)
#   -f RATE   also cap every single TCP flow at RATE (an htb class per
#             hash of the flow's ports, 64 of them, under the link's rate)
#   -g        also run torch's gloo (Debian's python3-torch, for
#             comparison only) in the same topology, ranks and placement:
#             a row "gloo" under each of all_reduce, broadcast, reduce and
#             all_gather, timed as coll_bench times dist.h
#             (bench/gloo_bench.py).  OpenMPI is not run here: the ranks
#             of one mpirun take themselves for one node, and its shared
#             memory would carry "cross-host" traffic past the links.
#
# Topology: two hosts are joined by one veth pair; more hang from a bridge
# in a hub namespace, each by its own veth.  Every link is shaped on both
# ends (tbf rate RATE burst 512kb latency 50ms), so a host sends and
# receives at RATE.  Host h's address is 10.77.0.(h+1).  Rank 0's store
# listens on host 0.  The bound is the bytes that must leave one host
# over its link divided by RATE (S: nccl-tests' size): all_reduce
# 2(H-1)/H S, reduce_scatter and all_gather (H-1)/H S, broadcast and
# reduce S, all_to_all L (H-1)/H S (S: one rank's buffer, of which the
# blocks for other hosts leave; L ranks a host).  The
# bytes each host sent are read from /proc/net/dev in its namespace
# around each sweep; sent/bnd is the most any host sent over the bound's
# bytes for every call coll_bench made (both placements: 1 untimed, the
# timed ones and 1 checked each), headers and set-up included.  Times are
# the in-place column's: the largest over the ranks of the mean per call
# (-a 3), and of the median (seconds to the microsecond: the small sizes'
# bound is latency, and their reference is the same call at -L 1, one
# exchange across the link).
#
# Needs root, iproute2 and the kernel's veth, bridge, tbf (and htb, u32
# for -f).  Namespaces are named dtopo-PID-*; they are removed at exit.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

# ---- the helper (tests/test_topo.sh sources this file with TOPO_LIB=1) ----
# topo_up H RATE [FLOWCAP]: the namespaces and links; topo_down removes
# them; topo_exec H CMD... runs CMD in host H's namespace; topo_tx H: the
# bytes host H has sent over its link; topo_link H up|down.
TOPO_PRE=${TOPO_PRE:-dtopo-$$}
topo_ns() { echo "$TOPO_PRE-$1"; }
topo_exec() { local h=$1; shift; ip netns exec "$(topo_ns "$h")" "$@"; }
topo_dev() { if [ "$TOPO_H" = 2 ]; then echo "v$1"; else echo "e$1"; fi; }
topo_tx() { topo_exec "$1" awk -v d="$(topo_dev "$1"):" '$1 == d { print $10 }' /proc/net/dev; }
topo_link() { topo_exec "$1" ip link set dev "$(topo_dev "$1")" "$2"; }
topo_down() {
    local x
    for x in $(seq 0 $((${TOPO_H:-0} - 1))) hub; do ip netns del "$(topo_ns "$x")" 2>/dev/null || true; done
}
topo_shape() {   # host (or hub), device, rate, flow cap
    local n b; n=$(topo_ns "$1"); local dev=$2 rate=$3 flow=$4
    if [ -z "$flow" ]; then
        ip netns exec "$n" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 512kb latency 50ms
        return
    fi
    # htb: the link's rate above 64 classes of the per-flow cap, picked by
    # a u32 hash of the TCP ports (each flow has its own pair of ports)
    ip netns exec "$n" tc qdisc replace dev "$dev" root handle 1: htb default 1
    ip netns exec "$n" tc class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" burst 512kb
    ip netns exec "$n" tc filter add dev "$dev" parent 1: prio 1 handle 2: protocol ip u32 divisor 64
    for b in $(seq 0 63); do
        ip netns exec "$n" tc class add dev "$dev" parent 1:1 classid 1:$((b + 16)) htb rate "$flow" ceil "$flow" burst 64kb
        ip netns exec "$n" tc filter add dev "$dev" parent 1: prio 1 protocol ip u32 ht 2:$(printf %x "$b"): match u8 0 0 flowid 1:$((b + 16))
    done
    # hash the low bits of both TCP ports (bytes 20-23: an IP header of 20 bytes)
    ip netns exec "$n" tc filter add dev "$dev" parent 1: prio 1 protocol ip u32 ht 800:: match ip protocol 6 0xff \
        hashkey mask 0x003f003f at 20 link 2:
}
topo_up() {   # hosts, rate, flow cap: host h is 10.77.0.(h+1)
    TOPO_H=$1; local rate=$2 flow=${3:-} h
    for h in $(seq 0 $((TOPO_H - 1))); do ip netns add "$(topo_ns "$h")"; topo_exec "$h" ip link set lo up; done
    if [ "$TOPO_H" = 2 ]; then
        ip link add v0 netns "$(topo_ns 0)" type veth peer name v1 netns "$(topo_ns 1)"
        for h in 0 1; do
            topo_exec $h ip addr add 10.77.0.$((h + 1))/24 dev v$h
            topo_exec $h ip link set v$h up
            topo_shape $h v$h "$rate" "$flow"
        done
    else
        ip netns add "$(topo_ns hub)"
        topo_exec hub ip link add br0 type bridge
        topo_exec hub ip link set br0 up
        for h in $(seq 0 $((TOPO_H - 1))); do
            ip link add e$h netns "$(topo_ns "$h")" type veth peer name p$h netns "$(topo_ns hub)"
            topo_exec hub ip link set p$h master br0
            topo_exec hub ip link set p$h up
            topo_exec "$h" ip addr add 10.77.0.$((h + 1))/24 dev e$h
            topo_exec "$h" ip link set e$h up
            topo_shape "$h" e$h "$rate" "$flow"
            topo_shape hub p$h "$rate" "$flow"
        done
    fi
}
[ "${TOPO_LIB:-0}" = 1 ] && return 0
set -e

H=2 L=2 RATE=1gbit PLACE=block SIZES=4M,16M,64M COLLS="all_reduce reduce_scatter all_gather broadcast" ITERS=5 FLOW= GLOO=0
while getopts "H:L:r:p:s:c:n:f:g" o; do
    case $o in
        H) H=$OPTARG ;; L) L=$OPTARG ;; r) RATE=$OPTARG ;; p) PLACE=$OPTARG ;; s) SIZES=$OPTARG ;;
        c) COLLS=$OPTARG ;; n) ITERS=$OPTARG ;; f) FLOW=$OPTARG ;; g) GLOO=1 ;;
        *) sed -n '2,25p' "$0"; exit 2 ;;
    esac
done
N=$((H * L))

BENCH=${COLL_BENCH:-$here/build/bench/coll_bench}
[ -x "$BENCH" ] || { echo "topo.sh: no $BENCH (make bench)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "topo.sh: needs root (network namespaces)" >&2; exit 2; }
PY=
if [ "$GLOO" = 1 ]; then   # (Debian's torch is the system python's, which another python3 on PATH may hide)
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch.distributed' 2>/dev/null && { PY=$p; break; }; done
    [ -n "$PY" ] || { echo "topo.sh: -g needs torch (apt-get install python3-torch)" >&2; exit 2; }
fi
trap topo_down EXIT INT TERM

# rate in bytes per second, from tc's notation
rate_bps() {
    local v=${1%bit} m=1
    case $v in *[kK]) m=1000; v=${v%?} ;; *[mM]) m=1000000; v=${v%?} ;; *[gG]) m=1000000000; v=${v%?} ;; esac
    awk -v v="$v" -v m="$m" 'BEGIN { printf "%.0f", v * m / 8 }'
}
BPS=$(rate_bps "$RATE")
topo_up "$H" "$RATE" "$FLOW"
host_of() { if [ "$PLACE" = cyclic ]; then echo $(($1 % H)); else echo $(($1 / L)); fi; }

bound_bytes() {   # coll, size
    awk -v c="$1" -v s="$2" -v H="$H" -v L="$L" 'BEGIN {
        f = c == "all_reduce" ? 2 * (H - 1) / H : (c == "broadcast" || c == "reduce") ? 1 : c == "all_to_all" ? L * (H - 1) / H : (H - 1) / H
        printf "%.0f", f * s }'
}
size_bytes() {
    local v=$1 m=1
    case $v in *K) m=1024; v=${v%K} ;; *M) m=1048576; v=${v%M} ;; *G) m=1073741824; v=${v%G} ;; esac
    echo $((v * m))
}

echo "# topo: $H hosts x $L ranks ($PLACE), links $RATE ($BPS B/s)${FLOW:+, each flow capped at $FLOW}; $(date -u +%F) $(uname -r)"
printf "%-15s %10s %12s %12s %10s %8s %10s\n" coll size "mean(s)" "median(s)" "bound(s)" x_bound "sent/bnd"
port=29500
for coll in $COLLS; do
    for sz in ${SIZES//,/ }; do
        port=$((port + 1))
        out=$(mktemp)
        before=(); for h in $(seq 0 $((H - 1))); do before+=("$(topo_tx $h)"); done
        pids=()
        for r in $(seq 0 $((N - 1))); do
            h=$(host_of $r)
            topo_exec "$h" env MASTER_ADDR=10.77.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$N DIST_TIMEOUT=120 \
                "$BENCH" --coll "$coll" -l "$sz" -n "$ITERS" -w 1 -c 1 -a 3 >"$out.$r" 2>&1 &
            pids+=($!)
        done
        rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
        worst=0
        for h in $(seq 0 $((H - 1))); do
            a=$(topo_tx $h); d=$((a - ${before[$h]}))
            [ $d -gt $worst ] && worst=$d
        done
        if [ $rc != 0 ]; then echo "topo.sh: $coll $sz failed:"; cat "$out".*; rm -f "$out" "$out".*; exit 1; fi
        line=$(grep -v '^#' "$out.0" | awk 'NF >= 10 { print; exit }')
        mean_us=$(echo "$line" | awk '{ print $11 }'); med_us=$(echo "$line" | awk '{ print $12 }')   # in place
        S=$(size_bytes "$sz"); bb=$(bound_bytes "$coll" "$S")
        awk -v c="$coll" -v s="$sz" -v m="$mean_us" -v md="$med_us" -v bb="$bb" -v bps="$BPS" -v sent="$worst" -v calls=$((2 * (ITERS + 2))) 'BEGIN {
            b = bb / bps; printf "%-15s %10s %12.6f %12.6f %10.4f %8.3f %10.3f\n", c, s, m / 1e6, md / 1e6, b, (m / 1e6) / b, sent / (bb * calls) }'
        rm -f "$out" "$out".*
        if [ "$GLOO" = 1 ]; then
            case $coll in all_reduce|broadcast|reduce|all_gather) ;; *) continue ;; esac
            port=$((port + 1)); pids=()
            for r in $(seq 0 $((N - 1))); do
                h=$(host_of $r)
                if [ "$H" = 2 ]; then dev=v$h; else dev=e$h; fi
                topo_exec "$h" env MASTER_ADDR=10.77.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$N GLOO_SOCKET_IFNAME=$dev OMP_NUM_THREADS=1 \
                    "$PY" "$here/bench/gloo_bench.py" "$coll" "$S" "$ITERS" >"$out.$r" 2>&1 &
                pids+=($!)
            done
            rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
            if [ $rc != 0 ]; then echo "topo.sh: gloo $coll $sz failed:"; cat "$out".*; rm -f "$out" "$out".*; exit 1; fi
            read -r mean_us med_us < "$out.0"
            awk -v s="$sz" -v m="$mean_us" -v md="$med_us" -v bb="$bb" -v bps="$BPS" 'BEGIN {
                b = bb / bps; printf "%-15s %10s %12.6f %12.6f %10.4f %8.3f %10s\n", "  gloo", s, m / 1e6, md / 1e6, b, (m / 1e6) / b, "-" }'
            rm -f "$out" "$out".*
        fi
    done
done
