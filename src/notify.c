/*
 * notify.c: sd_notify(3) for Type=notify units.
 */
#include "outboxd/notify.h"

#include <stdio.h>
#include <systemd/sd-daemon.h>

static uint64_t watchdog_usec;
static int64_t last_watchdog_ms;
static bool ready_sent;

void
ob_notify_init(void)
{
	if (sd_watchdog_enabled(0, &watchdog_usec) <= 0)
		watchdog_usec = 0;
}

void
ob_notify_ready(const char *status)
{
	if (ready_sent) {
		ob_notify_status(status);
		return;
	}
	ready_sent = true;
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void
ob_notify_status(const char *status)
{
	sd_notifyf(0, "STATUS=%s", status);
}

void
ob_notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

void
ob_notify_watchdog(void)
{
	int64_t now;

	if (watchdog_usec == 0)
		return;
	now = ob_mono_ms();
	if ((uint64_t)(now - last_watchdog_ms) * 1000 * 2 >= watchdog_usec) {
		sd_notify(0, "WATCHDOG=1");
		last_watchdog_ms = now;
	}
}
