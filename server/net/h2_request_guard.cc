#include "server/net/h2_request_guard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace aside::server {
namespace {

// RFC 9113: the client connection preface, frame types, flags, error codes
// and the SETTINGS_MAX_FRAME_SIZE identifier.
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceSize = sizeof(kPreface) - 1;
constexpr size_t kFrameHeader = 9;
constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kGoAway = 0x7;
constexpr uint8_t kWindowUpdate = 0x8;
constexpr uint8_t kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1;
constexpr uint8_t kEndHeaders = 0x4;
constexpr uint8_t kPadded = 0x8;
constexpr uint8_t kAck = 0x1;
constexpr uint32_t kNoError = 0x0;
constexpr uint32_t kCancel = 0x8;
constexpr uint32_t kEnhanceYourCalm = 0xb;
constexpr uint16_t kSettingsMaxFrameSize = 0x5;
constexpr uint32_t kLargestMaxFrame = (1u << 24) - 1;
constexpr size_t kSettingsKept = 6 * 64;

uint32_t Be24(const uint8_t* p) {
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}
uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | p[3];
}

void PutFrameHeader(std::string* out, uint32_t length, uint8_t type,
                    uint8_t flags, uint32_t stream_id) {
  const char h[kFrameHeader] = {
      static_cast<char>(length >> 16),    static_cast<char>(length >> 8),
      static_cast<char>(length),          static_cast<char>(type),
      static_cast<char>(flags),           static_cast<char>(stream_id >> 24),
      static_cast<char>(stream_id >> 16), static_cast<char>(stream_id >> 8),
      static_cast<char>(stream_id)};
  out->append(h, kFrameHeader);
}

void PutU32(std::string* out, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  out->append(b, 4);
}

void PutRstStream(std::string* out, uint32_t stream_id, uint32_t code) {
  PutFrameHeader(out, 4, kRstStream, 0, stream_id);
  PutU32(out, code);
}

void PutWindowUpdate(std::string* out, uint32_t increment) {
  PutFrameHeader(out, 4, kWindowUpdate, 0, 0);
  PutU32(out, increment & 0x7fffffff);
}

// RFC 7541 §5.1: an integer with an N-bit prefix (the first byte's high
// bits are `first`).
void PutHpackInt(std::string* out, uint8_t first, int prefix_bits,
                 size_t value) {
  const size_t max_prefix = (size_t{1} << prefix_bits) - 1;
  if (value < max_prefix) {
    out->push_back(static_cast<char>(first | value));
    return;
  }
  out->push_back(static_cast<char>(first | max_prefix));
  value -= max_prefix;
  while (value >= 128) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// A literal header field without indexing, new name, no Huffman coding
// (RFC 7541 §6.2.2): it leaves both ends' dynamic tables as they are.
void PutLiteral(std::string* out, std::string_view name,
                std::string_view value) {
  out->push_back(0x00);
  PutHpackInt(out, 0x00, 7, name.size());
  out->append(name);
  PutHpackInt(out, 0x00, 7, value.size());
  out->append(value);
}

}  // namespace

double ResetBucket::TokensAt(Clock::time_point now) const {
  if (now <= last_) {
    return tokens_;
  }
  const double seconds = std::chrono::duration<double>(now - last_).count();
  return std::min<double>(burst_, tokens_ + seconds * per_second_);
}

bool ResetBucket::Take(Clock::time_point now) {
  aside::MutexLock lock(&mu_);
  tokens_ = TokensAt(now);
  last_ = std::max(last_, now);
  if (tokens_ < 1) {
    return false;
  }
  tokens_ -= 1;
  return true;
}

bool ResetBucket::FullAt(Clock::time_point now) const {
  aside::MutexLock lock(&mu_);
  return TokensAt(now) >= burst_;
}

H2RequestGuard::H2RequestGuard(H2RequestGuardOptions options,
                               std::shared_ptr<ResetBucket> resets,
                               std::shared_ptr<StreamCount> peer_streams,
                               std::shared_ptr<StreamCount> all_streams)
    : options_(std::move(options)),
      resets_(std::move(resets)),
      peer_streams_(std::move(peer_streams)),
      all_streams_(std::move(all_streams)),
      preface_left_(kPrefaceSize) {
  if (resets_ == nullptr && options_.max_resets > 0) {
    resets_ = std::make_shared<ResetBucket>(options_.max_resets,
                                            options_.resets_per_second);
  }
}

