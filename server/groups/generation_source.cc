#include "server/groups/generation_source.h"

#include <utility>

namespace aside::server {

GenerationSource::GenerationSource(uint64_t base, Reserver reserver)
    : last_(base), reserver_(std::move(reserver)) {}

uint64_t GenerationSource::Next() {
  aside::MutexLock lock(&mu_);
  ++last_;
  if (reserver_ && last_ >= reserved_) {
    // A failed reservation is retried on the next generation; the clock-based
    // base still keeps restarts ahead in the common case.
    if (reserver_(last_ + kReserveBlock).ok()) {
      reserved_ = last_ + kReserveBlock;
    }
  }
  return last_;
}

void GenerationSource::Raise(uint64_t next) {
  aside::MutexLock lock(&mu_);
  if (next > 0 && last_ < next - 1) {
    last_ = next - 1;
  }
}

uint64_t GenerationSource::last() const {
  aside::MutexLock lock(&mu_);
  return last_;
}

}  // namespace aside::server
