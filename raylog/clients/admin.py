"""Admin: create, delete, list and describe topics, alter and describe topic and dynamic
broker configs, add partitions, move replicas and leadership; list, describe, reset and
delete consumer groups; alter and describe client quotas; create, describe and delete ACLs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raylog.actors.transport import call
from raylog.clients.cluster import METADATA_TIMEOUT_S, RaylogCluster, client_handle, require_cluster
from raylog.clients.consumer.offset_fetcher import list_offset
from raylog.clients.group import CoordinatorClient, committed_offsets, offsets_to_commit
from raylog.coordination import broker_configs, group_configs, scram
from raylog.coordination.acls import ACL, ACLFilter
from raylog.coordination.elections import PREFERRED_ELECTION, UNCLEAN_ELECTION
from raylog.coordination.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.coordination.placement import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_TOPIC, validate_topic_name
from raylog.coordination.transactions import MAX_TRANSACTION_TIMEOUT_MS
from raylog.coordination.txn_verification import HangingTransaction, find_hanging
from raylog.errors import (
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidTxnStateError,
    NonEmptyGroupError,
    RequestTimedOutError,
    TransactionalIdNotFoundError,
    UnknownMemberIdError,
    UnsupportedSaslMechanismError,
    for_code,
)
from raylog.protocol import error_of
from raylog.types import (
    AlterConfigOp,
    BrokerInfo,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConsumerGroupDescription,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionLag,
    ProducerState,
    TopicDescription,
    TopicPartition,
    TransactionDescription,
)

#: Pause between retries of a group or transaction coordinator call.
COORDINATOR_RETRY_BACKOFF_S = 0.1
#: How often :meth:`Admin.await_leaders` reports progress.
PROGRESS_STEP_MS = 500
#: How much longer than its own timeout a leader's DeleteRecords answer is waited for.
DELETE_RECORDS_MARGIN_S = 10.0


class Admin:
    """Topic administration (Kafka's AdminClient, synchronous).

    Args:
        cluster: from :func:`raylog.connect`.
        request_timeout_ms: how long one call to the controller, a coordinator or a partition
            leader may take.
        security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password: who the
            client is, as :class:`~raylog.clients.producer.Producer` takes them.

    Example:
        >>> admin = Admin(cluster)                                     # doctest: +SKIP
        >>> admin.create_topics([NewTopic("clicks", num_partitions=6)])  # doctest: +SKIP
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        *,
        request_timeout_ms: int = int(METADATA_TIMEOUT_S * 1000),
        security_protocol: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ):
        require_cluster(cluster, "Admin")
        self._timeout_s = request_timeout_ms / 1000
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        self._cluster, self._session = client_handle(cluster, self._timeout_s, *settings)

    def create_topics(
        self, new_topics: list[NewTopic], *, wait_for_leaders_ms: int | None = None, timeout_ms: int | None = None
    ) -> None:
        """Create topics; each is created or refused on its own. As in Kafka, a topic exists
        once the controller has journaled it: its replica actors then start in the background
        (a few at a time, leaders first), and clients get LEADER_NOT_AVAILABLE, and retry, for
        a partition whose leader is not running yet.

        Args:
            wait_for_leaders_ms: also wait until every partition of the created topics has a
                running leader, at most this long (see :meth:`await_leaders`).
            timeout_ms: how long the controller may take (default: the Admin's
                ``request_timeout_ms``), as kafka-python's.

        Raises:
            The first refusal's typed error (InvalidTopicError, TopicAlreadyExistsError,
            InvalidPartitionsError, InvalidReplicationFactorError, InvalidConfigError), after
            every other topic was handled (an illegal name is refused before anything is
            sent, and the controller checks names again).
            RequestTimedOutError: the topics were created, but not every partition has a
                leader after ``wait_for_leaders_ms``.
        """
        new_topics = list(new_topics)
        refused, valid = _legal_names(new_topics, lambda new: new.name)
        timeout_s = self._call_timeout_s(timeout_ms)
        results = call(self._ask("create_topics", valid), timeout_s) if valid else {}
        self._cluster.metadata(refresh=True)
        created = [name for name, (code, _) in results.items() if not code]
        if wait_for_leaders_ms is not None and created:
            self.await_leaders(created, wait_for_leaders_ms)
        _raise_first({**refused, **results})

    def await_leaders(
        self,
        topics: list[str],
        timeout_ms: int,
        progress: Callable[[int, int], None] | None = None,
        followers: bool = False,
    ) -> None:
        """Wait until every partition of ``topics`` has a running leader.

        Args:
            timeout_ms: how long to wait at most.
            progress: called with ``(partitions ready, partitions)`` as they come up.
            followers: also wait until every replica on a live broker runs. A new topic's
                replicas are all in its ISR, so an ``acks="all"`` record waits for followers
                still starting (each a process: about a second each here); a benchmark or a
                latency-bound first send waits for them with this instead.

        Raises:
            RequestTimedOutError: some partitions are not ready after ``timeout_ms`` (the
                topics exist; their replicas go on starting).
            UnknownTopicOrPartitionError: a name that is not a topic.
        """
        topics = list(topics)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            step_ms = remaining_ms if progress is None else min(remaining_ms, PROGRESS_STEP_MS)
            answer = call(
                self._cluster.controller.await_leaders.remote(topics, step_ms, followers),
                step_ms / 1000 + self._timeout_s,
            )
            _raise_first({name: (code, message) for name, (code, message, _, _) in answer.items()})
            led = sum(count for _, _, count, _ in answer.values())
            total = sum(total for _, _, _, total in answer.values())
            if progress is not None:
                progress(led, total)
            if led == total:
                self._cluster.metadata(refresh=True)
                return
            if time.monotonic() >= deadline:
                missing = "a replica not running" if followers else "no leader"
                raise RequestTimedOutError(
                    f"{total - led} of {total} partitions of {', '.join(topics)} have {missing} after {timeout_ms} ms "
                    "(the topics exist: their replicas are still starting)"
                )

    def delete_topics(self, topics: list[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics and their data (``timeout_ms``: as at :meth:`create_topics`).

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic (the others are deleted).
            InvalidTopicError: a name that is not a legal topic name (checked before sending;
                the others are deleted).
        """
        refused, valid = _legal_names(_names(topics), lambda name: name)
        timeout_s = self._call_timeout_s(timeout_ms)
        results = call(self._ask("delete_topics", valid), timeout_s) if valid else {}
        self._cluster.metadata(refresh=True)
        _raise_first({**refused, **results})

    def list_topics(self, include_internal: bool = False) -> list[str]:
        names = self._cluster.metadata(refresh=True).topics
        return sorted(n for n in names if include_internal or n not in INTERNAL_TOPICS)

    def describe_topics(self, topics: list[str] | None = None) -> list[TopicDescription]:
        """Leader, leader epoch, replicas and ISR of each partition, and the topic config
        (of every topic when ``topics`` is None).

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic.
            TopicAuthorizationFailedError: a name the Admin's principal may not describe
                (whether or not it is a topic).
        """
        known = self._cluster.metadata(refresh=True).topics
        wanted = sorted(known) if topics is None else _names(topics)
        missing = [n for n in wanted if n not in known]
        if missing:
            raise self._cluster.missing_topics_error(missing)
        return [known[n] for n in wanted]

    def alter_configs(self, resources: ConfigResources, *, incremental: bool = False) -> None:
        """Replace the configs of topics and broker resources (Kafka's AlterConfigs,
        confluent-kafka's and kafka-python 2.x's ``alter_configs``): each resource's configs
        set become exactly those given, and every config not given (or given None) goes back
        to its default. To change some configs and keep the others, use
        :meth:`incremental_alter_configs`. Each resource is altered or refused as a whole,
        atomically; the change reaches the live replicas without a restart (segment settings
        apply from the next segment on).

        A broker resource, ``ConfigResource(ConfigResourceType.BROKER, "0")`` (a broker id)
        or ``""`` (the cluster default, every broker), holds Kafka's dynamic broker configs
        (see :mod:`raylog.coordination.broker_configs`): a topic property's broker name
        (``log.retention.ms``) is the default of every topic that does not set it itself, on
        that broker's replicas or everywhere; raylog's static settings (the controller's,
        ``num.partitions`` ...) are read-only; other names are kept.

        A group resource, ``ConfigResource(ConfigResourceType.GROUP, "orders")``, holds Kafka
        4's group configs (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``;
        see :mod:`raylog.coordination.group_configs`): the group's members of Kafka's consumer
        protocol get them from their next heartbeat, in place of the broker's
        ``group.consumer.*`` settings, within its min / max bounds. The group need not exist,
        and DeleteGroups keeps them, as in Kafka.

        Args:
            resources: ``{topic: {property: value}}``, or a list of
                :class:`~raylog.types.ConfigResource` (topic, broker or group resources).
            incremental: True makes this :meth:`incremental_alter_configs` (kafka-python
                3's ``alter_configs(..., incremental=True)``). Note that kafka-python 3
                alters incrementally by default where raylog, as Kafka's AlterConfigs,
                replaces.

        Example:
            >>> admin.alter_configs({"clicks": {"retention.ms": "3600000"}})  # doctest: +SKIP

        Raises:
            The first refusal's typed error (UnknownTopicOrPartitionError, InvalidConfigError
            naming the config or the broker bound a group's value breaks, InvalidRequestError
            for a read-only broker config or a broker id that is not registered), after every
            other resource was handled.
            InvalidConfigError: an ``(op, value)`` change (incremental only).
            InvalidRequestError: a resource neither a topic, a broker nor a group, a broker
                resource named neither by a broker id nor "", a group named "", or a resource
                named twice.
            TypeError: resources, names or configs of the wrong shape.
        """
        if not isinstance(incremental, bool):
            raise TypeError(f"incremental must be True or False, got {incremental!r}")
        self._alter_configs(_config_changes(resources, incremental=incremental), incremental=incremental)

    def incremental_alter_configs(self, resources: ConfigResources) -> None:
        """Change some configs of topics and broker resources and keep the others (Kafka's
        IncrementalAlterConfigs; confluent-kafka's ``incremental_alter_configs``): a value
        sets a config, None deletes it (back to the default), and ``(AlterConfigOp, value)``
        names the operation: SET, DELETE, or APPEND / SUBTRACT comma-separated items of a
        list config (a topic's ``cleanup.policy``, a broker's ``log.cleanup.policy``). Each
        resource is altered or refused as a whole, atomically, and the change reaches the
        live replicas. Broker and group resources are as at :meth:`alter_configs`.

        Args:
            resources: ``{topic: {property: change}}``, or a list of
                :class:`~raylog.types.ConfigResource` (topic, broker or group resources).

        Example:
            >>> admin.incremental_alter_configs(                                 # doctest: +SKIP
            ...     {"clicks": {"retention.ms": "3600000", "segment.bytes": None}})
            >>> admin.incremental_alter_configs(                                 # doctest: +SKIP
            ...     [ConfigResource(ConfigResourceType.BROKER, "", {"log.retention.ms": "3600000"})])

        Raises:
            The first refusal's typed error (UnknownTopicOrPartitionError, InvalidConfigError
            naming the config, or the broker bound a group's value breaks, or for an APPEND /
            SUBTRACT of a config that is not a list, InvalidRequestError for a read-only broker
            config or a broker id that is not registered), after every other resource was
            handled.
            InvalidRequestError: a resource neither a topic, a broker nor a group, a broker
                resource named neither by a broker id nor "", a group named "", or a resource
                named twice.
            TypeError: resources, names, configs or an operation of the wrong shape.
        """
        self._alter_configs(_config_changes(resources, incremental=True), incremental=True)

    def _alter_configs(self, changes: dict[ResourceKey, dict[str, Any]], incremental: bool) -> None:
        results = self._per_resource(changes, lambda kind, named: self._ask(_ALTER[kind], named, incremental))
        self._cluster.metadata(refresh=True)
        _raise_first(results)

    def describe_configs(
        self, resources: list[str | ConfigResource]
    ) -> dict[str | tuple[ConfigResourceType, str], dict[str, ConfigEntry]]:
        """Every config of each resource, ``{config: ConfigEntry(value, source)}``, keyed by
        the topic's name for a topic, by ``(ConfigResourceType.BROKER, name)`` for a broker
        resource (``name`` a broker id, or "" for the cluster default) and by
        ``(ConfigResourceType.GROUP, group id)`` for a group, in the order asked.

        A topic's sources: ``"topic"`` (set on the topic), ``"dynamic_default_broker"`` (the
        cluster default's broker config, ``log.retention.ms`` ...), else ``"default"``. A
        broker resource's: ``"dynamic_broker"`` (set for that broker),
        ``"dynamic_default_broker"``, ``"static_broker"`` (raylog's settings given when the
        cluster started; read-only), else ``"default"`` (a topic property's built-in default).
        A group's: ``"group"`` (set on the group), ``"static_broker"`` (the broker's
        ``group.consumer.*`` setting given when the cluster started), else ``"default"``.

        Args:
            resources: topic names, or :class:`~raylog.types.ConfigResource` (topic, broker or
                group resources; their configs are not looked at).

        Example:
            >>> admin.describe_configs(["clicks", ConfigResource("broker", "0")])  # doctest: +SKIP
            {'clicks': {...}, (<ConfigResourceType.BROKER: 4>, '0'): {...}}

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic.
            InvalidRequestError: a resource neither a topic, a broker nor a group, a broker
                resource that is not "" nor a registered broker's id, or a group named "".
        """
        keys = [r if isinstance(r, str) else _resource_key(*_resource(r)[:2]) for r in _names(resources)]
        results = self._per_resource(dict.fromkeys(keys), lambda kind, named: self._ask(_DESCRIBE[kind], list(named)))
        _raise_first({key: (code, message) for key, (code, message, _) in results.items()})
        return {key: entries for key, (_, _, entries) in results.items()}

    def _per_resource(
        self, asked: dict[ResourceKey, Any], ask: Callable[[ConfigResourceType, dict], Any]
    ) -> dict[ResourceKey, tuple]:
        """The controller's answer for each resource of ``asked`` (keyed as
        :func:`_resource_key`), in its order: those of each type from ``ask(type, {resource
        name: item})``."""
        answers: dict[ResourceKey, tuple] = {}
        for kind in ConfigResourceType:
            named = {_key_name(key): item for key, item in asked.items() if _key_type(key) == kind}
            if named:
                answered = call(ask(kind, named), self._timeout_s)
                answers.update({_resource_key(kind, name): answer for name, answer in answered.items()})
        return {key: answers[key] for key in asked}

    def alter_client_quotas(self, quotas: dict[str | None, dict[str, float | None]]) -> None:
        """Set or remove client byte-rate quotas (Kafka's AlterClientQuotas for client-id
        entities), all or nothing: per client id (None: the default quota, for every client
        id without one of its own), ``producer_byte_rate`` and ``consumer_byte_rate`` in
        bytes/s; None removes a quota, a quota not named is kept. Leaders apply the change
        without a restart. Quotas hold per partition leader (see docs/guide.md, "Quotas").

        Example:
            >>> admin.alter_client_quotas({"etl": {"producer_byte_rate": 10e6}})  # doctest: +SKIP
            >>> admin.alter_client_quotas({None: {"consumer_byte_rate": None}})  # doctest: +SKIP

        Raises:
            InvalidConfigError: a client id that is not a non-empty string or None, an unknown
                quota name, or a rate that is not a positive number.
        """
        changes = {client_id: dict(change) for client_id, change in quotas.items()}
        code, message = call(self._ask("alter_client_quotas", changes), self._timeout_s)
        _raise_first({"quotas": (code, message)})

    def describe_client_quotas(self) -> dict[str | None, dict[str, float]]:
        """Every client quota set: ``{client_id: {"producer_byte_rate": bytes/s, ...}}``, the
        default quota under None."""
        return call(self._ask("describe_client_quotas"), self._timeout_s)

    def alter_user_scram_credentials(
        self,
        upsertions: Mapping[str, str] | None = None,
        deletions: Iterable[tuple[str, str]] = (),
        *,
        mechanisms: Iterable[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
        iterations: int = scram.DEFAULT_ITERATIONS,
    ) -> None:
        """Set or delete users' SCRAM credentials (Kafka's AlterUserScramCredentials), with
        which Kafka clients authenticate on SASL listeners (SCRAM-SHA-256/512, and PLAIN
        against them). The password is salted and hashed here; the controller keeps only the
        salt and the keys derived from it, and the listeners take the change before this
        returns. Each user's change is accepted or refused whole.

        Args:
            upsertions: ``{user: password}``: a credential per mechanism of ``mechanisms``.
            deletions: ``(user, mechanism)`` credentials to delete.
            mechanisms: ``SCRAM-SHA-256`` and/or ``SCRAM-SHA-512``.
            iterations: the salting's iterations, 4096 to 16384.

        Example:
            >>> admin.alter_user_scram_credentials({"alice": "alice-secret"})  # doctest: +SKIP

        Raises:
            The first refusal's typed error, after every other user was handled:
            UnacceptableCredentialError (an empty user or password, iterations out of range),
            UnsupportedSaslMechanismError, DuplicateResourceError (a user and mechanism named
            twice), ResourceNotFoundError (a deletion of a credential that does not exist).
        """
        codes = {name: code for code, name in scram.MECHANISMS.items()}
        try:
            by_code = [codes[m] for m in mechanisms]
            gone = [(user, codes[m]) for user, m in deletions]
        except KeyError as exc:
            raise UnsupportedSaslMechanismError(f"unknown SCRAM mechanism {exc} ({', '.join(codes)})") from None
        made = scram.upsertions(upsertions or {}, by_code, iterations)
        ref = self._ask("alter_user_scram_credentials", gone, made)
        _raise_first(call(ref, self._timeout_s))

    def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """Each user's SCRAM credentials as ``[(mechanism, iterations)]`` (Kafka's
        DescribeUserScramCredentials; never a key); ``users`` None: every user with one.

        Raises:
            ResourceNotFoundError: a user named without a credential.
            DuplicateResourceError: a user named twice.
        """
        described = call(self._ask("describe_user_scram_credentials", users), self._timeout_s)
        _raise_first({user: (code, message) for user, (code, message, _) in described.items()})
        return {user: [(scram.MECHANISMS[m], i) for m, i in infos] for user, (_, _, infos) in described.items()}

    def create_acls(self, acls: list[ACL]) -> None:
        """Create Kafka ACLs (Kafka's CreateAcls), all or nothing; ACLs that exist already
        are kept; answered once every Kafka listener and every running replica they concern
        applies them (the others, and replicas still starting, take them without the answer
        waiting). They say what Kafka clients over the listeners and raylog's own clients
        may do (see docs/security.md).

        Example:
            >>> from raylog import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType
            >>> clicks = ResourcePattern(ResourceType.TOPIC, "clicks")
            >>> may_write = ACL("User:etl", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, clicks)
            >>> admin.create_acls([may_write])  # doctest: +SKIP

        Raises:
            SecurityDisabledError: the cluster runs without the authorizer (``authorizer=acl``).
            InvalidRequestError: an ACL Kafka refuses (an ANY or UNKNOWN value, an empty
                name, a principal not of the form ``Type:name``, a cluster resource not named
                ``kafka-cluster``); nothing is created.
        """
        code, message = call(self._ask("create_acls", list(acls)), self._timeout_s)
        _raise_first({"acls": (code, message)})

    def describe_acls(self, acl_filter: ACLFilter | None = None) -> list[ACL]:
        """The ACLs ``acl_filter`` matches (Kafka's DescribeAcls; default: every ACL).

        Raises:
            SecurityDisabledError: the cluster runs without the authorizer.
            InvalidRequestError: a filter with an UNKNOWN value.
        """
        described = self._ask("describe_acls", acl_filter or ACLFilter())
        code, message, acls = call(described, self._timeout_s)
        _raise_first({"acls": (code, message)})
        return acls

    def delete_acls(self, filters: list[ACLFilter]) -> list[ACL]:
        """Delete every ACL one of ``filters`` matches (Kafka's DeleteAcls); returns those deleted.

        Raises:
            SecurityDisabledError: the cluster runs without the authorizer.
            InvalidRequestError: a filter with an UNKNOWN value; nothing is deleted.
        """
        code, message, matched = call(self._ask("delete_acls", list(filters)), self._timeout_s)
        _raise_first({"acls": (code, message)})
        return list(dict.fromkeys(acl for found in matched for acl in found))

    def delete_records(
        self, records_to_delete: dict[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete every record below an offset in each partition (Kafka's Admin.deleteRecords;
        -1: below the high watermark, so everything committed): the partition's log start
        moves there, consumers get OFFSET_OUT_OF_RANGE below it, and the segments wholly
        below it are deleted on every replica. Returns each partition's low watermark (its
        smallest log start among the in-sync replicas) once every in-sync replica deleted
        them.

        Raises:
            UnknownTopicOrPartitionError, OffsetOutOfRangeError (past the high watermark),
            PolicyViolationError (a compact-only topic), NotLeaderOrFollowerError,
            RequestTimedOutError: the first refusal (the other partitions' records are
                deleted all the same).
        """
        timeout_s = self._call_timeout_s(timeout_ms)
        metadata = self._cluster.metadata(refresh=True)
        asked = {
            tp: metadata.leader(tp).delete_records.remote(offset, int(timeout_s * 1000), self._session.token())
            for tp, offset in records_to_delete.items()
        }
        answers = {tp: call(ref, timeout_s + DELETE_RECORDS_MARGIN_S) for tp, ref in asked.items()}
        for answer in answers.values():
            if (error := error_of(answer)) is not None:
                raise error
        return {tp: answer.low_watermark for tp, answer in answers.items()}

    def create_partitions(
        self,
        new_partitions: dict[str, int | NewPartitions],
        *,
        wait_for_leaders_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Add partitions to topics (Kafka's CreatePartitions): each topic grows to its new
        total count, given as a number or as ``NewPartitions(total_count)``; the new
        partitions are placed like a new topic's and their replicas start in the
        background, as at :meth:`create_topics`. Keys then map to other partitions (murmur2
        modulo the count), as in Kafka. Producers and consumers see the new partitions on
        their next metadata refresh.

        Args:
            wait_for_leaders_ms: also wait until every partition has a running leader.
            timeout_ms: as at :meth:`create_topics`.

        Raises:
            The first refusal's typed error (UnknownTopicOrPartitionError;
            InvalidPartitionsError for a count not above the current one or for an internal
            topic; InvalidReplicationFactorError when fewer brokers are live than the topic's
            replication factor), after every other topic was handled.
            InvalidReplicaAssignmentError: ``NewPartitions.new_assignments`` given (raylog
                places new partitions; move them afterwards with
                :meth:`alter_partition_reassignments`).
            TypeError: a count that is neither an integer nor a NewPartitions.
            RequestTimedOutError: as :meth:`create_topics`.
        """
        counts = {name: _total_count(name, wanted) for name, wanted in dict(new_partitions).items()}
        results = call(self._ask("create_partitions", counts), self._call_timeout_s(timeout_ms))
        self._cluster.metadata(refresh=True)
        grown = [name for name, (code, _) in results.items() if not code]
        if wait_for_leaders_ms is not None and grown:
            self.await_leaders(grown, wait_for_leaders_ms)
        _raise_first(results)

    def alter_partition_reassignments(self, reassignments: dict[TopicPartition, list[int] | None]) -> None:
        """Move partitions to new replica sets (Kafka's AlterPartitionReassignments); also
        raises or lowers the replication factor. Returns once started: new replicas fill by
        fetching and the old ones are removed only when every new one is in sync. None for a
        partition cancels its reassignment under way (it moves back to where it started).

        Raises:
            UnknownTopicOrPartitionError, InvalidReplicaAssignmentError,
            NoReassignmentInProgressError: the first refusal.
        """
        targets = {
            (tp.topic, tp.partition): None if replicas is None else list(replicas)
            for tp, replicas in reassignments.items()
        }
        results = call(self._ask("alter_partition_reassignments", targets), self._timeout_s)
        self._cluster.metadata(refresh=True)
        _raise_first({f"{t}-{p}": r for (t, p), r in results.items()})

    def list_partition_reassignments(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Reassignments under way: partition -> target replicas."""
        answer = self._cluster.metadata(refresh=True).reassignments
        return {TopicPartition(t, p): target for (t, p), target in answer.items()}

    def elect_leaders(self, topics: list[str] | None = None, *, election_type: str = "preferred") -> int:
        """Kafka's Admin.electLeaders in every partition of ``topics`` (every topic's when None).
        ``election_type="preferred"`` moves leadership back to each partition's first replica
        where it is live and in sync; ``"unclean"`` elects a leader for each partition that has
        no live one, from any live replica when no in-sync one is left: records acknowledged
        only by the replicas that are gone are then lost (Kafka's kafka-leader-election.sh
        --election-type UNCLEAN, the operator's way back for an offline partition). Returns how
        many partitions changed leader.

        Raises:
            UnknownTopicOrPartitionError: a topic named does not exist.
            InvalidConfigError: an election type other than "preferred" or "unclean".
        """
        types = {"preferred": PREFERRED_ELECTION, "unclean": UNCLEAN_ELECTION}
        if election_type not in types:
            raise InvalidConfigError(f"election_type must be 'preferred' or 'unclean', got {election_type!r}")
        partitions = None
        if topics is not None:
            metadata = self._cluster.metadata(refresh=True)
            partitions = [(t, p) for t in topics for p in range(metadata.num_partitions(t))]
        asked = self._ask("elect_leaders", types[election_type], partitions)
        results = call(asked, self._timeout_s)
        self._cluster.metadata(refresh=True)
        return sum(1 for code, _ in results.values() if code == 0)

    def describe_cluster(self) -> dict[int, BrokerInfo]:
        """The brokers by id."""
        return dict(self._cluster.metadata(refresh=True).brokers)

    def _call_timeout_s(self, timeout_ms: int | None) -> float:
        if timeout_ms is None:
            return self._timeout_s
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 0:
            raise InvalidConfigError(f"timeout_ms must be a non-negative integer or None, got {timeout_ms!r}")
        return timeout_ms / 1000

    # --- transactions ---------------------------------------------------------------------

    def list_transactions(self) -> list[TransactionDescription]:
        """Every transactional id the transaction coordinators know (Kafka's ListTransactions)."""
        metadata = self._cluster.metadata(refresh=True)
        if TRANSACTION_TOPIC not in metadata.topics:
            return []
        out = []
        for p in range(metadata.num_partitions(TRANSACTION_TOPIC)):
            leader = metadata.leader(TopicPartition(TRANSACTION_TOPIC, p))
            response = call(leader.describe_transactions.remote(None, session=self._session.token()), self._timeout_s)
            if (error := error_of(response)) is not None:
                raise error
            out += [_transaction(d, p) for d in response.value]
        return sorted(out, key=lambda t: t.transactional_id)

    def describe_transactions(self, transactional_ids: list[str]) -> list[TransactionDescription]:
        """The state of each transactional id, from its coordinator (Kafka's DescribeTransactions).

        Raises:
            TransactionalIdNotFoundError: an id no producer ever initialised.
        """
        out = []
        for tid in transactional_ids:
            coordinator = CoordinatorClient(
                self._cluster,
                tid,
                self._timeout_s,
                COORDINATOR_RETRY_BACKOFF_S,
                find="find_transaction_coordinator",
                session=self._session,
            )
            found = coordinator.call("describe_transactions", [tid])
            if not found:
                raise TransactionalIdNotFoundError(f"no transactional id {tid!r}")
            partition, _ = call(self._ask("find_transaction_coordinator", tid), self._timeout_s)
            out.append(_transaction(found[0], partition))
        return out

    def _ask(self, method: str, *args: Any) -> Any:
        """Call the controller's ``method`` with this client's session token; the reference."""
        return getattr(self._cluster.controller, method).remote(*args, session=self._session.token())

    def _offset(self, tp: TopicPartition, timestamp: int) -> int:
        """The offset of ``tp`` for ``timestamp`` (see :func:`~raylog.clients.consumer.offset_fetcher.list_offset`)."""
        return list_offset(self._cluster, tp, timestamp, self._timeout_s, session=self._session.token()).offset

    def describe_producers(self, partitions: list[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader knows, with the first offset of the
        transaction each has open there (Kafka's Admin.describeProducers).

        Raises:
            UnknownTopicOrPartitionError, NotLeaderOrFollowerError (retriable).
        """
        metadata = self._cluster.metadata(refresh=True)
        token = self._session.token()
        return {tp: call(metadata.leader(tp).describe_producers.remote(token), self._timeout_s) for tp in partitions}

    def find_hanging_transactions(
        self, partitions: list[TopicPartition], max_transaction_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS
    ) -> list[HangingTransaction]:
        """Transactions open in ``partitions`` that no coordinator will end: their producer
        last wrote there more than ``max_transaction_timeout_ms`` ago (the longest
        transaction.timeout.ms a coordinator accepts, by default) and no transactional id
        has them ongoing with that partition (``kafka-transactions.sh find-hanging``). Each
        holds the partition's last stable offset until :meth:`abort_transaction` ends it."""
        producers = self.describe_producers(partitions)
        transactions = self.list_transactions()
        now_ms = int(time.time() * 1000)
        return [
            hanging
            for tp in partitions
            for hanging in find_hanging(tp, producers[tp], transactions, now_ms, max_transaction_timeout_ms)
        ]

    def abort_transaction(
        self, partition: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int = 0
    ) -> None:
        """Write an abort marker for ``producer_id``'s transaction open in ``partition`` at
        ``producer_epoch`` (Kafka's Admin.abortTransaction), as its coordinator would: its
        records are dropped by read_committed readers and the last stable offset moves on.
        For hanging transactions (:meth:`find_hanging_transactions`) only: aborting one a
        coordinator still runs breaks that transaction's atomicity.

        Raises:
            InvalidTxnStateError: the producer has no transaction open there at that epoch.
            NotLeaderOrFollowerError, NotEnoughReplicasError, RequestTimedOutError (retriable).
        """
        leader = self._cluster.metadata(refresh=True).leader(partition)
        timeout_ms = int(self._timeout_s * 1000)
        marker = leader.write_txn_marker.remote(
            producer_id, producer_epoch, False, coordinator_epoch, timeout_ms, bumps_epoch=False
        )
        response = call(marker, self._timeout_s)
        if (error := error_of(response)) is not None:
            raise error
        if response.base_offset < 0:
            raise InvalidTxnStateError(
                f"producer id {producer_id} has no transaction open in {partition.topic}-{partition.partition} "
                f"at epoch {producer_epoch}"
            )

    # --- consumer groups ------------------------------------------------------------------

    def list_consumer_groups(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every group that has members or committed offsets."""
        metadata = self._cluster.metadata(refresh=True)
        if OFFSETS_TOPIC not in metadata.topics:
            return []
        groups = []
        for p in range(metadata.num_partitions(OFFSETS_TOPIC)):
            leader = metadata.leader(TopicPartition(OFFSETS_TOPIC, p))
            response = call(leader.list_groups.remote(session=self._session.token()), self._timeout_s)
            error = error_of(response)
            if error is not None:
                raise error
            groups.extend((group_id, state) for group_id, state, *_ in response.value)
        return sorted(groups)

    def describe_consumer_groups(self, group_ids: list[str]) -> list[ConsumerGroupDescription]:
        """Members, their assignments, and per partition the committed offset, log end
        offset and lag of each group: a classic group, or a consumer group of Kafka's consumer
        protocol (KIP-848), whose generation is its group epoch and protocol its server
        assignor.

        Raises:
            GroupIdNotFoundError: a group with neither members nor committed offsets.
        """
        out = []
        for group_id in group_ids:
            coordinator = self._coordinator(group_id)
            described = _described(coordinator, group_id)
            committed = committed_offsets(coordinator, None)
            owners = {TopicPartition(*tp): m["member_id"] for m in described["members"] for tp in m["assignment"]}
            partitions = {}
            for tp in sorted(set(committed) | set(owners)):
                end = self._offset(tp, LATEST_TIMESTAMP)
                offset = committed[tp].offset if tp in committed else None
                partitions[tp] = PartitionLag(
                    offset, end, None if offset is None else max(0, end - offset), owners.get(tp)
                )
            out.append(
                ConsumerGroupDescription(
                    group_id=group_id,
                    state=described["state"],
                    generation=described["generation"],
                    protocol=described["protocol"],
                    coordinator_partition=call(self._ask("find_coordinator", group_id), self._timeout_s)[0],
                    members=tuple(
                        MemberDescription(
                            m["member_id"],
                            m["instance_id"],
                            m["client_id"],
                            tuple(TopicPartition(*tp) for tp in m["assignment"]),
                        )
                        for m in described["members"]
                    ),
                    partitions=partitions,
                )
            )
        return out

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group."""
        return committed_offsets(self._coordinator(group_id), None)

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: dict[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Set the group's committed offsets (the group must have no active members).

        Raises:
            NonEmptyGroupError: consumers are in the group (stop them first).
        """
        committing = offsets_to_commit(offsets)
        try:
            self._coordinator(group_id).call("commit_offsets", group_id, "", -1, None, committing)
        except UnknownMemberIdError as exc:
            raise NonEmptyGroupError(str(exc)) from None

    def reset_consumer_group_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        *,
        to: str | None = None,
        to_timestamp_ms: int | None = None,
        shift_by: int | None = None,
        dry_run: bool = False,
    ) -> dict[TopicPartition, int]:
        """Move the group's committed offsets of ``partitions`` (kafka-consumer-groups
        --reset-offsets): ``to="earliest"`` or ``"latest"``, ``to_timestamp_ms`` (the first
        offset at or after it, else the end), or ``shift_by`` N from the committed offset
        (from the start where none), kept within the log. Returns the new offsets; with
        ``dry_run`` nothing is changed.

        Raises:
            ValueError: not exactly one of to, to_timestamp_ms, shift_by.
            NonEmptyGroupError: consumers are in the group.
        """
        if sum(x is not None for x in (to, to_timestamp_ms, shift_by)) != 1 or to not in (None, "earliest", "latest"):
            raise ValueError('give exactly one of to="earliest"|"latest", to_timestamp_ms, shift_by')
        partitions = [TopicPartition(*tp) for tp in partitions]
        committed = committed_offsets(self._coordinator(group_id), partitions) if shift_by is not None else {}
        new = {}
        for tp in partitions:
            start = self._offset(tp, EARLIEST_TIMESTAMP)
            end = self._offset(tp, LATEST_TIMESTAMP)
            if to is not None:
                new[tp] = start if to == "earliest" else end
            elif to_timestamp_ms is not None:
                found = self._offset(tp, to_timestamp_ms)
                new[tp] = end if found < 0 else found
            else:
                base = committed[tp].offset if tp in committed else start
                new[tp] = min(end, max(start, base + shift_by))
        if not dry_run:
            self.alter_consumer_group_offsets(group_id, new)
        return new

    def delete_consumer_groups(self, group_ids: list[str]) -> None:
        """Delete groups with no active members, with their committed offsets.

        Raises:
            NonEmptyGroupError, GroupIdNotFoundError.
        """
        for group_id in group_ids:
            self._coordinator(group_id).call("delete_group", group_id)

    def delete_consumer_group_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        """Forget the group's committed offsets of ``partitions`` (Kafka's
        Admin.deleteConsumerGroupOffsets); those of a topic an active member reads stay.

        Raises:
            GroupIdNotFoundError, GroupSubscribedToTopicError: the first refusal (the other
                partitions' offsets are deleted all the same).
        """
        asked = [(tp.topic, tp.partition) for tp in partitions]
        results = self._coordinator(group_id).call("delete_offsets", group_id, asked)
        _raise_first(
            {
                f"{t}-{p}": (code, f"{t}-{p} is read by a member of group {group_id!r}")
                for (t, p), code in results.items()
            }
        )

    def _coordinator(self, group_id: str) -> CoordinatorClient:
        return CoordinatorClient(
            self._cluster, group_id, self._timeout_s, COORDINATOR_RETRY_BACKOFF_S, session=self._session
        )


def _described(coordinator: CoordinatorClient, group_id: str) -> dict:
    """A consumer group's description (KIP-848) while it has members, else the classic
    group's (in the same shape), else the empty consumer group's. (A group id is of one kind
    while it has members; the classic side keeps an empty entry for a group whose offsets
    were read or committed.)

    Raises:
        GroupIdNotFoundError: neither is known.
    """
    try:
        group = coordinator.call("describe_consumer_group", group_id)
    except GroupIdNotFoundError:
        return coordinator.call("describe_group", group_id)
    if not group.members:
        try:
            return coordinator.call("describe_group", group_id)
        except GroupIdNotFoundError:
            pass
    members = [
        {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": "", "assignment": sorted(m.assigned)}
        for m in group.members.values()
    ]
    return {"state": group.state(), "generation": group.epoch, "protocol": group.assignor, "members": members}


def _legal_names(items: list, name_of) -> tuple[dict[str, tuple[int, str]], list]:
    """``(refused, legal)``: the items whose topic name is illegal, as per-topic results
    (Kafka's AdminClient fails those before sending), and the others, in order."""
    refused, legal = {}, []
    for item in items:
        try:
            validate_topic_name(name_of(item))
        except InvalidTopicError as exc:
            refused[repr(name_of(item))] = (exc.code, str(exc))
        else:
            legal.append(item)
    return refused, legal


def _raise_first(results: Mapping[Any, tuple[int, str]]) -> None:
    for code, message in results.values():
        if code:
            raise for_code(code)(message)


def _transaction(described: dict, coordinator_partition: int) -> TransactionDescription:
    return TransactionDescription(
        transactional_id=described["transactional_id"],
        state=described["state"],
        producer_id=described["producer_id"],
        producer_epoch=described["producer_epoch"],
        timeout_ms=described["timeout_ms"],
        partitions=tuple(TopicPartition(*tp) for tp in described["partitions"]),
        start_ms=described["start_ms"],
        coordinator_partition=coordinator_partition,
    )


#: What :meth:`Admin.alter_configs` and :meth:`Admin.incremental_alter_configs` take.
ConfigResources = Mapping[str, Mapping[str, Any] | None] | Iterable[ConfigResource]
#: A config resource as the Admin keys it: a topic's name, or ``(ConfigResourceType.BROKER,
#: name)`` for a broker resource (``name`` a broker id, or "" for the cluster default), or
#: ``(ConfigResourceType.GROUP, group id)``.
ResourceKey = str | tuple[ConfigResourceType, str]
#: The controller's methods describing and altering each type of resource.
_DESCRIBE = {
    ConfigResourceType.TOPIC: "describe_configs",
    ConfigResourceType.BROKER: "describe_broker_configs",
    ConfigResourceType.GROUP: "describe_group_configs",
}
_ALTER = {
    ConfigResourceType.TOPIC: "alter_configs",
    ConfigResourceType.BROKER: "alter_broker_configs",
    ConfigResourceType.GROUP: "alter_group_configs",
}


def _names(names: Iterable[str]) -> list[str]:
    """A list of names (refusing one string, which would be read as its characters)."""
    if isinstance(names, str):
        raise TypeError(f"expected a list of names, got the string {names!r}")
    return list(names)


def _resource(resource: Any) -> tuple[ConfigResourceType, str, Mapping[str, Any] | None]:
    """``(type, name, configs)`` of a ConfigResource (or an object shaped like kafka-python's).

    Raises:
        InvalidRequestError: a resource type other than TOPIC, BROKER or GROUP, a broker
            resource named neither by a broker id (digits, as ``str(broker_id)`` writes it)
            nor "", or a group resource named "".
        TypeError: not a ConfigResource, or a name that is not a string.
    """
    try:
        kind, name, configs = resource.resource_type, resource.name, resource.configs
    except AttributeError:
        raise TypeError(f"expected a topic name or a ConfigResource, got {resource!r}") from None
    try:
        kind = ConfigResourceType[kind.upper()] if isinstance(kind, str) else ConfigResourceType(kind)
    except (KeyError, ValueError):
        known = "TOPIC, BROKER or GROUP"
        raise InvalidRequestError(f"unknown resource type {resource.resource_type!r} ({known})") from None
    if not isinstance(name, str):
        raise TypeError(f"a {kind.name.lower()} resource's name must be a string, got {name!r}")
    if kind == ConfigResourceType.BROKER:
        broker_configs.broker_id_of(name)
    if kind == ConfigResourceType.GROUP:
        group_configs.check_group_name(name)
    return kind, name, configs


def _resource_key(kind: ConfigResourceType, name: str) -> ResourceKey:
    """How the Admin keys a resource: a topic by its name, another by ``(type, name)``."""
    return name if kind == ConfigResourceType.TOPIC else (kind, name)


def _key_type(key: ResourceKey) -> ConfigResourceType:
    return ConfigResourceType.TOPIC if isinstance(key, str) else key[0]


def _key_name(key: ResourceKey) -> str:
    return key if isinstance(key, str) else key[1]


def _resource_label(key: ResourceKey) -> str:
    """A resource as messages name it: ``topic 'clicks'``, ``broker 0``, ``the cluster
    default``, ``group 'orders'``."""
    if isinstance(key, str):
        return f"topic {key!r}"
    if key[0] == ConfigResourceType.GROUP:
        return f"group {key[1]!r}"
    return f"broker {key[1]}" if key[1] else 'the cluster default (broker resource "")'


def _config_changes(resources: ConfigResources, incremental: bool) -> dict[ResourceKey, dict[str, Any]]:
    """``{resource: {config: change}}`` for the controller from the dict or ConfigResource
    forms, keyed as :func:`_resource_key` (the dict form names topics only), in order: a
    change is a value, None, or (incremental only) ``("append" | "subtract", items)``.

    Raises:
        InvalidRequestError: a resource neither a topic nor a broker, a broker resource's
            name that is not one, or a resource named twice.
        InvalidConfigError: an ``(op, value)`` change outside an incremental alter.
        TypeError: a shape that is neither form, a name that is not a string, or an unknown
            operation.
    """
    if isinstance(resources, Mapping):
        triples = [(ConfigResourceType.TOPIC, name, configs) for name, configs in resources.items()]
    elif isinstance(resources, (str, bytes)) or not isinstance(resources, Iterable):
        raise TypeError(f"expected {{topic: {{property: value}}}} or a list of ConfigResource, got {resources!r}")
    else:
        triples = [_resource(resource) for resource in resources]
    changes: dict[ResourceKey, dict[str, Any]] = {}
    for kind, name, configs in triples:
        if not isinstance(name, str):
            raise TypeError(f"a topic's name must be a string, got {name!r}")
        key = _resource_key(kind, name)
        label = _resource_label(key)
        if key in changes:
            raise InvalidRequestError(f"{label} is named twice")
        if configs is not None and not isinstance(configs, Mapping):
            raise TypeError(f"the configs of {label} must be a dict of config -> value, got {configs!r}")
        changes[key] = {config: _change(label, config, value, incremental) for config, value in (configs or {}).items()}
    return changes


def _change(resource: str, key: Any, value: Any, incremental: bool) -> Any:
    """One config's change for the controller (``resource`` names its resource in messages)."""
    if not isinstance(key, str):
        raise TypeError(f"a config of {resource} must be named by a string, got {key!r}")
    if not isinstance(value, tuple):
        return value
    if len(value) != 2:
        raise TypeError(f"{resource} {key}: a change is a value, None or (AlterConfigOp, value), got {value!r}")
    op, operand = value
    try:
        op = AlterConfigOp[op.upper()] if isinstance(op, str) else AlterConfigOp(op)
    except (KeyError, ValueError):
        raise TypeError(f"{resource} {key}: unknown operation {value[0]!r} (SET, DELETE, APPEND or SUBTRACT)") from None
    if not incremental and op != AlterConfigOp.SET:
        raise InvalidConfigError(
            f"{resource} {key}: alter_configs replaces the resource's configs and only sets values; "
            f"{op.name} is for incremental_alter_configs"
        )
    if op == AlterConfigOp.SET:
        return operand
    if op == AlterConfigOp.DELETE:
        return None
    return (op.name.lower(), operand)


def _total_count(topic: str, wanted: Any) -> int:
    """The partition count asked for ``topic``: a number, or a NewPartitions' total_count.

    Raises:
        InvalidReplicaAssignmentError: new_assignments given.
        TypeError: neither.
    """
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        return wanted
    total = getattr(wanted, "total_count", None)
    if isinstance(total, bool) or not isinstance(total, int):
        raise TypeError(f"{topic!r}: expected a partition count or NewPartitions(total_count), got {wanted!r}")
    if getattr(wanted, "new_assignments", None) is not None:
        raise InvalidReplicaAssignmentError(
            f"{topic!r}: raylog places new partitions itself (new_assignments must be None); "
            "move them afterwards with alter_partition_reassignments"
        )
    return total
