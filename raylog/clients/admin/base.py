"""What every family of the Admin's operations shares: :class:`AdminBase`, the client's
cluster handle, session and timeout with the calls to the controller, partition leaders and
coordinators made through them; and the folding of per-item answers into Kafka's errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from raylog.clients.consumer.offset_fetcher import list_offset
from raylog.clients.group import CoordinatorClient
from raylog.clients.security import ClientSession
from raylog.errors import InvalidConfigError, for_code
from raylog.protocol import error_of
from raylog.transport import call
from raylog.types import TopicPartition

#: Pause between retries of a group or transaction coordinator call.
COORDINATOR_RETRY_BACKOFF_S = 0.1


class AdminBase:
    """The Admin's handle on the cluster, which each family of operations calls through
    (the state :class:`~raylog.clients.admin.Admin` sets up)."""

    _cluster: Any
    _session: ClientSession
    #: How long one call to the controller, a coordinator or a partition leader may take.
    _timeout_s: float

    def _ask(self, method: str, *args: Any) -> Any:
        """Call the controller's ``method`` with this client's session token; the reference."""
        return getattr(self._cluster.controller, method).remote(*args, session=self._session.token())

    def _answer(self, ref: Any, timeout_s: float | None = None) -> Any:
        """The answer of ``ref`` within ``timeout_s`` (default: the Admin's request timeout).

        Raises:
            The call's failure as a raylog error (RequestTimedOutError ...).
        """
        return call(ref, self._timeout_s if timeout_s is None else timeout_s)

    def _call_timeout_s(self, timeout_ms: int | None) -> float:
        """A call's ``timeout_ms`` keyword in seconds (None: the Admin's request timeout).

        Raises:
            InvalidConfigError: neither None nor a non-negative integer.
        """
        if timeout_ms is None:
            return self._timeout_s
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 0:
            raise InvalidConfigError(f"timeout_ms must be a non-negative integer or None, got {timeout_ms!r}")
        return timeout_ms / 1000

    def _offset(self, tp: TopicPartition, timestamp: int) -> int:
        """The offset of ``tp`` for ``timestamp`` (see :func:`~raylog.clients.consumer.offset_fetcher.list_offset`)."""
        return list_offset(self._cluster, tp, timestamp, self._timeout_s, session=self._session.token()).offset

    def _coordinator(self, key: str, find: str = "find_coordinator") -> CoordinatorClient:
        """The coordinator of group ``key`` (or, ``find="find_transaction_coordinator"``, of
        transactional id ``key``)."""
        return CoordinatorClient(
            self._cluster, key, self._timeout_s, COORDINATOR_RETRY_BACKOFF_S, find=find, session=self._session
        )

    def _ask_each_partition(self, topic: str, method: str, *args: Any) -> list[tuple[int, Any]]:
        """``(partition, value)`` of each partition of the internal ``topic``, its leader's
        answer to ``method`` (none while the topic does not exist yet).

        Raises:
            The first leader's error, as the response's typed error.
        """
        metadata = self._cluster.metadata(refresh=True)
        if topic not in metadata.topics:
            return []
        answers = []
        for p in range(metadata.num_partitions(topic)):
            leader = metadata.leader(TopicPartition(topic, p))
            response = self._answer(getattr(leader, method).remote(*args, session=self._session.token()))
            answers.append((p, checked(response).value))
        return answers


def checked(response: Any) -> Any:
    """``response``, once it carries no error.

    Raises:
        The response's typed error.
    """
    if (error := error_of(response)) is not None:
        raise error
    return response


def raise_first(results: Mapping[Any, tuple[int, str]]) -> None:
    """Raise the first refusal of per-item ``(code, message)`` results, in their order.

    Raises:
        The typed error of the first non-zero code.
    """
    for code, message in results.values():
        if code:
            raise for_code(code)(message)


def names(given: Iterable[str]) -> list[str]:
    """A list of names (refusing one string, which would be read as its characters)."""
    if isinstance(given, str):
        raise TypeError(f"expected a list of names, got the string {given!r}")
    return list(given)
