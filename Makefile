# Front door: `make demo`, `make test`, `make bench`. Each installs missing
# Debian packages, configures and builds with the CMake presets.
MAKEFLAGS += --no-print-directory
PRESET ?= default
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD := build/$(PRESET)
SEEDS ?= 1000
START ?= 1

.PHONY: all deps configure build demo test bench bench-compare fuzz asan tsan clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

demo: build
	@$(BUILD)/tools/tessera demo

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

bench: build
	@mkdir -p $(BUILD)/bench-results
	@$(BUILD)/bench/bench_reshard --json $(BUILD)/bench-results/reshard.json
	@$(BUILD)/bench/bench_ops --json $(BUILD)/bench-results/ops.json
	@$(BUILD)/bench/bench_collectives --json $(BUILD)/bench-results/collectives.json

# Random sharded programs, each compared with the same program on one device
# (tests/fuzz). Prints the seed and listing of any failure and exits non-zero;
# `tessera_fuzz --seed S --verbose` replays one.
fuzz: configure
	@cmake --build --preset $(PRESET) -j $(JOBS) --target tessera_fuzz
	@TESSERA_NUM_CPU_DEVICES=8 $(BUILD)/tests/tessera_fuzz --seeds $(SEEDS) --start $(START)

# Tessera and JAX side by side (JAX for CPU from PyPI into build/, only here).
bench-compare: build
	@bash bench/compare/run.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory test PRESET=asan

tsan:
	@$(MAKE) --no-print-directory test PRESET=tsan

clean:
	@rm -rf build
