// fanout_load: N Watch subscribers in this process, one change at a time
// made through Admin; for each change, the time until the last subscriber
// has it, and the server's CPU per stream per update. JSON on stdout.
//
//   fanout_load --target 127.0.0.1:50051 --token TOKEN --subscribers 1000
//               --changes 30 --server-pid PID [--channels 20]
//
// Several processes can share one run (many subscribers on one server):
// one drives with --coordinate, the others only subscribe with --observe.
// Both print {"ready":true} once every stream holds the first table. The
// driver then waits for a line on stdin before its first change, prints
// {"generation":G,"t0_ns":T,"last_ns":L} after each change (steady-clock
// nanoseconds: when the change was made, when its own last subscriber
// had it) and waits for a line before it reads the server's CPU and goes
// on. An observer answers each generation G read from stdin with
// {"generation":G,"last_ns":L} once all its streams hold G, and ends on
// "stop" or end of input.
//
// With --ads, the same run then measures the same fan-out to ADS (xDS)
// subscribers: the Watch streams are closed, --subscribers ADS streams
// subscribe to the group as gRPC xDS clients do (Listener for the group's
// name, then its Cluster, then its ClusterLoadAssignment, the routes
// being inline in the listener; every response ACKed), and --changes
// further changes are made the same way. A change has reached an ADS
// stream when its assignment lists the endpoints the change leaves. The
// output adds the ADS figures ("ads_...") and their ratios to Watch's.
// With --server-pid, both phases also report the CPU of the server's group
// publisher thread ("aside-publish") per update, and the ADS phase that of
// the ADS fan-out thread ("aside-ads").
//
// With --rates R1,R2,... it measures instead the update rate the server
// sustains: for each rate in turn, for --step-seconds, changes are sent
// open loop at that rate (each at its scheduled time, asynchronously, not
// waiting for the fan-out or for the Admin reply), then it waits until
// every stream holds the last one. One JSON line per step (see RunRates),
// then {"sustained_rate":R}; it stops at the first step that is not
// bounded.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <list>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "bench/load/latency.h"
#include "bench/load/watch_subscriber.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "lib/command_line.h"
#include "lib/sync.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "server address");
ABSL_FLAG(std::string, token, "", "Admin bearer token");
ABSL_FLAG(std::string, group, "fanout", "group to create and change");
ABSL_FLAG(int, subscribers, 100, "Watch streams");
ABSL_FLAG(int, changes, 20, "changes to publish");
ABSL_FLAG(int, channels, 20, "channels the streams share");
ABSL_FLAG(int, server_pid, 0, "the server's pid, for its CPU time");
ABSL_FLAG(bool, coordinate, false,
          "drive the changes in step with observers (see the header)");
ABSL_FLAG(bool, observe, false,
          "only subscribe to --group and report arrivals (see the header)");
ABSL_FLAG(std::string, rates, "",
          "changes per second, comma-separated: measure the sustained rate");
ABSL_FLAG(double, step_seconds, 3, "seconds per rate with --rates");
ABSL_FLAG(bool, ads, false,
          "then measure the same fan-out to ADS (xDS) subscribers");

