// A client of etcd v3 (the 3.4 API) over gRPC, for the fleet store (DESIGN.md
// §11): keyed reads at a revision, writes and transactions that report the
// revision they created, leases kept alive in the background, and watches of
// a prefix that survive the loss of a member.
//
// What the store builds on it:
//   (a) a consistent snapshot of a prefix: Range(prefix) returns every key
//       and the revision R they were all read at (pages are read at R too);
//   (b) the changes after it: Watch({prefix, R + 1}) delivers every later
//       event in revision order, with no gap and no repeat, across member
//       failures; when the history it needs is compacted it says so
//       (on_compacted) and the store re-reads a snapshot;
//   (c) conditional writes: Txn with Compare::ModRevision(key, seen) fails
//       (succeeded = false) when another writer got there first, and returns
//       the revision of the write when it succeeds;
//   (d) create-if-absent: CreateIfAbsent (a Txn on create_revision = 0) for a
//       key only one replica may hold;
//   (e) leases for membership keys: LeaseGrant, Put(..., lease), KeepAlive
//       (which reports the loss of the lease) and LeaseRevoke.
//
// Endpoints and failover. One gRPC channel per endpoint, not one channel
// over every address: the client decides which member serves a call, so it
// can (1) leave a member that answers slowly or not at all (a member cut off
// from the quorum still accepts connections), which gRPC's pick_first would
// keep using; (2) name the member in every error; (3) know whether a write
// was sent at all, which decides whether it may be retried elsewhere. Calls
// go to the endpoint that last answered. Until one has, they go to the
// first one listed (EndpointOrder::kListed) or, by default (kSpread), to
// the one at index hash(host name, process id) % endpoints: clients on
// different hosts or processes given the same list spread over the
// members instead of all leaning on the first one (and all stalling
// together when it freezes); a client restarted with the same host name
// and process id (a container's pid 1) starts where it did before.
//
// A call first waits up to dial_timeout for that endpoint's connection (one
// immediate reconnection attempt, past gRPC's backoff, when the last one
// failed); a member it cannot reach is skipped (nothing was sent). Reads
// that then fail with UNAVAILABLE or DEADLINE_EXCEEDED are retried on the
// next endpoint, each attempt getting a share of what is left of
// request_timeout. Writes are retried elsewhere only when the member refused
// them unapplied (no leader); after any other failure the write may or may
// not have been applied, and the error says so rather than apply it twice. A
// conditional Txn is safe for the caller to retry: it fails its comparison if
// the first attempt was applied.
//
// A watch that had to leave its first member (the home: the one calls
// start at, above) asks the home every kWatchHomeCheck whether it answers a
// linearizable read (so it has a leader) within dial_timeout, and returns
// to it when it does, resuming from the next revision: failovers do not
// leave every replica's watches on the one member that stayed up, to
// stall together when that one freezes.
//
// A member that stops answering but keeps its connections open (a stopped
// process, a partition that drops packets) is found on three paths:
//   - a watch that heard nothing from its member for watch_probe_interval
//     asks it for a progress report (WatchRequest.progress_request, etcd
//     3.4); when neither that nor the creation of the watch is answered
//     within dial_timeout, the watch leaves the member for the next one
//     (resuming from the next revision; calls move off it too). A watch
//     thus notices a frozen member within watch_probe_interval +
//     dial_timeout (2.5 s by default) whatever the keep-alive settings.
//     The answers only prove the member alive: etcd 3.4 may send one
//     ahead of events still queued, so they never advance the revision.
//   - a lease renewal, like a read, gets a share of the time left before
//     the lease expires and moves to the next member after it;
//   - HTTP/2 keep-alive pings (keepalive_time, keepalive_timeout) end
//     every call and stream on a connection that stopped answering.
// Every call and stream also asks its member to refuse it when the member
// has no leader (gRPC metadata hasleader: true): a member cut off from the
// quorum ends watches and keep-alives instead of serving a stale view.
//
// Errors are absl::Status with etcd's gRPC code kept; the message names the
// endpoint and the call ("etcd 127.0.0.1:2379: Txn: ..."), or every endpoint
// tried when none answered. Reading a compacted revision is OUT_OF_RANGE.
//
// Threads. EtcdClient is thread-safe: any thread may make any call, and a
// call blocks for at most request_timeout, connecting and failover
// included. A Watch and a LeaseKeepAlive each run on a thread of their
// own and invoke their callbacks there, one at a time; a callback must not
// destroy its own Watch or LeaseKeepAlive. Both may outlive the client that
// started them (they share its channels).
#ifndef ASIDE_SERVER_STORE_ETCD_ETCD_CLIENT_H_
#define ASIDE_SERVER_STORE_ETCD_ETCD_CLIENT_H_

