#include "server/load/load_aggregator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/backend.h"

namespace aside::server {
namespace {

constexpr size_t kMaxReportersPerBackend = 100'000;
// Utilisation above 1 is possible on oversubscribed hosts; past this it is
// a unit mistake.
constexpr double kMaxUtilization = 10;

}  // namespace

std::string LoadAggregator::Key(const std::string& group,
                                const std::string& address) {
  return absl::StrCat(group, "\n", address);
}

absl::Status LoadAggregator::CheckUtilization(const char* field,
                                              const std::optional<double>& v) {
  if (v.has_value() && (!std::isfinite(*v) || *v < 0 || *v > kMaxUtilization)) {
    return absl::InvalidArgumentError(absl::StrCat("utilization.", field, ": ",
                                                   *v, " is not within 0..",
                                                   kMaxUtilization));
  }
  return absl::OkStatus();
}

LoadAggregator::LoadAggregator(const Clock* clock, absl::Duration window,
                               Membership membership, double max_reporter_share)
    : clock_(clock),
      window_(window),
      membership_(std::move(membership)),
      max_reporter_share_(max_reporter_share) {}

std::vector<double> LoadAggregator::CapWeights(std::vector<double> weights,
                                               double share) {
  const size_t n = weights.size();
  if (n == 0 || share >= 1) {
    return weights;
  }
  auto equal = [&] {
    std::fill(weights.begin(), weights.end(), 1.0);
    return weights;
  };
  if (static_cast<double>(n) * share <= 1 + 1e-12) {
    return equal();
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return weights[a] > weights[b]; });
  double rest = 0;
  for (double w : weights) {
    rest += w;
  }
  // Cap the k heaviest at c, where c is `share` of the capped total:
  // c = share * (rest + k c), rest being the uncapped weights' sum.
  for (size_t k = 0; k < n; ++k) {
    const double room = 1 - static_cast<double>(k) * share;
    if (room <= 0) {
      break;
    }
    const double cap = share * rest / room;
    if (weights[order[k]] <= cap) {
      for (size_t j = 0; j < k; ++j) {
        weights[order[j]] = cap;
      }
      return weights;
    }
    rest -= weights[order[k]];
  }
  return equal();
}

double LoadAggregator::WeightedMedian(
    std::vector<std::pair<double, double>> values) {
  std::erase_if(values, [](const auto& v) { return !(v.second > 0); });
  if (values.empty()) {
    return std::nan("");
  }
  std::sort(values.begin(), values.end());
  double total = 0;
  for (const auto& v : values) {
    total += v.second;
  }
  const double half = total / 2;
  double cumulative = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    cumulative += values[i].second;
    if (cumulative >= half - 1e-9 * total) {
      if (std::abs(cumulative - half) <= 1e-9 * total &&
          i + 1 < values.size()) {
        return (values[i].first + values[i + 1].first) / 2;
      }
      return values[i].first;
    }
  }
  return values.back().first;
}

