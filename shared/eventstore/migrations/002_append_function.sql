-- One append = one statement = one round trip.
--
-- The append was eight round trips (lock, read heads, insert, upsert heads, tracking, notify,
-- commit), all made while holding the global append lock: on a busy machine a writer descheduled
-- mid-transaction stalled every other writer.  As a function the lock is held for server time only.
--
-- Semantics are those of ``shared/eventstore/port.py``: the transaction-scoped advisory lock
-- serialises appends so positions become visible in increasing order; every expected version
-- (-1 = any) is checked against the stream heads; on a mismatch nothing is written and the error
-- (SQLSTATE TS409) carries the conflicts as JSON {"stream": [expected, actual]} in its detail.
CREATE OR REPLACE FUNCTION tessera_append(
    p_lock BIGINT,
    p_streams TEXT[],
    p_types TEXT[],
    p_data TEXT[],
    p_metadata TEXT[],
    p_expected_streams TEXT[],
    p_expected_versions INT[],
    p_tracking_consumer TEXT,
    p_tracking_position BIGINT,
    p_notify_channel TEXT
) RETURNS TABLE (out_position BIGINT, out_stream TEXT, out_version INT, out_recorded_at TIMESTAMPTZ)
LANGUAGE plpgsql
-- Stream heads are looked up one by one through the primary key.  PL/pgSQL keeps a session's
-- plans, and a plan made while ``streams`` was small (a fresh database) would otherwise scan the
-- whole table on every append for as long as the connection lives: measured, 2,654 scans reading
-- 6.4 million rows over 3,000 appends.  An append names a handful of streams among millions.
SET enable_seqscan = off
AS $$
DECLARE
    conflicts JSONB;
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock);

    SELECT jsonb_object_agg(c.stream, jsonb_build_array(c.expected, c.actual))
    INTO conflicts
    FROM (
        SELECT x.stream, x.expected,
               coalesce((SELECT s.version FROM streams s WHERE s.stream = x.stream), 0) AS actual
        FROM unnest(p_expected_streams, p_expected_versions) AS x(stream, expected)
    ) c
    WHERE c.expected <> -1 AND c.actual <> c.expected;
    IF conflicts IS NOT NULL THEN
        RAISE EXCEPTION 'concurrent append' USING ERRCODE = 'TS409', DETAIL = conflicts::text;
    END IF;

    IF cardinality(p_streams) > 0 THEN
        RETURN QUERY
        WITH input AS (
            SELECT u.s, u.t, u.d, u.m, u.n
            FROM unnest(p_streams, p_types, p_data, p_metadata) WITH ORDINALITY AS u(s, t, d, m, n)
        ),
        numbered AS (
            SELECT i.*,
                   coalesce((SELECT h.version FROM streams h WHERE h.stream = i.s), 0)
                   + row_number() OVER (PARTITION BY i.s ORDER BY i.n) AS v
            FROM input i
        ),
        inserted AS (
            -- Identity values are drawn in the order rows are produced: log order = call order.
            INSERT INTO events (stream, version, type, data, metadata)
            SELECT s, v, t, d::jsonb, m::jsonb FROM numbered ORDER BY n
            RETURNING events.position, events.stream, events.version, events.recorded_at
        ),
        heads AS (
            INSERT INTO streams (stream, version)
            SELECT s, max(v) FROM numbered GROUP BY s
            ON CONFLICT (stream) DO UPDATE SET version = EXCLUDED.version
        )
        SELECT * FROM inserted ORDER BY 1;

        PERFORM pg_notify(p_notify_channel, '');  -- a wake-up call: the relay reads what is new
    END IF;

    IF p_tracking_consumer IS NOT NULL THEN
        INSERT INTO tracking (consumer, position) VALUES (p_tracking_consumer, p_tracking_position)
        ON CONFLICT (consumer) DO UPDATE SET position = EXCLUDED.position, updated_at = now();
    END IF;
END $$;
