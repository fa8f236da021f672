-- 0009_sealed_rows: read-model rows sealed under their conversation's data key (issue 25).
--
-- A row projected from a sealed record (schema v5, events/sealing/) keeps its content columns
-- NULL and holds their values in `sealed` (nonce || AES-256-GCM ciphertext and tag, under the
-- key `key_id` names: projectors/sealed_rows.py), so that Postgres' files and WAL never hold a
-- sealed conversation's content in clear, and destroying the key (erasure) leaves nothing
-- readable behind. A row from a plain record has both NULL and its content in clear, as before.
-- transcript: content, name, tool_calls, reasoning_content, metadata, blocks; summaries: text;
-- conversations: title, metadata. pgstore/sql/read_models.sql creates these columns, last, for
-- versions made from now on; this adds them, in the same order, to the versions made before, so
-- a rebuild's rows and a migrated version's compare equal as text. Nullable, no default: adding
-- them rewrites no table. IF NOT EXISTS: a version made from the new read_models.sql has them.

DO $$
DECLARE
    version_schema text;
    version_table text;
BEGIN
    FOR version_schema IN
        SELECT v.schema_name FROM convlog.projection_versions v
        WHERE to_regclass(format('%I.transcript', v.schema_name)) IS NOT NULL
        ORDER BY v.projection, v.version
    LOOP
        FOREACH version_table IN ARRAY ARRAY['conversations', 'transcript', 'summaries'] LOOP
            EXECUTE format(
                'ALTER TABLE %I.%I ADD COLUMN IF NOT EXISTS sealed bytea, ADD COLUMN IF NOT EXISTS key_id text',
                version_schema, version_table
            );
        END LOOP;
    END LOOP;
END
$$;
