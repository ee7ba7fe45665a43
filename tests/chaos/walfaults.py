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
  healthy throughout, so anything but 0 is a finding).

Primary is the cluster the run's parts talk to: whichever server is the
primary now. WalFaults holds the faults; faults.Injector runs them."""

import os
import re
import time

import harness

KINDS = ("promote", "standby_bounce", "expiry", "deploy")
# How often a run draws each kind: a standby costs a few seconds a run.
ODDS = {"promote": 0.2, "standby_bounce": 0.15, "expiry": 0.25,
        "deploy": 0.5}
STANDBY_SLOT = "chaos_standby"
KILLED = re.compile(r"primary killed at ([0-9.]+) s")


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
