// The values the fleet keeps in etcd, encoded and parsed in one place.
//
//   <prefix>members/<id>  {"id":"<id>","address":"<host:port>",
//                          "start_time":"<RFC3339>","targets_owned":<n>}
//   <prefix>health/<16 hex digits of the FleetTargetKey>
//                         {"owner":"<id>","address":"<host:port>",
//                          "state":"healthy","successes":<n>,
//                          "failures":<n>,"reason":"...","at":"<RFC3339>"}
//
// Both are bound to the writer's lease. The member value's format is fixed:
// other components parse it. Parsing ignores unknown fields.
#ifndef ASIDE_SERVER_FLEET_FLEET_RECORDS_H_
#define ASIDE_SERVER_FLEET_FLEET_RECORDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/health/health_state.h"

namespace aside::server::fleet {

struct MemberRecord {
  std::string id;
  std::string address;
  std::string start_time;  // RFC3339
  uint32_t targets_owned = 0;
};

struct HealthRecord {
  std::string owner;
  std::string address;
  HealthCounters counters;
  std::string reason;
  std::string at;  // RFC3339
};

std::string Rfc3339(absl::Time t);

std::string EncodeMember(const MemberRecord& m);
absl::StatusOr<MemberRecord> ParseMember(absl::string_view value);

std::string EncodeHealth(const HealthRecord& h);
absl::StatusOr<HealthRecord> ParseHealth(absl::string_view value);

// "<prefix>health/" + 16 lowercase hex digits, and back (nullopt when the
// key is not one).
std::string HealthKey(absl::string_view prefix, uint64_t fleet_key);
std::optional<uint64_t> ParseHealthKey(absl::string_view health_prefix,
                                       absl::string_view key);

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_FLEET_RECORDS_H_
