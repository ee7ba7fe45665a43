/*
 * test_pgwarning.c: server warnings on the replication stream told apart
 * by where the server raised them, the slot a standby-wait warning names,
 * and the standby waits they begin and the stream ends (pgwarning.h), with
 * their metric, /readyz word and log lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "capture.h"
#include "outboxd/metrics.h"
#include "outboxd/pgwarning.h"

/* The messages as PostgreSQL 17.10 and 18.4 send them (checked on both;
 * PG_DIAG_SOURCE_FILE "slot.c", PG_DIAG_SOURCE_FUNCTION
 * "StandbySlotsHaveCaughtup"; 18's pgoutput: "pgoutput.c",
 * "LoadPublications"). */
#define NO_ACTIVE_PID                                                                              \
	"replication slot \"sb1\" specified in parameter \"synchronized_standby_slots\" does not " \
	"have active_pid"
#define SKIPPED "skipped loading publication \"outboxd\""

typedef struct classify_case {
	const char *what;
	ob_pgwarning warning;
	ob_pgwarning_kind expected;
} classify_case;

static const classify_case classify_cases[] = {
    {"the standby's slot has no active_pid (17, 18)",
     {"WARNING", "55000", "slot.c", NO_ACTIVE_PID},
     OB_PGWARNING_STANDBY_WAIT},
    {"the same, translated (lc_messages = de_DE.UTF-8)",
     {"WARNING", "55000", "slot.c",
      "Replikations-Slot »sb1«, der in Parameter »synchronized_standby_slots« angegeben ist, "
      "hat keine active_pid"},
     OB_PGWARNING_STANDBY_WAIT},
    {"the standby's slot does not exist",
     {"WARNING", "22023", "slot.c",
      "replication slot \"sb9\" specified in parameter \"synchronized_standby_slots\" does "
      "not exist"},
     OB_PGWARNING_STANDBY_WAIT},
    {"the standby's slot was invalidated",
     {"WARNING", "22023", "slot.c",
      "physical replication slot \"sb1\" specified in parameter "
      "\"synchronized_standby_slots\" has been invalidated"},
     OB_PGWARNING_STANDBY_WAIT},
    {"a logical slot named in the parameter",
     {"WARNING", "22023", "slot.c",
      "cannot specify logical replication slot \"ls\" in parameter "
      "\"synchronized_standby_slots\""},
     OB_PGWARNING_STANDBY_WAIT},
    {"18's publication passed over",
     {"WARNING", "55000", "pgoutput.c", SKIPPED},
     OB_PGWARNING_ENDS_STREAM},
    {"the same, translated",
     {"WARNING", "55000", "pgoutput.c", "Laden der Publikation »outboxd« übersprungen"},
     OB_PGWARNING_ENDS_STREAM},
    {"a publication called like the parameter (checked on 18)",
     {"WARNING", "55000", "pgoutput.c",
      "skipped loading publication \"synchronized_standby_slots\""},
     OB_PGWARNING_ENDS_STREAM},
    {"the wait's text without a source file: not known to be a wait",
     {"WARNING", "55000", NULL, NO_ACTIVE_PID},
     OB_PGWARNING_ENDS_STREAM},
    {"the wait's text from another file",
     {"WARNING", "55000", "walsender.c", NO_ACTIVE_PID},
     OB_PGWARNING_ENDS_STREAM},
    {"slot.c without the parameter",
     {"WARNING", "55000", "slot.c", "something else"},
     OB_PGWARNING_ENDS_STREAM},
    {"slot.c without a message", {"WARNING", "55000", "slot.c", NULL}, OB_PGWARNING_ENDS_STREAM},
    {"an undefined object",
     {"WARNING", "42704", "pgoutput.c", "publication \"x\" does not exist"},
     OB_PGWARNING_ENDS_STREAM},
    {"an unknown 55000 warning",
     {"WARNING", "55000", "future.c", "anything"},
     OB_PGWARNING_ENDS_STREAM},
    {"a NOTICE of that SQLSTATE", {"NOTICE", "55000", "pgoutput.c", SKIPPED}, OB_PGWARNING_OTHER},
    {"a NOTICE from slot.c", {"NOTICE", "55000", "slot.c", NO_ACTIVE_PID}, OB_PGWARNING_OTHER},
    {"another warning", {"WARNING", "01000", "xlog.c", "something"}, OB_PGWARNING_OTHER},
    {"no severity", {NULL, "55000", "pgoutput.c", SKIPPED}, OB_PGWARNING_OTHER},
    {"no fields at all", {NULL, NULL, NULL, NULL}, OB_PGWARNING_OTHER},
};

