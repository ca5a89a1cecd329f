// grpclb LoadBalanceRequests as a stock gRPC client (or anyone who reaches
// the port) sends them on a BalanceLoad stream (server/api/grpclb_service.h),
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    auto context = aside::fuzz::FuzzContext();
    auto stream = Stub().BalanceLoad(context.get());
    aside::fuzz::SendFuzzedRequests<LoadBalanceRequest, LoadBalanceResponse>(
        *stream, data, size);
  }
  auto context = aside::fuzz::FuzzContext();
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
