#include "server/groups/group_registry.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"
#include "server/base/log.h"
#include "server/discovery/dns_discovery.h"
#include "server/groups/group_publisher.h"
#include "server/groups/group_table_builder.h"
#include "server/groups/rebuild_scheduler.h"

namespace aside::server {

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
      members_(spec.name, inputs.health, spec.outlier, inputs.clock,
               inputs.orca) {}

Group::~Group() = default;

GroupSpec Group::spec() const { return *spec_cell_.Acquire(); }

std::shared_ptr<const GroupSpec> Group::spec_snapshot() const {
  return spec_cell_.Acquire();
}

absl::Status Group::Init(const Persist& persist) {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  ASIDE_ASSIGN_OR_RETURN(TableConstPtr table,
                         CreateTableLocked(PrepareLocked(spec_)));
  if (persist) {
    ASIDE_RETURN_IF_ERROR(persist(table->generation()));
  }
  PublishLocked(std::move(table), start);
  return absl::OkStatus();
}

void Group::UseOwnGenerations(uint64_t first) {
  own_generations_ = std::make_unique<GenerationSource>(first - 1);
  generations_ = own_generations_.get();
}

absl::Status Group::Update(GroupSpec spec, const Persist& persist,
                           uint64_t min_generation) {
  absl::Status s = UpdateQuietly(std::move(spec), persist, min_generation);
  Announce();
  return s;
}

absl::Status Group::UpdateQuietly(GroupSpec spec, const Persist& persist,
                                  uint64_t min_generation) {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  if (min_generation > 0) {
    generations_->Raise(min_generation);
  }
  // An explicit update is an acknowledged mutation: it always publishes a
  // new generation (callers wait for it), even when nothing changed.
  ASIDE_ASSIGN_OR_RETURN(TableConstPtr table,
                         CreateTableLocked(PrepareLocked(spec)));
  if (persist) {
    ASIDE_RETURN_IF_ERROR(persist(table->generation()));
  }
  if (spec.dns != spec_.dns) {
    UnwatchDnsLocked();
    {
      aside::MutexLock lock(&dns_mu_);
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

void Group::Rebuild() {
  {
    aside::MutexLock lock(&mu_);
    RebuildLocked();
    FlushHeldLocked();
  }
  Announce();
  aside::MutexLock lock(&rebuilds_mu_);
  ++rebuilds_;  // waiters wake as the lock is released
}

void Group::RebuildLocked() {
  const int64_t start = MonotonicNanos();
  const TableConstPtr current = table_.Acquire();
  if (current == nullptr) {
    return;  // Init has not published (or failed): nothing to rebuild
  }
  TableSpec next = PrepareLocked(spec_);
  if (SameTable(next, *current)) {
    return;  // nothing a pick or a subscriber would see changed
  }
  absl::StatusOr<TableConstPtr> table = CreateTableLocked(std::move(next));
  if (!table.ok()) {
    // The spec was validated when it was accepted; a failure here is a bug.
    if (metrics_ != nullptr) {
      metrics_->internal_errors.Increment();
    }
    Log(LogLevel::kError, "group.rebuild_failed",
        {{"group", name_}, {"error", std::string(table.status().message())}});
    return;
  }
  PublishLocked(*std::move(table), start);
}

bool Group::AwaitRebuilds(uint64_t count, absl::Duration timeout) const {
  aside::MutexLock lock(&rebuilds_mu_);
  return rebuilds_mu_.AwaitWithTimeout(
      [&] {
        rebuilds_mu_.AssertHeld();
        return rebuilds_ >= count;
      },
      timeout);
}

uint64_t Group::rebuilds() const {
  aside::MutexLock lock(&rebuilds_mu_);
  return rebuilds_;
}

TableSpec Group::PrepareLocked(const GroupSpec& spec) {
  std::vector<Backend> backends;
  {
    aside::MutexLock lock(&dns_mu_);
    backends = MergeMembers(spec.backends, dns_members_);
  }
  members_.Sync(spec, backends, inputs_.clock->NowNanos());
  // Read after Sync: a target acquired there counts as ready since its
  // creation, which must not lie in the build's future (a ramp would
  // start at full weight).
  const int64_t now = inputs_.clock->NowNanos();
  std::vector<MemberStatus> statuses = members_.Statuses(backends, now);
  const std::vector<uint32_t> orca = members_.OrcaWeights(
      spec, backends, inputs_.loads, now, inputs_.clock->WallNow());
  for (size_t i = 0; i < orca.size(); ++i) {
    statuses[i].orca_weight = orca[i];
  }
  TableSpec next = BuildTableSpec(spec, backends, statuses, session_key_, now);
  next.zone_weights = members_.ZoneWeights(spec, next.members, inputs_.loads,
                                           now, inputs_.clock->WallNow());
  ScheduleTimedRebuildLocked(spec, now);
  return next;
}

absl::StatusOr<TableConstPtr> Group::CreateTableLocked(TableSpec next) {
  next.generation = generations_->Next();
  TableConstPtr previous = table_.Acquire();
  return Table::Create(std::move(next), previous.get(), &loads_);
}

void Group::ScheduleTimedRebuildLocked(const GroupSpec& spec, int64_t now) {
  if (inputs_.scheduler == nullptr) {
    return;
  }
  const std::optional<int64_t> next = members_.NextTimedRebuild(spec, now);
  if (!next) {
    return;
  }
  if (std::shared_ptr<Group> self = weak_from_this().lock()) {
    inputs_.scheduler->Schedule(
        self, absl::Nanoseconds(std::max<int64_t>(0, *next - now)));
  }
}

void Group::OnLoadReport(const std::string& address, uint64_t requests,
                         uint64_t failures, uint32_t consecutive_failures,
                         absl::Duration mean_latency,
                         absl::Duration mean_first_byte_latency,
                         bool failures_corroborated) {
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
      table->member(static_cast<uint32_t>(i))
          .load->Observe(c, table->load_model());
    }
  }
  OutlierDetector& outliers = members_.outliers();
  if (!outliers.enabled() || !failures_corroborated) {
    return;
  }
  if (outliers.ReportBatch(address, requests, failures, consecutive_failures) &&
      inputs_.scheduler != nullptr) {
    inputs_.scheduler->Schedule(shared_from_this(), absl::ZeroDuration());
  }
}

std::vector<OutlierDetector::Ejection> Group::Ejections() const {
  return members_.outliers().Ejections();
}

void Group::PublishLocked(TableConstPtr table, int64_t build_start_nanos) {
  if (TableConstPtr before = table_.Acquire(); before != nullptr) {
    recent_tables_.push_back(std::move(before));
    while (recent_tables_.size() > kDeltaBases) {
      recent_tables_.pop_front();
    }
  }
  auto publication = std::make_shared<Publication>();
  publication->table = table;
  publication->bases.assign(recent_tables_.begin(), recent_tables_.end());
  table_.Publish(table);
  publication_.Publish(std::move(publication));
  loads_.Prune();
  NotifyPublishLocked(table);
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

void Group::NotifyPublishLocked(const TableConstPtr& table) {
  aside::MutexLock lock(&notify_mu_);
  const int64_t window = absl::ToInt64Nanoseconds(inputs_.publish_window);
  const int64_t now = window > 0 ? inputs_.clock->NowNanos() : 0;
  const bool hold =
      window > 0 && inputs_.scheduler != nullptr && now - notified_at_ < window;
  if (!listeners_.empty() && !removed_) {
    notices_.push_back({.table = table, .records = true, .edges = !hold});
  }
  if (!hold) {
    notified_at_ = now;
    held_ = false;
    return;
  }
  if (held_) {
    // The one held before never reaches the edges on its own.
    if (metrics_ != nullptr) {
      metrics_->publications_folded.Increment();
    }
    return;
  }
  held_ = true;
  inputs_.scheduler->Schedule(shared_from_this(),
                              absl::Nanoseconds(notified_at_ + window - now));
}

void Group::FlushHeldLocked() {
  aside::MutexLock lock(&notify_mu_);
  if (!held_) {
    return;
  }
  const int64_t window = absl::ToInt64Nanoseconds(inputs_.publish_window);
  const int64_t now = inputs_.clock->NowNanos();
  if (now - notified_at_ < window) {
    // An earlier rebuild (a health flip's) ran first: wait on.
    inputs_.scheduler->Schedule(shared_from_this(),
                                absl::Nanoseconds(notified_at_ + window - now));
    return;
  }
  notified_at_ = now;
  held_ = false;
  if (!listeners_.empty() && !removed_) {
    notices_.push_back({.table = table_.Acquire(), .edges = true});
  }
}

void Group::Announce() {
  std::shared_ptr<Group> self;
  {
    aside::MutexLock lock(&notify_mu_);
    if (notices_.empty() || posted_ || telling_) {
      return;  // nothing to tell, or the teller will tell it
    }
    if (inputs_.publisher != nullptr) {
      self = weak_from_this().lock();
      posted_ = self != nullptr;
    }
  }
  if (self != nullptr) {
    inputs_.publisher->Post(std::move(self));
  } else {
    TellListeners();
  }
}

void Group::TellListeners() {
  notify_mu_.Lock();
  posted_ = false;
  if (telling_) {
    notify_mu_.Unlock();
    return;  // that thread tells what is queued
  }
  telling_ = true;
  teller_ = std::this_thread::get_id();
  while (!notices_.empty()) {
    std::vector<Notice> notices;
    notices.swap(notices_);
    const std::vector<Listener*> listeners = listeners_;
    const uint64_t round = ++rounds_started_;
    notify_mu_.Unlock();
    gone_in_round_.clear();
    for (const Notice& n : notices) {
      for (Listener* l : listeners) {
        if (n.table != nullptr &&
            !(l->every_publication() ? n.records : n.edges)) {
          continue;
        }
        if (std::find(gone_in_round_.begin(), gone_in_round_.end(), l) !=
            gone_in_round_.end()) {
          continue;  // removed by an earlier listener of this round
        }
        if (n.table == nullptr) {
          l->OnRemoved(*this, n.removed_generation);
        } else {
          l->OnPublish(*this, n.table);
        }
      }
    }
    notify_mu_.Lock();
    rounds_done_ = round;  // RemoveListener's waiters wake on Unlock
  }
  telling_ = false;
  notify_mu_.Unlock();
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
    aside::MutexLock lock(&dns_mu_);
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
    aside::MutexLock lock(&dns_mu_);
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
  aside::MutexLock lock(&dns_mu_);
  return dns_error_;
}

void Group::AddListener(Listener* listener) {
  aside::MutexLock lock(&notify_mu_);
  listeners_.push_back(listener);
}

void Group::RemoveListener(Listener* listener) {
  aside::MutexLock lock(&notify_mu_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener),
                   listeners_.end());
  if (!telling_) {
    return;
  }
  if (teller_ == std::this_thread::get_id()) {
    // From a listener: the round's copy must skip it from here on.
    gone_in_round_.push_back(listener);
    return;
  }
  // The round in progress may still call it: wait for its end.
  const uint64_t round = rounds_started_;
  auto done = [this, round]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(notify_mu_) {
    return rounds_done_ >= round;
  };
  notify_mu_.Await(aside::Cond(&done));
}

void Group::NotifyRemoved(uint64_t generation) {
  QueueRemoved(generation);
  Announce();
}

void Group::QueueRemoved(uint64_t generation) {
  aside::MutexLock lock(&notify_mu_);
  held_ = false;  // the removal supersedes it
  if (!removed_ && !listeners_.empty()) {
    notices_.push_back({.table = nullptr,
                        .records = true,
                        .edges = true,
                        .removed_generation = generation});
  }
  removed_ = true;
}

std::shared_ptr<const EncodedUpdate> Group::Encoded() const {
  const std::shared_ptr<const Publication> p = publication_.Acquire();
  absl::call_once(p->encode_once, [&] {
    const Table* previous = !p->bases.empty() && p->bases.back()->generation() <
                                                     p->table->generation()
                                ? p->bases.back().get()
                                : nullptr;
    p->encoded = EncodeUpdate(previous, p->table, server_id_, p->bases);
  });
  return p->encoded;
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

void GenerationSource::Raise(uint64_t next) {
  aside::MutexLock lock(&mu_);
  if (next > 0 && last_ < next - 1) {
    last_ = next - 1;
  }
}

uint64_t GenerationSource::last() const {
  aside::MutexLock lock(&mu_);
  return last_;
}

namespace {

// Fills `out` from OpenSSL's CSPRNG; an error names what the bytes were for.
absl::Status RandomBytes(absl::Span<unsigned char> out,
                         absl::string_view what) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    char reason[256] = "unknown error";
    if (const unsigned long code = ERR_get_error(); code != 0) {
      ERR_error_string_n(code, reason, sizeof(reason));
    }
    return absl::InternalError(
        absl::StrCat("cannot draw random bytes for the ", what, ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GroupRegistry>> GroupRegistry::Create(
    Metrics* metrics, uint64_t generation_base, size_t max_groups,
    GenerationSource::Reserver reserver) {
  // The key that signs sticky session tokens: random per process unless the
  // state layer installs a persisted one. Never a weak key: without random
  // bytes the server does not start.
  std::string key(32, '\0');
  ASIDE_RETURN_IF_ERROR(RandomBytes(
      absl::MakeSpan(reinterpret_cast<unsigned char*>(key.data()), key.size()),
      "session key"));
  unsigned char id[12];
  ASIDE_RETURN_IF_ERROR(RandomBytes(absl::MakeSpan(id), "server id"));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string server_id;
  for (unsigned char c : id) {
    server_id.push_back(kHex[c >> 4]);
    server_id.push_back(kHex[c & 15]);
  }
  return std::unique_ptr<GroupRegistry>(new GroupRegistry(
      metrics, generation_base, max_groups, std::move(reserver), std::move(key),
      std::move(server_id)));
}

GroupRegistry::GroupRegistry(Metrics* metrics, uint64_t generation_base,
                             size_t max_groups,
                             GenerationSource::Reserver reserver,
                             std::string session_key, std::string server_id)
    : metrics_(metrics),
      max_groups_(max_groups),
      generations_(generation_base, std::move(reserver)),
      session_key_(std::make_shared<const std::string>(std::move(session_key))),
      server_id_(std::move(server_id)),
      groups_(std::make_shared<const GroupMap>()) {}

GroupPtr GroupRegistry::Find(absl::string_view name) const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  const GroupPtr* group = map->find(name);
  return group == nullptr ? nullptr : *group;
}

bool GroupRegistry::Serves(const std::string& group,
                           const std::string& address) const {
  GroupPtr g = Find(group);
  return g != nullptr && g->table()->Find(address) >= 0;
}

void GroupRegistry::OnLoadAccepted(const LoadAggregator::Accepted& a) {
  if (GroupPtr g = Find(a.group)) {
    g->OnLoadReport(a.address, a.new_requests, a.new_failures,
                    a.consecutive_failures, a.mean_latency,
                    a.mean_first_byte_latency, a.failures_corroborated);
  }
}

std::vector<GroupPtr> GroupRegistry::List() const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  // Sorted on the map's own keys: comparing through the groups would visit
  // every group object O(log G) times.
  std::vector<std::pair<absl::string_view, const GroupPtr*>> named;
  named.reserve(map->size());
  map->ForEach([&](const std::string& name, const GroupPtr& group) {
    named.emplace_back(name, &group);
  });
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<GroupPtr> out;
  out.reserve(named.size());
  for (const auto& [name, group] : named) {
    out.push_back(*group);
  }
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
    existing = std::make_shared<GroupMetrics>(&metrics_->group_series(), name);
    slot = existing;
  }
  // Forget names whose metrics are gone, once the map has doubled since
  // the last sweep: a sweep on every add made starting with G groups cost
  // O(G^2).
  if (metrics_by_name_.size() >= metrics_sweep_at_) {
    absl::erase_if(metrics_by_name_,
                   [](const auto& entry) { return entry.second.expired(); });
    metrics_sweep_at_ = std::max<size_t>(64, 2 * metrics_by_name_.size());
  }
  return existing;
}

void GroupRegistry::set_session_key(std::string key) {
  session_key_ = std::make_shared<const std::string>(std::move(key));
}

absl::Status GroupRegistry::Add(GroupSpec spec, const Persist& persist,
                                uint64_t first_generation) {
  GroupPtr group;
  {
    aside::MutexLock lock(&write_mu_);
    std::shared_ptr<const GroupMap> current = groups_.Acquire();
    if (current->contains(spec.name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("group '", spec.name, "' already exists"));
    }
    ASIDE_RETURN_IF_ERROR(CheckNamespaceLocked(spec, *current));
    if (current->size() >= max_groups_) {
      if (metrics_ != nullptr) {
        metrics_->limit_refused.Add({{"limit", "max_groups"}}).Increment();
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "limits.max_groups: group limit reached (", max_groups_, " groups)"));
    }
    std::shared_ptr<GroupMetrics> group_metrics = MetricsFor(spec.name);
    group = std::make_shared<Group>(std::move(spec), &generations_, metrics_,
                                    std::move(group_metrics), session_key_,
                                    server_id_, inputs_);
    if (first_generation > 0) {
      group->UseOwnGenerations(first_generation);
    }
    ASIDE_RETURN_IF_ERROR(group->Init(persist));
    groups_.Publish(current->With(group->name(), group));
    SetAliasesLocked(group->name(), group->spec_snapshot()->aliases);
    group->StartDiscovery();
  }
  // A probe result that arrived between the first build and now found no
  // group to rebuild (health observers look groups up by name): take it in
  // now. Usually nothing changed and this publishes nothing. Outside
  // write_mu_, as it may tell listeners (Group::Listener).
  group->Rebuild();
  // Observers fan out to their own subscribers, which must not hold up
  // this write or others. They look the name up, so a removal that
  // overtakes the call is harmless.
  if (inputs_.publisher != nullptr) {
    inputs_.publisher->Post([this, group] { TellObservers(group); });
  } else {
    TellObservers(group);
  }
  return absl::OkStatus();
}

void GroupRegistry::TellObservers(const GroupPtr& group) {
  std::vector<Observer*> observers;
  {
    aside::MutexLock lock(&observers_mu_);
    observers = observers_;
    ++observer_calls_;
  }
  for (Observer* o : observers) {
    o->OnAdded(group);
  }
  aside::MutexLock lock(&observers_mu_);
  --observer_calls_;  // RemoveObserver's waiters wake on the unlock
}

absl::Status GroupRegistry::Update(const GroupPtr& group, GroupSpec spec,
                                   const Persist& persist,
                                   uint64_t min_generation) {
  {
    aside::MutexLock lock(&write_mu_);
    std::shared_ptr<const GroupMap> current = groups_.Acquire();
    const GroupPtr* found = current->find(group->name());
    if (found == nullptr || *found != group || spec.name != group->name()) {
      return absl::NotFoundError(
          absl::StrCat("group '", group->name(), "' not found"));
    }
    ASIDE_RETURN_IF_ERROR(CheckNamespaceLocked(spec, *current));
    std::vector<std::string> aliases = spec.aliases;
    ASIDE_RETURN_IF_ERROR(
        group->UpdateQuietly(std::move(spec), persist, min_generation));
    SetAliasesLocked(group->name(), aliases);
  }
  group->Announce();  // the listeners, with write_mu_ released
  return absl::OkStatus();
}

absl::Status GroupRegistry::CheckNamespace(const GroupSpec& spec) const {
  aside::MutexLock lock(&write_mu_);
  return CheckNamespaceLocked(spec, *groups_.Acquire());
}

absl::Status GroupRegistry::CheckNamespaceLocked(const GroupSpec& spec,
                                                 const GroupMap& map) const {
  // The groups that could collide: the owners of any alias (a name or an
  // alias of `spec` may overlap theirs), and the groups an alias of `spec`
  // names outright or by its first label. Sorted, for a stable answer.
  std::set<std::string> candidates;
  for (const auto& [alias, owner] : alias_owners_) {
    candidates.insert(owner);
  }
  for (const std::string& alias : spec.aliases) {
    const std::string folded = FoldDialedName(alias);
    candidates.insert(std::string(GrpclbLabel(folded)));
    candidates.insert(folded);
  }
  candidates.erase(spec.name);
  for (const std::string& name : candidates) {
    if (const GroupPtr* other = map.find(name); other != nullptr) {
      ASIDE_RETURN_IF_ERROR(
          CheckGroupNamespace(spec, *(*other)->spec_snapshot()));
    }
  }
  return absl::OkStatus();
}

void GroupRegistry::SetAliasesLocked(const std::string& group,
                                     const std::vector<std::string>& aliases) {
  absl::erase_if(alias_owners_,
                 [&](const auto& entry) { return entry.second == group; });
  for (const std::string& alias : aliases) {
    alias_owners_.emplace(alias, group);
  }
}

void GroupRegistry::AddObserver(Observer* observer) {
  aside::MutexLock lock(&observers_mu_);
  observers_.push_back(observer);
}

void GroupRegistry::RemoveObserver(Observer* observer) {
  aside::MutexLock lock(&observers_mu_);
  observers_.erase(std::remove(observers_.begin(), observers_.end(), observer),
                   observers_.end());
  // A call in progress may have taken it: wait for the calls to end.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(observers_mu_) {
    return observer_calls_ == 0;
  };
  observers_mu_.Await(aside::Cond(&idle));
}

absl::Status GroupRegistry::Remove(absl::string_view name,
                                   const Persist& persist,
                                   uint64_t removal_generation) {
  GroupPtr removed;
  {
    aside::MutexLock lock(&write_mu_);
    std::shared_ptr<const GroupMap> current = groups_.Acquire();
    if (!current->contains(name)) {
      return absl::NotFoundError(
          absl::StrCat("group '", EchoName(name), "' not found"));
    }
    const uint64_t generation =
        removal_generation > 0 ? removal_generation : generations_.Next();
    if (persist) {
      ASIDE_RETURN_IF_ERROR(persist(generation));
    }
    removed = *current->find(name);
    removed->StopDiscovery();
    groups_.Publish(current->Without(name));
    SetAliasesLocked(removed->name(), {});
    removed->QueueRemoved(generation);
  }
  removed->Announce();  // the listeners, with write_mu_ released
  return absl::OkStatus();
}

}  // namespace aside::server
