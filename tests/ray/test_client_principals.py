"""raylog's own clients under Kafka's ACLs: a Producer, Consumer or Admin given kafka-python's
security settings authenticates with the controller (SCRAM, the password never sent; or PLAIN)
and every call it makes carries the session token the controller signed; replicas and the
controller authorize that principal, and a client without credentials is User:ANONYMOUS.

``secured`` is a cluster of two brokers with the authorizer on, ``User:admin`` its only super
user, made with admin's credentials (``raylog.connect`` as admin creates that user with the
cluster); alice may write and read ``granted``, bob may read it. Nothing is open by default
(``allow.everyone.if.no.acl.found`` false).
"""

from __future__ import annotations

import os
import signal
import uuid

import pytest
import ray

from raylog import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    Admin,
    Consumer,
    NewTopic,
    Producer,
    ResourcePattern,
    ResourceType,
    TopicPartition,
)
from raylog.clients.cluster import RaylogCluster
from raylog.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    SaslAuthenticationError,
    TopicAuthorizationFailedError,
)

#: A bound on one client call (not a measure).
TIMEOUT_S = 60.0
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
GRANTED = "granted"


def sasl(user: str, mechanism: str = "SCRAM-SHA-512", password: str | None = None) -> dict:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": PASSWORDS[user] if password is None else password,
    }


def allow(user: str, operation: ACLOperation, kind: ResourceType = ResourceType.TOPIC, name: str = GRANTED) -> ACL:
    return ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW, ResourcePattern(kind, name))


@pytest.fixture(scope="module")
def secured(cluster, tmp_path_factory):
    import raylog

    handle = raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog-principals")),
        num_brokers=2,
        cluster_name=f"p{uuid.uuid4().hex[:8]}",
        config={
            "authorizer": "acl",
            "super.users": "User:admin",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
        **sasl("admin"),
    )
    admin = Admin(handle)  # admin: the handle's own credentials
    admin.alter_user_scram_credentials({u: p for u, p in PASSWORDS.items() if u != "admin"})
    admin.create_topics([NewTopic(GRANTED, 1, 2)], wait_for_leaders_ms=int(TIMEOUT_S * 1000))
    admin.create_acls(
        [
            allow("alice", ACLOperation.WRITE),
            allow("alice", ACLOperation.READ),
            allow("bob", ACLOperation.READ),
            allow("bob", ACLOperation.READ, ResourceType.GROUP, "bobs"),
        ]
    )
    yield handle
    handle.shutdown()


def anonymous(cluster) -> RaylogCluster:
    """The same cluster, by a handle without credentials (what code that never logs in gets)."""
    return RaylogCluster(cluster.cluster_name, cluster.controller)


