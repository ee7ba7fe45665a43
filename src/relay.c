/*
 * relay.c: the loop between the slot and the producer (DESIGN.md §1).
 *
 * State that outlives one Postgres connection lives in the relay struct:
 * the producer, the ack tracker, and how far transactions were handed to
 * the producer (handed_lsn), so a reconnect inside one process skips what
 * was already produced instead of producing it twice.
 *
 * The flow of one connection: connect, check the database (wal_level,
 * table, columns), prepare the slot (or wait as a standby), START_REPLICATION
 * from the confirmable LSN, then turn the loop in stream() until the stream
 * breaks, the producer fails, a bad event halts us, or a signal asks us to
 * stop.
 */
#include "outboxd/relay.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outboxd/acktrack.h"
#include "outboxd/check.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/notify.h"
#include "outboxd/outbox.h"
#include "outboxd/pgrepl.h"
#include "outboxd/producer.h"
#include "outboxd/wal2json.h"

/* How long SIGTERM waits for in-flight events before giving up. */
#define SHUTDOWN_FLUSH_MS       30000
/* The fastest pace of status updates sent because the position moved. */
#define STATUS_MIN_INTERVAL_MS  20
/* Records read per loop turn before serving delivery reports again. */
#define READ_BATCH              2000
/* First reconnect delay; doubles up to reconnect_max_backoff_ms. */
#define BACKOFF_START_MS        100
/* How often a standby says it is still waiting. */
#define STANDBY_LOG_INTERVAL_MS 60000

/* Tags carried by records through the producer: the transaction's
 * sequence number shifted left, and a bit for dead-letter records. */
#define TAG_DLQ       1u
#define TAG(seq, dlq) (((seq) << 1) | ((dlq) ? TAG_DLQ : 0u))

static volatile sig_atomic_t stop_requested;

typedef enum outcome {
	OUTCOME_STOP,            /* a signal asked us to stop */
	OUTCOME_PG_LOST,         /* reconnect to Postgres */
	OUTCOME_PRODUCER_FAILED, /* recreate the producer, re-read from confirmed */
	OUTCOME_HALT,            /* exit 1: an operator must look */
} outcome;

/* A record the broker refused for good, waiting to be dead-lettered. */
typedef struct refused {
	struct refused *next;
	uint64_t seq;
	ob_event dlq; /* the dead-letter record, built in the callback */
} refused;

typedef struct relay {
	const ob_config *cfg;
	ob_mapper mapper;
	ob_acktrack ack;
	ob_producer *producer;
	ob_pgrepl *pg;
	ob_event ev;       /* the event being mapped, reused */
	ob_event dlq_ev;   /* a dead-letter record being built, reused */
	ob_w2j_record rec; /* points into the message being handled */

	/* The transaction being read. */
	bool in_txn;
	bool txn_skip; /* already handed over before a reconnect */
	uint64_t txn_seq;
	ob_lsn txn_end;
	int64_t txn_commit_us;
	bool txn_tracked;     /* it has an entry in the ack tracker (txn_seq) */
	uint64_t txn_events;  /* events of it handed over (or skipped as such) */
	uint64_t replay_skip; /* events still to skip of a replayed cut-off txn */

	/* How far the producer got, across reconnects. */
	ob_lsn handed_lsn;       /* end LSN of the last transaction handed over whole */
	ob_lsn partial_lsn;      /* a transaction cut off by a broken stream ... */
	uint64_t partial_events; /* ... and how many of its events were handed */

	ob_lsn received;
	ob_lsn wal_end;
	ob_lsn sent_flush;
	int64_t last_status_ms;
	bool reply_due;

	refused *refused_head;
	refused **refused_tail;
	bool draining; /* drain_refused() is running: do not re-enter it */
	bool halt;
} relay;

static void
on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void
install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

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

