#include "server/api/grpclb_service.h"

#include <arpa/inet.h>

#include <cmath>
#include <numeric>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/address.h"
#include "lib/backend.h"
#include "lib/policies/weighted_round_robin.h"
#include "lib/thread_name.h"
#include "proto/convert.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"
#include "server/base/stream_reactor.h"

namespace aside::server {

namespace lb = grpc::lb::v1;

GroupPtr ResolveGrpclbName(const GroupRegistry& groups,
                           absl::string_view dialed) {
  // DNS names: case and a trailing dot on the host do not matter.
  const std::string name = FoldDialedName(dialed);
  const absl::string_view host = GrpclbHost(name);
  for (const GroupPtr& g : groups.List()) {
    // The published spec, shared: no copy of its members per lookup.
    for (const std::string& alias : g->published()->spec->aliases) {
      const std::string folded = FoldDialedName(alias);
      if (folded == host || folded == name) {
        return g;
      }
    }
  }
  const absl::string_view label = host.substr(0, host.find('.'));
  return label.empty() ? nullptr : groups.Find(label);
}

namespace {

void AddServer(const Member& m, const std::string& group, lb::ServerList* out) {
  absl::StatusOr<Address> a = ParseAddress(m.backend.address);
  if (!a.ok() || !a->is_ip()) {
    return;
  }
  lb::Server* s = out->add_servers();
  if (a->kind == Address::Kind::kIpv4) {
    in_addr v4;
    inet_pton(AF_INET, a->host.c_str(), &v4);
    s->set_ip_address(std::string(reinterpret_cast<char*>(&v4), sizeof(v4)));
  } else {
    in6_addr v6;
    inet_pton(AF_INET6, a->host.c_str(), &v6);
    s->set_ip_address(std::string(reinterpret_cast<char*>(&v6), sizeof(v6)));
  }
  s->set_port(a->port);
  s->set_load_balance_token(absl::StrCat(group, "/", m.backend.address));
}

// Spreads `drops` drop entries evenly through `list`.
void AddDrops(int drops, const std::string& token, lb::ServerList* list) {
  if (drops <= 0) {
    return;
  }
  lb::ServerList out;
  const int servers = list->servers_size();
  const int total = servers + drops;
  int placed = 0;
  int next_server = 0;
  for (int i = 0; i < total; ++i) {
    // Drop slot i when the drops placed so far lag the even share.
    const bool drop =
        placed < drops && (static_cast<int64_t>(placed + 1) * total <=
                               static_cast<int64_t>(i + 1) * drops ||
                           next_server >= servers);
    if (drop) {
      lb::Server* s = out.add_servers();
      s->set_drop(true);
      s->set_load_balance_token(token);
      ++placed;
    } else {
      *out.add_servers() = list->servers(next_server++);
    }
  }
  *list = std::move(out);
}

}  // namespace

lb::ServerList BuildServerList(const Table& table, const GrpclbSpec& options,
                               uint32_t max_servers,
                               double overload_drop_fraction) {
  lb::ServerList list;
  std::vector<uint32_t> indexes;
  std::vector<uint32_t> weights;
  for (uint32_t i = 0; i < table.size(); ++i) {
    if (table.eligible(i)) {
      indexes.push_back(i);
      weights.push_back(table.member(i).weight);
    }
  }
  uint64_t g = 0;
  for (uint32_t w : weights) {
    g = std::gcd(g, static_cast<uint64_t>(w));
  }
  if (g > 0) {
    uint64_t total = 0;
    for (uint32_t& w : weights) {
      w = static_cast<uint32_t>(w / g);
      total += w;
    }
    if (total > max_servers) {
      const double scale =
          static_cast<double>(max_servers) / static_cast<double>(total);
      for (uint32_t& w : weights) {
        w = std::max<uint32_t>(
            1,
            static_cast<uint32_t>(std::lround(static_cast<double>(w) * scale)));
      }
    }
    for (uint32_t pos : SmoothWeightedCycle(weights)) {
      AddServer(table.member(indexes[pos]), table.group(), &list);
    }
  }
  const int n = list.servers_size();
  if (n > 0 && table.panic() && options.drop_in_panic_percent > 0) {
    const double p = options.drop_in_panic_percent / 100.0;
    AddDrops(static_cast<int>(std::lround(n * p / (1 - p))),
             absl::StrCat("drop/", table.group(), "/panic"), &list);
  } else if (n > 0 && overload_drop_fraction > 0) {
    const double p = std::min(0.9, overload_drop_fraction);
    AddDrops(std::max(1, static_cast<int>(std::lround(n * p / (1 - p)))),
             absl::StrCat("drop/", table.group(), "/overload"), &list);
  }
  return list;
}

// One BalanceLoad stream. Reads happen one at a time (the initial request,
// then client stats); writes one at a time, newest list next.
class GrpclbService::Stream final
    : public StreamReactor<grpc::ServerBidiReactor<lb::LoadBalanceRequest,
                                                   lb::LoadBalanceResponse>>,
      public Group::Listener {
 public:
  Stream(GrpclbService* service, grpc::CallbackServerContext* context)
      : StreamReactor(context), service_(service) {
    reporter_.name = "anonymous";
    if (service_->report_auth_ != nullptr) {
      report_refusal_ = service_->report_auth_->Authorize(*context, &reporter_);
    }
    if (!service_->streams_.Add(this)) {
      aside::MutexLock lock(&mu_);
      FinishLocked(ShuttingDownStatus());
      return;
    }
    if (grpc::Status refused = peer_slot_.Acquire(service_->stream_limit_.get(),
                                                  ClientPeer(context_->peer()));
        !refused.ok()) {
      aside::MutexLock lock(&mu_);
      FinishLocked(refused);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      aside::MutexLock lock(&mu_);
      FinishLocked(grpc::Status::OK);
      return;
    }
    if (group_ == nullptr) {
      HandleInitial();
    } else if (request_.has_client_stats()) {
      HandleStats(request_.client_stats());
    }
    bool finished;
    {
      aside::MutexLock lock(&mu_);
      finished = this->finished();
    }
    if (!finished) {
      request_.Clear();
      StartRead(&request_);
    }
  }

  void OnWriteDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    if (ok && writing_generation_ != 0) {
      ConfirmLocked(writing_generation_);
    }
    writing_generation_ = 0;
    if (WriteDoneLocked(ok)) {
      WriteNextLocked();
    }
  }

