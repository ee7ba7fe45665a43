/*
 * dlqredrive.c: `outboxd dlq redrive` and the dead letters of `outboxd dlq
 * list` (dlqcmd.h), read from outbox.dlq_topic with dlqtopic.h's reader.
 *
 * A dead letter (event.h, ob_event_build_dlq()) is its record's key, value,
 * timestamp and headers with headers of its own: "error", "source-lsn",
 * OB_DLQ_ORIGINAL_TOPIC, and "payload-size" (its value was left out) or
 * OB_DLQ_HELD_BEHIND (a held record) when so. Redrive publishes the record
 * again without them, to the original topic.
 */
#include "outboxd/dlqcmd.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outboxd/dlqtopic.h"
#include "outboxd/event.h"
#include "outboxd/log.h"
#include "outboxd/producer.h"
#include "outboxd/runtime.h"

/* How long redrive waits for the acknowledgements of what it published. */
#define ACK_WAIT_MS     60000
#define FLUSH_MS        200
/* list keeps and prints this many (reason, topic, key) groups; the dead
 * letters of further groups are only counted. */
#define LIST_MAX_GROUPS 1000
/* The bytes of a key, an id or an error text that list prints. */
#define LIST_TEXT_MAX   200

/* The headers a dead letter has beyond its record's own. */
static const char *const dlq_headers[] = {"error", "source-lsn", OB_DLQ_ORIGINAL_TOPIC,
					  "payload-size", OB_DLQ_HELD_BEHIND};

/* Whether v has a header called name; if so *value and *len are the
 * first one's ("" for a null value). */
static bool
view_header(const ob_record_view *v, const char *name, const char **value, size_t *len)
{
	for (size_t i = 0; i < v->headers_len; i++) {
		if (strcmp(v->header_names[i], name) == 0) {
			*value = v->header_values[i] != NULL ? v->header_values[i] : "";
			*len = v->header_value_lens[i];
			return true;
		}
	}
	return false;
}

/* Whether v has an id, the one it goes by as hold.c's held records do:
 * its id header, or ce_id in CloudEvents' binary mode. */
static bool
record_id(const ob_record_view *v, const char **id, size_t *len)
{
	return view_header(v, "id", id, len) || view_header(v, "ce_id", id, len);
}

/* The first max of the len bytes at data as printable ASCII in a new
 * string: other bytes and '\' as \xHH, "..." after a cut. */
static char *
text_of(const void *data, size_t len, size_t max)
{
	const unsigned char *b = data;
	size_t n = len < max ? len : max, used = 0;
	char *out = ob_xmalloc(4 * n + 4);

	for (size_t i = 0; i < n; i++) {
		if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\')
			out[used++] = (char)b[i];
		else
			used += (size_t)sprintf(out + used, "\\x%02x", b[i]);
	}
	strcpy(out + used, n < len ? "..." : "");
	return out;
}

/* ---- --since's time ---------------------------------------------------- */

/* n decimal digits at *s into *out, *s moved past them; false when there
 * are fewer. */
static bool
digits(const char **s, int n, int *out)
{
	*out = 0;
	for (int i = 0; i < n; i++, (*s)++) {
		if (**s < '0' || **s > '9')
			return false;
		*out = *out * 10 + (**s - '0');
	}
	return true;
}

/* Whether *s is one of the characters of set; if so *s moves past it. */
static bool
one_of(const char **s, const char *set)
{
	if (**s == '\0' || strchr(set, **s) == NULL)
		return false;
	(*s)++;
	return true;
}

/* text, an RFC 3339 date-time ("2026-11-29T10:00:00Z", a fraction of a
 * second and an offset like "+01:00" allowed, 't', 'z' and ' ' too), as
 * milliseconds since the Unix epoch. False (logged) when it is not one. */
