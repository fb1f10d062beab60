-- The append-only event log, stream heads, snapshots and consumer tracking.
CREATE TABLE IF NOT EXISTS events (
    position    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream      TEXT        NOT NULL,
    version     INTEGER     NOT NULL CHECK (version > 0),
    type        TEXT        NOT NULL,
    data        JSONB       NOT NULL,
    metadata    JSONB       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT events_stream_version_key UNIQUE (stream, version)
);

-- One row per stream with its last version: the expected-version check reads this, not events.
CREATE TABLE IF NOT EXISTS streams (
    stream  TEXT PRIMARY KEY,
    version INTEGER NOT NULL CHECK (version > 0)
);

CREATE TABLE IF NOT EXISTS snapshots (
    name     TEXT PRIMARY KEY,
    position BIGINT      NOT NULL,
    state    JSONB       NOT NULL,
    taken_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS tracking (
    consumer   TEXT PRIMARY KEY,
    position   BIGINT      NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Events are facts: never updated, never deleted.
CREATE OR REPLACE FUNCTION tessera_events_are_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only (% refused)', TG_OP;
END $$;

DROP TRIGGER IF EXISTS events_immutable ON events;
CREATE TRIGGER events_immutable BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION tessera_events_are_immutable();
