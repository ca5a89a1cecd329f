// aside.v1.Fleet/LoadView, the publishing side: streams this replica's own
// load aggregates (LoadAggregator::ExportLocal) to peers that subscribe.
//
// The reports of this replica's own ORCA streams ride along
// (OrcaCollector::ExportOwn), so that one stream per backend serves the
// fleet. A new stream gets a snapshot at once; then, every `interval`, one
// ticker (on the control loop) exports once and offers it to every stream,
// which sends what changed since the export it last sent (load_view_codec.h). A
// stream still writing keeps only the newest export for later: a slow
// subscriber gets fewer, larger updates, never a backlog. An update with
// nothing in it is the heartbeat that tells the subscriber this replica is
// alive.
//
// Subscribers need the `report` role or open mode (ReportAuth); a
// subscriber that names this replica's own id is refused with
// FAILED_PRECONDITION so that a replica never merges its own view.
//
// Threads: gRPC callback threads run the streams; the ticker offers
// exports. Locks: the service's mu_ (export ids) before the stream set's
// (server/base/stream_set.h), that before a stream's, never after.
#ifndef ASIDE_SERVER_API_LOAD_VIEW_SERVICE_H_
#define ASIDE_SERVER_API_LOAD_VIEW_SERVICE_H_

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "aside/v1/fleet.grpc.pb.h"
#include "lib/sync.h"
#include "server/auth/report_auth.h"
#include "server/base/stream_set.h"
#include "server/load/load_aggregator.h"
#include "server/load/load_view_codec.h"
#include "server/load/load_view_metrics.h"
#include "server/load/orca_collector.h"

namespace aside::server {

class LoadViewService final : public v1::Fleet::CallbackService {
 public:
  // `loads`, `auth` and `metrics` (any may be null but loads) must outlive
  // this.
  // The export runs on `loop` (null: a thread of its own).
  LoadViewService(std::string replica_id, LoadAggregator* loads,
                  const ReportAuth* auth, absl::Duration interval,
                  LoadViewMetrics* metrics, EventLoop* loop = nullptr);
  ~LoadViewService() override;

  grpc::ServerWriteReactor<v1::LoadViewUpdate>* LoadView(
      grpc::CallbackServerContext* context,
      const v1::LoadViewRequest* request) override;

  // Shares the reports of this replica's own ORCA streams too (before the
  // first stream).
  void set_orca(const OrcaCollector* orca) { orca_ = orca; }

  // Ends every stream with UNAVAILABLE and refuses new ones. Idempotent.
  void Shutdown();

  const std::string& replica_id() const { return replica_id_; }
  size_t streams() const;

 private:
  class Stream;

  // Every interval: one export, offered to every stream.
  void Tick();
  // A fresh export (ids kept from the last one).
  std::shared_ptr<const ExportedLoads> ExportLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string replica_id_;
  LoadAggregator* const loads_;
  const ReportAuth* const auth_;
  const absl::Duration interval_;
  LoadViewMetrics* const metrics_;
  const OrcaCollector* orca_ = nullptr;

  // Taken before the stream set's lock: an export and its offers to every
  // stream are one step.
  mutable aside::Mutex mu_;
  ExportIds ids_ ABSL_GUARDED_BY(mu_);
  StreamSet<Stream> streams_;
  // Last: stopped (in the destructor) before the state Tick reads goes.
  Ticker ticker_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_LOAD_VIEW_SERVICE_H_
