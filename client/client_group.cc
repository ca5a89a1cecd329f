#include "client/client_group.h"

#include <algorithm>
#include <array>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/clock_wait.h"
#include "proto/convert.h"

namespace aside {

using client_internal::GroupSnapshot;
using SnapshotPtr = std::shared_ptr<const GroupSnapshot>;

namespace {

std::atomic<uint64_t> next_group_id{1};

// The per-thread cache of group snapshots (RCU-like): a pick compares the
// group's version counter with the version its thread last saw and, while
// they match, uses the snapshot held here without touching any shared
// reference count. Each slot's SnapshotHold belongs to this thread, so a
// pick counts the PickHandle it hands out in a plain field, and a handle
// released on this thread does too (pick_handle.h). Slots are direct-mapped
// by group id; two groups sharing a slot still pick correctly, they just
// take the refresh path more often. A cached snapshot stays alive until the
// thread picks from that slot again (or exits) and its handles are gone.
struct CacheSlot {
  uint64_t group_id = 0;
  uint64_t version = 0;
  client_internal::SnapshotHold* hold = nullptr;

  CacheSlot() = default;
  CacheSlot(const CacheSlot&) = delete;
  CacheSlot& operator=(const CacheSlot&) = delete;
  ~CacheSlot() {
    if (hold != nullptr) {
      client_internal::RetireHold(hold);
    }
  }
};
constexpr size_t kCacheSlots = 64;
thread_local std::array<CacheSlot, kCacheSlots> t_cache;

// Whether `policy` picks by a latency estimate (p2c peak_ewma, least_time,
// prequal; sticky and locality by their child's): its picks need an exact
// start.
bool ReadsLatency(const PolicyConfig& policy) {
  const PolicyConfig* p = &policy;
  if (p->kind == PolicyKind::kSticky || p->kind == PolicyKind::kLocality)
      [[unlikely]] {
    p = &p->child_or_default();
  }
  return p->kind == PolicyKind::kLeastTime || p->kind == PolicyKind::kPrequal ||
         (p->kind == PolicyKind::kP2c &&
          p->p2c.load == P2cParams::Load::kPeakEwma);
}

// Whether `policy` picks by in-flight counts (p2c, least_time, prequal;
// sticky and locality by their child's): its picks count in the members'
// BackendLoad.
bool ReadsInFlight(const PolicyConfig& policy) {
  const PolicyConfig* p = &policy;
  if (p->kind == PolicyKind::kSticky || p->kind == PolicyKind::kLocality)
      [[unlikely]] {
    p = &p->child_or_default();
  }
  return p->kind == PolicyKind::kP2c || p->kind == PolicyKind::kLeastTime ||
         p->kind == PolicyKind::kPrequal;
}

// Counts one call started, in the calling thread's counters.
void CountStarted(client_internal::BackendStats* stats) {
  client_internal::SlotCounters* own =
      stats->slot != client_internal::kNoCounterSlot
          ? client_internal::LocalCounters(stats->slot)
          : nullptr;
  if (own != nullptr) [[likely]] {
    client_internal::OwnAdd(own->started, 1);
  } else {
    stats->started.fetch_add(1, std::memory_order_relaxed);
  }
}

void SetPolicyFlags(GroupSnapshot* snapshot) {
  snapshot->reads_latency = ReadsLatency(snapshot->table->policy());
  snapshot->reads_in_flight = ReadsInFlight(snapshot->table->policy());
}

}  // namespace

ClientGroup::ClientGroup(Client* client, std::string name,
                         absl::Status name_status,
                         std::vector<std::string> fallback,
                         int64_t deadline_nanos, int64_t cache_deadline_nanos,
                         std::optional<client_internal::CachedTable> cached)
    : client_(client),
      name_(std::move(name)),
      name_status_(std::move(name_status)),
      id_(next_group_id.fetch_add(1, std::memory_order_relaxed)),
      deadline_nanos_(deadline_nanos),
      pick_clock_(client->clock_ == &SystemClock::Get() ? nullptr
                                                        : client->clock_),
      loads_(&client->clock()),
      fallback_addresses_(std::move(fallback)),
      cache_deadline_nanos_(cache_deadline_nanos),
      watched_(name_, &loads_) {
  auto snapshot = std::make_shared<GroupSnapshot>();
  if (cached.has_value()) {
    cache_written_ = cached->record.written;
    cache_path_ =
        client_internal::CacheFilePath(client->options_.cache_dir, name_);
    absl::StatusOr<TableConstPtr> table =
        Table::Create(std::move(cached->spec), nullptr, &loads_);
    if (table.ok()) {
      cached_ = *std::move(table);
    } else {
      cache_error_ = absl::FailedPreconditionError(
          absl::StrCat("table invalid: ", table.status().message()));
    }
  }
  if (!fallback_addresses_.empty()) {
    TableSpec spec;
    spec.group = name_;
    spec.generation = 0;
    spec.panic_threshold = 0;
    for (const std::string& address : fallback_addresses_) {
      Member m;
      m.backend.address = address;
      spec.members.push_back(std::move(m));
    }
    absl::StatusOr<TableConstPtr> table =
        Table::Create(std::move(spec), nullptr, &loads_);
    if (table.ok()) {
      fallback_ = *std::move(table);
      if (cached_ == nullptr) {
        aside::MutexLock lock(&mu_);
        snapshot = SnapshotLocked(fallback_);
        snapshot->fallback = true;
      }
    } else {
      client_->Log(absl::StrCat("group '", name_, "': fallback list unusable: ",
                                table.status().message()));
    }
  }
  // The cached table serves at once in the fallback list's place, or when
  // picks are not to wait for a server's; else from ServeCache().
  if (cached_ != nullptr &&
      (!fallback_addresses_.empty() ||
       client->clock_->NowNanos() >= cache_deadline_nanos_)) {
    aside::MutexLock lock(&mu_);
    snapshot = SnapshotLocked(cached_);
    snapshot->from_cache = true;
    cache_served_ = true;
  }
  cell_.Publish(std::move(snapshot));
}

std::shared_ptr<GroupSnapshot> ClientGroup::SnapshotLocked(
    TableConstPtr table) {
  auto snapshot = std::make_shared<GroupSnapshot>();
  snapshot->table = std::move(table);
  SetPolicyFlags(snapshot.get());
  for (const Member& m : snapshot->table->members()) {
    auto& stats = stats_[m.backend.address];
    if (stats == nullptr) {
      stats = client_->NewStats(m.backend.address);
    }
    snapshot->stats.push_back(stats);
  }
  return snapshot;
}

bool ClientGroup::CachePending() const {
  if (cached_ == nullptr) {
    return false;
  }
  aside::MutexLock lock(&mu_);
  return !from_server_ && !cache_served_;
}

bool ClientGroup::ServeCache() {
  if (cached_ == nullptr) {
    return false;
  }
  aside::MutexLock client_lock(&client_->mu_);
  aside::MutexLock lock(&mu_);
  if (from_server_ || cache_served_) {
    return false;
  }
  auto snapshot = SnapshotLocked(cached_);
  snapshot->from_cache = true;
  // Counted and logged before it is published, under both locks: whoever
  // sees the cached table served finds it counted, and whoever sees it
  // counted (Client::AwaitStats) finds it served.
  client_->NoteCacheServedLocked(*this);
  Publish(std::move(snapshot));
  cache_served_ = true;
  ++published_version_;
  return true;
}

void ClientGroup::WriteCache(const std::string& server_id) {
  const TableConstPtr& table = watched_.table();
  if (table == nullptr || (table->generation() == written_generation_ &&
                           server_id == written_server_id_)) {
    return;
  }
  client_internal::CacheRecord record;
  record.update.set_group(name_);
  record.update.set_generation(table->generation());
  record.update.set_server_id(server_id);
  ToProto(*table, record.update.mutable_full());
  record.targets = client_->options_.targets;
  record.written = client_->clock_->WallNow();
  const std::string path =
      client_internal::CacheFilePath(client_->options_.cache_dir, name_);
  const absl::Status status = client_internal::WriteCacheFile(
      path, client_internal::EncodeCacheFile(record));
  if (status.ok()) {
    written_generation_ = table->generation();
    written_server_id_ = server_id;
    if (write_failing_) {
      write_failing_ = false;
      client_->Log(absl::StrCat("event=client.cache_written group=", name_,
                                " generation=", table->generation(),
                                " file=", path));
    }
  } else if (!write_failing_) {
    // Logged once per run of failures; the stats count each one.
    write_failing_ = true;
    client_->Log(absl::StrCat("event=client.cache_write_failed group=", name_,
                              " generation=", table->generation(), " file=",
                              path, " error=\"", status.message(), "\""));
  }
  client_->CountCacheWrite(status.ok());
}

ClientGroup::~ClientGroup() = default;

client_internal::SnapshotHold* ClientGroup::Local() const {
  CacheSlot& slot = t_cache[id_ % kCacheSlots];
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (slot.group_id == id_ && slot.version == version) [[likely]] {
    return slot.hold;
  }
  return Refresh(version);
}

client_internal::SnapshotHold* ClientGroup::Refresh(uint64_t version) const {
  CacheSlot& slot = t_cache[id_ % kCacheSlots];
  if (slot.hold != nullptr) {
    client_internal::RetireHold(slot.hold);
    slot.hold = nullptr;
  }
  // The writer publishes the snapshot before it bumps the version, so the
  // snapshot read here is at least as new as `version`.
  slot.hold = new client_internal::SnapshotHold(
      cell_.Acquire(), client_internal::CurrentThreadId());
  slot.group_id = id_;
  slot.version = version;
  return slot.hold;
}

absl::StatusOr<aside::PickHandle> ClientGroup::Pick(absl::string_view key) {
  client_internal::SnapshotHold* hold = Local();
  if (hold->snapshot->table == nullptr) [[unlikely]] {
    return PickWithoutTable(key);
  }
  return PickFrom(hold, key);
}

absl::StatusOr<aside::PickHandle> ClientGroup::PickFrom(
    client_internal::SnapshotHold* hold, absl::string_view key) {
  const GroupSnapshot* snapshot = hold->snapshot.get();
  const Table& table = *snapshot->table;
  // One clock read serves the load models and the call's start time: on
  // the system clock, the TSC where it is safe, else an exact read only for
  // a policy that reads latency (pick_clock.h).
  const bool exact = pick_clock_ != nullptr || snapshot->reads_latency;
  int64_t now;
  if (pick_clock_ != nullptr) [[unlikely]] {
    now = pick_clock_->NowNanos();
  } else if (client_internal::g_pick_tsc.usable) [[likely]] {
    now = client_internal::TscNanos();
  } else {
    now =
        exact ? client_internal::ExactNanos() : client_internal::CoarseNanos();
  }
  uint32_t index = 0;
  PickRequest request;
  request.key = key;
  request.now_nanos = now;
  if (table.Pick(request, absl::Span<uint32_t>(&index, 1)) == 0) {
    return absl::UnavailableError(table.NoBackendMessage(0));
  }
  if (snapshot->stats[index]->ejected_until_nanos.load(
          std::memory_order_relaxed) > now) [[unlikely]] {
    index = AvoidEjected(*snapshot, request, index, now);
  }
  const Member& member = table.member(index);
  client_internal::BackendStats* stats = snapshot->stats[index].get();
  CountStarted(stats);
  if (snapshot->reads_in_flight) {
    member.load->Start();
  }
  ++hold->taken;
  return aside::PickHandle(hold, &member, stats, pick_clock_, now, exact,
                           snapshot->reads_in_flight);
}

uint32_t ClientGroup::AvoidEjected(const GroupSnapshot& snapshot,
                                   PickRequest request, uint32_t first,
                                   int64_t now) {
  // Picks again with the ejected choices excluded, a bounded number of
  // times and without allocating; keeps the first choice when every
  // candidate is ejected (or none is left).
  constexpr size_t kMaxExcluded = 8;
  std::array<uint32_t, kMaxExcluded> excluded;
  size_t n = 0;
  excluded[n++] = first;
  while (n < kMaxExcluded) {
    request.exclude = absl::Span<const uint32_t>(excluded.data(), n);
    uint32_t index = 0;
    if (snapshot.table->Pick(request, absl::Span<uint32_t>(&index, 1)) == 0) {
      break;
    }
    if (snapshot.stats[index]->ejected_until_nanos.load(
            std::memory_order_relaxed) <= now) {
      return index;
    }
    excluded[n++] = index;
  }
  return first;
}

absl::StatusOr<aside::PickHandle> ClientGroup::PickWithoutTable(
    absl::string_view key) {
  if (!name_status_.ok()) {
    return name_status_;
  }
  // Waits for the first table until deadline_nanos_ on the client's clock,
  // or until cache_deadline_nanos_ when a cached table can serve then.
  const Clock& clock = *client_->clock_;
  const int64_t wait_until =
      cached_ != nullptr ? std::min(deadline_nanos_, cache_deadline_nanos_)
                         : deadline_nanos_;
  if (clock.NowNanos() < wait_until && cell_.Acquire()->table == nullptr) {
    aside::MutexLock lock(&client_->mu_);
    ++client_->stats_.table_waits;
  }
  {
    aside::MutexLock lock(&mu_);
    const uint64_t seen = published_version_;
    auto settled = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return published_version_ != seen || !missing_.ok() ||
             cell_.Acquire()->table != nullptr;
    };
    client_internal::AwaitUntil(mu_, aside::Cond(&settled), clock, wait_until);
    if (!missing_.ok() && cell_.Acquire()->table == nullptr &&
        cached_ == nullptr) {
      return missing_;
    }
  }
  // No server's table in time, or the server reports the group absent:
  // the cached table, if any, serves from now on.
  if (cell_.Acquire()->table == nullptr) {
    ServeCache();
  }
  client_internal::SnapshotHold* hold = Local();
  if (hold->snapshot->table != nullptr) {
    return PickFrom(hold, key);
  }
  std::string last_error;
  {
    aside::MutexLock lock(&client_->mu_);
    last_error = client_->last_error_;
  }
  return absl::UnavailableError(
      absl::StrCat("group '", name_, "': no table from aside server(s) ",
                   client_->TargetsText(), " within ",
                   absl::FormatDuration(client_->options_.wait_for_table), ": ",
                   last_error.empty() ? "still connecting" : last_error));
}

