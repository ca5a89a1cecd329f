// Requests whose bytes are not the method's message, sent over a generic
// stub: a clear status, never a crash, and the server keeps serving.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "server/config/config.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "malformed-test-admin-token";
// Field 1, wire type 7 (no such type): never parses as any message.
const std::string kGarbage("\x0f\xff\xff\xff\xff", 5);

class MalformedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokens =
        dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("state_dir: ", dir_.path(), "/state\n",
                                 "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                                 "admin: {token_file: \"", tokens, "\"}\n", R"(
groups:
  - name: web
    health_check: {kind: none}
    backends: [127.0.0.1:7001]
)"),
                    "test.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(*config));
    ASSERT_OK(server_->Start());
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    server_->Shutdown(absl::Seconds(1));
    server_->Wait();
  }

  void Prepare(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    context->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  }

  static grpc::ByteBuffer Buffer(const std::string& bytes) {
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
  }

  // Waits for the next completion; false when it failed.
  static bool Next(grpc::CompletionQueue& cq) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  }

  static void Drain(grpc::CompletionQueue& cq) {
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  }

  grpc::Status Unary(const std::string& method, const std::string& bytes) {
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    Prepare(&context);
    auto call = stub.PrepareUnaryCall(&context, method, Buffer(bytes), &cq);
    call->StartCall();
    grpc::ByteBuffer reply;
    grpc::Status status;
    call->Finish(&reply, &status, nullptr);
    Next(cq);
    Drain(cq);
    return status;
  }

  // Opens a stream, sends `bytes` as its one message, half-closes and reads
  // until the end; returns the final status.
  grpc::Status Stream(const std::string& method, const std::string& bytes) {
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    Prepare(&context);
    auto call = stub.PrepareCall(&context, method, &cq);
    call->StartCall(nullptr);
    if (Next(cq)) {
      call->Write(Buffer(bytes), nullptr);
      if (Next(cq)) {
        call->WritesDone(nullptr);
        Next(cq);
      }
    }
    grpc::ByteBuffer reply;
    for (int i = 0; i < 100; ++i) {
      call->Read(&reply, nullptr);
      if (!Next(cq)) {
        break;
      }
    }
    grpc::Status status;
    call->Finish(&status, nullptr);
    Next(cq);
    Drain(cq);
    return status;
  }

  void ExpectStillServing() {
    auto stub = v1::LoadBalancer::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(&context);
    v1::PickRequest request;
    request.set_group("web");
    v1::PickResponse response;
    grpc::Status s = stub->Pick(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(MalformedRequestTest, UnaryMethodsAnswerInvalidArgumentNamingTheType) {
  const struct {
    const char* method;
    const char* type;
  } cases[] = {
      {"/aside.v1.LoadBalancer/Pick", "aside.v1.PickRequest"},
      {"/aside.v1.Admin/CreateGroup", "aside.v1.CreateGroupRequest"},
      {"/aside.v1.Admin/UpdateGroup", "aside.v1.UpdateGroupRequest"},
      {"/aside.v1.Admin/GetGroup", "aside.v1.GetGroupRequest"},
      {"/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckRequest"},
  };
  for (const auto& c : cases) {
    grpc::Status s = Unary(c.method, kGarbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.method;
    EXPECT_THAT(
        s.error_message(),
        HasSubstr(absl::StrCat("request: the bytes do not parse as ", c.type)))
        << c.method;
  }
  // A request that parses still reaches the handler (and its own checks).
  v1::PickRequest empty_group;
  grpc::Status s =
      Unary("/aside.v1.LoadBalancer/Pick", empty_group.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("group"));
  ExpectStillServing();
}

TEST_F(MalformedRequestTest, StreamsEndWithAClearStatus) {
  // Watch parses its own request (a raw method).
  grpc::Status s = Stream("/aside.v1.LoadBalancer/Watch", kGarbage);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  // On a client stream gRPC reports a message that does not parse exactly
  // as the client's half-close (the reactor's OnReadDone(false); an
  // interceptor sees no message either way), so the stream ends as after a
  // half-close and nothing from the bad message is taken.
  s = Stream("/aside.v1.LoadBalancer/ReportLoad", kGarbage);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = Stream("/grpc.lb.v1.LoadBalancer/BalanceLoad", kGarbage);
  EXPECT_NE(s.error_code(), grpc::StatusCode::INTERNAL) << s.error_message();
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << s.error_message();
  ExpectStillServing();
}

}  // namespace
}  // namespace aside::server
