/*
 * reload.h: SIGHUP reads the configuration again (deploy/README.md,
 * "Reloading the configuration").
 *
 * The daemons (`run`, `inbox`) read their configuration at start. On
 * SIGHUP they read it again from the same sources: the file that -c,
 * OUTBOXD_CONFIG or the default named at start, with ${NAME} taken from
 * the environment, then the -s overrides. What can change while they run
 * is applied: log.level and log.format. Every other setting whose value
 * changed is logged, one warning each, naming it as needing a restart; the
 * process keeps the value it started with. A configuration that no longer
 * loads is logged (the configuration module names the key) and the
 * running one is kept.
 */
#ifndef OUTBOXD_RELOAD_H
#define OUTBOXD_RELOAD_H

#include "outboxd/config.h"

/* Where the running configuration was read from (inbox: with `outboxd
 * inbox`'s defaults; path: NULL or "" for no file; the n overrides as
 * given to -s) and the configuration itself. All are borrowed and must
 * outlive the daemon. */
void ob_reload_init(bool inbox, const char *path, const char *const *overrides, size_t n,
		    const ob_config *running);
/* Read the configuration again and apply it as above. Called by the
 * runtime's tick after SIGHUP; does nothing before ob_reload_init(). */
void ob_reload_run(void);

#endif