/* Delivery report callback (runs inside ob_producer_poll). */
static void
on_delivery(void *ctx, const ob_delivery *d)
{
	relay *r = ctx;
	uint64_t seq = d->tag >> 1;
	bool is_dlq = (d->tag & TAG_DLQ) != 0;
	ob_lsn end_lsn = 0;
	int64_t commit_us = 0;
	const char *failed_why;

	if (!ob_acktrack_txn_info(&r->ack, seq, &end_lsn, &commit_us))
		return; /* a report from a producer we dropped */
	if (d->ok) {
		double latency = (double)(ob_now_us() - commit_us) / 1e6;

		ob_metrics_published(d->record.topic, d->record.topic_len,
				     latency > 0 ? latency : 0);
		ob_acktrack_ack(&r->ack, seq);
		return;
	}
	if (ob_producer_failed(r->producer, &failed_why))
		return; /* the producer's fault: re-read from the slot */
	if (is_dlq) {
		log_at(OB_LOG_ERROR, end_lsn, d->record.topic, d->record.topic_len,
		       "could not publish dead-letter record to %.*s: %s; stopping without "
		       "confirming " OB_LSN_FMT,
		       (int)d->record.topic_len, d->record.topic, d->error, OB_LSN_ARGS(end_lsn));
		r->halt = true;
		return;
	}
	if (r->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
		log_at(OB_LOG_ERROR, end_lsn, d->record.topic, d->record.topic_len,
		       "broker refused a record for %.*s: %s; on_bad_event = halt: stopping "
		       "without confirming " OB_LSN_FMT,
		       (int)d->record.topic_len, d->record.topic, d->error, OB_LSN_ARGS(end_lsn));
		r->halt = true;
		return;
	}
	/* Dead-letter it after the poll returns (producing may need to wait
	 * for queue room, which cannot happen inside this callback). */
	refused *rf = ob_xcalloc(1, sizeof(*rf));
	char error[512];

	snprintf(error, sizeof(error), "broker refused the record for %.*s: %s",
		 (int)d->record.topic_len, d->record.topic, d->error);
	rf->seq = seq;
	ob_event_init(&rf->dlq);
	ob_event_build_dlq(&rf->dlq, r->cfg, d->value_too_large ? "too-large" : "refused", error,
			   end_lsn, &d->record, d->value_too_large);
	*r->refused_tail = rf;
	r->refused_tail = &rf->next;
}

static bool publish(relay *r, const ob_event *ev, uint64_t seq, outcome *out);

/* Dead-letter the records refused in delivery reports. Each keeps its
 * transaction unconfirmable until its dead-letter record is queued. While
 * one is waiting for queue room, reports keep being served, and may add
 * more refusals: those wait for this loop instead of re-entering it. */
static bool
drain_refused(relay *r, outcome *out)
{
	bool ok = true;

	if (r->draining)
		return true;
	r->draining = true;
	while (ok && r->refused_head != NULL) {
		refused *rf = r->refused_head;

		r->refused_head = rf->next;
		if (r->refused_head == NULL)
			r->refused_tail = &r->refused_head;
		ob_warn("dead-lettering record: reason=%s", rf->dlq.dlq_reason);
		ok = publish(r, &rf->dlq, rf->seq, out);
		if (!ok) {
			/* Keep it for the next try (after a reconnect). */
			rf->next = r->refused_head;
			r->refused_head = rf;
			if (rf->next == NULL)
				r->refused_tail = &rf->next;
			break;
		}
		ob_acktrack_ack(&r->ack, rf->seq); /* the refused original */
		ob_event_free(&rf->dlq);
		free(rf);
	}
	r->draining = false;
	return ok;
}

static void
drop_refused(relay *r)
{
	while (r->refused_head != NULL) {
		refused *rf = r->refused_head;

		r->refused_head = rf->next;
		ob_event_free(&rf->dlq);
		free(rf);
	}
	r->refused_tail = &r->refused_head;
}

/* Send a status update if one is due: always when forced or asked for,
 * at least every status_interval_ms, and when the confirmable position
 * moved, at most every STATUS_MIN_INTERVAL_MS. */
static bool
send_status(relay *r, bool force)
{
	ob_lsn flush = ob_acktrack_confirmable(&r->ack);
	int64_t now = ob_mono_ms();
	int64_t since = now - r->last_status_ms;
	bool due = force || r->reply_due || since >= r->cfg->pg.status_interval_ms ||
		   (flush != r->sent_flush && since >= STATUS_MIN_INTERVAL_MS);

	ob_metrics_set_lsns(flush, r->received, r->wal_end);
	ob_metrics_set_inflight(ob_acktrack_inflight(&r->ack));
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
		ob_metrics_set_ready(kafka ? OB_READY_STREAMING : OB_READY_KAFKA_DOWN);
	ob_metrics_set_connected(streaming, kafka);
}

/* Serve delivery reports and refused records; false with *out set when
 * the relay must leave the stream. */
