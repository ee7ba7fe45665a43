/*
 * config.c: the settings table, INI loading (inih), -s overrides, ${ENV}
 * expansion and validation.
 *
 * Every key outboxd knows is one row of config_keys[]; parsing, defaults and
 * the "unknown key" error all come from that table, so a key cannot exist in
 * one place and not another. The few keys whose default differs for
 * `outboxd inbox` are named again in inbox_defaults[].
 */
#include "outboxd/config.h"
#include "outboxd/inifile.h"
#include "outboxd/topic.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum key_type {
	KEY_STRING,   /* may be empty */
	KEY_NONEMPTY, /* must not be empty */
	KEY_BOOL,
	KEY_MS,          /* positive milliseconds */
	KEY_COUNT,       /* a positive count */
	KEY_BAD_EVENT,   /* dlq | halt */
	KEY_PLUGIN,      /* wal2json | pgoutput */
	KEY_MISMATCH,    /* halt | earliest | latest | stored */
	KEY_CLOUDEVENTS, /* off | binary | structured */
	KEY_AUTH_METHOD, /* none | command | aws_msk_iam */
	KEY_PG_AUTH,     /* password | aws_iam */
	KEY_SLOT_LOST,   /* recover | halt */
	KEY_DURATION,    /* seconds, from "30s", "10min", "12h" or "7d"; "": 0 */
	KEY_LOG_FORMAT,
	KEY_LOG_LEVEL,
} key_type;

typedef struct config_key {
	const char *section;
	const char *key;
	key_type type;
	size_t offset;
	size_t size; /* of the field: values are compared by it (strings by strcmp) */
	const char *default_value;
} config_key;

/* A row's offset and size of its field. */
#define OFF(field) offsetof(ob_config, field), sizeof(((ob_config *)NULL)->field)

