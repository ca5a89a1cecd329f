// The per-backend load state of one group, keyed by address. Tables hold
// shared pointers into it, so a backend's load survives table rebuilds and
// is dropped only when no table references the backend any more.
#ifndef ASIDE_LIB_LOAD_LOAD_TRACKER_H_
#define ASIDE_LIB_LOAD_LOAD_TRACKER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "lib/clock.h"
#include "lib/load/backend_load.h"
#include "lib/sync.h"

namespace aside {

// Thread-safe. GetOrCreate() is for table builders (control path), not for
// the pick path.
class LoadTracker {
 public:
  // `clock` (null: none) stamps each new entry with the time it was first
  // seen, from which its default peak-EWMA RTT decays (BackendLoad).
  explicit LoadTracker(const Clock* clock = nullptr) : clock_(clock) {}

  // Returns the load of `address`, creating it on first use.
  std::shared_ptr<BackendLoad> GetOrCreate(absl::string_view address);
  // Forgets entries no table references any more.
  void Prune();
  size_t size() const;

 private:
  const Clock* const clock_;
  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<BackendLoad>> loads_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace aside

#endif  // ASIDE_LIB_LOAD_LOAD_TRACKER_H_