LoadAggregator::Bounded LoadAggregator::BoundedLocked(const BackendState& state,
                                                      int64_t now_nanos) const {
  struct Source {
    double weight = 0;
    double latency_sum = 0, latency_weight = 0;
    double first_byte_sum = 0, first_byte_weight = 0;
    double failed_sum = 0, failed_weight = 0;
    double utilization_sum = 0;
    int utilization_count = 0;
    bool failing = false;
  };
  const int64_t window_nanos = absl::ToInt64Nanoseconds(window_);
  const double inverse_window = 1.0 / static_cast<double>(window_nanos);
  absl::flat_hash_map<absl::string_view, Source> sources;
  auto add = [&](const ReporterState& r) {
    const double w =
        r.window_requests *
        std::exp(-static_cast<double>(now_nanos - r.decayed_at_nanos) *
                 inverse_window);
    Source& s = sources[r.source];
    s.weight += w;
    // Within a source, reporters weigh by their requests (a tiny floor so
    // a source whose reporters all went idle still has a value).
    const double inner = w + 1e-9;
    if (r.last_latency_nanos >= 0) {
      s.latency_sum += inner * r.last_latency_nanos;
      s.latency_weight += inner;
      s.failed_sum += inner * (r.last_failed ? 1 : 0);
      s.failed_weight += inner;
    }
    if (r.last_first_byte_nanos >= 0) {
      s.first_byte_sum += inner * r.last_first_byte_nanos;
      s.first_byte_weight += inner;
    }
    if (r.utilization.has_value()) {
      s.utilization_sum += *r.utilization;
      ++s.utilization_count;
    }
    s.failing = s.failing || r.consecutive_failures > 0;
  };
  for (const auto& [key, r] : state.reporters) {
    if (now_nanos - r.last_seen_nanos <= window_nanos) {
      add(r);
    }
  }
  // A peer's entries are fresh while the peer holds them.
  for (const auto& [key, remote] : state.remote) {
    add(remote.r);
  }
  std::vector<const Source*> weighed;
  std::vector<double> weights;
  std::vector<std::pair<double, double>> utilization;
  for (const auto& [name, s] : sources) {
    if (s.utilization_count > 0) {
      utilization.emplace_back(s.utilization_sum / s.utilization_count, 1.0);
    }
    if (s.weight > 0) {
      weighed.push_back(&s);
      weights.push_back(s.weight);
    }
  }
  weights = CapWeights(std::move(weights), max_reporter_share_);
  std::vector<std::pair<double, double>> latency, first_byte, failed;
  double total = 0;
  double failing = 0;
  for (size_t i = 0; i < weighed.size(); ++i) {
    const Source& s = *weighed[i];
    total += weights[i];
    failing += s.failing ? weights[i] : 0;
    if (s.latency_weight > 0) {
      latency.emplace_back(s.latency_sum / s.latency_weight, weights[i]);
      failed.emplace_back(s.failed_sum / s.failed_weight, weights[i]);
    }
    if (s.first_byte_weight > 0) {
      first_byte.emplace_back(s.first_byte_sum / s.first_byte_weight,
                              weights[i]);
    }
  }
  Bounded out;
  if (const double v = WeightedMedian(std::move(latency)); !std::isnan(v)) {
    out.latency_nanos = v;
  }
  if (const double v = WeightedMedian(std::move(first_byte)); !std::isnan(v)) {
    out.first_byte_nanos = v;
  }
  if (const double v = WeightedMedian(std::move(failed)); !std::isnan(v)) {
    out.failed = v >= 0.5;
  }
  if (const double v = WeightedMedian(std::move(utilization)); !std::isnan(v)) {
    out.utilization = v;
  }
  out.failures_corroborated = total > 0 && failing >= total / 2;
  return out;
}

void LoadAggregator::set_listener(Listener listener) {
  listener_ = std::move(listener);
}

