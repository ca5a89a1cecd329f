// One series read from a running server's /metrics page, for the abuse
// suites' assertions on refusal counters and gauges.
#ifndef ASIDE_TESTS_ABUSE_SCRAPED_METRIC_H_
#define ASIDE_TESTS_ABUSE_SCRAPED_METRIC_H_

#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "tests/testing/http_client.h"

namespace aside::testing {

// The value of `series` as written on the page (`name` or `name{labels}`)
// from 127.0.0.1:`port`; -1 when absent or the scrape fails.
inline double ScrapedMetric(int port, const std::string& series) {
  absl::StatusOr<HttpResponse> r = HttpGet("127.0.0.1", port, "/metrics");
  if (!r.ok()) {
    return -1;
  }
  std::istringstream lines(r->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      double v = -1;
      return absl::SimpleAtod(line.substr(series.size() + 1), &v) ? v : -1;
    }
  }
  return -1;
}

// aside_limit_refused_total{limit="<limit>"}.
inline double LimitRefused(int port, const std::string& limit) {
  return ScrapedMetric(port,
                       "aside_limit_refused_total{limit=\"" + limit + "\"}");
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_ABUSE_SCRAPED_METRIC_H_
