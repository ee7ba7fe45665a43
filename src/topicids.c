/*
 * topicids.c: the ids of the inbox's topics, asked with DescribeTopics
 * (topicids.h).
 *
 * The code that needs librdkafka 2.3.0's Admin API is built only against
 * 2.3.0 or later, and runs only when the librdkafka loaded at run time is
 * one of those too (the shared library keeps its name across versions, so
 * a build may meet an older one).
 */
#include "outboxd/topicids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"

/* rd_kafka_version() of librdkafka 2.3.0, the first to show topic ids
 * (rd_kafka_DescribeTopics(), rd_kafka_TopicDescription_topic_id()). */
#define LIBRDKAFKA_2_3 0x020300ff

typedef struct topic_id {
	char *topic;
	char *id; /* "": not known */
} topic_id;

struct ob_topicids {
	topic_id *topics;
	size_t n;
	bool told_none; /* that no id can be had was logged */
};

ob_topicids *
ob_topicids_new(void)
{
	return ob_xcalloc(1, sizeof(ob_topicids));
}

void
ob_topicids_free(ob_topicids *t)
{
	if (t == NULL)
		return;
	for (size_t i = 0; i < t->n; i++) {
		free(t->topics[i].topic);
		free(t->topics[i].id);
	}
	free(t->topics);
	free(t);
}

/* Keep id (NULL: not known) for topic. */
static void
keep(ob_topicids *t, const char *topic, const char *id)
{
	size_t i = 0;

	while (i < t->n && strcmp(t->topics[i].topic, topic) != 0)
		i++;
	if (i == t->n) {
		t->topics = ob_xrealloc(t->topics, (t->n + 1) * sizeof(*t->topics));
		t->topics[t->n++] = (topic_id){ob_xstrdup(topic), NULL};
	}
	free(t->topics[i].id);
	t->topics[i].id = ob_xstrdup(id != NULL ? id : "");
}

const char *
ob_topicids_get(const ob_topicids *t, const char *topic)
{
	for (size_t i = 0; i < t->n; i++) {
		if (strcmp(t->topics[i].topic, topic) == 0)
			return t->topics[i].id;
	}
	return "";
}

/* Log once that no topic id can be had, and why. */
static void
tell_none(ob_topicids *t, const char *why)
{
	if (t->told_none)
		return;
	t->told_none = true;
	ob_info("%s: a topic deleted and created again is told apart only when a stored position "
		"lies past its high watermark",
		why);
}

#if RD_KAFKA_VERSION >= LIBRDKAFKA_2_3

/* The id of topic description d as text; NULL when the broker gave none
 * (the zero UUID). */
static const char *
id_text(const rd_kafka_TopicDescription_t *d)
{
	const rd_kafka_Uuid_t *id = rd_kafka_TopicDescription_topic_id(d);

	if (id == NULL || (rd_kafka_Uuid_most_significant_bits(id) == 0 &&
			   rd_kafka_Uuid_least_significant_bits(id) == 0))
		return NULL;
	return rd_kafka_Uuid_base64str(id);
}

/* Keep what the DescribeTopics answer ev says of each topic. */
static void
keep_answer(ob_topicids *t, rd_kafka_event_t *ev)
{
	const rd_kafka_DescribeTopics_result_t *res = rd_kafka_event_DescribeTopics_result(ev);
	const rd_kafka_TopicDescription_t **descs;
	size_t n;

	descs = rd_kafka_DescribeTopics_result_topics(res, &n);
	for (size_t i = 0; i < n; i++) {
		const char *topic = rd_kafka_TopicDescription_name(descs[i]);
		const rd_kafka_error_t *err = rd_kafka_TopicDescription_error(descs[i]);
		const char *id = err == NULL ? id_text(descs[i]) : NULL;

		if (err != NULL)
			ob_warn(
			    "could not read the kafka topic id of %s: %s; until its partitions are "
			    "next assigned, their stored positions are judged, and new ones "
			    "stored, without it",
			    topic, rd_kafka_error_string(err));
		else if (id == NULL)
			tell_none(t, "the kafka brokers give no topic ids (kafka before 2.8, or an "
				     "older inter-broker protocol)");
		keep(t, topic, id);
	}
}

/* Why DescribeTopics cannot be answered, into buf; NULL when it can.
 * librdkafka sends it to the controller the cluster names and waits for
 * that broker until the request times out: between two controllers no
 * broker is named, and librdkafka's mock cluster names broker 0, which it
 * does not have. */
