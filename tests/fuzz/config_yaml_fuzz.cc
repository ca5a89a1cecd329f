// The server's config file and asidectl's group files: YAML text through
// the reader, the shorthand converter, GroupSpecFromProto, the validators
// and the namespace check. Any input must give a config or an error naming
// file:line, never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/yaml/group_yaml.h"
#include "server/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<aside::server::ServerConfig> config =
      aside::server::ParseConfig(text, "fuzz.yaml");
  if (!config.ok() &&
      config.status().message().find("fuzz.yaml") == absl::string_view::npos) {
    __builtin_trap();  // every config error names the file
  }
  (void)aside::yaml::GroupsFromText(text, "fuzz.yaml");
  return 0;
}
