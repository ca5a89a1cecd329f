// Refuses an oversized gRPC request message before gRPC buffers it.
//
// gRPC 1.51 checks a request against its receive limit only once the whole
// message is in memory: its HTTP/2 transport grants the peer flow-control
// window until the length the message's prefix declares has arrived, so one
// 1 GiB Pick costs 1 GiB however small the limit. The guard sits between
// the client's bytes and gRPC's (server/net/guarded_relay.h moves them) and
// reads the HTTP/2 frames going by: every request DATA frame is held until
// it is whole (at most the frame size the server announced, 16 KiB by
// default) and its gRPC message prefixes (1 flag byte, 4 length bytes, per
// message; gRPC's wire format, PROTOCOL-HTTP2.md) are read. A prefix
// declaring more than the limit ends that call at once:
//
//   - gRPC gets RST_STREAM(CANCEL) for the stream and never the frame;
//   - the client gets the stream's trailers, grpc-status 8
//     (RESOURCE_EXHAUSTED) and a grpc-message naming the limit (after the
//     response headers if gRPC already sent them, otherwise as a
//     trailers-only response), then RST_STREAM(NO_ERROR);
//   - the frame and every later DATA frame of that stream are dropped, and
//     the client's connection window is given back with WINDOW_UPDATE, so
//     the connection's other calls go on.
//
// So a request costs at most its limit and one frame in gRPC's buffers, and
// an oversized one one frame here. Everything else passes unchanged and
// unparsed beyond the 9-byte frame headers. The guard's own frames to the
// client go between the server's frames, never inside one, and never
// before the server's first SETTINGS. Header blocks are never altered:
// HPACK state stays the two ends' own (the guard's trailers are literals
// that touch no dynamic table).
//
// What the guard does not judge it leaves to gRPC: a byte stream that is
// not HTTP/2, a frame larger than the announced size or a malformed DATA
// frame turns the guard into a plain pipe for the rest of the connection
// (`passthrough()`), and gRPC closes the connection for the error. It
// tracks one entry per open stream; past `max_streams` open streams it
// stops the connection (`failed()`; the relay closes it).
//
// Rapid reset (a stream opened and reset at once, over and over): gRPC
// 1.51 queues the call of every such stream faster than it retires them, so
// the guard counts the client's RST_STREAM frames against a budget: a
// ResetBucket of `max_resets` that refills at `resets_per_second` (the
// shape nghttp2 chose for the same attack), the connection's own or one
// shared by every connection of its peer (the relay's choice: an attacker
// that reconnects must not start from a full bucket). The first reset past
// it stops the connection: the client gets GOAWAY(ENHANCE_YOUR_CALM) naming
// the limit (when the server's frames are at a boundary) and the relay
// closes the connection; that reset and what follows it never reach gRPC.
// A client that cancels calls at a lower rate never notices.
//
// Thread-safety: none; one guard per connection, used by one thread (its
// ResetBucket is thread-safe).
// Cost: per byte, a copy into the output buffers; per request DATA frame, a
// walk over its message prefixes; per open stream, a hash-map entry.
#ifndef ASIDE_SERVER_NET_H2_REQUEST_GUARD_H_
#define ASIDE_SERVER_NET_H2_REQUEST_GUARD_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "lib/sync.h"
#include "server/net/grpc_message_walk.h"

