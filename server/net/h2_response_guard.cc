#include "server/net/h2_response_guard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace aside::server {
namespace {

// RFC 9113 frame types and flags.
constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kPushPromise = 0x5;
constexpr uint8_t kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1;
constexpr uint8_t kEndHeaders = 0x4;
constexpr uint8_t kPadded = 0x8;
constexpr uint8_t kCompressed = 0x1;  // gRPC's message flag

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

bool H2ResponseGuard::Read(std::string_view bytes) {
  while (!bytes.empty() && !failed()) {
    if (header_have_ < sizeof(header_)) {
      const size_t n = std::min(sizeof(header_) - header_have_, bytes.size());
      std::memcpy(header_ + header_have_, bytes.data(), n);
      header_have_ = static_cast<uint8_t>(header_have_ + n);
      bytes.remove_prefix(n);
      if (header_have_ == sizeof(header_)) {
        OnFrameHeader();
      }
      continue;
    }
    const size_t n = std::min<size_t>(payload_left_, bytes.size());
    std::string_view chunk = bytes.substr(0, n);
    bytes.remove_prefix(n);
    payload_left_ -= static_cast<uint32_t>(n);
    if (type_ == kData) {
      if (pad_length_pending_ && !chunk.empty()) {
        padding_ = static_cast<uint8_t>(chunk[0]);
        pad_length_pending_ = false;
        chunk.remove_prefix(1);
        if (padding_ > payload_left_ + chunk.size()) {
          Fail("a DATA frame's padding is longer than the frame");
          break;
        }
      }
      // The frame's last `padding_` bytes are padding: those of them in
      // this chunk are cut off.
      const size_t padding_in_chunk =
          padding_ > payload_left_
              ? std::min<size_t>(chunk.size(), padding_ - payload_left_)
              : 0;
      WalkData(chunk.substr(0, chunk.size() - padding_in_chunk));
    }
    if (payload_left_ == 0 && header_have_ == sizeof(header_)) {
      // The frame is read.
      if (type_ == kData && (flags_ & kEndStream) != 0) {
        streams_.erase(stream_id_);
      }
      header_have_ = 0;
    }
  }
  return !failed();
}

void H2ResponseGuard::OnFrameHeader() {
  const uint32_t length =
      (uint32_t{header_[0]} << 16) | (uint32_t{header_[1]} << 8) | header_[2];
  type_ = header_[3];
  flags_ = header_[4];
  stream_id_ = Be32(header_ + 5) & 0x7fffffffu;
  payload_left_ = length;
  pad_length_pending_ = type_ == kData && (flags_ & kPadded) != 0;
  padding_ = 0;
  switch (type_) {
    case kHeaders:
    case kPushPromise:
    case kContinuation: {
      if (type_ != kContinuation) {
        header_block_ = 0;
      }
      header_block_ += length;
      if (header_block_ > options_.max_header_block_bytes) {
        Fail(absl::StrCat("a header block of more than ",
                          options_.max_header_block_bytes, " bytes"));
        return;
      }
      if ((flags_ & kEndHeaders) != 0) {
        header_block_ = 0;
      }
      // Trailers end a stream.
      if (type_ == kHeaders && (flags_ & kEndStream) != 0) {
        streams_.erase(stream_id_);
      }
      break;
    }
    case kRstStream:
      streams_.erase(stream_id_);
      break;
    case kData:
      if (!streams_.contains(stream_id_) &&
          streams_.size() >= options_.max_streams) {
        Fail(absl::StrCat("more than ", options_.max_streams,
                          " streams sending data at once"));
        return;
      }
      streams_.try_emplace(stream_id_);
      break;
    default:
      break;
  }
  if (payload_left_ == 0) {
    if (type_ == kData && (flags_ & kEndStream) != 0) {
      streams_.erase(stream_id_);
    }
    header_have_ = 0;
  }
}

void H2ResponseGuard::WalkData(std::string_view data) {
  auto it = streams_.find(stream_id_);
  if (it == streams_.end()) {
    return;
  }
  it->second.Read(data, [this](uint8_t flags, uint32_t length) {
    if (length > options_.max_message_bytes) {
      declared_ = length;
      Fail(absl::StrCat("a message of ", length, " bytes (limit ",
                        options_.max_message_bytes, ")"));
      return false;
    }
    if ((flags & kCompressed) != 0) {
      declared_ = length;
      Fail("a compressed message (only identity is accepted)");
      return false;
    }
    return true;
  });
}

}  // namespace aside::server
