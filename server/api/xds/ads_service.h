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
// resource that exists, a version (a hash of their encodings) and a fresh
// nonce. A request whose nonce is not the last one sent is stale and
// ignored. A request with the current nonce acknowledges the response, or,
// with error_detail, rejects it: the rejection is logged with the client's
// node id and counted, and a response of the rejected version is never sent
// again on that stream. A changed set of names is answered at once; a group
// publication re-evaluates the streams that use the group and sends only
// what changed; once a second every stream is re-evaluated (names that now
// resolve, or resolve elsewhere).
//
// Threads: gRPC reactor callbacks, group publication callbacks (the group
// publisher's thread, no lock held) and the ticker thread. Lock order: the
// stream set's (server/base/stream_set.h) → a stream's lock; groups are
// subscribed to (AddListener) only with none of those held, from
// RegisterPending().
#ifndef ASIDE_SERVER_API_XDS_ADS_SERVICE_H_
#define ASIDE_SERVER_API_XDS_ADS_SERVICE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "lib/sync.h"
#include "server/api/peer_stream_limit.h"
#include "server/api/xds/resource_cache.h"
#include "server/base/metrics.h"
#include "server/base/stream_set.h"
#include "server/groups/group_registry.h"

namespace aside::server::xds {

class AdsService final : public envoy::service::discovery::v3::
                             AggregatedDiscoveryService::CallbackService {
 public:
  // `loads` (may be null) drives overload drops.
  AdsService(GroupRegistry* groups, Metrics* metrics,
             const LoadAggregator* loads = nullptr);
  ~AdsService() override;

  grpc::ServerBidiReactor<envoy::service::discovery::v3::DiscoveryRequest,
                          envoy::service::discovery::v3::DiscoveryResponse>*
  StreamAggregatedResources(grpc::CallbackServerContext* context) override;

  // Caps the streams one client address may hold open (0: no cap)
  // (limits.max_balancer_streams_per_peer). Before the server starts.
  void LimitStreamsPerPeer(uint32_t max);

  // Ends every stream with UNAVAILABLE.
  void Shutdown();
  size_t streams() const;

 private:
  std::unique_ptr<PeerStreamLimit> stream_limit_;
  class Stream;
  friend class Stream;
  // Hears every publication of the groups some stream uses.
  class GroupWatcher;

  // Re-evaluates every stream.
  void PokeAll();
  // Re-evaluates the streams whose resources came from `group` (its
  // publications and deletion).
  void PokeUsers(const std::string& group);
  // Queues `group` to be subscribed to (any thread, any locks).
  void WatchLater(const GroupPtr& group);
  // Drops `group` from known_ (it is no longer watched).
  void Forget(const Group* group);
  // Subscribes to queued groups; call with no lock held.
  void RegisterPending();
  // Once a second: new groups for unresolved names, pruning.
  void Tick();

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  ResourceCache cache_;
  std::unique_ptr<GroupWatcher> watcher_;

  StreamSet<Stream> streams_;

  // Taken last (nothing else is locked while it is held). `known_` mirrors
  // watched_ so that re-evaluations queue only groups not yet watched.
  aside::Mutex pending_mu_;
  std::vector<GroupPtr> pending_ ABSL_GUARDED_BY(pending_mu_);
  std::set<const Group*> known_ ABSL_GUARDED_BY(pending_mu_);
  // Never taken while holding the stream set's or a stream's lock (leaving
  // a group's listeners, under it, waits for a publication in progress,
  // which takes those).
  aside::Mutex watched_mu_;
  std::map<std::string, GroupPtr> watched_ ABSL_GUARDED_BY(watched_mu_);

  // Last: stopped (in the destructor) before the state Tick reads goes.
  Ticker ticker_;
};

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_API_XDS_ADS_SERVICE_H_
