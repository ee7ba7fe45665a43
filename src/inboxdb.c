/*
 * inboxdb.c: rows and positions of the inbox in one transaction (see
 * inboxdb.h).
 *
 * Statements are multi-row INSERTs with one parameter per column, sent
 * with ob_pgsql_exec_params(); payload_raw goes in binary, everything else as text
 * cast by the statement. A commit is four round trips whatever the batch
 * size: BEGIN, the rows, the positions, COMMIT.
 */
#include "outboxd/inboxdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/pgconnect.h"
#include "outboxd/pgparams.h"
#include "outboxd/pgsql.h"
#include "outboxd/sqlstate.h"

#define ROW_COLUMNS 9
#define POS_COLUMNS 6
#define INBOX_SQL   "sql/inbox.sql"

/* The consumer group every inbox used when inbox.group was left out,
 * before the default was derived from the inbox (inboxdb.h). */
#define OLD_DEFAULT_GROUP "outboxd-inbox"

struct ob_inboxdb {
	ob_pgconn *conn;
	char *group;
	long taken_over; /* positions of OLD_DEFAULT_GROUP taken over (or to be) */
	char *table;     /* the inbox table, quoted: "schema"."name" */
	char *offsets;   /* the offsets table, quoted */
};

/* The columns the inbox writes, in either table. */
static const char *const written_columns[] = {
    "id",          "topic",   "partition", "kafka_offset", "key",        "type",     "payload",
    "payload_raw", "headers", "group_id",  "next_offset",  "cluster_id", "topic_id",
};

/* True when res is a NOT NULL violation of a column the inbox does not
 * write: no record can ever be stored, since the table, not the data, is
 * wrong. */
static bool
unwritten_not_null(const ob_pgres *res)
{
	const char *column = ob_pgres_field_of(res, OB_PGRES_COLUMN);

	if (!ob_sqlstate_is(ob_pgres_field_of(res, OB_PGRES_SQLSTATE),
			    OB_SQLSTATE_NOT_NULL_VIOLATION) ||
	    column == NULL)
		return false;
	for (size_t i = 0; i < OB_ARRAY_LEN(written_columns); i++) {
		if (strcmp(column, written_columns[i]) == 0)
			return false;
	}
	return true;
}

/* What a failed result means. Connection trouble and refusals that pass
 * (shutdown, failover, serialization, resources) are retried; bad data is
 * a rejected row; a missing or different table needs an operator, and so
 * does a NOT NULL column the inbox does not write. */
static ob_inboxdb_status
classify(const ob_inboxdb *db, const ob_pgres *res)
{
	const char *state = ob_pgres_field_of(res, OB_PGRES_SQLSTATE);

	if (!ob_pgsql_connected(db->conn) || state == NULL)
		return OB_INBOXDB_RETRY;
	if (ob_sqlstate_is(state, OB_SQLSTATE_UNDEFINED_TABLE) ||
	    ob_sqlstate_is(state, OB_SQLSTATE_UNDEFINED_COLUMN) ||
	    ob_sqlstate_is(state, OB_SQLSTATE_INVALID_COLUMN_REFERENCE) || unwritten_not_null(res))
		return OB_INBOXDB_FATAL;
	if (ob_sqlstate_bad_data(state))
		return OB_INBOXDB_REJECTED;
	return OB_INBOXDB_RETRY;
}

/* Run sql with the parameters of p (NULL: none). */
static ob_pgres *
run(ob_inboxdb *db, const char *sql, ob_pgparams *p)
{
	return p == NULL ? ob_pgsql_exec(db->conn, sql) : ob_pgparams_exec(db->conn, sql, p);
}

/* Run one statement; on failure log it (unless it is a rejected row,
 * which the caller reports with the record), copy the message to error
 * and roll back. */
