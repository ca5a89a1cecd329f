#include "server/status/history.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/json.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"

namespace aside::server {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Shares are kept in 1/kShareScale units; kNone is "not measured".
constexpr uint16_t kNone = 0xFFFF;
constexpr double kShareScale = 65534;

constexpr uint8_t kReady = 1;
constexpr uint8_t kDrained = 2;
constexpr uint8_t kEligible = 4;

uint16_t Share(double share) {
  if (!std::isfinite(share)) {
    return kNone;
  }
  return static_cast<uint16_t>(
      std::lround(std::clamp(share, 0.0, 1.0) * kShareScale));
}

double Unshare(uint16_t v) {
  return v == kNone ? std::nan("") : static_cast<double>(v) / kShareScale;
}

uint16_t Saturate16(uint64_t v) {
  return static_cast<uint16_t>(std::min<uint64_t>(v, kNone - 1));
}

double Value(float v) { return static_cast<double>(v); }

void AppendNumber(std::string* out, double v) {
  if (std::isfinite(v)) {
    // Up to 4 significant decimals, without trailing zeros.
    std::string s = absl::StrFormat("%.4f", v);
    while (s.back() == '0') {
      s.pop_back();
    }
    if (s.back() == '.') {
      s.pop_back();
    }
    out->append(s);
  } else {
    out->append("null");
  }
}

void AppendSeries(std::string* out, absl::string_view name,
                  const std::vector<double>& values) {
  absl::StrAppend(out, ",\"", name, "\":[");
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) {
      out->push_back(',');
    }
    AppendNumber(out, values[i]);
  }
  out->push_back(']');
}

template <typename T, typename F>
void AppendOptional(std::string* out, absl::string_view name,
                    const std::vector<std::optional<T>>& values, F format) {
  absl::StrAppend(out, ",\"", name, "\":[");
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) {
      out->push_back(',');
    }
    if (values[i].has_value()) {
      format(out, *values[i]);
    } else {
      out->append("null");
    }
  }
  out->push_back(']');
}

}  // namespace

struct StatusHistory::GroupPoint {
  // NaN: not measured.
  float picks = kNaN;
  float pick_failures = kNaN;
  float requests = kNaN;
  float errors = kNaN;
  float latency_ms = kNaN;
  uint16_t ready = kNone;  // kNone: not seen at this sample
  uint16_t total = kNone;
};
static_assert(sizeof(float) == 4);

struct StatusHistory::BackendPoint {
  float requests = kNaN;  // NaN: not reported
  float errors = kNaN;
  float latency_ms = kNaN;
  uint16_t pick_share = kNone;  // kNone: no picks in the interval
  uint16_t weight_share = kNone;
  uint16_t effective_weight = kNone;  // kNone: not a member at this sample
  uint16_t in_flight = kNone;         // kNone: not reported
  uint8_t health = 0;
  uint8_t flags = 0;
};

struct StatusHistory::BackendSeries {
  explicit BackendSeries(size_t n) : points(new BackendPoint[n]) {}
  std::unique_ptr<BackendPoint[]> points;
  uint64_t first_seq = 0;
  uint64_t last_seen_seq = 0;
  uint64_t prev_picks = 0;
};

struct StatusHistory::GroupSeries {
  explicit GroupSeries(size_t n) : points(new GroupPoint[n]) {}
  std::unique_ptr<GroupPoint[]> points;
  uint64_t first_seq = 0;
  uint64_t last_seen_seq = 0;
  uint64_t prev_picks = 0;
  uint64_t prev_failures = 0;
  absl::flat_hash_map<std::string, BackendSeries> backends;
  uint64_t untracked_backends = 0;
};

StatusHistory::StatusHistory(HistorySources sources, HistoryOptions options)
    : sources_(std::move(sources)), options_([&] {
        HistoryOptions o = options;
        o.samples = std::max<size_t>(2, o.samples);
        o.interval = std::max(o.interval, absl::Milliseconds(100));
        return o;
      }()) {
  aside::MutexLock lock(&mu_);
  times_unix_ms_.assign(options_.samples, 0);
}

StatusHistory::~StatusHistory() { Stop(); }

void StatusHistory::Start(EventLoop* loop) {
  if (ticker_ != nullptr) {
    return;
  }
  ticker_ = std::make_unique<Ticker>(
      loop, "aside-history", std::min(options_.interval, absl::Seconds(1)),
      [this] { MaybeSample(); });
}

