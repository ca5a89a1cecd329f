// Moving Admin-created groups between stores (aside-server --export-state /
// --import-state): from one replica's SQLite file to the fleet's etcd, or
// back. The file is an aside.v1.ListGroupsResponse in proto JSON (the
// definitions only), readable and editable by hand.
#ifndef ASIDE_SERVER_STORE_STORE_TRANSFER_H_
#define ASIDE_SERVER_STORE_STORE_TRANSFER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/store.h"

namespace aside::server {

// Writes every stored group of `store` to `path`; returns how many.
absl::StatusOr<size_t> ExportState(Store& store, const std::string& path);

struct ImportResult {
  std::vector<std::string> imported;
  // Groups the store already holds: left as they are.
  std::vector<std::string> skipped;
};
// Validates every group in `path` first (nothing is written when one is
// invalid; the error names it), then creates each one that `store` does
// not hold yet.
absl::StatusOr<ImportResult> ImportState(Store& store, const std::string& path);

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_STORE_TRANSFER_H_
