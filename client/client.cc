#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/clock_wait.h"
#include "client/credentials.h"
#include "client/pick_clock.h"

namespace aside {

using client_internal::BackendStats;

namespace {

std::string DefaultReporter() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    std::snprintf(host, sizeof(host), "unknown");
  }
  return absl::StrCat(host, "-", getpid());
}

}  // namespace

std::string Client::StatusText(const grpc::Status& s) {
  return absl::StrCat(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
      ": ", s.error_message());
}

std::shared_ptr<BackendStats> Client::NewStats(
    const std::string& address) const {
  auto stats = std::make_shared<BackendStats>();
  stats->address = address;
  stats->eject_after_failures = options_.local_ejection_failures;
  stats->eject_nanos = absl::ToInt64Nanoseconds(options_.local_ejection_time);
  return stats;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  client_internal::CalibratePickTsc();
  if (options.targets.empty()) {
    return absl::InvalidArgumentError(
        "targets: at least one server is required");
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
      const std::string field =
          absl::StrCat("fallback['", group, "'][", i, "]");
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
  if (options.cache_max_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("cache_max_age: must be positive");
  }
  if (options.cache_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("cache_wait: negative");
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
  std::vector<std::optional<client_internal::CachedTable>> cached;
  for (const std::string& name : client->options_.groups) {
    cached.push_back(client->LoadCache(name));
  }
  {
    aside::MutexLock lock(&client->mu_);
    for (size_t i = 0; i < client->options_.groups.size(); ++i) {
      client->GroupLocked(client->options_.groups[i], std::move(cached[i]));
    }
  }
  client->watcher_ = std::thread([c = client.get()] { c->WatchLoop(); });
  client->reporter_thread_ =
      std::thread([c = client.get(), now = client->clock_->NowNanos()] {
        c->ReportLoop(now);
      });
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
  {
    aside::MutexLock lock(&mu_);
    auto it = groups_.find(name);
    if (it != groups_.end()) {
      return it->second.get();
    }
  }
  // A new group: its cache file is read without the lock.
  std::optional<client_internal::CachedTable> cached = LoadCache(name);
  aside::MutexLock lock(&mu_);
  return GroupLocked(name, std::move(cached));
}

ClientGroup* Client::GroupLocked(
    absl::string_view name,
    std::optional<client_internal::CachedTable> cached) {
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
  const int64_t now = clock_->NowNanos();
  const int64_t deadline =
      now + absl::ToInt64Nanoseconds(options_.wait_for_table);
  const int64_t cache_deadline =
      std::min(deadline, now + absl::ToInt64Nanoseconds(options_.cache_wait));
  auto group = std::unique_ptr<ClientGroup>(
      new ClientGroup(this, std::string(name), name_status, std::move(fallback),
                      deadline, cache_deadline, std::move(cached)));
  ClientGroup* raw = group.get();
  groups_.emplace(std::string(name), std::move(group));
  if (!raw->cache_error_.ok()) {
    RefuseCacheLocked(name, raw->cache_path_, raw->cache_error_.message());
  }
  if (raw->from_cache()) {
    NoteCacheServedLocked(*raw);
  }
  if (name_status.ok()) {
    restart_ = true;
    if (watch_context_ != nullptr) {
      watch_context_->TryCancel();
    }
  }
  return raw;
}

std::optional<client_internal::CachedTable> Client::LoadCache(
    absl::string_view group) {
  if (options_.cache_dir.empty() || !ValidateGroupName(group).ok()) {
    return std::nullopt;
  }
  const std::string path =
      client_internal::CacheFilePath(options_.cache_dir, group);
  absl::StatusOr<std::string> bytes = client_internal::ReadCacheFile(path);
  absl::Status status = bytes.status();
  if (bytes.ok()) {
    client_internal::CacheExpectation expect;
    expect.group = std::string(group);
    expect.targets = options_.targets;
    expect.now = clock_->WallNow();
    expect.max_age = options_.cache_max_age;
    absl::StatusOr<client_internal::CachedTable> cached =
        client_internal::DecodeCacheFile(*bytes, expect);
    if (cached.ok()) {
      return *std::move(cached);
    }
    status = cached.status();
  } else if (absl::IsNotFound(status)) {
    return std::nullopt;  // nothing cached yet
  }
  aside::MutexLock lock(&mu_);
  RefuseCacheLocked(group, path, status.message());
  return std::nullopt;
}

void Client::RefuseCacheLocked(absl::string_view group, const std::string& path,
                               absl::string_view reason) {
  Log(absl::StrCat("event=client.cache_refused group=", group, " file=", path,
                   " reason=\"", reason, "\""));
  ++stats_.cache_refused;
}

void Client::NoteCacheServedLocked(const ClientGroup& group) {
  const absl::Duration age =
      std::max(clock_->WallNow() - group.cache_written_, absl::ZeroDuration());
  Log(absl::StrCat("event=client.table_from_cache group=", group.name_,
                   " generation=", group.cached_->generation(), " age_s=",
                   absl::ToInt64Seconds(age), " file=", group.cache_path_,
                   "; until a server's table arrives"));
  ++stats_.tables_from_cache;
}

void Client::CountCacheWrite(bool ok) {
  aside::MutexLock lock(&mu_);
  ++(ok ? stats_.cache_writes : stats_.cache_write_failures);
}

bool Client::ServeDueCaches(const std::vector<ClientGroup*>& groups,
                            int64_t until) {
  int64_t due = until;
  bool pending = false;
  for (ClientGroup* g : groups) {
    if (g->CachePending() && g->cache_deadline_nanos_ <= due) {
      due = g->cache_deadline_nanos_;
      pending = true;
    }
  }
  if (!pending) {
    return true;
  }
  {
    aside::MutexLock lock(&mu_);
    client_internal::AwaitUntil(mu_, aside::Cond(&stopping_), *clock_, due);
    if (stopping_) {
      return false;
    }
  }
  const int64_t now = clock_->NowNanos();
  for (ClientGroup* g : groups) {
    if (now >= g->cache_deadline_nanos_) {
      g->ServeCache();
    }
  }
  return true;
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

Client::Stats Client::stats() const {
  aside::MutexLock lock(&mu_);
  return StatsLocked();
}

Client::Stats Client::StatsLocked() const {
  Stats s = stats_;
  s.last_error = last_error_;
  return s;
}

bool Client::AwaitStats(const std::function<bool(const Stats&)>& done,
                        absl::Duration timeout) const {
  aside::MutexLock lock(&mu_);
  auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done(StatsLocked());
  };
  return mu_.AwaitWithTimeout(aside::Cond(&holds), timeout);
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

client_internal::SharedChannels::Lease Client::LeaseChannel(
    const std::string& target) const {
  if (!options_.share_connections) {
    return client_internal::SharedChannels::Unshared(MakeChannel(target));
  }
  // Everything MakeChannel's channel depends on besides the target.
  const TlsOptions& tls = options_.tls;
  const std::string key =
      absl::StrCat(target, "\n", tls.enabled, "\n", tls.ca_file, "\n",
                   tls.cert_file, "\n", tls.key_file, "\n", tls.server_name,
                   "\n", absl::ToInt64Milliseconds(tls.reload_interval));
  return client_internal::SharedChannels::Process().Acquire(
      key, options_.streams_per_connection,
      [this, &target] { return MakeChannel(target); });
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

}  // namespace aside
