/*
 * slotmark.h: the marker that tells outboxd's first start from a lost
 * slot (deploy/README.md, "Failover").
 *
 * A replication slot lives beside the database, not in it: a failover to
 * a standby without it (PostgreSQL 15 and 16; 17+ without a synced copy),
 * a restore from a backup, or a pg_drop_replication_slot() leaves the
 * database without the slot, and a slot made then starts at the current
 * WAL position, skipping every event committed since the old one's. So
 * when outboxd creates its slot it also writes a row naming it into the
 * table outboxd_slots in the outbox table's schema, which physical
 * replication, backups and restores carry with the rest of the database.
 * A missing slot whose row is there was lost: outboxd exits 1 naming the
 * recovery (outbox.backlog_where) rather than create it again, and
 * `outboxd slot create` replaces it only with --accept-gap.
 * `outboxd slot drop` deletes the row with the slot. On a hot standby
 * nothing can be written: the marker is neither read nor written there.
 *
 * Every function runs on the connection given (a replication connection
 * takes these simple statements too) and logs its own failure.
 */
#ifndef OUTBOXD_SLOTMARK_H
#define OUTBOXD_SLOTMARK_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgrepl.h"

/* The marker table's name, in the outbox table's schema. */
#define OB_SLOTMARK_TABLE "outboxd_slots"
/* The table in ob_pgsql_format() templates: in SQL (%I takes the
 * schema's name), and as a FROM item naming it quoted as m.t (%L takes
 * the schema's name). */
#define OB_SLOTMARK_SQL   "%I." OB_SLOTMARK_TABLE
#define OB_SLOTMARK_FROM  "(SELECT quote_ident(%L) || '." OB_SLOTMARK_TABLE "' AS t) AS m"
/* Its columns, as CREATE TABLE takes them: the slot's name, when outboxd
 * made it, and its recovery point (recpointdb.h). */
#define OB_SLOTMARK_COLUMNS                                                                        \
	"slot_name text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), "              \
	"recovery_xid xid8, recovery_lsn pg_lsn, recovery_at timestamptz, recovery_system text, "  \
	"deletes_counted bigint, deletes_own bigint, deletes_seen_at timestamptz, "                \
	"messages_seen_at timestamptz, recovery_leaves oid[]"

/* The ways out of a lost or invalidated slot, for the messages that
 * refuse one: a new slot after publishing what the loss may have
 * skipped, or a new slot that publishes none of it. */
#define OB_SLOTMARK_RECOVERY                                                                       \
	"publish what the loss may have skipped with outboxd slot create --accept-gap -s "         \
	"\"outbox.backlog_where=<the condition outboxd check prints on its recovery point line, "  \
	"or created_at > '<the time of the loss>'>\" (it publishes the outbox rows selected, "     \
	"then creates the slot), "                                                                 \
	"or start afresh, publishing none of them, with outboxd slot create --accept-gap "         \
	"(deploy/README.md, \"Recovering from a lost or invalidated slot\")"

/* Whether the slot's row exists (*marked); when it does, when it was
 * written into since (text, "" otherwise). OB_PG_RETRY (logged) when the
 * query failed. A missing table is no row. */
ob_pg_status ob_slotmark_read(ob_pgconn *p, const ob_config *cfg, bool *marked, char *since,
			      size_t since_len);
/* Whether the row could be written, without writing anything (`outboxd
 * check`): OB_PG_OK when the table is writable or the role may create
 * it; OB_PG_FATAL with the statements to run; OB_PG_RETRY when the query
 * failed. detail gets one line for the operator. */
ob_pg_status ob_slotmark_check(ob_pgconn *p, const ob_config *cfg, char *detail, size_t detail_len);
/* Make sure the row can be written before a slot is created: create the
 * table when it is missing, and check the INSERT privilege. OB_PG_FATAL
 * (logged, naming the SQL to run) when the role may do neither;
 * OB_PG_RETRY (logged) when a query failed. */
ob_pg_status ob_slotmark_ready(ob_pgconn *p, const ob_config *cfg);
/* Write the slot's row (kept when it is there). False (logged) on
 * failure. */
bool ob_slotmark_write(ob_pgconn *p, const ob_config *cfg) OB_MUST_CHECK;
/* Write the row of a slot that exists (made before outboxd kept markers,
 * or whose row was not written): a failure is warned about once per
 * process and is no error, since the slot is there. */
void ob_slotmark_keep(ob_pgconn *p, const ob_config *cfg);
/* Delete the slot's row (none: nothing to do). False (logged) on failure. */
bool ob_slotmark_clear(ob_pgconn *p, const ob_config *cfg) OB_MUST_CHECK;
/* Log that the slot was lost (its row, written at since, is there), what
 * was done about it (outcome: "stopping", say) and how to recover. */
void ob_slotmark_log_lost(const ob_config *cfg, const char *since, const char *outcome);
/* The statements an operator runs to make the table and grant role what
 * outboxd needs of it; the caller frees. */
char *ob_slotmark_setup_sql(const ob_config *cfg, const char *role);

#endif
