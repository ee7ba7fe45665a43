/*
 * kafka.c: configuration building, the log and statistics callbacks and
 * the record view that the producer and the consumer share (kafka.h).
 */
#include "outboxd/kafka.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/kafkaauth.h"
#include "outboxd/log.h"

bool
ob_kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value)
{
	char err[512];

	if (rd_kafka_conf_set(conf, key, value, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
		ob_error("invalid kafka.%s: %s", key, err);
		return false;
	}
	return true;
}

long long
ob_kafka_conf_number(const rd_kafka_conf_t *conf, const char *key)
{
	char buf[64];
	size_t size = sizeof(buf);

	if (rd_kafka_conf_get(conf, key, buf, &size) != RD_KAFKA_CONF_OK)
		return 0;
	return atoll(buf);
}

/* Set every property of table; false when librdkafka rejected one (each
 * rejection is logged). */
static bool
set_all(rd_kafka_conf_t *conf, const ob_kafka_setting *table, size_t len)
{
	bool ok = true;

	for (size_t i = 0; i < len; i++)
		ok = ob_kafka_conf_set(conf, table[i].key, table[i].value) && ok;
	return ok;
}

static bool
named_in(const char *key, const ob_kafka_setting *table, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (strcmp(key, table[i].key) == 0)
			return true;
	}
	return false;
}

rd_kafka_conf_t *
ob_kafka_conf_build(const ob_config *cfg, const ob_kafka_setting *defaults, size_t defaults_len,
		    const ob_kafka_setting *skip, size_t skip_len, const ob_kafka_setting *pinned,
		    size_t pinned_len)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	bool ok = set_all(conf, defaults, defaults_len);

	for (size_t i = 0; i < cfg->kafka_len; i++) {
		if (!named_in(cfg->kafka[i].key, skip, skip_len))
			ok = ob_kafka_conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value) && ok;
	}
	ok = set_all(conf, pinned, pinned_len) && ok;
	if (ok && ob_kafka_conf_number(conf, "statistics.interval.ms") <= 0)
		ok = ob_kafka_conf_set(conf, "statistics.interval.ms", OB_KAFKA_STATS_INTERVAL_MS);
	if (!ok) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	ob_kafkaauth_conf(conf, cfg);
	return conf;
}

rd_kafka_t *
ob_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t err_len)
{
	rd_kafka_t *rk = rd_kafka_new(type, conf, err, err_len);

	if (rk != NULL)
		ob_kafkaauth_start(rk);
	return rk;
}

void
ob_kafka_log(const rd_kafka_t *rk, int level, const char *facility, const char *buf)
{
	/* syslog levels: 0-4 warning, 5-6 info, 7 debug. librdkafka's
	 * errors are mostly a broker it cannot reach, which it retries by
	 * itself (a broker restart); what an error costs, outboxd says in
	 * lines of its own (a fatal error, a failed delivery, /readyz), so
	 * librdkafka's lines are never more than warnings. */
	ob_log_level l = level <= 4 ? OB_LOG_WARNING : level <= 6 ? OB_LOG_INFO : OB_LOG_DEBUG;
	ob_log_field fields[] = {{"component", "librdkafka"}, {"facility", facility}, {NULL, NULL}};

	/* librdkafka warns at every start that enable.gapless.guarantee is
	 * experimental; outboxd sets it on purpose (producer.h). */
	if (strcmp(facility, "CONFWARN") == 0 && strstr(buf, "enable.gapless.guarantee") != NULL)
		l = OB_LOG_DEBUG;
	if (ob_log_enabled(l))
		ob_log_kv(l, fields, "%s", buf);
}

bool
ob_kafka_brokers_error(ob_kafka_brokers *b, bool count, int err, const char *reason)
{
	const char *name = rd_kafka_err2name((rd_kafka_resp_err_t)err);

	if (err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
		if (err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__RESOLVE)
			ob_debug("kafka: %s: %s", name, reason);
		else
			ob_warn("kafka: %s: %s", name, reason);
		return false;
	}
	if (!b->down)
		ob_warn("kafka: all brokers are down (%s); librdkafka reconnects by itself",
			reason);
	b->down = true;
	if (count)
		b->up = 0;
	return true;
}

void
ob_kafka_brokers_stats(ob_kafka_brokers *b, const char *json, size_t json_len)
{
	json_t *root = json_loadb(json, json_len, 0, NULL);
	json_t *brokers = json_object_get(root, "brokers");
	const char *name;
	json_t *n;
	int up = 0;

	json_object_foreach (brokers, name, n) {
		json_t *nodeid = json_object_get(n, "nodeid");
		const char *state = json_string_value(json_object_get(n, "state"));

		if (json_integer_value(nodeid) >= 0 && state != NULL && strcmp(state, "UP") == 0)
			up++;
	}
	json_decref(root);
	b->up = up;
	if (b->down && up > 0) {
		ob_info("kafka: %d broker(s) up again", up);
		b->down = false;
	}
}

bool
ob_kafka_record_view(const rd_kafka_message_t *m, bool headers, ob_record_view *v)
{
	rd_kafka_headers_t *hdrs = NULL;
	rd_kafka_timestamp_type_t tstype;

	/* Field by field: the header arrays (1.5 kB) are only read up to
	 * headers_len, and a delivery report of every record comes here. */
	v->headers_len = 0;
	v->topic = rd_kafka_topic_name(m->rkt);
	v->topic_len = strlen(v->topic);
	v->has_key = m->key != NULL;
	v->key = m->key;
	v->key_len = m->key_len;
	v->has_value = m->payload != NULL;
	v->value = m->payload;
	v->value_len = m->len;
	v->timestamp_ms = rd_kafka_message_timestamp(m, &tstype);
	if (!headers || rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return true;
	for (size_t i = 0; i < rd_kafka_header_cnt(hdrs) && i < OB_EVENT_MAX_HEADERS; i++) {
		if (rd_kafka_header_get_all(hdrs, i, &v->header_names[i], &v->header_values[i],
					    &v->header_value_lens[i]) != RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		v->headers_len = i + 1;
	}
	return rd_kafka_header_cnt(hdrs) <= OB_EVENT_MAX_HEADERS;
}
