/*
 * kafkaprobe.c: `outboxd check`'s look at the Kafka cluster (kafkaprobe.h).
 *
 * The features librdkafka enabled for a broker are not part of its API;
 * its "feature" debug context logs, each time a connection learns the
 * broker's API versions, one line per entry of its feature map:
 *
 *   [thrd:…]: <broker>: Enabling feature IdempotentProducer
 *   [thrd:…]: <broker>: Disabling feature Sasl
 *
 * (the same text from librdkafka 2.0 to 2.15). A feature can have several
 * entries (2.11 gave Sasl a second one, SaslHandshake, beside JoinGroup
 * v0) and is enabled when any of them is, so a broker lacks a feature
 * when none of its lines enabled it. The log callback runs on
 * librdkafka's threads: the table it fills is guarded by a mutex and read
 * once the client is destroyed.
 */
#include "outboxd/kafkaprobe.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "outboxd/kafka.h"
#include "outboxd/log.h"
#include "outboxd/prodconf.h"

#define MAX_BROKERS     16
/* rd_kafka_version() of librdkafka 2.11.0, the first to accept a broker's
 * later JoinGroup versions for classic consumer groups and Kerberos
 * (before, both needed JoinGroup v0 exactly), and to enable Kerberos
 * through SaslHandshake too. */
#define LIBRDKAFKA_2_11 0x020b00ff

/* The features kafkaprobe.h explains, by the names librdkafka logs. */
enum { F_IDEMPOTENCE = 1, F_SASL = 2, F_GROUPS = 4 };
static const struct {
	const char *name;
	int bit;
} features[] = {
    {"IdempotentProducer", F_IDEMPOTENCE},
    {"Sasl", F_SASL},
    {"BrokerBalancedConsumer", F_GROUPS},
};

typedef struct seen_broker {
	char name[128];
	int enabled; /* F_* bits any line enabled */
} seen_broker;

typedef struct probe_state {
	pthread_mutex_t lock;
	seen_broker brokers[MAX_BROKERS];
	int n;
	bool user_debug; /* [kafka] debug was set: its lines are passed on */
} probe_state;

/* Records that broker name (name_len bytes) has a feature line, enabling
 * the F_* bits of bit. */
static void
note_feature(probe_state *st, const char *name, size_t name_len, int bit)
{
	seen_broker *b = NULL;

	if (name_len >= sizeof(st->brokers[0].name))
		name_len = sizeof(st->brokers[0].name) - 1;
	pthread_mutex_lock(&st->lock);
	for (int i = 0; i < st->n && b == NULL; i++) {
		if (strlen(st->brokers[i].name) == name_len &&
		    strncmp(st->brokers[i].name, name, name_len) == 0)
			b = &st->brokers[i];
	}
	if (b == NULL && st->n < MAX_BROKERS) {
		b = &st->brokers[st->n++];
		memcpy(b->name, name, name_len);
		b->name[name_len] = '\0';
	}
	if (b != NULL)
		b->enabled |= bit;
	pthread_mutex_unlock(&st->lock);
}

/* Log callback of the probe's client: feature lines fill the table;
 * every line is passed on at debug level. */
static void
on_probe_log(const rd_kafka_t *rk, int level, const char *facility, const char *buf)
{
	static const char on[] = ": Enabling feature ", off[] = ": Disabling feature ";
	const char *name = strstr(buf, "]: ");
	const char *line = strstr(buf, on);
	probe_state *st = rd_kafka_opaque(rk);
	int bit = 0;

	/* librdkafka's debug lines (level 7) are there for the features:
	 * the log gets them only when [kafka] debug asked for some. */
	if (level < 7 || st->user_debug)
		ob_debug("kafka probe: %s: %s", facility, buf);
	if (line != NULL) {
		for (size_t i = 0; i < OB_ARRAY_LEN(features); i++) {
			if (strcmp(line + strlen(on), features[i].name) == 0)
				bit = features[i].bit;
		}
	} else {
		line = strstr(buf, off);
	}
	if (name != NULL && line != NULL && line > name + 3)
		note_feature(st, name + 3, (size_t)(line - (name + 3)), bit);
}

/* Whether conf authenticates with Kerberos: a SASL security protocol
 * and sasl.mechanisms GSSAPI (librdkafka's default mechanism). */
static bool
uses_gssapi(const rd_kafka_conf_t *conf)
{
	char protocol[64], mechanism[64];
	size_t plen = sizeof(protocol), mlen = sizeof(mechanism);

	return rd_kafka_conf_get(conf, "security.protocol", protocol, &plen) == RD_KAFKA_CONF_OK &&
	       strncasecmp(protocol, "sasl_", 5) == 0 &&
	       rd_kafka_conf_get(conf, "sasl.mechanisms", mechanism, &mlen) == RD_KAFKA_CONF_OK &&
	       strcasecmp(mechanism, "GSSAPI") == 0;
}

/* Adds "feature" to conf's debug contexts (keeping the configured ones;
 * *user_debug says whether there were any). False (logged) when
 * librdkafka refuses it. */