namespace {

using aside::bench::Subscriber;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: fanout_load --target HOST:PORT --token T --subscribers N "
    "--changes K --server-pid PID [--channels C] [--ads] [--rates "
    "R1,R2,... --step-seconds S]\n";

struct Options {
  std::string target = "127.0.0.1:50051";
  std::string token;
  std::string group = "fanout";
  int subscribers = 100;
  int changes = 20;
  int channels = 20;
  int server_pid = 0;
  bool coordinate = false;
  bool observe = false;
  std::vector<double> rates;
  double step_seconds = 3;
  bool ads = false;
};

namespace discovery = envoy::service::discovery::v3;

constexpr char kListenerType[] =
    "type.googleapis.com/envoy.config.listener.v3.Listener";
constexpr char kClusterType[] =
    "type.googleapis.com/envoy.config.cluster.v3.Cluster";
constexpr char kEndpointType[] =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

// One ADS stream subscribed to one group as a gRPC xDS client is: the
// Listener of the group's name first, the Cluster once the listener came,
// the assignment once the cluster came; every response ACKed. Remembers
// when each assignment arrived and how many endpoints it listed. At most
// one write is in flight; the others wait in order.
class AdsSubscriber final
    : public grpc::ClientBidiReactor<discovery::DiscoveryRequest,
                                     discovery::DiscoveryResponse> {
 public:
  AdsSubscriber(discovery::AggregatedDiscoveryService::Stub* stub,
                const std::string& group, int index)
      : group_(group) {
    discovery::DiscoveryRequest first;
    first.mutable_node()->set_id(absl::StrCat("fanout-load-", index));
    first.mutable_node()->set_user_agent_name("aside fanout_load");
    first.mutable_node()->set_user_agent_version("1");
    first.set_type_url(kListenerType);
    first.add_resource_names(group_);
    stub->async()->StreamAggregatedResources(&context_, this);
    Send(std::move(first));
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      return;
    }
    const std::string& type = response_.type_url();
    discovery::DiscoveryRequest ack;
    ack.set_type_url(type);
    ack.set_version_info(response_.version_info());
    ack.set_response_nonce(response_.nonce());
    ack.add_resource_names(group_);
    const bool first_of_type = !seen_.contains(type);
    seen_.insert(type);
    if (type == kEndpointType && response_.resources_size() > 0) {
      envoy::config::endpoint::v3::ClusterLoadAssignment cla;
      if (response_.resources(0).UnpackTo(&cla)) {
        const int endpoints = cla.endpoints_size();
        {
          aside::MutexLock lock(&mu_);
          arrivals_.emplace_back(endpoints, Clock::now());
        }
        received_.fetch_add(1, std::memory_order_relaxed);
        endpoints_.store(endpoints, std::memory_order_release);
      }
    }
    Send(std::move(ack));
    // The next type once the previous one came, as a client resolves.
    if (first_of_type && (type == kListenerType || type == kClusterType)) {
      discovery::DiscoveryRequest next;
      next.set_type_url(type == kListenerType ? kClusterType : kEndpointType);
      next.add_resource_names(group_);
      Send(std::move(next));
    }
    StartRead(&response_);
  }

  void OnWriteDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    writes_.erase(writes_.begin());
    if (ok && !writes_.empty()) {
      StartWrite(&writes_.front());
    }
  }

  void OnDone(const grpc::Status& status) override {
    aside::MutexLock lock(&mu_);
    done_ = true;
    status_ = status;
  }

  // Endpoints in the latest assignment (-1 before the first).
  int endpoints() const { return endpoints_.load(std::memory_order_acquire); }
  uint64_t received() const {
    return received_.load(std::memory_order_relaxed);
  }
  // When the first assignment with at most `endpoints` endpoints came.
  Clock::time_point ArrivalOf(int endpoints) {
    aside::MutexLock lock(&mu_);
    for (const auto& [n, t] : arrivals_) {
      if (n <= endpoints) {
        return t;
      }
    }
    return Clock::time_point::max();
  }
  void Cancel() { context_.TryCancel(); }
  bool done() {
    aside::MutexLock lock(&mu_);
    return done_;
  }
  grpc::Status status() {
    aside::MutexLock lock(&mu_);
    return status_;
  }

 private:
  void Send(discovery::DiscoveryRequest request) {
    aside::MutexLock lock(&mu_);
    writes_.push_back(std::move(request));
    if (writes_.size() == 1) {
      StartWrite(&writes_.front());
    }
  }

  const std::string group_;
  grpc::ClientContext context_;
  discovery::DiscoveryResponse response_;  // read side only
  std::set<std::string> seen_;             // read side only
  std::atomic<int> endpoints_{-1};
  std::atomic<uint64_t> received_{0};
  aside::Mutex mu_;
  // A list, so the front's address holds while later writes queue.
  std::list<discovery::DiscoveryRequest> writes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, Clock::time_point>> arrivals_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

