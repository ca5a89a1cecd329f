#include "server/group_registry.h"

#include <openssl/rand.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"
#include "server/discovery/dns_discovery.h"
#include "server/log.h"
#include "server/health/slow_start.h"
#include "server/load_aggregator.h"
#include <cmath>
#include "server/rebuild_scheduler.h"

namespace aside::server {

GroupMetrics::GroupMetrics(Metrics* m, const std::string& group)
    : metrics(m),
      picks_ok(&m->picks.Add({{"group", group}, {"result", "ok"}})),
      picks_unavailable(
          &m->picks.Add({{"group", group}, {"result", "unavailable"}})),
      picks_invalid(&m->picks.Add({{"group", group}, {"result", "invalid"}})),
      ready(&m->group_backends.Add({{"group", group}, {"state", "ready"}})),
      total(&m->group_backends.Add({{"group", group}, {"state", "total"}})),
      panic(&m->group_panic.Add({{"group", group}})),
      generation(&m->group_generation.Add({{"group", group}})),
      rebuilds(&m->table_rebuilds.Add({{"group", group}})),
      watch_subscribers(&m->watch_subscribers.Add({{"group", group}})),
      watch_full(&m->watch_updates.Add({{"group", group}, {"kind", "full"}})),
      watch_delta(&m->watch_updates.Add({{"group", group}, {"kind", "delta"}})),
      watch_unchanged(
          &m->watch_updates.Add({{"group", group}, {"kind", "unchanged"}})),
      watch_removed(
          &m->watch_updates.Add({{"group", group}, {"kind", "removed"}})) {}

GroupMetrics::~GroupMetrics() {
  metrics->picks.Remove(picks_ok);
  metrics->picks.Remove(picks_unavailable);
  metrics->picks.Remove(picks_invalid);
  metrics->group_backends.Remove(ready);
  metrics->group_backends.Remove(total);
  metrics->group_panic.Remove(panic);
  metrics->group_generation.Remove(generation);
  metrics->table_rebuilds.Remove(rebuilds);
  metrics->watch_subscribers.Remove(watch_subscribers);
  for (prometheus::Counter* c :
       {watch_full, watch_delta, watch_unchanged, watch_removed}) {
    metrics->watch_updates.Remove(c);
  }
}

Group::Group(GroupSpec spec, GenerationSource* generations, Metrics* metrics,
             std::shared_ptr<GroupMetrics> group_metrics,
             std::shared_ptr<const std::string> session_key,
             std::string server_id, GroupInputs inputs)
    : name_(spec.name),
      generations_(generations),
      metrics_(metrics),
      session_key_(std::move(session_key)),
      server_id_(std::move(server_id)),
      group_metrics_(std::move(group_metrics)),
      loads_(inputs.clock),
      inputs_(inputs),
      spec_cell_(std::make_shared<const GroupSpec>(spec)),
      spec_(spec),
      outliers_(spec.outlier, inputs.clock) {}

Group::~Group() = default;

GroupSpec Group::spec() const { return *spec_cell_.Acquire(); }

std::shared_ptr<const GroupSpec> Group::spec_snapshot() const {
  return spec_cell_.Acquire();
}

absl::Status Group::Init(const Persist& persist) {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  ASIDE_ASSIGN_OR_RETURN(TableConstPtr table, BuildLocked(spec_));
  if (persist) {
    ASIDE_RETURN_IF_ERROR(persist(table->generation()));
  }
  PublishLocked(std::move(table), start);
  return absl::OkStatus();
}

absl::Status Group::Update(GroupSpec spec, const Persist& persist) {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  ASIDE_ASSIGN_OR_RETURN(TableConstPtr table, BuildLocked(spec));
  if (persist) {
    ASIDE_RETURN_IF_ERROR(persist(table->generation()));
  }
  if (spec.dns != spec_.dns) {
    UnwatchDnsLocked();
    {
      std::lock_guard<std::mutex> lock(dns_mu_);
      dns_members_.clear();
      dns_error_.clear();
    }
    WatchDnsLocked(spec);
  }
  // The spec first: listeners told of the new table read the spec that
  // made it.
  spec_cell_.Publish(std::make_shared<const GroupSpec>(spec));
  spec_ = std::move(spec);
  PublishLocked(std::move(table), start);
  return absl::OkStatus();
}

namespace {

bool SameContent(const Table& a, const Table& b) {
  if (a.size() != b.size() || a.panic() != b.panic() ||
      !(a.policy() == b.policy()) || a.zone_weights() != b.zone_weights()) {
    return false;
  }
  for (uint32_t i = 0; i < a.size(); ++i) {
    const Member& x = a.member(i);
    const Member& y = b.member(i);
    if (!(x.backend == y.backend) || x.weight != y.weight ||
        x.ready != y.ready || x.health != y.health ||
        x.eligible != y.eligible) {
      return false;
    }
  }
  return true;
}

double Round3(double v) { return std::round(v * 1000) / 1000; }

}  // namespace

void Group::Rebuild() {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  absl::StatusOr<TableConstPtr> table = BuildLocked(spec_);
  if (!table.ok()) {
    // The spec was validated when it was accepted; a failure here is a bug.
    if (metrics_ != nullptr) {
      metrics_->internal_errors.Increment();
    }
    return;
  }
  TableConstPtr current = table_.Acquire();
  if (current != nullptr && SameContent(*current, **table)) {
    return;  // nothing a pick or a subscriber would see changed
  }
  PublishLocked(*std::move(table), start);
}


absl::StatusOr<TableConstPtr> Group::BuildLocked(const GroupSpec& spec) {
  TableSpec ts;
  ts.group = spec.name;
  ts.generation = generations_->Next();
  ts.policy = spec.policy;
  ts.panic_threshold = spec.panic_threshold;
  ts.session_key = session_key_;
  std::vector<Backend> backends = spec.backends;
  {
    // DNS members join the static ones; a static entry wins on an address
    // clash.
    std::lock_guard<std::mutex> lock(dns_mu_);
    for (const Backend& b : dns_members_) {
      bool present = false;
      for (const Backend& s : spec.backends) {
        present = present || s.address == b.address;
      }
      if (!present) {
        backends.push_back(b);
      }
    }
  }
  SyncHealthLocked(spec, backends);
  const int64_t now = inputs_.clock->NowNanos();
  // Hash policies keep their configured weights: a ramp would move keys.
  const bool slow_start =
      spec.slow_start > absl::ZeroDuration() && !IsHashPolicy(spec.policy.kind);
  ts.members.reserve(backends.size());
  for (const Backend& b : backends) {
    Member m;
    m.backend = b;
    m.weight = b.weight;
    auto h = health_.find(b.address);
    if (h != health_.end() && h->second.handle.valid()) {
      m.health = h->second.handle.state();
      m.ready = !b.drained && h->second.handle.ready() &&
                !outliers_.IsEjected(b.address, now);
      if (slow_start && m.ready) {
        m.weight = SlowStartWeight(
            b.weight,
            std::max(h->second.handle.ready_since_nanos(),
                     h->second.added_nanos),
            now, spec.slow_start);
      }
    } else {
      m.health = HealthState::kHealthy;
      m.ready = !b.drained && !outliers_.IsEjected(b.address, now);
      if (slow_start && m.ready && h != health_.end()) {
        m.weight = SlowStartWeight(b.weight, h->second.added_nanos, now,
                                   spec.slow_start);
      }
    }
    ts.members.push_back(std::move(m));
  }
  if (spec.policy.kind == PolicyKind::kLocality) {
    if (zones_ == nullptr) {
      zones_ = std::make_unique<ZoneWeightCalculator>(spec.policy.locality);
    } else {
      zones_->set_params(spec.policy.locality);
    }
    const absl::Time wall_now = inputs_.clock->WallNow();
    std::vector<HostLoadReport> hosts;
    hosts.reserve(ts.members.size());
    for (const Member& m : ts.members) {
      HostLoadReport h;
      h.locality = m.backend.locality;
      h.ready = m.ready;
      if (inputs_.loads != nullptr) {
        const LoadSnapshot l = inputs_.loads->Snapshot(name_, m.backend.address);
        if (l.utilization.has_value()) {
          h.utilization = *l.utilization;
          h.reported_at_nanos =
              now - absl::ToInt64Nanoseconds(wall_now - l.utilization_at);
        }
      }
      hosts.push_back(std::move(h));
    }
    ts.zone_weights = zones_->Update(hosts, now);
    for (ZoneWeight& z : ts.zone_weights) {
      z.weight = Round3(z.weight);
      z.utilization = z.utilization < 0 ? z.utilization : Round3(z.utilization);
    }
  } else {
    zones_.reset();
  }
  ScheduleTimedRebuildLocked(spec, now);
  TableConstPtr previous = table_.Acquire();
  return Table::Create(std::move(ts), previous.get(), &loads_);
}

void Group::SyncHealthLocked(const GroupSpec& spec,
                             const std::vector<Backend>& backends) {
  const int64_t now = inputs_.clock->NowNanos();
  std::map<std::string, MemberHealth, std::less<>> next;
  std::vector<std::string> addresses;
  addresses.reserve(backends.size());
  for (const Backend& b : backends) {
    addresses.push_back(b.address);
    MemberHealth entry;
    auto old = health_.find(b.address);
    if (old != health_.end()) {
      entry.added_nanos = old->second.added_nanos;
      if (old->second.handle.valid() &&
          old->second.handle.spec() == spec.health_check) {
        entry.handle = std::move(old->second.handle);
      }
    } else {
      entry.added_nanos = now;
    }
    if (!entry.handle.valid() && inputs_.health != nullptr &&
        spec.health_check.kind != HealthCheckSpec::Kind::kNone) {
      absl::StatusOr<HealthHandle> handle =
          inputs_.health->Acquire(b.address, spec.health_check, name_);
      if (handle.ok()) {
        entry.handle = *std::move(handle);
      } else {
        Log(LogLevel::kWarn, "health.acquire_failed",
            {{"group", name_},
             {"address", b.address},
             {"error", std::string(handle.status().message())}});
      }
    }
    next.emplace(b.address, std::move(entry));
  }
  // Old handles are released only now, after the new ones exist.
  health_ = std::move(next);
  outliers_.SetMembers(addresses);
  if (outliers_.SetSpec(spec.outlier)) {
    // Ejections changed with the spec; this build already sees it.
  }
}

void Group::ScheduleTimedRebuildLocked(const GroupSpec& spec, int64_t now) {
  if (inputs_.scheduler == nullptr) {
    return;
  }
  std::optional<int64_t> next = outliers_.NextExpiry();
  if (spec.policy.kind == PolicyKind::kLocality) {
    // Zone weights follow load reports every update_period.
    const int64_t tick =
        now + absl::ToInt64Nanoseconds(spec.policy.locality.update_period);
    if (!next || tick < *next) {
      next = tick;
    }
  }
  if (spec.slow_start > absl::ZeroDuration() && !IsHashPolicy(spec.policy.kind)) {
    for (const auto& [address, h] : health_) {
      const int64_t since =
          h.handle.valid() ? std::max(h.handle.ready_since_nanos(), h.added_nanos)
                           : h.added_nanos;
      std::optional<int64_t> tick =
          NextSlowStartRebuild(since, now, spec.slow_start);
      if (tick && (!next || *tick < *next)) {
        next = tick;
      }
    }
  }
  if (next) {
    std::weak_ptr<Group> weak = weak_from_this();
    if (std::shared_ptr<Group> self = weak.lock()) {
      inputs_.scheduler->Schedule(
          self, absl::Nanoseconds(std::max<int64_t>(0, *next - now)));
    }
  }
}

void Group::OnLoadReport(const std::string& address, uint64_t requests,
                         uint64_t failures, uint32_t consecutive_failures,
                         absl::Duration mean_latency,
                         absl::Duration mean_first_byte_latency) {
  if (requests > 0 && mean_latency > absl::ZeroDuration()) {
    TableConstPtr table = table_.Acquire();
    const int64_t i = table->Find(address);
    if (i >= 0) {
      Completion c;
      c.now_nanos = inputs_.clock->NowNanos();
      c.latency_nanos = absl::ToInt64Nanoseconds(mean_latency);
      c.first_byte_nanos =
          mean_first_byte_latency > absl::ZeroDuration()
              ? absl::ToInt64Nanoseconds(mean_first_byte_latency)
              : -1;
      c.ok = failures < requests;
      table->member(static_cast<uint32_t>(i)).load->Observe(
          c, table->load_model());
    }
  }
  if (!outliers_.enabled()) {
    return;
  }
  if (outliers_.ReportBatch(address, requests, failures,
                            consecutive_failures) &&
      inputs_.scheduler != nullptr) {
    inputs_.scheduler->Schedule(shared_from_this(), absl::ZeroDuration());
  }
}

std::vector<OutlierDetector::Ejection> Group::Ejections() const {
  return outliers_.Ejections();
}

void Group::PublishLocked(TableConstPtr table, int64_t build_start_nanos) {
  {
    aside::MutexLock lock(&encode_mu_);
    previous_table_ = table_.Acquire();
    encoded_.reset();
  }
  table_.Publish(table);
  loads_.Prune();
  {
    aside::MutexLock lock(&listeners_mu_);
    for (Listener* l : listeners_) {
      l->OnPublish(*this);
    }
  }
  if (metrics_ != nullptr) {
    group_metrics_->ready->Set(table->ready_count());
    group_metrics_->total->Set(static_cast<double>(table->size()));
    group_metrics_->panic->Set(table->panic() ? 1 : 0);
    group_metrics_->generation->Set(static_cast<double>(table->generation()));
    group_metrics_->rebuilds->Increment();
    metrics_->table_rebuild_duration.Observe(
        static_cast<double>(MonotonicNanos() - build_start_nanos) * 1e-9);
  }
}

void Group::StartDiscovery() {
  aside::MutexLock lock(&mu_);
  WatchDnsLocked(spec_);
}

void Group::StopDiscovery() {
  aside::MutexLock lock(&mu_);
  UnwatchDnsLocked();
}

void Group::WatchDnsLocked(const GroupSpec& spec) {
  if (!spec.dns || inputs_.dns == nullptr) {
    return;
  }
  std::weak_ptr<Group> self = weak_from_this();
  absl::StatusOr<DnsWatchId> id = inputs_.dns->Watch(
      name_, *spec.dns,
      [self](const absl::StatusOr<std::vector<Backend>>& members) {
        if (std::shared_ptr<Group> g = self.lock()) {
          g->OnDnsResult(members);
        }
      });
  if (!id.ok()) {
    std::lock_guard<std::mutex> lock(dns_mu_);
    dns_error_ = std::string(id.status().message());
    return;
  }
  dns_watch_ = *id;
}

void Group::UnwatchDnsLocked() {
  if (dns_watch_ != 0 && inputs_.dns != nullptr) {
    inputs_.dns->Unwatch(dns_watch_);
  }
  dns_watch_ = 0;
}

void Group::OnDnsResult(const absl::StatusOr<std::vector<Backend>>& members) {
  {
    std::lock_guard<std::mutex> lock(dns_mu_);
    if (!members.ok()) {
      dns_error_ = std::string(members.status().message());
      Log(LogLevel::kWarn, "dns.failed",
          {{"group", name_}, {"error", dns_error_}});
      return;
    }
    dns_error_.clear();
    if (*members == dns_members_) {
      return;
    }
    dns_members_ = *members;
  }
  Log(LogLevel::kInfo, "dns.members",
      {{"group", name_}, {"members", absl::StrCat(members->size())}});
  if (inputs_.scheduler != nullptr) {
    inputs_.scheduler->Schedule(shared_from_this(), absl::ZeroDuration());
  } else {
    Rebuild();
  }
}

std::string Group::dns_error() const {
  std::lock_guard<std::mutex> lock(dns_mu_);
  return dns_error_;
}

void Group::AddListener(Listener* listener) {
  aside::MutexLock lock(&listeners_mu_);
  listeners_.push_back(listener);
}

void Group::RemoveListener(Listener* listener) {
  aside::MutexLock lock(&listeners_mu_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener),
                   listeners_.end());
}

