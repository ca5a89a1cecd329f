// Running the assembled server: its ports (credentials, the connection
// gates and their relays, gRPC's limits), the fleet's membership and load
// view peers, and shutdown in the order that lets calls drain.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <sys/resource.h>

#include <algorithm>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/status_macros.h"
#include "server/api/parse_error_interceptor.h"
#include "server/base/log.h"
#include "server/base/read_file.h"
#include "server/net/connection_gate.h"
#include "server/net/http2_limits.h"
#include "server/server.h"

namespace aside::server {

// After the unary calls of a shutdown: how long the streams' last writes
// may take before they are cut.
constexpr absl::Duration kShutdownStreamGrace = absl::Seconds(3);

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

// Shutdown() on each of `services` that was made, in order.
template <typename... Service>
void ShutdownEach(const std::unique_ptr<Service>&... services) {
  ((services != nullptr ? services->Shutdown() : void()), ...);
}

}  // namespace

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
          .resets_per_peer = config_.max_connections_per_peer != 0,
          .max_streams_per_peer = config_.max_streams_per_peer,
          .max_streams = config_.max_streams};
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
    interceptors.push_back(
        std::make_unique<ParseErrorInterceptorFactory>(&calls_));
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
    std::vector<std::pair<std::string, HttpHandler>> routes;
    if (status_page_ != nullptr) {
      routes = status_page_->Routes();
    }
    // Liveness: the port answers. Readiness: the gRPC port serves (from
    // the end of Start to the start of Shutdown).
    routes.emplace_back("/healthz", [](const HttpRequest&) {
      return HttpResponse{.body = "ok\n"};
    });
    routes.emplace_back("/readyz", [this](const HttpRequest&) {
      return ready_.load()
                 ? HttpResponse{.body = "ready\n"}
                 : HttpResponse{.status = 503, .body = "not serving\n"};
    });
    absl::StatusOr<int> port =
        metrics_http_.Serve(config_.metrics, {}, std::move(routes));
    if (!port.ok()) {
      return fail(port.status());
    }
    metrics_port_ = *port;
    if (history_ != nullptr) {
      history_->Start(loop_.get());
    }
    Log(LogLevel::kInfo, "metrics.listening",
        {{"address", config_.metrics}, {"port", absl::StrCat(metrics_port_)}});
  }
  ready_ = true;
  return absl::OkStatus();
}

void AsideServer::StartLoadViewPeers() {
  LoadViewPeers::Options options;
  options.self_id = replica_id_;
  // A peer silent for five share intervals (5 s by default, a member
  // lease's default TTL) stops counting.
  options.grace = 5 * config_.fleet_load.load_share_interval;
  options.token = peer_token_;
  options.loop = loop_.get();
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
  ready_ = false;
  // Leave the fleet first: the other replicas take this one's targets over
  // at once (its lease is revoked) while its calls drain.
  StopFleet();
  if (load_view_peers_ != nullptr) {
    load_view_peers_->Stop();
  }
  ShutdownEach(load_view_service_, health_service_, plain_health_service_,
               watch_hub_, lb_service_, grpclb_service_, ads_service_,
               lrs_service_);
  if (orca_ != nullptr) {
    orca_->Stop();
  }
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::milliseconds(absl::ToInt64Milliseconds(grace));
  // No connection reaches gRPC once it shuts down; waiting ones are closed.
  if (gate_ != nullptr) {
    gate_->Stop();
  }
  if (server_ != nullptr) {
    // The grace is for the unary calls in flight. Once they are done, the
    // streams (ended above) get at most kShutdownStreamGrace more for their
    // last writes, and then nothing is waited for: not a stream whose
    // client stopped reading, nor a connection that never closes after the
    // GOAWAY (its client does not read).
    calls_.WaitForNoUnary(grace);
    calls_.WaitForNone(std::min(grace, kShutdownStreamGrace));
    server_->Shutdown(std::chrono::system_clock::now());
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
