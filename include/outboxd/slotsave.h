/*
 * slotsave.h: after a clean stop, make PostgreSQL 15 and 16 keep the slot's
 * confirmed position across their own restart.
 *
 * A walsender's confirmations move a logical slot's confirmed_flush_lsn in
 * shared memory only; before PostgreSQL 17 it reaches disk when the slot's
 * restart_lsn or catalog_xmin moves too (decoding a running-transactions
 * record, about every 15 s of WAL activity), and not even at a clean
 * shutdown's checkpoint. So when outboxd is stopped and PostgreSQL then
 * restarts (a host's reboot, a maintenance window), the slot goes back to
 * its last saved position and the next outboxd publishes everything since
 * then again (checked on PostgreSQL 15: 12,740 of 12,740 events of an 8 s
 * run). pg_replication_slot_advance() to the slot's own confirmed position,
 * once the walsender has let go of it, marks the slot dirty, so the next
 * checkpoint (a clean shutdown's included) writes that position.
 * PostgreSQL 17 writes it at a shutdown checkpoint itself; a crash of
 * PostgreSQL (or outboxd's while it streams) still goes back to the last
 * write on any version.
 */
#ifndef OUTBOXD_SLOTSAVE_H
#define OUTBOXD_SLOTSAVE_H

#include "outboxd/common.h"
#include "outboxd/config.h"

/* Whether a server of server_version (PQserverVersion's) needs the mark:
 * before PostgreSQL 17, which writes a logical slot's confirmed position
 * at its shutdown checkpoint itself. */
bool ob_slotsave_needed(int server_version);

/* After outboxd's final confirmation and the end of its stream, on a
 * server that needs it: mark the slot to be written at the next
 * checkpoint (on a primary; nothing to do on a standby). Waits briefly for the
 * walsender to release the slot. False (logged as a warning, which says
 * what a PostgreSQL restart would then publish again) when it could not. */
bool ob_slotsave_mark(const ob_config *cfg);

#endif