size_t Group::listener_count() const {
  aside::MutexLock lock(&listeners_mu_);
  return listeners_.size();
}

void Group::NotifyRemoved(uint64_t generation) {
  aside::MutexLock lock(&listeners_mu_);
  for (Listener* l : listeners_) {
    l->OnRemoved(*this, generation);
  }
}

std::shared_ptr<const EncodedUpdate> Group::Encoded() {
  TableConstPtr current = table_.Acquire();
  aside::MutexLock lock(&encode_mu_);
  if (encoded_ == nullptr || encoded_->generation != current->generation()) {
    const Table* previous =
        previous_table_ != nullptr &&
                previous_table_->generation() < current->generation()
            ? previous_table_.get()
            : nullptr;
    encoded_ = EncodeUpdate(previous, *current, server_id_);
  }
  return encoded_;
}

GenerationSource::GenerationSource(uint64_t base, Reserver reserver)
    : last_(base), reserver_(std::move(reserver)) {}

uint64_t GenerationSource::Next() {
  aside::MutexLock lock(&mu_);
  ++last_;
  if (reserver_ && last_ >= reserved_) {
    // A failed reservation is retried on the next generation; the clock-based
    // base still keeps restarts ahead in the common case.
    if (reserver_(last_ + kReserveBlock).ok()) {
      reserved_ = last_ + kReserveBlock;
    }
  }
  return last_;
}

