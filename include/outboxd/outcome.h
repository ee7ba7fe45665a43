/*
 * outcome.h: what ends one connection of the relay, and so what the relay
 * does next (relay.c's one switch, as pg_recvlogical's).
 *
 * The modules that run inside a connection (delivery.h, tableset.h,
 * cutover.h) stop by returning false with an outcome set; only relay.c
 * acts on it.
 */
#ifndef OUTBOXD_OUTCOME_H
#define OUTBOXD_OUTCOME_H

typedef enum ob_outcome {
	OB_OUTCOME_STOP,      /* a signal asked us to stop */
	OB_OUTCOME_HALT,      /* exit 1: an operator must look */
	OB_OUTCOME_LOST,      /* the connection broke: reconnect at once */
	OB_OUTCOME_RETRY,     /* Postgres is not usable yet: back off, then reconnect */
	OB_OUTCOME_STANDBY,   /* another process holds the slot: wait */
	OB_OUTCOME_REPRODUCE, /* recreate the producer and read the slot again */
	OB_OUTCOME_CONFIG,    /* exit 2: the configuration is wrong */
	OB_OUTCOME_REFILTER,  /* a partition the stream does not read: reconnect */
} ob_outcome;

#endif
