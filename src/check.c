/*
 * check.c: preflight checks of the database, the slot and the broker.
 *
 * A check fills a result line (ok or not, and a detail naming the fix) and
 * report() prints or logs it. The database checks are shared with the
 * relay, which runs them on every connection before streaming.
 */
#include "outboxd/check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outboxd/backlog.h"
#include "outboxd/backlogsql.h"
#include "outboxd/failover.h"
#include "outboxd/inboxdb.h"
#include "outboxd/log.h"
#include "outboxd/pgconnect.h"
#include "outboxd/producer.h"
#include "outboxd/publication.h"
#include "outboxd/slotmark.h"
#include "outboxd/sqlstate.h"
#include "outboxd/tableprops.h"

#define BROKER_PROBE_TIMEOUT_MS 5000

typedef struct checker {
	ob_pgconn *pg;
	const ob_config *cfg;
	FILE *out; /* print every result here, or log failures when NULL */
	bool all_ok;
	bool query_failed; /* a query failed: the answer is unknown, not no */
	char *table_oid;   /* set by check_table when the table exists */
	bool partitioned;  /* and is partitioned */
	bool slot_read;    /* slot holds the slot's state (read_slot) */
	ob_slot_info slot;
} checker;

/* Print a result line (name, status word, detail), or log it when there
 * is no output (the relay's checks): failures as errors, warnings as
 * warnings. */
static void OB_PRINTF(4, 0)
    put_result(checker *c, const char *name, const char *status, const char *fmt, va_list ap)
{
	char detail[1024];

	vsnprintf(detail, sizeof(detail), fmt, ap);
	if (c->out != NULL)
		fprintf(c->out, "%-20s %-4s %s\n", name, status, detail);
	else if (strcmp(status, "FAIL") == 0)
		ob_error("%s: %s", name, detail);
	else if (strcmp(status, "warn") == 0)
		ob_warn("%s: %s", name, detail);
}

static void OB_PRINTF(4, 5) report(checker *c, const char *name, bool ok, const char *fmt, ...)
{
	va_list ap;

	if (!ok)
		c->all_ok = false;
	va_start(ap, fmt);
	put_result(c, name, ok ? "ok" : "FAIL", fmt, ap);
	va_end(ap);
}

/* A result that passes but costs something the operator should choose. */
static void OB_PRINTF(3, 4) warn(checker *c, const char *name, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	put_result(c, name, "warn", fmt, ap);
	va_end(ap);
}

/* Run a query for one value; a failed query is a failed check. */
static bool
query(checker *c, const char *name, const char *sql, char **value)
{
	if (ob_pgsql_query_value(c->pg, sql, value))
		return true;
	/* A query that did not answer (broken connection, cancelled on
	 * SIGTERM, a statement or lock timeout) says nothing about the
	 * database: retry rather than call it an operator error. */
	c->query_failed = true;
	report(c, name, false, "query failed (see the log)");
	return false;
}

static void
check_wal_level(checker *c)
{
	char *level = NULL;

	if (!query(c, "wal_level", "SHOW wal_level", &level))
		return;
	if (level != NULL && strcmp(level, "logical") == 0)
		report(c, "wal_level", true, "logical");
	else
		report(c, "wal_level", false,
		       "wal_level is %s; set wal_level = logical in postgresql.conf and restart "
		       "Postgres",
		       level ? level : "unknown");
	free(level);
}

/* A partitioned outbox table, with the number of its leaf partitions
 * (sql/README.md, "Partitioned outbox tables"). */
static void
report_partitions(checker *c)
{
	char *sql = ob_xasprintf(
	    "SELECT count(*) FROM pg_partition_tree(%s::oid::regclass) WHERE isleaf", c->table_oid);
	char *count = NULL;

	if (query(c, "outbox table", sql, &count))
		report(c, "outbox table", true, "%s.%s (partitioned, %s partitions)",
		       c->cfg->outbox.schema, c->cfg->outbox.table_name, count ? count : "0");
	free(count);
	free(sql);
}