namespace aside::server {

struct H2RequestGuardOptions {
  // The largest request message accepted, in bytes (gRPC's own limit on the
  // port: refusing here what gRPC would refuse anyway).
  uint32_t max_message_bytes = 4 << 20;
  // Named in the refusal, e.g. "limits.max_receive_message_bytes".
  std::string limit_name = "limits.max_receive_message_bytes";
  // Open streams tracked before the connection is given up (a client that
  // honours the server's max concurrent streams stays far below).
  uint32_t max_streams = 4096;
  // The client's RST_STREAM frames allowed at once (0 = no budget), and
  // given back per second.
  uint32_t max_resets = 0;
  uint32_t resets_per_second = 0;
  // Named in the GOAWAY's debug data.
  std::string resets_limit_name = "limits.max_stream_resets";
  // Named when a stream is refused past a StreamCount.
  std::string peer_streams_limit_name = "limits.max_streams_per_peer";
  std::string all_streams_limit_name = "limits.max_streams";
};

// Streams open at once against a cap (0: none): one peer's, shared by its
// connections, or the whole port's. Every stream counts, whatever its
// service (Watch, ADS, LRS, grpclb, ReportLoad, LoadView, health Watch, a
// unary call in flight): what one peer's streams may hold in memory is
// bounded by their number. Thread-safe.
class StreamCount {
 public:
  explicit StreamCount(uint32_t max) : max_(max) {}
  // Counts one more stream; false (nothing counted) at the cap.
  bool TryOpen() {
    uint32_t n = open_.load(std::memory_order_relaxed);
    do {
      if (max_ != 0 && n >= max_) {
        return false;
      }
    } while (!open_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    return true;
  }
  void Close() { open_.fetch_sub(1, std::memory_order_relaxed); }
  uint32_t open() const { return open_.load(std::memory_order_relaxed); }
  uint32_t max() const { return max_; }

 private:
  const uint32_t max_;
  std::atomic<uint32_t> open_{0};
};

// A token bucket of stream resets: `burst` at most, refilled at
// `per_second`. Thread-safe: the connections of one peer share one.
class ResetBucket {
 public:
  using Clock = std::chrono::steady_clock;

  ResetBucket(uint32_t burst, uint32_t per_second)
      : burst_(burst), per_second_(per_second), tokens_(burst) {}

  // Takes one reset; false when none is left.
  bool Take(Clock::time_point now);
  // Whether the bucket would be full at `now` (one that is can be dropped:
  // a new one is the same).
  bool FullAt(Clock::time_point now) const;

 private:
  double TokensAt(Clock::time_point now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t burst_;
  const uint32_t per_second_;
  mutable aside::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_ ABSL_GUARDED_BY(mu_){};
};

// What the connections of one peer share: a reset budget and a stream
// count (null: none, or the connection's own budget), and the port's
// stream count.
struct PeerShares {
  std::shared_ptr<ResetBucket> resets;
  std::shared_ptr<StreamCount> streams;
  std::shared_ptr<StreamCount> all_streams;
};

class H2RequestGuard {
 public:
  using Clock = ResetBucket::Clock;

  // `resets` is the reset budget to draw on; null: the connection's own
  // (when options.max_resets is not 0). Each stream the client opens is
  // counted in `peer_streams` and `all_streams` (either may be null) until
  // it ends; one past either cap is refused at its HEADERS, as an
  // oversized message is (RESOURCE_EXHAUSTED naming the limit).
  explicit H2RequestGuard(H2RequestGuardOptions options,
                          std::shared_ptr<ResetBucket> resets = nullptr,
                          std::shared_ptr<StreamCount> peer_streams = nullptr,
                          std::shared_ptr<StreamCount> all_streams = nullptr);
  ~H2RequestGuard();
  H2RequestGuard(const H2RequestGuard&) = delete;
  H2RequestGuard& operator=(const H2RequestGuard&) = delete;

  // Bytes from the client. Appends to `to_server` what gRPC may read and to
  // `to_client` the guard's own frames that can go now.
  void FromClient(std::string_view bytes, std::string* to_server,
                  std::string* to_client);
  // Bytes from gRPC. Appends them to `to_client`, with the guard's pending
  // frames at the frame boundaries.
  void FromServer(std::string_view bytes, std::string* to_client);

