#include "server/groups/group.h"

#include <algorithm>
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
      spec_(std::make_shared<const GroupSpec>(spec)),
      members_(spec.name, inputs.health, spec.outlier, inputs.clock,
               inputs.orca) {}

Group::~Group() = default;

GroupSpec Group::spec() const { return *publication_.Acquire()->spec; }

std::shared_ptr<const GroupSpec> Group::spec_snapshot() const {
  return publication_.Acquire()->spec;
}

absl::Status Group::Init() {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  ASIDE_ASSIGN_OR_RETURN(TableConstPtr table,
                         CreateTableLocked(PrepareLocked(*spec_)));
  PublishLocked(std::move(table), start);
  return absl::OkStatus();
}

void Group::UseOwnGenerations(uint64_t first) {
  own_generations_ = std::make_unique<GenerationSource>(first - 1);
  generations_ = own_generations_.get();
}

absl::Status Group::Update(GroupSpec spec, uint64_t min_generation) {
  absl::Status s = UpdateQuietly(std::move(spec), min_generation);
  Announce();
  return s;
}

absl::Status Group::UpdateQuietly(GroupSpec spec, uint64_t min_generation) {
  aside::MutexLock lock(&mu_);
  const int64_t start = MonotonicNanos();
  if (min_generation > 0) {
    generations_->Raise(min_generation);
  }
  // An explicit update is an acknowledged mutation: it always publishes a
  // new generation (callers wait for it), even when nothing changed.
  ASIDE_ASSIGN_OR_RETURN(TableConstPtr table,
                         CreateTableLocked(PrepareLocked(spec)));
  if (spec.dns != spec_->dns) {
    UnwatchDnsLocked();
    {
      aside::MutexLock lock(&dns_mu_);
      dns_members_.clear();
      dns_error_.clear();
    }
    WatchDnsLocked(spec);
  }
  spec_ = std::make_shared<const GroupSpec>(std::move(spec));
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
  aside::MutexLock lock(&notify_mu_);
  ++rebuilds_;  // waiters wake as the lock is released
}

void Group::RebuildLocked() {
  const int64_t start = MonotonicNanos();
  const TableConstPtr current = table_.Acquire();
  if (current == nullptr) {
    return;  // Init has not published (or failed): nothing to rebuild
  }
  TableSpec next = PrepareLocked(*spec_);
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
  aside::MutexLock lock(&notify_mu_);
  return notify_mu_.AwaitWithTimeout(
      [&] {
        notify_mu_.AssertHeld();
        return rebuilds_ >= count;
      },
      timeout);
}

uint64_t Group::rebuilds() const {
  aside::MutexLock lock(&notify_mu_);
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
  publication->spec = spec_;
  publication->bases.assign(recent_tables_.begin(), recent_tables_.end());
  const std::shared_ptr<const Publication> before = publication_.Acquire();
  publication->spec_forms =
      before != nullptr && before->spec == publication->spec
          ? before->spec_forms
          : std::make_shared<PublishedForms>();
  table_.Publish(table);
  publication_.Publish(std::move(publication));
  loads_.Prune();
  NotifyPublishLocked(table, /*first=*/before == nullptr);
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

bool Group::HasListenersLocked() const {
  return !listeners_.empty() ||
         (inputs_.every_group != nullptr && !inputs_.every_group->empty());
}

void Group::NotifyPublishLocked(const TableConstPtr& table, bool first) {
  aside::MutexLock lock(&notify_mu_);
  const int64_t window = absl::ToInt64Nanoseconds(inputs_.publish_window);
  const int64_t now = window > 0 ? inputs_.clock->NowNanos() : 0;
  const bool hold =
      window > 0 && inputs_.scheduler != nullptr && now - notified_at_ < window;
  if (HasListenersLocked() && !removed_) {
    notices_.push_back(
        {.table = table, .added = first, .records = true, .edges = !hold});
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
  if (HasListenersLocked() && !removed_) {
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
        if (std::find(gone_in_round_.begin(), gone_in_round_.end(), l) !=
            gone_in_round_.end()) {
          continue;  // removed by an earlier listener of this round
        }
        Tell(*l, n);
      }
    }
    notify_mu_.Lock();
    rounds_done_ = round;  // RemoveListener's waiters wake on Unlock
    if (inputs_.every_group != nullptr && !inputs_.every_group->empty()) {
      // Apart from the group's own listeners, whose removal (under a lock
      // a listener of every group may take: the Watch hub's) waits only
      // for their calls.
      notify_mu_.Unlock();
      for (Listener* l : inputs_.every_group->BeginRound()) {
        for (const Notice& n : notices) {
          Tell(*l, n);
        }
      }
      inputs_.every_group->EndRound();
      notify_mu_.Lock();
    }
  }
  telling_ = false;
  notify_mu_.Unlock();
}

void Group::Tell(Listener& l, const Notice& n) {
  if (n.table == nullptr) {
    l.OnRemoved(*this, n.removed_generation);
  } else if (!(l.every_publication() ? n.records : n.edges)) {
    return;  // held for the edges (the publish window)
  } else if (n.added) {
    l.OnAdded(*this, n.table);
  } else {
    l.OnPublish(*this, n.table);
  }
}

void Group::StartDiscovery() {
  aside::MutexLock lock(&mu_);
  WatchDnsLocked(*spec_);
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

void Group::QueueRemoved(uint64_t generation) {
  aside::MutexLock lock(&notify_mu_);
  held_ = false;  // the removal supersedes it
  if (!removed_ && HasListenersLocked()) {
    notices_.push_back({.table = nullptr,
                        .records = true,
                        .edges = true,
                        .removed_generation = generation});
  }
  removed_ = true;
}

std::shared_ptr<const EncodedUpdate> Group::Encoded() const {
  const std::shared_ptr<const Publication> p = publication_.Acquire();
  std::call_once(p->encode_once, [&] {
    const Table* previous = !p->bases.empty() && p->bases.back()->generation() <
                                                     p->table->generation()
                                ? p->bases.back().get()
                                : nullptr;
    p->encoded = EncodeUpdate(previous, p->table, server_id_, p->bases);
  });
  return p->encoded;
}

void EveryGroupListeners::Add(Group::Listener* listener) {
  aside::MutexLock lock(&mu_);
  listeners_.push_back(listener);
  size_.store(listeners_.size(), std::memory_order_release);
}

void EveryGroupListeners::Remove(Group::Listener* listener) {
  aside::MutexLock lock(&mu_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener),
                   listeners_.end());
  size_.store(listeners_.size(), std::memory_order_release);
  // A round in progress may have taken it: wait for the rounds to end.
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rounds_ == 0; };
  mu_.Await(aside::Cond(&idle));
}

std::vector<Group::Listener*> EveryGroupListeners::BeginRound() {
  aside::MutexLock lock(&mu_);
  ++rounds_;
  return listeners_;
}

void EveryGroupListeners::EndRound() {
  aside::MutexLock lock(&mu_);
  --rounds_;  // Remove's waiters wake on the unlock
}

}  // namespace aside::server
