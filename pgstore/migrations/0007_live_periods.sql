-- 0007_live_periods: which version was live for which part of the log, and with which window.
--
-- A context is served by the live version, with its window policy (0006); as_of rebuilds it
-- later from the log. After `convlog rebuild --switch` to a version with another window, the
-- contexts served before the switch must still be rebuilt with the old version's window: so
-- every time a version becomes live, a row here says from where on each partition it served —
-- the log positions the version it replaced had reached — and keeps the window, even after
-- `convlog drop` removes the version itself. The context as of the event at (partition, offset)
-- was served by the latest version live from at most that offset (projectors/versions.py).
--
-- The versions made live before this file: one row each, in the order they went live, with
-- previous_schema the version live before (the one switched to just before it, if it is still
-- there). Its positions, final since the live projectors followed the switch, are the hand-over;
-- `convlog drop` copies them into live_from first. A version dropped before this file left
-- nothing to go by: the part of the log it served counts as served by the one that went live
-- after it, and the first version known counts as live from offset 0.

CREATE TABLE convlog.live_periods (
    seq               bigserial   PRIMARY KEY,
    projection        text        NOT NULL,
    version           int         NOT NULL,
    became_live_at    timestamptz NOT NULL DEFAULT now(),
    window_max_turns  int         NOT NULL,
    window_keep_turns int         NOT NULL,
    previous_schema   text,
    live_from         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    CHECK (window_keep_turns >= 1 AND window_keep_turns <= window_max_turns)
);

COMMENT ON TABLE convlog.live_periods IS
    'One row each time a version of a projection became live: from where on each partition it served contexts, and with which window policy. Kept when the version is dropped.';
COMMENT ON COLUMN convlog.live_periods.previous_schema IS
    'The version it replaced (NULL: the first live version): while that schema exists, its positions are the hand-over.';
COMMENT ON COLUMN convlog.live_periods.live_from IS
    'Partition -> the first offset this version served live: the replaced version''s positions at the switch, and at its drop (final). Missing: 0.';

INSERT INTO convlog.live_periods
    (projection, version, became_live_at, window_max_turns, window_keep_turns, previous_schema)
SELECT projection, version, coalesce(switched_at, created_at), window_max_turns, window_keep_turns,
       lag(schema_name) OVER (PARTITION BY projection ORDER BY coalesce(switched_at, created_at), version)
FROM convlog.projection_versions
WHERE status IN ('live', 'retired')
ORDER BY projection, coalesce(switched_at, created_at), version;