absl::Status LoadAggregator::Add(const std::string& reporter,
                                 const LoadObservation& o) {
  if (o.group.empty()) {
    return absl::InvalidArgumentError("group: required");
  }
  if (o.address.empty()) {
    return absl::InvalidArgumentError("address: required");
  }
  if (!membership_(o.group, o.address)) {
    return absl::NotFoundError(absl::StrCat("address: ", EchoName(o.address),
                                            " is not a backend of group '",
                                            EchoName(o.group), "'"));
  }
  if (o.failures > o.requests && !o.deltas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "failures: ", o.failures, " exceeds requests (", o.requests, ")"));
  }
  if (o.latency_sum_nanos < 0) {
    return absl::InvalidArgumentError("latency_sum: negative");
  }
  if (o.first_byte_latency_sum_nanos < 0) {
    return absl::InvalidArgumentError("first_byte_latency_sum: negative");
  }
  if (o.in_flight > kMaxInFlight) {
    return absl::InvalidArgumentError(absl::StrCat("in_flight: ", o.in_flight,
                                                   " is implausible (at most ",
                                                   kMaxInFlight, ")"));
  }
  if (absl::Status s = CheckUtilization("cpu", o.cpu); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckUtilization("application", o.application);
      !s.ok()) {
    return s;
  }

  const int64_t now = clock_->NowNanos();
  const std::string& source = o.source.empty() ? reporter : o.source;
  // Keyed by source too, so that one credential cannot write into the
  // counters another one's reporter id keeps.
  const std::string reporter_key = absl::StrCat(source, "\x1f", reporter);
  const bool has_utilization = o.application.has_value() || o.cpu.has_value();
  Accepted accepted;
  {
    aside::MutexLock lock(&mu_);
    BackendState& state = backends_[Key(o.group, o.address)];
    auto it = state.reporters.find(reporter_key);
    if (it == state.reporters.end()) {
      if (state.reporters.size() >= kMaxReportersPerBackend) {
        return absl::ResourceExhaustedError(
            "reporter: too many reporters for this backend");
      }
      it = state.reporters
               .emplace(reporter_key, ReporterState{.source = source,
                                                    .decayed_at_nanos = now})
               .first;
      // A new reporter's first cumulative report is its baseline: what it
      // counted before is unknown history, not a burst in this window.
      if (!o.deltas) {
        ReporterState& r = it->second;
        r.requests = o.requests;
        r.failures = o.failures;
        r.latency_sum_nanos = o.latency_sum_nanos;
        r.first_byte_sum_nanos = o.first_byte_latency_sum_nanos;
        r.in_flight = o.in_flight;
        r.consecutive_failures = o.consecutive_failures;
        r.last_seen_nanos = now;
        if (has_utilization) {
          r.utilization = o.application.has_value() ? o.application : o.cpu;
          state.utilization = BoundedLocked(state, now).utilization;
          state.utilization_at = clock_->WallNow();
        }
        return absl::OkStatus();
      }
    }
    ReporterState& r = it->second;
    Bucket delta;
    if (o.deltas) {
      delta.requests = o.requests;
      delta.failures = std::min(o.failures, o.requests);
      delta.latency_nanos = o.latency_sum_nanos;
      delta.first_byte_nanos = o.first_byte_latency_sum_nanos;
    } else if (o.reset) {
      delta.requests = o.requests;
      delta.failures = o.failures;
      delta.latency_nanos = o.latency_sum_nanos;
      delta.first_byte_nanos = o.first_byte_latency_sum_nanos;
    } else {
      if (o.requests < r.requests || o.failures < r.failures ||
          o.latency_sum_nanos < r.latency_sum_nanos ||
          o.first_byte_latency_sum_nanos < r.first_byte_sum_nanos) {
        return absl::InvalidArgumentError(
            absl::StrCat("requests: counters went backwards (", r.requests,
                         " -> ", o.requests, "); set reset after a restart"));
      }
      delta.requests = o.requests - r.requests;
      delta.failures = o.failures - r.failures;
      delta.latency_nanos = o.latency_sum_nanos - r.latency_sum_nanos;
      delta.first_byte_nanos =
          o.first_byte_latency_sum_nanos - r.first_byte_sum_nanos;
    }
    if (delta.failures > delta.requests) {
      return absl::InvalidArgumentError(
          "failures: grew by more than requests since the last report");
    }
    if (delta.first_byte_nanos > 0) {
      delta.first_byte_requests = delta.requests;
    }
    if (!o.deltas) {
      r.requests = o.requests;
      r.failures = o.failures;
      r.latency_sum_nanos = o.latency_sum_nanos;
      r.first_byte_sum_nanos = o.first_byte_latency_sum_nanos;
    }
    SourceTotals& totals = state.local_sources[source];
    totals.requests += delta.requests;
    totals.failures += delta.failures;
    totals.latency_nanos += delta.latency_nanos;
    totals.first_byte_nanos += delta.first_byte_nanos;
    totals.first_byte_requests += delta.first_byte_requests;
    r.last_seen_nanos = now;
    std::optional<double> utilization;
    if (has_utilization) {
      utilization = o.application.has_value() ? o.application : o.cpu;
    }
    // Reporters of deltas (xDS LRS) count no failure runs of their own:
    // an interval in which every call failed extends the run, one with a
    // success ends it, one with no calls leaves it. So LRS reporters feed
    // ejection as stubs do (within the same reporter bounds).
    uint32_t consecutive_failures = o.consecutive_failures;
    if (o.deltas) {
      if (delta.requests == 0) {
        consecutive_failures = r.consecutive_failures;
      } else if (delta.failures >= delta.requests) {
        consecutive_failures = static_cast<uint32_t>(std::min<uint64_t>(
            uint64_t{r.consecutive_failures} + delta.failures,
            std::numeric_limits<uint32_t>::max()));
      } else {
        consecutive_failures = 0;
      }
    }
    accepted = FoldLocked(state, r, delta, o.in_flight, consecutive_failures,
                          utilization, now);
    accepted.group = o.group;
    accepted.address = o.address;
  }
  if (listener_) {
    listener_(accepted);
  }
  return absl::OkStatus();
}

