// Reads one series of a prometheus-cpp registry, for assertions on the
// server's own metrics.
#ifndef ASIDE_TESTS_HTTP_METRIC_VALUE_H_
#define ASIDE_TESTS_HTTP_METRIC_VALUE_H_

#include <prometheus/registry.h>

#include <map>
#include <string>

namespace aside::testing {

// The value of counter or gauge `name` with exactly `labels`; -1 if there is
// no such series.
inline double MetricValue(
    const prometheus::Registry& registry, const std::string& name,
    const std::map<std::string, std::string>& labels = {}) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) {
      continue;
    }
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& label : metric.label) {
        have[label.name] = label.value;
      }
      if (have != labels) {
        continue;
      }
      return family.type == prometheus::MetricType::Gauge
                 ? metric.gauge.value
                 : metric.counter.value;
    }
  }
  return -1;
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_HTTP_METRIC_VALUE_H_
