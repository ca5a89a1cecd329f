#include "server/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/mvccpb/kv.pb.h"
#include "lib/status_macros.h"

namespace aside::server::etcd {

namespace pb = ::etcdserverpb;

struct Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Auth::Stub> auth;
};

namespace {

// Whether a failed call may be sent again to another member.
enum class Retry {
  // Reads, and writes whose repetition is harmless (granting a lease twice
  // leaves one unused lease, which expires; revoking twice is a no-op).
  kAlways,
  // Writes: only when the member surely did not apply it.
  kIfNotApplied,
};

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
constexpr absl::Duration kMinStreamBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxStreamBackoff = absl::Seconds(2);

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

bool IsTransient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

absl::StatusCode ToAbslCode(grpc::StatusCode code) {
  return static_cast<absl::StatusCode>(code);
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

KeyValue FromProto(const mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

std::vector<KeyValue> FromProto(
    const google::protobuf::RepeatedPtrField<mvccpb::KeyValue>& kvs) {
  std::vector<KeyValue> out;
  out.reserve(kvs.size());
  for (const mvccpb::KeyValue& kv : kvs) {
    out.push_back(FromProto(kv));
  }
  return out;
}

void ToProto(const Compare& c, pb::Compare* out) {
  out->set_key(c.key);
  switch (c.result) {
    case Compare::Result::kEqual:
      out->set_result(pb::Compare::EQUAL);
      break;
    case Compare::Result::kNotEqual:
      out->set_result(pb::Compare::NOT_EQUAL);
      break;
    case Compare::Result::kGreater:
      out->set_result(pb::Compare::GREATER);
      break;
    case Compare::Result::kLess:
      out->set_result(pb::Compare::LESS);
      break;
  }
  switch (c.target) {
    case Compare::Target::kVersion:
      out->set_target(pb::Compare::VERSION);
      out->set_version(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(pb::Compare::CREATE);
      out->set_create_revision(c.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(pb::Compare::MOD);
      out->set_mod_revision(c.number);
      break;
    case Compare::Target::kValue:
      out->set_target(pb::Compare::VALUE);
      out->set_value(c.value);
      break;
    case Compare::Target::kLease:
      out->set_target(pb::Compare::LEASE);
      out->set_lease(c.number);
      break;
  }
}

void ToProto(const Op& op, pb::RequestOp* out) {
  switch (op.kind) {
    case Op::Kind::kGet:
      out->mutable_request_range()->set_key(op.key);
      break;
    case Op::Kind::kGetPrefix: {
      pb::RangeRequest* r = out->mutable_request_range();
      r->set_key(op.key);
      r->set_range_end(EtcdClient::PrefixEnd(op.key));
      break;
    }
    case Op::Kind::kPut: {
      pb::PutRequest* p = out->mutable_request_put();
      p->set_key(op.key);
      p->set_value(op.value);
      p->set_lease(op.lease);
      break;
    }
    case Op::Kind::kDelete:
      out->mutable_request_delete_range()->set_key(op.key);
      break;
    case Op::Kind::kDeletePrefix: {
      pb::DeleteRangeRequest* d = out->mutable_request_delete_range();
      d->set_key(op.key);
      d->set_range_end(EtcdClient::PrefixEnd(op.key));
      break;
    }
  }
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

}  // namespace

// What a client, its watches and its keep-alives share.
struct Shared {
  EtcdClientOptions options;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<Endpoint>> endpoints;

  Mutex mu;
  // The endpoint that answered last: where calls start.
  size_t preferred ABSL_GUARDED_BY(mu) = 0;
  // From Auth.Authenticate, when a username is configured.
  std::string token ABSL_GUARDED_BY(mu);

  size_t Preferred() {
    MutexLock lock(&mu);
    return preferred;
  }
  void Prefer(size_t index) {
    MutexLock lock(&mu);
    preferred = index;
  }
  // Moves calls off `index` if they start there.
  void Avoid(size_t index) {
    MutexLock lock(&mu);
    if (preferred == index) {
      preferred = (index + 1) % endpoints.size();
    }
  }

  // Waits until `endpoint` has a ready connection. A channel in
  // TRANSIENT_FAILURE (the member refused or dropped the connection) gets
  // one immediate reconnection attempt, skipping gRPC's backoff, so a member
  // that came back is used at once; when that attempt fails too, so does
  // this. Also fails at `deadline` or when `stopped()` turns true.
  absl::Status WaitReady(const Endpoint& endpoint, absl::Time deadline,
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
        grpc::experimental::ChannelResetConnectionBackoff(
            endpoint.channel.get());
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

  absl::Status WaitReady(const Endpoint& endpoint, absl::Time deadline) {
    return WaitReady(endpoint, deadline, [] { return false; });
  }

  // The auth token, logging in through `endpoint` when there is none yet.
  // Empty when no username is configured.
  absl::StatusOr<std::string> Token(Endpoint& endpoint, absl::Time deadline) {
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
          absl::StrCat(endpoint.address, ": Authenticate as '",
                       options.username, "': ", status.error_message()));
    }
    MutexLock lock(&mu);
    token = response.token();
    return token;
  }

  void ForgetToken(const std::string& stale) {
    MutexLock lock(&mu);
    if (token == stale) {
      token.clear();
    }
  }

  // Sets what every call carries: the deadline, the token, and the request
  // to be refused by a member without a leader.
  static void Prepare(grpc::ClientContext* context, absl::Time deadline,
                      const std::string& token) {
    if (deadline != absl::InfiniteFuture()) {
      context->set_deadline(ToChrono(deadline));
    }
    context->AddMetadata(kRequireLeaderKey, "true");
    if (!token.empty()) {
      context->AddMetadata("token", token);
    }
  }

  // Runs one unary call with failover (see the header).
  absl::Status Call(
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
          status = grpc::Status(
              static_cast<grpc::StatusCode>(token.status().code()),
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
      std::string message = absl::StrCat("etcd ", endpoint.address, ": ",
                                          method, ": ", status.error_message());
      if (transient) {
        absl::StrAppend(&message,
                        " (the write may or may not have been applied)");
        Avoid(index);
      }
      return absl::Status(ToAbslCode(status.error_code()), message);
    }
    const std::string message =
        absl::StrCat("etcd: ", method, " failed on every endpoint: ",
                     absl::StrJoin(failures, "; "));
    return any_unavailable ? absl::UnavailableError(message)
                           : absl::DeadlineExceededError(message);
  }
};

// ---- Compare and Op ----

Compare Compare::ModRevision(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kModRevision;
  c.number = revision;
  return c;
}

Compare Compare::CreateRevision(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kCreateRevision;
  c.number = revision;
  return c;
}

Compare Compare::Value(std::string key, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.value = std::move(value);
  return c;
}

Op Op::Get(std::string key) { return Op{Kind::kGet, std::move(key), "", 0}; }
Op Op::GetPrefix(std::string prefix) {
  return Op{Kind::kGetPrefix, std::move(prefix), "", 0};
}
Op Op::Put(std::string key, std::string value, int64_t lease) {
  return Op{Kind::kPut, std::move(key), std::move(value), lease};
}
Op Op::Delete(std::string key) {
  return Op{Kind::kDelete, std::move(key), "", 0};
}
Op Op::DeletePrefix(std::string prefix) {
  return Op{Kind::kDeletePrefix, std::move(prefix), "", 0};
}

// ---- EtcdClient ----

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    EtcdClientOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd: no endpoints");
  }
  if (options.dial_timeout <= absl::ZeroDuration() ||
      options.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "etcd: dial_timeout and request_timeout must be positive");
  }
  if (options.range_page_size <= 0) {
    return absl::InvalidArgumentError("etcd: range_page_size must be positive");
  }
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
  // Large ranges and transactions are etcd's to limit, not the client's.
  args.SetMaxReceiveMessageSize(-1);
  // Each client its own connections, so one client's failures and backoff
  // never affect another's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);

  auto shared = std::make_shared<Shared>();
  for (const std::string& address : options.endpoints) {
    if (address.empty() || address.find("://") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd: endpoint '", address, "' is not host:port"));
    }
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->address = address;
    endpoint->channel = grpc::CreateCustomChannel(address, credentials, args);
    endpoint->kv = pb::KV::NewStub(endpoint->channel);
    endpoint->watch = pb::Watch::NewStub(endpoint->channel);
    endpoint->lease = pb::Lease::NewStub(endpoint->channel);
    endpoint->auth = pb::Auth::NewStub(endpoint->channel);
    shared->endpoints.push_back(std::move(endpoint));
  }
  shared->addresses = options.endpoints;
  shared->options = std::move(options);
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(shared)));
}

