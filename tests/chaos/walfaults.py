"""The world around the WAL: a hot standby, its promotion after it lagged,
message expiry across a broker and Postgres outage, and a deployment loop.

A run's WAL plan comes from a generator of its own (wal_plan, seeded with
"wal-N"), so the workload's, the publisher's, the inbox's and the
broker-side draws of a seed stay what they were. It says which of KINDS
the run gets:

- promote: the run has a hot standby; once, the standby is stopped (with
  a copy of the logical slot as Patroni gives a replica on PostgreSQL 15:
  the slot's files after a CHECKPOINT, and the snapshots logical decoding
  serialized), timeline 1 goes on for 1 to 3 s (outboxd publishes and
  confirms what the standby never gets), the primary is killed (-9) and
  the standby started and promoted. outboxd, on a multi-host conninfo
  with target_session_attrs=read-write, goes on in the same process;
- standby_bounce: the run has a hot standby; it is stopped (fast or
  immediate) for 1 to 4 s and started again while events stream;
- expiry: outboxd runs with kafka.message.timeout.ms 3000 to 5000; once,
  every broker goes down, then Postgres (fast stop), the timeout passes,
  the brokers come back, then Postgres;
- deploy: before each start of outboxd (the first and every restart), the
  harness runs `outboxd slot create --if-not-exists` as a deployment
  script would, and logs its exit code (kind 'deploy'; the slot is
  healthy throughout, so anything but 0 is a finding, except while the
  slot is lost, in runs with the slot faults below: then exit 1 naming
  the loss).

The slot faults (SLOT_KINDS, from a sixth generator seeded with "slot-N",
drawn only by seeds from SLOT_FROM on, so every lower seed keeps the
history it had): outboxd must recover its slot from the outbox table
(postgres.on_slot_lost = recover) and lose nothing.

- slot_drop: the slot dropped (its walsender terminated first, again
  until the drop succeeds) while outboxd streams a large transaction, or
  while it is stopped (kill -9 or SIGTERM, started again after the drop);
- slot_invalidate: the cluster runs with max_slot_wal_keep_size =
  INVALIDATE_KEEP; WAL of another table is written, switched and
  checkpointed until the slot's wal_status is 'lost', while outboxd is
  stopped (kill -9 or SIGTERM) or while every broker is down (outboxd
  confirms nothing, so its walsender is terminated and the slot
  invalidated under it).

A recovery publishes the rows past the recovery point again: the table
must hold every event not yet published, so such a run's workload writes
no outbox messages, no bad messages, deletes no outbox rows and moves none
(SLOT_WITHOUT; chaos.py), and the fault waits until a point is stored.

Primary is the cluster the run's parts talk to: whichever server is the
primary now. WalFaults holds the faults; faults.Injector runs them."""

import os
import random
import re
import time

import harness

KINDS = ("promote", "standby_bounce", "expiry", "deploy")
# How often a run draws each kind: a standby costs a few seconds a run.
ODDS = {"promote": 0.2, "standby_bounce": 0.15, "expiry": 0.25,
        "deploy": 0.5}
STANDBY_SLOT = "chaos_standby"
KILLED = re.compile(r"primary killed at ([0-9.]+) s")
SLOT_KINDS = ("slot_drop", "slot_invalidate")
# Seeds below SLOT_FROM draw no slot fault (their histories stay what
# they were when the slot faults were added).
SLOT_FROM = 1000000
SLOT_ODDS = {"slot_drop": 0.3, "slot_invalidate": 0.2}
# What a run with a slot fault leaves out: everything the outbox table
# cannot give back (events as logical messages, rows deleted or moved:
# deploy/README.md, "Recovering from a lost or invalidated slot"), and a
# promotion (its own loss of the slot's position).
SLOT_WITHOUT = frozenset({"outbox-messages", "bad-messages", "outbox-deletes",
                          "moves", "promote"})
# The cluster's max_slot_wal_keep_size in runs with slot_invalidate.
INVALIDATE_KEEP = "'16MB'"
RECOVERED = re.compile(r"recovered replication slot \S+ in ([0-9.]+) s: "
                       r"(\d+) rows past recovery point (\d+)")


