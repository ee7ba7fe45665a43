/*
 * checkslot.c: `outboxd check`'s lines about replication and the slot:
 * the role's REPLICATION, the slot (or whether one can be made, and
 * whether a missing one was lost), failover readiness and the WAL the slot
 * may retain (checker.h).
 */
#include "outboxd/checker.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outboxd/failover.h"
#include "outboxd/log.h"
#include "outboxd/recpointdb.h"
#include "outboxd/slotmark.h"
#include "outboxd/sqlstate.h"

/* Read the slot's state into c->slot, once; false (reported) when the
 * query failed. */
bool
ob_checker_read_slot(ob_checker *c)
{
	if (c->slot_read)
		return true;
	if (!ob_pgrepl_slot_info(c->pg, c->cfg->pg.slot, &c->slot)) {
		c->query_failed = true;
		ob_checker_report(c, "slot", false,
				  "could not read pg_replication_slots" OB_CHECK_SEE_THE_LOG);
		return false;
	}
	c->slot_read = true;
	return true;
}

static void
check_replication(ob_checker *c)
{
	char *repl = NULL;

	if (ob_checker_query(
		c, "replication role",
		"SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
		&repl))
		ob_checker_report(
		    c, "replication role", repl != NULL && strcmp(repl, "t") == 0, "%s",
		    repl != NULL && strcmp(repl, "t") == 0
			? "current user may replicate"
			: "current user lacks REPLICATION; ALTER ROLE ... REPLICATION "
			  "(sql/role.sql)");
	free(repl);
}

/* What to do about a temporary slot the server would not create, by its
 * SQLSTATE: the cause, not every possible one; NULL when it is none of
 * those (the server's message says it). */
static const char *
slot_failure_fix(const ob_checker *c, const char *state)
{
	if (ob_sqlstate_is(state, OB_SQLSTATE_OBJECT_NOT_IN_PREREQUISITE))
		return "wal_level is not logical (see the wal_level line)";
	if (ob_sqlstate_is(state, OB_SQLSTATE_CONFIGURATION_LIMIT))
		return "no replication slot is free: raise max_replication_slots or drop an "
		       "unused slot";
	if (ob_sqlstate_is(state, OB_SQLSTATE_UNDEFINED_FILE) &&
	    c->cfg->pg.plugin == OB_PLUGIN_WAL2JSON)
		return "the server has no wal2json: install it (" OB_WAL2JSON_PACKAGE_HINT ")";
	return NULL;
}

/* Whether the row that marks the slot as made can be written (slotmark.h),
 * before outboxd creates the slot; not on a hot standby, where it is
 * neither read nor written. */
static void
check_marker(ob_checker *c)
{
	char detail[1024];
	bool standby;
	ob_pg_status st;

	if (!ob_pgrepl_in_recovery(c->pg, &standby) || standby)
		return;
	st = ob_slotmark_check(c->pg, c->cfg, detail, sizeof(detail));
	if (st == OB_PG_RETRY)
		c->query_failed = true;
	ob_checker_report(c, "slot marker", st == OB_PG_OK, "%s", detail);
}

/* The recovery point kept in the slot's row (recpointdb.h). */
static void
check_recovery_point(ob_checker *c)
{
	char detail[1024];
	ob_pg_status st = ob_recpointdb_describe(c->pg, c->cfg, detail, sizeof(detail));

	if (st == OB_PG_RETRY)
		c->query_failed = true;
	ob_checker_report(c, "recovery point", st == OB_PG_OK, "%s", detail);
}

/* Whether the missing slot was lost: its marker row is there
 * (slotmark.h), written at since. Never on a hot standby, where the
 * marker is not read. */
static bool
slot_lost(ob_checker *c, char *since, size_t since_len)
{
	bool standby, marked = false;

	if (!ob_pgrepl_in_recovery(c->pg, &standby)) {
		c->query_failed = true;
		return false;
	}
	if (!standby && ob_slotmark_read(c->pg, c->cfg, &marked, since, since_len) != OB_PG_OK)
		c->query_failed = true;
	return marked;
}

/* The slot, or whether one could be created: a temporary slot proves
 * that the output plugin loads and that a slot is free. */
