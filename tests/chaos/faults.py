"""Faults of a chaos run: a seeded schedule and the thread that injects it.

Faults run one at a time, each healed before the next (a broker outage
ends with `up all`; a killed outboxd is started again), so the system is
always one fault away from healthy. Between faults the thread watches
outboxd: an exit nobody asked for is logged (kind 'exit') with its code
and the daemon is started again, so the run goes on and the checker can
judge the exit.

The publisher's produce errors (apikey 0) are UNKNOWN_SERVER_ERROR for a
failed batch, INVALID_RECORD and MSG_SIZE_TOO_LARGE for a record's own
error.

A third schedule, drawn from a generator of its own (broker_plan, seeded
with "broker-N"), so the publisher's and the inbox's draws stay what they
were, runs on an injector thread of its own beside the first, so it holds
none of their faults back (merged, its faults were mostly crowded out by
outages and the inbox's waits): broker-side faults while requests are in
flight (librdkafka's default of 5 a broker, linger.ms 1), which the system
rides out by itself, so it stays one fault of the first schedule away from
healthy. leader_move
moves the leadership of some partitions of the event topic and the
dead-letter topic, one to three times in a burst; retriable_errors fails
the next 1 to 5 ProduceRequests with a retriable code
(NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT); broker_rtt slows one
broker for a while. Each waits (at most 2 s) for a commit of at least 100
events, so the stream is busy; leader_move and retriable_errors may make
every broker 20 to 100 ms slow meanwhile and 1 s after, so requests pile
up in flight. ob-mockbroker refuses such a batch unwritten
and every batch sent behind it as out of order (tests/broker/seqcheck.h),
as Kafka does; on Kafka a REQUEST_TIMED_OUT or
NOT_ENOUGH_REPLICAS_AFTER_APPEND batch may also have been written, and the
idempotent producer's retry of it is then answered as a duplicate and not
written again: neither outcome allows a duplicate or a reorder.

With an inbox (`outboxd inbox` consuming the event topic into a second
database of the cluster), a second schedule drawn from the inbox's own
random generator (inbox_plan) is merged into the first, so the
publisher's draws, and what a seed meant before, stay the same. Its
faults: kill -9 and SIGTERM of the inbox (started again), the inbox's
database connection terminated, every broker down with a kill -9 and
restart of the inbox halfway through, and the shared ones (every broker
down, Postgres restarted immediate), which hit both daemons.

The faults of the world around the WAL (a standby promoted after it
lagged, a standby bounced, message expiry across an outage: walfaults.py)
come from a fourth generator (seeded with "wal-N") and are merged into
the one-at-a-time schedule too; so are the slot faults (the slot dropped
or invalidated, recovered from the outbox table: walfaults.slot_plan,
seeded with "slot-N", seeds from walfaults.SLOT_FROM on)."""

import threading
import time

import harness
from walfaults import WalFaults

KINDS = {
    # kind: weight
    "kill9": 3,
    "kill9_after_commit": 2,
    "sigterm": 1,
    "pg_fast": 1,
    "pg_immediate": 1,
    "walsender": 2,
    "broker_down": 2,
    "broker_slow": 1,
    "outage_kill9": 1,
    "batch_error": 1,
    "record_error": 1,
}
INBOX_KINDS = {
    "inbox_kill9": 3,
    "inbox_sigterm": 1,
    "inbox_conn": 2,
    "inbox_outage_kill9": 1,
    "broker_down": 1,
    "pg_immediate": 1,
}
BROKER_KINDS = {
    "leader_move": 3,
    "retriable_errors": 3,
    "broker_rtt": 1,
}
RETRIABLE_CODES = ("NOT_LEADER_FOR_PARTITION", "NOT_ENOUGH_REPLICAS",
                   "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT")
