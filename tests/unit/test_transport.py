"""Ray's failures become retriable, metadata-invalidating raylog errors (no Ray runtime)."""

from __future__ import annotations

from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError

from raylog.errors import BrokerUnavailableError, NotLeaderOrFollowerError, RequestTimedOutError
from raylog.transport import translate


def test_dead_restarting_or_unplaceable_actors_mean_refresh_and_retry():
    """An actor that died, restarts, or cannot be placed (its node is gone) is a broker to retry."""
    for exc in (RayActorError(), ActorUnschedulableError("node gone")):
        error = translate(exc)
        assert isinstance(error, BrokerUnavailableError) and error.retriable and error.invalid_metadata
    assert isinstance(translate(GetTimeoutError()), RequestTimedOutError)
    kept = NotLeaderOrFollowerError("moved")
    assert translate(kept) is kept


def test_an_actor_methods_own_failure_says_which_method_and_what_it_raised():
    """A method that raised something other than a raylog error (here a timeout inside the
    controller's start) is an UnknownServerError naming the method and the exception, not
    Ray's first traceback line alone."""
    from ray.exceptions import RayTaskError

    from raylog.errors import UnknownServerError

    try:
        raise TimeoutError("broker 2 did not answer")
    except TimeoutError as exc:
        wrapped = RayTaskError("ControllerActor.start", "Traceback ...", exc)
    error = translate(wrapped)
    assert isinstance(error, UnknownServerError)
    assert "ControllerActor.start" in str(error) and "TimeoutError: broker 2 did not answer" in str(error)
    # What ray.get raises is Ray's dual exception, RayTaskError(TimeoutError), which may not
    # carry the method's name: still an UnknownServerError saying what was raised.
    dual = translate(wrapped.as_instanceof_cause())
    assert isinstance(dual, UnknownServerError) and "TimeoutError: broker 2 did not answer" in str(dual)


def test_a_method_that_found_another_actor_unavailable_is_a_broker_to_retry():
    """A method whose own call to another actor failed because that actor died or restarts
    (Ray raises it as ``RayTaskError(ActorUnavailableError)``, without the method's name)
    is a broker to retry, as the same failure met directly would be."""
    from ray.exceptions import ActorUnavailableError, RayTaskError

    try:
        raise ActorUnavailableError("the actor is restarting", None)
    except ActorUnavailableError as exc:
        wrapped = RayTaskError("PartitionReplicaActor.produce", "Traceback ...", exc)
    for raised in (wrapped, wrapped.as_instanceof_cause()):
        error = translate(raised)
        assert isinstance(error, BrokerUnavailableError) and error.retriable and error.invalid_metadata
        assert "restarting" in str(error)


def test_a_raylog_error_an_actor_raised_is_that_error_not_rays_dual_exception():
    """What ray.get raises for a method that raised a raylog error is Ray's dual exception,
    ``RayTaskError(ClusterAuthorizationFailedError)``: it is the raylog error raised, of its
    own class (which code that reports errors by class name, as a Spark task does, needs)."""
    from ray.exceptions import RayTaskError

    from raylog.errors import ClusterAuthorizationFailedError

    try:
        raise ClusterAuthorizationFailedError("User:bob may not IDEMPOTENT_WRITE the cluster")
    except ClusterAuthorizationFailedError as exc:
        wrapped = RayTaskError("ControllerActor.init_producer_id", "Traceback ...", exc)
    for raised in (wrapped, wrapped.as_instanceof_cause()):
        error = translate(raised)
        assert type(error) is ClusterAuthorizationFailedError, type(error)
        assert str(error) == "User:bob may not IDEMPOTENT_WRITE the cluster"
