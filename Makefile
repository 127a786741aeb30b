# Makefile - the one build for libringcc (GNU make).
#
#   make                 library (shared + static), tools, examples
#   make test            check/install deps, build, check the layers, run every test/test_*.c
#   make test T=reduce   run only build/test/test_reduce (T may list several)
#   make bench           run ringcc-bench under ringcc-run
#   make install PREFIX=/opt/ringcc
#   make test SANITIZE=address,undefined, make tsan-check, make fuzz-run,
#   make valgrind-check  the sanitizer, fuzzing and valgrind checks (CI runs all)
#   make ib-check        the verbs plugin on Soft-RoCE in a qemu guest
#   make help            every target and variable
#
# Sources are found by wildcard, so a new file in a folder of lib/, in
# transports/ (or a folder of it), tools/, examples/ or test/ needs no edit here.

.DEFAULT_GOAL := all
.DELETE_ON_ERROR:
.SUFFIXES:

comma := ,
empty :=
space := $(empty) $(empty)

# ---- configuration (override on the command line) ------------------------
SANITIZE    ?=
SAN_NAME    := $(subst $(space),,$(subst $(comma),-,$(SANITIZE)))
# BUILD is taken from the command line only, never from the environment
# (make clean removes it).
ifneq ($(origin BUILD),command line)
BUILD       := $(if $(strip $(SANITIZE)),build/san-$(SAN_NAME),build)
endif
ifneq ($(filter-out 1,$(words $(BUILD))),)
$(error BUILD must be one directory, got '$(BUILD)')
endif
ifneq ($(filter / . .. ./ ~ $(HOME) $(CURDIR),$(patsubst %/,%,$(BUILD)) $(BUILD)),)
$(error BUILD=$(BUILD) would make clean remove too much)
endif

ifeq ($(origin CC),default)
CC          := gcc
endif
OPT         ?= -O2 -g
WERROR      ?= 1
CUDA        ?= auto

PREFIX      ?= /usr/local
INCLUDEDIR  ?= $(PREFIX)/include
LIBDIR      ?= $(PREFIX)/lib
BINDIR      ?= $(PREFIX)/bin
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR     ?=

TEST_JOBS   ?= 1
TEST_TIMEOUT ?= 900
TEST_ARGS   ?=
T           ?=

# make bench: one rank per core (at least 2), nccl-tests' arguments.
NP          ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -ge 2 ] 2>/dev/null || n=2; echo $$n)
BENCH_ARGS  ?= -b 8 -e 64M -f 2
# nccl-tests' program names: links to ringcc-bench, the name picks the
# collective (build/bin and make install).
PERF_NAMES  := all_reduce_perf all_gather_perf reduce_scatter_perf \
               broadcast_perf reduce_perf alltoall_perf sendrecv_perf

# Tools listed here link libringcc.a instead of the shared library (for a tool
# that needs internal rcc_* functions). Names without .c, e.g. ringcc-model.
# ringcc-model (the tuner's cost model) and ringcc-bench (--calibrate fits
# it) always do: a TOOLS_STATIC given on the command line adds to them.
TOOLS_STATIC ?=
override TOOLS_STATIC += ringcc-model ringcc-bench ringcc-topo

DEPS_SCRIPT := scripts/install-deps.sh

# ---- version: one place, the public header ---------------------------------
version_part = $(shell sed -n 's/^\#define RINGCC_VERSION_$(1)[[:space:]]\{1,\}\([0-9]\{1,\}\).*/\1/p' include/ringcc.h)
VERSION_MAJOR := $(call version_part,MAJOR)
VERSION_MINOR := $(call version_part,MINOR)
VERSION_PATCH := $(call version_part,PATCH)
ifeq ($(VERSION_MAJOR)$(VERSION_MINOR)$(VERSION_PATCH),)
$(error cannot read RINGCC_VERSION_MAJOR/MINOR/PATCH from include/ringcc.h)
endif
VERSION     := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

