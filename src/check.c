/*
 * check.c: preflight checks of the database, the slot and the broker.
 *
 * A check fills a result line (ok or not, and a detail naming the fix) and
 * ob_checker_report() prints or logs it. The database checks are shared with the
 * relay, which runs them on every connection before streaming.
 */
#include "outboxd/check.h"
#include "outboxd/checker.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/backlog.h"
#include "outboxd/backlogsql.h"
#include "outboxd/colmap.h"
#include "outboxd/holddb.h"
#include "outboxd/inboxdb.h"
#include "outboxd/kafkaauth.h"
#include "outboxd/kafkaprobe.h"
#include "outboxd/log.h"
#include "outboxd/pgconnect.h"
#include "outboxd/prodconf.h"
#include "outboxd/recode.h"
#include "outboxd/publication.h"
#include "outboxd/tableprops.h"

#define BROKER_PROBE_TIMEOUT_MS 5000

/* `check`'s log lines, held (ob_log_hold()) so that each problem is shown
 * once, in the table: what was logged since the last result line, which a
 * failure ending in OB_CHECK_SEE_THE_LOG shows in place of those words;
 * before a line that passed, it is logged after all. */
static char held[1024];

/* What was held before a line that passed is about nothing the table
 * shows (a warning of its own, such as a backlog's order): log it. */
static void
release_held(void)
{
	char said[sizeof(held)];

	snprintf(said, sizeof(said), "%s", held);
	ob_log_hold(NULL, 0);
	ob_warn("%s", said);
	ob_log_hold(held, sizeof(held));
}

/* Print a result line (name, status word, detail), or log it when there
 * is no output (the relay's checks): failures as errors, warnings as
 * warnings. */
static void OB_PRINTF(4, 0)
    put_result(ob_checker *c, const char *name, const char *status, const char *fmt, va_list ap)
{
	char detail[1024];
	size_t n, see = strlen(OB_CHECK_SEE_THE_LOG);
	bool show_held;

	vsnprintf(detail, sizeof(detail), fmt, ap);
	n = strlen(detail);
	if (c->out != NULL) {
		show_held = strcmp(status, "FAIL") == 0 && held[0] != '\0' && n >= see &&
			    strcmp(detail + n - see, OB_CHECK_SEE_THE_LOG) == 0;
		if (show_held)
			detail[n - see] = '\0';
		fprintf(c->out, "%-20s %-4s %s%s%s\n", name, status, detail, show_held ? ": " : "",
			show_held ? held : "");
		if (!show_held && held[0] != '\0' && strcmp(status, "FAIL") != 0)
			release_held();
		held[0] = '\0';
	} else if (strcmp(status, "FAIL") == 0) {
		ob_error("%s: %s", name, detail);
	} else if (strcmp(status, "warn") == 0) {
		ob_warn("%s: %s", name, detail);
	}
}

void
ob_checker_report(ob_checker *c, const char *name, bool ok, const char *fmt, ...)
{
	va_list ap;

	if (!ok)
		c->all_ok = false;
	va_start(ap, fmt);
	put_result(c, name, ok ? "ok" : "FAIL", fmt, ap);
	va_end(ap);
}

void
ob_checker_warn(ob_checker *c, const char *name, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	put_result(c, name, "warn", fmt, ap);
	va_end(ap);
}

bool
ob_checker_query(ob_checker *c, const char *name, const char *sql, char **value)
{
	if (ob_pgsql_query_value(c->pg, sql, value))
		return true;
	/* A query that did not answer (broken connection, cancelled on
	 * SIGTERM, a statement or lock timeout) says nothing about the
	 * database: retry rather than call it an operator error. */
	c->query_failed = true;
	ob_checker_report(c, name, false, "query failed" OB_CHECK_SEE_THE_LOG);
	return false;
}

static void
check_wal_level(ob_checker *c)
{
	char *level = NULL;

	if (!ob_checker_query(c, "wal_level", "SHOW wal_level", &level))
		return;
	if (level != NULL && strcmp(level, "logical") == 0)
		ob_checker_report(c, "wal_level", true, "logical");
	else
		ob_checker_report(
		    c, "wal_level", false,
		    "wal_level is %s; set wal_level = logical in postgresql.conf and restart "
		    "Postgres",
		    level ? level : "unknown");
	free(level);
}

