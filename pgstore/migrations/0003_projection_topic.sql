-- 0003_projection_topic: the topic each projection version reads.
--
-- A version's positions are offsets of one topic; on another (a changed CONVLOG_TOPIC, or a
-- topic deleted and created anew) they mean nothing — the projector would stop with "position
-- beyond the log end", or worse, skip or repeat records of a longer topic. The projector records
-- its topic on the version it starts on and refuses to run a version recorded with another
-- (projectors/topics.py). NULL: a version built before this migration; the next projector to
-- start records its CONVLOG_TOPIC — the topic it has been reading, as long as it was not
-- changed in the same deployment.

ALTER TABLE convlog.projection_versions ADD COLUMN topic text;

COMMENT ON COLUMN convlog.projection_versions.topic IS
    'The log topic this version was built from: its positions are offsets of that topic. NULL until a projector starts on it.';
