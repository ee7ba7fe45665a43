/*
 * pgrepl.c: libpq replication connection, slot handling, the CopyBoth
 * stream and standby status updates (modelled on pg_recvlogical).
 */
#include "outboxd/pgrepl.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/pglayer.h"
#include "outboxd/pgwarning.h"
#include "outboxd/sqlstate.h"

/* Microseconds between the Unix epoch and Postgres' epoch (2000-01-01). */
#define PG_EPOCH_OFFSET_US INT64_C(946684800000000)
/* How long a graceful close waits for the server to end the stream. */
#define CLOSE_WAIT_MS      5000

/* True when the error noted last is one a routine restart or failover of
 * the server gives (an administrator's shutdown or a lost connection,
 * SQLSTATE 57P01-57P03 and class 08, or none at all): the daemon
 * reconnects, and it is no operator's error. */
static bool
routine_end(const ob_pgconn *p)
{
	return p->err_state[0] == '\0' || ob_sqlstate_server_gone(p->err_state);
}

static bool
state_is(const PGresult *res, const char *sqlstate)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state != NULL && strcmp(state, sqlstate) == 0;
}

/* Process-wide: a standby wait outlasts the connection it began on. */
static ob_standby_wait standby_wait;

/* Notices of a replication connection while streaming (pgwarning.h).
 * Before PostgreSQL 18, pgoutput fails with "publication ... does not
 * exist" (SQLSTATE 42704) when the publication does not exist at the
 * position it decodes; from 18 on it warns instead ("skipped loading
 * publication", SQLSTATE 55000) and decodes on without it, passing the
 * rows of that stretch over, after which the slot would be confirmed past
 * them. Such a warning is kept, and ob_pgrepl_read() turns it into that
 * error before it returns anything that came after it. A warning that
 * logical replication waits for a standby (17+, the same SQLSTATE) only
 * begins a standby wait, logged by pgwarning.c at most once a minute;
 * every other notice goes to the receiver libpq had (which prints it). */
static void
on_notice(void *arg, const PGresult *res)
{
	ob_pgconn *p = arg;
	ob_pgwarning w = {
	    .severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED),
	    .sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE),
	    .source_file = PQresultErrorField(res, PG_DIAG_SOURCE_FILE),
	    .message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY),
	};
	ob_pgwarning_kind kind = p->streaming ? ob_pgwarning_classify(&w) : OB_PGWARNING_OTHER;

	if (kind == OB_PGWARNING_STANDBY_WAIT) {
		ob_pgwarning_standby_wait(&standby_wait, w.message, ob_mono_ms());
		return;
	}
	if (kind == OB_PGWARNING_ENDS_STREAM && !p->pub_skipped) {
		p->pub_skipped = true;
		snprintf(p->pub_skipped_msg, sizeof(p->pub_skipped_msg), "%s",
			 w.message ? w.message : "a publication was skipped");
	}
	if (p->prev_notice != NULL)
		p->prev_notice(NULL, res);
}

int
ob_pgrepl_library_version(void)
{
	return PQlibVersion();
}

ob_pg_status
ob_pgrepl_connect(const ob_config *cfg, ob_pgconn **out)
{
	ob_pg_status st = ob_pgsql_connect(cfg, OB_PGCONN_REPLICATION, out);

	if (st == OB_PG_OK)
		(*out)->prev_notice = PQsetNoticeReceiver((*out)->conn, on_notice, *out);
	return st;
}

/* Wait up to CLOSE_WAIT_MS for the server to finish the COPY. */
static void
end_copy(ob_pgconn *p)
{
	int64_t deadline = ob_mono_ms() + CLOSE_WAIT_MS;
	PGresult *res;

	if (PQputCopyEnd(p->conn, NULL) <= 0 || PQflush(p->conn) != 0)
		return;
	for (;;) {
		char *buf = NULL;
		int n = PQgetCopyData(p->conn, &buf, 1);

		if (buf != NULL)
			PQfreemem(buf);
		if (n == -1 || n == -2)
			break;
		if (n == 0) {
			struct pollfd pfd = {PQsocket(p->conn), POLLIN, 0};
			int64_t left = deadline - ob_mono_ms();

			if (left <= 0 || poll(&pfd, 1, (int)left) <= 0 || !PQconsumeInput(p->conn))
				return;
		}
	}
	while ((res = PQgetResult(p->conn)) != NULL)
		PQclear(res);
}

