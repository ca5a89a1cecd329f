#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "proto/convert.h"

namespace aside {

using client_internal::BackendStats;
using client_internal::GroupSnapshot;
using SnapshotPtr = std::shared_ptr<const GroupSnapshot>;

namespace {

std::atomic<uint64_t> next_group_id{1};

// The per-thread cache of group snapshots (RCU-like): a pick compares the
// group's version counter with the version its thread last saw and, while
// they match, uses the snapshot cached here without touching any shared
// reference count. Each cached pointer has a control block of its own,
// made for this thread (an aliasing shared_ptr), so copying it into a PickHandle
// handle only touches memory this thread owns. Slots are direct-mapped by
// group id; two groups sharing a slot still pick correctly, they just take
// the refresh path more often. A cached snapshot stays alive until the
// thread picks from that slot again or exits.
struct CacheSlot {
  uint64_t group_id = 0;
  uint64_t version = 0;
  SnapshotPtr snapshot;
};
constexpr size_t kCacheSlots = 64;
thread_local std::array<CacheSlot, kCacheSlots> t_cache;

int64_t ToNanos(absl::Duration d) { return absl::ToInt64Nanoseconds(d); }

std::string DefaultReporter() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    std::snprintf(host, sizeof(host), "unknown");
  }
  return absl::StrCat(host, "-", getpid());
}

std::string StatusText(const grpc::Status& s) {
  return absl::StrCat(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
      ": ", s.error_message());
}

}  // namespace

// ---------------------------------------------------------------------------
// PickHandle

PickHandle& PickHandle::operator=(PickHandle&& other) noexcept {
  if (this != &other) {
    if (member_ != nullptr && !done_) {
      Record(false, clock_->NowNanos() - start_nanos_);
    }
    keep_ = std::move(other.keep_);
    member_ = other.member_;
    stats_ = other.stats_;
    clock_ = other.clock_;
    start_nanos_ = other.start_nanos_;
    first_byte_nanos_ = other.first_byte_nanos_;
    done_ = other.done_;
    other.member_ = nullptr;
    other.stats_ = nullptr;
    other.done_ = true;
  }
  return *this;
}

PickHandle::~PickHandle() {
  if (member_ != nullptr && !done_) {
    Record(false, clock_->NowNanos() - start_nanos_);
  }
}

uint64_t PickHandle::generation() const {
  return keep_ && keep_->table ? keep_->table->generation() : 0;
}

bool PickHandle::from_fallback() const { return keep_ && keep_->fallback; }

void PickHandle::FirstByte() noexcept {
  if (member_ == nullptr || done_ || first_byte_nanos_ >= 0) {
    return;
  }
  first_byte_nanos_ = std::max<int64_t>(clock_->NowNanos() - start_nanos_, 0);
}

void PickHandle::Done(bool ok) noexcept {
  if (member_ == nullptr || done_) {
    return;
  }
  Record(ok, clock_->NowNanos() - start_nanos_);
}

void PickHandle::Record(bool ok, int64_t latency_nanos) noexcept {
  latency_nanos = std::max<int64_t>(latency_nanos, 0);
  // The policies' load models (in-flight, peak-EWMA, least-time EWMA).
  Completion completion;
  completion.now_nanos = start_nanos_ + latency_nanos;
  completion.latency_nanos = latency_nanos;
  completion.first_byte_nanos =
      first_byte_nanos_ >= 0 ? std::min(first_byte_nanos_, latency_nanos)
                             : latency_nanos;
  completion.ok = ok;
  member_->load->Finish(completion, keep_->table->load_model());
  stats_->requests.fetch_add(1, std::memory_order_relaxed);
  stats_->latency_sum_nanos.fetch_add(static_cast<uint64_t>(latency_nanos),
                                      std::memory_order_relaxed);
  stats_->first_byte_sum_nanos.fetch_add(
      static_cast<uint64_t>(completion.first_byte_nanos),
      std::memory_order_relaxed);
  if (ok) {
    if (stats_->consecutive_failures.load(std::memory_order_relaxed) != 0) {
      stats_->consecutive_failures.store(0, std::memory_order_relaxed);
    }
    if (stats_->ejected_until_nanos.load(std::memory_order_relaxed) != 0) {
      stats_->ejected_until_nanos.store(0, std::memory_order_relaxed);
    }
  } else {
    stats_->failures.fetch_add(1, std::memory_order_relaxed);
    const uint32_t consecutive =
        stats_->consecutive_failures.fetch_add(1, std::memory_order_relaxed) +
        1;
    if (stats_->eject_after_failures != 0 &&
        consecutive >= stats_->eject_after_failures) {
      stats_->ejected_until_nanos.store(
          completion.now_nanos + stats_->eject_nanos,
          std::memory_order_relaxed);
    }
  }
  done_ = true;
}

