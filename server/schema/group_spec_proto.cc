#include "server/schema/group_spec_proto.h"

#include "absl/strings/str_cat.h"
#include "lib/field_error.h"
#include "lib/status_macros.h"
#include "proto/convert.h"

namespace aside::server {

absl::StatusOr<HealthCheckSpec> HealthCheckFromProto(
    absl::string_view field, const v1::HealthCheck& pb) {
  HealthCheckSpec spec;
  switch (pb.kind()) {
    case v1::HealthCheck::KIND_UNSPECIFIED:
    case v1::HealthCheck::TCP:
      spec.kind = HealthCheckSpec::Kind::kTcp;
      break;
    case v1::HealthCheck::HTTP:
      spec.kind = HealthCheckSpec::Kind::kHttp;
      break;
    case v1::HealthCheck::GRPC:
      spec.kind = HealthCheckSpec::Kind::kGrpc;
      break;
    case v1::HealthCheck::NONE:
      spec.kind = HealthCheckSpec::Kind::kNone;
      break;
    default:
      return InvalidField(
          JoinFieldPath(field, "kind"),
          absl::StrCat("unknown value ", static_cast<int>(pb.kind())));
  }
  ASIDE_RETURN_IF_ERROR(ReadDuration(JoinFieldPath(field, "interval"),
                                     pb.has_interval(), pb.interval(),
                                     &spec.interval));
  ASIDE_RETURN_IF_ERROR(ReadDuration(JoinFieldPath(field, "timeout"),
                                     pb.has_timeout(), pb.timeout(),
                                     &spec.timeout));
  if (pb.has_jitter()) {
    spec.jitter = pb.jitter();
  }
  if (pb.has_rise()) {
    spec.rise = pb.rise();
  }
  if (pb.has_fall()) {
    spec.fall = pb.fall();
  }
  spec.require_first_probe = pb.require_first_probe();
  spec.port = pb.port();
  if (pb.has_http()) {
    if (spec.kind != HealthCheckSpec::Kind::kHttp) {
      return InvalidField(JoinFieldPath(field, "http"),
                          "only allowed with kind HTTP");
    }
    if (!pb.http().path().empty()) {
      spec.http_path = pb.http().path();
    }
    spec.http_host = pb.http().host();
    if (pb.http().expected_statuses_size() > 0) {
      spec.http_expected_statuses.clear();
      for (const v1::StatusRange& r : pb.http().expected_statuses()) {
        spec.http_expected_statuses.push_back({r.from(), r.to()});
      }
    }
    if (pb.http().has_body_limit()) {
      spec.http_body_limit = pb.http().body_limit();
    }
  }
  if (pb.has_grpc()) {
    if (spec.kind != HealthCheckSpec::Kind::kGrpc) {
      return InvalidField(JoinFieldPath(field, "grpc"),
                          "only allowed with kind GRPC");
    }
    spec.grpc_service = pb.grpc().service();
    spec.grpc_authority = pb.grpc().authority();
  }
  return spec;
}

void HealthCheckToProto(const HealthCheckSpec& spec, v1::HealthCheck* pb) {
  switch (spec.kind) {
    case HealthCheckSpec::Kind::kTcp:
      pb->set_kind(v1::HealthCheck::TCP);
      break;
    case HealthCheckSpec::Kind::kHttp:
      pb->set_kind(v1::HealthCheck::HTTP);
      break;
    case HealthCheckSpec::Kind::kGrpc:
      pb->set_kind(v1::HealthCheck::GRPC);
      break;
    case HealthCheckSpec::Kind::kNone:
      pb->set_kind(v1::HealthCheck::NONE);
      break;
  }
  ToProto(spec.interval, pb->mutable_interval());
  ToProto(spec.timeout, pb->mutable_timeout());
  pb->set_jitter(spec.jitter);
  pb->set_rise(spec.rise);
  pb->set_fall(spec.fall);
  pb->set_require_first_probe(spec.require_first_probe);
  pb->set_port(spec.port);
  if (spec.kind == HealthCheckSpec::Kind::kHttp) {
    v1::HttpCheck* http = pb->mutable_http();
    http->set_path(spec.http_path);
    http->set_host(spec.http_host);
    for (const StatusRange& r : spec.http_expected_statuses) {
      v1::StatusRange* out = http->add_expected_statuses();
      out->set_from(r.from);
      out->set_to(r.to);
    }
    http->set_body_limit(spec.http_body_limit);
  }
  if (spec.kind == HealthCheckSpec::Kind::kGrpc) {
    pb->mutable_grpc()->set_service(spec.grpc_service);
    pb->mutable_grpc()->set_authority(spec.grpc_authority);
  }
}

namespace {

// The conversion alone (types, enum values, presence); every range and
// cross-field rule is ValidateGroupSpec's. Field paths are relative to the
// group.
absl::StatusOr<GroupSpec> ConvertGroup(const v1::Group& pb) {
  GroupSpec spec;
  spec.name = pb.name();
  if (pb.has_policy()) {
    ASIDE_ASSIGN_OR_RETURN(spec.policy, FromProto("policy", pb.policy()));
  }
  spec.backends.reserve(static_cast<size_t>(pb.backends_size()));
  for (int i = 0; i < pb.backends_size(); ++i) {
    ASIDE_ASSIGN_OR_RETURN(
        Backend b, FromProto(absl::StrCat("backends[", i, "]"), pb.backends(i),
                             /*allow_hostname=*/false));
    spec.backends.push_back(std::move(b));
  }
  if (pb.has_health_check()) {
    ASIDE_ASSIGN_OR_RETURN(
        spec.health_check,
        HealthCheckFromProto("health_check", pb.health_check()));
  }
  if (pb.has_panic_threshold()) {
    spec.panic_threshold = pb.panic_threshold();
  }
  ASIDE_RETURN_IF_ERROR(ReadDuration("slow_start", pb.has_slow_start(),
                                     pb.slow_start(), &spec.slow_start));
  if (pb.has_outlier_detection()) {
    const v1::OutlierDetection& o = pb.outlier_detection();
    spec.outlier.enabled = o.enabled();
    if (o.has_consecutive_failures()) {
      spec.outlier.consecutive_failures = o.consecutive_failures();
    }
    ASIDE_RETURN_IF_ERROR(ReadDuration(
        "outlier_detection.base_ejection_time", o.has_base_ejection_time(),
        o.base_ejection_time(), &spec.outlier.base_ejection_time));
    ASIDE_RETURN_IF_ERROR(ReadDuration(
        "outlier_detection.max_ejection_time", o.has_max_ejection_time(),
        o.max_ejection_time(), &spec.outlier.max_ejection_time));
    if (o.has_max_ejection_percent()) {
      spec.outlier.max_ejection_percent = o.max_ejection_percent();
    }
  }
  if (pb.has_dns()) {
    const v1::DnsDiscovery& d = pb.dns();
    DnsSpec dns;
    dns.name = d.name();
    dns.port = d.port();
    dns.srv = d.srv();
    ASIDE_RETURN_IF_ERROR(ReadDuration("dns.interval", d.has_interval(),
                                       d.interval(), &dns.interval));
    if (d.has_weight()) {
      dns.weight = d.weight();
    }
    dns.locality = FromProto(d.locality());
    spec.dns = std::move(dns);
  }
  for (const std::string& alias : pb.aliases()) {
    spec.aliases.push_back(alias);
  }
  if (pb.has_grpclb()) {
    spec.grpclb.drop_in_panic_percent = pb.grpclb().drop_in_panic_percent();
    spec.grpclb.max_requests_per_second = pb.grpclb().max_requests_per_second();
  }
  if (pb.has_orca()) {
    const v1::OrcaOptions& o = pb.orca();
    spec.orca.enabled = o.enabled();
    spec.orca.weights = o.weights();
    spec.orca.move_keys = o.move_keys();
    ASIDE_RETURN_IF_ERROR(ReadDuration("orca.interval", o.has_interval(),
                                       o.interval(), &spec.orca.interval));
    ASIDE_RETURN_IF_ERROR(
        ReadDuration("orca.blackout_period", o.has_blackout_period(),
                     o.blackout_period(), &spec.orca.blackout_period));
    ASIDE_RETURN_IF_ERROR(ReadDuration(
        "orca.weight_expiration_period", o.has_weight_expiration_period(),
        o.weight_expiration_period(), &spec.orca.weight_expiration_period));
    if (o.has_error_utilization_penalty()) {
      spec.orca.error_utilization_penalty = o.error_utilization_penalty();
    }
  }
  spec.source = GroupSource::kStore;
  ASIDE_RETURN_IF_ERROR(ValidateGroupSpec(spec));
  return spec;
}

}  // namespace

absl::StatusOr<GroupSpec> GroupSpecFromProto(absl::string_view field,
                                             const v1::Group& pb) {
  absl::StatusOr<GroupSpec> spec = ConvertGroup(pb);
  if (!spec.ok()) {
    return PrefixFieldPath(field, spec.status());
  }
  return spec;
}

void GroupSpecToProto(const GroupSpec& spec, v1::Group* pb,
                      bool with_backends) {
  pb->set_name(spec.name);
  ToProto(spec.policy, pb->mutable_policy());
  if (with_backends) {
    pb->mutable_backends()->Reserve(static_cast<int>(spec.backends.size()));
    for (const Backend& b : spec.backends) {
      ToProto(b, pb->add_backends());
    }
  }
  HealthCheckToProto(spec.health_check, pb->mutable_health_check());
  pb->set_panic_threshold(spec.panic_threshold);
  if (spec.slow_start > absl::ZeroDuration()) {
    ToProto(spec.slow_start, pb->mutable_slow_start());
  }
  if (spec.outlier != OutlierSpec{}) {
    v1::OutlierDetection* o = pb->mutable_outlier_detection();
    o->set_enabled(spec.outlier.enabled);
    o->set_consecutive_failures(spec.outlier.consecutive_failures);
    ToProto(spec.outlier.base_ejection_time, o->mutable_base_ejection_time());
    ToProto(spec.outlier.max_ejection_time, o->mutable_max_ejection_time());
    o->set_max_ejection_percent(spec.outlier.max_ejection_percent);
  }
  if (spec.dns) {
    v1::DnsDiscovery* d = pb->mutable_dns();
    d->set_name(spec.dns->name);
    d->set_port(spec.dns->port);
    d->set_srv(spec.dns->srv);
    ToProto(spec.dns->interval, d->mutable_interval());
    d->set_weight(spec.dns->weight);
    if (!spec.dns->locality.empty()) {
      ToProto(spec.dns->locality, d->mutable_locality());
    }
  }
  for (const std::string& alias : spec.aliases) {
    pb->add_aliases(alias);
  }
  if (spec.grpclb != GrpclbSpec{}) {
    pb->mutable_grpclb()->set_drop_in_panic_percent(
        spec.grpclb.drop_in_panic_percent);
    pb->mutable_grpclb()->set_max_requests_per_second(
        spec.grpclb.max_requests_per_second);
  }
  if (spec.orca != OrcaSpec{}) {
    v1::OrcaOptions* o = pb->mutable_orca();
    o->set_enabled(spec.orca.enabled);
    ToProto(spec.orca.interval, o->mutable_interval());
    o->set_weights(spec.orca.weights);
    o->set_move_keys(spec.orca.move_keys);
    ToProto(spec.orca.blackout_period, o->mutable_blackout_period());
    ToProto(spec.orca.weight_expiration_period,
            o->mutable_weight_expiration_period());
    o->set_error_utilization_penalty(spec.orca.error_utilization_penalty);
  }
  pb->set_source(spec.source == GroupSource::kFile ? v1::GROUP_SOURCE_FILE
                                                   : v1::GROUP_SOURCE_STORE);
}

void GroupStateToProto(const Table& table, v1::Group* pb) {
  pb->set_generation(table.generation());
  pb->set_ready_count(table.ready_count());
  pb->set_panic(table.panic());
  for (const Member& m : table.members()) {
    v1::TableBackend* tb = pb->add_state();
    ToProto(m.backend, tb->mutable_backend());
    tb->set_effective_weight(m.weight);
    tb->set_ready(m.ready);
    tb->set_health(ToProto(m.health));
  }
}

}  // namespace aside::server
