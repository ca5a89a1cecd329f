// aside.v1.LoadBalancer: Pick (answered from the group's published table),
// Watch (handed to the WatchHub, server/api/watch.h) and ReportLoad (folded
// into the LoadAggregator).
#ifndef ASIDE_SERVER_API_LOAD_BALANCER_SERVICE_H_
#define ASIDE_SERVER_API_LOAD_BALANCER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <set>

#include "absl/time/time.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/api/watch.h"
#include "server/auth/report_auth.h"
#include "server/base/metrics.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"

namespace aside::server {

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxPickCount = 16;
inline constexpr size_t kMaxExclude = 1024;
inline constexpr int kMaxLoadsPerReport = 10000;
inline constexpr int kMaxRejectedListed = 1000;
inline constexpr absl::Duration kReportInterval = absl::Seconds(1);

// Watch is a raw method on the completion-queue API: its updates are
// pre-encoded byte buffers shared by every subscriber, written by the
// WatchHub's own threads (see server/api/watch.h). The other methods are
// callback methods.
using LoadBalancerServiceBase = v1::LoadBalancer::WithCallbackMethod_Pick<
    v1::LoadBalancer::WithRawMethod_Watch<
        v1::LoadBalancer::WithRawMethod_WatchConfirmed<
            v1::LoadBalancer::WithCallbackMethod_ReportLoad<
                v1::LoadBalancer::Service>>>>;

class LoadBalancerService final : public LoadBalancerServiceBase {
 public:
  // `report_auth` decides who may call ReportLoad (null: anyone, as
  // "anonymous").
  LoadBalancerService(GroupRegistry* groups, Metrics* metrics,
                      const Clock* clock, LoadAggregator* loads,
                      const ReportAuth* report_auth = nullptr);

  // Asks gRPC for Watch and WatchConfirmed calls on the hub's completion
  // queues (for WatchHub::Serve).
  WatchHub::Requesters WatchRequester();

  grpc::ServerUnaryReactor* Pick(grpc::CallbackServerContext* context,
                                 const v1::PickRequest* request,
                                 v1::PickResponse* response) override;

  grpc::ServerReadReactor<v1::LoadReport>* ReportLoad(
      grpc::CallbackServerContext* context,
      v1::ReportLoadResponse* response) override;

  // Folds one report from `reporter` into the aggregator, recording
  // accepted and rejected observations in `response` (report_index is the
  // report's position in its stream).
  void HandleReport(const ReportAuth::Reporter& reporter,
                    const v1::LoadReport& report, uint64_t report_index,
                    v1::ReportLoadResponse* response);

  // Ends every ReportLoad call with UNAVAILABLE and refuses new ones (at
  // the start of a shutdown, before gRPC's own waits for calls to end).
  void Shutdown();

  // The pick itself, without the RPC plumbing (also used by tests).
  grpc::Status DoPick(const v1::PickRequest& request,
                      v1::PickResponse* response);

 private:
  class ReportReader;

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  const Clock* const clock_;
  LoadAggregator* const loads_;
  const ReportAuth* const report_auth_;
  aside::Mutex reports_mu_;
  bool shutting_down_ ABSL_GUARDED_BY(reports_mu_) = false;
  std::set<ReportReader*> reports_ ABSL_GUARDED_BY(reports_mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_LOAD_BALANCER_SERVICE_H_
