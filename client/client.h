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
// `wait_for_table` after the group was subscribed and then fails with
// UNAVAILABLE naming the servers and the last connection error.
//
// Deleted groups: when the server deletes a group (GroupRemoved) or does not
// know it, a group that already has a table keeps serving that table
// (fail-static: a mistaken deletion must not take callers down) and reports
// it through ClientGroup::removed() and the log; the stub asks for the
// group again every `missing_group_retry`, so a re-created group is picked
// up. A group that never had a table and has no fallback fails picks with
// NOT_FOUND.
//
// Threads: the Client runs two threads, one for the Watch stream (applies
// updates, builds tables) and one for load reports and retries. Group() and
// every ClientGroup and PickHandle method may be called from any thread.
#ifndef ASIDE_CLIENT_CLIENT_H_
#define ASIDE_CLIENT_CLIENT_H_

#include <grpcpp/support/status.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/sync.h"
#include "absl/time/time.h"
#include "client/backoff.h"
#include "client/channel_pool.h"
#include "client/credentials.h"
#include "client/watched_table.h"
#include "lib/backend.h"
#include "lib/clock.h"
#include "lib/load/load_tracker.h"
#include "lib/snapshot_cell.h"
#include "lib/table.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace aside {

struct ClientOptions {
  // Aside servers (replicas), gRPC target syntax ("host:port",
  // "dns:///aside.lb:50051"). Reconnects go round robin over them.
  std::vector<std::string> targets;
  // TLS to the Aside servers.
  TlsOptions tls;
  // Groups subscribed at creation; others are subscribed on first Group().
  std::vector<std::string> groups;
  // Static backends ("ip:port") per group, served round robin until the
  // group's first table arrives.
  std::map<std::string, std::vector<std::string>> fallback;
  // How long Pick waits for a group's first table (counted from the group's
  // subscription) when it has no fallback.
  absl::Duration wait_for_table = absl::Seconds(10);
  // Time source for latencies and deadlines (null: the system clock).
  const Clock* clock = nullptr;
  // Reconnect backoff of the Watch and ReportLoad streams.
  BackoffOptions backoff;
  // How often a deleted or unknown group is asked for again.
  absl::Duration missing_group_retry = absl::Seconds(5);
  // Load reports: reporter id (empty: "<hostname>-<pid>"), its locality,
  // and the interval (0 disables reporting).
  std::string reporter;
  Locality locality;
  absl::Duration report_interval = absl::Seconds(1);
  // Local ejection: after `local_ejection_failures` consecutive failures
  // recorded through PickHandle::Done, this stub stops picking the backend for
  // `local_ejection_time`, without waiting for the server's health checks
  // (a killed backend otherwise keeps failing calls until a probe notices).
  // A failure after that ejects it again at once; a success ends it. When
  // a pick finds only ejected backends it ignores ejections rather than
  // fail. 0 turns it off.
  uint32_t local_ejection_failures = 3;
  absl::Duration local_ejection_time = absl::Seconds(1);
  // Channels to backends (Client::channels()).
  ChannelPoolOptions backend_channels;
  // Where the stub logs (rejected tables, connection changes); null means
  // one line per event on stderr.
  std::function<void(absl::string_view)> log;
};

namespace client_internal {

// What the stub counts for one backend of one group: the load reports'
// cumulative counters. Written by PickHandle::Done on any thread (relaxed
// atomics), read by the reporter thread.
struct BackendStats {
  std::string address;
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> latency_sum_nanos{0};
  std::atomic<uint64_t> first_byte_sum_nanos{0};
  std::atomic<uint32_t> consecutive_failures{0};
  // Local ejection (ClientOptions): monotonic time until which picks avoid
  // the backend (0: not ejected), and the settings, fixed at creation.
  std::atomic<int64_t> ejected_until_nanos{0};
  uint32_t eject_after_failures = 0;
  int64_t eject_nanos = 0;
  // Reporter thread: requests at the last report; whether the next report
  // must set `reset` (counters restarted).
  std::atomic<uint64_t> reported_requests{0};
  bool reset_pending = true;
};

// What a pick reads: immutable, published as one object.
struct GroupSnapshot {
  TableConstPtr table;  // null: no table and no fallback yet
  // Per table member (same index).
  std::vector<std::shared_ptr<BackendStats>> stats;
  bool fallback = false;
};

}  // namespace client_internal

