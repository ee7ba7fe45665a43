"""`outboxd slot create [--if-not-exists] [--accept-gap]` looks at the slot
before it creates one (deploy/README.md, "Command line"): a healthy slot is
left as it is; a lost slot (its row in outboxd_slots there, the slot gone)
or an invalidated one (wal_status lost) is replaced only with
--accept-gap, else exit 1 naming the recovery and nothing created. So a
deployment script that runs `slot create --if-not-exists` before every
`run` stops at a lost slot instead of walking past the events the loss
skipped (before, it warned, created a new slot at the current WAL position
and exited 0)."""

import re

from test_failover import marker_rows
from test_faults import (id_counts, invalidate_slot, make_topic, on_cluster,
                         wait_streaming)

# What every refusal of a lost or invalidated slot names.
RECOVERY = ("--accept-gap", "outbox.backlog_where",
            "Recovering from a lost or invalidated slot")


def create(d, *flags):
    """`outboxd slot create FLAGS` with d's configuration: (rc, stderr)."""
    rc, _, err = d.run_cmd(["slot", "create"] + list(flags), timeout=120)
    return rc, err


def lost_slot(pg, d, slot):
    """Creates slot with `outboxd slot create` (which writes its marker
    row), then drops it behind outboxd's back, as a failover to a standby
    without a copy of it would lose it."""
    rc, err = create(d)
    assert rc == 0, err
    assert marker_rows(pg, slot) == 1
    pg.drop_slot(slot)


def assert_refused(d, *needles):
    """`slot create`, with --if-not-exists and without, exits 1 naming
    every needle and the recovery; `check` fails its slot line naming the
    first needle (the cause) and the recovery."""
    for flags in (["--if-not-exists"], []):
        rc, err = create(d, *flags)
        assert rc == 1, (flags, err)
        for needle in needles + RECOVERY:
            assert needle in err, (flags, needle, err)
    rc, out, err = d.run_cmd(["check"], timeout=60)
    lines = [ln for ln in out.splitlines()
             if re.match(r"slot\s+(ok|FAIL|warn) ", ln)]
    assert rc == 2 and len(lines) == 1 and " FAIL " in lines[0], out
    for needle in needles[:1] + RECOVERY:
        assert needle in lines[0], (needle, lines[0])


def test_lost_slot_is_refused_without_accept_gap(pg, outboxd_factory,
                                                 slot_name):
    """A lost slot: `slot create --if-not-exists` (as plain `slot create`)
    exits 1 naming the recovery and creates no slot; `check` fails its
    slot line naming --accept-gap."""
    d = outboxd_factory(start=False)
    lost_slot(pg, d, slot_name)
    assert_refused(d, "does not exist, but outboxd created it",
                   "no slot was created")
    assert pg.slot(slot_name) is None
    assert marker_rows(pg, slot_name) == 1


def test_lost_slot_is_replaced_with_accept_gap(pg, outboxd_factory,
                                               slot_name):
    """With --accept-gap the lost slot is replaced (exit 0, its marker
    kept) with a warning that the events committed between the loss and
    now are not published, and how outbox.backlog_where would publish
    them; the next `--if-not-exists` finds it healthy."""
    d = outboxd_factory(start=False)
    lost_slot(pg, d, slot_name)
    rc, err = create(d, "--if-not-exists", "--accept-gap")
    assert rc == 0, err
    for needle in ("was lost", "replacing it as --accept-gap asks",
                   "events committed between the loss and now are not "
                   "published", "outbox.backlog_where"):
        assert needle in err, (needle, err)
    assert pg.slot(slot_name)["plugin"] == d.config["postgres"]["plugin"]
    assert marker_rows(pg, slot_name) == 1
    rc, err = create(d, "--if-not-exists")
    assert rc == 0 and "exists already; nothing to do" in err, err
    assert "was lost" not in err, err


