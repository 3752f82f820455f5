"""CloudWatch Logs over the local SageMaker's jobs: the log group ``/aws/sagemaker/TrainingJobs``,
one log stream per job, read with ``DescribeLogStreams`` and ``GetLogEvents`` as the Amazon
provider's ``SageMakerHook.describe_training_job_with_log`` (``SageMakerTrainingOperator(
print_log=True)``) and the SageMaker Python SDK's ``logs=True`` read them. Wire contract:
``docs/platforms/sagemaker.md`` (CloudWatch Logs).

Wire format (CloudWatch Logs API reference; botocore ``logs/2014-03-28``): awsJson 1.1, ``POST /``
with ``X-Amz-Target: Logs_20140328.<Operation>``, SigV4 for the service ``logs`` (:func:`is_logs`
tells these requests apart from SageMaker's, which share ``POST /``); errors
``{"__type": code, "message": text}``, HTTP 400.

* **Streams.** A SageMaker job has one stream, ``<job>/algo-1-<epoch seconds of its start>`` (the
  pattern AWS's own samples show; one host, ``algo-1``, as :mod:`.script_mode` runs), from the
  moment the engine starts it (``started_at``). Its events are the job's log lines
  (:mod:`airflow_training_platform.engine.job_log`, shared with PAI's and ModelArts' log APIs):

  - a user-code job (:mod:`.script_mode`): the program's stdout and stderr lines, read from its log
    file (``TrainingEngine.read_log``), each at the time it was written; empty lines are left out
    (CloudWatch Logs holds no empty message);
  - a job of the built-in trainer: the job's events from its start on (``Trainer process … started``,
    ``Epoch 3 complete: val_accuracy=…``, checkpoints, ``Training complete``…), the trainer's reports
    as readable lines — what a built-in algorithm's output is to an AWS user.

* **Positions.** An event's place is its index in its stream (the line of the log file, or the
  event of the job); ``GetLogEvents`` tokens carry it: ``f/<n>`` (read forward from index ``n``),
  ``b/<n>`` (read backward, before index ``n``).

Times on the wire are **milliseconds** since the epoch (UTC), integers; the engine's are seconds.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_training_platform.engine import JobNotFound, TrainingEngine
from airflow_training_platform.engine.job_log import job_lines
from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.sagemaker import wire

TARGET_PREFIX = "Logs_20140328."
"""``X-Amz-Target`` of every CloudWatch Logs operation (``Logs_20140328.GetLogEvents``)."""

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
"""The one log group served: where SageMaker writes its training jobs' output."""

HOST = "algo-1"
"""The one host of a local job (``resourceconfig.json`` ``current_host``)."""

STREAMS_LIMIT = 50
"""``DescribeLogStreams`` ``limit``: 1–50, default 50 (API reference, ``DescribeLogStreams``)."""

EVENTS_LIMIT = 10_000
"""``GetLogEvents`` ``limit``: 1–10,000, default as many as fit in 1 MB (API reference, ``GetLogEvents``)."""

RESPONSE_BYTES = 1_048_576
"""A ``GetLogEvents`` page holds at most this many bytes of events (1 MB)."""

EVENT_OVERHEAD_BYTES = 26
"""What an event counts beyond its message's UTF-8 bytes (API reference, ``PutLogEvents``: "the sum
of all event messages in UTF-8, plus 26 bytes for each log event")."""

_TOKEN = re.compile(r"^([fb])/(\d{1,20})$")
_GROUP_GONE = "The specified log group does not exist."
_STREAM_GONE = "The specified log stream does not exist."
_BAD_TOKEN = "The specified nextToken is invalid."


def is_logs(scope: Mapping[str, Any]) -> bool:
    """A CloudWatch Logs call: ``POST /`` whose ``X-Amz-Target`` starts ``Logs_20140328.`` or whose
    SigV4 scope says the service ``logs`` (``…/logs/aws4_request``)."""
    if scope.get("method") != "POST" or scope.get("path") != "/":
        return False
    headers = dict(scope.get("headers", []))
    return headers.get(b"x-amz-target", b"").startswith(TARGET_PREFIX.encode()) or (
        b"/logs/aws4_request" in headers.get(b"authorization", b"")
    )


def stream_name(rec: Mapping[str, Any]) -> str | None:
    """The job's log stream, ``<job>/algo-1-<epoch seconds of its start>``; ``None`` before it started."""
    started = rec.get("started_at")
    return None if started is None else f"{rec['job_id']}/{HOST}-{int(started)}"


def millis(seconds: float) -> int:
    """Engine seconds (float, epoch) → CloudWatch Logs milliseconds (int, epoch)."""
    return int(seconds * 1000)


@dataclass(frozen=True)
class LogEvent:
    """One event of a stream: ``index`` (its place in the stream), ``timestamp`` (ms since the epoch,
    when it was written; also its ``ingestionTime``), ``message`` (one line, never empty)."""

    index: int
    timestamp: int
    message: str

    def wire(self) -> dict[str, Any]:
        """``OutputLogEvent``: ``{timestamp, message, ingestionTime}`` (API reference, ``GetLogEvents``)."""
        return {"timestamp": self.timestamp, "message": self.message, "ingestionTime": self.timestamp}

    @property
    def size(self) -> int:
        return len(self.message.encode("utf-8")) + EVENT_OVERHEAD_BYTES


