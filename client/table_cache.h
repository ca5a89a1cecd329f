// The stub's table cache on disk (ClientOptions::cache_dir): each group's
// last table from a server, kept so that a service restarting while every
// Aside server is down can still route.
//
// One file per group, `<cache_dir>/<group>.table` (a long name is cut and
// suffixed with its hash; the group name inside the file decides). The file
// is a text header, one `key value` per line with C-escaped values, then
// the payload, the aside.v1.GroupUpdate with the full table exactly as
// Watch sends it, serialized:
//
//   aside-table-cache 1             magic and format version
//   group web
//   generation 42
//   server_id aside-0/3f2a...       the server the table came from
//   target aside-0.aside:50051      one line per configured server
//   written_unix_ms 1800000000000
//   payload_bytes 1234
//   crc32 89abcdef                  CRC-32 (lib/hash.h) of every byte of
//                                   the file before this line, then the
//                                   payload; always the last header line
//   <empty line>
//   <payload>
//
// Writes are atomic (a temporary file in the same directory, fsync,
// rename, fsync of the directory), owner-only (0600; a missing directory is
// created 0700). A file is refused, with the reason, when it is not a cache
// file of this format version, is truncated or fails its checksum, is
// another group's, was written for servers none of which is configured,
// is older than the maximum age, is writable by other users, or holds a
// table that does not validate.
//
// Functions only, no state: thread-safe. The stub writes from its watcher
// thread and reads when a group is subscribed, never on the pick path.
#ifndef ASIDE_CLIENT_TABLE_CACHE_H_
#define ASIDE_CLIENT_TABLE_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/table.h"

namespace aside::client_internal {

inline constexpr int kCacheFormatVersion = 1;
// Larger files are refused unread: the stub takes Watch messages up to
// 64 MiB, and the header is small.
inline constexpr size_t kMaxCacheFileBytes = (64u << 20) + (64u << 10);

// The file that holds `group`'s table in `dir`.
std::string CacheFilePath(absl::string_view dir, absl::string_view group);

// What a cache file says.
struct CacheRecord {
  // group, generation, server_id and the full table.
  v1::GroupUpdate update;
  // The servers the stub was configured with when it wrote the file.
  std::vector<std::string> targets;
  absl::Time written;
};

// The file's bytes. `record.update` must carry a full table.
std::string EncodeCacheFile(const CacheRecord& record);

// What a file must match to be used.
struct CacheExpectation {
  std::string group;
  std::vector<std::string> targets;
  absl::Time now;
  absl::Duration max_age;
};

// A usable file: its record and the table spec to build from it.
struct CachedTable {
  CacheRecord record;
  TableSpec spec;
  absl::Duration age;
};

// Checks and decodes a file's bytes. Errors are FailedPrecondition with
// the reason, e.g. "checksum mismatch" or "written for group 'api'".
absl::StatusOr<CachedTable> DecodeCacheFile(absl::string_view bytes,
                                            const CacheExpectation& expect);

// Reads `path`: NotFound when it does not exist; FailedPrecondition when
// it is not a regular file owned by this user and writable by no one else,
// or is larger than kMaxCacheFileBytes; other errors as the system gave
// them.
absl::StatusOr<std::string> ReadCacheFile(const std::string& path);

// Replaces `path` with `contents` atomically and durably, mode 0600,
// creating the missing directories of its path with mode 0700.
absl::Status WriteCacheFile(const std::string& path,
                            absl::string_view contents);

}  // namespace aside::client_internal

#endif  // ASIDE_CLIENT_TABLE_CACHE_H_
