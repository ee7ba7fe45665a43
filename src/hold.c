/*
 * hold.c: on_bad_event = hold_key (hold.h).
 */
#include "outboxd/hold.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/holdrec.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/pgrepl.h"
#include "outboxd/pgsql.h"

/* How long after a failed write the next is tried. */
#define RETRY_MS           1000
/* Rows that wait at most before a held event is handed over: the backlog
 * and a huge transaction write as they go, not at the next loop turn. */
#define PENDING_MAX        1000
/* How often the rows of keys released long ago are deleted. */
#define FORGET_INTERVAL_MS 60000

void
ob_hold_init(ob_hold *h, const ob_config *cfg)
{
	memset(h, 0, sizeof(*h));
	h->cfg = cfg;
	h->on = cfg->outbox.on_bad_event == OB_BAD_EVENT_HOLD_KEY;
	h->keys = json_object();
	h->released = json_object();
	ob_event_init(&h->held_ev);
	ob_holdrelease_init(&h->release);
}

void
ob_hold_free(ob_hold *h)
{
	for (size_t i = 0; i < h->pending_len; i++)
		ob_hold_row_free(&h->pending[i]);
	free(h->pending);
	json_decref(h->keys);
	json_decref(h->released);
	ob_event_free(&h->held_ev);
	ob_holdrelease_free(&h->release);
	ob_pgsql_close(h->conn);
	memset(h, 0, sizeof(*h));
}

/* The held set's name of (topic, key hex): "<topic>\x1f<key hex>". */
static char *
set_name(const char *topic, size_t topic_len, const char *key_hex)
{
	return ob_xasprintf("%.*s\x1f%s", (int)topic_len, topic, key_hex);
}

/* The len bytes at data in lowercase hex, as PostgreSQL's encode(…,
 * 'hex') writes them; the caller frees. */
static char *
hex_of(const void *data, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = data;
	char *hex = ob_xmalloc(2 * len + 1);

	for (size_t i = 0; i < len; i++) {
		hex[2 * i] = digits[b[i] >> 4];
		hex[2 * i + 1] = digits[b[i] & 15];
	}
	hex[2 * len] = '\0';
	return hex;
}

static void
publish_gauges(const ob_hold *h)
{
	ob_metrics_set_held(json_object_size(h->keys), (uint64_t)h->events + h->pending_held);
}

/* Hold name behind id behind from (unit, index). */
static void
hold_name(ob_hold *h, const char *name, const char *behind, const char *unit, uint64_t index)
{
	json_object_set_new(h->keys, name,
			    json_pack("{s:s, s:s, s:I}", "behind", behind, "unit", unit, "index",
				      (json_int_t)index));
}

/* A connection of the hold's own, made when missing. */
static ob_pg_status
connection(ob_hold *h)
{
	if (h->conn != NULL && ob_pgsql_connected(h->conn))
		return OB_PG_OK;
	ob_pgsql_close(h->conn);
	h->conn = NULL;
	return ob_pgsql_connect(h->cfg, OB_PGCONN_PLAIN, &h->conn);
}

/* Write the waiting rows; false (logged once while failing) when they
 * could not be. */
static bool
write_pending(ob_hold *h)
{
	long long inserted = 0;

	if (h->pending_len == 0)
		return true;
	if (ob_mono_ms() < h->next_try_ms)
		return false;
	if (connection(h) != OB_PG_OK ||
	    !ob_holddb_write(h->conn, h->cfg, h->pending, h->pending_len,
			     h->failing ? OB_LOG_DEBUG : OB_LOG_WARNING, &inserted)) {
		h->failing = true;
		h->next_try_ms = ob_mono_ms() + RETRY_MS;
		return false;
	}
	if (h->failing)
		ob_info("wrote the held events again");
	h->failing = false;
	for (size_t i = 0; i < h->pending_len; i++)
		ob_hold_row_free(&h->pending[i]);
	h->pending_len = h->pending_held = 0;
	h->events += inserted;
	publish_gauges(h);
	return true;
}