void
ob_pgrepl_close(ob_pgconn *p, bool graceful)
{
	if (p == NULL)
		return;
	if (graceful && p->streaming && PQstatus(p->conn) == CONNECTION_OK)
		end_copy(p);
	ob_pgsql_close(p);
}

static void
copy_field(char *dst, size_t dstlen, const PGresult *res, int col)
{
	snprintf(dst, dstlen, "%s", PQgetisnull(res, 0, col) ? "" : PQgetvalue(res, 0, col));
}

bool
ob_pgrepl_in_recovery(ob_pgconn *p, bool *standby)
{
	char *value = NULL;
	bool ok = ob_pgsql_query_value(p, "SELECT pg_is_in_recovery()", &value);

	*standby = ok && value != NULL && strcmp(value, "t") == 0;
	free(value);
	return ok;
}

bool
ob_pgrepl_slot_info(ob_pgconn *p, const char *slot, ob_slot_info *info)
{
	char *lit = ob_pgsql_quote_literal(p, slot);
	bool v17 = ob_pgsql_server_version(p) >= OB_FAILOVER_MIN_SERVER;
	/* 17+ names every invalidation (18's idle timeout keeps wal_status
	 * as it was): an invalidated slot is lost whatever the cause. */
	char *sql = ob_xasprintf(
	    "SELECT plugin, database, coalesce(active_pid, 0), confirmed_flush_lsn, "
	    "restart_lsn, %s, coalesce(" OB_SQL_WAL_LSN " - restart_lsn, 0)::bigint, "
	    "temporary, %s "
	    "FROM pg_replication_slots WHERE slot_name = %s",
	    v17 ? "CASE WHEN invalidation_reason IS NULL THEN wal_status ELSE 'lost' END"
		: "wal_status",
	    v17 ? "failover, synced" : "false, false", lit);
	PGresult *res = ob_pgsql_exec(p, sql);
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	char buf[1024];

	memset(info, 0, sizeof(*info));
	if (!ok) {
		ob_error("could not read replication slot %s: %s", slot,
			 ob_pgres_error(res, buf, sizeof(buf)));
	} else if (PQntuples(res) == 1) {
		info->exists = true;
		copy_field(info->plugin, sizeof(info->plugin), res, 0);
		copy_field(info->database, sizeof(info->database), res, 1);
		info->active_pid = atoi(PQgetvalue(res, 0, 2));
		if (!PQgetisnull(res, 0, 3))
			ok = ob_lsn_parse(PQgetvalue(res, 0, 3), &info->confirmed_flush);
		if (ok && !PQgetisnull(res, 0, 4))
			ok = ob_lsn_parse(PQgetvalue(res, 0, 4), &info->restart_lsn);
		copy_field(info->wal_status, sizeof(info->wal_status), res, 5);
		info->retained_bytes = atoll(PQgetvalue(res, 0, 6));
		info->temporary = ob_pgres_true(res, 0, 7);
		info->failover = ob_pgres_true(res, 0, 8);
		info->synced = ob_pgres_true(res, 0, 9);
		if (!ok)
			ob_error("could not parse the LSNs of replication slot %s", slot);
	}
	PQclear(res);
	free(sql);
	free(lit);
	return ok;
}

/* For a server error no retry gets past, the fix to log with it; NULL
 * for errors worth retrying. Classified by SQLSTATE, which does not change
 * with the server's lc_messages. */
