/*
 * policy.c: the pure rules of the daemons' loops: backoff, when a status
 * update is due, and the count of an error repeated at one position (see
 * policy.h).
 */
#include "outboxd/policy.h"

#include "outboxd/sqlstate.h"

void
ob_backoff_init(ob_backoff *b, int64_t first_ms, int64_t max_ms)
{
	b->first_ms = first_ms;
	b->max_ms = max_ms;
	b->next_ms = first_ms;
}

int64_t
ob_backoff_next(ob_backoff *b)
{
	int64_t now = b->next_ms;

	b->next_ms = now * 2 > b->max_ms ? b->max_ms : now * 2;
	return now;
}

void
ob_backoff_reset(ob_backoff *b)
{
	b->next_ms = b->first_ms;
}

bool
ob_status_due(bool force, bool asked, bool moved, int64_t since_ms, int64_t interval_ms)
{
	return force || asked || since_ms >= interval_ms ||
	       (moved && since_ms >= OB_STATUS_MIN_INTERVAL_MS);
}

int64_t
ob_status_wait_ms(bool moved, int64_t since_ms, int64_t interval_ms)
{
	return moved ? OB_STATUS_MIN_INTERVAL_MS : interval_ms - since_ms;
}

int
ob_error_repeat_note(ob_error_repeat *r, const char *state, ob_lsn lsn)
{
	if (state == NULL || state[0] == '\0' || ob_sqlstate_server_gone(state)) {
		r->count = 0;
		return 0;
	}
	r->count = r->count > 0 && r->lsn == lsn ? r->count + 1 : 1;
	r->lsn = lsn;
	return r->count;
}

void
ob_error_repeat_reset(ob_error_repeat *r)
{
	r->count = 0;
}
