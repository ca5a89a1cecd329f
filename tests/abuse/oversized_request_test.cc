// Oversized requests against the real aside-server (docs/hardening.md
// #oversized-requests): a stock client with its send limit off
// (tests/abuse/oversized_request.py, python3-grpcio) sends messages far
// beyond the port's limit to Pick, CreateGroup and the health port. Each
// case asserts the answer (RESOURCE_EXHAUSTED naming the limit), that the
// server's peak resident set grew by less than 32 MiB per call, and that
// the server still serves.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/abuse/proc_status.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

using ::testing::HasSubstr;

// Load reports open, so that report streams are read rather than refused
// at their first header.
constexpr char kConfig[] = R"(load_reports: {auth: open}
groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002]
)";

// Under a sanitizer the first touch of memory maps its shadow and
// metadata too (about 80 MiB in a TSan build, whatever the request): the
// bound is that, still far below buffering a 256 MiB request.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kPerCallBoundKiB = 160 * 1024;
constexpr bool kSanitized = true;
#else
constexpr int64_t kPerCallBoundKiB = 32 * 1024;
constexpr bool kSanitized = false;
#endif

// The process's peak resident set (VmHWM), in KiB.
int64_t PeakKiB(pid_t pid, const char* field = "VmHWM:") {
  return ProcStatusKiB(pid, field);
}

struct Case {
  const char* name;
  const char* method;
  bool health_port;
  int mib;
  int calls;
  const char* limit;  // named in the refusal
  // Set: the server may map at most this many MiB more than it has mapped
  // when the call starts (RLIMIT_AS; its idle mapping, mostly thread stacks
  // and malloc arenas reserved but not used, is far larger than its RSS).
  int address_space_headroom_mib = 0;
};

class OversizedRequestTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto server =
        StartServer(dir_->path() + "/state",
                    {"--config", dir_->WriteFile("aside.yaml", kConfig),
                     "--health-listen", "127.0.0.1:0"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = new RunningServer(std::move(*server));
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  static void ExpectServing() {
    auto stub = v1::LoadBalancer::NewStub(grpc::CreateChannel(
        server_->target(), grpc::InsecureChannelCredentials()));
    v1::PickRequest r;
    r.set_group("web");
    v1::PickResponse response;
    grpc::Status s = stub->Pick(Context().get(), r, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  static TempDir* dir_;
  static RunningServer* server_;
};

TempDir* OversizedRequestTest::dir_ = nullptr;
RunningServer* OversizedRequestTest::server_ = nullptr;

TEST_P(OversizedRequestTest, IsRefusedWithoutBeingBuffered) {
  const Case& c = GetParam();
  ASSERT_NE(server_, nullptr);
  ASSERT_GT(server_->health_port, 0);
  ExpectServing();  // warm: the first calls' allocations are not the attack's
  const int port = c.health_port ? server_->health_port : server_->grpc_port;
  const pid_t pid = server_->process->pid();
  if (c.address_space_headroom_mib > 0 && kSanitized) {
    GTEST_SKIP() << "a sanitizer maps shadow memory beyond any headroom";
  }
  if (c.address_space_headroom_mib > 0) {
    const auto limit = static_cast<rlim_t>(
        (PeakKiB(pid, "VmSize:") + c.address_space_headroom_mib * 1024) * 1024);
    const rlimit as{.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
    ASSERT_EQ(prlimit(pid, RLIMIT_AS, &as, nullptr), 0) << std::strerror(errno);
  }
  const int64_t before = PeakKiB(pid);
  CommandResult run = RunCommand(
      {"/usr/bin/python3", SourceDir() + "/tests/abuse/oversized_request.py",
       absl::StrCat("127.0.0.1:", port), c.method, absl::StrCat(c.mib),
       absl::StrCat(c.calls)},
      absl::Seconds(120));
  server_->process->ReadAvailable();
  const int64_t after = PeakKiB(server_->process->pid());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr(absl::StrCat("statuses=RESOURCE_EXHAUSTED:", c.calls)))
      << run.output;
  EXPECT_THAT(run.output, HasSubstr(c.limit)) << run.output;
  const int64_t growth = after - before;
  std::cout << "event=oversized.measured case=" << c.name
            << " peak_before_kib=" << before << " peak_after_kib=" << after
            << " growth_kib=" << growth << "\n";
  EXPECT_LT(growth, kPerCallBoundKiB * c.calls)
      << c.calls << " × " << c.mib << " MiB to " << c.method;
  ExpectServing();
  if (c.address_space_headroom_mib > 0) {
    const rlimit unlimited{.rlim_cur = RLIM_INFINITY,
                           .rlim_max = RLIM_INFINITY};
    EXPECT_EQ(prlimit(pid, RLIMIT_AS, &unlimited, nullptr), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Requests, OversizedRequestTest,
    ::testing::Values(
        Case{"pick_256mib", "/aside.v1.LoadBalancer/Pick", false, 256, 1,
             "limits.max_receive_message_bytes (4194304 bytes)"},
        Case{"pick_8x64mib", "/aside.v1.LoadBalancer/Pick", false, 64, 8,
             "limits.max_receive_message_bytes"},
        Case{"create_group_256mib", "/aside.v1.Admin/CreateGroup", false, 256,
             1, "limits.max_receive_message_bytes"},
        Case{"create_group_8x64mib", "/aside.v1.Admin/CreateGroup", false, 64,
             8, "limits.max_receive_message_bytes"},
        // Streams: the same bound for the first message of each (a stock
        // client sends it as any call's).
        Case{"watch_64mib", "/aside.v1.LoadBalancer/Watch", false, 64, 1,
             "limits.max_receive_message_bytes"},
        Case{"report_load_64mib", "/aside.v1.LoadBalancer/ReportLoad", false,
             64, 1, "limits.max_receive_message_bytes"},
        Case{"ads_64mib",
             "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
             "StreamAggregatedResources",
             false, 64, 1, "limits.max_receive_message_bytes"},
        Case{"lrs_64mib",
             "/envoy.service.load_stats.v3.LoadReportingService/"
             "StreamLoadStats",
             false, 64, 1, "limits.max_receive_message_bytes"},
        Case{"grpclb_64mib", "/grpc.lb.v1.LoadBalancer/BalanceLoad", false, 64,
             1, "limits.max_receive_message_bytes"},
        Case{"health_256mib", "/grpc.health.v1.Health/Check", true, 256, 1,
             "the health port's limit (4096 bytes)"},
        Case{"health_8x64mib", "/grpc.health.v1.Health/Check", true, 64, 8,
             "the health port's limit"},
        // The chart's default memory limit is 512 MiB: 1 GiB in a server
        // that may grow by 512 MiB.
        Case{"pick_1gib_in_512mib", "/aside.v1.LoadBalancer/Pick", false, 1024,
             1, "limits.max_receive_message_bytes", 512}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.name);
    });

// Calls come to gRPC through the relay's socket pair, and still carry the
// client's own address (what per-peer limits, logs and load-report sources
// read).
TEST(RelayedCallTest, KeepsTheClientsAddress) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kConfig)}));
  auto admin = v1::Admin::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  v1::CreateGroupRequest request;
  v1::Group response;
  // Refused (no Admin credentials on this server), and logged with its peer.
  EXPECT_FALSE(admin->CreateGroup(Context().get(), request, &response).ok());
  ASSERT_OK_AND_ASSIGN(
      std::string line,
      server.process->WaitForLine("event=admin.mutation", absl::Seconds(10)));
  EXPECT_THAT(line, HasSubstr("peer=ipv4:127.0.0.1:"));
}

}  // namespace
}  // namespace aside::testing