static const char *
fatal_hint(const PGresult *res)
{
	if (state_is(res, OB_SQLSTATE_UNDEFINED_FILE)) /* undefined_file: the plugin's library */
		return "install the wal2json output plugin on the server (" OB_WAL2JSON_PACKAGE_HINT
		       ")";
	if (state_is(res,
		     OB_SQLSTATE_OBJECT_NOT_IN_PREREQUISITE)) /* object_not_in_prerequisite_state */
		return "check wal_level = logical (then restart Postgres) and that the slot "
		       "is not invalidated (wal_status lost: drop and recreate it, and raise "
		       "max_slot_wal_keep_size)";
	if (state_is(res, OB_SQLSTATE_INSUFFICIENT_PRIVILEGE)) /* insufficient_privilege */
		return "grant the role REPLICATION (see sql/role.sql)";
	if (state_is(res, OB_SQLSTATE_CONFIGURATION_LIMIT)) /* configuration_limit_exceeded */
		return "raise max_replication_slots or drop an unused slot";
	return NULL;
}

/* CREATE_REPLICATION_SLOT, permanent with no snapshot (with FAILOVER
 * when failover is set), or temporary exporting its snapshot (then
 * *consistent and snapshot receive the slot's consistent point and the
 * snapshot's name). */
static ob_pg_status
create_slot(ob_pgconn *p, const char *slot, ob_plugin plugin, bool failover, bool exported,
	    ob_lsn *consistent, char *snapshot, size_t snapshot_len)
{
	/* config.c allows only [a-z0-9_] in slot names: no quoting needed. */
	char *sql = ob_xasprintf("CREATE_REPLICATION_SLOT \"%s\" %sLOGICAL %s %s", slot,
				 exported ? "TEMPORARY " : "", ob_plugin_name(plugin),
				 exported   ? "EXPORT_SNAPSHOT"
				 : failover ? "(SNAPSHOT 'nothing', FAILOVER true)"
					    : "(SNAPSHOT 'nothing')");
	PGresult *res;
	ob_pg_status st = OB_PG_OK;
	bool standby = false;

	if (ob_pgrepl_in_recovery(p, &standby) && standby)
		ob_info("creating replication slot %s on a hot standby: this waits for the "
			"primary's next running-transactions record (up to about 15 s; SELECT "
			"pg_log_standby_snapshot() on the primary writes one at once)",
			slot);
	res = ob_pgsql_exec(p, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		const char *msg = ob_pgsql_keep_error(p, res);
		const char *hint = fatal_hint(res);

		if (state_is(res, OB_SQLSTATE_DUPLICATE_OBJECT)) {
			ob_info("could not create replication slot %s: %s (another process "
				"created it meanwhile)",
				slot, msg);
			st = OB_PG_STANDBY;
		} else if (hint != NULL) {
			ob_error("could not create replication slot %s: %s; %s", slot, msg, hint);
			st = OB_PG_FATAL;
		} else {
			ob_error("could not create replication slot %s: %s", slot, msg);
			st = OB_PG_RETRY;
		}
	} else if (exported) {
		/* The columns: slot_name, consistent_point, snapshot_name, output_plugin. */
		if (PQntuples(res) != 1 || PQnfields(res) < 3 || PQgetisnull(res, 0, 2) ||
		    !ob_lsn_parse(PQgetvalue(res, 0, 1), consistent)) {
			ob_error("could not create replication slot %s: unexpected answer", slot);
			st = OB_PG_RETRY;
		} else {
			snprintf(snapshot, snapshot_len, "%s", PQgetvalue(res, 0, 2));
		}
	} else {
		ob_info("created replication slot %s with plugin %s%s", slot,
			ob_plugin_name(plugin), failover ? " and FAILOVER" : "");
	}
	PQclear(res);
	free(sql);
	return st;
}

ob_pg_status
ob_pgrepl_create_slot(ob_pgconn *p, const char *slot, ob_plugin plugin, bool failover)
{
	return create_slot(p, slot, plugin, failover, false, NULL, NULL, 0);
}

