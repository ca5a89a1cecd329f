// LoadAggregator's fleet side: exporting this replica's own aggregates and
// folding in its peers' (see the file comment of load_aggregator.h).
#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/backend.h"
#include "server/load/load_aggregator.h"

namespace aside::server {
namespace {

constexpr size_t kMaxNameBytes = 512;
constexpr size_t kMaxDropTokens = 64;

}  // namespace

LocalLoads LoadAggregator::ExportLocal() const {
  struct Gauges {
    uint64_t in_flight = 0;
    uint32_t consecutive_failures = 0;
    uint32_t reporters = 0;
    double utilization_sum = 0;
    int utilization_count = 0;
  };
  LocalLoads out;
  const int64_t now = clock_->NowNanos();
  const int64_t window_nanos = absl::ToInt64Nanoseconds(window_);
  {
    aside::MutexLock lock(&mu_);
    for (const auto& [key, state] : backends_) {
      absl::flat_hash_map<absl::string_view, Gauges> fresh;
      for (const auto& [name, r] : state.reporters) {
        if (now - r.last_seen_nanos > window_nanos) {
          continue;
        }
        Gauges& g = fresh[r.source];
        g.in_flight += r.in_flight;
        g.consecutive_failures =
            std::max(g.consecutive_failures, r.consecutive_failures);
        ++g.reporters;
        if (r.utilization.has_value()) {
          g.utilization_sum += *r.utilization;
          ++g.utilization_count;
        }
      }
      if (fresh.empty()) {
        continue;
      }
      const size_t split = key.find('\n');
      for (const auto& [source, g] : fresh) {
        SourceAggregate a;
        a.group = key.substr(0, split);
        a.address = key.substr(split + 1);
        a.source = std::string(source);
        if (auto t = state.local_sources.find(source);
            t != state.local_sources.end()) {
          a.requests = t->second.requests;
          a.failures = t->second.failures;
          a.latency_sum_nanos = t->second.latency_nanos;
          a.first_byte_sum_nanos = t->second.first_byte_nanos;
          a.first_byte_requests = t->second.first_byte_requests;
        }
        a.in_flight = g.in_flight;
        a.consecutive_failures = g.consecutive_failures;
        a.reporters = g.reporters;
        if (g.utilization_count > 0) {
          a.utilization = g.utilization_sum / g.utilization_count;
        }
        out.sources.push_back(std::move(a));
      }
    }
    absl::flat_hash_map<std::string, GroupCallTotals> calls;
    for (const auto& [group, t] : client_stats_) {
      GroupCallTotals& c = calls[group];
      c.group = group;
      c.calls_started = t.calls_started;
      c.calls_finished = t.calls_finished;
      c.failed_to_send = t.failed_to_send;
      c.known_received = t.known_received;
      c.dropped = t.dropped;
    }
    for (const auto& [group, n] : lrs_dropped_) {
      GroupCallTotals& c = calls[group];
      c.group = group;
      c.lrs_dropped = n;
    }
    for (auto& [group, c] : calls) {
      out.calls.push_back(std::move(c));
    }
  }
  std::sort(out.sources.begin(), out.sources.end(),
            [](const SourceAggregate& a, const SourceAggregate& b) {
              return std::tie(a.group, a.address, a.source) <
                     std::tie(b.group, b.address, b.source);
            });
  std::sort(out.calls.begin(), out.calls.end(),
            [](const GroupCallTotals& a, const GroupCallTotals& b) {
              return a.group < b.group;
            });
  return out;
}

absl::Status LoadAggregator::ValidatePeerEntry(const SourceAggregate& a) const {
  if (a.group.empty() || a.group.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("group: required, at most 512 bytes");
  }
  if (a.address.empty() || a.address.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("address: required, at most 512 bytes");
  }
  if (a.source.empty() || a.source.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("source: required, at most 512 bytes");
  }
  if (a.failures > a.requests) {
    return absl::InvalidArgumentError(absl::StrCat(
        "failures: ", a.failures, " exceeds requests (", a.requests, ")"));
  }
  if (a.first_byte_requests > a.requests) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_byte_requests: ", a.first_byte_requests,
                     " exceeds requests (", a.requests, ")"));
  }
  if (a.latency_sum_nanos < 0) {
    return absl::InvalidArgumentError("latency_sum_nanos: negative");
  }
  if (a.first_byte_sum_nanos < 0) {
    return absl::InvalidArgumentError("first_byte_latency_sum_nanos: negative");
  }
  if (a.in_flight > kMaxInFlight) {
    return absl::InvalidArgumentError(absl::StrCat("in_flight: ", a.in_flight,
                                                   " is implausible (at most ",
                                                   kMaxInFlight, ")"));
  }
  if (absl::Status s = CheckUtilization("value", a.utilization); !s.ok()) {
    return s;
  }
  if (!membership_(a.group, a.address)) {
    return absl::NotFoundError(absl::StrCat("address: ", EchoName(a.address),
                                            " is not a backend of group '",
                                            EchoName(a.group), "'"));
  }
  return absl::OkStatus();
}

