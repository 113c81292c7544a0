"""L0: the long-term store of JSON-LD entries, its protocol, its SQLite implementation and parts.

``protocol`` (``EntryStore``: what the layers above need of L0, whatever database holds it),
``sqlite`` (``L0Store``: entries, edges, full-text search, the change log, in one SQLite file),
``entry`` (the record written and the entry read), ``staging`` (a write batch), ``connections``
(the store's SQLite connections), ``access`` (access statistics), ``filters`` (what a search or
a read may find, applied in the store's SQL), ``scope`` (tenancy as tags and filters),
``retrieval`` (the default filters of retrievers), ``manifest`` (a memory directory's
``memory.json``) and ``ownership`` (a memory directory's owner lock).
"""
