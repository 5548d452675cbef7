-- The HTTP rate limiter shared by every replica on the schema (specs/deployment.md): one token
-- bucket per credential fingerprint, refilled at the database's clock, so N replicas admit one
-- limit between them, not N.
CREATE TABLE http_rate_buckets (
    key    text PRIMARY KEY,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL
);

-- Takes one token from `k`'s bucket (created full), refilled at `per_second` up to `burst` for
-- the time since it was last touched. The clock is read once the row is locked, and a bucket's
-- time never goes back, so requests waiting on one key are refilled in the order they are served.
CREATE FUNCTION http_rate_take(k text, per_second double precision, burst double precision,
                               OUT admitted boolean, OUT tokens double precision)
LANGUAGE plpgsql AS $$
DECLARE
    had   double precision;
    since timestamptz;
    now   timestamptz;
    have  double precision;
BEGIN
    INSERT INTO http_rate_buckets AS b (key, tokens, at) VALUES (k, burst, clock_timestamp())
        ON CONFLICT (key) DO NOTHING;
    SELECT b.tokens, b.at INTO had, since FROM http_rate_buckets AS b WHERE b.key = k FOR UPDATE;
    now := greatest(clock_timestamp(), since);
    have := least(burst, had + per_second * extract(epoch FROM now - since)::double precision);
    admitted := have >= 1;
    tokens := CASE WHEN admitted THEN have - 1 ELSE have END;
    UPDATE http_rate_buckets AS b SET tokens = http_rate_take.tokens, at = now WHERE b.key = k;
END
$$;
