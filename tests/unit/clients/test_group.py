"""The client side of consumer groups without a cluster: group ids are checked before
anything is sent (no Ray runtime)."""

from __future__ import annotations

import pytest

from raylog import Admin, Consumer
from raylog.clients.group import CoordinatorClient
from raylog.common.names import MAX_GROUP_ID_BYTES
from raylog.errors import InvalidGroupIdError

BAD_GROUP_IDS = ["", None, 7, b"bytes", "x" * (MAX_GROUP_ID_BYTES + 1), "é" * (MAX_GROUP_ID_BYTES // 2 + 1)]


@pytest.mark.parametrize("group_id", BAD_GROUP_IDS)
def test_bad_group_ids_are_refused_before_any_call(group_id):
    """A consumer, the admin's group calls and a coordinator client refuse an empty,
    non-string or over-long group id with INVALID_GROUP_ID (code 24), touching no cluster."""
    if group_id is not None:  # None is "no group" for a consumer
        with pytest.raises(InvalidGroupIdError) as refused:
            Consumer(None, "t", group_id=group_id)
        assert refused.value.code == 24
    admin = Admin(None)
    for call in (
        lambda: admin.describe_consumer_groups([group_id]),
        lambda: admin.list_consumer_group_offsets(group_id),
        lambda: admin.delete_consumer_groups([group_id]),
        lambda: CoordinatorClient(None, group_id, 1.0, 0.1),
    ):
        with pytest.raises(InvalidGroupIdError):
            call()


def test_longest_group_id_is_accepted():
    """A group id of exactly MAX_GROUP_ID_BYTES bytes of UTF-8 is fine."""
    CoordinatorClient(None, "x" * MAX_GROUP_ID_BYTES, 1.0, 0.1)
