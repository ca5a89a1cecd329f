#include "server/store/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/mvccpb/kv.pb.h"
#include "lib/status_macros.h"
#include "server/store/etcd/etcd_shared.h"

namespace aside::server::etcd {

namespace pb = ::etcdserverpb;

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

namespace {

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

}  // namespace

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
  ASIDE_ASSIGN_OR_RETURN(std::shared_ptr<Shared> shared,
                         Shared::Create(std::move(options)));
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
                                        std::string_view value, int64_t lease) {
  pb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  pb::PutResponse response;
  ASIDE_RETURN_IF_ERROR(shared_->Call("Put", Retry::kIfNotApplied,
                                      [&](Endpoint& e, grpc::ClientContext* c) {
                                        return e.kv->Put(c, request, &response);
                                      }));
  return response.header().revision();
}

namespace {

absl::StatusOr<DeleteResult> DeleteRange(Shared& shared,
                                         pb::DeleteRangeRequest request) {
  pb::DeleteRangeResponse response;
  ASIDE_RETURN_IF_ERROR(shared.Call("DeleteRange", Retry::kIfNotApplied,
                                    [&](Endpoint& e, grpc::ClientContext* c) {
                                      return e.kv->DeleteRange(c, request,
                                                               &response);
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
  ASIDE_RETURN_IF_ERROR(shared_->Call("Txn", Retry::kIfNotApplied,
                                      [&](Endpoint& e, grpc::ClientContext* c) {
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
      TxnResult txn,
      Txn({Compare::Absent(k)}, {Op::Put(k, std::string(value), lease)},
          {Op::Get(k)}));
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
  return shared_->Call("Compact", Retry::kIfNotApplied,
                       [&](Endpoint& e, grpc::ClientContext* c) {
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
  return shared_->Call("LeaseRevoke", Retry::kAlways,
                       [&](Endpoint& e, grpc::ClientContext* c) {
                         return e.lease->LeaseRevoke(c, request, &response);
                       });
}

}  // namespace aside::server::etcd
