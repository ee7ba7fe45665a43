/*
 * failover.c: reading whether the slot survives a promotion (failover.h).
 */
#include "outboxd/failover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/pgconnect.h"

/* The setting's names as a text[] expression (spaces dropped). */
#define STANDBY_SLOTS_ARRAY                                                                        \
	"string_to_array(replace(coalesce(current_setting('synchronized_standby_slots', true), "   \
	"''), ' ', ''), ',')"

/* Fill st->verdict and st->why from what was read. */
static void
judge(const ob_config *cfg, ob_failover_state *st)
{
	st->verdict = OB_FAILOVER_NOT_READY;
	if (st->slot_exists && !st->flag) {
		snprintf(st->why, sizeof(st->why),
			 "slot %s has no FAILOVER: outboxd turns it on when it next takes the slot "
			 "(or run ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication "
			 "connection)",
			 cfg->pg.slot, cfg->pg.slot);
	} else if (st->standby_slots[0] == '\0') {
		snprintf(st->why, sizeof(st->why),
			 "synchronized_standby_slots is not set on the primary, so the slot may "
			 "confirm WAL no standby has and outboxd publish events a promoted standby "
			 "never had: ALTER SYSTEM SET synchronized_standby_slots = '<the standby's "
			 "physical slot>'; SELECT pg_reload_conf();");
	} else if (!st->standby_streams) {
		snprintf(st->why, sizeof(st->why),
			 "synchronized_standby_slots names %s, but no standby streams from such a "
			 "physical slot (the stream waits for it): start the standby with "
			 "primary_slot_name naming it, or correct the setting",
			 st->standby_slots);
	} else {
		st->verdict = OB_FAILOVER_READY;
		snprintf(st->why, sizeof(st->why),
			 "slot %s has FAILOVER%s, and a standby streams from %s "
			 "(synchronized_standby_slots)",
			 cfg->pg.slot, st->slot_exists ? "" : " once created", st->standby_slots);
	}
}

bool
ob_failover_read(ob_pgconn *p, const ob_config *cfg, ob_failover_state *st)
{
	int v = ob_pgsql_server_version(p);
	ob_pgres *res;
	bool standby;
	char what[256];

	memset(st, 0, sizeof(*st));
	st->verdict = OB_FAILOVER_NA;
	if (!cfg->pg.slot_failover) {
		snprintf(st->why, sizeof(st->why), "postgres.slot_failover is false");
		return true;
	}
	if (v < OB_FAILOVER_MIN_SERVER) {
		snprintf(
		    st->why, sizeof(st->why),
		    "PostgreSQL %d has no failover slots (17+): a promoted standby has no copy "
		    "of the slot unless a failover manager keeps one (Patroni's permanent "
		    "slots), and outboxd then stops naming the recovery (deploy/README.md, "
		    "\"Failover\")",
		    v / 10000);
		return true;
	}
	if (!ob_pgrepl_in_recovery(p, &standby))
		return false;
	if (standby) {
		snprintf(st->why, sizeof(st->why),
			 "outboxd decodes on a hot standby, whose own slots cannot be failover "
			 "slots");
		return true;
	}
	snprintf(what, sizeof(what), "read the failover settings of replication slot %s",
		 cfg->pg.slot);
	if (!ob_pgsql_query_row(
		p, OB_LOG_ERROR, what, 4, &res,
		"SELECT s.slot_name IS NOT NULL, coalesce(s.failover, false), "
		"coalesce(current_setting('synchronized_standby_slots', true), ''), EXISTS (SELECT "
		"1 FROM pg_replication_slots ph WHERE ph.slot_type = 'physical' AND ph.active AND "
		"ph.slot_name = ANY (" STANDBY_SLOTS_ARRAY ")) "
		"FROM (SELECT 1) AS one LEFT JOIN pg_replication_slots s ON s.slot_name = %L",
		cfg->pg.slot))
		return false;
	st->slot_exists = ob_pgres_true(res, 0, 0);
	st->flag = ob_pgres_true(res, 0, 1) || !st->slot_exists; /* created with it */
	snprintf(st->standby_slots, sizeof(st->standby_slots), "%s", ob_pgres_value(res, 0, 2));
	st->standby_streams = ob_pgres_true(res, 0, 3);
	judge(cfg, st);
	ob_pgres_free(res);
	return true;
}

/* The standby p has no copy of the slot: name the settings it lacks
 * (primary_conninfo, which only a superuser may read, is named as a
 * reminder). */
static void
missing_copy(ob_pgconn *p, const ob_config *cfg, char *detail, size_t detail_len)
{
	char *missing = NULL;
	bool ok = ob_pgsql_query_value(
	    p,
	    "SELECT concat_ws(', ', CASE WHEN current_setting('sync_replication_slots') <> 'on' "
	    "THEN 'sync_replication_slots = on' END, CASE WHEN "
	    "current_setting('hot_standby_feedback') <> 'on' THEN 'hot_standby_feedback = on' "
	    "END, CASE WHEN current_setting('primary_slot_name') = '' THEN 'primary_slot_name' "
	    "END)",
	    &missing);

	snprintf(detail, detail_len,
		 "the standby has no copy of slot %s: set there %s%sand dbname in "
		 "primary_conninfo (slot sync needs all of sync_replication_slots = on, "
		 "hot_standby_feedback = on, primary_slot_name and that dbname)",
		 cfg->pg.slot, ok && missing != NULL && missing[0] != '\0' ? missing : "",
		 ok && missing != NULL && missing[0] != '\0' ? ", " : "");
	free(missing);
}

void
ob_failover_standby_copy(const ob_config *cfg, ob_lsn primary_confirmed, bool *seen, bool *ready,
			 char *detail, size_t detail_len)
{
	char *conninfo = ob_pgconnect_standby_conninfo(cfg->pg.conninfo);
	ob_config on_standby = *cfg;
	ob_pgconn *p = NULL;
	ob_slot_info info;

	*seen = *ready = false;
	if (conninfo == NULL) {
		snprintf(detail, detail_len,
			 "no standby in sight (postgres.conninfo names one host): check on the "
			 "standby that pg_replication_slots shows slot %s with synced true and "
			 "temporary false",
			 cfg->pg.slot);
		return;
	}
	on_standby.pg.conninfo = conninfo;
	if (ob_pgsql_connect(&on_standby, OB_PGCONN_PLAIN, &p) != OB_PG_OK) {
		snprintf(detail, detail_len,
			 "no standby among the hosts of postgres.conninfo answered");
	} else if (ob_pgrepl_slot_info(p, cfg->pg.slot, &info)) {
		*seen = true;
		*ready = info.exists && info.synced && !info.temporary;
		if (!info.exists)
			missing_copy(p, cfg, detail, detail_len);
		else if (!info.synced || info.temporary)
			snprintf(detail, detail_len,
				 "the standby's copy of slot %s is not sync-ready yet (a temporary "
				 "copy is dropped at promotion; it is persisted once the primary's "
				 "slot moves past the standby's position)",
				 cfg->pg.slot);
		else
			snprintf(detail, detail_len,
				 "the standby's copy of slot %s is synced, confirmed " OB_LSN_FMT
				 " (%lld bytes behind the primary's; published again after a "
				 "promotion)",
				 cfg->pg.slot, OB_LSN_ARGS(info.confirmed_flush),
				 (long long)(primary_confirmed > info.confirmed_flush
						 ? primary_confirmed - info.confirmed_flush
						 : 0));
	} else {
		snprintf(detail, detail_len, "could not read the standby's slots (see the log)");
	}
	ob_pgsql_close(p);
	free(conninfo);
}
