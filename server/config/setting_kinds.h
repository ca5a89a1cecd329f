// How a server setting of each kind is declared: the building blocks of
// the one list in server_settings_list.cc (server_settings.h says what the
// list feeds). Each kind makes a Setting from a key, whether a reload
// applies it, its range, its reference line and the config field it fills,
// given as a lambda that reaches it alike in a const and a mutable config:
//   Uint("limits.max_groups", OnReload::kRestart, 1, 1000000, "...",
//        [](auto& c) -> auto& { return c.max_groups; })
// The default cell is the field's value in a default ServerConfig, so the
// reference cannot show a default the server does not have. Only the
// settings list includes this header.
#ifndef ASIDE_SERVER_CONFIG_SETTING_KINDS_H_
#define ASIDE_SERVER_CONFIG_SETTING_KINDS_H_

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/yaml/yaml_reader.h"
#include "server/config/config.h"
#include "server/config/server_settings.h"

namespace aside::server::setting_kinds {

using yaml::IndexPath;
using yaml::YamlReader;

// A config with every default, for the reference's default cells.
const ServerConfig& Defaults();

// `text` as Markdown code.
std::string Code(absl::string_view text);

// A setting kept in the config field `get` reaches, alike in a const and in
// a mutable config:  [](auto& c) -> auto& { return c.max_groups; }
template <typename Get>
Setting Field(const char* key, OnReload on_reload, const char* doc, Get get) {
  Setting s;
  s.key = key;
  s.doc = doc;
  s.on_reload = on_reload;
  s.reported_as = key;
  s.same = [get](const ServerConfig& a, const ServerConfig& b) {
    return get(a) == get(b);
  };
  s.adopt = [get](const ServerConfig& from, ServerConfig* to) {
    get(*to) = get(from);
  };
  return s;
}

// `s` with the reference's default cell `text`.
Setting WithDefault(Setting s, const char* text);

// Reads a number of the type a Number setting holds.
inline bool GetNumber(YamlReader& r, const YAML::Node& n,
                      const std::string& key, uint64_t* v) {
  return r.GetUint64(n, key, v);
}
inline bool GetNumber(YamlReader& r, const YAML::Node& n,
                      const std::string& key, double* v) {
  return r.GetDouble(n, key, v);
}

// A number within [low, high], read as a V (uint64_t or double) and kept in
// the field's own type.
template <typename V, typename Get>
Setting Number(const char* key, OnReload on_reload, V low, V high,
               const char* doc, Get get) {
  Setting s = Field(key, on_reload, doc, get);
  s.range = absl::StrCat(low, "..", high);
  s.default_text = Code(absl::StrCat(get(Defaults())));
  s.read = [key = s.key, low, high, get](YamlReader& r, const YAML::Node& n,
                                         ServerConfig* c) {
    V v = 0;
    if (!GetNumber(r, n, key, &v)) {
      return;
    }
    if (!(v >= low && v <= high)) {
      r.Error(n, key, absl::StrCat(v, " out of range ", low, "..", high));
      return;
    }
    auto& field = get(*c);
    field = static_cast<std::remove_reference_t<decltype(field)>>(v);
  };
  return s;
}

template <typename Get>
Setting Uint(const char* key, OnReload on_reload, uint64_t low, uint64_t high,
             const char* doc, Get get) {
  return Number<uint64_t>(key, on_reload, low, high, doc, get);
}

template <typename Get>
Setting Double(const char* key, OnReload on_reload, double low, double high,
               const char* doc, Get get) {
  return Number<double>(key, on_reload, low, high, doc, get);
}

struct DurationRange {
  absl::Duration low;
  absl::Duration high;
  // 0 is allowed too, meaning "off".
  bool zero_is_off = false;
  // Only whole seconds are accepted (etcd grants leases in seconds).
  bool whole_seconds = false;
  // The value is rounded down to whole seconds.
  bool round_to_seconds = false;
};

// The range as errors and the reference write it: "0 (off) or 1s..168h".
std::string RangeText(const DurationRange& d);

template <typename Get>
Setting Duration(const char* key, OnReload on_reload, DurationRange range,
                 const char* doc, Get get) {
  Setting s = Field(key, on_reload, doc, get);
  s.range = RangeText(range);
  s.default_text = Code(absl::FormatDuration(get(Defaults())));
  s.read = [key = s.key, text = s.range, range, get](
               YamlReader& r, const YAML::Node& n, ServerConfig* c) {
    absl::Duration d;
    if (!r.GetDuration(n, key, &d)) {
      return;
    }
    const bool in_range =
        d >= range.low && d <= range.high &&
        (!range.whole_seconds || d == absl::Floor(d, absl::Seconds(1)));
    if (!in_range && !(range.zero_is_off && d == absl::ZeroDuration())) {
      r.Error(n, key, absl::StrCat("out of range ", text));
      return;
    }
    get(*c) = range.round_to_seconds ? absl::Floor(d, absl::Seconds(1)) : d;
  };
  return s;
}

template <typename Get>
Setting Bool(const char* key, OnReload on_reload, const char* doc, Get get) {
  Setting s = Field(key, on_reload, doc, get);
  s.default_text = Code(get(Defaults()) ? "true" : "false");
  s.read = [key = s.key, get](YamlReader& r, const YAML::Node& n,
                              ServerConfig* c) { r.GetBool(n, key, &get(*c)); };
  return s;
}

// A string, often a file name; "not set" when empty by default.
template <typename Get>
Setting String(const char* key, OnReload on_reload, const char* doc, Get get) {
  Setting s = Field(key, on_reload, doc, get);
  const std::string& d = get(Defaults());
  s.default_text = d.empty() ? "not set" : Code(d);
  s.read = [key = s.key, get](YamlReader& r, const YAML::Node& n,
                              ServerConfig* c) {
    r.GetString(n, key, &get(*c));
  };
  return s;
}

// One of `allowed`; others are refused as "unknown <noun> 'x'".
template <typename Get>
Setting Enum(const char* key, OnReload on_reload, const char* noun,
             std::vector<std::string> allowed, const char* doc, Get get) {
  Setting s = Field(key, on_reload, doc, get);
  s.default_text = Code(get(Defaults()));
  s.read = [key = s.key, noun, allowed, get](YamlReader& r, const YAML::Node& n,
                                             ServerConfig* c) {
    std::string v;
    if (!r.GetString(n, key, &v)) {
      return;
    }
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
      r.Error(n, key,
              absl::StrCat("unknown ", noun, " '", v,
                           "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
      return;
    }
    get(*c) = std::move(v);
  };
  return s;
}

// A backend address (`listen` false) or an address to listen on (port 0
// allowed; empty allowed when `allow_empty`).
bool GetAddress(YamlReader& r, const YAML::Node& node, const std::string& path,
                std::string* out, bool allow_empty, bool listen = false);

template <typename Get>
Setting AddressSetting(const char* key, OnReload on_reload, bool listen,
                       bool allow_empty, const char* doc, Get get) {
  Setting s = Field(key, on_reload, doc, get);
  s.default_text = Code(get(Defaults()));
  s.read = [key = s.key, listen, allow_empty, get](
               YamlReader& r, const YAML::Node& n, ServerConfig* c) {
    GetAddress(r, n, key, &get(*c), allow_empty, listen);
  };
  return s;
}

// A list whose entries `read_one` reads (path "key[i]"); what it returns
// is kept.
template <typename Get, typename ReadOne>
Setting List(const char* key, OnReload on_reload, const char* expected,
             const char* doc, Get get, ReadOne read_one) {
  Setting s = Field(key, on_reload, doc, get);
  s.default_text = Code("[]");
  s.read = [key = s.key, expected, get, read_one](
               YamlReader& r, const YAML::Node& n, ServerConfig* c) {
    if (!n.IsSequence()) {
      r.Error(n, key, expected);
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      read_one(r, n[i], IndexPath(key, i), &get(*c));
    }
  };
  return s;
}

// Every setting of a block reported under the block's name.
std::vector<Setting> ReportedAs(const char* block, std::vector<Setting> list);

// Every server setting, in the reference's order (server_settings_list.cc).
std::vector<Setting> DeclareServerSettings();

}  // namespace aside::server::setting_kinds

#endif  // ASIDE_SERVER_CONFIG_SETTING_KINDS_H_