static bool
parse_time(const char *text, int64_t *ms)
{
	const char *s = text;
	int year = 0, mon = 0, day = 0, hour = 0, min = 0, sec = 0, frac = 0, oh = 0, om = 0;
	int sign = 1;
	struct tm tm;
	bool ok = digits(&s, 4, &year) && one_of(&s, "-") && digits(&s, 2, &mon) &&
		  one_of(&s, "-") && digits(&s, 2, &day) && one_of(&s, "Tt ") &&
		  digits(&s, 2, &hour) && one_of(&s, ":") && digits(&s, 2, &min) &&
		  one_of(&s, ":") && digits(&s, 2, &sec);

	if (ok && one_of(&s, ".")) {
		int places = 0;

		for (; *s >= '0' && *s <= '9'; s++, places++) {
			if (places < 3)
				frac = frac * 10 + (*s - '0');
		}
		ok = places > 0;
		for (; places < 3; places++)
			frac *= 10;
	}
	if (ok && !one_of(&s, "Zz")) {
		sign = *s == '-' ? -1 : 1;
		ok = one_of(&s, "+-") && digits(&s, 2, &oh) && one_of(&s, ":") &&
		     digits(&s, 2, &om) && oh < 24 && om < 60;
	}
	if (!ok || *s != '\0' || mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 ||
	    min > 59 || sec > 60) {
		ob_error("--since %s is not an RFC 3339 time (like 2026-11-29T10:00:00Z or "
			 "2026-11-29T11:00:00+01:00)",
			 text);
		return false;
	}
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;
	*ms = ((int64_t)timegm(&tm) - sign * (oh * 3600 + om * 60)) * 1000 + frac;
	return true;
}

/* ---- redrive ----------------------------------------------------------- */

typedef struct redrive {
	const ob_dlq_args *a;
	int64_t since_ms; /* --since, or -1 */
	bool *found;      /* --id: whether the id of the same index was read */
	ob_producer *producer;
	ob_event ev;
	char **labels; /* by tag: the id of each record sent, as the lines name it */
	size_t sent, labels_cap;
	size_t acked, published, refused, failed;
} redrive;

/* Whether a dead letter with this id (record_id()) is chosen by --id
 * (which notes the ids found). */
static bool
chosen_id(redrive *r, const char *id, size_t id_len)
{
	bool chosen = false;

	for (size_t i = 0; i < r->a->ids_len; i++) {
		if (strlen(r->a->ids[i]) == id_len && memcmp(r->a->ids[i], id, id_len) == 0) {
			r->found[i] = true;
			chosen = true;
		}
	}
	return chosen;
}

/* Why the dead letter rec cannot be redriven (NULL: it can); else *topic
 * and *topic_len are the topic it was for. */
static const char *
refusal(const ob_dlqtopic_record *rec, const char **topic, size_t *topic_len)
{
	const char *value;
	size_t len;

	if (view_header(&rec->view, OB_DLQ_HELD_BEHIND, &value, &len))
		return "it is a held record (" OB_DLQ_HELD_BEHIND " header): release its key with "
		       "outboxd dlq release, which keeps the key's order";
	if (view_header(&rec->view, "payload-size", &value, &len))
		return "it was cut down (payload-size header): its value is not in the dead letter";
	if (!rec->all_headers)
		return "it has more headers than " OB_STRINGIFY(OB_EVENT_MAX_HEADERS);
	if (!view_header(&rec->view, OB_DLQ_ORIGINAL_TOPIC, topic, topic_len) || *topic_len == 0)
		return "it has no " OB_DLQ_ORIGINAL_TOPIC
		       " header: the topic it was for is not known";
	return NULL;
}

/* Whether name is one of the dead letter's own headers. */
static bool
dlq_header(const char *name)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(dlq_headers); i++) {
		if (strcmp(name, dlq_headers[i]) == 0)
			return true;
	}
	return false;
}

/* Publish the record that dead letter v holds to topic, tagged with the
 * index of label (taken) in r->labels. False (logged) when the producer is
 * failed and nothing more can be published. */
static bool
publish(redrive *r, const ob_record_view *v, const char *topic, size_t topic_len, char *label)
{
	ob_event *ev = &r->ev;
	const char *why = NULL;
	bool too_large = false;
	ob_send_result res;

	ob_event_reset(ev);
	ev->topic = ob_event_put(ev, topic, topic_len);
	ob_event_put_record(ev, v);
	/* At most as many as v holds: they fit. */
	for (size_t i = 0; i < v->headers_len; i++) {
		if (!dlq_header(v->header_names[i]))
			(void)ob_event_add_header(ev, v->header_names[i], v->header_values[i],
						  v->header_value_lens[i]);
	}
	if (r->sent == r->labels_cap) {
		r->labels_cap = r->labels_cap ? 2 * r->labels_cap : 64;
		r->labels = ob_xrealloc(r->labels, r->labels_cap * sizeof(*r->labels));
	}
	while ((res = ob_producer_send(r->producer, ev, r->sent, &why, &too_large)) ==
	       OB_SEND_QUEUE_FULL)
		ob_producer_poll(r->producer, FLUSH_MS);
	if (res == OB_SEND_OK) {
		r->labels[r->sent++] = label;
		return true;
	}
	if (res == OB_SEND_FATAL)
		(void)ob_producer_failed(r->producer, &why);
	ob_error("could not redrive dead letter %s to %.*s: %s", label, (int)topic_len, topic,
		 why != NULL ? why : "the producer failed");
	free(label);
	r->failed++;
	return res == OB_SEND_REFUSED;
}

