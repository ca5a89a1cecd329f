// Watch's wire form of a group's table: a full table and the delta from the
// table published before it, each serialized once per generation and shared
// (as reference-counted byte buffers) by every subscriber.
#ifndef ASIDE_SERVER_TABLE_ENCODING_H_
#define ASIDE_SERVER_TABLE_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "aside/v1/lookaside.pb.h"
#include "lib/table.h"

namespace aside::server {

struct EncodedUpdate {
  uint64_t generation = 0;
  // Generation of the table the delta applies to (0: no delta).
  uint64_t base_generation = 0;
  // GroupUpdate{full}.
  grpc::ByteBuffer full;
  // GroupUpdate{delta}, present only when smaller than `full`.
  std::optional<grpc::ByteBuffer> delta;
  size_t full_bytes = 0;
  size_t delta_bytes = 0;
};

// Fills `delta` with what changed from `previous` to `current` (same group).
void MakeDelta(const Table& previous, const Table& current,
               v1::TableDelta* delta);

// Encodes `current` (and its delta from `previous`, if given); `server_id`
// goes into every update.
std::shared_ptr<const EncodedUpdate> EncodeUpdate(const Table* previous,
                                                  const Table& current,
                                                  const std::string& server_id);

// GroupUpdate{removed} for a deleted group.
grpc::ByteBuffer EncodeRemoved(const std::string& group, uint64_t generation,
                               const std::string& reason,
                               const std::string& server_id);

// A delta from `generation` to itself: tells a resuming subscriber that
// what it holds is current.
grpc::ByteBuffer EncodeUnchanged(const std::string& group, uint64_t generation,
                                 const std::string& server_id);

grpc::ByteBuffer ToByteBuffer(const google::protobuf::Message& message);

}  // namespace aside::server

#endif  // ASIDE_SERVER_TABLE_ENCODING_H_
