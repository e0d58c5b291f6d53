/* dist.h - v0.1.0 - torch.distributed for C: rendezvous, a TCP mesh and
   shared memory between ranks on one host, point-to-point with requests,
   collectives, groups, a key-value store and a launcher.
   Public domain or MIT; see the end of this file.

   Do this:
      #define DIST_IMPLEMENTATION
      #include "dist.h"
   in ONE C or C++ file, before any other #include there (or build that
   file with -D_GNU_SOURCE: glibc grants the POSIX the implementation needs
   only when asked before its first header); include "dist.h" without the
   define everywhere else.  Link with -pthread (Linux, macOS, the BSDs) or
   ws2_32 (Windows: -lws2_32 with mingw-w64; MSVC links it by itself):
      cc -std=c11 -O2 prog.c -o prog -pthread
   See PLATFORMS.

QUICK START
   A program that runs on every rank (start four with `distrun -n 4 ./prog`,
   or call dist_spawn from an ordinary program):

      #define DIST_IMPLEMENTATION
      #include "dist.h"
      #include <stdio.h>

      int main(void) {
          dist_t *world;
          if (dist_init(&world, NULL) != DIST_OK) {      // env:// by default
              fprintf(stderr, "%s\n", dist_error_message(NULL));
              return 1;
          }
          int rank = dist_rank(world), n = dist_world_size(world);
          float x = (float)rank;
          if (rank == 0) {
              for (int src = 1; src < n; src++) {
                  dist_recv(world, &x, 1, DIST_FLOAT32, src, 0);
                  printf("rank 0 got %g from rank %d\n", x, src);
              }
          } else {
              dist_send(world, &x, 1, DIST_FLOAT32, 0, 0);
          }
          dist_destroy(world);
          return 0;
      }

COMPILE-TIME OPTIONS
   Define these before including dist.h.
   DIST_IMPLEMENTATION       where: one file.  Compile the implementation.
   DIST_STATIC               where: the implementation file (and any file
                             that includes the declarations in the same TU).
                             Make every function static: private to one TU.
   DIST_API                  where: every file that includes dist.h.  The
                             decoration of every public function (default
                             extern; static with DIST_STATIC): e.g.
                             __declspec(dllexport) to build a DLL.
   DIST_MALLOC(sz)/DIST_FREE(p)/DIST_REALLOC(p,sz)
                             where: the implementation file.  Your allocator.
                             Define all three or none.
   DIST_ASSERT(x)            where: the implementation file.  Checks of the
                             library's own invariants (never of user input or
                             network bytes, which return errors).  Default:
                             assert().
   DIST_RECORDER_OPS         where: the implementation file.  Operations
                             the flight recorder keeps per communicator, of
                             each kind (default 64, a power of two; 0 turns
                             it off, to measure what it costs: bench/
                             recorder_cost.sh)
   DIST_TRACE_EVENTS         where: the implementation file.  Calls each
                             communicator holds for DIST_TRACE between two
                             writes of the file (default 16384 of each
                             kind, a power of two; the file is written
                             every 50 ms: beyond that rate calls are
                             dropped from the trace, and it says how many)
   DIST_SHM_REF_BYTES        where: the implementation file.  Over shared
                             memory, payloads of this many bytes or more are
                             copied straight from the sender's memory instead
                             of through the ring (default 64 KiB).
   DIST_SHM_COOP_BYTES       ...and from this size both ends copy them, the
                             waiting sender writing half the pieces into the
                             receiver (default 1 MiB; 0: the receiver alone,
                             and a broadcast's root in the shared segments
                             writes no pieces into its readers).
   DIST_EAGER_BYTES          where: the implementation file.  The flow-
                             control budget each peer gets by default
                             (4 MiB; less in worlds over 65 ranks): see
                             FLOW CONTROL.  dist_config.eager_bytes and
                             $DIST_EAGER_BYTES override it at run time.
   DIST_SMALL_BYTES          where: the implementation file.  Collectives up
                             to this size take latency-optimal trees
                             (default 64 KiB) ...
   DIST_CHUNK_BYTES          ...larger ones pipeline chunks of this size
                             (default 512 KiB).
   DIST_SHM_SMALL_BYTES      ...and an all_reduce of a world on one host
                             works in the shared segments above this size
                             (default 32 KiB).
   DIST_SHM_SLICE_BYTES      Bytes each rank combines per step of that
                             shared-segment all_reduce (default 256 KiB) ...
   DIST_SHM_COLL_BYTES       ...in buffers of this size, two per rank
                             (default 1 MiB).  Broadcasts and all_gathers
                             larger than DIST_SHM_FAST_BYTES pass through
                             the same buffers,
   DIST_SHM_STEP_MIN         ...at least this many bytes a rank a step
                             (default 64 KiB).  Where ranks may read each
                             other's memory, broadcasts read the root's
                             buffer instead, and all_gathers the others'
                             blocks from their buffers:
   DIST_SHM_GATHER_SLOTS_MAX ...above this many bytes a rank when every
                             rank has a CPU of its own (default 4 KiB;
                             else above DIST_SHM_FAST_BYTES).
   DIST_SHM_FAST_BYTES       A world on one host passes broadcasts,
                             all_reduces and all_gathers of up to this many
                             bytes a rank, and barriers, through slots in
                             the shared segments, without messages
                             (default 16 KiB).
   DIST_SHM_SPIN_US          Microseconds a rank waiting in a shared-memory
                             collective polls before it sleeps (default
                             5000; never less than DIST_SPIN_US).
   DIST_PORTABLE_POSIX       where: every file that implements dist.h,
                             dist_rpc.h or dist_cuda.h.  On Linux, use
                             only what POSIX offers, as on macOS and the
                             BSDs (where it is the only path): a pipe for
                             wake-ups, shm_open for the shared segments,
                             payloads through the rings (no cross-memory
                             attach), no membarrier, no TCP_CONGESTION, the
                             host known by name, user and host id.  For
                             testing that path on Linux.
   DIST_TEST_HOOKS           where: the implementation file.  For dist's
                             own tests only (tests/test_shrink.c,
                             tests/test_revoke.c): kill points inside the
                             fault-tolerance protocol and a revoke that
                             reaches one member.  Never set it in a program.

RUN-TIME ENVIRONMENT (read by dist_init when the config leaves a field zero)
   MASTER_ADDR, MASTER_PORT  where the store is (env://): rank 0's, or
                             the launcher's (DIST_STORE_HOSTED)
   RANK, WORLD_SIZE          this process's rank and the job's size
   OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS
                             fallbacks for RANK/WORLD_SIZE, so a program
                             runs unchanged under mpirun or srun
   DIST_INIT_METHOD          env://, tcp://host:port or file:///path
   DIST_TIMEOUT              seconds every blocking call may wait (300)
   DIST_SOCKET_IFNAME        network interface whose address the mesh uses
   DIST_SECRET               shared secret every connection must prove it
                             knows (HMAC-SHA-256; unset or empty: none)
   DIST_DEBUG                off | info | detail (any case, as torch's
                             TORCH_DISTRIBUTED_DEBUG): log to stderr (see
                             ERRORS AND LOGGING); unset, "" or 0: off;
                             anything else fails dist_init, saying so
   DIST_SPIN_US              microseconds a waiting call polls before it
                             sleeps (200; 0 never polls)
   DIST_ALGO                 ring | tree | halving | shm | slots | hier: the
                             collectives' algorithm where there is a choice
                             (default: by message size, world size and the
                             node map; hier: the hierarchical forms, which
                             auto picks when a communicator spans hosts with
                             several ranks on some)
   DIST_HOST_ID              this rank's host for the node map and the
                             same-host test: ranks with different values
                             talk over TCP and count as different hosts
                             (default: the machine's own identity).  To
                             try a job of several hosts on one machine
   DIST_TRANSPORT            auto | tcp | mixed: shared memory with ranks
                             on the same host (auto, the default), TCP
                             only, or (to test jobs that mix both) TCP
                             only for the odd ranks
   DIST_EAGER_BYTES          the flow-control budget each peer gets here,
                             in bytes (K, M, G suffixes; default 4M, less
                             in worlds over 65 ranks); see FLOW CONTROL
   DIST_RUN_ID               this launch's identity, the same on every rank
                             (distrun on one node and dist_spawn set a
                             random one; without it, under srun, mpirun or
                             torchrun, their job id; see RENDEZVOUS)
   DIST_STORE_LISTEN_FD      a listening socket rank 0 hosts the store on
                             instead of binding MASTER_PORT (a launcher
                             may pass one down; cfg.store_listen_fd)
   DIST_STORE_HOSTED         1: the store is hosted outside the ranks, by
                             a launcher (distrun and dist_spawn do so:
                             dist_store_host_start), and rank 0 joins it
                             as the others do (cfg.store_hosted)
   DIST_JOINING              1: this process joins the running job when its
                             ranks call dist_grow, instead of forming one
                             (cfg.join; distrun sets it on restarted ranks)
   DIST_MAX_JOINS            how many processes may join the job over its
                             life (default 64, or the world size if more);
                             each costs a peer slot (~1.3 KiB) on every rank
   DIST_RESTART_COUNT        how many times the launcher restarted this
                             rank (dist_restart_count; distrun sets it)
   DIST_RECORDER             timed: the flight recorder reads the clock at
                             every call's start and end (default: only where
                             a call waits; see FLIGHT RECORDER)
   DIST_STATS                1 (on, yes): time every call and log a table
                             of what each operation cost at dist_destroy
                             (dist_stats; see STATS AND TRACES); 0, off or
                             unset: not; anything else fails dist_init
   DIST_TRACE                DIR: write this rank's calls to
                             DIR/rank<R>.trace.json (Chrome's trace event
                             format; distrun merges them; see STATS AND
                             TRACES)

STEP BY STEP
   1. dist_init(&world, &cfg) joins the job.  Rank 0 (or the launcher:
      DIST_STORE_HOSTED) hosts a key-value store on
      MASTER_ADDR:MASTER_PORT; every rank publishes the address of its
      own listening socket there, then the ranks connect a full TCP mesh
      with a versioned handshake that rejects strangers.  Ranks on the same
      host (same boot, host name, user and namespaces) then agree, over
      those connections, to move their bytes through shared memory instead:
      a ring per pair in an anonymous segment (nothing in /dev/shm, gone
      with the last process), messages of 64 KiB and more copied once,
      straight from the sender's memory (Linux cross-memory attach; without
      it they stream through the ring), from 1 MiB by both ends at once:
      the sender, waiting anyway, writes pieces as the receiver reads.
      The TCP connection stays as the pair's doorbell and lifeline: a
      rank killed outright is noticed at once, as over TCP.  DIST_TRANSPORT=tcp turns this off.
   2. Point-to-point: dist_send / dist_recv block; dist_isend / dist_irecv
      return a request that dist_wait completes (and frees) and dist_test
      polls.  Messages from one rank to another with the same tag never
      overtake each other.  A receive names the exact count and dtype the
      sender sends; anything else fails the receive clearly.  Messages up
      to a quarter of the flow-control budget (1 MiB by default) go at
      once; larger ones wait for their receive (see FLOW CONTROL).
   3. dist_store_* reads and writes the job's key-value store.
   4. dist_destroy(world) waits (bounded) for every rank to arrive, then
      closes everything.

INIT METHODS
   env://            MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (as torchrun)
   tcp://host:port   rank and world size from the config or environment;
                     IPv6 as tcp://[::1]:29500
   file:///path      a file on a shared file system: rank 0 writes the
                     store's address into it under an fcntl lock, the
                     others read it.  Rank 0 removes it at dist_destroy.
   A URL may end in ?rank=R&world_size=N as in torch.

RENDEZVOUS
   Two launches started on one port (or file) never form one job.  Every
   rank of a launch carries its run id (cfg.run_id, DIST_RUN_ID, else
   TORCHELASTIC_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID, PMIX_NAMESPACE or
   OMPI_MCA_ess_base_jobid; distrun on one node and each dist_spawn call
   make a random one).  The store turns away a rank whose run id is not
   its own, at once and saying so; a file:// reader takes only a file of
   its own run id.  Without run ids, a rank claimed twice while the job
   forms fails every rank of it ("rank 1 was claimed twice ...: are two
   launches sharing port 29500?"), and init waits 500 ms after the job
   formed for such a claim; a run id saves that wait.  Once a job has
   formed, a latecomer is turned away and the job goes on.
   Strangers cannot jam it either.  The store and each rank's mesh
   listener hold at most max(2 x world + 64, 256) connections in their
   handshake; past that the least advanced goes first (a silent one before
   half a hello before a hello without its proof, the oldest first), and a
   rank's hello, which comes within a round trip, is read as it is
   accepted.  A rank dropped all the same calls again (10-500 ms apart),
   and each connect attempt gets 50 ms doubling to 2 s, so a SYN a full
   queue dropped is sent again at once, not a second later.  Measured: 8
   ranks with a secret form while strangers hold 1,000 idle connections
   and open 5,000 a second at the store and the mesh ports.
   A rank whose process cannot prove the secret (another DIST_SECRET, or
   none) fails at once, saying why; the others fail too, about a second
   later (a quarter of the timeout at most), with "rank 2 could not prove
   the job's secret and every other rank has joined", once every rank
   still missing was claimed that way and none came with the right
   secret meanwhile (a stranger's bad claim alone stops nothing: the real
   rank joins).  Out of descriptors, listeners rest 10-500 ms between
   tries and the timeout's sentence names the limit (ulimit -n).

ERRORS AND LOGGING
   Every fallible call returns a dist_result: DIST_OK (0) or a negative
   code; dist_result_name() names it.  dist_error_message(comm) is the last
   detailed sentence for that communicator, e.g.
      "recv #12 from rank 2 (tag 7): rank 2 sent 1000 x float32, this rank
       expects 999 x float32"
   and dist_error_message(NULL) the calling thread's last one (the only
   place a failed dist_init can report).  After a peer is lost, every
   request that needs it fails within a second, naming that rank.  A
   collective fails at once on the rank that still needed something from
   it, which tells the others (they fail naming it too); a rank that needs
   nothing more from it goes on, since a rank that did its part of a
   collective may leave at once (exit, abort, crash) while the others
   finish theirs: what it sent counts, as bytes sent before a close do.
   A member's death fails the call anyway after a grace (a twentieth of
   the timeout, 50-500 ms) unless it completed, and a barrier, all_reduce,
   all_gather, reduce_scatter or all_to_all that begins with a member
   dead fails at once (none could have completed without it).
   When a collective times out, the rank that stopped is named, not
   the neighbour that waited for it: each rank whose time is up tells the
   others whom it waited for and, a grace period later (a fifth of the
   timeout, 0.1-2 s), follows that chain to the rank that said nothing:
      "all_reduce #3: rank 6 stopped (it said nothing): timed out after
       2.0 s waiting for rank 5 to send its part, which was waiting for
       rank 6"
   Logging goes to cfg.logger (at cfg.log_level); DIST_DEBUG=info or
   detail sets the level, and without a logger writes to stderr, a line
   each, "dist info: [rank 3] ...":
     info    the life of the job: where the store is (who hosts it), the
             mesh formed (in how long; peers over shared memory and TCP),
             destroy, every failure; and while dist_init waits, what for:
             after a quarter of the timeout (at most 10 s), then every
             quarter (at most 30 s), which ranks the mesh lacks (those
             that never published their address at the store apart from
             those that did), or the store that does not answer and why
             ("connection refused"), long before the timeout's sentence;
     detail  adds DEBUG lines, each stamped with the time of day (UTC, to
             the microsecond: "dist 12:34:56.789012Z debug: ..."), to match
             lines across ranks and hosts: every connect attempt (to the
             store and to each peer: address, attempt, result, the pause
             before the next), every rank the store took and every mesh
             connection made or accepted (from whom, handshake done), the
             port each rank's mesh listens on (for a firewall to let
             through), each peer's transport (shared memory, or TCP and
             why), store waits that ran out, goodbyes.
   These lines come from dist_init, the store, the rendezvous and
   destroy: a send, a receive or a collective that goes well logs nothing,
   and no line is formatted at a level that is off.  dist_log(comm, level, ...)
   writes a line of your own the same way (dist_rpc.h and dist_cuda.h
   do).  The logger is called on the calling thread and on dist's own
   (progress, monitor, store, async worker), one line a call (at most 511
   bytes, no newline; a job report is a line each), and never with a lock
   of dist's held: it may call dist to learn more (dist_recorder_dump,
   dist_stats, dist_job_report, dist_error_message, the store), and a line
   that such a call logs reaches it nested, inside that call.  It must
   not wait for a collective or a send to finish: it may be running on
   the thread that makes them progress.  The library never prints on its
   own, never calls exit() or abort(): it ends no process but the
   children dist_spawn starts, with _Exit() once their function has
   returned.

FLIGHT RECORDER
   Always on: every communicator keeps its last DIST_RECORDER_OPS (64)
   collectives (kind, number, count, dtype, op, root, result; for the
   newest, its state, whom it waits for and since when, and when it was
   queued if it was async) and its last 64 point-to-point operations
   (kind, number, count, dtype, peer, tag, state, result, times), at the
   cost of a few stores per call: the clock is read only where a call
   reads it anyway (a collective's first wait, a request waited on),
   unless DIST_RECORDER=timed (every start and end).
   - A call that has waited a while (a collective, or the send or receive
     waited on longest) says so at info level, after a quarter of the
     timeout (at most 10 s) and again every quarter (at most 30 s), e.g.
        "[rank 2] all_reduce #43 (8 x float32, sum) has waited 10 s so
         far, waiting for data from rank 5"
        "[rank 1] recv #3 from rank 0 (tag 7, 8 x float32) has waited
         10.0 s so far"
   - dist_recorder_dump(d, buf, cap): this rank's recorders, as text.
   - dist_job_report(d, buf, cap): asks every rank for its recorder
     (through the store) and says what the job is doing, in one screen:
        job report: 7 of 8 ranks answered
          rank 3 sent no report (stopped, dead, or cut off from the store)
          ranks 0-2, 4-7 wait in all_reduce #5 (1 x float64, sum) (for up to 2.0 s)
          likely cause: rank 3 sent no report
     It names ranks behind the others ("rank 3 has not called collective
     #5: its last, all_reduce #4, finished 2.1 s ago", "rank 3 is still in
     all_reduce #4 (entered 41.2 s ago, waiting for data from rank 5)"),
     async collectives queued behind the one a rank is in ("ranks 0-2
     have 2 collectives queued behind their current one (async; the
     first for up to 3.5 s)"), calls that differ ("MISMATCH: rank 5 called broadcast #5 ... where
     rank 0 called all_reduce #5 ..."), point-to-point operations waited
     on, and ranks in dist_destroy.  The likely cause is one silent rank,
     else a mismatch, else the rank furthest behind; of several silent
     ranks the dumps cannot tell which went first, and it says "one of
     ranks 1-4, which sent no report".  A launcher knows better
     (dist_store_host_note_failure): distrun's reports give the rank it
     saw fail first, as its summary does.
   - When a call of this rank times out, its monitor thread asks every
     rank for a dump and logs the report at error level about 3 s later,
     a log line for each of its lines ("a call timed out; job report: ...").
   Each world runs a monitor thread for this: it wakes once a second, and
   looks at the store ("dist/dump/req") only when no caller is using it.

STATS AND TRACES
   Off unless asked for: DIST_STATS=1, DIST_TRACE=DIR (or
   DIST_RECORDER=timed, for the recorder's times alone) read the clock as
   every call of the world and its groups starts and ends, a few tens of
   nanoseconds a call.
   - dist_stats(d, &s): per operation (the collectives, send, recv), this
     rank's calls, failures, bytes (count x dtype size), total time, mean,
     p50, p90, p99 (within 7%) and max.
   - Stragglers: each collective learns who entered it last and how long
     after the first, from what its algorithm exchanges anyway: every
     frame of it carries a 24-byte stamp (the latest and earliest entry
     its sender knows of, and whose), every slot of a small one in shared
     memory its writer's entry; no message is added.  A rank learns what
     reached it (a ring or recursive doubling: everyone's; a broadcast's
     leaf: the root's path), on the job clock.  s.slowest lists the ranks
     that came last, latest in all first, with how often and how late
     (s.measured: the collectives that told), and the table ends with
     them:
          came last, of 207 collectives whose entries this rank learned of:
            rank 2: 92 times, 0.055 s late in all, 5169.96 us at most
     dist_stats_text(d, buf, cap) writes them as a table; with
     DIST_STATS=1 each communicator logs it as it is destroyed (through
     cfg.logger, else on stderr):
        stats of rank 0 of the world (4 ranks), 12.3 s:
          operation      calls  failed   bytes  total s  mean us  p50 us ...
          all_reduce       200       0 12.5 KiB    0.058   289.87    6.40 ...
   - DIST_TRACE=DIR: each rank writes its calls to DIR/rank<R>.trace.json
     (made if missing) in Chrome's trace event format: one event a call
     (name, sequence number, count, dtype, op, root or peer, tag, bytes,
     algorithm, result, and for a collective who came last, last_in, and
     how late, late_us; for an async one, how long it waited in the
     queue before it began, queued_us) on rows "world: collectives", "world:
     point-to-point" and one pair per group, written out every 50 ms (a
     rank killed loses at most that much; distrun reads what is there).
     Times are on the job's clock: each rank measures its offset to the
     store host's clock at init (the best of 8 round trips; the error,
     half that round trip, is in the file's otherData), so ranks on
     several hosts line up.  distrun --trace DIR (or DIST_TRACE in its
     environment) merges the ranks' files into DIR/trace.json when the
     job ends, for Perfetto (ui.perfetto.dev) or chrome://tracing;
     tools/dist_timeline draws one as an HTML page (given DIR, it merges
     the rank files first: for jobs started without distrun, such as
     dist_spawn's).  A call made while
     the file's writer is behind (more than DIST_TRACE_EVENTS calls in
     50 ms) is counted, not kept: the trace has a "dropped" event saying
     how many.

FLOW CONTROL
   Memory at a receiver is bounded whatever senders do.  Each rank gives
   each peer a budget (DIST_EAGER_BYTES, 4 MiB by default): the messages
   that peer has sent and nobody has received yet may take that much here,
   and no more.  A message costs its size plus 320 bytes; the receiver
   hands the budget back as its receives take the messages.
   - A message of up to a quarter of the budget is sent at once, whether
     its receive is posted or not: a rank may run ahead of a slower one (a
     root broadcasting in a loop, a producer of isends) until the budget
     is spent; then dist_isend queues the message in the sender's memory
     and dist_send waits (at most the timeout) for the receiver to catch up.
   - A larger message is announced, and travels once its receive is
     posted, straight into the receive's buffer (or is copied from the
     sender's memory, on one host).  So dist_send of such a message waits
     for its receive, as MPI_Send may: two ranks that both dist_send large
     messages to each other before receiving wait until the timeout (and
     the error says so); use dist_isend / dist_irecv there.
   - A receive waited on for a message stuck behind others the receiver
     has not asked for yet gets it ahead of them (the sender is told), so
     receiving in another order than sent never deadlocks either.

THREADS
   Point-to-point calls and the store may be used from several threads at
   once, on one communicator or several.  Collectives may not: a
   communicator runs its collectives in the order they are called (the
   _async ones on its worker thread), and two threads calling them at once
   would call them in different orders on different ranks.  Give each
   thread its own group (dist_new_group) instead; groups run side by side.
   Each world runs one progress thread, which moves data while the caller
   computes; a thread that waits on a request drives the sockets itself,
   so small messages see no thread hand-off.  Requests are owned by the
   thread that waits on them.

COLLECTIVES
   broadcast, reduce, all_reduce, gather, all_gather, scatter,
   reduce_scatter, all_to_all, barrier, each with an _async twin, on the
   world or on a group (dist_new_group).  Small messages take latency-
   optimal trees (binomial, recursive doubling); large ones pipelined rings
   and chains whose receives combine data as it arrives, or for all_reduce
   on 4, 8, 16... ranks recursive halving and doubling (Rabenseifner), and
   when every rank shares this host, slices combined straight from the
   ranks' shared segments; there, small broadcasts, all_reduces and
   all_gathers and every barrier go through slots in those segments (no
   messages at all).  When a communicator spans hosts and some host has
   several of its ranks (the node map: dist_node_count, dist_local_rank),
   all_reduces, reduce_scatters, all_gathers, broadcasts and reduces take
   hierarchical forms instead: inside each host, then across hosts with
   every rank of a host carrying a share, then inside again, so that a
   host's link carries only what must leave it (all_reduce: 2(H-1)/H of
   the vector for H hosts; broadcast: the vector once).  The world's small
   all_reduces, all_to_alls and barriers there go through each host's
   slots to its first rank, and those ranks cross the links once for
   their hosts.  Ranks may sit on their hosts in any order.  DIST_ALGO=ring, tree, halving, shm, slots or
   hier overrides the choice.  Every frame (or slot) carries the call's descriptor, so
   ranks that disagree (count, dtype, op, root, which collective) fail with
   a sentence naming both sides instead of hanging or corrupting memory.

WHAT IT DOES NOT DO (yet)
   - shared-memory algorithms for reduce_scatter, reduce, gather, scatter
     and all_to_all on one host (they run their ring, tree and direct
     algorithms over whichever transport a pair uses)
   - receive with a wildcard tag, or into a larger buffer than was sent

PLATFORMS
   Linux: everything.  macOS and the BSDs: POSIX alone (DIST_PORTABLE_POSIX
   forces that path on Linux): shared segments by shm_open, large messages
   stream through the rings (no cross-memory attach), wake-ups by pipe.
   Windows (x64; mingw-w64 or MSVC): Winsock 2, Win32 threads, named file
   mappings for shared memory (streaming through the rings as on macOS),
   dist_spawn by starting the program again (see dist_spawn).  Include
   dist.h before <windows.h> in the implementation file, or define
   WIN32_LEAN_AND_MEAN before it (winsock2.h must come first).  The wire
   protocol is the same everywhere: ranks of different systems form one
   job, over TCP where they cannot map each other's memory.

LICENSE
   See end of file.
*/
/* The implementation needs POSIX and a few Linux extensions (getaddrinfo,
   pread, process_vm_readv, ...).  glibc fixes what its headers declare at
   the first of them a file includes, so they are asked for here, and the
   file that defines DIST_IMPLEMENTATION includes dist.h before any other
   header (or is built with -D_GNU_SOURCE).  A file that did not cannot be
   repaired from here (declaring the functions again would copy glibc's
   types): it gets one error saying what to do, not dozens.  musl and macOS
   decide header by header and mostly cope.  dist_rpc.h and dist_cuda.h
   implemented in a file of their own need no more than a system header
   declares anyway (see the platform layer). */
#if defined(DIST_IMPLEMENTATION) && defined(__GLIBC__) && !defined(__USE_GNU)
#  error "dist.h: in the file that defines DIST_IMPLEMENTATION, define it and include dist.h before any system header, or compile that file with -D_GNU_SOURCE (glibc hides the POSIX and GNU functions dist.h needs from a file that included one of its headers first)"
#  undef DIST_IMPLEMENTATION        /* so that this is the only error */
#  undef DIST_RPC_IMPLEMENTATION
#  undef DIST_CUDA_IMPLEMENTATION
#endif
#if (defined(DIST_IMPLEMENTATION) || defined(DIST_RPC_IMPLEMENTATION) || defined(DIST_CUDA_IMPLEMENTATION)) && \
    defined(__linux__) && !defined(_GNU_SOURCE)
#  define _GNU_SOURCE
#endif
/* mingw-w64: C99's printf (%zu, %lld), not the system's older one. */
#if (defined(DIST_IMPLEMENTATION) || defined(DIST_RPC_IMPLEMENTATION) || defined(DIST_CUDA_IMPLEMENTATION)) && \
    defined(__MINGW32__) && !defined(__USE_MINGW_ANSI_STDIO)
#  define __USE_MINGW_ANSI_STDIO 1
#endif

#ifndef DIST_H
#define DIST_H

#define DIST_VERSION_MAJOR 0
#define DIST_VERSION_MINOR 1
#define DIST_VERSION_PATCH 0
#define DIST_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>

#ifndef DIST_API
#  ifdef DIST_STATIC
#    if defined(__GNUC__) || defined(__clang__)
#      define DIST_API static __attribute__((unused))   /* unused calls: no warning */
#    else
#      define DIST_API static
#    endif
#  else
#    define DIST_API extern
#  endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results ---------------------------------------------------------
   One list, three ranges: core -1..-99, dist_cuda.h -100..-199,
   dist_rpc.h -200..-299. */
#define DIST_RESULT_LIST(X)                                                   \
    X(DIST_OK,               0, "success")                                  \
    X(DIST_ERR_INVALID,     -1, "invalid argument")                         \
    X(DIST_ERR_TIMEOUT,     -2, "timed out")                                \
    X(DIST_ERR_PEER_LOST,   -3, "a peer closed its connection or died")     \
    X(DIST_ERR_MISMATCH,    -4, "ranks called with different arguments")    \
    X(DIST_ERR_NOMEM,       -5, "out of memory")                            \
    X(DIST_ERR_SYSTEM,      -6, "an operating-system call failed")          \
    X(DIST_ERR_PROTOCOL,    -7, "malformed bytes from the network")         \
    X(DIST_ERR_INIT,        -8, "rendezvous or configuration failed")       \
    X(DIST_ERR_TRUNCATED,   -9, "the buffer is too small for the value")    \
    X(DIST_ERR_ABORTED,    -10, "the communicator was aborted")             \
    X(DIST_ERR_FAILED,     -11, "the communicator failed earlier")          \
    X(DIST_ERR_UNSUPPORTED,-12, "not supported by this build")              \
    X(DIST_ERR_NOT_FOUND,  -13, "no such key")                              \
    X(DIST_ERR_REVOKED,    -14, "the communicator was revoked")             \
    X(DIST_ERR_NO_DEVICE, -100, "no CUDA device or CUDA library")           \
    X(DIST_ERR_CUDA,      -101, "a CUDA call failed")                       \
    X(DIST_ERR_NCCL,      -102, "an NCCL call failed")                      \
    X(DIST_ERR_REMOTE,    -200, "the remote function failed")               \
    X(DIST_ERR_UNKNOWN_FUNCTION, -201, "no function of that name")          \
    X(DIST_ERR_TYPE,      -202, "value of another type")

typedef enum dist_result {
#define DIST__RESULT_ENUM(name, value, text) name = value,
    DIST_RESULT_LIST(DIST__RESULT_ENUM)
#undef DIST__RESULT_ENUM
    DIST_RESULT_FORCE_INT = -0x7fffffff
} dist_result;

/* ---- data types --------------------------------------------------------- */
#define DIST_DTYPE_LIST(X)           \
    X(DIST_INT8,     int8,     1)    \
    X(DIST_UINT8,    uint8,    1)    \
    X(DIST_INT32,    int32,    4)    \
    X(DIST_INT64,    int64,    8)    \
    X(DIST_FLOAT16,  float16,  2)    \
    X(DIST_BFLOAT16, bfloat16, 2)    \
    X(DIST_FLOAT32,  float32,  4)    \
    X(DIST_FLOAT64,  float64,  8)

typedef enum dist_dtype {
#define DIST__DTYPE_ENUM(name, text, size) name,
    DIST_DTYPE_LIST(DIST__DTYPE_ENUM)
#undef DIST__DTYPE_ENUM
    DIST_DTYPE_COUNT
} dist_dtype;

typedef enum dist_op { DIST_SUM, DIST_PRODUCT, DIST_MAX, DIST_MIN, DIST_AVG, DIST_OP_COUNT } dist_op;

#define DIST_ANY_SOURCE (-1)

typedef enum dist_log_level {
    DIST_LOG_ERROR = 1, DIST_LOG_WARN = 2, DIST_LOG_INFO = 3, DIST_LOG_DEBUG = 4
} dist_log_level;

typedef struct dist_logger {
    void (*func)(dist_log_level level, const char *message, void *user);
    void *user;
} dist_logger;

/* Zero is default: `dist_config cfg = {0};` takes everything from the
   environment.  Fields are only ever added at the end. */
typedef struct dist_config {
    const char *init_method; /* NULL: $DIST_INIT_METHOD, else "env://"        */
    int world_size;          /* 0: from the URL or environment; when > 0,
                                `rank` below is used as given                 */
    int rank;                /* this process's rank (used when world_size > 0)*/
    int timeout_ms;          /* 0: $DIST_TIMEOUT seconds, else 300 s; every
                                blocking call waits at most this long         */
    const char *secret;      /* NULL: $DIST_SECRET; unset or "": none.  Every
                                connection must prove it knows it            */
    const char *socket_ifname; /* NULL: $DIST_SOCKET_IFNAME, else the address
                                that reaches rank 0                           */
    dist_logger logger;      /* {0}: quiet, unless $DIST_DEBUG is set         */
    dist_log_level log_level;/* 0: DIST_LOG_WARN when a logger is given       */
    int local_rank;          /* ignored: the node map says (dist_local_rank)  */
    int store_listen_fd;     /* 0: none.  Rank 0 uses this listening socket
                                (fd + 1, so 0 stays "none") for the store
                                instead of binding; dist_spawn and distrun
                                pass it so no port can be stolen in between  */
    int spin_us;             /* 0: $DIST_SPIN_US, else 200.  A waiting call
                                polls this long (yielding the CPU between
                                polls) before it sleeps; < 0: never polls   */
    const char *transport;   /* NULL: $DIST_TRANSPORT, else "auto": shared
                                memory with ranks on this host, TCP with the
                                others; "tcp": TCP with everyone; "mixed":
                                auto on even ranks, tcp on odd ones (tests) */
    size_t eager_bytes;      /* 0: $DIST_EAGER_BYTES, else 4 MiB (less in
                                worlds over 65 ranks): the memory each peer
                                may fill here with messages nobody has
                                received yet; beyond it senders wait      */
    const char *run_id;      /* NULL: $DIST_RUN_ID, else the launcher's job
                                (TORCHELASTIC_RUN_ID, SLURM_JOB_ID.STEP_ID,
                                Open MPI's job id); "": none.  What every
                                rank of one launch shares and no other
                                launch has: the store turns away ranks of
                                another launch (see RENDEZVOUS)             */
    int store_hosted;        /* 0: $DIST_STORE_HOSTED, else no.  1: the
                                store is hosted outside the ranks (a
                                launcher: dist_store_host_start), and rank 0
                                joins it as the others do                   */
    int join;                /* 0: $DIST_JOINING, else no.  1: this process
                                joins a running job when its ranks call
                                dist_grow, instead of forming one (see
                                "growing")                                 */
} dist_config;

typedef struct dist dist_t;          /* a communicator */
typedef struct dist_req dist_req_t;  /* an operation in flight */

/* ---- version, results, errors ---- */
DIST_API const char *dist_version(void);
DIST_API const char *dist_result_name(dist_result r);     /* "DIST_ERR_TIMEOUT" */
DIST_API const char *dist_result_text(dist_result r);     /* "timed out" */
DIST_API size_t      dist_dtype_size(dist_dtype t);        /* 0 when invalid */
DIST_API const char *dist_dtype_name(dist_dtype t);       /* "float32" */
/* The last detailed sentence for this communicator; with NULL, the calling
   thread's last one (which is where a failed dist_init reports).  Never
   NULL; "" when nothing failed.  Safe while other threads use the
   communicator: the text is this thread's copy, valid until its fourth
   next call. */
DIST_API const char *dist_error_message(const dist_t *d);
/* A line through the communicator's logger (cfg.logger, or stderr under
   DIST_DEBUG) as the library writes its own, "[rank R] " first: for code
   built on dist.h (dist_rpc.h and dist_cuda.h log so).  dist_log_enabled
   says whether a line of `level` would be written: ask before anything
   costly.  With d NULL (or a destroyed world's group), nothing. */
#if defined(__MINGW32__) && !defined(__clang__)
#  define DIST__PRINTF(a, b) __attribute__((format(gnu_printf, a, b)))
#elif defined(__GNUC__) || defined(__clang__)
#  define DIST__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define DIST__PRINTF(a, b)
#endif
DIST_API int dist_log_enabled(const dist_t *d, dist_log_level level);
DIST_API void dist_log(const dist_t *d, dist_log_level level, const char *fmt, ...) DIST__PRINTF(3, 4);

/* ---- life cycle ---- */
DIST_API dist_result dist_init(dist_t **world, const dist_config *cfg);
/* The rank and world size a launcher gave this process, read as dist_init
   reads them (RANK/WORLD_SIZE, else mpirun's, PMI's or srun's variables),
   before joining: to pick a role or a worker name.  DIST_ERR_INIT and a
   sentence when none is set, one is not a number, or the rank is out of
   range. */
DIST_API dist_result dist_env_rank(int *rank, int *world_size);
DIST_API dist_result dist_destroy(dist_t *d);
/* Tears the communicator down from any thread (a watchdog, a signal-
   driven shutdown): every call blocked in it, on any thread, returns
   DIST_ERR_ABORTED within milliseconds, and so does every later call, on
   the world and on all its groups (they share its connections).  Peers see
   this rank's connections close (DIST_ERR_PEER_LOST naming it).  Call
   dist_destroy afterwards, once the other threads have returned.  Safe to
   call more than once. */
DIST_API dist_result dist_abort(dist_t *d);
DIST_API int dist_rank(const dist_t *d);
DIST_API int dist_world_size(const dist_t *d);
/* The node map: which members share a host (the same test that picks
   shared memory: boot, host name, user and namespaces, or DIST_HOST_ID),
   agreed by every rank at init.  Hosts are numbered 0 .. node_count - 1
   in order of their lowest rank; ranks need not be contiguous per host.
   dist_local_rank is this rank's place among the members on its host (in
   rank order), dist_local_size how many they are, dist_node(d, r) the
   host of member r (-1: not a member).  In a communicator that newcomers
   joined (dist_grow) hosts are not known: every member is its own. */
DIST_API int dist_local_rank(const dist_t *d);
DIST_API int dist_local_size(const dist_t *d);
DIST_API int dist_node_count(const dist_t *d);
DIST_API int dist_node(const dist_t *d, int rank);
DIST_API int dist_timeout_ms(const dist_t *d);
/* A monotonic clock in nanoseconds (for timing and deadlines). */
DIST_API int64_t dist_time_ns(void);

/* ---- what the job is doing (see FLIGHT RECORDER) ----
   dist_recorder_dump: this rank's flight recorder (every communicator of
   d's world: its last collectives and point-to-point operations) as text
   lines; returns the length written (at most cap - 1, NUL-terminated).
   dist_job_report: asks every rank of d's world for its recorder, through
   the store, waits up to 2.5 s for the answers, and writes a summary a
   person can read: who waits in which collective, who is behind or sent
   nothing, calls that differ, point-to-point operations waited on. */
DIST_API size_t dist_recorder_dump(dist_t *d, char *buf, size_t cap);
DIST_API dist_result dist_job_report(dist_t *d, char *buf, size_t cap);

/* ---- what the calls cost (see STATS AND TRACES) ----
   Collected when the job runs with DIST_STATS=1 (or DIST_TRACE=DIR, or
   DIST_RECORDER=timed): per operation, from this rank's side.
   dist_stats fills *out (DIST_ERR_INVALID, with a sentence, when nothing
   is collected); dist_stats_text writes the table DIST_STATS=1 logs at
   dist_destroy and returns its length (at most cap - 1, NUL-terminated). */
#define DIST_STATS_OPS 11            /* the 9 collectives, send, recv */
typedef struct dist_op_stats {
    const char *name;                /* "all_reduce", ..., "barrier", "send", "recv" */
    uint64_t calls, failed;
    uint64_t bytes;                  /* count x dtype size, summed over the calls */
    double total_s;                  /* time spent in them (start to end) */
    double mean_us, max_us;
    double p50_us, p90_us, p99_us;   /* within 7% (logarithmic buckets) */
} dist_op_stats;
#define DIST_STATS_SLOWEST 4
typedef struct dist_rank_late {
    int rank;                        /* a rank of the communicator */
    uint64_t times_last;             /* collectives it entered last (of those measured) */
    double late_s;                   /* ...how late, summed: its entry after the first member's */
    double max_late_us;              /* ...the most */
} dist_rank_late;
typedef struct dist_stats_t {
    double elapsed_s;                /* since collection began (dist_init, or the group's creation) */
    double clock_error_us;           /* the job clock's uncertainty here (see STATS AND TRACES) */
    int nops;                        /* entries of ops: the operations called at least once */
    dist_op_stats ops[DIST_STATS_OPS];
    uint64_t measured;               /* collectives whose members' entry times reached this rank */
    int nslowest;                    /* entries of slowest: the ranks late most in all, latest first */
    dist_rank_late slowest[DIST_STATS_SLOWEST];
} dist_stats_t;
DIST_API dist_result dist_stats(dist_t *d, dist_stats_t *out);
DIST_API size_t dist_stats_text(dist_t *d, char *buf, size_t cap);

/* ---- point-to-point ----
   `count` is in elements of `dtype`.  A blocking dist_send returns once the
   buffer may be reused: a small message (up to a quarter of the receiver's
   flow-control budget, 1 MiB by default) is on its way or buffered, and two
   ranks that both send small messages first never deadlock; a larger one
   has reached its posted receive (FLOW CONTROL).  dist_wait completes a
   request and frees it; dist_test only asks (call dist_wait afterwards;
   requests never waited on are reclaimed by dist_destroy).  Tags are >= 0. */
DIST_API dist_result dist_send (dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag);
DIST_API dist_result dist_recv (dist_t *d, void *buf, size_t count, dist_dtype dtype, int src, int tag);
DIST_API dist_result dist_isend(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_req_t **req);
DIST_API dist_result dist_irecv(dist_t *d, void *buf, size_t count, dist_dtype dtype, int src, int tag, dist_req_t **req);
DIST_API dist_result dist_wait(dist_req_t *req);
DIST_API dist_result dist_test(dist_req_t *req, int *done);
/* Synchronous mode (MPI_Ssend, MPI_Issend): the send completes only once
   its receive has started taking it, and the message is never buffered at
   the receiver - a large message whose receive is posted a little late
   lands in place instead of being copied twice (over shared memory the
   receiver copies it from the sender's memory when it posts).  A message
   to itself is buffered, as any. */
DIST_API dist_result dist_ssend (dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag);
DIST_API dist_result dist_issend(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_req_t **req);
/* dist_wait with a bound of its own instead of the communicator's: at most
   `timeout_ms` (0: not at all).  A request not done by then is withdrawn -
   a receive takes nothing more into its buffer, its sender learns it was
   refused - freed, and DIST_ERR_TIMEOUT returned: how to cancel a receive.
   (A collective's request keeps the bound its job has.) */
DIST_API dist_result dist_wait_timeout(dist_req_t *req, int timeout_ms);
/* Waits for all (each is freed), within one timeout of the communicator
   for the whole call; returns the first failure, DIST_OK if none.  NULL
   entries are skipped. */
DIST_API dist_result dist_wait_all(int n, dist_req_t **reqs);
/* For a completed receive (before dist_wait frees it): the rank it came
   from, which is how a DIST_ANY_SOURCE receive learns its sender. */
DIST_API int dist_req_source(const dist_req_t *req);

/* A message that has arrived and no receive has taken yet, as a probe sees
   it: a dist_recv of `count` x `dtype` from `source` with `tag` takes it
   (unless another thread's receive takes it first). */
typedef struct dist_status {
    int source;              /* its sender's rank in this communicator */
    int tag;
    dist_dtype dtype;
    size_t count;            /* elements of dtype */
    size_t nbytes;
} dist_status;
/* Waits, at most `timeout_ms` (0: the communicator's timeout), until a
   message from `src` (or DIST_ANY_SOURCE) with `tag` has arrived, and
   describes it without receiving it: how a receiver learns the size of a
   message it cannot know in advance (MPI_Probe).  Fails at once with
   DIST_ERR_PEER_LOST when no such message can come any more (that sender,
   or every other rank for DIST_ANY_SOURCE, is gone). */
DIST_API dist_result dist_probe(dist_t *d, int src, int tag, int timeout_ms, dist_status *status);
/* The same without waiting: *found says whether there is one. */
DIST_API dist_result dist_iprobe(dist_t *d, int src, int tag, int *found, dist_status *status);
/* Waiting on many things at once (requests and probes together, as a
   server loop does): the engine behind a communicator - the world and the
   groups made from it share one - counts what comes in: a receive
   completes, a point-to-point message arrives that no posted receive
   takes, a peer is lost, the job aborts (a send's completion is not
   counted: sends complete all the time, and a loop that needs one waits on
   it).  dist_events returns the count.  dist_wait_events
   makes progress until the count differs from `seen`, at most `timeout_ms`
   (0: not at all), and returns the count then.  A loop reads the count,
   checks what it watches (dist_test, dist_iprobe), and when nothing moved
   waits on the count it read: what happened in between is not missed.
       uint64_t seen = dist_events(d);
       ...dist_test / dist_iprobe...; if nothing moved:
       dist_wait_events(d, seen, 50);
   (A wake-up for something another thread's traffic did costs one more
   round of checks.) */
DIST_API uint64_t dist_events(dist_t *d);
DIST_API uint64_t dist_wait_events(dist_t *d, uint64_t seen, int timeout_ms);

/* ---- the key-value store (hosted by rank 0 or the launcher, shared by the job) ----
   Keys are strings of 1..1024 bytes; values up to 64 MiB.  timeout_ms 0
   means the communicator's timeout.
   get        waits until `key` exists; copies at most `cap` bytes into buf
              and sets *len to the value's full size (DIST_ERR_TRUNCATED
              when cap < *len).
   add        adds `amount` to the integer stored at key (missing = 0) and
              returns the new value in *result (may be NULL).
   wait       waits until every key exists.
   compare_set  sets key to `desired` if its value equals `expected` (or if
              it is missing and expected_len == 0); the value after the call
              goes to out (as get).
   delete     *deleted (may be NULL) = 1 if the key existed.
   check      *exists = 1 if every key exists now; never waits. */
DIST_API dist_result dist_store_set(dist_t *d, const char *key, const void *value, size_t len);
DIST_API dist_result dist_store_get(dist_t *d, const char *key, void *buf, size_t cap, size_t *len);
DIST_API dist_result dist_store_add(dist_t *d, const char *key, int64_t amount, int64_t *result);
DIST_API dist_result dist_store_wait(dist_t *d, const char *const *keys, int nkeys, int timeout_ms);
DIST_API dist_result dist_store_compare_set(dist_t *d, const char *key,
                                            const void *expected, size_t expected_len,
                                            const void *desired, size_t desired_len,
                                            void *out, size_t cap, size_t *out_len);
DIST_API dist_result dist_store_delete(dist_t *d, const char *key, int *deleted);
DIST_API dist_result dist_store_check(dist_t *d, const char *const *keys, int nkeys, int *exists);

/* ---- the store hosted outside the ranks (a launcher) ----
   By default rank 0 hosts the store, and a job whose rank 0 died can no
   longer agree or shrink (the survivors lose the store with it).  A
   launcher can host it instead, as torchrun's agent does: distrun and
   dist_spawn's parent do.  The ranks find it as they would find rank 0's
   (MASTER_ADDR and MASTER_PORT, or tcp://addr:port) and are told it is
   hosted (DIST_STORE_HOSTED=1, or cfg.store_hosted), so that rank 0
   joins it as the others do and does not host one of its own.  Why a
   launcher, and not copies among the ranks: the launcher already is what
   a job cannot lose (its ranks end with it), and copies kept in agreement
   among ranks that may die would need a consensus protocol where one
   process does.
   start  listens on addr (NULL: every interface) and port (0: a free one,
          which dist_store_host_port tells) for a job of world_size ranks,
          with cfg's secret, timeout, logger and run id (cfg NULL: the
          environment, as dist_init reads it); the store runs on a thread
          of its own until dist_store_host_stop. */
typedef struct dist_store_host dist_store_host;
DIST_API dist_result dist_store_host_start(dist_store_host **host, const dist_config *cfg, int world_size, const char *addr, int port);
DIST_API int dist_store_host_port(const dist_store_host *host);
DIST_API void dist_store_host_stop(dist_store_host *host);
/* The launcher's job report (see FLIGHT RECORDER): asks every rank for its
   flight recorder through the store it hosts, waits up to wait_ms for the
   answers (from the ranks still connected to it), and writes what the job
   is doing into buf; DIST_ERR_NOT_FOUND when no rank answered. */
DIST_API dist_result dist_store_host_report(dist_store_host *host, char *buf, size_t cap, int wait_ms);
/* What the launcher saw, for its reports: `rank` failed first, `what`
   says how ("was killed by signal 9 (Killed)"; NULL: "failed").  The
   host's later reports give that as the likely cause, and nothing that
   contradicts it (rank -1 forgets it).  Call it from the thread that
   takes the reports. */
DIST_API void dist_store_host_note_failure(dist_store_host *host, int rank, const char *what);

/* ---- collectives ----
   Every rank of the communicator calls the same collectives in the same
   order, with the same dtype, count, op and root; a rank that differs fails
   (DIST_ERR_MISMATCH) with a sentence naming both sides, on every rank that
   can see it, and nothing hangs.  `count` is always one rank's block; a
   buffer that holds every rank's block (gather's recv at the root,
   all_gather's recv, scatter's send at the root, reduce_scatter's send,
   both all_to_all buffers) holds count x world_size elements, block j
   belonging to rank j.  Buffers a rank does not use may be NULL (gather's
   recv and scatter's send off the root).
   In place: all_gather with send == recv + rank x count (or send == recv),
   gather at the root likewise, scatter's recv == send + root x count at the
   root, reduce_scatter with recv anywhere in send, all_to_all with
   send == recv.  reduce leaves the buffers of ranks other than the root
   unchanged.  DIST_AVG divides the sum by the world size (integers: the
   quotient, rounded towards zero).  float16 and bfloat16 are combined in
   float, rounded after each step.  Results are identical, bit for bit, on
   every rank.
   Each call has an _async twin that returns a request (dist_wait,
   dist_test); a communicator runs its collectives in the order they were
   called, async or not, on one worker thread per communicator.  Do not
   call collectives on one communicator from two threads at once; separate
   communicators (groups) may run at the same time. */
DIST_API dist_result dist_broadcast     (dist_t *d, void *buf, size_t count, dist_dtype dtype, int root);
DIST_API dist_result dist_reduce        (dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op, int root);
DIST_API dist_result dist_all_reduce    (dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op);
DIST_API dist_result dist_gather        (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root);
DIST_API dist_result dist_all_gather    (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype);
DIST_API dist_result dist_scatter       (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root);
DIST_API dist_result dist_reduce_scatter(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op);
DIST_API dist_result dist_all_to_all    (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype);
DIST_API dist_result dist_barrier       (dist_t *d);

DIST_API dist_result dist_broadcast_async     (dist_t *d, void *buf, size_t count, dist_dtype dtype, int root, dist_req_t **req);
DIST_API dist_result dist_reduce_async        (dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op, int root, dist_req_t **req);
DIST_API dist_result dist_all_reduce_async    (dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op, dist_req_t **req);
DIST_API dist_result dist_gather_async        (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_req_t **req);
DIST_API dist_result dist_all_gather_async    (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_req_t **req);
DIST_API dist_result dist_scatter_async       (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_req_t **req);
DIST_API dist_result dist_reduce_scatter_async(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op, dist_req_t **req);
DIST_API dist_result dist_all_to_all_async    (dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_req_t **req);
DIST_API dist_result dist_barrier_async       (dist_t *d, dist_req_t **req);

/* ---- groups ----
   Called by every rank of `parent`, in the same order, with the same list
   of parent ranks (any order; members are ranked by their parent rank, as
   in torch's new_group).  Members get a communicator usable with every call
   (point-to-point ranks are group ranks); others get NULL.  dist_destroy a
   group before its world (destroying the world destroys its groups too). */
DIST_API dist_result dist_new_group(dist_t *parent, int n, const int *ranks, dist_t **group);

/* ---- surviving failures (ULFM's agree and shrink) ----
   A rank that dies (a crash, a kill, an exit without dist_destroy) fails
   only what needs it: operations with it, and collectives of the
   communicators it belongs to (DIST_ERR_PEER_LOST, naming it).  The
   survivors go on without it:
   dist_agree   every live member of d calls it; each returns the same
                *flags, the bitwise AND of the flags of the members counted
                alive, and the same *nalive (may be NULL), how many they
                were: "did every survivor finish step k?".
   dist_shrink  the same agreement; each survivor gets *survivors, a new
                communicator of the members counted alive, ranked in their
                order in d (groups may be made from it).  d stays usable
                for what does not need the dead.
   A member is counted alive when it called before the decision and the
   member that decided did not know it dead; one that dies during the call
   may be counted either way (if alive, the next operation that needs it
   fails, and the next shrink leaves it out).  A live member that was
   taken for dead (its connections broke) gets DIST_ERR_PEER_LOST instead
   of another view of the job; one that neither calls nor dies (stopped)
   fails the call after the timeout, naming it.  Live members make their
   dist_agree and dist_shrink calls on d in the same order (a member that
   calls the other fails, DIST_ERR_MISMATCH).  They go through the store,
   so they need rank 0 alive when it hosts the store (a launcher can host
   it instead: see dist_store_host_start).
   dist_failed_ranks  the members of d this rank knows dead now (their
                connection failed or they left): up to cap of them into
                ranks (may be NULL); returns how many there are.
   dist_revoke  interrupts every operation on d, on every member: what is
                pending (a receive, a send not yet on the wire, a
                collective) and what is called later fails at once with
                DIST_ERR_REVOKED, naming the rank that revoked; a send
                already partly on the wire finishes.  Any one member calls
                it (a rank that gives up on a step while the others wait in
                it); every member then calls dist_agree or dist_shrink,
                which work on a revoked d, and goes on with the shrunk
                communicator (or a fresh dist_new_group of the world).
                Messages of d that arrive later are dropped.  The notice
                goes to every member from each that hears it first, so it
                arrives even if the revoker dies at once.  Groups made from
                d are not revoked with it.
   dist_revoked  1 once d is revoked (here or by another member). */
DIST_API dist_result dist_agree(dist_t *d, uint64_t *flags, int *nalive);
DIST_API dist_result dist_shrink(dist_t *d, dist_t **survivors);
DIST_API int dist_failed_ranks(dist_t *d, int *ranks, int cap);
DIST_API dist_result dist_revoke(dist_t *d);
DIST_API int dist_revoked(const dist_t *d);

/* ---- growing: newcomers join a running job ----
   A process started with cfg.join = 1 (or DIST_JOINING=1), with the job's
   init method, run id and secret, waits in dist_init (up to its timeout)
   until the running ranks admit it; dist_init then returns the grown
   communicator (destroying it destroys everything of this process's).
   dist_grow    every live member of d calls it at a point of its choosing
                (between steps): it admits every newcomer waiting (once at
                least min_new are: 0 admits whoever is there, maybe nobody)
                and gives *grown, a new communicator of d's members counted
                alive (as dist_shrink counts them, in their order) followed
                by the newcomers in the order they asked.  A newcomer is
                a new rank of the job even when it replaces a dead one (a
                restarted process); a job may take DIST_MAX_JOINS
                newcomers in its life (default: 64, or its size if more).
                Newcomers talk TCP with everyone.  On a revoked d too.
                The newcomers waiting are the job's, not d's: one
                communicator grows at a time (two that call dist_grow at
                once would both admit the same newcomers; a dynamic RPC
                agent grows its own, so its job's program grows none).
   dist_newcomers  how many members of d joined by the dist_grow that made
                it (the same on every member, newcomers included; 0 for any
                other communicator): when it is not 0, every member calls
                what brings the newcomers up to date (a broadcast of the
                parameters from rank 0).  Not the change in size: members
                that died are left out of the grown communicator.
   dist_joined  1 in a process that joined this way (it has no checkpoint
                of its own to reload unless it restarted: see below).
   dist_restart_count  how many times the launcher restarted this rank
                (DIST_RESTART_COUNT, set by distrun --max-restarts; 0).
   dist_joins_waiting  *n = how many newcomers wait to be admitted now (a
                store round trip): a rank that only grows when someone
                waits polls this between steps (every member must then
                call dist_grow; they agree on whom it admits).
   dist_world   the world communicator d belongs to: the job's ranks, as
                dist_init gives it (a newcomer's too: the communicator
                dist_init gave it is a group of it).  Its ranks never
                change: once a dist_grow admitted newcomers, they are ranks
                of the world on every member (its size counts every rank
                the job has had, the dead included), so point-to-point
                reaches any live rank of the job by a number that stays
                its own; the dead fail as ever (DIST_ERR_PEER_LOST).  From
                then on the world takes no collectives, groups, agree,
                shrink or grow (DIST_ERR_INVALID says so): its members
                differ from rank to rank's view; use the communicators
                dist_grow gives.
   dist_world_capacity  the most ranks the world can reach by growing
                (its size at formation + DIST_MAX_JOINS, see above). */
DIST_API dist_result dist_grow(dist_t *d, int min_new, dist_t **grown);
DIST_API int dist_joined(const dist_t *d);
DIST_API int dist_newcomers(const dist_t *d);
DIST_API int dist_restart_count(void);
DIST_API dist_result dist_joins_waiting(dist_t *d, int *n);
DIST_API dist_t *dist_world(dist_t *d);
DIST_API int dist_world_capacity(const dist_t *d);

/* ---- local launch (torch.multiprocessing.spawn) ----
   Starts nprocs ranks of this program on this host.  Each runs
   fn(world, arg) with a communicator already initialised (over loopback,
   the store hosted by the calling process, unless cfg names an init
   method: so the store outlives any rank, rank 0 included, and survivors
   can agree and shrink); the child's
   process ends with fn's return value once dist_destroy has run.  Returns
   0 when every fn returned 0; otherwise stops the others (SIGTERM, then
   SIGKILL after 2 s) and returns the first failing rank's exit code (or
   128 + signal).  Returns -1 if it could not start.
   POSIX: the ranks are forks of the caller ("fork" start method): fn and
   arg are the caller's, as they were at the call.
   Windows cannot fork ("spawn" start method, as Python's multiprocessing
   on Windows): each rank is the program started again, with the same
   command line and an environment variable naming the rank.  Its main
   runs from the start up to the same dist_spawn call, which then becomes
   the rank (it does not return there).  So what main does before the call
   happens in every rank too (print after dist_spawn returns, or in fn);
   arg must be made the same way by each process's main (a pointer into
   the parent's memory means nothing in a rank).  A program may call
   dist_spawn more than once: a rank of the k-th call returns 0 at once
   from the calls before it (its parent ran them), so main must reach
   the k-th call the same way (a rank that finds other arguments there
   exits with 2, saying so).  Stopping is TerminateProcess; a job object
   ends the ranks when the parent ends. */
DIST_API int dist_spawn(int nprocs, int (*fn)(dist_t *world, void *arg), void *arg, const dist_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* DIST_H */

/* Stop now if you only need the API; the implementation follows. */

/* ==========================================================================
   IMPLEMENTATION
   ========================================================================== */
/* The configuration and the platform layer are compiled once per
   translation unit that implements any of dist.h, dist_rpc.h and
   dist_cuda.h: all three reach the OS through them. */
#if (defined(DIST_IMPLEMENTATION) || defined(DIST_RPC_IMPLEMENTATION) || defined(DIST_CUDA_IMPLEMENTATION)) && \
    !defined(DIST__PLATFORM_DONE)
#define DIST__PLATFORM_DONE

/* Index (search for the bracketed name):
   [SECTION] design notes
   [SECTION] configuration and includes
   [SECTION] platform: threads, time, atomics, host, libraries
   [SECTION] platform: sockets, files, processes, shared memory
   [SECTION] results, dtypes, errors and logging
   [SECTION] reductions: one kernel per dtype x op, generated
   [SECTION] wire format: little-endian, handshake, frame header
   [SECTION] SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104)
   [SECTION] socket helpers: connect with retry, timed I/O
   [SECTION] store: server
   [SECTION] core structures
   [SECTION] flight recorder: writing
   [SECTION] store: client and public API
   [SECTION] engine: design notes
   [SECTION] engine: requests, messages, the match index
   [SECTION] engine: sending (the queues, credit, the wire)
   [SECTION] engine: receiving (frames, matching, rendezvous)
   [SECTION] engine: failure
   [SECTION] engine: progress, waiting, withdrawing
   [SECTION] transport: TCP
   [SECTION] transport: shared memory
   [SECTION] engine: creation and release
   [SECTION] point-to-point API
   [SECTION] probes
   [SECTION] collectives: descriptors, requests, mismatch and abort notices
   [SECTION] collectives: algorithms
   [SECTION] collectives: API, async queue, groups
   [SECTION] collectives in shared memory
   [SECTION] groups
   [SECTION] surviving failures: agree, shrink
   [SECTION] rendezvous: init methods and the mesh
   [SECTION] growing: newcomers join a running job
   [SECTION] flight recorder: dumps, job reports, the monitor
   [SECTION] stats and traces
   [SECTION] life cycle: init, destroy
   [SECTION] spawn
*/

/* [SECTION] design notes
   ---------------------------------------------------------------------------
   Rendezvous.  Rank 0 (or a launcher: distrun, dist_spawn) hosts a
   key-value store (a thread serving a small request/response protocol
   over TCP).  Every rank, rank 0 included,
   connects to it with retries and says hello (rank, world size, the run id
   of its launch); the store refuses other launches' ranks and wrong world
   sizes, fails the forming job on a rank claimed twice, and records why
   under the key "dist/rejected" so the ranks left waiting can say what
   happened.  Each
   rank listens on an ephemeral port of the address it used to reach the
   store (or of DIST_SOCKET_IFNAME) and publishes it as "dist/addr/<rank>";
   rank 0 publishes a random job id.  Rank i connects to every j < i and
   accepts every j > i; both ends of a mesh connection check magic, protocol
   version, job id, ranks and world size, and each proves it knows the
   job's secret (HMAC-SHA256 over both ends' random nonces; see the
   handshake below).

   Frames.  Every mesh message is a 40-byte little-endian header (kind,
   dtype, op, collective, communicator id, tag, count, payload bytes, root,
   magic), trailers for some (an announcement's 16 bytes; a collective's
   24-byte stamp of who entered it when, under DIST_STATS or DIST_TRACE),
   and a payload.  A header is
   validated completely before anything of the payload is read: a bad one
   fails that peer's connection.

   Layers.  Platform (the only place that talks to the OS), transports
   (TCP, shared memory: byte streams behind one table of operations), the
   engine (framing, matching, flow control, progress; see "engine: design
   notes"), then point-to-point, collectives, groups and the store, all
   written over the engine's requests.
*/

/* [SECTION] configuration and includes */
#if defined(DIST_MALLOC) && defined(DIST_FREE) && defined(DIST_REALLOC)
#elif !defined(DIST_MALLOC) && !defined(DIST_FREE) && !defined(DIST_REALLOC)
#  include <stdlib.h>
#  define DIST_MALLOC(sz)      malloc(sz)
#  define DIST_FREE(p)         free(p)
#  define DIST_REALLOC(p, sz)  realloc(p, sz)
#else
#  error "dist.h: define all of DIST_MALLOC, DIST_FREE and DIST_REALLOC, or none"
#endif
#ifndef DIST_ASSERT
#  include <assert.h>
#  define DIST_ASSERT(x) assert(x)
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#ifdef __cplusplus
#  define DIST__TLS thread_local
#else
#  define DIST__TLS _Thread_local
#endif
#ifdef __cplusplus
#  define DIST__RESTRICT __restrict
#else
#  define DIST__RESTRICT restrict
#endif
/* gcc's -O2 vectorises only loops that need no epilogue; the reduction
   kernels ask for its full cost model (clang vectorises them anyway). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#  define DIST__VECTORIZE __attribute__((optimize("vect-cost-model=dynamic")))
#else
#  define DIST__VECTORIZE
#endif
#define DIST__UNUSED(x) (void)(x)
/* For the few stores every call makes (the flight recorder): a call to
   them would cost more than they do. */
#if defined(__GNUC__) || defined(__clang__)
#  define DIST__INLINE static inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#  define DIST__INLINE static __forceinline
#else
#  define DIST__INLINE static inline
#endif
#define DIST__MIN(a, b) ((a) < (b) ? (a) : (b))
#define DIST__MAX(a, b) ((a) > (b) ? (a) : (b))
/* A counted noun in a message, singular for one: "%d rank%s", n,
   DIST__PLURAL(n) reads "1 rank", "0 ranks", "2 ranks".  The one way for
   dist.h, dist_rpc.h and dist_cuda.h (this part is compiled wherever any of
   them is implemented); nouns without a plain "s" are reworded. */
#define DIST__PLURAL(n) ((n) == 1 ? "" : "s")

/* Limits on anything a peer or a store client can make us allocate. */
#define DIST__MAX_MESSAGE      ((uint64_t)1 << 40) /* one frame's payload   */
#define DIST__MAX_KEY          1024
#define DIST__MAX_VALUE        ((size_t)64 << 20)
#define DIST__MAX_WORLD        65536
#define DIST__STAGE_SIZE       (64 * 1024)   /* per-peer receive staging    */
#ifndef DIST_SHM_REF_BYTES
#  define DIST_SHM_REF_BYTES   (64 * 1024)   /* over shared memory, larger payloads travel by reference */
#endif
#ifndef DIST_SHM_COOP_BYTES
#  define DIST_SHM_COOP_BYTES  (1024 * 1024) /* ...and from this size both ends copy them (0: never) */
#endif
#define DIST__COOP_CHUNK       (512 * 1024)  /* what one end claims at a time */
#ifndef DIST_EAGER_BYTES
#  define DIST_EAGER_BYTES     ((uint64_t)4 << 20)   /* flow-control budget per peer (see the engine) */
#endif
#define DIST__ERRLEN           320
/* When the job cannot form, rank 0 keeps the store up a while (1 s, or
   until the rendezvous deadline, at most 3 s), so ranks still on their
   way learn why instead of finding no store at all. */
#define DIST__FATAL_LINGER_MS  3000
/* A job without a run id waits this long after it formed for a second
   claim of one of its ranks (two launches on one port) before init returns. */
#define DIST__SETTLE_MS        500
/* Connections a listener holds in their handshake during the rendezvous
   (the store's, and each rank's mesh listener): past this many, the least
   advanced is dropped (silent before half a hello before a hello without
   its proof, the oldest first), so strangers holding sockets open cannot
   crowd out a rank, whose hello comes within a round trip; a rank dropped
   all the same calls again (see dist__pending_cap). */
#define DIST__PENDING_MIN      256
/* A rank that failed to prove the secret, and only such ranks missing:
   the job fails after this long (or a quarter of the timeout) without a
   good claim (see dist__store_bad_secret). */
#define DIST__BAD_SECRET_MS    1000

/* [SECTION] platform: threads, time, atomics, host, libraries
   The platform layer is the only code in dist.h, dist_rpc.h and
   dist_cuda.h that talks to the OS: no other section calls a system
   function, names a system type or constant, or looks at errno after a
   system call (only at strtol's).  Everything POSIX-specific lives in it,
   so another platform (Windows, macOS) replaces it and nothing else.  It
   has two parts.  This one is compiled in every file that implements any
   of the three headers, and asks only for what <pthread.h>, <time.h>,
   <unistd.h>, <sys/stat.h> and <dlfcn.h> declare without feature macros
   (dist_rpc.h or dist_cuda.h may be implemented in a file that included
   system headers first):
     time         dist__now_ns/_ms, dist__ms_left
     threads      dist__mutex_init/_destroy, dist__plat_mutex_lock/_unlock/
                  _trylock (everything else locks with dist__mutex_lock etc.,
                  at this part's end), dist__cond_*, dist__thread_*, dist__yield
     atomics      DIST__LOAD_ACQ and the others, DIST__FENCE, DIST__CPU_RELAX
     host         dist__getpid, dist__host_identity
     libraries    dist__lib_open/_sym (dist_cuda.h)
     environment  dist__getenv
     logging      dist__wall_us, dist__debug_level (DIST_DEBUG), dist__word_index, the
                  stderr loggers DIST_DEBUG turns on
   The second, "platform: sockets, files, processes, shared memory", is
   dist.h's alone.  Every function here is static and may go unused. */
#if defined(__GNUC__) || defined(__clang__)
#  define DIST__PLATFORM static __attribute__((unused))
#else
#  define DIST__PLATFORM static
#endif

/* Which operating system: Windows (64-bit), Linux with its extensions
   (DIST__LINUX), or any other POSIX system through POSIX alone (macOS, the
   BSDs, and Linux built with DIST_PORTABLE_POSIX, which is how the suite
   tests that path). */
#if defined(__linux__) && !defined(DIST_PORTABLE_POSIX)
#  define DIST__LINUX 1
#endif
#if defined(_WIN32) && !defined(_WIN64)
#  error "dist.h: 32-bit Windows is not supported (build for x64)"
#elif !defined(_WIN32) && !defined(__unix__) && !defined(__APPLE__)
#  error "dist.h: no platform layer for this system: port the two [SECTION] platform parts of dist.h (threads, time, atomics, host, libraries; sockets, files, processes, shared memory)"
#endif

#if defined(_WIN32)
/* Windows (64-bit): Win32 threads, SRW locks and condition variables, the
   performance counter; Winsock 2 (link ws2_32: -lws2_32 with mingw-w64,
   a #pragma with MSVC).  <winsock2.h> must come before <windows.h>: in a
   file that includes <windows.h> itself, include dist.h first or define
   WIN32_LEAN_AND_MEAN. */
#ifndef WIN32_LEAN_AND_MEAN
#  define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#  define NOMINMAX
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#ifdef _MSC_VER
#  pragma comment(lib, "ws2_32.lib")
#endif

DIST__PLATFORM int64_t dist__now_ns(void) {
    static LARGE_INTEGER freq;       /* the same value whoever sets it first */
    LARGE_INTEGER c;
    if (!freq.QuadPart) QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&c);
    return (int64_t)(c.QuadPart / freq.QuadPart) * 1000000000 + (int64_t)(c.QuadPart % freq.QuadPart) * 1000000000 / freq.QuadPart;
}

typedef SRWLOCK dist__mutex;
typedef CONDITION_VARIABLE dist__cond;
typedef HANDLE dist__thread;
#define DIST__THREAD_RETURN DWORD
#define DIST__THREAD_RETURN_VALUE 0
typedef DIST__THREAD_RETURN (*dist__thread_fn)(void *);
#define DIST__MUTEX_INITIALIZER SRWLOCK_INIT
#define DIST__COND_INITIALIZER  CONDITION_VARIABLE_INIT

DIST__PLATFORM void dist__mutex_init(dist__mutex *m) { InitializeSRWLock(m); }
DIST__PLATFORM void dist__mutex_destroy(dist__mutex *m) { DIST__UNUSED(m); }
DIST__PLATFORM void dist__plat_mutex_lock(dist__mutex *m) { AcquireSRWLockExclusive(m); }
DIST__PLATFORM void dist__plat_mutex_unlock(dist__mutex *m) { ReleaseSRWLockExclusive(m); }
DIST__PLATFORM int dist__plat_mutex_trylock(dist__mutex *m) { return TryAcquireSRWLockExclusive(m) ? 0 : -1; }
DIST__PLATFORM void dist__cond_init(dist__cond *c) { InitializeConditionVariable(c); }
DIST__PLATFORM void dist__cond_destroy(dist__cond *c) { DIST__UNUSED(c); }
DIST__PLATFORM void dist__cond_signal(dist__cond *c) { WakeConditionVariable(c); }
DIST__PLATFORM void dist__cond_broadcast(dist__cond *c) { WakeAllConditionVariable(c); }
DIST__PLATFORM void dist__cond_wait(dist__cond *c, dist__mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
DIST__PLATFORM void dist__cond_wait_ms(dist__cond *c, dist__mutex *m, int ms) { SleepConditionVariableSRW(c, m, ms < 0 ? 0 : (DWORD)ms, 0); }

/* A thread runs fn(arg) through this trampoline (Win32's start routine has
   its own calling convention). */
typedef struct dist__thread_start_arg { dist__thread_fn fn; void *arg; } dist__thread_start_arg;
static DWORD WINAPI dist__thread_trampoline(LPVOID p) {
    dist__thread_start_arg a = *(dist__thread_start_arg *)p;
    free(p);
    return a.fn(a.arg);
}
DIST__PLATFORM int dist__thread_start(dist__thread *t, dist__thread_fn fn, void *arg) {
    dist__thread_start_arg *a = (dist__thread_start_arg *)malloc(sizeof *a);
    if (!a) return -1;
    a->fn = fn; a->arg = arg;
    *t = CreateThread(NULL, 0, dist__thread_trampoline, a, 0, NULL);
    if (!*t) { free(a); return -1; }
    return 0;
}
DIST__PLATFORM void dist__thread_join(dist__thread t) { WaitForSingleObject(t, INFINITE); CloseHandle(t); }
DIST__PLATFORM void dist__yield(void) { if (!SwitchToThread()) Sleep(0); }

DIST__PLATFORM int dist__getpid(void) { return (int)GetCurrentProcessId(); }

/* Who shares this host's memory with us: the same computer and session
   (a named mapping lives in its session's Local\ namespace). */
DIST__PLATFORM void dist__host_identity(char *buf, size_t cap) {
    char host[MAX_COMPUTERNAME_LENGTH + 1];
    DWORD n = sizeof host, session = 0;
    if (!GetComputerNameA(host, &n)) host[0] = 0;
    ProcessIdToSessionId(GetCurrentProcessId(), &session);
    snprintf(buf, cap, "windows|%s|%lu", host, (unsigned long)session);
}

/* The text of a Win32 error code. */
DIST__PLATFORM const char *dist__win_error_text(DWORD code, char *buf, size_t cap) {
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code, 0, buf, (DWORD)cap, NULL);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == '.' || buf[n - 1] == ' ')) buf[--n] = 0;
    if (n == 0) snprintf(buf, cap, "Windows error %lu", (unsigned long)code);
    return buf;
}

DIST__PLATFORM void *dist__lib_open(const char *name, char *why, size_t cap) {
    HMODULE h = LoadLibraryA(name);
    if (!h && why && cap) {                 /* "name: reason", as dlerror() says it */
        char text[200];
        DWORD code = GetLastError();
        snprintf(why, cap, "%s: %s", name, dist__win_error_text(code, text, sizeof text));
    }
    return (void *)h;
}
DIST__PLATFORM void *dist__lib_sym(void *lib, const char *name) {
    FARPROC f = GetProcAddress((HMODULE)lib, name);
    void *p;
    memcpy(&p, &f, sizeof p);           /* a function's address as data, without a cast between the two */
    return p;
}

#else /* POSIX */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <dlfcn.h>
#if defined(__APPLE__)
#  include <sys/time.h>
#  include <sys/sysctl.h>
#endif

/* Time.  A monotonic clock where the system declares one here (in a file
   that included system headers before asking for POSIX, only C11's
   calendar clock is there: dist.h's own file always has the first). */
#if defined(CLOCK_MONOTONIC)
#  define DIST__MONOTONIC 1
#endif
DIST__PLATFORM int64_t dist__now_ns(void) {
    struct timespec ts;
#ifdef DIST__MONOTONIC
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}


/* Threads, locks, condition variables. */
typedef pthread_mutex_t dist__mutex;
typedef pthread_cond_t dist__cond;
typedef pthread_t dist__thread;
#define DIST__THREAD_RETURN void *
#define DIST__THREAD_RETURN_VALUE NULL
typedef DIST__THREAD_RETURN (*dist__thread_fn)(void *);
/* Static initialisers, for locks that exist before anything can set them
   up.  A condition made this way may only be waited on without a timeout:
   dist__cond_wait_ms needs one made by dist__cond_init (its clock). */
#define DIST__MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#define DIST__COND_INITIALIZER  PTHREAD_COND_INITIALIZER

DIST__PLATFORM void dist__mutex_init(dist__mutex *m) { pthread_mutex_init(m, NULL); }
DIST__PLATFORM void dist__mutex_destroy(dist__mutex *m) { pthread_mutex_destroy(m); }
DIST__PLATFORM void dist__plat_mutex_lock(dist__mutex *m) { pthread_mutex_lock(m); }
DIST__PLATFORM void dist__plat_mutex_unlock(dist__mutex *m) { pthread_mutex_unlock(m); }
DIST__PLATFORM int dist__plat_mutex_trylock(dist__mutex *m) { return pthread_mutex_trylock(m) == 0 ? 0 : -1; }

DIST__PLATFORM void dist__cond_init(dist__cond *c) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
#if defined(DIST__LINUX) && defined(DIST__MONOTONIC)
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);    /* dist__cond_wait_ms reads the same clock */
#endif
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}
DIST__PLATFORM void dist__cond_destroy(dist__cond *c) { pthread_cond_destroy(c); }
DIST__PLATFORM void dist__cond_signal(dist__cond *c) { pthread_cond_signal(c); }
DIST__PLATFORM void dist__cond_broadcast(dist__cond *c) { pthread_cond_broadcast(c); }
DIST__PLATFORM void dist__cond_wait(dist__cond *c, dist__mutex *m) { pthread_cond_wait(c, m); }

DIST__PLATFORM void dist__cond_wait_ms(dist__cond *c, dist__mutex *m, int ms) {
    struct timespec ts;
#if defined(DIST__LINUX) && defined(DIST__MONOTONIC)
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);                        /* the condition's default clock */
#endif
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(c, m, &ts);
}

/* 0 when the thread started. */
DIST__PLATFORM int dist__thread_start(dist__thread *t, dist__thread_fn fn, void *arg) { return pthread_create(t, NULL, fn, arg) != 0 ? -1 : 0; }
DIST__PLATFORM void dist__thread_join(dist__thread t) { pthread_join(t, NULL); }
/* Gives the CPU to another runnable thread or process. */
DIST__PLATFORM void dist__yield(void) { sched_yield(); }

/* This process's id. */
DIST__PLATFORM int dist__getpid(void) { return (int)getpid(); }

/* Who shares this host's memory with us.  On Linux: processes with the
   same boot, host name, user, and IPC, PID and network namespaces.
   Elsewhere: the same host name and user (and, on macOS, boot time); a
   match that is wrong (two hosts of one name) costs nothing but a failed
   attempt to map a segment, after which the pair uses TCP. */
#ifdef DIST__LINUX
DIST__PLATFORM void dist__host_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)cap, f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}
DIST__PLATFORM void dist__host_identity(char *buf, size_t cap) {
    char boot[64], host[128];
    struct stat ipc, pidns, net;
    dist__host_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    dist__host_line("/proc/sys/kernel/hostname", host, sizeof host);    /* gethostname's, on Linux */
    if (stat("/proc/self/ns/ipc", &ipc) != 0) memset(&ipc, 0, sizeof ipc);
    if (stat("/proc/self/ns/pid", &pidns) != 0) memset(&pidns, 0, sizeof pidns);
    if (stat("/proc/self/ns/net", &net) != 0) memset(&net, 0, sizeof net);
    snprintf(buf, cap, "%s|%s|%lu|%lu|%lu|%lu", boot, host, (unsigned long)getuid(), (unsigned long)ipc.st_ino,
             (unsigned long)pidns.st_ino, (unsigned long)net.st_ino);
}
#else
DIST__PLATFORM void dist__host_identity(char *buf, size_t cap) {
    struct utsname u;
    long long boot = 0;
#if defined(__APPLE__)
    struct timeval tv;
    size_t len = sizeof tv;
    if (sysctlbyname("kern.boottime", &tv, &len, NULL, 0) == 0) boot = (long long)tv.tv_sec;
#endif
    if (uname(&u) != 0) memset(&u, 0, sizeof u);
    snprintf(buf, cap, "posix|%s|%s|%lld|%lu", u.sysname, u.nodename, boot, (unsigned long)getuid());
}
#endif

/* Shared libraries opened at run time (dist_cuda.h: the driver, NVRTC,
   NCCL).  NULL on failure, with the loader's reason in why.  Inline, so
   that a build at -O0 emits them only where they are called: before glibc
   2.34 dlopen is in libdl, which only dist_cuda.h's programs link. */
DIST__PLATFORM inline void *dist__lib_open(const char *name, char *why, size_t cap) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h && why && cap) snprintf(why, cap, "%s", dlerror());
    return h;
}
DIST__PLATFORM inline void *dist__lib_sym(void *lib, const char *name) { return dlsym(lib, name); }

#endif /* POSIX */

DIST__PLATFORM int64_t dist__now_ms(void) { return dist__now_ns() / 1000000; }

/* Milliseconds left until `deadline_ms`, clamped to [0, cap]. */
DIST__PLATFORM int dist__ms_left(int64_t deadline_ms, int cap) {
    int64_t left = deadline_ms - dist__now_ms();
    if (left < 0) left = 0;
    if (left > cap) left = cap;
    return (int)left;
}

/* Atomics on plain integers, also in memory shared between processes
   (gcc/clang builtins work in C and C++ alike; MSVC below). */
#if (defined(_MSC_VER) && !defined(__clang__)) || defined(DIST__MSC_ATOMICS)
/* MSVC, x64 only: an aligned load or store of up to 8 bytes is atomic, and
   the CPU orders a load as an acquire and a store as a release, so only
   the compiler needs holding back (_ReadWriteBarrier); read-modify-writes
   are Interlocked*.  In C, C11's _Generic picks the function by the type
   of *p (its qualifiers dropped); C++ has no _Generic, and picks among
   overloads of one name instead.  (DIST__MSC_ATOMICS takes this branch
   with another compiler and stand-ins for the intrinsics, for the compile
   checks: tests/compile/msc_atomics.h, in C and in C++.) */
#ifndef DIST__MSC_ATOMICS
#  include <intrin.h>
#endif
#ifdef __cplusplus
#  define DIST__MSC_FN(op, N) dist__msc_##op          /* overloads, by the type of p */
#  define DIST__MSC_PICK(x, op) dist__msc_##op
#else
#  define DIST__MSC_FN(op, N) dist__##op##_##N
#endif
#define DIST__MSC_ATOMIC(T, N, W)                                                                                      \
    static __inline T DIST__MSC_FN(ld, N)(const volatile T *p) { T v = *p; _ReadWriteBarrier(); return v; }            \
    static __inline void DIST__MSC_FN(st, N)(volatile T *p, T v) { _ReadWriteBarrier(); *p = v; _ReadWriteBarrier(); } \
    static __inline T DIST__MSC_FN(add, N)(volatile T *p, T v) { return (T)W##Add((volatile W##_t *)p, (W##_t)v); }    \
    static __inline int DIST__MSC_FN(cas, N)(volatile T *p, T *expected, T v) {                                        \
        T old = *expected, seen = (T)W##Cas((volatile W##_t *)p, (W##_t)v, (W##_t)old);                                \
        if (seen == old) return 1;                                                                                     \
        *expected = seen;                                                                                              \
        return 0;                                                                                                      \
    }
#ifdef DIST__MSC_LONG64          /* (the compile checks' stand-ins, where long has 64 bits) */
typedef int dist__msc32_t;
#  define DIST__MSC_LONG dist__msc64
#else                              /* Windows: long has 32 bits */
typedef long dist__msc32_t;
#  define DIST__MSC_LONG dist__msc32
#endif
typedef __int64 dist__msc64_t;
typedef char dist__msc8_t;
typedef short dist__msc16_t;
#define dist__msc8Add _InterlockedExchangeAdd8
#define dist__msc16Add _InterlockedExchangeAdd16
#define dist__msc8Cas _InterlockedCompareExchange8
#define dist__msc16Cas _InterlockedCompareExchange16
#define dist__msc32Add _InterlockedExchangeAdd
#define dist__msc64Add _InterlockedExchangeAdd64
#define dist__msc32Cas _InterlockedCompareExchange
#define dist__msc64Cas _InterlockedCompareExchange64
DIST__MSC_ATOMIC(signed char, c, dist__msc8)
DIST__MSC_ATOMIC(unsigned char, uc, dist__msc8)
DIST__MSC_ATOMIC(char, ch, dist__msc8)
DIST__MSC_ATOMIC(short, s, dist__msc16)
DIST__MSC_ATOMIC(unsigned short, us, dist__msc16)
DIST__MSC_ATOMIC(int, i, dist__msc32)
DIST__MSC_ATOMIC(unsigned, u, dist__msc32)
#define DIST__MSC_ATOMIC_X(T, N, W) DIST__MSC_ATOMIC(T, N, W)      /* (W expanded first) */
DIST__MSC_ATOMIC_X(long, l, DIST__MSC_LONG)
DIST__MSC_ATOMIC_X(unsigned long, ul, DIST__MSC_LONG)
DIST__MSC_ATOMIC(long long, ll, dist__msc64)
DIST__MSC_ATOMIC(unsigned long long, ull, dist__msc64)
#ifndef __cplusplus
#define DIST__MSC_PICK(x, op) _Generic((x), signed char: dist__##op##_c, unsigned char: dist__##op##_uc, char: dist__##op##_ch, \
    short: dist__##op##_s, unsigned short: dist__##op##_us, int: dist__##op##_i, unsigned: dist__##op##_u, long: dist__##op##_l, \
    unsigned long: dist__##op##_ul, long long: dist__##op##_ll, unsigned long long: dist__##op##_ull)
#endif
#define DIST__LOAD_ACQ(p)         DIST__MSC_PICK(*(p), ld)(p)
#define DIST__STORE_REL(p, v)     DIST__MSC_PICK(*(p), st)((p), (v))
#define DIST__LOAD_RELAXED(p)     DIST__MSC_PICK(*(p), ld)(p)
#define DIST__STORE_RELAXED(p, v) DIST__MSC_PICK(*(p), st)((p), (v))
#define DIST__FETCH_ADD(p, v)     DIST__MSC_PICK(*(p), add)((p), (v))
#define DIST__CAS(p, expected, v) DIST__MSC_PICK(*(p), cas)((p), (expected), (v))
#define DIST__FENCE()             MemoryBarrier()
#define DIST__FENCE_ACQ_REL()     _ReadWriteBarrier()
#define DIST__COMPILER_FENCE()    _ReadWriteBarrier()
#define DIST__CPU_RELAX()         _mm_pause()
#else
#define DIST__LOAD_ACQ(p)      __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define DIST__STORE_REL(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define DIST__LOAD_RELAXED(p)  __atomic_load_n((p), __ATOMIC_RELAXED)
#define DIST__STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define DIST__FETCH_ADD(p, v)  __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
/* Compare-and-swap: *p = v if *p == *expected, else *expected = *p; 1 if it swapped. */
#define DIST__CAS(p, expected, v) __atomic_compare_exchange_n((p), (expected), (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#if defined(__has_feature)
#  if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#    define __SANITIZE_THREAD__ 1
#  endif
#endif
#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer does not model fences (gcc refuses them with -Werror);
   a locked read-modify-write is a full barrier on the machines it runs on,
   and the fences only order memory shared with other processes, which it
   does not see anyway. */
DIST__PLATFORM volatile int dist__fence_word;
#  define DIST__FENCE()        ((void)__atomic_fetch_add(&dist__fence_word, 0, __ATOMIC_SEQ_CST))
#  define DIST__FENCE_ACQ_REL() DIST__FENCE()
#  define DIST__COMPILER_FENCE() DIST__FENCE()
#else
#  define DIST__FENCE()        __atomic_thread_fence(__ATOMIC_SEQ_CST)
/* Orders loads and stores before it with those after it, except a store
   before with a load after (free on x86: it only binds the compiler). */
#  define DIST__FENCE_ACQ_REL() __atomic_thread_fence(__ATOMIC_ACQ_REL)
/* Keeps the compiler from moving loads and stores across it (the CPU may). */
#  define DIST__COMPILER_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#endif
#if defined(__x86_64__) || defined(__i386__)
#  define DIST__CPU_RELAX()    __builtin_ia32_pause()
#elif defined(__aarch64__)
#  define DIST__CPU_RELAX()    __asm__ __volatile__("yield")
#else
#  define DIST__CPU_RELAX()    ((void)0)
#endif
#endif /* gcc, clang */

DIST__PLATFORM const char *dist__getenv(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* The calendar clock, microseconds since 1970 UTC: for log lines that
   must line up across ranks and hosts (dist__now_ns is for durations). */
#if defined(_WIN32)
DIST__PLATFORM int64_t dist__wall_us(void) {
    FILETIME ft;
    ULARGE_INTEGER u;
#if defined(_WIN32_WINNT) && _WIN32_WINNT >= 0x0602
    GetSystemTimePreciseAsFileTime(&ft);
#else
    GetSystemTimeAsFileTime(&ft);
#endif
    u.LowPart = ft.dwLowDateTime;
    u.HighPart = ft.dwHighDateTime;
    return (int64_t)(u.QuadPart / 10) - (int64_t)11644473600 * 1000000;   /* from 1601 */
}
#else
DIST__PLATFORM int64_t dist__wall_us(void) {
    struct timespec ts;
#if defined(CLOCK_REALTIME)
    clock_gettime(CLOCK_REALTIME, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
#endif

/* DIST_DEBUG, read alike by dist.h, dist_rpc.h and dist_cuda.h: unset,
   "", "0" or "off": 0 (no stderr logger); "info": DIST_LOG_INFO;
   "detail": DIST_LOG_DEBUG; any case, so TORCH_DISTRIBUTED_DEBUG's
   OFF, INFO and DETAIL work; anything else -1 (init refuses it). */
/* Which of n lower-case words v is, in any case (ASCII); -1: none. */
DIST__PLATFORM int dist__word_index(const char *v, const char *const *words, int n) {
    for (int w = 0; w < n; w++) {
        size_t i = 0;
        while (v[i] && words[w][i] && (v[i] | 0x20) == words[w][i]) i++;
        if (!v[i] && !words[w][i]) return w;
    }
    return -1;
}

DIST__PLATFORM int dist__debug_level(const char *v) {
    static const char *const words[] = { "off", "info", "detail" };
    static const int levels[] = { 0, DIST_LOG_INFO, DIST_LOG_DEBUG };
    int w;
    if (!v || !*v || strcmp(v, "0") == 0) return 0;
    return (w = dist__word_index(v, words, 3)) < 0 ? -1 : levels[w];
}

/* The logger DIST_DEBUG turns on: a line on stderr per message, written
   whole (one fwrite, no lock to inherit held across a fork: lines of the
   threads and processes that share stderr do not mix).  "dist info:
   [rank 3] ..."; the stamped one, for detail, adds the time of day (UTC,
   to the microsecond), to match lines across ranks and hosts:
   "dist 12:34:56.789012Z debug: [rank 3] ...". */
DIST__PLATFORM void dist__stderr_line(dist_log_level level, const char *msg, int stamped) {
    static const char *const names[] = { "", "error", "warn", "info", "debug" };
    const char *lv = names[level >= 1 && level <= 4 ? level : 0];
    char line[700];
    int n;
    if (stamped) {
        int64_t us = dist__wall_us() % ((int64_t)86400 * 1000000);
        n = snprintf(line, sizeof line, "dist %02d:%02d:%02d.%06dZ %s: %s\n", (int)(us / 3600000000), (int)(us / 60000000 % 60),
                     (int)(us / 1000000 % 60), (int)(us % 1000000), lv, msg);
    } else {
        n = snprintf(line, sizeof line, "dist %s: %s\n", lv, msg);
    }
    if (n >= (int)sizeof line) { line[sizeof line - 2] = '\n'; n = (int)sizeof line - 1; }
    if (n > 0) fwrite(line, 1, (size_t)n, stderr);
}
DIST__PLATFORM void dist__stderr_logger(dist_log_level level, const char *msg, void *user) {
    (void)user;
    dist__stderr_line(level, msg, 0);
}
DIST__PLATFORM void dist__stderr_logger_stamped(dist_log_level level, const char *msg, void *user) {
    (void)user;
    dist__stderr_line(level, msg, 1);
}

/* Locks, and the log lines written while one is held.  The logger is the
   program's code: it may call dist (a dump, the stats, a job report) from
   whatever thread its line comes on, and those calls take dist's locks.  So
   dist never calls the logger with one of its own locks held: each thread
   counts the locks it holds (dist__mutex_lock and the others below, over
   the platform's), and a line logged while it holds one waits in the
   thread's queue until the thread lets go of its last lock, which writes
   them, in order.  The queue holds DIST__LOG_HELD lines in place, then up
   to DIST__LOG_HELD_MAX more on the heap (a failure that fails many peers
   at once: given back once written); past that, lines are counted and
   said in one line.  That holds inside the logger too: a line that the
   logger's own call into dist logs reaches it, nested, while that call
   runs (as it would with no lock in between), so a logger that guards
   against its own nesting sees it as nested.  Not the platform's own
   (nothing here calls the OS), but here because all three headers lock
   through it. */
#define DIST__LOG_HELD 8
#define DIST__LOG_HELD_MAX 4096
#define DIST__LOG_LINE 512
typedef struct dist__held_line {
    dist_logger to;
    dist_log_level level;
    char msg[DIST__LOG_LINE];
} dist__held_line;
typedef struct dist__lock_state {
    int locks;                 /* dist's locks this thread holds */
    unsigned head, tail;       /* the lines waiting: line head .. tail-1 (dist__held_at) */
    unsigned more_cap;         /* lines `more` has room for */
    long dropped;              /* lines that found no room, since the queue was last written */
    dist__held_line last;      /* (where the dropped ones would have gone) */
    dist__held_line *more;     /* lines DIST__LOG_HELD and on */
    dist__held_line q[DIST__LOG_HELD];
} dist__lock_state;
static DIST__TLS dist__lock_state dist__locks;

DIST__PLATFORM dist__held_line *dist__held_at(dist__lock_state *t, unsigned i) {
    return i < DIST__LOG_HELD ? &t->q[i] : &t->more[i - DIST__LOG_HELD];
}

/* The lines this thread holds, to their loggers (as it lets go of its
   last lock).  A logger's call into dist that lets go of its last lock
   writes the lines after this one from inside it: nested, in order. */
DIST__PLATFORM void dist__log_write_held(void) {
    dist__lock_state *t = &dist__locks;
    dist__held_line line;
    while (t->head != t->tail || t->dropped) {
        if (t->head != t->tail) {
            line = *dist__held_at(t, t->head);
            if (++t->head == t->tail) t->head = t->tail = 0;     /* all out: the queue starts again */
        } else {
            line = t->last;
            snprintf(line.msg, sizeof line.msg, "(and %ld more log line%s, logged while dist held a lock, dropped: at most %d wait)",
                     t->dropped, t->dropped == 1 ? "" : "s", DIST__LOG_HELD + DIST__LOG_HELD_MAX);
            t->dropped = 0;
        }
        line.to.func(line.level, line.msg, line.to.user);
    }
    if (t->more) {                             /* (a flood's room, given back) */
        DIST_FREE(t->more);
        t->more = NULL;
        t->more_cap = 0;
    }
}

/* A line for `to`: now, or once this thread holds none of dist's locks. */
DIST__PLATFORM void dist__log_line(const dist_logger *to, dist_log_level level, const char *msg) {
    dist__lock_state *t = &dist__locks;
    dist__held_line *h;
    size_t n;
    if (t->locks == 0 && t->tail == 0) { to->func(level, msg, to->user); return; }
    if (t->tail >= DIST__LOG_HELD + t->more_cap) {
        unsigned cap = t->more_cap ? t->more_cap * 2 : 64;
        dist__held_line *m = cap <= DIST__LOG_HELD_MAX ? (dist__held_line *)DIST_REALLOC(t->more, sizeof *m * cap) : NULL;
        if (!m) {
            t->dropped++;
            t->last.to = *to;
            t->last.level = level;
            return;
        }
        t->more = m;
        t->more_cap = cap;
    }
    h = dist__held_at(t, t->tail);
    n = strlen(msg);
    if (n >= sizeof h->msg) n = sizeof h->msg - 1;
    h->to = *to;
    h->level = level;
    memcpy(h->msg, msg, n);
    h->msg[n] = 0;
    t->tail++;
    if (t->locks == 0) dist__log_write_held();    /* (lines held before it go first) */
}

DIST__PLATFORM void dist__mutex_lock(dist__mutex *m) {
    dist__plat_mutex_lock(m);
    dist__locks.locks++;
}
DIST__PLATFORM int dist__mutex_trylock(dist__mutex *m) {
    if (dist__plat_mutex_trylock(m) != 0) return -1;
    dist__locks.locks++;
    return 0;
}
DIST__PLATFORM void dist__mutex_unlock(dist__mutex *m) {
    dist__plat_mutex_unlock(m);
    /* (tail is 0 whenever nothing is held: lines are dropped only past a full queue) */
    if (--dist__locks.locks == 0 && dist__locks.tail) dist__log_write_held();
}

#endif /* the platform layer */

#if defined(DIST_IMPLEMENTATION) && !defined(DIST__IMPLEMENTATION_DONE)
#define DIST__IMPLEMENTATION_DONE

/* [SECTION] platform: sockets, files, processes, shared memory
   The rest of the platform layer (see "platform: threads, time, atomics,
   host, libraries"), for dist.h's own file, which asks for POSIX and
   Linux's extensions before its first system header:
     time         dist__sleep_ms
     errors       dist__errno, dist__err_* (interrupted, would_block, reset,
                  no_fds, addr_in_use), dist__err_text
     sockets      dist__set_nonblocking/_cloexec, dist__close, byte I/O
                  (dist__sock_recv/_send/_send_nowait/_sendv/_gone/_shutdown),
                  dist__pollfd_*, dist__poll, dist__tune_socket
     addresses    dist__sock_name, dist__ifname_address, dist__default_address,
                  dist__sock_listen/_is_listening/_accept/_connect
     wake-up      dist__wakeup_*: makes a thread blocked in dist__poll return
     shared mem.  dist__shm_*, dist__peer_memory_*
     files        dist__file_replace_locked/_read_locked/_remove (file://)
     processes    dist__process_* (dist_spawn's children: fork semantics)
     host         dist__cpu_count
     randomness   dist__random_fill, dist__random_u64 */
#if defined(_WIN32)
/* Windows: Winsock 2 (WSAPoll; a loopback connection for wake-ups), named
   file mappings, LockFileEx, CreateProcess. */
#include <iphlpapi.h>          /* (its types: the library is loaded when needed) */
typedef SOCKET dist__socket;
#define DIST__NO_SOCKET INVALID_SOCKET
typedef long long dist__ssize;

/* Winsock is started once per process, before its first use here (and
   never stopped: the process's end cleans up). */
static BOOL CALLBACK dist__wsa_start_once(PINIT_ONCE once, PVOID arg, PVOID *ctx) {
    WSADATA w;
    DIST__UNUSED(once); DIST__UNUSED(arg); DIST__UNUSED(ctx);
    return WSAStartup(MAKEWORD(2, 2), &w) == 0;
}
DIST__PLATFORM void dist__net_start(void) {
    static INIT_ONCE once = INIT_ONCE_STATIC_INIT;
    InitOnceExecuteOnce(&once, dist__wsa_start_once, NULL, NULL);
}

DIST__PLATFORM void dist__sleep_ms(int ms) { Sleep(ms < 0 ? 0 : (DWORD)ms); }

/* Errors: Winsock's and Win32's codes (one per thread, WSAGetLastError is
   GetLastError). */
DIST__PLATFORM int dist__errno(void) { return (int)GetLastError(); }
DIST__PLATFORM void dist__set_errno_would_block(void) { SetLastError(WSAEWOULDBLOCK); }
DIST__PLATFORM int dist__err_interrupted(int e) { return e == WSAEINTR; }
DIST__PLATFORM int dist__err_would_block(int e) { return e == WSAEWOULDBLOCK || e == WSAEINPROGRESS; }
DIST__PLATFORM int dist__err_reset(int e) { return e == WSAECONNRESET || e == WSAECONNABORTED; }
DIST__PLATFORM const char *dist__err_text(int e) {
    static DIST__TLS char buf[200];
    return dist__win_error_text((DWORD)e, buf, sizeof buf);
}
DIST__PLATFORM int dist__err_no_fds(int e) { return e == WSAEMFILE || e == WSAENOBUFS || e == ERROR_NOT_ENOUGH_MEMORY; }
DIST__PLATFORM int dist__err_no_fds_kind(int e) { return e == WSAEMFILE ? 1 : 3; }
DIST__PLATFORM long dist__fd_limit(void) { return -1; }
DIST__PLATFORM int dist__err_addr_in_use(int e) { return e == WSAEADDRINUSE || e == WSAEACCES; }
DIST__PLATFORM int dist__err_no_process(int e) { DIST__UNUSED(e); return 0; }

DIST__PLATFORM int dist__set_nonblocking(dist__socket s, int on) {
    u_long m = on ? 1 : 0;
    return ioctlsocket(s, FIONBIO, &m) == 0 ? 0 : -1;
}
DIST__PLATFORM void dist__close(dist__socket s) { if (s != INVALID_SOCKET) closesocket(s); }

typedef WSABUF dist__iov;
#define DIST__IOV_BASE(v) ((v).buf)
#define DIST__IOV_LEN(v)  ((size_t)(v).len)
DIST__PLATFORM void dist__iov_set(dist__iov *v, const void *p, size_t n) { v->buf = (CHAR *)p; v->len = (ULONG)n; }

#define DIST__IO_MAX ((size_t)1 << 30)   /* the most one call moves (Winsock counts in int) */
DIST__PLATFORM dist__ssize dist__sock_recv(dist__socket s, void *buf, size_t len) {
    int n = recv(s, (char *)buf, (int)DIST__MIN(len, DIST__IO_MAX), 0);
    return n == SOCKET_ERROR ? -1 : n;
}
DIST__PLATFORM dist__ssize dist__sock_send(dist__socket s, const void *buf, size_t len) {
    int n = send(s, (const char *)buf, (int)DIST__MIN(len, DIST__IO_MAX), 0);
    return n == SOCKET_ERROR ? -1 : n;
}
/* (every socket that takes this is non-blocking already) */
DIST__PLATFORM dist__ssize dist__sock_send_nowait(dist__socket s, const void *buf, size_t len) { return dist__sock_send(s, buf, len); }
DIST__PLATFORM dist__ssize dist__sock_sendv(dist__socket s, const dist__iov *iov, int n) {
    DWORD sent = 0;
    return WSASend(s, (LPWSABUF)iov, (DWORD)n, &sent, 0, NULL, NULL) == 0 ? (dist__ssize)sent : -1;
}
DIST__PLATFORM int dist__sock_gone(dist__socket s) {
    fd_set rs;
    struct timeval tv = { 0, 0 };
    char c;
    int r, e;
    FD_ZERO(&rs);
    FD_SET(s, &rs);
    r = select(0, &rs, NULL, NULL, &tv);
    if (r <= 0) return r < 0;
    r = recv(s, &c, 1, MSG_PEEK);
    e = r < 0 ? WSAGetLastError() : 0;
    return r == 0 || (r < 0 && e != WSAEWOULDBLOCK && e != WSAEINTR);
}
DIST__PLATFORM void dist__sock_shutdown(dist__socket s) { shutdown(s, SD_BOTH); }

typedef WSAPOLLFD dist__pollfd;
DIST__PLATFORM void dist__pollfd_set(dist__pollfd *p, dist__socket s, int in, int out) {
    p->fd = s; p->events = (SHORT)((in ? POLLRDNORM : 0) | (out ? POLLWRNORM : 0)); p->revents = 0;
}
DIST__PLATFORM dist__socket dist__pollfd_fd(const dist__pollfd *p) { return p->fd; }
DIST__PLATFORM int dist__pollfd_ready(const dist__pollfd *p, int *rd, int *wr) {
    *rd = (p->revents & (POLLRDNORM | POLLRDBAND | POLLERR | POLLHUP)) != 0;
    *wr = (p->revents & (POLLWRNORM | POLLERR | POLLHUP)) != 0;
    return p->revents != 0;
}
/* WSAPoll skips entries whose socket is INVALID_SOCKET, but refuses a set
   with none to wait on: that is a sleep. */
DIST__PLATFORM int dist__poll(dist__pollfd *p, int n, int ms) {
    int any = 0;
    for (int i = 0; i < n; i++) { p[i].revents = 0; any |= p[i].fd != INVALID_SOCKET; }
    if (!any) { if (ms > 0) Sleep((DWORD)ms); return 0; }
    return WSAPoll(p, (ULONG)n, ms);
}

DIST__PLATFORM void dist__tune_socket(dist__socket s) {
    BOOL one = TRUE;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, (const char *)&one, sizeof one);
    setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, (const char *)&one, sizeof one);
}

/* A socket no child process inherits. */
DIST__PLATFORM dist__socket dist__socket_open(int family, int type, int proto) {
    dist__net_start();
    return WSASocketW(family, type, proto, NULL, 0, WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
}

/* The first address of interface `ifname` (its friendly name, as
   ipconfig shows it, or its GUID), as numeric text (iphlpapi, loaded when
   asked). */
typedef ULONG (WINAPI *dist__get_adapters_fn)(ULONG, ULONG, PVOID, PIP_ADAPTER_ADDRESSES, PULONG);
DIST__PLATFORM int dist__ifname_address(const char *ifname, char *host, size_t cap) {
    HMODULE lib = LoadLibraryA("iphlpapi.dll");
    FARPROC f = lib ? GetProcAddress(lib, "GetAdaptersAddresses") : NULL;
    dist__get_adapters_fn get;
    ULONG len = 32768;
    IP_ADAPTER_ADDRESSES *list = NULL, *a;
    int found = -1;
    wchar_t wname[256];
    if (!f) { if (lib) FreeLibrary(lib); return -1; }
    memcpy(&get, &f, sizeof get);
    dist__net_start();
    if (!MultiByteToWideChar(CP_UTF8, 0, ifname, -1, wname, 256)) wname[0] = 0;
    for (int tries = 0; tries < 3; tries++) {
        ULONG r;
        free(list);
        if (!(list = (IP_ADAPTER_ADDRESSES *)malloc(len))) break;
        r = get(AF_UNSPEC, GAA_FLAG_SKIP_ANYCAST | GAA_FLAG_SKIP_MULTICAST | GAA_FLAG_SKIP_DNS_SERVER, NULL, list, &len);
        if (r == ERROR_SUCCESS) break;
        free(list); list = NULL;
        if (r != ERROR_BUFFER_OVERFLOW) break;
    }
    for (int pass = 0; pass < 2 && found != 0 && list; pass++) {     /* IPv4 first, then IPv6 */
        for (a = list; a && found != 0; a = a->Next) {
            if (strcmp(a->AdapterName, ifname) != 0 && (!a->FriendlyName || wcscmp(a->FriendlyName, wname) != 0)) continue;
            for (IP_ADAPTER_UNICAST_ADDRESS *u = a->FirstUnicastAddress; u && found != 0; u = u->Next) {
                int fam = u->Address.lpSockaddr->sa_family;
                if ((pass == 0 && fam != AF_INET) || (pass == 1 && fam != AF_INET6)) continue;
                if (getnameinfo(u->Address.lpSockaddr, u->Address.iSockaddrLength, host, (DWORD)cap, NULL, 0, NI_NUMERICHOST) == 0) found = 0;
            }
        }
    }
    free(list);
    FreeLibrary(lib);
    return found;
}

/* The first non-loopback IPv4 address of this host's name, else 127.0.0.1. */
DIST__PLATFORM void dist__default_address(char *host, size_t cap) {
    char name[256];
    struct addrinfo hints, *res = NULL, *ai;
    snprintf(host, cap, "127.0.0.1");
    dist__net_start();
    if (gethostname(name, sizeof name) != 0) return;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(name, NULL, &hints, &res) != 0) return;
    for (ai = res; ai; ai = ai->ai_next) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;
        if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
        if (getnameinfo(ai->ai_addr, (socklen_t)ai->ai_addrlen, host, (DWORD)cap, NULL, 0, NI_NUMERICHOST) == 0) break;
    }
    freeaddrinfo(res);
}

/* A socket bound to ai's address and listening, the port this socket's
   alone (SO_EXCLUSIVEADDRUSE: on Windows SO_REUSEADDR would let another
   process bind it too); DIST__NO_SOCKET with the error in dist__errno(). */
DIST__PLATFORM dist__socket dist__sock_bind_listen(const struct addrinfo *ai) {
    BOOL one = TRUE;
    int err;
    dist__socket s = dist__socket_open(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (s == INVALID_SOCKET) return DIST__NO_SOCKET;
    setsockopt(s, SOL_SOCKET, SO_EXCLUSIVEADDRUSE, (const char *)&one, sizeof one);
    if (bind(s, ai->ai_addr, (int)ai->ai_addrlen) == 0 && listen(s, SOMAXCONN) == 0) return s;
    err = WSAGetLastError();
    closesocket(s);
    SetLastError((DWORD)err);
    return DIST__NO_SOCKET;
}
DIST__PLATFORM void dist__set_errno(int e) { SetLastError((DWORD)e); }

/* (Wine answers SO_ACCEPTCONN on an inherited socket with an error: then
   a bound socket without a peer passes, and accept would say the rest.) */
DIST__PLATFORM int dist__sock_is_listening(dist__socket s) {
    struct sockaddr_storage a;
    BOOL acc = FALSE;
    int len = sizeof acc, alen = sizeof a;
    dist__net_start();
    if (getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, (char *)&acc, &len) == 0) return acc != 0;
    if (getsockname(s, (struct sockaddr *)&a, &alen) != 0) return 0;
    alen = sizeof a;
    return getpeername(s, (struct sockaddr *)&a, &alen) != 0 && WSAGetLastError() == WSAENOTCONN;
}

DIST__PLATFORM dist__socket dist__sock_accept(dist__socket ls) {
    dist__socket s = accept(ls, NULL, NULL);
    if (s == INVALID_SOCKET) return DIST__NO_SOCKET;
    SetHandleInformation((HANDLE)s, HANDLE_FLAG_INHERIT, 0);
    dist__set_nonblocking(s, 1);
    dist__tune_socket(s);
    return s;
}

DIST__PLATFORM dist__socket dist__connect_once(const struct addrinfo *ai, int ms) {
    dist__socket s = dist__socket_open(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int err = 0, elen = sizeof err;
    if (s == INVALID_SOCKET) return DIST__NO_SOCKET;
    dist__set_nonblocking(s, 1);
    if (connect(s, ai->ai_addr, (int)ai->ai_addrlen) != 0) {
        fd_set ws, es;
        struct timeval tv;
        if ((err = WSAGetLastError()) != WSAEWOULDBLOCK) { closesocket(s); SetLastError((DWORD)err); return DIST__NO_SOCKET; }
        FD_ZERO(&ws); FD_SET(s, &ws); FD_ZERO(&es); FD_SET(s, &es);
        tv.tv_sec = ms / 1000; tv.tv_usec = (ms % 1000) * 1000;
        /* (a refused connection shows in the exception set) */
        if (select(0, NULL, &ws, &es, &tv) <= 0) { closesocket(s); SetLastError(WSAETIMEDOUT); return DIST__NO_SOCKET; }
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, (char *)&err, &elen) != 0 || err != 0 || FD_ISSET(s, &es)) {
            closesocket(s); SetLastError(err ? (DWORD)err : WSAECONNREFUSED); return DIST__NO_SOCKET;
        }
    }
    dist__tune_socket(s);
    return s;
}

/* A wake-up channel: a loopback connection to ourselves (Windows has no
   pipe that WSAPoll waits on). */
typedef struct dist__wakeup { dist__socket rfd, wfd; } dist__wakeup;

DIST__PLATFORM int dist__wakeup_open(dist__wakeup *w) {
    struct sockaddr_in a, b, c;
    int len = sizeof a;
    dist__socket ls = dist__socket_open(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    w->rfd = w->wfd = INVALID_SOCKET;
    if (ls == INVALID_SOCKET) return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 || getsockname(ls, (struct sockaddr *)&a, &len) != 0 ||
        (w->wfd = dist__socket_open(AF_INET, SOCK_STREAM, IPPROTO_TCP)) == INVALID_SOCKET ||
        connect(w->wfd, (struct sockaddr *)&a, sizeof a) != 0)
        goto fail;
    len = sizeof b;
    if (getsockname(w->wfd, (struct sockaddr *)&b, &len) != 0) goto fail;
    for (int tries = 0; tries < 8; tries++) {          /* ours, not a stranger's that got there first */
        len = sizeof c;
        w->rfd = accept(ls, (struct sockaddr *)&c, &len);
        if (w->rfd == INVALID_SOCKET) goto fail;
        if (c.sin_port == b.sin_port && c.sin_addr.s_addr == b.sin_addr.s_addr) break;
        closesocket(w->rfd);
        w->rfd = INVALID_SOCKET;
    }
    if (w->rfd == INVALID_SOCKET) goto fail;
    SetHandleInformation((HANDLE)w->rfd, HANDLE_FLAG_INHERIT, 0);
    closesocket(ls);
    dist__set_nonblocking(w->rfd, 1);
    dist__set_nonblocking(w->wfd, 1);
    dist__tune_socket(w->wfd);
    return 0;
fail:
    closesocket(ls);
    dist__close(w->wfd);
    dist__close(w->rfd);
    w->rfd = w->wfd = INVALID_SOCKET;
    return -1;
}
DIST__PLATFORM void dist__wakeup_signal(dist__wakeup *w) { send(w->wfd, "w", 1, 0); }   /* full: a wake-up is pending anyway */
DIST__PLATFORM void dist__wakeup_drain(dist__wakeup *w) {
    char buf[64];
    while (recv(w->rfd, buf, sizeof buf, 0) > 0) {}
}
DIST__PLATFORM void dist__wakeup_close(dist__wakeup *w) {
    dist__close(w->rfd);
    dist__close(w->wfd);
    w->rfd = w->wfd = INVALID_SOCKET;
}

/* Shared memory: a named file mapping in this session's Local\ namespace,
   backed by the paging file; the name goes with the last handle, the
   memory with the last view, so nothing outlives the processes. */
#define DIST__SHM_NAME 48
typedef struct dist__shm_file { HANDLE h; char name[DIST__SHM_NAME]; } dist__shm_file;
DIST__PLATFORM void dist__shm_file_clear(dist__shm_file *f) { f->h = NULL; f->name[0] = 0; }

DIST__PLATFORM void *dist__shm_create(dist__shm_file *f, size_t size) {
    void *m = NULL;
    dist__shm_file_clear(f);
    for (int tries = 0; tries < 8 && !f->h; tries++) {
        uint32_t rnd = (uint32_t)dist__now_ns() ^ (uint32_t)((uintptr_t)f >> 4) ^ (uint32_t)tries * 0x9e3779b9u;
        snprintf(f->name, sizeof f->name, "Local\\dist.%lu.%08x", (unsigned long)GetCurrentProcessId(), (unsigned)rnd);
        f->h = CreateFileMappingA(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE, (DWORD)((uint64_t)size >> 32), (DWORD)size, f->name);
        if (f->h && GetLastError() == ERROR_ALREADY_EXISTS) { CloseHandle(f->h); f->h = NULL; }
        else if (!f->h) break;
    }
    if (f->h && !(m = MapViewOfFile(f->h, FILE_MAP_ALL_ACCESS, 0, 0, size))) {
        DWORD err = GetLastError();
        CloseHandle(f->h);
        SetLastError(err);
    }
    if (!m) dist__shm_file_clear(f);
    return m;
}
DIST__PLATFORM void dist__shm_unname(dist__shm_file *f) {
    if (f->h) CloseHandle(f->h);
    dist__shm_file_clear(f);
}
DIST__PLATFORM void *dist__shm_attach(const char *name, size_t size) {
    MEMORY_BASIC_INFORMATION mi;
    HANDLE h;
    void *m;
    if (!memchr(name, 0, DIST__SHM_NAME) || strncmp(name, "Local\\dist.", 11) != 0) return NULL;
    if (!(h = OpenFileMappingA(FILE_MAP_ALL_ACCESS, FALSE, name))) return NULL;
    m = MapViewOfFile(h, FILE_MAP_ALL_ACCESS, 0, 0, size);        /* fails when the mapping is shorter */
    CloseHandle(h);
    if (m && (VirtualQuery(m, &mi, sizeof mi) != sizeof mi || mi.RegionSize < size)) { UnmapViewOfFile(m); m = NULL; }
    return m;
}
DIST__PLATFORM void dist__shm_unmap(void *p, size_t size) { DIST__UNUSED(size); UnmapViewOfFile(p); }

/* No cross-process heavy fence, no reading another process's memory
   here: both sides fence, and payloads stream through the rings. */
DIST__PLATFORM int dist__heavy_fence_init(void) { return 0; }
DIST__PLATFORM int dist__heavy_fence(void) { return 0; }
DIST__PLATFORM dist__ssize dist__peer_memory_copy(int pid, void *local, uint64_t addr, size_t len, int write) {
    DIST__UNUSED(pid); DIST__UNUSED(local); DIST__UNUSED(addr); DIST__UNUSED(len); DIST__UNUSED(write);
    SetLastError(ERROR_NOT_SUPPORTED);
    return -1;
}

/* Small files under a whole-file lock (LockFileEx), for file://. */
DIST__PLATFORM HANDLE dist__file_open_locked(const char *path, int write, int64_t deadline_ms) {
    HANDLE h = CreateFileA(path, write ? GENERIC_READ | GENERIC_WRITE : GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           NULL, write ? OPEN_ALWAYS : OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    OVERLAPPED ov;
    if (h == INVALID_HANDLE_VALUE) return NULL;
    for (;;) {
        memset(&ov, 0, sizeof ov);
        if (LockFileEx(h, (write ? LOCKFILE_EXCLUSIVE_LOCK : 0) | LOCKFILE_FAIL_IMMEDIATELY, 0, MAXDWORD, MAXDWORD, &ov)) return h;
        if (GetLastError() != ERROR_LOCK_VIOLATION || dist__now_ms() >= deadline_ms) { CloseHandle(h); return INVALID_HANDLE_VALUE; }
        Sleep(5);
    }
}
DIST__PLATFORM int dist__file_replace_locked(const char *path, const void *data, size_t n, int64_t deadline_ms,
                                             int (*keep)(const char *old, size_t len, void *arg), void *arg) {
    char old[512];
    DWORD got = 0, put = 0;
    HANDLE h = dist__file_open_locked(path, 1, deadline_ms);
    if (!h) return -1;
    if (h == INVALID_HANDLE_VALUE) return -2;
    if (keep && ReadFile(h, old, sizeof old - 1, &got, NULL) && got > 0) {
        old[got] = 0;
        if (keep(old, (size_t)got, arg)) { CloseHandle(h); return -3; }
    }
    if (SetFilePointer(h, 0, NULL, FILE_BEGIN) == INVALID_SET_FILE_POINTER || !SetEndOfFile(h) ||
        !WriteFile(h, data, (DWORD)n, &put, NULL) || put != n) {
        DWORD err = GetLastError();
        CloseHandle(h);
        SetLastError(err);
        return -2;
    }
    FlushFileBuffers(h);
    CloseHandle(h);           /* releases the lock */
    return 0;
}
DIST__PLATFORM dist__ssize dist__file_read_locked(const char *path, void *buf, size_t cap, int64_t deadline_ms) {
    DWORD got = 0;
    HANDLE h = dist__file_open_locked(path, 0, deadline_ms);
    dist__ssize n = -1;
    if (!h || h == INVALID_HANDLE_VALUE) return -1;
    if (ReadFile(h, buf, (DWORD)DIST__MIN(cap, DIST__IO_MAX), &got, NULL)) n = (dist__ssize)got;
    CloseHandle(h);
    return n;
}
DIST__PLATFORM void dist__file_remove(const char *path) { DeleteFileA(path); }
DIST__PLATFORM int dist__make_dir(const char *path) { return CreateDirectoryA(path, NULL) || GetLastError() == ERROR_ALREADY_EXISTS ? 0 : -1; }
/* A file to write (DIST_TRACE's); NULL with the reason. */
DIST__PLATFORM FILE *dist__file_create(const char *path, char *why, size_t cap) {
    FILE *f = NULL;
#ifdef _MSC_VER
    int e = (int)fopen_s(&f, path, "w");
#else
    int e = (f = fopen(path, "w")) == NULL ? errno : 0;
#endif
    if (!f) {
#ifdef _MSC_VER
        strerror_s(why, cap, e);
#else
        snprintf(why, cap, "%s", strerror(e));
#endif
    }
    return f;
}

/* Child processes (dist_spawn).  Windows cannot fork: a child is this
   program started again (the same executable and command line), told by
   an environment variable which rank it is, as Python's multiprocessing
   "spawn" start method does (see dist_spawn).  Every child is in a job
   object that kills it when the parent ends.  Its report pipe's writing
   end is inherited and named in that variable. */
typedef HANDLE dist__fd;
#define DIST__NO_FD NULL
typedef struct dist__process { HANDLE h; dist__fd report; int stopped; } dist__process;   /* h NULL: none, or reaped */
#define DIST__SPAWN_REEXEC 1

DIST__PLATFORM void dist__process_clear(dist__process *p) { p->h = NULL; p->report = NULL; p->stopped = 0; }

/* Starts this program again with `var`=`value` " report=N" added to its
   environment (N: the inherited writing end of its report pipe, for
   dist__fd_parse) and socket `keep` (if any) inherited.  1, with `p` set;
   -1 when it could not start. */
DIST__PLATFORM int dist__process_start_self(dist__process *p, const char *var, const char *value, dist__socket keep) {
    static HANDLE job;                   /* every child of this process's dist_spawn calls: they die with it */
    SECURITY_ATTRIBUTES sa;
    STARTUPINFOEXA si;
    PROCESS_INFORMATION pi;
    HANDLE rd = NULL, wr = NULL, inherit[4];
    char exe[MAX_PATH * 2], text[600], *cmd = NULL;
    SIZE_T attr_len = 0;
    DWORD ninherit = 0;
    int ok = 0;
    dist__process_clear(p);
    if (!job && (job = CreateJobObjectA(NULL, NULL)) != NULL) {
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION li;
        memset(&li, 0, sizeof li);
        li.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        SetInformationJobObject(job, JobObjectExtendedLimitInformation, &li, sizeof li);
    }
    memset(&sa, 0, sizeof sa);
    sa.nLength = sizeof sa;
    sa.bInheritHandle = TRUE;
    if (!GetModuleFileNameA(NULL, exe, sizeof exe) || !CreatePipe(&rd, &wr, &sa, 0)) goto done;
    SetHandleInformation(rd, HANDLE_FLAG_INHERIT, 0);
    snprintf(text, sizeof text, "%s report=%llu", value, (unsigned long long)(uintptr_t)wr);
    if (!SetEnvironmentVariableA(var, text)) goto done;       /* (the child's copy of our environment has it) */
    if (!(cmd = _strdup(GetCommandLineA()))) goto done;
    memset(&si, 0, sizeof si);
    si.StartupInfo.cb = sizeof si;
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.StartupInfo.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
    si.StartupInfo.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    inherit[ninherit++] = wr;
    if (keep != DIST__NO_SOCKET) { SetHandleInformation((HANDLE)keep, HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT); inherit[ninherit++] = (HANDLE)keep; }
    for (int i = 0; i < 2; i++) {      /* the standard handles, where they are real and inheritable */
        HANDLE s = i ? si.StartupInfo.hStdError : si.StartupInfo.hStdOutput;
        DWORD fl;
        if (s && s != INVALID_HANDLE_VALUE && GetHandleInformation(s, &fl) && (fl & HANDLE_FLAG_INHERIT) && (i == 0 || s != inherit[ninherit - 1]))
            inherit[ninherit++] = s;
    }
    /* Only these handles go to the child (not a sibling's report pipe). */
    InitializeProcThreadAttributeList(NULL, 1, 0, &attr_len);
    si.lpAttributeList = (LPPROC_THREAD_ATTRIBUTE_LIST)malloc(attr_len);
    if (si.lpAttributeList && InitializeProcThreadAttributeList(si.lpAttributeList, 1, 0, &attr_len)) {
        if (!UpdateProcThreadAttribute(si.lpAttributeList, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherit, ninherit * sizeof(HANDLE), NULL, NULL)) {
            DeleteProcThreadAttributeList(si.lpAttributeList);
            free(si.lpAttributeList);
            si.lpAttributeList = NULL;
        }
    } else {
        free(si.lpAttributeList);
        si.lpAttributeList = NULL;
    }
    ok = CreateProcessA(exe, cmd, NULL, NULL, TRUE, CREATE_SUSPENDED | (si.lpAttributeList ? EXTENDED_STARTUPINFO_PRESENT : 0), NULL, NULL,
                        &si.StartupInfo, &pi) != 0;
    if (si.lpAttributeList) { DeleteProcThreadAttributeList(si.lpAttributeList); free(si.lpAttributeList); }
    if (keep != DIST__NO_SOCKET) SetHandleInformation((HANDLE)keep, HANDLE_FLAG_INHERIT, 0);
    if (ok) {
        if (job) AssignProcessToJobObject(job, pi.hProcess);
        ResumeThread(pi.hThread);
        CloseHandle(pi.hThread);
        p->h = pi.hProcess;
        p->report = rd;
        rd = NULL;
    }
done:
    SetEnvironmentVariableA(var, NULL);
    free(cmd);
    if (wr) CloseHandle(wr);
    if (rd) CloseHandle(rd);
    return ok ? 1 : -1;
}

/* Removes a variable from this process's environment (both copies). */
DIST__PLATFORM void dist__unsetenv(const char *name) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s=", name);
    _putenv(buf);
    SetEnvironmentVariableA(name, NULL);
}

/* The handle a parent named in text (" report=N"). */
DIST__PLATFORM dist__fd dist__fd_parse(const char *text) {
    const char *r = strstr(text, " report=");
    return r ? (dist__fd)(uintptr_t)strtoull(r + 8, NULL, 10) : DIST__NO_FD;
}

DIST__PLATFORM void dist__process_release(dist__process *p) {
    if (p->report) CloseHandle(p->report);
    p->report = NULL;
}
/* (the job object ends a child with its parent) */
DIST__PLATFORM void dist__process_die_with_parent(void) {}
DIST__PLATFORM void dist__process_report(dist__fd report, const char *text) {
    DWORD put;
    if (report) WriteFile(report, text, (DWORD)strlen(text), &put, NULL);
}
DIST__PLATFORM void dist__process_exit(dist__fd report, int code) {
    if (report) CloseHandle(report);
    fflush(NULL);
    _Exit(code & 0xff);
}
DIST__PLATFORM int dist__process_running(const dist__process *p) { return p->h != NULL; }
DIST__PLATFORM int dist__process_reap(dist__process *p, int *code, int *killed) {
    DWORD c = 0;
    if (!p->h || WaitForSingleObject(p->h, 0) != WAIT_OBJECT_0) return 0;
    GetExitCodeProcess(p->h, &c);
    CloseHandle(p->h);
    p->h = NULL;
    *killed = p->stopped;
    *code = p->stopped ? 128 + 9 : (int)(c & 0xff);
    return 1;
}
DIST__PLATFORM void dist__process_read_report(const dist__process *p, char *buf, size_t cap) {
    DWORD avail = 0, got = 0;
    buf[0] = 0;
    if (p->report && PeekNamedPipe(p->report, NULL, 0, NULL, &avail, NULL) && avail > 0 &&
        ReadFile(p->report, buf, (DWORD)DIST__MIN((size_t)avail, cap - 1), &got, NULL))
        buf[got] = 0;
}
/* Windows has no polite request to end: both ways end it. */
DIST__PLATFORM void dist__process_stop(dist__process *p, int hard) {
    DIST__UNUSED(hard);
    if (p->h && WaitForSingleObject(p->h, 0) == WAIT_TIMEOUT && TerminateProcess(p->h, 128 + 9)) p->stopped = 1;
}
DIST__PLATFORM void dist__process_wait(const dist__process *procs, int n, int ms) {
    HANDLE hs[MAXIMUM_WAIT_OBJECTS];
    DWORD nh = 0;
    for (int i = 0; i < n && nh < MAXIMUM_WAIT_OBJECTS; i++) if (procs[i].h) hs[nh++] = procs[i].h;
    if (nh) WaitForMultipleObjects(nh, hs, FALSE, (DWORD)(ms < 0 ? 0 : ms));
    else Sleep((DWORD)(ms < 0 ? 0 : ms));
}

DIST__PLATFORM int dist__cpu_count(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors > 0 ? (int)si.dwNumberOfProcessors : 1;
}

/* The system's random source (RtlGenRandom, advapi32's SystemFunction036,
   loaded when first asked). */
typedef BOOLEAN (WINAPI *dist__gen_random_fn)(PVOID, ULONG);
DIST__PLATFORM size_t dist__random_fill(uint8_t *out, size_t n) {
    HMODULE lib = LoadLibraryA("advapi32.dll");
    FARPROC f = lib ? GetProcAddress(lib, "SystemFunction036") : NULL;
    dist__gen_random_fn gen;
    size_t got = 0;
    if (f) {
        memcpy(&gen, &f, sizeof gen);
        if (gen(out, (ULONG)n)) got = n;
    }
    if (lib) FreeLibrary(lib);
    return got;
}

#else /* POSIX */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <ifaddrs.h>
#include <sys/resource.h>
#include <net/if.h>
#include <sys/mman.h>
#ifdef DIST__LINUX
#  include <sys/eventfd.h>
#  include <sys/prctl.h>
#  include <sys/syscall.h>
#endif
#ifndef MSG_NOSIGNAL
#  define MSG_NOSIGNAL 0
#endif

typedef int dist__socket;
#define DIST__NO_SOCKET (-1)
/* A byte count or -1 (the result of a read or a write). */
typedef ssize_t dist__ssize;
DIST__PLATFORM int dist__same_host_socket(dist__socket s);

DIST__PLATFORM void dist__sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Errors of the last system call, by class. */
DIST__PLATFORM int dist__errno(void) { return errno; }
DIST__PLATFORM void dist__set_errno_would_block(void) { errno = EAGAIN; }
DIST__PLATFORM int dist__err_interrupted(int e) { return e == EINTR; }
DIST__PLATFORM int dist__err_would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK; }
DIST__PLATFORM int dist__err_reset(int e) { return e == ECONNRESET; }
DIST__PLATFORM const char *dist__err_text(int e) { return strerror(e); }
/* Out of descriptors or memory (accept cannot take a connection now). */
DIST__PLATFORM int dist__err_no_fds(int e) { return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM; }
/* ...and which: this process's descriptor limit (1), the system's (2),
   memory (3). */
DIST__PLATFORM int dist__err_no_fds_kind(int e) { return e == EMFILE ? 1 : e == ENFILE ? 2 : 3; }
/* This process's limit on open descriptors (ulimit -n; -1: none known). */
DIST__PLATFORM long dist__fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
    return (long)rl.rlim_cur;
}
DIST__PLATFORM int dist__err_addr_in_use(int e) { return e == EADDRINUSE; }
/* The process named in a call is gone (reading its memory). */
DIST__PLATFORM int dist__err_no_process(int e) { return e == ESRCH; }

DIST__PLATFORM int dist__set_nonblocking(dist__socket s, int on) {
    int fl = fcntl(s, F_GETFL, 0);
    if (fl < 0) return -1;
    return fcntl(s, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

DIST__PLATFORM void dist__set_cloexec(int fd) {
    int fl = fcntl(fd, F_GETFD, 0);
    if (fl >= 0) fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
}

DIST__PLATFORM void dist__close(dist__socket s) { if (s >= 0) close(s); }

/* Byte I/O on a non-blocking socket: like recv()/send()/sendmsg(), never
   raising SIGPIPE. */
typedef struct iovec dist__iov;
#define DIST__IOV_BASE(v) ((v).iov_base)
#define DIST__IOV_LEN(v)  ((v).iov_len)
DIST__PLATFORM void dist__iov_set(dist__iov *v, const void *p, size_t n) { v->iov_base = (void *)p; v->iov_len = n; }

DIST__PLATFORM dist__ssize dist__sock_recv(dist__socket s, void *buf, size_t len) { return recv(s, buf, len, 0); }
/* As the socket is set (dist__set_nonblocking: it does not wait). */
DIST__PLATFORM dist__ssize dist__sock_send(dist__socket s, const void *buf, size_t len) { return send(s, buf, len, MSG_NOSIGNAL); }
DIST__PLATFORM dist__ssize dist__sock_send_nowait(dist__socket s, const void *buf, size_t len) { return send(s, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL); }
DIST__PLATFORM dist__ssize dist__sock_sendv(dist__socket s, const dist__iov *iov, int n) {
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = (struct iovec *)iov;
    mh.msg_iovlen = (size_t)n;
    return sendmsg(s, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}
/* 1 when the peer of connected socket `s` closed it or the connection
   failed; 0 while it is open (peeks without waiting, consumes nothing). */
DIST__PLATFORM int dist__sock_gone(dist__socket s) {
    char c;
    dist__ssize r = recv(s, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}
/* Ends both directions of `s`: calls blocked on it, on any thread, return. */
DIST__PLATFORM void dist__sock_shutdown(dist__socket s) { shutdown(s, SHUT_RDWR); }

/* Waiting for sockets (an entry for DIST__NO_SOCKET is skipped). */
typedef struct pollfd dist__pollfd;
DIST__PLATFORM void dist__pollfd_set(dist__pollfd *p, dist__socket s, int in, int out) {
    p->fd = s; p->events = (short)((in ? POLLIN : 0) | (out ? POLLOUT : 0)); p->revents = 0;
}
DIST__PLATFORM dist__socket dist__pollfd_fd(const dist__pollfd *p) { return p->fd; }
/* Anything to report?  rd: readable, closed or failed; wr: writable or failed. */
DIST__PLATFORM int dist__pollfd_ready(const dist__pollfd *p, int *rd, int *wr) {
    *rd = (p->revents & (POLLIN | POLLERR | POLLHUP)) != 0;
    *wr = (p->revents & (POLLOUT | POLLERR)) != 0;
    return p->revents != 0;
}
DIST__PLATFORM int dist__poll(dist__pollfd *p, int n, int ms) { return poll(p, (nfds_t)n, ms); }

DIST__PLATFORM void dist__tune_socket(dist__socket s) {
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#ifdef SO_NOSIGPIPE
    setsockopt(s, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
#if defined(DIST__LINUX) && defined(TCP_CONGESTION)
    /* A connection that never leaves this host has no network to share, so
       congestion control only costs it.  Under BBR (a common server
       default) the kernel paces such a connection with a timer every few
       packets and caps its window near a few-microsecond round trip:
       62,000 pacing timers in 2 s of 4-rank all_reduce, and 4 MiB took
       3.7 ms against 2.1 ms with Reno (always permitted to any user). */
    if (dist__same_host_socket(s)) setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, "reno", 4);
#endif
}

/* Addresses, listening, accepting, connecting.  Hosts are numeric text or
   names, ports ints; `why` gets a sentence when something fails. */

/* The first address of interface `ifname`, as numeric text. */
DIST__PLATFORM int dist__ifname_address(const char *ifname, char *host, size_t cap) {
    struct ifaddrs *ifs, *it;
    int found = -1;
    if (getifaddrs(&ifs) != 0) return -1;
    for (int pass = 0; pass < 2 && found != 0; pass++) {   /* IPv4 first, then IPv6 */
        for (it = ifs; it && found != 0; it = it->ifa_next) {
            int fam;
            if (!it->ifa_addr || strcmp(it->ifa_name, ifname) != 0) continue;
            fam = it->ifa_addr->sa_family;
            if ((pass == 0 && fam != AF_INET) || (pass == 1 && fam != AF_INET6)) continue;
            if (getnameinfo(it->ifa_addr, fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6),
                            host, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) == 0) found = 0;
        }
    }
    freeifaddrs(ifs);
    return found;
}

/* The first non-loopback IPv4 address of this host, else 127.0.0.1. */
DIST__PLATFORM void dist__default_address(char *host, size_t cap) {
    struct ifaddrs *ifs, *it;
    snprintf(host, cap, "127.0.0.1");
    if (getifaddrs(&ifs) != 0) return;
    for (it = ifs; it; it = it->ifa_next) {
        if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET || (it->ifa_flags & IFF_LOOPBACK)) continue;
        if (!(it->ifa_flags & IFF_UP)) continue;
        if (getnameinfo(it->ifa_addr, sizeof(struct sockaddr_in), host, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) == 0) break;
    }
    freeifaddrs(ifs);
}

/* A socket bound to ai's address and listening (SO_REUSEADDR: a port
   left in TIME_WAIT can be taken again); DIST__NO_SOCKET with the error in
   dist__errno(). */
DIST__PLATFORM dist__socket dist__sock_bind_listen(const struct addrinfo *ai) {
    int one = 1, err;
    dist__socket s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (s < 0) return DIST__NO_SOCKET;
    dist__set_cloexec(s);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, 4096) == 0) return s;
    err = errno;
    close(s);
    errno = err;
    return DIST__NO_SOCKET;
}
DIST__PLATFORM void dist__set_errno(int e) { errno = e; }
/* (Windows starts Winsock here; POSIX has nothing to start) */
DIST__PLATFORM void dist__net_start(void) {}

/* 1 when `s` is a listening socket (one a parent process handed down). */
DIST__PLATFORM int dist__sock_is_listening(dist__socket s) {
    int acc = 0;
    socklen_t len = sizeof acc;
    return getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) == 0 && acc;
}

/* A connection waiting on listening socket `ls`, made non-blocking and
   tuned; DIST__NO_SOCKET when there is none or accepting failed (the
   error in dist__errno(): dist__err_no_fds says out of descriptors). */
DIST__PLATFORM dist__socket dist__sock_accept(dist__socket ls) {
    dist__socket s = accept(ls, NULL, NULL);
    if (s < 0) return DIST__NO_SOCKET;
    dist__set_cloexec(s);
    dist__set_nonblocking(s, 1);
    dist__tune_socket(s);
    return s;
}

/* One non-blocking connect attempt bounded by `ms`.  Returns the socket or
   DIST__NO_SOCKET with errno set. */
DIST__PLATFORM dist__socket dist__connect_once(const struct addrinfo *ai, int ms) {
    dist__socket s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int err = 0;
    socklen_t elen = sizeof err;
    if (s < 0) return DIST__NO_SOCKET;
    dist__set_cloexec(s);
    dist__set_nonblocking(s, 1);
    if (connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
        struct pollfd pfd = { s, POLLOUT, 0 };
        if (errno != EINPROGRESS) { err = errno; close(s); errno = err; return DIST__NO_SOCKET; }
        if (poll(&pfd, 1, ms) <= 0) { close(s); errno = ETIMEDOUT; return DIST__NO_SOCKET; }
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
            close(s); errno = err ? err : ECONNREFUSED; return DIST__NO_SOCKET;
        }
    }
    dist__tune_socket(s);
    return s;
}

/* A wake-up channel that makes a thread blocked in poll() return. */
typedef struct dist__wakeup { int rfd, wfd; } dist__wakeup;

DIST__PLATFORM int dist__wakeup_open(dist__wakeup *w) {
#ifdef DIST__LINUX
    w->rfd = w->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return w->rfd < 0 ? -1 : 0;
#else
    int p[2];
    if (pipe(p) != 0) return -1;
    dist__set_nonblocking(p[0], 1); dist__set_nonblocking(p[1], 1);
    dist__set_cloexec(p[0]); dist__set_cloexec(p[1]);
    w->rfd = p[0]; w->wfd = p[1];
    return 0;
#endif
}
DIST__PLATFORM void dist__wakeup_signal(dist__wakeup *w) {
    uint64_t one = 1;
    ssize_t r = write(w->wfd, &one, w->rfd == w->wfd ? 8 : 1);
    DIST__UNUSED(r);
}
DIST__PLATFORM void dist__wakeup_drain(dist__wakeup *w) {
    uint64_t buf[8];
    while (read(w->rfd, buf, sizeof buf) > 0) {}
}
DIST__PLATFORM void dist__wakeup_close(dist__wakeup *w) {
    if (w->rfd >= 0) close(w->rfd);
    if (w->wfd >= 0 && w->wfd != w->rfd) close(w->wfd);
    w->rfd = w->wfd = -1;
}

/* Shared memory between the processes of one host: a segment one process
   creates, maps and names, and the others map by that name until its
   creator takes the name away (dist__shm_unname; the memory lives on as
   long as any mapping).  A name is text of at most DIST__SHM_NAME - 1
   bytes.  Linux: an anonymous file (memfd: nothing in /dev/shm, nothing
   left behind by a killed process), named by its /proc path.  Elsewhere: a
   POSIX shm_open object, /dist.PID.RANDOM, unlinked once the peers mapped
   it (a process killed in between leaves it in the system's shared-memory
   directory).  Windows would use a named file mapping. */
#define DIST__SHM_NAME 48
typedef struct dist__shm_file { int fd; char name[DIST__SHM_NAME]; } dist__shm_file;
DIST__PLATFORM void dist__shm_file_clear(dist__shm_file *f) { f->fd = -1; f->name[0] = 0; }

/* Creates and maps a segment of `size` bytes into f; its base, or NULL
   (the error in dist__errno()). */
DIST__PLATFORM void *dist__shm_create(dist__shm_file *f, size_t size) {
    void *m;
    f->fd = -1;
    f->name[0] = 0;
#if defined(DIST__LINUX) && defined(SYS_memfd_create)
    f->fd = (int)syscall(SYS_memfd_create, "dist-shm", 1u /* MFD_CLOEXEC */);
    if (f->fd >= 0) snprintf(f->name, sizeof f->name, "/proc/%d/fd/%d", (int)getpid(), f->fd);
#elif !defined(DIST__LINUX)
    for (int tries = 0; tries < 8 && f->fd < 0; tries++) {
        uint32_t rnd = (uint32_t)dist__now_ns() ^ (uint32_t)((uintptr_t)f >> 4) ^ (uint32_t)tries * 0x9e3779b9u;
        snprintf(f->name, sizeof f->name, "/dist.%d.%08x", (int)getpid(), (unsigned)rnd);
        f->fd = shm_open(f->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (f->fd < 0 && errno != EEXIST) break;
    }
    if (f->fd >= 0) dist__set_cloexec(f->fd);
#else
    errno = ENOSYS;
#endif
    if (f->fd < 0) { f->name[0] = 0; return NULL; }
    if (ftruncate(f->fd, (off_t)size) != 0 ||
        (m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0)) == MAP_FAILED) {
        int err = errno;
#ifndef DIST__LINUX
        shm_unlink(f->name);
#endif
        close(f->fd);
        f->fd = -1; f->name[0] = 0;
        errno = err;
        return NULL;
    }
    return m;
}

/* Takes f's name away: nobody maps it from now on. */
DIST__PLATFORM void dist__shm_unname(dist__shm_file *f) {
#ifndef DIST__LINUX
    if (f->name[0]) shm_unlink(f->name);
#endif
    if (f->fd >= 0) close(f->fd);
    f->fd = -1; f->name[0] = 0;
}

/* Maps another process's segment, by the name it gave: NULL unless the
   name is one this platform makes and the segment has at least `size`
   bytes (pages past its end would fault when touched). */
DIST__PLATFORM void *dist__shm_attach(const char *name, size_t size) {
    struct stat st;
    void *m = NULL;
    int fd = -1;
    if (!memchr(name, 0, DIST__SHM_NAME)) return NULL;
#ifdef DIST__LINUX
    if (strncmp(name, "/proc/", 6) == 0) fd = open(name, O_RDWR | O_CLOEXEC);
#else
    if (strncmp(name, "/dist.", 6) == 0 && !strchr(name + 1, '/')) fd = shm_open(name, O_RDWR, 0600);
#endif
    if (fd < 0) return NULL;
    if (fstat(fd, &st) == 0 && st.st_size >= 0 && (uint64_t)st.st_size >= (uint64_t)size) {
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) m = NULL;
    }
    close(fd);
    return m;
}
DIST__PLATFORM void dist__shm_unmap(void *p, size_t size) { munmap(p, size); }

/* Heavy fences (Linux's membarrier): dist__heavy_fence makes every running
   thread of each process that called dist__heavy_fence_init pass a full
   barrier.  A rank about to sleep calls it, so the ranks that wake
   sleepers need no fence of their own between their store and their look
   at the sleeper's flag (the fast path).  dist__heavy_fence_init returns 1
   when this works here; elsewhere both sides fence. */
#if defined(DIST__LINUX) && defined(SYS_membarrier)
DIST__PLATFORM int dist__heavy_fence_init(void) {
    long q = syscall(SYS_membarrier, 0 /* QUERY */, 0, 0);
    if (q < 0 || !(q & 2) || !(q & 4)) return 0;        /* GLOBAL_EXPEDITED and its registration */
    return syscall(SYS_membarrier, 4 /* REGISTER_GLOBAL_EXPEDITED */, 0, 0) == 0;
}
DIST__PLATFORM int dist__heavy_fence(void) { return syscall(SYS_membarrier, 2 /* GLOBAL_EXPEDITED */, 0, 0) == 0; }
#else
DIST__PLATFORM int dist__heavy_fence_init(void) { return 0; }
DIST__PLATFORM int dist__heavy_fence(void) { return 0; }
#endif

/* Copies len bytes between `local` here and `addr` in process `pid`: from
   there to here, or (write) from here to there.  Returns the bytes copied
   or -1 (errno). */
DIST__PLATFORM dist__ssize dist__peer_memory_copy(int pid, void *local, uint64_t addr, size_t len, int write) {
#ifdef DIST__LINUX
    struct iovec here, there;
    here.iov_base = local; here.iov_len = len;
    there.iov_base = (void *)(uintptr_t)addr; there.iov_len = len;
    return write ? process_vm_writev((pid_t)pid, &here, 1, &there, 1, 0) : process_vm_readv((pid_t)pid, &here, 1, &there, 1, 0);
#else
    DIST__UNUSED(pid); DIST__UNUSED(local); DIST__UNUSED(addr); DIST__UNUSED(len); DIST__UNUSED(write);
    errno = ENOSYS;
    return -1;
#endif
}

/* Small files shared between processes under a whole-file lock (the
   file:// rendezvous); a lock is awaited, retried every 5 ms, until
   `deadline_ms`. */
DIST__PLATFORM int dist__file_lock(int fd, short type, int64_t deadline_ms) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    while (fcntl(fd, F_SETLK, &fl) != 0) {
        if (errno != EACCES && errno != EAGAIN && errno != EINTR) return -1;
        if (dist__now_ms() >= deadline_ms) return -1;
        dist__sleep_ms(5);
    }
    return 0;
}

/* Replaces what file `path` holds (creating it, mode 0600) with n bytes,
   under an exclusive lock, unless keep(what it held, its length, arg)
   says to leave it.  0; -1: it could not be created; -2: it could not be
   locked or written (the error is in dist__errno()); -3: kept. */
DIST__PLATFORM int dist__file_replace_locked(const char *path, const void *data, size_t n, int64_t deadline_ms,
                                             int (*keep)(const char *old, size_t len, void *arg), void *arg) {
    char old[512];
    ssize_t got;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (dist__file_lock(fd, F_WRLCK, deadline_ms) == 0 && keep && (got = pread(fd, old, sizeof old - 1, 0)) > 0) {
        old[got] = 0;
        if (keep(old, (size_t)got, arg)) { close(fd); return -3; }
    }
    if (dist__file_lock(fd, F_WRLCK, deadline_ms) != 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, n, 0) != (ssize_t)n) {
        int err = errno;
        close(fd);
        errno = err;
        return -2;
    }
    fsync(fd);
    close(fd);   /* releases the lock */
    return 0;
}

/* Reads the first bytes of file `path` (at most cap) under a shared lock:
   how many it read; -1 when there is no such file or it could not be
   locked or read. */
DIST__PLATFORM dist__ssize dist__file_read_locked(const char *path, void *buf, size_t cap, int64_t deadline_ms) {
    dist__ssize n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (dist__file_lock(fd, F_RDLCK, deadline_ms) == 0) n = pread(fd, buf, cap, 0);
    close(fd);
    return n;
}

DIST__PLATFORM void dist__file_remove(const char *path) { unlink(path); }
DIST__PLATFORM int dist__make_dir(const char *path) { return mkdir(path, 0777) == 0 || errno == EEXIST ? 0 : -1; }
DIST__PLATFORM FILE *dist__file_create(const char *path, char *why, size_t cap) {
    FILE *f = fopen(path, "w");
    if (!f) snprintf(why, cap, "%s", strerror(errno));
    return f;
}

/* Child processes (dist_spawn).  POSIX semantics: a child is a fork of
   this process and runs on in the parent's code, so it can call one of
   the parent's C functions.  A port without fork (Windows) cannot offer
   that; it would re-execute the program instead, and dist_spawn would
   change with it.  Each child has a report pipe for its last words: the
   child holds the writing end, the parent the reading end (non-blocking)
   in `report`, which hangs up when the child ends. */
typedef pid_t dist__pid;
typedef int dist__fd;                  /* a pipe's end */
#define DIST__NO_FD (-1)
typedef struct dist__process { dist__pid pid; dist__fd report; } dist__process;   /* pid 0: none, or reaped */

DIST__PLATFORM void dist__process_clear(dist__process *p) { p->pid = 0; p->report = -1; }

/* Forks a child.  In the parent: 1, with `p` set.  In the child: 0, with
   *report its end of the report pipe.  -1 (`p` left clear) when no child
   could start. */
DIST__PLATFORM int dist__process_fork(dist__process *p, dist__fd *report) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    p->pid = fork();
    if (p->pid == 0) { close(fds[0]); *report = fds[1]; return 0; }
    close(fds[1]);
    if (p->pid < 0) { p->pid = 0; close(fds[0]); return -1; }
    p->report = fds[0];
    dist__set_nonblocking(fds[0], 1);
    return 1;
}

/* Closes the reading end of p's report pipe: the parent's when it is done
   with the child, or, in a child, the ends it inherited of its elder
   siblings' pipes. */
DIST__PLATFORM void dist__process_release(dist__process *p) {
    if (p->report >= 0) close(p->report);
    p->report = -1;
}

/* In a child: the kernel ends it when its parent dies (Linux; elsewhere
   nothing). */
DIST__PLATFORM void dist__process_die_with_parent(void) {
#ifdef DIST__LINUX
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
}

/* In a child: `text` up the report pipe. */
DIST__PLATFORM void dist__process_report(dist__fd report, const char *text) {
    ssize_t wr = write(report, text, strlen(text));
    DIST__UNUSED(wr);
}

/* In a child: closes the report pipe, flushes stdio and ends the process
   with the low 8 bits of `code` (no atexit handlers run). */
DIST__PLATFORM void dist__process_exit(dist__fd report, int code) {
    close(report);
    fflush(NULL);
    _exit(code & 0xff);
}

/* 1 while child p runs (started, not reaped). */
DIST__PLATFORM int dist__process_running(const dist__process *p) { return p->pid > 0; }

/* Reaps child p if it has ended, without waiting: 1, with *code its exit
   code or 128 + the signal that ended it, and *killed 1 when it did not
   exit by itself; 0 while it runs. */
DIST__PLATFORM int dist__process_reap(dist__process *p, int *code, int *killed) {
    int st;
    if (p->pid <= 0 || waitpid(p->pid, &st, WNOHANG) != p->pid) return 0;
    *killed = !WIFEXITED(st);
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    p->pid = 0;
    return 1;
}

/* What child p reported, at most cap - 1 bytes ("" when nothing). */
DIST__PLATFORM void dist__process_read_report(const dist__process *p, char *buf, size_t cap) {
    ssize_t n = read(p->report, buf, cap - 1);
    buf[n > 0 ? n : 0] = 0;
}

/* Asks a running child to end (SIGTERM), or (hard) ends it (SIGKILL). */
DIST__PLATFORM void dist__process_stop(dist__process *p, int hard) {
    if (p->pid > 0) kill(p->pid, hard ? SIGKILL : SIGTERM);
}

/* Waits up to `ms` for news from the running children among procs[0..n)
   (the first 64): a report, or a hang-up as one ends. */
DIST__PLATFORM void dist__process_wait(const dist__process *procs, int n, int ms) {
    struct pollfd pf[64];
    int np = 0;
    for (int i = 0; i < n && np < 64; i++)
        if (procs[i].pid > 0) { pf[np].fd = procs[i].report; pf[np].events = POLLIN; pf[np].revents = 0; np++; }
    if (poll(pf, (nfds_t)np, ms) < 0 && errno != EINTR) dist__sleep_ms(2);
}

/* CPUs this process may run on. */
DIST__PLATFORM int dist__cpu_count(void) {
#if defined(DIST__LINUX) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
}

/* Up to n bytes from the kernel's random source: how many it gave. */
DIST__PLATFORM size_t dist__random_fill(uint8_t *out, size_t n) {
    size_t got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (got < n) {
            ssize_t r = read(fd, out + got, n - got);
            if (r <= 0 && errno != EINTR) break;
            if (r > 0) got += (size_t)r;
        }
        close(fd);
    }
    return got;
}

#endif /* POSIX */

/* Both: */
/* The addresses a wildcard listening socket takes: all, or IPv4 only. */
enum { DIST__IP_ANY = 0, DIST__IPV4 = 4 };

/* A non-blocking listening socket on host:port (host NULL: every address
   of `family`; port 0: a free one), or DIST__NO_SOCKET with `why` set and,
   when the socket could not be set up, the error in dist__errno(). */
DIST__PLATFORM dist__socket dist__sock_listen(const char *host, int family, int port, char *why, size_t cap) {
    struct addrinfo hints, *res = NULL, *ai;
    char ports[16];
    dist__socket s = DIST__NO_SOCKET;
    int err = 0, gai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = family == DIST__IPV4 ? AF_INET : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(ports, sizeof ports, "%d", port);
    dist__net_start();
    if ((gai = getaddrinfo(host, ports, &hints, &res)) != 0) {
        snprintf(why, cap, "cannot resolve %s: %s", host ? host : "*", gai_strerror(gai));
        return DIST__NO_SOCKET;
    }
    for (ai = res; ai && s == DIST__NO_SOCKET; ai = ai->ai_next)
        if ((s = dist__sock_bind_listen(ai)) == DIST__NO_SOCKET) err = dist__errno();
    freeaddrinfo(res);
    if (s == DIST__NO_SOCKET) {
        snprintf(why, cap, "cannot listen on %s port %d: %s", host ? host : "*", port, dist__err_text(err));
        dist__set_errno(err);
    } else {
        dist__set_nonblocking(s, 1);
    }
    return s;
}

/* Does the connected socket `s` stay on this host: a loopback address, or
   its peer's address is its own? */
DIST__PLATFORM int dist__same_host_socket(dist__socket s) {
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(s, (struct sockaddr *)&a, &la) != 0 || getpeername(s, (struct sockaddr *)&b, &lb) != 0) return 0;
    if (a.ss_family != b.ss_family) return 0;
    if (b.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)&a, *y = (const struct sockaddr_in *)&b;
        return (ntohl(y->sin_addr.s_addr) >> 24) == 127 || x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (b.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)&a, *y = (const struct sockaddr_in6 *)&b;
        return IN6_IS_ADDR_LOOPBACK(&y->sin6_addr) || memcmp(&x->sin6_addr, &y->sin6_addr, sizeof y->sin6_addr) == 0 ||
               (IN6_IS_ADDR_V4MAPPED(&y->sin6_addr) && y->sin6_addr.s6_addr[12] == 127);
    }
    return 0;
}

/* The numeric host and port of a socket's local or remote end. */
DIST__PLATFORM int dist__sock_name(dist__socket s, int peer, char *host, size_t cap, int *port) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char serv[16];
    int r = peer ? getpeername(s, (struct sockaddr *)&ss, &len) : getsockname(s, (struct sockaddr *)&ss, &len);
    if (r != 0) return -1;
    if (getnameinfo((struct sockaddr *)&ss, len, host, (socklen_t)cap, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) return -1;
    if (port) *port = atoi(serv);
    return 0;
}

/* One round of connecting to host:port: each address it resolves to in
   turn, each attempt bounded by the time left until `deadline_ms` (at most
   2 s, at least 1 ms).  The connected socket (non-blocking, tuned), or
   DIST__NO_SOCKET with `why` set (dist__connect_retry retries). */
/* Connects to host:port before `deadline_ms`, each address tried for at
   most `attempt_ms`. */
DIST__PLATFORM dist__socket dist__sock_connect(const char *host, int port, int64_t deadline_ms, int attempt_ms, char *why, size_t cap) {
    struct addrinfo hints, *res = NULL, *ai;
    char ports[16];
    int gai, last_err = 0;
    snprintf(ports, sizeof ports, "%d", port);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    dist__net_start();
    gai = getaddrinfo(host, ports, &hints, &res);
    if (gai != 0) {
        snprintf(why, cap, "cannot resolve %s: %s", host, gai_strerror(gai));
        return DIST__NO_SOCKET;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        dist__socket s = dist__connect_once(ai, DIST__MAX(dist__ms_left(deadline_ms, attempt_ms), 1));
        if (s != DIST__NO_SOCKET) { freeaddrinfo(res); return s; }
        last_err = dist__errno();
    }
    freeaddrinfo(res);
    snprintf(why, cap, "cannot connect to %s port %d: %s", host, port, last_err ? dist__err_text(last_err) : "timed out");
    return DIST__NO_SOCKET;
}

DIST__PLATFORM dist__ssize dist__peer_memory_read(int pid, void *dst, uint64_t addr, size_t len) { return dist__peer_memory_copy(pid, dst, addr, len, 0); }
DIST__PLATFORM dist__ssize dist__peer_memory_write(int pid, uint64_t addr, const void *src, size_t len) {
    return dist__peer_memory_copy(pid, (void *)(uintptr_t)src, addr, len, 1);
}

DIST__PLATFORM uint64_t dist__random_u64(void) {
    uint64_t v = 0;
    if (dist__random_fill((uint8_t *)&v, sizeof v) == sizeof v && v != 0) return v;
    v = (uint64_t)dist__now_ns() ^ ((uint64_t)dist__getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
    return v ? v : 1;
}



/* [SECTION] results, dtypes, errors and logging */
DIST_API const char *dist_version(void) { return DIST_VERSION_STRING; }

DIST_API const char *dist_result_name(dist_result r) {
    switch (r) {
#define DIST__RESULT_CASE(name, value, text) case name: return #name;
    DIST_RESULT_LIST(DIST__RESULT_CASE)
#undef DIST__RESULT_CASE
    default: return "DIST_ERR_UNKNOWN";
    }
}

DIST_API const char *dist_result_text(dist_result r) {
    switch (r) {
#define DIST__RESULT_CASE(name, value, text) case name: return text;
    DIST_RESULT_LIST(DIST__RESULT_CASE)
#undef DIST__RESULT_CASE
    default: return "unknown result code";
    }
}

DIST_API size_t dist_dtype_size(dist_dtype t) {
    switch (t) {
#define DIST__DTYPE_SIZE(name, text, size) case name: return size;
    DIST_DTYPE_LIST(DIST__DTYPE_SIZE)
#undef DIST__DTYPE_SIZE
    default: return 0;
    }
}

DIST_API const char *dist_dtype_name(dist_dtype t) {
    switch (t) {
#define DIST__DTYPE_NAME(name, text, size) case name: return #text;
    DIST_DTYPE_LIST(DIST__DTYPE_NAME)
#undef DIST__DTYPE_NAME
    default: return "invalid-dtype";
    }
}

static DIST__TLS char dist__thread_error[DIST__ERRLEN];
/* Set in the monitor thread: its failures write no communicator's sentence
   and no log line, and it takes the store only when nobody holds it. */
static DIST__TLS int dist__quiet;

static void dist__vformat(char *dst, size_t cap, const char *fmt, va_list ap) {
    int n = vsnprintf(dst, cap, fmt, ap);
    if (n < 0) dst[0] = 0;
}

static void dist__format(char *dst, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dist__vformat(dst, cap, fmt, ap);
    va_end(ap);
}

/* The log sink of one world; also used before the world exists. */
typedef struct dist__log {
    dist_logger logger;
    dist_log_level level;
    int rank;
} dist__log;

/* cfg.logger at cfg.log_level, and DIST_DEBUG over both (see
   dist__debug_level): its level, and stderr where no logger is given.
   DIST_ERR_INIT, with the sentence, for a DIST_DEBUG that is no level;
   `what` names the call ("init"). */
static dist_result dist__log_setup(dist__log *lg, const dist_config *cfg, const char *what) {
    const char *dbg = dist__getenv("DIST_DEBUG");
    int level = dist__debug_level(dbg);
    memset(lg, 0, sizeof *lg);
    lg->rank = -1;
    if (level < 0) {
        dist__format(dist__thread_error, sizeof dist__thread_error, "%s: DIST_DEBUG=%.60s is not a level: use off, info or detail",
                     what, dbg);
        return DIST_ERR_INIT;
    }
    if (cfg && cfg->logger.func) {
        lg->logger = cfg->logger;
        lg->level = cfg->log_level ? cfg->log_level : DIST_LOG_WARN;
    }
    if (level > 0) {
        if (!lg->logger.func) lg->logger.func = level == DIST_LOG_DEBUG ? dist__stderr_logger_stamped : dist__stderr_logger;
        lg->level = (dist_log_level)level;
    }
    return DIST_OK;
}

/* Would a line of `level` be written?  Asked before anything costly is
   done for one (a lookup, a list of ranks). */
static int dist__log_on(const dist__log *lg, dist_log_level level) {
    return lg && lg->logger.func && level <= lg->level;
}

static void dist__logf(const dist__log *lg, dist_log_level level, const char *fmt, ...) {
    char msg[DIST__LOG_LINE];
    size_t off = 0;
    va_list ap;
    if (!lg || !lg->logger.func || level > lg->level) return;
    if (lg->rank >= 0) {
        int n = snprintf(msg, sizeof msg, "[rank %d] ", lg->rank);
        off = n > 0 ? (size_t)n : 0;
    }
    va_start(ap, fmt);
    dist__vformat(msg + off, sizeof msg - off, fmt, ap);
    va_end(ap);
    dist__log_line(&lg->logger, level, msg);   /* (not under a lock of dist's: see dist__log_line) */
}

/* Lines about strangers (refused, dropped): at most DIST__STRANGER_LINES a
   second per listener, so a flood of strangers is not a flood of log
   lines; the rest are counted and said in one line once the second is
   over (dist__log_budget_flush). */
#define DIST__STRANGER_LINES 20
typedef struct dist__log_budget { int64_t second; int used; long skipped; } dist__log_budget;

static void dist__log_budget_flush(const dist__log *lg, dist__log_budget *b, const char *what, int now_too) {
    int64_t sec = dist__now_ms() / 1000;
    if (sec == b->second && !now_too) return;
    if (b->skipped)
        dist__logf(lg, DIST_LOG_WARN, "%s: and %ld more in that second (at most %d such lines a second are logged)", what, b->skipped,
                   DIST__STRANGER_LINES);
    b->second = sec; b->used = 0; b->skipped = 0;
}

/* May one more line about a stranger be logged now? */
static int dist__log_budget_take(const dist__log *lg, dist__log_budget *b, const char *what) {
    if (!lg->logger.func) return 0;
    dist__log_budget_flush(lg, b, what, 0);
    if (b->used < DIST__STRANGER_LINES) { b->used++; return 1; }
    b->skipped++;
    return 0;
}

/* What dist_init's waits say while the job forms, at INFO (DIST_DEBUG=
   info): nothing for the first quarter of the timeout (at most 10 s), then
   what it waits for, again every quarter of the timeout (at most 30 s).  So
   a job that cannot form (a rank that never started, a wrong port) says why
   long before it times out, and one with a short timeout early (timeout
   4 s: after 1 s, then every second).  It exists only while INFO lines are
   written (d->note); the waits' own sentences are written there. */
typedef struct dist__wait_note {
    const dist__log *log;
    int64_t start_ms, next_ms;
    int every_ms, timeout_ms;
    char store[300];            /* "127.0.0.1:29500", for the sentences */
} dist__wait_note;

static void dist__wait_note_start(dist__wait_note *n, const dist__log *log, int timeout_ms) {
    int quarter = DIST__MAX(timeout_ms / 4, 1);
    memset(n, 0, sizeof *n);
    n->log = log;
    n->timeout_ms = timeout_ms;
    n->start_ms = dist__now_ms();
    n->next_ms = n->start_ms + DIST__MIN(10000, quarter);
    n->every_ms = DIST__MIN(30000, quarter);
}

/* Is a note due now?  (Then the next one is scheduled.) */
static int dist__wait_note_due(dist__wait_note *n) {
    int64_t now;
    if (!n) return 0;
    now = dist__now_ms();
    if (now < n->next_ms) return 0;
    n->next_ms = now + n->every_ms;
    return 1;
}

/* "init: still waiting after 10.0 s (timeout 300.0 s): <what>". */
static void dist__wait_note_say(const dist__wait_note *n, const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    dist__vformat(what, sizeof what, fmt, ap);
    va_end(ap);
    dist__logf(n->log, DIST_LOG_INFO, "init: still waiting after %.1f s (timeout %.1f s): %s", (double)(dist__now_ms() - n->start_ms) / 1000.0,
               n->timeout_ms / 1000.0, what);
}

/* [SECTION] reductions: one kernel per dtype x op, generated
   ---------------------------------------------------------------------------
   acc[i] = op(acc[i], in[i]) or, with in_first, op(in[i], acc[i]): the
   algorithms fix which operand is whose, so two ranks that compute the same
   element independently evaluate the same expression bit for bit (max and
   min of NaNs, and float16/bfloat16 rounding, would otherwise depend on the
   order).  float16 and bfloat16 are combined in float and rounded to
   nearest-even once per operation.  Signed integers wrap (computed in the
   unsigned type: no undefined behaviour).  AVG is SUM here; the average is
   taken once at the end (dist__scale_avg). */

/* float16 <-> float without branches on the common path (after F. Giesen's
   half_to_float_fast5 and float_to_half_fast3_rtne): exact, round to
   nearest even, NaN stays NaN. */
static float dist__u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t dist__f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static float dist__f16_to_f32(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fff) << 13, exp = o & 0x0f800000u;
    uint32_t normal = o + ((uint32_t)(127 - 15) << 23) + (exp == 0x0f800000u ? (uint32_t)(128 - 16) << 23 : 0);
    uint32_t subnormal = dist__f2u(dist__u2f(o + (113u << 23)) - dist__u2f(113u << 23));
    return dist__u2f((exp == 0 ? subnormal : normal) | (uint32_t)(h & 0x8000) << 16);
}

static uint16_t dist__f32_to_f16(float x) {
    uint32_t f = dist__f2u(x), sign = f & 0x80000000u, a = f ^ sign;
    uint32_t special = a > 0x7f800000u ? 0x7e00u : 0x7c00u;                      /* NaN, overflow */
    float magic = dist__u2f((uint32_t)((127 - 15) + (23 - 10) + 1) << 23);
    uint32_t subnormal = dist__f2u(dist__u2f(a) + magic) - dist__f2u(magic);
    uint32_t normal = (a + ((uint32_t)(15 - 127) << 23) + 0xfff + ((a >> 13) & 1)) >> 13;
    uint32_t o = a >= (uint32_t)(127 + 16) << 23 ? special : a < 113u << 23 ? subnormal : normal;
    return (uint16_t)(o | sign >> 16);
}

static float dist__bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t dist__f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  /* NaN stays NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* The operations, on values already in their computing type. */
#define DIST__OP_SUM(a, b)  ((a) + (b))
#define DIST__OP_PROD(a, b) ((a) * (b))
#define DIST__OP_MAX(a, b)  ((a) > (b) || (a) != (a) ? (a) : (b))   /* NaN wins */
#define DIST__OP_MIN(a, b)  ((a) < (b) || (a) != (a) ? (a) : (b))
#define DIST__IOP_SUM(T, U, a, b)  ((T)(U)((U)(a) + (U)(b)))        /* wrapping */
#define DIST__IOP_PROD(T, U, a, b) ((T)(U)((U)(a) * (U)(b)))

typedef void (*dist__reduce_fn)(void *acc, const void *in, size_t n, int in_first);

/* A kernel over plain C types: two loops, so each vectorises. */
#define DIST__KERNEL(name, T, EXPR)                                            \
    DIST__VECTORIZE static void name(void *acc_, const void *in_, size_t n, int in_first) { \
        T *DIST__RESTRICT acc = (T *)acc_;                                     \
        const T *DIST__RESTRICT in = (const T *)in_;                           \
        if (!in_first) for (size_t i = 0; i < n; i++) { T a = acc[i], b = in[i]; acc[i] = EXPR; } \
        else for (size_t i = 0; i < n; i++) { T a = in[i], b = acc[i]; acc[i] = EXPR; }           \
    }
/* The same over 16-bit floats, computed in float. */
#define DIST__KERNEL16(name, TO, FROM, EXPR)                                   \
    DIST__VECTORIZE static void name(void *acc_, const void *in_, size_t n, int in_first) { \
        uint16_t *DIST__RESTRICT acc = (uint16_t *)acc_;                       \
        const uint16_t *DIST__RESTRICT in = (const uint16_t *)in_;             \
        if (!in_first) for (size_t i = 0; i < n; i++) { float a = TO(acc[i]), b = TO(in[i]); acc[i] = FROM(EXPR); } \
        else for (size_t i = 0; i < n; i++) { float a = TO(in[i]), b = TO(acc[i]); acc[i] = FROM(EXPR); }           \
    }

#define DIST__INT_KERNELS(tname, T, U)                                              \
    DIST__KERNEL(dist__sum_##tname, T, DIST__IOP_SUM(T, U, a, b))                   \
    DIST__KERNEL(dist__prod_##tname, T, DIST__IOP_PROD(T, U, a, b))                 \
    DIST__KERNEL(dist__max_##tname, T, DIST__OP_MAX(a, b))                          \
    DIST__KERNEL(dist__min_##tname, T, DIST__OP_MIN(a, b))
#define DIST__FLOAT_KERNELS(tname, T)                                               \
    DIST__KERNEL(dist__sum_##tname, T, DIST__OP_SUM(a, b))                          \
    DIST__KERNEL(dist__prod_##tname, T, DIST__OP_PROD(a, b))                        \
    DIST__KERNEL(dist__max_##tname, T, DIST__OP_MAX(a, b))                          \
    DIST__KERNEL(dist__min_##tname, T, DIST__OP_MIN(a, b))
#define DIST__HALF_KERNELS(tname, TO, FROM)                                         \
    DIST__KERNEL16(dist__sum_##tname, TO, FROM, DIST__OP_SUM(a, b))                 \
    DIST__KERNEL16(dist__prod_##tname, TO, FROM, DIST__OP_PROD(a, b))               \
    DIST__KERNEL16(dist__max_##tname, TO, FROM, DIST__OP_MAX(a, b))                 \
    DIST__KERNEL16(dist__min_##tname, TO, FROM, DIST__OP_MIN(a, b))

DIST__INT_KERNELS(int8, int8_t, uint8_t)
DIST__INT_KERNELS(uint8, uint8_t, uint8_t)
DIST__INT_KERNELS(int32, int32_t, uint32_t)
DIST__INT_KERNELS(int64, int64_t, uint64_t)
DIST__HALF_KERNELS(float16, dist__f16_to_f32, dist__f32_to_f16)
DIST__HALF_KERNELS(bfloat16, dist__bf16_to_f32, dist__f32_to_bf16)
DIST__FLOAT_KERNELS(float32, float)
DIST__FLOAT_KERNELS(float64, double)

/* [dtype][op], in DIST_DTYPE_LIST order; AVG uses the SUM kernel. */
static const dist__reduce_fn dist__reduce_table[DIST_DTYPE_COUNT][DIST_OP_COUNT] = {
#define DIST__REDUCE_ROW(name, text, size) \
    { dist__sum_##text, dist__prod_##text, dist__max_##text, dist__min_##text, dist__sum_##text },
    DIST_DTYPE_LIST(DIST__REDUCE_ROW)
#undef DIST__REDUCE_ROW
};

/* AVG: divide the sums by n, once, at the end. */
static void dist__scale_avg(void *buf, size_t count, dist_dtype t, int n) {
    size_t i;
    switch (t) {
#define DIST__AVG_INT(T) { T *p = (T *)buf; for (i = 0; i < count; i++) p[i] = (T)(p[i] / n); } break
    case DIST_INT8:  DIST__AVG_INT(int8_t);
    case DIST_UINT8: DIST__AVG_INT(uint8_t);
    case DIST_INT32: DIST__AVG_INT(int32_t);
    case DIST_INT64: { int64_t *p = (int64_t *)buf; for (i = 0; i < count; i++) p[i] /= n; } break;
#undef DIST__AVG_INT
    case DIST_FLOAT16:  { uint16_t *p = (uint16_t *)buf; for (i = 0; i < count; i++) p[i] = dist__f32_to_f16(dist__f16_to_f32(p[i]) / (float)n); } break;
    case DIST_BFLOAT16: { uint16_t *p = (uint16_t *)buf; for (i = 0; i < count; i++) p[i] = dist__f32_to_bf16(dist__bf16_to_f32(p[i]) / (float)n); } break;
    case DIST_FLOAT32: { float *p = (float *)buf; for (i = 0; i < count; i++) p[i] /= (float)n; } break;
    case DIST_FLOAT64: { double *p = (double *)buf; for (i = 0; i < count; i++) p[i] /= (double)n; } break;
    default: break;
    }
}

/* [SECTION] wire format: little-endian, handshake, frame header */
static void dist__put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void dist__put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void dist__put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t dist__get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t dist__get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t dist__get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* [SECTION] SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104)
   ---------------------------------------------------------------------------
   For the handshake's challenge-response: each end proves it knows the
   job's secret without sending it.  Small and portable, not fast: a
   handshake hashes a few hundred bytes. */

typedef struct dist__sha256_ctx {
    uint32_t h[8];
    uint64_t len;          /* bytes hashed so far */
    uint8_t buf[64];
    size_t fill;
} dist__sha256_ctx;

#define DIST__ROR32(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void dist__sha256_block(dist__sha256_ctx *s, const uint8_t *p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2 };
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = DIST__ROR32(w[i - 15], 7) ^ DIST__ROR32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = DIST__ROR32(w[i - 2], 17) ^ DIST__ROR32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3]; e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (DIST__ROR32(e, 6) ^ DIST__ROR32(e, 11) ^ DIST__ROR32(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
        uint32_t t2 = (DIST__ROR32(a, 2) ^ DIST__ROR32(a, 13) ^ DIST__ROR32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d; s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void dist__sha256_init(dist__sha256_ctx *s) {
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->fill = 0;
}

static void dist__sha256_update(dist__sha256_ctx *s, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    s->len += n;
    while (n > 0) {
        size_t take = DIST__MIN(n, 64 - s->fill);
        memcpy(s->buf + s->fill, p, take);
        s->fill += take; p += take; n -= take;
        if (s->fill == 64) { dist__sha256_block(s, s->buf); s->fill = 0; }
    }
}

static void dist__sha256_final(dist__sha256_ctx *s, uint8_t out[32]) {
    uint64_t bits = s->len * 8;
    uint8_t pad = 0x80, zero = 0, lenb[8];
    dist__sha256_update(s, &pad, 1);
    while (s->fill != 56) dist__sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    dist__sha256_update(s, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24); out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8); out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

static void dist__sha256(const void *data, size_t n, uint8_t out[32]) {
    dist__sha256_ctx s;
    dist__sha256_init(&s);
    dist__sha256_update(&s, data, n);
    dist__sha256_final(&s, out);
}

/* HMAC-SHA256 of the concatenation of `parts` (n of them, lens[i] bytes
   each) under key (klen bytes; any length). */
static void dist__hmac_sha256(const void *key, size_t klen, int n, const void *const *parts, const size_t *lens, uint8_t out[32]) {
    uint8_t k[64], pad[64], inner[32];
    dist__sha256_ctx s;
    memset(k, 0, sizeof k);
    if (klen > 64) dist__sha256(key, klen, k);
    else if (klen) memcpy(k, key, klen);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    dist__sha256_init(&s);
    dist__sha256_update(&s, pad, 64);
    for (int i = 0; i < n; i++) dist__sha256_update(&s, parts[i], lens[i]);
    dist__sha256_final(&s, inner);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    dist__sha256_init(&s);
    dist__sha256_update(&s, pad, 64);
    dist__sha256_update(&s, inner, 32);
    dist__sha256_final(&s, out);
}

/* Compares n bytes in time that does not depend on where they differ. */
static int dist__equal_ct(const uint8_t *a, const uint8_t *b, size_t n) {
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++) d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* The job's secret as an HMAC key (a secret longer than a SHA-256 block is
   hashed first, as HMAC does); an empty key when the job has none. */
typedef struct dist__key {
    uint8_t k[64];
    size_t len;
    int set;
} dist__key;

static void dist__key_from(const char *secret, dist__key *key) {
    size_t n = secret ? strlen(secret) : 0;
    memset(key, 0, sizeof *key);
    key->set = n > 0;                     /* DIST_SECRET="" is no secret, as unset */
    if (n > 64) { dist__sha256(secret, n, key->k); key->len = 32; }
    else { if (n) memcpy(key->k, secret, n); key->len = n; }
}

/* n unpredictable bytes for a handshake nonce: the kernel's random source;
   should it fail, a hash of the clock, the process and a counter, which
   still never repeats within a job. */
static void dist__random_bytes(uint8_t *out, size_t n) {
    static uint64_t counter;
    size_t got = dist__random_fill(out, n);
    while (got < n) {
        uint64_t seed[4] = { (uint64_t)dist__now_ns(), (uint64_t)dist__getpid(), (uint64_t)(uintptr_t)out, (uint64_t)DIST__FETCH_ADD(&counter, 1) };
        uint8_t h[32];
        dist__sha256(seed, sizeof seed, h);
        for (size_t i = 0; i < 32 && got < n; i++) out[got++] = h[i];
    }
}

#define DIST__PROTOCOL_VERSION 3
#define DIST__MAGIC            0x54534944u   /* "DIST" */
#define DIST__FRAME_MAGIC      0x6d617266u   /* "fram" */

/* Handshake.  Both ends of every connection send an 80-byte hello:
     0 magic u32 | 4 version u16 | 6 purpose u16 | 8 job u64 |
    16 rank i32 | 20 world i32 | 24 flags u32 | 28 status i32 |
    32 nonce, 32 random bytes | 64 reserved 16 bytes
   then, having read the other's, a 32-byte proof: HMAC-SHA256 under the
   job's secret of "dist-auth", the prover's role (C: the end that
   connected, A: the end that accepted), the prover's hello and the
   verifier's hello.  Each end checks the other's proof, so both show they
   know the secret without sending it; the nonces make every proof fresh,
   the roles keep a proof from being reflected back, and the hellos inside
   it keep their fields from being altered.  Without a secret the key is
   empty: the job id (random, from rank 0) still keeps jobs apart.  The
   first 8 bytes and the size stay the same in every protocol version, so
   a mismatch is reported as such. */
#define DIST__HELLO_SIZE 80
#define DIST__PROOF_SIZE 32
#define DIST__HELLO_SECRET 1u   /* flags: this end has a secret */
#define DIST__HELLO_JOIN   2u   /* flags (to the store): a newcomer (dist_grow), no rank of its own yet */
enum { DIST__PURPOSE_MESH = 1, DIST__PURPOSE_STORE = 2 };

typedef struct dist__hello {
    uint32_t magic;
    uint16_t version, purpose;
    uint64_t job;
    int32_t rank, world;
    uint32_t flags;
    int32_t status;   /* 0 ok; in a reply, non-zero = refused */
    uint8_t nonce[32];
} dist__hello;

static void dist__hello_encode(const dist__hello *h, uint8_t *b) {
    memset(b, 0, DIST__HELLO_SIZE);
    dist__put32(b + 0, h->magic);
    dist__put16(b + 4, h->version);
    dist__put16(b + 6, h->purpose);
    dist__put64(b + 8, h->job);
    dist__put32(b + 16, (uint32_t)h->rank);
    dist__put32(b + 20, (uint32_t)h->world);
    dist__put32(b + 24, h->flags);
    dist__put32(b + 28, (uint32_t)h->status);
    memcpy(b + 32, h->nonce, 32);
}

/* This end's hello: the common fields, a fresh nonce, the secret flag. */
static void dist__hello_make(dist__hello *h, int purpose, uint64_t job, int rank, int world, const dist__key *key, uint8_t *b) {
    memset(h, 0, sizeof *h);
    h->magic = DIST__MAGIC; h->version = DIST__PROTOCOL_VERSION; h->purpose = (uint16_t)purpose;
    h->job = job; h->rank = rank; h->world = world;
    h->flags = key->set ? DIST__HELLO_SECRET : 0;
    dist__random_bytes(h->nonce, sizeof h->nonce);
    dist__hello_encode(h, b);
}

/* The proof of role `role` ('C' or 'A') by the end that sent `prover`
   (its hello's bytes) to the end that sent `verifier`. */
static void dist__proof(const dist__key *key, char role, const uint8_t *prover, const uint8_t *verifier, uint8_t out[32]) {
    static const char label[] = "dist-auth";
    const void *parts[4] = { label, &role, prover, verifier };
    size_t lens[4] = { sizeof label - 1, 1, DIST__HELLO_SIZE, DIST__HELLO_SIZE };
    dist__hmac_sha256(key->k, key->len, 4, parts, lens, out);
}

/* Checks a peer's proof; 0 when it holds, else -1 and a reason naming
   what the peer's hello said about its secret. */
static int dist__proof_check(const dist__key *key, char role, const uint8_t *peer_hello, const uint8_t *my_hello,
                             const uint8_t *proof, char *why, size_t cap) {
    uint8_t want[32];
    int peer_has = (dist__get32(peer_hello + 24) & DIST__HELLO_SECRET) != 0;
    dist__proof(key, role, peer_hello, my_hello, want);
    if (dist__equal_ct(want, proof, 32)) return 0;
    if (peer_has && !key->set) dist__format(why, cap, "it has a secret and this job has none (set DIST_SECRET alike everywhere)");
    else if (!peer_has && key->set) dist__format(why, cap, "it has no secret and this job requires one (DIST_SECRET)");
    else dist__format(why, cap, "it does not know the job's secret");
    return -1;
}

/* Decodes and checks what is checkable without context.  Returns 0, or -1
   with a reason in `why`. */
static int dist__hello_decode(const uint8_t *b, dist__hello *h, char *why, size_t cap) {
    h->magic = dist__get32(b + 0);
    h->version = dist__get16(b + 4);
    h->purpose = dist__get16(b + 6);
    h->job = dist__get64(b + 8);
    h->rank = (int32_t)dist__get32(b + 16);
    h->world = (int32_t)dist__get32(b + 20);
    h->flags = dist__get32(b + 24);
    h->status = (int32_t)dist__get32(b + 28);
    memcpy(h->nonce, b + 32, 32);
    if (h->magic != DIST__MAGIC) {
        dist__format(why, cap, "not a dist peer (bad magic 0x%08x)", (unsigned)h->magic);
        return -1;
    }
    if (h->version != DIST__PROTOCOL_VERSION) {
        dist__format(why, cap, "protocol version %u, this build speaks %u",
                     (unsigned)h->version, (unsigned)DIST__PROTOCOL_VERSION);
        return -1;
    }
    if (h->purpose != DIST__PURPOSE_MESH && h->purpose != DIST__PURPOSE_STORE) {
        dist__format(why, cap, "unknown connection purpose %u", (unsigned)h->purpose);
        return -1;
    }
    if (h->world < 1 || h->world > DIST__MAX_WORLD || h->rank < 0 || h->rank >= h->world) {
        dist__format(why, cap, "rank %d of world size %d is out of range", (int)h->rank, (int)h->world);
        return -1;
    }
    return 0;
}

/* Checks the first bytes of a hello that is still arriving, so that a
   stranger is turned away after its first 4 bytes, not after 80 (or a
   timeout).  0: fine so far; -1 with a reason. */
static int dist__hello_prefix_check(const uint8_t *b, size_t n, char *why, size_t cap) {
    if (n >= 4 && dist__get32(b) != DIST__MAGIC) {
        dist__format(why, cap, "not a dist peer (bad magic 0x%08x)", (unsigned)dist__get32(b));
        return -1;
    }
    if (n >= 6 && dist__get16(b + 4) != DIST__PROTOCOL_VERSION) {
        dist__format(why, cap, "protocol version %u, this build speaks %u", (unsigned)dist__get16(b + 4), (unsigned)DIST__PROTOCOL_VERSION);
        return -1;
    }
    return 0;
}

/* Frame header, 40 bytes:
     0 kind u8 | 1 dtype u8 | 2 op u8 | 3 collective u8 | 4 comm u32 |
     8 tag i64 | 16 count u64 | 24 payload bytes u64 | 32 root i32 |
    36 magic u32
   Byte 0 holds the kind in its low 5 bits and the flags below.  What the
   fields mean depends on the kind:
     DATA, COLL  a message: communicator, tag (COLL: the collective's
                 sequence number), dtype, count, payload bytes; COLL also
                 the descriptor (op, collective and algorithm, root).  With
                 DIST__FRAME_RTS the payload does not follow: a 16-byte
                 trailer announces it (the sender's rendezvous id, and its
                 address in the sender's memory, or 0), and it travels once
                 the receive is posted (see the engine's design notes)
     ABORT       collective `tag` of `comm` failed: root = the result code,
                 count = the rank it blames + 1 (0: none), payload = the
                 sentence
     BYE         the sender has shut down
     ACK         tag = a rendezvous id: its payload was copied from the
                 sender's memory
     CTS         tag = a rendezvous id: its receive is posted, send it
     PAYLOAD     tag = a rendezvous id, count = offset: that much of it
     CANCEL      tag = a rendezvous id; root 0: the sender withdrew it,
                 else the receiver did not take it (count: why)
     CREDIT      count = bytes of flow-control budget handed (back) to the
                 sender; root 1: the first grant, the whole budget
     BLOCKED     the sender waits for credit; count = bytes it needs
     PULL        the receiver needs the first message of (comm, kind in
                 `collective`, tag) now, ahead of the others
   Every field is checked (dist__frame_decode) before anything else
   happens. */
#define DIST__HDR_SIZE 40
#define DIST__RTS_SIZE 16
#define DIST__STAMP_SIZE 24
#define DIST__HDR_MAX  (DIST__HDR_SIZE + DIST__RTS_SIZE + DIST__STAMP_SIZE)
#define DIST__FRAME_KINDS_LIST(X) X(DATA) X(BYE) X(COLL) X(ABORT) X(ACK) X(CTS) X(PAYLOAD) X(CANCEL) X(CREDIT) X(BLOCKED) X(PULL)
enum {
    DIST__FRAME_NONE = 0,
#define DIST__FRAME_ENUM(k) DIST__FRAME_##k,
    DIST__FRAME_KINDS_LIST(DIST__FRAME_ENUM)
#undef DIST__FRAME_ENUM
    DIST__FRAME_KINDS
};
#define DIST__FRAME_KIND_MASK 0x0f
#define DIST__FRAME_FLAGS     0xf0
#define DIST__FRAME_RTS       0x80   /* DATA/COLL: an announcement; the trailer follows */
#define DIST__FRAME_PULLED    0x40   /* DATA/COLL: sent ahead because the receiver asked (PULL): no credit spent */
#define DIST__FRAME_PROMPT    0x20   /* an announcement by reference the budget paid for: copied at once,
                                        received or not, as an eager message would be */
#define DIST__FRAME_STAMP     0x10   /* COLL: a 24-byte trailer follows (after an announcement's): the latest
                                        and earliest entry into the collective the sender knows of, on the
                                        job clock, and the rank that came last (see "stats and traces") */
/* Why a receiver did not take an announced message (CANCEL's count). */
enum { DIST__REFUSED_MISMATCH = 1, DIST__REFUSED_WITHDRAWN, DIST__REFUSED_GONE, DIST__REFUSED_REVOKED };

/* Collective kinds (the low 4 bits of a COLL frame's byte 3; the high 4
   bits say which algorithm, so ranks that chose differently also fail). */
#define DIST__COLL_LIST(X) X(BROADCAST, broadcast) X(REDUCE, reduce) X(ALL_REDUCE, all_reduce) \
    X(GATHER, gather) X(ALL_GATHER, all_gather) X(SCATTER, scatter)                             \
    X(REDUCE_SCATTER, reduce_scatter) X(ALL_TO_ALL, all_to_all) X(BARRIER, barrier)
enum {
    DIST__COLL_NONE = 0,
#define DIST__COLL_ENUM(up, low) DIST__COLL_##up,
    DIST__COLL_LIST(DIST__COLL_ENUM)
#undef DIST__COLL_ENUM
    DIST__COLL_KINDS
};
#define DIST__MAX_ABORT_TEXT 512

typedef struct dist__frame {
    uint8_t kind, flags, dtype, op, coll;
    uint32_t comm;
    int64_t tag;
    uint64_t count, nbytes;
    int32_t root;
    uint64_t sid, addr;            /* an announcement's trailer */
    int64_t st_last, st_first;     /* a stamped collective frame's trailer: the latest and earliest entry into */
    int32_t st_rank;               /* ...the collective the sender knows of (job clock), and who came last */
} dist__frame;

/* A collective's descriptor, as in a frame: in shared memory (what a rank
   that waits on another in a segment compares with its own call), and in
   what the receive path reads of the collective running here. */
typedef struct dist__shm_desc {
    uint64_t count;
    uint8_t coll, dtype, op, pad0;
    int32_t root;
} dist__shm_desc;
static void dist__shm_desc_set(dist__shm_desc *o, const dist__frame *f) {
    o->count = f->count; o->coll = f->coll; o->dtype = f->dtype; o->op = f->op; o->root = f->root;
}

/* Bytes of the header (with its trailers) whose first byte is b0. */
static size_t dist__frame_size_of(uint8_t b0) {
    return DIST__HDR_SIZE + ((b0 & DIST__FRAME_RTS) ? DIST__RTS_SIZE : 0) + ((b0 & DIST__FRAME_STAMP) ? DIST__STAMP_SIZE : 0);
}
static size_t dist__frame_size(const dist__frame *f) { return dist__frame_size_of(f->flags); }

static size_t dist__frame_encode(const dist__frame *f, uint8_t *b) {
    b[0] = (uint8_t)(f->kind | f->flags); b[1] = f->dtype; b[2] = f->op; b[3] = f->coll;
    dist__put32(b + 4, f->comm);
    dist__put64(b + 8, (uint64_t)f->tag);
    dist__put64(b + 16, f->count);
    dist__put64(b + 24, f->nbytes);
    dist__put32(b + 32, (uint32_t)f->root);
    dist__put32(b + 36, DIST__FRAME_MAGIC);
    if (f->flags & DIST__FRAME_RTS) {
        dist__put64(b + DIST__HDR_SIZE, f->sid);
        dist__put64(b + DIST__HDR_SIZE + 8, f->addr);
    }
    if (f->flags & DIST__FRAME_STAMP) {
        uint8_t *t = b + DIST__HDR_SIZE + ((f->flags & DIST__FRAME_RTS) ? DIST__RTS_SIZE : 0);
        dist__put64(t, (uint64_t)f->st_last);
        dist__put64(t + 8, (uint64_t)f->st_first);
        dist__put32(t + 16, (uint32_t)f->st_rank);
        dist__put32(t + 20, 0);
    }
    return dist__frame_size(f);
}

/* The trailers, once they are in (the header is checked). */
static int dist__frame_trailer(const uint8_t *b, dist__frame *f, char *why, size_t cap) {
    if (f->flags & DIST__FRAME_RTS) {
        f->sid = dist__get64(b + DIST__HDR_SIZE);
        f->addr = dist__get64(b + DIST__HDR_SIZE + 8);
    }
    if (f->flags & DIST__FRAME_STAMP) {
        const uint8_t *t = b + DIST__HDR_SIZE + ((f->flags & DIST__FRAME_RTS) ? DIST__RTS_SIZE : 0);
        f->st_last = (int64_t)dist__get64(t);
        f->st_first = (int64_t)dist__get64(t + 8);
        f->st_rank = (int32_t)dist__get32(t + 16);
        if (f->st_rank < 0 || f->st_rank >= DIST__MAX_WORLD || f->st_first > f->st_last || dist__get32(t + 20) != 0) {
            dist__format(why, cap, "collective frame stamped with rank %d, entries %lld..%lld", (int)f->st_rank,
                         (long long)f->st_first, (long long)f->st_last);
            return -1;
        }
    }
    return 0;
}

/* A message's fields: dtype, count and size agree (DATA); the descriptor is
   one that exists (COLL). */
static int dist__message_check(const dist__frame *f, char *why, size_t cap) {
    size_t es = f->dtype < DIST_DTYPE_COUNT ? dist_dtype_size((dist_dtype)f->dtype) : 0;
    if (f->kind == DIST__FRAME_DATA) {
        if (es == 0) { dist__format(why, cap, "frame with unknown dtype %u", (unsigned)f->dtype); return -1; }
        if (f->count > DIST__MAX_MESSAGE || f->count * es != f->nbytes) {
            dist__format(why, cap, "frame says %llu element%s of %zu byte%s but carries %llu byte%s", (unsigned long long)f->count,
                         DIST__PLURAL(f->count), es, DIST__PLURAL(es), (unsigned long long)f->nbytes, DIST__PLURAL(f->nbytes));
            return -1;
        }
        if (f->tag < 0 || f->tag > INT_MAX) {
            dist__format(why, cap, "frame with tag %lld out of range", (long long)f->tag);
            return -1;
        }
        return 0;
    }
    if (es == 0 || f->op >= DIST_OP_COUNT || (f->coll & 15) == 0 || (f->coll & 15) >= DIST__COLL_KINDS) {
        dist__format(why, cap, "collective frame with dtype %u, op %u, kind %u", (unsigned)f->dtype,
                     (unsigned)f->op, (unsigned)f->coll);
        return -1;
    }
    if (f->nbytes % es != 0 || f->tag < 0 || f->count > DIST__MAX_MESSAGE) {
        dist__format(why, cap, "collective frame of %llu byte%s of %s, sequence %lld", (unsigned long long)f->nbytes,
                     DIST__PLURAL(f->nbytes), dist_dtype_name((dist_dtype)f->dtype), (long long)f->tag);
        return -1;
    }
    return 0;
}

/* Decodes and checks the 40-byte header (not the trailer).  Returns 0, or
   -1 with a reason in `why`. */
static int dist__frame_decode(const uint8_t *b, dist__frame *f, char *why, size_t cap) {
    f->kind = b[0] & DIST__FRAME_KIND_MASK; f->flags = b[0] & DIST__FRAME_FLAGS;
    f->dtype = b[1]; f->op = b[2]; f->coll = b[3];
    f->comm = dist__get32(b + 4);
    f->tag = (int64_t)dist__get64(b + 8);
    f->count = dist__get64(b + 16);
    f->nbytes = dist__get64(b + 24);
    f->root = (int32_t)dist__get32(b + 32);
    f->sid = f->addr = 0;
    f->st_last = f->st_first = 0; f->st_rank = -1;
    if (dist__get32(b + 36) != DIST__FRAME_MAGIC) {
        dist__format(why, cap, "frame header with bad magic (stream out of step)");
        return -1;
    }
    if (f->kind == DIST__FRAME_NONE || f->kind >= DIST__FRAME_KINDS) {
        dist__format(why, cap, "unknown frame kind %u", (unsigned)b[0]);
        return -1;
    }
    if (f->nbytes > DIST__MAX_MESSAGE) {
        dist__format(why, cap, "frame of %llu bytes exceeds the limit of %llu",
                     (unsigned long long)f->nbytes, (unsigned long long)DIST__MAX_MESSAGE);
        return -1;
    }
    if ((f->flags && f->kind != DIST__FRAME_DATA && f->kind != DIST__FRAME_COLL) ||
        ((f->flags & DIST__FRAME_PROMPT) && !(f->flags & DIST__FRAME_RTS)) || ((f->flags & DIST__FRAME_STAMP) && f->kind != DIST__FRAME_COLL)) {
        dist__format(why, cap, "frame kind %u with flags 0x%02x", (unsigned)f->kind, (unsigned)f->flags);
        return -1;
    }
    switch (f->kind) {
    case DIST__FRAME_DATA: case DIST__FRAME_COLL:
        return dist__message_check(f, why, cap);
    case DIST__FRAME_ABORT:
        if (f->nbytes > DIST__MAX_ABORT_TEXT || f->tag < 0) {
            dist__format(why, cap, "abort frame of %llu byte%s", (unsigned long long)f->nbytes, DIST__PLURAL(f->nbytes));
            return -1;
        }
        return 0;
    case DIST__FRAME_PAYLOAD:
        if (f->count > DIST__MAX_MESSAGE || f->root < 0 || f->root > 1) {
            dist__format(why, cap, "payload frame at offset %llu, flags %d", (unsigned long long)f->count, (int)f->root);
            return -1;
        }
        return 0;
    case DIST__FRAME_CREDIT:
        if (f->count == 0 || f->count > DIST__MAX_MESSAGE || f->root < 0 || f->root > 1 || f->nbytes) {
            dist__format(why, cap, "credit frame of %llu byte%s", (unsigned long long)f->count, DIST__PLURAL(f->count));
            return -1;
        }
        return 0;
    case DIST__FRAME_PULL:
        if ((f->coll != DIST__FRAME_DATA && f->coll != DIST__FRAME_COLL) || f->tag < 0 || f->nbytes || f->root < 0 || f->root > 1) {
            dist__format(why, cap, "pull frame for kind %u, tag %lld", (unsigned)f->coll, (long long)f->tag);
            return -1;
        }
        return 0;
    case DIST__FRAME_CANCEL:
        if (f->root < 0 || f->root > 2 || f->nbytes) {
            dist__format(why, cap, "cancel frame with flags %d", (int)f->root);
            return -1;
        }
        return 0;
    default:   /* BYE, ACK, CTS, BLOCKED: nothing follows */
        if (f->nbytes != 0) {
            dist__format(why, cap, "frame kind %u with a payload of %llu byte%s", (unsigned)f->kind, (unsigned long long)f->nbytes,
                         DIST__PLURAL(f->nbytes));
            return -1;
        }
        return 0;
    }
}

/* [SECTION] socket helpers: connect with retry, timed I/O */

/* "host:port", "[v6]:port" -> host, port.  Returns 0 or -1. */
static int dist__split_hostport(const char *s, char *host, size_t cap, int *port) {
    const char *colon;
    size_t hl;
    char *end;
    long p;
    if (!s || !*s) return -1;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':') return -1;
        hl = (size_t)(rb - s - 1);
        s++;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return -1;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= cap) return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && *end != '/' && *end != '?') || p <= 0 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

/* What running out of descriptors (error e of a socket call) means for a
   rank of a job of `world` ranks, as a sentence. */
static void dist__no_fds_text(char *buf, size_t cap, int e, int world, int rank) {
    long lim = dist__fd_limit();
    int need = world + (rank == 0 ? world : 0) + 16;      /* a connection to each, the store's on rank 0, and a few */
    switch (dist__err_no_fds_kind(e)) {
    case 1:
        if (lim > 0) dist__format(buf, cap, "this process ran out of file descriptors (ulimit -n %ld; rank %d of a %d-rank job needs about %d)",
                                  lim, rank, world, need);
        else dist__format(buf, cap, "this process ran out of file descriptors (rank %d of a %d-rank job needs about %d)", rank, world, need);
        break;
    case 2: dist__format(buf, cap, "the system ran out of file descriptors (%s)", dist__err_text(e)); break;
    default: dist__format(buf, cap, "the system ran out of memory for sockets (%s)", dist__err_text(e)); break;
    }
}

/* How many connections a listener of a job of `world` ranks holds in
   their handshake (DIST__PENDING_MIN). */
static int dist__pending_cap(int world) { return DIST__MAX(2 * world + 64, DIST__PENDING_MIN); }

/* Connects to host:port, retrying with backoff (10 ms doubling to 1 s)
   until `deadline_ms`: the other side may not be listening yet.  With a
   log (may be NULL), each attempt is a DEBUG line naming `what` ("the
   store of rank 0"), and a wait note (may be NULL) says what it waits for. */
static dist__socket dist__connect_retry(const char *host, int port, int64_t deadline_ms, char *why, size_t cap,
                                        const dist__log *log, dist__wait_note *note, const char *what) {
    /* An attempt gets 50 ms, doubling to 2 s: a listener whose queue was
       full (strangers) dropped our SYN, which the kernel would send again
       only after a second; a fresh attempt sends one at once. */
    int backoff = 10, attempt = 50, tries = 0;
    for (;;) {
        dist__socket s = dist__sock_connect(host, port, deadline_ms, attempt, why, cap);
        int e = dist__errno(), pause;
        tries++;
        if (s != DIST__NO_SOCKET) {
            dist__logf(log, DIST_LOG_DEBUG, "connect: %s at %s:%d: attempt %d: connected", what, host, port, tries);
            return s;
        }
        if (dist__err_no_fds(e) && dist__err_no_fds_kind(e) == 1) {   /* say which limit */
            size_t n = strlen(why);
            long lim = dist__fd_limit();
            if (lim > 0 && n + 1 < cap) dist__format(why + n, cap - n, " (this process's limit: ulimit -n %ld)", lim);
        }
        if (dist__now_ms() >= deadline_ms) {
            dist__logf(log, DIST_LOG_DEBUG, "connect: %s at %s:%d: attempt %d: %s; out of time", what, host, port, tries, why);
            return DIST__NO_SOCKET;   /* `why` says why */
        }
        pause = DIST__MIN(backoff, dist__ms_left(deadline_ms, 1000));
        dist__logf(log, DIST_LOG_DEBUG, "connect: %s at %s:%d: attempt %d: %s; again in %d ms", what, host, port, tries, why, pause);
        if (dist__wait_note_due(note))
            dist__wait_note_say(note, "%s at %s:%d does not answer: %s (%d attempt%s)", what, host, port, why, tries, DIST__PLURAL(tries));
        dist__sleep_ms(pause);
        backoff = DIST__MIN(backoff * 2, 1000);
        attempt = DIST__MIN(attempt * 2, 2000);
    }
}

/* Writes or reads exactly `len` bytes on a non-blocking socket before
   `deadline_ms`.  Returns 0, -1 (error, dist__errno() set), -2 (orderly
   close) or -3 (timed out). */
static int dist__io_all(dist__socket s, void *buf, size_t len, int writing, int64_t deadline_ms) {
    uint8_t *p = (uint8_t *)buf;
    while (len > 0) {
        dist__ssize n = writing ? dist__sock_send(s, p, len) : dist__sock_recv(s, p, len);
        if (n > 0) { p += n; len -= (size_t)n; continue; }
        if (n == 0 && !writing) return -2;
        if (n < 0 && dist__err_interrupted(dist__errno())) continue;
        if (n < 0 && !dist__err_would_block(dist__errno())) return -1;
        {
            dist__pollfd pfd;
            int ms = dist__ms_left(deadline_ms, 1000);
            dist__pollfd_set(&pfd, s, !writing, writing);
            if (ms == 0 && dist__now_ms() >= deadline_ms) return -3;
            if (dist__poll(&pfd, 1, ms) < 0 && !dist__err_interrupted(dist__errno())) return -1;
        }
    }
    return 0;
}

static const char *dist__io_error(int r) {
    return r == -2 ? "the connection was closed" : r == -3 ? "timed out" : dist__err_text(dist__errno());
}

/* [SECTION] store: server
   Request:  u32 body bytes | u8 command | u8 parts | u16 0 | i64 number |
             parts, each u32 length + bytes
   Response: u32 body bytes | i32 status | u32 parts | i64 number | parts
   Clients say hello first (the mesh handshake with purpose STORE); a
   refused hello is answered with status 1 and a u32-length reason. */
enum {
    DIST__STORE_SET = 1, DIST__STORE_GET, DIST__STORE_ADD, DIST__STORE_WAIT,
    DIST__STORE_CHECK, DIST__STORE_CAS, DIST__STORE_DELETE,
    DIST__STORE_CLOCK               /* number: the server's dist__now_ns() (the job clock) */
};
#define DIST__STORE_REQ_HDR   16
#define DIST__STORE_RESP_HDR  20
#define DIST__STORE_MAX_PARTS 64
#define DIST__STORE_MAX_BODY  (DIST__MAX_VALUE * 2 + 65536)

typedef struct dist__kv { char *key; uint8_t *val; size_t vlen; } dist__kv;

typedef struct dist__store_conn {
    dist__socket fd;
    int hello_done, rank, closing;
    int proof_due;              /* hello answered, the client's proof comes next */
    uint8_t my_hello[DIST__HELLO_SIZE], peer_hello[DIST__HELLO_SIZE];
    int64_t hello_deadline;
    uint8_t *in;  size_t in_len, in_cap, in_off;   /* in_off: bytes of `in` already served */
    uint8_t *out; size_t out_len, out_off, out_cap;
    int parked;                 /* a GET or WAIT waiting for its keys */
    int64_t park_deadline;
    long long ticket;           /* a newcomer's (its ADD to dist/join/next): its close is recorded as dist/join/gone/<ticket> */
} dist__store_conn;

typedef struct dist__store_server {
    dist__socket listen_fd;
    dist__wakeup wake;
    dist__thread thread;
    dist__mutex lock;       /* guards `stop` only */
    dist__mutex kv_lock;    /* held by the store's thread while it serves; a launcher reading
                               the store in its own thread takes it (dist_store_host_report) */
    int stop, world, timeout_ms;
    dist__key key;
    dist__store_conn *conns; int nconns, cap_conns;
    dist__kv *kv; int nkv, cap_kv;
    unsigned char *joined;      /* [world] */
    int njoined;
    int64_t last_join_ms;       /* when the last rank joined */
    int64_t *bad_claim_ms;      /* [world]: when a process of this launch first failed to prove the secret for it (0: none) */
    char bad_claim[200];        /* the last such refusal */
    int64_t accept_pause_until;  /* out of descriptors: stop accepting until then */
    char fatal[300];            /* why the job cannot form (a rank of another world size); under lock */
    int all_told;               /* ...and every rank that joined has gone, the others will not come; under lock */
    uint64_t run_id;            /* the launch rank 0 belongs to (0: none): ranks of others are turned away */
    char run_from[96];          /* where that came from, for sentences */
    int port;                   /* where it listens, for sentences */
    dist__log log;
    dist__log_budget log_budget; /* lines about strangers */
} dist__store_server;

static int dist__grow(void **p, size_t *cap, size_t need, size_t elem) {
    size_t n = *cap ? *cap : 16;
    void *q;
    if (need <= *cap) return 0;
    while (n < need) n *= 2;
    q = DIST_REALLOC(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static dist__kv *dist__kv_find(dist__store_server *sv, const char *key, size_t klen) {
    for (int i = 0; i < sv->nkv; i++)
        if (strlen(sv->kv[i].key) == klen && memcmp(sv->kv[i].key, key, klen) == 0) return &sv->kv[i];
    return NULL;
}

static int dist__kv_set(dist__store_server *sv, const char *key, size_t klen, const void *v, size_t vlen) {
    dist__kv *kv = dist__kv_find(sv, key, klen);
    uint8_t *nv = (uint8_t *)DIST_MALLOC(vlen ? vlen : 1);
    if (!nv) return -1;
    if (vlen) memcpy(nv, v, vlen);
    if (!kv) {
        size_t cap = (size_t)sv->cap_kv;
        char *k = (char *)DIST_MALLOC(klen + 1);
        if (!k || dist__grow((void **)&sv->kv, &cap, (size_t)sv->nkv + 1, sizeof *sv->kv) != 0) {
            DIST_FREE(k); DIST_FREE(nv); return -1;
        }
        sv->cap_kv = (int)cap;
        memcpy(k, key, klen); k[klen] = 0;
        kv = &sv->kv[sv->nkv++];
        kv->key = k;
        kv->val = NULL;
    }
    DIST_FREE(kv->val);
    kv->val = nv;
    kv->vlen = vlen;
    return 0;
}

static void dist__store_reply(dist__store_conn *c, int32_t status, int64_t num, const void *val, size_t vlen, int has_val) {
    size_t body = DIST__STORE_RESP_HDR - 4 + (has_val ? 4 + vlen : 0);
    size_t cap = c->out_cap;
    uint8_t *p;
    if (dist__grow((void **)&c->out, &cap, c->out_len + 4 + body, 1) != 0) { c->closing = 1; return; }
    c->out_cap = cap;
    p = c->out + c->out_len;
    dist__put32(p, (uint32_t)body);
    dist__put32(p + 4, (uint32_t)status);
    dist__put32(p + 8, has_val ? 1u : 0u);
    dist__put64(p + 12, (uint64_t)num);
    if (has_val) {
        dist__put32(p + 20, (uint32_t)vlen);
        if (vlen) memcpy(p + 24, val, vlen);
    }
    c->out_len += 4 + body;
}

/* The parts of a complete request `req`; returns their count or -1. */
static int dist__store_parts(const uint8_t *req, size_t body, const uint8_t **ptr, size_t *len) {
    int n = req[5];
    size_t off = DIST__STORE_REQ_HDR;
    if (n > DIST__STORE_MAX_PARTS) return -1;
    for (int i = 0; i < n; i++) {
        uint32_t l;
        if (off + 4 > body + 4) return -1;
        l = dist__get32(req + off);
        off += 4;
        if (l > body + 4 - off) return -1;
        ptr[i] = req + off; len[i] = l;
        off += l;
    }
    return off == body + 4 ? n : -1;
}

/* Keys are C strings of 1 to DIST__MAX_KEY bytes: one with a NUL inside
   would be stored as its prefix (and found by it). */
static int dist__store_keys_ok(int n, const uint8_t *const *ptr, const size_t *len, int first, int last) {
    for (int i = first; i <= last && i < n; i++)
        if (len[i] == 0 || len[i] > DIST__MAX_KEY || memchr(ptr[i], 0, len[i])) return 0;
    return 1;
}

/* When the job cannot form: the reason goes back as the reply (1). */
static int dist__store_fatal(dist__store_server *sv, dist__store_conn *c) {
    char fatal[sizeof sv->fatal];
    dist__mutex_lock(&sv->lock);
    memcpy(fatal, sv->fatal, sizeof fatal);
    dist__mutex_unlock(&sv->lock);
    if (!fatal[0]) return 0;
    dist__store_reply(c, DIST_ERR_INIT, 0, fatal, strlen(fatal), 1);
    return 1;
}

/* Executes the request at c->in + c->in_off.  Returns 1 when done (a reply
   was queued), 0 when it must wait for keys (parked). */
static int dist__store_execute(dist__store_server *sv, dist__store_conn *c, size_t body) {
    const uint8_t *req = c->in + c->in_off, *ptr[DIST__STORE_MAX_PARTS];
    size_t len[DIST__STORE_MAX_PARTS];
    int cmd = req[4];
    int64_t num = (int64_t)dist__get64(req + 8);
    int n = dist__store_parts(req, body, ptr, len);
    dist__kv *kv;
    if (n < 1 || !dist__store_keys_ok(n, ptr, len, 0, cmd == DIST__STORE_WAIT || cmd == DIST__STORE_CHECK ? n - 1 : 0)) {
        dist__store_reply(c, DIST_ERR_PROTOCOL, 0, NULL, 0, 0);
        return 1;
    }
    switch (cmd) {
    case DIST__STORE_SET:
        if (n != 2 || len[1] > DIST__MAX_VALUE) break;
        dist__store_reply(c, dist__kv_set(sv, (const char *)ptr[0], len[0], ptr[1], len[1]) ? DIST_ERR_NOMEM : DIST_OK, 0, NULL, 0, 0);
        return 1;
    case DIST__STORE_GET:
        if (n != 1) break;
        kv = dist__kv_find(sv, (const char *)ptr[0], len[0]);
        /* a job that cannot form hands out no more addresses: a rank that
           asks learns why instead of calling a rank that has given up */
        if (kv && !(len[0] > 10 && memcmp(ptr[0], "dist/addr/", 10) == 0 && dist__store_fatal(sv, c))) {
            dist__store_reply(c, DIST_OK, 0, kv->val, kv->vlen, 1);
            return 1;
        }
        if (kv) return 1;
        goto park;
    case DIST__STORE_WAIT:
    case DIST__STORE_CHECK: {
        int all = 1;
        for (int i = 0; i < n; i++) if (!dist__kv_find(sv, (const char *)ptr[i], len[i])) all = 0;
        if (cmd == DIST__STORE_CHECK || all) { dist__store_reply(c, DIST_OK, all, NULL, 0, 0); return 1; }
        goto park;
    }
    case DIST__STORE_ADD: {
        char text[32], *end;
        long long cur = 0;
        kv = dist__kv_find(sv, (const char *)ptr[0], len[0]);
        if (n != 1) break;
        if (kv) {
            if (kv->vlen == 0 || kv->vlen >= sizeof text) { dist__store_reply(c, DIST_ERR_INVALID, 0, NULL, 0, 0); return 1; }
            memcpy(text, kv->val, kv->vlen); text[kv->vlen] = 0;
            cur = strtoll(text, &end, 10);
            if (*end) { dist__store_reply(c, DIST_ERR_INVALID, 0, NULL, 0, 0); return 1; }
        }
        cur = (long long)((uint64_t)cur + (uint64_t)num);
        if (c->rank < 0 && c->hello_done && num == 1 && len[0] == 14 && memcmp(ptr[0], "dist/join/next", 14) == 0) c->ticket = cur;
        snprintf(text, sizeof text, "%lld", cur);
        dist__store_reply(c, dist__kv_set(sv, (const char *)ptr[0], len[0], text, strlen(text)) ? DIST_ERR_NOMEM : DIST_OK, cur, NULL, 0, 0);
        return 1;
    }
    case DIST__STORE_CAS: {
        int expect_missing = num != 0;
        if (n != 3 || len[2] > DIST__MAX_VALUE) break;
        kv = dist__kv_find(sv, (const char *)ptr[0], len[0]);
        if ((!kv && expect_missing) || (kv && !expect_missing && kv->vlen == len[1] && memcmp(kv->val, ptr[1], len[1]) == 0)) {
            if (dist__kv_set(sv, (const char *)ptr[0], len[0], ptr[2], len[2]) != 0) { dist__store_reply(c, DIST_ERR_NOMEM, 0, NULL, 0, 0); return 1; }
            kv = dist__kv_find(sv, (const char *)ptr[0], len[0]);
        }
        if (kv) dist__store_reply(c, DIST_OK, 0, kv->val, kv->vlen, 1);
        else dist__store_reply(c, DIST_ERR_NOT_FOUND, 0, NULL, 0, 0);
        return 1;
    }
    case DIST__STORE_CLOCK:
        if (n != 1) break;
        dist__store_reply(c, DIST_OK, dist__now_ns(), NULL, 0, 0);
        return 1;
    case DIST__STORE_DELETE:
        if (n != 1) break;
        kv = dist__kv_find(sv, (const char *)ptr[0], len[0]);
        if (kv) {
            DIST_FREE(kv->key); DIST_FREE(kv->val);
            *kv = sv->kv[--sv->nkv];
        }
        dist__store_reply(c, DIST_OK, kv ? 1 : 0, NULL, 0, 0);
        return 1;
    default: break;
    }
    dist__store_reply(c, DIST_ERR_PROTOCOL, 0, NULL, 0, 0);
    return 1;
park:
    if (ptr[0] && len[0] > 5 && memcmp(ptr[0], "dist/", 5) == 0 && dist__store_fatal(sv, c)) return 1;
    if (!c->parked) {
        /* num: how long the client waits, in ms (an int on its side) */
        c->parked = 1;
        c->park_deadline = dist__now_ms() + (num > 0 ? DIST__MIN(num, (int64_t)INT_MAX) : sv->timeout_ms);
    }
    if (dist__now_ms() >= c->park_deadline) {
        dist__store_reply(c, DIST_ERR_TIMEOUT, 0, NULL, 0, 0);
        return 1;
    }
    return 0;
}

/* record: remember the reason for the ranks left waiting (not for
   strangers, who could otherwise overwrite it); fatal: the job cannot form,
   so rendezvous requests fail now with the reason instead of timing out. */
static void dist__store_refuse(dist__store_server *sv, dist__store_conn *c, const char *reason, int record, int fatal) {
    dist__hello h;
    uint8_t b[DIST__HELLO_SIZE + 4];
    size_t rl = strlen(reason), cap = c->out_cap;
    memset(&h, 0, sizeof h);
    h.magic = DIST__MAGIC; h.version = DIST__PROTOCOL_VERSION; h.purpose = DIST__PURPOSE_STORE;
    h.world = sv->world; h.status = 1;
    dist__hello_encode(&h, b);
    dist__put32(b + DIST__HELLO_SIZE, (uint32_t)rl);
    if (dist__grow((void **)&c->out, &cap, c->out_len + sizeof b + rl, 1) == 0) {
        c->out_cap = cap;
        memcpy(c->out + c->out_len, b, sizeof b);
        memcpy(c->out + c->out_len + sizeof b, reason, rl);
        c->out_len += sizeof b + rl;
    }
    c->closing = 1;
    if (record) dist__kv_set(sv, "dist/rejected", 13, reason, rl);
    if (fatal) {
        dist__mutex_lock(&sv->lock);
        if (!sv->fatal[0]) dist__format(sv->fatal, sizeof sv->fatal, "%s", reason);
        dist__mutex_unlock(&sv->lock);
        dist__kv_set(sv, "dist/fatal", 10, reason, rl);
    }
    if (record || fatal || dist__log_budget_take(&sv->log, &sv->log_budget, "store refused a client"))
        dist__logf(&sv->log, DIST_LOG_WARN, "store refused a client: %s", reason);
}

static void dist__store_queue(dist__store_conn *c, const void *b, size_t n) {
    size_t cap = c->out_cap;
    if (dist__grow((void **)&c->out, &cap, c->out_len + n, 1) == 0) {
        c->out_cap = cap;
        memcpy(c->out + c->out_len, b, n);
        c->out_len += n;
    } else {
        c->closing = 1;
    }
}

/* The client's hello: answered with the store's hello and proof; nothing
   of what it claims counts before its own proof arrives. */
static void dist__store_hello(dist__store_server *sv, dist__store_conn *c) {
    dist__hello h;
    char why[200], peer[64] = "?";
    uint8_t proof[DIST__PROOF_SIZE];
    int port = 0;
    dist__sock_name(c->fd, 1, peer, sizeof peer, &port);
    if (dist__hello_decode(c->in + c->in_off, &h, why, sizeof why) != 0 || h.purpose != DIST__PURPOSE_STORE) {
        char reason[300];
        dist__format(reason, sizeof reason, "a client at %s:%d is not a dist rank of this job: %s", peer, port,
                     h.purpose != DIST__PURPOSE_STORE && h.magic == DIST__MAGIC ? "wrong purpose" : why);
        dist__store_refuse(sv, c, reason, 0, 0);
        return;
    }
    memcpy(c->peer_hello, c->in + c->in_off, DIST__HELLO_SIZE);
    dist__hello_make(&h, DIST__PURPOSE_STORE, 0, 0, sv->world, &sv->key, c->my_hello);
    dist__proof(&sv->key, 'A', c->my_hello, c->peer_hello, proof);
    dist__store_queue(c, c->my_hello, DIST__HELLO_SIZE);
    dist__store_queue(c, proof, sizeof proof);
    c->proof_due = 1;
}

/* The job has formed: every rank finished its init (each adds 1 to
   "dist/formed" last); without a run id, also the wait for a second claim
   is over (rank 0 sets "dist/settled", see dist__settle). */
static int dist__store_formed(dist__store_server *sv) {
    const dist__kv *kv = dist__kv_find(sv, "dist/formed", 11);
    char text[24];
    if (!sv->run_id) return dist__kv_find(sv, "dist/settled", 12) != NULL;
    if (!kv || kv->vlen == 0 || kv->vlen >= sizeof text) return 0;
    memcpy(text, kv->val, kv->vlen); text[kv->vlen] = 0;
    return atoi(text) >= sv->world;
}

/* A process of this launch (its hello says so) failed to prove the secret
   for rank h->rank, or hung up on the store's proof (which its own secret
   did not verify): remembered for dist__store_bad_secret. */
static void dist__store_bad_claim(dist__store_server *sv, const dist__hello *h, const char *why) {
    if ((h->flags & DIST__HELLO_JOIN) || h->world != sv->world || h->job != sv->run_id || h->rank < 0 || h->rank >= sv->world ||
        sv->joined[h->rank]) return;
    if (!sv->bad_claim_ms[h->rank]) sv->bad_claim_ms[h->rank] = dist__now_ms();
    dist__format(sv->bad_claim, sizeof sv->bad_claim, "%s", why);
}

/* The client's proof: then its rank and world size are believed. */
static void dist__store_proof(dist__store_server *sv, dist__store_conn *c) {
    dist__hello h;
    char why[300], reason[200], peer[64] = "?";
    uint8_t b[DIST__HELLO_SIZE];
    int port = 0, formed;
    dist__sock_name(c->fd, 1, peer, sizeof peer, &port);
    dist__hello_decode(c->peer_hello, &h, why, sizeof why);   /* checked in dist__store_hello */
    c->proof_due = 0;
    if (dist__proof_check(&sv->key, 'C', c->peer_hello, c->my_hello, c->in + c->in_off, reason, sizeof reason) != 0) {
        /* not recorded: a stranger must not be able to speak for the job
           (but see dist__store_bad_secret) */
        dist__format(why, sizeof why, "a client at %s:%d claiming rank %d: %s", peer, port, (int)h.rank, reason);
        dist__store_bad_claim(sv, &h, why);
        dist__store_refuse(sv, c, why, 0, 0);
        return;
    }
    if (h.flags & DIST__HELLO_JOIN) {
        /* A newcomer (dist_grow): it claims no rank; of this launch, it may
           ask to join (the running ranks decide when). */
        if (h.job != sv->run_id) {
            dist__format(why, sizeof why, "a newcomer at %s:%d has %s, not this job's: are two launches sharing port %d?", peer, port,
                         h.job ? "another launch's run id" : "no run id", sv->port);
            dist__store_refuse(sv, c, why, 0, 0);
            return;
        }
        c->rank = -1;
        c->hello_done = 1;
        memset(&h, 0, sizeof h);
        h.magic = DIST__MAGIC; h.version = DIST__PROTOCOL_VERSION; h.purpose = DIST__PURPOSE_STORE; h.world = sv->world;
        dist__hello_encode(&h, b);
        dist__store_queue(c, b, sizeof b);
        return;
    }
    if ((formed = dist__store_formed(sv)) != 0) {
        /* The job has formed: a latecomer changes nothing (not recorded,
           not fatal), whatever it claims. */
        dist__format(why, sizeof why, "a process at %s:%d claiming rank %d of %d came after the job's %d rank%s had joined", peer,
                     port, (int)h.rank, (int)h.world, sv->world, DIST__PLURAL(sv->world));
        dist__store_refuse(sv, c, why, 0, 0);
        return;
    }
    if (h.job != sv->run_id) {
        /* A rank of another launch (say, one started on the same port):
           turned away, the job unharmed; it fails at once, saying why. */
        char theirs[40], ours[120];
        dist__format(theirs, sizeof theirs, h.job ? "another launch's run id" : "no run id");
        dist__format(ours, sizeof ours, sv->run_id ? "this job's (%s)" : "this job, which has none", sv->run_from);
        dist__format(why, sizeof why, "a process at %s:%d claiming rank %d has %s, not %s: are two launches sharing port %d?", peer, port,
                     (int)h.rank, theirs, ours, sv->port);
        dist__store_refuse(sv, c, why, 1, 0);   /* recorded: the ranks left waiting say why */
        return;
    }
    if (h.world != sv->world) {
        dist__format(why, sizeof why, "a process at %s:%d says world size %d (rank %d), but this job has world size %d",
                     peer, port, (int)h.world, (int)h.rank, sv->world);
        dist__store_refuse(sv, c, why, 1, 1);
        return;
    }
    if (h.rank < 0 || h.rank >= sv->world || sv->joined[h.rank]) {
        /* While the job forms, a rank claimed twice means two launches
           (or two processes given one rank) met here: nothing tells which
           claim is right, so the job fails, loudly, instead of forming from
           both.  Once it has formed, a latecomer changes nothing. */
        char first[80] = "";
        for (int i = 0; i < sv->nconns; i++) {
            dist__store_conn *o = &sv->conns[i];
            int oport = 0;
            char oaddr[64] = "?";
            if (o == c || !o->hello_done || o->rank != h.rank) continue;
            dist__sock_name(o->fd, 1, oaddr, sizeof oaddr, &oport);
            dist__format(first, sizeof first, " (first from %s:%d)", oaddr, oport);
        }
        dist__format(why, sizeof why, "rank %d was claimed twice while the job formed, again from %s:%d%s: are two launches sharing "
                     "port %d? (give each launch its own DIST_RUN_ID, or start them with distrun or dist_spawn)",
                     (int)h.rank, peer, port, first, sv->port);
        dist__store_refuse(sv, c, why, 1, 1);
        return;
    }
    sv->joined[h.rank] = 1;
    sv->njoined++;
    sv->last_join_ms = dist__now_ms();
    dist__logf(&sv->log, DIST_LOG_DEBUG, "store: rank %d joined from %s:%d (%d of %d rank%s)", (int)h.rank, peer, port, sv->njoined, sv->world,
               DIST__PLURAL(sv->world));
    c->rank = h.rank;
    c->hello_done = 1;
    memset(&h, 0, sizeof h);
    h.magic = DIST__MAGIC; h.version = DIST__PROTOCOL_VERSION; h.purpose = DIST__PURPOSE_STORE; h.world = sv->world;
    dist__hello_encode(&h, b);
    dist__store_queue(c, b, sizeof b);
}

/* Runs every complete request at c->in + c->in_off, stopping at a parked
   one; the served bytes are dropped once, at the end (a burst of small
   requests costs no quadratic copying). */
static void dist__store_serve_some(dist__store_server *sv, dist__store_conn *c) {
    while (!c->closing) {
        size_t used;
        if (c->proof_due) {
            if (c->in_len - c->in_off < DIST__PROOF_SIZE) return;
            dist__store_proof(sv, c);
            used = DIST__PROOF_SIZE;
        } else if (!c->hello_done) {
            if (c->in_len - c->in_off < DIST__HELLO_SIZE) {
                char why[100], reason[200], peer[64] = "?";
                int port = 0;
                if (dist__hello_prefix_check(c->in + c->in_off, c->in_len - c->in_off, why, sizeof why) == 0) return;
                dist__sock_name(c->fd, 1, peer, sizeof peer, &port);
                dist__format(reason, sizeof reason, "a client at %s:%d is not a dist rank of this job: %s", peer, port, why);
                dist__store_refuse(sv, c, reason, 0, 0);
                return;
            }
            dist__store_hello(sv, c);
            used = DIST__HELLO_SIZE;
        } else {
            uint32_t body;
            if (c->in_len - c->in_off < 4) return;
            body = dist__get32(c->in + c->in_off);
            if (body < DIST__STORE_REQ_HDR - 4 || body > DIST__STORE_MAX_BODY) { c->closing = 1; return; }
            if (c->in_len - c->in_off < 4 + (size_t)body) return;
            if (!dist__store_execute(sv, c, body)) return;
            c->parked = 0;
            used = 4 + (size_t)body;
        }
        c->in_off += used;
    }
}

static void dist__store_serve(dist__store_server *sv, dist__store_conn *c) {
    dist__store_serve_some(sv, c);
    if (c->in_off) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
}

/* One turn of the store's loop takes at most DIST__STORE_ACCEPT_BURST new
   connections and DIST__STORE_READ_BURST bytes from one client, then
   serves the others: a flood of connections, or one huge request, delays
   a rank's hello by one turn, not by the whole flood (where accept is
   slow, as under Wine, it starved every rank of the job). */
#define DIST__STORE_ACCEPT_BURST 64
#define DIST__STORE_READ_BURST   (1u << 20)

static void dist__store_read(dist__store_server *sv, dist__store_conn *c) {
    size_t taken = 0;
    while (taken < DIST__STORE_READ_BURST) {
        size_t cap = c->in_cap, want;
        dist__ssize n;
        /* before the handshake, room for it alone */
        if (dist__grow((void **)&c->in, &cap, c->hello_done ? c->in_len + 65536 : DIST__HELLO_SIZE + DIST__PROOF_SIZE, 1) != 0) {
            c->closing = 1;
            return;
        }
        c->in_cap = cap;
        want = c->in_cap - c->in_len;
        if (!c->hello_done) {
            /* Before the handshake a client gets no more memory than the
               step it is at needs (a stranger cannot make us hold more). */
            size_t step = c->proof_due ? DIST__PROOF_SIZE : DIST__HELLO_SIZE;
            if (c->in_len >= step) break;
            want = step - c->in_len;
        }
        n = dist__sock_recv(c->fd, c->in + c->in_len, want);
        if (n > 0) {
            c->in_len += (size_t)n;
            taken += (size_t)n;
            if (c->in_len > DIST__STORE_MAX_BODY + 4 + 65536) { c->closing = 1; return; }
            continue;
        }
        if (n < 0 && dist__err_interrupted(dist__errno())) continue;
        if (n < 0 && dist__err_would_block(dist__errno())) break;
        if (c->proof_due) {   /* it hung up on our proof: another secret? */
            dist__hello h;
            char why[100], reason[300], peer[64] = "?";
            int port = 0;
            dist__sock_name(c->fd, 1, peer, sizeof peer, &port);
            if (dist__hello_decode(c->peer_hello, &h, why, sizeof why) == 0) {
                dist__format(reason, sizeof reason, "a process at %s:%d claiming rank %d hung up on the store's proof of the secret "
                             "(its own secret is not this job's?)", peer, port, (int)h.rank);
                dist__store_bad_claim(sv, &h, reason);
            }
        }
        c->closing = 1;
        c->out_len = c->out_off = 0;
        return;
    }
    if (!c->parked) dist__store_serve(sv, c);
}

static void dist__store_flush(dist__store_conn *c) {
    while (c->out_off < c->out_len) {
        dist__ssize n = dist__sock_send(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n > 0) { c->out_off += (size_t)n; continue; }
        if (n < 0 && dist__err_interrupted(dist__errno())) continue;
        if (n < 0 && dist__err_would_block(dist__errno())) return;
        c->closing = 1; c->out_len = c->out_off = 0;
        return;
    }
    c->out_len = c->out_off = 0;
}

/* A rank with the wrong secret never joins, and the others would wait for
   it until their timeout.  Its refusals are not believed at once (anyone
   can claim a rank with a bad proof), but when every rank still missing
   was claimed with a bad proof and none came with a good one for
   DIST__BAD_SECRET_MS (a quarter of the timeout at most) after the last
   join and the first bad claim, the job cannot form: every rank fails
   now, saying so.  Returns when to look again (ms; 0: no need). */
static int64_t dist__store_bad_secret(dist__store_server *sv) {
    int64_t since = sv->last_join_ms, grace = DIST__MIN((int64_t)DIST__BAD_SECRET_MS, (int64_t)sv->timeout_ms / 4);
    char missing[120], reason[300];
    int off = 0, n = 0;
    if (sv->fatal[0] || sv->njoined == sv->world || dist__store_formed(sv)) return 0;
    for (int r = 0; r < sv->world; r++) {
        if (sv->joined[r]) continue;
        if (!sv->bad_claim_ms[r]) return 0;
        since = DIST__MAX(since, sv->bad_claim_ms[r]);
        if (off < (int)sizeof missing - 16) off += snprintf(missing + off, sizeof missing - (size_t)off, "%s%d", n ? ", " : "", r);
        n++;
    }
    if (dist__now_ms() < since + grace) return since + grace;
    dist__format(reason, sizeof reason, "%s %s could not prove the job's secret and every other rank has joined (check DIST_SECRET or "
                 "cfg.secret there); the last refusal: %s", n > 1 ? "ranks" : "rank", missing, sv->bad_claim);
    dist__mutex_lock(&sv->lock);
    dist__format(sv->fatal, sizeof sv->fatal, "%s", reason);
    dist__mutex_unlock(&sv->lock);
    dist__kv_set(sv, "dist/fatal", 10, reason, strlen(reason));
    dist__logf(&sv->log, DIST_LOG_WARN, "store: the job cannot form: %s", reason);
    return 0;
}

static void dist__store_accept(dist__store_server *sv) {
    for (int k = 0; k < DIST__STORE_ACCEPT_BURST; k++) {
        size_t cap = (size_t)sv->cap_conns;
        dist__store_conn *c;
        dist__socket s = dist__sock_accept(sv->listen_fd);
        int waiting = 0;
        if (s == DIST__NO_SOCKET) {
            int e = dist__errno();
            if (dist__err_no_fds(e)) {
                /* Paused, not spun on; the ranks left waiting say why. */
                if (!dist__kv_find(sv, "dist/trouble", 12)) {
                    char t[300], text[200];
                    dist__no_fds_text(text, sizeof text, e, sv->world, 0);
                    dist__format(t, sizeof t, "rank 0's store could not take connections: %s", text);
                    dist__kv_set(sv, "dist/trouble", 12, t, strlen(t));
                    dist__logf(&sv->log, DIST_LOG_WARN, "%s", t);
                }
                sv->accept_pause_until = dist__now_ms() + 100;
            }
            return;
        }
        if (dist__grow((void **)&sv->conns, &cap, (size_t)sv->nconns + 1, sizeof *sv->conns) != 0) { dist__close(s); return; }
        sv->cap_conns = (int)cap;
        c = &sv->conns[sv->nconns++];
        memset(c, 0, sizeof *c);
        c->fd = s;
        c->rank = -1;
        c->hello_deadline = dist__now_ms() + DIST__MIN(sv->timeout_ms, 30000);
        /* A rank's hello is usually here already: read now, so it counts
           as progress before anything is dropped. */
        dist__store_read(sv, c);
        /* Connections still in their handshake are bounded: the least
           advanced makes room (DIST__PENDING_MIN). */
        for (int i = 0; i < sv->nconns; i++) waiting += !sv->conns[i].hello_done && !sv->conns[i].closing;
        if (waiting > dist__pending_cap(sv->world)) {
            dist__store_conn *v = NULL;
            int vstage = 3;
            for (int i = 0; i < sv->nconns; i++) {
                dist__store_conn *o = &sv->conns[i];
                int stage = o->proof_due ? 2 : o->in_len > 0;
                if (o->hello_done || o->closing) continue;
                if (stage < vstage || (stage == vstage && o->hello_deadline < v->hello_deadline)) { v = o; vstage = stage; }
            }
            if (v) { v->closing = 1; v->out_len = v->out_off = 0; }
        }
    }
}

static void dist__store_conn_free(dist__store_conn *c) {
    dist__close(c->fd);
    DIST_FREE(c->in);
    DIST_FREE(c->out);
}

static int dist__store_stopping(dist__store_server *sv) {
    int s;
    dist__mutex_lock(&sv->lock);
    s = sv->stop;
    dist__mutex_unlock(&sv->lock);
    return s;
}

static DIST__THREAD_RETURN dist__store_thread(void *arg) {
    dist__store_server *sv = (dist__store_server *)arg;
    dist__pollfd *pfds = NULL;
    size_t pcap = 0;
    while (!dist__store_stopping(sv)) {
        int n = 0, timeout = 1000, rd, wr;
        int64_t now = dist__now_ms();
        dist__mutex_lock(&sv->kv_lock);        /* (all but the poll) */
        if (dist__grow((void **)&pfds, &pcap, (size_t)sv->nconns + 2, sizeof *pfds) != 0) {
            dist__mutex_unlock(&sv->kv_lock);
            dist__sleep_ms(10);
            continue;
        }
        dist__pollfd_set(&pfds[n], sv->wake.rfd, 1, 0); n++;
        /* out of descriptors: the listening socket stays readable, so it
           is left out of the poll for a moment rather than spun on */
        dist__pollfd_set(&pfds[n], now < sv->accept_pause_until ? DIST__NO_SOCKET : sv->listen_fd, 1, 0); n++;
        if (now < sv->accept_pause_until) timeout = (int)DIST__MIN((int64_t)timeout, sv->accept_pause_until - now);
        for (int i = 0; i < sv->nconns; i++) {
            dist__store_conn *c = &sv->conns[i];
            dist__pollfd_set(&pfds[n], c->fd, 1, c->out_len > c->out_off);
            n++;
            if (c->parked) timeout = (int)DIST__MIN((int64_t)timeout, DIST__MAX(c->park_deadline - now, 0));
        }
        dist__log_budget_flush(&sv->log, &sv->log_budget, "store refused a client", 0);
        {   /* a wrong secret's deadline */
            int64_t at = dist__store_bad_secret(sv);
            if (at) timeout = (int)DIST__MIN((int64_t)timeout, DIST__MAX(at - now, (int64_t)0) + 1);
        }
        dist__mutex_unlock(&sv->kv_lock);
        if (dist__poll(pfds, n, timeout) < 0 && !dist__err_interrupted(dist__errno())) dist__sleep_ms(1);
        dist__mutex_lock(&sv->kv_lock);
        if (dist__pollfd_ready(&pfds[0], &rd, &wr)) dist__wakeup_drain(&sv->wake);
        for (int i = 0; i < sv->nconns; i++) {
            dist__store_conn *c = &sv->conns[i];
            dist__pollfd_ready(&pfds[i + 2], &rd, &wr);
            if (rd) dist__store_read(sv, c);
            if (c->out_len > c->out_off) dist__store_flush(c);
        }
        if (dist__pollfd_ready(&pfds[1], &rd, &wr)) dist__store_accept(sv);
        /* A write to the store may have released parked requests; deadlines
           may have passed; hellos that never came are dropped. */
        now = dist__now_ms();
        for (int i = 0; i < sv->nconns; i++) {
            dist__store_conn *c = &sv->conns[i];
            if (c->parked) { dist__store_serve(sv, c); if (c->out_len > c->out_off) dist__store_flush(c); }
            if (!c->hello_done && !c->closing && now > c->hello_deadline) c->closing = 1;
        }
        for (int i = 0; i < sv->nconns;) {
            dist__store_conn *c = &sv->conns[i];
            if (c->closing && c->out_len == c->out_off) {
                if (c->ticket > 0) {   /* a newcomer went: the ranks growing need not wait for it (dist__mesh_connect) */
                    char k[48];
                    snprintf(k, sizeof k, "dist/join/gone/%lld", c->ticket);
                    dist__kv_set(sv, k, strlen(k), "1", 1);
                }
                dist__store_conn_free(c);
                sv->conns[i] = sv->conns[--sv->nconns];
            } else i++;
        }
        if (sv->fatal[0]) {   /* rank 0 need not linger once everyone who could learn why did */
            int all = 1;
            for (int i = 0; i < sv->nconns && all; i++) all = !(sv->conns[i].hello_done && sv->conns[i].rank != 0);
            for (int r = 0; r < sv->world && all; r++) all = sv->joined[r] || sv->bad_claim_ms[r];
            dist__mutex_lock(&sv->lock);
            sv->all_told = all;
            dist__mutex_unlock(&sv->lock);
        }
        dist__mutex_unlock(&sv->kv_lock);
    }
    DIST_FREE(pfds);
    return DIST__THREAD_RETURN_VALUE;
}

static void dist__store_server_free(dist__store_server *sv) {
    if (!sv) return;
    for (int i = 0; i < sv->nconns; i++) dist__store_conn_free(&sv->conns[i]);
    for (int i = 0; i < sv->nkv; i++) { DIST_FREE(sv->kv[i].key); DIST_FREE(sv->kv[i].val); }
    DIST_FREE(sv->conns);
    DIST_FREE(sv->kv);
    DIST_FREE(sv->joined);
    DIST_FREE(sv->bad_claim_ms);
    dist__close(sv->listen_fd);
    dist__wakeup_close(&sv->wake);
    dist__mutex_destroy(&sv->lock);
    dist__mutex_destroy(&sv->kv_lock);
    DIST_FREE(sv);
}

static void dist__store_server_stop(dist__store_server *sv) {
    if (!sv) return;
    dist__mutex_lock(&sv->lock);
    sv->stop = 1;
    dist__mutex_unlock(&sv->lock);
    dist__wakeup_signal(&sv->wake);
    dist__thread_join(sv->thread);
    dist__log_budget_flush(&sv->log, &sv->log_budget, "store refused a client", 1);
    dist__store_server_free(sv);
}

/* Takes ownership of `listen_fd`. */
static dist__store_server *dist__store_server_start(dist__socket listen_fd, int world, int timeout_ms,
                                                    const dist__key *key, const dist__log *log, uint64_t run_id, const char *run_from) {
    dist__store_server *sv = (dist__store_server *)DIST_MALLOC(sizeof *sv);
    char host[64];
    if (!sv) { dist__close(listen_fd); return NULL; }
    memset(sv, 0, sizeof *sv);
    sv->run_id = run_id;
    dist__format(sv->run_from, sizeof sv->run_from, "%s", run_from);
    dist__sock_name(listen_fd, 0, host, sizeof host, &sv->port);
    sv->listen_fd = listen_fd;
    sv->world = world;
    sv->timeout_ms = timeout_ms;
    sv->key = *key;
    sv->log = *log;
    sv->wake.rfd = sv->wake.wfd = DIST__NO_SOCKET;
    dist__mutex_init(&sv->lock);
    dist__mutex_init(&sv->kv_lock);
    sv->joined = (unsigned char *)DIST_MALLOC((size_t)world);
    sv->bad_claim_ms = (int64_t *)DIST_MALLOC(sizeof(int64_t) * (size_t)world);
    if (!sv->joined || !sv->bad_claim_ms || dist__wakeup_open(&sv->wake) != 0) { dist__store_server_free(sv); return NULL; }
    memset(sv->joined, 0, (size_t)world);
    memset(sv->bad_claim_ms, 0, sizeof(int64_t) * (size_t)world);
    sv->last_join_ms = dist__now_ms();
    dist__set_nonblocking(listen_fd, 1);
    if (dist__thread_start(&sv->thread, dist__store_thread, sv) != 0) { dist__store_server_free(sv); return NULL; }
    return sv;
}

/* [SECTION] core structures
   ---------------------------------------------------------------------------
   A request is an operation in flight; a message is what arrived before
   anyone asked for it; the match index finds one from the other; a peer is
   one connection (its transport, its send queues, its receive parser and
   its flow-control account); the engine is one world's progress; struct
   dist is a communicator (the world or a group). */
struct dist__engine;
struct dist__peer;
typedef struct dist__ring dist__ring;          /* [SECTION] transport: shared memory */
typedef struct dist__shm_hdr dist__shm_hdr;
typedef struct dist__shm_link dist__shm_link;

/* Intrusive doubly linked lists with a sentinel: O(1) append and removal
   from anywhere.  A node with next == NULL is on no list. */
typedef struct dist__link { struct dist__link *prev, *next; } dist__link;
#define DIST__CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
static void dist__list_init(dist__link *s) { s->prev = s->next = s; }
static int dist__list_empty(const dist__link *s) { return s->next == s; }
static int dist__linked(const dist__link *n) { return n->next != NULL; }
static void dist__list_append(dist__link *s, dist__link *n) { n->prev = s->prev; n->next = s; s->prev->next = n; s->prev = n; }
static void dist__list_prepend(dist__link *s, dist__link *n) { n->next = s->next; n->prev = s; s->next->prev = n; s->next = n; }
static void dist__unlink(dist__link *n) {
    if (!n->next) return;
    n->prev->next = n->next; n->next->prev = n->prev;
    n->prev = n->next = NULL;
}

/* The match index: FIFO queues keyed by (table, communicator, frame kind,
   tag or sequence, source), found through one open-addressing hash table,
   so a receive finds its message, and a message its receive, in constant
   time however many others wait.  Empty queues leave the table. */
enum {
    DIST__IX_POSTED = 0,     /* receives from one source, in posting order */
    DIST__IX_POSTED_ANY,     /* receives from any source (src -1) */
    DIST__IX_UNEXP,          /* messages from one source, in arrival order */
    DIST__IX_UNEXP_ANY,      /* the same messages, every source, in arrival order (src -1) */
    DIST__IX_RDV_SEND,       /* our announced sends (src: the peer, tag: the rendezvous id) */
    DIST__IX_RDV_RECV,       /* receives that took an announcement and wait for its payload */
    DIST__IX_RDV_ANNOUNCED   /* announcements no receive has taken yet (messages) */
};
typedef struct dist__queue {
    uint64_t hash;
    uint32_t comm;
    int32_t src;
    int64_t tag;
    uint8_t table, kind;
    dist__link items;
    struct dist__queue *next_free;
} dist__queue;
typedef struct dist__index {
    dist__queue **slot;           /* cap (a power of two) slots, at most half used */
    size_t cap, used;
    dist__queue *free;            /* queues to reuse */
} dist__index;

typedef struct dist__msg {         /* a message nobody had asked for yet */
    dist__link lsrc, lany;         /* its queues in the match index (by source, any source) */
    dist__link lrdv;               /* an announcement: its entry by rendezvous id */
    dist__queue *qsrc, *qany, *qrdv;   /* the queues those links are in */
    struct dist__msg *next_free;
    int src;
    dist__frame f;                 /* its header (and an announcement's trailer) */
    uint32_t charge;               /* flow-control bytes it holds (0: pulled, or to itself) */
    uint8_t *data; size_t cap;     /* an eager message's payload (`small`, or a pooled buffer) */
    int complete, dead;            /* dead: refused by a receive; dropped when complete */
    dist_result err;               /* its payload was lost: why */
    dist_req_t *claimed;           /* a receive waiting for the rest of it */
    uint8_t small[64];
} dist__msg;

enum { DIST__REQ_SEND = 1, DIST__REQ_RECV = 2, DIST__REQ_COLL = 3 /* an async collective */ };

/* Where a request is (what withdrawing it must undo). */
enum {
    DIST__RS_IDLE = 0,
    DIST__RS_QUEUED,       /* send: in its peer's send queue, waiting for its turn and credit */
    DIST__RS_WIRE,         /* send: its frame is being written (the peer's wire) */
    DIST__RS_ANNOUNCED,    /* send: announced; waits for CTS (or, by reference, for ACK) */
    DIST__RS_STREAM,       /* send: the receiver said go; its payload is in the stream queue */
    DIST__RS_REVOKING,     /* send by reference that timed out: waits for the receiver to say it dropped it */
    DIST__RS_POSTED,       /* receive: in the match index */
    DIST__RS_CLAIMED,      /* receive: took an unexpected message still arriving (r->msg) */
    DIST__RS_READING,      /* receive: its payload is being read into it (the peer's rx.req) */
    DIST__RS_AWAITING,     /* receive: took an announcement, said CTS, waits for the payload */
    DIST__RS_PULLING       /* receive: took an announcement by reference; in the peer's pull queue */
};

struct dist_req {
    dist__link link;               /* the match index, a send/stream/pull queue or a rendezvous entry */
    dist__queue *ixq;              /* ...the index queue, when it is one */
    dist_req_t *next;              /* free list; an async collective's list */
    struct dist__engine *eng;
    dist_t *comm;
    int kind, state, peer, source;
    uint8_t frame_kind;
    uint32_t comm_id;
    int64_t tag;
    dist_dtype dtype;
    size_t count;
    uint64_t nbytes;
    uint64_t moved;                /* payload bytes written (send) or received (receive) so far */
    const uint8_t *sbuf;
    uint8_t *rbuf;
    uint64_t sid;                  /* rendezvous id: a send's own; a receive's sender's */
    uint64_t ref;                  /* receive by reference: the payload's address in the sender */
    uint64_t post_seq;             /* receive: posting order (a source's queue against the wildcard's) */
    dist__msg *msg;
    uint64_t opno;
    int done, pooled;
    int by_ref;                    /* send: the peer copies it from our memory */
    int sync;                      /* send: synchronous mode (dist_issend): announced, never eager */
    int rdv_counted;               /* send: counted in its peer's rdv_out */
    int refused;                   /* send: the receiver gave up on it while a piece was on the wire */
    int begun;                     /* receive by reference: its copy has begun */
    uint32_t charge;               /* send: what it spent of its peer's budget */
    int pulled;                    /* send: the receiver asked for it (PULL): goes ahead, no credit */
    /* collective frames: the descriptor every rank must agree on */
    uint8_t coll, op;
    int32_t root;
    int reduce;                    /* receive: 0 copies, op + 1 combines into rbuf */
    int in_first;                  /* ...as op(incoming, rbuf) instead of op(rbuf, incoming) */
    int stamped;                   /* send: carries the stamp below; receive: its frame did (see "stats and traces") */
    int32_t st_rank;
    int64_t st_last, st_first;
    int detached;                  /* released when complete; nobody waits */
    int by_peer;                   /* failed because another rank reported a failure */
    dist_result withdrawn;         /* why its waiter withdrew it: DIST_ERR_TIMEOUT, or DIST_ERR_REVOKED (its communicator) */
    dist_req_t *cnext;             /* the collective's list of its requests */
    uint64_t rec_n;                /* point-to-point: its flight-recorder entry's number + 1 (0: none) */
    dist_result result;
    char *err;                     /* its failure's sentence (allocated when it fails; NULL: none) */
};

enum { DIST__PEER_OK = 0, DIST__PEER_LEFT, DIST__PEER_FAILED };

/* A control frame waiting to go out; `carrier` holds an ABORT's sentence. */
typedef struct dist__ctl { uint8_t hdr[DIST__HDR_SIZE]; dist_req_t *carrier; } dist__ctl;

/* The frame being written to a peer. */
enum { DIST__WIRE_CTL = 1, DIST__WIRE_EAGER, DIST__WIRE_ANNOUNCE, DIST__WIRE_SEGMENT, DIST__WIRE_BYE };
typedef struct dist__wire {
    uint8_t hdr[DIST__HDR_MAX];
    size_t hlen;                   /* 0: idle */
    const uint8_t *body;
    uint64_t blen, off;            /* off: bytes of header and body written */
    int what;                      /* DIST__WIRE_* */
    dist_req_t *req;               /* whose frame (control frames: an ABORT's carrier, or NULL) */
} dist__wire;

/* The frame being read from a peer. */
typedef struct dist__rx {
    uint8_t *stage; size_t pos, end;   /* bytes read from the transport, not yet used */
    int drained;                   /* the last read emptied the transport */
    int reads_left;                /* reads this turn may still make (fairness between peers) */
    uint8_t hdr[DIST__HDR_MAX]; size_t got, need;
    int in_payload;
    dist__frame cur;
    uint8_t *dst;                  /* NULL: discard the payload */
    int segment;                   /* the payload is a piece of an announced one (req: its receive) */
    uint64_t left;
    dist_req_t *req;               /* the receive it goes to */
    dist__msg *msg;                /* ...or the unexpected message */
    uint32_t charge;               /* flow-control bytes held until the payload has landed */
    int abort;                     /* the payload is an abort notice, read into abort_text */
    char abort_text[DIST__MAX_ABORT_TEXT + 1];
} dist__rx;

typedef struct dist__peer {
    const struct dist__transport *t;
    dist__socket fd;               /* TCP: the stream; shared memory: the doorbell and lifeline */
    int rank, state;
    char why[200];
    /* sending */
    dist__ctl *ctl; unsigned ctl_head, ctl_count, ctl_cap;   /* control frames, in order */
    dist__link sendq;              /* messages in posting order (credit, turn) */
    dist__link streamq;            /* announced payloads the receiver asked for */
    dist__wire wire;
    int bye_queued, bye_sent, stream_turn;
    int bye_answered;              /* it answered our goodbye (it goes on; we may close) */
    uint64_t next_sid;
    int rdv_out;                   /* announced sends not finished (the goodbye waits for them) */
    /* flow control, sending: what the peer lets us park in its memory */
    int64_t credit;
    uint64_t granted, charged;     /* every credit it handed us, every byte we spent */
    uint64_t budget;               /* its first grant: the whole budget (0: not heard yet) */
    int blocked;                   /* we told it we wait for credit */
    /* receiving */
    dist__rx rx;
    dist__link pullq;              /* receives to copy by reference, in order (shared memory) */
    /* flow control, receiving: what it parks here */
    uint64_t held;                 /* bytes its messages hold (unexpected, or arriving) */
    uint64_t owed;                 /* bytes freed and not handed back yet */
    int peer_blocked;              /* it told us it waits for credit */
    int pull_out;                  /* a PULL of ours is unanswered */
    int64_t pull_miss_ns;          /* when it last said it had nothing to pull */
    uint64_t ref_min;              /* payloads this large may go by reference (0: never) */
    dist__shm_link *shm;           /* shared-memory state (NULL over TCP) */
} dist__peer;

/* A transport moves a peer's byte stream; the engine above frames it,
   matches it and counts credit the same way whatever carries it.  TCP and
   shared memory are the two, see their sections. */
typedef struct dist__transport {
    const char *name;
    /* Bytes of the peer's stream into buf: > 0, 0 at its end, or -1 with
       errno (EAGAIN: none yet). */
    dist__ssize (*rx)(struct dist__engine *e, dist__peer *p, void *buf, size_t len);
    /* Writes what fits of the pieces: bytes written, or -1 with errno
       (EAGAIN: no room). */
    dist__ssize (*tx)(struct dist__engine *e, dist__peer *p, const dist__iov *iov, int n);
    /* Work that poll() cannot report: DIST__PEND_* bits (-1: the peer's
       state is corrupt).  NULL: none ever (TCP). */
    int (*pending)(struct dist__engine *e, dist__peer *p);
    /* Its socket polled readable (TCP: its stream; shared memory: a
       doorbell, or the end of the peer). */
    void (*readable)(struct dist__engine *e, dist__peer *p);
    /* Wakes the peer if it sleeps waiting for us (shared memory). */
    void (*doorbell)(struct dist__engine *e, dist__peer *p);
    /* Payloads by reference (NULL: not supported): copies the next piece
       of receive r's announced payload from the sender's memory (1 if it
       moved, 0 if nothing could, and r->moved == r->nbytes once all is
       in); help copies pieces of ours the peer asked for. */
    int (*pull)(struct dist__engine *e, dist__peer *p, dist_req_t *r);
    int (*help)(struct dist__engine *e, dist__peer *p);
    int uses_fd;                   /* its stream is the socket itself: poll it for room to write */
    /* Undoes a pull in progress: the receive is withdrawn or failed. */
    void (*pull_stop)(struct dist__engine *e, dist__peer *p, dist_req_t *r);
    void (*close)(struct dist__engine *e, dist__peer *p);
} dist__transport;

enum { DIST__PEND_READ = 1, DIST__PEND_WRITE = 2, DIST__PEND_HELP = 4 };   /* bytes to read, room to write, copies to help with */

typedef struct dist__req_block { struct dist__req_block *next; dist_req_t reqs[64]; } dist__req_block;
typedef struct dist__msg_block { struct dist__msg_block *next; dist__msg msgs[64]; } dist__msg_block;

/* The world's shared-memory state: its segment, collective area and the
   ranks it shares them with. */
/* Slots per rank for small collectives (see dist__fast_run): a root may
   run this many broadcasts ahead.  64 against 16: 4 ranks on 2 cores,
   an 8-byte broadcast loop 0.31-0.38 us a call against 0.48-0.75 (the
   root waits less often for a reader that lost its core). */
#define DIST__FAST_SLOTS 64
typedef struct dist__shm_world {
    int nshm, ntcp;                  /* peers over rings / over TCP */
    int all;                         /* every pair of the world talks over shared memory */
    int hosts;                       /* every pair on one host talks over shared memory, on every host
                                        (agreed: the slots then serve each host of a world across hosts) */
    int light_wake;                  /* every rank of the world fences heavily before it sleeps in a
                                        collective: ranks that wake it need no fence (dist__heavy_fence) */
    int read_all;                    /* every rank of the world may read every other's memory
                                        (dist__shm_direct) */
    int cores_each;                  /* every rank of the world found a CPU for each rank on its host
                                        (agreed, as the algorithms it picks must be) */
    uint8_t *coll_area;              /* ours */
    uint64_t coll_step;              /* shared-memory collective steps done (the same on every rank) */
    uint8_t *fast_area;              /* our slots of small collectives */
    uint64_t fast_used[DIST__FAST_SLOTS];   /* the collective that last wrote each of our slots */
    uint64_t fast_min_done;          /* the least fast_done of the others, as last read */
    void *seg; size_t seg_size; dist__shm_file seg_file;
    dist__shm_hdr *hdr;
    unsigned spins;                  /* progress rounds without poll() */
    unsigned yield_mask;             /* spinning on rings yields the CPU when (spins & mask) == 0 */
} dist__shm_world;

#define DIST__POOL_CLASSES 48
typedef struct dist__engine {
    dist__mutex lock;
    dist__cond cond;                 /* completions; driver role released */
    dist__cond bg_cond;              /* the progress thread's nap */
    int rank, world;                 /* world: the ranks the job has had (grows with dist_grow; the dead stay) */
    int cap;                         /* room in peers[] (fixed at creation: lists hang from the peers) */
    dist__peer *peers;               /* [cap], [world] in use; peers[rank] is unused */
    dist__wakeup wake;
    int driving, polling, bg_driving, want_drive, sleepers, stop;
    int failed_peers;               /* connections failed; written under the lock, also read without it */
    int unexp_coll;                 /* unexpected frames of collectives held (the same) */
    int64_t caller_drove_ns;
    int64_t spin_ns;                 /* how long a waiting caller polls before sleeping */
    dist__thread thread; int thread_started;
    dist__index ix;                  /* posted receives, unexpected messages, rendezvous */
    uint64_t post_seq;
    uint64_t budget;                 /* flow-control budget each peer gets here (bytes) */
    int blocked_peers;               /* peers that told us they wait for credit */
    uint64_t events;                 /* receives completed, messages unclaimed on arrival, peers lost (dist_events; written under the lock) */
    dist_req_t *free_reqs;
    dist__req_block *blocks;
    dist__msg *free_msgs;
    dist__msg_block *msg_blocks;
    void *pool[DIST__POOL_CLASSES];  /* payload buffers by size class (2^k bytes) */
    size_t pool_bytes;               /* ...and how many bytes they keep */
    dist__pollfd *pfds; int *pfd_peer;
    dist__log log;
    dist_t **comms; int ncomms, cap_comms;   /* the world and its groups, for abort notices */
    dist__shm_world shm;
    int aborted;                     /* dist_abort was called: every call fails from now on (atomic loads) */
    char abort_why[128];             /* set once, before `aborted` */
    int nrevoked;                    /* communicators revoked (their frames are dropped as they come) */
    int *node_of;                    /* [cap]: the host of each engine rank (0, 1, ... in order of their lowest rank, agreed
                                        at init; -1: not known, a newcomer's), set once, read by anyone */
} dist__engine;

typedef struct dist__job dist__job;
typedef struct dist__step dist__step;
typedef struct dist__op dist__op;

/* The flight recorder: each communicator's last DIST_RECORDER_OPS
   collectives and point-to-point operations, in two rings, each written by
   one thread (the collectives' thread; the point-to-point calls under the
   engine lock) and read by the monitor (see "flight recorder").
   Point-to-point entries (dist__rec) are sequence locks: gen is odd while
   one is (re)written.  Collectives, the calls that must cost least, keep
   two words each (dist__crec: what and how many, at their sequence number
   modulo the ring) and the newest one's state, times and whom it waits
   for once per communicator (rec_cur, rec_t_*): only the newest can be
   running, and only its times say where a job is. */
#ifndef DIST_RECORDER_OPS
#define DIST_RECORDER_OPS 64
#endif
#if DIST_RECORDER_OPS != 0 && (DIST_RECORDER_OPS < 4 || (DIST_RECORDER_OPS & (DIST_RECORDER_OPS - 1)) != 0)
#error "dist.h: DIST_RECORDER_OPS must be a power of two, at least 4 (or 0: no recorder, to measure what it costs)"
#endif
#define DIST__REC_N (DIST_RECORDER_OPS ? DIST_RECORDER_OPS : 1)
enum { DIST__REC_RUNNING = 1, DIST__REC_DONE, DIST__REC_FAILED };
enum { DIST__RECW_NONE = 0, DIST__RECW_DATA, DIST__RECW_TAKE, DIST__RECW_SLOTS };  /* what it waits for */
typedef struct dist__rec {
    uint32_t gen;
    uint32_t state;                  /* DIST__REC_* */
    uint64_t desc;                   /* what | algo << 8 | dtype << 16 | op << 24 | peer << 32 (dist__rec_desc) */
    uint64_t seq;                    /* collective #, or send/recv # */
    uint64_t count;
    uint64_t wait;                   /* (the member it waits for now + 1) << 8 | DIST__RECW_*; 0: none known */
    int64_t t_start;                 /* dist__now_ns(); 0: not read (a call that never waited, unless timed) */
    int64_t t_end;                   /* ...its end, read when its start was */
    int64_t tag;                     /* point-to-point: its tag, and whether synchronous (bit 62); a collective's
                                        (dist__rec_coll_view): when it was queued (dist__now_ns(): an async call,
                                        or a blocking one behind them), 0: it ran as it was called */
    int32_t res;                     /* its result, once it failed */
} dist__rec;
typedef struct dist__crec {
    uint64_t count;
    uint8_t coll;                    /* DIST__COLL_* | algo << 4 (as a frame's) */
    uint8_t dtype, op;
    uint8_t failed;                  /* -(its result) once it failed, else 0 */
    int32_t root;
} dist__crec;
/* rec_cur: collective `seq` (its low 32 bits), its state, whom it waits for and for what */
#define DIST__REC_CUR(seq, member, what, state) \
    ((uint64_t)(uint32_t)(seq) << 32 | (uint64_t)(uint32_t)((member) + 1) << 8 | (uint64_t)(what) << 4 | (uint64_t)(state))
/* what: DIST__COLL_* (collectives) or DIST__REQ_SEND/RECV (point-to-point);
   peer: the root (collectives) or the peer, a rank of the communicator (-1: any) */
#define dist__rec_desc(what, algo, dtype, op, peer) \
    ((uint64_t)(uint32_t)((what) | (algo) << 8 | (dtype) << 16 | (op) << 24) | (uint64_t)(uint32_t)(peer) << 32)
#define DIST__REC_SYNC ((int64_t)1 << 62)
typedef struct dist__recring { dist__rec ops[DIST__REC_N]; uint64_t n; } dist__recring;

/* A collective that failed: as this rank saw it (local), or as a peer
   reported it.  Kept by sequence number (modulo DIST__ABORT_NOTES), so a
   rank still in collective k learns why k failed even when a notice about
   k + 1 came first. */
#define DIST__ABORT_NOTES 8
/* Member g gave up on collective `seq` (its time was up) while it waited
   for member `on` (group ranks), told at `at` (ns): see dist__coll_blame. */
typedef struct dist__waits { uint64_t seq; int on; int64_t at; } dist__waits;

typedef struct dist__abort_note {
    uint64_t seq;                    /* 0: none */
    dist_result code;
    int local;
    char text[DIST__ERRLEN];
} dist__abort_note;

struct dist {
    /* -- what the communicator is: set at creation, read by anyone -- */
    dist__engine *eng;
    dist_t *top;                     /* the world this communicator belongs to (itself for the world) */
    int rank, world, local_rank, timeout_ms;
    uint32_t id;
    uint64_t job;
    dist__key key;                   /* the job's secret (DIST_SECRET), for every handshake */
    int *members, *group_of;         /* a group: world rank of each member, group rank of each world rank (-1) */
    int algo_override;               /* DIST_ALGO */
    /* -- the node map as this communicator sees it (dist__comm_nodes, at creation) -- */
    int nodes, local_size, lmax;     /* hosts of its members, its members on this rank's, the most on one */
    int node_n;                      /* members the map has (the world's grows with dist_grow; its map does not) */
    int *node_of;                    /* [world]: each member's host (0 ..); by_node[world]: the members host by host, in
                                        rank order; node_start[nodes + 1]: where each host's begin there; rail[nodes]
                                        and order[world]: team maps a hierarchical collective builds (one allocation) */
    int *by_node, *node_start, *rail, *order;
    /* -- errors: under err_lock -- */
    dist__mutex err_lock;
    char err[DIST__ERRLEN];
    /* -- point-to-point: under the engine lock -- */
    uint64_t nsend, nrecv;           /* operation numbers for messages */
    /* -- collectives: the thread running them (the caller, or the worker
          for the _async ones) alone -- */
    uint64_t coll_seq;               /* sequence number of the last collective begun */
    dist__frame active;              /* its descriptor */
    /* -- what the receive path reads of them (under the engine lock) while
          that thread writes them without it: a small collective through
          slots takes no lock.  A sequence lock: view_gen is odd while they
          are written (dist__view_begin, dist__view_end, dist__view_read) -- */
    uint32_t view_gen;
    uint64_t active_seq;             /* the collective running now (0: none) */
    uint64_t done_seq;               /* the last one ended (its late frames are dropped) */
    dist__shm_desc view_desc[2];     /* collective s's descriptor is view_desc[s & 1] */
    /* -- under the engine lock; abort_gen is also read without it -- */
    dist__abort_note aborts[DIST__ABORT_NOTES];   /* collectives that failed, by sequence number */
    uint32_t abort_gen;              /* notes written: while none is, small collectives need no lock */
    dist__waits *waits;              /* [world]: the collective each member last gave up on (NULL: none did) */
    uint64_t waits_max;              /* the latest collective any gave up on */
    uint8_t *scratch; size_t scratch_cap;
    dist_req_t **slots; size_t slots_cap;
    dist__step *steps; size_t steps_cap;
    size_t *offs; size_t offs_cap;
    dist__op *ops; size_t ops_cap;
    struct dist__hop *hops; size_t hops_cap;
    struct dist__hpiece *pieces; size_t pieces_cap;
    int *links; size_t links_cap;
    int shm_off;                     /* a shared-memory collective failed here: no more of them */
    int ngroups_made;                /* dist_new_group calls so far (the same on every rank) */
    uint64_t ft_rounds;              /* dist_agree and dist_shrink calls so far (the same on every live member) */
    int revoked;                     /* dist_revoke here or by a member: operations fail (atomic loads; set under the
                                        engine lock, after revoke_note) */
    dist__abort_note revoke_note;    /* why, for every collective from then on */
    /* -- async collectives: under q_lock -- */
    dist__mutex q_lock;
    dist__cond q_cond;
    dist__job *q_head, *q_tail, *q_free;
    int q_busy, q_stop, worker_started;
    int q_len;                       /* jobs queued, not yet begun (relaxed stores: the recorder's dump reads them) */
    int64_t q_oldest;                /* ...the first one's t_enq (0: none) */
    dist__thread worker;
    /* -- the world only: the store, under store_lock -- */
    dist__socket store_fd;
    dist__mutex store_lock;
    uint8_t *store_buf; size_t store_cap;
    int store_broken;
    dist__store_server *server;      /* rank 0 only (none when the store is hosted) */
    int store_hosted;                /* the store is a launcher's (DIST_STORE_HOSTED), not rank 0's */
    char file_path[512];             /* file:// rendezvous, removed by rank 0 */
    dist__wait_note *note;           /* the world, while dist_init forms the job and INFO lines are written: what its
                                        waits say (NULL: nothing) */
    /* -- growing (dist_grow, a newcomer's init) -- */
    char mesh_host[256];             /* the world: the address this rank's mesh listeners bind */
    const unsigned char *mesh_plan;  /* while a mesh forms after init: engine rank j is called (1), accepted (2), or not (0) */
    dist__socket *mesh_fds;          /* ...and its connection lands here, installed once all are there */
    char mesh_prefix[32];            /* ...its published address: "<prefix><rank>" ("dist/addr/" at init) */
    int mesh_new_first;              /* ...the newcomers' first engine rank, */
    int64_t mesh_ticket0;            /* ...and its ticket (the others' follow) */
    int joined;                      /* the world: this process joined a running job (dist_grow) */
    int owns_top;                    /* a newcomer's communicator: destroying it destroys its world */
    int newcomers;                   /* made by dist_grow: how many of its members joined then */
    int world_grew;                  /* the world: newcomers are ranks of it (point-to-point only from then on) */
    int waits_n;                     /* entries of waits (the world's size when it was made) */
    /* -- the flight recorder -- */
    dist__crec rec_c[DIST__REC_N];   /* collective #k at k & (DIST__REC_N - 1), by the collectives' thread: */
    uint64_t rec_cur;                /* ...the newest (coll_seq): DIST__REC_CUR(seq, whom it waits for, what, state) */
    uint64_t rec_t_seq;              /* ...the collective rec_t_start and rec_t_end are of (0: none) */
    int64_t rec_t_start, rec_t_end;  /* ...its start (its first wait, or as it began when timed) and end */
    uint64_t rec_q_seq;              /* ...the collective rec_t_enq is of: */
    int64_t rec_t_enq;               /* ...when it was queued (an async call, or a blocking one behind them) */
    dist__recring rec_p2p;           /* written under the engine lock */
    int rec_timed;                   /* read the clock at every start and end (DIST_RECORDER=timed; a group: its world's) */
    int in_destroy;                  /* dist_destroy has begun (for reports) */
    uint64_t mon_seq;                /* the monitor's own: the collective it last saw waiting, */
    int64_t mon_note_ns;             /* ...and when to say so next; */
    uint64_t mon_p2p;                /* ...the point-to-point operation (seq << 1 | recv), */
    int64_t mon_p2p_ns;              /* ...and when to say so next */
    /* -- the world: its monitor thread (see "flight recorder: dumps") -- */
    dist__mutex mon_lock;
    dist__cond mon_cond;
    dist__thread mon_thread;
    int mon_inited, mon_started, mon_stop;
    int mon_want;                    /* a call timed out here: ask every rank for a dump (atomic) */
    long long mon_asked_gen;         /* ...the request made, whose report it logs */
    long long mon_done_gen;          /* the last request this rank answered */
    char *mon_report;                /* the last report it logged (under mon_lock) */
    /* -- stats and traces (see "stats and traces"; NULL when neither is on) -- */
    struct dist__obs *obs;           /* this communicator's: what its calls cost, its trace ring */
    /* ...the world's: */
    int stats_on;                    /* DIST_STATS: the table at dist_destroy */
    int64_t clock_off, clock_err;    /* job clock = dist__now_ns() + clock_off, within clock_err (ns) */
    dist__mutex tr_lock;             /* obs_list and the trace file (tr_inited: it exists) */
    int tr_inited;
    FILE *tr_file;                   /* DIST_TRACE's rank<R>.trace.json (NULL: none) */
    struct dist__obs *obs_list;      /* every communicator's obs */
};

/* A finished call, counted (and traced): side 0 collectives (their
   thread), 1 point-to-point (under the engine lock).  See "stats and
   traces". */
struct dist__obs;
static void dist__obs_end(dist_t *d, int side, const dist__rec *x, int last, int64_t spread);
static dist_result dist__obs_add(dist_t *d, const char *what);
static void dist__obs_remove(dist_t *d);
static void dist__stats_log(dist_t *d);
static dist_result dist__obs_setup(dist_t *top, const char *what);
static void dist__trace_drain_all(dist_t *top);
#define DIST__TRACE_DRAIN_MS 50

/* [SECTION] flight recorder: writing
   Always on, so it costs what a few stores cost: an entry is written where
   the call begins and its state where it ends; the clock is read only
   where the call reads it anyway (a collective's first wait, a request
   waited on), or at every start and end when the communicator is timed
   (rec_timed).  Readers: dist__rec_read. */
DIST__INLINE dist__rec *dist__rec_open(dist__recring *g) {
    dist__rec *x = &g->ops[g->n & (DIST__REC_N - 1)];
    DIST__STORE_RELAXED(&x->gen, x->gen + 1);       /* odd: being written */
    DIST__FENCE_ACQ_REL();
    return x;
}

DIST__INLINE void dist__rec_close(dist__recring *g, dist__rec *x) {
    DIST__STORE_REL(&x->gen, x->gen + 1);
    DIST__STORE_REL(&g->n, g->n + 1);
}

/* The stores a call makes: 8 as it begins, 1 as it ends (2 when it
   waited; measured in bench/RESULTS.md, "flight recorder"). */
DIST__INLINE void dist__rec_fill(dist__rec *x, uint64_t desc, uint64_t seq, uint64_t count, int64_t t_start) {
    DIST__STORE_RELAXED(&x->state, (uint32_t)DIST__REC_RUNNING);
    DIST__STORE_RELAXED(&x->desc, desc);
    DIST__STORE_RELAXED(&x->seq, seq);
    DIST__STORE_RELAXED(&x->count, count);
    DIST__STORE_RELAXED(&x->wait, (uint64_t)0);
    DIST__STORE_RELAXED(&x->t_start, t_start);
}

/* The entry's end: its time when its start was read, then its state. */
DIST__INLINE void dist__rec_finish(dist__rec *x, int timed, dist_result res) {
    if (timed || DIST__LOAD_RELAXED(&x->t_start)) DIST__STORE_RELAXED(&x->t_end, dist__now_ns());
    if (res != DIST_OK) DIST__STORE_RELAXED(&x->res, (int32_t)res);
    DIST__STORE_REL(&x->state, (uint32_t)(res == DIST_OK ? DIST__REC_DONE : DIST__REC_FAILED));
}

/* Point-to-point, under the engine lock (the caller's peer: a rank of d). */
static void dist__rec_p2p_begin(dist_t *d, dist_req_t *r, int peer) {
    dist__rec *x;
    if (!DIST_RECORDER_OPS) return;
    x = dist__rec_open(&d->rec_p2p);
    dist__rec_fill(x, dist__rec_desc(r->kind, 0, r->dtype, 0, peer), r->opno, r->count, d->rec_timed ? dist__now_ns() : 0);
    DIST__STORE_RELAXED(&x->tag, r->tag | (r->sync ? DIST__REC_SYNC : 0));
    dist__rec_close(&d->rec_p2p, x);
    r->rec_n = d->rec_p2p.n;
}

/* ...its entry while the ring still holds it (NULL: written over). */
static dist__rec *dist__rec_p2p_entry(dist_req_t *r) {
    dist__recring *g = &r->comm->rec_p2p;
    if (g->n - (r->rec_n - 1) > DIST_RECORDER_OPS) return NULL;
    return &g->ops[(r->rec_n - 1) & (DIST__REC_N - 1)];
}

static void dist__rec_p2p_waits(dist_req_t *r, int64_t now) {
    dist__rec *x = dist__rec_p2p_entry(r);
    if (x && !DIST__LOAD_RELAXED(&x->t_start)) DIST__STORE_RELAXED(&x->t_start, now);
}

static void dist__rec_p2p_end(dist_req_t *r, dist_result res) {
    dist__rec *x = dist__rec_p2p_entry(r);
    if (x) {
        dist__rec_finish(x, r->comm->rec_timed, res);
        if (r->comm->obs) dist__obs_end(r->comm, 1, x, -1, 0);
    }
    r->rec_n = 0;
}

/* Defined with the collectives; the engine calls them. */
static int dist__coll_mismatch(dist__engine *e, dist_req_t *r, int src, const dist__frame *f);
static void dist__on_abort(dist__engine *e, int src, uint32_t comm, int64_t seq, int32_t code, int blamed, const char *text);
static dist_t *dist__engine_comm(dist__engine *e, uint32_t id);
static int dist__coll_check_early(dist__engine *e, dist_t *d, int src, const dist__frame *f);
static void dist__coll_check_late(dist__engine *e, dist_t *d, int src, const dist__frame *f);

/* A group's rank of a world rank (-1: not a member), and back. */
static int dist__grank(const dist_t *d, int wrank) { return d->group_of ? d->group_of[wrank] : wrank < DIST__LOAD_RELAXED(&d->world) ? wrank : -1; }

static int dist__wrank(const dist_t *d, int grank) { return d->members ? d->members[grank] : grank; }

/* The node map of communicator d, from its engine's (agreed at init):
   hosts numbered in order of their lowest member, members grouped by
   host in rank order.  A member whose host is not known (a newcomer)
   makes every member its own host, on every rank alike: the members
   that joined know no one's host, and those that were there know none
   of theirs.  Called once d's members are set; -1 when out of memory. */
static int dist__comm_nodes(dist_t *d) {
    int n = d->world, known = 1, *p;
    const int *eng = d->eng->node_of;
    d->node_n = n;
    DIST_FREE(d->node_of);
    d->node_of = p = (int *)DIST_MALLOC(sizeof(int) * (5 * (size_t)n + 1));
    if (!p) return -1;
    d->by_node = p + n; d->node_start = p + 2 * (size_t)n; d->rail = p + 3 * (size_t)n + 1; d->order = p + 4 * (size_t)n + 1;
    for (int g = 0; g < n; g++) known = known && eng[dist__wrank(d, g)] >= 0;
    d->nodes = 0;
    for (int g = 0; g < n; g++) {            /* renumbered 0 .. nodes - 1 among the members */
        d->node_of[g] = -1;
        for (int k = 0; known && k < g && d->node_of[g] < 0; k++)
            if (eng[dist__wrank(d, k)] == eng[dist__wrank(d, g)]) d->node_of[g] = d->node_of[k];
        if (d->node_of[g] < 0) d->node_of[g] = d->nodes++;
    }
    for (int h = 0, k = 0; h < d->nodes; h++) {
        d->node_start[h] = k;
        for (int g = 0; g < n; g++)
            if (d->node_of[g] == h) d->by_node[k++] = g;
    }
    d->node_start[d->nodes] = n;
    d->lmax = 0;
    for (int h = 0; h < d->nodes; h++) d->lmax = DIST__MAX(d->lmax, d->node_start[h + 1] - d->node_start[h]);
    {
        int h = d->node_of[d->rank];
        d->local_size = d->node_start[h + 1] - d->node_start[h];
        for (int k = d->node_start[h]; k < d->node_start[h + 1]; k++)
            if (d->by_node[k] == d->rank) d->local_rank = k - d->node_start[h];
    }
    return 0;
}

/* Who hosts the store, for sentences. */
#define DIST__STORE_HOST(d) ((d)->top->store_hosted ? "the launcher" : "rank 0")

/* Records a failure for `d` (may be NULL) and the calling thread, and
   logs it at `level` (ERROR; DEBUG for an answer rather than an error: a
   store wait whose bound ran out). */
static dist_result dist__vfail(dist_t *d, dist_log_level level, dist_result code, const char *fmt, va_list ap) {
    dist__vformat(dist__thread_error, sizeof dist__thread_error, fmt, ap);
    if (d && !dist__quiet) {
        dist__mutex_lock(&d->err_lock);
        memcpy(d->err, dist__thread_error, sizeof d->err);
        dist__mutex_unlock(&d->err_lock);
        if (d->eng) dist__logf(&d->eng->log, level, "%s", dist__thread_error);
    }
    return code;
}

static dist_result dist__fail(dist_t *d, dist_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dist__vfail(d, DIST_LOG_ERROR, code, fmt, ap);
    va_end(ap);
    return code;
}

static dist_result dist__fail_at(dist_t *d, dist_log_level level, dist_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dist__vfail(d, level, code, fmt, ap);
    va_end(ap);
    return code;
}

DIST_API const char *dist_error_message(const dist_t *d) {
    /* A copy, taken under the lock: another thread (an async job's worker,
       a second caller) may be writing the communicator's sentence.  Four
       rotating buffers per thread, so a few calls in one expression each
       keep their own. */
    static DIST__TLS char copies[4][DIST__ERRLEN];
    static DIST__TLS unsigned next;
    char *c;
    if (!d) return dist__thread_error;
    c = copies[next++ & 3];
    dist__mutex_lock((dist__mutex *)&d->err_lock);
    memcpy(c, d->err, DIST__ERRLEN);
    dist__mutex_unlock((dist__mutex *)&d->err_lock);
    return c;
}

DIST_API int dist_log_enabled(const dist_t *d, dist_log_level level) { return d && d->eng && dist__log_on(&d->eng->log, level); }

DIST_API void dist_log(const dist_t *d, dist_log_level level, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    if (!dist_log_enabled(d, level) || !fmt) return;
    va_start(ap, fmt);
    dist__vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dist__logf(&d->eng->log, level, "%s", msg);
}

DIST_API int dist_rank(const dist_t *d) { return d ? d->rank : -1; }
DIST_API int dist_world_size(const dist_t *d) { return d ? DIST__LOAD_RELAXED(&d->world) : 0; }
DIST_API int dist_local_rank(const dist_t *d) { return d ? d->local_rank : -1; }
DIST_API int dist_local_size(const dist_t *d) { return d ? d->local_size : 0; }
DIST_API int dist_node_count(const dist_t *d) { return d ? d->nodes : 0; }
DIST_API int dist_node(const dist_t *d, int rank) {
    return d && d->node_of && rank >= 0 && rank < d->node_n ? d->node_of[rank] : -1;
}
DIST_API int dist_timeout_ms(const dist_t *d) { return d ? d->timeout_ms : 0; }
DIST_API int64_t dist_time_ns(void) { return dist__now_ns(); }

/* [SECTION] store: client and public API */
typedef struct dist__store_part { const void *p; size_t n; } dist__store_part;

typedef struct dist__store_resp {
    int32_t status;
    int64_t num;
    const uint8_t *val;     /* points into d->top->store_buf */
    size_t vlen;
    int has_val;
} dist__store_resp;

static int dist__store_timeout(const dist_t *d, int timeout_ms) {
    return timeout_ms > 0 ? timeout_ms : d->timeout_ms;
}

/* One request, one response; the caller holds d->top->store_lock.  `wait_ms` is
   how long the server may park the request. */
static dist_result dist__store_call(dist_t *d, const char *what, int cmd, int64_t num,
                                    const dist__store_part *parts, int nparts, int wait_ms,
                                    dist__store_resp *resp) {
    size_t body = DIST__STORE_REQ_HDR - 4, need;
    /* The server answers a parked request at wait_ms; beyond that, allow
       for a busy rank 0, bounded by the communicator's timeout. */
    int64_t deadline = dist__now_ms() + wait_ms + DIST__MIN(d->timeout_ms, 30000);
    uint8_t hdr[DIST__STORE_RESP_HDR];
    uint32_t rbody;
    int r;
    if (d->eng && DIST__LOAD_ACQ(&d->eng->aborted)) return dist__fail(d, DIST_ERR_ABORTED, "store %s: %s", what, d->eng->abort_why);
    if (d->top->store_fd == DIST__NO_SOCKET || d->top->store_broken)
        return dist__fail(d, DIST_ERR_FAILED, "store %s: the connection to the store (%s) was lost earlier", what, DIST__STORE_HOST(d));
    for (int i = 0; i < nparts; i++) body += 4 + parts[i].n;
    need = 4 + body;
    if (dist__grow((void **)&d->top->store_buf, &d->top->store_cap, need, 1) != 0)
        return dist__fail(d, DIST_ERR_NOMEM, "store %s: out of memory for a %zu-byte request", what, need);
    dist__put32(d->top->store_buf, (uint32_t)body);
    d->top->store_buf[4] = (uint8_t)cmd; d->top->store_buf[5] = (uint8_t)nparts;
    d->top->store_buf[6] = d->top->store_buf[7] = 0;
    dist__put64(d->top->store_buf + 8, (uint64_t)num);
    {
        size_t off = DIST__STORE_REQ_HDR;
        for (int i = 0; i < nparts; i++) {
            dist__put32(d->top->store_buf + off, (uint32_t)parts[i].n);
            if (parts[i].n) memcpy(d->top->store_buf + off + 4, parts[i].p, parts[i].n);
            off += 4 + parts[i].n;
        }
    }
    if ((r = dist__io_all(d->top->store_fd, d->top->store_buf, need, 1, deadline)) != 0 ||
        (r = dist__io_all(d->top->store_fd, hdr, sizeof hdr, 0, deadline)) != 0) {
        d->top->store_broken = 1;
        if (d->eng && DIST__LOAD_ACQ(&d->eng->aborted)) return dist__fail(d, DIST_ERR_ABORTED, "store %s: %s", what, d->eng->abort_why);
        return dist__fail(d, r == -3 ? DIST_ERR_TIMEOUT : DIST_ERR_PEER_LOST,
                          "store %s: talking to the store (%s): %s", what, DIST__STORE_HOST(d), dist__io_error(r));
    }
    rbody = dist__get32(hdr);
    resp->status = (int32_t)dist__get32(hdr + 4);
    resp->has_val = (int)dist__get32(hdr + 8);
    resp->num = (int64_t)dist__get64(hdr + 12);
    resp->val = NULL; resp->vlen = 0;
    if (rbody < DIST__STORE_RESP_HDR - 4 || rbody > DIST__MAX_VALUE + 64 || resp->has_val > 1 ||
        (resp->has_val && rbody < DIST__STORE_RESP_HDR)) {
        d->top->store_broken = 1;
        return dist__fail(d, DIST_ERR_PROTOCOL, "store %s: malformed response from the store (%u byte%s)", what, (unsigned)rbody,
                          DIST__PLURAL(rbody));
    }
    if (rbody > DIST__STORE_RESP_HDR - 4) {
        size_t rest = rbody - (DIST__STORE_RESP_HDR - 4);
        if (dist__grow((void **)&d->top->store_buf, &d->top->store_cap, rest, 1) != 0 ||
            (r = dist__io_all(d->top->store_fd, d->top->store_buf, rest, 0, deadline)) != 0) {
            d->top->store_broken = 1;
            return dist__fail(d, DIST_ERR_PEER_LOST, "store %s: reading the store's response failed", what);
        }
        if (!resp->has_val || dist__get32(d->top->store_buf) != rest - 4) {
            d->top->store_broken = 1;
            return dist__fail(d, DIST_ERR_PROTOCOL, "store %s: malformed value in the store's response", what);
        }
        resp->val = d->top->store_buf + 4;
        resp->vlen = rest - 4;
    }
    return DIST_OK;
}

static dist_result dist__store_key_check(dist_t *d, const char *what, const char *key) {
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > DIST__MAX_KEY)
        return dist__fail(d, DIST_ERR_INVALID, "store %s: key must be 1 to %d bytes, got %s", what, DIST__MAX_KEY,
                          key ? "a longer or empty one" : "NULL");
    return DIST_OK;
}

/* Status of a response -> result with a message. */
/* "; rank 3 is gone (why)" for the first member of `d` whose connection
   failed, or "": a key that never came may be that rank's to set. */
static void dist__lost_note(dist_t *d, char *out, size_t cap) {
    dist__engine *e = d->eng;
    out[0] = 0;
    if (!e || !e->peers) return;
    dist__mutex_lock(&e->lock);
    for (int i = 0; i < d->world && !out[0]; i++) {
        const dist__peer *p = &e->peers[dist__wrank(d, i)];
        if (p->state == DIST__PEER_FAILED) dist__format(out, cap, "; rank %d is gone (%s)", i, p->why);
    }
    dist__mutex_unlock(&e->lock);
}

static dist_result dist__store_status(dist_t *d, const char *what, const char *key, int wait_ms, const dist__store_resp *rs) {
    char lost[DIST__ERRLEN / 2];
    switch (rs->status) {
    case DIST_OK: return DIST_OK;
    case DIST_ERR_TIMEOUT:      /* (a wait's bound running out is an answer: logged at DEBUG) */
        dist__lost_note(d, lost, sizeof lost);
        return dist__fail_at(d, strcmp(what, "wait") == 0 ? DIST_LOG_DEBUG : DIST_LOG_ERROR, DIST_ERR_TIMEOUT, "store %s \"%s\": not set after %.1f s%s",
                             what, key, wait_ms / 1000.0, lost);
    case DIST_ERR_NOT_FOUND:
        return dist__fail(d, DIST_ERR_NOT_FOUND, "store %s \"%s\": no such key", what, key);
    case DIST_ERR_INVALID:
        return dist__fail(d, DIST_ERR_INVALID, "store %s \"%s\": the value is not an integer", what, key);
    case DIST_ERR_NOMEM:
        return dist__fail(d, DIST_ERR_NOMEM, "store %s \"%s\": the store (%s) is out of memory", what, key, DIST__STORE_HOST(d));
    case DIST_ERR_INIT:
        return dist__fail(d, DIST_ERR_INIT, "init: rank %d of %d: the job cannot form: %.*s", d->rank, d->world,
                          (int)DIST__MIN(rs->vlen, 250), rs->val ? (const char *)rs->val : "");
    default:
        return dist__fail(d, DIST_ERR_PROTOCOL, "store %s \"%s\": the store answered status %d", what, key, (int)rs->status);
    }
}

/* Copies a response's value out, get-style. */
static dist_result dist__store_copy_out(dist_t *d, const char *what, const char *key, const dist__store_resp *rs,
                                        void *buf, size_t cap, size_t *len) {
    if (len) *len = rs->vlen;
    if (rs->vlen > cap)
        return dist__fail(d, DIST_ERR_TRUNCATED, "store %s \"%s\": the value has %zu byte%s, the buffer %zu", what, key, rs->vlen,
                          DIST__PLURAL(rs->vlen), cap);
    if (rs->vlen && buf) memcpy(buf, rs->val, rs->vlen);
    return DIST_OK;
}

/* Takes the store's lock; the monitor (dist__quiet) only when it is free. */
static dist_result dist__store_lock(dist_t *d) {
    if (!dist__quiet) { dist__mutex_lock(&d->top->store_lock); return DIST_OK; }
    return dist__mutex_trylock(&d->top->store_lock) == 0 ? DIST_OK : DIST_ERR_TIMEOUT;
}

/* Checks a one-key call and, when it may go ahead, takes the store's
   lock (the caller releases it). */
static dist_result dist__store_begin(dist_t *d, const char *what, const char *key) {
    dist_result res;
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "store %s: NULL communicator", what);
    if ((res = dist__store_key_check(d, what, key)) != DIST_OK) return res;
    return dist__store_lock(d);
}

DIST_API dist_result dist_store_set(dist_t *d, const char *key, const void *value, size_t len) {
    dist__store_part parts[2];
    dist__store_resp rs;
    dist_result res = dist__store_begin(d, "set", key);
    if (res != DIST_OK) return res;
    parts[0].p = key; parts[0].n = strlen(key);
    parts[1].p = value; parts[1].n = len;
    if (len > DIST__MAX_VALUE || (len && !value)) {
        dist__mutex_unlock(&d->top->store_lock);
        return dist__fail(d, DIST_ERR_INVALID, "store set \"%s\": value of %zu byte%s (at most %zu, non-NULL)", key, len, DIST__PLURAL(len),
                          DIST__MAX_VALUE);
    }
    res = dist__store_call(d, "set", DIST__STORE_SET, 0, parts, 2, 0, &rs);
    if (res == DIST_OK) res = dist__store_status(d, "set", key, 0, &rs);
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

DIST_API dist_result dist_store_get(dist_t *d, const char *key, void *buf, size_t cap, size_t *len) {
    dist__store_part part;
    int wait_ms;
    dist__store_resp rs;
    dist_result res = dist__store_begin(d, "get", key);
    if (res != DIST_OK) return res;
    wait_ms = dist__store_timeout(d, 0);
    part.p = key; part.n = strlen(key);
    res = dist__store_call(d, "get", DIST__STORE_GET, wait_ms, &part, 1, wait_ms, &rs);
    if (res == DIST_OK) res = dist__store_status(d, "get", key, wait_ms, &rs);
    if (res == DIST_OK) res = dist__store_copy_out(d, "get", key, &rs, buf, cap, len);
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

DIST_API dist_result dist_store_add(dist_t *d, const char *key, int64_t amount, int64_t *result) {
    dist__store_part part;
    dist__store_resp rs;
    dist_result res = dist__store_begin(d, "add", key);
    if (res != DIST_OK) return res;
    part.p = key; part.n = strlen(key);
    res = dist__store_call(d, "add", DIST__STORE_ADD, amount, &part, 1, 0, &rs);
    if (res == DIST_OK) res = dist__store_status(d, "add", key, 0, &rs);
    if (res == DIST_OK && result) *result = rs.num;
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

static dist_result dist__store_keys(dist_t *d, const char *what, int cmd, const char *const *keys, int nkeys,
                                    int wait_ms, int *all) {
    dist__store_part parts[DIST__STORE_MAX_PARTS];
    dist__store_resp rs;
    dist_result res = DIST_OK;
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "store %s: NULL communicator", what);
    if (nkeys < 1 || nkeys > DIST__STORE_MAX_PARTS || !keys)
        return dist__fail(d, DIST_ERR_INVALID, "store %s: %d keys (1 to %d per call)", what, nkeys, DIST__STORE_MAX_PARTS);
    for (int i = 0; i < nkeys; i++) {
        if ((res = dist__store_key_check(d, what, keys[i])) != DIST_OK) return res;
        parts[i].p = keys[i]; parts[i].n = strlen(keys[i]);
    }
    if ((res = dist__store_lock(d)) != DIST_OK) return res;
    res = dist__store_call(d, what, cmd, wait_ms, parts, nkeys, wait_ms, &rs);
    if (res == DIST_OK && rs.status == DIST_ERR_TIMEOUT && nkeys > 1) {
        /* Name a key that is missing, not just the first one asked for. */
        int missing = 0;
        dist__store_resp one;
        for (int i = 0; i < nkeys; i++)
            if (dist__store_call(d, what, DIST__STORE_CHECK, 0, &parts[i], 1, 0, &one) == DIST_OK && one.num == 0) { missing = i; break; }
        res = dist__store_status(d, what, keys[missing], wait_ms, &rs);
    } else if (res == DIST_OK) {
        res = dist__store_status(d, what, keys[0], wait_ms, &rs);
    }
    if (res == DIST_OK && all) *all = (int)rs.num;
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

DIST_API dist_result dist_store_wait(dist_t *d, const char *const *keys, int nkeys, int timeout_ms) {
    return dist__store_keys(d, "wait", DIST__STORE_WAIT, keys, nkeys, d ? dist__store_timeout(d, timeout_ms) : 0, NULL);
}

/* Waits up to wait_ms (> 0) for `key`; *there says whether it came.  Not
   coming is no failure here (nothing is recorded or logged): a wait of the
   rendezvous takes such steps and says what it waits for between them. */
static dist_result dist__store_wait_step(dist_t *d, const char *key, int wait_ms, int *there) {
    dist__store_part part;
    dist__store_resp rs;
    dist_result res = dist__store_begin(d, "wait", key);
    *there = 0;
    if (res != DIST_OK) return res;
    part.p = key; part.n = strlen(key);
    res = dist__store_call(d, "wait", DIST__STORE_WAIT, wait_ms, &part, 1, wait_ms, &rs);
    if (res == DIST_OK && rs.status != DIST_ERR_TIMEOUT) res = dist__store_status(d, "wait", key, wait_ms, &rs);
    *there = res == DIST_OK && rs.status == DIST_OK;
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

DIST_API dist_result dist_store_check(dist_t *d, const char *const *keys, int nkeys, int *exists) {
    int all = 0;
    dist_result r = dist__store_keys(d, "check", DIST__STORE_CHECK, keys, nkeys, 0, &all);
    if (exists) *exists = r == DIST_OK ? all : 0;
    return r;
}

DIST_API dist_result dist_store_compare_set(dist_t *d, const char *key, const void *expected, size_t expected_len,
                                            const void *desired, size_t desired_len,
                                            void *out, size_t cap, size_t *out_len) {
    dist__store_part parts[3];
    dist__store_resp rs;
    dist_result res = dist__store_begin(d, "compare_set", key);
    if (res != DIST_OK) return res;
    parts[0].p = key; parts[0].n = strlen(key);
    parts[1].p = expected; parts[1].n = expected_len;
    parts[2].p = desired; parts[2].n = desired_len;
    if (desired_len > DIST__MAX_VALUE || expected_len > DIST__MAX_VALUE ||
        (expected_len && !expected) || (desired_len && !desired)) {
        dist__mutex_unlock(&d->top->store_lock);
        return dist__fail(d, DIST_ERR_INVALID, "store compare_set \"%s\": bad value arguments", key);
    }
    res = dist__store_call(d, "compare_set", DIST__STORE_CAS, expected_len == 0, parts, 3, 0, &rs);
    if (res == DIST_OK) res = dist__store_status(d, "compare_set", key, 0, &rs);
    if (res == DIST_OK) res = dist__store_copy_out(d, "compare_set", key, &rs, out, cap, out_len);
    else if (out_len) *out_len = 0;
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

DIST_API dist_result dist_store_delete(dist_t *d, const char *key, int *deleted) {
    dist__store_part part;
    dist__store_resp rs;
    dist_result res = dist__store_begin(d, "delete", key);
    if (res != DIST_OK) return res;
    part.p = key; part.n = strlen(key);
    res = dist__store_call(d, "delete", DIST__STORE_DELETE, 0, &part, 1, 0, &rs);
    if (res == DIST_OK) res = dist__store_status(d, "delete", key, 0, &rs);
    if (deleted) *deleted = res == DIST_OK ? (int)rs.num : 0;
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

/* [SECTION] engine: design notes
   ---------------------------------------------------------------------------
   Layers.  A transport (TCP, shared memory) moves a byte stream per peer;
   the engine frames it, matches it and accounts for memory the same way
   whatever carries it; point-to-point, the collectives and groups are
   written over the engine's requests.

   Matching.  Receives are matched in posting order against frames in
   arrival order (MPI's rule), so messages of one (source, tag) pair never
   overtake.  The match index (dist__index) keeps a FIFO per (communicator,
   kind, tag, source) and one per (communicator, kind, tag) across sources,
   for posted receives and for unexpected messages alike: a receive finds
   its message, and a message its receive, in constant time however many
   others wait.  A frame that finds its receive lands in the caller's
   buffer (combined into it, for a reducing receive); otherwise it waits as
   an unexpected message (pooled memory).

   Flow control.  A receiver gives each peer a budget (DIST_EAGER_BYTES):
   every message costs its sender DIST__MSG_COST bytes of it, plus its
   payload when the payload travels with it.  The receiver hands credit
   back (CREDIT frames, a quarter of the budget at a time) once it has
   delivered what the bytes held, so the memory a peer's unexpected
   messages take here never exceeds its budget, whatever it sends.  A
   sender without credit keeps its messages in its own queue (isend) or
   waits (send), within the timeout, and says so (BLOCKED): the receiver
   then hands back what it owes at once, and if one of its receives waits
   for a message stuck behind others it has not asked for yet, it asks for
   that one (PULL), which the sender sends ahead, outside the budget.
   Messages up to a quarter of the budget travel eagerly; larger ones are
   announced (a header with a rendezvous id) and their payload follows once
   the receive is posted (CTS, then PAYLOAD frames in 1 MiB pieces that
   control frames may pass), or, between processes that can read each
   other's memory, the receiver copies it from the sender's memory and
   acknowledges (ACK).  So two ranks that both send small messages first
   never deadlock, as before; two that both dist_send large ones first
   wait for each other's receive, as MPI_Send may: use isend/irecv.

   Progress and threads.  One mutex guards an engine (per world).  Exactly
   one thread at a time is the "driver": it polls every socket (with the
   mutex released during poll) and reads and writes whatever is ready.  A
   thread that waits for a request becomes the driver itself when nobody is,
   so a small message costs one poll and one recv on the waiting thread, no
   hand-off.  A background progress thread drives when no caller is waiting
   (it steps aside while callers drive, and a caller kicks it out of poll
   through a wake-up fd), so transfers continue while the caller computes
   and a lost peer is noticed.  Completions are signalled on one condition
   variable.

   Failure.  A connection that ends without the peer's goodbye frame, or
   that sends a malformed header, fails that peer: every request that needs
   it fails at once, naming the rank.  Every wait is bounded by the
   communicator's timeout; a receive that times out is withdrawn, so no
   late message is ever written into a buffer the caller got back.

   Shutdown.  dist_destroy lets what is queued go out, sends a goodbye frame
   to every peer and waits (bounded) for theirs, so no rank closes a socket
   that still has data in flight (which would turn the close into a reset
   that can drop the peer's last messages); rank 0 keeps the store up until
   then.  A rank answers a goodbye with its own at once (after what it had
   queued for that peer), so one that leaves while the others go on waits
   only for their answers. */

/* What one message costs its sender's budget beyond its payload: about
   what an unexpected message's bookkeeping takes here. */
#define DIST__MSG_COST      320
/* Announced payloads travel in pieces of this size, so control frames
   (credit, CTS) and other messages are not stuck behind a large one. */
#define DIST__SEGMENT_BYTES ((uint64_t)1 << 20)
/* Control frames queued for one peer beyond which its input is left
   unread until it takes them (a peer that never reads cannot make us
   queue without bound). */
#define DIST__CTL_MAX       4096

/* [SECTION] engine: requests, messages, the match index */

static dist_req_t *dist__req_alloc(dist__engine *e) {
    dist_req_t *r = e->free_reqs;
    if (!r) {
        dist__req_block *b = (dist__req_block *)DIST_MALLOC(sizeof *b);
        if (!b) return NULL;
        memset(b, 0, sizeof *b);                /* dist__engine_free reads every request's sentence */
        b->next = e->blocks;
        e->blocks = b;
        for (int i = 63; i >= 0; i--) { b->reqs[i].next = e->free_reqs; e->free_reqs = &b->reqs[i]; }
        r = e->free_reqs;
    }
    e->free_reqs = r->next;
    memset(r, 0, sizeof *r);
    r->pooled = 1;
    r->eng = e;
    return r;
}

/* A request's sentence lives apart (a request in flight needs none, and a
   million queued sends should not carry 320 bytes each). */
static char dist__req_err_oom[] = "(no memory for this failure's sentence)";
static char *dist__req_err_buf(dist_req_t *r) {
    if (!r->err && (r->err = (char *)DIST_MALLOC(DIST__ERRLEN)) == NULL) r->err = dist__req_err_oom;
    return r->err;
}
static const char *dist__req_err(const dist_req_t *r) { return r->err ? r->err : ""; }
static void dist__req_err_free(dist_req_t *r) {
    if (r->err && r->err != dist__req_err_oom) DIST_FREE(r->err);
    r->err = NULL;
}

static void dist__req_release(dist__engine *e, dist_req_t *r) {
    dist__req_err_free(r);
    if (r->pooled) { r->next = e->free_reqs; e->free_reqs = r; r->done = -1; }
}

/* Payload buffers: one pool of power-of-two size classes, kept up to a
   bound, so a steady stream of unexpected messages allocates only at
   first and a burst does not keep its memory for ever. */
static int dist__pool_class(uint64_t n) {
    int k = 7;                                  /* 128 bytes at least */
    while (((uint64_t)1 << k) < n && k < DIST__POOL_CLASSES - 1) k++;
    return k;
}

static uint8_t *dist__pool_get(dist__engine *e, uint64_t n, size_t *cap) {
    int k = dist__pool_class(n);
    void *b = e->pool[k];
    if ((uint64_t)1 << k < n || n > SIZE_MAX / 2) return NULL;
    if (b) {
        e->pool[k] = *(void **)b;
        e->pool_bytes -= (size_t)1 << k;
    } else if ((b = DIST_MALLOC((size_t)1 << k)) == NULL) {
        return NULL;
    }
    *cap = (size_t)1 << k;
    return (uint8_t *)b;
}

static void dist__pool_put(dist__engine *e, uint8_t *b, size_t cap) {
    int k = dist__pool_class(cap);
    if (e->pool_bytes + cap <= 2 * e->budget + ((size_t)8 << 20) && ((size_t)1 << k) == cap) {
        *(void **)(void *)b = e->pool[k];
        e->pool[k] = b;
        e->pool_bytes += cap;
    } else {
        DIST_FREE(b);
    }
}

static dist__msg *dist__msg_get(dist__engine *e, uint64_t payload) {
    dist__msg *m = e->free_msgs;
    if (!m) {
        dist__msg_block *b = (dist__msg_block *)DIST_MALLOC(sizeof *b);
        if (!b) return NULL;
        b->next = e->msg_blocks;
        e->msg_blocks = b;
        for (int i = 63; i >= 0; i--) { b->msgs[i].next_free = e->free_msgs; e->free_msgs = &b->msgs[i]; }
        m = e->free_msgs;
    }
    if (payload <= sizeof m->small) {
        e->free_msgs = m->next_free;
        memset(m, 0, offsetof(dist__msg, small));
        m->data = m->small; m->cap = sizeof m->small;
        return m;
    }
    {
        size_t cap = 0;
        uint8_t *data = dist__pool_get(e, payload, &cap);
        if (!data) return NULL;
        e->free_msgs = m->next_free;
        memset(m, 0, offsetof(dist__msg, small));
        m->data = data; m->cap = cap;
    }
    return m;
}

static void dist__msg_put(dist__engine *e, dist__msg *m) {
    if (m->data && m->data != m->small) dist__pool_put(e, m->data, m->cap);
    m->data = NULL;
    m->next_free = e->free_msgs;
    e->free_msgs = m;
}

/* -- the match index -- */
static uint64_t dist__mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t dist__ix_hash(int table, uint32_t comm, int kind, int64_t tag, int src) {
    uint64_t k = ((uint64_t)comm << 24) ^ (uint64_t)(uint32_t)(src + 1) ^ ((uint64_t)table << 56) ^ ((uint64_t)kind << 60);
    return dist__mix64(dist__mix64(k) ^ (uint64_t)tag * 0x9e3779b97f4a7c15ull);
}

static dist__queue *dist__ix_find(const dist__index *ix, int table, uint32_t comm, int kind, int64_t tag, int src) {
    uint64_t h;
    if (!ix->used) return NULL;      /* the common case between calls: nothing waits at all */
    h = dist__ix_hash(table, comm, kind, tag, src);
    for (size_t i = (size_t)h & (ix->cap - 1); ix->slot[i]; i = (i + 1) & (ix->cap - 1)) {
        const dist__queue *q = ix->slot[i];
        if (q->hash == h && q->table == table && q->comm == comm && q->kind == kind && q->tag == tag && q->src == src)
            return ix->slot[i];
    }
    return NULL;
}

static void dist__ix_place(dist__index *ix, dist__queue *q) {
    size_t i = (size_t)q->hash & (ix->cap - 1);
    while (ix->slot[i]) i = (i + 1) & (ix->cap - 1);
    ix->slot[i] = q;
}

/* The queue of a key, made if there is none; NULL only without memory. */
static dist__queue *dist__ix_get(dist__index *ix, int table, uint32_t comm, int kind, int64_t tag, int src) {
    dist__queue *q = dist__ix_find(ix, table, comm, kind, tag, src);
    if (q) return q;
    if ((ix->used + 1) * 2 > ix->cap) {          /* grow: at most half full */
        size_t cap = ix->cap ? ix->cap * 2 : 64, old = ix->cap;
        dist__queue **slots = (dist__queue **)DIST_MALLOC(sizeof *slots * cap), **prev = ix->slot;
        if (!slots) return NULL;
        memset(slots, 0, sizeof *slots * cap);
        ix->slot = slots; ix->cap = cap;
        for (size_t i = 0; i < old; i++) if (prev[i]) dist__ix_place(ix, prev[i]);
        DIST_FREE(prev);
    }
    if ((q = ix->free) != NULL) ix->free = q->next_free;
    else if ((q = (dist__queue *)DIST_MALLOC(sizeof *q)) == NULL) return NULL;
    q->hash = dist__ix_hash(table, comm, kind, tag, src);
    q->table = (uint8_t)table; q->comm = comm; q->kind = (uint8_t)kind; q->tag = tag; q->src = src;
    q->next_free = NULL;
    dist__list_init(&q->items);
    dist__ix_place(ix, q);
    ix->used++;
    return q;
}

/* Takes an empty queue out of the table (backward-shift deletion keeps
   every probe sequence whole) and keeps it for reuse. */
static void dist__ix_drop(dist__index *ix, dist__queue *q) {
    size_t mask = ix->cap - 1, i = (size_t)q->hash & mask;
    while (ix->slot[i] != q) i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; ix->slot[j]; j = (j + 1) & mask) {
        size_t home = (size_t)ix->slot[j]->hash & mask;
        /* the entry at j may move to i if i lies on its probe path */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) { ix->slot[i] = ix->slot[j]; i = j; }
    }
    ix->slot[i] = NULL;
    ix->used--;
    q->next_free = ix->free;
    ix->free = q;
}

/* Removes node n from queue q, dropping q when it empties. */
static void dist__ix_unlink(dist__index *ix, dist__queue *q, dist__link *n) {
    dist__unlink(n);
    if (q && dist__list_empty(&q->items)) dist__ix_drop(ix, q);
}

static void dist__ix_free(dist__index *ix) {
    for (size_t i = 0; i < ix->cap; i++) DIST_FREE(ix->slot[i]);
    while (ix->free) { dist__queue *q = ix->free; ix->free = q->next_free; DIST_FREE(q); }
    DIST_FREE(ix->slot);
    memset(ix, 0, sizeof *ix);
}

/* "recv #4 from rank 2 (tag 0, 10 x float32)" */
static const char *dist__coll_name(int kind);

static void dist__req_describe(const dist_req_t *r, char *buf, size_t cap) {
    if (r->frame_kind == DIST__FRAME_COLL)
        dist__format(buf, cap, "%s #%lld", dist__coll_name(r->coll & 15), (long long)r->tag);
    else if (r->kind == DIST__REQ_SEND)
        dist__format(buf, cap, "send #%llu to rank %d (tag %lld, %zu x %s)", (unsigned long long)r->opno, r->peer,
                     (long long)r->tag, r->count, dist_dtype_name(r->dtype));
    else if (r->peer == DIST_ANY_SOURCE)
        dist__format(buf, cap, "recv #%llu from any rank (tag %lld, %zu x %s)", (unsigned long long)r->opno,
                     (long long)r->tag, r->count, dist_dtype_name(r->dtype));
    else
        dist__format(buf, cap, "recv #%llu from rank %d (tag %lld, %zu x %s)", (unsigned long long)r->opno, r->peer,
                     (long long)r->tag, r->count, dist_dtype_name(r->dtype));
}

static void dist__req_complete(dist__engine *e, dist_req_t *r, dist_result res) {
    if (r->rdv_counted) { e->peers[r->peer].rdv_out--; r->rdv_counted = 0; }
    if (r->rec_n) dist__rec_p2p_end(r, res);
    r->result = res;
    r->done = 1;
    r->state = DIST__RS_IDLE;
    if (r->detached) { dist__req_release(e, r); return; }
    if (r->kind == DIST__REQ_RECV) DIST__STORE_RELAXED(&e->events, e->events + 1);
    if (e->sleepers) dist__cond_broadcast(&e->cond);
}

static void dist__req_failf(dist__engine *e, dist_req_t *r, dist_result res, const char *fmt, ...) {
    char what[160], why[DIST__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    dist__vformat(why, sizeof why, fmt, ap);
    va_end(ap);
    if (dist__req_err_buf(r) == dist__req_err_oom) {
        /* kept as it is */
    } else if (r->frame_kind == DIST__FRAME_COLL) {   /* the collective adds its own context */
        dist__format(r->err, DIST__ERRLEN, "%s", why);
    } else {
        dist__req_describe(r, what, sizeof what);
        dist__format(r->err, DIST__ERRLEN, "%s: %s", what, why);
    }
    dist__req_complete(e, r, res);
}

static void dist__peer_fail(dist__engine *e, dist__peer *p, const char *fmt, ...);

/* -- posted receives -- */
static int dist__post_index(dist__engine *e, dist_req_t *r) {
    int any = r->peer == DIST_ANY_SOURCE;
    dist__queue *q = dist__ix_get(&e->ix, any ? DIST__IX_POSTED_ANY : DIST__IX_POSTED, r->comm_id, r->frame_kind, r->tag,
                                  any ? -1 : r->peer);
    if (!q) return -1;
    r->post_seq = ++e->post_seq;
    r->ixq = q;
    r->state = DIST__RS_POSTED;
    dist__list_append(&q->items, &r->link);
    return 0;
}

static void dist__unpost(dist__engine *e, dist_req_t *r) {
    dist__ix_unlink(&e->ix, r->ixq, &r->link);
    r->ixq = NULL;
    r->state = DIST__RS_IDLE;
}

/* The receive a frame from `src` goes to: the earlier posted of the
   source's queue and the wildcard queue. */
static dist_req_t *dist__find_receive(dist__engine *e, int src, const dist__frame *f) {
    dist__queue *q = dist__ix_find(&e->ix, DIST__IX_POSTED, f->comm, f->kind, f->tag, src);
    dist__queue *a = f->kind == DIST__FRAME_DATA ? dist__ix_find(&e->ix, DIST__IX_POSTED_ANY, f->comm, f->kind, f->tag, -1) : NULL;
    dist_req_t *r = q ? DIST__CONTAINER(q->items.next, dist_req_t, link) : NULL;
    dist_req_t *w = a ? DIST__CONTAINER(a->items.next, dist_req_t, link) : NULL;
    if (w && (!r || w->post_seq < r->post_seq)) r = w;
    return r;
}

/* -- unexpected messages -- */
static int dist__msg_index(dist__engine *e, dist__msg *m) {
    dist__queue *q = dist__ix_get(&e->ix, DIST__IX_UNEXP, m->f.comm, m->f.kind, m->f.tag, m->src), *a;
    if (!q) return -1;
    dist__list_append(&q->items, &m->lsrc);
    m->qsrc = q;
    if ((a = dist__ix_get(&e->ix, DIST__IX_UNEXP_ANY, m->f.comm, m->f.kind, m->f.tag, -1)) == NULL) {
        dist__ix_unlink(&e->ix, q, &m->lsrc);
        m->qsrc = NULL;
        return -1;
    }
    dist__list_append(&a->items, &m->lany);
    m->qany = a;
    if (m->f.kind == DIST__FRAME_COLL) DIST__STORE_RELAXED(&e->unexp_coll, e->unexp_coll + 1);
    else DIST__STORE_RELAXED(&e->events, e->events + 1);
    return 0;
}

static void dist__msg_unindex(dist__engine *e, dist__msg *m) {
    if (m->qsrc && m->f.kind == DIST__FRAME_COLL) DIST__STORE_RELAXED(&e->unexp_coll, e->unexp_coll - 1);
    if (m->qsrc) { dist__ix_unlink(&e->ix, m->qsrc, &m->lsrc); m->qsrc = NULL; }
    if (m->qany) { dist__ix_unlink(&e->ix, m->qany, &m->lany); m->qany = NULL; }
}

/* The first unexpected message receive r may take (the one still arriving
   that another receive took, or one refused, is passed over: there is at
   most one such per peer). */
static dist__msg *dist__find_message(dist__engine *e, const dist_req_t *r) {
    int any = r->peer == DIST_ANY_SOURCE;
    dist__queue *q = dist__ix_find(&e->ix, any ? DIST__IX_UNEXP_ANY : DIST__IX_UNEXP, r->comm_id, r->frame_kind, r->tag,
                                   any ? -1 : r->peer);
    if (!q) return NULL;
    for (dist__link *n = q->items.next; n != &q->items; n = n->next) {
        dist__msg *m = any ? DIST__CONTAINER(n, dist__msg, lany) : DIST__CONTAINER(n, dist__msg, lsrc);
        if (!m->claimed && !m->dead) return m;
    }
    return NULL;
}

/* -- rendezvous entries: (peer, id) -> our announced send, or a peer's
      announcement (a message) or the receive that took it -- */
static int dist__rdv_add(dist__engine *e, int table, int peer, uint64_t sid, dist__link *n, dist__queue **where) {
    dist__queue *q = dist__ix_get(&e->ix, table, 0, 0, (int64_t)sid, peer);
    if (!q) return -1;
    dist__list_append(&q->items, n);
    *where = q;
    return 0;
}

static dist__link *dist__rdv_find(dist__engine *e, int table, int peer, uint64_t sid) {
    dist__queue *q = dist__ix_find(&e->ix, table, 0, 0, (int64_t)sid, peer);
    return q && !dist__list_empty(&q->items) ? q->items.next : NULL;
}

/* -- flow control, receiving side -- */
static void dist__send_ctl(dist__engine *e, dist__peer *p, int kind, int64_t tag, uint64_t count, int32_t root);

/* Bytes a message from `p` held here are free again: hand them back once
   a quarter of the budget has gathered (at once if the peer waits). */
static void dist__credit_release(dist__engine *e, dist__peer *p, uint32_t charge) {
    if (!charge) return;
    p->held -= charge;
    p->owed += charge;
    if (p->owed >= e->budget / 4 || p->peer_blocked) {
        uint64_t n = p->owed;
        p->owed = 0;
        if (p->peer_blocked) { p->peer_blocked = 0; e->blocked_peers--; }   /* it says so again if it still waits */
        dist__send_ctl(e, p, DIST__FRAME_CREDIT, 0, n, 0);
    }
}

/* -- control frames -- */
static int dist__ctl_push(dist__engine *e, dist__peer *p, const dist__frame *f, dist_req_t *carrier) {
    DIST__UNUSED(e);
    if (p->ctl_count == p->ctl_cap) {
        unsigned cap = p->ctl_cap ? 2 * p->ctl_cap : 16;
        dist__ctl *c = (dist__ctl *)DIST_MALLOC(sizeof *c * cap);
        if (!c) return -1;
        for (unsigned i = 0; i < p->ctl_count; i++) c[i] = p->ctl[(p->ctl_head + i) % p->ctl_cap];
        DIST_FREE(p->ctl);
        p->ctl = c; p->ctl_cap = cap; p->ctl_head = 0;
    }
    {
        dist__ctl *c = &p->ctl[(p->ctl_head + p->ctl_count) % p->ctl_cap];
        dist__frame_encode(f, c->hdr);
        c->carrier = carrier;
        p->ctl_count++;
    }
    return 0;
}

static void dist__peer_write(dist__engine *e, dist__peer *p);

static void dist__send_ctl(dist__engine *e, dist__peer *p, int kind, int64_t tag, uint64_t count, int32_t root) {
    dist__frame f;
    if (p->fd == DIST__NO_SOCKET || p->bye_sent) return;
    memset(&f, 0, sizeof f);
    f.kind = (uint8_t)kind; f.tag = tag; f.count = count; f.root = root;
    if (dist__ctl_push(e, p, &f, NULL) != 0) dist__peer_fail(e, p, "out of memory for a control frame to rank %d", p->rank);
}

/* Tells the sender of announcement (peer, sid) that it was not taken. */
static void dist__refuse(dist__engine *e, dist__peer *p, uint64_t sid, int why) {
    if (p->ctl_count >= DIST__CTL_MAX) {
        dist__peer_fail(e, p, "rank %d announces messages that are refused faster than it reads the refusals", p->rank);
        return;
    }
    dist__send_ctl(e, p, DIST__FRAME_CANCEL, (int64_t)sid, (uint64_t)why, 1);
}

/* [SECTION] engine: sending (the queues, credit, the wire) */
static void dist__wire_reset(dist__wire *w) {
    w->hlen = 0; w->body = NULL; w->blen = w->off = 0; w->what = 0; w->req = NULL;
}

/* The next message in p's send queue goes on the wire if it has credit
   (a pulled one needs none).  Announces it (rendezvous) when it is too
   large to send eagerly, or goes by reference.  0: it must wait. */
static int dist__wire_message(dist__engine *e, dist__peer *p, dist_req_t *r) {
    dist__wire *w = &p->wire;
    dist__frame f;
    int eager;
    uint64_t charge;
    if (!p->budget && !r->pulled) return 0;            /* its first grant has not come yet */
    eager = !r->sync && r->nbytes <= p->budget / 4;   /* by reference: paid for, copied at once */
    charge = r->pulled ? 0 : DIST__MSG_COST + (eager ? r->nbytes : 0);
    if ((int64_t)charge > p->credit) {
        if (!p->blocked) {
            p->blocked = 1;
            dist__send_ctl(e, p, DIST__FRAME_BLOCKED, 0, charge, 0);
        }
        return 0;
    }
    p->credit -= (int64_t)charge;
    p->charged += charge;
    r->charge = (uint32_t)charge;
    memset(&f, 0, sizeof f);
    f.kind = r->frame_kind; f.dtype = (uint8_t)r->dtype; f.comm = r->comm_id; f.tag = r->tag;
    f.count = r->count; f.nbytes = r->nbytes;
    f.coll = r->coll; f.op = r->op; f.root = r->root;
    f.flags = (uint8_t)((eager && !r->by_ref ? 0 : DIST__FRAME_RTS) | (eager && r->by_ref ? DIST__FRAME_PROMPT : 0) |
                        (r->pulled ? DIST__FRAME_PULLED : 0));
    if (f.flags & DIST__FRAME_RTS) {
        r->sid = ++p->next_sid;
        f.sid = r->sid;
        f.addr = r->by_ref ? (uint64_t)(uintptr_t)r->sbuf : 0;
    }
    if (r->frame_kind == DIST__FRAME_COLL && r->stamped) {
        f.flags |= DIST__FRAME_STAMP;
        f.st_last = r->st_last; f.st_first = r->st_first; f.st_rank = r->st_rank;
    }
    dist__unlink(&r->link);
    dist__wire_reset(w);
    w->hlen = dist__frame_encode(&f, w->hdr);
    w->what = (f.flags & DIST__FRAME_RTS) ? DIST__WIRE_ANNOUNCE : DIST__WIRE_EAGER;
    w->req = r;
    if (w->what == DIST__WIRE_EAGER) { w->body = r->sbuf; w->blen = r->nbytes; }
    r->state = DIST__RS_WIRE;
    return 1;
}

/* The next piece of an announced payload the receiver asked for. */
static void dist__wire_segment(dist__engine *e, dist__peer *p, dist_req_t *r) {
    dist__wire *w = &p->wire;
    dist__frame f;
    uint64_t len = DIST__MIN(DIST__SEGMENT_BYTES, r->nbytes - r->moved);
    DIST__UNUSED(e);
    memset(&f, 0, sizeof f);
    f.kind = DIST__FRAME_PAYLOAD; f.tag = (int64_t)r->sid; f.count = r->moved; f.nbytes = len;
    dist__unlink(&r->link);
    dist__wire_reset(w);
    w->hlen = dist__frame_encode(&f, w->hdr);
    w->what = DIST__WIRE_SEGMENT;
    w->req = r;
    w->body = r->sbuf + r->moved;
    w->blen = len;
    r->state = DIST__RS_WIRE;
}

/* Chooses p's next frame: control frames first, then, turn about, a piece
   of an announced payload and the next message; the goodbye last of all.
   0: nothing may go now. */
static int dist__wire_next(dist__engine *e, dist__peer *p) {
    dist__wire *w = &p->wire;
    for (int tries = 0; tries < 2; tries++) {
        if (p->ctl_count) {
            dist__ctl *c = &p->ctl[p->ctl_head];
            dist__wire_reset(w);
            memcpy(w->hdr, c->hdr, DIST__HDR_SIZE);
            w->hlen = DIST__HDR_SIZE;
            w->what = DIST__WIRE_CTL;
            if (c->carrier) { w->req = c->carrier; w->body = c->carrier->sbuf; w->blen = c->carrier->nbytes; }
            p->ctl_head = (p->ctl_head + 1) % p->ctl_cap;
            p->ctl_count--;
            return 1;
        }
        if (p->stream_turn && !dist__list_empty(&p->streamq)) {
            dist__wire_segment(e, p, DIST__CONTAINER(p->streamq.next, dist_req_t, link));
            p->stream_turn = 0;
            return 1;
        }
        if (!dist__list_empty(&p->sendq)) {
            if (dist__wire_message(e, p, DIST__CONTAINER(p->sendq.next, dist_req_t, link))) { p->stream_turn = 1; return 1; }
            if (p->ctl_count) continue;             /* it queued BLOCKED: that goes first */
        }
        if (!dist__list_empty(&p->streamq)) {
            dist__wire_segment(e, p, DIST__CONTAINER(p->streamq.next, dist_req_t, link));
            return 1;
        }
        break;
    }
    if (p->bye_queued && !p->bye_sent && dist__list_empty(&p->sendq) && dist__list_empty(&p->streamq) && !p->rdv_out) {
        dist__frame f;
        memset(&f, 0, sizeof f);
        f.kind = DIST__FRAME_BYE;
        dist__wire_reset(w);
        w->hlen = dist__frame_encode(&f, w->hdr);
        w->what = DIST__WIRE_BYE;
        return 1;
    }
    return 0;
}

/* A frame is out: what it finishes. */
static void dist__wire_done(dist__engine *e, dist__peer *p) {
    dist__wire *w = &p->wire;
    dist_req_t *r = w->req;
    int what = w->what;
    dist__wire_reset(w);
    switch (what) {
    case DIST__WIRE_CTL:
        if (r) dist__req_complete(e, r, DIST_OK);       /* an abort notice's carrier (detached) */
        break;
    case DIST__WIRE_EAGER:
        dist__req_complete(e, r, DIST_OK);
        break;
    case DIST__WIRE_ANNOUNCE:
        if (dist__rdv_add(e, DIST__IX_RDV_SEND, p->rank, r->sid, &r->link, &r->ixq) != 0) {
            dist__req_failf(e, r, DIST_ERR_NOMEM, "out of memory for a rendezvous entry");
            dist__peer_fail(e, p, "out of memory for a rendezvous with rank %d", p->rank);
            break;
        }
        r->state = DIST__RS_ANNOUNCED;
        r->rdv_counted = 1;
        p->rdv_out++;
        break;
    case DIST__WIRE_SEGMENT:
        r->moved += DIST__MIN(DIST__SEGMENT_BYTES, r->nbytes - r->moved);
        if (r->refused) { r->by_peer = 1; dist__req_failf(e, r, DIST_ERR_PEER_LOST, "rank %d did not take the rest of it (its receive ended)", p->rank); break; }
        if (r->moved == r->nbytes) { dist__req_complete(e, r, DIST_OK); break; }
        r->state = DIST__RS_STREAM;
        dist__list_append(&p->streamq, &r->link);
        break;
    case DIST__WIRE_BYE:
        p->bye_sent = 1;
        break;
    default: break;
    }
}

/* Writes to p whatever may go, until its transport is full. */
static void dist__peer_write(dist__engine *e, dist__peer *p) {
    while (p->fd != DIST__NO_SOCKET) {
        dist__wire *w = &p->wire;
        dist__iov iov[2];
        int n = 0;
        dist__ssize k;
        if (!w->hlen && !dist__wire_next(e, p)) return;
        if (w->off < w->hlen) {
            dist__iov_set(&iov[n++], w->hdr + w->off, w->hlen - (size_t)w->off);
            if (w->blen) dist__iov_set(&iov[n++], w->body, (size_t)DIST__MIN(w->blen, (uint64_t)1 << 30));
        } else {
            uint64_t o = w->off - w->hlen;
            dist__iov_set(&iov[n++], w->body + o, (size_t)DIST__MIN(w->blen - o, (uint64_t)1 << 30));
        }
        k = p->t->tx(e, p, iov, n);
        if (k < 0) {
            int err = dist__errno();
            if (dist__err_interrupted(err)) continue;
            if (dist__err_would_block(err)) return;
            dist__peer_fail(e, p, "the connection to rank %d broke while sending (%s)", p->rank, dist__err_text(err));
            return;
        }
        w->off += (uint64_t)k;
        if (w->off == w->hlen + w->blen) dist__wire_done(e, p);
    }
}

/* Anything p could write now (what makes it worth asking poll about). */
static int dist__peer_wants_write(const dist__peer *p) {
    if (p->wire.hlen || p->ctl_count || !dist__list_empty(&p->streamq)) return 1;
    if (!dist__list_empty(&p->sendq)) {
        const dist_req_t *r = DIST__CONTAINER(p->sendq.next, dist_req_t, link);
        return r->pulled || (p->budget && p->credit >= (int64_t)DIST__MSG_COST && !p->blocked);
    }
    return p->bye_queued && !p->bye_sent && !p->rdv_out;
}

/* [SECTION] engine: receiving (frames, matching, rendezvous) */

/* A receive found its message: the sizes (and, for a collective, the whole
   descriptor) must agree exactly, or the receive fails and the payload is
   discarded. */
static int dist__recv_sizes_agree(dist__engine *e, dist_req_t *r, int src, const dist__frame *f) {
    if (r->frame_kind == DIST__FRAME_COLL) {
        if (dist__coll_mismatch(e, r, src, f)) return 0;
        if ((f->flags & DIST__FRAME_STAMP) && f->st_rank < e->world) {
            r->stamped = 1;
            r->st_last = f->st_last; r->st_first = f->st_first; r->st_rank = f->st_rank;
        }
        return 1;
    }
    if (f->dtype == (uint8_t)r->dtype && f->count == r->count) return 1;
    r->source = src;
    dist__req_failf(e, r, DIST_ERR_MISMATCH, "rank %d sent %llu x %s, this rank expects %zu x %s", src,
                    (unsigned long long)f->count, dist_dtype_name((dist_dtype)f->dtype), r->count, dist_dtype_name(r->dtype));
    return 0;
}

/* Copies, or combines, `n` bytes of payload into receive r at `off`. */
static void dist__land(dist_req_t *r, uint64_t off, const uint8_t *data, uint64_t n) {
    if (!n) return;
    if (r->reduce) dist__reduce_table[r->dtype][r->reduce - 1](r->rbuf + off, data, (size_t)n / dist_dtype_size(r->dtype), r->in_first);
    else memcpy(r->rbuf + off, data, (size_t)n);
}

static void dist__msg_drop(dist__engine *e, dist__msg *m) {
    dist__msg_unindex(e, m);
    if (m->qrdv) { dist__ix_unlink(&e->ix, m->qrdv, &m->lrdv); m->qrdv = NULL; }
    if (m->src != e->rank) dist__credit_release(e, &e->peers[m->src], m->charge);
    dist__msg_put(e, m);
}

/* Delivers a complete unexpected message to its receive, and frees it. */
static void dist__msg_deliver(dist__engine *e, dist__msg *m, dist_req_t *r) {
    r->msg = NULL;
    r->source = m->src;
    if (m->err != DIST_OK) {
        dist__req_failf(e, r, m->err, "the message from rank %d was lost (%s)", m->src, dist_result_text(m->err));
    } else {
        dist__land(r, 0, m->data, m->f.nbytes);
        dist__req_complete(e, r, DIST_OK);
    }
    dist__msg_drop(e, m);
}

/* Receive r took the announcement `sid` from p: its payload is copied from
   the sender's memory (by reference), or asked for (CTS). */
static void dist__rdv_accept(dist__engine *e, dist__peer *p, dist_req_t *r, uint64_t sid, uint64_t addr) {
    r->sid = sid;
    r->source = p->rank;
    r->moved = 0;
    if (p->state != DIST__PEER_OK || p->fd == DIST__NO_SOCKET) {
        dist__req_failf(e, r, DIST_ERR_PEER_LOST, "%s", p->why);
        return;
    }
    if (addr) {
        r->ref = addr;
        r->state = DIST__RS_PULLING;
        dist__list_append(&p->pullq, &r->link);
        return;
    }
    if (dist__rdv_add(e, DIST__IX_RDV_RECV, p->rank, sid, &r->link, &r->ixq) != 0) {
        dist__req_failf(e, r, DIST_ERR_NOMEM, "out of memory for a rendezvous entry");
        dist__refuse(e, p, sid, DIST__REFUSED_GONE);
        return;
    }
    r->state = DIST__RS_AWAITING;
    dist__send_ctl(e, p, DIST__FRAME_CTS, (int64_t)sid, 0, 0);
}

/* Receive r takes unexpected message m (dist__find_message's). */
static void dist__take(dist__engine *e, dist_req_t *r, dist__msg *m) {
    int announced = (m->f.flags & (DIST__FRAME_RTS | DIST__FRAME_PROMPT)) == DIST__FRAME_RTS;   /* its payload is not here */
    if (!dist__recv_sizes_agree(e, r, m->src, &m->f)) {
        if (announced) { dist__refuse(e, &e->peers[m->src], m->f.sid, DIST__REFUSED_MISMATCH); dist__msg_drop(e, m); }
        else if (m->complete) dist__msg_drop(e, m);
        else m->dead = 1;                        /* dropped once the rest has arrived */
        return;
    }
    if (announced) {
        uint64_t sid = m->f.sid, addr = m->f.addr;
        dist_result err = m->err;
        int src = m->src;
        dist__msg_drop(e, m);
        if (err != DIST_OK) dist__req_failf(e, r, err, "the message from rank %d was lost (%s)", src, dist_result_text(err));
        else dist__rdv_accept(e, &e->peers[src], r, sid, addr);
        return;
    }
    if (m->complete) dist__msg_deliver(e, m, r);
    else { m->claimed = r; r->msg = m; r->state = DIST__RS_CLAIMED; }
}

/* Reads what the transport has into the staging buffer.  Returns 1 if
   bytes arrived, 0 if none are ready or the connection ended. */
static int dist__rx_fill(dist__engine *e, dist__peer *p, size_t keep, size_t want) {
    dist__rx *x = &p->rx;
    if (x->reads_left-- <= 0) return 0;
    for (;;) {
        dist__ssize n = p->t->rx(e, p, x->stage + keep, want);
        int err;
        if (n > 0) { x->pos = 0; x->end = keep + (size_t)n; x->drained = (size_t)n < want; return 1; }
        err = dist__errno();
        if (n < 0 && dist__err_interrupted(err)) continue;
        if (n < 0 && dist__err_would_block(err)) return 0;
        if ((n == 0 || dist__err_reset(err)) && p->state == DIST__PEER_LEFT && !x->in_payload && x->got == 0 && !keep) {
            /* the orderly end after its goodbye (a reset too: a socket
               closed with bytes unread ends so, and nothing more was due) */
            p->t->close(e, p);
            return 0;
        }
        if (n == 0 && (x->in_payload || x->got || keep))
            dist__peer_fail(e, p, "rank %d closed its connection in the middle of a message (did it exit or crash?)", p->rank);
        else if (n == 0)
            dist__peer_fail(e, p, "rank %d closed its connection without saying goodbye (did it exit or crash?)", p->rank);
        else
            dist__peer_fail(e, p, "the connection to rank %d broke (%s)", p->rank, dist__err_text(err));
        return 0;
    }
}

/* Payload of a combining receive: whole elements are reduced straight from
   the staging buffer into the destination (no second pass over memory).
   Elements must be aligned for the kernel, so the bytes are moved to the
   start of the buffer when they are not (at most once per refill), and a
   partial element waits at the start for the rest of it.  Returns 0 when
   no more bytes are ready. */
static int dist__rx_reduce_step(dist__engine *e, dist__peer *p) {
    dist__rx *x = &p->rx;
    dist_req_t *r = x->req;
    size_t es = dist_dtype_size(r->dtype), avail = x->end - x->pos;
    size_t usable = (size_t)DIST__MIN((uint64_t)avail, x->left);
    usable -= usable % es;
    if (usable) {
        if ((uintptr_t)(x->stage + x->pos) % es) {
            memmove(x->stage, x->stage + x->pos, avail);
            x->pos = 0; x->end = avail;
        }
        dist__reduce_table[r->dtype][r->reduce - 1](x->dst, x->stage + x->pos, usable / es, r->in_first);
        x->dst += usable; x->pos += usable; x->left -= usable;
        return 1;
    }
    if (x->drained) return 0;
    if (avail) memmove(x->stage, x->stage + x->pos, avail);
    x->pos = 0; x->end = avail;
    return dist__rx_fill(e, p, avail, (size_t)DIST__MIN((uint64_t)(DIST__STAGE_SIZE - avail), x->left - avail));
}

static void dist__rx_payload(dist__rx *x, uint8_t *dst, uint64_t n) {
    x->in_payload = 1;
    x->dst = dst;
    x->left = n;
}

static void dist__on_goodbye(dist__engine *e, dist__peer *p);
static void dist__fill_done(dist__engine *e, dist_req_t *j, dist_result res);
static void dist__peer_fail_code(dist__engine *e, dist__peer *p, dist_result code, const char *fmt, ...);

/* A DATA or COLL header from p: its receive, or the unexpected queue.
   Returns -1 when p failed. */
static int dist__on_message(dist__engine *e, dist__peer *p) {
    dist__rx *x = &p->rx;
    dist__frame *f = &x->cur;
    int rts = (f->flags & DIST__FRAME_RTS) != 0, prompt = (f->flags & DIST__FRAME_PROMPT) != 0;
    uint32_t charge = (f->flags & DIST__FRAME_PULLED) ? 0 : (uint32_t)(DIST__MSG_COST + (rts && !prompt ? 0 : f->nbytes));
    dist_req_t *r;
    dist__msg *m;
    if (rts && (f->nbytes == 0 || f->sid == 0 || (prompt && !f->addr))) {
        dist__peer_fail(e, p, "rank %d announced a message of %llu byte%s with id %llu%s", p->rank, (unsigned long long)f->nbytes,
                        DIST__PLURAL(f->nbytes), (unsigned long long)f->sid, prompt && !f->addr ? " and no address" : "");
        return -1;
    }
    if (rts && f->addr && !p->t->pull) {
        dist__peer_fail(e, p, "rank %d sent a message by reference over %s", p->rank, p->t->name);
        return -1;
    }
    if (f->flags & DIST__FRAME_PULLED) {
        if (!p->pull_out) { dist__peer_fail(e, p, "rank %d sent a message ahead that was not asked for", p->rank); return -1; }
        p->pull_out = 0;
    } else if ((!rts || prompt) && f->nbytes > e->budget) {
        dist__peer_fail(e, p, "rank %d sent %llu bytes eagerly, more than its flow-control budget of %llu bytes",
                        p->rank, (unsigned long long)f->nbytes, (unsigned long long)e->budget);
        return -1;
    } else if (p->held + p->owed + charge > e->budget) {
        dist__peer_fail(e, p, "rank %d sent more than its flow-control budget of %llu bytes allows", p->rank,
                        (unsigned long long)e->budget);
        return -1;
    }
    p->held += charge;
    x->charge = 0;
    if (e->nrevoked) {
        dist_t *cd = dist__engine_comm(e, f->comm);
        if (cd && cd->revoked) {       /* nobody receives on a revoked communicator: dropped */
            if (rts) { dist__refuse(e, p, f->sid, DIST__REFUSED_REVOKED); dist__credit_release(e, p, charge); }
            else { x->charge = charge; dist__rx_payload(x, NULL, f->nbytes); }
            return 0;
        }
    }
    if ((r = dist__find_receive(e, p->rank, f)) != NULL) {
        dist__unpost(e, r);
        if (!dist__recv_sizes_agree(e, r, p->rank, f)) {
            if (rts) { dist__refuse(e, p, f->sid, DIST__REFUSED_MISMATCH); dist__credit_release(e, p, charge); }
            else { x->charge = charge; dist__rx_payload(x, NULL, f->nbytes); }
            return 0;
        }
        if (rts) {
            dist__credit_release(e, p, charge);
            dist__rdv_accept(e, p, r, f->sid, f->addr);
            return 0;
        }
        r->source = p->rank;
        r->state = DIST__RS_READING;
        x->req = r;
        x->charge = charge;
        dist__rx_payload(x, r->rbuf, f->nbytes);
        return 0;
    }
    if (f->kind == DIST__FRAME_COLL) {
        /* A frame of a collective that already ended here (it failed, and
           its peers sent on): nobody will ask for it.  Or one whose
           descriptor disagrees with the collective running here. */
        dist_t *cd = dist__engine_comm(e, f->comm);
        int drop = 0;
        if (cd && (uint64_t)f->tag <= DIST__LOAD_ACQ(&cd->done_seq)) { dist__coll_check_late(e, cd, p->rank, f); drop = 1; }
        else if (cd && dist__coll_check_early(e, cd, p->rank, f)) drop = 1;
        if (drop) {
            if (rts) { dist__refuse(e, p, f->sid, DIST__REFUSED_MISMATCH); dist__credit_release(e, p, charge); }
            else { x->charge = charge; dist__rx_payload(x, NULL, f->nbytes); }
            return 0;
        }
    }
    m = dist__msg_get(e, rts && !prompt ? 0 : f->nbytes);
    r = prompt && m ? dist__req_alloc(e) : NULL;
    if (m) {
        m->src = p->rank;
        m->f = *f;
        m->charge = charge;
        if (dist__msg_index(e, m) != 0 || (prompt && !r) ||
            (rts && !prompt && dist__rdv_add(e, DIST__IX_RDV_ANNOUNCED, p->rank, f->sid, &m->lrdv, &m->qrdv) != 0)) {
            dist__msg_unindex(e, m);
            dist__msg_put(e, m);
            m = NULL;
        }
    }
    if (!m) {
        if (r) dist__req_release(e, r);
        dist__peer_fail(e, p, "out of memory for a %llu-byte message from rank %d", (unsigned long long)f->nbytes, p->rank);
        return -1;
    }
    if (prompt) {
        /* Copied from the sender's memory into the message at once (a
           pull job that fills it), as an eager payload would have come. */
        r->kind = DIST__REQ_RECV; r->source = p->rank; r->dtype = (dist_dtype)f->dtype;
        r->rbuf = m->data; r->nbytes = f->nbytes; r->ref = f->addr; r->sid = f->sid;
        r->msg = m;
        r->state = DIST__RS_PULLING;
        dist__list_append(&p->pullq, &r->link);
        return 0;
    }
    if (rts) { m->complete = 1; return 0; }
    x->msg = m;
    dist__rx_payload(x, m->data, f->nbytes);
    return 0;
}

/* A PAYLOAD piece of an announced message: into its receive, or dropped
   when that receive is gone (it timed out). */
static int dist__on_segment(dist__engine *e, dist__peer *p) {
    dist__rx *x = &p->rx;
    dist__frame *f = &x->cur;
    dist__link *n = dist__rdv_find(e, DIST__IX_RDV_RECV, p->rank, (uint64_t)f->tag);
    dist_req_t *r = n ? DIST__CONTAINER(n, dist_req_t, link) : NULL;
    if (!r) { dist__rx_payload(x, NULL, f->nbytes); return 0; }
    if (f->root != 0 || f->count != r->moved || f->nbytes > r->nbytes - r->moved || f->nbytes % dist_dtype_size(r->dtype)) {
        dist__peer_fail(e, p, "rank %d sent %llu byte%s at offset %llu of a %llu-byte message, %llu of which had arrived", p->rank,
                        (unsigned long long)f->nbytes, DIST__PLURAL(f->nbytes), (unsigned long long)f->count, (unsigned long long)r->nbytes,
                        (unsigned long long)r->moved);
        return -1;
    }
    x->req = r;
    x->segment = 1;
    dist__rx_payload(x, r->rbuf + r->moved, f->nbytes);
    return 0;
}

/* The sender withdrew announcement `sid` (its send timed out).  By
   reference, it waits to hear that we will not read its memory: a copy
   that has begun is finished (and acknowledged) instead. */
static int dist__on_withdrawn(dist__engine *e, dist__peer *p, uint64_t sid) {
    dist__link *n = dist__rdv_find(e, DIST__IX_RDV_ANNOUNCED, p->rank, sid);
    if (n) {
        dist__msg *m = DIST__CONTAINER(n, dist__msg, lrdv);
        int by_ref = m->f.addr != 0;
        dist__msg_drop(e, m);
        if (by_ref) dist__send_ctl(e, p, DIST__FRAME_CANCEL, (int64_t)sid, 0, 2);
        return 0;
    }
    if ((n = dist__rdv_find(e, DIST__IX_RDV_RECV, p->rank, sid)) != NULL) {
        dist_req_t *r = DIST__CONTAINER(n, dist_req_t, link);
        dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL;
        dist__req_failf(e, r, DIST_ERR_TIMEOUT, "rank %d withdrew the message (its send timed out)", p->rank);
        return 0;
    }
    for (n = p->pullq.next; n != &p->pullq; n = n->next) {
        dist_req_t *r = DIST__CONTAINER(n, dist_req_t, link);
        if (r->sid != sid) continue;
        if (r->begun) return 0;                /* under way: it ends with an ACK */
        dist__unlink(n);
        dist__send_ctl(e, p, DIST__FRAME_CANCEL, (int64_t)sid, 0, 2);
        if (r->msg) dist__fill_done(e, r, DIST_ERR_TIMEOUT);
        else dist__req_failf(e, r, DIST_ERR_TIMEOUT, "rank %d withdrew the message (its send timed out)", p->rank);
        return 0;
    }
    return 0;      /* copied already: its ACK is on the way */
}

/* Control frames about our sends (we are the sender). */
static dist_req_t *dist__announced(dist__engine *e, dist__peer *p, uint64_t sid) {
    dist__link *n = dist__rdv_find(e, DIST__IX_RDV_SEND, p->rank, sid);
    dist_req_t *r = n ? DIST__CONTAINER(n, dist_req_t, link) : NULL;
    if (r) { dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL; }
    return r;
}

static int dist__on_control(dist__engine *e, dist__peer *p) {
    dist__frame *f = &p->rx.cur;
    dist_req_t *r;
    switch (f->kind) {
    case DIST__FRAME_CTS:
        if ((r = dist__announced(e, p, (uint64_t)f->tag)) == NULL) return 0;   /* withdrawn meanwhile */
        if (r->by_ref) { dist__peer_fail(e, p, "rank %d asked for a message it was to copy itself", p->rank); return -1; }
        r->state = DIST__RS_STREAM;
        r->moved = 0;
        dist__list_append(&p->streamq, &r->link);
        return 0;
    case DIST__FRAME_ACK:
        if ((r = dist__announced(e, p, (uint64_t)f->tag)) == NULL || !r->by_ref) {
            dist__peer_fail(e, p, "rank %d acknowledged a message it was not sent", p->rank);
            return -1;
        }
        dist__req_complete(e, r, DIST_OK);
        return 0;
    case DIST__FRAME_CANCEL:
        if (f->root == 0) return dist__on_withdrawn(e, p, (uint64_t)f->tag);   /* the sender withdrew its announcement */
        if (f->root == 2) {                    /* ...and we learn it was dropped unread */
            dist__link *n = dist__rdv_find(e, DIST__IX_RDV_SEND, p->rank, (uint64_t)f->tag);
            r = n ? DIST__CONTAINER(n, dist_req_t, link) : NULL;
            if (!r || r->state != DIST__RS_REVOKING) { dist__peer_fail(e, p, "rank %d dropped a message that was not withdrawn", p->rank); return -1; }
            dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL;
            dist__req_complete(e, r, r->withdrawn);          /* its sentence is written */
            return 0;
        }
        if ((r = dist__announced(e, p, (uint64_t)f->tag)) == NULL) {
            /* streaming already: in the stream queue, or a piece on the wire */
            dist_req_t *w = p->wire.what == DIST__WIRE_SEGMENT ? p->wire.req : NULL;
            if (w && w->sid == (uint64_t)f->tag) { w->refused = 1; return 0; }
            for (dist__link *n = p->streamq.next; n != &p->streamq && !r; n = n->next)
                if (DIST__CONTAINER(n, dist_req_t, link)->sid == (uint64_t)f->tag) { r = DIST__CONTAINER(n, dist_req_t, link); dist__unlink(n); }
        }
        if (r && f->count == DIST__REFUSED_REVOKED && r->comm && r->comm->revoked)
            dist__req_failf(e, r, DIST_ERR_REVOKED, "%s", r->comm->revoke_note.text);   /* the cause, as this rank knows it */
        else if (r) {
            r->by_peer = 1;        /* its words, not a timeout of ours */
            dist__req_failf(e, r, f->count == DIST__REFUSED_MISMATCH ? DIST_ERR_MISMATCH : f->count == DIST__REFUSED_WITHDRAWN ? DIST_ERR_TIMEOUT :
                                  f->count == DIST__REFUSED_REVOKED ? DIST_ERR_REVOKED : DIST_ERR_PEER_LOST,
                            "rank %d did not take it (%s)", p->rank,
                            f->count == DIST__REFUSED_MISMATCH ? "its receive expects another message" :
                            f->count == DIST__REFUSED_WITHDRAWN ? "its receive timed out" :
                            f->count == DIST__REFUSED_REVOKED ? "the communicator was revoked there" : "its receive ended before it came");
        }
        return 0;
    case DIST__FRAME_CREDIT:
        if (f->root == 1 ? p->budget != 0 : (!p->budget || p->granted + f->count > p->budget + p->charged)) {
            dist__peer_fail(e, p, "rank %d handed back credit it was not given", p->rank);
            return -1;
        }
        if (f->root == 1) p->budget = f->count;
        p->granted += f->count;
        p->credit += (int64_t)f->count;
        p->blocked = 0;
        return 0;
    case DIST__FRAME_BLOCKED:
        if (p->owed) {                          /* what we owe may be enough; it says again if not */
            uint64_t n = p->owed;
            p->owed = 0;
            dist__send_ctl(e, p, DIST__FRAME_CREDIT, 0, n, 0);
        } else if (!p->peer_blocked) {
            p->peer_blocked = 1;
            e->blocked_peers++;
        }
        return 0;
    case DIST__FRAME_PULL:
        if (f->root == 1) { p->pull_out = 0; p->pull_miss_ns = dist__now_ns(); return 0; }
        {   /* the first matching message not yet going ahead goes ahead, after
               those that already do (so a tag's messages keep their order) */
            dist__link *after = &p->sendq;
            for (dist__link *n = p->sendq.next; n != &p->sendq; n = n->next) {
                r = DIST__CONTAINER(n, dist_req_t, link);
                if (r->pulled) { after = n; continue; }
                if (r->frame_kind == f->coll && r->comm_id == f->comm && r->tag == f->tag) {
                    dist__unlink(n);
                    r->pulled = 1;
                    dist__list_prepend(after, n);           /* right after `after` */
                    return 0;
                }
            }
        }
        {   /* nothing to pull (yet): say so, so it may ask again later */
            dist__frame miss = *f;
            miss.root = 1;
            if (dist__ctl_push(e, p, &miss, NULL) != 0) dist__peer_fail(e, p, "out of memory for a control frame to rank %d", p->rank);
        }
        return 0;
    default:
        return 0;
    }
}

/* A complete header (and trailer) arrived from p. */
static int dist__on_frame(dist__engine *e, dist__peer *p) {
    char why[200];
    dist__rx *x = &p->rx;
    dist__frame *f = &x->cur;
    if (dist__frame_decode(x->hdr, f, why, sizeof why) != 0) {
        dist__peer_fail(e, p, "rank %d sent a malformed frame: %s", p->rank, why);
        return -1;
    }
    if (dist__frame_trailer(x->hdr, f, why, sizeof why) != 0) {
        dist__peer_fail(e, p, "rank %d sent a malformed frame: %s", p->rank, why);
        return -1;
    }
    x->dst = NULL; x->req = NULL; x->msg = NULL; x->abort = 0; x->segment = 0; x->charge = 0;
    switch (f->kind) {
    case DIST__FRAME_DATA: case DIST__FRAME_COLL: return dist__on_message(e, p);
    case DIST__FRAME_PAYLOAD: return dist__on_segment(e, p);
    case DIST__FRAME_BYE:
        if (f->root == 1) p->bye_answered = 1;                   /* an answer to ours */
        else dist__on_goodbye(e, p);
        return 0;
    case DIST__FRAME_ABORT:
        x->abort = 1;
        dist__rx_payload(x, (uint8_t *)x->abort_text, f->nbytes);
        return 0;
    default: return dist__on_control(e, p);
    }
}

static void dist__on_payload_done(dist__engine *e, dist__peer *p) {
    dist__rx *x = &p->rx;
    x->in_payload = 0;
    if (x->abort) {
        x->abort = 0;
        x->abort_text[x->cur.nbytes] = 0;
        dist__on_abort(e, p->rank, x->cur.comm, x->cur.tag, x->cur.root,
                       x->cur.count > 0 && x->cur.count <= (uint64_t)e->world ? (int)x->cur.count - 1 : -1, x->abort_text);
    }
    if (x->req) {
        dist_req_t *r = x->req;
        x->req = NULL;
        if (x->segment) {
            r->moved += x->cur.nbytes;
            if (r->moved == r->nbytes) {
                dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL;
                dist__req_complete(e, r, DIST_OK);
            }
        } else {
            dist__req_complete(e, r, DIST_OK);
        }
    }
    if (x->msg) {
        dist__msg *m = x->msg;
        x->msg = NULL;
        m->complete = 1;
        if (m->claimed) { dist_req_t *r = m->claimed; m->claimed = NULL; dist__msg_deliver(e, m, r); }
        else if (m->dead) dist__msg_drop(e, m);
    }
    if (x->charge) { uint32_t c = x->charge; x->charge = 0; dist__credit_release(e, p, c); }
}

/* Reads and dispatches what p's transport holds.  A read that returns less
   than it asked for emptied it, so the next read would only say EAGAIN:
   that call is saved, and poll (level-triggered) reports whatever arrives
   later. */
static void dist__peer_read(dist__engine *e, dist__peer *p) {
    dist__rx *x = &p->rx;
    /* Whatever is staged is always dispatched (poll cannot tell about it);
       only the reads from the transport are rationed, so one busy peer
       does not starve the others. */
    x->drained = 0;
    x->reads_left = 64;
    while (p->fd != DIST__NO_SOCKET) {
        size_t avail = x->end - x->pos;
        if (x->in_payload && x->left && x->req && x->req->reduce) {
            if (!dist__rx_reduce_step(e, p)) return;
            continue;
        }
        if (avail == 0 && x->drained && !(x->in_payload && x->left == 0)) return;
        if (!x->in_payload) {
            size_t n;
            if (avail == 0) { if (!dist__rx_fill(e, p, 0, DIST__STAGE_SIZE)) return; avail = x->end; }
            if (x->got < DIST__HDR_SIZE) x->need = DIST__HDR_SIZE;
            n = DIST__MIN(x->need - x->got, avail);
            memcpy(x->hdr + x->got, x->stage + x->pos, n);
            x->pos += n; x->got += n;
            if (x->got == DIST__HDR_SIZE && x->need == DIST__HDR_SIZE && (x->hdr[0] & (DIST__FRAME_RTS | DIST__FRAME_STAMP)))
                x->need = dist__frame_size_of(x->hdr[0]);    /* an announcement's trailer, or a stamp, follows */
            else if (x->got == x->need) {
                x->got = 0;
                if (dist__on_frame(e, p) != 0) return;
            }
        } else if (x->left == 0) {
            dist__on_payload_done(e, p);
        } else if (avail > 0) {
            size_t n = (size_t)DIST__MIN((uint64_t)avail, x->left);
            if (x->dst) { memcpy(x->dst, x->stage + x->pos, n); x->dst += n; }
            x->pos += n; x->left -= n;
        } else if (x->dst && x->left >= DIST__STAGE_SIZE) {
            /* Large payloads go straight from the transport to their buffer. */
            size_t want = (size_t)DIST__MIN(x->left, (uint64_t)1 << 30);
            dist__ssize n;
            int err;
            if (x->reads_left-- <= 0) return;
            n = p->t->rx(e, p, x->dst, want);
            if (n > 0) { x->dst += n; x->left -= (uint64_t)n; x->drained = (size_t)n < want; continue; }
            err = dist__errno();
            if (n < 0 && dist__err_interrupted(err)) continue;
            if (n < 0 && dist__err_would_block(err)) return;
            if (n == 0) dist__peer_fail(e, p, "rank %d closed its connection in the middle of a message (did it exit or crash?)", p->rank);
            else dist__peer_fail(e, p, "the connection to rank %d broke (%s)", p->rank, dist__err_text(err));
            return;
        } else if (!dist__rx_fill(e, p, 0, DIST__STAGE_SIZE)) {
            return;
        }
    }
}

/* A job that filled an unexpected message (a prompt announcement) ended:
   the message is complete (or lost), and goes to the receive that took it
   meanwhile. */
static void dist__fill_done(dist__engine *e, dist_req_t *j, dist_result res) {
    dist__msg *m = j->msg;
    j->msg = NULL;
    dist__req_release(e, j);
    m->complete = 1;
    m->err = res;
    if (m->claimed) { dist_req_t *c = m->claimed; m->claimed = NULL; dist__msg_deliver(e, m, c); }
    else if (m->dead) dist__msg_drop(e, m);
}

/* Copies announced payloads by reference, in order; each one done is
   acknowledged, which frees the sender's buffer.  1 if anything moved. */
static int dist__peer_pull(dist__engine *e, dist__peer *p) {
    int moved = 0;
    for (int turns = 64; turns > 0 && !dist__list_empty(&p->pullq) && p->fd != DIST__NO_SOCKET; turns--) {
        dist_req_t *r = DIST__CONTAINER(p->pullq.next, dist_req_t, link);
        int k = p->t->pull(e, p, r);
        if (p->fd == DIST__NO_SOCKET || r->state != DIST__RS_PULLING) return 1;   /* failed meanwhile */
        if (r->moved == r->nbytes) {
            dist__unlink(&r->link);
            dist__send_ctl(e, p, DIST__FRAME_ACK, (int64_t)r->sid, 0, 0);
            if (r->msg) dist__fill_done(e, r, DIST_OK);
            else dist__req_complete(e, r, DIST_OK);
            moved = 1;
            continue;
        }
        if (!k) break;
        moved = 1;
    }
    return moved;
}

/* [SECTION] engine: failure */

/* Gathers (through r->next) the requests in every index queue of `table`
   from source `src` (-2: any).  (A death fails only what needed the dead
   rank: a collective's receives from others go on, since it may have
   finished its part and left; whoever still waits for it fails and tells
   the others.) */
static dist_req_t *dist__ix_gather(dist__engine *e, dist_req_t *list, int table, int src) {
    for (size_t i = 0; i < e->ix.cap; i++) {
        dist__queue *q = e->ix.slot[i];
        if (!q || q->table != table || dist__list_empty(&q->items)) continue;
        if (src != -2 && q->src != src) continue;
        for (dist__link *n = q->items.next; n != &q->items; n = n->next) {
            dist_req_t *r = DIST__CONTAINER(n, dist_req_t, link);
            r->next = list;
            list = r;
        }
    }
    return list;
}

static void dist__fail_list(dist__engine *e, dist_req_t *list, dist_result code, const char *why) {
    while (list) {
        dist_req_t *r = list;
        list = r->next;
        r->next = NULL;
        if (r->ixq) { dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL; }
        else dist__unlink(&r->link);
        dist__req_failf(e, r, code, "%s", why);
    }
}

static void dist__peer_fail_requests(dist__engine *e, dist__peer *p, dist_result code) {
    int dead = p->state == DIST__PEER_FAILED;
    DIST__STORE_RELAXED(&e->events, e->events + 1);
    dist__rx *x = &p->rx;
    dist_req_t *list = NULL;
    /* what was on its way to it (a frame half written to a rank that left
       is finished: it reads to the end) */
    if (p->wire.hlen && !(p->state == DIST__PEER_LEFT && p->wire.off > 0)) {
        dist_req_t *r = p->wire.req;
        int what = p->wire.what;
        dist__wire_reset(&p->wire);
        if (r && what == DIST__WIRE_CTL) dist__req_complete(e, r, code);     /* a notice's carrier */
        else if (r) { r->next = list; list = r; }
    }
    while (p->ctl_count) {
        dist__ctl *c = &p->ctl[p->ctl_head];
        if (c->carrier) dist__req_complete(e, c->carrier, code);
        p->ctl_head = (p->ctl_head + 1) % p->ctl_cap;
        p->ctl_count--;
    }
    for (dist__link *qs[2] = { &p->sendq, &p->streamq }, **q = qs; q < qs + 2; q++)
        for (dist__link *n = (*q)->next; n != *q; n = n->next) {
            dist_req_t *r = DIST__CONTAINER(n, dist_req_t, link);
            r->next = list;
            list = r;
        }
    list = dist__ix_gather(e, list, DIST__IX_RDV_SEND, p->rank);
    /* what it was to send us */
    if (!dist__list_empty(&p->pullq) && p->t->pull_stop)
        p->t->pull_stop(e, p, DIST__CONTAINER(p->pullq.next, dist_req_t, link));
    while (!dist__list_empty(&p->pullq)) {
        dist_req_t *r = DIST__CONTAINER(p->pullq.next, dist_req_t, link);
        dist__unlink(&r->link);
        if (r->msg) { dist__fill_done(e, r, code); continue; }
        r->next = list;
        list = r;
    }
    list = dist__ix_gather(e, list, DIST__IX_RDV_RECV, p->rank);
    list = dist__ix_gather(e, list, DIST__IX_POSTED, p->rank);
    if (dead) list = dist__ix_gather(e, list, DIST__IX_POSTED_ANY, -2);
    if (x->req) {
        if (!x->segment) { x->req->next = list; list = x->req; }   /* (a piece's receive is in RDV_RECV) */
        x->req = NULL;
    }
    /* announcements it made: whoever takes one now fails */
    for (size_t i = 0; i < e->ix.cap; i++) {
        dist__queue *q = e->ix.slot[i];
        if (!q || q->table != DIST__IX_RDV_ANNOUNCED || q->src != p->rank) continue;
        for (dist__link *n = q->items.next; n != &q->items; n = n->next) DIST__CONTAINER(n, dist__msg, lrdv)->err = code;
    }
    dist__fail_list(e, list, code, p->why);
    if (x->msg && !x->msg->complete) {
        dist__msg *m = x->msg;
        m->err = code;
        m->complete = 1;
        if (m->claimed) { dist_req_t *c = m->claimed; m->claimed = NULL; dist__msg_deliver(e, m, c); }
        else if (m->dead) dist__msg_drop(e, m);
    }
    x->msg = NULL;
    x->abort = 0;
    x->in_payload = 0;
    x->dst = NULL;
    x->charge = 0;
    x->segment = 0;
}

/* The connection to `p` is over: every request that needs it fails now
   with `code`. */
static void dist__peer_vfail(dist__engine *e, dist__peer *p, dist_result code, const char *fmt, va_list ap) {
    if (p->state == DIST__PEER_FAILED) return;
    dist__vformat(p->why, sizeof p->why, fmt, ap);
    p->state = DIST__PEER_FAILED;
    DIST__STORE_RELAXED(&e->failed_peers, e->failed_peers + 1);
    if (p->peer_blocked) { p->peer_blocked = 0; e->blocked_peers--; }
    p->t->close(e, p);
    if (code != DIST_ERR_ABORTED) dist__logf(&e->log, DIST_LOG_ERROR, "%s", p->why);   /* (dist_abort says it once) */
    dist__peer_fail_requests(e, p, code);
    /* A collective it was in goes on where it needs nothing more from it:
       it may have finished its part and left.  Whoever still waits for it
       fails, and tells the others (dist__coll_notify). */
    if (e->sleepers) dist__cond_broadcast(&e->cond);
}

static void dist__peer_fail(dist__engine *e, dist__peer *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dist__peer_vfail(e, p, DIST_ERR_PEER_LOST, fmt, ap);
    va_end(ap);
}

static void dist__peer_fail_code(dist__engine *e, dist__peer *p, dist_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dist__peer_vfail(e, p, code, fmt, ap);
    va_end(ap);
}

static void dist__on_goodbye(dist__engine *e, dist__peer *p) {
    p->state = DIST__PEER_LEFT;
    dist__format(p->why, sizeof p->why, "rank %d has shut down (it called dist_destroy)", p->rank);
    if (p->peer_blocked) { p->peer_blocked = 0; e->blocked_peers--; }
    dist__peer_fail_requests(e, p, DIST_ERR_PEER_LOST);
    /* answered (a goodbye frame with root 1: "heard, nothing more comes
       from here"), so a rank that leaves alone (a dynamic RPC worker)
       need not wait for the others' own dist_destroy before it closes */
    if (!p->bye_queued) { dist__send_ctl(e, p, DIST__FRAME_BYE, 0, 0, 1); dist__peer_write(e, p); }
}

/* [SECTION] engine: progress, waiting, withdrawing */
static void dist__shm_sleeping(dist__engine *e, int on);   /* [SECTION] transport: shared memory */

/* Bytes staged or a payload finished that the parser has not dispatched. */
static int dist__rx_staged(const dist__peer *p) {
    return p->rx.pos < p->rx.end || (p->rx.in_payload && p->rx.left == 0);
}

/* Does what the peers' transports have for us that poll() cannot report;
   1 if anything moved. */
static int dist__pending_step(dist__engine *e) {
    int moved = 0;
    for (int i = 0; i < e->world; i++) {
        dist__peer *p = &e->peers[i];
        int f;
        if (!p->t || !p->t->pending || p->fd == DIST__NO_SOCKET) continue;
        if ((f = p->t->pending(e, p)) < 0) { dist__peer_fail(e, p, "the shared-memory ring from rank %d is corrupt", p->rank); continue; }
        if ((f & DIST__PEND_READ) || dist__rx_staged(p)) { dist__peer_read(e, p); moved = 1; }
        if (!dist__list_empty(&p->pullq) && dist__peer_pull(e, p)) moved = 1;
        if ((f & DIST__PEND_WRITE) && dist__peer_wants_write(p)) {
            uint64_t before = p->wire.off + p->ctl_count;
            int idle = !p->wire.hlen;
            dist__peer_write(e, p);
            moved |= idle || p->wire.off + p->ctl_count != before;
        }
        if ((f & DIST__PEND_HELP) && p->t->help && p->t->help(e, p)) moved = 1;
    }
    return moved;
}

/* Is there anything for dist__pending_step to do right now? */
static int dist__pending_any(dist__engine *e) {
    for (int i = 0; i < e->world; i++) {
        dist__peer *p = &e->peers[i];
        int f;
        if (!p->t || !p->t->pending || p->fd == DIST__NO_SOCKET) continue;
        f = p->t->pending(e, p);
        if (f < 0 || (f & (DIST__PEND_READ | DIST__PEND_HELP)) || dist__rx_staged(p) || !dist__list_empty(&p->pullq)) return 1;
        if ((f & DIST__PEND_WRITE) && dist__peer_wants_write(p)) return 1;
    }
    return 0;
}

/* One round: the transports' own work, then poll every socket (lock
   released meanwhile) and read and write whatever is ready.  The caller
   holds the lock and the driver role. */
static void dist__progress(dist__engine *e, int timeout_ms) {
    int n = 0, nshm = e->shm.nshm;
    if (nshm && dist__pending_step(e)) timeout_ms = 0;
    /* Rings alone need no system call: a spinning caller polls the sockets
       (doorbells, liveness) only every 16th round. */
    if (timeout_ms == 0 && nshm && !e->shm.ntcp && (++e->shm.spins & 15)) return;
    dist__pollfd_set(&e->pfds[n], e->wake.rfd, 1, 0); e->pfd_peer[n] = -1; n++;
    for (int i = 0; i < e->world; i++) {
        dist__peer *p = &e->peers[i];
        if (i == e->rank || p->fd == DIST__NO_SOCKET) continue;
        dist__pollfd_set(&e->pfds[n], p->fd, 1, p->t->uses_fd && dist__peer_wants_write(p));
        e->pfd_peer[n] = i;
        n++;
    }
    if (timeout_ms > 0 && nshm) {
        /* Tell writers to ring, then look once more: what they wrote before
           they could see the flag is seen here. */
        dist__shm_sleeping(e, 1);
        if (dist__pending_any(e)) timeout_ms = 0;
    }
    e->polling = 1;
    dist__mutex_unlock(&e->lock);
    n = dist__poll(e->pfds, n, timeout_ms) > 0 ? n : 0;
    dist__mutex_lock(&e->lock);
    e->polling = 0;
    if (nshm) dist__shm_sleeping(e, 0);
    for (int i = 0; i < n; i++) {
        int rd, wr;
        dist__peer *p;
        if (!dist__pollfd_ready(&e->pfds[i], &rd, &wr)) continue;
        if (e->pfd_peer[i] < 0) { dist__wakeup_drain(&e->wake); continue; }
        p = &e->peers[e->pfd_peer[i]];
        if (p->fd != dist__pollfd_fd(&e->pfds[i])) continue;      /* closed meanwhile */
        if (rd) p->t->readable(e, p);
        if (p->fd != DIST__NO_SOCKET && (wr || (p->t->uses_fd && dist__peer_wants_write(p)))) dist__peer_write(e, p);
    }
    if (nshm) dist__pending_step(e);
}

/* Releases the driver role and wakes whoever waits for it. */
static void dist__drive_once(dist__engine *e, int timeout_ms, int is_bg) {
    e->driving = 1;
    e->bg_driving = is_bg;
    dist__progress(e, timeout_ms);
    e->driving = 0;
    e->bg_driving = 0;
    if (!is_bg) e->caller_drove_ns = dist__now_ns();
    if (e->sleepers) dist__cond_broadcast(&e->cond);
}

/* Makes progress or sleeps, for at most `ms`, on behalf of a waiting
   caller.  The caller holds the lock. */
static void dist__wait_step(dist__engine *e, int ms) {
    if (!e->driving) {
        dist__drive_once(e, ms, 0);
        return;
    }
    e->want_drive++;
    if (e->bg_driving && e->polling) dist__wakeup_signal(&e->wake);
    e->sleepers++;
    dist__cond_wait_ms(&e->cond, &e->lock, ms);
    e->sleepers--;
    e->want_drive--;
}

#define DIST__BG_NAP_MAX_MS 8
static DIST__THREAD_RETURN dist__progress_thread(void *arg) {
    dist__engine *e = (dist__engine *)arg;
    int nap_ms = 1;
    dist__mutex_lock(&e->lock);
    while (!e->stop) {
        /* Step aside while callers drive: they see their messages first
           hand.  The longer they keep at it, the less often it looks (1, 2,
           4, 8 ms): every look is a wake-up that takes a CPU from a rank
           (and the lock from its caller): with more ranks than cores, 1 ms
           naps made 4 ranks' all_reduce over TCP 6-11% slower from 64 KiB
           to 4 MiB.
           So it takes over at most 9 ms after the last caller left. */
        if (e->driving || e->want_drive || dist__now_ns() - e->caller_drove_ns < 1000000) {
            dist__cond_wait_ms(&e->bg_cond, &e->lock, nap_ms);
            nap_ms = DIST__MIN(nap_ms * 2, DIST__BG_NAP_MAX_MS);
            continue;
        }
        nap_ms = 1;
        dist__drive_once(e, 200, 1);
    }
    dist__mutex_unlock(&e->lock);
    return DIST__THREAD_RETURN_VALUE;
}

/* A receive someone waits on that no message can reach while its sender
   waits for credit behind messages held here: ask for it ahead (PULL). */
static void dist__pull_for(dist__engine *e, dist_req_t *r) {
    int64_t now = 0;
    for (int i = 0; i < e->world; i++) {
        dist__peer *p;
        if (r->peer != DIST_ANY_SOURCE) i = r->peer;
        p = &e->peers[i];
        if (p->peer_blocked && p->held && !p->pull_out && p->fd != DIST__NO_SOCKET &&
            (r->peer != DIST_ANY_SOURCE || !r->comm->group_of || r->comm->group_of[i] >= 0)) {
            if (!now) now = dist__now_ns();
            if (now - p->pull_miss_ns > 10000000) {    /* not at once again after "nothing to pull" */
                dist__frame f;
                memset(&f, 0, sizeof f);
                f.kind = DIST__FRAME_PULL; f.comm = r->comm_id; f.coll = r->frame_kind; f.tag = r->tag;
                if (dist__ctl_push(e, p, &f, NULL) == 0) {
                    p->pull_out = 1;
                    dist__peer_write(e, p);
                }
            }
        }
        if (r->peer != DIST_ANY_SOURCE) break;
    }
}

/* Why a send that never left (or was only announced) timed out, with what
   the caller can do about it. */
static void dist__send_wait_why(dist__engine *e, const dist_req_t *r, int waited_ms, char *out, size_t cap) {
    const dist__peer *p = &e->peers[r->peer];
    uint64_t eager = p->budget / 4;
    if (r->state == DIST__RS_ANNOUNCED || (p->budget && r->nbytes > eager))
        dist__format(out, cap, "rank %d did not receive it within %.1f s (a send of over %llu bytes waits for its receive: when "
                     "both ranks send first, use dist_isend%s)", r->peer, waited_ms / 1000.0, (unsigned long long)eager,
                     p->held ? "; that rank has sent this one messages nobody here has received either" : "");
    else
        dist__format(out, cap, "rank %d did not take the data within %.1f s (it holds as many messages from this rank as it has room "
                     "for, %llu bytes, and has not received them%s)", r->peer, waited_ms / 1000.0, (unsigned long long)p->budget,
                     p->held ? "; it waits for this rank to receive too: when both ranks send first, use dist_isend" : "");
}

/* Withdraws a request whose wait ran out of time (or whose collective
   ended, or whose communicator was revoked: code DIST_ERR_REVOKED, and its
   sentence is the revocation's), so nothing is written to its buffer after
   the caller gets it back, and its peer learns of it (why:
   DIST__REFUSED_*).  Returns 0 when the peer must answer first. */
#define DIST__WITHDRAWN(e, r, ...) do { \
        if ((r)->withdrawn == DIST_ERR_REVOKED) dist__req_failf(e, r, DIST_ERR_REVOKED, "%s", (r)->comm->revoke_note.text); \
        else dist__req_failf(e, r, DIST_ERR_TIMEOUT, __VA_ARGS__); } while (0)
static int dist__req_withdraw(dist__engine *e, dist_req_t *r, int waited_ms, int why, dist_result code) {
    char why_text[DIST__ERRLEN];
    dist__peer *p = r->kind == DIST__REQ_RECV ? (r->source >= 0 && r->source < e->world ? &e->peers[r->source] : NULL)
                                              : &e->peers[r->peer];
    r->withdrawn = code == DIST_ERR_REVOKED && r->comm ? DIST_ERR_REVOKED : DIST_ERR_TIMEOUT;
    if (r->kind == DIST__REQ_RECV) {
        switch (r->state) {
        case DIST__RS_POSTED: dist__unpost(e, r); break;
        case DIST__RS_CLAIMED: r->msg->claimed = NULL; r->msg = NULL; break;   /* the next receive takes it */
        case DIST__RS_READING: p->rx.req = NULL; p->rx.dst = NULL; break;       /* the rest is discarded */
        case DIST__RS_AWAITING:
            dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL;
            if (p->rx.req == r) { p->rx.req = NULL; p->rx.dst = NULL; }
            dist__refuse(e, p, r->sid, why);
            break;
        case DIST__RS_PULLING:
            if (p->t->pull_stop) p->t->pull_stop(e, p, r);
            dist__unlink(&r->link);
            if (p->fd != DIST__NO_SOCKET) dist__refuse(e, p, r->sid, why);
            break;
        default: break;
        }
        DIST__WITHDRAWN(e, r, "no message after %.1f s", waited_ms / 1000.0);
        return 1;
    }
    dist__send_wait_why(e, r, waited_ms, why_text, sizeof why_text);
    switch (r->state) {
    case DIST__RS_QUEUED:
        dist__unlink(&r->link);
        DIST__WITHDRAWN(e, r, "%s", why_text);
        return 1;
    case DIST__RS_WIRE:
        if (p->wire.off == 0) {                 /* chosen, not begun: as if never */
            p->credit += r->charge; p->charged -= r->charge;
            dist__wire_reset(&p->wire);
            DIST__WITHDRAWN(e, r, "%s", why_text);
            return 1;
        }
        break;
    case DIST__RS_ANNOUNCED:
        if (r->by_ref) {
            /* It may be copying from our memory right now: it says whether
               it dropped the announcement (CANCEL) or copied it (ACK) first. */
            char what[160];
            dist__req_describe(r, what, sizeof what);
            if (dist__req_err_buf(r) != dist__req_err_oom)
                dist__format(r->err, DIST__ERRLEN, "%s: %s", what, r->withdrawn == DIST_ERR_REVOKED ? r->comm->revoke_note.text : why_text);
            r->state = DIST__RS_REVOKING;
            dist__send_ctl(e, p, DIST__FRAME_CANCEL, (int64_t)r->sid, 0, 0);
            return 0;
        }
        dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL;
        dist__send_ctl(e, p, DIST__FRAME_CANCEL, (int64_t)r->sid, 0, 0);
        DIST__WITHDRAWN(e, r, "%s", why_text);
        return 1;
    case DIST__RS_STREAM:
        dist__unlink(&r->link);
        dist__send_ctl(e, p, DIST__FRAME_CANCEL, (int64_t)r->sid, 0, 0);
        DIST__WITHDRAWN(e, r, "rank %d did not take the rest of the data within %.1f s", r->peer, waited_ms / 1000.0);
        return 1;
    case DIST__RS_REVOKING:
        return 0;
    default:
        return 1;
    }
    /* Half a frame is on the wire (or the peer is copying it from our
       memory): the stream cannot continue.  This send timed out; what
       else needed the connection has lost its peer. */
    if (p->wire.req == r) p->wire.req = NULL;
    else if (dist__linked(&r->link)) { if (r->ixq) dist__ix_unlink(&e->ix, r->ixq, &r->link); else dist__unlink(&r->link); r->ixq = NULL; }
    DIST__WITHDRAWN(e, r, "rank %d did not take the rest of the data within %.1f s; the connection was closed",
                    r->peer, waited_ms / 1000.0);
    dist__peer_fail(e, p, "a send to rank %d timed out after %.1f s mid-message; the connection was closed",
                    r->peer, waited_ms / 1000.0);
    return 1;
}

/* A send that cannot be taken back without breaking its connection: part
   of its frame is written, or the peer may be copying it from our memory
   (or streams the rest of it). */
static int dist__send_in_flight(const dist__engine *e, const dist_req_t *r) {
    if (r->kind != DIST__REQ_SEND) return 0;
    if (r->state == DIST__RS_WIRE) return e->peers[r->peer].wire.req == r && e->peers[r->peer].wire.off > 0;
    return (r->state == DIST__RS_ANNOUNCED && r->by_ref) || r->state == DIST__RS_STREAM || r->state == DIST__RS_REVOKING;
}

static int dist__wait_for(dist__engine *e, int (*ready)(dist__engine *, void *), void *arg, int64_t deadline);
static int dist__req_is_done(dist__engine *e, void *arg);

/* Withdraws r; a send the peer may be copying from our memory waits (at
   most 1 s) for the peer to say it dropped it or copied it, else the
   connection closes: nothing reads the caller's buffer after this. */
static void dist__withdraw_wait(dist__engine *e, dist_req_t *r, int waited_ms, int why, dist_result code) {
    if (dist__req_withdraw(e, r, waited_ms, why, code)) return;
    if (!dist__wait_for(e, dist__req_is_done, r, dist__now_ns() + 1000000000) && !r->done) {
        /* It timed out (r's sentence says so); the peer did not answer
           either, so the connection goes, and with it any copying. */
        size_t n = strlen(dist__req_err(r));
        if (r->err && r->err != dist__req_err_oom && n + 1 < DIST__ERRLEN)
            dist__format(r->err + n, DIST__ERRLEN - n, "; it did not answer the withdrawal within 1 s either, so the connection was closed");
        dist__ix_unlink(&e->ix, r->ixq, &r->link); r->ixq = NULL;
        dist__req_complete(e, r, r->withdrawn);
        dist__peer_fail(e, &e->peers[r->peer], "a send to rank %d timed out after %.1f s, and rank %d did not answer its withdrawal "
                        "within 1 s; the connection was closed", r->peer, waited_ms / 1000.0, r->peer);
    }
}

/* Drives progress or sleeps until ready(e, arg) holds or `deadline` (ns)
   passes; 1 when it held. */
static int dist__wait_for(dist__engine *e, int (*ready)(dist__engine *, void *), void *arg, int64_t deadline) {
    int64_t start = dist__now_ns();
    while (!ready(e, arg)) {
        int64_t now = dist__now_ns();
        if (now >= deadline) return 0;
        if (now - start < e->spin_ns && !e->driving) {
            /* Poll without sleeping for a while: a reply that comes within
               microseconds is seen without paying for a wake-up (tens of
               microseconds between CPUs of a VM).  Yielding lets a peer
               that shares this CPU run meanwhile. */
            dist__drive_once(e, 0, 0);
            if (ready(e, arg)) break;
            if (e->shm.nshm && !e->shm.ntcp && (e->shm.spins & e->shm.yield_mask)) { DIST__CPU_RELAX(); continue; }   /* rings: no system call */
            dist__mutex_unlock(&e->lock); dist__yield(); dist__mutex_lock(&e->lock);
            continue;
        }
        dist__wait_step(e, (int)DIST__MIN((deadline - now + 999999) / 1000000, 100));
    }
    return 1;
}

/* Done yet?  (A posted receive whose sender waits for credit behind
   messages held here is pulled ahead.) */
static int dist__req_is_done(dist__engine *e, void *arg) {
    dist_req_t *r = (dist_req_t *)arg;
    if (!r->done && e->blocked_peers && r->kind == DIST__REQ_RECV && r->state == DIST__RS_POSTED) dist__pull_for(e, r);
    return r->done != 0;
}

/* Done, or to be withdrawn because its communicator was revoked (a send
   partly on the wire finishes first). */
static int dist__req_settled(dist__engine *e, void *arg) {
    dist_req_t *r = (dist_req_t *)arg;
    return dist__req_is_done(e, r) ||
           (r->kind != DIST__REQ_COLL && r->comm && DIST__LOAD_ACQ(&r->comm->revoked) && !dist__send_in_flight(e, r));
}

/* A request settled but not done: its communicator was revoked. */
static void dist__req_revoked_out(dist__engine *e, dist_req_t *r) {
    if (!r->done) dist__withdraw_wait(e, r, 0, DIST__REFUSED_REVOKED, DIST_ERR_REVOKED);
}

/* Waits for one request under the lock, at most `timeout_ms`; a request
   that runs out of time (or whose communicator is revoked) is withdrawn. */
static void dist__wait_locked(dist__engine *e, dist_req_t *r, int timeout_ms) {
    int64_t now = dist__now_ns(), deadline = now + (int64_t)timeout_ms * 1000000;
    if (r->rec_n && !r->done) dist__rec_p2p_waits(r, now);
    while (!dist__wait_for(e, dist__req_settled, r, deadline)) {
        if (r->kind == DIST__REQ_COLL) { deadline = dist__now_ns() + 1000000000; continue; }   /* its job has its own bound */
        dist__withdraw_wait(e, r, timeout_ms, DIST__REFUSED_WITHDRAWN, DIST_ERR_TIMEOUT);
        return;
    }
    dist__req_revoked_out(e, r);
}


/* [SECTION] transport: TCP
   ---------------------------------------------------------------------------
   The stream is the connection itself; poll() reports both directions. */
static dist__ssize dist__tcp_rx(dist__engine *e, dist__peer *p, void *buf, size_t len) {
    DIST__UNUSED(e);
    return dist__sock_recv(p->fd, buf, len);
}

static dist__ssize dist__tcp_tx(dist__engine *e, dist__peer *p, const dist__iov *iov, int n) {
    DIST__UNUSED(e);
    return dist__sock_sendv(p->fd, iov, n);
}

static void dist__tcp_readable(dist__engine *e, dist__peer *p) {
    dist__peer_read(e, p);
}

static void dist__tcp_close(dist__engine *e, dist__peer *p) {
    DIST__UNUSED(e);
    dist__close(p->fd);
    p->fd = DIST__NO_SOCKET;
}

/* name, rx, tx, pending, readable, doorbell, pull, help, uses_fd, pull_stop, close */
static const dist__transport dist__tcp_transport = {
    "TCP", dist__tcp_rx, dist__tcp_tx, NULL, dist__tcp_readable, NULL, NULL, NULL, 1, NULL, dist__tcp_close
};

/* [SECTION] transport: shared memory
   ---------------------------------------------------------------------------
   Each rank maps one segment (an anonymous memfd, so nothing is ever left in
   /dev/shm) holding the rings its same-host peers write to it: one
   single-producer single-consumer byte ring per peer.  The frames are the
   very frames that TCP carries, so matching, flow control, descriptors and
   failures work unchanged; only where the bytes travel differs.  Large
   payloads are announced with their address, and the receiver copies them
   straight from the sender's memory (one copy; Linux cross-memory attach),
   with the sender's help when they are large (dist__coop_claim).

   Waiting: a rank about to sleep in poll() sets `sleeping` in its segment
   and checks its rings once more; a peer that writes to it, or frees space
   it waits for, sends one byte over their TCP connection, which stays open
   for that and for liveness: a peer that dies closes it, so pending
   operations fail at once, as over TCP. */
#define DIST__SHM_MAGIC   0x6873747369647364ull    /* "dsdisths" */
#define DIST__SHM_HDR     4096

typedef struct dist__shm_counter { uint64_t v; uint8_t pad[56]; } dist__shm_counter;


struct dist__shm_hdr {              /* the start of a segment */
    uint64_t magic;
    int32_t owner_rank, owner_pid, nrings, pad0;
    uint64_t ring_size, seg_size;
    uint64_t coll_off, coll_bytes;  /* the collective area: 2 input then 2 output buffers of coll_bytes */
    uint32_t sleeping;              /* the owner is (about to be) asleep in poll: ring its doorbell */
    uint32_t fast_slots;            /* the slots of small collectives (see dist__fast_run)... */
    uint64_t fast_off, fast_bytes;  /* ...where they start, and the data bytes of each */
    uint32_t coll_sleeping;         /* the owner sleeps inside a shared-memory collective: ranks that
                                       move on in it ring (not `sleeping`: that is its progress
                                       thread, which collectives in shared memory need not wake) */
    uint8_t pad1[44];
    /* the owner's progress through shared-memory collectives (see
       dist__shm_all_reduce): steps whose input is in place, whose output
       is in place, and whose buffers it has finished reading */
    dist__shm_counter cin, cout, cdone;
    /* the last small collective (by sequence number) whose slots it has
       finished reading: its own slots of that and earlier ones may be
       written again */
    dist__shm_counter fast_done;
    /* the world collective it is in: its sequence number (0 while the rest
       changes) and descriptor; a rank that waits on it in shared memory
       compares, so a call that differs fails at once */
    struct { uint64_t seq; dist__shm_desc desc; uint8_t pad[40]; } now;
    /* the collective in which the others copy straight from the owner's
       memory (dist__shm_direct): its sequence number, stored last, and
       where; and the last such collective in which it has finished
       reading the others' */
    struct { uint64_t seq, addr, gave_up; int32_t gave_up_res; uint8_t pad[36]; } xpose;   /* gave_up: the last such
                                       collective it stopped reading in, failed (then its result) */
    dist__shm_counter xdone;
    /* a broadcast's reader that the root helps (dist__xhelp_*): its
       pieces claimed, then copied (tag << 24 | count), and where they go */
    struct { uint64_t claim, done, dst, bad; uint8_t pad[32]; } xhelp;   /* bad: the tag of a broadcast
                                       whose root failed to write a piece */
};

/* Small collectives of the world (dist__fast_run) pass their data through
   slots: each rank writes its part into its own slot of the collective's
   sequence number, and the others read it there.  DIST__FAST_SLOTS slots a
   rank (about 1 MiB), used in turn, so a root may run that many broadcasts
   ahead. */
#ifndef DIST_SHM_FAST_BYTES
#  define DIST_SHM_FAST_BYTES  (16 * 1024)  /* the most data of one rank in one slot */
#endif
typedef struct dist__fast_slot {
    uint64_t seq;                   /* the collective whose data this is; stored last */
    dist__shm_desc desc;            /* checked by every reader */
    int64_t t_in;                   /* when its writer entered it (job clock; 0: not stamped) */
} dist__fast_slot;                  /* DIST_SHM_FAST_BYTES of data follow at once: up to 32 bytes
                                       travel in the header's cache line */
#define DIST__FAST_STRIDE      ((sizeof(dist__fast_slot) + (size_t)DIST_SHM_FAST_BYTES + 63) & ~(size_t)63)
#define DIST__FAST_AREA        ((size_t)DIST__FAST_SLOTS * DIST__FAST_STRIDE)

/* Microseconds a rank waiting inside a shared-memory collective polls
   before it sleeps (at least DIST_SPIN_US; none when that is 0). */
#ifndef DIST_SHM_SPIN_US
#  define DIST_SHM_SPIN_US     5000
#endif
/* Bytes each rank combines per step of a shared-memory collective (so a
   step of n ranks is n times this, at most DIST_SHM_COLL_BYTES): small
   enough to stay in cache, large enough that the three waits of a step
   cost little.  256 KiB measured ahead of 128 KiB at every size and rank
   count, most from 16 MiB up (bench/RESULTS.md). */
#ifndef DIST_SHM_SLICE_BYTES
#  define DIST_SHM_SLICE_BYTES (256 * 1024)
#endif
/* Bytes of one buffer of the collective area (two pipelined steps). */
#ifndef DIST_SHM_COLL_BYTES
#  define DIST_SHM_COLL_BYTES  (1024 * 1024)
#endif
/* Where ranks may read each other's memory: an all_gather of more than
   DIST_SHM_GATHER_SLOTS_MAX bytes a rank reads the others' blocks directly
   when every rank has a CPU of its own (with more ranks than CPUs the
   slots' plain copies stay ahead up to DIST_SHM_FAST_BYTES: 2 ranks on 2
   cores, 16 KiB a rank, 2.4 us against 5.2 through the slots; 4 ranks,
   4-16 KiB a rank, 14-19 us against 5-14). */
#ifndef DIST_SHM_GATHER_SLOTS_MAX
#  define DIST_SHM_GATHER_SLOTS_MAX (4 * 1024)
#endif
/* The least a step of a broadcast or all_gather in the segments moves (a
   rank's piece), so that a step's waits cost little beside its copies. */
#ifndef DIST_SHM_STEP_MIN
#  define DIST_SHM_STEP_MIN    (64 * 1024)
#endif

struct dist__ring {                 /* control block; ring_size data bytes follow */
    uint64_t head;                  /* bytes consumed (written by the consumer) */
    uint8_t pad1[56];
    uint64_t tail;                  /* bytes produced (written by the producer) */
    uint32_t producer_waiting;      /* the producer has bytes that did not fit */
    uint8_t pad2[52];
    /* A payload by reference that both ends copy (see dist__coop_claim):
       the consumer posts it, each end claims pieces until none is left. */
    uint64_t job_claim;             /* job number << 42 | bytes claimed; 0: no job */
    uint64_t job_dst, job_src, job_bytes;   /* in the consumer, in the producer, length */
    uint32_t job_err;               /* the producer failed to write a piece */
    uint32_t pad3;
    uint64_t job_sid;               /* the announcement's rendezvous id */
    uint8_t pad4[16];
    uint64_t job_done;              /* bytes copied, by either end */
    uint8_t pad5[56];
};

/* One peer's shared-memory state. */
struct dist__shm_link {
    dist__ring *rx_ring, *tx_ring;  /* in our segment / in the peer's */
    dist__shm_hdr *peer_hdr;        /* the peer's segment (its sleeping flag and counters) */
    void *peer_seg; size_t peer_seg_size;
    uint64_t ring_size;
    int pid;
    int can_read;                   /* we may read its memory (payloads by reference from it) */
    uint8_t *pull;                  /* a chunk of a by-reference payload that is being combined */
    uint8_t *coll_area;             /* the peer's collective area, as mapped here */
    uint8_t *fast_area;             /* ...and its slots of small collectives */
    /* copying together (dist__coop_claim) */
    uint64_t coop;                  /* the job (in rx_ring) under which both ends copy; 0: none */
    uint64_t coop_seq;              /* the last job number posted */
    dist_req_t *coop_req;           /* the receive it copies into */
    int coop_alone;                 /* the rest of this payload is read without the sender's help */
    uint64_t coop_wrote;            /* bytes of our payloads we wrote into its memory ourselves */
    /* The doorbell: the mesh connection, rung without the engine lock by
       a collective waking its members.  So it stays open until the link
       is freed (a closed descriptor's number could be another socket's by
       then); when the peer is lost it is only shut down, and bell_off
       set. */
    dist__socket bell;
    uint32_t bell_off;
    int peer_ended;                 /* its process is gone (the doorbell's connection ended, or reading its memory: ESRCH) */
};

static dist__ring *dist__seg_ring(void *seg, uint64_t ring_size, int slot) {
    return (dist__ring *)((uint8_t *)seg + DIST__SHM_HDR + (size_t)slot * (sizeof(dist__ring) + (size_t)ring_size));
}

/* Bytes ready to read; -1 when the control block makes no sense (a peer
   writing garbage must not make us read out of bounds). */
static int64_t dist__ring_used(const dist__ring *r, uint64_t size) {
    uint64_t used = DIST__LOAD_ACQ(&r->tail) - r->head;
    return used > size ? -1 : (int64_t)used;
}

static size_t dist__ring_read(dist__ring *r, uint64_t size, void *dst, size_t len) {
    uint64_t head = r->head, used = DIST__LOAD_ACQ(&r->tail) - head;
    size_t n = (size_t)DIST__MIN((uint64_t)len, used), off = (size_t)(head & (size - 1)), first;
    const uint8_t *data = (const uint8_t *)(r + 1);
    if (used > size || n == 0) return 0;
    first = DIST__MIN(n, (size_t)size - off);
    memcpy(dst, data + off, first);
    if (n > first) memcpy((uint8_t *)dst + first, data, n - first);
    DIST__STORE_REL(&r->head, head + n);
    return n;
}

/* Writes what fits of the pieces; returns the bytes written. */
static size_t dist__ring_write(dist__ring *r, uint64_t size, const dist__iov *iov, int n) {
    uint64_t tail = r->tail, space = size - (tail - DIST__LOAD_ACQ(&r->head)), done = 0;
    uint8_t *data = (uint8_t *)(r + 1);
    if (space > size) return 0;                              /* a corrupt head: write nothing */
    for (int i = 0; i < n && space > done; i++) {
        const uint8_t *base = (const uint8_t *)DIST__IOV_BASE(iov[i]);
        size_t want = DIST__IOV_LEN(iov[i]);
        size_t len = (size_t)DIST__MIN((uint64_t)want, space - done);
        size_t off = (size_t)((tail + done) & (size - 1)), first = DIST__MIN(len, (size_t)size - off);
        memcpy(data + off, base, first);
        if (len > first) memcpy(data, base + first, len - first);
        done += len;
        if (len < want) break;
    }
    if (done) DIST__STORE_REL(&r->tail, tail + done);
    return (size_t)done;
}

/* This rank is about to sleep in poll (peers that write to it ring its
   doorbell), or is awake again. */
static void dist__shm_sleeping(dist__engine *e, int on) {
    DIST__STORE_REL(&e->shm.hdr->sleeping, on ? 1u : 0u);
    if (on) DIST__FENCE();
}

/* Wakes p if it sleeps in poll (or, coll, inside a collective in shared
   memory): one byte on the doorbell. */
static void dist__shm_bell(dist__peer *p, int coll) {
    dist__shm_link *s = p->shm;
    if (!DIST__LOAD_ACQ(&s->bell_off) && DIST__LOAD_ACQ(coll ? &s->peer_hdr->coll_sleeping : &s->peer_hdr->sleeping)) {
        dist__ssize w = dist__sock_send_nowait(s->bell, "d", 1);
        DIST__UNUSED(w);
    }
}
static void dist__shm_doorbell(dist__engine *e, dist__peer *p) { DIST__UNUSED(e); dist__shm_bell(p, 0); }

static dist__ssize dist__shm_rx(dist__engine *e, dist__peer *p, void *buf, size_t len) {
    dist__shm_link *s = p->shm;
    size_t n = dist__ring_read(s->rx_ring, s->ring_size, buf, len);
    if (n == 0) { dist__set_errno_would_block(); return -1; }
    if (DIST__LOAD_ACQ(&s->rx_ring->producer_waiting)) {
        /* it waits for room: it has some now */
        DIST__STORE_REL(&s->rx_ring->producer_waiting, 0u);
        DIST__FENCE();
        dist__shm_doorbell(e, p);
    }
    return (dist__ssize)n;
}

static dist__ssize dist__shm_tx(dist__engine *e, dist__peer *p, const dist__iov *iov, int n) {
    dist__shm_link *s = p->shm;
    size_t total = 0, w = dist__ring_write(s->tx_ring, s->ring_size, iov, n);
    for (int i = 0; i < n; i++) total += DIST__IOV_LEN(iov[i]);
    if (w < total) DIST__STORE_REL(&s->tx_ring->producer_waiting, 1u);
    DIST__FENCE();
    if (w) dist__shm_doorbell(e, p);
    if (w == 0) { dist__set_errno_would_block(); return -1; }
    return (dist__ssize)w;
}

/* Copying together.  One process copies a large payload by reference at
   about half the speed of memcpy here (the kernel pins and maps every
   page), while the sender's CPU sits waiting for the ACK.  So, when the
   sender may write our memory, the receiver posts the payload as a job in
   the ring's control block, and both ends claim DIST__COOP_CHUNK pieces
   from it until none is left: the receiver reads its pieces, the sender
   writes its own (process_vm_writev), and a busy sender simply leaves them
   all to the receiver.  The receiver acknowledges once every claimed piece
   is copied, so the sender never touches the buffers after its send
   completes.  A claim is a compare-and-swap on (job number, offset), so a
   piece of a finished job can never be claimed against the next one. */
static const uint64_t dist__coop_min = DIST_SHM_COOP_BYTES;   /* (a variable: 0 must not make a comparison always true) */
#define DIST__COOP_OFF_BITS 42
#define DIST__COOP_OFF_MASK (((uint64_t)1 << DIST__COOP_OFF_BITS) - 1)

/* Claims the next piece of job `job` (of `bytes`): its offset and length,
   or -1 when that job is over or all of it is claimed. */
static int64_t dist__coop_claim(dist__ring *j, uint64_t job, uint64_t bytes, uint64_t *len) {
    uint64_t c = DIST__LOAD_ACQ(&j->job_claim);
    for (;;) {
        uint64_t off = c & DIST__COOP_OFF_MASK;
        if (c >> DIST__COOP_OFF_BITS != job || off >= bytes) return -1;
        *len = DIST__MIN((uint64_t)DIST__COOP_CHUNK, bytes - off);
        if (DIST__CAS(&j->job_claim, &c, c + *len)) return (int64_t)off;
    }
}

/* Receiver: posts receive r's payload as a job. */
static void dist__coop_post(dist__engine *e, dist__peer *p, dist_req_t *r) {
    dist__shm_link *s = p->shm;
    dist__ring *j = s->rx_ring;
    uint64_t job = ++s->coop_seq & ((1u << (64 - DIST__COOP_OFF_BITS)) - 1);
    if (!job) job = s->coop_seq = 1;
    DIST__STORE_RELAXED(&j->job_dst, (uint64_t)(uintptr_t)r->rbuf);
    DIST__STORE_RELAXED(&j->job_src, r->ref);
    DIST__STORE_RELAXED(&j->job_bytes, r->nbytes);
    DIST__STORE_RELAXED(&j->job_sid, r->sid);
    DIST__STORE_RELAXED(&j->job_err, 0u);
    DIST__STORE_RELAXED(&j->job_done, (uint64_t)0);
    DIST__STORE_REL(&j->job_claim, job << DIST__COOP_OFF_BITS);
    s->coop = job;
    s->coop_req = r;
    DIST__FENCE();
    dist__shm_doorbell(e, p);
}

/* Receiver: ends the job.  Claims what is left, so the sender starts no
   other piece, and waits (briefly: a piece is a fraction of a millisecond)
   for the pieces it is copying.  Returns 0 if they did not finish within
   wait_ns (a dead sender never finishes its piece, nor writes any more). */
static int dist__coop_end(dist__peer *p, int64_t wait_ns) {
    dist__shm_link *s = p->shm;
    dist__ring *j = s->rx_ring;
    uint64_t c = DIST__LOAD_ACQ(&j->job_claim), claimed, bytes = s->coop_req ? s->coop_req->nbytes : 0;
    int64_t give_up = dist__now_ns() + wait_ns;
    while (c >> DIST__COOP_OFF_BITS == s->coop &&
           !DIST__CAS(&j->job_claim, &c, (s->coop << DIST__COOP_OFF_BITS) | DIST__COOP_OFF_MASK)) {}
    claimed = DIST__MIN(c & DIST__COOP_OFF_MASK, bytes);
    while (DIST__LOAD_ACQ(&j->job_done) < claimed) {
        if (dist__now_ns() > give_up) break;
        DIST__CPU_RELAX();
    }
    DIST__STORE_REL(&j->job_claim, (uint64_t)0);
    s->coop = 0;
    s->coop_req = NULL;
    return DIST__LOAD_ACQ(&j->job_done) >= claimed;
}

/* Sender: copies pieces of the job p posted, if it is an announced payload
   of ours.  Returns 1 if it copied any. */
static int dist__shm_help(dist__engine *e, dist__peer *p) {
    dist__shm_link *s = p->shm;
    dist__ring *j = s->tx_ring;
    uint64_t c = DIST__LOAD_ACQ(&j->job_claim), job = c >> DIST__COOP_OFF_BITS, dst, src, bytes, len;
    dist__link *n;
    dist_req_t *r;
    int moved = 0;
    if (!job) return 0;
    dst = DIST__LOAD_RELAXED(&j->job_dst);
    src = DIST__LOAD_RELAXED(&j->job_src);
    bytes = DIST__LOAD_RELAXED(&j->job_bytes);
    if ((c & DIST__COOP_OFF_MASK) >= bytes) return 0;
    /* These may be another job's, half written: then the claim below
       fails, as the job number has changed by then. */
    n = dist__rdv_find(e, DIST__IX_RDV_SEND, p->rank, DIST__LOAD_RELAXED(&j->job_sid));
    r = n ? DIST__CONTAINER(n, dist_req_t, link) : NULL;
    if (!r || !r->by_ref || (uint64_t)(uintptr_t)r->sbuf != src || r->nbytes != bytes) return 0;
    for (int k = 0; k < 4; k++) {
        int64_t off = dist__coop_claim(j, job, bytes, &len);
        if (off < 0) break;
        if (dist__peer_memory_write(s->pid, dst + (uint64_t)off, r->sbuf + off, (size_t)len) != (dist__ssize)len)
            DIST__STORE_REL(&j->job_err, 1u);
        else
            s->coop_wrote += len;
        DIST__FETCH_ADD(&j->job_done, len);
        moved = 1;
    }
    return moved;
}

/* A job of ours to help with? */
static int dist__coop_pending(const dist__peer *p) {
    const dist__shm_link *s = p->shm;
    uint64_t c;
    if (!p->rdv_out) return 0;
    c = DIST__LOAD_ACQ(&s->tx_ring->job_claim);
    return c != 0 && (c & DIST__COOP_OFF_MASK) < DIST__LOAD_RELAXED(&s->tx_ring->job_bytes);
}

/* Receiver: the next piece of receive r's announced payload, copied from
   the sender's memory (combined through a small buffer when reducing;
   copied together with the sender when large).  0 when nothing could move
   (the sender is finishing its pieces). */
static int dist__shm_pull(dist__engine *e, dist__peer *p, dist_req_t *r) {
    dist__shm_link *s = p->shm;
    uint64_t off = r->moved;
    size_t chunk;
    dist__ssize n;
    r->begun = 1;
    if (!s->coop && !s->coop_alone && dist__coop_min > 0 && r->moved == 0 && r->nbytes >= dist__coop_min && !r->reduce)
        dist__coop_post(e, p, r);
    if (s->coop) {
        dist__ring *j = s->rx_ring;
        uint64_t len;
        int64_t o = dist__coop_claim(j, s->coop, r->nbytes, &len);
        if (o >= 0) {
            n = dist__peer_memory_read(s->pid, r->rbuf + o, r->ref + (uint64_t)o, (size_t)len);
            if (n != (dist__ssize)len) {
                if (n < 0 && dist__err_no_process(dist__errno())) s->peer_ended = 1;   /* its process is gone: it writes no more */
                dist__peer_fail(e, p, "reading a message from rank %d's memory failed (%s)", p->rank,
                                n < 0 ? dist__err_text(dist__errno()) : "short read");
                return 0;
            }
            DIST__FETCH_ADD(&j->job_done, len);
            return 1;
        }
        if (DIST__LOAD_ACQ(&j->job_done) < r->nbytes) return 0;   /* the sender's last pieces */
        dist__coop_end(p, 0);             /* (all done: nothing to wait for) */
        if (DIST__LOAD_ACQ(&j->job_err)) { s->coop_alone = 1; r->moved = 0; return 1; }   /* it could not write a piece: read it all again, alone */
        r->moved = r->nbytes;
        return 1;
    }
    if (r->reduce) {
        chunk = (size_t)DIST__MIN(r->nbytes - off, (uint64_t)DIST__STAGE_SIZE);
        n = dist__peer_memory_read(s->pid, s->pull, r->ref + off, chunk);
        if (n == (dist__ssize)chunk) dist__land(r, off, s->pull, chunk);
    } else {
        chunk = (size_t)DIST__MIN(r->nbytes - off, (uint64_t)4 << 20);
        n = dist__peer_memory_read(s->pid, r->rbuf + off, r->ref + off, chunk);
    }
    if (n != (dist__ssize)chunk) {
        if (n < 0 && dist__err_no_process(dist__errno())) s->peer_ended = 1;
        dist__peer_fail(e, p, "reading a message from rank %d's memory failed (%s)", p->rank,
                        n < 0 ? dist__err_text(dist__errno()) : "short read");
        return 0;
    }
    r->moved += chunk;
    if (r->moved == r->nbytes) s->coop_alone = 0;
    return 1;
}

/* Receive r no longer wants its payload: the sender stops copying into it
   (it finishes its piece: a fraction of a millisecond).  A sender whose
   connection ended is not waited for: the kernel closes a process's
   sockets only once none of its threads runs, so it writes no more (and
   the engine lock is not held for a second meanwhile). */
static void dist__shm_pull_stop(dist__engine *e, dist__peer *p, dist_req_t *r) {
    dist__shm_link *s = p->shm;
    if (s->coop && s->coop_req == r && !dist__coop_end(p, s->peer_ended ? 0 : 1000000000) && !s->peer_ended)
        dist__logf(&e->log, DIST_LOG_WARN, "rank %d was still copying into a receive that ended after 1 s", p->rank);
    if (s->coop_req == r) s->coop_req = NULL;
    s->coop_alone = 0;
}

static int dist__shm_pending(dist__engine *e, dist__peer *p) {
    dist__shm_link *s = p->shm;
    int64_t used = dist__ring_used(s->rx_ring, s->ring_size);
    int f = 0;
    DIST__UNUSED(e);
    if (used < 0) return -1;
    if (used > 0) f |= DIST__PEND_READ;
    if (s->tx_ring->tail - DIST__LOAD_ACQ(&s->tx_ring->head) < s->ring_size) f |= DIST__PEND_WRITE;
    if (dist__coop_pending(p)) f |= DIST__PEND_HELP;
    return f;
}

/* Bytes over a shared-memory peer's socket are doorbells: drained.  Its end
   means the peer is gone; whatever it wrote to the ring before is read
   first, so a goodbye is seen before the close. */
static void dist__shm_readable(dist__engine *e, dist__peer *p) {
    char buf[256];
    for (;;) {
        dist__ssize n = dist__sock_recv(p->fd, buf, sizeof buf);
        int err;
        if (n > 0) continue;
        err = dist__errno();
        if (n < 0 && dist__err_interrupted(err)) continue;
        if (n < 0 && dist__err_would_block(err)) return;
        dist__peer_read(e, p);
        if (p->fd == DIST__NO_SOCKET) return;
        if ((n == 0 || dist__err_reset(err)) && p->state == DIST__PEER_LEFT) { p->t->close(e, p); return; }
        if (n == 0 || dist__err_reset(err)) p->shm->peer_ended = 1;   /* its process is gone: it writes no more */
        if (n == 0) dist__peer_fail(e, p, "rank %d closed its connection without saying goodbye (did it exit or crash?)", p->rank);
        else dist__peer_fail(e, p, "the connection to rank %d broke (%s)", p->rank, dist__err_text(err));
        return;
    }
}

/* The doorbell closes; the peer's segment stays mapped until the engine
   ends (a collective may still look at its counters). */
static void dist__shm_close(dist__engine *e, dist__peer *p) {
    DIST__UNUSED(e);
    if (p->fd == DIST__NO_SOCKET) return;
    DIST__STORE_REL(&p->shm->bell_off, 1u);
    dist__sock_shutdown(p->fd);        /* closed with the link (the doorbell) */
    p->fd = DIST__NO_SOCKET;
}

/* name, rx, tx, pending, readable, doorbell, pull, help, uses_fd, pull_stop, close */
static const dist__transport dist__shm_transport = {
    "shared memory", dist__shm_rx, dist__shm_tx, dist__shm_pending, dist__shm_readable, dist__shm_doorbell,
    dist__shm_pull, dist__shm_help, 0, dist__shm_pull_stop, dist__shm_close
};

static void dist__shm_link_free(dist__peer *p) {
    dist__shm_link *s = p->shm;
    if (!s) return;
    if (s->peer_seg) dist__shm_unmap(s->peer_seg, s->peer_seg_size);
    dist__close(s->bell);
    DIST_FREE(s->pull);
    DIST_FREE(s);
    p->shm = NULL;
}

static void dist__shm_world_free(dist__engine *e) {
    for (int i = 0; e->peers && i < e->world; i++) dist__shm_link_free(&e->peers[i]);
    if (e->shm.seg) dist__shm_unmap(e->shm.seg, e->shm.seg_size);
    dist__shm_unname(&e->shm.seg_file);
    e->shm.seg = NULL;
}

/* Setting up: shared memory with the ranks on this host, agreed pairwise
   over the mesh connections in rounds of fixed-size records:
     A  host identity: same host, same user and namespaces -> candidates
     B  this rank's segment (pid, its name, the ring slot kept for the peer)
     C  whether the peer's segment could be mapped, and its memory read
     D  whether every pair of the world uses shared memory
   A pair uses shared memory only when both sides mapped the other's
   segment; payloads go by reference to a peer that could read our memory.
   Anything that fails leaves that pair on TCP. */
#define DIST__SHM_REC 256

static dist_result dist__shm_exchange(dist_t *d, const uint8_t *out, uint8_t *in, int64_t deadline, const char *what) {
    dist__engine *e = d->eng;
    for (int j = 0; j < d->world; j++) {
        int r;
        if (j == d->rank) continue;
        if ((r = dist__io_all(e->peers[j].fd, (void *)(out + (size_t)j * DIST__SHM_REC), DIST__SHM_REC, 1, deadline)) != 0)
            return dist__fail(NULL, DIST_ERR_INIT, "init: shared-memory handshake (%s) with rank %d: %s", what, j, dist__io_error(r));
    }
    for (int j = 0; j < d->world; j++) {
        int r;
        if (j == d->rank) continue;
        if ((r = dist__io_all(e->peers[j].fd, in + (size_t)j * DIST__SHM_REC, DIST__SHM_REC, 0, deadline)) != 0)
            return dist__fail(NULL, DIST_ERR_INIT, "init: shared-memory handshake (%s) with rank %d: %s", what, j, dist__io_error(r));
        if (dist__get32(in + (size_t)j * DIST__SHM_REC) != dist__get32(out + (size_t)j * DIST__SHM_REC))
            return dist__fail(NULL, DIST_ERR_PROTOCOL, "init: rank %d answered the shared-memory handshake (%s) out of step", j, what);
    }
    return DIST_OK;
}

/* Maps peer p's segment as described by its B record into a new link
   (p->shm); 1 on success. */
static int dist__shm_map_peer(dist__engine *e, dist__peer *p, const uint8_t *rec) {
    int pid = (int32_t)dist__get32(rec + 4), slot = (int32_t)dist__get32(rec + 12);
    uint64_t ring = dist__get64(rec + 16), size = dist__get64(rec + 24), probe = dist__get64(rec + 32), magic = 0;
    dist__shm_hdr *h;
    dist__shm_link *s;
    char name[DIST__SHM_NAME];
    void *m;
    DIST__UNUSED(e);
    memcpy(name, rec + 64, sizeof name);
    if (slot < 0 || pid <= 0 || !memchr(name, 0, sizeof name) || !name[0] || ring < 4096 || (ring & (ring - 1)) ||
        size < DIST__SHM_HDR || size > ((uint64_t)1 << 32) || (uint64_t)slot >= (size - DIST__SHM_HDR) / (sizeof(dist__ring) + ring))
        return 0;
    /* (it checks the segment is as long as the record says: pages past its
       end fault when touched) */
    if (!(m = dist__shm_attach(name, (size_t)size))) return 0;
    h = (dist__shm_hdr *)m;
    if (h->magic != DIST__SHM_MAGIC || h->owner_rank != p->rank || h->owner_pid != pid || h->ring_size != ring || h->seg_size != size ||
        h->coll_bytes != DIST_SHM_COLL_BYTES || h->coll_off < DIST__SHM_HDR || h->coll_off > size ||
        (size - h->coll_off) / 4 < h->coll_bytes || h->fast_bytes != DIST_SHM_FAST_BYTES || h->fast_slots != DIST__FAST_SLOTS ||
        h->fast_off < h->coll_off + 4 * h->coll_bytes || h->fast_off > size || size - h->fast_off < DIST__FAST_AREA ||
        (s = (dist__shm_link *)DIST_MALLOC(sizeof *s)) == NULL) {
        dist__shm_unmap(m, (size_t)size);
        return 0;
    }
    memset(s, 0, sizeof *s);
    s->coll_area = (uint8_t *)m + h->coll_off;
    s->fast_area = (uint8_t *)m + h->fast_off;
    s->peer_seg = m; s->peer_seg_size = (size_t)size;
    s->peer_hdr = h;
    s->tx_ring = dist__seg_ring(m, ring, slot);
    s->ring_size = ring;
    s->pid = pid;
    /* May we read its memory (payloads by reference from it)? */
    s->can_read = dist__peer_memory_read(pid, &magic, probe, sizeof magic) == (dist__ssize)sizeof magic && magic == DIST__SHM_MAGIC;
    /* ...combined through this buffer */
    if (s->can_read && (s->pull = (uint8_t *)DIST_MALLOC(DIST__STAGE_SIZE)) == NULL) s->can_read = 0;
    s->bell = DIST__NO_SOCKET;
    p->shm = s;
    return 1;
}

/* Our segment: one ring per candidate and the collective area.  0 or -1. */
static int dist__shm_make_segment(dist__engine *e, int me, int ncand, uint64_t ring) {
    dist__shm_world *w = &e->shm;
    w->seg_size = DIST__SHM_HDR + (size_t)ncand * (sizeof(dist__ring) + (size_t)ring) + 4 * (size_t)DIST_SHM_COLL_BYTES +
                  DIST__FAST_AREA;
    if (!(w->seg = dist__shm_create(&w->seg_file, w->seg_size))) return -1;
    w->hdr = (dist__shm_hdr *)w->seg;
    w->hdr->magic = DIST__SHM_MAGIC;
    w->hdr->owner_rank = me;
    w->hdr->owner_pid = (int32_t)dist__getpid();
    w->hdr->nrings = ncand;
    w->hdr->ring_size = ring;
    w->hdr->seg_size = w->seg_size;
    w->hdr->coll_off = w->seg_size - 4 * (size_t)DIST_SHM_COLL_BYTES - DIST__FAST_AREA;
    w->hdr->coll_bytes = DIST_SHM_COLL_BYTES;
    w->hdr->fast_off = w->seg_size - DIST__FAST_AREA;
    w->hdr->fast_bytes = DIST_SHM_FAST_BYTES;
    w->hdr->fast_slots = DIST__FAST_SLOTS;
    w->coll_area = (uint8_t *)w->seg + w->hdr->coll_off;
    w->fast_area = (uint8_t *)w->seg + w->hdr->fast_off;
    return 0;
}

static dist_result dist__shm_setup(dist_t *d, int want, int64_t deadline) {
    dist__engine *e = d->eng;
    dist__shm_world *w = &e->shm;
    int n = d->world, me = d->rank, ncand = 0, heavy, readable, hosts = 0, host_shm = 1;
    size_t bytes = (size_t)n * DIST__SHM_REC;
    uint8_t *out = (uint8_t *)DIST_MALLOC(bytes), *in = (uint8_t *)DIST_MALLOC(bytes);
    int *slots = (int *)DIST_MALLOC(sizeof(int) * 2 * (size_t)n), *tcp_why = slots ? slots + n : NULL;   /* (for the log) */
    static const char *const tcp_text[] = { "neither could map the other's segment", "shared memory is off on this rank",
                                            "shared memory is off on that rank", "another host, user or namespace",
                                            "no shared segment here" };
    char ident[240];
    uint64_t ring = 0;
    dist_result r = DIST_OK;
    if (!out || !in || !slots) { r = dist__fail(NULL, DIST_ERR_NOMEM, "init: out of memory"); goto done; }
    memset(out, 0, bytes); memset(in, 0, bytes);
    memset(ident, 0, sizeof ident);
    if (dist__getenv("DIST_HOST_ID")) dist__format(ident, sizeof ident, "DIST_HOST_ID|%s", dist__getenv("DIST_HOST_ID"));
    else dist__host_identity(ident, sizeof ident);
    /* A: who shares this host (also the node map, whether or not shared
       memory is wanted) */
    for (int j = 0; j < n; j++) {
        uint8_t *o = out + (size_t)j * DIST__SHM_REC;
        dist__put32(o, 0x41736873u);
        dist__put32(o + 4, (uint32_t)want);
        memcpy(o + 8, ident, sizeof ident);
    }
    if ((r = dist__shm_exchange(d, out, in, deadline, "host")) != DIST_OK) goto done;
    memcpy(in + (size_t)me * DIST__SHM_REC + 8, ident, sizeof ident);
    for (int j = 0; j < n; j++) {
        const uint8_t *i = in + (size_t)j * DIST__SHM_REC;
        slots[j] = -1;
        tcp_why[j] = !want ? 1 : !dist__get32(i + 4) ? 2 : memcmp(i + 8, ident, sizeof ident) != 0 ? 3 : 0;
        if (j != me && !tcp_why[j]) slots[j] = ncand++;
        /* the node map: every rank reads the same identities, so every
           rank numbers the hosts alike (in order of their lowest rank) */
        e->node_of[j] = -1;
        for (int k = 0; k < j && e->node_of[j] < 0; k++)
            if (memcmp(in + (size_t)k * DIST__SHM_REC + 8, i + 8, sizeof ident) == 0) e->node_of[j] = e->node_of[k];
        if (e->node_of[j] < 0) e->node_of[j] = hosts++;
    }
    if (ncand) {
        size_t per = (size_t)(32u << 20) / (size_t)ncand;
        ring = 4096;
        while (ring * 2 <= per && ring < (1u << 20)) ring *= 2;
        if (ring < 65536) ring = 65536;
        if (dist__shm_make_segment(e, me, ncand, ring) != 0) {
            dist__logf(&e->log, DIST_LOG_INFO, "shared memory unavailable (%s); ranks on this host use TCP", dist__err_text(dist__errno()));
            dist__shm_world_free(e);
            ncand = 0;
            for (int j = 0; j < n; j++) { slots[j] = -1; tcp_why[j] = tcp_why[j] ? tcp_why[j] : 4; }
        }
    }
    /* B: where to find our segment */
    for (int j = 0; j < n; j++) {
        uint8_t *o = out + (size_t)j * DIST__SHM_REC;
        memset(o, 0, DIST__SHM_REC);
        dist__put32(o, 0x42736873u);
        dist__put32(o + 4, (uint32_t)dist__getpid());
        memcpy(o + 64, w->seg_file.name, DIST__SHM_NAME);     /* "" when it has none */
        dist__put32(o + 12, (uint32_t)slots[j]);
        dist__put64(o + 16, ring);
        dist__put64(o + 24, w->seg_size);
        dist__put64(o + 32, (uint64_t)(uintptr_t)w->seg);
    }
    if ((r = dist__shm_exchange(d, out, in, deadline, "segments")) != DIST_OK) goto done;
    for (int j = 0; j < n; j++) {
        uint8_t *o = out + (size_t)j * DIST__SHM_REC;
        dist__peer *p = &e->peers[j];
        int ok = slots[j] >= 0 && dist__shm_map_peer(e, p, in + (size_t)j * DIST__SHM_REC);
        memset(o, 0, DIST__SHM_REC);
        dist__put32(o, 0x43736873u);
        dist__put32(o + 4, (uint32_t)ok);
        dist__put32(o + 8, (uint32_t)(ok && p->shm->can_read));
    }
    /* C: both ends mapped? */
    if ((r = dist__shm_exchange(d, out, in, deadline, "agreement")) != DIST_OK) goto done;
    for (int j = 0; j < n; j++) {
        dist__peer *p = &e->peers[j];
        const uint8_t *i = in + (size_t)j * DIST__SHM_REC;
        if (j == me) continue;
        if (p->shm && dist__get32(out + (size_t)j * DIST__SHM_REC + 4) && dist__get32(i + 4)) {
            p->t = &dist__shm_transport;
            p->shm->bell = p->fd;
            p->shm->rx_ring = dist__seg_ring(w->seg, ring, slots[j]);
            p->ref_min = dist__get32(i + 8) ? DIST_SHM_REF_BYTES : 0;   /* it can read our memory */
            if (!p->ref_min) p->shm->can_read = 0;                  /* (nor would it send by reference) */
            dist__set_nonblocking(p->fd, 1);
            w->nshm++;
            if (p->ref_min)
                dist__logf(&e->log, DIST_LOG_DEBUG, "transport: rank %d: shared memory (rings of %llu KiB; messages of %llu KiB and more copied "
                           "from the sender's memory)", j, (unsigned long long)(ring >> 10), (unsigned long long)(p->ref_min >> 10));
            else
                dist__logf(&e->log, DIST_LOG_DEBUG, "transport: rank %d: shared memory (rings of %llu KiB; every message through them)", j,
                           (unsigned long long)(ring >> 10));
        } else {
            dist__shm_link_free(p);
            w->ntcp++;
            dist__logf(&e->log, DIST_LOG_DEBUG, "transport: rank %d: TCP (%s)", j, tcp_text[tcp_why[j]]);
        }
    }
    /* Every peer has mapped our segment or given up: the last name of it
       goes; the memory lives as long as the mappings. */
    dist__shm_unname(&w->seg_file);
    /* D: does every rank talk to every other over shared memory?  Then the
       world's collectives may work in the segments directly.  And can they
       all fence heavily before they sleep in one?  Does every rank talk to
       those on its own host over it (the slots of a world across hosts)? */
    heavy = w->nshm == n - 1 && dist__heavy_fence_init();
    readable = w->nshm == n - 1;        /* ...and read every other's memory? */
    for (int j = 0; j < n; j++)         /* ...or at least those on its host? */
        if (j != me && e->node_of[j] == e->node_of[me] && !e->peers[j].shm) host_shm = 0;
    for (int j = 0; j < n; j++)
        if (j != me && (!e->peers[j].shm || !e->peers[j].shm->can_read || !e->peers[j].ref_min)) readable = 0;
    for (int j = 0; j < n; j++) {
        uint8_t *o = out + (size_t)j * DIST__SHM_REC;
        memset(o, 0, DIST__SHM_REC);
        dist__put32(o, 0x44736873u);
        dist__put32(o + 4, (uint32_t)(w->nshm == n - 1));
        dist__put32(o + 8, (uint32_t)heavy);
        dist__put32(o + 12, (uint32_t)readable);
        dist__put32(o + 16, (uint32_t)(w->nshm + 1 <= dist__cpu_count()));
        dist__put32(o + 20, (uint32_t)host_shm);
    }
    if ((r = dist__shm_exchange(d, out, in, deadline, "all")) != DIST_OK) goto done;
    w->all = w->nshm == n - 1;
    w->light_wake = heavy;
    w->read_all = w->all && readable;
    w->cores_each = w->nshm + 1 <= dist__cpu_count();
    w->hosts = host_shm;
    for (int j = 0; j < n; j++) {
        if (j != me && !dist__get32(in + (size_t)j * DIST__SHM_REC + 20)) w->hosts = 0;
        if (j != me && !dist__get32(in + (size_t)j * DIST__SHM_REC + 4)) w->all = 0;
        if (j != me && !dist__get32(in + (size_t)j * DIST__SHM_REC + 8)) w->light_wake = 0;
        if (j != me && !dist__get32(in + (size_t)j * DIST__SHM_REC + 12)) w->read_all = 0;
        if (j != me && !dist__get32(in + (size_t)j * DIST__SHM_REC + 16)) w->cores_each = 0;
    }
    if (!w->all) w->read_all = 0;
    /* More ranks here than CPUs: a spinning rank soon gives its CPU to the
       peer it waits for; otherwise it yields rarely (a system call each). */
    w->yield_mask = w->nshm + 1 > dist__cpu_count() ? 1u : 15u;
    if (w->nshm) dist__logf(&e->log, DIST_LOG_INFO, "shared memory with %d rank%s on this host (rings of %llu KiB)", w->nshm,
                            DIST__PLURAL(w->nshm), (unsigned long long)(ring >> 10));
done:
    DIST_FREE(out); DIST_FREE(in); DIST_FREE(slots);
    return r;
}

/* [SECTION] engine: creation and release */

static void dist__engine_free(dist__engine *e) {
    if (!e) return;
    for (int i = 0; e->peers && i < e->world; i++) {
        dist__peer *p = &e->peers[i];
        if (p->t) p->t->close(e, p);
        DIST_FREE(p->rx.stage);
        DIST_FREE(p->ctl);
    }
    dist__shm_world_free(e);
    while (e->blocks) {                 /* requests never waited on keep their sentences until here */
        dist__req_block *b = e->blocks;
        e->blocks = b->next;
        for (int i = 0; i < 64; i++) dist__req_err_free(&b->reqs[i]);
        DIST_FREE(b);
    }
    for (size_t i = 0; i < e->ix.cap; i++) {     /* unexpected payloads still held */
        dist__queue *q = e->ix.slot[i];
        if (!q || q->table != DIST__IX_UNEXP) continue;
        for (dist__link *n = q->items.next; n != &q->items; n = n->next) {
            dist__msg *m = DIST__CONTAINER(n, dist__msg, lsrc);
            if (m->data && m->data != m->small) { DIST_FREE(m->data); m->data = NULL; }
        }
    }
    for (int i = 0; e->peers && i < e->world; i++) {   /* a message arriving when it ended, refused or not */
        dist__msg *m = e->peers[i].rx.msg;
        if (m && m->data && m->data != m->small) { DIST_FREE(m->data); m->data = NULL; }
    }
    while (e->msg_blocks) { dist__msg_block *b = e->msg_blocks; e->msg_blocks = b->next; DIST_FREE(b); }
    for (int k = 0; k < DIST__POOL_CLASSES; k++)
        while (e->pool[k]) { void *b = e->pool[k]; e->pool[k] = *(void **)b; DIST_FREE(b); }
    dist__ix_free(&e->ix);
    DIST_FREE(e->peers); DIST_FREE(e->pfds); DIST_FREE(e->pfd_peer); DIST_FREE(e->comms); DIST_FREE(e->node_of);
    dist__wakeup_close(&e->wake);
    dist__cond_destroy(&e->cond); dist__cond_destroy(&e->bg_cond);
    dist__mutex_destroy(&e->lock);
    DIST_FREE(e);
}

static dist__engine *dist__engine_new(int rank, int world, int cap, const dist__log *log) {
    dist__engine *e = (dist__engine *)DIST_MALLOC(sizeof *e);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->rank = rank; e->world = world; e->cap = cap = DIST__MAX(cap, world); e->log = *log;
    e->wake.rfd = e->wake.wfd = DIST__NO_SOCKET;
    dist__shm_file_clear(&e->shm.seg_file);
    e->budget = DIST_EAGER_BYTES;
    dist__mutex_init(&e->lock);
    dist__cond_init(&e->cond); dist__cond_init(&e->bg_cond);
    e->peers = (dist__peer *)DIST_MALLOC(sizeof *e->peers * (size_t)cap);
    e->pfds = (dist__pollfd *)DIST_MALLOC(sizeof *e->pfds * ((size_t)cap + 1));
    e->pfd_peer = (int *)DIST_MALLOC(sizeof(int) * ((size_t)cap + 1));
    e->node_of = (int *)DIST_MALLOC(sizeof(int) * (size_t)cap);
    if (!e->peers || !e->pfds || !e->pfd_peer || !e->node_of || dist__wakeup_open(&e->wake) != 0) { dist__engine_free(e); return NULL; }
    for (int i = 0; i < cap; i++) e->node_of[i] = -1;   /* not known until init agrees on it */
    memset(e->peers, 0, sizeof *e->peers * (size_t)cap);
    for (int i = 0; i < cap; i++) {
        dist__peer *p = &e->peers[i];
        p->fd = DIST__NO_SOCKET; p->rank = i; p->t = &dist__tcp_transport;
        dist__list_init(&p->sendq); dist__list_init(&p->streamq); dist__list_init(&p->pullq);
    }
    return e;
}

/* A message to oneself is matched (or queued) at once; it costs no credit. */
static void dist__send_to_self(dist__engine *e, dist_req_t *s) {
    dist__frame f;
    dist_req_t *r;
    memset(&f, 0, sizeof f);
    f.kind = s->frame_kind; f.dtype = (uint8_t)s->dtype; f.comm = s->comm_id; f.tag = s->tag;
    f.count = s->count; f.nbytes = s->nbytes;
    f.coll = s->coll; f.op = s->op; f.root = s->root;
    if ((r = dist__find_receive(e, e->rank, &f)) != NULL) {
        dist__unpost(e, r);
        if (dist__recv_sizes_agree(e, r, e->rank, &f)) {
            r->source = e->rank;
            dist__land(r, 0, s->sbuf, s->nbytes);
            dist__req_complete(e, r, DIST_OK);
        }
    } else {
        dist__msg *m = dist__msg_get(e, s->nbytes);
        if (m) {
            m->src = e->rank; m->f = f; m->complete = 1;
            if (s->nbytes) memcpy(m->data, s->sbuf, (size_t)s->nbytes);
            if (dist__msg_index(e, m) != 0) { dist__msg_put(e, m); m = NULL; }
        }
        if (!m) { dist__req_failf(e, s, DIST_ERR_NOMEM, "no memory to buffer a message to itself"); return; }
        if (e->polling) dist__wakeup_signal(&e->wake);     /* a probe may be waiting in poll() */
    }
    dist__req_complete(e, s, DIST_OK);
}

static void dist__post_send(dist__engine *e, dist_req_t *r) {
    dist__peer *p = &e->peers[r->peer];
    if (r->peer == e->rank) { dist__send_to_self(e, r); return; }
    if (p->state != DIST__PEER_OK || p->fd == DIST__NO_SOCKET || p->bye_queued) {
        dist__req_failf(e, r, DIST_ERR_PEER_LOST, "%s", p->state == DIST__PEER_OK ? "this rank is shutting down" : p->why);
        return;
    }
    r->by_ref = p->ref_min && r->nbytes >= p->ref_min && (r->frame_kind == DIST__FRAME_DATA || r->frame_kind == DIST__FRAME_COLL);
    r->state = DIST__RS_QUEUED;
    dist__list_append(&p->sendq, &r->link);
    if (!p->wire.hlen) dist__peer_write(e, p);    /* try at once: most sends finish here */
    /* A driver asleep in poll() must learn it may write now (a send
       waiting for credit is not news: the credit's arrival wakes it). */
    if (r->state != DIST__RS_IDLE && e->polling && p->t->uses_fd && dist__peer_wants_write(p)) dist__wakeup_signal(&e->wake);
}

static void dist__post_recv(dist__engine *e, dist_req_t *r) {
    dist__msg *m = dist__find_message(e, r);
    if (m) { dist__take(e, r, m); return; }
    if (r->peer != DIST_ANY_SOURCE && r->peer != e->rank && e->peers[r->peer].state != DIST__PEER_OK) {
        dist__req_failf(e, r, DIST_ERR_PEER_LOST, "%s", e->peers[r->peer].why);
        return;
    }
    if (r->peer == DIST_ANY_SOURCE && e->failed_peers) {
        for (int i = 0; i < e->world; i++)
            if (e->peers[i].state == DIST__PEER_FAILED && (!r->comm->group_of || r->comm->group_of[i] >= 0)) {
                dist__req_failf(e, r, DIST_ERR_PEER_LOST, "%s", e->peers[i].why);
                return;
            }
    }
    if (dist__post_index(e, r) != 0) dist__req_failf(e, r, DIST_ERR_NOMEM, "out of memory for the match index");
}

/* [SECTION] point-to-point API */

static dist_result dist__p2p_check(dist_t *d, const char *what, const void *buf, size_t count, dist_dtype dtype,
                                   int peer, int tag, int any_ok) {
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "%s: NULL communicator", what);
    if (DIST__LOAD_ACQ(&d->eng->aborted)) return dist__fail(d, DIST_ERR_ABORTED, "%s: %s", what, d->eng->abort_why);
    if (DIST__LOAD_ACQ(&d->revoked)) return dist__fail(d, DIST_ERR_REVOKED, "%s: %s", what, d->revoke_note.text);
    if (dtype < 0 || dtype >= DIST_DTYPE_COUNT)
        return dist__fail(d, DIST_ERR_INVALID, "%s: unknown dtype %d", what, (int)dtype);
    if (peer < (any_ok ? DIST_ANY_SOURCE : 0) || peer >= DIST__LOAD_RELAXED(&d->world))
        return dist__fail(d, DIST_ERR_INVALID, "%s: rank %d is not in 0..%d", what, peer, DIST__LOAD_RELAXED(&d->world) - 1);
    if (tag < 0) return dist__fail(d, DIST_ERR_INVALID, "%s: tag %d is negative", what, tag);
    if (count && !buf) return dist__fail(d, DIST_ERR_INVALID, "%s: NULL buffer for %zu element%s", what, count, DIST__PLURAL(count));
    if (count > DIST__MAX_MESSAGE / dist_dtype_size(dtype))
        return dist__fail(d, DIST_ERR_INVALID, "%s: %zu x %s is too large", what, count, dist_dtype_name(dtype));
    return DIST_OK;
}

static void dist__req_init(dist_t *d, dist_req_t *r, int kind, size_t count, dist_dtype dtype, int peer, int tag) {
    r->eng = d->eng;
    r->comm = d;
    r->kind = kind;
    r->peer = peer == DIST_ANY_SOURCE ? peer : dist__wrank(d, peer);
    r->source = -1;
    r->frame_kind = DIST__FRAME_DATA;
    r->comm_id = d->id;
    r->tag = tag;
    r->dtype = dtype;
    r->count = count;
    r->nbytes = (uint64_t)count * dist_dtype_size(dtype);
    r->opno = kind == DIST__REQ_SEND ? ++d->nsend : ++d->nrecv;
}

/* Copies a failed request's sentence to its communicator. */
static void dist__monitor_alarm(dist_t *d);
static dist_result dist__req_finish(dist_t *d, dist_req_t *r) {
    if (r->result == DIST_ERR_TIMEOUT) dist__monitor_alarm(d);
    if (r->result != DIST_OK) return dist__fail(d, r->result, "%s", dist__req_err(r));
    return DIST_OK;
}

static dist_result dist__start(dist_t *d, int kind, int sync, void *buf, size_t count, dist_dtype dtype, int peer, int tag,
                               dist_req_t **out) {
    const char *what = kind == DIST__REQ_RECV ? "irecv" : sync ? "issend" : "isend";
    dist__engine *e;
    dist_req_t *r;
    dist_result res;
    if (out) *out = NULL;                 /* no request unless it started */
    res = dist__p2p_check(d, what, buf, count, dtype, peer, tag, kind == DIST__REQ_RECV);
    if (res != DIST_OK) return res;
    if (!out) return dist__fail(d, DIST_ERR_INVALID, "%s: NULL request pointer", what);
    e = d->eng;
    dist__mutex_lock(&e->lock);
    r = dist__req_alloc(e);
    if (!r) { dist__mutex_unlock(&e->lock); return dist__fail(d, DIST_ERR_NOMEM, "%s: out of memory for a request", what); }
    dist__req_init(d, r, kind, count, dtype, peer, tag);
    r->sync = sync;
    dist__rec_p2p_begin(d, r, peer);
    if (kind == DIST__REQ_SEND) { r->sbuf = (const uint8_t *)buf; dist__post_send(e, r); }
    else { r->rbuf = (uint8_t *)buf; dist__post_recv(e, r); }
    dist__mutex_unlock(&e->lock);
    *out = r;
    return DIST_OK;
}

DIST_API dist_result dist_isend(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_req_t **req) {
    return dist__start(d, DIST__REQ_SEND, 0, (void *)buf, count, dtype, dst, tag, req);
}

DIST_API dist_result dist_issend(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag, dist_req_t **req) {
    return dist__start(d, DIST__REQ_SEND, 1, (void *)buf, count, dtype, dst, tag, req);
}

DIST_API dist_result dist_irecv(dist_t *d, void *buf, size_t count, dist_dtype dtype, int src, int tag, dist_req_t **req) {
    return dist__start(d, DIST__REQ_RECV, 0, buf, count, dtype, src, tag, req);
}

/* Blocking calls use a request on the stack: nothing is allocated. */
static dist_result dist__blocking(dist_t *d, int kind, int sync, void *buf, size_t count, dist_dtype dtype, int peer, int tag) {
    const char *what = kind == DIST__REQ_RECV ? "recv" : sync ? "ssend" : "send";
    dist_req_t r;
    dist__engine *e;
    dist_result res = dist__p2p_check(d, what, buf, count, dtype, peer, tag, kind == DIST__REQ_RECV);
    if (res != DIST_OK) return res;
    e = d->eng;
    memset(&r, 0, sizeof r);
    dist__mutex_lock(&e->lock);
    dist__req_init(d, &r, kind, count, dtype, peer, tag);
    r.sync = sync;
    dist__rec_p2p_begin(d, &r, peer);
    if (kind == DIST__REQ_SEND) { r.sbuf = (const uint8_t *)buf; dist__post_send(e, &r); }
    else { r.rbuf = (uint8_t *)buf; dist__post_recv(e, &r); }
    dist__wait_locked(e, &r, d->timeout_ms);
    dist__mutex_unlock(&e->lock);
    res = dist__req_finish(d, &r);
    dist__req_err_free(&r);
    return res;
}

DIST_API dist_result dist_send(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag) {
    return dist__blocking(d, DIST__REQ_SEND, 0, (void *)buf, count, dtype, dst, tag);
}

DIST_API dist_result dist_ssend(dist_t *d, const void *buf, size_t count, dist_dtype dtype, int dst, int tag) {
    return dist__blocking(d, DIST__REQ_SEND, 1, (void *)buf, count, dtype, dst, tag);
}

DIST_API dist_result dist_recv(dist_t *d, void *buf, size_t count, dist_dtype dtype, int src, int tag) {
    return dist__blocking(d, DIST__REQ_RECV, 0, buf, count, dtype, src, tag);
}

/* Checks a request the caller hands back; on success the engine lock is
   held (the progress thread writes r->done under it). */
static dist_result dist__req_lock_valid(dist_req_t *r, const char *what) {
    if (!r || !r->eng) return dist__fail(NULL, DIST_ERR_INVALID, "%s: NULL or foreign request", what);
    dist__mutex_lock(&r->eng->lock);
    if (r->done < 0) {
        dist__mutex_unlock(&r->eng->lock);
        return dist__fail(r->comm, DIST_ERR_INVALID, "%s: the request was already completed by dist_wait", what);
    }
    return DIST_OK;
}

/* Waits until `start_ms` + `ms` (< 0: + the communicator's timeout). */
static dist_result dist__wait_since(dist_req_t *r, int64_t start_ms, int ms, const char *what) {
    dist__engine *e;
    dist_t *d;
    dist_result res = dist__req_lock_valid(r, what);
    int64_t left;
    if (res != DIST_OK) return res;
    e = r->eng; d = r->comm;
    left = start_ms + (ms < 0 ? d->timeout_ms : ms) - dist__now_ms();
    dist__wait_locked(e, r, left > 0 ? (int)left : 0);
    res = dist__req_finish(d, r);
    dist__req_release(e, r);
    dist__mutex_unlock(&e->lock);
    return res;
}

DIST_API dist_result dist_wait(dist_req_t *r) {
    return dist__wait_since(r, dist__now_ms(), -1, "wait");
}

DIST_API dist_result dist_wait_timeout(dist_req_t *r, int timeout_ms) {
    if (timeout_ms < 0) return dist__fail(r ? r->comm : NULL, DIST_ERR_INVALID, "wait_timeout: timeout %d ms is negative", timeout_ms);
    return dist__wait_since(r, dist__now_ms(), timeout_ms, "wait_timeout");
}

DIST_API dist_result dist_test(dist_req_t *r, int *done) {
    dist__engine *e;
    dist_result res;
    if (done) *done = 0;
    if (!done) return dist__fail(r ? r->comm : NULL, DIST_ERR_INVALID, "test: NULL `done` pointer");
    if ((res = dist__req_lock_valid(r, "test")) != DIST_OK) return res;
    e = r->eng;
    if (!r->done && !e->driving) dist__drive_once(e, 0, 0);
    if (dist__req_settled(e, r)) dist__req_revoked_out(e, r);
    *done = dist__req_is_done(e, r);
    res = r->done ? r->result : DIST_OK;
    if (res != DIST_OK) dist__fail(r->comm, res, "%s", dist__req_err(r));
    dist__mutex_unlock(&e->lock);
    return res;
}

DIST_API dist_result dist_wait_all(int n, dist_req_t **reqs) {
    dist_result first = DIST_OK;
    int64_t start = dist__now_ms();      /* one timeout for the lot, not one each */
    if (n < 0 || (n > 0 && !reqs)) return dist__fail(NULL, DIST_ERR_INVALID, "wait_all: %d request%s at %p", n, DIST__PLURAL(n), (void *)reqs);
    for (int i = 0; i < n; i++) {
        dist_result r;
        if (!reqs[i]) continue;
        r = dist__wait_since(reqs[i], start, -1, "wait_all");
        reqs[i] = NULL;
        if (r != DIST_OK && first == DIST_OK) first = r;
    }
    return first;
}

DIST_API int dist_req_source(const dist_req_t *r) {
    return r && r->done > 0 && r->source >= 0 ? dist__grank(r->comm, r->source) : -1;
}

/* [SECTION] probes */
typedef struct {
    dist_t *d;
    int src, tag;                /* src: a world rank, or DIST_ANY_SOURCE */
    const dist__msg *found;
    const char *gone;            /* no such message can come any more: why */
} dist__probe_state;

/* Looks for an unclaimed message (its header is enough) in the match
   index; else whether it can still come. */
static int dist__probe_ready(dist__engine *e, void *arg) {
    dist__probe_state *ps = (dist__probe_state *)arg;
    dist_req_t key;
    int alive = 0;
    memset(&key, 0, sizeof key);
    key.peer = ps->src; key.comm_id = ps->d->id; key.frame_kind = DIST__FRAME_DATA; key.tag = ps->tag;
    key.comm = ps->d;
    if ((ps->found = dist__find_message(e, &key)) != NULL) return 1;
    if (e->blocked_peers) dist__pull_for(e, &key);     /* as a receive would */
    if (DIST__LOAD_ACQ(&e->aborted) || DIST__LOAD_ACQ(&ps->d->revoked)) return 1;
    if (ps->src != DIST_ANY_SOURCE) {
        const dist__peer *p = &e->peers[ps->src];
        if (ps->src != e->rank && p->state != DIST__PEER_OK) { ps->gone = p->why; return 1; }
        return 0;
    }
    for (int i = 0; i < ps->d->world && !alive; i++) {
        int w = dist__wrank(ps->d, i);
        alive = w == e->rank || e->peers[w].state == DIST__PEER_OK;
    }
    if (!alive) { ps->gone = "every other rank is gone"; return 1; }
    return 0;
}

static dist_result dist__probe(dist_t *d, int src, int tag, int wait, int timeout_ms, int *found, dist_status *st) {
    const char *what = wait ? "probe" : "iprobe";
    dist__probe_state ps;
    dist__engine *e;
    char who[32];
    int ok;
    if (found) *found = 0;
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "%s: NULL communicator", what);
    if (!st || (!wait && !found)) return dist__fail(d, DIST_ERR_INVALID, "%s: NULL %s pointer", what, st ? "`found`" : "status");
    if (DIST__LOAD_ACQ(&d->eng->aborted)) return dist__fail(d, DIST_ERR_ABORTED, "%s: %s", what, d->eng->abort_why);
    if (src < DIST_ANY_SOURCE || src >= DIST__LOAD_RELAXED(&d->world))
        return dist__fail(d, DIST_ERR_INVALID, "%s: rank %d is not in 0..%d", what, src, DIST__LOAD_RELAXED(&d->world) - 1);
    if (tag < 0) return dist__fail(d, DIST_ERR_INVALID, "%s: tag %d is negative", what, tag);
    if (timeout_ms < 0) return dist__fail(d, DIST_ERR_INVALID, "%s: timeout %d ms is negative", what, timeout_ms);
    if (timeout_ms == 0) timeout_ms = d->timeout_ms;
    memset(st, 0, sizeof *st);
    memset(&ps, 0, sizeof ps);
    ps.d = d; ps.tag = tag;
    ps.src = src == DIST_ANY_SOURCE ? src : dist__wrank(d, src);
    if (src == DIST_ANY_SOURCE) snprintf(who, sizeof who, "any rank");
    else snprintf(who, sizeof who, "rank %d", src);
    e = d->eng;
    dist__mutex_lock(&e->lock);
    if (wait) ok = dist__wait_for(e, dist__probe_ready, &ps, dist__now_ns() + (int64_t)timeout_ms * 1000000);
    else {
        if (!e->driving) dist__drive_once(e, 0, 0);
        ok = dist__probe_ready(e, &ps);
    }
    if (ps.found) {
        st->source = dist__grank(d, ps.found->src);
        st->tag = tag;
        st->dtype = (dist_dtype)ps.found->f.dtype;
        st->count = (size_t)ps.found->f.count;
        st->nbytes = (size_t)ps.found->f.nbytes;
        if (found) *found = 1;
    }
    dist__mutex_unlock(&e->lock);
    if (ps.found) return DIST_OK;
    if (DIST__LOAD_ACQ(&e->aborted)) return dist__fail(d, DIST_ERR_ABORTED, "%s: %s", what, e->abort_why);
    if (DIST__LOAD_ACQ(&d->revoked)) return dist__fail(d, DIST_ERR_REVOKED, "%s: %s", what, d->revoke_note.text);
    if (ps.gone) return dist__fail(d, DIST_ERR_PEER_LOST, "%s for a message from %s with tag %d: %s", what, who, tag, ps.gone);
    if (wait && !ok)
        return dist__fail(d, DIST_ERR_TIMEOUT, "%s: no message from %s with tag %d arrived within %.1f s", what, who, tag, timeout_ms / 1000.0);
    return DIST_OK;
}

DIST_API dist_result dist_probe(dist_t *d, int src, int tag, int timeout_ms, dist_status *status) {
    return dist__probe(d, src, tag, 1, timeout_ms, NULL, status);
}

DIST_API dist_result dist_iprobe(dist_t *d, int src, int tag, int *found, dist_status *status) {
    return dist__probe(d, src, tag, 0, 0, found, status);
}

/* -- the event count (dist_events) -- */
static int dist__events_moved(dist__engine *e, void *arg) {
    return e->events != *(const uint64_t *)arg || DIST__LOAD_ACQ(&e->aborted);
}

DIST_API uint64_t dist_events(dist_t *d) {
    return d ? DIST__LOAD_RELAXED(&d->eng->events) : 0;
}

DIST_API uint64_t dist_wait_events(dist_t *d, uint64_t seen, int timeout_ms) {
    dist__engine *e;
    uint64_t now;
    if (!d) return 0;
    e = d->eng;
    dist__mutex_lock(&e->lock);
    if (timeout_ms > 0) dist__wait_for(e, dist__events_moved, &seen, dist__now_ns() + (int64_t)timeout_ms * 1000000);
    else if (!e->driving) dist__drive_once(e, 0, 0);
    now = e->events;
    dist__mutex_unlock(&e->lock);
    return now;
}

/* [SECTION] collectives: descriptors, requests, mismatch and abort notices
   ---------------------------------------------------------------------------
   A collective is a sequence of COLL frames between members of one
   communicator.  Every frame carries the caller's descriptor: kind and
   algorithm, dtype, count, op, root; the tag is the collective's sequence
   number on that communicator.  A receive compares the descriptor of what
   arrives with its own before a byte of payload is used, so ranks that
   called different collectives (or the same with other arguments) fail with
   a sentence naming both sides instead of corrupting memory.  The rank that
   sees a failure tells every other member with an ABORT frame (same tag,
   the sentence as payload), so ranks that could not see the mismatch
   themselves fail at once too instead of waiting for their timeout.

   Algorithms post receives before the matching sends can arrive, in the
   order the peer sends them (frames of one pair and one tag never
   overtake), so payloads land in place: in the user's buffer, or combined
   into it by the receive itself (reduce from the staging buffer, element by
   element, while later chunks are still on the wire). */

#ifndef DIST_CHUNK_BYTES
#  define DIST_CHUNK_BYTES (512 * 1024)   /* pipelining unit of ring and chain algorithms */
#endif
#ifndef DIST_SMALL_BYTES
#  define DIST_SMALL_BYTES (64 * 1024)    /* up to this, latency-optimal algorithms */
#endif
/* When every rank shares this host, all_reduce works in the shared
   segments above this size: at 64 KiB it beat recursive doubling over the
   rings 2.2-3.2x on 2, 3 and 4 ranks; at 32 KiB it won on 2 ranks and
   lost on 3 and 4 (bench/RESULTS.md). */
#ifndef DIST_SHM_SMALL_BYTES
#  define DIST_SHM_SMALL_BYTES (32 * 1024)
#endif

static const char *dist__coll_name(int kind) {
    switch (kind) {
#define DIST__COLL_NAME(up, low) case DIST__COLL_##up: return #low;
    DIST__COLL_LIST(DIST__COLL_NAME)
#undef DIST__COLL_NAME
    default: return "collective";
    }
}

static const char *dist__op_name(int op) {
    static const char *const names[] = { "sum", "product", "max", "min", "avg" };
    return op >= 0 && op < DIST_OP_COUNT ? names[op] : "invalid-op";
}

/* Algorithms: which one a collective uses is part of its descriptor. */
enum { DIST__ALGO_AUTO = 0, DIST__ALGO_RING, DIST__ALGO_TREE, DIST__ALGO_DIRECT, DIST__ALGO_SHM, DIST__ALGO_HALVING, DIST__ALGO_SLOTS,
       DIST__ALGO_HIER, DIST__ALGO_COUNT };
static const char *dist__algo_name(int a) {
    static const char *const names[] = { "auto", "ring", "tree", "direct", "shm", "halving", "slots", "hier" };
    return a >= 0 && a < DIST__ALGO_COUNT ? names[a] : "unknown";
}


/* Called under the engine lock when a collective frame meets its receive.
   Returns 1 (and fails the receive) when the two sides disagree. */
/* Says how frame f's descriptor differs from `want` (a frame holding this
   rank's own); 0 when they agree.  nbytes is compared only when asked. */
static int dist__desc_differs(const dist_t *d, int src, const dist__frame *f, const dist__frame *want, int check_bytes,
                              char *why, size_t cap) {
    int them = dist__grank(d, src), me = d->rank;
    if ((f->coll & 15) != (want->coll & 15))
        dist__format(why, cap, "rank %d called %s, rank %d called %s", them, dist__coll_name(f->coll & 15),
                     me, dist__coll_name(want->coll & 15));
    else if (f->dtype != want->dtype || f->count != want->count)
        dist__format(why, cap, "rank %d passed %llu x %s, rank %d passed %llu x %s", them,
                     (unsigned long long)f->count, dist_dtype_name((dist_dtype)f->dtype), me,
                     (unsigned long long)want->count, dist_dtype_name((dist_dtype)want->dtype));
    else if (f->op != want->op)
        dist__format(why, cap, "rank %d passed op %s, rank %d passed op %s", them, dist__op_name(f->op), me, dist__op_name(want->op));
    else if (f->root != want->root)
        dist__format(why, cap, "rank %d passed root %d, rank %d passed root %d", them, (int)f->root, me, (int)want->root);
    else if ((f->coll >> 4) != (want->coll >> 4))
        dist__format(why, cap, "rank %d chose the %s algorithm, rank %d the %s algorithm (set DIST_ALGO alike on every rank)",
                     them, dist__algo_name(f->coll >> 4), me, dist__algo_name(want->coll >> 4));
    else if (check_bytes && f->nbytes != want->nbytes)
        dist__format(why, cap, "rank %d sent a block of %llu byte%s where rank %d expects %llu", them,
                     (unsigned long long)f->nbytes, DIST__PLURAL(f->nbytes), me, (unsigned long long)want->nbytes);
    else
        return 0;
    return 1;
}

static int dist__coll_mismatch(dist__engine *e, dist_req_t *r, int src, const dist__frame *f) {
    char why[DIST__ERRLEN];
    dist__frame want;
    memset(&want, 0, sizeof want);
    want.coll = r->coll; want.dtype = (uint8_t)r->dtype; want.count = r->count; want.op = r->op;
    want.root = r->root; want.nbytes = r->nbytes;
    if (!dist__desc_differs(r->comm, src, f, &want, 1, why, sizeof why)) return 0;
    r->source = src;
    dist__req_failf(e, r, DIST_ERR_MISMATCH, "%s", why);
    return 1;
}

/* Drops unclaimed frames of collectives of `d` that have ended (an
   announcement is refused, so its sender does not wait for it), or once d
   is revoked, every unclaimed message of d.  Under the engine lock; only
   after a failure. */
static void dist__purge_stale(dist__engine *e, dist_t *d) {
    dist__msg *list = NULL;
    uint64_t done = DIST__LOAD_RELAXED(&d->done_seq);
    int all = d->revoked;
    for (size_t i = 0; i < e->ix.cap; i++) {
        dist__queue *q = e->ix.slot[i];
        if (!q || q->table != DIST__IX_UNEXP || q->comm != d->id ||
            (!all && (q->kind != DIST__FRAME_COLL || (uint64_t)q->tag > done))) continue;
        for (dist__link *n = q->items.next; n != &q->items; n = n->next) {
            dist__msg *m = DIST__CONTAINER(n, dist__msg, lsrc);
            if (!m->claimed) { m->next_free = list; list = m; }
        }
    }
    while (list) {
        dist__msg *m = list;
        list = m->next_free;
        if (m->f.flags & DIST__FRAME_RTS) dist__refuse(e, &e->peers[m->src], m->f.sid, all ? DIST__REFUSED_REVOKED : DIST__REFUSED_MISMATCH);
        if (m->complete) dist__msg_drop(e, m);
        else m->dead = 1;
    }
}

/* ---- the collective running here, as the receive path sees it ----
   The thread that runs d's collectives writes active_seq, done_seq and the
   descriptors without the engine lock (a small collective through slots
   takes none); the receive path reads them under it, through a sequence
   lock: view_gen is odd while they change, and a read that saw it change
   is made again. */
static void dist__view_open(dist_t *d) {
    DIST__STORE_RELAXED(&d->view_gen, d->view_gen + 1);
    DIST__FENCE_ACQ_REL();
}
static void dist__view_close(dist_t *d) { DIST__STORE_REL(&d->view_gen, d->view_gen + 1); }

/* Collective seq, described by d->active, begins. */
static void dist__view_begin(dist_t *d, uint64_t seq) {
    dist__shm_desc *x = &d->view_desc[seq & 1];
    const dist__frame *f = &d->active;
    dist__view_open(d);
    DIST__STORE_RELAXED(&x->count, f->count);
    DIST__STORE_RELAXED(&x->coll, f->coll);
    DIST__STORE_RELAXED(&x->dtype, f->dtype);
    DIST__STORE_RELAXED(&x->op, f->op);
    DIST__STORE_RELAXED(&x->root, f->root);
    DIST__STORE_RELAXED(&d->active_seq, seq);
    dist__view_close(d);
}

/* Collective seq has ended: its late frames are dropped. */
static void dist__view_end(dist_t *d, uint64_t seq) {
    dist__view_open(d);
    DIST__STORE_RELAXED(&d->done_seq, seq);
    DIST__STORE_RELAXED(&d->active_seq, (uint64_t)0);
    dist__view_close(d);
}

typedef struct dist__view {
    uint64_t active_seq, done_seq;
    dist__frame active, last;        /* the descriptors of those two */
} dist__view;

static void dist__view_desc(const dist__shm_desc *x, dist__frame *f) {
    memset(f, 0, sizeof *f);
    f->count = DIST__LOAD_RELAXED(&x->count);
    f->coll = DIST__LOAD_RELAXED(&x->coll);
    f->dtype = DIST__LOAD_RELAXED(&x->dtype);
    f->op = DIST__LOAD_RELAXED(&x->op);
    f->root = DIST__LOAD_RELAXED(&x->root);
}

static void dist__view_read(const dist_t *d, dist__view *v) {
    for (unsigned spins = 1;; spins++) {
        uint32_t g = DIST__LOAD_ACQ(&d->view_gen);
        if (!(g & 1)) {
            v->active_seq = DIST__LOAD_RELAXED(&d->active_seq);
            v->done_seq = DIST__LOAD_RELAXED(&d->done_seq);
            dist__view_desc(&d->view_desc[v->active_seq & 1], &v->active);
            dist__view_desc(&d->view_desc[v->done_seq & 1], &v->last);
            DIST__FENCE_ACQ_REL();
            if (DIST__LOAD_RELAXED(&d->view_gen) == g) return;
        }
        if (spins & 15) DIST__CPU_RELAX(); else dist__yield();     /* a writer between two stores */
    }
}

static dist_t *dist__engine_comm(dist__engine *e, uint32_t id) {
    for (int i = 0; i < e->ncomms; i++)
        if (e->comms[i]->id == id) return e->comms[i];
    return NULL;
}

/* Why collective `seq` of d failed, or NULL if it has not (every one
   fails once d is revoked). */
static const dist__abort_note *dist__coll_aborted(const dist_t *d, uint64_t seq) {
    const dist__abort_note *a = &d->aborts[seq % DIST__ABORT_NOTES];
    if (seq && a->seq == seq) return a;
    return DIST__LOAD_ACQ(&d->revoked) ? &d->revoke_note : NULL;
}

static void dist__revoke_locked(dist__engine *e, dist_t *d, const char *why, int local);

/* An ABORT frame: rank `src` says collective `seq` of communicator `comm`
   failed.  Its pending receives fail now; a later start of that collective
   fails at once.  Under the engine lock. */
/* Collective `seq` of `d` failed: its pending receives fail now, and its
   later posts fail at once.  local: this rank saw why (and will tell the
   others); else rank `src` told us.  Under the engine lock. */
static void dist__coll_fail_seq(dist__engine *e, dist_t *d, uint64_t seq, dist_result code, int local, const char *text) {
    dist__abort_note *a = &d->aborts[seq % DIST__ABORT_NOTES];
    if (seq == 0 || seq <= a->seq) return;
    a->seq = seq;
    a->code = code;
    a->local = local;
    dist__format(a->text, sizeof a->text, "%s", text);
    DIST__STORE_RELAXED(&d->abort_gen, d->abort_gen + 1);
    for (int g = 0; g < d->world; g++) {
        dist__queue *q = dist__ix_find(&e->ix, DIST__IX_POSTED, d->id, DIST__FRAME_COLL, (int64_t)seq, dist__wrank(d, g));
        while (q) {
            dist_req_t *r = DIST__CONTAINER(q->items.next, dist_req_t, link);
            int last = q->items.next->next == &q->items;
            dist__unpost(e, r);
            r->by_peer = !local;
            dist__req_failf(e, r, code, "%s", a->text);
            if (last) break;
        }
    }
}

/* Member `src` of d gave up on collective `seq` (its time was up, or a
   member it waited for had given up) while it waited for member `on`
   (group ranks): an edge of the chain dist__coll_blame follows.  Under
   the engine lock. */
static void dist__waits_note(dist_t *d, uint64_t seq, int src, int on) {
    if (!d->waits) {
        if ((d->waits = (dist__waits *)DIST_MALLOC(sizeof *d->waits * (size_t)d->world)) == NULL) return;
        memset(d->waits, 0, sizeof *d->waits * (size_t)d->world);
        d->waits_n = d->world;
    }
    if (src < 0 || src >= d->waits_n || on < 0 || on >= d->waits_n) return;
    if (seq < d->waits[src].seq) return;
    d->waits[src].seq = seq;
    d->waits[src].on = on;
    d->waits[src].at = dist__now_ns();
    d->waits_max = DIST__MAX(d->waits_max, seq);
    DIST__STORE_RELAXED(&d->abort_gen, d->abort_gen + 1);   /* small collectives take the locked path */
}

static void dist__on_abort(dist__engine *e, int src, uint32_t comm, int64_t seq, int32_t code, int blamed, const char *text) {
    dist_t *d = dist__engine_comm(e, comm);
    char why[DIST__ERRLEN];
    if (!d || seq < 0) return;
    if (seq == 0) {          /* not one collective: the communicator (dist_revoke) */
        if (code == DIST_ERR_REVOKED) dist__revoke_locked(e, d, text, 0);
        return;
    }
    if (code == DIST_ERR_TIMEOUT && blamed >= 0) {
        /* A member timed out waiting for `blamed`: not adopted as the
           cause (that member may itself be what the others wait for);
           every rank still in the collective gives up soon and weighs
           who stopped from all such notices (dist__coll_blame). */
        int gs = dist__grank(d, src), gb = dist__grank(d, blamed);
        if (gs >= 0 && gb >= 0) {
            dist__waits_note(d, (uint64_t)seq, gs, gb);
            if (e->sleepers) dist__cond_broadcast(&e->cond);
            return;
        }
    }
    dist__format(why, sizeof why, "rank %d reported: %s", dist__grank(d, src), text);
    dist__coll_fail_seq(e, d, (uint64_t)seq, code < 0 && code > -100 ? (dist_result)code : DIST_ERR_FAILED, 0, why);
}

/* Member g of `d` (not this rank) learns that collective `seq` failed
   (seq 0: that d was revoked), and why (and whom this rank blames, a
   group rank, or -1).  Under the engine lock. */
static void dist__notify_one(dist__engine *e, dist_t *d, int g, uint64_t seq, dist_result code, const char *why, int blamed) {
    dist__peer *p = &e->peers[dist__wrank(d, g)];
    dist__frame f;
    dist_req_t *a;
    if (g == d->rank || p->fd == DIST__NO_SOCKET || p->bye_sent || (a = dist__req_alloc(e)) == NULL) return;
    a->comm = d; a->kind = DIST__REQ_SEND; a->peer = p->rank; a->detached = 1;
    if (dist__req_err_buf(a) == dist__req_err_oom) { dist__req_release(e, a); return; }
    dist__format(a->err, DIST__MIN(DIST__ERRLEN, DIST__MAX_ABORT_TEXT + 1), "%s", why);
    a->sbuf = (const uint8_t *)a->err;
    a->nbytes = strlen(a->err);
    memset(&f, 0, sizeof f);
    f.kind = DIST__FRAME_ABORT; f.comm = d->id; f.tag = (int64_t)seq; f.root = (int32_t)code; f.nbytes = a->nbytes;
    f.count = blamed >= 0 && blamed < d->world ? (uint64_t)dist__wrank(d, blamed) + 1 : 0;
    if (dist__ctl_push(e, p, &f, a) != 0) { dist__req_release(e, a); return; }
    dist__peer_write(e, p);
}

/* Every other member learns it. */
static void dist__coll_notify(dist__engine *e, dist_t *d, uint64_t seq, dist_result code, const char *why, int blamed) {
    for (int g = 0; g < d->world; g++) dist__notify_one(e, d, g, seq, code, why, blamed);
}

/* Communicator d is revoked (dist_revoke here, or a member's notice):
   every operation on it fails, DIST_ERR_REVOKED with `why`, now or when it
   begins.  Receives posted on it fail now; a send or receive someone waits
   on is withdrawn by its waiter (one already on the wire finishes);
   collectives fail through revoke_note; messages of d that came and those
   that come are dropped (announcements refused).  Every member is told,
   by this rank and by every member that hears of it first (as ULFM
   revokes), so the notice reaches all even if its sender dies at once.
   Under the engine lock. */
#ifdef DIST_TEST_HOOKS
static int dist__test_revoke_only = -1;     /* >= 0: dist_revoke tells that member only, as if it died then */
#endif
static void dist__revoke_locked(dist__engine *e, dist_t *d, const char *why, int local) {
    dist__abort_note *a = &d->revoke_note;
    dist_req_t *list;
    if (d->revoked) return;
    a->seq = UINT64_MAX; a->code = DIST_ERR_REVOKED; a->local = 0;
    dist__format(a->text, sizeof a->text, "%s", why);
    DIST__STORE_REL(&d->revoked, 1);
    e->nrevoked++;
    DIST__STORE_RELAXED(&e->events, e->events + 1);
    DIST__STORE_RELAXED(&d->abort_gen, d->abort_gen + 1);   /* small collectives take the locked path */
    list = NULL;
    for (size_t i = 0; i < e->ix.cap; i++) {
        dist__queue *q = e->ix.slot[i];
        if (!q || (q->table != DIST__IX_POSTED && q->table != DIST__IX_POSTED_ANY) || q->comm != d->id) continue;
        for (dist__link *n = q->items.next; n != &q->items; n = n->next) {
            dist_req_t *r = DIST__CONTAINER(n, dist_req_t, link);
            r->state = DIST__RS_IDLE;
            r->next = list;
            list = r;
        }
    }
    dist__fail_list(e, list, DIST_ERR_REVOKED, a->text);
    /* The notice goes before the refusals (one queue per peer, in order):
       a sender learns who revoked before it learns its message was
       refused, and names the revoker rather than this rank. */
    for (int g = 0; g < d->world; g++) {
#ifdef DIST_TEST_HOOKS
        if (local && dist__test_revoke_only >= 0 && g != dist__test_revoke_only) continue;
#endif
        dist__notify_one(e, d, g, 0, DIST_ERR_REVOKED, a->text, -1);
    }
    (void)local;
    dist__purge_stale(e, d);
    dist__cond_broadcast(&e->cond);
    if (e->polling) dist__wakeup_signal(&e->wake);
}

/* A frame of a collective this rank finished already: it can only come
   from a rank that disagrees about who sends what (another root, another
   collective).  This rank is past it, but the others still waiting are
   told.  Under the engine lock. */
static void dist__coll_check_late(dist__engine *e, dist_t *d, int src, const dist__frame *f) {
    char why[DIST__ERRLEN];
    dist__view v;
    dist__abort_note *a;
    dist__view_read(d, &v);
    a = &d->aborts[v.done_seq % DIST__ABORT_NOTES];
    if ((uint64_t)f->tag != v.done_seq || a->seq >= v.done_seq) return;
    if (!dist__desc_differs(d, src, f, &v.last, 0, why, sizeof why))
        dist__format(why, sizeof why, "rank %d sent rank %d a block it did not expect", dist__grank(d, src), d->rank);
    a->seq = v.done_seq;
    a->code = DIST_ERR_MISMATCH;
    a->local = 1;
    dist__format(a->text, sizeof a->text, "%s", why);
    DIST__STORE_RELAXED(&d->abort_gen, d->abort_gen + 1);
    dist__coll_notify(e, d, v.done_seq, DIST_ERR_MISMATCH, why, -1);
}

/* A frame of the collective this rank is running arrived before its
   receive was posted (or for a receive this rank will never post, when
   the two disagree on who sends what): its descriptor is checked now, so
   a different root or collective fails at once instead of timing out. */
static int dist__coll_check_early(dist__engine *e, dist_t *d, int src, const dist__frame *f) {
    char why[DIST__ERRLEN];
    dist__view v;
    dist__view_read(d, &v);
    if (!v.active_seq || (uint64_t)f->tag != v.active_seq) return 0;
    if (!dist__desc_differs(d, src, f, &v.active, 0, why, sizeof why)) return 0;
    dist__coll_fail_seq(e, d, v.active_seq, DIST_ERR_MISMATCH, 1, why);
    /* A collective through slots may end without the lock before it
       sees this: the sender learns the cause from here. */
    if ((v.active.coll >> 4) == DIST__ALGO_SLOTS) dist__coll_notify(e, d, v.active_seq, DIST_ERR_MISMATCH, why, -1);
    return 1;
}

/* One collective call in progress on this rank. */
typedef struct dist__coll {
    dist_t *d;
    dist__engine *e;
    int kind, algo;
    dist_dtype dtype;
    dist_op op;
    int root;
    size_t count, es;
    /* the team the algorithm runs on now (dist__team): tn members, this
       rank member tme, member i group rank tmap[i] (NULL: i), the root
       member troot.  All the members, but for the phases of a
       hierarchical collective. */
    int tn, tme, troot;
    const int *tmap;
    uint64_t seq;
    int64_t deadline_ns;         /* 0 until dist__coll_deadline */
    int fast;                    /* through slots, begun without the lock (dist__coll_begin) */
    int64_t grace_ns;            /* gave up: fails then (0: not yet; dist__coll_overdue) */
    int waited;                  /* ...waiting for this member (group rank) */
    const char *waited_what;     /* ...to do this */
    int blamed;                  /* the member its failure names (-1: none), told to the others */
    int now_told;                /* what it is in is published for ranks waiting in shared memory */
    int lost_seen;               /* e->failed_peers when last looked (dist__coll_lost_late) */
    int64_t lost_ns;             /* a member died while this call ran: it fails a grace later unless done (0: none) */
    dist_req_t *reqs;            /* posted and not yet waited for */
    int stamped;                 /* its frames carry who entered it when (the communicator's stats are on): */
    int32_t st_rank;             /* ...the member that came last as far as this rank knows (an engine rank), */
    int64_t st_last, st_first;   /* ...its entry and the earliest, on the job clock */
    dist_result res;
    char why[DIST__ERRLEN];
} dist__coll;

/* Collectives: by the thread running them (see "flight recorder").  The
   stores a call makes: its entry as it begins, then d->coll_seq (readers
   take entries up to coll_seq: whole), and rec_cur as it ends (a time more
   when it waited or is timed, a byte when it failed).  While rec_cur is of
   an earlier one, collective #coll_seq is running.  An entry is written
   over as collective #(its number + DIST__REC_N) begins, when coll_seq is
   one less: a reader checks coll_seq after reading it. */
DIST__INLINE void dist__rec_coll_begin(dist__coll *c, uint64_t seq, int coll, int dtype, int op, int root, size_t count) {
    dist_t *d = c->d;
    dist__crec *x;
    if (!DIST_RECORDER_OPS) return;
    x = &d->rec_c[seq & (DIST__REC_N - 1)];
    DIST__FENCE_ACQ_REL();
    DIST__STORE_RELAXED(&x->count, (uint64_t)count);
    DIST__STORE_RELAXED(&x->coll, (uint8_t)coll);
    DIST__STORE_RELAXED(&x->dtype, (uint8_t)dtype);
    DIST__STORE_RELAXED(&x->op, (uint8_t)op);
    DIST__STORE_RELAXED(&x->failed, (uint8_t)0);
    DIST__STORE_RELAXED(&x->root, (int32_t)root);
    if (d->rec_timed) {              /* (its timeout counts from here then, and with stats its frames are stamped) */
        int64_t now = dist__now_ns();
        DIST__STORE_RELAXED(&d->rec_t_start, now);
        DIST__STORE_REL(&d->rec_t_seq, seq);
        c->deadline_ns = now + (int64_t)d->timeout_ms * 1000000;
        if (d->obs) { c->stamped = 1; c->st_last = c->st_first = now + d->top->clock_off; c->st_rank = c->e->rank; }
    }
}

DIST__INLINE void dist__rec_coll_waits(dist__coll *c, int member, int what) {
    if (DIST_RECORDER_OPS) DIST__STORE_REL(&c->d->rec_cur, DIST__REC_CUR(c->seq, member, what, DIST__REC_RUNNING));
}

DIST__INLINE void dist__rec_coll_end(dist__coll *c) {
    dist_t *d = c->d;
    if (!DIST_RECORDER_OPS) return;
    if (c->deadline_ns) DIST__STORE_RELAXED(&d->rec_t_end, dist__now_ns());    /* (it waited, or is timed: its start was read) */
    if (c->res == DIST_OK) DIST__STORE_REL(&d->rec_cur, DIST__REC_CUR(c->seq, -1, DIST__RECW_NONE, DIST__REC_DONE));
    else {
        DIST__STORE_RELAXED(&d->rec_c[c->seq & (DIST__REC_N - 1)].failed, (uint8_t)-c->res);
        DIST__STORE_REL(&d->rec_cur, DIST__REC_CUR(c->seq, -1, DIST__RECW_NONE, DIST__REC_FAILED));
    }
    if (d->obs && c->deadline_ns) {       /* (timed: every field is this call's) */
        dist__rec x;
        memset(&x, 0, sizeof x);
        x.state = c->res == DIST_OK ? DIST__REC_DONE : DIST__REC_FAILED;
        x.desc = dist__rec_desc(c->kind, c->algo, c->dtype, c->op, c->root);
        x.seq = c->seq; x.count = c->count; x.res = c->res;
        x.t_start = d->rec_t_start; x.t_end = d->rec_t_end;
        x.tag = d->rec_q_seq == c->seq ? d->rec_t_enq : 0;
        dist__obs_end(d, 0, &x, c->stamped ? c->st_rank : -1, c->st_last - c->st_first);
    }
}

/* When the call times out: its timeout from the first time anything asks
   (a few hundred nanoseconds into a wait at most), so a call that never
   waits never reads the clock. */
static int64_t dist__coll_deadline(dist__coll *c) {
    if (!c->deadline_ns) {
        int64_t now = dist__now_ns();
        c->deadline_ns = now + (int64_t)c->d->timeout_ms * 1000000;
        if (DIST_RECORDER_OPS && c->d->rec_t_seq != c->seq) {     /* (see "flight recorder") */
            DIST__STORE_RELAXED(&c->d->rec_t_start, now);
            DIST__STORE_REL(&c->d->rec_t_seq, c->seq);
        }
    }
    return c->deadline_ns;
}

static void dist__coll_failf(dist__coll *c, dist_result res, const char *fmt, ...) {
    va_list ap;
    if (c->res != DIST_OK) return;
    c->res = res;
    va_start(ap, fmt);
    dist__vformat(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
}

/* The collective failed elsewhere (a peer's notice, or a frame this rank
   checked): that is its cause. */
static void dist__coll_fail_noted(dist__coll *c) {
    const dist__abort_note *a = dist__coll_aborted(c->d, c->seq);
    if (a) dist__coll_failf(c, a->code, "%s", a->text);
}

/* Deaths.  A collective fails at once with the death of a member it
   still needs something from directly: a receive from it, a send to it,
   its part in shared memory.  A member that wrote its part and then left
   or died has done it (bytes sent before a close count, as over TCP):
   the call may still complete, as when every rank ends with a barrier and
   exits at once.  Other members' deaths fail the call a grace period
   later (a twentieth of the timeout, 50-500 ms) unless it completed meanwhile,
   so nothing waits on a member that waits for the dead one; whoever needed
   it directly has failed by then and told the others (dist__coll_notify).
   A barrier, all_reduce, all_gather, reduce_scatter or all_to_all cannot
   complete anywhere before every member has come, so one of those that
   begins with a member dead fails at once.  Under the engine lock. */

/* The first member (group rank) whose connection failed, or -1. */
static int dist__coll_dead_member(const dist__coll *c) {
    const dist__engine *e = c->e;
    if (!e->failed_peers) return -1;
    for (int g = 0; g < c->d->world; g++)
        if (g != c->d->rank && e->peers[dist__wrank(c->d, g)].state == DIST__PEER_FAILED) return g;
    return -1;
}

/* The call fails with member g's death (1), unless g is alive (0). */
static int dist__coll_member_g_lost(dist__coll *c, int g) {
    dist__engine *e = c->e;
    dist__peer *p;
    if (!e->failed_peers || g < 0 || g >= c->d->world || g == c->d->rank) return 0;
    p = &e->peers[dist__wrank(c->d, g)];
    if (p->state != DIST__PEER_FAILED) return 0;
    dist__coll_failf(c, e->aborted ? DIST_ERR_ABORTED : DIST_ERR_PEER_LOST, "%s", p->why);
    return 1;
}

/* That grace period. */
static int64_t dist__lost_grace_ns(const dist_t *d) {
    return DIST__MIN(DIST__MAX((int64_t)d->timeout_ms / 20, (int64_t)50), (int64_t)500) * 1000000;
}

/* A member died while the call ran (noted now), and the grace is over:
   the call fails with that death (1). */
static int dist__coll_lost_late(dist__coll *c, int64_t now) {
    if (c->res != DIST_OK || !c->e->failed_peers) return 0;
    if (!c->lost_ns) {
        int seen = DIST__LOAD_RELAXED(&c->e->failed_peers);
        if (seen == c->lost_seen) return 0;
        c->lost_seen = seen;
        if (dist__coll_dead_member(c) < 0) return 0;
        c->lost_ns = now;
    }
    if (now - c->lost_ns < dist__lost_grace_ns(c->d)) return 0;
    return dist__coll_member_g_lost(c, dist__coll_dead_member(c));
}

/* When a wait must look again: the timeout, or the end of a death's grace. */
static int64_t dist__coll_wake_by(dist__coll *c) {
    int64_t t = dist__coll_deadline(c);
    return c->lost_ns ? DIST__MIN(t, c->lost_ns + dist__lost_grace_ns(c->d)) : t;
}

/* Who stopped.  A member that stops (SIGSTOP, a debugger, a call it never
   makes) leaves its neighbours waiting, their neighbours waiting for
   them, and so on: each times out at about the same moment, and naming
   the rank each waited for would name mostly ranks that were only
   waiting.  So a rank whose time is up (or that learns a member gave up
   on the collective, which then cannot complete) tells the others whom
   it waited for, waits a grace period (a fifth of the timeout, 0.1-2 s)
   for what they say, and follows the chain: the rank it waited for
   waited for another, ... up to one that said nothing: that one
   stopped. */
static int64_t dist__blame_grace_ns(const dist_t *d) {
    return DIST__MIN(DIST__MAX((int64_t)d->timeout_ms / 5, (int64_t)100), (int64_t)2000) * 1000000;
}

/* A member gave up on this collective (its notice came). */
static int dist__coll_given_up(const dist__coll *c) {
    const dist_t *d = c->d;
    if (!d->waits || d->waits_max < c->seq) return 0;
    for (int g = 0; g < d->waits_n; g++)
        if (d->waits[g].seq == c->seq) return 1;
    return 0;
}

/* Fails c naming the member that stopped: the end of the chain from
   c->waited.  `gave_up`: c->waited gave up on the collective (and left)
   rather than this rank's time running out.  Under the engine lock. */
static void dist__coll_blame(dist__coll *c, int gave_up) {
    dist_t *d = c->d;
    char chain[DIST__ERRLEN] = "", first[160];
    size_t off = 0;
    int g = c->waited, steps = 0;
    int64_t now = dist__now_ns(), recent = (int64_t)d->timeout_ms * 1000000 + 2 * dist__blame_grace_ns(d);
    if (gave_up) dist__format(first, sizeof first, "rank %d gave up on it", g);
    else if (c->grace_ns - dist__blame_grace_ns(d) < dist__coll_deadline(c))   /* others gave up first */
        dist__format(first, sizeof first, "other ranks gave up on it while this rank waited for rank %d to %s", g, c->waited_what);
    else dist__format(first, sizeof first, "timed out after %.1f s waiting for rank %d to %s", d->timeout_ms / 1000.0, g, c->waited_what);
    /* The chain: whom each said it waited for in this collective, or in
       an earlier one it gave up on lately (then it never came to this
       one); it ends at a rank that said nothing. */
    while (d->waits && g >= 0 && g != d->rank && steps < d->world) {
        const dist__waits *w = &d->waits[g];
        if (!w->seq || w->seq > c->seq || (w->seq < c->seq && now - w->at > recent) || w->on == g) break;
        if (off < sizeof chain - 80) {
            if (w->seq == c->seq) off += (size_t)snprintf(chain + off, sizeof chain - off, ", which was waiting for ");
            else off += (size_t)snprintf(chain + off, sizeof chain - off, ", which was still in collective #%llu waiting for ",
                                         (unsigned long long)w->seq);
            if (w->on == d->rank) off += (size_t)snprintf(chain + off, sizeof chain - off, "this rank");
            else off += (size_t)snprintf(chain + off, sizeof chain - off, "rank %d", w->on);
        }
        g = w->on;
        steps++;
    }
    if (g == c->waited || g < 0) {
        c->blamed = c->waited;
        dist__coll_failf(c, DIST_ERR_TIMEOUT, "%s", first);
    } else if (g == d->rank) {
        /* it waited for this rank: this rank came late, or was itself stuck */
        c->blamed = c->waited;
        dist__coll_failf(c, DIST_ERR_TIMEOUT, "%s%s", first, chain);
    } else {
        c->blamed = g;
        dist__coll_failf(c, DIST_ERR_TIMEOUT, "rank %d stopped (it said nothing): %s%s", g, first, chain);
    }
}

/* The wait for member g (to do `what`) is past the collective's deadline,
   or a member gave up on it.  The first time: the others are told, and
   the grace period begins (0: wait on); after it: c fails (1).  Under
   the engine lock. */
static int dist__coll_overdue(dist__coll *c, int g, const char *what, int64_t now) {
    if (!c->grace_ns) {
        char why[DIST__ERRLEN];
        c->grace_ns = now + dist__blame_grace_ns(c->d);
        c->waited = g;
        c->waited_what = what;
        dist__waits_note(c->d, c->seq, c->d->rank, g);
        dist__format(why, sizeof why, "timed out waiting for rank %d to %s", g, what);
        dist__coll_notify(c->e, c->d, c->seq, DIST_ERR_TIMEOUT, why, g);
        return 0;
    }
    if (now < c->grace_ns) return 0;
    dist__coll_blame(c, 0);
    return 1;
}

/* Ranks waiting on this one in shared memory compare the collective it is
   in with their own call (dist__fast_slots_behind). */
static void dist__coll_tell_now(dist__coll *c) {
    dist__shm_hdr *h = c->e->shm.hdr;
    c->now_told = 1;
    if (c->res != DIST_OK || c->d->top != c->d || !h || !c->e->shm.hosts) return;
    DIST__STORE_REL(&h->now.seq, (uint64_t)0);
    dist__shm_desc_set(&h->now.desc, &c->d->active);
    DIST__STORE_REL(&h->now.seq, c->seq);
}

/* Frames of this collective already here (they came before it began, or
   as a small one began without the lock): a descriptor that differs fails
   it.  Under the engine lock. */
static void dist__coll_check_queued(dist__coll *c) {
    dist__queue *q = dist__ix_find(&c->e->ix, DIST__IX_UNEXP_ANY, c->d->id, DIST__FRAME_COLL, (int64_t)c->seq, -1);
    char why[DIST__ERRLEN];
    for (dist__link *n = q ? q->items.next : NULL; n && n != &q->items; n = n->next) {
        dist__msg *m = DIST__CONTAINER(n, dist__msg, lany);
        if (!m->dead && dist__desc_differs(c->d, m->src, &m->f, &c->d->active, 0, why, sizeof why)) {
            dist__coll_fail_seq(c->e, c->d, c->seq, DIST_ERR_MISMATCH, 1, why);
            return;
        }
    }
}

/* invalid: this rank's call is bad (why); it fails, and tells the others.
   A collective through slots (algo DIST__ALGO_SLOTS) of a world on one
   host (across hosts it posts frames too) takes no lock when nothing is
   amiss: no failed connection, no collective of d failed, no
   frame of a collective waiting (its checks are then made at the end). */
static void dist__coll_begin(dist__coll *c, dist_t *d, int kind, int algo, size_t count, dist_dtype dtype, dist_op op, int root,
                             const char *invalid) {
    const dist__abort_note *a;
    c->d = d; c->e = d->eng;         /* every field, but no memset of the sentence */
    c->deadline_ns = 0; c->reqs = NULL; c->res = DIST_OK; c->why[0] = 0; c->fast = 0; c->now_told = 0;
    c->grace_ns = 0; c->waited = -1; c->waited_what = ""; c->blamed = -1; c->lost_seen = 0; c->lost_ns = 0;
    c->kind = kind; c->algo = algo; c->count = count; c->dtype = dtype; c->op = op; c->root = root;
    c->es = dist_dtype_size(dtype);
    c->tn = d->world; c->tme = d->rank; c->troot = root; c->tmap = NULL;
    if (invalid && invalid[0]) dist__coll_failf(c, DIST_ERR_INVALID, "rank %d %s", d->rank, invalid);
    c->seq = d->coll_seq + 1;
    c->stamped = 0;                  /* (dist__rec_coll_begin stamps it when the stats are on) */
    dist__rec_coll_begin(c, c->seq, kind | algo << 4, dtype, op, root, count);
    DIST__STORE_REL(&d->coll_seq, c->seq);          /* (the monitor reads it: see dist__rec_coll_begin) */
    d->active.coll = (uint8_t)(kind | algo << 4); d->active.dtype = (uint8_t)dtype; d->active.count = count;
    d->active.op = (uint8_t)op; d->active.root = root;
    if (algo == DIST__ALGO_SLOTS && c->res == DIST_OK && !DIST__LOAD_ACQ(&d->abort_gen) && !DIST__LOAD_ACQ(&c->e->failed_peers) &&
        !DIST__LOAD_ACQ(&c->e->unexp_coll) && d->nodes < 2) {
        c->fast = 1;
        dist__view_begin(d, c->seq);
        return;
    }
    dist__mutex_lock(&c->e->lock);
    dist__view_begin(d, c->seq);
    if (DIST__LOAD_ACQ(&d->revoked)) dist__coll_failf(c, DIST_ERR_REVOKED, "%s", d->revoke_note.text);   /* (and told nobody) */
    dist__coll_tell_now(c);
    dist__coll_check_queued(c);
    if ((a = dist__coll_aborted(d, c->seq)) != NULL) dist__coll_failf(c, a->code, "%s", a->text);
    else if (c->e->failed_peers) {   /* a member dead already (see "Deaths" above) */
        int rooted = kind == DIST__COLL_BROADCAST || kind == DIST__COLL_REDUCE || kind == DIST__COLL_GATHER || kind == DIST__COLL_SCATTER;
        if (!rooted) dist__coll_member_g_lost(c, dist__coll_dead_member(c));
        else dist__coll_lost_late(c, dist__now_ns());
    }
    dist__mutex_unlock(&c->e->lock);
}

/* Posts one frame of this collective to or from member `peer` of the
   team.  Returns NULL once the collective has failed (c->res says why). */
static dist_req_t *dist__coll_post(dist__coll *c, int kind, int peer, const void *buf, size_t nbytes, int reduce, int in_first) {
    dist__engine *e = c->e;
    dist_req_t *r = NULL;
    dist__mutex_lock(&e->lock);
    if (c->res == DIST_OK && dist__coll_aborted(c->d, c->seq)) dist__coll_fail_noted(c);
    if (c->res == DIST_OK && (r = dist__req_alloc(e)) == NULL)
        dist__coll_failf(c, DIST_ERR_NOMEM, "out of memory for a request");
    if (r) {
        r->comm = c->d;
        r->kind = kind;
        r->peer = dist__wrank(c->d, c->tmap ? c->tmap[peer] : peer);
        r->source = -1;
        r->frame_kind = DIST__FRAME_COLL;
        r->comm_id = c->d->id;
        r->tag = (int64_t)c->seq;
        r->dtype = c->dtype;
        r->count = c->count;
        r->nbytes = nbytes;
        r->coll = (uint8_t)(c->kind | c->algo << 4);
        r->op = (uint8_t)c->op;
        r->root = c->root;
        r->reduce = reduce ? (int)c->op + 1 : 0;
        r->in_first = in_first;
        r->stamped = kind == DIST__REQ_SEND && c->stamped;
        r->st_last = c->st_last; r->st_first = c->st_first; r->st_rank = c->st_rank;
        r->cnext = c->reqs;
        c->reqs = r;
        if (kind == DIST__REQ_SEND) { r->sbuf = (const uint8_t *)buf; dist__post_send(e, r); }
        else { r->rbuf = (uint8_t *)buf; dist__post_recv(e, r); }
    }
    dist__mutex_unlock(&e->lock);
    return r;
}

static dist_req_t *dist__coll_send(dist__coll *c, int peer, const void *buf, size_t nbytes) {
    return dist__coll_post(c, DIST__REQ_SEND, peer, buf, nbytes, 0, 0);
}
static dist_req_t *dist__coll_recv(dist__coll *c, int peer, void *buf, size_t nbytes) {
    return dist__coll_post(c, DIST__REQ_RECV, peer, buf, nbytes, 0, 0);
}

static void dist__coll_unlink(dist__coll *c, dist_req_t *r) {
    for (dist_req_t **pp = &c->reqs; *pp; pp = &(*pp)->cnext)
        if (*pp == r) { *pp = r->cnext; return; }
}

static int dist__fast_disagrees(dist__coll *c);

/* A collective's request is done, or the collective failed elsewhere, or
   (now and then) a rank took slots for it where this one did not. */
typedef struct dist__coll_waiting { dist_req_t *r; dist__coll *c; int64_t next_look_ns; } dist__coll_waiting;
static int dist__coll_req_ready(dist__engine *e, void *arg) {
    dist__coll_waiting *w = (dist__coll_waiting *)arg;
    int64_t now;
    if (w->c->grace_ns) return dist__coll_aborted(w->c->d, w->c->seq) != NULL;   /* it fails when the grace ends */
    if (dist__req_is_done(e, w->r) || dist__coll_aborted(w->c->d, w->c->seq) != NULL || dist__coll_given_up(w->c)) return 1;
    if (!w->c->lost_ns && DIST__LOAD_RELAXED(&e->failed_peers) != w->c->lost_seen) return 1;   /* a death: its grace begins */
    if (!w->c->e->shm.hosts || w->c->d->top != w->c->d || (now = dist__now_ns()) < w->next_look_ns) return 0;
    w->next_look_ns = now + 2000000;    /* every 2 ms: a wake-up of the wait comes at least every 100 ms */
    return dist__fast_disagrees(w->c);
}

/* Waits for one of the collective's requests (NULL: a post that failed). */
/* What a frame (or a slot) said of who entered the collective when. */
static void dist__coll_stamp(dist__coll *c, int64_t last, int64_t first, int rank) {
    if (last > c->st_last) { c->st_last = last; c->st_rank = rank; }
    if (first < c->st_first) c->st_first = first;
}

static dist_result dist__coll_wait(dist__coll *c, dist_req_t *r) {
    dist__engine *e = c->e;
    if (!r) return c->res;
    dist__mutex_lock(&e->lock);
    if (!r->done || c->grace_ns || dist__coll_given_up(c)) {
        dist__coll_waiting w;
        int g = dist__grank(c->d, r->kind == DIST__REQ_RECV && r->source >= 0 ? r->source : r->peer);
        w.r = r; w.c = c; w.next_look_ns = 0;
        dist__rec_coll_waits(c, g, r->kind == DIST__REQ_RECV ? DIST__RECW_DATA : DIST__RECW_TAKE);
        /* until it is done, or the collective failed; past the deadline
           (or once a member gave up) through the grace period of
           dist__coll_overdue, after which it fails naming who stopped */
        int timed_out = 0;
        while (c->res == DIST_OK && !dist__coll_aborted(c->d, c->seq)) {
            dist__wait_for(e, dist__coll_req_ready, &w, c->grace_ns ? c->grace_ns : dist__coll_wake_by(c));
            if ((r->done && !c->grace_ns && !dist__coll_given_up(c)) || c->res != DIST_OK || dist__coll_aborted(c->d, c->seq)) break;
            int64_t now = dist__now_ns();
            if (dist__coll_lost_late(c, now)) break;
            if (c->grace_ns || now >= dist__coll_deadline(c) || dist__coll_given_up(c))   /* (not a death's early wake-up) */
                timed_out = dist__coll_overdue(c, g, r->kind == DIST__REQ_RECV ? "send its part" : "take this rank's part", now);
        }
        /* timed out: withdrawn here; after another failure, when the
           collective ends (dist__coll_end) */
        if (!r->done && timed_out) dist__withdraw_wait(e, r, c->d->timeout_ms, DIST__REFUSED_WITHDRAWN, DIST_ERR_TIMEOUT);
    }
    if (!r->done) {
        /* Another rank reported that this collective failed while this
           rank waited for a peer to take (or announce) its part: the
           report is the cause.  The request ends with the collective. */
        dist__coll_fail_noted(c);
        dist__mutex_unlock(&e->lock);
        return c->res;
    }
    if (r->result != DIST_OK) {
        int peer = dist__grank(c->d, r->kind == DIST__REQ_RECV && r->source >= 0 ? r->source : r->peer);
        if (dist__coll_aborted(c->d, c->seq))   /* the collective failed, and a rank said why: that is the cause */
            dist__coll_fail_noted(c);
        else if (r->result == DIST_ERR_PEER_LOST && c->d->waits && c->d->waits[peer].seq == c->seq) {
            /* it left after giving up on the collective: whom it waited for is the cause */
            c->waited = peer;
            dist__coll_blame(c, 1);
        } else if (r->result == DIST_ERR_TIMEOUT && !r->by_peer)   /* a peer's report keeps its own words */
            dist__coll_failf(c, DIST_ERR_TIMEOUT, "timed out after %.1f s waiting for rank %d to %s",
                             c->d->timeout_ms / 1000.0, peer, r->kind == DIST__REQ_RECV ? "send its part" : "take this rank's part");
        else
            dist__coll_failf(c, r->result, "%s", dist__req_err(r));
    }
    if (c->stamped && r->kind == DIST__REQ_RECV && r->stamped) dist__coll_stamp(c, r->st_last, r->st_first, r->st_rank);
    dist__coll_unlink(c, r);
    dist__req_release(e, r);
    dist__mutex_unlock(&e->lock);
    return c->res;
}

/* Ends the collective: withdraws what is still posted (no byte is written
   into the caller's buffers after this returns), lets sends already on the
   wire finish, tells the other members about a failure, and records the
   sentence.  Returns the collective's result. */
static dist_result dist__coll_end(dist__coll *c) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    if (c->fast && c->res == DIST_OK) {
        dist__view_end(d, c->seq);
        if (!DIST__LOAD_ACQ(&d->abort_gen) && !DIST__LOAD_ACQ(&e->unexp_coll)) { dist__rec_coll_end(c); return DIST_OK; }
        /* a frame of a collective came: this one's are checked below */
    }
    /* A send already partly on the wire cannot be taken back without
       breaking the stream: it may finish within one grace period for the
       whole call (else the wait's withdrawal closes that connection).
       After a failure the grace is short, so a timed-out collective
       returns close to its timeout however many sends were in flight. */
    int64_t now = c->reqs ? dist__now_ns() : 0, end;
    int64_t dl = c->deadline_ns ? c->deadline_ns : (now ? now : dist__now_ns()) + (int64_t)d->timeout_ms * 1000000;   /* (not a wait) */
    if (c->res == DIST_OK) end = DIST__MAX(dl, now + 1000000000);
    else end = DIST__MAX(now + 200000000, DIST__MIN(dl, now + 1000000000));
    dist__mutex_lock(&e->lock);
    /* The others learn of a failure first, before the refusals of their
       announced parts that the withdrawals below send: the cause, not
       "rank N did not take it".  Even a failure another rank reported is
       passed on: a rank that only hears from this one (and then its
       goodbye) learns the real cause. */
    if (c->res != DIST_OK && !d->revoked) dist__coll_notify(e, d, c->seq, c->res, c->why, c->blamed);   /* (revoked: all know) */
    if (c->fast && c->res == DIST_OK) dist__coll_check_queued(c);
    while (c->reqs) {
        dist_req_t *r = c->reqs;
        if (!r->done && dist__send_in_flight(e, r)) {
            int64_t left = end - dist__now_ns();
            dist__wait_locked(e, r, left > 0 ? (int)((left + 999999) / 1000000) : 0);
        } else if (!r->done) {
            dist__withdraw_wait(e, r, 0, c->res == DIST_OK ? DIST__REFUSED_WITHDRAWN : DIST__REFUSED_GONE, DIST_ERR_TIMEOUT);
        }
        c->reqs = r->cnext;
        dist__req_release(e, r);
    }
    /* A frame that disagreed with this call arrived while it ran (its
       descriptor was checked and the frame dropped).  This rank's own part
       may have finished anyway, as a sender's does, but a rank still
       waiting for what that frame's sender will never send learns of it
       only from here. */
    if (c->res == DIST_OK && dist__coll_aborted(d, c->seq) && dist__coll_aborted(d, c->seq)->local) {
        dist__coll_fail_noted(c);
        dist__coll_notify(e, d, c->seq, c->res, c->why, c->blamed);
    }
    dist__view_end(d, c->seq);
    if (c->res != DIST_OK) dist__purge_stale(e, d);
    dist__mutex_unlock(&e->lock);
    dist__rec_coll_end(c);
    if (c->res == DIST_OK) return DIST_OK;
    if (c->res == DIST_ERR_TIMEOUT) dist__monitor_alarm(d);
    return dist__fail(d, c->res, "%s #%llu: %s", dist__coll_name(c->kind), (unsigned long long)c->seq, c->why);
}

/* Per-communicator scratch memory: grown when a call needs more, then kept,
   so steady use allocates nothing. */
static uint8_t *dist__scratch(dist__coll *c, size_t bytes) {
    dist_t *d = c->d;
    if (bytes > d->scratch_cap) {
        uint8_t *p = (uint8_t *)DIST_REALLOC(d->scratch, bytes);
        if (!p) { dist__coll_failf(c, DIST_ERR_NOMEM, "out of memory for %zu bytes of scratch", bytes); return NULL; }
        d->scratch = p;
        d->scratch_cap = bytes;
    }
    return d->scratch;
}

/* Block b of `count` elements split over n ranks (the first count % n
   blocks get one more). */
static size_t dist__block_off(size_t count, int n, int b) {
    return (size_t)b * (count / (size_t)n) + DIST__MIN((size_t)b, count % (size_t)n);
}
static size_t dist__block_len(size_t count, int n, int b) {
    return count / (size_t)n + ((size_t)b < count % (size_t)n);
}

/* Elements per pipeline chunk (smaller chunks were measured no faster
   here: loopback TCP is bound by its copies, not by latency). */
static size_t dist__chunk_elems(size_t es) {
    size_t n = DIST_CHUNK_BYTES / es;
    return n ? n : 1;
}

/* [SECTION] collectives: algorithms
   ---------------------------------------------------------------------------
   Written once over dist__coll_send / recv / recv_reduce / wait, in group
   ranks.  Every algorithm sends at least one frame per step even when its
   blocks are empty, so that count 0 is checked like any other count.

   Pipelines (ring, chain) are lists of steps run by dist__run_steps: every
   receive of the whole call is posted first, in the order the peer sends;
   then chunk k of step t+1 goes out as soon as chunk k of step t has
   arrived (and, in a reduction, been combined by the receive itself).  The
   number of chunks per step comes from the descriptor alone, so both ends
   agree; short blocks end in empty chunks.

   Reproducibility: a ring reduces each block along one fixed path and then
   copies the result to everyone; in recursive doubling both partners
   compute op(lower half's partial, upper half's partial) in that order.
   Either way every rank holds the same bits, run after run. */

static uint8_t dist__empty[16];   /* stands in for NULL buffers of 0 elements */

struct dist__step {
    int from;                  /* group rank to receive from, -1: none */
    uint8_t *rbuf; size_t rlen;
    int reduce;                /* combine into rbuf instead of copying */
    int to;                    /* group rank to send to, -1: none */
    const uint8_t *sbuf; size_t slen;
};

/* Per-communicator arrays for steps and request slots, grown as needed. */
static void *dist__grow_array(dist__coll *c, void **p, size_t *cap, size_t n, size_t elem) {
    if (n > *cap) {
        void *q = DIST_REALLOC(*p, n * elem);
        if (!q) { dist__coll_failf(c, DIST_ERR_NOMEM, "out of memory for %zu bookkeeping entries", n); return NULL; }
        *p = q;
        *cap = n;
    }
    return *p;
}
static dist__step *dist__steps(dist__coll *c, int T) {
    return (dist__step *)dist__grow_array(c, (void **)&c->d->steps, &c->d->steps_cap, (size_t)T, sizeof(dist__step));
}

/* Chunk k (of ce elements each) of a block of `len` elements:
   [*off, *off + *n). */
static void dist__chunk(size_t ce, size_t len, size_t k, size_t *off, size_t *n) {
    *off = DIST__MIN(k * ce, len);
    *n = DIST__MIN(ce, len - *off);
}

/* A plan: a collective's frames on this rank as one list of operations.
   Every receive is posted first, in plan order; then each send or fold
   runs once every receive of its lane before it in the plan has
   completed (its data is what they brought), the lanes independently of
   each other, and a send only after the sends before it in the plan to
   the same peer: a pair's frames are thus sent and expected in plan
   order, which both ends share.  A fold combines data a receive brought
   into scratch with buf, in its lane's plan order (buf = op(src, buf), or
   op(src, init) with init copied into buf first), where a receive that
   combined as it came could come before the receives that make buf
   ready.  Lanes are the
   pieces of the data that move independently: a ring's chunks, a
   hierarchical collective's segments. */
struct dist__op {
    int peer;                  /* member of the team (a hierarchical plan: a group rank, the team all) */
    int recv, reduce;          /* recv: 1 a receive (reduce: combining into buf as it comes), 2 a fold of src; 0 a send */
    int lane;
    uint8_t *buf; size_t bytes;
    const uint8_t *src, *init;
};
static dist__op *dist__plan(dist__coll *c, size_t n) {
    return (dist__op *)dist__grow_array(c, (void **)&c->d->ops, &c->d->ops_cap, n, sizeof(dist__op));
}
/* Is receive r done?  (No progress is made here; dist__coll_wait makes it.) */
static int dist__coll_req_done(dist__coll *c, dist_req_t *r) {
    int done;
    dist__mutex_lock(&c->e->lock);
    done = r->done != 0;
    dist__mutex_unlock(&c->e->lock);
    return done;
}

static dist_result dist__run_plan(dist__coll *c, const dist__op *op, int n, int lanes, int in_first) {
    dist_req_t **rq;
    /* next: the next operation of the same lane; prev_send: the send to the
       same peer before it (-1: none); ran: 1 once it ran; at: each lane's
       first receive not yet waited for; head: each lane's next send or
       fold; last: the last send to each member, while they are numbered */
    int *next, *prev_send, *ran, *at, *head, *last, left = 0;
    if (!dist__grow_array(c, (void **)&c->d->slots, &c->d->slots_cap, (size_t)n + 1, sizeof(dist_req_t *)) ||
        !dist__grow_array(c, (void **)&c->d->links, &c->d->links_cap, 3 * (size_t)n + 2 * (size_t)lanes + (size_t)c->tn + 1, sizeof(int)))
        return c->res;
    rq = c->d->slots; next = c->d->links; prev_send = next + n; ran = prev_send + n; at = ran + n; head = at + lanes; last = head + lanes;
    for (int l = 0; l < lanes; l++) at[l] = -1;
    for (int i = n - 1; i >= 0; i--) { next[i] = at[op[i].lane]; at[op[i].lane] = i; }
    for (int l = 0; l < lanes; l++) head[l] = at[l];
    for (int p = 0; p < c->tn; p++) last[p] = -1;
    for (int i = 0; i < n; i++) {
        ran[i] = 0;
        prev_send[i] = -1;
        if (op[i].recv == 0) { prev_send[i] = last[op[i].peer]; last[op[i].peer] = i; }
        if (op[i].recv != 1) left++;
    }
    for (int i = 0; i < n; i++) {
        rq[i] = NULL;
        if (op[i].recv == 1 &&
            (rq[i] = dist__coll_post(c, DIST__REQ_RECV, op[i].peer, op[i].buf, op[i].bytes, op[i].reduce, in_first)) == NULL)
            return c->res;
    }
    /* Each lane runs as far as it can; this thread waits only when none
       can move, for the first receive that holds one back.  (Run in the
       plan's one order, a fold waiting for its lane's crossing of a slow
       link held back every lane's local steps sorted after it.) */
    while (left > 0) {
        int moved = 0, block = -1;
        for (int l = 0; l < lanes; l++)
            for (;;) {
                int i = head[l], held = -1;
                while (i >= 0 && op[i].recv == 1) i = next[i];
                head[l] = i;
                if (i < 0) break;
                while (at[l] >= 0 && at[l] < i) {       /* the lane's receives before this send or fold */
                    int j = at[l];
                    if (op[j].recv == 1 && rq[j]) {
                        if (!dist__coll_req_done(c, rq[j])) { held = j; break; }
                        if (dist__coll_wait(c, rq[j]) != DIST_OK) return c->res;
                        rq[j] = NULL;
                    }
                    at[l] = next[j];
                }
                if (held >= 0) { if (block < 0 || held < block) block = held; break; }
                /* a pair's frames go in plan order (they match receives in the order posted) */
                if (op[i].recv == 0 && prev_send[i] >= 0 && !ran[prev_send[i]]) break;
                if (op[i].recv == 2) {
                    if (op[i].init && op[i].bytes) memcpy(op[i].buf, op[i].init, op[i].bytes);   /* (a piece: still in cache for the fold) */
                    if (op[i].bytes) dist__reduce_table[c->dtype][c->op](op[i].buf, op[i].src, op[i].bytes / c->es, in_first);
                } else if ((rq[i] = dist__coll_send(c, op[i].peer, op[i].buf, op[i].bytes)) == NULL) {
                    return c->res;
                }
                ran[i] = 1; head[l] = next[i]; left--; moved = 1;
            }
        /* (the plan's first operation not run is always free to run or held
           by a receive of its lane: its sends' predecessors ran) */
        if (!moved && block >= 0) {
            if (dist__coll_wait(c, rq[block]) != DIST_OK) return c->res;
            rq[block] = NULL;
        } else if (!moved) {
            dist__coll_failf(c, DIST_ERR_FAILED, "internal: a plan of %d operations stopped with %d not run", n, left);   /* (cannot happen: see above) */
            return c->res;
        }
    }
    for (int i = 0; i < n; i++)
        if (rq[i] && dist__coll_wait(c, rq[i]) != DIST_OK) return c->res;
    return DIST_OK;
}

/* Runs T steps over blocks of at most `block` elements, cut into the same
   number of chunks (at least one, so an empty block still sends a frame
   that carries the descriptor; block 0: each step whole, one chunk);
   in_first: a combining receive computes op(incoming, rbuf).  A plan with
   a lane per chunk: a step's chunk k is sent once the steps before
   received theirs. */
static dist_result dist__run_steps(dist__coll *c, const dist__step *st, int T, size_t block, int in_first) {
    size_t es = c->es, off, n, ce = block == 0 ? SIZE_MAX : dist__chunk_elems(es), K = block == 0 ? 1 : (block + ce - 1) / ce;
    dist__op *op = dist__plan(c, 2 * (size_t)T * K);
    int m = 0;
    if (!op) return c->res;
    for (int t = 0; t < T; t++)
        for (size_t k = 0; k < K; k++) {
            if (st[t].to >= 0) {
                dist__chunk(ce, st[t].slen, k, &off, &n);
                op[m].peer = st[t].to; op[m].recv = 0; op[m].reduce = 0; op[m].lane = (int)k;
                op[m].buf = (uint8_t *)(uintptr_t)(st[t].sbuf + off * es); op[m].bytes = n * es; m++;
            }
            if (st[t].from >= 0) {
                dist__chunk(ce, st[t].rlen, k, &off, &n);
                op[m].peer = st[t].from; op[m].recv = 1; op[m].reduce = st[t].reduce; op[m].lane = (int)k;
                op[m].buf = st[t].rbuf + off * es; op[m].bytes = n * es; m++;
            }
        }
    return dist__run_plan(c, op, m, (int)K, in_first);
}

static int dist__mod(int a, int n) { return ((a % n) + n) % n; }
static uint8_t *dist__at(const void *base, size_t elems, size_t es) { return (uint8_t *)base + elems * es; }

/* Offsets of the blocks of a ring (n + 1 entries, in elements), kept
   per communicator. */
static size_t *dist__offsets(dist__coll *c, int n) {
    return (size_t *)dist__grow_array(c, (void **)&c->d->offs, &c->d->offs_cap, (size_t)n + 1, sizeof(size_t));
}

/* The ring over the team on `buf`, whose member b owns block b, elements
   [off[b], off[b+1]) (blocks may be empty).  Reduce-scatter (rs): at step
   t member r sends block r-t-1, folded so far, and folds block r-t-2 from
   its left into its own; after n-1 steps block r holds the team's
   reduction, combined along one fixed path.  All-gather (ag): at step t
   member r sends block r-t and receives block r-t-1.  Both: an all-reduce
   in 2(n-1) steps, pipelined chunk by chunk from one phase into the next
   (each step sends the block the step before received). */
static dist_result dist__ring_blocks(dist__coll *c, uint8_t *buf, const size_t *off, int rs, int ag) {
    int n = c->tn, r = c->tme, T = 0, left = dist__mod(r - 1, n), right = dist__mod(r + 1, n);
    size_t most = 0;
    dist__step *st = dist__steps(c, 2 * (n - 1) + 1);
    if (!st) return c->res;
    for (int b = 0; b < n; b++) most = DIST__MAX(most, off[b + 1] - off[b]);
    for (int ph = 0; ph < 2; ph++) {
        if (!(ph == 0 ? rs : ag)) continue;
        for (int t = 0; t < n - 1; t++, T++) {
            int rb = ph == 0 ? dist__mod(r - t - 2, n) : dist__mod(r - t - 1, n);
            int sb = ph == 0 ? dist__mod(r - t - 1, n) : dist__mod(r - t, n);
            st[T].from = left; st[T].reduce = ph == 0;
            st[T].rbuf = dist__at(buf, off[rb], c->es); st[T].rlen = off[rb + 1] - off[rb];
            st[T].to = right;
            st[T].sbuf = dist__at(buf, off[sb], c->es); st[T].slen = off[sb + 1] - off[sb];
        }
    }
    return T ? dist__run_steps(c, st, T, most, 1) : c->res;
}

/* Ring all-reduce in place over the team: the vector in n near-equal
   blocks, reduce-scattered and gathered. */
static dist_result dist__ring_all_reduce(dist__coll *c, uint8_t *buf) {
    size_t *off = dist__offsets(c, c->tn);
    if (!off) return c->res;
    for (int b = 0; b <= c->tn; b++) off[b] = dist__block_off(c->count, c->tn, b);
    return dist__ring_blocks(c, buf, off, 1, 1);
}

/* Ring reduce-scatter over `work` (n blocks of c->count, a copy of the
   input; block r ends complete on member r), or all-gather into it
   (block r is already in place on member r). */
static dist_result dist__ring_rs_ag(dist__coll *c, uint8_t *work, int rs) {
    size_t *off = dist__offsets(c, c->tn);
    if (!off) return c->res;
    for (int b = 0; b <= c->tn; b++) off[b] = (size_t)b * c->count;
    return dist__ring_blocks(c, work, off, rs, !rs);
}

/* Pipelined chain broadcast: root -> root+1 -> ... -> root+n-1, each rank
   forwarding chunk k as soon as it has it. */
static dist_result dist__chain_broadcast(dist__coll *c, uint8_t *buf) {
    int n = c->tn, v = dist__mod(c->tme - c->troot, n), T = 0;
    dist__step *st = dist__steps(c, 2);
    if (!st) return c->res;
    if (v > 0) {
        st[T].from = dist__mod(c->tme - 1, n); st[T].rbuf = buf; st[T].rlen = c->count; st[T].reduce = 0;
        st[T].to = -1; st[T].sbuf = NULL; st[T].slen = 0;
        T++;
    }
    if (v < n - 1) {
        st[T].from = -1; st[T].rbuf = NULL; st[T].rlen = 0; st[T].reduce = 0;
        st[T].to = dist__mod(c->tme + 1, n); st[T].sbuf = buf; st[T].slen = c->count;
        T++;
    }
    return dist__run_steps(c, st, T, c->count, 0);
}

/* Pipelined chain reduction towards the root: root+n-1 -> ... -> root+1 ->
   root; each rank folds the partial of the ranks after it into its own
   (own values first) and passes chunk k on as soon as it is folded.  `acc`
   holds this rank's values (the user's buffer at the root, a copy
   elsewhere). */
static dist_result dist__chain_reduce(dist__coll *c, uint8_t *acc) {
    int n = c->tn, v = dist__mod(c->tme - c->troot, n), T = 0;
    dist__step *st = dist__steps(c, 2);
    if (!st) return c->res;
    if (v < n - 1) {
        st[T].from = dist__mod(c->tme + 1, n); st[T].rbuf = acc; st[T].rlen = c->count; st[T].reduce = 1;
        st[T].to = -1; st[T].sbuf = NULL; st[T].slen = 0;
        T++;
    }
    if (v > 0) {
        st[T].from = -1; st[T].rbuf = NULL; st[T].rlen = 0; st[T].reduce = 0;
        st[T].to = dist__mod(c->tme - 1, n); st[T].sbuf = acc; st[T].slen = c->count;
        T++;
    }
    return dist__run_steps(c, st, T, c->count, 0);
}

/* One exchange with a partner: receive (optionally combining) and send at
   once.  Either side may be -1. */
static dist_result dist__exchange(dist__coll *c, int to, const void *sbuf, size_t sbytes,
                                  int from, void *rbuf, size_t rbytes, int reduce, int in_first) {
    dist_req_t *rq = NULL, *sq = NULL;
    if (from >= 0 && (rq = dist__coll_post(c, DIST__REQ_RECV, from, rbuf, rbytes, reduce, in_first)) == NULL) return c->res;
    if (to >= 0 && (sq = dist__coll_send(c, to, sbuf, sbytes)) == NULL) return c->res;
    if (rq && dist__coll_wait(c, rq) != DIST_OK) return c->res;
    if (sq && dist__coll_wait(c, sq) != DIST_OK) return c->res;
    return DIST_OK;
}

/* Binomial-tree broadcast (log n rounds), for small messages. */
static dist_result dist__tree_broadcast(dist__coll *c, uint8_t *buf) {
    int n = c->tn, v = dist__mod(c->tme - c->troot, n), mask = 1;
    size_t bytes = c->count * c->es;
    while (mask < n) {                       /* receive from the parent */
        if (v & mask) {
            if (dist__exchange(c, -1, NULL, 0, dist__mod(c->tme - mask, n), buf, bytes, 0, 0) != DIST_OK) return c->res;
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)   /* then feed the subtrees below */
        if (v + mask < n && dist__exchange(c, dist__mod(c->tme + mask, n), buf, bytes, -1, NULL, 0, 0, 0) != DIST_OK)
            return c->res;
    return DIST_OK;
}

/* Binomial-tree reduction to the root, for small messages: each rank folds
   its children's partials into `acc` (own values first: children have
   higher virtual ranks), then sends it to its parent. */
static dist_result dist__tree_reduce(dist__coll *c, uint8_t *acc) {
    int n = c->tn, v = dist__mod(c->tme - c->troot, n);
    size_t bytes = c->count * c->es;
    for (int mask = 1; mask < n; mask <<= 1) {
        if (v & mask)
            return dist__exchange(c, dist__mod(c->tme - mask, n), acc, bytes, -1, NULL, 0, 0, 0);
        if (v + mask < n && dist__exchange(c, -1, NULL, 0, dist__mod(c->tme + mask, n), acc, bytes, 1, 0) != DIST_OK)
            return c->res;
    }
    return DIST_OK;
}

/* Recursive doubling and halving run on p ranks, the largest power of two
   <= n: the first 2 x extra ranks pair up, the even one hands its vector
   to the odd one (which combines it) and waits for the result.  Returns 1
   when this rank is done (the outcome in c->res), else 0 with p, extra and
   its virtual rank v set. */
static int dist__fold_in(dist__coll *c, uint8_t *buf, size_t bytes, int *pp, int *pextra, int *pv) {
    int n = c->tn, r = c->tme, p = 1, extra;
    while (p * 2 <= n) p *= 2;
    extra = n - p;
    *pp = p; *pextra = extra;
    if (r < 2 * extra) {
        if (r % 2 == 0) {   /* hand over, wait for the result */
            if (dist__exchange(c, r + 1, buf, bytes, -1, NULL, 0, 0, 0) == DIST_OK) dist__exchange(c, -1, NULL, 0, r + 1, buf, bytes, 0, 0);
            return 1;
        }
        if (dist__exchange(c, -1, NULL, 0, r - 1, buf, bytes, 1, 1) != DIST_OK) return 1;
        *pv = r / 2;
    } else {
        *pv = r - extra;
    }
    return 0;
}

/* Recursive doubling all-reduce, for small messages.  With n = p + e (p a
   power of two), ranks 2i and 2i+1 (i < e) first fold into 2i+1, the p
   survivors exchange and fold log p times, and 2i+1 hands the result back
   to 2i.  Partners fold in the same order (lower half first), so both hold
   the same bits. */
static dist_result dist__rd_all_reduce(dist__coll *c, uint8_t *buf) {
    int r = c->tme, p, extra, v;
    size_t bytes = c->count * c->es;
    uint8_t *tmp = dist__scratch(c, bytes ? bytes : 1);
    if (!tmp) return c->res;
    if (dist__fold_in(c, buf, bytes, &p, &extra, &v)) return c->res;
    for (int mask = 1; mask < p; mask <<= 1) {
        int pv = v ^ mask, partner = pv < extra ? 2 * pv + 1 : pv + extra;
        if (dist__exchange(c, partner, buf, bytes, partner, tmp, bytes, 0, 0) != DIST_OK) return c->res;
        if (bytes) dist__reduce_table[c->dtype][c->op](buf, tmp, c->count, pv < v);
    }
    if (r < 2 * extra) return dist__exchange(c, r - 1, buf, bytes, -1, NULL, 0, 0, 0);
    return DIST_OK;
}

/* Recursive halving and doubling all-reduce (Rabenseifner), for large
   messages: with p a power of two, log p exchanges of shrinking halves
   reduce-scatter the vector over p blocks (block v ends on virtual rank v),
   and log p exchanges of growing ranges gather it back.  The same volume as
   the ring in 2 log p steps instead of 2(p-1), which counts when ranks
   outnumber cores.  Extra ranks fold in and out as in recursive doubling.
   Each block is combined along one path and then copied, so every rank
   holds the same bits. */
static dist_result dist__halving_all_reduce(dist__coll *c, uint8_t *buf) {
    int r = c->tme, p, extra, v, lo = 0, hi, T = 0;
    dist__step *st;
    size_t es = c->es, bytes = c->count * es;
    if (dist__fold_in(c, buf, bytes, &p, &extra, &v)) return c->res;
    hi = p;
    for (int mask = p / 2; mask > 0; mask >>= 1) {   /* reduce-scatter: keep one half, send the other */
        int pv = v ^ mask, partner = pv < extra ? 2 * pv + 1 : pv + extra, mid = lo + (hi - lo) / 2, up = (v & mask) != 0;
        size_t m = dist__block_off(c->count, p, mid), l = dist__block_off(c->count, p, lo), h = dist__block_off(c->count, p, hi);
        if (dist__exchange(c, partner, buf + (up ? l : m) * es, (up ? m - l : h - m) * es,
                           partner, buf + (up ? m : l) * es, (up ? h - m : m - l) * es, 1, pv < v) != DIST_OK) return c->res;
        if (up) lo = mid; else hi = mid;
    }
    /* All-gather: swap what each holds, log p whole steps.  The ranges
       received are disjoint, so run_steps posts every receive first and
       data that comes early lands in place (not in a buffer, copied again
       later); each send goes once the step before has received. */
    for (int mask = 1; mask < p; mask <<= 1) T++;
    if ((st = dist__steps(c, T)) == NULL) return c->res;
    for (int mask = 1, t = 0; mask < p; mask <<= 1, t++) {
        int pv = v ^ mask, partner = pv < extra ? 2 * pv + 1 : pv + extra, mlo = v & ~(mask - 1), plo = pv & ~(mask - 1);
        size_t mo = dist__block_off(c->count, p, mlo), po = dist__block_off(c->count, p, plo);
        st[t].from = st[t].to = partner; st[t].reduce = 0;
        st[t].rbuf = buf + po * es; st[t].rlen = dist__block_off(c->count, p, plo + mask) - po;
        st[t].sbuf = buf + mo * es; st[t].slen = dist__block_off(c->count, p, mlo + mask) - mo;
    }
    if (dist__run_steps(c, st, T, 0, 0) != DIST_OK) return c->res;
    if (r < 2 * extra) return dist__exchange(c, r - 1, buf, bytes, -1, NULL, 0, 0, 0);
    return DIST_OK;
}

/* Dissemination barrier: in round k every rank signals rank + 2^k and
   waits for rank - 2^k; after ceil(log2 n) rounds everyone has heard,
   directly or not, from everyone. */
static dist_result dist__dissemination_barrier(dist__coll *c) {
    int n = c->tn, r = c->tme;
    for (int k = 1; k < n; k <<= 1)
        if (dist__exchange(c, dist__mod(r + k, n), NULL, 0, dist__mod(r - k, n), NULL, 0, 0, 0) != DIST_OK) return c->res;
    return DIST_OK;
}

/* Gather, scatter and all-to-all: every block goes straight to its owner,
   all transfers posted at once (receives first).  In a scatter every
   receiving rank also sends the root an empty frame, so the root sees
   every rank's descriptor: a rank that called gather (or named another
   root) while the others scatter is caught there instead of both sides
   waiting for each other.  (A gather needs none: its non-roots send data
   to the root, and may leave before the root has started.) */
static dist_result dist__direct_exchange(dist__coll *c, const uint8_t *send, uint8_t *recv, int gather, int scatter) {
    int n = c->tn, r = c->tme, root = c->troot;
    size_t bytes = c->count * c->es;
    dist_req_t **q;
    if (!dist__grow_array(c, (void **)&c->d->slots, &c->d->slots_cap, 2 * (size_t)n, sizeof(dist_req_t *))) return c->res;
    q = c->d->slots;
    for (int i = 0; i < 2 * n; i++) q[i] = NULL;
    for (int s = 1; s < n; s++) {           /* receives first */
        int from = dist__mod(r - s, n), data = !((gather && r != root) || (scatter && from != root));
        int hello = scatter && r == root;       /* the empty frame of a scatter's receiver */
        if (!data && !hello) continue;
        if ((q[s] = dist__coll_recv(c, from, scatter ? recv : recv + (size_t)from * bytes, data ? bytes : 0)) == NULL) return c->res;
    }
    for (int s = 1; s < n; s++) {
        int to = dist__mod(r + s, n), data = !((gather && to != root) || (scatter && r != root));
        int hello = scatter && to == root;
        if (!data && !hello) continue;
        if ((q[n + s] = dist__coll_send(c, to, gather ? send : send + (size_t)to * bytes, data ? bytes : 0)) == NULL) return c->res;
    }
    for (int i = 0; i < 2 * n; i++)
        if (q[i] && dist__coll_wait(c, q[i]) != DIST_OK) return c->res;
    return DIST_OK;
}

/* ---- hierarchical collectives: hosts, then ranks ----
   When a communicator spans hosts and some host has several of its
   members, the flat algorithms would cross a host's link once for every
   pair of ring neighbours (or tree partners) that straddles it.  The
   hierarchical forms cross it only with what must leave the host, and
   every member on a host carries a share, so each host's link and cores
   all work.  They run the flat algorithms above on teams (dist__team):
   a host's members (in rank order), or a rail, one member per host.

   The vector is cut into M rail blocks, M the most members on one host.
   Rail j is carried on a host of L members by its member j mod L (every
   member carries one rail or more; where L < M some carry several, in
   increasing order, so no rail waits on one that waits on it), and its
   members are ordered by host.  all_reduce: a reduce-scatter of the rail
   blocks inside each host (in rounds of L blocks, member b of round q
   owning rail block qL+b), an all-reduce of each rail block over its
   rail, and the all-gather inside each host that undoes the first phase.
   A host sends 2(H-1)/H of the vector over its link, the least there is.
   reduce_scatter and all_gather take the same phases with the ranks'
   blocks: rail block j is the blocks of the members whose place on their
   host is j, and a rail's ring reduce-scatters or gathers its hosts'
   blocks (a host with no member in place j has an empty one).  broadcast and reduce run a pipelined chain
   through the hosts one after the other, the root's first: each link
   carries the vector once.  Every block is combined along one fixed path,
   so every rank holds the same bits, run after run. */

/* Sets the team to n members (map[i]: member i's group rank, NULL: i),
   with root member `root`; tme is this rank's place (-1: not in it). */
static void dist__team(dist__coll *c, int n, const int *map, int root) {
    c->tn = n; c->tmap = map; c->troot = root; c->tme = -1;
    for (int i = 0; i < n; i++)
        if ((map ? map[i] : i) == c->d->rank) c->tme = i;
}
static void dist__team_all(dist__coll *c) { dist__team(c, c->d->world, NULL, c->root); }

/* The plan of a hierarchical all_reduce (rs and ag), reduce_scatter (rs,
   per_rank) or all_gather (ag, per_rank) on buf: see above.  The data is
   cut into lanes that move independently, so that one lane's local
   phases overlap another's crossing of the links: an all_reduce's vector
   into segments of M x H chunks, each rank's block of a reduce_scatter or
   all_gather (buf: the ranks' blocks in rank order) into pieces of a
   chunk.  A ring's block is then one range (all_reduce), or the pieces of
   the ranks it stands for, each its own frame (a rail block: those in
   place j on their hosts; a rail's part: one rank's, or none).  Every
   ring step of every phase has a stage number that all ranks share: the
   local reduce-scatter's rounds first (as many stages as the host that
   needs most), then rail 0's steps, rail 1's, ..., then the local
   all-gather's.  The plan runs in order of lane + stage, then stage: a
   wavefront, in which the stages of a lane follow each other and each
   pair of ranks sends and expects its frames in the same order. */
typedef struct dist__hgeo {        /* one lane */
    uint8_t *buf;
    const uint8_t *in;             /* a reduce_scatter's input, which buf (scratch) does not copy: NULL, buf is all */
    int per_rank;
    size_t at, len;                /* all_reduce: its elements [at, at + len); per rank: elements [at, at + len) of each block */
} dist__hgeo;
typedef struct dist__hpiece { uint8_t *p; size_t bytes; } dist__hpiece;

/* The pieces of block b of a lane's ring: local (rail >= 0: round q's
   block b is rail block qL + b) or of rail j (rail < 0: j = -rail - 1,
   its part on host b).  Writes them to pc (at most nodes); returns how
   many (0: an empty block, sent as one empty frame). */
static int dist__hier_block(const dist__coll *c, const dist__hgeo *g, int q, int rail, int b, dist__hpiece *pc) {
    const dist_t *d = c->d;
    int M = d->lmax, H = d->nodes, k = 0;
    size_t es = c->es;
    if (!g->per_rank) {
        size_t lo, hi;
        if (rail >= 0) {
            int j = DIST__MIN(q * d->local_size + b, M), j1 = DIST__MIN(q * d->local_size + b + 1, M);
            lo = dist__block_off(g->len, M, j); hi = dist__block_off(g->len, M, j1);
        } else {
            int j = -rail - 1;
            size_t r0 = dist__block_off(g->len, M, j), rl = dist__block_len(g->len, M, j);
            lo = r0 + dist__block_off(rl, H, b); hi = lo + dist__block_len(rl, H, b);
        }
        pc[0].p = g->buf + (g->at + lo) * es; pc[0].bytes = (hi - lo) * es;
        return hi > lo;
    }
    for (int x = rail >= 0 ? 0 : b; x < (rail >= 0 ? H : b + 1); x++) {
        int j = rail >= 0 ? q * d->local_size + b : -rail - 1;
        if (j < M && d->node_start[x + 1] - d->node_start[x] > j) {
            int member = d->by_node[d->node_start[x] + j];
            pc[k].p = g->buf + ((size_t)member * c->count + g->at) * es; pc[k].bytes = g->len * es;
            k += g->len > 0;
        }
    }
    return k;
}

/* Appends ring step t (reduce-scatter or all-gather) of a team (map, n
   members, this rank me) over a lane's blocks (q, rail: see
   dist__hier_block), at `stage`: the send's frames and the receive's,
   each keyed.  With *stage_at (a reduce-scatter across hosts) each
   receive lands there and a fold follows: the block it combines with may
   still be taking the host's own parts, which other receives bring.
   first: this rank's own values of these blocks are still only in g->in
   (a reduce-scatter's first ring over them): step 0 sends from there, and
   each fold starts from there. */
typedef struct dist__hop { dist__op op; int key, stage, piece; } dist__hop;
static int dist__hier_step(dist__coll *c, dist__hop *h, int m, const int *map, int n, int me, const dist__hgeo *g, int q, int rail,
                           int rs, int t, uint8_t **stage_at, int first, dist__hpiece *pc, int lane, int stage) {
    int sb = rs ? dist__mod(me - t - 1, n) : dist__mod(me - t, n), rb = rs ? dist__mod(me - t - 2, n) : dist__mod(me - t - 1, n);
    int staged = rs && stage_at;
    first = first && g->in;
    for (int k = 0; k < 2; k++) {
        int np = dist__hier_block(c, g, q, rail, k ? rb : sb, pc);
        if (np == 0) { pc[0].p = dist__empty; pc[0].bytes = 0; np = 1; }
        for (int i = 0; i < np; i++)
            for (int f = 0; f < 1 + (k && staged); f++, m++) {
                h[m].op.peer = map[dist__mod(me + (k ? -1 : 1), n)];
                h[m].op.recv = k + f; h[m].op.reduce = k == 1 && rs && !staged; h[m].op.lane = lane;
                h[m].op.buf = pc[i].p; h[m].op.bytes = pc[i].bytes; h[m].op.src = h[m].op.init = NULL;
                if (k == 0 && first && t == 0 && pc[i].bytes) h[m].op.buf = (uint8_t *)(uintptr_t)(g->in + (pc[i].p - g->buf));
                h[m].key = lane + stage; h[m].stage = stage * 3 + k + f; h[m].piece = i;
                if (k && staged) {      /* the receive into the stage, then the fold from it */
                    if (f == 0) h[m].op.buf = *stage_at;
                    else {
                        h[m].op.src = *stage_at; *stage_at += pc[i].bytes;
                        if (first && pc[i].bytes) h[m].op.init = g->in + (pc[i].p - g->buf);
                    }
                }
            }
    }
    return m;
}
static int dist__hop_cmp(const void *a, const void *b) {
    const dist__hop *x = (const dist__hop *)a, *y = (const dist__hop *)b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    if (x->stage != y->stage) return (x->stage > y->stage) - (x->stage < y->stage);
    return (x->piece > y->piece) - (x->piece < y->piece);
}

/* Bytes of the stage a reduce-scatter across hosts needs: the rails this
   rank carries, whole (a bound: it receives all of them but its share);
   an all_reduce's rail block is at most count / M + 1 elements a lane. */
static size_t dist__hier_stage_bytes(const dist__coll *c, int per_rank) {
    const dist_t *d = c->d;
    size_t k = 0, rails = 0, M = (size_t)d->lmax, lanes = c->count / (dist__chunk_elems(c->es) * M * (size_t)d->nodes) + 1;
    for (int j = d->local_rank; j < d->lmax; j += d->local_size, rails++)
        for (int x = 0; x < d->nodes; x++) k += d->node_start[x + 1] - d->node_start[x] > j;
    return (per_rank ? k * c->count : rails * (c->count / M + lanes + 1)) * c->es;
}

static dist_result dist__hier_run(dist__coll *c, uint8_t *buf, const uint8_t *in, int per_rank, int rs, int ag, uint8_t *stage) {
    dist_t *d = c->d;
    int M = d->lmax, H = d->nodes, me_h = d->node_of[d->rank], L = d->local_size, lr = d->local_rank;
    int Q = (M + L - 1) / L, SL = 0, RS = (rs + ag) * (H - 1), lanes, m = 0;
    const int *local = d->by_node + d->node_start[me_h];
    size_t ce = dist__chunk_elems(c->es), seg = per_rank ? ce : ce * (size_t)M * (size_t)H, total = c->count, n_ops;
    dist__hop *h;
    dist__hpiece *pc;
    dist__op *op;
    for (int x = 0; x < H; x++) {
        int Lx = d->node_start[x + 1] - d->node_start[x];
        SL = DIST__MAX(SL, (M + Lx - 1) / Lx * (Lx - 1));
    }
    lanes = total == 0 ? 1 : (int)DIST__MIN((total + seg - 1) / seg, (size_t)INT_MAX / 8);
    if (lanes > 1 && (total + (size_t)lanes - 1) / (size_t)lanes < seg) seg = (total + (size_t)lanes - 1) / (size_t)lanes;
    /* this rank's ops per lane: per step a send and a receive (and a fold)
       of up to H pieces each */
    n_ops = 3 * (size_t)H * (size_t)((rs + ag) * Q * (L - 1) + ((M - 1 - lr) / L + 1) * RS);
    if ((h = (dist__hop *)dist__grow_array(c, (void **)&d->hops, &d->hops_cap, (size_t)lanes * n_ops + 1, sizeof *h)) == NULL ||
        (pc = (dist__hpiece *)dist__grow_array(c, (void **)&d->pieces, &d->pieces_cap, (size_t)H + 1, sizeof *pc)) == NULL) return c->res;
    for (int l = 0; l < lanes; l++) {
        dist__hgeo g;
        g.buf = buf; g.in = in; g.per_rank = per_rank;
        g.at = (size_t)l * seg; g.len = g.at >= total ? 0 : DIST__MIN(seg, total - g.at);
        for (int ph = 0; ph < 2; ph++) {            /* the local reduce-scatter, then (below) the all-gather */
            if (!(ph == 0 ? rs : ag) || L < 2) continue;
            for (int q = 0; q < Q; q++)
                for (int t = 0; t < L - 1; t++)
                    m = dist__hier_step(c, h, m, local, L, lr, &g, q, 0, ph == 0, t, in && ph == 0 ? &stage : NULL, 1, pc, l,
                                        ph == 0 ? q * (L - 1) + t : SL + M * RS + q * (L - 1) + t);
        }
        for (int j = lr; j < M && H > 1; j += L) {  /* the rails this rank carries */
            for (int x = 0; x < H; x++) {
                int Lx = d->node_start[x + 1] - d->node_start[x];
                d->rail[x] = d->by_node[d->node_start[x] + j % Lx];
            }
            for (int t = 0; t < RS; t++) {
                int is_rs = rs && t < H - 1;
                m = dist__hier_step(c, h, m, d->rail, H, me_h, &g, 0, -j - 1, is_rs, is_rs || !rs ? t : t - (H - 1), &stage, L < 2, pc, l,
                                    SL + j * RS + t);
            }
        }
    }
    qsort(h, (size_t)m, sizeof *h, dist__hop_cmp);
    if ((op = dist__plan(c, (size_t)m + 1)) == NULL) return c->res;
    for (int i = 0; i < m; i++) op[i] = h[i].op;
    return dist__run_plan(c, op, m, lanes, 1);
}

static dist_result dist__hier_all_reduce(dist__coll *c, uint8_t *buf) {
    uint8_t *stage = dist__scratch(c, dist__hier_stage_bytes(c, 0) + 1);
    return stage ? dist__hier_run(c, buf, NULL, 0, 1, 1, stage) : c->res;
}

/* reduce_scatter: in (n blocks) to out (this rank's block), in scratch
   laid out as the input (what is folded there starts from the input,
   piece by piece: no copy of it all first) and the stage after it. */
static dist_result dist__hier_reduce_scatter(dist__coll *c, const uint8_t *in, uint8_t *out) {
    dist_t *d = c->d;
    size_t bytes = c->count * c->es, stage = dist__hier_stage_bytes(c, 1) + (size_t)d->world * bytes;
    uint8_t *work = dist__scratch(c, bytes * (size_t)d->world + stage + 1);
    if (!work) return c->res;
    if (dist__hier_run(c, work, in, 1, 1, 0, work + bytes * (size_t)d->world) == DIST_OK && bytes)
        memcpy(out, work + (size_t)d->rank * bytes, bytes);
    return c->res;
}

/* all_gather: in (this rank's block) to out (n blocks, rank order), in
   place. */
static dist_result dist__hier_all_gather(dist__coll *c, const uint8_t *in, uint8_t *out) {
    size_t bytes = c->count * c->es;
    if (bytes && out + (size_t)c->d->rank * bytes != in) memmove(out + (size_t)c->d->rank * bytes, in, bytes);
    return dist__hier_run(c, out, NULL, 1, 0, 1, NULL);
}

/* broadcast (reduce: towards the root) along one pipelined chain through
   the hosts: the root, the other members on its host, then each other
   host's members, host by host. */
static dist_result dist__hier_chain(dist__coll *c, uint8_t *buf, int reduce) {
    dist_t *d = c->d;
    int k = 0, hr = d->node_of[c->root];
    d->order[k++] = c->root;
    for (int x = 0; x < d->nodes; x++) {
        int h = (hr + x) % d->nodes;
        for (int i = d->node_start[h]; i < d->node_start[h + 1]; i++)
            if (d->by_node[i] != c->root) d->order[k++] = d->by_node[i];
    }
    dist__team(c, d->world, d->order, 0);
    reduce ? dist__chain_reduce(c, buf) : dist__chain_broadcast(c, buf);
    dist__team_all(c);
    return c->res;
}

/* [SECTION] collectives: API, async queue, groups
   ---------------------------------------------------------------------------
   Blocking calls run on the caller's thread.  An _async call puts a job on
   the communicator's queue; one worker thread per communicator (started at
   the first async call) runs jobs in issue order, and a blocking call
   issued while jobs are queued waits its turn behind them, so a
   communicator's collectives always run in the order they were called.
   Jobs come from a per-communicator free list. */

struct dist__job {
    dist__job *next;
    int kind;
    const void *send;
    void *recv;
    size_t count;
    dist_dtype dtype;
    dist_op op;
    int root;
    dist_req_t *req;              /* completed when the job is done */
    int64_t t_enq;                /* when it was queued (set only then) */
    int done;                     /* a blocking caller's job, queued behind async ones */
    dist_result res;
    char invalid[200];            /* a bad call: fails on every rank, in its turn */
    char err[DIST__ERRLEN];
};


/* [SECTION] collectives in shared memory
   ---------------------------------------------------------------------------
   When every rank of the world is on this host, a large all_reduce works in
   the ranks' segments instead of passing messages.  In each step (at most
   DIST_SHM_COLL_BYTES of the vector) every rank
     1. copies its part of the step into its input buffer and says so (cin),
     2. when all inputs are there, combines its slice of the step over the
        ranks' input buffers and copies it to its output buffer (cout),
     3. when all outputs are there, copies every slice into the caller's
        buffer, and says it is done reading (cdone).
   A rank combines its own slice in the caller's buffer, so of each step it
   copies in and out only the others' slices: per byte one copy in, one
   combination (by one rank, so every rank gets the same bits) and one copy
   out, with no kernel copies and no per-chunk messages.
   Two buffers of each kind let a rank start step s+1 while slower ranks
   still read step s.  Before the first step, every rank sends every other
   an empty frame carrying its descriptor: ranks that called something
   else fail as in every collective.  Waiting spins, then sleeps in the
   engine (peers ring the doorbell when they move on), and keeps watching
   the connections, so a rank that dies fails the others at once.
   Broadcast and all_gather larger than the slots (DIST_SHM_FAST_BYTES)
   read each block straight from its owner's buffer where ranks may read
   each other's memory (dist__shm_direct, below: one copy, the root helping
   its readers); elsewhere (macOS, Windows, a locked-down Linux) they pass
   through the same input buffers as all_reduce, in steps of a quarter of
   a rank's block (DIST_SHM_STEP_MIN to a buffer): the root, or every
   rank, copies its piece in and the others copy it out, two steps in
   flight. */

/* What a rank waits for in shared memory: `behind` returns a member that
   has not got there yet, or -1 (it may fail c instead: a descriptor that
   differs); `what` says it in a timeout's sentence. */
typedef struct dist__shm_until {
    int (*behind)(dist__coll *c, const struct dist__shm_until *u);
    const char *what;
    int which;                      /* a counter: 0 cin, 1 cout, 2 cdone, 3 fast_done, 4 xdone */
    int slow;                       /* a collective across hosts (dist__fast_hier): give the CPU away at
                                       every look, as a wait for the network does (dist__wait_for): the
                                       rank that crosses may need this core (ranks of several hosts on
                                       one machine: 8-14 us against 30-65 for an 8-byte all_reduce at
                                       2 x 2 on 2 cores), and a crossing costs far more than the call */
    int only;                       /* the one member to look at (-1: every other) */
    uint64_t target;
} dist__shm_until;

/* The i-th member a wait looks at (u->only, or the team's members: the
   world's, or a host's in dist__fast_hier), -1 past the last. */
static int dist__shm_member(const dist__coll *c, const dist__shm_until *u, int i) {
    if (u->only >= 0) return i == 0 ? u->only : -1;
    return i < c->tn ? (c->tmap ? c->tmap[i] : i) : -1;
}

/* The first member whose counter `which` is below `target`. */
static int dist__shm_counter_behind(dist__coll *c, const dist__shm_until *u) {
    dist__engine *e = c->e;
    for (int i = 0, g; (g = dist__shm_member(c, u, i)) >= 0; i++) {
        dist__shm_hdr *h;
        if (g == c->d->rank) continue;
        h = e->peers[g].shm->peer_hdr;
        if (DIST__LOAD_ACQ(u->which == 0 ? &h->cin.v : u->which == 1 ? &h->cout.v : u->which == 2 ? &h->cdone.v :
                           u->which == 3 ? &h->fast_done.v : &h->xdone.v) < u->target)
            return g;
    }
    return -1;
}

/* Waits until u->behind finds no member behind. */
static dist_result dist__shm_wait_until(dist__coll *c, const dist__shm_until *u) {
    dist__engine *e = c->e;
    /* The others are busy with this very collective: worth a longer spin
       than a receive's (a sleep and a wake-up cost tens of microseconds). */
    int64_t start = 0, yielded = 0, spin = e->spin_ns > 0 ? DIST__MAX(e->spin_ns, (int64_t)DIST_SHM_SPIN_US * 1000) : 0;
    unsigned spins = 0;
    int g;
    while ((g = u->behind(c, u)) >= 0) {
        int64_t now;
        if (!c->now_told) dist__coll_tell_now(c);  /* a small collective tells only when it waits */
        /* the clock only every 64th round (a read costs as much as a
           look at the others), the engine every 256th */
        if (++spins & 63) {
            /* yield the CPU often only when ranks outnumber the cores (else
               a system call every 16 rounds for nothing) */
            if ((e->shm.yield_mask != 1u || (spins & 1u)) && !u->slow) DIST__CPU_RELAX(); else dist__yield();
            continue;
        }
        now = dist__now_ns();
        if (!start) start = yielded = now;
        if (now - yielded > 20000) {
            /* and every 20 us whatever the count: a thread this rank's
               doorbell or socket write woke may have been put on this CPU
               (a "sync" wake-up expects the waker to sleep), and would
               wait for the spin's time slice, milliseconds, before it ran */
            dist__yield();
            yielded = now;
        }
        if ((spins & 255) && now - start < spin) continue;
        dist__mutex_lock(&e->lock);
        if (dist__coll_aborted(c->d, c->seq)) dist__coll_fail_noted(c);
        else if ((g = u->behind(c, u)) < 0) {
            /* It came meanwhile.  A member may write its part, leave and
               die (or abort) before this look: what it wrote counts, as
               bytes sent before a close do over TCP. */
            dist__mutex_unlock(&e->lock);
            continue;
        }
        /* the death of the member waited for fails the wait at once,
           another's after a grace ("Deaths" above) */
        else if (!dist__coll_member_g_lost(c, g) && !dist__coll_lost_late(c, now) &&
                 (c->grace_ns || now >= dist__coll_deadline(c) || dist__coll_given_up(c)))
            dist__coll_overdue(c, g, u->what, now);     /* after a grace period, fails naming who stopped */
        if (c->res == DIST_OK && now - start < spin) {
            /* a look at the connections (a death, an abort), unless the
               progress thread has them: then it looks, and we spin on */
            if (!e->driving) dist__drive_once(e, 0, 0);
        } else if (c->res == DIST_OK) {
            /* Sleep: peers that move on ring the doorbell when they see
               coll_sleeping; what they did before it was set is seen by
               the look after it. */
            DIST__STORE_REL(&e->shm.hdr->coll_sleeping, 1u);
            if (!e->shm.light_wake || !dist__heavy_fence()) DIST__FENCE();
            if (u->behind(c, u) >= 0) {
                if (e->driving) dist__wait_step(e, 1);      /* the progress thread polls; it wakes us */
                else dist__drive_once(e, 10, 0);
            }
            DIST__STORE_REL(&e->shm.hdr->coll_sleeping, 0u);
        }
        dist__mutex_unlock(&e->lock);
        if (c->res != DIST_OK) return c->res;
    }
    if (c->grace_ns && c->res == DIST_OK) {   /* it came after the others were told this rank gave up */
        dist__mutex_lock(&e->lock);
        dist__coll_blame(c, 0);
        dist__mutex_unlock(&e->lock);
    }
    return c->res;
}

/* Waits until every other member's counter (0 cin, 1 cout, 2 cdone) has
   reached `target` (only: that member's alone; -1 every other). */
static dist_result dist__shm_wait_of(dist__coll *c, int which, uint64_t target, int only) {
    static const char *const what[] = { "put its part in place", "combine its slice", "finish reading", "", "finish reading this rank's block" };
    dist__shm_until u;
    u.behind = dist__shm_counter_behind; u.what = what[which]; u.slow = 0; u.which = which; u.only = only; u.target = target;
    return dist__shm_wait_until(c, &u);
}
static dist_result dist__shm_wait(dist__coll *c, int which, uint64_t target) { return dist__shm_wait_of(c, which, target, -1); }

/* Rings the members asleep in this collective (the team's).  Our store must be seen
   before we look at their flags (they set the flag, then look again): a
   fence, unless a sleeper fences for us (light_wake: it makes our thread
   pass a barrier before it looks).  The fence cost a 2-rank broadcast loop
   of 8 bytes half its time: it waits for the slot's cache line. */
static void dist__shm_wake_others(dist__coll *c) {
    dist__engine *e = c->e;
    if (e->shm.light_wake) DIST__COMPILER_FENCE(); else DIST__FENCE();
    for (int i = 0; i < c->tn; i++) {
        int g = c->tmap ? c->tmap[i] : i;
        if (g != c->d->rank) dist__shm_bell(&e->peers[g], 1);
    }
}
static void dist__shm_publish(dist__coll *c, dist__shm_counter *k, uint64_t v) {
    DIST__STORE_REL(&k->v, v);
    dist__shm_wake_others(c);
}

/* Before the first step of a collective in the segments: an empty frame
   carrying the descriptor to and from every member, so that a rank that
   called something else fails as in every collective. */
static dist_result dist__shm_hello(dist__coll *c) {
    dist_t *d = c->d;
    int n = d->world, me = d->rank;
    dist_req_t **q;
    if (!dist__grow_array(c, (void **)&d->slots, &d->slots_cap, 2 * (size_t)n, sizeof(dist_req_t *))) return c->res;
    q = d->slots;
    for (int g = 0; g < n; g++) {
        q[2 * g] = q[2 * g + 1] = NULL;
        if (g == me) continue;
        if ((q[2 * g] = dist__coll_recv(c, g, dist__empty, 0)) == NULL) return c->res;
        if ((q[2 * g + 1] = dist__coll_send(c, g, dist__empty, 0)) == NULL) return c->res;
    }
    for (int i = 0; i < 2 * n; i++)
        if (q[i] && dist__coll_wait(c, q[i]) != DIST_OK) return c->res;
    return DIST_OK;
}

static dist_result dist__shm_all_reduce(dist__coll *c, uint8_t *buf) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int n = d->world, me = d->rank;
    size_t es = c->es, step_elems = DIST__MIN((size_t)DIST_SHM_COLL_BYTES, (size_t)n * DIST_SHM_SLICE_BYTES) / es;
    dist__reduce_fn combine = dist__reduce_table[c->dtype][c->op];
    if (dist__shm_hello(c) != DIST_OK) return c->res;
    for (size_t off = 0; off < c->count; off += step_elems) {
        size_t m = DIST__MIN(step_elems, c->count - off);
        uint64_t step = ++e->shm.coll_step;
        size_t b = (size_t)(step & 1), so = dist__block_off(m, n, me), sl = dist__block_len(m, n, me);
        uint8_t *in = e->shm.coll_area + b * DIST_SHM_COLL_BYTES, *acc = buf + (off + so) * es;
        /* 1. the others' slices of our part in (ours stays in buf); our
              buffers b were last read in step - 2 */
        if (step > 2 && dist__shm_wait(c, 2, step - 2) != DIST_OK) break;
        if (so) memcpy(in, buf + off * es, so * es);
        if (so + sl < m) memcpy(in + (so + sl) * es, buf + (off + so + sl) * es, (m - so - sl) * es);
        dist__shm_publish(c, &e->shm.hdr->cin, step);
        /* 2. combine our slice, in buf, with every other rank's, in rank
              order; then put the result where the others can read it */
        if (dist__shm_wait(c, 0, step) != DIST_OK) break;
        for (int g = 0; g < n; g++)
            if (g != me) combine(acc, e->peers[g].shm->coll_area + b * DIST_SHM_COLL_BYTES + so * es, sl, g < me);
        memcpy(e->shm.coll_area + (2 + b) * DIST_SHM_COLL_BYTES + so * es, acc, sl * es);
        dist__shm_publish(c, &e->shm.hdr->cout, step);
        /* 3. the others' slices out */
        if (dist__shm_wait(c, 1, step) != DIST_OK) break;
        for (int g = 0; g < n; g++) {
            size_t go = dist__block_off(m, n, g), gl = dist__block_len(m, n, g);
            if (g != me) memcpy(buf + (off + go) * es, e->peers[g].shm->coll_area + (2 + b) * DIST_SHM_COLL_BYTES + go * es, gl * es);
        }
        dist__shm_publish(c, &e->shm.hdr->cdone, step);
    }
    /* Out of step with the others now: the next collectives pass messages
       (and fail at once on ranks that still want shared memory). */
    if (c->res != DIST_OK) d->shm_off = 1;
    return c->res;
}

/* ---- broadcast and all_gather straight from the others' memory ----
   Where every rank may read every other's memory (w->read_all, agreed at
   init), a large broadcast or all_gather of the world copies each block
   once, from the caller's buffer on its owner into the caller's buffer on
   the reader, as the messages do but without them: the owner tells what
   collective it is in (now) and where its block is (xpose: address, then
   the collective's number); each reader checks the descriptor there, reads
   the block in pieces (the next owner's first, so that the readers of one
   owner spread out), and says it is done (xdone).  An owner returns once
   every reader is done: its buffer is the caller's again.  A descriptor
   that differs fails the call as a frame would; a death, the timeout and
   an abort end the waits as in the other collectives. */

/* The first owner (u->only, or any other member) whose block of
   collective u->target is not exposed yet; -1 when all are, or when one
   is in it with another descriptor (c failed). */
static int dist__fast_mismatch(dist__coll *c, int g, const dist__shm_desc *x);
static int dist__xpose_behind(dist__coll *c, const dist__shm_until *u) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    for (int g = u->only >= 0 ? u->only : 0; g < (u->only >= 0 ? u->only + 1 : d->world); g++) {
        const dist__shm_hdr *h;
        dist__shm_desc x;
        if (g == d->rank) continue;
        h = e->peers[g].shm->peer_hdr;
        if (DIST__LOAD_ACQ(&h->now.seq) == u->target) {
            x = h->now.desc;
            DIST__FENCE();
            if (DIST__LOAD_ACQ(&h->now.seq) == u->target && dist__fast_mismatch(c, g, &x)) return -1;
        }
        if (DIST__LOAD_ACQ(&h->xpose.seq) != u->target) return g;
    }
    return -1;
}

/* Copies `bytes` of member g's exposed block, from offset `off`, to dst. */
static dist_result dist__xpose_read(dist__coll *c, int g, size_t off, uint8_t *dst, size_t bytes) {
    dist__shm_link *s = c->e->peers[g].shm;
    uint64_t src = DIST__LOAD_RELAXED(&s->peer_hdr->xpose.addr) + off;
    dist__ssize n = bytes ? dist__peer_memory_read(s->pid, dst, src, bytes) : 0;
    if (n != (dist__ssize)bytes) {
        int gone = n < 0 && dist__err_no_process(dist__errno());
        dist__coll_failf(c, DIST_ERR_PEER_LOST, "reading %zu bytes of rank %d's block from its memory failed (%s)", bytes, g,
                         gone ? "its process is gone" : n < 0 ? dist__err_text(dist__errno()) : "short read");
    }
    return c->res;
}

/* The root helps.  A broadcast's root only waits while its readers copy
   its buffer, one kernel copy each, at about half of memcpy's speed (the
   kernel pins each page).  So, from 2 pieces up, each reader offers its
   buffer as pieces to claim (xhelp in its header: a counter of claimed
   pieces and one of copied pieces, each tagged with the collective's
   number), and the root claims pieces too and writes them into the
   reader (process_vm_writev) while the reader reads the others: two
   copies at once, as the messages' cooperative copy.  A reader returns
   only once every claimed piece is copied; the claim is a compare-and-swap
   on (tag, index), so a piece of one broadcast is never taken for the
   next.  DIST_SHM_COOP_BYTES 0 turns it off, as it does the messages'. */
#define DIST__XHELP_PIECE ((size_t)256 * 1024)
#define DIST__XHELP_MASK  (((uint64_t)1 << 24) - 1)
static uint64_t dist__xhelp_tag(const dist__coll *c) { return (c->seq & (((uint64_t)1 << 40) - 1)) << 24; }

/* The next piece of `k` to copy under counter *claim with tag `tag`, or -1. */
static int64_t dist__xhelp_claim(uint64_t *claim, uint64_t tag, uint64_t k) {
    uint64_t v = DIST__LOAD_ACQ(claim);
    while ((v & ~DIST__XHELP_MASK) == tag && (v & DIST__XHELP_MASK) < k)
        if (DIST__CAS(claim, &v, v + 1)) return (int64_t)(v & DIST__XHELP_MASK);
    return -1;
}

/* Where piece i of a broadcast of `bytes` lands, for the reader that starts
   at piece `rot` (readers of one root start at different pieces). */
static size_t dist__xhelp_off(uint64_t i, uint64_t k, uint64_t rot) { return (size_t)((i + rot) % k) * DIST__XHELP_PIECE; }
static uint64_t dist__xhelp_rot(const dist__coll *c, int reader, uint64_t k) {
    int n = c->d->world;
    return (uint64_t)dist__mod(reader - c->root - 1, n) * k / (uint64_t)(n - 1);
}

/* Root: claims and writes pieces of every reader that offers them; 1 if
   it copied any.  A reader it cannot write to (gone) is left alone. */
static int dist__xhelp_give(dist__coll *c, const uint8_t *buf, uint64_t k) {
    dist__engine *e = c->e;
    uint64_t tag = dist__xhelp_tag(c);
    size_t bytes = c->count * c->es;
    int moved = 0;
    for (int g = 0; g < c->d->world; g++) {
        dist__shm_hdr *h;
        int64_t i;
        if (g == c->d->rank) continue;
        h = e->peers[g].shm->peer_hdr;
        while ((i = dist__xhelp_claim(&h->xhelp.claim, tag, k)) >= 0) {
            size_t off = dist__xhelp_off((uint64_t)i, k, dist__xhelp_rot(c, g, k)), len = DIST__MIN(DIST__XHELP_PIECE, bytes - off);
            /* (the claim holds the reader in this broadcast: dst is this one's) */
            uint64_t dst = DIST__LOAD_RELAXED(&h->xhelp.dst);
            dist__ssize w = dist__peer_memory_write(e->peers[g].shm->pid, dst + off, buf + off, len);
            if (w != (dist__ssize)len) DIST__STORE_REL(&h->xhelp.bad, tag);     /* (the reader fails) */
            DIST__FETCH_ADD(&h->xhelp.done, (uint64_t)1);
            moved = 1;
            if (w != (dist__ssize)len) break;
        }
    }
    return moved;
}

/* The first reader of this collective not done reading, or -1. */
static int dist__xpose_readers_behind(dist__coll *c) {
    dist__shm_until u;
    u.behind = dist__shm_counter_behind; u.what = ""; u.slow = 0; u.which = 4; u.only = -1; u.target = c->seq;
    return dist__shm_counter_behind(c, &u);
}

/* Root, waiting: the first reader neither done nor offering a piece; -1
   when every one is done or one offers a piece. */
static int dist__xhelp_waiting(dist__coll *c, const dist__shm_until *u) {
    dist__engine *e = c->e;
    uint64_t tag = dist__xhelp_tag(c), k = u->target;
    int first = -1;
    for (int g = 0; g < c->d->world; g++) {
        const dist__shm_hdr *h;
        uint64_t v;
        if (g == c->d->rank) continue;
        h = e->peers[g].shm->peer_hdr;
        if (DIST__LOAD_ACQ(&h->xdone.v) >= c->seq) continue;
        v = DIST__LOAD_ACQ(&h->xhelp.claim);
        if ((v & ~DIST__XHELP_MASK) == tag && (v & DIST__XHELP_MASK) < k) return -1;
        if (first < 0) first = g;
    }
    return first;
}

/* Reader: the root has copied every piece it claimed (u->target: the tag
   and the number claimed)?  Else the root. */
static int dist__xhelp_pending(dist__coll *c, const dist__shm_until *u) {
    return DIST__LOAD_ACQ(&c->e->shm.hdr->xhelp.done) < u->target ? c->root : -1;
}

/* Reader: its part of a broadcast of k pieces that the root helps with. */
static dist_result dist__xhelp_take(dist__coll *c, uint8_t *out, uint64_t k) {
    dist__engine *e = c->e;
    dist__shm_hdr *me = e->shm.hdr;
    uint64_t tag = dist__xhelp_tag(c), rot = dist__xhelp_rot(c, c->d->rank, k), claimed;
    size_t bytes = c->count * c->es;
    int64_t i, give_up;
    dist__shm_until u;
    DIST__STORE_RELAXED(&me->xhelp.dst, (uint64_t)(uintptr_t)out);
    DIST__STORE_RELAXED(&me->xhelp.done, tag);
    DIST__STORE_REL(&me->xhelp.claim, tag);
    dist__shm_bell(&e->peers[c->root], 1);
    while (c->res == DIST_OK && (i = dist__xhelp_claim(&me->xhelp.claim, tag, k)) >= 0) {
        size_t off = dist__xhelp_off((uint64_t)i, k, rot);
        dist__xpose_read(c, c->root, off, out + off, DIST__MIN(DIST__XHELP_PIECE, bytes - off));
        DIST__FETCH_ADD(&me->xhelp.done, (uint64_t)1);
    }
    /* no more claims; then wait for the root's pieces in flight */
    claimed = DIST__LOAD_ACQ(&me->xhelp.claim);
    while ((claimed & DIST__XHELP_MASK) < k && !DIST__CAS(&me->xhelp.claim, &claimed, tag | k)) {}
    claimed = tag | DIST__MIN(claimed & DIST__XHELP_MASK, k);
    if (c->res == DIST_OK) {
        u.behind = dist__xhelp_pending; u.what = "finish copying its pieces"; u.slow = 0; u.which = 0; u.only = c->root; u.target = claimed;
        dist__shm_wait_until(c, &u);
    }
    /* failed: the root still must not write into the caller's buffer once
       it is the caller's again (a live root finishes a piece in well under
       a second) */
    give_up = dist__now_ns() + 1000000000;
    while (DIST__LOAD_ACQ(&me->xhelp.done) < claimed && dist__now_ns() < give_up) {
        int lost;
        dist__mutex_lock(&e->lock);
        lost = e->peers[c->root].state == DIST__PEER_FAILED;
        dist__mutex_unlock(&e->lock);
        if (lost) break;
        dist__yield();
    }
    if (c->res == DIST_OK && (DIST__LOAD_ACQ(&me->xhelp.done) < claimed || DIST__LOAD_ACQ(&me->xhelp.bad) == tag))
        dist__coll_failf(c, DIST_ERR_PEER_LOST, "rank %d could not write its pieces of the broadcast into this rank's buffer", c->root);
    return c->res;
}

/* After a failure: the live readers of our block stop reading it (they
   say so, done or not) before the caller may reuse it, for at most half a
   second (a reader that stopped by a signal is not waited for longer: it
   could then read the caller's next data into its own failed call, no
   more). */
static void dist__xpose_drain(dist__coll *c) {
    dist__engine *e = c->e;
    int64_t until = dist__now_ns() + 500000000;
    for (;;) {
        int g = 0;
        dist__mutex_lock(&e->lock);
        for (; g < c->d->world; g++)
            if (g != c->d->rank && e->peers[g].state != DIST__PEER_FAILED && DIST__LOAD_ACQ(&e->peers[g].shm->peer_hdr->xdone.v) < c->seq)
                break;
        if (g < c->d->world && dist__now_ns() < until) {
            if (e->driving) dist__wait_step(e, 1);
            else dist__drive_once(e, 1, 0);
        }
        dist__mutex_unlock(&e->lock);
        if (g >= c->d->world || dist__now_ns() >= until) return;
    }
}

/* Broadcast (out: the root's buffer; in: NULL) or all_gather (in: this
   rank's block, out: every rank's) from the owners' memory. */
static dist_result dist__shm_direct(dist__coll *c, const uint8_t *in, uint8_t *out) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int n = d->world, me = d->rank, bcast = c->kind == DIST__COLL_BROADCAST;
    size_t bytes = c->count * c->es, piece = (size_t)4 << 20;   /* (a look at c->res between pieces) */
    int parts = (int)DIST__MAX((size_t)1, DIST__MIN((size_t)(n - 1), bytes >> 16));
    uint64_t help = bcast && dist__coop_min > 0 && bytes >= 2 * DIST__XHELP_PIECE ? (bytes + DIST__XHELP_PIECE - 1) / DIST__XHELP_PIECE : 0;
    dist__shm_until u;
    dist__coll_tell_now(c);
    if (!bcast && bytes && in != out + (size_t)me * bytes) memmove(out + (size_t)me * bytes, in, bytes);
    if (!bcast || me == c->root) {
        DIST__STORE_RELAXED(&e->shm.hdr->xpose.addr, (uint64_t)(uintptr_t)(bcast ? out : out + (size_t)me * bytes));
        DIST__STORE_REL(&e->shm.hdr->xpose.seq, c->seq);
        dist__shm_wake_others(c);
    }
    if (!bcast || me != c->root) {
        u.behind = dist__xpose_behind; u.slow = 0; u.which = 0; u.target = c->seq;
        u.what = bcast ? "show where its buffer is" : "show where its block is";
        for (int k = 1; k < n && c->res == DIST_OK; k++) {
            int g = bcast ? c->root : (me + k) % n;
            uint8_t *dst = bcast ? out : out + (size_t)g * bytes;
            u.only = g;
            if (dist__shm_wait_until(c, &u) != DIST_OK) break;
            if (help) { dist__xhelp_take(c, out, help); break; }
            /* the readers of a block start at different parts of it, of
               64 KiB at least (pages that readers pin at once cost the
               kernel more) */
            for (int q = 0, v = dist__mod(me - g - 1, n); q < parts && c->res == DIST_OK; q++) {
                int part = (v + q) % parts;
                size_t lo = dist__block_off(bytes >> 12, parts, part) << 12;
                size_t hi = part == parts - 1 ? bytes : dist__block_off(bytes >> 12, parts, part + 1) << 12;
                for (size_t off = lo; off < hi && c->res == DIST_OK; off += piece)
                    dist__xpose_read(c, g, off, dst + off, DIST__MIN(piece, hi - off));
            }
            if (bcast) break;
        }
        if (c->res != DIST_OK) {
            DIST__STORE_RELAXED(&e->shm.hdr->xpose.gave_up_res, (int32_t)c->res);
            DIST__STORE_REL(&e->shm.hdr->xpose.gave_up, c->seq);
        }
        dist__shm_publish(c, &e->shm.hdr->xdone, c->seq);     /* (done or given up: it reads no more) */
    }
    /* the readers of our block are done with it */
    if (!bcast || me == c->root) {
        /* help the readers that offer pieces until every one is done */
        u.behind = dist__xhelp_waiting; u.what = "finish reading this rank's buffer"; u.slow = 0; u.which = 0; u.only = -1; u.target = help;
        while (help && c->res == DIST_OK && dist__xpose_readers_behind(c) >= 0)
            if (!dist__xhelp_give(c, out, help)) dist__shm_wait_until(c, &u);
        if (c->res == DIST_OK) dist__shm_wait_of(c, 4, c->seq, -1);
        for (int g = 0; g < n && c->res == DIST_OK; g++) {     /* a reader that gave up fails this call too */
            const dist__shm_hdr *h = g != me ? e->peers[g].shm->peer_hdr : NULL;
            dist_result why;
            if (!h || DIST__LOAD_ACQ(&h->xpose.gave_up) != c->seq) continue;
            why = (dist_result)DIST__LOAD_RELAXED(&h->xpose.gave_up_res);
            /* a reader that lost a member may have seen the death first:
               look (for up to 100 ms) for it here, to name it */
            for (int64_t until = dist__now_ns() + 100000000; why == DIST_ERR_PEER_LOST && c->res == DIST_OK && dist__now_ns() < until;) {
                dist__mutex_lock(&e->lock);
                if (!dist__coll_member_g_lost(c, dist__coll_dead_member(c))) {
                    if (e->driving) dist__wait_step(e, 1);
                    else dist__drive_once(e, 1, 0);
                }
                dist__mutex_unlock(&e->lock);
            }
            if (c->res == DIST_OK)
                dist__coll_failf(c, why, "rank %d gave up reading this rank's %s (%s)", g, bcast ? "buffer" : "block", dist_result_name(why));
        }
        if (c->res != DIST_OK) dist__xpose_drain(c);
    }
    /* (what it left is keyed by the collective's number: the next one in
       the segments is not out of step after a failure) */
    return c->res;
}

/* Elements of one step of a broadcast or all_gather in the segments, for
   a rank's block of `count`: a quarter of it (so that the copies in and
   out overlap from the second step on), at least DIST_SHM_STEP_MIN and at
   most a buffer, in whole cache lines where the element allows. */
static size_t dist__shm_step_elems(size_t count, size_t es) {
    size_t want = (count * es / 4 + 63) & ~(size_t)63;
    want = DIST__MIN((size_t)DIST_SHM_COLL_BYTES, DIST__MAX((size_t)DIST_SHM_STEP_MIN, want));
    return DIST__MAX((size_t)1, want / es);
}

/* Broadcast in the segments: in each step the root copies the next piece
   into its input buffer and says so (cin); the others copy it out and say
   they are done reading (cdone).  Two buffers, so the root fills one
   while the others empty the other; the root's own buffer is never read
   by another process, so it returns as soon as its last piece is in. */
static dist_result dist__shm_broadcast(dist__coll *c, uint8_t *buf) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int root = c->root, me = d->rank;
    size_t es = c->es, step_elems = dist__shm_step_elems(c->count, es);
    if (dist__shm_hello(c) != DIST_OK) return c->res;
    for (size_t off = 0; off < c->count; off += step_elems) {
        size_t m = DIST__MIN(step_elems, c->count - off);
        uint64_t step = ++e->shm.coll_step;
        size_t b = (size_t)(step & 1);
        if (me == root) {
            /* our buffer b was last read in step - 2 */
            if (step > 2 && dist__shm_wait(c, 2, step - 2) != DIST_OK) break;
            memcpy(e->shm.coll_area + b * DIST_SHM_COLL_BYTES, buf + off * es, m * es);
            DIST__STORE_REL(&e->shm.hdr->cdone.v, step);       /* (it reads nothing) */
            dist__shm_publish(c, &e->shm.hdr->cin, step);
        } else {
            if (dist__shm_wait_of(c, 0, step, root) != DIST_OK) break;
            memcpy(buf + off * es, e->peers[root].shm->coll_area + b * DIST_SHM_COLL_BYTES, m * es);
            dist__shm_publish(c, &e->shm.hdr->cdone, step);
        }
    }
    if (c->res != DIST_OK) d->shm_off = 1;
    return c->res;
}

/* All-gather in the segments: in each step every rank copies the next
   piece of its block into its input buffer (cin), then the others' pieces
   out of theirs into `out` (cdone); its own piece goes from `in` to `out`
   while still in cache. */
static dist_result dist__shm_all_gather(dist__coll *c, const uint8_t *in, uint8_t *out) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int n = d->world, me = d->rank;
    size_t es = c->es, step_elems = dist__shm_step_elems(c->count, es);
    uint8_t *mine = out + (size_t)me * c->count * es;
    if (dist__shm_hello(c) != DIST_OK) return c->res;
    if (in != mine && in < out + (size_t)n * c->count * es && in + c->count * es > out) {
        memmove(mine, in, c->count * es);      /* the input lies where others' blocks land */
        in = mine;
    }
    for (size_t off = 0; off < c->count; off += step_elems) {
        size_t m = DIST__MIN(step_elems, c->count - off);
        uint64_t step = ++e->shm.coll_step;
        size_t b = (size_t)(step & 1);
        uint8_t *stage = e->shm.coll_area + b * DIST_SHM_COLL_BYTES;
        if (step > 2 && dist__shm_wait(c, 2, step - 2) != DIST_OK) break;
        memcpy(stage, in + off * es, m * es);
        dist__shm_publish(c, &e->shm.hdr->cin, step);
        if (mine != in) memcpy(mine + off * es, stage, m * es);
        if (dist__shm_wait(c, 0, step) != DIST_OK) break;
        for (int g = 0; g < n; g++)
            if (g != me) memcpy(out + ((size_t)g * c->count + off) * es, e->peers[g].shm->coll_area + b * DIST_SHM_COLL_BYTES, m * es);
        dist__shm_publish(c, &e->shm.hdr->cdone, step);
    }
    if (c->res != DIST_OK) d->shm_off = 1;
    return c->res;
}

/* ---- small collectives through slots ----
   Broadcast, all_reduce and all_gather of at most DIST_SHM_FAST_BYTES a
   rank, and barrier, on the world when every rank shares this host: no
   messages, no requests.  Collective number s uses slot s mod
   DIST__FAST_SLOTS (64) of each rank that writes (every rank; a
   broadcast's root only).  A writer
     1. waits until every other rank has finished reading what it last
        wrote in that slot (their fast_done): in practice only a root that
        runs DIST__FAST_SLOTS broadcasts ahead ever waits, which bounds how
        far it runs;
     2. writes its part and the call's descriptor, then the sequence number.
   A reader waits for the sequence number in each slot it needs, checks the
   descriptor there (a rank that called something else fails the call with
   the sentence a frame would give), and takes the data: all_reduce combines
   every rank's part in rank order, so every rank gets the same bits.  Then
   each rank publishes fast_done.  Waits spin, then sleep in the engine like
   the large all_reduce's, watching the connections and the timeout. */
static dist__fast_slot *dist__fast_slot_of(uint8_t *area, uint64_t seq) {
    return (dist__fast_slot *)(void *)(area + (size_t)(seq % DIST__FAST_SLOTS) * DIST__FAST_STRIDE);
}
/* The data in member g's slot of collective seq (this rank's own when g is it). */
static const uint8_t *dist__fast_data(const dist__coll *c, int g, uint64_t seq) {
    return (const uint8_t *)(dist__fast_slot_of(g == c->d->rank ? c->e->shm.fast_area : c->e->peers[g].shm->fast_area, seq) + 1);
}

/* Fails c when descriptor x, of member g, differs from this call's. */
static int dist__fast_mismatch(dist__coll *c, int g, const dist__shm_desc *x) {
    const dist__frame *me = &c->d->active;
    dist__frame f;
    char why[DIST__ERRLEN];
    if (x->coll == me->coll && x->dtype == me->dtype && x->count == me->count && x->op == me->op && x->root == me->root) return 0;
    memset(&f, 0, sizeof f);
    f.coll = x->coll; f.dtype = x->dtype; f.count = x->count; f.op = x->op; f.root = x->root;
    if (!dist__desc_differs(c->d, g, &f, me, 0, why, sizeof why)) return 0;
    dist__coll_failf(c, DIST_ERR_MISMATCH, "%s", why);
    return 1;
}

/* The first writer whose slot of collective u->target is not in place (or
   u->only, when it is the only one).  A slot in place with another
   descriptor fails c. */
static int dist__fast_slots_behind(dist__coll *c, const dist__shm_until *u) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    for (int i = 0, g; (g = dist__shm_member(c, u, i)) >= 0; i++) {
        if (g != d->rank) {
            const dist__fast_slot *s = dist__fast_slot_of(e->peers[g].shm->fast_area, u->target);
            if (DIST__LOAD_ACQ(&s->seq) != u->target) {
                /* not yet; unless it is in this collective and called it otherwise */
                const dist__shm_hdr *h = e->peers[g].shm->peer_hdr;
                dist__shm_desc x;
                if (DIST__LOAD_ACQ(&h->now.seq) != u->target) return g;
                x = h->now.desc;
                DIST__FENCE();
                if (DIST__LOAD_ACQ(&h->now.seq) != u->target || !dist__fast_mismatch(c, g, &x)) return g;
                return -1;
            }
            if (dist__fast_mismatch(c, g, &s->desc)) return -1;
        }
    }
    return -1;
}

/* A collective of the world waits for a message: a member that took slots
   for it (its call is small, this one's is not) sends none, and would let
   it time out.  Its slot, or the collective it says it waits in, shows the
   difference: fails c and returns 1. */
static int dist__fast_disagrees(dist__coll *c) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    if (d->top != d || !e->shm.hosts || !e->shm.fast_area || c->res != DIST_OK) return 0;
    for (int g = 0; g < d->world; g++) {
        const dist__fast_slot *s;
        const dist__shm_hdr *h;
        dist__shm_desc x;
        if (g == d->rank || !e->peers[g].shm) continue;      /* (across hosts: those on this host) */
        s = dist__fast_slot_of(e->peers[g].shm->fast_area, c->seq);
        if (DIST__LOAD_ACQ(&s->seq) == c->seq && dist__fast_mismatch(c, g, &s->desc)) return 1;
        h = e->peers[g].shm->peer_hdr;
        if (DIST__LOAD_ACQ(&h->now.seq) != c->seq) continue;
        x = h->now.desc;
        DIST__FENCE();
        if (DIST__LOAD_ACQ(&h->now.seq) == c->seq && dist__fast_mismatch(c, g, &x)) return 1;
    }
    return 0;
}

/* Writes `part` bytes of `in` and the call's descriptor into this rank's
   slot of collective c->seq, once the team's members have read what it
   last held. */
static dist_result dist__fast_put(dist__coll *c, const uint8_t *in, size_t part) {
    dist__engine *e = c->e;
    uint64_t seq = c->seq, prev = e->shm.fast_used[seq % DIST__FAST_SLOTS];
    dist__fast_slot *s = dist__fast_slot_of(e->shm.fast_area, seq);
    if (prev > e->shm.fast_min_done) {
        uint64_t least = UINT64_MAX;
        for (int i = 0; i < c->tn; i++) {
            int g = c->tmap ? c->tmap[i] : i;
            uint64_t v = g != c->d->rank ? DIST__LOAD_ACQ(&e->peers[g].shm->peer_hdr->fast_done.v) : UINT64_MAX;
            if (v < least) least = v;       /* one load each (DIST__MIN would read twice) */
        }
        e->shm.fast_min_done = least;
        if (prev > least) {
            dist__shm_until u;
            u.behind = dist__shm_counter_behind; u.what = "finish reading an earlier small collective";
            u.slow = 0; u.which = 3; u.only = -1; u.target = prev;
            if (dist__shm_wait_until(c, &u) != DIST_OK) return c->res;
            e->shm.fast_min_done = prev;
        }
    }
    if (part) memcpy(s + 1, in, part);
    dist__shm_desc_set(&s->desc, &c->d->active);
    s->t_in = c->stamped ? c->st_first : 0;      /* (its own entry: nothing merged yet) */
    DIST__STORE_REL(&s->seq, seq);
    dist__shm_wake_others(c);
    e->shm.fast_used[seq % DIST__FAST_SLOTS] = seq;
    return DIST_OK;
}

/* One small collective through the slots: `in` is this rank's part (the
   caller's send buffer; for broadcast and all_reduce, out itself). */
static dist_result dist__fast_run(dist__coll *c, const uint8_t *in, uint8_t *out) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int n = d->world, me = d->rank, bcast = c->kind == DIST__COLL_BROADCAST;
    size_t part = c->count * c->es;
    uint64_t seq = c->seq;
    dist__shm_until u;
    if ((!bcast || me == c->root) && dist__fast_put(c, in, part) != DIST_OK) return c->res;
    if (!bcast || me != c->root) {
        u.behind = dist__fast_slots_behind; u.what = bcast ? "broadcast its part" : "put its part in place";
        u.slow = 0; u.which = 0; u.only = bcast ? c->root : -1; u.target = seq;
        if (dist__shm_wait_until(c, &u) != DIST_OK) return c->res;
        for (int g = bcast ? c->root : 0; c->stamped && g < (bcast ? c->root + 1 : n); g++) {
            int64_t t = g == me ? 0 : dist__fast_slot_of(e->peers[g].shm->fast_area, seq)->t_in;
            if (t) dist__coll_stamp(c, t, t, g);
        }
        switch (c->kind) {
        case DIST__COLL_BROADCAST:
            if (part) memcpy(out, dist__fast_slot_of(e->peers[c->root].shm->fast_area, seq) + 1, part);
            break;
        case DIST__COLL_ALL_REDUCE: {
            dist__reduce_fn combine = dist__reduce_table[c->dtype][c->op];
            if (!part) break;
            /* out = part 0 op part 1 op ... (ours is in our slot now) */
            if (me != 0) memcpy(out, dist__fast_slot_of(e->peers[0].shm->fast_area, seq) + 1, part);
            for (int g = 1; g < n; g++)
                combine(out, dist__fast_data(c, g, seq), c->count, 0);
            break;
        }
        case DIST__COLL_ALL_GATHER:         /* ours from our slot: `in` may lie in out (in place) */
            for (int g = 0; g < n && part; g++)
                memcpy(out + (size_t)g * part, dist__fast_data(c, g, seq), part);
            break;
        default:                    /* barrier: every slot in place is all it asks */
            break;
        }
    }
    /* A broadcast's root read nothing: no writer waits for its fast_done
       (a slot it shares with one was last written in a collective where it
       was not the root, and it published then). */
    if (!bcast || me != c->root) dist__shm_publish(c, &e->shm.hdr->fast_done, seq);
    return c->res;
}

/* ---- small collectives across hosts through each host's slots ----
   all_reduce and barrier of at most DIST_SHM_FAST_BYTES on a world that
   spans hosts, where every rank talks to those on its host over shared
   memory (shm.hosts, agreed at init): one crossing of the links, where
   recursive doubling over the ranks took log2(n) steps, those inside a
   host as messages through the engine.  A host's first member (in rank
   order) is its leader.  The others put their part in their slot and
   wait for the result in the leader's; the leader folds its host's parts
   in rank order, the leaders exchange their hosts' partials (each sends
   its own to every other, up to DIST__FAST_HIER_DIRECT hosts, and folds
   them in host order; beyond, recursive doubling over the leaders), and
   each leader puts the result in its slot.  Every rank gets the same
   bits, and a host's link carries its partial once.  Every wait here
   yields the CPU at each look (see dist__shm_until's slow).  Measured on
   2 cores (bench/RESULTS.md), 8 bytes: 2 hosts x 2 ranks 8-14 us (15-20
   by recursive doubling), 2 x 4 16-21 us (48-56).  Every member carrying
   the partial across instead (no leader, no second step in the slots)
   took 12-19 us at 2 x 2 and 32-57 at 2 x 4 there: all ranks crossing at
   once on shared cores.  Slots are reused and descriptors checked as in
   dist__fast_run, the host's members standing for the world; what
   crosses hosts is frames, checked as every collective's. */
#define DIST__FAST_HIER_DIRECT 16
static dist_result dist__fast_hier(dist__coll *c, uint8_t *out) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int H = d->nodes, me_h = d->node_of[d->rank], L = d->local_size, me = d->rank;
    const int *local = d->by_node + d->node_start[me_h];
    size_t part = c->kind == DIST__COLL_ALL_REDUCE ? c->count * c->es : 0;
    dist__reduce_fn combine = dist__reduce_table[c->dtype][c->op];
    dist__shm_until u;
    u.which = 0; u.target = c->seq; u.slow = 1;
    dist__team(c, L, local, 0);
    if (me != local[0]) {               /* a member: its part in, the result out */
        if (dist__fast_put(c, out, part) != DIST_OK) goto done;
        u.behind = dist__fast_slots_behind; u.what = "combine its host's parts"; u.only = local[0];
        if (dist__shm_wait_until(c, &u) != DIST_OK) goto done;
        if (part) memcpy(out, dist__fast_data(c, local[0], c->seq), part);
        dist__shm_publish(c, &e->shm.hdr->fast_done, c->seq);
        goto done;
    }
    if (L > 1) {                        /* the leader: its host's parts, in rank order */
        u.behind = dist__fast_slots_behind; u.what = "put its part in place"; u.only = -1;
        if (dist__shm_wait_until(c, &u) != DIST_OK) goto done;
        for (int i = 1; i < L; i++) {
            const dist__fast_slot *s = dist__fast_slot_of(e->peers[local[i]].shm->fast_area, c->seq);
            if (c->stamped && s->t_in) dist__coll_stamp(c, s->t_in, s->t_in, local[i]);
            if (part) combine(out, s + 1, c->count, 0);
        }
        dist__shm_publish(c, &e->shm.hdr->fast_done, c->seq);
    }
    for (int x = 0; x < H; x++) d->order[x] = d->by_node[d->node_start[x]];
    if (H > DIST__FAST_HIER_DIRECT) {   /* recursive doubling over the leaders */
        dist__team(c, H, d->order, 0);
        if ((part ? dist__rd_all_reduce(c, out) : dist__dissemination_barrier(c)) != DIST_OK) goto done;
    } else {                            /* each leader's partial to every other, folded in host order */
        uint8_t *all = dist__scratch(c, (size_t)H * part + 1);
        dist_req_t **q;
        dist__team_all(c);
        if (!all || !dist__grow_array(c, (void **)&d->slots, &d->slots_cap, 2 * (size_t)H, sizeof(dist_req_t *))) goto done;
        q = d->slots;
        if (part) memcpy(all + (size_t)me_h * part, out, part);
        for (int x = 0; x < 2 * H; x++) q[x] = NULL;
        for (int x = 0; x < H; x++)     /* receives first */
            if (x != me_h && (q[x] = dist__coll_recv(c, d->order[x], all + (size_t)x * part, part)) == NULL) goto done;
        for (int x = 0; x < H; x++)
            if (x != me_h && (q[H + x] = dist__coll_send(c, d->order[x], all + (size_t)me_h * part, part)) == NULL) goto done;
        for (int x = 0; x < 2 * H; x++)
            if (q[x] && dist__coll_wait(c, q[x]) != DIST_OK) goto done;
        if (part) {
            memcpy(out, all, part);
            for (int x = 1; x < H; x++) combine(out, all + (size_t)x * part, c->count, 0);
        }
    }
    if (L > 1) {                        /* the result to its host's members */
        dist__team(c, L, local, 0);
        dist__fast_put(c, out, part);
    }
done:
    dist__team_all(c);
    return c->res;
}

/* all_to_all of a world across hosts through each host's slots, where a
   rank's whole send buffer fits its slot and a host's incoming blocks its
   first member's (n x the most members on a host x the block at most
   DIST_SHM_FAST_BYTES).  Every rank but the host's first puts its send
   buffer in its slot; the first reads them and sends each other host's
   first member one frame: the blocks of its host's ranks (in rank order)
   for that host's ranks (in rank order); it puts what it receives, and
   its own blocks, in its slot as one row of n blocks per member of its
   host; each rank takes the blocks of the others on its host from their
   slots and the rest from that row.  A host's link carries what must
   leave it, in H - 1 frames instead of one per pair of ranks. */
static dist_result dist__fast_hier_a2a(dist__coll *c, const uint8_t *in, uint8_t *out) {
    dist__engine *e = c->e;
    dist_t *d = c->d;
    int H = d->nodes, me_h = d->node_of[d->rank], L = d->local_size, me = d->rank, lr = d->local_rank, n = d->world, nq = 0;
    const int *local = d->by_node + d->node_start[me_h];
    size_t b = c->count * c->es, row = (size_t)n * b, off;
    uint8_t *mine, *packs_out, *packs_in, *rows;
    dist_req_t **q;
    dist__shm_until u;
    u.which = 0; u.target = c->seq; u.slow = 1;
    dist__team(c, L, local, 0);
    if (me != local[0]) {               /* its send buffer in; its blocks out */
        const uint8_t *lead;
        if (dist__fast_put(c, in, row) != DIST_OK) goto done;
        u.behind = dist__fast_slots_behind; u.what = "put its blocks in place"; u.only = -1;
        if (dist__shm_wait_until(c, &u) != DIST_OK) goto done;
        lead = dist__fast_data(c, local[0], c->seq) + (size_t)lr * row;
        for (int g = 0; g < n && b; g++) {
            const uint8_t *src = d->node_of[g] != me_h || g == local[0] ? lead + (size_t)g * b
                               : dist__fast_data(c, g, c->seq) + (size_t)me * b;
            memcpy(out + (size_t)g * b, src, b);
        }
        dist__shm_publish(c, &e->shm.hdr->fast_done, c->seq);
        goto done;
    }
    /* the host's first: its own buffer aside (the call may be in place),
       the frames out and in, and the rows for its host (L rows of n) */
    if ((mine = dist__scratch(c, row + 3 * (size_t)L * row + 1)) == NULL) goto done;
    packs_out = mine + row; packs_in = packs_out + (size_t)L * row; rows = packs_in + (size_t)L * row;
    if (b) memcpy(mine, in, row);
    if (L > 1) {
        u.behind = dist__fast_slots_behind; u.what = "put its blocks in place"; u.only = -1;
        if (dist__shm_wait_until(c, &u) != DIST_OK) goto done;
    }
    for (int i = 0; i < L && b; i++) {  /* its blocks from its host (the others' slots are read before fast_done) */
        const uint8_t *src = local[i] == me ? mine : dist__fast_data(c, local[i], c->seq);
        memcpy(out + (size_t)local[i] * b, src + (size_t)me * b, b);
    }
    off = 0;
    for (int x = 0; x < H; x++) {       /* the frame for host x: block (i, j) from member i here to member j there */
        int Lx = d->node_start[x + 1] - d->node_start[x];
        if (x == me_h) continue;
        for (int i = 0; i < L && b; i++) {
            const uint8_t *src = local[i] == me ? mine : dist__fast_data(c, local[i], c->seq);
            for (int j = 0; j < Lx; j++) memcpy(packs_out + off + ((size_t)i * Lx + j) * b, src + (size_t)d->by_node[d->node_start[x] + j] * b, b);
        }
        off += (size_t)L * Lx * b;
    }
    if (L > 1) dist__shm_publish(c, &e->shm.hdr->fast_done, c->seq);
    dist__team_all(c);
    if (!dist__grow_array(c, (void **)&d->slots, &d->slots_cap, 2 * (size_t)H, sizeof(dist_req_t *))) goto done;
    q = d->slots;
    off = 0;
    for (int x = 0; x < H; x++) {       /* receives first */
        size_t len = (size_t)L * (size_t)(d->node_start[x + 1] - d->node_start[x]) * b;
        if (x == me_h) continue;
        if ((q[nq++] = dist__coll_recv(c, d->by_node[d->node_start[x]], packs_in + off, len)) == NULL) goto done;
        off += len;
    }
    off = 0;
    for (int x = 0; x < H; x++) {
        size_t len = (size_t)L * (size_t)(d->node_start[x + 1] - d->node_start[x]) * b;
        if (x == me_h) continue;
        if ((q[nq++] = dist__coll_send(c, d->by_node[d->node_start[x]], packs_out + off, len)) == NULL) goto done;
        off += len;
    }
    for (int i = 0; i < nq; i++)
        if (dist__coll_wait(c, q[i]) != DIST_OK) goto done;
    /* the rows: member j's blocks from this rank and from other hosts */
    off = 0;
    for (int j = 0; j < L && b; j++) memcpy(rows + ((size_t)j * n + (size_t)me) * b, mine + (size_t)local[j] * b, b);
    for (int x = 0; x < H; x++) {       /* host x's frame: block (i, j) from its member i to member j here */
        int Lx = d->node_start[x + 1] - d->node_start[x];
        if (x == me_h) continue;
        for (int i = 0; i < Lx && b; i++)
            for (int j = 0; j < L; j++)
                memcpy(rows + ((size_t)j * n + (size_t)d->by_node[d->node_start[x] + i]) * b, packs_in + off + ((size_t)i * L + j) * b, b);
        off += (size_t)Lx * L * b;
    }
    for (int g = 0; g < n && b; g++)    /* this rank's own blocks from other hosts */
        if (d->node_of[g] != me_h) memcpy(out + (size_t)g * b, rows + (size_t)g * b, b);
    if (L > 1) {
        dist__team(c, L, local, 0);
        dist__fast_put(c, rows, (size_t)L * row);
    }
done:
    dist__team_all(c);
    return c->res;
}

static int dist__algo_from_env(void) {
    const char *v = dist__getenv("DIST_ALGO");
    if (!v) return DIST__ALGO_AUTO;
    for (int a = 1; a < DIST__ALGO_COUNT; a++)
        if (strcmp(v, dist__algo_name(a)) == 0) return a;
    return -1;
}

/* The algorithm a collective uses: DIST_ALGO where it applies, else by size. */
static int dist__choose_algo(const dist_t *d, int kind, size_t bytes) {
    int want = d->algo_override;
    /* In the world's shared segments when every rank is on this host (the
       same answer on every rank: all_shm was agreed at init, shm_off only
       changes after a failure, and a disagreement shows in the descriptor). */
    if (d->top == d && d->world > 1 && d->eng->shm.all && !d->shm_off) {
        int small = kind == DIST__COLL_BARRIER || ((kind == DIST__COLL_ALL_REDUCE || kind == DIST__COLL_BROADCAST) && bytes <= DIST_SHM_FAST_BYTES) ||
                    (kind == DIST__COLL_ALL_GATHER && bytes <= (d->eng->shm.read_all && d->eng->shm.cores_each ?
                                                                (size_t)DIST_SHM_GATHER_SLOTS_MAX : (size_t)DIST_SHM_FAST_BYTES));
        if (small && (want == DIST__ALGO_AUTO || want == DIST__ALGO_SLOTS)) return DIST__ALGO_SLOTS;
        if (kind == DIST__COLL_ALL_REDUCE && (want == DIST__ALGO_SHM || (want == DIST__ALGO_AUTO && bytes > DIST_SHM_SMALL_BYTES)))
            return DIST__ALGO_SHM;
        if ((kind == DIST__COLL_BROADCAST || kind == DIST__COLL_ALL_GATHER) && (want == DIST__ALGO_SHM || want == DIST__ALGO_AUTO))
            return DIST__ALGO_SHM;
    }
    /* A small all_reduce, all_to_all or a barrier of the world across
       hosts, several ranks on some: through each host's slots, the hosts'
       first members exchanging (dist__fast_hier, dist__fast_hier_a2a;
       shm.hosts was agreed at init). */
    if (d->top == d && d->nodes > 1 && d->lmax > 1 && d->eng->shm.hosts && !d->shm_off &&
        (kind == DIST__COLL_BARRIER || (kind == DIST__COLL_ALL_REDUCE && bytes <= DIST_SHM_FAST_BYTES) ||
         (kind == DIST__COLL_ALL_TO_ALL && bytes * (size_t)d->world * (size_t)d->lmax <= DIST_SHM_FAST_BYTES)) &&
        (want == DIST__ALGO_AUTO || want == DIST__ALGO_SLOTS))
        return DIST__ALGO_SLOTS;
    if (want == DIST__ALGO_SHM || want == DIST__ALGO_SLOTS) want = DIST__ALGO_AUTO;
    /* Across hosts with several members on some: the hierarchical forms,
       at every size (the node map is the same on every member).  The flat
       ones cross a host's link once per rank pair that straddles it; a
       link's bytes cost more than the extra local steps down to the
       smallest sizes: at 2 hosts x 2 and x 4 ranks over 1 Gbit/s, 64 B to
       64 KiB, the flat forms took 1.1-2.7 x the hierarchical ones' time
       (bench/RESULTS.md, 2026-12-07 night).  A small all_reduce that the
       slots do not serve (a group's) keeps recursive doubling: log2(n)
       exchanges where the hierarchical form makes 2(L - 1) + 2(H - 1). */
    if ((kind == DIST__COLL_ALL_REDUCE || kind == DIST__COLL_REDUCE_SCATTER || kind == DIST__COLL_ALL_GATHER ||
         kind == DIST__COLL_BROADCAST || kind == DIST__COLL_REDUCE) && d->world > 1 &&
        (want == DIST__ALGO_HIER || (want == DIST__ALGO_AUTO && d->nodes > 1 && d->lmax > 1 &&
                                     (kind != DIST__COLL_ALL_REDUCE || bytes > DIST_SHM_FAST_BYTES))))
        return DIST__ALGO_HIER;
    if (want == DIST__ALGO_HIER) want = DIST__ALGO_AUTO;
    switch (kind) {
    case DIST__COLL_ALL_REDUCE:
        /* Halving-doubling beats the ring from 4 ranks up (2 log n steps
           instead of 2(n-1)); measured on 4 and 8 ranks, see bench/RESULTS.md.
           Other sizes would fold ranks in and out, twice the traffic for
           them, so they keep the ring. */
        if (want == DIST__ALGO_RING || want == DIST__ALGO_TREE || want == DIST__ALGO_HALVING) return want;
        if (bytes <= DIST_SMALL_BYTES) return DIST__ALGO_TREE;
        return d->world >= 4 && (d->world & (d->world - 1)) == 0 ? DIST__ALGO_HALVING : DIST__ALGO_RING;
    case DIST__COLL_BROADCAST: case DIST__COLL_REDUCE:
        if (want == DIST__ALGO_RING || want == DIST__ALGO_TREE) return want;
        return bytes <= DIST_SMALL_BYTES ? DIST__ALGO_TREE : DIST__ALGO_RING;
    case DIST__COLL_ALL_GATHER: case DIST__COLL_REDUCE_SCATTER: return DIST__ALGO_RING;
    case DIST__COLL_BARRIER: return DIST__ALGO_TREE;
    default: return DIST__ALGO_DIRECT;
    }
}

/* Runs one collective on the calling thread. */
static dist_result dist__run_job(dist_t *d, dist__job *j) {
    dist__coll c;
    int n = d->world, r = d->rank;
    size_t es = dist_dtype_size(j->dtype), bytes = j->count * es;
    int algo = dist__choose_algo(d, j->kind, bytes);
    uint8_t *out = (uint8_t *)j->recv;
    const uint8_t *in = (const uint8_t *)j->send;
    dist__coll_begin(&c, d, j->kind, algo, j->count, j->dtype, j->op, j->root, j->invalid);
    if (c.res != DIST_OK) return dist__coll_end(&c);
    if (algo == DIST__ALGO_SLOTS) {
        if ((j->kind == DIST__COLL_ALL_TO_ALL ? dist__fast_hier_a2a(&c, in, out) : d->nodes > 1 ? dist__fast_hier(&c, out)
             : dist__fast_run(&c, j->kind == DIST__COLL_ALL_GATHER ? in : out, out)) == DIST_OK &&
            j->kind == DIST__COLL_ALL_REDUCE && j->op == DIST_AVG)
            dist__scale_avg(out, j->count, j->dtype, n);
        return dist__coll_end(&c);
    }
    switch (j->kind) {
    case DIST__COLL_BROADCAST:
        if (n > 1 && algo == DIST__ALGO_HIER) dist__hier_chain(&c, out, 0);
        else if (n > 1 && algo == DIST__ALGO_SHM)
            d->eng->shm.read_all ? dist__shm_direct(&c, NULL, out) : dist__shm_broadcast(&c, out);
        else if (n > 1) algo == DIST__ALGO_RING ? dist__chain_broadcast(&c, out) : dist__tree_broadcast(&c, out);
        break;
    case DIST__COLL_REDUCE: {
        uint8_t *acc = out;
        if (n > 1 && r != j->root) {        /* the caller's buffer stays as it was */
            if ((acc = dist__scratch(&c, bytes ? bytes : 1)) == NULL) break;
            if (bytes) memcpy(acc, out, bytes);
        }
        if (n > 1 && algo == DIST__ALGO_HIER) dist__hier_chain(&c, acc, 1);
        else if (n > 1) algo == DIST__ALGO_RING ? dist__chain_reduce(&c, acc) : dist__tree_reduce(&c, acc);
        if (c.res == DIST_OK && r == j->root && j->op == DIST_AVG) dist__scale_avg(out, j->count, j->dtype, n);
        break;
    }
    case DIST__COLL_ALL_REDUCE:
        if (n > 1 && algo == DIST__ALGO_SHM) dist__shm_all_reduce(&c, out);
        else if (n > 1 && algo == DIST__ALGO_HIER) dist__hier_all_reduce(&c, out);
        else if (n > 1 && algo == DIST__ALGO_HALVING) dist__halving_all_reduce(&c, out);
        else if (n > 1) algo == DIST__ALGO_RING ? dist__ring_all_reduce(&c, out) : dist__rd_all_reduce(&c, out);
        if (c.res == DIST_OK && j->op == DIST_AVG) dist__scale_avg(out, j->count, j->dtype, n);
        break;
    case DIST__COLL_GATHER:
        if (r == j->root && out + (size_t)r * bytes != in && bytes) memmove(out + (size_t)r * bytes, in, bytes);
        if (n > 1) dist__direct_exchange(&c, in, out, 1, 0);
        break;
    case DIST__COLL_SCATTER:
        if (n > 1) dist__direct_exchange(&c, in, out, 0, 1);
        if (c.res == DIST_OK && r == j->root && in + (size_t)r * bytes != out && bytes) memmove(out, in + (size_t)r * bytes, bytes);
        break;
    case DIST__COLL_ALL_GATHER:
        if (n > 1 && algo == DIST__ALGO_HIER) { dist__hier_all_gather(&c, in, out); break; }
        if (n > 1 && algo == DIST__ALGO_SHM) { d->eng->shm.read_all ? dist__shm_direct(&c, in, out) : dist__shm_all_gather(&c, in, out); break; }
        if (out + (size_t)r * bytes != in && bytes) memmove(out + (size_t)r * bytes, in, bytes);
        if (n > 1) dist__ring_rs_ag(&c, out, 0);
        break;
    case DIST__COLL_REDUCE_SCATTER: {
        uint8_t *work = n > 1 && algo != DIST__ALGO_HIER ? dist__scratch(&c, bytes ? bytes * (size_t)n : 1) : NULL;
        if (n > 1 && algo == DIST__ALGO_HIER) dist__hier_reduce_scatter(&c, in, out);
        else if (n > 1 && !work) break;
        else if (n > 1) {
            if (bytes) memcpy(work, in, bytes * (size_t)n);
            if (dist__ring_rs_ag(&c, work, 1) == DIST_OK && bytes) memcpy(out, work + (size_t)r * bytes, bytes);
        } else if (bytes && out != in) {
            memmove(out, in, bytes);
        }
        if (c.res == DIST_OK && j->op == DIST_AVG) dist__scale_avg(out, j->count, j->dtype, n);
        break;
    }
    case DIST__COLL_ALL_TO_ALL: {
        /* In place (send == recv) needs the input kept aside first. */
        if (in == out && n > 1 && bytes) {
            uint8_t *copy = dist__scratch(&c, bytes * (size_t)n);
            if (!copy) break;
            memcpy(copy, in, bytes * (size_t)n);
            in = copy;
        }
        if (bytes && in + (size_t)r * bytes != out + (size_t)r * bytes) memmove(out + (size_t)r * bytes, in + (size_t)r * bytes, bytes);
        if (n > 1) dist__direct_exchange(&c, in, out, 0, 0);
        break;
    }
    case DIST__COLL_BARRIER:
        dist__dissemination_barrier(&c);
        break;
    default:
        dist__coll_failf(&c, DIST_ERR_INVALID, "unknown collective %d", j->kind);
    }
    return dist__coll_end(&c);
}

static void dist__job_finish(dist_t *d, dist__job *j, dist_result res) {
    dist__engine *e = d->eng;
    j->res = res;
    if (res != DIST_OK) dist__format(j->err, sizeof j->err, "%s", dist__thread_error);
    dist__mutex_lock(&e->lock);
    if (j->req) {
        dist_req_t *q = j->req;
        if (res != DIST_OK && dist__req_err_buf(q) != dist__req_err_oom) memcpy(q->err, j->err, DIST__ERRLEN);
        dist__req_complete(e, q, res);
    }
    j->done = 1;
    dist__cond_broadcast(&e->cond);
    /* The caller may be the driver, asleep in poll() for up to 100 ms: it
       waits on the sockets, not on the condition. */
    if (e->polling) dist__wakeup_signal(&e->wake);
    dist__mutex_unlock(&e->lock);
}

static DIST__THREAD_RETURN dist__worker_thread(void *arg) {
    dist_t *d = (dist_t *)arg;
    dist__mutex_lock(&d->q_lock);
    for (;;) {
        dist__job *j = d->q_head;
        if (!j) {
            if (d->q_stop) break;
            dist__cond_wait(&d->q_cond, &d->q_lock);
            continue;
        }
        d->q_head = j->next;
        if (!d->q_head) d->q_tail = NULL;
        DIST__STORE_RELAXED(&d->q_len, d->q_len - 1);
        DIST__STORE_RELAXED(&d->q_oldest, d->q_head ? d->q_head->t_enq : 0);
        if (DIST_RECORDER_OPS) {         /* the recorder's "queued": it runs next, as collective #coll_seq + 1 */
            DIST__STORE_RELAXED(&d->rec_t_enq, j->t_enq);
            DIST__STORE_REL(&d->rec_q_seq, DIST__LOAD_RELAXED(&d->coll_seq) + 1);
        }
        int pooled = j->req != NULL;     /* else a blocking caller owns it, and may leave once it is done */
        d->q_busy = 1;
        dist__mutex_unlock(&d->q_lock);
        dist__job_finish(d, j, dist__run_job(d, j));
        dist__mutex_lock(&d->q_lock);
        d->q_busy = 0;
        if (pooled) { j->next = d->q_free; d->q_free = j; }
        dist__cond_broadcast(&d->q_cond);
    }
    dist__mutex_unlock(&d->q_lock);
    return DIST__THREAD_RETURN_VALUE;
}

/* Validates a call.  A bad one on a good communicator still runs in its
   turn, failing at once and telling the other members, so they do not
   wait for it until their timeout. */
/* A world that newcomers joined takes point-to-point only (see dist_world):
   DIST_ERR_INVALID naming `what`, or DIST_OK. */
static dist_result dist__grew_check(dist_t *d, const char *what) {
    if (!d || !DIST__LOAD_RELAXED(&d->world_grew)) return DIST_OK;
    return dist__fail(d, DIST_ERR_INVALID, "%s on the world communicator: newcomers joined it (dist_grow), so the world is for "
                      "point-to-point only; use the communicator dist_grow gave", what);
}

static dist_result dist__coll_check(dist_t *d, dist__job *j, int send_needed, int recv_needed) {
    const char *name = dist__coll_name(j->kind);
    char *why = j->invalid;
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "%s: NULL communicator", name);
    if (dist__grew_check(d, name) != DIST_OK) return DIST_ERR_INVALID;
    if (DIST__LOAD_ACQ(&d->eng->aborted)) return dist__fail(d, DIST_ERR_ABORTED, "%s: %s", name, d->eng->abort_why);
    if (j->dtype < 0 || j->dtype >= DIST_DTYPE_COUNT) dist__format(why, sizeof j->invalid, "passed unknown dtype %d", (int)j->dtype);
    else if (j->op < 0 || j->op >= DIST_OP_COUNT) dist__format(why, sizeof j->invalid, "passed unknown op %d", (int)j->op);
    else if (j->root < 0 || j->root >= d->world)
        dist__format(why, sizeof j->invalid, "passed root %d, not a rank of this communicator of %d", j->root, d->world);
    else if (j->count > DIST__MAX_MESSAGE / dist_dtype_size(j->dtype) / (uint64_t)d->world)
        dist__format(why, sizeof j->invalid, "passed %zu x %s per rank, which is too large", j->count, dist_dtype_name(j->dtype));
    else if (j->count && ((send_needed && !j->send) || (recv_needed && !j->recv)))
        dist__format(why, sizeof j->invalid, "passed a NULL %s buffer for %zu x %s", send_needed && !j->send ? "send" : "receive",
                     j->count, dist_dtype_name(j->dtype));
    if (why[0]) {   /* a descriptor that is safe to send */
        if (j->dtype < 0 || j->dtype >= DIST_DTYPE_COUNT) j->dtype = DIST_UINT8;
        if (j->op < 0 || j->op >= DIST_OP_COUNT) j->op = DIST_SUM;
        if (j->root < 0 || j->root >= d->world) j->root = 0;
    }
    if (!j->send) j->send = dist__empty;
    if (!j->recv) j->recv = dist__empty;
    return DIST_OK;
}

/* Runs or queues one collective.  req NULL: blocking. */
static dist_result dist__submit(dist_t *d, dist__job *j, int send_needed, int recv_needed, dist_req_t **req) {
    dist_result res;
    if (req) *req = NULL;
    if ((res = dist__coll_check(d, j, send_needed, recv_needed)) != DIST_OK) return res;
    /* Never an async collective on d: nothing can be queued or running (the
       THREADS rule: one thread calls d's collectives at a time). */
    if (!req && !d->worker_started) return dist__run_job(d, j);
    if (!req) {
        dist__mutex_lock(&d->q_lock);
        if (!d->q_head && !d->q_busy) {       /* nothing queued: run here */
            d->q_busy = 1;
            dist__mutex_unlock(&d->q_lock);
            res = dist__run_job(d, j);
            dist__mutex_lock(&d->q_lock);
            d->q_busy = 0;
            if (d->worker_started) dist__cond_broadcast(&d->q_cond);
            dist__mutex_unlock(&d->q_lock);
            return res;
        }
        dist__mutex_unlock(&d->q_lock);
    }
    {   /* queue it for the worker */
        dist__job *q = j;
        dist__engine *e = d->eng;
        dist__mutex_lock(&d->q_lock);
        if (!d->worker_started) {
            if (dist__thread_start(&d->worker, dist__worker_thread, d) != 0) {
                dist__mutex_unlock(&d->q_lock);
                return dist__fail(d, DIST_ERR_SYSTEM, "%s: cannot start the thread that runs async collectives", dist__coll_name(j->kind));
            }
            d->worker_started = 1;
        }
        if (req) {
            dist_req_t *r;
            if ((q = d->q_free) != NULL) d->q_free = q->next;
            else if ((q = (dist__job *)DIST_MALLOC(sizeof *q)) == NULL) {
                dist__mutex_unlock(&d->q_lock);
                return dist__fail(d, DIST_ERR_NOMEM, "%s: out of memory for an async job", dist__coll_name(j->kind));
            }
            *q = *j;
            dist__mutex_lock(&e->lock);
            r = dist__req_alloc(e);
            if (r) { r->comm = d; r->kind = DIST__REQ_COLL; r->source = -1; }
            dist__mutex_unlock(&e->lock);
            if (!r) {
                q->next = d->q_free; d->q_free = q;
                dist__mutex_unlock(&d->q_lock);
                return dist__fail(d, DIST_ERR_NOMEM, "%s: out of memory for a request", dist__coll_name(j->kind));
            }
            q->req = r;
            *req = r;
        }
        q->next = NULL;
        q->done = 0;
        q->t_enq = dist__now_ns();       /* (the flight recorder's "queued") */
        if (d->q_tail) d->q_tail->next = q; else { d->q_head = q; DIST__STORE_RELAXED(&d->q_oldest, q->t_enq); }
        d->q_tail = q;
        DIST__STORE_RELAXED(&d->q_len, d->q_len + 1);
        dist__cond_broadcast(&d->q_cond);
        dist__mutex_unlock(&d->q_lock);
        if (req) return DIST_OK;
        /* a blocking call behind async ones: wait for the worker to run it */
        dist__mutex_lock(&e->lock);
        while (!j->done) dist__wait_step(e, 100);
        dist__mutex_unlock(&e->lock);
        if (j->res != DIST_OK) return dist__fail(d, j->res, "%s", j->err);
        return DIST_OK;
    }
}

static void dist__worker_stop(dist_t *d) {
    if (!d->worker_started) return;
    dist__mutex_lock(&d->q_lock);
    d->q_stop = 1;                 /* the worker drains its queue first */
    dist__cond_broadcast(&d->q_cond);
    dist__mutex_unlock(&d->q_lock);
    dist__thread_join(d->worker);
    d->worker_started = 0;
}

/* One collective call, described and submitted; send_needed/recv_needed:
   which buffers may not be NULL. */
static dist_result dist__collective(dist_t *d, int kind, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op,
                                    int root, int send_needed, int recv_needed, dist_req_t **req) {
    dist__job j;                  /* no memset: its two sentences are 500 bytes, a small call costs 200 ns */
    j.next = NULL; j.req = NULL; j.done = 0; j.res = DIST_OK; j.invalid[0] = 0; j.err[0] = 0;
    j.kind = kind; j.send = send; j.recv = recv; j.count = count; j.dtype = dtype; j.op = op; j.root = root;
    return dist__submit(d, &j, send_needed, recv_needed, req);
}

DIST_API dist_result dist_broadcast_async(dist_t *d, void *buf, size_t count, dist_dtype dtype, int root, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_BROADCAST, buf, buf, count, dtype, DIST_SUM, root, 0, 1, req);
}
DIST_API dist_result dist_reduce_async(dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op, int root, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_REDUCE, buf, buf, count, dtype, op, root, 0, 1, req);
}
DIST_API dist_result dist_all_reduce_async(dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_ALL_REDUCE, buf, buf, count, dtype, op, 0, 0, 1, req);
}
DIST_API dist_result dist_gather_async(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_GATHER, send, recv, count, dtype, DIST_SUM, root, 1, d && d->rank == root, req);
}
DIST_API dist_result dist_all_gather_async(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_ALL_GATHER, send, recv, count, dtype, DIST_SUM, 0, 1, 1, req);
}
DIST_API dist_result dist_scatter_async(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_SCATTER, send, recv, count, dtype, DIST_SUM, root, d && d->rank == root, 1, req);
}
DIST_API dist_result dist_reduce_scatter_async(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_REDUCE_SCATTER, send, recv, count, dtype, op, 0, 1, 1, req);
}
DIST_API dist_result dist_all_to_all_async(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_ALL_TO_ALL, send, recv, count, dtype, DIST_SUM, 0, 1, 1, req);
}
DIST_API dist_result dist_barrier_async(dist_t *d, dist_req_t **req) {
    return dist__collective(d, DIST__COLL_BARRIER, NULL, NULL, 0, DIST_UINT8, DIST_SUM, 0, 0, 0, req);
}

DIST_API dist_result dist_broadcast(dist_t *d, void *buf, size_t count, dist_dtype dtype, int root) {
    return dist_broadcast_async(d, buf, count, dtype, root, NULL);
}
DIST_API dist_result dist_reduce(dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op, int root) {
    return dist_reduce_async(d, buf, count, dtype, op, root, NULL);
}
DIST_API dist_result dist_all_reduce(dist_t *d, void *buf, size_t count, dist_dtype dtype, dist_op op) {
    return dist_all_reduce_async(d, buf, count, dtype, op, NULL);
}
DIST_API dist_result dist_gather(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root) {
    return dist_gather_async(d, send, recv, count, dtype, root, NULL);
}
DIST_API dist_result dist_all_gather(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype) {
    return dist_all_gather_async(d, send, recv, count, dtype, NULL);
}
DIST_API dist_result dist_scatter(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, int root) {
    return dist_scatter_async(d, send, recv, count, dtype, root, NULL);
}
DIST_API dist_result dist_reduce_scatter(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype, dist_op op) {
    return dist_reduce_scatter_async(d, send, recv, count, dtype, op, NULL);
}
DIST_API dist_result dist_all_to_all(dist_t *d, const void *send, void *recv, size_t count, dist_dtype dtype) {
    return dist_all_to_all_async(d, send, recv, count, dtype, NULL);
}
DIST_API dist_result dist_barrier(dist_t *d) {
    return dist_barrier_async(d, NULL);
}

/* [SECTION] groups
   ---------------------------------------------------------------------------
   A group is a communicator over some ranks of its parent.  It shares the
   world's connections and progress engine and has its own id (from the
   store, unique in the job), which every frame carries, so its messages
   and collectives never meet another communicator's.  Members are ordered
   by their rank in the parent, as in torch's new_group. */

static dist_result dist__comm_register(dist_t *d) {
    dist__engine *e = d->eng;
    dist_result r = DIST_OK;
    dist__mutex_lock(&e->lock);
    if (e->ncomms == e->cap_comms) {
        int cap = e->cap_comms ? 2 * e->cap_comms : 8;
        dist_t **p = (dist_t **)DIST_REALLOC(e->comms, sizeof *p * (size_t)cap);
        if (p) { e->comms = p; e->cap_comms = cap; }
    }
    if (e->ncomms < e->cap_comms) e->comms[e->ncomms++] = d;
    else r = DIST_ERR_NOMEM;
    dist__mutex_unlock(&e->lock);
    return r;
}

static void dist__comm_unregister(dist_t *d) {
    dist__engine *e = d->eng;
    dist__mutex_lock(&e->lock);
    for (int i = 0; i < e->ncomms; i++)
        if (e->comms[i] == d) { e->comms[i] = e->comms[--e->ncomms]; break; }
    dist__mutex_unlock(&e->lock);
}

/* What a world and a group both need for collectives. */
static void dist__comm_init_collectives(dist_t *d, int algo) {
    dist__mutex_init(&d->q_lock);
    dist__cond_init(&d->q_cond);
    d->algo_override = algo;
}

static void dist__comm_free_collectives(dist_t *d) {
    dist__worker_stop(d);
    while (d->q_free) { dist__job *j = d->q_free; d->q_free = j->next; DIST_FREE(j); }
    DIST_FREE(d->scratch); DIST_FREE(d->slots); DIST_FREE(d->steps); DIST_FREE(d->offs); DIST_FREE(d->ops); DIST_FREE(d->links); DIST_FREE(d->hops); DIST_FREE(d->pieces);
    DIST_FREE(d->members); DIST_FREE(d->group_of); DIST_FREE(d->waits); DIST_FREE(d->node_of);
    dist__cond_destroy(&d->q_cond);
    dist__mutex_destroy(&d->q_lock);
}

static void dist__group_free(dist_t *g) {
    dist__stats_log(g);
    dist__comm_unregister(g);
    dist__comm_free_collectives(g);
    dist__obs_remove(g);
    dist__mutex_destroy(&g->err_lock);
    DIST_FREE(g);
}

static int dist__cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* "n r0 r1 ...": the members as the store records them. */
static size_t dist__format_members(char *buf, size_t cap, int n, const int *ranks) {
    size_t off = (size_t)snprintf(buf, cap, "%d", n);
    for (int i = 0; i < n && off < cap; i++) off += (size_t)snprintf(buf + off, cap - off, " %d", ranks[i]);
    return off;
}

/* A group of `parent` with members sorted[0..n) (parent ranks, ascending;
   or with `wranks`, the engine's ranks in the group's order), this rank
   being member `me`, and the job-wide id `id`: registered with the
   engine, which routes its frames from then on. */
static dist_result dist__group_make(dist_t *parent, int n, const int *sorted, int wranks, int me, int64_t id, const char *what,
                                    dist_t **group) {
    dist_t *g = (dist_t *)DIST_MALLOC(sizeof *g);
    if (!g) return dist__fail(parent, DIST_ERR_NOMEM, "%s: out of memory", what);
    memset(g, 0, sizeof *g);
    g->eng = parent->eng;
    g->top = parent->top;
    g->rec_timed = parent->top->rec_timed;
    g->id = (uint32_t)id;
    g->rank = me;
    g->world = n;
    g->timeout_ms = parent->timeout_ms;
    g->job = parent->job;
    g->key = parent->key;
    g->store_fd = DIST__NO_SOCKET;
    dist__mutex_init(&g->err_lock);
    dist__comm_init_collectives(g, parent->algo_override);
    g->members = (int *)DIST_MALLOC(sizeof(int) * (size_t)n);
    g->group_of = (int *)DIST_MALLOC(sizeof(int) * (size_t)g->eng->cap);   /* every rank the engine may ever have */
    if (g->members && g->group_of) {
        /* filled before the engine can see the group (the progress thread
           reads group_of when a notice for it arrives) */
        for (int i = 0; i < g->eng->cap; i++) g->group_of[i] = -1;
        for (int i = 0; i < n; i++) {
            g->members[i] = wranks ? sorted[i] : dist__wrank(parent, sorted[i]);
            g->group_of[g->members[i]] = i;
        }
    }
    if (!g->members || !g->group_of || dist__comm_nodes(g) != 0 || (g->top->tr_inited && dist__obs_add(g, what) != DIST_OK) ||
        dist__comm_register(g) != DIST_OK) {
        DIST_FREE(g->members); DIST_FREE(g->group_of); g->members = g->group_of = NULL;
        DIST_FREE(g->node_of); g->node_of = NULL;
        dist__obs_remove(g);
        dist__comm_free_collectives(g);
        dist__mutex_destroy(&g->err_lock);
        DIST_FREE(g);
        return dist__fail(parent, DIST_ERR_NOMEM, "%s: out of memory", what);
    }
    *group = g;
    return DIST_OK;
}

DIST_API dist_result dist_new_group(dist_t *parent, int n, const int *ranks, dist_t **group) {
    int *sorted = NULL, me = -1, k;
    char key[64], *mine = NULL, *theirs = NULL;
    size_t cap, len = 0;
    int64_t id = 0;
    dist_result res = DIST_OK;
    if (group) *group = NULL;
    if (!parent || !group) return dist__fail(parent, DIST_ERR_INVALID, "new_group: NULL %s", parent ? "group pointer" : "parent");
    if (dist__grew_check(parent, "new_group") != DIST_OK) return DIST_ERR_INVALID;
    if (n < 1 || n > parent->world || !ranks)
        return dist__fail(parent, DIST_ERR_INVALID, "new_group: %d rank%s of a communicator of %d", n, DIST__PLURAL(n), parent->world);
    k = ++parent->ngroups_made;
    cap = (size_t)parent->world * 12 + 64;       /* room for any list of parent ranks */
    sorted = (int *)DIST_MALLOC(sizeof *sorted * (size_t)n);
    mine = (char *)DIST_MALLOC(cap);
    theirs = (char *)DIST_MALLOC(cap);
    if (!sorted || !mine || !theirs) { res = dist__fail(parent, DIST_ERR_NOMEM, "new_group: out of memory"); goto out; }
    memcpy(sorted, ranks, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, dist__cmp_int);
    for (int i = 0; i < n; i++) {
        if (sorted[i] < 0 || sorted[i] >= parent->world || (i && sorted[i] == sorted[i - 1])) {
            res = dist__fail(parent, DIST_ERR_INVALID, "new_group: rank %d is %s", sorted[i],
                             i && sorted[i] == sorted[i - 1] ? "listed twice" : "not in the parent communicator");
            goto out;
        }
        if (sorted[i] == parent->rank) me = i;
    }
    /* Every rank of the parent, member or not, publishes the list it was
       given; the lowest member of a list adds a job-wide id from the store.
       A member reads the record of the rank it takes for the lowest member
       and compares: lists that differ fail (at once) instead of waiting. */
    dist__format_members(mine, cap, n, sorted);
    if (me == 0 && (res = dist_store_add(parent, "dist/next_comm_id", 1, &id)) != DIST_OK) goto out;
    snprintf(theirs, cap, "%lld %s", (long long)id, mine);
    snprintf(key, sizeof key, "dist/group/%u/%d/%d", (unsigned)parent->id, k, parent->rank);
    if ((res = dist_store_set(parent, key, theirs, strlen(theirs))) != DIST_OK) goto out;
    if (me < 0) goto out;                         /* not a member: no group */
    if (me > 0) {
        char *sp;
        snprintf(key, sizeof key, "dist/group/%u/%d/%d", (unsigned)parent->id, k, sorted[0]);
        if ((res = dist_store_get(parent, key, theirs, cap - 1, &len)) != DIST_OK) goto out;
        theirs[len] = 0;
        id = strtoll(theirs, &sp, 10);
        if (id < 0 || id > 0x7fffffff || *sp != ' ') { res = dist__fail(parent, DIST_ERR_PROTOCOL, "new_group #%d: bad record in the store", k); goto out; }
        if (strcmp(sp + 1, mine) != 0 || id == 0) {
            res = dist__fail(parent, DIST_ERR_MISMATCH, "new_group #%d: rank %d passed members {%s}, rank %d passed {%s} "
                             "(count first)", k, parent->rank, mine, sorted[0], sp + 1);
            goto out;
        }
    }
    res = dist__group_make(parent, n, sorted, 0, me, id, "new_group", group);
out:
    DIST_FREE(sorted); DIST_FREE(mine); DIST_FREE(theirs);
    return res;
}

/* [SECTION] surviving failures: agree, shrink
   ---------------------------------------------------------------------------
   Written once over the store, not over the connections: the store does
   not depend on the ranks that died (unless rank 0, its host, is one), and
   its compare_set gives one decision that every member reads.  Round k of
   communicator d (each dist_agree and dist_shrink call is one):
     1. member g sets "dist/ft/<id>/<k>/<g>" = "<kind> <flags>" (kind 'a'
        for agree, 's' for shrink);
     2. it checks, in one request, that every member it does not know dead
        has set its entry; if so it proposes a decision: the members that
        did and that it does not know dead, the AND of their flags, and for
        a shrink a new communicator id (dist/next_comm_id).  compare_set
        on "dist/ft/<id>/<k>/d" makes the first proposal the decision;
     3. otherwise it waits for the decision (a GET parked DIST__FT_POLL_MS)
        and checks again: a death it learns meanwhile (its engine sees the
        connection close) completes the set;
     4. a member not in the decision was taken for dead by the one who
        proposed it: it fails (DIST_ERR_PEER_LOST) rather than go on with
        another view of the job;
     5. each member deletes its entry; the proposer whose decision won
        deletes the decision of round k-1 (every member counted alive has
        read it: it set its entry of round k after), so the store holds
        one decision per communicator however many rounds run.
   A member that dies after setting its entry may be counted alive; the
   next operation that needs it fails, and the next round leaves it out.
   A member that neither sets its entry nor dies (stopped, hung) makes the
   round time out, naming it. */
#define DIST__FT_POLL_MS 10
static dist_result dist__grow_waiting(dist_t *d, const char *what, int64_t *ja, int64_t *jb);   /* [SECTION] growing */

/* Kill points for the tests of this protocol (tests/test_shrink.c, which
   compiles the implementation with DIST_TEST_HOOKS): the hook is called
   with "agree" or "shrink" and "entry" (this member's entry is in the
   store), "proposing" (about to compare_set its proposal) or "decided"
   (its proposal won, nothing deleted yet). */
#ifdef DIST_TEST_HOOKS
static void (*dist__test_hook)(dist_t *d, const char *op, const char *point);
#  define DIST__TEST_POINT(d, op, point) do { if (dist__test_hook) dist__test_hook(d, op, point); } while (0)
#else
#  define DIST__TEST_POINT(d, op, point) ((void)0)
#endif

/* Members this rank knows dead (their connection failed or they left):
   sets dead[g], returns how many. */
static int dist__ft_dead(dist_t *d, unsigned char *dead) {
    dist__engine *e = d->eng;
    int n = 0;
    dist__mutex_lock(&e->lock);
    for (int g = 0; g < d->world; g++) {
        int w = dist__wrank(d, g);
        dead[g] = g != d->rank && e->peers[w].state != DIST__PEER_OK;
        n += dead[g];
    }
    dist__mutex_unlock(&e->lock);
    return n;
}

DIST_API int dist_failed_ranks(dist_t *d, int *ranks, int cap) {
    unsigned char *dead;
    int n = 0;
    if (!d || d->world < 1 || (dead = (unsigned char *)DIST_MALLOC((size_t)d->world)) == NULL) return 0;
    dist__ft_dead(d, dead);
    for (int g = 0; g < d->world; g++)
        if (dead[g]) { if (ranks && n < cap) ranks[n] = g; n++; }
    DIST_FREE(dead);
    return n;
}

/* A GET that may find nothing: *found 0 when `key` was not set within
   wait_ms (no failure recorded), else its value (NUL-terminated) in buf. */
static dist_result dist__ft_get(dist_t *d, const char *what, const char *key, int wait_ms, char *buf, size_t cap, int *found) {
    dist__store_part part;
    dist__store_resp rs;
    dist_result res;
    *found = 0;
    part.p = key; part.n = strlen(key);
    dist__mutex_lock(&d->top->store_lock);
    res = dist__store_call(d, what, DIST__STORE_GET, wait_ms, &part, 1, wait_ms, &rs);
    if (res == DIST_OK && rs.status != DIST_ERR_TIMEOUT) {
        res = dist__store_status(d, what, key, wait_ms, &rs);
        if (res == DIST_OK && rs.vlen >= cap) res = dist__fail(d, DIST_ERR_PROTOCOL, "%s: a record of %zu bytes in the store", what, rs.vlen);
        if (res == DIST_OK) { memcpy(buf, rs.val, rs.vlen); buf[rs.vlen] = 0; *found = 1; }
    }
    dist__mutex_unlock(&d->top->store_lock);
    return res;
}

/* Whether every member g with !dead[g] has set its entry of the round
   (prefix "dist/ft/<id>/<k>/"), in requests of up to
   DIST__STORE_MAX_PARTS keys. */
static dist_result dist__ft_all_set(dist_t *d, const char *what, const char *prefix, const unsigned char *dead, int *all) {
    char keys[DIST__STORE_MAX_PARTS][64];
    const char *kp[DIST__STORE_MAX_PARTS];
    dist_result res = DIST_OK;
    int nk = 0;
    *all = 1;
    for (int g = 0; g <= d->world && *all && res == DIST_OK; g++) {
        if (g < d->world && !dead[g]) {
            dist__format(keys[nk], sizeof keys[nk], "%s%d", prefix, g);
            kp[nk] = keys[nk];
            nk++;
        }
        if (nk && (nk == DIST__STORE_MAX_PARTS || g == d->world)) {
            res = dist__store_keys(d, what, DIST__STORE_CHECK, kp, nk, 0, all);
            nk = 0;
        }
    }
    return res;
}

static const char *dist__ft_call(int kind) { return kind == 's' ? "dist_shrink" : kind == 'g' ? "dist_grow" : "dist_agree"; }

/* One round (see above): kind 'a', 's' or 'g' (grow, see "growing");
   *flags in, the AND out (grow: the newcomers asked for in, none out);
   the members counted alive into alive[] (ascending), *nalive; *id the new
   communicator's id (shrink, grow); join[] the newcomers' tickets admitted,
   join[0] < t <= join[1], and the engine's ranks before, join[2] (grow). */
static dist_result dist__ft_round(dist_t *d, int kind, uint64_t *flags, int *alive, int *nalive, int64_t *id, int64_t *join) {
    const char *what = kind == 's' ? "shrink" : kind == 'g' ? "grow" : "agree";
    int n = d->world, found = 0, all = 0;
    int64_t waiting = 0;             /* grow: newcomers seen waiting */
    int64_t park = 0;                /* ...and the ticket of the last one asked for, while it has not come */
    uint64_t need = 0;               /* ...and asked for */
    uint64_t k = ++d->ft_rounds;
    int64_t deadline = dist__now_ms() + d->timeout_ms;
    size_t cap = (size_t)n * 12 + 128;
    char prefix[64], key[96], mine[64], *rec = (char *)DIST_MALLOC(cap), *prop = (char *)DIST_MALLOC(cap);
    unsigned char *dead = (unsigned char *)DIST_MALLOC((size_t)n);
    dist_result res = DIST_OK;
    int won = 0;
    if (!rec || !prop || !dead) { res = dist__fail(d, DIST_ERR_NOMEM, "%s: out of memory", what); goto out; }
    dist__format(prefix, sizeof prefix, "dist/ft/%u/%llu/", (unsigned)d->id, (unsigned long long)k);
    dist__format(key, sizeof key, "%s%d", prefix, d->rank);
    dist__format(mine, sizeof mine, "%c %016llx", kind, (unsigned long long)*flags);
    if ((res = dist_store_set(d, key, mine, strlen(mine))) != DIST_OK) goto out;
    DIST__TEST_POINT(d, what, "entry");
    dist__format(key, sizeof key, "%sd", prefix);
    for (;;) {
        dist__ft_dead(d, dead);
        if ((res = dist__ft_all_set(d, what, prefix, dead, &all)) != DIST_OK) goto out;
        if (all) {
            /* propose: the entries of the members not known dead */
            uint64_t all_and = ~(uint64_t)0;
            int64_t nid = 0;
            size_t off, len = 0;
            char other = 0, kind0 = 0, kind1 = 0;
            int first0 = -1, first_other = -1, f = 1;
            off = 0;
            need = 0;
            for (int g = 0; g < n; g++) {
                char ek[96];
                unsigned long long v = 0;
                if (dead[g]) continue;
                dist__format(ek, sizeof ek, "%s%d", prefix, g);
                if ((res = dist__ft_get(d, what, ek, 1, rec, cap, &f)) != DIST_OK) goto out;
                if (!f) break;     /* deleted: the round was decided meanwhile (below) */
                if (sscanf(rec, "%c %llx", &other, &v) != 2) { res = dist__fail(d, DIST_ERR_PROTOCOL, "%s: the entry of rank %d is malformed", what, g); goto out; }
                if (first0 < 0) { first0 = g; kind0 = other; }
                else if (other != kind0 && first_other < 0) { first_other = g; kind1 = other; }
                all_and &= (uint64_t)v;
                need = DIST__MAX(need, (uint64_t)v);
                off += (size_t)snprintf(prop + 64 + off, cap - 64 - off, " %d", g);
            }
            if (!f) all = 0;
            else if (first_other >= 0) dist__format(rec, cap, "m %d %d %c %c", first_other, first0, kind1, kind0);   /* the one that differs first */
            else {
                int cnt = 0;
                int64_t ja = 0, jb = 0;
                for (int g = 0; g < n; g++) cnt += !dead[g];
                if (kind == 'g' && (res = dist__grow_waiting(d, what, &ja, &jb)) != DIST_OK) goto out;
                waiting = jb - ja;
                if (kind == 'g' && (uint64_t)waiting < need) { all = 0; park = ja + (int64_t)need; }   /* not yet: the newcomers asked for */
                else {
                    if ((kind == 's' || kind == 'g') && (res = dist_store_add(d, "dist/next_comm_id", 1, &nid)) != DIST_OK) goto out;
                    dist__format(rec, cap, "%c %016llx %lld %d%s", kind, (unsigned long long)(kind == 'g' ? 0 : all_and),
                                 (long long)nid, cnt, prop + 64);
                    off = strlen(rec);
                    if (kind == 'g') dist__format(rec + off, cap - off, " ; %lld %lld %d", (long long)ja, (long long)jb, d->eng->world);
                }
            }
            if (all) {
                DIST__TEST_POINT(d, what, "proposing");
                if ((res = dist_store_compare_set(d, key, NULL, 0, rec, strlen(rec), prop, cap - 1, &len)) != DIST_OK) goto out;
                prop[len] = 0;
                won = strcmp(prop, rec) == 0;
                if (won) DIST__TEST_POINT(d, what, "decided");
                memcpy(rec, prop, len + 1);
                break;
            }
        }
        if (park > 0 && dist__now_ms() < deadline) {
            /* every member is here, the newcomers are not: wait for the
               one that makes them enough (its ticket's mark), not polling */
            char tk[48];
            const char *kp = tk;
            dist__format(tk, sizeof tk, "dist/join/t%lld", (long long)park);
            park = 0;
            res = dist_store_wait(d, &kp, 1, (int)DIST__MAX(1, DIST__MIN(200, dist__ms_left(deadline, 1000000))));
            if (res != DIST_OK && res != DIST_ERR_TIMEOUT) goto out;
            res = DIST_OK;
            continue;
        }
        if ((res = dist__ft_get(d, what, key, DIST__MAX(1, (int)DIST__MIN(DIST__FT_POLL_MS, dist__ms_left(deadline, 1000000))), rec, cap, &found)) != DIST_OK) goto out;
        if (found) break;
        dist__yield();     /* (another thread of this rank may be waiting for the store's lock) */
        if (dist__now_ms() >= deadline) {
            char who[200];
            size_t o = 0;
            int all1 = 1, asked = 1;
            who[0] = 0;
            for (int g = 0; g < n && o < sizeof who - 16 && asked; g++) {
                char ek[96];
                const char *kp = ek;
                if (dead[g] || g == d->rank) continue;
                dist__format(ek, sizeof ek, "%s%d", prefix, g);
                asked = dist__store_keys(d, what, DIST__STORE_CHECK, &kp, 1, 0, &all1) == DIST_OK;
                if (asked && !all1) o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", o ? ", " : "", g);
            }
            if (who[0])
                res = dist__fail(d, DIST_ERR_TIMEOUT, "%s #%llu: rank%s %s neither called it nor died within %.1f s", what,
                                 (unsigned long long)k, strchr(who, ',') ? "s" : "", who, d->timeout_ms / 1000.0);
            else if (kind == 'g' && (uint64_t)waiting < need)
                res = dist__fail(d, DIST_ERR_TIMEOUT, "%s #%llu: %lld newcomer%s asked to join within %.1f s, and %llu %s asked for",
                                 what, (unsigned long long)k, (long long)waiting, DIST__PLURAL(waiting), d->timeout_ms / 1000.0,
                                 (unsigned long long)need, need == 1 ? "was" : "were");
            else
                res = dist__fail(d, DIST_ERR_TIMEOUT, "%s #%llu: not decided within %.1f s (and the store could not say who was missing)",
                                 what, (unsigned long long)k, d->timeout_ms / 1000.0);
            goto out;
        }
    }
    /* the decision: "<kind> <flags> <id> <count> g0 g1 ..." or "m <g> <kind>" */
    if (rec[0] == 'm') {
        int ga = -1, gb = -1;
        char ka = 0, kb = 0;
        sscanf(rec, "m %d %d %c %c", &ga, &gb, &ka, &kb);
        res = dist__fail(d, DIST_ERR_MISMATCH, "%s #%llu: rank %d called %s where rank %d called %s", what, (unsigned long long)k,
                         ga, dist__ft_call(ka), gb, dist__ft_call(kb));
    } else {
        unsigned long long fl = 0;
        long long nid = 0;
        int cnt = 0, pos = 0, me = 0;
        char kd = 0;
        const char *p = rec;
        if (sscanf(p, "%c %llx %lld %d%n", &kd, &fl, &nid, &cnt, &pos) != 4 || cnt < 1 || cnt > n || kd != kind) {
            res = dist__fail(d, DIST_ERR_PROTOCOL, "%s #%llu: a malformed decision in the store", what, (unsigned long long)k);
            goto out;
        }
        p += pos;
        for (int i = 0; i < cnt; i++) {
            int g = -1;
            if (sscanf(p, " %d%n", &g, &pos) != 1 || g < 0 || g >= n || (i && g <= alive[i - 1])) {
                res = dist__fail(d, DIST_ERR_PROTOCOL, "%s #%llu: a malformed decision in the store", what, (unsigned long long)k);
                goto out;
            }
            p += pos;
            alive[i] = g;
            me |= g == d->rank;
        }
        if (kind == 'g') {
            long long ja = 0, jb = 0;
            int ew = 0;
            if (sscanf(p, " ; %lld %lld %d", &ja, &jb, &ew) != 3 || ja < 0 || jb < ja || ew < 1) {
                res = dist__fail(d, DIST_ERR_PROTOCOL, "%s #%llu: a malformed decision in the store", what, (unsigned long long)k);
                goto out;
            }
            if (ew != d->eng->world) {
                res = dist__fail(d, DIST_ERR_PROTOCOL, "%s #%llu: the job has had %d rank%s here and %d where it was decided", what,
                                 (unsigned long long)k, d->eng->world, DIST__PLURAL(d->eng->world), ew);
                goto out;
            }
            join[0] = ja; join[1] = jb; join[2] = ew;
        }
        *nalive = cnt;
        *flags = (uint64_t)fl;
        *id = nid;
        if (!me) {
            char lost[DIST__ERRLEN / 2];
            dist__lost_note(d, lost, sizeof lost);
            res = dist__fail(d, DIST_ERR_PEER_LOST, "%s #%llu: the other members decided without rank %d: it was taken for dead%s",
                             what, (unsigned long long)k, d->rank, lost);
        }
    }
    /* the store keeps one decision per communicator (see above) */
    dist__format(key, sizeof key, "%s%d", prefix, d->rank);
    dist_store_delete(d, key, NULL);
    if (won && k > 1) {
        dist__format(key, sizeof key, "dist/ft/%u/%llu/d", (unsigned)d->id, (unsigned long long)(k - 1));
        dist_store_delete(d, key, NULL);
    }
out:
    DIST_FREE(rec); DIST_FREE(prop); DIST_FREE(dead);
    return res;
}

DIST_API dist_result dist_agree(dist_t *d, uint64_t *flags, int *nalive) {
    int *alive, n = 0;
    int64_t id = 0;
    uint64_t f;
    dist_result res;
    if (nalive) *nalive = 0;
    if (!d || !flags) return dist__fail(d, DIST_ERR_INVALID, "agree: NULL %s", d ? "flags" : "communicator");
    if (dist__grew_check(d, "agree") != DIST_OK) return DIST_ERR_INVALID;
    if ((alive = (int *)DIST_MALLOC(sizeof(int) * (size_t)d->world)) == NULL) return dist__fail(d, DIST_ERR_NOMEM, "agree: out of memory");
    f = *flags;
    res = dist__ft_round(d, 'a', &f, alive, &n, &id, NULL);
    if (res == DIST_OK) { *flags = f; if (nalive) *nalive = n; }
    DIST_FREE(alive);
    return res;
}

DIST_API dist_result dist_shrink(dist_t *d, dist_t **survivors) {
    int *alive, n = 0, me = -1;
    int64_t id = 0;
    uint64_t f = 0;
    dist_result res;
    if (survivors) *survivors = NULL;
    if (!d || !survivors) return dist__fail(d, DIST_ERR_INVALID, "shrink: NULL %s", d ? "result pointer" : "communicator");
    if (dist__grew_check(d, "shrink") != DIST_OK) return DIST_ERR_INVALID;
    if ((alive = (int *)DIST_MALLOC(sizeof(int) * (size_t)d->world)) == NULL) return dist__fail(d, DIST_ERR_NOMEM, "shrink: out of memory");
    res = dist__ft_round(d, 's', &f, alive, &n, &id, NULL);
    if (res == DIST_OK && (id <= 0 || id > 0x7fffffff)) res = dist__fail(d, DIST_ERR_PROTOCOL, "shrink: a bad communicator id in the store");
    for (int i = 0; i < n && res == DIST_OK; i++) if (alive[i] == d->rank) me = i;
    if (res == DIST_OK) res = dist__group_make(d, n, alive, 0, me, id, "shrink", survivors);
    DIST_FREE(alive);
    return res;
}

/* [SECTION] rendezvous: init methods and the mesh */

typedef struct dist__setup {
    int method;                      /* 'e' env, 't' tcp, 'f' file */
    char host[256]; int port;
    char path[512];
    int rank, world, timeout_ms, spin_us, algo, shm;
    uint64_t eager;                  /* flow-control budget per peer (0: the default) */
    dist__key key;
    const char *ifname;
    dist__socket listen_fd;          /* inherited store socket, or none */
    uint64_t run_id;                 /* this launch's identity, hashed (0: none) */
    char run_from[96];               /* where it came from, for sentences: "DIST_RUN_ID=..." */
    int hosted;                      /* the store is a launcher's, not rank 0's */
    int join;                        /* joins a running job (dist_grow), DIST_JOINING */
    int max_joins;                   /* processes that may join over the job's life (DIST_MAX_JOINS) */
} dist__setup;

static int dist__parse_int(const char *s, int *out) {
    char *end;
    long v;
    if (!s || !*s) return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

/* "4M", "512K", "65536": bytes; 0 when it is not such a number. */
static uint64_t dist__parse_bytes(const char *s) {
    char *end;
    unsigned long long v;
    if (!s || *s < '0' || *s > '9') return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno) return 0;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') end += *end == 'i' && end[1] == 'B' ? 2 : 1;
    return *end ? 0 : (uint64_t)v;
}

/* The flow-control budget each peer gets when nobody says: DIST_EAGER_BYTES,
   less in a large world, so that all peers together may park at most
   256 MiB here (and never less than 256 KiB each). */
static uint64_t dist__default_budget(int world) {
    uint64_t share = world > 1 ? ((uint64_t)256 << 20) / (uint64_t)(world - 1) : DIST_EAGER_BYTES;
    return DIST__MIN((uint64_t)DIST_EAGER_BYTES, DIST__MAX(share, (uint64_t)256 << 10));
}

/* Rank and world size from the first pair of variables that is set. */
static int dist__env_rank_world(int *rank, int *world, const char **from) {
    static const char *pairs[][2] = {
        { "RANK", "WORLD_SIZE" }, { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
        { "PMI_RANK", "PMI_SIZE" }, { "SLURM_PROCID", "SLURM_NTASKS" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *r = dist__getenv(pairs[i][0]), *w = dist__getenv(pairs[i][1]);
        if (!r || !w) continue;
        *from = pairs[i][0];
        return dist__parse_int(r, rank) || dist__parse_int(w, world) ? -1 : 1;
    }
    return 0;
}

DIST_API dist_result dist_env_rank(int *rank, int *world_size) {
    int r = -1, w = 0, got;
    const char *from = "RANK";
    if (!rank || !world_size) return dist__fail(NULL, DIST_ERR_INVALID, "dist_env_rank: NULL rank or world_size");
    got = dist__env_rank_world(&r, &w, &from);
    if (got < 0) return dist__fail(NULL, DIST_ERR_INIT, "dist_env_rank: %s or its world size is not a number", from);
    if (got == 0) return dist__fail(NULL, DIST_ERR_INIT, "dist_env_rank: no rank in the environment: set RANK and WORLD_SIZE (or run under distrun, mpirun or srun)");
    if (w < 1 || w > DIST__MAX_WORLD || r < 0 || r >= w)
        return dist__fail(NULL, DIST_ERR_INIT, "dist_env_rank: rank %d of world size %d (from %s) is out of range", r, w, from);
    *rank = r;
    *world_size = w;
    return DIST_OK;
}

/* "?rank=1&world_size=4" at the end of a URL. */
static void dist__url_query(const char *url, int *rank, int *world) {
    const char *q = strchr(url, '?');
    while (q && *q) {
        const char *v = strchr(q + 1, '=');
        char buf[24];
        size_t n;
        int x;
        if (!v) break;
        n = strcspn(v + 1, "&");
        if (n < sizeof buf) {
            memcpy(buf, v + 1, n); buf[n] = 0;
            if (dist__parse_int(buf, &x) == 0) {
                if (strncmp(q + 1, "rank=", 5) == 0) *rank = x;
                else if (strncmp(q + 1, "world_size=", 11) == 0) *world = x;
            }
        }
        q = strchr(v, '&');
    }
}

/* This launch's identity: cfg.run_id, DIST_RUN_ID, or the job (and step)
   of the launcher that started us, hashed to 64 bits (never 0: 0 is none). */
static void dist__run_id_from(const dist_config *cfg, dist__setup *s) {
    static const char *const vars[] = { "DIST_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid" };
    const char *v = cfg->run_id, *name = "cfg.run_id";
    char buf[160];
    uint8_t h[32];
    for (size_t i = 0; !v && i < sizeof vars / sizeof vars[0]; i++)
        if ((v = dist__getenv(vars[i])) != NULL) name = vars[i];
    s->run_id = 0;
    s->run_from[0] = 0;
    if (!v || !*v) return;
    if (strcmp(name, "SLURM_JOB_ID") == 0 && dist__getenv("SLURM_STEP_ID")) {   /* one step of the job */
        dist__format(buf, sizeof buf, "%s.%s", v, dist__getenv("SLURM_STEP_ID"));
        v = buf;
    }
    dist__sha256(v, strlen(v), h);
    s->run_id = dist__get64(h);
    if (!s->run_id) s->run_id = 1;
    dist__format(s->run_from, sizeof s->run_from, "%s=%.60s", name, v);
}

/* cfg.timeout_ms, else DIST_TIMEOUT seconds, else 300 s; -1 when
   DIST_TIMEOUT is not a number of seconds from 0.001 to 2e6. */
static int dist__timeout_from(const dist_config *cfg, int *ms) {
    const char *t = dist__getenv("DIST_TIMEOUT");
    char *end = NULL;
    double sec;
    if (cfg->timeout_ms > 0) { *ms = cfg->timeout_ms; return 0; }
    sec = t ? strtod(t, &end) : 300.0;
    if ((t && (end == t || *end)) || !(sec >= 0.001) || sec > 2e6) return -1;
    *ms = (int)(sec * 1000.0 + 0.5);
    return 0;
}

static dist_result dist__setup_from(const dist_config *cfg, dist__setup *s) {
    const char *url = cfg->init_method ? cfg->init_method : dist__getenv("DIST_INIT_METHOD");
    const char *secret = cfg->secret ? cfg->secret : dist__getenv("DIST_SECRET");
    const char *from = "the config";
    int qrank = -1, qworld = -1, fd = -1;
    memset(s, 0, sizeof *s);
    s->listen_fd = DIST__NO_SOCKET;
    if (!url) url = "env://";
    s->ifname = cfg->socket_ifname ? cfg->socket_ifname : dist__getenv("DIST_SOCKET_IFNAME");
    dist__key_from(secret, &s->key);
    if (dist__timeout_from(cfg, &s->timeout_ms) != 0)
        return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_TIMEOUT=%s is not a number of seconds from 0.001 to 2e6", dist__getenv("DIST_TIMEOUT"));
    /* where the store is */
    if (strncmp(url, "env://", 6) == 0) {
        const char *a = dist__getenv("MASTER_ADDR"), *p = dist__getenv("MASTER_PORT");
        s->method = 'e';
        if (!a) return dist__fail(NULL, DIST_ERR_INIT, "init env://: MASTER_ADDR is not set (the host where rank 0 runs)");
        if (!p) return dist__fail(NULL, DIST_ERR_INIT, "init env://: MASTER_PORT is not set (a free port on MASTER_ADDR)");
        if (strlen(a) >= sizeof s->host) return dist__fail(NULL, DIST_ERR_INIT, "init env://: MASTER_ADDR is too long");
        snprintf(s->host, sizeof s->host, "%s", a);
        if (dist__parse_int(p, &s->port) || s->port <= 0 || s->port > 65535)
            return dist__fail(NULL, DIST_ERR_INIT, "init env://: MASTER_PORT=%s is not a port number", p);
        if (s->host[0] == '[') {   /* MASTER_ADDR=[::1] */
            size_t n = strlen(s->host);
            if (n > 2 && s->host[n - 1] == ']') { memmove(s->host, s->host + 1, n - 2); s->host[n - 2] = 0; }
        }
    } else if (strncmp(url, "tcp://", 6) == 0) {
        s->method = 't';
        if (dist__split_hostport(url + 6, s->host, sizeof s->host, &s->port) != 0)
            return dist__fail(NULL, DIST_ERR_INIT, "init: \"%s\" is not tcp://host:port (IPv6: tcp://[::1]:port)", url);
    } else if (strncmp(url, "file://", 7) == 0) {
        size_t n = strcspn(url + 7, "?");
        s->method = 'f';
        if (n == 0 || n >= sizeof s->path || url[7] != '/')
            return dist__fail(NULL, DIST_ERR_INIT, "init: \"%s\" is not file:///absolute/path", url);
        memcpy(s->path, url + 7, n); s->path[n] = 0;
    } else {
        return dist__fail(NULL, DIST_ERR_INIT, "init: unknown init method \"%s\" (env://, tcp://host:port, file:///path)", url);
    }
    dist__run_id_from(cfg, s);
    s->join = cfg->join;
    if (!s->join && dist__getenv("DIST_JOINING")) {
        const char *v = dist__getenv("DIST_JOINING");
        if (strcmp(v, "1") == 0) s->join = 1;
        else if (*v && strcmp(v, "0") != 0) return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_JOINING=%s is not 0 or 1", v);
    }
    /* who we are */
    dist__url_query(url, &qrank, &qworld);
    if (cfg->world_size > 0) { s->rank = cfg->rank; s->world = cfg->world_size; }
    else if (qworld > 0) { s->world = qworld; s->rank = qrank; from = "the URL"; }
    else {
        int got = dist__env_rank_world(&s->rank, &s->world, &from);
        if (got < 0 && !s->join) return dist__fail(NULL, DIST_ERR_INIT, "init: %s or its world size is not a number", from);
        if (got <= 0 && s->join) { s->rank = 0; s->world = 1; }      /* a newcomer learns both from the running ranks */
        else if (got == 0)
            return dist__fail(NULL, DIST_ERR_INIT, "init: world size unknown: set RANK and WORLD_SIZE (or run under "
                                                   "distrun, mpirun or srun), or set cfg.rank and cfg.world_size");
        if (qrank >= 0) s->rank = qrank;
    }
    if (s->join && (s->world < 1 || s->world > DIST__MAX_WORLD || s->rank < 0 || s->rank >= s->world)) { s->rank = 0; s->world = 1; }
    if (s->world < 1 || s->world > DIST__MAX_WORLD || s->rank < 0 || s->rank >= s->world)
        return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d of world size %d (from %s) is out of range", s->rank, s->world, from);
    s->max_joins = DIST__MAX(64, s->world);
    if (dist__getenv("DIST_MAX_JOINS") &&
        (dist__parse_int(dist__getenv("DIST_MAX_JOINS"), &s->max_joins) != 0 || s->max_joins < 0 || s->max_joins > DIST__MAX_WORLD))
        return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_MAX_JOINS=%s is not a number from 0 to %d", dist__getenv("DIST_MAX_JOINS"), DIST__MAX_WORLD);
    s->spin_us = cfg->spin_us;
    if (s->spin_us == 0) {
        const char *v = dist__getenv("DIST_SPIN_US");
        if (!v) s->spin_us = 200;
        else if (dist__parse_int(v, &s->spin_us) != 0 || s->spin_us < 0 || s->spin_us > 10000000)
            return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_SPIN_US=%s is not a number of microseconds", v);
    }
    if (s->spin_us < 0) s->spin_us = 0;
    {
        const char *t = cfg->transport ? cfg->transport : dist__getenv("DIST_TRANSPORT");
        if (!t || !*t || strcmp(t, "auto") == 0 || strcmp(t, "shm") == 0) s->shm = 1;
        else if (strcmp(t, "tcp") == 0) s->shm = 0;
        else if (strcmp(t, "mixed") == 0) s->shm = 2;      /* odd ranks: TCP only (tests of mixed jobs) */
        else return dist__fail(NULL, DIST_ERR_INIT, "init: transport \"%s\" is not auto, tcp or mixed", t);
    }
    if (cfg->eager_bytes) s->eager = (uint64_t)cfg->eager_bytes;
    else if (dist__getenv("DIST_EAGER_BYTES") && (s->eager = dist__parse_bytes(dist__getenv("DIST_EAGER_BYTES"))) == 0)
        return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_EAGER_BYTES=%s is not a number of bytes (K, M, G suffixes)", dist__getenv("DIST_EAGER_BYTES"));
    if (s->eager && (s->eager < 4096 || s->eager > DIST__MAX_MESSAGE))
        return dist__fail(NULL, DIST_ERR_INIT, "init: a flow-control budget of %llu byte%s per peer is outside 4 KiB..1 TiB",
                          (unsigned long long)s->eager, DIST__PLURAL(s->eager));
    if ((s->algo = dist__algo_from_env()) < 0)
        return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_ALGO=%s is not one of ring, tree, halving, direct, shm, slots, hier", dist__getenv("DIST_ALGO"));
    s->hosted = cfg->store_hosted;
    if (!s->hosted && dist__getenv("DIST_STORE_HOSTED")) {
        const char *v = dist__getenv("DIST_STORE_HOSTED");
        if (strcmp(v, "1") == 0) s->hosted = 1;
        else if (*v && strcmp(v, "0") != 0) return dist__fail(NULL, DIST_ERR_INIT, "init: DIST_STORE_HOSTED=%s is not 0 or 1", v);
    }
    if (s->hosted && s->method == 'f')
        return dist__fail(NULL, DIST_ERR_INIT, "init: a hosted store (DIST_STORE_HOSTED) is found by address (env:// or tcp://), not file://");
    /* an inherited listening socket for the store (dist_spawn, distrun) */
    if (cfg->store_listen_fd > 0) fd = cfg->store_listen_fd - 1;
    else if (dist__parse_int(dist__getenv("DIST_STORE_LISTEN_FD"), &fd) != 0) fd = -1;
    if (fd >= 0 && s->rank == 0 && !s->hosted && !s->join) {
        if (!dist__sock_is_listening((dist__socket)fd))
            return dist__fail(NULL, DIST_ERR_INIT, "init: inherited store socket %d is not a listening socket", fd);
        s->listen_fd = (dist__socket)fd;
    }
    return DIST_OK;
}

/* A store hosted outside the ranks (see dist_store_host_start): rank 0's
   server, in the launcher's process. */
/* Two steps, so that a launcher that forks (dist_spawn, distrun) binds
   the port first, forks its ranks, and only then starts the store's
   thread: a fork taken while another thread holds a lock (an allocator's)
   leaves the child that lock, held forever. */
struct dist_store_host {
    dist__socket ls;            /* listening, until the store takes it */
    dist__store_server *sv;     /* serving (dist__store_host_run) */
    int port, world, timeout_ms;
    dist__key key;
    dist__log log;
    uint64_t run_id;
    char run_from[96];
    int ended_rank;             /* dist_store_host_note_failure: the rank the launcher saw fail first (-1: none) */
    char ended_what[160];       /* ... and how ("was killed by signal 9 (Killed)") */
};

/* Binds and listens; nothing runs yet. */
static dist_result dist__store_host_open(dist_store_host **host, const dist_config *cfg, int world_size, const char *addr, int port) {
    dist_config zero;
    dist__setup s;
    dist_store_host *h;
    char why[300];
    const char *secret;
    if (host) *host = NULL;
    if (!host) return dist__fail(NULL, DIST_ERR_INVALID, "store host: NULL `host` pointer");
    if (world_size < 1 || world_size > DIST__MAX_WORLD || port < 0 || port > 65535)
        return dist__fail(NULL, DIST_ERR_INVALID, "store host: a world of %d ranks (1 to %d) on port %d", world_size, DIST__MAX_WORLD, port);
    memset(&zero, 0, sizeof zero);
    if (!cfg) cfg = &zero;
    memset(&s, 0, sizeof s);
    if ((h = (dist_store_host *)DIST_MALLOC(sizeof *h)) == NULL) return dist__fail(NULL, DIST_ERR_NOMEM, "store host: out of memory");
    memset(h, 0, sizeof *h);
    h->ended_rank = -1;
    secret = cfg->secret ? cfg->secret : dist__getenv("DIST_SECRET");
    dist__key_from(secret, &h->key);
    if (dist__timeout_from(cfg, &h->timeout_ms) != 0) {
        DIST_FREE(h);
        return dist__fail(NULL, DIST_ERR_INIT, "store host: DIST_TIMEOUT=%s is not a number of seconds from 0.001 to 2e6", dist__getenv("DIST_TIMEOUT"));
    }
    dist__run_id_from(cfg, &s);
    h->run_id = s.run_id;
    memcpy(h->run_from, s.run_from, sizeof h->run_from);
    if (dist__log_setup(&h->log, cfg, "store host") != DIST_OK) {
        DIST_FREE(h);
        return DIST_ERR_INIT;
    }
    h->world = world_size;
    h->ls = dist__sock_listen(addr, DIST__IP_ANY, port, why, sizeof why);
    if (h->ls == DIST__NO_SOCKET) {
        DIST_FREE(h);
        return dist__fail(NULL, DIST_ERR_INIT, "store host: cannot listen on %s port %d: %s", addr ? addr : "every interface", port, why);
    }
    dist__sock_name(h->ls, 0, why, sizeof why, &h->port);
    dist__logf(&h->log, DIST_LOG_INFO, "store host: the store of a job of %d rank%s listens on %s:%d", world_size, DIST__PLURAL(world_size), why, h->port);
    *host = h;
    return DIST_OK;
}

/* Starts the store's thread on the socket. */
static dist_result dist__store_host_run(dist_store_host *h) {
    h->sv = dist__store_server_start(h->ls, h->world, h->timeout_ms, &h->key, &h->log, h->run_id, h->run_from);
    h->ls = DIST__NO_SOCKET;   /* (the store's now, or closed) */
    return h->sv ? DIST_OK : dist__fail(NULL, DIST_ERR_INIT, "store host: could not start the store (out of memory or threads)");
}

DIST_API void dist_store_host_stop(dist_store_host *host) {
    if (!host) return;
    dist__store_server_stop(host->sv);
    dist__close(host->ls);
    DIST_FREE(host);
}

DIST_API dist_result dist_store_host_start(dist_store_host **host, const dist_config *cfg, int world_size, const char *addr, int port) {
    dist_result r = dist__store_host_open(host, cfg, world_size, addr, port);
    if (r == DIST_OK && (r = dist__store_host_run(*host)) != DIST_OK) { dist_store_host_stop(*host); *host = NULL; }
    return r;
}

DIST_API int dist_store_host_port(const dist_store_host *host) { return host ? host->port : 0; }

/* file:// : rank 0 writes "dist-rendezvous 2 <host> <port> <world> <run id>"
   under a file lock; the others read it, and take it only when the run id
   (hashed, hex; 0: none) is theirs: a file another launch wrote, or one
   left from an earlier run, is not. */
/* A rendezvous file whose store still answers belongs to a job that is
   forming or running: it is not replaced (two rank 0s on one file). */
static int dist__file_in_use(const char *old, size_t len, void *arg) {
    char host[256], why[200];
    int ver = 0, port = 0;
    dist__socket c;
    (void)len;
    if (sscanf(old, "dist-rendezvous %d %255s %d", &ver, host, &port) != 3 || port <= 0 || port > 65535) return 0;
    c = dist__sock_connect(host, port, dist__now_ms() + 500, 500, why, sizeof why);
    if (c == DIST__NO_SOCKET) return 0;              /* stale: its job is gone */
    dist__close(c);
    dist__format((char *)arg, 300, "%s:%d", host, port);
    return 1;
}

static dist_result dist__file_publish(const dist__setup *s, const char *host, int port, int64_t deadline) {
    char line[400], other[300] = "";
    int n = snprintf(line, sizeof line, "dist-rendezvous 2 %s %d %d %016llx\n", host, port, s->world, (unsigned long long)s->run_id);
    int r = dist__file_replace_locked(s->path, line, (size_t)n, deadline, dist__file_in_use, other);
    if (r == -3)
        return dist__fail(NULL, DIST_ERR_INIT, "init file://%s: another job's rank 0 wrote it, and its store at %s still answers: "
                          "are two jobs using this file?", s->path, other);
    if (r == -1) return dist__fail(NULL, DIST_ERR_INIT, "init file://%s: cannot create it: %s", s->path, dist__err_text(dist__errno()));
    if (r != 0) return dist__fail(NULL, DIST_ERR_INIT, "init file://%s: cannot write it: %s", s->path, dist__err_text(dist__errno()));
    return DIST_OK;
}

/* Returns 1 and the store's address when the file holds one. */
/* 1 and the store's address when the file holds this launch's; 0 when it
   holds nothing yet (or nothing readable); -1 when it holds another
   launch's (`why` says how it differs). */
static int dist__file_read(const dist__setup *s, char *host, size_t cap, int *port, char *why, size_t wcap, int64_t deadline) {
    char line[400], fmt[64];
    int ver = 0, world = 0;
    unsigned long long run = 0;
    dist__ssize n = dist__file_read_locked(s->path, line, sizeof line - 1, deadline);
    if (n <= 0) return 0;
    line[n] = 0;
    snprintf(fmt, sizeof fmt, "dist-rendezvous %%d %%%zus %%d %%d %%llx", cap - 1);
    if (sscanf(line, fmt, &ver, host, port, &world, &run) != 5 || ver != 2 || *port <= 0 || *port > 65535) return 0;
    if (run != s->run_id) {
        dist__format(why, wcap, "it holds the rendezvous of another launch (%s run id)", run ? "another" : "no");
        return -1;
    }
    if (world != s->world) {
        dist__format(why, wcap, "it holds the rendezvous of a job of %d rank%s, and this one has %d", world, DIST__PLURAL(world), s->world);
        return -1;
    }
    return 1;
}

/* Reads the store's refusal reason after a hello with a non-zero status. */
static dist_result dist__store_refused(dist_t *d, const dist__setup *s, int64_t deadline, int *refused) {
    char why[300];
    uint8_t lb[4];
    uint32_t len;
    *refused = 1;
    if (dist__io_all(d->store_fd, lb, 4, 0, deadline) == 0 && (len = dist__get32(lb)) < sizeof why &&
        dist__io_all(d->store_fd, why, len, 0, deadline) == 0) why[len] = 0;
    else snprintf(why, sizeof why, "no reason given");
    return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d of %d: the store %s (%s:%d) refused this process: %s",
                      s->rank, s->world, s->hosted ? "of the launcher" : "on rank 0", s->host, s->port, why);
}

/* hello ->, <- hello + proof, proof ->, <- verdict (a hello whose status
   says whether the store took this rank). */
static dist_result dist__store_hello_exchange(dist_t *d, const dist__setup *s, int64_t deadline, int *refused, int *dropped) {
    dist__hello h;
    uint8_t mine[DIST__HELLO_SIZE], theirs[DIST__HELLO_SIZE], proof[DIST__PROOF_SIZE];
    char why[300];
    int r;
    *refused = 0;
    *dropped = 0;
    dist__hello_make(&h, DIST__PURPOSE_STORE, s->run_id, s->rank, s->world, &s->key, mine);   /* job: the launch */
    if (s->join) { h.flags |= DIST__HELLO_JOIN; dist__hello_encode(&h, mine); }
    if ((r = dist__io_all(d->store_fd, mine, sizeof mine, 1, deadline)) != 0 ||
        (r = dist__io_all(d->store_fd, theirs, sizeof theirs, 0, deadline)) != 0) {
        *dropped = r != -3;   /* closed or reset, not timed out */
        return dist__fail(NULL, DIST_ERR_INIT, "init: saying hello to the store at %s:%d: %s", s->host, s->port, dist__io_error(r));
    }
    if (dist__hello_decode(theirs, &h, why, sizeof why) != 0)
        return dist__fail(NULL, DIST_ERR_INIT, "init: the store at %s:%d answered strangely: %s", s->host, s->port, why);
    if (h.status != 0) return dist__store_refused(d, s, deadline, refused);
    if ((r = dist__io_all(d->store_fd, proof, sizeof proof, 0, deadline)) != 0) {
        *dropped = r != -3;   /* closed or reset, not timed out */
        return dist__fail(NULL, DIST_ERR_INIT, "init: the store at %s:%d: %s", s->host, s->port, dist__io_error(r));
    }
    if (dist__proof_check(&s->key, 'A', theirs, mine, proof, why, sizeof why) != 0)
        return dist__fail(NULL, DIST_ERR_INIT,
                          "init: rank %d of %d and the store %s (%s:%d) do not share a secret (check DIST_SECRET on both): the store: %s",
                          s->rank, s->world, s->hosted ? "of the launcher" : "on rank 0", s->host, s->port, why);
    dist__proof(&s->key, 'C', mine, theirs, proof);
    if ((r = dist__io_all(d->store_fd, proof, sizeof proof, 1, deadline)) != 0 ||
        (r = dist__io_all(d->store_fd, theirs, sizeof theirs, 0, deadline)) != 0) {
        *dropped = r != -3;   /* closed or reset, not timed out */
        return dist__fail(NULL, DIST_ERR_INIT, "init: proving the secret to the store at %s:%d: %s", s->host, s->port, dist__io_error(r));
    }
    if (dist__hello_decode(theirs, &h, why, sizeof why) != 0)
        return dist__fail(NULL, DIST_ERR_INIT, "init: the store at %s:%d answered strangely: %s", s->host, s->port, why);
    if (h.status != 0) return dist__store_refused(d, s, deadline, refused);
    return DIST_OK;
}

/* Connects this rank to the store, hosting it first on rank 0. */
static dist_result dist__store_join(dist_t *d, dist__setup *s, const dist__log *log, int64_t deadline) {
    char why[300], lhost[64] = "?";
    const char *who = s->hosted ? "the launcher" : "rank 0";
    int refused = 0, dropped = 0, drops = 0, backoff = 5, lport = 0, told = 0;
    dist_result r;
    if (s->rank == 0 && !s->hosted && !s->join) {
        dist__socket ls = s->listen_fd;
        if (s->method == 'f') {
            char adv[256];
            if (ls == DIST__NO_SOCKET) ls = dist__sock_listen(NULL, DIST__IPV4, 0, why, sizeof why);
            if (ls == DIST__NO_SOCKET) return dist__fail(NULL, DIST_ERR_INIT, "init file://: store: %s", why);
            /* Advertise the address the socket is bound to; a wildcard
               socket is reachable on the interface asked for, or the
               host's first address. */
            dist__sock_name(ls, 0, adv, sizeof adv, &s->port);
            if (strcmp(adv, "0.0.0.0") == 0 || strcmp(adv, "::") == 0) {
                if (!(s->ifname && dist__ifname_address(s->ifname, adv, sizeof adv) == 0)) dist__default_address(adv, sizeof adv);
            }
            snprintf(s->host, sizeof s->host, "%s", adv);
            if (dist__file_publish(s, s->host, s->port, deadline) != DIST_OK) { dist__close(ls); return DIST_ERR_INIT; }
            snprintf(d->file_path, sizeof d->file_path, "%s", s->path);
        } else if (ls == DIST__NO_SOCKET) {
            ls = dist__sock_listen(s->host, DIST__IP_ANY, s->port, why, sizeof why);
            if (ls == DIST__NO_SOCKET && !dist__err_addr_in_use(dist__errno())) ls = dist__sock_listen(NULL, DIST__IP_ANY, s->port, why, sizeof why);
            if (ls == DIST__NO_SOCKET)
                return dist__fail(NULL, DIST_ERR_INIT, "init: rank 0 cannot host the store: %s (is another job using port %d?)", why, s->port);
        }
        if (dist__log_on(log, DIST_LOG_INFO)) dist__sock_name(ls, 0, lhost, sizeof lhost, &lport);
        d->server = dist__store_server_start(ls, s->world, s->timeout_ms, &s->key, log, s->run_id, s->run_from);
        if (!d->server) return dist__fail(NULL, DIST_ERR_INIT, "init: rank 0 could not start the store (out of memory or threads)");
    }
    for (;;) {
        if (s->method == 'f' && s->rank != 0) {
            int got;
            why[0] = 0;
            /* another launch's file: rank 0 of ours may still replace it */
            while ((got = dist__file_read(s, s->host, sizeof s->host, &s->port, why, sizeof why, deadline)) != 1) {
                if (dist__now_ms() >= deadline)
                    return dist__fail(NULL, DIST_ERR_TIMEOUT, "init file://%s: rank 0 did not write the rendezvous file within %.1f s%s%s%s",
                                      s->path, s->timeout_ms / 1000.0, why[0] ? " (" : "", why,
                                      why[0] ? ": are two jobs using this file?)" : "");
                if (dist__wait_note_due(d->note))
                    dist__wait_note_say(d->note, "the rendezvous file %s names no store of this launch yet%s%s%s (rank 0 writes it: "
                                        "has it started?)", s->path, why[0] ? " (" : "", why, why[0] ? ")" : "");
                dist__sleep_ms(20);
            }
        }
        if (!told) {   /* where the store is, once known */
            told = 1;
            if (d->note) dist__format(d->note->store, sizeof d->note->store, "%s:%d", s->host, s->port);
            if (d->server)
                dist__logf(log, DIST_LOG_INFO, "init: rank 0 of %d hosts the store at %s:%d (listening on %s:%d)%s%s; timeout %.1f s", s->world,
                           s->host, s->port, lhost, lport, s->method == 'f' ? ", named in " : "", s->method == 'f' ? s->path : "",
                           s->timeout_ms / 1000.0);
            else if (s->join)
                dist__logf(log, DIST_LOG_INFO, "init (joining): store at %s:%d (%s's); timeout %.1f s", s->host, s->port, who, s->timeout_ms / 1000.0);
            else
                dist__logf(log, DIST_LOG_INFO, "init: rank %d of %d: store at %s:%d (%s's)%s%s; timeout %.1f s", s->rank, s->world, s->host, s->port,
                           who, s->method == 'f' ? ", named in " : "", s->method == 'f' ? s->path : "", s->timeout_ms / 1000.0);
        }
        d->store_fd = dist__connect_retry(s->host, s->port,
                                          s->method == 'f' || drops ? DIST__MIN(deadline, dist__now_ms() + 1000) : deadline, why, sizeof why,
                                          log, d->note, s->hosted ? "the store of the launcher" : "the store of rank 0");
        if (d->store_fd == DIST__NO_SOCKET) {
            if (drops)   /* a store that is there answers at once */
                return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d: the store of %s (%s:%d) closed this rank's connection during "
                                  "its handshake, and takes no new one: %s (did %s exit?)", s->rank, s->hosted ? "the launcher" : "rank 0",
                                  s->host, s->port, why, s->hosted ? "it" : "rank 0");
            if (s->method != 'f' || dist__now_ms() >= deadline)
                return dist__fail(NULL, DIST_ERR_TIMEOUT, "init: rank %d could not reach the store of %s within %.1f s: %s",
                                  s->rank, s->hosted ? "the launcher" : "rank 0", s->timeout_ms / 1000.0, why);
            continue;
        }
        /* Dropped in the middle of the handshake (a store crowded by
           strangers drops the least advanced callers): call again. */
        r = dist__store_hello_exchange(d, s, deadline, &refused, &dropped);
        if (r == DIST_OK) dist__logf(log, DIST_LOG_DEBUG, "init: the store took this rank (hello and secret checked)");
        if (r == DIST_OK || !dropped || dist__now_ms() >= deadline) return r;
        dist__close(d->store_fd);
        d->store_fd = DIST__NO_SOCKET;
        if (++drops == 1) dist__logf(log, DIST_LOG_INFO, "init: rank %d: the store dropped this rank during its handshake; calling again", s->rank);
        dist__logf(log, DIST_LOG_DEBUG, "init: the store dropped this rank during its handshake (%d time%s); calling again in %d ms", drops,
                   DIST__PLURAL(drops), DIST__MIN(backoff, dist__ms_left(deadline, 1000)));
        dist__sleep_ms(DIST__MIN(backoff, dist__ms_left(deadline, 1000)));
        backoff = DIST__MIN(backoff * 2, 500);
    }
}

/* After a rendezvous wait timed out: who is missing, and did the store
   turn anyone away? */
static dist_result dist__rendezvous_timeout(dist_t *d, const char *waiting_for) {
    char rej[256] = "", trouble[300] = "";
    const char *keys[2] = { "dist/rejected", "dist/trouble" };
    char *vals[2];
    vals[0] = rej; vals[1] = trouble;
    for (int i = 0; i < 2; i++) {
        size_t len = 0, cap = i ? sizeof trouble : sizeof rej;
        int exists = 0;
        if (dist_store_check(d, &keys[i], 1, &exists) == DIST_OK && exists &&
            dist_store_get(d, keys[i], vals[i], cap - 1, &len) == DIST_OK) vals[i][len] = 0;
        else vals[i][0] = 0;
    }
    return dist__fail(NULL, DIST_ERR_TIMEOUT, "init: rank %d of %d timed out after %.1f s waiting for %s%s%s%s%s", d->rank, d->world,
                      d->timeout_ms / 1000.0, waiting_for, rej[0] ? "; the store refused a process: " : "", rej,
                      trouble[0] ? "; " : "", trouble);
}

/* This rank ran out of descriptors (error e) during the rendezvous: the
   others, who will wait for it, learn why from the store. */
static void dist__rendezvous_trouble(dist_t *d, int e) {
    char t[300], text[200];
    const char *key = "dist/trouble";
    int exists = 1;
    dist__no_fds_text(text, sizeof text, e, d->world, d->rank);
    dist__format(t, sizeof t, "rank %d: %s", d->rank, text);
    dist__logf(&d->eng->log, DIST_LOG_WARN, "%s", t);
    if (dist_store_check(d, &key, 1, &exists) == DIST_OK && !exists) dist_store_set(d, key, t, strlen(t));
}

/* dist_store_get of a key rank `who` sets while the job forms (its mesh
   address; rank 0's job id): with a wait note, in steps, saying what it
   waits for (`what`: "rank 2 has not published its address"); then
   DIST_ERR_TIMEOUT at the deadline, the sentence left to the caller. */
static dist_result dist__rendezvous_get(dist_t *d, const char *key, char *val, size_t cap, size_t *len, int who, const char *what,
                                        int64_t deadline) {
    while (d->note) {
        int64_t now = dist__now_ms(), until = DIST__MIN(deadline, d->note->next_ms);
        int there = 0;
        dist_result res;
        if (now >= deadline) return DIST_ERR_TIMEOUT;
        if (until > now) {
            if ((res = dist__store_wait_step(d, key, (int)(until - now), &there)) != DIST_OK) return res;
            if (there) break;
            if (dist__now_ms() >= deadline) return DIST_ERR_TIMEOUT;
        }
        if (dist__wait_note_due(d->note))
            dist__wait_note_say(d->note, "%s in the store at %s yet (has rank %d started? does it reach that address, with this job's "
                                "secret?)", what, d->note->store, who);
    }
    return dist_store_get(d, key, val, cap, len);
}

typedef struct dist__pending_conn {
    dist__socket fd;
    int expect_rank;                 /* connector side: the rank we called; -1 = accepted */
    int hello_checked;               /* its hello passed, our proof went out */
    uint8_t mine[DIST__HELLO_SIZE];  /* the hello we sent on it */
    uint8_t buf[DIST__HELLO_SIZE + DIST__PROOF_SIZE];
    size_t got;
} dist__pending_conn;

/* Where the connection to engine rank j goes (the peer itself at init),
   and whether this rank calls j (how 1) or accepts its call (how 2). */
static dist__socket *dist__mesh_slot(dist_t *d, int j) { return d->mesh_fds ? &d->mesh_fds[j] : &d->eng->peers[j].fd; }
static int dist__mesh_wants(const dist_t *d, int j, int how) {
    int me = d->eng->rank;
    if (j == me || j < 0 || j >= d->eng->world) return 0;
    return d->mesh_plan ? d->mesh_plan[j] == how : how == 1 ? j < me : j > me;
}

/* Growing: member j (whom this rank calls) is gone (res DIST_ERR_PEER_LOST):
   the mesh goes on without it (plan 3), and it is marked dead once the
   mesh is installed.  1 when so taken. */
static int dist__mesh_unreachable(dist_t *d, int j, dist_result res) {
    if (!d->mesh_plan || res != DIST_ERR_PEER_LOST) return 0;
    ((unsigned char *)d->mesh_plan)[j] = 3;
    dist__logf(&d->eng->log, DIST_LOG_INFO, "growing: %s; going on without it", dist_error_message(NULL));
    return 1;
}

/* Opens the handshake on a fresh connection: our hello. */
static int dist__mesh_greet(dist_t *d, dist__pending_conn *pc, int64_t deadline) {
    dist__hello h;
    dist__hello_make(&h, DIST__PURPOSE_MESH, d->job, d->eng->rank, d->eng->world, &d->key, pc->mine);
    pc->hello_checked = 0;
    pc->got = 0;
    return dist__io_all(pc->fd, pc->mine, DIST__HELLO_SIZE, 1, deadline);
}

/* Advances the handshake on a pending connection after a read: its hello
   checked (then our proof goes out), its proof checked.  1: the peer is
   in the mesh; 0: not yet; -1: refused, the connection closed, `why`
   says why. */
static int dist__mesh_handshake(dist_t *d, dist__pending_conn *pc, int64_t deadline, char *why, size_t cap, dist__log_budget *lb) {
    dist__engine *e = d->eng;
    dist__hello h;
    char me = pc->expect_rank >= 0 ? 'C' : 'A', peer = me == 'C' ? 'A' : 'C';
    if (dist__hello_prefix_check(pc->buf, pc->got, why, cap) != 0) goto refuse;
    if (pc->got < DIST__HELLO_SIZE) return 0;
    if (dist__hello_decode(pc->buf, &h, why, cap) != 0) goto refuse;
    if (!pc->hello_checked) {
        uint8_t proof[DIST__PROOF_SIZE];
        if (h.purpose != DIST__PURPOSE_MESH) { dist__format(why, cap, "not a mesh connection"); goto refuse; }
        if (h.job != d->job) { dist__format(why, cap, "it belongs to another job"); goto refuse; }
        if (h.world != e->world) { dist__format(why, cap, "it says world size %d", (int)h.world); goto refuse; }
        if (pc->expect_rank >= 0 ? h.rank != pc->expect_rank : (!dist__mesh_wants(d, h.rank, 2) || *dist__mesh_slot(d, h.rank) != DIST__NO_SOCKET)) {
            dist__format(why, cap, "it claims rank %d", (int)h.rank);
            goto refuse;
        }
        dist__proof(&d->key, me, pc->mine, pc->buf, proof);
        if (dist__io_all(pc->fd, proof, sizeof proof, 1, deadline) != 0) { dist__format(why, cap, "it hung up"); goto refuse; }
        pc->hello_checked = 1;
    }
    if (pc->got < DIST__HELLO_SIZE + DIST__PROOF_SIZE) return 0;
    if (dist__proof_check(&d->key, peer, pc->buf, pc->mine, pc->buf + DIST__HELLO_SIZE, why, cap) != 0) goto refuse;
    if (*dist__mesh_slot(d, h.rank) != DIST__NO_SOCKET) { dist__format(why, cap, "rank %d is connected already", (int)h.rank); goto refuse; }
    if (dist__log_on(&e->log, DIST_LOG_DEBUG)) {
        char addr[64] = "?";
        int port = 0;
        dist__sock_name(pc->fd, 1, addr, sizeof addr, &port);
        dist__logf(&e->log, DIST_LOG_DEBUG, "mesh: %s rank %d %s %s:%d (handshake done)", me == 'C' ? "connected to" : "accepted",
                   (int)h.rank, me == 'C' ? "at" : "from", addr, port);
    }
    *dist__mesh_slot(d, h.rank) = pc->fd;
    pc->fd = DIST__NO_SOCKET;
    return 1;
refuse:
    if (pc->expect_rank < 0 && dist__log_budget_take(&e->log, lb, "mesh: dropped a connection"))
        dist__logf(&e->log, DIST_LOG_WARN, "mesh: dropped a connection: %s", why);
    dist__close(pc->fd);
    pc->fd = DIST__NO_SOCKET;
    return -1;
}

/* DIST_ERR_INIT when the store turned away a rank of another world size:
   the job cannot form, and every rank says why at once.  Rank 0, whose
   store the others ask, lingers a second so they can. */
static void dist__fatal_linger(dist_t *d, int64_t deadline_ms) {
    int64_t left = deadline_ms - dist__now_ms(), until = dist__now_ms() + DIST__MIN(DIST__MAX(left, (int64_t)1000), (int64_t)DIST__FATAL_LINGER_MS);
    dist__store_server *sv = d->server;
    while (sv && dist__now_ms() < until) {
        int told;
        dist__mutex_lock(&sv->lock);
        told = sv->all_told;
        dist__mutex_unlock(&sv->lock);
        if (told) break;   /* every rank that joined has learnt why and gone; the others will not come */
        dist__sleep_ms(10);
    }
}

static dist_result dist__rendezvous_fatal(dist_t *d, int64_t deadline_ms) {
    const char *key = "dist/fatal";
    char why[300];
    size_t len = 0;
    int exists = 0;
    if (dist_store_check(d, &key, 1, &exists) != DIST_OK || !exists) return DIST_OK;
    if (dist_store_get(d, key, why, sizeof why - 1, &len) != DIST_OK) len = 0;
    why[len] = 0;
    dist__fatal_linger(d, deadline_ms);
    return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d of %d: the job cannot form: %s", d->rank, d->world, why);
}

/* Without a run id, nothing tells two launches on one port apart but a
   rank claimed twice, and the second claimant of a careless double launch
   may come a little after the first launch's ranks formed a job with some
   of the other's.  So such a job waits DIST__SETTLE_MS after it formed,
   and fails (every rank, saying why) when a rank was claimed twice
   meanwhile.  Give a launch a run id (distrun, dist_spawn, srun, mpirun,
   torchrun and DIST_RUN_ID do) and init does not wait. */
static dist_result dist__settle(dist_t *d, int64_t deadline) {
    char v[8];
    size_t len = 0;
    dist_result r;
    if (d->rank == 0) {
        dist__sleep_ms((int)DIST__MIN((int64_t)DIST__SETTLE_MS, DIST__MAX(deadline - dist__now_ms(), (int64_t)0)));
        if ((r = dist__rendezvous_fatal(d, deadline)) != DIST_OK) return r;
        return dist_store_set(d, "dist/settled", "1", 1);
    }
    r = dist_store_get(d, "dist/settled", v, sizeof v, &len);
    return r == DIST_OK || r == DIST_ERR_INIT ? r : dist__rendezvous_timeout(d, "rank 0 to see the job settle");
}

/* Calls rank j (lower than this one) at the address it published, and
   says hello.  `quick`: after j hung up on this rank, j's listener must
   answer at once (a rank that exited refuses instead). */
/* Growing: whether newcomer j died while it joined (the store recorded
   its store connection's close, dist/join/gone/<ticket>); 1 with the
   sentence set, 0 when not (or when the store cannot say). */
static int dist__newcomer_gone(dist_t *d, int j) {
    char gk[48];
    const char *kp = gk;
    int gone = 0;
    dist__format(gk, sizeof gk, "dist/join/gone/%lld", (long long)(d->mesh_ticket0 + (j - d->mesh_new_first)));
    if (dist_store_check(d, &kp, 1, &gone) != DIST_OK || !gone) return 0;
    dist__fail(NULL, DIST_ERR_PEER_LOST, "newcomer rank %d died while it joined", j);
    return 1;
}

static dist_result dist__mesh_call(dist_t *d, int j, dist__pending_conn *pc, int quick, int64_t deadline) {
    char key[64], val[300], host[256], why[300], w_rank[24];
    size_t len = 0;
    int port = 0;
    dist_result res;
    snprintf(key, sizeof key, "%s%d", d->mesh_prefix[0] ? d->mesh_prefix : "dist/addr/", j);
    if (d->mesh_plan && d->mesh_ticket0 > 0 && j >= d->mesh_new_first) {
        /* growing, a newcomer calls one before it: that one may die before
           it publishes its address (the store records the death) */
        const char *kp = key;
        for (;;) {
            int there = 0;
            if ((res = dist_store_check(d, &kp, 1, &there)) != DIST_OK) return res;
            if (there) break;
            if (dist__newcomer_gone(d, j)) return DIST_ERR_PEER_LOST;
            if (dist__now_ms() >= deadline) break;        /* (the get below says so) */
            res = dist_store_wait(d, &kp, 1, 100);
            if (res != DIST_OK && res != DIST_ERR_TIMEOUT) return res;
        }
    }
    snprintf(why, sizeof why, "rank %d has not published its address", j);
    if ((res = dist__rendezvous_get(d, key, val, sizeof val - 1, &len, j, why, deadline)) != DIST_OK) {
        char w[64]; snprintf(w, sizeof w, "rank %d to publish its address", j);
        return res == DIST_ERR_INIT ? res : dist__rendezvous_timeout(d, w);
    }
    val[len] = 0;
    if (sscanf(val, "%255s %d", host, &port) != 2) return dist__fail(NULL, DIST_ERR_PROTOCOL, "init: rank %d published a bad address \"%s\"", j, val);
    if (d->mesh_plan) quick = 1;      /* growing: a member that refuses has died (it listened before it was counted) */
    snprintf(w_rank, sizeof w_rank, "rank %d", j);
    pc->fd = dist__connect_retry(host, port, quick ? DIST__MIN(deadline, dist__now_ms() + 1000) : deadline, why, sizeof why, &d->eng->log,
                                 d->note, w_rank);
    if (pc->fd == DIST__NO_SOCKET && d->mesh_plan)
        return dist__fail(NULL, DIST_ERR_PEER_LOST, "rank %d did not answer at %s:%d: %s", j, host, port, why);
    if (pc->fd == DIST__NO_SOCKET) {
        if (quick) return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d hung up on rank %d during the handshake and then refused it: %s (did it exit?)",
                                     j, d->rank, why);
        return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d cannot connect to rank %d: %s", d->rank, j, why);
    }
    pc->expect_rank = j;
    if (dist__mesh_greet(d, pc, deadline) != 0) {
        dist__close(pc->fd);
        pc->fd = DIST__NO_SOCKET;
        return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d could not greet rank %d at %s:%d", d->rank, j, host, port);
    }
    return DIST_OK;
}

/* Reads what a pending connection has and advances its handshake.  1: the
   peer is in the mesh; 0: not yet; -1: refused (`why` says why); -2: it
   hung up.  Either way the connection is closed on failure. */
static int dist__mesh_step(dist_t *d, dist__pending_conn *pc, int64_t deadline, char *why, size_t cap, dist__log_budget *lb) {
    dist__ssize r = dist__sock_recv(pc->fd, pc->buf + pc->got, sizeof pc->buf - pc->got);
    if (r > 0) pc->got += (size_t)r;
    else if (r < 0 && (dist__err_would_block(dist__errno()) || dist__err_interrupted(dist__errno()))) return 0;
    else {
        dist__close(pc->fd);
        pc->fd = DIST__NO_SOCKET;
        return -2;
    }
    return dist__mesh_handshake(d, pc, deadline, why, cap, lb);
}

/* Callers that hung up on this rank (strangers crowding its listener may
   have made it drop them) call again after a pause: 10 ms doubling to
   500 ms. */
typedef struct dist__mesh_retry { int64_t at; int pause_ms, drops; } dist__mesh_retry;

/* The wait note of a mesh still forming: the ranks not connected yet,
   those that have not published their address (not started, or not at
   the store: a wrong address, port or secret) apart from those that have
   (then the two do not reach each other, or have not yet). */
static void dist__mesh_note(dist_t *d, const dist__mesh_retry *retry) {
    char off[160] = "", on[160] = "", text[420] = "";
    int noff = 0, non = 0, more = 0;
    size_t lo = 0, ln = 0, lt = 0;
    for (int j = 0; j < d->eng->world; j++) {
        char key[64];
        const char *kp = key;
        int pub = 0;
        if (!(dist__mesh_wants(d, j, 1) || dist__mesh_wants(d, j, 2)) || *dist__mesh_slot(d, j) != DIST__NO_SOCKET) continue;
        if (noff + non >= 12) { more++; continue; }
        snprintf(key, sizeof key, "%s%d", d->mesh_prefix[0] ? d->mesh_prefix : "dist/addr/", j);
        if (dist_store_check(d, &kp, 1, &pub) != DIST_OK) return;
        if (pub) ln += (size_t)snprintf(on + ln, sizeof on - ln, "%s%d", non++ ? ", " : "", j);
        else lo += (size_t)snprintf(off + lo, sizeof off - lo, "%s%d", noff++ ? ", " : "", j);
    }
#define DIST__NOTE_ADD(...) (lt += lt < sizeof text ? (size_t)snprintf(text + lt, sizeof text - lt, __VA_ARGS__) : 0)
    if (noff)
        DIST__NOTE_ADD("%s %s, which %s not published %s address in the store at %s (%s started? %s reach that address, with this "
                       "job's secret?)", noff > 1 ? "ranks" : "rank", off, noff > 1 ? "have" : "has", noff > 1 ? "their" : "its",
                       d->note->store, noff > 1 ? "have they" : "has it", noff > 1 ? "do they" : "does it");
    if (non)
        DIST__NOTE_ADD("%s%s %s, which published %s address but %s not finished connecting to this rank (%s for another rank? or "
                       "cannot %s and this rank reach each other's address?)", noff ? "; " : "", non > 1 ? "ranks" : "rank", on,
                       non > 1 ? "their" : "its", non > 1 ? "have" : "has", non > 1 ? "are they waiting" : "is it waiting",
                       non > 1 ? "they" : "it");
    if (more) DIST__NOTE_ADD("; and %d more", more);
    for (int j = 0; j < d->eng->rank; j++)
        if (retry[j].drops) DIST__NOTE_ADD("; rank %d hung up on this rank %d time%s", j, retry[j].drops, DIST__PLURAL(retry[j].drops));
#undef DIST__NOTE_ADD
    if (noff + non) dist__wait_note_say(d->note, "the mesh lacks %s", text);
}

static dist_result dist__mesh_connect(dist_t *d, dist__socket ls, int64_t deadline) {
    dist__engine *e = d->eng;
    int n = e->world, me = e->rank, want = 0, npend = 0, naccepted = 0, connected = 0, told = 0, pause_ms = 0, no_fds = 0,
        cap = dist__pending_cap(n);
    int64_t next_check = 0, accept_pause_until = 0;
    dist__log_budget lb = { 0, 0, 0 };
    dist__pending_conn *pend = (dist__pending_conn *)DIST_MALLOC(sizeof *pend * (size_t)(cap + n));
    dist__pollfd *pfds = (dist__pollfd *)DIST_MALLOC(sizeof *pfds * (size_t)(cap + n + 1));
    dist__mesh_retry *retry = (dist__mesh_retry *)DIST_MALLOC(sizeof *retry * (size_t)n);
    dist_result res = DIST_OK;
    if (!pend || !pfds || !retry) {
        DIST_FREE(pend); DIST_FREE(pfds); DIST_FREE(retry);
        return dist__fail(NULL, DIST_ERR_NOMEM, "init: out of memory for the mesh");
    }
    memset(retry, 0, sizeof *retry * (size_t)n);
    for (int j = 0; j < n; j++) want += dist__mesh_wants(d, j, 1) || dist__mesh_wants(d, j, 2);
    dist__set_nonblocking(ls, 1);
    /* Call every lower rank; their answers are read below with the accepts. */
    for (int j = 0; j < me && res == DIST_OK; j++)
        if (dist__mesh_wants(d, j, 1)) {
            if ((res = dist__mesh_call(d, j, &pend[npend], 0, deadline)) == DIST_OK) npend++;
            else if (dist__mesh_unreachable(d, j, res)) { want--; res = DIST_OK; }
        }
    while (res == DIST_OK && connected < want) {
        int np = 0, rd, wr;
        int64_t now = dist__now_ms(), wake = deadline;
        if (dist__wait_note_due(d->note)) dist__mesh_note(d, retry);
        if (now >= next_check) {   /* can the job still form? */
            next_check = now + 250;
            if ((res = dist__rendezvous_fatal(d, deadline)) != DIST_OK) { told = 1; break; }
            /* growing: a newcomer not connected yet whose store connection
               closed has died (the store recorded it) */
            for (int j = d->mesh_new_first; d->mesh_plan && d->mesh_ticket0 > 0 && j < n && res == DIST_OK; j++) {
                if (!(dist__mesh_wants(d, j, 1) || dist__mesh_wants(d, j, 2)) || *dist__mesh_slot(d, j) != DIST__NO_SOCKET) continue;
                if (dist__newcomer_gone(d, j)) {
                    for (int i = 0; i < npend; i++)
                        if (pend[i].expect_rank == j) { dist__close(pend[i].fd); pend[i].fd = DIST__NO_SOCKET; }
                    if (dist__mesh_unreachable(d, j, DIST_ERR_PEER_LOST)) want--;
                }
            }
            /* a rank already connected that went away (its peers would
               otherwise only see the ranks it never reached) */
            for (int j = 0; j < n && res == DIST_OK; j++) {
                if (j == me || *dist__mesh_slot(d, j) == DIST__NO_SOCKET) continue;
                if (dist__sock_gone(*dist__mesh_slot(d, j))) {
                    if (dist__mesh_unreachable(d, j, DIST_ERR_PEER_LOST)) {   /* growing: it died meanwhile */
                        dist__close(*dist__mesh_slot(d, j));
                        *dist__mesh_slot(d, j) = DIST__NO_SOCKET;
                        connected--; want--;
                        continue;
                    }
                    /* the first rank to see it says why in the store, so the
                       ranks that only see the job fall apart learn the cause */
                    if ((res = dist__rendezvous_fatal(d, deadline)) != DIST_OK) { told = 1; break; }
                    res = dist__fail(NULL, DIST_ERR_PEER_LOST, "init: rank %d of %d: rank %d closed its connection during the rendezvous (did it exit or crash?)",
                                     me, n, j);
                }
            }
            if (res != DIST_OK) break;
        }
        if (now >= deadline) {
            char w[240]; int off = snprintf(w, sizeof w, "the mesh (no connection from rank");
            for (int j = 0; j < n && off < (int)sizeof w - 16; j++)
                if ((dist__mesh_wants(d, j, 1) || dist__mesh_wants(d, j, 2)) && *dist__mesh_slot(d, j) == DIST__NO_SOCKET)
                    off += snprintf(w + off, sizeof w - (size_t)off, " %d", j);
            for (int j = 0; j < me && off < (int)sizeof w - 48; j++)
                if (retry[j].drops) off += snprintf(w + off, sizeof w - (size_t)off, "; rank %d hung up on it %d time%s", j, retry[j].drops,
                                                  DIST__PLURAL(retry[j].drops));
            snprintf(w + off, sizeof w - (size_t)off, ")");
            res = dist__rendezvous_timeout(d, w);
            break;
        }
        /* callers to call again */
        for (int j = 0; j < me && res == DIST_OK; j++) {
            if (!retry[j].at) continue;
            if (now < retry[j].at) { wake = DIST__MIN(wake, retry[j].at); continue; }
            retry[j].at = 0;
            if ((res = dist__mesh_call(d, j, &pend[npend], 1, deadline)) == DIST_OK) npend++;
            else if (dist__mesh_unreachable(d, j, res)) { want--; res = DIST_OK; }
        }
        if (res != DIST_OK) break;
        {   /* out of descriptors, the listener rests a while: accept would fail at once, again and again */
            int ms = dist__ms_left(deadline, 100);
            dist__pollfd_set(&pfds[np], now < accept_pause_until ? DIST__NO_SOCKET : ls, 1, 0); np++;
            for (int i = 0; i < npend; i++) { dist__pollfd_set(&pfds[np], pend[i].fd, 1, 0); np++; }
            if (now < accept_pause_until) wake = DIST__MIN(wake, accept_pause_until);
            ms = (int)DIST__MIN((int64_t)ms, DIST__MAX(wake - now, (int64_t)0));
            dist__poll(pfds, np, ms);
        }
        for (int i = 0; i < npend; i++) {
            dist__pending_conn *pc = &pend[i];
            char why[200];
            int exp = pc->expect_rank, h;
            if (i + 1 >= np || !dist__pollfd_ready(&pfds[i + 1], &rd, &wr)) continue;
            h = dist__mesh_step(d, pc, deadline, why, sizeof why, &lb);
            if (h > 0) connected++;
            else if (h == -1 && exp >= 0)
                res = dist__fail(NULL, DIST_ERR_INIT, "init: rank %d: the mesh connection to rank %d failed its handshake: %s", me, exp, why);
            else if (h == -2 && exp >= 0) {   /* dropped: call again */
                retry[exp].drops++;
                retry[exp].pause_ms = retry[exp].pause_ms ? DIST__MIN(retry[exp].pause_ms * 2, 500) : 10;
                retry[exp].at = dist__now_ms() + retry[exp].pause_ms;
                if (retry[exp].drops == 1)
                    dist__logf(&e->log, DIST_LOG_INFO, "mesh: rank %d hung up on rank %d during the handshake; calling again", exp, me);
                dist__logf(&e->log, DIST_LOG_DEBUG, "mesh: rank %d hung up during the handshake (%d time%s); calling again in %d ms", exp,
                           retry[exp].drops, DIST__PLURAL(retry[exp].drops), retry[exp].pause_ms);
            }
        }
        /* New callers, as many as are waiting (at most 64 a round).  A
           rank's hello is usually there already, so it is read at once;
           past `cap` callers in their handshake, the least advanced makes
           room (DIST__PENDING_MIN). */
        for (int k = 0; k < 64 && dist__pollfd_ready(&pfds[0], &rd, &wr) && rd && res == DIST_OK; k++) {
            dist__socket s = dist__sock_accept(ls);
            int err = s == DIST__NO_SOCKET ? dist__errno() : 0;
            char why[200];
            if (s == DIST__NO_SOCKET) {
                if (dist__err_no_fds(err)) {
                    if (!no_fds) dist__rendezvous_trouble(d, err);
                    no_fds = 1;
                    pause_ms = pause_ms ? DIST__MIN(pause_ms * 2, 500) : 10;
                    accept_pause_until = dist__now_ms() + pause_ms;
                }
                break;
            }
            pause_ms = 0;
            pend[npend].fd = s; pend[npend].expect_rank = -1;
            if (dist__mesh_greet(d, &pend[npend], deadline) != 0) { dist__close(s); continue; }
            if (dist__mesh_step(d, &pend[npend], deadline, why, sizeof why, &lb) > 0) { connected++; continue; }
            if (pend[npend].fd == DIST__NO_SOCKET) continue;
            npend++;
            if (++naccepted > cap) {
                int v = -1, vstage = 3;
                for (int i = 0; i < npend; i++) {
                    int stage = pend[i].hello_checked ? 2 : pend[i].got > 0;
                    if (pend[i].expect_rank < 0 && pend[i].fd != DIST__NO_SOCKET && stage < vstage) { v = i; vstage = stage; }
                }
                if (v >= 0) {
                    if (dist__log_budget_take(&e->log, &lb, "mesh: dropped a connection"))
                        dist__logf(&e->log, DIST_LOG_WARN, "mesh: dropped a connection that sent %zu byte%s of its handshake", pend[v].got,
                                   DIST__PLURAL(pend[v].got));
                    dist__close(pend[v].fd);
                    pend[v].fd = DIST__NO_SOCKET;
                    naccepted--;
                }
            }
        }
        naccepted = 0;
        for (int i = 0; i < npend;) {   /* drop finished entries, keeping order (oldest first) */
            if (pend[i].fd == DIST__NO_SOCKET) { memmove(&pend[i], &pend[i + 1], sizeof *pend * (size_t)(npend - i - 1)); npend--; }
            else naccepted += pend[i++].expect_rank < 0;
        }
    }
    for (int i = 0; i < npend; i++) dist__close(pend[i].fd);
    DIST_FREE(pend); DIST_FREE(pfds); DIST_FREE(retry);
    dist__log_budget_flush(&e->log, &lb, "mesh: dropped a connection", 1);
    if (res != DIST_OK && !told && !d->mesh_plan) {     /* (a job that grows has formed: its failure is the caller's alone) */
        /* The first rank to fail says why in the store (rank 0 keeps it up
           a moment), so ranks that only see the job fall apart afterwards
           report the cause rather than the rank that left first. */
        char why[DIST__ERRLEN];
        const char *m = dist_error_message(NULL);
        const char *key = "dist/fatal";
        int exists = 1;
        dist__format(why, sizeof why, "%s", strncmp(m, "init: ", 6) == 0 ? m + 6 : m);
        if (dist_store_check(d, &key, 1, &exists) == DIST_OK && !exists) dist_store_set(d, key, why, strlen(why));
        dist__fatal_linger(d, deadline);
        dist__fail(NULL, res, "init: %s", why);
    }
    return res;
}

/* This rank's mesh address: the interface asked for, else the one that
   reached the store. */
static dist_result dist__mesh_address(dist_t *d, const dist__setup *s, const char *what, char *host, size_t cap) {
    if (s->ifname) {
        if (dist__ifname_address(s->ifname, host, cap) != 0)
            return dist__fail(NULL, DIST_ERR_INIT, "%s: DIST_SOCKET_IFNAME=%s: no such interface with an address", what, s->ifname);
    } else if (dist__sock_name(d->store_fd, 0, host, cap, NULL) != 0) {
        return dist__fail(NULL, DIST_ERR_SYSTEM, "%s: cannot read the local address: %s", what, dist__err_text(dist__errno()));
    }
    return DIST_OK;
}

/* [SECTION] growing: newcomers join a running job
   ---------------------------------------------------------------------------
   A newcomer (dist_init with cfg.join or DIST_JOINING=1) does not form a
   job: it reaches the store (its hello says it is a newcomer: the store
   takes it after the job formed, if it has the job's run id and secret),
   listens for the mesh, takes a ticket t (dist/join/next counts them) and
   marks "dist/join/t<t>" (a member of a dist_grow that waits for
   min_new newcomers parks on the one it needs), then waits for its admission
   "dist/join/a<t>".  The running ranks admit the newcomers waiting when
   they call dist_grow on a communicator d: a round of the agreement above
   (kind 'g', each member asking for at least min_new newcomers) whose
   decision also says which tickets are admitted, those after
   "dist/join/done" up to the last one taken (once at least min_new are
   waiting; at most as many as the engine has room for), and how many
   ranks the job has had, E.  Newcomer i becomes the engine's rank E + i
   (ranks are never reused: a rank that dies stays dead, and its
   replacement is a new rank), and the grown communicator is the members
   of d counted alive, in their order, then the newcomers in ticket order.
   Every member then writes the admissions and "dist/join/done" (the same
   bytes from each, so the death of any one does not lose them), opens a
   listener and publishes it as "dist/g<E'>/addr/<rank>" (E' the new count);
   each newcomer publishes its own there and calls every member of lower
   rank, as at init (the engine's listener is closed after init: a
   running rank accepts only inside dist_grow).  The connections are
   installed as peers (TCP: a newcomer does not share memory segments)
   once all have proved the job's secret.  A newcomer's own world is the
   job's E' ranks, those not in its communicator marked gone; what it gets
   from dist_init is the grown communicator, and destroying that destroys
   its world. */
static dist_result dist__mesh_connect(dist_t *d, dist__socket ls, int64_t deadline);

/* The newcomers waiting: tickets ja < t <= jb (at most as many as there
   is room for in this rank's engine). */
static dist_result dist__grow_waiting(dist_t *d, const char *what, int64_t *ja, int64_t *jb) {
    char v[32];
    int found = 0;
    dist_result res = dist__ft_get(d, what, "dist/join/done", 1, v, sizeof v, &found);
    *ja = 0; *jb = 0;
    if (res != DIST_OK) return res;
    if (found) *ja = strtoll(v, NULL, 10);
    if ((res = dist_store_add(d, "dist/join/next", 0, jb)) != DIST_OK) return res;
    if (*jb < *ja) *jb = *ja;
    *jb = DIST__MIN(*jb, *ja + (int64_t)(d->eng->cap - d->eng->world));
    return DIST_OK;
}

/* Opens a listener for a growth's mesh on the world's address, published
   as "<prefix><rank>". */
static dist_result dist__grow_listen(dist_t *d, const char *host, const char *what, dist__socket *ls) {
    char key[64], addr[300], why[300];
    int port = 0;
    dist_result res;
    *ls = dist__sock_listen(host, DIST__IP_ANY, 0, why, sizeof why);
    if (*ls == DIST__NO_SOCKET) return dist__fail(d, DIST_ERR_SYSTEM, "%s: rank %d cannot listen for newcomers: %s", what, d->eng->rank, why);
    dist__sock_name(*ls, 0, why, sizeof why, &port);
    dist__format(key, sizeof key, "%s%d", d->mesh_prefix, d->eng->rank);
    dist__format(addr, sizeof addr, "%s %d", host, port);
    if ((res = dist_store_set(d, key, addr, strlen(addr))) != DIST_OK) { dist__close(*ls); *ls = DIST__NO_SOCKET; }
    return res;
}

/* Forms the mesh of a growth (d->mesh_plan says whom to call and whom to
   accept), then installs the connections as peers: staging, TCP, and
   this rank's credit, under the engine lock (its progress thread may be
   running).  A peer planned but not connected is marked gone. */
static dist_result dist__grow_mesh(dist_t *d, dist_t *top, dist__socket ls, int64_t deadline, const char *what) {
    dist__engine *e = top->eng;
    int n = e->world;
    dist_result res = dist__mesh_connect(top, ls, deadline);
    uint8_t **stage = (uint8_t **)DIST_MALLOC(sizeof *stage * (size_t)n);
    if (res != DIST_OK) {
        const char *m = dist_error_message(NULL);
        res = dist__fail(d, res, "%s: %s", what, strncmp(m, "init: ", 6) == 0 ? m + 6 : m);
    }
    if (!stage && res == DIST_OK) res = dist__fail(d, DIST_ERR_NOMEM, "%s: out of memory", what);
    for (int j = 0; stage && j < n; j++) {
        stage[j] = NULL;
        if (res == DIST_OK && top->mesh_fds[j] != DIST__NO_SOCKET && (stage[j] = (uint8_t *)DIST_MALLOC(DIST__STAGE_SIZE)) == NULL)
            res = dist__fail(d, DIST_ERR_NOMEM, "%s: out of memory", what);
    }
    dist__mutex_lock(&e->lock);
    for (int j = 0; j < n; j++) {
        dist__peer *p = &e->peers[j];
        if (!top->mesh_plan[j] || j == e->rank) continue;
        if (top->mesh_plan[j] == 3) {       /* a member that died while this rank joined */
            dist__close(top->mesh_fds[j]);
            top->mesh_fds[j] = DIST__NO_SOCKET;
            dist__peer_fail(e, p, "rank %d did not answer when this rank joined (did it die?)", j);
            continue;
        }
        if (res != DIST_OK || top->mesh_fds[j] == DIST__NO_SOCKET) {
            dist__close(top->mesh_fds[j]);
            top->mesh_fds[j] = DIST__NO_SOCKET;
            if (p->fd == DIST__NO_SOCKET && p->state == DIST__PEER_OK) {
                p->state = DIST__PEER_LEFT;
                dist__format(p->why, sizeof p->why, "rank %d did not join (%s failed)", j, what);
            }
            continue;
        }
        p->rx.stage = stage[j];
        stage[j] = NULL;
        p->t = &dist__tcp_transport;
        p->fd = top->mesh_fds[j];
        top->mesh_fds[j] = DIST__NO_SOCKET;
        e->shm.ntcp++;
        dist__send_ctl(e, p, DIST__FRAME_CREDIT, 0, e->budget, 1);
        dist__peer_write(e, p);
    }
    if (e->polling) dist__wakeup_signal(&e->wake);     /* the poller takes the new sockets */
    dist__mutex_unlock(&e->lock);
    for (int j = 0; stage && j < n; j++) DIST_FREE(stage[j]);
    DIST_FREE(stage);
    return res;
}

/* The plan and the landing places of a growth's mesh, on d's world. */
static dist_result dist__grow_prepare(dist_t *top, int nworld, const char *what) {
    char prefix[sizeof top->mesh_prefix];
    memcpy(prefix, top->mesh_prefix, sizeof prefix);
    unsigned char *plan = (unsigned char *)DIST_MALLOC((size_t)nworld);
    dist__socket *fds = (dist__socket *)DIST_MALLOC(sizeof *fds * (size_t)nworld);
    if (!plan || !fds) { DIST_FREE(plan); DIST_FREE(fds); return dist__fail(top, DIST_ERR_NOMEM, "%s: out of memory", what); }
    memset(plan, 0, (size_t)nworld);
    for (int j = 0; j < nworld; j++) fds[j] = DIST__NO_SOCKET;
    top->mesh_plan = plan;
    top->mesh_fds = fds;
    memcpy(top->mesh_prefix, prefix, sizeof prefix);
    return DIST_OK;
}

static void dist__grow_done(dist_t *top) {
    top->mesh_new_first = 0;
    top->mesh_ticket0 = 0;
    DIST_FREE((void *)top->mesh_plan);
    DIST_FREE(top->mesh_fds);
    top->mesh_plan = NULL;
    top->mesh_fds = NULL;
    top->mesh_prefix[0] = 0;
}

DIST_API dist_result dist_grow(dist_t *d, int min_new, dist_t **grown) {
    const char *what = "grow";
    int *alive = NULL, *members = NULL, n = 0, me = -1, k = 0, ew = 0, total = 0;
    int64_t id = 0, join[3] = { 0, 0, 0 };
    uint64_t f = (uint64_t)(min_new > 0 ? min_new : 0), round;
    dist__socket ls = DIST__NO_SOCKET;
    dist_t *top;
    dist__engine *e;
    dist_result res;
    char *adm = NULL;
    size_t cap;
    if (grown) *grown = NULL;
    if (!d || !grown) return dist__fail(d, DIST_ERR_INVALID, "grow: NULL %s", d ? "result pointer" : "communicator");
    if (min_new < 0) return dist__fail(d, DIST_ERR_INVALID, "grow: %d newcomers asked for", min_new);
    if (dist__grew_check(d, "grow") != DIST_OK) return DIST_ERR_INVALID;
    top = d->top; e = d->eng;
    if ((alive = (int *)DIST_MALLOC(sizeof(int) * (size_t)d->world)) == NULL) return dist__fail(d, DIST_ERR_NOMEM, "grow: out of memory");
    /* this rank's listener for newcomers, published before its entry: a
       member counted alive has one (a newcomer that finds it refusing
       knows it died) */
    round = d->ft_rounds + 1;
    dist__format(top->mesh_prefix, sizeof top->mesh_prefix, "dist/ga/%u/%llu/", (unsigned)d->id, (unsigned long long)round);
    res = dist__grow_listen(top, top->mesh_host, what, &ls);
    if (res == DIST_OK) res = dist__ft_round(d, 'g', &f, alive, &n, &id, join);
    if (res == DIST_OK && (id <= 0 || id > 0x7fffffff)) res = dist__fail(d, DIST_ERR_PROTOCOL, "grow: a bad communicator id in the store");
    if (res != DIST_OK) goto out;
    k = (int)(join[1] - join[0]);
    ew = (int)join[2];
    total = n + k;
    if (ew + k > e->cap) {
        res = dist__fail(d, DIST_ERR_INVALID, "grow: the job would have had %d ranks (the dead counted), more than the %d this rank "
                         "has room for (DIST_MAX_JOINS)", ew + k, e->cap);
        goto out;
    }
    cap = (size_t)total * 12 + 128;
    members = (int *)DIST_MALLOC(sizeof(int) * (size_t)total);
    adm = (char *)DIST_MALLOC(cap);
    if (!members || !adm) { res = dist__fail(d, DIST_ERR_NOMEM, "grow: out of memory"); goto out; }
    for (int i = 0; i < n; i++) {
        members[i] = dist__wrank(d, alive[i]);
        if (alive[i] == d->rank) me = i;
    }
    for (int i = 0; i < k; i++) members[n + i] = ew + i;
    if (k > 0) {
        /* the newcomers' admissions (the same bytes from every member) */
        size_t off;
        for (int i = 0; i < k && res == DIST_OK; i++) {
            char key[64];
            dist__format(adm, cap, "%016llx %d %d %lld %d %u %llu %d", (unsigned long long)d->job, ew + k, ew + i, (long long)id, total,
                         (unsigned)d->id, (unsigned long long)round, k);
            off = strlen(adm);
            for (int j = 0; j < total && off < cap; j++) off += (size_t)snprintf(adm + off, cap - off, " %d", members[j]);
            dist__format(key, sizeof key, "dist/join/a%lld", (long long)(join[0] + 1 + i));
            res = dist_store_set(d, key, adm, strlen(adm));
        }
        if (res == DIST_OK) {
            char v[32];
            dist__format(v, sizeof v, "%lld", (long long)join[1]);
            res = dist_store_set(d, "dist/join/done", v, strlen(v));
        }
        /* room for them, then the mesh: this rank accepts each */
        if (res == DIST_OK) res = dist__grow_prepare(top, ew + k, what);
        if (res == DIST_OK) {
            top->mesh_new_first = ew;
            top->mesh_ticket0 = join[0] + 1;
            for (int i = 0; i < k; i++) ((unsigned char *)top->mesh_plan)[ew + i] = 2;
            dist__mutex_lock(&e->lock);
            e->world = ew + k;         /* (the new peers are idle until installed) */
            dist__mutex_unlock(&e->lock);
            res = dist__grow_mesh(d, top, ls, dist__now_ms() + d->timeout_ms, what);
            dist__grow_done(top);
        }
        if (res != DIST_OK) goto out;
    }
    res = dist__group_make(d, total, members, 1, me, id, what, grown);
    if (res == DIST_OK) (*grown)->newcomers = k;
    if (res == DIST_OK && k > 0) {     /* the newcomers are ranks of the world from now on (dist_world) */
        dist__mutex_lock(&e->lock);
        DIST__STORE_RELAXED(&top->world, e->world);
        DIST__STORE_RELAXED(&top->world_grew, 1);
        dist__mutex_unlock(&e->lock);
    }
out:
    if (ls != DIST__NO_SOCKET) {
        char key[64];
        dist__close(ls);
        dist__format(key, sizeof key, "dist/ga/%u/%llu/%d", (unsigned)d->id, (unsigned long long)round, e->rank);
        dist_store_delete(d, key, NULL);
    }
    top->mesh_prefix[0] = 0;
    DIST_FREE(alive); DIST_FREE(members); DIST_FREE(adm);
    return res;
}

DIST_API int dist_joined(const dist_t *d) { return d && d->top->joined; }
DIST_API dist_t *dist_world(dist_t *d) { return d ? d->top : NULL; }
DIST_API int dist_world_capacity(const dist_t *d) { return d && d->eng ? d->eng->cap : 0; }

DIST_API dist_result dist_joins_waiting(dist_t *d, int *n) {
    int64_t ja = 0, jb = 0;
    dist_result res;
    if (n) *n = 0;
    if (!d || !n) return dist__fail(d, DIST_ERR_INVALID, "joins_waiting: NULL %s", d ? "count pointer" : "communicator");
    if ((res = dist__grow_waiting(d, "joins_waiting", &ja, &jb)) != DIST_OK) return res;
    *n = (int)(jb - ja);
    return DIST_OK;
}
DIST_API int dist_newcomers(const dist_t *d) { return d ? d->newcomers : 0; }

DIST_API int dist_restart_count(void) {
    int v = 0;
    if (dist__parse_int(dist__getenv("DIST_RESTART_COUNT"), &v) != 0 || v < 0) return 0;
    return v;
}

static void dist__free_comm(dist_t *d);
static dist_result dist__monitor_start(dist_t *top, const char *what);
static DIST__THREAD_RETURN dist__progress_thread(void *arg);

/* A newcomer's init (see above): *out is the grown communicator. */
static dist_result dist__join(dist_t **out, dist__setup *s, const dist__log *log) {
    const char *what = "init (joining)";
    int64_t deadline = dist__now_ms() + s->timeout_ms, t = 0;
    char host[256], key[64], buf[64], *adm = NULL;
    size_t cap = 0, len = 0;
    dist__socket ls = DIST__NO_SOCKET;
    dist_t *d;
    dist__engine *e;
    dist_result r;
    int found = 0, ew = 0, rank = -1, total = 0, me = -1, pos = 0, nnew = 0, *members = NULL;
    long long nid = 0;
    unsigned long long job = 0, pround = 0;
    unsigned pid = 0;
    d = (dist_t *)DIST_MALLOC(sizeof *d);
    if (!d) return dist__fail(NULL, DIST_ERR_NOMEM, "%s: out of memory", what);
    memset(d, 0, sizeof *d);
    d->rank = 0; d->world = 1; d->timeout_ms = s->timeout_ms;
    d->store_hosted = s->hosted; d->store_fd = DIST__NO_SOCKET; d->top = d; d->joined = 1;
    d->id = 0;                       /* its world is the job's (dist_world): the members' world has id 0 too */
    d->world_grew = 1;
    d->key = s->key;
    dist__mutex_init(&d->err_lock);
    dist__mutex_init(&d->store_lock);
    dist__comm_init_collectives(d, s->algo);
    if ((r = dist__store_join(d, s, log, deadline)) != DIST_OK) goto fail;
    if ((r = dist_store_get(d, "dist/job", buf, sizeof buf - 1, &len)) != DIST_OK) goto fail;
    buf[len] = 0;
    d->job = strtoull(buf, NULL, 16);
    if ((r = dist__mesh_address(d, s, what, host, sizeof host)) != DIST_OK) goto fail;
    dist__format(d->mesh_host, sizeof d->mesh_host, "%s", host);
    /* a ticket, then the admission the running ranks write in dist_grow */
    if ((r = dist_store_add(d, "dist/join/next", 1, &t)) != DIST_OK) goto fail;
    dist__format(key, sizeof key, "dist/join/t%lld", (long long)t);    /* (what a dist_grow waiting for newcomers parks on) */
    if ((r = dist_store_set(d, key, "1", 1)) != DIST_OK) goto fail;
    dist__logf(log, DIST_LOG_INFO, "joining a running job: newcomer #%lld waits for its ranks to call dist_grow", (long long)t);
    dist__format(key, sizeof key, "dist/join/a%lld", (long long)t);
    cap = 64 + (size_t)12 * DIST__MAX_WORLD;
    if ((adm = (char *)DIST_MALLOC(cap)) == NULL) { r = dist__fail(NULL, DIST_ERR_NOMEM, "%s: out of memory", what); goto fail; }
    while (!found) {
        int left = dist__ms_left(deadline, 1000);
        if (left <= 0) {
            r = dist__fail(NULL, DIST_ERR_TIMEOUT, "%s: the job's ranks did not admit this process within %.1f s (newcomer #%lld): "
                           "they admit newcomers when they call dist_grow", what, s->timeout_ms / 1000.0, (long long)t);
            goto fail;
        }
        if ((r = dist__ft_get(d, what, key, left, adm, cap, &found)) != DIST_OK) { r = dist__fail(NULL, r, "%s", dist_error_message(d)); goto fail; }
    }
    if (sscanf(adm, "%llx %d %d %lld %d %u %llu %d%n", &job, &ew, &rank, &nid, &total, &pid, &pround, &nnew, &pos) != 8 || job != d->job ||
        ew < 2 || ew > DIST__MAX_WORLD || nnew < 1 || nnew > total ||
        rank < 0 || rank >= ew || nid <= 0 || nid > 0x7fffffff || total < 1 || total > ew ||
        (members = (int *)DIST_MALLOC(sizeof(int) * (size_t)total)) == NULL) {
        r = dist__fail(NULL, members ? DIST_ERR_PROTOCOL : DIST_ERR_NOMEM, "%s: a malformed admission in the store", what);
        goto fail;
    }
    for (int i = 0, p = pos; i < total; i++) {
        if (sscanf(adm + p, " %d%n", &members[i], &pos) != 1 || members[i] < 0 || members[i] >= ew) {
            r = dist__fail(NULL, DIST_ERR_PROTOCOL, "%s: a malformed admission in the store", what);
            goto fail;
        }
        p += pos;
        if (members[i] == rank) me = i;
    }
    if (me < 0) { r = dist__fail(NULL, DIST_ERR_PROTOCOL, "%s: an admission that leaves this process out", what); goto fail; }
    /* its engine: the job's ranks so far, those not in its communicator gone */
    d->rank = rank; d->world = ew;
    d->eng = e = dist__engine_new(rank, ew, (int)DIST__MIN((int64_t)ew + s->max_joins, (int64_t)DIST__MAX_WORLD), log);
    if (!e || dist__comm_register(d) != DIST_OK || dist__comm_nodes(d) != 0) { r = dist__fail(NULL, DIST_ERR_NOMEM, "%s: out of memory", what); goto fail; }
    e->spin_ns = (int64_t)s->spin_us * 1000;
    e->log.rank = rank;              /* (its lines name the rank it was given, not the 0 it came with) */
    e->budget = s->eager ? s->eager : dist__default_budget(total);
    dist__format(d->mesh_prefix, sizeof d->mesh_prefix, "dist/ga/%u/%llu/", pid, pround);   /* where the members listen */
    d->mesh_new_first = ew - nnew;
    d->mesh_ticket0 = t - (rank - d->mesh_new_first);
    if ((r = dist__grow_prepare(d, ew, what)) != DIST_OK) goto fail;
    for (int j = 0; j < ew; j++) if (j != rank) { e->peers[j].state = DIST__PEER_LEFT; dist__format(e->peers[j].why, sizeof e->peers[j].why,
        "rank %d is not in this rank's communicator (it left before this rank joined, or belongs to another one)", j); }
    for (int i = 0; i < total; i++)
        if (members[i] != rank) {
            e->peers[members[i]].state = DIST__PEER_OK;
            ((unsigned char *)d->mesh_plan)[members[i]] = members[i] < rank ? 1 : 2;
        }
    if ((r = dist__grow_listen(d, host, what, &ls)) != DIST_OK) { r = dist__fail(NULL, r, "%s", dist_error_message(d)); goto fail; }
    r = dist__grow_mesh(d, d, ls, dist__now_ms() + s->timeout_ms, what);
    dist__close(ls);
    dist__format(key, sizeof key, "%s%d", d->mesh_prefix, rank);
    dist_store_delete(d, key, NULL);
    dist__grow_done(d);
    if (r != DIST_OK) { r = dist__fail(NULL, r, "%s", dist_error_message(d)); goto fail; }
    if (dist__thread_start(&e->thread, dist__progress_thread, e) != 0) {
        r = dist__fail(NULL, DIST_ERR_SYSTEM, "%s: cannot start the progress thread", what);
        goto fail;
    }
    e->thread_started = 1;
    if ((r = dist__monitor_start(d, what)) != DIST_OK) goto fail;
    if ((r = dist__group_make(d, total, members, 1, me, nid, what, out)) != DIST_OK) { r = dist__fail(NULL, r, "%s", dist_error_message(d)); goto fail; }
    (*out)->owns_top = 1;
    (*out)->newcomers = nnew;
    dist__logf(log, DIST_LOG_INFO, "joined: rank %d of a communicator of %d (the job's rank %d)", me, total, rank);
    DIST_FREE(adm); DIST_FREE(members);
    return DIST_OK;
fail:
    {
        char msg[DIST__ERRLEN];
        memcpy(msg, dist__thread_error, sizeof msg);
        dist__grow_done(d);
        dist__free_comm(d);
        memcpy(dist__thread_error, msg, sizeof msg);
        dist__logf(log, DIST_LOG_ERROR, "%s", msg);
    }
    DIST_FREE(adm); DIST_FREE(members);
    return r;
}

/* [SECTION] flight recorder: dumps, job reports, the monitor
   ---------------------------------------------------------------------------
   Each world runs a monitor thread that wakes once a second.  It
   - logs, at info level, a call that has waited a while: after a quarter
     of the timeout (at most 10 s), then every quarter (at most 30 s), what
     it waits for;
   - answers dump requests: "dist/dump/req" in the store counts them; a
     rank that sees a new one writes its recorder as text to
     "dist/dump/<rank>" (dist__rec_dump; one key a rank, the newest);
   - asks for one when a call of this rank timed out (mon_want), then waits
     up to DIST__REPORT_WAIT_MS for the others' dumps and logs the job
     report at error level (dist__report_build reads the dumps).
   dist_job_report asks for a dump and builds the report on request, and a
   launcher hosting the store builds it from there (dist_store_host_report).
   The monitor's store calls take the store only when no caller holds it
   (it looks again a second later) and never write a communicator's
   sentence (dist__quiet). */
#define DIST__REPORT_WAIT_MS 2500
#define DIST__DUMP_CAP (64 * 1024)           /* a rank's dump, at most (bytes) */
#define DIST__DUMP_COLLS 12          /* collectives per communicator in a dump */
#define DIST__DUMP_P2P 8             /* ...finished point-to-point operations (unfinished ones: all) */

/* An entry as read (dist__rec_read). */
typedef struct dist__rec_view {
    int what, algo, dtype, op, sync, state, peer, waiting_on, wait_what, res;
    int64_t tag, t_start, t_end;
    uint64_t seq, count;
} dist__rec_view;

/* One entry, read whole (0: it was being rewritten every time). */
static int dist__rec_read(dist__rec *x, dist__rec_view *o) {
    for (int tries = 0; tries < 8; tries++) {
        uint32_t g1 = DIST__LOAD_ACQ(&x->gen);
        uint64_t desc, wait;
        if (g1 & 1) continue;
        o->state = (int)DIST__LOAD_ACQ(&x->state);
        desc = DIST__LOAD_RELAXED(&x->desc);
        wait = DIST__LOAD_RELAXED(&x->wait);
        o->what = (int)(desc & 255); o->algo = (int)(desc >> 8 & 255); o->dtype = (int)(desc >> 16 & 255); o->op = (int)(desc >> 24 & 255);
        o->peer = (int)(int32_t)(uint32_t)(desc >> 32);
        o->waiting_on = (int)(wait >> 8) - 1; o->wait_what = (int)(wait & 255);
        o->res = o->state == DIST__REC_FAILED ? DIST__LOAD_RELAXED(&x->res) : 0;
        o->tag = DIST__LOAD_RELAXED(&x->tag);      /* (point-to-point entries') */
        o->sync = (o->tag & DIST__REC_SYNC) != 0;
        o->tag &= ~DIST__REC_SYNC;
        o->seq = DIST__LOAD_RELAXED(&x->seq); o->count = DIST__LOAD_RELAXED(&x->count);
        o->t_start = DIST__LOAD_RELAXED(&x->t_start);
        o->t_end = o->state != DIST__REC_RUNNING && o->t_start ? DIST__LOAD_RELAXED(&x->t_end) : 0;
        DIST__FENCE_ACQ_REL();
        if (DIST__LOAD_RELAXED(&x->gen) == g1) return 1;
    }
    return 0;
}

/* The newest collective of d (its entry is whole once coll_seq says it):
   its number (0: none yet); *cur its rec_cur. */
static uint64_t dist__rec_coll_newest(dist_t *d, uint64_t *cur) {
    *cur = DIST__LOAD_ACQ(&d->rec_cur);       /* (first: a rec_cur of an older one says #coll_seq is running) */
    return DIST__LOAD_ACQ(&d->coll_seq);
}

/* Collective #k of d (at most the newest, whose rec_cur is cur), read
   whole; 0: written over meanwhile.  Older ones have no times: done or
   failed, as their result says. */
static int dist__rec_coll_view(dist_t *d, uint64_t k, uint64_t newest, uint64_t cur, dist__rec_view *o) {
    dist__crec *x = &d->rec_c[k & (DIST__REC_N - 1)];
    int coll, failed;
    memset(o, 0, sizeof *o);
    o->seq = k;
    o->count = DIST__LOAD_RELAXED(&x->count);
    coll = DIST__LOAD_RELAXED(&x->coll); o->dtype = DIST__LOAD_RELAXED(&x->dtype); o->op = DIST__LOAD_RELAXED(&x->op);
    failed = DIST__LOAD_RELAXED(&x->failed); o->peer = DIST__LOAD_RELAXED(&x->root);
    DIST__FENCE_ACQ_REL();
    if (DIST__LOAD_RELAXED(&d->coll_seq) - k + 1 >= DIST__REC_N) return 0;     /* (being written over, or already) */
    o->what = coll & 15; o->algo = coll >> 4;
    o->res = -failed;
    o->state = o->res ? DIST__REC_FAILED : DIST__REC_DONE;
    o->waiting_on = -1;
    if (k == newest) {
        if ((uint32_t)(cur >> 32) == (uint32_t)k) {
            o->state = (int)(cur & 15);
            o->wait_what = (int)(cur >> 4 & 15); o->waiting_on = (int)(cur >> 8 & 0xffffff) - 1;
        } else o->state = DIST__REC_RUNNING;          /* (begun: nothing said yet) */
        if (DIST__LOAD_ACQ(&d->rec_t_seq) == k) {
            o->t_start = DIST__LOAD_RELAXED(&d->rec_t_start);
            if (o->state != DIST__REC_RUNNING) o->t_end = DIST__LOAD_RELAXED(&d->rec_t_end);
        }
        if (DIST__LOAD_ACQ(&d->rec_q_seq) == k) o->tag = DIST__LOAD_RELAXED(&d->rec_t_enq);
    }
    if (o->state == DIST__REC_RUNNING) o->res = 0;
    return 1;
}

/* "1234" ms since t, or -1 when t was not read. */
static long long dist__ago_ms(int64_t t, int64_t now) { return t ? (long long)((now - t) / 1000000) : -1; }

/* A rank of d (-1 stays) as a rank of the world. */
static int dist__rec_world_rank(const dist_t *d, int r) { return r >= 0 && r < d->world ? dist__wrank(d, r) : r; }

/* This rank's recorders (every communicator of its world) as text: the
   dump a job report reads.  Under the engine lock (communicators are freed
   under it).  Lines:
     dist-dump 1 <rank> <world> <in destroy> <request answered>
     g <comm> <size> <rank in it> w | <world rank of each member>
     c <comm> <seq> <kind> <algo> <dtype> <op> <root> <count> <state> <res> <waits for what> <whom> <started> <ended> <queued>
     p <comm> <seq> <kind> <sync> <peer> <tag> <dtype> <count> <state> <res> <started> <ended>
     q <comm> <collectives queued, not begun> <the first queued>     (when there are any)
   ranks as world ranks, times as milliseconds ago (-1: not read; queued:
   -1 when the call ran as it was called, not queued behind async ones).
   A collective's times and whom it waits for are the newest collective's
   only (the recorder keeps no more: see dist__crec); older ones say -1.
   (A reader takes a 'c' line without <queued>, and skips lines of other
   letters: older dumps parse.) */
static size_t dist__rec_dump(dist_t *top, long long gen, char *buf, size_t cap) {
    dist__engine *e = top->eng;
    int64_t now = dist__now_ns();
    size_t off = 0;
#define DIST__DUMP_PUT(...) do { if (off < cap) { int n_ = snprintf(buf + off, cap - off, __VA_ARGS__); \
        if (n_ > 0) off = DIST__MIN(cap - 1, off + (size_t)n_); } } while (0)
    DIST__DUMP_PUT("dist-dump 1 %d %d %d %lld\n", top->rank, DIST__LOAD_RELAXED(&top->world), DIST__LOAD_RELAXED(&top->in_destroy), gen);
    for (int ci = 0; ci < e->ncomms; ci++) {
        dist_t *d = e->comms[ci];
        dist__rec_view o;
        uint64_t cur = 0, newest = DIST_RECORDER_OPS ? dist__rec_coll_newest(d, &cur) : 0, n, k;
        DIST__DUMP_PUT("g %u %d %d", (unsigned)d->id, d->world, d->rank);
        if (!d->members) DIST__DUMP_PUT(" w");
        else for (int i = 0; i < d->world; i++) DIST__DUMP_PUT(" %d", d->members[i]);
        DIST__DUMP_PUT("\n");
        for (k = newest > DIST__DUMP_COLLS ? newest - DIST__DUMP_COLLS + 1 : 1; k <= newest; k++) {
            if (!dist__rec_coll_view(d, k, newest, cur, &o)) continue;
            DIST__DUMP_PUT("c %u %llu %d %d %d %d %d %llu %d %d %d %d %lld %lld %lld\n", (unsigned)d->id, (unsigned long long)o.seq, o.what,
                           o.algo, o.dtype, o.op, dist__rec_world_rank(d, o.peer), (unsigned long long)o.count, o.state, (int)o.res,
                           o.wait_what, dist__rec_world_rank(d, o.waiting_on), dist__ago_ms(o.t_start, now), dist__ago_ms(o.t_end, now),
                           dist__ago_ms(o.tag, now));       /* (a collective's tag: when it was queued) */
        }
        {
            int queued = DIST__LOAD_RELAXED(&d->q_len);
            int64_t oldest = DIST__LOAD_RELAXED(&d->q_oldest);
            if (queued > 0 && oldest) DIST__DUMP_PUT("q %u %d %lld\n", (unsigned)d->id, queued, dist__ago_ms(oldest, now));
        }
        n = DIST__LOAD_ACQ(&d->rec_p2p.n);
        for (k = n > DIST_RECORDER_OPS ? n - DIST_RECORDER_OPS : 0; k < n; k++) {
            if (!dist__rec_read(&d->rec_p2p.ops[k & (DIST__REC_N - 1)], &o)) continue;
            if (o.state != DIST__REC_RUNNING && n - k > DIST__DUMP_P2P) continue;
            DIST__DUMP_PUT("p %u %llu %d %d %d %lld %d %llu %d %d %lld %lld\n", (unsigned)d->id, (unsigned long long)o.seq, o.what,
                           o.sync, dist__rec_world_rank(d, o.peer), (long long)o.tag, o.dtype, (unsigned long long)o.count, o.state,
                           (int)o.res, dist__ago_ms(o.t_start, now), dist__ago_ms(o.t_end, now));
        }
    }
#undef DIST__DUMP_PUT
    return off;
}

/* ---- reading dumps (bytes from the store: every field checked) ---- */
typedef struct dist__dop {           /* one operation of a dump */
    char type;                       /* 'c' or 'p' */
    unsigned comm;
    unsigned long long seq, count;
    int kind, algo, dtype, op, peer, state, res, wait_what, waiting_on, sync;
    long long tag, started, ended, queued;
} dist__dop;
typedef struct dist__dump {
    int have, rank, world, in_destroy;
    long long gen;
    dist__dop *ops; int nops;
    unsigned comms[64]; int comm_size[64], ncomms;   /* the communicators it is in */
    int comm_queued[64]; long long comm_queued_ms[64]; /* ...collectives queued there, not begun; the first queued, ms ago */
} dist__dump;

static int dist__dump_nums(const char **p, long long *v, int n) {
    for (int i = 0; i < n; i++) {
        char *end;
        while (**p == ' ') (*p)++;
        v[i] = strtoll(*p, &end, 10);
        if (end == *p) return -1;
        *p = end;
    }
    return 0;
}

/* Parses one rank's dump; 0 on success.  ops is allocated (freed by the caller). */
static int dist__dump_parse(const char *text, size_t len, dist__dump *o) {
    const char *p = text, *end = text + len;
    long long v[16];
    memset(o, 0, sizeof *o);
    if (len < 12 || memcmp(text, "dist-dump 1 ", 12) != 0 || memchr(text, 0, len)) return -1;
    p += 12;
    if (dist__dump_nums(&p, v, 4) != 0 || v[0] < 0 || v[1] < 1 || v[0] >= v[1] || v[1] > DIST__MAX_WORLD) return -1;
    o->rank = (int)v[0]; o->world = (int)v[1]; o->in_destroy = v[2] != 0; o->gen = v[3];
    o->ops = (dist__dop *)DIST_MALLOC(sizeof *o->ops * 256);
    if (!o->ops) return -1;
    while ((p = (const char *)memchr(p, '\n', (size_t)(end - p))) != NULL && ++p < end) {
        char t = *p++;
        dist__dop *x;
        if (t == 'g') {
            if (dist__dump_nums(&p, v, 3) != 0 || v[0] < 0 || v[0] > 0xffffffffLL || v[1] < 1 || v[1] > DIST__MAX_WORLD) return -1;
            if (o->ncomms < 64) { o->comms[o->ncomms] = (unsigned)v[0]; o->comm_size[o->ncomms++] = (int)v[1]; }
            continue;
        }
        if (t == 'q') {                  /* after its communicator's g line */
            if (dist__dump_nums(&p, v, 3) != 0 || v[0] < 0 || v[0] > 0xffffffffLL || v[1] < 1 || v[1] > 1000000000LL || v[2] < 0) return -1;
            if (o->ncomms > 0 && o->comms[o->ncomms - 1] == (unsigned)v[0]) {
                o->comm_queued[o->ncomms - 1] = (int)v[1]; o->comm_queued_ms[o->ncomms - 1] = v[2];
            }
            continue;
        }
        if ((t != 'c' && t != 'p') || o->nops == 256) continue;
        x = &o->ops[o->nops];
        memset(x, 0, sizeof *x);
        x->type = t;
        if (t == 'c') {
            if (dist__dump_nums(&p, v, 14) != 0) return -1;
            x->comm = (unsigned)v[0]; x->seq = (unsigned long long)v[1]; x->kind = (int)v[2]; x->algo = (int)v[3];
            x->dtype = (int)v[4]; x->op = (int)v[5]; x->peer = (int)v[6]; x->count = (unsigned long long)v[7];
            x->state = (int)v[8]; x->res = (int)v[9]; x->wait_what = (int)v[10]; x->waiting_on = (int)v[11];
            x->started = v[12]; x->ended = v[13];
            while (*p == ' ') p++;
            x->queued = -1;                  /* (older dumps have no <queued>) */
            if ((*p == '-' || (*p >= '0' && *p <= '9')) && dist__dump_nums(&p, &x->queued, 1) != 0) return -1;
            if (x->kind <= DIST__COLL_NONE || x->kind >= DIST__COLL_KINDS || x->queued < -1) return -1;
        } else {
            if (dist__dump_nums(&p, v, 12) != 0) return -1;
            x->comm = (unsigned)v[0]; x->seq = (unsigned long long)v[1]; x->kind = (int)v[2]; x->sync = (int)v[3];
            x->peer = (int)v[4]; x->tag = v[5]; x->dtype = (int)v[6]; x->count = (unsigned long long)v[7];
            x->state = (int)v[8]; x->res = (int)v[9]; x->started = v[10]; x->ended = v[11]; x->queued = -1;
            if (x->kind != DIST__REQ_SEND && x->kind != DIST__REQ_RECV) return -1;
        }
        if (x->dtype < 0 || x->dtype >= DIST_DTYPE_COUNT || x->state < DIST__REC_RUNNING || x->state > DIST__REC_FAILED ||
            x->peer < -1 || x->peer >= o->world || x->waiting_on < -1 || x->waiting_on >= o->world) return -1;
        o->nops++;
    }
    o->have = 1;
    return 0;
}

/* Collectives queued on `comm` in a dump, not begun (0: none, or no dump). */
static int dist__dump_queued(const dist__dump *dp, unsigned comm) {
    for (int ci = 0; dp->have && ci < dp->ncomms; ci++) if (dp->comms[ci] == comm) return dp->comm_queued[ci];
    return 0;
}

/* "0-2, 4-7" */
static void dist__ranks_text(const int *ranks, int n, char *out, size_t cap) {
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < n && off < cap; ) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
        int w = j > i ? snprintf(out + off, cap - off, "%s%d-%d", off ? ", " : "", ranks[i], ranks[j])
                      : snprintf(out + off, cap - off, "%s%d", off ? ", " : "", ranks[i]);
        if (w < 0) break;
        off += (size_t)w;
        i = j + 1;
    }
}

/* What a collective entry says in words: "all_reduce #43 (8 x float32, sum)". */
static void dist__dop_text(const dist__dop *x, char *out, size_t cap) {
    const char *name = dist__coll_name(x->kind);
    if (x->kind == DIST__COLL_BARRIER) dist__format(out, cap, "%s #%llu", name, x->seq);
    else if (x->kind == DIST__COLL_ALL_REDUCE || x->kind == DIST__COLL_REDUCE_SCATTER)
        dist__format(out, cap, "%s #%llu (%llu x %s, %s)", name, x->seq, x->count, dist_dtype_name((dist_dtype)x->dtype), dist__op_name(x->op));
    else if (x->kind == DIST__COLL_REDUCE)
        dist__format(out, cap, "%s #%llu (%llu x %s, %s, root %d)", name, x->seq, x->count, dist_dtype_name((dist_dtype)x->dtype),
                     dist__op_name(x->op), x->peer);
    else if (x->kind == DIST__COLL_BROADCAST || x->kind == DIST__COLL_GATHER || x->kind == DIST__COLL_SCATTER)
        dist__format(out, cap, "%s #%llu (%llu x %s, root %d)", name, x->seq, x->count, dist_dtype_name((dist_dtype)x->dtype), x->peer);
    else dist__format(out, cap, "%s #%llu (%llu x %s)", name, x->seq, x->count, dist_dtype_name((dist_dtype)x->dtype));
}

static int dist__dop_same_call(const dist__dop *a, const dist__dop *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->count == b->count && (a->kind == DIST__COLL_BARRIER || a->op == b->op ||
           (a->kind != DIST__COLL_ALL_REDUCE && a->kind != DIST__COLL_REDUCE && a->kind != DIST__COLL_REDUCE_SCATTER)) &&
           a->peer == b->peer;
}

/* The newest collective of `comm` in a dump (NULL: none). */
static const dist__dop *dist__dump_last(const dist__dump *dp, unsigned comm) {
    const dist__dop *best = NULL;
    for (int i = 0; i < dp->nops; i++)
        if (dp->ops[i].type == 'c' && dp->ops[i].comm == comm && (!best || dp->ops[i].seq > best->seq)) best = &dp->ops[i];
    return best;
}
static const dist__dop *dist__dump_find(const dist__dump *dp, unsigned comm, unsigned long long seq) {
    for (int i = 0; i < dp->nops; i++)
        if (dp->ops[i].type == 'c' && dp->ops[i].comm == comm && dp->ops[i].seq == seq) return &dp->ops[i];
    return NULL;
}

/* "waiting for data from rank 5" */
static void dist__dop_wait_text(const dist__dop *x, char *out, size_t cap) {
    if (x->wait_what == DIST__RECW_DATA && x->waiting_on >= 0) dist__format(out, cap, ", waiting for data from rank %d", x->waiting_on);
    else if (x->wait_what == DIST__RECW_TAKE && x->waiting_on >= 0)
        dist__format(out, cap, ", waiting for rank %d to take its part", x->waiting_on);
    else out[0] = 0;
}

/* The job's state in a few lines from every rank's dump (texts[r] NULL:
   none came).  ended_rank >= 0: the launcher saw that rank fail first, as
   ended_what says; that is then the likely cause, whatever the dumps
   suggest (it saw the end, they only show the waiting).  Without it, ranks
   that sent nothing are the likely cause when there is one of them; of
   several, the dumps cannot tell which went first, and the report does
   not guess.  Returns the report's length. */
static size_t dist__report_build(int world, char *const *texts, const size_t *lens, int ended_rank, const char *ended_what,
                                 char *out, size_t cap) {
    dist__dump *dp = (dist__dump *)DIST_MALLOC(sizeof *dp * (size_t)world);
    int *list = (int *)DIST_MALLOC(sizeof(int) * (size_t)world * 2), *list2 = list ? list + world : NULL;
    char ranks[256], what[160], wait[96];
    size_t off = 0;
    int nreports = 0, cause = -1;
    char cause_why[300] = "";
#define DIST__REP_PUT(...) do { if (off < cap) { int n_ = snprintf(out + off, cap - off, __VA_ARGS__); \
        if (n_ > 0) off = DIST__MIN(cap - 1, off + (size_t)n_); } } while (0)
    if (cap) out[0] = 0;
    if (!dp || !list) { DIST_FREE(dp); DIST_FREE(list); dist__format(out, cap, "job report: out of memory"); return strlen(out); }
    memset(dp, 0, sizeof *dp * (size_t)world);
    for (int r = 0; r < world; r++) {
        if (texts[r] && dist__dump_parse(texts[r], lens[r], &dp[r]) == 0 && dp[r].rank == r) nreports++;
        else { DIST_FREE(dp[r].ops); memset(&dp[r], 0, sizeof dp[r]); }
    }
    DIST__REP_PUT("job report: %d of %d rank%s answered\n", nreports, world, DIST__PLURAL(world));
    /* who sent nothing */
    {
        int n = 0;
        for (int r = 0; r < world; r++) if (!dp[r].have) list[n++] = r;
        if (n) {
            dist__ranks_text(list, n, ranks, sizeof ranks);
            DIST__REP_PUT("  rank%s %s sent no report (stopped, dead, or cut off from the store)\n", DIST__PLURAL(n), ranks);
            cause = list[0];
            if (n == 1) dist__format(cause_why, sizeof cause_why, "rank %d sent no report", list[0]);
            else dist__format(cause_why, sizeof cause_why, "one of ranks %s, which sent no report", ranks);
        }
    }
    /* each communicator the ranks are in: where every member is */
    for (int r0 = 0; r0 < world; r0++) {
        if (!dp[r0].have) continue;
        for (int ci = 0; ci < dp[r0].ncomms; ci++) {
            unsigned comm = dp[r0].comms[ci];
            unsigned long long top = 0;
            const dist__dop *ref = NULL;
            int seen = 0;
            for (int q = 0; q < r0 && !seen; q++)          /* one paragraph per communicator */
                for (int cj = 0; dp[q].have && cj < dp[q].ncomms; cj++) if (dp[q].comms[cj] == comm) seen = 1;
            if (seen) continue;
            for (int r = 0; r < world; r++) {
                const dist__dop *x = dp[r].have ? dist__dump_last(&dp[r], comm) : NULL;
                if (x && x->seq > top) { top = x->seq; ref = x; }
            }
            if (!ref) continue;
            if (comm) DIST__REP_PUT("  group %u:\n", comm);
            /* the ranks in the newest collective, by state */
            for (int st = DIST__REC_RUNNING; st <= DIST__REC_FAILED; st++) {
                int n = 0;
                long long longest = -1;
                for (int r = 0; r < world; r++) {
                    const dist__dop *x = dp[r].have ? dist__dump_find(&dp[r], comm, top) : NULL;
                    if (x && x->state == st && dist__dop_same_call(x, ref)) { list[n++] = r; if (x->started > longest) longest = x->started; }
                }
                if (!n) continue;
                dist__ranks_text(list, n, ranks, sizeof ranks);
                dist__dop_text(ref, what, sizeof what);
                DIST__REP_PUT("  rank%s %s %s %s", DIST__PLURAL(n), ranks,
                              st == DIST__REC_RUNNING ? (n > 1 ? "wait in" : "waits in") : st == DIST__REC_DONE ? "finished" : "failed in", what);
                if (st == DIST__REC_RUNNING && longest >= 0) DIST__REP_PUT(" (for up to %.1f s)", longest / 1000.0);
                DIST__REP_PUT("\n");
            }
            /* a different call under the same number, at any number the dumps hold */
            {
                int shown = 0;
                for (int r = 0; r < world && shown < 4; r++) {
                    for (int i = 0; dp[r].have && i < dp[r].nops && shown < 4; i++) {
                        const dist__dop *x = &dp[r].ops[i], *first = NULL;
                        char mine[160];
                        int q;
                        if (x->type != 'c' || x->comm != comm) continue;
                        for (q = 0; q < world && !first; q++)          /* the lowest rank's call of that number */
                            if (dp[q].have) first = dist__dump_find(&dp[q], comm, x->seq);
                        if (!first || first == x || dist__dop_same_call(x, first)) continue;
                        dist__dop_text(x, mine, sizeof mine);
                        dist__dop_text(first, what, sizeof what);
                        DIST__REP_PUT("  MISMATCH: rank %d called %s where rank %d called %s\n", r, mine, q - 1, what);
                        shown++;
                        if (cause < 0) { cause = r; dist__format(cause_why, sizeof cause_why, "rank %d called %s, rank %d %s", r, mine, q - 1, what); }
                    }
                }
            }
            /* members behind: not in the newest collective */
            {
                int nb = 0;
                for (int r = 0; r < world; r++) {
                    const dist__dop *x, *last;
                    int member = 0;
                    if (!dp[r].have) continue;
                    for (int cj = 0; cj < dp[r].ncomms; cj++) if (dp[r].comms[cj] == comm) member = 1;
                    if (!member || dist__dump_find(&dp[r], comm, top)) continue;
                    list2[nb++] = r;
                    last = dist__dump_last(&dp[r], comm);
                    x = last;
                    if (x && x->state == DIST__REC_RUNNING) {
                        dist__dop_text(x, what, sizeof what);
                        dist__dop_wait_text(x, wait, sizeof wait);
                        char in[200];       /* "queued 4.0 s ago, entered 3.0 s ago, waiting for data from rank 5" */
                        int m = x->queued >= 0 ? snprintf(in, sizeof in, ", queued %.1f s ago", x->queued / 1000.0) : 0;
                        m = m < 0 ? 0 : m >= (int)sizeof in ? (int)sizeof in - 1 : m;
                        if (x->started >= 0) dist__format(in + m, sizeof in - (size_t)m, ", entered %.1f s ago%s", x->started / 1000.0, wait);
                        else dist__format(in + m, sizeof in - (size_t)m, "%s", wait);
                        if (in[0]) DIST__REP_PUT("  rank %d is still in %s (%s)\n", r, what, in + 2);
                        else DIST__REP_PUT("  rank %d is still in %s\n", r, what);
                    } else if (x) {
                        dist__dop_text(x, what, sizeof what);
                        DIST__REP_PUT("  rank %d has not called collective #%llu: its last, %s, %s", r, top, what,
                                      x->state == DIST__REC_DONE ? "finished" : "failed");
                        if (x->ended >= 0) DIST__REP_PUT(" %.1f s ago", x->ended / 1000.0);
                        DIST__REP_PUT("\n");
                    } else DIST__REP_PUT("  rank %d has not called collective #%llu (nor any other on this communicator yet)\n", r, top);
                    if (cause < 0) {
                        cause = r;
                        dist__format(cause_why, sizeof cause_why, "rank %d is behind the others (they are in collective #%llu)", r, top);
                    }
                }
                (void)nb;
            }
            /* async collectives queued behind the current one, ranks with as many together (4 lines at
               most: each a pass over the ranks, so a large world costs a few passes, not world^2) */
            int said[4], nsaid = 0;
            for (int r = 0; r < world && nsaid < 4; r++) {
                int k = dist__dump_queued(&dp[r], comm), n = 0, dup = 0;
                long long longest = -1;
                if (k <= 0) continue;
                for (int i = 0; i < nsaid; i++) dup |= said[i] == k;
                if (dup) continue;
                said[nsaid++] = k;
                for (int q = r; q < world; q++)
                    if (dist__dump_queued(&dp[q], comm) == k) {
                        list[n++] = q;
                        for (int cj = 0; cj < dp[q].ncomms; cj++)
                            if (dp[q].comms[cj] == comm && dp[q].comm_queued_ms[cj] > longest) longest = dp[q].comm_queued_ms[cj];
                    }
                dist__ranks_text(list, n, ranks, sizeof ranks);
                DIST__REP_PUT("  rank%s %s %s %d collective%s queued behind %s current one (async; the first for %s%.1f s)\n",
                              DIST__PLURAL(n), ranks, n > 1 ? "have" : "has", k, DIST__PLURAL(k), n > 1 ? "their" : "its",
                              n > 1 ? "up to " : "", longest / 1000.0);
            }
        }
    }
    /* every rank's unfinished point-to-point operations, and where they are */
    for (int r = 0; r < world; r++) {
        int shown = 0;
        if (!dp[r].have) continue;
        for (int i = 0; i < dp[r].nops && shown < 3; i++) {
            const dist__dop *x = &dp[r].ops[i];
            if (x->type != 'p' || x->state != DIST__REC_RUNNING || x->started < 0) continue;   /* (waited on) */
            shown++;
            if (x->peer < 0)
                DIST__REP_PUT("  rank %d waits in recv #%llu from any rank (tag %lld, %llu x %s) for %.1f s\n", r, x->seq, x->tag, x->count,
                              dist_dtype_name((dist_dtype)x->dtype), x->started / 1000.0);
            else
                DIST__REP_PUT("  rank %d waits in %s #%llu %s rank %d (tag %lld, %llu x %s) for %.1f s\n", r,
                              x->kind == DIST__REQ_SEND ? (x->sync ? "ssend" : "send") : "recv", x->seq, x->kind == DIST__REQ_SEND ? "to" : "from",
                              x->peer, x->tag, x->count, dist_dtype_name((dist_dtype)x->dtype), x->started / 1000.0);
        }
        if (dp[r].in_destroy) DIST__REP_PUT("  rank %d is in dist_destroy\n", r);
    }
    if (ended_rank >= 0 && ended_rank < world)
        DIST__REP_PUT("  likely cause: rank %d %.200s (the launcher saw it fail first)\n", ended_rank, ended_what && ended_what[0] ? ended_what : "failed");
    else if (cause >= 0) DIST__REP_PUT("  likely cause: %s\n", cause_why);
#undef DIST__REP_PUT
    for (int r = 0; r < world; r++) DIST_FREE(dp[r].ops);
    DIST_FREE(dp); DIST_FREE(list);
    return off;
}

static dist_result dist__dump_publish(dist_t *top, long long gen);

/* 1 when text[0..len) is a dump that answers request `gen` or a later one
   (its header line says which it answered); 0 for an older one or bytes
   that are no dump.  The header ends with a newline before len, so the
   numbers are read within the bytes given. */
static int dist__dump_answers(const char *text, size_t len, long long gen) {
    long long v[4];
    const char *q = text + 12;
    if (len <= 12 || memcmp(text, "dist-dump 1 ", 12) != 0 || !memchr(text, '\n', len)) return 0;
    return dist__dump_nums(&q, v, 4) == 0 && v[3] >= gen;
}

/* Answers the newest dump request if this rank has not (0: nothing new,
   or the store was busy). */
static void dist__dump_answer(dist_t *top) {
    const char *keys[1] = { "dist/dump/req" };
    char num[24], *end;
    size_t len = 0;
    long long g;
    int exists = 0;
    if (top->store_fd == DIST__NO_SOCKET || top->store_broken) return;
    /* a check, then a get (an add of 0 would rewrite the value: the store
       would allocate for every rank every second) */
    if (dist_store_check(top, keys, 1, &exists) != DIST_OK || !exists || dist_store_get(top, keys[0], num, sizeof num - 1, &len) != DIST_OK)
        return;
    num[len] = 0;
    g = strtoll(num, &end, 10);
    if (end == num || *end) return;
    if (g > DIST__LOAD_RELAXED(&top->mon_done_gen) && dist__dump_publish(top, g) == DIST_OK) DIST__STORE_RELAXED(&top->mon_done_gen, (long long)g);
}

/* Reads every rank's dump that answers request `gen` or a later one from the store, waiting up to
   wait_ms for those not there yet (a rank's monitor answers within a
   second), and builds the report.  Through the world's store. */
static size_t dist__report_collect(dist_t *top, long long gen, int wait_ms, char *out, size_t cap) {
    int world = DIST__LOAD_RELAXED(&top->world);
    char **texts = (char **)DIST_MALLOC(sizeof(char *) * (size_t)world);
    size_t *lens = (size_t *)DIST_MALLOC(sizeof(size_t) * (size_t)world), n;
    int64_t until = dist__now_ms() + wait_ms;
    int missing = world, store_lost = 0;
    char key[64], *got = (char *)DIST_MALLOC(DIST__DUMP_CAP);   /* (each dump read here, then kept at its size) */
    char lost[DIST__ERRLEN];
    if (!texts || !lens || !got) {
        DIST_FREE(texts); DIST_FREE(lens); DIST_FREE(got);
        dist__format(out, cap, "job report: out of memory");
        return strlen(out);
    }
    memset(texts, 0, sizeof(char *) * (size_t)world);
    memset(lens, 0, sizeof(size_t) * (size_t)world);
    for (;;) {
        for (int r = 0; r < world; r++) {
            size_t len = 0;
            if (texts[r]) continue;
            dist__format(key, sizeof key, "dist/dump/%d", r);
            /* a check first: a get would wait for the key */
            {
                const char *keys[1];
                int exists = 0;
                dist_result cr;
                keys[0] = key;
                /* (TIMEOUT: the store was busy, for the monitor, which does not wait for it) */
                if ((cr = dist_store_check(top, keys, 1, &exists)) != DIST_OK && cr != DIST_ERR_TIMEOUT) {
                    dist__format(lost, sizeof lost, "%s", dist__thread_error);
                    store_lost = 1;
                    break;
                }
                if (cr != DIST_OK || !exists) continue;
            }
            /* (no larger than a dump can be: one that is fails, and is not read) */
            if (dist_store_get(top, key, got, DIST__DUMP_CAP, &len) != DIST_OK || len >= DIST__DUMP_CAP) continue;
            if ((texts[r] = (char *)DIST_MALLOC(len + 1)) == NULL) continue;
            memcpy(texts[r], got, len);
            texts[r][lens[r] = len] = 0;
            if (!dist__dump_answers(texts[r], lens[r], gen)) { DIST_FREE(texts[r]); texts[r] = NULL; continue; }   /* (not yet) */
            missing--;
        }
        if (!missing || store_lost || dist__now_ms() >= until) break;
        dist__dump_answer(top);        /* (another rank may ask meanwhile: it waits for this one too) */
        dist__sleep_ms(50);
    }
    n = dist__report_build(world, texts, lens, -1, NULL, out, cap);
    if (store_lost && n + 1 < cap) {
        dist__format(out + n, cap - n, "  (the store stopped answering, so the others' reports could not be read: %s)\n", lost);
        n += strlen(out + n);
    }
    for (int r = 0; r < world; r++) DIST_FREE(texts[r]);
    DIST_FREE(texts); DIST_FREE(lens); DIST_FREE(got);
    return n;
}

/* Publishes this rank's dump, answering request `gen`. */
static dist_result dist__dump_publish(dist_t *top, long long gen) {
    size_t cap = DIST__DUMP_CAP, len;
    char *buf = (char *)DIST_MALLOC(cap), key[64];
    dist_result r;
    if (!buf) return DIST_ERR_NOMEM;
    dist__mutex_lock(&top->eng->lock);
    len = dist__rec_dump(top, gen, buf, cap);
    dist__mutex_unlock(&top->eng->lock);
    dist__format(key, sizeof key, "dist/dump/%d", top->rank);
    r = dist_store_set(top, key, buf, len);
    DIST_FREE(buf);
    return r;
}

/* The waiting note for one entry (first after `first` ns, then every `every`). */
static void dist__monitor_note(dist_t *d, const dist__rec_view *o, int64_t now, char *line, size_t cap) {
    char what[160], wait[96];
    dist__dop x;
    memset(&x, 0, sizeof x);
    x.kind = o->what; x.seq = o->seq; x.count = o->count; x.dtype = o->dtype; x.op = o->op;
    x.peer = dist__rec_world_rank(d, o->peer); x.wait_what = o->wait_what; x.waiting_on = dist__rec_world_rank(d, o->waiting_on);
    if (x.wait_what == DIST__RECW_NONE) x.wait_what = DIST__RECW_SLOTS;
    dist__dop_text(&x, what, sizeof what);
    dist__dop_wait_text(&x, wait, sizeof wait);
    dist__format(line, cap, "%s%s has waited %.1f s%s%s", what, d->top == d ? "" : " (a group)", (now - o->t_start) / 1e9,
                 wait[0] ? " so far" : "", wait);
}

/* ...for a point-to-point operation: "recv #3 from rank 0 (tag 7, 8 x
   float32) has waited 10.0 s so far". */
static void dist__monitor_note_p2p(dist_t *d, const dist__rec_view *o, int64_t now, char *line, size_t cap) {
    const char *name = o->what == DIST__REQ_SEND ? (o->sync ? "ssend" : "send") : "recv";
    char peer[48];
    if (o->peer < 0) dist__format(peer, sizeof peer, "from any rank");
    else dist__format(peer, sizeof peer, "%s rank %d", o->what == DIST__REQ_SEND ? "to" : "from", dist__rec_world_rank(d, o->peer));
    dist__format(line, cap, "%s #%llu %s%s (tag %lld, %llu x %s) has waited %.1f s so far", name, (unsigned long long)o->seq, peer,
                 d->top == d ? "" : " (a group)", (long long)o->tag, (unsigned long long)o->count, dist_dtype_name((dist_dtype)o->dtype),
                 (now - o->t_start) / 1e9);
}

static void dist__monitor_sweep(dist_t *top) {
    dist__engine *e = top->eng;
    int64_t now = dist__now_ns();
    int64_t first = DIST__MIN((int64_t)10000, (int64_t)top->timeout_ms / 4) * 1000000;   /* (as init's notes) */
    int64_t every = DIST__MIN((int64_t)30000, (int64_t)top->timeout_ms / 4) * 1000000;
    char lines[4][DIST__ERRLEN];
    int nlines = 0;
    long long gen = 0;
    if (first < 1000000) first = every = 1000000;
    /* calls that have waited a while */
    if (e->log.logger.func && e->log.level >= DIST_LOG_INFO) {
        dist__mutex_lock(&e->lock);
        for (int ci = 0; ci < e->ncomms && nlines < 4; ci++) {
            dist_t *d = e->comms[ci];
            dist__rec_view o;
            uint64_t cur = 0, n = DIST_RECORDER_OPS ? dist__rec_coll_newest(d, &cur) : 0;
            if (n && dist__rec_coll_view(d, n, n, cur, &o) && o.state == DIST__REC_RUNNING && o.t_start && now - o.t_start >= first) {
                if (d->mon_seq != o.seq) { d->mon_seq = o.seq; d->mon_note_ns = o.t_start + first; }
                if (now >= d->mon_note_ns) {
                    dist__monitor_note(d, &o, now, lines[nlines++], sizeof lines[0]);
                    d->mon_note_ns = now + every;
                }
            }
            /* the point-to-point operation waited on longest (under the engine lock, as it is written) */
            {
                dist__rec_view p, best;
                uint64_t m = d->rec_p2p.n, key;
                memset(&best, 0, sizeof best);
                for (uint64_t k = m > DIST_RECORDER_OPS ? m - DIST_RECORDER_OPS : 0; DIST_RECORDER_OPS && k < m; k++)
                    if (dist__rec_read(&d->rec_p2p.ops[k & (DIST__REC_N - 1)], &p) && p.state == DIST__REC_RUNNING && p.t_start &&
                        (!best.t_start || p.t_start < best.t_start)) best = p;
                if (!best.t_start || now - best.t_start < first || nlines == 4) continue;
                key = best.seq << 1 | (best.what == DIST__REQ_RECV);
                if (d->mon_p2p != key) { d->mon_p2p = key; d->mon_p2p_ns = best.t_start + first; }
                if (now >= d->mon_p2p_ns) {
                    dist__monitor_note_p2p(d, &best, now, lines[nlines++], sizeof lines[0]);
                    d->mon_p2p_ns = now + every;
                }
            }
        }
        dist__mutex_unlock(&e->lock);
        for (int i = 0; i < nlines; i++) dist__logf(&e->log, DIST_LOG_INFO, "%s", lines[i]);
    }
    /* dump requests: asked for here, or by anyone */
    if (top->store_fd == DIST__NO_SOCKET || top->store_broken) return;
    if (DIST__LOAD_ACQ(&top->mon_want)) {
        int64_t g = 0;
        if (dist_store_add(top, "dist/dump/req", 1, &g) != DIST_OK) return;     /* (the store is busy: next time) */
        DIST__STORE_RELAXED(&top->mon_want, 0);
        top->mon_asked_gen = g;
        gen = g;
        if (dist__dump_publish(top, gen) == DIST_OK) DIST__STORE_RELAXED(&top->mon_done_gen, gen);
    } else dist__dump_answer(top);
    if (top->mon_asked_gen) {     /* a call here timed out: the report, in the log */
        size_t cap = 8192;
        char *rep = (char *)DIST_MALLOC(cap);
        long long asked = top->mon_asked_gen;
        top->mon_asked_gen = 0;
        if (rep) {
            dist__report_collect(top, asked, DIST__REPORT_WAIT_MS, rep, cap);
            dist__mutex_lock(&top->mon_lock);
            DIST_FREE(top->mon_report);
            top->mon_report = rep;
            dist__mutex_unlock(&top->mon_lock);
            /* a line each (a logger's sink is lines; a line is at most DIST__LOG_LINE) */
            for (const char *line = rep, *nl; *line; line = nl ? nl + 1 : line + strlen(line)) {
                int len = (int)((nl = strchr(line, '\n')) != NULL ? (size_t)(nl - line) : strlen(line));
                if (len) dist__logf(&e->log, DIST_LOG_ERROR, "%s%.*s", line == rep ? "a call timed out; " : "", len, line);
            }
        }
    }
}

static DIST__THREAD_RETURN dist__monitor_thread(void *arg) {
    dist_t *top = (dist_t *)arg;
    dist__quiet = 1;                  /* its failures are nobody's sentence */
    int64_t next = dist__now_ms() + 1000;
    dist__mutex_lock(&top->mon_lock);
    while (!top->mon_stop) {
        /* once a second; the trace's rings more often */
        dist__cond_wait_ms(&top->mon_cond, &top->mon_lock, top->tr_file ? DIST__TRACE_DRAIN_MS : 1000);
        if (top->mon_stop) break;
        dist__mutex_unlock(&top->mon_lock);
        dist__trace_drain_all(top);
        if (dist__now_ms() >= next || DIST__LOAD_ACQ(&top->mon_want)) {
            dist__monitor_sweep(top);
            next = dist__now_ms() + 1000;
        }
        dist__mutex_lock(&top->mon_lock);
    }
    dist__mutex_unlock(&top->mon_lock);
    return DIST__THREAD_RETURN_VALUE;
}

static dist_result dist__monitor_start(dist_t *top, const char *what) {
    dist_result r = dist__obs_setup(top, what);
    if (r != DIST_OK) return r;
    dist__mutex_init(&top->mon_lock);
    dist__cond_init(&top->mon_cond);
    top->mon_inited = 1;
    if (dist__thread_start(&top->mon_thread, dist__monitor_thread, top) == 0) top->mon_started = 1;
    return DIST_OK;
}

static void dist__monitor_stop(dist_t *top) {
    if (!top->mon_inited) return;
    if (top->mon_started) {
        dist__mutex_lock(&top->mon_lock);
        top->mon_stop = 1;
        dist__cond_broadcast(&top->mon_cond);
        dist__mutex_unlock(&top->mon_lock);
        dist__thread_join(top->mon_thread);
        top->mon_started = 0;
    }
    DIST_FREE(top->mon_report);
    top->mon_report = NULL;
    dist__cond_destroy(&top->mon_cond);
    dist__mutex_destroy(&top->mon_lock);
    top->mon_inited = 0;
}

/* A call of this rank timed out: the monitor asks every rank for a dump. */
static void dist__monitor_alarm(dist_t *d) {
    dist_t *top = d->top;
    if (!top->mon_started) return;
    DIST__STORE_REL(&top->mon_want, 1);
    dist__mutex_lock(&top->mon_lock);
    dist__cond_broadcast(&top->mon_cond);
    dist__mutex_unlock(&top->mon_lock);
}

DIST_API size_t dist_recorder_dump(dist_t *d, char *buf, size_t cap) {
    size_t n;
    if (!d || !buf || !cap) return 0;
    dist__mutex_lock(&d->eng->lock);
    n = dist__rec_dump(d->top, 0, buf, cap);
    dist__mutex_unlock(&d->eng->lock);
    return n;
}

DIST_API dist_result dist_job_report(dist_t *d, char *buf, size_t cap) {
    int64_t gen = 0;
    dist_result r;
    dist_t *top;
    if (!d || !buf || !cap) return dist__fail(d, DIST_ERR_INVALID, "job report: NULL communicator or buffer, or no room");
    top = d->top;
    buf[0] = 0;
    if ((r = dist_store_add(top, "dist/dump/req", 1, &gen)) != DIST_OK) return dist__fail(d, r, "job report: %s", dist_error_message(top));
    if ((r = dist__dump_publish(top, gen)) != DIST_OK) return dist__fail(d, r, "job report: %s", dist_error_message(top));
    if (gen > DIST__LOAD_RELAXED(&top->mon_done_gen)) DIST__STORE_RELAXED(&top->mon_done_gen, (long long)gen);
    dist__report_collect(top, gen, DIST__REPORT_WAIT_MS, buf, cap);
    return DIST_OK;
}

/* The launcher's side: it hosts the store, so it asks and reads there. */
DIST_API dist_result dist_store_host_report(dist_store_host *host, char *buf, size_t cap, int wait_ms) {
    dist__store_server *sv = host ? host->sv : NULL;
    int world = sv ? sv->world : 0, missing;
    char **texts, key[48], num[32];
    size_t *lens;
    long long gen = 1;
    int64_t until = dist__now_ms() + (wait_ms > 0 ? wait_ms : 0);
    dist__kv *kv;
    if (!sv || !buf || !cap) return dist__fail(NULL, DIST_ERR_INVALID, "store host report: no running store host, or no buffer");
    texts = (char **)DIST_MALLOC(sizeof(char *) * (size_t)world);
    lens = (size_t *)DIST_MALLOC(sizeof(size_t) * (size_t)world);
    if (!texts || !lens) { DIST_FREE(texts); DIST_FREE(lens); return dist__fail(NULL, DIST_ERR_NOMEM, "store host report: out of memory"); }
    memset(texts, 0, sizeof(char *) * (size_t)world);
    memset(lens, 0, sizeof(size_t) * (size_t)world);
    dist__mutex_lock(&sv->kv_lock);          /* a new request: every rank's monitor answers it */
    if ((kv = dist__kv_find(sv, "dist/dump/req", 13)) != NULL && kv->vlen && kv->vlen < sizeof num) {
        memcpy(num, kv->val, kv->vlen); num[kv->vlen] = 0;
        gen = strtoll(num, NULL, 10) + 1;
    }
    snprintf(num, sizeof num, "%lld", gen);
    dist__kv_set(sv, "dist/dump/req", 13, num, strlen(num));
    dist__mutex_unlock(&sv->kv_lock);
    for (int answered = 0;;) {
        dist__mutex_lock(&sv->kv_lock);
        missing = 0;
        for (int r = 0; r < world; r++) {
            int connected = 0;
            if (texts[r]) continue;
            for (int i = 0; i < sv->nconns && !connected; i++)   /* (a rank whose connection is gone will not answer) */
                connected = sv->conns[i].hello_done && sv->conns[i].rank == r && !sv->conns[i].closing;
            missing += connected;
            snprintf(key, sizeof key, "dist/dump/%d", r);
            if ((kv = dist__kv_find(sv, key, strlen(key))) == NULL || !dist__dump_answers((const char *)kv->val, kv->vlen, gen))
                continue;                    /* (not this request's answer yet) */
            if ((texts[r] = (char *)DIST_MALLOC(kv->vlen + 1)) == NULL) continue;
            memcpy(texts[r], kv->val, kv->vlen);
            texts[r][kv->vlen] = 0;
            lens[r] = kv->vlen;
            missing -= connected;
            answered++;
        }
        dist__mutex_unlock(&sv->kv_lock);
        if (!missing || dist__now_ms() >= until) {
            dist__report_build(world, texts, lens, host->ended_rank, host->ended_what, buf, cap);
            for (int r = 0; r < world; r++) DIST_FREE(texts[r]);
            DIST_FREE(texts); DIST_FREE(lens);
            return answered ? DIST_OK : DIST_ERR_NOT_FOUND;
        }
        dist__sleep_ms(50);
    }
}

DIST_API void dist_store_host_note_failure(dist_store_host *host, int rank, const char *what) {
    if (!host) return;
    host->ended_rank = rank >= 0 && rank < host->world ? rank : -1;
    dist__format(host->ended_what, sizeof host->ended_what, "%s", what && what[0] ? what : "failed");
}

/* [SECTION] stats and traces
   DIST_STATS, DIST_TRACE and DIST_RECORDER=timed time every call of a
   world and its groups (rec_timed: the clock is read as each call starts
   and ends).  With DIST_STATS or DIST_TRACE each communicator also gets a
   dist__obs: as a call ends (dist__obs_end, by the thread that writes its
   recorder entry) its kind's counters and time histogram grow, and under
   DIST_TRACE the call is copied into a ring that the monitor thread writes
   into the rank's trace file every DIST__TRACE_DRAIN_MS.  A call that
   finds its ring full is counted, not waited for: the trace says how many
   were dropped.  Nothing is allocated per call.

   The job clock is dist__now_ns() + clock_off, clock_off measured against
   the store host's clock at init (Cristian's method: the shortest of
   DIST__CLOCK_PROBES round trips; clock_err is half of it), so the traces
   of ranks on several hosts line up. */
#ifndef DIST_TRACE_EVENTS
#define DIST_TRACE_EVENTS 16384              /* each ring (collectives, point-to-point) of each communicator */
#endif
#if DIST_TRACE_EVENTS < 64 || (DIST_TRACE_EVENTS & (DIST_TRACE_EVENTS - 1)) != 0
#error "dist.h: DIST_TRACE_EVENTS must be a power of two, at least 64"
#endif
#define DIST__HIST_SUB 8                     /* buckets per power of two: within 1/16 of a value */
#define DIST__HIST_N (DIST__HIST_SUB * 44)   /* the last ends at 2^45 ns (9.8 hours) */
#define DIST__CLOCK_PROBES 8
enum { DIST__STAT_SEND = DIST__COLL_KINDS - 1, DIST__STAT_RECV, DIST__STAT_KINDS };
typedef char dist__stat_kinds_check[DIST__STAT_KINDS == DIST_STATS_OPS ? 1 : -1];

typedef struct dist__opstat {
    uint64_t calls, failed, bytes, ns_sum, ns_max;
    uint64_t hist[DIST__HIST_N];             /* calls by duration (dist__hist_bucket) */
} dist__opstat;

typedef struct dist__trace_ev {
    uint64_t desc, seq, count;
    int64_t t_start, t_end, tag;             /* (a collective's tag: when it was queued; see dist__rec) */
    int64_t spread;                          /* a collective: its first and last entries apart (ns), */
    int32_t res, last;                       /* ...and who came last (a rank of the communicator; -1: unknown) */
} dist__trace_ev;

typedef struct dist__obs_ring {
    dist__trace_ev *ev;                      /* [DIST_TRACE_EVENTS]; NULL: no trace */
    uint64_t head;                           /* calls put in (by the side's writer) */
    uint64_t tail;                           /* ...written out (under tr_lock) */
    uint64_t dropped;                        /* calls that found it full (by the side's writer) */
    uint64_t dropped_told;                   /* ...that the trace says (under tr_lock) */
} dist__obs_ring;

typedef struct dist__obs {
    struct dist__obs *next;                  /* the world's obs_list (under tr_lock) */
    uint32_t id;                             /* the communicator's id: its rows of the trace are 2 id, 2 id + 1 */
    int64_t t0;                              /* collection began */
    dist__opstat st[DIST__STAT_KINDS];       /* collectives: by their thread; send, recv: under the engine lock */
    uint64_t measured;                       /* collectives whose entries this rank learned of (their thread) */
    int nmembers;                            /* the communicator's size when made (a grown world's newcomers: not counted) */
    uint64_t *last_n, *last_ns, *last_max;   /* [nmembers]: collectives each member came last to, how late in all
                                                and at most (ns after the first) */
    dist__obs_ring ring[2];                  /* 0: collectives, 1: point-to-point */
} dist__obs;

static int dist__hist_bucket(uint64_t ns) {
    int e = 3, b;
    if (ns < DIST__HIST_SUB) return (int)ns;
    while (e < 63 && (ns >> (e + 1)) != 0) e++;             /* 2^e <= ns < 2^(e+1) */
    b = (e - 2) * DIST__HIST_SUB + (int)((ns >> (e - 3)) & (DIST__HIST_SUB - 1));
    return b < DIST__HIST_N ? b : DIST__HIST_N - 1;
}

/* The middle of bucket b, in ns. */
static double dist__hist_value(int b) {
    int e, sub;
    if (b < DIST__HIST_SUB) return b;
    e = b / DIST__HIST_SUB + 2; sub = b % DIST__HIST_SUB;
    return ((double)(DIST__HIST_SUB + sub) + 0.5) * (double)((uint64_t)1 << (e - 3));
}

static void dist__obs_end(dist_t *d, int side, const dist__rec *x, int last, int64_t spread) {
    dist__obs *o = d->obs;
    dist__obs_ring *g = &o->ring[side];
    uint64_t desc = DIST__LOAD_RELAXED(&x->desc), count = DIST__LOAD_RELAXED(&x->count);
    int what = (int)(desc & 255), dtype = (int)(desc >> 16 & 255);
    int k = side ? (what == DIST__REQ_RECV ? DIST__STAT_RECV : DIST__STAT_SEND) : what - 1;
    int64_t t0 = DIST__LOAD_RELAXED(&x->t_start), t1 = DIST__LOAD_RELAXED(&x->t_end);
    uint64_t ns = t0 && t1 > t0 ? (uint64_t)(t1 - t0) : 0, h;
    int failed = DIST__LOAD_RELAXED(&x->state) == DIST__REC_FAILED, b;
    dist__opstat *st;
    if (k < 0 || k >= (side ? DIST__STAT_KINDS : DIST__STAT_SEND)) return;
    st = &o->st[k];
    DIST__STORE_RELAXED(&st->calls, st->calls + 1);
    if (failed) DIST__STORE_RELAXED(&st->failed, st->failed + 1);
    DIST__STORE_RELAXED(&st->bytes, st->bytes + count * dist_dtype_size((dist_dtype)dtype));
    DIST__STORE_RELAXED(&st->ns_sum, st->ns_sum + ns);
    if (ns > st->ns_max) DIST__STORE_RELAXED(&st->ns_max, ns);
    b = dist__hist_bucket(ns);
    DIST__STORE_RELAXED(&st->hist[b], st->hist[b] + 1);
    if (last >= 0 && (last = dist__grank(d, last)) >= 0 && last < o->nmembers && !failed) {
        uint64_t late = spread > 0 ? (uint64_t)spread : 0;
        DIST__STORE_RELAXED(&o->measured, o->measured + 1);
        DIST__STORE_RELAXED(&o->last_n[last], o->last_n[last] + 1);
        DIST__STORE_RELAXED(&o->last_ns[last], o->last_ns[last] + late);
        if (late > o->last_max[last]) DIST__STORE_RELAXED(&o->last_max[last], late);
    } else last = -1;
    if (!g->ev) return;
    h = g->head;
    if (h - DIST__LOAD_ACQ(&g->tail) >= DIST_TRACE_EVENTS) { DIST__STORE_RELAXED(&g->dropped, g->dropped + 1); return; }
    {
        dist__trace_ev *ev = &g->ev[h & (DIST_TRACE_EVENTS - 1)];
        ev->desc = desc; ev->seq = DIST__LOAD_RELAXED(&x->seq); ev->count = count;
        ev->t_start = t0; ev->t_end = t1; ev->tag = DIST__LOAD_RELAXED(&x->tag);
        ev->res = failed ? DIST__LOAD_RELAXED(&x->res) : 0;
        ev->last = last; ev->spread = spread;
    }
    DIST__STORE_REL(&g->head, h + 1);
}

/* ns on the job clock as Chrome's microseconds: "12345.678". */
static int dist__trace_us(char *buf, size_t cap, int64_t ns) {
    if (ns < 0) return snprintf(buf, cap, "-%lld.%03lld", (long long)(-ns / 1000), (long long)(-ns % 1000));
    return snprintf(buf, cap, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* One call as a trace event (",\n{...}"); its length. */
static size_t dist__trace_event(const dist_t *top, const dist__obs *o, int side, const dist__trace_ev *ev, char *buf, size_t cap) {
    int what = (int)(ev->desc & 255), algo = (int)(ev->desc >> 8 & 255), dtype = (int)(ev->desc >> 16 & 255);
    int op = (int)(ev->desc >> 24 & 255), peer = (int)(int32_t)(uint32_t)(ev->desc >> 32);
    uint64_t bytes = ev->count * dist_dtype_size((dist_dtype)dtype);
    const char *res = ev->res ? dist_result_name((dist_result)ev->res) : "ok";
    char ts[32], dur[32];
    int n;
    dist__trace_us(ts, sizeof ts, ev->t_start + top->clock_off);
    dist__trace_us(dur, sizeof dur, ev->t_end > ev->t_start ? ev->t_end - ev->t_start : 0);
    if (side == 0) {
        char extra[192] = "";
        int reduces = what == DIST__COLL_REDUCE || what == DIST__COLL_ALL_REDUCE || what == DIST__COLL_REDUCE_SCATTER;
        int rooted = what == DIST__COLL_BROADCAST || what == DIST__COLL_REDUCE || what == DIST__COLL_GATHER || what == DIST__COLL_SCATTER;
        if (reduces) dist__format(extra, sizeof extra, ",\"op\":\"%s\"", dist__op_name(op));
        if (rooted) dist__format(extra + strlen(extra), sizeof extra - strlen(extra), ",\"root\":%d", peer);
        if (ev->last >= 0) {
            char late[32];
            dist__trace_us(late, sizeof late, ev->spread);
            dist__format(extra + strlen(extra), sizeof extra - strlen(extra), ",\"last_in\":%d,\"late_us\":%s", ev->last, late);
        }
        if (ev->tag && ev->t_start >= ev->tag) {      /* queued (an async call): how long before it began */
            char queued[32];
            dist__trace_us(queued, sizeof queued, ev->t_start - ev->tag);
            dist__format(extra + strlen(extra), sizeof extra - strlen(extra), ",\"queued_us\":%s", queued);
        }
        n = snprintf(buf, cap, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"cat\":\"collective\",\"name\":\"%s\",\"ts\":%s,\"dur\":%s,"
                     "\"args\":{\"seq\":%llu,\"count\":%llu,\"dtype\":\"%s\"%s,\"bytes\":%llu,\"algo\":\"%s\",\"result\":\"%s\"}}",
                     top->rank, 2 * o->id, dist__coll_name(what), ts, dur, (unsigned long long)ev->seq, (unsigned long long)ev->count,
                     dist_dtype_name((dist_dtype)dtype), extra, (unsigned long long)bytes, dist__algo_name(algo), res);
    } else
        n = snprintf(buf, cap, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"cat\":\"p2p\",\"name\":\"%s\",\"ts\":%s,\"dur\":%s,"
                     "\"args\":{\"seq\":%llu,\"count\":%llu,\"dtype\":\"%s\",\"peer\":%d,\"tag\":%lld,\"sync\":%s,\"bytes\":%llu,"
                     "\"result\":\"%s\"}}", top->rank, 2 * o->id + 1, what == DIST__REQ_RECV ? "recv" : "send", ts, dur,
                     (unsigned long long)ev->seq, (unsigned long long)ev->count, dist_dtype_name((dist_dtype)dtype), peer,
                     (long long)(ev->tag & ~DIST__REC_SYNC), (ev->tag & DIST__REC_SYNC) ? "true" : "false", (unsigned long long)bytes, res);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Writes out what o's rings hold.  Under tr_lock, with a trace file. */
static void dist__trace_drain(dist_t *top, dist__obs *o) {
    char buf[16384];
    for (int side = 0; side < 2; side++) {
        dist__obs_ring *g = &o->ring[side];
        uint64_t h = DIST__LOAD_ACQ(&g->head), dropped = DIST__LOAD_RELAXED(&g->dropped);
        size_t off = 0;
        for (uint64_t t = g->tail; t < h; t++) {
            off += dist__trace_event(top, o, side, &g->ev[t & (DIST_TRACE_EVENTS - 1)], buf + off, sizeof buf - off);
            DIST__STORE_REL(&g->tail, t + 1);
            if (sizeof buf - off < 1024) { fwrite(buf, 1, off, top->tr_file); off = 0; }
        }
        if (dropped != g->dropped_told) {
            char ts[32];
            int n;
            dist__trace_us(ts, sizeof ts, dist__now_ns() + top->clock_off);
            n = snprintf(buf + off, sizeof buf - off, ",\n{\"ph\":\"i\",\"pid\":%d,\"tid\":%u,\"s\":\"t\",\"name\":\"dropped\",\"ts\":%s,"
                         "\"args\":{\"events\":%llu}}", top->rank, 2 * o->id + (unsigned)side, ts, (unsigned long long)(dropped - g->dropped_told));
            if (n > 0 && (size_t)n < sizeof buf - off) off += (size_t)n;
            g->dropped_told = dropped;
        }
        if (off) fwrite(buf, 1, off, top->tr_file);
    }
}

/* The monitor's turn: every communicator's calls, into the file. */
static void dist__trace_drain_all(dist_t *top) {
    if (!top->tr_inited) return;
    dist__mutex_lock(&top->tr_lock);
    if (top->tr_file) {
        for (dist__obs *o = top->obs_list; o; o = o->next) dist__trace_drain(top, o);
        fflush(top->tr_file);
    }
    dist__mutex_unlock(&top->tr_lock);
}

/* Communicator d (the world or a group of it) gets its obs. */
static dist_result dist__obs_add(dist_t *d, const char *what) {
    dist_t *top = d->top;
    dist__obs *o = (dist__obs *)DIST_MALLOC(sizeof *o);
    if (!o) return dist__fail(NULL, DIST_ERR_NOMEM, "%s: out of memory for its stats (DIST_STATS)", what);
    memset(o, 0, sizeof *o);
    o->id = d->id;
    o->t0 = dist__now_ns();
    o->nmembers = d->world;
    o->last_n = (uint64_t *)DIST_MALLOC(sizeof(uint64_t) * 3 * (size_t)d->world);
    if (!o->last_n) { DIST_FREE(o); return dist__fail(NULL, DIST_ERR_NOMEM, "%s: out of memory for its stats (DIST_STATS)", what); }
    memset(o->last_n, 0, sizeof(uint64_t) * 3 * (size_t)d->world);
    o->last_ns = o->last_n + d->world;
    o->last_max = o->last_ns + d->world;
    dist__mutex_lock(&top->tr_lock);
    if (top->tr_file) {
        for (int side = 0; side < 2; side++) {
            o->ring[side].ev = (dist__trace_ev *)DIST_MALLOC(sizeof(dist__trace_ev) * DIST_TRACE_EVENTS);
            if (!o->ring[side].ev) {
                dist__mutex_unlock(&top->tr_lock);
                DIST_FREE(o->ring[0].ev); DIST_FREE(o->last_n); DIST_FREE(o);
                return dist__fail(NULL, DIST_ERR_NOMEM, "%s: out of memory for its trace (DIST_TRACE)", what);
            }
        }
        for (int side = 0; side < 2; side++) {
            unsigned tid = 2 * o->id + (unsigned)side;
            char name[64];
            if (d == top) dist__format(name, sizeof name, "world: %s", side ? "point-to-point" : "collectives");
            else dist__format(name, sizeof name, "group %u (%d ranks): %s", o->id, d->world, side ? "point-to-point" : "collectives");
            fprintf(top->tr_file, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}"
                    ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%u}}",
                    top->rank, tid, name, top->rank, tid, tid);
        }
    }
    o->next = top->obs_list;
    top->obs_list = o;
    dist__mutex_unlock(&top->tr_lock);
    d->obs = o;
    return DIST_OK;
}

/* d's obs goes: what its rings still hold is written out.  A group's
   while the engine runs (its point-to-point side is detached under the
   engine lock); the world's once the engine has stopped, with the file's
   end.  Its collectives' thread has stopped (dist__comm_free_collectives). */
static void dist__obs_remove(dist_t *d) {
    dist_t *top = d->top;
    dist__obs *o = d->obs;
    if (!o) return;
    if (d != top) { dist__mutex_lock(&d->eng->lock); d->obs = NULL; dist__mutex_unlock(&d->eng->lock); }
    else d->obs = NULL;
    dist__mutex_lock(&top->tr_lock);
    for (dist__obs **p = &top->obs_list; *p; p = &(*p)->next)
        if (*p == o) { *p = o->next; break; }
    if (top->tr_file) dist__trace_drain(top, o);
    dist__mutex_unlock(&top->tr_lock);
    DIST_FREE(o->ring[0].ev); DIST_FREE(o->ring[1].ev);
    DIST_FREE(o->last_n);
    DIST_FREE(o);
}

/* The world's end of it: the trace file's last lines; after every
   communicator's dist__obs_remove. */
static void dist__obs_close(dist_t *top) {
    if (!top->tr_inited) return;
    if (top->tr_file) {
        fprintf(top->tr_file, "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"dist_trace\":1,\"rank\":%d,\"world\":%d,\"clock\":\"job\","
                "\"clock_error_us\":%.3f}}\n", top->rank, top->world, top->clock_err < 0 ? -1.0 : top->clock_err / 1000.0);
        fclose(top->tr_file);
        top->tr_file = NULL;
    }
    dist__mutex_destroy(&top->tr_lock);
    top->tr_inited = 0;
}

/* Cristian's method against the store host (see above).  clock_err -1:
   not measured (the host's store is older), this rank's clock is used. */
static void dist__clock_sync(dist_t *top) {
    int64_t best = -1;
    int quiet = dist__quiet;
    top->clock_off = top->clock_err = 0;
    if (top->server) return;                  /* this process hosts the store: its clock is the job's */
    dist__quiet = 1;
    for (int i = 0; i < DIST__CLOCK_PROBES; i++) {
        dist__store_part part;
        dist__store_resp rs;
        dist_result r;
        int64_t t0, t1;
        part.p = "dist/clock"; part.n = 10;
        if (dist__store_begin(top, "clock", "dist/clock") != DIST_OK) break;
        t0 = dist__now_ns();
        r = dist__store_call(top, "clock", DIST__STORE_CLOCK, 0, &part, 1, 0, &rs);
        t1 = dist__now_ns();
        dist__mutex_unlock(&top->store_lock);
        if (r != DIST_OK || rs.status != DIST_OK) break;
        if (best < 0 || t1 - t0 < best) {
            best = t1 - t0;
            top->clock_off = rs.num - (t0 + best / 2);
            top->clock_err = (best + 1) / 2;
        }
    }
    dist__quiet = quiet;
    if (best < 0) top->clock_off = 0, top->clock_err = -1;
}

/* DIST_STATS: unset, "", "0", "off" or "no": 0; "1", "on" or "yes": 1
   (any case); anything else -1 (init refuses it). */
static int dist__stats_flag(const char *v) {
    static const char *const words[] = { "0", "off", "no", "1", "on", "yes" };
    int w;
    if (!v || !*v) return 0;
    return (w = dist__word_index(v, words, 6)) < 0 ? -1 : w >= 3;
}

/* The world's stats and trace, as DIST_STATS, DIST_TRACE and
   DIST_RECORDER ask; at init, once its mesh has formed. */
static dist_result dist__obs_setup(dist_t *top, const char *what) {
    const char *rec = dist__getenv("DIST_RECORDER"), *trace = dist__getenv("DIST_TRACE");
    char path[1024], why[200];
    if ((top->stats_on = dist__stats_flag(dist__getenv("DIST_STATS"))) < 0)
        return dist__fail(NULL, DIST_ERR_INIT, "%s: DIST_STATS=%.60s is not a switch: use 1 (a table of what the calls cost, at "
                          "dist_destroy) or 0", what, dist__getenv("DIST_STATS"));
    top->rec_timed = (rec && strcmp(rec, "timed") == 0) || top->stats_on || (trace && trace[0]);
    if (!top->stats_on && !(trace && trace[0])) return DIST_OK;
    dist__mutex_init(&top->tr_lock);
    top->tr_inited = 1;
    dist__clock_sync(top);
    if (trace && trace[0]) {
        if (strlen(trace) > sizeof path - 40) return dist__fail(NULL, DIST_ERR_INIT, "%s: DIST_TRACE is a path of %zu bytes: too long", what, strlen(trace));
        dist__make_dir(trace);
        dist__format(path, sizeof path, "%s/rank%d.trace.json", trace, top->rank);
        if ((top->tr_file = dist__file_create(path, why, sizeof why)) == NULL)
            return dist__fail(NULL, DIST_ERR_INIT, "%s: DIST_TRACE: cannot write %s: %s", what, path, why);
        fprintf(top->tr_file, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d (%s)\"}},\n"
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}",
                top->rank, top->rank, top->mesh_host, top->rank, top->rank);
    }
    return dist__obs_add(top, what);
}

/* ---- reading the stats ---- */
static const char *dist__stat_name(int k) {
    return k == DIST__STAT_SEND ? "send" : k == DIST__STAT_RECV ? "recv" : dist__coll_name(k + 1);
}

/* The value below which a fraction q of the calls took (ns). */
static double dist__hist_quantile(const uint64_t *hist, uint64_t total, double q) {
    uint64_t want = (uint64_t)(q * (double)total + 0.999999), seen = 0;
    if (!total) return 0;
    if (want < 1) want = 1;
    for (int b = 0; b < DIST__HIST_N; b++)
        if ((seen += hist[b]) >= want) return dist__hist_value(b);
    return dist__hist_value(DIST__HIST_N - 1);
}

DIST_API dist_result dist_stats(dist_t *d, dist_stats_t *out) {
    dist__obs *o;
    if (!d || !out) return dist__fail(d, DIST_ERR_INVALID, "stats: NULL %s", d ? "output" : "communicator");
    memset(out, 0, sizeof *out);
    if ((o = d->obs) == NULL)
        return dist__fail(d, DIST_ERR_INVALID, "stats: nothing is collected on this communicator: run with DIST_STATS=1 (or DIST_TRACE=DIR) "
                          "to time every call");
    out->elapsed_s = (double)(dist__now_ns() - o->t0) / 1e9;
    out->clock_error_us = d->top->clock_err / 1000.0;
    for (int k = 0; k < DIST__STAT_KINDS; k++) {
        const dist__opstat *st = &o->st[k];
        dist_op_stats *x;
        uint64_t hist[DIST__HIST_N], total = 0;
        uint64_t calls = DIST__LOAD_RELAXED(&st->calls);
        if (!calls) continue;
        x = &out->ops[out->nops++];
        x->name = dist__stat_name(k);
        x->calls = calls;
        x->failed = DIST__LOAD_RELAXED(&st->failed);
        x->bytes = DIST__LOAD_RELAXED(&st->bytes);
        x->total_s = (double)DIST__LOAD_RELAXED(&st->ns_sum) / 1e9;
        x->mean_us = x->total_s * 1e6 / (double)calls;
        x->max_us = (double)DIST__LOAD_RELAXED(&st->ns_max) / 1e3;
        for (int b = 0; b < DIST__HIST_N; b++) total += hist[b] = DIST__LOAD_RELAXED(&st->hist[b]);
        x->p50_us = dist__hist_quantile(hist, total, 0.50) / 1e3;
        x->p90_us = dist__hist_quantile(hist, total, 0.90) / 1e3;
        x->p99_us = dist__hist_quantile(hist, total, 0.99) / 1e3;
        if (x->p50_us > x->max_us) x->p50_us = x->max_us;       /* (a bucket's middle may pass the largest) */
        if (x->p90_us > x->max_us) x->p90_us = x->max_us;
        if (x->p99_us > x->max_us) x->p99_us = x->max_us;
    }
    out->measured = DIST__LOAD_RELAXED(&o->measured);
    for (int g = 0; g < o->nmembers; g++) {          /* the DIST_STATS_SLOWEST latest in all, by insertion */
        dist_rank_late x;
        int at;
        x.rank = g;
        x.times_last = DIST__LOAD_RELAXED(&o->last_n[g]);
        x.late_s = (double)DIST__LOAD_RELAXED(&o->last_ns[g]) / 1e9;
        x.max_late_us = (double)DIST__LOAD_RELAXED(&o->last_max[g]) / 1e3;
        if (!x.times_last) continue;
        for (at = out->nslowest; at > 0 && out->slowest[at - 1].late_s < x.late_s; at--)
            if (at < DIST_STATS_SLOWEST) out->slowest[at] = out->slowest[at - 1];
        if (at < DIST_STATS_SLOWEST) {
            out->slowest[at] = x;
            if (out->nslowest < DIST_STATS_SLOWEST) out->nslowest++;
        }
    }
    return DIST_OK;
}

/* "12.3 KiB" */
static void dist__bytes_text(char *buf, size_t cap, uint64_t n) {
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (u == 0) dist__format(buf, cap, "%llu B", (unsigned long long)n);
    else dist__format(buf, cap, "%.1f %s", v, unit[u]);
}

DIST_API size_t dist_stats_text(dist_t *d, char *buf, size_t cap) {
    dist_stats_t s;
    char comm[32];
    size_t off;
    if (!buf || !cap) return 0;
    buf[0] = '\0';
    if (dist_stats(d, &s) != DIST_OK) { dist__format(buf, cap, "%s", dist_error_message(d)); return strlen(buf); }
    if (d->top == d) dist__format(comm, sizeof comm, "the world");
    else dist__format(comm, sizeof comm, "group %u", d->id);
    off = (size_t)snprintf(buf, cap, "stats of rank %d of %s (%d rank%s), %.1f s:\n"
                           "  %-14s %10s %7s %11s %9s %9s %9s %9s %9s %9s\n", d->rank, comm, d->world, DIST__PLURAL(d->world), s.elapsed_s,
                           "operation", "calls", "failed", "bytes", "total s", "mean us", "p50 us", "p90 us", "p99 us", "max us");
    for (int i = 0; i < s.nops && off < cap; i++) {
        const dist_op_stats *x = &s.ops[i];
        char bytes[32];
        dist__bytes_text(bytes, sizeof bytes, x->bytes);
        off += (size_t)snprintf(buf + off, cap - off, "  %-14s %10llu %7llu %11s %9.3f %9.2f %9.2f %9.2f %9.2f %9.2f\n", x->name,
                                (unsigned long long)x->calls, (unsigned long long)x->failed, bytes, x->total_s, x->mean_us, x->p50_us,
                                x->p90_us, x->p99_us, x->max_us);
    }
    if (!s.nops && off < cap) off += (size_t)snprintf(buf + off, cap - off, "  (no calls)\n");
    if (s.measured && off < cap)
        off += (size_t)snprintf(buf + off, cap - off, "  came last, of %llu collective%s whose entries this rank learned of:\n",
                                (unsigned long long)s.measured, DIST__PLURAL(s.measured));
    for (int i = 0; i < s.nslowest && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "    rank %d: %llu time%s, %.3f s late in all, %.2f us at most\n", s.slowest[i].rank,
                                (unsigned long long)s.slowest[i].times_last, DIST__PLURAL(s.slowest[i].times_last), s.slowest[i].late_s,
                                s.slowest[i].max_late_us);
    return off < cap ? off : cap - 1;
}

/* DIST_STATS: the table, through the logger (stderr when there is none),
   as d is destroyed. */
static void dist__stats_log(dist_t *d) {
    dist__log log;
    char *text, *line;
    size_t cap = 4096;
    if (!d->obs || !d->top->stats_on || (text = (char *)DIST_MALLOC(cap)) == NULL) return;
    log = d->eng->log;
    if (!log.logger.func) { log.logger.func = dist__stderr_logger; log.logger.user = NULL; }
    if (log.level < DIST_LOG_INFO) log.level = DIST_LOG_INFO;
    dist_stats_text(d, text, cap);
    for (line = text; *line; ) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        dist__logf(&log, DIST_LOG_INFO, "%s", line);
        if (!nl) break;
        line = nl + 1;
    }
    DIST_FREE(text);
}

/* [SECTION] life cycle: init, destroy */

static void dist__free_comm(dist_t *d) {
    if (!d) return;
    dist__monitor_stop(d);
    if (d->eng) {
        if (d->eng->thread_started) {
            dist__mutex_lock(&d->eng->lock);
            d->eng->stop = 1;
            dist__cond_broadcast(&d->eng->bg_cond);
            dist__wakeup_signal(&d->eng->wake);
            dist__mutex_unlock(&d->eng->lock);
            dist__thread_join(d->eng->thread);
        }
        dist__engine_free(d->eng);
    }
    dist__close(d->store_fd);
    dist__store_server_stop(d->server);
    if (d->file_path[0]) dist__file_remove(d->file_path);
    DIST_FREE(d->store_buf);
    dist__comm_free_collectives(d);
    dist__obs_remove(d);
    dist__obs_close(d);
    dist__mutex_destroy(&d->store_lock);
    dist__mutex_destroy(&d->err_lock);
    DIST_FREE(d);
}

static dist_result dist__init_steps(dist_t *d, dist__setup *s, const dist__log *log, int64_t deadline) {
    char key[32], addr[300], host[256], why[300];
    dist__socket ls;
    dist_result r;
    int port = 0;
    d->key = s->key;
    if ((r = dist__store_join(d, s, log, deadline)) != DIST_OK) return r;
    /* the job id */
    if (s->rank == 0) {
        d->job = dist__random_u64();
        snprintf(addr, sizeof addr, "%016llx", (unsigned long long)d->job);
        if ((r = dist_store_set(d, "dist/job", addr, 16)) != DIST_OK) return r;
    } else {
        size_t len = 0;
        if ((r = dist__rendezvous_get(d, "dist/job", addr, sizeof addr - 1, &len, 0, "rank 0 has not set the job's id", deadline)) != DIST_OK)
            return r == DIST_ERR_INIT ? r : dist__rendezvous_timeout(d, "rank 0's job id");
        addr[len] = 0;
        d->job = strtoull(addr, NULL, 16);
    }
    if ((r = dist__mesh_address(d, s, "init", host, sizeof host)) != DIST_OK) return r;
    ls = dist__sock_listen(host, DIST__IP_ANY, 0, why, sizeof why);
    if (ls == DIST__NO_SOCKET) return dist__fail(NULL, DIST_ERR_INIT, "init: rank %d: %s", s->rank, why);
    dist__format(d->mesh_host, sizeof d->mesh_host, "%s", host);
    dist__sock_name(ls, 0, why, sizeof why, &port);
    dist__logf(log, DIST_LOG_DEBUG, "init: rank %d listens for its peers on %s port %d", s->rank, host, port);
    snprintf(key, sizeof key, "dist/addr/%d", s->rank);
    snprintf(addr, sizeof addr, "%s %d", host, port);
    r = dist_store_set(d, key, addr, strlen(addr));
    if (r == DIST_OK) r = dist__mesh_connect(d, ls, deadline);
    dist__close(ls);
    if (r == DIST_OK) r = dist__shm_setup(d, s->shm == 1 || (s->shm == 2 && d->rank % 2 == 0), deadline);
    return r;
}

DIST_API dist_result dist_init(dist_t **world, const dist_config *cfg) {
    dist_config zero;
    dist__setup s;
    dist__log log;
    dist__wait_note note;
    dist_t *d;
    dist__engine *e;
    dist_result r;
    int64_t start, deadline;
    if (!world) return dist__fail(NULL, DIST_ERR_INVALID, "init: NULL `world` pointer");
    *world = NULL;
    memset(&zero, 0, sizeof zero);
    if (!cfg) cfg = &zero;
    dist__thread_error[0] = 0;
    if ((r = dist__log_setup(&log, cfg, "init")) != DIST_OK) return r;
    if ((r = dist__setup_from(cfg, &s)) != DIST_OK) {
        dist__logf(&log, DIST_LOG_ERROR, "%s", dist__thread_error);
        return r;
    }
    log.rank = s.rank;
    if (s.join) return dist__join(world, &s, &log);
    start = dist__now_ms();
    deadline = start + s.timeout_ms;
    d = (dist_t *)DIST_MALLOC(sizeof *d);
    if (!d) return dist__fail(NULL, DIST_ERR_NOMEM, "init: out of memory");
    memset(d, 0, sizeof *d);
    d->rank = s.rank; d->world = s.world; d->timeout_ms = s.timeout_ms;
    d->store_hosted = s.hosted;
    d->store_fd = DIST__NO_SOCKET;
    d->top = d;
    dist__mutex_init(&d->err_lock);
    dist__mutex_init(&d->store_lock);
    dist__comm_init_collectives(d, s.algo);
    d->eng = e = dist__engine_new(s.rank, s.world, (int)DIST__MIN((int64_t)s.world + s.max_joins, (int64_t)DIST__MAX_WORLD), &log);
    if (!e || dist__comm_register(d) != DIST_OK) {
        dist__close(s.listen_fd); dist__free_comm(d);
        return dist__fail(NULL, DIST_ERR_NOMEM, "init: out of memory");
    }
    e->spin_ns = (int64_t)s.spin_us * 1000;
    if (dist__log_on(&e->log, DIST_LOG_INFO)) {
        dist__wait_note_start(&note, &e->log, s.timeout_ms);
        d->note = &note;
    }
    r = dist__init_steps(d, &s, &log, deadline);
    if (r == DIST_OK && dist__comm_nodes(d) != 0) r = dist__fail(NULL, DIST_ERR_NOMEM, "init: out of memory");
    for (int i = 0; r == DIST_OK && i < s.world; i++) {
        if (i == s.rank) continue;
        e->peers[i].rx.stage = (uint8_t *)DIST_MALLOC(DIST__STAGE_SIZE);
        if (!e->peers[i].rx.stage) r = dist__fail(NULL, DIST_ERR_NOMEM, "init: out of memory");
    }
    if (r == DIST_OK) {    /* every peer's budget here, granted before anything else */
        e->budget = s.eager ? s.eager : dist__default_budget(s.world);
        for (int i = 0; i < s.world; i++) {
            if (i == s.rank) continue;
            dist__send_ctl(e, &e->peers[i], DIST__FRAME_CREDIT, 0, e->budget, 1);
            dist__peer_write(e, &e->peers[i]);
        }
    }
    if (r == DIST_OK) {   /* the store counts the ranks that formed the job: a rank claimed twice before is fatal, after it is not */
        int64_t formed = 0;
        r = dist_store_add(d, "dist/formed", 1, &formed);
    }
    if (r == DIST_OK && !s.run_id) r = dist__settle(d, deadline);
    if (r == DIST_OK) {
        if (dist__thread_start(&e->thread, dist__progress_thread, e) != 0) r = dist__fail(NULL, DIST_ERR_SYSTEM, "init: cannot start the progress thread");
        else { e->thread_started = 1; r = dist__monitor_start(d, "init"); }
    }
    d->note = NULL;
    if (r != DIST_OK) {
        char msg[DIST__ERRLEN];
        memcpy(msg, dist__thread_error, sizeof msg);
        dist__free_comm(d);
        memcpy(dist__thread_error, msg, sizeof msg);
        dist__logf(&log, DIST_LOG_ERROR, "%s", msg);
        return r;
    }
    if (s.world == 1)
        dist__logf(&log, DIST_LOG_INFO, "joined: a job of 1 rank, no peers, in %.2f s", (double)(dist__now_ms() - start) / 1000.0);
    else
        dist__logf(&log, DIST_LOG_INFO, "joined: a mesh of %d ranks formed in %.2f s; this rank reaches %d peer%s through shared memory "
                   "and %d over TCP", s.world, (double)(dist__now_ms() - start) / 1000.0, e->shm.nshm, DIST__PLURAL(e->shm.nshm),
                   s.world - 1 - e->shm.nshm);
    *world = d;
    return DIST_OK;
}

/* Fails every receive still pending (nothing is written to a buffer after
   destroy or abort), telling senders whose announcements they had taken. */
static void dist__fail_receives(dist__engine *e, dist_result code, const char *why) {
    dist_req_t *list = dist__ix_gather(e, NULL, DIST__IX_POSTED, -2);
    list = dist__ix_gather(e, list, DIST__IX_POSTED_ANY, -2);
    for (dist_req_t *r = list; r; r = r->next) r->state = DIST__RS_IDLE;
    dist__fail_list(e, list, code, why);
    list = dist__ix_gather(e, NULL, DIST__IX_RDV_RECV, -2);
    for (int i = 0; i < e->world; i++) {
        dist__peer *p = &e->peers[i];
        if (!dist__list_empty(&p->pullq) && p->t->pull_stop) p->t->pull_stop(e, p, DIST__CONTAINER(p->pullq.next, dist_req_t, link));
        for (dist__link *n = p->pullq.next; n != &p->pullq; n = n->next) {
            dist_req_t *r = DIST__CONTAINER(n, dist_req_t, link);
            if (r->msg) continue;              /* filling a message: it finishes */
            r->next = list;
            list = r;
        }
    }
    for (dist_req_t *r = list; r; r = r->next) {
        dist__peer *p = &e->peers[r->source];
        if (p->rx.req == r) { p->rx.req = NULL; p->rx.dst = NULL; }
        if (p->fd != DIST__NO_SOCKET) dist__refuse(e, p, r->sid, DIST__REFUSED_GONE);
    }
    dist__fail_list(e, list, code, why);
}

/* Lets what is queued go out, sends goodbyes and waits for the peers'
   (their own, when `wait_own`: a rank that hosts the store stays until the
   others are done with it; else an answer will do); returns how many did
   not answer and lists them (at most `cap` bytes) in `who`. */
static int dist__goodbye(dist__engine *e, int timeout_ms, int wait_own, char *who, size_t cap) {
    int64_t deadline = dist__now_ns() + (int64_t)timeout_ms * 1000000;
    int missing = 0;
    size_t len = 0;
    dist__mutex_lock(&e->lock);
    dist__fail_receives(e, DIST_ERR_ABORTED, "the communicator was destroyed with this receive pending");
    for (int i = 0; i < e->world; i++) {
        dist__peer *p = &e->peers[i];
        if (i == e->rank || p->fd == DIST__NO_SOCKET || p->state == DIST__PEER_FAILED || p->bye_queued) continue;
        p->bye_queued = 1;
        dist__peer_write(e, p);
    }
    for (;;) {
        missing = 0;
        for (int i = 0; i < e->world; i++) {
            dist__peer *p = &e->peers[i];
            if (i == e->rank || p->state == DIST__PEER_FAILED) continue;
            if ((p->state == DIST__PEER_OK && (wait_own || !p->bye_answered)) || (p->fd != DIST__NO_SOCKET && !p->bye_sent)) missing++;
        }
        if (!missing || dist__now_ns() >= deadline) break;
        dist__wait_step(e, 50);
    }
    who[0] = 0;
    for (int i = 0; i < e->world && missing && len + 16 < cap; i++) {
        dist__peer *p = &e->peers[i];
        if (i == e->rank || p->state == DIST__PEER_FAILED) continue;
        if ((p->state == DIST__PEER_OK && (wait_own || !p->bye_answered)) || (p->fd != DIST__NO_SOCKET && !p->bye_sent))
            len += (size_t)snprintf(who + len, cap - len, "%s%d", len ? ", " : "", i);
    }
    dist__mutex_unlock(&e->lock);
    return missing;
}

/* wait_ms: how long to wait for the peers' goodbyes (< 0: the timeout). */
static dist_result dist__destroy(dist_t *d, int wait_ms) {
    char who[200];
    int missing;
    int timeout_ms;
    int64_t start;
    dist__log log;
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "destroy: NULL communicator");
    if (d->top != d) {               /* a group: the world's connections stay */
        if (d->owns_top) return dist__destroy(d->top, wait_ms);     /* a newcomer's: its world goes too */
        dist__group_free(d);
        return DIST_OK;
    }
    DIST__STORE_RELAXED(&d->in_destroy, 1);
    /* Async collectives still queued finish first; groups go with the world. */
    dist__worker_stop(d);
    for (;;) {
        dist_t *g = NULL;
        dist__mutex_lock(&d->eng->lock);
        for (int i = 0; i < d->eng->ncomms && !g; i++) if (d->eng->comms[i] != d) g = d->eng->comms[i];
        dist__mutex_unlock(&d->eng->lock);
        if (!g) break;
        dist__group_free(g);
    }
    dist__stats_log(d);
    timeout_ms = wait_ms < 0 ? d->timeout_ms : wait_ms;
    log = d->eng->log;
    start = dist__now_ms();
    dist__logf(&log, DIST_LOG_DEBUG, "destroy: saying goodbye to %d peer%s", d->world - 1, DIST__PLURAL(d->world - 1));
    missing = dist__goodbye(d->eng, timeout_ms, d->server != NULL, who, sizeof who);
    dist__free_comm(d);
    if (missing) {
        dist__fail(NULL, DIST_ERR_TIMEOUT, "destroy: rank%s %s did not shut down within %.1f s; closed anyway", DIST__PLURAL(missing), who,
                   timeout_ms / 1000.0);
        dist__logf(&log, DIST_LOG_WARN, "%s", dist__thread_error);
        return DIST_ERR_TIMEOUT;
    }
    dist__logf(&log, DIST_LOG_INFO, "destroy: done in %.2f s (every peer said goodbye)", (double)(dist__now_ms() - start) / 1000.0);
    return DIST_OK;
}

DIST_API dist_result dist_destroy(dist_t *d) { return dist__destroy(d, -1); }

DIST_API dist_result dist_revoke(dist_t *d) {
    char why[DIST__ERRLEN];
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "revoke: NULL communicator");
    dist__format(why, sizeof why, "rank %d revoked the communicator (dist_revoke)%s", d->rank,
                 d->top == d ? "" : " (a group)");
    dist__mutex_lock(&d->eng->lock);
    dist__revoke_locked(d->eng, d, why, 1);
    dist__mutex_unlock(&d->eng->lock);
    return DIST_OK;
}

DIST_API int dist_revoked(const dist_t *d) { return d && DIST__LOAD_ACQ(&d->revoked); }

DIST_API dist_result dist_abort(dist_t *d) {
    dist__engine *e;
    if (!d) return dist__fail(NULL, DIST_ERR_INVALID, "abort: NULL communicator");
    e = d->eng;
    dist__mutex_lock(&e->lock);
    if (!e->aborted) {
        dist__format(e->abort_why, sizeof e->abort_why, "rank %d aborted the communicator (dist_abort)", e->rank);
        DIST__STORE_REL(&e->aborted, 1);
        DIST__STORE_RELAXED(&e->events, e->events + 1);
        for (int i = 0; i < e->world; i++)
            if (i != e->rank) dist__peer_fail_code(e, &e->peers[i], DIST_ERR_ABORTED, "%s", e->abort_why);
        dist__fail_receives(e, DIST_ERR_ABORTED, e->abort_why);   /* from itself, or from no one in particular */
        dist__logf(&e->log, DIST_LOG_INFO, "%s", e->abort_why);
        dist__cond_broadcast(&e->cond);
        dist__cond_broadcast(&e->bg_cond);
        if (e->polling) dist__wakeup_signal(&e->wake);
    }
    dist__mutex_unlock(&e->lock);
    /* A store call blocked on another thread returns at once. */
    if (d->top->store_fd != DIST__NO_SOCKET) dist__sock_shutdown(d->top->store_fd);
    return DIST_OK;
}

/* [SECTION] spawn */

/* The child's whole life: init, the user's function, destroy.  The child
   is a process this library created, so it ends here with the function's
   return value (after flushing stdio); the caller's process never does. */
static void dist__spawn_child(int rank, int nprocs, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg,
                              dist__socket ls, int port, dist__fd report, const char *run_id) {
    dist_config c;
    char url[64];
    dist_t *w = NULL;
    int code;
    dist__process_die_with_parent();   /* the parent died: so do its ranks */
    if (cfg) c = *cfg; else memset(&c, 0, sizeof c);
    if (!c.init_method) {                    /* the parent hosts the store */
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
        c.init_method = url;
        c.store_hosted = 1;
    }
    c.world_size = nprocs;
    c.rank = rank;
    if (!c.run_id) c.run_id = run_id;       /* this spawn is one launch */
    c.store_listen_fd = 0;
    dist__close(ls);
    if (dist_init(&w, &c) != DIST_OK) {
        dist__process_report(report, dist__thread_error);
        code = 1;
    } else {
        code = fn(w, arg);
        /* A rank that failed does not wait for the others to finish: the
           parent is about to stop them anyway. */
        if (dist__destroy(w, code == 0 ? -1 : 0) != DIST_OK && code == 0) {
            dist__process_report(report, dist__thread_error);
        }
    }
    dist__process_exit(report, code);
}

#ifdef DIST__SPAWN_REEXEC
/* Without fork a rank is the program started again, with this variable
   saying which call of dist_spawn started it, its rank, the world's size,
   the store's port and the launch's run id (and, added by the platform,
   its report pipe).  The rank's program runs from main to that call of
   dist_spawn, which becomes the rank.  The parent hosts the store on the
   port. */
#define DIST__SPAWN_VAR "DIST_SPAWN_CHILD"
#define DIST__SPAWN_FMT "call=%d rank=%d n=%d port=%d run=%s"

/* In a rank: 1 when this call is one its parent made before the rank's
   own (the caller returns 0 at once); otherwise becomes the rank (does not
   return) or, in no rank, returns 0. */
static int dist__spawn_reexec_child(int call, int nprocs, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg) {
    const char *v = dist__getenv(DIST__SPAWN_VAR);
    char text[600], run_id[40];
    int k, rank, n, port;
    dist__fd report;
    if (!v) return 0;
    snprintf(text, sizeof text, "%s", v);
    if (sscanf(text, "call=%d rank=%d n=%d port=%d run=%39s", &k, &rank, &n, &port, run_id) != 5 || rank < 0 || rank >= n)
        return 0;
    if (call < k) return 1;                      /* the parent ran that one */
    dist__unsetenv(DIST__SPAWN_VAR);             /* a dist_spawn inside the rank starts ranks of its own */
    report = dist__fd_parse(text);
    if (k != call || n != nprocs) {
        char msg[DIST__ERRLEN];
        snprintf(msg, sizeof msg,
                 "spawn: rank %d was started by call %d of dist_spawn with %d rank%s, but the program made that call with %d: "
                 "on Windows each rank runs main again, which must reach the same call the same way",
                 rank, k, n, DIST__PLURAL(n), nprocs);
        dist__process_report(report, msg);
        dist__process_exit(report, 2);
    }
    dist__spawn_child(rank, n, fn, arg, cfg, DIST__NO_SOCKET, port, report, run_id);
    return 0;                                    /* (not reached: the rank ends there) */
}
#endif

DIST_API int dist_spawn(int nprocs, int (*fn)(dist_t *world, void *arg), void *arg, const dist_config *cfg) {
    static int calls;                /* this process's calls of dist_spawn (numbered for re-executed ranks) */
    dist__process *procs;
    int port = 0, failed = 0, result = 0, alive, call = ++calls;
    dist__socket ls = DIST__NO_SOCKET;
    dist_store_host *host = NULL;
    char run_id[40];
    int64_t kill_at = 0;
#ifdef DIST__SPAWN_REEXEC
    if (dist__spawn_reexec_child(call, nprocs, fn, arg, cfg)) return 0;   /* (a rank becomes it there) */
#endif
    dist__format(run_id, sizeof run_id, "spawn-%016llx", (unsigned long long)dist__random_u64());
    if (nprocs < 1 || nprocs > DIST__MAX_WORLD || !fn) {
        dist__fail(NULL, DIST_ERR_INVALID, "spawn: %d rank%s (1 to %d) and fn %s", nprocs, DIST__PLURAL(nprocs), DIST__MAX_WORLD, fn ? "set" : "NULL");
        return -1;
    }
    if (!cfg || !cfg->init_method) {
        /* The store is this process's (not rank 0's): it outlives any
           rank, so survivors can still agree and shrink. */
        dist_config hc;
        if (cfg) hc = *cfg; else memset(&hc, 0, sizeof hc);
        if (!hc.run_id) hc.run_id = run_id;
        if (dist__store_host_open(&host, &hc, nprocs, "127.0.0.1", 0) != DIST_OK) {
            char why[DIST__ERRLEN];
            memcpy(why, dist__thread_error, sizeof why);   /* (not formatted into itself) */
            dist__fail(NULL, DIST_ERR_INIT, "spawn: %s", why);
            return -1;
        }
        port = dist_store_host_port(host);
        ls = host->ls;                       /* a forked rank closes its copy */
    }
    procs = (dist__process *)DIST_MALLOC(sizeof *procs * (size_t)nprocs);
    if (!procs) { dist_store_host_stop(host); dist__fail(NULL, DIST_ERR_NOMEM, "spawn: out of memory"); return -1; }
    for (int i = 0; i < nprocs; i++) dist__process_clear(&procs[i]);
    fflush(NULL);   /* or the children would print the parent's buffered output again */
    for (int i = 0; i < nprocs; i++) {
        dist__fd report = DIST__NO_FD;
#ifdef DIST__SPAWN_REEXEC
        char v[200];
        snprintf(v, sizeof v, DIST__SPAWN_FMT, call, i, nprocs, port, run_id);
        int started = dist__process_start_self(&procs[i], DIST__SPAWN_VAR, v, DIST__NO_SOCKET);
#else
        int started = dist__process_fork(&procs[i], &report);
        DIST__UNUSED(call);
#endif
        if (started == 0) {
            for (int j = 0; j < i; j++) dist__process_release(&procs[j]);
            DIST_FREE(procs);                           /* the parent's, not the rank's */
            dist__spawn_child(i, nprocs, fn, arg, cfg, ls, port, report, run_id);   /* (the store's thread is not in the fork) */
        }
        if (started < 0) { failed = 1; break; }
    }
    /* the store's thread starts once no fork is left to make (see
       dist__store_host_open); the ranks' calls wait in its backlog */
    if (host && !failed && dist__store_host_run(host) != DIST_OK) failed = 1;
    if (!failed) dist__thread_error[0] = 0;       /* (else it says why a rank could not start) */
    /* Reap; on the first failure stop the others: SIGTERM, then SIGKILL.
       A child's report pipe hangs up when it exits, which wakes the wait
       below; the timeout is only a safety net (and the SIGKILL clock). */
    do {
        alive = 0;
        for (int i = 0; i < nprocs; i++) {
            int code, killed;
            if (!dist__process_running(&procs[i])) continue;
            if (dist__process_reap(&procs[i], &code, &killed)) {
                char msg[DIST__ERRLEN];
                dist__process_read_report(&procs[i], msg, sizeof msg);
                if (code != 0 && !result) {
                    result = code;
                    dist__fail(NULL, DIST_ERR_FAILED, "spawn: rank %d %s %d%s%s", i,
                               killed ? "was killed by signal" : "exited with code",
                               killed ? code - 128 : code, msg[0] ? ": " : "", msg);
                }
                if (code != 0 && !failed) { failed = 1; }
            } else alive++;
        }
        if (failed && alive) {
            if (!kill_at) {
                kill_at = dist__now_ms() + 2000;
                for (int i = 0; i < nprocs; i++) dist__process_stop(&procs[i], 0);
            } else if (dist__now_ms() >= kill_at) {
                for (int i = 0; i < nprocs; i++) dist__process_stop(&procs[i], 1);
            }
        }
        if (alive) dist__process_wait(procs, nprocs, kill_at ? 20 : 100);
    } while (alive);
    for (int i = 0; i < nprocs; i++) dist__process_release(&procs[i]);
    DIST_FREE(procs);
    dist_store_host_stop(host);
    if (failed && !result) { result = -1; if (!dist__thread_error[0]) dist__fail(NULL, DIST_ERR_SYSTEM, "spawn: could not start every rank"); }
    return result;
}

#endif /* DIST_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the dist authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity to the benefit of the public at
large and to the detriment of our heirs and successors. We intend this
dedication to be an overt act of relinquishment in perpetuity of all present
and future rights to this software under copyright law.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
