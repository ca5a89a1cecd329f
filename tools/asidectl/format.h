// What asidectl prints, apart from the commands' own layouts: messages to
// stderr, protobuf JSON, the one-word texts of policies, sources, health,
// localities and metadata used in its tables, and the tables themselves.
#ifndef ASIDE_TOOLS_ASIDECTL_FORMAT_H_
#define ASIDE_TOOLS_ASIDECTL_FORMAT_H_

#include <google/protobuf/map.h>
#include <google/protobuf/message.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "aside/v1/admin.pb.h"  // GroupSource
#include "aside/v1/types.pb.h"

namespace aside::asidectl {

// Writes one message to stderr, always ending in exactly one newline (a
// message from elsewhere, such as a gRPC status, may or may not end in
// one), so that two messages never run together on one line.
void Say(absl::string_view message);

// `m` as protobuf JSON: indented when `pretty`, else on one line.
std::string ToJson(const google::protobuf::Message& m, bool pretty = true);

// The policy's name, or "invalid".
std::string PolicyText(const v1::Policy& p);
// "file", "admin" or "-".
std::string SourceText(v1::GroupSource s);
// "healthy", "unhealthy", "unknown" or "-".
std::string HealthText(v1::HealthState s);
// region/zone/sub-zone, or "-" when all are empty.
std::string LocalityText(const v1::Locality& l);
// key=value pairs sorted by key and joined by commas, or "-".
std::string MetadataText(
    const google::protobuf::Map<std::string, std::string>& m);

// Prints rows to stdout as left-aligned columns two spaces apart.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace aside::asidectl

#endif  // ASIDE_TOOLS_ASIDECTL_FORMAT_H_
