/*
 * runtime.h: what both daemons (the relay and the inbox) run on: exit
 * codes, start-up and shutdown, the liveness tick, waiting with it, and
 * one backoff (policy.h).
 *
 * Not an event loop: each daemon keeps its own loop (it knows what to
 * wait on) and calls ob_runtime_tick() once per turn and while it waits,
 * as pgbouncer's main_loop_once() runs the duties of every turn in one
 * place. The tick is what /healthz and systemd's watchdog see; a loop
 * that stops ticking is reported stuck.
 */
#ifndef OUTBOXD_RUNTIME_H
#define OUTBOXD_RUNTIME_H

#include "outboxd/common.h"
#include "outboxd/policy.h" /* the backoff */

/* Exit codes (README, "Command line"). */
#define OB_EXIT_OK       0 /* stopped cleanly */
#define OB_EXIT_OPERATOR 1 /* needs an operator */
#define OB_EXIT_CONFIG   2 /* usage or configuration error */

/* Start a daemon: SIGTERM and SIGINT ask it to stop, SIGHUP to read its
 * configuration again, systemd is told how it is doing, and /readyz says
 * connecting. */
void ob_runtime_start(void);
/* One turn of a loop, or of a wait: the heartbeat, the watchdog, and
 * the configuration read again after a SIGHUP (reload.h). True until a
 * stop was asked for. */
bool ob_runtime_tick(void);
/* True once a stop was asked for. */
bool ob_runtime_stop_requested(void);
/* Wait up to ms, ticking and serving the daemon's client meanwhile:
 * serve(ctx, timeout_ms) waits on it for at most 100 ms and returns false
 * to end the wait early. False when a stop was asked for before the time
 * was up. */
bool ob_runtime_wait(int64_t ms, bool (*serve)(void *ctx, int timeout_ms), void *ctx);
/* Shutdown begins (systemd: STOPPING). */
void ob_runtime_stopping(void);
/* The daemon name stops with code: logged; returns code. */
int ob_runtime_exit(const char *name, int code);
/* A step where a crash must lose nothing (a slot's recovery, the
 * backlog's cutover). In a test build (meson -Dtest_hooks=true) the
 * process kills itself with SIGKILL there when OUTBOXD_TEST_CRASH_AT
 * names the step; otherwise nothing. */
void ob_runtime_crash_point(const char *step);

#endif