static void
check_slot(ob_checker *c)
{
	const ob_config *cfg = c->cfg;
	const char *plugin = ob_plugin_name(cfg->pg.plugin);
	ob_slot_info info;
	char since[64];

	if (!ob_pgrepl_slot_info(c->pg, cfg->pg.slot, &info)) {
		ob_checker_report(c, "slot", false,
				  "could not read pg_replication_slots" OB_CHECK_SEE_THE_LOG);
		return;
	}
	if (!info.exists) {
		char *sql = ob_xasprintf("CREATE_REPLICATION_SLOT \"outboxd_check_%d\" TEMPORARY "
					 "LOGICAL %s (SNAPSHOT 'nothing')",
					 (int)getpid(), plugin);
		char *ignored = NULL;
		bool ok = ob_pgsql_query_value(c->pg, sql, &ignored);
		const char *fix = ok ? NULL : slot_failure_fix(c, ob_pgsql_error_state(c->pg));

		if (ok)
			ob_checker_report(c, plugin, true, "output plugin loads");
		else
			ob_checker_report(c, plugin, false, "could not create a slot%s%s",
					  fix != NULL ? ": " : OB_CHECK_SEE_THE_LOG,
					  fix != NULL ? fix : "");
		if (slot_lost(c, since, sizeof(since)))
			ob_checker_report(
			    c, "slot", false,
			    "%s was lost: it does not exist, but outboxd created it (at %s; its "
			    "row in %s." OB_SLOTMARK_TABLE "), and run and slot create exit 1 "
			    "rather than start a new slot past the events committed since. "
			    "To recover, " OB_SLOTMARK_RECOVERY,
			    cfg->pg.slot, since, cfg->outbox.schema);
		else
			ob_checker_report(c, "slot", cfg->pg.create_slot, "%s %s", cfg->pg.slot,
					  cfg->pg.create_slot
					      ? "does not exist yet; outboxd will create it"
					      : "does not exist and postgres.create_slot is false; "
						"run \"outboxd slot create\"");
		check_marker(c);
		check_recovery_point(c);
		free(ignored);
		free(sql);
		return;
	}
	ob_checker_report(c, plugin, strcmp(info.plugin, plugin) == 0, "slot plugin is %s%s",
			  ob_pgrepl_slot_plugin(&info),
			  strcmp(info.plugin, plugin) == 0
			      ? ""
			      : "; postgres.plugin says otherwise: " OB_PLUGIN_SWITCH_HINT);
	if (ob_pgrepl_slot_elsewhere(c->pg, &info))
		ob_checker_report(c, "slot", false,
				  "%s belongs to database %s, and run and slot create exit "
				  "1: " OB_SLOT_ELSEWHERE_FIX,
				  cfg->pg.slot, info.database, info.database);
	else if (strcmp(info.wal_status, "lost") == 0)
		ob_checker_report(
		    c, "slot", false,
		    "%s has been invalidated (wal_status lost), and run and slot create exit 1 "
		    "until it is replaced (--accept-gap drops it before it creates the new "
		    "one). To recover, " OB_SLOTMARK_RECOVERY "; and raise "
		    "max_slot_wal_keep_size",
		    cfg->pg.slot);
	else
		ob_checker_report(
		    c, "slot", true, "%s: %s, confirmed " OB_LSN_FMT ", %lld bytes retained%s",
		    cfg->pg.slot, info.wal_status, OB_LSN_ARGS(info.confirmed_flush),
		    (long long)info.retained_bytes,
		    info.active_pid ? " (active in another process: this one would be a standby)"
				    : "");
	check_recovery_point(c);
}

/* Whether the slot survives a promotion (failover.h): each missing
 * setting is a warning naming its fix (a primary without a standby is no
 * error), and so is a standby's copy in sight that is not ready. */
static void
check_failover(ob_checker *c)
{
	ob_failover_state st;
	char detail[768];
	bool seen, ready;

	if (!ob_failover_read(c->pg, c->cfg, &st)) {
		c->query_failed = true;
		ob_checker_report(c, "failover", false, "query failed" OB_CHECK_SEE_THE_LOG);
		return;
	}
	if (st.verdict == OB_FAILOVER_NA && !c->cfg->pg.slot_failover) {
		ob_checker_report(c, "failover", true, "not checked: %s", st.why);
		return;
	}
	if (st.verdict != OB_FAILOVER_READY) {
		ob_checker_warn(c, "failover", "%s", st.why);
		return;
	}
	ob_checker_report(c, "failover", true, "%s", st.why);
	if (!ob_checker_read_slot(c))
		return;
	ob_failover_standby_copy(c->cfg, c->slot.confirmed_flush, &seen, &ready, detail,
				 sizeof(detail));
	if (seen && ready)
		ob_checker_report(c, "standby copy", true, "%s", detail);
	else
		ob_checker_warn(c, "standby copy", "%s", detail);
}

/* What the slot's WAL may cost: without a bound (max_slot_wal_keep_size =
 * -1) the server keeps every WAL file the slot has not confirmed, so an
 * outboxd stopped or stalled long enough fills its disk; with one, a slot
 * further behind is invalidated (wal_status lost) and must be recreated
 * and its events republished. An unreserved slot is past the bound
 * already and is lost at the next checkpoint unless outboxd catches up; a
 * lost one is the slot check's failure. */