  void OnPublish(Group& /*group*/, const TableConstPtr& /*table*/) override {
    aside::MutexLock lock(&mu_);
    dirty_ = true;
    WriteNextLocked();
  }

  void OnRemoved(Group& group, uint64_t /*generation*/) override {
    aside::MutexLock lock(&mu_);
    ForceFinishLocked(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("group '", group.name(), "' was deleted")));
  }

  void OnDone() override {
    if (confirmation_ != nullptr) {
      service_->confirmations_->Unsubscribe(*confirmation_);
    }
    if (group_ != nullptr) {
      group_->RemoveListener(this);
      if (service_->metrics_ != nullptr) {
        service_->metrics_->grpclb_streams.Decrement();
      }
    }
    service_->streams_.Remove(this);
    delete this;
  }

  // Whether the stream serves `group` (any thread).
  bool ServesGroup(const std::string& group) {
    aside::MutexLock lock(&mu_);
    return group_ != nullptr && group_->name() == group;
  }

  // Re-checks load-based drops (ticker thread).
  void Recheck() {
    aside::MutexLock lock(&mu_);
    if (group_ != nullptr &&
        group_->spec_snapshot()->grpclb.max_requests_per_second > 0) {
      dirty_ = true;
      WriteNextLocked();
    }
  }

 private:
  void HandleInitial() {
    if (!request_.has_initial_request()) {
      aside::MutexLock lock(&mu_);
      FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "the first message must be initial_request"));
      return;
    }
    const std::string& name = request_.initial_request().name();
    GroupPtr group = name.size() <= 512
                         ? ResolveGrpclbName(*service_->groups_, name)
                         : nullptr;
    if (group == nullptr) {
      aside::MutexLock lock(&mu_);
      FinishLocked(grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("no group for grpclb name '", EchoName(name),
                       "' (by alias or by the host's first label)")));
      return;
    }
    DrainConfirmations::SubscriptionPtr confirmation;
    if (DrainConfirmations* c = service_->confirmations_; c != nullptr) {
      confirmation = c->Subscribe(
          group->name(),
          {DrainConfirmations::Edge::kGrpclb, "", context_->peer()});
    }
    {
      aside::MutexLock lock(&mu_);
      confirmation_ = std::move(confirmation);
      group_ = group;
      pending_initial_ = true;
      dirty_ = true;
    }
    if (service_->metrics_ != nullptr) {
      service_->metrics_->grpclb_streams.Increment();
    }
    Log(LogLevel::kDebug, "grpclb.stream",
        {{"name", name},
         {"group", group->name()},
         {"peer", ClientPeer(context_->peer())}});
    // Added without holding mu_ (see the thread rules in the header).
    group->AddListener(this);
    aside::MutexLock lock(&mu_);
    WriteNextLocked();
  }

  void HandleStats(const lb::ClientStats& stats) {
    if (!report_refusal_.ok()) {
      if (service_->metrics_ != nullptr) {
        service_->metrics_->load_reports_refused
            .Add({{"protocol", "grpclb"},
                  {"reason",
                   std::string(ReportAuth::RefusalReason(report_refusal_))}})
            .Increment();
        service_->metrics_->grpclb_client_stats
            .Add({{"group", group_->name()}, {"result", "refused"}})
            .Increment();
      }
      if (!said_refused_) {
        said_refused_ = true;
        Log(LogLevel::kDebug, "grpclb.client_stats_refused",
            {{"group", group_->name()},
             {"peer", ClientPeer(context_->peer())},
             {"reason", report_refusal_.error_message()}});
      }
      return;
    }
    std::vector<std::pair<std::string, int64_t>> dropped;
    for (const lb::ClientStatsPerToken& t : stats.calls_finished_with_drop()) {
      dropped.emplace_back(t.load_balance_token().substr(0, 256),
                           t.num_calls());
    }
    absl::Status s = service_->loads_->AddClientStats(
        group_->name(), stats.num_calls_started(), stats.num_calls_finished(),
        stats.num_calls_finished_with_client_failed_to_send(),
        stats.num_calls_finished_known_received(), dropped);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->grpclb_client_stats
          .Add({{"group", group_->name()},
                {"result", s.ok() ? "ok" : "rejected"}})
          .Increment();
      if (s.ok()) {
        service_->metrics_->load_reporter_observations
            .Add({{"protocol", "grpclb"},
                  {"group", group_->name()},
                  {"reporter", reporter_.name}})
            .Increment();
      } else {
        service_->metrics_->load_reports_refused
            .Add({{"protocol", "grpclb"}, {"reason", "invalid"}})
            .Increment();
      }
    }
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished() || group_ == nullptr) {
      return;
    }
    if (pending_initial_) {
      pending_initial_ = false;
      response_.Clear();
      ToProto(service_->stats_interval_,
              response_.mutable_initial_response()
                  ->mutable_client_stats_report_interval());
      writing_ = true;
      StartWrite(&response_);
      return;
    }
    if (!dirty_) {
      return;
    }
    dirty_ = false;
    std::shared_ptr<const BuiltList> list = service_->ListFor(*group_);
    if (last_sent_ != nullptr && list->bytes == last_sent_->bytes) {
      // Nothing a client would see changed: the list written is as good
      // as this one (no write is in flight here).
      ConfirmLocked(list->generation);
      return;
    }
    last_sent_ = std::move(list);
    writing_generation_ = last_sent_->generation;
    if (service_->metrics_ != nullptr) {
      service_->metrics_->grpclb_server_lists.Add({{"group", group_->name()}})
          .Increment();
    }
    writing_ = true;
    // Shared with the group's other streams; last_sent_ keeps it alive
    // until the write is done.
    StartWrite(&last_sent_->response);
  }

  // The write of a list built at `generation` (or one with its content)
  // completed: the stream has confirmed it.
  void ConfirmLocked(uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (confirmation_ != nullptr) {
      confirmation_->Confirm(generation);
    }
  }

  GrpclbService* const service_;
  // The stream's place under the per-peer stream limit.
  PeerStreamLimit::Slot peer_slot_;
  lb::LoadBalanceRequest request_;
  // This stream's place in the service's confirmations (set with group_,
  // and like it read without mu_ once the call is done), and the
  // generation of the list being written (0: none, or not a list).
  DrainConfirmations::SubscriptionPtr confirmation_;
  uint64_t writing_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Set once by the reading side (under mu_) before any listener or writer
  // uses it; other threads read it under mu_.
  GroupPtr group_;
  // Who the caller reports as, or why it may not (set in the constructor;
  // read by the reading side only).
  ReportAuth::Reporter reporter_;
  grpc::Status report_refusal_;
  bool said_refused_ = false;

  lb::LoadBalanceResponse response_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const BuiltList> last_sent_ ABSL_GUARDED_BY(mu_);
  bool pending_initial_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
};

