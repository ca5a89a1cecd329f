# Aside server image: a Debian 12 build stage and a slim Debian 12 runtime
# with only the shared libraries aside-server links (tests/helm checks the
# list below against `ldd build/bin/aside-server`).
#
#   docker build -t aside-server:0.1.0 .
#   docker run --rm -p 50051:50051 -p 9464:9464 aside-server:0.1.0 \
#     aside-server --config /etc/aside/demo.yaml --state-dir /var/lib/aside
#
# The default command reads /etc/aside/aside.yaml (the Helm chart mounts its
# ConfigMap there) and keeps state in /var/lib/aside (a volume).

FROM debian:12 AS build
WORKDIR /src
# The same Debian packages as a developer machine, from the same script.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN ./scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# Configure without tests and benchmarks first; `make build` then only
# builds (it configures only when build/ has no cache yet).
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DASIDE_BUILD_TESTS=OFF -DASIDE_BUILD_BENCH=OFF \
 && make build JOBS="$(nproc)" \
 && strip --strip-debug build/bin/aside-server

FROM debian:12-slim AS runtime
# Runtime libraries only: one package per shared library of aside-server
# (libsqlite3-0 for the state database; sqlite3 for online backups with
# `sqlite3 aside.db ".backup ..."`).
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
# runtime-packages-begin
      libabsl20220623 \
      libc-ares2 \
      libc6 \
      libgcc-s1 \
      libgrpc++1.51 \
      libgrpc29 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libre2-9 \
      libsqlite3-0 \
      libssl3 \
      libstdc++6 \
      libyaml-cpp0.7 \
      zlib1g \
      sqlite3 \
# runtime-packages-end
 && rm -rf /var/lib/apt/lists/*

# A fixed, numeric non-root user (Kubernetes runAsNonRoot can verify it);
# the chart's podSecurityContext uses the same ids.
RUN groupadd --system --gid 10001 aside \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/aside \
      --no-create-home --shell /usr/sbin/nologin aside \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/aside \
 && install -d -m 0755 /etc/aside

COPY --from=build /src/build/bin/aside-server /usr/local/bin/aside-server
COPY --from=build /src/examples/aside.yaml /etc/aside/demo.yaml

USER 10001:10001
WORKDIR /var/lib/aside
VOLUME ["/var/lib/aside"]
# gRPC (Pick, Watch, Admin, grpclb, health, reflection); plaintext health
# for kubelet probes; Prometheus metrics.
EXPOSE 50051 50052 9464
STOPSIGNAL SIGTERM
CMD ["aside-server", "--config", "/etc/aside/aside.yaml", "--state-dir", "/var/lib/aside"]
