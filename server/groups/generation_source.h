// Table generations: strictly increasing numbers, one per publication,
// that tell every edge and every subscriber which table is newer.
#ifndef ASIDE_SERVER_GROUPS_GENERATION_SOURCE_H_
#define ASIDE_SERVER_GROUPS_GENERATION_SOURCE_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "lib/sync.h"

namespace aside::server {

// Hands out table generations: strictly increasing across all groups of
// the process, starting above `base` (see GroupRegistry). With a reserver
// (the state store), generations are reserved in blocks so that a restart
// never hands out one that was already used, even when the clock went back.
// Thread-safe: Next and last from any thread; mu_ guards last_ and
// reserved_, and the reserver runs under it (generations are handed out in
// order of their reservation).
class GenerationSource {
 public:
  static constexpr uint64_t kReserveBlock = 1'000'000;
  using Reserver = std::function<absl::Status(uint64_t floor)>;

  explicit GenerationSource(uint64_t base, Reserver reserver = nullptr);
  uint64_t Next();
  // Makes the next generation at least `next` (never lowers it).
  void Raise(uint64_t next);
  uint64_t last() const;

 private:
  mutable aside::Mutex mu_;
  uint64_t last_ ABSL_GUARDED_BY(mu_);
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  Reserver reserver_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GENERATION_SOURCE_H_
