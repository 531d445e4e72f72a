"""The Producer, cut along Kafka's seams (kafka-python's ``kafka/producer/``):

- :mod:`~raylog.clients.producer.producer`: :class:`Producer`, the public face.
- :mod:`~raylog.clients.producer.future`: :class:`FutureRecordMetadata`, what ``send`` returns.
- :mod:`~raylog.clients.producer.producer_batch`: :class:`ProducerBatch`, one partition's batch.
"""

from raylog.clients.producer.future import BatchMetadata, FutureRecordMetadata
from raylog.clients.producer.producer import RECORD_OVERHEAD_BYTES, Producer

__all__ = ["RECORD_OVERHEAD_BYTES", "BatchMetadata", "FutureRecordMetadata", "Producer"]
