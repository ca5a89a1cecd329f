"""A stock Python gRPC client for the grpclb tests (Debian's grpcio 1.51).

It contains no Aside code: it uses only grpcio, and finds its balancer the
way any gRPC service would, through the DNS SRV record _grpclb._tcp.<host>
with the grpclb policy chosen by service config. Debian has no grpc_tools,
so the two one-field helloworld messages are encoded by hand.

    /usr/bin/python3 stock_client.py TARGET NAME [PAUSE_MS]

Calls helloworld.Greeter/SayHello (HelloRequest.name = NAME) one call at a
time, pausing PAUSE_MS (default 3) between calls, until killed. Writes to
stderr, in the key=value form the tests read (as the C++ stock client does):
    event=client.started
    event=calls ok=N failed=M          about once a second, cumulative
    event=call.failed code=C message=... the first 20 failures
"""

import sys
import time

import grpc

SERVICE_CONFIG = '{"loadBalancingConfig":[{"grpclb":{}}]}'
FAILURES_LOGGED = 20


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_hello_request(name):
    """HelloRequest{name = 1}: tag 0x0a, length, UTF-8 bytes."""
    data = name.encode("utf-8")
    return b"\x0a" + _varint(len(data)) + data


def decode_hello_reply(data):
    """HelloReply{message = 1}: returns the message (other fields skipped)."""
    pos = 0
    message = ""
    while pos < len(data):
        key = data[pos]
        pos += 1
        if key & 0x07 != 2:
            raise ValueError("unexpected wire type in HelloReply")
        length = 0
        shift = 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if key >> 3 == 1:
            message = data[pos:pos + length].decode("utf-8")
        pos += length
    return message


# GRPC status codes as numbers, matching the C++ client's output.
_CODES = {code: code.value[0] for code in grpc.StatusCode}


def main(argv):
    if len(argv) not in (3, 4):
        print("usage: stock_client.py TARGET NAME [PAUSE_MS]", file=sys.stderr)
        return 2
    target, name = argv[1], argv[2]
    pause = (int(argv[3]) if len(argv) == 4 else 3) / 1000.0
    channel = grpc.insecure_channel(
        target,
        options=[
            ("grpc.dns_enable_srv_queries", 1),
            ("grpc.service_config", SERVICE_CONFIG),
        ],
    )
    say_hello = channel.unary_unary(
        "/helloworld.Greeter/SayHello",
        request_serializer=encode_hello_request,
        response_deserializer=decode_hello_reply,
    )
    print(f"event=client.started target={target} name={name}", file=sys.stderr,
          flush=True)
    ok = 0
    failed = 0
    last_summary = time.monotonic()
    while True:
        try:
            say_hello(name, timeout=5)
            ok += 1
        except grpc.RpcError as e:
            failed += 1
            if failed <= FAILURES_LOGGED:
                print(f"event=call.failed code={_CODES.get(e.code(), -1)} "
                      f"message={e.details()}", file=sys.stderr, flush=True)
        now = time.monotonic()
        if now - last_summary >= 1:
            last_summary = now
            print(f"event=calls ok={ok} failed={failed}", file=sys.stderr,
                  flush=True)
        if pause > 0:
            time.sleep(pause)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
