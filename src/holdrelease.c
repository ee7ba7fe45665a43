/*
 * holdrelease.c: publishing a held key's events on release (holdrelease.h).
 */
#include "outboxd/holdrelease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/holddb.h"
#include "outboxd/holdrec.h"
#include "outboxd/log.h"
#include "outboxd/runtime.h"

/* How often a mark is looked for. */
#define LOOK_INTERVAL_MS 1000
/* How long a chunk may wait for its acknowledgements. */
#define CHUNK_WAIT_MS    30000

void
ob_holdrelease_init(ob_holdrelease *r)
{
	memset(r, 0, sizeof(*r));
	ob_event_init(&r->ev);
}

void
ob_holdrelease_end(ob_holdrelease *r, bool done)
{
	if (done)
		ob_info("released key %s of topic %s: %lld held events in %.1f s", r->key_hex,
			r->topic, r->released, (double)(ob_mono_ms() - r->started_ms) / 1000.0);
	free(r->topic);
	free(r->key_hex);
	r->topic = r->key_hex = NULL;
	r->active = false;
	r->in_flight = false;
	r->next_look_ms = 0;
}

void
ob_holdrelease_free(ob_holdrelease *r)
{
	ob_holdrelease_end(r, false);
	ob_producer_free(r->producer);
	r->producer = NULL;
	ob_event_free(&r->ev);
}

/* The release producer's reports: count what the broker acknowledged,
 * keep the first refusal. */
static void
on_report(void *ctx, const ob_delivery *d)
{
	ob_holdrelease *r = ctx;

	if (d->status == OB_DELIVERED)
		r->acked++;
	else if (r->error[0] == '\0')
		snprintf(r->error, sizeof(r->error),
			 "the broker refused a released record for %.*s: %s",
			 (int)d->record.topic_len, d->record.topic, d->error ? d->error : "");
}

/* Take the oldest mark, if any, as the active release. */
static bool
look(ob_holdrelease *r, ob_pgconn *p, const ob_config *cfg)
{
	ob_pgres *res = NULL;
	bool found;

	r->next_look_ms = ob_mono_ms() + LOOK_INTERVAL_MS;
	if (!ob_holddb_next_release(p, cfg, &found, &res))
		return false;
	if (found) {
		r->active = true;
		r->topic = ob_xstrdup(ob_pgres_value(res, 0, 0));
		r->key_hex = ob_xstrdup(ob_pgres_value(res, 0, 1));
		r->include_failed = ob_pgres_true(res, 0, 2);
		snprintf(r->after_unit, sizeof(r->after_unit), "-1");
		snprintf(r->after_index, sizeof(r->after_index), "-1");
		r->released = 0;
		r->started_ms = ob_mono_ms();
		ob_info("releasing key %s of topic %s%s", r->key_hex, r->topic,
			r->include_failed ? ", with the dead letter it was held behind" : "");
	}
	ob_pgres_free(res);
	return true;
}

/* Decode row i's record (hex) into r->ev. */
static bool
decode_record(ob_holdrelease *r, const ob_pgres *res, int i)
{
	const char *hex = ob_pgres_value(res, i, 3);
	size_t n = ob_pgres_length(res, i, 3) / 2;
	unsigned char *bytes = ob_xmalloc(n + 1);
	bool ok;

	for (size_t j = 0; j < n; j++)
		bytes[j] =
		    (unsigned char)(ob_hex_digit(hex[2 * j]) << 4 | ob_hex_digit(hex[2 * j + 1]));
	ok = ob_holdrec_decode(bytes, n, &r->ev);
	free(bytes);
	return ok;
}

/* Queue one record, waiting for room; false with r->error set when it
 * was refused. */
static bool
send_one(ob_holdrelease *r, uint64_t tag)
{
	const char *why = NULL;
	bool too_large;

	for (;;) {
		switch (ob_producer_send(r->producer, &r->ev, tag, &why, &too_large)) {
		case OB_SEND_OK:
			return true;
		case OB_SEND_QUEUE_FULL:
			ob_producer_poll(r->producer, 100);
			break;
		case OB_SEND_REFUSED:
		case OB_SEND_FATAL:
			snprintf(r->error, sizeof(r->error),
				 "the producer refused a released record "
				 "for %.*s: %s",
				 (int)r->ev.topic.len, ob_event_ptr(&r->ev, r->ev.topic),
				 why ? why : "it failed");
			return false;
		}
	}
}

/* Hand those of the first n rows of res that the release publishes over,
 * the nth last; their acknowledgements are waited for by the steps after.
 * False with r->error set when one was refused. */
