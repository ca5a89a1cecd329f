// The Greeter example end to end: two real backends that register nowhere,
// a server whose config defines the group, and greeter_client picking
// through the stub.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Process;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

TEST(GreeterExampleTest, RequestsAreSpreadOverTheBackendsByTheStub) {
  TempDir dir;
  std::vector<std::unique_ptr<Process>> backends;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(
        auto p, Process::Start({aside::testing::BinDir() + "/greeter_backend",
                                "--listen", "127.0.0.1:0"}));
    ASSERT_OK_AND_ASSIGN(
        std::string line,
        p->WaitForLine("event=greeter.listening", absl::Seconds(10)));
    addresses.push_back(
        absl::StrCat("127.0.0.1:", aside::testing::LogField(line, "port")));
    backends.push_back(std::move(p));
  }
  const std::string config = dir.WriteFile(
      "greeter.yaml",
      absl::StrCat(
          "groups:\n  - name: greeter\n    policy: round_robin\n",
          "    health_check: {kind: tcp, interval: 1s}\n    backends:\n",
          "      - ", addresses[0], "\n      - ", addresses[1], "\n"));
  ASSERT_OK_AND_ASSIGN(
      aside::testing::RunningServer server,
      aside::testing::StartServer(dir.path() + "/state", {"--config", config}));
  aside::testing::CommandResult r = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/greeter_client", "--aside", server.target(),
       "--requests", "6", "--name", "aside"},
      absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat("hello aside from ", addresses[0])));
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat("hello aside from ", addresses[1])));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat(addresses[0], " answered 3")));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat(addresses[1], " answered 3")));
}

}  // namespace
}  // namespace aside
