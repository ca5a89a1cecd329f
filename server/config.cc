#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/address.h"

namespace aside::server {
namespace {

// Collects errors with their positions while walking the YAML tree.
class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  void Error(const YAML::Node& node, absl::string_view path,
             absl::string_view message) {
    const YAML::Mark mark = node.Mark();
    errors_.push_back(absl::StrCat(file_, ":", mark.line + 1, ":",
                                   mark.column + 1, ": ", path, ": ",
                                   message));
  }
  void ErrorAtPath(absl::string_view path, absl::string_view message) {
    // Attribute a validation error to the closest known node of its path.
    std::string p(path);
    while (true) {
      auto it = marks_.find(p);
      if (it != marks_.end()) {
        errors_.push_back(absl::StrCat(file_, ":", it->second.line + 1, ":",
                                       it->second.column + 1, ": ", path,
                                       ": ", message));
        return;
      }
      const size_t cut = p.find_last_of(".[");
      if (cut == std::string::npos || cut == 0) {
        break;
      }
      p.resize(cut);
    }
    errors_.push_back(absl::StrCat(file_, ": ", path, ": ", message));
  }
  void Remember(const YAML::Node& node, const std::string& path) {
    marks_[path] = node.Mark();
  }

  const std::vector<std::string>& errors() const { return errors_; }
  const std::string& file() const { return file_; }

  // Checks that `node` is a map whose keys are all in `allowed` and not
  // repeated. Returns false (after reporting) when it is not a map.
  bool CheckMap(const YAML::Node& node, const std::string& path,
                std::initializer_list<absl::string_view> allowed) {
    if (!node.IsMap()) {
      Error(node, path, "expected a mapping");
      return false;
    }
    std::set<std::string> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        Error(kv.first, path, "keys must be strings");
        continue;
      }
      const std::string key = kv.first.Scalar();
      const std::string key_path = Join(path, key);
      Remember(kv.second.IsNull() ? kv.first : kv.second, key_path);
      if (!seen.insert(key).second) {
        Error(kv.first, key_path, "key given twice");
        continue;
      }
      bool known = false;
      for (absl::string_view a : allowed) {
        known = known || a == key;
      }
      if (!known) {
        Error(kv.first, key_path,
              absl::StrCat("unknown key (allowed: ",
                           absl::StrJoin(allowed, ", "), ")"));
      }
    }
    return true;
  }

  static std::string Join(const std::string& path, absl::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  }

  bool GetString(const YAML::Node& node, const std::string& path,
                 std::string* out) {
    if (!node.IsScalar()) {
      Error(node, path, "expected a string");
      return false;
    }
    *out = node.Scalar();
    return true;
  }

  bool GetBool(const YAML::Node& node, const std::string& path, bool* out) {
    if (!node.IsScalar()) {
      Error(node, path, "expected true or false");
      return false;
    }
    const std::string& s = node.Scalar();
    if (s == "true" || s == "yes" || s == "on") {
      *out = true;
    } else if (s == "false" || s == "no" || s == "off") {
      *out = false;
    } else {
      Error(node, path, absl::StrCat("expected true or false, got '", s, "'"));
      return false;
    }
    return true;
  }

  bool GetUint(const YAML::Node& node, const std::string& path, uint64_t low,
               uint64_t high, uint64_t* out) {
    if (!node.IsScalar()) {
      Error(node, path, "expected an integer");
      return false;
    }
    const std::string& s = node.Scalar();
    uint64_t v = 0;
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos ||
        !absl::SimpleAtoi(s, &v)) {
      Error(node, path,
            absl::StrCat("expected a non-negative integer, got '", s, "'"));
      return false;
    }
    if (v < low || v > high) {
      Error(node, path,
            absl::StrCat(v, " out of range ", low, "..", high));
      return false;
    }
    *out = v;
    return true;
  }

  template <typename T>
  bool GetUintAs(const YAML::Node& node, const std::string& path, uint64_t low,
                 uint64_t high, T* out) {
    uint64_t v = 0;
    if (!GetUint(node, path, low, high, &v)) {
      return false;
    }
    *out = static_cast<T>(v);
    return true;
  }

  bool GetDouble(const YAML::Node& node, const std::string& path, double low,
                 double high, double* out) {
    if (!node.IsScalar()) {
      Error(node, path, "expected a number");
      return false;
    }
    double v = 0;
    if (!absl::SimpleAtod(node.Scalar(), &v) || !std::isfinite(v)) {
      Error(node, path,
            absl::StrCat("expected a number, got '", node.Scalar(), "'"));
      return false;
    }
    if (v < low || v > high) {
      Error(node, path, absl::StrCat(v, " out of range ", low, "..", high));
      return false;
    }
    *out = v;
    return true;
  }

  bool GetDuration(const YAML::Node& node, const std::string& path,
                   absl::Duration* out) {
    if (!node.IsScalar()) {
      Error(node, path, "expected a duration like 500ms, 5s or 1m");
      return false;
    }
    absl::StatusOr<absl::Duration> d = ParseDurationText(node.Scalar());
    if (!d.ok()) {
      Error(node, path, d.status().message());
      return false;
    }
    *out = *d;
    return true;
  }

  // A backend address (`listen` false) or an address to listen on (port 0
  // allowed; empty allowed when `allow_empty`).
  bool GetAddress(const YAML::Node& node, const std::string& path,
                  std::string* out, bool allow_empty, bool listen = false) {
    std::string s;
    if (!GetString(node, path, &s)) {
      return false;
    }
    if (s.empty() && allow_empty) {
      *out = s;
      return true;
    }
    absl::StatusOr<Address> a = listen ? ParseListenAddress(s) : ParseAddress(s);
    if (!a.ok()) {
      Error(node, path, a.status().message());
      return false;
    }
    *out = s;
    return true;
  }

  void ParseLocality(const YAML::Node& node, const std::string& path,
                     Locality* out) {
    if (!CheckMap(node, path, {"region", "zone", "subzone"})) {
      return;
    }
    if (node["region"]) GetString(node["region"], Join(path, "region"), &out->region);
    if (node["zone"]) GetString(node["zone"], Join(path, "zone"), &out->zone);
    if (node["subzone"]) GetString(node["subzone"], Join(path, "subzone"), &out->subzone);
  }

  void ParsePolicy(const YAML::Node& node, const std::string& path,
                   PolicyConfig* out);
  void ParseBackend(const YAML::Node& node, const std::string& path,
                    Backend* out);
  void ParseHealthCheck(const YAML::Node& node, const std::string& path,
                        HealthCheckSpec* out);
  void ParseGroup(const YAML::Node& node, const std::string& path,
                  GroupSpec* out);
  void ParseTop(const YAML::Node& node, ServerConfig* out);

 private:
  std::string file_;
  std::vector<std::string> errors_;
  std::map<std::string, YAML::Mark> marks_;
};

