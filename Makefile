# Lynx: the one entry point for building, testing and running the demo.
# Out-of-tree build in $(BUILD). Knobs: WERROR=1, SAN=address|thread|undefined, V=1.

CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
PREFIX ?= /usr/local
CC ?= gcc

DEB_PACKAGES := libcmocka-dev uthash-dev libcjson-dev coinor-libcbc-dev
# What only `make test` needs: a real browser, for report.html's screenshot test.
TEST_DEB_PACKAGES := chromium

WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wno-unused-parameter -Wformat=2 -Wundef
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=gnu11 -fPIC -pthread $(WARNINGS) $(CFLAGS) -MMD -MP \
	-isystem $(CUDA_HOME)/include
ALL_LDFLAGS := -pthread $(LDFLAGS)

ifeq ($(WERROR),1)
ALL_CFLAGS += -Werror
endif
ifneq ($(SAN),)
ALL_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer
ALL_LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-7s %s\n' $(1) $(2)
endif

.PHONY: all test demo install clean format format-check deps build-deps simgpu lynx examples tests bench bench-recompute \
	bench-policy fuzz gpu-bundle gpu-test gpu-dry shapes fault-sweep
all: simgpu lynx examples tests gpu-bundle

# ---------------------------------------------------------------------------
# simgpu: libsimgpu.so (the simulated device) under libcuda.so.1, libcudart.so.13
# and libnccl.so.2 (the API layers). Compiled against the real CUDA/NCCL headers;
# __CUDA_API_VERSION_INTERNAL exposes every ABI variant (_v2, _ptsz, _ptds) by its
# own name, as when the real libraries are built.
SIMGPU_DIR := $(BUILD)/simgpu
SIMGPU_CFLAGS := -D__CUDA_API_VERSION_INTERNAL -Itests/simgpu -Itests/simgpu/core \
	-fvisibility=hidden
