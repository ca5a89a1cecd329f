// The bad-input catalogue of the Pick and ReportLoad surfaces (config,
// Admin and token files have theirs in config_test, limits_config_test,
// admin_service_test and admin_auth_test): table-driven, over real gRPC to
// an in-process server. Each case asserts the status code, that the
// message names the field, and that nothing changed.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "aside/v1/lookaside.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ServerConfig> config = ParseConfig(R"(
state_dir: )" + state_dir_.path() + R"(
listen: 127.0.0.1:0
metrics: ""
load_reports: {auth: open}
groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002, 127.0.0.1:9003]
)",
                                                      "test.yaml");
    ASSERT_OK(config);
    auto server = AsideServer::Create(*config);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->Start());
    stub_ = v1::LoadBalancer::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
    }
  }

  grpc::Status Pick(const v1::PickRequest& request,
                    v1::PickResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return stub_->Pick(&context, request, response);
  }

  std::string PickWeb() {
    v1::PickRequest request;
    request.set_group("web");
    v1::PickResponse response;
    const grpc::Status s = Pick(request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.backends_size() > 0 ? response.backends(0).address() : "";
  }

  v1::ReportLoadResponse Report(const v1::LoadReport& report) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::ReportLoadResponse response;
    auto writer = stub_->ReportLoad(&context, &response);
    EXPECT_TRUE(writer->Write(report));
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  aside::testing::TempDir state_dir_;
  std::unique_ptr<AsideServer> server_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

struct PickCase {
  const char* name;
  std::function<void(v1::PickRequest&)> fill;
  grpc::StatusCode code;
  const char* message;  // names the field
};

TEST_F(BadInputTest, PickRefusesEachBadFieldAndChangesNothing) {
  const PickCase cases[] = {
      {"no group", [](v1::PickRequest&) {}, grpc::StatusCode::INVALID_ARGUMENT,
       "group: required"},
      {"bad group name", [](v1::PickRequest& r) { r.set_group("Bad Name"); },
       grpc::StatusCode::INVALID_ARGUMENT, "group: "},
      {"unknown group", [](v1::PickRequest& r) { r.set_group("nope"); },
       grpc::StatusCode::NOT_FOUND, "group 'nope' not found"},
      // Echoed names are escaped: no raw NUL, CR or LF in a status.
      {"control characters in the group",
       [](v1::PickRequest& r) { r.set_group(std::string("a\0b\r\nc", 6)); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "group name 'a\\000b\\r\\nc' must match"},
      {"key too long",
       [](v1::PickRequest& r) {
         r.set_group("web");
         r.set_key(std::string(4097, 'k'));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "key: 4097 bytes (at most 4096)"},
      {"key_bytes too long",
       [](v1::PickRequest& r) {
         r.set_group("web");
         r.set_key_bytes(std::string(4097, '\xff'));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "key_bytes: 4097 bytes"},
      {"key and key_bytes",
       [](v1::PickRequest& r) {
         r.set_group("web");
         r.set_key("a");
         r.set_key_bytes("b");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "key: set key (text) or key_bytes"},
      {"count too high",
       [](v1::PickRequest& r) {
         r.set_group("web");
         r.set_count(17);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "count: 17 out of range 1..16"},
      {"too many excludes",
       [](v1::PickRequest& r) {
         r.set_group("web");
         for (int i = 0; i < 1025; ++i) {
           r.add_exclude("127.0.0.1:9001");
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT, "exclude: 1025 entries"},
      {"session token too long",
       [](v1::PickRequest& r) {
         r.set_group("web");
         r.set_session_token(std::string(1025, 't'));
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "session_token: longer than 1024 bytes"},
  };
  // Round robin over three backends: the next three picks are a rotation.
  const std::vector<std::string> before = {PickWeb(), PickWeb(), PickWeb()};
  for (const PickCase& c : cases) {
    v1::PickRequest request;
    c.fill(request);
    v1::PickResponse response;
    const grpc::Status s = Pick(request, &response);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.name;
    EXPECT_EQ(response.backends_size(), 0) << c.name;
    for (char ch : s.error_message()) {
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << c.name << ": " << int{ch};
    }
  }
  // Nothing moved: no refused request took a turn of the rotation.
  const std::vector<std::string> after = {PickWeb(), PickWeb(), PickWeb()};
  EXPECT_EQ(after, before);
}

struct ReportCase {
  const char* name;
  std::function<void(v1::BackendLoad&)> fill;
  const char* reason;  // names the field
};

TEST_F(BadInputTest, ReportLoadRejectsEachBadObservationAndChangesNothing) {
  auto good = [](v1::BackendLoad& l) {
    l.set_group("web");
    l.set_address("127.0.0.1:9001");
    l.set_requests(10);
  };
  const ReportCase cases[] = {
      {"unknown backend",
       [&](v1::BackendLoad& l) {
         good(l);
         l.set_address("127.0.0.1:9999");
       },
       "loads[0].address: 127.0.0.1:9999 is not a backend"},
      {"unknown group",
       [&](v1::BackendLoad& l) {
         good(l);
         l.set_group("nope");
       },
       "loads[0].address: 127.0.0.1:9001 is not a backend of group 'nope'"},
      {"no group",
       [&](v1::BackendLoad& l) {
         good(l);
         l.clear_group();
       },
       "loads[0].group: required"},
      {"NaN cpu",
       [&](v1::BackendLoad& l) {
         good(l);
         l.mutable_utilization()->set_cpu(std::nan(""));
       },
       "loads[0].utilization.cpu"},
      {"negative application utilisation",
       [&](v1::BackendLoad& l) {
         good(l);
         l.mutable_utilization()->set_application(-1);
       },
       "loads[0].utilization.application"},
      {"failures above requests",
       [&](v1::BackendLoad& l) {
         good(l);
         l.set_failures(11);
       },
       "loads[0].failures"},
      {"negative latency",
       [&](v1::BackendLoad& l) {
         good(l);
         l.mutable_latency_sum()->set_seconds(-1);
       },
       "loads[0].latency_sum"},
  };
  for (const ReportCase& c : cases) {
    v1::LoadReport report;
    report.set_reporter("pod-a");
    c.fill(*report.add_loads());
    const v1::ReportLoadResponse response = Report(report);
    EXPECT_EQ(response.accepted(), 0u) << c.name;
    ASSERT_EQ(response.rejected_size(), 1) << c.name;
    EXPECT_THAT(response.rejected(0).reason(), HasSubstr(c.reason)) << c.name;
  }
  // The stream and the server go on: a good report after them is taken,
  // and the group still rotates over all three backends. (That a rejected
  // observation leaves the aggregate and the reporter's baseline as they
  // were is LoadAggregatorTest.BadObservationsAreRejectedAndChangeNothing.)
  v1::LoadReport first;
  first.set_reporter("pod-a");
  good(*first.add_loads());
  EXPECT_EQ(Report(first).accepted(), 1u);
  const std::vector<std::string> picks = {PickWeb(), PickWeb(), PickWeb()};
  EXPECT_EQ(std::set<std::string>(picks.begin(), picks.end()).size(), 3u);
}

}  // namespace
}  // namespace aside::server
