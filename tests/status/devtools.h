// A headless Chromium driven over the DevTools protocol, for tests of the
// status page in a real browser. The browser is Debian's `chromium`
// (scripts/install-deps.sh); it runs with its own profile in a temp dir,
// listens for DevTools on a loopback port it picks, and is ended when the
// object goes.
//
// Every call is bounded by its timeout. Not thread-safe: one test thread.
#ifndef ASIDE_TESTS_STATUS_DEVTOOLS_H_
#define ASIDE_TESTS_STATUS_DEVTOOLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/process.h"

namespace aside::testing {

class HeadlessBrowser {
 public:
  // Starts Chromium on `url` (window `width` x `height`) and connects to
  // the page.
  static absl::StatusOr<std::unique_ptr<HeadlessBrowser>> Open(
      const std::string& url, int width = 1280, int height = 900,
      absl::Duration timeout = absl::Seconds(30));
  ~HeadlessBrowser();

  // Evaluates `expression` in the page and returns its value as JSON text
  // (strings quoted), or the exception it threw as an error.
  absl::StatusOr<std::string> Evaluate(
      const std::string& expression,
      absl::Duration timeout = absl::Seconds(10));
  // The same, for expressions whose value is a string: the string itself.
  absl::StatusOr<std::string> EvaluateString(const std::string& expression);

  // A PNG of the page as it is now.
  absl::StatusOr<std::string> Screenshot(
      absl::Duration timeout = absl::Seconds(20));

  // Polls `expression` until it evaluates to `true`; false on timeout.
  bool WaitFor(const std::string& expression, absl::Duration timeout);

  class Connection;

 private:
  HeadlessBrowser() = default;
  // Sends one DevTools command and returns its `result` object as JSON.
  absl::StatusOr<std::string> Call(const std::string& method,
                                   const std::string& params_json,
                                   absl::Duration timeout);

  TempDir profile_;
  std::unique_ptr<Process> process_;
  std::unique_ptr<Connection> connection_;
  int next_id_ = 1;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_STATUS_DEVTOOLS_H_
