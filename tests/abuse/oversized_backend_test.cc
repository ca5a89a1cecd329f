// A backend that answers the server's own calls with oversized messages
// (docs/hardening.md#what-backends-send): a stock gRPC server with its send
// limit off (tests/abuse/hostile_backend.py, python3-grpcio) answers every
// grpc health probe and the ORCA stream with one huge message. The server
// must stop each connection before it buffers the message (counted in
// aside_backend_refused_total), its peak resident set must not grow by the
// message, and it must still serve.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/abuse/proc_status.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kBoundKiB = 160 * 1024;
constexpr bool kSanitized = true;
#else
constexpr int64_t kBoundKiB = 32 * 1024;
constexpr bool kSanitized = false;
#endif

struct Case {
  const char* name;
  int mib;
  // Set: the server may map at most this many MiB more than it has mapped
  // when the backend is added (RLIMIT_AS), as in a memory-limited pod.
  int address_space_headroom_mib = 0;
};

class OversizedBackendTest : public ::testing::TestWithParam<Case> {};

TEST_P(OversizedBackendTest, IsStoppedBeforeItIsBuffered) {
  const Case& c = GetParam();
  if (c.address_space_headroom_mib > 0 && kSanitized) {
    GTEST_SKIP() << "a sanitizer maps shadow memory beyond any headroom";
  }
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Process> backend,
      Process::Start({"/usr/bin/python3",
                      SourceDir() + "/tests/abuse/hostile_backend.py",
                      absl::StrCat(c.mib)}));
  ASSERT_OK_AND_ASSIGN(
      std::string listening,
      backend->WaitForLine("event=hostile.listening", absl::Seconds(60)));
  const std::string address =
      absl::StrCat("127.0.0.1:", LogField(listening, "port"));

  TempDir dir;
  // The hostile backend is added once the server runs and its limit is
  // set, so that its first probe and stream meet them.
  const std::string config_path = dir.WriteFile("aside.yaml", R"(groups:
  - name: idle
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)");
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state", {"--config", config_path}));
  const pid_t pid = server.process->pid();
  if (c.address_space_headroom_mib > 0) {
    const auto limit = static_cast<rlim_t>(
        (ProcStatusKiB(pid, "VmSize:") + c.address_space_headroom_mib * 1024) *
        1024);
    const rlimit as{.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
    ASSERT_EQ(prlimit(pid, RLIMIT_AS, &as, nullptr), 0) << std::strerror(errno);
  }
  const int64_t before = ProcStatusKiB(pid, "VmHWM:");
  dir.WriteFile("aside.yaml", absl::StrCat(R"(groups:
  - name: idle
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
  - name: web
    policy: round_robin
    health_check: {kind: grpc, interval: 5s, timeout: 5s}
    orca: {interval: 1s}
    backends: [")",
                                           address, "\"]\n"));
  server.process->Signal(SIGHUP);

  const std::string series = absl::StrCat(
      "aside_backend_refused_total{backend=\"", address, "\",kind=\"");
  const int metrics = server.metrics_port;
  EXPECT_TRUE(Eventually(
      [&] {
        server.process->ReadAvailable();
        return ScrapedMetric(metrics, series + "health\"}") >= 1 &&
               ScrapedMetric(metrics, series + "orca\"}") >= 1;
      },
      absl::Seconds(60)))
      << "health " << ScrapedMetric(metrics, series + "health\"}") << ", orca "
      << ScrapedMetric(metrics, series + "orca\"}");
  ASSERT_OK_AND_ASSIGN(
      std::string line,
      server.process->WaitForLine("event=backend.refused", absl::Seconds(10)));
  EXPECT_THAT(line, ::testing::HasSubstr(address));

  const int64_t growth = ProcStatusKiB(pid, "VmHWM:") - before;
  std::cout << "event=oversized_backend.measured case=" << c.name
            << " growth_kib=" << growth << "\n";
  EXPECT_LT(growth, kBoundKiB) << c.mib << " MiB from a backend";

  // Still serving.
  auto stub = v1::LoadBalancer::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  v1::PickRequest request;
  request.set_group("idle");
  v1::PickResponse response;
  grpc::Status s = stub->Pick(Context().get(), request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

INSTANTIATE_TEST_SUITE_P(
    Backends, OversizedBackendTest,
    ::testing::Values(Case{"256mib", 256},
                      // The chart's default memory limit is 512 MiB.
                      Case{"1gib_in_512mib", 1024, 512}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace aside::testing
