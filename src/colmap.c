/*
 * colmap.c: the columns the [outbox] mapping names, held against a
 * table's (colmap.h).
 */
#include "outboxd/colmap.h"

#include <stdio.h>
#include <string.h>

/* True if name is one of the comma-separated columns. */
static bool
has_column(const char *columns, const char *name)
{
	size_t len = strlen(name);
	const char *p = columns;

	while (p != NULL) {
		if (strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == '\0'))
			return true;
		p = strchr(p, ',');
		if (p != NULL)
			p++;
	}
	return false;
}

/* Add name to the comma-separated list when it is (in) or is not (!in)
 * one of columns. */
static void
note_column(char *list, size_t size, const char *columns, bool in, const char *name)
{
	if (name[0] == '\0' || has_column(columns, name) != in ||
	    strlen(list) + strlen(name) + 3 > size)
		return;
	strcat(list, list[0] ? ", " : "");
	strcat(list, name);
}

void
ob_colmap_note(const ob_config *cfg, const char *columns, bool in, char *list, size_t size)
{
	const char *mapped[] = {
	    cfg->outbox.id_column,      cfg->outbox.key_column,     cfg->outbox.type_column,
	    cfg->outbox.payload_column, cfg->outbox.headers_column, cfg->outbox.timestamp_column,
	};
	ob_topic_piece piece;

	for (size_t i = 0; i < OB_ARRAY_LEN(mapped); i++)
		note_column(list, size, columns, in, mapped[i]);
	for (const char *cursor = cfg->outbox.topic;
	     ob_topic_template_next(&cursor, &piece) == OB_TOPIC_PIECE;) {
		char name[128];

		if (!piece.is_column)
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)piece.len, piece.text);
		note_column(list, size, columns, in, name);
	}
}
