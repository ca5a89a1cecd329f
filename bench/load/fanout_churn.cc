// fanout_churn: changes at platform rates, spread over many groups, to many
// Watch subscribers; how long until every subscriber of a changed group
// holds the change, and the server's CPU for it. Lines of JSON on stdout.
//
//   fanout_churn --target HOST:PORT --process I --subscribers 1000
//                --groups 100 [--channels 10]
//                [--drive --token T --rate 1000 --seconds 10
//                 --server-pid PID]
//
// Several processes share one run. Stream i of process I subscribes to
// group (I * subscribers + i) % groups, named churn-<g>. The driver
// (--drive, run first) creates the groups, each of 10 backends. Every
// process prints {"ready":true} once each of its streams holds a first
// table. The driver then waits for a line on stdin, sends --rate
// DrainBackends per second for --seconds, open loop (each at its time,
// asynchronously), round robin over the groups (change k toggles backend
// (k / groups) % 10 of group k % groups), waits for every reply and
// prints
//   {"sent":N,"failed":F,"seconds":S,"server_cpu_s":C,"changes":"..."}
// where "changes" is "g generation sent_ns acked_ns" per acknowledged
// change, space-separated (steady-clock nanoseconds, one clock for every
// process of the machine). Then every process, driver included, reads
// that changes string as one line, waits (at most 60 s) until each of its
// streams holds the last generation of its group, and prints its lags:
//   {"pairs":P,"late":L,"messages":M,"bytes":B,
//    "from_ack_us":{"bucket":count,...},"from_send_us":{...}}
// one pair per (acknowledged change, stream of its group): the time from
// the change's reply (or from its sending) to the first arrival, on that
// stream, of the change's generation or a later one. An arrival before the
// reply counts 0 from the reply. Buckets are microseconds rounded down to
// two significant digits, so the merged percentiles are within 10 %.
// "late": pairs whose stream never got there within the wait.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "bench/load/latency.h"
#include "bench/load/watch_subscriber.h"
#include "lib/command_line.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "server address");
ABSL_FLAG(std::string, token, "", "Admin bearer token (--drive)");
ABSL_FLAG(int, process, 0, "this process's index among the run's");
ABSL_FLAG(int, subscribers, 1000, "Watch streams of this process");
ABSL_FLAG(int, groups, 100, "groups the run changes");
ABSL_FLAG(int, channels, 10, "channels the streams share");
ABSL_FLAG(bool, drive, false, "create the groups and make the changes");
ABSL_FLAG(double, rate, 1000, "changes per second (--drive)");
ABSL_FLAG(double, seconds, 10, "seconds of changes (--drive)");
ABSL_FLAG(int, server_pid, 0, "the server's pid, for its CPU time");

