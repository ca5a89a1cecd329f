#include "server/store/etcd_store.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "lib/status_macros.h"
#include "server/base/log.h"
#include "server/base/read_file.h"

namespace aside::server {

absl::StatusOr<v1::Group> ParseStoredGroup(const std::string& name,
                                           const std::string& value) {
  v1::Group g;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (auto s = google::protobuf::util::JsonStringToMessage(value, &g, options);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not an aside.v1.Group in JSON: ", s.message().as_string()));
  }
  if (g.name() != name) {
    return absl::InvalidArgumentError(
        absl::StrCat("the value names group '", g.name(),
                     "' but the key names '", name, "'"));
  }
  return g;
}

absl::StatusOr<std::string> EncodeStoredGroup(const v1::Group& definition) {
  std::string value;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(definition, &value,
                                                           options);
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("group '", definition.name(),
                     "': cannot encode: ", s.message().as_string()));
  }
  return value;
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Create(
    const StoreConfig& config, Metrics* metrics, const BackendRelay* relay) {
  if (config.endpoints.empty()) {
    return absl::InvalidArgumentError("store.etcd.endpoints: at least one");
  }
  etcd::EtcdClientOptions options;
  options.endpoints = config.endpoints;
  if (relay != nullptr) {
    options.route_channel = [relay, max = options.max_response_bytes](
                                const std::string& address,
                                grpc::ChannelArguments* args) {
      return relay->Route(address, "etcd", max, args);
    };
  }
  options.dial_timeout = config.dial_timeout;
  options.request_timeout = config.request_timeout;
  options.keepalive_time = config.keepalive_time;
  options.keepalive_timeout = config.keepalive_timeout;
  options.endpoint_order = config.endpoint_order == "listed"
                               ? etcd::EndpointOrder::kListed
                               : etcd::EndpointOrder::kSpread;
  if (!config.ca_file.empty() || !config.cert_file.empty()) {
    options.tls = etcd::TlsOptions{.ca_file = config.ca_file,
                                   .cert_file = config.cert_file,
                                   .key_file = config.key_file};
  }
  if (!config.credentials_file.empty()) {
    ASIDE_ASSIGN_OR_RETURN(
        std::string text,
        ReadWholeFile(config.credentials_file, "etcd credentials file"));
    absl::string_view line = absl::StripTrailingAsciiWhitespace(text);
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0 ||
        line.find('\n') != absl::string_view::npos) {
      return absl::FailedPreconditionError(
          absl::StrCat(config.credentials_file,
                       ": expected one line \"username:password\""));
    }
    options.username = std::string(line.substr(0, colon));
    options.password = std::string(line.substr(colon + 1));
  }
  ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient> client,
                         etcd::EtcdClient::Create(std::move(options)));
  return std::unique_ptr<EtcdStore>(
      new EtcdStore(std::move(client), config.prefix, metrics));
}

EtcdStore::EtcdStore(std::unique_ptr<etcd::EtcdClient> client,
                     std::string prefix, Metrics* metrics)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      groups_prefix_(prefix_ + "groups/"),
      location_(absl::StrCat("etcd ", absl::StrJoin(client_->endpoints(), ","),
                             " prefix ", prefix_)),
      metrics_(metrics) {
  if (metrics_ != nullptr) {
    up_gauge_ = &metrics_->store_up.Add({{"type", "etcd"}});
    revision_gauge_ = &metrics_->store_revision.Add({{"type", "etcd"}});
  }
}

EtcdStore::~EtcdStore() { StopFollowing(); }

std::string EtcdStore::GroupKey(const std::string& name) const {
  return groups_prefix_ + name;
}

void EtcdStore::NoteError(absl::string_view kind, const std::string& message) {
  if (metrics_ != nullptr) {
    metrics_->store_errors.Add({{"kind", std::string(kind)}}).Increment();
  }
  aside::MutexLock lock(&mu_);
  last_error_ = message;
  last_error_at_ = absl::Now();
}

absl::Status EtcdStore::Failed(absl::string_view what, const absl::Status& s) {
  absl::StatusCode code = s.code();
  if (code == absl::StatusCode::kDeadlineExceeded ||
      code == absl::StatusCode::kCancelled) {
    code = absl::StatusCode::kUnavailable;
  }
  std::string message =
      absl::StrCat("store ", location_, ": ", what, " failed: ", s.message());
  NoteError(code == absl::StatusCode::kUnavailable ? "unavailable" : "request",
            message);
  return absl::Status(code, std::move(message));
}

