-- The event index of one projection version ({schema}): where in the log each conversation's
-- records are. Run when a version is created (projectors/versions.py) and, for a version made
-- before the index existed, when a projector first loads its positions (projectors/event_index.py).

-- Every record of a conversation by its coordinates, decoded or not, whatever the fold made of
-- it (applied, a repeated event id, held, dead-lettered): audit reads fetch exactly these records
-- from the log, so they cost in proportion to the conversation, not to its partition. The first
-- record with an event id answers a repeated Idempotency-Key. event_id is '' for a record that
-- could not be decoded.
CREATE TABLE IF NOT EXISTS {schema}.event_index (
    conversation_key text    NOT NULL,
    event_id         text    NOT NULL,
    partition        integer NOT NULL,
    "offset"         bigint  NOT NULL,
    PRIMARY KEY (conversation_key, event_id, partition, "offset")
);

-- Operational: per partition, the offset the index starts at when the version is older than the
-- index (the version's positions when the index was added). No row: indexed from offset 0.
CREATE TABLE IF NOT EXISTS {schema}.event_index_from (
    partition   integer PRIMARY KEY,
    from_offset bigint  NOT NULL
);
