-- Package ids are unique within their project (issue 22 B.13; Relay §6: "any string unique
-- within the project MUST be accepted"), so another project may use the same id. Packages,
-- their search chunks and their review records are keyed by (project_id, package_id). Rows
-- written before this are unchanged: their ids were unique across the whole store.
ALTER TABLE relay_chunks DROP CONSTRAINT relay_chunks_package_id_fkey;
ALTER TABLE relay_chunks DROP CONSTRAINT relay_chunks_pkey;
ALTER TABLE relay_packages DROP CONSTRAINT relay_packages_pkey;
ALTER TABLE relay_packages ADD PRIMARY KEY (project_id, package_id);
ALTER TABLE relay_chunks ADD PRIMARY KEY (project_id, package_id, ord);
ALTER TABLE relay_chunks ADD FOREIGN KEY (project_id, package_id)
    REFERENCES relay_packages (project_id, package_id);
CREATE INDEX relay_packages_id ON relay_packages (package_id);
ALTER TABLE relay_reviews ADD COLUMN project_id text;
UPDATE relay_reviews r SET project_id = p.project_id
  FROM relay_packages p WHERE p.package_id = r.package_id;
UPDATE relay_reviews SET project_id = body::jsonb ->> 'project_id' WHERE project_id IS NULL;
ALTER TABLE relay_reviews ALTER COLUMN project_id SET NOT NULL;
DROP INDEX relay_reviews_package;
CREATE INDEX relay_reviews_package ON relay_reviews (project_id, package_id, id);
