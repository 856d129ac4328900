# ddpc - declarative DDP job compiler and runtime.
#
#   make            build/bin/ddpc, build/lib/libddprt.a (+ libddprt_cuda.so iff nvcc)
#   make test       the whole Check suite (CPU only; GPU cases say SKIP)
#   make demo       train the Fashion-MNIST example end to end
#   make docs       regenerate spec/README.md and docs/coming-from.md
#   make sanitize   the suite under ASan + UBSan
#   make bench      build/bench/allreduce (see bench/README.md)
#   make install PREFIX=/usr/local      (make uninstall PREFIX=... removes it)
#
# build/ mirrors the installed layout (bin/ lib/ include/ddpc/ share/ddpc/),
# so `ddpc build` finds the runtime the same way in the tree and installed:
# relative to its own executable.

CC       ?= cc
PREFIX   ?= /usr/local
B        ?= build
VERSION  := 0.1.0

OPT      ?= -O2 -g
WARN     := -std=c11 -Wall -Wextra -pedantic -Wshadow -Wno-unused-parameter
# WERROR=1 (CI): every warning fails the build
WARN     += $(if $(filter 1,$(WERROR)),-Werror)
# how `ddpc build` compiles a job's job.c (baked into ddpc, with CC and SANFLAGS)
JOB_CFLAGS ?= -O2
# compiler/ by -iquote: its check.h must not hide Check's <check.h> from the tests
CPPFLAGS += -D_GNU_SOURCE -Ispec -Iruntime -iquote compiler
CFLAGS   += $(OPT) $(WARN) $(SANFLAGS) -MMD -MP -pthread
LDFLAGS  += $(SANFLAGS) -pthread

BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
YAML_LIBS   := $(shell pkg-config --libs yaml-0.1 2>/dev/null || echo -lyaml)
CHECK_CFLAGS:= $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS  := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)
# libdeflate decompresses a whole gzip file ~1.7x faster than zlib (data.c);
# without it data.c reads everything through zlib, and the build says so.
# NO_LIBDEFLATE=1 builds the zlib-only flavour (CI builds and tests it too).
ifeq ($(NO_LIBDEFLATE),1)
DEFLATE_LIBS :=
$(info ✗ libdeflate disabled (NO_LIBDEFLATE=1): gzip data is read through zlib)
else ifeq ($(shell pkg-config --exists libdeflate 2>/dev/null && echo y),y)
DEFLATE_LIBS := $(shell pkg-config --libs libdeflate)
$(B)/obj/runtime/data.o: CPPFLAGS += -DDDPC_HAVE_LIBDEFLATE
else
DEFLATE_LIBS :=
$(info ✗ libdeflate not found: gzip data is read through zlib (slower start; apt-get install libdeflate-dev))
endif
RT_LIBS     := $(BLAS_LIBS) $(DEFLATE_LIBS) -lz -lm -lpthread

# ---- CUDA: built whenever nvcc exists, and the build says so either way ----
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifneq ($(NVCC),)
CUDA_HOME    ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_LIBDIR  := $(CUDA_HOME)/lib64
CUDA_ARCH    ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
NVCCFLAGS    ?= -O2 -g -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fPIC
CUDA_LINK    := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lnccl -lcublas -lcudart -lstdc++
# ops_cuda's kernels run ops_kernels.h's arithmetic; to round exactly as the
# CPU backend does (gcc -std=c11: no contraction; ops_cpu sets FTZ/DAZ):
# no a*b+c fused into one FMA, denormals flushed, IEEE division and sqrt.
CUDA_EXACT_MATH := -fmad=false -ftz=true -prec-div=true -prec-sqrt=true
$(info ✓ nvcc found at $(NVCC): building the CUDA backend (libddprt_cuda.so))
else
CUDA_LINK    :=
$(info ✗ nvcc not found: building the CPU backend only; jobs will run as CPU workers)
endif

