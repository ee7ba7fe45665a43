/*
 * inboxjudge.c: stored inbox positions judged against the broker's view
 * (see inboxjudge.h).
 */
#include "outboxd/inboxjudge.h"

#include <stdio.h>
#include <string.h>

bool
ob_inboxjudge_mismatch(const ob_inbox_position *st, const ob_broker_view *bv,
		       ob_position_mismatch *reason, char *why, size_t why_len)
{
	if (st->next_offset < 0 && bv->committed >= 0) {
		*reason = OB_POSITION_NOT_STORED;
		snprintf(why, why_len,
			 "postgres has no stored position, but the group's committed offset in "
			 "kafka is %lld (was the database restored to before the inbox stored "
			 "this partition?); the broker holds offsets %lld to %lld",
			 (long long)bv->committed, (long long)bv->low, (long long)bv->high);
	} else if (st->next_offset < 0) {
		return false;
	} else if (st->cluster_id[0] != '\0' && bv->cluster_id[0] != '\0' &&
		   strcmp(st->cluster_id, bv->cluster_id) != 0) {
		*reason = OB_POSITION_CLUSTER;
		snprintf(why, why_len,
			 "stored offset %lld belongs to kafka cluster %s, but the broker is "
			 "cluster %s and holds offsets %lld to %lld",
			 (long long)st->next_offset, st->cluster_id, bv->cluster_id,
			 (long long)bv->low, (long long)bv->high);
	} else if (st->topic_id[0] != '\0' && bv->topic_id[0] != '\0' &&
		   strcmp(st->topic_id, bv->topic_id) != 0) {
		*reason = OB_POSITION_TOPIC_ID;
		snprintf(
		    why, why_len,
		    "stored offset %lld belongs to topic id %s, but the topic now has id %s (it "
		    "was deleted and created again) and holds offsets %lld to %lld",
		    (long long)st->next_offset, st->topic_id, bv->topic_id, (long long)bv->low,
		    (long long)bv->high);
	} else if (st->next_offset > bv->high) {
		*reason = OB_POSITION_PAST_HIGH;
		snprintf(why, why_len,
			 "stored offset %lld is past the partition's high watermark %lld (was the "
			 "topic deleted and created again?)",
			 (long long)st->next_offset, (long long)bv->high);
	} else if (st->next_offset < bv->low) {
		*reason = OB_POSITION_BELOW_LOW;
		snprintf(why, why_len,
			 "stored offset %lld is below the partition's low watermark %lld: records "
			 "%lld to %lld expired before the inbox stored them",
			 (long long)st->next_offset, (long long)bv->low, (long long)st->next_offset,
			 (long long)bv->low - 1);
	} else {
		return false;
	}
	return true;
}