bool LoadAggregator::ApplyPeerEntryLocked(const std::string& peer,
                                          const SourceAggregate& a, int64_t now,
                                          Accepted* accepted,
                                          std::string* error) {
  BackendState& state = backends_[Key(a.group, a.address)];
  auto [it, added] = state.remote.try_emplace(std::make_pair(peer, a.source));
  RemoteState& remote = it->second;
  ReporterState& r = remote.r;
  const bool had_utilization = r.utilization.has_value();
  remote.reporters = a.reporters;
  // The first counters, and counters that went backwards (the peer
  // restarted them), are a baseline: what they count is not news.
  const bool baseline = added || a.requests < r.requests ||
                        a.failures < r.failures ||
                        a.latency_sum_nanos < r.latency_sum_nanos ||
                        a.first_byte_sum_nanos < r.first_byte_sum_nanos ||
                        a.first_byte_requests < remote.first_byte_requests;
  Bucket delta;
  if (!baseline) {
    delta.requests = a.requests - r.requests;
    delta.failures = a.failures - r.failures;
    delta.latency_nanos = a.latency_sum_nanos - r.latency_sum_nanos;
    delta.first_byte_nanos = a.first_byte_sum_nanos - r.first_byte_sum_nanos;
    delta.first_byte_requests =
        a.first_byte_requests - remote.first_byte_requests;
    if (delta.failures > delta.requests ||
        delta.first_byte_requests > delta.requests) {
      *error = "failures: grew by more than requests since the last update";
      return false;
    }
  }
  if (added) {
    r.source = a.source;
    r.decayed_at_nanos = now;
  }
  r.requests = a.requests;
  r.failures = a.failures;
  r.latency_sum_nanos = a.latency_sum_nanos;
  r.first_byte_sum_nanos = a.first_byte_sum_nanos;
  remote.first_byte_requests = a.first_byte_requests;
  r.utilization = a.utilization;
  if (baseline) {
    r.in_flight = a.in_flight;
    r.consecutive_failures = a.consecutive_failures;
    if (a.utilization.has_value() || had_utilization) {
      state.utilization = BoundedLocked(state, now).utilization;
      state.utilization_at = clock_->WallNow();
    }
    return false;
  }
  *accepted = FoldLocked(state, r, delta, a.in_flight, a.consecutive_failures,
                         a.utilization, now);
  if (had_utilization && !a.utilization.has_value()) {
    state.utilization = BoundedLocked(state, now).utilization;
  }
  accepted->group = a.group;
  accepted->address = a.address;
  return true;
}

