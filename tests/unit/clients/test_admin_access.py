"""The Admin's ACL calls without Ray (its SCRAM calls are in test_admin_scram.py): what the
controller is sent, what is returned, and the controller's refusal as Kafka's error."""

from __future__ import annotations

import pytest

from raylog import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType
from raylog.errors import InvalidRequestError, SecurityDisabledError
from tests.unit.clients.admin_fakes import FakeActor, FakeCluster, make_admin

CLICKS = ResourcePattern(ResourceType.TOPIC, "clicks")
MAY_WRITE = ACL("User:etl", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, CLICKS)
MAY_READ = ACL("User:bi", "*", ACLOperation.READ, ACLPermissionType.ALLOW, CLICKS)
DISABLED = (SecurityDisabledError.code, "no authorizer")


def test_create_acls_sends_them_all_at_once_and_raises_the_refusal(monkeypatch):
    controller = FakeActor(create_acls=[(0, ""), DISABLED])
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    admin.create_acls(acl for acl in (MAY_WRITE, MAY_READ))
    assert controller.sent("create_acls") == [([MAY_WRITE, MAY_READ],)]
    with pytest.raises(SecurityDisabledError, match="no authorizer"):
        admin.create_acls([MAY_WRITE])


def test_describe_acls_matches_every_acl_by_default(monkeypatch):
    controller = FakeActor(describe_acls=[(0, "", [MAY_WRITE]), (0, "", []), (InvalidRequestError.code, "UNKNOWN", [])])
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    assert admin.describe_acls() == [MAY_WRITE]
    only_bi = ACLFilter(principal="User:bi")
    assert admin.describe_acls(only_bi) == []
    assert controller.sent("describe_acls") == [(ACLFilter(),), (only_bi,)]
    with pytest.raises(InvalidRequestError, match="UNKNOWN"):
        admin.describe_acls(only_bi)


def test_delete_acls_returns_each_deleted_acl_once_in_the_order_matched(monkeypatch):
    by_principal, by_topic = ACLFilter(principal="User:bi"), ACLFilter.exactly(MAY_WRITE)
    controller = FakeActor(delete_acls=[(0, "", [[MAY_READ], [MAY_WRITE, MAY_READ]]), (*DISABLED, [])])
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    assert admin.delete_acls([by_principal, by_topic]) == [MAY_READ, MAY_WRITE]
    assert controller.sent("delete_acls") == [([by_principal, by_topic],)]
    with pytest.raises(SecurityDisabledError):
        admin.delete_acls([by_principal])
