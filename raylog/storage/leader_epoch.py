"""The leader epoch history of a replica's log (Kafka's LeaderEpochFileCache, KIP-101).

Entries ``(epoch, start_offset)``, both rising: from ``start_offset`` on, records were
written under ``epoch``. A replica that follows a new leader asks it where its own latest
epoch ends (:meth:`end_offset_for`) and truncates there, so replicas never disagree on a
committed offset even after unclean restarts.

File ``leader-epoch-checkpoint`` in the log directory: one ``epoch start_offset`` line per
entry, rewritten atomically (:func:`~raylog.storage.files.write_atomically`) on every
change; changes are rare.

Concurrency: single writer (the replica), no concurrent readers.
"""

from __future__ import annotations

import bisect
import os

from ..errors import StorageError
from .files import write_atomically

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    """See the module docstring."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, FILE_NAME)
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self._load()

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored if not newer)."""
        if self._epochs and epoch <= self._epochs[-1]:
            return
        # An epoch that starts where (or before) the last one did replaces it: no records.
        while self._offsets and self._offsets[-1] >= start_offset:
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(e, end)``: the largest known epoch ``e <= epoch`` and the offset where it ends
        (the start of the next epoch, or ``log_end_offset`` for the latest). When every known
        epoch is newer, ``(epoch, start of the first one)``: the asker's epoch ended before
        anything this log holds (as Kafka answers). ``(UNDEFINED, UNDEFINED)`` when nothing
        is known or ``epoch`` is UNDEFINED."""
        if epoch == UNDEFINED or not self._epochs:
            return UNDEFINED, UNDEFINED
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return epoch, self._offsets[0]
        end = self._offsets[i + 1] if i + 1 < len(self._offsets) else log_end_offset
        return self._epochs[i], end

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was cut there)."""
        i = bisect.bisect_left(self._offsets, end_offset)
        if i < len(self._offsets):
            del self._epochs[i:], self._offsets[i:]
            self._save()

    def clear_and_start_at(self, epoch: int, start_offset: int) -> None:
        self._epochs, self._offsets = [], []
        self.assign(epoch, start_offset)

    def _load(self) -> None:
        try:
            with open(self.path, encoding="ascii") as f:
                pairs = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc
        for epoch, offset in pairs:
            if not self._epochs or (epoch > self._epochs[-1] and offset >= self._offsets[-1]):
                self._epochs.append(epoch)
                self._offsets.append(offset)

    def _save(self) -> None:
        write_atomically(self.path, "".join(f"{e} {o}\n" for e, o in zip(self._epochs, self._offsets, strict=True)))
