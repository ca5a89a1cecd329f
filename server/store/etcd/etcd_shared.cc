// The connections to the members: channels and credentials, login, and the
// unary call with failover.
#include "server/store/etcd/etcd_shared.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace aside::server::etcd {

namespace pb = ::etcdserverpb;

namespace {

// etcd's answers that carry meaning in their text only (its own client
// matches them the same way).
constexpr std::string_view kNoLeader = "etcdserver: no leader";
constexpr std::string_view kInvalidToken = "etcdserver: invalid auth token";

// Metadata asking a member to refuse the call when it has no leader, instead
// of waiting (a write) or serving a stale view (a watch).
constexpr char kRequireLeaderKey[] = "hasleader";

// Longest single wait on a channel's state, so a stopping watch or
// keep-alive notices quickly.
constexpr absl::Duration kStateSlice = absl::Milliseconds(100);

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

bool IsTransient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

absl::StatusOr<std::string> ReadFile(const std::string& what,
                                     const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd ", what, ": cannot read '", path, "'"));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::shared_ptr<grpc::ChannelCredentials> MakeCredentials(
    const std::optional<TlsOptions>& tls, absl::Status* error) {
  if (!tls.has_value()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls->ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadFile("tls.ca_file", tls->ca_file);
    if (!ca.ok()) {
      *error = ca.status();
      return nullptr;
    }
    ssl.pem_root_certs = *std::move(ca);
  }
  if (tls->cert_file.empty() != tls->key_file.empty()) {
    *error = absl::InvalidArgumentError(
        "etcd tls: cert_file and key_file go together");
    return nullptr;
  }
  if (!tls->cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadFile("tls.cert_file", tls->cert_file);
    absl::StatusOr<std::string> key = ReadFile("tls.key_file", tls->key_file);
    if (!cert.ok() || !key.ok()) {
      *error = !cert.ok() ? cert.status() : key.status();
      return nullptr;
    }
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

int ToMillis(absl::Duration d) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1,
                                              std::numeric_limits<int>::max()));
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return "";
  }
  return name;
}

}  // namespace

size_t SpreadIndex(std::string_view host, int64_t pid, size_t n) {
  if (n == 0) {
    return 0;
  }
  uint64_t hash = 14695981039346656037ull;
  // StrCat, not `":" + std::to_string(pid)`, which GCC 12 at -O3 takes
  // for an overlapping memcpy (-Wrestrict, a known false positive).
  const std::string key =
      absl::StrCat(absl::string_view(host.data(), host.size()), ":", pid);
  for (char c : key) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return static_cast<size_t>(hash % n);
}

absl::StatusOr<std::shared_ptr<Shared>> Shared::Create(
    EtcdClientOptions options) {
  absl::Status error;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      MakeCredentials(options.tls, &error);
  if (credentials == nullptr) {
    return error;
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ToMillis(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              ToMillis(options.keepalive_timeout));
  // A watch that waits for events sends no data: keep pinging regardless.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              ToMillis(options.max_reconnect_backoff));
  args.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<uint32_t>(options.max_response_bytes, INT32_MAX)));
  // Each client its own connections, so one client's failures and backoff
  // never affect another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);

  auto shared = std::make_shared<Shared>();
  for (const std::string& address : options.endpoints) {
    if (address.empty() || address.find("://") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd: endpoint '", address, "' is not host:port"));
    }
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->address = address;
    if (options.route_channel && !options.tls.has_value()) {
      grpc::ChannelArguments routed = args;
      const std::string target = options.route_channel(address, &routed);
      endpoint->channel =
          grpc::CreateCustomChannel(target, credentials, routed);
    } else {
      endpoint->channel = grpc::CreateCustomChannel(address, credentials, args);
    }
    endpoint->kv = pb::KV::NewStub(endpoint->channel);
    endpoint->watch = pb::Watch::NewStub(endpoint->channel);
    endpoint->lease = pb::Lease::NewStub(endpoint->channel);
    endpoint->auth = pb::Auth::NewStub(endpoint->channel);
    shared->endpoints.push_back(std::move(endpoint));
  }
  shared->addresses = options.endpoints;
  if (options.endpoint_order == EndpointOrder::kSpread) {
    shared->home = SpreadIndex(HostName(), getpid(), shared->endpoints.size());
    MutexLock lock(&shared->mu);
    shared->preferred = shared->home;
  }
  shared->options = std::move(options);
  return shared;
}

absl::Status Shared::WaitReady(const Endpoint& endpoint, absl::Time deadline,
                               absl::FunctionRef<bool()> stopped) {
  grpc_connectivity_state state = endpoint.channel->GetState(true);
  bool retried = false;
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_SHUTDOWN ||
        (state == GRPC_CHANNEL_TRANSIENT_FAILURE && retried)) {
      return absl::UnavailableError(
          absl::StrCat(endpoint.address, ": cannot connect"));
    }
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      grpc::experimental::ChannelResetConnectionBackoff(endpoint.channel.get());
      retried = true;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          endpoint.address, ": not connected within the dial timeout"));
    }
    if (stopped()) {
      return absl::CancelledError("stopped");
    }
    endpoint.channel->WaitForStateChange(
        state, ToChrono(std::min(deadline, now + kStateSlice)));
    state = endpoint.channel->GetState(true);
  }
  return absl::OkStatus();
}