static bool
serve_producer(relay *r, int timeout_ms, outcome *out)
{
	const char *why;

	ob_producer_poll(r->producer, timeout_ms);
	if (ob_producer_failed(r->producer, &why)) {
		*out = OUTCOME_PRODUCER_FAILED;
		return false;
	}
	if (r->halt) {
		*out = OUTCOME_HALT;
		return false;
	}
	return drain_refused(r, out);
}

/* Queue one record of transaction seq, waiting while the producer's queue
 * is full (the WAL is not read meanwhile: that is the backpressure). A
 * record refused at once is dead-lettered in its place. */
static bool
publish(relay *r, const ob_event *ev, uint64_t seq, outcome *out)
{
	bool is_dlq = ev->dlq_reason != NULL;
	bool too_large;
	const char *why;

	for (;;) {
		switch (ob_producer_send(r->producer, ev, TAG(seq, is_dlq), &why, &too_large)) {
		case OB_SEND_OK:
			ob_acktrack_add(&r->ack, seq);
			if (is_dlq)
				ob_metrics_dead_lettered(ev->dlq_reason);
			return true;
		case OB_SEND_QUEUE_FULL:
			if (stop_requested) {
				*out = OUTCOME_STOP;
				return false;
			}
			if (!serve_producer(r, 100, out))
				return false;
			if (!send_status(r, false)) {
				*out = OUTCOME_PG_LOST;
				return false;
			}
			report_alive(r, r->pg != NULL);
			break;
		case OB_SEND_REFUSED:
			if (is_dlq || r->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
				ob_error("could not publish %s record to %.*s: %s; stopping",
					 is_dlq ? "dead-letter" : "a", (int)ev->topic.len,
					 ob_event_ptr(ev, ev->topic), why);
				*out = OUTCOME_HALT;
				return false;
			} else {
				ob_record_view view;
				char error[512];

				snprintf(error, sizeof(error),
					 "producer refused the record for %.*s: %s",
					 (int)ev->topic.len, ob_event_ptr(ev, ev->topic), why);
				ob_event_view(ev, &view);
				ob_event_build_dlq(&r->dlq_ev, r->cfg,
						   too_large ? "too-large" : "refused", error,
						   r->txn_end, &view, too_large);
				ob_warn("dead-lettering record: %s", error);
				return publish(r, &r->dlq_ev, seq, out);
			}
		case OB_SEND_FATAL:
			*out = OUTCOME_PRODUCER_FAILED;
			return false;
		}
	}
}

/* Start reading a transaction, or mark it skipped when it was handed over
 * before a reconnect. It gets an ack tracker entry with its first event
 * only: the many transactions wal2json sends as bare B/C pairs (their
 * changes were all filtered out) cost no memory while events are in
 * flight. */
static void
begin_txn(relay *r, ob_lsn end_lsn, int64_t commit_us)
{
	r->in_txn = true;
	r->txn_end = end_lsn;
	r->txn_commit_us = commit_us;
	r->txn_events = 0;
	r->txn_tracked = false;
	r->txn_skip = end_lsn <= r->handed_lsn;
	r->replay_skip = 0;
	if (r->txn_skip) {
		log_at(OB_LOG_DEBUG, end_lsn, NULL, 0,
		       "skipping transaction " OB_LSN_FMT ": already handed to the producer",
		       OB_LSN_ARGS(end_lsn));
		return;
	}
	if (end_lsn == r->partial_lsn)
		r->replay_skip = r->partial_events;
}

/* The open transaction's ack tracker entry, opened on first use. */
static uint64_t
txn_seq(relay *r)
{
	if (!r->txn_tracked) {
		r->txn_seq = ob_acktrack_begin(&r->ack, r->txn_end, r->txn_commit_us);
		r->txn_tracked = true;
	}
	return r->txn_seq;
}

static void
commit_txn(relay *r)
{
	r->in_txn = false;
	if (r->txn_skip)
		return;
	if (r->txn_tracked)
		ob_acktrack_commit(&r->ack, r->txn_seq);
	else
		ob_acktrack_empty(&r->ack, r->txn_end);
	r->handed_lsn = r->txn_end;
	ob_metrics_transaction();
}

