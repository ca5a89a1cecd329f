#include "server/discovery/dns_discovery.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "lib/thread_name.h"

namespace aside::server {
namespace {

// The longest the loop sleeps when nothing is due (it is woken for every
// change anyway).
constexpr absl::Duration kMaxSleep = absl::Minutes(1);

}  // namespace

// One watched name. Guarded by DnsDiscovery::mu_.
struct DnsDiscovery::WatchState {
  std::string group;
  DnsSpec spec;
  std::shared_ptr<const DnsMembersCallback> callback;
  GroupMetrics* metrics = nullptr;

  // Scheduling (Clock::NowNanos).
  int64_t due_nanos = 0;
  bool in_flight = false;
  bool resolve_again = false;
  // Numbers resolutions so that a late answer for an older one is ignored.
  uint64_t seq = 0;

  // What the callback was last told.
  bool has_members = false;
  std::vector<Backend> members;
  absl::Status reported_error;

  uint64_t resolutions = 0;
  uint64_t consecutive_failures = 0;
  absl::Status last_error;
  absl::Time last_success = absl::InfinitePast();
  absl::Time last_failure = absl::InfinitePast();
};

// The series of one group label, shared by its watches.
struct DnsDiscovery::GroupMetrics {
  int refs = 0;
  std::map<DnsOutcome, prometheus::Counter*> resolutions;
  prometheus::Gauge* members = nullptr;
  prometheus::Gauge* last_success = nullptr;
};

absl::Duration JitteredInterval(absl::Duration interval, double jitter,
                                double u) {
  return interval * (1.0 + jitter * (2.0 * u - 1.0));
}

absl::Status ValidateDnsWatch(const DnsSpec& spec,
                              absl::Duration min_interval) {
  return ValidateDns("dns", spec, min_interval);
}

absl::StatusOr<std::unique_ptr<DnsDiscovery>> DnsDiscovery::Create(
    DnsDiscoveryOptions options, prometheus::Registry& registry) {
  if (!(options.jitter >= 0 && options.jitter <= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dns jitter: ", options.jitter, " out of range 0..0.5"));
  }
  if (options.max_in_flight < 1) {
    return absl::InvalidArgumentError("dns max_in_flight: must be at least 1");
  }
  if (options.min_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("dns min_interval: must be positive");
  }
  DnsResolverOptions resolver_options;
  resolver_options.servers = options.servers;
  resolver_options.timeout = options.query_timeout;
  resolver_options.tries = options.tries;
  absl::StatusOr<std::unique_ptr<DnsResolver>> resolver =
      DnsResolver::Create(resolver_options);
  if (!resolver.ok()) {
    return resolver.status();
  }

  prometheus::Family<prometheus::Counter>* resolutions = nullptr;
  prometheus::Family<prometheus::Gauge>* members = nullptr;
  prometheus::Family<prometheus::Gauge>* last_success = nullptr;
  try {
    resolutions = &prometheus::BuildCounter()
                       .Name("aside_dns_resolutions_total")
                       .Help(
                           "DNS discovery resolutions by group and result "
                           "(ok, nxdomain, timeout, servfail, refused, "
                           "connection_refused, bad_response, error).")
                       .Register(registry);
    members = &prometheus::BuildGauge()
                   .Name("aside_dns_members")
                   .Help(
                       "Members of a group found by DNS in the last "
                       "successful resolution.")
                   .Register(registry);
    last_success = &prometheus::BuildGauge()
                        .Name("aside_dns_last_success_timestamp_seconds")
                        .Help(
                            "Unix time of a group's last successful DNS "
                            "resolution.")
                        .Register(registry);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("dns metrics: registration failed: ", e.what()));
  }

  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return absl::InternalError(
        absl::StrCat("dns discovery: eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<DnsDiscovery> discovery(new DnsDiscovery(
      std::move(options), *resolutions, *members, *last_success));
  discovery->resolver_ = *std::move(resolver);
  discovery->wake_fd_ = wake_fd;
  discovery->thread_ = std::thread([d = discovery.get()] {
    NameThisThread("aside-dns");
    d->Run();
  });
  discovery->thread_id_ = discovery->thread_.get_id();
  return discovery;
}

DnsDiscovery::DnsDiscovery(DnsDiscoveryOptions options,
                           prometheus::Family<prometheus::Counter>& resolutions,
                           prometheus::Family<prometheus::Gauge>& members,
                           prometheus::Family<prometheus::Gauge>& last_success)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : SystemClock::Get()),
      resolutions_family_(resolutions),
      members_family_(members),
      last_success_family_(last_success),
      rng_(options_.seed != 0 ? options_.seed : ThreadRng().Next()) {}

