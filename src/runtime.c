/*
 * runtime.c: start-up, the liveness tick, waiting and shutdown for both
 * daemons (see runtime.h).
 */
#include "outboxd/runtime.h"

#include "ob_build.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/notify.h"
#include "outboxd/reload.h"
#include "outboxd/signals.h"

void
ob_runtime_start(void)
{
	ob_signals_install();
	ob_notify_init();
	ob_metrics_set_ready(OB_READY_CONNECTING);
}

bool
ob_runtime_tick(void)
{
	ob_metrics_heartbeat();
	ob_notify_watchdog();
	if (ob_signals_take_reload())
		ob_reload_run();
	return !ob_signals_stop_requested();
}

bool
ob_runtime_stop_requested(void)
{
	return ob_signals_stop_requested();
}

bool
ob_runtime_wait(int64_t ms, bool (*serve)(void *ctx, int timeout_ms), void *ctx)
{
	int64_t deadline = ob_mono_ms() + ms;

	while (ob_runtime_tick()) {
		int64_t left = deadline - ob_mono_ms();

		if (left <= 0 || !serve(ctx, left < 100 ? (int)left : 100))
			return true;
	}
	return false;
}

void
ob_runtime_stopping(void)
{
	ob_notify_stopping();
}

int
ob_runtime_exit(const char *name, int code)
{
	ob_info("%s stopped (exit code %d)", name, code);
	return code;
}

void
ob_runtime_crash_point(const char *step)
{
#if OB_TEST_HOOKS
	const char *at = getenv("OUTBOXD_TEST_CRASH_AT");

	if (at != NULL && strcmp(at, step) == 0) {
		ob_info("test hook: killed at %s (OUTBOXD_TEST_CRASH_AT)", step);
		raise(SIGKILL);
	}
#else
	(void)step;
#endif
}
