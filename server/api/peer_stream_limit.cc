#include "server/api/peer_stream_limit.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/auth/report_auth.h"

namespace aside::server {

PeerStreamLimit::PeerStreamLimit(std::string key, std::string what,
                                 uint32_t max, Metrics* metrics)
    : key_(std::move(key)),
      what_(std::move(what)),
      max_(max),
      metrics_(metrics) {}

grpc::Status PeerStreamLimit::Acquire(const std::string& peer,
                                      std::string* counted) {
  counted->clear();
  if (max_ == 0) {
    return grpc::Status::OK;
  }
  std::string host = ReportAuth::PeerHost(peer);
  aside::MutexLock lock(&mu_);
  uint32_t& open = open_[host];
  if (open >= max_) {
    if (metrics_ != nullptr) {
      metrics_->limit_refused.Add({{"limit", key_}}).Increment();
    }
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("limits.", key_, ": ", host, " already has ", open,
                         " ", what_, " open (at most ", max_, ")")};
  }
  ++open;
  *counted = std::move(host);
  return grpc::Status::OK;
}

grpc::Status PeerStreamLimit::Slot::Acquire(PeerStreamLimit* limit,
                                            const std::string& peer) {
  if (limit == nullptr) {
    return grpc::Status::OK;
  }
  grpc::Status s = limit->Acquire(peer, &counted_);
  if (s.ok()) {
    limit_ = limit;
  }
  return s;
}

void PeerStreamLimit::Slot::Release() {
  if (limit_ != nullptr) {
    limit_->Release(counted_);
    limit_ = nullptr;
  }
}

void PeerStreamLimit::Release(const std::string& counted) {
  if (counted.empty()) {
    return;
  }
  aside::MutexLock lock(&mu_);
  auto it = open_.find(counted);
  if (it != open_.end() && --it->second == 0) {
    open_.erase(it);
  }
}

}  // namespace aside::server
