#include "server/load/orca_collector.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/random.h"
#include "lib/thread_name.h"
#include "server/base/log.h"
#include "server/base/metrics.h"
#include "server/load/load_aggregator.h"
#include "xds/service/orca/v3/orca.grpc.pb.h"

namespace aside::server {
namespace {

using xds::data::orca::v3::OrcaLoadReport;

constexpr double kMaxUtilization = 100;
constexpr double kMaxRate = 1e9;
constexpr double kBackoffFactor = 1.6;
constexpr double kBackoffJitter = 0.2;
constexpr absl::Duration kLogEvery = absl::Minutes(1);
constexpr absl::Duration kStopWait = absl::Seconds(10);
// How often a replica that does not own a wanted backend asks again.
constexpr absl::Duration kOwnershipRecheck = absl::Seconds(1);
// A backend not owned here, with no report from its owner for three
// intervals and this, is streamed here.
constexpr absl::Duration kOrphanGrace = absl::Seconds(3);

// Checks one value of a report; names it in `why` when it is refused.
bool CheckValue(const char* field, double v, double max, std::string* why) {
  if (std::isfinite(v) && v >= 0 && v <= max) {
    return true;
  }
  *why = absl::StrCat(field, ": ", v, " is not within 0..", max);
  return false;
}

// The fields weights read, or why the report is refused.
bool ReadReport(const OrcaLoadReport& r, OrcaLoad* out, std::string* why) {
  out->cpu_utilization = r.cpu_utilization();
  out->application_utilization = r.application_utilization();
  out->qps = r.rps_fractional();
  if (out->qps == 0 && r.rps() > 0) {
    out->qps = static_cast<double>(r.rps());
  }
  out->eps = r.eps();
  return CheckOrcaLoad(*out, why) &&
         CheckValue("mem_utilization", r.mem_utilization(), kMaxUtilization,
                    why);
}

std::string ChannelUri(const std::string& address) {
  return address.starts_with("[") ? absl::StrCat("ipv6:", address)
                                  : absl::StrCat("ipv4:", address);
}

}  // namespace

bool CheckOrcaLoad(const OrcaLoad& load, std::string* why) {
  return CheckValue("cpu_utilization", load.cpu_utilization, kMaxUtilization,
                    why) &&
         CheckValue("application_utilization", load.application_utilization,
                    kMaxUtilization, why) &&
         CheckValue("rps_fractional", load.qps, kMaxRate, why) &&
         CheckValue("eps", load.eps, kMaxRate, why);
}

// One StreamCoreMetrics call. Holds itself alive until gRPC is done with
// it (OnDone); the collector holds it too while it is the backend's
// stream, so that Cancel can be called outside the collector's lock.
class OrcaCollector::Stream : public grpc::ClientReadReactor<OrcaLoadReport> {
 public:
  Stream(OrcaCollector* owner, std::string address, absl::Duration interval,
         int max_report_bytes, const BackendRelay* relay)
      : address_(std::move(address)), owner_(owner) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
    args.SetMaxReceiveMessageSize(max_report_bytes);
    const std::string uri =
        relay != nullptr
            ? relay->Route(address_, "orca",
                           static_cast<uint32_t>(max_report_bytes), &args)
            : ChannelUri(address_);
    channel_ = grpc::CreateCustomChannel(
        uri, grpc::InsecureChannelCredentials(), args);
    stub_ = xds::service::orca::v3::OpenRcaService::NewStub(channel_);
    const int64_t nanos = absl::ToInt64Nanoseconds(interval);
    request_.mutable_report_interval()->set_seconds(nanos / 1'000'000'000);
    request_.mutable_report_interval()->set_nanos(
        static_cast<int32_t>(nanos % 1'000'000'000));
  }

  const std::string& address() const { return address_; }

  // Starts the call; `self` is the collector's reference, kept until
  // OnDone.
  void Begin(std::shared_ptr<Stream> self) {
    self_ = std::move(self);
    stub_->async()->StreamCoreMetrics(&context_, &request_, this);
    StartRead(&report_);
    StartCall();
  }

  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      return;  // OnDone follows
    }
    OrcaLoad load;
    std::string why;
    const bool valid = ReadReport(report_, &load, &why);
    owner_->OnReport(this, load, valid, why);
    report_.Clear();
    StartRead(&report_);
  }

