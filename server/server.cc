#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "lib/address.h"
#include "lib/ip_network.h"
#include "lib/status_macros.h"
#include "proto/convert.h"
#include "server/api/parse_error_interceptor.h"
#include "server/base/log.h"
#include "server/base/read_file.h"
#include "server/config_check.h"
#include "server/net/connection_gate.h"
#include "server/net/http2_limits.h"
#include "server/schema/group_spec_proto.h"
#include "server/store/etcd_store.h"
#include "server/store/session_key.h"
#include "server/store/sqlite_store.h"

namespace aside::server {

AsideServer::AsideServer(ServerConfig config, const Clock* clock)
    : config_(std::move(config)), clock_(clock) {}

AsideServer::~AsideServer() {
  Shutdown(absl::ZeroDuration());
  StopFleet();
  // No store change is applied once teardown starts.
  if (sync_ != nullptr) {
    sync_->StopFollowing();
  }
  // The health observers schedule rebuilds and record events from the
  // prober thread, and the registry outlives the scheduler (groups hold
  // handles into it): detach them, which waits for a call in progress,
  // before members go.
  health_follower_.reset();
  health_events_.reset();
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const ServerConfig& cfg,
                                                 Metrics* metrics) {
  if (cfg.store.type == "etcd") {
    ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store,
                           EtcdStore::Create(cfg.store, metrics));
    return store;
  }
  ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store,
                         SqliteStore::Open(cfg.state_dir, cfg.max_state_bytes));
  metrics->store_up.Add({{"type", "sqlite"}}).Set(1);
  return store;
}

namespace {

// The soft open-file limit now (main raised it to the hard limit).
uint64_t OpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY) {
    return uint64_t{1} << 20;
  }
  return limit.rlim_cur;
}

// The health port takes probes: a few connections, a few bytes each.
constexpr uint32_t kHealthMaxConnections = 256;
constexpr uint32_t kHealthMaxMessageBytes = 4096;

// The relay threads of the gRPC port: half the cores, 1 to 4.
int RelayThreads() {
  return static_cast<int>(
      std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1, 4));
}

// 16 random hex digits, new at every start.
std::string NewReplicaId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

// The config file's groups against the stored groups the server starts
// with, as a reload checks them (config_reloader.cc): a file group whose
// name or alias would take a stored group's clients through an alias fails
// the start, naming file:line and the stored group. (A stored group of a
// file group's own name is shadowed by it, store_sync.h.) Costs one
// conversion per stored group and a check per (file, stored) pair, once.
absl::Status CheckFileAgainstStored(const ServerConfig& cfg,
                                    const StoreSnapshot& contents,
                                    const std::string& location) {
  std::vector<GroupSpec> stored;
  for (const StoredGroup& g : contents.groups) {
    absl::StatusOr<GroupSpec> spec = GroupSpecFromProto("", g.definition);
    if (spec.ok()) {
      stored.push_back(*std::move(spec));
    }
  }
  std::vector<std::string> errors;
  for (size_t i = 0; i < cfg.groups.size() && !stored.empty(); ++i) {
    const GroupSpec& spec = cfg.groups[i];
    for (const GroupSpec& other : stored) {
      if (other.name == spec.name) {
        continue;
      }
      // Symmetric: every pair that overlaps is found from either side.
      if (absl::Status s = CheckGroupNamespace(spec, other); !s.ok()) {
        const int line = i < cfg.group_lines.size() ? cfg.group_lines[i] : 0;
        errors.push_back(absl::StrCat(spec.file, ":", line, ": groups[", i,
                                      "].", s.message(), " in ", location));
        break;
      }
    }
  }
  if (errors.empty()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the config file collides with stored groups (delete or rename them "
      "through the Admin API, or rename the file's): ",
      absl::StrJoin(errors, "; ")));
}

}  // namespace