static void
check_table(checker *c)
{
	const ob_config *cfg = c->cfg;
	char *schema = ob_pgsql_quote_literal(c->pg, cfg->outbox.schema);
	char *table = ob_pgsql_quote_literal(c->pg, cfg->outbox.table_name);
	char *sql =
	    ob_xasprintf("SELECT c.oid::text || ',' || c.relkind::text FROM pg_class c JOIN "
			 "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
			 "AND c.relname = %s AND c.relkind IN ('r', 'p')",
			 schema, table);
	char *row = NULL;

	if (query(c, "outbox table", sql, &row)) {
		char *comma = row ? strchr(row, ',') : NULL;

		if (comma == NULL) {
			report(c, "outbox table", false,
			       "table %s.%s does not exist; create it (sql/outbox.sql) or set "
			       "outbox.table%s",
			       cfg->outbox.schema, cfg->outbox.table_name,
			       strchr(cfg->outbox.table, '"') != NULL
				   ? " (its names are taken as written, case kept: write them "
				     "without SQL quotes)"
				   : "");
		} else {
			*comma = '\0';
			c->table_oid = ob_xstrdup(row);
			c->partitioned = comma[1] == 'p';
			if (c->partitioned)
				report_partitions(c);
			else
				report(c, "outbox table", true, "%s.%s", cfg->outbox.schema,
				       cfg->outbox.table_name);
		}
	}
	free(row);
	free(sql);
	free(schema);
	free(table);
}

/* Report what a check of tableprops.h found. */
static void
report_props(checker *c, const char *name, ob_tableprops_result r, const char *detail)
{
	c->query_failed |= r == OB_TABLEPROPS_QUERY_FAILED;
	if (r == OB_TABLEPROPS_WARN)
		warn(c, name, "%s", detail);
	else
		report(c, name, r == OB_TABLEPROPS_OK, "%s", detail);
}

/* Whether a row that an UPDATE moves into another partition can be told
 * from a new event, read on pg: with pgoutput a plain connection, since
 * the publication is read too (see check_publication). */
static void
check_moves(checker *c, ob_pgconn *pg)
{
	char detail[1024];

	if (c->partitioned)
		report_props(
		    c, "partition moves",
		    ob_tableprops_check_moves(pg, c->cfg, c->table_oid, detail, sizeof(detail)),
		    detail);
}

/* The table and its partitions are logged; with wal2json, moves. */
static void
check_table_props(checker *c)
{
	char detail[1024];

	if (c->table_oid == NULL)
		return;
	report_props(
	    c, "table logged",
	    ob_tableprops_check_logged(c->pg, c->cfg, c->table_oid, detail, sizeof(detail)),
	    detail);
	if (c->cfg->pg.plugin == OB_PLUGIN_WAL2JSON)
		check_moves(c, c->pg);
}

/* True if name is one of the comma-separated columns. */
static bool
has_column(const char *columns, const char *name)
{
	size_t len = strlen(name);
	const char *p = columns;

	while (p != NULL) {
		if (strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == '\0'))
			return true;
		p = strchr(p, ',');
		if (p != NULL)
			p++;
	}
	return false;
}

/* Add name to the comma-separated list when it is (in) or is not (!in)
 * one of columns. */
static void
note_column(char *list, size_t size, const char *columns, bool in, const char *name)
{
	if (name[0] == '\0' || has_column(columns, name) != in ||
	    strlen(list) + strlen(name) + 3 > size)
		return;
	strcat(list, list[0] ? ", " : "");
	strcat(list, name);
}

/* Add to list each mapped column (the [outbox] *_column names and the
 * topic template's {column} placeholders) that is (in) or is not (!in) one
 * of the comma-separated columns. */
static void
note_mapped(const ob_config *cfg, const char *columns, bool in, char *list, size_t size)
{
	const char *mapped[] = {
	    cfg->outbox.id_column,      cfg->outbox.key_column,     cfg->outbox.type_column,
	    cfg->outbox.payload_column, cfg->outbox.headers_column, cfg->outbox.timestamp_column,
	};
	ob_topic_piece piece;

	for (size_t i = 0; i < OB_ARRAY_LEN(mapped); i++)
		note_column(list, size, columns, in, mapped[i]);
	for (const char *cursor = cfg->outbox.topic;
	     ob_topic_template_next(&cursor, &piece) == OB_TOPIC_PIECE;) {
		char name[128];

		if (!piece.is_column)
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)piece.len, piece.text);
		note_column(list, size, columns, in, name);
	}
}

/* The table's columns (comma-separated) into *columns, or only its
 * GENERATED ... STORED ones with generated; false (reported) when the query
 * failed. */
