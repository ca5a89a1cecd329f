// probe_load: how much the health prober costs and how fast it can go,
// against a bare Boost.Asio connect loop measured in the same run.
//
//   probe_load [--targets=1000,10000] [--seconds=10] [--saturate_seconds=2]
//              [--rounds=5] [--concurrency=64] [--json=FILE]
//
// Setup: one listening socket per target on distinct loopback addresses
// (127.1.1.1, 127.1.1.2, ... each on an ephemeral port), served by one
// epoll thread that accepts and closes. Nothing leaves the machine.
//
// 1. Saturated, `rounds` times, alternating so both sides see the same
//    machine (it may be shared):
//    - bare: one thread keeps `concurrency` Asio connects in flight (open,
//      SO_LINGER 0, async_connect, close: what a tcp probe does), round
//      robin over all targets, for saturate_seconds;
//    - prober: a HealthRegistry with max_concurrent_probes = concurrency
//      probes every target with a 1 ms interval (far more than it can
//      serve) for saturate_seconds after a 1 s warm-up.
//    Reported: the medians of the rates (probes/s from aside_probes_total)
//    and of the CPU per connect or probe, and their ratios. The per-CPU
//    rate (1 / CPU per probe) is what a dedicated core would reach; the
//    plain rate also depends on how much CPU the machine gives the thread.
// 2. Steady, for each target count: the registry probes every target at a
//    1 s interval (5 % jitter, the defaults otherwise); after a 3 s warm-up,
//    the prober thread's CPU as a fraction of one core in 1 s windows over
//    `seconds` (median and range), against two floors: the saturated bare
//    loop's CPU per connect times the probe rate, and a bare loop that
//    starts the same connects in the same 10 ms batches (paced).
//
// CPU is the thread's CPU clock (user + system, which for loopback also
// carries the kernel's work on the accepting side of the handshake).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/command_line.h"
#include "server/health/health_registry.h"

ABSL_FLAG(std::vector<std::string>, targets,
          std::vector<std::string>({"1000", "10000"}),
          "target counts to measure (1..60000 each)");
ABSL_FLAG(double, seconds, 10, "measured time per phase");
ABSL_FLAG(double, saturate_seconds, 2, "time of the saturation phase");
ABSL_FLAG(int, rounds, 5, "rounds per target count");
ABSL_FLAG(int, concurrency, 64, "the prober's concurrency cap");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");

namespace aside::bench {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using server::HealthCheckSpec;
using server::HealthHandle;
using server::HealthRegistry;

constexpr char kUsage[] =
    "usage: probe_load [--targets=1000,10000] [--seconds=10] "
    "[--saturate_seconds=2] [--rounds=5] [--concurrency=64] [--json=FILE]\n";

struct Flags {
  std::vector<int> targets = {1000, 10000};
  double seconds = 10;
  double saturate_seconds = 2;
  int rounds = 5;
  int concurrency = 64;
  std::string json;
};

bool ParseFlags(int argc, char** argv, Flags& flags) {
  // bench/run.sh passes Google Benchmark flags to every tool: ignored.
  if (absl::StatusOr<std::vector<std::string>> args = ParseCommandLine(
          argc, argv, {.usage = kUsage, .ignored_prefixes = {"--benchmark_"}});
      !args.ok()) {
    std::fprintf(stderr, "probe_load: %s\n",
                 std::string(args.status().message()).c_str());
    return false;
  }
  flags.targets.clear();
  for (const std::string& part : absl::GetFlag(FLAGS_targets)) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 60000) return false;
    flags.targets.push_back(n);
  }
  flags.seconds = absl::GetFlag(FLAGS_seconds);
  flags.saturate_seconds = absl::GetFlag(FLAGS_saturate_seconds);
  flags.rounds = absl::GetFlag(FLAGS_rounds);
  flags.concurrency = absl::GetFlag(FLAGS_concurrency);
  flags.json = absl::GetFlag(FLAGS_json);
  return flags.rounds >= 1 && flags.concurrency >= 1;
}

double ThreadCpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double WallSeconds() { return MonotonicNanos() * 1e-9; }

// Listening sockets on 127.0.1.1, 127.0.1.2, ... served by one epoll
// thread that accepts and closes.
class Listeners {
 public:
  ~Listeners() { Stop(); }

  bool Start(int count) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    stop_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = stop_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, stop_, &ev);
    for (int i = 0; i < count; ++i) {
      const std::string ip = absl::StrCat(
          "127.", 1 + i / 62500, ".", 1 + (i / 250) % 250, ".", 1 + i % 250);
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
      if (fd < 0 ||
          bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
          listen(fd, 4096) != 0) {
        std::fprintf(stderr, "listen on %s: %s\n", ip.c_str(),
                     std::strerror(errno));
        return false;
      }
      socklen_t len = sizeof(addr);
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      addresses_.push_back(absl::StrCat(ip, ":", ntohs(addr.sin_port)));
      endpoints_.emplace_back(asio::ip::make_address_v4(ip),
                              ntohs(addr.sin_port));
      ev.data.fd = fd;
      epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
      fds_.push_back(fd);
    }
    thread_ = std::thread([this] { Loop(); });
    return true;
  }

  void Stop() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      if (write(stop_, &one, sizeof(one)) < 0) {
        std::perror("eventfd");
      }
      thread_.join();
    }
    for (int fd : fds_) close(fd);
    fds_.clear();
    if (epoll_ >= 0) close(epoll_);
    if (stop_ >= 0) close(stop_);
    epoll_ = stop_ = -1;
  }

  const std::vector<std::string>& addresses() const { return addresses_; }
  const std::vector<tcp::endpoint>& endpoints() const { return endpoints_; }
  uint64_t accepted() const { return accepted_.load(); }

 private:
  void Loop() {
    pthread_setname_np(pthread_self(), "listeners");
    epoll_event events[256];
    for (;;) {
      const int n = epoll_wait(epoll_, events, 256, -1);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == stop_) return;
        for (;;) {
          const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
          if (c < 0) break;
          close(c);
          accepted_.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
  }

  int epoll_ = -1;
  int stop_ = -1;
  std::vector<int> fds_;
  std::vector<std::string> addresses_;
  std::vector<tcp::endpoint> endpoints_;
  std::thread thread_;
  std::atomic<uint64_t> accepted_{0};
};

struct Rate {
  double per_second = 0;
  double cpu_fraction = 0;  // of one core
  double cpu_us_per_op = 0;
  uint64_t errors = 0;
};

