// aside.v1.Admin: groups, backends, drains and targets at run time.
//
// Every mutation is a read-modify-write of one group (StoreSync::Mutate):
// the new definition is computed from the stored one and written on the
// condition that the store still holds exactly the revision it was computed
// from, then applied and acknowledged. A lost race is retried on the stored
// value for changes that commute (add, remove, drain or undrain named
// backends; delete) and ABORTED for those that replace fields
// (UpdateGroup) or carry the caller's expected_revision. Mutations of one
// group through one replica are serialised, and those that commute fold
// into one write (StoreSync::Mutate); mutations of different groups run at
// once, and their store writes share commits (StoreSync's GroupCommitter). A
// mutation that gives a group aliases runs alone, so that two at once cannot
// both claim one name. Groups declared in the config file are read-only here
// (FAILED_PRECONDITION naming the file).
//
// Threads: gRPC's callback threads call the RPC methods concurrently. Reads
// are handled inline (no reactor state outlives the call). Mutations wait
// for a store commit, and gRPC 1.51 runs callback handlers on a couple of
// threads only, so a mutation blocking one would hold up every other call
// and keep concurrent writes from ever meeting in one commit: they run on
// a MutationQueue (mutation_queue.h: up to kMutationWorkers threads of this
// service's own, started as concurrent mutations need them), which finish
// the call's reactor. While that queue is over its bounds a mutation is
// refused at once with RESOURCE_EXHAUSTED and a retry hint (trailing
// metadata grpc-retry-pushback-ms, which gRPC clients with a retry policy
// honour, and aside-retry-after-ms), and one whose deadline passed while it
// waited is answered DEADLINE_EXCEEDED without being made. Reads (GetGroup,
// ListGroups, ListTargets) take no lock of their own: they read published
// group snapshots. A mutation holds a MutationScope (shared, or alone for
// one that claims aliases) from the read of the current spec to the
// publication of the new one (mutation_mu_ only guards who holds which);
// the state store and the registry take their own locks inside it, never
// the other way round.
// set_grpclb_streams() is for wiring, before the server serves.
//
// Files: admin_service.cc (the calls' dispatch, admission and the write
// path, Mutate), admin_reads.cc, admin_writes.cc, admin_apply_changes.cc
// (the batch call); admin_common.h holds what they share.
#ifndef ASIDE_SERVER_API_ADMIN_SERVICE_H_
#define ASIDE_SERVER_API_ADMIN_SERVICE_H_

#include <prometheus/counter.h>

#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "aside/v1/admin.grpc.pb.h"
#include "lib/sync.h"
#include "server/api/drain_confirmations.h"
#include "server/api/mutation_queue.h"
#include "server/auth/admin_auth.h"
#include "server/base/metrics.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"
#include "server/load/orca_collector.h"
#include "server/store/store_sync.h"

namespace aside::server {

inline constexpr int kMaxBackendsPerRequest = 1000;
inline constexpr int kMaxChangesPerRequest = 1000;

class AdminService final : public v1::Admin::CallbackService {
 public:
  // Threads running mutations (see the file comment): the most writes
  // through one replica that can share a store commit.
  static constexpr int kMutationWorkers = 32;

  // The trailing metadata of a refusal's retry hint, in milliseconds.
  static constexpr char kRetryPushbackKey[] = "grpc-retry-pushback-ms";
  static constexpr char kRetryAfterKey[] = "aside-retry-after-ms";

  // Every write goes through `store` (never null).
  // `queue`: the mutation queue's bounds (max_workers is kMutationWorkers).
  AdminService(GroupRegistry* groups, StoreSync* store, const AdminAuth* auth,
               Metrics* metrics, const LoadAggregator* loads = nullptr,
               const HealthRegistry* health = nullptr,
               MutationQueue::Options queue = {});
  // Finishes the mutations queued and in flight, then stops the workers.
  ~AdminService() override;

