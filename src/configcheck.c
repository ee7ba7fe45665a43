/*
 * configcheck.c: ob_config_finish(), the checks of a loaded configuration
 * as a whole (config.h): values that depend on each other, templates,
 * names and the derived schema and table names.
 */
#include "outboxd/config.h"
#include "outboxd/topic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split the value t of the setting key ("outbox.table", "inbox.table")
 * into *schema (default public) and *name, which replace what they held. */
static bool
split_table(const char *key, const char *t, char **schema, char **name)
{
	const char *dot = strchr(t, '.');

	free(*schema);
	free(*name);
	if (dot == NULL) {
		*schema = ob_xstrdup("public");
		*name = ob_xstrdup(t);
	} else {
		*schema = ob_xstrndup(t, (size_t)(dot - t));
		*name = ob_xstrdup(dot + 1);
	}
	if ((*schema)[0] == '\0' || (*name)[0] == '\0' || strchr(*name, '.') != NULL) {
		ob_error("invalid value \"%s\" for %s: expected schema.table", t, key);
		return false;
	}
	return true;
}

/* Check that every {column} of the template of key (outbox.topic,
 * outbox.cloudevents_source) is closed and non-empty; with topic, also
 * that its literal text could be part of a Kafka topic name (the columns'
 * text is judged per event: an invalid topic is a bad event). */
static bool
check_template(const char *key, const char *tpl, bool topic)
{
	const char *cursor = tpl;
	ob_topic_piece piece;
	ob_topic_scan scan;
	size_t literal = 0;

	while ((scan = ob_topic_template_next(&cursor, &piece)) == OB_TOPIC_PIECE) {
		if (!topic || piece.is_column)
			continue;
		literal += piece.len;
		if (!ob_topic_name_valid(piece.text, piece.len, true) ||
		    literal > OB_TOPIC_NAME_MAX) {
			ob_error("invalid value \"%s\" for %s: a Kafka topic name has at most %d "
				 "of the characters a-z, A-Z, 0-9, '.', '_' and '-'",
				 tpl, key, OB_TOPIC_NAME_MAX);
			return false;
		}
	}
	if (scan == OB_TOPIC_BAD_BRACE) {
		ob_error("invalid value \"%s\" for %s: expected literal text and "
			 "{column} placeholders, found a stray brace at offset %zu",
			 tpl, key, (size_t)(cursor - tpl));
		return false;
	}
	return true;
}

/* With outbox.cloudevents on, a CloudEvent needs a source (a non-empty
 * template) and a type (a mapped type column). */
static bool
check_cloudevents(const ob_config *cfg)
{
	if (cfg->outbox.cloudevents == OB_CE_OFF)
		return true;
	if (cfg->outbox.cloudevents_source[0] == '\0') {
		ob_error("outbox.cloudevents is %s but outbox.cloudevents_source is empty: set it "
			 "to a URI-reference such as /orders/{aggregate_type}",
			 cfg->outbox.cloudevents == OB_CE_BINARY ? "binary" : "structured");
		return false;
	}
	if (cfg->outbox.type_column[0] == '\0') {
		ob_error("outbox.cloudevents needs outbox.type_column: a CloudEvent has a type");
		return false;
	}
	return check_template("outbox.cloudevents_source", cfg->outbox.cloudevents_source, false);
}

/* kafka_auth.method command and aws_msk_iam feed librdkafka's OAUTHBEARER
 * mechanism, whose token refresh outboxd takes over; command needs its
 * command. */
static bool
check_kafka_auth(const ob_config *cfg)
{
	const char *mech = ob_config_kafka_get(cfg, "sasl.mechanism");
	const char *method = ob_kafka_auth_names[cfg->kafka_auth.method];

	if (cfg->kafka_auth.method == OB_KAFKA_AUTH_NONE)
		return true;
	if (cfg->kafka_auth.method == OB_KAFKA_AUTH_COMMAND &&
	    cfg->kafka_auth.token_command[0] == '\0') {
		ob_error("kafka_auth.method is command but kafka_auth.token_command is empty");
		return false;
	}
	if (mech == NULL)
		mech = ob_config_kafka_get(cfg, "sasl.mechanisms");
	if (mech == NULL || strcmp(mech, "OAUTHBEARER") != 0) {
		ob_error(
		    "kafka_auth.method = %s needs kafka.sasl.mechanism = OAUTHBEARER (it is %s)",
		    method, mech != NULL ? mech : "unset");
		return false;
	}
	return true;
}

