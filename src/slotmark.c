/*
 * slotmark.c: the row in outboxd_slots that says outboxd created its slot
 * (slotmark.h).
 */
#include "outboxd/slotmark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"

/* The marker table as SQL (schema.outboxd_slots), quoted; the caller frees. */
static char *
table_sql(ob_pgconn *p, const ob_config *cfg)
{
	char *schema = ob_pgsql_quote_ident(p, cfg->outbox.schema);
	char *out = ob_xasprintf("%s." OB_SLOTMARK_TABLE, schema);

	free(schema);
	return out;
}

/* Run the command sql; false (logged at level as what failed) unless it
 * succeeded. */
static bool
run(ob_pgconn *p, const char *sql, const char *what, ob_log_level level)
{
	ob_pgres *res = ob_pgsql_exec(p, sql);
	bool ok = ob_pgres_command(res);
	char err[1024];

	if (!ok)
		ob_log(level, "could not %s: %s", what, ob_pgres_error(res, err, sizeof(err)));
	ob_pgres_free(res);
	return ok;
}

/* Whether table (quoted SQL) exists, into *exists; false (logged) when
 * the query failed. */
static bool
table_exists(ob_pgconn *p, const char *table, bool *exists)
{
	char *regclass = ob_pgsql_quote_literal(p, table);
	char *sql = ob_xasprintf("SELECT to_regclass(%s) IS NOT NULL", regclass);
	char *value = NULL;
	bool ok = ob_pgsql_query_value(p, sql, &value);

	*exists = ok && value != NULL && strcmp(value, "t") == 0;
	free(value);
	free(sql);
	free(regclass);
	return ok;
}

char *
ob_slotmark_setup_sql(const ob_config *cfg, const char *role)
{
	/* The schema as written (config.c keeps names as configured). */
	return ob_xasprintf(
	    "CREATE TABLE IF NOT EXISTS \"%s\"." OB_SLOTMARK_TABLE
	    " (slot_name text PRIMARY KEY, created_at timestamptz NOT NULL "
	    "DEFAULT now()); GRANT SELECT, INSERT, DELETE ON \"%s\"." OB_SLOTMARK_TABLE
	    " TO \"%s\";",
	    cfg->outbox.schema, cfg->outbox.schema, role);
}

ob_pg_status
ob_slotmark_read(ob_pgconn *p, const ob_config *cfg, bool *marked, char *since, size_t since_len)
{
	char *table = table_sql(p, cfg);
	char *slot = ob_pgsql_quote_literal(p, cfg->pg.slot);
	char *sql = NULL, *value = NULL;
	ob_pg_status st = OB_PG_RETRY;
	bool exists;

	*marked = false;
	since[0] = '\0';
	if (!table_exists(p, table, &exists))
		goto done;
	if (!exists) {
		st = OB_PG_OK;
		goto done;
	}
	sql = ob_xasprintf("SELECT created_at::text FROM %s WHERE slot_name = %s", table, slot);
	if (!ob_pgsql_query_value(p, sql, &value))
		goto done;
	*marked = value != NULL;
	snprintf(since, since_len, "%s", value ? value : "");
	st = OB_PG_OK;
done:
	free(value);
	free(sql);
	free(slot);
	free(table);
	return st;
}

ob_pg_status
ob_slotmark_check(ob_pgconn *p, const ob_config *cfg, char *detail, size_t detail_len)
{
	char *table = table_sql(p, cfg);
	char *regclass = ob_pgsql_quote_literal(p, table);
	char *schema = ob_pgsql_quote_literal(p, cfg->outbox.schema);
	char *sql = ob_xasprintf(
	    "SELECT CASE WHEN to_regclass(%s) IS NULL THEN CASE WHEN "
	    "has_schema_privilege(%s, 'CREATE') THEN 'create' ELSE 'missing' END WHEN "
	    "has_table_privilege(%s, 'SELECT') AND has_table_privilege(%s, 'INSERT') AND "
	    "has_table_privilege(%s, 'DELETE') THEN 'ok' ELSE 'denied' END",
	    regclass, schema, regclass, regclass, regclass);
	char *fix = ob_slotmark_setup_sql(cfg, "<outboxd's role>");
	char *value = NULL;
	ob_pg_status st = OB_PG_RETRY;

	if (!ob_pgsql_query_value(p, sql, &value) || value == NULL) {
		snprintf(detail, detail_len, "could not read table %s (see the log)", table);
	} else if (strcmp(value, "ok") == 0 || strcmp(value, "create") == 0) {
		snprintf(detail, detail_len, "%s %s", table,
			 value[0] == 'o' ? "is writable"
					 : "does not exist yet; outboxd will create it");
		st = OB_PG_OK;
	} else {
		snprintf(detail, detail_len,
			 "%s %s, and outboxd creates no slot without its row there: have the "
			 "schema's owner run %s",
			 table,
			 value[0] == 'm' ? "does not exist and this role may not create it"
					 : "is not writable by this role",
			 fix);
		st = OB_PG_FATAL;
	}
	free(value);
	free(fix);
	free(sql);
	free(schema);
	free(regclass);
	free(table);
	return st;
}

