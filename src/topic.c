/*
 * topic.c: Kafka topic names and outbox.topic templates (see topic.h).
 */
#include "outboxd/topic.h"

#include <regex.h>
#include <stdlib.h>
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

bool
ob_topic_subscription_matches(const char *topic, const char *name)
{
	regex_t re;
	bool match;

	if (topic[0] != '^')
		return strcmp(topic, name) == 0;
	if (regcomp(&re, topic, REG_EXTENDED | REG_NOSUB) != 0)
		return false; /* librdkafka refuses it when the inbox subscribes */
	match = regexec(&re, name, 0, NULL, 0) == 0;
	regfree(&re);
	return match;
}

char **
ob_topic_subscriptions(const char *topics, size_t *n)
{
	char *copy = ob_xstrdup(topics);
	char **out = ob_xcalloc(strlen(topics) / 2 + 2, sizeof(*out));
	char *save = NULL;

	*n = 0;
	for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		char *end = t + strlen(t);

		t += strspn(t, " \t");
		while (end > t && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (*t != '\0')
			out[(*n)++] = ob_xstrdup(t);
	}
	free(copy);
	return out;
}

void
ob_topic_subscriptions_free(char **topics, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(topics[i]);
	free(topics);
}
