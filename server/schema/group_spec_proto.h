// Conversions between aside.v1.Group (and its parts) and the server's group
// specs. Used by the Admin service and by the state store, which persists
// group definitions as serialized aside.v1.Group messages.
#ifndef ASIDE_SERVER_SCHEMA_GROUP_SPEC_PROTO_H_
#define ASIDE_SERVER_SCHEMA_GROUP_SPEC_PROTO_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "aside/v1/admin.pb.h"
#include "lib/table.h"
#include "server/schema/group_spec.h"

namespace aside::server {

// Converts a group definition (output-only fields ignored) and validates it
// with ValidateGroupSpec. Errors name the field under `field` in the message
// and as data (lib/field_error.h), e.g. "group.backends[2].weight: 20000 out
// of range 0..10000"; an empty `field` leaves paths relative to the group.
// The conversion checks only types and enum values: every range is the
// schema's.
absl::StatusOr<GroupSpec> GroupSpecFromProto(absl::string_view field,
                                             const v1::Group& pb);

// The definition fields of a group (what the store persists). Without
// `with_backends` the backends are left out (a summary, as ListGroups shows).
void GroupSpecToProto(const GroupSpec& spec, v1::Group* pb,
                      bool with_backends = true);

// Converts a health check (not validated: ValidateHealthCheck does that).
absl::StatusOr<HealthCheckSpec> HealthCheckFromProto(absl::string_view field,
                                                     const v1::HealthCheck& pb);
void HealthCheckToProto(const HealthCheckSpec& spec, v1::HealthCheck* pb);

// Adds the output-only state of a published table to `pb`.
void GroupStateToProto(const Table& table, v1::Group* pb);

}  // namespace aside::server

#endif  // ASIDE_SERVER_SCHEMA_GROUP_SPEC_PROTO_H_