/* The reader's callback: publish the dead letter when it is chosen and can
 * be redriven. */
static bool
redrive_record(void *ctx, const ob_dlqtopic_record *rec)
{
	redrive *r = ctx;
	const char *id = NULL, *topic = NULL, *why;
	size_t id_len = 0, topic_len = 0;
	bool has_id = record_id(&rec->view, &id, &id_len);
	char *label;

	if (r->a->ids_len > 0 && (!has_id || !chosen_id(r, id, id_len)))
		return true;
	label =
	    has_id ? text_of(id, id_len, id_len)
		   : ob_xasprintf("without id (%.*s [%d] at offset %lld)", (int)rec->view.topic_len,
				  rec->view.topic, (int)rec->partition, (long long)rec->offset);
	why = refusal(rec, &topic, &topic_len);
	if (why == NULL)
		return publish(r, &rec->view, topic, topic_len, label);
	ob_error("not redriving dead letter %s: %s", label, why);
	free(label);
	r->refused++;
	return true;
}

/* The producer's delivery callback: a line for each record the broker
 * acknowledged, an error for each it refused. */
static void
on_delivery(void *ctx, const ob_delivery *d)
{
	redrive *r = ctx;
	const char *label = r->labels[d->tag];

	r->acked++;
	if (d->status == OB_DELIVERED) {
		printf("redriven %s to %.*s\n", label, (int)d->record.topic_len, d->record.topic);
		r->published++;
	} else {
		ob_error("could not redrive dead letter %s to %.*s: %s", label,
			 (int)d->record.topic_len, d->record.topic, d->error);
		r->failed++;
	}
}

/* Wait until every record sent is acknowledged (or refused), the producer
 * failed, or ACK_WAIT_MS passed; those left count as failed (logged). */
static void
await_acks(redrive *r)
{
	int64_t deadline = ob_mono_ms() + ACK_WAIT_MS;
	const char *why = NULL;

	while (r->acked < r->sent && !ob_producer_failed(r->producer, &why) &&
	       ob_mono_ms() < deadline)
		ob_producer_flush(r->producer, FLUSH_MS);
	if (r->acked < r->sent) {
		ob_error("%zu redriven record(s) were not acknowledged (%s): they may or may not "
			 "be published",
			 r->sent - r->acked,
			 why != NULL ? why : "no answer within " OB_STRINGIFY(ACK_WAIT_MS) " ms");
		r->failed += r->sent - r->acked;
	}
}

int
ob_dlqredrive_run(const ob_config *cfg, const ob_dlq_args *a)
{
	redrive r = {.a = a, .since_ms = -1};
	ob_dlqtopic_result res;
	size_t missing = 0;
	int rc = OB_EXIT_CONFIG;

	ob_event_init(&r.ev);
	r.found = ob_xcalloc(a->ids_len + 1, sizeof(*r.found));
	if ((a->since != NULL && !parse_time(a->since, &r.since_ms)) ||
	    !ob_producer_new(cfg, OB_PRODUCER_PIPELINED, on_delivery, &r, &r.producer))
		goto done;
	res = ob_dlqtopic_read(cfg, cfg->outbox.dlq_topic, r.since_ms, redrive_record, &r);
	if (res == OB_DLQTOPIC_MISSING)
		ob_warn("dead-letter topic %s does not exist: there are no dead letters",
			cfg->outbox.dlq_topic);
	await_acks(&r);
	for (size_t i = 0; i < a->ids_len; i++) {
		if (!r.found[i]) {
			ob_error("no dead letter with id %s in %s", a->ids[i],
				 cfg->outbox.dlq_topic);
			missing++;
		}
	}
	printf("dead letters redriven: %zu, refused: %zu, failed: %zu, ids not found: %zu\n",
	       r.published, r.refused, r.failed, missing);
	fflush(stdout);
	rc = res != OB_DLQTOPIC_FAILED && r.refused == 0 && r.failed == 0 && missing == 0
		 ? OB_EXIT_OK
		 : OB_EXIT_OPERATOR;
done:
	if (r.producer != NULL)
		ob_producer_free(r.producer);
	for (size_t i = 0; i < r.sent; i++)
		free(r.labels[i]);
	free(r.labels);
	free(r.found);
	ob_event_free(&r.ev);
	return rc;
}