static bool
debug_features(rd_kafka_conf_t *conf, bool *user_debug)
{
	char debug[512], errstr[256];
	size_t len = sizeof(debug);

	*user_debug =
	    rd_kafka_conf_get(conf, "debug", debug, &len) == RD_KAFKA_CONF_OK && debug[0] != '\0';
	if (!*user_debug)
		snprintf(debug, sizeof(debug), "feature");
	else if (strlen(debug) + sizeof(",feature") <= sizeof(debug))
		strcat(debug, ",feature");
	if (rd_kafka_conf_set(conf, "debug", debug, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
		ob_error("kafka probe: debug=%s: %s", debug, errstr);
		return false;
	}
	return true;
}

/* Copies into p what the brokers of st lacked. */
static void
collect(ob_kafka_probe *p, const probe_state *st)
{
	p->brokers = st->n;
	if (st->n > 0)
		snprintf(p->first, sizeof(p->first), "%s", st->brokers[0].name);
	for (int i = 0; i < st->n; i++) {
		const seen_broker *b = &st->brokers[i];

		if (!(b->enabled & F_IDEMPOTENCE) && p->no_idempotence[0] == '\0')
			snprintf(p->no_idempotence, sizeof(p->no_idempotence), "%s", b->name);
		if (!(b->enabled & F_SASL) && p->no_sasl[0] == '\0')
			snprintf(p->no_sasl, sizeof(p->no_sasl), "%s", b->name);
		if (!(b->enabled & F_GROUPS) && p->no_groups[0] == '\0')
			snprintf(p->no_groups, sizeof(p->no_groups), "%s", b->name);
	}
}

bool
ob_kafka_probe_run(const ob_config *cfg, int timeout_ms, const char *topic, ob_kafka_probe *p)
{
	rd_kafka_conf_t *conf = ob_prodconf_build(cfg, false, NULL, NULL);
	const struct rd_kafka_metadata *md = NULL;
	probe_state st = {.lock = PTHREAD_MUTEX_INITIALIZER};
	rd_kafka_resp_err_t err;
	rd_kafka_t *rk;
	char errstr[512];

	memset(p, 0, sizeof(*p));
	if (conf == NULL || !debug_features(conf, &st.user_debug)) {
		snprintf(p->detail, sizeof(p->detail), "invalid [kafka] settings (see the log)");
		if (conf != NULL)
			rd_kafka_conf_destroy(conf);
		return false;
	}
	p->gssapi = uses_gssapi(conf);
	rd_kafka_conf_set_log_cb(conf, on_probe_log);
	rd_kafka_conf_set_opaque(conf, &st);
	rk = ob_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL) {
		snprintf(p->detail, sizeof(p->detail), "could not create kafka client: %s", errstr);
		rd_kafka_conf_destroy(conf);
		return false;
	}
	/* all_topics=1: list topics without asking the cluster to create any. */
	err = rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms);
	p->reached = err == RD_KAFKA_RESP_ERR_NO_ERROR;
	if (!p->reached) {
		snprintf(p->detail, sizeof(p->detail), "could not reach %s: %s",
			 ob_config_kafka_get(cfg, "bootstrap.servers"), rd_kafka_err2str(err));
	} else {
		snprintf(p->detail, sizeof(p->detail), "%d broker(s), %d topic(s)", md->broker_cnt,
			 md->topic_cnt);
		for (int i = 0; topic != NULL && i < md->topic_cnt; i++) {
			if (strcmp(md->topics[i].topic, topic) == 0 &&
			    md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR)
				p->topic_exists = true;
		}
		rd_kafka_metadata_destroy(md);
	}
	rd_kafka_destroy(rk); /* no log line comes after this */
	collect(p, &st);
	pthread_mutex_destroy(&st.lock);
	return p->reached;
}

bool
ob_kafka_probe_fit(const ob_kafka_probe *p, char *buf, size_t size)
{
	const char *v = rd_kafka_version_str();
	bool before_2_11 = rd_kafka_version() < LIBRDKAFKA_2_11;

	if (p->no_idempotence[0] != '\0') {
		snprintf(
		    buf, size,
		    "broker %s offers no idempotent producer (Kafka 0.11 or later): outboxd run "
		    "cannot publish to it",
		    p->no_idempotence);
		return false;
	}
	if (p->gssapi && p->no_sasl[0] != '\0') {
		snprintf(
		    buf, size,
		    "librdkafka %s did not enable Kerberos (sasl.mechanism GSSAPI) for broker %s, "
		    "which offers %s: neither outboxd run nor outboxd inbox can authenticate%s",
		    v, p->no_sasl,
		    before_2_11 ? "no JoinGroup v0 (as Apache Kafka 4.0.0)"
				: "neither JoinGroup nor SaslHandshake",
		    before_2_11 ? "; use librdkafka 2.11 or later (the container image has "
				  "2.15.1), or Kafka 4.0.1 or later"
				: "");
		return false;
	}
	if (p->no_groups[0] != '\0' && !before_2_11) {
		snprintf(
		    buf, size,
		    "broker %s offers no consumer group protocol librdkafka %s can use: outboxd "
		    "inbox cannot join its group there",
		    p->no_groups, v);
		return false;
	}
	if (p->no_groups[0] != '\0') {
		snprintf(buf, size,
			 "librdkafka %s fits broker %s: it offers no JoinGroup v0 (as Apache Kafka "
			 "4.0.0), so librdkafka counts it as without classic consumer groups, yet "
			 "outboxd inbox joins with the later JoinGroup versions%s",
			 v, p->no_groups,
			 p->gssapi ? "" : "; Kerberos would not work there before librdkafka 2.11");
		return true;
	}
	snprintf(buf, size,
		 "librdkafka %s fits broker %s%s: idempotent producer, consumer groups%s", v,
		 p->first, p->brokers > 1 ? " and the others it talked to" : "",
		 p->gssapi ? ", Kerberos" : "");
	return true;
}