static bool
read_columns(checker *c, bool generated, char **columns)
{
	char *sql = ob_xasprintf("SELECT string_agg(attname, ',') FROM pg_attribute WHERE "
				 "attrelid = %s AND attnum > 0 AND NOT attisdropped%s",
				 c->table_oid, generated ? " AND attgenerated <> ''" : "");
	bool ok = query(c, "outbox columns", sql, columns);

	free(sql);
	return ok;
}

/* The mapped columns exist; with pgoutput, none is GENERATED ... STORED:
 * pgoutput does not send such columns (up to PostgreSQL 17; 18 sends them
 * only for a publication with publish_generated_columns, which outboxd
 * neither sets nor reads, so it refuses them there too), where wal2json
 * does, so the two decoders would publish the same rows differently. */
static void
check_columns(checker *c)
{
	const ob_config *cfg = c->cfg;
	char missing[512] = "", generated[512] = "";
	char *columns = NULL, *gen = NULL;

	if (c->table_oid == NULL || !read_columns(c, false, &columns))
		return;
	note_mapped(cfg, columns, false, missing, sizeof(missing));
	/* Servers older than pgoutput's minimum are refused by
	 * check_publication (and have no attgenerated before 12). */
	if (missing[0] == '\0' && cfg->pg.plugin == OB_PLUGIN_PGOUTPUT &&
	    ob_pgsql_server_version(c->pg) >= OB_PGOUTPUT_MIN_SERVER) {
		if (!read_columns(c, true, &gen))
			goto out;
		note_mapped(cfg, gen, true, generated, sizeof(generated));
	}
	if (missing[0] != '\0')
		report(c, "outbox columns", false,
		       "%s.%s has no column %s; add the column or change the [outbox] mapping",
		       cfg->outbox.schema, cfg->outbox.table_name, missing);
	else if (generated[0] != '\0')
		report(c, "outbox columns", false,
		       "%s.%s: mapped column %s %s GENERATED ALWAYS AS (...) STORED, which "
		       "postgres.plugin = pgoutput does not send, so its rows would not be "
		       "published as wal2json publishes them; make it a plain column filled by the "
		       "application or a trigger, or set postgres.plugin = wal2json",
		       cfg->outbox.schema, cfg->outbox.table_name, generated,
		       strchr(generated, ',') != NULL ? "are" : "is");
	else
		report(c, "outbox columns", true, "%s", columns ? columns : "");
out:
	free(gen);
	free(columns);
}

/* Read the slot's state into c->slot, once; false (reported) when the
 * query failed. */
static bool
read_slot(checker *c)
{
	if (c->slot_read)
		return true;
	if (!ob_pgrepl_slot_info(c->pg, c->cfg->pg.slot, &c->slot)) {
		c->query_failed = true;
		report(c, "slot", false, "could not read pg_replication_slots (see the log)");
		return false;
	}
	c->slot_read = true;
	return true;
}

/* pgoutput's server version and publication; without out (the relay) a
 * missing publication is created, unless an earlier check failed. */
static void
check_publication(checker *c)
{
	int v = ob_pgsql_server_version(c->pg);
	char detail[1024];
	ob_pgconn *plain = NULL;
	ob_pg_status st;

	if (c->cfg->pg.plugin != OB_PLUGIN_PGOUTPUT || c->table_oid == NULL)
		return;
	if (v < OB_PGOUTPUT_MIN_SERVER) {
		report(c, "pgoutput", false,
		       "the server is %d.%d; postgres.plugin = pgoutput needs PostgreSQL 14 or "
		       "later (logical messages): use wal2json",
		       v / 10000, v % 10000);
		return;
	}
	if (!read_slot(c))
		return;
	/* A slot of the other plugin is the slot check's to name. */
	if (c->slot.exists && strcmp(c->slot.plugin, "pgoutput") != 0)
		return;
	/* Not on the replication connection: the walsender then decodes with
	 * what such a query left in its catalog caches (seen on PostgreSQL 15:
	 * after reading a publication that a slot's first transaction
	 * predates, that transaction's rows were passed over instead of
	 * failing with "publication does not exist"). */
	if (ob_pgsql_connect(c->cfg, OB_PGCONN_PLAIN, &plain) != OB_PG_OK) {
		c->query_failed = true;
		report(c, "publication", false, "could not connect to check it (see the log)");
		return;
	}
	st = ob_publication_prepare(plain, c->cfg, c->slot.exists, c->out == NULL && c->all_ok,
				    detail, sizeof(detail));
	if (st == OB_PG_RETRY)
		c->query_failed = true;
	report(c, "publication", st == OB_PG_OK, "%s", detail);
	if (st == OB_PG_OK)
		check_moves(c, plain);
	ob_pgsql_close(plain);
}