// ---------------------------------------------------------------------------
// ClientGroup

ClientGroup::ClientGroup(Client* client, std::string name,
                         absl::Status name_status,
                         std::vector<std::string> fallback,
                         int64_t deadline_nanos)
    : client_(client),
      name_(std::move(name)),
      name_status_(std::move(name_status)),
      id_(next_group_id.fetch_add(1, std::memory_order_relaxed)),
      deadline_nanos_(deadline_nanos),
      loads_(&client->clock()),
      fallback_addresses_(std::move(fallback)),
      watched_(name_, &loads_) {
  auto snapshot = std::make_shared<GroupSnapshot>();
  if (!fallback_addresses_.empty()) {
    TableSpec spec;
    spec.group = name_;
    spec.generation = 0;
    spec.panic_threshold = 0;
    for (const std::string& address : fallback_addresses_) {
      Member m;
      m.backend.address = address;
      spec.members.push_back(std::move(m));
    }
    absl::StatusOr<TableConstPtr> table =
        Table::Create(std::move(spec), nullptr, &loads_);
    if (table.ok()) {
      fallback_ = *std::move(table);
      aside::MutexLock lock(&mu_);
      snapshot->table = fallback_;
      snapshot->fallback = true;
      for (const Member& m : fallback_->members()) {
        auto stats = client_->NewStats(m.backend.address);
        stats_.emplace(m.backend.address, stats);
        snapshot->stats.push_back(std::move(stats));
      }
    } else {
      client_->Log(absl::StrCat("group '", name_, "': fallback list unusable: ",
                                table.status().message()));
    }
  }
  cell_.Publish(std::move(snapshot));
}

ClientGroup::~ClientGroup() = default;

const SnapshotPtr& ClientGroup::Local() const {
  CacheSlot& slot = t_cache[id_ % kCacheSlots];
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (slot.group_id == id_ && slot.version == version) [[likely]] {
    return slot.snapshot;
  }
  return Refresh(version);
}

const SnapshotPtr& ClientGroup::Refresh(uint64_t version) const {
  CacheSlot& slot = t_cache[id_ % kCacheSlots];
  // The writer publishes the snapshot before it bumps the version, so the
  // snapshot read here is at least as new as `version`.
  auto holder = std::make_shared<SnapshotPtr>(cell_.Acquire());
  slot.snapshot = SnapshotPtr(holder, holder->get());
  slot.group_id = id_;
  slot.version = version;
  return slot.snapshot;
}

absl::StatusOr<aside::PickHandle> ClientGroup::Pick(absl::string_view key) {
  const SnapshotPtr& snapshot = Local();
  if (snapshot->table == nullptr) [[unlikely]] {
    return PickWithoutTable(key);
  }
  return PickFrom(snapshot, key);
}

absl::StatusOr<aside::PickHandle> ClientGroup::PickFrom(const SnapshotPtr& snapshot,
                                                  absl::string_view key) {
  const Table& table = *snapshot->table;
  const Clock* clock = client_->clock_;
  // One clock read serves the load models and the call's start time.
  const int64_t now = clock->NowNanos();
  uint32_t index = 0;
  PickRequest request;
  request.key = key;
  request.now_nanos = now;
  if (table.Pick(request, absl::Span<uint32_t>(&index, 1)) == 0) {
    return absl::UnavailableError(table.NoBackendMessage(0));
  }
  if (snapshot->stats[index]->ejected_until_nanos.load(
          std::memory_order_relaxed) > now) [[unlikely]] {
    index = AvoidEjected(*snapshot, request, index, now);
  }
  const Member& member = table.member(index);
  member.load->Start();
  return aside::PickHandle(snapshot, &member, snapshot->stats[index].get(), clock,
                     now);
}

