# Aside: the two quick-start commands are `make run` and `make test`.
#
#   make build                    install dependencies, build (build/bin/)
#   make run                      build and run the server on the demo config
#                                 (Admin token in var/demo-admin-token)
#   make test                     build and run every test through ctest
#   make test SANITIZE=address,undefined   (or SANITIZE=thread)
#   make test-unit                build and run only the tests labelled unit
#                                 (with SANITIZE=... too; CI runs it under
#                                 ASan+UBSan)
#   make bench                    Release build, run every benchmark and the
#                                 balancing arena; JSON and the target summary
#                                 in build/bench/ (BENCH_QUICK=1: ~2 minutes;
#                                 BENCH_ARGS="--only arena" runs one part)
#   make format                   clang-format the sources
#   make fuzz                     clang + libFuzzer + ASan/UBSan build in
#                                 build-fuzz, then every fuzz target for
#                                 FUZZ_SECONDS (30) each (tests/fuzz;
#                                 FUZZ_TARGETS="duration_fuzz" runs one)
#
# Checks (CI runs them all; see .ci/run):
#   make thread-safety            clang's -Wthread-safety over every project
#                                 translation unit, as errors (no linking)
#   make format-check             clang-format --dry-run -Werror
#   make check-no-fetch           no dependency is downloaded at build time
#   make tidy                     clang-tidy with the root .clang-tidy

JOBS ?= 2
SANITIZE ?=
CMAKE ?= cmake
CTEST_ARGS ?=
# The chart tests need Go (installed by scripts/install-deps.sh).
CHART_TESTS ?= ON

# Sanitizer builds use clang: an ASan+UBSan Debug object compiles in about
# half GCC's time, and every clang build runs the thread-safety analysis as
# part of its warnings (cmake/AsideHelpers.cmake). SANITIZE_CXX=g++ builds
# with GCC instead (in its own directory).
SANITIZE_CXX ?= clang++
ifeq ($(SANITIZE),)
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
COMPILER_ARGS ?=
else
BUILD_DIR ?= build-$(subst ++,,$(SANITIZE_CXX))-$(subst $(comma),-,$(SANITIZE))
BUILD_TYPE ?= Debug
COMPILER_ARGS ?= -DCMAKE_CXX_COMPILER=$(SANITIZE_CXX) \
  -DCMAKE_C_COMPILER=$(if $(filter clang%,$(SANITIZE_CXX)),clang,gcc)
endif
comma := ,

FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_TARGETS ?=

BENCH_DIR ?= build-release
BENCH_ARGS ?=
# The static checks read compile commands from a clang configuration of the
# whole tree (benchmarks included) in which only the generated headers are
# built: no full build is needed.
CHECK_DIR ?= build-clang

# The project's own C++ sources (tracked files only; generated code lives in
# the build directory).
SOURCES = $(shell git ls-files -- '*.h' '*.cc' | grep -E '^(lib|server|client|tools|tests|bench|proto|examples|cmake)/')

.PHONY: all deps configure build run test test-unit bench format fuzz \
        format-check check-generated thread-safety check-no-fetch tidy clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	$(CMAKE) -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DASIDE_SANITIZE=$(SANITIZE) \
	  -DASIDE_BUILD_CHART_TESTS=$(CHART_TESTS) $(COMPILER_ARGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

# The demo opens Admin with a token of its own, made once in
# var/demo-admin-token (asidectl --token-file var/demo-admin-token, or
# export ASIDE_TOKEN_FILE=var/demo-admin-token). Configs meant for
# production name no token file, so Admin stays closed there until an
# operator names one.
DEMO_TOKEN = var/demo-admin-token

run: build
	mkdir -p var
	@test -s $(DEMO_TOKEN) || (umask 077 && \
	  echo "$$(openssl rand -hex 24) admin" > $(DEMO_TOKEN))
	@echo "make run: Admin token in $(DEMO_TOKEN): export ASIDE_TOKEN_FILE=$(DEMO_TOKEN)"
	@echo "make run: status page at http://localhost:9464/"
	$(BUILD_DIR)/bin/aside-server --config examples/aside.yaml --state-dir var \
	  --admin-token-file $(DEMO_TOKEN)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE bench \
	  --timeout 600 $(CTEST_ARGS)

# The fuzz build instruments everything for coverage and sanitizers; only
# the fuzz targets and what they link are built.
fuzz: deps
	$(CMAKE) -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DASIDE_SANITIZE=address,undefined -DASIDE_FUZZ=ON \
	  -DASIDE_BUILD_TESTS=OFF -DASIDE_WERROR=OFF
	$(CMAKE) --build $(FUZZ_DIR) -j $(JOBS) --target aside_fuzzers
	./scripts/run-fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

test-unit: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target aside_unit_tests
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L unit \
	  --timeout 600 $(CTEST_ARGS)

bench: deps
	$(CMAKE) -S . -B $(BENCH_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DASIDE_BUILD_TESTS=OFF -DASIDE_BUILD_BENCH=ON
	$(CMAKE) --build $(BENCH_DIR) -j $(JOBS)
	./bench/run.sh $(BENCH_DIR) $(BENCH_ARGS)

format:
	clang-format -i $(SOURCES)

format-check:
	clang-format --dry-run -Werror $(SOURCES)

$(CHECK_DIR)/CMakeCache.txt: | deps
	$(CMAKE) -S . -B $(CHECK_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DASIDE_BUILD_BENCH=ON -DASIDE_BUILD_CHART_TESTS=OFF -DASIDE_PCH=OFF

# The protobuf headers the sources include (protoc only, seconds).
check-generated: deps $(CHECK_DIR)/CMakeCache.txt
	ninja -C $(CHECK_DIR) build.ninja  # regenerated first: lists new protos
	ninja -C $(CHECK_DIR) $$(ninja -C $(CHECK_DIR) -t targets all \
	  | grep -oE '^[^/:][^:]*\.pb\.h' | grep -v CMakeFiles | sort -u)

# THREAD_SAFETY_ARGS="--except-built DIR:TARGET" leaves out what a clang
# build of TARGET in DIR has compiled (with the analysis as an error).
THREAD_SAFETY_ARGS ?=
thread-safety: check-generated
	./scripts/check-thread-safety.py $(CHECK_DIR) --jobs $(JOBS) \
	  $(THREAD_SAFETY_ARGS)

check-no-fetch:
	./scripts/check-no-fetch.sh

tidy: check-generated
	./scripts/run-tidy.sh $(CHECK_DIR) $(JOBS)

clean:
	rm -rf build build-* var
