"""The append: a batch stored exactly once, even when the database connection dies.

- `use_case`: the use case the route calls (`append`, `store_batch`), which prepares the batch,
  runs the database's append, and records a summarization job when the backlog is due.
- `postgresql`: the append as one autocommit statement on the driver (`api.db.driver`), the
  one statement that commits itself rather than through the unit of work
  (`api.db.transactions.Database`); it lives here rather than in `api.store` because it is the
  append, kept next to its use case.
- `sqlite`: the append's statements, run in one call to SQLite's driver thread inside the
  transaction the unit of work begins and commits around them.
- `batch`: what both share: the answer (`AppendOutcome`), the backlog they count, the batch checks.
"""

from api.append.batch import AppendOutcome
from api.append.use_case import append, new_messages, store_batch

__all__ = ["AppendOutcome", "append", "new_messages", "store_batch"]
