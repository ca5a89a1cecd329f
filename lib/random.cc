#include "lib/random.h"

#include <random>
#include <thread>

namespace aside {

FastRng& ThreadRng() noexcept {
  thread_local FastRng rng([] {
    std::random_device device;
    const uint64_t seed =
        (static_cast<uint64_t>(device()) << 32) ^ device() ^
        std::hash<std::thread::id>{}(std::this_thread::get_id());
    return seed;
  }());
  return rng;
}

}  // namespace aside
