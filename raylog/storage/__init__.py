"""raylog's storage engine: plain Python, no Ray. Its batches are in the format of
:mod:`raylog.common.record_batch`.

- :mod:`file_records` — an append-only file of batches;
- :mod:`index` — sparse offset and time indexes;
- :mod:`segment` — a log file with its indexes;
- :mod:`log` — a partition's log: append, read, roll, truncate, recover, retention;
- :mod:`cleaner` — compaction (``cleanup.policy=compact``): the latest record per key;
- :mod:`log_dirs` — identities on a broker's disk: log directories by topic id, stray logs;
- :mod:`producer_snapshot` — files of idempotent-producer state at an offset;
- :mod:`remote_log_metadata` — tiered storage's remote segments and their events (KIP-405);
- :mod:`remote_log_metadata_cache` — one partition's remote segments, and what to copy or delete;
- :mod:`remote_storage` — the object store of tiered storage, over ``pyarrow.fs``;
- :mod:`remote_log_reader` — reads below the local log start, from the remote tier;
- :mod:`history` — a partition's history as Parquet in the object store, with its manifest,
  and the plan of a read that takes the past from it and the live tail from the brokers.
"""
