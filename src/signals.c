/*
 * signals.c: the stop flag set by SIGTERM and SIGINT, and the reload flag
 * set by SIGHUP (see signals.h).
 */
#include "outboxd/signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;

static void
on_signal(int sig)
{
	if (sig == SIGHUP)
		reload_requested = 1;
	else
		stop_requested = 1;
}

void
ob_signals_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

bool
ob_signals_stop_requested(void)
{
	return stop_requested != 0;
}

bool
ob_signals_take_reload(void)
{
	if (reload_requested == 0)
		return false;
	reload_requested = 0;
	return true;
}
