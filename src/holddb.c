/*
 * holddb.c: the held keys' tables (holddb.h).
 */
#include "outboxd/holddb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/pgparams.h"

#define KEYS_SQL    "%I." OB_HOLD_KEYS_TABLE
#define EVENTS_SQL  "%I." OB_HOLD_EVENTS_TABLE
/* Rows per INSERT: their parameters stay far below the protocol's 65535. */
#define WRITE_CHUNK 500

#define KEYS_COLUMNS                                                                               \
	"slot_name text NOT NULL, topic text NOT NULL, key bytea NOT NULL, "                       \
	"held_behind text NOT NULL, reason text NOT NULL, error text NOT NULL, "                   \
	"held_from numeric NOT NULL, held_from_index bigint NOT NULL, "                            \
	"held_at timestamptz NOT NULL DEFAULT now(), release_requested_at timestamptz, "           \
	"release_include_failed boolean NOT NULL DEFAULT false, release_error text, "              \
	"released_through numeric, released_at timestamptz, PRIMARY KEY (slot_name, topic, key)"
#define EVENTS_COLUMNS                                                                             \
	"slot_name text NOT NULL, topic text NOT NULL, key bytea NOT NULL, "                       \
	"unit numeric NOT NULL, event_index bigint NOT NULL, failed boolean NOT NULL, "            \
	"event_id text NOT NULL, lsn pg_lsn NOT NULL, record bytea, "                              \
	"held_at timestamptz NOT NULL DEFAULT now(), "                                             \
	"PRIMARY KEY (slot_name, topic, key, unit, event_index)"

void
ob_hold_row_free(ob_hold_row *r)
{
	free(r->topic);
	free(r->key);
	free(r->event_id);
	free(r->record);
	free(r->behind);
	free(r->reason);
	free(r->error);
	memset(r, 0, sizeof(*r));
}

char *
ob_holddb_setup_sql(const ob_config *cfg, const char *role)
{
	const char *s = cfg->outbox.schema;

	return ob_xasprintf(
	    "CREATE TABLE IF NOT EXISTS \"%s\"." OB_HOLD_KEYS_TABLE " (" KEYS_COLUMNS
	    "); CREATE TABLE IF NOT EXISTS \"%s\"." OB_HOLD_EVENTS_TABLE " (" EVENTS_COLUMNS
	    "); GRANT SELECT, INSERT, UPDATE, DELETE ON \"%s\"." OB_HOLD_KEYS_TABLE
	    ", \"%s\"." OB_HOLD_EVENTS_TABLE " TO %s;",
	    s, s, s, s, role);
}

/* Whether both tables are there and this role may write them. */
static bool
tables_usable(ob_pgconn *p, const ob_config *cfg, bool *usable)
{
	return ob_pgsql_query_true(
	    p, usable,
	    "SELECT coalesce(bool_and(has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, "
	    "DELETE')), "
	    "false) AND count(*) = 2 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
	    "WHERE n.nspname = %L AND c.relname IN ('" OB_HOLD_KEYS_TABLE
	    "', '" OB_HOLD_EVENTS_TABLE "')",
	    cfg->outbox.schema);
}

ob_pg_status
ob_holddb_ready(ob_pgconn *p, const ob_config *cfg)
{
	bool usable;
	char *fix;

	if (!tables_usable(p, cfg, &usable))
		return OB_PG_RETRY;
	if (usable)
		return OB_PG_OK;
	if (ob_pgsql_command(p, OB_LOG_DEBUG, "create the held keys' tables",
			     "CREATE TABLE IF NOT EXISTS " KEYS_SQL " (" KEYS_COLUMNS ")",
			     cfg->outbox.schema) &&
	    ob_pgsql_command(p, OB_LOG_DEBUG, "create the held events' table",
			     "CREATE TABLE IF NOT EXISTS " EVENTS_SQL " (" EVENTS_COLUMNS ")",
			     cfg->outbox.schema) &&
	    tables_usable(p, cfg, &usable) && usable) {
		ob_info("created tables \"%s\"." OB_HOLD_KEYS_TABLE
			" and \"%s\"." OB_HOLD_EVENTS_TABLE
			", which keep the keys outbox.on_bad_event = hold_key holds",
			cfg->outbox.schema, cfg->outbox.schema);
		return OB_PG_OK;
	}
	fix = ob_holddb_setup_sql(cfg, "<outboxd's role>");
	ob_error("outbox.on_bad_event = hold_key keeps the held keys in tables "
		 "\"%s\"." OB_HOLD_KEYS_TABLE " and \"%s\"." OB_HOLD_EVENTS_TABLE
		 ", which are missing or not writable by this role: have the schema's owner run "
		 "%s (sql/outbox.sql and sql/role.sql do)",
		 cfg->outbox.schema, cfg->outbox.schema, fix);
	free(fix);
	return OB_PG_FATAL;
}

