#include "server/config/server_settings.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/address.h"
#include "server/config/setting_kinds.h"

namespace aside::server {
namespace {

using yaml::JoinPath;
using yaml::YamlReader;

// The node of `key` under `root`, when it is given and every block on the
// way is a mapping. Each block's keys are checked the first time it is
// reached; `blocks` remembers whether it was a mapping.
bool FindSetting(YamlReader& r, const YAML::Node& root, const std::string& key,
                 std::map<std::string, bool>* blocks, YAML::Node* out) {
  const std::vector<std::string> parts = absl::StrSplit(key, '.');
  YAML::Node node(root);
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const YAML::Node& parent = node;
    const YAML::Node child = parent[parts[i]];
    if (!child) {
      return false;
    }
    path = JoinPath(path, parts[i]);
    auto [it, first] = blocks->try_emplace(path, false);
    if (first) {
      it->second = r.CheckMapKeys(child, path, SettingBlockKeys(path));
    }
    if (!it->second) {
      return false;
    }
    node.reset(child);
  }
  const YAML::Node& parent = node;
  const YAML::Node leaf = parent[parts.back()];
  if (!leaf) {
    return false;
  }
  out->reset(leaf);
  return true;
}

// The rules between settings, once every key is read.
void CheckTogether(YamlReader& r, const YAML::Node& root,
                   const std::map<std::string, bool>& blocks, ServerConfig* c) {
  auto mapping = [&blocks](const char* block) {
    auto it = blocks.find(block);
    return it != blocks.end() && it->second;
  };
  if (mapping("tls")) {
    const YAML::Node t = root["tls"];
    if (c->tls_cert_file.empty() != c->tls_key_file.empty()) {
      r.Error(t, "tls", "cert_file and key_file go together");
    }
    if (c->tls_cert_file.empty() &&
        (!c->tls_client_ca_file.empty() || c->tls_require_client_cert)) {
      r.Error(t, "tls",
              "client_ca_file and require_client_cert need cert_file and "
              "key_file");
    }
    if (c->tls_require_client_cert && c->tls_client_ca_file.empty()) {
      r.Error(t, "tls.require_client_cert", "needs client_ca_file");
    }
  }
  // Without a token file no token could ever open it.
  if (mapping("status_page") && c->status_page_enabled &&
      c->status_page_require_token && c->admin_token_file.empty()) {
    r.Error(root["status_page"], "status_page.require_token",
            "needs admin.token_file");
  }
  if (mapping("store")) {
    const YAML::Node s = root["store"];
    const YAML::Node e = s["etcd"];
    if (c->store.type != "etcd") {
      if (e) {
        r.Error(e, "store.etcd", "needs store.type: etcd");
      }
    } else if (!e) {
      r.Error(s, "store", "type etcd needs store.etcd.endpoints");
    } else if (mapping("store.etcd")) {
      if (const YAML::Node eps = e["endpoints"];
          !eps || (eps.IsSequence() && eps.size() == 0)) {
        r.Error(eps ? eps : e, "store.etcd.endpoints",
                "expected a list of \"host:port\" (at least one)");
      }
      if (c->store.cert_file.empty() != c->store.key_file.empty()) {
        r.Error(e, "store.etcd", "cert_file and key_file go together");
      }
    }
  }
}

std::string EscapeCell(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}});
}

}  // namespace

const std::vector<Setting>& ServerSettings() {
  static const std::vector<Setting>* const settings =
      new std::vector<Setting>(setting_kinds::DeclareServerSettings());
  return *settings;
}

const std::vector<std::string>& SettingBlockKeys(absl::string_view block) {
  static const std::map<std::string, std::vector<std::string>,
                        std::less<>>* const blocks = [] {
    auto* out =
        new std::map<std::string, std::vector<std::string>, std::less<>>();
    for (const Setting& s : ServerSettings()) {
      std::string parent;
      for (absl::string_view part : absl::StrSplit(s.key, '.')) {
        std::vector<std::string>& keys = (*out)[parent];
        if (std::find(keys.begin(), keys.end(), part) == keys.end()) {
          keys.emplace_back(part);
        }
        parent = JoinPath(parent, part);
      }
    }
    return out;
  }();
  static const std::vector<std::string>* const none =
      new std::vector<std::string>();
  auto it = blocks->find(block);
  return it == blocks->end() ? *none : it->second;
}

void ReadServerSettings(YamlReader& r, const YAML::Node& root,
                        ServerConfig* out) {
  std::map<std::string, bool> blocks;
  for (const Setting& s : ServerSettings()) {
    YAML::Node node;
    if (s.read && FindSetting(r, root, s.key, &blocks, &node)) {
      s.read(r, node, out);
    }
  }
  CheckTogether(r, root, blocks, out);
}

std::vector<std::string> RestartOnlyChanges(const ServerConfig& a,
                                            const ServerConfig& b) {
  std::vector<std::string> out;
  for (const Setting& s : ServerSettings()) {
    if (s.on_reload == OnReload::kRestart && !s.same(a, b) &&
        std::find(out.begin(), out.end(), s.reported_as) == out.end()) {
      out.push_back(s.reported_as);
    }
  }
  return out;
}

void AdoptLiveSettings(const ServerConfig& from, ServerConfig* to) {
  for (const Setting& s : ServerSettings()) {
    if (s.on_reload == OnReload::kLive) {
      s.adopt(from, to);
    }
  }
}

std::string SettingsReference() {
  std::string out =
      "| key | default | on reload | meaning |\n|---|---|---|---|\n";
  for (const Setting& s : ServerSettings()) {
    absl::StrAppend(&out, "| `", s.key, "` | ", EscapeCell(s.default_text),
                    " | ", s.on_reload == OnReload::kLive ? "live" : "restart",
                    " | ", EscapeCell(s.doc), " |\n");
  }
  return out;
}

absl::Status ApplyStoreFlag(absl::string_view flag, StoreConfig* store) {
  if (flag == "sqlite") {
    store->type = "sqlite";
    return absl::OkStatus();
  }
  if (!absl::ConsumePrefix(&flag, "etcd:") || flag.empty()) {
    return absl::InvalidArgumentError(
        "--store: expected sqlite or etcd:HOST:PORT[,HOST:PORT...]");
  }
  std::vector<std::string> endpoints;
  for (absl::string_view ep : absl::StrSplit(flag, ',')) {
    if (absl::StatusOr<Address> a = ParseAddress(ep); !a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--store: ", ep, ": ", a.status().message()));
    }
    endpoints.emplace_back(ep);
  }
  store->type = "etcd";
  store->endpoints = std::move(endpoints);
  return absl::OkStatus();
}

}  // namespace aside::server
