// The server settings of the config file, each declared once.
//
// ServerSettings() is the one list of them (declared in
// server_settings_list.cc): key, default, range, whether a reload applies it
// or it waits for a restart, its line of the reference, how it is read and
// how two configs compare on it. Everything else comes
// from that list: parsing and the keys each block allows
// (ReadServerSettings, SettingBlockKeys), a reload's restart-only report and
// what a reload applies (server/config_reloader.h), and the reference table
// of docs/operations.md (SettingsReference; a test fails when the two
// differ). Cross-field rules (tls.cert_file with tls.key_file, store.etcd
// with store.type etcd, ...) are checked after every key is read.
//
// `groups` is declared here too, for the allowed keys, the reference and
// the reload; it is read by server/config/config.cc through the group
// shorthand converter (proto/yaml/group_yaml.h).
#ifndef ASIDE_SERVER_CONFIG_SERVER_SETTINGS_H_
#define ASIDE_SERVER_CONFIG_SERVER_SETTINGS_H_

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/yaml/yaml_reader.h"
#include "server/config/config.h"

namespace aside::server {

// What a reload does with a changed setting.
enum class OnReload {
  kLive,     // applied at once
  kRestart,  // kept as the server started; reported until a restart
};

struct Setting {
  // The dotted key path: "limits.max_groups".
  std::string key;
  // The reference's default and meaning cells (Markdown).
  std::string default_text;
  std::string doc;
  OnReload on_reload = OnReload::kRestart;
  // The accepted range as errors write it ("1..1000000", "100ms..1h");
  // empty for a setting without one. The doc line says it too.
  std::string range;
  // The name a reload's restart-only report gives it: its key, or its
  // block's for the blocks reported whole ("store", "fleet").
  std::string reported_as;
  // Reads the key's node into a config, reporting positioned errors; empty
  // for `groups`, which config.cc reads.
  std::function<void(yaml::YamlReader&, const YAML::Node&, ServerConfig*)> read;
  // Whether two configs agree on it; copies it from one to another.
  std::function<bool(const ServerConfig&, const ServerConfig&)> same;
  std::function<void(const ServerConfig&, ServerConfig*)> adopt;
};

// Every setting, in the reference's order.
const std::vector<Setting>& ServerSettings();

// The keys a block allows: "" for the file's top level, "limits",
// "store.etcd".
const std::vector<std::string>& SettingBlockKeys(absl::string_view block);

// Reads the settings under `root` (a mapping whose top-level keys were
// already checked) into `out`, reporting positioned errors to `reader`.
void ReadServerSettings(yaml::YamlReader& reader, const YAML::Node& root,
                        ServerConfig* out);

// The keys (or blocks, by `reported_as`) of the restart-only settings on
// which `a` and `b` differ, each once, in the reference's order.
std::vector<std::string> RestartOnlyChanges(const ServerConfig& a,
                                            const ServerConfig& b);

// Copies the live settings, groups included, from `from` into `to`.
void AdoptLiveSettings(const ServerConfig& from, ServerConfig* to);

// The reference table of docs/operations.md ("### Server keys"), one line
// per setting, each ending in '\n'.
std::string SettingsReference();

}  // namespace aside::server

#endif  // ASIDE_SERVER_CONFIG_SERVER_SETTINGS_H_
