#include "proto/convert.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/field_error.h"
#include "lib/status_macros.h"

namespace aside {

Locality FromProto(const v1::Locality& pb) {
  return Locality{pb.region(), pb.zone(), pb.subzone()};
}

void ToProto(const Locality& locality, v1::Locality* pb) {
  pb->set_region(locality.region);
  pb->set_zone(locality.zone);
  pb->set_subzone(locality.subzone);
}

absl::StatusOr<Backend> FromProto(absl::string_view field,
                                  const v1::Backend& pb, bool allow_hostname) {
  Backend b;
  b.address = pb.address();
  b.weight = pb.has_weight() ? pb.weight() : kDefaultWeight;
  b.locality = FromProto(pb.locality());
  for (const auto& [key, value] : pb.metadata()) {
    b.metadata.emplace(key, value);
  }
  b.drained = pb.drained();
  ASIDE_RETURN_IF_ERROR(ValidateBackend(field, b, allow_hostname));
  return b;
}

void ToProto(const Backend& backend, v1::Backend* pb) {
  pb->set_address(backend.address);
  pb->set_weight(backend.weight);
  if (!backend.locality.empty()) {
    ToProto(backend.locality, pb->mutable_locality());
  }
  for (const auto& [key, value] : backend.metadata) {
    (*pb->mutable_metadata())[key] = value;
  }
  pb->set_drained(backend.drained);
}

absl::StatusOr<absl::Duration> FromProto(absl::string_view field,
                                         const google::protobuf::Duration& pb) {
  if (pb.seconds() < 0 || pb.nanos() < 0 || pb.nanos() > 999999999 ||
      pb.seconds() > int64_t{315576000000}) {
    return InvalidField(field, "invalid or negative duration");
  }
  return absl::Seconds(pb.seconds()) + absl::Nanoseconds(pb.nanos());
}

void ToProto(absl::Duration d, google::protobuf::Duration* pb) {
  const int64_t nanos = absl::ToInt64Nanoseconds(d);
  pb->set_seconds(nanos / 1000000000);
  pb->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

absl::Status ReadDuration(absl::string_view field, bool has,
                          const google::protobuf::Duration& pb,
                          absl::Duration* out) {
  if (!has) {
    return absl::OkStatus();
  }
  ASIDE_ASSIGN_OR_RETURN(*out, FromProto(field, pb));
  return absl::OkStatus();
}

namespace {

absl::Status ReadFraction(absl::string_view field, bool has, double value,
                          double* out) {
  if (!has) {
    return absl::OkStatus();
  }
  if (!std::isfinite(value)) {
    return InvalidField(field, "not a finite number");
  }
  *out = value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PolicyConfig> FromProto(absl::string_view field,
                                       const v1::Policy& pb) {
  PolicyConfig c;
  auto child = [&](absl::string_view name, bool has,
                   const v1::Policy& child_pb) -> absl::Status {
    if (!has) {
      return absl::OkStatus();
    }
    ASIDE_ASSIGN_OR_RETURN(
        PolicyConfig parsed,
        FromProto(absl::StrCat(field, ".", c.name(), ".", name), child_pb));
    c.child = std::make_shared<const PolicyConfig>(std::move(parsed));
    return absl::OkStatus();
  };
  switch (pb.kind_case()) {
    case v1::Policy::KIND_NOT_SET:
    case v1::Policy::kRoundRobin:
      c.kind = PolicyKind::kRoundRobin;
      break;
    case v1::Policy::kWeightedRoundRobin:
      c.kind = PolicyKind::kWeightedRoundRobin;
      break;
    case v1::Policy::kRandom:
      c.kind = PolicyKind::kRandom;
      break;
    case v1::Policy::kHash:
      c.kind = PolicyKind::kHash;
      break;
    case v1::Policy::kKetama:
      c.kind = PolicyKind::kKetama;
      if (pb.ketama().has_points_per_weight()) {
        c.ketama.points_per_weight = pb.ketama().points_per_weight();
      }
      break;
    case v1::Policy::kMaglev:
      c.kind = PolicyKind::kMaglev;
      if (pb.maglev().has_table_size()) {
        c.maglev.table_size = pb.maglev().table_size();
      }
      break;
    case v1::Policy::kRingHash:
      c.kind = PolicyKind::kRingHash;
      if (pb.ring_hash().has_min_ring_size()) {
        c.ring_hash.min_ring_size = pb.ring_hash().min_ring_size();
      }
      if (pb.ring_hash().has_max_ring_size()) {
        c.ring_hash.max_ring_size = pb.ring_hash().max_ring_size();
      }
      break;
    case v1::Policy::kP2C: {
      c.kind = PolicyKind::kP2c;
      const v1::P2c& p = pb.p2c();
      switch (p.load()) {
        case v1::P2c::LOAD_UNSPECIFIED:
        case v1::P2c::PENDING:
          c.p2c.load = P2cParams::Load::kPending;
          break;
        case v1::P2c::PEAK_EWMA:
          c.p2c.load = P2cParams::Load::kPeakEwma;
          break;
        default:
          return InvalidField(
              absl::StrCat(field, ".p2c.load"),
              absl::StrCat("unknown value ", static_cast<int>(p.load())));
      }
      ASIDE_RETURN_IF_ERROR(ReadDuration(absl::StrCat(field, ".p2c.decay"),
                                         p.has_decay(), p.decay(),
                                         &c.p2c.decay));
      ASIDE_RETURN_IF_ERROR(ReadDuration(
          absl::StrCat(field, ".p2c.default_rtt"), p.has_default_rtt(),
          p.default_rtt(), &c.p2c.default_rtt));
      break;
    }
    case v1::Policy::kLeastTime: {
      c.kind = PolicyKind::kLeastTime;
      const v1::LeastTime& p = pb.least_time();
      switch (p.metric()) {
        case v1::LeastTime::METRIC_UNSPECIFIED:
        case v1::LeastTime::LAST_BYTE:
          c.least_time.metric = LeastTimeParams::Metric::kLastByte;
          break;
        case v1::LeastTime::FIRST_BYTE:
          c.least_time.metric = LeastTimeParams::Metric::kFirstByte;
          break;
        default:
          return InvalidField(
              absl::StrCat(field, ".least_time.metric"),
              absl::StrCat("unknown value ", static_cast<int>(p.metric())));
      }
      ASIDE_RETURN_IF_ERROR(
          ReadFraction(absl::StrCat(field, ".least_time.alpha"), p.has_alpha(),
                       p.alpha(), &c.least_time.alpha));
      ASIDE_RETURN_IF_ERROR(
          ReadDuration(absl::StrCat(field, ".least_time.default_latency"),
                       p.has_default_latency(), p.default_latency(),
                       &c.least_time.default_latency));
      break;
    }
    case v1::Policy::kPrequal: {
      c.kind = PolicyKind::kPrequal;
      const v1::Prequal& p = pb.prequal();
      if (p.has_pool_size()) {
        c.prequal.pool_size = p.pool_size();
      }
      ASIDE_RETURN_IF_ERROR(
          ReadDuration(absl::StrCat(field, ".prequal.max_age"), p.has_max_age(),
                       p.max_age(), &c.prequal.max_age));
      ASIDE_RETURN_IF_ERROR(ReadFraction(
          absl::StrCat(field, ".prequal.hot_quantile"), p.has_hot_quantile(),
          p.hot_quantile(), &c.prequal.hot_quantile));
      break;
    }
    case v1::Policy::kSticky: {
      c.kind = PolicyKind::kSticky;
      const v1::Sticky& p = pb.sticky();
      ASIDE_RETURN_IF_ERROR(ReadDuration(absl::StrCat(field, ".sticky.ttl"),
                                         p.has_ttl(), p.ttl(), &c.sticky.ttl));
      ASIDE_RETURN_IF_ERROR(child("fallback", p.has_fallback(), p.fallback()));
      break;
    }
    case v1::Policy::kLocality: {
      c.kind = PolicyKind::kLocality;
      const v1::LocalityAware& p = pb.locality();
      const std::string prefix = absl::StrCat(field, ".locality.");
      ASIDE_RETURN_IF_ERROR(ReadDuration(
          absl::StrCat(prefix, "weight_expiration_period"),
          p.has_weight_expiration_period(), p.weight_expiration_period(),
          &c.locality.weight_expiration_period));
      ASIDE_RETURN_IF_ERROR(ReadDuration(
          absl::StrCat(prefix, "update_period"), p.has_update_period(),
          p.update_period(), &c.locality.update_period));
      ASIDE_RETURN_IF_ERROR(ReadDuration(
          absl::StrCat(prefix, "smoothing_time_constant"),
          p.has_smoothing_time_constant(), p.smoothing_time_constant(),
          &c.locality.smoothing_time_constant));
      ASIDE_RETURN_IF_ERROR(
          ReadFraction(absl::StrCat(prefix, "utilization_variance_threshold"),
                       p.has_utilization_variance_threshold(),
                       p.utilization_variance_threshold(),
                       &c.locality.utilization_variance_threshold));
      ASIDE_RETURN_IF_ERROR(
          ReadFraction(absl::StrCat(prefix, "remote_probe_fraction"),
                       p.has_remote_probe_fraction(), p.remote_probe_fraction(),
                       &c.locality.remote_probe_fraction));
      ASIDE_RETURN_IF_ERROR(child("child", p.has_child(), p.child()));
      break;
    }
    default:
      return InvalidField(field, "unknown policy");
  }
  ASIDE_RETURN_IF_ERROR(ValidatePolicy(field, c));
  return c;
}

void ToProto(const PolicyConfig& c, v1::Policy* pb) {
  switch (c.kind) {
    case PolicyKind::kRoundRobin:
      pb->mutable_round_robin();
      break;
    case PolicyKind::kWeightedRoundRobin:
      pb->mutable_weighted_round_robin();
      break;
    case PolicyKind::kRandom:
      pb->mutable_random();
      break;
    case PolicyKind::kHash:
      pb->mutable_hash();
      break;
    case PolicyKind::kKetama:
      pb->mutable_ketama()->set_points_per_weight(c.ketama.points_per_weight);
      break;
    case PolicyKind::kMaglev:
      pb->mutable_maglev()->set_table_size(c.maglev.table_size);
      break;
    case PolicyKind::kRingHash:
      pb->mutable_ring_hash()->set_min_ring_size(c.ring_hash.min_ring_size);
      pb->mutable_ring_hash()->set_max_ring_size(c.ring_hash.max_ring_size);
      break;
    case PolicyKind::kP2c: {
      v1::P2c* p = pb->mutable_p2c();
      p->set_load(c.p2c.load == P2cParams::Load::kPeakEwma ? v1::P2c::PEAK_EWMA
                                                           : v1::P2c::PENDING);
      ToProto(c.p2c.decay, p->mutable_decay());
      ToProto(c.p2c.default_rtt, p->mutable_default_rtt());
      break;
    }
    case PolicyKind::kLeastTime: {
      v1::LeastTime* p = pb->mutable_least_time();
      p->set_metric(c.least_time.metric == LeastTimeParams::Metric::kFirstByte
                        ? v1::LeastTime::FIRST_BYTE
                        : v1::LeastTime::LAST_BYTE);
      p->set_alpha(c.least_time.alpha);
      ToProto(c.least_time.default_latency, p->mutable_default_latency());
      break;
    }
    case PolicyKind::kPrequal: {
      v1::Prequal* p = pb->mutable_prequal();
      p->set_pool_size(c.prequal.pool_size);
      ToProto(c.prequal.max_age, p->mutable_max_age());
      p->set_hot_quantile(c.prequal.hot_quantile);
      break;
    }
    case PolicyKind::kSticky: {
      v1::Sticky* p = pb->mutable_sticky();
      ToProto(c.sticky.ttl, p->mutable_ttl());
      ToProto(c.child_or_default(), p->mutable_fallback());
      break;
    }
    case PolicyKind::kLocality: {
      v1::LocalityAware* p = pb->mutable_locality();
      ToProto(c.locality.weight_expiration_period,
              p->mutable_weight_expiration_period());
      ToProto(c.locality.update_period, p->mutable_update_period());
      ToProto(c.locality.smoothing_time_constant,
              p->mutable_smoothing_time_constant());
      p->set_utilization_variance_threshold(
          c.locality.utilization_variance_threshold);
      p->set_remote_probe_fraction(c.locality.remote_probe_fraction);
      ToProto(c.child_or_default(), p->mutable_child());
      break;
    }
  }
}

v1::HealthState ToProto(HealthState state) {
  switch (state) {
    case HealthState::kUnknown:
      return v1::HEALTH_STATE_UNKNOWN;
    case HealthState::kHealthy:
      return v1::HEALTH_STATE_HEALTHY;
    case HealthState::kUnhealthy:
      return v1::HEALTH_STATE_UNHEALTHY;
  }
  return v1::HEALTH_STATE_UNSPECIFIED;
}

void ToProto(const Table& table, v1::Table* pb) {
  ToProto(table.policy(), pb->mutable_policy());
  pb->mutable_backends()->Reserve(static_cast<int>(table.size()));
  for (const Member& m : table.members()) {
    v1::TableBackend* tb = pb->add_backends();
    ToProto(m.backend, tb->mutable_backend());
    tb->set_effective_weight(m.weight);
    tb->set_ready(m.ready);
    tb->set_health(ToProto(m.health));
  }
  pb->set_panic(table.panic());
  for (const ZoneWeight& z : table.zone_weights()) {
    v1::ZoneWeight* zw = pb->add_zone_weights();
    ToProto(z.locality, zw->mutable_locality());
    zw->set_weight(z.weight);
    zw->set_utilization(z.utilization);
    zw->set_host_count(z.host_count);
  }
}

HealthState FromProto(v1::HealthState pb) {
  switch (pb) {
    case v1::HEALTH_STATE_HEALTHY:
      return HealthState::kHealthy;
    case v1::HEALTH_STATE_UNHEALTHY:
      return HealthState::kUnhealthy;
    default:
      return HealthState::kUnknown;
  }
}

absl::StatusOr<Member> FromProto(absl::string_view field,
                                 const v1::TableBackend& pb) {
  Member m;
  ASIDE_ASSIGN_OR_RETURN(
      m.backend, FromProto(absl::StrCat(field, ".backend"), pb.backend(),
                           /*allow_hostname=*/true));
  if (pb.effective_weight() > kMaxWeight) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".effective_weight: ", pb.effective_weight(),
                     " out of range 0..", kMaxWeight));
  }
  if (!v1::HealthState_IsValid(pb.health())) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".health: unknown value ", static_cast<int>(pb.health())));
  }
  m.weight = pb.effective_weight();
  m.ready = pb.ready();
  m.health = FromProto(pb.health());
  return m;
}

