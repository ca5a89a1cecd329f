// gRPC's length-prefixed messages (1 flag byte, 4 length bytes, then the
// message; gRPC's PROTOCOL-HTTP2.md) read as the bytes of one stream's DATA
// frames go by, a chunk at a time, holding only the prefix being read. The
// request guard (h2_request_guard.h) and the response guard
// (h2_response_guard.h) judge each prefix with it.
#ifndef ASIDE_SERVER_NET_GRPC_MESSAGE_WALK_H_
#define ASIDE_SERVER_NET_GRPC_MESSAGE_WALK_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace aside::server {

class MessageWalk {
 public:
  // Reads `data`, the stream's next DATA bytes (padding excluded). At each
  // whole prefix calls `on_prefix(flags, length)`; one that returns false
  // stops the walk, and Read returns false.
  template <typename OnPrefix>
  bool Read(std::string_view data, OnPrefix on_prefix) {
    while (!data.empty()) {
      if (left_ > 0) {
        const size_t n = std::min<size_t>(left_, data.size());
        left_ -= static_cast<uint32_t>(n);
        data.remove_prefix(n);
        continue;
      }
      const size_t n = std::min<size_t>(sizeof(prefix_) - have_, data.size());
      std::memcpy(prefix_ + have_, data.data(), n);
      have_ = static_cast<uint8_t>(have_ + n);
      data.remove_prefix(n);
      if (have_ < sizeof(prefix_)) {
        continue;
      }
      have_ = 0;
      const uint32_t length = (uint32_t{prefix_[1]} << 24) |
                              (uint32_t{prefix_[2]} << 16) |
                              (uint32_t{prefix_[3]} << 8) | prefix_[4];
      if (!on_prefix(prefix_[0], length)) {
        return false;
      }
      left_ = length;
    }
    return true;
  }

 private:
  uint8_t prefix_[5] = {0, 0, 0, 0, 0};
  uint8_t have_ = 0;
  uint32_t left_ = 0;  // bytes of the current message to come
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_GRPC_MESSAGE_WALK_H_