void StatusHistory::Stop() {
  if (ticker_ != nullptr) {
    ticker_->Stop();
  }
}

bool StatusHistory::MaybeSample() {
  const int64_t now = options_.clock->NowNanos();
  {
    aside::MutexLock lock(&mu_);
    if (seq_ > 0 &&
        now - last_nanos_ < absl::ToInt64Nanoseconds(options_.interval)) {
      return false;
    }
  }
  Sample();
  return true;
}

std::vector<HistoryGroupInput> StatusHistory::Gather() const {
  std::vector<HistoryGroupInput> out;
  if (sources_.groups == nullptr) {
    return out;
  }
  for (const GroupPtr& g : sources_.groups->List()) {
    const TableConstPtr table = g->table();
    if (table == nullptr) {
      continue;
    }
    HistoryGroupInput in;
    in.name = g->name();
    if (const GroupMetrics* gm = g->metrics(); gm != nullptr) {
      in.picks = static_cast<uint64_t>(gm->picks_ok->Value());
      in.pick_failures = static_cast<uint64_t>(gm->picks_unavailable->Value());
    }
    in.ready = static_cast<uint32_t>(table->ready_count());
    in.total = static_cast<uint32_t>(table->size());
    in.backends.reserve(table->size());
    for (size_t i = 0; i < table->size(); ++i) {
      const Member& m = table->member(static_cast<uint32_t>(i));
      HistoryBackendInput b;
      b.address = m.backend.address;
      b.effective_weight = m.weight;
      b.health = m.health;
      b.ready = m.ready;
      b.drained = m.backend.drained || m.backend.weight == 0;
      b.eligible = table->eligible(static_cast<uint32_t>(i));
      b.picks = m.load != nullptr ? m.load->picks() : 0;
      if (sources_.loads != nullptr) {
        const LoadSnapshot l = sources_.loads->Snapshot(in.name, b.address);
        b.reported = l.reporters > 0;
        b.requests_per_second = l.requests_per_second;
        b.errors_per_second = l.requests_per_second * l.failure_ratio;
        b.latency_ms = absl::ToDoubleMilliseconds(l.mean_latency);
        b.window_requests = l.window_requests;
        b.in_flight = l.in_flight;
      }
      in.backends.push_back(std::move(b));
    }
    out.push_back(std::move(in));
  }
  return out;
}

void StatusHistory::NoticeStoreAndFleet() {
  if (sources_.events == nullptr) {
    return;
  }
  std::optional<bool> up;
  if (sources_.store_up) {
    up = sources_.store_up();
  }
  std::optional<std::vector<std::string>> members;
  if (sources_.fleet_members) {
    members = sources_.fleet_members();
  }
  aside::MutexLock lock(&notice_mu_);
  if (up.has_value()) {
    if (store_up_.has_value() && *store_up_ != *up) {
      sources_.events->Record(*up ? EventKind::kStoreUp : EventKind::kStoreDown,
                              "", "",
                              *up ? "the state store answers again"
                                  : "the state store stopped answering");
    }
    store_up_ = up;
  }
  if (members.has_value()) {
    absl::flat_hash_set<std::string> now(members->begin(), members->end());
    if (members_.has_value()) {
      for (const std::string& id : *members) {
        if (!members_->contains(id)) {
          sources_.events->Record(EventKind::kMemberJoined, "", id,
                                  "in the fleet's live set");
        }
      }
      for (const std::string& id : *members_) {
        if (!now.contains(id)) {
          sources_.events->Record(EventKind::kMemberLeft, "", id,
                                  "gone from the fleet's live set");
        }
      }
    }
    members_ = std::move(now);
  }
}

void StatusHistory::Sample() {
  NoticeStoreAndFleet();
  Record(Gather());
}

