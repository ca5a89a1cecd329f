// Watch's wire form of a group's table: a full table and the delta from the
// table published before it, each serialized at most once per generation
// (the full table only when a subscriber needs it) and shared (as
// reference-counted byte buffers) by every subscriber.
#ifndef ASIDE_SERVER_TABLE_ENCODING_H_
#define ASIDE_SERVER_TABLE_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/call_once.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/table.h"

namespace aside::server {

// Shared, immutable once made (full() serialises on first use, once, under
// its own once_flag): any number of threads may read one.
class EncodedUpdate {
 public:
  EncodedUpdate(std::shared_ptr<const Table> table, std::string server_id)
      : table_(std::move(table)), server_id_(std::move(server_id)) {}

  uint64_t generation = 0;
  // Generation of the table the delta applies to (0: no delta).
  uint64_t base_generation = 0;
  // GroupUpdate{delta}, present only when smaller than the full table.
  std::optional<grpc::ByteBuffer> delta;
  size_t delta_bytes = 0;

  // GroupUpdate{full}. Serialised when first asked for: a generation that
  // every subscriber takes as a delta never pays for the whole table.
  const grpc::ByteBuffer& full() const;
  size_t full_bytes() const;

 private:
  friend std::shared_ptr<const EncodedUpdate> EncodeUpdate(
      const Table* previous, const std::shared_ptr<const Table>& current,
      const std::string& server_id);
  void EncodeFull() const;

  const std::shared_ptr<const Table> table_;
  const std::string server_id_;
  mutable absl::once_flag full_once_;
  mutable grpc::ByteBuffer full_;
  mutable size_t full_bytes_ = 0;
};

// Fills `delta` with what changed from `previous` to `current` (same group).
void MakeDelta(const Table& previous, const Table& current,
               v1::TableDelta* delta);

// Encodes `current`'s delta from `previous` (if given) and, when needed to
// tell whether the delta is the smaller, the full table; `server_id` goes
// into every update.
std::shared_ptr<const EncodedUpdate> EncodeUpdate(
    const Table* previous, const std::shared_ptr<const Table>& current,
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
