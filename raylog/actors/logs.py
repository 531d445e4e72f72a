"""Logging in raylog's own actor processes: replicas, coordinators and the controller.

Ray leaves a worker process's root logger at WARNING with no handler, so the INFO lines a
broker is expected to write (rolls, elections, ISR changes, rebalances: see
``docs/operations.md``) would be dropped. Each raylog actor therefore gives the ``raylog``
logger a handler of its own on stderr, which Ray writes to the worker's
``/tmp/ray/session_latest/logs/worker-<worker id>-<job id>-<pid>.err`` on its node (``ray
logs``, the Ray dashboard's Logs view). Only raylog's loggers are touched, never the root
logger, and only in raylog's actor processes: an application's own process logs as the
application configures it.

Levels come from the environment the actor processes inherit (set it where Ray is started:
``RAYLOG_LOG_LEVEL=DEBUG ray start ...``, or around ``raylog.connect()`` in embedded mode):

- ``RAYLOG_LOG_LEVEL``: the level of every raylog logger, ``INFO`` by default;
- ``RAYLOG_LOGGERS``: levels of single loggers, e.g.
  ``raylog.coordination.group=DEBUG,raylog.storage.log=WARNING``.
"""

from __future__ import annotations

import logging
import os
import sys

from raylog.errors import InvalidConfigError

LEVEL_ENV = "RAYLOG_LOG_LEVEL"
LOGGERS_ENV = "RAYLOG_LOGGERS"
DEFAULT_LEVEL = "INFO"
#: Time, level, logger (the module: ``raylog.storage.log``, ...), thread, message.
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class _ActorHandler(logging.StreamHandler):
    """The handler :func:`configure` installs (told apart from any other when called again)."""


def configure(environ: dict[str, str] | None = None) -> None:
    """Send raylog's log records to this process's stderr at the levels ``environ`` (default:
    ``os.environ``) names; called once by each raylog actor as it starts (again: no change).

    Raises:
        InvalidConfigError: a level that is not one of CRITICAL, ERROR, WARNING, INFO, DEBUG,
            or a ``RAYLOG_LOGGERS`` entry that is not ``<logger>=<level>`` for a raylog logger.
    """
    environ = os.environ if environ is None else environ
    level = _level(LEVEL_ENV, environ.get(LEVEL_ENV, DEFAULT_LEVEL))
    overrides = _overrides(environ.get(LOGGERS_ENV, ""))
    root = logging.getLogger("raylog")
    if not any(isinstance(h, _ActorHandler) for h in root.handlers):
        handler = _ActorHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
        root.propagate = False  # (a root handler added later by Ray would print each line twice)
    root.setLevel(level)
    for name, named_level in overrides.items():
        logging.getLogger(name).setLevel(named_level)


def _level(source: str, value: str) -> int:
    name = value.strip().upper()
    if name not in _LEVELS:
        raise InvalidConfigError(f"{source}: a log level must be one of {', '.join(_LEVELS)}, got {value!r}")
    return getattr(logging, name)


def _overrides(value: str) -> dict[str, int]:
    """``name=LEVEL,...`` as {logger name: level}."""
    levels = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        name, sep, level = entry.partition("=")
        name = name.strip()
        if not sep or not (name == "raylog" or name.startswith("raylog.")):
            raise InvalidConfigError(
                f"{LOGGERS_ENV}: entries are <raylog logger>=<level> separated by commas "
                f"(e.g. raylog.coordination.group=DEBUG), got {entry!r}"
            )
        levels[name] = _level(f"{LOGGERS_ENV} ({name})", level)
    return levels