  void OnDone(const grpc::Status& status) override {
    // The collector takes this reference and drops it on its own thread:
    // the stream's channel must not go on the gRPC thread running this.
    owner_->OnDone(this, status.error_code(), status.error_message(),
                   std::move(self_));
  }

 private:
  const std::string address_;
  OrcaCollector* const owner_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<xds::service::orca::v3::OpenRcaService::Stub> stub_;
  grpc::ClientContext context_;
  xds::service::orca::v3::OrcaLoadReportRequest request_;
  OrcaLoadReport report_;
  std::shared_ptr<Stream> self_;
};

OrcaCollector::OrcaCollector(const Clock* clock, Metrics* metrics,
                             Options options)
    : clock_(clock), metrics_(metrics), options_(options) {}

OrcaCollector::~OrcaCollector() { Stop(); }

void OrcaCollector::set_owns(
    std::function<bool(const std::string& address)> owns) {
  owns_ = std::move(owns);
}

void OrcaCollector::Start() {
  thread_ = std::thread([this] {
    NameThisThread("aside-orca");
    Run();
  });
}

void OrcaCollector::Stop() {
  {
    aside::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) {
      return;
    }
    stopping_ = true;
    ++wakeups_;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  std::vector<std::shared_ptr<Stream>> open;
  {
    aside::MutexLock lock(&mu_);
    for (auto& [address, b] : backends_) {
      if (b.stream != nullptr) {
        open.push_back(b.stream);
      }
    }
  }
  for (const std::shared_ptr<Stream>& s : open) {
    s->Cancel();
  }
  open.clear();
  aside::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(
          [this] {
            mu_.AssertHeld();
            return live_streams_ == 0;
          },
          kStopWait)) {
    Log(LogLevel::kError, "orca.stop_timeout",
        {{"streams", absl::StrCat(live_streams_)}});
  }
  DropFinishedLocked();
}

void OrcaCollector::Want(const std::string& group,
                         const std::vector<std::string>& addresses,
                         absl::Duration interval) {
  std::vector<std::shared_ptr<Stream>> cancel;
  {
    aside::MutexLock lock(&mu_);
    std::vector<std::string>& mine = groups_[group];
    if (mine == addresses) {
      bool same = true;
      for (const std::string& a : addresses) {
        auto it = backends_.find(a);
        if (it == backends_.end()) {
          same = false;
          break;
        }
        auto w = it->second.wanted_by.find(group);
        same = same && w != it->second.wanted_by.end() && w->second == interval;
      }
      if (same) {
        if (addresses.empty()) {
          groups_.erase(group);
        }
        return;
      }
    }
    // Backends the group no longer wants; those it keeps keep their
    // stream and reports.
    const absl::flat_hash_set<std::string> keep(addresses.begin(),
                                                addresses.end());
    for (const std::string& a : mine) {
      auto it = backends_.find(a);
      if (it == backends_.end() || keep.contains(a)) {
        continue;
      }
      it->second.wanted_by.erase(group);
      if (it->second.wanted_by.empty()) {
        if (it->second.stream != nullptr) {
          cancel.push_back(std::move(it->second.stream));
        }
        if (metrics_ != nullptr) {
          metrics_->orca_utilization.Remove(
              &metrics_->orca_utilization.Add({{"address", a}}));
        }
        backends_.erase(it);
      }
    }
    mine = addresses;
    for (const std::string& a : addresses) {
      Backend& b = backends_[a];
      if (b.wanted_by.empty()) {
        b.backoff = options_.min_backoff;
        b.due_nanos = 0;
        b.wanted_since = clock_->NowNanos();
      }
      b.wanted_by[group] = interval;
      if (std::shared_ptr<Stream> old = RecomputeLocked(b)) {
        cancel.push_back(std::move(old));
      }
    }
    if (addresses.empty()) {
      groups_.erase(group);
    }
    ++wakeups_;
  }
  for (const std::shared_ptr<Stream>& s : cancel) {
    s->Cancel();
  }
}

