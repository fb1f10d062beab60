-- The identity of this event log, drawn once.  The relay puts it on every message it publishes,
-- so a consumer can tell this log's events from another's left on the same topics (a database
-- reset while Kafka keeps its topics): positions restart at 1, and without the identity a
-- follower would take the new log's events for ones it has already folded.
CREATE TABLE IF NOT EXISTS log_identity (
    id         TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO log_identity (id) SELECT gen_random_uuid()::text WHERE NOT EXISTS (SELECT 1 FROM log_identity);
