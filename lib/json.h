// JSON string literals, for the server's JSON log lines and asidectl.
//
// Why not protobuf's JSON printer (google.protobuf.Value): it costs about
// 10 us per string, and a string that is not valid UTF-8 loses its bad
// bytes and makes libprotobuf print an ERROR line on stderr, which would
// break a stream of JSON log lines. This writes every byte through and
// escapes exactly what RFC 8259 requires.
#ifndef ASIDE_LIB_JSON_H_
#define ASIDE_LIB_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace aside {

// Appends `s` as a quoted JSON string: quotes, backslashes and control
// characters escaped.
void AppendJsonString(std::string* out, absl::string_view s);

// The same, as a new string.
std::string JsonString(absl::string_view s);

}  // namespace aside

#endif  // ASIDE_LIB_JSON_H_