bool ParseArgs(int argc, char** argv, Options* o) {
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::cerr << "fanout_load: " << args.status().message() << "\n";
    return false;
  }
  o->target = absl::GetFlag(FLAGS_target);
  o->token = absl::GetFlag(FLAGS_token);
  o->group = absl::GetFlag(FLAGS_group);
  o->subscribers = absl::GetFlag(FLAGS_subscribers);
  o->changes = absl::GetFlag(FLAGS_changes);
  o->channels = absl::GetFlag(FLAGS_channels);
  o->server_pid = absl::GetFlag(FLAGS_server_pid);
  o->coordinate = absl::GetFlag(FLAGS_coordinate);
  o->observe = absl::GetFlag(FLAGS_observe);
  o->step_seconds = absl::GetFlag(FLAGS_step_seconds);
  o->ads = absl::GetFlag(FLAGS_ads);
  std::stringstream rates(absl::GetFlag(FLAGS_rates));
  for (std::string r; std::getline(rates, r, ',');) {
    o->rates.push_back(std::stod(r));
    if (o->rates.back() <= 0) {
      return false;
    }
  }
  // --ads drains one more backend of the 100 per change in each phase.
  return o->step_seconds > 0 && o->subscribers > 0 && o->changes > 0 &&
         o->channels > 0 && (!o->ads || o->changes <= 50);
}

std::unique_ptr<grpc::ClientContext> AdminContext(const Options& o) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  c->AddMetadata("authorization", "Bearer " + o.token);
  return c;
}

// Ends the run once Watch streams are open: the streams' reactors must not
// be destroyed while their calls run, and a stream that hangs would keep a
// cancellation from finishing, so the process leaves without unwinding.
[[noreturn]] void Fail(const std::string& why) {
  std::cerr << "fanout_load: " << why << "\n";
  std::_Exit(1);
}