/* ob_hold_load() as a status: OB_PG_FATAL (logged) or OB_PG_RETRY. */
static ob_pg_status
load(ob_hold *h)
{
	ob_pgres *res = NULL;
	ob_pg_status st;
	bool standby;

	if ((st = connection(h)) != OB_PG_OK)
		return st;
	if (!ob_pgrepl_in_recovery(h->conn, &standby))
		return OB_PG_RETRY;
	if (standby) {
		ob_error(
		    "outbox.on_bad_event = hold_key keeps the held keys in the outbox database, "
		    "and this server is a hot standby, which cannot write them: decode on the "
		    "primary, or choose on_bad_event = dlq or halt");
		return OB_PG_FATAL;
	}
	if ((st = ob_holddb_ready(h->conn, h->cfg)) != OB_PG_OK)
		return st;
	h->next_try_ms = 0;
	/* Rows that cannot be written now are tried again at each loop turn:
	 * ob_hold_cap() keeps the slot behind them, so the stream (every
	 * other key) goes on meanwhile. */
	(void)write_pending(h);
	if (!ob_holddb_load(h->conn, h->cfg, &res, &h->events))
		return OB_PG_RETRY;
	json_object_clear(h->keys);
	json_object_clear(h->released);
	for (int i = 0; i < ob_pgres_rows(res); i++) {
		const char *topic = ob_pgres_value(res, i, 0);
		const char *through = ob_pgres_value(res, i, 3);
		char *name = set_name(topic, strlen(topic), ob_pgres_value(res, i, 1));

		if (through[0] == '\0')
			hold_name(h, name, ob_pgres_value(res, i, 2), ob_pgres_value(res, i, 4),
				  strtoull(ob_pgres_value(res, i, 5), NULL, 10));
		else
			json_object_set_new(h->released, name, json_string(through));
		free(name);
	}
	ob_pgres_free(res);
	/* The keys of rows still waiting are held all the same. */
	for (size_t i = 0; i < h->pending_len; i++) {
		const ob_hold_row *r = &h->pending[i];
		char *hex, *name, unit[24];

		if (!r->new_key)
			continue;
		hex = hex_of(r->key, r->key_len);
		name = set_name(r->topic, strlen(r->topic), hex);
		snprintf(unit, sizeof(unit), "%" PRIu64, r->unit);
		hold_name(h, name, r->behind, unit, r->index);
		free(name);
		free(hex);
	}
	if (!h->loaded && json_object_size(h->keys) > 0)
		ob_warn("%zu keys are held (%lld events): outboxd dlq list shows them",
			json_object_size(h->keys), h->events);
	h->loaded = true;
	publish_gauges(h);
	return OB_PG_OK;
}

bool
ob_hold_load(ob_hold *h, ob_outcome *out)
{
	ob_pg_status st = h->on ? load(h) : OB_PG_OK;

	if (st != OB_PG_OK)
		*out = st == OB_PG_FATAL ? OB_OUTCOME_HALT : OB_OUTCOME_RETRY;
	return st == OB_PG_OK;
}

/* The entry of (topic, key) in set (the held set, or the released one),
 * else NULL. */
static json_t *
lookup(json_t *set, const char *topic, size_t topic_len, const void *key, size_t key_len)
{
	char *hex, *name;
	json_t *v;

	if (json_object_size(set) == 0)
		return NULL;
	hex = hex_of(key, key_len);
	name = set_name(topic, topic_len, hex);
	v = json_object_get(set, name);
	free(name);
	free(hex);
	return v;
}

/* The id entry e is held behind, when the event at (unit, index) is held:
 * at or after the place it is held from (the key's events before it,
 * read again after a crash, had gone to their topic); else NULL. */
static const char *
held_behind(const json_t *e, ob_pos unit, uint64_t index)
{
	ob_pos from;
	uint64_t from_index;

	if (e == NULL)
		return NULL;
	from = strtoull(json_string_value(json_object_get(e, "unit")), NULL, 10);
	from_index = (uint64_t)json_integer_value(json_object_get(e, "index"));
	if (unit < from || (unit == from && index < from_index))
		return NULL;
	return json_string_value(json_object_get(e, "behind"));
}

/* Whether (topic, key) was released through unit or later: its dead
 * letter at unit, read again (the slot sent back by a crash of
 * PostgreSQL), was released already and holds nothing. */
static bool
released_before(const ob_hold *h, const char *topic, size_t topic_len, const void *key,
		size_t key_len, ob_pos unit)
{
	json_t *v = lookup(h->released, topic, topic_len, key, key_len);

	return v != NULL && strtoull(json_string_value(v), NULL, 10) >= unit;
}