BROKERS = 3
# The brokers' response delay (ms) while a leader_move or retriable_errors
# strikes (and 1 s after), so requests pile up in flight (up to 5 a broker):
# with a quick broker a request is mostly answered before the next is sent.
# (An idempotent producer sending a steady stream of 2,000 records/s, 3
# requests failed: 3 to 5 batches behind them refused as out of order at
# 5 to 50 ms, none at 0 or 100 ms.)
PILE_UP_MS = (0, 5, 20, 50)
BATCH_CODES = ("UNKNOWN", "INVALID_RECORD", "MSG_SIZE_TOO_LARGE")
RECORD_CODES = ("INVALID_RECORD", "MSG_SIZE_TOO_LARGE")
# Which commit a kill9_after_commit waits for: any, one of at least 100
# events (long to publish), or one whose last statement before COMMIT was
# a non-transactional message of another prefix or of the outbox prefix
# (two kinds of positions meet there).
TRIGGERS = {
    "any": lambda t: bool(t.events),
    "large": lambda t: len(t.events) >= 100,
    "after-nontx": lambda t: t.trailer == "nontx-other" and bool(t.events),
    "after-bad": lambda t: t.trailer == "nontx-bad" and bool(t.events),
}


def plan(rng, duration):
    """A schedule [(at seconds, kind, arg)] for a workload of about
    duration seconds: 2 to 6 faults. arg is a delay (s) for kill9,
    sigterm, broker_down and outage_kill9, (trigger, delay) for
    kill9_after_commit (TRIGGERS), (ms, seconds) for broker_slow,
    (code, count) for produce errors."""
    out = []
    for _ in range(rng.randint(2, 6)):
        kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
        if kind == "batch_error":
            arg = (rng.choice(BATCH_CODES), 1)
        elif kind == "record_error":
            arg = (rng.choice(RECORD_CODES), rng.randint(2, 3))
        elif kind in ("broker_down", "outage_kill9"):
            arg = rng.uniform(1.0, 4.0)
        elif kind == "broker_slow":
            arg = (rng.choice([100, 200, 400]), rng.uniform(1.0, 4.0))
        elif kind == "kill9_after_commit":
            arg = (rng.choice(list(TRIGGERS)), rng.uniform(0.0, 0.4))
        else:
            arg = rng.uniform(0.0, 0.5)
        out.append((rng.uniform(0.3, duration), kind, arg))
    return sorted(out)


def inbox_plan(rng, duration):
    """The inbox's schedule [(at seconds, kind, arg)]: 1 to 4 faults of
    INBOX_KINDS; arg is a delay (s) for inbox_kill9 and inbox_sigterm, an
    outage's length (s) for broker_down and inbox_outage_kill9."""
    out = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choices(list(INBOX_KINDS), list(INBOX_KINDS.values()))[0]
        if kind in ("broker_down", "inbox_outage_kill9"):
            arg = rng.uniform(1.0, 4.0)
        else:
            arg = rng.uniform(0.0, 0.5)
        out.append((rng.uniform(0.3, duration), kind, arg))
    return sorted(out)


def broker_plan(rng, duration, topics):
    """The broker-side schedule [(at seconds, kind, arg)]: 1 to 3 faults
    of BROKER_KINDS. topics: [(topic, partitions)] whose leaders may move.
    arg is, for leader_move, (burst, ms): a burst [(delay s, [(topic,
    partition, rank)])] (each move to another broker than the one the
    burst left it on; leaders start at partition mod 3 + 1, ob-mockbroker's
    `topic`) while every broker answers ms late; for retriable_errors
    (code, count, ms); for broker_rtt (broker, ms, seconds)."""
    out = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choices(list(BROKER_KINDS),
                           list(BROKER_KINDS.values()))[0]
        if kind == "leader_move":
            parts = [(t, p) for t, n in topics for p in range(n)]
            burst = []
            for _ in range(rng.randint(1, 3)):
                picked = rng.sample(parts, rng.randint(1, len(parts)))
                burst.append((rng.uniform(0.0, 0.3),
                              [(t, p, rng.randint(1, BROKERS - 1))
                               for t, p in picked]))
            arg = (burst, rng.choice(PILE_UP_MS))
        elif kind == "retriable_errors":
            arg = (rng.choice(RETRIABLE_CODES), rng.randint(1, 5),
                   rng.choice(PILE_UP_MS))
        else:
            arg = (rng.randint(1, BROKERS), rng.choice([50, 200, 500]),
                   rng.uniform(0.5, 2.0))
        out.append((rng.uniform(0.3, duration), kind, arg))
    return sorted(out)


# Held while a fault sets the brokers' response delays (broker_slow, and
# the broker-side faults on their own thread), so one does not undo
# another's.
SLOW = threading.Lock()


