"""The transaction cap: what other sessions' open transactions mean for a run's upper bound.

A row that a writer's transaction inserts is stamped when it is written and seen only when the
transaction commits; a bound frozen above it while it is open would let the cursor pass it. So
the bound stays below the oldest open transaction's start (read before the bounds query, in a
statement of its own). The cap must never fail open in silence: what it can't see makes the run
hold back further (and say why), or refuse unless a `lookback` covers late commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from incremental_assets.config import TableSpec
from incremental_assets.cursor import EPOCH_UTC
from incremental_assets.errors import SourceError, TableProblem


@dataclass(frozen=True)
class OpenTransactions:
    """Other sessions' open transactions, read before the bounds query.

    Read in a statement of its own, before the bounds query takes its snapshot: a transaction
    whose rows that snapshot can't see is then either listed here or started after `read_at`, so
    a bound below both passes none of its rows. (Read in the same statement, it would come after
    the snapshot, and miss a transaction that committed in between.)
    """

    read_at: datetime  # the server's clock when they were read
    oldest_start: datetime | None  # None: no other transaction was open
    holder: str | None  # which session, for the metadata
    hidden_sessions: int = 0  # other roles' sessions the role can't see: warned about
    # Sessions whose transactions can't be seen but began after a known instant: held below it.
    hold_below: datetime | None = None
    held_because: tuple[str, ...] = ()  # why, each a warning
    # What no instant bounds (a standby, prepared transactions): only a lookback is safe.
    blind_because: tuple[str, ...] = ()

    @property
    def cap(self) -> datetime:
        """The instant the upper bound stays strictly below."""
        starts = [self.read_at, self.oldest_start, self.hold_below]
        return min(s for s in starts if s is not None)


def cap_limits(table: TableSpec, open_: OpenTransactions) -> tuple[str, ...]:
    """What the cap can't see, each said as a warning; raises where only a lookback is safe."""
    limits = list(open_.held_because)
    for reason in open_.blind_because:
        if table.lookback is None:
            raise SourceError(
                TableProblem(
                    table.name,
                    f"{reason}, so the cap can't keep the cursor below rows that commit late. "
                    "Nothing was read and the cursor did not move.",
                    "transaction_cap",
                    "set `lookback:` to longer than your writers' transactions stay open (plus "
                    "replication delay on a standby), or read from the primary and finish the "
                    "prepared transactions, or set transaction_cap: false to accept that such "
                    "rows may be skipped.",
                )
            )
        limits.append(
            f"{reason}; rows that commit late are caught only by the lookback ({table.lookback})"
        )
    return tuple(limits)


def instant(epoch_micros: str | int | None) -> datetime | None:
    """An instant from microseconds since the epoch (as a wire value)."""
    if epoch_micros is None:
        return None
    return EPOCH_UTC + timedelta(microseconds=int(epoch_micros))
