// Every server setting of the config file, declared once, in the order of
// the reference in docs/operations.md ("### Server keys"). A new setting is
// one entry here (and its field in config.h); its parsing, --check-config,
// reload behaviour and reference line follow from the entry.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/ip_network.h"
#include "server/config/setting_kinds.h"

namespace aside::server::setting_kinds {
namespace {

using yaml::JoinPath;

void ReadIdentity(YamlReader& r, const YAML::Node& n, const std::string& path,
                  std::vector<ServerConfig::AdminIdentity>* out) {
  if (!r.CheckMap(n, path, {"identity", "role"})) {
    return;
  }
  if (!n["identity"] || !n["role"]) {
    r.Error(n, path, "needs both 'identity' and 'role'");
    return;
  }
  ServerConfig::AdminIdentity id;
  r.GetString(n["identity"], JoinPath(path, "identity"), &id.identity);
  if (r.GetString(n["role"], JoinPath(path, "role"), &id.role) &&
      id.role != "admin" && id.role != "read" && id.role != "report" &&
      id.role != "self-drain") {
    r.Error(n["role"], JoinPath(path, "role"),
            absl::StrCat("unknown role '", id.role,
                         "' (allowed: admin, read, report, self-drain)"));
  }
  if (id.identity.empty()) {
    r.Error(n["identity"], JoinPath(path, "identity"), "is empty");
  }
  out->push_back(std::move(id));
}

void ReadPeerAddress(YamlReader& r, const YAML::Node& n,
                     const std::string& path, std::vector<std::string>* out) {
  std::string address;
  if (GetAddress(r, n, path, &address, false)) {
    out->push_back(std::move(address));
  }
}

void ReadDnsServer(YamlReader& r, const YAML::Node& n, const std::string& path,
                   std::vector<std::string>* out) {
  std::string server;
  if (!GetAddress(r, n, path, &server, false)) {
    return;
  }
  if (!ParseAddress(server)->is_ip()) {
    r.Error(n, path, "must be an IP address and port");
    return;
  }
  out->push_back(std::move(server));
}

void ReadNetwork(YamlReader& r, const YAML::Node& n, const std::string& path,
                 std::vector<std::string>* out) {
  std::string text;
  if (!r.GetString(n, path, &text)) {
    return;
  }
  if (absl::Status s = ParseNetwork(text).status(); !s.ok()) {
    r.Error(n, path, s.message());
    return;
  }
  out->push_back(std::move(text));
}

bool IsReplicaId(absl::string_view id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                  c == '-' || c == '_' || c == '.';
         });
}

}  // namespace

