"""SCRAM credentials in the metadata image: Kafka's AlterUserScramCredentials and
DescribeUserScramCredentials rules, keys derived as RFC 5802 derives them (checked against
scramp, an independent implementation), nothing but salted keys in the journal, and replay."""

from __future__ import annotations

import os

import pytest
import scramp

from raylog.common import scram
from raylog.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tests.unit.coordination.test_metadata import Controller

SHA256, SHA512 = 1, 2


def upsertion(user: str, password: str, code: int = SHA512, iterations: int = 4096, salt: bytes = b"") -> tuple:
    """What a Kafka admin client sends: the password salted and hashed on its side."""
    salt = salt or os.urandom(16)
    return user, code, iterations, salt, scram.salted_password(scram.MECHANISMS[code], password, salt, iterations)


@pytest.fixture
def controller(tmp_path) -> Controller:
    return Controller(str(tmp_path / "controller" / "metadata.journal"))


@pytest.mark.parametrize("code", [SHA256, SHA512])
def test_keys_are_rfc_5802s(code):
    """The stored and server keys are those scramp derives from the same password and salt."""
    mechanism = scram.MECHANISMS[code]
    salt = b"0123456789abcdef"
    expected_salt, stored_key, server_key, _ = scramp.ScramMechanism(mechanism).make_auth_info(
        "pencil", iteration_count=4096, salt=salt
    )
    made = scram.credential(*upsertion("alice", "pencil", code, salt=salt))
    assert (made.salt, made.stored_key, made.server_key) == (expected_salt, stored_key, server_key)
    assert made.verifies("pencil") and not made.verifies("pencils")


def test_credentials_are_journaled_as_salted_keys_and_replayed(controller):
    """Upserted credentials are described by mechanism and iterations only; the journal holds
    the salt and keys, never the password; a replay rebuilds them; deletion removes them."""
    image = controller.image
    records, results = image.alter_scram_credentials(
        [], [upsertion("alice", "s3cret-pw"), upsertion("alice", "other", SHA256, 8192), upsertion("bob", "b")]
    )
    assert results == {"alice": None, "bob": None}
    controller.commit(records)
    with open(controller.journal.path, "rb") as f:
        assert b"s3cret-pw" not in f.read()
    assert scram.describe(image.scram_credentials, None) == {
        "alice": (None, [(SHA256, 8192), (SHA512, 4096)]),
        "bob": (None, [(SHA512, 4096)]),
    }
    assert controller.replayed().scram_credentials == image.scram_credentials
    assert image.scram_credentials["alice"]["SCRAM-SHA-512"].verifies("s3cret-pw")
    records, results = image.alter_scram_credentials([("bob", SHA512)], [])
    controller.commit(records)
    assert "bob" not in image.scram_credentials and results == {"bob": None}
    assert image.scram_version == 4


def test_a_users_refused_change_leaves_its_other_changes_and_other_users_alone(controller):
    """Kafka's rules per user: a mechanism named twice, an unknown mechanism, iterations out of
    range, an empty name, a deletion of nothing: that user is refused whole, others go on."""
    image = controller.image
    controller.commit(image.alter_scram_credentials([], [upsertion("carol", "c")])[0])
    _, results = image.alter_scram_credentials(
        [("alice", SHA512), ("dave", SHA256), ("carol", 9)],
        [
            upsertion("alice", "a", SHA256),
            upsertion("bob", "b", iterations=100),
            upsertion("erin", "e", SHA256),
            upsertion("", "x"),
        ],
    )
    assert isinstance(results["alice"], ResourceNotFoundError)
    assert isinstance(results["dave"], ResourceNotFoundError)
    assert isinstance(results["carol"], UnsupportedSaslMechanismError)
    assert isinstance(results["bob"], UnacceptableCredentialError) and "4096" in str(results["bob"])
    assert isinstance(results[""], UnacceptableCredentialError)
    assert results["erin"] is None
    records, results = image.alter_scram_credentials([("erin", SHA256)], [upsertion("erin", "e2", SHA256)])
    assert isinstance(results["erin"], DuplicateResourceError) and records == []


def test_describe_names_users_without_credentials_and_users_named_twice(controller):
    image = controller.image
    controller.commit(image.alter_scram_credentials([], [upsertion("alice", "a")])[0])
    described = scram.describe(image.scram_credentials, ["alice", "nobody", "twice", "twice"])
    assert described["alice"] == (None, [(SHA512, 4096)])
    assert isinstance(described["nobody"][0], ResourceNotFoundError)
    assert isinstance(described["twice"][0], DuplicateResourceError)


def test_a_salted_password_of_the_wrong_length_is_unacceptable():
    user, code, iterations, salt, salted = upsertion("alice", "a")
    with pytest.raises(UnacceptableCredentialError, match="64"):
        scram.credential(user, SHA256, iterations, salt, salted)
