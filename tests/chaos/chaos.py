#!/usr/bin/env python3
"""outboxd's randomized fault checker (see tests/chaos/README.md).

    python3 tests/chaos/chaos.py                   # the fixed seeds (seeds.txt)
    python3 tests/chaos/chaos.py --seed 7 --seed 12
    python3 tests/chaos/chaos.py --seeds 50        # soak: 50 new seeds
    python3 tests/chaos/chaos.py --minutes 30      # soak: new seeds for 30 min

Each seed is one run: a throwaway Postgres 15 cluster, outboxd (the seed
picks the decoder and a plain or partitioned outbox table), `outboxd
inbox` consuming the event topic into a second database (unless
--no-inbox), the workload and the faults of the seed, a drain, and the
checker. One mock broker
serves all runs of a process. Ends with `chaos: N passed, N failed` (each
seed a test) and exits non-zero when a seed failed or nothing ran; a
missing part (Postgres, wal2json, the broker or outboxd binaries) fails
the seeds, never skips them.

Binaries come from $OUTBOXD_BUILD (default build/, relative to the repo
root); $OUTBOXD_BROKER_BIN names another broker binary (outboxd built
against one librdkafka, the broker against another: tests/rdkafka.sh); a
failed run's logs are kept under --keep (default
/tmp/outboxd-chaos)."""

import argparse
import collections
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import checker  # noqa: E402
import faults  # noqa: E402
import walfaults  # noqa: E402
from workload import FEATURES, Driver  # noqa: E402

PARTITIONS = 8
DRAIN_TIMEOUT = 90
INBOX_TIMEOUT = 90
INBOX_DB = "chaos_inbox"
# librdkafka's mock cluster keeps at most this much of a partition and
# silently drops older records beyond it (and 100,000 message sets).
BROKER_PARTITION_BYTES = 5 * 1024 * 1024
SEEDS_FILE = HERE / "seeds.txt"
LATIN1_ONE_IN = 6
# The chance, at each workload step, of an UPDATE moving committed rows.
MOVE_CHANCE = 0.03
# Of the seeds from walfaults.SLOT_FROM on that draw no slot fault (56 in
# 100), one in HOLD_ONE_IN (a generator of its own, seeded with "hold-N")
# runs outboxd with outbox.on_bad_event = hold_key: about one seed in four
# of a soak, and every lower seed, the fixed ones included, keeps the
# history it had. Such a run gets no promote (HOLD_WITHOUT).
HOLD_ONE_IN = 2
HOLD_WITHOUT = frozenset({"promote"})
RELEASE_TIMEOUT = 120


def encoding_of(seed):
    """The database encoding of a seed's cluster: LATIN1 for about one
    seed in LATIN1_ONE_IN, else UTF8."""
    return "LATIN1" if random.Random("encoding-%d" % seed).randrange(
        LATIN1_ONE_IN) == 0 else "UTF8"


def hold_of(seed):
    """Whether seed's run draws on_bad_event = hold_key: from
    walfaults.SLOT_FROM on, one in HOLD_ONE_IN of the seeds without slot
    faults (their runs write no bad events)."""
    return seed >= walfaults.SLOT_FROM and \
        random.Random("hold-%d" % seed).randrange(HOLD_ONE_IN) == 0 \
        and not walfaults.slot_plan(seed, 10)[0]