static void
test_classify_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(classify_cases); i++) {
		const classify_case *c = &classify_cases[i];
		ob_pgwarning_kind got = ob_pgwarning_classify(&c->warning);

		if (got != c->expected)
			fail_msg("case %zu (%s): got %d, expected %d", i, c->what, (int)got,
				 (int)c->expected);
	}
}

typedef struct slot_case {
	const char *message;
	const char *slot; /* NULL: none found */
} slot_case;

static const slot_case slot_cases[] = {
    {NO_ACTIVE_PID, "sb1"},
    {"physical replication slot \"standby_2\" specified in parameter "
     "\"synchronized_standby_slots\" has been invalidated",
     "standby_2"},
    /* The parameter first. */
    {"cannot specify logical replication slot \"ls\" in parameter \"synchronized_standby_slots\"",
     "ls"},
    {"parameter \"synchronized_standby_slots\" names \"sb3\"", "sb3"},
    /* Quotation marks of other languages, hugging the name. */
    {"Replikations-Slot »sb1«, der in Parameter »synchronized_standby_slots« angegeben ist", "sb1"},
    {"slot de réplication «\xc2\xa0"
     "sb1\xc2\xa0» indiqué dans le paramètre «\xc2\xa0"
     "synchronized_standby_slots\xc2\xa0»",
     "sb1"},
    {"パラメータ\"synchronized_standby_slots\"で指定されたスロット\"sb1\"にはactive_"
     "pidがありません",
     "sb1"},
    {"слот репликации „sb_4“ в параметре „synchronized_standby_slots“", "sb_4"},
    /* Marks set off by plain spaces, or none: no name. */
    {"slot de réplication « sb1 » indiqué dans « synchronized_standby_slots »", NULL},
    {"replication slot sb1 has no active_pid", NULL},
    {"\"synchronized_standby_slots\"", NULL},
    {"", NULL},
};

static void
test_slot_name_table(void **state)
{
	char slot[64];

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(slot_cases); i++) {
		const slot_case *c = &slot_cases[i];
		bool found = ob_pgwarning_slot_name(c->message, slot, sizeof(slot));

		if (found != (c->slot != NULL) || strcmp(slot, c->slot ? c->slot : "") != 0)
			fail_msg("case %zu (%s): got %s \"%s\", expected %s", i, c->message,
				 found ? "found" : "none", slot, c->slot ? c->slot : "none");
	}
	/* A name longer than the buffer is cut short. */
	assert_true(ob_pgwarning_slot_name(NO_ACTIVE_PID, slot, 3));
	assert_string_equal(slot, "sb");
}

#define STALL_MS 80

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* The value of outboxd_standby_waits_total. */
static long
waits_total(void)
{
	char *text = ob_metrics_render();
	const char *p = strstr(text, "\noutboxd_standby_waits_total ");
	long n = p ? strtol(p + strlen("\noutboxd_standby_waits_total "), NULL, 10) : -1;

	free(text);
	return n;
}

