// Bounds what a backend may make Aside's own gRPC channels buffer.
//
// Aside is a gRPC client of every backend (grpc.health.v1 probes, ORCA
// streams) and of etcd. gRPC 1.51 checks a received message against the
// channel's receive limit only once the whole message is in memory: its
// HTTP/2 transport grants the peer flow-control window for the length the
// message's prefix declares. So one backend answering with a 1 GiB message
// costs 1 GiB, whatever the limit (server/net/h2_request_guard.h is the same
// hole on the server's side).
//
// The guard reads the bytes a backend sends, as they go by on their way to
// gRPC (server/net/backend_relay.h moves them), and stops the connection
// before they are passed on when:
//   - a gRPC message prefix (1 flag byte, 4 length bytes; PROTOCOL-HTTP2.md)
//     declares more than `max_message_bytes`;
//   - a message is compressed (Aside's channels accept identity only, so a
//     compressed message cannot be decompressed into a bomb);
//   - one header block (HEADERS and its CONTINUATION frames) is larger than
//     `max_header_block_bytes`.
// Nothing is held: frame headers are read as they pass and DATA payloads
// walked for message prefixes, so the guard's state is a few integers per
// open stream. Frames are never altered.
//
// Thread-safety: none; one guard per connection.
#ifndef ASIDE_SERVER_NET_H2_RESPONSE_GUARD_H_
#define ASIDE_SERVER_NET_H2_RESPONSE_GUARD_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "server/net/grpc_message_walk.h"

namespace aside::server {

struct H2ResponseGuardOptions {
  uint32_t max_message_bytes = 16 << 10;
  uint32_t max_header_block_bytes = 64 << 10;
  // Open streams tracked before the connection is given up (Aside's
  // channels open one or a few at a time).
  uint32_t max_streams = 1024;
};

class H2ResponseGuard {
 public:
  explicit H2ResponseGuard(H2ResponseGuardOptions options)
      : options_(options) {}

  // Reads `bytes` from the backend. False once the connection must be
  // stopped (then `why()` says why, and no later call reads anything): the
  // bytes of this call must not reach gRPC.
  bool Read(std::string_view bytes);

  bool failed() const { return !why_.empty(); }
  const std::string& why() const { return why_; }
  // The message length a refused prefix declared (0 for other failures).
  uint64_t declared() const { return declared_; }

 private:
  void OnFrameHeader();
  // Walks DATA bytes of the current frame's stream (padding excluded).
  void WalkData(std::string_view data);
  void Fail(std::string why) { why_ = std::move(why); }

  const H2ResponseGuardOptions options_;
  std::string why_;
  uint64_t declared_ = 0;

  uint8_t header_[9] = {};
  uint8_t header_have_ = 0;
  // The payload of the frame being read.
  uint32_t payload_left_ = 0;
  uint8_t type_ = 0;
  uint8_t flags_ = 0;
  uint32_t stream_id_ = 0;
  // DATA frames: whether the pad length byte is still to come, and how many
  // trailing padding bytes the payload ends with.
  bool pad_length_pending_ = false;
  uint32_t padding_ = 0;
  // The header block being read: its size so far, open until END_HEADERS.
  uint32_t header_block_ = 0;
  absl::flat_hash_map<uint32_t, MessageWalk> streams_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_H2_RESPONSE_GUARD_H_
