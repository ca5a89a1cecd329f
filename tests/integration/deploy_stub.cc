// A service that balances with the stub (aside::Client over Watch), as a
// process of its own, for the deploy tests: it calls helloworld.Greeter at
// a steady rate, each call picked by the stub, and tells the test what it
// did on stderr:
//
//   event=client.started name=NAME
//   event=table now_ns=T generation=G from_cache=0|1 backends=A,B,...
//       watch_attempts=N watch_connected=M
//     (one line) each time the table its picks use changes, before the
//     first pick from it: the eligible backends; T on CLOCK_MONOTONIC
//   event=calls ok=N failed=M from_cache=K   about once a second, cumulative
//   event=call.failed code=C address=A message=...   the first 20 failures
//   event=client.stopped ok=N failed=M from_cache=K  on SIGTERM, then exit 0
//
//   deploy_stub --aside TARGET --group web --name stub-0 --rate 75
//               [--cache_dir DIR] [--backoff_max 2s]
//
// Calls go one at a time on one thread (HelloRequest.name = NAME, 5 s
// deadline, no wait_for_ready, what the stub example does), paced at
// --rate per second on an absolute schedule: a call that runs late does
// not make the next ones burst. `from_cache` counts calls whose pick came
// from the table cache (--cache_dir, ClientOptions::cache_dir).
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpc/examples/helloworld.grpc.pb.h"
#include "lib/command_line.h"

ABSL_FLAG(std::vector<std::string>, aside, {},
          "Aside server target (repeatable: replicas)");
ABSL_FLAG(std::string, group, "web", "the Greeter backends' group");
ABSL_FLAG(std::string, name, "stub", "HelloRequest.name: the caller's name");
ABSL_FLAG(double, rate, 50, "calls per second");
ABSL_FLAG(std::string, cache_dir, "", "ClientOptions::cache_dir");
ABSL_FLAG(absl::Duration, backoff_max, aside::BackoffOptions().max,
          "ClientOptions::backoff.max: the longest wait between reconnects");

namespace {

constexpr int kFailuresLogged = 20;

std::atomic<bool> g_stop{false};

void OnTerm(int) { g_stop.store(true); }

// One line on stderr, flushed (the test reads it as it comes).
template <typename... Args>
void Say(const Args&... args) {
  const std::string line = absl::StrCat(args..., "\n");
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

// Writes an event=table line when the table the picks use is not `last`.
void SayTable(aside::Client& client, aside::ClientGroup& group,
              aside::TableConstPtr* last) {
  // from_cache() around table(): a server's table replacing the cached one
  // in between is said on the next call.
  const bool from_cache = group.from_cache();
  aside::TableConstPtr table = group.table();
  if (table == *last || table == nullptr || group.from_cache() != from_cache) {
    return;
  }
  *last = table;
  std::vector<std::string> backends;
  for (const aside::Member& m : table->members()) {
    if (m.eligible) {
      backends.push_back(m.backend.address);
    }
  }
  const aside::Client::Stats stats = client.stats();
  Say("event=table now_ns=",
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count(),
      " generation=", table->generation(), " from_cache=", from_cache ? 1 : 0,
      " backends=", absl::StrJoin(backends, ","),
      " watch_attempts=", stats.watch_attempts,
      " watch_connected=", stats.watch_connected);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: deploy_stub --aside TARGET [--group NAME] [--name NAME] "
      "[--rate PER_SECOND] [--cache_dir DIR] [--backoff_max DURATION]\n";
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::fprintf(stderr, "deploy_stub: %s\n%s",
                 std::string(args.status().message()).c_str(), kUsage);
    return 2;
  }
  const std::string group_name = absl::GetFlag(FLAGS_group);
  const std::string name = absl::GetFlag(FLAGS_name);
  const double rate = absl::GetFlag(FLAGS_rate);
  if (!(rate > 0)) {
    std::fprintf(stderr, "deploy_stub: --rate must be positive\n%s", kUsage);
    return 2;
  }
  signal(SIGTERM, OnTerm);

  aside::ClientOptions options;
  options.targets = absl::GetFlag(FLAGS_aside);
  options.groups = {group_name};
  options.cache_dir = absl::GetFlag(FLAGS_cache_dir);
  options.backoff.max = absl::GetFlag(FLAGS_backoff_max);
  absl::StatusOr<std::unique_ptr<aside::Client>> client =
      aside::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "deploy_stub: %s\n",
                 client.status().ToString().c_str());
    return 1;
  }
  aside::ClientGroup* group = (*client)->Group(group_name);
  Say("event=client.started name=", name);

  uint64_t ok = 0;
  uint64_t failed = 0;
  uint64_t from_cache = 0;
  aside::TableConstPtr last_table;
  const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(1.0 / rate));
  auto next = std::chrono::steady_clock::now();
  auto last_summary = next;
  while (!g_stop.load()) {
    std::this_thread::sleep_until(next);
    next += period;
    // Late by more than a second (the machine stalled): start the schedule
    // again rather than catch up in a burst.
    const auto now = std::chrono::steady_clock::now();
    if (now - next > std::chrono::seconds(1)) {
      next = now;
    }
    // Before the pick: every pick after the line uses that table or a
    // newer one.
    SayTable(**client, *group, &last_table);
    absl::StatusOr<aside::PickHandle> pick = group->Pick();
    grpc::Status status;
    std::string address;
    if (!pick.ok()) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("pick: ", pick.status().message()));
    } else {
      address = std::string(pick->address());
      if (pick->from_cache()) {
        ++from_cache;
      }
      auto stub =
          helloworld::Greeter::NewStub((*client)->channels().Get(address));
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
      helloworld::HelloRequest request;
      request.set_name(name);
      helloworld::HelloReply reply;
      status = stub->SayHello(&context, request, &reply);
      pick->Done(status);
    }
    if (status.ok()) {
      ++ok;
    } else if (++failed <= kFailuresLogged) {
      Say("event=call.failed code=", static_cast<int>(status.error_code()),
          " address=", address, " message=", status.error_message());
    }
    if (now - last_summary >= std::chrono::seconds(1)) {
      last_summary = now;
      Say("event=calls ok=", ok, " failed=", failed,
          " from_cache=", from_cache);
    }
  }
  Say("event=client.stopped ok=", ok, " failed=", failed,
      " from_cache=", from_cache);
  return 0;
}
