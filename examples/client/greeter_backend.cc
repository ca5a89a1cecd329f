// A helloworld Greeter backend for the stub example: answers
// "hello NAME from HOST:PORT". It registers nowhere; the Aside server
// learns about it from its config file or an Admin call.
//
//   greeter_backend --listen 127.0.0.1:50061
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "helloworld.grpc.pb.h"
#include "lib/command_line.h"

namespace {

// Called on gRPC's threads.
class Greeter final : public helloworld::Greeter::Service {
 public:
  explicit Greeter(std::string host) : host_(std::move(host)) {}
  void set_port(int port) { port_.store(port); }

  grpc::Status SayHello(grpc::ServerContext*,
                        const helloworld::HelloRequest* req,
                        helloworld::HelloReply* reply) override {
    reply->set_message(absl::StrCat("hello ", req->name(), " from ", host_, ":",
                                    port_.load()));
    return grpc::Status::OK;
  }

 private:
  const std::string host_;
  std::atomic<int> port_{0};
};

}  // namespace

ABSL_FLAG(std::string, listen, "127.0.0.1:50061", "gRPC address");

int main(int argc, char** argv) {
  if (absl::StatusOr<std::vector<std::string>> args = aside::ParseCommandLine(
          argc, argv,
          {.usage = "usage: greeter_backend [--listen HOST:PORT]\n"});
      !args.ok()) {
    std::fprintf(stderr, "greeter_backend: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  Greeter greeter(listen.substr(0, listen.rfind(':')));
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&greeter);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "greeter_backend: cannot listen on %s\n",
                 listen.c_str());
    return 1;
  }
  greeter.set_port(port);
  std::fprintf(stderr, "event=greeter.listening port=%d\n", port);
  std::fflush(stderr);
  server->Wait();
  return 0;
}
