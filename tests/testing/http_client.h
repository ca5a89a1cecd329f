// A minimal blocking HTTP/1.1 GET for tests (Boost.Beast), bounded by a
// timeout.
#ifndef ASIDE_TESTS_TESTING_HTTP_CLIENT_H_
#define ASIDE_TESTS_TESTING_HTTP_CLIENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aside::testing {

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// `headers` are sent as given (name, value).
absl::StatusOr<HttpResponse> HttpGet(
    const std::string& host, int port, const std::string& target,
    absl::Duration timeout = absl::Seconds(10),
    const std::vector<std::pair<std::string, std::string>>& headers = {});

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_HTTP_CLIENT_H_
