/*
 * config.h: outboxd's settings (deploy/README.md, "Configuration reference").
 *
 * A configuration is built in three steps: ob_config_init() (for `outboxd
 * inbox`, ob_config_init_inbox()) sets the defaults, ob_config_load_file()
 * and ob_config_set() apply the INI file and the -s overrides in
 * command-line order, and ob_config_finish() checks the result and derives
 * the values other modules read. Every failure is logged once, naming the
 * key, and makes the command exit 2.
 *
 * "${NAME}" in any value is replaced by the environment variable NAME; an
 * unset variable is an error. Keys of [kafka] pass through to librdkafka
 * (checked when the producer is created), except enable.idempotence and
 * acks, which outboxd pins.
 */
#ifndef OUTBOXD_CONFIG_H
#define OUTBOXD_CONFIG_H

#include "outboxd/common.h"
#include "outboxd/log.h"

typedef enum ob_bad_event_policy {
	OB_BAD_EVENT_DLQ = 0,
	OB_BAD_EVENT_HALT,
} ob_bad_event_policy;

/* What `outboxd inbox` does with a stored position that cannot belong to
 * the partition the broker serves (sql/README.md, "The inbox tables"). */
typedef enum ob_mismatch_policy {
	OB_MISMATCH_HALT = 0, /* exit 1 */
	OB_MISMATCH_EARLIEST, /* start at the partition's low watermark */
	OB_MISMATCH_LATEST,   /* start at the partition's high watermark */
	OB_MISMATCH_STORED,   /* start where Postgres (else Kafka) says, as if it matched */
} ob_mismatch_policy;

/* The most records one inbox transaction may hold: libpq sends at most
 * 65,535 parameters in one statement and a row takes nine. */
#define OB_INBOX_BATCH_LIMIT (65535 / 9)

/* How outbox events are published (sql/README.md, "CloudEvents"): plain
 * records, or CloudEvents in the Kafka protocol binding's binary or
 * structured content mode. */
typedef enum ob_ce_mode {
	OB_CE_OFF = 0,
	OB_CE_BINARY,
	OB_CE_STRUCTURED,
} ob_ce_mode;

/* The logical decoding plugin the slot uses (deploy/README.md, "Choosing a decoder"). */
typedef enum ob_plugin {
	OB_PLUGIN_WAL2JSON = 0,
	OB_PLUGIN_PGOUTPUT,
} ob_plugin;

/* The plugin's name as Postgres knows it. */
const char *ob_plugin_name(ob_plugin plugin);

/* What every message about a slot of the other plugin ends with: the two
 * ways to switch decoders that publish the events in between
 * (deploy/README.md, "Switching decoders"). */
#define OB_PLUGIN_SWITCH_HINT                                                                      \
	"set postgres.plugin to the slot's plugin, or switch decoders without losing "             \
	"the events in between (deploy/README.md, \"Switching decoders\"): let outboxd "           \
	"drain with the writers stopped, then drop the slot; or drop it and start with "           \
	"outbox.backlog_where naming the rows written since its confirmed position"

/* A librdkafka property in a table of outboxd's own (string constants). */
typedef struct ob_kafka_setting {
	const char *key;
	const char *value;
} ob_kafka_setting;

/* The librdkafka properties outboxd pins, with the only value it accepts:
 * the config refuses other values, and the producer applies them after the
 * user's properties. */
extern const ob_kafka_setting ob_kafka_pinned[];
extern const size_t ob_kafka_pinned_len;
/* The librdkafka properties the inbox consumer pins (sql/README.md, "The inbox tables"):
 * offsets are stored in Postgres, so Kafka never commits on its own. */
extern const ob_kafka_setting ob_kafka_consumer_pinned[];
extern const size_t ob_kafka_consumer_pinned_len;

/* One librdkafka property as the user set it, in order; owned by the
 * config. */
typedef struct ob_kafka_prop {
	char *key;
	char *value;
} ob_kafka_prop;

