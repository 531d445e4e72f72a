"""The access family of the Admin: who may do what (Kafka's Admin.createAcls, describeAcls
and deleteAcls; kafka-acls.sh) and who the users are (alterUserScramCredentials and
describeUserScramCredentials; kafka-configs.sh --entity-type users): :class:`AccessAdmin`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from raylog.clients.admin.base import AdminBase, raise_first
from raylog.common import scram
from raylog.common.acl import ACL, ACLFilter
from raylog.errors import UnsupportedSaslMechanismError


class AccessAdmin(AdminBase):
    """ACLs, and users' SCRAM credentials."""

    def alter_user_scram_credentials(
        self,
        upsertions: Mapping[str, str] | None = None,
        deletions: Iterable[tuple[str, str]] = (),
        *,
        mechanisms: Iterable[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
        iterations: int = scram.DEFAULT_ITERATIONS,
    ) -> None:
        """Set or delete users' SCRAM credentials (Kafka's AlterUserScramCredentials), with
        which Kafka clients authenticate on SASL listeners (SCRAM-SHA-256/512, and PLAIN
        against them). The password is salted and hashed here; the controller keeps only the
        salt and the keys derived from it, and the listeners take the change before this
        returns. Each user's change is accepted or refused whole.

        Args:
            upsertions: ``{user: password}``: a credential per mechanism of ``mechanisms``.
            deletions: ``(user, mechanism)`` credentials to delete.
            mechanisms: ``SCRAM-SHA-256`` and/or ``SCRAM-SHA-512``.
            iterations: the salting's iterations, 4096 to 16384.

        Example:
            >>> admin.alter_user_scram_credentials({"alice": "alice-secret"})  # doctest: +SKIP

        Raises:
            The first refusal's typed error, after every other user was handled:
            UnacceptableCredentialError (an empty user or password, iterations out of range),
            UnsupportedSaslMechanismError, DuplicateResourceError (a user and mechanism named
            twice), ResourceNotFoundError (a deletion of a credential that does not exist).
        """
        codes = {name: code for code, name in scram.MECHANISMS.items()}
        try:
            by_code = [codes[m] for m in mechanisms]
            gone = [(user, codes[m]) for user, m in deletions]
        except KeyError as exc:
            raise UnsupportedSaslMechanismError(f"unknown SCRAM mechanism {exc} ({', '.join(codes)})") from None
        made = scram.upsertions(upsertions or {}, by_code, iterations)
        ref = self._ask("alter_user_scram_credentials", gone, made)
        raise_first(self._answer(ref))

    def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """Each user's SCRAM credentials as ``[(mechanism, iterations)]`` (Kafka's
        DescribeUserScramCredentials; never a key); ``users`` None: every user with one.

        Raises:
            ResourceNotFoundError: a user named without a credential.
            DuplicateResourceError: a user named twice.
        """
        described = self._answer(self._ask("describe_user_scram_credentials", users))
        raise_first({user: (code, message) for user, (code, message, _) in described.items()})
        return {user: [(scram.MECHANISMS[m], i) for m, i in infos] for user, (_, _, infos) in described.items()}

    def create_acls(self, acls: list[ACL]) -> None:
        """Create Kafka ACLs (Kafka's CreateAcls), all or nothing; ACLs that exist already
        are kept; answered once every Kafka listener and every running replica they concern
        applies them (the others, and replicas still starting, take them without the answer
        waiting). They say what Kafka clients over the listeners and raylog's own clients
        may do (see docs/security.md).

        Example:
            >>> from raylog import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType
            >>> clicks = ResourcePattern(ResourceType.TOPIC, "clicks")
            >>> may_write = ACL("User:etl", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, clicks)
            >>> admin.create_acls([may_write])  # doctest: +SKIP

        Raises:
            SecurityDisabledError: the cluster runs without the authorizer (``authorizer=acl``).
            InvalidRequestError: an ACL Kafka refuses (an ANY or UNKNOWN value, an empty
                name, a principal not of the form ``Type:name``, a cluster resource not named
                ``kafka-cluster``); nothing is created.
        """
        code, message = self._answer(self._ask("create_acls", list(acls)))
        raise_first({"acls": (code, message)})

    def describe_acls(self, acl_filter: ACLFilter | None = None) -> list[ACL]:
        """The ACLs ``acl_filter`` matches (Kafka's DescribeAcls; default: every ACL).

        Raises:
            SecurityDisabledError: the cluster runs without the authorizer.
            InvalidRequestError: a filter with an UNKNOWN value.
        """
        described = self._ask("describe_acls", acl_filter or ACLFilter())
        code, message, acls = self._answer(described)
        raise_first({"acls": (code, message)})
        return acls

    def delete_acls(self, filters: list[ACLFilter]) -> list[ACL]:
        """Delete every ACL one of ``filters`` matches (Kafka's DeleteAcls); returns those deleted.

        Raises:
            SecurityDisabledError: the cluster runs without the authorizer.
            InvalidRequestError: a filter with an UNKNOWN value; nothing is deleted.
        """
        code, message, matched = self._answer(self._ask("delete_acls", list(filters)))
        raise_first({"acls": (code, message)})
        return list(dict.fromkeys(acl for found in matched for acl in found))
