// Conversions between the aside.v1 protos and the lib/ types, shared by the
// server and the client stub (the only code besides the services that sees
// protobuf types).
#ifndef ASIDE_PROTO_CONVERT_H_
#define ASIDE_PROTO_CONVERT_H_

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
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
// Errors name the field, e.g. "policy.maglev.table_size: ...".
absl::StatusOr<PolicyConfig> FromProto(absl::string_view field,
                                       const v1::Policy& pb);
void ToProto(const PolicyConfig& policy, v1::Policy* pb);

// Durations: a negative or out-of-range proto duration is an error naming
// `field`.
absl::StatusOr<absl::Duration> FromProto(absl::string_view field,
                                         const google::protobuf::Duration& pb);
void ToProto(absl::Duration d, google::protobuf::Duration* pb);

v1::HealthState ToProto(HealthState state);

// The full table as Watch sends it.
void ToProto(const Table& table, v1::Table* pb);

}  // namespace aside

#endif  // ASIDE_PROTO_CONVERT_H_