namespace {

// load_reports.trusted_networks, checked when the config was read.
std::vector<IpNetwork> TrustedNetworks(const ServerConfig& cfg) {
  std::vector<IpNetwork> out;
  for (const std::string& text : cfg.load_reports_trusted_networks) {
    if (absl::StatusOr<IpNetwork> n = ParseNetwork(text); n.ok()) {
      out.push_back(*std::move(n));
    }
  }
  return out;
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
  for (const std::string& warning : SecretFilesReadableByOthers(cfg)) {
    Log(LogLevel::kWarn, "config.secret_readable", {{"message", warning}});
  }
  if (cfg.status_page_enabled) {
    server->events_ = std::make_unique<EventLog>(clock);
  }
  ASIDE_ASSIGN_OR_RETURN(server->store_, OpenStore(cfg, &server->metrics_));
  Store* store = server->store_.get();
  // A store the server can start without (etcd) is retried in the
  // background: config-file groups serve meanwhile.
  absl::StatusOr<StoreSnapshot> loaded = store->Load();
  if (!loaded.ok() && !store->starts_unavailable()) {
    return loaded.status();
  }
  if (!loaded.ok()) {
    Log(LogLevel::kWarn, "store.unavailable",
        {{"store", store->location()},
         {"error", std::string(loaded.status().message())},
         {"action", "serving config-file groups; retrying"}});
  }
  const StoreSnapshot contents =
      loaded.ok() ? *std::move(loaded) : StoreSnapshot{};
  ASIDE_RETURN_IF_ERROR(
      CheckFileAgainstStored(cfg, contents, store->location()));
  ASIDE_ASSIGN_OR_RETURN(
      server->auth_,
      AdminAuth::Create(cfg.admin_token_file, cfg.admin_identities));

  // Generations start above both the persisted floor and the start time in
  // microseconds, so they keep increasing across restarts.
  const uint64_t base =
      std::max(contents.generation_floor,
               static_cast<uint64_t>(absl::ToUnixMicros(clock->WallNow())));
  ASIDE_ASSIGN_OR_RETURN(
      server->groups_,
      GroupRegistry::Create(&server->metrics_, base, cfg.max_groups,
                            [store](uint64_t floor) {
                              return store->RaiseGenerationFloor(floor);
                            }));

  ASIDE_ASSIGN_OR_RETURN(std::string session_key,
                         ChooseSessionKey(cfg.session_key_file, contents, store,
                                          *server->groups_->session_key()));
  server->groups_->set_session_key(std::move(session_key));

  server->publisher_ = std::make_unique<GroupPublisher>();
  server->scheduler_ = std::make_unique<RebuildScheduler>();
  ASIDE_ASSIGN_OR_RETURN(
      server->health_,
      HealthRegistry::Create(
          {.max_concurrent_probes = cfg.max_concurrent_probes, .clock = clock},
          *server->metrics_.registry()));
  if (auto* etcd_store = dynamic_cast<EtcdStore*>(store)) {
    // Before any group acquires a target: each target's owner is decided
    // from its creation (every target until membership is confirmed).
    const fleet::FleetMetrics fm = fleet::FleetMetricsOf(server->metrics_);
    server->membership_ = std::make_unique<fleet::Membership>(
        etcd_store->client(),
        fleet::MembershipOptions{.prefix = etcd_store->prefix(),
                                 .id = cfg.fleet.replica_id,
                                 .ttl = cfg.fleet.member_ttl,
                                 .metrics = fm});
    server->ownership_ = std::make_unique<fleet::ProbeOwnership>(
        etcd_store->client(), etcd_store->prefix(), server->membership_.get(),
        server->health_.get(), fm);
    server->ownership_->Start();
  }
  DnsDiscoveryOptions dns_options;
  dns_options.servers = cfg.dns_servers;
  dns_options.clock = clock;
  ASIDE_ASSIGN_OR_RETURN(server->dns_,
                         DnsDiscovery::Create(std::move(dns_options),
                                              *server->metrics_.registry()));
  GroupRegistry* groups = server->groups_.get();
  server->loads_ = std::make_unique<LoadAggregator>(
      clock, cfg.load_window, std::bind_front(&GroupRegistry::Serves, groups),
      cfg.load_reports_max_reporter_share);
  server->report_auth_ = std::make_unique<ReportAuth>(
      cfg.load_reports_open, server->auth_.get(), TrustedNetworks(cfg));
  if (!server->report_auth_->usable()) {
    Log(LogLevel::kWarn, "load_reports.refused",
        {{"reason",
          "load_reports.auth is token and no credentials are configured "
          "(admin.token_file, admin.allowed_identities): every load report "
          "is refused"}});
  }
  server->orca_ = std::make_unique<OrcaCollector>(clock, &server->metrics_);
  if (server->ownership_ != nullptr) {
    // One ORCA stream per backend in the fleet, held by its owner; the
    // others take its reports from the load view.
    server->orca_->set_owns(
        [ownership = server->ownership_.get()](const std::string& address) {
          return ownership->OwnsKey(fleet::OrcaFleetKey(address));
        });
  }
  server->orca_->Start();
  server->groups_->set_inputs({.dns = server->dns_.get(),
                               .scheduler = server->scheduler_.get(),
                               .health = server->health_.get(),
                               .loads = server->loads_.get(),
                               .orca = server->orca_.get(),
                               .clock = clock,
                               .publish_window = cfg.publish_window,
                               .publisher = server->publisher_.get()});
  // A flip is recorded for the status page, then republishes every group
  // that holds the target (observers run in this order).
  if (server->events_ != nullptr) {
    server->health_events_ = std::make_unique<HealthEvents>(
        server->health_.get(), server->events_.get());
  }
  server->health_follower_ = std::make_unique<HealthFollower>(
      server->health_.get(), server->groups_.get(), server->scheduler_.get(),
      cfg.health_merge_window);

  if (server->events_ != nullptr) {
    server->publication_events_ = std::make_unique<PublicationEvents>(
        server->groups_.get(), server->events_.get());
  }
  for (const GroupSpec& spec : cfg.groups) {
    absl::Status s = server->groups_->Add(spec);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("group '", spec.name, "': ", s.message()));
    }
  }
  server->sync_ = std::make_unique<StoreSync>(store, server->groups_.get(),
                                              &server->metrics_);
  ASIDE_RETURN_IF_ERROR(server->sync_->ApplyInitial(
      contents, /*strict=*/!store->starts_unavailable()));
  server->sync_->Follow(loaded.ok() ? std::optional<int64_t>(contents.revision)
                                    : std::nullopt);

  server->loads_->set_listener(
      std::bind_front(&GroupRegistry::OnLoadAccepted, groups));
  // One id per replica: the fleet member's when there is a fleet (peers
  // recognise each other, and themselves, by it), else a fresh one.
  server->replica_id_ = server->membership_ != nullptr
                            ? server->membership_->id()
                        : cfg.fleet.replica_id.empty() ? NewReplicaId()
                                                       : cfg.fleet.replica_id;
  server->load_view_metrics_ =
      std::make_unique<LoadViewMetrics>(*server->metrics_.registry());
  server->load_view_service_ = std::make_unique<LoadViewService>(
      server->replica_id_, server->loads_.get(), server->report_auth_.get(),
      cfg.fleet_load.load_share_interval, server->load_view_metrics_.get());
  server->load_view_service_->set_orca(server->orca_.get());
  if (!cfg.fleet_load.peer_token_file.empty()) {
    ASIDE_ASSIGN_OR_RETURN(server->peer_token_,
                           ReadPeerToken(cfg.fleet_load.peer_token_file));
  }
  server->watch_hub_ = std::make_unique<WatchHub>(
      server->groups_.get(), &server->metrics_, cfg.watch_stall_timeout,
      cfg.max_watch_streams_per_peer);
  server->lb_service_ = std::make_unique<LoadBalancerService>(
      server->groups_.get(), &server->metrics_, clock, server->watch_hub_.get(),
      server->loads_.get(), server->report_auth_.get());
  server->admin_service_ = std::make_unique<AdminService>(
      server->groups_.get(), server->sync_.get(), server->auth_.get(),
      &server->metrics_, server->loads_.get(), server->health_.get(),
      MutationQueue::Options{.max_queued = cfg.admin_max_queued_writes,
                             .max_wait = cfg.admin_max_write_wait});
  server->admin_service_->set_orca(server->orca_.get());
  server->grpclb_service_ = std::make_unique<GrpclbService>(
      server->groups_.get(), server->loads_.get(), &server->metrics_,
      cfg.grpclb_client_stats_report_interval, cfg.grpclb_max_servers,
      server->report_auth_.get());
  if (fleet::Membership* membership = server->membership_.get()) {
    server->admin_service_->set_members(
        std::bind_front(&fleet::Membership::Describe, membership));
  }
  server->admin_service_->set_grpclb_streams(
      [grpclb = server->grpclb_service_.get()](const std::string& group) {
        return grpclb->streams_for(group);
      });
  // xDS for stock gRPC clients; LRS reports arrive as often as grpclb's.
  server->ads_service_ = std::make_unique<xds::AdsService>(
      server->groups_.get(), &server->metrics_, server->loads_.get());
  server->lrs_service_ = std::make_unique<xds::LrsService>(
      server->groups_.get(), server->loads_.get(), &server->metrics_,
      cfg.grpclb_client_stats_report_interval, server->report_auth_.get());
  server->grpclb_service_->LimitStreamsPerPeer(
      cfg.max_balancer_streams_per_peer);
  server->ads_service_->LimitStreamsPerPeer(cfg.max_balancer_streams_per_peer);
  server->lrs_service_->LimitStreamsPerPeer(cfg.max_balancer_streams_per_peer);
  server->health_service_ =
      std::make_unique<HealthService>(server->groups_.get());
  if (!cfg.health_listen.empty()) {
    server->plain_health_service_ =
        std::make_unique<HealthService>(server->groups_.get());
  }
  if (cfg.status_page_enabled) {
    fleet::Membership* membership = server->membership_.get();
    server->history_ = std::make_unique<StatusHistory>(
        HistorySources{.groups = server->groups_.get(),
                       .loads = server->loads_.get(),
                       .events = server->events_.get(),
                       .store_up = [store] { return store->state().up; },
                       .fleet_members =
                           membership == nullptr
                               ? std::function<std::vector<std::string>()>()
                               : std::bind_front(&fleet::Membership::member_ids,
                                                 membership)},
        HistoryOptions{.interval = cfg.status_page_history_interval,
                       .clock = clock});
    server->status_page_ = std::make_unique<StatusPage>(StatusSources{
        .groups = server->groups_.get(),
        .health = server->health_.get(),
        .loads = server->loads_.get(),
        .orca = server->orca_.get(),
        .grpclb = server->grpclb_service_.get(),
        .store = [store,
                  membership] { return StoreStatusOf(*store, membership); },
        .history = server->history_.get(),
        .events = server->events_.get(),
        .auth = server->auth_.get(),
        .require_token = cfg.status_page_require_token,
        .clock = clock});
  }
  return server;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
