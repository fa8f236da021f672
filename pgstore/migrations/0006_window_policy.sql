-- 0006_window_policy: each projection version records the window policy it is projected with.
--
-- A version's windows (and every context served from it) depend on CONVLOG_WINDOW_MAX_TURNS
-- and CONVLOG_WINDOW_KEEP_TURNS; taken from the settings of whichever process runs, a changed
-- setting (or default) would move windows mid-stream and no as-of rebuild, replay or verify
-- could reproduce what was served. From now on a version is made with the settings' policy and
-- everything projecting into or rebuilding it uses that one; changing the window is a rebuild.
--
-- The versions made before this file: projectors/migrate.py fills these columns in the same
-- transaction, right after this file, with the policy the deployment ran with (the settings'
-- values where the operator set them, else the old default 8 -> 6), then makes them NOT NULL.

ALTER TABLE convlog.projection_versions
    ADD COLUMN window_max_turns int,
    ADD COLUMN window_keep_turns int,
    ADD CONSTRAINT projection_versions_window_policy
        CHECK (window_keep_turns >= 1 AND window_keep_turns <= window_max_turns);

COMMENT ON COLUMN convlog.projection_versions.window_max_turns IS
    'The window policy this version is projected with: at most this many turns (CONVLOG_WINDOW_MAX_TURNS when it was made).';
COMMENT ON COLUMN convlog.projection_versions.window_keep_turns IS
    'The window policy this version is projected with: dropping to this many turns (CONVLOG_WINDOW_KEEP_TURNS when it was made).';
