// One accepted connection of the HTTP server (http_server_internal.h).
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <memory>
#include <string>
#include <utility>

#include "server/net/http_server_internal.h"

namespace aside::server::http_internal {

Connection::~Connection() {
  server_->Released(this, peer_, reason_.value_or(CloseReason::kError));
}

void Connection::Start() {
  Arm(server_->options().header_timeout, CloseReason::kHeaderTimeout);
  ReadHeader();
}

void Connection::Arm(absl::Duration timeout, CloseReason reason) {
  timer_.expires_after(ToChrono(timeout));
  timer_.async_wait([self = shared_from_this(), seq = ++timer_seq_,
                     reason](const beast::error_code& ec) {
    if (!ec && seq == self->timer_seq_) {
      self->Close(reason);
    }
  });
}

void Connection::Close(CloseReason reason) {
  if (reason_.has_value()) {
    return;
  }
  reason_ = reason;
  ++timer_seq_;
  beast::error_code ignored;
  timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void Connection::WaitForRequest() {
  Arm(server_->options().idle_timeout, CloseReason::kIdleTimeout);
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](const beast::error_code& ec) {
                       if (self->reason_.has_value()) {
                         return;
                       }
                       if (ec) {
                         self->Close(CloseReason::kError);
                         return;
                       }
                       self->Arm(self->server_->options().header_timeout,
                                 CloseReason::kHeaderTimeout);
                       self->ReadHeader();
                     });
}

void Connection::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(server_->options().max_header_bytes);
  bhttp::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](const beast::error_code& ec, size_t) {
        self->OnHeader(ec);
      });
}

void Connection::OnHeader(const beast::error_code& ec) {
  if (reason_.has_value()) {
    return;  // timed out or shut down
  }
  if (ec == bhttp::error::end_of_stream ||
      ec == bhttp::error::partial_message || ec == asio::error::eof ||
      ec == asio::error::connection_reset) {
    Close(CloseReason::kPeerClosed);
    return;
  }
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    RespondError(431, "request header too large\n");
    return;
  }
  if (ec && ec.category() ==
                bhttp::make_error_code(bhttp::error::bad_target).category()) {
    RespondError(400, "malformed request\n");
    return;
  }
  if (ec) {
    Close(CloseReason::kError);
    return;
  }
  if (!proven) {
    proven = true;
    server_->Proven(this);
  }
  const auto& req = parser_->get();
  const bool has_body =
      parser_->chunked() || parser_->content_length().value_or(0) > 0;
  HttpRequest request;
  request.method = View(req.method_string());
  request.target = View(req.target());
  const size_t q = request.target.find('?');
  request.path = request.target.substr(0, q);
  if (q != absl::string_view::npos) {
    request.query = request.target.substr(q + 1);
  }
  for (const auto& field : req) {
    request.headers.emplace_back(View(field.name_string()),
                                 View(field.value()));
  }
  std::string route;
  HttpResponse response = server_->Dispatch(request, &route);
  if (has_body && response.status < 400) {
    response = HttpResponse{.status = 413,
                            .body = "request bodies are not accepted\n"};
  }
  const bool keep_alive = req.keep_alive() && !has_body && !server_->stopping();
  Respond(std::move(response), route, req.version(),
          req.method() == bhttp::verb::head, keep_alive,
          has_body ? CloseReason::kBadRequest : CloseReason::kNotKeepAlive);
}

void Connection::RespondError(int status, std::string body) {
  Respond(HttpResponse{.status = status, .body = std::move(body)}, "other", 11,
          /*head=*/false, /*keep_alive=*/false, CloseReason::kBadRequest);
}

void Connection::Respond(HttpResponse response, const std::string& route,
                         unsigned version, bool head, bool keep_alive,
                         CloseReason close_reason) {
  if (response.status < 200 || response.status > 599) {
    response = HttpResponse{.status = 500, .body = "internal error\n"};
  }
  server_->CountRequest(route, response.status);
  auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
      static_cast<bhttp::status>(response.status), version);
  res->set(bhttp::field::content_type, response.content_type);
  for (auto& [name, value] : response.headers) {
    res->set(name, value);
  }
  res->content_length(response.body.size());
  res->keep_alive(keep_alive);
  if (!head) {
    res->body() = std::move(response.body);
  }
  Arm(server_->options().write_timeout, CloseReason::kWriteTimeout);
  bhttp::async_write(socket_, *res,
                     [self = shared_from_this(), res, keep_alive, close_reason](
                         const beast::error_code& ec, size_t) {
                       if (self->reason_.has_value()) {
                         return;
                       }
                       if (ec) {
                         self->Close(ec == asio::error::broken_pipe ||
                                             ec == asio::error::connection_reset
                                         ? CloseReason::kPeerClosed
                                         : CloseReason::kError);
                         return;
                       }
                       if (!keep_alive) {
                         self->Close(close_reason);
                         return;
                       }
                       if (self->buffer_.size() > 0) {
                         // A pipelined request is already here.
                         self->Arm(self->server_->options().header_timeout,
                                   CloseReason::kHeaderTimeout);
                         self->ReadHeader();
                       } else {
                         self->WaitForRequest();
                       }
                     });
}

}  // namespace aside::server::http_internal