// The result of a pick: the backend to call. Call Done() when the call
// finishes; it records the outcome and latency into the backend's load
// (in-flight count, the policies' load models) and the next load report.
// If a PickHandle is destroyed without Done(), the destructor records the call as
// a failure ("abandoned": an early return or an exception path did not
// succeed) with the time elapsed so far, so the in-flight count never
// leaks. Move-only; the table it came from stays alive while it exists, so
// address(), locality() and metadata() stay valid, after Done() too. Done()
// records once; later calls do nothing. One thread uses a PickHandle at a time,
// any thread (an async completion) may call Done(); Done costs a clock
// read and a few relaxed atomics.
class PickHandle {
 public:
  PickHandle(PickHandle&& other) noexcept { *this = std::move(other); }
  PickHandle& operator=(PickHandle&& other) noexcept;
  PickHandle(const PickHandle&) = delete;
  PickHandle& operator=(const PickHandle&) = delete;
  ~PickHandle();

  absl::string_view address() const { return member_->backend.address; }
  const Locality& locality() const { return member_->backend.locality; }
  const std::map<std::string, std::string, std::less<>>& metadata() const {
    return member_->backend.metadata;
  }
  const Member& member() const { return *member_; }
  // Generation of the table picked from (0 for the fallback list).
  uint64_t generation() const;
  // True when the pick came from the static fallback list.
  bool from_fallback() const;

  // Marks the first response byte (a streaming call's first message): the
  // time to it feeds least_time `first_byte`. Only the first mark counts.
  // A call finished without a mark counts its completion as its first byte,
  // which is exact for unary calls.
  void FirstByte() noexcept;

  void Done(bool ok) noexcept;
  void Done(const absl::Status& status) noexcept { Done(status.ok()); }
  void Done(const grpc::Status& status) noexcept { Done(status.ok()); }

 private:
  friend class ClientGroup;
  PickHandle(std::shared_ptr<const client_internal::GroupSnapshot> keep,
       const Member* member, client_internal::BackendStats* stats,
       const Clock* clock, int64_t start_nanos) noexcept
      : keep_(std::move(keep)),
        member_(member),
        stats_(stats),
        clock_(clock),
        start_nanos_(start_nanos) {}
  void Record(bool ok, int64_t latency_nanos) noexcept;

  std::shared_ptr<const client_internal::GroupSnapshot> keep_;
  const Member* member_ = nullptr;
  client_internal::BackendStats* stats_ = nullptr;
  const Clock* clock_ = nullptr;
  int64_t start_nanos_ = 0;
  int64_t first_byte_nanos_ = -1;  // from start; -1 until FirstByte()
  bool done_ = false;
};

class Client;

// One subscribed group. Owned by its Client, valid for the Client's
// lifetime. Pick() is lock-free and allocation-free once the calling thread
// has seen the current table: a per-thread cache holds the table and is
// refreshed only when the group's version counter moves (one acquire load
// per pick), so picks never touch a shared reference count.
class ClientGroup {
 public:
  ClientGroup(const ClientGroup&) = delete;
  ClientGroup& operator=(const ClientGroup&) = delete;
  ~ClientGroup();

  const std::string& name() const { return name_; }

  // Picks a backend with the table's policy; `key` is for hash policies.
  // Errors: UNAVAILABLE when nothing can be picked (naming the group and its
  // counts) or when no table arrived within wait_for_table; NOT_FOUND when
  // the server does not know the group and there is no table or fallback;
  // INVALID_ARGUMENT for an invalid group name.
  absl::StatusOr<aside::PickHandle> Pick(absl::string_view key = {});

