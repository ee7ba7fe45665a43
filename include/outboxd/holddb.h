/*
 * holddb.h: the held keys' tables in the outbox database (hold.h), in the
 * outbox's schema beside outboxd_slots (sql/outbox.sql makes them; outboxd
 * makes them itself when its role may):
 *
 *   outboxd_held_keys    one row per (slot_name, topic, key) held: the id
 *                        of the dead letter it is held behind, its reason
 *                        and error, its place (held_from, held_from_index:
 *                        the key's events before it are not held), when; and a release asked for
 *                        (release_requested_at, release_include_failed)
 *                        or refused (release_error); once released, the
 *                        position released through (released_through,
 *                        released_at), kept a day
 *   outboxd_held_events  one row per held event, placed by its unit and
 *                        index in the stream (position.h; unique, so an
 *                        event read again is kept once): whether it is the
 *                        failed one, its id, LSN and record (holdrec.h;
 *                        NULL for a failed event that never was a record)
 *
 * Every function logs its failure once, at the level given or as an error.
 */
#ifndef OUTBOXD_HOLDDB_H
#define OUTBOXD_HOLDDB_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgsql.h"
#include "outboxd/position.h"

#define OB_HOLD_KEYS_TABLE    "outboxd_held_keys"
#define OB_HOLD_EVENTS_TABLE  "outboxd_held_events"
/* How long the row of a released key is kept. */
#define OB_HOLD_RELEASED_KEPT "1 day"

/* One held event to write; with new_key, also its key's row. */
typedef struct ob_hold_row {
	bool new_key;
	bool
	    failed; /* the event is a dead letter (skipped by a release without --include-failed) */
	char *topic;
	char *key;
	size_t key_len;
	ob_pos unit;
	uint64_t index;
	char *event_id; /* "" when it has none */
	ob_lsn lsn;
	char *record; /* holdrec.h; NULL: not publishable */
	size_t record_len;
	char *behind; /* new_key: the id of the dead letter it is held behind */
	char *reason; /* new_key: the dead letter's reason */
	char *error;  /* new_key: and its error */
} ob_hold_row;

void ob_hold_row_free(ob_hold_row *r);

/* Make sure both tables are there, creating them when missing.
 * OB_PG_FATAL (logged, naming the statements for the schema's owner) when
 * they are missing and cannot be made; OB_PG_RETRY on a failed query. */
ob_pg_status ob_holddb_ready(ob_pgconn *p, const ob_config *cfg);
/* The statements that make both tables and let role use them; the caller
 * frees. */
char *ob_holddb_setup_sql(const ob_config *cfg, const char *role);

/* `check`'s held keys line into line: the keys and events held, or the
 * tables missing (*ok unless outboxd cannot create them: the line names
 * the statements). False (logged) on a failed query. */
bool ob_holddb_describe(ob_pgconn *p, const ob_config *cfg, bool *ok, char *line, size_t size);

/* The slot's held keys: *res has a row per key (topic, key as hex,
 * held_behind, released_through: "" while held, and the place held from:
 * held_from, held_from_index), the caller frees it; *events the count of held
 * events (not the failed ones they are held behind). */
bool ob_holddb_load(ob_pgconn *p, const ob_config *cfg, ob_pgres **res, long long *events);
/* Write rows in one transaction; *inserted: the held (not failed) event
 * rows not held before. A place held as failed and now as a held event
 * becomes the held event (a record refused, then taken on the next start:
 * a release publishes it). False (logged at level) on failure, nothing
 * written. */
bool ob_holddb_write(ob_pgconn *p, const ob_config *cfg, const ob_hold_row *rows, size_t n,
		     ob_log_level level, long long *inserted);

/* A release asked for, the oldest first: *found, and its topic, key (hex)
 * and include_failed in *res (row 0; the caller frees). */
bool ob_holddb_next_release(ob_pgconn *p, const ob_config *cfg, bool *found, ob_pgres **res);
/* Up to limit held events of (topic, key) after (after_unit, after_index)
 * in order: columns unit, index, failed, record (hex), event id. */
bool ob_holddb_read_events(ob_pgconn *p, const ob_config *cfg, const char *topic,
			   const char *key_hex, const char *after_unit, const char *after_index,
			   int limit, ob_pgres **res);
/* Delete the held events of (topic, key) up to (unit, index); *deleted:
 * the held ones among them (not the failed ones). */
bool ob_holddb_delete_events(ob_pgconn *p, const ob_config *cfg, const char *topic,
			     const char *key_hex, const char *unit, const char *index,
			     long long *deleted);
/* When the key has no held event left, mark its row released through
 * position through (*done when it did): a dead letter read again at or
 * before it (the slot sent back by a crash of PostgreSQL) holds nothing.
 * A later dead letter of the key holds it again, in the same row. */
bool ob_holddb_finish_release(ob_pgconn *p, const ob_config *cfg, const char *topic,
			      const char *key_hex, ob_pos through, bool *done);
/* Delete the rows of keys released more than OB_HOLD_RELEASED_KEPT ago: no
 * crash sends the slot back that far. */
bool ob_holddb_forget_released(ob_pgconn *p, const ob_config *cfg);
/* The release of (topic, key) failed: keep the key held, the request
 * cleared and error in release_error. */
bool ob_holddb_refuse_release(ob_pgconn *p, const ob_config *cfg, const char *topic,
			      const char *key_hex, const char *error);

#endif
