"""A session moved as JSON Lines: export and import (`api.schemas.transfer` says each line's
shape), for the routes and for `scripts/move_tenant` alike.

An export (`export`) streams from one read snapshot, a page at a time, so the file is one
consistent moment of the session and its memory does not grow with the session. An import
(`importer`) reads the file line by line and checks each line (`checks`) against what came
before it as it stores it, in one transaction: the first line found wrong (not JSON, a wrong
shape, a seq out of order, a summary covering a removed message, a file cut short) raises
`ValidationFailed` naming its line, and the transaction stores nothing. What the import keeps in
memory is one batch of messages, the seqs of hidden messages (removed or orphaned) and a few
numbers per summary. `lines` holds what both sides share: the lines built from rows, a file
read back as numbered, parsed lines.
"""