#include <grpcpp/support/channel_arguments.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace aside::server::etcd {

struct TlsOptions {
  // PEM files. Without ca_file the system roots verify the members; cert and
  // key are the client's own (mutual TLS), both or neither.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// How often a watch away from its home member asks whether it may return
// (see "Endpoints and failover" above).
inline constexpr absl::Duration kWatchHomeCheck = absl::Seconds(2);

// Where calls start before any endpoint answered (see "Endpoints and
// failover" above).
enum class EndpointOrder {
  kSpread,  // at hash(host name, process id) % endpoints
  kListed,  // at the first endpoint
};

struct EtcdClientOptions {
  // The members' client URLs as host:port (no scheme). Calls that fail
  // over go on in this order, from where they started (endpoint_order).
  std::vector<std::string> endpoints;
  // How long a call waits for a connection to one endpoint before trying the
  // next.
  absl::Duration dial_timeout = absl::Seconds(2);
  // The deadline of each call, failover included.
  absl::Duration request_timeout = absl::Seconds(5);
  // Without it, plaintext.
  std::optional<TlsOptions> tls;
  // With a username, the client logs in (Auth.Authenticate) and sends the
  // token with every call, logging in again when a member forgets it.
  std::string username;
  std::string password;
  // HTTP/2 pings that find a member that stopped answering on an otherwise
  // idle connection (a watch waiting for events). etcd refuses pings more
  // often than every 5 s unless --grpc-keepalive-min-time says otherwise
  // (and closes the connection of a client that sends them).
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // How long a watch waits without hearing from its member before asking it
  // for a progress report, which must come within dial_timeout. Zero: never
  // (a frozen member is then found by the keep-alive pings only).
  absl::Duration watch_probe_interval = absl::Milliseconds(500);
  EndpointOrder endpoint_order = EndpointOrder::kSpread;
  // Longest pause between reconnection attempts to a member that is down.
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
  // Range reads a prefix in pages of this many keys (all at one revision).
  int64_t range_page_size = 1000;
  // The largest response accepted from a member. A page of groups is a few
  // MB at most; a member (or something posing as one) that sends more
  // fails the call instead of growing the server.
  uint32_t max_response_bytes = 64 << 20;
  // Plaintext only: sets `args` for a channel to `address` and returns the
  // target to dial instead of it (the server's BackendRelay, which bounds
  // each response before gRPC buffers it: server/net/backend_relay.h).
  // Empty: dial `address` itself, with gRPC's own receive limit.
  std::function<std::string(const std::string& address,
                            grpc::ChannelArguments* args)>
      route_channel;
};

// One key as stored.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // writes since creation
  int64_t lease = 0;    // 0: none

  bool operator==(const KeyValue&) const = default;
};

// Every key of a prefix as of one revision.
struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key
  int64_t revision = 0;       // the store's revision the keys were read at
};

// One condition of a transaction. A key that does not exist has version,
// create_revision and mod_revision 0.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };

  std::string key;
  Target target = Target::kModRevision;
  Result result = Result::kEqual;
  int64_t number = 0;  // operand of every target but kValue
  std::string value;   // operand of kValue

  // The key was last written at `revision` (0: it does not exist).
  static Compare ModRevision(std::string key, int64_t revision);
  static Compare CreateRevision(std::string key, int64_t revision);
  static Compare Absent(std::string key) { return CreateRevision(key, 0); }
  static Compare Value(std::string key, std::string value);
};

// One operation of a transaction branch.
struct Op {
  enum class Kind { kGet, kGetPrefix, kPut, kDelete, kDeletePrefix };

  Kind kind = Kind::kGet;
  std::string key;  // the prefix for k*Prefix
  std::string value;
  int64_t lease = 0;

