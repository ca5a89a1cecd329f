// A small, fast, seedable PRNG for the pick path (wyrand: one multiply per
// draw, 64-bit state), and one instance per thread.
#ifndef ASIDE_LIB_RANDOM_H_
#define ASIDE_LIB_RANDOM_H_

#include <cstdint>

namespace aside {

class FastRng {
 public:
  explicit FastRng(uint64_t seed) noexcept : state_(seed) {}

  uint64_t Next() noexcept {
    state_ += 0xa0761d6478bd642fULL;
    const __uint128_t m =
        static_cast<__uint128_t>(state_) * (state_ ^ 0xe7037ed1a0b428dbULL);
    return static_cast<uint64_t>(m >> 64) ^ static_cast<uint64_t>(m);
  }

  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift; the bias is
  // below 2^-32 for the bounds used here).
  uint64_t Below(uint64_t bound) noexcept {
    return static_cast<uint64_t>((static_cast<__uint128_t>(Next()) * bound) >>
                                 64);
  }

  // Uniform in [0, 1).
  double NextDouble() noexcept {
    return static_cast<double>(Next() >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t state_;
};

// The calling thread's generator, seeded once per thread from the OS and the
// thread's identity.
FastRng& ThreadRng() noexcept;

}  // namespace aside

#endif  // ASIDE_LIB_RANDOM_H_
