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
// what changed; a group added re-evaluates the streams with a name no
// group answered; once a second every stream is re-evaluated (names that
// now resolve elsewhere, aliases moved).
//
// Threads: gRPC reactor callbacks, group publication callbacks (the group
// publisher's thread, no lock held: the service listens to every group,
// GroupRegistry::AddListener) and the ticker thread. Lock order: the
// stream set's (server/base/stream_set.h) → a stream's lock → used_mu_.
#ifndef ASIDE_SERVER_API_XDS_ADS_SERVICE_H_
#define ASIDE_SERVER_API_XDS_ADS_SERVICE_H_

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
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
  // `loads` (may be null) drives overload drops. `tick`: how often every
  // stream is re-evaluated (names that now resolve, aliases moved).
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
  // publications and deletion); nothing when no stream used it lately.
  void PokeUsers(const std::string& group);
  // Re-evaluates the streams with a subscribed name no group answered (a
  // group was added).
  void PokeUnanswered();
  // A stream's resources came from `group` (any thread, any locks).
  void Use(const std::string& group);
  // After a group was first used (Use): re-evaluates every stream. Call
  // with no lock held.
  void LookAgainIfNew();
  // Every tick: every stream afresh (names that now resolve, groups no
  // longer used).
  void Tick();

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  ResourceCache cache_;
  std::unique_ptr<GroupWatcher> watcher_;

  StreamSet<Stream> streams_;

  // The groups some stream's resources came from, since the ticker's last
  // pass and in the pass before: a publication of any other group is
  // dropped at once. Taken last (nothing else is locked while it is
  // held).
  aside::Mutex used_mu_;
  std::set<std::string> used_ ABSL_GUARDED_BY(used_mu_);
  std::set<std::string> used_before_ ABSL_GUARDED_BY(used_mu_);
  // A group was used that neither set held (LookAgainIfNew).
  bool look_again_ ABSL_GUARDED_BY(used_mu_) = false;

  // Last: stopped (in the destructor) before the state Tick reads goes.
  Ticker ticker_;
};

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_API_XDS_ADS_SERVICE_H_