static const char *
no_controller(rd_kafka_t *rk, int timeout_ms, char *buf, size_t len)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, NULL, &md, timeout_ms);
	bool named = false;
	int32_t id;

	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(buf, len, "%s", rd_kafka_err2str(err));
		return buf;
	}
	id = rd_kafka_controllerid(rk, 0);
	for (int i = 0; i < md->broker_cnt; i++)
		named = named || md->brokers[i].id == id;
	rd_kafka_metadata_destroy(md);
	if (named)
		return NULL;
	snprintf(buf, len,
		 "the cluster names no controller among its brokers (%d), and DescribeTopics "
		 "is sent there",
		 (int)id);
	return buf;
}

/* Send DescribeTopics for the n topics and wait for its answer, up to
 * timeout_ms: into *ev (the caller destroys it), or NULL with why it did
 * not come into buf. */
static const char *
ask(rd_kafka_t *rk, const char **topics, size_t n, int timeout_ms, rd_kafka_event_t **ev, char *buf,
    size_t len)
{
	rd_kafka_TopicCollection_t *coll = rd_kafka_TopicCollection_of_topic_names(topics, n);
	rd_kafka_AdminOptions_t *opts =
	    rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBETOPICS);
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);

	*ev = NULL;
	if (rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, buf, len) !=
	    RD_KAFKA_RESP_ERR_NO_ERROR)
		goto out;
	rd_kafka_DescribeTopics(rk, coll, opts, q);
	/* The request's own timeout ends it first; a result that comes after
	 * the queue is gone is dropped. */
	*ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
	if (*ev == NULL) {
		snprintf(buf, len, "no answer in time");
	} else if (rd_kafka_event_error(*ev) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		   rd_kafka_event_DescribeTopics_result(*ev) == NULL) {
		snprintf(buf, len, "%s", rd_kafka_event_error_string(*ev));
		rd_kafka_event_destroy(*ev);
		*ev = NULL;
	}
out:
	rd_kafka_queue_destroy(q);
	rd_kafka_AdminOptions_destroy(opts);
	rd_kafka_TopicCollection_destroy(coll);
	return *ev == NULL ? buf : NULL;
}

/* Ask for the ids of the n topics, taking up to about timeout_ms in all,
 * and keep those the answer gives. */
static void
describe(ob_topicids *t, rd_kafka_t *rk, const char **topics, size_t n, int timeout_ms)
{
	int64_t deadline = ob_mono_ms() + timeout_ms;
	rd_kafka_event_t *ev = NULL;
	const char *failed;
	char buf[256];

	if (rd_kafka_version() < LIBRDKAFKA_2_3) {
		tell_none(t, "the librdkafka loaded gives no topic ids (2.3.0 and later do)");
		return;
	}
	failed = no_controller(rk, timeout_ms, buf, sizeof(buf));
	if (failed == NULL && ob_mono_ms() >= deadline)
		failed = "no answer in time";
	if (failed == NULL)
		failed = ask(rk, topics, n, (int)(deadline - ob_mono_ms()), &ev, buf, sizeof(buf));
	if (failed != NULL) {
		ob_warn("could not read the kafka topic ids: %s; until the partitions are next "
			"assigned, their stored positions are judged, and new ones stored, without "
			"them",
			failed);
		return;
	}
	keep_answer(t, ev);
	rd_kafka_event_destroy(ev);
}

#else

/* Built against a librdkafka without topic ids: none is ever known. */
static void
describe(ob_topicids *t, rd_kafka_t *rk, const char **topics, size_t n, int timeout_ms)
{
	tell_none(t, "outboxd was built against a librdkafka that gives no topic ids (2.3.0 and "
		     "later do)");
}

#endif

void
ob_topicids_read(ob_topicids *t, rd_kafka_t *rk, const ob_kpart *parts, size_t n, int timeout_ms)
{
	const char **topics = ob_xcalloc(n + 1, sizeof(*topics));
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		size_t j = 0;

		while (j < k && strcmp(topics[j], parts[i].topic) != 0)
			j++;
		if (j == k)
			topics[k++] = parts[i].topic;
	}
	/* Not known until the answer says otherwise: never an earlier id. */
	for (size_t i = 0; i < k; i++)
		keep(t, topics[i], NULL);
	if (k > 0)
		describe(t, rk, topics, k, timeout_ms);
	free(topics);
}
