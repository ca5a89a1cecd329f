// grpclb LoadBalanceRequests as a stock gRPC client (or anyone who reaches
// the port) sends them on a BalanceLoad stream (server/grpclb_service.h),
// against the real service in process: each input is up to 16
// length-delimited messages; each one that parses as a LoadBalanceRequest
// is sent on one stream (initial requests with any name, client stats with
// any counts and drop tokens, in any order). The stream must end or answer
// within its deadline, and afterwards a fresh stream asking for "web" must
// get its server list: the service keeps serving.
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "tests/fuzz/stream_fuzz_server.h"

namespace {

using grpc::lb::v1::LoadBalancer;
using grpc::lb::v1::LoadBalanceRequest;
using grpc::lb::v1::LoadBalanceResponse;

LoadBalancer::Stub& Stub() {
  static auto* stub =
      LoadBalancer::NewStub(aside::fuzz::StreamFuzzChannel()).release();
  return *stub;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    auto context = Context();
    auto stream = Stub().BalanceLoad(context.get());
    for (const std::string& bytes :
         aside::fuzz::SplitMessages(data, size, 16)) {
      LoadBalanceRequest request;
      if (request.ParseFromString(bytes) && !stream->Write(request)) {
        break;
      }
    }
    stream->WritesDone();
    // The service ends the stream once it has handled every request before
    // the half-close; what it answered is read and dropped.
    LoadBalanceResponse response;
    while (stream->Read(&response)) {
    }
    if (stream->Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      __builtin_trap();  // the service did not end a half-closed stream
    }
  }
  auto context = Context();
  auto stream = Stub().BalanceLoad(context.get());
  LoadBalanceRequest request;
  request.mutable_initial_request()->set_name("web");
  LoadBalanceResponse response;
  // The initial response, then the server list.
  bool listed = false;
  if (stream->Write(request)) {
    for (int i = 0; i < 2 && !listed && stream->Read(&response); ++i) {
      listed = response.has_server_list() &&
               response.server_list().servers_size() > 0;
    }
  }
  if (!listed) {
    __builtin_trap();  // the service stopped serving
  }
  context->TryCancel();
  (void)stream->Finish();
  return 0;
}