namespace {

using aside::bench::Subscriber;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: fanout_churn --target HOST:PORT --process I --subscribers N "
    "--groups G [--channels C] [--drive --token T --rate R --seconds S "
    "--server-pid PID]\n";
constexpr int kBackends = 10;

std::string GroupName(int g) { return absl::StrCat("churn-", g); }

int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

void PrintLine(const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

// Streams may still run: leave without unwinding their reactors.
[[noreturn]] void Fail(const std::string& why) {
  std::cerr << "fanout_churn: " << why << "\n";
  std::_Exit(1);
}

std::unique_ptr<grpc::ClientContext> AdminContext(const std::string& token) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  c->AddMetadata("authorization", "Bearer " + token);
  return c;
}

void CreateGroups(aside::v1::Admin::Stub* admin, const std::string& token,
                  int groups) {
  for (int g = 0; g < groups; ++g) {
    aside::v1::DeleteGroupRequest del;
    del.set_name(GroupName(g));
    aside::v1::DeleteGroupResponse deleted;
    (void)admin->DeleteGroup(AdminContext(token).get(), del, &deleted);
    aside::v1::CreateGroupRequest create;
    create.mutable_group()->set_name(GroupName(g));
    create.mutable_group()->mutable_health_check()->set_kind(
        aside::v1::HealthCheck::NONE);
    for (int b = 0; b < kBackends; ++b) {
      create.mutable_group()->add_backends()->set_address(
          absl::StrCat("10.9.0.", b + 1, ":8080"));
    }
    aside::v1::Group out;
    grpc::Status s =
        admin->CreateGroup(AdminContext(token).get(), create, &out);
    if (!s.ok()) {
      Fail(absl::StrCat("create ", GroupName(g), ": ", s.error_message()));
    }
  }
}

// One change the driver sent.
struct Change {
  grpc::ClientContext context;
  aside::v1::DrainBackendsRequest request;
  aside::v1::Group response;
  int group = 0;
  Clock::time_point sent;
  Clock::time_point acked;
  std::atomic<bool> done{false};
  bool ok = false;
};

// Sends the changes (see the header) and prints what was acknowledged.
void Drive(aside::v1::Admin::Stub* admin, const std::string& token, int groups,
           double rate, double seconds, int server_pid) {
  const int n = std::max(1, static_cast<int>(rate * seconds));
  std::deque<Change> changes;
  const double cpu_before =
      server_pid > 0 ? aside::bench::ProcessCpuSeconds(server_pid) : 0;
  const auto start = Clock::now();
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(1.0 / rate));
  for (int k = 0; k < n; ++k) {
    Change& c = changes.emplace_back();
    c.group = k % groups;
    const int round = k / groups;
    c.request.set_group(GroupName(c.group));
    c.request.add_addresses(
        absl::StrCat("10.9.0.", round % kBackends + 1, ":8080"));
    c.request.set_drained((round / kBackends) % 2 == 0);
    c.context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
    c.context.AddMetadata("authorization", "Bearer " + token);
    std::this_thread::sleep_until(start + k * period);
    c.sent = Clock::now();
    Change* raw = &c;
    admin->async()->DrainBackends(
        &raw->context, &raw->request, &raw->response, [raw](grpc::Status s) {
          raw->acked = Clock::now();
          raw->ok = s.ok();
          raw->done.store(true, std::memory_order_release);
        });
  }
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  int failed = 0;
  std::string listed;
  for (Change& c : changes) {
    while (!c.done.load(std::memory_order_acquire)) {
      if (Clock::now() > deadline) {
        Fail("Admin replies outstanding 60 s after the last change");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!c.ok) {
      ++failed;
      continue;
    }
    absl::StrAppend(&listed, listed.empty() ? "" : " ", c.group, " ",
                    c.response.generation(), " ", Nanos(c.sent), " ",
                    Nanos(c.acked));
  }
  const double cpu =
      server_pid > 0 ? aside::bench::ProcessCpuSeconds(server_pid) - cpu_before
                     : 0;
  PrintLine(absl::StrCat("{\"sent\":", n, ",\"failed\":", failed,
                         ",\"seconds\":", took, ",\"server_cpu_s\":", cpu,
                         ",\"changes\":\"", listed, "\"}"));
}

// Microseconds rounded down to two significant digits.
int64_t Bucket(int64_t micros) {
  int64_t scale = 1;
  while (micros >= 100 * scale) {
    scale *= 10;
  }
  return micros / scale * scale;
}

std::string Histogram(const std::map<int64_t, int64_t>& buckets) {
  std::string out = "{";
  for (const auto& [bucket, count] : buckets) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", "\"", bucket,
                    "\":", count);
  }
  return out + "}";
}

