"""A raw Kafka connection for tests that speak to a listener byte by byte with raylog's own
codec (tests/unit/kafka/test_listener.py, tests/ray/kafka/)."""

from __future__ import annotations

import socket
import struct

from raylog.kafka import codec

#: Bound on any single read from the listener.
READ_TIMEOUT_S = 30.0


class Wire:
    """A raw Kafka connection: send requests (pipelined), read responses in order.

    ``address`` is ``"host:port"`` (IPv4); ``source`` the local address to connect from
    (another loopback address, 127.0.0.2, looks like another client host to the listener);
    ``receive_buffer_bytes`` bounds what the kernel takes in for a client that reads nothing.
    """

    def __init__(
        self,
        address: str,
        source: str | None = None,
        timeout_s: float = READ_TIMEOUT_S,
        receive_buffer_bytes: int | None = None,
    ):
        host, port = address.rsplit(":", 1)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        if receive_buffer_bytes is not None:  # (before connecting: it sets the TCP window)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        if source is not None:
            self.sock.bind((source, 0))
        self.sock.connect((host, int(port)))
        self.sent: list[codec.RequestHeader] = []
        self._ids = iter(range(1, 1 << 30))

    def send(self, api_key: codec.ApiKey, version: int, body: dict) -> codec.RequestHeader:
        header = codec.RequestHeader(api_key, version, next(self._ids), "wire-test")
        self.sock.sendall(b"".join(bytes(b) for b in codec.encode_request(header, body)))
        self.sent.append(header)
        return header

    def receive(self) -> tuple[codec.RequestHeader, dict]:
        header = self.sent.pop(0)
        size = struct.unpack(">i", self.exactly(4))[0]
        correlation_id, body = codec.decode_response(header.api_key, header.api_version, self.exactly(size))
        assert correlation_id == header.correlation_id
        return header, body

    def ask(self, api_key: codec.ApiKey, version: int, body: dict) -> dict:
        self.send(api_key, version, body)
        return self.receive()[1]

    def closed(self) -> bool:
        """Whether the listener closed the connection (reads EOF within the bound)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the listener closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
