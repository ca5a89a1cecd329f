#include "server/api/xds/ads_service.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/api/grpclb_service.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"
#include "server/base/stream_reactor.h"

namespace aside::server::xds {

namespace discovery = envoy::service::discovery::v3;

namespace {

// The types a stream answers, in the order pending responses are sent
// (clusters before their endpoints).
constexpr const char* kTypes[] = {kListenerType, kRouteType, kClusterType,
                                  kEndpointType};
constexpr size_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);
static_assert(kTypeCount == 4);
constexpr const char* kTypeLabels[] = {"listener", "route", "cluster",
                                       "endpoint"};
// Bounds on what one client may ask for.
constexpr size_t kMaxNamesPerType = 1000;
constexpr size_t kMaxNameBytes = 512;

int TypeIndex(const std::string& type_url) {
  for (size_t i = 0; i < kTypeCount; ++i) {
    if (type_url == kTypes[i]) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace

// A listener of every group: queues publications, additions and removals
// for the fan-out thread.
class AdsService::GroupWatcher final : public Group::Listener {
 public:
  explicit GroupWatcher(AdsService* service) : service_(service) {}
  void OnPublish(Group& group, const TableConstPtr& /*table*/) override {
    service_->Published(group, /*added=*/false);
  }
  // A group added may answer names that no group answered.
  void OnAdded(Group& group, const TableConstPtr& /*table*/) override {
    service_->Published(group, /*added=*/true);
  }
  void OnRemoved(Group& group, uint64_t /*generation*/) override {
    service_->Removed(group.name());
  }

 private:
  AdsService* const service_;
};

// One ADS stream. Reads one request at a time; writes one response at a
// time, always the newest state of the next type that has something to
// send. Evaluated (WriteNextLocked) on its reactions' threads and on the
// fan-out thread, one at a time under mu_; each evaluation may change what
// the stream depends on, which it then puts in the service's index
// (Settle) with mu_ released.
//
// Life: gRPC calls OnDone last; the fan-out thread may hold the stream
// marked (queued_) past it, and then deletes it once done with it.
class AdsService::Stream final
    : public StreamReactor<grpc::ServerBidiReactor<
          discovery::DiscoveryRequest, discovery::DiscoveryResponse>> {
 public:
  Stream(AdsService* service, grpc::CallbackServerContext* context)
      : StreamReactor(context), service_(service) {
    service_->Register(this);
    const bool shutting_down = !service_->streams_.Add(this);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_streams.Add({{"service", "ads"}}).Increment();
    }
    grpc::Status refused;
    if (!shutting_down) {
      refused = peer_slot_.Acquire(service_->stream_limit_.get(),
                                   ClientPeer(context_->peer()));
    }
    aside::MutexLock lock(&mu_);
    if (shutting_down) {
      FinishLocked(ShuttingDownStatus());
      return;
    }
    if (!refused.ok()) {
      FinishLocked(refused);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    IndexUpdate update;
    {
      aside::MutexLock lock(&mu_);
      if (!ok) {
        FinishLocked(grpc::Status::OK);
        return;
      }
      if (grpc::Status refused = OverCapLocked(); !refused.ok()) {
        LogThrottled(LogLevel::kWarn, "xds.request_refused",
                     {{"node", node_id_},
                      {"error", refused.error_message()},
                      {"peer", ClientPeer(context_->peer())}});
        FinishLocked(refused);
        return;
      }
      HandleRequestLocked();
      WriteNextLocked();
      update = TakeIndexUpdateLocked();
      if (!finished()) {
        request_.Clear();
        StartRead(&request_);
      }
    }
    Settle(std::move(update));
  }

  void OnWriteDone(bool ok) override {
    IndexUpdate update;
    {
      aside::MutexLock lock(&mu_);
      if (!WriteDoneLocked(ok)) {
        return;
      }
      WriteNextLocked();
      update = TakeIndexUpdateLocked();
    }
    Settle(std::move(update));
  }

  void OnDone() override {
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_streams.Add({{"service", "ads"}}).Decrement();
    }
    // Out of the index first: the fan-out thread marks no stream that is
    // not in it, so queued_ is final once it is out.
    service_->Unindex(this);
    service_->streams_.Remove(this);
    bool release = false;
    {
      aside::MutexLock lock(&mu_);
      SyncConfirmationsLocked({});
      done_ = true;
      release = !queued_;
    }
    if (release) {
      delete this;
    }
  }

  // The fan-out thread, with the service's index_mu_ held: a change
  // concerns the stream; every subscribed type is evaluated again. True
  // when the caller is to run it (RunMarked); false when a write in
  // flight will (its completion evaluates) or it already is queued.
  bool Mark() {
    aside::MutexLock lock(&mu_);
    MarkDirtyLocked();
    if (queued_ || writing_ || finished()) {
      return false;
    }
    queued_ = true;
    return true;
  }

  // The fan-out thread, no lock held, after Mark returned true: evaluates
  // and starts the write; deletes the stream if it is done.
  void RunMarked() {
    IndexUpdate update;
    {
      aside::MutexLock lock(&mu_);
      if (!done_) {
        WriteNextLocked();
        update = TakeIndexUpdateLocked();
      }
    }
    Settle(std::move(update));
    bool release = false;
    {
      aside::MutexLock lock(&mu_);
      queued_ = false;
      release = done_;
    }
    if (release) {
      delete this;
    }
  }

 private:
  struct TypeState {
    bool subscribed = false;
    std::vector<std::string> names;  // sorted, unique
    // The group each name resolved to (null: none), at names epoch
    // `epoch` (0: not yet).
    std::vector<GroupPtr> groups;
    uint64_t epoch = 0;
    // Answer even when the version did not change (new names).
    bool must_respond = false;
    // Evaluate again: a change may concern it.
    bool dirty = false;
    // Some name had no group when last resolved.
    bool unanswered = false;
    std::string sent_version;
    std::string sent_nonce;
    std::string acked_version;
    std::string rejected_version;
    // Endpoints: the group and generation each resource of the version
    // sent was built from (or has the content of); confirmed on its ACK.
    std::vector<std::pair<std::string, uint64_t>> sent_generations;
  };

  // What to put in the index after an evaluation, when it changed.
  struct IndexUpdate {
    bool changed = false;
    Keys keys;
    uint64_t seq = 0;
  };

  void MarkDirtyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (TypeState& t : types_) {
      t.dirty = t.subscribed;
    }
  }

  // The index keys as the types now resolve, when they differ from the
  // last ones taken.
  IndexUpdate TakeIndexUpdateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!keys_stale_) {
      return {};  // nothing was looked up since the last time
    }
    keys_stale_ = false;
    Keys keys;
    for (const TypeState& t : types_) {
      if (!t.subscribed) {
        continue;
      }
      keys.unanswered = keys.unanswered || t.unanswered;
      for (const GroupPtr& g : t.groups) {
        if (g != nullptr) {
          keys.groups.push_back(g->name());
        }
      }
    }
    keys.listeners = types_[0].subscribed && !types_[0].names.empty();
    std::sort(keys.groups.begin(), keys.groups.end());
    keys.groups.erase(std::unique(keys.groups.begin(), keys.groups.end()),
                      keys.groups.end());
    IndexUpdate update;
    if (keys == keys_) {
      return update;
    }
    keys_ = keys;
    update.changed = true;
    update.keys = std::move(keys);
    update.seq = ++keys_seq_;
    return update;
  }

  // With mu_ released: puts the stream under its new keys; when that added
  // a key, evaluates once more (a change of a group between the lookup
  // and the index insertion was not heard), until nothing is added.
  void Settle(IndexUpdate update) {
    while (update.changed && service_->Reindex(this, update.keys, update.seq)) {
      aside::MutexLock lock(&mu_);
      MarkDirtyLocked();
      WriteNextLocked();
      update = TakeIndexUpdateLocked();
    }
  }

  // A request past a cap is refused whole, with the stream: the client
  // sees which cap (a subscription cut short would leave it waiting for
  // resources that never come).
  grpc::Status OverCapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (static_cast<size_t>(request_.resource_names_size()) >
        kMaxNamesPerType) {
      Count("other", "too_many_names");
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("xds: ", request_.resource_names_size(),
                       " resource names in one request; at most ",
                       kMaxNamesPerType, " per type"));
    }
    for (const std::string& n : request_.resource_names()) {
      if (n.size() > kMaxNameBytes) {
        Count("other", "name_too_long");
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("xds: a resource name of ", n.size(),
                                         " bytes; at most ", kMaxNameBytes));
      }
    }
    return grpc::Status::OK;
  }

  // Whether the request names exactly `names` (sorted, unique), in the
  // order given: the common acknowledgement, compared without a copy.
  bool SameNamesLocked(const std::vector<std::string>& names) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (static_cast<size_t>(request_.resource_names_size()) != names.size()) {
      return false;
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (request_.resource_names(static_cast<int>(i)) != names[i]) {
        return false;
      }
    }
    return true;
  }

  void HandleRequestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (request_.has_node() && !have_node_) {
      have_node_ = true;
      node_id_ = request_.node().id().substr(0, 256);
      ring_hash_safe_ = RingHashSafe(request_.node());
      typed_policies_ = ReadsTypedPolicies(request_.node());
      no_route_safe_ = NoRouteListenerSafe(request_.node());
      LogThrottled(
          LogLevel::kInfo, "xds.stream",
          {{"node", node_id_},
           {"user_agent", request_.node().user_agent_name().substr(0, 128)},
           {"user_agent_version",
            request_.node().user_agent_version().substr(0, 128)},
           {"ring_hash", ring_hash_safe_ ? "yes" : "no"},
           {"typed_policies", typed_policies_ ? "yes" : "no"},
           {"peer", ClientPeer(context_->peer())}});
    }
    const int type = TypeIndex(request_.type_url());
    if (type < 0) {
      Count("other", "unknown_type");
      return;
    }
    TypeState& t = types_[type];
    if (!request_.response_nonce().empty()) {
      if (request_.response_nonce() != t.sent_nonce) {
        CountType(type, kStale);
        return;
      }
      if (request_.has_error_detail()) {
        t.rejected_version = t.sent_version;
        CountType(type, kNack);
        LogThrottled(
            LogLevel::kWarn, "xds.nack",
            {{"node", node_id_},
             {"type", kTypeLabels[type]},
             {"version", t.sent_version},
             {"error", request_.error_detail().message().substr(0, 1024)},
             {"peer", ClientPeer(context_->peer())}});
      } else {
        t.acked_version = request_.version_info();
        CountType(type, kAck);
        if (t.acked_version == t.sent_version) {
          ConfirmLocked(t);
        }
      }
    }
    if (t.subscribed && SameNamesLocked(t.names)) {
      return;
    }
    std::vector<std::string> names;
    // Within the caps (OverCapLocked).
    names.assign(request_.resource_names().begin(),
                 request_.resource_names().end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (!t.subscribed || names != t.names) {
      if (request_.response_nonce().empty()) {
        CountType(type, kSubscribe);
      }
      t.subscribed = true;
      keys_stale_ = true;
      t.names = std::move(names);
      t.groups.clear();
      t.epoch = 0;
      t.must_respond = true;
    }
  }

  // Looks up the group of each subscribed name of `type` (at names epoch
  // `epoch`).
  void ResolveNamesLocked(int type, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    TypeState& t = types_[type];
    t.groups.assign(t.names.size(), nullptr);
    t.epoch = epoch;
    keys_stale_ = true;
    for (size_t i = 0; i < t.names.size(); ++i) {
      switch (type) {
        case 0:
          t.groups[i] = ResolveGrpclbName(*service_->groups_, t.names[i]);
          break;
        case 2:
        case 3:
          t.groups[i] = service_->groups_->Find(t.names[i]);
          break;
        default:
          break;  // routes are inline in listeners: none by name
      }
    }
  }

  // Resources of `type` for the subscribed names, from the groups they
  // resolved to, plus the count of unknown names.
  std::vector<ResourcePtr> ResolveLocked(
      int type, size_t* unknown,
      std::vector<std::pair<std::string, uint64_t>>* generations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const TypeState& t = types_[type];
    std::vector<ResourcePtr> out;
    for (size_t i = 0; i < t.names.size(); ++i) {
      const std::string& name = t.names[i];
      const GroupPtr& group = t.groups[i];
      ResourceCache::Found f;
      switch (type) {
        case 0:
          f = service_->cache_.ListenerOf(name, group, ring_hash_safe_,
                                          typed_policies_);
          break;
        case 2:
          f = service_->cache_.ClusterOf(name, group, ring_hash_safe_,
                                         typed_policies_);
          if (f.ring_hash_fallback && f.group != nullptr) {
            NoteFallbackLocked(f.group->name());
          }
          break;
        case 3:
          f = service_->cache_.EndpointsOf(name, group);
          if (f.resource != nullptr && f.group != nullptr) {
            generations->emplace_back(f.group->name(), f.generation);
          }
          break;
        default:
          break;  // routes are inline in listeners: none by name
      }
      if (type == 0) {
        if (f.resource != nullptr) {
          real_listeners_.insert(name);
        } else if (no_route_safe_ && !real_listeners_.contains(name)) {
          // Never a group on this stream: a listener that fails calls at
          // once (BuildNoRouteListener), still counted as unknown. Encoded
          // once per name, not on every re-evaluation.
          ++*unknown;
          ResourcePtr& r = no_route_listeners_[name];
          if (r == nullptr) {
            r = MakeResource(name, BuildNoRouteListener(name));
          }
          out.push_back(r);
          continue;
        }
      }
      if (f.resource == nullptr) {
        ++*unknown;
      } else {
        out.push_back(std::move(f.resource));
      }
    }
    if (type == 0) {
      // Only subscribed names are remembered.
      const std::vector<std::string>& subscribed = types_[0].names;
      auto gone = [&subscribed](const std::string& n) {
        return !std::binary_search(subscribed.begin(), subscribed.end(), n);
      };
      std::erase_if(real_listeners_, gone);
      std::erase_if(no_route_listeners_,
                    [&gone](const auto& entry) { return gone(entry.first); });
    }
    return out;
  }

  void NoteFallbackLocked(const std::string& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!fallbacks_logged_.insert(group).second) {
      return;
    }
    Log(LogLevel::kWarn, "xds.ring_hash_fallback",
        {{"group", group},
         {"node", node_id_},
         {"reason",
          "gRPC C-core before 1.53 crashes on RING_HASH and may not be "
          "sent typed policies; serving weighted round robin through "
          "localities"}});
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_ring_hash_fallbacks.Add({{"group", group}})
          .Increment();
    }
  }

  // The version of a response: FNV-1a over each resource's name and
  // version, one per line (the resources' own versions, no re-encoding).
  static std::string VersionOf(const std::vector<ResourcePtr>& resources) {
    uint64_t h = 0xcbf29ce484222325ULL;
    auto add = [&h](absl::string_view bytes) {
      for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ULL;
      }
    };
    for (const ResourcePtr& r : resources) {
      add(r->name);
      add("\n");
      add(r->version);
      add("\n");
    }
    char version[17];
    std::snprintf(version, sizeof(version), "%016llx",
                  static_cast<unsigned long long>(h));
    return version;
  }

  // Starts the next write if none is in flight: the first type (in
  // kTypes order) that is dirty or owes a response and whose version
  // moved.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished()) {
      return;
    }
    const uint64_t epoch =
        service_->names_epoch_.load(std::memory_order_acquire);
    for (size_t type = 0; type < kTypeCount; ++type) {
      TypeState& t = types_[type];
      if (!t.subscribed || (!t.dirty && !t.must_respond)) {
        continue;
      }
      t.dirty = false;
      if (t.epoch != epoch) {
        ResolveNamesLocked(static_cast<int>(type), epoch);
      }
      size_t unknown = 0;
      std::vector<std::pair<std::string, uint64_t>> generations;
      std::vector<ResourcePtr> resources =
          ResolveLocked(static_cast<int>(type), &unknown, &generations);
      if (type == 3) {
        SyncConfirmationsLocked(generations);
      }
      if (t.unanswered != (unknown > 0)) {
        t.unanswered = unknown > 0;
        keys_stale_ = true;
      }
      const std::string version = VersionOf(resources);
      if (version == t.rejected_version) {
        t.must_respond = false;
        continue;  // never send a rejected version again
      }
      if (version == t.sent_version && !t.must_respond) {
        // The same endpoints as the newer tables': what the client holds
        // (or will ACK) is as good as what they would build.
        t.sent_generations = std::move(generations);
        if (t.acked_version == t.sent_version) {
          ConfirmLocked(t);
        }
        continue;
      }
      response_.Clear();
      response_.set_type_url(kTypes[type]);
      response_.set_version_info(version);
      response_.set_nonce(absl::StrCat(++nonce_));
      for (const ResourcePtr& r : resources) {
        *response_.add_resources() = r->any;
      }
      t.sent_version = version;
      t.sent_nonce = response_.nonce();
      t.sent_generations = std::move(generations);
      t.must_respond = false;
      if (service_->metrics_ != nullptr) {
        service_->responses_[type]->Increment();
        if (unknown > 0) {
          service_->metrics_->xds_unknown_resources
              .Add({{"type", kTypeLabels[type]}})
              .Increment(static_cast<double>(unknown));
        }
      }
      writing_ = true;
      StartWrite(&response_);
      return;
    }
  }

  // The groups this stream has endpoints of are the groups it subscribes
  // to in the confirmations: `generations` (from the endpoints now
  // resolved) replaces the last set.
  void SyncConfirmationsLocked(
      const std::vector<std::pair<std::string, uint64_t>>& generations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    DrainConfirmations* c = service_->confirmations_;
    if (c == nullptr) {
      return;
    }
    std::set<std::string> now;
    for (const auto& [group, generation] : generations) {
      now.insert(group);
    }
    for (auto it = confirmation_groups_.begin();
         it != confirmation_groups_.end();) {
      if (now.contains(it->first)) {
        ++it;
        continue;
      }
      c->Unsubscribe(*it->second);
      it = confirmation_groups_.erase(it);
    }
    for (const std::string& g : now) {
      if (confirmation_groups_.contains(g)) {
        continue;
      }
      confirmation_groups_[g] = c->Subscribe(
          g, {DrainConfirmations::Edge::kXds, node_id_, context_->peer()});
    }
  }

  // The client ACKed the version sent of `t`: it holds the endpoints
  // built from those generations.
  void ConfirmLocked(const TypeState& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [group, generation] : t.sent_generations) {
      // A group the stream is not subscribed to (no longer) is skipped.
      if (auto it = confirmation_groups_.find(group);
          it != confirmation_groups_.end()) {
        it->second->Confirm(generation);
      }
    }
  }

  void CountType(int type, RequestResult result) {
    if (service_->metrics_ != nullptr) {
      service_->requests_[type][result]->Increment();
    }
  }
  void Count(const std::string& type, const char* result) {
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_requests.Add({{"type", type}, {"result", result}})
          .Increment();
    }
  }

  AdsService* const service_;
  // The stream's place under the per-peer stream limit.
  PeerStreamLimit::Slot peer_slot_;

  discovery::DiscoveryRequest request_ ABSL_GUARDED_BY(mu_);
  discovery::DiscoveryResponse response_ ABSL_GUARDED_BY(mu_);
  TypeState types_[kTypeCount] ABSL_GUARDED_BY(mu_);
  bool have_node_ ABSL_GUARDED_BY(mu_) = false;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  bool ring_hash_safe_ ABSL_GUARDED_BY(mu_) = false;
  // Clusters carry the typed policies (ReadsTypedPolicies).
  bool typed_policies_ ABSL_GUARDED_BY(mu_) = false;
  // Unknown listener names get BuildNoRouteListener (NoRouteListenerSafe).
  bool no_route_safe_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> fallbacks_logged_ ABSL_GUARDED_BY(mu_);
  // Subscribed listener names this stream was sent a group's listener for:
  // once gone, such a name is left out rather than sent a no-route one.
  std::set<std::string> real_listeners_ ABSL_GUARDED_BY(mu_);
  // The no-route listeners sent for subscribed names no group answers.
  std::map<std::string, ResourcePtr> no_route_listeners_ ABSL_GUARDED_BY(mu_);
  // The index keys last taken (TakeIndexUpdateLocked), and how many times
  // they changed: the index keeps the newest.
  Keys keys_ ABSL_GUARDED_BY(mu_);
  // Names were looked up (or subscribed, or went unanswered) since.
  bool keys_stale_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t keys_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t nonce_ ABSL_GUARDED_BY(mu_) = 0;
  // The groups this stream is subscribed to in the service's
  // confirmations, with its place in each.
  std::map<std::string, DrainConfirmations::SubscriptionPtr>
      confirmation_groups_ ABSL_GUARDED_BY(mu_);
  // Marked by the fan-out thread and not yet run (RunMarked); OnDone
  // came (the stream goes once it is not queued).
  bool queued_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

