// The assembled server: groups, the gRPC services (LoadBalancer, Admin,
// health, reflection) on one port, and Prometheus metrics on another.
#ifndef ASIDE_SERVER_SERVER_H_
#define ASIDE_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "aside/v1/admin.grpc.pb.h"
#include "lib/clock.h"
#include "server/api/admin_service.h"
#include "server/api/grpclb_service.h"
#include "server/api/health_service.h"
#include "server/api/load_balancer_service.h"
#include "server/api/load_view_service.h"
#include "server/api/parse_error_interceptor.h"
#include "server/api/xds/ads_service.h"
#include "server/api/xds/lrs_service.h"
#include "server/auth/admin_auth.h"
#include "server/auth/report_auth.h"
#include "server/base/event_loop.h"
#include "server/base/metrics.h"
#include "server/config/config.h"
#include "server/discovery/dns_discovery.h"
#include "server/fleet/membership.h"
#include "server/fleet/probe_ownership.h"
#include "server/groups/group_publisher.h"
#include "server/groups/group_registry.h"
#include "server/groups/health_follower.h"
#include "server/groups/rebuild_scheduler.h"
#include "server/load/load_view_metrics.h"
#include "server/load/load_view_peers.h"
#include "server/load/orca_collector.h"
#include "server/net/backend_relay.h"
#include "server/net/connection_gate.h"
#include "server/net/metrics_port.h"
#include "server/status/events.h"
#include "server/status/history.h"
#include "server/status/status_page.h"
#include "server/store/store.h"
#include "server/store/store_sync.h"

namespace aside::server {

class EtcdStore;

// Opens the store `config` names (sqlite under state_dir, or etcd; etcd
// connects on first use). `metrics` may not be null. `etcd` (if given) is
// set to the store when it is etcd's, whose client and prefix the fleet's
// membership and probe ownership share, and to null otherwise. etcd's
// channels go through `relay` when it is given.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(
    const ServerConfig& config, Metrics* metrics, EtcdStore** etcd = nullptr,
    const BackendRelay* relay = nullptr);

class AsideServer {
 public:
  // Opens the state store, loads its groups and builds those of `config`
  // (nothing is bound yet). Errors name the file or path at fault.
  static absl::StatusOr<std::unique_ptr<AsideServer>> Create(
      ServerConfig config, const Clock* clock = &SystemClock::Get());
  ~AsideServer();

  // Binds the gRPC and metrics ports and starts serving.
  absl::Status Start();
  // Stops accepting, lets in-flight calls finish for up to `grace`, ends
  // streams, stops the metrics endpoint. Idempotent.
  void Shutdown(absl::Duration grace);
  // Blocks until the gRPC server has shut down.
  void Wait();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  int health_port() const { return health_port_; }
  Store* store() { return store_.get(); }
  WatchHub& watch_hub() { return *watch_hub_; }
  DrainConfirmations& confirmations() { return *confirmations_; }
  LoadAggregator& loads() { return *loads_; }
  // This process's replica id (random per start), sent to peers.
  const std::string& replica_id() const { return replica_id_; }
  // The peers whose load views merge into this one's: the fleet's
  // membership calls SetPeers on every change of the live set (static
  // `fleet.peers` are set at Start). Null before Start.
  LoadViewPeers* load_view_peers() { return load_view_peers_.get(); }
  GrpclbService& grpclb() { return *grpclb_service_; }
  xds::AdsService& ads() { return *ads_service_; }
  HealthRegistry& health() { return *health_; }
  OrcaCollector& orca() { return *orca_; }
  GroupRegistry& groups() { return *groups_; }
  // Tells the edges and the event log of publications (after a change
  // returns: await it with AwaitIdle).
  GroupPublisher& publisher() { return *publisher_; }
  Metrics& metrics() { return metrics_; }
  StatusPage* status_page() { return status_page_.get(); }
  // The status page's event timeline and history; null when it is off.
  EventLog* events() { return events_.get(); }
  StatusHistory* history() { return history_.get(); }
  const ServerConfig& config() const { return config_; }
  // The fleet membership with the etcd store; null otherwise.
  fleet::Membership* membership() { return membership_.get(); }

 private:
  AsideServer(ServerConfig config, const Clock* clock);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials() const;
  // The gRPC port's relay (a plaintext port): the guard's limit is gRPC's.
  GuardedRelayOptions RequestRelay() const;
  // Subscribes to the static `fleet.peers` (Start, once listening).
  void StartLoadViewPeers();
  // The address peers dial: fleet.advertise_address, or the bound listen
  // address with a wildcard host replaced by 127.0.0.1.
  std::string AdvertiseAddress() const;
  // Leaves the fleet (revokes the lease) and removes the ownership hooks.
  void StopFleet();