// Reads the driver's changes, waits for this process's streams to hold
// each group's last one, and prints the lags (see the header).
void Report(const std::string& line, int groups, int first_stream,
            std::vector<std::unique_ptr<Subscriber>>& subs) {
  struct Acked {
    uint64_t generation;
    int64_t sent_ns;
    int64_t acked_ns;
  };
  std::vector<std::vector<Acked>> by_group(static_cast<size_t>(groups));
  std::istringstream in(line);
  int g = 0;
  Acked a{};
  while (in >> g >> a.generation >> a.sent_ns >> a.acked_ns) {
    if (g < 0 || g >= groups) {
      Fail(absl::StrCat("group ", g, " out of range"));
    }
    by_group[static_cast<size_t>(g)].push_back(a);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < subs.size(); ++i) {
    const auto& mine = by_group[(first_stream + i) % groups];
    uint64_t last = 0;
    for (const Acked& c : mine) {
      last = std::max(last, c.generation);
    }
    while (subs[i]->latest() < last && !subs[i]->done() &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::map<int64_t, int64_t> from_ack, from_send;
  int64_t pairs = 0, late = 0;
  uint64_t messages = 0, bytes = 0;
  for (size_t i = 0; i < subs.size(); ++i) {
    messages += subs[i]->received();
    bytes += subs[i]->received_bytes();
    const auto arrivals = subs[i]->Arrivals();
    for (const Acked& c : by_group[(first_stream + i) % groups]) {
      ++pairs;
      auto it =
          std::find_if(arrivals.begin(), arrivals.end(),
                       [&](const auto& x) { return x.first >= c.generation; });
      if (it == arrivals.end()) {
        ++late;
        continue;
      }
      const int64_t at = Nanos(it->second);
      ++from_ack[Bucket(std::max<int64_t>(0, at - c.acked_ns) / 1000)];
      ++from_send[Bucket(std::max<int64_t>(0, at - c.sent_ns) / 1000)];
    }
  }
  PrintLine(absl::StrCat("{\"pairs\":", pairs, ",\"late\":", late,
                         ",\"messages\":", messages, ",\"bytes\":", bytes,
                         ",\"from_ack_us\":", Histogram(from_ack),
                         ",\"from_send_us\":", Histogram(from_send), "}"));
}

}  // namespace

int main(int argc, char** argv) {
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::cerr << "fanout_churn: " << args.status().message() << "\n";
    return 2;
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  const std::string token = absl::GetFlag(FLAGS_token);
  const int process = absl::GetFlag(FLAGS_process);
  const int per = absl::GetFlag(FLAGS_subscribers);
  const int groups = absl::GetFlag(FLAGS_groups);
  const int channels = absl::GetFlag(FLAGS_channels);
  const bool drive = absl::GetFlag(FLAGS_drive);
  const double rate = absl::GetFlag(FLAGS_rate);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (process < 0 || per <= 0 || groups <= 0 || channels <= 0 || rate <= 0 ||
      seconds <= 0) {
    std::cerr << kUsage;
    return 2;
  }
  auto admin = aside::v1::Admin::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  if (drive) {
    CreateGroups(admin.get(), token, groups);
  }
  std::vector<std::unique_ptr<aside::v1::LoadBalancer::Stub>> stubs;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    stubs.push_back(aside::v1::LoadBalancer::NewStub(grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args)));
  }
  const int first_stream = process * per;
  std::vector<std::unique_ptr<Subscriber>> subs;
  for (int i = 0; i < per; ++i) {
    subs.push_back(std::make_unique<Subscriber>(
        stubs[static_cast<size_t>(i) % stubs.size()].get(),
        GroupName((first_stream + i) % groups)));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (size_t i = 0; i < subs.size(); ++i) {
    while (subs[i]->latest() == 0) {
      if (subs[i]->done() || Clock::now() > deadline) {
        Fail(absl::StrCat("stream ", i, " has no first table: ",
                          subs[i]->status().error_message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  PrintLine("{\"ready\":true}");
  std::string line;
  if (drive) {
    if (!std::getline(std::cin, line)) {
      Fail("coordinator went away");
    }
    Drive(admin.get(), token, groups, rate, seconds,
          absl::GetFlag(FLAGS_server_pid));
  }
  if (!std::getline(std::cin, line)) {
    Fail("no changes to report on");
  }
  Report(line, groups, first_stream, subs);
  std::_Exit(0);  // see Fail
}