absl::StatusOr<StoreSnapshot> EtcdStore::Load() {
  absl::StatusOr<etcd::RangeResult> range = client_->Range(prefix_);
  if (!range.ok()) {
    return Failed("reading the prefix", range.status());
  }
  StoreSnapshot out;
  out.revision = range->revision;
  for (etcd::KeyValue& kv : range->kvs) {
    if (kv.key == prefix_ + "session_key") {
      out.session_key = std::move(kv.value);
      continue;
    }
    if (!absl::StartsWith(kv.key, groups_prefix_)) {
      continue;
    }
    const std::string name = kv.key.substr(groups_prefix_.size());
    absl::StatusOr<v1::Group> g = ParseStoredGroup(name, kv.value);
    if (!g.ok()) {
      Log(LogLevel::kError, "store.bad_value",
          {{"key", kv.key},
           {"revision", absl::StrCat(kv.mod_revision)},
           {"error", std::string(g.status().message())}});
      NoteError("bad_value", absl::StrCat(kv.key, ": ", g.status().message()));
      v1::Group placeholder;
      placeholder.set_name(name);
      out.bad.push_back({std::move(placeholder), kv.mod_revision});
      continue;
    }
    out.groups.push_back({*std::move(g), kv.mod_revision});
  }
  return out;
}

absl::StatusOr<StoreChange> EtcdStore::ReadGroup(const std::string& name) {
  absl::StatusOr<std::optional<etcd::KeyValue>> kv =
      client_->Get(GroupKey(name));
  if (!kv.ok()) {
    return Failed(absl::StrCat("reading group '", name, "'"), kv.status());
  }
  StoreChange out{.name = name};
  if (!kv->has_value()) {
    return out;
  }
  out.revision = (*kv)->mod_revision;
  absl::StatusOr<v1::Group> g = ParseStoredGroup(name, (*kv)->value);
  if (g.ok()) {
    out.definition = *std::move(g);
  } else {
    out.bad_value = true;
  }
  return out;
}

absl::StatusOr<int64_t> EtcdStore::PutGroup(const v1::Group& definition,
                                            int64_t expected_revision) {
  ASIDE_ASSIGN_OR_RETURN(std::string value, EncodeStoredGroup(definition));
  const std::string key = GroupKey(definition.name());
  absl::StatusOr<etcd::TxnResult> txn =
      client_->Txn({expected_revision == 0
                        ? etcd::Compare::Absent(key)
                        : etcd::Compare::ModRevision(key, expected_revision)},
                   {etcd::Op::Put(key, value)});
  if (!txn.ok()) {
    return Failed(absl::StrCat("writing group '", definition.name(), "'"),
                  txn.status());
  }
  if (!txn->succeeded) {
    if (metrics_ != nullptr) {
      metrics_->store_errors.Add({{"kind", "conflict"}}).Increment();
    }
    return absl::AbortedError(
        absl::StrCat("group '", definition.name(),
                     "' was changed through another replica (store revision ",
                     txn->revision, "); read it again and retry"));
  }
  return txn->revision;
}

absl::StatusOr<int64_t> EtcdStore::DeleteGroup(const std::string& name,
                                               int64_t expected_revision) {
  const std::string key = GroupKey(name);
  absl::StatusOr<etcd::TxnResult> txn =
      client_->Txn({etcd::Compare::ModRevision(key, expected_revision)},
                   {etcd::Op::Delete(key)});
  if (!txn.ok()) {
    return Failed(absl::StrCat("deleting group '", name, "'"), txn.status());
  }
  if (!txn->succeeded) {
    if (metrics_ != nullptr) {
      metrics_->store_errors.Add({{"kind", "conflict"}}).Increment();
    }
    return absl::AbortedError(
        absl::StrCat("group '", name,
                     "' was changed through another replica (store revision ",
                     txn->revision, "); read it again and retry"));
  }
  return txn->revision;
}

