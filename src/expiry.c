/*
 * expiry.c: records waiting too long for the broker (expiry.h).
 */
#include "outboxd/expiry.h"

void
ob_expiry_produced(ob_expiry *e, int64_t now_ms)
{
	if (e->outstanding++ == 0)
		e->moved_ms = now_ms;
}

void
ob_expiry_reported(ob_expiry *e, int64_t now_ms)
{
	if (e->outstanding > 0)
		e->outstanding--;
	e->moved_ms = now_ms;
}

bool
ob_expiry_due(const ob_expiry *e, long long timeout_ms, int64_t now_ms)
{
	return timeout_ms > 0 && e->outstanding > 0 && now_ms - e->moved_ms >= timeout_ms;
}
