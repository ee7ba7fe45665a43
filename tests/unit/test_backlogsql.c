/*
 * test_backlogsql.c: the backlog's query text and order, its page sizes,
 * and which server errors are of the moment (backlogsql.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/backlogsql.h"

typedef struct select_case {
	const char *name;
	const char *table;
	const char *id_column;
	const char *timestamp_column;
	const char *where;
	const char *order_by;
	const char *identity; /* the table's identity column, or NULL */
	const char *what;
	bool with_order;
	const char *expected;
} select_case;

static const select_case select_cases[] = {
    {"no identity column: the timestamp column, then the id column", "public.outbox", "id",
     "created_at", "processed_on_utc IS NULL", "", NULL, "*", true,
     "SELECT * FROM \"public\".\"outbox\" WHERE (\nprocessed_on_utc IS NULL\n) "
     "ORDER BY \"created_at\", \"id\""},
    {"the identity column, then the id column", "public.outbox", "id", "created_at",
     "processed_on_utc IS NULL", "", "seq", "*", true,
     "SELECT * FROM \"public\".\"outbox\" WHERE (\nprocessed_on_utc IS NULL\n) "
     "ORDER BY \"seq\", \"id\""},
    {"the identity column is the id column", "public.outbox", "Id", "created_at", "true", "", "Id",
     "*", true, "SELECT * FROM \"public\".\"outbox\" WHERE (\ntrue\n) ORDER BY \"Id\""},
    {"no timestamp column: the id column alone", "outbox", "event_id", "", "true", "", NULL, "*",
     true, "SELECT * FROM \"public\".\"outbox\" WHERE (\ntrue\n) ORDER BY \"event_id\""},
    {"backlog_order_by as written, identity column or not", "app.outbox", "id", "created_at",
     "true", "(payload->>'n')::int DESC, id", "seq", "*", true,
     "SELECT * FROM \"app\".\"outbox\" WHERE (\ntrue\n) ORDER BY (payload->>'n')::int DESC, "
     "id"},
    {"without the order (to tell which key the server refuses)", "public.outbox", "id",
     "created_at", "n > 1", "n DESC", NULL, "1", false,
     "SELECT 1 FROM \"public\".\"outbox\" WHERE (\nn > 1\n)"},
    {"names quoted: case and inner quotes kept", "Sales.\"Out\"box", "Id", "When", "true", "",
     "S\"q", "*", true,
     "SELECT * FROM \"Sales\".\"\"\"Out\"\"box\" WHERE (\ntrue\n) ORDER BY \"S\"\"q\", \"Id\""},
    {"a trailing comment stays on the predicate's line", "public.outbox", "id", "created_at",
     "processed_on_utc IS NULL -- the poller's", "", NULL, "*", true,
     "SELECT * FROM \"public\".\"outbox\" WHERE (\nprocessed_on_utc IS NULL -- the poller's\n) "
     "ORDER BY \"created_at\", \"id\""},
};

static void
set(ob_config *cfg, const char *key, const char *value)
{
	if (!ob_config_set(cfg, "outbox", key, value, "test"))
		fail_msg("could not set outbox.%s", key);
}

static void
test_select(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(select_cases) / sizeof(select_cases[0]); i++) {
		const select_case *c = &select_cases[i];
		ob_config cfg;
		char *sql, *order;

		ob_config_init(&cfg);
		set(&cfg, "table", c->table);
		set(&cfg, "id_column", c->id_column);
		set(&cfg, "timestamp_column", c->timestamp_column);
		set(&cfg, "backlog_where", c->where);
		set(&cfg, "backlog_order_by", c->order_by);
		if (!ob_config_finish(&cfg))
			fail_msg("%s: the configuration does not finish", c->name);
		order = ob_backlogsql_order(&cfg, c->identity);
		sql = ob_backlogsql_select(&cfg, c->what, c->with_order ? order : NULL);
		if (strcmp(sql, c->expected) != 0)
			fail_msg("%s:\n got: %s\nwant: %s", c->name, sql, c->expected);
		free(sql);
		free(order);
		ob_config_free(&cfg);
	}
}

typedef struct page_case {
	const char *name;
	size_t current, rows, bytes;
	size_t expected;
} page_case;

static const page_case page_cases[] = {
    {"small rows: the most rows a page holds", 16, 16, 16 * 400, OB_BACKLOG_PAGE_MAX_ROWS},
    {"100 KB rows: about ten to a page", 16, 16, 16 * 100 * 1024, 10},
    {"rows larger than a page: one at a time", 10, 10, 10 * 5 * 1024 * 1024, 1},
    {"rows of exactly a page", 4, 2, 2 * OB_BACKLOG_PAGE_BYTES, 1},
    {"half a page in 100 rows: 200 next", 100, 100, OB_BACKLOG_PAGE_BYTES / 2, 200},
    {"rows without text (all NULL)", 16, 16, 0, OB_BACKLOG_PAGE_MAX_ROWS},
    {"the empty last page keeps the size", 37, 0, 0, 37},
};

static void
test_page_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(page_cases) / sizeof(page_cases[0]); i++) {
		const page_case *c = &page_cases[i];
		size_t got = ob_backlogsql_page_rows(c->current, c->rows, c->bytes);

		if (got != c->expected)
			fail_msg("%s: %zu rows, want %zu", c->name, got, c->expected);
	}
}

static void
test_transient(void **state)
{
	static const struct {
		const char *sqlstate;
		bool transient;
	} cases[] = {
	    {NULL, true},     /* libpq's own failure: the connection is gone */
	    {"08006", true},  /* connection failure */
	    {"57P01", true},  /* admin shutdown */
	    {"57014", true},  /* query cancelled (SIGTERM, statement timeout) */
	    {"53200", true},  /* out of memory */
	    {"40001", true},  /* serialization failure */
	    {"55P03", true},  /* lock not available */
	    {"42601", false}, /* syntax error, or a second statement */
	    {"42703", false}, /* undefined column */
	    {"42501", false}, /* insufficient privilege */
	    {"22012", false}, /* division by zero, on a row */
	    {"22P02", false}, /* a cast of a row's text */
	    {"25006", false}, /* a write in the read-only transaction */
	    {"55000", false}, /* another object state */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (ob_backlogsql_transient(cases[i].sqlstate) != cases[i].transient)
			fail_msg("SQLSTATE %s: transient should be %d",
				 cases[i].sqlstate ? cases[i].sqlstate : "(none)",
				 cases[i].transient);
	}
}

static void
test_plan_rows(void **state)
{
	(void)state;
	assert_int_equal(ob_backlogsql_plan_rows("Sort  (cost=92.37..95.02 rows=1060 width=172)"),
			 1060);
	assert_int_equal(
	    ob_backlogsql_plan_rows("Seq Scan on outbox  (cost=0.00..1.01 rows=1 width=4)"), 1);
	assert_int_equal(ob_backlogsql_plan_rows("Result  (cost=0.00..0.01 width=0)"), -1);
	assert_int_equal(ob_backlogsql_plan_rows("Result  (cost=0.00..0.01 rows= width=0)"), -1);
	assert_int_equal(ob_backlogsql_plan_rows(""), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_select),
	    cmocka_unit_test(test_page_rows),
	    cmocka_unit_test(test_transient),
	    cmocka_unit_test(test_plan_rows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
