// One grpc::Channel per backend address, for calling what a stub picked.
//
// Thread-safe: Get() may be called from any thread (a hash lookup under a
// reader lock; the channel is created on first use of an address). The pool
// is bounded: past `max_channels` it first forgets channels of addresses
// that left every table, then the least recently created; a channel that is
// forgotten stays usable by whoever still holds it (gRPC channels are
// reference-counted) and closes when the last holder drops it.
// The Client that owns a pool calls Retain() after every table change with
// the addresses still in some table, so channels of departed backends are
// evicted.
#ifndef ASIDE_CLIENT_CHANNEL_POOL_H_
#define ASIDE_CLIENT_CHANNEL_POOL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "lib/sync.h"

namespace aside {

struct ChannelPoolOptions {
  // Credentials for the backends (null: plaintext).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Extra channel arguments for every channel.
  grpc::ChannelArguments args;
  size_t max_channels = 1024;
};

class ChannelPool {
 public:
  explicit ChannelPool(ChannelPoolOptions options = {});

  // The channel to `address` ("ip:port" as picked), created on first use.
  std::shared_ptr<grpc::Channel> Get(absl::string_view address);

  // Evicts the channels of addresses not in `live`.
  void Retain(const absl::flat_hash_set<std::string>& live);

  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<grpc::Channel> channel;
    uint64_t created = 0;  // creation order, for eviction
  };
  void EvictOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ChannelPoolOptions options_;
  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> channels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> live_ ABSL_GUARDED_BY(mu_);
  bool have_live_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_CHANNEL_POOL_H_