void StatusHistory::Record(const std::vector<HistoryGroupInput>& groups) {
  const int64_t now = options_.clock->NowNanos();
  const int64_t wall_ms = absl::ToUnixMillis(options_.clock->WallNow());
  const size_t n = options_.samples;
  aside::MutexLock lock(&mu_);
  const uint64_t seq = ++seq_;
  const size_t slot = (seq - 1) % n;
  const double seconds =
      seq > 1 ? static_cast<double>(now - last_nanos_) / 1e9 : 0;
  last_nanos_ = now;
  times_unix_ms_[slot] = wall_ms;
  untracked_groups_ = 0;
  untracked_backends_ = 0;
  // A rate needs the series' previous sample to be the previous one.
  auto rate = [&](uint64_t last_seen, uint64_t before, uint64_t count) {
    if (last_seen + 1 != seq || seconds <= 0 || count < before) {
      return kNaN;
    }
    return static_cast<float>(static_cast<double>(count - before) / seconds);
  };

  for (const HistoryGroupInput& in : groups) {
    auto it = groups_.find(in.name);
    if (it == groups_.end()) {
      if (groups_.size() >= options_.max_groups) {
        ++untracked_groups_;
        untracked_backends_ += in.backends.size();
        continue;
      }
      auto series = std::make_unique<GroupSeries>(n);
      series->first_seq = seq;
      it = groups_.emplace(in.name, std::move(series)).first;
    }
    GroupSeries& gs = *it->second;
    GroupPoint& gp = gs.points[slot];
    gp = GroupPoint{};
    gp.picks = rate(gs.last_seen_seq, gs.prev_picks, in.picks);
    gp.pick_failures =
        rate(gs.last_seen_seq, gs.prev_failures, in.pick_failures);
    gp.ready = Saturate16(in.ready);
    gp.total = Saturate16(in.total);

    // Group sums first: picks in the interval, reported requests, the
    // eligible members' weights.
    double pick_sum = 0;
    double requests = 0;
    double errors = 0;
    double latency_weighted = 0;
    uint64_t latency_requests = 0;
    bool reported = false;
    double weight_sum = 0;
    for (const HistoryBackendInput& b : in.backends) {
      auto bs = gs.backends.find(b.address);
      if (bs != gs.backends.end() && bs->second.last_seen_seq + 1 == seq &&
          b.picks >= bs->second.prev_picks) {
        pick_sum += static_cast<double>(b.picks - bs->second.prev_picks);
      }
      if (b.reported) {
        reported = true;
        requests += b.requests_per_second;
        errors += b.errors_per_second;
        if (b.window_requests > 0) {
          latency_weighted +=
              b.latency_ms * static_cast<double>(b.window_requests);
          latency_requests += b.window_requests;
        }
      }
      if (b.eligible) {
        weight_sum += b.effective_weight;
      }
    }
    if (reported) {
      gp.requests = static_cast<float>(requests);
      gp.errors = static_cast<float>(errors);
    }
    if (latency_requests > 0) {
      gp.latency_ms = static_cast<float>(latency_weighted /
                                         static_cast<double>(latency_requests));
    }
    gs.prev_picks = in.picks;
    gs.prev_failures = in.pick_failures;
    gs.last_seen_seq = seq;
    gs.untracked_backends = 0;

    for (const HistoryBackendInput& b : in.backends) {
      auto bit = gs.backends.find(b.address);
      if (bit == gs.backends.end()) {
        if (gs.backends.size() >= options_.max_backends_per_group ||
            backend_series_ >= options_.max_backends) {
          ++gs.untracked_backends;
          ++untracked_backends_;
          continue;
        }
        bit = gs.backends.try_emplace(b.address, n).first;
        bit->second.first_seq = seq;
        ++backend_series_;
      }
      BackendSeries& bs = bit->second;
      BackendPoint& p = bs.points[slot];
      p = BackendPoint{};
      const bool continuous = bs.last_seen_seq + 1 == seq;
      if (pick_sum > 0) {
        const double mine = continuous && b.picks >= bs.prev_picks
                                ? static_cast<double>(b.picks - bs.prev_picks)
                                : 0;
        p.pick_share = Share(mine / pick_sum);
      } else if (requests > 0) {
        p.pick_share =
            Share(b.reported ? b.requests_per_second / requests : 0.0);
      }
      p.weight_share =
          weight_sum > 0
              ? Share(b.eligible ? b.effective_weight / weight_sum : 0.0)
              : Share(0.0);
      p.effective_weight = Saturate16(b.effective_weight);
      p.health = static_cast<uint8_t>(b.health);
      p.flags = static_cast<uint8_t>((b.ready ? kReady : 0) |
                                     (b.drained ? kDrained : 0) |
                                     (b.eligible ? kEligible : 0));
      if (b.reported) {
        p.requests = static_cast<float>(b.requests_per_second);
        p.errors = static_cast<float>(b.errors_per_second);
        p.in_flight = Saturate16(b.in_flight);
        if (b.window_requests > 0) {
          p.latency_ms = static_cast<float>(b.latency_ms);
        }
      }
      bs.prev_picks = b.picks;
      bs.last_seen_seq = seq;
    }
  }

  // Series not seen at this sample: a gap, and forgotten after a window.
  for (auto git = groups_.begin(); git != groups_.end();) {
    GroupSeries& gs = *git->second;
    if (gs.last_seen_seq != seq) {
      gs.points[slot] = GroupPoint{};
    }
    for (auto bit = gs.backends.begin(); bit != gs.backends.end();) {
      BackendSeries& bs = bit->second;
      if (bs.last_seen_seq != seq) {
        bs.points[slot] = BackendPoint{};
        if (seq - bs.last_seen_seq >= n) {
          gs.backends.erase(bit++);
          --backend_series_;
          continue;
        }
      }
      ++bit;
    }
    if (gs.last_seen_seq != seq && seq - gs.last_seen_seq >= n) {
      backend_series_ -= gs.backends.size();
      groups_.erase(git++);
      continue;
    }
    ++git;
  }
}

