/*
 * relay.c: the loop between the slot and the producer.
 *
 * ob_relay_run() turns run_connection() until a stop: each call connects
 * to Postgres, checks the database and the slot, starts replication from
 * the confirmable position and streams until something ends the
 * connection; the one switch of ob_relay_run() handles that outcome
 * (reconnect, back off, wait as a standby, recreate the producer, or stop),
 * as pg_recvlogical does.
 *
 * State that outlives one connection: the producer, the ack tracker (what
 * may be confirmed), the replay state (what was already handed to the
 * producer, and which suspect records to produce alone), who the server
 * is (a slot is created only before the first stream, and a different
 * server or a vanished slot later is an operator's matter), and, with
 * wal2json, the tables the last stream read.
 *
 * The stream's tables (README, "Partitioned outbox tables"): with
 * wal2json each stream reads the outbox table and its leaf partitions
 * named when it started (partitions.h), with pgoutput the publication,
 * and reads them again about every second. The ceiling is the verified
 * position of the latest set its tables cover; nothing above it is
 * confirmed or streamed from. A set with a leaf the stream does not read
 * (a partition created, attached, or a plain table replaced by a
 * partitioned one) ends the stream; the next one reads it, and what was
 * read after the ceiling is read again. With a partitioned table and
 * wal2json, no event is handed over above the ceiling (cover_unit()), so
 * reading again never publishes an earlier transaction's events after a
 * later one's.
 */
#include "outboxd/relay.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outboxd/acktrack.h"
#include "outboxd/backlog.h"
#include "outboxd/check.h"
#include "outboxd/dlqueue.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/notify.h"
#include "outboxd/outbox.h"
#include "outboxd/partitions.h"
#include "outboxd/pgoutput.h"
#include "outboxd/pgrepl.h"
#include "outboxd/position.h"
#include "outboxd/producer.h"
#include "outboxd/replay.h"
#include "outboxd/signals.h"
#include "outboxd/slotmark.h"
#include "outboxd/slotwatch.h"
#include "outboxd/wal2json.h"

/* How long SIGTERM waits for in-flight events before giving up. */
#define SHUTDOWN_FLUSH_MS       30000
/* The shortest gap between two reads of the stream's tables when
 * acknowledgements wait on the verified position. */
#define HURRIED_READ_MS         20
/* How long the last read of the stream's tables may take at shutdown. */
#define FINAL_READ_MS           5000
/* The fastest pace of status updates sent because the position moved. */
#define STATUS_MIN_INTERVAL_MS  20
/* Records read per loop turn before serving delivery reports again. */
#define READ_BATCH              2000
/* A transaction read this long after its commit is part of a backlog. */
#define BEHIND_MS               100
/* How long the loop naps, reading a backlog, once it has read what came. */
#define BACKLOG_NAP_MS          4
/* First reconnect delay; doubles up to reconnect_max_backoff_ms. */
#define BACKOFF_START_MS        100
/* How often a standby says it is still waiting. */
#define STANDBY_LOG_INTERVAL_MS 60000
/* How often the backlog's progress is logged. */
#define BACKLOG_LOG_INTERVAL_MS 5000
/* A server error met this many times in a row at one position is not
 * going away by itself. */
#define REPEATED_ERROR_LIMIT    5
/* The ceiling before the first stream read its tables (the backlog). */
#define NO_CEILING              UINT64_MAX

/*
 * A record's tag, which its delivery report carries back: its ack tracker
 * transaction (the low TAG_SEQ_BITS of the sequence number, rebuilt from
 * the tracker's oldest entry, since far fewer transactions are ever
 * tracked at once), its index in the transaction (saturating), and what
 * kind of record it is.
 */
#define TAG_KIND_BITS  2
#define TAG_INDEX_BITS 31
#define TAG_SEQ_BITS   31
#define TAG_INDEX_MAX  ((UINT64_C(1) << TAG_INDEX_BITS) - 1)
#define TAG_SEQ_MASK   ((UINT64_C(1) << TAG_SEQ_BITS) - 1)

typedef enum record_kind {
	KIND_EVENT,            /* an outbox event */
	KIND_DLQ,              /* a dead-letter record */
	KIND_DLQ_HEADERS_ONLY, /* a dead-letter record that did not fit, cut down */
} record_kind;

typedef enum outcome {
	OUTCOME_STOP,      /* a signal asked us to stop */
	OUTCOME_HALT,      /* exit 1: an operator must look */
	OUTCOME_LOST,      /* the connection broke: reconnect at once */
	OUTCOME_RETRY,     /* Postgres is not usable yet: back off, then reconnect */
	OUTCOME_STANDBY,   /* another process holds the slot: wait */
	OUTCOME_REPRODUCE, /* recreate the producer and read the slot again */
	OUTCOME_CONFIG,    /* exit 2: the configuration is wrong */
	OUTCOME_REFILTER,  /* a partition the stream does not read: reconnect */
} outcome;

typedef struct relay {
	const ob_config *cfg;
	ob_mapper mapper;
	ob_acktrack ack;
	ob_replay replay;
	ob_producer *producer;
	ob_pgrepl *pg;
	ob_event ev;              /* the event being mapped, reused */
	ob_event dlq_ev;          /* a dead-letter record built for a refused record, reused */
	ob_event small_ev;        /* a dead-letter record cut down to headers, reused */
	ob_w2j_record rec;        /* wal2json: points into the message being handled */
	ob_pgo_msg pgo;           /* pgoutput: points into the message being handled */
	ob_pgo_relcache relcache; /* pgoutput: the relations of this session */
	ob_dlqueue refused;
	bool draining; /* drain_refused() is running: do not re-enter it */

	/* The transaction being read (its position is in replay). */
	int64_t txn_commit_us;
	bool behind;      /* it was read more than BEHIND_MS after its commit */
	bool txn_tracked; /* it has an entry in the ack tracker (txn_seq) */
	uint64_t txn_seq;

	/* The server and the stream. */
	bool streamed;       /* replication started once: the slot is ours */
	ob_pg_system server; /* who we streamed from */
	ob_lsn received;
	ob_lsn wal_end;
	ob_lsn sent_flush;
	int64_t last_status_ms;
	bool reply_due;

	/* The last server error, and how often it came at one position. */
	char err_state[6];
	char err_msg[256];
	ob_lsn err_lsn;
	int err_repeats;

	/* A suspect record being produced alone. */
	bool settling; /* settle() waits for every report: send without lingering */
	bool isolating;
	ob_event_pos isolated;
	/* Set when a batch was refused: its records are read again and
	 * produced alone. */
	char reproduce_why[256];
	bool halt;

	/* Waits between attempts. */
	int64_t backoff;           /* before the next connection attempt */
	int64_t reproduce_backoff; /* before the next producer, when one fails again */
	ob_lsn last_reproduced;    /* the confirmable LSN when the last one was made */
	int64_t last_standby_log;
	/* Producers keep failing with the slot no further on: /readyz says
	 * kafka-down until a record is delivered again. */
	bool kafka_failing;
	/* stream() runs: a query waiting meanwhile (the stream's tables read
	 * again) leaves the stream's state on /readyz and the gauges. */
	bool streaming;
	/* Until when a query may still run after a stop was asked for (the
	 * last read of the stream's tables at shutdown); 0: it may not. */
	int64_t stopping_query_until;

	/* wal2json: the tables the stream reads (add-tables), kept after it
	 * ends to compare the next stream's with; the latest set read; the
	 * ceiling (see the top of this file); and the reads while streaming. */
	ob_leafset tables;
	bool have_tables;
	ob_leafset latest;
	ob_lsn ceiling;
	ob_lsn events_end; /* what the latest unit with events confirms */
	ob_partwatch watch;
	ob_slotwatch slots; /* the slot as the server sees it, read after the set */

	/* The backlog (backlog.h): publishing it now, and whether this relay
	 * only creates the slot (`slot create`) and has created it. */
	bool backlog_running;
	ob_lsn backlog_end; /* the consistent point of the latest attempt (0: none) */
	bool create_only;
	bool slot_created;
} relay;

/* Log a line that carries the LSN (and the topic, when given) as fields,
 * so JSON logs can be filtered on them. */
