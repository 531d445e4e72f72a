"""What raylog's clients and brokers both speak: plain Python, no Ray (Kafka's clients'
``common`` package, which its broker depends on).

- :mod:`record_batch` — the batch format shared by producer, disk and consumer;
- :mod:`kafka_columns` — records as Arrow columns: the consumer's table, Spark's Kafka
  source rows (which the broker's Parquet history has too);
- :mod:`compression` — body codecs;
- :mod:`requests` — words and bounds of requests (timestamps, isolation levels, ...);
- :mod:`names` — names and their rules: topics, client, transactional and group ids, and
  raylog's Ray actors (and where they run);
- :mod:`acl` — access control lists (Kafka's AclBinding and its parts);
- :mod:`scram` — SCRAM credentials, as clients salt them and brokers keep them;
- :mod:`assignors` — partition assignors, run by a group's leader or its coordinator;
- :mod:`group_protocol` — the consumer group protocol's heartbeat and its words (KIP-848).
"""
