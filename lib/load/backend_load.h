// Mutable per-backend load state, kept outside the immutable tables so that
// it survives rebuilds. Every operation is a few relaxed atomics: no locks,
// no allocation.
//
// Three load models live here, each readable in O(1) on the pick path:
// - in-flight requests (p2c `pending`, and the (pending + 1) factor of
//   peak-EWMA);
// - peak-EWMA RTT (p2c `peak_ewma`, after Finagle and Tower): a sample
//   slower than the estimate replaces it at once; a faster one moves it
//   towards the sample with weight 1 - exp(-dt/tau), dt being the time since
//   the previous completion; between completions the estimate decays
//   towards zero as estimate * exp(-dt/tau), so a backend that was slow and
//   is no longer picked gets retried (Tower and Finagle decay it the same
//   way when they read it; here reading does not write). A backend without
//   samples costs `default_rtt`, decayed the same way from when this
//   process first saw it (as Tower's estimate starts at the default when
//   the endpoint is added), so that a new backend in a fleet faster than
//   the default is tried within tau * ln(default / fleet RTT) rather than
//   never; its first sample replaces the default.
// - latency EWMAs for least_time, time to first byte and to last byte:
//   e = alpha * sample + (1 - alpha) * e, the first sample taken as is;
//   read back toward the default latency with the time since the last
//   successful completion, d + (e - d) * exp(-age / 1 s), so an estimate
//   nobody refreshes is not frozen.
//
// - the backend's own load as it last reported it (prequal): requests in
//   flight at the backend (RIF) and its latency estimate, with when it was
//   reported and this process's own in-flight count then, so that the
//   calls this process sent since count on top of the report.
//
// Failed requests are counted; their latency may raise an estimate (a slow
// failure is news) but never lowers it, so a backend that fails fast does
// not look fast. The time of the last failure is kept (prequal holds a
// backend that failed as hot).
#ifndef ASIDE_LIB_LOAD_BACKEND_LOAD_H_
#define ASIDE_LIB_LOAD_BACKEND_LOAD_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace aside {

struct PolicyConfig;

