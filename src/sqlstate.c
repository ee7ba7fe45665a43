/*
 * sqlstate.c: SQLSTATE names and classes (see sqlstate.h).
 */
#include "outboxd/sqlstate.h"

#include <string.h>

bool
ob_sqlstate_is(const char *state, const char *code)
{
	return state != NULL && strcmp(state, code) == 0;
}

bool
ob_sqlstate_in_class(const char *state, const char *cls)
{
	return state != NULL && strncmp(state, cls, 2) == 0;
}

bool
ob_sqlstate_server_gone(const char *state)
{
	return ob_sqlstate_in_class(state, "08") ||
	       ob_sqlstate_is(state, OB_SQLSTATE_ADMIN_SHUTDOWN) ||
	       ob_sqlstate_is(state, OB_SQLSTATE_CRASH_SHUTDOWN) ||
	       ob_sqlstate_is(state, OB_SQLSTATE_CANNOT_CONNECT_NOW);
}

bool
ob_sqlstate_transient(const char *state)
{
	return state == NULL || ob_sqlstate_in_class(state, "08") ||
	       ob_sqlstate_in_class(state, "57") || ob_sqlstate_in_class(state, "53") ||
	       ob_sqlstate_in_class(state, "40") ||
	       ob_sqlstate_is(state, OB_SQLSTATE_LOCK_NOT_AVAILABLE);
}

bool
ob_sqlstate_bad_data(const char *state)
{
	return ob_sqlstate_in_class(state, "22") || ob_sqlstate_in_class(state, "23") ||
	       ob_sqlstate_is(state, OB_SQLSTATE_PROGRAM_LIMIT);
}
