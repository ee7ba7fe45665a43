/*
 * inboxdb.h: the inbox's database side (sql/README.md, "The inbox tables"): rows and the
 * consumed positions written in one transaction, so a record is in the
 * inbox table exactly when its position is stored.
 *
 * One plain libpq connection (not a replication connection) to
 * inbox.conninfo. The tables are those of sql/inbox.sql: the inbox table
 * (inbox.table) and outboxd_inbox_offsets in the same schema. Every
 * failure is logged once here; callers act on the status.
 */
#ifndef OUTBOXD_INBOXDB_H
#define OUTBOXD_INBOXDB_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/inboxrow.h"

typedef struct ob_inboxdb ob_inboxdb;

typedef enum ob_inboxdb_status {
	OB_INBOXDB_OK,
	OB_INBOXDB_RETRY,    /* connection lost or a transient refusal: reconnect with
			      * backoff; a failed commit's outcome is unknown */
	OB_INBOXDB_REJECTED, /* the server refused the data (SQLSTATE class 22 or 23,
			      * 54000): some row of the transaction cannot be stored */
	OB_INBOXDB_FATAL,    /* a table is missing or unlike sql/inbox.sql, or has a NOT
			      * NULL column the inbox does not write: exit 1 */
} ob_inboxdb_status;

/* Room for a Kafka cluster id (a base64 UUID of 22 characters). */
#define OB_CLUSTER_ID_LEN 128
/* Room for a Kafka topic id (a base64 UUID of 22 characters). */
#define OB_TOPIC_ID_LEN   64

/* Where consumption of one partition resumes: the offset of the first
 * record not yet stored, the Kafka cluster the position belongs to, and
 * the id of the topic it belongs to (a topic deleted and created again
 * has a new one). topic is borrowed. */
typedef struct ob_inbox_position {
	const char *topic;
	int32_t partition;
	int64_t next_offset;                /* -1: nothing stored for this partition */
	char cluster_id[OB_CLUSTER_ID_LEN]; /* "": unknown (stored before outboxd kept it) */
	char topic_id[OB_TOPIC_ID_LEN];     /* "": unknown (a broker or librdkafka without ids) */
} ob_inbox_position;

/* Connect to inbox.conninfo (ob_pgconnect_open(): the publisher's
 * settings, timeouts pinned) and check that both tables exist and that
 * the role may read and write them as the inbox does (FATAL naming the
 * GRANT otherwise); with
 * migrate, add the columns outboxd_inbox_offsets gained since it was
 * first made (cluster_id, topic_id) when missing (FATAL naming the ALTER
 * TABLE when the role may not), without it (outboxd check) a missing
 * column is FATAL naming the statement. On OB_INBOXDB_OK *out is
 * the caller's to close; otherwise *out is NULL and detail (may be NULL)
 * holds the one-line reason, which is also logged. */
ob_inboxdb_status ob_inboxdb_connect(const ob_config *cfg, bool migrate, ob_inboxdb **out,
				     char *detail, size_t detail_len) OB_MUST_CHECK;
void ob_inboxdb_close(ob_inboxdb *db);
/* The consumer group: inbox.group, or when it is empty
 * "outboxd-inbox.<database>.<schema>.<table>", the database's name as the
 * server gives it (current_database()): every instance of one inbox
 * shares it, and inboxes of other databases or tables have their own
 * (sql/README.md, "The inbox tables"). A derived group with no position
 * stored takes over those stored under "outboxd-inbox", the default of
 * earlier versions, when ob_inboxdb_connect() migrates. */
const char *ob_inboxdb_group(const ob_inboxdb *db);
/* The group, where its name comes from, and whether it takes over (or
 * took over, with migrate) the positions of the old default group: one
 * line for `outboxd check`, into buf. */
void ob_inboxdb_describe_group(const ob_inboxdb *db, const ob_config *cfg, char *buf, size_t size);
/* Keep tick running (about every second) while a statement waits for the
 * server; a tick that returns false cancels it. */
void ob_inboxdb_set_tick(ob_inboxdb *db, bool (*tick)(void *ctx), void *ctx);

/* Fill next_offset, cluster_id and topic_id of each of the n positions
 * from outboxd_inbox_offsets (-1, "" and "" where no row is stored for the
 * group). */
ob_inboxdb_status ob_inboxdb_stored(ob_inboxdb *db, ob_inbox_position *pos, size_t n) OB_MUST_CHECK;

/* Store one position whatever was stored before (in a transaction of its
 * own): where a partition restarts after a position mismatch. */
ob_inboxdb_status ob_inboxdb_reset(ob_inboxdb *db, const ob_inbox_position *pos) OB_MUST_CHECK;

/* In one transaction: insert the rows (ON CONFLICT (id) DO NOTHING) and
 * store the positions with their cluster and topic ids (a stored position
 * only ever moves forward here; an unknown topic id is stored as NULL).
 * On OB_INBOXDB_OK *inserted is the number of rows that were new. On
 * OB_INBOXDB_REJECTED error holds the server's message. */
ob_inboxdb_status ob_inboxdb_commit(ob_inboxdb *db, const ob_inbox_row *rows, size_t n_rows,
				    const ob_inbox_position *pos, size_t n_pos, uint64_t *inserted,
				    char *error, size_t error_len) OB_MUST_CHECK;

#endif
