// Admin.WaitDrained over real gRPC against an in-process server: a stub
// (aside::Client) confirms a drain it applied; a WatchConfirmed subscriber
// that never answers is named at the timeout; an ADS stream confirms by
// ACK and not by NACK; a grpclb stream by the list written; calls a
// reporter has in flight hold the wait until a report ends them; bad input
// and a self-drain credential of another address are refused.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/client.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "server/api/xds/xds_resources.h"
#include "server/server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;
namespace discovery = envoy::service::discovery::v3;

constexpr char kToken[] = "drain-test-token-0123";
constexpr char kPodToken[] = "drain-test-pod-token-0123";

std::string Backend(int i) { return absl::StrCat("127.0.0.1:", 9000 + i); }

class DrainWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokens = dir_.WriteSecret(
        "tokens",
        absl::StrCat(kToken, " admin\n", kPodToken, " self-drain pods\n"));
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("state_dir: ", dir_.path(), "/state\n",
                                 "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                                 "admin: {token_file: ", tokens, "}\n"),
                    "t.yaml");
    ASSERT_OK(config);
    auto server = AsideServer::Create(*config);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->Start());
    target_ = absl::StrCat("127.0.0.1:", server_->grpc_port());
    channel_ = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
    admin_ = v1::Admin::NewStub(channel_);
    v1::CreateGroupRequest create;
    create.mutable_group()->set_name("web");
    create.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    for (int i = 1; i <= 4; ++i) {
      create.mutable_group()->add_backends()->set_address(Backend(i));
    }
    v1::Group g;
    grpc::Status s = admin_->CreateGroup(Context().get(), create, &g);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
    }
  }

  std::unique_ptr<grpc::ClientContext> Context(const char* token = kToken,
                                               int seconds = 20) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
    c->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    return c;
  }

  uint64_t Drain(int backend) {
    v1::DrainBackendsRequest r;
    r.set_group("web");
    r.add_addresses(Backend(backend));
    r.set_drained(true);
    v1::Group g;
    grpc::Status s = admin_->DrainBackends(Context().get(), r, &g);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return g.generation();
  }

  grpc::Status Wait(const std::string& address, absl::Duration timeout,
                    v1::WaitDrainedResponse* out, const char* token = kToken,
                    const std::string& group = "web") {
    v1::WaitDrainedRequest r;
    r.set_group(group);
    r.add_addresses(address);
    r.mutable_timeout()->set_seconds(absl::ToInt64Seconds(timeout));
    r.mutable_timeout()->set_nanos(static_cast<int32_t>(
        absl::ToInt64Nanoseconds(timeout) % 1'000'000'000));
    return admin_->WaitDrained(Context(token).get(), r, out);
  }

  size_t Subscribers() { return server_->confirmations().subscribers("web"); }
  // Until the group has `n` subscribers in the confirmations (a stream
  // subscribes there once the server read its request; no event says so).
  bool AwaitSubscribers(size_t n) {
    return aside::testing::Eventually([&] { return Subscribers() == n; });
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

TEST_F(DrainWaitTest, AStubConfirmsTheDrainItApplied) {
  auto client = Client::Create({.targets = {target_}});
  ASSERT_OK(client);
  ClientGroup* group = (*client)->Group("web");
  ASSERT_TRUE(group->WaitForGeneration(1, absl::Seconds(20)));
  ASSERT_TRUE(AwaitSubscribers(1));

  const uint64_t drained_at = Drain(2);
  v1::WaitDrainedResponse response;
  grpc::Status s = Wait(Backend(2), absl::Seconds(20), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.drained());
  EXPECT_GE(response.generation(), drained_at);
  EXPECT_TRUE(response.pending().empty());
  // At that moment the stub's table no longer offers the backend.
  TableConstPtr table = group->table();
  ASSERT_NE(table, nullptr);
  EXPECT_GE(table->generation(), drained_at);
  bool found = false;
  for (uint32_t i = 0; i < table->members().size(); ++i) {
    if (table->members()[i].backend.address == Backend(2)) {
      found = true;
      EXPECT_FALSE(table->eligible(i));
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(DrainWaitTest, ASubscriberThatNeverAnswersIsNamedAtTheTimeout) {
  auto lb = v1::LoadBalancer::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = lb->WatchConfirmed(&context);
  v1::WatchMessage first;
  first.mutable_request()->add_groups("web");
  first.mutable_request()->set_subscriber("silent-sub");
  ASSERT_TRUE(stream->Write(first));
  ASSERT_TRUE(AwaitSubscribers(1));

  Drain(3);
  v1::WaitDrainedResponse response;
  grpc::Status s = Wait(Backend(3), absl::Milliseconds(500), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(response.drained());
  ASSERT_EQ(response.pending_size(), 1);
  EXPECT_EQ(response.pending(0).edge(), "watch");
  EXPECT_EQ(response.pending(0).subscriber(), "silent-sub");
  EXPECT_THAT(response.pending(0).peer(), HasSubstr("127.0.0.1"));
  context.TryCancel();
}

TEST_F(DrainWaitTest, AWatchConfirmedSubscriberThatAnswersConfirms) {
  auto lb = v1::LoadBalancer::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = lb->WatchConfirmed(&context);
  v1::WatchMessage first;
  first.mutable_request()->add_groups("web");
  ASSERT_TRUE(stream->Write(first));
  v1::GroupUpdate update;
  ASSERT_TRUE(stream->Read(&update));
  EXPECT_TRUE(update.has_full());
  EXPECT_TRUE(update.confirm());

  const uint64_t drained_at = Drain(1);
  // Read up to the drain's update; it asks for an answer.
  while (update.generation() < drained_at) {
    ASSERT_TRUE(stream->Read(&update));
  }
  EXPECT_TRUE(update.confirm());
  v1::WatchMessage answer;
  answer.mutable_applied()->set_group("web");
  answer.mutable_applied()->set_generation(update.generation());
  ASSERT_TRUE(stream->Write(answer));
  v1::WaitDrainedResponse response;
  grpc::Status s = Wait(Backend(1), absl::Seconds(20), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.drained());
  context.TryCancel();
}

TEST_F(DrainWaitTest, AnAdsStreamConfirmsByAckNotByNack) {
  auto ads = discovery::AggregatedDiscoveryService::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = ads->StreamAggregatedResources(&context);
  discovery::DiscoveryRequest request;
  request.mutable_node()->set_id("node-7");
  request.set_type_url(xds::kEndpointType);
  request.add_resource_names("web");
  ASSERT_TRUE(stream->Write(request));
  discovery::DiscoveryResponse first;
  ASSERT_TRUE(stream->Read(&first));
  request.set_version_info(first.version_info());
  request.set_response_nonce(first.nonce());
  ASSERT_TRUE(stream->Write(request));  // ACK
  ASSERT_TRUE(AwaitSubscribers(1));

  Drain(4);
  discovery::DiscoveryResponse second;
  ASSERT_TRUE(stream->Read(&second));
  ASSERT_NE(second.version_info(), first.version_info());
  // NACK: the client keeps the first version.
  request.set_response_nonce(second.nonce());
  request.mutable_error_detail()->set_message("refused for the test");
  ASSERT_TRUE(stream->Write(request));
  v1::WaitDrainedResponse response;
  grpc::Status s = Wait(Backend(4), absl::Milliseconds(500), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(response.drained());
  ASSERT_EQ(response.pending_size(), 1);
  EXPECT_EQ(response.pending(0).edge(), "xds");
  EXPECT_EQ(response.pending(0).subscriber(), "node-7");
  EXPECT_THAT(response.pending(0).peer(), HasSubstr("127.0.0.1"));

  // ACK of the second version: confirmed.
  request.clear_error_detail();
  request.set_version_info(second.version_info());
  ASSERT_TRUE(stream->Write(request));
  response.Clear();
  s = Wait(Backend(4), absl::Seconds(20), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.drained());
  context.TryCancel();
}

TEST_F(DrainWaitTest, AGrpclbStreamConfirmsOnceTheListIsWritten) {
  auto lb = grpc::lb::v1::LoadBalancer::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = lb->BalanceLoad(&context);
  grpc::lb::v1::LoadBalanceRequest request;
  request.mutable_initial_request()->set_name("web");
  ASSERT_TRUE(stream->Write(request));
  grpc::lb::v1::LoadBalanceResponse response;
  ASSERT_TRUE(stream->Read(&response));  // initial response
  ASSERT_TRUE(stream->Read(&response));  // first list
  ASSERT_TRUE(response.has_server_list());
  ASSERT_TRUE(AwaitSubscribers(1));

  Drain(2);
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_server_list());
  EXPECT_EQ(response.server_list().servers_size(), 3);
  v1::WaitDrainedResponse waited;
  grpc::Status s = Wait(Backend(2), absl::Seconds(20), &waited);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(waited.drained());
  context.TryCancel();
}

TEST_F(DrainWaitTest, CallsInFlightHoldTheWaitUntilAReportEndsThem) {
  Drain(2);
  auto lb = v1::LoadBalancer::NewStub(channel_);
  auto context = Context();
  v1::ReportLoadResponse accepted;
  auto reports = lb->ReportLoad(context.get(), &accepted);
  v1::LoadReport report;
  report.set_reporter("pod-a");
  v1::BackendLoad* load = report.add_loads();
  load->set_group("web");
  load->set_address(Backend(2));
  load->set_requests(5);
  load->set_in_flight(3);
  ASSERT_TRUE(reports->Write(report));
  // Folded in on the server's reading thread; nothing to wait on but that.
  ASSERT_TRUE(aside::testing::Eventually(
      [&] { return !server_->loads().InFlight("web", Backend(2)).empty(); }));

  v1::WaitDrainedResponse response;
  grpc::Status s = Wait(Backend(2), absl::Milliseconds(500), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(response.drained());
  EXPECT_TRUE(response.pending().empty());
  ASSERT_EQ(response.in_flight_size(), 1);
  EXPECT_EQ(response.in_flight(0).reporter(), "pod-a");
  EXPECT_EQ(response.in_flight(0).address(), Backend(2));
  EXPECT_EQ(response.in_flight(0).in_flight(), 3u);

  // The next report shows the calls ended: that report ends the wait.
  load->set_in_flight(0);
  ASSERT_TRUE(reports->Write(report));
  response.Clear();
  s = Wait(Backend(2), absl::Seconds(20), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.drained());
  EXPECT_TRUE(response.in_flight().empty());
  ASSERT_TRUE(reports->WritesDone());
  EXPECT_TRUE(reports->Finish().ok());
}

TEST_F(DrainWaitTest, BadInputIsRefusedNamingWhatIsWrong) {
  v1::WaitDrainedResponse response;
  grpc::Status s =
      Wait(Backend(1), absl::Seconds(1), &response, kToken, "nosuch");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("nosuch"));

  s = Wait(Backend(1), absl::Seconds(1), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr(Backend(1)));

  Drain(1);
  s = Wait(Backend(1), absl::Minutes(11), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("timeout"));

  v1::WaitDrainedRequest negative;
  negative.set_group("web");
  negative.add_addresses(Backend(1));
  negative.mutable_timeout()->set_seconds(-1);
  s = admin_->WaitDrained(Context().get(), negative, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("timeout"));

  v1::WaitDrainedRequest none;
  none.set_group("web");
  s = admin_->WaitDrained(Context().get(), none, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("addresses"));

  // A self-drain credential may wait for its own address only.
  s = Wait("10.9.8.7:80", absl::Seconds(1), &response, kPodToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = Wait(Backend(1), absl::Seconds(1), &response, kPodToken);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.drained());  // nobody subscribes
}

}  // namespace
}  // namespace aside::server