def wal_plan(rng, duration, without=frozenset()):
    """(kinds, schedule, timeout_ms) of a run: the set of KINDS it gets
    (less those in without; the draws stay the same), the faults
    [(at seconds, kind, arg)] to merge into the one-at-a-time schedule,
    and kafka.message.timeout.ms (None: outboxd's default). arg is the lag
    (s) for promote, (seconds, mode) for standby_bounce, (delay s before
    Postgres goes down, ms) for expiry."""
    drawn = {k for k in KINDS if rng.random() < ODDS[k]}
    at_promote = rng.uniform(0.5, 0.5 * duration)
    lag = rng.uniform(1.0, 3.0)
    at_bounce = rng.uniform(0.3, duration)
    bounce = (rng.uniform(1.0, 4.0), rng.choice(["fast", "immediate"]))
    at_expiry = rng.uniform(0.3, 0.8 * duration)
    timeout_ms = rng.choice([3000, 4000, 5000])
    expiry = (rng.uniform(0.2, 1.0), timeout_ms)
    kinds = drawn - set(without)
    schedule = []
    if "promote" in kinds:
        schedule.append((at_promote, "promote", lag))
    if "standby_bounce" in kinds:
        schedule.append((at_bounce, "standby_bounce", bounce))
    if "expiry" in kinds:
        schedule.append((at_expiry, "expiry", expiry))
    return kinds, schedule, (timeout_ms if "expiry" in kinds else None)


def slot_plan(seed, duration, without=frozenset()):
    """(kinds, schedule) of a run's slot faults: the set of SLOT_KINDS it
    gets (none below SLOT_FROM; less those in without, the draws staying
    the same) and [(at seconds, kind, (how, delay s))]: how is 'running',
    'kill9' or 'sigterm' for slot_drop, 'kill9', 'sigterm' or
    'broker_down' for slot_invalidate; delay is how long outboxd stays
    stopped (or the brokers down) after the slot is lost."""
    if seed < SLOT_FROM:
        return set(), []
    rng = random.Random("slot-%d" % seed)
    drawn = {k for k in SLOT_KINDS if rng.random() < SLOT_ODDS[k]}
    drop = (rng.uniform(1.0, 0.7 * duration),
            (rng.choice(["running", "running", "kill9", "sigterm"]),
             rng.uniform(0.0, 1.5)))
    invalidate = (rng.uniform(1.0, 0.7 * duration),
                  (rng.choice(["kill9", "sigterm", "broker_down"]),
                   rng.uniform(0.0, 1.5)))
    kinds = drawn - set(without)
    schedule = []
    if "slot_drop" in kinds:
        schedule.append((drop[0], "slot_drop", drop[1]))
    if "slot_invalidate" in kinds:
        schedule.append((invalidate[0], "slot_invalidate", invalidate[1]))
    return kinds, schedule


def wants_standby(kinds):
    return bool({"promote", "standby_bounce"} & set(kinds))


def both_hosts(primary, standby, dbname="postgres"):
    """A multi-host conninfo that finds whichever of the two accepts
    writes."""
    return ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=%s user=postgres "
            "target_session_attrs=read-write connect_timeout=2"
            % (primary.port, standby.port, dbname))