// What a tcp probe does, with nothing around it: `concurrency` connects in
// flight on one thread, each followed by an RST close and the next connect.
Rate BareConnectLoop(const std::vector<tcp::endpoint>& endpoints,
                     int concurrency, double seconds) {
  asio::io_context io;
  uint64_t done = 0;
  uint64_t errors = 0;
  size_t next = 0;
  bool stop = false;
  std::function<void()> start_one = [&] {
    auto socket = std::make_shared<tcp::socket>(io);
    boost::system::error_code ec;
    socket->open(tcp::v4(), ec);
    socket->set_option(asio::socket_base::linger(true, 0), ec);
    socket->async_connect(endpoints[next++ % endpoints.size()],
                          [&, socket](boost::system::error_code ec) {
                            ++done;
                            errors += ec ? 1 : 0;
                            boost::system::error_code ignored;
                            socket->close(ignored);
                            if (!stop) start_one();
                          });
  };
  Rate rate;
  std::thread thread([&] {
    pthread_setname_np(pthread_self(), "bare-loop");
    clockid_t cpu;
    pthread_getcpuclockid(pthread_self(), &cpu);
    for (int i = 0; i < concurrency; ++i) start_one();
    asio::steady_timer timer(
        io, std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
    timer.async_wait([&](boost::system::error_code) { stop = true; });
    const double cpu0 = ThreadCpuSeconds(cpu);
    const double wall0 = WallSeconds();
    io.run();
    const double wall = WallSeconds() - wall0;
    const double cpu_used = ThreadCpuSeconds(cpu) - cpu0;
    rate.per_second = done / wall;
    rate.cpu_fraction = cpu_used / wall;
    rate.cpu_us_per_op = done > 0 ? cpu_used * 1e6 / done : 0;
    rate.errors = errors;
  });
  thread.join();
  return rate;
}

// The same connects paced like the prober paces them at a 1 s interval:
// every 10 ms tick, `per_second / 100` connects start (round robin over the
// first `targets` endpoints). The CPU floor for the steady phase.
Rate PacedConnectLoop(const std::vector<tcp::endpoint>& endpoints, int targets,
                      double per_second, double seconds) {
  asio::io_context io;
  uint64_t done = 0;
  uint64_t errors = 0;
  size_t next = 0;
  const int per_tick = std::max(1, static_cast<int>(per_second / 100));
  auto start_one = [&] {
    auto socket = std::make_shared<tcp::socket>(io);
    boost::system::error_code ec;
    socket->open(tcp::v4(), ec);
    socket->set_option(asio::socket_base::linger(true, 0), ec);
    socket->async_connect(endpoints[next++ % targets],
                          [&, socket](boost::system::error_code ec) {
                            ++done;
                            errors += ec ? 1 : 0;
                            boost::system::error_code ignored;
                            socket->close(ignored);
                          });
  };
  Rate rate;
  std::thread thread([&] {
    pthread_setname_np(pthread_self(), "paced-loop");
    clockid_t cpu;
    pthread_getcpuclockid(pthread_self(), &cpu);
    asio::steady_timer timer(io);
    const auto start = std::chrono::steady_clock::now();
    const auto end =
        start + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
    auto tick = start;
    std::function<void()> arm = [&] {
      tick += std::chrono::milliseconds(10);
      if (tick >= end) return;
      timer.expires_at(tick);
      timer.async_wait([&](boost::system::error_code) {
        for (int i = 0; i < per_tick; ++i) start_one();
        arm();
      });
    };
    arm();
    const double cpu0 = ThreadCpuSeconds(cpu);
    const double wall0 = WallSeconds();
    io.run();
    const double wall = WallSeconds() - wall0;
    const double cpu_used = ThreadCpuSeconds(cpu) - cpu0;
    rate.per_second = done / wall;
    rate.cpu_fraction = cpu_used / wall;
    rate.cpu_us_per_op = done > 0 ? cpu_used * 1e6 / done : 0;
    rate.errors = errors;
  });
  thread.join();
  return rate;
}

double ProbeCount(prometheus::Registry& metrics, const std::string& result) {
  double total = 0;
  for (const auto& family : metrics.Collect()) {
    if (family.name != "aside_probes_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "result" && label.value == result) {
          total += metric.counter.value;
        }
      }
    }
  }
  return total;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

struct ProberRun {
  // One per measurement window.
  std::vector<Rate> windows;
  double expected_per_second = 0;
  double failures = 0;

  double MedianRate() const { return Median(Collect(&Rate::per_second)); }
  double MedianCpuFraction() const {
    return Median(Collect(&Rate::cpu_fraction));
  }
  double MedianCpuPerOp() const {
    return Median(Collect(&Rate::cpu_us_per_op));
  }
  std::vector<double> Collect(double Rate::*field) const {
    std::vector<double> out;
    for (const Rate& r : windows) out.push_back(r.*field);
    return out;
  }
};

