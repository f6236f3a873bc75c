"""The stored records, read one way: where each file of a run lives (:mod:`.paths`), the
status words a record can carry (:mod:`.status`), the one form of a stored timestamp
(:mod:`.stamps`), a category's time share with its
interval (:mod:`.shares`) and the bench results files (:mod:`.bench`). The versioned
readers and migration are ``reportgen.records.schema``, the atomic writers
``reportgen.records.store``.

No module here imports torch, and none imports another part of reportgen.
"""