LoadAggregator::Accepted LoadAggregator::FoldLocked(
    BackendState& state, ReporterState& r, const Bucket& delta,
    uint64_t in_flight, uint32_t consecutive_failures,
    const std::optional<double>& utilization, int64_t now) {
  r.in_flight = in_flight;
  r.consecutive_failures = consecutive_failures;
  r.window_requests =
      r.window_requests *
          std::exp(-static_cast<double>(now - r.decayed_at_nanos) /
                   static_cast<double>(absl::ToInt64Nanoseconds(window_))) +
      static_cast<double>(delta.requests);
  r.decayed_at_nanos = now;
  if (delta.requests > 0) {
    const double n = static_cast<double>(delta.requests);
    r.last_latency_nanos = static_cast<double>(delta.latency_nanos) / n;
    r.last_first_byte_nanos =
        delta.first_byte_requests > 0
            ? static_cast<double>(delta.first_byte_nanos) /
                  static_cast<double>(delta.first_byte_requests)
            : -1;
    r.last_failed = delta.failures >= delta.requests;
  }
  if (utilization.has_value()) {
    r.utilization = utilization;
  }
  AddToBucketsLocked(state.buckets, now, delta);
  const Bounded bounded = BoundedLocked(state, now);
  if (utilization.has_value()) {
    state.utilization = bounded.utilization;
    state.utilization_at = clock_->WallNow();
  }
  Accepted accepted;
  accepted.new_requests = delta.requests;
  accepted.new_failures = delta.failures;
  accepted.consecutive_failures = consecutive_failures;
  accepted.failures_corroborated = bounded.failures_corroborated;
  if (delta.requests > 0) {
    accepted.failed = bounded.failed;
    if (bounded.latency_nanos >= 0) {
      accepted.mean_latency =
          absl::Nanoseconds(static_cast<int64_t>(bounded.latency_nanos));
    }
    if (bounded.first_byte_nanos >= 0) {
      accepted.mean_first_byte_latency =
          absl::Nanoseconds(static_cast<int64_t>(bounded.first_byte_nanos));
    }
  }
  return accepted;
}

void LoadAggregator::AddToBucketsLocked(std::deque<Bucket>& buckets,
                                        int64_t now_nanos,
                                        const Bucket& delta) {
  const int64_t second = now_nanos / 1'000'000'000;
  if (buckets.empty() || buckets.back().second != second) {
    buckets.push_back(Bucket{.second = second});
  }
  Bucket& b = buckets.back();
  b.requests += delta.requests;
  b.failures += delta.failures;
  b.latency_nanos += delta.latency_nanos;
  b.first_byte_nanos += delta.first_byte_nanos;
  b.first_byte_requests += delta.first_byte_requests;
  const int64_t oldest = second - absl::ToInt64Seconds(window_);
  while (!buckets.empty() && buckets.front().second <= oldest) {
    buckets.pop_front();
  }
}

