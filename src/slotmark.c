/*
 * slotmark.c: the row in outboxd_slots that says outboxd created its slot
 * (slotmark.h).
 */
#include "outboxd/slotmark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"

#define TABLE_SQL  OB_SLOTMARK_SQL
#define TABLE_NAME OB_SLOTMARK_FROM
/* The marker table in messages, as ob_slotmark_setup_sql() writes it: %s
 * takes the schema's name. */
#define TABLE_TEXT "\"%s\"." OB_SLOTMARK_TABLE

/* Whether the marker table exists, into *exists; false (logged) when the
 * query failed. */
static bool
table_exists(ob_pgconn *p, const ob_config *cfg, bool *exists)
{
	return ob_pgsql_query_true(
	    p, exists, "SELECT to_regclass(m.t) IS NOT NULL FROM " TABLE_NAME, cfg->outbox.schema);
}

/* Whether the marker table exists and this role may SELECT, INSERT and
 * DELETE its rows, into *may; false (logged) when the query failed. */
static bool
table_writable(ob_pgconn *p, const ob_config *cfg, bool *may)
{
	/* has_table_privilege() with a list asks for any one of them. */
	return ob_pgsql_query_true(
	    p, may,
	    "SELECT to_regclass(m.t) IS NOT NULL AND has_table_privilege(m.t, 'SELECT') AND "
	    "has_table_privilege(m.t, 'INSERT') AND has_table_privilege(m.t, 'DELETE') "
	    "FROM " TABLE_NAME,
	    cfg->outbox.schema);
}

char *
ob_slotmark_setup_sql(const ob_config *cfg, const char *role)
{
	/* The schema as written (config.c keeps names as configured). */
	return ob_xasprintf(
	    "CREATE TABLE IF NOT EXISTS \"%s\"." OB_SLOTMARK_TABLE " (" OB_SLOTMARK_COLUMNS
	    "); GRANT SELECT, INSERT, UPDATE, DELETE ON \"%s\"." OB_SLOTMARK_TABLE " TO \"%s\";",
	    cfg->outbox.schema, cfg->outbox.schema, role);
}

ob_pg_status
ob_slotmark_read(ob_pgconn *p, const ob_config *cfg, bool *marked, char *since, size_t since_len)
{
	char *value = NULL;
	bool exists;

	*marked = false;
	since[0] = '\0';
	if (!table_exists(p, cfg, &exists))
		return OB_PG_RETRY;
	if (!exists)
		return OB_PG_OK;
	if (!ob_pgsql_query_valuef(
		p, &value, "SELECT created_at::text FROM " TABLE_SQL " WHERE slot_name = %L",
		cfg->outbox.schema, cfg->pg.slot))
		return OB_PG_RETRY;
	*marked = value != NULL;
	snprintf(since, since_len, "%s", value ? value : "");
	free(value);
	return OB_PG_OK;
}

ob_pg_status
ob_slotmark_check(ob_pgconn *p, const ob_config *cfg, char *detail, size_t detail_len)
{
	char *value = NULL;
	ob_pg_status st = OB_PG_RETRY;

	if (!ob_pgsql_query_valuef(
		p, &value,
		"SELECT CASE WHEN to_regclass(m.t) IS NULL THEN CASE WHEN "
		"has_schema_privilege(%L, 'CREATE') THEN 'create' ELSE 'missing' END WHEN "
		"has_table_privilege(m.t, 'SELECT') AND has_table_privilege(m.t, 'INSERT') AND "
		"has_table_privilege(m.t, 'DELETE') THEN 'ok' ELSE 'denied' END FROM " TABLE_NAME,
		cfg->outbox.schema, cfg->outbox.schema) ||
	    value == NULL) {
		snprintf(detail, detail_len, "could not read table " TABLE_TEXT " (see the log)",
			 cfg->outbox.schema);
	} else if (strcmp(value, "missing") == 0 || strcmp(value, "denied") == 0) {
		char *fix = ob_slotmark_setup_sql(cfg, "<outboxd's role>");

		snprintf(detail, detail_len,
			 TABLE_TEXT " %s, and outboxd creates no slot without its row there: have "
				    "the schema's owner run %s",
			 cfg->outbox.schema,
			 value[0] == 'm' ? "does not exist and this role may not create it"
					 : "is not writable by this role",
			 fix);
		free(fix);
		st = OB_PG_FATAL;
	} else {
		snprintf(detail, detail_len, TABLE_TEXT " %s", cfg->outbox.schema,
			 value[0] == 'o' ? "is writable"
					 : "does not exist yet; outboxd will create it");
		st = OB_PG_OK;
	}
	free(value);
	return st;
}

ob_pg_status
ob_slotmark_ready(ob_pgconn *p, const ob_config *cfg)
{
	char *fix;
	bool may;

	if (!table_writable(p, cfg, &may))
		return OB_PG_RETRY;
	if (may)
		return OB_PG_OK;
	if (ob_pgsql_command(p, OB_LOG_DEBUG, "create the slot marker table",
			     "CREATE TABLE IF NOT EXISTS " TABLE_SQL " (" OB_SLOTMARK_COLUMNS ")",
			     cfg->outbox.schema) &&
	    table_writable(p, cfg, &may) && may) {
		ob_info("created table " TABLE_TEXT ", which marks the slots outboxd created",
			cfg->outbox.schema);
		return OB_PG_OK;
	}
	fix = ob_slotmark_setup_sql(cfg, "<outboxd's role>");
	ob_error("could not make sure of table " TABLE_TEXT ", whose row for slot %s tells a first "
		 "start from a lost slot (deploy/README.md, \"Failover\"); outboxd creates no slot "
		 "without it: have the schema's owner run %s (sql/outbox.sql and sql/role.sql do)",
		 cfg->outbox.schema, cfg->pg.slot, fix);
	free(fix);
	return OB_PG_FATAL;
}

/* INSERT the row, logging a failure at level. */
static bool
write_row(ob_pgconn *p, const ob_config *cfg, ob_log_level level)
{
	return ob_pgsql_command(p, level, "write the slot's row in the marker table",
				"INSERT INTO " TABLE_SQL
				" (slot_name) VALUES (%L) ON CONFLICT DO NOTHING",
				cfg->outbox.schema, cfg->pg.slot);
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
	bool exists = false;
	bool ok = table_exists(p, cfg, &exists);

	if (ok && exists)
		ok = ob_pgsql_command(p, OB_LOG_ERROR, "delete the slot's row in the marker table",
				      "DELETE FROM " TABLE_SQL " WHERE slot_name = %L",
				      cfg->outbox.schema, cfg->pg.slot);
	return ok;
}

void
ob_slotmark_log_lost(const ob_config *cfg, const char *since, const char *outcome)
{
	ob_error("replication slot %s does not exist, but outboxd created it (at %s; its row in "
		 "%s." OB_SLOTMARK_TABLE "): the slot was lost (a failover to a standby without "
		 "a copy of it, a restore, or a drop), and a new one would start at the current "
		 "WAL position, skipping every event committed since; %s. To recover, bring the "
		 "slot back if a server still has it (a PostgreSQL 17+ standby whose synced copy "
		 "is ready, promoted), or " OB_SLOTMARK_RECOVERY ". Without slot create: outboxd "
		 "run with that outbox.backlog_where does as the first, and DELETE FROM "
		 "%s." OB_SLOTMARK_TABLE " WHERE slot_name = '%s', then outboxd run, as the "
		 "second",
		 cfg->pg.slot, since, cfg->outbox.schema, outcome, cfg->outbox.schema,
		 cfg->pg.slot);
}
