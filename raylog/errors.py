"""Typed errors of raylog, named as Kafka's.

Every error derives from :class:`RaylogError` (also importable as kafka-python's
``KafkaError``), which carries two flags clients act on:

- ``retriable``: the same request may succeed if sent again (after a backoff); such errors
  derive from :class:`RetriableError`;
- ``invalid_metadata``: the client's view of leaders is stale and must be refreshed
  before retrying; such errors derive from :class:`InvalidMetadataError` (a RetriableError).

API errors carry Kafka's error code and name where the meaning matches; those codes are
never renumbered. Errors that only ever arise inside a client have ``code = None``.
Look an API error up by its code with :func:`for_code`.

Class names follow kafka-python's ``kafka.errors`` where raylog's own name came first or
reads better; kafka-python's name is then an alias of the same class (for example
``NotLeaderForPartitionError`` is :class:`NotLeaderOrFollowerError`, Kafka's current name
of code 6), so code written against kafka-python catches raylog's errors by the names it
already uses. Names raylog used before a rename stay as aliases.
"""

from __future__ import annotations


class RaylogError(Exception):
    """Base of every raylog error (kafka-python's ``KafkaError``)."""

    code: int | None = None
    name: str = "RAYLOG_ERROR"
    retriable: bool = False
    invalid_metadata: bool = False

    def __reduce__(self):
        # Errors cross Ray process boundaries: rebuild them from their message only.
        return (type(self), self.args)


class RetriableError(RaylogError):
    """An error after which the same request may succeed if sent again."""

    retriable = True


class InvalidMetadataError(RetriableError):
    """A retriable error that also means the client's metadata is stale: refresh, then retry."""

    invalid_metadata = True


class ApiError(RaylogError):
    """An error with a Kafka error code, returned by brokers in responses (kafka-python's
    ``BrokerResponseError``)."""


_BY_CODE: dict[int, type[ApiError]] = {}


def _api(code: int, name: str):
    """Register an API error under its Kafka code and name; its flags come from its bases."""

    def register(cls: type[ApiError]) -> type[ApiError]:
        cls.code, cls.name = code, name
        assert cls.retriable == issubclass(cls, RetriableError), cls
        assert cls.invalid_metadata == issubclass(cls, InvalidMetadataError), cls
        assert code not in _BY_CODE, f"error code {code} registered twice"
        _BY_CODE[code] = cls
        return cls

    return register


def for_code(code: int) -> type[ApiError]:
    """The error class for a Kafka error code.

    Raises:
        KeyError: no error with that code is known.
    """
    return _BY_CODE[code]


@_api(-1, "UNKNOWN_SERVER_ERROR")
class UnknownServerError(ApiError):
    """The server failed in a way it has no code for (a bug); the message says how."""


@_api(1, "OFFSET_OUT_OF_RANGE")
class OffsetOutOfRangeError(ApiError):
    """The requested offset is below the log start offset or above the log end offset."""


@_api(2, "CORRUPT_MESSAGE")
class CorruptRecordError(RetriableError, ApiError):
    """A record batch failed validation: bad magic, CRC, length, count or body."""


@_api(3, "UNKNOWN_TOPIC_OR_PARTITION")
class UnknownTopicOrPartitionError(InvalidMetadataError, ApiError):
    """The topic or partition does not exist (or is not hosted here)."""


@_api(5, "LEADER_NOT_AVAILABLE")
class LeaderNotAvailableError(InvalidMetadataError, ApiError):
    """The partition has no leader right now (an election is under way)."""


@_api(6, "NOT_LEADER_OR_FOLLOWER")
class NotLeaderOrFollowerError(InvalidMetadataError, ApiError):
    """The replica asked is not the partition's leader (or, for a follower fetch, not a replica)."""


@_api(7, "REQUEST_TIMED_OUT")
class RequestTimedOutError(RetriableError, ApiError):
    """The request did not complete in time (e.g. acks=all waiting for followers)."""


@_api(10, "MESSAGE_TOO_LARGE")
class RecordTooLargeError(ApiError):
    """A record batch is larger than ``max.message.bytes`` (or a record than the batch limit)."""


@_api(13, "NETWORK_EXCEPTION")
class NetworkExceptionError(InvalidMetadataError, ApiError):
    """The actor serving the request died or could not be reached (it may be restarting): a
    broker connection lost, in Kafka's terms. Also importable as ``KafkaConnectionError``
    (kafka-python's client-side name for it) and ``BrokerUnavailableError`` (raylog's
    earlier name)."""