std::vector<std::pair<std::string, uint64_t>> LoadAggregator::InFlight(
    const std::string& group, const std::string& address) const {
  std::vector<std::pair<std::string, uint64_t>> out;
  const int64_t now = clock_->NowNanos();
  const int64_t window_nanos = absl::ToInt64Nanoseconds(window_);
  aside::MutexLock lock(&mu_);
  auto it = backends_.find(Key(group, address));
  if (it == backends_.end()) {
    return out;
  }
  for (const auto& [key, r] : it->second.reporters) {
    if (r.in_flight > 0 && now - r.last_seen_nanos <= window_nanos) {
      // Keyed by source and reporter (Add): the reporter's own name.
      const size_t cut = key.find('\x1f');
      out.emplace_back(cut == std::string::npos ? key : key.substr(cut + 1),
                       r.in_flight);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

LoadSnapshot LoadAggregator::Snapshot(const std::string& group,
                                      const std::string& address) const {
  LoadSnapshot out;
  const int64_t now = clock_->NowNanos();
  const int64_t window_nanos = absl::ToInt64Nanoseconds(window_);
  const int64_t oldest = now / 1'000'000'000 - absl::ToInt64Seconds(window_);
  aside::MutexLock lock(&mu_);
  auto it = backends_.find(Key(group, address));
  if (it == backends_.end()) {
    return out;
  }
  const BackendState& state = it->second;
  int64_t latency = 0;
  int64_t first_byte = 0;
  uint64_t first_byte_requests = 0;
  for (const Bucket& b : state.buckets) {
    if (b.second <= oldest) {
      continue;
    }
    out.window_requests += b.requests;
    out.window_failures += b.failures;
    latency += b.latency_nanos;
    first_byte += b.first_byte_nanos;
    first_byte_requests += b.first_byte_requests;
  }
  const double seconds = absl::ToDoubleSeconds(window_);
  out.requests_per_second = static_cast<double>(out.window_requests) / seconds;
  if (out.window_requests > 0) {
    out.failure_ratio = static_cast<double>(out.window_failures) /
                        static_cast<double>(out.window_requests);
    out.mean_latency =
        absl::Nanoseconds(latency / static_cast<int64_t>(out.window_requests));
  }
  if (first_byte_requests > 0) {
    out.mean_first_byte_latency = absl::Nanoseconds(
        first_byte / static_cast<int64_t>(first_byte_requests));
  }
  for (const auto& [name, r] : state.reporters) {
    if (now - r.last_seen_nanos <= window_nanos) {
      ++out.reporters;
      out.in_flight += r.in_flight;
      out.consecutive_failures =
          std::max(out.consecutive_failures, r.consecutive_failures);
    }
  }
  out.utilization = state.utilization;
  out.utilization_at = state.utilization_at;
  for (const auto& [key, remote] : state.remote) {
    out.reporters += remote.reporters;
    out.in_flight += remote.r.in_flight;
    out.consecutive_failures =
        std::max(out.consecutive_failures, remote.r.consecutive_failures);
    // A peer resends an unchanged value only when it changes; it is as
    // recent as the peer's last word.
    if (remote.r.utilization.has_value()) {
      if (auto p = peers_.find(key.first); p != peers_.end()) {
        out.utilization_at = std::max(out.utilization_at, p->second.heard);
      }
    }
  }
  return out;
}

absl::Status LoadAggregator::AddClientStats(
    const std::string& group, int64_t started, int64_t finished,
    int64_t failed_to_send, int64_t known_received,
    const std::vector<std::pair<std::string, int64_t>>& dropped) {
  if (started < 0 || finished < 0 || failed_to_send < 0 || known_received < 0) {
    return absl::InvalidArgumentError("client_stats: negative count");
  }
  for (const auto& [token, n] : dropped) {
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "client_stats.calls_finished_with_drop['", token, "']: negative"));
    }
  }
  aside::MutexLock lock(&mu_);
  ClientStatsTotals& t = client_stats_[group];
  t.calls_started += static_cast<uint64_t>(started);
  t.calls_finished += static_cast<uint64_t>(finished);
  t.failed_to_send += static_cast<uint64_t>(failed_to_send);
  t.known_received += static_cast<uint64_t>(known_received);
  for (const auto& [token, n] : dropped) {
    auto it = t.dropped.find(token);
    if (it == t.dropped.end()) {
      if (t.dropped.size() >= 64) {
        continue;
      }
      it = t.dropped.emplace(token, 0).first;
    }
    it->second += static_cast<uint64_t>(n);
  }
  t.last_report = clock_->WallNow();
  AddToBucketsLocked(client_call_buckets_[group], clock_->NowNanos(),
                     Bucket{.requests = static_cast<uint64_t>(finished)});
  return absl::OkStatus();
}

void LoadAggregator::AddDroppedCalls(const std::string& group,
                                     uint64_t dropped) {
  aside::MutexLock lock(&mu_);
  lrs_dropped_[group] += dropped;
  AddToBucketsLocked(client_call_buckets_[group], clock_->NowNanos(),
                     Bucket{.requests = dropped});
}

ClientStatsTotals LoadAggregator::ClientStats(const std::string& group) const {
  aside::MutexLock lock(&mu_);
  auto it = client_stats_.find(group);
  ClientStatsTotals out =
      it == client_stats_.end() ? ClientStatsTotals{} : it->second;
  // Plus what the peers' grpclb clients reported to them.
  for (const auto& [peer, p] : peers_) {
    auto c = p.calls.find(group);
    if (c == p.calls.end()) {
      continue;
    }
    out.calls_started += c->second.calls_started;
    out.calls_finished += c->second.calls_finished;
    out.failed_to_send += c->second.failed_to_send;
    out.known_received += c->second.known_received;
    for (const auto& [token, n] : c->second.dropped) {
      out.dropped[token] += n;
    }
    out.last_report = std::max(out.last_report, p.calls_at.at(group));
  }
  return out;
}

