#include "server/health/outlier_detector.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aside::server {

OutlierDetector::OutlierDetector(const OutlierSpec& spec, const Clock* clock)
    : clock_(clock), spec_(spec) {}

bool OutlierDetector::SetSpec(const OutlierSpec& spec) {
  MutexLock lock(&mu_);
  spec_ = spec;
  if (spec_.enabled) {
    return false;
  }
  const int64_t now = clock_->NowNanos();
  bool cleared = false;
  for (auto& [address, entry] : entries_) {
    cleared = cleared || EjectedAt(entry, now);
    entry = Entry{};
  }
  return cleared;
}

bool OutlierDetector::enabled() const {
  MutexLock lock(&mu_);
  return spec_.enabled;
}

void OutlierDetector::SetMembers(absl::Span<const std::string> addresses) {
  MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, Entry> next;
  next.reserve(addresses.size());
  for (const std::string& address : addresses) {
    auto it = entries_.find(address);
    next.emplace(address, it == entries_.end() ? Entry{} : it->second);
  }
  entries_ = std::move(next);
}

bool OutlierDetector::Report(absl::string_view address, bool success) {
  if (!success) {
    return ReportConsecutiveFailures(address, 1);
  }
  MutexLock lock(&mu_);
  if (!spec_.enabled) {
    return false;
  }
  auto it = entries_.find(address);
  if (it == entries_.end() || EjectedAt(it->second, clock_->NowNanos())) {
    return false;
  }
  it->second.consecutive_failures = 0;
  return false;
}

bool OutlierDetector::ReportConsecutiveFailures(absl::string_view address,
                                                uint32_t n) {
  MutexLock lock(&mu_);
  if (!spec_.enabled || n == 0) {
    return false;
  }
  auto it = entries_.find(address);
  if (it == entries_.end()) {
    return false;
  }
  return FailLocked(it->second, n, clock_->NowNanos());
}

bool OutlierDetector::ReportBatch(absl::string_view address, uint64_t requests,
                                  uint64_t failures,
                                  uint64_t trailing_failures) {
  failures = std::min(failures, requests);
  trailing_failures = std::min(trailing_failures, failures);
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  if (requests == 0) {
    return false;
  }
  if (failures == requests) {
    return ReportConsecutiveFailures(
        address, static_cast<uint32_t>(std::min(failures, kMax)));
  }
  Report(address, true);
  return ReportConsecutiveFailures(
      address, static_cast<uint32_t>(std::min(trailing_failures, kMax)));
}

bool OutlierDetector::FailLocked(Entry& entry, uint32_t n, int64_t now) {
  if (EjectedAt(entry, now)) {
    return false;
  }
  const uint64_t failures =
      static_cast<uint64_t>(entry.consecutive_failures) + n;
  entry.consecutive_failures = static_cast<uint32_t>(
      std::min<uint64_t>(failures, std::numeric_limits<uint32_t>::max()));
  if (entry.consecutive_failures < spec_.consecutive_failures) {
    return false;
  }
  if (EjectedCountLocked(now) >= MaxEjectedLocked()) {
    return false;  // the cap is full; the next failure tries again
  }
  const int64_t base =
      std::max<int64_t>(1, absl::ToInt64Nanoseconds(spec_.base_ejection_time));
  uint32_t previous = entry.ejections;
  if (previous > 0) {
    // One step of decay per base_ejection_time spent un-ejected.
    const int64_t idle = std::max<int64_t>(0, now - entry.ejected_until);
    const uint64_t decay = static_cast<uint64_t>(idle / base);
    previous = decay >= previous ? 0 : previous - static_cast<uint32_t>(decay);
  }
  entry.ejections = previous == std::numeric_limits<uint32_t>::max()
                        ? previous
                        : previous + 1;
  const absl::Duration duration =
      std::min(spec_.base_ejection_time * static_cast<int64_t>(entry.ejections),
               spec_.max_ejection_time);
  entry.ejected_until = now + absl::ToInt64Nanoseconds(duration);
  entry.consecutive_failures = 0;
  return true;
}

bool OutlierDetector::IsEjected(absl::string_view address) const {
  return IsEjected(address, clock_->NowNanos());
}

bool OutlierDetector::IsEjected(absl::string_view address,
                                int64_t now_nanos) const {
  MutexLock lock(&mu_);
  if (!spec_.enabled) {
    return false;
  }
  auto it = entries_.find(address);
  return it != entries_.end() && EjectedAt(it->second, now_nanos);
}

std::optional<int64_t> OutlierDetector::NextExpiry() const {
  MutexLock lock(&mu_);
  if (!spec_.enabled) {
    return std::nullopt;
  }
  const int64_t now = clock_->NowNanos();
  std::optional<int64_t> next;
  for (const auto& [address, entry] : entries_) {
    if (EjectedAt(entry, now) && (!next || entry.ejected_until < *next)) {
      next = entry.ejected_until;
    }
  }
  return next;
}

size_t OutlierDetector::EjectedCount() const {
  MutexLock lock(&mu_);
  return spec_.enabled ? EjectedCountLocked(clock_->NowNanos()) : 0;
}

size_t OutlierDetector::MaxEjected() const {
  MutexLock lock(&mu_);
  return MaxEjectedLocked();
}

size_t OutlierDetector::EjectedCountLocked(int64_t now) const {
  size_t count = 0;
  for (const auto& [address, entry] : entries_) {
    count += EjectedAt(entry, now) ? 1 : 0;
  }
  return count;
}

size_t OutlierDetector::MaxEjectedLocked() const {
  if (!(spec_.max_ejection_percent > 0)) {
    return 0;
  }
  // The epsilon keeps 10 % of 30 at 3 despite binary rounding.
  const double share =
      static_cast<double>(entries_.size()) * spec_.max_ejection_percent / 100.0;
  const size_t floor = static_cast<size_t>(std::floor(share + 1e-9));
  // Never every member, whatever the percent (100 included): reports alone
  // must not empty a group.
  const size_t most = entries_.size() == 0 ? 0 : entries_.size() - 1;
  return std::min(most, std::max<size_t>(1, floor));
}

std::vector<OutlierDetector::Ejection> OutlierDetector::Ejections() const {
  MutexLock lock(&mu_);
  std::vector<Ejection> out;
  if (!spec_.enabled) {
    return out;
  }
  const int64_t now = clock_->NowNanos();
  const absl::Time wall_now = clock_->WallNow();
  for (const auto& [address, entry] : entries_) {
    if (EjectedAt(entry, now)) {
      out.push_back({address, entry.ejected_until,
                     wall_now + absl::Nanoseconds(entry.ejected_until - now),
                     entry.ejections});
    }
  }
  std::sort(out.begin(), out.end(), [](const Ejection& a, const Ejection& b) {
    return a.address < b.address;
  });
  return out;
}

}  // namespace aside::server
