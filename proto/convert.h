// Conversions between the aside.v1 protos and the lib/ types, shared by the
// server and the client stub (the only code besides the services that sees
// protobuf types).
#ifndef ASIDE_PROTO_CONVERT_H_
#define ASIDE_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "aside/v1/types.pb.h"
#include "google/protobuf/duration.pb.h"
#include "lib/backend.h"
#include "lib/policy_config.h"
#include "lib/table.h"

namespace aside {

Locality FromProto(const v1::Locality& pb);
void ToProto(const Locality& locality, v1::Locality* pb);

// Converts a backend; the address is validated and canonicalised. Errors are
// InvalidArgument and start with `field`.
absl::StatusOr<Backend> FromProto(absl::string_view field,
                                  const v1::Backend& pb, bool allow_hostname);
void ToProto(const Backend& backend, v1::Backend* pb);

// Converts and validates a policy; an unset Policy means round_robin.
// Errors name the field, in the message and as data (lib/field_error.h),
// e.g. "policy.maglev.table_size: ...".
absl::StatusOr<PolicyConfig> FromProto(absl::string_view field,
                                       const v1::Policy& pb);
void ToProto(const PolicyConfig& policy, v1::Policy* pb);

// Durations: a negative or out-of-range proto duration is an error naming
// `field`.
absl::StatusOr<absl::Duration> FromProto(absl::string_view field,
                                         const google::protobuf::Duration& pb);
void ToProto(absl::Duration d, google::protobuf::Duration* pb);
// Reads an optional duration field into `out` when `has`; unset keeps the
// default already in `out`.
absl::Status ReadDuration(absl::string_view field, bool has,
                          const google::protobuf::Duration& pb,
                          absl::Duration* out);

v1::HealthState ToProto(HealthState state);

// The full table as Watch sends it.
void ToProto(const Table& table, v1::Table* pb);

// --- Tables received over Watch (the client stub) ---------------------------
//
// Everything a stub receives is validated before it is used: addresses
// (canonicalised; host names allowed), weights, metadata limits, health
// enum values, zone weights, and the policy. Errors are InvalidArgument and
// start with the field path, e.g. "full.backends[2].backend.weight: ...".

HealthState FromProto(v1::HealthState pb);

// A table backend as a Member (effective weight, readiness, health).
absl::StatusOr<Member> FromProto(absl::string_view field,
                                 const v1::TableBackend& pb);

absl::StatusOr<ZoneWeight> FromProto(absl::string_view field,
                                     const v1::ZoneWeight& pb);

// A full table as the spec a stub builds its Table from. The server's panic
// decision is carried over exactly: `panic` becomes panic_threshold 100 (every
// non-drained member with weight > 0 is eligible as soon as one is not
// ready) and no panic becomes 0 (only ready members are eligible), so the
// stub never re-decides panic with a threshold it does not know. Duplicate
// addresses are left for Table::Create to reject.
absl::StatusOr<TableSpec> FromProto(absl::string_view group,
                                    uint64_t generation, const v1::Table& pb);

// Applies a delta to `spec` (which holds the delta's base): upserts and
// removals by address, the policy when set, the panic flag, the zone weights
// when marked changed; sets spec->generation to `generation`. On error
// `spec` may be partly changed: apply to a copy. Removing an address that is
// not there is an error (the delta does not fit what is held). Leaves the
// members sorted by address; given them sorted (a Table's members are), it
// sorts nothing: a delta of k backends costs O(k log n), plus O(n) moves
// only when backends are added or removed.
absl::Status ApplyDelta(const v1::TableDelta& pb, uint64_t generation,
                        TableSpec* spec);

}  // namespace aside

#endif  // ASIDE_PROTO_CONVERT_H_