class Primary:
    """Whichever harness.PgCluster is the primary now: its attributes are
    the current one's. standby is the hot standby (None without one, or
    once promoted), old the killed primary after a promotion, promoted_at
    the run time the standby stopped before its promotion."""

    def __init__(self, cluster):
        object.__setattr__(self, "now", cluster)
        object.__setattr__(self, "standby", None)
        object.__setattr__(self, "old", None)
        object.__setattr__(self, "promoted_at", None)

    def __getattr__(self, name):
        return getattr(self.now, name)

    def __setattr__(self, name, value):
        if name in ("now", "standby", "old", "promoted_at"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.now, name, value)

    def add_standby(self, tmpdir):
        """A started hot standby of the primary (streaming through a
        physical slot; keeping 1 GB of WAL, so a logical slot copied onto
        it later finds the WAL from its restart_lsn on)."""
        sb = harness.PgCluster.standby_of(
            self.now, tmpdir, STANDBY_SLOT, {"wal_keep_size": "'1GB'"})
        sb.start()
        harness.wait_until(lambda: self.now.sql(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
            (STANDBY_SLOT,)) == [(True,)], 30, 0.2, "the standby streams")
        self.standby = sb
        return sb

    def conninfo(self, dbname="postgres", user="postgres"):
        if self.standby is None:
            return self.now.conninfo(dbname, user)
        return both_hosts(self.now, self.standby, dbname)

    def clusters(self):
        """Every cluster of the run (the primary first)."""
        return [c for c in (self.now, self.standby, self.old)
                if c is not None]

    def forget(self, history):
        """After a promotion: the committed transactions of history the
        new primary lacks (committed on timeline 1 past the switch point),
        and those whose COMMIT answer was lost since the standby stopped
        (they may have committed there), become 'forked'."""
        if self.promoted_at is None:
            return
        kept = {r[0] for r in self.now.sql("SELECT txn FROM chaos_ledger")}
        for t in history.txns.values():
            lost_answer = t.fate == "aborted" and t.t_end is not None and \
                t.t_end >= self.promoted_at and \
                any("answer lost" in op for op in t.ops)
            if (t.fate == "committed" and t.name not in kept) or lost_answer:
                t.fate = "forked"


def _lsn(cluster, query):
    return int(cluster.sql("SELECT %s - '0/0'" % query)[0][0] or 0)


