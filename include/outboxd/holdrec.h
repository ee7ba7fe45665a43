/*
 * holdrec.h: a Kafka record as the bytes of one bytea value, for the held
 * events' table (hold.h): the topic, the key, the value, the timestamp and
 * every header, each length-prefixed. Only outboxd writes and reads it; a
 * leading version byte lets a later outboxd read what an earlier wrote.
 */
#ifndef OUTBOXD_HOLDREC_H
#define OUTBOXD_HOLDREC_H

#include "outboxd/common.h"
#include "outboxd/event.h"

/* Encode rec; the caller frees *out (*len bytes). */
void ob_holdrec_encode(const ob_record_view *rec, char **out, size_t *len);
/* Decode len bytes at data into ev (reset first). False when they are not
 * a record this version wrote (truncated, another version, or more
 * headers than an event holds). */
bool ob_holdrec_decode(const void *data, size_t len, ob_event *ev) OB_MUST_CHECK;

#endif
