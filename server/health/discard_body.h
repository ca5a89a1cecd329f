// Internal: the body type of the HTTP health probe's response parser. It
// counts nothing and stores nothing: the probe needs the status, and the
// parser's body_limit bounds how much a backend may send.
#ifndef ASIDE_SERVER_HEALTH_DISCARD_BODY_H_
#define ASIDE_SERVER_HEALTH_DISCARD_BODY_H_

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>

namespace aside::server::health_internal {

struct DiscardBody {
  struct value_type {};
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type&) {}
    void init(const boost::optional<std::uint64_t>&,
              boost::system::error_code& ec) {
      ec = {};
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers,
                    boost::system::error_code& ec) {
      ec = {};
      return boost::asio::buffer_size(buffers);
    }
    void finish(boost::system::error_code& ec) { ec = {}; }
  };
};

}  // namespace aside::server::health_internal

#endif  // ASIDE_SERVER_HEALTH_DISCARD_BODY_H_
