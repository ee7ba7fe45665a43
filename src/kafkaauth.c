/*
 * kafkaauth.c: OAUTHBEARER tokens from kafka_auth.token_command or signed
 * as MSK IAM tokens (kafkaauth.h).
 */
#include "outboxd/kafkaauth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ob_build.h"
#include "outboxd/awsiam.h"
#include "outboxd/credcmd.h"
#include "outboxd/kafka.h"
#include "outboxd/log.h"

/* The method and its settings every client uses, set by the first
 * ob_kafkaauth_conf() of the process and never changed after (the
 * background threads read them). */
static struct {
	bool set;
	ob_kafka_auth_method method;
	char *command;
	int timeout_ms;
	char *aws_region, *aws_profile;
} settings;

/* The latest run, for `outboxd check`; written on background threads. */
static struct {
	pthread_mutex_t lock;
	bool ran;
	bool ok;
	int64_t ms, lifetime_ms;
	char principal[128];
	char from[512]; /* aws_msk_iam: " from SOURCE, region R" */
	char err[1024];
} last = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A token from kafka_auth.token_command into *tok; false with err. */
static bool
command_token(ob_credtoken *tok, char *err, size_t err_len)
{
	char why[256], *out = NULL;
	/* On librdkafka's thread, so no tick: the daemon's heartbeat is the
	 * main loop's. */
	bool ok = ob_credcmd_run("kafka_auth.token_command", settings.command, settings.timeout_ms,
				 NULL, NULL, &out, err, err_len);

	if (ok && !ob_credtoken_parse(out, strlen(out), tok, why, sizeof(why))) {
		snprintf(err, err_len, "what kafka_auth.token_command printed %s", why);
		ok = false;
	}
	ob_credcmd_free(out);
	return ok;
}

/* An MSK IAM token signed at now into *tok, and where its credentials
 * came from into from; false with err. */
static bool
msk_token(time_t now, ob_credtoken *tok, char *from, size_t from_len, char *err, size_t err_len)
{
	char principal[128], source[384];

	if (!ob_awsiam_msk("kafka_auth.method aws_msk_iam", settings.aws_region,
			   settings.aws_profile, now, &tok->token, principal, sizeof(principal),
			   source, sizeof(source), err, err_len))
		return false;
	snprintf(from, from_len, " from %s", source);
	tok->principal = ob_xstrdup(principal);
	tok->lifetime_ms = OB_AWSIAM_EXPIRES * 1000;
	return true;
}

#if OB_TEST_HOOKS
/* Test builds (meson -Dtest_hooks=true): OUTBOXD_TEST_TOKEN_FILE=PATH gets
 * a line "EXPIRY_MS PRINCIPAL TOKEN" for every token handed to
 * librdkafka, so a test can check what a broker would be given (the test
 * broker takes no SASL). */
static void
test_hook_token(const ob_credtoken *tok, int64_t expiry_ms)
{
	const char *path = getenv("OUTBOXD_TEST_TOKEN_FILE");
	FILE *f = path != NULL ? fopen(path, "a") : NULL;

	if (f == NULL)
		return;
	fprintf(f, "%lld %s %s\n", (long long)expiry_ms, tok->principal, tok->token);
	fclose(f);
}
#endif

/* librdkafka's token refresh callback: get a token as the method says and
 * hand it to librdkafka, or tell it the refresh failed. */
static void
on_refresh(rd_kafka_t *rk, const char *oauthbearer_config, void *opaque)
{
	int64_t started = ob_mono_ms(), now_ms;
	time_t now = time(NULL);
	ob_credtoken tok = {0};
	char err[1024], why[256], from[512] = "";
	bool ok = settings.method == OB_KAFKA_AUTH_AWS_MSK_IAM
		      ? msk_token(now, &tok, from, sizeof(from), err, sizeof(err))
		      : command_token(&tok, err, sizeof(err));

	(void)oauthbearer_config;
	(void)opaque;
	/* An MSK token lives from its signing second; a command's token from
	 * when the command printed it. */
	now_ms =
	    settings.method == OB_KAFKA_AUTH_AWS_MSK_IAM ? (int64_t)now * 1000 : ob_now_us() / 1000;
	if (ok && rd_kafka_oauthbearer_set_token(rk, tok.token, now_ms + tok.lifetime_ms,
						 tok.principal, NULL, 0, why,
						 sizeof(why)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(err, sizeof(err),
			 "librdkafka refused the token of kafka_auth.method %s: %s",
			 ob_kafka_auth_names[settings.method], why);
		ok = false;
	}
#if OB_TEST_HOOKS
	if (ok)
		test_hook_token(&tok, now_ms + tok.lifetime_ms);
#endif
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
	snprintf(last.from, sizeof(last.from), "%s", from);
	snprintf(last.err, sizeof(last.err), "%s", ok ? "" : err);
	pthread_mutex_unlock(&last.lock);
	ob_credtoken_clear(&tok);
}

void
ob_kafkaauth_conf(rd_kafka_conf_t *conf, const ob_config *cfg)
{
	if (cfg->kafka_auth.method == OB_KAFKA_AUTH_NONE)
		return;
	if (!settings.set) {
		settings.method = cfg->kafka_auth.method;
		settings.command = ob_xstrdup(cfg->kafka_auth.token_command);
		settings.timeout_ms = cfg->kafka_auth.credential_timeout_ms;
		settings.aws_region = ob_xstrdup(cfg->kafka_auth.aws_region);
		settings.aws_profile = ob_xstrdup(cfg->kafka_auth.aws_profile);
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
	const char *source = cfg->kafka_auth.method == OB_KAFKA_AUTH_COMMAND
				 ? "kafka_auth.token_command"
				 : "kafka_auth.method aws_msk_iam";
	bool ok;

	if (cfg->kafka_auth.method == OB_KAFKA_AUTH_NONE) {
		snprintf(buf, size,
			 "kafka_auth.method none: librdkafka's own [kafka] settings (%s)",
			 mech != NULL ? mech : "no SASL mechanism");
		return true;
	}
	pthread_mutex_lock(&last.lock);
	ok = last.ran && last.ok && reached;
	if (!last.ran)
		snprintf(buf, size, "%s: no token was asked for", source);
	else if (!last.ok)
		snprintf(buf, size, "%s", last.err);
	else
		snprintf(
		    buf, size, "%s gave a token for %s (lifetime %lld ms) in %lld ms%s; %s", source,
		    last.principal, (long long)last.lifetime_ms, (long long)last.ms, last.from,
		    reached ? "the broker accepted it" : "no broker took it (see the kafka line)");
	pthread_mutex_unlock(&last.lock);
	return ok;
}
