"""Words and bounds of requests that clients and brokers both use, as Kafka numbers them.

A client asks for these (a fetch's isolation level, a list-offsets timestamp, an election
type) and stays within these bounds; a broker reads and enforces them.
"""

#: ListOffsets' timestamps that ask for the log start and the log end (Kafka's).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: ListOffsets' other sentinels (Kafka's): the record with the largest timestamp (KIP-734,
#: v7+), the local log start (v8+) and the highest offset in the remote tier (v9+, KIP-1005).
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
#: FetchRequest.isolation_level values (Kafka's).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: Kafka's ElectionType (ElectLeaders v1+; v0 is preferred).
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1
#: Kafka's transaction.max.timeout.ms: the longest transaction.timeout.ms accepted.
MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
#: The most bytes one read returns (beyond its first batch), whatever the fetch asked: a
#: response is one Ray object, copied whole into the object store (Kafka bounds a fetch
#: response by its broker's fetch.max.bytes likewise).
MAX_READ_BYTES = 64 * 1024 * 1024
#: Batches remembered per producer for duplicate detection (Kafka keeps 5, matching the
#: largest in-flight window a producer may use with idempotence).
RETAINED_BATCHES = 5