/* postgres.auth = aws_iam makes the password itself: a password command
 * beside it would be one source too many. */
static bool
check_pg_auth(const ob_config *cfg)
{
	if (!cfg->pg.aws_iam || cfg->pg.password_command[0] == '\0')
		return true;
	ob_error("postgres.auth = aws_iam and postgres.password_command both give the password: "
		 "set one of them");
	return false;
}

/* A name of at most 63 lower-case letters, digits and underscores. */
static bool
check_plain_name(const char *key, const char *name)
{
	if (strlen(name) <= 63 &&
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(name))
		return true;
	ob_error("invalid value \"%s\" for %s: use at most 63 lower-case letters, digits and "
		 "underscores",
		 name, key);
	return false;
}

/* The inbox's own limits: batch_max within one statement's parameters,
 * and a subscription that never takes in the dead-letter topic (the inbox
 * would consume its own dead letters, each failing again, forever). */
static bool
check_inbox(const ob_config *cfg)
{
	size_t n;
	char **topics = ob_topic_subscriptions(cfg->inbox.topics, &n);
	bool ok = true;

	if (cfg->inbox.batch_max > OB_INBOX_BATCH_LIMIT) {
		ob_error("invalid value \"%d\" for inbox.batch_max: at most %d (a row takes 9 of "
			 "the 65535 parameters of one statement)",
			 cfg->inbox.batch_max, OB_INBOX_BATCH_LIMIT);
		ok = false;
	}
	for (size_t i = 0; i < n; i++) {
		if (ob_topic_subscription_matches(topics[i], cfg->outbox.dlq_topic)) {
			ob_error(
			    "inbox.topics entry \"%s\" takes in outbox.dlq_topic (%s): the inbox "
			    "would consume its own dead letters; change one of them",
			    topics[i], cfg->outbox.dlq_topic);
			ok = false;
		}
	}
	ob_topic_subscriptions_free(topics, n);
	return ok;
}

bool
ob_config_finish(ob_config *cfg)
{
	bool ok = split_table("outbox.table", cfg->outbox.table, &cfg->outbox.schema,
			      &cfg->outbox.table_name);

	if (!split_table("inbox.table", cfg->inbox.table, &cfg->inbox.schema,
			 &cfg->inbox.table_name))
		ok = false;

	if (!check_template("outbox.topic", cfg->outbox.topic, true) || !check_inbox(cfg))
		ok = false;
	if (!ob_topic_name_valid(cfg->outbox.dlq_topic, strlen(cfg->outbox.dlq_topic), false)) {
		ob_error("invalid value \"%s\" for outbox.dlq_topic: a Kafka topic name has at "
			 "most %d of the characters a-z, A-Z, 0-9, '.', '_' and '-'",
			 cfg->outbox.dlq_topic, OB_TOPIC_NAME_MAX);
		ok = false;
	}
	if (!check_cloudevents(cfg) || !check_kafka_auth(cfg) || !check_pg_auth(cfg))
		ok = false;
	if (cfg->outbox.retention_s > 0 && cfg->outbox.timestamp_column[0] == '\0') {
		ob_error("outbox.retention needs outbox.timestamp_column: a row's age is the "
			 "time it holds");
		ok = false;
	}
	/* Postgres itself allows only these in slot names; a publication
	 * named so needs no quoting in SQL or in pgoutput's options. */
	if (!check_plain_name("postgres.slot", cfg->pg.slot) ||
	    !check_plain_name("postgres.publication", cfg->pg.publication))
		ok = false;
	return ok;
}
