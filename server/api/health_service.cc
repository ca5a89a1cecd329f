#include "server/api/health_service.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "lib/backend.h"
#include "lib/sync.h"
#include "server/base/status_util.h"
#include "server/base/stream_reactor.h"

namespace aside::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream: writes the current status, then every change. At most
// one write is in flight; changes that happen meanwhile collapse into the
// next write of the then-current status.
class HealthService::Watcher final
    : public StreamReactor<grpc::ServerWriteReactor<HealthCheckResponse>> {
 public:
  Watcher(HealthService* service, grpc::CallbackServerContext* context,
          std::string name)
      : StreamReactor(context), service_(service), name_(std::move(name)) {}

  // Once shutdown has begun the set refuses it, and its first status
  // (NOT_SERVING) ends it.
  void Start() {
    (void)service_->streams_.Add(this);
    Changed();
  }

  // Hides StreamReactor::Shutdown: the service is shutting down (its
  // status turned NOT_SERVING): write that, then end.
  void Shutdown() { Changed(); }

  // Re-reads the status and writes it if it differs from the last one sent.
  void Changed() {
    aside::MutexLock lock(&mu_);
    if (finished()) {
      return;
    }
    if (writing_) {
      dirty_ = true;
      return;
    }
    WriteIfChangedLocked();
  }

  void OnWriteDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    if (!WriteDoneLocked(ok) || finished()) {
      return;  // failed, or cancelled while it was in flight
    }
    // At shutdown too: a Shutdown() that came while this write was in
    // flight only marked the stream dirty, and NOT_SERVING must still be
    // written before the stream ends (WriteIfChangedLocked ends it once
    // the status sent is the last).
    if (dirty_ || service_->shutting_down_.load()) {
      dirty_ = false;
      WriteIfChangedLocked();
    }
  }

  void OnDone() override {
    service_->streams_.Remove(this);
    delete this;
  }

 private:
  void WriteIfChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto status =
        service_->Status(name_).value_or(HealthCheckResponse::SERVICE_UNKNOWN);
    if (sent_any_ && status == last_) {
      if (service_->shutting_down_.load()) {
        FinishLocked(ShuttingDownStatus());
      }
      return;
    }
    sent_any_ = true;
    last_ = status;
    response_.set_status(status);
    writing_ = true;
    StartWrite(&response_);
  }

  HealthService* const service_;
  const std::string name_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);
  HealthCheckResponse::ServingStatus last_ ABSL_GUARDED_BY(mu_) =
      HealthCheckResponse::UNKNOWN;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::HealthService(GroupRegistry* groups) : groups_(groups) {}

HealthService::~HealthService() = default;

std::optional<HealthCheckResponse::ServingStatus> HealthService::Status(
    const std::string& service) const {
  const bool serving = !shutting_down_.load();
  if (service.empty() || service == "aside.v1.LoadBalancer" ||
      service == "aside.v1.Admin" || service == "grpc.lb.v1.LoadBalancer") {
    return serving ? HealthCheckResponse::SERVING
                   : HealthCheckResponse::NOT_SERVING;
  }
  GroupPtr group = groups_->Find(service);
  if (group == nullptr) {
    return std::nullopt;
  }
  const bool ok = serving && group->table()->eligible_count() > 0;
  return ok ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request,
    HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto status = Status(request->service());
  if (!status) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("unknown service '", EchoName(request->service()),
                     "' (use \"\", a service name or a group "
                     "name)")));
  } else {
    response->set_status(*status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  auto* watcher = new Watcher(this, context, request->service());
  watcher->Start();
  return watcher;
}

void HealthService::Notify() {
  streams_.ForEach([](Watcher* w) { w->Changed(); });
}

void HealthService::Shutdown() {
  shutting_down_.store(true);
  streams_.Shutdown();
}

}  // namespace aside::server
