#!/usr/bin/python3
"""A backend that answers Aside's own calls with oversized messages: a
stock gRPC server (python3-grpcio) whose send limit is off.

Usage: hostile_backend.py MIB

Serves grpc.health.v1.Health/Check and the ORCA stream
(xds.service.orca.v3.OpenRcaService/StreamCoreMetrics) on 127.0.0.1:0,
answering each with one MIB MiB message (unknown field 100, a string),
prints "event=hostile.listening port=N" to stderr once it listens, and runs until it is killed
(10 minutes at most).
"""

import sys
import threading

from concurrent import futures

import grpc


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def main():
    mib = int(sys.argv[1])
    length = (mib << 20) - 8
    # Field 100, length-delimited: a message any parser skips.
    payload = varint((100 << 3) | 2) + varint(length) + b"x" * length
    done = threading.Event()

    def check(request, context):
        return payload

    def stream(request, context):
        yield payload
        done.wait(60)

    handlers = {
        "grpc.health.v1.Health": {
            "Check": grpc.unary_unary_rpc_method_handler(check),
        },
        "xds.service.orca.v3.OpenRcaService": {
            "StreamCoreMetrics": grpc.unary_stream_rpc_method_handler(stream),
        },
    }
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_send_message_length", -1),
                 ("grpc.max_receive_message_length", -1)])
    for service, methods in handlers.items():
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, methods),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"event=hostile.listening port={port}", file=sys.stderr,
          flush=True)
    done.wait(600)
    server.stop(0)


if __name__ == "__main__":
    main()