ob_pg_status
ob_pgrepl_create_exported_slot(ob_pgconn *p, const char *slot, ob_plugin plugin, ob_lsn *consistent,
			       char *snapshot, size_t snapshot_len)
{
	return create_slot(p, slot, plugin, false, true, consistent, snapshot, snapshot_len);
}

ob_pg_status
ob_pgrepl_set_failover(ob_pgconn *p, const char *slot)
{
	/* config.c allows only [a-z0-9_] in slot names: no quoting needed. */
	char *sql = ob_xasprintf("ALTER_REPLICATION_SLOT \"%s\" (FAILOVER true)", slot);
	PGresult *res = ob_pgsql_exec(p, sql);
	ob_pg_status st = OB_PG_OK;

	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		const char *msg = ob_pgsql_keep_error(p, res);

		if (state_is(res, OB_SQLSTATE_OBJECT_IN_USE)) { /* another process took it */
			st = OB_PG_STANDBY;
			ob_debug("slot busy: %s", msg);
		} else {
			ob_error("could not turn on FAILOVER for replication slot %s: %s", slot,
				 msg);
			st = OB_PG_RETRY;
		}
	} else {
		ob_info("replication slot %s has FAILOVER now (postgres.slot_failover)", slot);
	}
	PQclear(res);
	free(sql);
	return st;
}

ob_pg_status
ob_pgrepl_copy_slot(ob_pgconn *p, const char *from, const char *to)
{
	/* config.c allows only [a-z0-9_] in slot names: no quoting needed. */
	char *sql =
	    ob_xasprintf("SELECT pg_copy_logical_replication_slot('%s', '%s', false)", from, to);
	PGresult *res = ob_pgsql_exec(p, sql);
	ob_pg_status st = OB_PG_OK;

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		const char *msg = ob_pgsql_keep_error(p, res);
		const char *hint = fatal_hint(res);

		if (state_is(res, OB_SQLSTATE_DUPLICATE_OBJECT)) { /* duplicate_object */
			ob_warn("could not create replication slot %s: %s (another process created "
				"it meanwhile)",
				to, msg);
			st = OB_PG_STANDBY;
		} else {
			ob_error("could not copy replication slot %s into %s: %s%s%s", from, to,
				 msg, hint ? "; " : "", hint ? hint : "");
			st = OB_PG_RETRY;
		}
	}
	PQclear(res);
	free(sql);
	return st;
}

bool
ob_pgrepl_drop_slot(ob_pgconn *p, const char *slot)
{
	char *sql = ob_xasprintf("DROP_REPLICATION_SLOT \"%s\"", slot);
	PGresult *res = ob_pgsql_exec(p, sql);
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	char buf[1024];

	if (!ok)
		ob_error("could not drop replication slot %s: %s", slot,
			 ob_pgres_error(res, buf, sizeof(buf)));
	PQclear(res);
	free(sql);
	return ok;
}

bool
ob_pgrepl_failover_wanted(ob_pgconn *p, const ob_config *cfg, bool standby)
{
	static bool said;
	int v = ob_pgsql_server_version(p);

	if (!cfg->pg.slot_failover || standby)
		return false;
	if (v >= OB_FAILOVER_MIN_SERVER)
		return true;
	if (!said)
		ob_info("PostgreSQL %d has no failover slots (they came with 17): "
			"postgres.slot_failover does nothing here, and a promoted standby has no "
			"copy of slot %s unless a failover manager keeps one (deploy/README.md, "
			"\"Failover\")",
			v / 10000, cfg->pg.slot);
	said = true;
	return false;
}

bool
ob_pgrepl_lacks_failover(ob_pgconn *p, const ob_config *cfg, const ob_slot_info *info, bool standby)
{
	return !info->failover && !info->synced && ob_pgrepl_failover_wanted(p, cfg, standby);
}

/* The options of START_REPLICATION for wal2json: format 2 with what the
 * parser reads, only inserts of the tables named (the outbox table, or its
 * leaf partitions) and messages with the outbox prefix; with a partitioned
 * table, deletes too, which tell a row an UPDATE moved into another
 * partition from a new one (decoder.h). */
