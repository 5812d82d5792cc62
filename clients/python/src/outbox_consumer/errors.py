"""What a handler raises to say what becomes of its entry (docs/protocol.md, "Retries and
delivery counting"). Any other exception is a :class:`Retry`."""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """What should become of an entry whose handler failed."""

    #: Deliver it again after a backoff; dead-lettered after ``max_deliveries`` deliveries.
    RETRY = "retry"
    #: Move it to the dead stream now: no delivery will ever succeed.
    DEAD_LETTER = "dead_letter"
    #: Not the entry's fault (a service the handler needs is away): deliver it again after a
    #: pause without counting this delivery.
    OUTAGE = "outage"
    #: A newer owner holds the entry's partition: the effect was refused; the entry is left
    #: to that owner, uncounted, and this consumer stops handling the partition.
    FENCED = "fenced"


class HandlerError(Exception):
    """A handler's failure with its :class:`ErrorKind`. Raise one of the subclasses."""

    kind: ErrorKind = ErrorKind.RETRY


class Retry(HandlerError):
    """Retry later (counted; dead-lettered after ``max_deliveries``)."""

    kind = ErrorKind.RETRY


class DeadLetter(HandlerError):
    """Dead-letter now."""

    kind = ErrorKind.DEAD_LETTER


class Outage(HandlerError):
    """An outage: retry after a pause, this delivery not counted."""

    kind = ErrorKind.OUTAGE


class Fenced(HandlerError):
    """The effect was refused: a newer owner holds the entry's partition."""

    kind = ErrorKind.FENCED


def kind_of(error: BaseException) -> ErrorKind:
    """The kind of any exception a handler raised: a :class:`HandlerError`'s own, else a
    retry."""
    if isinstance(error, HandlerError):
        return error.kind
    return ErrorKind.RETRY


def error_text(error: BaseException) -> str:
    """The text the dead stream's ``error`` field gets for ``error``."""
    text = str(error)
    if isinstance(error, HandlerError):
        return text or type(error).__name__
    return text or type(error).__name__


class ConfigError(ValueError):
    """A setting that cannot work: ``setting`` names it, ``reason`` says why."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"invalid consumer setting `{setting}`: {reason}")
        self.setting = setting
        self.reason = reason
