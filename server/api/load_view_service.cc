#include "server/api/load_view_service.h"

#include "absl/strings/str_cat.h"
#include "lib/thread_name.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"
#include "server/base/stream_reactor.h"

namespace aside::server {

// One LoadView stream: one write in flight, the newest export next.
class LoadViewService::Stream final
    : public StreamReactor<grpc::ServerWriteReactor<v1::LoadViewUpdate>> {
 public:
  Stream(LoadViewService* service, grpc::CallbackServerContext* context,
         std::string subscriber)
      : StreamReactor(context),
        service_(service),
        subscriber_(std::move(subscriber)) {}

  // Offers `exported` (called with the service's mu_ held).
  void Offer(std::shared_ptr<const ExportedLoads> exported) {
    aside::MutexLock lock(&mu_);
    pending_ = std::move(exported);
    WriteNextLocked();
  }

  void OnWriteDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    if (WriteDoneLocked(ok)) {
      WriteNextLocked();
    }
  }

  void OnDone() override {
    const size_t left = service_->streams_.Remove(this);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->subscribers.Set(static_cast<double>(left));
    }
    Log(LogLevel::kInfo, "fleet.load_view_subscriber_left",
        {{"subscriber", subscriber_}});
    delete this;
  }

 private:
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished() || pending_ == nullptr) {
      return;
    }
    update_ = DiffExports(last_sent_.get(), *pending_);
    if (last_sent_ == nullptr) {
      update_.set_replica_id(service_->replica_id_);
    }
    last_sent_ = std::move(pending_);
    pending_ = nullptr;
    if (LoadViewMetrics* m = service_->metrics_; m != nullptr) {
      m->bytes_sent.Increment(static_cast<double>(update_.ByteSizeLong()));
      m->updates_sent.Increment();
      m->entries_sent.Increment(update_.loads_size());
    }
    writing_ = true;
    StartWrite(&update_);
  }

  LoadViewService* const service_;
  const std::string subscriber_;
  v1::LoadViewUpdate update_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ExportedLoads> last_sent_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ExportedLoads> pending_ ABSL_GUARDED_BY(mu_);
};

namespace {

// A stream refused at once.
class Refused final : public grpc::ServerWriteReactor<v1::LoadViewUpdate> {
 public:
  explicit Refused(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

LoadViewService::LoadViewService(std::string replica_id, LoadAggregator* loads,
                                 const ReportAuth* auth,
                                 absl::Duration interval,
                                 LoadViewMetrics* metrics, EventLoop* loop)
    : replica_id_(std::move(replica_id)),
      loads_(loads),
      auth_(auth),
      interval_(interval),
      metrics_(metrics),
      ticker_(loop, "aside-loadview", interval, [this] { Tick(); }) {}

LoadViewService::~LoadViewService() {
  Shutdown();
  ticker_.Stop();
}

grpc::ServerWriteReactor<v1::LoadViewUpdate>* LoadViewService::LoadView(
    grpc::CallbackServerContext* context, const v1::LoadViewRequest* request) {
  if (auth_ != nullptr) {
    ReportAuth::Reporter reporter;
    if (grpc::Status s = auth_->Authorize(*context, &reporter); !s.ok()) {
      return new Refused(s);
    }
  }
  if (request->replica_id().empty() || request->replica_id().size() > 256) {
    return new Refused(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "replica_id: required, at most 256 bytes"));
  }
  if (request->replica_id() == replica_id_) {
    return new Refused(
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     absl::StrCat("replica_id: '", replica_id_,
                                  "' is this replica; it does not subscribe "
                                  "to itself")));
  }
  // Under mu_, so that the first export offered here is not older than one
  // the ticker offers.
  aside::MutexLock lock(&mu_);
  if (streams_.shutting_down()) {
    return new Refused(ShuttingDownStatus());
  }
  auto* stream = new Stream(this, context, request->replica_id());
  if (!streams_.Add(stream)) {
    stream->Shutdown();  // shutdown began meanwhile; OnDone deletes it
    return stream;
  }
  if (metrics_ != nullptr) {
    metrics_->subscribers.Set(static_cast<double>(streams_.size()));
  }
  Log(LogLevel::kInfo, "fleet.load_view_subscriber",
      {{"subscriber", request->replica_id()},
       {"peer", ClientPeer(context->peer())}});
  stream->Offer(ExportLocked());
  return stream;
}

std::shared_ptr<const ExportedLoads> LoadViewService::ExportLocked() {
  LocalLoads local = loads_->ExportLocal();
  if (orca_ != nullptr) {
    local.orca = orca_->ExportOwn();
  }
  return ids_.Next(std::move(local));
}

void LoadViewService::Shutdown() { streams_.Shutdown(); }

size_t LoadViewService::streams() const { return streams_.size(); }

void LoadViewService::Tick() {
  aside::MutexLock lock(&mu_);
  if (streams_.size() == 0 || streams_.shutting_down()) {
    return;
  }
  std::shared_ptr<const ExportedLoads> exported = ExportLocked();
  streams_.ForEach([&exported](Stream* s) { s->Offer(exported); });
}

}  // namespace aside::server