/* Handle one event (or dead-letter record) of the open transaction. */
static bool
handle_event(relay *r, ob_map_result mr, ob_lsn lsn, outcome *out)
{
	if (mr == OB_MAP_SKIP || r->txn_skip)
		return true;
	if (r->replay_skip > 0) {
		r->replay_skip--; /* produced before the stream broke */
		r->txn_events++;
		return true;
	}
	if (mr == OB_MAP_DLQ) {
		log_at(OB_LOG_WARNING, lsn, NULL, 0,
		       "bad event at " OB_LSN_FMT ": %.*s (reason %s)", OB_LSN_ARGS(lsn),
		       (int)r->ev.headers[0].value.len,
		       ob_event_ptr(&r->ev, r->ev.headers[0].value), r->ev.dlq_reason);
		if (r->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
			log_at(OB_LOG_ERROR, lsn, NULL, 0,
			       "on_bad_event = halt: stopping without confirming " OB_LSN_FMT,
			       OB_LSN_ARGS(lsn));
			*out = OUTCOME_HALT;
			return false;
		}
	}
	/* Counted only once handed over: a publish cut short (queue full,
	 * then the stream broke) must be read again, not skipped. */
	if (!publish(r, &r->ev, txn_seq(r), out))
		return false;
	r->txn_events++;
	return true;
}

/* A record wal2json sent that did not parse (malformed, or an outbox row
 * wider than OB_W2J_MAX_COLUMNS). Inside a transaction it can only be an
 * outbox change: dead-letter its raw text. */
