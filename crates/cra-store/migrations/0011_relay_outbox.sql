-- The audit outbox (issue 22 B.14): the TRACE events a Relay write owes its chain, stored in the
-- write's transaction and removed by the transaction that appends them, so no Relay change is
-- ever stored without its events. A crash between the two leaves the row; the next start of any
-- replica appends it (the removal is the claim, so no event is appended twice).
CREATE TABLE relay_outbox (
    key   text PRIMARY KEY,
    body  text NOT NULL
);
