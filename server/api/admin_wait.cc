// Admin.WaitDrained (admin_service.h): the checks, and the wait itself.
//
// A wait is one DrainWaiter, registered with the DrainConfirmations of the
// group: every confirmation that reaches the waited-for generation (and
// every subscriber that leaves, and every load report of the group) calls
// Changed(), which looks again; a gRPC alarm ends it at the timeout. No
// thread waits and nothing polls. The reactor owns the waiter; the
// confirmations hold it until the call is done; the alarm only refers to it
// weakly, so that a waiter never outlives its call for the alarm's sake.
#include <grpcpp/alarm.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "server/api/admin_common.h"
#include "server/api/admin_service.h"
#include "server/base/log.h"
#include "server/base/status_util.h"

namespace aside::server {
namespace {

using admin_common::Invalid;

// One WaitDrained call's state (see the file comment). Thread-safe:
// Changed() comes from any edge's thread, the alarm from gRPC's, the end
// of the call from a callback thread; the first to find the wait over
// finishes the call, once.
class DrainWaiter final : public DrainConfirmations::Waiter,
                          public std::enable_shared_from_this<DrainWaiter> {
 public:
  DrainWaiter(DrainConfirmations* confirmations, const LoadAggregator* loads,
              std::string group, uint64_t generation,
              std::vector<std::string> addresses,
              grpc::ServerUnaryReactor* reactor,
              v1::WaitDrainedResponse* response)
      : confirmations_(confirmations),
        loads_(loads),
        group_(std::move(group)),
        generation_(generation),
        addresses_(std::move(addresses)),
        reactor_(reactor),
        response_(response) {}

  uint64_t generation() const override { return generation_; }

  void Changed() override { Check(/*timed_out=*/false); }

  // Registered: looks once, then arms the timeout.
  void Start(absl::Duration timeout) {
    Check(/*timed_out=*/false);
    std::weak_ptr<DrainWaiter> weak = weak_from_this();
    aside::MutexLock lock(&mu_);
    if (finished_) {
      return;
    }
    alarm_.Set(std::chrono::system_clock::now() +
                   std::chrono::nanoseconds(absl::ToInt64Nanoseconds(timeout)),
               [weak](bool fired) {
                 if (std::shared_ptr<DrainWaiter> w = weak.lock();
                     w != nullptr && fired) {
                   w->Check(/*timed_out=*/true);
                 }
               });
  }

  // The call was cancelled (by the client, its deadline or the server).
  void Cancel() {
    if (Claim()) {
      reactor_->Finish(
          grpc::Status(grpc::StatusCode::CANCELLED, "the wait was cancelled"));
    }
  }

 private:
  // Whether this caller is the one to finish the call.
  bool Claim() {
    aside::MutexLock lock(&mu_);
    if (finished_) {
      return false;
    }
    finished_ = true;
    return true;
  }

  void Check(bool timed_out) {
    if (!timed_out && confirmations_->PendingCount(group_, generation_) > 0) {
      return;  // the common case while subscribers confirm one by one
    }
    std::vector<DrainConfirmations::Pending> pending =
        confirmations_->PendingFor(group_, generation_);
    std::vector<v1::InFlightCalls> in_flight;
    if (loads_ != nullptr) {
      for (const std::string& address : addresses_) {
        for (const auto& [reporter, n] : loads_->InFlight(group_, address)) {
          v1::InFlightCalls& c = in_flight.emplace_back();
          c.set_reporter(reporter);
          c.set_address(address);
          c.set_in_flight(n);
        }
      }
    }
    const bool drained = pending.empty() && in_flight.empty();
    if (!drained && !timed_out) {
      return;
    }
    if (!Claim()) {
      return;
    }
    // Only the claimant writes the response, and the call is not over
    // until it finishes it.
    response_->set_drained(drained);
    response_->set_generation(generation_);
    for (const DrainConfirmations::Pending& p : pending) {
      v1::PendingSubscriber* out = response_->add_pending();
      out->set_edge(DrainConfirmations::EdgeName(p.who.edge));
      out->set_subscriber(p.who.name);
      out->set_peer(p.who.peer);
      out->set_confirmed_generation(p.confirmed);
    }
    for (v1::InFlightCalls& c : in_flight) {
      *response_->add_in_flight() = std::move(c);
    }
    Log(drained ? LogLevel::kInfo : LogLevel::kWarn, "admin.wait_drained",
        {{"group", group_},
         {"generation", absl::StrCat(generation_)},
         {"drained", drained ? "yes" : "no"},
         {"pending", absl::StrCat(pending.size())},
         {"in_flight", absl::StrCat(in_flight.size())}});
    reactor_->Finish(grpc::Status::OK);
  }

  DrainConfirmations* const confirmations_;
  const LoadAggregator* const loads_;
  const std::string group_;
  const uint64_t generation_;
  const std::vector<std::string> addresses_;
  grpc::ServerUnaryReactor* const reactor_;
  v1::WaitDrainedResponse* const response_;
  aside::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Alarm alarm_;
};

// The call: owns the waiter until gRPC is done with the call.
class DrainWaitReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit DrainWaitReactor(DrainConfirmations* confirmations)
      : confirmations_(confirmations) {}

