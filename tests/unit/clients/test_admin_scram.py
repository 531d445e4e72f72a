"""Admin.alter_user_scram_credentials / describe_user_scram_credentials against a controller
stand-in that runs the real metadata rules: the password is salted on the client (the
controller sees only the salt and RFC 5802's salted password), each mechanism gets its own
salt, refusals are typed, and describing tells mechanisms and iterations only."""

from __future__ import annotations

import types

import pytest

import raylog
from raylog.clients.admin import base as admin_base
from raylog.clients.security import ClientSession
from raylog.common import scram
from raylog.coordination.metadata import MetadataImage
from raylog.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)


class _ScramController:
    """The controller's two calls over a real MetadataImage (``call`` made the identity)."""

    def __init__(self):
        self.image = MetadataImage()
        self.sent: list = []

    @property
    def alter_user_scram_credentials(self):
        def remote(deletions, upsertions, session=None):
            self.sent.append((deletions, upsertions))
            records, results = self.image.alter_scram_credentials(deletions, upsertions)
            for record in records:
                self.image.apply(record)
            return {u: (0, "") if r is None else (r.code, str(r)) for u, r in results.items()}

        return types.SimpleNamespace(remote=remote)

    @property
    def describe_user_scram_credentials(self):
        def remote(users, session=None):
            described = scram.describe(self.image.scram_credentials, users)
            return {u: ((0, "") if r is None else (r.code, str(r))) + (infos,) for u, (r, infos) in described.items()}

        return types.SimpleNamespace(remote=remote)


@pytest.fixture
def admin(monkeypatch):
    monkeypatch.setattr(admin_base, "call", lambda ref, timeout_s: ref)
    controller = _ScramController()
    cluster = types.SimpleNamespace(controller=controller)
    cluster.session = lambda: ClientSession(cluster, "PLAINTEXT")
    return raylog.Admin(cluster), controller


def test_passwords_are_salted_here_and_never_sent(admin):
    client, controller = admin
    client.alter_user_scram_credentials({"alice": "alice-secret"}, iterations=4096)
    ((_, upsertions),) = controller.sent
    assert "alice-secret" not in repr(upsertions)
    salts = {salt for *_, salt, _ in upsertions}
    assert len(upsertions) == 2 and len(salts) == 2
    for credential in controller.image.scram_credentials["alice"].values():
        assert credential.verifies("alice-secret") and credential.iterations == 4096
    assert client.describe_user_scram_credentials() == {"alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]}


def test_deletions_and_refusals_are_typed(admin):
    client, _ = admin
    client.alter_user_scram_credentials({"bob": "b"}, mechanisms=["SCRAM-SHA-512"])
    client.alter_user_scram_credentials(deletions=[("bob", "SCRAM-SHA-512")])
    with pytest.raises(ResourceNotFoundError):
        client.describe_user_scram_credentials(["bob"])
    with pytest.raises(ResourceNotFoundError):
        client.alter_user_scram_credentials(deletions=[("bob", "SCRAM-SHA-512")])
    with pytest.raises(UnacceptableCredentialError, match="iterations"):
        client.alter_user_scram_credentials({"carol": "c"}, iterations=100)
    with pytest.raises(UnacceptableCredentialError, match="password"):
        client.alter_user_scram_credentials({"carol": ""})
    with pytest.raises(UnsupportedSaslMechanismError):
        client.alter_user_scram_credentials({"carol": "c"}, mechanisms=["SCRAM-SHA-1"])
    with pytest.raises(DuplicateResourceError):
        client.alter_user_scram_credentials({"dave": "d"}, [("dave", "SCRAM-SHA-256")])
