/*
 * slotcreate.c: `outboxd slot create`: the slot is looked at first, a
 * healthy one left alone, a lost or invalidated one replaced only with
 * --accept-gap (slotcreate.h).
 */
#include "outboxd/slotcreate.h"

#include <stdio.h>
#include <string.h>

#include "outboxd/check.h"
#include "outboxd/log.h"
#include "outboxd/pgrepl.h"
#include "outboxd/relay.h"
#include "outboxd/runtime.h"
#include "outboxd/slotmark.h"
#include "outboxd/slotprep.h"

/* The slot as slot create finds it. */
typedef struct found {
	ob_slot_info info;
	bool invalidated; /* info.exists, with wal_status lost */
	bool lost;        /* missing, and its marker row is there */
	char since[64];   /* when lost: when outboxd created the slot */
} found;

/* With --if-not-exists, the slot info (healthy, of the configured plugin)
 * stays, and with postgres.slot_failover it gets FAILOVER as when outboxd
 * takes it, unless a process holds it (that process turns it on when it
 * next takes the slot). Returns the exit code. */
static int
keep_existing_slot(ob_pgconn *pg, const ob_config *cfg, const ob_slot_info *info)
{
	bool standby;

	if (!ob_pgrepl_in_recovery(pg, &standby))
		return OB_EXIT_OPERATOR;
	if (!ob_pgrepl_lacks_failover(pg, cfg, info, standby)) {
		ob_info("replication slot %s exists already; nothing to do", cfg->pg.slot);
		return OB_EXIT_OK;
	}
	/* PostgreSQL 17's ALTER_REPLICATION_SLOT waits for a slot in use to
	 * be released: leave a held slot to its holder. */
	if (info->active_pid != 0) {
		ob_info("replication slot %s exists already, without FAILOVER; process %d holds "
			"it, and outboxd turns FAILOVER on when it next takes the slot",
			cfg->pg.slot, info->active_pid);
		return OB_EXIT_OK;
	}
	switch (ob_pgrepl_set_failover(pg, cfg->pg.slot)) {
	case OB_PG_OK:
		return OB_EXIT_OK;
	case OB_PG_STANDBY:
		ob_info("replication slot %s exists already, without FAILOVER; another process "
			"holds it, and outboxd turns FAILOVER on when it next takes the slot",
			cfg->pg.slot);
		return OB_EXIT_OK;
	default:
		return OB_EXIT_OPERATOR;
	}
}

/* A healthy slot is there: left alone. Returns the exit code. */
static int
existing_slot(ob_pgconn *pg, const ob_config *cfg, const ob_slot_info *info, bool if_not_exists)
{
	if (!if_not_exists) {
		ob_error("could not create replication slot %s: it already exists (with "
			 "--if-not-exists, slot create leaves it alone and exits 0)",
			 cfg->pg.slot);
		return OB_EXIT_OPERATOR;
	}
	if (!ob_pgrepl_slot_being_made(info) &&
	    strcmp(info->plugin, ob_plugin_name(cfg->pg.plugin)) != 0) {
		ob_error("replication slot %s uses plugin %s, but postgres.plugin is "
			 "%s: " OB_PLUGIN_SWITCH_HINT,
			 cfg->pg.slot, ob_pgrepl_slot_plugin(info), ob_plugin_name(cfg->pg.plugin));
		return OB_EXIT_OPERATOR;
	}
	return keep_existing_slot(pg, cfg, info);
}

/* Read the slot and, when it is missing on a primary, its marker row
 * into *f. False (logged) when a query failed. */
static bool
find_slot(ob_pgconn *pg, const ob_config *cfg, found *f)
{
	bool standby;

	memset(f, 0, sizeof(*f));
	if (!ob_pgrepl_slot_info(pg, cfg->pg.slot, &f->info) ||
	    !ob_pgrepl_in_recovery(pg, &standby))
		return false;
	f->invalidated = f->info.exists && strcmp(f->info.wal_status, "lost") == 0;
	/* On a hot standby the marker is neither read nor written. */
	return f->info.exists || standby ||
	       ob_slotmark_read(pg, cfg, &f->lost, f->since, sizeof(f->since)) == OB_PG_OK;
}

/* The slot was lost or invalidated and --accept-gap is not given:
 * refuse, naming the recovery. */
