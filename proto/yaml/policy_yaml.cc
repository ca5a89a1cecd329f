// The policy part of the group shorthand: `policy: ketama` or
// `{name: ketama, points_per_weight: 40}`, with nested fallback and child
// policies.
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/policy_config.h"
#include "proto/yaml/shorthand.h"

namespace aside::yaml::internal {

void Converter::Policy(const YAML::Node& node, const Paths& at,
                       v1::Policy* out) {
  Mark(node, at);
  std::string name;
  // (Copy-constructed, never assigned: assigning a YAML::Node rewrites the
  // node it refers to.)
  const YAML::Node name_node = node.IsMap() ? node["name"] : node;
  if (node.IsScalar()) {
    name = node.Scalar();
  } else if (node.IsMap()) {
    if (!name_node) {
      reader_.Error(node, at.yaml, "missing key 'name' (the policy name)");
      return;
    }
    if (!reader_.GetString(name_node, at.Key("name").yaml, &name)) {
      return;
    }
  } else {
    reader_.Error(node, at.yaml,
                  "expected a policy name or a mapping with 'name'");
    return;
  }
  absl::StatusOr<PolicyKind> kind = ParsePolicyName(name);
  if (!kind.ok()) {
    reader_.Error(name_node, at.yaml, kind.status().message());
    return;
  }
  // Parameters are named "policy.<name>.<parameter>" by the validators.
  const Paths params{at.yaml, JoinPath(at.field, name)};
  Mark(node, params);
  auto key = [&](absl::string_view k) { return params.Key(k); };
  const bool is_map = node.IsMap();
  switch (*kind) {
    case PolicyKind::kRoundRobin:
      out->mutable_round_robin();
      break;
    case PolicyKind::kWeightedRoundRobin:
      out->mutable_weighted_round_robin();
      break;
    case PolicyKind::kRandom:
      out->mutable_random();
      break;
    case PolicyKind::kHash:
      out->mutable_hash();
      break;
    case PolicyKind::kKetama: {
      v1::Ketama* p = out->mutable_ketama();
      if (is_map &&
          reader_.CheckMap(node, at.yaml, {"name", "points_per_weight"})) {
        uint32_t v = 0;
        if (YAML::Node n = Child(node, params, "points_per_weight");
            n && reader_.GetUint32(n, key("points_per_weight").yaml, &v)) {
          p->set_points_per_weight(v);
        }
      }
      return;
    }
    case PolicyKind::kMaglev: {
      v1::Maglev* p = out->mutable_maglev();
      if (is_map && reader_.CheckMap(node, at.yaml, {"name", "table_size"})) {
        uint64_t v = 0;
        if (YAML::Node n = Child(node, params, "table_size");
            n && reader_.GetUint64(n, key("table_size").yaml, &v)) {
          p->set_table_size(v);
        }
      }
      return;
    }
    case PolicyKind::kRingHash: {
      v1::RingHash* p = out->mutable_ring_hash();
      if (is_map &&
          reader_.CheckMap(node, at.yaml,
                           {"name", "min_ring_size", "max_ring_size"})) {
        uint64_t v = 0;
        if (YAML::Node n = Child(node, params, "min_ring_size");
            n && reader_.GetUint64(n, key("min_ring_size").yaml, &v)) {
          p->set_min_ring_size(v);
        }
        if (YAML::Node n = Child(node, params, "max_ring_size");
            n && reader_.GetUint64(n, key("max_ring_size").yaml, &v)) {
          p->set_max_ring_size(v);
        }
      }
      return;
    }
    case PolicyKind::kP2c: {
      v1::P2c* p = out->mutable_p2c();
      if (is_map &&
          reader_.CheckMap(node, at.yaml,
                           {"name", "load", "decay", "default_rtt"})) {
        std::string load;
        if (YAML::Node n = Child(node, params, "load");
            n && reader_.GetString(n, key("load").yaml, &load)) {
          if (load == "pending") {
            p->set_load(v1::P2c::PENDING);
          } else if (load == "peak_ewma") {
            p->set_load(v1::P2c::PEAK_EWMA);
          } else {
            reader_.Error(n, key("load").yaml,
                          absl::StrCat("unknown load '", load,
                                       "' (allowed: pending, peak_ewma)"));
          }
        }
        if (YAML::Node n = Child(node, params, "decay")) {
          Duration(n, key("decay"), [&] { return p->mutable_decay(); });
        }
        if (YAML::Node n = Child(node, params, "default_rtt")) {
          Duration(n, key("default_rtt"),
                   [&] { return p->mutable_default_rtt(); });
        }
      }
      return;
    }
    case PolicyKind::kLeastTime: {
      v1::LeastTime* p = out->mutable_least_time();
      if (is_map &&
          reader_.CheckMap(node, at.yaml,
                           {"name", "metric", "alpha", "default_latency"})) {
        std::string metric;
        if (YAML::Node n = Child(node, params, "metric");
            n && reader_.GetString(n, key("metric").yaml, &metric)) {
          if (metric == "first_byte") {
            p->set_metric(v1::LeastTime::FIRST_BYTE);
          } else if (metric == "last_byte") {
            p->set_metric(v1::LeastTime::LAST_BYTE);
          } else {
            reader_.Error(n, key("metric").yaml,
                          absl::StrCat("unknown metric '", metric,
                                       "' (allowed: first_byte, last_byte)"));
          }
        }
        double alpha = 0;
        if (YAML::Node n = Child(node, params, "alpha");
            n && reader_.GetDouble(n, key("alpha").yaml, &alpha)) {
          p->set_alpha(alpha);
        }
        if (YAML::Node n = Child(node, params, "default_latency")) {
          Duration(n, key("default_latency"),
                   [&] { return p->mutable_default_latency(); });
        }
      }
      return;
    }
    case PolicyKind::kPrequal: {
      v1::Prequal* p = out->mutable_prequal();
      if (is_map &&
          reader_.CheckMap(node, at.yaml,
                           {"name", "pool_size", "max_age", "hot_quantile"})) {
        uint32_t pool = 0;
        if (YAML::Node n = Child(node, params, "pool_size");
            n && reader_.GetUint32(n, key("pool_size").yaml, &pool)) {
          p->set_pool_size(pool);
        }
        if (YAML::Node n = Child(node, params, "max_age")) {
          Duration(n, key("max_age"), [&] { return p->mutable_max_age(); });
        }
        double quantile = 0;
        if (YAML::Node n = Child(node, params, "hot_quantile");
            n && reader_.GetDouble(n, key("hot_quantile").yaml, &quantile)) {
          p->set_hot_quantile(quantile);
        }
      }
      return;
    }
    case PolicyKind::kSticky: {
      v1::Sticky* p = out->mutable_sticky();
      if (is_map &&
          reader_.CheckMap(node, at.yaml, {"name", "ttl", "fallback"})) {
        if (YAML::Node n = Child(node, params, "ttl")) {
          Duration(n, key("ttl"), [&] { return p->mutable_ttl(); });
        }
        if (YAML::Node n = node["fallback"]) {
          Policy(n, key("fallback"), p->mutable_fallback());
        }
      }
      return;
    }
    case PolicyKind::kLocality: {
      v1::LocalityAware* p = out->mutable_locality();
      if (is_map &&
          reader_.CheckMap(
              node, at.yaml,
              {"name", "weight_expiration_period", "update_period",
               "smoothing_time_constant", "utilization_variance_threshold",
               "remote_probe_fraction", "child"})) {
        if (YAML::Node n = Child(node, params, "weight_expiration_period")) {
          Duration(n, key("weight_expiration_period"),
                   [&] { return p->mutable_weight_expiration_period(); });
        }
        if (YAML::Node n = Child(node, params, "update_period")) {
          Duration(n, key("update_period"),
                   [&] { return p->mutable_update_period(); });
        }
        if (YAML::Node n = Child(node, params, "smoothing_time_constant")) {
          Duration(n, key("smoothing_time_constant"),
                   [&] { return p->mutable_smoothing_time_constant(); });
        }
        double v = 0;
        if (YAML::Node n =
                Child(node, params, "utilization_variance_threshold");
            n && reader_.GetDouble(
                     n, key("utilization_variance_threshold").yaml, &v)) {
          p->set_utilization_variance_threshold(v);
        }
        if (YAML::Node n = Child(node, params, "remote_probe_fraction");
            n && reader_.GetDouble(n, key("remote_probe_fraction").yaml, &v)) {
          p->set_remote_probe_fraction(v);
        }
        if (YAML::Node n = node["child"]) {
          Policy(n, key("child"), p->mutable_child());
        }
      }
      return;
    }
  }
  if (is_map) {
    reader_.CheckMap(node, at.yaml, {"name"});
  }
}

}  // namespace aside::yaml::internal