AsideServer::Credentials() const {
  if (config_.tls_cert_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  // Read once here so that a missing file fails start-up with its name;
  // from then on gRPC's file watcher re-reads the files (a renewed
  // certificate, key or CA bundle is used for new handshakes; established
  // connections keep theirs).
  ASIDE_RETURN_IF_ERROR(
      ReadWholeFile(config_.tls_cert_file, "TLS certificate").status());
  ASIDE_RETURN_IF_ERROR(
      ReadWholeFile(config_.tls_key_file, "TLS private key").status());
  if (!config_.tls_client_ca_file.empty()) {
    ASIDE_RETURN_IF_ERROR(
        ReadWholeFile(config_.tls_client_ca_file, "TLS client CA bundle")
            .status());
  }
  const auto refresh = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(
                               config_.reload_interval, absl::Seconds(1)))));
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          config_.tls_key_file, config_.tls_cert_file,
          config_.tls_client_ca_file, refresh);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (config_.tls_client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(
        config_.tls_require_client_cert
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

GuardedRelayOptions AsideServer::RequestRelay() const {
  return {.guard = {.max_message_bytes = config_.max_receive_message_bytes,
                    .limit_name = "limits.max_receive_message_bytes",
                    // gRPC ends a connection past max_concurrent_streams;
                    // the guard's own cap is well above, for its memory.
                    .max_streams = std::max<uint32_t>(
                        4096, 16 * config_.max_concurrent_streams),
                    .max_resets = config_.max_stream_resets,
                    .resets_per_second = config_.stream_resets_per_second},
          .threads = RelayThreads(),
          .tag = "grpc",
          // Behind a proxy every connection has one address: no peers.
          .resets_per_peer = config_.max_connections_per_peer != 0};
}

absl::Status AsideServer::Start() {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ASIDE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                         Credentials());
  grpc::ServerBuilder builder;
  // TCP connections come through the gate (connection caps, silent
  // connections kept away from gRPC); a unix socket is gRPC's own.
  std::unique_ptr<ConnectionGate> gate;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor;
  if (absl::StartsWith(config_.listen, "unix:")) {
    builder.AddListeningPort(config_.listen, credentials, &grpc_port_);
  } else {
    // A plaintext port's requests are read on their way to gRPC, so that an
    // oversized one is refused before gRPC buffers it (server/
    // h2_request_guard.h); a TLS port's bytes are gRPC's alone.
    const bool guarded = config_.tls_cert_file.empty();
    const ConnectionBudget budget = ConnectionBudgetFor(
        config_.max_connections, OpenFileLimit(), guarded ? 3 : 1);
    if (budget.lowered) {
      Log(LogLevel::kWarn, "limits.max_connections_lowered",
          {{"configured", absl::StrCat(config_.max_connections)},
           {"now", absl::StrCat(budget.max_connections)},
           {"open_files", absl::StrCat(OpenFileLimit())},
           {"reason",
            "the open-file limit less a reserve for probes, the health and "
            "metrics ports and the store"}});
    }
    ASIDE_ASSIGN_OR_RETURN(
        gate, ConnectionGate::Bind(
                  config_.listen,
                  {.max_connections = budget.max_connections,
                   .max_connections_per_peer = config_.max_connections_per_peer,
                   .handshake_timeout = config_.handshake_timeout,
                   .metrics = &metrics_,
                   .relay = guarded ? std::optional<GuardedRelayOptions>(
                                          RequestRelay())
                                    : std::nullopt}));
    grpc_port_ = gate->port();
    max_connections_ = budget.max_connections;
    acceptor = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        credentials);
  }
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(config_.max_receive_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config_.max_concurrent_streams));
  ApplyAbuseLimits(config_, builder);
  builder.RegisterService(lb_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(grpclb_service_.get());
  builder.RegisterService(ads_service_.get());
  builder.RegisterService(lrs_service_.get());
  builder.RegisterService(health_service_.get());
  builder.RegisterService(load_view_service_.get());
  {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(std::make_unique<ParseErrorInterceptorFactory>());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  watch_hub_->AddCompletionQueues(builder);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", config_.listen));
  }
  if (gate != nullptr) {
    gate->Start(std::move(acceptor));
    gate_ = std::move(gate);
  }
  Log(LogLevel::kInfo, "grpc.listening",
      {{"address", config_.listen},
       {"port", absl::StrCat(grpc_port_)},
       {"max_connections", gate_ == nullptr ? std::string("none")
                                            : absl::StrCat(max_connections_)},
       {"max_connections_per_peer",
        gate_ == nullptr ? std::string("none")
                         : absl::StrCat(config_.max_connections_per_peer)},
       {"tls", config_.tls_cert_file.empty() ? "off" : "on"},
       {"replica_id", replica_id_}});
  watch_hub_->Serve(lb_service_->WatchRequester());
  StartLoadViewPeers();
  auto fail = [&](absl::Status s) {
    Shutdown(absl::ZeroDuration());
    Wait();
    return s;
  };
  if (plain_health_service_ != nullptr) {
    grpc::ServerBuilder health_builder;
    // Through a gate and its relay like the gRPC port: a probe request is a
    // few bytes, and one of a gigabyte is refused at its first frame.
    absl::StatusOr<std::unique_ptr<ConnectionGate>> health_gate =
        ConnectionGate::Bind(
            config_.health_listen,
            {.max_connections = kHealthMaxConnections,
             .handshake_timeout = config_.handshake_timeout,
             .metrics = &metrics_,
             .relay = GuardedRelayOptions{
                 .guard = {.max_message_bytes = kHealthMaxMessageBytes,
                           .limit_name = "the health port's limit"},
                 .threads = 1,
                 .tag = "health"}});
    if (!health_gate.ok()) {
      return fail(absl::UnavailableError(absl::StrCat(
          "cannot listen for gRPC health on ", config_.health_listen, ": ",
          health_gate.status().message())));
    }
    health_port_ = (*health_gate)->port();
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor>
        health_acceptor =
            health_builder.experimental().AddExternalConnectionAcceptor(
                grpc::ServerBuilder::experimental_type::ExternalConnectionType::
                    FROM_FD,
                grpc::InsecureServerCredentials());
    health_builder.SetMaxReceiveMessageSize(kHealthMaxMessageBytes);
    ApplyAbuseLimits(config_, health_builder);
    health_builder.RegisterService(plain_health_service_.get());
    health_server_ = health_builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0) {
      health_server_.reset();
      return fail(absl::UnavailableError(absl::StrCat(
          "cannot listen for gRPC health on ", config_.health_listen)));
    }
    (*health_gate)->Start(std::move(health_acceptor));
    health_gate_ = std::move(*health_gate);
    Log(LogLevel::kInfo, "health.listening",
        {{"address", config_.health_listen},
         {"port", absl::StrCat(health_port_)}});
  }
  if (membership_ != nullptr) {
    // Registered once the listener is bound, so that the advertised port is
    // the real one.
    membership_->Start(AdvertiseAddress());
    Log(LogLevel::kInfo, "fleet.joining",
        {{"id", membership_->id()}, {"address", AdvertiseAddress()}});
  }
  if (!config_.metrics.empty()) {
    absl::StatusOr<int> port = metrics_http_.Serve(
        config_.metrics, {},
        status_page_ != nullptr
            ? status_page_->Routes()
            : std::vector<std::pair<std::string, HttpHandler>>{});
    if (!port.ok()) {
      return fail(port.status());
    }
    metrics_port_ = *port;
    if (history_ != nullptr) {
      history_->Start();
    }
    Log(LogLevel::kInfo, "metrics.listening",
        {{"address", config_.metrics}, {"port", absl::StrCat(metrics_port_)}});
  }
  return absl::OkStatus();
}

