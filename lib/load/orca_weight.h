// Weights from backends' own load reports (ORCA), as gRPC's
// weighted_round_robin computes them (gRFC A58, "Weighted Round Robin LB
// Policy"), so that a weight the server publishes is the weight a modern
// gRPC client would have computed from the same reports.
//
// Per report: utilisation is the application utilisation when it is > 0,
// else the CPU utilisation; the report's weight is
//   qps / (utilisation + eps / qps * error_utilization_penalty)
// and a report with qps or utilisation 0 (or anything not finite) carries
// no weight and is ignored, as A58 ignores it. An endpoint's weight is its
// last report's, used only once it has reported for `blackout` without a gap
// of `expiration`, and dropped `expiration` after its last report (then the
// blackout starts again with the next report).
//
// A table's weights: endpoints with a usable weight keep it, the others get
// the mean of the usable ones (A58), and all are scaled so that the largest
// is kOrcaWeightScale (integers, at least 1). With no usable weight at all,
// nothing is returned and the configured weights stay.
//
// Pure, no clock of its own (times are monotonic nanoseconds given by the
// caller), not thread-safe: the owner serialises.
#ifndef ASIDE_LIB_LOAD_ORCA_WEIGHT_H_
#define ASIDE_LIB_LOAD_ORCA_WEIGHT_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace aside {

// The fields of one ORCA report that weights read.
struct OrcaLoad {
  double cpu_utilization = 0;
  double application_utilization = 0;
  double qps = 0;
  double eps = 0;
  // Named metrics the prequal policy reads (lib/policies/prequal.h): the
  // backend's requests in flight ("rif") and its latency estimate in
  // milliseconds ("latency_ms"); negative when not reported.
  double rif = -1;
  double latency_ms = -1;

  friend bool operator==(const OrcaLoad&, const OrcaLoad&) = default;
};

struct OrcaWeightParams {
  int64_t blackout_nanos = 10'000'000'000;     // 10 s
  int64_t expiration_nanos = 180'000'000'000;  // 3 min
  double error_utilization_penalty = 1.0;
};

// The utilisation weights read: application if > 0, else CPU.
double OrcaUtilization(const OrcaLoad& load);
// A58's weight of one report; 0 when it carries none.
double OrcaReportWeight(const OrcaLoad& load, double error_utilization_penalty);

// One endpoint's weight state.
class OrcaEndpointWeight {
 public:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::min();

  // A report received at `now`.
  void OnReport(const OrcaLoad& load, int64_t now,
                const OrcaWeightParams& params);
  // The usable weight at `now`: 0 during the blackout and after expiry.
  double Weight(int64_t now, const OrcaWeightParams& params) const;
  // When Weight changes without a report (the blackout ends or the weight
  // expires), after `now`; none when it will not.
  std::optional<int64_t> NextChange(int64_t now,
                                    const OrcaWeightParams& params) const;

 private:
  double weight_ = 0;
  int64_t non_empty_since_ = kNever;
  int64_t last_update_ = kNever;
};

inline constexpr uint32_t kOrcaWeightScale = 1000;

// The table weights of endpoints whose A58 weights are `weights` (0: none
// usable); empty when none is usable.
std::vector<uint32_t> OrcaTableWeights(absl::Span<const double> weights);

}  // namespace aside

#endif  // ASIDE_LIB_LOAD_ORCA_WEIGHT_H_
