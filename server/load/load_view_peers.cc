#include "server/load/load_view_peers.h"

#include <algorithm>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/fleet.grpc.pb.h"
#include "lib/thread_name.h"
#include "server/base/log.h"
#include "server/base/read_file.h"
#include "server/load/load_view_codec.h"

namespace aside::server {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
// A peer's entries this replica refused (most often: a group or backend the
// peer knew a moment before this replica did) are asked for again with a
// fresh snapshot this long after the refusal, doubling while refusals go
// on (a group only the peer has) up to kMaxResync.
constexpr absl::Duration kFirstResync = absl::Seconds(2);
constexpr absl::Duration kMaxResync = absl::Seconds(60);

// A snapshot is one message, about 43 bytes per (group, backend, source):
// 4 MiB (gRPC's default limit) is only some 100 000 entries. Peers are
// authenticated replicas, so their messages may be far larger.
grpc::ChannelArguments ChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  return args;
}

}  // namespace

absl::StatusOr<std::string> ReadPeerToken(const std::string& path) {
  absl::StatusOr<std::string> text =
      ReadWholeFile(path, "fleet peer token file");
  if (!text.ok()) {
    return text.status();
  }
  std::string token(absl::StripAsciiWhitespace(
      absl::string_view(*text).substr(0, text->find('\n'))));
  if (token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": fleet peer token file is empty"));
  }
  return token;
}

// One peer: a thread that keeps its stream open and applies its updates.
class LoadViewPeers::Link {
 public:
  Link(LoadViewPeers* owner, LoadViewPeer peer)
      : owner_(owner),
        peer_(std::move(peer)),
        label_(peer_.id.empty() ? peer_.address : peer_.id),
        stub_(v1::Fleet::NewStub(
            grpc::CreateCustomChannel(peer_.address,
                                      owner_->options_.credentials != nullptr
                                          ? owner_->options_.credentials
                                          : grpc::InsecureChannelCredentials(),
                                      ChannelArguments()))) {
    if (owner_->metrics_ != nullptr) {
      aside::MutexLock lock(&mu_);
      age_ = &owner_->metrics_->age.Add({{"peer", label_}});
    }
    thread_ = std::thread([this] {
      NameThisThread("aside-lv-link");
      Run();
    });
  }

  ~Link() {
    {
      aside::MutexLock lock(&mu_);
      stop_ = true;
      if (context_ != nullptr) {
        context_->TryCancel();
      }
    }
    thread_.join();
    aside::MutexLock lock(&mu_);
    ForgetLocked("removed");
    if (age_ != nullptr && owner_->metrics_ != nullptr) {
      owner_->metrics_->age.Remove(age_);
    }
  }

  const LoadViewPeer& peer() const { return peer_; }

  LinkState state() const {
    aside::MutexLock lock(&mu_);
    return {.address = peer_.address,
            .id = peer_id_,
            .connected = connected_,
            .self = self_};
  }

  // Watchdog: the age metric; a silent stream is cancelled and a silent
  // peer forgotten.
  void Check(absl::Time now) {
    aside::MutexLock lock(&mu_);
    if (age_ != nullptr) {
      // Never heard from: counted from when this replica began to listen.
      age_->Set(absl::ToDoubleSeconds(
          now - (heard_ == absl::InfinitePast() ? created_ : heard_)));
    }
    const absl::Time since = std::max(heard_, stream_started_);
    if (context_ != nullptr && now - since > owner_->options_.grace) {
      context_->TryCancel();
    }
    if (holding_ && now - heard_ > owner_->options_.grace) {
      ForgetLocked("silent past the grace");
    }
  }