@dataclass(frozen=True)
class Window:
    """``GetLogEvents`` ``startTime`` (included) and ``endTime`` (excluded), in ms; ``None``: open."""

    start: int | None = None
    end: int | None = None

    def holds(self, timestamp: int) -> bool:
        return (self.start is None or timestamp >= self.start) and (self.end is None or timestamp < self.end)


class CloudWatchLogs:
    """The two operations over ``engine``'s SageMaker jobs in ``region`` (for the ARNs)."""

    def __init__(self, engine: TrainingEngine, region: str):
        self.engine = engine
        self.region = region

    @property
    def operations(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """Operation name (without :data:`TARGET_PREFIX`) → handler (request body → answer body)."""
        return {"DescribeLogStreams": self.describe_log_streams, "GetLogEvents": self.get_log_events}

    # ----------------------------------------------------------------------------- DescribeLogStreams
    def describe_log_streams(self, body: dict[str, Any]) -> dict[str, Any]:
        """``DescribeLogStreams`` (API reference): ``logGroupName`` (or ``logGroupIdentifier``),
        ``logStreamNamePrefix``, ``orderBy`` (``LogStreamName`` default, ``LastEventTime``: not with a
        prefix), ``descending``, ``limit`` (1–50, default 50), ``nextToken`` →
        ``{"logStreams": [LogStream], "nextToken"?}``; ``nextToken`` only while more streams follow.

        :raises ApiError: ``ResourceNotFoundException`` (another group), ``InvalidParameterException``.
        """
        self._group(body)
        prefix = _string(body, "logStreamNamePrefix", default="")
        order = _string(body, "orderBy", default="LogStreamName")
        if order not in ("LogStreamName", "LastEventTime"):
            raise _invalid(f"orderBy '{order}' must be LogStreamName or LastEventTime")
        if order == "LastEventTime" and prefix:
            raise _invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
        descending = _boolean(body, "descending")
        limit = _integer(body, "limit", 1, STREAMS_LIMIT, default=STREAMS_LIMIT)
        token = body.get("nextToken")
        offset = 0
        if token is not None:
            if not isinstance(token, str) or not token.isdigit():
                raise _invalid(_BAD_TOKEN)
            offset = int(token)
        jobs = [
            (name, rec)
            for rec in self.engine.list(wire.PLATFORM)
            if (name := stream_name(rec)) is not None and name.startswith(prefix)
        ]
        if order == "LogStreamName":
            jobs.sort(key=lambda pair: pair[0], reverse=descending)
            streams = [self._stream(name, rec) for name, rec in jobs[offset : offset + limit]]
        else:
            every = [self._stream(name, rec) for name, rec in jobs]
            every.sort(key=lambda s: (s.get("lastEventTimestamp", 0), s["logStreamName"]), reverse=descending)
            streams = every[offset : offset + limit]
        out: dict[str, Any] = {"logStreams": streams}
        if offset + limit < len(jobs):
            out["nextToken"] = str(offset + limit)
        return out

    def _stream(self, name: str, rec: Mapping[str, Any]) -> dict[str, Any]:
        """``LogStream``: ``logStreamName``, ``creationTime`` (ms: the job's start), ``arn``,
        ``storedBytes`` (always 0, as AWS reports it since 2019), and once it has events
        ``firstEventTimestamp``, ``lastEventTimestamp``, ``lastIngestionTime`` (ms)."""
        out: dict[str, Any] = {
            "logStreamName": name,
            "creationTime": millis(rec["started_at"]),
            "arn": f"{self._group_arn()}:log-stream:{name}",
            "storedBytes": 0,
        }
        first = last = None
        for event in self._events(rec, 0):
            if first is None:
                first = event
            last = event
        if first is not None and last is not None:
            out.update(
                firstEventTimestamp=first.timestamp,
                lastEventTimestamp=last.timestamp,
                lastIngestionTime=last.timestamp,
            )
        return out

    # ----------------------------------------------------------------------------- GetLogEvents
    def get_log_events(self, body: dict[str, Any]) -> dict[str, Any]:
        """``GetLogEvents`` (API reference): ``logGroupName`` (or ``logGroupIdentifier``),
        ``logStreamName``, ``startTime`` (ms, included), ``endTime`` (ms, excluded), ``limit``
        (1–10,000; default: what fits in 1 MB), ``startFromHead`` (default false: the latest events),
        ``nextToken`` (a ``nextForwardToken`` or ``nextBackwardToken``; its direction wins over
        ``startFromHead``) → ``{"events": [OutputLogEvent], "nextForwardToken", "nextBackwardToken"}``,
        events oldest first, both tokens always set; with nothing new, the forward token it was given.

        :raises ApiError: ``ResourceNotFoundException`` (another group, an unknown stream),
            ``InvalidParameterException``.
        """
        self._group(body)
        name = _string(body, "logStreamName")
        if not name:
            raise _invalid("logStreamName must be given")
        window = Window(_time(body, "startTime"), _time(body, "endTime"))
        limit = _integer(body, "limit", 1, EVENTS_LIMIT, default=EVENTS_LIMIT)
        forward = _boolean(body, "startFromHead")
        position: int | None = 0 if forward else None  # None: the end of the stream
        if (token := body.get("nextToken")) is not None:
            match = _TOKEN.match(token) if isinstance(token, str) else None
            if match is None:
                raise _invalid(_BAD_TOKEN)
            forward, position = match[1] == "f", int(match[2])
        rec = self._job(name)
        if forward:
            assert position is not None
            events, end = self._forward(rec, position, window, limit)
            first = events[0].index if events else position
            return _page(events, forward_at=end, backward_at=first)
        events, end = self._backward(rec, position, window, limit)
        first = events[0].index if events else end
        return _page(events, forward_at=end, backward_at=first)

    def _forward(
        self, rec: Mapping[str, Any], start: int, window: Window, limit: int
    ) -> tuple[list[LogEvent], int]:
        """Events from index ``start`` on in ``window``, at most ``limit`` and 1 MB; and where the next
        forward read starts (after the last event returned, or after everything read)."""
        events: list[LogEvent] = []
        size, end = 0, start
        for event in self._events(rec, start):
            if window.holds(event.timestamp):
                if events and (len(events) == limit or size + event.size > RESPONSE_BYTES):
                    return events, events[-1].index + 1
                events.append(event)  # the first one even if it alone is over 1 MB
                size += event.size
            end = event.index + 1
        return events, end

    def _backward(
        self, rec: Mapping[str, Any], before: int | None, window: Window, limit: int
    ) -> tuple[list[LogEvent], int]:
        """The latest events before index ``before`` (``None``: the end) in ``window``, at most
        ``limit`` and 1 MB, oldest first; and ``before`` (the end of the stream when ``None``)."""
        kept: deque[LogEvent] = deque(maxlen=limit)
        end = 0
        for event in self._events(rec, 0):
            if before is not None and event.index >= before:
                break
            if window.holds(event.timestamp):
                kept.append(event)
            end = event.index + 1
        size = sum(e.size for e in kept)
        while len(kept) > 1 and size > RESPONSE_BYTES:
            size -= kept.popleft().size
        return list(kept), end if before is None else before

    # ----------------------------------------------------------------------------- the job's events
    def _events(self, rec: Mapping[str, Any], start: int) -> Iterator[LogEvent]:
        """The stream's events from index ``start`` on, as they are now: the job's lines
        (:func:`.job_log.job_lines`) less the empty ones, which CloudWatch Logs cannot hold."""
        for line in job_lines(self.engine, rec, start):
            if line.text.strip():
                yield LogEvent(line.index, millis(line.at), line.text)

    def _job(self, name: str) -> dict[str, Any]:
        """The job whose stream is ``name``. :raises ApiError: ``ResourceNotFoundException``."""
        try:
            rec = self.engine.get(name.split("/", 1)[0], platform=wire.PLATFORM)
        except JobNotFound:
            raise ApiError(400, "ResourceNotFoundException", _STREAM_GONE) from None
        if stream_name(rec) != name:
            raise ApiError(400, "ResourceNotFoundException", _STREAM_GONE)
        return rec

    def _group(self, body: Mapping[str, Any]) -> None:
        """The request names :data:`LOG_GROUP` (by name, or by ARN in ``logGroupIdentifier``).
        :raises ApiError: ``ResourceNotFoundException``, ``InvalidParameterException``."""
        name, identifier = body.get("logGroupName"), body.get("logGroupIdentifier")
        if name is not None and identifier is not None:
            raise _invalid("LogGroup name and LogGroup ARN are mutually exclusive parameters.")
        given = name if name is not None else identifier
        if not isinstance(given, str) or not given:
            raise _invalid("Either logGroupName or logGroupIdentifier must be given.")
        if given.startswith("arn:"):
            given = given.split(":log-group:", 1)[-1].removesuffix(":*")
        if given != LOG_GROUP:
            raise ApiError(400, "ResourceNotFoundException", _GROUP_GONE)

    def _group_arn(self) -> str:
        return f"arn:aws:logs:{self.region}:{wire.ACCOUNT}:log-group:{LOG_GROUP}"


def _page(events: list[LogEvent], forward_at: int, backward_at: int) -> dict[str, Any]:
    return {
        "events": [e.wire() for e in events],
        "nextForwardToken": f"f/{forward_at}",
        "nextBackwardToken": f"b/{backward_at}",
    }


def _invalid(message: str) -> ApiError:
    return ApiError(400, "InvalidParameterException", message)


def _string(body: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str):
        raise _invalid(f"{key} must be a string")
    return value


def _boolean(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise _invalid(f"{key} must be a boolean")
    return value


def _integer(body: Mapping[str, Any], key: str, low: int, high: int, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(
            f"1 validation error detected: Value '{value}' at '{key}' failed to satisfy constraint: "
            f"Member must have value between {low} and {high}"
        )
    return value


def _time(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(f"{key} must be a non-negative number of milliseconds")
    return value