void AsideServer::StartLoadViewPeers() {
  LoadViewPeers::Options options;
  options.self_id = replica_id_;
  // A peer silent for five share intervals (5 s by default, a member
  // lease's default TTL) stops counting.
  options.grace = 5 * config_.fleet_load.load_share_interval;
  options.token = peer_token_;
  if (!config_.tls_cert_file.empty()) {
    // Peers serve the fleet's certificate: verified against the client CA
    // bundle (the fleet's CA), and this replica shows its own certificate.
    grpc::SslCredentialsOptions ssl;
    if (!config_.tls_client_ca_file.empty()) {
      ssl.pem_root_certs =
          ReadWholeFile(config_.tls_client_ca_file, "TLS client CA bundle")
              .value_or("");
    }
    ssl.pem_cert_chain =
        ReadWholeFile(config_.tls_cert_file, "TLS certificate").value_or("");
    ssl.pem_private_key =
        ReadWholeFile(config_.tls_key_file, "TLS private key").value_or("");
    options.credentials = grpc::SslCredentials(ssl);
  }
  load_view_peers_ = std::make_unique<LoadViewPeers>(
      std::move(options), loads_.get(), load_view_metrics_.get());
  load_view_peers_->set_orca(orca_.get());
  std::vector<LoadViewPeer> peers;
  for (const std::string& address : config_.fleet_load.peers) {
    peers.push_back({.id = "", .address = address});
  }
  load_view_peers_->SetPeers(peers);
  if (membership_ != nullptr) {
    // The live members (but this replica) are the peers, with the static
    // ones the config lists that no member already advertises. Subscribed
    // before the membership starts, so no change is missed.
    membership_->Subscribe([this, statics = std::move(peers)](
                               const std::vector<fleet::Member>& members) {
      std::vector<LoadViewPeer> live;
      absl::flat_hash_set<std::string> addresses;
      for (const fleet::Member& m : members) {
        if (m.id != replica_id_ && !m.address.empty()) {
          live.push_back({.id = m.id, .address = m.address});
          addresses.insert(m.address);
        }
      }
      for (const LoadViewPeer& p : statics) {
        if (!addresses.contains(p.address)) {
          live.push_back(p);
        }
      }
      load_view_peers_->SetPeers(std::move(live));
    });
  }
}