# ---- sources ----------------------------------------------------------------
# The library: lib/<layer>/*.c (one folder per layer, docs/architecture.md)
# and transports/*.c, with transports/*/*.c (a transport in several files,
# as transports/net_ib/, keeps them in a folder of its own). Every layer's
# folder is on the quoted-include path; a transport's own folder is not (its
# files include their private header by the source file's directory).
LIB_DIRS    := $(filter-out lib/nccl,$(patsubst %/,%,$(sort $(dir $(wildcard lib/*/*.c lib/*/*.h lib/*/*.cu))))) transports
# lib/nccl/ is libnccl.so.2's (below), on the public API only: not libringcc's
LIB_SRC     := $(sort $(filter-out lib/nccl/%,$(wildcard lib/*/*.c transports/*.c transports/*/*.c)))
TOOL_SRC    := $(sort $(wildcard tools/*.c))
# Tools that are scripts (no .c, no .h: tools/ringcc-trace) are copied.
TOOL_SCRIPT_SRC := $(sort $(filter-out %.c %.h,$(wildcard tools/*)))
EXAMPLE_SRC := $(sort $(wildcard examples/*.c))
TEST_SRC    := $(sort $(wildcard test/test_*.c))
TEST_HELPER_SRC := $(sort $(filter-out $(TEST_SRC),$(wildcard test/*.c)))
# A test program too long for one file (issue 25: no source over ~1,500 lines)
# is cut in two: its second source test/parts/<name>_*.c links into
# build/test/test_<name> only (rules under "Tests link"), sharing its
# helpers through test/test_<name>.h.
TEST_PART_SRC := $(sort $(wildcard test/parts/*.c))

# ---- CUDA -------------------------------------------------------------------
# CUDA=auto (the default) is 1 where nvcc is found ($(CUDA_HOME)/bin/nvcc, or
# on PATH), else 0. With CUDA=1, lib/*/*.cu (the collective kernels) are
# compiled by nvcc for sm_80 and sm_90 plus PTX for compute_90 into the
# library, the C files see RINGCC_HAVE_CUDA=1, and the CUDA runtime is linked
# statically: it opens the driver (libcuda.so.1) only when first used, so the
# library loads and runs host collectives where there is no GPU or driver.
# CUDA=0 builds without CUDA (a non-NULL stream is then
# RINGCC_ERR_UNSUPPORTED). make gpu-check runs the checks that need a GPU.
#
# Another toolkit: make CUDA_HOME=/usr/local/cuda-12.4 (its nvcc, headers and
# static runtime; the build records the flags, so everything is rebuilt).
# A CUDA 13 build needs NVIDIA driver R580 or newer on the GPU nodes, a CUDA
# 12.x build R525 or newer (minor-version compatibility); docs/cuda.md.
CUDA_HOME   ?= /usr/local/cuda
ifeq ($(origin CUDA_HOME),command line)
ifeq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
ifneq ($(CUDA),0)
$(error CUDA_HOME=$(CUDA_HOME) has no bin/nvcc: give the toolkit's root (e.g. /usr/local/cuda-12.4), or CUDA=0)
endif
endif
endif
NVCC        ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) \
                           $(shell command -v nvcc 2>/dev/null))
ifeq ($(CUDA),auto)
override CUDA := $(if $(strip $(NVCC)),1,0)
endif
ifeq ($(CUDA),1)
ifeq ($(strip $(NVCC)),)
$(error CUDA=1 but nvcc is not found (set CUDA_HOME or NVCC, or CUDA=0))
endif
CUDA_ROOT   := $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS  ?= -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=[sm_90,compute_90]
LIB_CU_SRC  := $(sort $(wildcard lib/*/*.cu))
CUDA_CPPFLAGS := -DRINGCC_HAVE_CUDA=1 -isystem $(CUDA_ROOT)/include
CUDA_LIBS   := -L$(CUDA_ROOT)/lib64 -lcudart_static -ldl -lrt
# Host code of the .cu files: C++17 without exceptions or guarded statics,
# so the library needs no libstdc++; device code uncompressed (--no-compress)
# so test_cuda_build can read each kernel's name in the cubins.
NVCC_WERROR := $(if $(filter-out 0,$(WERROR)),-Werror all-warnings)
# --no-compress is newer than some CUDA 12 nvcc; the fatbinary option says
# the same there.
NVCC_NO_COMPRESS := $(shell $(NVCC) --help 2>/dev/null | grep -q -- '--no-compress' \
                      && echo --no-compress || echo -Xfatbin=-compress=false)
NVCC_COMPILE = $(NVCC) -std=c++17 $(OPT) $(CUDA_ARCHS) $(NVCC_NO_COMPRESS) -t 0 \
               $(NVCC_WERROR) -Iinclude $(addprefix -I,$(LIB_DIRS)) -DRINGCC_HAVE_CUDA=1 \
               -Xcompiler -fPIC,-fvisibility=hidden,-fno-exceptions \
               -Xcompiler -fno-threadsafe-statics,-Wall,-Wextra$(if $(WERROR_FLAG),$(comma)-Werror) \
               -MMD -MP
else ifneq ($(CUDA),0)
$(error CUDA=$(CUDA): use auto, 0 or 1)
endif

# ---- flags ------------------------------------------------------------------
ifneq ($(WERROR),0)
WERROR_FLAG := -Werror
endif
ifneq ($(strip $(SANITIZE)),)
SAN_FLAGS   := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
endif
# GCC warns (-Wtsan) that TSan does not model atomic_thread_fence; the wakeup
# protocol of exec_host.c/proxy.c uses one (publish, fence, read waiters), and
# the data it guards is read through acquire loads that TSan does see, so the
# warning is no error here. Only for a compiler that knows -Wno-tsan (GCC).
ifneq ($(findstring thread,$(SANITIZE)),)
SAN_FLAGS   += $(shell $(CC) -Werror -Wno-tsan -fsanitize=thread -E -x c /dev/null >/dev/null 2>&1 && echo -Wno-tsan)
endif

# The library's folders are searched for "quoted" includes only (-iquote,
# not -I): an internal header named like a system one (lib/x/sched.h) must
# not replace <sched.h> inside the system headers.
RCC_CPPFLAGS := -Iinclude $(addprefix -iquote ,$(LIB_DIRS)) -D_GNU_SOURCE
RCC_CFLAGS   := -std=c11 $(OPT) -Wall -Wextra $(WERROR_FLAG) -pthread -fPIC \
                -fvisibility=hidden $(SAN_FLAGS)
DEPFLAGS     := -MMD -MP
COMPILE      = $(CC) $(RCC_CPPFLAGS) $(CUDA_CPPFLAGS) $(CPPFLAGS) $(RCC_CFLAGS) \
               $(CFLAGS) $(DEPFLAGS)

LINK_FLAGS  := -pthread $(SAN_FLAGS)
LIB_LIBS    ?= -lm
LIB_LIBS    += $(CUDA_LIBS)
RPATH       := -Wl,-rpath,'$$ORIGIN/../lib'
TEST_LIBS   ?= -lcriterion -lm -lpthread

# ---- outputs ----------------------------------------------------------------
OBJ         := $(BUILD)/obj
LIBOUT      := $(BUILD)/lib
BINOUT      := $(BUILD)/bin
EXOUT       := $(BUILD)/examples
TESTOUT     := $(BUILD)/test

SONAME      := libringcc.so.$(VERSION_MAJOR)
SO_REAL     := $(LIBOUT)/libringcc.so.$(VERSION)
SO_MAJOR    := $(LIBOUT)/$(SONAME)
SO_DEV      := $(LIBOUT)/libringcc.so
STATIC_LIB  := $(LIBOUT)/libringcc.a
PC_FILE     := $(LIBOUT)/pkgconfig/ringcc.pc

LIB_OBJ     := $(LIB_SRC:%.c=$(OBJ)/%.o) $(LIB_CU_SRC:%.cu=$(OBJ)/%.o)
NCCL_H_DIR  ?= $(patsubst %/nccl.h,%,$(firstword $(wildcard $(CUDA_HOME)/include/nccl.h)))
NCCL_SRC    := $(sort $(wildcard lib/nccl/*.c))
NCCL_OBJ    := $(NCCL_SRC:lib/nccl/%.c=$(OBJ)/nccl/%.o)
NCCL_SO     := $(LIBOUT)/libnccl.so.2
NCCL_LIBS   := $(if $(NCCL_H_DIR),$(NCCL_SO) $(LIBOUT)/libnccl.so)
TOOL_BIN    := $(TOOL_SRC:tools/%.c=$(BINOUT)/%) \
               $(TOOL_SCRIPT_SRC:tools/%=$(BINOUT)/%)
EXAMPLE_BIN := $(EXAMPLE_SRC:examples/%.c=$(EXOUT)/%)
# test_nccl needs a real nccl.h (the toolkit's) and the libnccl.so.2 it tests
TEST_SRC    := $(if $(NCCL_H_DIR),$(TEST_SRC),$(filter-out test/test_nccl.c,$(TEST_SRC)))
TEST_BIN    := $(TEST_SRC:test/%.c=$(TESTOUT)/%)
TEST_HELPER_OBJ := $(TEST_HELPER_SRC:%.c=$(OBJ)/%.o)
TEST_PART_OBJ := $(TEST_PART_SRC:%.c=$(OBJ)/%.o)
# ringcc-bench is one backend of bench/bench_common.c, the measurement that
# bench/mpi_bench.c and bench/gloo_bench.cc (make bench-compare) share.
BENCH_COMMON_OBJ := $(OBJ)/bench/bench_common.o
ALL_OBJ     := $(LIB_OBJ) $(TOOL_SRC:%.c=$(OBJ)/%.o) \
               $(EXAMPLE_SRC:%.c=$(OBJ)/%.o) $(TEST_SRC:%.c=$(OBJ)/%.o) \
               $(TEST_HELPER_OBJ) $(TEST_PART_OBJ) $(BENCH_COMMON_OBJ)

# T=reduce, T=test_reduce or T="reduce bcast": the test binaries to run.
T_NAMES     := $(patsubst test_%,%,$(basename $(notdir $(T))))
ifneq ($(strip $(T)),)
T_MISSING   := $(filter-out $(TEST_SRC),$(T_NAMES:%=test/test_%.c))
TEST_RUN    := $(T_NAMES:%=$(TESTOUT)/test_%)
else
TEST_RUN    := $(TEST_BIN)
endif

# Compile flags are recorded in $(BUILD)/.flags; a change (CFLAGS=..., OPT=...,
# WERROR=0) rebuilds every object instead of mixing old and new ones.
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW   := $(COMPILE) | $(LINK_FLAGS) $(LDFLAGS) | $(LIB_LIBS) | $(NVCC_COMPILE)
ifneq ($(filter-out clean distclean help uninstall deps,$(MAKECMDGOALS)),)
UPDATE_STAMP := 1
endif
ifeq ($(MAKECMDGOALS),)
UPDATE_STAMP := 1
endif
ifdef UPDATE_STAMP
ifneq ($(shell cat $(FLAGS_STAMP) 2>/dev/null),$(strip $(FLAGS_NOW)))
$(shell mkdir -p $(BUILD) && printf '%s\n' '$(subst ','\'',$(strip $(FLAGS_NOW)))' > $(FLAGS_STAMP))
endif
endif

# ---- environment for test runs ----------------------------------------------
# Multi-rank tests start the tools (ringcc-run) from here. The OMPI_* settings
# let tests that use mpirun run as root (CI) and with more ranks than cores.
TEST_ENV := RINGCC_BIN_DIR=$(abspath $(BINOUT)) \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            OMPI_MCA_rmaps_base_oversubscribe=1 \
            PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
# The host suite stays host-only where there is a GPU too (no CUDA context
# per rank process, no device FIFOs); make gpu-check tests device buffers.
TEST_ENV += RINGCC_CUDA_DEVICE=none
# LeakSanitizer: Criterion's own allocations (libcriterion.so) are reported
# as leaks at every worker's exit; test/lsan.supp suppresses those only.
ifneq ($(findstring address,$(SANITIZE)),)
TEST_ENV += ASAN_OPTIONS=$${ASAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:detect_leaks=1:abort_on_error=0} \
            LSAN_OPTIONS=$${LSAN_OPTIONS:-suppressions=$(abspath test/lsan.supp):print_suppressions=0}
endif
ifneq ($(findstring undefined,$(SANITIZE)),)
TEST_ENV += UBSAN_OPTIONS=$${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
endif
# Criterion 2.4 cannot start under TSan (its boxfort arena finds no free
# address range: Snaipe/Criterion#274); the library, tools and examples still
# build and run with SANITIZE=thread, e.g. make bench SANITIZE=thread, and
# make tsan-check runs a threaded driver without Criterion (below).
ifneq ($(findstring thread,$(SANITIZE)),)
TEST_ENV += TSAN_OPTIONS=$${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=4}
endif

# ---- top-level targets --------------------------------------------------------
.PHONY: all lib tools examples tests test bench deps install uninstall \
        gpu-tests gpu-check ib-check \
        clean distclean help fuzz fuzz-run tsan-check valgrind-check churn-check \
        scale-check

all: lib tools examples

lib: $(SO_REAL) $(SO_MAJOR) $(SO_DEV) $(STATIC_LIB) $(NCCL_LIBS)

tools: $(TOOL_BIN) $(PERF_NAMES:%=$(BINOUT)/%)

$(PERF_NAMES:%=$(BINOUT)/%): $(BINOUT)/ringcc-bench
	ln -sfn ringcc-bench $@

examples: $(EXAMPLE_BIN)

# Build the test binaries without running them.
tests: $(TEST_BIN)

deps:
	@$(DEPS_SCRIPT)

# Deps first, then the build (a sub-make, so -j cannot reorder the two), then
# each test binary in turn with a time limit; a summary at the end. Output is
# also kept in $(BUILD)/test/NAME.log. A sanitizer report anywhere in it fails
# the binary even when its exit status is 0 (LeakSanitizer in a Criterion
# worker, or a report from a forked rank whose status nobody checks).
test:
ifneq ($(strip $(T_MISSING)),)
	@echo "make test: no such test: $(T_MISSING)" >&2
	@echo "tests: $(patsubst test/test_%.c,%,$(TEST_SRC))" >&2
	@exit 1
endif
	@$(DEPS_SCRIPT)
	@$(MAKE) --no-print-directory all $(TEST_RUN)
	@pass=0; fail=0; failed=; failedlogs=; \
	if [ -z "$(strip $(TEST_RUN))" ]; then echo "make test: no test/test_*.c yet"; fi; \
	if [ -z "$(strip $(T))" ]; then \
	  echo "==> scripts/check-layers.py $(OBJ)"; \
	  if python3 scripts/check-layers.py $(OBJ) > $(TESTOUT)/check-layers.log 2>&1; then \
	    pass=$$((pass + 1)); echo "<== PASS check-layers ($$(tail -n 1 $(TESTOUT)/check-layers.log))"; \
	  else \
	    fail=$$((fail + 1)); failed="$$failed check-layers"; \
	    failedlogs="$$failedlogs $(TESTOUT)/check-layers.log"; cat $(TESTOUT)/check-layers.log; \
	    echo "<== FAIL check-layers"; \
	  fi; \
	fi; \
	echo "test environment: $(TEST_ENV)"; \
	for t in $(TEST_RUN); do \
	  echo "==> $$t --jobs=$(TEST_JOBS) $(TEST_ARGS)"; \
	  start=$$(date +%s); \
	  { env $(TEST_ENV) timeout -k 30 $(TEST_TIMEOUT) $$t --jobs=$(TEST_JOBS) $(TEST_ARGS) </dev/null 2>&1; \
	    echo $$? > $$t.rc; } | tee $$t.log; \
	  rc=$$(cat $$t.rc); secs=$$(( $$(date +%s) - start )); \
	  if [ $$rc -eq 0 ] && grep -q 'SUMMARY: [A-Za-z]*Sanitizer' $$t.log; then rc=san; fi; \
	  if [ $$rc = 0 ]; then \
	    pass=$$((pass + 1)); echo "<== PASS $$t ($${secs}s)"; \
	  else \
	    fail=$$((fail + 1)); \
	    if [ $$rc = 124 ] || [ $$rc = 137 ]; then why="timeout after $(TEST_TIMEOUT)s"; \
	    elif [ $$rc = san ]; then why="sanitizer report in $$t.log"; \
	    elif grep -q 'Could not initialize inheritable arena' $$t.log; then \
	      why="Criterion cannot start under TSan: Snaipe/Criterion#274"; \
	    else why="exit $$rc"; fi; \
	    failed="$$failed $${t##*/}($$why)"; failedlogs="$$failedlogs $$t.log"; \
	    echo "<== FAIL $$t ($$why, $${secs}s)"; \
	  fi; \
	done; \
	echo "======================================================"; \
	echo "test summary ($(BUILD)$(if $(SANITIZE), SANITIZE=$(SANITIZE))): $$pass passed, $$fail failed"; \
	if [ $$fail -ne 0 ]; then \
	  for log in $$failedlogs; do \
	    echo "--- why $${log%.log} failed (the failure lines of $$log):"; \
	    grep -E '^\[(----|FAIL)\]|CRASH|SUMMARY: [A-Za-z]*Sanitizer|Could not initialize|^up: |^circle: ' $$log | tail -n 40; \
	  done; \
	  echo "failed:$$failed"; exit 1; \
	fi

bench:
	@$(DEPS_SCRIPT) --build-only
	@$(MAKE) --no-print-directory all
	@test -x $(BINOUT)/ringcc-run -a -x $(BINOUT)/ringcc-bench || \
	  { echo "make bench: needs tools/ringcc-run.c and tools/ringcc-bench.c" >&2; exit 1; }
	$(BINOUT)/ringcc-run -np $(NP) $(BINOUT)/all_reduce_perf $(BENCH_ARGS)

# ---- Python: the ringcc package and the torch backend (python/, docs/python.md) ----
# make test-python: a venv in $(PY_VENV) with numpy, torch, pytest and
# ml_dtypes (pip's cache keeps the torch download between runs), the package
# installed from ./python (its setup.py runs make lib), then pytest on
# python/tests. PY_TEST_ARGS adds pytest arguments (e.g. -k numpy, -x).
# make python-bench: torch all_reduce ringcc vs gloo (python/benchmarks/).
# Neither is part of make test (which needs Python only for
# scripts/check-layers.py).
PYTHON      ?= python3
PY_VENV     ?= build/venv
PY_PACKAGES ?= numpy torch pytest ml_dtypes setuptools wheel expecttest
PY_TEST_ARGS ?=
PY_BENCH_ARGS ?=

.PHONY: python-venv test-python python-bench
python-venv: $(PY_VENV)/.installed

$(PY_VENV)/.installed:
	@$(DEPS_SCRIPT) --python
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q --upgrade pip
	$(PY_VENV)/bin/python -m pip install -q $(PY_PACKAGES)
	@touch $@

test-python: python-venv
	$(PY_VENV)/bin/python -m pip install -q --no-build-isolation --no-deps \
	  --force-reinstall ./python
	@$(PY_VENV)/bin/python -c 'import numpy, torch, ringcc; print("test-python:", \
	  "python", __import__("sys").version.split()[0], "numpy", numpy.__version__, \
	  "torch", torch.__version__, "ringcc", ringcc.__version__, ringcc.library_path)'
	cd python && env -u RINGCC_LIBRARY $(abspath $(PY_VENV))/bin/python -m pytest \
	  -p no:cacheprovider -ra $(PY_TEST_ARGS) tests

# make launch-check: ringcc_comm_init_env under the real launchers
# (scripts/launch-check.sh): torchrun from $(PY_VENV) (standalone, c10d),
# mpirun, MPICH's mpiexec.hydra and a one-node Slurm started in a temporary
# folder (srun, srun --mpi=pmi2, srun torchrun); about a minute.
# make nccl-check: libnccl.so.2 against the NCCL that the torch wheel in
# $(PY_VENV) ships (scripts/nccl-check.sh): every function of both nccl.h
# and every nccl* import of libtorch_cuda.so resolves with its p alias,
# nothing else exported; test_nccl built against the wheel's nccl.h; the
# switch (scripts/nccl-switch.sh) into a venv made for the check, torch
# loading only this library, and back. PY_VENV is only read. About a minute.
.PHONY: nccl-check
nccl-check: lib
	env $(TEST_ENV) scripts/nccl-check.sh --build $(BUILD) $(abspath $(PY_VENV))

.PHONY: launch-check
launch-check: python-venv
	@$(DEPS_SCRIPT) --launchers
	@$(MAKE) --no-print-directory all $(TESTOUT)/test_launch
	env $(TEST_ENV) timeout -k 30 600 scripts/launch-check.sh \
	  $(TESTOUT)/test_launch $(abspath $(PY_VENV))

# make torch-suite: PyTorch's own distributed tests (distributed_test.py of
# the wheel in $(PY_VENV)) with gloo and with ringcc standing in for it, at
# world sizes 2 and 3, and the table (scripts/torch-suite.sh; long: every
# test spawns its ranks). make torch-suite-quick: a bounded subset on ringcc
# (CI). TORCH_SUITE_ARGS adds arguments (e.g. --ws 2, --tests a,b).
TORCH_SUITE_ARGS ?=
.PHONY: torch-suite torch-suite-quick
torch-suite: python-venv all
	scripts/torch-suite.sh --venv $(PY_VENV) $(TORCH_SUITE_ARGS)

torch-suite-quick: python-venv all
	scripts/torch-suite.sh --venv $(PY_VENV) --quick $(TORCH_SUITE_ARGS)

python-bench: python-venv
	$(PY_VENV)/bin/python -m pip install -q --no-build-isolation --no-deps \
	  --force-reinstall ./python
	$(PY_VENV)/bin/python python/benchmarks/torch_allreduce.py $(PY_BENCH_ARGS)

# ringcc next to Open MPI and Gloo, interleaved, medians, table + plot under
# build/bench-results/ (scripts/bench-compare.sh --help; docs/performance.md).
BENCH_COMPARE_ARGS ?=
.PHONY: bench-compare
bench-compare:
	scripts/bench-compare.sh --build $(BUILD) $(BENCH_COMPARE_ARGS)

# ---- library -------------------------------------------------------------------
$(SO_REAL): $(LIB_OBJ) lib/ringcc.map $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/ringcc.map \
	  -Wl,--no-undefined $(LINK_FLAGS) $(LDFLAGS) -o $@ $(LIB_OBJ) $(LIB_LIBS)

$(SO_MAJOR): $(SO_REAL)
	ln -sfn $(notdir $<) $@

$(SO_DEV): $(SO_MAJOR)
	ln -sfn $(notdir $<) $@

$(STATIC_LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $(LIB_OBJ)

# ---- libnccl.so.2 ------------------------------------------------------------------
# NCCL's host API on the public ringcc API (lib/nccl/, docs/nccl.md), with
# libringcc.a linked in: one self-contained file that a program or the torch
# wheel loads in place of NCCL's. Compiled against the CUDA toolkit's nccl.h
# ($(CUDA_HOME)/include, never copied here); without it, not built.
# Exports only nccl* and pnccl* (lib/nccl/nccl.map).
$(NCCL_SO): $(NCCL_OBJ) $(STATIC_LIB) lib/nccl/nccl.map
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libnccl.so.2 -Wl,--version-script=lib/nccl/nccl.map \
	  -Wl,--no-undefined $(LINK_FLAGS) $(LDFLAGS) -o $@ $(NCCL_OBJ) $(STATIC_LIB) \
	  $(LIB_LIBS)

$(LIBOUT)/libnccl.so: $(NCCL_SO)
	ln -sfn $(notdir $<) $@

$(OBJ)/nccl/%.o: lib/nccl/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) -Iinclude -iquote lib/nccl -isystem $(NCCL_H_DIR) -isystem $(CUDA_HOME)/include \
	  -D_GNU_SOURCE $(CPPFLAGS) $(RCC_CFLAGS) $(CFLAGS) -fvisibility=default \
	  -MMD -MP -c -o $@ $<

# test_nccl: an NCCL program (nccl.h, no ringcc header), linked to the
# built libnccl.so.2 by path; scripts/nccl-check.sh builds it again against
# the torch wheel's nccl.h.
NCCL_TEST_FLAGS = -isystem $(NCCL_H_DIR) -isystem $(CUDA_HOME)/include \
                  -DRCC_NCCL_SO_PATH='"$(abspath $(NCCL_SO))"'
$(OBJ)/test/test_nccl.o: RCC_CPPFLAGS += $(NCCL_TEST_FLAGS)
$(TESTOUT)/test_nccl: $(OBJ)/test/test_nccl.o $(NCCL_SO)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $< $(abspath $(NCCL_SO)) \
	  -Wl,-rpath,$(abspath $(LIBOUT)) $(TEST_LIBS) -ldl $(LDLIBS)

# ---- programs --------------------------------------------------------------------
# Tools and examples link the shared library and find it through
# $ORIGIN/../lib, both in the build tree and after make install.
# A tool's further objects are listed as its prerequisites (ringcc-bench:
# bench_common.o) and linked with it.
$(BINOUT)/%: $(OBJ)/tools/%.o $(SO_REAL) $(SO_DEV) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $(filter $(OBJ)/%.o,$^) \
	  $(if $(filter $*,$(TOOLS_STATIC)),$(STATIC_LIB) $(LIB_LIBS),-L$(LIBOUT) -lringcc $(RPATH) $(CUDA_LIBS)) \
	  $(LDLIBS) -lm

$(BINOUT)/ringcc-bench: $(BENCH_COMMON_OBJ)

$(TOOL_SCRIPT_SRC:tools/%=$(BINOUT)/%): $(BINOUT)/%: tools/%
	@mkdir -p $(@D)
	install -m 755 $< $@
$(OBJ)/tools/ringcc-bench.o: RCC_CPPFLAGS += -iquote bench

$(EXOUT)/%: $(OBJ)/examples/%.o $(SO_REAL) $(SO_DEV)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $< -L$(LIBOUT) -lringcc $(RPATH) $(LDLIBS) -lm

# Tests link the static library (they call internal rcc_* functions) plus
# every test/*.c that is not test_*.c (shared helpers such as harness.c),
# and its own second half from test/parts/ where it was cut in two.
$(TESTOUT)/test_faults: $(OBJ)/test/parts/faults_calls.o
$(TESTOUT)/test_multihost: $(OBJ)/test/parts/multihost_failures.o
$(TESTOUT)/test_net_ib: $(OBJ)/test/parts/net_ib_errors.o

$(TESTOUT)/%: $(OBJ)/test/%.o $(TEST_HELPER_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $< $(filter $(TEST_PART_OBJ),$^) \
	  $(TEST_HELPER_OBJ) $(STATIC_LIB) \
	  $(LIB_LIBS) $(TEST_LIBS) $(LDLIBS)

# ---- objects -------------------------------------------------------------------
$(OBJ)/test/%.o: RCC_CPPFLAGS += -iquote test

$(OBJ)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(COMPILE) -c -o $@ $<

$(OBJ)/%.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC_COMPILE) -c -o $@ $<

$(FLAGS_STAMP):
	@mkdir -p $(@D)
	@printf '%s\n' '$(subst ','\'',$(strip $(FLAGS_NOW)))' > $@

# Program objects are only reached through pattern rules; keep them.
.SECONDARY: $(ALL_OBJ)

-include $(ALL_OBJ:.o=.d) $(NCCL_OBJ:.o=.d)

# ---- fuzzing: libFuzzer targets (clang) ----------------------------------------
# test/fuzz/fuzz_NAME.c -> $(BUILD)/fuzz/fuzz_NAME, linked with the library's
# objects rebuilt under $(BUILD)/fuzz/obj by clang with coverage for libFuzzer
# and ASan+UBSan (any UBSan report is a crash). Each target feeds one parser
# of lib/util/wire.h; its seeds are test/fuzz/corpus/NAME (test/fuzz/make_corpus.py).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 1
FUZZ_ARGS    ?=
FUZZ_OUT     := $(BUILD)/fuzz
FUZZ_SRC     := $(sort $(wildcard test/fuzz/fuzz_*.c))
FUZZ_NAMES   := $(FUZZ_SRC:test/fuzz/fuzz_%.c=%)
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_BIN     := $(FUZZ_NAMES:%=$(FUZZ_OUT)/fuzz_%)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_OUT)/obj/%.o)
FUZZ_OBJ     := $(FUZZ_SRC:%.c=$(FUZZ_OUT)/obj/%.o)
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                -fno-omit-frame-pointer
# -Wno-pass-failed: reduce.c asks clang to vectorise its loops, which the
# sanitizers' instrumentation (or -O1) can prevent; that is no error here.
FUZZ_COMPILE = $(FUZZ_CC) $(RCC_CPPFLAGS) -iquote test/fuzz $(CPPFLAGS) \
               -std=c11 -O1 -g -Wall -Wextra -Wno-pass-failed $(WERROR_FLAG) \
               -pthread $(FUZZ_SAN) $(DEPFLAGS)
FUZZ_STAMP   := $(FUZZ_OUT)/.flags
FUZZ_FLAGS_NOW := $(FUZZ_COMPILE)
ifneq ($(filter fuzz fuzz-run $(FUZZ_OUT)/%,$(MAKECMDGOALS)),)
ifneq ($(shell cat $(FUZZ_STAMP) 2>/dev/null),$(strip $(FUZZ_FLAGS_NOW)))
$(shell mkdir -p $(FUZZ_OUT) && printf '%s\n' '$(subst ','\'',$(strip $(FUZZ_FLAGS_NOW)))' > $(FUZZ_STAMP))
endif
endif

# Deps first (clang, libFuzzer), then the build in a sub-make, as for test.
fuzz:
	@$(DEPS_SCRIPT) --sanitize
	@$(MAKE) --no-print-directory $(FUZZ_BIN)

fuzz-run: fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_ARGS="$(FUZZ_ARGS)" \
	  test/fuzz/run.sh $(FUZZ_OUT) $(FUZZ_TARGETS)

$(FUZZ_OUT)/obj/test/fuzz/%.o: test/fuzz/%.c $(FUZZ_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_COMPILE) -fsanitize=fuzzer -c -o $@ $<

$(FUZZ_OUT)/obj/%.o: %.c $(FUZZ_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_COMPILE) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_OUT)/fuzz_%: $(FUZZ_OUT)/obj/test/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -pthread $(LDFLAGS) -o $@ $< \
	  $(FUZZ_LIB_OBJ) $(LIB_LIBS)