void Parser::ParsePolicy(const YAML::Node& node, const std::string& path,
                         PolicyConfig* out) {
  Remember(node, path);
  std::string name;
  if (node.IsScalar()) {
    name = node.Scalar();
  } else if (node.IsMap()) {
    const YAML::Node n = node["name"];
    if (!n) {
      Error(node, path, "missing key 'name' (the policy name)");
      return;
    }
    if (!GetString(n, Join(path, "name"), &name)) {
      return;
    }
  } else {
    Error(node, path, "expected a policy name or a mapping with 'name'");
    return;
  }
  absl::StatusOr<PolicyKind> kind = ParsePolicyName(name);
  if (!kind.ok()) {
    Error(node.IsMap() ? node["name"] : node, path, kind.status().message());
    return;
  }
  out->kind = *kind;
  if (!node.IsMap()) {
    return;
  }
  auto child = [&](const char* key) {
    if (node[key]) {
      auto c = std::make_shared<PolicyConfig>();
      ParsePolicy(node[key], Join(path, key), c.get());
      out->child = std::move(c);
    }
  };
  switch (out->kind) {
    case PolicyKind::kKetama:
      if (CheckMap(node, path, {"name", "points_per_weight"}) &&
          node["points_per_weight"]) {
        GetUintAs(node["points_per_weight"], Join(path, "points_per_weight"),
                  1, 1000, &out->ketama.points_per_weight);
      }
      break;
    case PolicyKind::kMaglev:
      if (CheckMap(node, path, {"name", "table_size"}) && node["table_size"]) {
        GetUint(node["table_size"], Join(path, "table_size"), 101, 5000011,
                &out->maglev.table_size);
      }
      break;
    case PolicyKind::kP2c:
      if (CheckMap(node, path, {"name", "load", "decay", "default_rtt"})) {
        if (node["load"]) {
          std::string load;
          if (GetString(node["load"], Join(path, "load"), &load)) {
            if (load == "pending") {
              out->p2c.load = P2cParams::Load::kPending;
            } else if (load == "peak_ewma") {
              out->p2c.load = P2cParams::Load::kPeakEwma;
            } else {
              Error(node["load"], Join(path, "load"),
                    absl::StrCat("unknown load '", load,
                                 "' (allowed: pending, peak_ewma)"));
            }
          }
        }
        if (node["decay"]) {
          GetDuration(node["decay"], Join(path, "decay"), &out->p2c.decay);
        }
        if (node["default_rtt"]) {
          GetDuration(node["default_rtt"], Join(path, "default_rtt"),
                      &out->p2c.default_rtt);
        }
      }
      break;
    case PolicyKind::kLeastTime:
      if (CheckMap(node, path,
                   {"name", "metric", "alpha", "default_latency"})) {
        if (node["metric"]) {
          std::string metric;
          if (GetString(node["metric"], Join(path, "metric"), &metric)) {
            if (metric == "first_byte") {
              out->least_time.metric = LeastTimeParams::Metric::kFirstByte;
            } else if (metric == "last_byte") {
              out->least_time.metric = LeastTimeParams::Metric::kLastByte;
            } else {
              Error(node["metric"], Join(path, "metric"),
                    absl::StrCat("unknown metric '", metric,
                                 "' (allowed: first_byte, last_byte)"));
            }
          }
        }
        if (node["alpha"]) {
          GetDouble(node["alpha"], Join(path, "alpha"), 0, 1,
                    &out->least_time.alpha);
        }
        if (node["default_latency"]) {
          GetDuration(node["default_latency"], Join(path, "default_latency"),
                      &out->least_time.default_latency);
        }
      }
      break;
    case PolicyKind::kSticky:
      if (CheckMap(node, path, {"name", "ttl", "fallback"})) {
        if (node["ttl"]) {
          GetDuration(node["ttl"], Join(path, "ttl"), &out->sticky.ttl);
        }
        child("fallback");
      }
      break;
    case PolicyKind::kLocality:
      if (CheckMap(node, path,
                   {"name", "weight_expiration_period", "update_period",
                    "smoothing_time_constant",
                    "utilization_variance_threshold", "remote_probe_fraction",
                    "child"})) {
        LocalityParams& p = out->locality;
        for (auto [key, field] :
             {std::pair{"weight_expiration_period",
                        &p.weight_expiration_period},
              std::pair{"update_period", &p.update_period},
              std::pair{"smoothing_time_constant",
                        &p.smoothing_time_constant}}) {
          if (node[key]) {
            GetDuration(node[key], Join(path, key), field);
          }
        }
        if (node["utilization_variance_threshold"]) {
          GetDouble(node["utilization_variance_threshold"],
                    Join(path, "utilization_variance_threshold"), 0, 1,
                    &p.utilization_variance_threshold);
        }
        if (node["remote_probe_fraction"]) {
          GetDouble(node["remote_probe_fraction"],
                    Join(path, "remote_probe_fraction"), 0, 1,
                    &p.remote_probe_fraction);
        }
        child("child");
      }
      break;
    default:
      CheckMap(node, path, {"name"});
      break;
  }
}