bool
ob_holddb_describe(ob_pgconn *p, const ob_config *cfg, bool *ok, char *line, size_t size)
{
	ob_pgres *res = NULL;
	bool usable, may_create;
	char *fix;

	if (!tables_usable(p, cfg, &usable) ||
	    !ob_pgsql_query_true(p, &may_create, "SELECT has_schema_privilege(%L, 'CREATE')",
				 cfg->outbox.schema))
		return false;
	*ok = usable || may_create;
	if (!usable) {
		fix = ob_holddb_setup_sql(cfg, "<outboxd's role>");
		snprintf(line, size,
			 may_create ? "tables missing: outboxd creates them at start"
				    : "tables missing or not writable: have the "
				      "schema's owner run %s",
			 fix);
		free(fix);
		return true;
	}
	if (!ob_pgsql_query_row(p, OB_LOG_ERROR, "count the held keys", 2, &res,
				"SELECT (SELECT count(*) FROM " KEYS_SQL
				" WHERE slot_name = %L AND released_through IS NULL), (SELECT "
				"count(*) FROM " EVENTS_SQL " WHERE slot_name = %L AND NOT failed)",
				cfg->outbox.schema, cfg->pg.slot, cfg->outbox.schema, cfg->pg.slot))
		return false;
	snprintf(line, size, "%s keys held, %s events behind them%s", ob_pgres_value(res, 0, 0),
		 ob_pgres_value(res, 0, 1),
		 strcmp(ob_pgres_value(res, 0, 0), "0") != 0 ? " (outboxd dlq list shows them)"
							     : "");
	ob_pgres_free(res);
	return true;
}

bool
ob_holddb_load(ob_pgconn *p, const ob_config *cfg, ob_pgres **res, long long *events)
{
	ob_pgres *count = NULL;
	bool ok = ob_pgsql_query_row(p, OB_LOG_ERROR, "count the held events", 1, &count,
				     "SELECT count(*) FROM " EVENTS_SQL
				     " WHERE slot_name = %L AND NOT failed",
				     cfg->outbox.schema, cfg->pg.slot);

	*res = NULL;
	if (ok)
		*events = strtoll(ob_pgres_value(count, 0, 0), NULL, 10);
	ob_pgres_free(count);
	return ok && ob_pgsql_query_rows(p, OB_LOG_ERROR, "read the held keys", 6, res,
					 "SELECT topic, encode(key, 'hex'), held_behind, "
					 "coalesce(released_through::text, ''), held_from::text, "
					 "held_from_index FROM " KEYS_SQL " WHERE slot_name = %L",
					 cfg->outbox.schema, cfg->pg.slot);
}

/* Run sql with p's parameters; false (logged at level as "could not
 * <what>") unless it succeeded. *held (may be NULL) counts the rows it
 * returned whose first column is false: held events, not dead letters. */
static bool
run(ob_pgconn *c, ob_log_level level, const char *what, const char *sql, ob_pgparams *p,
    long long *held)
{
	ob_pgres *res = ob_pgparams_exec(c, sql, p);
	bool ok = ob_pgres_command(res) || ob_pgres_tuples(res);
	char buf[512];

	for (int i = 0; ok && held != NULL && i < ob_pgres_rows(res); i++)
		*held += !ob_pgres_true(res, i, 0);
	if (!ok)
		ob_log(level, "could not %s: %s", what, ob_pgres_error(res, buf, sizeof(buf)));
	ob_pgres_free(res);
	ob_pgparams_clear(p);
	return ok;
}

/* The INSERT of rows [from, to) of kind new_key (keys) or all (events),
 * into p, as "VALUES ($1, …), (…)"; the caller frees the SQL. */