uint32_t ClientGroup::AvoidEjected(const GroupSnapshot& snapshot,
                                   PickRequest request, uint32_t first,
                                   int64_t now) {
  // Picks again with the ejected choices excluded, a bounded number of
  // times and without allocating; keeps the first choice when every
  // candidate is ejected (or none is left).
  constexpr size_t kMaxExcluded = 8;
  std::array<uint32_t, kMaxExcluded> excluded;
  size_t n = 0;
  excluded[n++] = first;
  while (n < kMaxExcluded) {
    request.exclude = absl::Span<const uint32_t>(excluded.data(), n);
    uint32_t index = 0;
    if (snapshot.table->Pick(request, absl::Span<uint32_t>(&index, 1)) == 0) {
      break;
    }
    if (snapshot.stats[index]->ejected_until_nanos.load(
            std::memory_order_relaxed) <= now) {
      return index;
    }
    excluded[n++] = index;
  }
  return first;
}

absl::StatusOr<aside::PickHandle> ClientGroup::PickWithoutTable(
    absl::string_view key) {
  if (!name_status_.ok()) {
    return name_status_;
  }
  const Clock* clock = client_->clock_;
  {
    aside::MutexLock lock(&mu_);
    while (cell_.Acquire()->table == nullptr) {
      if (!missing_.ok()) {
        return missing_;
      }
      const int64_t now = clock->NowNanos();
      if (now >= deadline_nanos_) {
        break;
      }
      const uint64_t seen = published_version_;
      auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return published_version_ != seen || !missing_.ok();
      };
      mu_.AwaitWithTimeout(
          aside::Cond(&changed),
          std::min(absl::Nanoseconds(deadline_nanos_ - now),
                   absl::Milliseconds(50)));
    }
  }
  const SnapshotPtr& snapshot = Local();
  if (snapshot->table != nullptr) {
    return PickFrom(snapshot, key);
  }
  std::string last_error;
  {
    aside::MutexLock lock(&client_->mu_);
    last_error = client_->last_error_;
  }
  return absl::UnavailableError(absl::StrCat(
      "group '", name_, "': no table from aside server(s) ",
      client_->TargetsText(), " within ",
      absl::FormatDuration(client_->options_.wait_for_table), ": ",
      last_error.empty() ? "still connecting" : last_error));
}

TableConstPtr ClientGroup::table() const { return cell_.Acquire()->table; }

std::string ClientGroup::server_id() const {
  aside::MutexLock lock(&mu_);
  return server_id_;
}

bool ClientGroup::removed() const {
  aside::MutexLock lock(&mu_);
  return removed_;
}

bool ClientGroup::WaitForGeneration(uint64_t generation,
                                    absl::Duration timeout) const {
  aside::MutexLock lock(&mu_);
  auto reached = [this, generation]() {
    return generation_.load(std::memory_order_acquire) >= generation;
  };
  return mu_.AwaitWithTimeout(aside::Cond(&reached), timeout);
}

void ClientGroup::Publish(SnapshotPtr next) {
  cell_.Publish(std::move(next));
  version_.fetch_add(1, std::memory_order_acq_rel);
}

void ClientGroup::PublishTable(TableConstPtr table,
                               const std::string& server_id) {
  auto snapshot = std::make_shared<GroupSnapshot>();
  snapshot->table = table;
  {
    aside::MutexLock lock(&mu_);
    absl::flat_hash_set<absl::string_view> present;
    for (const Member& m : table->members()) {
      present.insert(m.backend.address);
      auto& stats = stats_[m.backend.address];
      if (stats == nullptr) {
        stats = client_->NewStats(m.backend.address);
      }
      snapshot->stats.push_back(stats);
    }
    // Forget the counters of departed backends once everything they
    // counted has been reported.
    absl::erase_if(stats_, [&](const auto& entry) {
      return !present.contains(entry.first) &&
             entry.second->requests.load(std::memory_order_relaxed) ==
                 entry.second->reported_requests.load(
                     std::memory_order_relaxed);
    });
    Publish(std::move(snapshot));
    server_id_ = server_id;
    removed_ = false;
    missing_ = absl::OkStatus();
    retry_at_ = 0;
    ++published_version_;
    generation_.store(table->generation(), std::memory_order_release);
  }
  loads_.Prune();
}

// ---------------------------------------------------------------------------
// Client