namespace load_internal {

// exp(-x) for x >= 0, to 1e-7 relative (the packed estimate keeps 2^-17):
// 2^(-x log2 e) split into 2^n (exponent bits) and 2^f, f in [-0.5, 0.5],
// the latter a degree-5 polynomial fitted to 2^f (relative error 7.7e-8)
// evaluated in Estrin's form (a short dependency chain). Inline, a fraction
// of libm's exp.
inline double ExpNegative(double x) noexcept {
  if (x < 0.015625) {
    // The usual case (completions much closer together than tau): a cubic,
    // error below x^4 / 24 < 3e-9.
    return 1.0 - x * (1.0 - x * (0.5 - x * (1.0 / 6.0)));
  }
  const double y = -x * 1.4426950408889634;  // log2(e)
  if (!(y > -1000.0)) {
    return 0.0;  // also NaN
  }
  // Round to nearest with one conversion (y <= 0).
  const int64_t n = -static_cast<int64_t>(0.5 - y);
  const double f = y - static_cast<double>(n);
  const double f2 = f * f;
  const double p01 = 1.0000000710296986 + 0.6931469491613137 * f;
  const double p23 = 0.24022121753565218 + 0.055507426156320275 * f;
  const double p45 = 0.009675459745413454 + 0.001326697050099577 * f;
  const double p = p01 + f2 * (p23 + f2 * p45);
  const uint64_t bits = static_cast<uint64_t>(n + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// Nanoseconds from a packed peak-EWMA state's time to `now_nanos` (1024 ns
// ticks over 40 bits); 0 when the state is newer.
inline int64_t ElapsedNanos(uint64_t state, int64_t now_nanos) noexcept {
  constexpr uint64_t kMask = (uint64_t{1} << 40) - 1;
  const uint64_t then = state & kMask;
  const uint64_t now = (static_cast<uint64_t>(now_nanos) >> 10) & kMask;
  const uint64_t diff = (now - then) & kMask;
  if (diff >= (uint64_t{1} << 39)) {
    return 0;
  }
  return static_cast<int64_t>(diff << 10);
}

}  // namespace load_internal

// The parameters of the load models a group's policy reads, derived once
// per table (Table::load_model()) so that recording a completion does not
// look at the policy.
struct LoadModel {
  // Which estimates a completion updates (the others are left alone, so a
  // completion costs only what the policy reads).
  bool peak_ewma = true;
  bool latency_ewma = true;
  // Peak-EWMA: 1 / tau in 1/ns, and the RTT of a backend without samples.
  double inverse_decay_nanos = 1.0 / 10e9;
  double default_rtt_nanos = 30e6;
  // Least-time EWMA smoothing factor and the latency of a backend without
  // samples.
  double alpha = 0.3;
  double default_latency_nanos = 10e6;
  // Least-time: 1 / the time constant (1 s) in 1/ns with which an estimate
  // returns to the default when no completion updates it.
  double latency_inverse_decay_nanos = 1.0 / 1e9;

  // The model of `policy` (of its child for sticky and locality). Every
  // estimate is updated for policies that read none of them, so a policy
  // change finds warm estimates.
  static LoadModel For(const PolicyConfig& policy);
};

// A backend's load as it reported it, corrected by what this process sent
// since (BackendLoad::Reported).
struct ReportedLoad {
  // Requests in flight at the backend, plus this process's calls started
  // since the report (net of their completions), at least 0.
  double rif = 0;
  // The reported latency, scaled by (rif + 1) / (reported rif + 1) when
  // this process has calls in flight there beyond those it had then.
  double latency_nanos = 0;
  // Monotonic time of the report; 0 when there is none.
  int64_t at_nanos = 0;
};

// One finished request, as the caller saw it.
struct Completion {
  // Monotonic time (lib/clock.h) when the request finished.
  int64_t now_nanos = 0;
  // Start to last byte (completion).
  int64_t latency_nanos = 0;
  // Start to the first response message; < 0 when unknown.
  int64_t first_byte_nanos = -1;
  bool ok = true;
};

// Load of one backend of one group as seen by one process (a stub, or the
// server, which also merges reports from every stub into it). Thread-safe;
// every method is lock-free and allocation-free.
class BackendLoad {
 public:
  BackendLoad() = default;
  // `first_seen_nanos`: monotonic time (lib/clock.h) the backend appeared,
  // from which its default RTT decays; 0 keeps the default as it is.
  explicit BackendLoad(int64_t first_seen_nanos) noexcept
      : first_seen_nanos_(first_seen_nanos) {}
  BackendLoad(const BackendLoad&) = delete;
  BackendLoad& operator=(const BackendLoad&) = delete;

  // A request to the backend started.
  void Start() noexcept { counts_.fetch_add(1, std::memory_order_relaxed); }

  // A request started with Start() finished (counts only; no latency).
  void Finish(bool ok) noexcept {
    counts_.fetch_add(kFinishDelta, std::memory_order_relaxed);
    if (!ok) {
      failures_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // A request started with Start() finished: counts, and the estimates
  // `model` asks for. One atomic add for the counts (in flight and
  // requests share a word) and one compare-and-swap per estimate, retried
  // only when another thread updated it in between.
  void Finish(const Completion& completion, const LoadModel& model) noexcept;

  // Records a finished request without touching the in-flight count (load
  // reports merged from elsewhere).
  void Observe(const Completion& completion, const LoadModel& model) noexcept;

  // Requests in flight (Start() minus Finish(); Finish must follow Start).
  int64_t in_flight() const noexcept {
    // The low 24 bits, sign-extended.
    const uint64_t low =
        counts_.load(std::memory_order_relaxed) & kInFlightMask;
    return static_cast<int64_t>(low ^ kInFlightSign) -
           static_cast<int64_t>(kInFlightSign);
  }
  // Finished requests, a counter wrapping at 2^40: take differences modulo
  // 2^40 (RequestsSince).
  uint64_t requests() const noexcept {
    return counts_.load(std::memory_order_relaxed) >> kInFlightBits;
  }
  static uint64_t RequestsSince(uint64_t now, uint64_t before) noexcept {
    return (now - before) & ((uint64_t{1} << (64 - kInFlightBits)) - 1);
  }
  uint64_t failures() const noexcept {
    return failures_.load(std::memory_order_relaxed);
  }

  // Server-side picks that chose this backend (the Pick RPC; a stub's local
  // picks are not counted here, their requests arrive as load reports).
  // Read by the status page for picks per second.
  void CountPick() noexcept { picks_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t picks() const noexcept {
    return picks_.load(std::memory_order_relaxed);
  }

  // The peak-EWMA RTT estimate in ns, decayed to `now_nanos`; without a
  // sample yet, the model's default decayed from when the backend was
  // first seen.
  double PeakEwmaRtt(int64_t now_nanos, const LoadModel& model) const noexcept {
    const uint64_t s = peak_.load(std::memory_order_relaxed);
    if (s == 0) {
      if (first_seen_nanos_ <= 0 || now_nanos <= first_seen_nanos_) {
        return model.default_rtt_nanos;
      }
      return model.default_rtt_nanos *
             load_internal::ExpNegative(
                 static_cast<double>(now_nanos - first_seen_nanos_) *
                 model.inverse_decay_nanos);
    }
    const double elapsed =
        static_cast<double>(load_internal::ElapsedNanos(s, now_nanos));
    return UnpackPeakRtt(s) *
           load_internal::ExpNegative(elapsed * model.inverse_decay_nanos);
  }
  // PeakEwmaRtt() * (in-flight + 1): what p2c `peak_ewma` compares (before
  // dividing by the weight).
  double PeakEwmaCost(int64_t now_nanos,
                      const LoadModel& model) const noexcept {
    const int64_t pending = in_flight();
    return PeakEwmaRtt(now_nanos, model) *
           static_cast<double>((pending > 0 ? pending : 0) + 1);
  }
  // The backend's own load, from a response's per-call metrics, the fleet's
  // load stream or a probe, at monotonic time `now_nanos`: `rif` requests in
  // flight at the backend and its latency estimate. A report older than
  // the one kept is ignored. `own_excluded`: how many of this process's
  // calls in flight the report no longer counts (1 for the metrics a reply
  // carries, read before the call they came with is finished: the backend
  // counted after answering it).
  void Report(uint32_t rif, double latency_nanos, int64_t now_nanos,
              uint32_t own_excluded = 0) noexcept;
  // The last report, its RIF corrected by this process's in-flight change
  // since, counted `own_weight` times (other processes may send where this
  // one does, from the same kind of reports); at_nanos 0 when none was
  // made.
  ReportedLoad Reported(double own_weight = 1) const noexcept {
    ReportedLoad out;
    const int64_t at = report_nanos_.load(std::memory_order_relaxed);
    if (at == 0) {
      return out;
    }
    const uint64_t packed = report_.load(std::memory_order_relaxed);
    const int64_t own_then = static_cast<int64_t>(packed >> 32);
    const int64_t reported = report_rif_.load(std::memory_order_relaxed);
    const int64_t rif = std::max<int64_t>(
        0, reported +
               static_cast<int64_t>(
                   own_weight * static_cast<double>(in_flight() - own_then)));
    out.at_nanos = at;
    out.rif = static_cast<double>(rif);
    uint32_t bits = static_cast<uint32_t>(packed);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    out.latency_nanos = f;
    if (rif > reported) {
      // Calls sent since wait behind the reported ones: the latency grows
      // with the requests in flight.
      out.latency_nanos *=
          static_cast<double>(rif + 1) / static_cast<double>(reported + 1);
    }
    return out;
  }
  // Monotonic time of the last failed completion (0: none).
  int64_t last_failure_nanos() const noexcept {
    return failure_nanos_.load(std::memory_order_relaxed);
  }

  bool has_rtt_sample() const noexcept {
    return peak_.load(std::memory_order_relaxed) != 0;
  }

  // Whether a completion has set the last-byte EWMA (else it reads as the
  // model's default).
  bool has_last_byte_sample() const noexcept {
    return last_byte_.load(std::memory_order_relaxed) != kNoSample;
  }
  // Least-time EWMAs in ns; the model's default latency without samples.
  double LastByteEwma(const LoadModel& model) const noexcept {
    return Ewma(last_byte_, model);
  }
  double FirstByteEwma(const LoadModel& model) const noexcept {
    return Ewma(first_byte_, model);
  }
  // What least_time compares: the EWMA (last byte, or first byte with
  // `first_byte`) returned toward the default with the time since its last
  // update, times (in-flight + 1), so that calls sitting in a queue count
  // before they complete and an estimate nobody refreshes is tried again.
  double LeastTimeCost(int64_t now_nanos, const LoadModel& model,
                       bool first_byte) const noexcept {
    double e = Ewma(first_byte ? first_byte_ : last_byte_, model);
    const int64_t stamp = latency_stamp_.load(std::memory_order_relaxed);
    if (stamp != 0 && now_nanos > stamp) {
      const double d = model.default_latency_nanos;
      e = d + (e - d) * load_internal::ExpNegative(
                            static_cast<double>(now_nanos - stamp) *
                            model.latency_inverse_decay_nanos);
    }
    const int64_t pending = in_flight();
    return e * static_cast<double>((pending > 0 ? pending : 0) + 1);
  }

  // Peak-EWMA state packing, exposed for tests: 24 bits of RTT (a float32
  // without its sign and low 7 mantissa bits: relative precision 2^-17) and
  // 40 bits of time in 1024 ns ticks (wraps after 13 days; a backend whose
  // last completion is older than that may see its estimate revived, which
  // with tau <= 1 h is long decayed anyway).
  static constexpr int kTickShift = 10;  // see load_internal::ElapsedNanos
  static constexpr uint64_t kTickMask = (uint64_t{1} << 40) - 1;
  static uint64_t PackPeak(double rtt_nanos, int64_t now_nanos) noexcept;
  static double UnpackPeakRtt(uint64_t state) noexcept {
    const uint32_t bits = static_cast<uint32_t>((state >> 40) << 7);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }

 private:
  static constexpr uint64_t kNoSample = ~uint64_t{0};

  static double Ewma(const std::atomic<uint64_t>& cell,
                     const LoadModel& model) noexcept {
    const uint64_t bits = cell.load(std::memory_order_relaxed);
    if (bits == kNoSample) {
      return model.default_latency_nanos;
    }
    double v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
  static void UpdateEwma(std::atomic<uint64_t>& cell, double sample,
                         const LoadModel& model, bool ok) noexcept;
  void UpdatePeak(const Completion& completion,
                  const LoadModel& model) noexcept;
  // Failures and the estimates of one completion.
  void Estimate(const Completion& completion, const LoadModel& model) noexcept;

  // In flight (low 24 bits, two's complement: up to 8M concurrent
  // requests) and finished requests (high 40 bits): Finish() adds 2^24 - 1,
  // which takes one from the first and, through the borrow, adds one to the
  // second, in one atomic add.
  static constexpr int kInFlightBits = 24;
  static constexpr uint64_t kInFlightMask = (uint64_t{1} << kInFlightBits) - 1;
  static constexpr uint64_t kInFlightSign = uint64_t{1} << (kInFlightBits - 1);
  static constexpr uint64_t kFinishDelta = (uint64_t{1} << kInFlightBits) - 1;
  static constexpr uint64_t kObserveDelta = uint64_t{1} << kInFlightBits;
  std::atomic<uint64_t> counts_{0};
  std::atomic<uint64_t> failures_{0};
  const int64_t first_seen_nanos_ = 0;
  // Peak-EWMA (packed, see PackPeak); 0 = no sample yet.
  std::atomic<uint64_t> peak_{0};
  // Least-time EWMAs (double bits); kNoSample = no sample yet.
  std::atomic<uint64_t> last_byte_{kNoSample};
  std::atomic<uint64_t> first_byte_{kNoSample};
  // Monotonic time of the last update of either EWMA; 0 = none.
  std::atomic<int64_t> latency_stamp_{0};
  std::atomic<uint64_t> picks_{0};
  // Prequal: the last report's latency (float bits, low 32) and this
  // process's in-flight count then (high 32); its RIF; its time. Read
  // without a lock, a report may be seen half replaced by the next: each
  // field is some report's, which is as good for a load estimate.
  std::atomic<uint64_t> report_{0};
  std::atomic<uint32_t> report_rif_{0};
  std::atomic<int64_t> report_nanos_{0};
  std::atomic<int64_t> failure_nanos_{0};
};

}  // namespace aside

#endif  // ASIDE_LIB_LOAD_BACKEND_LOAD_H_