H2RequestGuard::~H2RequestGuard() {
  // The connection is gone, and its streams with it.
  for (size_t i = 0; i < open_.size(); ++i) {
    if (peer_streams_ != nullptr) peer_streams_->Close();
    if (all_streams_ != nullptr) all_streams_->Close();
  }
}

bool H2RequestGuard::OpenStream(uint32_t stream_id) {
  if (peer_streams_ == nullptr && all_streams_ == nullptr) {
    return true;
  }
  const StreamCount* full = nullptr;
  const std::string* name = nullptr;
  if (peer_streams_ != nullptr && !peer_streams_->TryOpen()) {
    full = peer_streams_.get();
    name = &options_.peer_streams_limit_name;
    ++refused_peer_streams_;
  } else if (all_streams_ != nullptr && !all_streams_->TryOpen()) {
    if (peer_streams_ != nullptr) {
      peer_streams_->Close();
    }
    full = all_streams_.get();
    name = &options_.all_streams_limit_name;
    ++refused_all_streams_;
  }
  if (full != nullptr) {
    // gRPC's reset waits for the end of the header block (a frame between
    // HEADERS and its payload or CONTINUATION is a connection error).
    RefuseStream(stream_id, false,
                 absl::StrCat("too many streams open at once: ", full->max(),
                              " (", *name, ")"),
                 nullptr);
    reset_after_headers_ = stream_id;
    return false;
  }
  open_.insert(stream_id);
  return true;
}

void H2RequestGuard::ResetRefusedStream(std::string* to_server) {
  if (reset_after_headers_ != 0 && header_block_ends_ &&
      client_stream_left_ == 0) {
    PutRstStream(to_server, reset_after_headers_, kCancel);
    reset_after_headers_ = 0;
    header_block_ends_ = false;
  }
}

void H2RequestGuard::CloseStream(uint32_t stream_id) {
  if (open_.erase(stream_id) == 0) {
    return;
  }
  if (peer_streams_ != nullptr) peer_streams_->Close();
  if (all_streams_ != nullptr) all_streams_->Close();
}

bool H2RequestGuard::TakeReset() {
  return resets_ == nullptr ||
         resets_->Take(now_for_test_.value_or(Clock::now()));
}

void H2RequestGuard::FromClient(std::string_view bytes, std::string* to_server,
                                std::string* to_client) {
  while (!bytes.empty() && !failed_) {
    if (passthrough_) {
      to_server->append(client_frame_);
      client_frame_.clear();
      to_server->append(bytes);
      break;
    }
    if (preface_left_ > 0) {
      const size_t n = std::min(preface_left_, bytes.size());
      if (std::memcmp(bytes.data(), kPreface + (kPrefaceSize - preface_left_),
                      n) != 0) {
        passthrough_ = true;  // not HTTP/2: gRPC refuses it
        continue;
      }
      to_server->append(bytes.substr(0, n));
      preface_left_ -= n;
      bytes.remove_prefix(n);
      continue;
    }
    if (client_stream_left_ > 0) {
      const size_t n = std::min<size_t>(client_stream_left_, bytes.size());
      to_server->append(bytes.substr(0, n));
      client_stream_left_ -= static_cast<uint32_t>(n);
      bytes.remove_prefix(n);
      ResetRefusedStream(to_server);
      continue;
    }
    if (client_frame_.size() < kFrameHeader) {
      const size_t n =
          std::min(kFrameHeader - client_frame_.size(), bytes.size());
      client_frame_.append(bytes.substr(0, n));
      bytes.remove_prefix(n);
      if (client_frame_.size() < kFrameHeader) {
        break;
      }
    }
    const auto* h = reinterpret_cast<const uint8_t*>(client_frame_.data());
    const uint32_t length = Be24(h);
    if (h[3] == kData) {
      client_frame_.reserve(kFrameHeader + std::min(length, max_frame_));
      h = reinterpret_cast<const uint8_t*>(client_frame_.data());
    }
    if (h[3] != kData) {
      OnClientFrame(client_frame_, to_server, to_client);
      client_frame_.clear();
      client_stream_left_ = length;
      ResetRefusedStream(to_server);
      continue;
    }
    if (length > max_frame_) {
      passthrough_ = true;  // gRPC closes the connection for it
      continue;
    }
    const size_t want = kFrameHeader + length - client_frame_.size();
    const size_t n = std::min(want, bytes.size());
    client_frame_.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
    if (n < want) {
      break;
    }
    h = reinterpret_cast<const uint8_t*>(client_frame_.data());  // moved
    OnClientData(Be32(h + 5) & 0x7fffffff, h[4], client_frame_, to_server,
                 to_client);
    client_frame_.clear();
  }
  FlushInjected(to_client);
}

