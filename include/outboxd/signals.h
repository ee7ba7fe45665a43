/*
 * signals.h: SIGTERM and SIGINT ask outboxd to stop, SIGHUP to read its
 * configuration again (reload.h); SIGPIPE is ignored.
 *
 * The handlers only set a flag; the loops poll them (through the runtime's
 * tick) at least once a second.
 */
#ifndef OUTBOXD_SIGNALS_H
#define OUTBOXD_SIGNALS_H

#include "outboxd/common.h"

void ob_signals_install(void);
/* True once SIGTERM or SIGINT arrived. */
bool ob_signals_stop_requested(void);
/* True once for each time SIGHUP arrived since the last call (several
 * SIGHUPs before a call count as one). */
bool ob_signals_take_reload(void);

#endif
