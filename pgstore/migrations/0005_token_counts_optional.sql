-- 0005_token_counts_optional: the projector stores token counts only in the encodings
-- CONVLOG_TOKEN_ENCODINGS names (default o200k_base); the transcript's count columns of the
-- others are NULL from then on, and a context for a model on one of them counts its messages
-- when it reads them (projectors/tokens/at_read.py). projectors/sql/read_models.sql creates the
-- columns nullable for versions made from now on; this drops NOT NULL in the versions made
-- before (a version's tables live in its own schema, convlog.projection_versions names them).
-- Rows already stored keep their counts. DROP NOT NULL changes the catalog only: no table is
-- rewritten or scanned, and a column already nullable is left as it is.

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
            'ALTER TABLE %I.transcript ALTER COLUMN tokens_o200k DROP NOT NULL, '
            'ALTER COLUMN tokens_cl100k DROP NOT NULL, ALTER COLUMN reasoning_tokens_o200k DROP NOT NULL, '
            'ALTER COLUMN reasoning_tokens_cl100k DROP NOT NULL',
            version_schema
        );
    END LOOP;
END
$$;
