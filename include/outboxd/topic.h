/*
 * topic.h: Kafka topic names and outbox.topic templates: the one reader of
 * templates ("outbox.event.{aggregate_type}") and the check of a name's
 * characters, shared by the configuration, the preflight checks and the
 * mapping of rows to records.
 */
#ifndef OUTBOXD_TOPIC_H
#define OUTBOXD_TOPIC_H

#include "outboxd/common.h"

/* One piece of an outbox.topic template: literal text, or the name of a
 * {column} placeholder. Both point into the template. */
typedef struct ob_topic_piece {
	const char *text;
	size_t len;
	bool is_column;
} ob_topic_piece;

typedef enum ob_topic_scan {
	OB_TOPIC_PIECE,     /* *piece is the next piece */
	OB_TOPIC_END,       /* the template is used up */
	OB_TOPIC_BAD_BRACE, /* a { without its }, an empty {}, or a lone } */
} ob_topic_scan;

/* The one reader of topic templates: the next piece of the template at
 * *cursor, which is advanced past it. Start with *cursor at the template's
 * first character. ob_config_finish() rejects templates that give
 * OB_TOPIC_BAD_BRACE, so the other readers only see pieces and the end. */
ob_topic_scan ob_topic_template_next(const char **cursor, ob_topic_piece *piece);

/* The longest Kafka topic name. */
#define OB_TOPIC_NAME_MAX 249

/* True when the len bytes at name are a legal Kafka topic name: 1 to
 * OB_TOPIC_NAME_MAX of [a-zA-Z0-9._-], and neither "." nor "..". With
 * partial, name is only a part of one (a template's literal text): any
 * length up to the limit, and dots alone are fine. */
bool ob_topic_name_valid(const char *name, size_t len, bool partial);

/* The entries of inbox.topics (comma-separated, blanks around each
 * trimmed, empty entries left out) as *n strings; free them with
 * ob_topic_subscriptions_free(). */
char **ob_topic_subscriptions(const char *topics, size_t *n);
void ob_topic_subscriptions_free(char **topics, size_t n);
/* True when the subscription entry (a name, or a regular expression when
 * it starts with '^', in librdkafka's POSIX extended syntax) matches
 * name. */
bool ob_topic_subscription_matches(const char *entry, const char *name);

#endif
