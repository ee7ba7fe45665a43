/*
 * delivery.c: events handed to the producer, and what their delivery
 * reports say (see delivery.h for the states).
 *
 * A record refused with its batch is only a suspect: the broker answers a
 * whole ProduceRequest with one error. The producer is then recreated and
 * the slot read again; when the suspect comes again it is produced alone,
 * once nothing else is in flight, and only an error it gets alone is its
 * own: it is then dead-lettered (or, with on_bad_event = halt, the relay
 * stops). A dead-letter record that is too large is cut down to its
 * headers; one refused anyway halts.
 */
#include "outboxd/delivery.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/runtime.h"

/* First wait before reading again after a producer failed again; doubles
 * up to reconnect_max_backoff_ms. */
#define RECREATE_BACKOFF_FIRST_MS 100

static const char *const state_names[] = {"flowing", "settling", "isolating", "broken", "halted"};

/* The one place the state changes. A halt is final; broken leaves only
 * for flowing, when the producer was recreated. */
static void
set_state(ob_deliveries *d, ob_delivery_state to, const char *why)
{
	if (d->state == to || d->state == OB_DELIVERY_HALTED ||
	    (d->state == OB_DELIVERY_BROKEN && to != OB_DELIVERY_FLOWING &&
	     to != OB_DELIVERY_HALTED))
		return;
	ob_debug("delivery: %s -> %s (%s)", state_names[d->state], state_names[to], why);
	d->state = to;
}

/* The producer must be recreated, for the reason fmt says (the first
 * reason given is the one the recreation logs). */
static void OB_PRINTF(2, 3) break_producer(ob_deliveries *d, const char *fmt, ...)
{
	va_list ap;

	if (d->broken_why[0] == '\0') {
		va_start(ap, fmt);
		vsnprintf(d->broken_why, sizeof(d->broken_why), fmt, ap);
		va_end(ap);
	}
	set_state(d, OB_DELIVERY_BROKEN, d->broken_why);
}

/* Halt on the refusal rep of a record that confirms end_lsn: "<what>
 * <topic>: <error>; <why>stopping without confirming <end_lsn>". */
static void
halt_refused(ob_deliveries *d, const ob_delivery *rep, ob_lsn end_lsn, const char *what,
	     const char *why)
{
	const ob_record_view *rec = &rep->record;

	ob_log_lsn(OB_LOG_ERROR, end_lsn, rec->topic, rec->topic_len,
		   "%s %.*s: %s; %sstopping without confirming " OB_LSN_FMT, what,
		   (int)rec->topic_len, rec->topic, rep->error, why, OB_LSN_ARGS(end_lsn));
	set_state(d, OB_DELIVERY_HALTED, what);
}

/* A suspect record was refused alone: the error is its own. Queue its
 * dead-letter record, or halt when that is not possible or wanted. */
static void
refused_alone(ob_deliveries *d, const ob_delivery *rep, ob_record_tag tag, ob_lsn end_lsn)
{
	const ob_record_view *rec = &rep->record;
	ob_dlqueue_entry *e;
	ob_outcome out;
	char error[512];

	if (tag.kind == OB_RECORD_DLQ_HEADERS_ONLY ||
	    (tag.kind == OB_RECORD_DLQ && !rep->value_too_large)) {
		halt_refused(d, rep, end_lsn, "could not publish dead-letter record to", "");
		return;
	}
	if (tag.kind == OB_RECORD_DLQ) {
		e = ob_dlqueue_push(&d->refused, tag.seq, tag.index, OB_RECORD_DLQ_HEADERS_ONLY);
		ob_event_build_dlq_headers_only(&e->ev, "too-large", rec,
						ob_producer_max_record_bytes(d->producer));
		return;
	}
	if (d->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
		halt_refused(d, rep, end_lsn, "broker refused a record for",
			     "on_bad_event = halt: ");
		return;
	}
	snprintf(error, sizeof(error), "broker refused the record for %.*s: %s",
		 (int)rec->topic_len, rec->topic, rep->error);
	e = ob_dlqueue_push(&d->refused, tag.seq, tag.index, OB_RECORD_DLQ);
	ob_event_build_dlq(&e->ev, d->cfg->outbox.dlq_topic,
			   rep->value_too_large ? "too-large" : "refused", error, end_lsn, rec,
			   rep->value_too_large);
	/* Nothing else is in flight while a suspect is: the hold begins
	 * before the key's next event is handed over. */
	if (!ob_hold_dead_letter(&d->hold, &e->ev, rec, d->isolated.unit, d->isolated.index,
				 end_lsn, &out))
		set_state(d, OB_DELIVERY_HALTED, "the held keys are past their limit");
}

