// The server settings of the config file: every top-level key but
// `groups` (listen addresses, state, logging, limits, health, admin, TLS,
// discovery, grpclb). Groups are read by server/config/config.cc through the
// group shorthand converter (proto/yaml/group_yaml.h).
#ifndef ASIDE_SERVER_CONFIG_SERVER_SETTINGS_H_
#define ASIDE_SERVER_CONFIG_SERVER_SETTINGS_H_

#include <yaml-cpp/yaml.h>

#include "proto/yaml/yaml_reader.h"
#include "server/config/config.h"

namespace aside::server {

// Reads the settings under `root` (a mapping whose keys were already
// checked) into `out`, reporting positioned errors to `reader`.
void ReadServerSettings(yaml::YamlReader& reader, const YAML::Node& root,
                        ServerConfig* out);

}  // namespace aside::server

#endif  // ASIDE_SERVER_CONFIG_SERVER_SETTINGS_H_
