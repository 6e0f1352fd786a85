"""A minimal Redis client for the tests' own checks (GET, SET, PTTL, ...), so that the tests
need nothing besides pytest and never go through redmutex to check redmutex."""

from __future__ import annotations

import socket


class RespError(Exception):
    """An error reply."""


class Resp:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def __call__(self, *args: object) -> object:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            if isinstance(arg, str):
                data = arg.encode()
            elif isinstance(arg, bytes):
                data = arg
            else:
                data = str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self._read()

    def _read(self) -> object:
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.reader.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError(f"unexpected reply {line!r}")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()