std::optional<GroupHistory> StatusHistory::Read(absl::string_view group) const {
  aside::MutexLock lock(&mu_);
  return ReadLocked(group);
}

std::optional<GroupHistory> StatusHistory::ReadLocked(
    absl::string_view group) const {
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    return std::nullopt;
  }
  const GroupSeries& gs = *it->second;
  const size_t n = options_.samples;
  const uint64_t first = seq_ >= n ? seq_ - n + 1 : 1;
  GroupHistory h;
  h.name = std::string(group);
  h.untracked_backends = gs.untracked_backends;
  for (uint64_t s = first; s <= seq_; ++s) {
    const size_t slot = (s - 1) % n;
    h.times.push_back(absl::FromUnixMillis(times_unix_ms_[slot]));
    const bool kept = s >= gs.first_seq;
    const GroupPoint p = kept ? gs.points[slot] : GroupPoint{};
    h.picks_per_second.push_back(Value(p.picks));
    h.pick_failures_per_second.push_back(Value(p.pick_failures));
    h.requests_per_second.push_back(Value(p.requests));
    h.errors_per_second.push_back(Value(p.errors));
    h.latency_ms.push_back(Value(p.latency_ms));
    h.ready.push_back(p.ready == kNone ? std::nullopt
                                       : std::optional<uint32_t>(p.ready));
    h.total.push_back(p.total == kNone ? std::nullopt
                                       : std::optional<uint32_t>(p.total));
  }
  std::vector<const std::pair<const std::string, BackendSeries>*> sorted;
  for (const auto& entry : gs.backends) {
    sorted.push_back(&entry);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  for (const auto* entry : sorted) {
    const BackendSeries& bs = entry->second;
    GroupHistory::Backend b;
    b.address = entry->first;
    for (uint64_t s = first; s <= seq_; ++s) {
      const bool kept = s >= bs.first_seq;
      const BackendPoint p = kept ? bs.points[(s - 1) % n] : BackendPoint{};
      const bool member = p.effective_weight != kNone;
      b.pick_share.push_back(Unshare(p.pick_share));
      b.weight_share.push_back(Unshare(p.weight_share));
      b.effective_weight.push_back(
          member ? std::optional<uint32_t>(p.effective_weight) : std::nullopt);
      b.health.push_back(member ? std::optional<HealthState>(
                                      static_cast<HealthState>(p.health))
                                : std::nullopt);
      b.ready.push_back(member ? std::optional<bool>((p.flags & kReady) != 0)
                               : std::nullopt);
      b.drained.push_back(member
                              ? std::optional<bool>((p.flags & kDrained) != 0)
                              : std::nullopt);
      b.in_flight.push_back(p.in_flight == kNone
                                ? std::nan("")
                                : static_cast<double>(p.in_flight));
      b.requests_per_second.push_back(Value(p.requests));
      b.errors_per_second.push_back(Value(p.errors));
      b.latency_ms.push_back(Value(p.latency_ms));
    }
    h.backends.push_back(std::move(b));
  }
  return h;
}