void Parser::ParseBackend(const YAML::Node& node, const std::string& path,
                          Backend* out) {
  Remember(node, path);
  if (node.IsScalar()) {
    GetAddress(node, path, &out->address, false);
    return;
  }
  if (!CheckMap(node, path,
                {"address", "weight", "locality", "metadata", "drained"})) {
    return;
  }
  if (!node["address"]) {
    Error(node, path, "missing key 'address'");
  } else {
    GetAddress(node["address"], Join(path, "address"), &out->address, false);
  }
  if (node["weight"]) {
    GetUintAs(node["weight"], Join(path, "weight"), 0, kMaxWeight,
              &out->weight);
  }
  if (node["locality"]) {
    ParseLocality(node["locality"], Join(path, "locality"), &out->locality);
  }
  if (node["metadata"]) {
    const YAML::Node md = node["metadata"];
    if (!md.IsMap()) {
      Error(md, Join(path, "metadata"), "expected a mapping of strings");
    } else {
      for (const auto& kv : md) {
        std::string key, value;
        if (GetString(kv.first, Join(path, "metadata"), &key) &&
            GetString(kv.second, absl::StrCat(path, ".metadata.", key),
                      &value)) {
          if (!out->metadata.emplace(key, value).second) {
            Error(kv.first, absl::StrCat(path, ".metadata.", key),
                  "key given twice");
          }
        }
      }
    }
  }
  if (node["drained"]) {
    GetBool(node["drained"], Join(path, "drained"), &out->drained);
  }
}

