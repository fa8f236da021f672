-- 0008_context_range: the fold's decisions about a context's range, on the conversation's row.
--
-- Where a context's messages start, which summary is current and how many usable turns the
-- range holds used to be worked out by every reader (in SQL and again in Python). The fold now
-- decides them (projectors/context_range.py) and the store writes them with the conversation
-- (projectors/rows.py): the readers read these columns. projectors/sql/read_models.sql creates
-- them, last in conversations, for versions made from now on; this adds them, in the same order,
-- to the versions made before and fills them with what the fold would have decided over the
-- same rows, so a migrated version and a rebuild compare equal. This file is the one place
-- those rules are written in SQL: the fill of rows projected before it.

DO $$
DECLARE
    version_schema text;
BEGIN
    FOR version_schema IN
        SELECT v.schema_name FROM convlog.projection_versions v
        WHERE to_regclass(format('%I.conversations', v.schema_name)) IS NOT NULL
        ORDER BY v.projection, v.version
    LOOP
        EXECUTE format(
            'ALTER TABLE %1$I.conversations ADD COLUMN IF NOT EXISTS summary_seq bigint, '
            'ADD COLUMN IF NOT EXISTS summary_covers_seq bigint, '
            'ADD COLUMN IF NOT EXISTS summary_covers_turn integer, '
            'ADD COLUMN IF NOT EXISTS turns_before_epoch integer NOT NULL DEFAULT 0, '
            'ADD COLUMN IF NOT EXISTS redacted_questions bigint[] NOT NULL DEFAULT ''{}'', '
            'ADD COLUMN IF NOT EXISTS context_start bigint NOT NULL DEFAULT 0, '
            'ADD COLUMN IF NOT EXISTS usable_turns integer NOT NULL DEFAULT 0',
            version_schema
        );
        -- The current summary: the current epoch's latest one whose text is kept, and the first
        -- row of the message it covers through.
        EXECUTE format(
            'UPDATE %1$I.conversations c SET summary_seq = m.seq, summary_covers_seq = m.covers_seq, '
            'summary_covers_turn = m.covers_turn FROM ('
            '  SELECT DISTINCT ON (x.conversation_key) x.conversation_key, x.seq, t.seq AS covers_seq, '
            '         t.turn AS covers_turn '
            '  FROM %1$I.summaries x JOIN %1$I.conversations cc '
            '    ON cc.conversation_key = x.conversation_key AND cc.epoch = x.epoch '
            '  JOIN LATERAL (SELECT t.seq, t.turn FROM %1$I.transcript t WHERE t.conversation_key = x.conversation_key '
            '    AND t.message_id = x.covers_through_message_id ORDER BY t.seq LIMIT 1) t ON true '
            '  WHERE x.text IS NOT NULL ORDER BY x.conversation_key, x.seq DESC'
            ') m WHERE m.conversation_key = c.conversation_key',
            version_schema
        );
        -- The turn count when the current epoch began: that of its conversation's last earlier row.
        EXECUTE format(
            'UPDATE %1$I.conversations c SET turns_before_epoch = coalesce((SELECT t.turn FROM %1$I.transcript t '
            'WHERE t.conversation_key = c.conversation_key AND t.epoch < c.epoch ORDER BY t.seq DESC LIMIT 1), 0) '
            'WHERE c.epoch > 0',
            version_schema
        );
        -- The current epoch's redacted questions (user messages).
        EXECUTE format(
            'UPDATE %1$I.conversations c SET redacted_questions = ARRAY(SELECT t.seq FROM %1$I.transcript t '
            'WHERE t.conversation_key = c.conversation_key AND t.epoch = c.epoch AND t.role = ''user'' '
            'AND t.redacted_at IS NOT NULL ORDER BY t.seq) '
            'WHERE EXISTS (SELECT FROM %1$I.transcript t WHERE t.conversation_key = c.conversation_key '
            'AND t.redacted_at IS NOT NULL)',
            version_schema
        );
        -- Where the context starts, and the usable turns from there (context_range.py's functions).
        EXECUTE format(
            'UPDATE %1$I.conversations c SET context_start = CASE WHEN c.summary_seq IS NULL THEN 0 '
            'WHEN w.start_seq IS NULL THEN c.summary_covers_seq + 1 '
            'ELSE least(w.start_seq, c.summary_covers_seq + 1) END '
            'FROM %1$I.windows w WHERE w.conversation_key = c.conversation_key',
            version_schema
        );
        EXECUTE format(
            'UPDATE %1$I.conversations c SET usable_turns = c.turn_count - CASE '
            'WHEN c.summary_seq IS NULL THEN c.turns_before_epoch '
            'WHEN w.start_seq IS NOT NULL AND w.start_seq <= c.summary_covers_seq + 1 '
            'THEN c.turn_count - cardinality(w.turn_starts) ELSE c.summary_covers_turn END '
            '- (SELECT count(*) FROM unnest(c.redacted_questions) q WHERE q >= c.context_start) '
            'FROM %1$I.windows w WHERE w.conversation_key = c.conversation_key',
            version_schema
        );
        EXECUTE format(
            'ALTER TABLE %1$I.conversations ALTER COLUMN turns_before_epoch DROP DEFAULT, '
            'ALTER COLUMN redacted_questions DROP DEFAULT, ALTER COLUMN context_start DROP DEFAULT, '
            'ALTER COLUMN usable_turns DROP DEFAULT',
            version_schema
        );
    END LOOP;
END
$$;