# ---- gloo: the multi-node CPU communicator, a plugin like the CUDA backend ----
# libddprt_gloo.so (runtime/comm_gloo.cc, the runtime's only C++) is
# dlopen()ed by a job's launcher only for a CPU job on several nodes, so no
# single-node job links C++ or gloo.
GLOO_INC ?= $(firstword $(wildcard /usr/include/gloo/rendezvous/store.h /usr/local/include/gloo/rendezvous/store.h))
ifneq ($(GLOO_INC),)
GLOO_SO      := $(B)/lib/ddpc/libddprt_gloo.so
GLOO_SO_C    := runtime/err.c runtime/clock.c runtime/store.c spec/units.c
GLOO_SO_COBJ := $(GLOO_SO_C:%.c=$(B)/obj/pic/%.o)
GLOO_LIBS    := -lgloo
$(info ✓ gloo found: building the multi-node CPU communicator (libddprt_gloo.so))
else
GLOO_SO      :=
$(info ✗ gloo not found: multi-node CPU jobs cannot run (apt-get install libgloo-dev))
endif
CXXFLAGS_GLOO := -std=c++17 $(OPT) -Wall -Wextra -Wno-unused-parameter $(SANFLAGS) -fPIC -pthread

# ---- sources: one directory per stage; every .c in it belongs to it ----
SPEC_SRC     := $(sort $(wildcard spec/*.c))
COMPILER_SRC := $(sort $(wildcard compiler/*.c))
RT_SRC       := $(sort $(filter-out runtime/job.c,$(wildcard runtime/*.c))) spec/sha256.c spec/layers.c spec/tokens.c \
                spec/safetensors.c \
                spec/units.c
CUDA_SRC     := $(sort $(wildcard runtime/*.cu))
TEST_SRC     := $(sort $(wildcard tests/*.c))
RT_HEADERS   := spec/job.h spec/layers.h runtime/ddprt.h runtime/backend.h runtime/err.h runtime/ops.h \
                runtime/comm.h runtime/comm_gloo.h
TEMPLATES    := $(wildcard templates/*.m4)

SPEC_OBJ     := $(SPEC_SRC:%.c=$(B)/obj/%.o)
COMPILER_OBJ := $(COMPILER_SRC:%.c=$(B)/obj/%.o)
RT_OBJ       := $(RT_SRC:%.c=$(B)/obj/%.o)
CUDA_OBJ     := $(CUDA_SRC:%.cu=$(B)/obj/%.o)
TEST_OBJ     := $(TEST_SRC:%.c=$(B)/obj/%.o)

SPEC_LIB  := $(B)/lib/libddpcspec.a
RT_LIB    := $(B)/lib/libddprt.a
# The CUDA backend is a plugin: libddprt_cuda.so, dlopen()ed by the job's
# launcher only when a GPU will be used (runtime/ddprt.c), so a job linked
# with `accelerator: auto` on a machine without a GPU never maps cuBLAS,
# NCCL or cudart. libddprt_cuda.a (the same objects) is for tests/gpu only.
CUDA_LIB  := $(if $(NVCC),$(B)/lib/libddprt_cuda.a)
CUDA_SO   := $(if $(NVCC),$(B)/lib/ddpc/libddprt_cuda.so)
# what the plugin needs from the C runtime, compiled -fPIC into it
CUDA_SO_C := runtime/err.c runtime/clock.c runtime/devprobe.c runtime/env.c runtime/store.c \
             spec/units.c
CUDA_SO_COBJ := $(CUDA_SO_C:%.c=$(B)/obj/pic/%.o)
DDPC      := $(B)/bin/ddpc
TESTS     := $(B)/tests/run_tests
SHARE     := $(B)/share/ddpc
STAGED    := $(addprefix $(B)/include/ddpc/,$(notdir $(RT_HEADERS))) $(TEMPLATES:%=$(SHARE)/%) \
             $(SHARE)/job.c $(SHARE)/ddpc.schema.json $(B)/share/man/man1/ddpc.1 \
             $(SHARE)/python/ddpc_torch.py

.PHONY: all deps test check demo sanitize install uninstall clean cuda fuzz bench FORCE docs
all: $(DDPC) $(RT_LIB) $(CUDA_LIB) $(CUDA_SO) $(GLOO_SO) $(STAGED)

deps:
	@scripts/install-deps

# Toolchain facts baked into ddpc: whether the CUDA plugin exists. A job is
# never linked with CUDA; it carries the plugin's path (compiler/cc.c).
# Toolchain facts baked into ddpc: the compiler and flags a job is built
# with (this build's CC, JOB_CFLAGS and SANFLAGS), the runtime's libraries,
# whether the plugins exist. Rewritten on every make, replaced only when a
# fact changed (`make CC=clang` after a gcc build rebuilds what includes it).
$(B)/obj/compiler/toolchain.h: FORCE | $(B)/obj/compiler
	@printf '/* generated by the Makefile, do not edit */\n#define DDPC_VERSION "%s"\n#define DDPC_CC "%s"\n#define DDPC_JOB_CFLAGS "%s"\n#define DDPC_RT_LIBS "%s"\n#define DDPC_HAVE_CUDA_LIB %d\n#define DDPC_HAVE_GLOO_LIB %d\n#define DDPC_SANFLAGS "%s"\n' \
	  '$(VERSION)' '$(CC)' '$(JOB_CFLAGS)' '$(RT_LIBS)' $(if $(NVCC),1,0) $(if $(GLOO_SO),1,0) '$(SANFLAGS)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
FORCE:

$(B)/obj/%.o: %.c | $(B)/obj/compiler/toolchain.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -I$(B)/obj/compiler $(BLAS_CFLAGS) $(CHECK_CFLAGS) $(CFLAGS) -c $< -o $@

# sqrtf without errno lets the optimizer loops vectorize; without FP traps
# the compare-and-select clamps of ddpc_k_expf (GELU) are if-converted, so
# its loops vectorize too. Neither changes a value (no reassociation, no
# contraction: C11 keeps fp-contract off).
$(B)/obj/runtime/ops_cpu.o: CFLAGS += -fno-math-errno -fno-trapping-math
# -O3 for the hot loops: ops_cpu's optimizer and activation kernels (and the
# ops_kernels.h code inlined into them), data_gather's per-step conversion.
# After OPT on the command line, so it wins; the sources carry no pragma.
$(B)/obj/runtime/ops_cpu.o $(B)/obj/runtime/data.o: CFLAGS += -O3

$(B)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(CUDA_OBJ_FLAGS) -Ispec -Iruntime -c $< -o $@

$(B)/obj/runtime/ops_cuda.o: CUDA_OBJ_FLAGS = $(CUDA_EXACT_MATH)
# nvcc writes no dependency files here: a CUDA object is rebuilt when any
# runtime or spec header changes (ops_cuda_rows.cuh, ops_kernels.h, ...)
$(CUDA_OBJ): $(wildcard runtime/*.h runtime/*.cuh spec/*.h)

$(B)/obj/compiler:
	@mkdir -p $@

$(SPEC_LIB): $(SPEC_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(RT_LIB): $(RT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(B)/lib/libddprt_cuda.a: $(CUDA_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(B)/obj/pic/%.o: %.c | $(B)/obj/compiler/toolchain.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -c $< -o $@

# exports ddpc_cuda_backend (and what it needs); finds the CUDA libraries by
# rpath; -z defs: nothing left for the job binary to provide
$(B)/lib/ddpc/libddprt_cuda.so: $(CUDA_OBJ) $(CUDA_SO_COBJ)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-z,defs -o $@.tmp $^ $(CUDA_LINK) -lm -pthread && mv $@.tmp $@

$(B)/obj/runtime/comm_gloo.o: runtime/comm_gloo.cc
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS_GLOO) -MMD -MP -c $< -o $@

# exports ddpc_gloo_backend; -z defs: nothing left for the job to provide
$(B)/lib/ddpc/libddprt_gloo.so: $(B)/obj/runtime/comm_gloo.o $(GLOO_SO_COBJ)
	@mkdir -p $(@D)
	$(CXX) -shared -Wl,-z,defs $(SANFLAGS) -o $@.tmp $^ $(GLOO_LIBS) -pthread && mv $@.tmp $@

$(DDPC): $(COMPILER_OBJ) $(SPEC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(COMPILER_OBJ) $(SPEC_LIB) $(YAML_LIBS) -lz -lm

vpath %.h spec runtime
$(B)/include/ddpc/%.h: %.h
	@mkdir -p $(@D)
	cp $< $@

$(SHARE)/templates/%: templates/%
	@mkdir -p $(@D)
	cp $< $@

$(SHARE)/job.c: runtime/job.c
	@mkdir -p $(@D)
	cp $< $@

# The export's loader for PyTorch users (python3 -m ddpc_torch, README).
$(SHARE)/python/ddpc_torch.py: python/ddpc_torch.py
	@mkdir -p $(@D)
	cp $< $@

# The JSON Schema, from the same key table that validates (ddpc schema).
$(SHARE)/ddpc.schema.json: $(DDPC)
	@mkdir -p $(@D)
	$(DDPC) schema > $@.tmp && mv $@.tmp $@

$(B)/share/man/man1/ddpc.1: docs/ddpc.1
	@mkdir -p $(@D)
	cp $< $@

# ---- tests ----
# the plan and emit suites test compiler/ code: everything but its main()
TEST_COMPILER_OBJ := $(filter-out $(B)/obj/compiler/main.o,$(COMPILER_OBJ))
# the allocation functions wrapped: tests/testutil.c counts them (alloc_count_start);
# _tcase_add_test wrapped: tests/main.c adds only DDPC_TEST_ONLY's tests when set
TEST_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc,--wrap=_tcase_add_test

# The CPU stand-in for the CUDA runtime, cuBLAS and NCCL (tests/standin):
# the comm_nccl and cuda_standin suites run runtime/comm_nccl.cu's and
# runtime/ops_cuda.cu's real code on it, so they are compiled a second time,
# by the host C++ compiler, against the stand-in's headers (never the
# toolkit's: -Itests/standin and no CUDA include path), with or without
# nvcc on the machine.
# ops_cuda.cu runs there too, its kernels on tests/cuda_emu.h: a copy whose
# launches `k<<<...>>>(args)` sed rewrites to DDPC_STANDIN_LAUNCH(k, ...)(args)
# (tests/standin/standin_kernels.h, force-included), nothing else changed;
# no FMA contraction, as nvcc's -fmad=false (the stand-in's streams flush
# denormals, as -ftz=true).
STANDIN_OBJ      := $(B)/obj/standin/standin.o $(B)/obj/standin/comm_nccl.o \
                    $(B)/obj/standin/ops_cuda.o
STANDIN_CXXFLAGS := -std=c++17 $(OPT) -Wall -Wextra -Wno-unused-parameter \
                    $(if $(filter 1,$(WERROR)),-Werror) $(SANFLAGS) -pthread -MMD -MP
$(B)/obj/standin/standin.o: tests/standin/standin.cc
	@mkdir -p $(@D)
	$(CXX) $(STANDIN_CXXFLAGS) -Itests/standin -Itests -c $< -o $@
$(B)/obj/standin/comm_nccl.o: runtime/comm_nccl.cu
	@mkdir -p $(@D)
	$(CXX) -x c++ $(STANDIN_CXXFLAGS) -D_GNU_SOURCE -Itests/standin -Ispec -Iruntime -c $< -o $@
$(B)/obj/standin/ops_cuda.cc: runtime/ops_cuda.cu
	@mkdir -p $(@D)
	{ printf '#line 1 "runtime/ops_cuda.cu"\n'; \
	  sed -E 's/([A-Za-z_][A-Za-z0-9_#]*)<<<(.*)>>>\(/DDPC_STANDIN_LAUNCH(\1, \2)(/' $<; } > $@.tmp
	mv $@.tmp $@
$(B)/obj/standin/ops_cuda.o: $(B)/obj/standin/ops_cuda.cc
	$(CXX) $(STANDIN_CXXFLAGS) -ffp-contract=off -D_GNU_SOURCE -Itests/standin -Itests -Ispec \
	  -Iruntime -include standin_kernels.h -c $< -o $@
$(B)/obj/tests/test_comm_nccl.o $(B)/obj/tests/test_cuda_standin.o: CPPFLAGS += -Itests/standin

$(TESTS): $(TEST_OBJ) $(TEST_COMPILER_OBJ) $(SPEC_LIB) $(RT_LIB) $(STANDIN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(TEST_WRAP) -o $@ $(TEST_OBJ) $(STANDIN_OBJ) $(TEST_COMPILER_OBJ) $(SPEC_LIB) $(RT_LIB) $(YAML_LIBS) $(CHECK_LIBS) $(RT_LIBS) -lstdc++

# never installs anything: scripts/install-deps (or make deps) does, first
test check: all $(TESTS)
	DDPC_TOP=$(CURDIR) DDPC_BUILD=$(CURDIR)/$(B) $(TESTS)

# ---- CUDA: link check (CI, no GPU needed) and GPU tests (need a GPU) ----
# cuda-link-check builds a C program that dlopen()s libddprt_cuda.so the way
# a job's launcher does (linked without CUDA), runs its device probe (0
# devices here is fine, and it says so), and builds test_gpu (linked with
# libddprt_cuda.a) so that cannot rot. gpu-test compares every
# CUDA op with the CPU backend, all-reduces at world 2 and 4 (ranks share
# GPUs where there are fewer: NCCL >= 2.30), trains with overlapped buckets
# and runs built jobs (tests/gpu/README.md).
CUDA_LINK_CHECK := $(B)/tests/cuda_link_check
GPU_TEST        := $(B)/tests/test_gpu
.PHONY: cuda-link-check gpu-test
ifneq ($(NVCC),)
# The .cu rule records no header dependencies: rebuild the (three) CUDA
# objects when any runtime header changes, above all ops_kernels.h, whose
# arithmetic they compile in.
$(CUDA_OBJ): $(wildcard runtime/*.h) spec/job.h

$(B)/obj/tests/gpu/test_gpu.o: CPPFLAGS += -I$(CUDA_HOME)/include
$(GPU_TEST): $(B)/tests/%: $(B)/obj/tests/gpu/%.o $(CUDA_LIB) $(RT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(CUDA_LIB) $(RT_LIB) $(CUDA_LINK) $(RT_LIBS)

$(CUDA_LINK_CHECK): $(B)/tests/%: $(B)/obj/tests/gpu/%.o $(CUDA_SO)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $<

# and, where cuobjdump exists, that every CUDA object holds sm_80 and sm_90
# machine code plus PTX (compute_90) for newer GPUs.
CUOBJDUMP ?= $(shell command -v cuobjdump 2>/dev/null || { test -x $(CUDA_HOME)/bin/cuobjdump && echo $(CUDA_HOME)/bin/cuobjdump; })
cuda-link-check: $(CUDA_LINK_CHECK) $(GPU_TEST)
	$(CUDA_LINK_CHECK) $(CURDIR)/$(CUDA_SO)
	@if [ -z "$(CUOBJDUMP)" ]; then \
	  echo "cuda-link-check: cuobjdump not found: GPU architectures not listed (CUOBJDUMP=path to check them)"; \
	else for o in $(CUDA_OBJ); do \
	  elf=$$($(CUOBJDUMP) --list-elf $$o) && ptx=$$($(CUOBJDUMP) --list-ptx $$o) || exit 1; \
	  for want in sm_80.cubin sm_90.cubin; do echo "$$elf" | grep -q "$$want" || \
	    { echo "cuda-link-check: $$o lacks $$want"; exit 1; }; done; \
	  echo "$$ptx" | grep -q "sm_90.ptx" || { echo "cuda-link-check: $$o lacks PTX"; exit 1; }; \
	  echo "cuda-link-check: $$o: sm_80 + sm_90 machine code, compute_90 PTX"; \
	done; fi

# gpu-test: test_gpu forks every part (the probe, the NCCL ranks, the ops
# and training checks, the jobs it builds with build/bin/ddpc), so no parent
# holds a CUDA context while a part runs. No GPU: SKIP with the probe's
# reason, exit 0; a GPU it could not test (a /dev/nvidia node, or
# DDPC_REQUIRE_GPU=1, and no device found; a failed probe): exit 1; every
# part that could run passed, but world 2/4 could not (fewer GPUs than
# ranks and NCCL < 2.30): exit 2.
gpu-test: all $(GPU_TEST)
	DDPC_BUILD=$(CURDIR)/$(B) $(GPU_TEST)
else
cuda-link-check:
	@echo "SKIP $@: nvcc not found, the CUDA backend is not built"
gpu-test:
	@echo "gpu-test: nvcc not found, so the CUDA backend and test_gpu cannot be built and nothing on the GPU can be tested (install the CUDA toolkit, or NVCC=/path/to/nvcc)"; exit 1
endif

# The same suite with ASan + UBSan, in its own build tree.
sanitize:
	$(MAKE) B=build-san SANFLAGS='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined' OPT='-O1 -g' NVCC= test

# libFuzzer over the spec loader and validator, seeded with the spec corpus.
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
$(B)/fuzz/fuzz_spec: tests/fuzz/fuzz_spec.c $(SPEC_SRC) $(wildcard spec/*.h spec/*.def)
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -Ispec -Iruntime -g -O1 -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -o $@ tests/fuzz/fuzz_spec.c $(SPEC_SRC) $(YAML_LIBS) -lz -lm

# ... and over token data (text files, llm.c shards) through the job's loader
# and windows, seeded with the corpus's shards and text
$(B)/fuzz/fuzz_tokens: tests/fuzz/fuzz_tokens.c spec/tokens.c runtime/data.c runtime/err.c \
                       $(wildcard spec/*.h runtime/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -Ispec -Iruntime -g -O1 -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -o $@ tests/fuzz/fuzz_tokens.c spec/tokens.c runtime/data.c \
	  runtime/err.c -lz -lm

fuzz: $(B)/fuzz/fuzz_spec $(B)/fuzz/fuzz_tokens
	@mkdir -p $(B)/fuzz/corpus $(B)/fuzz/corpus-tokens
	cp -f examples/*.yaml tests/specs/*/*.yaml $(B)/fuzz/corpus/ 2>/dev/null || true
	@echo "fuzzing the spec front end for $(FUZZ_SECONDS) s (log: $(B)/fuzz/log)"
	@$(B)/fuzz/fuzz_spec -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=5 \
	  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(B)/fuzz/ $(B)/fuzz/corpus \
	  > $(B)/fuzz/log 2>&1 || { tail -60 $(B)/fuzz/log; echo "fuzz: FAILED, reproducer in $(B)/fuzz/"; exit 1; }
	@grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb))' $(B)/fuzz/log
	@for f in tests/specs/data/tokens-*.bin tests/specs/data/tiny.txt; do \
	  { printf '\001\007\000\120'; cat $$f; } > $(B)/fuzz/corpus-tokens/$$(basename $$f); done
	@echo "fuzzing token data for $(FUZZ_SECONDS) s (log: $(B)/fuzz/log-tokens)"
	@$(B)/fuzz/fuzz_tokens -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=5 \
	  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(B)/fuzz/ \
	  $(B)/fuzz/corpus-tokens > $(B)/fuzz/log-tokens 2>&1 || \
	  { tail -60 $(B)/fuzz/log-tokens; echo "fuzz: FAILED, reproducer in $(B)/fuzz/"; exit 1; }
	@grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb))' \
	  $(B)/fuzz/log-tokens