void Parser::ParseHealthCheck(const YAML::Node& node, const std::string& path,
                              HealthCheckSpec* out) {
  if (!CheckMap(node, path,
                {"kind", "interval", "timeout", "jitter", "rise", "fall",
                 "require_first_probe", "port", "http", "grpc"})) {
    return;
  }
  if (node["kind"]) {
    std::string kind;
    if (GetString(node["kind"], Join(path, "kind"), &kind)) {
      if (kind == "tcp") {
        out->kind = HealthCheckSpec::Kind::kTcp;
      } else if (kind == "http") {
        out->kind = HealthCheckSpec::Kind::kHttp;
      } else if (kind == "grpc") {
        out->kind = HealthCheckSpec::Kind::kGrpc;
      } else if (kind == "none") {
        out->kind = HealthCheckSpec::Kind::kNone;
      } else {
        Error(node["kind"], Join(path, "kind"),
              absl::StrCat("unknown kind '", kind,
                           "' (allowed: tcp, http, grpc, none)"));
      }
    }
  }
  if (node["interval"]) {
    GetDuration(node["interval"], Join(path, "interval"), &out->interval);
  }
  if (node["timeout"]) {
    GetDuration(node["timeout"], Join(path, "timeout"), &out->timeout);
  }
  if (node["jitter"]) {
    GetDouble(node["jitter"], Join(path, "jitter"), 0, 0.5, &out->jitter);
  }
  if (node["rise"]) {
    GetUintAs(node["rise"], Join(path, "rise"), 1, 100, &out->rise);
  }
  if (node["fall"]) {
    GetUintAs(node["fall"], Join(path, "fall"), 1, 100, &out->fall);
  }
  if (node["require_first_probe"]) {
    GetBool(node["require_first_probe"], Join(path, "require_first_probe"),
            &out->require_first_probe);
  }
  if (node["port"]) {
    GetUintAs(node["port"], Join(path, "port"), 0, 65535, &out->port);
  }
  if (node["http"]) {
    const YAML::Node http = node["http"];
    const std::string hp = Join(path, "http");
    if (out->kind != HealthCheckSpec::Kind::kHttp) {
      Error(http, hp, "only allowed with kind: http");
    } else if (CheckMap(http, hp,
                        {"path", "host", "expected_statuses", "body_limit"})) {
      if (http["path"]) {
        GetString(http["path"], Join(hp, "path"), &out->http_path);
      }
      if (http["host"]) {
        GetString(http["host"], Join(hp, "host"), &out->http_host);
      }
      if (http["body_limit"]) {
        GetUintAs(http["body_limit"], Join(hp, "body_limit"), 1024,
                  1024 * 1024, &out->http_body_limit);
      }
      if (const YAML::Node es = http["expected_statuses"]; es) {
        const std::string ep = Join(hp, "expected_statuses");
        if (!es.IsSequence() || es.size() == 0) {
          Error(es, ep, "expected a non-empty list like [\"200-299\", 404]");
        } else {
          out->http_expected_statuses.clear();
          for (size_t i = 0; i < es.size(); ++i) {
            const std::string ip = absl::StrCat(ep, "[", i, "]");
            std::string s;
            if (!GetString(es[i], ip, &s)) {
              continue;
            }
            std::vector<std::string> parts = absl::StrSplit(s, '-');
            uint32_t from = 0, to = 0;
            if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &from) ||
                (parts.size() == 2 && !absl::SimpleAtoi(parts[1], &to))) {
              Error(es[i], ip,
                    absl::StrCat("expected a status like 200 or a range like "
                                 "200-299, got '", s, "'"));
              continue;
            }
            if (parts.size() == 1) {
              to = from;
            }
            if (from < 100 || to > 599 || from > to) {
              Error(es[i], ip,
                    absl::StrCat("'", s, "' is not within 100..599"));
              continue;
            }
            out->http_expected_statuses.push_back({from, to});
          }
        }
      }
    }
  }
  if (node["grpc"]) {
    const YAML::Node grpc = node["grpc"];
    const std::string gp = Join(path, "grpc");
    if (out->kind != HealthCheckSpec::Kind::kGrpc) {
      Error(grpc, gp, "only allowed with kind: grpc");
    } else if (CheckMap(grpc, gp, {"service", "authority"})) {
      if (grpc["service"]) {
        GetString(grpc["service"], Join(gp, "service"), &out->grpc_service);
      }
      if (grpc["authority"]) {
        GetString(grpc["authority"], Join(gp, "authority"),
                  &out->grpc_authority);
      }
    }
  }
}