absl::Status Shared::WaitReady(const Endpoint& endpoint, absl::Time deadline) {
  return WaitReady(endpoint, deadline, [] { return false; });
}

absl::StatusOr<std::string> Shared::Token(Endpoint& endpoint,
                                          absl::Time deadline) {
  if (options.username.empty()) {
    return std::string();
  }
  {
    MutexLock lock(&mu);
    if (!token.empty()) {
      return token;
    }
  }
  pb::AuthenticateRequest request;
  request.set_name(options.username);
  request.set_password(options.password);
  pb::AuthenticateResponse response;
  grpc::ClientContext context;
  context.set_deadline(ToChrono(deadline));
  const grpc::Status status =
      endpoint.auth->Authenticate(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(
        ToAbslCode(status.error_code()),
        absl::StrCat(endpoint.address, ": Authenticate as '", options.username,
                     "': ", status.error_message()));
  }
  MutexLock lock(&mu);
  token = response.token();
  return token;
}

void Shared::ForgetToken(const std::string& stale) {
  MutexLock lock(&mu);
  if (token == stale) {
    token.clear();
  }
}

void Shared::Prepare(grpc::ClientContext* context, absl::Time deadline,
                     const std::string& token) {
  if (deadline != absl::InfiniteFuture()) {
    context->set_deadline(ToChrono(deadline));
  }
  context->AddMetadata(kRequireLeaderKey, "true");
  if (!token.empty()) {
    context->AddMetadata("token", token);
  }
}

absl::Status Shared::Call(
    const char* method, Retry retry,
    absl::FunctionRef<grpc::Status(Endpoint&, grpc::ClientContext*)> fn) {
  const absl::Time deadline = absl::Now() + options.request_timeout;
  const size_t n = endpoints.size();
  const size_t first = Preferred();
  std::vector<std::string> failures;
  bool any_unavailable = false;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (first + i) % n;
    Endpoint& endpoint = *endpoints[index];
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      failures.push_back(
          absl::StrCat(endpoint.address, ": not tried, out of time"));
      continue;
    }
    if (absl::Status ready =
            WaitReady(endpoint, std::min(deadline, now + options.dial_timeout));
        !ready.ok()) {
      any_unavailable |= ready.code() == absl::StatusCode::kUnavailable;
      failures.push_back(std::string(ready.message()));
      Avoid(index);
      continue;
    }
    // A read keeps time for the endpoints after this one.
    const absl::Time attempt_deadline =
        retry == Retry::kAlways
            ? now + (deadline - now) / static_cast<int64_t>(n - i)
            : deadline;
    grpc::Status status;
    bool sent = false;
    for (int login = 0; login < 2; ++login) {
      absl::StatusOr<std::string> token = Token(endpoint, attempt_deadline);
      if (!token.ok()) {
        status =
            grpc::Status(static_cast<grpc::StatusCode>(token.status().code()),
                         std::string(token.status().message()));
        break;
      }
      sent = true;
      grpc::ClientContext context;
      Prepare(&context, attempt_deadline, *token);
      status = fn(endpoint, &context);
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
          status.error_message() == kInvalidToken && !token->empty()) {
        // The member lost its tokens (a restart): log in again, once.
        ForgetToken(*token);
        continue;
      }
      break;
    }
    if (status.ok()) {
      Prefer(index);
      return absl::OkStatus();
    }
    const bool transient = IsTransient(status.error_code());
    // Logging in failed, or the member refused the call unapplied.
    const bool not_applied = !sent || status.error_message() == kNoLeader;
    if (transient && (retry == Retry::kAlways || not_applied)) {
      any_unavailable |= status.error_code() == grpc::StatusCode::UNAVAILABLE;
      failures.push_back(absl::StrCat(
          endpoint.address, ": ",
          absl::StatusCodeToString(ToAbslCode(status.error_code())), ": ",
          status.error_message()));
      Avoid(index);
      continue;
    }
    std::string message = absl::StrCat("etcd ", endpoint.address, ": ", method,
                                       ": ", status.error_message());
    if (transient) {
      absl::StrAppend(&message,
                      " (the write may or may not have been applied)");
      Avoid(index);
    }
    return absl::Status(ToAbslCode(status.error_code()), message);
  }
  const std::string message = absl::StrCat(
      "etcd: ", method,
      " failed on every endpoint: ", absl::StrJoin(failures, "; "));
  return any_unavailable ? absl::UnavailableError(message)
                         : absl::DeadlineExceededError(message);
}

}  // namespace aside::server::etcd