static bool
publish_chunk(ob_holdrelease *r, const ob_pgres *res, int n)
{
	r->acked = 0;
	r->sent = 0;
	r->error[0] = '\0';
	snprintf(r->last_unit, sizeof(r->last_unit), "%s", ob_pgres_value(res, n - 1, 0));
	snprintf(r->last_index, sizeof(r->last_index), "%s", ob_pgres_value(res, n - 1, 1));
	for (int i = 0; i < n && r->error[0] == '\0'; i++) {
		bool failed = ob_pgres_true(res, i, 2);

		if (failed && !r->include_failed)
			continue;
		if (ob_pgres_null(res, i, 3)) {
			ob_warn("releasing key %s of topic %s: its dead letter %s was a bad event, "
				"never a record, and is not published (it stays in the dead-letter "
				"topic)",
				r->key_hex, r->topic, ob_pgres_value(res, i, 4));
			continue;
		}
		if (!decode_record(r, res, i)) {
			snprintf(
			    r->error, sizeof(r->error),
			    "held event %s could not be read back (written by another version?)",
			    ob_pgres_value(res, i, 4));
			break;
		}
		if (send_one(r, (uint64_t)i))
			r->sent++;
	}
	r->in_flight = r->error[0] == '\0';
	r->deadline_ms = ob_mono_ms() + CHUNK_WAIT_MS;
	return r->in_flight;
}

int
ob_holdrelease_wake_fd(const ob_holdrelease *r)
{
	return r->in_flight ? ob_producer_wake_fd(r->producer) : -1;
}

/* The chunk was refused: the key stays held, the mark goes, the error
 * stays for `dlq list`; the producer is made anew for the next release
 * (what it still holds is dropped). */
static void
refuse(ob_holdrelease *r, ob_pgconn *p, const ob_config *cfg)
{
	ob_error("could not release key %s of topic %s: %s; it stays held (outboxd dlq list "
		 "shows why; ask again once the cause is fixed)",
		 r->key_hex, r->topic, r->error);
	(void)ob_holddb_refuse_release(p, cfg, r->topic, r->key_hex, r->error);
	ob_producer_free(r->producer);
	r->producer = NULL;
	r->in_flight = false;
	ob_holdrelease_end(r, false);
}

/* The chunk in flight: once every record of it is acknowledged, delete
 * its rows and move past them; refuse the release when one was refused or
 * the wait ran out; else wait on (the caller's next step). */
static bool
settle_chunk(ob_holdrelease *r, ob_pgconn *p, const ob_config *cfg, long long *deleted)
{
	ob_producer_poll(r->producer, 0);
	if (r->error[0] == '\0' && r->acked < r->sent) {
		if (ob_mono_ms() < r->deadline_ms)
			return true;
		snprintf(r->error, sizeof(r->error),
			 "%zu released records were not acknowledged within %d s",
			 r->sent - r->acked, CHUNK_WAIT_MS / 1000);
	}
	if (r->error[0] != '\0') {
		refuse(r, p, cfg);
		return true;
	}
	/* Published, not yet deleted: a crash here publishes the chunk again,
	 * after what it published. */
	ob_runtime_crash_point("release-published");
	if (!ob_holddb_delete_events(p, cfg, r->topic, r->key_hex, r->last_unit, r->last_index,
				     deleted))
		return false; /* deleted at the next step */
	r->in_flight = false;
	snprintf(r->after_unit, sizeof(r->after_unit), "%s", r->last_unit);
	snprintf(r->after_index, sizeof(r->after_index), "%s", r->last_index);
	r->released += *deleted;
	return true;
}

/* How many rows of res, from the first, are at or before position upto. */
static int
rows_upto(const ob_pgres *res, ob_pos upto)
{
	int n = 0;

	while (n < ob_pgres_rows(res) && strtoull(ob_pgres_value(res, n, 0), NULL, 10) <= upto)
		n++;
	return n;
}

bool
ob_holdrelease_step(ob_holdrelease *r, ob_pgconn *p, const ob_config *cfg, ob_pos upto,
		    bool *drained, long long *deleted)
{
	ob_pgres *res = NULL;
	int last;

	*drained = false;
	*deleted = 0;
	if (!r->active)
		return ob_mono_ms() < r->next_look_ms || look(r, p, cfg);
	if (r->in_flight)
		return settle_chunk(r, p, cfg, deleted);
	if (r->producer == NULL &&
	    !ob_producer_new(cfg, OB_PRODUCER_PIPELINED, on_report, r, &r->producer))
		return false;
	if (!ob_holddb_read_events(p, cfg, r->topic, r->key_hex, r->after_unit, r->after_index,
				   OB_HOLDRELEASE_CHUNK, &res))
		return false;
	last = rows_upto(res, upto) - 1;
	if (ob_pgres_rows(res) == 0) {
		*drained = true;
	} else if (last < 0) {
		/* The next held event is not confirmed yet: wait for it. */
	} else if (!publish_chunk(r, res, last + 1)) {
		refuse(r, p, cfg);
	}
	ob_pgres_free(res);
	return true;
}