  ServerConfig config_;
  const Clock* clock_;
  Metrics metrics_;
  // GET /metrics and the status page; stopped in Shutdown.
  MetricsPort metrics_http_{metrics_};
  // The control loop: table rebuilds and every service's periodic work run
  // on its thread. First in, last out: the timers below stop before it.
  std::unique_ptr<EventLoop> loop_;
  // First in, last out: everything below may record into it.
  std::unique_ptr<EventLog> events_;
  // The channels to backends and etcd go through it (probes, ORCA
  // streams, the store's client): it outlives them.
  std::unique_ptr<BackendRelay> backend_relay_;
  std::unique_ptr<Store> store_;
  // Applies the store's changes to groups_: stopped in the destructor,
  // before the groups go.
  std::unique_ptr<StoreSync> sync_;
  // Backends' own load reports: before groups_, whose member state ends its
  // subscription when it goes; its streams stop in Shutdown.
  std::unique_ptr<OrcaCollector> orca_;
  // Before groups_: groups hold handles into it (handles may outlive it, but
  // its probes should stop before the groups go).
  std::unique_ptr<HealthRegistry> health_;
  // With the etcd store: membership and probe ownership, stopped (lease
  // revoked, hooks removed) before the health registry goes.
  std::unique_ptr<fleet::Membership> membership_;
  std::unique_ptr<fleet::ProbeOwnership> ownership_;
  // What every subscriber confirmed (Watch, xDS, grpclb report to it;
  // Admin.WaitDrained reads it): outlives the services and the loads.
  std::unique_ptr<DrainConfirmations> confirmations_ =
      std::make_unique<DrainConfirmations>();
  std::unique_ptr<GroupRegistry> groups_;
  std::unique_ptr<LoadAggregator> loads_;
  // Declared after groups_ and loads_ so they stop (no more callbacks or
  // rebuilds) before those go away; the publisher goes after the
  // scheduler, whose rebuilds post to it.
  std::unique_ptr<GroupPublisher> publisher_;
  std::unique_ptr<RebuildScheduler> scheduler_;
  // The health registry's observers: detached first in the destructor.
  std::unique_ptr<HealthEvents> health_events_;  // null without the page
  std::unique_ptr<HealthFollower> health_follower_;
  std::unique_ptr<DnsDiscovery> dns_;
  std::unique_ptr<AdminAuth> auth_;
  std::unique_ptr<ReportAuth> report_auth_;
  std::unique_ptr<WatchHub> watch_hub_;
  std::unique_ptr<LoadBalancerService> lb_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<GrpclbService> grpclb_service_;
  std::unique_ptr<xds::AdsService> ads_service_;
  std::unique_ptr<xds::LrsService> lrs_service_;
  std::unique_ptr<HealthService> health_service_;
  std::unique_ptr<HealthService> plain_health_service_;
  std::unique_ptr<StatusPage> status_page_;  // null when turned off
  // With the page: stopped (sampler joined, listeners removed) before the
  // groups and loads they read go.
  std::unique_ptr<PublicationEvents> publication_events_;
  std::unique_ptr<StatusHistory> history_;
  // The shared load view: after loads_, so they stop first.
  std::string replica_id_;
  std::string peer_token_;
  std::unique_ptr<LoadViewMetrics> load_view_metrics_;
  std::unique_ptr<LoadViewService> load_view_service_;
  std::unique_ptr<LoadViewPeers> load_view_peers_;
  std::unique_ptr<grpc::Server> server_;
  // The gRPC port's accept loop (null on a unix socket): stopped before
  // server_ shuts down.
  std::unique_ptr<ConnectionGate> gate_;
  uint32_t max_connections_ = 0;  // the effective cap; 0: none (unix)
  std::unique_ptr<grpc::Server> health_server_;
  // The health port's accept loop and relay: stopped before health_server_
  // shuts down, destroyed before it.
  std::unique_ptr<ConnectionGate> health_gate_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int health_port_ = 0;
  bool shut_down_ = false;
  // /readyz on the metrics port: from the end of Start to Shutdown.
  std::atomic<bool> ready_{false};
  // The gRPC port's calls in flight, which a shutdown waits for.
  CallsInFlight calls_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_SERVER_H_