  // Calls refused so far for their message size, and streams refused past
  // the peer's and the port's stream caps.
  uint64_t refused() const { return refused_; }
  uint64_t refused_peer_streams() const { return refused_peer_streams_; }
  uint64_t refused_all_streams() const { return refused_all_streams_; }
  // Streams counted open now.
  size_t open_streams() const { return open_.size(); }
  // The largest message length a refused call declared.
  uint64_t largest_refused() const { return largest_refused_; }
  bool passthrough() const { return passthrough_; }
  // Too many open streams, or resets past the budget: the connection
  // should be closed.
  bool failed() const { return failed_; }
  // The reset budget was spent (and failed() is true).
  bool reset_budget_spent() const { return resets_spent_; }
  // The time the reset budget is read against (tests pin it).
  void set_now_for_test(Clock::time_point now) { now_for_test_ = now; }
  // Bytes held (a partial frame), for tests.
  size_t held() const { return client_frame_.size(); }
  size_t tracked_streams() const { return streams_.size(); }

 private:
  struct Stream {
    MessageWalk messages;
    bool server_headers = false;
    bool refused = false;
  };

  void OnClientFrame(std::string_view frame, std::string* to_server,
                     std::string* to_client);
  void OnClientData(uint32_t stream_id, uint8_t flags, std::string_view frame,
                    std::string* to_server, std::string* to_client);
  // The largest declared message length in `data` if it exceeds the limit
  // (updating the stream's state as if read), otherwise 0.
  uint64_t Walk(Stream& s, std::string_view data);
  void Refuse(uint32_t stream_id, Stream& s, uint64_t declared,
              std::string* to_server);
  // Ends the stream: RST_STREAM(CANCEL) to gRPC, trailers with
  // RESOURCE_EXHAUSTED and `message` to the client.
  void RefuseStream(uint32_t stream_id, bool server_headers,
                    const std::string& message, std::string* to_server);
  // Counts a stream the client opens; false (and the stream refused, its
  // reset to gRPC waiting for the end of its header block) past a cap.
  bool OpenStream(uint32_t stream_id);
  void CloseStream(uint32_t stream_id);
  // Sends gRPC the reset of a stream refused at its HEADERS once its header
  // block has passed whole.
  void ResetRefusedStream(std::string* to_server);
  // Takes one reset from the budget; false when there is none left.
  bool TakeReset();
  void OnServerFrameHeader(const uint8_t* header);
  void FlushInjected(std::string* to_client);

  const H2RequestGuardOptions options_;
  bool passthrough_ = false;
  bool failed_ = false;
  bool resets_spent_ = false;
  uint64_t refused_ = 0;
  uint64_t refused_peer_streams_ = 0;
  uint64_t refused_all_streams_ = 0;
  std::shared_ptr<ResetBucket> resets_;        // null: no budget
  std::shared_ptr<StreamCount> peer_streams_;  // null: not counted
  std::shared_ptr<StreamCount> all_streams_;
  // Streams counted in the StreamCounts, until either side ends them.
  absl::flat_hash_set<uint32_t> open_;
  // A stream refused at its HEADERS, whose reset goes to gRPC after its
  // header block (`header_block_ends_` once the END_HEADERS frame was
  // seen).
  uint32_t reset_after_headers_ = 0;
  bool header_block_ends_ = false;
  std::optional<Clock::time_point> now_for_test_;
  uint64_t largest_refused_ = 0;

  // Client to server: the preface, then whole frames for DATA (held in
  // `client_frame_`) and streamed payloads for everything else.
  size_t preface_left_;
  std::string client_frame_;         // header (and, for DATA, payload) so far
  uint32_t client_stream_left_ = 0;  // payload bytes of a streamed frame
  uint32_t last_client_stream_ = 0;
  absl::flat_hash_map<uint32_t, Stream> streams_;

  // Server to client: frame headers are read, payloads streamed; SETTINGS
  // payloads are read for the frame size.
  uint8_t server_header_[9] = {};
  uint8_t server_header_have_ = 0;
  uint32_t server_payload_left_ = 0;
  bool server_settings_ = false;
  std::string settings_;
  bool server_started_ = false;  // its first frame (SETTINGS) went out
  uint32_t max_frame_ = 16384;
  std::string injected_;  // the guard's frames waiting for a boundary
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_H2_REQUEST_GUARD_H_
