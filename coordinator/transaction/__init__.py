"""The transaction coordinator: transactional ids, their state in __transaction_state, markers.

- :mod:`.state`: TxnState (ids, names, valid previous states as data), TransactionMetadata
  and its two-phase transitions.
- :mod:`.log`: TransactionLogKey/Value v0 records, the id -> partition mapping.
- :mod:`.state_manager`: owned/loading partitions, load at election, append-then-apply.
- :mod:`.markers`: WriteTxnMarkers to the partition leaders, then Complete*.
- :mod:`.coordinator`: the request semantics, timeouts and expiry.
- :mod:`.services`: what the broker hands in (typing.Protocol), so nothing here imports broker/.
"""