static void
refuse(const ob_config *cfg, const found *f)
{
	if (f->lost) {
		ob_slotmark_log_lost(cfg, f->since, "no slot was created");
		return;
	}
	ob_error("replication slot %s has been invalidated (wal_status lost): it cannot stream "
		 "again, and events committed after its confirmed position " OB_LSN_FMT
		 " are published only by a recovery; it was left as it is (--accept-gap drops "
		 "it before it creates the new one). To recover, " OB_SLOTMARK_RECOVERY
		 "; and raise max_slot_wal_keep_size",
		 cfg->pg.slot, OB_LSN_ARGS(f->info.confirmed_flush));
}

/* The slot is replaced as --accept-gap asks: say what the new slot skips
 * and, when no backlog publishes it, how a backlog would. */
static void
warn_gap(const ob_config *cfg, const found *f)
{
	char what[160];

	if (f->lost)
		snprintf(what, sizeof(what), "was lost (outboxd created it at %s)", f->since);
	else
		snprintf(what, sizeof(what),
			 "has been invalidated (wal_status lost, confirmed up to " OB_LSN_FMT
			 ") and is dropped",
			 OB_LSN_ARGS(f->info.confirmed_flush));
	if (cfg->outbox.backlog_where[0] != '\0')
		ob_warn("replication slot %s %s; replacing it as --accept-gap asks, after "
			"publishing the outbox rows of outbox.backlog_where \"%s\": events "
			"committed between the loss and now that it does not select are not "
			"published",
			cfg->pg.slot, what, cfg->outbox.backlog_where);
	else
		ob_warn("replication slot %s %s; replacing it as --accept-gap asks: the new slot "
			"starts at the current WAL position, and events committed between the "
			"loss and now are not published. To publish them, outbox.backlog_where "
			"must select them when the slot is created: outboxd slot drop, then "
			"outboxd slot create -s \"outbox.backlog_where=created_at > '<the time of "
			"the loss>'\"",
			cfg->pg.slot, what);
}

/* Create the missing slot (replace: in place of a lost one), with its
 * backlog when outbox.backlog_where is set. Returns the exit code. */
static int
create(ob_pgconn *pg, const ob_config *cfg, bool replace, bool if_not_exists)
{
	ob_pg_status st;

	if (cfg->outbox.backlog_where[0] != '\0')
		return ob_relay_create_slot(cfg);
	/* The table, and pgoutput's publication, which must exist before
	 * the slot: pgoutput reads it as of each change. */
	st = ob_check_database(pg, cfg, NULL);
	if (st == OB_PG_OK)
		st = ob_slotprep_create_marked(pg, cfg, replace, NULL);
	/* OB_PG_STANDBY: another process created it meanwhile (logged). */
	return st == OB_PG_OK || (st == OB_PG_STANDBY && if_not_exists) ? OB_EXIT_OK
									: OB_EXIT_OPERATOR;
}

int
ob_slotcreate_run(const ob_config *cfg, bool if_not_exists, bool accept_gap)
{
	ob_pgconn *pg = NULL;
	found f;
	int rc = OB_EXIT_OPERATOR;

	if (ob_pgrepl_connect(cfg, &pg) != OB_PG_OK)
		return OB_EXIT_OPERATOR;
	if (!find_slot(pg, cfg, &f))
		goto out;
	if (ob_pgrepl_slot_elsewhere(pg, &f.info)) {
		/* Slot names are the cluster's: no flag makes this one ours. */
		ob_error("could not create replication slot %s: a slot of that name belongs to "
			 "database %s: " OB_SLOT_ELSEWHERE_FIX,
			 cfg->pg.slot, f.info.database, f.info.database);
		goto out;
	}
	if (f.info.exists && !f.invalidated) {
		rc = existing_slot(pg, cfg, &f.info, if_not_exists);
		goto out;
	}
	if ((f.lost || f.invalidated) && !accept_gap) {
		refuse(cfg, &f);
		goto out;
	}
	if (f.lost || f.invalidated)
		warn_gap(cfg, &f);
	/* The tables are checked before the invalidated slot goes, so a
	 * missing one leaves it. */
	if (f.invalidated && (ob_check_database(pg, cfg, NULL) != OB_PG_OK ||
			      !ob_pgrepl_drop_slot(pg, cfg->pg.slot)))
		goto out;
	rc = create(pg, cfg, f.lost || f.invalidated, if_not_exists);
out:
	ob_pgrepl_close(pg, false);
	return rc;
}