static const config_key config_keys[] = {
    {"postgres", "conninfo", KEY_STRING, OFF(pg.conninfo), ""},
    {"postgres", "slot", KEY_NONEMPTY, OFF(pg.slot), "outboxd"},
    {"postgres", "create_slot", KEY_BOOL, OFF(pg.create_slot), "true"},
    {"postgres", "slot_failover", KEY_BOOL, OFF(pg.slot_failover), "true"},
    {"postgres", "on_slot_lost", KEY_SLOT_LOST, OFF(pg.recover_lost_slot), "recover"},
    {"postgres", "plugin", KEY_PLUGIN, OFF(pg.plugin), "wal2json"},
    {"postgres", "publication", KEY_NONEMPTY, OFF(pg.publication), "outboxd"},
    {"postgres", "status_interval_ms", KEY_MS, OFF(pg.status_interval_ms), "1000"},
    {"postgres", "reconnect_max_backoff_ms", KEY_MS, OFF(pg.reconnect_max_backoff_ms), "30000"},
    {"postgres", "standby_retry_ms", KEY_MS, OFF(pg.standby_retry_ms), "5000"},
    {"postgres", "password_command", KEY_STRING, OFF(pg.password_command), ""},
    {"postgres", "credential_timeout_ms", KEY_MS, OFF(pg.credential_timeout_ms), "10000"},
    {"postgres", "auth", KEY_PG_AUTH, OFF(pg.aws_iam), "password"},
    {"postgres", "aws_region", KEY_STRING, OFF(pg.aws_region), ""},
    {"postgres", "aws_profile", KEY_STRING, OFF(pg.aws_profile), ""},
    {"kafka_auth", "method", KEY_AUTH_METHOD, OFF(kafka_auth.method), "none"},
    {"kafka_auth", "token_command", KEY_STRING, OFF(kafka_auth.token_command), ""},
    {"kafka_auth", "credential_timeout_ms", KEY_MS, OFF(kafka_auth.credential_timeout_ms), "10000"},
    {"kafka_auth", "aws_region", KEY_STRING, OFF(kafka_auth.aws_region), ""},
    {"kafka_auth", "aws_profile", KEY_STRING, OFF(kafka_auth.aws_profile), ""},
    {"outbox", "table", KEY_NONEMPTY, OFF(outbox.table), "public.outbox"},
    {"outbox", "id_column", KEY_NONEMPTY, OFF(outbox.id_column), "id"},
    {"outbox", "key_column", KEY_NONEMPTY, OFF(outbox.key_column), "aggregate_id"},
    {"outbox", "type_column", KEY_STRING, OFF(outbox.type_column), "event_type"},
    {"outbox", "payload_column", KEY_NONEMPTY, OFF(outbox.payload_column), "payload"},
    {"outbox", "headers_column", KEY_STRING, OFF(outbox.headers_column), "headers"},
    {"outbox", "timestamp_column", KEY_STRING, OFF(outbox.timestamp_column), "created_at"},
    {"outbox", "topic", KEY_NONEMPTY, OFF(outbox.topic), "outbox.event.{aggregate_type}"},
    {"outbox", "message_prefix", KEY_STRING, OFF(outbox.message_prefix), "outbox"},
    {"outbox", "on_bad_event", KEY_BAD_EVENT, OFF(outbox.on_bad_event), "dlq"},
    {"outbox", "hold_max_keys", KEY_COUNT, OFF(outbox.hold_max_keys), "10000"},
    {"outbox", "hold_max_events", KEY_COUNT, OFF(outbox.hold_max_events), "1000000"},
    {"outbox", "dlq_topic", KEY_NONEMPTY, OFF(outbox.dlq_topic), "outbox.dlq"},
    {"outbox", "retention", KEY_DURATION, OFF(outbox.retention_s), ""},
    {"outbox", "backlog_where", KEY_STRING, OFF(outbox.backlog_where), ""},
    {"outbox", "backlog_order_by", KEY_STRING, OFF(outbox.backlog_order_by), ""},
    {"outbox", "cloudevents", KEY_CLOUDEVENTS, OFF(outbox.cloudevents), "off"},
    {"outbox", "cloudevents_source", KEY_STRING, OFF(outbox.cloudevents_source), ""},
    {"inbox", "conninfo", KEY_STRING, OFF(inbox.conninfo), ""},
    {"inbox", "table", KEY_NONEMPTY, OFF(inbox.table), "public.inbox"},
    {"inbox", "topics", KEY_STRING, OFF(inbox.topics), ""},
    {"inbox", "group", KEY_STRING, OFF(inbox.group), ""},
    {"inbox", "id_header", KEY_NONEMPTY, OFF(inbox.id_header), "id"},
    {"inbox", "batch_max", KEY_COUNT, OFF(inbox.batch_max), "500"},
    {"inbox", "on_position_mismatch", KEY_MISMATCH, OFF(inbox.on_position_mismatch), "halt"},
    {"http", "listen", KEY_STRING, OFF(http.listen), "127.0.0.1:7187"},
    {"http", "stall_after_ms", KEY_MS, OFF(http.stall_after_ms), "60000"},
    {"log", "format", KEY_LOG_FORMAT, OFF(log.format), "text"},
    {"log", "level", KEY_LOG_LEVEL, OFF(log.level), "info"},
};

/* The defaults `outboxd inbox` has instead: a publisher and an inbox on
 * one host must not both take one port (deploy/README.md, "Metrics and
 * health"). */
static const struct {
	const char *section;
	const char *key;
	const char *value;
} inbox_defaults[] = {
    {"http", "listen", "127.0.0.1:7188"},
};

const ob_kafka_setting ob_kafka_pinned[] = {
    {"enable.idempotence", "true"},
    {"acks", "all"},
    /* Per-key order after a failed batch (producer.h, OB_PRODUCER_PIPELINED);
     * the producer turns it off itself where it awaits every record. */
    {"enable.gapless.guarantee", "true"},
};
const size_t ob_kafka_pinned_len = OB_ARRAY_LEN(ob_kafka_pinned);

/* group.id comes from inbox.group, which the consumer sets after this table. */
const ob_kafka_setting ob_kafka_consumer_pinned[] = {
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    /* The inbox starts every partition itself (start_partitions()): a
     * position the broker does not hold is a mismatch to report, never
     * one for librdkafka to move past silently. */
    {"auto.offset.reset", "error"},
};
const size_t ob_kafka_consumer_pinned_len = OB_ARRAY_LEN(ob_kafka_consumer_pinned);

const char *
ob_plugin_name(ob_plugin plugin)
{
	return plugin == OB_PLUGIN_PGOUTPUT ? "pgoutput" : "wal2json";
}