EtcdClient::EtcdClient(std::shared_ptr<Shared> shared)
    : shared_(std::move(shared)) {}

EtcdClient::~EtcdClient() = default;

const std::vector<std::string>& EtcdClient::endpoints() const {
  return shared_->addresses;
}

std::string EtcdClient::PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  // Every byte was 0xff (or there were none): no key range ends after the
  // prefix, so read to the end of the key space.
  return std::string(1, '\0');
}

absl::StatusOr<std::optional<KeyValue>> EtcdClient::Get(std::string_view key,
                                                        int64_t revision) {
  pb::RangeRequest request;
  request.set_key(std::string(key));
  request.set_revision(revision);
  pb::RangeResponse response;
  ASIDE_RETURN_IF_ERROR(shared_->Call(
      "Range", Retry::kAlways, [&](Endpoint& e, grpc::ClientContext* c) {
        return e.kv->Range(c, request, &response);
      }));
  if (response.kvs().empty()) {
    return std::optional<KeyValue>();
  }
  return std::optional<KeyValue>(FromProto(response.kvs(0)));
}

absl::StatusOr<RangeResult> EtcdClient::Range(std::string_view prefix,
                                              int64_t revision) {
  RangeResult result;
  pb::RangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  request.set_limit(shared_->options.range_page_size);
  request.set_revision(revision);
  while (true) {
    pb::RangeResponse response;
    ASIDE_RETURN_IF_ERROR(shared_->Call(
        "Range", Retry::kAlways, [&](Endpoint& e, grpc::ClientContext* c) {
          return e.kv->Range(c, request, &response);
        }));
    if (request.revision() <= 0) {
      // Every later page is read at the revision of the first.
      request.set_revision(response.header().revision());
    }
    for (const mvccpb::KeyValue& kv : response.kvs()) {
      result.kvs.push_back(FromProto(kv));
    }
    if (!response.more() || response.kvs().empty()) {
      break;
    }
    // Next page: the keys after the last one read.
    request.set_key(response.kvs().rbegin()->key() + std::string(1, '\0'));
  }
  result.revision = request.revision();
  return result;
}

