/*
 * sqlstate.h: the SQLSTATEs outboxd acts on, by name, and the classes it
 * tests (PostgreSQL's Appendix A, "PostgreSQL Error Codes"; named as
 * src/backend/utils/errcodes.txt does, as streamutil.c names
 * ERRCODE_DUPLICATE_OBJECT).
 *
 * Server errors are told apart by their SQLSTATE, never by their text,
 * which follows the server's lc_messages. Pure: the unit tests reach every
 * rule.
 */
#ifndef OUTBOXD_SQLSTATE_H
#define OUTBOXD_SQLSTATE_H

#include "outboxd/common.h"

#define OB_SQLSTATE_NOT_NULL_VIOLATION         "23502"
#define OB_SQLSTATE_UNIQUE_VIOLATION           "23505"
#define OB_SQLSTATE_INVALID_AUTHORIZATION      "28000"
#define OB_SQLSTATE_INVALID_PASSWORD           "28P01"
#define OB_SQLSTATE_INSUFFICIENT_PRIVILEGE     "42501"
#define OB_SQLSTATE_UNDEFINED_COLUMN           "42703"
#define OB_SQLSTATE_UNDEFINED_OBJECT           "42704"
#define OB_SQLSTATE_DUPLICATE_OBJECT           "42710"
#define OB_SQLSTATE_UNDEFINED_TABLE            "42P01"
#define OB_SQLSTATE_INVALID_COLUMN_REFERENCE   "42P10"
#define OB_SQLSTATE_CONFIGURATION_LIMIT        "53400"
#define OB_SQLSTATE_PROGRAM_LIMIT              "54000"
#define OB_SQLSTATE_OBJECT_NOT_IN_PREREQUISITE "55000"
#define OB_SQLSTATE_OBJECT_IN_USE              "55006"
#define OB_SQLSTATE_LOCK_NOT_AVAILABLE         "55P03"
#define OB_SQLSTATE_ADMIN_SHUTDOWN             "57P01"
#define OB_SQLSTATE_CRASH_SHUTDOWN             "57P02"
#define OB_SQLSTATE_CANNOT_CONNECT_NOW         "57P03"
#define OB_SQLSTATE_UNDEFINED_FILE             "58P01"

/* True when state (NULL: none) is code. */
bool ob_sqlstate_is(const char *state, const char *code);
/* True when state (NULL: none) is of class cls, its first two characters
 * ("08": connection exception). */
bool ob_sqlstate_in_class(const char *state, const char *cls);

/* The connection broke or the server shuts down: class 08, or 57P01
 * (admin_shutdown), 57P02 (crash_shutdown), 57P03 (cannot_connect_now).
 * Such an error says nothing about the stream's data. */
bool ob_sqlstate_server_gone(const char *state);
/* Reading again on a fresh connection may get past it: no SQLSTATE (the
 * connection was lost), class 08 (connection), 40 (rollback:
 * serialization, deadlock), 53 (resources), 57 (operator intervention), or
 * 55P03 (lock_not_available). */
bool ob_sqlstate_transient(const char *state);
/* The data was refused, not the statement: class 22 (data exception), 23
 * (integrity constraint) or 54000 (program_limit_exceeded: a row too
 * large). */
bool ob_sqlstate_bad_data(const char *state);

#endif
