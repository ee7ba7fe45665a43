/*
 * slotloss.c: whether the outbox table can give back what a lost slot
 * held (slotloss.h).
 */
#include "outboxd/slotloss.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "outboxd/recpoint.h"

static const char *const loss_names[OB_SLOT_LOSS_KINDS] = {"", "missing", "invalidated", "promoted",
							   "undecodable"};

const char *
ob_slot_loss_name(ob_slot_loss loss)
{
	return loss >= 0 && loss < OB_SLOT_LOSS_KINDS ? loss_names[loss] : "";
}

bool
ob_slotloss_undecodable(const char *state, const char *msg)
{
	return strcmp(state, "XX000") == 0 && (strstr(msg, "could not map filenode") != NULL ||
					       strstr(msg, "could not map filenumber") != NULL);
}

bool
ob_slotloss_recoverable(const ob_recovery_facts *f, char *why, size_t size)
{
	if (!f->has_point)
		snprintf(
		    why, size,
		    "no recovery point was stored for it (outboxd stores one within seconds "
		    "of streaming; the table's role may lack the columns, see `outboxd check`)");
	else if (f->other_system)
		snprintf(why, size,
			 "its recovery point was stored on another PostgreSQL system (a logical "
			 "copy or a restored dump, whose rows have other transaction ids)");
	else if (!ob_recpoint_exact(f->xid, f->next_xid))
		snprintf(why, size,
			 "more than 2^31 transaction ids have passed since its recovery point "
			 "%" PRIu64 " (a row keeps its id modulo 2^32)",
			 f->xid);
	else if (f->messages)
		snprintf(
		    why, size,
		    "events come as logical messages too (outbox.message_prefix; one was "
		    "published since the slot was made), which the outbox table does not hold");
	else if (f->deletes_seen)
		snprintf(
		    why, size,
		    "rows of the outbox table are deleted by something other than outboxd "
		    "(last seen at %s: an insert-then-delete outbox or a cleanup job), so rows "
		    "of events not yet published may be gone (once they no longer are: UPDATE "
		    "outboxd_slots SET deletes_seen_at = NULL, deletes_counted = NULL)",
		    f->deletes_at);
	else if (f->rewritten[0] != '\0')
		snprintf(why, size,
			 "the outbox table (%s) was truncated or rewritten (TRUNCATE, VACUUM FULL, "
			 "CLUSTER, a rewriting ALTER TABLE) since its recovery point was stored; a "
			 "TRUNCATE counts as no deleted row, and rows of events not yet published "
			 "may be gone",
			 f->rewritten);
	else if (f->dropped[0] != '\0')
		snprintf(why, size,
			 "leaves of the outbox table (%s) were dropped or detached since its "
			 "recovery point was stored, and rows of events not yet published may have "
			 "gone with them (a dropped partition counts as no deleted row)",
			 f->dropped);
	else if (f->stats_reset_at[0] != '\0')
		snprintf(why, size,
			 "the statistics that count deleted rows of the outbox table were reset "
			 "at %s, after its recovery point was stored (pg_stat_reset()), so rows "
			 "of events not yet published may have been deleted unseen",
			 f->stats_reset_at);
	else if (f->deletes_past > 0)
		snprintf(why, size,
			 "%" PRId64
			 " rows of the outbox table were deleted since its recovery point "
			 "was stored, and rows of events not yet published may be among them",
			 f->deletes_past);
	else
		return true;
	return false;
}
