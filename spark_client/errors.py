"""The errors spark_client raises on purpose, with Spark's Kafka source wording, and the one line that says
what went wrong when Spark hands one of them back wrapped in its own error and tracebacks."""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable

# How Python prints an exception of ours in the traceback Spark carries back from a Python worker:
# `spark_client.errors.OptionError: topic(s) order not found: ...` (lookupd's errors too: an unreachable daemon).
_OURS = re.compile(r"^((?:spark_client|lookupd)(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
OUR_PACKAGES = ("spark_client", "lookupd")
TRACEBACK_ENV = "SPARK_CLIENT_TRACEBACK"  # set (to anything) for Spark's whole error instead of the one line


class OptionError(ValueError):
    """An option value or combination the source rejects (Spark's IllegalArgumentException)."""


class DataLossError(RuntimeError):
    """Records the read needs are gone (Spark's KAFKA_DATA_LOSS) and failOnDataLoss is true."""

    def __init__(self, reason: str):
        super().__init__(
            "Some data may have been lost because they are not available in Kafka any more; either the data was "
            "aged out by Kafka or the topic may have been deleted before all the data in the topic was processed. "
            "If you don't want your query to fail on such cases, set the source option failOnDataLoss to false. "
            f"Reason: {reason}")
        self.reason = reason


class TopicAuthorizationError(PermissionError):
    """Topics the daemon's [[acl]] rules do not let this client describe (Spark's TopicAuthorizationException)."""

    def __init__(self, topics: list[str], reason: str):
        super().__init__(f"Not authorized to access topics: [{', '.join(topics)}]: {reason}")
        self.topics = topics


class SegmentsChanged(OptionError):
    """Segments were rolled or deleted while a read was planned: planning again gives a consistent plan."""


class PartitionUnreadable(RuntimeError):
    """A partition being read that its daemon cannot read (its `partitions` entry carries an `error`)."""


class WorkerPythonError(RuntimeError):
    """Spark's Python workers run an interpreter that cannot import spark_client."""


def one_line(err: BaseException) -> str | None:
    """`Class: message` of the error of ours behind `err`, which Spark may have wrapped with its own error and
    tracebacks (a read is planned in a Python worker); None when no error of ours is behind it."""
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        if type(err).__module__.split(".")[0] in OUR_PACKAGES:
            return f"{type(err).__name__}: {err}"
        found = _OURS.findall(str(err))
        if found:
            return f"{found[-1][1]}: {found[-1][2].strip()}"
        err = err.__cause__ or err.__context__
    return None


def install_excepthook() -> None:
    """Print an uncaught error of ours as its one line (`one_line`) instead of Spark's 170 lines of Java and
    Python traceback; every other error, and every error when SPARK_CLIENT_TRACEBACK is set, as before."""
    if getattr(sys.excepthook, "spark_client", False):
        return
    previous: Callable[..., Any] = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        line = None if os.environ.get(TRACEBACK_ENV) else one_line(value)
        if line is None:
            previous(kind, value, tb)
        else:
            print(line, file=sys.stderr)

    hook.spark_client = True  # type: ignore[attr-defined]
    sys.excepthook = hook