DnsDiscovery::~DnsDiscovery() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) {
    thread_.join();
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
  }
  MutexLock lock(&mu_);
  for (auto& [group, metrics] : group_metrics_) {
    for (auto& [outcome, counter] : metrics->resolutions) {
      resolutions_family_.Remove(counter);
    }
    members_family_.Remove(metrics->members);
    last_success_family_.Remove(metrics->last_success);
  }
  group_metrics_.clear();
}

absl::StatusOr<DnsWatchId> DnsDiscovery::Watch(std::string group, DnsSpec spec,
                                               DnsMembersCallback callback) {
  if (absl::Status valid = ValidateDnsWatch(spec, options_.min_interval);
      !valid.ok()) {
    return valid;
  }
  if (!callback) {
    return absl::InvalidArgumentError("dns watch: callback is empty");
  }
  DnsWatchId id = 0;
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      return absl::FailedPreconditionError("dns discovery: shutting down");
    }
    id = next_id_++;
    auto watch = std::make_unique<WatchState>();
    watch->group = std::move(group);
    watch->spec = std::move(spec);
    watch->callback =
        std::make_shared<const DnsMembersCallback>(std::move(callback));
    watch->metrics = AcquireGroupMetricsLocked(watch->group);
    watch->due_nanos = clock_.NowNanos();
    watches_.emplace(id, std::move(watch));
  }
  Wake();
  return id;
}

void DnsDiscovery::Unwatch(DnsWatchId id) {
  MutexLock lock(&mu_);
  auto it = watches_.find(id);
  if (it == watches_.end()) {
    return;
  }
  ReleaseGroupMetricsLocked(it->second->group);
  watches_.erase(it);
  // A query in flight completes later and finds no watch. A callback
  // running on the loop thread is waited for, unless this is that callback.
  if (std::this_thread::get_id() != thread_id_) {
    mu_.Await([this, id] {
      mu_.AssertHeld();
      return delivering_ != id;
    });
  }
}

void DnsDiscovery::ResolveNow(DnsWatchId id) {
  {
    MutexLock lock(&mu_);
    auto it = watches_.find(id);
    if (it == watches_.end()) {
      return;
    }
    WatchState& watch = *it->second;
    if (watch.in_flight) {
      // The answer in flight may predate the change that prompted this.
      watch.resolve_again = true;
      return;
    }
    watch.due_nanos = clock_.NowNanos();
  }
  Wake();
}

std::optional<DnsWatchStatus> DnsDiscovery::Status(DnsWatchId id) const {
  MutexLock lock(&mu_);
  auto it = watches_.find(id);
  if (it == watches_.end()) {
    return std::nullopt;
  }
  DnsWatchStatus status = StatusLocked(*it->second);
  status.id = id;
  return status;
}

std::vector<DnsWatchStatus> DnsDiscovery::List() const {
  MutexLock lock(&mu_);
  std::vector<DnsWatchStatus> out;
  out.reserve(watches_.size());
  for (const auto& [id, watch] : watches_) {
    out.push_back(StatusLocked(*watch));
    out.back().id = id;
  }
  return out;
}

DnsWatchStatus DnsDiscovery::StatusLocked(const WatchState& watch) const {
  DnsWatchStatus status;
  status.group = watch.group;
  status.spec = watch.spec;
  status.members = watch.members.size();
  status.resolutions = watch.resolutions;
  status.consecutive_failures = watch.consecutive_failures;
  status.last_error = watch.last_error;
  status.last_success = watch.last_success;
  status.last_failure = watch.last_failure;
  status.in_flight = watch.in_flight;
  return status;
}