/* ---- list -------------------------------------------------------------- */

typedef struct lister {
	/* reason -> {topic "\n" key -> [count, first id, last id, topic, key]},
	 * every string printable (text_of()), in the order first read. */
	json_t *reasons;
	size_t groups;
	long long total, held, unshown; /* unshown: dead letters of groups not kept */
} lister;

/* The printable text of v's header name, or of absent when it has none. */
static char *
header_text(const ob_record_view *v, const char *name, const char *absent)
{
	const char *value;
	size_t len;

	return view_header(v, name, &value, &len) ? text_of(value, len, LIST_TEXT_MAX)
						  : ob_xstrdup(absent);
}

/* The reader's callback: count the dead letter in its group. */
static bool
list_record(void *ctx, const ob_dlqtopic_record *rec)
{
	lister *l = ctx;
	const ob_record_view *v = &rec->view;
	const char *value;
	size_t len;
	bool held = view_header(v, OB_DLQ_HELD_BEHIND, &value, &len);
	char *reason = held ? ob_xstrdup("held") : header_text(v, "error", "(no error header)");
	char *topic = header_text(v, OB_DLQ_ORIGINAL_TOPIC, "(not known)");
	char *key = v->has_key ? text_of(v->key, v->key_len, LIST_TEXT_MAX) : ob_xstrdup("(none)");
	const char *id_value;
	size_t id_len;
	char *id = record_id(v, &id_value, &id_len) ? text_of(id_value, id_len, LIST_TEXT_MAX)
						    : ob_xstrdup("-");
	char *name = ob_xasprintf("%s\n%s", topic, key);
	json_t *groups = json_object_get(l->reasons, reason);
	json_t *g = json_object_get(groups, name);

	l->total++;
	l->held += held;
	if (g != NULL) {
		json_array_set_new(g, 0,
				   json_integer(json_integer_value(json_array_get(g, 0)) + 1));
		json_array_set_new(g, 2, json_string(id));
	} else if (l->groups == LIST_MAX_GROUPS) {
		l->unshown++;
	} else {
		if (groups == NULL) {
			groups = json_object();
			json_object_set_new(l->reasons, reason, groups);
		}
		json_object_set_new(groups, name, json_pack("[issss]", 1, id, id, topic, key));
		l->groups++;
	}
	free(reason);
	free(topic);
	free(key);
	free(id);
	free(name);
	return true;
}

static void
print_list(const lister *l, FILE *out)
{
	const char *reason, *name;
	json_t *groups, *g;

	fprintf(out, "dead letters: %lld (%lld held)\n", l->total, l->held);
	json_object_foreach (l->reasons, reason, groups) {
		fprintf(out, "\nreason: %s\n", reason);
		json_object_foreach (groups, name, g)
			fprintf(out, "  key %s  topic %s  count %lld  first %s  last %s\n",
				json_string_value(json_array_get(g, 4)),
				json_string_value(json_array_get(g, 3)),
				(long long)json_integer_value(json_array_get(g, 0)),
				json_string_value(json_array_get(g, 1)),
				json_string_value(json_array_get(g, 2)));
	}
	if (l->unshown > 0)
		fprintf(out,
			"\nand %lld more dead letters in further groups (only the first %d "
			"groups are listed)\n",
			l->unshown, LIST_MAX_GROUPS);
}

bool
ob_dlqredrive_list(const ob_config *cfg, FILE *out)
{
	lister l = {json_object(), 0, 0, 0, 0};
	ob_dlqtopic_result res = ob_dlqtopic_read(cfg, cfg->outbox.dlq_topic, -1, list_record, &l);

	if (res != OB_DLQTOPIC_FAILED)
		print_list(&l, out);
	json_decref(l.reasons);
	return res != OB_DLQTOPIC_FAILED;
}