  static Op Get(std::string key);
  static Op GetPrefix(std::string prefix);
  static Op Put(std::string key, std::string value, int64_t lease = 0);
  static Op Delete(std::string key);
  static Op DeletePrefix(std::string prefix);
};

struct TxnResult {
  bool succeeded = false;  // every comparison held; the success branch ran
  // The store's revision after the transaction: the revision of its writes
  // when it wrote anything.
  int64_t revision = 0;
  // One entry per operation of the branch that ran: the keys a kGet or
  // kGetPrefix read, empty for writes.
  std::vector<std::vector<KeyValue>> reads;
};

struct CreateResult {
  bool created = false;
  int64_t revision = 0;
  std::optional<KeyValue> existing;  // when not created: the holder
};

struct DeleteResult {
  int64_t deleted = 0;
  int64_t revision = 0;
};

struct Lease {
  int64_t id = 0;
  absl::Duration ttl;     // as granted by the server
  absl::Time granted_at;  // when the grant was sent (expiry counts from here)
};

struct Event {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  // For kDelete: the key, with mod_revision the revision of the deletion.
  KeyValue kv;
  std::optional<KeyValue> prev_kv;  // with WatchOptions::prev_kv
};

// The events of one or more whole revisions, in order. An empty batch is a
// progress report: nothing in the prefix changed up to `revision`.
struct WatchBatch {
  std::vector<Event> events;
  // Every change to the prefix up to this revision has now been delivered.
  int64_t revision = 0;
};

struct WatchOptions {
  std::string prefix;
  // First revision to deliver; 0 for changes from now on.
  int64_t start_revision = 0;
  bool prev_kv = false;
  // Ask the server for periodic empty batches while nothing changes.
  bool progress_notify = false;
};

struct WatchHandlers {
  // Every change, each exactly once, in revision order.
  absl::AnyInvocable<void(WatchBatch)> on_events;
  // The history from the next revision to deliver up to `compact_revision`
  // is gone: events were lost. Final: the watch stops after this; the
  // caller re-reads a snapshot and watches again from its revision + 1.
  absl::AnyInvocable<void(int64_t compact_revision)> on_compacted;
  // Optional, informational: the stream to a member ended (the status names
  // it); the watch is resuming from another endpoint.
  absl::AnyInvocable<void(const absl::Status&)> on_disconnected;
};

struct Shared;  // channels, stubs, the preferred endpoint, the auth token

// A watch of one prefix, delivering on its own thread; see WatchHandlers.
// Destroying it (or Stop) ends it and joins the thread.
class Watch {
 public:
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  void Stop();
  // The endpoint the watch is (or was last) connected to; empty before the
  // first connection.
  std::string endpoint() const;
  // The next revision the watch will deliver.
  int64_t next_revision() const;
  // Whether the stream to endpoint() is established (the server confirmed
  // the watcher).
  bool connected() const;

 private:
  friend class EtcdClient;
  Watch(std::shared_ptr<Shared> shared, WatchOptions options,
        WatchHandlers handlers);
  void Run();
  // Sleeps up to `d`; false when stopped.
  bool Pause(absl::Duration d);
  // On a thread of its own: asks a member that went silent for a progress
  // report and ends the stream of one that leaves the creation of the
  // watch or a report unanswered (EtcdClientOptions::watch_probe_interval);
  // away from the home member, ends the stream once the home answers.
  void Watchdog();
  // Whether the home member answers a linearizable read within
  // dial_timeout.
  bool HomeAnswers();
  // Under mu_: something the watchdog waits on changed.
  void Poke() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++changes_; }

  const std::shared_ptr<Shared> shared_;
  const WatchOptions options_;
  WatchHandlers handlers_;  // used on the thread only
  mutable Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string endpoint_ ABSL_GUARDED_BY(mu_);
  // The index of endpoint_, and when the watchdog next asks the home
  // member whether the watch may return (InfiniteFuture: at home, or not
  // connected). returning_home_: the watchdog ended the stream for that.
  size_t index_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time home_check_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool returning_home_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_revision_ ABSL_GUARDED_BY(mu_) = 0;
  // What the watchdog knows of the open stream. probe_ writes a progress
  // request on it; the watchdog calls it outside mu_ with probing_ set, and
  // Run resets it only once probing_ is false.
  absl::AnyInvocable<bool()> probe_ ABSL_GUARDED_BY(mu_);
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  // The last answer of any kind (or when the stream opened).
  absl::Time heard_at_ ABSL_GUARDED_BY(mu_);
  // When the answer the watch waits for was asked for: the confirmation of
  // the watch, or a progress report. InfiniteFuture: none awaited.
  absl::Time asked_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Why the watchdog ended the stream; empty while it has not.
  std::string stalled_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
  std::thread watchdog_;
};