/* Delivery report callback (runs inside ob_producer_poll). */
static void
on_delivery(void *ctx, const ob_delivery *rep)
{
	ob_deliveries *d = ctx;
	ob_record_tag tag = ob_tag_decode(rep->tag, d->ack.head_seq);
	ob_pos unit = 0;
	int64_t commit_us = 0;
	ob_event_pos pos;

	if (!ob_acktrack_txn_info(&d->ack, tag.seq, &unit, &commit_us))
		return; /* a report from a producer we dropped */
	switch (rep->status) {
	case OB_DELIVERED: {
		double latency = (double)(ob_now_us() - commit_us) / 1e6;

		ob_metrics_published(rep->record.topic, rep->record.topic_len,
				     latency > 0 ? latency : 0);
		ob_acktrack_ack(&d->ack, tag.seq);
		if (d->backlog && d->unit_tracked && tag.seq == d->unit_seq)
			ob_metrics_backlog_event();
		d->kafka_failing = false;
		return;
	}
	case OB_DELIVERY_RETRY:
		return; /* the producer failed: the slot is read again */
	case OB_DELIVERY_SUSPECT:
		break;
	}
	pos = (ob_event_pos){unit, tag.index};
	if (d->state == OB_DELIVERY_ISOLATING && ob_event_pos_cmp(pos, d->isolated) == 0) {
		refused_alone(d, rep, tag, ob_pos_lsn(unit));
		return;
	}
	/* Refused with its batch, which may hold the culprit: read the slot
	 * again and produce this record alone when it comes. */
	ob_replay_suspect(&d->replay, pos);
	break_producer(d, "the broker refused a batch for %.*s: %s", (int)rep->record.topic_len,
		       rep->record.topic, rep->error);
}

/* The verdict after serving reports: false with *out set when the
 * connection must end. */
static bool
verdict(ob_deliveries *d, ob_outcome *out)
{
	if (d->state == OB_DELIVERY_HALTED) {
		*out = OB_OUTCOME_HALT;
		return false;
	}
	if (ob_producer_failed(d->producer, NULL))
		set_state(d, OB_DELIVERY_BROKEN, "the producer failed");
	if (d->state == OB_DELIVERY_BROKEN) {
		*out = OB_OUTCOME_REPRODUCE;
		return false;
	}
	return true;
}

/* Serve reports for up to timeout_ms. While settling or isolating nothing
 * more is produced until every report came, so what is queued is sent at
 * once instead of after linger.ms: isolating the thousands of suspects of
 * one refused request takes seconds, not minutes. */
static bool
serve_reports(ob_deliveries *d, int timeout_ms, ob_outcome *out)
{
	if (d->state == OB_DELIVERY_SETTLING || d->state == OB_DELIVERY_ISOLATING)
		ob_producer_flush(d->producer, timeout_ms);
	else
		ob_producer_poll(d->producer, timeout_ms);
	return verdict(d, out);
}

static bool publish(ob_deliveries *d, const ob_event *ev, uint64_t seq, uint64_t index,
		    ob_record_kind kind, ob_outcome *out);

/* Produce the dead-letter records of refused records, in order. Each keeps
 * its transaction unconfirmable until its dead-letter record is queued.
 * Reports served while one waits for queue room may queue more: this loop
 * produces them too. */
static bool
drain_refused(ob_deliveries *d, ob_outcome *out)
{
	ob_dlqueue_entry *e;

	while ((e = ob_dlqueue_peek(&d->refused)) != NULL) {
		ob_warn("dead-lettering record: reason=%s", e->ev.dlq_reason);
		if (!publish(d, &e->ev, e->seq, e->index, (ob_record_kind)e->kind, out))
			return false;
		ob_acktrack_ack(&d->ack, e->seq); /* the refused original */
		ob_dlqueue_pop(&d->refused);
	}
	return true;
}

