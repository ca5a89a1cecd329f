// envoy.service.load_stats.v3.LoadReportingService: load reports from stock
// xDS clients. The first response asks for every cluster at the configured
// interval; each report's per-locality counts (deltas since the client's
// last report) are mapped back to the backend the locality encodes (see
// xds_resources.h) and folded into the same LoadAggregator as ReportLoad
// and grpclb client stats, so they show in the group's load view and drive
// load-aware policies and outlier detection. A locality that names no
// backend of the group is rejected and counted.
//
// Threads: gRPC reactor callbacks only; the stream set
// (server/base/stream_set.h) is locked before a stream.
#ifndef ASIDE_SERVER_API_XDS_LRS_SERVICE_H_
#define ASIDE_SERVER_API_XDS_LRS_SERVICE_H_

#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "envoy/service/load_stats/v3/lrs.grpc.pb.h"
#include "lib/sync.h"
#include "server/api/peer_stream_limit.h"
#include "server/auth/report_auth.h"
#include "server/base/metrics.h"
#include "server/base/stream_set.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"

namespace aside::server::xds {

class LrsService final : public envoy::service::load_stats::v3::
                             LoadReportingService::CallbackService {
 public:
  // Streams from callers `report_auth` refuses (null: none refused) end at
  // once with UNAUTHENTICATED or PERMISSION_DENIED.
  LrsService(GroupRegistry* groups, LoadAggregator* loads, Metrics* metrics,
             absl::Duration interval, const ReportAuth* report_auth = nullptr);

  grpc::ServerBidiReactor<envoy::service::load_stats::v3::LoadStatsRequest,
                          envoy::service::load_stats::v3::LoadStatsResponse>*
  StreamLoadStats(grpc::CallbackServerContext* context) override;

  // Caps the streams one client address may hold open (0: no cap)
  // (limits.max_balancer_streams_per_peer). Before the server starts.
  void LimitStreamsPerPeer(uint32_t max);

  // Ends every stream with UNAVAILABLE.
  void Shutdown();

  // Folds one report into the aggregator; returns the localities accepted.
  // `reporter` names the client (node id and peer).
  size_t Apply(const std::string& reporter,
               const envoy::service::load_stats::v3::LoadStatsRequest& report,
               const ReportAuth::Reporter& source = {"anonymous", ""});

 private:
  std::unique_ptr<PeerStreamLimit> stream_limit_;
  class Stream;
  friend class Stream;

  GroupRegistry* const groups_;
  LoadAggregator* const loads_;
  Metrics* const metrics_;
  const absl::Duration interval_;
  const ReportAuth* const report_auth_;

  StreamSet<Stream> streams_;
};

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_API_XDS_LRS_SERVICE_H_