$(FUZZ_STAMP):
	@mkdir -p $(@D)
	@printf '%s\n' '$(subst ','\'',$(strip $(FUZZ_FLAGS_NOW)))' > $@

.SECONDARY: $(FUZZ_LIB_OBJ) $(FUZZ_OBJ)
-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d)

# ---- ThreadSanitizer: ranks as threads -------------------------------------------
# Criterion cannot start under TSan, so make tsan-check builds the library
# with SANITIZE=thread (in build/san-thread, or $(BUILD) when SANITIZE=thread
# is given) and runs test/tsan/threads.c, a plain program whose ranks are
# threads of one process. Any TSan report fails it (exit 66).
TSAN_BUILD   := $(if $(findstring thread,$(SANITIZE)),$(BUILD),build/san-thread)
TSAN_DRIVER  := $(TSAN_BUILD)/tsan/threads
TSAN_TIMEOUT ?= 900
TSAN_RUN_OPTIONS := halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$(abspath test/tsan.supp)

tsan-check:
	@$(DEPS_SCRIPT)
	@$(MAKE) --no-print-directory SANITIZE=thread BUILD=$(TSAN_BUILD) $(TSAN_DRIVER)
	@echo "==> $(TSAN_DRIVER) (TSAN_OPTIONS=$(TSAN_RUN_OPTIONS))"
	@start=$$(date +%s); \
	env TSAN_OPTIONS=$(TSAN_RUN_OPTIONS) timeout -k 30 $(TSAN_TIMEOUT) $(TSAN_DRIVER) </dev/null; \
	rc=$$?; secs=$$(( $$(date +%s) - start )); \
	if [ $$rc -eq 0 ]; then echo "<== PASS tsan-check ($${secs}s)"; \
	elif [ $$rc -eq 66 ]; then echo "<== FAIL tsan-check: ThreadSanitizer report above ($${secs}s)"; exit 1; \
	elif [ $$rc -eq 124 ] || [ $$rc -eq 137 ]; then echo "<== FAIL tsan-check: timeout after $(TSAN_TIMEOUT)s"; exit 1; \
	else echo "<== FAIL tsan-check: exit $$rc ($${secs}s)"; exit 1; fi