SIMGPU_CORE_SRC := $(wildcard tests/simgpu/core/*.c)
SIMGPU_DRIVER_SRC := $(wildcard tests/simgpu/driver/*.c)
SIMGPU_RUNTIME_SRC := $(wildcard tests/simgpu/runtime/*.c)
SIMGPU_NCCL_SRC := $(wildcard tests/simgpu/nccl/*.c)
obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBSIMGPU := $(SIMGPU_DIR)/libsimgpu.so
LIBCUDA := $(SIMGPU_DIR)/libcuda.so.1
LIBCUDART := $(SIMGPU_DIR)/libcudart.so.13
LIBNCCL := $(SIMGPU_DIR)/libnccl.so.2
SIMGPU_LIBS := $(LIBSIMGPU) $(LIBCUDA) $(LIBCUDART) $(LIBNCCL)
simgpu: $(SIMGPU_LIBS) $(SIMGPU_DIR)/libcuda.so $(SIMGPU_DIR)/libcudart.so $(SIMGPU_DIR)/libnccl.so

$(BUILD)/obj/tests/simgpu/%.o: tests/simgpu/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(SIMGPU_CFLAGS) -c $< -o $@

$(LIBSIMGPU): $(call obj,$(SIMGPU_CORE_SRC))
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -shared -Wl,-soname,libsimgpu.so -o $@ $^ $(ALL_LDFLAGS) -lrt -ldl

# The API layers find libsimgpu.so beside themselves. libcudart does not link
# libcuda: it dlopens libcuda.so.1 and reaches every driver function through
# cuGetProcAddress_v2, as the real runtime does.
LAYER_LDFLAGS = -shared -Wl,-rpath,'$$ORIGIN' -L$(SIMGPU_DIR)
$(LIBCUDA): $(call obj,$(SIMGPU_DRIVER_SRC)) $(LIBSIMGPU)
	$(call say,LD,$@)
	$(Q)$(CC) $(LAYER_LDFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $(filter %.o,$^) \
		$(ALL_LDFLAGS) -lsimgpu

$(LIBCUDART): $(call obj,$(SIMGPU_RUNTIME_SRC)) $(LIBSIMGPU) tests/simgpu/runtime/libcudart.map
	$(call say,LD,$@)
	$(Q)$(CC) $(LAYER_LDFLAGS) -Wl,-soname,libcudart.so.13 \
		-Wl,--version-script=tests/simgpu/runtime/libcudart.map -o $@ $(filter %.o,$^) \
		$(ALL_LDFLAGS) -lsimgpu -ldl

$(LIBNCCL): $(call obj,$(SIMGPU_NCCL_SRC)) $(LIBSIMGPU)
	$(call say,LD,$@)
	$(Q)$(CC) $(LAYER_LDFLAGS) -Wl,-soname,libnccl.so.2 -o $@ $(filter %.o,$^) \
		$(ALL_LDFLAGS) -lsimgpu -lrt

$(SIMGPU_DIR)/%.so: $(SIMGPU_DIR)/%.so.1
	$(Q)ln -sf $(notdir $<) $@
$(SIMGPU_DIR)/libcudart.so: $(LIBCUDART)
	$(Q)ln -sf $(notdir $<) $@
$(SIMGPU_DIR)/libnccl.so: $(LIBNCCL)
	$(Q)ln -sf $(notdir $<) $@

# Programs written against the CUDA runtime and NCCL, linked to simgpu.
SIM_PROGRAM_LDFLAGS = -L$(SIMGPU_DIR) -Wl,-rpath,'$$ORIGIN/../simgpu' \
	-lcudart -lnccl -lsimgpu
SIM_PROGRAM_CFLAGS := -Itests/simgpu

# ---------------------------------------------------------------------------
# Examples and tests. Every tests/**/test_<module>.c is one CMocka binary.
EXAMPLE := $(BUILD)/bin/simgpu_example
examples: $(EXAMPLE)
$(EXAMPLE): $(BUILD)/obj/tests/simgpu/example/example.o | simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(SIM_PROGRAM_LDFLAGS)

SIMGPU_TEST_SRC := $(wildcard tests/simgpu/test_*.c)
SIMGPU_TESTS := $(patsubst tests/simgpu/%.c,$(BUILD)/tests/%,$(SIMGPU_TEST_SRC))

# tinytrain: a GPT-style trainer on simgpu. Its modules form a static library shared by
# the program (main.c) and its tests.
TT_DIR := tests/tinytrain
TT_LIB_SRC := $(filter-out $(TT_DIR)/main.c $(TT_DIR)/test_%.c,$(wildcard $(TT_DIR)/*.c))
TT_LIB := $(BUILD)/obj/libtinytrain.a
TINYTRAIN := $(BUILD)/bin/tinytrain
TT_TEST_SRC := $(wildcard $(TT_DIR)/test_*.c)
TT_TESTS := $(patsubst $(TT_DIR)/%.c,$(BUILD)/tests/%,$(TT_TEST_SRC))
TT_CFLAGS := $(SIM_PROGRAM_CFLAGS) -I$(TT_DIR)

$(BUILD)/obj/$(TT_DIR)/%.o: $(TT_DIR)/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(TT_CFLAGS) -c $< -o $@

$(TT_LIB): $(call obj,$(TT_LIB_SRC))
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(TINYTRAIN): $(BUILD)/obj/$(TT_DIR)/main.o $(TT_LIB) | simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(SIM_PROGRAM_LDFLAGS) -lm

$(TT_TESTS): $(BUILD)/tests/test_%: $(BUILD)/obj/$(TT_DIR)/test_%.o $(TT_LIB) | simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(SIM_PROGRAM_LDFLAGS) -lcmocka -lm

examples: $(TINYTRAIN)

# ---------------------------------------------------------------------------
# liblynx.so: the preloaded shim. It never links libcuda, libcudart or libnccl: it
# finds them at run time. Files that define exported CUDA/NCCL/dlsym symbols are named
# shim/hooks*.c or shim/interpose*.c; the other shim modules are plain C that unit tests
# link directly (never a test that defines cudaMalloc itself).
LIBLYNX := $(BUILD)/liblynx.so
# Static libraries that rules below name before their own sections: the shim links the
# profiler in, and the policy tests read profiles through it.
PROFILER_LIB := $(BUILD)/obj/libprofiler.a
POLICY_LIB := $(BUILD)/obj/libpolicy.a
SHIM_SRC := $(wildcard shim/*.c)
SHIM_PURE_SRC := $(filter-out shim/hooks%.c shim/interpose%.c,$(SHIM_SRC))
SHIM_PURE_LIB := $(BUILD)/obj/libshim_pure.a
# The shim defines deprecated entry points too (cudaGetDriverEntryPoint): it must.
SHIM_CFLAGS := -D__CUDA_API_VERSION_INTERNAL -Ishim -Iprofiler -Ipolicy -fvisibility=hidden \
	-Wno-deprecated-declarations

$(BUILD)/obj/shim/%.o: shim/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(SHIM_CFLAGS) -c $< -o $@

# The dlsym trampoline must stay a plain jump for RTLD_NEXT lookups (glibc finds the caller
# from the return address), and sanitizers resolve their own interceptors through it at
# start-up, before they are ready: it is never instrumented.
$(BUILD)/obj/shim/interpose_dlsym.o: ALL_CFLAGS := $(filter-out -fsanitize=%,$(ALL_CFLAGS))

# The online profiler (shim/profiling.c) links profiler/ in, to build the profile in process,
# and policy/, for the what-if (and, later, planning online). RUNPATH $ORIGIN: a bundle
# (make gpu-bundle) keeps libcjson beside it; elsewhere the system's is found as before.
$(LIBLYNX): $(call obj,$(SHIM_SRC)) $(POLICY_LIB) $(PROFILER_LIB) shim/liblynx.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,liblynx.so -Wl,--version-script=shim/liblynx.map \
		-Wl,-rpath,'$$ORIGIN' -o $@ $(filter %.o,$^) $(POLICY_LIB) $(PROFILER_LIB) \
		$(ALL_LDFLAGS) -ldl -lcjson -lm

$(SHIM_PURE_LIB): $(call obj,$(SHIM_PURE_SRC))
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# Unit tests of the shim's plain modules: tests/shim/test_<module>.c.
SHIM_TEST_SRC := $(wildcard tests/shim/test_*.c)
SHIM_TESTS := $(patsubst tests/shim/%.c,$(BUILD)/tests/%,$(SHIM_TEST_SRC))
$(BUILD)/obj/tests/shim/%.o: tests/shim/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(SHIM_CFLAGS) -c $< -o $@
# Probes: CUDA programs (tests/shim/probe*.c) the shim's tests run under LD_PRELOAD.
PROBES := $(patsubst tests/shim/%.c,$(BUILD)/bin/%,$(wildcard tests/shim/probe*.c))
$(PROBES): $(BUILD)/bin/%: $(BUILD)/obj/tests/shim/%.o | simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(SIM_PROGRAM_LDFLAGS)
# A static pattern: "probe%.o" would not match probe.o (a pattern's stem is never empty).
$(call obj,$(wildcard tests/shim/probe*.c)): $(BUILD)/obj/tests/shim/%.o: tests/shim/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(SIM_PROGRAM_CFLAGS) -c $< -o $@
$(SHIM_TESTS): $(BUILD)/tests/test_%: $(BUILD)/obj/tests/shim/test_%.o $(SHIM_PURE_LIB) | $(PROBES) $(LIBLYNX)
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) -lcmocka -lcjson -ldl

# ---------------------------------------------------------------------------
# policy/: cost model, planners and pipeline simulator; plain C with no CUDA. A static
# library shared by the lynx command and the policy tests (tests/policy/test_<module>.c).
POLICY_SRC := $(wildcard policy/*.c)
POLICY_CFLAGS := -Ipolicy -Iprofiler -Ishim
$(BUILD)/obj/policy/%.o: policy/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(POLICY_CFLAGS) -c $< -o $@
$(POLICY_LIB): $(call obj,$(POLICY_SRC))
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

POLICY_TEST_SRC := $(wildcard tests/policy/test_*.c)
POLICY_TESTS := $(patsubst tests/policy/%.c,$(BUILD)/tests/%,$(POLICY_TEST_SRC))
$(BUILD)/obj/tests/policy/%.o: tests/policy/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(POLICY_CFLAGS) -c $< -o $@
$(POLICY_TESTS): $(BUILD)/tests/test_%: $(BUILD)/obj/tests/policy/test_%.o $(POLICY_LIB) \
		$(PROFILER_LIB)
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) -lcmocka -lcjson -lm

# ---------------------------------------------------------------------------
# profiler/: turns events into a profile; plain C with no CUDA. It shares the event kinds
# with the shim (shim/events.def) and reads LYNX_EVENTS dumps with cJSON. Tests are
# tests/profiler/test_<module>.c.
PROFILER_SRC := $(wildcard profiler/*.c)
PROFILER_CFLAGS := -Iprofiler -Ishim
$(BUILD)/obj/profiler/%.o: profiler/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(PROFILER_CFLAGS) -c $< -o $@
$(PROFILER_LIB): $(call obj,$(PROFILER_SRC))
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

PROFILER_TEST_SRC := $(wildcard tests/profiler/test_*.c)
PROFILER_TESTS := $(patsubst tests/profiler/%.c,$(BUILD)/tests/%,$(PROFILER_TEST_SRC))
$(BUILD)/obj/tests/profiler/%.o: tests/profiler/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(PROFILER_CFLAGS) -c $< -o $@
# Profiler tests record real traces: tinytrain under liblynx.so with LYNX_EVENTS.
$(PROFILER_TESTS): $(BUILD)/tests/test_%: $(BUILD)/obj/tests/profiler/test_%.o $(PROFILER_LIB) | $(TINYTRAIN) $(LIBLYNX)
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) -lcmocka -lcjson -lm

# ---------------------------------------------------------------------------
# The lynx command. It links profiler/ and policy/, never the shim; it compiles the
# shim's configuration parser (shim/config.c, plain C) to show and check LYNX_* settings.
LYNX := $(BUILD)/bin/lynx
TOOLS_SRC := $(wildcard tools/*.c)
TOOLS_CFLAGS := -Ishim -Itools -Ipolicy -Iprofiler
$(BUILD)/obj/tools/%.o: tools/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(TOOLS_CFLAGS) -c $< -o $@
$(BUILD)/obj/tools/shim_config.o: shim/config.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(TOOLS_CFLAGS) -c $< -o $@
$(LYNX): $(call obj,$(TOOLS_SRC)) $(BUILD)/obj/tools/shim_config.o $(POLICY_LIB) $(PROFILER_LIB)
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -Wl,-rpath,'$$ORIGIN/../lib' -o $@ $^ $(ALL_LDFLAGS) -ldl -lcjson -lm

TOOLS_TEST_SRC := $(wildcard tests/tools/test_*.c)
TOOLS_TESTS := $(patsubst tests/tools/%.c,$(BUILD)/tests/%,$(TOOLS_TEST_SRC))
$(BUILD)/obj/tests/tools/%.o: tests/tools/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(TOOLS_CFLAGS) -c $< -o $@
$(TOOLS_TESTS): $(BUILD)/tests/test_%: $(BUILD)/obj/tests/tools/test_%.o | $(LYNX) $(LIBLYNX) simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) -lcmocka

lynx: $(LIBLYNX) $(LYNX)

# make bench: instructions the shim adds per call, by callgrind (tests/bench/run_bench.sh).
BENCH_CALLS := $(BUILD)/bin/bench_calls
$(BENCH_CALLS): $(BUILD)/obj/tests/bench/bench_calls.o | simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) -L$(SIMGPU_DIR) -Wl,-rpath,'$$ORIGIN/../simgpu' -lcuda -lsimgpu
$(BUILD)/obj/tests/bench/%.o: tests/bench/%.c
	$(call say,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(SIM_PROGRAM_CFLAGS) -c $< -o $@
bench: all $(BENCH_CALLS)
	$(Q)BUILD=$(BUILD) tests/bench/run_bench.sh
# make bench-policy: the planners side by side over the GPT and Llama sweep on a100-nvlink and
# a100-pcie, by lynx sim; fails when a target is missed (tests/bench/bench_policy.sh). Then
# the plan's predicted step and peak against what recompute mode achieved, on the demo's job
# at its budgets (tests/bench/bench_predicted.sh; a table, not yet a target).
bench-policy: all
	$(Q)BUILD=$(BUILD) tests/bench/bench_policy.sh
	$(Q)BUILD=$(BUILD) tests/bench/bench_predicted.sh
# make bench-recompute: issue 18's budget sweep on three tinytrain layouts (the demo's pp2 tp2,
# pp4, and MiB-sized activations at simgpu's 2 MiB granule): none, selective, full and Lynx
# at budgets from none's peak down past full's, per rank; fails when a target is missed
# (tests/bench/bench_recompute.sh says which). About 25 minutes on two cores.
bench-recompute: all
	$(Q)BUILD=$(BUILD) tests/bench/bench_recompute.sh
# make fuzz: the readers of untrusted text under libFuzzer with ASan and UBSan, each for
# FUZZ_SECONDS: the profile reader (seeds in tests/fuzz/corpus), the plan reader
# (tests/fuzz/corpus_plan), the LYNX_* settings parser (tests/fuzz/corpus_options), the
# recompute summary reader of lynx report (tests/fuzz/corpus_summary) and the Hugging Face
# config.json reader (tests/fuzz/corpus_hf_config); new inputs go to $(BUILD)/fuzz/corpus*.
# Needs clang with libFuzzer (Debian's clang-14 has it); cJSON itself is the system's,
# uninstrumented.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined
FUZZ_PROFILE := $(BUILD)/fuzz/fuzz_profile
FUZZ_PROFILE_SRC := profiler/profile.c profiler/json_text.c profiler/atomic_file.c \
	profiler/regular_file.c
$(FUZZ_PROFILE): tests/fuzz/fuzz_profile.c $(FUZZ_PROFILE_SRC) profiler/profile.h
	$(call say,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Iprofiler -o $@ tests/fuzz/fuzz_profile.c \
		$(FUZZ_PROFILE_SRC) -lcjson -lm
# The plan reader and what building its problems from a GPT preset needs (no planner, no CBC).
FUZZ_PLAN := $(BUILD)/fuzz/fuzz_plan
FUZZ_PLAN_SRC := policy/plan.c policy/problem.c policy/presets.c policy/model.c \
	policy/layer.c policy/cost.c policy/refuse.c
$(FUZZ_PLAN): tests/fuzz/fuzz_plan.c $(FUZZ_PLAN_SRC) $(wildcard policy/*.h policy/*.def)
	$(call say,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Ipolicy -Iprofiler -Ishim -o $@ tests/fuzz/fuzz_plan.c \
		$(FUZZ_PLAN_SRC) -lcjson -lm
FUZZ_OPTIONS := $(BUILD)/fuzz/fuzz_options
$(FUZZ_OPTIONS): tests/fuzz/fuzz_options.c shim/config.c shim/config.h shim/options.def
	$(call say,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Ishim -o $@ tests/fuzz/fuzz_options.c shim/config.c
FUZZ_SUMMARY := $(BUILD)/fuzz/fuzz_summary
$(FUZZ_SUMMARY): tests/fuzz/fuzz_summary.c tools/report_summary.c tools/report_summary.h
	$(call say,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Itools -o $@ tests/fuzz/fuzz_summary.c \
		tools/report_summary.c -lcjson -lm
# The config.json reader and the layer description it fills (no presets, no planner).
FUZZ_HF_CONFIG := $(BUILD)/fuzz/fuzz_hf_config
FUZZ_HF_CONFIG_SRC := policy/hf_config.c policy/model.c policy/layer.c policy/refuse.c
$(FUZZ_HF_CONFIG): tests/fuzz/fuzz_hf_config.c $(FUZZ_HF_CONFIG_SRC) \
		$(wildcard policy/*.h policy/*.def)
	$(call say,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Ipolicy -o $@ tests/fuzz/fuzz_hf_config.c \
		$(FUZZ_HF_CONFIG_SRC) -lcjson -lm
fuzz: $(FUZZ_PROFILE) $(FUZZ_PLAN) $(FUZZ_OPTIONS) $(FUZZ_SUMMARY) $(FUZZ_HF_CONFIG)
	@mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/corpus_plan $(BUILD)/fuzz/corpus_options \
		$(BUILD)/fuzz/corpus_summary $(BUILD)/fuzz/corpus_hf_config
	$(Q)$(FUZZ_PROFILE) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 \
		-dict=tests/fuzz/profile.dict $(BUILD)/fuzz/corpus tests/fuzz/corpus
	$(Q)$(FUZZ_PLAN) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 \
		-dict=tests/fuzz/plan.dict $(BUILD)/fuzz/corpus_plan tests/fuzz/corpus_plan
	$(Q)$(FUZZ_OPTIONS) -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
		-dict=tests/fuzz/options.dict $(BUILD)/fuzz/corpus_options tests/fuzz/corpus_options
	$(Q)$(FUZZ_SUMMARY) -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
		-dict=tests/fuzz/summary.dict $(BUILD)/fuzz/corpus_summary tests/fuzz/corpus_summary
	$(Q)$(FUZZ_HF_CONFIG) -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
		-dict=tests/fuzz/hf_config.dict $(BUILD)/fuzz/corpus_hf_config \
		tests/fuzz/corpus_hf_config

# ---------------------------------------------------------------------------
# The GPU suite (tests/gpu/, docs/gpu/README.md). make gpu-bundle: a relocatable bundle,
# $(GPU_BUNDLE)/{bin/lynx, bin/vmm_probe, lib/liblynx.so, lib/<what they need that a GPU
# machine lacks>}, found through $$ORIGIN; it travels to the GPU machine as a carried path
# (it is built here: this machine's glibc is older than the GPU machine's, never newer).
# make gpu-test: the suite on a real GPU, from a carried bundle, building nothing (the
# GPU machine has no compiler's dependencies and no network). make gpu-dry: the same
# script on simgpu, with tinytrain in place of the torch trainer (make test runs it).
GPU_BUNDLE := $(BUILD)/gpu
# Libraries of glibc and the toolchain, present on any machine that runs torch.
GPU_BUNDLE_SYSTEM_LIBS := linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread|librt\.so
VMM_PROBE := $(GPU_BUNDLE)/bin/vmm_probe
$(VMM_PROBE): tests/gpu/vmm_probe.c
	$(call say,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 -O2 -g $(WARNINGS) -isystem $(CUDA_HOME)/include $< -o $@ -ldl -lm
$(GPU_BUNDLE)/.stamp: $(LYNX) $(LIBLYNX) $(VMM_PROBE)
	$(call say,BUNDLE,$(GPU_BUNDLE))
	$(Q)mkdir -p $(GPU_BUNDLE)/bin $(GPU_BUNDLE)/lib
	$(Q)cp $(LYNX) $(GPU_BUNDLE)/bin/lynx && cp $(LIBLYNX) $(GPU_BUNDLE)/lib/liblynx.so
	$(Q)for lib in $$(ldd $(LYNX) $(LIBLYNX) $(VMM_PROBE) | awk '$$2 == "=>" && $$3 ~ /^\// {print $$3}' \
		| grep -Ev '/($(GPU_BUNDLE_SYSTEM_LIBS))' | sort -u); do \
		cp -L $$lib $(GPU_BUNDLE)/lib/ || exit 1; done
	$(Q)touch $@
gpu-bundle: $(GPU_BUNDLE)/.stamp
# GPU_TEST_ARGS: more arguments for run.sh, e.g. --deadline 300 when little device time is left.
gpu-test:
	$(Q)tests/gpu/run.sh --bundle $(GPU_BUNDLE) $(GPU_TEST_ARGS)
gpu-dry: build-deps all
	$(Q)tests/gpu/run.sh --simgpu --bundle $(GPU_BUNDLE) --out $(BUILD)/gpu-dry

# Lynx over tinytrain's shapes (schedules, lazy state, DDP buckets, launch APIs, kernel
# modules, streams, layouts: tests/shapes/matrix.py's CELLS), three runs each, with the profile repeated three times on the first cells: the
# table of docs/measurements.md. make test runs its --quick cells.
shapes: build-deps all
	$(Q)tests/shapes/matrix.py --build $(BUILD) --repeat 3 --json $(BUILD)/shapes.json

# Lynx under injected CUDA/NCCL faults: every call the pp2/tp2 job makes under Lynx, failed at
# a spread of its call numbers; each run must train identically or fail as the trainer does
# without Lynx (no crash, hang or wrong result). --quick, 11 points, is the form for make test.
fault-sweep: build-deps all
	$(Q)tests/faults/sweep.py --build $(BUILD) --json $(BUILD)/fault-sweep.json

TESTS := $(SIMGPU_TESTS) $(TT_TESTS) $(SHIM_TESTS) $(TOOLS_TESTS) $(POLICY_TESTS) \
	$(PROFILER_TESTS)
tests: $(TESTS) lynx

# simgpu's tests call simgpu's internal core API as well as the public ones.
$(BUILD)/tests/test_%: $(BUILD)/obj/tests/simgpu/test_%.o | simgpu
	$(call say,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(SIM_PROGRAM_LDFLAGS) -lcmocka -lrt

# ThreadSanitizer sees races between the threads of one process only: its pass runs the tests
# of the code that has threads, simgpu and the shim (the recorder's drain thread, the
# search thread, the executor's streams). The planners', profiler's and tools' code runs on
# one thread; the plain and AddressSanitizer passes run their tests, and test_recompute_targets
# (what plans save and cost) too: its threads are test_executor's.
TESTS_thread := $(SIMGPU_TESTS) $(filter-out %/test_recompute_targets,$(SHIM_TESTS))
test: deps all
	$(Q)BUILD=$(BUILD) SAN=$(SAN) tests/run_tests.sh \
		$(if $(filter thread,$(SAN)),$(TESTS_thread),$(TESTS))

demo: build-deps all
	$(Q)BUILD=$(BUILD) tests/demo.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(LYNX) $(DESTDIR)$(PREFIX)/bin/lynx
	install -m 755 $(LIBLYNX) $(DESTDIR)$(PREFIX)/lib/liblynx.so
	install -d $(DESTDIR)$(PREFIX)/lib/simgpu $(DESTDIR)$(PREFIX)/include/simgpu
	cp -a $(SIMGPU_DIR)/lib* $(DESTDIR)$(PREFIX)/lib/simgpu/
	install -m 644 tests/simgpu/simgpu.h $(DESTDIR)$(PREFIX)/include/simgpu/

clean:
	rm -rf $(BUILD)

# Debian packages: installed only when missing (CI and fresh machines run as root).
define install_missing
	@missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' \
		|| echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing missing packages: $$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq $$missing) >/dev/null \
		|| { echo "error: could not install $$missing" >&2; exit 1; }; \
	fi
endef
# deps: everything the build and the tests need; build-deps: the build's alone (make demo
# and the benchmarks need no browser).
deps:
	$(call install_missing,$(DEB_PACKAGES) $(TEST_DEB_PACKAGES))
build-deps:
	$(call install_missing,$(DEB_PACKAGES))

FORMAT_SRC = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_SRC) && echo "format-check: ok"

# Keep objects that pattern rules build on the way to a test binary.
.SECONDARY:

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