static char *
insert_sql(ob_pgconn *c, const ob_config *cfg, const ob_hold_row *rows, size_t from, size_t to,
	   bool keys, ob_pgparams *p, char (*units)[24], char (*lsns)[24])
{
	size_t cap = 256, len = 0;
	char *values = ob_xmalloc(cap), *sql;

	values[0] = '\0';
	for (size_t i = from; i < to; i++) {
		const ob_hold_row *r = &rows[i];
		int base = p->n;
		char row[160];
		int n;

		if (keys && !r->new_key)
			continue;
		ob_pgparams_text(p, cfg->pg.slot);
		ob_pgparams_text(p, r->topic);
		ob_pgparams_bytes(p, r->key, r->key_len);
		snprintf(units[i - from], sizeof(units[0]), "%" PRIu64, r->unit);
		if (keys) {
			ob_pgparams_text(p, r->behind);
			ob_pgparams_text(p, r->reason);
			ob_pgparams_text(p, r->error);
			ob_pgparams_text(p, units[i - from]);
			ob_pgparams_int(p, (long long)r->index);
			n = snprintf(row, sizeof(row), "%s($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
				     len ? ", " : "", base + 1, base + 2, base + 3, base + 4,
				     base + 5, base + 6, base + 7, base + 8);
		} else {
			snprintf(lsns[i - from], sizeof(lsns[0]), OB_LSN_FMT, OB_LSN_ARGS(r->lsn));
			ob_pgparams_text(p, units[i - from]);
			ob_pgparams_int(p, (long long)r->index);
			ob_pgparams_text(p, r->failed ? "t" : "f");
			ob_pgparams_text(p, r->event_id);
			ob_pgparams_text(p, lsns[i - from]);
			if (r->record != NULL)
				ob_pgparams_bytes(p, r->record, r->record_len);
			else
				ob_pgparams_text(p, NULL);
			n = snprintf(row, sizeof(row),
				     "%s($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
				     len ? ", " : "", base + 1, base + 2, base + 3, base + 4,
				     base + 5, base + 6, base + 7, base + 8, base + 9);
		}
		while (len + (size_t)n + 1 > cap)
			values = ob_xrealloc(values, cap *= 2);
		memcpy(values + len, row, (size_t)n + 1);
		len += (size_t)n;
	}
	if (len == 0) {
		free(values);
		return NULL;
	}
	sql = ob_pgsql_format(
	    c,
	    keys
		? "INSERT INTO " KEYS_SQL
		  " AS k (slot_name, topic, key, held_behind, reason, error, held_from, "
		  "held_from_index) VALUES %s ON CONFLICT (slot_name, topic, key) DO UPDATE SET "
		  "held_behind = EXCLUDED.held_behind, reason = EXCLUDED.reason, error = "
		  "EXCLUDED.error, held_from = EXCLUDED.held_from, held_from_index = "
		  "EXCLUDED.held_from_index, held_at = now(), release_requested_at = NULL, "
		  "release_error = NULL, released_through = NULL, released_at = NULL WHERE "
		  "k.released_through IS NOT NULL"
		: "INSERT INTO " EVENTS_SQL
		  " AS e (slot_name, topic, key, unit, event_index, failed, "
		  "event_id, lsn, record) VALUES %s ON CONFLICT (slot_name, topic, key, unit, "
		  "event_index) DO UPDATE SET failed = false, record = EXCLUDED.record, event_id = "
		  "EXCLUDED.event_id WHERE e.failed AND NOT EXCLUDED.failed RETURNING failed",
	    cfg->outbox.schema, values);
	free(values);
	return sql;
}

bool
ob_holddb_write(ob_pgconn *p, const ob_config *cfg, const ob_hold_row *rows, size_t n,
		ob_log_level level, long long *inserted)
{
	static char units[WRITE_CHUNK][24], lsns[WRITE_CHUNK][24];
	ob_pgparams params = {0};
	bool ok = ob_pgsql_command(p, level, "begin writing held events", "BEGIN");

	*inserted = 0;
	for (size_t from = 0; ok && from < n; from += WRITE_CHUNK) {
		size_t to = from + WRITE_CHUNK < n ? from + WRITE_CHUNK : n;

		for (int keys = 1; ok && keys >= 0; keys--) {
			char *sql =
			    insert_sql(p, cfg, rows, from, to, keys == 1, &params, units, lsns);

			if (sql != NULL)
				ok = run(p, level,
					 keys ? "write the held keys" : "write held events", sql,
					 &params, keys ? NULL : inserted);
			ob_pgparams_clear(&params);
			free(sql);
		}
	}
	ok = ok && ob_pgsql_command(p, level, "commit the held events", "COMMIT");
	if (!ok && ob_pgsql_in_transaction(p) &&
	    !ob_pgsql_command(p, OB_LOG_DEBUG, "roll back the held events", "ROLLBACK"))
		ob_debug("the held events' transaction is rolled back with its connection");
	ob_pgparams_free(&params);
	return ok;
}