absl::StatusOr<int64_t> EtcdClient::Put(std::string_view key,
                                        std::string_view value,
                                        int64_t lease) {
  pb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  pb::PutResponse response;
  ASIDE_RETURN_IF_ERROR(shared_->Call(
      "Put", Retry::kIfNotApplied, [&](Endpoint& e, grpc::ClientContext* c) {
        return e.kv->Put(c, request, &response);
      }));
  return response.header().revision();
}

namespace {

absl::StatusOr<DeleteResult> DeleteRange(Shared& shared,
                                         pb::DeleteRangeRequest request) {
  pb::DeleteRangeResponse response;
  ASIDE_RETURN_IF_ERROR(shared.Call(
      "DeleteRange", Retry::kIfNotApplied,
      [&](Endpoint& e, grpc::ClientContext* c) {
        return e.kv->DeleteRange(c, request, &response);
      }));
  return DeleteResult{response.deleted(), response.header().revision()};
}

}  // namespace

absl::StatusOr<DeleteResult> EtcdClient::Delete(std::string_view key) {
  pb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  return DeleteRange(*shared_, std::move(request));
}

absl::StatusOr<DeleteResult> EtcdClient::DeletePrefix(std::string_view prefix) {
  pb::DeleteRangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  return DeleteRange(*shared_, std::move(request));
}

absl::StatusOr<TxnResult> EtcdClient::Txn(const std::vector<Compare>& compares,
                                          const std::vector<Op>& success,
                                          const std::vector<Op>& failure) {
  pb::TxnRequest request;
  for (const Compare& c : compares) {
    ToProto(c, request.add_compare());
  }
  for (const Op& op : success) {
    ToProto(op, request.add_success());
  }
  for (const Op& op : failure) {
    ToProto(op, request.add_failure());
  }
  pb::TxnResponse response;
  ASIDE_RETURN_IF_ERROR(shared_->Call(
      "Txn", Retry::kIfNotApplied, [&](Endpoint& e, grpc::ClientContext* c) {
        return e.kv->Txn(c, request, &response);
      }));
  TxnResult result;
  result.succeeded = response.succeeded();
  result.revision = response.header().revision();
  for (const pb::ResponseOp& op : response.responses()) {
    if (op.has_response_range()) {
      result.reads.push_back(FromProto(op.response_range().kvs()));
    } else {
      result.reads.emplace_back();
    }
  }
  return result;
}