AdsService::AdsService(GroupRegistry* groups, Metrics* metrics,
                       const LoadAggregator* loads, absl::Duration tick)
    : groups_(groups),
      metrics_(metrics),
      cache_(groups, loads),
      watcher_(std::make_unique<GroupWatcher>(this)),
      overload_interval_nanos_(absl::ToInt64Nanoseconds(tick)),
      ticker_("aside-ads", tick, [this] { FanOut(); }) {
  if (metrics_ != nullptr) {
    constexpr const char* kResults[] = {"ack", "nack", "stale", "subscribe"};
    for (size_t type = 0; type < kTypeCount; ++type) {
      responses_[type] =
          &metrics_->xds_responses.Add({{"type", kTypeLabels[type]}});
      for (int r = 0; r < kRequestResults; ++r) {
        requests_[type][r] = &metrics_->xds_requests.Add(
            {{"type", kTypeLabels[type]}, {"result", kResults[r]}});
      }
    }
  }
  groups_->AddListener(watcher_.get());
}

AdsService::~AdsService() {
  groups_->RemoveListener(watcher_.get());
  Shutdown();
  ticker_.Stop();
}

grpc::ServerBidiReactor<discovery::DiscoveryRequest,
                        discovery::DiscoveryResponse>*
AdsService::StreamAggregatedResources(grpc::CallbackServerContext* context) {
  return new Stream(this, context);
}