# Benchmarks (never installed, never run by test): build/bench/<name>.
BENCH_BIN := $(B)/bench/allreduce $(B)/bench/crc32c $(B)/bench/spec_limits $(B)/bench/gpt_step \
             $(if $(GLOO_SO),$(B)/bench/gloo_allreduce)
bench: $(BENCH_BIN)
# ddpc's gloo path (comm_gloo.cc compiled in) against gloo's own ring
$(B)/bench/gloo_allreduce: bench/gloo_allreduce.cc runtime/comm_gloo.cc $(GLOO_SO_COBJ)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS_GLOO) -o $@ bench/gloo_allreduce.cc runtime/comm_gloo.cc \
	  $(GLOO_SO_COBJ) $(GLOO_LIBS) -pthread
$(B)/bench/spec_limits: bench/spec_limits.c $(SPEC_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(SPEC_LIB) $(LDFLAGS) $(YAML_LIBS) -lz -lm

$(B)/bench/%: bench/%.c $(RT_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(RT_LIB) $(LDFLAGS) $(RT_LIBS)

# The generated documents (a test fails when a committed one is stale).
docs: $(DDPC)
	$(DDPC) schema --format markdown > spec/README.md
	$(DDPC) schema --format coming-from > docs/coming-from.md

demo: deps all
	$(DDPC) build examples/fashion-mnist.yaml -o fashion-mnist && ./fashion-mnist

# ddpc finds everything relative to its own executable (compiler/paths.c),
# so the installed tree is build/'s layout: bin/ddpc, lib/libddprt.a,
# lib/ddpc/libddprt_cuda.so and lib/ddpc/libddprt_gloo.so (the plugins, where
# their toolchains exist; jobs name them by absolute path),
# include/ddpc/, share/ddpc/{job.c,templates/,ddpc.schema.json}, and the
# man page in share/man/man1/.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/ddpc \
	  $(DESTDIR)$(PREFIX)/share/ddpc/templates $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(DDPC) $(DESTDIR)$(PREFIX)/bin/ddpc
	install -m 644 $(RT_LIB) $(DESTDIR)$(PREFIX)/lib/
	$(if $(CUDA_SO)$(GLOO_SO),install -d $(DESTDIR)$(PREFIX)/lib/ddpc)
	$(if $(CUDA_SO),install -m 755 $(CUDA_SO) $(DESTDIR)$(PREFIX)/lib/ddpc/)
	$(if $(GLOO_SO),install -m 755 $(GLOO_SO) $(DESTDIR)$(PREFIX)/lib/ddpc/)
	cp -R $(B)/include/ddpc/. $(DESTDIR)$(PREFIX)/include/ddpc/
	cp -R $(SHARE)/. $(DESTDIR)$(PREFIX)/share/ddpc/
	install -m 644 docs/ddpc.1 $(DESTDIR)$(PREFIX)/share/man/man1/ddpc.1

# Removes what install put there (ddpc's own directories whole), nothing else.
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ddpc $(DESTDIR)$(PREFIX)/lib/libddprt.a \
	  $(DESTDIR)$(PREFIX)/share/man/man1/ddpc.1
	rm -rf $(DESTDIR)$(PREFIX)/lib/ddpc $(DESTDIR)$(PREFIX)/include/ddpc $(DESTDIR)$(PREFIX)/share/ddpc

clean:
	rm -rf build build-san build-zlib fashion-mnist

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
