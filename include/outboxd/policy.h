/*
 * policy.h: the pure rules of the daemons' loops: how long to wait before
 * trying again, when a standby status update is due, and when an error
 * the server repeats stops the relay.
 *
 * Pure: no clock, no connection, no log; the callers pass the time and
 * act on the answer, and the unit tests (tests/unit/test_policy.c) go
 * through every rule with tables.
 */
#ifndef OUTBOXD_POLICY_H
#define OUTBOXD_POLICY_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* A wait that doubles after each failure, from first_ms up to max_ms. */
typedef struct ob_backoff {
	int64_t first_ms;
	int64_t max_ms;
	int64_t next_ms;
} ob_backoff;

void ob_backoff_init(ob_backoff *b, int64_t first_ms, int64_t max_ms);
/* The wait to take now; the one after is twice as long, up to max_ms. */
int64_t ob_backoff_next(ob_backoff *b);
/* Start again from first_ms (the thing waited for worked). */
void ob_backoff_reset(ob_backoff *b);

/* The shortest gap between two status updates sent because the
 * confirmable position moved. */
#define OB_STATUS_MIN_INTERVAL_MS 20

/* Whether a standby status update is due, since_ms after the last one:
 * always when forced or when the server asked for a reply, once
 * interval_ms (postgres.status_interval_ms) have passed, and when the
 * confirmable position moved since the last one, once
 * OB_STATUS_MIN_INTERVAL_MS have passed. */
bool ob_status_due(bool force, bool asked, bool moved, int64_t since_ms, int64_t interval_ms);
/* How long the stream may wait for the server, since_ms after the last
 * status update, before one is due unasked: what is left of interval_ms
 * (0 or less: due now), or OB_STATUS_MIN_INTERVAL_MS while the
 * confirmable position moved. */
int64_t ob_status_wait_ms(bool moved, int64_t since_ms, int64_t interval_ms);

/* How often the relay may fail at one stream position with a server
 * error before it stops: the error is not going away. */
#define OB_ERROR_REPEAT_LIMIT 5

/* Server errors in a row at one stream position. */
typedef struct ob_error_repeat {
	ob_lsn lsn;
	int count;
} ob_error_repeat;

/* Count a server error of SQLSTATE state met with the stream at lsn, and
 * return how many came in a row at that position. An error that says
 * nothing about the stream's data (no SQLSTATE: the connection was lost;
 * or ob_sqlstate_server_gone()) starts the count again at 0; one at the
 * position of the one before adds one; one at another position is the
 * first. The relay stops once the count reaches OB_ERROR_REPEAT_LIMIT. */
int ob_error_repeat_note(ob_error_repeat *r, const char *state, ob_lsn lsn);
/* Forget the errors counted (what failed was no server error). */
void ob_error_repeat_reset(ob_error_repeat *r);

#endif
