#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "lib/status_macros.h"
#include "server/log.h"

namespace aside::server {

AsideServer::AsideServer(ServerConfig config, const Clock* clock)
    : config_(std::move(config)), clock_(clock) {}

AsideServer::~AsideServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<AsideServer>> AsideServer::Create(
    ServerConfig config, const Clock* clock) {
  auto server =
      std::unique_ptr<AsideServer>(new AsideServer(std::move(config), clock));
  // Generations start above the start time in microseconds so that they
  // keep increasing across restarts.
  const uint64_t base =
      static_cast<uint64_t>(absl::ToUnixMicros(clock->WallNow()));
  server->groups_ = std::make_unique<GroupRegistry>(
      &server->metrics_, base, server->config_.max_groups);
  for (const GroupSpec& spec : server->config_.groups) {
    absl::Status s = server->groups_->Add(spec);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("group '", spec.name,
                                                 "': ", s.message()));
    }
  }
  server->lb_service_ = std::make_unique<LoadBalancerService>(
      server->groups_.get(), &server->metrics_, clock);
  server->admin_service_ = std::make_unique<v1::Admin::CallbackService>();
  server->health_service_ =
      std::make_unique<HealthService>(server->groups_.get());
  return server;
}

absl::Status AsideServer::Start() {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.listen, grpc::InsecureServerCredentials(),
                           &grpc_port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(config_.max_receive_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config_.max_concurrent_streams));
  builder.RegisterService(lb_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(health_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", config_.listen));
  }
  Log(LogLevel::kInfo, "grpc.listening",
      {{"address", config_.listen}, {"port", absl::StrCat(grpc_port_)}});
  if (!config_.metrics.empty()) {
    absl::StatusOr<int> port = metrics_.Serve(config_.metrics);
    if (!port.ok()) {
      server_->Shutdown();
      server_->Wait();
      server_.reset();
      return port.status();
    }
    metrics_port_ = *port;
    Log(LogLevel::kInfo, "metrics.listening",
        {{"address", config_.metrics},
         {"port", absl::StrCat(metrics_port_)}});
  }
  return absl::OkStatus();
}

void AsideServer::Shutdown(absl::Duration grace) {
  if (shut_down_) {
    return;
  }
  shut_down_ = true;
  if (health_service_ != nullptr) {
    health_service_->Shutdown();
  }
  if (server_ != nullptr) {
    const auto deadline =
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(absl::ToInt64Milliseconds(grace));
    server_->Shutdown(deadline);
  }
  metrics_.StopServing();
}

void AsideServer::Wait() {
  if (server_ != nullptr) {
    server_->Wait();
  }
}

}  // namespace aside::server
