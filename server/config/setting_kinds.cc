#include "server/config/setting_kinds.h"

#include "lib/address.h"

namespace aside::server::setting_kinds {

const ServerConfig& Defaults() {
  static const ServerConfig* const defaults = new ServerConfig();
  return *defaults;
}

std::string Code(absl::string_view text) {
  return absl::StrCat("`", text, "`");
}

Setting WithDefault(Setting s, const char* text) {
  s.default_text = text;
  return s;
}

std::string RangeText(const DurationRange& d) {
  std::string out = d.low == absl::ZeroDuration()
                        ? absl::StrCat("0..", absl::FormatDuration(d.high))
                        : absl::StrCat(absl::FormatDuration(d.low), "..",
                                       absl::FormatDuration(d.high));
  if (d.zero_is_off) {
    out = absl::StrCat("0 (off) or ", out);
  }
  if (d.whole_seconds) {
    absl::StrAppend(&out, " in whole seconds");
  }
  return out;
}

// A backend address (`listen` false) or an address to listen on (port 0
// allowed; empty allowed when `allow_empty`).
bool GetAddress(YamlReader& r, const YAML::Node& node, const std::string& path,
                std::string* out, bool allow_empty, bool listen) {
  std::string s;
  if (!r.GetString(node, path, &s)) {
    return false;
  }
  if (s.empty() && allow_empty) {
    *out = s;
    return true;
  }
  absl::StatusOr<Address> a = listen ? ParseListenAddress(s) : ParseAddress(s);
  if (!a.ok()) {
    r.Error(node, path, a.status().message());
    return false;
  }
  *out = s;
  return true;
}

// Every setting of a block reported under the block's name.
std::vector<Setting> ReportedAs(const char* block, std::vector<Setting> list) {
  for (Setting& s : list) {
    s.reported_as = block;
  }
  return list;
}

}  // namespace aside::server::setting_kinds