absl::StatusOr<ZoneWeight> FromProto(absl::string_view field,
                                     const v1::ZoneWeight& pb) {
  if (!std::isfinite(pb.weight()) || pb.weight() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".weight: not a finite number >= 0"));
  }
  if (!std::isfinite(pb.utilization()) || pb.utilization() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".utilization: not a finite number >= -1"));
  }
  ZoneWeight z;
  z.locality = FromProto(pb.locality());
  z.weight = pb.weight();
  z.utilization = pb.utilization();
  z.host_count = pb.host_count();
  return z;
}

namespace {

absl::Status ZoneWeightsFromProto(
    absl::string_view field,
    const google::protobuf::RepeatedPtrField<v1::ZoneWeight>& pb,
    std::vector<ZoneWeight>* out) {
  out->clear();
  out->reserve(static_cast<size_t>(pb.size()));
  for (int i = 0; i < pb.size(); ++i) {
    ASIDE_ASSIGN_OR_RETURN(ZoneWeight z,
                           FromProto(absl::StrCat(field, "[", i, "]"), pb[i]));
    out->push_back(std::move(z));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TableSpec> FromProto(absl::string_view group,
                                    uint64_t generation, const v1::Table& pb) {
  TableSpec spec;
  spec.group = std::string(group);
  spec.generation = generation;
  ASIDE_ASSIGN_OR_RETURN(spec.policy, FromProto("full.policy", pb.policy()));
  spec.members.reserve(static_cast<size_t>(pb.backends_size()));
  for (int i = 0; i < pb.backends_size(); ++i) {
    ASIDE_ASSIGN_OR_RETURN(
        Member m,
        FromProto(absl::StrCat("full.backends[", i, "]"), pb.backends(i)));
    spec.members.push_back(std::move(m));
  }
  spec.panic_threshold = pb.panic() ? 100 : 0;
  ASIDE_RETURN_IF_ERROR(ZoneWeightsFromProto(
      "full.zone_weights", pb.zone_weights(), &spec.zone_weights));
  return spec;
}

absl::Status ApplyDelta(const v1::TableDelta& pb, uint64_t generation,
                        TableSpec* spec) {
  // Index the held members by address (sorted already when they come from a
  // Table).
  auto by_address = [](const Member& a, const Member& b) {
    return a.backend.address < b.backend.address;
  };
  if (!std::is_sorted(spec->members.begin(), spec->members.end(), by_address)) {
    std::sort(spec->members.begin(), spec->members.end(), by_address);
  }
  auto find = [&](absl::string_view address) {
    auto it =
        std::lower_bound(spec->members.begin(), spec->members.end(), address,
                         [](const Member& m, absl::string_view a) {
                           return m.backend.address < a;
                         });
    return (it != spec->members.end() && it->backend.address == address)
               ? it
               : spec->members.end();
  };
  // Indexes of the removed members, ascending once sorted.
  std::vector<size_t> gone;
  gone.reserve(static_cast<size_t>(pb.removed_size()));
  for (int i = 0; i < pb.removed_size(); ++i) {
    auto it = find(pb.removed(i));
    if (it == spec->members.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "delta.removed[", i, "]: ", pb.removed(i), " is not in the table"));
    }
    gone.push_back(static_cast<size_t>(it - spec->members.begin()));
  }
  std::sort(gone.begin(), gone.end());
  auto is_gone = [&](size_t index) {
    return std::binary_search(gone.begin(), gone.end(), index);
  };
  std::vector<Member> added;
  std::vector<std::string> upserted;
  upserted.reserve(static_cast<size_t>(pb.upserted_size()));
  for (int i = 0; i < pb.upserted_size(); ++i) {
    ASIDE_ASSIGN_OR_RETURN(
        Member m,
        FromProto(absl::StrCat("delta.upserted[", i, "]"), pb.upserted(i)));
    upserted.push_back(m.backend.address);
    auto it = find(m.backend.address);
    if (it != spec->members.end() &&
        !is_gone(static_cast<size_t>(it - spec->members.begin()))) {
      *it = std::move(m);
    } else {
      added.push_back(std::move(m));
    }
  }
  std::sort(upserted.begin(), upserted.end());
  if (auto dup = std::adjacent_find(upserted.begin(), upserted.end());
      dup != upserted.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("delta.upserted: backend ", *dup, " is listed twice"));
  }
  if (!gone.empty()) {
    // Close the gaps in one pass of moves.
    size_t out = gone.front();
    size_t next_gone = 0;
    for (size_t i = gone.front(); i < spec->members.size(); ++i) {
      if (next_gone < gone.size() && gone[next_gone] == i) {
        ++next_gone;
        continue;
      }
      spec->members[out++] = std::move(spec->members[i]);
    }
    spec->members.resize(out);
  }
  if (!added.empty()) {
    std::sort(added.begin(), added.end(), by_address);
    const size_t held = spec->members.size();
    spec->members.reserve(held + added.size());
    for (Member& m : added) {
      spec->members.push_back(std::move(m));
    }
    std::inplace_merge(spec->members.begin(),
                       spec->members.begin() + static_cast<ptrdiff_t>(held),
                       spec->members.end(), by_address);
  }
  if (pb.has_policy()) {
    ASIDE_ASSIGN_OR_RETURN(spec->policy,
                           FromProto("delta.policy", pb.policy()));
  }
  spec->panic_threshold = pb.panic() ? 100 : 0;
  if (pb.zone_weights_changed()) {
    ASIDE_RETURN_IF_ERROR(ZoneWeightsFromProto(
        "delta.zone_weights", pb.zone_weights(), &spec->zone_weights));
  }
  spec->generation = generation;
  return absl::OkStatus();
}

}  // namespace aside
