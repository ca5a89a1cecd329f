// The connections a process's stubs hold to Aside servers, shared: every
// Watch and ReportLoad stream of every aside::Client in the process with
// the same server target and TLS settings rides one gRPC channel (one
// HTTP/2 connection), so that the server's writes to them are coalesced
// by the transport instead of paying a connection each.
//
// A connection carries at most `max_streams` leases (the server caps
// concurrent streams per connection: limits.max_concurrent_streams, 100 by
// default); past that another connection to the same target is opened. A
// connection is closed when its last lease is released. A lease whose
// stream failed marks its connection broken: later leases get a fresh
// connection (as an unshared stub would after its backoff), while the
// streams still on the broken one keep it until they end.
//
// Thread-safe.
#ifndef ASIDE_CLIENT_SHARED_CHANNELS_H_
#define ASIDE_CLIENT_SHARED_CHANNELS_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "lib/sync.h"

namespace aside::client_internal {

class SharedChannels {
 private:
  struct Connection;

 public:
  // One stream's hold on a connection. Movable; releases on destruction.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    const std::shared_ptr<grpc::Channel>& channel() const;
    // The stream on this connection failed: later leases for the same key
    // get a new connection.
    void Failed();

   private:
    friend class SharedChannels;
    Lease(SharedChannels* owner, std::shared_ptr<Connection> connection)
        : owner_(owner), connection_(std::move(connection)) {}
    void Release();
    SharedChannels* owner_ = nullptr;
    std::shared_ptr<Connection> connection_;
  };

  // A lease on `channel` alone, shared with nothing.
  static Lease Unshared(std::shared_ptr<grpc::Channel> channel);

  // The process's instance (never destroyed).
  static SharedChannels& Process();

  // A lease on a connection for `key` (target and credentials) with fewer
  // than `max_streams` leases, `make` opening one when there is none.
  Lease Acquire(const std::string& key, size_t max_streams,
                const std::function<std::shared_ptr<grpc::Channel>()>& make);

  // Open connections for `key` (broken ones still leased included).
  size_t connections(const std::string& key) const;

 private:
  struct Connection {
    std::string key;
    std::shared_ptr<grpc::Channel> channel;
    size_t leases = 0;    // guarded by SharedChannels::mu_
    bool broken = false;  // guarded by SharedChannels::mu_
  };
  void Release(const std::shared_ptr<Connection>& connection);
  void MarkBroken(const std::shared_ptr<Connection>& connection);

  mutable aside::Mutex mu_;
  // Per key: connections still handed out (not broken).
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<Connection>>>
      open_ ABSL_GUARDED_BY(mu_);
  // Per key: all connections with leases, broken ones included.
  absl::flat_hash_map<std::string, size_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::client_internal

#endif  // ASIDE_CLIENT_SHARED_CHANNELS_H_