static const config_key *
find_key(const char *section, const char *key)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(config_keys); i++) {
		if (strcmp(config_keys[i].section, section) == 0 &&
		    strcmp(config_keys[i].key, key) == 0)
			return &config_keys[i];
	}
	return NULL;
}

static bool
parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "on", "yes", "1"};
	static const char *const no[] = {"false", "off", "no", "0"};

	for (size_t i = 0; i < OB_ARRAY_LEN(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

/* A positive int: milliseconds (KEY_MS) or a count (KEY_COUNT). */
static bool
parse_ms(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v <= 0 || v > INT_MAX)
		return false;
	*out = (int)v;
	return true;
}

/* A duration of s, text or "" for none (0), into *out seconds: a
 * positive whole number and its unit: s, min, h or d. */
static bool
parse_duration(const char *s, int64_t *out)
{
	static const struct {
		const char *unit;
		int64_t seconds;
	} units[] = {{"s", 1}, {"min", 60}, {"h", 3600}, {"d", 86400}};
	char *end;
	long long v;

	*out = 0;
	if (s[0] == '\0')
		return true;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || v <= 0 || v > INT64_MAX / 86400)
		return false;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].unit) == 0) {
			*out = v * units[i].seconds;
			return true;
		}
	}
	return false;
}

/* s as the index of its name among n names. */
static bool
parse_choice(const char *s, const char *const *names, size_t n, int *out)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (int)i;
			return true;
		}
	}
	return false;
}

const char *const ob_kafka_auth_names[OB_KAFKA_AUTH_METHODS] = {"none", "command", "aws_msk_iam"};

/* A value that is one of two words: *field says whether it is yes. */
static bool
parse_either(const char *value, const char *yes, const char *no, bool *field)
{
	if (strcmp(value, yes) != 0 && strcmp(value, no) != 0)
		return false;
	*field = strcmp(value, yes) == 0;
	return true;
}

/* Store an already expanded value into the field k describes. */
static bool
apply_key(ob_config *cfg, const config_key *k, const char *value, const char *origin)
{
	void *field = (char *)cfg + k->offset;
	const char *expected = NULL;
	bool ok = true;

	switch (k->type) {
	case KEY_NONEMPTY:
		if (value[0] == '\0') {
			expected = "a non-empty value";
			ok = false;
			break;
		}
		/* fall through */
	case KEY_STRING:
		free(*(char **)field);
		*(char **)field = ob_xstrdup(value);
		break;
	case KEY_BOOL:
		ok = parse_bool(value, (bool *)field);
		expected = "true or false";
		break;
	case KEY_MS:
		ok = parse_ms(value, (int *)field);
		expected = "a positive number of milliseconds";
		break;
	case KEY_COUNT:
		ok = parse_ms(value, (int *)field);
		expected = "a positive number";
		break;
	case KEY_BAD_EVENT:
		if (strcmp(value, "dlq") == 0)
			*(ob_bad_event_policy *)field = OB_BAD_EVENT_DLQ;
		else if (strcmp(value, "halt") == 0)
			*(ob_bad_event_policy *)field = OB_BAD_EVENT_HALT;
		else if (strcmp(value, "hold_key") == 0)
			*(ob_bad_event_policy *)field = OB_BAD_EVENT_HOLD_KEY;
		else
			ok = false;
		expected = "dlq, hold_key or halt";
		break;
	case KEY_PLUGIN:
		if (strcmp(value, "wal2json") == 0)
			*(ob_plugin *)field = OB_PLUGIN_WAL2JSON;
		else if (strcmp(value, "pgoutput") == 0)
			*(ob_plugin *)field = OB_PLUGIN_PGOUTPUT;
		else
			ok = false;
		expected = "wal2json or pgoutput";
		break;
	case KEY_MISMATCH:
		ok = parse_choice(value,
				  (const char *const[]){"halt", "earliest", "latest", "stored"}, 4,
				  (int *)field);
		expected = "halt, earliest, latest or stored";
		break;
	case KEY_CLOUDEVENTS:
		if (strcmp(value, "off") == 0)
			*(ob_ce_mode *)field = OB_CE_OFF;
		else if (strcmp(value, "binary") == 0)
			*(ob_ce_mode *)field = OB_CE_BINARY;
		else if (strcmp(value, "structured") == 0)
			*(ob_ce_mode *)field = OB_CE_STRUCTURED;
		else
			ok = false;
		expected = "off, binary or structured";
		break;
	case KEY_AUTH_METHOD:
		ok = parse_choice(value, ob_kafka_auth_names, OB_KAFKA_AUTH_METHODS, (int *)field);
		expected = "none, command or aws_msk_iam";
		break;
	case KEY_PG_AUTH:
		ok = parse_either(value, "aws_iam", "password", (bool *)field);
		expected = "password or aws_iam";
		break;
	case KEY_SLOT_LOST:
		ok = parse_either(value, "recover", "halt", (bool *)field);
		expected = "recover or halt";
		break;
	case KEY_DURATION:
		ok = parse_duration(value, (int64_t *)field);
		expected = "a duration (a whole number with s, min, h or d: 7d) or nothing";
		break;
	case KEY_LOG_FORMAT:
		ok = ob_log_format_parse(value, (ob_log_format *)field);
		expected = "text or json";
		break;
	case KEY_LOG_LEVEL:
		ok = ob_log_level_parse(value, (ob_log_level *)field);
		expected = "debug, info, warning or error";
		break;
	}
	if (!ok)
		ob_error("invalid value \"%s\" for %s.%s (%s): expected %s", value, k->section,
			 k->key, origin, expected);
	return ok;
}