/* Keys and text go out as UTF-8 (recode.h): wal2json's need converting. */
static void
check_encoding(ob_checker *c)
{
	char *enc = NULL;

	if (!ob_checker_query(c, "encoding", "SHOW server_encoding", &enc) || enc == NULL)
		return;
	if (strcmp(enc, "SQL_ASCII") == 0)
		ob_checker_warn(c, "encoding",
				"SQL_ASCII declares none: UTF-8 text goes out as written, other "
				"bytes are refused (dead-lettered, or outboxd stops)");
	else if (c->cfg->pg.plugin == OB_PLUGIN_WAL2JSON &&
		 ob_recode_need_of(enc) == OB_RECODE_UNABLE)
		ob_checker_report(c, "encoding", false,
				  "%s: outboxd cannot convert wal2json's text as PostgreSQL "
				  "converts the rest; use postgres.plugin = pgoutput",
				  enc);
	else if (c->cfg->pg.plugin == OB_PLUGIN_WAL2JSON &&
		 ob_recode_need_of(enc) == OB_RECODE_CONVERT)
		ob_checker_report(c, "encoding", true, "%s, wal2json's text converted to UTF-8",
				  enc);
	else
		ob_checker_report(c, "encoding", true, "%s, published as UTF-8", enc);
	free(enc);
}

/* A partitioned outbox table, with the number of its leaf partitions
 * (sql/README.md, "Partitioned outbox tables"). */
static void
report_partitions(ob_checker *c)
{
	char *sql = ob_xasprintf(
	    "SELECT count(*) FROM pg_partition_tree(%s::oid::regclass) WHERE isleaf", c->table_oid);
	char *count = NULL;

	if (ob_checker_query(c, "outbox table", sql, &count))
		ob_checker_report(c, "outbox table", true, "%s.%s (partitioned, %s partitions)",
				  c->cfg->outbox.schema, c->cfg->outbox.table_name,
				  count ? count : "0");
	free(count);
	free(sql);
}

static void
check_table(ob_checker *c)
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

	if (ob_checker_query(c, "outbox table", sql, &row)) {
		char *comma = row ? strchr(row, ',') : NULL;

		if (comma == NULL) {
			ob_checker_report(
			    c, "outbox table", false,
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
				ob_checker_report(c, "outbox table", true, "%s.%s",
						  cfg->outbox.schema, cfg->outbox.table_name);
		}
	}
	free(row);
	free(sql);
	free(schema);
	free(table);
}

/* Report what a check of tableprops.h found. */
static void
report_props(ob_checker *c, const char *name, ob_tableprops_result r, const char *detail)
{
	c->query_failed |= r == OB_TABLEPROPS_QUERY_FAILED;
	if (r == OB_TABLEPROPS_WARN)
		ob_checker_warn(c, name, "%s", detail);
	else
		ob_checker_report(c, name, r == OB_TABLEPROPS_OK, "%s", detail);
}

/* Whether a row that an UPDATE moves into another partition can be told
 * from a new event, read on pg: with pgoutput a plain connection, since
 * the publication is read too (see check_publication). */
static void
check_moves(ob_checker *c, ob_pgconn *pg)
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
check_table_props(ob_checker *c)
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

/* The table's columns (comma-separated) into *columns, or only its
 * GENERATED ... STORED ones with generated; false (reported) when the query
 * failed. */
static bool
read_columns(ob_checker *c, bool generated, char **columns)
{
	char *sql = ob_xasprintf("SELECT string_agg(attname, ',') FROM pg_attribute WHERE "
				 "attrelid = %s AND attnum > 0 AND NOT attisdropped%s",
				 c->table_oid, generated ? " AND attgenerated <> ''" : "");
	bool ok = ob_checker_query(c, "outbox columns", sql, columns);

	free(sql);
	return ok;
}

/* The mapped columns exist; with pgoutput, none is GENERATED ... STORED:
 * pgoutput does not send such columns (up to PostgreSQL 17; 18 sends them
 * only for a publication with publish_generated_columns, which outboxd
 * neither sets nor reads, so it refuses them there too), where wal2json
 * does, so the two decoders would publish the same rows differently. */