std::shared_ptr<OrcaCollector::Stream> OrcaCollector::RecomputeLocked(
    Backend& b) {
  absl::Duration shortest = absl::InfiniteDuration();
  for (const auto& [group, interval] : b.wanted_by) {
    shortest = std::min(shortest, interval);
  }
  if (shortest == b.interval) {
    return nullptr;
  }
  b.interval = shortest;
  // A stream that asked for another interval is opened again at once (its
  // end, CANCELLED after reports, takes no backoff).
  return b.stream;
}

std::optional<OrcaCollector::Report> OrcaCollector::Latest(
    const std::string& address) const {
  aside::MutexLock lock(&mu_);
  auto it = backends_.find(address);
  if (it == backends_.end()) {
    return std::nullopt;
  }
  return it->second.last;
}

std::vector<OrcaCollector::BackendView> OrcaCollector::Backends() const {
  aside::MutexLock lock(&mu_);
  return BackendsLocked();
}

absl::flat_hash_map<std::string, OrcaCollector::BackendView>
OrcaCollector::BackendsByAddress() const {
  absl::flat_hash_map<std::string, BackendView> out;
  for (BackendView& v : Backends()) {
    std::string address = v.address;
    out.emplace(std::move(address), std::move(v));
  }
  return out;
}

bool OrcaCollector::AwaitBackends(
    const std::function<bool(const std::vector<BackendView>&)>& done,
    absl::Duration timeout) const {
  aside::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      [&] {
        mu_.AssertHeld();
        return done(BackendsLocked());
      },
      timeout);
}

std::vector<OrcaCollector::BackendView> OrcaCollector::BackendsLocked() const {
  std::vector<BackendView> out;
  out.reserve(backends_.size());
  for (const auto& [address, b] : backends_) {
    BackendView v;
    v.address = address;
    v.interval = b.interval;
    v.last = b.last;
    v.accepted = b.accepted;
    v.rejected = b.rejected;
    v.last_error = b.last_error;
    if (b.unimplemented) {
      v.state = "unimplemented";
    } else if (b.stream == nullptr && b.last_from_peer) {
      v.state = "peer";
    } else if (b.stream != nullptr) {
      v.state = b.delivered ? "streaming" : "connecting";
    } else {
      v.state = "backoff";
    }
    out.push_back(std::move(v));
  }
  return out;
}

size_t OrcaCollector::open_streams() const {
  aside::MutexLock lock(&mu_);
  return live_streams_;
}

void OrcaCollector::Run() {
  aside::MutexLock lock(&mu_);
  while (!stopping_) {
    // Taken before the two steps below, which let go of the lock: a Want
    // or a stream's end while they run wakes the next wait at once.
    const uint64_t seen = wakeups_;
    DropFinishedLocked();
    const int64_t now = clock_->NowNanos();
    const std::optional<int64_t> next = OpenDueLocked(now);
    auto changed = [this, seen] {
      mu_.AssertHeld();
      return stopping_ || wakeups_ != seen;
    };
    if (next.has_value()) {
      mu_.AwaitWithTimeout(changed, absl::Nanoseconds(*next - now));
    } else {
      mu_.Await(changed);
    }
  }
}

void OrcaCollector::DropFinishedLocked() {
  if (finished_.empty()) {
    return;
  }
  std::vector<std::shared_ptr<Stream>> finished;
  finished.swap(finished_);
  mu_.Unlock();
  finished.clear();
  mu_.Lock();
}

