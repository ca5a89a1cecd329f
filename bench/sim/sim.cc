#include "bench/sim/sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <queue>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "lib/clock.h"
#include "lib/load/backend_load.h"
#include "lib/load/load_tracker.h"
#include "lib/load/orca_weight.h"
#include "lib/policy_config.h"
#include "lib/random.h"
#include "lib/table.h"

namespace aside::bench {
namespace {

// Virtual time in ns; the load models see it offset so that 0 never occurs.
constexpr int64_t kClockBase = 1'000'000'000;
constexpr int64_t kSecond = 1'000'000'000;
// The sinkhole answers this fast.
constexpr int64_t kSinkholeNanos = 50'000;
// The stub's local ejection (client/client_options.h).
constexpr uint32_t kEjectAfterFailures = 3;
constexpr int64_t kEjectNanos = kSecond;
constexpr size_t kMaxEjectedRetries = 8;
// Buckets of the recovery figure.
constexpr int64_t kBinNanos = 250'000'000;
constexpr int kBinsPerWindow = 4;  // a 1 s window

enum class Source : uint8_t {
  kNone,   // the policy reads only its own view
  kOrca,   // A58 weights from one ORCA stream per backend, pushed as tables
  kLimit,  // perfect information
};

struct PolicyPlan {
  PolicyConfig config;
  Source source = Source::kNone;
  // Backends' own load (RIF, latency) to the clients' BackendLoad::Report:
  // on every response (piggyback), from one stream per backend published
  // to every client each interval (fleet), and from this many probes per
  // call to random backends (answered before the next pick).
  bool piggyback = false;
  bool fleet = false;
  uint32_t probes = 0;
  // Static weights proportional to the capacities (hand-set WRR).
  bool capacity_weights = false;
  // Interval of the ORCA reports and table pushes (orca_wrr), and of the
  // fleet's load pushes (source=fleet).
  int64_t interval_nanos = kSecond;
};

// Variants for experiments: "p2c_peak_ewma/decay=1s" sets a parameter.
absl::Status ApplyParam(PolicyPlan& p, absl::string_view key,
                        absl::string_view value) {
  absl::Duration d;
  double v = 0;
  if (key == "decay" && absl::ParseDuration(value, &d)) {
    p.config.p2c.decay = d;
  } else if (key == "default_rtt" && absl::ParseDuration(value, &d)) {
    p.config.p2c.default_rtt = d;
  } else if (key == "alpha" && absl::SimpleAtod(value, &v)) {
    p.config.least_time.alpha = v;
  } else if (key == "interval" && absl::ParseDuration(value, &d)) {
    p.interval_nanos = absl::ToInt64Nanoseconds(d);
  } else if (key == "pool" &&
             absl::SimpleAtoi(value, &p.config.prequal.pool_size)) {
  } else if (key == "hot" &&
             absl::SimpleAtod(value, &p.config.prequal.hot_quantile)) {
  } else if (key == "own" &&
             absl::SimpleAtod(value, &p.config.prequal.own_weight)) {
  } else if (key == "max_age" && absl::ParseDuration(value, &d)) {
    p.config.prequal.max_age = d;
  } else if (key == "probes" && absl::SimpleAtoi(value, &p.probes)) {
  } else if (key == "source") {
    p.piggyback = p.fleet = false;
    for (absl::string_view one : absl::StrSplit(value, '+')) {
      if (one == "piggyback") {
        p.piggyback = true;
      } else if (one == "fleet") {
        p.fleet = true;
      } else if (one != "local" && one != "probe") {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown source '", one, "'"));
      }
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("bad parameter '", key, "=", value, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PolicyPlan> PlanOf(const std::string& full_name) {
  PolicyPlan p;
  std::vector<std::string> parts = absl::StrSplit(full_name, '/');
  const std::string name = parts[0];
  if (name == "prequal") {
    // The source chosen by the figures (bench/README.md): each response
    // carries the backend's RIF and latency. "source=..." replaces it.
    p.piggyback = true;
    p.interval_nanos = 100'000'000;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<std::string> kv = absl::StrSplit(parts[i], '=');
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad parameter '", parts[i], "'"));
    }
    if (absl::Status st = ApplyParam(p, kv[0], kv[1]); !st.ok()) {
      return st;
    }
  }
  if (name == "round_robin") {
    p.config.kind = PolicyKind::kRoundRobin;
  } else if (name == "weighted_round_robin") {
    p.config.kind = PolicyKind::kWeightedRoundRobin;
    p.capacity_weights = true;
  } else if (name == "random") {
    p.config.kind = PolicyKind::kRandom;
  } else if (name == "p2c_pending") {
    p.config.kind = PolicyKind::kP2c;
    p.config.p2c.load = P2cParams::Load::kPending;
  } else if (name == "p2c_peak_ewma") {
    p.config.kind = PolicyKind::kP2c;
    p.config.p2c.load = P2cParams::Load::kPeakEwma;
  } else if (name == "least_time") {
    p.config.kind = PolicyKind::kLeastTime;
  } else if (name == "orca_wrr") {
    p.config.kind = PolicyKind::kWeightedRoundRobin;
    p.source = Source::kOrca;
  } else if (name == "prequal") {
    p.config.kind = PolicyKind::kPrequal;
  } else if (name == "limit") {
    p.source = Source::kLimit;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("the simulator has no policy '", name, "'"));
  }
  return p;
}

enum class EvType : uint8_t {
  kArrival,
  kComplete,   // a call's service ends (a = call)
  kSinkReply,  // the sinkhole's error reaches the client (a = call)
  kDeadline,   // a = call
  kKick,       // a backend's capacity changed (a = backend)
  kTick,       // periodic reports and pushes
};

struct Ev {
  int64_t t;
  uint64_t seq;
  EvType type;
  uint32_t a;
  bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

enum class CallState : uint8_t { kQueued, kServing, kDone };

struct Call {
  int64_t arrival = 0;
  uint32_t client = 0;
  uint32_t backend = 0;
  uint32_t member = 0;
  CallState state = CallState::kQueued;
  // The client gave up (deadline) or was answered.
  bool finished = false;
  bool measured = false;
  // Events and queue entries that still name the call; it is reused at 0.
  uint8_t refs = 0;
};

struct SimBackend {
  ScenarioBackend spec;
  uint32_t busy = 0;
  uint32_t live_queued = 0;
  std::deque<uint32_t> queue;
  // ORCA: completions and busy slot-time since the last report.
  uint64_t completed = 0;
  double busy_nanos = 0;
  int64_t busy_since = 0;  // when `busy` last changed
  OrcaEndpointWeight orca;
  // The backend's own latency estimate (EWMA of its calls' time from
  // arrival to answer), what it reports; 0 before its first call.
  double latency_ewma = 0;
  // EWMA of its service times (without the queue); 0 before any.
  double service_ewma = 0;
  // The scenario's events that name this backend.
  std::vector<ScenarioEvent> events;
  // Measured.
  uint64_t dispatched = 0;
  std::vector<uint32_t> bins;  // dispatched per kBinNanos of the window

  // A call's time at full capacity, and that over the slots.
  double call_nanos = 0;
  double nanos_per_slot = 0;

  uint32_t rif() const { return busy + live_queued; }
  // What a call arriving now would take, as the backend estimates it from
  // its recent service times and its requests in flight (Prequal's servers
  // estimate it from recent latencies at the current RIF); a sinkhole
  // reports 0.
  double ReportedLatency() const {
    if (spec.sinkhole) {
      return 0;
    }
    const double service = service_ewma > 0 ? service_ewma : call_nanos;
    return service * std::max(1.0, (rif() + 1.0) / spec.slots);
  }
};

struct MemberStats {
  uint32_t consecutive_failures = 0;
  int64_t ejected_until = 0;
};

struct SimClient {
  std::unique_ptr<FakeClock> clock;
  std::unique_ptr<LoadTracker> tracker;
  TableConstPtr table;
  std::vector<MemberStats> stats;  // by member index
  FastRng rng{1};
  uint32_t last_backend = UINT32_MAX;
};

class Simulation {
 public:
  Simulation(const Scenario& s, PolicyPlan plan, std::string name, double load)
      : s_(s), plan_(std::move(plan)), rng_(s.seed * 0x9e3779b97f4a7c15ULL) {
    result_.policy = std::move(name);
    result_.load = load;
    warmup_ = absl::ToInt64Nanoseconds(s.warmup);
    end_ = warmup_ + absl::ToInt64Nanoseconds(s.duration);
    deadline_ = absl::ToInt64Nanoseconds(s.deadline);
    rate_per_nano_ = load * s.AggregateCapacity() / 1e9;
    for (const ScenarioBackend& b : s.backends) {
      SimBackend sb;
      sb.spec = b;
      sb.call_nanos = absl::ToDoubleNanoseconds(b.call_time());
      sb.nanos_per_slot = sb.call_nanos / b.slots;
      sb.bins.assign((end_ - warmup_) / kBinNanos + 1, 0);
      backends_.push_back(std::move(sb));
    }
    for (const ScenarioEvent& e : s.events) {
      backends_[e.backend].events.push_back(e);
    }
    total_bins_.assign((end_ - warmup_) / kBinNanos + 1, 0);
  }

  absl::StatusOr<StepResult> Run() {
    // Policies draw their start positions from the thread's generator.
    ThreadRng() = FastRng(s_.seed * 0x2545f4914f6cdd1dULL + 1);
    if (plan_.source != Source::kLimit) {
      if (absl::Status st = BuildClients(); !st.ok()) {
        return st;
      }
    }
    for (const ScenarioEvent& e : s_.events) {
      Push(warmup_ + absl::ToInt64Nanoseconds(e.at), EvType::kKick, e.backend);
      if (e.length != absl::InfiniteDuration()) {
        Push(warmup_ + absl::ToInt64Nanoseconds(e.end()), EvType::kKick,
             e.backend);
      }
    }
    if (plan_.source == Source::kOrca || plan_.fleet) {
      Push(plan_.interval_nanos, EvType::kTick, 0);
    }
    Push(NextArrivalGap(), EvType::kArrival, 0);
    while (!events_.empty()) {
      const Ev ev = events_.top();
      events_.pop();
      now_ = ev.t;
      switch (ev.type) {
        case EvType::kArrival:
          OnArrival();
          break;
        case EvType::kComplete:
          OnComplete(ev.a);
          break;
        case EvType::kSinkReply:
          if (!calls_[ev.a].finished) {
            Answer(ev.a, /*ok=*/false);
          }
          Release(ev.a);
          break;
        case EvType::kDeadline:
          OnDeadline(ev.a);
          break;
        case EvType::kKick:
          StartQueued(ev.a);
          break;
        case EvType::kTick:
          OnTick();
          break;
      }
    }
    Summarise();
    return result_;
  }

 private:
  void Push(int64_t t, EvType type, uint32_t a) {
    events_.push(Ev{t, seq_++, type, a});
  }

  int64_t NextArrivalGap() {
    const double u = 1.0 - rng_.NextDouble();  // (0, 1]
    return std::max<int64_t>(
        1, static_cast<int64_t>(-std::log(u) / rate_per_nano_));
  }

  double Factor(uint32_t b) const {
    const std::vector<ScenarioEvent>& events = backends_[b].events;
    if (events.empty() || now_ < warmup_) {
      return 1;
    }
    return s_.CapacityFactor(b, absl::Nanoseconds(now_ - warmup_), events);
  }

  absl::Status BuildClients() {
    // Member index -> backend: tables sort members by address.
    std::vector<std::pair<std::string, uint32_t>> addresses;
    for (uint32_t b = 0; b < backends_.size(); ++b) {
      addresses.emplace_back(
          absl::StrFormat("10.%d.%d.%d:8080", b >> 16, (b >> 8) & 255, b & 255),
          b);
    }
    std::sort(addresses.begin(), addresses.end());
    member_backend_.clear();
    for (const auto& a : addresses) {
      member_backend_.push_back(a.second);
      addresses_.push_back(a.first);
    }
    weights_.assign(backends_.size(), kDefaultWeight);
    if (plan_.capacity_weights) {
      double max_cps = 0;
      for (const SimBackend& b : backends_) {
        max_cps = std::max(max_cps, b.spec.calls_per_second());
      }
      for (uint32_t b = 0; b < backends_.size(); ++b) {
        weights_[b] = static_cast<uint32_t>(std::max(
            1.0,
            std::round(100 * backends_[b].spec.calls_per_second() / max_cps)));
      }
    }
    clients_.resize(s_.clients);
    for (uint32_t c = 0; c < s_.clients; ++c) {
      SimClient& client = clients_[c];
      client.clock = std::make_unique<FakeClock>(kClockBase);
      client.tracker = std::make_unique<LoadTracker>(client.clock.get());
      client.rng = FastRng(s_.seed * 1000003 + c + 1);
      client.stats.assign(backends_.size(), MemberStats{});
      if (absl::Status st = PublishTable(client); !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }

  absl::Status PublishTable(SimClient& client) {
    TableSpec spec;
    spec.group = "sim";
    spec.generation = ++generation_;
    spec.policy = plan_.config;
    spec.members.reserve(member_backend_.size());
    for (size_t i = 0; i < member_backend_.size(); ++i) {
      Member m;
      m.backend.address = addresses_[i];
      m.backend.weight = weights_[member_backend_[i]];
      m.weight = m.backend.weight;
      spec.members.push_back(std::move(m));
    }
    absl::StatusOr<TableConstPtr> table = Table::Create(
        std::move(spec), client.table.get(), client.tracker.get());
    if (!table.ok()) {
      return table.status();
    }
    client.table = *std::move(table);
    return absl::OkStatus();
  }

  // --- Arrivals and dispatch ------------------------------------------------

  void OnArrival() {
    if (now_ < end_) {
      Push(now_ + NextArrivalGap(), EvType::kArrival, 0);
    } else {
      return;
    }
    const uint32_t id = NewCall();
    Call& call = calls_[id];
    call.arrival = now_;
    call.refs = 2;  // the deadline, and the queue or the sinkhole's reply
    call.measured = now_ >= warmup_;
    if (plan_.source == Source::kLimit) {
      call.client = 0;
      call.backend = LimitPick();
    } else {
      call.client = static_cast<uint32_t>(rng_.Below(clients_.size()));
      SimClient& client = clients_[call.client];
      call.member = ClientPick(client);
      call.backend = member_backend_[call.member];
      client.table->member(call.member).load->Start();
      if (call.measured) {
        ++picks_;
        if (call.backend == client.last_backend) {
          ++same_picks_;
        }
      }
      client.last_backend = call.backend;
      // Probes for the next picks (answered before them).
      for (uint32_t i = 0; i < plan_.probes; ++i) {
        ReportTo(client, static_cast<uint32_t>(rng_.Below(backends_.size())));
        ++messages_;
      }
    }
    ++dispatched_;
    Push(now_ + deadline_, EvType::kDeadline, id);
    SimBackend& b = backends_[call.backend];
    if (call.measured) {
      ++measured_calls_;
      if (b.spec.sinkhole) {
        ++sinkhole_calls_;
      } else {
        ++b.dispatched;
        const size_t bin = (now_ - warmup_) / kBinNanos;
        ++b.bins[bin];
        ++total_bins_[bin];
      }
    }
    if (b.spec.sinkhole) {
      call.state = CallState::kServing;
      Push(now_ + kSinkholeNanos, EvType::kSinkReply, id);
      return;
    }
    b.queue.push_back(id);
    ++b.live_queued;
    if (call.measured) {
      result_.max_rif = std::max(result_.max_rif, b.rif());
    }
    StartQueued(call.backend);
  }

  // The backend of member `member` reports its load to `client`.
  void ReportTo(SimClient& client, uint32_t member) {
    const SimBackend& b = backends_[member_backend_[member]];
    client.table->member(member).load->Report(b.rif(), b.ReportedLatency(),
                                              kClockBase + now_);
  }

  uint32_t ClientPick(SimClient& client) {
    const Table& table = *client.table;
    const int64_t now = kClockBase + now_;
    PickRequest request;
    request.now_nanos = now;
    request.rng = &client.rng;
    uint32_t index = 0;
    table.Pick(request, absl::Span<uint32_t>(&index, 1));
    if (client.stats[index].ejected_until > now) {
      // As the stub's AvoidEjected: pick again without the ejected ones.
      std::array<uint32_t, kMaxEjectedRetries> excluded;
      size_t n = 0;
      excluded[n++] = index;
      while (n < kMaxEjectedRetries) {
        request.exclude = absl::Span<const uint32_t>(excluded.data(), n);
        uint32_t next = 0;
        if (table.Pick(request, absl::Span<uint32_t>(&next, 1)) == 0) {
          break;
        }
        if (client.stats[next].ejected_until <= now) {
          return next;
        }
        excluded[n++] = next;
      }
    }
    return index;
  }

  uint32_t LimitPick() {
    uint32_t best = 0;
    double best_cost = 0;
    bool found = false;
    const uint32_t n = static_cast<uint32_t>(backends_.size());
    const uint32_t start = static_cast<uint32_t>(rng_.Below(n));
    auto consider = [&](uint32_t b) {
      const SimBackend& sb = backends_[b];
      if (sb.spec.sinkhole) {
        return;
      }
      double cost = (sb.rif() + 1.0) * sb.nanos_per_slot;
      if (!sb.events.empty()) {
        const double factor = Factor(b);
        cost /= factor > 0 ? factor : 1e-6;  // stalled: a last resort
      }
      if (!found || cost < best_cost) {
        best = b;
        best_cost = cost;
        found = true;
      }
    };
    for (uint32_t b = start; b < n; ++b) {
      consider(b);
    }
    for (uint32_t b = 0; b < start; ++b) {
      consider(b);
    }
    return best;
  }

  uint32_t NewCall() {
    if (!free_calls_.empty()) {
      const uint32_t id = free_calls_.back();
      free_calls_.pop_back();
      calls_[id] = Call{};
      return id;
    }
    calls_.emplace_back();
    return static_cast<uint32_t>(calls_.size() - 1);
  }

  // --- Backends
  // ---------------------------------------------------------------

  void SetBusy(SimBackend& b, uint32_t busy) {
    b.busy_nanos += static_cast<double>(b.busy) * (now_ - b.busy_since);
    b.busy_since = now_;
    b.busy = busy;
  }

  void StartQueued(uint32_t backend) {
    SimBackend& b = backends_[backend];
    if (b.spec.sinkhole) {
      return;
    }
    const double factor = Factor(backend);
    if (factor <= 0) {
      return;
    }
    while (b.busy < b.spec.slots && !b.queue.empty()) {
      const uint32_t id = b.queue.front();
      b.queue.pop_front();
      Call& call = calls_[id];
      if (call.finished) {
        Release(id);  // cancelled while queued
        continue;
      }
      --b.live_queued;
      call.state = CallState::kServing;
      SetBusy(b, b.busy + 1);
      const double service = b.call_nanos / factor;
      b.service_ewma =
          b.service_ewma == 0 ? service : 0.8 * b.service_ewma + 0.2 * service;
      Push(now_ + std::max<int64_t>(1, static_cast<int64_t>(service)),
           EvType::kComplete, id);
    }
  }

  void OnComplete(uint32_t id) {
    Call& call = calls_[id];
    SimBackend& b = backends_[call.backend];
    SetBusy(b, b.busy - 1);
    ++b.completed;
    const uint32_t backend = call.backend;
    const double took = static_cast<double>(now_ - call.arrival);
    b.latency_ewma =
        b.latency_ewma == 0 ? took : 0.8 * b.latency_ewma + 0.2 * took;
    if (!call.finished) {
      Answer(id, /*ok=*/true);
      if (plan_.piggyback) {
        ReportTo(clients_[call.client], call.member);
      }
    }
    call.state = CallState::kDone;
    Release(id);
    StartQueued(backend);
  }

  void OnDeadline(uint32_t id) {
    Call& call = calls_[id];
    if (!call.finished) {
      // The client gives up.
      SimBackend& b = backends_[call.backend];
      if (call.state == CallState::kQueued) {
        --b.live_queued;  // cancelled; the queue drops it when it reaches it
      }
      Finish(call, deadline_, /*ok=*/false, /*timeout=*/true);
    }
    Release(id);
  }

  // The backend's answer reaches the client.
  void Answer(uint32_t id, bool ok) {
    Call& call = calls_[id];
    Finish(call, now_ - call.arrival, ok, /*timeout=*/false);
    call.state = CallState::kDone;
  }

  void Finish(Call& call, int64_t latency, bool ok, bool timeout) {
    call.finished = true;
    if (call.measured) {
      if (ok || timeout) {
        latencies_.push_back(latency);
      }
      if (!ok) {
        ++errors_;
      }
      if (timeout) {
        ++timeouts_;
      }
    }
    if (plan_.source == Source::kLimit) {
      return;
    }
    SimClient& client = clients_[call.client];
    const int64_t now = kClockBase + now_;
    Completion completion;
    completion.now_nanos = now;
    completion.latency_nanos = latency;
    completion.ok = ok;
    const Member& member = client.table->member(call.member);
    member.load->Finish(completion, client.table->load_model());
    MemberStats& stats = client.stats[call.member];
    if (ok) {
      stats.consecutive_failures = 0;
      stats.ejected_until = 0;
    } else if (++stats.consecutive_failures >= kEjectAfterFailures) {
      stats.ejected_until = now + kEjectNanos;
    }
  }

  // Drops one reference; the last one returns the call to the pool.
  void Release(uint32_t id) {
    if (--calls_[id].refs == 0) {
      free_calls_.push_back(id);
    }
  }

  // --- Reports
  // ----------------------------------------------------------------

  void OnTick() {
    if (plan_.fleet) {
      // One report per backend to the server, one push of all of them to
      // each client.
      messages_ += backends_.size() + clients_.size();
      for (SimClient& client : clients_) {
        for (uint32_t m = 0; m < member_backend_.size(); ++m) {
          ReportTo(client, m);
        }
      }
      if (plan_.source != Source::kOrca) {
        if (now_ + plan_.interval_nanos < end_) {
          Push(now_ + plan_.interval_nanos, EvType::kTick, 0);
        }
        return;
      }
    }
    const double interval_s = plan_.interval_nanos / 1e9;
    OrcaWeightParams params;
    params.blackout_nanos = 0;  // steady state: the blackout is long past
    std::vector<double> weights(backends_.size(), 0);
    for (uint32_t i = 0; i < backends_.size(); ++i) {
      SimBackend& b = backends_[i];
      SetBusy(b, b.busy);
      OrcaLoad load;
      if (!b.spec.sinkhole) {
        load.qps = b.completed / interval_s;
        load.cpu_utilization =
            b.busy_nanos / (b.spec.slots * plan_.interval_nanos);
      }
      b.completed = 0;
      b.busy_nanos = 0;
      b.orca.OnReport(load, now_, params);
      weights[i] = b.orca.Weight(now_, params);
      ++messages_;
    }
    std::vector<uint32_t> table_weights = OrcaTableWeights(weights);
    if (!table_weights.empty() && table_weights != weights_) {
      weights_ = std::move(table_weights);
      // Every stub gets the same table. Building it once and sharing it
      // (one round-robin position for all) keeps 1000 clients fast; the
      // policy reads no per-client load, so only the interleaving of the
      // clients' picks differs from independent copies.
      PublishTable(clients_[0]).IgnoreError();
      for (SimClient& client : clients_) {
        client.table = clients_[0].table;
        ++messages_;
      }
    }
    if (now_ + plan_.interval_nanos < end_) {
      Push(now_ + plan_.interval_nanos, EvType::kTick, 0);
    }
  }

  // --- Figures
  // ----------------------------------------------------------------

  double Percentile(double q) {
    if (latencies_.empty()) {
      return 0;
    }
    const size_t k = std::min(
        latencies_.size() - 1,
        static_cast<size_t>(q * static_cast<double>(latencies_.size())));
    std::nth_element(latencies_.begin(), latencies_.begin() + k,
                     latencies_.end());
    return latencies_[k] / 1e6;
  }

  // Mean capacity (calls/s) of backend b over virtual [from, to).
  double MeanCapacity(uint32_t b, int64_t from, int64_t to) const {
    const ScenarioBackend& spec = backends_[b].spec;
    if (spec.sinkhole) {
      return 0;
    }
    constexpr int64_t kStep = 10'000'000;
    double sum = 0;
    int n = 0;
    for (int64_t t = from; t < to; t += kStep, ++n) {
      sum += s_.CapacityFactor(b, absl::Nanoseconds(t - warmup_),
                               backends_[b].events);
    }
    return n == 0 ? 0 : spec.calls_per_second() * sum / n;
  }

  void Summarise() {
    result_.calls = measured_calls_;
    result_.p50_ms = Percentile(0.5);
    result_.p99_ms = Percentile(0.99);
    result_.p999_ms = Percentile(0.999);
    const double calls = std::max<double>(1, measured_calls_);
    result_.errors = errors_ / calls;
    result_.timeouts = timeouts_ / calls;
    result_.sinkhole = sinkhole_calls_ / calls;
    result_.extra_messages = messages_ / std::max<double>(1, dispatched_);
    result_.same_backend =
        picks_ == 0 ? 0 : static_cast<double>(same_picks_) / picks_;
    // Shares.
    std::vector<double> capacity(backends_.size());
    double total_capacity = 0;
    uint64_t total_calls = 0;
    for (uint32_t b = 0; b < backends_.size(); ++b) {
      capacity[b] = MeanCapacity(b, warmup_, end_);
      total_capacity += capacity[b];
      total_calls += backends_[b].dispatched;
    }
    for (uint32_t b = 0; b < backends_.size(); ++b) {
      if (capacity[b] <= 0 || total_calls == 0) {
        continue;
      }
      const double share =
          static_cast<double>(backends_[b].dispatched) / total_calls;
      result_.max_share =
          std::max(result_.max_share, share / (capacity[b] / total_capacity));
    }
    // Recovery.
    bool any = false;
    double worst_time = 0;
    double worst_share = 0;
    for (const ScenarioEvent& e : s_.events) {
      // A backend coming back from a capacity drop or a warm-up (a short
      // stall is in the tails, not here).
      if (e.length == absl::InfiniteDuration() ||
          e.kind == ScenarioEvent::Kind::kStall) {
        continue;
      }
      const int64_t r = warmup_ + absl::ToInt64Nanoseconds(e.end());
      if (r + kSecond > end_ || backends_[e.backend].spec.sinkhole) {
        continue;
      }
      // Capacity share of the backend at its own capacity, against the
      // fleet's mean capacity after the recovery.
      double fleet = 0;
      for (uint32_t b = 0; b < backends_.size(); ++b) {
        fleet += MeanCapacity(b, r, std::min(end_, r + 5 * kSecond));
      }
      const double own = backends_[e.backend].spec.calls_per_second() / fleet;
      const size_t first_bin = (r - warmup_ + kBinNanos - 1) / kBinNanos;
      double time = -1;
      for (size_t bin = first_bin;
           bin + kBinsPerWindow <= total_bins_.size() - 1; ++bin) {
        uint64_t mine = 0;
        uint64_t all = 0;
        for (int k = 0; k < kBinsPerWindow; ++k) {
          mine += backends_[e.backend].bins[bin + k];
          all += total_bins_[bin + k];
        }
        if (all > 0 && static_cast<double>(mine) / all >= 0.8 * own) {
          time = ((bin + kBinsPerWindow) * kBinNanos - (r - warmup_)) / 1e9;
          break;
        }
      }
      uint64_t mine = 0;
      uint64_t all = 0;
      for (size_t bin = first_bin;
           bin < std::min(total_bins_.size() - 1, first_bin + 20); ++bin) {
        mine += backends_[e.backend].bins[bin];
        all += total_bins_[bin];
      }
      const double share = all == 0 ? 0 : static_cast<double>(mine) / all / own;
      if (!any) {
        worst_time = time;
        worst_share = share;
        any = true;
      } else {
        if (time < 0 || (worst_time >= 0 && time > worst_time)) {
          worst_time = time;
        }
        worst_share = std::min(worst_share, share);
      }
    }
    result_.recovery_s = worst_time;
    result_.recovered_share = worst_share;
  }

  const Scenario& s_;
  PolicyPlan plan_;
  FastRng rng_;
  StepResult result_;
  int64_t warmup_ = 0;
  int64_t end_ = 0;
  int64_t deadline_ = 0;
  double rate_per_nano_ = 0;
  int64_t now_ = 0;
  uint64_t seq_ = 0;
  uint64_t generation_ = 0;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> events_;
  std::vector<SimBackend> backends_;
  std::vector<SimClient> clients_;
  std::vector<uint32_t> member_backend_;
  std::vector<std::string> addresses_;
  std::vector<uint32_t> weights_;  // by backend
  std::vector<Call> calls_;
  std::vector<uint32_t> free_calls_;
  std::vector<uint64_t> total_bins_;
  std::vector<int64_t> latencies_;
  uint64_t measured_calls_ = 0;
  uint64_t dispatched_ = 0;
  uint64_t errors_ = 0;
  uint64_t timeouts_ = 0;
  uint64_t sinkhole_calls_ = 0;
  uint64_t messages_ = 0;
  uint64_t picks_ = 0;
  uint64_t same_picks_ = 0;
};

}  // namespace

absl::StatusOr<StepResult> RunStep(const Scenario& scenario,
                                   const std::string& name, double load) {
  absl::StatusOr<PolicyPlan> plan = PlanOf(name);
  if (!plan.ok()) {
    return plan.status();
  }
  Simulation sim(scenario, *std::move(plan), name, load);
  return sim.Run();
}

}  // namespace aside::bench