@_api(17, "INVALID_TOPIC_EXCEPTION")
class InvalidTopicError(ApiError, ValueError):
    """The topic name is not legal (length, characters, or reserved)."""


@_api(19, "NOT_ENOUGH_REPLICAS")
class NotEnoughReplicasError(RetriableError, ApiError):
    """acks=all was refused: fewer in-sync replicas than min.insync.replicas."""


@_api(20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND")
class NotEnoughReplicasAfterAppendError(RetriableError, ApiError):
    """The batch was written but the in-sync replicas shrank below min.insync.replicas."""


@_api(21, "INVALID_REQUIRED_ACKS")
class InvalidRequiredAcksError(ApiError, ValueError):
    """acks must be 0, 1 or -1 ("all")."""


class AuthorizationError(ApiError):
    """Base of the errors an authorizer's refusal raises (kafka-python's ``AuthorizationError``;
    Kafka's ``AuthorizationException``): the principal may not do the operation on the resource.
    Not retriable: the same request is refused again until an ACL changes."""


@_api(29, "TOPIC_AUTHORIZATION_FAILED")
class TopicAuthorizationFailedError(AuthorizationError):
    """The principal may not do the operation on the topic (Kafka's TopicAuthorizationException)."""


@_api(30, "GROUP_AUTHORIZATION_FAILED")
class GroupAuthorizationFailedError(AuthorizationError):
    """The principal may not do the operation on the consumer group (Kafka's
    GroupAuthorizationException)."""


@_api(31, "CLUSTER_AUTHORIZATION_FAILED")
class ClusterAuthorizationFailedError(AuthorizationError):
    """The principal may not do the operation on the cluster (e.g. create topics, alter ACLs,
    or write idempotently without IDEMPOTENT_WRITE; Kafka's ClusterAuthorizationException)."""


@_api(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
class TransactionalIdAuthorizationFailedError(AuthorizationError):
    """The principal may not use the transactional id (Kafka's
    TransactionalIdAuthorizationException)."""


@_api(54, "SECURITY_DISABLED")
class SecurityDisabledError(ApiError):
    """An ACL request reached a cluster with no authorizer configured (Kafka's
    SecurityDisabledException)."""


@_api(33, "UNSUPPORTED_SASL_MECHANISM")
class UnsupportedSaslMechanismError(ApiError):
    """The SASL mechanism a client asked for is not one the listener has enabled
    (``sasl.enabled.mechanisms``), or a SCRAM credential names a mechanism Kafka does not have."""


@_api(34, "ILLEGAL_SASL_STATE")
class IllegalSaslStateError(ApiError):
    """A SASL request out of turn (SaslAuthenticate before SaslHandshake, a second handshake)."""


@_api(58, "SASL_AUTHENTICATION_FAILED")
class SaslAuthenticationError(ApiError):
    """Authentication failed: an unknown user, a wrong password, or a malformed exchange (Kafka's
    SaslAuthenticationException; the listener closes the connection after answering it)."""


@_api(91, "RESOURCE_NOT_FOUND")
class ResourceNotFoundError(ApiError):
    """The resource a request names does not exist (a user without SCRAM credentials)."""


@_api(92, "DUPLICATE_RESOURCE")
class DuplicateResourceError(ApiError):
    """A request names the same resource twice (a user and mechanism in one
    AlterUserScramCredentials)."""


@_api(93, "UNACCEPTABLE_CREDENTIAL")
class UnacceptableCredentialError(ApiError, ValueError):
    """A SCRAM credential Kafka refuses: an empty user name, iterations outside [4096, 16384],
    an empty salt or salted password."""


@_api(35, "UNSUPPORTED_VERSION")
class UnsupportedVersionError(ApiError):
    """The API or version a Kafka client asked for is not one raylog's Kafka listener serves."""


@_api(36, "TOPIC_ALREADY_EXISTS")
class TopicAlreadyExistsError(ApiError):
    """A topic of that name exists already."""


@_api(37, "INVALID_PARTITIONS")
class InvalidPartitionsError(ApiError, ValueError):
    """The partition count (or partition number) is not valid."""


@_api(38, "INVALID_REPLICATION_FACTOR")
class InvalidReplicationFactorError(ApiError, ValueError):
    """The replication factor is below 1 or above the number of brokers."""


@_api(39, "INVALID_REPLICA_ASSIGNMENT")
class InvalidReplicaAssignmentError(ApiError, ValueError):
    """A replica assignment names unknown or repeated brokers."""


@_api(42, "INVALID_REQUEST")
class InvalidRequestError(ApiError):
    """A request that is well formed but not valid here (e.g. offsets out of order)."""


@_api(40, "INVALID_CONFIG")
class InvalidConfigError(ApiError, ValueError):
    """A configuration key is unknown or its value is out of range."""


@_api(44, "POLICY_VIOLATION")
class PolicyViolationError(ApiError):
    """The request breaks a topic's policy (e.g. deleting records of a compact-only topic)."""


@_api(45, "OUT_OF_ORDER_SEQUENCE_NUMBER")
class OutOfOrderSequenceError(ApiError):
    """An idempotent producer's batch is behind its sequence and is not a recent duplicate,
    or an earlier batch never arrived."""


@_api(47, "INVALID_PRODUCER_EPOCH")
class InvalidProducerEpochError(ApiError):
    """A producer's epoch is older than one the partition has seen (a zombie producer)."""


@_api(48, "INVALID_TXN_STATE")
class InvalidTxnStateError(ApiError):
    """The transactional call does not fit the transaction's state (e.g. committing a
    transaction that was aborted)."""


@_api(49, "INVALID_PRODUCER_ID_MAPPING")
class InvalidProducerIdMappingError(ApiError):
    """The transactional id has no producer with this id and epoch (init_transactions first)."""


@_api(50, "INVALID_TRANSACTION_TIMEOUT")
class InvalidTransactionTimeoutError(ApiError, ValueError):
    """transaction.timeout.ms is out of the coordinator's range."""


@_api(51, "CONCURRENT_TRANSACTIONS")
class ConcurrentTransactionsError(RetriableError, ApiError):
    """The transactional id's previous transaction is still completing; retry."""


@_api(88, "UNSTABLE_OFFSET_COMMIT")
class UnstableOffsetCommitError(RetriableError, ApiError):
    """A transaction that commits offsets of this partition is not decided yet; retry."""


@_api(105, "TRANSACTIONAL_ID_NOT_FOUND")
class TransactionalIdNotFoundError(ApiError):
    """No producer ever initialised this transactional id."""


@_api(90, "PRODUCER_FENCED")
class ProducerFencedError(ApiError):
    """A newer producer instance with the same transactional id started (or the transaction
    timed out and the coordinator aborted it): this instance can neither write nor commit."""


@_api(55, "OPERATION_NOT_ATTEMPTED")
class OperationNotAttemptedError(ApiError):
    """Not attempted because another part of the same request failed (a transaction's
    partitions are added all together or not at all)."""


@_api(56, "KAFKA_STORAGE_ERROR")
class StorageError(RetriableError, ApiError):
    """The log's disk failed an operation (full disk, I/O error); nothing partial was kept."""


@_api(87, "INVALID_RECORD")
class InvalidRecordError(ApiError):
    """A record the broker refuses (e.g. no key for a compacted topic, headers of the wrong
    type); the whole batch is refused. ``record_errors``: the records at fault, as
    ``(index in the batch, why)`` (KIP-467: Kafka's clients fail only those records with
    INVALID_RECORD, the batch's others with a retriable error of their own)."""

    def __init__(self, message: str = "", record_errors: tuple[tuple[int, str], ...] = ()):
        super().__init__(message)
        self.record_errors = tuple(record_errors)

    def __reduce__(self):
        return type(self), (str(self), self.record_errors)


@_api(70, "FETCH_SESSION_ID_NOT_FOUND")
class FetchSessionIdNotFoundError(RetriableError, ApiError):
    """An incremental fetch named a fetch session this broker does not have (evicted, or
    never made here): the client starts a new one with a full fetch (KIP-227)."""


@_api(71, "INVALID_FETCH_SESSION_EPOCH")
class InvalidFetchSessionEpochError(RetriableError, ApiError):
    """An incremental fetch's session epoch is not the one the session expects next (a
    fetch was lost or sent twice): the client starts a new session with a full fetch."""


@_api(74, "FENCED_LEADER_EPOCH")
class FencedLeaderEpochError(InvalidMetadataError, ApiError):
    """The request carried a leader epoch older than the replica's."""


@_api(75, "UNKNOWN_LEADER_EPOCH")
class UnknownLeaderEpochError(InvalidMetadataError, ApiError):
    """The request carried a leader epoch newer than the replica knows."""


@_api(76, "UNSUPPORTED_COMPRESSION_TYPE")
class UnsupportedCompressionTypeError(ApiError):
    """A record batch uses a compression codec that is not known (or not installed)."""


@_api(78, "OFFSET_NOT_AVAILABLE")
class OffsetNotAvailableError(RetriableError, ApiError):
    """A new leader cannot answer an offset look-up yet: its high watermark has not reached the
    start of its epoch (the answer could be older than one its predecessor gave)."""


@_api(12, "OFFSET_METADATA_TOO_LARGE")
class OffsetMetadataTooLargeError(ApiError, ValueError):
    """A committed offset's metadata string is longer than the coordinator keeps."""


@_api(14, "COORDINATOR_LOAD_IN_PROGRESS")
class CoordinatorLoadInProgressError(RetriableError, ApiError):
    """The group coordinator is still reading its groups back from ``__consumer_offsets``."""


@_api(15, "COORDINATOR_NOT_AVAILABLE")
class CoordinatorNotAvailableError(InvalidMetadataError, ApiError):
    """No group coordinator is serving right now (its partition has no leader)."""


@_api(16, "NOT_COORDINATOR")
class NotCoordinatorError(InvalidMetadataError, ApiError):
    """This replica does not coordinate the group (leadership moved): find it again."""


@_api(22, "ILLEGAL_GENERATION")
class IllegalGenerationError(ApiError):
    """The member's group generation is not the current one: it must rejoin."""


@_api(23, "INCONSISTENT_GROUP_PROTOCOL")
class InconsistentGroupProtocolError(ApiError, ValueError):
    """The member supports no partition assignor that every other member supports."""


@_api(24, "INVALID_GROUP_ID")
class InvalidGroupIdError(ApiError, ValueError):
    """A group id that is empty, not a string, or longer than Kafka's protocol allows."""


@_api(25, "UNKNOWN_MEMBER_ID")
class UnknownMemberIdError(ApiError):
    """The coordinator does not know this member (it was expired or left): rejoin."""


@_api(79, "MEMBER_ID_REQUIRED")
class MemberIdRequiredError(ApiError):
    """A new member must join again with the member id its answer carries (KIP-394): until it
    does, the group does not wait for it, and the id expires with its session timeout."""


@_api(26, "INVALID_SESSION_TIMEOUT")
class InvalidSessionTimeoutError(ApiError, ValueError):
    """session.timeout.ms outside the coordinator's allowed range."""


@_api(27, "REBALANCE_IN_PROGRESS")
class RebalanceInProgressError(ApiError):
    """The group is rebalancing: the member must rejoin."""


@_api(68, "NON_EMPTY_GROUP")
class NonEmptyGroupError(ApiError):
    """The operation needs a group with no active members (delete, offset reset)."""


@_api(69, "GROUP_ID_NOT_FOUND")
class GroupIdNotFoundError(ApiError):
    """No group by that id."""


@_api(80, "PREFERRED_LEADER_NOT_AVAILABLE")
class PreferredLeaderNotAvailableError(InvalidMetadataError, ApiError):
    """A preferred-leader election could not move leadership: the partition's first replica
    is not live or not in sync."""


@_api(83, "ELIGIBLE_LEADERS_NOT_AVAILABLE")
class EligibleLeadersNotAvailableError(InvalidMetadataError, ApiError):
    """An election found no replica that may lead (none live, or none in sync for a clean one)."""


@_api(84, "ELECTION_NOT_NEEDED")
class ElectionNotNeededError(InvalidMetadataError, ApiError):
    """The election would change nothing: the replica it would elect already leads."""


@_api(85, "NO_REASSIGNMENT_IN_PROGRESS")
class NoReassignmentInProgressError(ApiError):
    """A reassignment to cancel is not under way."""


@_api(86, "GROUP_SUBSCRIBED_TO_TOPIC")
class GroupSubscribedToTopicError(ApiError):
    """An offset to delete belongs to a topic a member of the group is subscribed to."""


@_api(82, "FENCED_INSTANCE_ID")
class FencedInstanceIdError(ApiError):
    """Another consumer joined with the same group.instance.id: this one is a zombie."""


@_api(81, "GROUP_MAX_SIZE_REACHED")
class GroupMaxSizeReachedError(ApiError):
    """The group has group.consumer.max.size members already: this one is not admitted."""


@_api(110, "FENCED_MEMBER_EPOCH")
class FencedMemberEpochError(ApiError):
    """A consumer group member's epoch is not the coordinator's (KIP-848): it was removed, or
    its heartbeats were lost past what the coordinator can reconcile. It must give up its
    partitions and join again with epoch 0."""


@_api(111, "UNRELEASED_INSTANCE_ID")
class UnreleasedInstanceIdError(ApiError):
    """A static member joined with a group.instance.id that another member still holds
    (KIP-848): the old one must leave (epoch -2) or expire first."""


@_api(112, "UNSUPPORTED_ASSIGNOR")
class UnsupportedAssignorError(ApiError, ValueError):
    """A consumer group member asked for a server-side assignor the coordinator does not run."""


@_api(113, "STALE_MEMBER_EPOCH")
class StaleMemberEpochError(ApiError):
    """An offset commit carries a member epoch older than the member's (KIP-848): the member
    has moved on since, its commit is refused, and it may commit again with its new epoch."""


@_api(128, "INVALID_REGULAR_EXPRESSION")
class InvalidRegularExpressionError(ApiError, ValueError):
    """A consumer group member's topic regular expression does not compile."""


@_api(100, "UNKNOWN_TOPIC_ID")
class UnknownTopicIdError(InvalidMetadataError, ApiError):
    """No topic has that topic id (KIP-516)."""


@_api(103, "INCONSISTENT_TOPIC_ID")
class InconsistentTopicIdError(ApiError):
    """A log directory belongs to another topic id than the one asked for (a topic of the
    same name deleted and created again): the log is not opened."""


@_api(104, "INCONSISTENT_CLUSTER_ID")
class InconsistentClusterIdError(ApiError):
    """A broker's data directory was formatted for another raylog cluster: the broker is
    refused, and its directory left as it is."""


class CommitFailedError(RaylogError):
    """A commit was refused because the group rebalanced and this member's generation is
    over: its partitions may belong to another member now. Poll again, which rejoins."""


class KafkaTimeoutError(RetriableError):
    """A client-side wait ran out (metadata, buffer space, a future's result)."""


class TransactionAbortableError(RaylogError):
    """The open transaction cannot commit (a send in it failed): abort it, then begin anew."""


class IllegalStateError(RaylogError):
    """The client is used in a state that does not allow it (closed, nothing assigned, ...)."""


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """auto_offset_reset="none" and the position is unknown or out of range."""


class LogTruncationError(OffsetOutOfRangeError):
    """The consumer's position lies past where its partition's log diverged after an unclean
    leader election (KIP-320), and ``auto_offset_reset`` is "none": the records it read
    beyond that point are gone from the log."""


@_api(109, "OFFSET_MOVED_TO_TIERED_STORAGE")
class OffsetMovedToTieredStorageError(ApiError):
    """The offset asked for is below the local log start of a tiered partition: the remote
    tier holds it (Kafka's OffsetMovedToTieredStorageException). A leader answers a follower's
    fetch with it (the follower then starts at the local log start its answer carries) and
    serves a consumer's fetch from the remote tier."""


class RemoteStorageError(RetriableError, ApiError):
    """Tiered storage's object store failed an operation (Kafka's RemoteStorageException): the
    store is unreachable, refused the call, or an I/O error cut a transfer short. Retriable: a
    copy or a read may succeed once the store is back; a copy that failed was not reported as
    copied. No code: Kafka's RemoteStorageException is broker-internal and has no wire code, and
    KAFKA_STORAGE_ERROR (56) is :class:`StorageError`'s, on which a broker takes a local log
    directory offline, which a remote store's failure must not do."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """An object of tiered storage, or the metadata of a remote log segment, is not there
    (Kafka's RemoteResourceNotFoundException): deleted already, never uploaded (a segment
    without aborted transactions has no transaction index), or never announced."""


class InvalidRemoteLogSegmentStateError(RaylogError):
    """A remote log segment event that the segment's state does not allow (Kafka's
    RemoteLogSegmentState.isValidTransition refusing it): for example a copy finished of a
    segment whose deletion started. Not retriable: the same event is refused again."""


# kafka-python's names (``kafka.errors``) where they differ from the class's, and raylog's
# earlier names. Each is the same class, so ``except`` clauses with either name match.
KafkaError = RaylogError
BrokerResponseError = ApiError
UnknownError = UnknownServerError
NotLeaderForPartitionError = NotLeaderOrFollowerError
MessageSizeTooLargeError = RecordTooLargeError
BrokerUnavailableError = NetworkExceptionError
KafkaConnectionError = NetworkExceptionError
InvalidReplicationAssignmentError = InvalidReplicaAssignmentError
InvalidConfigurationError = InvalidConfigError
KafkaConfigurationError = InvalidConfigError
OutOfOrderSequenceNumberError = OutOfOrderSequenceError
KafkaStorageError = StorageError
SaslAuthenticationFailedError = SaslAuthenticationError