typedef struct ob_config {
	struct {
		char *conninfo;
		char *slot;
		bool create_slot;
		bool slot_failover; /* PostgreSQL 17+: the slot has FAILOVER (synced to standbys) */
		ob_plugin plugin;
		char *publication; /* pgoutput only: the publication the slot streams */
		int status_interval_ms;
		int reconnect_max_backoff_ms;
		int standby_retry_ms;
	} pg;
	struct {
		char *table;      /* as configured: "schema.name" or "name" */
		char *schema;     /* derived by ob_config_finish() */
		char *table_name; /* derived by ob_config_finish() */
		char *id_column;
		char *key_column;
		char *type_column; /* "" when not mapped */
		char *payload_column;
		char *headers_column;   /* "" when not mapped */
		char *timestamp_column; /* "" means commit time */
		char *topic;
		char *message_prefix; /* "" means messages are not published */
		ob_bad_event_policy on_bad_event;
		char *dlq_topic;
		char *backlog_where;    /* "" means no backlog when the slot is created */
		char *backlog_order_by; /* "" means timestamp_column, then id_column */
		ob_ce_mode cloudevents;
		char *cloudevents_source; /* a template like topic; required unless cloudevents is
					     off */
	} outbox;
	struct {
		char *conninfo;   /* "" means libpq defaults and environment */
		char *table;      /* as configured: "schema.name" or "name" */
		char *schema;     /* derived by ob_config_finish() */
		char *table_name; /* derived by ob_config_finish() */
		char *topics;     /* comma-separated; "" until configured */
		char *group;      /* "": derived from the inbox's database and table (inboxdb.h) */
		char *id_header;
		int batch_max; /* at most OB_INBOX_BATCH_LIMIT */
		ob_mismatch_policy on_position_mismatch;
	} inbox;
	/* postgres.conninfo, postgres.slot or outbox.table was set (file or
	 * -s): the config describes a publisher, which `check` then checks
	 * even when an inbox is configured too. */
	bool publisher_set;
	ob_kafka_prop *kafka;
	size_t kafka_len;
	struct {
		char *listen;       /* "" disables the HTTP server */
		int stall_after_ms; /* /readyz: stalled after this long without progress */
	} http;
	struct {
		ob_log_format format;
		ob_log_level level;
	} log;
} ob_config;

/* Fill cfg with the defaults of deploy/README.md "Configuration reference". Release with
 * ob_config_free(). */
void ob_config_init(ob_config *cfg);

/* The same for `outboxd inbox`: the defaults above, except http.listen's,
 * another port than the publisher's, so both run on one host. */
void ob_config_init_inbox(ob_config *cfg);

void ob_config_free(ob_config *cfg);

/* Apply an INI file. False (logged, with file and line) on a read error,
 * a syntax error, an unknown section or key, or a bad value. */
bool ob_config_load_file(ob_config *cfg, const char *path) OB_MUST_CHECK;

/* Apply one "section.key=value" override (-s). */
bool ob_config_set_override(ob_config *cfg, const char *assignment) OB_MUST_CHECK;

/* Apply one key of a section; value is expanded for ${NAME} first.
 * origin names where the setting came from, for error messages. */
bool ob_config_set(ob_config *cfg, const char *section, const char *key, const char *value,
		   const char *origin) OB_MUST_CHECK;

/* Check cross-key rules and derive the schema and table names. */
bool ob_config_finish(ob_config *cfg) OB_MUST_CHECK;

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

/* The value of a [kafka] property as set by the user, or NULL. */
const char *ob_config_kafka_get(const ob_config *cfg, const char *key);

/* The entries of inbox.topics (comma-separated, blanks around each
 * trimmed, empty entries left out) as *n strings; free them with
 * ob_config_free_topics(). */
char **ob_config_inbox_topics(const char *topics, size_t *n);
void ob_config_free_topics(char **topics, size_t n);

/* Expand ${NAME} references in value; NULL (logged) if one is unset or
 * unterminated. The result is the caller's to free. */
char *ob_config_expand_env(const char *value, const char *origin);

/* True for librdkafka property names whose values are secrets. */
bool ob_config_is_secret_key(const char *key);

#endif
