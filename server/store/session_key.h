// The key that signs sticky session tokens (GroupRegistry::set_session_key),
// chosen once at start. In order: the content of `session_key_file` when
// it is set; else the key the store holds; else the key this replica
// generated, stored for the others (with etcd, the first replica's wins and
// every replica takes it). A store the server may start without (etcd
// unreachable) leaves the generated key, with a warning: tokens issued here
// are then not honoured by other replicas until this one restarts with the
// store reachable.
#ifndef ASIDE_SERVER_STORE_SESSION_KEY_H_
#define ASIDE_SERVER_STORE_SESSION_KEY_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/store/store.h"

namespace aside::server {

// A session key shorter than this is refused.
inline constexpr size_t kMinSessionKeyBytes = 16;

// The content of a session_key_file; FAILED_PRECONDITION naming the file
// when it cannot be read or is shorter than kMinSessionKeyBytes.
absl::StatusOr<std::string> ReadSessionKeyFile(const std::string& path);

// The key to sign with: from `file` (when not empty), from the store's
// `contents` or, failing both, `generated` offered to `store`.
absl::StatusOr<std::string> ChooseSessionKey(const std::string& file,
                                             const StoreSnapshot& contents,
                                             Store* store,
                                             const std::string& generated);

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_SESSION_KEY_H_
