# Every third-party package Aside uses, all from Debian 12 packages installed by
# scripts/install-deps.sh. Only find_package: nothing is downloaded or vendored.
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED)
if(ASIDE_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(ASIDE_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()

# Protos shipped by Debian's grpc-proto package (grpc.health.v1, grpc.lb.v1).
set(ASIDE_GRPC_PROTO_DIR /usr/share/grpc-proto CACHE PATH
    "Directory holding grpc/health/v1/health.proto")
if(NOT EXISTS ${ASIDE_GRPC_PROTO_DIR}/grpc/health/v1/health.proto)
  message(FATAL_ERROR "grpc/health/v1/health.proto not found under "
                      "${ASIDE_GRPC_PROTO_DIR}; run scripts/install-deps.sh")
endif()
