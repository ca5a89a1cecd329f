#include "lib/load/orca_weight.h"

#include <algorithm>
#include <cmath>

namespace aside {

double OrcaUtilization(const OrcaLoad& load) {
  return load.application_utilization > 0 ? load.application_utilization
                                          : load.cpu_utilization;
}

double OrcaReportWeight(const OrcaLoad& load,
                        double error_utilization_penalty) {
  const double utilization = OrcaUtilization(load);
  if (!std::isfinite(load.qps) || !std::isfinite(utilization) ||
      !std::isfinite(load.eps) || load.qps <= 0 || utilization <= 0) {
    return 0;
  }
  double penalty = 0;
  if (load.eps > 0 && error_utilization_penalty > 0) {
    penalty = load.eps / load.qps * error_utilization_penalty;
  }
  const double weight = load.qps / (utilization + penalty);
  return std::isfinite(weight) && weight > 0 ? weight : 0;
}

void OrcaEndpointWeight::OnReport(const OrcaLoad& load, int64_t now,
                                  const OrcaWeightParams& params) {
  const double weight =
      OrcaReportWeight(load, params.error_utilization_penalty);
  if (weight == 0) {
    return;  // no signal: neither counts nor refreshes
  }
  if (non_empty_since_ == kNever ||
      now - last_update_ >= params.expiration_nanos) {
    non_empty_since_ = now;
  }
  last_update_ = now;
  weight_ = weight;
}

double OrcaEndpointWeight::Weight(int64_t now,
                                  const OrcaWeightParams& params) const {
  if (last_update_ == kNever || now - last_update_ >= params.expiration_nanos) {
    return 0;
  }
  if (params.blackout_nanos > 0 &&
      now - non_empty_since_ < params.blackout_nanos) {
    return 0;
  }
  return weight_;
}

std::optional<int64_t> OrcaEndpointWeight::NextChange(
    int64_t now, const OrcaWeightParams& params) const {
  if (last_update_ == kNever) {
    return std::nullopt;
  }
  const int64_t expires = last_update_ + params.expiration_nanos;
  if (expires <= now) {
    return std::nullopt;
  }
  const int64_t usable = non_empty_since_ + params.blackout_nanos;
  if (params.blackout_nanos > 0 && usable > now && usable < expires) {
    return usable;
  }
  return expires;
}

std::vector<uint32_t> OrcaTableWeights(absl::Span<const double> weights) {
  double sum = 0;
  double max = 0;
  size_t usable = 0;
  for (double w : weights) {
    if (w > 0) {
      sum += w;
      max = std::max(max, w);
      ++usable;
    }
  }
  if (usable == 0) {
    return {};
  }
  const double mean = sum / static_cast<double>(usable);
  std::vector<uint32_t> out;
  out.reserve(weights.size());
  for (double w : weights) {
    const double v = (w > 0 ? w : mean) / max * kOrcaWeightScale;
    out.push_back(static_cast<uint32_t>(
        std::clamp(std::lround(v), 1L, static_cast<long>(kOrcaWeightScale))));
  }
  return out;
}

}  // namespace aside