// Waits (bounded) until every subscriber holds `generation`; fails the run
// when the wait times out or a stream ended.
void WaitAll(std::vector<std::unique_ptr<Subscriber>>& subs,
             uint64_t generation, std::chrono::seconds timeout,
             const std::string& what) {
  const auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < subs.size(); ++i) {
    Subscriber& s = *subs[i];
    while (s.latest() < generation) {
      if (s.done()) {
        Fail(absl::StrCat(what, ": subscriber ", i,
                          "'s stream ended: ", s.status().error_message()));
      }
      if (Clock::now() > deadline) {
        Fail(absl::StrCat(what, ": subscriber ", i, " still at generation ",
                          s.latest(), " after ", timeout.count(), " s"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

int64_t SteadyNanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

// When the last of `subs` had `generation`.
int64_t LastArrival(std::vector<std::unique_ptr<Subscriber>>& subs,
                    uint64_t generation) {
  Clock::time_point last = Clock::time_point::min();
  for (auto& sub : subs) {
    last = std::max(last, sub->ArrivalOf(generation));
  }
  return SteadyNanos(last);
}

// A line from the run's coordinator; false at end of input.
bool ReadLine(std::string* line) {
  return static_cast<bool>(std::getline(std::cin, *line));
}

void PrintLine(const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

// One change sent by RunRates: when it was due, when its reply came, and
// the generation it made.
struct RateChange {
  grpc::ClientContext context;
  aside::v1::DrainBackendsRequest request;
  aside::v1::Group response;
  Clock::time_point due;
  Clock::time_point replied;
  size_t index = 0;  // in sending order
  std::atomic<bool> done{false};
  bool ok = false;
};

double Millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The sustained update rate (see the header). Per step: the last
// subscriber's lag per change (when the last stream held the change's
// generation, or a later one, less when the change was due), its median
// over the first and the last quarter of the step's changes, p99 and max;
// the Admin reply's lag the same way; the server's CPU per second of the
// step, and what the streams received. A step is bounded when every
// change was sent on schedule (fewer than kMaxInFlight replies outstanding),
// every stream held the last change within 30 s of the step's end, the last
// quarter's median lag is at most twice the first quarter's or 20 ms more (an
// absolute slack for lags of a few ms, where a 2x swing is noise), and the
// step's median lag is under a second. A step that is not bounded is run once
// more (a pause of the machine can fail one) and the run ends when that fails
// too.
int RunRates(const Options& o, aside::v1::Admin::Stub* admin,
             std::vector<std::unique_ptr<Subscriber>>& subs) {
  constexpr int kMaxInFlight = 2000;
  int change = 0;
  double sustained = 0;
  int attempt = 1;
  for (size_t step = 0; step < o.rates.size();) {
    const double rate = o.rates[step];
    const int n = std::max(4, static_cast<int>(rate * o.step_seconds));
    std::vector<std::unique_ptr<RateChange>> sent;
    std::atomic<int> in_flight{0};
    bool saturated = false;
    const double cpu_before =
        o.server_pid > 0 ? aside::bench::ProcessCpuSeconds(o.server_pid) : 0;
    uint64_t messages_before = 0;
    uint64_t bytes_before = 0;
    for (auto& sub : subs) {
      messages_before += sub->received();
      bytes_before += sub->received_bytes();
    }
    const auto start = Clock::now();
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / rate));
    for (int k = 0; k < n; ++k, ++change) {
      auto c = std::make_unique<RateChange>();
      c->due = start + k * period;
      c->index = static_cast<size_t>(k);
      std::this_thread::sleep_until(c->due);
      if (in_flight.load(std::memory_order_relaxed) >= kMaxInFlight) {
        saturated = true;
        break;
      }
      c->request.set_group(o.group);
      c->request.add_addresses(
          absl::StrCat("10.9.0.", change % 100 + 1, ":8080"));
      c->request.set_drained((change / 100) % 2 == 0);
      c->context.set_deadline(std::chrono::system_clock::now() +
                              std::chrono::seconds(60));
      c->context.AddMetadata("authorization", "Bearer " + o.token);
      RateChange* raw = c.get();
      in_flight.fetch_add(1, std::memory_order_relaxed);
      admin->async()->DrainBackends(
          &raw->context, &raw->request, &raw->response,
          [raw, &in_flight](grpc::Status s) {
            raw->replied = Clock::now();
            raw->ok = s.ok();
            in_flight.fetch_sub(1, std::memory_order_relaxed);
            raw->done.store(true, std::memory_order_release);
          });
      sent.push_back(std::move(c));
    }
    const auto sent_end = Clock::now();
    // Every reply, then every stream at the newest generation (bounded).
    const auto deadline = sent_end + std::chrono::seconds(30);
    bool fanned_out = true;
    uint64_t newest = 0;
    for (auto& c : sent) {
      while (!c->done.load(std::memory_order_acquire)) {
        if (Clock::now() > deadline) {
          Fail(absl::StrCat("rate ", rate,
                            ": Admin replies outstanding 30 s "
                            "after the step"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (!c->ok) {
        Fail(absl::StrCat("rate ", rate, ": a drain failed"));
      }
      newest = std::max<uint64_t>(newest, c->response.generation());
    }
    for (auto& sub : subs) {
      while (sub->latest() < newest && Clock::now() < deadline) {
        if (sub->done()) {
          Fail("a stream ended: " + sub->status().error_message());
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      fanned_out = fanned_out && sub->latest() >= newest;
    }
    const auto settled = Clock::now();
    // What the streams received: with every change written to every stream
    // one message per change per stream; fewer when writes were coalesced.
    uint64_t messages = 0;
    uint64_t bytes = 0;
    for (auto& sub : subs) {
      messages += sub->received();
      bytes += sub->received_bytes();
    }
    messages -= messages_before;
    bytes -= bytes_before;
    const double cpu =
        o.server_pid > 0
            ? aside::bench::ProcessCpuSeconds(o.server_pid) - cpu_before
            : 0;
    // The last arrival of each change's generation over all streams: per
    // stream, a merge of its arrivals with the changes in generation order.
    std::vector<RateChange*> by_generation;
    for (auto& c : sent) {
      by_generation.push_back(c.get());
    }
    std::sort(by_generation.begin(), by_generation.end(),
              [](const RateChange* a, const RateChange* b) {
                return a->response.generation() < b->response.generation();
              });
    std::vector<Clock::time_point> last(by_generation.size(),
                                        Clock::time_point::min());
    for (auto& sub : subs) {
      const auto arrivals = sub->Arrivals();
      size_t a = 0;
      for (size_t i = 0; i < by_generation.size(); ++i) {
        const uint64_t g = by_generation[i]->response.generation();
        while (a < arrivals.size() && arrivals[a].first < g) {
          ++a;
        }
        last[i] =
            std::max(last[i], a < arrivals.size() ? arrivals[a].second
                                                  : Clock::time_point::max());
      }
    }
    std::vector<double> lag(sent.size());  // in sending order
    std::vector<double> reply(sent.size());
    for (size_t i = 0; i < by_generation.size(); ++i) {
      RateChange* c = by_generation[i];
      const size_t k = c->index;
      lag[k] =
          last[i] == Clock::time_point::max() ? 1e9 : Millis(last[i] - c->due);
      reply[k] = Millis(c->replied - c->due);
    }
    const size_t q = std::max<size_t>(1, lag.size() / 4);
    auto quarter = [&](const std::vector<double>& v, bool late) {
      return Median(late ? std::vector<double>(v.end() - q, v.end())
                         : std::vector<double>(v.begin(), v.begin() + q));
    };
    const double early = quarter(lag, false);
    const double late = quarter(lag, true);
    std::vector<double> sorted = lag;
    std::sort(sorted.begin(), sorted.end());
    const bool bounded = !saturated && fanned_out &&
                         late <= std::max(2 * early, early + 20) &&
                         sorted[sorted.size() / 2] < 1000;
    const double seconds =
        std::chrono::duration<double>(sent_end - start).count();
    PrintLine(absl::StrCat(
        "{\"rate\":", rate, ",\"attempt\":", attempt, ",\"changes\":",
        sent.size(), ",\"sent_per_s\":", sent.size() / std::max(seconds, 1e-9),
        ",\"saturated\":", saturated ? "true" : "false",
        ",\"fanned_out\":", fanned_out ? "true" : "false",
        ",\"lag_early_ms\":", early, ",\"lag_late_ms\":", late,
        ",\"lag_p50_ms\":", sorted[sorted.size() / 2], ",\"lag_p99_ms\":",
        sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)],
        ",\"lag_max_ms\":", sorted.back(), ",\"reply_early_ms\":",
        quarter(reply, false), ",\"reply_late_ms\":", quarter(reply, true),
        ",\"settle_ms\":", Millis(settled - sent_end), ",\"server_cpu_per_s\":",
        cpu / std::chrono::duration<double>(settled - start).count(),
        ",\"messages_per_change_per_stream\":",
        static_cast<double>(messages) /
            static_cast<double>(std::max<size_t>(1, sent.size() * subs.size())),
        ",\"bytes_per_message\":",
        static_cast<double>(bytes) /
            static_cast<double>(std::max<uint64_t>(1, messages)),
        ",\"bounded\":", bounded ? "true" : "false", "}"));
    if (bounded) {
      sustained = rate;
      ++step;
      attempt = 1;
    } else if (++attempt > 2) {
      break;
    }
  }
  PrintLine(absl::StrCat("{\"sustained_rate\":", sustained,
                         ",\"update_bytes\":", subs.front()->bytes(), "}"));
  return 0;
}

struct AdsFigures {
  double last_p50_ms = 0;
  double last_p99_ms = 0;
  double last_max_ms = 0;
  double cpu_per_stream_update_us = 0;
  double messages_per_change_per_stream = 0;
  // The group publisher's thread and the ADS fan-out thread, per update.
  double publisher_us = 0;
  double fanout_thread_us = 0;
};

// CPU of the server's threads named `name` (0 without --server-pid).
double ThreadCpu(const Options& o, const char* name) {
  return o.server_pid > 0 ? aside::bench::ThreadCpuSeconds(o.server_pid, name)
                          : 0;
}

// The ADS phase of --ads (see the header): changes first_change ..
// first_change + changes - 1, each draining one more backend.
AdsFigures RunAds(const Options& o, aside::v1::Admin::Stub* admin,
                  int first_change) {
  std::vector<std::unique_ptr<discovery::AggregatedDiscoveryService::Stub>>
      stubs;
  for (int i = 0; i < o.channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    stubs.push_back(discovery::AggregatedDiscoveryService::NewStub(
        grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(),
                                  args)));
  }
  std::vector<std::unique_ptr<AdsSubscriber>> subs;
  for (int i = 0; i < o.subscribers; ++i) {
    subs.push_back(std::make_unique<AdsSubscriber>(
        stubs[static_cast<size_t>(i) % stubs.size()].get(), o.group, i));
  }
  // Every stream at the same first assignment.
  auto wait_all = [&](auto reached, std::chrono::seconds timeout,
                      const std::string& what) {
    const auto deadline = Clock::now() + timeout;
    for (size_t i = 0; i < subs.size(); ++i) {
      while (!reached(*subs[i])) {
        if (subs[i]->done()) {
          Fail(absl::StrCat(what, ": ADS subscriber ", i, "'s stream ended: ",
                            subs[i]->status().error_message()));
        }
        if (Clock::now() > deadline) {
          Fail(absl::StrCat(what, ": ADS subscriber ", i, " has ",
                            subs[i]->endpoints(), " endpoints after ",
                            timeout.count(), " s"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  };
  wait_all([](AdsSubscriber& s) { return s.endpoints() >= 0; },
           std::chrono::seconds(120), "first assignment");
  const int initial = subs.front()->endpoints();
  wait_all([&](AdsSubscriber& s) { return s.endpoints() == initial; },
           std::chrono::seconds(120), "first assignment");
  uint64_t received_before = 0;
  for (auto& sub : subs) {
    received_before += sub->received();
  }
  aside::bench::Samples last_subscriber;
  double cpu = 0;
  const double publisher_before = ThreadCpu(o, "aside-publish");
  const double fanout_before = ThreadCpu(o, "aside-ads");
  for (int j = 0; j < o.changes; ++j) {
    const int k = first_change + j;
    aside::v1::DrainBackendsRequest drain;
    drain.set_group(o.group);
    drain.add_addresses(absl::StrCat("10.9.0.", k + 1, ":8080"));
    drain.set_drained(true);
    aside::v1::Group g;
    const int expected = initial - j - 1;
    const double cpu_before =
        o.server_pid > 0 ? aside::bench::ProcessCpuSeconds(o.server_pid) : 0;
    const auto t0 = Clock::now();
    grpc::Status s = admin->DrainBackends(AdminContext(o).get(), drain, &g);
    if (!s.ok()) {
      Fail("drain: " + s.error_message());
    }
    wait_all([&](AdsSubscriber& sub) { return sub.endpoints() <= expected; },
             std::chrono::seconds(60), absl::StrCat("ADS change ", j));
    if (o.server_pid > 0) {
      cpu += aside::bench::ProcessCpuSeconds(o.server_pid) - cpu_before;
    }
    int64_t worst = 0;
    for (auto& sub : subs) {
      worst = std::max<int64_t>(
          worst, std::chrono::duration_cast<std::chrono::nanoseconds>(
                     sub->ArrivalOf(expected) - t0)
                     .count());
    }
    last_subscriber.Add(worst);
  }
  const double publisher = ThreadCpu(o, "aside-publish") - publisher_before;
  const double fanout = ThreadCpu(o, "aside-ads") - fanout_before;
  uint64_t received = 0;
  for (auto& sub : subs) {
    received += sub->received();
    sub->Cancel();
  }
  for (auto& sub : subs) {
    for (int i = 0; i < 1000 && !sub->done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const double updates = static_cast<double>(o.subscribers) * o.changes;
  return {.last_p50_ms = last_subscriber.PercentileMicros(50) / 1000,
          .last_p99_ms = last_subscriber.PercentileMicros(99) / 1000,
          .last_max_ms = last_subscriber.MaxMicros() / 1000,
          .cpu_per_stream_update_us = cpu * 1e6 / updates,
          .messages_per_change_per_stream =
              static_cast<double>(received - received_before) / updates,
          .publisher_us = publisher * 1e6 / o.changes,
          .fanout_thread_us = fanout * 1e6 / o.changes};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::cerr << kUsage;
    return 2;
  }
  auto admin = aside::v1::Admin::NewStub(
      grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials()));
  // A group of 100 backends, created fresh (by the driver).
  if (!o.observe) {
    aside::v1::DeleteGroupRequest del;
    del.set_name(o.group);
    aside::v1::DeleteGroupResponse deleted;
    (void)admin->DeleteGroup(AdminContext(o).get(), del, &deleted);
    aside::v1::CreateGroupRequest create;
    create.mutable_group()->set_name(o.group);
    create.mutable_group()->mutable_health_check()->set_kind(
        aside::v1::HealthCheck::NONE);
    for (int i = 0; i < 100; ++i) {
      create.mutable_group()->add_backends()->set_address(
          absl::StrCat("10.9.", i / 250, ".", i % 250 + 1, ":8080"));
    }
    aside::v1::Group g;
    grpc::Status s = admin->CreateGroup(AdminContext(o).get(), create, &g);
    if (!s.ok()) {
      std::cerr << "create group: " << s.error_message() << "\n";
      return 1;
    }
  }
  std::vector<std::unique_ptr<aside::v1::LoadBalancer::Stub>> stubs;
  for (int i = 0; i < o.channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    stubs.push_back(aside::v1::LoadBalancer::NewStub(grpc::CreateCustomChannel(
        o.target, grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::unique_ptr<Subscriber>> subs;
  for (int i = 0; i < o.subscribers; ++i) {
    subs.push_back(std::make_unique<Subscriber>(
        stubs[static_cast<size_t>(i) % stubs.size()].get(), o.group));
  }
  WaitAll(subs, 1, std::chrono::seconds(120), "first table");
  if (!o.rates.empty()) {
    const int rc = RunRates(o, admin.get(), subs);
    std::_Exit(rc);  // see Fail
  }
  std::string line;
  if (o.observe) {
    PrintLine("{\"ready\":true}");
    while (ReadLine(&line) && line != "stop") {
      const uint64_t generation = std::stoull(line);
      WaitAll(subs, generation, std::chrono::seconds(120),
              absl::StrCat("generation ", generation));
      PrintLine(absl::StrCat("{\"generation\":", generation, ",\"last_ns\":",
                             LastArrival(subs, generation), "}"));
    }
    std::_Exit(0);  // see Fail
  }
  if (o.coordinate) {
    PrintLine("{\"ready\":true}");
    if (!ReadLine(&line)) {
      Fail("coordinator went away");
    }
  }
  aside::bench::Samples last_subscriber;
  aside::bench::Samples median_subscriber;
  double cpu = 0;
  const double publisher_before = ThreadCpu(o, "aside-publish");
  for (int k = 0; k < o.changes; ++k) {
    aside::v1::DrainBackendsRequest drain;
    drain.set_group(o.group);
    drain.add_addresses(absl::StrCat("10.9.0.", k % 100 + 1, ":8080"));
    drain.set_drained((k / 100) % 2 == 0);
    aside::v1::Group g;
    const double cpu_before =
        o.server_pid > 0 ? aside::bench::ProcessCpuSeconds(o.server_pid) : 0;
    const auto t0 = Clock::now();
    grpc::Status s = admin->DrainBackends(AdminContext(o).get(), drain, &g);
    if (!s.ok()) {
      Fail("drain: " + s.error_message());
    }
    WaitAll(subs, g.generation(), std::chrono::seconds(60),
            absl::StrCat("change ", k));
    if (o.coordinate) {
      PrintLine(absl::StrCat(
          "{\"generation\":", g.generation(), ",\"t0_ns\":", SteadyNanos(t0),
          ",\"last_ns\":", LastArrival(subs, g.generation()), "}"));
      if (!ReadLine(&line)) {
        Fail("coordinator went away");
      }
    }
    if (o.server_pid > 0) {
      cpu += aside::bench::ProcessCpuSeconds(o.server_pid) - cpu_before;
    }
    aside::bench::Samples arrivals;
    int64_t worst = 0;
    for (auto& sub : subs) {
      const int64_t nanos =
          std::chrono::duration_cast<std::chrono::nanoseconds>(
              sub->ArrivalOf(g.generation()) - t0)
              .count();
      arrivals.Add(nanos);
      worst = std::max(worst, nanos);
    }
    last_subscriber.Add(worst);
    median_subscriber.Add(
        static_cast<int64_t>(arrivals.PercentileMicros(50) * 1000));
  }
  const double publisher_us =
      (ThreadCpu(o, "aside-publish") - publisher_before) * 1e6 / o.changes;
  for (auto& sub : subs) {
    sub->Cancel();
  }
  const double cpu_per_stream_update_us =
      cpu * 1e6 / (static_cast<double>(o.subscribers) * o.changes);
  std::string json = absl::StrFormat(
      "{\"subscribers\":%d,\"changes\":%d,\"last_p50_ms\":%.3f,"
      "\"last_p99_ms\":%.3f,\"last_max_ms\":%.3f,\"median_p50_ms\":%.3f,"
      "\"server_cpu_s\":%.4f,\"cpu_per_update_us\":%.2f,"
      "\"cpu_per_stream_update_us\":%.3f,\"update_bytes\":%zu,"
      "\"publisher_cpu_per_update_us\":%.1f",
      o.subscribers, o.changes, last_subscriber.PercentileMicros(50) / 1000,
      last_subscriber.PercentileMicros(99) / 1000,
      last_subscriber.MaxMicros() / 1000,
      median_subscriber.PercentileMicros(50) / 1000, cpu, cpu * 1e6 / o.changes,
      cpu_per_stream_update_us, subs.front()->bytes(), publisher_us);
  // Let the cancellations finish before the stubs go away (and, with
  // --ads, before the ADS streams open, so that the server's CPU is
  // theirs).
  for (auto& sub : subs) {
    for (int i = 0; i < 1000 && !sub->done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (o.ads) {
    const AdsFigures ads = RunAds(o, admin.get(), o.changes);
    const double watch_p50 = last_subscriber.PercentileMicros(50) / 1000;
    const double watch_p99 = last_subscriber.PercentileMicros(99) / 1000;
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    absl::StrAppendFormat(
        &json,
        ",\"ads_last_p50_ms\":%.3f,\"ads_last_p99_ms\":%.3f,"
        "\"ads_last_max_ms\":%.3f,\"ads_cpu_per_stream_update_us\":%.3f,"
        "\"ads_messages_per_change_per_stream\":%.3f,"
        "\"ads_to_watch_last_p50\":%.2f,\"ads_to_watch_last_p99\":%.2f,"
        "\"ads_to_watch_cpu_per_stream_update\":%.2f,"
        "\"ads_publisher_cpu_per_update_us\":%.1f,"
        "\"ads_fanout_thread_cpu_per_update_us\":%.1f",
        ads.last_p50_ms, ads.last_p99_ms, ads.last_max_ms,
        ads.cpu_per_stream_update_us, ads.messages_per_change_per_stream,
        ratio(ads.last_p50_ms, watch_p50), ratio(ads.last_p99_ms, watch_p99),
        ratio(ads.cpu_per_stream_update_us, cpu_per_stream_update_us),
        ads.publisher_us, ads.fanout_thread_us);
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
