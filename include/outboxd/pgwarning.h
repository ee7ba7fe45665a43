/*
 * pgwarning.h: what a server WARNING on the replication stream means, and
 * the standby waits some of them announce.
 *
 * PostgreSQL 18's pgoutput warns "skipped loading publication" (SQLSTATE
 * 55000) and decodes on without it, passing rows over: the stream must
 * end. PostgreSQL 17+ warns with the same SQLSTATE when a failover slot's
 * walsender waits for a standby named in synchronized_standby_slots that
 * is not streaming: nothing is wrong, the stream just waits. A warning is
 * told by where the server raised it (its source file, which is never
 * translated; the message follows lc_messages), with the parameter's name
 * in the message (never translated either) as a second sign. A warning of
 * either SQLSTATE that is not known to be a wait ends the stream, as
 * before. The classification and the slot name are pure; the wait's
 * bookkeeping logs and sets the metrics (metrics.h).
 */
#ifndef OUTBOXD_PGWARNING_H
#define OUTBOXD_PGWARNING_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* What a notice of the replication stream means. */
typedef enum ob_pgwarning_kind {
	OB_PGWARNING_OTHER,        /* nothing for outboxd: printed as libpq prints notices */
	OB_PGWARNING_STANDBY_WAIT, /* logical replication waits for a standby */
	OB_PGWARNING_ENDS_STREAM,  /* a publication passed over, or a warning like it */
} ob_pgwarning_kind;

/* The fields of a notice that tell it apart (NULL: the server sent none). */
typedef struct ob_pgwarning {
	const char *severity;    /* PG_DIAG_SEVERITY_NONLOCALIZED: "WARNING" */
	const char *sqlstate;    /* PG_DIAG_SQLSTATE */
	const char *source_file; /* PG_DIAG_SOURCE_FILE: "slot.c", "pgoutput.c" */
	const char *message;     /* PG_DIAG_MESSAGE_PRIMARY, maybe translated */
} ob_pgwarning;

/* The parameter whose standbys logical replication waits for. */
#define OB_STANDBY_SLOTS_PARAMETER "synchronized_standby_slots"

/* STANDBY_WAIT for a WARNING raised in slot.c whose message names
 * synchronized_standby_slots (PostgreSQL 17+'s StandbySlotsHaveCaughtup():
 * the standby's slot has no active_pid, is missing, invalidated, or is a
 * logical slot; the walsender waits until it is fixed or the parameter
 * amended). ENDS_STREAM for any other WARNING of SQLSTATE 55000 or 42704
 * (pgoutput.c's "skipped loading publication", whatever its publication is
 * called, and any such warning without a source file). OTHER otherwise. */
ob_pgwarning_kind ob_pgwarning_classify(const ob_pgwarning *w);

/* The replication slot a standby-wait warning's message names, into slot:
 * the first name of slot characters ([a-z0-9_]) the message quotes, with
 * quotation marks of any language hugging it ("sb1", »sb1«, „sb1“), other
 * than the parameter's. False (slot empty) when there is none. */
bool ob_pgwarning_slot_name(const char *message, char *slot, size_t len);

/* A standby wait: from its first warning until the stream moves again. */
typedef struct ob_standby_wait {
	bool waiting;
	int64_t since_ms; /* monotonic: when the wait began */
	bool told;        /* this wait was logged */
	bool logged;      /* a wait was logged, at logged_ms (monotonic) */
	int64_t logged_ms;
	/* The walsender's sent position as the first keepalive after the
	 * latest warning gave it: it stays put while the walsender waits. */
	bool mark_known;
	ob_lsn mark;
} ob_standby_wait;

/* How often a wait is logged at most. */
#define OB_STANDBY_WAIT_LOG_MS 60000

/* A standby-wait warning (message: its primary text) at now_ms: begins a
 * wait unless one is on (outboxd_standby_waits_total counts it; /readyz
 * says waiting-for-standby once http.stall_after_ms has passed), and is
 * logged, at most once per OB_STANDBY_WAIT_LOG_MS, naming the slot and
 * the fix. */
void ob_pgwarning_standby_wait(ob_standby_wait *w, const char *message, int64_t now_ms);
/* A message of the stream (keepalive, or XLogData), wal_end as it gave
 * it: XLogData, or a keepalive past the one after the latest warning,
 * ends the wait (the walsender moves again). */
void ob_pgwarning_stream_read(ob_standby_wait *w, bool keepalive, ob_lsn wal_end);
/* A new stream began: a wait still on is measured by its keepalives. */
void ob_pgwarning_stream_started(ob_standby_wait *w);

#endif
