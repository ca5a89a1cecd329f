// Hash functions the policies share. All of them are fixed functions of
// their input bytes (no per-process seed, no std::hash), so a ring or table
// built from the same members is the same in every process and every build.
//
// Thread-safe (pure functions). Costs: Fnv1a64 ~1 ns per byte; Hash64 ~1 ns
// per 8 bytes plus ~2 ns; XxHash64 ~1 ns per 8 bytes plus ~5 ns; Crc32 runs
// zlib's table-driven CRC.
#ifndef ASIDE_LIB_HASH_H_
#define ASIDE_LIB_HASH_H_

#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace aside {

// FNV-1a, 64 bits (offset basis 0xcbf29ce484222325, prime 0x100000001b3):
// what Rust's `fnv::FnvHasher` computes for one `write(key)`, so Pingora's
// FNVHash selection can be reproduced bit for bit.
inline uint64_t Fnv1a64(absl::string_view data) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// 64x64 -> 128 multiply folded to 64 bits (the "mum" mixer of wyhash).
inline uint64_t Mum64(uint64_t a, uint64_t b) noexcept {
  const __uint128_t m = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

// A fast, well-mixed 64-bit hash of `data` under `seed`. Reads 8 bytes at a
// time, little-endian, so the value is the same on every little-endian
// machine (x86-64, AArch64). Used for Maglev permutations and key lookups,
// and to name backends in session tokens.
uint64_t Hash64(absl::string_view data, uint64_t seed) noexcept;

// xxHash64 (Yann Collet's XXH64, the reference algorithm: four 64-bit lanes
// over 32-byte stripes, then the tail and the avalanche), reading
// little-endian. What gRPC's and Envoy's ring_hash use for ring entries and
// request hashes (seed 0), so the ring_hash policy can build their ring.
uint64_t XxHash64(absl::string_view data, uint64_t seed) noexcept;

// Finalises a 64-bit value (splitmix64's mixer): consecutive inputs give
// unrelated outputs.
inline uint64_t Mix64(uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Uniform map of a 64-bit hash onto [0, n) (Lemire's multiply-shift; no
// division).
inline uint64_t ReduceTo(uint64_t hash, uint64_t n) noexcept {
  return static_cast<uint64_t>((static_cast<__uint128_t>(hash) * n) >> 64);
}

// CRC-32 (the zlib / IEEE 802.3 polynomial, as nginx's ngx_crc32_long and
// zlib's crc32()). Crc32Update continues a finished CRC over more bytes:
// Crc32Update(Crc32(a), b) == Crc32(a + b).
uint32_t Crc32(absl::string_view data) noexcept;
uint32_t Crc32Update(uint32_t crc, absl::string_view data) noexcept;
// Crc32 for short inputs such as request keys: inline, 4 bytes per step
// (zlib's call and setup cost more than the work below 64 bytes).
inline uint32_t Crc32Short(absl::string_view data) noexcept;
// Slicing-by-4 tables for the reflected CRC-32 polynomial 0xedb88320.
struct Crc32Tables {
  uint32_t t[4][256] = {};
  constexpr Crc32Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) {
        c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      }
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 4; ++s) {
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
      }
    }
  }
};
inline constexpr Crc32Tables kCrc32Tables;

// Crc32Update over the 4 little-endian bytes of `word`, table-driven
// (slicing by 4): the step that makes each Ketama point from the previous.
inline uint32_t Crc32UpdateWord(uint32_t crc, uint32_t word) noexcept {
  uint32_t c = ~crc ^ word;
  c = kCrc32Tables.t[3][c & 0xff] ^ kCrc32Tables.t[2][(c >> 8) & 0xff] ^
      kCrc32Tables.t[1][(c >> 16) & 0xff] ^ kCrc32Tables.t[0][c >> 24];
  return ~c;
}

inline uint32_t Crc32Short(absl::string_view data) noexcept {
  if (data.size() > 64) {
    return Crc32(data);
  }
  const char* p = data.data();
  size_t n = data.size();
  uint32_t c = 0xffffffffu;
  while (n >= 4) {
    uint32_t word;
    std::memcpy(&word, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap32(word);
#endif
    c ^= word;
    c = kCrc32Tables.t[3][c & 0xff] ^ kCrc32Tables.t[2][(c >> 8) & 0xff] ^
        kCrc32Tables.t[1][(c >> 16) & 0xff] ^ kCrc32Tables.t[0][c >> 24];
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    c = kCrc32Tables.t[0][(c ^ static_cast<unsigned char>(*p)) & 0xff] ^
        (c >> 8);
    ++p;
    --n;
  }
  return ~c;
}

// Exact a % d for a fixed divisor d >= 1 and any 64-bit a, without a
// division instruction (Granlund and Montgomery, "Division by invariant
// integers using multiplication", PLDI 1994, figure 4.1): one multiply-high,
// shifts and a multiply. Thread-safe (immutable).
class FastModulo {
 public:
  FastModulo() = default;
  explicit FastModulo(uint64_t d) : d_(d == 0 ? 1 : d) {
    uint32_t l = 0;
    while (l < 64 && (uint64_t{1} << l) < d_) {
      ++l;
    }
    shift_ = l;
    if (l >= 1) {
      // m = floor(2^64 * (2^l - d) / d) + 1, which fits in 64 bits.
      const __uint128_t two_l = static_cast<__uint128_t>(1) << l;
      magic_ = static_cast<uint64_t>(((two_l - d_) << 64) / d_ + 1);
    }
  }
  uint64_t divisor() const noexcept { return d_; }
  uint64_t Quotient(uint64_t a) const noexcept {
    if (shift_ == 0) {
      return a;  // d == 1
    }
    const uint64_t t =
        static_cast<uint64_t>((static_cast<__uint128_t>(magic_) * a) >> 64);
    return (t + ((a - t) >> 1)) >> (shift_ - 1);
  }
  uint64_t Mod(uint64_t a) const noexcept { return a - Quotient(a) * d_; }

 private:
  uint64_t d_ = 1;
  uint64_t magic_ = 0;
  uint32_t shift_ = 0;
};

}  // namespace aside

#endif  // ASIDE_LIB_HASH_H_
