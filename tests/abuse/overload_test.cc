// Overload: past limits.max_watch_streams_per_peer or limits.max_groups the
// server answers RESOURCE_EXHAUSTED naming the limit, everyone under it
// keeps being served, and the refusal is counted in
// aside_limit_refused_total.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kConfig[] = R"(limits: {max_watch_streams_per_peer: 3}
groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)";

// One Watch call on `channel`; open() reads its first update (bounded).
struct Watch {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> reader;

  Watch(v1::LoadBalancer::Stub& stub) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
    v1::WatchRequest request;
    request.add_groups("web");
    reader = stub.Watch(&context, request);
  }
  bool FirstUpdate() {
    v1::GroupUpdate update;
    return reader->Read(&update) && update.group() == "web";
  }
};

std::shared_ptr<grpc::Channel> Channel(const std::string& target) {
  return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
}

TEST(OverloadTest, WatchStreamsPastThePerPeerCapAreRefusedAndCounted) {
  TempDir dir;
  // Listening on every address, so that 127.0.0.1 and ::1 are two peers.
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kConfig), "--listen",
                   "[::]:0"}));
  ASSERT_EQ(LimitRefused(server.metrics_port, "max_watch_streams_per_peer"), 0);
  auto stub = v1::LoadBalancer::NewStub(
      Channel(absl::StrCat("127.0.0.1:", server.grpc_port)));
  std::vector<std::unique_ptr<Watch>> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(std::make_unique<Watch>(*stub));
    ASSERT_TRUE(open.back()->FirstUpdate()) << i;
  }
  // The fourth from the same address is refused, naming the limit.
  {
    Watch refused(*stub);
    EXPECT_FALSE(refused.FirstUpdate());
    const grpc::Status s = refused.reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(),
                HasSubstr("limits.max_watch_streams_per_peer"));
    EXPECT_THAT(s.error_message(), HasSubstr("127.0.0.1"));
  }
  EXPECT_EQ(LimitRefused(server.metrics_port, "max_watch_streams_per_peer"), 1);
  // Everything else from that peer is served: its open streams and Pick.
  {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::PickRequest r;
    r.set_group("web");
    v1::PickResponse response;
    const grpc::Status s = stub->Pick(&c, r, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  // Another peer, under its own cap, is served.
  auto v6 = v1::LoadBalancer::NewStub(
      Channel(absl::StrCat("[::1]:", server.grpc_port)));
  {
    Watch other(*v6);
    if (other.FirstUpdate()) {
      other.context.TryCancel();
    } else {
      const grpc::Status s = other.reader->Finish();
      EXPECT_NE(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << s.error_message();
      // No IPv6 loopback here: that part is not checked.
    }
  }
  // A stream that ends gives its place back (the server learns of the
  // cancellation asynchronously: retried, bounded).
  open.front()->context.TryCancel();
  open.erase(open.begin());
  bool admitted = false;
  for (int attempt = 0; attempt < 100 && !admitted; ++attempt) {
    auto again = std::make_unique<Watch>(*stub);
    if (again->FirstUpdate()) {
      admitted = true;
      open.push_back(std::move(again));
    } else {
      again->reader->Finish();
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  EXPECT_TRUE(admitted);
  for (auto& w : open) {
    w->context.TryCancel();
  }
}

TEST(OverloadTest, GroupsPastTheCapAreRefusedAndCounted) {
  TempDir dir;
  const std::string token = "overload-test-admin-token";
  const std::string config = absl::StrCat(
      "limits: {max_groups: 1}\nadmin: {token_file: ",
      dir.WriteSecret("tokens", token + " admin\n"), "}\n", R"(groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)");
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", config)}));
  auto admin = v1::Admin::NewStub(Channel(server.target()));
  v1::CreateGroupRequest request;
  request.mutable_group()->set_name("more");
  request.mutable_group()->mutable_health_check()->set_kind(
      v1::HealthCheck::NONE);
  v1::Group created;
  const grpc::Status s =
      admin->CreateGroup(Context(token).get(), request, &created);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("limits.max_groups"));
  EXPECT_EQ(LimitRefused(server.metrics_port, "max_groups"), 1);
  // The group under the cap is served as before.
  auto lb = v1::LoadBalancer::NewStub(Channel(server.target()));
  v1::PickRequest pick;
  pick.set_group("web");
  v1::PickResponse picked;
  const grpc::Status p = lb->Pick(Context().get(), pick, &picked);
  EXPECT_TRUE(p.ok()) << p.error_message();
}

}  // namespace
}  // namespace aside::testing