void DnsDiscovery::Wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the loop wakes anyway.
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

absl::Duration DnsDiscovery::NextIntervalLocked(absl::Duration interval) {
  return JitteredInterval(interval, options_.jitter, rng_.NextDouble());
}

DnsDiscovery::GroupMetrics* DnsDiscovery::AcquireGroupMetricsLocked(
    const std::string& group) {
  std::unique_ptr<GroupMetrics>& metrics = group_metrics_[group];
  if (metrics == nullptr) {
    metrics = std::make_unique<GroupMetrics>();
    metrics->members = &members_family_.Add({{"group", group}});
    metrics->last_success = &last_success_family_.Add({{"group", group}});
    metrics->resolutions[DnsOutcome::kOk] = &resolutions_family_.Add(
        {{"group", group},
         {"result", std::string(DnsOutcomeName(DnsOutcome::kOk))}});
  }
  ++metrics->refs;
  return metrics.get();
}

void DnsDiscovery::ReleaseGroupMetricsLocked(const std::string& group) {
  auto it = group_metrics_.find(group);
  if (it == group_metrics_.end() || --it->second->refs > 0) {
    return;
  }
  GroupMetrics& metrics = *it->second;
  for (auto& [outcome, counter] : metrics.resolutions) {
    resolutions_family_.Remove(counter);
  }
  members_family_.Remove(metrics.members);
  last_success_family_.Remove(metrics.last_success);
  group_metrics_.erase(it);
}

void DnsDiscovery::Run() {
  struct Start {
    DnsWatchId id;
    uint64_t seq;
    DnsSpec spec;
  };
  std::vector<Start> starts;
  std::vector<std::pair<int64_t, DnsWatchId>> due;
  std::vector<pollfd> fds;
  while (true) {
    starts.clear();
    absl::Duration sleep = kMaxSleep;
    {
      MutexLock lock(&mu_);
      if (stopping_) {
        break;
      }
      const int64_t now = clock_.NowNanos();
      due.clear();
      for (auto& [id, watch] : watches_) {
        if (watch->in_flight) {
          continue;
        }
        if (watch->due_nanos <= now) {
          due.emplace_back(watch->due_nanos, id);
        } else {
          sleep = std::min(sleep, absl::Nanoseconds(watch->due_nanos - now));
        }
      }
      // The most overdue first, up to the cap; the rest start as earlier
      // resolutions end (their sockets wake the loop).
      const size_t pending = resolver_->pending();
      const size_t capacity = options_.max_in_flight > pending
                                  ? options_.max_in_flight - pending
                                  : 0;
      if (due.size() > capacity) {
        std::nth_element(due.begin(), due.begin() + capacity, due.end());
        due.resize(capacity);
      }
      for (const auto& [due_nanos, id] : due) {
        WatchState& watch = *watches_[id];
        watch.in_flight = true;
        starts.push_back({id, ++watch.seq, watch.spec});
      }
    }
    // Outside mu_: a query can fail synchronously, and OnResolved locks.
    for (const Start& start : starts) {
      auto done = [this, id = start.id, seq = start.seq](DnsResult result) {
        OnResolved(id, seq, std::move(result));
      };
      const auto port = static_cast<uint16_t>(start.spec.port);
      if (start.spec.srv) {
        resolver_->ResolveSrv(start.spec.name, port, std::move(done));
      } else {
        resolver_->ResolveHost(start.spec.name, port, std::move(done));
      }
    }
    DeliverPending();

    sleep = resolver_->NextTimeout(sleep);
    fds.clear();
    fds.push_back(pollfd{wake_fd_, POLLIN, 0});
    resolver_->AppendPollFds(fds);
    const int64_t sleep_ms =
        (absl::ToInt64Microseconds(sleep) + 999) / 1000;  // round up
    const int ready = poll(fds.data(), fds.size(),
                           static_cast<int>(std::max<int64_t>(0, sleep_ms)));
    if (ready < 0) {
      for (pollfd& p : fds) {
        p.revents = 0;  // EINTR: just handle timeouts below
      }
    }
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
    }
    resolver_->Process(absl::MakeConstSpan(fds).subspan(1));
    DeliverPending();
  }
  // Every pending query ends with kCancelled; OnResolved drops them.
  resolver_.reset();
  deliveries_.clear();
}