absl::StatusOr<CreateResult> EtcdClient::CreateIfAbsent(std::string_view key,
                                                        std::string_view value,
                                                        int64_t lease) {
  const std::string k(key);
  ASIDE_ASSIGN_OR_RETURN(
      TxnResult txn, Txn({Compare::Absent(k)},
                         {Op::Put(k, std::string(value), lease)}, {Op::Get(k)}));
  CreateResult result;
  result.created = txn.succeeded;
  result.revision = txn.revision;
  if (!txn.succeeded && !txn.reads.empty() && !txn.reads[0].empty()) {
    result.existing = txn.reads[0][0];
  }
  return result;
}

absl::Status EtcdClient::Compact(int64_t revision, bool physical) {
  pb::CompactionRequest request;
  request.set_revision(revision);
  request.set_physical(physical);
  pb::CompactionResponse response;
  return shared_->Call(
      "Compact", Retry::kIfNotApplied, [&](Endpoint& e, grpc::ClientContext* c) {
        return e.kv->Compact(c, request, &response);
      });
}

absl::StatusOr<Lease> EtcdClient::LeaseGrant(absl::Duration ttl) {
  pb::LeaseGrantRequest request;
  // Whole seconds, rounded up, at least one.
  request.set_ttl(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  pb::LeaseGrantResponse response;
  const absl::Time sent = absl::Now();
  ASIDE_RETURN_IF_ERROR(shared_->Call(
      "LeaseGrant", Retry::kAlways, [&](Endpoint& e, grpc::ClientContext* c) {
        return e.lease->LeaseGrant(c, request, &response);
      }));
  if (!response.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd: LeaseGrant: ", response.error()));
  }
  return Lease{response.id(), absl::Seconds(response.ttl()), sent};
}

absl::Status EtcdClient::LeaseRevoke(int64_t id) {
  pb::LeaseRevokeRequest request;
  request.set_id(id);
  pb::LeaseRevokeResponse response;
  return shared_->Call(
      "LeaseRevoke", Retry::kAlways, [&](Endpoint& e, grpc::ClientContext* c) {
        return e.lease->LeaseRevoke(c, request, &response);
      });
}

std::unique_ptr<LeaseKeepAlive> EtcdClient::KeepAlive(
    const Lease& lease, absl::AnyInvocable<void(absl::Status)> on_lost) {
  return std::unique_ptr<LeaseKeepAlive>(
      new LeaseKeepAlive(shared_, lease, std::move(on_lost)));
}

std::unique_ptr<Watch> EtcdClient::WatchPrefix(WatchOptions options,
                                               WatchHandlers handlers) {
  return std::unique_ptr<Watch>(
      new Watch(shared_, std::move(options), std::move(handlers)));
}

// ---- Watch ----

Watch::Watch(std::shared_ptr<Shared> shared, WatchOptions options,
             WatchHandlers handlers)
    : shared_(std::move(shared)),
      options_(std::move(options)),
      handlers_(std::move(handlers)) {
  next_revision_ = options_.start_revision;
  thread_ = std::thread([this] { Run(); });
}

Watch::~Watch() { Stop(); }

void Watch::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    if (context_ != nullptr) {
      context_->TryCancel();
    }
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::string Watch::endpoint() const {
  MutexLock lock(&mu_);
  return endpoint_;
}

int64_t Watch::next_revision() const {
  MutexLock lock(&mu_);
  return next_revision_;
}

bool Watch::connected() const {
  MutexLock lock(&mu_);
  return connected_;
}

bool Watch::Pause(absl::Duration d) {
  MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopped_;
  }, d);
}

