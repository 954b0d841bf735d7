"""Online scheduling policies: the same object drives the simulator and the live runtime.

A policy sees only events (a mini-batch was sampled and its sizes are now known, a transfer
finished, a trainer finished an iteration) and answers three questions:

* ``pick_batch``: a sampler is free — which pending mini-batch does it build next?
* ``order``: a NIC has queued transfers — in which order are they sent? (``sharing`` says
  whether the NIC sends them all at once, fairly shared, or in that order, one at a time with
  leftover bandwidth going to the next: work-conserving priority transmission)
* ``prefetch``: how many mini-batches ahead may a trainer's pipeline run?

A researcher adds a policy as one class with ``@register("name")``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class BatchKey:
    """A mini-batch: iteration ``iteration`` of trainer ``trainer``."""

    trainer: int
    iteration: int


@dataclass
class Transfer:
    """One transmission waiting on a NIC. ``kind``: struct | block | feat | relay | grad."""

    batch: BatchKey
    kind: str
    src: int  # machine index
    dst: int  # machine index
    nbytes: float
    created: float = 0.0  # when it was queued (seconds)
    seq: int = 0  # arrival order, tie-breaker


@dataclass
class PolicyContext:
    """What is known before the run starts (static facts, no mini-batch sizes)."""

    trainers: int
    iterations: int
    prefetch: int  # the job's buffer bound, in mini-batches per trainer
    train_s: list[float] = field(default_factory=list)  # expected train seconds per trainer
    fetch_s: list[float] = field(default_factory=list)  # expected fetch seconds per trainer
    egress: list[float] = field(default_factory=list)  # bytes/s per machine
    ingress: list[float] = field(default_factory=list)


class Policy(ABC):
    """Base class; subclasses override the decisions they care about."""

    name: ClassVar[str] = "base"
    sharing: ClassVar[str] = "fair"  # "fair": NICs share bandwidth; "priority": in order

    def reset(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    # -------------------------------------------------------------- events
    def on_sampled(self, batch: BatchKey, feat_bytes: float, now: float) -> None:
        """A mini-batch was sampled; its feature bytes (and so its fetch work) are now known."""

    def on_transfer_done(self, transfer: Transfer, now: float) -> None:
        """A transfer finished."""

    def on_trained(self, batch: BatchKey, now: float) -> None:
        """A trainer finished training `batch` (before the all-reduce barrier)."""

    # -------------------------------------------------------------- decisions
    @abstractmethod
    def pick_batch(self, candidates: list[BatchKey], now: float) -> BatchKey:
        """Which of the pending mini-batches a free sampler builds next."""

    @abstractmethod
    def order(self, queue: list[Transfer], now: float) -> list[Transfer]:
        """The order in which a NIC serves its queued transfers."""

    def prefetch(self, trainer: int) -> int:
        return self.ctx.prefetch


POLICIES: dict[str, type[Policy]] = {}


def register(name: str):
    """Class decorator: make a policy available as ``--policy name``."""

    def deco(cls: type[Policy]) -> type[Policy]:
        cls.name = name
        POLICIES[name] = cls
        return cls

    return deco


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})") \
            from None