std::shared_ptr<BackendStats> Client::NewStats(
    const std::string& address) const {
  auto stats = std::make_shared<BackendStats>();
  stats->address = address;
  stats->eject_after_failures = options_.local_ejection_failures;
  stats->eject_nanos = absl::ToInt64Nanoseconds(options_.local_ejection_time);
  return stats;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.targets.empty()) {
    return absl::InvalidArgumentError("targets: at least one server is required");
  }
  for (size_t i = 0; i < options.targets.size(); ++i) {
    if (options.targets[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("targets[", i, "]: empty"));
    }
  }
  for (auto& [group, addresses] : options.fallback) {
    if (absl::Status s = ValidateGroupName(group); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fallback['", group, "']: ", s.message()));
    }
    absl::flat_hash_set<std::string> seen;
    for (size_t i = 0; i < addresses.size(); ++i) {
      Backend b;
      b.address = addresses[i];
      const std::string field = absl::StrCat("fallback['", group, "'][", i, "]");
      if (absl::Status s = ValidateBackend(field, b, /*allow_hostname=*/true);
          !s.ok()) {
        return s;
      }
      if (!seen.insert(b.address).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": ", b.address, " is listed twice"));
      }
      addresses[i] = b.address;
    }
  }
  for (size_t i = 0; i < options.groups.size(); ++i) {
    if (absl::Status s = ValidateGroupName(options.groups[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("groups[", i, "]: ", s.message()));
    }
  }
  if (options.wait_for_table < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("wait_for_table: negative");
  }
  if (options.local_ejection_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("local_ejection_time: negative");
  }
  if (options.reporter.size() > 128) {
    return absl::InvalidArgumentError("reporter: longer than 128 bytes");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeCredentials(options.tls);
  if (!credentials.ok()) {
    return credentials.status();
  }
  std::unique_ptr<Client> client(
      new Client(std::move(options), *std::move(credentials)));
  {
    aside::MutexLock lock(&client->mu_);
    for (const std::string& name : client->options_.groups) {
      client->GroupLocked(name);
    }
  }
  client->watcher_ = std::thread([c = client.get()] { c->WatchLoop(); });
  client->reporter_thread_ = std::thread([c = client.get()] { c->ReportLoop(); });
  return client;
}

Client::Client(ClientOptions options,
               std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock::Get()),
      credentials_(std::move(credentials)),
      reporter_(options_.reporter.empty() ? DefaultReporter()
                                          : options_.reporter),
      channels_(options_.backend_channels) {}

Client::~Client() {
  {
    aside::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_context_ != nullptr) {
      watch_context_->TryCancel();
    }
    if (report_context_ != nullptr) {
      report_context_->TryCancel();
    }
  }
  if (watcher_.joinable()) {
    watcher_.join();
  }
  if (reporter_thread_.joinable()) {
    reporter_thread_.join();
  }
}

ClientGroup* Client::Group(absl::string_view name) {
  aside::MutexLock lock(&mu_);
  return GroupLocked(name);
}

ClientGroup* Client::GroupLocked(absl::string_view name) {
  auto it = groups_.find(name);
  if (it != groups_.end()) {
    return it->second.get();
  }
  absl::Status name_status = ValidateGroupName(name);
  if (!name_status.ok()) {
    name_status = absl::InvalidArgumentError(
        absl::StrCat("group '", name, "': ", name_status.message()));
  }
  std::vector<std::string> fallback;
  if (auto f = options_.fallback.find(std::string(name));
      f != options_.fallback.end()) {
    fallback = f->second;
  }
  auto group = std::unique_ptr<ClientGroup>(new ClientGroup(
      this, std::string(name), name_status, std::move(fallback),
      clock_->NowNanos() + ToNanos(options_.wait_for_table)));
  ClientGroup* raw = group.get();
  groups_.emplace(std::string(name), std::move(group));
  if (name_status.ok()) {
    restart_ = true;
    if (watch_context_ != nullptr) {
      watch_context_->TryCancel();
    }
  }
  return raw;
}

std::vector<ClientGroup*> Client::AllGroups() const {
  aside::MutexLock lock(&mu_);
  std::vector<ClientGroup*> out;
  out.reserve(groups_.size());
  for (const auto& [name, group] : groups_) {
    out.push_back(group.get());
  }
  return out;
}

void Client::RestartWatch() {
  aside::MutexLock lock(&mu_);
  restart_ = true;
  if (watch_context_ != nullptr) {
    watch_context_->TryCancel();
  }
}

Client::Stats Client::stats() const {
  aside::MutexLock lock(&mu_);
  Stats s = stats_;
  s.last_error = last_error_;
  return s;
}

std::string Client::TargetsText() const {
  return absl::StrJoin(options_.targets, ", ");
}

