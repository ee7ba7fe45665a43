/*
 * publication.c: check, and create when missing, the publication pgoutput
 * streams (publication.h).
 */
#include "outboxd/publication.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/sqlstate.h"

/* Append name to buf as an SQL identifier, quoted unless it is plain. */
static void
append_ident(char *buf, size_t size, const char *name)
{
	size_t len = strlen(buf);
	bool plain = name[0] != '\0' && strchr("0123456789", name[0]) == NULL &&
		     strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(name);

	if (plain) {
		snprintf(buf + len, size - len, "%s", name);
		return;
	}
	if (len + 1 < size)
		buf[len++] = '"';
	for (const char *s = name; *s != '\0' && len + 3 < size; s++) {
		if (*s == '"')
			buf[len++] = '"';
		buf[len++] = *s;
	}
	if (len + 1 < size)
		buf[len++] = '"';
	buf[len] = '\0';
}

/* schema.table as SQL. */
static void
table_sql(const ob_config *cfg, char *buf, size_t size)
{
	buf[0] = '\0';
	append_ident(buf, size, cfg->outbox.schema);
	strncat(buf, ".", size - strlen(buf) - 1);
	append_ident(buf, size, cfg->outbox.table_name);
}

const char *
ob_publication_actions(bool partitioned)
{
	return partitioned ? "insert, delete" : "insert";
}

char *
ob_publication_create_sql(const ob_config *cfg, bool partitioned)
{
	char table[300];

	table_sql(cfg, table, sizeof(table));
	/* config.c allows only [a-z0-9_] in publication names. */
	return ob_xasprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = '%s', "
			    "publish_via_partition_root = true);",
			    cfg->pg.publication, table, ob_publication_actions(partitioned));
}

/* What pg_publication and pg_publication_tables say of the publication
 * and the outbox table. */
typedef struct pub_state {
	bool exists;
	bool inserts;     /* it publishes inserts */
	bool via_root;    /* publish_via_partition_root */
	bool has_table;   /* the outbox table is in it, under its own name */
	bool whole;       /* with every column and no row filter */
	bool may_create;  /* the role owns the table and may create in the database */
	bool partitioned; /* the outbox table is partitioned */
	bool standby;     /* the server is a hot standby: nothing can be created there */
} pub_state;

/* The condition that the publication sends every column of the outbox
 * table (a column list, if any, names them all: without one the published
 * columns follow the table's) and every row (no row filter). Row filters
 * and column lists came with PostgreSQL 15. Generated columns are left
 * out of the comparison: pgoutput does not send them (unless PostgreSQL
 * 18's publish_generated_columns says so), check.c refuses a mapped one,
 * and pg_publication_tables.attnames names them on 15 but not from 16 on,
 * where counting them made a publication of the whole table look like a
 * column list. */
static const char *
whole_table(ob_pgconn *pg)
{
	return ob_pgsql_server_version(pg) >= 150000
		   ? "(t.rowfilter IS NULL AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE "
		     "a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND "
		     "a.attgenerated = '' AND a.attname <> ALL (t.attnames)))"
		   : "true";
}

/* SELECT the expressions columns (which it frees) over the outbox table
 * c (in namespace n), the publication p and the publication's row t for
 * the table (p and t NULL when missing). No row when the table is
 * missing. The caller clears the result. */
static ob_pgres *
query_publication(ob_pgconn *pg, const ob_config *cfg, char *columns)
{
	char *sql = ob_pgsql_format(
	    pg,
	    "SELECT %s FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
	    "LEFT JOIN pg_publication p ON p.pubname = %L "
	    "LEFT JOIN pg_publication_tables t ON t.pubname = p.pubname AND t.schemaname = "
	    "n.nspname AND t.tablename = c.relname WHERE n.nspname = %L AND c.relname = %L",
	    columns, cfg->pg.publication, cfg->outbox.schema, cfg->outbox.table_name);
	ob_pgres *res = ob_pgsql_exec(pg, sql);

	free(sql);
	free(columns);
	return res;
}

/* Read pub_state; false (logged) when the query failed. */
static bool
read_state(ob_pgconn *pg, const ob_config *cfg, pub_state *st)
{
	ob_pgres *res = query_publication(
	    pg, cfg,
	    ob_xasprintf("p.oid IS NOT NULL, p.pubinsert, p.pubviaroot, t.pubname IS NOT NULL, "
			 "%s, pg_has_role(c.relowner, 'USAGE') AND "
			 "has_database_privilege(current_database(), 'CREATE'), c.relkind = 'p', "
			 "pg_is_in_recovery()",
			 whole_table(pg)));
	bool ok = ob_pgres_tuples(res) && ob_pgres_rows(res) == 1;
	char err[1024];

	memset(st, 0, sizeof(*st));
	if (!ok) {
		ob_error("could not read publication %s: %s", cfg->pg.publication,
			 ob_pgres_tuples(res) ? "the outbox table is gone"
					      : ob_pgres_error(res, err, sizeof(err)));
	} else {
		st->exists = ob_pgres_true(res, 0, 0);
		st->inserts = ob_pgres_true(res, 0, 1);
		st->via_root = ob_pgres_true(res, 0, 2);
		st->has_table = ob_pgres_true(res, 0, 3);
		st->whole = ob_pgres_true(res, 0, 4);
		st->may_create = ob_pgres_true(res, 0, 5);
		st->partitioned = ob_pgres_true(res, 0, 6);
		st->standby = ob_pgres_true(res, 0, 7);
	}
	ob_pgres_free(res);
	return ok;
}

