#include "lib/load/backend_load.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "lib/clock.h"
#include "lib/policy_config.h"

namespace aside {
namespace {

constexpr double kMs = 1e6;
constexpr double kPrecision = 1e-5;  // the packed estimate keeps 17 bits

LoadModel PeakModel(absl::Duration decay = absl::Seconds(10)) {
  PolicyConfig c;
  c.kind = PolicyKind::kP2c;
  c.p2c.load = P2cParams::Load::kPeakEwma;
  c.p2c.decay = decay;
  return LoadModel::For(c);
}

Completion Done(const FakeClock& clock, double latency_ms, bool ok = true,
                double first_byte_ms = -1) {
  Completion c;
  c.now_nanos = clock.NowNanos();
  c.latency_nanos = static_cast<int64_t>(latency_ms * kMs);
  c.first_byte_nanos =
      first_byte_ms < 0 ? -1 : static_cast<int64_t>(first_byte_ms * kMs);
  c.ok = ok;
  return c;
}

TEST(LoadModelTest, FollowsThePolicy) {
  PolicyConfig p2c;
  p2c.kind = PolicyKind::kP2c;
  p2c.p2c.decay = absl::Seconds(4);
  p2c.p2c.default_rtt = absl::Milliseconds(7);
  LoadModel m = LoadModel::For(p2c);
  EXPECT_FALSE(m.peak_ewma);  // pending reads only the in-flight count
  EXPECT_FALSE(m.latency_ewma);
  p2c.p2c.load = P2cParams::Load::kPeakEwma;
  m = LoadModel::For(p2c);
  EXPECT_TRUE(m.peak_ewma);
  EXPECT_DOUBLE_EQ(m.inverse_decay_nanos, 1.0 / 4e9);
  EXPECT_DOUBLE_EQ(m.default_rtt_nanos, 7e6);

  PolicyConfig sticky;
  sticky.kind = PolicyKind::kSticky;
  auto child = std::make_shared<PolicyConfig>();
  child->kind = PolicyKind::kLeastTime;
  child->least_time.alpha = 0.5;
  sticky.child = child;
  m = LoadModel::For(sticky);
  EXPECT_FALSE(m.peak_ewma);
  EXPECT_TRUE(m.latency_ewma);
  EXPECT_DOUBLE_EQ(m.alpha, 0.5);
}

TEST(BackendLoadTest, CountsShareOneWordWithoutMixingUp) {
  const LoadModel model;
  BackendLoad load;
  for (int i = 0; i < 3; ++i) {
    load.Start();
  }
  EXPECT_EQ(load.in_flight(), 3);
  EXPECT_EQ(load.requests(), 0u);
  load.Finish(true);
  EXPECT_EQ(load.in_flight(), 2);
  EXPECT_EQ(load.requests(), 1u);
  Completion c;
  c.ok = false;
  load.Observe(c, model);  // merged from elsewhere: not in flight here
  EXPECT_EQ(load.in_flight(), 2);
  EXPECT_EQ(load.requests(), 2u);
  EXPECT_EQ(load.failures(), 1u);
  load.Finish(c, model);
  load.Finish(c, model);
  EXPECT_EQ(load.in_flight(), 0);
  EXPECT_EQ(load.requests(), 4u);
  EXPECT_EQ(load.failures(), 3u);
  // The counter wraps at 2^40; differences are taken modulo that.
  EXPECT_EQ(BackendLoad::RequestsSince(5, (uint64_t{1} << 40) - 3), 8u);
}

TEST(BackendLoadTest, PackedEstimateKeepsSeventeenBits) {
  for (double rtt : {1.0, 999.0, 30e6, 123456789.0, 7.5e10}) {
    const uint64_t s = BackendLoad::PackPeak(rtt, 123456789);
    EXPECT_NEAR(BackendLoad::UnpackPeakRtt(s), rtt, rtt * 1e-5) << rtt;
  }
}

TEST(BackendLoadTest, NewBackendCostsTheDefaultUntilItsFirstSample) {
  FakeClock clock;
  const LoadModel model = PeakModel();
  BackendLoad load;
  EXPECT_FALSE(load.has_rtt_sample());
  EXPECT_DOUBLE_EQ(load.PeakEwmaRtt(clock.NowNanos(), model), 30 * kMs);
  clock.Advance(absl::Seconds(100));  // the default does not decay
  EXPECT_DOUBLE_EQ(load.PeakEwmaRtt(clock.NowNanos(), model), 30 * kMs);
  load.Start();
  load.Finish(Done(clock, 12), model);
  EXPECT_TRUE(load.has_rtt_sample());
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), 12 * kMs,
              12 * kMs * kPrecision);
}