void Watch::Run() {
  const size_t n = shared_->endpoints.size();
  size_t index = shared_->Preferred();
  size_t failures_in_a_row = 0;
  absl::Duration backoff = kMinStreamBackoff;
  auto stopped = [this] {
    MutexLock lock(&mu_);
    return stopped_;
  };

  pb::WatchRequest create;
  pb::WatchCreateRequest* c = create.mutable_create_request();
  c->set_key(options_.prefix);
  c->set_range_end(EtcdClient::PrefixEnd(options_.prefix));
  c->set_prev_kv(options_.prev_kv);
  c->set_progress_notify(options_.progress_notify);

  while (!stopped()) {
    Endpoint& endpoint = *shared_->endpoints[index];
    absl::Status failure;
    std::optional<int64_t> compacted_to;

    absl::Status ready = shared_->WaitReady(
        endpoint, absl::Now() + shared_->options.dial_timeout, stopped);
    absl::StatusOr<std::string> token =
        ready.ok() ? shared_->Token(endpoint, absl::Now() +
                                                  shared_->options.request_timeout)
                   : absl::StatusOr<std::string>(ready);
    if (!token.ok()) {
      failure = token.status();
    } else {
      grpc::ClientContext context;
      Shared::Prepare(&context, absl::InfiniteFuture(), *token);
      int64_t next;
      {
        MutexLock lock(&mu_);
        if (stopped_) {
          return;
        }
        context_ = &context;
        endpoint_ = endpoint.address;
        next = next_revision_;
      }
      c->set_start_revision(next);
      std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest,
                                               pb::WatchResponse>>
          stream = endpoint.watch->Watch(&context);
      std::string ended;  // why the watch ended while the stream lived
      if (stream->Write(create)) {
        pb::WatchResponse response;
        while (stream->Read(&response)) {
          if (response.compact_revision() != 0) {
            compacted_to = response.compact_revision();
            break;
          }
          if (response.canceled()) {
            ended = absl::StrCat("the server cancelled the watch: ",
                                 response.cancel_reason());
            // A member that forgot the token (restarted, or the token
            // expired) refuses the watch as not permitted: log in again.
            if (!token->empty()) {
              shared_->ForgetToken(*token);
            }
            break;
          }
          if (response.created()) {
            MutexLock lock(&mu_);
            if (next <= 0) {
              // "From now on" means after the revision the watcher was
              // created at; a reconnection must resume from there.
              next = response.header().revision() + 1;
              next_revision_ = next;
            }
            connected_ = true;
            failures_in_a_row = 0;
            backoff = kMinStreamBackoff;
            continue;
          }
          WatchBatch batch;
          batch.events.reserve(response.events_size());
          for (const mvccpb::Event& e : response.events()) {
            Event event;
            event.type = e.type() == mvccpb::Event::DELETE ? Event::Type::kDelete
                                                           : Event::Type::kPut;
            event.kv = FromProto(e.kv());
            if (e.has_prev_kv()) {
              event.prev_kv = FromProto(e.prev_kv());
            }
            batch.events.push_back(std::move(event));
          }
          if (!batch.events.empty()) {
            // Revisions are never split across responses, so the next one
            // to ask for after a reconnection is the one after the last.
            batch.revision = batch.events.back().kv.mod_revision;
          } else if (response.header().revision() >= next) {
            // A progress report: nothing changed up to the header revision.
            batch.revision = response.header().revision();
          } else {
            continue;
          }
          next = batch.revision + 1;
          {
            MutexLock lock(&mu_);
            next_revision_ = next;
          }
          if (handlers_.on_events) {
            handlers_.on_events(std::move(batch));
          }
        }
      }
      const bool early = compacted_to.has_value() || !ended.empty();
      if (early) {
        context.TryCancel();
      }
      const grpc::Status status = stream->Finish();
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        shared_->ForgetToken(*token);
      }
      {
        MutexLock lock(&mu_);
        context_ = nullptr;
        connected_ = false;
        if (stopped_) {
          return;
        }
      }
      if (compacted_to.has_value()) {
        if (handlers_.on_compacted) {
          handlers_.on_compacted(*compacted_to);
        }
        return;
      }
      failure = absl::UnavailableError(absl::StrCat(
          "etcd ", endpoint.address, ": Watch: ",
          !ended.empty() ? ended
                         : absl::StrCat(absl::StatusCodeToString(
                                            ToAbslCode(status.error_code())),
                                        ": ", status.error_message())));
    }
    if (stopped()) {
      return;
    }
    if (handlers_.on_disconnected) {
      handlers_.on_disconnected(failure);
    }
    index = (index + 1) % n;
    // Straight on to the next member; pause once every member has failed.
    if (++failures_in_a_row >= n) {
      if (!Pause(backoff)) {
        return;
      }
      backoff = std::min(backoff * 2, kMaxStreamBackoff);
    }
  }
}

// ---- LeaseKeepAlive ----

LeaseKeepAlive::LeaseKeepAlive(std::shared_ptr<Shared> shared, Lease lease,
                               absl::AnyInvocable<void(absl::Status)> on_lost)
    : shared_(std::move(shared)), id_(lease.id), on_lost_(std::move(on_lost)) {
  expiry_ = lease.granted_at + lease.ttl;
  ttl_ = lease.ttl;
  thread_ = std::thread([this] { Run(); });
}