/* Wait up to 100 ms for the producer (its reports, room in its queue),
 * then run the caller's tick; with drain, also produce the dead-letter
 * records the reports queued. */
static bool
wait_once(ob_deliveries *d, bool drain, ob_outcome *out)
{
	if (ob_runtime_stop_requested()) {
		*out = OB_OUTCOME_STOP;
		return false;
	}
	if (!serve_reports(d, 100, out) || (drain && !drain_refused(d, out)))
		return false;
	return d->hooks.tick == NULL || d->hooks.tick(d->hooks.ctx, out);
}

bool
ob_delivery_serve(ob_deliveries *d, int timeout_ms, ob_outcome *out)
{
	return serve_reports(d, timeout_ms, out) && drain_refused(d, out);
}

void
ob_delivery_poll(ob_deliveries *d, int timeout_ms)
{
	if (d->producer != NULL)
		ob_producer_poll(d->producer, timeout_ms);
}

/* The client refused a record at once (it is larger than message.max.bytes
 * or the queue): dead-letter it in its place, cut down to headers if the
 * dead-letter record is the one too large, or halt. */
static bool
publish_refused(ob_deliveries *d, const ob_event *ev, uint64_t seq, uint64_t index,
		ob_record_kind kind, const char *why, bool too_large, ob_outcome *out)
{
	ob_record_view view;
	char error[512];

	ob_event_view(ev, &view);
	if (kind == OB_RECORD_DLQ && too_large) {
		ob_warn("dead-letter record for %.*s is too large (%s); publishing its headers "
			"only",
			(int)view.topic_len, view.topic, why);
		ob_event_build_dlq_headers_only(&d->small_ev, ev->dlq_reason, &view,
						ob_producer_max_record_bytes(d->producer));
		return publish(d, &d->small_ev, seq, index, OB_RECORD_DLQ_HEADERS_ONLY, out);
	}
	if (kind != OB_RECORD_EVENT || d->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
		ob_error("could not publish %s record to %.*s: %s; stopping",
			 kind != OB_RECORD_EVENT ? "dead-letter" : "a", (int)view.topic_len,
			 view.topic, why);
		set_state(d, OB_DELIVERY_HALTED, "the producer refused a record");
		*out = OB_OUTCOME_HALT;
		return false;
	}
	snprintf(error, sizeof(error), "producer refused the record for %.*s: %s",
		 (int)view.topic_len, view.topic, why);
	ob_event_build_dlq(&d->dlq_ev, d->cfg->outbox.dlq_topic,
			   too_large ? "too-large" : "refused", error, ob_pos_lsn(d->replay.unit),
			   &view, too_large);
	if (!ob_hold_dead_letter(&d->hold, &d->dlq_ev, &view, d->replay.unit, index,
				 ob_pos_lsn(d->replay.unit), out)) {
		set_state(d, OB_DELIVERY_HALTED, "the held keys are past their limit");
		return false;
	}
	ob_warn("dead-lettering record: %s", error);
	return publish(d, &d->dlq_ev, seq, index, OB_RECORD_DLQ, out);
}

/* Queue one record of transaction seq, waiting while the producer's queue
 * is full. */
static bool
publish(ob_deliveries *d, const ob_event *ev, uint64_t seq, uint64_t index, ob_record_kind kind,
	ob_outcome *out)
{
	bool too_large;
	const char *why;

	for (;;) {
		if (d->state == OB_DELIVERY_BROKEN || d->state == OB_DELIVERY_HALTED) {
			/* this producer's records are dropped */
			*out =
			    d->state == OB_DELIVERY_HALTED ? OB_OUTCOME_HALT : OB_OUTCOME_REPRODUCE;
			return false;
		}
		/* A suspect produced alone goes through the producer's client
		 * without the gapless guarantee, so its refusal is its own. */
		switch (
		    (d->state == OB_DELIVERY_ISOLATING ? ob_producer_send_alone : ob_producer_send)(
			d->producer, ev, ob_tag_encode(seq, index, kind), &why, &too_large)) {
		case OB_SEND_OK:
			ob_acktrack_add(&d->ack, seq);
			if (kind != OB_RECORD_EVENT)
				ob_metrics_dead_lettered(ev->dlq_reason);
			return true;
		case OB_SEND_QUEUE_FULL:
			if (!wait_once(d, false, out))
				return false;
			break;
		case OB_SEND_REFUSED:
			return publish_refused(d, ev, seq, index, kind, why, too_large, out);
		case OB_SEND_FATAL:
			set_state(d, OB_DELIVERY_BROKEN, "the producer failed");
			*out = OB_OUTCOME_REPRODUCE;
			return false;
		}
	}
}

