// One arena client (`arena --role=client`): an open-loop load generator
// with a view of its own. It waits until the coordinator publishes the
// run's start in shared memory, then sends every load step's calls at
// Poisson arrival times whatever the answers do; a call's latency counts
// from its intended send time, so a stalled sender is charged to the calls
// it delayed (no coordinated omission).
//
// How it chooses a backend (ClientRole::mode):
// - stub: its own aside::Client watching one group of the arena's
//   aside-server (Pick, the call on the stub's channel pool, the backend's
//   per-call ORCA report handed to the pick, Done with the status);
// - limit: the perfect-information dispatcher: reads every backend's exact
//   number of calls from shared memory (plus the calls it sent there that
//   have not arrived yet) and takes the shortest expected
//   delay, (1 + max(0, calls - slots + 1) / slots) × the backend's current
//   call time, plus what remains of a stall; never the sinkhole;
// - grpc_round_robin: a plain gRPC channel with gRPC's own round_robin
//   over every backend address, no Aside code.
//
// Writes an ArenaClientHeader and the measured calls' ArenaRecords to
// ClientRole::out. Threads: the sender; gRPC's threads complete calls and
// write each result into the call's own record.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "bench/arena/arena.h"
#include "bench/arena/arena_shm.h"
#include "bench/scenario/scenario.h"
#include "client/client.h"

namespace aside::bench {
namespace {

int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void SleepUntil(int64_t mono_nanos) {
  timespec ts;
  ts.tv_sec = mono_nanos / 1000000000;
  ts.tv_nsec = mono_nanos % 1000000000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) ==
         EINTR) {
  }
}

// The records of one run, written by the sender and then by the calls'
// completions, each into its own slot.
struct Run {
  std::vector<ArenaRecord> records;
  std::atomic<size_t> used{0};
  std::atomic<int64_t> outstanding{0};
  uint64_t dropped = 0;
};

// One call in flight.
struct InFlight {
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  std::optional<PickHandle> pick;
  ArenaRecord* record = nullptr;  // null: a warmup call
  int64_t intended_abs = 0;
  int chosen = -1;
};

std::string Text(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return out;
}

// Which backend answered: the reply's body, a sinkhole's message, or the
// one chosen.
int Answered(const grpc::Status& status, const grpc::ByteBuffer& response,
             int chosen) {
  int index = -1;
  if (status.ok()) {
    if (absl::SimpleAtoi(Text(response), &index)) {
      return index;
    }
  } else {
    absl::string_view message = status.error_message();
    if (absl::ConsumePrefix(&message, "sinkhole ") &&
        absl::SimpleAtoi(message, &index)) {
      return index;
    }
  }
  return chosen;
}

void Finish(Run* run, InFlight* call, const grpc::Status& status) {
  if (call->record != nullptr) {
    call->record->latency_ns = NowNanos() - call->intended_abs;
    call->record->ok = status.ok() ? 1 : 0;
    call->record->backend = Answered(status, call->response, call->chosen);
  }
  run->outstanding.fetch_sub(1, std::memory_order_acq_rel);
}

class Client {
 public:
  Client(const ClientRole& role, const Scenario* scenario, ArenaShm* shm)
      : role_(role), scenario_(scenario), shm_(shm) {}

  absl::Status Setup() {
    for (size_t i = 0; i < role_.addresses.size(); ++i) {
      indexes_[role_.addresses[i]] = static_cast<int>(i);
    }
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    const auto deadline =
        std::chrono::system_clock::now() + std::chrono::seconds(20);
    if (role_.mode == "stub") {
      ClientOptions options;
      options.targets = {role_.target};
      options.groups = {role_.group};
      options.log = [](absl::string_view) {};
      absl::StatusOr<std::unique_ptr<aside::Client>> client =
          aside::Client::Create(std::move(options));
      if (!client.ok()) {
        return client.status();
      }
      stub_ = *std::move(client);
      group_ = stub_->Group(role_.group);
      if (!group_->WaitForGeneration(1, absl::Seconds(30))) {
        return absl::DeadlineExceededError("no table");
      }
      for (const std::string& a : role_.addresses) {
        stub_->channels().Get(a)->WaitForConnected(deadline);
      }
    } else if (role_.mode == "limit") {
      for (const std::string& a : role_.addresses) {
        channels_.push_back(grpc::CreateCustomChannel(
            a, grpc::InsecureChannelCredentials(), args));
        channels_.back()->WaitForConnected(deadline);
      }
      for (size_t b = 0; b < scenario_->backends.size(); ++b) {
        stalls_.emplace_back();
        for (const ScenarioEvent& e : scenario_->events) {
          if (e.kind == ScenarioEvent::Kind::kStall && e.backend == b) {
            stalls_.back().push_back(&e);
          }
        }
      }
    } else if (role_.mode == "grpc_round_robin") {
      args.SetServiceConfigJSON(
          R"({"loadBalancingConfig":[{"round_robin":{}}]})");
      channels_.push_back(grpc::CreateCustomChannel(
          absl::StrCat("ipv4:", absl::StrJoin(role_.addresses, ",")),
          grpc::InsecureChannelCredentials(), args));
      channels_.back()->WaitForConnected(deadline);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown mode ", role_.mode));
    }
    return absl::OkStatus();
  }