static ob_inboxdb_status
exec(ob_inboxdb *db, const char *what, const char *sql, ob_pgparams *p, int *affected, char *error,
     size_t error_len)
{
	ob_pgres *res = run(db, sql, p);
	ob_inboxdb_status st = OB_INBOXDB_OK;
	char buf[1024];

	if (ob_pgres_command(res) || ob_pgres_tuples(res)) {
		if (affected != NULL)
			*affected = (int)ob_pgres_affected(res);
		ob_pgres_free(res);
		return OB_INBOXDB_OK;
	}
	st = classify(db, res);
	ob_pgres_error(res, buf, sizeof(buf));
	if (error != NULL)
		snprintf(error, error_len, "%s", buf);
	if (st == OB_INBOXDB_FATAL && unwritten_not_null(res))
		ob_error("could not %s: %s; column \"%s\" of %s is NOT NULL without a default, "
			 "and outboxd does not write it: no record can be stored until the column "
			 "gets a default or drops NOT NULL; stopping",
			 what, buf, ob_pgres_field_of(res, OB_PGRES_COLUMN),
			 ob_pgres_field_of(res, OB_PGRES_TABLE));
	else if (st == OB_INBOXDB_FATAL)
		ob_error("could not %s: %s; create the tables with %s or fix inbox.table", what,
			 buf, INBOX_SQL);
	else if (st == OB_INBOXDB_RETRY)
		ob_error("could not %s: %s", what, buf);
	ob_pgres_free(res);
	if (ob_pgsql_connected(db->conn) && ob_pgsql_in_transaction(db->conn))
		ob_pgres_free(ob_pgsql_exec(db->conn, "ROLLBACK"));
	return st;
}

/* Check that both tables exist (FATAL with detail naming the SQL file)
 * and that this connection's role holds what the inbox's statements need:
 * SELECT and INSERT on the inbox table (INSERT ... ON CONFLICT DO
 * NOTHING), SELECT, INSERT and UPDATE on outboxd_inbox_offsets (the
 * positions' upsert); FATAL with detail naming the GRANT to run for the
 * first table that lacks one: without it every batch would fail with
 * "permission denied" while the inbox looked connected. */
static ob_inboxdb_status
check_tables(ob_inboxdb *db, const ob_config *cfg, char *detail, size_t detail_len)
{
	ob_pgparams p = {0};
	ob_pgres *res;
	ob_inboxdb_status st = OB_INBOXDB_OK;
	char buf[1024];

	/* to_regclass() of a quoted name: the configured names are taken as
	 * they are, like the statements that use them. The names shown are
	 * those a GRANT would be written with by hand: quoted only where they
	 * must be. */
	ob_pgparams_text(&p, db->table);
	ob_pgparams_text(&p, db->offsets);
	ob_pgparams_text(&p, cfg->inbox.schema);
	ob_pgparams_text(&p, cfg->inbox.table_name);
	res = run(db,
		  "SELECT t IS NOT NULL, o IS NOT NULL, quote_ident(current_user), "
		  "t IS NULL OR (has_table_privilege(t, 'SELECT') AND has_table_privilege(t, "
		  "'INSERT')), "
		  "o IS NULL OR (has_table_privilege(o, 'SELECT') AND has_table_privilege(o, "
		  "'INSERT') AND has_table_privilege(o, 'UPDATE')), "
		  "quote_ident($3) || '.' || quote_ident($4), quote_ident($3) || "
		  "'.outboxd_inbox_offsets' "
		  "FROM (SELECT to_regclass($1) AS t, to_regclass($2) AS o) AS r",
		  &p);
	if (!ob_pgres_tuples(res)) {
		snprintf(detail, detail_len, "could not look up the inbox tables: %s",
			 ob_pgres_error(res, buf, sizeof(buf)));
		st = OB_INBOXDB_RETRY;
	} else if (!ob_pgres_true(res, 0, 0) || !ob_pgres_true(res, 0, 1)) {
		snprintf(detail, detail_len,
			 "table %s does not exist; create the inbox tables with %s (or set "
			 "inbox.table)",
			 ob_pgres_value(res, 0, !ob_pgres_true(res, 0, 0) ? 5 : 6), INBOX_SQL);
		st = OB_INBOXDB_FATAL;
	} else if (!ob_pgres_true(res, 0, 3) || !ob_pgres_true(res, 0, 4)) {
		bool rows = !ob_pgres_true(res, 0, 3);
		const char *name = ob_pgres_value(res, 0, rows ? 5 : 6);

		snprintf(detail, detail_len,
			 "role %s may not write %s (it needs %s on it); run: GRANT %s ON TABLE "
			 "%s TO %s; (sql/inbox_role.sql grants all the inbox needs)",
			 ob_pgres_value(res, 0, 2), name,
			 rows ? "SELECT and INSERT" : "SELECT, INSERT and UPDATE",
			 rows ? "SELECT, INSERT" : "SELECT, INSERT, UPDATE", name,
			 ob_pgres_value(res, 0, 2));
		st = OB_INBOXDB_FATAL;
	}
	ob_pgres_free(res);
	ob_pgparams_free(&p);
	return st;
}

