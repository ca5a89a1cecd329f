// The assembled server: groups, the gRPC services (LoadBalancer, Admin,
// health, reflection) on one port, and Prometheus metrics on another.
#ifndef ASIDE_SERVER_SERVER_H_
#define ASIDE_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "aside/v1/admin.grpc.pb.h"
#include "lib/clock.h"
#include "server/config.h"
#include "server/group_registry.h"
#include "server/health_service.h"
#include "server/lookaside_service.h"
#include "server/metrics.h"

namespace aside::server {

class AsideServer {
 public:
  // Builds the groups of `config` (nothing is bound yet).
  static absl::StatusOr<std::unique_ptr<AsideServer>> Create(
      ServerConfig config, const Clock* clock = &SystemClock::Get());
  ~AsideServer();

  // Binds the gRPC and metrics ports and starts serving.
  absl::Status Start();
  // Stops accepting, lets in-flight calls finish for up to `grace`, ends
  // streams, stops the metrics endpoint. Idempotent.
  void Shutdown(absl::Duration grace);
  // Blocks until the gRPC server has shut down.
  void Wait();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  GroupRegistry& groups() { return *groups_; }
  Metrics& metrics() { return metrics_; }
  const ServerConfig& config() const { return config_; }

 private:
  AsideServer(ServerConfig config, const Clock* clock);

  ServerConfig config_;
  const Clock* clock_;
  Metrics metrics_;
  std::unique_ptr<GroupRegistry> groups_;
  std::unique_ptr<LoadBalancerService> lb_service_;
  std::unique_ptr<v1::Admin::CallbackService> admin_service_;
  std::unique_ptr<HealthService> health_service_;
  std::unique_ptr<grpc::Server> server_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_SERVER_H_