/* A new row to write, zeroed; its place in the stream set. */
static ob_hold_row *
new_row(ob_hold *h, const char *topic, size_t topic_len, const void *key, size_t key_len,
	ob_pos unit, uint64_t index, ob_lsn lsn)
{
	ob_hold_row *r;

	if (h->pending_len == h->pending_cap) {
		h->pending_cap = h->pending_cap ? 2 * h->pending_cap : 64;
		h->pending = ob_xrealloc(h->pending, h->pending_cap * sizeof(*h->pending));
	}
	r = &h->pending[h->pending_len++];
	memset(r, 0, sizeof(*r));
	r->topic = ob_xstrndup(topic, topic_len);
	r->key = ob_xmalloc(key_len + 1);
	memcpy(r->key, key, key_len);
	r->key_len = key_len;
	r->unit = unit;
	r->index = index;
	r->lsn = lsn;
	return r;
}

/* The record of view, encoded, into r. */
static void
keep_record(ob_hold_row *r, const ob_record_view *view)
{
	ob_holdrec_encode(view, &r->record, &r->record_len);
}

/* The id an event goes by: its id header (ce_id in CloudEvents' binary
 * mode), else "" */
static char *
event_id(const ob_event *ev)
{
	size_t len;
	const char *id = ob_event_find_header(ev, "id", &len);

	if (id == NULL)
		id = ob_event_find_header(ev, "ce_id", &len);
	return ob_xstrndup(id != NULL ? id : "", id != NULL ? len : 0);
}

/* Halt past hold_max_events; true while under it. */
static bool
room_for_event(const ob_hold *h, ob_outcome *out)
{
	if (h->events + (long long)h->pending_held < h->cfg->outbox.hold_max_events)
		return true;
	ob_error("outbox.hold_max_events (%d) events are held: stopping without confirming "
		 "further; release keys (outboxd dlq list, outboxd dlq release) or raise the limit",
		 h->cfg->outbox.hold_max_events);
	*out = OB_OUTCOME_HALT;
	return false;
}

bool
ob_hold_divert(ob_hold *h, const ob_event *ev, ob_pos unit, uint64_t index, ob_lsn lsn, bool *held,
	       ob_outcome *out)
{
	const char *topic = ob_event_ptr(ev, ev->topic);
	const char *key = ob_event_ptr(ev, ev->key);
	const char *behind;
	ob_record_view view;
	ob_hold_row *r;
	char error[512];

	*held = false;
	if (!h->on || !ev->has_key ||
	    (behind = held_behind(lookup(h->keys, topic, ev->topic.len, key, ev->key.len), unit,
				  index)) == NULL)
		return true;
	if (!room_for_event(h, out))
		return false;
	ob_event_view(ev, &view);
	r = new_row(h, topic, ev->topic.len, key, ev->key.len, unit, index, lsn);
	r->event_id = event_id(ev);
	keep_record(r, &view);
	h->pending_held++;
	snprintf(error, sizeof(error), "held behind dead letter %s: key held since it failed",
		 behind);
	ob_event_build_dlq(&h->held_ev, h->cfg->outbox.dlq_topic, "held", error, lsn, &view, false);
	(void)ob_event_add_header(&h->held_ev, OB_DLQ_HELD_BEHIND, behind, strlen(behind));
	*held = true;
	if (h->pending_len >= PENDING_MAX)
		(void)write_pending(h); /* a failure is tried again later */
	publish_gauges(h);
	return true;
}

