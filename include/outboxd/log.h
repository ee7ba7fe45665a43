/*
 * log.h: the one logger of outboxd.
 *
 * Every line goes to stderr as a single write(2), either as text
 * ("2026-01-02T03:04:05.678Z info  message key=value") or as one JSON object
 * per line with "ts", "level", "msg" and the context fields. The logger is
 * safe to call from librdkafka's threads. Context fields set with
 * ob_log_set_context() (the slot name) appear on every line; per-line fields
 * are passed with ob_log_kv().
 */
#ifndef OUTBOXD_LOG_H
#define OUTBOXD_LOG_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

typedef enum ob_log_level {
	OB_LOG_DEBUG = 0,
	OB_LOG_INFO,
	OB_LOG_WARNING,
	OB_LOG_ERROR,
} ob_log_level;

typedef enum ob_log_format {
	OB_LOG_TEXT = 0,
	OB_LOG_JSON,
} ob_log_format;

/* One extra field of a log line; a NULL value leaves the field out. */
typedef struct ob_log_field {
	const char *key;
	const char *value;
} ob_log_field;

/* Parse "debug|info|warning|error" and "text|json"; false if unknown. */
bool ob_log_level_parse(const char *s, ob_log_level *out) OB_MUST_CHECK;
bool ob_log_format_parse(const char *s, ob_log_format *out) OB_MUST_CHECK;

/* Set the format and the least level logged; safe while other threads
 * log (each line is in one format). */
void ob_log_configure(ob_log_format format, ob_log_level level);
bool ob_log_enabled(ob_log_level level);
/* "debug", "info", "warning" or "error". */
const char *ob_log_level_name(ob_log_level level);

/* Set (or with NULL clear) a field printed on every line. The strings are
 * copied. Only the main thread calls this, before librdkafka starts. */
void ob_log_set_context(const char *key, const char *value);

/* With buf, hold the calling thread's warning and error lines instead of
 * writing them: each message (without time, level or fields) is appended
 * to buf, "; " between them, as far as its len bytes go, until
 * ob_log_hold(NULL, 0). The caller may empty buf meanwhile. For `check`,
 * which reports every problem in its table. */
void ob_log_hold(char *buf, size_t len);

void ob_log(ob_log_level level, const char *fmt, ...) OB_PRINTF(2, 3);
/* Like ob_log() with extra fields, ended by an entry whose key is NULL. */
void ob_log_kv(ob_log_level level, const ob_log_field *fields, const char *fmt, ...)
    OB_PRINTF(3, 4);
/* Like ob_log() with the WAL position lsn as field "lsn" and, when topic
 * is not NULL, its topic_len bytes as field "topic", so JSON logs can be
 * filtered on them. */
void ob_log_lsn(ob_log_level level, ob_lsn lsn, const char *topic, size_t topic_len,
		const char *fmt, ...) OB_PRINTF(5, 6);

#define ob_debug(...)                                                                              \
	do {                                                                                       \
		if (ob_log_enabled(OB_LOG_DEBUG))                                                  \
			ob_log(OB_LOG_DEBUG, __VA_ARGS__);                                         \
	} while (0)
#define ob_info(...)  ob_log(OB_LOG_INFO, __VA_ARGS__)
#define ob_warn(...)  ob_log(OB_LOG_WARNING, __VA_ARGS__)
#define ob_error(...) ob_log(OB_LOG_ERROR, __VA_ARGS__)

/* Copy a libpq conninfo string (keyword=value or URI) with every password
 * replaced by "****". The result is the caller's to free. */
char *ob_log_mask_conninfo(const char *conninfo);

#endif