// Renews a lease in the background, every third of its TTL, from any
// endpoint that answers. Reports the loss of the lease once, on its own
// thread: the server no longer knows it (NOT_FOUND), or no renewal succeeded
// before the lease's TTL ran out (UNAVAILABLE naming the endpoints). After
// that it stops renewing. Destroying it (or Stop) stops renewing without
// revoking: the lease then expires after its TTL.
class LeaseKeepAlive {
 public:
  ~LeaseKeepAlive();
  LeaseKeepAlive(const LeaseKeepAlive&) = delete;
  LeaseKeepAlive& operator=(const LeaseKeepAlive&) = delete;

  void Stop();
  // Whether the loss was reported.
  bool lost() const;
  // The latest local estimate of when the lease expires.
  absl::Time expiry() const;

 private:
  friend class EtcdClient;
  LeaseKeepAlive(std::shared_ptr<Shared> shared, Lease lease,
                 absl::AnyInvocable<void(absl::Status)> on_lost);
  void Run();
  bool Pause(absl::Duration d);

  const std::shared_ptr<Shared> shared_;
  const int64_t id_;
  absl::AnyInvocable<void(absl::Status)> on_lost_;  // used on the thread only
  mutable Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time expiry_ ABSL_GUARDED_BY(mu_);
  absl::Duration ttl_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class EtcdClient {
 public:
  // Checks the options and reads the TLS files; does not connect (the first
  // call does), so it succeeds while every member is down.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // One key at `revision` (0: newest); nullopt when it does not exist.
  absl::StatusOr<std::optional<KeyValue>> Get(std::string_view key,
                                              int64_t revision = 0);
  // Every key starting with `prefix`, as of one revision: `revision`, or
  // the newest when 0 (the result says which). Linearizable.
  absl::StatusOr<RangeResult> Range(std::string_view prefix,
                                    int64_t revision = 0);
  // Returns the revision of the write.
  absl::StatusOr<int64_t> Put(std::string_view key, std::string_view value,
                              int64_t lease = 0);
  absl::StatusOr<DeleteResult> Delete(std::string_view key);
  absl::StatusOr<DeleteResult> DeletePrefix(std::string_view prefix);
  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares,
                                const std::vector<Op>& success,
                                const std::vector<Op>& failure = {});
  // Writes `key` only if it does not exist; otherwise returns its holder.
  absl::StatusOr<CreateResult> CreateIfAbsent(std::string_view key,
                                              std::string_view value,
                                              int64_t lease = 0);
  // Discards history before `revision`; with `physical`, returns once the
  // answering member has removed it from disk.
  absl::Status Compact(int64_t revision, bool physical = false);

  // The server may grant a longer TTL than asked for (its minimum).
  absl::StatusOr<Lease> LeaseGrant(absl::Duration ttl);
  // Ends the lease and deletes its keys. Revoking an unknown lease is
  // NOT_FOUND.
  absl::Status LeaseRevoke(int64_t id);
  std::unique_ptr<LeaseKeepAlive> KeepAlive(
      const Lease& lease, absl::AnyInvocable<void(absl::Status)> on_lost);

  std::unique_ptr<Watch> WatchPrefix(WatchOptions options,
                                     WatchHandlers handlers);

  const std::vector<std::string>& endpoints() const;

  // The end of the key range holding every key that starts with `prefix`
  // ("\0", every key, for an empty prefix).
  static std::string PrefixEnd(std::string_view prefix);

 private:
  explicit EtcdClient(std::shared_ptr<Shared> shared);

  const std::shared_ptr<Shared> shared_;
};

}  // namespace aside::server::etcd

#endif  // ASIDE_SERVER_STORE_ETCD_ETCD_CLIENT_H_
