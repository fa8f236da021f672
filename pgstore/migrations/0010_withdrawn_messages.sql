-- 0010_withdrawn_messages: messages withdrawn from what is served, kept in the audit (schema v6).
--
-- A MessagesWithdrawn event takes messages out of the window, every context, the token budget
-- and the turn count, as a redaction does, but clears nothing: the transcript keeps their
-- content, marked by withdrawn_at and withdrawn_reason (the first withdrawal's). Rows projected
-- before this migration were never withdrawn (no v6 record existed): NULL is their value, and a
-- rebuild's rows compare equal. pgstore/sql/read_models.sql creates these columns, last, and the
-- partial index for versions made from now on; this adds them, in the same order, to the
-- versions made before. Nullable, no default: adding them rewrites no table. IF NOT EXISTS: a
-- version made from the new read_models.sql has them.

DO $$
DECLARE
    version_schema text;
BEGIN
    FOR version_schema IN
        SELECT v.schema_name FROM convlog.projection_versions v
        WHERE to_regclass(format('%I.transcript', v.schema_name)) IS NOT NULL
        ORDER BY v.projection, v.version
    LOOP
        EXECUTE format(
            'ALTER TABLE %1$I.transcript ADD COLUMN IF NOT EXISTS withdrawn_at timestamptz, '
            'ADD COLUMN IF NOT EXISTS withdrawn_reason text',
            version_schema
        );
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS transcript_withdrawn ON %1$I.transcript (conversation_key, seq) '
            'WHERE withdrawn_at IS NOT NULL',
            version_schema
        );
    END LOOP;
END
$$;
