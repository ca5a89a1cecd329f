// Client's Watch side: one stream over every subscribed group, updates
// folded into each group's table, reconnects with backoff. The stream is
// WatchConfirmed: each update the server marks `confirm` (one that takes
// a backend out) is answered with Applied once the new table is published,
// which is what lets a drain wait for this stub (Admin.WaitDrained). A
// server that predates it answers UNIMPLEMENTED; the stub then watches that
// target with Watch (no answers) until its stream ends.
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/backoff.h"
#include "client/client.h"
#include "client/clock_wait.h"

namespace aside {

bool Client::HandleUpdate(ClientGroup* group, const v1::GroupUpdate& update,
                          grpc::ClientContext* context) {
  const WatchedTable::Result result = group->watched_.Apply(update);
  switch (result.outcome) {
    case WatchedTable::Outcome::kApplied: {
      group->need_full_ = false;
      {
        aside::MutexLock lock(&mu_);
        ++stats_.updates_applied;
      }
      group->PublishTable(group->watched_.table(), update.server_id());
      RetainChannels();
      if (!options_.cache_dir.empty()) {
        group->WriteCache(update.server_id());
      }
      // Last, so that whoever waits for the generation (WaitForGeneration)
      // finds the stats and the channel pool already in line with it.
      group->MarkGeneration(group->watched_.generation());
      return true;
    }
    case WatchedTable::Outcome::kUnchanged: {
      aside::MutexLock lock(&group->mu_);
      group->removed_ = false;
      group->missing_ = absl::OkStatus();
      return true;
    }
    case WatchedTable::Outcome::kStale:
      break;
    case WatchedTable::Outcome::kRejected: {
      group->rejected_.fetch_add(1, std::memory_order_relaxed);
      Log(absl::StrCat("event=table.rejected ", result.error.message(),
                       "; generation ", group->watched_.generation(),
                       " keeps serving"));
      // Last: whoever waits on the stats finds the log line written.
      aside::MutexLock lock(&mu_);
      ++stats_.updates_rejected;
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
      // The server has no such group; the stream goes on, and the server
      // sends the group's full table if it is created.
      const v1::GroupRemoved& removed = update.removed();
      const bool not_found =
          removed.cause() == v1::GroupRemoved::CAUSE_NOT_FOUND;
      const std::string reason =
          !removed.reason().empty()
              ? removed.reason()
              : absl::StrCat("group '", group->name_,
                             not_found ? "' not found" : "' was deleted");
      const bool has_table = group->watched_.table() != nullptr;
      // The server says which status to report (google.rpc.Code values
      // are absl's); NOT_FOUND when it does not.
      absl::StatusCode code = absl::StatusCode::kNotFound;
      if (removed.code() > 0 && removed.code() <= 16) {
        code = static_cast<absl::StatusCode>(removed.code());
      }
      {
        aside::MutexLock lock(&group->mu_);
        group->removed_ = true;
        if (!has_table && group->fallback_ == nullptr) {
          group->missing_ = absl::Status(
              code,
              absl::StrCat(reason, " on aside server(s) ", TargetsText()));
        }
      }
      // Logged once removed() says so, so that whoever reads the line sees
      // the group's state agree with it.
      Log(absl::StrCat(
          not_found ? "event=group.not_found " : "event=group.removed ", reason,
          has_table
              ? absl::StrCat("; generation ", group->watched_.generation(),
                             " keeps serving")
              : std::string(),
          "; waiting for it on the same stream"));
      break;
    }
  }
  return false;
}

void Client::WatchLoop() {
  Backoff backoff(options_.backoff);
  bool connected = false;
  // Targets that answered WatchConfirmed UNIMPLEMENTED: watched with Watch
  // until that stream ends (the replica that replaces it may be newer).
  absl::flat_hash_set<std::string> without_confirm;
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
        watched.push_back(g.get());
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
    std::sort(
        watched.begin(), watched.end(),
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

    client_internal::SharedChannels::Lease lease = LeaseChannel(target);
    auto stub = v1::LoadBalancer::NewStub(lease.channel());
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
    const bool confirm = !without_confirm.contains(target);
    std::unique_ptr<grpc::ClientReaderWriter<v1::WatchMessage, v1::GroupUpdate>>
        stream;
    std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> reader;
    if (confirm) {
      stream = stub->WatchConfirmed(&context);
      v1::WatchMessage first;
      *first.mutable_request() = request;
      // A failed write shows as the stream's end in Read.
      (void)stream->Write(first);
    } else {
      reader = stub->Watch(&context, request);
    }
    auto read = [&](v1::GroupUpdate* out) {
      return confirm ? stream->Read(out) : reader->Read(out);
    };
    v1::GroupUpdate update;
    bool delivered = false;
    while (read(&update)) {
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
      if (it != by_name.end() && HandleUpdate(it->second, update, &context) &&
          confirm && update.confirm()) {
        // Picks no longer choose what the update took out: say so.
        v1::WatchMessage answer;
        answer.mutable_applied()->set_group(update.group());
        answer.mutable_applied()->set_generation(update.generation());
        (void)stream->Write(answer);
      }
    }
    const grpc::Status status = confirm ? stream->Finish() : reader->Finish();
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
    if (confirm && !delivered &&
        status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      // An older server: watch it with Watch, at once. Not an attempt of
      // its own: the same one goes on with the other method.
      without_confirm.insert(target);
      {
        aside::MutexLock lock(&mu_);
        --stats_.watch_attempts;
      }
      Log(absl::StrCat("event=watch.no_confirmations target=", target,
                       " (the server predates WatchConfirmed; drains cannot "
                       "wait for this stub's answers)"));
      continue;
    }
    without_confirm.erase(target);
    // The server ends a stream only on errors (absent groups are reported
    // inside it); any end, even OK, is a disconnection and backs off, and
    // the next attempt gets a fresh connection.
    lease.Failed();
    const std::string error = absl::StrCat(target, ": ", StatusText(status));
    const absl::Duration delay = backoff.Next();
    if (connected || delivered) {
      Log(absl::StrCat("event=watch.disconnected ", error,
                       "; last tables keep serving; retry in ",
                       absl::FormatDuration(delay)));
    }
    connected = false;
    const int64_t retry_at =
        clock_->NowNanos() + absl::ToInt64Nanoseconds(delay);
    {
      aside::MutexLock lock(&mu_);
      last_error_ = error;
      ++target_index_;
    }
    // No server answers: cached tables due before the retry serve now.
    if (!ServeDueCaches(watched, retry_at)) {
      return;
    }
    aside::MutexLock lock(&mu_);
    client_internal::AwaitUntil(mu_, aside::Cond(&stopping_), *clock_,
                                retry_at);
  }
}

}  // namespace aside