  grpc::ServerUnaryReactor* CreateGroup(grpc::CallbackServerContext* context,
                                        const v1::CreateGroupRequest* request,
                                        v1::Group* response) override;
  grpc::ServerUnaryReactor* UpdateGroup(grpc::CallbackServerContext* context,
                                        const v1::UpdateGroupRequest* request,
                                        v1::Group* response) override;
  grpc::ServerUnaryReactor* DeleteGroup(
      grpc::CallbackServerContext* context,
      const v1::DeleteGroupRequest* request,
      v1::DeleteGroupResponse* response) override;
  grpc::ServerUnaryReactor* GetGroup(grpc::CallbackServerContext* context,
                                     const v1::GetGroupRequest* request,
                                     v1::Group* response) override;
  grpc::ServerUnaryReactor* ListGroups(
      grpc::CallbackServerContext* context,
      const v1::ListGroupsRequest* request,
      v1::ListGroupsResponse* response) override;
  grpc::ServerUnaryReactor* AddBackends(grpc::CallbackServerContext* context,
                                        const v1::AddBackendsRequest* request,
                                        v1::Group* response) override;
  grpc::ServerUnaryReactor* RemoveBackends(
      grpc::CallbackServerContext* context,
      const v1::RemoveBackendsRequest* request, v1::Group* response) override;
  grpc::ServerUnaryReactor* DrainBackends(
      grpc::CallbackServerContext* context,
      const v1::DrainBackendsRequest* request, v1::Group* response) override;
  grpc::ServerUnaryReactor* ListTargets(
      grpc::CallbackServerContext* context,
      const v1::ListTargetsRequest* request,
      v1::ListTargetsResponse* response) override;

  grpc::ServerUnaryReactor* ListMembers(
      grpc::CallbackServerContext* context,
      const v1::ListMembersRequest* request,
      v1::ListMembersResponse* response) override;
  // Each group's changes run in order on one mutation worker, different
  // groups' on different workers (so their writes share commits); the last
  // to finish finishes the call. No worker waits for another.
  // Waits, without a thread, until every subscriber of the group on this
  // replica confirmed the generation (DrainConfirmations) and no reporting
  // stub has calls in flight to the addresses, or until the timeout (a
  // gRPC alarm). Confirmations and load reports of the group wake it.
  grpc::ServerUnaryReactor* WaitDrained(
      grpc::CallbackServerContext* context,
      const v1::WaitDrainedRequest* request,
      v1::WaitDrainedResponse* response) override;
  static constexpr absl::Duration kDefaultDrainWait = absl::Seconds(30);
  static constexpr absl::Duration kMaxDrainWait = absl::Minutes(10);

  // Who confirmed what (WaitDrained). Set once while wiring, before
  // serving; without it WaitDrained is UNIMPLEMENTED.
  void set_confirmations(DrainConfirmations* confirmations) {
    confirmations_ = confirmations;
  }

  grpc::ServerUnaryReactor* ApplyGroupChanges(
      grpc::CallbackServerContext* context,
      const v1::ApplyGroupChangesRequest* request,
      v1::ApplyGroupChangesResponse* response) override;

  // Fills ListMembers (the fleet membership, with the etcd store). Set once
  // while wiring, before serving; without it ListMembers is empty.
  using Members = std::function<void(v1::ListMembersResponse*)>;
  void set_members(Members members) { members_ = std::move(members); }

  // Counts the open grpclb streams of a group (GetGroup's
  // client_stats.streams). Set once while wiring, before serving.
  using GrpclbStreams = std::function<uint32_t(const std::string& group)>;
  void set_grpclb_streams(GrpclbStreams streams) {
    grpclb_streams_ = std::move(streams);
  }

  // The backends' ORCA reports (GetGroup's state[].orca). Set once while
  // wiring, before serving.
  void set_orca(const OrcaCollector* orca) { orca_ = orca; }
  // Once the gRPC server has shut down: waits for the mutation workers to
  // finish (a worker may still be returning from answering a call, which
  // touches the server) and joins them.
  void StopWorkers() { mutations_.Stop(); }

  // The operations without RPC plumbing (authorisation is the caller's).
  grpc::Status DoCreateGroup(const v1::CreateGroupRequest& request,
                             v1::Group* response);
  grpc::Status DoUpdateGroup(const v1::UpdateGroupRequest& request,
                             v1::Group* response);
  grpc::Status DoDeleteGroup(const v1::DeleteGroupRequest& request,
                             v1::DeleteGroupResponse* response);
  grpc::Status DoGetGroup(const v1::GetGroupRequest& request,
                          v1::Group* response);
  grpc::Status DoListGroups(const v1::ListGroupsRequest& request,
                            v1::ListGroupsResponse* response);
  grpc::Status DoListTargets(const v1::ListTargetsRequest& request,
                             v1::ListTargetsResponse* response);
  grpc::Status DoListMembers(const v1::ListMembersRequest& request,
                             v1::ListMembersResponse* response);
  grpc::Status DoAddBackends(const v1::AddBackendsRequest& request,
                             v1::Group* response);
  grpc::Status DoRemoveBackends(const v1::RemoveBackendsRequest& request,
                                v1::Group* response);
  grpc::Status DoDrainBackends(const v1::DrainBackendsRequest& request,
                               v1::Group* response);
  // One change of ApplyGroupChanges, on the calling thread; fills `result`
  // (its group, code and message, and on success the generation and store
  // revision).
  void DoGroupChange(const v1::GroupChange& change,
                     v1::GroupChangeResult* result);