  // Sends every step's calls; returns once the last completed or its
  // deadline and a margin passed.
  void Send(int64_t run_start) {
    size_t expected = 0;
    for (double r : role_.rates) {
      expected +=
          static_cast<size_t>(r * static_cast<double>(role_.duration_ns) / 1e9);
    }
    run_.records.resize(expected + expected / 10 + 1000);
    std::mt19937_64 random(role_.seed * 1000003 +
                           static_cast<uint64_t>(role_.index));
    std::exponential_distribution<double> gap(1.0);
    for (size_t k = 0; k < role_.rates.size(); ++k) {
      const int64_t from =
          run_start + static_cast<int64_t>(k) * role_.period_ns;
      const int64_t zero = from + role_.warmup_ns;
      const int64_t to = zero + role_.duration_ns;
      const double rate = role_.rates[k];
      double t = static_cast<double>(from);
      while (true) {
        t += gap(random) * 1e9 / rate;
        const int64_t intended = static_cast<int64_t>(t);
        if (intended >= to) {
          break;
        }
        SleepUntil(intended);
        ArenaRecord* record = nullptr;
        if (intended >= zero) {
          const size_t i = run_.used.fetch_add(1, std::memory_order_relaxed);
          if (i < run_.records.size()) {
            record = &run_.records[i];
            record->intended_ns = intended - zero;
            record->step = static_cast<int32_t>(k);
          } else {
            run_.used.fetch_sub(1, std::memory_order_relaxed);
            ++run_.dropped;
          }
        }
        run_.outstanding.fetch_add(1, std::memory_order_acq_rel);
        SendOne(record, intended, &random);
      }
    }
    const int64_t give_up = NowNanos() + role_.deadline_ns + 3'000'000'000;
    while (run_.outstanding.load(std::memory_order_acquire) > 0 &&
           NowNanos() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  bool Write() const {
    ArenaClientHeader header;
    header.records = std::min(run_.used.load(), run_.records.size());
    header.dropped = run_.dropped;
    if (stub_ != nullptr) {
      const aside::Client::Stats stats = stub_->stats();
      header.updates_applied = stats.updates_applied;
      header.reports_sent = stats.reports_sent;
    }
    std::ofstream out(role_.out, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    out.write(
        reinterpret_cast<const char*>(run_.records.data()),
        static_cast<std::streamsize>(header.records * sizeof(ArenaRecord)));
    return out.good();
  }

 private:
  void SendOne(ArenaRecord* record, int64_t intended, std::mt19937_64* random) {
    auto* call = new InFlight();
    call->record = record;
    call->intended_abs = intended;
    std::shared_ptr<grpc::Channel> channel;
    if (stub_ != nullptr) {
      absl::StatusOr<PickHandle> pick = group_->Pick();
      if (!pick.ok()) {
        Finish(&run_, call,
               grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            std::string(pick.status().message())));
        delete call;
        return;
      }
      const auto it = indexes_.find(pick->address());
      call->chosen = it == indexes_.end() ? -1 : it->second;
      channel = stub_->channels().Get(pick->address());
      call->pick.emplace(*std::move(pick));
    } else if (role_.mode == "limit") {
      call->chosen = Shortest(random);
      shm_->backends[call->chosen].dispatched.fetch_add(
          1, std::memory_order_acq_rel);
      channel = channels_[static_cast<size_t>(call->chosen)];
    } else {
      channel = channels_[0];
    }
    grpc::Slice slice(std::string("x"));
    call->request = grpc::ByteBuffer(&slice, 1);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::nanoseconds(role_.deadline_ns));
    grpc::GenericStub stub(channel);
    Run* run = &run_;
    stub.UnaryCall(
        &call->context,
        role_.mode == "limit" ? kArenaDispatchedMethod : kArenaMethod,
        grpc::StubOptions(), &call->request, &call->response,
        [call, run](const grpc::Status& status) {
          if (call->pick.has_value()) {
            const auto& trailers = call->context.GetServerTrailingMetadata();
            const auto it = trailers.find("orca-load-report-bin");
            if (it != trailers.end()) {
              call->pick->RecordBackendMetrics(
                  absl::string_view(it->second.data(), it->second.size()));
            }
            call->pick->Done(status);
          }
          Finish(run, call, status);
          delete call;
        });
  }

  // The perfect-information choice: the shortest expected delay.
  int Shortest(std::mt19937_64* random) const {
    const int64_t now = NowNanos();
    const int64_t zero = shm_->step_zero_ns.load(std::memory_order_acquire);
    double best = std::numeric_limits<double>::infinity();
    int chosen = 0;
    int ties = 0;
    for (size_t b = 0; b < scenario_->backends.size(); ++b) {
      const ScenarioBackend& spec = scenario_->backends[b];
      if (spec.sinkhole) {
        continue;
      }
      double wait = 0;
      double factor = 1;
      if (zero != 0) {
        for (const ScenarioEvent* e : stalls_[b]) {
          const int64_t end = zero + absl::ToInt64Nanoseconds(e->end());
          if (now >= zero + absl::ToInt64Nanoseconds(e->at) && now < end) {
            wait = static_cast<double>(end - now);
          }
        }
        factor = scenario_->CapacityFactor(static_cast<uint32_t>(b),
                                           absl::Nanoseconds(now - zero));
        if (!(factor > 0)) {
          factor = 1;
        }
      }
      const double call_ns =
          static_cast<double>(absl::ToInt64Nanoseconds(spec.call_time())) /
          factor;
      const int calls =
          shm_->backends[b].rif.load(std::memory_order_acquire) +
          shm_->backends[b].dispatched.load(std::memory_order_acquire);
      const double slots = spec.slots;
      const double delay =
          wait + call_ns * (1 + std::max(0.0, calls - slots + 1) / slots);
      if (delay < best) {
        best = delay;
        chosen = static_cast<int>(b);
        ties = 1;
      } else if (delay == best) {
        ++ties;
        if ((*random)() % static_cast<uint64_t>(ties) == 0) {
          chosen = static_cast<int>(b);
        }
      }
    }
    return chosen;
  }

  const ClientRole& role_;
  const Scenario* const scenario_;
  ArenaShm* const shm_;
  absl::flat_hash_map<std::string, int> indexes_;
  std::unique_ptr<aside::Client> stub_;
  ClientGroup* group_ = nullptr;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::vector<const ScenarioEvent*>> stalls_;
  Run run_;
};

}  // namespace