static char *
quote_name(ob_pgconn *conn, const char *schema, const char *name)
{
	char *s = ob_pgsql_quote_ident(conn, schema);
	char *n = ob_pgsql_quote_ident(conn, name);
	char *out = ob_xasprintf("%s.%s", s, n);

	free(s);
	free(n);
	return out;
}

/* The columns of outboxd_inbox_offsets that tables created by earlier
 * versions lack, and the one statement that adds them (ADD COLUMN IF NOT
 * EXISTS: a no-op for those there already). */
#define ADDED_COLUMNS "'cluster_id', 'topic_id'"
#define ADD_COLUMNS                                                                                \
	"ADD COLUMN IF NOT EXISTS cluster_id text, ADD COLUMN IF NOT EXISTS topic_id text"

/* Add the columns of ADDED_COLUMNS that the offsets table lacks, or, when
 * add is false (outboxd check changes nothing), only say they are
 * missing. FATAL with the statement in detail when the role may not alter
 * the table or add is false. */
static ob_inboxdb_status
add_columns(ob_inboxdb *db, bool add, char *detail, size_t detail_len)
{
	char *sql = ob_xasprintf("ALTER TABLE %s " ADD_COLUMNS, db->offsets);
	char *missing = NULL;
	ob_pgparams p = {0};
	ob_pgres *res;
	ob_inboxdb_status st = OB_INBOXDB_OK;
	char buf[1024];

	ob_pgparams_text(&p, db->offsets);
	res = run(
	    db,
	    "SELECT coalesce(string_agg(c, ', ' ORDER BY c), '') FROM unnest(ARRAY[" ADDED_COLUMNS
	    "]) AS c WHERE NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
	    "to_regclass($1) AND attname = c AND NOT attisdropped)",
	    &p);
	if (!ob_pgres_tuples(res)) {
		snprintf(detail, detail_len, "could not look up the inbox tables: %s",
			 ob_pgres_error(res, buf, sizeof(buf)));
		st = OB_INBOXDB_RETRY;
		goto out;
	}
	missing = ob_xstrdup(ob_pgres_value(res, 0, 0));
	ob_pgres_free(res);
	res = NULL;
	if (missing[0] == '\0')
		goto out;
	if (!add) {
		snprintf(detail, detail_len,
			 "%s lacks the column(s) %s: outboxd inbox adds them when it starts, if "
			 "its role may; or run \"%s\" as the table's owner",
			 db->offsets, missing, sql);
		st = OB_INBOXDB_FATAL;
		goto out;
	}
	res = ob_pgsql_exec(db->conn, sql);
	if (ob_pgres_command(res)) {
		ob_info("added the column(s) %s to %s", missing, db->offsets);
	} else {
		snprintf(detail, detail_len,
			 "%s lacks the column(s) %s and outboxd could not add them: %s; run "
			 "\"%s\" as the table's owner",
			 db->offsets, missing, ob_pgres_error(res, buf, sizeof(buf)), sql);
		st = ob_pgsql_connected(db->conn) ? OB_INBOXDB_FATAL : OB_INBOXDB_RETRY;
	}
out:
	ob_pgres_free(res);
	ob_pgparams_free(&p);
	free(missing);
	free(sql);
	return st;
}

/* The derived group takes over the positions stored under the old
 * default group, unless it has positions of its own (migrate; without it,
 * only count them): in one statement, so instances starting together
 * take them over once. */
