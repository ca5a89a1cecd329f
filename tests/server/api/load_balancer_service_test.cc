// Pick over real gRPC on loopback against an in-process server.
#include "server/api/load_balancer_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

class PickTest : public ::testing::Test {
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
    backends:
      - 127.0.0.1:9001
      - 127.0.0.1:9002
      - address: 127.0.0.1:9003
        locality: {region: r, zone: z}
        metadata: {tier: gold}
  - name: drained
    health_check: {kind: none}
    backends:
      - {address: 127.0.0.1:9101, drained: true}
  - name: empty
)",
                                                      "test.yaml");
    ASSERT_OK(config);
    auto server = AsideServer::Create(*config);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->Start());
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    stub_ = v1::LoadBalancer::NewStub(channel_);
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

  aside::testing::TempDir state_dir_;
  std::unique_ptr<AsideServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

TEST_F(PickTest, RoundRobinOverRealGrpc) {
  std::map<std::string, int> counts;
  uint64_t generation = 0;
  for (int i = 0; i < 30; ++i) {
    v1::PickRequest request;
    request.set_group("web");
    v1::PickResponse response;
    ASSERT_TRUE(Pick(request, &response).ok());
    ASSERT_EQ(response.backends_size(), 1);
    counts[response.backends(0).address()]++;
    generation = response.generation();
  }
  EXPECT_EQ(counts["127.0.0.1:9001"], 10);
  EXPECT_EQ(counts["127.0.0.1:9002"], 10);
  EXPECT_EQ(counts["127.0.0.1:9003"], 10);
  EXPECT_GT(generation, 0u);
}

TEST_F(PickTest, ReturnsLocalityMetadataAndHedgedBackends) {
  v1::PickRequest request;
  request.set_group("web");
  request.set_count(3);
  request.add_exclude("127.0.0.1:9001");
  v1::PickResponse response;
  ASSERT_TRUE(Pick(request, &response).ok());
  ASSERT_EQ(response.backends_size(), 2);
  std::set<std::string> seen;
  for (const auto& b : response.backends()) {
    seen.insert(b.address());
    if (b.address() == "127.0.0.1:9003") {
      EXPECT_EQ(b.locality().zone(), "z");
      EXPECT_EQ(b.metadata().at("tier"), "gold");
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"127.0.0.1:9002", "127.0.0.1:9003"}));
}

TEST_F(PickTest, ValidatesInput) {
  v1::PickResponse response;
  v1::PickRequest request;
  grpc::Status s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("group: required"));

  request.set_group("nope");
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("group 'nope' not found"));

  request.set_group("Bad Name");
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("group:"));

  request.set_group("web");
  request.set_key(std::string(4097, 'k'));
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("key: 4097 bytes (at most 4096)"));

  request.clear_key();
  request.set_key_bytes(std::string(4097, '\xff'));
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("key_bytes: 4097 bytes (at most 4096)"));

  request.set_key("k");
  request.set_key_bytes("k");
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("key: set key (text) or key_bytes (binary), not both"));

  request.clear_key_bytes();
  request.set_count(17);
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("count: 17"));
}

TEST_F(PickTest, NothingToPickIsUnavailableNamingTheGroup) {
  v1::PickResponse response;
  v1::PickRequest request;
  request.set_group("drained");
  grpc::Status s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("group 'drained'"));
  EXPECT_THAT(s.error_message(), HasSubstr("drained"));

  request.set_group("empty");
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("group 'empty' has no backends"));

  request.set_group("web");
  for (const char* a : {"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}) {
    request.add_exclude(a);
  }
  s = Pick(request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("excluded"));
}

TEST_F(PickTest, ReportLoadTalliesAcceptedAndRejectedObservations) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::ReportLoadResponse response;
  auto writer = stub_->ReportLoad(&context, &response);
  v1::LoadReport report;
  report.set_reporter("pod-a");
  v1::BackendLoad* ok = report.add_loads();
  ok->set_group("web");
  ok->set_address("127.0.0.1:9001");
  ok->set_requests(10);
  v1::BackendLoad* unknown = report.add_loads();
  unknown->set_group("web");
  unknown->set_address("127.0.0.1:9999");
  v1::BackendLoad* nan = report.add_loads();
  nan->set_group("web");
  nan->set_address("127.0.0.1:9002");
  nan->mutable_utilization()->set_cpu(std::nan(""));
  ASSERT_TRUE(writer->Write(report));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(response.accepted(), 1u);
  ASSERT_EQ(response.rejected_size(), 2);
  EXPECT_EQ(response.rejected(0).load_index(), 1u);
  EXPECT_THAT(response.rejected(0).reason(),
              HasSubstr("loads[1].address: 127.0.0.1:9999 is not a backend"));
  EXPECT_THAT(response.rejected(1).reason(),
              HasSubstr("loads[2].utilization.cpu"));
  EXPECT_EQ(response.report_interval().seconds(), 1);
}

}  // namespace
}  // namespace aside::server
