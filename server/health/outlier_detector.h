// Passive health: outlier detection from the outcomes clients report
// (DESIGN.md §3, Envoy's consecutive-5xx detector). One detector per group.
//
// Semantics:
// - Off unless the spec is enabled: reports are ignored, nothing is ejected.
// - `consecutive_failures` failures in a row (no success in between) eject a
//   backend for base_ejection_time x n, capped at max_ejection_time, where n
//   is its ejection count including this one. The count decays: every
//   base_ejection_time a backend spends un-ejected after an ejection ends
//   takes one off n (as Envoy does), so a backend that misbehaved once last
//   week starts again at base_ejection_time.
// - A success resets the consecutive count. Reports about an ejected backend
//   are ignored (they describe traffic from before the ejection), and the
//   count restarts from zero when it returns.
// - At most max_ejection_percent of the group's members are ejected at
//   once: floor(members x percent / 100), but at least one when the percent
//   is above zero, as Envoy documents ("will eject at least one host
//   regardless of the value"): otherwise any group smaller than
//   100 / percent (10 backends at the default 10 %) could never eject
//   anything. Never all of them, though, even at 100 %: at least one
//   member is never ejected (a group of one never ejects), so reports
//   alone cannot empty a group. A failure that reaches the threshold while
//   the cap is full
//   does not eject; the next failure tries again. Ejecting the last ready
//   backends is what panic mode (the group's panic_threshold) is for.
// - Reports for addresses that are not members are ignored, so a client
//   cannot grow the detector's memory.
// - Expiry is lazy: IsEjected compares with the clock. A group schedules a
//   table rebuild at NextExpiry() so an ejected backend returns on time.
//
// Thread-safe (one internal mutex); every call is O(1) except SetMembers,
// NextExpiry and Ejections, which are O(members). Time comes from the
// injected Clock (FakeClock in tests).
#ifndef ASIDE_SERVER_HEALTH_OUTLIER_DETECTOR_H_
#define ASIDE_SERVER_HEALTH_OUTLIER_DETECTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/schema/group_spec.h"

namespace aside::server {

class OutlierDetector {
 public:
  // `clock` must outlive the detector.
  OutlierDetector(const OutlierSpec& spec, const Clock* clock);
  OutlierDetector(const OutlierDetector&) = delete;
  OutlierDetector& operator=(const OutlierDetector&) = delete;

  // Replaces the spec. Disabling clears every ejection and count; otherwise
  // the state is kept (current ejections run until their end). Returns true
  // when an ejection was cleared (the group should rebuild).
  bool SetSpec(const OutlierSpec& spec);
  bool enabled() const;

  // The group's members (canonical addresses). State of departed members is
  // dropped; new members start clean. The cap is computed on their count.
  void SetMembers(absl::Span<const std::string> addresses);

  // One request outcome. Returns true when this report ejected the backend
  // (the group should rebuild its table).
  bool Report(absl::string_view address, bool success);
  // `n` failures in a row (as if Report(address, false) were called n
  // times, in O(1)). Returns true when the backend was ejected.
  bool ReportConsecutiveFailures(absl::string_view address, uint32_t n);

  // A batch of outcomes one reporter saw since its previous report
  // (aside.v1.BackendLoad deltas): `requests` completed, `failures` of them
  // failed, the last `trailing_failures` of them in a row
  // (BackendLoad.consecutive_failures, capped at `failures`). Taken as: when
  // every request failed, `failures` more in the current run; otherwise a
  // success (resetting the run) followed by `trailing_failures` failures.
  // Reports of several reporters interleave, so the fleet-wide run is an
  // approximation, as with any aggregated detector. Returns true when the
  // backend was ejected.
  bool ReportBatch(absl::string_view address, uint64_t requests,
                   uint64_t failures, uint64_t trailing_failures);

  // Whether `address` is ejected now (or at `now_nanos`, so that a table
  // build uses one instant for every member).
  bool IsEjected(absl::string_view address) const;
  bool IsEjected(absl::string_view address, int64_t now_nanos) const;

  // The earliest end of a current ejection (monotonic nanoseconds), or
  // nullopt when nothing is ejected.
  std::optional<int64_t> NextExpiry() const;

  // Members ejected now.
  size_t EjectedCount() const;
  // The cap: how many members may be ejected at once.
  size_t MaxEjected() const;

  // Current ejections, sorted by address (for Admin ListTargets).
  struct Ejection {
    std::string address;
    int64_t until_nanos = 0;
    absl::Time until;    // wall clock, for people
    uint32_t count = 0;  // ejection count n
  };
  std::vector<Ejection> Ejections() const;

 private:
  struct Entry {
    uint32_t consecutive_failures = 0;
    uint32_t ejections = 0;     // n, before decay
    int64_t ejected_until = 0;  // end of the last ejection (0: never)
  };

  bool FailLocked(Entry& entry, uint32_t n, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t EjectedCountLocked(int64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t MaxEjectedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool EjectedAt(const Entry& entry, int64_t now) {
    return entry.ejected_until > now;
  }

  const Clock* const clock_;
  mutable Mutex mu_;
  OutlierSpec spec_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_HEALTH_OUTLIER_DETECTOR_H_
