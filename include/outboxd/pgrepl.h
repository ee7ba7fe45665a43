/*
 * pgrepl.h: replication commands and the logical replication stream, in
 * the Postgres layer (pgsql.h).
 *
 * One connection with replication=database serves both the few SQL queries
 * outboxd needs (slot state, wal_level, the outbox table: pgsql.h) and the
 * replication stream (START_REPLICATION with wal2json or pgoutput). Errors
 * are logged here, once, and classified so the caller knows whether to
 * retry, wait as a standby, or stop (deploy/README.md, "Failure modes"). No libpq or
 * librdkafka type appears here.
 */
#ifndef OUTBOXD_PGREPL_H
#define OUTBOXD_PGREPL_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/leafset.h"
#include "outboxd/lsn.h"
#include "outboxd/pgsql.h"

/* The server's WAL position as SQL, on a primary and on a hot standby
 * alike (where pg_current_wal_*() fail with "recovery is in progress"):
 * the standby's is the position replayed, up to which every commit is
 * visible to its snapshots. OB_SQL_WAL_LSN is written WAL,
 * OB_SQL_WAL_FLUSH_LSN flushed WAL (on a standby both are the replayed
 * position). */
#define OB_SQL_WAL_LSN                                                                             \
	"(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() "  \
	"END)"
#define OB_SQL_WAL_FLUSH_LSN                                                                       \
	"(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE "                       \
	"pg_current_wal_flush_lsn() END)"
/* The first PostgreSQL that decodes on a hot standby. */
#define OB_STANDBY_DECODING_MIN_SERVER 160000
/* The first PostgreSQL with failover slots (FAILOVER, synced to standbys). */
#define OB_FAILOVER_MIN_SERVER         170000

/* Where the wal2json plugin comes from, for hints. */
#define OB_WAL2JSON_PACKAGE_HINT "Debian and Ubuntu: postgresql-15-wal2json"

/* Who the server is (IDENTIFY_SYSTEM). */
typedef struct ob_pg_system {
	char system_id[32]; /* the cluster's system identifier, as text */
	int timeline;
} ob_pg_system;

/* pg_replication_slots' view of one slot. */
typedef struct ob_slot_info {
	bool exists;
	char plugin[64]; /* empty: a physical slot, or one still being created */
	char database[64];
	int active_pid; /* 0 when inactive */
	ob_lsn confirmed_flush;
	ob_lsn restart_lsn;
	char wal_status[16];
	int64_t retained_bytes; /* current WAL LSN minus restart_lsn */
	bool failover;          /* PostgreSQL 17+: synced to standbys (false before 17) */
	bool synced;            /* PostgreSQL 17+: a standby's copy synced from the primary */
	bool temporary;         /* dropped at the session's end (a synced copy: at promotion) */
} ob_slot_info;

/* One message of the replication stream. data borrows libpq's buffer and
 * is valid until the next ob_pgrepl_read(). */
typedef struct ob_pgrepl_msg {
	bool keepalive; /* else XLogData */
	ob_lsn data_start;
	ob_lsn wal_end;
	bool reply_requested;
	const char *data;
	size_t len;
	/* wal2json's record is not text of the database's encoding (recode.h):
	 * data is as it came. */
	bool unconvertible;
} ob_pgrepl_msg;

typedef enum ob_read_result {
	OB_READ_MSG,
	OB_READ_NONE, /* nothing buffered: wait on the socket */
	OB_READ_ERROR,
} ob_read_result;

/* The libpq version the binary runs with, as PQlibVersion() gives it
 * (150018 for 15.18). */
int ob_pgrepl_library_version(void);
/* Connect with replication=database (ob_pgsql_connect()). OB_PG_RETRY
 * (logged) on failure. */
ob_pg_status ob_pgrepl_connect(const ob_config *cfg, ob_pgconn **out);
/* Close the connection. With graceful, end the stream first (CopyDone) and
 * wait briefly for the server, so the last status update is processed. */
void ob_pgrepl_close(ob_pgconn *p, bool graceful);
/* Whether the server is a hot standby (pg_is_in_recovery()) into
 * *standby; false (logged) when the query failed. */
bool ob_pgrepl_in_recovery(ob_pgconn *p, bool *standby) OB_MUST_CHECK;

bool ob_pgrepl_slot_info(ob_pgconn *p, const char *slot, ob_slot_info *info) OB_MUST_CHECK;
/* CREATE_REPLICATION_SLOT for plugin, with FAILOVER when failover is set
 * (PostgreSQL 17+ only; the caller decides). On a hot standby it says in
 * the log that creation waits for the primary's next running-transactions
 * record. OB_PG_FATAL names the fix; OB_PG_STANDBY (logged) when another
 * process created the slot meanwhile. */