static void
check_wal_retention(ob_checker *c)
{
	char *keep = NULL;

	if (!ob_checker_read_slot(c) ||
	    !ob_checker_query(c, "wal retention", "SHOW max_slot_wal_keep_size", &keep))
		goto done;
	if (c->slot.exists && strcmp(c->slot.wal_status, "lost") == 0)
		goto done;
	if (c->slot.exists && strcmp(c->slot.wal_status, "unreserved") == 0)
		ob_checker_warn(
		    c, "wal retention",
		    "replication slot %s is unreserved: it holds more WAL than "
		    "max_slot_wal_keep_size (%s) allows, and the next checkpoint invalidates it "
		    "unless outboxd catches up first; an invalidated slot is recovered from the "
		    "outbox table (postgres.on_slot_lost), publishing some events twice",
		    c->cfg->pg.slot, keep != NULL ? keep : "?");
	else if (keep != NULL && strcmp(keep, "-1") == 0)
		ob_checker_warn(
		    c, "wal retention",
		    "max_slot_wal_keep_size = -1: the slot keeps all the WAL it has not "
		    "confirmed, so an outboxd stopped or stalled long enough fills the server's "
		    "disk (and Postgres stops); a limit (ALTER SYSTEM SET max_slot_wal_keep_size "
		    "= '50GB', sized for the longest outage to ride out) bounds the WAL kept, at "
		    "the cost of the slot being invalidated (wal_status lost: outboxd recovers it "
		    "from the outbox table, publishing some events twice) when outboxd falls "
		    "further behind than that");
	else
		ob_checker_report(
		    c, "wal retention", true,
		    "max_slot_wal_keep_size = %s: a slot further behind than that is "
		    "invalidated (wal_status lost) and recovered from the outbox table",
		    keep != NULL ? keep : "?");
done:
	free(keep);
}

/* seconds as a duration ("7d", "3h", "12min", "40s"), into buf. */
static const char *
duration(int64_t seconds, char *buf, size_t size)
{
	if (seconds >= 86400 && seconds % 86400 == 0)
		snprintf(buf, size, "%" PRId64 "d", seconds / 86400);
	else if (seconds >= 3600)
		snprintf(buf, size, "%" PRId64 "h", seconds / 3600);
	else if (seconds >= 60)
		snprintf(buf, size, "%" PRId64 "min", seconds / 60);
	else
		snprintf(buf, size, "%" PRId64 "s", seconds);
	return buf;
}

/* outbox.retention (retention.h) against how long a slot may be down
 * before max_slot_wal_keep_size invalidates it, at the server's average
 * WAL rate since its WAL statistics began. outboxd deletes only behind
 * the recovery point, so its own recovery never needs a deleted row; a
 * recovery by hand with a time (created_at, when there is no point)
 * after an outage longer than the retention would. */
static void
check_outbox_retention(ob_checker *c)
{
	int64_t keep = c->cfg->outbox.retention_s, budget;
	char *value = NULL, a[32], b[32];

	if (keep == 0) {
		ob_checker_report(c, "outbox retention", true,
				  "off: outboxd deletes no outbox rows (outbox.retention)");
		return;
	}
	if (!ob_checker_query(
		c, "outbox retention",
		"SELECT CASE WHEN s.setting::bigint < 0 THEN -1 ELSE (s.setting::numeric * "
		"1048576 / greatest(w.wal_bytes / greatest(extract(epoch FROM now() - "
		"w.stats_reset), 1), 1))::bigint END FROM pg_settings s, pg_stat_wal w WHERE "
		"s.name = 'max_slot_wal_keep_size'",
		&value))
		return;
	budget = value != NULL ? strtoll(value, NULL, 10) : -1;
	free(value);
	if (budget >= 0 && keep < budget)
		ob_checker_warn(
		    c, "outbox retention",
		    "outbox.retention (%s) is shorter than the about %s a slot may be down before "
		    "max_slot_wal_keep_size invalidates it at the server's average WAL rate: "
		    "outboxd deletes only rows behind the recovery point, so its own recovery "
		    "misses none, but a recovery by hand with a time (created_at) after an outage "
		    "that long would miss the rows it deleted",
		    duration(keep, a, sizeof(a)), duration(budget, b, sizeof(b)));
	else
		ob_checker_report(c, "outbox retention", true,
				  "published rows older than %s are deleted, behind the recovery "
				  "point only; a slot may be down %s%s before it is invalidated",
				  duration(keep, a, sizeof(a)), budget < 0 ? "" : "about ",
				  budget < 0 ? "without limit" : duration(budget, b, sizeof(b)));
}

void
ob_checker_slot(ob_checker *c)
{
	check_replication(c);
	check_slot(c);
	check_failover(c);
	check_wal_retention(c);
	check_outbox_retention(c);
}
