"""A group member's side of its consumer (Kafka's ConsumerCoordinator): the membership it
starts for a subscription, the partitions a rebalance gives and takes, and the commits:
synchronous, asynchronous (in order, their callbacks run by later polls), automatic every
``auto_commit_interval_ms``, before a rebalance and on leaving. Membership itself (joins,
heartbeats) is :mod:`raylog.clients.group`'s and :mod:`raylog.clients.consumer_protocol`'s."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer.consumer_metadata import ConsumerMetadata
from raylog.clients.consumer.fetcher import Fetcher
from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.clients.consumer_protocol import ConsumerProtocolMembership
from raylog.clients.group import (
    ConsumerRebalanceListener,
    CoordinatorClient,
    GroupMembership,
    committed_offsets,
    offsets_to_commit,
)
from raylog.clients.security import ClientSession
from raylog.errors import CommitFailedError, RaylogError
from raylog.transport import call
from raylog.types import OffsetAndMetadata, TopicPartition


class ConsumerCoordinator:
    """The group side of a consumer with a ``group_id``.

    Args:
        cluster, session: the consumer's handle and principal.
        subscriptions, fetcher: the consumer's (a rebalance moves its assignment and positions).
        metadata: the consumer's (which partitions the subscription covers).
        config: the Consumer's keywords.
        strategies: the classic protocol's assignors, in order of preference.

    Attributes:
        client: the calls to the group's coordinator.
        group: the membership while subscribed (None: not a member; commits are then made
            outside any generation, as for partitions assigned by hand).
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        session: ClientSession,
        subscriptions: SubscriptionState,
        fetcher: Fetcher,
        metadata: ConsumerMetadata,
        config: dict[str, Any],
        strategies: tuple[str, ...],
    ):
        timeout_s = config["request_timeout_ms"] / 1000
        self.client = CoordinatorClient(
            cluster, config["group_id"], timeout_s, config["retry_backoff_ms"] / 1000, session=session
        )
        self._cluster, self._subscriptions, self._fetcher, self._metadata = cluster, subscriptions, fetcher, metadata
        self._config, self._strategies, self._timeout_s = config, strategies, timeout_s
        self.group: GroupMembership | ConsumerProtocolMembership | None = None
        self._next_auto_commit = time.monotonic() + config["auto_commit_interval_ms"] / 1000
        self._async_commits: list[tuple[Any, dict, Callable | None]] = []

    @property
    def group_id(self) -> str:
        return self.client.group_id

    # --- membership -----------------------------------------------------------------------

    def join(self, listener: ConsumerRebalanceListener | None) -> None:
        """Become a member for the subscription (or, a member already, rejoin for its new one)."""
        if self.group is None:
            cfg, subscriptions = self._config, self._subscriptions
            common = {
                "instance_id": cfg["group_instance_id"],
                "max_poll_interval_ms": cfg["max_poll_interval_ms"],
                "subscription": self._metadata.subscribed_partition_counts,
                "apply": self._apply_assignment,
                "listener": listener or ConsumerRebalanceListener(),
            }
            if cfg["group_protocol"] == "consumer":
                self.group = ConsumerProtocolMembership(
                    self.client,
                    assignor=cfg["group_remote_assignor"],
                    retry_backoff_s=cfg["retry_backoff_ms"] / 1000,
                    topics=lambda: self._cluster.metadata().partition_counts,
                    **common,
                )
            else:
                self.group = GroupMembership(
                    self.client,
                    client_id=cfg["client_id"],
                    strategies=self._strategies,
                    session_timeout_ms=cfg["session_timeout_ms"],
                    heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
                    owned=lambda: list(subscriptions.assignment),
                    **common,
                )
        else:
            if listener is not None:
                self.group.listener = listener
            self.group.request_rejoin()
        self._metadata.request_update()

    def _apply_assignment(self, added: list[TopicPartition], revoked: list[TopicPartition]) -> None:
        """Take a rebalance's outcome: drop revoked partitions (and anything buffered for
        them), start added ones at the group's committed offsets."""
        positions = self._subscriptions.positions
        if revoked and self._config["enable_auto_commit"]:
            self._commit_quietly({tp: positions[tp] for tp in revoked if positions.get(tp) is not None})
        revoked_set = set(revoked)
        self._fetcher.reassign([tp for tp in self._subscriptions.assignment if tp not in revoked_set] + list(added))
        if added:
            committed = committed_offsets(self.client, added)
            for tp in added:
                if tp in committed:
                    self._fetcher.seek(tp, committed[tp].offset, committed[tp].leader_epoch)

    def maintain(self) -> None:
        """One step of group upkeep from ``poll``.

        Raises:
            TopicAuthorizationFailedError: subscribed topics the principal may not describe
                (once per metadata refresh, see :meth:`ConsumerMetadata.raise_refused`).
        """
        if self.group is not None:
            self.group.maintain()
        self._metadata.raise_refused()

    def waitables(self) -> list[Any]:
        """The group's calls ``poll`` may wait on with its fetches."""
        return self.group.waitables() if self.group is not None else []

    def metadata(self) -> dict[str, Any]:
        """The group id, member id, generation and instance id (see ``Consumer.group_metadata``)."""
        member_id, generation, instance_id = self.group.commit_args() if self.group else ("", -1, None)
        return {
            "group_id": self.group_id,
            "member_id": member_id,
            "generation": generation,
            "group_instance_id": instance_id,
        }

    def close(self) -> None:
        """Leave the group (a member), and run the callbacks of the commits still unanswered."""
        if self.group is not None:
            self.leave()
        self.finish_async_commits(wait=True)

    def leave(self) -> None:
        """Commit (with auto-commit), tell the listener, and leave the group."""
        group = self.group
        try:
            # Still a member here, so commits (automatic, or the listener's own) are accepted.
            if self._config["enable_auto_commit"]:
                self._commit_quietly({tp: p for tp, p in self._subscriptions.positions.items() if p is not None})
            if self._subscriptions.assignment:
                group.listener.on_partitions_revoked(list(self._subscriptions.assignment))
        finally:
            self.group = None
            group.close(leave=True)

    # --- commits --------------------------------------------------------------------------

    def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``partitions`` (those it has)."""
        return committed_offsets(self.client, partitions)

    def commit(self, offsets: dict | None) -> None:
        """See ``Consumer.commit``."""
        # After the commit_async calls made before it, as Kafka's consumer sends them all on
        # one connection: an earlier one must not land after this one. Their callbacks run.
        self.finish_async_commits(wait=True)
        committing = self._commit_offsets(offsets)
        if not committing:
            return
        if self.group is not None:
            self.group.commit(committing)
        else:
            self.client.call("commit_offsets", self.group_id, "", -1, None, committing)

    def commit_async(self, offsets: dict | None, callback: Callable[[dict, Exception | None], None] | None) -> None:
        """See ``Consumer.commit_async``."""
        committing = self._commit_offsets(offsets)
        if not committing:
            return
        try:
            member_id, generation, instance_id = self.group.member_commit_args() if self.group else ("", -1, None)
            previous = self._async_commits[-1][0] if self._async_commits else None
            if previous is not None and ray.wait([previous], timeout=0)[0]:
                previous = None  # answered already (an error there would fail this call too)
            ref = self.client.remote(
                "commit_offsets", self.group_id, member_id, generation, instance_id, committing, after=previous
            )
        except RaylogError as exc:
            self.client.after_error(exc)
            if callback is not None:
                callback(committing, exc)
            return
        self._async_commits.append((ref, committing, callback))

    def _commit_offsets(self, offsets: dict | None) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._subscriptions.consumed() if offsets is None else offsets_to_commit(offsets)

    def _commit_quietly(self, offsets: dict) -> None:
        """An automatic commit: a failure (the generation is over) only means the next owner
        starts from the previous commit (at least once)."""
        try:
            self.commit(offsets)
        except (CommitFailedError, RaylogError):
            pass

    def maybe_auto_commit(self) -> None:
        """Commit asynchronously if a member with auto-commit and ``auto_commit_interval_ms`` passed."""
        if self.group is None or not self._config["enable_auto_commit"]:
            return
        now = time.monotonic()
        if now >= self._next_auto_commit:
            self._next_auto_commit = now + self._config["auto_commit_interval_ms"] / 1000
            if self.group.commit_args()[1] >= 0:
                self.commit_async(None, None)

    def finish_async_commits(self, wait: bool) -> None:
        """Run the callbacks of the answered commit_async calls, in the order of the calls
        (those after one still unanswered wait for it); ``wait``: for up to the timeout."""
        if not self._async_commits:
            return
        refs = [ref for ref, _, _ in self._async_commits]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self._timeout_s if wait else 0)
        done = set(ready)
        pending = []
        for ref, offsets, callback in self._async_commits:
            if pending or ref not in done:
                pending.append((ref, offsets, callback))
                continue
            error: Exception | None = None
            try:
                self.client.check(call(ref, None))
            except RaylogError as exc:
                error = exc
                self.client.after_error(exc)
            if callback is not None:
                callback(offsets, error)
        self._async_commits = pending
