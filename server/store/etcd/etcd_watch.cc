// Watch: a prefix watched on a thread of its own that reconnects to another
// member and resumes from the next revision, and reports compaction; a
// second thread leaves a member that stopped answering.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/mvccpb/kv.pb.h"
#include "lib/thread_name.h"
#include "server/store/etcd/etcd_client.h"
#include "server/store/etcd/etcd_shared.h"

namespace aside::server::etcd {

namespace pb = ::etcdserverpb;

std::unique_ptr<Watch> EtcdClient::WatchPrefix(WatchOptions options,
                                               WatchHandlers handlers) {
  return std::unique_ptr<Watch>(
      new Watch(shared_, std::move(options), std::move(handlers)));
}

Watch::Watch(std::shared_ptr<Shared> shared, WatchOptions options,
             WatchHandlers handlers)
    : shared_(std::move(shared)),
      options_(std::move(options)),
      handlers_(std::move(handlers)) {
  next_revision_ = options_.start_revision;
  thread_ = std::thread([this] {
    NameThisThread("aside-etcd-wch");
    Run();
  });
  watchdog_ = std::thread([this] {
    NameThisThread("aside-etcd-dog");
    Watchdog();
  });
}

Watch::~Watch() { Stop(); }

void Watch::Stop() {
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
  if (watchdog_.joinable()) {
    watchdog_.join();
  }
}

std::string Watch::endpoint() const {
  MutexLock lock(&mu_);
  return endpoint_;
}

int64_t Watch::next_revision() const {
  MutexLock lock(&mu_);
  return next_revision_;
}

bool Watch::connected() const {
  MutexLock lock(&mu_);
  return connected_;
}

bool Watch::Pause(absl::Duration d) {
  MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopped_; }, d);
}

// The member must confirm the watch, and answer a progress request sent
// after watch_probe_interval of silence, within dial_timeout: a member that
// does not is treated like one that does not connect. Any answer counts
// (events too), so a busy watch is never probed.
void Watch::Watchdog() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const absl::Duration interval = shared_->options.watch_probe_interval;
  const absl::Duration bound = shared_->options.dial_timeout;
  MutexLock lock(&mu_);
  while (!stopped_) {
    const absl::Time now = absl::Now();
    absl::Time wake = absl::InfiniteFuture();
    if (context_ != nullptr && stalled_.empty()) {
      if (asked_at_ != absl::InfiniteFuture()) {
        if (now >= asked_at_ + bound) {
          stalled_ = absl::StrCat(connected_ ? "no answer to a progress request"
                                             : "the watch was not confirmed",
                                  " within ", absl::FormatDuration(bound),
                                  " (the member stopped answering)");
          context_->TryCancel();
          continue;
        }
        wake = asked_at_ + bound;
      } else if (connected_ && !returning_home_ && now >= home_check_at_) {
        // Away from the home member: back to it once it answers.
        home_check_at_ = now + kWatchHomeCheck;
        grpc::ClientContext* const asked_on = context_;
        mu_.Unlock();
        const bool answers = HomeAnswers();
        mu_.Lock();
        if (answers && context_ == asked_on && context_ != nullptr &&
            !stopped_) {
          returning_home_ = true;
          context_->TryCancel();
        }
        continue;
      } else if (connected_ && probe_ != nullptr &&
                 interval > absl::ZeroDuration()) {
        if (now >= heard_at_ + interval) {
          asked_at_ = now;
          probing_ = true;
          // Not under mu_: a write may wait for the transport. Run keeps
          // the stream until probing_ is false again.
          absl::AnyInvocable<bool()>* const probe = &probe_;
          mu_.Unlock();
          (*probe)();  // false: the stream ended, and Run sees it too
          mu_.Lock();
          probing_ = false;
          continue;
        }
        wake = heard_at_ + interval;
      }
      if (connected_ && !returning_home_) {
        wake = std::min(wake, home_check_at_);
      }
    }
    const uint64_t changes = changes_;
    auto changed = [this, changes]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stopped_ || changes_ != changes;
    };
    if (wake == absl::InfiniteFuture()) {
      mu_.Await(changed);
    } else {
      mu_.AwaitWithTimeout(changed, wake - now);
    }
  }
}

