#include "lib/clock.h"

namespace aside {

SystemClock& SystemClock::Get() noexcept {
  static SystemClock clock;
  return clock;
}

}  // namespace aside
