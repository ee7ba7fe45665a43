/*
 * test_sqlstate.c: SQLSTATE names and classes (sqlstate.h): which server
 * errors say the server went away, which are worth reading again on a new
 * connection, and which refuse the data rather than the statement.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "outboxd/sqlstate.h"

typedef struct sqlstate_case {
	const char *state; /* NULL: no SQLSTATE (the connection was lost) */
	bool server_gone;
	bool transient;
	bool bad_data;
} sqlstate_case;

static const sqlstate_case cases[] = {
    {NULL, false, true, false},
    {"08006", true, true, false},                        /* connection_failure */
    {"08P01", true, true, false},                        /* protocol_violation */
    {OB_SQLSTATE_ADMIN_SHUTDOWN, true, true, false},     /* 57P01 */
    {OB_SQLSTATE_CRASH_SHUTDOWN, true, true, false},     /* 57P02 */
    {OB_SQLSTATE_CANNOT_CONNECT_NOW, true, true, false}, /* 57P03 */
    {"57014", false, true, false},                       /* query_canceled */
    {"40001", false, true, false},                       /* serialization_failure */
    {"40P01", false, true, false},                       /* deadlock_detected */
    {OB_SQLSTATE_CONFIGURATION_LIMIT, false, true, false},
    {"53100", false, true, false}, /* disk_full */
    {OB_SQLSTATE_LOCK_NOT_AVAILABLE, false, true, false},
    {OB_SQLSTATE_OBJECT_IN_USE, false, false, false},
    {OB_SQLSTATE_OBJECT_NOT_IN_PREREQUISITE, false, false, false},
    {"22P02", false, false, true}, /* invalid_text_representation */
    {"22001", false, false, true}, /* string_data_right_truncation */
    {OB_SQLSTATE_NOT_NULL_VIOLATION, false, false, true},
    {"23505", false, false, true}, /* unique_violation */
    {OB_SQLSTATE_PROGRAM_LIMIT, false, false, true},
    {"54001", false, false, false}, /* statement_too_complex */
    {OB_SQLSTATE_INSUFFICIENT_PRIVILEGE, false, false, false},
    {OB_SQLSTATE_UNDEFINED_TABLE, false, false, false},
    {OB_SQLSTATE_UNDEFINED_FILE, false, false, false},
    {"", false, false, false},
};

static void
test_classes(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const sqlstate_case *c = &cases[i];
		const char *name = c->state ? c->state : "(none)";

		if (ob_sqlstate_server_gone(c->state) != c->server_gone)
			fail_msg("%s: server_gone should be %d", name, c->server_gone);
		if (ob_sqlstate_transient(c->state) != c->transient)
			fail_msg("%s: transient should be %d", name, c->transient);
		if (ob_sqlstate_bad_data(c->state) != c->bad_data)
			fail_msg("%s: bad_data should be %d", name, c->bad_data);
	}
}

static void
test_names(void **state)
{
	(void)state;
	assert_true(ob_sqlstate_is("42710", OB_SQLSTATE_DUPLICATE_OBJECT));
	assert_false(ob_sqlstate_is(NULL, OB_SQLSTATE_DUPLICATE_OBJECT));
	assert_false(ob_sqlstate_is("4271", OB_SQLSTATE_DUPLICATE_OBJECT));
	assert_true(ob_sqlstate_in_class("08001", "08"));
	assert_false(ob_sqlstate_in_class(NULL, "08"));
	assert_false(ob_sqlstate_in_class("0", "08"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_classes),
	    cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
