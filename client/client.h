// aside::Client: the C++ look-aside stub. It subscribes to groups over
// aside.v1.LoadBalancer/Watch, keeps each group's weight table fresh, picks
// locally with the same lib/ policies as the server, and reports load back
// over ReportLoad.
//
//   auto client = aside::Client::Create({.targets = {"127.0.0.1:50051"}});
//   aside::ClientGroup* group = (*client)->Group("payments");
//   absl::StatusOr<aside::PickHandle> pick = group->Pick(key);
//   if (pick.ok()) {
//     ... call pick->address() (ChannelPool gives a channel for it) ...
//     pick->Done(status);
//   }
//
// Fail-static: when every server is unreachable the last table keeps
// serving, indefinitely. Before the first table, a group's static fallback
// list (ClientOptions::fallback) serves; without one, Pick waits up to
// `wait_for_table` (on ClientOptions::clock, like every delay the stub
// keeps) after the group was subscribed and then fails with
// UNAVAILABLE naming the servers and the last connection error.
//
// Table cache (ClientOptions::cache_dir, client/table_cache.h): each
// group's last table from a server is also kept on disk, so that a stub
// started while no server answers serves it (ClientGroup::from_cache(),
// PickHandle::from_cache(), log line event=client.table_from_cache) until a
// server's first table replaces it. Precedence before that first table:
// the cached table, then the fallback list; a group without a fallback
// list waits `cache_wait` for a server before using its cached table.
//
// Absent groups: the server reports a group it does not have (unknown, or
// deleted) with a GroupRemoved update for that group alone; the stream, and
// every other group on it, carries on. A group that already has a table
// keeps serving it (fail-static: a mistaken deletion must not take callers
// down) and reports the absence through ClientGroup::removed() and the log.
// A group that never had a table and has no fallback fails picks with
// NOT_FOUND. The server keeps watching the name on the same stream and sends
// the group's full table when it is created; the stub does not re-subscribe.
//
// Threads: the Client runs two threads, one for the Watch stream (applies
// updates, builds tables) and one for load reports. Group() and
// every ClientGroup and PickHandle method may be called from any thread.
#ifndef ASIDE_CLIENT_CLIENT_H_
#define ASIDE_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "aside/v1/lookaside.pb.h"
#include "client/channel_pool.h"
#include "client/client_group.h"
#include "client/client_options.h"
#include "client/pick_handle.h"
#include "client/shared_channels.h"
#include "client/table_cache.h"
#include "lib/clock.h"
#include "lib/sync.h"

namespace grpc {
class Channel;
class ChannelCredentials;
class ClientContext;
class Status;
}  // namespace grpc

namespace aside {

class Client {
 public:
  // Validates the options (targets, fallback addresses, TLS files, group
  // names) and starts the stub's threads. Never blocks on the network.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();

  // The group, subscribed on first use (which re-opens the Watch stream with
  // the new group added; the groups already held resume from their
  // generations). Never null; an invalid name gives a group whose picks
  // fail with INVALID_ARGUMENT.
  ClientGroup* Group(absl::string_view name);

  // Channels to backends, evicted when their backends leave every table.
  ChannelPool& channels() { return channels_; }

  struct Stats {
    uint64_t watch_attempts = 0;
    uint64_t watch_connected = 0;  // streams that delivered an update
    uint64_t updates_applied = 0;
    uint64_t updates_rejected = 0;
    uint64_t reports_sent = 0;
    // Report intervals that passed with nothing to report (no traffic).
    uint64_t reports_skipped = 0;
    uint64_t report_stream_failures = 0;
    bool reporting_unavailable = false;  // the server answered UNIMPLEMENTED
    // Picks that found no table yet and waited for one (wait_for_table).
    uint64_t table_waits = 0;
    // The table cache (ClientOptions::cache_dir): files written and writes
    // that failed; files refused when a group was subscribed (each logged
    // as event=client.cache_refused); groups that served a cached table.
    uint64_t cache_writes = 0;
    uint64_t cache_write_failures = 0;
    uint64_t cache_refused = 0;
    uint64_t tables_from_cache = 0;
    std::string last_error;
  };
  Stats stats() const;
  // Waits until `done(stats())` holds, for at most `timeout` of real time
  // (a bound on the caller's wait, not part of the stub's schedule, so not
  // on the injected clock); returns whether it holds. `done` runs with the
  // client's lock held: it must only read the Stats.
  bool AwaitStats(const std::function<bool(const Stats&)>& done,
                  absl::Duration timeout) const;

  const ClientOptions& options() const { return options_; }
  const Clock& clock() const { return *clock_; }
  const std::string& reporter() const { return reporter_; }

 private:
  friend class ClientGroup;
  Client(ClientOptions options,
         std::shared_ptr<grpc::ChannelCredentials> credentials);

  // `cached`: the group's cache file, read by LoadCache without the lock
  // (unused when the group exists already).
  ClientGroup* GroupLocked(absl::string_view name,
                           std::optional<client_internal::CachedTable> cached =
                               std::nullopt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The table cache: reads and checks `group`'s file (nothing when the cache
  // is off, the name is invalid or there is no file; a refused file is
  // logged and counted). Must not hold mu_ (it reads a file).
  std::optional<client_internal::CachedTable> LoadCache(absl::string_view group)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RefuseCacheLocked(absl::string_view group, const std::string& path,
                         absl::string_view reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs and counts a group that started serving its cached table.
  void NoteCacheServedLocked(const ClientGroup& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountCacheWrite(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // The watcher thread, between connection attempts: serves the cached
  // tables of `groups` that are due, waiting for them up to `until` (on
  // the client's clock); false when the client is stopping.
  bool ServeDueCaches(const std::vector<ClientGroup*>& groups, int64_t until)
      ABSL_LOCKS_EXCLUDED(mu_);
  void WatchLoop();
  // `start_nanos`: when the client was created (its clock); the first
  // report is due one interval later.
  void ReportLoop(int64_t start_nanos);
  std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) const;
  // A lease on a connection to `target` for one stream: shared with the
  // process's other stubs (options_.share_connections) or its own.
  client_internal::SharedChannels::Lease LeaseChannel(
      const std::string& target) const;
  void Log(absl::string_view line) const;
  // Counters for one backend, with this client's local ejection settings.
  std::shared_ptr<client_internal::BackendStats> NewStats(
      const std::string& address) const;
  static std::string StatusText(const grpc::Status& s);
  Stats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string TargetsText() const;
  void RetainChannels();
  // Applies one update of the Watch stream; true when the group now holds
  // the update's generation (applied, or already held).
  bool HandleUpdate(ClientGroup* group, const v1::GroupUpdate& update,
                    grpc::ClientContext* context);
  std::vector<ClientGroup*> AllGroups() const;
  // Builds the next load report; `sent` receives what to mark reported.
  struct Reported {
    std::shared_ptr<client_internal::BackendStats> stats;
    uint64_t requests = 0;
    uint64_t orca_reports = 0;  // BackendStats::orca_reports sent
  };
  bool CollectReport(v1::LoadReport* report, std::vector<Reported>* sent);

  const ClientOptions options_;
  const Clock* const clock_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string reporter_;
  ChannelPool channels_;

  mutable aside::Mutex mu_;
  // unique_ptr: groups never move; never erased before ~Client.
  absl::flat_hash_map<std::string, std::unique_ptr<ClientGroup>> groups_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool restart_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* report_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t target_index_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);

  std::thread watcher_;
  std::thread reporter_thread_;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_CLIENT_H_
