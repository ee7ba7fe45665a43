/*
 * test_inboxjudge.c: stored inbox positions judged against the broker's
 * view (inboxjudge.h), as a table: each reason, which one wins when
 * several hold, what is not known on either side (a cluster or topic id
 * left unknown is never compared), and the text that names both
 * positions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/inboxjudge.h"

#define N(a)       (sizeof(a) / sizeof((a)[0]))
#define NONE       (-1)
#define VERDICT_OK (-1) /* no mismatch */

typedef struct judge_case {
	const char *name;
	int64_t stored;             /* NONE: nothing stored */
	const char *stored_cluster; /* "": stored before outboxd kept it */
	const char *stored_topic;   /* "": not known when stored */
	int64_t low, high, committed;
	const char *cluster; /* "": unknown */
	const char *topic;   /* "": unknown */
	int verdict;         /* an ob_position_mismatch, or VERDICT_OK */
	const char *why;     /* a part of the text */
} judge_case;

static const judge_case cases[] = {
    {"inside the partition", 5, "c1", "T1", 0, 10, 5, "c1", "T1", VERDICT_OK, NULL},
    {"at the high watermark", 10, "c1", "T1", 0, 10, 10, "c1", "T1", VERDICT_OK, NULL},
    {"at the low watermark", 3, "c1", "T1", 3, 10, 3, "c1", "T1", VERDICT_OK, NULL},
    {"nothing stored, nothing committed", NONE, "", "", 0, 10, NONE, "c1", "T1", VERDICT_OK, NULL},
    {"nothing stored, committed in kafka", NONE, "", "", 0, 10, 7, "c1", "T1",
     OB_POSITION_NOT_STORED, "committed offset in kafka is 7"},
    {"past the high watermark", 27, "c1", "T1", 0, 5, 27, "c1", "T1", OB_POSITION_PAST_HIGH,
     "stored offset 27 is past the partition's high watermark 5"},
    {"below the low watermark", 1, "c1", "T1", 4, 9, 1, "c1", "T1", OB_POSITION_BELOW_LOW,
     "records 1 to 3 expired"},
    {"another cluster, offsets fitting", 5, "c1", "T1", 0, 10, 5, "c2", "T1", OB_POSITION_CLUSTER,
     "belongs to kafka cluster c1, but the broker is cluster c2"},
    {"another cluster wins over the watermarks", 50, "c1", "T1", 0, 10, 5, "c2", "T1",
     OB_POSITION_CLUSTER, NULL},
    {"another cluster wins over the topic id", 5, "c1", "T1", 0, 10, 5, "c2", "T2",
     OB_POSITION_CLUSTER, NULL},
    {"no cluster stored: not compared", 5, "", "T1", 0, 10, 5, "c2", "T1", VERDICT_OK, NULL},
    {"cluster unknown: not compared", 5, "c1", "T1", 0, 10, 5, "", "T1", VERDICT_OK, NULL},
    /* The topic created again holds more records than were stored: only
     * its id tells it apart. */
    {"another topic id, offsets fitting", 5, "c1", "T1", 0, 40, 5, "c1", "T2", OB_POSITION_TOPIC_ID,
     "stored offset 5 belongs to topic id T1, but the topic now has id T2 (it was deleted and "
     "created again) and holds offsets 0 to 40"},
    {"another topic id wins over the watermarks", 50, "c1", "T1", 0, 10, 5, "c1", "T2",
     OB_POSITION_TOPIC_ID, NULL},
    {"no topic id stored: not compared", 5, "c1", "", 0, 40, 5, "c1", "T2", VERDICT_OK, NULL},
    {"topic id unknown: not compared", 5, "c1", "T1", 0, 40, 5, "c1", "", VERDICT_OK, NULL},
    {"topic id unknown: the watermarks still judge", 50, "c1", "T1", 0, 10, 5, "c1", "",
     OB_POSITION_PAST_HIGH, NULL},
    {"nothing stored: no topic id to compare", NONE, "", "", 0, 10, NONE, "c1", "T2", VERDICT_OK,
     NULL},
};

static void
test_judge(void **state)
{
	(void)state;
	for (size_t i = 0; i < N(cases); i++) {
		const judge_case *c = &cases[i];
		ob_inbox_position st = {.topic = "t", .partition = 0, .next_offset = c->stored};
		ob_broker_view bv = {c->low, c->high, c->committed, c->cluster, c->topic};
		ob_position_mismatch reason = OB_POSITION_MISMATCH_COUNT;
		char why[512] = "";
		bool got;

		snprintf(st.cluster_id, sizeof(st.cluster_id), "%s", c->stored_cluster);
		snprintf(st.topic_id, sizeof(st.topic_id), "%s", c->stored_topic);
		got = ob_inboxjudge_mismatch(&st, &bv, &reason, why, sizeof(why));
		if (got != (c->verdict != VERDICT_OK))
			fail_msg("%s: %s", c->name, got ? "a mismatch" : "no mismatch");
		if (got && (int)reason != c->verdict)
			fail_msg("%s: reason %s, should be %s", c->name,
				 ob_position_mismatch_name(reason),
				 ob_position_mismatch_name((ob_position_mismatch)c->verdict));
		if (c->why != NULL && strstr(why, c->why) == NULL)
			fail_msg("%s: \"%s\" does not say \"%s\"", c->name, why, c->why);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_judge),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
