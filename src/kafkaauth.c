/*
 * kafkaauth.c: OAUTHBEARER tokens from kafka_auth.token_command
 * (kafkaauth.h).
 */
#include "outboxd/kafkaauth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/credcmd.h"
#include "outboxd/kafka.h"
#include "outboxd/log.h"

/* The command every client runs, set by the first ob_kafkaauth_conf()
 * of the process and never changed after (the background threads read
 * it). */
static struct {
	bool set;
	char *command;
	int timeout_ms;
} settings;

/* The latest run, for `outboxd check`; written on background threads. */
static struct {
	pthread_mutex_t lock;
	bool ran;
	bool ok;
	int64_t ms, lifetime_ms;
	char principal[128];
	char err[512];
} last = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* librdkafka's token refresh callback: run the command and hand its token
 * to librdkafka, or tell it the refresh failed. */
static void
on_refresh(rd_kafka_t *rk, const char *oauthbearer_config, void *opaque)
{
	int64_t started = ob_mono_ms();
	ob_credtoken tok = {0};
	char err[512], why[256], *out = NULL;
	/* On librdkafka's thread, so no tick: the daemon's heartbeat is the
	 * main loop's. */
	bool ok = ob_credcmd_run("kafka_auth.token_command", settings.command, settings.timeout_ms,
				 NULL, NULL, &out, err, sizeof(err));

	(void)oauthbearer_config;
	(void)opaque;
	if (ok && !ob_credtoken_parse(out, strlen(out), &tok, why, sizeof(why))) {
		snprintf(err, sizeof(err), "what kafka_auth.token_command printed %s", why);
		ok = false;
	}
	if (ok && rd_kafka_oauthbearer_set_token(
		      rk, tok.token, ob_now_us() / 1000 + tok.lifetime_ms, tok.principal, NULL, 0,
		      why, sizeof(why)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(err, sizeof(err),
			 "librdkafka refused the token of kafka_auth.token_command: %s", why);
		ok = false;
	}
	if (!ok) {
		ob_warn("could not get a kafka token: %s; retrying in 10 s", err);
		rd_kafka_oauthbearer_set_token_failure(rk, err);
	}
	pthread_mutex_lock(&last.lock);
	last.ran = true;
	last.ok = ok;
	last.ms = ob_mono_ms() - started;
	last.lifetime_ms = tok.lifetime_ms;
	snprintf(last.principal, sizeof(last.principal), "%s", ok ? tok.principal : "");
	snprintf(last.err, sizeof(last.err), "%s", ok ? "" : err);
	pthread_mutex_unlock(&last.lock);
	ob_credtoken_clear(&tok);
	ob_credcmd_free(out);
}

void
ob_kafkaauth_conf(rd_kafka_conf_t *conf, const ob_config *cfg)
{
	if (!cfg->kafka_auth.method_command)
		return;
	if (!settings.set) {
		settings.command = ob_xstrdup(cfg->kafka_auth.token_command);
		settings.timeout_ms = cfg->kafka_auth.credential_timeout_ms;
		settings.set = true;
	}
	rd_kafka_conf_set_oauthbearer_token_refresh_cb(conf, on_refresh);
	rd_kafka_conf_enable_sasl_queue(conf, 1);
}

void
ob_kafkaauth_start(rd_kafka_t *rk)
{
	rd_kafka_error_t *error;

	if (!settings.set)
		return;
	error = rd_kafka_sasl_background_callbacks_enable(rk);
	if (error == NULL)
		return;
	ob_error("could not start kafka token refreshes: %s", rd_kafka_error_string(error));
	rd_kafka_error_destroy(error);
}

bool
ob_kafkaauth_report(const ob_config *cfg, bool reached, char *buf, size_t size)
{
	const char *mech = ob_config_kafka_get(cfg, "sasl.mechanism");
	bool ok;

	if (!cfg->kafka_auth.method_command) {
		snprintf(buf, size,
			 "kafka_auth.method none: librdkafka's own [kafka] settings (%s)",
			 mech != NULL ? mech : "no SASL mechanism");
		return true;
	}
	pthread_mutex_lock(&last.lock);
	ok = last.ran && last.ok && reached;
	if (!last.ran)
		snprintf(buf, size, "kafka_auth.token_command did not run");
	else if (!last.ok)
		snprintf(buf, size, "%s", last.err);
	else
		snprintf(buf, size,
			 "kafka_auth.token_command gave a token for %s (lifetime %lld ms) in %lld "
			 "ms; %s",
			 last.principal, (long long)last.lifetime_ms, (long long)last.ms,
			 reached ? "the broker accepted it"
				 : "no broker took it (see the kafka line)");
	pthread_mutex_unlock(&last.lock);
	return ok;
}