/* Whether the role may SELECT the outbox table, which the backlog reads.
 * `check` always asks; before streaming it is asked only when the
 * backlog is about to be read (backlog_where is set and the slot does not
 * exist yet): the stream itself reads no row of the table. */
static void
check_select(checker *c)
{
	const ob_config *cfg = c->cfg;
	char *schema, *table, *sql, *grant = NULL;
	char detail[1024];

	if (c->table_oid == NULL || (c->out == NULL && (cfg->outbox.backlog_where[0] == '\0' ||
							!read_slot(c) || c->slot.exists)))
		return;
	schema = ob_pgsql_quote_literal(c->pg, cfg->outbox.schema);
	table = ob_pgsql_quote_literal(c->pg, cfg->outbox.table_name);
	sql = ob_backlogsql_grant_query(schema, table);
	if (query(c, "table privilege", sql, &grant)) {
		if (grant == NULL)
			snprintf(detail, sizeof(detail), "%s.%s no longer exists",
				 cfg->outbox.schema, cfg->outbox.table_name);
		else if (grant[0] == '\0')
			snprintf(detail, sizeof(detail), "SELECT granted");
		else
			ob_backlogsql_select_denied(cfg, grant, detail, sizeof(detail));
		report(c, "table privilege", grant != NULL && grant[0] == '\0', "%s", detail);
	}
	free(grant);
	free(sql);
	free(table);
	free(schema);
}

/* A hot standby decodes from PostgreSQL 16 on; reported only when the
 * server is one. */
static void
check_standby(checker *c)
{
	int v = ob_pgsql_server_version(c->pg);
	bool standby;

	if (!ob_pgrepl_in_recovery(c->pg, &standby)) {
		c->query_failed = true;
		report(c, "hot standby", false, "query failed (see the log)");
	} else if (standby && v >= OB_STANDBY_DECODING_MIN_SERVER) {
		report(c, "hot standby", true,
		       "the server is a hot standby: outboxd decodes there (the publication must "
		       "be made on the primary)");
	} else if (standby) {
		report(
		    c, "hot standby", false,
		    "the server is a hot standby, and PostgreSQL %d cannot decode there (that came "
		    "with 16): point postgres.conninfo at the primary (naming several hosts, add "
		    "target_session_attrs=read-write)",
		    v / 10000);
	}
}

ob_pg_status
ob_check_database(ob_pgconn *pg, const ob_config *cfg, FILE *out)
{
	checker c = {.pg = pg, .cfg = cfg, .out = out, .all_ok = true};

	check_standby(&c);
	check_wal_level(&c);
	check_table(&c);
	check_table_props(&c);
	check_columns(&c);
	check_publication(&c);
	check_select(&c);
	free(c.table_oid);
	if (c.query_failed)
		return OB_PG_RETRY;
	return c.all_ok ? OB_PG_OK : OB_PG_FATAL;
}

static void
check_server(checker *c)
{
	int v = ob_pgsql_server_version(c->pg);

	report(c, "server version", v >= 100000, "%d.%d%s", v / 10000, v % 10000,
	       v >= 100000 ? "" : "; outboxd needs PostgreSQL 10 or later");
}

static void
check_replication(checker *c)
{
	char *repl = NULL;

	if (query(c, "replication role",
		  "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
		  &repl))
		report(c, "replication role", repl != NULL && strcmp(repl, "t") == 0, "%s",
		       repl != NULL && strcmp(repl, "t") == 0
			   ? "current user may replicate"
			   : "current user lacks REPLICATION; ALTER ROLE ... REPLICATION "
			     "(sql/role.sql)");
	free(repl);
}

/* What to do about a temporary slot the server would not create, by its
 * SQLSTATE: the cause, not every possible one. */
