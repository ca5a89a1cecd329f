# Warnings and sanitizers for the project's own targets, and the helpers that
# declare tests and benchmarks.

add_library(aside_warnings INTERFACE)
target_compile_options(aside_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wsign-compare
  # Designated initializers that leave fields at their defaults are idiomatic.
  -Wno-missing-field-initializers
  # Every clang build checks the locking annotations (ABSL_GUARDED_BY and the like)
  # as it compiles; `make thread-safety` checks what no clang build compiled.
  $<$<CXX_COMPILER_ID:Clang>:-Wthread-safety>
  $<$<BOOL:${ASIDE_WERROR}>:-Werror>)

# RelWithDebInfo (the default of `make build` and `make test`) with line
# tables only (-g1): backtraces, profiles and sanitizer reports keep
# function names, files and lines, and every translation unit compiles in
# about 0.7x the time of full debug info (-g), which is most of a fresh
# build. -DASIDE_FULL_DEBUG_INFO=ON keeps -g, for a debugger that reads
# variables.
option(ASIDE_FULL_DEBUG_INFO "RelWithDebInfo with full debug info (-g)" OFF)
if(NOT ASIDE_FULL_DEBUG_INFO)
  foreach(lang C CXX)
    string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2"
      CMAKE_${lang}_FLAGS_RELWITHDEBINFO "${CMAKE_${lang}_FLAGS_RELWITHDEBINFO}")
  endforeach()
endif()

# LLVM's linker where it is installed (Debian's lld; scripts/install-deps.sh
# installs it): it links the ASan build's 450 MB server_test in 0.26x the
# wall time of the default linker (4.1 s against 15.9 s). -DASIDE_LLD=OFF
# keeps the default.
option(ASIDE_LLD "Link with lld when it is installed" ON)
if(ASIDE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld ASIDE_HAVE_LLD)
  if(ASIDE_HAVE_LLD)
    add_link_options(-fuse-ld=lld)
  endif()
endif()

# Sanitizers apply to every target (third-party code is prebuilt and not
# instrumented; TSan suppressions for it live in tests/tsan.supp).
if(ASIDE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ASIDE_FUZZ needs clang (libFuzzer)")
  endif()
  # Coverage for libFuzzer in every project object; the fuzz targets link
  # the fuzzer itself (tests/fuzz).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(ASIDE_SANITIZE)
  add_compile_options(-fsanitize=${ASIDE_SANITIZE} -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${ASIDE_SANITIZE})
  if(ASIDE_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
  # The instrumentation changes GCC's flow analysis: -Wmaybe-uninitialized
  # then fires inside Boost.Beast's parser headers, where the optimised
  # build proves the value is set. Still shown, no longer fatal.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-error=maybe-uninitialized)
  endif()
  if(ASIDE_SANITIZE MATCHES "thread")
    # GCC warns that TSan does not model atomic_thread_fence (used inside
    # Boost.Asio); the warning is about the tool, not the code.
    add_compile_options(-Wno-error=tsan)
  endif()
endif()

# aside_sanitizer_options(target): in sanitizer builds, compiles the default
# sanitizer options (suppression files for Debian's uninstrumented
# libraries) into an executable.
function(aside_sanitizer_options target)
  if(ASIDE_SANITIZE)
    target_sources(${target} PRIVATE
                   ${PROJECT_SOURCE_DIR}/cmake/sanitizer_options.cc)
    target_compile_definitions(${target} PRIVATE
      ASIDE_SUPPRESSIONS_DIR="${PROJECT_SOURCE_DIR}/tests")
  endif()
endfunction()

include(GoogleTest)

# Tests compile in about half the time of the code they test: a test's own
# code is optimised for debugging (-Og in the RelWithDebInfo build; the
# libraries it links keep -O2), and gtest, gmock and gRPC's headers are
# parsed once per build, into one precompiled header (made with
# aside_testing, tests/CMakeLists.txt) that every test binary reuses: a
# header precompiled per binary costs about what it saves in a binary of
# one or two files. ASIDE_PCH turns it off (the clang configuration of the
# static checks does, as they read compile commands without building).
option(ASIDE_PCH "Precompiled headers for the test binaries" ON)
set(ASIDE_TEST_OPTIMIZE $<$<CONFIG:RelWithDebInfo>:-Og>)
set(ASIDE_TEST_PCH_HEADERS <gtest/gtest.h> <gmock/gmock.h> <grpcpp/grpcpp.h>)

# aside_test_build_options(target [headers...]): the above for a test
# target. With `headers` the target makes a precompiled header of its own
# that adds them (for a binary of many sources most of which include them),
# else it reuses the shared one.
function(aside_test_build_options target)
  target_compile_options(${target} PRIVATE ${ASIDE_TEST_OPTIMIZE})
  if(NOT ASIDE_PCH)
    return()
  endif()
  if(ARGN)
    target_precompile_headers(${target} PRIVATE ${ASIDE_TEST_PCH_HEADERS}
                              ${ARGN})
  else()
    target_precompile_headers(${target} REUSE_FROM aside_testing)
  endif()
endfunction()

# Every test labelled "unit" (fast, hermetic, no external peer or binary):
# `make test-unit` builds only these and runs `ctest -L unit`, which is what
# the sanitizer run in CI covers.
add_custom_target(aside_unit_tests)

# aside_add_test(NAME name SOURCES files... [DEPS targets...]
#                [LABELS unit|integration] [TIMEOUT seconds] [PCH headers...])
function(aside_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS;PCH" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} aside_testing
                        GTest::gmock_main aside_warnings)
  aside_sanitizer_options(${T_NAME})
  aside_test_build_options(${T_NAME} ${T_PCH})
  gtest_discover_tests(${T_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
  if("unit" IN_LIST T_LABELS)
    add_dependencies(aside_unit_tests ${T_NAME})
  endif()
endfunction()

# aside_add_bench(NAME name SOURCES files... [DEPS targets...])
# Builds a Google Benchmark binary and registers a short smoke run labelled
# "bench" (excluded from the default test run).
function(aside_add_bench)
  cmake_parse_arguments(B "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${B_NAME} ${B_SOURCES})
  target_link_libraries(${B_NAME} PRIVATE ${B_DEPS} benchmark::benchmark
                        aside_warnings)
  add_test(NAME ${B_NAME}_smoke
           COMMAND ${B_NAME} --benchmark_min_time=0.001)
  set_tests_properties(${B_NAME}_smoke PROPERTIES LABELS bench TIMEOUT 600)
endfunction()
