"""Spark's Kafka source options, as :func:`raylog_spark.read_topic` and
:class:`raylog_spark.MicroBatchStream` take them.

A Spark job reads Kafka with ``spark.read.format("kafka").option(name, value)``; raylog_spark
takes the same names, with the same meanings, as keyword arguments
(``read_topic(spark, subscribe="clicks", startingOffsets="earliest")``). A value may be
Spark's string (``"true"``, ``"1000"``, a JSON document) or the Python value it stands for
(``True``, ``1000``, a dict). Names are matched without regard to case, as Spark does.

Nothing here talks to raylog: :func:`parse` checks the options and turns them into a
:class:`SourceOptions`, and :mod:`raylog_spark.topics` resolves that against the cluster.
Every bad option is refused with :class:`raylog.errors.InvalidConfigError` (a ValueError).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raylog.errors import InvalidConfigError

#: Where one partition starts or ends: an offset, or "earliest" / "latest".
OffsetBound = int | str
#: Offsets of Spark's JSON form, by topic then partition: ``{"clicks": {0: 23, 1: "earliest"}}``.
TopicOffsets = dict[str, dict[int, OffsetBound]]
#: Timestamps (ms) of Spark's JSON form, by topic then partition.
TopicTimestamps = dict[str, dict[int, int]]

#: The options each kind of read takes (canonical spelling), with what they mean there.
BATCH_OPTIONS = frozenset(
    {
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "includeHeaders",
        "failOnDataLoss",
    }
)
STREAM_OPTIONS = frozenset(
    {
        "subscribe",
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "maxOffsetsPerTrigger",
        "includeHeaders",
        "failOnDataLoss",
    }
)
#: Spark Kafka source options that raylog_spark does not take, and why.
_NOT_TAKEN = {
    "endingoffsets": "a stream has no end: endingOffsets is for read_topic",
    "endingtimestamp": "a stream has no end: endingTimestamp is for read_topic",
    "endingoffsetsbytimestamp": "a stream has no end: endingOffsetsByTimestamp is for read_topic",
    "maxoffsetspertrigger": "a batch read has no triggers: maxOffsetsPerTrigger is for MicroBatchStream",
    "subscribepattern": "a stream reads one topic: give it as topic or subscribe",
    "assign": "a stream reads every partition of one topic: give it as topic or subscribe",
    "minoffsetspertrigger": "not supported: a stream triggers as soon as records are there",
    "maxtriggerdelay": "not supported: a stream triggers as soon as records are there",
    "minpartitions": "not supported: one Spark task reads each partition range",
    "maxrecordsperpartition": "not supported: one Spark task reads each partition range",
    "groupidprefix": "not supported: a batch read uses no group, a stream the group_id it is given",
    "kafkaconsumer.polltimeoutms": "not supported: reads use raylog's consumer settings",
    "fetchoffset.numretries": "not supported: offset look-ups retry as raylog's clients do",
    "fetchoffset.retryintervalms": "not supported: offset look-ups retry as raylog's clients do",
}
_EARLIEST_IN_JSON, _LATEST_IN_JSON = -2, -1
_DIGITS = re.compile(r"[0-9]+")
TIMESTAMP_STRATEGIES = ("error", "latest")


@dataclass(frozen=True)
class SourceOptions:
    """What a read's options ask for; exactly one of ``topics``, ``pattern`` and ``assign``.

    Attributes:
        topics: topics named by the ``topic`` argument or ``subscribe``, in order.
        pattern: ``subscribePattern``: every topic whose whole name matches.
        assign: ``assign``: partitions by topic.
        starting, ending: ``startingOffsets`` / ``endingOffsets``: "earliest", "latest", a
            :data:`TopicOffsets` (partitions left out start at earliest, end at latest), or
            None (not given).
        starting_timestamps, ending_timestamps: ``startingTimestamp`` (one time for every
            partition, an int) or ``startingOffsetsByTimestamp`` (a :data:`TopicTimestamps`),
            which take precedence over the offsets, as in Spark; likewise for the end.
        timestamp_strategy: ``startingOffsetsByTimestampStrategy``: "error" (a partition
            with no record at or after its starting time fails the read) or "latest".
        include_headers: ``includeHeaders``: add the headers column.
        fail_on_data_loss: ``failOnDataLoss``.
        max_offsets_per_trigger: ``maxOffsetsPerTrigger`` (streams).
    """

    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: str | TopicOffsets | None = None
    ending: str | TopicOffsets | None = None
    starting_timestamps: int | TopicTimestamps | None = None
    ending_timestamps: int | TopicTimestamps | None = None
    timestamp_strategy: str = "error"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None

    @property
    def sets_start(self) -> bool:
        return self.starting is not None or self.starting_timestamps is not None

    @property
    def sets_end(self) -> bool:
        return self.ending is not None or self.ending_timestamps is not None


def parse(options: Mapping[str, Any], *, topic: str | None = None, streaming: bool = False) -> SourceOptions:
    """Check Spark Kafka source ``options`` for a batch read or a stream.

    Args:
        options: option name to value (names in any case).
        topic: the topic named outside the options (raylog_spark's ``topic`` argument).
        streaming: True for :class:`raylog_spark.MicroBatchStream`, False for ``read_topic``.

    Raises:
        InvalidConfigError: an option this kind of read does not take, a value that is not
            of its option's form (malformed JSON among them), a batch read starting at
            "latest" or ending at "earliest", none or more than one of topic, subscribe,
            subscribePattern and assign, or JSON offsets naming topics that are not read.
    """
    taken = STREAM_OPTIONS if streaming else BATCH_OPTIONS
    by_lower = {name.lower(): name for name in taken}
    values: dict[str, Any] = {}
    for name, value in options.items():
        canonical = by_lower.get(str(name).lower())
        if canonical is None:
            raise InvalidConfigError(_refusal(str(name), taken))
        if canonical in values:
            raise InvalidConfigError(f"option {canonical!r} is given twice")
        values[canonical] = value

    selected = {name: values[name] for name in ("subscribe", "subscribePattern", "assign") if name in values} | (
        {"topic": topic} if topic is not None else {}
    )
    if len(selected) != 1:
        given = ", ".join(sorted(selected)) or "none"
        raise InvalidConfigError(f"give exactly one of topic, subscribe, subscribePattern and assign (given: {given})")
    ((kind, value),) = selected.items()
    source: dict[str, Any] = {}
    if kind == "topic":
        source["topics"] = (_topic_name("topic", value),)
    elif kind == "subscribe":
        source["topics"] = _topic_list(value)
        if streaming and len(source["topics"]) != 1:
            raise InvalidConfigError(f"a stream reads one topic, subscribe names {len(source['topics'])}")
    elif kind == "subscribePattern":
        source["pattern"] = _pattern(value)
    else:
        source["assign"] = _assignment(value)

    if "startingOffsets" in values:
        source["starting"] = _offsets("startingOffsets", values["startingOffsets"], start=True, streaming=streaming)
    if "endingOffsets" in values:
        source["ending"] = _offsets("endingOffsets", values["endingOffsets"], start=False, streaming=streaming)
    for bound in ("starting", "ending"):
        if f"{bound}Timestamp" in values:  # takes precedence over ...OffsetsByTimestamp, as in Spark
            source[f"{bound}_timestamps"] = _timestamp(f"{bound}Timestamp", values[f"{bound}Timestamp"])
        elif f"{bound}OffsetsByTimestamp" in values:
            name = f"{bound}OffsetsByTimestamp"
            source[f"{bound}_timestamps"] = _topic_timestamps(name, values[name])
    if "startingOffsetsByTimestampStrategy" in values:
        strategy = str(values["startingOffsetsByTimestampStrategy"]).strip().lower()
        if strategy not in TIMESTAMP_STRATEGIES:
            raise InvalidConfigError(
                f"startingOffsetsByTimestampStrategy must be one of {TIMESTAMP_STRATEGIES}, "
                f"got {values['startingOffsetsByTimestampStrategy']!r}"
            )
        source["timestamp_strategy"] = strategy
    if "includeHeaders" in values:
        source["include_headers"] = _boolean("includeHeaders", values["includeHeaders"])
    if "failOnDataLoss" in values:
        source["fail_on_data_loss"] = _boolean("failOnDataLoss", values["failOnDataLoss"])
    if "maxOffsetsPerTrigger" in values:
        source["max_offsets_per_trigger"] = _positive("maxOffsetsPerTrigger", values["maxOffsetsPerTrigger"])
    parsed = SourceOptions(**source)
    check_json_topics(parsed, set(parsed.topics or parsed.assign or ()))
    return parsed


def check_json_topics(source: SourceOptions, topics: set[str]) -> None:
    """Raises InvalidConfigError if a JSON option names a topic outside ``topics`` (the
    topics read; for a pattern, checked once it is resolved)."""
    if source.pattern is not None and not topics:
        return
    for name, value in (
        ("startingOffsets", source.starting),
        ("endingOffsets", source.ending),
        ("startingOffsetsByTimestamp", source.starting_timestamps),
        ("endingOffsetsByTimestamp", source.ending_timestamps),
    ):
        if isinstance(value, dict) and not set(value) <= topics:
            raise InvalidConfigError(
                f"{name} names topics that are not read: {sorted(set(value) - topics)} (read: {sorted(topics)})"
            )


def _refusal(name: str, taken: frozenset[str]) -> str:
    lower = name.lower()
    if lower in _NOT_TAKEN:
        return f"option {name!r}: {_NOT_TAKEN[lower]}"
    if lower.startswith("kafka."):
        return (
            f"option {name!r}: raylog_spark reads through raylog's own clients (connect with "
            "cluster=raylog.connect(...)), so Kafka client settings do not apply"
        )
    return f"unknown option {name!r}; the options taken here are {sorted(taken)}"


def _topic_name(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidConfigError(f"{option} must be a topic name, got {value!r}")
    return value.strip()


def _topic_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, str):
        raise InvalidConfigError(f"subscribe must be a comma-separated list of topics, got {value!r}")
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise InvalidConfigError(f"subscribe must be a comma-separated list of topics, got {value!r}")
    return tuple(dict.fromkeys(names))


def _pattern(value: Any) -> re.Pattern[str]:
    if not isinstance(value, str) or not value:
        raise InvalidConfigError(f"subscribePattern must be a regular expression, got {value!r}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise InvalidConfigError(f"subscribePattern {value!r} is not a regular expression: {exc}") from None


def _by_topic(option: str, value: Any, form: str, entry: type[list] | type[dict]) -> dict[str, Any]:
    """Spark's per-topic JSON form (a JSON string, or a dict as it is): an object of topic
    names, each holding a non-empty ``entry`` (a list of partitions, or an object by
    partition)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidConfigError(f"{option} is not valid JSON ({exc}); expected {form}") from None
    if not isinstance(value, dict) or not value:
        raise InvalidConfigError(f"{option} must be a JSON object {form}, got {value!r}")
    kind = "list" if entry is list else "object"
    for topic, held in value.items():
        _topic_name(f"a topic of {option}", topic)
        if not isinstance(held, entry) or not held:
            raise InvalidConfigError(f"{option}: {topic!r} must hold a non-empty {kind}, as in {form}")
    return value


def _whole(option: str, value: Any, what: str, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum``: an int, or a string of ASCII digits."""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise InvalidConfigError(f"{option} must be {what}, got {value!r}")


def _partition(option: str, key: Any) -> int:
    """A partition number: an int, or a JSON object's key holding one."""
    return _whole(option, key, "a partition number")


def _integer(option: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidConfigError(f"{option}: {value!r} is not an integer")


def _assignment(value: Any) -> dict[str, tuple[int, ...]]:
    document = _by_topic("assign", value, '{"topicA": [0, 1], "topicB": [2, 4]}', list)
    return {
        topic: tuple(sorted({_partition("assign", p) for p in partitions})) for topic, partitions in document.items()
    }


def _offsets(option: str, value: Any, *, start: bool, streaming: bool) -> str | TopicOffsets:
    """``startingOffsets`` / ``endingOffsets``: "earliest", "latest" or Spark's JSON form,
    where -2 stands for earliest and -1 for latest."""
    if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
        spec: str | TopicOffsets = value.strip().lower()
    else:
        document = _by_topic(option, value, '{"topicA": {"0": 23, "1": -2}} (-2: earliest, -1: latest)', dict)
        spec = {}
        for topic, partitions in document.items():
            spec[topic] = {}
            for partition, offset in partitions.items():
                offset = _integer(f"{option} {topic}-{partition}", offset)
                if offset < _EARLIEST_IN_JSON:
                    raise InvalidConfigError(f"{option} {topic}-{partition}: {offset} (-2: earliest, -1: latest)")
                bound = {_EARLIEST_IN_JSON: "earliest", _LATEST_IN_JSON: "latest"}.get(offset, offset)
                spec[topic][_partition(option, partition)] = bound
    bounds = {spec} if isinstance(spec, str) else {b for partitions in spec.values() for b in partitions.values()}
    if not streaming and start and "latest" in bounds:
        raise InvalidConfigError("a batch read cannot start at latest (startingOffsets 'latest' or -1)")
    if not start and "earliest" in bounds:
        raise InvalidConfigError("a batch read cannot end at earliest (endingOffsets 'earliest' or -2)")
    return spec


def _timestamp(option: str, value: Any) -> int:
    return _whole(option, value, 'a time in ms since the epoch (e.g. "1000")')


def _topic_timestamps(option: str, value: Any) -> TopicTimestamps:
    document = _by_topic(option, value, '{"topicA": {"0": 1000, "1": 1000}}', dict)
    return {
        topic: {_partition(option, p): _timestamp(f"{option} {topic}-{p}", ms) for p, ms in partitions.items()}
        for topic, partitions in document.items()
    }


def _boolean(option: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidConfigError(f"{option} must be true or false, got {value!r}")


def _positive(option: str, value: Any) -> int:
    return _whole(option, value, "a positive integer", minimum=1)