static void
kafka_put(ob_config *cfg, const char *key, const char *value)
{
	for (size_t i = 0; i < cfg->kafka_len; i++) {
		if (strcmp(cfg->kafka[i].key, key) == 0) {
			free(cfg->kafka[i].value);
			cfg->kafka[i].value = ob_xstrdup(value);
			return;
		}
	}
	cfg->kafka = ob_xrealloc(cfg->kafka, (cfg->kafka_len + 1) * sizeof(*cfg->kafka));
	cfg->kafka[cfg->kafka_len].key = ob_xstrdup(key);
	cfg->kafka[cfg->kafka_len].value = ob_xstrdup(value);
	cfg->kafka_len++;
}

/* False (logged) if key is one of table's pinned properties and value differs. */
static bool
check_pinned(const ob_kafka_setting *table, size_t len, const char *key, const char *value,
	     const char *origin)
{
	for (size_t i = 0; i < len; i++) {
		if (strcmp(key, table[i].key) == 0 && strcasecmp(value, table[i].value) != 0) {
			ob_error("kafka.%s (%s) cannot be changed: outboxd requires %s=%s", key,
				 origin, key, table[i].value);
			return false;
		}
	}
	return true;
}

static bool
set_kafka(ob_config *cfg, const char *key, const char *value, const char *origin)
{
	if (!check_pinned(ob_kafka_pinned, ob_kafka_pinned_len, key, value, origin) ||
	    !check_pinned(ob_kafka_consumer_pinned, ob_kafka_consumer_pinned_len, key, value,
			  origin))
		return false;
	if (strcmp(key, "group.id") == 0) {
		ob_error("kafka.group.id (%s) cannot be set: outboxd inbox takes its consumer "
			 "group from inbox.group",
			 origin);
		return false;
	}
	if (key[0] == '\0') {
		ob_error("empty kafka property name (%s)", origin);
		return false;
	}
	kafka_put(cfg, key, value);
	return true;
}

char *
ob_config_expand_env(const char *value, const char *setting)
{
	size_t cap = strlen(value) + 1, len = 0;
	char *out = ob_xmalloc(cap);
	const char *p = value;

	while (*p) {
		const char *piece;
		size_t piece_len;

		if (p[0] == '$' && p[1] == '{') {
			const char *end = strchr(p + 2, '}');
			char *name;

			if (end == NULL) {
				ob_error("unterminated ${ in %s", setting);
				free(out);
				return NULL;
			}
			name = ob_xstrndup(p + 2, (size_t)(end - p - 2));
			piece = getenv(name);
			if (piece == NULL) {
				ob_error("environment variable %s used in %s is not set", name,
					 setting);
				free(name);
				free(out);
				return NULL;
			}
			free(name);
			piece_len = strlen(piece);
			p = end + 1;
		} else {
			piece = p;
			piece_len = 1;
			p++;
		}
		if (len + piece_len + 1 > cap) {
			cap = (len + piece_len + 1) * 2;
			out = ob_xrealloc(out, cap);
		}
		memcpy(out + len, piece, piece_len);
		len += piece_len;
	}
	out[len] = '\0';
	return out;
}

