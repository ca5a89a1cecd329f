// An Admin request's group (or a stored one) as arbitrary serialized
// aside.v1.Group: GroupSpecFromProto and the validators, then, for a spec
// they accept, the table builders through a real registry. An accepted spec
// must convert back to a Group that is accepted again.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "aside/v1/admin.pb.h"
#include "server/groups/group_registry.h"
#include "server/schema/group_spec_proto.h"

namespace {

aside::server::GroupRegistry& Registry() {
  static aside::server::GroupRegistry* registry =
      aside::server::GroupRegistry::Create(nullptr, 1, 1000)->release();
  return *registry;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aside::v1::Group group;
  if (!group.ParseFromArray(data, static_cast<int>(size))) {
    return 0;
  }
  absl::StatusOr<aside::server::GroupSpec> spec =
      aside::server::GroupSpecFromProto("group", group);
  if (!spec.ok()) {
    return 0;
  }
  aside::v1::Group again;
  aside::server::GroupSpecToProto(*spec, &again);
  if (!aside::server::GroupSpecFromProto("group", again).ok()) {
    __builtin_trap();  // an accepted spec must survive its own round trip
  }
  const std::string name = spec->name;
  if (Registry().Add(*std::move(spec)).ok()) {
    (void)Registry().Remove(name);
  }
  return 0;
}