int RunClient(const ClientRole& role) {
  absl::StatusOr<Scenario> scenario =
      LoadArenaScenario(role.scenario, role.scale);
  if (!scenario.ok()) {
    std::fprintf(stderr, "arena client: %s\n",
                 std::string(scenario.status().message()).c_str());
    return 2;
  }
  ArenaShm* shm = MapArenaShm(role.shm, /*create=*/false);
  if (shm == nullptr) {
    std::fprintf(stderr, "arena client: cannot map %s\n", role.shm.c_str());
    return 1;
  }
  // Sends within a few microseconds of their times.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  // Leaked: a completion arriving after the last wait must not find it gone.
  auto* client = new Client(role, &*scenario, shm);
  if (absl::Status s = client->Setup(); !s.ok()) {
    std::fprintf(stderr, "arena client %d: %s\n", role.index,
                 s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "event=arena_client.ready index=%d\n", role.index);
  std::fflush(stderr);
  int64_t start = 0;
  const int64_t give_up = NowNanos() + 120'000'000'000;
  while ((start = shm->run_start_ns.load(std::memory_order_acquire)) == 0) {
    if (NowNanos() > give_up) {
      std::fprintf(stderr, "arena client %d: no start\n", role.index);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  client->Send(start);
  if (!client->Write()) {
    std::fprintf(stderr, "arena client %d: cannot write %s\n", role.index,
                 role.out.c_str());
    return 1;
  }
  std::fprintf(stderr, "event=arena_client.done index=%d\n", role.index);
  std::fflush(stderr);
  // Skips the stub's and gRPC's teardown, which calls still in flight past
  // their deadline would hold up.
  std::_Exit(0);
}

}  // namespace aside::bench
