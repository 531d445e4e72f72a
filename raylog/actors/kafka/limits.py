"""What bounds a Kafka listener's resources across its connections, as a Kafka broker bounds
them: :class:`ConnectionQuotas` (Kafka's ``ConnectionQuotas``: ``max.connections`` and
``max.connections.per.ip``) and :class:`RequestMemoryPool` (Kafka's ``SimpleMemoryPool``
behind ``queued.max.request.bytes``).

Both are used from the listener's one asyncio loop only (no locks).
"""

from __future__ import annotations

import asyncio
from collections import Counter

#: The cause :meth:`ConnectionQuotas.admit` names for a connection over each limit.
MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"


class ConnectionQuotas:
    """Connections held, in total and per client address."""

    def __init__(self, max_connections: int, max_connections_per_ip: int):
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._by_ip: Counter[str] = Counter()
        self._total = 0

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip`` and return None, or the setting it would exceed
        (:data:`MAX_CONNECTIONS`, :data:`MAX_CONNECTIONS_PER_IP`; then it is not counted)."""
        if self._total >= self.max_connections:
            return MAX_CONNECTIONS
        if self._by_ip[ip] >= self.max_connections_per_ip:
            return MAX_CONNECTIONS_PER_IP
        self._total += 1
        self._by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        """An admitted connection from ``ip`` closed."""
        self._total -= 1
        self._by_ip[ip] -= 1
        if not self._by_ip[ip]:
            del self._by_ip[ip]


class RequestMemoryPool:
    """Bytes of requests read and not yet answered, across connections, at most ``size_bytes``
    (-1: no limit). As Kafka's pool (not strict), a request is let in while any byte is free,
    so the pool may be overdrawn by one request and a request larger than the pool still
    goes through when it is alone; otherwise its connection waits to read it."""

    def __init__(self, size_bytes: int):
        self.size_bytes = size_bytes
        self.available_bytes = size_bytes
        self._freed = asyncio.Event()

    async def acquire(self, n: int) -> None:
        """Take ``n`` bytes, once any are free."""
        if self.size_bytes < 0:
            return
        while self.available_bytes <= 0:
            self._freed.clear()
            await self._freed.wait()
        self.available_bytes -= n

    def release(self, n: int) -> None:
        """Give back ``n`` bytes taken by :meth:`acquire`."""
        if self.size_bytes < 0:
            return
        self.available_bytes += n
        self._freed.set()
