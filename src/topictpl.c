/*
 * topictpl.c: reading topic templates and judging topic names
 * (topictpl.h).
 */
#include "outboxd/topictpl.h"

#include <string.h>

ob_topic_scan
ob_topic_template_next(const char **cursor, ob_topic_piece *piece)
{
	const char *p = *cursor;
	const char *end;

	if (*p == '\0')
		return OB_TOPIC_END;
	if (*p == '{') {
		end = strchr(p, '}');
		if (end == NULL || end == p + 1 ||
		    memchr(p + 1, '{', (size_t)(end - p - 1)) != NULL)
			return OB_TOPIC_BAD_BRACE;
		*piece = (ob_topic_piece){p + 1, (size_t)(end - p - 1), true};
		*cursor = end + 1;
		return OB_TOPIC_PIECE;
	}
	if (*p == '}')
		return OB_TOPIC_BAD_BRACE;
	end = p + strcspn(p, "{}");
	*piece = (ob_topic_piece){p, (size_t)(end - p), false};
	*cursor = end;
	return OB_TOPIC_PIECE;
}

bool
ob_topic_name_valid(const char *name, size_t len, bool partial)
{
	if (len > OB_TOPIC_NAME_MAX || (!partial && len == 0))
		return false;
	/* Compared by range, not looked up in a string of the legal
	 * characters: every record's topic comes through here. */
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return partial ||
	       !((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'));
}
