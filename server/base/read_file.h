// Reads a small file the config names (a key, a token, a certificate) whole.
// Errors name the file and what it is for ("/etc/aside/key: cannot open
// session key file").
#ifndef ASIDE_SERVER_BASE_READ_FILE_H_
#define ASIDE_SERVER_BASE_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aside::server {

// The file's bytes; FAILED_PRECONDITION when it cannot be opened or read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what);

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_READ_FILE_H_
