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
#include "outboxd/topic.h" /* topic templates and names, which the config checks */

typedef enum ob_bad_event_policy {
	OB_BAD_EVENT_DLQ = 0,
	OB_BAD_EVENT_HALT,
	OB_BAD_EVENT_HOLD_KEY, /* the publisher: hold the key's later events (hold.h) */
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

/* Where librdkafka's OAUTHBEARER tokens come from (kafkaauth.h): its own
 * [kafka] sasl.* settings, kafka_auth.token_command, or an MSK IAM token
 * outboxd signs (awsiam.h). */
typedef enum ob_kafka_auth_method {
	OB_KAFKA_AUTH_NONE = 0,
	OB_KAFKA_AUTH_COMMAND,
	OB_KAFKA_AUTH_AWS_MSK_IAM,
	OB_KAFKA_AUTH_METHODS
} ob_kafka_auth_method;

/* The methods' names as kafka_auth.method spells them. */
extern const char *const ob_kafka_auth_names[OB_KAFKA_AUTH_METHODS];

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
		/* on_slot_lost = recover: a lost slot is recovered from the
		 * outbox table (slotrecover.h); halt: exit 1 */
		bool recover_lost_slot;
		ob_plugin plugin;
		char *publication; /* pgoutput only: the publication the slot streams */
		int status_interval_ms;
		int reconnect_max_backoff_ms;
		int standby_retry_ms;
		char *password_command; /* "" means libpq's own (conninfo, PGPASSWORD, ...) */
		int credential_timeout_ms;
		bool aws_iam;      /* auth = aws_iam: the password is an RDS IAM token (awsiam.h) */
		char *aws_region;  /* "": the environment's or the profile's */
		char *aws_profile; /* "": the environment's credentials, else AWS_PROFILE */
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
		int hold_max_keys;   /* hold_key: keys held at once, past which outboxd halts */
		int hold_max_events; /* hold_key: events held at once, likewise */
		char *dlq_topic;
		char *backlog_where;    /* "" means no backlog when the slot is created */
		int64_t retention_s;    /* published rows older are deleted (retention.h); 0: off */
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
		ob_kafka_auth_method method; /* where OAUTHBEARER tokens come from (kafkaauth.h) */
		char *token_command;
		int credential_timeout_ms;
		char *aws_region; /* aws_msk_iam: as postgres.aws_region */
		char *aws_profile;
	} kafka_auth;
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

/* The three steps at once, as the command line asks: the defaults (of
 * `outboxd inbox` when inbox), the
 * file at path (NULL or "": none) less the keys that an assignment of
 * overrides sets (their values in the file are not read, so a ${NAME} there
 * need not be set), then the n overrides ("section.key=value", as -s) in
 * order, then ob_config_finish(). False (logged) on any error; release cfg
 * with ob_config_free() either way. */
bool ob_config_load(ob_config *cfg, bool inbox, const char *path, const char *const *overrides,
		    size_t n) OB_MUST_CHECK;

/* Apply one "section.key=value" override (-s). */
bool ob_config_set_override(ob_config *cfg, const char *assignment) OB_MUST_CHECK;

/* Apply one key of a section; value is expanded for ${NAME} first.
 * origin names where the setting came from, for error messages. */
bool ob_config_set(ob_config *cfg, const char *section, const char *key, const char *value,
		   const char *origin) OB_MUST_CHECK;

/* Check cross-key rules and derive the schema and table names. */
bool ob_config_finish(ob_config *cfg) OB_MUST_CHECK;

/* The value of a [kafka] property as set by the user, or NULL. */
const char *ob_config_kafka_get(const ob_config *cfg, const char *key);

/* Expand ${NAME} references in value; NULL (logged, naming setting: the
 * key and where it was set) if one is unset or unterminated. The result is
 * the caller's to free. */
char *ob_config_expand_env(const char *value, const char *setting);

/* Call changed(section, key, ctx) for every setting whose value differs
 * between a and b, [kafka] properties by name (set in one and not the
 * other, or to another value). */
void ob_config_diff(const ob_config *a, const ob_config *b,
		    void (*changed)(const char *section, const char *key, void *ctx), void *ctx);

/* True for librdkafka property names whose values are secrets. */
bool ob_config_is_secret_key(const char *key);

#endif