static char *
wal2json_options(ob_pgconn *p, const ob_config *cfg, const ob_leafset *tables)
{
	char *list = ob_leafset_add_tables(tables);
	char prefix_opt[512] = "";
	char *out;

	if (cfg->outbox.message_prefix[0] != '\0') {
		char *lit = ob_pgsql_quote_literal(p, cfg->outbox.message_prefix);

		snprintf(prefix_opt, sizeof(prefix_opt), ", \"add-msg-prefixes\" %s", lit);
		free(lit);
	}
	out = ob_xasprintf("\"format-version\" '2', \"include-xids\" '1', "
			   "\"include-timestamp\" '1', \"include-lsn\" '1', "
			   "\"include-types\" '1', \"include-typmod\" '0', "
			   "\"include-transaction\" '1', \"add-tables\" '%s', "
			   "\"actions\" '%s'%s",
			   list, tables->partitioned ? "insert,delete" : "insert", prefix_opt);
	free(list);
	return out;
}

/* The options of START_REPLICATION for pgoutput (pgoutput.h): protocol 1
 * in text format, the publication, and logical messages (all of them:
 * pgoutput has no prefix filter). */
static char *
pgoutput_options(const ob_config *cfg)
{
	/* config.c allows only [a-z0-9_] in publication names. */
	return ob_xasprintf("proto_version '1', publication_names '%s', messages 'true'",
			    cfg->pg.publication);
}

/* wal2json writes in the server's encoding: set up its conversion to
 * UTF-8 (recode.h). FATAL (logged) for an encoding outboxd cannot
 * convert. */
static ob_pg_status
prepare_recode(ob_pgconn *p, const ob_config *cfg)
{
	const char *enc = PQparameterStatus(p->conn, "server_encoding");

	ob_recode_close(&p->recode);
	if (cfg->pg.plugin != OB_PLUGIN_WAL2JSON || enc == NULL ||
	    ob_recode_need_of(enc) == OB_RECODE_NONE || ob_recode_open(&p->recode, enc))
		return OB_PG_OK;
	ob_error("could not convert the database's encoding %s to UTF-8 (wal2json writes in it, "
		 "and outboxd publishes UTF-8): use postgres.plugin = pgoutput, which PostgreSQL "
		 "converts, or a database in UTF8",
		 enc);
	return OB_PG_FATAL;
}

ob_pg_status
ob_pgrepl_start(ob_pgconn *p, const ob_config *cfg, ob_lsn start, const ob_leafset *tables)
{
	char *options, *sql;
	PGresult *res;
	ob_pg_status st = prepare_recode(p, cfg);
	ob_slot_info confirmed = {0};

	if (st != OB_PG_OK)
		return st;
	options = cfg->pg.plugin == OB_PLUGIN_PGOUTPUT ? pgoutput_options(cfg)
						       : wal2json_options(p, cfg, tables);
	sql = ob_xasprintf("START_REPLICATION SLOT \"%s\" LOGICAL " OB_LSN_FMT " (%s)",
			   cfg->pg.slot, OB_LSN_ARGS(start), options);
	free(options);
	/* The position the server starts from, to name it (the slot is
	 * this connection's to take: nothing moves it meanwhile). */
	if (start == 0 && !ob_pgrepl_slot_info(p, cfg->pg.slot, &confirmed)) {
		free(sql);
		return OB_PG_RETRY;
	}
	/* The stream's notices count from here: libpq hands over those that
	 * came with the COPY's start before it returns it (on_notice()). */
	ob_pgwarning_stream_started(&standby_wait);
	p->streaming = true;
	res = ob_pgsql_exec(p, sql);
	if (PQresultStatus(res) != PGRES_COPY_BOTH) {
		const char *msg = ob_pgsql_keep_error(p, res);
		const char *hint = fatal_hint(res);

		p->streaming = false;
		if (state_is(res, OB_SQLSTATE_OBJECT_IN_USE)) {
			st = OB_PG_STANDBY; /* "replication slot ... is active for PID n" */
			ob_debug("slot busy: %s", msg);
		} else if (hint != NULL) {
			ob_error("could not start replication: %s; %s", msg, hint);
			st = OB_PG_FATAL;
		} else {
			ob_error("could not start replication: %s", msg);
			st = OB_PG_RETRY;
		}
	} else {
		if (start == 0)
			ob_info("streaming from slot %s at its confirmed position " OB_LSN_FMT,
				cfg->pg.slot, OB_LSN_ARGS(confirmed.confirmed_flush));
		else
			ob_info("streaming from slot %s at " OB_LSN_FMT
				" (or its confirmed position, if later)",
				cfg->pg.slot, OB_LSN_ARGS(start));
	}
	PQclear(res);
	free(sql);
	return st;
}

