/*
 * slotprep.h: the slot before a stream starts: checked, created when
 * missing, or found lost (slotmark.h, slotloss.h).
 *
 * Every function runs on the replication connection given (which takes
 * these simple statements too) and logs its own failures. A lost slot
 * that postgres.on_slot_lost = recover lets outboxd recover is no
 * failure: it is reported to the caller, which runs the recovery
 * (slotrecover.h), and nothing is logged here.
 */
#ifndef OUTBOXD_SLOTPREP_H
#define OUTBOXD_SLOTPREP_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgrepl.h"
#include "outboxd/slotloss.h"

/* Create the missing slot (with FAILOVER when ob_pgrepl_failover_wanted()
 * says so) and, on a primary, its marker (slotmark.h). A marker already
 * there says the slot was lost: unless replace_lost (`outboxd slot create
 * --accept-gap`, the operator's explicit step, whose caller has said what
 * the new slot skips), OB_PG_FATAL, with *loss set to
 * OB_SLOT_LOSS_MISSING when loss is not NULL and the loss is to be
 * recovered, else logged, naming the recovery. Otherwise as
 * ob_pgrepl_create_slot(). */
ob_pg_status ob_slotprep_create_marked(ob_pgconn *p, const ob_config *cfg, bool replace_lost,
				       ob_slot_loss *loss);

/* Check the slot and create it if missing and create_slot is set: STANDBY
 * if another process holds it (or created it meanwhile), FATAL if it is
 * unusable (another plugin, another database, invalidated, missing without
 * create_slot). A slot is created only before anything was streamed from
 * it, and only when its marker (slotmark.h) does not say it was lost.
 * A lost slot (missing once streamed, naming confirmed, the position
 * reached; missing with its marker there; invalidated) on a primary is
 * FATAL with *loss saying how, when postgres.on_slot_lost = recover;
 * otherwise, and on a hot standby, FATAL naming the recovery, with *loss
 * OB_SLOT_LOSS_NONE. An existing slot gets FAILOVER when
 * ob_pgrepl_failover_wanted() says so, and its marker row. */
ob_pg_status ob_slotprep_prepare(ob_pgconn *p, const ob_config *cfg, bool streamed,
				 ob_lsn confirmed, ob_slot_loss *loss);

#endif