class WalFaults:
    """The faults of KINDS, for faults.Injector (self.pg a Primary,
    self.broker, self.daemon, self.clock, self._halt, self.history)."""

    def _promote(self, lag):
        """The standby stops with a copy of the slot and lags lag seconds
        (and until the slot is confirmed past its end), the primary is
        killed, the standby promoted."""
        pg, sb = self.pg, self.pg.standby
        if sb is None or not sb.running:
            return "no standby"
        primary = pg.now
        stage = os.path.join(sb.base, "slotcopy")
        primary.sql("CHECKPOINT")
        sb._run_server_cmd(["sh", "-c", (
            "rm -rf {s} && mkdir -p {s}/snapshots && cp -a "
            "{p}/pg_replslot/{slot} {s}/ && "
            "(cp -a {p}/pg_logical/snapshots/*.snap {s}/snapshots/ "
            "2>/dev/null; true)").format(s=stage, p=primary.datadir,
                                         slot=self.slot)])
        copied = _lsn(primary, "pg_current_wal_lsn()")
        try:
            harness.wait_until(lambda: _lsn(
                sb, "pg_last_wal_replay_lsn()") >= copied, 20, 0.1)
        except TimeoutError:
            return "the standby did not catch up in 20 s: no promotion"
        pg.promoted_at = self.clock()
        sb.stop("fast")
        sb._run_server_cmd(["sh", "-c", (
            "cp -a {s}/{slot} {d}/pg_replslot/ && "
            "cp -a {s}/snapshots/. {d}/pg_logical/snapshots/").format(
                s=stage, d=sb.datadir, slot=self.slot)])
        stopped = _lsn(primary, "pg_current_wal_lsn()")
        self._halt.wait(lag)
        deadline = time.monotonic() + 5
        confirmed = 0
        while time.monotonic() < deadline and not self._halt.is_set():
            row = primary.slot(self.slot)
            confirmed = (row or {}).get("confirmed_flush_lsn_int") or 0
            if confirmed > stopped:
                break
            time.sleep(0.1)
        end = _lsn(primary, "pg_current_wal_lsn()")
        since = len(self.daemon.log_text())
        killed = self.clock()
        primary.kill9()
        sb.start()
        sb.promote()
        pg.old, pg.now, pg.standby = primary, sb, None
        rolled = self._drop_resolved_prepared()
        # The next fault waits until the same process found the new
        # timeline (a restarted one cannot know what it published).
        try:
            self.daemon.wait_log(r"the server is on timeline", 30, since)
            followed = "outboxd followed"
        except (harness.HarnessError, TimeoutError) as e:
            followed = "outboxd did not follow: %s" % str(e).splitlines()[0]
        return ("standby stopped at %s, lagged %.1f s: timeline 1 reached "
                "%s, slot confirmed %s; primary killed at %.2f s, standby "
                "promoted%s; %s" % (
                    harness.int_to_lsn(stopped), lag, harness.int_to_lsn(end),
                    harness.int_to_lsn(confirmed), killed,
                    ", %d prepared rolled back" % rolled if rolled else "",
                    followed))

    def _drop_resolved_prepared(self):
        """ROLLBACK PREPARED of each transaction still prepared on the new
        primary that the workload resolved on timeline 1 past the switch
        point (it would hold its keys' locks forever)."""
        rolled = 0
        for (gid,) in self.pg.sql("SELECT gid FROM pg_prepared_xacts"):
            t = self.history.txns.get(gid) if self.history else None
            if t is None or t.fate == "prepared":
                continue
            try:
                self.pg.sql("ROLLBACK PREPARED '%s'" % gid)
                rolled += 1
            except Exception:  # the workload resolved it meanwhile
                pass
        return rolled

    def _standby_bounce(self, arg):
        """The standby stopped (fast or immediate) for a while, then
        started again."""
        seconds, mode = arg
        sb = self.pg.standby
        if sb is None or not sb.running:
            return "no standby"
        sb.stop(mode)
        self._halt.wait(seconds)
        sb.start()
        return "%s stop for %.1f s" % (mode, seconds)

    def _expiry(self, arg):
        """Every broker down, Postgres fast stop delay seconds later, the
        message timeout (and 1 s) passes, brokers up, then Postgres."""
        delay, ms = arg
        self.broker.cmd("down all")
        time.sleep(delay)
        detail = ""
        try:
            self.pg.stop("fast")
        except harness.HarnessError as e:
            self.pg.running = True
            self.pg.stop("immediate")
            detail = "; pg_ctl stop -m fast failed: %s" % (
                str(e).splitlines()[0])
        time.sleep(ms / 1000.0 + 1.0)
        self.broker.cmd("up all")
        time.sleep(0.5)
        self.pg.start()
        return "brokers down, Postgres stopped %.1f s later, %d ms passed%s" \
            % (delay, ms, detail)

    # -- the slot faults -----------------------------------------------------

    def _recovery_point(self, within=10.0):
        """Waits (at most within seconds) until outboxd stored a recovery
        point for its slot; returns it (None when none came)."""
        deadline = time.monotonic() + within
        while not self._halt.is_set():
            try:
                rows = self.pg.sql("SELECT recovery_xid::text FROM "
                                   "public.outboxd_slots WHERE slot_name "
                                   "= %s", (self.slot,))
            except Exception:  # the server restarting
                rows = []
            if rows and rows[0][0] is not None:
                return rows[0][0]
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)
        return None

    def _stop_daemon(self, how):
        """Stops outboxd (how: 'kill9' or 'sigterm'); says how, with the
        exit code of a SIGTERM (rc=...; the checker judges it)."""
        if how == "kill9":
            self.daemon.kill9()
            return "kill -9"
        self.daemon.terminate()
        try:
            rc = self.daemon.wait(60)
        except Exception:
            self.daemon.kill9()
            rc = "hung (killed after 60 s)"
        return "SIGTERM rc=%s" % rc

    def _drop_slot(self, within=30.0):
        """Terminates the slot's walsender and drops the slot, again until
        the drop succeeds (outboxd reconnects at once); returns the
        attempts."""
        deadline = time.monotonic() + within
        tries = 0
        while True:
            tries += 1
            try:
                self.pg.sql("SELECT pg_terminate_backend(active_pid) FROM "
                            "pg_replication_slots WHERE slot_name = %s AND "
                            "active_pid IS NOT NULL", (self.slot,))
                self.pg.sql("SELECT pg_drop_replication_slot(%s)",
                            (self.slot,))
                return tries
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _invalidate(self, within=60.0):
        """Writes WAL of another table, switches and checkpoints it until
        the slot's wal_status is 'lost' (the cluster's
        max_slot_wal_keep_size is INVALIDATE_KEEP); returns the rounds,
        None when it was not lost within seconds."""
        self.pg.sql("CREATE TABLE IF NOT EXISTS chaos_filler (t text)")
        deadline = time.monotonic() + within
        rounds = 0
        while time.monotonic() < deadline:
            rounds += 1
            self.pg.sql("INSERT INTO chaos_filler SELECT "
                        "repeat(md5(g::text), 8) FROM "
                        "generate_series(1, 25000) g")
            self.pg.sql("SELECT pg_switch_wal()")
            self.pg.sql("CHECKPOINT")
            row = self.pg.slot(self.slot)
            if row is None or row["wal_status"] == "lost":
                self.pg.sql("TRUNCATE chaos_filler")
                return rounds
        return None

    def _await_recovery(self, since, within=20.0):
        """What outboxd said of the recovery since log offset since,
        waiting for it at most within seconds (cut short when the
        workload ends)."""
        t0 = time.monotonic()
        while time.monotonic() < t0 + within:
            m = RECOVERED.search(self.daemon.log_text()[since:])
            if m:
                return "recovered in %s s (%s rows past point %s)" % (
                    m.group(1), m.group(2), m.group(3))
            if self._halt.is_set():
                return "no recovery logged %.1f s later, when the " \
                    "workload ended" % (time.monotonic() - t0)
            time.sleep(0.2)
        return "no recovery logged within %.0f s" % within

    def _slot_lost(self, how, delay, lose):
        """The slot lost by lose() (which says how) while outboxd runs
        (how 'running'), while it is stopped (how 'kill9' or 'sigterm':
        started again delay seconds after the loss), or while every
        broker is down (how 'broker_down': up again delay seconds after
        it); then a wait for outboxd's recovery."""
        point = self._recovery_point()
        if point is None:
            return "no recovery point stored within 10 s: slot kept"
        since = len(self.daemon.log_text())
        words = ["point %s" % point]
        if how == "running":
            words.append(self._busy())
        elif how == "broker_down":
            self.broker.cmd("down all")
        else:
            words.append(self._stop_daemon(how))
        try:
            words.append(lose())
        finally:
            time.sleep(delay)
            if how == "broker_down":
                self.broker.cmd("up all")
            elif how != "running":
                self.daemon.start()
        words.append(self._await_recovery(since))
        return "; ".join(words)

    def _slot_drop(self, arg):
        """The slot dropped (see _slot_lost)."""
        how, delay = arg
        return self._slot_lost(how, delay, lambda: "dropped (%d tries)"
                               % self._drop_slot())

    def _slot_invalidate(self, arg):
        """The slot invalidated by max_slot_wal_keep_size (see
        _slot_lost)."""
        how, delay = arg

        def lose():
            rounds = self._invalidate()
            return "invalidated after %d rounds" % rounds if rounds \
                else "not invalidated within 60 s"
        return self._slot_lost(how, delay, lose)


class Deployed(harness.Outboxd):
    """outboxd as a deployment script runs it: with deploy set, each
    start() first runs `outboxd slot create --if-not-exists` and logs its
    exit code in log (a FaultLog, kind 'deploy', at clock())."""

    def __init__(self, *args, deploy=False, log=None, clock=None, **kw):
        self.deploy = deploy
        self.deploy_log = log
        self.clock = clock
        super().__init__(*args, **kw)

    def start(self):
        if self.deploy:
            t = self.clock()
            rc, out, err = self.run_cmd(["slot", "create",
                                         "--if-not-exists"])
            self.deploy_log.add(t, self.clock(), "deploy", "rc=%d%s" % (
                rc, "" if rc == 0 else ": " + (out + err).strip()[:200]))
        return super().start()