 private:
  void ForgetLocked(const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!holding_) {
      return;
    }
    holding_ = false;
    owner_->loads_->RemovePeer(peer_id_);
    Log(LogLevel::kInfo, "fleet.load_view_peer_forgotten",
        {{"peer", peer_id_}, {"address", peer_.address}, {"reason", why}});
  }

  void Run() {
    absl::Duration backoff = kFirstBackoff;
    bool first_failure = true;
    while (true) {
      grpc::ClientContext context;
      if (!owner_->options_.token.empty()) {
        context.AddMetadata("authorization",
                            absl::StrCat("Bearer ", owner_->options_.token));
      }
      {
        aside::MutexLock lock(&mu_);
        if (stop_) {
          return;
        }
        context_ = &context;
        stream_started_ = absl::Now();
      }
      v1::LoadViewRequest request;
      request.set_replica_id(owner_->options_.self_id);
      std::unique_ptr<grpc::ClientReader<v1::LoadViewUpdate>> reader =
          stub_->LoadView(&context, request);
      LoadViewDecoder decoder;
      v1::LoadViewUpdate update;
      bool first = true;
      bool resyncing = false;
      while (reader->Read(&update)) {
        backoff = kFirstBackoff;
        first_failure = true;
        if (first) {
          first = false;
          if (update.replica_id().empty()) {
            Log(LogLevel::kWarn, "fleet.load_view_bad_peer",
                {{"address", peer_.address},
                 {"error", "replica_id: missing in the first update"}});
            context.TryCancel();
            break;
          }
          aside::MutexLock lock(&mu_);
          if (holding_ && peer_id_ != update.replica_id()) {
            ForgetLocked("restarted under a new id");
          }
          peer_id_ = update.replica_id();
          connected_ = true;
          Log(LogLevel::kInfo, "fleet.load_view_connected",
              {{"peer", peer_id_}, {"address", peer_.address}});
        }
        Apply(decoder, update);
        if (absl::Now() >= resync_at_) {
          // Unchanged entries are not sent again, so refused ones would
          // stay missing: a new stream starts with a snapshot.
          resync_at_ = absl::InfiniteFuture();
          resyncing = true;
          context.TryCancel();
          break;
        }
      }
      const grpc::Status status = reader->Finish();
      {
        aside::MutexLock lock(&mu_);
        context_ = nullptr;
        connected_ = false;
        if (stop_) {
          return;
        }
      }
      if (resyncing) {
        Log(LogLevel::kInfo, "fleet.load_view_resync",
            {{"peer", label_},
             {"address", peer_.address},
             {"reason", "entries refused; asking for a snapshot"}});
        continue;
      }
      if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        // The address is this replica's own.
        Log(LogLevel::kInfo, "fleet.load_view_self",
            {{"address", peer_.address}, {"action", "not subscribing"}});
        aside::MutexLock lock(&mu_);
        self_ = true;
        if (age_ != nullptr) {
          owner_->metrics_->age.Remove(age_);
          age_ = nullptr;
        }
        return;
      }
      // Warned once per outage; the retries after it log at debug.
      Log(first_failure ? LogLevel::kWarn : LogLevel::kDebug,
          "fleet.load_view_disconnected",
          {{"peer", label_},
           {"address", peer_.address},
           {"error", status.error_message()},
           {"retry_in", absl::FormatDuration(backoff)}});
      first_failure = false;
      aside::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(aside::Cond(&stop_), backoff);
      if (stop_) {
        return;
      }
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  void Apply(LoadViewDecoder& decoder, const v1::LoadViewUpdate& update) {
    std::vector<std::string> rejected;
    std::vector<int> index;
    const PeerLoadUpdate decoded = decoder.Decode(update, &rejected, &index);
    aside::MutexLock lock(&mu_);
    heard_ = absl::Now();
    holding_ = true;
    const std::vector<std::pair<size_t, std::string>> refused =
        owner_->loads_->ApplyPeer(peer_id_, decoded);
    if (owner_->orca_ != nullptr) {
      for (const OrcaShare& share : decoded.orca) {
        owner_->orca_->ApplyPeer(share);
      }
    }
    for (const auto& [i, reason] : refused) {
      rejected.push_back(absl::StrCat("loads[", index[i], "].", reason));
    }
    if (!refused.empty() && resync_at_ == absl::InfiniteFuture()) {
      resync_at_ = absl::Now() + resync_delay_;
      resync_delay_ = std::min(2 * resync_delay_, kMaxResync);
    } else if (refused.empty() && update.snapshot()) {
      resync_delay_ = kFirstResync;
    }
    if (LoadViewMetrics* m = owner_->metrics_; m != nullptr) {
      if (age_ != nullptr) {
        age_->Set(0);
      }
      m->bytes_received.Increment(static_cast<double>(update.ByteSizeLong()));
      m->updates_received.Increment();
      m->entries_received.Increment(update.loads_size());
      m->rejected.Increment(static_cast<double>(rejected.size()));
    }
    // Refusals come in bursts under churn (groups reach replicas a moment
    // apart): the counter has every one, the log one line per peer per
    // minute with the number since the last line.
    rejected_unlogged_ += rejected.size();
    const absl::Time now = absl::Now();
    if (!rejected.empty() && now - rejected_logged_at_ >= kRejectedLogEvery) {
      Log(LogLevel::kWarn, "fleet.load_view_rejected",
          {{"peer", peer_id_},
           {"entries", absl::StrCat(rejected_unlogged_)},
           {"since", rejected_logged_at_ == absl::InfinitePast()
                         ? "start"
                         : absl::FormatDuration(now - rejected_logged_at_)},
           {"first", rejected.front()}});
      rejected_logged_at_ = now;
      rejected_unlogged_ = 0;
    }
  }

  static constexpr absl::Duration kRejectedLogEvery = absl::Minutes(1);

  LoadViewPeers* const owner_;
  const LoadViewPeer peer_;
  // The metric label: the id membership gave, else the address.
  const std::string label_;
  const std::unique_ptr<v1::Fleet::Stub> stub_;

  mutable aside::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool self_ ABSL_GUARDED_BY(mu_) = false;
  // The id the peer's stream gave, and whether the aggregator holds its
  // contribution.
  std::string peer_id_ ABSL_GUARDED_BY(mu_);
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time heard_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time stream_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  prometheus::Gauge* age_ ABSL_GUARDED_BY(mu_) = nullptr;
  const absl::Time created_ = absl::Now();
  // The last fleet.load_view_rejected line, and the entries refused since.
  absl::Time rejected_logged_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t rejected_unlogged_ ABSL_GUARDED_BY(mu_) = 0;
  // When to ask for a snapshot again after refused entries, and the delay
  // the next refusal waits; the stream's thread only.
  absl::Time resync_at_ = absl::InfiniteFuture();
  absl::Duration resync_delay_ = kFirstResync;
  std::thread thread_;
};