std::vector<Setting> DeclareServerSettings() {
  constexpr OnReload kLive = OnReload::kLive;
  constexpr OnReload kRestart = OnReload::kRestart;
  std::vector<Setting> out;
  auto add = [&out](std::vector<Setting> list) {
    for (Setting& s : list) {
      out.push_back(std::move(s));
    }
  };
  add({
      AddressSetting(
          "listen", kRestart, /*listen=*/true, /*allow_empty=*/false,
          "gRPC address (`host:port`, `[::]:port`; port 0 picks one)",
          [](auto& c) -> auto& { return c.listen; }),
      AddressSetting(
          "metrics", kRestart, /*listen=*/true, /*allow_empty=*/true,
          "Prometheus `/metrics` address; `\"\"` disables (the status page "
          "too)",
          [](auto& c) -> auto& { return c.metrics; }),
      Bool(
          "status_page.enabled", kRestart,
          "serve the [status page](#the-status-page) (`/` and "
          "`/status.json`) on the metrics port",
          [](auto& c) -> auto& { return c.status_page_enabled; }),
      Duration(
          "status_page.history_interval", kRestart,
          {absl::Seconds(1), absl::Minutes(1)},
          "how often the status page's history samples every group and "
          "backend, 1s..1m; 180 samples are kept, 15 minutes at the "
          "default",
          [](auto& c) -> auto& { return c.status_page_history_interval; }),
      Bool(
          "status_page.require_token", kRestart,
          "`/status.json` needs `Authorization: Bearer <token>` with a token "
          "of `admin.token_file` (any role but `self-drain`); needs "
          "`admin.token_file`",
          [](auto& c) -> auto& { return c.status_page_require_token; }),
      WithDefault(AddressSetting(
                      "health_listen", kRestart, /*listen=*/true,
                      /*allow_empty=*/true,
                      "plaintext address serving only `grpc.health.v1`, "
                      "for kubelet probes when the gRPC port uses TLS; "
                      "`\"\"` also disables",
                      [](auto& c) -> auto& { return c.health_listen; }),
                  "not set (off)"),
      String(
          "state_dir", kRestart, "directory of the SQLite state database",
          [](auto& c) -> auto& { return c.state_dir; }),
      Enum(
          "log_format", kLive, "format", {"text", "json"},
          "`text` (key=value) or `json`",
          [](auto& c) -> auto& { return c.log_format; }),
      Enum(
          "log_level", kLive, "level", {"debug", "info", "warn", "error"},
          "`debug`, `info`, `warn`, `error`",
          [](auto& c) -> auto& { return c.log_level; }),
      Duration(
          "shutdown_grace", kLive, {absl::ZeroDuration(), absl::Hours(24)},
          "longest wait for in-flight calls after SIGTERM/SIGINT, 0..24h",
          [](auto& c) -> auto& { return c.shutdown_grace; }),
  });
  add({
      WithDefault(
          Uint(
              "limits.max_receive_message_bytes", kRestart, 1024, 64 << 20,
              "largest accepted message, 1024..67108864; on a plaintext port "
              "a larger one is refused at its first frame, before gRPC "
              "buffers it ([hardening](hardening.md#oversized-requests))",
              [](auto& c) -> auto& { return c.max_receive_message_bytes; }),
          "`4194304` (4 MiB)"),
      Uint(
          "limits.max_concurrent_streams", kRestart, 1, 100000,
          "concurrent HTTP/2 streams per connection, 1..100000",
          [](auto& c) -> auto& { return c.max_concurrent_streams; }),
      Uint(
          "limits.max_groups", kRestart, 1, 1000000,
          "most groups from all sources, 1..1000000",
          [](auto& c) -> auto& { return c.max_groups; }),
      Duration(
          "limits.watch_stall_timeout", kRestart,
          {absl::Milliseconds(100), absl::Hours(1)},
          "a Watch stream that takes no write for this long is ended "
          "with RESOURCE_EXHAUSTED (the client reconnects), 100ms..1h",
          [](auto& c) -> auto& { return c.watch_stall_timeout; }),
      WithDefault(
          Uint(
              "limits.max_state_bytes", kRestart, 65536, uint64_t{1} << 40,
              "largest size of the state database, 65536..1099511627776 "
              "(1 TiB); mutations past it fail with RESOURCE_EXHAUSTED",
              [](auto& c) -> auto& { return c.max_state_bytes; }),
          "`1073741824` (1 GiB)"),
      Duration(
          "limits.load_window", kRestart,
          {.low = absl::Seconds(1),
           .high = absl::Minutes(10),
           .round_to_seconds = true},
          "load reports (ReportLoad, grpclb ClientStats) are aggregated "
          "over this window, 1s..10m, in whole seconds (rounded down)",
          [](auto& c) -> auto& { return c.load_window; }),
      Duration(
          "limits.handshake_timeout", kRestart,
          {absl::Milliseconds(100), absl::Minutes(10)},
          "a connection that has not sent its first byte, or not "
          "finished its handshake (TLS, HTTP/2 preface and settings), "
          "within this time is closed (gRPC's own default is two "
          "minutes), 100ms..10m; also on the `health_listen` port",
          [](auto& c) -> auto& { return c.handshake_timeout; }),
      Duration(
          "limits.max_connection_age", kRestart,
          {.low = absl::Seconds(1),
           .high = absl::Hours(24 * 7),
           .zero_is_off = true},
          "a connection older than this gets a GOAWAY (±10 % jitter) "
          "and then `max_connection_age_grace` for its calls; Watch "
          "streams are then ended and the stub resumes on a new "
          "connection; 0 (off) or 1s..168h",
          [](auto& c) -> auto& { return c.max_connection_age; }),
      Duration(
          "limits.max_connection_age_grace", kRestart,
          {.low = absl::Milliseconds(100),
           .high = absl::Hours(24),
           .zero_is_off = true},
          "time calls get after that GOAWAY before the connection is "
          "closed; 0 (off) or 100ms..24h",
          [](auto& c) -> auto& { return c.max_connection_age_grace; }),
      Duration(
          "limits.min_ping_interval", kRestart,
          {absl::Milliseconds(100), absl::Hours(2)},
          "shortest interval between a client's PINGs without data that "
          "is not a strike, 100ms..2h",
          [](auto& c) -> auto& { return c.min_ping_interval; }),
      Uint(
          "limits.max_ping_strikes", kRestart, 0, 1000,
          "PINGs sooner than `min_ping_interval` tolerated before GOAWAY "
          "`too_many_pings` and close; `0` = unlimited, 0..1000",
          [](auto& c) -> auto& { return c.max_ping_strikes; }),
      Uint(
          "limits.max_metadata_bytes", kRestart, 1024, 1 << 20,
          "largest request metadata (headers) accepted, 1024..1048576",
          [](auto& c) -> auto& { return c.max_metadata_bytes; }),
      Uint(
          "limits.max_stream_resets", kRestart, 0, 1000000,
          "RST_STREAM frames one client address may send at once on a "
          "plaintext port (each connection its own with "
          "`max_connections_per_peer: 0`), given back at "
          "`stream_resets_per_second`; the next one gets GOAWAY "
          "`ENHANCE_YOUR_CALM` and its connection is closed (rapid reset); "
          "`0` = unlimited, 0..1000000",
          [](auto& c) -> auto& { return c.max_stream_resets; }),
      Uint(
          "limits.stream_resets_per_second", kRestart, 0, 1000000,
          "RST_STREAM frames given back per second to a client address's "
          "(or connection's) `max_stream_resets` budget, 0..1000000",
          [](auto& c) -> auto& { return c.stream_resets_per_second; }),
      WithDefault(
          Uint(
              "limits.max_connections", kRestart, 1, 10000000,
              "connections on the gRPC port at once, waiting and served; not "
              "set: the open-file limit (after the raise at start) less "
              "max(64, limit/8) descriptors kept for probes, the health and "
              "metrics ports and the store; a larger value is lowered to "
              "that at start (logged `event=limits.max_connections_lowered`"
              "), 1..10000000. See \"Connections\"",
              [](auto& c) -> auto& { return c.max_connections; }),
          "open-file limit less a reserve"),
      Uint(
          "limits.max_connections_per_peer", kRestart, 0, 10000000,
          "connections on the gRPC port from one client address (an IPv4 "
          "address; IPv6 by /64); `0` = no cap (behind a proxy or mesh "
          "sidecar every connection has the same address), 0..10000000",
          [](auto& c) -> auto& { return c.max_connections_per_peer; }),
      Uint(
          "limits.max_watch_streams_per_peer", kRestart, 1, 1000000,
          "Watch streams one client IP address may hold open; one more is "
          "answered RESOURCE_EXHAUSTED naming this key (counted in "
          "`aside_limit_refused_total`), 1..1000000",
          [](auto& c) -> auto& { return c.max_watch_streams_per_peer; }),
      Uint(
          "limits.max_balancer_streams_per_peer", kRestart, 1, 1000000,
          "grpclb (BalanceLoad), xDS ADS and LRS streams one client IP "
          "address may hold open, each service counted apart; one more is "
          "answered RESOURCE_EXHAUSTED naming this key (counted in "
          "`aside_limit_refused_total`), 1..1000000",
          [](auto& c) -> auto& { return c.max_balancer_streams_per_peer; }),
      Uint(
          "limits.max_streams_per_peer", kRestart, 0, 10000000,
          "streams of every kind (Watch, ADS, LRS, grpclb, ReportLoad, "
          "LoadView, health Watch and unary calls in flight) one client "
          "address may hold open at once on a plaintext port; one more is "
          "answered RESOURCE_EXHAUSTED naming this key (counted in "
          "`aside_limit_refused_total`); about 20 KiB of memory each; not "
          "applied with `max_connections_per_peer: 0`; `0` = no cap, "
          "0..10000000",
          [](auto& c) -> auto& { return c.max_streams_per_peer; }),
      Uint(
          "limits.max_streams", kRestart, 0, 10000000,
          "streams of every kind open at once on a plaintext port, from all "
          "clients together; one more is answered RESOURCE_EXHAUSTED naming "
          "this key; size it to the pod's memory (about 20 KiB each); "
          "`0` = no cap, 0..10000000",
          [](auto& c) -> auto& { return c.max_streams; }),
  });
  {
    Setting auth = Field(
        "load_reports.auth", kRestart,
        "who may send load reports (ReportLoad, grpclb ClientStats, xDS "
        "LRS): `token` takes them only from a credential with the `report` "
        "or `admin` role; `open` from anyone who reaches the port. See "
        "\"Load reports\"",
        [](auto& c) -> auto& { return c.load_reports_open; });
    auth.default_text = Code(Defaults().load_reports_open ? "open" : "token");
    auth.read = [](YamlReader& r, const YAML::Node& n, ServerConfig* c) {
      std::string mode;
      if (!r.GetString(n, "load_reports.auth", &mode)) {
        return;
      }
      if (mode != "open" && mode != "token") {
        r.Error(
            n, "load_reports.auth",
            absl::StrCat("unknown mode '", mode, "' (allowed: token, open)"));
        return;
      }
      c->load_reports_open = mode == "open";
    };
    out.push_back(std::move(auth));
  }
  add({
      List(
          "load_reports.trusted_networks", kRestart,
          "expected a list of networks (\"10.0.0.0/8\")",
          "with `auth: token`: callers without a credential whose address "
          "is in one of these networks (CIDR: `10.8.0.0/14`, `fd00::/8`, or "
          "one address) may report too, each host a source of its own; for "
          "stock clients that carry no credential (grpc-js's LRS)",
          [](auto& c) -> auto& { return c.load_reports_trusted_networks; },
          ReadNetwork),
      Double(
          "load_reports.max_reporter_share", kRestart, 0.01, 1,
          "most weight one reporter (credential) carries in a backend's "
          "load estimate, 0.01..1",
          [](auto& c) -> auto& { return c.load_reports_max_reporter_share; }),
      Uint(
          "health.max_concurrent_probes", kRestart, 1, 100000,
          "global cap on probes in flight, 1..100000",
          [](auto& c) -> auto& { return c.max_concurrent_probes; }),
      Duration(
          "health.merge_window", kRestart,
          {absl::ZeroDuration(), absl::Seconds(10)},
          "health flips within this window go out as one table update, "
          "0..10s",
          [](auto& c) -> auto& { return c.health_merge_window; }),
      Duration(
          "publication.window", kRestart,
          {absl::ZeroDuration(), absl::Milliseconds(50)},
          "publications of one group within this window reach Watch, "
          "xDS and grpclb subscribers as one update, the first after a "
          "quiet window at once; picks see every publication at once. "
          "0..50ms, `0s` sends each. See \"Sizing the publication "
          "window\"",
          [](auto& c) -> auto& { return c.publish_window; }),
      String(
          "admin.token_file", kRestart,
          "token file: lines `TOKEN ROLE [NAME]`, role `admin`, `read`, "
          "`report` or `self-drain` (DrainBackends of the caller's own IP "
          "only), `#` comments; NAME (1..64 of `[A-Za-z0-9._:@-]`, "
          "default `token:<line>`) names the credential in load-report "
          "metrics",
          [](auto& c) -> auto& { return c.admin_token_file; }),
      Uint(
          "admin.max_queued_writes", kRestart, 1, 1000000,
          "Admin writes waiting for a worker before new ones are refused "
          "with `RESOURCE_EXHAUSTED` and a retry hint, 1..1000000",
          [](auto& c) -> auto& { return c.admin_max_queued_writes; }),
      Duration(
          "admin.max_write_wait", kRestart,
          {absl::Milliseconds(1), absl::Minutes(1)},
          "longest the oldest waiting Admin write may wait before new "
          "ones are refused, 1ms..1m",
          [](auto& c) -> auto& { return c.admin_max_write_wait; }),
      List(
          "admin.allowed_identities", kRestart,
          "expected a list of {identity, role}",
          "`{identity, role}` entries: a verified mTLS client identity (URI "
          "or DNS SAN, or CN) and its role",
          [](auto& c) -> auto& { return c.admin_identities; }, ReadIdentity),
      WithDefault(String(
                      "tls.cert_file", kRestart,
                      "server certificate chain, PEM; goes with `key_file`",
                      [](auto& c) -> auto& { return c.tls_cert_file; }),
                  "not set (plaintext)"),
      String(
          "tls.key_file", kRestart, "server private key, PEM",
          [](auto& c) -> auto& { return c.tls_key_file; }),
      String(
          "tls.client_ca_file", kRestart,
          "CA bundle; when set, client certificates are verified",
          [](auto& c) -> auto& { return c.tls_client_ca_file; }),
      Bool(
          "tls.require_client_cert", kRestart,
          "refuse clients without a certificate (needs `client_ca_file`)",
          [](auto& c) -> auto& { return c.tls_require_client_cert; }),
      String(
          "session_key_file", kRestart,
          "key signing `sticky` session tokens (at least 16 bytes); not "
          "set: a random key kept in the store (with SQLite, different per "
          "replica; with etcd, one for the fleet, created by the first "
          "replica)",
          [](auto& c) -> auto& { return c.session_key_file; }),
  });
  {
    Setting prefix = String(
        "store.etcd.prefix", kRestart,
        "key prefix (must end with `/`); fleets sharing an etcd use "
        "different prefixes",
        [](auto& c) -> auto& { return c.store.prefix; });
    prefix.read = [](YamlReader& r, const YAML::Node& n, ServerConfig* c) {
      std::string p;
      if (!r.GetString(n, "store.etcd.prefix", &p)) {
        return;
      }
      if (p.empty() || p.back() != '/') {
        r.Error(n, "store.etcd.prefix", "must be non-empty and end with '/'");
        return;
      }
      c->store.prefix = std::move(p);
    };
    Setting endpoints = List(
        "store.etcd.endpoints", kRestart,
        "expected a list of \"host:port\" (at least one)",
        "etcd members' client addresses, `host:port`",
        [](auto& c) -> auto& { return c.store.endpoints; }, ReadPeerAddress);
    endpoints.default_text = "— (required for etcd)";
    const DurationRange etcd_timeout{absl::Milliseconds(10), absl::Minutes(5)};
    add(ReportedAs(
        "store",
        {
            Enum(
                "store.type", kRestart, "store", {"sqlite", "etcd"},
                "where Admin-created groups live: `sqlite` (the state "
                "directory, one replica) or `etcd` (the fleet's)",
                [](auto& c) -> auto& { return c.store.type; }),
            std::move(endpoints),
            std::move(prefix),
            String(
                "store.etcd.ca_file", kRestart,
                "CA bundle verifying the members (TLS); without it, "
                "plaintext unless `cert_file` is set (then the system "
                "roots)",
                [](auto& c) -> auto& { return c.store.ca_file; }),
            String(
                "store.etcd.cert_file", kRestart,
                "client certificate for mutual TLS; goes with `key_file`",
                [](auto& c) -> auto& { return c.store.cert_file; }),
            String(
                "store.etcd.key_file", kRestart,
                "client key for mutual TLS; goes with `cert_file`",
                [](auto& c) -> auto& { return c.store.key_file; }),
            String(
                "store.etcd.credentials_file", kRestart,
                "one line `username:password` for etcd authentication",
                [](auto& c) -> auto& { return c.store.credentials_file; }),
            Duration(
                "store.etcd.dial_timeout", kRestart, etcd_timeout,
                "how long a call waits for one member's connection "
                "before trying the next, 10ms..5m",
                [](auto& c) -> auto& { return c.store.dial_timeout; }),
            Duration(
                "store.etcd.request_timeout", kRestart, etcd_timeout,
                "deadline of each etcd call, failover included, "
                "10ms..5m",
                [](auto& c) -> auto& { return c.store.request_timeout; }),
            Enum(
                "store.etcd.endpoint_order", kRestart, "order",
                {"spread", "listed"},
                "which member a replica asks first: `spread` (the one at "
                "hash(host name, process id) mod the number of endpoints, so "
                "replicas spread over the members) or `listed` (the first "
                "one listed)",
                [](auto& c) -> auto& { return c.store.endpoint_order; }),
            Duration(
                "store.etcd.keepalive_time", kRestart, etcd_timeout,
                "HTTP/2 pings on the connections to the members, "
                "10ms..5m; etcd closes the connection of a client "
                "pinging more often than its "
                "`--grpc-keepalive-min-time` (default 5 s)",
                [](auto& c) -> auto& { return c.store.keepalive_time; }),
            Duration(
                "store.etcd.keepalive_timeout", kRestart, etcd_timeout,
                "how long a ping's answer may take before the "
                "connection is dropped, 10ms..5m",
                [](auto& c) -> auto& { return c.store.keepalive_timeout; }),
        }));
  }
  {
    Setting replica_id = WithDefault(
        String(
            "fleet.replica_id", kRestart,
            "with the etcd store: this replica's member id, 1..64 of "
            "`[A-Za-z0-9._-]`; not set: 16 random hex digits per process "
            "start",
            [](auto& c) -> auto& { return c.fleet.replica_id; }),
        "random");
    replica_id.read = [](YamlReader& r, const YAML::Node& n, ServerConfig* c) {
      std::string id;
      if (!r.GetString(n, "fleet.replica_id", &id)) {
        return;
      }
      if (!IsReplicaId(id)) {
        r.Error(n, "fleet.replica_id",
                "expected 1..64 characters of [A-Za-z0-9._-]");
        return;
      }
      c->fleet.replica_id = std::move(id);
    };
    add(ReportedAs(
        "fleet",
        {
            Duration(
                "fleet.member_ttl", kRestart,
                {.low = absl::Seconds(1),
                 .high = absl::Minutes(5),
                 .whole_seconds = true},
                "with the etcd store: the TTL of the lease this "
                "replica's member key is bound to (how long a dead "
                "replica stays a member), 1s..5m in whole seconds",
                [](auto& c) -> auto& { return c.fleet.member_ttl; }),
            std::move(replica_id),
            WithDefault(
                AddressSetting(
                    "fleet.advertise_address", kRestart, /*listen=*/false,
                    /*allow_empty=*/true,
                    "with the etcd store: `host:port` at which other "
                    "replicas dial this one's gRPC listener; not set: "
                    "`listen` with a wildcard host (`0.0.0.0`, `::`) "
                    "replaced by `127.0.0.1` and the bound port",
                    [](auto& c) -> auto& { return c.fleet.advertise_address; }),
                "listen address"),
            List(
                "fleet.peers", kRestart, "expected a list of \"host:port\"",
                "replicas (`host:port` of their gRPC port) whose load views "
                "this one merges, for fleets without the etcd membership; "
                "this replica's own address may be in the list (it is "
                "recognised and skipped). See \"One load view across the "
                "fleet\"",
                [](auto& c) -> auto& { return c.fleet_load.peers; },
                ReadPeerAddress),
            Duration(
                "fleet.load_share_interval", kRestart,
                {absl::Milliseconds(50), absl::Minutes(1)},
                "how often a replica sends its peers what changed in "
                "its load aggregates, 50ms..1m; a peer silent for 5 "
                "intervals stops counting",
                [](auto& c) -> auto& {
                  return c.fleet_load.load_share_interval;
                }),
            String(
                "fleet.peer_token_file", kRestart,
                "file whose first line is the bearer token this replica "
                "shows its peers (a `report` credential in their "
                "`admin.token_file`); not needed with `load_reports.auth: "
                "open` or mTLS identities",
                [](auto& c) -> auto& { return c.fleet_load.peer_token_file; }),
        }));
  }
  add({
      List(
          "discovery.dns_servers", kRestart, "expected a list of \"ip:port\"",
          "DNS servers (`ip:port`) for DNS discovery; empty uses "
          "`/etc/resolv.conf`",
          [](auto& c) -> auto& { return c.dns_servers; }, ReadDnsServer),
      Duration(
          "grpclb.client_stats_report_interval", kRestart,
          {absl::Seconds(1), absl::Hours(1)},
          "how often grpclb clients report call statistics, 1s..1h",
          [](auto& c) -> auto& {
            return c.grpclb_client_stats_report_interval;
          }),
      Uint(
          "grpclb.max_servers", kRestart, 1, 100000,
          "most backends in one grpclb ServerList, 1..100000",
          [](auto& c) -> auto& { return c.grpclb_max_servers; }),
      Bool(
          "config_reload.watch", kLive,
          "follow the config file's content and reload it when it changes "
          "(SIGHUP reloads it either way)",
          [](auto& c) -> auto& { return c.reload_watch; }),
      Duration(
          "config_reload.interval", kLive,
          {absl::Milliseconds(100), absl::Hours(1)},
          "how often the file's content is checked, 100ms..1h; also how "
          "often the TLS files are checked (rounded up to whole "
          "seconds, fixed at start)",
          [](auto& c) -> auto& { return c.reload_interval; }),
  });
  Setting groups;
  groups.key = "groups";
  groups.reported_as = "groups";
  groups.on_reload = kLive;
  groups.default_text = Code("[]");
  groups.doc = "the groups, below";
  groups.same = [](const ServerConfig& a, const ServerConfig& b) {
    return a.groups == b.groups;
  };
  groups.adopt = [](const ServerConfig& from, ServerConfig* to) {
    to->groups = from.groups;
    to->group_lines = from.group_lines;
  };
  out.push_back(std::move(groups));
  return out;
}

}  // namespace aside::server::setting_kinds
