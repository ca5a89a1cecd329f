// The stub example: each request picks a Greeter backend locally with
// aside::Client (the group's policy, from the table Aside streams), calls it
// over the ChannelPool's channel, and reports the outcome with Done().
//
//   greeter_client --aside 127.0.0.1:50051 --group greeter --requests 6
//
// Prints one reply per request, then how many each backend answered. Exits
// 0 when every request succeeded.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "helloworld.grpc.pb.h"

int main(int argc, char** argv) {
  aside::ClientOptions options;
  std::string group_name = "greeter";
  std::string name = "world";
  int requests = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--aside") {
      options.targets.push_back(value);
    } else if (flag == "--group") {
      group_name = value;
    } else if (flag == "--name") {
      name = value;
    } else if (flag == "--requests" && absl::SimpleAtoi(value, &requests)) {
    } else {
      std::fprintf(stderr, "usage: greeter_client --aside HOST:PORT "
                           "[--group NAME] [--requests N] [--name NAME]\n");
      return 2;
    }
  }
  if (options.targets.empty()) {
    options.targets.push_back("localhost:50051");
  }
  options.groups = {group_name};
  absl::StatusOr<std::unique_ptr<aside::Client>> client =
      aside::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "greeter_client: %s\n", client.status().ToString().c_str());
    return 1;
  }
  aside::ClientGroup* group = (*client)->Group(group_name);
  std::map<std::string, int> answered;
  int failures = 0;
  for (int i = 0; i < requests; ++i) {
    absl::StatusOr<aside::PickHandle> pick = group->Pick();
    if (!pick.ok()) {
      std::fprintf(stderr, "pick: %s\n", pick.status().ToString().c_str());
      ++failures;
      continue;
    }
    auto stub = helloworld::Greeter::NewStub(
        (*client)->channels().Get(pick->address()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    helloworld::HelloRequest request;
    request.set_name(name);
    helloworld::HelloReply reply;
    const grpc::Status status = stub->SayHello(&context, request, &reply);
    pick->Done(status);
    if (!status.ok()) {
      std::fprintf(stderr, "%s: %s\n", std::string(pick->address()).c_str(),
                   status.error_message().c_str());
      ++failures;
      continue;
    }
    std::printf("%s\n", reply.message().c_str());
    answered[std::string(pick->address())]++;
  }
  for (const auto& [address, count] : answered) {
    std::printf("%s answered %d\n", address.c_str(), count);
  }
  return failures == 0 ? 0 : 1;
}