bool
ob_config_set(ob_config *cfg, const char *section, const char *key, const char *value,
	      const char *origin)
{
	char *setting = ob_xasprintf("%s.%s (%s)", section, key, origin);
	char *expanded = ob_config_expand_env(value, setting);
	bool ok = false;

	free(setting);
	if (expanded == NULL)
		return false;
	if (strcmp(section, "kafka") == 0) {
		ok = set_kafka(cfg, key, expanded, origin);
	} else {
		const config_key *k = find_key(section, key);

		if (k == NULL)
			ob_error("unknown configuration key %s.%s (%s)", section, key, origin);
		else
			ok = apply_key(cfg, k, expanded, origin);
		if ((strcmp(section, "postgres") == 0 &&
		     (strcmp(key, "conninfo") == 0 || strcmp(key, "slot") == 0)) ||
		    (strcmp(section, "outbox") == 0 && strcmp(key, "table") == 0))
			cfg->publisher_set = true;
	}
	free(expanded);
	return ok;
}

/* The defaults of the publisher's commands, or of `outboxd inbox`. */
static void
init_defaults(ob_config *cfg, bool inbox)
{
	memset(cfg, 0, sizeof(*cfg));
	/* The defaults are known-good: a failure here is a bug. */
	for (size_t i = 0; i < OB_ARRAY_LEN(config_keys); i++) {
		if (!apply_key(cfg, &config_keys[i], config_keys[i].default_value, "default"))
			abort();
	}
	for (size_t i = 0; inbox && i < OB_ARRAY_LEN(inbox_defaults); i++) {
		const config_key *k = find_key(inbox_defaults[i].section, inbox_defaults[i].key);

		if (k == NULL || !apply_key(cfg, k, inbox_defaults[i].value, "default"))
			abort();
	}
	kafka_put(cfg, "bootstrap.servers", "127.0.0.1:9092");
}

void
ob_config_init(ob_config *cfg)
{
	init_defaults(cfg, false);
}

void
ob_config_init_inbox(ob_config *cfg)
{
	init_defaults(cfg, true);
}

void
ob_config_free(ob_config *cfg)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(config_keys); i++) {
		const config_key *k = &config_keys[i];

		if (k->type == KEY_STRING || k->type == KEY_NONEMPTY)
			free(*(char **)((char *)cfg + k->offset));
	}
	for (size_t i = 0; i < cfg->kafka_len; i++) {
		free(cfg->kafka[i].key);
		free(cfg->kafka[i].value);
	}
	free(cfg->kafka);
	free(cfg->outbox.schema);
	free(cfg->outbox.table_name);
	free(cfg->inbox.schema);
	free(cfg->inbox.table_name);
	memset(cfg, 0, sizeof(*cfg));
}

typedef struct ini_state {
	ob_config *cfg;
	const char *path;
	const char *const *overrides; /* -s assignments: their keys are not read */
	size_t overrides_len;
	bool ok;
} ini_state;

/* True when one of st's -s assignments sets section.name: the file's
 * value is then never used, so it is not read (its ${NAME} need not be
 * set). */
static bool
overridden(const ini_state *st, const char *section, const char *name)
{
	size_t s = strlen(section), n = strlen(name);

	for (size_t i = 0; i < st->overrides_len; i++) {
		const char *o = st->overrides[i];

		if (strncmp(o, section, s) == 0 && o[s] == '.' &&
		    strncmp(o + s + 1, name, n) == 0 && o[s + 1 + n] == '=')
			return true;
	}
	return false;
}

/* value without an inline '#' comment: libinih ends a value at a ';'
 * after whitespace, and outboxd does the same at a '#' (inih's rule for
 * both, when built to allow '#'), so "topic = t # note" is "t". A '#' at
 * the start of the value, or inside a word, is part of it. Returns a copy
 * to free. */
static char *
strip_hash_comment(const char *value)
{
	char *copy = ob_xstrdup(value);
	size_t n;

	for (size_t i = 1; copy[0] != '\0' && copy[i] != '\0'; i++) {
		if (copy[i] == '#' && (copy[i - 1] == ' ' || copy[i - 1] == '\t')) {
			copy[i] = '\0';
			break;
		}
	}
	n = strlen(copy);
	while (n > 0 && (copy[n - 1] == ' ' || copy[n - 1] == '\t'))
		copy[--n] = '\0';
	return copy;
}