std::vector<std::pair<size_t, std::string>> LoadAggregator::ApplyPeer(
    const std::string& peer, const PeerLoadUpdate& update) {
  std::vector<std::pair<size_t, std::string>> rejected;
  // Checked before the lock: membership asks the group registry.
  std::vector<bool> valid(update.loads.size(), false);
  for (size_t i = 0; i < update.loads.size(); ++i) {
    if (absl::Status s = ValidatePeerEntry(update.loads[i]); !s.ok()) {
      rejected.emplace_back(i, std::string(s.message()));
    } else {
      valid[i] = true;
    }
  }
  std::vector<Accepted> heard;
  const int64_t now = clock_->NowNanos();
  const absl::Time wall_now = clock_->WallNow();
  {
    aside::MutexLock lock(&mu_);
    PeerState& p = peers_[peer];
    p.heard = wall_now;
    // Dropping entries first: a key removed and re-added in one update
    // starts again from its new baseline.
    auto drop = [&](BackendState& state,
                    auto it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const bool had_utilization = it->second.r.utilization.has_value();
      state.remote.erase(it);
      if (had_utilization) {
        state.utilization = BoundedLocked(state, now).utilization;
      }
    };
    if (update.snapshot) {
      absl::flat_hash_set<std::string> kept;
      for (size_t i = 0; i < update.loads.size(); ++i) {
        const SourceAggregate& a = update.loads[i];
        kept.insert(absl::StrCat(Key(a.group, a.address), "\n", a.source));
      }
      for (auto& [key, state] : backends_) {
        for (auto it = state.remote.begin(); it != state.remote.end();) {
          auto next = std::next(it);
          if (it->first.first == peer &&
              !kept.contains(absl::StrCat(key, "\n", it->first.second))) {
            drop(state, it);
          }
          it = next;
        }
      }
    }
    for (const PeerLoadUpdate::Key& k : update.removed) {
      auto b = backends_.find(Key(k.group, k.address));
      if (b == backends_.end()) {
        continue;
      }
      if (auto it = b->second.remote.find(std::make_pair(peer, k.source));
          it != b->second.remote.end()) {
        drop(b->second, it);
      }
    }
    for (size_t i = 0; i < update.loads.size(); ++i) {
      if (!valid[i]) {
        continue;
      }
      Accepted accepted;
      std::string error;
      if (ApplyPeerEntryLocked(peer, update.loads[i], now, &accepted, &error)) {
        heard.push_back(std::move(accepted));
      } else if (!error.empty()) {
        rejected.emplace_back(i, std::move(error));
      }
    }
    absl::flat_hash_set<std::string> groups;
    for (const GroupCallTotals& c : update.calls) {
      if (c.group.empty() || c.group.size() > kMaxNameBytes ||
          c.dropped.size() > kMaxDropTokens) {
        continue;
      }
      groups.insert(c.group);
      auto prev = p.calls.find(c.group);
      if (prev != p.calls.end() &&
          c.calls_finished >= prev->second.calls_finished &&
          c.lrs_dropped >= prev->second.lrs_dropped) {
        const uint64_t offered =
            (c.calls_finished - prev->second.calls_finished) +
            (c.lrs_dropped - prev->second.lrs_dropped);
        if (offered > 0) {
          AddToBucketsLocked(client_call_buckets_[c.group], now,
                             Bucket{.requests = offered});
        }
      }
      p.calls[c.group] = c;
      p.calls_at[c.group] = wall_now;
    }
    if (update.snapshot) {
      absl::erase_if(p.calls, [&](const auto& entry) {
        return !groups.contains(entry.first);
      });
      absl::erase_if(p.calls_at, [&](const auto& entry) {
        return !groups.contains(entry.first);
      });
    }
  }
  if (listener_) {
    for (const Accepted& a : heard) {
      listener_(a);
    }
  }
  return rejected;
}

void LoadAggregator::RemovePeer(const std::string& peer) {
  const int64_t now = clock_->NowNanos();
  aside::MutexLock lock(&mu_);
  peers_.erase(peer);
  for (auto& [key, state] : backends_) {
    bool had_utilization = false;
    for (auto it = state.remote.begin(); it != state.remote.end();) {
      auto next = std::next(it);
      if (it->first.first == peer) {
        had_utilization = had_utilization || it->second.r.utilization;
        state.remote.erase(it);
      }
      it = next;
    }
    if (had_utilization) {
      state.utilization = BoundedLocked(state, now).utilization;
    }
  }
}

std::map<std::string, absl::Time> LoadAggregator::Peers() const {
  std::map<std::string, absl::Time> out;
  aside::MutexLock lock(&mu_);
  for (const auto& [peer, p] : peers_) {
    out.emplace(peer, p.heard);
  }
  return out;
}

}  // namespace aside::server