void Client::Log(absl::string_view line) const {
  if (options_.log) {
    options_.log(line);
    return;
  }
  std::fprintf(stderr, "aside-client: %.*s\n", static_cast<int>(line.size()),
               line.data());
}

std::shared_ptr<grpc::Channel> Client::MakeChannel(
    const std::string& target) const {
  grpc::ChannelArguments args;
  // A fresh connection per attempt: the stub's own backoff decides when to
  // retry, not a subchannel shared with (and backed off by) other channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  ApplyTlsArgs(options_.tls, &args);
  return grpc::CreateCustomChannel(target, credentials_, args);
}

void Client::RetainChannels() {
  absl::flat_hash_set<std::string> live;
  for (ClientGroup* g : AllGroups()) {
    TableConstPtr table = g->table();
    if (table != nullptr) {
      for (const Member& m : table->members()) {
        live.insert(m.backend.address);
      }
    }
    for (const std::string& a : g->fallback_addresses_) {
      live.insert(a);
    }
  }
  channels_.Retain(live);
}

void Client::HandleUpdate(ClientGroup* group, const v1::GroupUpdate& update,
                          grpc::ClientContext* context) {
  const WatchedTable::Result result = group->watched_.Apply(update);
  switch (result.outcome) {
    case WatchedTable::Outcome::kApplied: {
      group->need_full_ = false;
      group->PublishTable(group->watched_.table(), update.server_id());
      {
        aside::MutexLock lock(&mu_);
        ++stats_.updates_applied;
      }
      RetainChannels();
      break;
    }
    case WatchedTable::Outcome::kUnchanged: {
      aside::MutexLock lock(&group->mu_);
      group->removed_ = false;
      group->missing_ = absl::OkStatus();
      break;
    }
    case WatchedTable::Outcome::kStale:
      break;
    case WatchedTable::Outcome::kRejected: {
      group->rejected_.fetch_add(1, std::memory_order_relaxed);
      {
        aside::MutexLock lock(&mu_);
        ++stats_.updates_rejected;
      }
      Log(absl::StrCat("event=table.rejected ", result.error.message(),
                       "; generation ", group->watched_.generation(),
                       " keeps serving"));
      break;
    }
    case WatchedTable::Outcome::kNeedFull:
      group->need_full_ = true;
      Log(absl::StrCat("event=table.resync ", result.error.message()));
      {
        aside::MutexLock lock(&mu_);
        restart_ = true;
      }
      context->TryCancel();
      break;
    case WatchedTable::Outcome::kRemoved: {
      Log(absl::StrCat("event=group.removed group '", group->name_,
                       "' was deleted on the server",
                       group->watched_.table() != nullptr
                           ? absl::StrCat("; generation ",
                                          group->watched_.generation(),
                                          " keeps serving")
                           : std::string()));
      aside::MutexLock lock(&group->mu_);
      group->removed_ = true;
      if (group->watched_.table() == nullptr && group->fallback_ == nullptr) {
        group->missing_ = absl::NotFoundError(absl::StrCat(
            "group '", group->name_, "' was deleted on the aside server"));
      }
      group->retry_at_ =
          MonotonicNanos() + ToNanos(options_.missing_group_retry);
      break;
    }
  }
}

bool Client::MarkMissing(const std::vector<ClientGroup*>& watched,
                         const grpc::Status& status) {
  bool any = false;
  for (ClientGroup* g : watched) {
    if (status.error_message().find(absl::StrCat("'", g->name_, "'")) ==
        std::string::npos) {
      continue;
    }
    any = true;
    aside::MutexLock lock(&g->mu_);
    g->retry_at_ = MonotonicNanos() + ToNanos(options_.missing_group_retry);
    if (g->watched_.table() != nullptr) {
      g->removed_ = true;
    } else if (g->fallback_ == nullptr) {
      g->missing_ = absl::NotFoundError(absl::StrCat(
          "group '", g->name_, "' not found on aside server(s) ",
          TargetsText()));
    }
  }
  if (any) {
    Log(absl::StrCat("event=group.not_found ", status.error_message()));
  }
  return any;
}

void Client::CheckMissingRetries() {
  const int64_t now = MonotonicNanos();
  bool due = false;
  for (ClientGroup* g : AllGroups()) {
    aside::MutexLock lock(&g->mu_);
    if (g->retry_at_ != 0 && now >= g->retry_at_) {
      g->retry_at_ = 0;
      due = true;
    }
  }
  if (due) {
    RestartWatch();
  }
}

