/*
 * publication.h: the publication pgoutput streams (deploy/README.md, "Choosing a
 * decoder").
 *
 * pgoutput sends the changes of the tables of the publications named at
 * START_REPLICATION. outboxd's publication holds the outbox table, publishes
 * inserts, and publishes a partition's rows under the partitioned table
 * (publish_via_partition_root), so partitions created or attached later are
 * covered without any change:
 *
 *   CREATE PUBLICATION outboxd FOR TABLE public.outbox
 *     WITH (publish = 'insert', publish_via_partition_root = true);
 *
 * A partitioned outbox table's publication publishes deletes too
 * (publish = 'insert, delete'): they tell a row that an UPDATE moved into
 * another partition from a new event (decoder.h).
 *
 * A publication that leaves rows out (no inserts, another table, a
 * partition's rows under the partition's name, a row filter or a column
 * list) would make outboxd skip events without a word, so it is refused
 * with the statement that fixes it.
 */
#ifndef OUTBOXD_PUBLICATION_H
#define OUTBOXD_PUBLICATION_H

#include "outboxd/config.h"
#include "outboxd/pgrepl.h"

/* The oldest server pgoutput is supported on: logical messages in
 * pgoutput came with PostgreSQL 14. */
#define OB_PGOUTPUT_MIN_SERVER 140000

/* Check postgres.publication on an open connection (the outbox table
 * exists). When it is missing and create is set, create it; without
 * create, say whether outboxd could. A missing publication is never
 * created for a slot that exists already (slot_exists): pgoutput reads the
 * publications of each change's time, so the slot's earlier changes would
 * be skipped, nor on a hot standby (OB_PG_FATAL naming the statement to
 * run on the primary). Several processes may create it at once: a loser
 * of that race checks the winner's. detail gets one line for the operator: what was found and,
 * on OB_PG_FATAL, the statements that fix it. OB_PG_RETRY when a query
 * failed (nothing is known). */
ob_pg_status ob_publication_prepare(ob_pgconn *pg, const ob_config *cfg, bool slot_exists,
				    bool create, char *detail, size_t detail_len) OB_MUST_CHECK;

/* What the publication says of the outbox table now, as text that
 * changes whenever that does (it publishes inserts, via the partition
 * root, includes the table, with which row filter and columns); "missing"
 * when there is no publication. A table added to or dropped from it
 * changes nothing here. False (err set) when the query failed. */
bool ob_publication_stamp(ob_pgconn *pg, const ob_config *cfg, char *stamp, size_t stamp_len,
			  char *err, size_t errlen) OB_MUST_CHECK;

/* The CREATE PUBLICATION statement for cfg (README, sql/publication.sql),
 * for a partitioned outbox table or not; the caller frees. */
char *ob_publication_create_sql(const ob_config *cfg, bool partitioned);

/* The publish option outboxd's publication has for a partitioned outbox
 * table or not. */
const char *ob_publication_actions(bool partitioned);

#endif