uint64_t GenerationSource::last() const {
  aside::MutexLock lock(&mu_);
  return last_;
}

GroupRegistry::GroupRegistry(Metrics* metrics, uint64_t generation_base,
                             size_t max_groups,
                             GenerationSource::Reserver reserver)
    : metrics_(metrics),
      max_groups_(max_groups),
      generations_(generation_base, std::move(reserver)),
      groups_(std::make_shared<const GroupMap>()) {
  // The key that signs sticky session tokens. Random per process unless the
  // state layer installs a persisted one.
  std::string key(32, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(key.data()),
             static_cast<int>(key.size()));
  session_key_ = std::make_shared<const std::string>(std::move(key));
  unsigned char id[12];
  RAND_bytes(id, sizeof(id));
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : id) {
    server_id_.push_back(kHex[c >> 4]);
    server_id_.push_back(kHex[c & 15]);
  }
}

GroupPtr GroupRegistry::Find(absl::string_view name) const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  auto it = map->find(name);
  return it == map->end() ? nullptr : it->second;
}

std::vector<GroupPtr> GroupRegistry::List() const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  std::vector<GroupPtr> out;
  out.reserve(map->size());
  for (const auto& [name, group] : *map) {
    out.push_back(group);
  }
  std::sort(out.begin(), out.end(), [](const GroupPtr& a, const GroupPtr& b) {
    return a->name() < b->name();
  });
  return out;
}

