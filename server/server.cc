#include "server/server.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "lib/ip_network.h"
#include "lib/status_macros.h"
#include "server/base/log.h"
#include "server/config_check.h"
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
                                                 Metrics* metrics,
                                                 EtcdStore** etcd,
                                                 const BackendRelay* relay) {
  if (etcd != nullptr) {
    *etcd = nullptr;
  }
  if (cfg.store.type == "etcd") {
    ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store,
                           EtcdStore::Create(cfg.store, metrics, relay));
    if (etcd != nullptr) {
      *etcd = store.get();
    }
    return store;
  }
  ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store,
                         SqliteStore::Open(cfg.state_dir, cfg.max_state_bytes));
  metrics->store_up.Add({{"type", "sqlite"}}).Set(1);
  return store;
}

namespace {

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
  server->loop_ = std::make_unique<EventLoop>("aside-loop");
  if (cfg.status_page_enabled) {
    server->events_ = std::make_unique<EventLog>(clock);
  }
  // Before every channel to a backend or to etcd: each goes through it.
  ASIDE_ASSIGN_OR_RETURN(server->backend_relay_,
                         BackendRelay::Start(&server->metrics_));
  EtcdStore* etcd_store = nullptr;
  ASIDE_ASSIGN_OR_RETURN(server->store_,
                         OpenStore(cfg, &server->metrics_, &etcd_store,
                                   server->backend_relay_.get()));
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
  server->scheduler_ = std::make_unique<RebuildScheduler>(server->loop_.get());
  ASIDE_ASSIGN_OR_RETURN(
      server->health_, HealthRegistry::Create(
                           {.max_concurrent_probes = cfg.max_concurrent_probes,
                            .clock = clock,
                            .relay = server->backend_relay_.get()},
                           *server->metrics_.registry()));
  if (etcd_store != nullptr) {
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
  server->orca_ = std::make_unique<OrcaCollector>(
      clock, &server->metrics_,
      OrcaCollector::Options{.relay = server->backend_relay_.get()});
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
      [groups, confirmations = server->confirmations_.get()](
          const LoadAggregator::Accepted& accepted) {
        groups->OnLoadAccepted(accepted);
        // A drain wait may be waiting for this report's in_flight.
        confirmations->Touch(accepted.group);
      });
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
      cfg.fleet_load.load_share_interval, server->load_view_metrics_.get(),
      server->loop_.get());
  server->load_view_service_->set_orca(server->orca_.get());
  if (!cfg.fleet_load.peer_token_file.empty()) {
    ASIDE_ASSIGN_OR_RETURN(server->peer_token_,
                           ReadPeerToken(cfg.fleet_load.peer_token_file));
  }
  server->watch_hub_ = std::make_unique<WatchHub>(
      server->groups_.get(), &server->metrics_, cfg.watch_stall_timeout,
      cfg.max_watch_streams_per_peer, server->loop_.get());
  server->watch_hub_->set_confirmations(server->confirmations_.get());
  server->lb_service_ = std::make_unique<LoadBalancerService>(
      server->groups_.get(), &server->metrics_, clock, server->loads_.get(),
      server->report_auth_.get());
  server->admin_service_ = std::make_unique<AdminService>(
      server->groups_.get(), server->sync_.get(), server->auth_.get(),
      &server->metrics_, server->loads_.get(), server->health_.get(),
      MutationQueue::Options{.max_queued = cfg.admin_max_queued_writes,
                             .max_wait = cfg.admin_max_write_wait});
  server->admin_service_->set_orca(server->orca_.get());
  server->admin_service_->set_confirmations(server->confirmations_.get());
  server->grpclb_service_ = std::make_unique<GrpclbService>(
      server->groups_.get(), server->loads_.get(), &server->metrics_,
      cfg.grpclb_client_stats_report_interval, cfg.grpclb_max_servers,
      server->report_auth_.get(), server->loop_.get());
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
  server->grpclb_service_->set_confirmations(server->confirmations_.get());
  server->ads_service_->set_confirmations(server->confirmations_.get());
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

}  // namespace aside::server