TableConstPtr ClientGroup::table() const { return cell_.Acquire()->table; }

bool ClientGroup::from_cache() const { return cell_.Acquire()->from_cache; }

std::string ClientGroup::server_id() const {
  aside::MutexLock lock(&mu_);
  return server_id_;
}

bool ClientGroup::removed() const {
  aside::MutexLock lock(&mu_);
  return removed_;
}

bool ClientGroup::WaitForGeneration(uint64_t generation,
                                    absl::Duration timeout) const {
  aside::MutexLock lock(&mu_);
  auto reached = [this, generation]() {
    return generation_.load(std::memory_order_acquire) >= generation;
  };
  return mu_.AwaitWithTimeout(aside::Cond(&reached), timeout);
}

void ClientGroup::Publish(SnapshotPtr next) {
  cell_.Publish(std::move(next));
  version_.fetch_add(1, std::memory_order_acq_rel);
}

void ClientGroup::PublishTable(TableConstPtr table,
                               const std::string& server_id) {
  auto snapshot = std::make_shared<GroupSnapshot>();
  snapshot->table = table;
  SetPolicyFlags(snapshot.get());
  uint64_t replaced_cached = 0;
  bool replaced_cache = false;
  {
    aside::MutexLock lock(&mu_);
    if (std::shared_ptr<const GroupSnapshot> held = cell_.Acquire();
        held->from_cache) {
      replaced_cache = true;
      replaced_cached = held->table->generation();
    }
    absl::flat_hash_set<absl::string_view> present;
    for (const Member& m : table->members()) {
      present.insert(m.backend.address);
      auto& stats = stats_[m.backend.address];
      if (stats == nullptr) {
        stats = client_->NewStats(m.backend.address);
      }
      snapshot->stats.push_back(stats);
    }
    // Forget the counters of departed backends once everything they
    // counted has been reported.
    absl::erase_if(stats_, [&](const auto& entry) {
      return !present.contains(entry.first) &&
             entry.second->Totals().requests ==
                 entry.second->reported_requests.load(
                     std::memory_order_relaxed);
    });
    Publish(std::move(snapshot));
    server_id_ = server_id;
    removed_ = false;
    missing_ = absl::OkStatus();
    from_server_ = true;
    ++published_version_;
  }
  if (replaced_cache) {
    client_->Log(absl::StrCat("event=client.table_from_server group=", name_,
                              " generation=", table->generation(),
                              " server_id=", server_id,
                              " replaces_cached_generation=", replaced_cached));
  }
  loads_.Prune();
}

void ClientGroup::MarkGeneration(uint64_t generation) {
  aside::MutexLock lock(&mu_);
  generation_.store(generation, std::memory_order_release);
}

}  // namespace aside
