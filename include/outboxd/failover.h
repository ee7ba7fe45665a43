/*
 * failover.h: whether the slot survives a promotion of a standby (deploy/README.md,
 * "Failover"), as `outboxd check`, `outboxd slot status`, the metric
 * outboxd_slot_failover_ready and /readyz say it.
 *
 * On PostgreSQL 17+ the slot is failover-ready when it has FAILOVER (a
 * standby with sync_replication_slots = on keeps a copy) and the
 * primary's synchronized_standby_slots names a physical slot a standby
 * streams from: without that, the logical slot may confirm WAL no standby
 * has yet, and outboxd publish events the promoted standby never had.
 * Where outboxd can see a standby (postgres.conninfo names several hosts),
 * its copy must exist, be synced and persisted: a copy not persisted yet
 * (temporary, until the primary's slot moves past the standby's position)
 * is dropped at promotion. Below 17, with postgres.slot_failover = false
 * or when outboxd decodes on a standby, the question does not apply.
 */
#ifndef OUTBOXD_FAILOVER_H
#define OUTBOXD_FAILOVER_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgrepl.h"

typedef enum ob_failover_verdict {
	OB_FAILOVER_NA,    /* below 17, slot_failover off, or on a standby: see why */
	OB_FAILOVER_READY, /* flag set and a standby in synchronized_standby_slots streams */
	OB_FAILOVER_NOT_READY,
} ob_failover_verdict;

/* What the primary says (ob_failover_read()). */
typedef struct ob_failover_state {
	ob_failover_verdict verdict;
	bool slot_exists;
	bool flag;               /* the slot has FAILOVER */
	char standby_slots[256]; /* synchronized_standby_slots, as set ("" when unset) */
	bool standby_streams;    /* a physical slot it names is active */
	char why[768];           /* what is missing (the first thing) and its fix */
} ob_failover_state;

/* Read the failover readiness of cfg's slot on p (a plain or replication
 * connection to the server outboxd streams from). False (logged) when a
 * query failed. */
bool ob_failover_read(ob_pgconn *p, const ob_config *cfg, ob_failover_state *st) OB_MUST_CHECK;

/* The standby's copy of the slot, where outboxd can see it: when
 * postgres.conninfo names several hosts, a connection to one that is a
 * standby (target_session_attrs=standby). *seen false when there is no
 * such host or none answered (said in detail); otherwise *ready says
 * whether the copy exists, is synced and persisted, and detail names what
 * is missing, or how far the copy trails primary_confirmed. */
void ob_failover_standby_copy(const ob_config *cfg, ob_lsn primary_confirmed, bool *seen,
			      bool *ready, char *detail, size_t detail_len);

#endif