void H2RequestGuard::OnClientFrame(std::string_view header,
                                   std::string* to_server, std::string*) {
  const auto* h = reinterpret_cast<const uint8_t*>(header.data());
  const uint8_t type = h[3];
  const uint8_t flags = h[4];
  const uint32_t id = Be32(h + 5) & 0x7fffffff;
  if (type == kRstStream && !TakeReset()) {
    // Rapid reset: neither this reset nor anything after it reaches gRPC.
    failed_ = true;
    resets_spent_ = true;
    const std::string_view debug = options_.resets_limit_name;
    PutFrameHeader(&injected_, static_cast<uint32_t>(8 + debug.size()), kGoAway,
                   0, 0);
    PutU32(&injected_, last_client_stream_);
    PutU32(&injected_, kEnhanceYourCalm);
    injected_.append(debug);
    return;
  }
  to_server->append(header);
  if (type == kContinuation && (flags & kEndHeaders) != 0) {
    header_block_ends_ = true;
  }
  if (type == kHeaders) {
    if (id > last_client_stream_ && (id & 1) == 1) {
      last_client_stream_ = id;  // opens a stream
      // The header block still goes to gRPC (its HPACK state must see
      // it); a refused stream is reset right after it.
      if (!OpenStream(id)) {
        header_block_ends_ = (flags & kEndHeaders) != 0;
        return;
      }
      if ((flags & kEndStream) == 0) {
        streams_.try_emplace(id);
        if (streams_.size() > options_.max_streams) {
          failed_ = true;
        }
      }
    } else if ((flags & kEndStream) != 0) {
      streams_.erase(id);  // trailers: nothing more from the client
    }
  } else if (type == kRstStream) {
    streams_.erase(id);
    CloseStream(id);
  }
}

void H2RequestGuard::OnClientData(uint32_t stream_id, uint8_t flags,
                                  std::string_view frame,
                                  std::string* to_server, std::string*) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    to_server->append(frame);  // no open stream: gRPC drops it
    return;
  }
  std::string_view data = frame.substr(kFrameHeader);
  const auto length = static_cast<uint32_t>(data.size());
  if ((flags & kPadded) != 0) {
    const size_t pad = data.empty() ? 0 : static_cast<uint8_t>(data.front());
    if (data.empty() || pad + 1 > data.size()) {
      passthrough_ = true;  // malformed: gRPC closes the connection
      to_server->append(frame);
      return;
    }
    data = data.substr(1, data.size() - 1 - pad);
  }
  if (const uint64_t declared = Walk(it->second, data); declared > 0) {
    if (length > 0) {
      PutWindowUpdate(&injected_, length);  // the dropped frame's share
    }
    Refuse(stream_id, it->second, declared, to_server);
    streams_.erase(it);
    return;
  }
  to_server->append(frame);
  if ((flags & kEndStream) != 0) {
    streams_.erase(it);
  }
}

uint64_t H2RequestGuard::Walk(Stream& s, std::string_view data) {
  uint64_t refused = 0;
  s.messages.Read(data, [&](uint8_t, uint32_t length) {
    if (length > options_.max_message_bytes) {
      refused = length;
      return false;
    }
    return true;
  });
  return refused;
}

