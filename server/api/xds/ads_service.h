// envoy.service.discovery.v3.AggregatedDiscoveryService: Aside as the xDS
// management server of stock gRPC clients (`xds:///NAME` targets), state of
// the world over one ADS stream per client.
//
// Resources: Listener NAME for every name a group answers (its name, an
// alias, or a host whose first label names it, as for grpclb) with the
// route inline → Cluster <group> (EDS over ADS, load reports to this
// server) → ClusterLoadAssignment <group> from the group's published table
// (see xds_resources.h for the weight encoding). Names no group answers are
// left out of the response (counted); a deleted group's resources vanish
// from the next response.
//
// Protocol, per stream and per type: a response carries every subscribed
// resource that exists, a version (a hash of their own versions, each the
// hash of its encoding) and a fresh nonce. A request whose nonce is not the
// last one sent is stale and ignored. A request with the current nonce
// acknowledges the response, or, with error_detail, rejects it: the
// rejection is logged with the client's node id and counted, and a
// response of the rejected version is never sent again on that stream. A
// changed set of names is answered at once; an acknowledgement with the
// same names costs a comparison, no lookup. Per stream and type the
// bookkeeping is the last version sent, acknowledged and rejected and the
// last nonce: a constant.
//
// Fan-out. Each resource is encoded once per publication and shared by
// every stream that sends it (resource_cache.h). The service keeps an
// index: group name → the streams whose resources came from that group,
// plus the streams with a name no group answers and those subscribed to
// Listeners. A publication only queues the group's name and wakes the
// fan-out thread (O(1) on the group publisher's thread, whatever the
// number of streams); the fan-out thread marks the group's streams dirty
// and starts their writes, and streams of other groups are not touched.
// A stream keeps the group each of its names resolved to and looks names
// up again only after an event that can move one (a group added or
// removed, a group's aliases changed: a names epoch). A group added wakes
// the streams with an unanswered name; aliases changed wake the streams
// with Listener names. A stream writes one response at a time; what
// changes while one is in flight is evaluated when it completes, so a
// slow reader gets the newest state, never a backlog. Every `tick` the
// fan-out thread re-reads the overload drop level of the groups in use
// that have a rate limit and wakes their streams when it moved (O(groups
// in use), no stream touched otherwise).
//
// Threads: gRPC reactor callbacks, group publication callbacks (the group
// publisher's thread, no lock held: the service listens to every group,
// GroupRegistry::AddListener) and the fan-out thread (a Ticker, "aside-ads",
// woken by publications). Lock order: the stream set's
// (server/base/stream_set.h) → a stream's lock; index_mu_ → a stream's
// lock; nothing holding a stream's lock takes index_mu_.
#ifndef ASIDE_SERVER_API_XDS_ADS_SERVICE_H_
#define ASIDE_SERVER_API_XDS_ADS_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "lib/sync.h"
#include "server/api/drain_confirmations.h"
#include "server/api/peer_stream_limit.h"
#include "server/api/xds/resource_cache.h"
#include "server/base/metrics.h"
#include "server/base/stream_set.h"
#include "server/groups/group_registry.h"

