// Small helpers shared by the health tests.
#ifndef ASIDE_TESTS_HEALTH_HEALTH_TEST_UTIL_H_
#define ASIDE_TESTS_HEALTH_HEALTH_TEST_UTIL_H_

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/health/health_registry.h"
#include "server/schema/group_spec.h"

namespace aside::testing {

// How much slower sanitizer builds run: timing budgets of tests that load
// the prober (1000 black holes) scale by it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int kSanitizerSlowdown = 5;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

// A short-interval spec without jitter (tests count probes).
inline server::HealthCheckSpec ProbeSpec(
    server::HealthCheckSpec::Kind kind,
    absl::Duration interval = absl::Milliseconds(100),
    absl::Duration timeout = absl::Milliseconds(500)) {
  server::HealthCheckSpec spec;
  spec.kind = kind;
  spec.interval = interval;
  spec.timeout = timeout;
  spec.jitter = 0;
  spec.rise = 2;
  spec.fall = 3;
  return spec;
}

inline std::string Loopback(uint16_t port) {
  return absl::StrCat("127.0.0.1:", port);
}

// The Prometheus text exposition of `registry`.
inline std::string RenderMetrics(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

// A registry with its own metrics registry.
struct RegistryUnderTest {
  explicit RegistryUnderTest(server::HealthRegistry::Options options = {}) {
    auto created = server::HealthRegistry::Create(options, *metrics);
    if (created.ok()) {
      registry = *std::move(created);
    }
  }
  std::shared_ptr<prometheus::Registry> metrics =
      std::make_shared<prometheus::Registry>();
  std::unique_ptr<server::HealthRegistry> registry;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_HEALTH_HEALTH_TEST_UTIL_H_
