/*
 * reload.c: SIGHUP reads the configuration again (see reload.h).
 *
 * The settings live in one ob_config that the daemon's modules read while
 * they run, some only once (the connections' strings, the librdkafka
 * clients' properties, the HTTP listener), so only the logger's two
 * settings, which it keeps apart, change in place; the rest are compared
 * with what the process started with and named.
 */
#include "outboxd/reload.h"

#include <stdio.h>
#include <string.h>

#include "outboxd/log.h"

static struct {
	bool set;
	const char *path;
	bool inbox; /* the defaults of `outboxd inbox` */
	const char *const *overrides;
	size_t overrides_len;
	const ob_config *running;
	ob_log_format format; /* the logger's, as last applied */
	ob_log_level level;
} source;

void
ob_reload_init(bool inbox, const char *path, const char *const *overrides, size_t n,
	       const ob_config *running)
{
	source.set = true;
	source.inbox = inbox;
	source.path = path != NULL && path[0] != '\0' ? path : NULL;
	source.overrides = overrides;
	source.overrides_len = n;
	source.running = running;
	source.format = running->log.format;
	source.level = running->log.level;
}

/* ob_config_diff's callback: a setting other than the logger's changed;
 * *ctx counts them. */
static void
needs_restart(const char *section, const char *key, void *ctx)
{
	size_t *count = ctx;

	if (strcmp(section, "log") == 0 &&
	    (strcmp(key, "level") == 0 || strcmp(key, "format") == 0))
		return;
	ob_warn("%s.%s changed in the configuration: it takes effect only when outboxd restarts "
		"(the running value is kept)",
		section, key);
	(*count)++;
}

void
ob_reload_run(void)
{
	const char *where = source.path != NULL ? source.path : "the defaults and -s";
	ob_config fresh;
	size_t restart = 0;
	bool log_changed;

	if (!source.set)
		return;
	ob_info("SIGHUP: reading the configuration again from %s", where);
	if (!ob_config_load(&fresh, source.inbox, source.path, source.overrides,
			    source.overrides_len)) {
		ob_error("could not reload the configuration from %s (see above): the running one "
			 "is kept",
			 where);
		ob_config_free(&fresh);
		return;
	}
	ob_config_diff(source.running, &fresh, needs_restart, &restart);
	log_changed = fresh.log.level != source.level || fresh.log.format != source.format;
	if (log_changed) {
		char level[64] = "", format[64] = "";

		if (fresh.log.level != source.level)
			snprintf(level, sizeof(level), " log.level %s (was %s)",
				 ob_log_level_name(fresh.log.level),
				 ob_log_level_name(source.level));
		if (fresh.log.format != source.format)
			snprintf(format, sizeof(format), " log.format %s",
				 fresh.log.format == OB_LOG_JSON ? "json" : "text");
		/* Said before it applies, at info: seen whatever the new level. */
		ob_info("configuration reloaded:%s%s", level, format);
		source.level = fresh.log.level;
		source.format = fresh.log.format;
		ob_log_configure(source.format, source.level);
	} else if (restart > 0) {
		ob_info("configuration reloaded: nothing to apply now; %zu setting%s wait%s for a "
			"restart (above)",
			restart, restart == 1 ? "" : "s", restart == 1 ? "s" : "");
	} else {
		ob_info("configuration reloaded: nothing changed");
	}
	ob_config_free(&fresh);
}