bool
ob_holddb_next_release(ob_pgconn *p, const ob_config *cfg, bool *found, ob_pgres **res)
{
	bool ok = ob_pgsql_query_rows(
	    p, OB_LOG_ERROR, "read the releases asked for", 3, res,
	    "SELECT topic, encode(key, 'hex'), release_include_failed FROM " KEYS_SQL
	    " WHERE slot_name = %L AND release_requested_at IS NOT NULL "
	    "ORDER BY release_requested_at LIMIT 1",
	    cfg->outbox.schema, cfg->pg.slot);

	*found = ok && ob_pgres_rows(*res) == 1;
	return ok;
}

bool
ob_holddb_read_events(ob_pgconn *p, const ob_config *cfg, const char *topic, const char *key_hex,
		      const char *after_unit, const char *after_index, int limit, ob_pgres **res)
{
	char lim[16];

	snprintf(lim, sizeof(lim), "%d", limit);
	return ob_pgsql_query_rows(
	    p, OB_LOG_ERROR, "read the held events", 5, res,
	    "SELECT unit::text, event_index, failed, encode(record, 'hex'), event_id "
	    "FROM " EVENTS_SQL " WHERE slot_name = %L AND topic = %L AND key = decode(%L, 'hex') "
	    "AND (unit, event_index) > "
	    "(%L::numeric, %L::bigint) ORDER BY unit, event_index LIMIT %s",
	    cfg->outbox.schema, cfg->pg.slot, topic, key_hex, after_unit, after_index, lim);
}

bool
ob_holddb_delete_events(ob_pgconn *p, const ob_config *cfg, const char *topic, const char *key_hex,
			const char *unit, const char *index, long long *deleted)
{
	ob_pgres *res = NULL;
	bool ok = ob_pgsql_query_rows(
	    p, OB_LOG_ERROR, "delete released events", 1, &res,
	    "DELETE FROM " EVENTS_SQL " WHERE slot_name = %L AND topic = %L AND key = "
	    "decode(%L, 'hex') AND (unit, event_index) <= (%L::numeric, %L::bigint) RETURNING "
	    "failed",
	    cfg->outbox.schema, cfg->pg.slot, topic, key_hex, unit, index);

	*deleted = 0;
	for (int i = 0; ok && i < ob_pgres_rows(res); i++)
		*deleted += !ob_pgres_true(res, i, 0);
	ob_pgres_free(res);
	return ok;
}

bool
ob_holddb_finish_release(ob_pgconn *p, const ob_config *cfg, const char *topic, const char *key_hex,
			 ob_pos through, bool *done)
{
	char upto[24];
	long long n = 0;
	bool ok;

	snprintf(upto, sizeof(upto), "%" PRIu64, through);
	ok = ob_pgsql_command_count(
	    p, OB_LOG_ERROR, "end the release", &n,
	    "UPDATE " KEYS_SQL " k SET released_through = %L::numeric, released_at = now(), "
	    "release_requested_at = NULL WHERE slot_name = %L AND topic = %L AND key = "
	    "decode(%L, 'hex') AND released_through IS NULL AND NOT EXISTS (SELECT 1 "
	    "FROM " EVENTS_SQL
	    " e WHERE e.slot_name = k.slot_name AND e.topic = k.topic AND e.key = k.key)",
	    cfg->outbox.schema, upto, cfg->pg.slot, topic, key_hex, cfg->outbox.schema);
	*done = ok && n == 1;
	return ok;
}

bool
ob_holddb_forget_released(ob_pgconn *p, const ob_config *cfg)
{
	return ob_pgsql_command(p, OB_LOG_WARNING, "forget the keys released a day ago",
				"DELETE FROM " KEYS_SQL " WHERE slot_name = %L AND released_at < "
				"now() - interval '" OB_HOLD_RELEASED_KEPT "'",
				cfg->outbox.schema, cfg->pg.slot);
}

bool
ob_holddb_refuse_release(ob_pgconn *p, const ob_config *cfg, const char *topic, const char *key_hex,
			 const char *error)
{
	return ob_pgsql_command(p, OB_LOG_ERROR, "record why the release failed",
				"UPDATE " KEYS_SQL " SET release_requested_at = NULL, "
				"release_error = %L WHERE slot_name = %L AND topic = %L AND key = "
				"decode(%L, 'hex')",
				cfg->outbox.schema, error, cfg->pg.slot, topic, key_hex);
}