std::string StatusHistory::Json(absl::string_view group, bool backends,
                                absl::string_view after,
                                size_t max_bytes) const {
  aside::MutexLock lock(&mu_);
  const size_t n = options_.samples;
  const uint64_t first = seq_ >= n ? seq_ - n + 1 : 1;
  std::string out = absl::StrCat(
      "{\"interval_seconds\":", absl::ToDoubleSeconds(options_.interval),
      ",\"capacity\":", n, ",\"samples\":", seq_,
      ",\"caps\":{\"groups\":", options_.max_groups,
      ",\"backends_per_group\":", options_.max_backends_per_group,
      ",\"backends\":", options_.max_backends,
      "},\"tracked\":{\"groups\":", groups_.size(),
      ",\"backends\":", backend_series_,
      ",\"untracked_groups\":", untracked_groups_,
      ",\"untracked_backends\":", untracked_backends_, "},\"times_unix_ms\":[");
  for (uint64_t s = first; s <= seq_; ++s) {
    absl::StrAppend(&out, s == first ? "" : ",", times_unix_ms_[(s - 1) % n]);
  }
  out.append("],\"groups\":[");
  std::vector<std::string> names;
  if (!group.empty()) {
    if (groups_.contains(group)) {
      names.emplace_back(group);
    }
  } else {
    for (const auto& [name, unused] : groups_) {
      if (name > after) {
        names.push_back(name);
      }
    }
    std::sort(names.begin(), names.end());
  }
  bool first_group = true;
  std::string next;  // the last group written, when the budget ran out
  auto uint_format = [](std::string* o, uint32_t v) { absl::StrAppend(o, v); };
  auto bool_format = [](std::string* o, bool v) {
    o->append(v ? "true" : "false");
  };
  for (size_t i = 0; i < names.size(); ++i) {
    if (out.size() >= max_bytes && !first_group) {
      next = names[i - 1];
      break;
    }
    const std::optional<GroupHistory> h = ReadLocked(names[i]);
    if (!h.has_value()) {
      continue;
    }
    out.append(first_group ? "{\"name\":" : ",{\"name\":");
    first_group = false;
    AppendJsonString(&out, h->name);
    AppendSeries(&out, "picks_per_second", h->picks_per_second);
    AppendSeries(&out, "pick_failures_per_second", h->pick_failures_per_second);
    AppendSeries(&out, "requests_per_second", h->requests_per_second);
    AppendSeries(&out, "errors_per_second", h->errors_per_second);
    AppendSeries(&out, "latency_ms", h->latency_ms);
    AppendOptional(&out, "ready", h->ready, uint_format);
    AppendOptional(&out, "total", h->total, uint_format);
    absl::StrAppend(&out, ",\"untracked_backends\":", h->untracked_backends);
    if (backends) {
      out.append(",\"backends\":[");
      for (size_t j = 0; j < h->backends.size(); ++j) {
        const GroupHistory::Backend& b = h->backends[j];
        out.append(j == 0 ? "{\"address\":" : ",{\"address\":");
        AppendJsonString(&out, b.address);
        AppendSeries(&out, "pick_share", b.pick_share);
        AppendSeries(&out, "weight_share", b.weight_share);
        AppendOptional(&out, "effective_weight", b.effective_weight,
                       uint_format);
        AppendOptional(&out, "health", b.health,
                       [](std::string* o, HealthState s) {
                         AppendJsonString(o, HealthStateName(s));
                       });
        AppendOptional(&out, "ready", b.ready, bool_format);
        AppendOptional(&out, "drained", b.drained, bool_format);
        AppendSeries(&out, "in_flight", b.in_flight);
        AppendSeries(&out, "requests_per_second", b.requests_per_second);
        AppendSeries(&out, "errors_per_second", b.errors_per_second);
        AppendSeries(&out, "latency_ms", b.latency_ms);
        out.push_back('}');
      }
      out.push_back(']');
    }
    out.push_back('}');
  }
  out.push_back(']');
  if (!next.empty()) {
    // The rest from ?after=<next>.
    out.append(",\"truncated\":true,\"next_after\":");
    AppendJsonString(&out, next);
  }
  out.push_back('}');
  return out;
}

StatusHistory::Stats StatusHistory::stats() const {
  aside::MutexLock lock(&mu_);
  Stats s;
  s.samples = seq_;
  s.groups = groups_.size();
  s.backends = backend_series_;
  s.untracked_groups = untracked_groups_;
  s.untracked_backends = untracked_backends_;
  s.ring_bytes = options_.samples * (groups_.size() * sizeof(GroupPoint) +
                                     backend_series_ * sizeof(BackendPoint));
  return s;
}

}  // namespace aside::server
