#include "server/api/xds/lrs_service.h"

#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/sync.h"
#include "proto/convert.h"
#include "server/api/xds/xds_resources.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"
#include "server/base/stream_reactor.h"

namespace aside::server::xds {

namespace lrs = envoy::service::load_stats::v3;

class LrsService::Stream final
    : public StreamReactor<grpc::ServerBidiReactor<lrs::LoadStatsRequest,
                                                   lrs::LoadStatsResponse>> {
 public:
  Stream(LrsService* service, grpc::CallbackServerContext* context)
      : StreamReactor(context), service_(service) {
    const bool shutting_down = !service_->streams_.Add(this);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_streams.Add({{"service", "lrs"}}).Increment();
    }
    grpc::Status refusal;
    if (service_->report_auth_ != nullptr) {
      refusal = service_->report_auth_->Authorize(*context, &source_);
    }
    aside::MutexLock lock(&mu_);
    if (shutting_down) {
      FinishLocked(ShuttingDownStatus());
      return;
    }
    if (!refusal.ok()) {
      if (service_->metrics_ != nullptr) {
        service_->metrics_->load_reports_refused
            .Add({{"protocol", "lrs"},
                  {"reason", std::string(ReportAuth::RefusalReason(refusal))}})
            .Increment();
      }
      FinishLocked(refusal);
      return;
    }
    if (grpc::Status refused = peer_slot_.Acquire(service_->stream_limit_.get(),
                                                  ClientPeer(context_->peer()));
        !refused.ok()) {
      FinishLocked(refused);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    if (!ok) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    if (reporter_.empty()) {
      // The first message names the client; answer with what to report.
      reporter_ = absl::StrCat("xds:", request_.node().id().substr(0, 64), "@",
                               ClientPeer(context_->peer()).substr(0, 60));
      response_.set_send_all_clusters(true);
      ToProto(service_->interval_, response_.mutable_load_reporting_interval());
      StartWrite(&response_);
    }
    service_->Apply(reporter_, request_, source_);
    request_.Clear();
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      aside::MutexLock lock(&mu_);
      FinishLocked(WriteFailedStatus());
    }
  }

  void OnDone() override {
    if (service_->metrics_ != nullptr) {
      service_->metrics_->xds_streams.Add({{"service", "lrs"}}).Decrement();
    }
    service_->streams_.Remove(this);
    delete this;
  }

  // Hides StreamReactor::Shutdown: the read always pending here would wait
  // for the client to half-close, so the call is cancelled whether or not
  // a write is in flight, and the server's shutdown does not wait for it.
  void Shutdown() {
    aside::MutexLock lock(&mu_);
    FinishLocked(ShuttingDownStatus());
    context_->TryCancel();
  }

 private:
  LrsService* const service_;
  // The stream's place under the per-peer stream limit.
  PeerStreamLimit::Slot peer_slot_;
  lrs::LoadStatsRequest request_ ABSL_GUARDED_BY(mu_);
  lrs::LoadStatsResponse response_ ABSL_GUARDED_BY(mu_);
  std::string reporter_ ABSL_GUARDED_BY(mu_);
  // Set in the constructor, before the first read.
  ReportAuth::Reporter source_{"anonymous", ""};
};

LrsService::LrsService(GroupRegistry* groups, LoadAggregator* loads,
                       Metrics* metrics, absl::Duration interval,
                       const ReportAuth* report_auth)
    : groups_(groups),
      loads_(loads),
      metrics_(metrics),
      interval_(interval),
      report_auth_(report_auth) {}

grpc::ServerBidiReactor<lrs::LoadStatsRequest, lrs::LoadStatsResponse>*
LrsService::StreamLoadStats(grpc::CallbackServerContext* context) {
  return new Stream(this, context);
}

void LrsService::Shutdown() { streams_.Shutdown(); }

size_t LrsService::Apply(const std::string& reporter,
                         const lrs::LoadStatsRequest& report,
                         const ReportAuth::Reporter& source) {
  size_t accepted = 0;
  for (const envoy::config::endpoint::v3::ClusterStats& c :
       report.cluster_stats()) {
    const std::string& group = c.cluster_service_name().empty()
                                   ? c.cluster_name()
                                   : c.cluster_service_name();
    if (c.total_dropped_requests() > 0 && groups_->Find(group) != nullptr) {
      loads_->AddDroppedCalls(group, c.total_dropped_requests());
    }
    for (const envoy::config::endpoint::v3::UpstreamLocalityStats& l :
         c.upstream_locality_stats()) {
      LoadObservation o;
      o.source = source.source;
      o.group = group;
      o.address = BackendFromLocality(l.locality());
      o.deltas = true;
      o.requests = l.total_successful_requests() + l.total_error_requests();
      o.failures = l.total_error_requests();
      o.in_flight = l.total_requests_in_progress();
      absl::Status s = loads_->Add(reporter, o);
      if (metrics_ != nullptr) {
        metrics_->xds_load_reports
            .Add({{"result", s.ok() ? "accepted" : "rejected"}})
            .Increment();
        if (s.ok()) {
          metrics_->load_reporter_observations
              .Add({{"protocol", "lrs"},
                    {"group", group},
                    {"reporter", source.name}})
              .Increment();
        } else {
          metrics_->load_reports_refused
              .Add({{"protocol", "lrs"},
                    {"reason", s.code() == absl::StatusCode::kNotFound
                                   ? "unknown_backend"
                                   : "invalid"}})
              .Increment();
        }
      }
      if (s.ok()) {
        ++accepted;
      } else {
        Log(LogLevel::kDebug, "xds.load_report_rejected",
            {{"reporter", reporter},
             {"cluster", group.substr(0, 256)},
             {"locality", l.locality().sub_zone().substr(0, 256)},
             {"reason", std::string(s.message())}});
      }
    }
  }
  return accepted;
}

void LrsService::LimitStreamsPerPeer(uint32_t max) {
  stream_limit_ = std::make_unique<PeerStreamLimit>(
      "max_balancer_streams_per_peer", "LRS streams", max, metrics_);
}

}  // namespace aside::server::xds