$(BUILD)/tsan/%: $(OBJ)/test/tsan/%.o $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LIB_LIBS) $(LDLIBS)

.SECONDARY: $(OBJ)/test/tsan/threads.o
-include $(OBJ)/test/tsan/threads.d

# ---- valgrind: two real ranks ------------------------------------------------------
# Each rank of a 2-rank ringcc-run job runs under valgrind (memcheck); an
# error or a definite leak fails the run. The examples' allreduce and a short
# ringcc-bench, over shared memory and over TCP (RINGCC_SHM_DISABLE=1). Needs
# the plain build: valgrind does not run sanitized programs.
VALGRIND       ?= valgrind
VALGRIND_FLAGS ?= --error-exitcode=1 --leak-check=full \
                  --errors-for-leak-kinds=definite --show-leak-kinds=definite
VALGRIND_TIMEOUT ?= 900
VALGRIND_RUNS  := $(EXOUT)/allreduce \
                  "$(BINOUT)/ringcc-bench -b 8 -e 1M -f 8 -n 2 -w 1"

valgrind-check:
ifneq ($(strip $(SANITIZE)),)
	@echo "make valgrind-check: needs a build without SANITIZE" >&2; exit 1
endif
	@$(DEPS_SCRIPT) --sanitize
	@$(MAKE) --no-print-directory all
	@pass=0; fail=0; failed=; \
	for shm in 0 1; do for run in $(VALGRIND_RUNS); do \
	  echo "==> RINGCC_SHM_DISABLE=$$shm ringcc-run -np 2 valgrind $$run"; \
	  start=$$(date +%s); \
	  env RINGCC_SHM_DISABLE=$$shm $(BINOUT)/ringcc-run -np 2 --timeout $(VALGRIND_TIMEOUT) \
	    $(VALGRIND) $(VALGRIND_FLAGS) $$run </dev/null; \
	  rc=$$?; secs=$$(( $$(date +%s) - start )); \
	  if [ $$rc -eq 0 ]; then pass=$$((pass + 1)); echo "<== PASS ($${secs}s)"; \
	  else fail=$$((fail + 1)); failed="$$failed [SHM_DISABLE=$$shm $$run: exit $$rc]"; \
	    echo "<== FAIL exit $$rc ($${secs}s)"; fi; \
	done; done; \
	echo "valgrind-check: $$pass passed, $$fail failed"; \
	if [ $$fail -ne 0 ]; then echo "failed:$$failed"; exit 1; fi

