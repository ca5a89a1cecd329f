// The per-call ORCA report a backend sends in a call's trailing metadata
// (gRFC A51: the `endpoint-load-metrics-bin` entry, a serialised
// xds.data.orca.v3.OrcaLoadReport), read without protobuf: the stub reads
// it on the call's completion path, where linking and running a generic
// parser for four doubles would cost more than the call's bookkeeping.
//
// Wire format (protobuf encoding): the fields read are cpu_utilization (1),
// rps_fractional (6), eps (7) and application_utilization (9), all doubles
// (wire type 1), and the named_metrics (8) entries "rif" and "latency_ms"
// (map entries: key 1, value 2); every other field of any wire type is
// skipped, the last occurrence of a field wins (protobuf's rule for
// scalars). Pure and thread-compatible.
#ifndef ASIDE_LIB_LOAD_ORCA_REPORT_H_
#define ASIDE_LIB_LOAD_ORCA_REPORT_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "lib/load/orca_weight.h"

namespace aside {

// The trailing metadata key of per-call reports (binary: gRPC C++ hands
// its value over decoded).
inline constexpr absl::string_view kOrcaTrailerKey =
    "endpoint-load-metrics-bin";

// The fields of `bytes` that weights read; none when `bytes` is not a
// well-formed message (truncated, a bad wire type or length), or a field
// read is not finite or negative. Values are not bounded above here: the
// receiver bounds them.
std::optional<OrcaLoad> ParseOrcaLoadReport(absl::string_view bytes);

}  // namespace aside

#endif  // ASIDE_LIB_LOAD_ORCA_REPORT_H_
