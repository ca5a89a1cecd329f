// How many streams of one service a client address may hold open at once
// (limits.max_watch_streams_per_peer, limits.max_balancer_streams_per_peer):
// past the cap a new stream is refused with RESOURCE_EXHAUSTED naming the
// key, and counted in aside_limit_refused_total{limit}. Addresses are
// ReportAuth::PeerHost of the gRPC peer, so one client's connections count
// together.
//
// A stream holds its place under the limit in a Slot, which gives it back
// when the stream ends (Release) or is destroyed.
//
// Thread-safe; a Slot belongs to one stream (its service's limit outlives
// it).
#ifndef ASIDE_SERVER_API_PEER_STREAM_LIMIT_H_
#define ASIDE_SERVER_API_PEER_STREAM_LIMIT_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "grpcpp/support/status.h"
#include "lib/sync.h"
#include "server/base/metrics.h"

namespace aside::server {

class PeerStreamLimit {
 public:
  // `key`: the limit's config key without "limits."; `max` 0: no limit.
  // `metrics` may be null.
  PeerStreamLimit(std::string key, std::string what, uint32_t max,
                  Metrics* metrics);

  // One stream's place under a limit.
  class Slot {
   public:
    Slot() = default;
    ~Slot() { Release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

    // Counts a stream from `peer` under `limit` (null: no limit), or
    // refuses it. Once per slot.
    grpc::Status Acquire(PeerStreamLimit* limit, const std::string& peer);
    // Gives the place back (idempotent; the destructor does too).
    void Release();

   private:
    PeerStreamLimit* limit_ = nullptr;
    std::string counted_;  // the address counted; empty: nothing counted
  };

 private:
  // Counts a stream from `peer`, or refuses it. On OK, `*counted` is what
  // to pass to Release when the stream ends (empty when nothing counted).
  grpc::Status Acquire(const std::string& peer, std::string* counted);
  void Release(const std::string& counted);

  const std::string key_;
  const std::string what_;
  const uint32_t max_;
  Metrics* const metrics_;
  aside::Mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_PEER_STREAM_LIMIT_H_
