"""L0 on PostgreSQL: the entry store a fleet of workers shares, and the database it runs on.

``entries`` (``PostgresEntryStore``: the ``EntryStore`` on PostgreSQL), ``schema`` (its tables
and the steps that upgrade them), ``lexical`` (BM25 as FTS5 ranks, in SQL) and ``database``
(``Database``: a connection pool in one named schema, errors translated with no secret in them,
a schema's version, and the statement to have an administrator run when a privilege is
missing). Needs the ``postgres`` extra (``psycopg`` 3 and ``psycopg-pool``).
"""

from gliding_core.store.postgres.database import Database, DatabaseSettings, check_schema
from gliding_core.store.postgres.entries import PostgresEntryStore

__all__ = ["Database", "DatabaseSettings", "PostgresEntryStore", "check_schema"]