namespace aside::server::xds {

class AdsService final : public envoy::service::discovery::v3::
                             AggregatedDiscoveryService::CallbackService {
 public:
  // `loads` (may be null) drives overload drops. `tick`: how often the
  // overload drop levels of the groups in use are re-read.
  AdsService(GroupRegistry* groups, Metrics* metrics,
             const LoadAggregator* loads = nullptr,
             absl::Duration tick = absl::Seconds(1));
  ~AdsService() override;

  grpc::ServerBidiReactor<envoy::service::discovery::v3::DiscoveryRequest,
                          envoy::service::discovery::v3::DiscoveryResponse>*
  StreamAggregatedResources(grpc::CallbackServerContext* context) override;

  // Caps the streams one client address may hold open (0: no cap)
  // (limits.max_balancer_streams_per_peer). Before the server starts.
  void LimitStreamsPerPeer(uint32_t max);
  // Where each stream's confirmed generations go: a group's generation is
  // confirmed once the stream ACKed endpoints built from it (or with the
  // same content). Null: nowhere. Set once while wiring, before serving.
  void set_confirmations(DrainConfirmations* confirmations) {
    confirmations_ = confirmations;
  }

  // Ends every stream with UNAVAILABLE.
  void Shutdown();
  size_t streams() const;

  // Streams the fan-out has marked for re-evaluation so far (each time a
  // change concerned it): what an update costs in streams touched.
  uint64_t streams_woken() const {
    return streams_woken_.load(std::memory_order_relaxed);
  }

 private:
  std::unique_ptr<PeerStreamLimit> stream_limit_;
  class Stream;
  friend class Stream;
  // Hears every publication, addition and removal of a group.
  class GroupWatcher;

  // What a stream's resources depend on, as the index holds it.
  struct Keys {
    std::vector<std::string> groups;  // sorted, unique
    bool unanswered = false;          // some name no group answers
    bool listeners = false;           // subscribed to Listeners
    bool operator==(const Keys&) const = default;
  };

  // The group publisher's side, O(1) in streams: queue what changed for
  // the fan-out thread and wake it.
  void Published(Group& group, bool added);
  void Removed(const std::string& group);
  // The fan-out thread's step: marks the streams the queued changes
  // concern and starts their writes; every `tick`, re-reads overload
  // levels.
  void FanOut();
  void CheckOverloadsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_mu_);
  // A stream joins the index, under no key yet (its constructor).
  void Register(Stream* s);
  // Puts `s` in the index under `keys` unless a newer update came first;
  // true when it added a key (the stream then looks again: a change of
  // that key between its lookup and now went unheard).
  bool Reindex(Stream* s, const Keys& keys, uint64_t seq);
  // Takes `s` out of the index for good (its OnDone).
  void Unindex(Stream* s);

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  DrainConfirmations* confirmations_ = nullptr;
  ResourceCache cache_;
  std::unique_ptr<GroupWatcher> watcher_;

  StreamSet<Stream> streams_;

  // Bumped by every event that can change what a name resolves to (a
  // group added or removed, aliases changed): a stream looks its names up
  // again when it differs from the one it resolved at.
  std::atomic<uint64_t> names_epoch_{1};
  std::atomic<uint64_t> streams_woken_{0};
  const int64_t overload_interval_nanos_;
  // The counters every response and acknowledgement increments, looked up
  // once (null without metrics).
  static constexpr size_t kResourceTypes = 4;
  enum RequestResult { kAck, kNack, kStale, kSubscribe, kRequestResults };
  prometheus::Counter* responses_[kResourceTypes] = {};
  prometheus::Counter* requests_[kResourceTypes][kRequestResults] = {};

  // The index and the changes queued for the fan-out thread. Held while a
  // stream is marked (a stream's lock is taken under it), never while a
  // stream evaluates or writes.
  aside::Mutex index_mu_;
  std::map<std::string, std::set<Stream*>> users_ ABSL_GUARDED_BY(index_mu_);
  // Each stream's keys as the index holds them, and the sequence number of
  // that update (a stream's updates may race; the newest wins). A stream
  // out of it (Unindex) is never put back.
  struct Indexed {
    Keys keys;
    uint64_t seq = 0;
  };
  std::unordered_map<const Stream*, Indexed> indexed_
      ABSL_GUARDED_BY(index_mu_);
  std::set<Stream*> unanswered_ ABSL_GUARDED_BY(index_mu_);
  std::set<Stream*> listening_ ABSL_GUARDED_BY(index_mu_);
  // Queued: groups published or removed; whether a group was added (the
  // streams with an unanswered name look again) or aliases changed (the
  // streams with Listener names do).
  std::set<std::string> changed_ ABSL_GUARDED_BY(index_mu_);
  bool wake_unanswered_ ABSL_GUARDED_BY(index_mu_) = false;
  bool wake_listening_ ABSL_GUARDED_BY(index_mu_) = false;
  // Each group's aliases as last seen, to tell an alias change.
  std::map<std::string, std::vector<std::string>> aliases_
      ABSL_GUARDED_BY(index_mu_);
  // Each rate-limited group's overload level as last seen (percent).
  std::map<std::string, int> overloads_ ABSL_GUARDED_BY(index_mu_);
  int64_t overloads_read_at_ ABSL_GUARDED_BY(index_mu_) = 0;

  // Last: stopped (in the destructor) before the state FanOut reads goes.
  Ticker ticker_;
};

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_API_XDS_ADS_SERVICE_H_