std::string AsideServer::AdvertiseAddress() const {
  if (!config_.fleet.advertise_address.empty()) {
    return config_.fleet.advertise_address;
  }
  std::string host = "127.0.0.1";
  absl::StatusOr<Address> listen = ParseListenAddress(config_.listen);
  if (listen.ok() && !listen->host.empty() && listen->host != "0.0.0.0" &&
      listen->host != "::") {
    host = listen->kind == Address::Kind::kIpv6
               ? absl::StrCat("[", listen->host, "]")
               : listen->host;
  }
  return absl::StrCat(host, ":", grpc_port_);
}

void AsideServer::StopFleet() {
  if (ownership_ != nullptr) {
    ownership_->Stop();
  }
  if (membership_ != nullptr) {
    membership_->Stop();
  }
}

void AsideServer::Shutdown(absl::Duration grace) {
  if (shut_down_) {
    return;
  }
  shut_down_ = true;
  // Leave the fleet first: the other replicas take this one's targets over
  // at once (its lease is revoked) while its calls drain.
  StopFleet();
  if (load_view_peers_ != nullptr) {
    load_view_peers_->Stop();
  }
  if (load_view_service_ != nullptr) {
    load_view_service_->Shutdown();
  }
  if (health_service_ != nullptr) {
    health_service_->Shutdown();
  }
  if (plain_health_service_ != nullptr) {
    plain_health_service_->Shutdown();
  }
  if (watch_hub_ != nullptr) {
    watch_hub_->Shutdown();
  }
  if (lb_service_ != nullptr) {
    lb_service_->Shutdown();
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
  if (orca_ != nullptr) {
    orca_->Stop();
  }
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(grace));
  // No connection reaches gRPC once it shuts down; waiting ones are closed.
  if (gate_ != nullptr) {
    gate_->Stop();
  }
  if (server_ != nullptr) {
    server_->Shutdown(deadline);
  }
  if (admin_service_ != nullptr) {
    // Before the server is destroyed: a worker that answered the last
    // calls may still be returning from Finish.
    admin_service_->StopWorkers();
  }
  if (watch_hub_ != nullptr) {
    watch_hub_->StopServing();  // after the server's calls have ended
  }
  if (health_gate_ != nullptr) {
    health_gate_->Stop();
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(deadline);
  }
  metrics_http_.StopServing();
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