void Client::WatchLoop() {
  Backoff backoff(options_.backoff);
  bool connected = false;
  while (true) {
    std::vector<ClientGroup*> watched;
    std::string target;
    {
      aside::MutexLock lock(&mu_);
      if (stopping_) {
        return;
      }
      restart_ = false;
      for (const auto& [name, g] : groups_) {
        if (!g->name_status_.ok()) {
          continue;
        }
        aside::MutexLock glock(&g->mu_);
        if (g->retry_at_ == 0) {
          watched.push_back(g.get());
        }
      }
      if (watched.empty()) {
        auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return restart_ || stopping_;
        };
        mu_.Await(aside::Cond(&wake));
        continue;
      }
      target = options_.targets[target_index_ % options_.targets.size()];
    }
    std::sort(watched.begin(), watched.end(),
              [](ClientGroup* a, ClientGroup* b) { return a->name_ < b->name_; });
    v1::WatchRequest request;
    absl::flat_hash_map<std::string, ClientGroup*> by_name;
    for (ClientGroup* g : watched) {
      request.add_groups(g->name_);
      by_name[g->name_] = g;
      if (g->watched_.table() != nullptr && !g->need_full_) {
        (*request.mutable_known_generations())[g->name_] =
            g->watched_.generation();
      }
    }
    request.set_subscriber(reporter_);

    auto stub = v1::LoadBalancer::NewStub(MakeChannel(target));
    grpc::ClientContext context;
    {
      aside::MutexLock lock(&mu_);
      if (stopping_) {
        return;
      }
      if (restart_) {
        continue;
      }
      watch_context_ = &context;
      ++stats_.watch_attempts;
    }
    std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> reader =
        stub->Watch(&context, request);
    v1::GroupUpdate update;
    bool delivered = false;
    while (reader->Read(&update)) {
      if (!delivered) {
        delivered = true;
        backoff.Reset();
        {
          aside::MutexLock lock(&mu_);
          ++stats_.watch_connected;
          last_error_.clear();
        }
        if (!connected) {
          connected = true;
          Log(absl::StrCat("event=watch.connected target=", target,
                           " groups=", watched.size()));
        }
      }
      auto it = by_name.find(update.group());
      if (it != by_name.end()) {
        HandleUpdate(it->second, update, &context);
      }
    }
    const grpc::Status status = reader->Finish();
    bool restart = false;
    {
      aside::MutexLock lock(&mu_);
      watch_context_ = nullptr;
      if (stopping_) {
        return;
      }
      restart = restart_;
    }
    if (restart) {
      continue;
    }
    if (status.error_code() == grpc::StatusCode::NOT_FOUND &&
        MarkMissing(watched, status)) {
      continue;
    }
    if (status.ok()) {
      // The server ended the stream: every group on it was deleted.
      continue;
    }
    const std::string error = absl::StrCat(target, ": ", StatusText(status));
    const absl::Duration delay = backoff.Next();
    if (connected || delivered) {
      Log(absl::StrCat("event=watch.disconnected ", error,
                       "; last tables keep serving; retry in ",
                       absl::FormatDuration(delay)));
    }
    connected = false;
    aside::MutexLock lock(&mu_);
    last_error_ = error;
    ++target_index_;
    mu_.AwaitWithTimeout(aside::Cond(&stopping_), delay);
  }
}

