#include "lib/load/orca_report.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace aside {
namespace {

// Reads a varint at `*p` (at most 10 bytes), advancing `*p`.
bool ReadVarint(const char** p, const char* end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    const auto byte = static_cast<uint8_t>(**p);
    ++*p;
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

// Reads 8 little-endian bytes as a double, advancing `*p`.
bool ReadDouble(const char** p, const char* end, double* out) {
  if (end - *p < 8) {
    return false;
  }
  uint64_t bits = 0;
  for (int i = 7; i >= 0; --i) {
    bits = (bits << 8) | static_cast<uint8_t>((*p)[i]);
  }
  *p += 8;
  std::memcpy(out, &bits, sizeof(*out));
  return true;
}

// One named_metrics entry (key = 1, value = 2): sets `load`'s field of
// that name, if it reads one. False when the entry is malformed.
bool ReadNamedMetric(absl::string_view entry, OrcaLoad& load) {
  const char* p = entry.data();
  const char* const end = entry.data() + entry.size();
  absl::string_view key;
  double value = 0;
  bool has_value = false;
  while (p < end) {
    uint64_t tag = 0;
    if (!ReadVarint(&p, end, &tag)) {
      return false;
    }
    if (tag == (1 << 3 | 2)) {
      uint64_t length = 0;
      if (!ReadVarint(&p, end, &length) ||
          length > static_cast<uint64_t>(end - p)) {
        return false;
      }
      key = absl::string_view(p, length);
      p += length;
    } else if (tag == (2 << 3 | 1)) {
      if (!ReadDouble(&p, end, &value)) {
        return false;
      }
      has_value = true;
    } else {
      return false;
    }
  }
  double* target = key == "rif"          ? &load.rif
                   : key == "latency_ms" ? &load.latency_ms
                                         : nullptr;
  if (target != nullptr && has_value) {
    if (!std::isfinite(value) || value < 0) {
      return false;
    }
    *target = value;
  }
  return true;
}

}  // namespace

std::optional<OrcaLoad> ParseOrcaLoadReport(absl::string_view bytes) {
  OrcaLoad load;
  const char* p = bytes.data();
  const char* const end = bytes.data() + bytes.size();
  while (p < end) {
    uint64_t tag = 0;
    if (!ReadVarint(&p, end, &tag) || (tag >> 3) == 0) {
      return std::nullopt;
    }
    const uint64_t field = tag >> 3;
    switch (tag & 7) {
      case 0: {  // varint (rps, the deprecated integer form, is skipped)
        uint64_t ignored = 0;
        if (!ReadVarint(&p, end, &ignored)) {
          return std::nullopt;
        }
        break;
      }
      case 1: {  // 64 bits
        if (end - p < 8) {
          return std::nullopt;
        }
        uint64_t bits = 0;
        for (int i = 7; i >= 0; --i) {  // little-endian
          bits = (bits << 8) | static_cast<uint8_t>(p[i]);
        }
        p += 8;
        double v = 0;
        std::memcpy(&v, &bits, sizeof(v));
        double* target = field == 1   ? &load.cpu_utilization
                         : field == 6 ? &load.qps
                         : field == 7 ? &load.eps
                         : field == 9 ? &load.application_utilization
                                      : nullptr;
        if (target != nullptr) {
          if (!std::isfinite(v) || v < 0) {
            return std::nullopt;
          }
          *target = v;
        }
        break;
      }
      case 2: {  // length-delimited (the maps)
        uint64_t length = 0;
        if (!ReadVarint(&p, end, &length) ||
            length > static_cast<uint64_t>(end - p)) {
          return std::nullopt;
        }
        if (field == 8 &&
            !ReadNamedMetric(absl::string_view(p, length), load)) {
          return std::nullopt;
        }
        p += length;
        break;
      }
      case 5:  // 32 bits
        if (end - p < 4) {
          return std::nullopt;
        }
        p += 4;
        break;
      default:  // groups (3, 4) and the undefined 6, 7
        return std::nullopt;
    }
  }
  return load;
}

}  // namespace aside
