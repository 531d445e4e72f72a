"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka keeps them: per user and mechanism, a salt,
an iteration count, and the stored and server keys derived from the salted password, never
the password itself.

Kafka's AlterUserScramCredentials sends the salted password (the client salts and hashes it;
the broker derives the keys), DescribeUserScramCredentials tells only mechanisms and
iteration counts. A SASL/PLAIN password is checked against the same credential (salted
with its salt and iteration count, the keys compared), so one store serves every mechanism.
Pure: the metadata image keeps the credentials in its journal, the listeners authenticate
with them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import (
    ApiError,
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

#: Kafka's SCRAM mechanisms by their code in the admin APIs (ScramMechanism.type()).
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
#: The hash of each mechanism.
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: The iteration counts Kafka accepts (ScramMechanism's minIterations, and its broker's cap).
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
#: The iterations and salt length of the credentials raylog's own tools make.
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 24


@dataclass(frozen=True)
class ScramCredential:
    """One user's credential for one mechanism."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def verifies(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (for SASL/PLAIN)."""
        salted = salted_password(self.mechanism, password, self.salt, self.iterations)
        return hmac.compare_digest(keys_of(self.mechanism, salted)[0], self.stored_key)


def mechanism_name(code: int) -> str:
    """The mechanism of a code of the admin APIs.

    Raises:
        UnsupportedSaslMechanismError: not one of :data:`MECHANISMS`.
    """
    try:
        return MECHANISMS[code]
    except KeyError:
        raise UnsupportedSaslMechanismError(
            f"unknown SCRAM mechanism {code} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
        ) from None


def mechanism_code(name: str) -> int:
    return next(code for code, known in MECHANISMS.items() if known == name)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword: Hi(password, salt, i), PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode("utf-8"), salt, iterations)


def upsertions(passwords: dict[str, str], codes: Iterable[int], iterations: int) -> list[tuple]:
    """What an admin client sends to set each user's password for each mechanism code:
    ``(user, code, iterations, salt, salted password)``, salted here with a random salt (the
    password itself is never sent nor stored).

    Raises:
        UnacceptableCredentialError: a password that is not a non-empty string.
    """
    made = []
    for user, password in passwords.items():
        if not isinstance(password, str) or not password:
            raise UnacceptableCredentialError(f"{user}: a password must be a non-empty string")
        for code in codes:
            salt = secrets.token_bytes(SALT_BYTES)
            made.append((user, code, iterations, salt, salted_password(MECHANISMS[code], password, salt, iterations)))
    return made


def keys_of(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """RFC 5802's ``(StoredKey, ServerKey)`` of a salted password."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return hashlib.new(digest, client_key).digest(), hmac.new(salted, b"Server Key", digest).digest()


def credential(user: str, mechanism_code_: int, iterations: int, salt: bytes, salted: bytes) -> ScramCredential:
    """The credential an AlterUserScramCredentials upsertion makes.

    Raises:
        UnsupportedSaslMechanismError: an unknown mechanism.
        UnacceptableCredentialError: an empty user name, salt or salted password, iterations
            outside [MIN_ITERATIONS, MAX_ITERATIONS], or a salted password of the wrong length.
    """
    mechanism = mechanism_name(mechanism_code_)
    if not user:
        raise UnacceptableCredentialError("a SCRAM credential needs a user name")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"{user}: {mechanism} iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}"
        )
    if not salt:
        raise UnacceptableCredentialError(f"{user}: {mechanism} needs a salt")
    if len(salted) != hashlib.new(_HASHES[mechanism]).digest_size:
        raise UnacceptableCredentialError(f"{user}: a {mechanism} salted password has {len(salted)} bytes")
    stored_key, server_key = keys_of(mechanism, salted)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


#: A user's credentials by mechanism.
Credentials = dict[str, ScramCredential]


def alter(
    current: dict[str, Credentials],
    deletions: list[tuple[str, int]],
    upsertions: list[tuple[str, int, int, bytes, bytes]],
) -> tuple[list[tuple[str, str, ScramCredential | None]], dict[str, ApiError | None]]:
    """Kafka's AlterUserScramCredentials: ``(changes, results)``, the changes ``(user,
    mechanism, credential or None to delete)`` of every user whose request is accepted, and per
    user named its refusal (None: accepted). A user's deletions and upsertions are accepted or
    refused together: a user named twice for a mechanism (DuplicateResourceError), an unknown
    mechanism, an unacceptable credential, or a deletion of a credential that does not exist
    (ResourceNotFoundError) refuses that user only.
    """
    named = [(user, code, None) for user, code in deletions] + [(u[0], u[1], u) for u in upsertions]
    pairs = [(user, code) for user, code, _ in named]
    results: dict[str, ApiError | None] = {
        user: DuplicateResourceError(f"{user}: mechanism {code} is named more than once")
        for user, code in pairs
        if pairs.count((user, code)) > 1
    }
    changes: dict[str, list[tuple[str, str, ScramCredential | None]]] = {}
    for user, code, upsertion in named:
        if results.get(user) is not None:
            continue
        try:
            if upsertion is None:
                mechanism = mechanism_name(code)
                if mechanism not in current.get(user, {}):
                    raise ResourceNotFoundError(f"{user} has no {mechanism} credential to delete")
                change = (user, mechanism, None)
            else:
                made = credential(*upsertion)
                change = (user, made.mechanism, made)
            changes.setdefault(user, []).append(change)
            results[user] = None
        except ApiError as exc:
            results[user] = exc
            changes.pop(user, None)
    return [change for user in changes for change in changes[user]], results


def describe(current: dict[str, Credentials], users: list[str] | None) -> dict[str, tuple[ApiError | None, list]]:
    """Kafka's DescribeUserScramCredentials: per user ``(refusal or None, [(mechanism code,
    iterations)])``; ``users`` None: every user with a credential. A user without one is
    ResourceNotFoundError, a user named twice DuplicateResourceError."""
    if users is None:
        users = sorted(current)
    counts = {user: users.count(user) for user in users}
    out: dict[str, tuple[ApiError | None, list]] = {}
    for user in users:
        if counts[user] > 1:
            out[user] = (DuplicateResourceError(f"{user} is named more than once"), [])
        elif not current.get(user):
            out[user] = (ResourceNotFoundError(f"{user} has no SCRAM credential"), [])
        else:
            infos = [(mechanism_code(m), c.iterations) for m, c in sorted(current[user].items())]
            out[user] = (None, infos)
    return out
