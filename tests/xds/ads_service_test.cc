// ADS over real gRPC on loopback with a hand-driven client, and a ticker
// that never fires in a test's time: whatever reaches the client after
// its first response was pushed by a group's publication, addition or
// removal. The client sends nothing after its request (no acknowledgement
// the server could answer instead).
#include "server/api/xds/ads_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "server/api/xds/xds_resources.h"
#include "tests/testing/group_specs.h"
#include "tests/testing/status_matchers.h"

namespace aside::server::xds {
namespace {

namespace discovery = envoy::service::discovery::v3;
using Stream = grpc::ClientReaderWriter<discovery::DiscoveryRequest,
                                        discovery::DiscoveryResponse>;

using ::aside::testing::PlainGroup;

// The endpoints a ClusterLoadAssignment response lists, per resource.
std::vector<int> Endpoints(const discovery::DiscoveryResponse& response) {
  std::vector<int> out;
  for (const google::protobuf::Any& any : response.resources()) {
    envoy::config::endpoint::v3::ClusterLoadAssignment cla;
    EXPECT_TRUE(any.UnpackTo(&cla));
    int n = 0;
    for (const auto& locality : cla.endpoints()) {
      n += locality.lb_endpoints_size();
    }
    out.push_back(n);
  }
  return out;
}

class AdsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, GroupRegistry::Create(nullptr, 1000, 100));
    ASSERT_OK(
        registry_->Add(PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80"})));
    ASSERT_OK(registry_->Add(PlainGroup("api", {"10.0.0.3:80"})));
    ads_ = std::make_unique<AdsService>(registry_.get(), &metrics_, nullptr,
                                        absl::Hours(24));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(ads_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = discovery::AggregatedDiscoveryService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
    stream_ = stub_->StreamAggregatedResources(&context_);
  }
  void TearDown() override {
    context_.TryCancel();
    ads_->Shutdown();
    server_->Shutdown();
    ads_.reset();
  }
  // Asks for the endpoints of `names`.
  void Request(std::vector<std::string> names) {
    discovery::DiscoveryRequest request;
    request.set_type_url(kEndpointType);
    for (const std::string& n : names) {
      request.add_resource_names(n);
    }
    ASSERT_TRUE(stream_->Write(request));
  }

  Metrics metrics_;
  std::unique_ptr<GroupRegistry> registry_;
  std::unique_ptr<AdsService> ads_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<discovery::AggregatedDiscoveryService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<Stream> stream_;
};

TEST_F(AdsServiceTest, PublicationsAndRemovalsOfAUsedGroupArePushed) {
  Request({"web"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(2));

  // A group the stream does not use: nothing for it. Then one it uses.
  ASSERT_OK(
      registry_->Update(registry_->Find("api"),
                        PlainGroup("api", {"10.0.0.4:80", "10.0.0.5:80"})));
  const std::string before = response.version_info();
  ASSERT_OK(registry_->Update(
      registry_->Find("web"),
      PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.6:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_NE(response.version_info(), before);
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(3));

  // Its removal takes its resource away.
  ASSERT_OK(registry_->Remove("web"));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_EQ(response.resources_size(), 0);
}

TEST_F(AdsServiceTest, AGroupAddedAnswersANameThatHadNoneAtOnce) {
  Request({"later"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_EQ(response.resources_size(), 0);

  ASSERT_OK(registry_->Add(PlainGroup("later", {"10.0.0.7:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(1));
}

// A request past a cap ends the stream with a status naming the cap: the
// client sees why, instead of waiting for resources that never come.
TEST_F(AdsServiceTest, ARequestPastTheNameCapEndsTheStreamNamingIt) {
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) {
    names.push_back(absl::StrCat("name", i));
  }
  names.push_back("web");
  Request(names);
  discovery::DiscoveryResponse response;
  EXPECT_FALSE(stream_->Read(&response));
  const grpc::Status status = stream_->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("at most 1000"));
}

TEST_F(AdsServiceTest, ARequestWithATooLongNameEndsTheStreamNamingTheCap) {
  Request({"web", std::string(513, 'x')});
  discovery::DiscoveryResponse response;
  EXPECT_FALSE(stream_->Read(&response));
  const grpc::Status status = stream_->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("513 bytes; at most 512"));
}

// At the caps, a request is answered.
TEST_F(AdsServiceTest, ARequestAtTheCapsIsAnswered) {
  std::vector<std::string> names;
  for (int i = 0; i < 999; ++i) {
    names.push_back(absl::StrCat("name", i));
  }
  names.push_back("web");
  names.push_back(std::string(512, 'y'));
  names.erase(names.begin());
  Request(names);
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(2));
}

}  // namespace
}  // namespace aside::server::xds
