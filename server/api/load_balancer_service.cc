#include "server/api/load_balancer_service.h"

#include <array>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "proto/convert.h"
#include "server/base/status_util.h"

namespace aside::server {

LoadBalancerService::LoadBalancerService(GroupRegistry* groups,
                                         Metrics* metrics, const Clock* clock,
                                         LoadAggregator* loads,
                                         const ReportAuth* report_auth)
    : groups_(groups),
      metrics_(metrics),
      clock_(clock),
      loads_(loads),
      report_auth_(report_auth) {}

namespace {}  // namespace

// One ReportLoad call: reads reports until the client half-closes, folds
// each into the aggregator, then answers with the tally. At shutdown the
// service ends it at once with UNAVAILABLE, so that the stub moves its
// reports to another replica rather than hold the server for its grace.
class LoadBalancerService::ReportReader final
    : public grpc::ServerReadReactor<v1::LoadReport> {
 public:
  ReportReader(LoadBalancerService* service,
               grpc::CallbackServerContext* context,
               v1::ReportLoadResponse* response, ReportAuth::Reporter reporter)
      : service_(service),
        context_(context),
        response_(response),
        reporter_(std::move(reporter)) {
    bool shutting_down;
    {
      aside::MutexLock lock(&service_->reports_mu_);
      shutting_down = service_->shutting_down_;
      service_->reports_.insert(this);
    }
    if (shutting_down) {
      Shutdown();
      return;
    }
    StartRead(&report_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      ToProto(kReportInterval, response_->mutable_report_interval());
      FinishOnce(grpc::Status::OK);
      return;
    }
    service_->HandleReport(reporter_, report_, index_++, response_);
    report_.Clear();
    StartRead(&report_);
  }

  // Ends the call. The read still pending would wait for the client to
  // half-close; cancelling completes it at once, so the server's shutdown
  // does not wait for the client.
  void Shutdown() {
    FinishOnce(ShuttingDownStatus());
    context_->TryCancel();
  }

  void OnDone() override {
    {
      aside::MutexLock lock(&service_->reports_mu_);
      service_->reports_.erase(this);
    }
    delete this;
  }

 private:
  void FinishOnce(const grpc::Status& status) {
    aside::MutexLock lock(&mu_);
    if (!finished_) {
      finished_ = true;
      Finish(status);
    }
  }

  LoadBalancerService* const service_;
  grpc::CallbackServerContext* const context_;
  v1::ReportLoadResponse* const response_;
  const ReportAuth::Reporter reporter_;
  v1::LoadReport report_;
  uint64_t index_ = 0;
  aside::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

void LoadBalancerService::Shutdown() {
  aside::MutexLock lock(&reports_mu_);
  shutting_down_ = true;
  for (ReportReader* r : reports_) {
    r->Shutdown();
  }
}

namespace {

// A refused ReportLoad call: ends at once with the refusal.
class RefusedReport final : public grpc::ServerReadReactor<v1::LoadReport> {
 public:
  explicit RefusedReport(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// The metric reason of an observation the aggregator rejected.
const char* RejectReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return "unknown_backend";
    case absl::StatusCode::kResourceExhausted:
      return "limit";
    default:
      return "invalid";
  }
}

absl::StatusOr<int64_t> Nanos(const char* field,
                              const google::protobuf::Duration& d) {
  absl::StatusOr<absl::Duration> parsed = FromProto(field, d);
  if (!parsed.ok()) {
    return parsed.status();
  }
  return absl::ToInt64Nanoseconds(*parsed);
}

}  // namespace

grpc::ServerReadReactor<v1::LoadReport>* LoadBalancerService::ReportLoad(
    grpc::CallbackServerContext* context, v1::ReportLoadResponse* response) {
  ReportAuth::Reporter reporter{.name = "anonymous", .source = "anonymous"};
  if (report_auth_ != nullptr) {
    if (grpc::Status s = report_auth_->Authorize(*context, &reporter);
        !s.ok()) {
      if (metrics_ != nullptr) {
        metrics_->load_reports_refused
            .Add({{"protocol", "aside"},
                  {"reason", std::string(ReportAuth::RefusalReason(s))}})
            .Increment();
      }
      return new RefusedReport(s);
    }
  }
  return new ReportReader(this, context, response, std::move(reporter));
}

void LoadBalancerService::HandleReport(const ReportAuth::Reporter& reporter,
                                       const v1::LoadReport& report,
                                       uint64_t report_index,
                                       v1::ReportLoadResponse* response) {
  auto reject = [&](uint32_t load_index, std::string reason,
                    const char* metric_reason = "invalid") {
    if (response->rejected_size() < kMaxRejectedListed) {
      v1::RejectedLoad* r = response->add_rejected();
      r->set_report_index(report_index);
      r->set_load_index(load_index);
      r->set_reason(std::move(reason));
    }
    if (metrics_ != nullptr) {
      metrics_->load_reports_rejected.Increment();
      metrics_->load_reports_refused
          .Add({{"protocol", "aside"}, {"reason", metric_reason}})
          .Increment();
    }
  };
  if (report.reporter().empty() || report.reporter().size() > 128) {
    for (int i = 0; i < report.loads_size(); ++i) {
      reject(static_cast<uint32_t>(i), "reporter: required, at most 128 bytes");
    }
    return;
  }
  if (report.loads_size() > kMaxLoadsPerReport) {
    for (int i = 0; i < report.loads_size(); ++i) {
      reject(static_cast<uint32_t>(i),
             absl::StrCat("loads: ", report.loads_size(),
                          " entries in one report (at most ",
                          kMaxLoadsPerReport, ")"));
    }
    return;
  }
  // Counted per group once per report (a metric lookup per entry would
  // cost more than the entry).
  absl::flat_hash_map<std::string, uint64_t> accepted_by_group;
  for (int i = 0; i < report.loads_size(); ++i) {
    const v1::BackendLoad& in = report.loads(i);
    const std::string field = absl::StrCat("loads[", i, "].");
    LoadObservation o;
    o.source = reporter.source;
    o.group = in.group();
    o.address = in.address();
    if (!o.address.empty() && groups_->Find(o.group) != nullptr &&
        groups_->Find(o.group)->table()->Find(o.address) < 0) {
      absl::StatusOr<std::string> canonical = CanonicalAddress(o.address);
      if (canonical.ok()) {
        o.address = *canonical;
      }
    }
    o.requests = in.requests();
    o.failures = in.failures();
    absl::StatusOr<int64_t> latency = Nanos("latency_sum", in.latency_sum());
    absl::StatusOr<int64_t> first_byte =
        Nanos("first_byte_latency_sum", in.first_byte_latency_sum());
    if (!latency.ok() || !first_byte.ok()) {
      reject(static_cast<uint32_t>(i),
             absl::StrCat(
                 field, (!latency.ok() ? latency.status() : first_byte.status())
                            .message()));
      continue;
    }
    o.latency_sum_nanos = *latency;
    o.first_byte_latency_sum_nanos = *first_byte;
    o.in_flight = in.in_flight();
    o.consecutive_failures = in.consecutive_failures();
    o.reset = in.reset();
    if (in.has_utilization()) {
      if (in.utilization().has_cpu()) o.cpu = in.utilization().cpu();
      if (in.utilization().has_application()) {
        o.application = in.utilization().application();
      }
    }
    absl::Status s = loads_->Add(report.reporter(), o);
    if (!s.ok()) {
      reject(static_cast<uint32_t>(i), absl::StrCat(field, s.message()),
             RejectReason(s.code()));
      continue;
    }
    response->set_accepted(response->accepted() + 1);
    if (metrics_ != nullptr) {
      metrics_->load_reports_accepted.Increment();
    }
    ++accepted_by_group[o.group];
  }
  if (metrics_ != nullptr) {
    for (const auto& [group, n] : accepted_by_group) {
      metrics_->load_reporter_observations
          .Add({{"protocol", "aside"},
                {"group", group},
                {"reporter", reporter.name}})
          .Increment(static_cast<double>(n));
    }
  }
}

WatchHub::Requesters LoadBalancerService::WatchRequester() {
  WatchHub::Requesters r;
  r.watch = [this](grpc::ServerContext* context, grpc::ByteBuffer* request,
                   grpc::ServerAsyncWriter<grpc::ByteBuffer>* writer,
                   grpc::ServerCompletionQueue* cq, void* tag) {
    RequestWatch(context, request, writer, cq, cq, tag);
  };
  r.confirmed = [this](grpc::ServerContext* context,
                       grpc::ServerAsyncReaderWriter<grpc::ByteBuffer,
                                                     grpc::ByteBuffer>* stream,
                       grpc::ServerCompletionQueue* cq, void* tag) {
    RequestWatchConfirmed(context, stream, cq, cq, tag);
  };
  return r;
}

grpc::ServerUnaryReactor* LoadBalancerService::Pick(
    grpc::CallbackServerContext* context, const v1::PickRequest* request,
    v1::PickResponse* response) {
  const int64_t start = clock_->NowNanos();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoPick(*request, response));
  metrics_->pick_duration.Observe(
      static_cast<double>(clock_->NowNanos() - start) * 1e-9);
  return reactor;
}

grpc::Status LoadBalancerService::DoPick(const v1::PickRequest& request,
                                         v1::PickResponse* response) {
  if (request.group().empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "group: required"};
  }
  GroupPtr group = groups_->Find(request.group());
  if (group == nullptr) {
    if (absl::Status s = ValidateGroupName(request.group()); !s.ok()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("group: ", s.message())};
    }
    return {grpc::StatusCode::NOT_FOUND,
            absl::StrCat("group '", EchoName(request.group()), "' not found")};
  }
  const GroupMetrics* gm = group->metrics();
  auto invalid = [&](std::string message) {
    if (gm != nullptr) {
      gm->picks_invalid->Increment();
    }
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
  };
  if (!request.key().empty() && !request.key_bytes().empty()) {
    return invalid("key: set key (text) or key_bytes (binary), not both");
  }
  const bool text_key = !request.key().empty();
  const std::string& key = text_key ? request.key() : request.key_bytes();
  if (key.size() > kMaxKeyBytes) {
    return invalid(absl::StrCat(text_key ? "key: " : "key_bytes: ", key.size(),
                                " bytes (at most ", kMaxKeyBytes, ")"));
  }
  if (request.count() > kMaxPickCount) {
    return invalid(absl::StrCat("count: ", request.count(), " out of range 1..",
                                kMaxPickCount));
  }
  if (static_cast<size_t>(request.exclude_size()) > kMaxExclude) {
    return invalid(absl::StrCat("exclude: ", request.exclude_size(),
                                " entries (at most ", kMaxExclude, ")"));
  }
  if (request.session_token().size() > 1024) {
    return invalid("session_token: longer than 1024 bytes");
  }

  TableConstPtr table = group->table();
  std::array<uint32_t, kMaxExclude> exclude_buf;
  size_t excluded = 0;
  for (const std::string& address : request.exclude()) {
    int64_t index = table->Find(address);
    if (index < 0) {
      absl::StatusOr<std::string> canonical = CanonicalAddress(address);
      if (canonical.ok()) {
        index = table->Find(*canonical);
      }
    }
    if (index >= 0) {
      exclude_buf[excluded++] = static_cast<uint32_t>(index);
    }
  }

  Locality caller;
  PickRequest pick;
  pick.key = key;
  pick.exclude = absl::MakeConstSpan(exclude_buf.data(), excluded);
  if (request.has_caller_locality()) {
    caller = FromProto(request.caller_locality());
    pick.caller = &caller;
  }
  pick.session_token = request.session_token();
  pick.now_nanos = clock_->NowNanos();
  pick.wall_now = clock_->WallNow();
  SessionToken token;
  pick.issued_token = &token;

  std::array<uint32_t, kMaxPickCount> out;
  const uint32_t want = request.count() == 0 ? 1 : request.count();
  const size_t n = table->Pick(pick, absl::MakeSpan(out.data(), want));
  if (n == 0) {
    if (gm != nullptr) {
      gm->picks_unavailable->Increment();
    }
    return {grpc::StatusCode::UNAVAILABLE, table->NoBackendMessage(excluded)};
  }
  for (size_t i = 0; i < n; ++i) {
    const Member& m = table->member(out[i]);
    if (m.load != nullptr) {
      m.load->CountPick();
    }
    v1::PickedBackend* pb = response->add_backends();
    pb->set_address(m.backend.address);
    pb->set_weight(m.weight);
    if (!m.backend.locality.empty()) {
      ToProto(m.backend.locality, pb->mutable_locality());
    }
    for (const auto& [key, value] : m.backend.metadata) {
      (*pb->mutable_metadata())[key] = value;
    }
  }
  response->set_generation(table->generation());
  response->set_panic(table->panic());
  if (token.size > 0) {
    response->set_session_token(std::string(token.view()));
  }
  if (gm != nullptr) {
    gm->picks_ok->Increment();
  }
  return grpc::Status::OK;
}

}  // namespace aside::server
