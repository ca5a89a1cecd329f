// The server's YAML configuration file.
//
// Every error names file:line:column and the key path, for example
//   aside.yaml:12:15: groups[0].backends[1].weight: 20000 out of range
//   0..10000
// and loading fails before anything binds a port. Unknown keys are errors.
//
// Groups go YAML -> aside.v1.Group (the shorthand converter shared with
// asidectl, proto/yaml/group_yaml.h) -> GroupSpec (GroupSpecFromProto, the
// Admin API's path) -> ValidateGroupSpec; a validation error's field path
// is mapped back to the line that wrote the field. Durations are read with
// lib/duration.h's ParseDurationText.
#ifndef ASIDE_SERVER_CONFIG_CONFIG_H_
#define ASIDE_SERVER_CONFIG_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/duration.h"
#include "server/schema/group_spec.h"

namespace aside::server {

// Where Admin-created groups, the generation floor and the session key live
// (server/store/store.h): `sqlite` (the default, one replica's file under
// state_dir) or `etcd` (shared by the fleet).
struct StoreConfig {
  std::string type = "sqlite";
  // etcd: members' client addresses as host:port.
  std::vector<std::string> endpoints;
  std::string prefix = "/aside/";
  // Optional TLS (ca_file), mutual TLS (cert_file and key_file).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // Optional file with one line "username:password".
  std::string credentials_file;
  absl::Duration dial_timeout = absl::Seconds(2);
  absl::Duration request_timeout = absl::Seconds(5);
  // HTTP/2 pings on the connections to the members. etcd refuses pings more
  // often than its --grpc-keepalive-min-time (default 5 s).
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // Which member a replica asks first: "spread" (one picked by a hash of
  // the host name and process id, so replicas spread over the members) or
  // "listed" (the first one listed).
  std::string endpoint_order = "spread";

  friend bool operator==(const StoreConfig&, const StoreConfig&) = default;
};

// Fleet membership and probe ownership (DESIGN.md §11), used only with the
// etcd store: each replica registers under <prefix>members/<id> with a lease
// of member_ttl, and each health target is probed by one live replica.
struct FleetConfig {
  // How long a replica that stopped renewing stays a member.
  absl::Duration member_ttl = absl::Seconds(5);
  // Empty: a random 16-hex-digit id per process start.
  std::string replica_id;
  // host:port at which peers dial this replica's gRPC listener; empty: the
  // listen address with a wildcard host replaced by 127.0.0.1.
  std::string advertise_address;

  friend bool operator==(const FleetConfig&, const FleetConfig&) = default;
};

// Parses the --store flag: "sqlite", or "etcd:HOST:PORT[,HOST:PORT...]"
// (endpoints replace the config file's; the rest of store.etcd is kept).
absl::Status ApplyStoreFlag(absl::string_view flag, StoreConfig* store);

// The fleet's shared load view (docs/operations.md): peers to subscribe to
// when no membership gives them, how often to share, and the credential
// shown to peers.
struct FleetLoadConfig {
  // Peers' gRPC addresses ("host:port"); this replica's own is skipped.
  std::vector<std::string> peers;
  absl::Duration load_share_interval = absl::Seconds(1);
  // File whose first line is the bearer token sent to peers (a `report`
  // credential of theirs); empty sends none.
  std::string peer_token_file;

  friend bool operator==(const FleetLoadConfig&,
                         const FleetLoadConfig&) = default;
};

struct ServerConfig {
  // gRPC listen address, "host:port" (port 0 picks a free port).
  std::string listen = "0.0.0.0:50051";
  // Prometheus /metrics listen address; empty disables the endpoint.
  std::string metrics = "0.0.0.0:9464";
  // The status page (/ and /status.json) on the metrics port, and whether
  // its data needs an Admin token (docs/operations.md).
  bool status_page_enabled = true;
  bool status_page_require_token = false;
  // The status page's history: one sample per interval, 180 kept.
  absl::Duration status_page_history_interval = absl::Seconds(5);
  // Directory for durable state.
  std::string state_dir = "./var";
  // The store of Admin-created groups (see StoreConfig).
  StoreConfig store;
  // Membership and probe ownership with the etcd store (see FleetConfig).
  FleetConfig fleet;
  // Log format ("text": key=value, or "json") and minimum level.
  std::string log_format = "text";
  std::string log_level = "info";
  // Longest time a shutdown waits for in-flight calls.
  absl::Duration shutdown_grace = absl::Seconds(10);
  // gRPC limits.
  uint32_t max_receive_message_bytes = 4 * 1024 * 1024;
  uint32_t max_concurrent_streams = 100;
  uint32_t max_groups = 10000;
  // HTTP/2 abuse bounds (docs/hardening.md). A connection older than
  // max_connection_age gets a GOAWAY and then max_connection_age_grace for
  // its calls to end (zero age: no limit); a client that pings more often
  // than min_ping_interval without data more than max_ping_strikes times is
  // closed (zero strikes: no limit); request metadata past
  // max_metadata_bytes is refused.
  absl::Duration max_connection_age = absl::Minutes(30);
  absl::Duration max_connection_age_grace = absl::Minutes(1);
  absl::Duration min_ping_interval = absl::Seconds(10);
  uint32_t max_ping_strikes = 2;
  uint32_t max_metadata_bytes = 8192;
  // Rapid reset (server/net/h2_request_guard.h): the RST_STREAM frames one
  // client address (one connection, with no per-peer cap) may send at once
  // on a plaintext port, given back at stream_resets_per_second; past them
  // GOAWAY and close (0: no budget).
  uint32_t max_stream_resets = 1000;
  uint32_t stream_resets_per_second = 33;
  // Watch streams open from one peer IP address at once; more are answered
  // RESOURCE_EXHAUSTED.
  uint32_t max_watch_streams_per_peer = 10000;
  // grpclb, xDS ADS and LRS streams one peer IP address may hold open at
  // once, each service counted apart; more are answered RESOURCE_EXHAUSTED.
  uint32_t max_balancer_streams_per_peer = 10000;
  // Streams of every kind (unary calls in flight included) one peer IP
  // address, and the whole plaintext port, may hold open at once; more are
  // refused at their first frame (server/net/h2_request_guard.h). An open
  // stream costs the server about 20 KiB (docs/operations.md,
  // "Connections").
  uint32_t max_streams_per_peer = 4096;
  uint32_t max_streams = 20000;
  // Connections on the gRPC port (server/net/connection_gate.h), in total and
  // per peer (an IPv4 address, an IPv6 /64; 0: no per-peer cap). 0 total:
  // the open-file limit less a reserve (ConnectionBudgetFor); a larger
  // value is lowered to that at start.
  uint32_t max_connections = 0;
  uint32_t max_connections_per_peer = 1024;
  // Global cap on probes in flight.
  uint32_t max_concurrent_probes = 1000;
  // Health flips within this window go out as one table update.
  absl::Duration health_merge_window = absl::Milliseconds(100);
  // Publications of one group within this window reach the Watch, xDS and
  // grpclb subscribers as one (the first after a quiet window at once).
  absl::Duration publish_window = absl::Milliseconds(5);
  // A Watch subscriber whose stream does not take a write for this long is
  // ended with RESOURCE_EXHAUSTED.
  absl::Duration watch_stall_timeout = absl::Seconds(30);
  // Load reports are aggregated over this window.
  absl::Duration load_window = absl::Seconds(10);
  // Largest size the state database may grow to.
  uint64_t max_state_bytes = uint64_t{1} << 30;