static ob_inboxdb_status
take_over(ob_inboxdb *db, bool migrate, char *detail, size_t detail_len)
{
	char *from = ob_xasprintf("FROM %s WHERE group_id = $2 AND NOT EXISTS (SELECT 1 FROM %s "
				  "WHERE group_id = $1)",
				  db->offsets, db->offsets);
	char *sql = migrate ? ob_xasprintf("WITH t AS (INSERT INTO %s (group_id, topic, partition, "
					   "next_offset, cluster_id, topic_id) SELECT $1, topic, "
					   "partition, next_offset, cluster_id, topic_id %s ON "
					   "CONFLICT DO NOTHING "
					   "RETURNING 1) SELECT count(*) FROM t",
					   db->offsets, from)
			    : ob_xasprintf("SELECT count(*) %s", from);
	ob_pgparams p = {0};
	ob_pgres *res;
	ob_inboxdb_status st = OB_INBOXDB_OK;
	char buf[1024];

	ob_pgparams_text(&p, db->group);
	ob_pgparams_text(&p, OLD_DEFAULT_GROUP);
	res = run(db, sql, &p);
	if (!ob_pgres_tuples(res) || ob_pgres_rows(res) != 1) {
		snprintf(detail, detail_len, "could not take over the positions of group %s: %s",
			 OLD_DEFAULT_GROUP, ob_pgres_error(res, buf, sizeof(buf)));
		st = classify(db, res) == OB_INBOXDB_FATAL ? OB_INBOXDB_FATAL : OB_INBOXDB_RETRY;
	} else {
		db->taken_over = strtol(ob_pgres_value(res, 0, 0), NULL, 10);
	}
	if (st == OB_INBOXDB_OK && migrate && db->taken_over > 0)
		ob_info("consumer group %s took over the %ld positions stored under %s (the "
			"default group before inbox.group was derived); %s keeps them as they were",
			db->group, db->taken_over, OLD_DEFAULT_GROUP, OLD_DEFAULT_GROUP);
	ob_pgres_free(res);
	ob_pgparams_free(&p);
	free(sql);
	free(from);
	return st;
}

/* db->group: inbox.group, or derived from the database (as the server
 * names it) and the table (inboxdb.h). */
static ob_inboxdb_status
resolve_group(ob_inboxdb *db, const ob_config *cfg, bool migrate, char *detail, size_t detail_len)
{
	char *name = NULL;

	if (cfg->inbox.group[0] != '\0') {
		db->group = ob_xstrdup(cfg->inbox.group);
		return OB_INBOXDB_OK;
	}
	if (!ob_pgsql_query_value(db->conn, "SELECT current_database()", &name) || name == NULL) {
		snprintf(detail, detail_len, "could not read the name of the inbox database");
		free(name);
		return OB_INBOXDB_RETRY;
	}
	db->group = ob_xasprintf("%s.%s.%s.%s", OLD_DEFAULT_GROUP, name, cfg->inbox.schema,
				 cfg->inbox.table_name);
	free(name);
	return take_over(db, migrate, detail, detail_len);
}

ob_inboxdb_status
ob_inboxdb_connect(const ob_config *cfg, bool migrate, ob_inboxdb **out, char *detail,
		   size_t detail_len)
{
	ob_inboxdb *db = ob_xcalloc(1, sizeof(*db));
	ob_inboxdb_status st = OB_INBOXDB_RETRY;
	char local[1024];
	const char *fix;

	if (detail == NULL) {
		detail = local;
		detail_len = sizeof(local);
	}
	*out = NULL;
	detail[0] = '\0';
	if (ob_pgsql_connect(cfg, OB_PGCONN_INBOX, &db->conn) != OB_PG_OK) {
		/* Logged by pgconnect.c. */
		(void)ob_pgconnect_refusal(&fix);
		snprintf(detail, detail_len, "could not connect to the inbox database%s%s",
			 fix[0] != '\0' ? ": " : " (see the error above)", fix);
		ob_inboxdb_close(db);
		return OB_INBOXDB_RETRY;
	}
	db->table = quote_name(db->conn, cfg->inbox.schema, cfg->inbox.table_name);
	db->offsets = quote_name(db->conn, cfg->inbox.schema, "outboxd_inbox_offsets");
	st = check_tables(db, cfg, detail, detail_len);
	if (st == OB_INBOXDB_OK)
		st = add_columns(db, migrate, detail, detail_len);
	if (st == OB_INBOXDB_OK)
		st = resolve_group(db, cfg, migrate, detail, detail_len);
	if (st != OB_INBOXDB_OK)
		goto fail;
	*out = db;
	return OB_INBOXDB_OK;

fail:
	ob_error("%s", detail);
	ob_inboxdb_close(db);
	return st;
}

void
ob_inboxdb_close(ob_inboxdb *db)
{
	if (db == NULL)
		return;
	ob_pgsql_close(db->conn);
	free(db->group);
	free(db->table);
	free(db->offsets);
	free(db);
}

const char *
ob_inboxdb_group(const ob_inboxdb *db)
{
	return db->group;
}

void
ob_inboxdb_describe_group(const ob_inboxdb *db, const ob_config *cfg, char *buf, size_t size)
{
	snprintf(
	    buf, size, "%s (%s)%s", db->group,
	    cfg->inbox.group[0] != '\0' ? "inbox.group" : "derived from the database and the table",
	    db->taken_over > 0 ? "; it takes over the positions stored under " OLD_DEFAULT_GROUP
				 ", the default group of earlier versions, when outboxd "
				 "inbox starts"
			       : "");
}

