/*
 * partitions.c: reading the leaf partitions of the outbox table, once per
 * stream on the replication connection and about every second on a plain
 * connection while the stream runs (see partitions.h for the contract).
 */
#include "outboxd/partitions.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/publication.h"

/* The message of a failed result, without libpq's trailing newline. */
static void
result_error(const PGresult *res, char *err, size_t errlen)
{
	const char *msg = PQresultErrorMessage(res);
	size_t len;

	snprintf(err, errlen, "%s", msg != NULL && msg[0] != '\0' ? msg : "no answer");
	len = strlen(err);
	while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' '))
		err[--len] = '\0';
}

/* The position read first: the current WAL insert position. */
static bool
read_position(ob_pgrepl *p, ob_lsn *lsn, char *err, size_t errlen)
{
	PGresult *res = ob_pgrepl_exec(p, "SELECT pg_current_wal_insert_lsn()");
	bool ok =
	    PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 1;

	if (!ok)
		result_error(res, err, errlen);
	else if (!(ok = ob_lsn_parse(PQgetvalue(res, 0, 0), lsn)))
		snprintf(err, errlen, "unexpected WAL insert position \"%s\"",
			 PQgetvalue(res, 0, 0));
	PQclear(res);
	return ok;
}

/* The leaves and the table itself, in a statement of its own. A table
 * that is neither partitioned nor a partition has no partition tree: it
 * is added by name. */
static bool
read_leaves(ob_pgrepl *p, const ob_config *cfg, ob_leafset *set, char *err, size_t errlen)
{
	char *schema = ob_pgrepl_quote_literal(p, cfg->outbox.schema);
	char *table = ob_pgrepl_quote_literal(p, cfg->outbox.table_name);
	char *sql = ob_xasprintf(
	    "SELECT n.nspname, c.relname, t.isleaf, t.level = 0 "
	    "FROM pg_partition_tree(format('%%I.%%I', %s, %s)::regclass) t "
	    "JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
	    "WHERE t.isleaf OR t.level = 0",
	    schema, table);
	PGresult *res = ob_pgrepl_exec(p, sql);
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQnfields(res) == 4;

	if (!ok)
		result_error(res, err, errlen);
	ob_leafset_add(set, cfg->outbox.schema, cfg->outbox.table_name);
	for (int i = 0; ok && i < PQntuples(res); i++) {
		bool leaf = strcmp(PQgetvalue(res, i, 2), "t") == 0;
		bool root = strcmp(PQgetvalue(res, i, 3), "t") == 0;

		ob_leafset_add(set, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
		if (root)
			set->partitioned = !leaf;
	}
	PQclear(res);
	free(sql);
	free(table);
	free(schema);
	return ok;
}

bool
ob_partitions_read(ob_pgrepl *p, const ob_config *cfg, ob_leafset *set, char *err, size_t errlen)
{
	ob_lsn verified = 0;

	ob_leafset_clear(set);
	/* Two statements, in this order: see partitions.h. */
	if (!read_position(p, &verified, err, errlen))
		return false;
	if (cfg->pg.plugin == OB_PLUGIN_PGOUTPUT) {
		/* pgoutput follows partitions itself; what can change under
		 * it is the publication. */
		ob_leafset_add(set, cfg->outbox.schema, cfg->outbox.table_name);
		if (!ob_publication_stamp(p, cfg, set->stamp, sizeof(set->stamp), err, errlen))
			return false;
	} else if (!read_leaves(p, cfg, set, err, errlen)) {
		return false;
	}
	set->verified = verified;
	return true;
}

void
ob_partwatch_init(ob_partwatch *w, const ob_config *cfg, ob_pgrepl_tick_fn tick, void *ctx)
{
	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->tick = tick;
	w->tick_ctx = ctx;
	w->backoff_ms = OB_PARTITIONS_INTERVAL_MS;
}

bool
ob_partwatch_failing(const ob_partwatch *w)
{
	return w->failing;
}

void
ob_partwatch_close(ob_partwatch *w)
{
	ob_pgrepl_close(w->conn, false);
	w->conn = NULL;
	w->next_ms = 0;
}

bool
ob_partwatch_read(ob_partwatch *w, ob_leafset *set, char *err, size_t errlen)
{
	if (w->conn == NULL) {
		if (ob_pgrepl_connect_plain(w->cfg, &w->conn) != OB_PG_OK) {
			snprintf(err, errlen, "no connection (see above)");
			return false;
		}
		ob_pgrepl_set_tick(w->conn, w->tick, w->tick_ctx);
	}
	return ob_partitions_read(w->conn, w->cfg, set, err, errlen);
}

bool
ob_partwatch_poll(ob_partwatch *w, ob_leafset *set)
{
	const char *what = w->cfg->pg.plugin == OB_PLUGIN_PGOUTPUT ? "publication" : "partitions";
	int64_t now = ob_mono_ms();
	char err[512];

	if (now < w->next_ms)
		return false;
	if (ob_partwatch_read(w, set, err, sizeof(err))) {
		if (w->failing)
			ob_info("read the %s of %s.%s again", what, w->cfg->outbox.schema,
				w->cfg->outbox.table_name);
		w->failing = false;
		w->backoff_ms = OB_PARTITIONS_INTERVAL_MS;
		w->next_ms = now + OB_PARTITIONS_INTERVAL_MS;
		return true;
	}
	if (!w->failing)
		ob_warn("could not read the %s of %s.%s: %s; the slot is not confirmed further "
			"until they are read, and the stream ends until then",
			what, w->cfg->outbox.schema, w->cfg->outbox.table_name, err);
	w->failing = true;
	ob_pgrepl_close(w->conn, false);
	w->conn = NULL;
	w->next_ms = now + w->backoff_ms;
	w->backoff_ms *= 2;
	if (w->backoff_ms > w->cfg->pg.reconnect_max_backoff_ms)
		w->backoff_ms = w->cfg->pg.reconnect_max_backoff_ms;
	return false;
}
