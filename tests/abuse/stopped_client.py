#!/usr/bin/python3
"""A client that stops reading: a stock gRPC client (python3-grpcio) that
makes one Pick and opens one Watch stream on GROUP, reads its first
message, prints "event=stopped_client.ready" to stderr and waits (10
minutes at most) for the test to SIGSTOP it.

Usage: stopped_client.py TARGET GROUP
"""

import sys
import time

import grpc


def main():
    target, group = sys.argv[1], sys.argv[2].encode()
    field = b"\x0a" + bytes([len(group)]) + group  # field 1: the group
    channel = grpc.insecure_channel(target)
    channel.unary_unary("/aside.v1.LoadBalancer/Pick")(field, timeout=10)
    watch = channel.unary_stream("/aside.v1.LoadBalancer/Watch")(field)
    next(watch)
    print("event=stopped_client.ready", file=sys.stderr, flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
