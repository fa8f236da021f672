-- 0004_transcript_blocks: schema v4 messages in the transcript of every projection version.
--
-- A message appended in a provider's native format keeps its lossless content as typed blocks
-- (events/blocks.py) and records the provider and API format that made it, and whether a tool
-- result reports an error. projectors/sql/read_models.sql creates these columns, last in
-- transcript, for versions made from now on; this adds them, in the same order, to the versions
-- made before (a version's tables live in its own schema, convlog.projection_versions names
-- them), so a rebuild's rows and a migrated version's compare equal as text. Nullable, no
-- default: adding them rewrites no table. IF NOT EXISTS: a version made from the new
-- read_models.sql before this ran has them already.

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
            'ALTER TABLE %I.transcript ADD COLUMN IF NOT EXISTS blocks json, '
            'ADD COLUMN IF NOT EXISTS provider text, ADD COLUMN IF NOT EXISTS api text, '
            'ADD COLUMN IF NOT EXISTS is_error boolean',
            version_schema
        );
    END LOOP;
END
$$;