# ---- churn: communicators made and destroyed in a row -------------------------------
# test/churn/churn.c: CHURN_ARGS cycles of 4 ranks each joining a new TCP
# communicator, one allreduce checked, destroy (issue 32: TIME_WAIT used up
# the ports after about 3,000). Run as root it gets a network namespace of
# its own (loopback only), so that it neither uses the host's ports nor
# meets other programs' TIME_WAIT; otherwise it runs on the host's.
CHURN_BIN   := $(BUILD)/churn/churn
CHURN_ARGS  ?= -n 10000 -e 1000

$(CHURN_BIN): $(OBJ)/test/churn/churn.o $(TEST_HELPER_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $< $(TEST_HELPER_OBJ) $(STATIC_LIB) \
	  $(LIB_LIBS) $(LDLIBS)

churn-check:
	@$(DEPS_SCRIPT)
	@$(MAKE) --no-print-directory $(CHURN_BIN)
	@start=$$(date +%s); \
	if [ "$$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then \
	  echo "churn-check: in a network namespace of its own"; \
	  unshare -n sh -c 'ip link set lo up && exec $(CHURN_BIN) $(CHURN_ARGS)'; \
	else \
	  $(CHURN_BIN) $(CHURN_ARGS); \
	fi; rc=$$?; \
	echo "churn-check: $$(if [ $$rc = 0 ]; then echo passed; else echo FAILED; fi) in $$(( $$(date +%s) - start )) s"; \
	exit $$rc

# ---- scale: many ranks on this host -------------------------------------------------
# test/test_scale.c's suite scale: SCALE_N (default 128) TCP ranks on this
# host with default settings (RINGCC_SHM_DISABLE=1; issue 28: the link check
# took ranks that were slow to drain their sockets for lost hosts), run
# under nice; prints the time and the load average before and after.
SCALE_N ?= 128

scale-check:
	@$(DEPS_SCRIPT)
	@$(MAKE) --no-print-directory $(TESTOUT)/test_scale
	@echo "scale-check: $(SCALE_N) TCP ranks, load before: $$(cut -d' ' -f1-3 /proc/loadavg)"
	@start=$$(date +%s); \
	RINGCC_SCALE_N=$(SCALE_N) nice $(TESTOUT)/test_scale --filter='scale/*' -j1; rc=$$?; \
	echo "scale-check: $$(if [ $$rc = 0 ]; then echo passed; else echo FAILED; fi) in $$(( $$(date +%s) - start )) s, load after: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	exit $$rc

# ---- the verbs plugin (transports/net_ib/) -------------------------------------------
# test_net_ib loads $(FAKE_IBV), a stand-in for libibverbs, through
# RINGCC_IBVERBS_LIB to test the error paths a real device cannot produce.
# make ib-check runs scripts/ib-check.sh: the plugin on real verbs, Soft-RoCE
# (rdma_rxe) in a qemu guest; prints "ib-check: N passed, N failed".
FAKE_IBV    := $(TESTOUT)/libfakeibverbs.so

$(TESTOUT)/test_net_ib: $(FAKE_IBV)

$(FAKE_IBV): test/ibverbs/fake_ibverbs.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(RCC_CPPFLAGS) $(CPPFLAGS) $(RCC_CFLAGS) $(CFLAGS) $(DEPFLAGS) \
	  -shared -o $@ $< $(LINK_FLAGS) $(LDFLAGS)

-include $(FAKE_IBV:.so=.d)

ib-check:
	@MAKE="$(MAKE)" scripts/ib-check.sh

# test_cuda_logic loads $(FAKE_NVML) and $(FAKE_CUDA), stand-ins for NVML
# and the CUDA driver with their sonames (libnvidia-ml.so.1, libcuda.so.1),
# so that gpu.c's NVML probe and its context checks run without a GPU.
FAKE_NVML   := $(TESTOUT)/libfakenvml.so
FAKE_CUDA   := $(TESTOUT)/libfakecuda.so

$(TESTOUT)/test_cuda_logic: $(FAKE_NVML) $(FAKE_CUDA)

$(FAKE_NVML): test/nvml/fake_nvml.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(RCC_CPPFLAGS) $(CPPFLAGS) $(RCC_CFLAGS) $(CFLAGS) $(DEPFLAGS) \
	  -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $< $(LINK_FLAGS) $(LDFLAGS)

$(FAKE_CUDA): test/cuda/fake_cuda.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(RCC_CPPFLAGS) $(CPPFLAGS) $(RCC_CFLAGS) $(CFLAGS) $(DEPFLAGS) \
	  -shared -Wl,-soname,libcuda.so.1 -o $@ $< $(LINK_FLAGS) $(LDFLAGS)

-include $(FAKE_NVML:.so=.d) $(FAKE_CUDA:.so=.d)

# ---- GPU checks (need a GPU; see docs/cuda.md) ------------------------------------
# make gpu-check runs scripts/gpu-check.sh as one call of at most 540 s
# (each step capped, the caps summed at the start): it builds gpu-tests with
# WERROR=0 for sm_90 only, then runs the reduction kernels' throughput and
# alignment sweep (test/gpu/reduce_bw.cu), the device-buffer suite
# (test/gpu/gpu_suite.c) at 1, 2 and 4 thread ranks, 2 process ranks (two
# GPUs, or MPS; else skipped, saying why), graph capture, and AllReduce busbw
# 8 B - 1 GiB, ring against the toolkit's NCCL and the cudaMemcpy D2D floor
# (test/gpu/allreduce_perf.c); logs and summary.md go to GPU_CHECK_OUT
# (default $(BUILD)/gpu); without a GPU it says so and exits 77.
GPU_OUT     := $(BUILD)/gpu
ifeq ($(CUDA),1)
GPU_BIN     := $(GPU_OUT)/gpu_suite $(GPU_OUT)/reduce_bw $(GPU_OUT)/allreduce_perf
# The NCCL that ships with the toolkit, for allreduce_perf --backend nccl
# (gpu-check compares against it); without it that backend exits 77.
NCCL_FOUND  := $(and $(wildcard $(CUDA_ROOT)/include/nccl.h),$(wildcard $(CUDA_ROOT)/lib64/libnccl.so))
NCCL_LIBS   := $(if $(NCCL_FOUND),-L$(CUDA_ROOT)/lib64 -lnccl -Wl$(comma)-rpath$(comma)$(CUDA_ROOT)/lib64)
endif

gpu-tests: all $(GPU_BIN)

# GPU_CHECK_ARGS: e.g. --dry-run (the plan, nothing run), --report.
GPU_CHECK_ARGS ?=
gpu-check:
	@BUILD=$(BUILD) MAKE="$(MAKE)" scripts/gpu-check.sh $(GPU_CHECK_ARGS)

# gpu_suite is two sources (issue 25): gpu_sections.c has the sections that
# run only when asked for (--streams, --graph, --kill, --contexts);
# gpu_common.c what both use.
GPU_SUITE_OBJ := $(OBJ)/test/gpu/gpu_suite.o $(OBJ)/test/gpu/gpu_sections.o \
                 $(OBJ)/test/gpu/gpu_common.o

$(GPU_OUT)/gpu_suite: $(GPU_SUITE_OBJ) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $(GPU_SUITE_OBJ) $(STATIC_LIB) $(LIB_LIBS) $(LDLIBS)

$(GPU_OUT)/reduce_bw: test/gpu/reduce_bw.cu lib/exec/reduce.cuh $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC_COMPILE) -o $@ $<

$(OBJ)/test/gpu/allreduce_perf.o: RCC_CPPFLAGS += $(if $(NCCL_FOUND),-DRINGCC_HAVE_NCCL=1)

$(GPU_OUT)/allreduce_perf: $(OBJ)/test/gpu/allreduce_perf.o $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(LINK_FLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LIB_LIBS) $(NCCL_LIBS) $(LDLIBS)

.SECONDARY: $(GPU_SUITE_OBJ) $(OBJ)/test/gpu/allreduce_perf.o
-include $(GPU_SUITE_OBJ:.o=.d) $(OBJ)/test/gpu/allreduce_perf.d $(GPU_OUT)/reduce_bw.d

# ---- install -------------------------------------------------------------------
pc_path = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))

