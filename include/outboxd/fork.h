/*
 * fork.h: the stream across a promotion in this process's lifetime
 * (README, "Failover").
 *
 * Every connection tells ob_fork_follow() the server's timeline. The
 * first only records it. When a later one finds another timeline (a
 * standby was promoted), the new timeline's history file gives the switch
 * point where the timeline streamed from before ended. A standby that
 * lagged starts its timeline below WAL the old primary had sent: if
 * outboxd read past the switch point, what it read there is not the new
 * timeline's, and the new timeline's own transactions take those
 * positions. So the ack tracker and replay go back to the switch point:
 * every transaction after it is read again from the new server's slot and
 * handed over whole, never skipped by position, and no acknowledgement of
 * the old timeline confirms a position past it. The events handed over
 * from past the switch point cannot be taken back: their range and count
 * are logged and counted (outboxd_events_beyond_fork_total).
 *
 * A new process starts at the slot's own position, on whatever timeline
 * the server is: it needs none of this.
 */
#ifndef OUTBOXD_FORK_H
#define OUTBOXD_FORK_H

#include "outboxd/delivery.h"
#include "outboxd/pgrepl.h"
#include "outboxd/timeline.h"

/* The server behind pg is on timeline tli, before a stream starts on it.
 * On a fork, d's ack tracker and replay go back to the switch point, and
 * *received with them. OB_PG_RETRY (logged) when the history cannot be
 * read. */
ob_pg_status ob_fork_follow(ob_timeline *tl, ob_pgconn *pg, int tli, ob_deliveries *d,
			    ob_lsn *received);

#endif
