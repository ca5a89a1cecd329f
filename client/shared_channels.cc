#include "client/shared_channels.h"

#include <algorithm>

namespace aside::client_internal {

SharedChannels::Lease::Lease(Lease&& other) noexcept
    : owner_(other.owner_), connection_(std::move(other.connection_)) {
  other.owner_ = nullptr;
}

SharedChannels::Lease& SharedChannels::Lease::operator=(
    Lease&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = other.owner_;
    connection_ = std::move(other.connection_);
    other.owner_ = nullptr;
  }
  return *this;
}

SharedChannels::Lease::~Lease() { Release(); }

void SharedChannels::Lease::Release() {
  if (owner_ != nullptr && connection_ != nullptr) {
    owner_->Release(connection_);
  }
  owner_ = nullptr;
  connection_.reset();
}

const std::shared_ptr<grpc::Channel>& SharedChannels::Lease::channel() const {
  return connection_->channel;
}

void SharedChannels::Lease::Failed() {
  if (owner_ != nullptr && connection_ != nullptr) {
    owner_->MarkBroken(connection_);
  }
}

SharedChannels::Lease SharedChannels::Unshared(
    std::shared_ptr<grpc::Channel> channel) {
  auto connection = std::make_shared<Connection>();
  connection->channel = std::move(channel);
  return Lease(nullptr, std::move(connection));
}

SharedChannels& SharedChannels::Process() {
  static SharedChannels* shared = new SharedChannels();  // never destroyed
  return *shared;
}

SharedChannels::Lease SharedChannels::Acquire(
    const std::string& key, size_t max_streams,
    const std::function<std::shared_ptr<grpc::Channel>()>& make) {
  max_streams = std::max<size_t>(max_streams, 1);
  {
    aside::MutexLock lock(&mu_);
    for (const std::shared_ptr<Connection>& c : open_[key]) {
      if (c->leases < max_streams) {
        ++c->leases;
        return Lease(this, c);
      }
    }
  }
  // Channel creation outside the lock (it does not connect yet).
  auto connection = std::make_shared<Connection>();
  connection->key = key;
  connection->channel = make();
  aside::MutexLock lock(&mu_);
  connection->leases = 1;
  open_[key].push_back(connection);
  ++counts_[key];
  return Lease(this, std::move(connection));
}

void SharedChannels::Release(const std::shared_ptr<Connection>& connection) {
  std::shared_ptr<grpc::Channel> last;  // dropped outside the lock
  {
    aside::MutexLock lock(&mu_);
    if (--connection->leases > 0) {
      return;
    }
    last = std::move(connection->channel);
    if (!connection->broken) {
      auto it = open_.find(connection->key);
      if (it != open_.end()) {
        std::erase(it->second, connection);
        if (it->second.empty()) {
          open_.erase(it);
        }
      }
    }
    auto count = counts_.find(connection->key);
    if (count != counts_.end() && --count->second == 0) {
      counts_.erase(count);
    }
  }
}

void SharedChannels::MarkBroken(const std::shared_ptr<Connection>& connection) {
  aside::MutexLock lock(&mu_);
  if (connection->broken) {
    return;
  }
  connection->broken = true;
  auto it = open_.find(connection->key);
  if (it != open_.end()) {
    std::erase(it->second, connection);
    if (it->second.empty()) {
      open_.erase(it);
    }
  }
}

size_t SharedChannels::connections(const std::string& key) const {
  aside::MutexLock lock(&mu_);
  auto it = counts_.find(key);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace aside::client_internal