LoadViewPeers::LoadViewPeers(Options options, LoadAggregator* loads,
                             LoadViewMetrics* metrics)
    : options_(std::move(options)), loads_(loads), metrics_(metrics) {
  watchdog_ = std::make_unique<Ticker>(
      options_.loop, "aside-lv-dog",
      std::min(absl::Milliseconds(250), options_.grace / 4),
      [this] { Check(); });
}

LoadViewPeers::~LoadViewPeers() { Stop(); }

void LoadViewPeers::SetPeers(std::vector<LoadViewPeer> peers) {
  std::vector<std::unique_ptr<Link>> gone;
  {
    aside::MutexLock lock(&mu_);
    if (stop_) {
      return;
    }
    std::map<std::string, LoadViewPeer> wanted;
    for (LoadViewPeer& p : peers) {
      if (p.address.empty() || (!p.id.empty() && p.id == options_.self_id)) {
        continue;
      }
      wanted[p.address] = std::move(p);
    }
    for (auto it = links_.begin(); it != links_.end();) {
      auto w = wanted.find(it->first);
      if (w == wanted.end() || w->second.id != it->second->peer().id) {
        gone.push_back(std::move(it->second));
        it = links_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [address, p] : wanted) {
      if (!links_.contains(address)) {
        links_.emplace(address, std::make_unique<Link>(this, std::move(p)));
      }
    }
  }
  gone.clear();  // joins their threads and forgets them, outside mu_
}

void LoadViewPeers::Stop() {
  std::map<std::string, std::unique_ptr<Link>> links;
  {
    aside::MutexLock lock(&mu_);
    if (stop_) {
      return;
    }
    stop_ = true;
    links = std::move(links_);
    links_.clear();
  }
  links.clear();
  watchdog_->Stop();
}

std::vector<LoadViewPeers::LinkState> LoadViewPeers::links() const {
  aside::MutexLock lock(&mu_);
  std::vector<LinkState> out;
  for (const auto& [address, link] : links_) {
    out.push_back(link->state());
  }
  return out;
}

void LoadViewPeers::Check() {
  aside::MutexLock lock(&mu_);
  if (stop_) {
    return;
  }
  const absl::Time now = absl::Now();
  for (const auto& [address, link] : links_) {
    link->Check(now);
  }
}

}  // namespace aside::server
