// grpc.lb.v1.LoadBalancer/BalanceLoad: stock gRPC clients (any language)
// use Aside as their look-aside balancer through grpclb.
//
// Name mapping: `initial_request.name` is "host" or "host:port". A group
// whose `aliases` contain the host (or the whole name) wins; otherwise the
// host's first label names the group ("payments.prod.svc" → "payments").
// As in DNS, case and a trailing dot on the host are ignored
// ("Payments.Prod.Svc.:443" is "payments.prod.svc:443").
// An unknown name ends the stream with NOT_FOUND.
//
// Server lists: the group's eligible backends (ready ones; all non-drained
// ones in panic), each repeated in proportion to its weight. Weights are
// reduced by their greatest common divisor; when the reduced weights sum
// past `max_servers`, each is scaled down proportionally (keeping at least
// one entry), so a weight ratio a:b is approximated by the entry counts
// round(a·k):round(b·k). Entries are ordered by smooth weighted round robin,
// so a client's round robin over the list interleaves backends. Each entry
// carries load_balance_token "<group>/<address>"; drop entries carry
// "drop/<group>/panic" or "drop/<group>/overload".
//
// A fresh list follows every change of the group (coalesced like Watch: at
// most one write in flight, the newest list next). Each list is built and
// serialised once per publication and overload level, into the publication
// (Group::Publication::forms), and that one message is written to every
// stream of the group; the overload level is
// the load view's, read once a second per group for every edge
// (LoadAggregator::OverloadFraction). ClientStats feed the
// group's client-stats totals (Admin GetGroup) and metrics, when the
// caller may report load (server/auth/report_auth.h); a caller that may not
// still gets its server lists, and its stats are dropped and counted.
//
// Threads: gRPC's callback threads run each stream's reactor methods (one
// read and one write in flight per stream); group publication calls a
// stream's OnPublish from the group publisher's thread, with no lock held;
// the service's Ticker (server/base/event_loop.h), on the server's control
// loop, re-checks load-based drops once a second.
// Locks: the stream set's (StreamSet) is taken before a stream's own, never
// after; a list is built under its publication's lock
// (server/groups/published_forms.h), taken last; a stream joins
// and leaves a group's listeners without holding its lock, since leaving
// waits for an OnPublish in progress, which takes it.
#ifndef ASIDE_SERVER_API_GRPCLB_SERVICE_H_
#define ASIDE_SERVER_API_GRPCLB_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "lib/sync.h"
#include "server/api/drain_confirmations.h"
#include "server/api/peer_stream_limit.h"
#include "server/auth/report_auth.h"
#include "server/base/metrics.h"
#include "server/base/stream_set.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"

namespace aside::server {

// Maps a grpclb name to a group (see the file comment); null when none.
GroupPtr ResolveGrpclbName(const GroupRegistry& groups, absl::string_view name);

// Builds the ServerList for `table` (see the file comment).
// `overload_drop_fraction` in [0, 0.9] adds overload drop entries.
grpc::lb::v1::ServerList BuildServerList(const Table& table,
                                         const GrpclbSpec& options,
                                         uint32_t max_servers,
                                         double overload_drop_fraction);

class GrpclbService final : public grpc::lb::v1::LoadBalancer::CallbackService {
 public:
  // ClientStats count only from callers `report_auth` admits (null:
  // anyone); the server lists go to every caller. The overload checks run
  // on `loop` (null: a thread of their own).
  GrpclbService(GroupRegistry* groups, LoadAggregator* loads, Metrics* metrics,
                absl::Duration stats_interval, uint32_t max_servers,
                const ReportAuth* report_auth = nullptr,
                EventLoop* loop = nullptr);
  ~GrpclbService() override;

  grpc::ServerBidiReactor<grpc::lb::v1::LoadBalanceRequest,
                          grpc::lb::v1::LoadBalanceResponse>*
  BalanceLoad(grpc::CallbackServerContext* context) override;

  // Caps the streams one client address may hold open (0: no cap)
  // (limits.max_balancer_streams_per_peer). Before the server starts.
  void LimitStreamsPerPeer(uint32_t max);

  // Where each stream's confirmed generations go: a group's generation is
  // confirmed once the write of a server list built from it (or with the
  // same content) completed. Null: nowhere. Set once while wiring, before
  // serving.
  void set_confirmations(DrainConfirmations* confirmations) {
    confirmations_ = confirmations;
  }

  // Ends every stream with UNAVAILABLE.
  void Shutdown();
  size_t streams() const;
  // Open streams for one group.
  uint32_t streams_for(const std::string& group) const;
  // Server lists built so far (each shared by the streams of its group).
  uint64_t lists_built() const;

 private:
  std::unique_ptr<PeerStreamLimit> stream_limit_;
  class Stream;
  friend class Stream;

  // Once a second: re-evaluates load-based drops.
  void Tick();

  // A group's server list for one publication and overload level, as sent.
  struct BuiltList {
    grpc::lb::v1::LoadBalanceResponse response;
    std::string bytes;        // serialised: streams compare what they last sent
    uint64_t generation = 0;  // of the table it was built from
  };
  // The list for `group`'s newest publication, built once into it
  // (Group::Publication::forms) and shared by every stream of the group.
  std::shared_ptr<const BuiltList> ListFor(const Group& group);

  GroupRegistry* const groups_;
  LoadAggregator* const loads_;
  Metrics* const metrics_;
  const absl::Duration stats_interval_;
  const uint32_t max_servers_;
  const ReportAuth* const report_auth_;
  DrainConfirmations* confirmations_ = nullptr;

  StreamSet<Stream> streams_;
  std::atomic<uint64_t> lists_built_{0};

  // Last: stopped (in the destructor) before the state Tick reads goes.
  Ticker ticker_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_GRPCLB_SERVICE_H_