void Parser::ParseGroup(const YAML::Node& node, const std::string& path,
                        GroupSpec* out) {
  Remember(node, path);
  if (!CheckMap(node, path,
                {"name", "policy", "backends", "health_check",
                 "panic_threshold", "slow_start", "outlier_detection", "dns",
                 "aliases", "grpclb"})) {
    return;
  }
  if (!node["name"]) {
    Error(node, path, "missing key 'name'");
  } else if (GetString(node["name"], Join(path, "name"), &out->name)) {
    absl::Status s = ValidateGroupName(out->name);
    if (!s.ok()) {
      Error(node["name"], Join(path, "name"), s.message());
    }
  }
  if (node["policy"]) {
    ParsePolicy(node["policy"], Join(path, "policy"), &out->policy);
  }
  if (const YAML::Node b = node["backends"]; b) {
    const std::string bp = Join(path, "backends");
    if (b.IsNull()) {
      // An empty list written as "backends:" is fine.
    } else if (!b.IsSequence()) {
      Error(b, bp, "expected a list of backends");
    } else {
      std::map<std::string, size_t> seen;
      for (size_t i = 0; i < b.size(); ++i) {
        Backend backend;
        const std::string ip = absl::StrCat(bp, "[", i, "]");
        ParseBackend(b[i], ip, &backend);
        if (!backend.address.empty()) {
          absl::StatusOr<std::string> canonical =
              CanonicalAddress(backend.address);
          if (canonical.ok()) {
            auto [it, inserted] = seen.emplace(*canonical, i);
            if (!inserted) {
              Error(b[i], ip,
                    absl::StrCat("duplicate backend ", *canonical,
                                 " (also backends[", it->second, "])"));
            }
          }
        }
        out->backends.push_back(std::move(backend));
      }
    }
  }
  if (node["health_check"]) {
    ParseHealthCheck(node["health_check"], Join(path, "health_check"),
                     &out->health_check);
  }
  if (node["panic_threshold"]) {
    GetDouble(node["panic_threshold"], Join(path, "panic_threshold"), 0, 100,
              &out->panic_threshold);
  }
  if (node["slow_start"]) {
    GetDuration(node["slow_start"], Join(path, "slow_start"),
                &out->slow_start);
  }
  if (const YAML::Node o = node["outlier_detection"]; o) {
    const std::string op = Join(path, "outlier_detection");
    if (CheckMap(o, op,
                 {"enabled", "consecutive_failures", "base_ejection_time",
                  "max_ejection_time", "max_ejection_percent"})) {
      out->outlier.enabled = true;
      if (o["enabled"]) {
        GetBool(o["enabled"], Join(op, "enabled"), &out->outlier.enabled);
      }
      if (o["consecutive_failures"]) {
        GetUintAs(o["consecutive_failures"], Join(op, "consecutive_failures"),
                  1, 1000, &out->outlier.consecutive_failures);
      }
      if (o["base_ejection_time"]) {
        GetDuration(o["base_ejection_time"], Join(op, "base_ejection_time"),
                    &out->outlier.base_ejection_time);
      }
      if (o["max_ejection_time"]) {
        GetDuration(o["max_ejection_time"], Join(op, "max_ejection_time"),
                    &out->outlier.max_ejection_time);
      }
      if (o["max_ejection_percent"]) {
        GetDouble(o["max_ejection_percent"], Join(op, "max_ejection_percent"),
                  0, 100, &out->outlier.max_ejection_percent);
      }
    }
  }
  if (const YAML::Node d = node["dns"]; d) {
    const std::string dp = Join(path, "dns");
    if (CheckMap(d, dp,
                 {"name", "port", "srv", "interval", "weight", "locality"})) {
      DnsSpec dns;
      if (!d["name"]) {
        Error(d, dp, "missing key 'name'");
      } else {
        GetString(d["name"], Join(dp, "name"), &dns.name);
      }
      if (d["port"]) {
        GetUintAs(d["port"], Join(dp, "port"), 0, 65535, &dns.port);
      }
      if (d["srv"]) {
        GetBool(d["srv"], Join(dp, "srv"), &dns.srv);
      }
      if (d["interval"]) {
        GetDuration(d["interval"], Join(dp, "interval"), &dns.interval);
      }
      if (d["weight"]) {
        GetUintAs(d["weight"], Join(dp, "weight"), 0, kMaxWeight,
                  &dns.weight);
      }
      if (d["locality"]) {
        ParseLocality(d["locality"], Join(dp, "locality"), &dns.locality);
      }
      out->dns = std::move(dns);
    }
  }
  if (const YAML::Node a = node["aliases"]; a) {
    const std::string ap = Join(path, "aliases");
    if (!a.IsSequence()) {
      Error(a, ap, "expected a list of names");
    } else {
      for (size_t i = 0; i < a.size(); ++i) {
        std::string alias;
        if (GetString(a[i], absl::StrCat(ap, "[", i, "]"), &alias)) {
          out->aliases.push_back(alias);
        }
      }
    }
  }
  if (const YAML::Node l = node["grpclb"]; l) {
    const std::string lp = Join(path, "grpclb");
    if (CheckMap(l, lp, {"drop_in_panic_percent", "max_requests_per_second"})) {
      if (l["drop_in_panic_percent"]) {
        GetDouble(l["drop_in_panic_percent"], Join(lp, "drop_in_panic_percent"),
                  0, 90, &out->grpclb.drop_in_panic_percent);
      }
      if (l["max_requests_per_second"]) {
        GetDouble(l["max_requests_per_second"],
                  Join(lp, "max_requests_per_second"), 0, 1e9,
                  &out->grpclb.max_requests_per_second);
      }
    }
  }
  out->source = GroupSource::kFile;
  out->file = file_;
}