static const char *
slot_failure_fix(const checker *c, const char *state)
{
	if (ob_sqlstate_is(state, OB_SQLSTATE_OBJECT_NOT_IN_PREREQUISITE))
		return "wal_level is not logical (see the wal_level line)";
	if (ob_sqlstate_is(state, OB_SQLSTATE_CONFIGURATION_LIMIT))
		return "no replication slot is free: raise max_replication_slots or drop an "
		       "unused slot";
	if (ob_sqlstate_is(state, OB_SQLSTATE_UNDEFINED_FILE) &&
	    c->cfg->pg.plugin == OB_PLUGIN_WAL2JSON)
		return "the server has no wal2json: install it (" OB_WAL2JSON_PACKAGE_HINT ")";
	return "see the log";
}

/* Whether the row that marks the slot as made can be written (slotmark.h),
 * before outboxd creates the slot; not on a hot standby, where it is
 * neither read nor written. */
static void
check_marker(checker *c)
{
	char detail[1024];
	bool standby;
	ob_pg_status st;

	if (!ob_pgrepl_in_recovery(c->pg, &standby) || standby)
		return;
	st = ob_slotmark_check(c->pg, c->cfg, detail, sizeof(detail));
	if (st == OB_PG_RETRY)
		c->query_failed = true;
	report(c, "slot marker", st == OB_PG_OK, "%s", detail);
}

/* The slot, or whether one could be created: a temporary slot proves
 * that the output plugin loads and that a slot is free. */
static void
check_slot(checker *c)
{
	const ob_config *cfg = c->cfg;
	const char *plugin = ob_plugin_name(cfg->pg.plugin);
	ob_slot_info info;

	if (!ob_pgrepl_slot_info(c->pg, cfg->pg.slot, &info)) {
		report(c, "slot", false, "could not read pg_replication_slots (see the log)");
		return;
	}
	if (!info.exists) {
		char *sql = ob_xasprintf("CREATE_REPLICATION_SLOT \"outboxd_check_%d\" TEMPORARY "
					 "LOGICAL %s (SNAPSHOT 'nothing')",
					 (int)getpid(), plugin);
		char *ignored = NULL;
		bool ok = ob_pgsql_query_value(c->pg, sql, &ignored);

		if (ok)
			report(c, plugin, true, "output plugin loads");
		else
			report(c, plugin, false, "could not create a slot: %s",
			       slot_failure_fix(c, ob_pgsql_error_state(c->pg)));
		report(c, "slot", cfg->pg.create_slot, "%s %s", cfg->pg.slot,
		       cfg->pg.create_slot ? "does not exist yet; outboxd will create it"
					   : "does not exist and postgres.create_slot is false; "
					     "run \"outboxd slot create\"");
		check_marker(c);
		free(ignored);
		free(sql);
		return;
	}
	report(c, plugin, strcmp(info.plugin, plugin) == 0, "slot plugin is %s%s", info.plugin,
	       strcmp(info.plugin, plugin) == 0
		   ? ""
		   : "; postgres.plugin says otherwise: " OB_PLUGIN_SWITCH_HINT);
	if (strcmp(info.wal_status, "lost") == 0)
		report(c, "slot", false,
		       "%s has been invalidated (wal_status lost); drop and recreate it and raise "
		       "max_slot_wal_keep_size",
		       cfg->pg.slot);
	else
		report(c, "slot", true, "%s: %s, confirmed " OB_LSN_FMT ", %lld bytes retained%s",
		       cfg->pg.slot, info.wal_status, OB_LSN_ARGS(info.confirmed_flush),
		       (long long)info.retained_bytes,
		       info.active_pid ? " (active in another process: this one would be a standby)"
				       : "");
}

/* Whether the slot survives a promotion (failover.h): each missing
 * setting is a warning naming its fix (a primary without a standby is no
 * error), and so is a standby's copy in sight that is not ready. */
static void
check_failover(checker *c)
{
	ob_failover_state st;
	char detail[768];
	bool seen, ready;

	if (!ob_failover_read(c->pg, c->cfg, &st)) {
		c->query_failed = true;
		report(c, "failover", false, "query failed (see the log)");
		return;
	}
	if (st.verdict == OB_FAILOVER_NA && !c->cfg->pg.slot_failover) {
		report(c, "failover", true, "not checked: %s", st.why);
		return;
	}
	if (st.verdict != OB_FAILOVER_READY) {
		warn(c, "failover", "%s", st.why);
		return;
	}
	report(c, "failover", true, "%s", st.why);
	if (!read_slot(c))
		return;
	ob_failover_standby_copy(c->cfg, c->slot.confirmed_flush, &seen, &ready, detail,
				 sizeof(detail));
	if (seen && ready)
		report(c, "standby copy", true, "%s", detail);
	else
		warn(c, "standby copy", "%s", detail);
}