GrpclbService::GrpclbService(GroupRegistry* groups, LoadAggregator* loads,
                             Metrics* metrics, absl::Duration stats_interval,
                             uint32_t max_servers,
                             const ReportAuth* report_auth, EventLoop* loop)
    : groups_(groups),
      loads_(loads),
      metrics_(metrics),
      stats_interval_(stats_interval),
      max_servers_(max_servers),
      report_auth_(report_auth),
      ticker_(loop, "aside-grpclb", absl::Seconds(1), [this] { Tick(); }) {}

GrpclbService::~GrpclbService() {
  Shutdown();
  ticker_.Stop();
}

grpc::ServerBidiReactor<lb::LoadBalanceRequest, lb::LoadBalanceResponse>*
GrpclbService::BalanceLoad(grpc::CallbackServerContext* context) {
  return new Stream(this, context);
}

void GrpclbService::Shutdown() { streams_.Shutdown(); }

size_t GrpclbService::streams() const { return streams_.size(); }

uint32_t GrpclbService::streams_for(const std::string& group) const {
  uint32_t n = 0;
  streams_.ForEach([&](Stream* s) {
    if (s->ServesGroup(group)) {
      ++n;
    }
  });
  return n;
}

uint64_t GrpclbService::lists_built() const { return lists_built_.load(); }