  // Optional plaintext port serving only grpc.health.v1 (for kubelet gRPC
  // probes, which cannot speak TLS); empty disables.
  std::string health_listen;

  // Who may call aside.v1.Admin.
  struct AdminIdentity {
    std::string identity;  // URI or DNS SAN, or the subject CN
    std::string role;      // "admin", "read", "report" or "self-drain"
    friend bool operator==(const AdminIdentity&,
                           const AdminIdentity&) = default;
  };
  // File with one "TOKEN ROLE [NAME]" per line (the roles: see
  // server/auth/admin_auth.h; "#" comments).
  // Without it (and without identities) Admin mutations are refused.
  std::string admin_token_file;
  std::vector<AdminIdentity> admin_identities;
  // Admin writes' back-pressure (server/api/mutation_queue.h): writes
  // waiting for a worker, and the longest the oldest may wait, before new
  // ones are refused with RESOURCE_EXHAUSTED and a retry hint.
  uint64_t admin_max_queued_writes = 1024;
  absl::Duration admin_max_write_wait = absl::Seconds(1);

  // TLS for the gRPC port; plaintext when cert_file is empty.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Verify client certificates against this CA bundle when set.
  std::string tls_client_ca_file;
  bool tls_require_client_cert = false;

  // Key that signs sticky session tokens, shared by replicas (at least 16
  // bytes of file content); empty: a random key kept in the state store.
  std::string session_key_file;

  // DNS servers for DNS discovery ("ip:port"); empty: /etc/resolv.conf.
  std::vector<std::string> dns_servers;

  // Load reports (ReportLoad, grpclb ClientStats, xDS LRS): `auth: token`
  // (the default) takes them only from credentials with the `report` or
  // `admin` role; `auth: open` from anyone who reaches the port (trusted
  // networks only, chosen knowingly; docs/operations.md).
  bool load_reports_open = false;
  // With `auth: token`, callers without a credential whose address lies in
  // one of these networks (CIDR) may report too, each host a source of its
  // own: stock clients that can carry no credential (grpc-js's LRS).
  std::vector<std::string> load_reports_trusted_networks;
  // Most weight one reporter (one credential; in open mode one peer host)
  // carries in a backend's load estimate, as a share of all reporters'
  // (server/load/load_aggregator.h).
  double load_reports_max_reporter_share = 0.25;

  // A connection that has not finished its handshake (TLS, and the HTTP/2
  // preface and settings) within this time is closed.
  absl::Duration handshake_timeout = absl::Seconds(10);

  // grpclb (grpc.lb.v1) settings.
  absl::Duration grpclb_client_stats_report_interval = absl::Seconds(10);
  uint32_t grpclb_max_servers = 1000;

  // Following the config file at run time (server/config_reloader.h):
  // with `reload_watch` its content is checked every `reload_interval`
  // (SIGHUP reloads it either way). The TLS files are checked as often,
  // rounded up to whole seconds.
  bool reload_watch = true;
  absl::Duration reload_interval = absl::Seconds(1);

  // fleet: the shared load view's settings.
  FleetLoadConfig fleet_load;

  std::vector<GroupSpec> groups;
  // The line (1-based) of each groups[i] in the file, for errors found
  // after loading (a config reload's name collisions).
  std::vector<int> group_lines;
};

// Reads a config file's bytes, refusing one past yaml::kMaxYamlBytes
// before reading it.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Loads and validates a config file. On failure the status message lists
// every error found, one per line.
absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path);

// Same, from text; `file` names it in errors.
absl::StatusOr<ServerConfig> ParseConfig(absl::string_view text,
                                         const std::string& file);

}  // namespace aside::server

#endif  // ASIDE_SERVER_CONFIG_CONFIG_H_
