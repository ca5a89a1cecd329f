#include "tests/testing/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace aside::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

absl::StatusOr<HttpResponse> HttpGet(
    const std::string& host, int port, const std::string& target,
    absl::Duration timeout,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  const auto expiry =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
  HttpResponse out;
  beast::error_code ec;
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(host, ec),
                                   static_cast<unsigned short>(port));
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("bad host ", host));
  }
  stream.expires_after(expiry);
  stream.async_connect(endpoint, [&](beast::error_code e) { ec = e; });
  io.run();
  if (ec) {
    return absl::UnavailableError(absl::StrCat("connect: ", ec.message()));
  }
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, absl::StrCat(host, ":", port));
  req.set(http::field::connection, "close");
  for (const auto& [name, value] : headers) {
    req.set(name, value);
  }
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  stream.expires_after(expiry);
  http::async_write(stream, req, [&](beast::error_code e, size_t) {
    ec = e;
    if (!ec) {
      http::async_read(stream, buffer, res,
                       [&](beast::error_code e2, size_t) { ec = e2; });
    }
  });
  io.restart();
  io.run();
  if (ec) {
    return absl::UnavailableError(absl::StrCat("http: ", ec.message()));
  }
  out.status = static_cast<int>(res.result_int());
  out.content_type = std::string(res[http::field::content_type]);
  out.body = res.body();
  return out;
}

}  // namespace aside::testing
