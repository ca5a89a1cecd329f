#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "lib/status_macros.h"
#include "server/admin_convert.h"
#include "server/log.h"

namespace aside::server {

AsideServer::AsideServer(ServerConfig config, const Clock* clock)
    : config_(std::move(config)), clock_(clock) {}

AsideServer::~AsideServer() {
  Shutdown(absl::ZeroDuration());
  // The health observer schedules rebuilds from the prober thread, and the
  // registry outlives the scheduler (groups hold handles into it): detach
  // the observer, which waits for a call in progress, before members go.
  if (health_ != nullptr && health_observer_ != 0) {
    health_->RemoveObserver(health_observer_);
  }
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot open ", what));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AsideServer>> AsideServer::Create(
    ServerConfig config, const Clock* clock) {
  // gRPC's locks are absl::Mutex, and Debian builds abseil without NDEBUG,
  // which leaves its lock-order checking on: every acquisition records
  // itself in a process-wide graph under a global lock, a cost paid per
  // write on every Watch stream. Aside's own locks (aside::Mutex) are not
  // absl::Mutex, so nothing of ours loses a check; off, as in a release
  // build of abseil.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto server =
      std::unique_ptr<AsideServer>(new AsideServer(std::move(config), clock));
  const ServerConfig& cfg = server->config_;
  ASIDE_ASSIGN_OR_RETURN(server->store_,
                         StateStore::Open(cfg.state_dir, cfg.max_state_bytes));
  ASIDE_ASSIGN_OR_RETURN(StateStore::Contents contents, server->store_->Load());
  ASIDE_ASSIGN_OR_RETURN(
      server->auth_,
      AdminAuth::Create(cfg.admin_token_file, cfg.admin_identities));

  // Generations start above both the persisted floor and the start time in
  // microseconds, so they keep increasing across restarts.
  const uint64_t base =
      std::max(contents.generation_floor,
               static_cast<uint64_t>(absl::ToUnixMicros(clock->WallNow())));
  StateStore* store = server->store_.get();
  ASIDE_ASSIGN_OR_RETURN(
      server->groups_,
      GroupRegistry::Create(&server->metrics_, base, cfg.max_groups,
                            [store](uint64_t floor) {
                              return store->RaiseGenerationFloor(floor);
                            }));

  // The sticky session key: shared through a file, or kept in the store.
  if (!cfg.session_key_file.empty()) {
    ASIDE_ASSIGN_OR_RETURN(std::string key,
                           ReadFile(cfg.session_key_file, "session key file"));
    if (key.size() < 16) {
      return absl::FailedPreconditionError(absl::StrCat(
          cfg.session_key_file, ": session key shorter than 16 bytes"));
    }
    server->groups_->set_session_key(std::move(key));
  } else if (contents.session_key.size() >= 16) {
    server->groups_->set_session_key(contents.session_key);
  } else {
    ASIDE_RETURN_IF_ERROR(
        store->SetSessionKey(*server->groups_->session_key()));
  }

  server->scheduler_ = std::make_unique<RebuildScheduler>();
  ASIDE_ASSIGN_OR_RETURN(
      server->health_,
      HealthRegistry::Create(
          {.max_concurrent_probes = cfg.max_concurrent_probes, .clock = clock},
          *server->metrics_.registry()));
  DnsDiscoveryOptions dns_options;
  dns_options.servers = cfg.dns_servers;
  dns_options.clock = clock;
  ASIDE_ASSIGN_OR_RETURN(server->dns_,
                         DnsDiscovery::Create(std::move(dns_options),
                                              *server->metrics_.registry()));
  GroupRegistry* groups = server->groups_.get();
  server->loads_ = std::make_unique<LoadAggregator>(
      clock, cfg.load_window,
      [groups](const std::string& group, const std::string& address) {
        GroupPtr g = groups->Find(group);
        return g != nullptr && g->table()->Find(address) >= 0;
      });
  server->groups_->set_inputs({.dns = server->dns_.get(),
                               .scheduler = server->scheduler_.get(),
                               .health = server->health_.get(),
                               .loads = server->loads_.get(),
                               .clock = clock});
  // A flip republishes every group that holds the target, once per merge
  // window however many flips arrive.
  {
    GroupRegistry* groups = server->groups_.get();
    RebuildScheduler* scheduler = server->scheduler_.get();
    const absl::Duration window = cfg.health_merge_window;
    server->health_observer_ = server->health_->AddObserver(
        [groups, scheduler, window](const HealthTransition& t) {
          Log(t.to == HealthState::kUnhealthy ? LogLevel::kWarn
                                              : LogLevel::kInfo,
              "health.transition",
              {{"address", t.address},
               {"check", std::string(HealthCheckKindName(t.spec.kind))},
               {"from", std::string(HealthStateName(t.from))},
               {"to", std::string(HealthStateName(t.to))},
               {"reason", t.result.reason}});
          for (const std::string& name : t.groups) {
            if (GroupPtr g = groups->Find(name)) {
              scheduler->Schedule(g, window);
            }
          }
        });
  }

  for (const GroupSpec& spec : cfg.groups) {
    absl::Status s = server->groups_->Add(spec);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("group '", spec.name, "': ", s.message()));
    }
  }
  for (const v1::Group& definition : contents.groups) {
    if (server->groups_->Find(definition.name()) != nullptr) {
      Log(LogLevel::kWarn, "state.group_shadowed",
          {{"group", definition.name()},
           {"reason", "the config file declares a group of the same name"}});
      continue;
    }
    absl::StatusOr<GroupSpec> spec = GroupSpecFromProto(
        absl::StrCat("stored group '", definition.name(), "'"), definition);
    if (!spec.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state database ", store->path(), ": ", spec.status().message()));
    }
    if (absl::Status s = server->groups_->Add(*std::move(spec)); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("state database ", store->path(), ": group '",
                       definition.name(), "': ", s.message()));
    }
  }
  Log(LogLevel::kInfo, "state.loaded",
      {{"path", store->path()},
       {"stored_groups", absl::StrCat(contents.groups.size())}});

  server->loads_->set_listener([groups](const LoadAggregator::Accepted& a) {
    if (GroupPtr g = groups->Find(a.group)) {
      g->OnLoadReport(a.address, a.new_requests, a.new_failures,
                      a.consecutive_failures, a.mean_latency,
                      a.mean_first_byte_latency);
    }
  });
  server->watch_hub_ = std::make_unique<WatchHub>(
      server->groups_.get(), &server->metrics_, cfg.watch_stall_timeout);
  server->lb_service_ = std::make_unique<LoadBalancerService>(
      server->groups_.get(), &server->metrics_, clock, server->watch_hub_.get(),
      server->loads_.get());
  server->admin_service_ = std::make_unique<AdminService>(
      server->groups_.get(), store, server->auth_.get(), &server->metrics_,
      server->loads_.get(), server->health_.get());
  server->grpclb_service_ = std::make_unique<GrpclbService>(
      server->groups_.get(), server->loads_.get(), &server->metrics_,
      cfg.grpclb_client_stats_report_interval, cfg.grpclb_max_servers);
  server->admin_service_->set_grpclb_streams(
      [grpclb = server->grpclb_service_.get()](const std::string& group) {
        return grpclb->streams_for(group);
      });
  // xDS for stock gRPC clients; LRS reports arrive as often as grpclb's.
  server->ads_service_ = std::make_unique<xds::AdsService>(
      server->groups_.get(), &server->metrics_, server->loads_.get());
  server->lrs_service_ = std::make_unique<xds::LrsService>(
      server->groups_.get(), server->loads_.get(), &server->metrics_,
      cfg.grpclb_client_stats_report_interval);
  server->health_service_ =
      std::make_unique<HealthService>(server->groups_.get());
  if (!cfg.health_listen.empty()) {
    server->plain_health_service_ =
        std::make_unique<HealthService>(server->groups_.get());
  }
  return server;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