LeaseKeepAlive::~LeaseKeepAlive() { Stop(); }

void LeaseKeepAlive::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    if (context_ != nullptr) {
      context_->TryCancel();
    }
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool LeaseKeepAlive::lost() const {
  MutexLock lock(&mu_);
  return lost_;
}

absl::Time LeaseKeepAlive::expiry() const {
  MutexLock lock(&mu_);
  return expiry_;
}

bool LeaseKeepAlive::Pause(absl::Duration d) {
  MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopped_;
  }, d);
}

void LeaseKeepAlive::Run() {
  const size_t n = shared_->endpoints.size();
  size_t index = shared_->Preferred();
  auto stopped = [this] {
    MutexLock lock(&mu_);
    return stopped_;
  };
  auto report = [this](absl::Status status) {
    {
      MutexLock lock(&mu_);
      if (stopped_) {
        return;
      }
      lost_ = true;
    }
    if (on_lost_) {
      on_lost_(std::move(status));
    }
  };

  absl::Time renew_at;
  {
    MutexLock lock(&mu_);
    // The first renewal a third of the TTL after the grant.
    renew_at = expiry_ - ttl_ + ttl_ / 3;
  }
  while (true) {
    if (!Pause(renew_at - absl::Now())) {
      return;
    }
    absl::Time expiry;
    {
      MutexLock lock(&mu_);
      expiry = expiry_;
    }
    std::vector<std::string> failures;
    size_t attempts = 0;
    while (true) {
      const absl::Time now = absl::Now();
      if (now >= expiry) {
        report(absl::UnavailableError(absl::StrCat(
            "etcd: lease ", id_, " expired before a renewal succeeded: ",
            failures.empty() ? "no attempt" : absl::StrJoin(failures, "; "))));
        return;
      }
      Endpoint& endpoint = *shared_->endpoints[index];
      const absl::Time deadline =
          std::min(expiry, now + shared_->options.request_timeout);
      absl::Status ready = shared_->WaitReady(
          endpoint, std::min(deadline, now + shared_->options.dial_timeout),
          stopped);
      absl::StatusOr<std::string> token =
          ready.ok() ? shared_->Token(endpoint, deadline)
                     : absl::StatusOr<std::string>(ready);
      bool renewed = false;
      pb::LeaseKeepAliveResponse response;
      absl::Time sent = now;
      if (token.ok()) {
        // One short stream per renewal: nothing to keep in sync between
        // renewals, and each renewal may go to a different member.
        grpc::ClientContext context;
        Shared::Prepare(&context, deadline, *token);
        {
          MutexLock lock(&mu_);
          if (stopped_) {
            return;
          }
          context_ = &context;
        }
        sent = absl::Now();
        auto stream = endpoint.lease->LeaseKeepAlive(&context);
        pb::LeaseKeepAliveRequest request;
        request.set_id(id_);
        renewed = stream->Write(request) && stream->Read(&response);
        if (renewed) {
          stream->WritesDone();
        }
        context.TryCancel();
        const grpc::Status status = stream->Finish();
        {
          MutexLock lock(&mu_);
          context_ = nullptr;
          if (stopped_) {
            return;
          }
        }
        if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
          shared_->ForgetToken(*token);
        }
        if (!renewed) {
          failures.push_back(absl::StrCat(
              endpoint.address, ": ",
              absl::StatusCodeToString(ToAbslCode(status.error_code())), ": ",
              status.error_message()));
        }
      } else {
        if (stopped()) {
          return;
        }
        failures.push_back(std::string(token.status().message()));
      }
      if (renewed) {
        if (response.ttl() <= 0) {
          report(absl::NotFoundError(
              absl::StrCat("etcd ", endpoint.address, ": lease ", id_,
                           " has expired or was revoked")));
          return;
        }
        const absl::Duration ttl = absl::Seconds(response.ttl());
        {
          MutexLock lock(&mu_);
          ttl_ = ttl;
          expiry_ = sent + ttl;
        }
        renew_at = sent + ttl / 3;
        break;
      }
      index = (index + 1) % n;
      if (++attempts % n == 0 && !Pause(kMinStreamBackoff * 4)) {
        return;
      }
    }
  }
}

}  // namespace aside::server::etcd
