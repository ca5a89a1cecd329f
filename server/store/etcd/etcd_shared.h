// Internal to the etcd client: what an EtcdClient, its watches and its
// keep-alives share. One gRPC channel and set of stubs per endpoint, the
// endpoint calls start at, the auth token, and the unary call with failover
// that etcd_client.h describes. Not for use outside server/etcd.
#ifndef ASIDE_SERVER_STORE_ETCD_ETCD_SHARED_H_
#define ASIDE_SERVER_STORE_ETCD_ETCD_SHARED_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/mvccpb/kv.pb.h"
#include "lib/sync.h"
#include "server/store/etcd/etcd_client.h"

namespace aside::server::etcd {

struct Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Auth::Stub> auth;
};

// Whether a failed call may be sent again to another member.
enum class Retry {
  // Reads, and writes whose repetition is harmless (granting a lease twice
  // leaves one unused lease, which expires; revoking twice is a no-op).
  kAlways,
  // Writes: only when the member surely did not apply it.
  kIfNotApplied,
};

// The pauses of a watch or keep-alive between attempts once every member
// has failed.
inline constexpr absl::Duration kMinStreamBackoff = absl::Milliseconds(50);
inline constexpr absl::Duration kMaxStreamBackoff = absl::Seconds(2);

inline absl::StatusCode ToAbslCode(grpc::StatusCode code) {
  return static_cast<absl::StatusCode>(code);
}

// The endpoint a client with EndpointOrder::kSpread starts at, of `n`:
// a hash (64-bit FNV-1a, the same in every build) of "host:pid", modulo n.
size_t SpreadIndex(std::string_view host, int64_t pid, size_t n);

// Keys as etcd sends them (defined in etcd_client.cc).
KeyValue FromProto(const mvccpb::KeyValue& kv);
std::vector<KeyValue> FromProto(
    const google::protobuf::RepeatedPtrField<mvccpb::KeyValue>& kvs);

// What a client, its watches and its keep-alives share.
struct Shared {
  // A channel and stubs per endpoint of `options`, which EtcdClient::Create
  // has checked; reads the TLS files. Does not connect.
  static absl::StatusOr<std::shared_ptr<Shared>> Create(
      EtcdClientOptions options);

  EtcdClientOptions options;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<Endpoint>> endpoints;

  // Where calls and watches start, as options.endpoint_order says; a
  // watch that had to leave it returns once it answers again. Set by
  // Create; read-only after.
  size_t home = 0;

  Mutex mu;
  // The endpoint that answered last: where calls start (at first, home).
  size_t preferred ABSL_GUARDED_BY(mu) = 0;
  // From Auth.Authenticate, when a username is configured.
  std::string token ABSL_GUARDED_BY(mu);

  size_t Preferred() {
    MutexLock lock(&mu);
    return preferred;
  }
  void Prefer(size_t index) {
    MutexLock lock(&mu);
    preferred = index;
  }
  // Moves calls off `index` if they start there.
  void Avoid(size_t index) {
    MutexLock lock(&mu);
    if (preferred == index) {
      preferred = (index + 1) % endpoints.size();
    }
  }

  // Waits until `endpoint` has a ready connection. A channel in
  // TRANSIENT_FAILURE (the member refused or dropped the connection) gets
  // one immediate reconnection attempt, skipping gRPC's backoff, so a member
  // that came back is used at once; when that attempt fails too, so does
  // this. Also fails at `deadline` or when `stopped()` turns true.
  absl::Status WaitReady(const Endpoint& endpoint, absl::Time deadline,
                         absl::FunctionRef<bool()> stopped);
  absl::Status WaitReady(const Endpoint& endpoint, absl::Time deadline);

  // The auth token, logging in through `endpoint` when there is none yet.
  // Empty when no username is configured.
  absl::StatusOr<std::string> Token(Endpoint& endpoint, absl::Time deadline);

  void ForgetToken(const std::string& stale);

  // Sets what every call carries: the deadline, the token, and the request
  // to be refused by a member without a leader.
  static void Prepare(grpc::ClientContext* context, absl::Time deadline,
                      const std::string& token);

  // Runs one unary call with failover (see etcd_client.h).
  absl::Status Call(
      const char* method, Retry retry,
      absl::FunctionRef<grpc::Status(Endpoint&, grpc::ClientContext*)> fn);
};

}  // namespace aside::server::etcd

#endif  // ASIDE_SERVER_STORE_ETCD_ETCD_SHARED_H_