# Regenerated on every install: PREFIX may differ from the last one.
$(PC_FILE): pkgconfig/ringcc.pc.in FORCE
	@mkdir -p $(@D)
	@sed -e 's|@PREFIX@|$(PREFIX)|g' \
	    -e 's|@LIBDIR@|$(call pc_path,$(LIBDIR))|g' \
	    -e 's|@INCLUDEDIR@|$(call pc_path,$(INCLUDEDIR))|g' \
	    -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@CUDA_LIBS@|$(CUDA_LIBS)|g' $< > $@.tmp && mv $@.tmp $@

.PHONY: FORCE
FORCE:

INSTALL_HEADERS := include/ringcc.h $(wildcard include/ringcc_nccl.h)

install: all $(PC_FILE)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(BINDIR)
	install -m 644 $(INSTALL_HEADERS) $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(SO_REAL) $(DESTDIR)$(LIBDIR)/
	ln -sfn $(notdir $(SO_REAL)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libringcc.so
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(LIBDIR)/
ifneq ($(NCCL_H_DIR),)
	install -m 755 $(NCCL_SO) $(DESTDIR)$(LIBDIR)/
	ln -sfn libnccl.so.2 $(DESTDIR)$(LIBDIR)/libnccl.so
endif
	install -m 644 $(PC_FILE) $(DESTDIR)$(PKGCONFIGDIR)/
ifneq ($(strip $(TOOL_BIN)),)
	install -m 755 $(TOOL_BIN) $(DESTDIR)$(BINDIR)/
	for n in $(PERF_NAMES); do ln -sfn ringcc-bench $(DESTDIR)$(BINDIR)/$$n; done
endif

uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/,ringcc.h ringcc_nccl.h)
	rm -f $(DESTDIR)$(LIBDIR)/libringcc.so $(DESTDIR)$(LIBDIR)/$(SONAME)
	rm -f $(DESTDIR)$(LIBDIR)/libringcc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libringcc.a
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/ringcc.pc
	rm -f $(DESTDIR)$(LIBDIR)/libnccl.so.2 $(DESTDIR)$(LIBDIR)/libnccl.so
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOL_BIN)) $(PERF_NAMES))