static int
on_ini_entry(void *user, const char *section, const char *name, const char *value)
{
	ini_state *st = user;
	char origin[512];
	char *stripped;

	snprintf(origin, sizeof(origin), "in %s", st->path);
	/* A section header alone, or a key an -s assignment sets. */
	if (name == NULL || overridden(st, section, name))
		return 1;
	stripped = strip_hash_comment(value);
	if (!ob_config_set(st->cfg, section, name, stripped, origin))
		st->ok = false;
	free(stripped);
	/* Keep going so one run reports every bad key of the file. */
	return 1;
}

/* Apply the INI file at path, less the keys the n overrides set. */
static bool
load_file(ob_config *cfg, const char *path, const char *const *overrides, size_t n)
{
	ini_state st = {cfg, path, overrides, n, true};
	int rc = ob_ini_parse(path, on_ini_entry, &st);

	if (rc < 0) {
		ob_error("could not read configuration file %s: %s", path, strerror(errno));
		return false;
	}
	if (rc > 0) {
		ob_error("could not parse configuration file %s: syntax error on line %d", path,
			 rc);
		return false;
	}
	return st.ok;
}

bool
ob_config_load_file(ob_config *cfg, const char *path)
{
	return load_file(cfg, path, NULL, 0);
}

bool
ob_config_load(ob_config *cfg, bool inbox, const char *path, const char *const *overrides, size_t n)
{
	bool ok = true;

	init_defaults(cfg, inbox);
	if (path != NULL && path[0] != '\0')
		ok = load_file(cfg, path, overrides, n);
	for (size_t i = 0; i < n; i++)
		ok = ob_config_set_override(cfg, overrides[i]) && ok;
	return ok && ob_config_finish(cfg);
}

bool
ob_config_set_override(ob_config *cfg, const char *assignment)
{
	const char *dot = strchr(assignment, '.');
	const char *eq = strchr(assignment, '=');
	char *section, *key;
	bool ok;

	if (dot == NULL || eq == NULL || dot > eq || dot == assignment || eq == dot + 1) {
		ob_error("invalid -s argument \"%s\": expected section.key=value", assignment);
		return false;
	}
	section = ob_xstrndup(assignment, (size_t)(dot - assignment));
	key = ob_xstrndup(dot + 1, (size_t)(eq - dot - 1));
	ok = ob_config_set(cfg, section, key, eq + 1, "-s");
	free(section);
	free(key);
	return ok;
}

void
ob_config_diff(const ob_config *a, const ob_config *b,
	       void (*changed)(const char *section, const char *key, void *ctx), void *ctx)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(config_keys); i++) {
		const config_key *k = &config_keys[i];
		const char *va = (const char *)a + k->offset, *vb = (const char *)b + k->offset;
		bool same = k->type == KEY_STRING || k->type == KEY_NONEMPTY
				? strcmp(*(char *const *)va, *(char *const *)vb) == 0
				: memcmp(va, vb, k->size) == 0;

		if (!same)
			changed(k->section, k->key, ctx);
	}
	for (size_t i = 0; i < a->kafka_len; i++) {
		const char *now = ob_config_kafka_get(b, a->kafka[i].key);

		if (now == NULL || strcmp(now, a->kafka[i].value) != 0)
			changed("kafka", a->kafka[i].key, ctx);
	}
	for (size_t i = 0; i < b->kafka_len; i++) {
		if (ob_config_kafka_get(a, b->kafka[i].key) == NULL)
			changed("kafka", b->kafka[i].key, ctx);
	}
}

const char *
ob_config_kafka_get(const ob_config *cfg, const char *key)
{
	for (size_t i = 0; i < cfg->kafka_len; i++) {
		if (strcmp(cfg->kafka[i].key, key) == 0)
			return cfg->kafka[i].value;
	}
	return NULL;
}

bool
ob_config_is_secret_key(const char *key)
{
	return strstr(key, "password") != NULL || strstr(key, "secret") != NULL ||
	       strstr(key, "sasl.oauthbearer.config") != NULL ||
	       strstr(key, "ssl.key.pem") != NULL || strstr(key, "ssl_key") != NULL;
}