double LoadAggregator::OverloadFraction(const std::string& group,
                                        double max_requests_per_second) const {
  if (max_requests_per_second <= 0) {
    return 0;
  }
  constexpr int64_t kSecond = 1'000'000'000;
  const int64_t now = clock_->NowNanos();
  aside::MutexLock lock(&overload_mu_);
  auto [it, added] = overloads_.try_emplace(group);
  OverloadLevel& level = it->second;
  if (added || level.limit != max_requests_per_second ||
      now - level.read_at >= kSecond) {
    const double rate = GroupRequestsPerSecond(group);
    level.limit = max_requests_per_second;
    level.fraction =
        rate > max_requests_per_second
            ? std::min(kMaxOverloadFraction, 1 - max_requests_per_second / rate)
            : 0;
    level.read_at = now;
    const double fraction = level.fraction;
    // Levels of groups nobody asked about for 10 s go.
    if (now - overloads_swept_at_ >= 10 * kSecond) {
      overloads_swept_at_ = now;
      absl::erase_if(overloads_, [now](const auto& entry) {
        return now - entry.second.read_at >= 10 * kSecond;
      });
    }
    return fraction;
  }
  return level.fraction;
}

double LoadAggregator::GroupRequestsPerSecond(const std::string& group) const {
  const int64_t now = clock_->NowNanos();
  const int64_t oldest = now / 1'000'000'000 - absl::ToInt64Seconds(window_);
  const std::string prefix = absl::StrCat(group, "\n");
  uint64_t requests = 0;
  aside::MutexLock lock(&mu_);
  for (const auto& [key, state] : backends_) {
    if (key.compare(0, prefix.size(), prefix) != 0) {
      continue;
    }
    for (const Bucket& b : state.buckets) {
      if (b.second > oldest) {
        requests += b.requests;
      }
    }
  }
  if (auto it = client_call_buckets_.find(group);
      it != client_call_buckets_.end()) {
    for (const Bucket& b : it->second) {
      if (b.second > oldest) {
        requests += b.requests;
      }
    }
  }
  return static_cast<double>(requests) / absl::ToDoubleSeconds(window_);
}

void LoadAggregator::Prune() {
  const int64_t now = clock_->NowNanos();
  // Reporters quiet for ten windows are forgotten (a returning one sends a
  // new baseline).
  const int64_t horizon = 10 * absl::ToInt64Nanoseconds(window_);
  std::vector<std::pair<std::string, std::string>> keys;
  {
    aside::MutexLock lock(&mu_);
    for (auto& [key, state] : backends_) {
      absl::erase_if(state.reporters, [&](const auto& entry) {
        return now - entry.second.last_seen_nanos > horizon;
      });
      // A source's totals go with its last reporter (one that returns
      // starts from zero: peers take that as a new baseline).
      absl::flat_hash_set<absl::string_view> sources;
      for (const auto& [name, r] : state.reporters) {
        sources.insert(r.source);
      }
      absl::erase_if(state.local_sources, [&](const auto& entry) {
        return !sources.contains(entry.first);
      });
      const size_t split = key.find('\n');
      keys.emplace_back(key.substr(0, split), key.substr(split + 1));
    }
  }
  std::vector<std::string> gone;
  for (const auto& [group, address] : keys) {
    if (!membership_(group, address)) {
      gone.push_back(Key(group, address));
    }
  }
  aside::MutexLock lock(&mu_);
  for (const std::string& key : gone) {
    backends_.erase(key);
  }
  absl::erase_if(backends_, [](const auto& entry) {
    return entry.second.reporters.empty() && entry.second.buckets.empty() &&
           entry.second.remote.empty() && !entry.second.utilization.has_value();
  });
  const int64_t oldest = now / 1'000'000'000 - absl::ToInt64Seconds(window_);
  absl::erase_if(client_call_buckets_, [oldest](const auto& entry) {
    return entry.second.empty() || entry.second.back().second <= oldest;
  });
}

}  // namespace aside::server
