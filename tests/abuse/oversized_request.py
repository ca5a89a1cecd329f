#!/usr/bin/python3
"""Oversized requests from a stock gRPC client (python3-grpcio) whose send
limit is off, as anyone can configure one.

Usage: oversized_request.py TARGET METHOD MIB CALLS

Sends CALLS concurrent calls of METHOD, each a MIB MiB message (a protobuf
whose field 1 is a string of that length: what a Pick's group or a
CreateGroup's name would be), and prints one line per call and a summary
to stdout:

  call=N status=RESOURCE_EXHAUSTED details=...
  event=oversized.done calls=N statuses=RESOURCE_EXHAUSTED:N,...
"""

import sys

import grpc


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def main():
    target, method, mib, calls = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                  int(sys.argv[4]))
    length = (mib << 20) - 6
    payload = b"\x0a" + varint(length) + b"x" * length
    channel = grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", -1),
                         ("grpc.max_receive_message_length", -1)])
    call = channel.unary_unary(method)
    futures = [call.future(payload, timeout=120) for _ in range(calls)]
    statuses = {}
    for i, f in enumerate(futures):
        try:
            f.result()
            code, details = "OK", ""
        except grpc.RpcError as e:
            code, details = e.code().name, e.details() or ""
        statuses[code] = statuses.get(code, 0) + 1
        print("call=%d status=%s details=%s" % (i, code, details[:200]),
              flush=True)
    print("event=oversized.done calls=%d statuses=%s" %
          (calls, ",".join("%s:%d" % kv for kv in sorted(statuses.items()))),
          flush=True)


if __name__ == "__main__":
    main()
