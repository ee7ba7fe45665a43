/*
 * notify.h: telling systemd how outboxd is doing (sd_notify).
 *
 * All calls are no-ops when outboxd does not run under a unit with
 * NOTIFY_SOCKET; the watchdog is pinged only when the unit set WatchdogSec.
 */
#ifndef OUTBOXD_NOTIFY_H
#define OUTBOXD_NOTIFY_H

#include "outboxd/common.h"

void ob_notify_init(void);
/* READY=1 plus a STATUS= line; sent once, when streaming starts. */
void ob_notify_ready(const char *status);
void ob_notify_status(const char *status);
void ob_notify_stopping(void);
/* WATCHDOG=1 at most every half watchdog interval; call every loop turn. */
void ob_notify_watchdog(void);

#endif