TEST(BackendLoadTest, PeakEwmaFollowsItsDefinition) {
  FakeClock clock;
  const double tau = 10e9;
  const LoadModel model = PeakModel(absl::Seconds(10));
  BackendLoad load;
  load.Start();
  load.Finish(Done(clock, 20), model);

  // A slower sample replaces the estimate at once.
  clock.Advance(absl::Seconds(1));
  load.Start();
  load.Finish(Done(clock, 100), model);
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), 100 * kMs,
              100 * kMs * kPrecision);

  // Between completions the estimate decays towards zero: e * exp(-dt/tau).
  clock.Advance(absl::Seconds(5));
  const double d = std::exp(-5e9 / tau);
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), 100 * kMs * d,
              100 * kMs * kPrecision);

  // Long idle: decayed to (almost) nothing, without overflow.
  EXPECT_LT(load.PeakEwmaRtt(clock.NowNanos() + 3'600'000'000'000, model),
            1e-100);
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos() + 20'000'000'000, model),
              100 * kMs * std::exp(-2.5), 100 * kMs * kPrecision);

  // A faster sample moves it towards the sample with weight 1 - exp(-dt/tau).
  load.Start();
  load.Finish(Done(clock, 10), model);
  const double expected = 100 * kMs * d + 10 * kMs * (1 - d);
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), expected,
              expected * kPrecision);

  // Cost multiplies by (in-flight + 1).
  load.Start();
  load.Start();
  EXPECT_NEAR(load.PeakEwmaCost(clock.NowNanos(), model), 3 * expected,
              3 * expected * kPrecision);
  EXPECT_EQ(load.in_flight(), 2);
}

TEST(BackendLoadTest, FailuresNeverMakeABackendLookFaster) {
  FakeClock clock;
  const LoadModel model = PeakModel();
  BackendLoad load;
  load.Start();
  load.Finish(Done(clock, 50), model);
  load.Start();
  load.Finish(Done(clock, 1, /*ok=*/false), model);
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), 50 * kMs,
              50 * kMs * kPrecision);
  load.Start();
  load.Finish(Done(clock, 900, /*ok=*/false), model);
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), 900 * kMs,
              900 * kMs * kPrecision);
  EXPECT_EQ(load.requests(), 3u);
  EXPECT_EQ(load.failures(), 2u);
  EXPECT_EQ(load.in_flight(), 0);
}

TEST(BackendLoadTest, ACompletionStampedEarlierKeepsTheNewerTime) {
  FakeClock clock;
  const LoadModel model = PeakModel();
  BackendLoad load;
  load.Finish(Done(clock, 40), model);
  Completion late = Done(clock, 10);
  late.now_nanos -= 2'000'000'000;  // another thread's older clock reading
  load.Finish(late, model);
  // No decay (elapsed counts as 0): the sample has no weight.
  EXPECT_NEAR(load.PeakEwmaRtt(clock.NowNanos(), model), 40 * kMs,
              40 * kMs * kPrecision);
}

TEST(BackendLoadTest, LatencyEwmaConvergesAsDefined) {
  FakeClock clock;
  PolicyConfig c;
  c.kind = PolicyKind::kLeastTime;
  c.least_time.alpha = 0.3;
  c.least_time.default_latency = absl::Milliseconds(5);
  const LoadModel model = LoadModel::For(c);
  BackendLoad load;
  EXPECT_DOUBLE_EQ(load.LastByteEwma(model), 5 * kMs);
  EXPECT_DOUBLE_EQ(load.FirstByteEwma(model), 5 * kMs);
  load.Finish(Done(clock, 100, true, 40), model);
  EXPECT_DOUBLE_EQ(load.LastByteEwma(model), 100 * kMs);  // first: as is
  EXPECT_DOUBLE_EQ(load.FirstByteEwma(model), 40 * kMs);
  double expected = 100 * kMs;
  for (int k = 1; k <= 20; ++k) {
    load.Finish(Done(clock, 10), model);  // first byte unknown
    expected = 0.3 * 10 * kMs + 0.7 * expected;
    ASSERT_NEAR(load.LastByteEwma(model), expected, 1e-6 * expected) << k;
    // Closed form: 10 + 90 * 0.7^k ms.
    ASSERT_NEAR(load.LastByteEwma(model), (10 + 90 * std::pow(0.7, k)) * kMs,
                1e-3);
  }
  EXPECT_DOUBLE_EQ(load.FirstByteEwma(model), 40 * kMs);
}

TEST(BackendLoadTest, ConcurrentCompletionsLoseNothing) {
  const LoadModel model;  // every estimate updated
  BackendLoad load;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        load.Start();
        Completion c;
        c.now_nanos = 1'000'000'000 + i * 1000;
        c.latency_nanos = 1'000'000 * (1 + (i + t) % 7);
        c.first_byte_nanos = c.latency_nanos / 2;
        c.ok = i % 10 != 0;
        load.Finish(c, model);
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(load.in_flight(), 0);
  EXPECT_EQ(load.requests(), uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(load.failures(), uint64_t{kThreads} * kPerThread / 10);
  const double e = load.LastByteEwma(model);
  EXPECT_GE(e, 1e6);
  EXPECT_LE(e, 7e6);
}

}  // namespace
}  // namespace aside
