-- 0002_summarizer: where the summarizer consumer has read the log up to.
--
-- The summarizer keeps its own positions (never Kafka's committed offsets), one row per
-- consumer name and partition: the next offset it will look at. Summaries themselves are
-- events in the log; the read models hold them.

CREATE TABLE convlog.summarizer_positions (
    consumer    text        NOT NULL,
    partition   int         NOT NULL CHECK (partition >= 0),
    next_offset bigint      NOT NULL CHECK (next_offset >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, partition)
);

COMMENT ON TABLE convlog.summarizer_positions IS
    'Per summarizer consumer and log partition, the next offset to look at for completed turns.';