ob_pg_status ob_pgrepl_create_slot(ob_pgconn *p, const char *slot, ob_plugin plugin, bool failover);
/* ALTER_REPLICATION_SLOT slot (FAILOVER true) (PostgreSQL 17+, the slot
 * inactive). OB_PG_STANDBY when another process took the slot meanwhile;
 * OB_PG_RETRY (logged) on any other failure. */
ob_pg_status ob_pgrepl_set_failover(ob_pgconn *p, const char *slot);
/* CREATE_REPLICATION_SLOT ... TEMPORARY ... EXPORT_SNAPSHOT: a temporary
 * slot that lives as long as this connection, its consistent point in
 * *consistent and the exported snapshot's name in snapshot. The snapshot
 * stays importable until the next command on this connection. */
ob_pg_status ob_pgrepl_create_exported_slot(ob_pgconn *p, const char *slot, ob_plugin plugin,
					    ob_lsn *consistent, char *snapshot,
					    size_t snapshot_len);
/* Copy the logical slot from (a temporary slot another session holds)
 * into the new permanent slot to, at the same confirmed position (run it
 * on a plain connection: an error on a replication connection drops that
 * session's own temporary slots). OB_PG_STANDBY (logged) when to exists
 * already: another process created it meanwhile; OB_PG_RETRY (logged) on
 * any other failure. */
ob_pg_status ob_pgrepl_copy_slot(ob_pgconn *p, const char *from, const char *to);
bool ob_pgrepl_drop_slot(ob_pgconn *p, const char *slot) OB_MUST_CHECK;

/* Whether the slot should have FAILOVER on this server: postgres.
 * slot_failover is set, the server is PostgreSQL 17+ and not a hot
 * standby (whose own slots cannot be failover slots). Below 17 the
 * setting is said, once, to do nothing. */
bool ob_pgrepl_failover_wanted(ob_pgconn *p, const ob_config *cfg, bool standby);
/* The existing slot info should get FAILOVER (ob_pgrepl_failover_wanted())
 * and has not got it, nor is it a standby's synced copy. */
bool ob_pgrepl_lacks_failover(ob_pgconn *p, const ob_config *cfg, const ob_slot_info *info,
			      bool standby);

/* IDENTIFY_SYSTEM: the server's system identifier and timeline. False
 * (logged) on error. */
bool ob_pgrepl_identify(ob_pgconn *p, ob_pg_system *sys) OB_MUST_CHECK;

/* Whether the slot info (read on p) exists in another database than the
 * one p is connected to: it is not outboxd's slot for this database. */
bool ob_pgrepl_slot_elsewhere(ob_pgconn *p, const ob_slot_info *info);

/* True when another process is creating the logical slot this moment
 * (it is listed, with its database, before its plugin is set). */
bool ob_pgrepl_slot_being_made(const ob_slot_info *info);

/* The slot's plugin for messages ("none (a physical slot)" when empty). */
const char *ob_pgrepl_slot_plugin(const ob_slot_info *info);
/* What to do about it, after "... belongs to database A, not B: ". A new
 * name starts a new slot at the current position: outboxd's own slot of
 * this database, if it had one, was lost. */
#define OB_SLOT_ELSEWHERE_FIX                                                                      \
	"connect to %s, or set postgres.slot to a name of this database's own (a new slot "        \
	"starts at the current WAL position: if outboxd had a slot of this name in this "          \
	"database, it was lost, and `slot create` says how to recover)"

/* START_REPLICATION from start (0: the slot's confirmed position) with the
 * options outboxd needs from postgres.plugin (deploy/README.md,
 * "Choosing a decoder"). With wal2json, tables are the ones whose inserts it sends
 * (add-tables: the outbox table, or its leaf partitions); pgoutput takes
 * them from its publication and ignores tables. */
ob_pg_status ob_pgrepl_start(ob_pgconn *p, const ob_config *cfg, ob_lsn start,
			     const ob_leafset *tables);

int ob_pgrepl_socket(const ob_pgconn *p);
/* The next message of the stream, without waiting: OB_READ_NONE when none
 * is buffered, OB_READ_ERROR (logged) when the stream ended or a warning
 * said a publication was passed over. A warning that the server waits for
 * a standby (pgwarning.h) does not end it; the wait ends with the first
 * message that shows the stream moving again. */
ob_read_result ob_pgrepl_read(ob_pgconn *p, ob_pgrepl_msg *msg);
/* Send a standby status update; only flush moves the slot. */
bool ob_pgrepl_send_status(ob_pgconn *p, ob_lsn write, ob_lsn flush,
			   bool reply_requested) OB_MUST_CHECK;

#endif
