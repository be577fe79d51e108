# normlab: the two commands of the README, and a few more.
#   make run    builds, then runs experiments/bwd_sweep.lua (GPU when present, else CPU)
#   make test   builds, then runs every spec under Lua 5.4 and LuaJIT, and again against
#               an AddressSanitizer/UBSan build of the core
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ARGS ?=
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
# Specs tagged #cuda need a GPU; without one they are excluded. The #slurm spec (a one-node
# Slurm cluster on localhost, tools/slurm/local-cluster.sh; pending, with the reason, where it
# cannot start) tests scripts and the executable, not a binding: it runs once, in test-c.
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
comma := ,
BUSTED_EXCLUDE := $(if $(HAVE_GPU),,--exclude-tags=cuda)
BUSTED_EXCLUDE_SLURM := --exclude-tags=$(if $(HAVE_GPU),,cuda$(comma))slurm
ASAN_LIB := $(shell gcc -print-file-name=libasan.so 2>/dev/null)

.PHONY: all deps build build-asan run test test-c test-ffi test-asan bench list clean

all: build

deps:
	@tools/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNL_SANITIZE=ON -DNL_CUDA=OFF

build-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)

run: build
	$(BUILD)/normlab experiments/bwd_sweep.lua $(ARGS)

list: build
	$(BUILD)/normlab --list

test: test-c test-ffi test-asan

test-c: build
	NORMLAB_BUILD=$(BUILD) busted $(BUSTED_EXCLUDE)

test-ffi: build
	NORMLAB_BUILD=$(BUILD) busted --lua=luajit $(BUSTED_EXCLUDE_SLURM)

# The interpreter is not instrumented, so the sanitizer runtime is preloaded. Leak checks are
# off: the interpreter keeps its own allocations until exit.
test-asan: build-asan
	NORMLAB_BUILD=$(ASAN_BUILD) LD_PRELOAD=$(ASAN_LIB) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 busted --lua=lua5.4 --exclude-tags=cuda,slow,slurm

bench: build
	$(BUILD)/normlab experiments/bwd_sweep.lua $(ARGS)
	$(BUILD)/normlab experiments/fwd_sweep.lua $(ARGS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
