/*
 * recpoint.c: the recovery point's rule (recpoint.h).
 */
#include "outboxd/recpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void
ob_recpoint_init(ob_recpoint *rp)
{
	memset(rp, 0, sizeof(*rp));
	rp->interval_ms = OB_RECPOINT_INTERVAL_MS;
}

ob_recpoint_step
ob_recpoint_next(ob_recpoint *rp, ob_lsn confirmed, int64_t now_ms)
{
	if (rp->have_cand) {
		if (confirmed < rp->cand_lsn)
			return OB_RECPOINT_WAIT;
		if (rp->cand_xid > rp->stored_xid &&
		    !(rp->cand_xid == rp->own_xid + 1 && rp->stored_xid >= rp->own_xid))
			return OB_RECPOINT_STORE;
		rp->have_cand = false;
	}
	return now_ms >= rp->next_ms ? OB_RECPOINT_CAPTURE : OB_RECPOINT_WAIT;
}

void
ob_recpoint_captured(ob_recpoint *rp, uint64_t xmin, ob_lsn lsn, int64_t now_ms)
{
	rp->have_cand = true;
	rp->cand_xid = xmin;
	rp->cand_lsn = lsn;
	rp->next_ms = now_ms + rp->interval_ms;
}

void
ob_recpoint_stored(ob_recpoint *rp, uint64_t own_xid, int64_t now_ms)
{
	rp->stored_xid = rp->cand_xid;
	if (own_xid != 0)
		rp->own_xid = own_xid;
	rp->have_cand = false;
	rp->next_ms = now_ms + rp->interval_ms;
}

void
ob_recpoint_failed(ob_recpoint *rp, int64_t now_ms)
{
	rp->have_cand = false;
	rp->next_ms = now_ms + rp->interval_ms;
}

void
ob_recpoint_backlog_where(uint64_t xid, char *buf, size_t size)
{
	snprintf(buf, size,
		 "(xmin::text::bigint - %" PRIu64 " + 4294967296) %% 4294967296 < 2147483648",
		 xid & UINT64_C(0xffffffff));
}

bool
ob_recpoint_exact(uint64_t xid, uint64_t next_xid)
{
	return next_xid >= xid && next_xid - xid < (UINT64_C(1) << 31);
}