std::optional<int64_t> OrcaCollector::OpenDueLocked(int64_t now) {
  std::optional<int64_t> next;
  std::vector<std::shared_ptr<Stream>> begin;
  for (auto& [address, b] : backends_) {
    if (b.stream != nullptr) {
      continue;
    }
    if (b.due_nanos > now) {
      next = next ? std::min(*next, b.due_nanos) : b.due_nanos;
      continue;
    }
    if (owns_ != nullptr && !owns_(address)) {
      const int64_t orphan_at =
          std::max(b.wanted_since, b.last_peer_nanos) +
          absl::ToInt64Nanoseconds(3 * b.interval + kOrphanGrace);
      if (now < orphan_at) {
        const int64_t recheck = std::min(
            orphan_at, now + absl::ToInt64Nanoseconds(kOwnershipRecheck));
        next = next ? std::min(*next, recheck) : recheck;
        continue;
      }
    }
    b.stream = std::make_shared<Stream>(
        this, address, b.interval, options_.max_report_bytes, options_.relay);
    b.delivered = false;
    ++live_streams_;
    begin.push_back(b.stream);
  }
  if (metrics_ != nullptr) {
    metrics_->orca_streams.Set(static_cast<double>(live_streams_));
  }
  if (!begin.empty()) {
    // gRPC may run a stream's first callbacks on this thread while the call
    // starts; they take the lock.
    mu_.Unlock();
    for (std::shared_ptr<Stream>& s : begin) {
      Stream* raw = s.get();
      raw->Begin(std::move(s));
    }
    mu_.Lock();
  }
  return next;
}

void OrcaCollector::AcceptLocked(const std::string& address, Backend& b,
                                 const OrcaLoad& load, int64_t now,
                                 bool from_peer) {
  ++b.accepted;
  Report r;
  r.load = load;
  r.received_nanos = now;
  r.received_at = clock_->WallNow();
  r.seq = b.accepted;
  b.last = r;
  b.last_from_peer = from_peer;
  if (metrics_ != nullptr) {
    metrics_->orca_utilization.Add({{"address", address}})
        .Set(OrcaUtilization(load));
  }
}

std::vector<OrcaShare> OrcaCollector::ExportOwn() const {
  aside::MutexLock lock(&mu_);
  std::vector<OrcaShare> out;
  for (const auto& [address, b] : backends_) {
    if (!b.last.has_value() || b.last_from_peer) {
      continue;
    }
    OrcaShare share;
    share.address = address;
    share.load = b.last->load;
    share.seq = b.last->seq;
    share.owner = owns_ == nullptr || owns_(address);
    out.push_back(std::move(share));
  }
  return out;
}

void OrcaCollector::ApplyPeer(const OrcaShare& share) {
  const int64_t now = clock_->NowNanos();
  std::shared_ptr<Stream> cancel;
  {
    aside::MutexLock lock(&mu_);
    auto it = backends_.find(share.address);
    if (it == backends_.end()) {
      return;  // not wanted here
    }
    Backend& b = it->second;
    if (b.stream != nullptr) {
      if (!share.owner || owns_ == nullptr || owns_(share.address)) {
        return;  // this replica's stream serves it
      }
      // The owner serves it: this replica's stream (an orphan's) closes.
      cancel = b.stream;
    }
    b.last_peer_nanos = now;
    AcceptLocked(share.address, b, share.load, now, /*from_peer=*/true);
  }
  if (cancel != nullptr) {
    cancel->Cancel();
  }
}

void OrcaCollector::CountReport(const char* result) {
  if (metrics_ != nullptr) {
    metrics_->orca_reports.Add({{"result", result}}).Increment();
  }
}

