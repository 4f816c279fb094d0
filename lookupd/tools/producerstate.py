"""Just enough of Kafka's ProducerStateManager to know which transactions were aborted.

The `.txnindex` entry for an aborted transaction is written into the segment holding its
ABORT marker, with a last stable offset that depends on every other transaction still open
at that moment, from the start of the partition. Both the segment writer and `recover`
replay batches through this to produce the entries Kafka would.
"""

from __future__ import annotations

from ..format.batch import BatchHeader
from ..log.txnindex import AbortedTxn


class TransactionTracker:
    """Open transactions by producer, in first-offset order (ProducerStateManager.ongoingTxns)."""

    def __init__(self) -> None:
        self._first_offset: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def observe(self, header: BatchHeader, marker: str | None = None) -> AbortedTxn | None:
        """Feed one batch in log order; returns the aborted transaction its ABORT marker completes.

        `marker` is the control record type ("COMMIT"/"ABORT") for control batches.
        """
        if not header.has_producer_id:
            return None
        pid = header.producer_id
        if header.is_control:
            first = self._first_offset.get(pid)
            if first is None or marker not in ("COMMIT", "ABORT"):
                return None
            # lastStableOffset: the earliest other open transaction, else just past the marker.
            others = [o for p, o in self._first_offset.items() if p != pid]
            lso = min(others) if others else header.base_offset + 1
            del self._first_offset[pid]
            if marker == "ABORT":
                return AbortedTxn(pid, first, header.base_offset, lso)
            return None
        if header.is_transactional and pid not in self._first_offset:
            self._first_offset[pid] = header.base_offset
        return None

    @property
    def open_transactions(self) -> dict[int, int]:
        return dict(self._first_offset)
