"""Kafka's wire protocol in plain Python: the codec (:mod:`raylog.kafka.codec`) and record batch conversion."""
