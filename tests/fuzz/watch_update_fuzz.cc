// What a stub takes from a server it watches: a sequence of
// length-delimited aside.v1.GroupUpdate messages (full tables, deltas,
// removals) folded into one WatchedTable, as the watch loop does. Nothing a
// server sends may crash the stub; a table that is taken must be pickable.
#include <google/protobuf/io/coded_stream.h>

#include <cstddef>
#include <cstdint>

#include "aside/v1/lookaside.pb.h"
#include "client/watched_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  aside::LoadTracker loads;
  aside::WatchedTable table("fuzz", &loads);
  for (int i = 0; i < 64; ++i) {
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) {
      break;
    }
    const auto limit = in.PushLimit(static_cast<int>(length));
    aside::v1::GroupUpdate update;
    if (!update.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
      break;
    }
    in.PopLimit(limit);
    table.Apply(update);
    if (const aside::TableConstPtr& t = table.table(); t != nullptr) {
      for (uint32_t m = 0; m < t->size(); ++m) {
        (void)t->member(m).backend.address.size();
      }
    }
  }
  return 0;
}
