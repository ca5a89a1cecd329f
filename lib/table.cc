#include "lib/table.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "lib/selector_factory.h"
#include "lib/status_macros.h"

namespace aside {

Table::~Table() {
  // The selector may refer to members; drop it first.
  selector_.reset();
}

absl::StatusOr<TableConstPtr> Table::Create(TableSpec spec,
                                            const Table* previous,
                                            LoadTracker* loads) {
  ASIDE_RETURN_IF_ERROR(ValidatePolicy("policy", spec.policy));
  if (!(spec.panic_threshold >= 0 && spec.panic_threshold <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "panic_threshold: ", spec.panic_threshold, " out of range 0..100"));
  }
  auto by_address = [](const Member& a, const Member& b) {
    return a.backend.address < b.backend.address;
  };
  // A spec built from a table (the stub applying a delta) is sorted already.
  if (!std::is_sorted(spec.members.begin(), spec.members.end(), by_address)) {
    std::sort(spec.members.begin(), spec.members.end(), by_address);
  }
  for (size_t i = 0; i < spec.members.size(); ++i) {
    const Member& m = spec.members[i];
    if (m.weight > kMaxWeight) {
      return absl::InvalidArgumentError(
          absl::StrCat("backend ", m.backend.address, ": weight ", m.weight,
                       " out of range 0..", kMaxWeight));
    }
    if (i > 0 && spec.members[i - 1].backend.address == m.backend.address) {
      return absl::InvalidArgumentError(
          absl::StrCat("backend ", m.backend.address, " is listed twice"));
    }
  }
  if (spec.policy.kind == PolicyKind::kSticky &&
      (!spec.session_key || spec.session_key->size() < 16)) {
    return absl::InvalidArgumentError(
        "policy.sticky: a session key of at least 16 bytes is required");
  }

  LoadTracker private_tracker;
  // The previous table's loads, from the same tracker, are taken over by
  // address (both member lists are sorted) rather than looked up again.
  const Table* reuse =
      (loads != nullptr && previous != nullptr && previous->tracker_ == loads)
          ? previous
          : nullptr;
  const LoadTracker* tracker = loads;
  if (loads == nullptr) {
    loads = &private_tracker;
  }

  auto table = std::shared_ptr<Table>(new Table());
  table->group_ = std::move(spec.group);
  table->generation_ = spec.generation;
  table->policy_ = std::move(spec.policy);
  table->load_model_ = LoadModel::For(table->policy_);
  table->panic_threshold_ = spec.panic_threshold;
  table->session_key_ = std::move(spec.session_key);
  table->zone_weights_ = std::move(spec.zone_weights);
  table->members_ = std::move(spec.members);

  const size_t n = table->members_.size();
  table->eligible_.assign(n, 0);
  table->load_refs_.reserve(n);
  table->all_indexes_.resize(n);
  std::iota(table->all_indexes_.begin(), table->all_indexes_.end(), 0u);

  table->tracker_ = tracker;
  uint32_t active = 0;
  uint32_t ready_active = 0;
  uint32_t ready = 0;
  size_t in_previous = 0;
  for (Member& m : table->members_) {
    const bool is_active = m.weight > 0 && !m.backend.drained;
    m.ready = m.ready && !m.backend.drained;
    active += is_active ? 1 : 0;
    ready += m.ready ? 1 : 0;
    ready_active += (is_active && m.ready) ? 1 : 0;
    std::shared_ptr<BackendLoad> load;
    if (reuse != nullptr) {
      const std::vector<Member>& before = reuse->members_;
      while (in_previous < before.size() &&
             before[in_previous].backend.address < m.backend.address) {
        ++in_previous;
      }
      if (in_previous < before.size() &&
          before[in_previous].backend.address == m.backend.address) {
        load = reuse->load_refs_[in_previous];
      }
    }
    if (load == nullptr) {
      load = loads->GetOrCreate(m.backend.address);
    }
    m.load = load.get();
    table->load_refs_.push_back(std::move(load));
  }
  table->active_count_ = active;
  table->ready_count_ = ready;
  table->panic_ = table->panic_threshold_ > 0 && active > 0 &&
                  static_cast<double>(ready_active) * 100.0 <
                      table->panic_threshold_ * static_cast<double>(active);
  uint32_t eligible = 0;
  for (size_t i = 0; i < n; ++i) {
    const Member& m = table->members_[i];
    const bool is_active = m.weight > 0 && !m.backend.drained;
    const bool ok = is_active && (m.ready || table->panic_);
    table->members_[i].eligible = ok;
    table->eligible_[i] = ok ? 1 : 0;
    eligible += ok ? 1 : 0;
  }
  table->eligible_count_ = eligible;

  SelectorInput input;
  input.table = table.get();
  input.members = table->all_indexes_;
  input.previous = (previous != nullptr && previous->selector_)
                       ? previous->selector_.get()
                       : nullptr;
  ASIDE_ASSIGN_OR_RETURN(table->selector_,
                         BuildSelector(table->policy_, input));
  return table;
}

int64_t Table::Find(absl::string_view address) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), address,
                             [](const Member& m, absl::string_view a) {
                               return m.backend.address < a;
                             });
  if (it == members_.end() || it->backend.address != address) {
    return -1;
  }
  return it - members_.begin();
}

std::string Table::NoBackendMessage(size_t excluded) const {
  if (members_.empty()) {
    return absl::StrCat("group '", group_, "' has no backends");
  }
  if (active_count_ == 0) {
    return absl::StrCat("group '", group_, "': all ", members_.size(),
                        " backends are drained or have weight 0");
  }
  if (eligible_count_ > 0 && excluded > 0) {
    return absl::StrCat("group '", group_, "': all ", eligible_count_,
                        " eligible backends are excluded");
  }
  return absl::StrCat("group '", group_, "': ", ready_count_, " of ",
                      members_.size(), " backends ready, none can be picked");
}

}  // namespace aside
