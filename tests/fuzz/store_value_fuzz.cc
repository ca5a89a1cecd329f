// A group's value in etcd as another replica (or anyone with write access
// to the etcd prefix) left it: the input is "<key's group name>\n<value>".
// ParseStoredGroup, then GroupSpecFromProto and the validators, then the
// table builders through a real registry, as StoreSync applies a change.
// A value that parses names its key's group, and re-encodes (as the store
// writes it) to a value that parses to the same group.
#include <google/protobuf/util/message_differencer.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "aside/v1/admin.pb.h"
#include "server/groups/group_registry.h"
#include "server/schema/group_spec_proto.h"
#include "server/store/etcd_store.h"

namespace {

aside::server::GroupRegistry& Registry() {
  static aside::server::GroupRegistry* registry =
      aside::server::GroupRegistry::Create(nullptr, 1, 1000)->release();
  return *registry;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string::npos) {
    return 0;
  }
  const std::string name = input.substr(0, newline);
  absl::StatusOr<aside::v1::Group> group =
      aside::server::ParseStoredGroup(name, input.substr(newline + 1));
  if (!group.ok()) {
    return 0;
  }
  if (group->name() != name) {
    __builtin_trap();
  }
  absl::StatusOr<std::string> encoded =
      aside::server::EncodeStoredGroup(*group);
  if (!encoded.ok()) {
    __builtin_trap();
  }
  absl::StatusOr<aside::v1::Group> again =
      aside::server::ParseStoredGroup(name, *encoded);
  if (!again.ok() ||
      !google::protobuf::util::MessageDifferencer::Equals(*group, *again)) {
    __builtin_trap();  // the store must read back what it wrote
  }
  absl::StatusOr<aside::server::GroupSpec> spec =
      aside::server::GroupSpecFromProto("group", *group);
  if (!spec.ok()) {
    return 0;
  }
  if (Registry().Add(*std::move(spec)).ok()) {
    (void)Registry().Remove(name);
  }
  return 0;
}