def test_a_user_writes_and_reads_what_its_acls_allow_and_replication_is_the_brokers(secured):
    """alice writes with acks=all to a topic of two replicas (the follower's fetches are the
    broker's own) and reads it back; bob reads it, with SCRAM-SHA-256 and with PLAIN."""
    with Producer(secured, acks="all", **sasl("alice")) as producer:
        assert producer.send(GRANTED, b"from alice").result(timeout=TIMEOUT_S).offset >= 0
    for user, mechanism in (("alice", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-256"), ("bob", "PLAIN")):
        assert b"from alice" in _values(secured, user, mechanism), (user, mechanism)


def test_what_the_acls_do_not_allow_is_refused_with_kafkas_errors(secured):
    """bob may read but not write; without credentials nothing is allowed (no ACL names
    User:ANONYMOUS): not writing, not reading, not creating a topic, not changing ACLs; bob
    cannot join a group he has no READ on, nor create ACLs granting himself more. Nothing
    refused reached the log."""
    nobody = anonymous(secured)
    # bob may describe ``granted`` (READ): his idempotent producer needs IDEMPOTENT_WRITE on the
    # cluster or WRITE on some topic for its producer id, as in Kafka, and one that is not
    # idempotent is refused by the leader. User:ANONYMOUS may not even describe it: any send
    # of its is refused as the topic is looked up.
    for handle, settings, idempotent_refusal in (
        (secured, sasl("bob"), ClusterAuthorizationFailedError),
        (nobody, {}, TopicAuthorizationFailedError),
    ):
        with Producer(handle, retries=0, **settings) as producer:
            with pytest.raises(idempotent_refusal):
                producer.send(GRANTED, b"may not").result(timeout=TIMEOUT_S)
        with Producer(handle, retries=0, enable_idempotence=False, **settings) as producer:
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send(GRANTED, b"may not").result(timeout=TIMEOUT_S)
    with Consumer(nobody, auto_offset_reset="earliest") as consumer:
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.assign([TopicPartition(GRANTED, 0)])
    with pytest.raises(TopicAuthorizationFailedError):
        Admin(nobody).create_topics([NewTopic("anonymous-topic", 1, 1)])
    with pytest.raises(ClusterAuthorizationFailedError):
        Admin(nobody).create_acls([allow("bob", ACLOperation.WRITE)])
    with pytest.raises(ClusterAuthorizationFailedError):
        Admin(secured, **sasl("bob")).create_acls([allow("bob", ACLOperation.WRITE)])
    member = Consumer(secured, GRANTED, group_id="not-bobs", **sasl("bob"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            member.poll(timeout_ms=int(TIMEOUT_S * 1000))
    finally:
        member.close()
    assert _values(secured, "alice").count(b"may not") == 0


def test_wrong_credentials_are_refused_where_the_client_is_made(secured):
    for settings in (sasl("alice", password="wrong"), {**sasl("alice"), "sasl_plain_username": "mallory"}):
        for client in (Producer, Admin):
            with pytest.raises(SaslAuthenticationError):
                client(secured, **settings)
    with pytest.raises(SaslAuthenticationError):
        Consumer(secured, **sasl("alice", "PLAIN", password="wrong"))


def test_deleting_an_acl_takes_effect_on_a_client_already_writing(secured):
    topic = f"revoked-{uuid.uuid4().hex[:6]}"
    admin = Admin(secured)
    admin.create_topics([NewTopic(topic, 1, 1)], wait_for_leaders_ms=int(TIMEOUT_S * 1000))
    grant = allow("alice", ACLOperation.WRITE, name=topic)
    admin.create_acls([grant])
    with Producer(secured, retries=0, **sasl("alice")) as producer:
        assert producer.send(topic, b"while allowed").result(timeout=TIMEOUT_S).offset == 0
        admin.delete_acls([ACLFilter.exactly(grant)])  # answered once the replicas hold it
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"after the acl went").result(timeout=TIMEOUT_S)


def test_an_acl_change_does_not_wait_for_new_replicas_to_start_and_they_enforce_it(secured):
    """A topic of 10 partitions is created and at once alice is granted WRITE on it: the
    change is answered within a 4 s request timeout, though its 10 replica processes take
    longer to start here (librdkafka's 0081 timed out creating ACLs while hundreds started);
    each replica, once running, holds the grant: alice writes to every partition, and bob
    (no WRITE) is refused."""
    topic = f"starting-{uuid.uuid4().hex[:6]}"
    Admin(secured).create_topics([NewTopic(topic, 10, 1)])
    try:
        Admin(secured, request_timeout_ms=4000).create_acls([allow("alice", ACLOperation.WRITE, name=topic)])
        Admin(secured).await_leaders([topic], int(TIMEOUT_S * 1000))
        with Producer(secured, acks="all", **sasl("alice")) as producer:
            sent = [producer.send(topic, b"granted", partition=p) for p in range(10)]
            assert [f.result(timeout=TIMEOUT_S).offset for f in sent] == [0] * 10
        with Producer(secured, retries=0, enable_idempotence=False, **sasl("bob")) as producer:
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send(topic, b"not granted", partition=9).result(timeout=TIMEOUT_S)
    finally:
        Admin(secured).delete_topics([topic])


def test_an_acl_change_waits_for_the_replicas_it_concerns_only(secured):
    """The replica of topic b is paused (SIGSTOP): alice's grant on topic a is answered within
    a 4 s request timeout (a running replica's push may take 10 s; b's decisions cannot
    change) and a's replica enforces it at once; resumed, b's replica has the ACLs again and
    a grant on b waits for it."""
    a, b = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("concerned", "paused"))
    admin = Admin(secured)
    admin.create_topics([NewTopic(a, 1, 1), NewTopic(b, 1, 1)], wait_for_leaders_ms=int(TIMEOUT_S * 1000))
    try:
        (paused,) = ray.get(secured.controller.replica_handles.remote(b), timeout=TIMEOUT_S).values()
        pid = ray.get(paused.state.remote(), timeout=TIMEOUT_S)["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            Admin(secured, request_timeout_ms=4000).create_acls([allow("alice", ACLOperation.WRITE, name=a)])
            with Producer(secured, acks="all", **sasl("alice")) as producer:
                assert producer.send(a, b"granted").result(timeout=TIMEOUT_S).offset == 0
        finally:
            os.kill(pid, signal.SIGCONT)
        admin.create_acls([allow("alice", ACLOperation.WRITE, name=b)])
        with Producer(secured, acks="all", **sasl("alice")) as producer:
            assert producer.send(b, b"granted later").result(timeout=TIMEOUT_S).offset == 0
    finally:
        admin.delete_topics([a, b])


def test_a_token_is_checked_by_the_replica_not_trusted(secured):
    """A call that names a principal without the controller's signature is refused: a forged
    token, one of another cluster, garbage; a call without a token is User:ANONYMOUS's."""
    from raylog.coordination.sessions import SessionKeys, new_key
    from raylog.protocol import FetchRequest

    leader = secured.metadata(refresh=True).leader(TopicPartition(GRANTED, 0))
    forged = SessionKeys(new_key()).issue("User:admin", "*", expires_ms=2**62)
    for token in (forged, "garbage", forged.replace(".", "x.", 1)):
        response = ray.get(leader.fetch.remote(FetchRequest(0, session=token)), timeout=TIMEOUT_S)
        assert response.error_code == SaslAuthenticationError.code
        assert len(response.records) == 0
    # Without a token, User:ANONYMOUS: refused by the replica itself, not only kept out of its
    # metadata.
    response = ray.get(leader.fetch.remote(FetchRequest(0, session=None)), timeout=TIMEOUT_S)
    assert response.error_code == TopicAuthorizationFailedError.code and len(response.records) == 0


def test_groups_and_transactions_need_their_acls_at_the_coordinators(secured):
    """bob reads in group ``bobs`` (READ on it); the group coordinator itself refuses him any
    other group even when he calls it directly; alice's transactions need WRITE on her
    transactional id."""
    from raylog.errors import TransactionalIdAuthorizationFailedError

    with Producer(secured, **sasl("alice")) as producer:
        producer.send(GRANTED, b"for the group").result(timeout=TIMEOUT_S)
    member = Consumer(secured, GRANTED, group_id="bobs", auto_offset_reset="earliest", **sasl("bob"))
    try:
        assert b"for the group" in [r.value for batch in _poll_until_records(member) for r in batch]
        member.commit()
    finally:
        member.close()
    bob = Admin(secured, **sasl("bob"))._session.token()
    _, coordinator = ray.get(secured.controller.find_coordinator.remote("bobs", session=bob), timeout=TIMEOUT_S)
    for method, args in (("describe_group", ("other",)), ("fetch_offsets", ("other",)), ("delete_group", ("bobs",))):
        response = ray.get(getattr(coordinator, method).remote(*args, session=bob), timeout=TIMEOUT_S)
        assert response.error_code == GroupAuthorizationFailedError.code, method
    assert ray.get(coordinator.describe_group.remote("bobs", session=bob), timeout=TIMEOUT_S).error_code == 0

    transactional = Producer(secured, transactional_id="alice-tx", **sasl("alice"))
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            transactional.init_transactions()
    finally:
        transactional.close()
    Admin(secured).create_acls([allow("alice", ACLOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "alice-tx")])
    with Producer(secured, transactional_id="alice-tx", **sasl("alice")) as transactional:
        transactional.init_transactions()
        transactional.begin_transaction()
        transactional.send(GRANTED, b"in a transaction")
        transactional.commit_transaction()
    assert b"in a transaction" in _values(secured, "bob")


def test_ray_data_reads_as_the_handles_user(secured):
    """A Ray Data read's tasks carry the handle's credentials: alice's handle reads, a handle
    without credentials is refused."""
    from raylog.data import read_topic

    as_alice = raylog_connect_as(secured, "alice")
    with Producer(as_alice) as producer:
        producer.send(GRANTED, b"for ray data").result(timeout=TIMEOUT_S)
    rows = read_topic(GRANTED, cluster=as_alice, end_offset="latest").take_all()
    assert b"for ray data" in [row["value"] for row in rows]
    with pytest.raises(TopicAuthorizationFailedError):
        read_topic(GRANTED, cluster=anonymous(secured), end_offset="latest").take_all()


def test_ray_data_reads_and_writes_only_what_the_principal_may(secured):
    """bob may READ (so DESCRIBE) ``granted``, and nothing on another topic: Ray Data reads
    ``granted`` as bob, refuses the other topic with TOPIC_AUTHORIZATION_FAILED before any task
    runs, and refuses bob's write to ``granted`` (no WRITE) with the authorizer's error from
    its task. Nothing refused is written."""
    import ray.data

    from raylog.data import read_topic, write_topic

    hidden = _topic_without_acls(secured)
    with Producer(secured) as producer:
        producer.send(GRANTED, b"for bob's ray data").result(timeout=TIMEOUT_S)
        producer.send(hidden, b"hidden from bob").result(timeout=TIMEOUT_S)
    as_bob = raylog_connect_as(secured, "bob")
    rows = read_topic(GRANTED, cluster=as_bob, end_offset="latest").take_all()
    assert b"for bob's ray data" in [row["value"] for row in rows]
    with pytest.raises(TopicAuthorizationFailedError):
        read_topic(hidden, cluster=as_bob, end_offset="latest")
    with pytest.raises(AuthorizationError):
        write_topic(ray.data.from_items([{"value": b"bob may not write"}]), GRANTED, cluster=as_bob)
    assert b"bob may not write" not in _values(secured, "alice")


def _values(cluster, user: str, mechanism: str = "SCRAM-SHA-512") -> list[bytes]:
    """Everything in ``granted``, read as ``user``."""
    consumer = Consumer(cluster, auto_offset_reset="earliest", **sasl(user, mechanism))
    try:
        consumer.assign([TopicPartition(GRANTED, 0)])
        return [r.value for batch in _poll_until_records(consumer) for r in batch]
    finally:
        consumer.close()


def _poll_until_records(consumer: Consumer) -> list:
    for _ in range(30):
        polled = consumer.poll(timeout_ms=1000)
        if polled:
            return list(polled.values())
    raise AssertionError("no records within 30 polls")


def test_metadata_shows_a_principal_only_the_topics_it_may_describe(secured):
    """bob may describe ``granted`` (READ implies DESCRIBE) and nothing else: his metadata,
    topic list and describes leave out a topic he may not describe, and naming it (or a topic
    that does not exist) is TOPIC_AUTHORIZATION_FAILED, as Kafka answers, so that its existence
    does not leak; sending to it or assigning it fails at once with that error. The metadata of
    raylog's clients carries neither the ACLs nor SCRAM credentials (the listeners' share)."""
    hidden = _topic_without_acls(secured)
    assert hidden in Admin(secured).list_topics()  # the super user sees every topic

    as_bob = raylog_connect_as(secured, "bob")
    metadata = as_bob.metadata(refresh=True)
    assert set(metadata.topics) == {GRANTED}
    assert {topic for topic, _ in metadata.leaders} == {GRANTED}
    assert Admin(secured, **sasl("bob")).list_topics(include_internal=True) == [GRANTED]
    assert anonymous(secured).metadata(refresh=True).topics == {}
    answer = ray.get(secured.controller.metadata.remote(session=as_bob.session().token()), timeout=TIMEOUT_S)
    assert answer["acls"] is None and answer["credentials"] is None

    for name in (hidden, "no-such-topic"):
        with pytest.raises(TopicAuthorizationFailedError):
            Admin(secured, **sasl("bob")).describe_topics([name])
        with Producer(secured, retries=0, max_block_ms=int(TIMEOUT_S * 1000), **sasl("bob")) as producer:
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send(name, b"may not")
        with Consumer(secured, **sasl("bob")) as consumer:
            with pytest.raises(TopicAuthorizationFailedError):
                consumer.assign([TopicPartition(name, 0)])
    with Consumer(secured, **sasl("bob")) as consumer:
        assert consumer.topics() == {GRANTED}
    assert Admin(secured, **sasl("bob")).describe_topics([GRANTED])[0].name == GRANTED


def test_ray_data_is_the_user_of_its_client_config_on_a_handle_without_credentials(secured):
    """kafka-python's security settings in a read's consumer_config or a write's
    producer_config make the whole read or write that user's: the planning on the driver
    (topics described, offsets listed) as well as the tasks."""
    import ray.data

    from raylog.data import read_topic, write_topic

    nobody = anonymous(secured)
    with Producer(secured) as producer:
        producer.send(GRANTED, b"read by bob's consumer_config").result(timeout=TIMEOUT_S)
    rows = read_topic(GRANTED, cluster=nobody, end_offset="latest", consumer_config=sasl("bob")).take_all()
    assert b"read by bob's consumer_config" in [row["value"] for row in rows]
    written = ray.data.from_items([{"value": b"written by alice's producer_config"}])
    write_topic(written, GRANTED, cluster=nobody, producer_config=sasl("alice"))
    assert b"written by alice's producer_config" in _values(secured, "bob")


def _topic_without_acls(cluster) -> str:
    """A new topic of one partition that no ACL names (only the super user may use it)."""
    name = f"hidden-{uuid.uuid4().hex[:6]}"
    Admin(cluster).create_topics([NewTopic(name, 1, 1)], wait_for_leaders_ms=int(TIMEOUT_S * 1000))
    return name


def raylog_connect_as(cluster, user: str) -> RaylogCluster:
    """The same cluster, by a handle with ``user``'s credentials."""
    import raylog

    return raylog.connect("auto", cluster_name=cluster.cluster_name, **sasl(user))


def test_a_subscription_naming_a_topic_the_user_may_not_describe_fails_poll_as_kafkas(secured):
    """bob subscribes by name to ``granted`` and to a topic he may not describe: poll raises
    TopicAuthorizationFailedError naming that topic (Kafka's consumer raises it from poll once
    per metadata update), and the next polls read ``granted``, the one topic of his
    assignment. partitions_for_topic raises it too, for a hidden topic and for one that does
    not exist; for a super user, a topic that does not exist is None."""
    hidden = _topic_without_acls(secured)
    with Producer(secured) as producer:
        producer.send(GRANTED, b"for bob's subscription").result(timeout=TIMEOUT_S)
    consumer = Consumer(
        secured, group_id="bobs", auto_offset_reset="earliest", metadata_max_age_ms=600_000, **sasl("bob")
    )
    try:
        consumer.subscribe([GRANTED, hidden])
        with pytest.raises(TopicAuthorizationFailedError, match=hidden) as refused:
            for _ in range(30):
                consumer.poll(timeout_ms=1000)
        assert GRANTED not in str(refused.value)
        values = [r.value for batch in _poll_until_records(consumer) for r in batch]
        assert b"for bob's subscription" in values
        assert consumer.assignment() == {TopicPartition(GRANTED, 0)}
        assert consumer.partitions_for_topic(GRANTED) == {0}
        for name in (hidden, "no-such-topic"):
            with pytest.raises(TopicAuthorizationFailedError, match=name):
                consumer.partitions_for_topic(name)
    finally:
        consumer.close()
    with Consumer(secured) as as_admin:
        assert as_admin.partitions_for_topic("no-such-topic") is None
