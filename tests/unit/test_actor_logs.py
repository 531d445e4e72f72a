"""How raylog's actor processes set up their logging (no Ray): the ``raylog`` logger gets one
handler on stderr at ``RAYLOG_LOG_LEVEL`` (INFO by default), single loggers their own level
from ``RAYLOG_LOGGERS``, and a bad value is a typed error naming the variable."""

from __future__ import annotations

import logging

import pytest

from raylog.actors import logs
from raylog.errors import InvalidConfigError

pytestmark = pytest.mark.usefixtures("restored_raylog_logging")


def _ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger("raylog").handlers if isinstance(h, logs._ActorHandler)]


def test_info_by_default_with_one_handler_however_often_configured():
    logs.configure({})
    logs.configure({})
    assert len(_ours()) == 1
    assert logging.getLogger("raylog").level == logging.INFO
    assert logging.getLogger("raylog").propagate is False
    assert _ours()[0].formatter._fmt == logs.FORMAT


def test_levels_from_the_environment():
    logs.configure(
        {"RAYLOG_LOG_LEVEL": "warning", "RAYLOG_LOGGERS": "raylog.coordination.group=DEBUG, raylog.storage.log=ERROR"}
    )
    assert logging.getLogger("raylog").level == logging.WARNING
    assert logging.getLogger("raylog.coordination.group").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger("raylog.storage.log").getEffectiveLevel() == logging.ERROR
    assert logging.getLogger("raylog.coordination.partition").getEffectiveLevel() == logging.WARNING


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RAYLOG_LOG_LEVEL": "LOUD"}, "RAYLOG_LOG_LEVEL: a log level must be one of"),
        ({"RAYLOG_LOGGERS": "raylog.storage.log"}, "RAYLOG_LOGGERS: entries are <raylog logger>=<level>"),
        ({"RAYLOG_LOGGERS": "ray=DEBUG"}, "RAYLOG_LOGGERS: entries are <raylog logger>=<level>"),
        ({"RAYLOG_LOGGERS": "raylog.storage.log=NOISY"}, "RAYLOG_LOGGERS (raylog.storage.log): a log level must be"),
    ],
)
def test_a_bad_value_is_a_typed_error_naming_the_variable(environ, message):
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        logs.configure(environ)
    assert _ours() == []  # nothing was changed