void H2RequestGuard::Refuse(uint32_t stream_id, Stream& s, uint64_t declared,
                            std::string* to_server) {
  ++refused_;
  largest_refused_ = std::max(largest_refused_, declared);
  RefuseStream(stream_id, s.server_headers,
               absl::StrCat("request message of ", declared,
                            " bytes is larger than ", options_.limit_name, " (",
                            options_.max_message_bytes, " bytes)"),
               to_server);
}

void H2RequestGuard::RefuseStream(uint32_t stream_id, bool server_headers,
                                  const std::string& message,
                                  std::string* to_server) {
  if (to_server != nullptr) {
    PutRstStream(to_server, stream_id, kCancel);
  }
  CloseStream(stream_id);
  std::string block;
  if (!server_headers) {
    block.push_back(static_cast<char>(0x88));  // :status 200 (static index 8)
    PutLiteral(&block, "content-type", "application/grpc");
  }
  PutLiteral(&block, "grpc-status", "8");
  // ASCII without '%': needs no percent-encoding.
  PutLiteral(&block, "grpc-message", message);
  PutFrameHeader(&injected_, static_cast<uint32_t>(block.size()), kHeaders,
                 kEndStream | kEndHeaders, stream_id);
  injected_.append(block);
  PutRstStream(&injected_, stream_id, kNoError);
}

void H2RequestGuard::FromServer(std::string_view bytes,
                                std::string* to_client) {
  while (!bytes.empty()) {
    if (server_payload_left_ > 0) {
      const size_t n = std::min<size_t>(server_payload_left_, bytes.size());
      if (server_settings_ && settings_.size() < kSettingsKept) {
        settings_.append(
            bytes.substr(0, std::min(n, kSettingsKept - settings_.size())));
      }
      to_client->append(bytes.substr(0, n));
      server_payload_left_ -= static_cast<uint32_t>(n);
      bytes.remove_prefix(n);
      if (server_payload_left_ > 0) {
        break;
      }
    } else {
      const size_t n =
          std::min<size_t>(kFrameHeader - server_header_have_, bytes.size());
      std::memcpy(server_header_ + server_header_have_, bytes.data(), n);
      server_header_have_ = static_cast<uint8_t>(server_header_have_ + n);
      to_client->append(bytes.substr(0, n));
      bytes.remove_prefix(n);
      if (server_header_have_ < kFrameHeader) {
        break;
      }
      server_header_have_ = 0;
      OnServerFrameHeader(server_header_);
      server_payload_left_ = Be24(server_header_);
      if (server_payload_left_ > 0) {
        continue;
      }
    }
    // A whole frame went by.
    if (server_settings_) {
      for (size_t i = 0; i + 6 <= settings_.size(); i += 6) {
        const auto* e = reinterpret_cast<const uint8_t*>(settings_.data() + i);
        const uint16_t id = static_cast<uint16_t>((e[0] << 8) | e[1]);
        if (id == kSettingsMaxFrameSize) {
          max_frame_ = std::clamp(Be32(e + 2), max_frame_, kLargestMaxFrame);
        }
      }
      settings_.clear();
      server_settings_ = false;
    }
    server_started_ = true;
    FlushInjected(to_client);
  }
}

void H2RequestGuard::OnServerFrameHeader(const uint8_t* h) {
  const uint8_t type = h[3];
  const uint8_t flags = h[4];
  const uint32_t id = Be32(h + 5) & 0x7fffffff;
  if (type == kSettings && (flags & kAck) == 0 && id == 0) {
    server_settings_ = true;
    return;
  }
  if (id == 0) {
    return;
  }
  if (type == kRstStream ||
      ((type == kHeaders || type == kData) && (flags & kEndStream) != 0)) {
    CloseStream(id);
  }
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    return;
  }
  if (type == kRstStream ||
      ((type == kHeaders || type == kData) && (flags & kEndStream) != 0)) {
    streams_.erase(it);  // the call is over
  } else if (type == kHeaders) {
    it->second.server_headers = true;
  }
}

void H2RequestGuard::FlushInjected(std::string* to_client) {
  if (injected_.empty() || !server_started_ || server_header_have_ != 0 ||
      server_payload_left_ != 0) {
    return;
  }
  to_client->append(injected_);
  injected_.clear();
}

}  // namespace aside::server
