// Folds the Watch updates of one group into the Table a stub picks from.
//
// Rules (see DESIGN.md §5 and server/api/watch.h):
// - A full table is taken as is, unless it comes from the server_id of the
//   table held and has a lower generation (versions never go backwards
//   within one server_id; a different server_id, a restarted server or
//   another replica, starts a new sequence).
// - A delta applies only to the generation it names as its base, from the
//   same server_id; an empty delta whose base equals its generation confirms
//   what a resumed stream holds. A delta that does not fit asks for a full
//   table (kNeedFull: the caller re-subscribes without a known generation).
// - Everything is validated (proto/convert.h, then Table::Create: addresses,
//   weights, duplicates, policy parameters, whether this build can pick with
//   the policy). A table that fails is rejected whole; the previous one keeps
//   serving.
// - GroupRemoved is reported (kRemoved); the table held is kept.
//
// Not thread-safe: owned by the stub's watcher thread. Apply() of a full
// table costs a Table::Create (hash rings are shared with the previous table
// when members and weights are unchanged). A delta applies to a copy of the
// held table's members, sorted by address already: no sort, one copy of the
// member list, and the Table::Create of the result.
#ifndef ASIDE_CLIENT_WATCHED_TABLE_H_
#define ASIDE_CLIENT_WATCHED_TABLE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/load/load_tracker.h"
#include "lib/table.h"

namespace aside {

class WatchedTable {
 public:
  enum class Outcome {
    kApplied,    // a new table (table() changed)
    kUnchanged,  // a confirmation of what is held
    kStale,      // an older generation from the same server: ignored
    kRejected,   // failed validation: ignored, see the returned error
    kNeedFull,   // a delta that does not fit: re-subscribe for a full table
    kRemoved,    // the group was deleted on the server
  };
  struct Result {
    Outcome outcome = Outcome::kUnchanged;
    absl::Status error;  // set for kRejected and kNeedFull
  };

  // `loads` (not owned, may be null) supplies the members' BackendLoad so
  // load survives table swaps.
  WatchedTable(std::string group, LoadTracker* loads)
      : group_(std::move(group)), loads_(loads) {}

  Result Apply(const v1::GroupUpdate& update);

  // The table held (null before the first accepted one).
  const TableConstPtr& table() const { return table_; }
  uint64_t generation() const { return table_ ? table_->generation() : 0; }
  const std::string& server_id() const { return server_id_; }
  uint64_t rejected() const { return rejected_; }

 private:
  Result Build(TableSpec spec, const std::string& server_id);
  // What table_ was built from, for a delta to apply to: its members (the
  // fields Table::Create derives are derived again the same way) and
  // settings.
  TableSpec HeldSpec() const;

  const std::string group_;
  LoadTracker* const loads_;
  TableConstPtr table_;
  std::string server_id_;
  uint64_t rejected_ = 0;
};

absl::string_view OutcomeName(WatchedTable::Outcome outcome);

}  // namespace aside

#endif  // ASIDE_CLIENT_WATCHED_TABLE_H_
