-- What the stored-bytes quota counts: the length of each chain's events as sealed (their wire
-- JSON), summed in the head row every append updates. Chains stored before this migration count
-- from 0: their earlier events add nothing (`specs/quotas.md`).
ALTER TABLE trace_heads ADD COLUMN bytes bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0);
