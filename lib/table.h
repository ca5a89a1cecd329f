// The immutable snapshot a pick reads: one group's generation, members,
// their readiness and effective weights, and the selector built from them,
// published together as one object (never as separate pointers that a pick
// could see torn).
#ifndef ASIDE_LIB_TABLE_H_
#define ASIDE_LIB_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/backend.h"
#include "lib/load/backend_load.h"
#include "lib/load/load_tracker.h"
#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

// A member of a table: the backend as declared plus the state the control
// plane derived for it.
struct Member {
  Backend backend;
  // Effective weight the policies use (after slow start); 0 is never picked.
  uint32_t weight = kDefaultWeight;
  // Not drained, healthy and not ejected.
  bool ready = true;
  HealthState health = HealthState::kUnknown;

  // Set by Table::Create: may be picked (weight > 0 and ready, or in panic
  // mode weight > 0 and not drained).
  bool eligible = false;
  // Set by Table::Create: the backend's load, owned by the table.
  BackendLoad* load = nullptr;
};

// Routing weight of one zone (locality policy); computed by the control
// plane from load reports, see lib/policies/locality.h.
struct ZoneWeight {
  Locality locality;
  double weight = 0;
  // Smoothed utilisation 0..1, or -1 when no fresh report exists.
  double utilization = -1;
  uint32_t host_count = 0;
  friend bool operator==(const ZoneWeight&, const ZoneWeight&) = default;
};

// What a table is built from.
struct TableSpec {
  std::string group;
  uint64_t generation = 0;
  PolicyConfig policy;
  // Any order; Create sorts them by address. Addresses must be canonical
  // (ValidateBackend) and unique.
  std::vector<Member> members;
  // Percent 0..100 of non-drained members that must be ready; below it,
  // every non-drained member is eligible (panic). 0 disables.
  double panic_threshold = 50;
  // Zone weights for the locality policy (may be empty).
  std::vector<ZoneWeight> zone_weights;
  // Key that signs sticky session tokens (at least 16 bytes); required for
  // the sticky policy.
  std::shared_ptr<const std::string> session_key;
};

using TableConstPtr = std::shared_ptr<const Table>;

class Table {
 public:
  // Validates the spec, sorts the members, derives eligibility and builds the
  // selector. `previous` (may be null) is the group's current table: hash
  // rings are shared with it when members and weights are unchanged, so a
  // readiness-only change never rebuilds a ring. `loads` supplies each
  // member's BackendLoad (a private tracker is used when null).
  static absl::StatusOr<TableConstPtr> Create(TableSpec spec,
                                              const Table* previous,
                                              LoadTracker* loads);

  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  ~Table();

  const std::string& group() const { return group_; }
  uint64_t generation() const { return generation_; }
  const PolicyConfig& policy() const { return policy_; }
  double panic_threshold() const { return panic_threshold_; }
  const std::shared_ptr<const std::string>& session_key() const {
    return session_key_;
  }
  // The load-model parameters of the policy: what callers pass to
  // BackendLoad::Finish when a request to a member completes.
  const LoadModel& load_model() const { return load_model_; }
  // Sorted by address.
  const std::vector<Member>& members() const { return members_; }
  const Member& member(uint32_t index) const { return members_[index]; }
  size_t size() const { return members_.size(); }
  const std::vector<ZoneWeight>& zone_weights() const { return zone_weights_; }

  // Whether member `index` may be picked (see Member::eligible).
  bool eligible(uint32_t index) const noexcept { return eligible_[index]; }
  bool panic() const { return panic_; }
  uint32_t ready_count() const { return ready_count_; }
  uint32_t eligible_count() const { return eligible_count_; }
  // Members that are not drained and have weight > 0.
  uint32_t active_count() const { return active_count_; }

  // Index of the member with this canonical address, or -1.
  int64_t Find(absl::string_view address) const;

  // Picks with the table's policy (see Selector::Pick).
  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept {
    return selector_->Pick(request, out);
  }
  const Selector& selector() const { return *selector_; }

  // Why nothing could be picked, for error messages: "group 'web' has no
  // backends", "... all 3 backends are drained", "... 0 of 4 backends ready".
  std::string NoBackendMessage(size_t excluded) const;

 private:
  Table() = default;

  std::string group_;
  uint64_t generation_ = 0;
  PolicyConfig policy_;
  LoadModel load_model_;
  double panic_threshold_ = 0;
  std::shared_ptr<const std::string> session_key_;
  std::vector<Member> members_;
  std::vector<uint8_t> eligible_;
  std::vector<ZoneWeight> zone_weights_;
  std::vector<std::shared_ptr<BackendLoad>> load_refs_;
  // The tracker load_refs_ came from (null: a private one), so that the
  // next table from the same tracker can take them over without a lookup.
  const LoadTracker* tracker_ = nullptr;
  std::vector<uint32_t> all_indexes_;
  bool panic_ = false;
  uint32_t ready_count_ = 0;
  uint32_t eligible_count_ = 0;
  uint32_t active_count_ = 0;
  std::unique_ptr<const Selector> selector_;
};

// Small helpers policies share.
namespace pick_internal {

inline bool Contains(absl::Span<const uint32_t> list, uint32_t value) {
  for (uint32_t v : list) {
    if (v == value) {
      return true;
    }
  }
  return false;
}

// True when member `index` can be added to `out[0..count)`: eligible, not
// excluded and not already there.
inline bool Acceptable(const Table& table, const PickRequest& request,
                       absl::Span<const uint32_t> out, size_t count,
                       uint32_t index) {
  return table.eligible(index) && !Contains(request.exclude, index) &&
         !Contains(out.subspan(0, count), index);
}

}  // namespace pick_internal

}  // namespace aside

#endif  // ASIDE_LIB_TABLE_H_