std::vector<absl::StatusOr<int64_t>> EtcdStore::Commit(
    const std::vector<StoreWrite>& writes) {
  if (writes.size() == 1) {
    // Alone: exactly the Txn PutGroup or DeleteGroup makes.
    const StoreWrite& w = writes[0];
    return {w.definition.has_value()
                ? PutGroup(*w.definition, w.expected_revision)
                : DeleteGroup(w.name, w.expected_revision)};
  }
  std::vector<absl::StatusOr<int64_t>> out(writes.size(), int64_t{0});
  // The writes still to make, by index, with their keys and operations.
  struct Live {
    size_t index;
    std::string key;
    etcd::Compare guard;
    etcd::Op op;
  };
  std::vector<Live> live;
  live.reserve(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    const StoreWrite& w = writes[i];
    std::string key = GroupKey(w.name);
    if (!w.definition.has_value()) {
      live.push_back({i, key,
                      etcd::Compare::ModRevision(key, w.expected_revision),
                      etcd::Op::Delete(key)});
      continue;
    }
    absl::StatusOr<std::string> value = EncodeStoredGroup(*w.definition);
    if (!value.ok()) {
      out[i] = value.status();
      continue;
    }
    live.push_back({i, key,
                    w.expected_revision == 0
                        ? etcd::Compare::Absent(key)
                        : etcd::Compare::ModRevision(key, w.expected_revision),
                    etcd::Op::Put(key, *std::move(value))});
  }
  auto what = [&](const StoreWrite& w) {
    return w.definition.has_value()
               ? absl::StrCat("writing group '", w.name, "'")
               : absl::StrCat("deleting group '", w.name, "'");
  };
  // Each round either commits every live write or finds at least one whose
  // guard failed (ABORTED, out of the next round): at most one round more
  // than there are conflicts.
  while (!live.empty()) {
    std::vector<etcd::Compare> compares;
    std::vector<etcd::Op> success, failure;
    compares.reserve(live.size());
    success.reserve(live.size());
    failure.reserve(live.size());
    for (const Live& l : live) {
      compares.push_back(l.guard);
      success.push_back(l.op);
      failure.push_back(etcd::Op::Get(l.key));
    }
    absl::StatusOr<etcd::TxnResult> txn =
        client_->Txn(compares, success, failure);
    if (!txn.ok()) {
      for (const Live& l : live) {
        out[l.index] = Failed(what(writes[l.index]), txn.status());
      }
      break;
    }
    if (txn->succeeded) {
      for (const Live& l : live) {
        out[l.index] = txn->revision;
      }
      break;
    }
    // The failure branch read every key at the Txn's revision: a guard
    // failed exactly where the key's mod_revision (0: absent) is not the
    // expected one.
    std::vector<Live> next;
    for (size_t j = 0; j < live.size(); ++j) {
      const StoreWrite& w = writes[live[j].index];
      const int64_t now = j < txn->reads.size() && !txn->reads[j].empty()
                              ? txn->reads[j][0].mod_revision
                              : 0;
      if (now == w.expected_revision) {
        next.push_back(std::move(live[j]));
        continue;
      }
      if (metrics_ != nullptr) {
        metrics_->store_errors.Add({{"kind", "conflict"}}).Increment();
      }
      out[live[j].index] = absl::AbortedError(
          absl::StrCat("group '", w.name,
                       "' was changed through another replica (store revision ",
                       txn->revision, "); read it again and retry"));
    }
    if (next.size() == live.size()) {
      // No guard failed by the reads, yet the Txn failed: not expected of
      // etcd; answer rather than loop.
      for (const Live& l : live) {
        out[l.index] = Failed(
            what(writes[l.index]),
            absl::InternalError("the batch failed with every guard holding"));
      }
      break;
    }
    live = std::move(next);
  }
  return out;
}

absl::StatusOr<std::string> EtcdStore::SessionKey(const std::string& proposed) {
  absl::StatusOr<etcd::CreateResult> r =
      client_->CreateIfAbsent(prefix_ + "session_key", proposed);
  if (!r.ok()) {
    return Failed("creating the session key", r.status());
  }
  if (r->created) {
    return proposed;
  }
  if (!r->existing.has_value() || r->existing->value.size() < 16) {
    return absl::FailedPreconditionError(
        absl::StrCat("store ", location_, ": ", prefix_,
                     "session_key holds fewer than 16 bytes"));
  }
  return r->existing->value;
}

void EtcdStore::SetUp(bool up) {
  if (up_gauge_ != nullptr) {
    up_gauge_->Set(up ? 1 : 0);
  }
  up_ = up;
}

