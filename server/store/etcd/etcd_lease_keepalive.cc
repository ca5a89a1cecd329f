// LeaseKeepAlive: renews a lease on a thread of its own, from any member
// that answers, and reports its loss.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "lib/thread_name.h"
#include "server/store/etcd/etcd_client.h"
#include "server/store/etcd/etcd_shared.h"

namespace aside::server::etcd {

namespace pb = ::etcdserverpb;

std::unique_ptr<LeaseKeepAlive> EtcdClient::KeepAlive(
    const Lease& lease, absl::AnyInvocable<void(absl::Status)> on_lost) {
  return std::unique_ptr<LeaseKeepAlive>(
      new LeaseKeepAlive(shared_, lease, std::move(on_lost)));
}

LeaseKeepAlive::LeaseKeepAlive(std::shared_ptr<Shared> shared, Lease lease,
                               absl::AnyInvocable<void(absl::Status)> on_lost)
    : shared_(std::move(shared)), id_(lease.id), on_lost_(std::move(on_lost)) {
  expiry_ = lease.granted_at + lease.ttl;
  ttl_ = lease.ttl;
  thread_ = std::thread([this] {
    NameThisThread("aside-etcd-ka");
    Run();
  });
}

LeaseKeepAlive::~LeaseKeepAlive() { Stop(); }

void LeaseKeepAlive::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    if (context_ != nullptr) {
      context_->TryCancel();
    }
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool LeaseKeepAlive::lost() const {
  MutexLock lock(&mu_);
  return lost_;
}

absl::Time LeaseKeepAlive::expiry() const {
  MutexLock lock(&mu_);
  return expiry_;
}

bool LeaseKeepAlive::Pause(absl::Duration d) {
  MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopped_; }, d);
}

void LeaseKeepAlive::Run() {
  const size_t n = shared_->endpoints.size();
  size_t index = 0;
  auto stopped = [this] {
    MutexLock lock(&mu_);
    return stopped_;
  };
  auto report = [this](absl::Status status) {
    {
      MutexLock lock(&mu_);
      if (stopped_) {
        return;
      }
      lost_ = true;
    }
    if (on_lost_) {
      on_lost_(std::move(status));
    }
  };

  absl::Time renew_at;
  {
    MutexLock lock(&mu_);
    // The first renewal a third of the TTL after the grant.
    renew_at = expiry_ - ttl_ + ttl_ / 3;
  }
  while (true) {
    if (!Pause(renew_at - absl::Now())) {
      return;
    }
    absl::Time expiry;
    {
      MutexLock lock(&mu_);
      expiry = expiry_;
    }
    std::vector<std::string> failures;
    size_t attempts = 0;
    // Each renewal starts where calls do: a member a watch or a call found
    // frozen has been left already.
    index = shared_->Preferred();
    while (true) {
      const absl::Time now = absl::Now();
      if (now >= expiry) {
        report(absl::UnavailableError(absl::StrCat(
            "etcd: lease ", id_, " expired before a renewal succeeded: ",
            failures.empty() ? "no attempt" : absl::StrJoin(failures, "; "))));
        return;
      }
      Endpoint& endpoint = *shared_->endpoints[index];
      // Like a read, each attempt keeps time for the members after it in
      // this round, so a member that takes the request and never answers
      // cannot let the lease expire.
      const int64_t left_in_round = static_cast<int64_t>(n - attempts % n);
      const absl::Time deadline =
          std::min({expiry, now + shared_->options.request_timeout,
                    now + (expiry - now) / left_in_round});
      absl::Status ready = shared_->WaitReady(
          endpoint, std::min(deadline, now + shared_->options.dial_timeout),
          stopped);
      absl::StatusOr<std::string> token =
          ready.ok() ? shared_->Token(endpoint, deadline)
                     : absl::StatusOr<std::string>(ready);
      bool renewed = false;
      pb::LeaseKeepAliveResponse response;
      absl::Time sent = now;
      if (token.ok()) {
        // One short stream per renewal: nothing to keep in sync between
        // renewals, and each renewal may go to a different member.
        grpc::ClientContext context;
        Shared::Prepare(&context, deadline, *token);
        {
          MutexLock lock(&mu_);
          if (stopped_) {
            return;
          }
          context_ = &context;
        }
        sent = absl::Now();
        auto stream = endpoint.lease->LeaseKeepAlive(&context);
        pb::LeaseKeepAliveRequest request;
        request.set_id(id_);
        renewed = stream->Write(request) && stream->Read(&response);
        if (renewed) {
          stream->WritesDone();
        }
        context.TryCancel();
        const grpc::Status status = stream->Finish();
        {
          MutexLock lock(&mu_);
          context_ = nullptr;
          if (stopped_) {
            return;
          }
        }
        if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
          shared_->ForgetToken(*token);
        }
        if (!renewed) {
          shared_->Avoid(index);
          failures.push_back(absl::StrCat(
              endpoint.address, ": ",
              absl::StatusCodeToString(ToAbslCode(status.error_code())), ": ",
              status.error_message()));
        }
      } else {
        if (stopped()) {
          return;
        }
        shared_->Avoid(index);
        failures.push_back(std::string(token.status().message()));
      }
      if (renewed) {
        if (response.ttl() <= 0) {
          report(absl::NotFoundError(
              absl::StrCat("etcd ", endpoint.address, ": lease ", id_,
                           " has expired or was revoked")));
          return;
        }
        const absl::Duration ttl = absl::Seconds(response.ttl());
        {
          MutexLock lock(&mu_);
          ttl_ = ttl;
          expiry_ = sent + ttl;
        }
        renew_at = sent + ttl / 3;
        break;
      }
      index = (index + 1) % n;
      if (++attempts % n == 0 && !Pause(kMinStreamBackoff * 4)) {
        return;
      }
    }
  }
}

}  // namespace aside::server::etcd