bool
ob_pgrepl_identify(ob_pgconn *p, ob_pg_system *sys)
{
	PGresult *res = ob_pgsql_exec(p, "IDENTIFY_SYSTEM");
	bool ok =
	    PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) >= 2;

	memset(sys, 0, sizeof(*sys));
	if (!ok) {
		ob_error("could not identify the server: %s", ob_pgsql_keep_error(p, res));
	} else {
		copy_field(sys->system_id, sizeof(sys->system_id), res, 0);
		sys->timeline = atoi(PQgetvalue(res, 0, 1));
	}
	PQclear(res);
	return ok;
}

bool
ob_pgrepl_slot_elsewhere(ob_pgconn *p, const ob_slot_info *info)
{
	const char *db = PQdb(p->conn);

	/* A physical slot has no database: its plugin is what is wrong. */
	return info->exists && info->database[0] != '\0' && db != NULL &&
	       strcmp(info->database, db) != 0;
}

bool
ob_pgrepl_slot_being_made(const ob_slot_info *info)
{
	return info->exists && info->plugin[0] == '\0' && info->database[0] != '\0';
}

const char *
ob_pgrepl_slot_plugin(const ob_slot_info *info)
{
	return info->plugin[0] != '\0' ? info->plugin : "none (a physical slot)";
}

int
ob_pgrepl_socket(const ob_pgconn *p)
{
	return PQsocket(p->conn);
}

/* The streaming replication messages inside CopyData (the "Streaming
 * Replication Protocol" chapter of the PostgreSQL manual), big-endian:
 *
 *   XLogData 'w':             dataStart u64, walEnd u64, sendTime i64, data...
 *   Primary keepalive 'k':    walEnd u64, sendTime i64, replyRequested u8
 *   Standby status update 'r': written u64, flushed u64, applied u64,
 *                              sendTime i64, replyRequested u8
 */
#define XLOGDATA_HEADER_LEN (1 + 8 + 8 + 8)
#define KEEPALIVE_LEN       (1 + 8 + 8 + 1)
#define STATUS_UPDATE_LEN   (1 + 8 + 8 + 8 + 8 + 1)

static uint64_t
read_be64(const char *s)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | (unsigned char)s[i];
	return v;
}

static void
write_be64(char *d, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		d[i] = (char)(v & 0xff);
		v >>= 8;
	}
}

