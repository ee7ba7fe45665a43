/*
 * seqcheck.h: the test broker's check of idempotent producers' sequence
 * numbers, which librdkafka's mock cluster does not make for producers
 * without a transactional id.
 *
 * seqcheck.c wraps the socket calls of the mock cluster's connections
 * (accept, recvmsg, recv, sendmsg, close) in ob-mockbroker's process. It
 * reads each ProduceRequest whole before the mock cluster sees it and, as a
 * Kafka broker does, refuses a record batch whose base sequence lies past
 * the next one expected for its producer id, epoch and partition with
 * OUT_OF_ORDER_SEQUENCE_NUMBER. Such a batch arises only behind a batch the
 * broker refused, when requests are pipelined: Kafka never writes it, and
 * with this check neither does the test broker.
 *
 * A refusal is made by spoiling the batch's magic byte, so the mock cluster
 * refuses the batch without writing it, and by rewriting the error code of
 * that partition in the mock's ProduceResponse. Produce errors injected
 * with `error 0 ...` are made the same way, so they count as refusals here.
 *
 * A retry of one of a producer's last five batches on a partition that was
 * written already (its response lost, say, when a broker went down) is
 * refused unwritten with DUPLICATE_SEQUENCE_NUMBER, which the producer
 * takes as success, as Kafka does: the broker never writes a batch twice
 * for one producer id and epoch.
 *
 * A batch the mock cluster itself refuses unwritten must not move the
 * sequence on either, or a batch sent behind it would be written ahead of
 * its retry. The one such answer a run provokes is NOT_LEADER_FOR_PARTITION
 * after a leadership move: the check knows each partition's leader (set
 * with ob_seqcheck_set_leader) and the broker behind each connection (by
 * its port, ob_seqcheck_set_ports), and leaves a batch sent to a broker
 * that does not lead its partition to the mock cluster unjudged. While
 * the leadership moves, it refuses the partition's batches itself.
 */

#ifndef OB_SEQCHECK_H
#define OB_SEQCHECK_H

#include <stdbool.h>
#include <stdint.h>

/* Refuse every batch of the next count ProduceRequests (on any broker)
 * with the Kafka error code err, after those already pending. False when
 * too many runs of failures are pending (64). */
bool ob_seqcheck_fail_produce(int16_t err, long count);

/* Drop the pending Produce failures. */
void ob_seqcheck_clear_produce(void);

/* The listening port of each broker: ports[i] is broker i + 1's. */
void ob_seqcheck_set_ports(const int *ports, int n);

/* The leader of topic's partition is broker (1..n); 0 while it is moving
 * (then the mock cluster's answer is not foreseen: a batch is refused with
 * NOT_LEADER_FOR_PARTITION). Returns the leader it replaces (0: moving, or
 * not known). */
int32_t ob_seqcheck_set_leader(const char *topic, int32_t partition, int32_t broker);

/* Batches refused as out of order so far. */
long ob_seqcheck_refused(void);

/* Retries of written batches refused as DUPLICATE_SEQUENCE_NUMBER so far. */
long ob_seqcheck_duplicates(void);

/* Records of topic the mock cluster wrote, per producer id (in no order):
 * fills records[0..n) and returns n, at most max. */
int ob_seqcheck_producers(const char *topic, long *records, int max);

/* Record batches of idempotent producers to topic taken so far (each
 * partition of a ProduceRequest carries one): how many requests a
 * producer needed for its records. */
long ob_seqcheck_batches(const char *topic);

#endif
