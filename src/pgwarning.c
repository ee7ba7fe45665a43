/*
 * pgwarning.c: server warnings on the replication stream told apart by
 * where the server raised them, and the standby waits they announce.
 */
#include "outboxd/pgwarning.h"

#include <stdio.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/sqlstate.h"

/* The file of PostgreSQL 17+ whose StandbySlotsHaveCaughtup() warns that
 * logical replication waits for a standby (PG_DIAG_SOURCE_FILE gives the
 * base name). */
#define STANDBY_SLOTS_SOURCE "slot.c"

ob_pgwarning_kind
ob_pgwarning_classify(const ob_pgwarning *w)
{
	if (w->severity == NULL || strcmp(w->severity, "WARNING") != 0)
		return OB_PGWARNING_OTHER;
	/* pgoutput.c's warning names a publication, which may be called
	 * anything, even after the parameter: the file alone tells. */
	if (w->source_file != NULL && strcmp(w->source_file, STANDBY_SLOTS_SOURCE) == 0 &&
	    w->message != NULL && strstr(w->message, OB_STANDBY_SLOTS_PARAMETER) != NULL)
		return OB_PGWARNING_STANDBY_WAIT;
	if (ob_sqlstate_is(w->sqlstate, OB_SQLSTATE_OBJECT_NOT_IN_PREREQUISITE) ||
	    ob_sqlstate_is(w->sqlstate, OB_SQLSTATE_UNDEFINED_OBJECT))
		return OB_PGWARNING_ENDS_STREAM;
	return OB_PGWARNING_OTHER;
}

/* A character of a replication slot's name (PostgreSQL allows [a-z0-9_]). */
static bool
slot_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* A quotation mark's byte, of any language: neither a letter, a digit,
 * '_' nor white space (a byte of a multibyte mark counts). */
static bool
quote_byte(char c)
{
	return !slot_char(c) && !(c >= 'A' && c <= 'Z') && c != ' ' && c != '\t' && c != '\n' &&
	       c != '\0';
}

bool
ob_pgwarning_slot_name(const char *message, char *slot, size_t len)
{
	const char *s = message;
	size_t param_len = strlen(OB_STANDBY_SLOTS_PARAMETER);

	slot[0] = '\0';
	while (*s != '\0') {
		const char *start = s;
		size_t n;

		while (slot_char(*s))
			s++;
		n = (size_t)(s - start);
		if (n == 0) {
			s++;
			continue;
		}
		if (start > message && quote_byte(start[-1]) && quote_byte(*s) &&
		    !(n == param_len && memcmp(start, OB_STANDBY_SLOTS_PARAMETER, n) == 0)) {
			snprintf(slot, len, "%.*s", (int)n, start);
			return true;
		}
	}
	return false;
}

void
ob_pgwarning_standby_wait(ob_standby_wait *w, const char *message, int64_t now_ms)
{
	char slot[64], which[96];

	w->mark_known = false;
	if (!w->waiting) {
		w->waiting = true;
		w->since_ms = now_ms;
		w->told = false;
		ob_metrics_standby_wait_begin(now_ms);
	}
	if (w->logged && now_ms - w->logged_ms < OB_STANDBY_WAIT_LOG_MS)
		return;
	w->logged = true;
	w->logged_ms = now_ms;
	w->told = true;
	if (ob_pgwarning_slot_name(message, slot, sizeof(slot)))
		snprintf(which, sizeof(which), "replication slot %s", slot);
	else
		snprintf(which, sizeof(which), "the replication slot the server names");
	ob_warn("logical replication is waiting for the standby of %s, which the primary's "
		"synchronized_standby_slots names (the server: \"%s\"; waiting %lld s): start "
		"that standby, or amend synchronized_standby_slots (then SELECT "
		"pg_reload_conf()); events committed meanwhile wait and are published once it "
		"streams",
		which, message, (long long)((now_ms - w->since_ms) / 1000));
}

void
ob_pgwarning_stream_read(ob_standby_wait *w, bool keepalive, ob_lsn wal_end)
{
	if (!w->waiting)
		return;
	/* The walsender sends nothing while it waits, and its keepalives
	 * repeat the position it stopped at. */
	if (keepalive && !w->mark_known) {
		w->mark_known = true;
		w->mark = wal_end;
		return;
	}
	if (keepalive && wal_end <= w->mark)
		return;
	w->waiting = false;
	ob_metrics_standby_wait_end();
	if (w->told)
		ob_info("logical replication waits for no standby any more: the stream moves "
			"again after %lld s",
			(long long)((ob_mono_ms() - w->since_ms) / 1000));
}

void
ob_pgwarning_stream_started(ob_standby_wait *w)
{
	w->mark_known = false;
}
