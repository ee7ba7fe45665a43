/*
 * colmap.h: the columns the [outbox] mapping names (the *_column settings
 * and the {column} placeholders of outbox.topic), held against a list of
 * a table's columns, for `outboxd check` and the relay's checks.
 */
#ifndef OUTBOXD_COLMAP_H
#define OUTBOXD_COLMAP_H

#include "outboxd/config.h"

/* Add to list (a string of size bytes, ", "-separated) each mapped column
 * that is (in) or is not (!in) one of the comma-separated columns; a name
 * that does not fit is left out. */
void ob_colmap_note(const ob_config *cfg, const char *columns, bool in, char *list, size_t size);

#endif
