"""raylog_spark under Kafka's ACLs: Spark reads and writes as the principal of the handle it is
given, whose credentials travel, pickled with it, into the executors (``secured``: see
tests/ray/test_client_principals.py; bob may READ ``granted`` and nothing else)."""

from __future__ import annotations

import pytest

import raylog_spark
from raylog import Producer
from raylog.errors import AuthorizationError, TopicAuthorizationFailedError
from tests.ray.test_client_principals import (  # noqa: F401 (secured: a fixture)
    GRANTED,
    TIMEOUT_S,
    _topic_without_acls,
    _values,
    anonymous,
    raylog_connect_as,
    sasl,
    secured,
)


def test_spark_reads_and_writes_only_what_the_principal_may(secured, spark):  # noqa: F811
    """Spark reads ``granted`` as bob in its executors; a topic bob may not describe is refused
    with TOPIC_AUTHORIZATION_FAILED before any Spark job, and his write to ``granted`` (no
    WRITE) with the authorizer's error from the executors; nothing refused is written. alice
    writes through her producer_config on a handle without credentials."""
    hidden = _topic_without_acls(secured)
    with Producer(secured) as producer:
        producer.send(GRANTED, b"for bob's spark").result(timeout=TIMEOUT_S)
    as_bob = raylog_connect_as(secured, "bob")
    read = raylog_spark.read_topic(spark, GRANTED, cluster=as_bob)
    assert b"for bob's spark" in [bytes(row.value) for row in read.select("value").collect()]
    with pytest.raises(TopicAuthorizationFailedError):
        raylog_spark.read_topic(spark, hidden, cluster=as_bob)
    refused = spark.createDataFrame([(b"bob may not write",)], "value binary")
    with pytest.raises(AuthorizationError):
        raylog_spark.write_topic(refused, GRANTED, cluster=as_bob)
    # A write's producer_config with alice's settings, on a handle without credentials: the
    # topic described on the driver and the executors' producers are alice's.
    allowed = spark.createDataFrame([(b"written by alice's producer_config",)], "value binary")
    assert raylog_spark.write_topic(allowed, GRANTED, cluster=anonymous(secured), producer_config=sasl("alice")) == 1
    values = _values(secured, "alice")
    assert b"written by alice's producer_config" in values and b"bob may not write" not in values