void Parser::ParseTop(const YAML::Node& root, ServerConfig* out) {
  if (root.IsNull()) {
    return;  // An empty file is a valid, empty config.
  }
  if (!CheckMap(root, "",
                {"listen", "metrics", "state_dir", "log_format", "log_level",
                 "shutdown_grace", "limits", "health", "health_listen", "admin",
                 "tls", "session_key_file", "discovery", "grpclb",
                 "groups"})) {
    return;
  }
  if (root["health_listen"]) {
    GetAddress(root["health_listen"], "health_listen", &out->health_listen,
               true, true);
  }
  if (const YAML::Node a = root["admin"]; a) {
    if (CheckMap(a, "admin", {"token_file", "allowed_identities"})) {
      if (a["token_file"]) {
        GetString(a["token_file"], "admin.token_file", &out->admin_token_file);
      }
      if (const YAML::Node ids = a["allowed_identities"]; ids) {
        if (!ids.IsSequence()) {
          Error(ids, "admin.allowed_identities",
                "expected a list of {identity, role}");
        } else {
          for (size_t i = 0; i < ids.size(); ++i) {
            const std::string ip =
                absl::StrCat("admin.allowed_identities[", i, "]");
            if (!CheckMap(ids[i], ip, {"identity", "role"})) {
              continue;
            }
            ServerConfig::AdminIdentity id;
            if (!ids[i]["identity"] || !ids[i]["role"]) {
              Error(ids[i], ip, "needs both 'identity' and 'role'");
              continue;
            }
            GetString(ids[i]["identity"], Join(ip, "identity"), &id.identity);
            if (GetString(ids[i]["role"], Join(ip, "role"), &id.role) &&
                id.role != "admin" && id.role != "read") {
              Error(ids[i]["role"], Join(ip, "role"),
                    absl::StrCat("unknown role '", id.role,
                                 "' (allowed: admin, read)"));
            }
            if (id.identity.empty()) {
              Error(ids[i]["identity"], Join(ip, "identity"), "is empty");
            }
            out->admin_identities.push_back(std::move(id));
          }
        }
      }
    }
  }
  if (const YAML::Node t = root["tls"]; t) {
    if (CheckMap(t, "tls",
                 {"cert_file", "key_file", "client_ca_file",
                  "require_client_cert"})) {
      if (t["cert_file"]) {
        GetString(t["cert_file"], "tls.cert_file", &out->tls_cert_file);
      }
      if (t["key_file"]) {
        GetString(t["key_file"], "tls.key_file", &out->tls_key_file);
      }
      if (t["client_ca_file"]) {
        GetString(t["client_ca_file"], "tls.client_ca_file",
                  &out->tls_client_ca_file);
      }
      if (t["require_client_cert"]) {
        GetBool(t["require_client_cert"], "tls.require_client_cert",
                &out->tls_require_client_cert);
      }
      if (out->tls_cert_file.empty() != out->tls_key_file.empty()) {
        Error(t, "tls", "cert_file and key_file go together");
      }
      if (out->tls_cert_file.empty() &&
          (!out->tls_client_ca_file.empty() || out->tls_require_client_cert)) {
        Error(t, "tls",
              "client_ca_file and require_client_cert need cert_file and "
              "key_file");
      }
      if (out->tls_require_client_cert && out->tls_client_ca_file.empty()) {
        Error(t, "tls.require_client_cert", "needs client_ca_file");
      }
    }
  }
  if (root["session_key_file"]) {
    GetString(root["session_key_file"], "session_key_file",
              &out->session_key_file);
  }
  if (const YAML::Node d = root["discovery"]; d) {
    if (CheckMap(d, "discovery", {"dns_servers"}) && d["dns_servers"]) {
      const YAML::Node servers = d["dns_servers"];
      if (!servers.IsSequence()) {
        Error(servers, "discovery.dns_servers",
              "expected a list of \"ip:port\"");
      } else {
        for (size_t i = 0; i < servers.size(); ++i) {
          const std::string sp = absl::StrCat("discovery.dns_servers[", i, "]");
          std::string server;
          if (GetAddress(servers[i], sp, &server, false)) {
            if (!ParseAddress(server)->is_ip()) {
              Error(servers[i], sp, "must be an IP address and port");
            } else {
              out->dns_servers.push_back(server);
            }
          }
        }
      }
    }
  }
  if (const YAML::Node g = root["grpclb"]; g) {
    if (CheckMap(g, "grpclb", {"client_stats_report_interval", "max_servers"})) {
      if (g["client_stats_report_interval"]) {
        absl::Duration d;
        if (GetDuration(g["client_stats_report_interval"],
                        "grpclb.client_stats_report_interval", &d)) {
          if (d < absl::Seconds(1) || d > absl::Hours(1)) {
            Error(g["client_stats_report_interval"],
                  "grpclb.client_stats_report_interval",
                  "out of range 1s..1h");
          } else {
            out->grpclb_client_stats_report_interval = d;
          }
        }
      }
      if (g["max_servers"]) {
        GetUintAs(g["max_servers"], "grpclb.max_servers", 1, 100000,
                  &out->grpclb_max_servers);
      }
    }
  }
  if (root["listen"]) {
    GetAddress(root["listen"], "listen", &out->listen, false, true);
  }
  if (root["metrics"]) {
    GetAddress(root["metrics"], "metrics", &out->metrics, true, true);
  }
  if (root["state_dir"]) {
    GetString(root["state_dir"], "state_dir", &out->state_dir);
  }
  if (root["log_format"]) {
    if (GetString(root["log_format"], "log_format", &out->log_format) &&
        out->log_format != "text" && out->log_format != "json") {
      Error(root["log_format"], "log_format",
            "expected 'text' or 'json'");
    }
  }
  if (root["log_level"]) {
    if (GetString(root["log_level"], "log_level", &out->log_level) &&
        out->log_level != "debug" && out->log_level != "info" &&
        out->log_level != "warn" && out->log_level != "error") {
      Error(root["log_level"], "log_level",
            "expected one of debug, info, warn, error");
    }
  }
  if (root["shutdown_grace"]) {
    GetDuration(root["shutdown_grace"], "shutdown_grace",
                &out->shutdown_grace);
  }
  if (const YAML::Node l = root["limits"]; l) {
    if (CheckMap(l, "limits",
                 {"max_receive_message_bytes", "max_concurrent_streams",
                  "max_groups", "max_state_bytes", "watch_stall_timeout",
                  "load_window"})) {
      if (l["load_window"]) {
        absl::Duration d;
        if (GetDuration(l["load_window"], "limits.load_window", &d)) {
          if (d < absl::Seconds(1) || d > absl::Minutes(10)) {
            Error(l["load_window"], "limits.load_window",
                  "out of range 1s..10m");
          } else {
            out->load_window = absl::Seconds(absl::ToInt64Seconds(d));
          }
        }
      }
      if (l["watch_stall_timeout"]) {
        absl::Duration d;
        if (GetDuration(l["watch_stall_timeout"], "limits.watch_stall_timeout",
                        &d)) {
          if (d < absl::Milliseconds(100) || d > absl::Hours(1)) {
            Error(l["watch_stall_timeout"], "limits.watch_stall_timeout",
                  "out of range 100ms..1h");
          } else {
            out->watch_stall_timeout = d;
          }
        }
      }
      if (l["max_state_bytes"]) {
        GetUint(l["max_state_bytes"], "limits.max_state_bytes", 65536,
                uint64_t{1} << 40, &out->max_state_bytes);
      }
      if (l["max_receive_message_bytes"]) {
        GetUintAs(l["max_receive_message_bytes"],
                  "limits.max_receive_message_bytes", 1024, 64 << 20,
                  &out->max_receive_message_bytes);
      }
      if (l["max_concurrent_streams"]) {
        GetUintAs(l["max_concurrent_streams"], "limits.max_concurrent_streams",
                  1, 100000, &out->max_concurrent_streams);
      }
      if (l["max_groups"]) {
        GetUintAs(l["max_groups"], "limits.max_groups", 1, 1000000,
                  &out->max_groups);
      }
    }
  }
  if (const YAML::Node h = root["health"]; h) {
    if (CheckMap(h, "health", {"max_concurrent_probes", "merge_window"})) {
      if (h["merge_window"]) {
        absl::Duration d;
        if (GetDuration(h["merge_window"], "health.merge_window", &d)) {
          if (d > absl::Seconds(10)) {
            Error(h["merge_window"], "health.merge_window",
                  "out of range 0..10s");
          } else {
            out->health_merge_window = d;
          }
        }
      }
      if (h["max_concurrent_probes"]) {
        GetUintAs(h["max_concurrent_probes"], "health.max_concurrent_probes",
                  1, 100000, &out->max_concurrent_probes);
      }
    }
  }
  if (const YAML::Node g = root["groups"]; g) {
    if (g.IsNull()) {
      return;
    }
    if (!g.IsSequence()) {
      Error(g, "groups", "expected a list of groups");
      return;
    }
    std::map<std::string, size_t> names;
    for (size_t i = 0; i < g.size(); ++i) {
      const std::string path = absl::StrCat("groups[", i, "]");
      GroupSpec spec;
      const size_t errors_before = errors_.size();
      ParseGroup(g[i], path, &spec);
      if (!spec.name.empty()) {
        auto [it, inserted] = names.emplace(spec.name, i);
        if (!inserted) {
          Error(g[i]["name"], Join(path, "name"),
                absl::StrCat("duplicate group '", spec.name,
                             "' (also groups[", it->second, "])"));
        }
      }
      if (errors_.size() == errors_before) {
        // Cross-field checks (weight sums, nested policies, timeouts
        // within intervals) that the per-key parsing cannot see.
        absl::Status s = ValidateGroupSpec(spec);
        if (!s.ok()) {
          const std::string message(s.message());
          const size_t colon = message.find(": ");
          if (colon != std::string::npos &&
              message.find(' ') > colon) {  // "field.path: message"
            ErrorAtPath(Join(path, message.substr(0, colon)),
                        message.substr(colon + 2));
          } else {
            ErrorAtPath(path, message);
          }
        }
      }
      out->groups.push_back(std::move(spec));
    }
    if (out->groups.size() > out->max_groups) {
      Error(g, "groups",
            absl::StrCat(out->groups.size(), " groups (limits.max_groups is ",
                         out->max_groups, ")"));
    }
  }
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view text) {
  absl::Duration d;
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty()) {
    return absl::InvalidArgumentError("empty duration");
  }
  if (s == "0") {
    return absl::ZeroDuration();
  }
  if (s.find_first_not_of("0123456789.") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "duration '", s, "' needs a unit (ms, s, m, h), e.g. 500ms or 5s"));
  }
  if (!absl::ParseDuration(s, &d) || s.front() == '-' || s.front() == '+') {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid duration '", s, "' (expected e.g. 500ms, 5s, 1m, 1h30m)"));
  }
  if (d == absl::InfiniteDuration() || d > absl::Hours(24 * 365 * 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration '", s, "' is too long"));
  }
  return d;
}

absl::StatusOr<ServerConfig> ParseConfig(absl::string_view text,
                                         const std::string& file) {
  Parser parser(file);
  ServerConfig config;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  try {
    parser.ParseTop(root, &config);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (!parser.errors().empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(parser.errors(), "\n"));
  }
  return config;
}

absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open config file"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat(path, ": read error"));
  }
  return ParseConfig(buffer.str(), path);
}

}  // namespace aside::server
