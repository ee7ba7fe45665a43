-- publication.sql — the publication outboxd streams with postgres.plugin =
-- pgoutput (deploy/README.md, "Choosing a decoder").
--
-- Run as the owner of the outbox table (or a superuser), in the
-- application's database, after sql/outbox.sql and BEFORE the slot is
-- created: pgoutput reads the publication as of each change it decodes, so
-- a slot older than its publication fails with "publication ... does not
-- exist" on the changes in between.
--
--     psql -v ON_ERROR_STOP=1 -d app -f sql/publication.sql
--
-- outboxd creates this publication itself when it is missing and its role
-- may (it owns the table and may CREATE in the database); with the
-- least-privilege role of sql/role.sql it may not, and it then exits 1
-- printing this statement.
--
--   publish = 'insert'                 outboxd publishes inserts only; the
--                                      walsender then skips updates and
--                                      deletes of the table.
--   publish_via_partition_root = true  a partitioned outbox table's rows are
--                                      sent under the partitioned table,
--                                      with its columns, whatever partition
--                                      they went to, including partitions
--                                      created or attached later.
--
-- postgres.publication names it (default outboxd). No row filter and no
-- column list: outboxd refuses a publication that would leave events out.

CREATE PUBLICATION outboxd FOR TABLE public.outbox
    WITH (publish = 'insert', publish_via_partition_root = true);
