#include "tests/status/devtools.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <signal.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/json.h"
#include "tests/testing/http_client.h"

namespace aside::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using google::protobuf::Struct;
using google::protobuf::Value;

namespace {

absl::StatusOr<Struct> ParseObject(const std::string& json) {
  Struct s;
  if (!google::protobuf::util::JsonStringToMessage(json, &s).ok()) {
    return absl::InternalError(absl::StrCat("devtools: not JSON: ", json));
  }
  return s;
}

const Value* Get(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::string ToJson(const Value& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

}  // namespace

// One WebSocket to the page's DevTools endpoint; every operation runs the
// io_context for at most its timeout.
class HeadlessBrowser::Connection {
 public:
  Connection() : ws_(io_) {}

  absl::Status Open(int port, const std::string& path, absl::Duration timeout) {
    beast::error_code ec;
    asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"),
                                     static_cast<unsigned short>(port));
    beast::get_lowest_layer(ws_).async_connect(
        endpoint, [&](beast::error_code e) { ec = e; });
    if (!Run(timeout) || ec) {
      return absl::UnavailableError(
          absl::StrCat("devtools: connect: ", ec.message()));
    }
    ws_.async_handshake(absl::StrCat("127.0.0.1:", port), path,
                        [&](beast::error_code e) { ec = e; });
    if (!Run(timeout) || ec) {
      return absl::UnavailableError(
          absl::StrCat("devtools: handshake: ", ec.message()));
    }
    ws_.read_message_max(64 << 20);
    return absl::OkStatus();
  }

  absl::Status Send(const std::string& text, absl::Duration timeout) {
    beast::error_code ec;
    ws_.text(true);
    ws_.async_write(asio::buffer(text),
                    [&](beast::error_code e, size_t) { ec = e; });
    if (!Run(timeout) || ec) {
      return absl::UnavailableError(
          absl::StrCat("devtools: write: ", ec.message()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Receive(absl::Duration timeout) {
    beast::error_code ec;
    beast::flat_buffer buffer;
    ws_.async_read(buffer, [&](beast::error_code e, size_t) { ec = e; });
    if (!Run(timeout)) {
      return absl::DeadlineExceededError("devtools: no reply in time");
    }
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("devtools: read: ", ec.message()));
    }
    return beast::buffers_to_string(buffer.data());
  }

 private:
  // Runs the posted operation; false (and the socket closed) on timeout.
  bool Run(absl::Duration timeout) {
    io_.restart();
    io_.run_for(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    if (!io_.stopped()) {
      beast::get_lowest_layer(ws_).close();
      io_.restart();
      io_.run_for(std::chrono::seconds(1));
      return false;
    }
    return true;
  }

  asio::io_context io_;
  websocket::stream<beast::tcp_stream> ws_;
};

absl::StatusOr<std::unique_ptr<HeadlessBrowser>> HeadlessBrowser::Open(
    const std::string& url, int width, int height, absl::Duration timeout) {
  auto browser = std::unique_ptr<HeadlessBrowser>(new HeadlessBrowser());
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(
      {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
       "--disable-dev-shm-usage", "--no-first-run",
       "--no-default-browser-check", "--disable-extensions",
       "--disable-background-networking", "--disable-component-update",
       "--disable-sync", "--hide-scrollbars", "--mute-audio",
       absl::StrCat("--user-data-dir=", browser->profile_.path()),
       "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
       absl::StrCat("--window-size=", width, ",", height), url});
  if (!process.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chromium (scripts/install-deps.sh installs it): ",
                     process.status().message()));
  }
  browser->process_ = *std::move(process);
  // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
  absl::StatusOr<std::string> line =
      browser->process_->WaitForLine("DevTools listening on", timeout);
  if (!line.ok()) {
    return absl::UnavailableError(
        absl::StrCat("chromium did not start: ", line.status().message(), "\n",
                     browser->process_->StderrText()));
  }
  const size_t at = line->find("ws://127.0.0.1:");
  int port = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(
          line->substr(at + 15, line->find('/', at + 15) - (at + 15)), &port)) {
    return absl::InternalError(absl::StrCat("devtools: cannot read ", *line));
  }
  // The page target (the browser opened it on `url`).
  const absl::Time deadline = absl::Now() + timeout;
  std::string path;
  while (path.empty()) {
    absl::StatusOr<HttpResponse> list =
        HttpGet("127.0.0.1", port, "/json/list", absl::Seconds(5));
    if (list.ok() && list->status == 200) {
      absl::StatusOr<Struct> parsed =
          ParseObject(absl::StrCat("{\"targets\":", list->body, "}"));
      if (!parsed.ok()) {
        return parsed.status();
      }
      for (const Value& t : Get(*parsed, "targets")->list_value().values()) {
        const Value* type = Get(t.struct_value(), "type");
        const Value* ws = Get(t.struct_value(), "webSocketDebuggerUrl");
        if (type != nullptr && type->string_value() == "page" &&
            ws != nullptr) {
          const std::string& u = ws->string_value();
          const size_t slash = u.find("/devtools/");
          if (slash != std::string::npos) {
            path = u.substr(slash);
          }
        }
      }
    }
    if (path.empty()) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError("devtools: no page target");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  browser->connection_ = std::make_unique<Connection>();
  if (absl::Status s = browser->connection_->Open(port, path, timeout);
      !s.ok()) {
    return s;
  }
  return browser;
}

HeadlessBrowser::~HeadlessBrowser() {
  if (connection_ != nullptr) {
    (void)Call("Browser.close", "{}", absl::Seconds(2));
    connection_.reset();
  }
  if (process_ != nullptr) {
    if (!process_->Wait(absl::Seconds(5)).has_value()) {
      process_->Signal(SIGTERM);
      process_->Wait(absl::Seconds(5));
    }
  }
}

absl::StatusOr<std::string> HeadlessBrowser::Call(
    const std::string& method, const std::string& params_json,
    absl::Duration timeout) {
  const int id = next_id_++;
  std::string request = absl::StrCat("{\"id\":", id, ",\"method\":");
  AppendJsonString(&request, method);
  absl::StrAppend(&request, ",\"params\":", params_json, "}");
  if (absl::Status s = connection_->Send(request, timeout); !s.ok()) {
    return s;
  }
  const absl::Time deadline = absl::Now() + timeout;
  // Skip events and replies to anything else until ours arrives.
  while (true) {
    absl::StatusOr<std::string> reply = connection_->Receive(
        std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!reply.ok()) {
      return reply.status();
    }
    absl::StatusOr<Struct> message = ParseObject(*reply);
    if (!message.ok()) {
      return message.status();
    }
    const Value* got = Get(*message, "id");
    if (got == nullptr || static_cast<int>(got->number_value()) != id) {
      continue;
    }
    if (const Value* error = Get(*message, "error"); error != nullptr) {
      return absl::InternalError(
          absl::StrCat("devtools: ", method, ": ", ToJson(*error)));
    }
    const Value* result = Get(*message, "result");
    return result == nullptr ? std::string("{}") : ToJson(*result);
  }
}

absl::StatusOr<std::string> HeadlessBrowser::Evaluate(
    const std::string& expression, absl::Duration timeout) {
  std::string params = "{\"expression\":";
  AppendJsonString(&params, expression);
  params += ",\"returnByValue\":true}";
  absl::StatusOr<std::string> result =
      Call("Runtime.evaluate", params, timeout);
  if (!result.ok()) {
    return result.status();
  }
  absl::StatusOr<Struct> r = ParseObject(*result);
  if (!r.ok()) {
    return r.status();
  }
  if (const Value* e = Get(*r, "exceptionDetails"); e != nullptr) {
    return absl::InternalError(
        absl::StrCat("page: ", expression, ": ", ToJson(*e)));
  }
  const Value* remote = Get(*r, "result");
  if (remote == nullptr) {
    return std::string("null");
  }
  const Value* value = Get(remote->struct_value(), "value");
  return value == nullptr ? std::string("null") : ToJson(*value);
}

absl::StatusOr<std::string> HeadlessBrowser::EvaluateString(
    const std::string& expression) {
  absl::StatusOr<std::string> json = Evaluate(expression);
  if (!json.ok()) {
    return json.status();
  }
  Value v;
  if (!google::protobuf::util::JsonStringToMessage(*json, &v).ok()) {
    return absl::InternalError(absl::StrCat("page: not JSON: ", *json));
  }
  return v.string_value();
}

absl::StatusOr<std::string> HeadlessBrowser::Screenshot(
    absl::Duration timeout) {
  absl::StatusOr<std::string> result =
      Call("Page.captureScreenshot",
           "{\"format\":\"png\",\"captureBeyondViewport\":true}", timeout);
  if (!result.ok()) {
    return result.status();
  }
  absl::StatusOr<Struct> r = ParseObject(*result);
  if (!r.ok()) {
    return r.status();
  }
  const Value* data = Get(*r, "data");
  std::string png;
  if (data == nullptr || !absl::Base64Unescape(data->string_value(), &png)) {
    return absl::InternalError("devtools: screenshot without data");
  }
  return png;
}

bool HeadlessBrowser::WaitFor(const std::string& expression,
                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> v = Evaluate(expression);
    if (v.ok() && *v == "true") {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace aside::testing