ob_read_result
ob_pgrepl_read(ob_pgconn *p, ob_pgrepl_msg *msg)
{
	int n;

	if (p->copybuf != NULL) {
		PQfreemem(p->copybuf);
		p->copybuf = NULL;
	}
	n = PQgetCopyData(p->conn, &p->copybuf, 1);
	if (n == 0 && !p->pub_skipped) {
		if (!PQconsumeInput(p->conn)) {
			ob_warn("could not read from postgres: %s", ob_pgsql_keep_error(p, NULL));
			return OB_READ_ERROR;
		}
		n = PQgetCopyData(p->conn, &p->copybuf, 1);
	}
	/* What came after the warning is not used (on_notice()). */
	if (p->pub_skipped) {
		snprintf(p->err_state, sizeof(p->err_state), "55000");
		snprintf(p->err_msg, sizeof(p->err_msg), "%s", p->pub_skipped_msg);
		ob_error("replication stream ended: %s (a warning of the server, which decodes on "
			 "without the publication, passing rows over); the publication must exist "
			 "from the slot's position on: drop the slot (\"outboxd slot drop\") and "
			 "start outboxd again, with outbox.backlog_where to publish the rows "
			 "written meanwhile",
			 p->pub_skipped_msg);
		return OB_READ_ERROR;
	}
	if (n == 0)
		return OB_READ_NONE;
	if (n == -1) {
		PGresult *res = PQgetResult(p->conn);

		const char *why = ob_pgsql_keep_error(p, res);

		/* pgoutput reads its publication as of each change it decodes. */
		if (state_is(res, OB_SQLSTATE_UNDEFINED_OBJECT))
			ob_error(
			    "replication stream ended: %s; the publication must exist from "
			    "the slot's position on: drop the slot (\"outboxd slot drop\") "
			    "and start outboxd again, with outbox.backlog_where to publish the "
			    "rows written meanwhile",
			    why);
		else if (routine_end(p))
			ob_warn("replication stream ended: %s; reconnecting",
				why[0] != '\0' ? why : "the server closed it (shutting down?)");
		else
			ob_error("replication stream ended: %s", why);
		PQclear(res);
		return OB_READ_ERROR;
	}
	if (n < 0) {
		ob_warn("could not read from postgres: %s", ob_pgsql_keep_error(p, NULL));
		return OB_READ_ERROR;
	}
	memset(msg, 0, sizeof(*msg));
	if (p->copybuf[0] == 'w' && n >= XLOGDATA_HEADER_LEN) {
		size_t off = 1; /* 'w' */

		msg->data_start = read_be64(p->copybuf + off);
		off += 8; /* dataStart */
		msg->wal_end = read_be64(p->copybuf + off);
		off += 8; /* walEnd */
		off += 8; /* sendTime */
		msg->data = p->copybuf + off;
		msg->len = (size_t)n - off;
		msg->unconvertible =
		    p->recode.cd != NULL &&
		    !ob_recode_to_utf8(&p->recode, msg->data, msg->len, &msg->data, &msg->len);
		ob_pgwarning_stream_read(&standby_wait, false, msg->wal_end);
		return OB_READ_MSG;
	}
	if (p->copybuf[0] == 'k' && n >= KEEPALIVE_LEN) {
		size_t off = 1; /* 'k' */

		msg->keepalive = true;
		msg->wal_end = read_be64(p->copybuf + off);
		off += 8;                                    /* walEnd */
		off += 8;                                    /* sendTime */
		msg->reply_requested = p->copybuf[off] != 0; /* replyRequested */
		ob_pgwarning_stream_read(&standby_wait, true, msg->wal_end);
		return OB_READ_MSG;
	}
	ob_error("could not parse replication message: type '%c', %d bytes", p->copybuf[0], n);
	return OB_READ_ERROR;
}

bool
ob_pgrepl_send_status(ob_pgconn *p, ob_lsn write, ob_lsn flush, bool reply_requested)
{
	char buf[STATUS_UPDATE_LEN], msg[1024];
	size_t off = 0;

	buf[off++] = 'r';
	write_be64(buf + off, write);
	off += 8; /* written */
	write_be64(buf + off, flush);
	off += 8; /* flushed: what the slot may confirm */
	write_be64(buf + off, flush);
	off += 8; /* applied */
	write_be64(buf + off, (uint64_t)(ob_now_us() - PG_EPOCH_OFFSET_US));
	off += 8;                           /* sendTime */
	buf[off] = reply_requested ? 1 : 0; /* replyRequested */
	if (PQputCopyData(p->conn, buf, sizeof(buf)) <= 0 || PQflush(p->conn) != 0) {
		ob_error("could not send status update: %s",
			 ob_pgsql_trim(PQerrorMessage(p->conn), msg, sizeof(msg)));
		return false;
	}
	return true;
}