size_t GroupRegistry::size() const { return groups_.Acquire()->size(); }

std::shared_ptr<GroupMetrics> GroupRegistry::MetricsFor(
    const std::string& name) {
  if (metrics_ == nullptr) {
    return nullptr;
  }
  std::weak_ptr<GroupMetrics>& slot = metrics_by_name_[name];
  std::shared_ptr<GroupMetrics> existing = slot.lock();
  if (existing == nullptr) {
    existing = std::make_shared<GroupMetrics>(metrics_, name);
    slot = existing;
  }
  // Forget names whose metrics are gone.
  absl::erase_if(metrics_by_name_,
                 [](const auto& entry) { return entry.second.expired(); });
  return existing;
}

void GroupRegistry::set_session_key(std::string key) {
  session_key_ = std::make_shared<const std::string>(std::move(key));
}

absl::Status GroupRegistry::Add(GroupSpec spec, const Persist& persist) {
  aside::MutexLock lock(&write_mu_);
  std::shared_ptr<const GroupMap> current = groups_.Acquire();
  if (current->contains(spec.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("group '", spec.name, "' already exists"));
  }
  if (current->size() >= max_groups_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "group limit reached (", max_groups_, " groups)"));
  }
  std::shared_ptr<GroupMetrics> group_metrics = MetricsFor(spec.name);
  auto group = std::make_shared<Group>(std::move(spec), &generations_,
                                       metrics_, std::move(group_metrics),
                                       session_key_, server_id_, inputs_);
  ASIDE_RETURN_IF_ERROR(group->Init(persist));
  auto next = std::make_shared<GroupMap>(*current);
  next->emplace(group->name(), group);
  groups_.Publish(std::move(next));
  group->StartDiscovery();
  return absl::OkStatus();
}

absl::Status GroupRegistry::Remove(absl::string_view name,
                                   const Persist& persist) {
  aside::MutexLock lock(&write_mu_);
  std::shared_ptr<const GroupMap> current = groups_.Acquire();
  if (!current->contains(name)) {
    return absl::NotFoundError(absl::StrCat("group '", name, "' not found"));
  }
  const uint64_t generation = generations_.Next();
  if (persist) {
    ASIDE_RETURN_IF_ERROR(persist(generation));
  }
  GroupPtr removed = current->find(name)->second;
  removed->StopDiscovery();
  auto next = std::make_shared<GroupMap>(*current);
  next->erase(name);
  groups_.Publish(std::move(next));
  removed->NotifyRemoved(generation);
  return absl::OkStatus();
}

}  // namespace aside::server