bool
ob_publication_stamp(ob_pgconn *pg, const ob_config *cfg, char *stamp, size_t stamp_len, char *err,
		     size_t errlen)
{
	ob_pgres *res = query_publication(
	    pg, cfg,
	    ob_xasprintf("CASE WHEN p.oid IS NULL THEN 'missing' ELSE concat_ws('/', "
			 "p.pubinsert, p.pubviaroot, t.pubname IS NOT NULL, %s) END",
			 whole_table(pg)));
	bool ok = ob_pgres_tuples(res);
	char msg[1024];

	if (!ok)
		snprintf(err, errlen, "could not read publication %s: %s", cfg->pg.publication,
			 ob_pgres_error(res, msg, sizeof(msg)));
	else
		snprintf(stamp, stamp_len, "%s",
			 ob_pgres_rows(res) == 1 ? ob_pgres_value(res, 0, 0) : "no outbox table");
	ob_pgres_free(res);
	return ok;
}

typedef enum create_result {
	CREATED,
	RACED, /* another process created it meanwhile */
	FAILED,
} create_result;

/* CREATE PUBLICATION; FAILED is logged. Several outboxd started at once
 * race to create it: the losers get duplicate_object, or unique_violation
 * on the catalog's index. */
static create_result
create(ob_pgconn *pg, const ob_config *cfg, const char *sql)
{
	ob_pgres *res = ob_pgsql_exec(pg, sql);
	const char *state = ob_pgres_field_of(res, OB_PGRES_SQLSTATE);
	create_result out = FAILED;
	char err[1024];

	if (ob_pgres_command(res)) {
		ob_info("created publication %s: %s", cfg->pg.publication, sql);
		out = CREATED;
	} else if (ob_sqlstate_is(state, OB_SQLSTATE_DUPLICATE_OBJECT) ||
		   ob_sqlstate_is(state, OB_SQLSTATE_UNIQUE_VIOLATION)) {
		ob_info("publication %s was created by another process meanwhile",
			cfg->pg.publication);
		out = RACED;
	} else {
		ob_error("could not create publication %s: %s", cfg->pg.publication,
			 ob_pgres_error(res, err, sizeof(err)));
	}
	ob_pgres_free(res);
	return out;
}

ob_pg_status
ob_publication_prepare(ob_pgconn *pg, const ob_config *cfg, bool slot_exists, bool create_missing,
		       char *detail, size_t detail_len)
{
	const char *name = cfg->pg.publication;
	char *create_sql;
	char table[300];
	pub_state st;
	ob_pg_status result = OB_PG_FATAL;
	bool ok;

	table_sql(cfg, table, sizeof(table));
	ok = read_state(pg, cfg, &st);
	create_sql = ob_publication_create_sql(cfg, st.partitioned);
	if (ok && !st.exists && !slot_exists && create_missing && st.may_create && !st.standby) {
		switch (create(pg, cfg, create_sql)) {
		case CREATED:
			snprintf(detail, detail_len, "%s created", name);
			result = OB_PG_OK;
			goto done;
		case RACED: /* theirs is checked like any other */
			ok = read_state(pg, cfg, &st);
			break;
		case FAILED:
			snprintf(detail, detail_len,
				 "could not create publication %s (see the log); "
				 "have the table's owner run: %s",
				 name, create_sql);
			goto done;
		}
	}
	if (!ok) {
		snprintf(detail, detail_len, "could not read publication %s (see the log)", name);
		result = OB_PG_RETRY;
	} else if (!st.exists && slot_exists) {
		/* Postgres decodes the slot's changes with the publications of
		 * their time: one created now does not cover what the slot
		 * already holds. */
		snprintf(detail, detail_len,
			 "%s does not exist but replication slot %s does: a publication made now "
			 "would not cover the changes the slot already holds; run %s then drop the "
			 "slot (\"outboxd slot drop\") and start outboxd with outbox.backlog_where "
			 "to publish the rows written since the slot was made",
			 name, cfg->pg.slot, create_sql);
	} else if (!st.exists && st.standby) {
		snprintf(detail, detail_len,
			 "%s does not exist, and the server is a hot standby, where it cannot be "
			 "created: run on the primary: %s",
			 name, create_sql);
	} else if (!st.exists) {
		snprintf(detail, detail_len,
			 st.may_create
			     ? "%s does not exist yet; outboxd will create it: %s"
			     : "%s does not exist and this role may not create it (it must "
			       "own the table); have the table's owner run: %s",
			 name, create_sql);
		result = st.may_create ? OB_PG_OK : OB_PG_FATAL;
	} else if (!st.inserts || (st.partitioned && !st.via_root)) {
		snprintf(detail, detail_len,
			 "%s does not publish every insert under the table's name; run: ALTER "
			 "PUBLICATION %s SET (publish = '%s', publish_via_partition_root = true);",
			 name, name, ob_publication_actions(st.partitioned));
	} else if (!st.has_table) {
		snprintf(detail, detail_len,
			 "%s does not include %s; run: ALTER PUBLICATION %s ADD "
			 "TABLE %s;",
			 name, table, name, table);
	} else if (!st.whole) {
		snprintf(detail, detail_len,
			 "%s publishes %s with a row filter or a column list, "
			 "which would leave events out; run: ALTER PUBLICATION %s SET TABLE %s;",
			 name, table, name, table);
	} else {
		snprintf(detail, detail_len, "%s publishes the inserts of %s", name, table);
		result = OB_PG_OK;
	}
done:
	free(create_sql);
	return result;
}
