#include "tests/grpclb/greeter_backends.h"

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpc/examples/helloworld.grpc.pb.h"

namespace aside::testing {

// ---------------------------------------------------------------- CallLog

void CallLog::Record(const std::string& caller, int backend,
                     std::string lb_token) {
  MutexLock lock(&mu_);
  calls_[caller].push_back(backend);
  tokens_[backend].insert(std::move(lb_token));
}

size_t CallLog::Count(const std::string& caller) const {
  MutexLock lock(&mu_);
  auto it = calls_.find(caller);
  return it == calls_.end() ? 0 : it->second.size();
}

std::vector<int> CallLog::CallsSince(const std::string& caller,
                                     size_t from) const {
  MutexLock lock(&mu_);
  auto it = calls_.find(caller);
  if (it == calls_.end() || from >= it->second.size()) {
    return {};
  }
  return std::vector<int>(it->second.begin() + static_cast<ptrdiff_t>(from),
                          it->second.end());
}

std::set<std::string> CallLog::Tokens(int backend) const {
  MutexLock lock(&mu_);
  auto it = tokens_.find(backend);
  return it == tokens_.end() ? std::set<std::string>() : it->second;
}

bool CallLog::WaitUntil(const std::function<bool(const Calls&)>& done,
                        absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      [&] {
        mu_.AssertHeld();
        return done(calls_);
      },
      timeout);
}

bool CallLog::WaitForCount(const std::string& caller, size_t count,
                           absl::Duration timeout) const {
  return WaitUntil(
      [&](const Calls& calls) {
        auto it = calls.find(caller);
        return it != calls.end() && it->second.size() >= count;
      },
      timeout);
}

// -------------------------------------------------------- GreeterBackends

class GreeterBackends::Greeter final : public helloworld::Greeter::Service {
 public:
  Greeter(int index, CallLog* log) : index_(index), log_(log) {}

  grpc::Status SayHello(grpc::ServerContext* context,
                        const helloworld::HelloRequest* request,
                        helloworld::HelloReply* reply) override {
    std::string token;
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find("lb-token"); it != metadata.end()) {
      token.assign(it->second.data(), it->second.size());
    }
    log_->Record(request->name(), index_, std::move(token));
    if (failing_.load()) {
      return {grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("backend-", index_, " is failing")};
    }
    reply->set_message(absl::StrCat("backend-", index_));
    return grpc::Status::OK;
  }

  void SetFailing(bool failing) { failing_.store(failing); }

 private:
  const int index_;
  CallLog* const log_;
  std::atomic<bool> failing_{false};
};

absl::StatusOr<std::unique_ptr<GreeterBackends>> GreeterBackends::Start(
    int count, CallLog* log, const std::function<grpc::Service*(int)>& extra) {
  std::unique_ptr<GreeterBackends> b(new GreeterBackends());
  // Read by every ServerBuilder built after it.
  grpc::EnableDefaultHealthCheckService(true);
  for (int i = 0; i < count; ++i) {
    b->services_.push_back(std::make_unique<Greeter>(i, log));
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(b->services_.back().get());
    if (extra != nullptr) {
      builder.RegisterService(extra(i));
    }
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (server == nullptr || port == 0) {
      return absl::InternalError(absl::StrCat("backend ", i, ": start failed"));
    }
    b->servers_.push_back(std::move(server));
    b->ports_.push_back(port);
  }
  return b;
}

void GreeterBackends::SetFailing(int i, bool failing) {
  services_[i]->SetFailing(failing);
}

void GreeterBackends::SetServing(int i, bool serving) {
  servers_[i]->GetHealthCheckService()->SetServingStatus(serving);
}

GreeterBackends::~GreeterBackends() {
  for (auto& server : servers_) {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
  }
  for (auto& server : servers_) {
    server->Wait();
  }
}

std::string GreeterBackends::address(int i) const {
  return absl::StrCat("127.0.0.1:", ports_[i]);
}

}  // namespace aside::testing