void EtcdStore::Follow(std::optional<int64_t> revision, FeedHandlers handlers) {
  handlers_ = std::move(handlers);
  {
    aside::MutexLock lock(&mu_);
    revision_ = revision;
    SetUp(revision.has_value());
    if (revision.has_value() && revision_gauge_ != nullptr) {
      revision_gauge_->Set(static_cast<double>(*revision));
    }
  }
  follower_ = std::make_unique<etcd::Follower>(
      client_.get(), groups_prefix_,
      etcd::Follower::Handlers{
          .snapshot = [this] { return TakeSnapshot(); },
          .on_events = [this](etcd::WatchBatch b) { Deliver(std::move(b)); },
          .on_unavailable =
              [this](const absl::Status& s) {
                Log(LogLevel::kWarn, "store.unavailable",
                    {{"store", location_},
                     {"error", std::string(s.message())},
                     {"action", "serving the last state; retrying"}});
              },
          .on_compacted =
              [this](int64_t compact_revision) {
                Log(LogLevel::kWarn, "store.compacted",
                    {{"store", location_},
                     {"compact_revision", absl::StrCat(compact_revision)},
                     {"action", "reloading a snapshot"}});
                const std::string cause = absl::StrCat(
                    "history compacted at revision ", compact_revision);
                NoteError("compacted", cause);
                aside::MutexLock lock(&mu_);
                down_cause_ = cause + "; reloading a snapshot";
              },
          .on_disconnected =
              [this](const absl::Status& s) {
                bool was_up = false;
                {
                  aside::MutexLock lock(&mu_);
                  if (stopping_) {
                    return;  // the watch this process cancelled
                  }
                  was_up = up_;
                  down_cause_ = std::string(s.message());
                }
                if (was_up) {
                  Log(LogLevel::kWarn, "store.watch_lost",
                      {{"store", location_},
                       {"error", std::string(s.message())},
                       {"action", "serving the last state; resuming"}});
                }
                NoteError("watch", std::string(s.message()));
              },
          .on_connected =
              [this](bool up) {
                aside::MutexLock lock(&mu_);
                if (up && !up_) {
                  Log(LogLevel::kInfo, "store.up", {{"store", location_}});
                } else if (!up && up_ && stopping_) {
                  Log(LogLevel::kInfo, "store.unfollowed",
                      {{"store", location_}, {"reason", "shutting down"}});
                } else if (!up && up_) {
                  Log(LogLevel::kWarn, "store.down",
                      {{"store", location_},
                       {"error",
                        down_cause_.empty() ? "not watching" : down_cause_},
                       {"action", "serving the last state; retrying"}});
                }
                SetUp(up);
              }});
  follower_->Start(revision);
}

void EtcdStore::StopFollowing() {
  {
    aside::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (follower_ != nullptr) {
    follower_->Stop();
  }
}

absl::StatusOr<int64_t> EtcdStore::TakeSnapshot() {
  ASIDE_ASSIGN_OR_RETURN(StoreSnapshot s, Load());
  handlers_.on_snapshot(s);
  Log(LogLevel::kInfo, "store.synced",
      {{"store", location_},
       {"revision", absl::StrCat(s.revision)},
       {"groups", absl::StrCat(s.groups.size())}});
  aside::MutexLock lock(&mu_);
  revision_ = s.revision;
  if (revision_gauge_ != nullptr) {
    revision_gauge_->Set(static_cast<double>(s.revision));
  }
  return s.revision;
}

void EtcdStore::Deliver(etcd::WatchBatch batch) {
  std::vector<StoreChange> changes;
  for (etcd::Event& e : batch.events) {
    if (!absl::StartsWith(e.kv.key, groups_prefix_)) {
      continue;
    }
    StoreChange c;
    c.name = e.kv.key.substr(groups_prefix_.size());
    c.revision = e.kv.mod_revision;
    if (e.type == etcd::Event::Type::kPut) {
      absl::StatusOr<v1::Group> g = ParseStoredGroup(c.name, e.kv.value);
      if (g.ok()) {
        c.definition = *std::move(g);
      } else {
        Log(LogLevel::kError, "store.bad_value",
            {{"key", e.kv.key},
             {"revision", absl::StrCat(e.kv.mod_revision)},
             {"error", std::string(g.status().message())}});
        NoteError("bad_value",
                  absl::StrCat(e.kv.key, ": ", g.status().message()));
        c.bad_value = true;
      }
    }
    changes.push_back(std::move(c));
  }
  if (!changes.empty()) {
    handlers_.on_changes(changes, batch.revision);
  }
  aside::MutexLock lock(&mu_);
  revision_ = batch.revision;
  if (revision_gauge_ != nullptr) {
    revision_gauge_->Set(static_cast<double>(batch.revision));
  }
}

StoreState EtcdStore::state() const {
  aside::MutexLock lock(&mu_);
  StoreState s;
  s.type = "etcd";
  s.location = location_;
  s.up = up_;
  s.revision = revision_.value_or(0);
  s.last_error = last_error_;
  s.last_error_at = last_error_at_;
  return s;
}

}  // namespace aside::server
