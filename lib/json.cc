#include "lib/json.h"

#include "absl/strings/str_cat.h"

namespace aside {

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(
              out, "\\u00",
              absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string JsonString(absl::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

}  // namespace aside
