/*
 * topictpl.h: topic templates (outbox.topic, outbox.cloudevents_source:
 * literal text and {column} placeholders) and Kafka topic names.
 */
#ifndef OUTBOXD_TOPICTPL_H
#define OUTBOXD_TOPICTPL_H

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

#endif
