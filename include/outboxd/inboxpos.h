/*
 * inboxpos.h: where the inbox's partitions start and resume (README,
 * "Inbox").
 *
 * The positions stored in Postgres are the truth. A partition is started
 * only once its stored position is judged against what the broker serves:
 * a position past the high watermark, below the low watermark, or stored
 * for another cluster or for a topic of the name deleted since (its topic
 * id, where librdkafka shows it), and a partition with nothing stored
 * while the group has a committed offset in Kafka, cannot belong to it (a
 * mismatch), and inbox.on_position_mismatch says where it starts instead.
 * After a failed transaction, whose outcome may be unknown, every assigned
 * partition resumes at what Postgres holds. The judgment itself is
 * inboxjudge.h's.
 */
#ifndef OUTBOXD_INBOXPOS_H
#define OUTBOXD_INBOXPOS_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/consumer.h"
#include "outboxd/inboxdb.h"
#include "outboxd/metrics.h"

typedef enum ob_inboxpos_status {
	OB_INBOXPOS_OK,
	OB_INBOXPOS_WAIT,   /* the broker did not answer or a seek failed: try again later */
	OB_INBOXPOS_DB,     /* the database failed (logged): it is lost */
	OB_INBOXPOS_HALT,   /* exit 1: a mismatch with on_position_mismatch = halt */
	OB_INBOXPOS_CONFIG, /* exit 2: the inbox would consume its own dead letters */
} ob_inboxpos_status;

/* Start the consumer's unstarted partitions: judge each stored position,
 * recover a mismatch as inbox.on_position_mismatch says (storing the new
 * position, unless the setting is "stored"), seek each partition to its
 * start and resume it. A partition with nothing stored and nothing
 * committed starts at its high watermark with on_position_mismatch =
 * latest, else at its low one. */
ob_inboxpos_status ob_inboxpos_start(ob_consumer *c, ob_inboxdb *db, const ob_config *cfg);
/* After start failed: note the lag of each unstarted partition (its high
 * watermark minus the stored position, or minus the low watermark when
 * nothing is stored): their records wait as well. Kept as it was when the
 * broker does not answer; OB_INBOXPOS_DB when the database failed. */
ob_inboxpos_status ob_inboxpos_note_lag(ob_consumer *c, ob_inboxdb *db);
/* After a failed transaction: seek every assigned partition to where
 * Postgres says it resumes (or, with nothing stored, to the first record
 * read from it) and resume them. */
ob_inboxpos_status ob_inboxpos_resume(ob_consumer *c, ob_inboxdb *db);

#endif