bool Client::CollectReport(v1::LoadReport* report,
                           std::vector<Reported>* sent) {
  report->set_reporter(reporter_);
  if (!options_.locality.empty()) {
    ToProto(options_.locality, report->mutable_reporter_locality());
  }
  for (ClientGroup* g : AllGroups()) {
    if (!g->name_status_.ok()) {
      continue;
    }
    TableConstPtr table = g->table();
    aside::MutexLock lock(&g->mu_);
    for (const auto& [address, stats] : g->stats_) {
      int64_t in_flight = 0;
      if (table != nullptr) {
        const int64_t index = table->Find(address);
        if (index >= 0) {
          in_flight = std::max<int64_t>(
              0, table->member(static_cast<uint32_t>(index)).load->in_flight());
        }
      }
      const uint64_t requests = stats->requests.load(std::memory_order_relaxed);
      if (requests == stats->reported_requests.load(std::memory_order_relaxed) &&
          in_flight == 0) {
        continue;
      }
      v1::BackendLoad* load = report->add_loads();
      load->set_group(g->name_);
      load->set_address(address);
      const uint64_t failures = stats->failures.load(std::memory_order_relaxed);
      load->set_requests(requests);
      load->set_failures(std::min(failures, requests));
      ToProto(absl::Nanoseconds(static_cast<int64_t>(
                  stats->latency_sum_nanos.load(std::memory_order_relaxed))),
              load->mutable_latency_sum());
      ToProto(absl::Nanoseconds(static_cast<int64_t>(
                  stats->first_byte_sum_nanos.load(std::memory_order_relaxed))),
              load->mutable_first_byte_latency_sum());
      load->set_in_flight(static_cast<uint64_t>(in_flight));
      load->set_consecutive_failures(
          stats->consecutive_failures.load(std::memory_order_relaxed));
      load->set_reset(stats->reset_pending);
      sent->push_back({stats, requests});
    }
  }
  return report->loads_size() > 0;
}

void Client::ReportLoop() {
  Backoff backoff(options_.backoff);
  const absl::Duration tick = absl::Milliseconds(250);
  const int64_t interval = ToNanos(options_.report_interval);
  int64_t next_report = MonotonicNanos() + interval;
  int64_t next_attempt = 0;
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<v1::LoadBalancer::Stub> stub;
  std::unique_ptr<grpc::ClientWriter<v1::LoadReport>> writer;
  v1::ReportLoadResponse response;
  int writes_ok = 0;
  bool said_unavailable = false;
  bool said_failed = false;
  auto close = [&]() -> grpc::Status {
    grpc::Status status = writer->Finish();
    {
      aside::MutexLock lock(&mu_);
      report_context_ = nullptr;
    }
    writer.reset();
    stub.reset();
    context.reset();
    return status;
  };
  while (true) {
    {
      aside::MutexLock lock(&mu_);
      if (stopping_) {
        break;
      }
      mu_.AwaitWithTimeout(aside::Cond(&stopping_), tick);
      if (stopping_) {
        break;
      }
    }
    CheckMissingRetries();
    if (interval <= 0) {
      continue;
    }
    const int64_t now = MonotonicNanos();
    if (now < next_report) {
      continue;
    }
    next_report = now + interval;
    v1::LoadReport report;
    std::vector<Reported> sent;
    if (!CollectReport(&report, &sent)) {
      continue;
    }
    if (writer == nullptr) {
      if (now < next_attempt) {
        continue;
      }
      std::string target;
      context = std::make_unique<grpc::ClientContext>();
      {
        aside::MutexLock lock(&mu_);
        if (stopping_) {
          break;
        }
        target = options_.targets[target_index_ % options_.targets.size()];
        report_context_ = context.get();
      }
      stub = v1::LoadBalancer::NewStub(MakeChannel(target));
      response.Clear();
      writer = stub->ReportLoad(context.get(), &response);
      writes_ok = 0;
    }
    if (writer->Write(report)) {
      for (Reported& r : sent) {
        r.stats->reported_requests.store(r.requests, std::memory_order_relaxed);
        r.stats->reset_pending = false;
      }
      if (++writes_ok >= 2) {
        backoff.Reset();
        said_failed = false;
      }
      aside::MutexLock lock(&mu_);
      ++stats_.reports_sent;
      if (writes_ok >= 2) {
        stats_.reporting_unavailable = false;
      }
      continue;
    }
    const grpc::Status status = close();
    const absl::Duration delay = backoff.Next();
    next_attempt = MonotonicNanos() + ToNanos(delay);
    const bool unimplemented =
        status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
    {
      aside::MutexLock lock(&mu_);
      ++stats_.report_stream_failures;
      stats_.reporting_unavailable = unimplemented;
    }
    if (unimplemented) {
      if (!said_unavailable) {
        said_unavailable = true;
        Log("event=report.unavailable the server does not accept load "
            "reports (UNIMPLEMENTED); retrying with backoff");
      }
    } else if (!said_failed) {
      said_failed = true;
      Log(absl::StrCat("event=report.failed ", StatusText(status),
                       "; retry in ", absl::FormatDuration(delay)));
    }
  }
  if (writer != nullptr) {
    {
      aside::MutexLock lock(&mu_);
      report_context_ = nullptr;
    }
    context->TryCancel();
    writer->Finish();
  }
}

}  // namespace aside