# ---- housekeeping ------------------------------------------------------------
clean:
	rm -rf $(BUILD)

distclean:
	rm -rf build $(filter-out build build/%,$(BUILD))

help:
	@echo 'libringcc $(VERSION) - targets:'
	@echo '  all (default)  $(BUILD)/lib/libringcc.so.$(VERSION) (+ .so.$(VERSION_MAJOR), .so links),'
	@echo '                 $(BUILD)/lib/libringcc.a, tools and examples'
	@echo '  lib            the shared and static library only'
	@echo '  tools          tools/NAME.c -> $(BUILD)/bin/NAME; scripts (tools/ringcc-trace) copied there'
	@echo '  examples       examples/NAME.c -> $(BUILD)/examples/NAME'
	@echo '  tests          build test/test_*.c -> $(BUILD)/test/test_* without running'
	@echo '  test           deps, build, scripts/check-layers.py (no file calls or includes'
	@echo '                 up a layer, no circle of files or folders), then every test'
	@echo '                 binary in turn, and a summary'
	@echo '                 (T=name runs only $(BUILD)/test/test_name; T="a b" several);'
	@echo '                 output also in $(BUILD)/test/test_NAME.log'
	@echo '  bench          deps (--build-only), build, then ringcc-run -np $$NP all_reduce_perf $$BENCH_ARGS'
	@echo '  torch-suite    torch distributed_test.py: gloo vs ringcc standing in, table'
	@echo '                 (torch-suite-quick: a bounded subset, ringcc only)'
	@echo '  launch-check   init_env under real torchrun, mpirun, mpiexec.hydra, srun'
	@echo '  nccl-check     libnccl.so.2 vs the torch wheel'"'"'s NCCL: symbols, test_nccl on its'
	@echo '                 nccl.h, the torch switch (scripts/nccl-switch.sh); PY_VENV read only'
	@echo '                 (a one-node Slurm in a temporary folder)'
	@echo '  test-python    venv $(PY_VENV) (numpy, torch, pytest), pip install ./python,'
	@echo '                 pytest python/tests (PY_TEST_ARGS=...; docs/python.md)'
	@echo '  python-bench   torch all_reduce and a DDP step, ringcc vs gloo (PY_BENCH_ARGS=...)'
	@echo '  bench-compare  ringcc vs Open MPI and Gloo (scripts/bench-compare.sh $$BENCH_COMPARE_ARGS,'
	@echo '                 e.g. "--quick", "--n 4 --sizes 8,64M --reps 5"; results in build/bench-results/)'
	@echo '  fuzz           build test/fuzz/fuzz_*.c with clang (libFuzzer, ASan, UBSan)'
	@echo '                 -> $(FUZZ_OUT)/fuzz_NAME'
	@echo '  fuzz-run       run each fuzz target $$FUZZ_SECONDS s on a copy of its corpus'
	@echo '                 (test/fuzz/corpus/NAME); fails on a crash, naming the input'
	@echo '  tsan-check     SANITIZE=thread build (in $(TSAN_BUILD)) of the library and'
	@echo '                 test/tsan/threads.c (ranks as threads); fails on any TSan report'
	@echo '  churn-check    test/churn/churn.c: $$CHURN_ARGS (-n 10000) TCP communicators of 4'
	@echo '  scale-check    test/test_scale.c suite scale: $$SCALE_N (128) TCP ranks on this host, defaults'
	@echo '                 ranks made and destroyed in a row (own network namespace as root)'
	@echo '  valgrind-check 2-rank allreduce example and short ringcc-bench, each rank'
	@echo '                 under valgrind, over shm and TCP; fails on errors/definite leaks'
	@echo '  ib-check       scripts/ib-check.sh: the verbs plugin on Soft-RoCE in a qemu'
	@echo '                 guest (installs qemu etc.; kernel kept in build/ibvm/deb)'
	@echo '  gpu-tests      build the GPU checks (test/gpu) -> $(GPU_OUT)/ (CUDA=1)'
	@echo '  gpu-check      scripts/gpu-check.sh, one call <= 540 s: device-buffer suite at 1, 2, 4'
	@echo '                 thread ranks and 2 processes, graphs, reduction kernels, AllReduce'
	@echo '                 busbw vs NCCL and the D2D floor; exit 77 without a GPU; logs and'
	@echo '                 summary.md in GPU_CHECK_OUT (default $(GPU_OUT))'
	@echo '                 (GPU_CHECK_ARGS=--dry-run or GPU_CHECK_DRY=1: the plan; --report)'
	@echo '  deps           scripts/install-deps.sh: check/install build and test packages'
	@echo '  install        headers, libraries, tools, ringcc.pc under $$DESTDIR$$PREFIX'
	@echo '  uninstall      remove what install put there'
	@echo '  clean          rm -rf $$BUILD (currently $(BUILD))'
	@echo '  distclean      rm -rf build (every build tree, sanitizer ones too)'
	@echo '  help           this text'
	@echo 'variables (current value):'
	@echo '  BUILD=$(BUILD)   output tree (command line only; SANITIZE=x,y makes it build/san-x-y)'
	@echo '  SANITIZE=$(SANITIZE)   address,undefined or thread: -fsanitize=... when compiling and'
	@echo '                 linking; make test sets ASAN/UBSAN/TSAN_OPTIONS (unless already set)'
	@echo '                 and fails a binary whose output has a sanitizer SUMMARY line'
	@echo '  CC=$(CC) AR=$(AR)  OPT=$(OPT) (optimisation/debug flags)'
	@echo '  CFLAGS, CPPFLAGS, LDFLAGS, LDLIBS   appended to the built-in flags'
	@echo '  WERROR=$(WERROR)       0 drops -Werror'
	@echo '  CUDA=$(CUDA)         1: kernels (lib/*/*.cu) by nvcc, CUDA runtime linked statically;'
	@echo '                 0: host only; default auto (1 where nvcc is found: $(NVCC))'
	@echo '  CUDA_HOME=$(CUDA_HOME)  the toolkit (e.g. /usr/local/cuda-12.4); CUDA 13 needs'
	@echo '                 driver R580+, CUDA 12.x R525+ on the GPU nodes'
	@echo '  TEST_JOBS=$(TEST_JOBS)    Criterion --jobs for each test binary'
	@echo '  TEST_TIMEOUT=$(TEST_TIMEOUT) seconds per test binary before it counts as failed'
	@echo '  TEST_ARGS=$(TEST_ARGS)     extra Criterion arguments (e.g. --verbose, --filter=...)'
	@echo '  T=$(T)             test name(s) for make test'
	@echo '  NP=$(NP) BENCH_ARGS="$(BENCH_ARGS)"   for make bench'
	@echo '  FUZZ_CC=$(FUZZ_CC) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) (targets run at once)'
	@echo '  FUZZ_TARGETS=$(FUZZ_TARGETS)'
	@echo '  FUZZ_ARGS=$(FUZZ_ARGS)   extra libFuzzer flags for fuzz-run'
	@echo '  TSAN_TIMEOUT=$(TSAN_TIMEOUT) VALGRIND_TIMEOUT=$(VALGRIND_TIMEOUT) seconds'
	@echo '  VALGRIND=$(VALGRIND) VALGRIND_FLAGS=$(VALGRIND_FLAGS)'
	@echo '  TOOLS_STATIC=$(TOOLS_STATIC)  tools linked with libringcc.a instead of the .so'
	@echo '  PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) (also INCLUDEDIR, LIBDIR, BINDIR, PKGCONFIGDIR)'
