-- Large bodies are compressed with LZ4 instead of PostgreSQL's default pglz. A profile of
-- 64-client resolves (bench/NOTES.md, stop 52) found pglz_compress in 22% of PostgreSQL's CPU:
-- each resolve stores its resolution (about 8.5 kB of JSON), which PostgreSQL compresses before
-- TOASTing it. LZ4 compresses several times faster. Only values written from now on use it;
-- stored values keep their method and read as before. A server built without LZ4 (no
-- `--with-lz4`) keeps pglz: the change is skipped there, not failed.
DO $$
BEGIN
    ALTER TABLE trace_events ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE carp_resolutions ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE carp_executions ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE carp_approvals ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE relay_packages ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE relay_facts ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE relay_outbox ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION
    WHEN feature_not_supported THEN
        RAISE NOTICE 'this PostgreSQL has no LZ4; large bodies stay compressed with pglz';
END
$$;
