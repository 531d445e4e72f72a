"""The one place where Ray's failures become raylog errors.

Clients call actors through :func:`call` (wait for one reply) or :func:`translate` (an
exception raised while waiting); the Kafka listener, an async actor, through :func:`acall`.
A dead, restarting or unplaceable actor (any other Ray error) becomes
:class:`NetworkExceptionError` (retriable, refresh metadata); a timeout becomes
:class:`RequestTimedOutError`; a raylog error raised inside an actor comes out as itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from raylog.errors import NetworkExceptionError, RaylogError, RequestTimedOutError, UnknownServerError


def translate(exc: BaseException) -> RaylogError:
    """The raylog error for an exception raised by ``ray.get`` or an ObjectRef future."""
    if isinstance(exc, RayTaskError):
        raised = getattr(exc, "cause", None)
        if isinstance(raised, RaylogError):
            # The error the method raised, of its own class: not Ray's dual exception
            # RayTaskError(<its class>), whose class name code reporting it by name cannot use.
            return raised
        if isinstance(raised, RayError):
            # The method's own call to another actor failed (that actor died or restarts):
            # Ray's dual exception then has no method name, and the failure is that call's.
            return translate(raised)
        what = f"{type(raised).__name__}: {raised}" if raised is not None else str(exc).splitlines()[0]
        # (Ray's dual exception of a cause that is not Ray's, RayTaskError(TypeError), may not
        # have the method's name.)
        return UnknownServerError(f"{getattr(exc, 'function_name', 'an actor method')} failed: {what}")
    if isinstance(exc, RaylogError):
        return exc
    if isinstance(exc, GetTimeoutError):
        return RequestTimedOutError("no reply from the actor in time")
    if isinstance(exc, RayError):
        # The actor died, is restarting, or cannot be placed (its node is gone, e.g.
        # ActorUnschedulableError): the leader may have moved, so refresh and retry.
        return NetworkExceptionError(f"actor unavailable: {type(exc).__name__}: {exc}".splitlines()[0])
    return UnknownServerError(f"{type(exc).__name__}: {exc}")


def call(ref: Any, timeout_s: float | None) -> Any:
    """``ray.get(ref)`` with Ray's failures as raylog errors."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except RayError as exc:
        raise translate(exc) from None


async def acall(ref: Any, timeout_s: float | None) -> Any:
    """``await ref`` (an ObjectRef, in an async actor) with Ray's failures as raylog errors."""
    try:
        return await asyncio.wait_for(ref, timeout_s)
    except asyncio.TimeoutError:
        raise RequestTimedOutError("no reply from the actor in time") from None
    except RayError as exc:
        raise translate(exc) from None