static bool
handle_unparsable(relay *r, const ob_pgrepl_msg *msg, const char *err, outcome *out)
{
	ob_record_view view;
	char error[512];

	snprintf(error, sizeof(error), "could not parse wal2json record: %s", err);
	if (!r->in_txn) {
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
	ob_event_build_dlq(&r->ev, r->cfg, "bad-record", error, msg->data_start, &view, false);
	return handle_event(r, OB_MAP_DLQ, msg->data_start, out);
}

static bool
handle_xlog(relay *r, const ob_pgrepl_msg *msg, outcome *out)
{
	char err[256];
	bool ok = true;

	if (msg->data_start > r->received)
		r->received = msg->data_start;
	if (!ob_w2j_parse(msg->data, msg->len, &r->rec, err, sizeof(err)))
		return handle_unparsable(r, msg, err, out);

	switch (r->rec.action) {
	case OB_W2J_BEGIN:
		if (r->in_txn) {
			ob_error("transaction " OB_LSN_FMT " began before " OB_LSN_FMT " ended",
				 OB_LSN_ARGS(r->rec.nextlsn), OB_LSN_ARGS(r->txn_end));
			*out = OUTCOME_PG_LOST;
			ok = false;
			break;
		}
		begin_txn(r, r->rec.nextlsn,
			  r->rec.has_timestamp ? r->rec.timestamp_us : ob_now_us());
		break;
	case OB_W2J_COMMIT:
		if (r->in_txn)
			commit_txn(r);
		break;
	case OB_W2J_INSERT:
		if (r->in_txn)
			ok = handle_event(r,
					  ob_mapper_map_insert(&r->mapper, &r->rec,
							       r->txn_commit_us / 1000, &r->ev),
					  r->rec.lsn, out);
		break;
	case OB_W2J_MESSAGE:
		if (r->in_txn) {
			ok = handle_event(r,
					  ob_mapper_map_message(&r->mapper, &r->rec,
								r->txn_commit_us / 1000, &r->ev),
					  r->rec.lsn, out);
		} else {
			/* A non-transactional message stands alone. Its end is
			 * unknown; one past its start keeps it from being sent
			 * again once confirmed. */
			int64_t now_us = ob_now_us();

			begin_txn(r, r->rec.lsn + 1, now_us);
			ok = handle_event(
			    r, ob_mapper_map_message(&r->mapper, &r->rec, now_us / 1000, &r->ev),
			    r->rec.lsn, out);
			if (ok)
				commit_txn(r);
		}
		break;
	case OB_W2J_OTHER:
		break;
	}
	return ok;
}

/* The loop of one replication connection. */
static outcome
stream(relay *r)
{
	outcome out = OUTCOME_STOP;

	for (;;) {
		struct pollfd fds[2];
		int64_t wait_ms;

		report_alive(r, true);
		if (stop_requested)
			return OUTCOME_STOP;
		if (!serve_producer(r, 0, &out))
			return out;

		/* Read what is there, up to READ_BATCH records; drained says
		 * whether libpq's buffer is empty, so poll() may wait. */
		bool drained = false;

		for (int n = 0; n < READ_BATCH && !stop_requested; n++) {
			ob_pgrepl_msg msg;
			ob_read_result rr = ob_pgrepl_read(r->pg, &msg);

			if (rr == OB_READ_NONE) {
				drained = true;
				break;
			}
			if (rr == OB_READ_ERROR)
				return OUTCOME_PG_LOST;
			if (msg.wal_end > r->wal_end)
				r->wal_end = msg.wal_end;
			if (msg.keepalive) {
				if (!r->in_txn)
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
			return OUTCOME_PG_LOST;

		fds[0] = (struct pollfd){ob_pgrepl_socket(r->pg), POLLIN, 0};
		fds[1] = (struct pollfd){ob_producer_wake_fd(r->producer), POLLIN, 0};
		wait_ms = r->cfg->pg.status_interval_ms - (ob_mono_ms() - r->last_status_ms);
		if (ob_acktrack_confirmable(&r->ack) != r->sent_flush)
			wait_ms = STATUS_MIN_INTERVAL_MS;
		if (wait_ms > 1000)
			wait_ms = 1000;
		if (wait_ms < 0 || !drained)
			wait_ms = 0; /* records wait in libpq's buffer: no sleeping */
		if (poll(fds, 2, (int)wait_ms) < 0 && errno != EINTR) {
			ob_error("could not poll: %s", strerror(errno));
			return OUTCOME_PG_LOST;
		}
	}
}

/* Sleep up to ms, serving delivery reports, until a stop is requested.
 * False with *out set when the producer needs attention. */
static bool
idle(relay *r, int64_t ms, outcome *out)
{
	int64_t deadline = ob_mono_ms() + ms;

	while (!stop_requested) {
		int64_t left = deadline - ob_mono_ms();

		report_alive(r, false);
		if (left <= 0)
			return true;
		if (!serve_producer(r, left < 100 ? (int)left : 100, out))
			return false;
	}
	*out = OUTCOME_STOP;
	return false;
}

/* Leave the current connection; a transaction cut off in the middle is
 * remembered so its replay skips the events already handed over. */
static void
disconnect(relay *r, bool graceful)
{
	if (r->in_txn && !r->txn_skip) {
		r->partial_lsn = r->txn_end;
		/* What was handed now, plus what a replay had still to skip. */
		r->partial_events = r->txn_events + r->replay_skip;
		if (r->txn_tracked)
			ob_acktrack_abort(&r->ack, r->txn_seq);
	}
	r->in_txn = false;
	ob_pgrepl_close(r->pg, graceful);
	r->pg = NULL;
	r->reply_due = false;
	ob_metrics_set_connected(false, ob_producer_connected(r->producer));
}

/* While a query waits for the server: stay alive, keep serving delivery
 * reports, and give up when asked to stop. */
static bool
on_query_tick(void *ctx)
{
	relay *r = ctx;

	report_alive(r, false);
	if (r->producer != NULL)
		ob_producer_poll(r->producer, 0);
	return !stop_requested;
}

/* Connect, check, take the slot and start streaming. */
static ob_pg_status
connect_stream(relay *r)
{
	ob_pg_status st = ob_pgrepl_connect(r->cfg, &r->pg);
	ob_lsn start;

	if (st != OB_PG_OK)
		return st;
	ob_pgrepl_set_tick(r->pg, on_query_tick, r);
	st = ob_check_database(r->pg, r->cfg, NULL);
	if (st == OB_PG_OK)
		st = ob_pgrepl_prepare_slot(r->pg, r->cfg);
	start = ob_acktrack_confirmable(&r->ack);
	if (st == OB_PG_OK)
		st = ob_pgrepl_start(r->pg, r->cfg, start);
	if (st != OB_PG_OK) {
		ob_pgrepl_close(r->pg, false);
		r->pg = NULL;
		return st;
	}
	r->sent_flush = 0;
	r->last_status_ms = 0;
	return OB_PG_OK;
}

/* Recreate the producer after a fatal error: everything not confirmed is
 * read again from the slot (at-least-once). */
static bool
restart_producer(relay *r)
{
	const char *why = "";

	ob_producer_failed(r->producer, &why);
	ob_warn("recreating the kafka producer after a fatal error (%s); re-reading the slot "
		"from " OB_LSN_FMT,
		why, OB_LSN_ARGS(ob_acktrack_confirmable(&r->ack)));
	ob_producer_free(r->producer);
	r->producer = NULL;
	ob_acktrack_reset(&r->ack);
	drop_refused(r);
	r->handed_lsn = ob_acktrack_confirmable(&r->ack);
	r->partial_lsn = 0;
	r->partial_events = 0;
	ob_metrics_reconnect(OB_TARGET_KAFKA);
	return ob_producer_new(r->cfg, on_delivery, r, &r->producer);
}

/* Stop: flush what is in flight (bounded), confirm it, close. */
static void
shut_down(relay *r)
{
	int64_t deadline = ob_mono_ms() + SHUTDOWN_FLUSH_MS;
	outcome out;

	ob_notify_stopping();
	ob_info("stopping: flushing %llu in-flight events",
		(unsigned long long)ob_acktrack_inflight(&r->ack));
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
		if (!send_status(r, true))
			ob_warn("could not confirm the final position");
		else
			log_at(OB_LOG_INFO, r->sent_flush, NULL, 0, "confirmed " OB_LSN_FMT,
			       OB_LSN_ARGS(r->sent_flush));
		disconnect(r, true);
	}
}

int
ob_relay_run(const ob_config *cfg)
{
	relay r;
	int exit_code = 0;
	int64_t backoff = BACKOFF_START_MS;
	int64_t last_standby_log = -STANDBY_LOG_INTERVAL_MS;
	bool running = true;

	memset(&r, 0, sizeof(r));
	r.cfg = cfg;
	r.refused_tail = &r.refused_head;
	ob_mapper_init(&r.mapper, cfg);
	ob_acktrack_init(&r.ack, 0);
	ob_event_init(&r.ev);
	ob_event_init(&r.dlq_ev);
	install_signals();
	ob_notify_init();
	ob_metrics_set_ready(OB_READY_CONNECTING);
	if (!ob_producer_new(cfg, on_delivery, &r, &r.producer)) {
		exit_code = 2;
		goto out;
	}

	while (running && !stop_requested) {
		ob_pg_status st = connect_stream(&r);
		outcome out = OUTCOME_STOP;

		switch (st) {
		case OB_PG_OK:
			backoff = BACKOFF_START_MS;
			ob_metrics_set_ready(OB_READY_STREAMING);
			ob_notify_ready("streaming");
			out = stream(&r);
			break;
		case OB_PG_STANDBY:
			ob_metrics_set_ready(OB_READY_STANDBY);
			ob_metrics_set_connected(false, ob_producer_connected(r.producer));
			if (ob_mono_ms() - last_standby_log >= STANDBY_LOG_INTERVAL_MS) {
				ob_info("replication slot %s is active in another process; waiting "
					"as a standby, retrying every %d ms",
					cfg->pg.slot, cfg->pg.standby_retry_ms);
				last_standby_log = ob_mono_ms();
			}
			ob_notify_ready("standby");
			if (!idle(&r, cfg->pg.standby_retry_ms, &out))
				break;
			continue;
		case OB_PG_RETRY:
			ob_metrics_set_ready(OB_READY_CONNECTING);
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			ob_info("retrying in %lld ms", (long long)backoff);
			if (!idle(&r, backoff, &out))
				break;
			backoff = backoff * 2 > cfg->pg.reconnect_max_backoff_ms
				      ? cfg->pg.reconnect_max_backoff_ms
				      : backoff * 2;
			continue;
		case OB_PG_FATAL:
			exit_code = 1;
			running = false;
			continue;
		}

		switch (out) {
		case OUTCOME_STOP:
			running = false;
			break;
		case OUTCOME_HALT:
			exit_code = 1;
			running = false;
			break;
		case OUTCOME_PG_LOST:
			disconnect(&r, false);
			ob_metrics_set_ready(OB_READY_CONNECTING);
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			break;
		case OUTCOME_PRODUCER_FAILED:
			disconnect(&r, false);
			if (!restart_producer(&r)) {
				exit_code = 1; /* the same settings worked at start */
				running = false;
			}
			break;
		}
	}
	shut_down(&r);

out:
	drop_refused(&r);
	ob_producer_free(r.producer);
	ob_event_free(&r.ev);
	ob_event_free(&r.dlq_ev);
	ob_mapper_free(&r.mapper);
	ob_acktrack_free(&r.ack);
	ob_info("outboxd stopped (exit code %d)", exit_code);
	return exit_code;
}
