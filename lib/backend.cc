#include "lib/backend.h"

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
          "group name '", name,
          "' must match [a-z0-9][a-z0-9._-]{0,252} (bad character at ", i,
          ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBackend(absl::string_view field, Backend& backend,
                             bool allow_hostname) {
  const std::string address_field = JoinFieldPath(field, "address");
  absl::StatusOr<Address> address = ParseAddress(backend.address);
  if (!address.ok()) {
    return InvalidField(address_field, address.status().message());
  }
  if (!allow_hostname && !address->is_ip()) {
    return InvalidField(
        address_field,
        absl::StrCat("'", backend.address,
                     "' is a host name; static backends need an IP address "
                     "(use dns discovery for names)"));
  }
  backend.address = address->ToString();
  ASIDE_RETURN_IF_ERROR(CheckInteger(JoinFieldPath(field, "weight"),
                                     backend.weight, {0, kMaxWeight}));
  for (const auto* part : {&backend.locality.region, &backend.locality.zone,
                           &backend.locality.subzone}) {
    if (part->size() > kMaxLocalityFieldBytes) {
      return InvalidField(JoinFieldPath(field, "locality"),
                          absl::StrCat("a field is longer than ",
                                       kMaxLocalityFieldBytes, " bytes"));
    }
  }
  const std::string metadata_field = JoinFieldPath(field, "metadata");
  if (backend.metadata.size() > kMaxMetadataEntries) {
    return InvalidField(metadata_field, absl::StrCat(backend.metadata.size(),
                                                     " entries (at most ",
                                                     kMaxMetadataEntries, ")"));
  }
  for (const auto& [key, value] : backend.metadata) {
    if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
      return InvalidField(metadata_field,
                          absl::StrCat("key '", key, "' must be 1..",
                                       kMaxMetadataKeyBytes, " bytes"));
    }
    if (value.size() > kMaxMetadataValueBytes) {
      return InvalidField(
          absl::StrCat(metadata_field, "['", key, "']"),
          absl::StrCat("value longer than ", kMaxMetadataValueBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace aside