  // The table picks use now (null: none yet; the fallback's has generation 0).
  TableConstPtr table() const;
  // Generation of the last table received from a server (0: none).
  uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }
  // server_id of that table.
  std::string server_id() const;
  // Waits (bounded) until generation() >= `generation`; true on success.
  bool WaitForGeneration(uint64_t generation, absl::Duration timeout) const;
  // True after the server reported the group deleted (or unknown) while a
  // table was held; the table keeps serving.
  bool removed() const;
  // Updates rejected by validation so far.
  uint64_t rejected_updates() const {
    return rejected_.load(std::memory_order_relaxed);
  }

 private:
  friend class Client;
  ClientGroup(Client* client, std::string name, absl::Status name_status,
              std::vector<std::string> fallback, int64_t deadline_nanos);

  const std::shared_ptr<const client_internal::GroupSnapshot>& Local() const;
  const std::shared_ptr<const client_internal::GroupSnapshot>& Refresh(
      uint64_t version) const;
  absl::StatusOr<aside::PickHandle> PickFrom(
      const std::shared_ptr<const client_internal::GroupSnapshot>& snapshot,
      absl::string_view key);
  absl::StatusOr<aside::PickHandle> PickWithoutTable(absl::string_view key);
  // The first choice is locally ejected: another one, if any is not.
  static uint32_t AvoidEjected(const client_internal::GroupSnapshot& snapshot,
                               PickRequest request, uint32_t first,
                               int64_t now);

  // Watcher thread: publishes a table received from a server.
  void PublishTable(TableConstPtr table, const std::string& server_id);
  void Publish(std::shared_ptr<const client_internal::GroupSnapshot> next);

  Client* const client_;
  const std::string name_;
  const absl::Status name_status_;
  const uint64_t id_;
  const int64_t deadline_nanos_;

  // Pick path.
  std::atomic<uint64_t> version_{1};
  SnapshotCell<client_internal::GroupSnapshot> cell_;

  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> rejected_{0};
  LoadTracker loads_;
  TableConstPtr fallback_;
  std::vector<std::string> fallback_addresses_;

  // Watcher thread only.
  WatchedTable watched_;
  bool need_full_ = false;

  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<client_internal::BackendStats>>
      stats_ ABSL_GUARDED_BY(mu_);
  std::string server_id_ ABSL_GUARDED_BY(mu_);
  bool removed_ ABSL_GUARDED_BY(mu_) = false;
  // Set when the server does not know the group.
  absl::Status missing_ ABSL_GUARDED_BY(mu_);
  // Monotonic time (client clock) of the next re-subscription attempt of a
  // deleted or unknown group; 0 when the group is being watched.
  int64_t retry_at_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t published_version_ ABSL_GUARDED_BY(mu_) = 1;
};

class Client {
 public:
  // Validates the options (targets, fallback addresses, TLS files, group
  // names) and starts the stub's threads. Never blocks on the network.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();

  // The group, subscribed on first use. Never null; an invalid name gives a
  // group whose picks fail with INVALID_ARGUMENT.
  ClientGroup* Group(absl::string_view name);

  // Channels to backends, evicted when their backends leave every table.
  ChannelPool& channels() { return channels_; }

  struct Stats {
    uint64_t watch_attempts = 0;
    uint64_t watch_connected = 0;   // streams that delivered an update
    uint64_t updates_applied = 0;
    uint64_t updates_rejected = 0;
    uint64_t reports_sent = 0;
    uint64_t report_stream_failures = 0;
    bool reporting_unavailable = false;  // the server answered UNIMPLEMENTED
    std::string last_error;
  };
  Stats stats() const;

  const ClientOptions& options() const { return options_; }
  const Clock& clock() const { return *clock_; }
  const std::string& reporter() const { return reporter_; }

 private:
  friend class ClientGroup;
  Client(ClientOptions options,
         std::shared_ptr<grpc::ChannelCredentials> credentials);

  ClientGroup* GroupLocked(absl::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WatchLoop();
  void ReportLoop();
  // Asks the watcher to re-subscribe now (a new group, a group that needs a
  // full table, a retry of a deleted group).
  void RestartWatch();
  std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) const;
  void Log(absl::string_view line) const;
  // Counters for one backend, with this client's local ejection settings.
  std::shared_ptr<client_internal::BackendStats> NewStats(
      const std::string& address) const;
  std::string TargetsText() const;
  void RetainChannels();
  void HandleUpdate(ClientGroup* group, const v1::GroupUpdate& update,
                    grpc::ClientContext* context);
  // Marks the groups a NOT_FOUND status names; true if any.
  bool MarkMissing(const std::vector<ClientGroup*>& watched,
                   const grpc::Status& status);
  void CheckMissingRetries();
  std::vector<ClientGroup*> AllGroups() const;
  // Builds the next load report; `sent` receives what to mark reported.
  struct Reported {
    std::shared_ptr<client_internal::BackendStats> stats;
    uint64_t requests = 0;
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
