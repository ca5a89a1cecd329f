#include "server/store/session_key.h"

#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/base/read_file.h"

namespace aside::server {

absl::StatusOr<std::string> ReadSessionKeyFile(const std::string& path) {
  absl::StatusOr<std::string> key = ReadWholeFile(path, "session key file");
  if (key.ok() && key->size() < kMinSessionKeyBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": session key shorter than ", kMinSessionKeyBytes, " bytes"));
  }
  return key;
}

absl::StatusOr<std::string> ChooseSessionKey(const std::string& file,
                                             const StoreSnapshot& contents,
                                             Store* store,
                                             const std::string& generated) {
  if (!file.empty()) {
    return ReadSessionKeyFile(file);
  }
  if (contents.session_key.size() >= kMinSessionKeyBytes) {
    return contents.session_key;
  }
  absl::StatusOr<std::string> key = store->SessionKey(generated);
  if (key.ok() || !store->starts_unavailable()) {
    return key;
  }
  Log(LogLevel::kWarn, "store.session_key_local",
      {{"store", store->location()},
       {"error", std::string(key.status().message())},
       {"effect",
        "sticky tokens issued here are not honoured by other replicas "
        "until this one restarts with the store reachable (or set "
        "session_key_file)"}});
  return generated;
}

}  // namespace aside::server