def test_healthy_slot_is_left_as_it_was(pg, outboxd_factory, slot_name):
    """A healthy slot: `--if-not-exists` exits 0 and leaves it (the same
    confirmed_flush_lsn, though the WAL moved on); plain `slot create`
    exits 1 saying it already exists, and nothing false (no "was lost", no
    "another process created it")."""
    d = outboxd_factory(start=False)
    rc, err = create(d)
    assert rc == 0, err
    before = pg.slot(slot_name)
    pg.sql("SELECT pg_logical_emit_message(true, 'not_outbox', 'x')")
    assert pg.wal_lsn() > before["confirmed_flush_lsn_int"]
    for flags, code in ((["--if-not-exists"], 0), ([], 1),
                        (["--accept-gap"], 1),
                        (["--if-not-exists", "--accept-gap"], 0)):
        rc, err = create(d, *flags)
        assert rc == code, (flags, err)
        if code == 0:
            assert "exists already; nothing to do" in err, (flags, err)
        else:
            assert "already exists" in err, (flags, err)
        for false in ("was lost", "another process", "invalidated"):
            assert false not in err, (flags, false, err)
        now = pg.slot(slot_name)
        assert now["confirmed_flush_lsn"] == before["confirmed_flush_lsn"], \
            (flags, err)
        assert now["restart_lsn"] == before["restart_lsn"], (flags, err)


def test_invalidated_slot_is_replaced_only_with_accept_gap(own_cluster,
                                                           outboxd_factory,
                                                           slot_name):
    """An invalidated slot (wal_status lost) is not healthy: `slot create
    --if-not-exists` exits 1 saying so and naming the recovery, the slot
    left as it is; `check` names --accept-gap; with --accept-gap the slot
    is dropped and created anew (exit 0, a warning)."""
    cluster = own_cluster(max_slot_wal_keep_size="'1MB'")
    d = outboxd_factory(on_cluster(cluster), start=False)
    rc, err = create(d)
    assert rc == 0, err
    invalidate_slot(cluster, slot_name)
    assert_refused(d, "has been invalidated (wal_status lost)",
                   "max_slot_wal_keep_size", "it was left as it is")
    assert cluster.slot(slot_name)["wal_status"] == "lost"
    rc, err = create(d, "--if-not-exists", "--accept-gap")
    assert rc == 0, err
    assert "has been invalidated" in err and "is dropped" in err, err
    assert "events committed between the loss and now are not published" \
        in err, err
    assert cluster.slot(slot_name)["wal_status"] == "reserved", err
    assert marker_rows(cluster, slot_name) == 1


def test_deployment_loop_stops_at_a_lost_slot(pg, broker, consumer,
                                              outboxd_factory, test_id,
                                              slot_name):
    """A deployment pipeline runs `slot create --if-not-exists`, then
    `run`, release after release, with events written between releases
    (outboxd down). The slot is lost between two releases: the next
    `slot create --if-not-exists` exits 1 and creates nothing, so the
    pipeline stops; the operator recovers with `--accept-gap` and
    outbox.backlog_where from the last event consumers received, and the
    pipeline goes on. Every event written is published."""
    agg = "deploy_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(start=False)
    written, published = [], set()

    def write(n):
        ids = [r[0] for r in pg.sql(
            "INSERT INTO public.outbox (aggregate_type, aggregate_id, "
            "event_type, payload) SELECT %s, 'k' || g, 'e', '{}' FROM "
            "generate_series(1, %s) g RETURNING id::text", (agg, n))]
        written.extend(ids)

    def collected():
        got = id_counts(consumer.collect([topic], len(written), timeout=60))
        published.update(got)
        return published

    def release():
        """One release: the pipeline's two steps; False when the first
        one fails (the pipeline stops)."""
        rc, err = create(d, "--if-not-exists")
        if rc != 0:
            return False
        d.start()
        wait_streaming(pg, slot_name)
        write(5)
        assert set(written) <= collected(), (len(written), d.log_tail())
        assert d.stop() == 0, d.log_tail()
        return True

    for n in range(4):
        if n == 2:
            # Events outboxd has not published yet, then the slot is lost
            # (a failover to a standby without it), then more events.
            write(5)
            pg.drop_slot(slot_name)
        if n > 0:  # (a slot sees only WAL written after it exists)
            write(5)
        if n != 2:
            assert release(), "release %d stopped" % n
            continue
        assert not release(), "release %d went past the lost slot" % n
        assert pg.slot(slot_name) is None
        assert not set(written) <= published
        last = pg.sql("SELECT max(created_at)::text FROM public.outbox "
                      "WHERE id::text = ANY(%s)", (sorted(published),))[0][0]
        rc, err = create(d, "--accept-gap", "-s",
                         "outbox.backlog_where=aggregate_type = '%s' AND "
                         "created_at > '%s'" % (agg, last))
        assert rc == 0, err
        assert "backlog published" in err, err
    assert set(written) <= collected(), sorted(set(written) - published)
    assert len(written) == 35
