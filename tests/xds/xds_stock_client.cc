// A stock gRPC C++ client for the xDS tests. It contains no Aside code: it
// links only the gRPC library and the generated helloworld code, dials
// xds:///NAME, and finds its management server through the bootstrap named
// by GRPC_XDS_BOOTSTRAP, as any xDS-enabled gRPC service would.
//
//   xds_stock_client TARGET NAME [PAUSE_MS]
//
// Calls helloworld.Greeter/SayHello (HelloRequest.name = NAME) one call at
// a time (wait_for_ready, 5 s deadline), pausing PAUSE_MS (default 0)
// between calls, until killed. Writes to stderr, in the key=value form the
// tests read:
//   event=client.started
//   event=calls ok=N failed=M          about once a second, cumulative
//   event=call.failed code=C message=… the first 20 failures
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "grpc/examples/helloworld.grpc.pb.h"

namespace {

constexpr int kFailuresLogged = 20;

int Run(const std::string& target, const std::string& name, int pause_ms) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  std::unique_ptr<helloworld::Greeter::Stub> stub =
      helloworld::Greeter::NewStub(channel);
  std::fprintf(stderr, "event=client.started target=%s name=%s\n",
               target.c_str(), name.c_str());
  uint64_t ok = 0;
  uint64_t failed = 0;
  auto last_summary = std::chrono::steady_clock::now();
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    context.set_wait_for_ready(true);
    helloworld::HelloRequest request;
    request.set_name(name);
    helloworld::HelloReply reply;
    const grpc::Status status = stub->SayHello(&context, request, &reply);
    if (status.ok()) {
      ++ok;
    } else if (++failed <= kFailuresLogged) {
      std::fprintf(stderr, "event=call.failed code=%d message=%s\n",
                   static_cast<int>(status.error_code()),
                   status.error_message().c_str());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_summary >= std::chrono::seconds(1)) {
      last_summary = now;
      std::fprintf(stderr, "event=calls ok=%llu failed=%llu\n",
                   static_cast<unsigned long long>(ok),
                   static_cast<unsigned long long>(failed));
    }
    if (pause_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s TARGET NAME [PAUSE_MS]\n", argv[0]);
    return 2;
  }
  return Run(argv[1], argv[2], argc == 4 ? std::atoi(argv[3]) : 0);
}
