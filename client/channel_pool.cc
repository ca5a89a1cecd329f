#include "client/channel_pool.h"

#include <limits>

namespace aside {

ChannelPool::ChannelPool(ChannelPoolOptions options)
    : options_(std::move(options)) {
  if (options_.credentials == nullptr) {
    options_.credentials = grpc::InsecureChannelCredentials();
  }
  if (options_.max_channels == 0) {
    options_.max_channels = 1;
  }
}

std::shared_ptr<grpc::Channel> ChannelPool::Get(absl::string_view address) {
  {
    aside::MutexLock lock(&mu_);
    auto it = channels_.find(address);
    if (it != channels_.end()) {
      return it->second.channel;
    }
  }
  aside::MutexLock lock(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) {
    return it->second.channel;
  }
  while (channels_.size() >= options_.max_channels) {
    EvictOneLocked();
  }
  Entry entry;
  entry.channel = grpc::CreateCustomChannel(
      std::string(address), options_.credentials, options_.args);
  entry.created = next_serial_++;
  std::shared_ptr<grpc::Channel> channel = entry.channel;
  channels_.emplace(address, std::move(entry));
  return channel;
}

void ChannelPool::EvictOneLocked() {
  auto victim = channels_.end();
  bool victim_live = true;
  for (auto it = channels_.begin(); it != channels_.end(); ++it) {
    const bool live = !have_live_ || live_.contains(it->first);
    // Prefer departed backends, then the oldest channel.
    if (victim == channels_.end() || (victim_live && !live) ||
        (live == victim_live && it->second.created < victim->second.created)) {
      victim = it;
      victim_live = live;
    }
  }
  if (victim != channels_.end()) {
    channels_.erase(victim);
  }
}

void ChannelPool::Retain(const absl::flat_hash_set<std::string>& live) {
  aside::MutexLock lock(&mu_);
  live_ = live;
  have_live_ = true;
  // Reads the argument (what live_ now holds), not live_: the analysis
  // cannot see that erase_if runs the lambda with mu_ held.
  absl::erase_if(channels_, [&live](const auto& entry) {
    return !live.contains(entry.first);
  });
}

size_t ChannelPool::size() const {
  aside::MutexLock lock(&mu_);
  return channels_.size();
}

}  // namespace aside