static size_t
count(const char *text, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* One wait from its first warning until the stream moves: counted once,
 * ready until stall_after_ms, then waiting-for-standby (never stalled),
 * logged at most once a minute; its end, when it was logged, too. */
static void
test_wait_episodes(void **state)
{
	ob_standby_wait w = {0};
	int64_t t = ob_mono_ms();
	char *out, *text;

	(void)state;
	ob_metrics_init(STALL_MS, OB_METRICS_PUBLISHER, NULL);
	ob_metrics_set_ready(OB_READY_STREAMING);
	ob_metrics_set_oldest_unconfirmed(ob_now_us()); /* events wait meanwhile */
	assert_int_equal(waits_total(), 0);

	capture_start();
	/* Messages while no wait is on change nothing. */
	ob_pgwarning_stream_read(&w, true, 0x100);
	ob_pgwarning_stream_read(&w, false, 0x100);
	assert_false(w.waiting);

	ob_pgwarning_standby_wait(&w, NO_ACTIVE_PID, t);
	assert_true(w.waiting);
	assert_int_equal(waits_total(), 1);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	/* Keepalives at the position the walsender stopped at. */
	ob_pgwarning_stream_read(&w, true, 0x100);
	ob_pgwarning_stream_read(&w, true, 0x100);
	/* The warning again (every ~30 s): the same wait, not logged again. */
	ob_pgwarning_standby_wait(&w, NO_ACTIVE_PID, t + 30000);
	ob_pgwarning_stream_read(&w, true, 0x100);
	assert_true(w.waiting);
	assert_int_equal(waits_total(), 1);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STANDBY_WAIT);
	assert_string_equal(ob_metrics_ready_word(OB_READY_STANDBY_WAIT), "waiting-for-standby");
	text = ob_metrics_render();
	assert_non_null(strstr(text, "outboxd_ready{state=\"waiting-for-standby\"} 1\n"));
	assert_non_null(strstr(text, "# TYPE outboxd_standby_waits_total counter\n"));
	free(text);
	/* Only a streaming relay waits for a standby. */
	ob_metrics_set_ready(OB_READY_CONNECTING);
	assert_int_equal(ob_metrics_ready(), OB_READY_CONNECTING);
	ob_metrics_set_ready(OB_READY_STREAMING);

	/* The walsender moves on: the wait is over, and so is the stall it
	 * would otherwise be. */
	ob_pgwarning_stream_read(&w, true, 0x180);
	assert_false(w.waiting);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	out = capture_end();
	assert_int_equal(count(out, "logical replication is waiting for the standby"), 1);
	assert_non_null(strstr(out, "replication slot sb1, which the primary's "
				    "synchronized_standby_slots names"));
	assert_non_null(strstr(out, "start that standby, or amend synchronized_standby_slots"));
	assert_null(strstr(out, "drop"));
	assert_int_equal(count(out, "waits for no standby any more"), 1);
	free(out);

	/* A second wait within the minute: counted, not logged; XLogData ends
	 * it at once, silently (its start was not told either). */
	capture_start();
	ob_pgwarning_standby_wait(&w, NO_ACTIVE_PID, t + 40000);
	assert_int_equal(waits_total(), 2);
	ob_pgwarning_stream_read(&w, false, 0x180);
	assert_false(w.waiting);
	/* A third, a minute after the last line: logged, naming what it can. */
	ob_pgwarning_standby_wait(&w, "ohne Namen: synchronized_standby_slots", t + 90000);
	assert_int_equal(waits_total(), 3);
	/* A new stream starts again from the slot's position, below the old
	 * mark: its own first keepalive is the mark. */
	ob_pgwarning_stream_read(&w, true, 0x200);
	ob_pgwarning_stream_started(&w);
	ob_pgwarning_stream_read(&w, true, 0x150);
	assert_true(w.waiting);
	ob_pgwarning_stream_read(&w, true, 0x160);
	assert_false(w.waiting);
	out = capture_end();
	assert_int_equal(count(out, "logical replication is waiting for the standby"), 1);
	assert_non_null(strstr(out, "the replication slot the server names"));
	assert_int_equal(count(out, "waits for no standby any more"), 1);
	free(out);
	ob_metrics_set_oldest_unconfirmed(0);
	ob_metrics_init(60000, OB_METRICS_PUBLISHER, NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_classify_table),
	    cmocka_unit_test(test_slot_name_table),
	    cmocka_unit_test(test_wait_episodes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
