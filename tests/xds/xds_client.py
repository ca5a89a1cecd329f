"""A stock Python gRPC client for the xDS tests (Debian's grpcio 1.51).

It contains no Aside code: it dials xds:///NAME with grpcio alone and finds
its management server through the bootstrap named by GRPC_XDS_BOOTSTRAP,
as any xDS-enabled gRPC service would. Debian has no grpc_tools, so the
two one-field helloworld messages are encoded by hand.

    /usr/bin/python3 xds_client.py TARGET NAME [PAUSE_MS]

Calls helloworld.Greeter/SayHello (HelloRequest.name = NAME) one call at a
time (wait_for_ready, 5 s deadline), pausing PAUSE_MS (default 0) between
calls, until killed. Writes to stderr, in the key=value form the tests
read:
    event=client.started
    event=calls ok=N failed=M          about once a second, cumulative
    event=call.failed code=C message=... the first 20 failures
"""

import sys
import time

import grpc

FAILURES_LOGGED = 20


def encode_hello_request(name):
    """HelloRequest{name = 1}: tag 0x0a, length (< 128), UTF-8 bytes."""
    data = name.encode("utf-8")
    if len(data) >= 128:
        raise ValueError("name too long for a one-byte length")
    return b"\x0a" + bytes([len(data)]) + data


def decode_hello_reply(data):
    """HelloReply: the reply is not needed, only that the call succeeded."""
    return data


_CODES = {code: code.value[0] for code in grpc.StatusCode}


def main(argv):
    if len(argv) not in (3, 4):
        print("usage: xds_client.py TARGET NAME [PAUSE_MS]", file=sys.stderr)
        return 2
    target, name = argv[1], argv[2]
    pause = (int(argv[3]) if len(argv) == 4 else 0) / 1000.0
    channel = grpc.insecure_channel(target)
    say_hello = channel.unary_unary(
        "/helloworld.Greeter/SayHello",
        request_serializer=encode_hello_request,
        response_deserializer=decode_hello_reply,
    )
    print(f"event=client.started target={target} name={name}",
          file=sys.stderr, flush=True)
    ok = 0
    failed = 0
    last_summary = time.monotonic()
    while True:
        try:
            say_hello(name, timeout=5, wait_for_ready=True)
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