/* What the slot's WAL may cost: without a bound (max_slot_wal_keep_size =
 * -1) the server keeps every WAL file the slot has not confirmed, so an
 * outboxd stopped or stalled long enough fills its disk; with one, a slot
 * further behind is invalidated (wal_status lost) and must be recreated
 * and its events republished. An unreserved slot is past the bound
 * already and is lost at the next checkpoint unless outboxd catches up; a
 * lost one is the slot check's failure. */
static void
check_wal_retention(checker *c)
{
	char *keep = NULL;

	if (!read_slot(c) || !query(c, "wal retention", "SHOW max_slot_wal_keep_size", &keep))
		goto done;
	if (c->slot.exists && strcmp(c->slot.wal_status, "lost") == 0)
		goto done;
	if (c->slot.exists && strcmp(c->slot.wal_status, "unreserved") == 0)
		warn(c, "wal retention",
		     "replication slot %s is unreserved: it holds more WAL than "
		     "max_slot_wal_keep_size (%s) allows, and the next checkpoint invalidates it "
		     "unless outboxd catches up first; an invalidated slot must be dropped and "
		     "recreated, and the events committed since its position republished",
		     c->cfg->pg.slot, keep != NULL ? keep : "?");
	else if (keep != NULL && strcmp(keep, "-1") == 0)
		warn(c, "wal retention",
		     "max_slot_wal_keep_size = -1: the slot keeps all the WAL it has not "
		     "confirmed, so an outboxd stopped or stalled long enough fills the server's "
		     "disk (and Postgres stops); a limit (ALTER SYSTEM SET max_slot_wal_keep_size "
		     "= '50GB', sized for the longest outage to ride out) bounds the WAL kept, at "
		     "the cost of the slot being invalidated (wal_status lost: drop, recreate, "
		     "republish) when outboxd falls further behind than that");
	else
		report(c, "wal retention", true,
		       "max_slot_wal_keep_size = %s: a slot further behind than that is "
		       "invalidated (wal_status lost) and must be recreated",
		       keep != NULL ? keep : "?");
done:
	free(keep);
}

/* Every slot of a database decodes every logical message, and outboxd
 * publishes those of outbox.message_prefix: another outboxd streaming a
 * slot of the same database publishes them too unless its prefix differs.
 * Its configuration cannot be seen from here, so the warning names the
 * slots (found by their walsender's application_name) for the operator to
 * compare (deploy/README.md, "Several deployments on one database"). */
static void
check_message_prefix(checker *c)
{
	const ob_config *cfg = c->cfg;
	char *sql, *others = NULL;

	if (cfg->outbox.message_prefix[0] == '\0')
		return;
	/* The slot name is a plain name (config.c), safe to quote as is. */
	sql = ob_xasprintf(
	    "SELECT string_agg(DISTINCT s.slot_name, ', ') FROM pg_replication_slots s "
	    "JOIN pg_stat_replication r ON r.pid = s.active_pid "
	    "WHERE s.database = current_database() AND s.slot_type = 'logical' AND NOT s.temporary "
	    "AND s.slot_name <> '%s' AND r.application_name = 'outboxd'",
	    cfg->pg.slot);
	if (!query(c, "message prefix", sql, &others))
		goto done;
	if (others != NULL && others[0] != '\0')
		warn(c, "message prefix",
		     "another outboxd streams slot %s of this database: unless its "
		     "outbox.message_prefix differs from \"%s\", both publish every logical "
		     "message with that prefix; give each deployment its own (deploy/README.md, "
		     "\"Several deployments on one database\")",
		     others, cfg->outbox.message_prefix);
	else
		report(c, "message prefix", true,
		       "%s: no other outboxd streams a slot of this database",
		       cfg->outbox.message_prefix);
done:
	free(others);
	free(sql);
}

/* The backlog's predicate and order, as the server reads them (sql/README.md,
 * "Migrating from a polling outbox processor"), with the planner's
 * estimate of the rows they match and the order settled. */