// Probes the first `targets` listeners with `interval`; after `warmup`
// seconds, measures `windows` windows of `window_seconds` each.
ProberRun RunProber(const Listeners& listeners, int targets,
                    absl::Duration interval, double jitter,
                    uint32_t max_concurrent, double warmup, int windows,
                    double window_seconds) {
  prometheus::Registry metrics;
  HealthRegistry::Options options;
  options.max_concurrent_probes = max_concurrent;
  auto registry = HealthRegistry::Create(options, metrics);
  if (!registry.ok()) {
    std::fprintf(stderr, "%s\n", registry.status().ToString().c_str());
    std::exit(1);
  }
  HealthCheckSpec spec;
  spec.kind = HealthCheckSpec::Kind::kTcp;
  spec.interval = interval;
  spec.timeout = absl::Seconds(1);
  spec.jitter = jitter;
  std::vector<HealthHandle> handles;
  handles.reserve(targets);
  for (int i = 0; i < targets; ++i) {
    auto h = (*registry)->Acquire(listeners.addresses()[i], spec, "bench");
    if (!h.ok()) {
      std::fprintf(stderr, "%s\n", h.status().ToString().c_str());
      std::exit(1);
    }
    handles.push_back(*std::move(h));
  }
  absl::SleepFor(absl::Seconds(warmup));
  ProberRun run;
  double ok0 = ProbeCount(metrics, "success");
  double fail0 = ProbeCount(metrics, "failure");
  const double fail_start = fail0;
  double cpu0 = absl::ToDoubleSeconds((*registry)->ProberCpuTime());
  double wall0 = WallSeconds();
  for (int w = 0; w < windows; ++w) {
    absl::SleepFor(absl::Seconds(window_seconds));
    const double wall1 = WallSeconds();
    const double cpu1 = absl::ToDoubleSeconds((*registry)->ProberCpuTime());
    const double ok1 = ProbeCount(metrics, "success");
    const double fail1 = ProbeCount(metrics, "failure");
    const double probes = (ok1 - ok0) + (fail1 - fail0);
    Rate rate;
    rate.per_second = probes / (wall1 - wall0);
    rate.cpu_fraction = (cpu1 - cpu0) / (wall1 - wall0);
    rate.cpu_us_per_op = probes > 0 ? (cpu1 - cpu0) * 1e6 / probes : 0;
    run.windows.push_back(rate);
    ok0 = ok1;
    fail0 = fail1;
    cpu0 = cpu1;
    wall0 = wall1;
  }
  run.failures = fail0 - fail_start;
  handles.clear();
  registry->reset();
  run.expected_per_second = targets / absl::ToDoubleSeconds(interval);
  return run;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  int most = 0;
  for (int n : flags.targets) most = std::max(most, n);
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < static_cast<rlim_t>(most + 2000)) {
    std::fprintf(stderr, "RLIMIT_NOFILE %llu is too low for %d targets\n",
                 static_cast<unsigned long long>(limit.rlim_cur), most);
    return 1;
  }
  Listeners listeners;
  if (!listeners.Start(most)) return 1;
  std::printf("probe_load: %d listeners, concurrency %d, %d rounds\n", most,
              flags.concurrency, flags.rounds);

  // Saturated: bare and prober alternate so that both see the same machine.
  std::vector<double> bare_rate, bare_us, prober_rate, prober_us;
  for (int round = 0; round < flags.rounds; ++round) {
    const Rate bare = BareConnectLoop(listeners.endpoints(), flags.concurrency,
                                      flags.saturate_seconds);
    const ProberRun saturated =
        RunProber(listeners, most, absl::Milliseconds(1), 0, flags.concurrency,
                  1.0, 1, flags.saturate_seconds);
    const Rate& prober = saturated.windows[0];
    std::printf(
        "round %d: bare %7.0f/s %6.2f us/op (cpu %4.1f%%)   "
        "prober %7.0f/s %6.2f us/op (cpu %4.1f%%)  failures %.0f\n",
        round + 1, bare.per_second, bare.cpu_us_per_op, 100 * bare.cpu_fraction,
        prober.per_second, prober.cpu_us_per_op, 100 * prober.cpu_fraction,
        saturated.failures);
    bare_rate.push_back(bare.per_second);
    bare_us.push_back(bare.cpu_us_per_op);
    prober_rate.push_back(prober.per_second);
    prober_us.push_back(prober.cpu_us_per_op);
  }
  const double floor_rate = Median(bare_rate);
  const double floor_us = Median(bare_us);
  const double rate_ratio = Median(prober_rate) / floor_rate;
  const double cpu_rate_ratio = floor_us / Median(prober_us);
  std::printf(
      "saturated, medians: bare %.0f connects/s at %.2f us CPU each; prober "
      "%.0f probes/s at %.2f us CPU each\n"
      "  rate ratio %.3f, per-CPU rate ratio %.3f (target >= 0.9)\n",
      floor_rate, floor_us, Median(prober_rate), Median(prober_us), rate_ratio,
      cpu_rate_ratio);

  std::string json = absl::StrCat(
      "{\n  \"concurrency\": ", flags.concurrency,
      ",\n  \"rounds\": ", flags.rounds,
      ",\n  \"bare_connects_per_second\": ", floor_rate,
      ",\n  \"bare_cpu_us_per_connect\": ", floor_us,
      ",\n  \"saturated_probes_per_second\": ", Median(prober_rate),
      ",\n  \"saturated_cpu_us_per_probe\": ", Median(prober_us),
      ",\n  \"saturated_rate_ratio\": ", rate_ratio,
      ",\n  \"saturated_per_cpu_rate_ratio\": ", cpu_rate_ratio,
      ",\n  \"steady\": [");
  for (size_t i = 0; flags.seconds > 0 && i < flags.targets.size(); ++i) {
    const int targets = flags.targets[i];
    const int windows = std::max(1, static_cast<int>(flags.seconds));
    const ProberRun run =
        RunProber(listeners, targets, absl::Seconds(1), 0.05, 1000, 3.0,
                  windows, flags.seconds / windows);
    const double rate = run.MedianRate();
    const double cpu = run.MedianCpuFraction();
    // Floors: the saturated bare loop's CPU for the same number of
    // connects, and the same connects paced in 10 ms batches.
    const double floor_fraction = floor_us * 1e-6 * rate;
    const Rate paced =
        PacedConnectLoop(listeners.endpoints(), targets,
                         run.expected_per_second, std::min(flags.seconds, 5.0));
    std::vector<double> fractions = run.Collect(&Rate::cpu_fraction);
    std::sort(fractions.begin(), fractions.end());
    std::printf(
        "%6d targets @ 1s: %7.0f probes/s (%.3f of %.0f); prober CPU %.1f%% "
        "of a core (median of %d 1 s windows, range %.1f..%.1f%%), %.2f us "
        "per probe\n"
        "    %.2fx the saturated bare-connect floor (%.1f%%), %.2fx the same "
        "connects paced in 10 ms batches (%.1f%%, %.2f us each); failures "
        "%.0f\n",
        targets, rate, rate / run.expected_per_second, run.expected_per_second,
        100 * cpu, windows, 100 * fractions.front(), 100 * fractions.back(),
        run.MedianCpuPerOp(), cpu / floor_fraction, 100 * floor_fraction,
        cpu / paced.cpu_fraction, 100 * paced.cpu_fraction, paced.cpu_us_per_op,
        run.failures);
    absl::StrAppend(
        &json, i ? "," : "", "\n    {\"targets\": ", targets,
        ", \"probes_per_second\": ", rate,
        ", \"expected_per_second\": ", run.expected_per_second,
        ", \"cpu_fraction\": ", cpu,
        ", \"cpu_fraction_min\": ", fractions.front(),
        ", \"cpu_fraction_max\": ", fractions.back(),
        ", \"cpu_ratio_to_bare_floor\": ", cpu / floor_fraction,
        ", \"paced_bare_cpu_fraction\": ", paced.cpu_fraction,
        ", \"cpu_ratio_to_paced_floor\": ", cpu / paced.cpu_fraction,
        ", \"failures\": ", run.failures, "}");
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  if (!flags.json.empty()) {
    std::ofstream(flags.json) << json;
  }
  listeners.Stop();
  return 0;
}

}  // namespace
}  // namespace aside::bench

int main(int argc, char** argv) { return aside::bench::Main(argc, argv); }
