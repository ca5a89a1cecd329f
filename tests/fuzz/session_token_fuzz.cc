// Sticky session tokens as a client sends them back in PickRequest
// (lib/policies/sticky.h). Arbitrary text opens only when it is exactly
// the token the server would issue for what it decodes to (no malleable
// encodings, no forgery without the key), and a token issued for an id and
// expiry taken from the input opens to them again.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lib/policies/sticky.h"
#include "lib/selector.h"

namespace {

const aside::StickyTokenCodec& Codec() {
  static const auto* codec =
      new aside::StickyTokenCodec("0123456789abcdef-fuzz-key", "web");
  return *codec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  uint64_t id = 0;
  int64_t expiry = 0;
  if (Codec().Open(text, &id, &expiry)) {
    aside::SessionToken again;
    Codec().Issue(id, expiry, again);
    if (again.view() != text) {
      __builtin_trap();  // accepted a token the server never issued
    }
  }
  if (size >= 16) {
    std::memcpy(&id, data, 8);
    std::memcpy(&expiry, data + 8, 8);
    aside::SessionToken token;
    Codec().Issue(id, expiry, token);
    uint64_t opened_id = 0;
    int64_t opened_expiry = 0;
    if (!Codec().Open(token.view(), &opened_id, &opened_expiry) ||
        opened_id != id || opened_expiry != expiry) {
      __builtin_trap();
    }
  }
  return 0;
}