AsideServer::Credentials() const {
  if (config_.tls_cert_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASIDE_ASSIGN_OR_RETURN(pair.cert_chain,
                         ReadFile(config_.tls_cert_file, "TLS certificate"));
  ASIDE_ASSIGN_OR_RETURN(pair.private_key,
                         ReadFile(config_.tls_key_file, "TLS private key"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!config_.tls_client_ca_file.empty()) {
    ASIDE_ASSIGN_OR_RETURN(
        options.pem_root_certs,
        ReadFile(config_.tls_client_ca_file, "TLS client CA bundle"));
    options.client_certificate_request =
        config_.tls_require_client_cert
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::Status AsideServer::Start() {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ASIDE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                         Credentials());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.listen, credentials, &grpc_port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(config_.max_receive_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config_.max_concurrent_streams));
  builder.RegisterService(lb_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(grpclb_service_.get());
  builder.RegisterService(ads_service_.get());
  builder.RegisterService(lrs_service_.get());
  builder.RegisterService(health_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", config_.listen));
  }
  Log(LogLevel::kInfo, "grpc.listening",
      {{"address", config_.listen},
       {"port", absl::StrCat(grpc_port_)},
       {"tls", config_.tls_cert_file.empty() ? "off" : "on"}});
  auto fail = [&](absl::Status s) {
    Shutdown(absl::ZeroDuration());
    Wait();
    return s;
  };
  if (plain_health_service_ != nullptr) {
    grpc::ServerBuilder health_builder;
    health_builder.AddListeningPort(config_.health_listen,
                                    grpc::InsecureServerCredentials(),
                                    &health_port_);
    health_builder.SetMaxReceiveMessageSize(4096);
    health_builder.RegisterService(plain_health_service_.get());
    health_server_ = health_builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0) {
      health_server_.reset();
      return fail(absl::UnavailableError(absl::StrCat(
          "cannot listen for gRPC health on ", config_.health_listen)));
    }
    Log(LogLevel::kInfo, "health.listening",
        {{"address", config_.health_listen},
         {"port", absl::StrCat(health_port_)}});
  }
  if (!config_.metrics.empty()) {
    absl::StatusOr<int> port = metrics_.Serve(config_.metrics);
    if (!port.ok()) {
      return fail(port.status());
    }
    metrics_port_ = *port;
    Log(LogLevel::kInfo, "metrics.listening",
        {{"address", config_.metrics}, {"port", absl::StrCat(metrics_port_)}});
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
  if (plain_health_service_ != nullptr) {
    plain_health_service_->Shutdown();
  }
  if (watch_hub_ != nullptr) {
    watch_hub_->Shutdown();
  }
  if (grpclb_service_ != nullptr) {
    grpclb_service_->Shutdown();
  }
  if (ads_service_ != nullptr) {
    ads_service_->Shutdown();
  }
  if (lrs_service_ != nullptr) {
    lrs_service_->Shutdown();
  }
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(grace));
  if (server_ != nullptr) {
    server_->Shutdown(deadline);
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(deadline);
  }
  metrics_.StopServing();
}

void AsideServer::Wait() {
  if (server_ != nullptr) {
    server_->Wait();
  }
  if (health_server_ != nullptr) {
    health_server_->Wait();
  }
}

}  // namespace aside::server
