/*
 * slotsave.c: the slot's confirmed position marked for the next
 * checkpoint after a clean stop (see slotsave.h).
 */
#include "outboxd/slotsave.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outboxd/log.h"
#include "outboxd/pgsql.h"
#include "outboxd/sqlstate.h"

/* How long the walsender of the stream just ended may keep the slot. */
#define RELEASE_WAIT_MS 3000
#define RELEASE_POLL_MS 50
/* The advance decodes from the slot's restart_lsn: bounded, so a stop
 * never waits long on it. */
#define ADVANCE_TIMEOUT "10s"

/* Advance the slot to its own confirmed position on p. *busy says the
 * walsender still holds it. */
static bool
advance(ob_pgconn *p, const ob_config *cfg, bool *busy, char *err, size_t errlen)
{
	char *sql = ob_pgsql_format(
	    p,
	    "SELECT pg_replication_slot_advance(slot_name, confirmed_flush_lsn) FROM "
	    "pg_replication_slots WHERE slot_name = %L AND database = current_database() AND "
	    "confirmed_flush_lsn IS NOT NULL",
	    cfg->pg.slot);
	ob_pgres *res = ob_pgsql_exec(p, sql);
	bool ok = ob_pgres_tuples(res);
	const char *state = ob_pgres_field_of(res, OB_PGRES_SQLSTATE);

	*busy = !ok && state != NULL && strcmp(state, OB_SQLSTATE_OBJECT_IN_USE) == 0;
	if (!ok)
		snprintf(err, errlen, "%s", ob_pgsql_keep_error(p, res));
	ob_pgres_free(res);
	free(sql);
	return ok;
}

bool
ob_slotsave_needed(int server_version)
{
	return server_version < 170000;
}

bool
ob_slotsave_mark(const ob_config *cfg)
{
	ob_pgconn *p = NULL;
	char err[512] = "no connection (see above)";
	bool ok = false, busy = true, standby = false;

	if (ob_pgsql_connect(cfg, OB_PGCONN_PLAIN, &p) != OB_PG_OK)
		goto out;
	if (!ob_pgsql_query_true(p, &standby, "SELECT pg_is_in_recovery()") ||
	    !ob_pgsql_command(p, OB_LOG_WARNING, "set a statement timeout",
			      "SET statement_timeout = '" ADVANCE_TIMEOUT "'")) {
		snprintf(err, sizeof(err), "see above");
		goto out;
	}
	if (standby) {
		ok = true;
		goto out;
	}
	for (int waited = 0; busy && waited <= RELEASE_WAIT_MS; waited += RELEASE_POLL_MS) {
		ok = advance(p, cfg, &busy, err, sizeof(err));
		if (busy)
			nanosleep(&(struct timespec){0, RELEASE_POLL_MS * 1000 * 1000}, NULL);
	}
out:
	if (!ok)
		ob_warn("could not mark slot %s's confirmed position to be saved at the next "
			"checkpoint: %s; if PostgreSQL restarts before the slot is saved, the "
			"events since its last save are published again",
			cfg->pg.slot, err);
	else
		ob_debug("slot %s's confirmed position is saved at the next checkpoint",
			 cfg->pg.slot);
	ob_pgsql_close(p);
	return ok;
}