def dims(seed):
    """(decoder, table kind) of a seed: the four pairs in turn."""
    return (("wal2json", "pgoutput")[seed % 2],
            ("plain", "partitioned")[(seed // 2) % 2])


class Parts:
    """The binaries and the shared mock broker of this process."""

    def __init__(self, build, logdir):
        self.outboxd = str(build / "outboxd")
        broker_bin = os.environ.get("OUTBOXD_BROKER_BIN") or \
            str(build / "tests" / "ob-mockbroker")
        self.broker = harness.MockBroker(
            broker_bin, brokers=3, partitions=PARTITIONS,
            logfile=str(Path(logdir) / "ob-mockbroker.log"))
        self.runs = 0

    def close(self):
        self.broker.stop()


class Clock:
    """Run time: seconds since start() (the workload's start)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.started = False

    def start(self):
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.started = True

    def __call__(self):
        """Run seconds (0 before start())."""
        return time.monotonic() - self.t0 if self.started else 0.0


class Result:
    """One seed's outcome: report (checker.Report, or None when the run
    itself broke), error (the traceback then), faults (FaultLog), the
    run's seconds and directory."""

    def __init__(self, seed):
        self.seed = seed
        self.report = None
        self.error = None
        self.faults = None
        self.seconds = 0.0
        self.dir = None
        self.inbox = False
        self.wal = set()    # the walfaults.KINDS the run drew
        self.without = frozenset()
        self.wall0 = None   # the wall clock (UTC) at run time 0
        self.hold = False   # on_bad_event = hold_key
        self.forced = False  # hold_key asked for (--only hold), not drawn

    @property
    def passed(self):
        return self.error is None and not self.report.findings


def outboxd_config(pg, broker, slot, agg, decoder, rng, timeout_ms=None,
                   order_by=None):
    """The daemon's settings for a run (kafka.message.timeout.ms when
    timeout_ms; outbox.backlog_order_by when order_by)."""
    cfg = {
        "postgres": {"conninfo": pg.conninfo(), "slot": slot,
                     "create_slot": True, "plugin": decoder,
                     "publication": "chaos",
                     "status_interval_ms": rng.choice([100, 300, 1000]),
                     "reconnect_max_backoff_ms": 1000,
                     "standby_retry_ms": 500},
        "outbox": {"table": "public.outbox",
                   "topic": "outbox.event.{aggregate_type}",
                   "dlq_topic": "chaos.%s.dlq" % agg},
        "kafka": {"bootstrap.servers": broker.bootstraps},
        "http": {"listen": ""},
        "log": {"level": "info"},
    }
    if timeout_ms is not None:
        cfg["kafka"]["message.timeout.ms"] = timeout_ms
    if order_by is not None:
        cfg["outbox"]["backlog_order_by"] = order_by
    return cfg


def inbox_config(pg, broker, agg, topic, irng):
    """The inbox's settings for a run: the event topic into the inbox
    database, a group and a dead-letter topic of the run's own; the batch
    size drawn from irng (the assignment protocol is range,roundrobin:
    librdkafka 2.0.2 aborts a cooperative-sticky consumer stopped before
    its first assignment, and outboxd refuses it)."""
    return {
        "inbox": {"conninfo": pg.conninfo(INBOX_DB), "topics": topic,
                  "group": "chaos-inbox-%s" % agg,
                  "batch_max": irng.choice([10, 50, 200, 500])},
        "outbox": {"dlq_topic": "chaos.%s.inbox.dlq" % agg},
        "postgres": {"reconnect_max_backoff_ms": 1000},
        "kafka": {"bootstrap.servers": broker.bootstraps,
                  "topic.metadata.refresh.interval.ms": 1000,
                  "fetch.wait.max.ms": 100,
                  # a member killed with -9 stays in the group until its
                  # session times out: keep that short for the restarts
                  # (the mock cluster then assigns the partitions again
                  # about 5 s after a kill -9, 2 s after a SIGTERM; it
                  # never assigns them with 2000 ms)
                  "session.timeout.ms": 3000,
                  "heartbeat.interval.ms": 300,
                  # cooperative-sticky is refused with librdkafka 2.0.2
                  # (it aborts when stopped before its first assignment:
                  # seed 100066)
                  "partition.assignment.strategy": "range,roundrobin"},
        "http": {"listen": ""},
        "log": {"level": "info"},
    }


def watermarks(bootstraps, topic):
    """{partition: (low, high)} of topic."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstraps, "group.id": "chaos-wm",
                  "log_level": 3, "allow.auto.create.topics": False})
    try:
        md = c.list_topics(topic, timeout=20).topics[topic]
        return {p: c.get_watermark_offsets(TopicPartition(topic, p),
                                           timeout=20)
                for p in md.partitions}
    finally:
        c.close()


def check_broker_limit(bootstraps, topic, records):
    """Raises HarnessError when a partition of topic lost records to the
    mock broker's retention (its low watermark above 0) or came near its
    5 MB: the run's history is then not what the broker holds."""
    size = collections.Counter()
    for r in records:
        size[r["partition"]] += len(r["value"] or b"") + 100
    for p, (lo, hi) in watermarks(bootstraps, topic).items():
        if lo > 0 or size[p] > 0.9 * BROKER_PARTITION_BYTES:
            raise harness.HarnessError(
                "%s [%d] holds offsets %d..%d, about %d bytes: beyond the "
                "mock broker's %d bytes a partition, it drops the oldest "
                "records (make the workload smaller)"
                % (topic, p, lo, hi, size[p], BROKER_PARTITION_BYTES))


class InboxState:
    """What the inbox stored once caught up: rows {id: (topic, partition,
    kafka_offset, key, k, s)}, stored {(topic, partition): next_offset},
    hw {partition: high watermark} of the event topic, dead (its
    dead-letter topic's records), final_rc, log (its whole log),
    caught_up (seconds it took after the publisher stopped, None when it
    never did)."""

    def __init__(self):
        self.rows = {}
        self.stored = {}
        self.hw = {}
        self.dead = []
        self.final_rc = None
        self.log = ""
        self.caught_up = None
        self.topic = None


def inbox_stored(pg, group):
    """{(topic, partition): next_offset} stored for group (waits while the
    server is away)."""
    return dict(((t, p), n) for t, p, n in pg.sql(
        "SELECT topic, partition, next_offset FROM "
        "public.outboxd_inbox_offsets WHERE group_id = %s", (group,),
        dbname=INBOX_DB))


def quiesce_inbox(pg, broker, cfg, topic, inbox, injector):
    """Waits (restarting an inbox that exits) until the inbox's stored
    positions reach the event topic's high watermarks, stops it with
    SIGTERM and reads what it stored; returns an InboxState."""
    st = InboxState()
    st.topic = topic
    group = cfg["inbox"]["group"]
    st.hw = {p: hi for p, (lo, hi) in watermarks(broker.bootstraps,
                                                 topic).items()}
    want = {(topic, p): n for p, n in st.hw.items() if n > 0}
    t0 = time.monotonic()
    while time.monotonic() - t0 < INBOX_TIMEOUT:
        stored = inbox_stored(pg, group)
        if all(stored.get(k) == n for k, n in want.items()):
            st.caught_up = time.monotonic() - t0
            break
        injector.watch_inbox()
        time.sleep(0.2)
    st.final_rc = inbox.stop(60)
    st.log = inbox.log_text()
    st.stored = inbox_stored(pg, group)
    for row in pg.sql("SELECT id, topic, partition, kafka_offset, key, "
                      "payload->>'k', (payload->>'s')::bigint FROM "
                      "public.inbox", dbname=INBOX_DB):
        st.rows[row[0]] = row[1:]
    st.dead = read_topic(broker.bootstraps, cfg["outbox"]["dlq_topic"])
    return st


def read_topic(bootstraps, topic):
    """Every record of topic, read from the beginning up to the high
    watermark of each partition (what the broker holds once the producer
    is stopped), as harness.Consumer-style dicts."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstraps, "group.id": "chaos",
                  "enable.auto.commit": False, "log_level": 3,
                  "allow.auto.create.topics": False})
    try:
        md = c.list_topics(topic, timeout=20).topics[topic]
        want = {}
        for p in md.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p),
                                             timeout=20)
            if hi > lo:
                want[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in want])
        out, deadline = [], time.monotonic() + 60
        pos = {p: 0 for p in want}
        while any(pos[p] < want[p] for p in want):
            if time.monotonic() > deadline:
                raise harness.HarnessError("could not read %s to its end: "
                                           "%s of %s" % (topic, pos, want))
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            pos[m.partition()] = m.offset() + 1
            key = m.key()
            out.append({"topic": topic, "partition": m.partition(),
                        "offset": m.offset(),
                        # bytes that are not UTF-8 are a finding (the
                        # record's key is not its event's), not an error
                        "key": key.decode("utf-8", "replace")
                        if key is not None else None,
                        "value": m.value(),
                        "headers": list(m.headers() or [])})
        return out
    finally:
        c.close()


class HoldRun:
    """A hold_key run's releases: hw {partition: high watermark} of the
    event topic before them, held [(topic, key)] (outboxd_held_keys
    then), events (held events then, failed ones left out), crash
    ('none', 'crash_at': outboxd restarted with
    OUTBOXD_TEST_CRASH_AT=release-published, 'kill9': killed while the
    releases run; started again), results [(key, exit code, output)] of
    each `outboxd dlq release KEY --topic T`, tail (the Txn committed
    while they ran: the released keys' next events), left (held keys
    still there once drained again), seconds (how long the releases
    took)."""

    def __init__(self):
        self.hw = {}
        self.held = []
        self.events = 0
        self.crash = "none"
        self.results = []
        self.tail = None
        self.left = None
        self.seconds = 0.0


def held_keys(pg):
    """[(topic, key)] of outboxd_held_keys (the run's slot; none while
    outboxd has not made the table), not those released (their rows stay
    a day, marked released_through)."""
    if pg.sql("SELECT to_regclass('public.outboxd_held_keys')")[0][0] is None:
        return []
    return [(t, bytes(k).decode("utf-8")) for t, k in pg.sql(
        "SELECT topic, key FROM public.outboxd_held_keys WHERE "
        "slot_name = 'chaos' AND released_through IS NULL ORDER BY topic, key")]


def release_plan(hrng):
    """(crash, delay) of a hold_key run's releases, drawn before its
    workload (whose bad rows take the generator's later draws): crash
    'none' (one in two), 'crash_at' or 'kill9'; delay (s) from the release
    commands to the kill -9 of 'kill9'."""
    return (hrng.choice(["none", "none", "crash_at", "kill9"]),
            hrng.uniform(0.2, 1.5))


def release_holds(pg, broker, daemon, driver, topic, plan, log, clock):
    """At drain time (outboxd running, the slot confirmed to the end):
    reads the event topic's high watermarks and the held keys, releases
    each with `outboxd dlq release KEY --topic T` (as an operator would,
    all at once), commits the released keys' next events meanwhile, and,
    as plan (release_plan) says, has outboxd killed (-9) inside a release
    and started again (its marks stay; it goes on by itself). Returns a
    HoldRun."""
    hr = HoldRun()
    hr.crash, delay = plan
    hr.hw = {p: hi for p, (lo, hi) in watermarks(broker.bootstraps,
                                                 topic).items()}
    hr.held = held_keys(pg)
    if not hr.held:
        hr.crash = "none"
        return hr
    hr.events = pg.sql("SELECT count(*) FROM public.outboxd_held_events "
                       "WHERE slot_name = 'chaos' AND NOT failed")[0][0]
    t0, started = clock(), time.monotonic()
    base_env = dict(daemon.env or {})
    if hr.crash == "crash_at":
        daemon.stop(60)
        daemon.env = dict(base_env,
                          OUTBOXD_TEST_CRASH_AT="release-published")
        daemon.start()
    env = dict(os.environ)
    env.pop("OUTBOXD_TEST_CRASH_AT", None)
    procs = [(key, subprocess.Popen(
        [daemon.binary, "dlq", "release", key, "--topic", t, "-c",
         daemon.config_path], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=env))
        for t, key in hr.held]
    hr.tail = driver.tail(sorted({k for _, k in hr.held}))
    if hr.crash == "crash_at":
        try:
            rc = daemon.wait(30)
        except subprocess.TimeoutExpired:
            rc = "not killed within 30 s"
            daemon.stop(60)
        daemon.env = base_env
        log.add(t0, clock(), "release_crash", "rc=%s" % rc)
        daemon.start()
    elif hr.crash == "kill9":
        time.sleep(delay)
        t = clock()
        daemon.kill9()
        log.add(t, clock(), "release_kill9", "%.2f s after the releases"
                % delay)
        time.sleep(0.3)
        daemon.start()
    for key, p in procs:
        try:
            out, _ = p.communicate(timeout=RELEASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        hr.results.append((key, p.returncode, out.strip()))
    hr.seconds = time.monotonic() - started
    return hr


def drain(pg, slot, end, injector):
    """Waits (restarting an outboxd that exits) until the slot is
    confirmed to end; returns the confirmed position reached."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while True:
        row = pg.slot(slot)
        got = row["confirmed_flush_lsn_int"] if row else None
        if (got is not None and got >= end) or time.monotonic() > deadline:
            return got
        injector.watch()
        time.sleep(0.2)


def run_seed(parts, seed, seconds, keep, without=frozenset(), inbox=True,
             broker_faults=True, hold=None):
    """Runs one seed end to end (its workload lacking the features in
    without, and its WAL faults the walfaults.KINDS in without; with
    `outboxd inbox` unless inbox is False; with the broker-side faults
    unless broker_faults is False; with on_bad_event = hold_key when
    hold, as drawn (hold_of) when None, never with "hold" in without);
    returns its Result."""
    res = Result(seed)
    res.inbox = inbox
    res.without = frozenset(without)
    res.forced = bool(hold) and not hold_of(seed)
    hold = (hold_of(seed) if hold is None else hold) and \
        "hold" not in without
    res.hold = hold
    # The bad rows and the releases' draws: a generator of their own.
    hrng = random.Random("hold-%d" % seed)
    hrng.randrange(HOLD_ONE_IN)
    plan = release_plan(hrng)
    # The inbox's draws come from a generator of their own, so a seed's
    # workload and publisher faults are the same with and without it.
    irng = random.Random("inbox-%d" % seed)
    # So do the broker-side faults' (leader moves, retriable errors).
    brng = random.Random("broker-%d" % seed)
    # And the faults around the WAL (walfaults.py).
    wrng = random.Random("wal-%d" % seed)
    # And the slot faults (seeds from walfaults.SLOT_FROM on), whose runs
    # leave out what a recovery from the table cannot give back.
    slot_kinds, slot_schedule = walfaults.slot_plan(seed, seconds, without)
    if slot_kinds:
        without = frozenset(without) | walfaults.SLOT_WITHOUT
    hold = res.hold = hold and not slot_kinds
    if hold:
        without = frozenset(without) | HOLD_WITHOUT
    wal_kinds, wal_schedule, timeout_ms = walfaults.wal_plan(
        wrng, seconds, without)
    res.wal = wal_kinds | slot_kinds
    flog = faults.FaultLog()
    clock = Clock()
    started = time.monotonic()
    rng = random.Random(seed)
    decoder, table = dims(seed)
    # A database that is not UTF-8 (keys with a letter whose LATIN1 and
    # UTF-8 bytes differ) and UPDATEs that move rows: generators of their
    # own, so the other draws stay what they were.
    encoding = encoding_of(seed)
    mrng = random.Random("move-%d" % seed)
    parts.runs += 1
    agg = "c%d_%d" % (seed, parts.runs)
    workdir = tempfile.mkdtemp(prefix="chaos-%d-" % seed)
    res.dir = workdir
    pg = daemon = ibx = None
    try:
        conf = {"logical_decoding_work_mem": "'64kB'",
                "max_prepared_transactions": "10",
                "wal_sender_timeout": "'10s'"}
        if "slot_invalidate" in slot_kinds:
            conf["max_slot_wal_keep_size"] = walfaults.INVALIDATE_KEEP
        pg = walfaults.Primary(harness.PgCluster(workdir, extra_conf=conf,
                                                 encoding=encoding))
        pg.start()
        key_prefix = "k" if encoding == "UTF8" else "k\u00eb"
        Driver.setup_schema(pg, table == "partitioned",
                            str(REPO / "sql" / "outbox.sql"), key_prefix,
                            seq=bool(slot_kinds))
        if walfaults.wants_standby(wal_kinds):
            pg.add_standby(os.path.join(workdir, "standby"))
        broker = parts.broker
        topic = "outbox.event.%s" % agg
        broker.create_topic(topic, PARTITIONS)
        cfg = outboxd_config(pg, broker, "chaos", agg, decoder, rng,
                             timeout_ms, "seq" if slot_kinds and
                             table == "partitioned" else None)
        broker.create_topic(cfg["outbox"]["dlq_topic"], 2)
        if hold:
            cfg["outbox"]["on_bad_event"] = "hold_key"
        # With slot faults, a recovery point every second (test builds):
        # the fault waits for one; and retention on, deleting published
        # rows older than 2 s every half second, so a recovery must find
        # every row it needs among what retention left.
        if slot_kinds:
            cfg["outbox"]["retention"] = "2s"
        daemon = walfaults.Deployed(parts.outboxd, cfg, workdir, start=False,
                                    deploy="deploy" in wal_kinds, log=flog,
                                    clock=clock, env={
                                        "OUTBOXD_TEST_RECPOINT_MS": "1000",
                                        "OUTBOXD_TEST_RETENTION_MS": "500"}
                                    if slot_kinds else None)
        rc, out, err = daemon.run_cmd(["slot", "create"])
        if rc != 0:
            raise harness.HarnessError("outboxd slot create: %s %s"
                                       % (out, err))
        if inbox:
            pg.create_db(INBOX_DB)
            pg.run_file(str(REPO / "sql" / "inbox.sql"), INBOX_DB)
            icfg = inbox_config(pg, broker, agg, topic, irng)
            if "promote" in wal_kinds:
                # the promoted standby lacks what the inbox stored since
                # it stopped: a partition it never stored there is a
                # position mismatch (sql/README.md), read again from the
                # start (duplicates by id are not stored twice)
                icfg["inbox"]["on_position_mismatch"] = "earliest"
            broker.create_topic(icfg["outbox"]["dlq_topic"], 1)
            ibx = harness.Outboxd(parts.outboxd, icfg,
                                  os.path.join(workdir, "inbox"),
                                  command="inbox")
        daemon.start()
        rtt = rng.choice([0, 0, 5, 20, 100])
        broker.cmd("rtt all %d" % rtt)
        # With slot faults the workload keeps the partitions it detaches
        # (pg_partman's default), and detaches one only once its rows lie
        # behind the recovery point, as a retention of days does: a
        # partition dropped while the slot is lost, or detached with rows
        # past the point, makes a recovery halt, since its rows may be of
        # events not yet published.
        driver = Driver(pg, rng, agg, table == "partitioned", "chaos", clock,
                        without, key_prefix, hrng if hold else None,
                        keep_detached=bool(slot_kinds))
        clock.start()
        schedule = sorted(faults.plan(rng, seconds) + wal_schedule
                          + slot_schedule)
        if inbox:
            schedule = sorted(schedule + faults.inbox_plan(irng, seconds))
        topics = [(topic, PARTITIONS), (cfg["outbox"]["dlq_topic"], 2)]
        injector = faults.Injector(schedule, pg, broker, daemon, "chaos",
                                   clock, rtt, ibx, INBOX_DB, log=flog)
        injector.history = driver.history
        # The broker-side faults on a thread of their own, beside the
        # others (faults.py).
        side = faults.Injector(faults.broker_plan(brng, seconds, topics)
                               if broker_faults else [], pg, broker, daemon,
                               "chaos", clock, rtt, topics=topics,
                               log=injector.log, watching=False)
        res.faults = injector.log
        res.wall0 = clock.wall0

        def on_commit(txn):
            injector.commit_seen(txn)
            side.commit_seen(txn)
        driver.on_commit = on_commit
        injector.start()
        side.start()
        try:
            while clock() < seconds:
                driver.step()
                if mrng.random() < MOVE_CHANCE:
                    driver.move_rows(mrng)
                time.sleep(rng.expovariate(50))
        finally:
            side.stop()
            injector.stop()
        for inj in (injector, side):
            if inj.error is not None:
                raise inj.error
        injector.heal()
        driver.finish()
        end = driver.fence()
        confirmed = drain(pg, "chaos", end, injector)
        released = None
        if hold:
            # Release every held key as an operator would, then drain
            # again (the tail transaction) until no key is held.
            released = release_holds(pg, broker, daemon, driver, topic,
                                     plan, injector.log, clock)
            end = driver.fence()
            confirmed = drain(pg, "chaos", end, injector)
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while True:
                released.left = held_keys(pg)
                if not released.left or time.monotonic() > deadline:
                    break
                injector.watch()
                time.sleep(0.2)
        driver.close()
        pg.forget(driver.history)
        final_rc = daemon.stop(60)
        records = read_topic(broker.bootstraps, topic)
        check_broker_limit(broker.bootstraps, topic, records)
        dead = read_topic(broker.bootstraps, cfg["outbox"]["dlq_topic"])
        state = None
        if inbox:
            state = quiesce_inbox(pg, broker, icfg, topic, ibx, injector)
        res.report = checker.check(driver.history, records, dead,
                                   injector.log, daemon.log_text(),
                                   PARTITIONS, (end, confirmed, final_rc),
                                   state, released)
    except Exception:
        res.error = traceback.format_exc()
    finally:
        if daemon is not None:
            daemon.stop(30)
        if ibx is not None:
            ibx.stop(30)
        if pg is not None:
            for c in pg.clusters():
                c.stop("immediate")
        res.seconds = time.monotonic() - started
        _keep_or_remove(res, pg, workdir, keep)
    return res


def _keep_or_remove(res, pg, workdir, keep):
    """Copies a failed run's logs to keep/seed-N (res.dir then names it);
    removes the run's directory."""
    if not res.passed:
        dest = Path(keep) / ("seed-%d" % res.seed)
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        for f in Path(workdir).glob("outboxd-*.log"):
            shutil.copy(f, dest)
        for f in Path(workdir).glob("inbox/outboxd-*.log"):
            shutil.copy(f, dest / ("inbox-" + f.name))
        for c in pg.clusters() if pg is not None else []:
            if os.path.exists(c.logfile):
                shutil.copy(c.logfile, dest / ("postgres-%d.log" % c.port))
        res.dir = str(dest)
    for c in pg.clusters() if pg is not None else []:
        c.destroy()
    shutil.rmtree(workdir, ignore_errors=True)


def print_result(res, fault_log=False):
    """One line per seed; a failure adds its findings, fault log and the
    command that replays it; a pass its fault log when fault_log."""
    decoder, table = dims(res.seed)
    head = "seed %d (%s, %s%s%s%s)" % (
        res.seed, decoder, table,
        ", LATIN1" if encoding_of(res.seed) != "UTF8" else "",
        "".join(", " + k for k in sorted(res.wal)),
        ", hold" if res.hold else "")
    if res.error is not None:
        print("%s: ERROR in %.1f s\n%s" % (head, res.seconds, res.error))
        if res.faults is not None:
            print("\n".join(res.faults.lines()))
            print("  logs: %s" % res.dir)
        return
    s = res.report.stats
    kinds = collections.Counter(res.faults.kinds())
    print("%s: %s in %.1f s: %d events in %d txns, %d records, %d dup, "
          "%d dead letters, %s%s%s%s; faults %s" % (
              head, "PASS" if res.passed else "FAIL", res.seconds,
              s["events"], s["committed_txns"], s["records"],
              s["duplicated_events"], s["dead_letters"],
              "%d keys held (%d bad rows, %d refused), %d events held%s, "
              "released in %.1f s, " % (
                  s["held_keys"], s["bad_rows"], s["refused_alone"],
                  s["held_events"], " (and %d before their key's failure, "
                  "after a re-read, %d of them not published before)" % (
                      s["held_early"], s["held_early_late"])
                  if s["held_early"] else "", s["release_seconds"])
              if res.hold else "",
              "%d events past a switch point (%d published), " % (
                  s["forked_events"], s["beyond_fork_published"])
              if s["forked_events"] else "",
              "%d slot recoveries (%d rows deleted by retention), " % (
                  s["recoveries"], s.get("retained_away", 0))
              if s["recoveries"] else "",
              "%d inbox rows (caught up in %s)" % (
                  s["inbox_rows"], s["inbox_caught_up"])
              if res.inbox else "no inbox",
              ", ".join("%s x%d" % kv for kv in sorted(kinds.items()))
              or "none"))
    if res.passed:
        if fault_log:
            print("\n".join(res.faults.lines()))
            for n in res.report.notes:
                print("  note: %s" % n)
        return
    for f in res.report.findings:
        print(f.render())
    print("  fault log (run seconds%s):" % (
        "; 0 is %s UTC in the logs" % (
            time.strftime("%H:%M:%S", time.gmtime(res.wall0))
            + (".%03d" % (res.wall0 % 1 * 1000)))
        if res.wall0 is not None else ""))
    print("\n".join(res.faults.lines()))
    for n in res.report.notes:
        print("  note: %s" % n)
    print("  logs: %s" % res.dir)
    print("  replay: python3 tests/chaos/chaos.py --seed %d%s%s" % (
        res.seed, " --without " + ",".join(sorted(res.without))
        if res.without else "", " --only hold" if res.forced else ""))


def fixed_seeds():
    """The seeds of seeds.txt (`seed [without=a,b]  # note` lines):
    [(seed, frozenset of what the seed runs without)]."""
    out = []
    for line in SEEDS_FILE.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            out.append((int(words[0]), frozenset(
                w for word in words[1:]
                for w in word.split("=", 1)[1].split(",")
                if word.startswith("without="))))
    return out


def summary(results, started):
    """The soak summary: runs, events, faults of each kind, findings."""
    kinds, findings, events = collections.Counter(), [], 0
    forked = collections.Counter()
    for r in results:
        if r.faults is not None:
            kinds.update(r.faults.kinds())
        if r.report is not None:
            events += r.report.stats["events"]
            forked["events"] += r.report.stats["forked_events"]
            forked["published"] += r.report.stats["beyond_fork_published"]
            findings += [(r.seed, f) for f in r.report.findings]
        elif r.error is not None:
            findings.append((r.seed, checker.Finding(
                "error", r.error.strip().splitlines()[-1])))
    print("\n=== chaos summary (%.0f s)" % (time.monotonic() - started))
    print("histories: %d, committed events: %d, events past a switch "
          "point: %d (%d published)" % (len(results), events,
                                        forked["events"],
                                        forked["published"]))
    print("faults: %s" % (", ".join("%s %d" % kv for kv in
                                    sorted(kinds.items())) or "none"))
    print("findings: %d" % len(findings))
    for seed, f in findings:
        print("  seed %d: %s: %s" % (seed, f.kind, f.summary))
    duplicates_table(results)


def duplicates_table(results):
    """Duplicates by decoder and table kind, next to what may cause them
    (tests/README.md, "Duplicates per crash"): kill -9 at a random moment,
    kill -9 right after a commit (often a large one: the fault aims at
    acknowledged events not yet confirmed), other crashes (in an outage,
    an exit), records expired and sent again, producers recreated, slot
    re-reads for new partitions, promotions, slot recoveries. A history
    with none of those and duplicates would have been a finding."""
    causes = ("kill9", "kill9_after_commit", "outage_kill9", "exit",
              "expiry", "recreations", "rereads", "promotions", "recoveries")
    rows = collections.defaultdict(collections.Counter)
    for r in results:
        if r.report is None:
            continue
        s = r.report.stats
        row = rows[dims(r.seed)]
        row["histories"] += 1
        row["events"] += s["events"]
        row["extra_copies"] += s["extra_copies"]
        for k in causes:
            row[k] += s[k]
        if not any(s[k] for k in ("expiry", "recreations", "rereads",
                                  "promotions", "recoveries")):
            row["crash_only_crashes"] += s["crashes"]
            row["crash_only_copies"] += s["extra_copies"]
    if not rows:
        return
    print("duplicates | decoder, table | histories | events | extra copies "
          "| kill -9 | kill -9 after a commit | other crashes | expiries "
          "| producers recreated | re-reads | promotions | slot recoveries "
          "| extra copies per crash, histories with crashes only |")
    for (decoder, table), row in sorted(rows.items()):
        only = row["crash_only_crashes"]
        print("duplicates | %s, %s | %d | %d | %d | %d | %d | %d | %d | %d "
              "| %d | %d | %d | %s |" % (
                  decoder, table, row["histories"], row["events"],
                  row["extra_copies"], row["kill9"],
                  row["kill9_after_commit"],
                  row["outage_kill9"] + row["exit"], row["expiry"],
                  row["recreations"], row["rereads"], row["promotions"],
                  row["recoveries"],
                  "%.0f (%d crashes)" % (row["crash_only_copies"] / only,
                                         only) if only else "n/a"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, action="append",
                    help="run this seed (repeatable)")
    ap.add_argument("--seeds", type=int, help="soak: run N new seeds")
    ap.add_argument("--minutes", type=float,
                    help="soak: run new seeds for M minutes")
    ap.add_argument("--start", type=int,
                    help="soak: first seed (default: random)")
    ap.add_argument("--seconds", type=float, default=10,
                    help="how long each run's workload lasts (default 10)")
    ap.add_argument("--only", default="",
                    help="soak: only seeds of these dimensions and WAL "
                    "faults, e.g. wal2json or pgoutput,partitioned or "
                    "promote (%s, hold: on_bad_event = hold_key); with "
                    "--seed, `hold` runs those seeds with hold_key"
                    % ", ".join(walfaults.KINDS + walfaults.SLOT_KINDS))
    ap.add_argument("--without", default="",
                    help="workload features and WAL faults to leave out, "
                    "comma-separated (%s, hold): steers around a known "
                    "defect while it is being fixed" % ", ".join(
                        sorted(FEATURES) + list(walfaults.KINDS)
                        + list(walfaults.SLOT_KINDS)))
    ap.add_argument("--no-inbox", action="store_true",
                    help="leave out `outboxd inbox` and its faults (the "
                    "publisher's draws stay the same)")
    ap.add_argument("--no-broker-faults", action="store_true",
                    help="leave out the broker-side faults (leader moves, "
                    "retriable errors, one slow broker; the other draws "
                    "stay the same)")
    ap.add_argument("--fault-log", action="store_true",
                    help="print the fault log of passing seeds too")
    ap.add_argument("--keep", default="/tmp/outboxd-chaos",
                    help="where failed runs' logs are kept")
    args = ap.parse_args(argv)

    build = Path(os.environ.get("OUTBOXD_BUILD", "build"))
    build = build if build.is_absolute() else REPO / build
    soak = args.seeds is not None or args.minutes is not None
    fixed = {}
    if args.seed:
        seeds = iter(args.seed)
    elif soak:
        # (from walfaults.SLOT_FROM on, seeds may draw slot faults too)
        first = args.start if args.start is not None \
            else random.randrange(10 ** 7)
        only = set(filter(None, args.only.split(",")))
        seeds = (s for s in range(first, first + 10 ** 9)
                 if only <= set(dims(s)) | walfaults.wal_plan(
                     random.Random("wal-%d" % s), args.seconds,
                     HOLD_WITHOUT if hold_of(s) else ())[0]
                 | walfaults.slot_plan(s, args.seconds)[0]
                 | ({"hold"} if hold_of(s) else set()))
        if args.seeds:
            seeds = (s for _, s in zip(range(args.seeds), seeds))
    else:
        fixed = dict(fixed_seeds())
        seeds = iter(fixed)
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None

    without = set(filter(None, args.without.split(",")))
    known = FEATURES | set(walfaults.KINDS) | set(walfaults.SLOT_KINDS) \
        | {"hold"}
    # --seed N --only hold: those seeds with hold_key, drawn or not
    force_hold = True if args.seed and "hold" in args.only.split(",") \
        else None
    for w in [without] + list(fixed.values()):
        if not w <= known:
            ap.error("--without (or seeds.txt): unknown feature(s) %s"
                     % ", ".join(sorted(w - known)))
    started = time.monotonic()
    os.makedirs(args.keep, exist_ok=True)
    results = []
    parts = None
    try:
        parts = Parts(build, args.keep)
    except Exception:
        err = traceback.format_exc()
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        if parts is None:
            res = Result(seed)
            res.error = err
        else:
            res = run_seed(parts, seed, args.seconds, args.keep,
                           without | fixed.get(seed, frozenset()),
                           not args.no_inbox, not args.no_broker_faults,
                           force_hold)
        print_result(res, args.fault_log)
        sys.stdout.flush()
        results.append(res)
    if parts is not None:
        parts.close()
    if soak:
        summary(results, started)
    passed = sum(1 for r in results if r.passed)
    print("chaos: %d passed, %d failed" % (passed, len(results) - passed))
    return 0 if results and passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