void AdsService::Shutdown() { streams_.Shutdown(); }

size_t AdsService::streams() const { return streams_.size(); }

void AdsService::Published(Group& group, bool added) {
  const std::shared_ptr<const Group::Publication> published = group.published();
  {
    aside::MutexLock lock(&index_mu_);
    changed_.insert(group.name());
    std::vector<std::string>& seen = aliases_[group.name()];
    const bool aliases_changed = seen != published->spec->aliases;
    if (aliases_changed) {
      seen = published->spec->aliases;
      wake_listening_ = true;
    }
    if (added) {
      wake_unanswered_ = true;
    }
    if (added || aliases_changed) {
      names_epoch_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  ticker_.Wake();
}

void AdsService::Removed(const std::string& group) {
  {
    aside::MutexLock lock(&index_mu_);
    changed_.insert(group);
    aliases_.erase(group);
    overloads_.erase(group);
    names_epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  ticker_.Wake();
}

void AdsService::FanOut() {
  std::vector<Stream*> ready;
  uint64_t woken = 0;
  {
    aside::MutexLock lock(&index_mu_);
    CheckOverloadsLocked();
    auto mark = [&ready, &woken](Stream* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      ++woken;
      if (s->Mark()) {
        ready.push_back(s);
      }
    };
    for (const std::string& group : changed_) {
      auto it = users_.find(group);
      if (it != users_.end()) {
        for (Stream* s : it->second) {
          mark(s);
        }
      }
    }
    changed_.clear();
    if (std::exchange(wake_unanswered_, false)) {
      for (Stream* s : unanswered_) {
        mark(s);
      }
    }
    if (std::exchange(wake_listening_, false)) {
      for (Stream* s : listening_) {
        mark(s);
      }
    }
  }
  streams_woken_.fetch_add(woken, std::memory_order_relaxed);
  for (Stream* s : ready) {
    s->RunMarked();
  }
}

void AdsService::CheckOverloadsLocked() {
  if (overload_interval_nanos_ <= 0) {
    return;
  }
  const int64_t now = MonotonicNanos();
  if (now - overloads_read_at_ < overload_interval_nanos_) {
    return;
  }
  overloads_read_at_ = now;
  for (const auto& [name, streams] : users_) {
    const GroupPtr group = groups_->Find(name);
    if (group == nullptr) {
      continue;
    }
    const int level = cache_.OverloadPercent(name, *group->published());
    auto [it, added] = overloads_.try_emplace(name, 0);
    if (it->second != level) {
      it->second = level;
      changed_.insert(name);
    }
  }
}

void AdsService::Register(Stream* s) {
  aside::MutexLock lock(&index_mu_);
  indexed_.try_emplace(s);
}

bool AdsService::Reindex(Stream* s, const Keys& keys, uint64_t seq) {
  aside::MutexLock lock(&index_mu_);
  auto entry = indexed_.find(s);
  if (entry == indexed_.end() || seq <= entry->second.seq) {
    return false;  // gone (Unindex), or a newer update came first
  }
  entry->second.seq = seq;
  Keys& old = entry->second.keys;
  bool added = false;
  // Both sorted: one pass over each.
  std::vector<std::string> gone;
  std::set_difference(old.groups.begin(), old.groups.end(), keys.groups.begin(),
                      keys.groups.end(), std::back_inserter(gone));
  for (const std::string& g : gone) {
    auto it = users_.find(g);
    if (it != users_.end()) {
      it->second.erase(s);
      if (it->second.empty()) {
        users_.erase(it);
      }
    }
  }
  std::vector<std::string> fresh;
  std::set_difference(keys.groups.begin(), keys.groups.end(),
                      old.groups.begin(), old.groups.end(),
                      std::back_inserter(fresh));
  for (const std::string& g : fresh) {
    users_[g].insert(s);
    added = true;
  }
  // The stream joins or leaves `set` as its flag turned on or off.
  auto follow = [&](auto& set, bool now, bool before) {
    if (now && !before) {
      set.insert(s);
      added = true;
    } else if (!now && before) {
      set.erase(s);
    }
  };
  follow(unanswered_, keys.unanswered, old.unanswered);
  follow(listening_, keys.listeners, old.listeners);
  old = keys;
  return added;
}

void AdsService::Unindex(Stream* s) {
  aside::MutexLock lock(&index_mu_);
  auto entry = indexed_.find(s);
  if (entry == indexed_.end()) {
    return;
  }
  for (const std::string& g : entry->second.keys.groups) {
    auto it = users_.find(g);
    if (it != users_.end()) {
      it->second.erase(s);
      if (it->second.empty()) {
        users_.erase(it);
      }
    }
  }
  unanswered_.erase(s);
  listening_.erase(s);
  indexed_.erase(entry);
}

void AdsService::LimitStreamsPerPeer(uint32_t max) {
  stream_limit_ = std::make_unique<PeerStreamLimit>(
      "max_balancer_streams_per_peer", "ADS streams", max, metrics_);
}

}  // namespace aside::server::xds