std::shared_ptr<const GrpclbService::BuiltList> GrpclbService::ListFor(
    const Group& group) {
  const std::shared_ptr<const Group::Publication> published = group.published();
  const GrpclbSpec& options = published->spec->grpclb;
  const double overload =
      loads_ != nullptr ? loads_->OverloadFraction(
                              group.name(), options.max_requests_per_second)
                        : 0;
  return published->forms.Get<
      BuiltList>("", absl::bit_cast<uint64_t>(overload), [&] {
    auto built = std::make_shared<BuiltList>();
    *built->response.mutable_server_list() =
        BuildServerList(*published->table, options, max_servers_, overload);
    built->generation = published->table->generation();
    built->bytes = built->response.server_list().SerializeAsString();
    lists_built_.fetch_add(1);
    if (metrics_ != nullptr) {
      metrics_->grpclb_lists_built.Add({{"group", group.name()}}).Increment();
    }
    return std::shared_ptr<const BuiltList>(std::move(built));
  });
}

void GrpclbService::Tick() {
  streams_.ForEach([](Stream* s) { s->Recheck(); });
}

void GrpclbService::LimitStreamsPerPeer(uint32_t max) {
  stream_limit_ = std::make_unique<PeerStreamLimit>(
      "max_balancer_streams_per_peer", "grpclb streams", max, metrics_);
}

}  // namespace aside::server
