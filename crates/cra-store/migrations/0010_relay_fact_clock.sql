-- Relay recorded time (issue 22): the latest recorded instant of each project's facts. Every
-- fact write locks its project's row and stamps max(its clock, this instant), so recorded time
-- never goes backwards in commit order between replicas whose clocks disagree. Seeded from the
-- rows already stored (their recorded_at and superseded_at, fixed-width UTC text, so text order
-- is time order); a project without a row is seeded the same way on its first write.
CREATE TABLE relay_fact_clock (
    project_id  text PRIMARY KEY,
    recorded_at text NOT NULL
);
INSERT INTO relay_fact_clock (project_id, recorded_at)
SELECT project_id,
       max(GREATEST((body::jsonb ->> 'recorded_at') COLLATE "C",
                    COALESCE(body::jsonb ->> 'superseded_at', '') COLLATE "C"))
  FROM relay_facts
 GROUP BY project_id;