static void
check_columns(ob_checker *c)
{
	const ob_config *cfg = c->cfg;
	char missing[512] = "", generated[512] = "";
	char *columns = NULL, *gen = NULL;

	if (c->table_oid == NULL || !read_columns(c, false, &columns))
		return;
	ob_colmap_note(cfg, columns, false, missing, sizeof(missing));
	/* Servers older than pgoutput's minimum are refused by
	 * check_publication (and have no attgenerated before 12). */
	if (missing[0] == '\0' && cfg->pg.plugin == OB_PLUGIN_PGOUTPUT &&
	    ob_pgsql_server_version(c->pg) >= OB_PGOUTPUT_MIN_SERVER) {
		if (!read_columns(c, true, &gen))
			goto out;
		ob_colmap_note(cfg, gen, true, generated, sizeof(generated));
	}
	if (missing[0] != '\0')
		ob_checker_report(
		    c, "outbox columns", false,
		    "%s.%s has no column %s; add the column or change the [outbox] mapping",
		    cfg->outbox.schema, cfg->outbox.table_name, missing);
	else if (generated[0] != '\0')
		ob_checker_report(
		    c, "outbox columns", false,
		    "%s.%s: mapped column %s %s GENERATED ALWAYS AS (...) STORED, which "
		    "postgres.plugin = pgoutput does not send, so its rows would not be "
		    "published as wal2json publishes them; make it a plain column filled by the "
		    "application or a trigger, or set postgres.plugin = wal2json",
		    cfg->outbox.schema, cfg->outbox.table_name, generated,
		    strchr(generated, ',') != NULL ? "are" : "is");
	else
		ob_checker_report(c, "outbox columns", true, "%s", columns ? columns : "");
out:
	free(gen);
	free(columns);
}

/* pgoutput's server version and publication; without out (the relay) a
 * missing publication is created, unless an earlier check failed. */
static void
check_publication(ob_checker *c)
{
	int v = ob_pgsql_server_version(c->pg);
	char detail[1024];
	ob_pgconn *plain = NULL;
	ob_pg_status st;

	if (c->cfg->pg.plugin != OB_PLUGIN_PGOUTPUT || c->table_oid == NULL)
		return;
	if (v < OB_PGOUTPUT_MIN_SERVER) {
		ob_checker_report(
		    c, "pgoutput", false,
		    "the server is %d.%d; postgres.plugin = pgoutput needs PostgreSQL 14 or "
		    "later (logical messages): use wal2json",
		    v / 10000, v % 10000);
		return;
	}
	if (!ob_checker_read_slot(c))
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
		ob_checker_report(c, "publication", false,
				  "could not connect to check it" OB_CHECK_SEE_THE_LOG);
		return;
	}
	st = ob_publication_prepare(plain, c->cfg, c->slot.exists, c->out == NULL && c->all_ok,
				    detail, sizeof(detail));
	if (st == OB_PG_RETRY)
		c->query_failed = true;
	ob_checker_report(c, "publication", st == OB_PG_OK, "%s", detail);
	if (st == OB_PG_OK)
		check_moves(c, plain);
	ob_pgsql_close(plain);
}

/* Whether the role may SELECT the outbox table, which the backlog reads.
 * `check` always asks; before streaming it is asked only when the
 * backlog is about to be read (backlog_where is set and the slot does not
 * exist yet): the stream itself reads no row of the table. */
static void
check_select(ob_checker *c)
{
	const ob_config *cfg = c->cfg;
	char *schema, *table, *sql, *grant = NULL;
	char detail[1024];

	if (c->table_oid == NULL ||
	    (c->out == NULL &&
	     (cfg->outbox.backlog_where[0] == '\0' || !ob_checker_read_slot(c) || c->slot.exists)))
		return;
	schema = ob_pgsql_quote_literal(c->pg, cfg->outbox.schema);
	table = ob_pgsql_quote_literal(c->pg, cfg->outbox.table_name);
	sql = ob_backlogsql_grant_query(schema, table);
	if (ob_checker_query(c, "table privilege", sql, &grant)) {
		if (grant == NULL)
			snprintf(detail, sizeof(detail), "%s.%s no longer exists",
				 cfg->outbox.schema, cfg->outbox.table_name);
		else if (grant[0] == '\0')
			snprintf(detail, sizeof(detail), "SELECT granted");
		else
			ob_backlogsql_select_denied(cfg, grant, detail, sizeof(detail));
		ob_checker_report(c, "table privilege", grant != NULL && grant[0] == '\0', "%s",
				  detail);
	}
	free(grant);
	free(sql);
	free(table);
	free(schema);
}

/* A hot standby decodes from PostgreSQL 16 on; reported only when the
 * server is one. */