void OrcaCollector::OnReport(Stream* stream, const OrcaLoad& load, bool valid,
                             const std::string& why) {
  const int64_t now = clock_->NowNanos();
  const char* result = "accepted";
  bool log = false;
  {
    aside::MutexLock lock(&mu_);
    auto it = backends_.find(stream->address());
    if (it == backends_.end() || it->second.stream.get() != stream) {
      return;  // a stream being cancelled
    }
    Backend& b = it->second;
    b.delivered = true;
    b.unimplemented = false;
    b.backoff = options_.min_backoff;
    if (!valid) {
      result = "rejected";
      ++b.rejected;
      b.last_error = why;
      log = now - b.last_logged_nanos >= absl::ToInt64Nanoseconds(kLogEvery) ||
            b.last_logged_nanos == 0;
      if (log) {
        b.last_logged_nanos = now;
      }
    } else if (b.last.has_value() &&
               now - b.last_accept_nanos <
                   absl::ToInt64Nanoseconds(b.interval) / 2) {
      result = "throttled";
    } else {
      b.last_accept_nanos = now;
      AcceptLocked(stream->address(), b, load, now, /*from_peer=*/false);
    }
    // Counted with the report taken: whoever sees one sees the other.
    CountReport(result);
  }
  if (log) {
    Log(LogLevel::kWarn, "orca.report_rejected",
        {{"backend", stream->address()}, {"error", why}});
  }
}

void OrcaCollector::OnDone(Stream* stream, int code, const std::string& message,
                           std::shared_ptr<Stream> self) {
  const int64_t now = clock_->NowNanos();
  aside::MutexLock lock(&mu_);
  finished_.push_back(std::move(self));
  ++wakeups_;
  --live_streams_;
  if (metrics_ != nullptr) {
    metrics_->orca_streams.Set(static_cast<double>(live_streams_));
  }
  auto it = backends_.find(stream->address());
  if (it == backends_.end() || it->second.stream.get() != stream) {
    return;  // cancelled: no longer wanted
  }
  Backend& b = it->second;
  b.stream.reset();
  if (stopping_) {
    return;
  }
  const bool unimplemented =
      code == static_cast<int>(grpc::StatusCode::UNIMPLEMENTED);
  absl::Duration wait;
  if (unimplemented) {
    wait = options_.unimplemented_retry;
    if (!b.unimplemented) {
      Log(LogLevel::kInfo, "orca.unimplemented",
          {{"backend", stream->address()},
           {"retry_in", absl::FormatDuration(wait)}});
    }
    b.unimplemented = true;
  } else if (b.delivered &&
             code == static_cast<int>(grpc::StatusCode::CANCELLED)) {
    wait = absl::ZeroDuration();  // cancelled to take a new interval
  } else {
    const double jitter =
        1 + kBackoffJitter * (2 * ThreadRng().NextDouble() - 1);  // ±20 %
    wait = b.backoff * jitter;
    b.backoff = std::min(options_.max_backoff, b.backoff * kBackoffFactor);
  }
  b.last_error = absl::StrCat(
      grpc::StatusCode(code) == grpc::StatusCode::OK ? "ended: " : "failed: ",
      message.substr(0, 200));
  b.due_nanos = now + absl::ToInt64Nanoseconds(wait);
  ++wakeups_;
}

void OrcaViewsToProto(const OrcaCollector& orca, v1::Group* group) {
  const absl::flat_hash_map<std::string, OrcaCollector::BackendView> views =
      orca.BackendsByAddress();
  const absl::Time now = absl::Now();
  for (v1::TableBackend& tb : *group->mutable_state()) {
    auto it = views.find(tb.backend().address());
    if (it == views.end()) {
      continue;
    }
    const OrcaCollector::BackendView& v = it->second;
    v1::OrcaView* out = tb.mutable_orca();
    out->set_state(v.state);
    out->set_last_error(v.last_error);
    if (v.last.has_value()) {
      out->set_utilization(OrcaUtilization(v.last->load));
      out->set_qps(v.last->load.qps);
      out->set_eps(v.last->load.eps);
      const int64_t age = absl::ToInt64Nanoseconds(
          std::max(absl::ZeroDuration(), now - v.last->received_at));
      out->mutable_age()->set_seconds(age / 1'000'000'000);
      out->mutable_age()->set_nanos(static_cast<int32_t>(age % 1'000'000'000));
    }
  }
}

}  // namespace aside::server