/* Serve reports until nothing is in flight and no dead-letter record
 * waits. */
static bool
until_quiet(ob_deliveries *d, ob_outcome *out)
{
	bool ok = true;

	while (ok && (ob_acktrack_inflight(&d->ack) > 0 || ob_dlqueue_peek(&d->refused) != NULL))
		ok = wait_once(d, true, out);
	return ok;
}

bool
ob_delivery_settle(ob_deliveries *d, ob_outcome *out)
{
	bool ok;

	set_state(d, OB_DELIVERY_SETTLING, "waiting for every report");
	ok = until_quiet(d, out);
	if (d->state == OB_DELIVERY_SETTLING)
		set_state(d, OB_DELIVERY_FLOWING, "nothing in flight");
	return ok;
}

/* Produce a suspect record alone: once nothing else is in flight, so its
 * batch holds it only, and waiting for its report (and for the
 * dead-letter record that replaces it, if it is refused). Only an error
 * it gets alone is its own. */
static bool
publish_alone(ob_deliveries *d, const ob_event *ev, uint64_t seq, ob_event_pos pos,
	      ob_record_kind kind, ob_outcome *out)
{
	bool ok;

	ob_log_lsn(OB_LOG_INFO, ob_pos_lsn(pos.unit), ob_event_ptr(ev, ev->topic), ev->topic.len,
		   "retrying event %llu of transaction " OB_LSN_FMT
		   " alone: the broker refused the batch it was in",
		   (unsigned long long)pos.index, OB_LSN_ARGS(ob_pos_lsn(pos.unit)));
	if (!ob_delivery_settle(d, out))
		return false;
	set_state(d, OB_DELIVERY_ISOLATING, "a suspect is produced alone");
	d->isolated = pos;
	ok = publish(d, ev, seq, pos.index, kind, out);
	if (ok)
		ob_replay_handed(&d->replay);
	if (ok && !until_quiet(d, out)) {
		ok = false;
		/* Any end of the wait but a stop or a halt (the stream lost,
		 * above all) leaves the record in flight in the client for
		 * records produced alone, where nothing orders it before what
		 * the main client writes next: the producer is recreated, which
		 * drops it, so that it is produced alone again first. */
		if (*out != OB_OUTCOME_STOP && *out != OB_OUTCOME_HALT) {
			break_producer(d, "the stream ended while a suspect was in flight alone");
			*out = OB_OUTCOME_REPRODUCE;
		}
	}
	/* A stop leaves the record in flight: the shutdown flush still takes
	 * a refusal of it as its own. */
	if (d->state == OB_DELIVERY_ISOLATING && (ok || *out != OB_OUTCOME_STOP))
		set_state(d, OB_DELIVERY_FLOWING, "the suspect settled");
	if (ok)
		ob_replay_settled(&d->replay, pos);
	return ok;
}

void
ob_delivery_begin(ob_deliveries *d, ob_pos unit, int64_t commit_us, bool timed)
{
	d->unit_commit_us = commit_us;
	d->unit_tracked = false;
	if (timed || d->backlog) {
		d->behind = d->backlog || ob_now_us() - commit_us > OB_DELIVERY_LATE_MS * 1000;
		ob_producer_set_late(d->producer, d->behind);
	}
	if (!ob_replay_begin(&d->replay, unit))
		ob_log_lsn(OB_LOG_DEBUG, ob_pos_lsn(unit), NULL, 0,
			   "skipping transaction " OB_LSN_FMT ": already handed to the producer",
			   OB_LSN_ARGS(ob_pos_lsn(unit)));
}

