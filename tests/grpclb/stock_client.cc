// A stock gRPC C++ client for the grpclb tests. It contains no Aside code:
// it links only the gRPC library and the generated helloworld code, and
// finds its balancer the way any gRPC service would, through the DNS SRV
// record _grpclb._tcp.<host> with the grpclb policy chosen by service
// config.
//
//   grpclb_stock_client TARGET NAME [PAUSE_MS]
//
// Calls helloworld.Greeter/SayHello (HelloRequest.name = NAME) one call at
// a time, pausing PAUSE_MS (default 3) between calls, until killed. Writes
// to stderr, in the key=value form the tests read:
//   event=client.started
//   event=calls ok=N failed=M          about once a second, cumulative
//   event=call.failed code=C message=… the first 20 failures
//
// Single-threaded; each call is one unary RPC on one channel (what a stock
// application does), with a 5 s deadline and without wait_for_ready.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "grpc/examples/helloworld.grpc.pb.h"

namespace {

constexpr char kServiceConfig[] = R"({"loadBalancingConfig":[{"grpclb":{}}]})";
constexpr int kFailuresLogged = 20;

int Run(const std::string& target, const std::string& name, int pause_ms) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.dns_enable_srv_queries", 1);
  args.SetServiceConfigJSON(kServiceConfig);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
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
    helloworld::HelloRequest request;
    request.set_name(name);
    helloworld::HelloReply reply;
    const grpc::Status status = stub->SayHello(&context, request, &reply);
    if (status.ok()) {
      ++ok;
    } else {
      ++failed;
      if (failed <= kFailuresLogged) {
        std::fprintf(stderr, "event=call.failed code=%d message=%s\n",
                     static_cast<int>(status.error_code()),
                     status.error_message().c_str());
      }
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
  absl::SetProgramUsageMessage(
      "usage: grpclb_stock_client TARGET NAME [PAUSE_MS]");
  // No flags of its own; abseil's --help and unknown-flag errors.
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  int pause_ms = 3;
  if (args.size() < 3 || args.size() > 4 ||
      (args.size() == 4 && !absl::SimpleAtoi(args[3], &pause_ms))) {
    std::fprintf(stderr, "%s\n",
                 std::string(absl::ProgramUsageMessage()).c_str());
    return 2;
  }
  return Run(args[1], args[2], pause_ms);
}
