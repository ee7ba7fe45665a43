/*
 * slotcreate.h: the `outboxd slot create` command (deploy/README.md,
 * "Command line").
 *
 * It looks at the slot before it creates anything. A healthy slot is left
 * as it is. A slot that was lost (missing, while its row in outboxd_slots
 * says outboxd created it: slotmark.h) or invalidated (wal_status lost)
 * is replaced only when the operator accepts the gap the loss left
 * (--accept-gap): a new slot starts at the current WAL position, and the
 * events committed between the loss and then are published only by a
 * backlog (outbox.backlog_where) that selects them. So a deployment
 * script may run `slot create --if-not-exists` every time: after a loss it
 * fails, as `outboxd run` does, instead of papering over the gap.
 */
#ifndef OUTBOXD_SLOTCREATE_H
#define OUTBOXD_SLOTCREATE_H

#include "outboxd/config.h"

/* Run `slot create` and return its exit code (runtime.h): 0 when the slot
 * was created, or exists healthy and if_not_exists is set; 1 when it
 * exists without if_not_exists, was lost or invalidated without
 * accept_gap (naming the recovery), or could not be created (logged).
 * With accept_gap a lost slot is created anew and an invalidated one
 * dropped and created anew, with a warning of what the new slot skips.
 * With outbox.backlog_where set, the slot is created after its backlog is
 * published and acknowledged (cutover.h). */
int ob_slotcreate_run(const ob_config *cfg, bool if_not_exists, bool accept_gap);

#endif
