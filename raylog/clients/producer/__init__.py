"""The Producer, cut along Kafka's seams (as kafka-python's ``kafka/producer/``):

- :mod:`~raylog.clients.producer.producer`: :class:`Producer`, the public face: checks each
  record, picks its partition and hands it to the accumulator.
- :mod:`~raylog.clients.producer.record_accumulator`: :class:`RecordAccumulator`, the
  batches waiting to be sent and the buffer memory they hold.
- :mod:`~raylog.clients.producer.sender`: :class:`Sender`, the thread that numbers batches
  (idempotence), sends them to leaders, and retries or completes them.
- :mod:`~raylog.clients.producer.transaction_manager`: :class:`TransactionManager`, the
  calls to the transaction coordinator and the state of the open transaction.
- :mod:`~raylog.clients.producer.producer_batch`: :class:`ProducerBatch`, one partition's
  batch and the completion state its records' futures share.
- :mod:`~raylog.clients.producer.future`: :class:`FutureRecordMetadata`, what ``send``
  returns, and the future of a ``send_arrow`` call.
- :mod:`~raylog.clients.producer.producer_metadata`: :class:`ProducerMetadata`, each topic's
  partitions and batch capacity.
- :mod:`~raylog.clients.producer.arrow_batches`: how ``send_arrow`` cuts a table into batches.
"""

from raylog.clients.producer.future import BatchMetadata, FutureRecordMetadata
from raylog.clients.producer.producer import Producer
from raylog.clients.producer.record_accumulator import RECORD_OVERHEAD_BYTES

__all__ = ["RECORD_OVERHEAD_BYTES", "BatchMetadata", "FutureRecordMetadata", "Producer"]