/* The open unit's ack tracker entry, opened on first use. */
static uint64_t
unit_seq(ob_deliveries *d)
{
	if (!d->unit_tracked) {
		d->unit_seq = ob_acktrack_begin(&d->ack, d->replay.unit, d->unit_commit_us);
		d->unit_tracked = true;
	}
	return d->unit_seq;
}

bool
ob_delivery_commit(ob_deliveries *d, ob_lsn end_lsn)
{
	bool skipped = d->replay.skip_txn;

	ob_replay_commit(&d->replay);
	if (skipped)
		return false;
	if (d->unit_tracked)
		ob_acktrack_commit(&d->ack, d->unit_seq, end_lsn);
	else
		ob_acktrack_empty(&d->ack, end_lsn);
	ob_metrics_transaction();
	return d->unit_tracked;
}

bool
ob_delivery_hand_over(ob_deliveries *d, const ob_event *ev, ob_map_result mr, ob_lsn lsn,
		      ob_outcome *out)
{
	ob_record_kind kind = mr == OB_MAP_DLQ ? OB_RECORD_DLQ : OB_RECORD_EVENT;
	ob_replay_action action;
	ob_event_pos pos;

	if (mr == OB_MAP_SKIP)
		return true;
	action = ob_replay_next(&d->replay, &pos);
	if (action == OB_REPLAY_SKIP)
		return true; /* produced before the stream broke */
	if (d->hooks.cover != NULL && !d->hooks.cover(d->hooks.ctx, out))
		return false;
	if (mr == OB_MAP_EVENT) {
		bool held;

		if (!ob_hold_divert(&d->hold, ev, pos.unit, pos.index, lsn, &held, out))
			return false;
		if (held) {
			ev = &d->hold.held_ev;
			kind = OB_RECORD_DLQ;
		}
	} else if (mr == OB_MAP_DLQ) {
		size_t len;
		const char *error = ob_event_find_header(ev, "error", &len);

		ob_log_lsn(OB_LOG_WARNING, lsn, NULL, 0,
			   "bad event at " OB_LSN_FMT ": %.*s (reason %s)", OB_LSN_ARGS(lsn),
			   (int)len, error ? error : "", ev->dlq_reason);
		if (d->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
			ob_log_lsn(OB_LOG_ERROR, lsn, NULL, 0,
				   "on_bad_event = halt: stopping without confirming " OB_LSN_FMT,
				   OB_LSN_ARGS(lsn));
			*out = OB_OUTCOME_HALT;
			return false;
		}
		if (!ob_hold_dead_letter(&d->hold, ev, NULL, pos.unit, pos.index, lsn, out))
			return false;
	}
	if (action == OB_REPLAY_ISOLATE)
		return publish_alone(d, ev, unit_seq(d), pos, kind, out);
	/* Counted only once handed over: a publish cut short (queue full,
	 * then the stream broke) must be read again, not skipped. */
	if (!publish(d, ev, unit_seq(d), pos.index, kind, out))
		return false;
	ob_replay_handed(&d->replay);
	return true;
}

void
ob_delivery_cut(ob_deliveries *d)
{
	if (d->replay.in_txn && !d->replay.skip_txn && d->unit_tracked)
		ob_acktrack_abort(&d->ack, d->unit_seq);
	ob_replay_cut(&d->replay);
}

void
ob_delivery_end_backlog(ob_deliveries *d)
{
	if (d->replay.in_txn && d->unit_tracked)
		ob_acktrack_abort(&d->ack, d->unit_seq);
	ob_replay_reset(&d->replay, 0);
	d->backlog = false;
	d->behind = false;
}

void
ob_delivery_write_holds(ob_deliveries *d)
{
	if (d->state != OB_DELIVERY_HALTED)
		ob_hold_flush(&d->hold);
}

bool
ob_delivery_connected(const ob_deliveries *d)
{
	return d->producer != NULL && ob_producer_connected(d->producer);
}

