"""Where each stream is decoded and analysed: a static, documented scheduler.

Every rank computes the same :class:`Plan` from the same arguments, so no
coordination is needed and GP names follow from ranks:

* ``ingest-{r}``: one ingest GP (NGP) per rank ``r``; stream ``s`` of ``S`` is
  decoded by the ingest on rank ``s * N // S`` (contiguous blocks, so every rank
  gets a similar mix of clips);
* ``analyser-{r}-{k}``: ``A`` analysers per rank (``k < A``), listed rank by rank
  as analyser ``j = r * A + k``; stream ``s`` is analysed by

  - ``spread`` (default): ``j = s % (N * A)``, round-robin over *all* analysers,
    so every ingest feeds every analyser and ``(N - 1) / N`` of the frames cross
    ranks (the paper's N-to-N pattern);
  - ``local``: ``j = r * A + s % A`` with ``r`` the stream's ingest rank, so frames
    never leave their rank (the patent's CPU node / GPU node pairing, folded
    onto one host);

  a stream keeps its analyser for the whole run, because the temporal measures
  need the stream's previous frame;
* ``collector``: one collector GP on rank 0.

Within an analyser a stream has a fixed *slot* (its rank among the analyser's
streams), which indexes the analyser's state arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

COLLECTOR = "collector"
PLACEMENTS = ("spread", "local")

Array = np.ndarray[Any, Any]


def ingest_name(rank: int) -> str:
    return f"ingest-{rank}"


def analyser_name(rank: int, k: int) -> str:
    return f"analyser-{rank}-{k}"


@dataclass(frozen=True)
class Plan:
    """The static assignment of ``streams`` streams to ``ranks`` ranks (see module doc)."""

    streams: int
    ranks: int
    analysers_per_rank: int = 1
    placement: str = "spread"
    ingest_of: Array = field(init=False, repr=False, compare=False)
    analyser_of: Array = field(init=False, repr=False, compare=False)
    slot_of: Array = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.streams < 1 or self.ranks < 1 or self.analysers_per_rank < 1:
            raise ValueError(f"need streams, ranks and analysers per rank >= 1, got "
                             f"{self.streams}, {self.ranks}, {self.analysers_per_rank}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        s = np.arange(self.streams, dtype=np.int64)
        ingest = s * self.ranks // self.streams
        a = self.analysers_per_rank
        if self.placement == "spread":
            analyser = s % (self.ranks * a)
        else:
            analyser = ingest * a + s % a
        # slot = position of the stream among its analyser's streams (stable order)
        order = np.argsort(analyser, kind="stable")
        counts = np.bincount(analyser, minlength=self.ranks * a)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.empty_like(s)
        slot[order] = np.arange(self.streams) - np.repeat(starts, counts)
        object.__setattr__(self, "ingest_of", ingest)
        object.__setattr__(self, "analyser_of", analyser)
        object.__setattr__(self, "slot_of", slot)

    @property
    def analysers(self) -> list[str]:
        """All analyser names, index ``j = rank * A + k``."""
        return [analyser_name(r, k) for r in range(self.ranks) for k in range(self.analysers_per_rank)]

    @property
    def ingests(self) -> list[str]:
        return [ingest_name(r) for r in range(self.ranks)]

    def analyser_rank(self, j: int) -> int:
        return j // self.analysers_per_rank

    def members(self, j: int) -> Array:
        """The streams of analyser ``j``, in slot order."""
        return np.flatnonzero(self.analyser_of == j)

    def ingest_streams(self, rank: int) -> Array:
        return np.flatnonzero(self.ingest_of == rank)

    def routes(self, rank: int) -> dict[int, Array]:
        """For the ingest on ``rank``: analyser index -> its streams there, in order."""
        mine = self.ingest_streams(rank)
        dest = self.analyser_of[mine]
        return {int(j): mine[dest == j] for j in np.unique(dest)}

    def cross_rank_share(self) -> float:
        """Share of the streams whose frames travel to another rank."""
        return float(np.mean(self.ingest_of != self.analyser_of // self.analysers_per_rank))