static void
check_standby(ob_checker *c)
{
	int v = ob_pgsql_server_version(c->pg);
	bool standby;

	if (!ob_pgrepl_in_recovery(c->pg, &standby)) {
		c->query_failed = true;
		ob_checker_report(c, "hot standby", false, "query failed" OB_CHECK_SEE_THE_LOG);
	} else if (standby && v >= OB_STANDBY_DECODING_MIN_SERVER) {
		ob_checker_report(
		    c, "hot standby", true,
		    "the server is a hot standby: outboxd decodes there (the publication must "
		    "be made on the primary)");
	} else if (standby) {
		ob_checker_report(
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
	ob_checker c = {.pg = pg, .cfg = cfg, .out = out, .all_ok = true};

	check_standby(&c);
	check_wal_level(&c);
	check_encoding(&c);
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
check_server(ob_checker *c)
{
	int v = ob_pgsql_server_version(c->pg);

	ob_checker_report(c, "server version", v >= 100000, "%d.%d%s", v / 10000, v % 10000,
			  v >= 100000 ? "" : "; outboxd needs PostgreSQL 10 or later");
}

/* Every slot of a database decodes every logical message, and outboxd
 * publishes those of outbox.message_prefix: another outboxd streaming a
 * slot of the same database publishes them too unless its prefix differs.
 * Its configuration cannot be seen from here, so the warning names the
 * slots (found by their walsender's application_name) for the operator to
 * compare (deploy/README.md, "Several deployments on one database"). */
static void
check_message_prefix(ob_checker *c)
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
	if (!ob_checker_query(c, "message prefix", sql, &others))
		goto done;
	if (others != NULL && others[0] != '\0')
		ob_checker_warn(
		    c, "message prefix",
		    "another outboxd streams slot %s of this database: unless its "
		    "outbox.message_prefix differs from \"%s\", both publish every logical "
		    "message with that prefix; give each deployment its own (deploy/README.md, "
		    "\"Several deployments on one database\")",
		    others, cfg->outbox.message_prefix);
	else
		ob_checker_report(c, "message prefix", true,
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
check_backlog(ob_checker *c)
{
	const ob_config *cfg = c->cfg;
	ob_pg_status st = OB_PG_RETRY;
	ob_backlog *b = NULL;

	if (cfg->outbox.backlog_where[0] == '\0')
		return;
	if (ob_checker_read_slot(c) && c->slot.exists) {
		/* run reads the backlog only when it creates the slot. */
		ob_checker_report(
		    c, "backlog", true,
		    "not read: slot %s exists, and the backlog is published only when outboxd "
		    "creates it",
		    cfg->pg.slot);
		return;
	}
	if (ob_backlog_connect(cfg, NULL, NULL, &b) == OB_PG_OK)
		st = ob_backlog_verify(b);
	if (st == OB_PG_OK)
		ob_checker_report(
		    c, "backlog", true,
		    "outbox.backlog_where \"%s\" is valid (the planner estimates %lld rows), "
		    "ordered by %s",
		    cfg->outbox.backlog_where, (long long)ob_backlog_estimate(b),
		    ob_backlog_order(b));
	else if (st == OB_PG_FATAL)
		ob_checker_report(c, "backlog", false, "%s", ob_backlog_error(b));
	else
		ob_checker_report(c, "backlog", false,
				  "could not check outbox.backlog_where" OB_CHECK_SEE_THE_LOG);
	ob_backlog_close(b);
}

static void
check_broker(ob_checker *c)
{
	char detail[768];
	ob_kafka_probe probe;
	bool ok =
	    ob_kafka_probe_run(c->cfg, BROKER_PROBE_TIMEOUT_MS, c->cfg->outbox.dlq_topic, &probe);

	ob_checker_report(c, "kafka", ok, "%s", probe.detail);
	/* Kerberos refused for want of a feature leaves the metadata
	 * unanswered, yet the features were seen: say why. */
	if (probe.brokers > 0)
		ob_checker_report(c, "kafka fit",
				  ob_kafka_probe_fit(&probe, detail, sizeof(detail)), "%s", detail);
	ob_checker_report(c, "kafka auth", ob_kafkaauth_report(c->cfg, ok, detail, sizeof(detail)),
			  "%s", detail);
	if (ok)
		ob_checker_report(c, "dead-letter topic", true, "%s %s", c->cfg->outbox.dlq_topic,
				  probe.topic_exists
				      ? "exists"
				      : "does not exist yet (created on first use if the cluster "
					"auto-creates topics)");
}

/* Where the password of the latest connection attempt came from, and
 * whether the server took it. */
static void
check_pg_auth(ob_checker *c)
{
	char detail[1024];

	ob_checker_report(c, "postgres auth", ob_pgconnect_auth(detail, sizeof(detail)), "%s",
			  detail);
}

/* With on_bad_event = hold_key, the held keys' tables (holddb.h). */
static void
check_held(ob_checker *c)
{
	char line[1024];
	bool ok;

	if (c->cfg->outbox.on_bad_event != OB_BAD_EVENT_HOLD_KEY)
		return;
	if (ob_holddb_describe(c->pg, c->cfg, &ok, line, sizeof(line)))
		ob_checker_report(c, "held keys", ok, "%s", line);
	else
		ob_checker_report(c, "held keys", false,
				  "could not read the held keys' tables" OB_CHECK_SEE_THE_LOG);
}

/* The inbox's database and tables, when inbox.topics says the inbox is
 * used (sql/README.md, "The inbox tables"). */
static void
check_inbox(ob_checker *c)
{
	ob_inboxdb *db = NULL;
	char detail[1024];

	if (c->cfg->inbox.topics[0] == '\0')
		return;
	switch (ob_inboxdb_connect(c->cfg, false, &db, detail, sizeof(detail))) {
	case OB_INBOXDB_OK:
		ob_checker_report(c, "inbox tables", true, "%s.%s and %s.outboxd_inbox_offsets",
				  c->cfg->inbox.schema, c->cfg->inbox.table_name,
				  c->cfg->inbox.schema);
		ob_inboxdb_describe_group(db, c->cfg, detail, sizeof(detail));
		ob_checker_report(c, "inbox group", true, "%s", detail);
		ob_inboxdb_close(db);
		break;
	case OB_INBOXDB_FATAL:
		ob_checker_report(c, "inbox tables", false, "%s", detail);
		break;
	case OB_INBOXDB_RETRY:
	case OB_INBOXDB_REJECTED:
		ob_checker_report(c, "inbox postgres", false, "%s", detail);
		break;
	}
	if (!c->cfg->publisher_set)
		check_pg_auth(c);
}

int
ob_check_run(const ob_config *cfg, FILE *out)
{
	ob_checker c = {.cfg = cfg, .out = out, .all_ok = true};
	char *masked = ob_log_mask_conninfo(cfg->pg.conninfo);
	bool kafka_ok;

	ob_log_hold(held, sizeof(held));
	kafka_ok = ob_prodconf_check(cfg);
	if (!kafka_ok)
		ob_checker_report(&c, "kafka settings", false,
				  "a [kafka] property is invalid" OB_CHECK_SEE_THE_LOG);
	if (cfg->inbox.topics[0] != '\0' && !cfg->publisher_set) {
		/* A receiving service's config: no outbox to publish from. */
		ob_checker_report(
		    &c, "publisher", true,
		    "not configured (postgres.conninfo, postgres.slot and outbox.table unset)");
	} else if (ob_pgrepl_connect(cfg, &c.pg) != OB_PG_OK) {
		const char *fix;
		ob_pg_refusal refusal = ob_pgconnect_refusal(&fix);

		if (refusal != OB_PG_REFUSAL_NONE)
			ob_checker_report(&c, "postgres", false, "refused (%s): %s",
					  ob_pg_refusal_name(refusal), fix);
		else
			ob_checker_report(&c, "postgres", false,
					  "could not connect with \"%s\"" OB_CHECK_SEE_THE_LOG,
					  masked);
		check_pg_auth(&c);
	} else {
		ob_checker_report(&c, "postgres", true, "connected with \"%s\"", masked);
		check_pg_auth(&c);
		check_server(&c);
		if (ob_check_database(c.pg, cfg, out) != OB_PG_OK)
			c.all_ok = false;
		ob_checker_slot(&c);
		check_message_prefix(&c);
		check_backlog(&c);
		check_held(&c);
		ob_pgrepl_close(c.pg, false);
	}
	if (kafka_ok) /* else no client can be made: the line above says why */
		check_broker(&c);
	check_inbox(&c);
	ob_log_hold(NULL, 0);
	free(masked);
	fprintf(out, "%s\n", c.all_ok ? "all checks passed" : "some checks failed");
	return c.all_ok ? 0 : 2;
}
