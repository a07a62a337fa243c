# sluice — the two commands a newcomer runs:  make demo   and   make test
# Everything else here is a building block of those two.

BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_FUZZ  ?= build-fuzz
JOBS        ?= $(shell nproc)
WERROR      ?= OFF
GENERATOR   := -G Ninja
CMAKE_FLAGS ?=
DEMO_MODEL  ?= models/tiny-next

.PHONY: all deps build asan test test-unit test-asan demo fuzz bench format format-check clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release -DSLUICE_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

asan: deps
	@# The sanitizer build is CPU-only: the Release build already compiles the CUDA backend.
	@cmake -S . -B $(BUILD_ASAN) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=ON \
	  -DSLUICE_BUILD_BENCH=OFF -DSLUICE_CUDA=OFF -DSLUICE_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS) --target sluice_tests sluice

# Every test: unit and oracle suites on the Release build, then the unit tests under ASan+UBSan.
test: build asan
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@# alloc_dealloc_mismatch=0: libstdc++ 12's std::stable_sort temporary buffer pairs operator
	@# new(nothrow) with a sized delete that ASan reports as a mismatch (a library false positive).
	@cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:alloc_dealloc_mismatch=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L unit

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

demo: build
	@scripts/demo.sh $(BUILD)/bin/sluice $(DEMO_MODEL)

# libFuzzer targets (clang): `make fuzz FUZZ_SECONDS=300`.
FUZZ_SECONDS ?= 60
fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(BUILD_FUZZ) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSLUICE_FUZZ=ON -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS)
	@for f in $(BUILD_FUZZ)/bin/*_fuzz; do \
	  name=$$(basename $$f); mkdir -p $(BUILD_FUZZ)/corpus/$$name; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) $(BUILD_FUZZ)/corpus/$$name tests/fuzz/seeds/$$name || exit 1; \
	done

bench: build
	@for b in $(BUILD)/bin/*_bench; do $$b; done

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')
format:
	@clang-format -i $(FORMAT_FILES)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)