bool
ob_hold_dead_letter(ob_hold *h, const ob_event *dlq, const ob_record_view *orig, ob_pos unit,
		    uint64_t index, ob_lsn lsn, ob_outcome *out)
{
	size_t topic_len, error_len;
	const char *topic = ob_event_find_header(dlq, OB_DLQ_ORIGINAL_TOPIC, &topic_len);
	const char *error = ob_event_find_header(dlq, "error", &error_len);
	const char *key = ob_event_ptr(dlq, dlq->key);
	bool new_key;
	ob_hold_row *r;
	char *hex;

	if (!h->on || topic == NULL || !dlq->has_key ||
	    released_before(h, topic, topic_len, key, dlq->key.len, unit))
		return true;
	new_key = lookup(h->keys, topic, topic_len, key, dlq->key.len) == NULL;
	if (new_key && json_object_size(h->keys) >= (size_t)h->cfg->outbox.hold_max_keys) {
		ob_error("outbox.hold_max_keys (%d) keys are held and another event failed: "
			 "stopping without confirming it; release keys (outboxd dlq list, outboxd "
			 "dlq release) or raise the limit",
			 h->cfg->outbox.hold_max_keys);
		*out = OB_OUTCOME_HALT;
		return false;
	}
	r = new_row(h, topic, topic_len, key, dlq->key.len, unit, index, lsn);
	r->failed = true;
	r->event_id = event_id(dlq);
	if (orig != NULL)
		keep_record(r, orig);
	if (new_key) {
		char *name, from[24];

		hex = hex_of(key, dlq->key.len);
		name = set_name(topic, topic_len, hex);
		r->new_key = true;
		r->behind = r->event_id[0] != '\0'
				? ob_xstrdup(r->event_id)
				: ob_xasprintf("at " OB_LSN_FMT, OB_LSN_ARGS(lsn));
		r->reason = ob_xstrdup(dlq->dlq_reason ? dlq->dlq_reason : "");
		r->error = ob_xstrndup(error ? error : "", error ? error_len : 0);
		snprintf(from, sizeof(from), "%" PRIu64, unit);
		hold_name(h, name, r->behind, from, index);
		json_object_del(h->released, name);
		ob_warn("holding key %s of topic %.*s behind dead letter %s (%s): its later events "
			"go to the dead-letter topic until it is released",
			hex, (int)topic_len, topic, r->behind, r->reason);
		free(name);
		free(hex);
	}
	publish_gauges(h);
	return true;
}

ob_lsn
ob_hold_cap(const ob_hold *h)
{
	/* A unit at position P is sent again by a stream started at any
	 * confirmed position C with 2C < P (position.h). */
	return h->pending_len == 0 ? UINT64_MAX : (h->pending[0].unit - 1) / 2;
}

/* The active release found nothing left: the key's row is marked
 * released through upto (the last position confirmed, past every event it
 * released) and the key leaves the held set, together. */
static void
end_release(ob_hold *h, ob_pos upto)
{
	ob_holdrelease *r = &h->release;
	bool done = false;
	char *name, through[24];

	if (!ob_holddb_finish_release(h->conn, h->cfg, r->topic, r->key_hex, upto, &done))
		return;
	if (!done) {
		/* Rows behind the last one released (read again, written
		 * again): the release starts over, publishing them again
		 * rather than holding the key for ever. */
		ob_debug("releasing key %s of topic %s: held events are left behind the last one "
			 "released; publishing them again",
			 r->key_hex, r->topic);
		snprintf(r->after_unit, sizeof(r->after_unit), "-1");
		snprintf(r->after_index, sizeof(r->after_index), "-1");
		return;
	}
	name = set_name(r->topic, strlen(r->topic), r->key_hex);
	json_object_del(h->keys, name);
	snprintf(through, sizeof(through), "%" PRIu64, upto);
	json_object_set_new(h->released, name, json_string(through));
	free(name);
	ob_holdrelease_end(r, true);
	publish_gauges(h);
}

void
ob_hold_tick(ob_hold *h, ob_lsn confirmed)
{
	long long deleted = 0;
	bool drained = false;

	if (!h->on || !h->loaded)
		return;
	/* A release reads the table: what is held must be there first. */
	if (!write_pending(h) && h->pending_len > 0)
		return;
	if (connection(h) != OB_PG_OK ||
	    !ob_holdrelease_step(&h->release, h->conn, h->cfg, ob_pos_bound(confirmed), &drained,
				 &deleted))
		return;
	h->events -= deleted;
	if (drained)
		end_release(h, ob_pos_bound(confirmed));
	if (ob_mono_ms() >= h->next_forget_ms) {
		h->next_forget_ms = ob_mono_ms() + FORGET_INTERVAL_MS;
		(void)ob_holddb_forget_released(h->conn, h->cfg);
		/* Bounded like the held set; the next start reads what is left. */
		if (json_object_size(h->released) > (size_t)h->cfg->outbox.hold_max_keys)
			json_object_clear(h->released);
	}
	publish_gauges(h);
}

int
ob_hold_wake_fd(const ob_hold *h)
{
	return ob_holdrelease_wake_fd(&h->release);
}

void
ob_hold_flush(ob_hold *h)
{
	h->next_try_ms = 0;
	(void)write_pending(h);
}

bool
ob_hold_write(ob_hold *h)
{
	h->next_try_ms = 0;
	return write_pending(h);
}
