"""Ray's failures become retriable, metadata-invalidating raylog errors (no Ray runtime)."""

from __future__ import annotations

from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError

from raylog.actors.transport import translate
from raylog.errors import BrokerUnavailableError, NotLeaderOrFollowerError, RequestTimedOutError


def test_dead_restarting_or_unplaceable_actors_mean_refresh_and_retry():
    """An actor that died, restarts, or cannot be placed (its node is gone) is a broker to retry."""
    for exc in (RayActorError(), ActorUnschedulableError("node gone")):
        error = translate(exc)
        assert isinstance(error, BrokerUnavailableError) and error.retriable and error.invalid_metadata
    assert isinstance(translate(GetTimeoutError()), RequestTimedOutError)
    kept = NotLeaderOrFollowerError("moved")
    assert translate(kept) is kept