class FaultLog:
    """Every fault injected and every unexpected exit: entries (t_start,
    t_end, kind, detail, arg), thread-safe."""

    def __init__(self):
        self.entries = []
        self._lock = threading.Lock()

    def add(self, t0, t1, kind, detail="", arg=None):
        with self._lock:
            self.entries.append((t0, t1, kind, detail, arg))

    def kinds(self):
        return [e[2] for e in self.entries]

    def count(self, kind):
        return sum(1 for k in self.kinds() if k == kind)

    def lines(self):
        return ["  %7.2f..%7.2f  %-13s %s" % e[:4]
                for e in sorted(self.entries, key=lambda e: e[0])]

    def near(self, t0, t1):
        """Entries that overlap [t0, t1]."""
        return [e for e in self.entries if e[1] >= t0 and e[0] <= t1]

    def produce_errors(self, codes):
        """How many produce requests were set to fail with one of codes."""
        return sum(e[4][1] for e in self.entries
                   if e[2] in ("batch_error", "record_error")
                   and e[4][0] in codes)


class Injector(WalFaults, threading.Thread):
    """Runs schedule against the run's parts (pg: walfaults.Primary,
    broker: harness.MockBroker, daemon: harness.Outboxd, slot name) until
    stopped; clock() gives the run time; rtt is the brokers' response
    delay (ms) between faults; history (set before start) is the
    workload's. heal() afterwards leaves everything up."""

    def __init__(self, schedule, pg, broker, daemon, slot, clock, rtt=0,
                 inbox=None, inbox_db=None, topics=(), log=None,
                 watching=True):
        super().__init__(daemon=True)
        # A second injector beside the first (the broker-side schedule)
        # shares its log and leaves the daemons to it (watching False).
        self.watching = watching
        # {(topic, partition): broker} as ob-mockbroker's `topic` made them
        self.leaders = {(t, p): p % BROKERS + 1
                        for t, n in topics for p in range(n)}
        self.schedule = list(schedule)
        self.inbox = inbox          # harness.Outboxd of `outboxd inbox`
        self.inbox_db = inbox_db    # the inbox's database name
        self.pg = pg
        self.broker = broker
        self.daemon = daemon
        self.slot = slot
        self.clock = clock
        self.rtt = rtt
        self.log = log if log is not None else FaultLog()
        self.history = None
        self.error = None
        self._halt = threading.Event()
        self._commits = []
        self._committed = threading.Condition()

    def stop(self):
        """Ends the thread after the fault in progress."""
        self._halt.set()
        self.join(180)

    def run(self):
        try:
            for at, kind, arg in self.schedule:
                while not self._halt.is_set() and self.clock() < at:
                    self.watch()
                    self._halt.wait(0.1)
                if self._halt.is_set():
                    return
                t0 = self.clock()
                detail = getattr(self, "_" + kind)(arg)
                self.log.add(t0, self.clock(), kind, detail or "", arg)
            while not self._halt.is_set():
                self.watch()
                self._halt.wait(0.1)
        except BaseException as e:  # reported by the run
            self.error = e

    def commit_seen(self, txn):
        """The workload's commit hook: txn committed just now."""
        with self._committed:
            self._commits.append(txn)
            self._committed.notify_all()

    def watch(self):
        """Logs and restarts an outboxd (or inbox) that exited by
        itself (unless not watching)."""
        if not self.watching:
            return
        self._watch(self.daemon, "exit")
        self.watch_inbox()

    def watch_inbox(self):
        """Logs ('inbox-exit') and restarts an inbox that exited by
        itself."""
        if self.inbox is not None and self.watching:
            self._watch(self.inbox, "inbox-exit")

    def _watch(self, d, kind):
        if d.proc is not None and not d.running():
            t = self.clock()
            tail = d.log_tail(600).strip().splitlines()[-3:]
            self.log.add(t, t, kind, "rc=%s; %s" % (d.proc.returncode,
                                                   " | ".join(tail)))
            time.sleep(0.5)
            d.start()

    def heal(self):
        """Everything up: broker up, no pending produce errors, Postgres
        running, outboxd running."""
        for c in ("up all", "rtt all 0", "clear 0"):
            self.broker.cmd(c)
        if not self.pg.running:
            self.pg.start()
        self.watch()

    # -- the faults ---------------------------------------------------------

    def _kill9(self, delay):
        self.daemon.kill9()
        time.sleep(delay)
        self.daemon.start()

    def _await_commit(self, trigger, within=5.0):
        """The next commit the trigger picks (TRIGGERS), waiting for one
        at most within seconds; None when none came."""
        picks = TRIGGERS[trigger]
        deadline = time.monotonic() + within
        with self._committed:
            self._commits.clear()
            while not any(picks(t) for t in self._commits):
                left = deadline - time.monotonic()
                if left <= 0 or self._halt.is_set():
                    return None
                self._committed.wait(min(left, 0.2))
            return next(t for t in self._commits if picks(t))

    def _kill9_after_commit(self, arg):
        """kill -9 delay seconds after the next commit the trigger picks
        (waiting for one at most 5 s): a moment when that transaction is
        being published."""
        trigger, delay = arg
        txn = self._await_commit(trigger)
        if txn is None:
            return "no %s commit came" % trigger
        time.sleep(delay)
        self._kill9(0)
        return "%.0f ms after %s committed (%s, %d events)" % (
            delay * 1000, txn.name, trigger, len(txn.events))

    def _sigterm(self, delay, d=None):
        d = d or self.daemon
        d.terminate()
        try:
            rc = d.wait(60)
        except Exception:
            d.kill9()
            rc = "hung (killed after 60 s)"
        time.sleep(delay)
        d.start()
        return "rc=%s" % rc

    def _pg_restart(self, mode):
        try:
            self.pg.restart(mode)
            return ""
        except harness.HarnessError as e:
            self.pg.running = True
            self.pg.stop("immediate")
            self.pg.start()
            return "pg_ctl stop -m %s failed, restarted immediate: %s" % (
                mode, str(e).splitlines()[0])

    def _pg_fast(self, _):
        return self._pg_restart("fast")

    def _pg_immediate(self, _):
        return self._pg_restart("immediate")

    def _walsender(self, _):
        rows = self.pg.sql("SELECT pg_terminate_backend(active_pid) FROM "
                           "pg_replication_slots WHERE slot_name = %s "
                           "AND active_pid IS NOT NULL", (self.slot,))
        return "terminated %d" % len(rows)

    def _broker_down(self, seconds):
        self.broker.cmd("down all")
        time.sleep(seconds)
        self.broker.cmd("up all")
        return "%.1f s" % seconds

    def _outage_kill9(self, seconds):
        """Every broker down; outboxd killed and started again halfway
        through the outage (what it confirmed before the outage is all
        it may skip)."""
        self.broker.cmd("down all")
        time.sleep(seconds / 2)
        self.daemon.kill9()
        self.daemon.start()
        time.sleep(seconds / 2)
        self.broker.cmd("up all")
        return "%.1f s" % seconds

    def _broker_slow(self, arg):
        """Every broker answers ms late for a while: acknowledgements lag
        far behind the stream."""
        ms, seconds = arg
        with SLOW:
            self.broker.cmd("rtt all %d" % ms)
            time.sleep(seconds)
            self.broker.cmd("rtt all %d" % self.rtt)
        return "%d ms for %.1f s" % (ms, seconds)

    def _batch_error(self, arg):
        code, count = arg
        self.broker.cmd("error 0 %s %d" % (code, count))
        return "%s x%d" % (code, count)

    def _record_error(self, arg):
        return self._batch_error(arg)

    # -- the inbox's faults -------------------------------------------------

    def _inbox_moving(self, within=3.0):
        """Waits (at most within seconds) until the inbox stores a
        transaction (its stored positions move): a moment when it is
        consuming. Returns what it saw."""
        q = ("SELECT coalesce(sum(next_offset), 0) FROM "
             "public.outboxd_inbox_offsets WHERE group_id = %s")
        group = self.inbox.config["inbox"]["group"]
        last, deadline = None, time.monotonic() + within
        while time.monotonic() < deadline and not self._halt.is_set():
            try:
                now = self.pg.sql(q, (group,), dbname=self.inbox_db)[0][0]
            except Exception:
                now = None
            if last is not None and now is not None and now != last:
                return "while storing (at %d)" % now
            last = now
            time.sleep(0.02)
        return "idle"

    def _inbox_kill9(self, delay):
        """kill -9 of the inbox while it stores (when it does within 3 s),
        started again delay seconds later."""
        seen = self._inbox_moving()
        self.inbox.kill9()
        time.sleep(delay)
        self.inbox.start()
        return seen

    def _inbox_sigterm(self, delay):
        return self._sigterm(delay, self.inbox)

    def _inbox_conn(self, _):
        """pg_terminate_backend of the inbox's connection(s), while it
        stores (when it does within 3 s)."""
        seen = self._inbox_moving()
        try:
            rows = self.pg.sql("SELECT pg_terminate_backend(pid) FROM "
                               "pg_stat_activity WHERE datname = %s AND "
                               "pid <> pg_backend_pid()", (self.inbox_db,))
        except Exception as e:  # the server restarting: nothing to end
            return "failed: %s" % str(e).splitlines()[0][:80]
        return "terminated %d %s" % (len(rows), seen)

    def _inbox_outage_kill9(self, seconds):
        """Every broker down; the inbox killed and started again halfway
        through (it joins its group while no broker answers)."""
        self.broker.cmd("down all")
        time.sleep(seconds / 2)
        self.inbox.kill9()
        self.inbox.start()
        time.sleep(seconds / 2)
        self.broker.cmd("up all")
        return "%.1f s" % seconds

    # -- the broker-side faults ---------------------------------------------

    def _busy(self):
        """Waits for a commit of at least 100 events (at most 2 s, so
        the schedule's later faults still come before the workload ends):
        the producer then has many requests in flight. Says what it
        saw."""
        txn = self._await_commit("large", 2.0)
        return "after %s (%d events)" % (txn.name, len(txn.events)) \
            if txn is not None else "no large commit came"

    def _piled_up(self, ms, strike):
        """Every broker ms late (when ms), then a wait for a busy stream,
        strike(), 1 s more of it, the usual delay again. Says what it saw
        and how many batches the broker refused as out of order meanwhile
        (sent behind a failed one)."""
        before = int(self.broker.cmd("refused").split()[1])
        with SLOW:   # not while broker_slow sets the delays
            if ms:
                self.broker.cmd("rtt all %d" % ms)
            try:
                seen = self._busy()
                what = strike()
                self._halt.wait(1.0)   # cut short when the workload ends
            finally:
                if ms:
                    self.broker.cmd("rtt all %d" % self.rtt)
        after = int(self.broker.cmd("refused").split()[1])
        return "%s, %s, rtt %d ms, %d refused out of order" % (
            what, seen, ms, after - before)

    def _leader_move(self, arg):
        """Moves partition leaders, a burst of moves delay seconds apart,
        while a large transaction is being published. A move names the
        broker by its rank among the two that do not lead the partition
        now (1 or 2), so it always moves."""
        burst, ms = arg

        def strike():
            moved = []
            for delay, moves in burst:
                time.sleep(delay)
                for t, p, rank in moves:
                    now = self.leaders[(t, p)]
                    to = [b for b in range(1, BROKERS + 1) if b != now]
                    self.broker.cmd("leader %s %d %d" % (t, p, to[rank - 1]))
                    self.leaders[(t, p)] = to[rank - 1]
                moved.append(len(moves))
            return "%s partitions moved" % "+".join(map(str, moved))
        return self._piled_up(ms, strike)

    def _retriable_errors(self, arg):
        """The next count ProduceRequests fail with a retriable code while
        a large transaction is being published."""
        code, count, ms = arg

        def strike():
            self.broker.cmd("error 0 %s %d" % (code, count))
            return "%s x%d" % (code, count)
        return self._piled_up(ms, strike)

    def _broker_rtt(self, arg):
        """One broker answers ms late for a while."""
        b, ms, seconds = arg
        seen = self._busy()
        with SLOW:
            self.broker.cmd("rtt %d %d" % (b, ms))
            self._halt.wait(seconds)
            self.broker.cmd("rtt %d %d" % (b, self.rtt))
        return "broker %d %d ms for %.1f s, %s" % (b, ms, seconds, seen)