void
ob_delivery_alive(ob_deliveries *d, bool streaming)
{
	bool kafka = ob_delivery_connected(d);

	(void)ob_runtime_tick();
	if (streaming)
		ob_metrics_set_ready(kafka && !d->kafka_failing ? OB_READY_STREAMING
								: OB_READY_KAFKA_DOWN);
	ob_metrics_set_connected(streaming, kafka);
}

/* Serve reports while a pause waits, the stream being down. */
static bool
serve_paused(void *ctx, int timeout_ms)
{
	ob_deliveries *d = ctx;

	ob_metrics_set_connected(false, ob_delivery_connected(d));
	ob_delivery_poll(d, timeout_ms);
	return true;
}

bool
ob_delivery_pause(ob_deliveries *d, int64_t ms, ob_ready_state state)
{
	ob_metrics_set_ready(state);
	return ob_runtime_wait(ms, serve_paused, d);
}

bool
ob_delivery_init(ob_deliveries *d, const ob_config *cfg, ob_delivery_hooks hooks)
{
	memset(d, 0, sizeof(*d));
	d->cfg = cfg;
	d->hooks = hooks;
	ob_acktrack_init(&d->ack, 0);
	ob_replay_init(&d->replay);
	ob_dlqueue_init(&d->refused);
	ob_event_init(&d->dlq_ev);
	ob_event_init(&d->small_ev);
	ob_hold_init(&d->hold, cfg);
	ob_backoff_init(&d->recreate_backoff, RECREATE_BACKOFF_FIRST_MS,
			cfg->pg.reconnect_max_backoff_ms);
	d->last_recreated = (ob_lsn)-1;
	return ob_producer_new(cfg, OB_PRODUCER_PIPELINED, on_delivery, d, &d->producer);
}

void
ob_delivery_free(ob_deliveries *d)
{
	ob_dlqueue_clear(&d->refused);
	ob_producer_free(d->producer);
	d->producer = NULL;
	ob_event_free(&d->dlq_ev);
	ob_event_free(&d->small_ev);
	ob_hold_free(&d->hold);
	ob_replay_free(&d->replay);
	ob_acktrack_free(&d->ack);
}

/* A fresh producer was made: when the last one failed with the slot no
 * further on (the cluster is down, a topic is unknown or not authorized),
 * wait before reading again, at a growing interval. False when a stop was
 * requested meanwhile. */
static bool
wait_after_recreate(ob_deliveries *d)
{
	ob_lsn confirmable = ob_acktrack_confirmable(&d->ack);
	int64_t ms;

	if (confirmable != d->last_recreated) {
		d->last_recreated = confirmable;
		ob_backoff_reset(&d->recreate_backoff);
		return true;
	}
	d->kafka_failing = true;
	ms = ob_backoff_next(&d->recreate_backoff);
	ob_info("kafka producer failed again; retrying in %lld ms", (long long)ms);
	return ob_delivery_pause(d, ms, OB_READY_KAFKA_DOWN);
}

bool
ob_delivery_recreate(ob_deliveries *d, ob_lsn from, ob_outcome *out)
{
	const char *why = d->broken_why;
	char reason[512];

	if (why[0] == '\0')
		(void)ob_producer_failed(d->producer, &why);
	snprintf(reason, sizeof(reason), "%s", why); /* why dies with the producer */
	ob_warn("recreating the kafka producer (%s); re-reading the slot from " OB_LSN_FMT, reason,
		OB_LSN_ARGS(from));
	ob_producer_free(d->producer); /* serves the reports already waiting */
	d->producer = NULL;
	ob_acktrack_reset(&d->ack);
	ob_dlqueue_clear(&d->refused);
	ob_replay_reset(&d->replay, ob_acktrack_confirmable(&d->ack));
	d->broken_why[0] = '\0';
	d->behind = false;
	set_state(d, OB_DELIVERY_FLOWING, "the producer was recreated");
	ob_metrics_reconnect(OB_TARGET_KAFKA);
	if (!ob_producer_new(d->cfg, OB_PRODUCER_PIPELINED, on_delivery, d, &d->producer)) {
		*out = OB_OUTCOME_HALT;
		return false;
	}
	if (!wait_after_recreate(d)) {
		*out = OB_OUTCOME_STOP;
		return false;
	}
	return true;
}
