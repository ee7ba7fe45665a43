/*
 * signals.h: SIGTERM and SIGINT ask outboxd to stop; SIGPIPE is ignored.
 *
 * The handlers only set a flag; the loops poll it with
 * ob_signals_stop_requested() at least once a second.
 */
#ifndef OUTBOXD_SIGNALS_H
#define OUTBOXD_SIGNALS_H

#include "outboxd/common.h"

void ob_signals_install(void);
/* True once SIGTERM or SIGINT arrived. */
bool ob_signals_stop_requested(void);

#endif
