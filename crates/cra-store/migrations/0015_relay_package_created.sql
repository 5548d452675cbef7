-- Relay orient and orchestrate read the packages created in a window (issue 28, item 7) instead
-- of the whole project. Each package gets its created_at as a fixed-width UTC key
-- (`cra_relay::store::created_key`: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`, nine fractional digits),
-- so that text order is time order whatever form the package stated, and an index by project
-- and key. New rows get their key from the application. Rows stored before are keyed here when
-- their created_at has the usual form (date, `T`, a time with seconds below 60, at most nine
-- fractional digits, `Z` or `+00:00`), for which this text is exactly the application's key;
-- any other is left NULL, and the store reads the project's NULL-keyed rows with every windowed
-- listing and checks them in the application, so none is lost.
ALTER TABLE relay_packages ADD COLUMN created_key text COLLATE "C";
UPDATE relay_packages
   SET created_key = substr(c, 1, 10) || 'T' || substr(c, 12, 8) || '.'
                     || rpad(COALESCE(substring(c FROM '^.{19}\.([0-9]{1,9})'), ''), 9, '0') || 'Z'
  FROM (SELECT project_id AS p, package_id AS i, body::jsonb ->> 'created_at' AS c
          FROM relay_packages) AS stated
 WHERE project_id = stated.p AND package_id = stated.i
   AND c ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-5][0-9](\.[0-9]{1,9})?([Zz]|\+00:00)$';
CREATE INDEX relay_packages_created ON relay_packages (project_id, created_key, seq);
CREATE INDEX relay_packages_unkeyed ON relay_packages (project_id, seq) WHERE created_key IS NULL;
