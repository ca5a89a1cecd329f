#include "lib/backend.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/field_error.h"
#include "lib/status_macros.h"

namespace aside {

std::string Locality::ToString() const {
  return absl::StrCat(region, "/", zone, "/", subzone);
}

absl::string_view HealthStateName(HealthState state) {
  switch (state) {
    case HealthState::kUnknown:
      return "unknown";
    case HealthState::kHealthy:
      return "healthy";
    case HealthState::kUnhealthy:
      return "unhealthy";
  }
  return "invalid";
}

absl::Status ValidateGroupName(absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("group name is empty");
  }
  if (name.size() > 253) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group name is ", name.size(), " bytes long (at most 253)"));
  }
  auto allowed = [](char c, bool first) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      return true;
    }
    return !first && (c == '.' || c == '_' || c == '-');
  };
  for (size_t i = 0; i < name.size(); ++i) {
    if (!allowed(name[i], i == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group name '", EchoName(name),
          "' must match [a-z0-9][a-z0-9._-]{0,252} (bad character at ", i,
          ")"));
    }
  }
  return absl::OkStatus();
}

std::string EchoName(absl::string_view name) {
  if (name.size() <= kMaxEchoedNameBytes) {
    return absl::CEscape(name);
  }
  return absl::StrCat(absl::CEscape(name.substr(0, kMaxEchoedNameBytes)),
                      "... (", name.size(), " bytes)");
}

absl::Status ValidateBackend(absl::string_view field, Backend& backend,
                             bool allow_hostname) {
  // Field paths are built only for an error: a group validates every
  // backend on each change, and the strings cost more than the checks.
  auto path = [&](absl::string_view key) { return JoinFieldPath(field, key); };
  absl::StatusOr<Address> address = ParseAddress(backend.address);
  if (!address.ok()) {
    return InvalidField(path("address"), address.status().message());
  }
  if (!allow_hostname && !address->is_ip()) {
    return InvalidField(
        path("address"),
        absl::StrCat("'", backend.address,
                     "' is a host name; static backends need an IP address "
                     "(use dns discovery for names)"));
  }
  backend.address = address->ToString();
  constexpr Range<uint64_t> kWeights{0, kMaxWeight};
  if (!kWeights.Contains(backend.weight)) {
    return CheckInteger(path("weight"), backend.weight, kWeights);
  }
  for (const auto* part : {&backend.locality.region, &backend.locality.zone,
                           &backend.locality.subzone}) {
    if (part->size() > kMaxLocalityFieldBytes) {
      return InvalidField(path("locality"),
                          absl::StrCat("a field is longer than ",
                                       kMaxLocalityFieldBytes, " bytes"));
    }
  }
  if (backend.metadata.size() > kMaxMetadataEntries) {
    return InvalidField(
        path("metadata"),
        absl::StrCat(backend.metadata.size(), " entries (at most ",
                     kMaxMetadataEntries, ")"));
  }
  for (const auto& [key, value] : backend.metadata) {
    if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
      return InvalidField(path("metadata"),
                          absl::StrCat("key '", key, "' must be 1..",
                                       kMaxMetadataKeyBytes, " bytes"));
    }
    if (value.size() > kMaxMetadataValueBytes) {
      return InvalidField(
          absl::StrCat(path("metadata"), "['", key, "']"),
          absl::StrCat("value longer than ", kMaxMetadataValueBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace aside
