#include "lib/load/backend_load.h"

#include <algorithm>

#include "absl/time/time.h"
#include "lib/policy_config.h"

namespace aside {
namespace {

inline bool StateIsNewer(uint64_t state, int64_t now_nanos) noexcept {
  const uint64_t then = state & BackendLoad::kTickMask;
  const uint64_t now =
      (static_cast<uint64_t>(now_nanos) >> BackendLoad::kTickShift) &
      BackendLoad::kTickMask;
  const uint64_t diff = (now - then) & BackendLoad::kTickMask;
  return diff >= (uint64_t{1} << 39);
}

inline double ToDouble(uint64_t bits) noexcept {
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

inline uint64_t ToBits(double v) noexcept {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

}  // namespace

LoadModel LoadModel::For(const PolicyConfig& policy) {
  const PolicyConfig* p = &policy;
  if (p->kind == PolicyKind::kSticky || p->kind == PolicyKind::kLocality) {
    p = &p->child_or_default();
  }
  LoadModel m;
  m.inverse_decay_nanos = 1.0 / absl::ToDoubleNanoseconds(p->p2c.decay);
  m.default_rtt_nanos = absl::ToDoubleNanoseconds(p->p2c.default_rtt);
  m.alpha = p->least_time.alpha;
  m.default_latency_nanos =
      absl::ToDoubleNanoseconds(p->least_time.default_latency);
  if (p->kind == PolicyKind::kP2c) {
    m.peak_ewma = p->p2c.load == P2cParams::Load::kPeakEwma;
    m.latency_ewma = false;
  } else if (p->kind == PolicyKind::kLeastTime ||
             p->kind == PolicyKind::kPrequal) {
    // prequal reads the last-byte EWMA when no report is fresh.
    m.peak_ewma = false;
    m.latency_ewma = true;
  }
  return m;
}

uint64_t BackendLoad::PackPeak(double rtt_nanos, int64_t now_nanos) noexcept {
  float f =
      rtt_nanos > 0 ? static_cast<float>(std::min(rtt_nanos, 3.0e38)) : 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  uint64_t code = (static_cast<uint64_t>(bits) + 0x40) >> 7;
  code = std::clamp<uint64_t>(code, 1, 0xffffff);
  const uint64_t tick =
      (static_cast<uint64_t>(now_nanos) >> kTickShift) & kTickMask;
  return (code << 40) | tick;
}

void BackendLoad::UpdatePeak(const Completion& c,
                             const LoadModel& model) noexcept {
  const double sample =
      static_cast<double>(c.latency_nanos > 0 ? c.latency_nanos : 0);
  uint64_t old = peak_.load(std::memory_order_relaxed);
  for (;;) {
    double next;
    int64_t stamp = c.now_nanos;
    if (old == 0) {
      // The first sample replaces the default (a failure only if slower).
      if (!c.ok && sample <= model.default_rtt_nanos) {
        return;
      }
      next = sample;
    } else {
      const double estimate = UnpackPeakRtt(old);
      if (sample > estimate) {
        next = sample;  // the peak: slower samples count at once
      } else if (!c.ok) {
        return;  // a fast failure never makes a backend look faster
      } else {
        const double elapsed =
            static_cast<double>(load_internal::ElapsedNanos(old, stamp));
        const double decay =
            load_internal::ExpNegative(elapsed * model.inverse_decay_nanos);
        next = estimate * decay + sample * (1.0 - decay);
      }
      if (StateIsNewer(old, stamp)) {
        // Keep the newer time so the estimate's clock never goes back.
        stamp = static_cast<int64_t>((old & kTickMask) << kTickShift);
      }
    }
    const uint64_t desired = PackPeak(next, stamp);
    if (peak_.compare_exchange_weak(old, desired, std::memory_order_relaxed,
                                    std::memory_order_relaxed)) {
      return;
    }
  }
}

void BackendLoad::UpdateEwma(std::atomic<uint64_t>& cell, double sample,
                             const LoadModel& model, bool ok) noexcept {
  uint64_t old = cell.load(std::memory_order_relaxed);
  for (;;) {
    double next;
    if (old == kNoSample) {
      // The first sample is taken as is (a failure only if slower than the
      // default).
      if (!ok && sample <= model.default_latency_nanos) {
        return;
      }
      next = sample;
    } else {
      const double current = ToDouble(old);
      if (!ok && sample <= current) {
        return;
      }
      next = model.alpha * sample + (1.0 - model.alpha) * current;
    }
    if (cell.compare_exchange_weak(old, ToBits(next), std::memory_order_relaxed,
                                   std::memory_order_relaxed)) {
      return;
    }
  }
}

void BackendLoad::Report(uint32_t rif, double latency_nanos, int64_t now_nanos,
                         uint32_t own_excluded) noexcept {
  if (now_nanos < report_nanos_.load(std::memory_order_relaxed)) {
    return;
  }
  const float f = static_cast<float>(std::clamp(
      std::isfinite(latency_nanos) ? latency_nanos : 0.0, 0.0, 3.0e38));
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const int64_t own = std::clamp<int64_t>(
      in_flight() - static_cast<int64_t>(own_excluded), 0, 0x7fffffff);
  report_.store(static_cast<uint64_t>(own) << 32 | bits,
                std::memory_order_relaxed);
  report_rif_.store(rif, std::memory_order_relaxed);
  report_nanos_.store(now_nanos, std::memory_order_relaxed);
}

void BackendLoad::Observe(const Completion& c,
                          const LoadModel& model) noexcept {
  counts_.fetch_add(kObserveDelta, std::memory_order_relaxed);
  Estimate(c, model);
}

void BackendLoad::Estimate(const Completion& c,
                           const LoadModel& model) noexcept {
  if (!c.ok) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    if (c.now_nanos > failure_nanos_.load(std::memory_order_relaxed)) {
      failure_nanos_.store(c.now_nanos, std::memory_order_relaxed);
    }
  }
  if (model.peak_ewma) {
    UpdatePeak(c, model);
  }
  if (model.latency_ewma) {
    if (c.ok && c.now_nanos > latency_stamp_.load(std::memory_order_relaxed)) {
      latency_stamp_.store(c.now_nanos, std::memory_order_relaxed);
    }
    UpdateEwma(last_byte_,
               static_cast<double>(c.latency_nanos > 0 ? c.latency_nanos : 0),
               model, c.ok);
    if (c.first_byte_nanos >= 0) {
      UpdateEwma(first_byte_, static_cast<double>(c.first_byte_nanos), model,
                 c.ok);
    }
  }
}

void BackendLoad::Finish(const Completion& c, const LoadModel& model) noexcept {
  counts_.fetch_add(kFinishDelta, std::memory_order_relaxed);
  Estimate(c, model);
}

}  // namespace aside
