#include "server/health/health_metrics.h"

#include <string>

#include "server/health/health_state.h"

namespace aside::server {
namespace {

constexpr HealthCheckSpec::Kind kProbedKinds[] = {HealthCheckSpec::Kind::kTcp,
                                                  HealthCheckSpec::Kind::kHttp,
                                                  HealthCheckSpec::Kind::kGrpc};
constexpr HealthState kStates[] = {HealthState::kUnknown, HealthState::kHealthy,
                                   HealthState::kUnhealthy};

}  // namespace

HealthMetrics::HealthMetrics(prometheus::Registry& registry) {
  auto& probes = prometheus::BuildCounter()
                     .Name("aside_probes_total")
                     .Help("Health probes finished, by kind and result.")
                     .Register(registry);
  auto& durations =
      prometheus::BuildHistogram()
          .Name("aside_probe_duration_seconds")
          .Help("Health probe duration (start to result), by kind.")
          .Register(registry);
  auto& targets = prometheus::BuildGauge()
                      .Name("aside_health_targets")
                      .Help("Health-check targets by state.")
                      .Register(registry);
  auto& transitions = prometheus::BuildCounter()
                          .Name("aside_health_transitions_total")
                          .Help("Health state changes, by the state entered.")
                          .Register(registry);
  const prometheus::Histogram::BucketBoundaries buckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  for (HealthCheckSpec::Kind kind : kProbedKinds) {
    const std::string name(HealthCheckKindName(kind));
    probes_[Index(kind)][0] =
        &probes.Add({{"kind", name}, {"result", "failure"}});
    probes_[Index(kind)][1] =
        &probes.Add({{"kind", name}, {"result", "success"}});
    durations_[Index(kind)] = &durations.Add({{"kind", name}}, buckets);
  }
  for (HealthState state : kStates) {
    targets_[Index(state)] =
        &targets.Add({{"state", std::string(HealthStateName(state))}});
    if (state != HealthState::kUnknown) {
      transitions_[Index(state)] =
          &transitions.Add({{"to", std::string(HealthStateName(state))}});
    }
  }
}

void HealthMetrics::RecordTransition(HealthState from, HealthState to) {
  targets_[Index(from)]->Decrement();
  targets_[Index(to)]->Increment();
  if (transitions_[Index(to)] != nullptr) {
    transitions_[Index(to)]->Increment();
  }
}

void HealthMetrics::RecordProbe(HealthCheckSpec::Kind kind, bool success,
                                double seconds) {
  const size_t k = Index(kind);
  if (k >= probes_.size()) {
    return;
  }
  probes_[k][success ? 1 : 0]->Increment();
  durations_[k]->Observe(seconds);
}

}  // namespace aside::server