ob_pg_status
ob_slotmark_ready(ob_pgconn *p, const ob_config *cfg)
{
	char *table = table_sql(p, cfg);
	char *regclass = ob_pgsql_quote_literal(p, table);
	char *create = ob_xasprintf("CREATE TABLE IF NOT EXISTS %s (slot_name text PRIMARY KEY, "
				    "created_at timestamptz NOT NULL DEFAULT now())",
				    table);
	/* has_table_privilege() with a list asks for any one of them. */
	char *check = ob_xasprintf("SELECT to_regclass(%s) IS NOT NULL AND has_table_privilege(%s, "
				   "'SELECT') AND has_table_privilege(%s, 'INSERT') AND "
				   "has_table_privilege(%s, 'DELETE')",
				   regclass, regclass, regclass, regclass);
	char *may = NULL;
	ob_pg_status st = OB_PG_RETRY;

	if (!ob_pgsql_query_value(p, check, &may))
		goto done;
	if (may != NULL && strcmp(may, "t") == 0) {
		st = OB_PG_OK;
		goto done;
	}
	free(may);
	may = NULL;
	if (run(p, create, "create the slot marker table", OB_LOG_DEBUG) &&
	    ob_pgsql_query_value(p, check, &may) && may != NULL && strcmp(may, "t") == 0) {
		ob_info("created table %s, which marks the slots outboxd created", table);
		st = OB_PG_OK;
	} else {
		char *fix = ob_slotmark_setup_sql(cfg, "<outboxd's role>");

		ob_error("could not make sure of table %s, whose row for slot %s tells a first "
			 "start from a lost slot (deploy/README.md, \"Failover\"); outboxd creates "
			 "no slot "
			 "without it: have the schema's owner run %s (sql/outbox.sql and "
			 "sql/role.sql do)",
			 table, cfg->pg.slot, fix);
		free(fix);
		st = OB_PG_FATAL;
	}
done:
	free(may);
	free(check);
	free(create);
	free(regclass);
	free(table);
	return st;
}

/* INSERT the row, logging a failure at level. */
static bool
write_row(ob_pgconn *p, const ob_config *cfg, ob_log_level level)
{
	char *table = table_sql(p, cfg);
	char *slot = ob_pgsql_quote_literal(p, cfg->pg.slot);
	char *sql = ob_xasprintf("INSERT INTO %s (slot_name) VALUES (%s) ON CONFLICT DO NOTHING",
				 table, slot);
	bool ok = run(p, sql, "write the slot's row in the marker table", level);

	free(sql);
	free(slot);
	free(table);
	return ok;
}

bool
ob_slotmark_write(ob_pgconn *p, const ob_config *cfg)
{
	return write_row(p, cfg, OB_LOG_ERROR);
}

void
ob_slotmark_keep(ob_pgconn *p, const ob_config *cfg)
{
	static bool warned;

	if (!write_row(p, cfg, OB_LOG_DEBUG) && !warned) {
		ob_warn("slot %s has no row in %s." OB_SLOTMARK_TABLE ": if it is lost, outboxd "
			"cannot tell and would create a new one, skipping events (outboxd check "
			"names the fix)",
			cfg->pg.slot, cfg->outbox.schema);
		warned = true;
	}
}

bool
ob_slotmark_clear(ob_pgconn *p, const ob_config *cfg)
{
	char *table = table_sql(p, cfg);
	char *slot = ob_pgsql_quote_literal(p, cfg->pg.slot);
	char *sql = ob_xasprintf("DELETE FROM %s WHERE slot_name = %s", table, slot);
	bool exists = false;
	bool ok = table_exists(p, table, &exists);

	if (ok && exists)
		ok = run(p, sql, "delete the slot's row in the marker table", OB_LOG_ERROR);
	free(sql);
	free(slot);
	free(table);
	return ok;
}

void
ob_slotmark_log_lost(const ob_config *cfg, const char *since)
{
	ob_error("replication slot %s does not exist, but outboxd created it (at %s; its row in "
		 "%s." OB_SLOTMARK_TABLE "): the slot was lost (a failover to a standby without "
		 "a copy of it, a restore, or a drop), and a new one would start at the current "
		 "WAL position, skipping every event committed since; stopping. To recover, "
		 "start outboxd with outbox.backlog_where selecting the outbox rows not yet "
		 "published (for example created_at > the time of the last event consumers "
		 "received): it publishes them, then creates the slot (deploy/README.md, "
		 "\"Failover\"). To "
		 "start afresh, publishing none of them: DELETE FROM %s." OB_SLOTMARK_TABLE
		 " WHERE slot_name = '%s'",
		 cfg->pg.slot, since, cfg->outbox.schema, cfg->outbox.schema, cfg->pg.slot);
}
