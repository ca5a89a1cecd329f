#include "server/config/server_settings.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/address.h"
#include "lib/ip_network.h"

namespace aside::server {
namespace {

using yaml::JoinPath;
using yaml::YamlReader;

// publication.window's upper bound: a subscriber is never held longer.
constexpr absl::Duration kMaxPublishWindow = absl::Milliseconds(50);

// An integer setting within [low, high].
template <typename T>
bool GetUintIn(YamlReader& r, const YAML::Node& node, const std::string& path,
               uint64_t low, uint64_t high, T* out) {
  uint64_t v = 0;
  if (!r.GetUint64(node, path, &v)) {
    return false;
  }
  if (v < low || v > high) {
    r.Error(node, path, absl::StrCat(v, " out of range ", low, "..", high));
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

// A duration setting that is zero (`allow_zero`) or within [low, high].
void GetDurationIn(YamlReader& r, const YAML::Node& node,
                   const std::string& path, absl::Duration low,
                   absl::Duration high, bool allow_zero, absl::Duration* out) {
  absl::Duration d;
  if (!r.GetDuration(node, path, &d)) {
    return;
  }
  if ((d == absl::ZeroDuration() && allow_zero) || (d >= low && d <= high)) {
    *out = d;
    return;
  }
  r.Error(node, path,
          absl::StrCat("out of range ", allow_zero ? "0 (off) or " : "",
                       absl::FormatDuration(low), "..",
                       absl::FormatDuration(high)));
}

// The limits that bound what one HTTP/2 peer can cost
// (docs/hardening.md#http2-abuse).
void ReadAbuseLimits(YamlReader& r, const YAML::Node& l, ServerConfig* out) {
  if (l["max_connection_age"]) {
    GetDurationIn(r, l["max_connection_age"], "limits.max_connection_age",
                  absl::Seconds(1), absl::Hours(24 * 7), /*allow_zero=*/true,
                  &out->max_connection_age);
  }
  if (l["max_connection_age_grace"]) {
    GetDurationIn(r, l["max_connection_age_grace"],
                  "limits.max_connection_age_grace", absl::Milliseconds(100),
                  absl::Hours(24), /*allow_zero=*/true,
                  &out->max_connection_age_grace);
  }
  if (l["min_ping_interval"]) {
    GetDurationIn(r, l["min_ping_interval"], "limits.min_ping_interval",
                  absl::Milliseconds(100), absl::Hours(2), /*allow_zero=*/false,
                  &out->min_ping_interval);
  }
  if (l["max_ping_strikes"]) {
    GetUintIn(r, l["max_ping_strikes"], "limits.max_ping_strikes", 0, 1000,
              &out->max_ping_strikes);
  }
  if (l["max_metadata_bytes"]) {
    GetUintIn(r, l["max_metadata_bytes"], "limits.max_metadata_bytes", 1024,
              1 << 20, &out->max_metadata_bytes);
  }
  if (l["max_watch_streams_per_peer"]) {
    GetUintIn(r, l["max_watch_streams_per_peer"],
              "limits.max_watch_streams_per_peer", 1, 1000000,
              &out->max_watch_streams_per_peer);
  }
  if (l["max_balancer_streams_per_peer"]) {
    GetUintIn(r, l["max_balancer_streams_per_peer"],
              "limits.max_balancer_streams_per_peer", 1, 1000000,
              &out->max_balancer_streams_per_peer);
  }
  if (l["max_connections"]) {
    GetUintIn(r, l["max_connections"], "limits.max_connections", 1, 10000000,
              &out->max_connections);
  }
  if (l["max_connections_per_peer"]) {
    GetUintIn(r, l["max_connections_per_peer"],
              "limits.max_connections_per_peer", 0, 10000000,
              &out->max_connections_per_peer);
  }
}

// A backend address (`listen` false) or an address to listen on (port 0
// allowed; empty allowed when `allow_empty`).
bool GetAddress(YamlReader& r, const YAML::Node& node, const std::string& path,
                std::string* out, bool allow_empty, bool listen = false) {
  std::string s;
  if (!r.GetString(node, path, &s)) {
    return false;
  }
  if (s.empty() && allow_empty) {
    *out = s;
    return true;
  }
  absl::StatusOr<Address> a = listen ? ParseListenAddress(s) : ParseAddress(s);
  if (!a.ok()) {
    r.Error(node, path, a.status().message());
    return false;
  }
  *out = s;
  return true;
}

// store: {type: sqlite} or {type: etcd, etcd: {...}}.
void ReadStore(YamlReader& r, const YAML::Node& node, StoreConfig* out) {
  if (!r.CheckMap(node, "store", {"type", "etcd"})) {
    return;
  }
  if (node["type"]) {
    if (r.GetString(node["type"], "store.type", &out->type) &&
        out->type != "sqlite" && out->type != "etcd") {
      r.Error(node["type"], "store.type",
              absl::StrCat("unknown store '", out->type,
                           "' (allowed: sqlite, etcd)"));
      return;
    }
  }
  const YAML::Node e = node["etcd"];
  if (out->type != "etcd") {
    if (e) {
      r.Error(e, "store.etcd", "needs store.type: etcd");
    }
    return;
  }
  if (!e) {
    r.Error(node, "store", "type etcd needs store.etcd.endpoints");
    return;
  }
  if (!r.CheckMap(e, "store.etcd",
                  {"endpoints", "prefix", "ca_file", "cert_file", "key_file",
                   "credentials_file", "dial_timeout", "request_timeout",
                   "keepalive_time", "keepalive_timeout", "endpoint_order"})) {
    return;
  }
  if (const YAML::Node eps = e["endpoints"];
      !eps || !eps.IsSequence() || eps.size() == 0) {
    r.Error(eps ? eps : e, "store.etcd.endpoints",
            "expected a list of \"host:port\" (at least one)");
  } else {
    for (size_t i = 0; i < eps.size(); ++i) {
      const std::string ep = absl::StrCat("store.etcd.endpoints[", i, "]");
      std::string endpoint;
      if (GetAddress(r, eps[i], ep, &endpoint, false)) {
        out->endpoints.push_back(endpoint);
      }
    }
  }
  if (e["prefix"]) {
    if (r.GetString(e["prefix"], "store.etcd.prefix", &out->prefix) &&
        (out->prefix.empty() || out->prefix.back() != '/')) {
      r.Error(e["prefix"], "store.etcd.prefix",
              "must be non-empty and end with '/'");
    }
  }
  for (auto [key, field] :
       {std::pair{"ca_file", &out->ca_file},
        std::pair{"cert_file", &out->cert_file},
        std::pair{"key_file", &out->key_file},
        std::pair{"credentials_file", &out->credentials_file}}) {
    if (e[key]) {
      r.GetString(e[key], absl::StrCat("store.etcd.", key), field);
    }
  }
  if (out->cert_file.empty() != out->key_file.empty()) {
    r.Error(e, "store.etcd", "cert_file and key_file go together");
  }
  if (e["endpoint_order"]) {
    std::string order;
    if (r.GetString(e["endpoint_order"], "store.etcd.endpoint_order", &order)) {
      if (order != "spread" && order != "listed") {
        r.Error(e["endpoint_order"], "store.etcd.endpoint_order",
                absl::StrCat("unknown order '", order,
                             "' (allowed: spread, listed)"));
      } else {
        out->endpoint_order = order;
      }
    }
  }
  for (auto [key, field] :
       {std::pair{"dial_timeout", &out->dial_timeout},
        std::pair{"request_timeout", &out->request_timeout},
        std::pair{"keepalive_time", &out->keepalive_time},
        std::pair{"keepalive_timeout", &out->keepalive_timeout}}) {
    if (e[key]) {
      absl::Duration d;
      const std::string path = absl::StrCat("store.etcd.", key);
      if (r.GetDuration(e[key], path, &d)) {
        if (d < absl::Milliseconds(10) || d > absl::Minutes(5)) {
          r.Error(e[key], path, "out of range 10ms..5m");
        } else {
          *field = d;
        }
      }
    }
  }
}

// The shared load view's keys of `fleet:` (peers, load_share_interval,
// peer_token_file); ReadFleet checks the block's keys.
void ReadFleetLoad(YamlReader& r, const YAML::Node& node,
                   FleetLoadConfig* out) {
  if (const YAML::Node peers = node["peers"]; peers) {
    if (!peers.IsSequence()) {
      r.Error(peers, "fleet.peers", "expected a list of \"host:port\"");
    } else {
      for (size_t i = 0; i < peers.size(); ++i) {
        std::string peer;
        if (GetAddress(r, peers[i], absl::StrCat("fleet.peers[", i, "]"), &peer,
                       false)) {
          out->peers.push_back(std::move(peer));
        }
      }
    }
  }
  if (const YAML::Node i = node["load_share_interval"]; i) {
    absl::Duration d;
    if (r.GetDuration(i, "fleet.load_share_interval", &d)) {
      if (d < absl::Milliseconds(50) || d > absl::Minutes(1)) {
        r.Error(i, "fleet.load_share_interval", "out of range 50ms..1m");
      } else {
        out->load_share_interval = d;
      }
    }
  }
  if (node["peer_token_file"]) {
    r.GetString(node["peer_token_file"], "fleet.peer_token_file",
                &out->peer_token_file);
  }
}

// fleet: membership's keys (member_ttl, replica_id, advertise_address) and
// the load view's (ReadFleetLoad).
void ReadFleet(YamlReader& r, const YAML::Node& node, FleetConfig* out,
               FleetLoadConfig* load) {
  if (!r.CheckMap(node, "fleet",
                  {"member_ttl", "replica_id", "advertise_address", "peers",
                   "load_share_interval", "peer_token_file"})) {
    return;
  }
  ReadFleetLoad(r, node, load);
  if (node["member_ttl"]) {
    absl::Duration d;
    if (r.GetDuration(node["member_ttl"], "fleet.member_ttl", &d)) {
      // etcd grants leases in whole seconds.
      if (d < absl::Seconds(1) || d > absl::Minutes(5) ||
          d != absl::Floor(d, absl::Seconds(1))) {
        r.Error(node["member_ttl"], "fleet.member_ttl",
                "out of range 1s..5m in whole seconds");
      } else {
        out->member_ttl = d;
      }
    }
  }
  if (node["replica_id"]) {
    std::string id;
    if (r.GetString(node["replica_id"], "fleet.replica_id", &id)) {
      const bool ok =
          !id.empty() && id.size() <= 64 &&
          std::all_of(id.begin(), id.end(), [](char c) {
            return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                   c == '-' || c == '_' || c == '.';
          });
      if (!ok) {
        r.Error(node["replica_id"], "fleet.replica_id",
                "expected 1..64 characters of [A-Za-z0-9._-]");
      } else {
        out->replica_id = std::move(id);
      }
    }
  }
  if (node["advertise_address"]) {
    GetAddress(r, node["advertise_address"], "fleet.advertise_address",
               &out->advertise_address, /*allow_empty=*/true);
  }
}

}  // namespace

absl::Status ApplyStoreFlag(absl::string_view flag, StoreConfig* store) {
  if (flag == "sqlite") {
    store->type = "sqlite";
    return absl::OkStatus();
  }
  if (!absl::ConsumePrefix(&flag, "etcd:") || flag.empty()) {
    return absl::InvalidArgumentError(
        "--store: expected sqlite or etcd:HOST:PORT[,HOST:PORT...]");
  }
  std::vector<std::string> endpoints;
  for (absl::string_view ep : absl::StrSplit(flag, ',')) {
    if (absl::StatusOr<Address> a = ParseAddress(ep); !a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--store: ", ep, ": ", a.status().message()));
    }
    endpoints.emplace_back(ep);
  }
  store->type = "etcd";
  store->endpoints = std::move(endpoints);
  return absl::OkStatus();
}

void ReadServerSettings(YamlReader& r, const YAML::Node& root,
                        ServerConfig* out) {
  if (root["health_listen"]) {
    GetAddress(r, root["health_listen"], "health_listen", &out->health_listen,
               true, true);
  }
  if (const YAML::Node a = root["admin"]; a) {
    if (r.CheckMap(a, "admin",
                   {"token_file", "allowed_identities", "max_queued_writes",
                    "max_write_wait"})) {
      if (a["max_queued_writes"]) {
        GetUintIn(r, a["max_queued_writes"], "admin.max_queued_writes", 1,
                  1000000, &out->admin_max_queued_writes);
      }
      if (a["max_write_wait"]) {
        absl::Duration d;
        if (r.GetDuration(a["max_write_wait"], "admin.max_write_wait", &d)) {
          if (d < absl::Milliseconds(1) || d > absl::Seconds(60)) {
            r.Error(a["max_write_wait"], "admin.max_write_wait",
                    "out of range 1ms..60s");
          } else {
            out->admin_max_write_wait = d;
          }
        }
      }
      if (a["token_file"]) {
        r.GetString(a["token_file"], "admin.token_file",
                    &out->admin_token_file);
      }
      if (const YAML::Node ids = a["allowed_identities"]; ids) {
        if (!ids.IsSequence()) {
          r.Error(ids, "admin.allowed_identities",
                  "expected a list of {identity, role}");
        } else {
          for (size_t i = 0; i < ids.size(); ++i) {
            const std::string ip =
                absl::StrCat("admin.allowed_identities[", i, "]");
            if (!r.CheckMap(ids[i], ip, {"identity", "role"})) {
              continue;
            }
            ServerConfig::AdminIdentity id;
            if (!ids[i]["identity"] || !ids[i]["role"]) {
              r.Error(ids[i], ip, "needs both 'identity' and 'role'");
              continue;
            }
            r.GetString(ids[i]["identity"], JoinPath(ip, "identity"),
                        &id.identity);
            if (r.GetString(ids[i]["role"], JoinPath(ip, "role"), &id.role) &&
                id.role != "admin" && id.role != "read" &&
                id.role != "report") {
              r.Error(ids[i]["role"], JoinPath(ip, "role"),
                      absl::StrCat("unknown role '", id.role,
                                   "' (allowed: admin, read, report)"));
            }
            if (id.identity.empty()) {
              r.Error(ids[i]["identity"], JoinPath(ip, "identity"), "is empty");
            }
            out->admin_identities.push_back(std::move(id));
          }
        }
      }
    }
  }
  if (const YAML::Node t = root["tls"]; t) {
    if (r.CheckMap(t, "tls",
                   {"cert_file", "key_file", "client_ca_file",
                    "require_client_cert"})) {
      if (t["cert_file"]) {
        r.GetString(t["cert_file"], "tls.cert_file", &out->tls_cert_file);
      }
      if (t["key_file"]) {
        r.GetString(t["key_file"], "tls.key_file", &out->tls_key_file);
      }
      if (t["client_ca_file"]) {
        r.GetString(t["client_ca_file"], "tls.client_ca_file",
                    &out->tls_client_ca_file);
      }
      if (t["require_client_cert"]) {
        r.GetBool(t["require_client_cert"], "tls.require_client_cert",
                  &out->tls_require_client_cert);
      }
      if (out->tls_cert_file.empty() != out->tls_key_file.empty()) {
        r.Error(t, "tls", "cert_file and key_file go together");
      }
      if (out->tls_cert_file.empty() &&
          (!out->tls_client_ca_file.empty() || out->tls_require_client_cert)) {
        r.Error(t, "tls",
                "client_ca_file and require_client_cert need cert_file and "
                "key_file");
      }
      if (out->tls_require_client_cert && out->tls_client_ca_file.empty()) {
        r.Error(t, "tls.require_client_cert", "needs client_ca_file");
      }
    }
  }
  if (root["store"]) {
    ReadStore(r, root["store"], &out->store);
  }
  if (root["fleet"]) {
    ReadFleet(r, root["fleet"], &out->fleet, &out->fleet_load);
  }
  if (root["session_key_file"]) {
    r.GetString(root["session_key_file"], "session_key_file",
                &out->session_key_file);
  }
  if (const YAML::Node d = root["discovery"]; d) {
    if (r.CheckMap(d, "discovery", {"dns_servers"}) && d["dns_servers"]) {
      const YAML::Node servers = d["dns_servers"];
      if (!servers.IsSequence()) {
        r.Error(servers, "discovery.dns_servers",
                "expected a list of \"ip:port\"");
      } else {
        for (size_t i = 0; i < servers.size(); ++i) {
          const std::string sp = absl::StrCat("discovery.dns_servers[", i, "]");
          std::string server;
          if (GetAddress(r, servers[i], sp, &server, false)) {
            if (!ParseAddress(server)->is_ip()) {
              r.Error(servers[i], sp, "must be an IP address and port");
            } else {
              out->dns_servers.push_back(server);
            }
          }
        }
      }
    }
  }
  if (const YAML::Node g = root["grpclb"]; g) {
    if (r.CheckMap(g, "grpclb",
                   {"client_stats_report_interval", "max_servers"})) {
      if (g["client_stats_report_interval"]) {
        absl::Duration d;
        if (r.GetDuration(g["client_stats_report_interval"],
                          "grpclb.client_stats_report_interval", &d)) {
          if (d < absl::Seconds(1) || d > absl::Hours(1)) {
            r.Error(g["client_stats_report_interval"],
                    "grpclb.client_stats_report_interval",
                    "out of range 1s..1h");
          } else {
            out->grpclb_client_stats_report_interval = d;
          }
        }
      }
      if (g["max_servers"]) {
        GetUintIn(r, g["max_servers"], "grpclb.max_servers", 1, 100000,
                  &out->grpclb_max_servers);
      }
    }
  }
  if (const YAML::Node lr = root["load_reports"]; lr) {
    if (r.CheckMap(lr, "load_reports",
                   {"auth", "max_reporter_share", "trusted_networks"})) {
      if (const YAML::Node n = lr["trusted_networks"]; n) {
        if (!n.IsSequence()) {
          r.Error(n, "load_reports.trusted_networks",
                  "expected a list of networks (\"10.0.0.0/8\")");
        } else {
          for (size_t i = 0; i < n.size(); ++i) {
            const std::string field =
                absl::StrCat("load_reports.trusted_networks[", i, "]");
            std::string text;
            if (!r.GetString(n[i], field, &text)) {
              continue;
            }
            if (absl::Status s = ParseNetwork(text).status(); !s.ok()) {
              r.Error(n[i], field, s.message());
            } else {
              out->load_reports_trusted_networks.push_back(text);
            }
          }
        }
      }
      if (lr["auth"]) {
        std::string mode;
        if (r.GetString(lr["auth"], "load_reports.auth", &mode)) {
          if (mode == "open" || mode == "token") {
            out->load_reports_open = mode == "open";
          } else {
            r.Error(lr["auth"], "load_reports.auth",
                    absl::StrCat("unknown mode '", mode,
                                 "' (allowed: token, open)"));
          }
        }
      }
      if (lr["max_reporter_share"]) {
        double share = 0;
        if (r.GetDouble(lr["max_reporter_share"],
                        "load_reports.max_reporter_share", &share)) {
          if (!(share >= 0.01 && share <= 1)) {
            r.Error(lr["max_reporter_share"], "load_reports.max_reporter_share",
                    absl::StrCat(share, " out of range 0.01..1"));
          } else {
            out->load_reports_max_reporter_share = share;
          }
        }
      }
    }
  }
  if (root["listen"]) {
    GetAddress(r, root["listen"], "listen", &out->listen, false, true);
  }
  if (root["metrics"]) {
    GetAddress(r, root["metrics"], "metrics", &out->metrics, true, true);
  }
  if (const YAML::Node p = root["status_page"]; p) {
    if (r.CheckMap(p, "status_page",
                   {"enabled", "require_token", "history_interval"})) {
      if (p["enabled"]) {
        r.GetBool(p["enabled"], "status_page.enabled",
                  &out->status_page_enabled);
      }
      if (p["require_token"]) {
        r.GetBool(p["require_token"], "status_page.require_token",
                  &out->status_page_require_token);
      }
      if (p["history_interval"]) {
        GetDurationIn(r, p["history_interval"], "status_page.history_interval",
                      absl::Seconds(1), absl::Minutes(1), false,
                      &out->status_page_history_interval);
      }
      // Without a token file no token could ever open it.
      if (out->status_page_enabled && out->status_page_require_token &&
          out->admin_token_file.empty()) {
        r.Error(p, "status_page.require_token", "needs admin.token_file");
      }
    }
  }
  if (root["state_dir"]) {
    r.GetString(root["state_dir"], "state_dir", &out->state_dir);
  }
  if (root["log_format"]) {
    if (r.GetString(root["log_format"], "log_format", &out->log_format) &&
        out->log_format != "text" && out->log_format != "json") {
      r.Error(root["log_format"], "log_format", "expected 'text' or 'json'");
    }
  }
  if (root["log_level"]) {
    if (r.GetString(root["log_level"], "log_level", &out->log_level) &&
        out->log_level != "debug" && out->log_level != "info" &&
        out->log_level != "warn" && out->log_level != "error") {
      r.Error(root["log_level"], "log_level",
              "expected one of debug, info, warn, error");
    }
  }
  if (root["shutdown_grace"]) {
    r.GetDuration(root["shutdown_grace"], "shutdown_grace",
                  &out->shutdown_grace);
  }
  if (const YAML::Node l = root["limits"]; l) {
    if (r.CheckMap(
            l, "limits",
            {"max_receive_message_bytes", "max_concurrent_streams",
             "max_groups", "max_state_bytes", "watch_stall_timeout",
             "load_window", "handshake_timeout", "max_connection_age",
             "max_connection_age_grace", "min_ping_interval",
             "max_ping_strikes", "max_metadata_bytes",
             "max_watch_streams_per_peer", "max_balancer_streams_per_peer",
             "max_connections", "max_connections_per_peer"})) {
      ReadAbuseLimits(r, l, out);
      if (l["handshake_timeout"]) {
        absl::Duration d;
        if (r.GetDuration(l["handshake_timeout"], "limits.handshake_timeout",
                          &d)) {
          if (d < absl::Milliseconds(100) || d > absl::Minutes(10)) {
            r.Error(l["handshake_timeout"], "limits.handshake_timeout",
                    "out of range 100ms..10m");
          } else {
            out->handshake_timeout = d;
          }
        }
      }
      if (l["load_window"]) {
        absl::Duration d;
        if (r.GetDuration(l["load_window"], "limits.load_window", &d)) {
          if (d < absl::Seconds(1) || d > absl::Minutes(10)) {
            r.Error(l["load_window"], "limits.load_window",
                    "out of range 1s..10m");
          } else {
            out->load_window = absl::Seconds(absl::ToInt64Seconds(d));
          }
        }
      }
      if (l["watch_stall_timeout"]) {
        absl::Duration d;
        if (r.GetDuration(l["watch_stall_timeout"],
                          "limits.watch_stall_timeout", &d)) {
          if (d < absl::Milliseconds(100) || d > absl::Hours(1)) {
            r.Error(l["watch_stall_timeout"], "limits.watch_stall_timeout",
                    "out of range 100ms..1h");
          } else {
            out->watch_stall_timeout = d;
          }
        }
      }
      if (l["max_state_bytes"]) {
        GetUintIn(r, l["max_state_bytes"], "limits.max_state_bytes", 65536,
                  uint64_t{1} << 40, &out->max_state_bytes);
      }
      if (l["max_receive_message_bytes"]) {
        GetUintIn(r, l["max_receive_message_bytes"],
                  "limits.max_receive_message_bytes", 1024, 64 << 20,
                  &out->max_receive_message_bytes);
      }
      if (l["max_concurrent_streams"]) {
        GetUintIn(r, l["max_concurrent_streams"],
                  "limits.max_concurrent_streams", 1, 100000,
                  &out->max_concurrent_streams);
      }
      if (l["max_groups"]) {
        GetUintIn(r, l["max_groups"], "limits.max_groups", 1, 1000000,
                  &out->max_groups);
      }
    }
  }
  if (const YAML::Node p = root["publication"]; p) {
    if (r.CheckMap(p, "publication", {"window"}) && p["window"]) {
      absl::Duration d;
      if (r.GetDuration(p["window"], "publication.window", &d)) {
        if (d > kMaxPublishWindow) {
          r.Error(p["window"], "publication.window", "out of range 0..50ms");
        } else {
          out->publish_window = d;
        }
      }
    }
  }
  if (const YAML::Node c = root["config_reload"]; c) {
    if (r.CheckMap(c, "config_reload", {"watch", "interval"})) {
      if (c["watch"]) {
        r.GetBool(c["watch"], "config_reload.watch", &out->reload_watch);
      }
      if (c["interval"]) {
        absl::Duration d;
        if (r.GetDuration(c["interval"], "config_reload.interval", &d)) {
          if (d < absl::Milliseconds(100) || d > absl::Hours(1)) {
            r.Error(c["interval"], "config_reload.interval",
                    "out of range 100ms..1h");
          } else {
            out->reload_interval = d;
          }
        }
      }
    }
  }
  if (const YAML::Node h = root["health"]; h) {
    if (r.CheckMap(h, "health", {"max_concurrent_probes", "merge_window"})) {
      if (h["merge_window"]) {
        absl::Duration d;
        if (r.GetDuration(h["merge_window"], "health.merge_window", &d)) {
          if (d > absl::Seconds(10)) {
            r.Error(h["merge_window"], "health.merge_window",
                    "out of range 0..10s");
          } else {
            out->health_merge_window = d;
          }
        }
      }
      if (h["max_concurrent_probes"]) {
        GetUintIn(r, h["max_concurrent_probes"], "health.max_concurrent_probes",
                  1, 100000, &out->max_concurrent_probes);
      }
    }
  }
}

}  // namespace aside::server
