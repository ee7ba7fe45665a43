/*
 * dlqtopic.h: read a topic once, from a start point to its end, in the
 * Kafka layer: what `outboxd dlq list` and `outboxd dlq redrive` read the
 * dead-letter topic with (dlqcmd.h).
 *
 * The reader is a consumer of its own, configured as the inbox consumer is
 * (outboxd's consumer defaults, the user's [kafka] properties, the
 * consumer's pinned ones), that joins no group: it assign()s every
 * partition of the topic and commits nothing. Each partition is read up to
 * its high watermark as it was when the read began; records written later
 * are not read. No librdkafka type appears here: a record read is an
 * ob_dlqtopic_record.
 */
#ifndef OUTBOXD_DLQTOPIC_H
#define OUTBOXD_DLQTOPIC_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/event.h"

/* One record read; every pointer is borrowed and valid only during the
 * callback. */
typedef struct ob_dlqtopic_record {
	int32_t partition;
	int64_t offset;
	/* False when the record has more headers than OB_EVENT_MAX_HEADERS:
	 * view then holds the first of them only. */
	bool all_headers;
	ob_record_view view;
} ob_dlqtopic_record;

/* Called for each record, in offset order within a partition. False stops
 * the read (the callback logged why). */
typedef bool (*ob_dlqtopic_fn)(void *ctx, const ob_dlqtopic_record *rec);

typedef enum ob_dlqtopic_result {
	OB_DLQTOPIC_READ,    /* every partition was read to its end */
	OB_DLQTOPIC_MISSING, /* the topic does not exist: nothing to read */
	OB_DLQTOPIC_FAILED,  /* logged, or the callback stopped the read */
} ob_dlqtopic_result;

/* Read topic to its end, calling fn(ctx, record) for each record. With
 * since_ms negative every partition is read from its start; otherwise from
 * its first record whose timestamp is since_ms (milliseconds since the
 * Unix epoch) or later, as the broker finds it (offsets for times), and
 * records after that one stamped before since_ms are skipped too. */
ob_dlqtopic_result ob_dlqtopic_read(const ob_config *cfg, const char *topic, int64_t since_ms,
				    ob_dlqtopic_fn fn, void *ctx);

#endif