 private:
  // INVALID_ARGUMENT for a bad name, FAILED_PRECONDITION for a group the
  // config file declares; whether the group exists is the edit's to decide
  // (StoreSync::Mutate reads it from the store when this replica has not
  // seen it).
  grpc::Status CheckMutable(const std::string& name) const;
  // One read-modify-write of a store-owned group (StoreSync::Mutate);
  // answers with the group as published in `response` (unless null), the
  // generation of a delete and the store revision of the write.
  grpc::Status Mutate(const std::string& name, int64_t expected_revision,
                      StoreSync::OnConflict on_conflict,
                      const StoreSync::Edit& edit, v1::Group* response,
                      uint64_t* deleted_generation = nullptr,
                      int64_t* revision = nullptr);
  // Finds each of `addresses` in a store-owned group and applies `edit` to
  // it (NOT_FOUND naming the first missing one), then writes the result.
  grpc::Status EditBackends(
      const std::string& group_name,
      const google::protobuf::RepeatedPtrField<std::string>& addresses,
      int64_t expected_revision,
      const std::function<void(GroupSpec&, std::vector<Backend>::iterator)>&
          edit,
      v1::Group* response);
  void Describe(const Group& group, bool with_backends, v1::Group* out) const;

  // Whether the caller holds `role`; for DrainBackends, also a self-drain
  // credential draining only its own address (AdminAuth::AuthorizeDrain).
  template <typename Request>
  grpc::Status Authorize(const grpc::ServerContextBase& context, AdminRole role,
                         const Request& request) const;
  grpc::Status Authorize(const grpc::ServerContextBase& context, AdminRole role,
                         const v1::DrainBackendsRequest& request) const;
  grpc::Status Authorize(const grpc::ServerContextBase& context, AdminRole role,
                         const v1::WaitDrainedRequest& request) const;

  // WaitDrained's checks: INVALID_ARGUMENT, NOT_FOUND or
  // FAILED_PRECONDITION; on success the generation to wait for and the
  // addresses in canonical form.
  grpc::Status CheckDrainWait(const v1::WaitDrainedRequest& request,
                              uint64_t* generation,
                              std::vector<std::string>* addresses,
                              absl::Duration* timeout) const;

  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Handle(
      grpc::CallbackServerContext* context, const char* method, AdminRole role,
      const Request* request, Response* response,
      grpc::Status (AdminService::*op)(const Request&, Response*));

  // Refuses `jobs` mutations when the queue is over its bounds: the
  // status to finish the call with, its retry hint added to `context`.
  grpc::Status AdmitMutations(grpc::CallbackServerContext* context,
                              size_t jobs);

  GroupRegistry* const groups_;
  StoreSync* const store_;
  const AdminAuth* const auth_;
  Metrics* const metrics_;
  const LoadAggregator* const loads_;
  const HealthRegistry* const health_;
  GrpclbStreams grpclb_streams_;
  const OrcaCollector* orca_ = nullptr;
  DrainConfirmations* confirmations_ = nullptr;
  Members members_;
  // With `claims_aliases`, no other mutation at all (see the file
  // comment); without, any number (StoreSync orders those of one name).
  class MutationScope {
   public:
    MutationScope(AdminService* admin, bool claims_aliases);
    ~MutationScope();
    MutationScope(const MutationScope&) = delete;
    MutationScope& operator=(const MutationScope&) = delete;

   private:
    AdminService* const admin_;
    const bool claims_aliases_;
  };
  // Who holds a MutationScope; taken before the store's and the registry's
  // locks, and never held while a mutation runs.
  aside::Mutex mutation_mu_;
  int sharing_ ABSL_GUARDED_BY(mutation_mu_) = 0;  // scopes not claiming
  bool claiming_ ABSL_GUARDED_BY(mutation_mu_) = false;
  // Claiming scopes waiting: new sharing ones wait behind them.
  int claims_waiting_ ABSL_GUARDED_BY(mutation_mu_) = 0;

  // admin.writes_refused: at most one line per interval.
  static constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);
  std::atomic<int64_t> refusal_logged_at_{0};  // absl::GetCurrentTimeNanos
  // Refusals counted in the lines logged so far (written by the one thread
  // that won the interval's compare-exchange).
  std::atomic<uint64_t> refusals_logged_{0};

  // Last: destroyed first, so that the mutations queued and in flight end
  // while everything they use is still here.
  MutationQueue mutations_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_ADMIN_SERVICE_H_
