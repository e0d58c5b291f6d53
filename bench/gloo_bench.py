#!/usr/bin/env python3
"""bench/gloo_bench.py - one collective of torch.distributed's gloo, timed
as coll_bench times dist.h's: W untimed calls, then N back to back, each
rank's mean and median per call; rank 0 prints the largest of each over
the ranks as "MEAN_US MEDIAN_US" (coll_bench's -a 3).  For comparison in
bench/topo.sh -g only (never needed by a test).

    RANK=r WORLD_SIZE=n MASTER_ADDR=a MASTER_PORT=p \
        python3 bench/gloo_bench.py COLL BYTES ITERS

COLL: all_reduce, broadcast (from rank 0), all_gather (BYTES: the
output, as nccl-tests and coll_bench count it), reduce (to rank 0).
BYTES is the size as coll_bench's -l gives it (float32 elements).
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    coll, nbytes, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]),
                            rank=rank, world_size=world)
    count = max(nbytes // 4, 1)
    if coll == "all_gather":
        count = max(count // world, 1)
        x = torch.ones(count, dtype=torch.float32)
        outs = [torch.empty(count, dtype=torch.float32) for _ in range(world)]
        call = lambda: dist.all_gather(outs, x)
    else:
        x = torch.ones(count, dtype=torch.float32)
        call = {"all_reduce": lambda: dist.all_reduce(x),
                "broadcast": lambda: dist.broadcast(x, 0),
                "reduce": lambda: dist.reduce(x, 0)}.get(coll)
        if call is None:
            print("gloo_bench.py: no %s here" % coll, file=sys.stderr)
            return 2
    call()
    dist.barrier()
    times = []
    t_all = time.perf_counter()
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    mean = (time.perf_counter() - t_all) / iters
    mine = torch.tensor([mean * 1e6, statistics.median(times) * 1e6], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if rank == 0:
        print("%.1f %.1f" % (mine[0].item(), mine[1].item()))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