static void OB_PRINTF(5, 6) log_at(ob_log_level level, ob_lsn lsn, const char *topic,
				   size_t topic_len, const char *fmt, ...)
{
	char msg[1024], lsn_text[OB_LSN_BUFLEN], topic_text[256];
	ob_log_field fields[3] = {
	    {"lsn", ob_lsn_format(lsn, lsn_text)}, {NULL, NULL}, {NULL, NULL}};
	va_list ap;

	if (!ob_log_enabled(level))
		return;
	if (topic != NULL) {
		snprintf(topic_text, sizeof(topic_text), "%.*s", (int)topic_len, topic);
		fields[1] = (ob_log_field){"topic", topic_text};
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ob_log_kv(level, fields, "%s", msg);
}

static uint64_t
make_tag(uint64_t seq, uint64_t index, record_kind kind)
{
	if (index > TAG_INDEX_MAX)
		index = TAG_INDEX_MAX;
	return ((seq & TAG_SEQ_MASK) << (TAG_INDEX_BITS + TAG_KIND_BITS)) |
	       (index << TAG_KIND_BITS) | (uint64_t)kind;
}

static void
split_tag(const relay *r, uint64_t tag, uint64_t *seq, uint64_t *index, record_kind *kind)
{
	uint64_t low = tag >> (TAG_INDEX_BITS + TAG_KIND_BITS);

	*seq = r->ack.head_seq + ((low - r->ack.head_seq) & TAG_SEQ_MASK);
	*index = (tag >> TAG_KIND_BITS) & TAG_INDEX_MAX;
	*kind = (record_kind)(tag & ((1u << TAG_KIND_BITS) - 1));
}

/* A suspect record was refused alone: the error is its own. Queue its
 * dead-letter record, or halt when that is not possible or wanted. */
static void
refused_alone(relay *r, const ob_delivery *d, uint64_t seq, uint64_t index, record_kind kind,
	      ob_lsn end_lsn)
{
	const ob_record_view *rec = &d->record;
	ob_dlqueue_entry *e;
	char error[512];

	if (kind == KIND_DLQ_HEADERS_ONLY || (kind == KIND_DLQ && !d->value_too_large)) {
		log_at(OB_LOG_ERROR, end_lsn, rec->topic, rec->topic_len,
		       "could not publish dead-letter record to %.*s: %s; stopping without "
		       "confirming " OB_LSN_FMT,
		       (int)rec->topic_len, rec->topic, d->error, OB_LSN_ARGS(end_lsn));
		r->halt = true;
		return;
	}
	if (kind == KIND_DLQ) {
		e = ob_dlqueue_push(&r->refused, seq, index, KIND_DLQ_HEADERS_ONLY);
		ob_event_build_dlq_headers_only(&e->ev, "too-large", rec,
						ob_producer_max_record_bytes(r->producer));
		return;
	}
	if (r->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
		log_at(OB_LOG_ERROR, end_lsn, rec->topic, rec->topic_len,
		       "broker refused a record for %.*s: %s; on_bad_event = halt: stopping "
		       "without confirming " OB_LSN_FMT,
		       (int)rec->topic_len, rec->topic, d->error, OB_LSN_ARGS(end_lsn));
		r->halt = true;
		return;
	}
	snprintf(error, sizeof(error), "broker refused the record for %.*s: %s",
		 (int)rec->topic_len, rec->topic, d->error);
	e = ob_dlqueue_push(&r->refused, seq, index, KIND_DLQ);
	ob_event_build_dlq(&e->ev, r->cfg->outbox.dlq_topic,
			   d->value_too_large ? "too-large" : "refused", error, end_lsn, rec,
			   d->value_too_large);
}

/* Delivery report callback (runs inside ob_producer_poll). */
static void
on_delivery(void *ctx, const ob_delivery *d)
{
	relay *r = ctx;
	uint64_t seq, index;
	record_kind kind;
	ob_pos unit = 0;
	int64_t commit_us = 0;
	ob_event_pos pos;

	split_tag(r, d->tag, &seq, &index, &kind);
	if (!ob_acktrack_txn_info(&r->ack, seq, &unit, &commit_us))
		return; /* a report from a producer we dropped */
	switch (d->status) {
	case OB_DELIVERED: {
		double latency = (double)(ob_now_us() - commit_us) / 1e6;

		ob_metrics_published(d->record.topic, d->record.topic_len,
				     latency > 0 ? latency : 0);
		ob_acktrack_ack(&r->ack, seq);
		if (r->backlog_running && r->txn_tracked && seq == r->txn_seq)
			ob_metrics_backlog_event();
		r->kafka_failing = false;
		return;
	}
	case OB_DELIVERY_RETRY:
		return; /* the producer failed: the slot is read again */
	case OB_DELIVERY_SUSPECT:
		break;
	}
	pos = (ob_event_pos){unit, index};
	if (r->isolating && ob_event_pos_cmp(pos, r->isolated) == 0) {
		refused_alone(r, d, seq, index, kind, ob_pos_lsn(unit));
		return;
	}
	/* Refused with its batch, which may hold the culprit: read the slot
	 * again and produce this record alone when it comes. */
	ob_replay_suspect(&r->replay, pos);
	if (r->reproduce_why[0] == '\0')
		snprintf(r->reproduce_why, sizeof(r->reproduce_why),
			 "the broker refused a batch for %.*s: %s", (int)d->record.topic_len,
			 d->record.topic, d->error);
}

static bool publish(relay *r, const ob_event *ev, uint64_t seq, uint64_t index, record_kind kind,
		    outcome *out);
static bool cover_unit(relay *r, outcome *out);

/* Produce the dead-letter records of refused records, in order. Each keeps
 * its transaction unconfirmable until its dead-letter record is queued.
 * While one waits for queue room, reports keep being served and may queue
 * more: those wait for this loop instead of re-entering it. */
static bool
drain_refused(relay *r, outcome *out)
{
	ob_dlqueue_entry *e;
	bool ok = true;

	if (r->draining)
		return true;
	r->draining = true;
	while (ok && (e = ob_dlqueue_peek(&r->refused)) != NULL) {
		ob_warn("dead-lettering record: reason=%s", e->ev.dlq_reason);
		ok = publish(r, &e->ev, e->seq, e->index, (record_kind)e->kind, out);
		if (ok) {
			ob_acktrack_ack(&r->ack, e->seq); /* the refused original */
			ob_dlqueue_pop(&r->refused);
		}
	}
	r->draining = false;
	return ok;
}

/* The highest position that may be confirmed or streamed from: the ack
 * tracker's, held at the ceiling. */
static ob_lsn
confirmable(relay *r)
{
	ob_lsn lsn = ob_acktrack_confirmable(&r->ack);

	return lsn < r->ceiling ? lsn : r->ceiling;
}

/* Send a status update if one is due: always when forced or asked for,
 * at least every status_interval_ms, and when the confirmable position
 * moved, at most every STATUS_MIN_INTERVAL_MS. */
static bool
send_status(relay *r, bool force)
{
	ob_lsn flush = confirmable(r);
	int64_t now = ob_mono_ms();
	int64_t since = now - r->last_status_ms;
	bool due = force || r->reply_due || since >= r->cfg->pg.status_interval_ms ||
		   (flush != r->sent_flush && since >= STATUS_MIN_INTERVAL_MS);
	ob_pos oldest_unit;
	int64_t oldest_us = 0;

	ob_metrics_set_lsns(flush, r->received, r->wal_end);
	ob_metrics_set_inflight(ob_acktrack_inflight(&r->ack));
	/* confirmable() dropped the confirmed prefix: the oldest entry left
	 * is the oldest transaction received and not confirmed. */
	ob_metrics_set_oldest_unconfirmed(
	    ob_acktrack_txn_info(&r->ack, r->ack.head_seq, &oldest_unit, &oldest_us) ? oldest_us
										     : 0);
	if (!due || r->pg == NULL)
		return true;
	if (!ob_pgrepl_send_status(r->pg, r->received > flush ? r->received : flush, flush, false))
		return false;
	if (flush != r->sent_flush)
		log_at(OB_LOG_DEBUG, flush, NULL, 0, "confirmed " OB_LSN_FMT, OB_LSN_ARGS(flush));
	r->sent_flush = flush;
	r->last_status_ms = now;
	r->reply_due = false;
	return true;
}

/* Tell /healthz, /readyz, the gauges and systemd's watchdog that the loop
 * is alive; streaming says whether the replication stream is up. */
static void
report_alive(relay *r, bool streaming)
{
	bool kafka = r->producer != NULL && ob_producer_connected(r->producer);

	ob_metrics_heartbeat();
	ob_notify_watchdog();
	if (streaming)
		ob_metrics_set_ready(kafka && !r->kafka_failing ? OB_READY_STREAMING
								: OB_READY_KAFKA_DOWN);
	ob_metrics_set_connected(streaming, kafka);
}

/* Serve delivery reports and refused records; false with *out set when
 * the relay must leave the stream. While settling (around a suspect
 * produced alone) nothing more is produced until every report came, so
 * what is queued is sent at once instead of after linger.ms: isolating the
 * thousands of suspects of one refused request takes seconds, not
 * minutes. */
static bool
serve_producer(relay *r, int timeout_ms, outcome *out)
{
	if (r->settling)
		ob_producer_flush(r->producer, timeout_ms);
	else
		ob_producer_poll(r->producer, timeout_ms);
	if (r->halt) {
		*out = OUTCOME_HALT;
		return false;
	}
	if (ob_producer_failed(r->producer, NULL) || r->reproduce_why[0] != '\0') {
		*out = OUTCOME_REPRODUCE;
		return false;
	}
	return drain_refused(r, out);
}

/* Wait up to 100 ms for the producer (its reports, room in its queue)
 * while keeping the server informed. False with *out set when the
 * connection must end: a stop was asked for, the producer failed or the
 * server is gone. */
static bool
wait_for_producer(relay *r, outcome *out)
{
	if (ob_signals_stop_requested()) {
		*out = OUTCOME_STOP;
		return false;
	}
	if (!serve_producer(r, 100, out))
		return false;
	if (!send_status(r, false)) {
		*out = OUTCOME_LOST;
		return false;
	}
	report_alive(r, r->pg != NULL);
	return true;
}

/* The client refused a record at once (it is larger than message.max.bytes
 * or the queue): dead-letter it in its place, cut down to headers if the
 * dead-letter record is the one too large, or halt. */
static bool
publish_refused(relay *r, const ob_event *ev, uint64_t seq, uint64_t index, record_kind kind,
		const char *why, bool too_large, outcome *out)
{
	ob_record_view view;
	char error[512];

	ob_event_view(ev, &view);
	if (kind == KIND_DLQ && too_large) {
		ob_warn("dead-letter record for %.*s is too large (%s); publishing its headers "
			"only",
			(int)view.topic_len, view.topic, why);
		ob_event_build_dlq_headers_only(&r->small_ev, ev->dlq_reason, &view,
						ob_producer_max_record_bytes(r->producer));
		return publish(r, &r->small_ev, seq, index, KIND_DLQ_HEADERS_ONLY, out);
	}
	if (kind != KIND_EVENT || r->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
		ob_error("could not publish %s record to %.*s: %s; stopping",
			 kind != KIND_EVENT ? "dead-letter" : "a", (int)view.topic_len, view.topic,
			 why);
		*out = OUTCOME_HALT;
		return false;
	}
	snprintf(error, sizeof(error), "producer refused the record for %.*s: %s",
		 (int)view.topic_len, view.topic, why);
	ob_event_build_dlq(&r->dlq_ev, r->cfg->outbox.dlq_topic,
			   too_large ? "too-large" : "refused", error, ob_pos_lsn(r->replay.unit),
			   &view, too_large);
	ob_warn("dead-lettering record: %s", error);
	return publish(r, &r->dlq_ev, seq, index, KIND_DLQ, out);
}

/* Queue one record of transaction seq, waiting while the producer's queue
 * is full (the WAL is not read meanwhile: that is the backpressure). */
static bool
publish(relay *r, const ob_event *ev, uint64_t seq, uint64_t index, record_kind kind, outcome *out)
{
	bool too_large;
	const char *why;

	for (;;) {
		if (r->reproduce_why[0] != '\0') {
			*out = OUTCOME_REPRODUCE; /* this producer's records are dropped */
			return false;
		}
		switch ((r->isolating ? ob_producer_send_alone : ob_producer_send)(
		    r->producer, ev, make_tag(seq, index, kind), &why, &too_large)) {
		case OB_SEND_OK:
			ob_acktrack_add(&r->ack, seq);
			if (kind != KIND_EVENT)
				ob_metrics_dead_lettered(ev->dlq_reason);
			return true;
		case OB_SEND_QUEUE_FULL:
			if (!wait_for_producer(r, out))
				return false;
			break;
		case OB_SEND_REFUSED:
			return publish_refused(r, ev, seq, index, kind, why, too_large, out);
		case OB_SEND_FATAL:
			*out = OUTCOME_REPRODUCE;
			return false;
		}
	}
}

/* Serve reports until every record handed over is acknowledged and no
 * dead-letter record waits. */
static bool
settle(relay *r, outcome *out)
{
	bool ok = true;

	r->settling = true;
	while (ok && (ob_acktrack_inflight(&r->ack) > 0 || ob_dlqueue_peek(&r->refused) != NULL))
		ok = wait_for_producer(r, out);
	r->settling = false;
	return ok;
}

/* Produce a suspect record alone: once nothing else is in flight, so its
 * batch holds it only, and waiting for its report (and for the
 * dead-letter record that replaces it, if it is refused). Only an error
 * it gets alone is its own. */
static bool
publish_alone(relay *r, const ob_event *ev, uint64_t seq, ob_event_pos pos, record_kind kind,
	      outcome *out)
{
	bool ok;

	log_at(OB_LOG_INFO, ob_pos_lsn(pos.unit), ob_event_ptr(ev, ev->topic), ev->topic.len,
	       "retrying event %llu of transaction " OB_LSN_FMT
	       " alone: the broker refused the batch it was in",
	       (unsigned long long)pos.index, OB_LSN_ARGS(ob_pos_lsn(pos.unit)));
	if (!settle(r, out))
		return false;
	r->isolating = true;
	r->isolated = pos;
	ok = publish(r, ev, seq, pos.index, kind, out);
	if (ok)
		ob_replay_handed(&r->replay);
	if (ok && !settle(r, out)) {
		ok = false;
		/* Any end of the wait but a stop (the stream lost, above all)
		 * leaves the record in flight in the client for records produced
		 * alone, where nothing orders it before what the main client
		 * writes next: recreate the producer, which drops it, so that it
		 * is produced alone again first. */
		if (*out != OUTCOME_STOP && *out != OUTCOME_HALT && *out != OUTCOME_REPRODUCE) {
			*out = OUTCOME_REPRODUCE;
			if (r->reproduce_why[0] == '\0')
				snprintf(
				    r->reproduce_why, sizeof(r->reproduce_why),
				    "the stream ended while a record produced alone was in flight");
		}
	}
	/* A stop leaves the record in flight: the shutdown flush still takes
	 * a refusal of it as its own. */
	r->isolating = !ok && *out == OUTCOME_STOP;
	if (ok)
		ob_replay_settled(&r->replay, pos);
	return ok;
}

/* Start reading a unit (a transaction, a standalone message or the
 * backlog) at position unit (position.h). It gets an ack tracker entry
 * with its first event only: the many transactions wal2json sends as bare
 * B/C pairs (their changes were all filtered out) cost no memory while
 * events are in flight. */
static void
begin_txn(relay *r, ob_pos unit, int64_t commit_us)
{
	r->txn_commit_us = commit_us;
	r->behind = ob_now_us() - commit_us > BEHIND_MS * 1000;
	r->txn_tracked = false;
	if (!ob_replay_begin(&r->replay, unit))
		log_at(OB_LOG_DEBUG, ob_pos_lsn(unit), NULL, 0,
		       "skipping transaction " OB_LSN_FMT ": already handed to the producer",
		       OB_LSN_ARGS(ob_pos_lsn(unit)));
}

/* The open transaction's ack tracker entry, opened on first use. */
static uint64_t
txn_seq(relay *r)
{
	if (!r->txn_tracked) {
		r->txn_seq = ob_acktrack_begin(&r->ack, r->replay.unit, r->txn_commit_us);
		r->txn_tracked = true;
	}
	return r->txn_seq;
}

/* The open unit committed; end_lsn is the position that confirms it
 * (position.h). */
static void
commit_txn(relay *r, ob_lsn end_lsn)
{
	bool skipped = r->replay.skip_txn;

	ob_replay_commit(&r->replay);
	if (skipped)
		return;
	if (r->txn_tracked) {
		ob_acktrack_commit(&r->ack, r->txn_seq, end_lsn);
		r->events_end = end_lsn;
	} else
		ob_acktrack_empty(&r->ack, end_lsn);
	ob_metrics_transaction();
}

/* Handle one event (or dead-letter record) of the open transaction. */
static bool
handle_event(relay *r, ob_map_result mr, ob_lsn lsn, outcome *out)
{
	record_kind kind = mr == OB_MAP_DLQ ? KIND_DLQ : KIND_EVENT;
	ob_replay_action action;
	ob_event_pos pos;

	if (mr == OB_MAP_SKIP)
		return true;
	action = ob_replay_next(&r->replay, &pos);
	if (action == OB_REPLAY_SKIP)
		return true; /* produced before the stream broke */
	if (!cover_unit(r, out))
		return false;
	if (mr == OB_MAP_DLQ) {
		size_t len;
		const char *error = ob_event_find_header(&r->ev, "error", &len);

		log_at(OB_LOG_WARNING, lsn, NULL, 0,
		       "bad event at " OB_LSN_FMT ": %.*s (reason %s)", OB_LSN_ARGS(lsn), (int)len,
		       error ? error : "", r->ev.dlq_reason);
		if (r->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
			log_at(OB_LOG_ERROR, lsn, NULL, 0,
			       "on_bad_event = halt: stopping without confirming " OB_LSN_FMT,
			       OB_LSN_ARGS(lsn));
			*out = OUTCOME_HALT;
			return false;
		}
	}
	if (action == OB_REPLAY_ISOLATE)
		return publish_alone(r, &r->ev, txn_seq(r), pos, kind, out);
	/* Counted only once handed over: a publish cut short (queue full,
	 * then the stream broke) must be read again, not skipped. */
	if (!publish(r, &r->ev, txn_seq(r), pos.index, kind, out))
		return false;
	ob_replay_handed(&r->replay);
	return true;
}

/* A record the decoder sent that did not parse (malformed, or with
 * wal2json an outbox row wider than OB_W2J_MAX_COLUMNS). Inside a
 * transaction it can only be an outbox change: dead-letter its raw bytes. */
static bool
handle_unparsable(relay *r, const ob_pgrepl_msg *msg, const char *err, outcome *out)
{
	ob_record_view view;
	char error[512];

	snprintf(error, sizeof(error), "could not parse %s record: %s",
		 ob_plugin_name(r->cfg->pg.plugin), err);
	if (!r->replay.in_txn) {
		/* A B or C record we cannot read: going on could skip a whole
		 * transaction, so stop before confirming anything past it. */
		log_at(OB_LOG_ERROR, msg->data_start, NULL, 0,
		       "%s; stopping: outboxd cannot tell which transaction it belongs to", error);
		*out = OUTCOME_HALT;
		return false;
	}
	memset(&view, 0, sizeof(view));
	view.value = msg->data;
	view.value_len = msg->len;
	view.has_value = true;
	view.timestamp_ms = r->txn_commit_us / 1000;
	ob_event_build_dlq(&r->ev, r->cfg->outbox.dlq_topic, "bad-record", error, msg->data_start,
			   &view, false);
	return handle_event(r, OB_MAP_DLQ, msg->data_start, out);
}

/* A Begin: the transaction whose commit record starts at commit_start
 * starts. */
static bool
handle_begin(relay *r, ob_lsn commit_start, int64_t commit_us, outcome *out)
{
	if (r->replay.in_txn) {
		ob_error("transaction " OB_LSN_FMT " began before " OB_LSN_FMT " ended",
			 OB_LSN_ARGS(commit_start), OB_LSN_ARGS(ob_pos_lsn(r->replay.unit)));
		*out = OUTCOME_LOST;
		return false;
	}
	begin_txn(r, ob_pos_txn(commit_start), commit_us);
	return true;
}

/* A logical message, inside the open transaction or standing alone. */
static bool
handle_message(relay *r, const ob_logical_message *lm, outcome *out)
{
	int64_t now_us;
	bool ok;

	if (r->replay.in_txn)
		return handle_event(
		    r,
		    ob_mapper_map_logical_message(&r->mapper, lm, r->txn_commit_us / 1000, &r->ev),
		    lm->lsn, out);
	/* A non-transactional message stands alone, placed and confirmed by
	 * where its record ends (position.h). */
	now_us = ob_now_us();
	begin_txn(r, ob_pos_message(lm->lsn), now_us);
	ok = handle_event(r, ob_mapper_map_logical_message(&r->mapper, lm, now_us / 1000, &r->ev),
			  lm->lsn, out);
	if (ok)
		commit_txn(r, ob_pos_message_confirms(lm->lsn));
	return ok;
}

/* Map an I record: a row of the outbox table, or, when it is
 * partitioned, of one of the leaves the stream reads. */
static ob_map_result
map_w2j_insert(relay *r)
{
	int64_t commit_ms = r->txn_commit_us / 1000;

	if (!r->tables.partitioned)
		return ob_mapper_map_insert(&r->mapper, &r->rec, commit_ms, &r->ev);
	if (!ob_leafset_has(&r->tables, r->rec.schema, r->rec.table))
		return OB_MAP_SKIP;
	return ob_mapper_map_row(&r->mapper, &r->rec, commit_ms, &r->ev);
}

/* One wal2json record (wal2json.h). */
static bool
handle_wal2json(relay *r, const ob_pgrepl_msg *msg, outcome *out)
{
	char err[256];

	if (!ob_w2j_parse(msg->data, msg->len, &r->rec, err, sizeof(err)))
		return handle_unparsable(r, msg, err, out);
	switch (r->rec.action) {
	case OB_W2J_BEGIN:
		return handle_begin(r, r->rec.lsn,
				    r->rec.has_timestamp ? r->rec.timestamp_us : ob_now_us(), out);
	case OB_W2J_COMMIT:
		if (r->replay.in_txn)
			commit_txn(r, r->rec.nextlsn);
		return true;
	case OB_W2J_INSERT:
		if (!r->replay.in_txn)
			return true;
		return handle_event(r, map_w2j_insert(r), r->rec.lsn, out);
	case OB_W2J_MESSAGE: {
		ob_logical_message lm = {
		    .lsn = r->rec.lsn,
		    .transactional = r->rec.transactional,
		    .prefix = r->rec.prefix,
		    .prefix_too_long = r->rec.prefix_too_long,
		    .content = r->rec.content,
		    .content_len = r->rec.content_len,
		    .content_escaped = r->rec.content_escaped,
		};

		return handle_message(r, &lm, out);
	}
	case OB_W2J_OTHER:
		break;
	}
	return true;
}

/* An Insert of pgoutput: a row of the outbox table (published under the
 * partitioned table when it went to a partition), or of another table the
 * publication holds, which is skipped. */
static bool
handle_pgoutput_insert(relay *r, const ob_pgrepl_msg *msg, outcome *out)
{
	const ob_config *cfg = r->cfg;
	const ob_pgo_relation *rel;
	ob_text_row row;
	char err[256];

	bool parsed;

	if (!r->replay.in_txn)
		return true;
	parsed = ob_pgo_row(&r->relcache, &r->pgo, &rel, &row, err, sizeof(err));
	if (rel != NULL && (strcmp(rel->schema, cfg->outbox.schema) != 0 ||
			    strcmp(rel->name, cfg->outbox.table_name) != 0))
		return true;
	if (!parsed)
		return handle_unparsable(r, msg, err, out);
	return handle_event(r,
			    ob_mapper_map_text_row(&r->mapper, &row, msg->data_start,
						   r->txn_commit_us / 1000, &r->ev),
			    msg->data_start, out);
}

/* One pgoutput message (pgoutput.h). */
static bool
handle_pgoutput(relay *r, const ob_pgrepl_msg *msg, outcome *out)
{
	const ob_pgo_msg *m = &r->pgo;
	char err[256];

	if (!ob_pgo_parse(msg->data, msg->len, &r->pgo, err, sizeof(err)))
		return handle_unparsable(r, msg, err, out);
	switch (m->kind) {
	case OB_PGO_BEGIN:
		/* Begin tells where the commit record starts (which places
		 * the transaction), Commit where it ends (what it confirms). */
		return handle_begin(r, m->commit_lsn, m->commit_us, out);
	case OB_PGO_COMMIT:
		if (r->replay.in_txn)
			commit_txn(r, m->end_lsn);
		return true;
	case OB_PGO_RELATION:
		if (ob_pgo_relcache_put(&r->relcache, msg->data, msg->len, err, sizeof(err)))
			return true;
		/* Every row of the table would be unreadable. */
		log_at(OB_LOG_ERROR, msg->data_start, NULL, 0,
		       "could not read a pgoutput Relation message: %s; stopping", err);
		*out = OUTCOME_HALT;
		return false;
	case OB_PGO_INSERT:
		return handle_pgoutput_insert(r, msg, out);
	case OB_PGO_MESSAGE: {
		ob_logical_message lm = {
		    .lsn = m->message_lsn,
		    .transactional = m->transactional,
		    .prefix = m->prefix,
		    .content = m->content,
		    .content_len = m->content_len,
		};

		return handle_message(r, &lm, out);
	}
	case OB_PGO_OTHER:
		break;
	}
	return true;
}

static bool
handle_xlog(relay *r, const ob_pgrepl_msg *msg, outcome *out)
{
	if (msg->data_start > r->received)
		r->received = msg->data_start;
	if (r->cfg->pg.plugin == OB_PLUGIN_PGOUTPUT)
		return handle_pgoutput(r, msg, out);
	return handle_wal2json(r, msg, out);
}

/* pgoutput decodes each change with the publication of its time: rows
 * written while it left the outbox's inserts out are never sent. Nothing
 * after the last position it was seen unchanged at is confirmed. */
static void
log_publication_changed(relay *r)
{
	log_at(OB_LOG_ERROR, confirmable(r), NULL, 0,
	       "publication %s changed while outboxd streamed it (now: %s; was: %s): rows "
	       "written after " OB_LSN_FMT " may not have been sent by Postgres; stopping "
	       "without confirming past it. Restore the publication, then drop the slot "
	       "(\"outboxd slot drop\") and start outboxd with outbox.backlog_where to publish "
	       "the rows written since then",
	       r->cfg->pg.publication, r->latest.stamp, r->tables.stamp, OB_LSN_ARGS(r->ceiling));
}

/* The set just read into r->latest: while the stream's tables are
 * unchanged, the ceiling moves up to its verified position; a leaf the
 * stream does not read ends the stream (false, *out set), and the next
 * stream reads it; a changed publication halts. */
static bool
take_latest(relay *r, outcome *out)
{
	if (strcmp(r->latest.stamp, r->tables.stamp) != 0) {
		log_publication_changed(r);
		*out = OUTCOME_HALT;
		return false;
	}
	if (ob_leafset_missing(&r->latest, &r->tables, NULL, 0) > 0) {
		*out = OUTCOME_REFILTER;
		return false;
	}
	if (r->latest.verified > r->ceiling)
		r->ceiling = r->latest.verified;
	return true;
}

/* Read the stream's tables again when due (take_latest()): while they are
 * unchanged, the ceiling moves up to their verified position; a leaf the
 * stream does not read ends the stream (false, *out set), and the next
 * stream reads it; a changed publication halts. A failed read ends the
 * stream (back off, then reconnect): nothing past the ceiling could be
 * confirmed meanwhile, and a server shutting down, which refuses the
 * read's connection, waits for its walsenders to be confirmed up to the
 * end of the WAL before it stops. */
static bool
watch_tables(relay *r, outcome *out)
{
	if (!ob_partwatch_poll(&r->watch, &r->latest)) {
		if (!ob_partwatch_failing(&r->watch))
			return true;
		*out = OUTCOME_RETRY;
		return false;
	}
	ob_slotwatch_poll(&r->slots, r->watch.conn, r->cfg, r->wal_end);
	return take_latest(r, out);
}

/* With wal2json and a partitioned table, the events of a unit are handed
 * over only once the stream's leaves are verified past it: a transaction
 * before it may have written into a partition the stream does not read
 * yet, and reading the slot again for that partition after this unit was
 * published would publish the earlier transaction's events after this
 * one's (per key, first deliveries in commit order). Reads the set now,
 * and again every few milliseconds while a commit before the unit is not
 * visible yet. False with *out set when the stream must end. */
static bool
cover_unit(relay *r, outcome *out)
{
	char err[512];

	if (r->cfg->pg.plugin != OB_PLUGIN_WAL2JSON || !r->tables.partitioned)
		return true;
	while (r->replay.unit > ob_pos_bound(r->ceiling)) {
		if (ob_signals_stop_requested()) {
			*out = OUTCOME_STOP;
			return false;
		}
		if (!ob_partwatch_read(&r->watch, &r->latest, err, sizeof(err))) {
			ob_warn("could not read the partitions of %s.%s: %s", r->cfg->outbox.schema,
				r->cfg->outbox.table_name, err);
			ob_partwatch_close(&r->watch);
			*out = OUTCOME_RETRY;
			return false;
		}
		if (!take_latest(r, out))
			return false;
		if (r->replay.unit > ob_pos_bound(r->ceiling) && !serve_producer(r, 5, out))
			return false;
	}
	return true;
}

/* Read the stream until something ends it. */
static outcome
stream(relay *r)
{
	outcome out = OUTCOME_STOP;

	for (;;) {
		struct pollfd fds[2];
		int64_t wait_ms;

		report_alive(r, true);
		if (ob_signals_stop_requested())
			return OUTCOME_STOP;
		if (!serve_producer(r, 0, &out) || !watch_tables(r, &out))
			return out;

		/* Read what is there, up to READ_BATCH records; drained says
		 * whether libpq's buffer is empty, so poll() may wait. */
		bool drained = false, nap;
		int n;

		for (n = 0; n < READ_BATCH && !ob_signals_stop_requested(); n++) {
			ob_pgrepl_msg msg;
			ob_read_result rr = ob_pgrepl_read(r->pg, &msg);

			if (rr == OB_READ_NONE) {
				drained = true;
				break;
			}
			if (rr == OB_READ_ERROR)
				return OUTCOME_LOST;
			if (msg.wal_end > r->wal_end)
				r->wal_end = msg.wal_end;
			if (msg.keepalive) {
				if (!r->replay.in_txn)
					ob_acktrack_keepalive(&r->ack, msg.wal_end);
				if (msg.reply_requested)
					r->reply_due = true;
			} else if (!handle_xlog(r, &msg, &out)) {
				return out;
			}
		}
		if (!serve_producer(r, 0, &out))
			return out;
		if (!send_status(r, false))
			return OUTCOME_LOST;

		fds[0] = (struct pollfd){ob_pgrepl_socket(r->pg), POLLIN, 0};
		fds[1] = (struct pollfd){ob_producer_wake_fd(r->producer), POLLIN, 0};
		/* Acknowledgements wait on the verified position while the
		 * stream is idle: read the tables soon, not a second later. */
		if (drained && r->events_end > r->ceiling &&
		    ob_acktrack_confirmable(&r->ack) >= r->events_end)
			ob_partwatch_hurry(&r->watch, HURRIED_READ_MS);
		wait_ms = r->cfg->pg.status_interval_ms - (ob_mono_ms() - r->last_status_ms);
		if (confirmable(r) != r->sent_flush)
			wait_ms = STATUS_MIN_INTERVAL_MS;
		if (wait_ms > ob_partwatch_due_ms(&r->watch) - ob_mono_ms())
			wait_ms = ob_partwatch_due_ms(&r->watch) - ob_mono_ms();
		if (wait_ms > 1000)
			wait_ms = 1000;
		if (wait_ms < 0 || !drained)
			wait_ms = 0; /* records wait in libpq's buffer: no sleeping */
		/* Reading a backlog, the walsender sends faster than the
		 * events can wait for: rather than waking for each packet
		 * (and for each delivery report), nap and then read all that
		 * came meanwhile. Each wake-up costs more CPU than the events
		 * of one packet; the nap adds up to 4 ms to events already late by
		 * more than BEHIND_MS. A turn that read nothing (idle, or the
		 * backlog's end) sleeps as usual. */
		nap = drained && n > 0 && r->behind;
		if (nap && wait_ms > BACKLOG_NAP_MS)
			wait_ms = BACKLOG_NAP_MS;
		if (poll(fds, nap ? 0 : 2, (int)wait_ms) < 0 && errno != EINTR) {
			ob_error("could not poll: %s", strerror(errno));
			return OUTCOME_LOST;
		}
	}
}

/* Wait up to ms, serving delivery reports, with state on /readyz. False
 * when a stop was requested. A producer that fails meanwhile is noticed
 * by the next stream. */
static bool
pause_for(relay *r, int64_t ms, ob_ready_state state)
{
	int64_t deadline = ob_mono_ms() + ms;

	ob_metrics_set_ready(state);
	while (!ob_signals_stop_requested()) {
		int64_t left = deadline - ob_mono_ms();

		report_alive(r, false);
		if (left <= 0)
			return true;
		ob_producer_poll(r->producer, left < 100 ? (int)left : 100);
	}
	return false;
}

/* Leave the current connection; a transaction cut off in the middle is
 * remembered so its replay skips the events already handed over. */
static void
disconnect(relay *r, bool graceful)
{
	if (r->replay.in_txn && !r->replay.skip_txn && r->txn_tracked)
		ob_acktrack_abort(&r->ack, r->txn_seq);
	ob_replay_cut(&r->replay);
	ob_pgrepl_close(r->pg, graceful);
	r->pg = NULL;
	ob_partwatch_close(&r->watch);
	r->reply_due = false;
	ob_metrics_set_connected(false, ob_producer_connected(r->producer));
}

/* Keep the connection's last server error before the connection goes. */
static void
keep_error(relay *r)
{
	snprintf(r->err_state, sizeof(r->err_state), "%s", ob_pgrepl_error_state(r->pg));
	snprintf(r->err_msg, sizeof(r->err_msg), "%s", ob_pgrepl_error_message(r->pg));
}

/* Count the kept server error. Lost connections and server shutdowns
 * (SQLSTATE class 08, 57P01-57P03) never count; any other error met
 * REPEATED_ERROR_LIMIT times in a row with the stream no further on is
 * not going away: false, logged. */
static bool
note_server_error(relay *r)
{
	const char *s = r->err_state;

	if (s[0] == '\0' || strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 ||
	    strcmp(s, "57P02") == 0 || strcmp(s, "57P03") == 0) {
		r->err_repeats = 0;
		return true;
	}
	if (r->err_repeats > 0 && r->err_lsn == r->received)
		r->err_repeats++;
	else
		r->err_repeats = 1;
	r->err_lsn = r->received;
	if (r->err_repeats < REPEATED_ERROR_LIMIT)
		return true;
	log_at(OB_LOG_ERROR, r->received, NULL, 0,
	       "the server failed %d times in a row at " OB_LSN_FMT
	       " with the same error: %s (SQLSTATE %s); stopping: replication slot %s cannot "
	       "get past it",
	       r->err_repeats, OB_LSN_ARGS(r->received), r->err_msg, r->err_state, r->cfg->pg.slot);
	return false;
}

/* While a query waits for the server: stay alive, keep serving delivery
 * reports, and give up when asked to stop (after stopping_query_until). */
static bool
on_query_tick(void *ctx)
{
	relay *r = ctx;

	report_alive(r, r->streaming);
	if (r->producer != NULL)
		ob_producer_poll(r->producer, 0);
	return !ob_signals_stop_requested() || ob_mono_ms() < r->stopping_query_until;
}

/* The server must be the one streamed from before: the same system
 * (another one does not hold this slot's position, even if it has a slot
 * of that name). A new timeline is a promoted standby of the same system. */
static ob_pg_status
check_server(relay *r, ob_pg_system *sys)
{
	if (!ob_pgrepl_identify(r->pg, sys))
		return OB_PG_RETRY;
	if (!r->streamed)
		return OB_PG_OK;
	if (strcmp(sys->system_id, r->server.system_id) != 0) {
		ob_error("the server is a different system (system identifier %s, streamed from "
			 "%s before): it does not hold the position of replication slot %s, "
			 "confirmed up to " OB_LSN_FMT "; stopping. Point postgres.conninfo at the "
			 "original server, or create the slot on this one and republish the outbox "
			 "rows written since then",
			 sys->system_id, r->server.system_id, r->cfg->pg.slot,
			 OB_LSN_ARGS(confirmable(r)));
		return OB_PG_FATAL;
	}
	if (sys->timeline != r->server.timeline)
		ob_info("the server is on timeline %d now (was %d): a standby was promoted",
			sys->timeline, r->server.timeline);
	return OB_PG_OK;
}

/* Read the tables the stream will read (wal2json's add-tables: the
 * outbox table's leaf set, partitions.h) on the replication connection,
 * before it streams. When they include one the last stream did not read,
 * what that stream read after its ceiling may lack rows of it: the ack
 * tracker and the replay go back to that ceiling, so it is read and
 * handed over again (published twice where it was published already). */
static ob_pg_status
read_tables(relay *r)
{
	char err[512], added[512];
	bool ok;

	/* pgoutput's publication is never read on the replication
	 * connection (see check.c). */
	if (r->cfg->pg.plugin == OB_PLUGIN_PGOUTPUT)
		ok = ob_partwatch_read(&r->watch, &r->latest, err, sizeof(err));
	else
		ok = ob_partitions_read(r->pg, r->cfg, &r->latest, err, sizeof(err));
	if (!ok) {
		ob_error("could not read the %s of %s.%s: %s",
			 r->cfg->pg.plugin == OB_PLUGIN_PGOUTPUT ? "publication" : "partitions",
			 r->cfg->outbox.schema, r->cfg->outbox.table_name, err);
		ob_partwatch_close(&r->watch);
		return OB_PG_RETRY;
	}
	if (r->have_tables && strcmp(r->latest.stamp, r->tables.stamp) != 0) {
		log_publication_changed(r);
		return OB_PG_FATAL;
	}
	if (r->have_tables &&
	    ob_leafset_missing(&r->latest, &r->tables, added, sizeof(added)) > 0) {
		ob_acktrack_rewind(&r->ack, r->ceiling);
		ob_replay_rewind(&r->replay, r->ceiling);
		log_at(OB_LOG_INFO, confirmable(r), NULL, 0,
		       "new partitions of %s.%s: %s; reading the slot again from " OB_LSN_FMT
		       " with them (events committed after it are published again)",
		       r->cfg->outbox.schema, r->cfg->outbox.table_name, added,
		       OB_LSN_ARGS(confirmable(r)));
	}
	ob_leafset_swap(&r->tables, &r->latest);
	r->have_tables = true;
	/* A read that verified no position (a commit not visible yet) leaves
	 * the ceiling where the stream starts. */
	r->ceiling =
	    r->tables.verified != 0 ? r->tables.verified : ob_acktrack_confirmable(&r->ack);
	if (r->tables.partitioned)
		ob_debug("streaming %zu tables of partitioned %s.%s (verified at " OB_LSN_FMT ")",
			 r->tables.len, r->cfg->outbox.schema, r->cfg->outbox.table_name,
			 OB_LSN_ARGS(r->tables.verified));
	return OB_PG_OK;
}

/* Connect, check, take the slot and start streaming. */
static ob_pg_status
connect_stream(relay *r)
{
	ob_pg_status st = ob_pgrepl_connect(r->cfg, &r->pg);
	ob_pg_system sys;
	ob_lsn start;

	r->err_state[0] = '\0';
	if (st != OB_PG_OK)
		return st;
	ob_pgrepl_set_tick(r->pg, on_query_tick, r);
	st = check_server(r, &sys);
	if (st == OB_PG_OK)
		st = ob_check_database(r->pg, r->cfg, NULL);
	if (st == OB_PG_OK)
		st = read_tables(r);
	start = confirmable(r);
	if (st == OB_PG_OK)
		st = ob_pgrepl_prepare_slot(r->pg, r->cfg, r->streamed, start);
	if (st == OB_PG_OK)
		st = ob_pgrepl_start(r->pg, r->cfg, start, &r->tables);
	if (st != OB_PG_OK) {
		keep_error(r);
		ob_pgrepl_close(r->pg, false);
		r->pg = NULL;
		ob_partwatch_close(&r->watch); /* opened by read_tables() with pgoutput */
		return st;
	}
	r->streamed = true;
	r->server = sys;
	ob_pgo_relcache_clear(&r->relcache); /* a new session describes them again */
	r->sent_flush = 0;
	r->last_status_ms = 0;
	return OB_PG_OK;
}

/* Log the backlog's progress (rows handed over, their rate, what the
 * planner's estimate leaves) and tell systemd. */
static void
log_backlog_progress(int64_t started_ms, uint64_t rows, int64_t estimate)
{
	double secs = (double)(ob_mono_ms() - started_ms) / 1000.0;
	long long left = estimate > (int64_t)rows ? (long long)(estimate - (int64_t)rows) : 0;
	char status[128];

	ob_info("backlog: %llu rows handed to the producer in %.1f s (%.0f rows/s), about %lld "
		"left",
		(unsigned long long)rows, secs, secs > 0 ? (double)rows / secs : 0.0, left);
	snprintf(status, sizeof(status), "publishing the backlog: %llu rows, about %lld left",
		 (unsigned long long)rows, left);
	ob_notify_status(status);
}

/* End the backlog's transaction, published whole or not. Its ack tracker
 * entry confirms no WAL position: the slot it would end at may never be
 * created (a crash, or another process creating the slot first), and the
 * stream starts at the slot's own confirmed position; its events still
 * count until acknowledged. Nothing is handed over before the first
 * stream but the backlog, and a backlog read again is read from a new
 * snapshot, of which nothing may be skipped: replay starts from nothing
 * (keeping its suspects). */
static void
end_backlog_txn(relay *r)
{
	if (r->replay.in_txn && r->txn_tracked)
		ob_acktrack_abort(&r->ack, r->txn_seq);
	ob_replay_reset(&r->replay, 0);
}

/* A backlog status other than OB_PG_OK: false with *out set (a refused
 * predicate or order is a configuration error, logged here). */
static bool
backlog_failed(ob_backlog *b, ob_pg_status st, outcome *out)
{
	if (st == OB_PG_FATAL) {
		ob_error("%s; stopping: no slot was created", ob_backlog_error(b));
		*out = OUTCOME_CONFIG;
	} else {
		*out = ob_signals_stop_requested() ? OUTCOME_STOP : OUTCOME_RETRY;
	}
	return false;
}

/* Publish every row of the backlog as one transaction known by the
 * temporary slot's consistent point, and wait until the broker has
 * acknowledged all of them (or their dead-letter records). The producer's
 * backpressure applies: no row is read while its queue is full. False with
 * *out set when the relay must stop trying. */
static bool
publish_rows(relay *r, ob_backlog *b, ob_lsn consistent, outcome *out)
{
	int64_t started = ob_mono_ms(), last_log = started, now_us = ob_now_us();
	int64_t estimate = ob_backlog_estimate(b);
	uint64_t rows = 0;
	const ob_text_row *row;
	ob_pg_status st;
	bool ok = false;

	ob_info("publishing the backlog: outbox rows where %s (about %lld rows), then streaming "
		"from " OB_LSN_FMT,
		r->cfg->outbox.backlog_where, (long long)estimate, OB_LSN_ARGS(consistent));
	ob_metrics_set_ready(OB_READY_BACKLOG);
	ob_notify_status("publishing the backlog");
	r->backlog_running = true;
	begin_txn(r, ob_pos_backlog(consistent), now_us);
	while ((st = ob_backlog_next(b, &row)) == OB_PG_OK && row != NULL) {
		ob_map_result mr =
		    ob_mapper_map_text_row(&r->mapper, row, consistent, now_us / 1000, &r->ev);

		if (!handle_event(r, mr, consistent, out))
			goto done;
		if (++rows % 1000 != 0)
			continue;
		if (ob_signals_stop_requested()) {
			*out = OUTCOME_STOP;
			goto done;
		}
		if (!serve_producer(r, 0, out))
			goto done;
		report_alive(r, false);
		if (ob_mono_ms() - last_log >= BACKLOG_LOG_INTERVAL_MS) {
			log_backlog_progress(started, rows, estimate);
			last_log = ob_mono_ms();
		}
	}
	if (st != OB_PG_OK)
		ok = backlog_failed(b, st, out);
	else
		ok = settle(r, out);
	if (ok)
		ob_info("backlog published: %llu rows acknowledged in %.1f s",
			(unsigned long long)rows, (double)(ob_mono_ms() - started) / 1000.0);
done:
	end_backlog_txn(r);
	r->backlog_running = false;
	return ok;
}

static int64_t
doubled(int64_t backoff, int64_t max)
{
	return backoff * 2 > max ? max : backoff * 2;
}

/* One attempt at copying the temporary slot tmp_slot into the permanent
 * one, on a plain connection of its own: any error on the replication
 * connection that holds tmp_slot would drop it (a walsender drops its
 * temporary slots on every error). */
static ob_pg_status
copy_once(relay *r, const char *tmp_slot)
{
	ob_pgrepl *p;
	ob_pg_status st = ob_pgrepl_connect_plain(r->cfg, &p);

	if (st != OB_PG_OK)
		return st;
	ob_pgrepl_set_tick(p, on_query_tick, r);
	st = ob_pgrepl_copy_slot(p, tmp_slot, r->cfg->pg.slot);
	/* A row not written now is written when the stream takes the slot. */
	if (st == OB_PG_OK && !ob_slotmark_write(p, r->cfg))
		ob_info("the slot's marker row is written on the next connection");
	ob_pgrepl_close(p, false);
	return st;
}

/* Copy the temporary slot tmp_slot, held by the replication connection
 * tmp, into the permanent slot once the backlog is acknowledged. A failed
 * copy (no slot free, say) is tried again with backoff while the
 * temporary slot exists, so the backlog is not published again for it;
 * once it is gone (its connection dropped), the next attempt publishes the
 * backlog again. When another process created the slot meanwhile, true
 * with *created false: the stream starts at that slot's own position.
 * False with *out set otherwise. */
static bool
copy_slot(relay *r, ob_pgrepl *tmp, const char *tmp_slot, ob_lsn consistent, bool *created,
	  outcome *out)
{
	int64_t backoff = BACKOFF_START_MS;
	ob_slot_info info;
	ob_pg_status st;

	while ((st = copy_once(r, tmp_slot)) == OB_PG_RETRY) {
		/* A query that succeeds leaves tmp's temporary slot alone. */
		if (!ob_pgrepl_slot_info(tmp, tmp_slot, &info) || !info.exists) {
			ob_warn(
			    "the temporary slot %s is gone; the backlog will be published again",
			    tmp_slot);
			*out = OUTCOME_RETRY;
			return false;
		}
		ob_info("retrying the copy in %lld ms; the backlog is acknowledged and is "
			"published again only if outboxd stops before the copy succeeds",
			(long long)backoff);
		if (!pause_for(r, backoff, OB_READY_BACKLOG)) {
			*out = OUTCOME_STOP;
			return false;
		}
		backoff = doubled(backoff, r->cfg->pg.reconnect_max_backoff_ms);
	}
	*created = st == OB_PG_OK;
	if (*created)
		log_at(OB_LOG_INFO, consistent, NULL, 0,
		       "created replication slot %s with plugin wal2json at " OB_LSN_FMT
		       ", where the backlog ends",
		       r->cfg->pg.slot, OB_LSN_ARGS(consistent));
	return true;
}

/* The slot is missing and the backlog is about to be published: when its
 * marker says it was lost (slotmark.h), the backlog is the operator's
 * recovery, said in the log; the marker's table must be writable before
 * any slot is made. Nothing of this on a hot standby. */
static ob_pg_status
lost_slot_recovery(relay *r, ob_pgrepl *p)
{
	char since[64];
	bool marked, standby;
	ob_pg_status st;

	if (!ob_pgrepl_in_recovery(p, &standby))
		return OB_PG_RETRY;
	if (standby)
		return OB_PG_OK;
	if ((st = ob_slotmark_ready(p, r->cfg)) != OB_PG_OK ||
	    (st = ob_slotmark_read(p, r->cfg, &marked, since, sizeof(since))) != OB_PG_OK)
		return st;
	if (marked)
		ob_warn("replication slot %s was lost (outboxd created it at %s): publishing the "
			"outbox rows of outbox.backlog_where \"%s\" again before a new slot is "
			"made; rows outside it committed since the loss are not published",
			r->cfg->pg.slot, since, r->cfg->outbox.backlog_where);
	return OB_PG_OK;
}

/*
 * When the slot is missing and outboxd may create it, and backlog_where
 * is set: check the predicate (a refused one is a configuration error,
 * found before any slot exists), create a temporary slot exporting its
 * snapshot, publish the backlog read in that snapshot, and only then copy
 * the temporary slot into the permanent one. Until the copy nothing
 * outlives this process: a crash leaves no slot, and the next start
 * publishes the backlog again. *created says whether the slot was created
 * here; true also when there was nothing to do. False with *out set when
 * the connection attempt ends.
 */
static bool
publish_backlog(relay *r, bool *created, outcome *out)
{
	const ob_config *cfg = r->cfg;
	ob_pgrepl *tmp = NULL;
	ob_backlog *b = NULL;
	ob_slot_info info;
	ob_lsn consistent = 0;
	char tmp_slot[64], snapshot[128];
	ob_pg_status st;
	bool ok = false;

	*created = false;
	*out = OUTCOME_RETRY;
	if (ob_pgrepl_connect(cfg, &tmp) != OB_PG_OK)
		return false;
	ob_pgrepl_set_tick(tmp, on_query_tick, r);
	if (!ob_pgrepl_slot_info(tmp, cfg->pg.slot, &info))
		goto close;
	if (info.exists || (!cfg->pg.create_slot && !r->create_only)) {
		ok = true;
		goto close;
	}
	/* The table and its columns first, so a missing one is named as
	 * such (exit 1), not as a predicate the server refuses. */
	if ((st = ob_check_database(tmp, cfg, NULL)) != OB_PG_OK) {
		*out = st == OB_PG_FATAL ? OUTCOME_HALT : OUTCOME_RETRY;
		goto close;
	}
	if (ob_backlog_connect(cfg, on_query_tick, r, &b) != OB_PG_OK)
		goto close;
	if ((st = ob_backlog_verify(b)) != OB_PG_OK) {
		ok = backlog_failed(b, st, out);
		goto close;
	}
	if ((st = lost_slot_recovery(r, tmp)) != OB_PG_OK) {
		*out = st == OB_PG_FATAL ? OUTCOME_HALT : OUTCOME_RETRY;
		goto close;
	}
	snprintf(tmp_slot, sizeof(tmp_slot), "%.40s_backlog_%d", cfg->pg.slot, (int)getpid());
	switch (ob_pgrepl_create_exported_slot(tmp, tmp_slot, cfg->pg.plugin, &consistent, snapshot,
					       sizeof(snapshot))) {
	case OB_PG_OK:
		break;
	case OB_PG_FATAL:
		*out = OUTCOME_HALT;
		goto close;
	case OB_PG_RETRY:
	case OB_PG_STANDBY:
		goto close;
	}
	/* Suspects of an earlier attempt are known by its consistent point. */
	if (r->backlog_end != 0 && r->backlog_end != consistent)
		ob_replay_rebase(&r->replay, ob_pos_backlog(r->backlog_end),
				 ob_pos_backlog(consistent));
	r->backlog_end = consistent;
	if ((st = ob_backlog_start(b, snapshot)) != OB_PG_OK) {
		ok = backlog_failed(b, st, out);
		goto close;
	}
	ok = publish_rows(r, b, consistent, out);
	ob_backlog_close(b); /* its snapshot is no longer needed */
	b = NULL;
	if (ok)
		ok = copy_slot(r, tmp, tmp_slot, consistent, created, out);
close:
	ob_backlog_close(b);
	ob_pgrepl_close(tmp, false);
	return ok;
}

/* One replication connection, from connecting to what ended it. */
static outcome
run_connection(relay *r)
{
	outcome out;
	bool created;

	if (!r->streamed && (r->cfg->outbox.backlog_where[0] != '\0' || r->create_only)) {
		if (!publish_backlog(r, &created, &out))
			return out;
		if (r->create_only) {
			r->slot_created = created;
			if (!created)
				ob_error("replication slot %s already exists", r->cfg->pg.slot);
			return created ? OUTCOME_STOP : OUTCOME_HALT;
		}
	}
	switch (connect_stream(r)) {
	case OB_PG_OK:
		break;
	case OB_PG_RETRY:
		return note_server_error(r) ? OUTCOME_RETRY : OUTCOME_HALT;
	case OB_PG_STANDBY:
		return OUTCOME_STANDBY;
	case OB_PG_FATAL:
		return OUTCOME_HALT;
	}
	ob_metrics_set_ready(OB_READY_STREAMING);
	ob_notify_ready("streaming");
	r->streaming = true;
	out = stream(r);
	r->streaming = false;
	if (out == OUTCOME_REFILTER) {
		/* Confirm what may be before the next stream reads more. */
		if (!send_status(r, true))
			out = OUTCOME_LOST;
		disconnect(r, out == OUTCOME_REFILTER);
	}
	if (out == OUTCOME_RETRY)
		disconnect(r, false); /* the stream's tables could not be read */
	if (out == OUTCOME_LOST || out == OUTCOME_REPRODUCE) {
		keep_error(r);
		disconnect(r, false);
		if (out == OUTCOME_LOST && !note_server_error(r))
			out = OUTCOME_HALT;
	}
	return out;
}

/* Recreate the producer: everything not confirmed is read again from the
 * slot (at-least-once), suspects of refused batches are then produced
 * alone. */
static bool
reproduce(relay *r)
{
	const char *why = r->reproduce_why;
	char reason[512];

	if (why[0] == '\0')
		(void)ob_producer_failed(r->producer, &why);
	snprintf(reason, sizeof(reason), "%s", why); /* why dies with the producer */
	ob_warn("recreating the kafka producer (%s); re-reading the slot from " OB_LSN_FMT, reason,
		OB_LSN_ARGS(confirmable(r)));
	ob_producer_free(r->producer); /* serves the reports already waiting */
	r->producer = NULL;
	ob_acktrack_reset(&r->ack);
	ob_dlqueue_clear(&r->refused);
	ob_replay_reset(&r->replay, ob_acktrack_confirmable(&r->ack));
	r->reproduce_why[0] = '\0';
	ob_metrics_reconnect(OB_TARGET_KAFKA);
	return ob_producer_new(r->cfg, OB_PRODUCER_PIPELINED, on_delivery, r, &r->producer);
}

/* Read the stream's tables once more before the last confirmation, so
 * that it goes as far as the acknowledgements do rather than to the
 * verified position of up to a second ago (a set that changed leaves the
 * ceiling where it is). False when the publication changed (logged). */
static bool
final_read(relay *r)
{
	outcome out = OUTCOME_STOP;
	char err[512];
	bool ok = true;

	r->stopping_query_until = ob_mono_ms() + FINAL_READ_MS;
	if (ob_partwatch_read(&r->watch, &r->latest, err, sizeof(err)))
		ok = take_latest(r, &out) || out != OUTCOME_HALT;
	r->stopping_query_until = 0;
	return ok;
}

/* Stop: flush what is in flight (bounded), confirm it, close. False when
 * a record met during the flush needs an operator (exit 1). */
static bool
shut_down(relay *r)
{
	int64_t deadline = ob_mono_ms() + SHUTDOWN_FLUSH_MS;
	outcome out = OUTCOME_STOP;

	ob_notify_stopping();
	/* Nothing to say after a start that never streamed (a refusal at
	 * start-up, slot create). */
	if (ob_acktrack_inflight(&r->ack) > 0)
		ob_info("stopping: flushing %llu in-flight events",
			(unsigned long long)ob_acktrack_inflight(&r->ack));
	else if (r->pg != NULL)
		ob_info("stopping");
	while (r->producer != NULL && ob_acktrack_inflight(&r->ack) > 0 &&
	       ob_mono_ms() < deadline) {
		report_alive(r, r->pg != NULL);
		if (!serve_producer(r, 100, &out))
			break;
		if (r->pg != NULL && !send_status(r, false))
			disconnect(r, false);
	}
	if (ob_acktrack_inflight(&r->ack) > 0)
		ob_warn("%llu events were not acknowledged in time; they will be published "
			"again on restart",
			(unsigned long long)ob_acktrack_inflight(&r->ack));
	if (r->pg != NULL) {
		if (!final_read(r))
			out = OUTCOME_HALT;
		if (!send_status(r, true))
			ob_warn("could not confirm the final position");
		else
			log_at(OB_LOG_INFO, r->sent_flush, NULL, 0, "confirmed " OB_LSN_FMT,
			       OB_LSN_ARGS(r->sent_flush));
		disconnect(r, true);
	}
	return out != OUTCOME_HALT;
}

static void
relay_init(relay *r, const ob_config *cfg)
{
	memset(r, 0, sizeof(*r));
	r->cfg = cfg;
	ob_dlqueue_init(&r->refused);
	ob_mapper_init(&r->mapper, cfg);
	ob_acktrack_init(&r->ack, 0);
	ob_replay_init(&r->replay);
	ob_pgo_relcache_init(&r->relcache);
	ob_event_init(&r->ev);
	ob_event_init(&r->dlq_ev);
	ob_event_init(&r->small_ev);
	ob_leafset_init(&r->tables);
	ob_leafset_init(&r->latest);
	r->ceiling = NO_CEILING;
	ob_partwatch_init(&r->watch, cfg, on_query_tick, r);
	ob_slotwatch_init(&r->slots);
	r->backoff = BACKOFF_START_MS;
	r->reproduce_backoff = BACKOFF_START_MS;
	r->last_reproduced = (ob_lsn)-1;
	r->last_standby_log = -STANDBY_LOG_INTERVAL_MS;
}

static void
relay_free(relay *r)
{
	ob_dlqueue_clear(&r->refused);
	ob_producer_free(r->producer);
	ob_event_free(&r->ev);
	ob_event_free(&r->dlq_ev);
	ob_event_free(&r->small_ev);
	ob_mapper_free(&r->mapper);
	ob_replay_free(&r->replay);
	ob_pgo_relcache_free(&r->relcache);
	ob_acktrack_free(&r->ack);
	ob_partwatch_close(&r->watch);
	ob_leafset_free(&r->tables);
	ob_leafset_free(&r->latest);
}

/* The slot is active in another process: say so (at most every
 * STANDBY_LOG_INTERVAL_MS) and wait standby_retry_ms. False when a stop
 * was requested meanwhile. */
static bool
wait_as_standby(relay *r)
{
	r->err_repeats = 0; /* losing a race for the slot is no server error */
	ob_metrics_set_connected(false, ob_producer_connected(r->producer));
	if (ob_mono_ms() - r->last_standby_log >= STANDBY_LOG_INTERVAL_MS) {
		ob_info("replication slot %s is active in another process; waiting as a standby, "
			"retrying every %d ms",
			r->cfg->pg.slot, r->cfg->pg.standby_retry_ms);
		r->last_standby_log = ob_mono_ms();
	}
	ob_notify_ready("standby");
	return pause_for(r, r->cfg->pg.standby_retry_ms, OB_READY_STANDBY);
}

/* A fresh producer was made: when the last one failed with the slot no
 * further on (the cluster is down, a topic is unknown or not authorized),
 * wait before reading again, at a growing interval. False when a stop was
 * requested meanwhile. */
static bool
wait_after_reproduce(relay *r)
{
	ob_lsn confirmable = ob_acktrack_confirmable(&r->ack);
	bool running;

	if (confirmable != r->last_reproduced) {
		r->last_reproduced = confirmable;
		r->reproduce_backoff = BACKOFF_START_MS;
		return true;
	}
	r->kafka_failing = true;
	ob_info("kafka producer failed again; retrying in %lld ms",
		(long long)r->reproduce_backoff);
	running = pause_for(r, r->reproduce_backoff, OB_READY_KAFKA_DOWN);
	r->reproduce_backoff = doubled(r->reproduce_backoff, r->cfg->pg.reconnect_max_backoff_ms);
	return running;
}

/* The relay's body: stream (or, with create_only, create the slot with
 * its backlog) until a stop; returns the exit code. */
static int
relay_main(const ob_config *cfg, bool create_only)
{
	relay r;
	int exit_code = 0;
	bool running = true;

	relay_init(&r, cfg);
	r.create_only = create_only;
	ob_signals_install();
	ob_notify_init();
	ob_metrics_set_ready(OB_READY_CONNECTING);
	if (!ob_producer_new(cfg, OB_PRODUCER_PIPELINED, on_delivery, &r, &r.producer)) {
		exit_code = 2;
		goto out;
	}

	while (running && !ob_signals_stop_requested()) {
		switch (run_connection(&r)) {
		case OUTCOME_STOP:
			running = false;
			break;
		case OUTCOME_HALT:
			exit_code = 1;
			running = false;
			break;
		case OUTCOME_CONFIG:
			exit_code = 2;
			running = false;
			break;
		case OUTCOME_LOST:
			r.backoff = BACKOFF_START_MS;
			ob_metrics_set_ready(OB_READY_CONNECTING);
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			break;
		case OUTCOME_RETRY:
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			ob_info("retrying in %lld ms", (long long)r.backoff);
			running = pause_for(&r, r.backoff, OB_READY_CONNECTING);
			r.backoff = doubled(r.backoff, cfg->pg.reconnect_max_backoff_ms);
			break;
		case OUTCOME_STANDBY:
			running = wait_as_standby(&r);
			break;
		case OUTCOME_REFILTER:
			break; /* the next stream reads the new partitions */
		case OUTCOME_REPRODUCE:
			if (!reproduce(&r)) {
				exit_code = 1; /* the same settings worked at start */
				running = false;
				break;
			}
			running = wait_after_reproduce(&r);
			break;
		}
	}
	if (!shut_down(&r))
		exit_code = 1;

out:
	/* `slot create` succeeds only once the backlog is acknowledged. */
	if (create_only && !r.slot_created && exit_code == 0)
		exit_code = 1;
	relay_free(&r);
	ob_info("outboxd stopped (exit code %d)", exit_code);
	return exit_code;
}

int
ob_relay_run(const ob_config *cfg)
{
	return relay_main(cfg, false);
}

int
ob_relay_create_slot(const ob_config *cfg)
{
	return relay_main(cfg, true);
}
