/*
 * slotprep.c: the slot before a stream starts (slotprep.h).
 */
#include "outboxd/slotprep.h"

#include <string.h>

#include "outboxd/log.h"
#include "outboxd/pglayer.h"
#include "outboxd/slotmark.h"

/* The slot is lost as how says: on a primary (not standby) whose
 * operator chose on_slot_lost = recover, say so to the caller (true);
 * otherwise false, and the caller logs the refusal. */
static bool
to_recover(const ob_config *cfg, bool standby, ob_slot_loss how, ob_slot_loss *loss)
{
	if (loss == NULL || !cfg->pg.recover_lost_slot || standby)
		return false;
	*loss = how;
	return true;
}

/* With postgres.create_slot = false, a missing slot whose marker row is
 * there was lost, not never made: with on_slot_lost = recover it is
 * recovered as a running process would (slotrecover.h makes the slot
 * whatever create_slot says). OB_PG_FATAL with *loss set then; OB_PG_RETRY
 * on a failed query; OB_PG_OK when it is not to be recovered (the caller
 * refuses the missing slot). */
static ob_pg_status
lost_with_create_off(ob_pgconn *p, const ob_config *cfg, bool standby, ob_slot_loss *loss)
{
	char since[64];
	bool marked = false;
	ob_pg_status st;

	if (loss == NULL || standby || !cfg->pg.recover_lost_slot)
		return OB_PG_OK;
	if ((st = ob_slotmark_read(p, cfg, &marked, since, sizeof(since))) != OB_PG_OK)
		return st;
	return marked && to_recover(cfg, standby, OB_SLOT_LOSS_MISSING, loss) ? OB_PG_FATAL
									      : OB_PG_OK;
}

ob_pg_status
ob_slotprep_create_marked(ob_pgconn *p, const ob_config *cfg, bool replace_lost, ob_slot_loss *loss)
{
	char since[64];
	bool marked = false, standby;
	ob_pg_status st;

	if (!ob_pgrepl_in_recovery(p, &standby))
		return OB_PG_RETRY;
	if (!standby) {
		if ((st = ob_slotmark_ready(p, cfg)) != OB_PG_OK ||
		    (st = ob_slotmark_read(p, cfg, &marked, since, sizeof(since))) != OB_PG_OK)
			return st;
		/* Another process writes the row after it created the slot:
		 * with the row there, a slot there now is theirs. */
		if (marked && !replace_lost) {
			ob_slot_info info;

			if (!ob_pgrepl_slot_info(p, cfg->pg.slot, &info))
				return OB_PG_RETRY;
			if (info.exists) {
				ob_info(
				    "replication slot %s was created by another process meanwhile",
				    cfg->pg.slot);
				return OB_PG_STANDBY;
			}
			if (!to_recover(cfg, standby, OB_SLOT_LOSS_MISSING, loss))
				ob_slotmark_log_lost(cfg, since, "stopping");
			return OB_PG_FATAL;
		}
	}
	st = ob_pgrepl_create_slot(p, cfg->pg.slot, cfg->pg.plugin,
				   ob_pgrepl_failover_wanted(p, cfg, standby));
	/* A row not written now is written on the next connection. */
	if (st == OB_PG_OK && !standby && !ob_slotmark_write(p, cfg))
		st = OB_PG_RETRY;
	return st;
}

ob_pg_status
ob_slotprep_prepare(ob_pgconn *p, const ob_config *cfg, bool streamed, ob_lsn confirmed,
		    ob_slot_loss *loss)
{
	const char *slot = cfg->pg.slot;
	const char *db = PQdb(p->conn);
	ob_slot_info info;
	bool standby;

	*loss = OB_SLOT_LOSS_NONE;
	if (!ob_pgrepl_slot_info(p, slot, &info) || !ob_pgrepl_in_recovery(p, &standby))
		return OB_PG_RETRY;
	if (!info.exists && streamed) {
		if (to_recover(cfg, standby, OB_SLOT_LOSS_MISSING, loss))
			return OB_PG_FATAL;
		/* Recreating it would start at the current WAL position and skip
		 * every event since the confirmed one without a word. */
		ob_error("replication slot %s no longer exists (dropped, or a failover to a "
			 "server without it): events committed after " OB_LSN_FMT
			 " may not have been published; stopping. To recover, start outboxd with "
			 "outbox.backlog_where set to select the outbox rows written since then "
			 "(deploy/README.md, \"Recovering from a lost or invalidated slot\"), or "
			 "let it recover by itself with postgres.on_slot_lost = recover",
			 slot, OB_LSN_ARGS(confirmed));
		return OB_PG_FATAL;
	}
	if (!info.exists && !cfg->pg.create_slot) {
		ob_pg_status st = lost_with_create_off(p, cfg, standby, loss);

		if (st != OB_PG_OK)
			return st;
		ob_error("replication slot %s does not exist; create it with "
			 "\"outboxd slot create\" or set postgres.create_slot = true",
			 slot);
		return OB_PG_FATAL;
	}
	if (!info.exists)
		return ob_slotprep_create_marked(p, cfg, false, loss);
	if (ob_pgrepl_slot_being_made(&info))
		return OB_PG_STANDBY;
	if (strcmp(info.plugin, ob_plugin_name(cfg->pg.plugin)) != 0) {
		ob_error("replication slot %s uses plugin %s, but postgres.plugin is "
			 "%s: " OB_PLUGIN_SWITCH_HINT,
			 slot, ob_pgrepl_slot_plugin(&info), ob_plugin_name(cfg->pg.plugin));
		return OB_PG_FATAL;
	}
	if (ob_pgrepl_slot_elsewhere(p, &info)) {
		ob_error(
		    "replication slot %s belongs to database %s, not %s: " OB_SLOT_ELSEWHERE_FIX,
		    slot, info.database, db, info.database);
		return OB_PG_FATAL;
	}
	if (strcmp(info.wal_status, "lost") == 0) {
		if (to_recover(cfg, standby, OB_SLOT_LOSS_INVALIDATED, loss))
			return OB_PG_FATAL;
		ob_error("replication slot %s has been invalidated (wal_status lost): events "
			 "written since " OB_LSN_FMT
			 " may be lost; stopping. To recover, " OB_SLOTMARK_RECOVERY
			 "; and raise max_slot_wal_keep_size",
			 slot, OB_LSN_ARGS(info.confirmed_flush));
		return OB_PG_FATAL;
	}
	if (info.active_pid != 0)
		return OB_PG_STANDBY;
	/* A promoted standby's copy trails the old primary's slot. */
	if (streamed && info.confirmed_flush < confirmed)
		ob_info("replication slot %s is confirmed up to " OB_LSN_FMT " here, %llu bytes "
			"before this process's position " OB_LSN_FMT
			" (a promoted standby's copy trails): what lies between was published "
			"already and is read again, not published again",
			slot, OB_LSN_ARGS(info.confirmed_flush),
			(unsigned long long)(confirmed - info.confirmed_flush),
			OB_LSN_ARGS(confirmed));
	/* A slot made before the marker was: mark it now (a role that may
	 * not write the table is told by `outboxd check`). */
	if (!standby)
		ob_slotmark_keep(p, cfg);
	if (ob_pgrepl_lacks_failover(p, cfg, &info, standby))
		return ob_pgrepl_set_failover(p, slot);
	return OB_PG_OK;
}