bool Watch::HomeAnswers() {
  Endpoint& home = *shared_->endpoints[shared_->home];
  const absl::Time deadline = absl::Now() + shared_->options.dial_timeout;
  if (!shared_->WaitReady(home, deadline).ok()) {
    return false;
  }
  absl::StatusOr<std::string> token = shared_->Token(home, deadline);
  if (!token.ok()) {
    return false;
  }
  pb::RangeRequest request;
  request.set_key(options_.prefix);
  request.set_range_end(EtcdClient::PrefixEnd(options_.prefix));
  request.set_count_only(true);
  pb::RangeResponse response;
  grpc::ClientContext context;
  Shared::Prepare(&context, deadline, *token);
  return home.kv->Range(&context, request, &response).ok();
}

void Watch::Run() {
  const size_t n = shared_->endpoints.size();
  size_t index = shared_->Preferred();
  size_t failures_in_a_row = 0;
  absl::Duration backoff = kMinStreamBackoff;
  auto stopped = [this] {
    MutexLock lock(&mu_);
    return stopped_;
  };

  pb::WatchRequest create;
  pb::WatchCreateRequest* c = create.mutable_create_request();
  c->set_key(options_.prefix);
  c->set_range_end(EtcdClient::PrefixEnd(options_.prefix));
  c->set_prev_kv(options_.prev_kv);
  c->set_progress_notify(options_.progress_notify);

  while (!stopped()) {
    Endpoint& endpoint = *shared_->endpoints[index];
    absl::Status failure;
    std::optional<int64_t> compacted_to;

    absl::Status ready = shared_->WaitReady(
        endpoint, absl::Now() + shared_->options.dial_timeout, stopped);
    absl::StatusOr<std::string> token =
        ready.ok()
            ? shared_->Token(endpoint,
                             absl::Now() + shared_->options.request_timeout)
            : absl::StatusOr<std::string>(ready);
    if (!token.ok()) {
      failure = token.status();
    } else {
      grpc::ClientContext context;
      Shared::Prepare(&context, absl::InfiniteFuture(), *token);
      int64_t next;
      {
        MutexLock lock(&mu_);
        if (stopped_) {
          return;
        }
        context_ = &context;
        endpoint_ = endpoint.address;
        index_ = index;
        next = next_revision_;
        stalled_.clear();
        // The member has dial_timeout to confirm the watch.
        asked_at_ = absl::Now();
        heard_at_ = asked_at_;
        Poke();
      }
      c->set_start_revision(next);
      std::unique_ptr<
          grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>>
          stream = endpoint.watch->Watch(&context);
      std::string ended;  // why the watch ended while the stream lived
      if (stream->Write(create)) {
        {
          // One writer at a time: the watchdog's probes only after this.
          MutexLock lock(&mu_);
          probe_ = [s = stream.get()] {
            pb::WatchRequest progress;
            progress.mutable_progress_request();
            return s->Write(progress);
          };
          Poke();
        }
        pb::WatchResponse response;
        while (stream->Read(&response)) {
          {
            MutexLock lock(&mu_);
            heard_at_ = absl::Now();
            asked_at_ = absl::InfiniteFuture();
          }
          if (response.compact_revision() != 0) {
            compacted_to = response.compact_revision();
            break;
          }
          if (response.canceled()) {
            ended = absl::StrCat("the server cancelled the watch: ",
                                 response.cancel_reason());
            // A member that forgot the token (restarted, or the token
            // expired) refuses the watch as not permitted: log in again.
            if (!token->empty()) {
              shared_->ForgetToken(*token);
            }
            break;
          }
          if (response.created()) {
            MutexLock lock(&mu_);
            if (next <= 0) {
              // "From now on" means after the revision the watcher was
              // created at; a reconnection must resume from there.
              next = response.header().revision() + 1;
              next_revision_ = next;
            }
            connected_ = true;
            home_check_at_ = index == shared_->home
                                 ? absl::InfiniteFuture()
                                 : absl::Now() + kWatchHomeCheck;
            Poke();
            failures_in_a_row = 0;
            backoff = kMinStreamBackoff;
            continue;
          }
          WatchBatch batch;
          batch.events.reserve(response.events_size());
          for (const mvccpb::Event& e : response.events()) {
            Event event;
            event.type = e.type() == mvccpb::Event::DELETE
                             ? Event::Type::kDelete
                             : Event::Type::kPut;
            event.kv = FromProto(e.kv());
            if (e.has_prev_kv()) {
              event.prev_kv = FromProto(e.prev_kv());
            }
            batch.events.push_back(std::move(event));
          }
          if (!batch.events.empty()) {
            // Revisions are never split across responses, so the next one
            // to ask for after a reconnection is the one after the last.
            batch.revision = batch.events.back().kv.mod_revision;
          } else if (response.watch_id() == -1) {
            // The answer to a progress request: proof of life only. etcd
            // 3.4 sends it past the events still queued for the watcher,
            // so its revision may be ahead of what was delivered.
            continue;
          } else if (response.header().revision() >= next) {
            // A progress report: nothing changed up to the header revision.
            batch.revision = response.header().revision();
          } else {
            continue;
          }
          next = batch.revision + 1;
          {
            MutexLock lock(&mu_);
            next_revision_ = next;
          }
          if (handlers_.on_events) {
            handlers_.on_events(std::move(batch));
          }
        }
      }
      const bool early = compacted_to.has_value() || !ended.empty();
      if (early) {
        context.TryCancel();
      }
      {
        // The stream has ended or is cancelled: a probe being written
        // returns at once.
        MutexLock lock(&mu_);
        mu_.Await([this]()
                      ABSL_NO_THREAD_SAFETY_ANALYSIS { return !probing_; });
        probe_ = nullptr;
        asked_at_ = absl::InfiniteFuture();
        if (ended.empty() && !stalled_.empty()) {
          ended = stalled_;
        }
        Poke();
      }
      const grpc::Status status = stream->Finish();
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        shared_->ForgetToken(*token);
      }
      bool home_again = false;
      {
        MutexLock lock(&mu_);
        context_ = nullptr;
        connected_ = false;
        home_check_at_ = absl::InfiniteFuture();
        home_again = returning_home_ && !compacted_to.has_value();
        returning_home_ = false;
        Poke();
        if (stopped_) {
          return;
        }
      }
      if (home_again) {
        // Not a failure: the home member answers again, and calls start
        // there too.
        index = shared_->home;
        shared_->Prefer(index);
        failures_in_a_row = 0;
        backoff = kMinStreamBackoff;
        continue;
      }
      if (compacted_to.has_value()) {
        if (handlers_.on_compacted) {
          handlers_.on_compacted(*compacted_to);
        }
        return;
      }
      failure = absl::UnavailableError(absl::StrCat(
          "etcd ", endpoint.address, ": Watch: ",
          !ended.empty() ? ended
                         : absl::StrCat(absl::StatusCodeToString(
                                            ToAbslCode(status.error_code())),
                                        ": ", status.error_message())));
    }
    if (stopped()) {
      return;
    }
    // Calls move off the member too.
    shared_->Avoid(index);
    if (handlers_.on_disconnected) {
      handlers_.on_disconnected(failure);
    }
    index = (index + 1) % n;
    // Straight on to the next member; pause once every member has failed.
    if (++failures_in_a_row >= n) {
      if (!Pause(backoff)) {
        return;
      }
      backoff = std::min(backoff * 2, kMaxStreamBackoff);
    }
  }
}

}  // namespace aside::server::etcd