  void Wait(std::shared_ptr<DrainWaiter> waiter, std::string group,
            absl::Duration timeout) {
    waiter_ = waiter;
    group_ = std::move(group);
    confirmations_->AddWaiter(group_, waiter);
    waiter->Start(timeout);
  }

  void OnCancel() override {
    if (waiter_ != nullptr) {
      waiter_->Cancel();
    }
  }

  void OnDone() override {
    if (waiter_ != nullptr) {
      confirmations_->RemoveWaiter(group_, waiter_.get());
    }
    delete this;
  }

 private:
  DrainConfirmations* const confirmations_;
  std::shared_ptr<DrainWaiter> waiter_;
  std::string group_;
};

}  // namespace

grpc::Status AdminService::CheckDrainWait(const v1::WaitDrainedRequest& request,
                                          uint64_t* generation,
                                          std::vector<std::string>* addresses,
                                          absl::Duration* timeout) const {
  if (request.group().empty()) {
    return Invalid("group: a group name is required");
  }
  if (absl::Status s = ValidateGroupName(request.group()); !s.ok()) {
    return Invalid(absl::StrCat("group: ", s.message()));
  }
  if (request.addresses().empty()) {
    return Invalid("addresses: at least one address is required");
  }
  if (request.addresses_size() > kMaxBackendsPerRequest) {
    return Invalid(absl::StrCat("addresses: ", request.addresses_size(),
                                " addresses (at most ", kMaxBackendsPerRequest,
                                ")"));
  }
  *timeout = kDefaultDrainWait;
  if (request.has_timeout()) {
    const auto& t = request.timeout();
    if (t.seconds() < 0 || t.nanos() < 0 || t.nanos() > 999'999'999 ||
        (t.seconds() == 0 && t.nanos() == 0)) {
      return Invalid("timeout: must be positive");
    }
    *timeout = absl::Seconds(t.seconds()) + absl::Nanoseconds(t.nanos());
    if (*timeout > kMaxDrainWait) {
      return Invalid(absl::StrCat("timeout: ", absl::FormatDuration(*timeout),
                                  " is longer than the most, ",
                                  absl::FormatDuration(kMaxDrainWait)));
    }
  }
  for (int i = 0; i < request.addresses_size(); ++i) {
    absl::StatusOr<std::string> a = CanonicalAddress(request.addresses(i));
    if (!a.ok()) {
      return Invalid(
          absl::StrCat("addresses[", i, "]: ", a.status().message()));
    }
    addresses->push_back(*std::move(a));
  }
  GroupPtr group = groups_->Find(request.group());
  if (group == nullptr) {
    return ToGrpcStatus(admin_common::GroupNotFound(request.group()));
  }
  TableConstPtr table = group->table();
  for (const std::string& address : *addresses) {
    for (const Member& m : table->members()) {
      if (m.backend.address == address && !m.backend.drained) {
        return {grpc::StatusCode::FAILED_PRECONDITION,
                absl::StrCat("group '", request.group(), "': backend ", address,
                             " is not drained (drain it first)")};
      }
    }
  }
  *generation = table->generation();
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminService::WaitDrained(
    grpc::CallbackServerContext* context, const v1::WaitDrainedRequest* request,
    v1::WaitDrainedResponse* response) {
  auto* reactor = new DrainWaitReactor(confirmations_);
  grpc::Status status = Authorize(*context, AdminRole::kAdmin, *request);
  if (status.ok() && confirmations_ == nullptr) {
    status = grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "admin: this server does not track confirmations");
  }
  uint64_t generation = 0;
  std::vector<std::string> addresses;
  absl::Duration timeout;
  if (status.ok()) {
    status = CheckDrainWait(*request, &generation, &addresses, &timeout);
  }
  if (!status.ok()) {
    reactor->Finish(status);
    return reactor;
  }
  auto waiter = std::make_shared<DrainWaiter>(
      confirmations_, loads_, request->group(), generation,
      std::move(addresses), reactor, response);
  reactor->Wait(std::move(waiter), request->group(), timeout);
  return reactor;
}

}  // namespace aside::server