static void
check_backlog(checker *c)
{
	const ob_config *cfg = c->cfg;
	ob_pg_status st = OB_PG_RETRY;
	ob_backlog *b = NULL;

	if (cfg->outbox.backlog_where[0] == '\0')
		return;
	if (read_slot(c) && c->slot.exists) {
		/* run reads the backlog only when it creates the slot. */
		report(c, "backlog", true,
		       "not read: slot %s exists, and the backlog is published only when outboxd "
		       "creates it",
		       cfg->pg.slot);
		return;
	}
	if (ob_backlog_connect(cfg, NULL, NULL, &b) == OB_PG_OK)
		st = ob_backlog_verify(b);
	if (st == OB_PG_OK)
		report(c, "backlog", true,
		       "outbox.backlog_where \"%s\" is valid (the planner estimates %lld rows), "
		       "ordered by %s",
		       cfg->outbox.backlog_where, (long long)ob_backlog_estimate(b),
		       ob_backlog_order(b));
	else if (st == OB_PG_FATAL)
		report(c, "backlog", false, "%s", ob_backlog_error(b));
	else
		report(c, "backlog", false, "could not check outbox.backlog_where (see the log)");
	ob_backlog_close(b);
}

static void
check_broker(checker *c)
{
	char detail[512];
	bool dlq_exists = false;
	bool ok = ob_producer_probe(c->cfg, BROKER_PROBE_TIMEOUT_MS, c->cfg->outbox.dlq_topic,
				    &dlq_exists, detail, sizeof(detail));

	report(c, "kafka", ok, "%s", detail);
	if (ok)
		report(c, "dead-letter topic", true, "%s %s", c->cfg->outbox.dlq_topic,
		       dlq_exists ? "exists"
				  : "does not exist yet (created on first use if the cluster "
				    "auto-creates topics)");
}

/* The inbox's database and tables, when inbox.topics says the inbox is
 * used (sql/README.md, "The inbox tables"). */
static void
check_inbox(checker *c)
{
	ob_inboxdb *db = NULL;
	char detail[1024];

	if (c->cfg->inbox.topics[0] == '\0')
		return;
	switch (ob_inboxdb_connect(c->cfg, false, &db, detail, sizeof(detail))) {
	case OB_INBOXDB_OK:
		report(c, "inbox tables", true, "%s.%s and %s.outboxd_inbox_offsets",
		       c->cfg->inbox.schema, c->cfg->inbox.table_name, c->cfg->inbox.schema);
		ob_inboxdb_describe_group(db, c->cfg, detail, sizeof(detail));
		report(c, "inbox group", true, "%s", detail);
		ob_inboxdb_close(db);
		break;
	case OB_INBOXDB_FATAL:
		report(c, "inbox tables", false, "%s", detail);
		break;
	case OB_INBOXDB_RETRY:
	case OB_INBOXDB_REJECTED:
		report(c, "inbox postgres", false, "%s", detail);
		break;
	}
}

int
ob_check_run(const ob_config *cfg, FILE *out)
{
	checker c = {.cfg = cfg, .out = out, .all_ok = true};
	char *masked = ob_log_mask_conninfo(cfg->pg.conninfo);

	if (!ob_producer_check_config(cfg))
		report(&c, "kafka settings", false, "a [kafka] property is invalid (see the log)");
	if (cfg->inbox.topics[0] != '\0' && !cfg->publisher_set) {
		/* A receiving service's config: no outbox to publish from. */
		report(&c, "publisher", true,
		       "not configured (postgres.conninfo, postgres.slot and outbox.table unset)");
	} else if (ob_pgrepl_connect(cfg, &c.pg) != OB_PG_OK) {
		const char *fix;
		ob_pg_refusal refusal = ob_pgconnect_refusal(&fix);

		if (refusal != OB_PG_REFUSAL_NONE)
			report(&c, "postgres", false, "refused (%s): %s",
			       ob_pg_refusal_name(refusal), fix);
		else
			report(&c, "postgres", false, "could not connect with \"%s\" (see the log)",
			       masked);
	} else {
		report(&c, "postgres", true, "connected with \"%s\"", masked);
		check_server(&c);
		if (ob_check_database(c.pg, cfg, out) != OB_PG_OK)
			c.all_ok = false;
		check_replication(&c);
		check_slot(&c);
		check_failover(&c);
		check_wal_retention(&c);
		check_message_prefix(&c);
		check_backlog(&c);
		ob_pgrepl_close(c.pg, false);
	}
	check_broker(&c);
	check_inbox(&c);
	free(masked);
	fprintf(out, "%s\n", c.all_ok ? "all checks passed" : "some checks failed");
	return c.all_ok ? 0 : 2;
}
