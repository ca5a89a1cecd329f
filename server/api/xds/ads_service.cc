#include "server/api/xds/ads_service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
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

// A listener of every group: forwards publications and deletions to the
// streams that use the group.
class AdsService::GroupWatcher final : public Group::Listener {
 public:
  explicit GroupWatcher(AdsService* service) : service_(service) {}
  void OnPublish(Group& group, const TableConstPtr& /*table*/) override {
    service_->PokeUsers(group.name());
    service_->LookAgainIfNew();
  }
  // A group added may answer names that no group answered.
  void OnAdded(Group& /*group*/, const TableConstPtr& /*table*/) override {
    service_->PokeUnanswered();
    service_->LookAgainIfNew();
  }
  void OnRemoved(Group& group, uint64_t /*generation*/) override {
    service_->PokeUsers(group.name());
    service_->LookAgainIfNew();
  }

 private:
  AdsService* const service_;
};

// One ADS stream. Reads one request at a time; writes one response at a
// time, always the newest state of the next type that has something to
// send.
class AdsService::Stream final
    : public StreamReactor<grpc::ServerBidiReactor<
          discovery::DiscoveryRequest, discovery::DiscoveryResponse>> {
 public:
  Stream(AdsService* service, grpc::CallbackServerContext* context)
      : StreamReactor(context), service_(service) {
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
      if (!finished()) {
        request_.Clear();
        StartRead(&request_);
      }
    }
    service_->LookAgainIfNew();
  }

  void OnWriteDone(bool ok) override {
    {
      aside::MutexLock lock(&mu_);
      if (!WriteDoneLocked(ok)) {
        return;
      }
      WriteNextLocked();
    }
    service_->LookAgainIfNew();
  }

  void OnDone() override {
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_streams.Add({{"service", "ads"}}).Decrement();
    }
    service_->streams_.Remove(this);
    delete this;
  }

  // Re-evaluates what the client should have (publication callbacks and the
  // ticker, with the stream set's lock held). `forget` starts the set of groups
  // the stream uses afresh (the ticker's full pass).
  void Poke(bool forget = false) {
    aside::MutexLock lock(&mu_);
    if (forget) {
      uses_.clear();
    }
    WriteNextLocked();
  }

  // Re-evaluates only when some subscribed name had no group.
  void PokeIfUnanswered() {
    aside::MutexLock lock(&mu_);
    for (const TypeState& t : types_) {
      if (t.subscribed && t.unanswered) {
        WriteNextLocked();
        return;
      }
    }
  }

  // Re-evaluates only when the stream's resources came from `group`.
  void PokeIfUses(const std::string& group) {
    aside::MutexLock lock(&mu_);
    if (uses_.contains(group)) {
      WriteNextLocked();
    }
  }

 private:
  struct TypeState {
    bool subscribed = false;
    std::vector<std::string> names;  // sorted, unique
    // Answer even when the version did not change (new names).
    bool must_respond = false;
    // Some name had no group when last resolved.
    bool unanswered = false;
    std::string sent_version;
    std::string sent_nonce;
    std::string acked_version;
    std::string rejected_version;
  };

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
    const char* label = kTypeLabels[type];
    if (!request_.response_nonce().empty()) {
      if (request_.response_nonce() != t.sent_nonce) {
        Count(label, "stale");
        return;
      }
      if (request_.has_error_detail()) {
        t.rejected_version = t.sent_version;
        Count(label, "nack");
        LogThrottled(
            LogLevel::kWarn, "xds.nack",
            {{"node", node_id_},
             {"type", label},
             {"version", t.sent_version},
             {"error", request_.error_detail().message().substr(0, 1024)},
             {"peer", ClientPeer(context_->peer())}});
      } else {
        t.acked_version = request_.version_info();
        Count(label, "ack");
      }
    }
    std::vector<std::string> names;
    // Within the caps (OverCapLocked).
    names.assign(request_.resource_names().begin(),
                 request_.resource_names().end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (!t.subscribed || names != t.names) {
      if (request_.response_nonce().empty()) {
        Count(label, "subscribe");
      }
      t.subscribed = true;
      t.names = std::move(names);
      t.must_respond = true;
    }
  }

  // Resources of `type` for the subscribed names, plus the unknown names.
  std::vector<ResourcePtr> ResolveLocked(int type, size_t* unknown)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<ResourcePtr> out;
    for (const std::string& name : types_[type].names) {
      ResourceCache::Found f;
      switch (type) {
        case 0:
          f = service_->cache_.Listener(name, ring_hash_safe_, typed_policies_);
          break;
        case 2:
          f = service_->cache_.Cluster(name, ring_hash_safe_, typed_policies_);
          if (f.ring_hash_fallback && f.group != nullptr) {
            NoteFallbackLocked(f.group->name());
          }
          break;
        case 3:
          f = service_->cache_.Endpoints(name);
          break;
        default:
          break;  // routes are inline in listeners: none by name
      }
      if (f.group != nullptr) {
        if (uses_.insert(f.group->name()).second) {
          service_->Use(f.group->name());
        }
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

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished()) {
      return;
    }
    for (size_t type = 0; type < kTypeCount; ++type) {
      TypeState& t = types_[type];
      if (!t.subscribed) {
        continue;
      }
      size_t unknown = 0;
      std::vector<ResourcePtr> resources =
          ResolveLocked(static_cast<int>(type), &unknown);
      t.unanswered = unknown > 0;
      std::string versions;
      for (const ResourcePtr& r : resources) {
        absl::StrAppend(&versions, r->name, "\n", r->version, "\n");
      }
      char version[17];
      std::snprintf(version, sizeof(version), "%016llx",
                    static_cast<unsigned long long>(Fnv1a64(versions)));
      if (version == t.rejected_version) {
        t.must_respond = false;
        continue;  // never send a rejected version again
      }
      if (version == t.sent_version && !t.must_respond) {
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
      t.must_respond = false;
      if (service_->metrics_ != nullptr) {
        service_->metrics_->xds_responses.Add({{"type", kTypeLabels[type]}})
            .Increment();
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
  // Groups the stream's resources came from since the ticker's last full
  // pass: publications of other groups do not concern it. Every write
  // completion re-evaluates every type, so a type skipped by an early
  // return is resolved (and recorded) right after.
  std::set<std::string> uses_ ABSL_GUARDED_BY(mu_);
  uint64_t nonce_ ABSL_GUARDED_BY(mu_) = 0;
};

AdsService::AdsService(GroupRegistry* groups, Metrics* metrics,
                       const LoadAggregator* loads, absl::Duration tick)
    : groups_(groups),
      metrics_(metrics),
      cache_(groups, loads),
      watcher_(std::make_unique<GroupWatcher>(this)),
      ticker_("aside-ads", tick, [this] { Tick(); }) {
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

void AdsService::PokeAll() {
  streams_.ForEach([](Stream* s) { s->Poke(); });
}

void AdsService::PokeUsers(const std::string& group) {
  {
    aside::MutexLock lock(&used_mu_);
    if (!used_.contains(group) && !used_before_.contains(group)) {
      return;  // no stream's resources came from it
    }
  }
  streams_.ForEach([&group](Stream* s) { s->PokeIfUses(group); });
}

void AdsService::PokeUnanswered() {
  streams_.ForEach([](Stream* s) { s->PokeIfUnanswered(); });
}

void AdsService::Use(const std::string& group) {
  aside::MutexLock lock(&used_mu_);
  if (used_.insert(group).second && !used_before_.contains(group)) {
    look_again_ = true;
  }
}

void AdsService::LookAgainIfNew() {
  while (true) {
    {
      aside::MutexLock lock(&used_mu_);
      if (!look_again_) {
        return;
      }
      look_again_ = false;
    }
    // A publication of the group between a stream's lookup and its Use
    // went unheard (no stream used it yet): look again. Ends once a pass
    // uses no group first (each pass adds to the groups used).
    PokeAll();
  }
}

void AdsService::Tick() {
  // The groups used since the last pass stay known while every stream
  // records afresh what it uses now; a group no stream uses any more is
  // forgotten at the next pass.
  {
    aside::MutexLock lock(&used_mu_);
    used_before_ = std::exchange(used_, {});
  }
  // Names may now resolve to groups created meanwhile, or (aliases
  // changed) to other groups.
  streams_.ForEach([](Stream* s) { s->Poke(/*forget=*/true); });
  LookAgainIfNew();
}

void AdsService::LimitStreamsPerPeer(uint32_t max) {
  stream_limit_ = std::make_unique<PeerStreamLimit>(
      "max_balancer_streams_per_peer", "ADS streams", max, metrics_);
}

}  // namespace aside::server::xds
