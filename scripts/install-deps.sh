#!/usr/bin/env bash
# Installs every Debian package Aside needs to build, test and benchmark.
# Idempotent and non-interactive: does nothing when everything is present.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # gRPC, protobuf, abseil
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libprotoc-dev
  libabsl-dev grpc-proto
  # server dependencies
  libboost-dev prometheus-cpp-dev libyaml-cpp-dev libsqlite3-dev
  zlib1g-dev libssl-dev
  # DNS discovery (also a dependency of libgrpc++-dev)
  libc-ares-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # reference peers used by the tests
  nginx-light dnsmasq-base python3-grpcio curl
  # HTTP/2 abuse tests (tests/abuse): raw frames and HPACK
  python3-h2
  # the status page's browser test (headless)
  chromium
  # the fleet store's etcd (server for the tests, etcdctl as their oracle)
  etcd-server etcd-client
  # dashboard and alert tests (tests/prometheus): a real Prometheus server
  # scraping aside-server, and promtool for the rule files
  prometheus
  # chart tests (tests/helm): Helm's template engine built from Debian's Go
  # packages (sprig pulls in its own dependencies), YAML checks, test certs
  golang-go golang-github-masterminds-sprig-dev golang-github-ghodss-yaml-dev
  python3-yaml openssl
  # checks (make thread-safety, format-check, tidy): clang's thread-safety
  # analysis, clang-format, clang-tidy
  clang clang-format clang-tidy
  # the linker (cmake/AsideHelpers.cmake: ASIDE_LLD)
  lld
  # fuzzing (make fuzz) and the sanitizer builds (clang): libFuzzer and
  # clang's sanitizer runtimes
  libfuzzer-14-dev libclang-rt-14-dev
)

# The current stock xDS client of the tests (tests/xds/node): Node.js with
# npm. The machine image may bring its own Node.js; Debian's is used only
# where there is none.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages, pinned by the lockfile (@grpc/grpc-js and
# @grpc/grpc-js-xds 1.14 for the xDS tests), into tests/xds/node. `npm ci`
# runs again only when the lockfile changed since the last install.
node_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/xds/node"
stamp="$node_dir/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$node_dir/package-lock.json" -nt "$stamp" ]; then
  echo "install-deps: npm ci in tests/xds/node" >&2
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
