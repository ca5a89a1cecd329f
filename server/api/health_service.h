// grpc.health.v1.Health, served from code generated from Debian's
// grpc/health/v1/health.proto so that its descriptor is in the generated
// pool and reflection (grpcurl) can describe and call it.
//
// Service names: "" (the server), "aside.v1.LoadBalancer", "aside.v1.Admin"
// and "grpc.lb.v1.LoadBalancer" are SERVING while the server runs and
// NOT_SERVING once it shuts down; a group name is SERVING while the group
// has a backend that can be picked. Anything else is NOT_FOUND.
//
// Threads: gRPC's callback threads call Check and run each Watch stream's
// reactor (one write in flight per stream); Notify() and Shutdown() may be
// called from any thread (group changes, the shutdown path). Check reads
// published snapshots without a lock. Locks: the set of Watch streams
// (server/base/stream_set.h) is taken before a stream's own, never after.
#ifndef ASIDE_SERVER_API_HEALTH_SERVICE_H_
#define ASIDE_SERVER_API_HEALTH_SERVICE_H_

#include <atomic>
#include <optional>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/base/stream_set.h"
#include "server/groups/group_registry.h"

namespace aside::server {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  explicit HealthService(GroupRegistry* groups);
  ~HealthService() override;

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;

  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  // Everything turns NOT_SERVING and Watch streams end (on shutdown).
  void Shutdown();
  // Wakes Watch streams so they re-read the status (called when groups
  // change).
  void Notify();

  // The status of `service`, or nullopt when it is unknown.
  std::optional<grpc::health::v1::HealthCheckResponse::ServingStatus> Status(
      const std::string& service) const;

 private:
  class Watcher;

  GroupRegistry* const groups_;
  std::atomic<bool> shutting_down_{false};
  StreamSet<Watcher> streams_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_HEALTH_SERVICE_H_
