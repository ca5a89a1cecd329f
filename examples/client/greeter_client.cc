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
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "helloworld.grpc.pb.h"
#include "lib/command_line.h"

ABSL_FLAG(std::vector<std::string>, aside, {"localhost:50051"},
          "Aside server address (repeatable: replicas)");
ABSL_FLAG(std::string, group, "greeter", "the Greeter backends' group");
ABSL_FLAG(std::string, name, "world", "HelloRequest.name");
ABSL_FLAG(int, requests, 6, "requests to send");

constexpr char kUsage[] =
    "usage: greeter_client --aside HOST:PORT [--group NAME] [--requests N] "
    "[--name NAME]\n";

int main(int argc, char** argv) {
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::fprintf(stderr, "greeter_client: %s\n%s",
                 std::string(args.status().message()).c_str(), kUsage);
    return 2;
  }
  aside::ClientOptions options;
  options.targets = absl::GetFlag(FLAGS_aside);
  const std::string group_name = absl::GetFlag(FLAGS_group);
  const std::string name = absl::GetFlag(FLAGS_name);
  const int requests = absl::GetFlag(FLAGS_requests);
  options.groups = {group_name};
  absl::StatusOr<std::unique_ptr<aside::Client>> client =
      aside::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "greeter_client: %s\n",
                 client.status().ToString().c_str());
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