void
ob_inboxdb_set_tick(ob_inboxdb *db, bool (*tick)(void *ctx), void *ctx)
{
	ob_pgsql_set_tick(db->conn, tick, ctx);
}

ob_inboxdb_status
ob_inboxdb_stored(ob_inboxdb *db, ob_inbox_position *pos, size_t n)
{
	char *sql =
	    ob_xasprintf("SELECT topic, partition, next_offset, cluster_id, topic_id FROM %s "
			 "WHERE group_id = $1",
			 db->offsets);
	ob_pgparams p = {0};
	ob_pgres *res;
	ob_inboxdb_status st = OB_INBOXDB_OK;
	char buf[1024];

	for (size_t i = 0; i < n; i++) {
		pos[i].next_offset = -1;
		pos[i].cluster_id[0] = '\0';
		pos[i].topic_id[0] = '\0';
	}
	ob_pgparams_text(&p, db->group);
	res = run(db, sql, &p);
	if (!ob_pgres_tuples(res)) {
		st = classify(db, res);
		ob_error("could not read the stored inbox positions: %s",
			 ob_pgres_error(res, buf, sizeof(buf)));
		if (st == OB_INBOXDB_REJECTED)
			st = OB_INBOXDB_RETRY;
		goto out;
	}
	for (int r = 0; r < ob_pgres_rows(res); r++) {
		for (size_t i = 0; i < n; i++) {
			if (strcmp(pos[i].topic, ob_pgres_value(res, r, 0)) != 0 ||
			    pos[i].partition != atoi(ob_pgres_value(res, r, 1)))
				continue;
			pos[i].next_offset = atoll(ob_pgres_value(res, r, 2));
			snprintf(pos[i].cluster_id, sizeof(pos[i].cluster_id), "%s",
				 ob_pgres_value(res, r, 3));
			snprintf(pos[i].topic_id, sizeof(pos[i].topic_id), "%s",
				 ob_pgres_value(res, r, 4));
		}
	}
out:
	ob_pgres_free(res);
	ob_pgparams_free(&p);
	free(sql);
	return st;
}

/* Append "($k::cast, ...)" for one tuple of columns starting at parameter
 * first (1-based). */
static void
put_tuple(char **sql, size_t *len, size_t *cap, int first, const char *const *casts, int n)
{
	for (int c = 0; c < n; c++) {
		char piece[48];
		int w = snprintf(piece, sizeof(piece), "%s$%d%s%s", c == 0 ? "(" : ", ", first + c,
				 casts[c], c == n - 1 ? ")" : "");

		if (*len + (size_t)w + 2 > *cap) {
			*cap = (*len + (size_t)w + 2) * 2;
			*sql = ob_xrealloc(*sql, *cap);
		}
		memcpy(*sql + *len, piece, (size_t)w + 1);
		*len += (size_t)w;
	}
}

/* The statement of a multi-row INSERT: head, tuples separated by commas,
 * tail. The caller frees. */
static char *
multi_row(const char *head, const char *tail, const char *const *casts, int columns, size_t rows)
{
	size_t cap = strlen(head) + strlen(tail) + rows * (size_t)columns * 16 + 16;
	char *sql = ob_xmalloc(cap);
	size_t len = (size_t)sprintf(sql, "%s", head);

	for (size_t r = 0; r < rows; r++) {
		if (r > 0)
			sql[len++] = ',';
		put_tuple(&sql, &len, &cap, (int)(r * (size_t)columns) + 1, casts, columns);
	}
	if (len + strlen(tail) + 1 > cap) {
		cap = len + strlen(tail) + 1;
		sql = ob_xrealloc(sql, cap);
	}
	strcpy(sql + len, tail);
	return sql;
}