void DnsDiscovery::OnResolved(DnsWatchId id, uint64_t seq, DnsResult result) {
  MutexLock lock(&mu_);
  if (stopping_) {
    return;
  }
  auto it = watches_.find(id);
  if (it == watches_.end() || it->second->seq != seq) {
    return;  // unwatched while the query was in flight
  }
  WatchState& watch = *it->second;
  const int64_t now = clock_.NowNanos();
  const absl::Time wall = clock_.WallNow();
  watch.in_flight = false;
  ++watch.resolutions;
  if (watch.resolve_again) {
    watch.resolve_again = false;
    watch.due_nanos = now;
  } else {
    watch.due_nanos =
        now + absl::ToInt64Nanoseconds(NextIntervalLocked(watch.spec.interval));
  }

  GroupMetrics& metrics = *watch.metrics;
  prometheus::Counter*& counter = metrics.resolutions[result.outcome];
  if (counter == nullptr) {
    counter = &resolutions_family_.Add(
        {{"group", watch.group},
         {"result", std::string(DnsOutcomeName(result.outcome))}});
  }
  counter->Increment();

  if (result.outcome == DnsOutcome::kNxdomain && options_.nxdomain_as_empty) {
    result.outcome = DnsOutcome::kOk;
    result.status = absl::OkStatus();
    result.addresses.clear();
  }
  if (result.outcome == DnsOutcome::kOk &&
      result.addresses.size() > kMaxBackendsPerGroup) {
    result.outcome = DnsOutcome::kError;
    result.status = absl::ResourceExhaustedError(
        absl::StrCat("dns '", watch.spec.name, "': ", result.addresses.size(),
                     " addresses (at most ", kMaxBackendsPerGroup, ")"));
  }

  if (result.outcome == DnsOutcome::kOk) {
    std::vector<Backend> members;
    members.reserve(result.addresses.size());
    for (std::string& address : result.addresses) {
      Backend backend;
      backend.address = std::move(address);
      backend.weight = watch.spec.weight;
      backend.locality = watch.spec.locality;
      members.push_back(std::move(backend));
    }
    watch.consecutive_failures = 0;
    watch.last_error = absl::OkStatus();
    watch.last_success = wall;
    metrics.members->Set(static_cast<double>(members.size()));
    metrics.last_success->Set(absl::ToDoubleSeconds(wall - absl::UnixEpoch()));
    const bool changed = !watch.has_members || members != watch.members ||
                         !watch.reported_error.ok();
    watch.has_members = true;
    watch.members = std::move(members);
    watch.reported_error = absl::OkStatus();
    if (changed) {
      deliveries_.push_back({id, watch.callback, watch.members});
    }
    return;
  }

  ++watch.consecutive_failures;
  watch.last_error = result.status;
  watch.last_failure = wall;
  if (watch.reported_error != result.status) {
    watch.reported_error = result.status;
    deliveries_.push_back({id, watch.callback, result.status});
  }
}

void DnsDiscovery::DeliverPending() {
  std::vector<Delivery> deliveries;
  deliveries.swap(deliveries_);
  for (Delivery& delivery : deliveries) {
    Deliver(std::move(delivery));
  }
}

void DnsDiscovery::Deliver(Delivery delivery) {
  {
    MutexLock lock(&mu_);
    if (stopping_ || watches_.find(delivery.id) == watches_.end()) {
      return;
    }
    delivering_ = delivery.id;
  }
  (*delivery.callback)(delivery.members);
  MutexLock lock(&mu_);
  delivering_ = 0;  // the unlock wakes an Unwatch waiting for this callback
}

}  // namespace aside::server
