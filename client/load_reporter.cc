// Client's ReportLoad side: every report interval, the counters of every
// backend that saw traffic, cumulative, over one long-lived stream.
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/backoff.h"
#include "client/client.h"
#include "client/clock_wait.h"
#include "proto/convert.h"

namespace aside {

bool Client::CollectReport(v1::LoadReport* report,
                           std::vector<Reported>* sent) {
  report->set_reporter(reporter_);
  if (!options_.locality.empty()) {
    ToProto(options_.locality, report->mutable_reporter_locality());
  }
  for (ClientGroup* g : AllGroups()) {
    if (!g->name_status_.ok()) {
      continue;
    }
    aside::MutexLock lock(&g->mu_);
    for (const auto& [address, stats] : g->stats_) {
      const client_internal::CounterTotals totals = stats->Totals();
      const int64_t in_flight = std::max<int64_t>(totals.in_flight, 0);
      const uint64_t requests = totals.requests;
      if (requests ==
              stats->reported_requests.load(std::memory_order_relaxed) &&
          in_flight == 0) {
        continue;
      }
      v1::BackendLoad* load = report->add_loads();
      load->set_group(g->name_);
      load->set_address(address);
      load->set_requests(requests);
      load->set_failures(std::min(totals.failures, requests));
      // Totals() read the gap before every latency it was taken from.
      const uint64_t gap = totals.first_byte_gap_sum_nanos;
      const uint64_t latency = totals.latency_sum_nanos;
      ToProto(absl::Nanoseconds(static_cast<int64_t>(latency)),
              load->mutable_latency_sum());
      ToProto(absl::Nanoseconds(
                  static_cast<int64_t>(latency >= gap ? latency - gap : 0)),
              load->mutable_first_byte_latency_sum());
      load->set_in_flight(static_cast<uint64_t>(in_flight));
      load->set_consecutive_failures(
          stats->consecutive_failures.load(std::memory_order_relaxed));
      load->set_reset(stats->reset_pending);
      uint64_t orca_reports = stats->reported_orca;
      {
        aside::MutexLock orca_lock(&stats->orca_mu);
        if (stats->orca_reports != orca_reports) {
          orca_reports = stats->orca_reports;
          // The backend's last per-call report; application utilisation
          // only when set (gRFC A58 reads CPU when it is 0).
          v1::Utilization* u = load->mutable_utilization();
          u->set_cpu(stats->orca.cpu_utilization);
          if (stats->orca.application_utilization > 0) {
            u->set_application(stats->orca.application_utilization);
          }
          if (stats->orca.qps > 0) {
            u->set_qps(stats->orca.qps);
          }
          if (stats->orca.eps > 0) {
            u->set_eps(stats->orca.eps);
          }
        }
      }
      sent->push_back({stats, requests, orca_reports});
    }
  }
  return report->loads_size() > 0;
}

void Client::ReportLoop(int64_t start_nanos) {
  Backoff backoff(options_.backoff);
  const int64_t interval = absl::ToInt64Nanoseconds(options_.report_interval);
  int64_t next_report = start_nanos + interval;
  int64_t next_attempt = 0;
  std::unique_ptr<grpc::ClientContext> context;
  client_internal::SharedChannels::Lease lease;
  std::unique_ptr<v1::LoadBalancer::Stub> stub;
  std::unique_ptr<grpc::ClientWriter<v1::LoadReport>> writer;
  v1::ReportLoadResponse response;
  int writes_ok = 0;
  bool said_unavailable = false;
  bool said_failed = false;
  auto close = [&]() -> grpc::Status {
    grpc::Status status = writer->Finish();
    {
      aside::MutexLock lock(&mu_);
      report_context_ = nullptr;
    }
    writer.reset();
    stub.reset();
    context.reset();
    return status;
  };
  auto fail = [&]() -> grpc::Status {
    const grpc::Status status = close();
    lease.Failed();  // the next attempt gets a fresh connection
    lease = {};
    return status;
  };
  while (true) {
    {
      // Sleeps until the next report is due on the client's clock.
      aside::MutexLock lock(&mu_);
      if (interval <= 0) {
        mu_.Await(aside::Cond(&stopping_));
      } else {
        client_internal::AwaitUntil(mu_, aside::Cond(&stopping_), *clock_,
                                    next_report);
      }
      if (stopping_) {
        break;
      }
    }
    const int64_t now = clock_->NowNanos();
    next_report = now + interval;
    v1::LoadReport report;
    std::vector<Reported> sent;
    if (!CollectReport(&report, &sent)) {
      aside::MutexLock lock(&mu_);
      ++stats_.reports_skipped;
      continue;
    }
    if (writer == nullptr) {
      if (now < next_attempt) {
        continue;
      }
      std::string target;
      context = std::make_unique<grpc::ClientContext>();
      if (!options_.report_token.empty()) {
        context->AddMetadata("authorization",
                             absl::StrCat("Bearer ", options_.report_token));
      }
      {
        aside::MutexLock lock(&mu_);
        if (stopping_) {
          break;
        }
        target = options_.targets[target_index_ % options_.targets.size()];
        report_context_ = context.get();
      }
      lease = LeaseChannel(target);
      stub = v1::LoadBalancer::NewStub(lease.channel());
      response.Clear();
      writer = stub->ReportLoad(context.get(), &response);
      writes_ok = 0;
    }
    if (writer->Write(report)) {
      for (Reported& r : sent) {
        r.stats->reported_requests.store(r.requests, std::memory_order_relaxed);
        r.stats->reset_pending = false;
        r.stats->reported_orca = r.orca_reports;
      }
      if (++writes_ok >= 2) {
        backoff.Reset();
        said_failed = false;
      }
      aside::MutexLock lock(&mu_);
      ++stats_.reports_sent;
      if (writes_ok >= 2) {
        stats_.reporting_unavailable = false;
      }
      continue;
    }
    const grpc::Status status = fail();
    const absl::Duration delay = backoff.Next();
    next_attempt = clock_->NowNanos() + absl::ToInt64Nanoseconds(delay);
    const bool unimplemented =
        status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
    {
      aside::MutexLock lock(&mu_);
      ++stats_.report_stream_failures;
      stats_.reporting_unavailable = unimplemented;
    }
    if (unimplemented) {
      if (!said_unavailable) {
        said_unavailable = true;
        Log("event=report.unavailable the server does not accept load "
            "reports (UNIMPLEMENTED); retrying with backoff");
      }
    } else if (!said_failed) {
      said_failed = true;
      Log(absl::StrCat("event=report.failed ", StatusText(status),
                       "; retry in ", absl::FormatDuration(delay)));
    }
  }
  if (writer != nullptr) {
    {
      aside::MutexLock lock(&mu_);
      report_context_ = nullptr;
    }
    context->TryCancel();
    writer->Finish();
  }
}

}  // namespace aside
