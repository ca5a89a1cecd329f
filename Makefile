# Aside: the two quick-start commands are `make run` and `make test`.
#
#   make build                    install dependencies, build (build/bin/)
#   make run                      build and run the server on the demo config
#   make test                     build and run every test through ctest
#   make test SANITIZE=address,undefined   (or SANITIZE=thread)
#   make bench                    Release build, run every benchmark and the
#                                 balancing lab; JSON and the target summary
#                                 in build/bench/ (BENCH_QUICK=1: ~2 minutes;
#                                 BENCH_ARGS="--only lab" runs one part)
#   make format                   clang-format the sources

JOBS ?= 2
SANITIZE ?=
CMAKE ?= cmake
CTEST_ARGS ?=
# The chart tests need Go (installed by scripts/install-deps.sh).
CHART_TESTS ?= ON

ifeq ($(SANITIZE),)
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
else
BUILD_DIR ?= build-$(subst $(comma),-,$(SANITIZE))
BUILD_TYPE ?= Debug
endif
comma := ,

BENCH_DIR ?= build-release
BENCH_ARGS ?=

.PHONY: all deps configure build run test bench format clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	$(CMAKE) -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DASIDE_SANITIZE=$(SANITIZE) \
	  -DASIDE_BUILD_CHART_TESTS=$(CHART_TESTS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

run: build
	mkdir -p var
	$(BUILD_DIR)/bin/aside-server --config examples/aside.yaml --state-dir var

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE bench \
	  --timeout 600 $(CTEST_ARGS)

bench: deps
	$(CMAKE) -S . -B $(BENCH_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DASIDE_BUILD_TESTS=OFF -DASIDE_BUILD_BENCH=ON
	$(CMAKE) --build $(BENCH_DIR) -j $(JOBS)
	./bench/run.sh $(BENCH_DIR) $(BENCH_ARGS)

format:
	find lib server client tests bench proto -name '*.h' -o -name '*.cc' \
	  | xargs clang-format -i

clean:
	rm -rf build build-* var