static ob_inboxdb_status
insert_rows(ob_inboxdb *db, const ob_inbox_row *rows, size_t n, uint64_t *inserted, char *error,
	    size_t error_len)
{
	static const char *const casts[ROW_COLUMNS] = {
	    "::text", "::text",  "::int",   "::bigint", "::text",
	    "::text", "::jsonb", "::bytea", "::jsonb",
	};
	char *head = ob_xasprintf("INSERT INTO %s (id, topic, partition, kafka_offset, key, type, "
				  "payload, payload_raw, headers) VALUES ",
				  db->table);
	char *sql = multi_row(head, " ON CONFLICT (id) DO NOTHING", casts, ROW_COLUMNS, n);
	ob_pgparams p = {0};
	int affected = 0;
	ob_inboxdb_status st;

	for (size_t i = 0; i < n; i++) {
		const ob_inbox_row *r = &rows[i];

		ob_pgparams_text(&p, r->id);
		ob_pgparams_text(&p, r->topic);
		ob_pgparams_int(&p, r->partition);
		ob_pgparams_int(&p, r->offset);
		ob_pgparams_text(&p, r->key);
		ob_pgparams_text(&p, r->type);
		ob_pgparams_text(&p, r->payload_json);
		if (r->payload_raw != NULL)
			ob_pgparams_bytes(&p, r->payload_raw, r->payload_raw_len);
		else
			ob_pgparams_text(&p, NULL);
		ob_pgparams_text(&p, r->headers_json);
	}
	st = exec(db, "insert into the inbox table", sql, &p, &affected, error, error_len);
	*inserted = (uint64_t)affected;
	ob_pgparams_free(&p);
	free(sql);
	free(head);
	return st;
}

/* Upsert the n positions. With forward_only a stored position is
 * replaced only by a larger one; otherwise it is replaced whatever it was.
 * A cluster id not known keeps the stored one; a topic id goes with its
 * position, NULL when not known: a kept one might be that of the topic
 * before it was deleted and created again. */
static ob_inboxdb_status
store_positions(ob_inboxdb *db, const ob_inbox_position *pos, size_t n, bool forward_only,
		char *error, size_t error_len)
{
	static const char *const casts[POS_COLUMNS] = {"::text",   "::text", "::int",
						       "::bigint", "::text", "::text"};
	char *head = ob_xasprintf("INSERT INTO %s AS o (group_id, topic, partition, next_offset, "
				  "cluster_id, topic_id) VALUES ",
				  db->offsets);
	char *tail = ob_xasprintf(
	    " ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
	    "next_offset = EXCLUDED.next_offset, cluster_id = "
	    "coalesce(EXCLUDED.cluster_id, o.cluster_id), topic_id = EXCLUDED.topic_id, "
	    "updated_at = now()%s",
	    forward_only ? " WHERE o.next_offset < EXCLUDED.next_offset" : "");
	char *sql = multi_row(head, tail, casts, POS_COLUMNS, n);
	ob_pgparams p = {0};
	ob_inboxdb_status st;

	for (size_t i = 0; i < n; i++) {
		ob_pgparams_text(&p, db->group);
		ob_pgparams_text(&p, pos[i].topic);
		ob_pgparams_int(&p, pos[i].partition);
		ob_pgparams_int(&p, pos[i].next_offset);
		ob_pgparams_text(&p, pos[i].cluster_id[0] != '\0' ? pos[i].cluster_id : NULL);
		ob_pgparams_text(&p, pos[i].topic_id[0] != '\0' ? pos[i].topic_id : NULL);
	}
	st = exec(db, "store the inbox positions", sql, &p, NULL, error, error_len);
	ob_pgparams_free(&p);
	free(sql);
	free(tail);
	free(head);
	return st;
}

ob_inboxdb_status
ob_inboxdb_reset(ob_inboxdb *db, const ob_inbox_position *pos)
{
	char error[1024];

	return store_positions(db, pos, 1, false, error, sizeof(error));
}

ob_inboxdb_status
ob_inboxdb_commit(ob_inboxdb *db, const ob_inbox_row *rows, size_t n_rows,
		  const ob_inbox_position *pos, size_t n_pos, uint64_t *inserted, char *error,
		  size_t error_len)
{
	ob_inboxdb_status st;

	*inserted = 0;
	error[0] = '\0';
	st = exec(db, "begin an inbox transaction", "BEGIN", NULL, NULL, error, error_len);
	if (st == OB_INBOXDB_OK && n_rows > 0)
		st = insert_rows(db, rows, n_rows, inserted, error, error_len);
	if (st == OB_INBOXDB_OK && n_pos > 0)
		st = store_positions(db, pos, n_pos, true, error, error_len);
	if (st == OB_INBOXDB_OK)
		st =
		    exec(db, "commit an inbox transaction", "COMMIT", NULL, NULL, error, error_len);
	if (st != OB_INBOXDB_OK)
		*inserted = 0;
	else
		ob_debug("stored %zu record(s), %llu of them new, and %zu position(s)", n_rows,
			 (unsigned long long)*inserted, n_pos);
	return st;
}
