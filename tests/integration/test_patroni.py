"""Patroni (Debian 12: patroni 3.0, etcd-server 3.4) with PostgreSQL 15:
two members, outboxd's slot a permanent logical slot Patroni keeps on the
replica, the leader crashed under steady writes; every row the new leader
has is published. Debian's PostgreSQL 15 only (the version matrix's
servers have no pg_basebackup, which Patroni's replica needs)."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import psycopg2
import pytest

import harness
from harness import wait_until
from conftest import OUTBOX_SQL
from test_failover import Writer, count_delivery
from test_faults import make_topic

PATRONI = "/usr/bin/patroni"
ETCD = "/usr/bin/etcd"


def _as_postgres(argv):
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--"] + argv
    return argv


class Member:
    """One Patroni member: its PostgreSQL port, REST port, process."""

    def __init__(self, base, name, etcd_port, slot):
        self.name = name
        self.port = harness.free_port()
        self.rest = harness.free_port()
        self.dir = os.path.join(base, name)
        os.makedirs(os.path.join(self.dir, "sock"))
        self.config = os.path.join(self.dir, "patroni.yml")
        self.log = os.path.join(self.dir, "patroni.log")
        with open(self.config, "w") as f:
            f.write(PATRONI_YML % {
                "name": name, "rest": self.rest, "etcd": etcd_port,
                "port": self.port, "dir": self.dir, "slot": slot,
                "bindir": harness.DEBIAN_PG_BIN})
        self.proc = None

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                _as_postgres([PATRONI, self.config]), stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def role(self):
        for path, word in (("/primary", "primary"), ("/replica", "replica")):
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d%s" % (self.rest, path),
                        timeout=2) as r:
                    if r.status == 200:
                        return word
            except Exception:
                pass
        return None

    def cluster(self):
        """A PgCluster-like handle for SQL on this member."""
        c = harness.PgCluster.__new__(harness.PgCluster)
        c.port = self.port
        return c

    def crash(self):
        """kill -9 of Patroni and of its PostgreSQL (every process of
        the member's session)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        pidfile = os.path.join(self.dir, "data", "postmaster.pid")
        try:
            with open(pidfile) as f:
                os.kill(int(f.readline()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        self.proc.wait(10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        pidfile = os.path.join(self.dir, "data", "postmaster.pid")
        if os.path.exists(pidfile):
            subprocess.run(_as_postgres([
                os.path.join(harness.DEBIAN_PG_BIN, "pg_ctl"), "-D",
                os.path.join(self.dir, "data"), "-m", "immediate", "stop"]),
                capture_output=True)


PATRONI_YML = """\
scope: outboxd_test
name: %(name)s
restapi:
  listen: 127.0.0.1:%(rest)d
  connect_address: 127.0.0.1:%(rest)d
etcd3:
  hosts: 127.0.0.1:%(etcd)d
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1073741824
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        wal_level: logical
        hot_standby_feedback: "on"
        max_replication_slots: 10
        max_wal_senders: 10
        fsync: "off"
    slots:
      %(slot)s:
        type: logical
        database: postgres
        plugin: wal2json
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%(port)d
  connect_address: 127.0.0.1:%(port)d
  data_dir: %(dir)s/data
  bin_dir: %(bindir)s
  pgpass: %(dir)s/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: "%(dir)s/sock"
"""


def copy_follows(leader, replica, slot):
    """The replica's copy of slot exists and is within 64 kB of the
    leader's confirmed position (False while the replica restarts)."""
    try:
        copy = replica.cluster().slot(slot)
        return bool(copy and copy["confirmed_flush_lsn_int"] and
                    copy["confirmed_flush_lsn_int"] >= leader.cluster().slot(
                        slot)["confirmed_flush_lsn_int"] - 64 * 1024)
    except psycopg2.OperationalError:
        return False


@pytest.fixture
def patroni_pair(slot_name):
    for b in (PATRONI, ETCD):
        if not os.access(b, os.X_OK):
            raise harness.HarnessError("%s is missing: install patroni and "
                                       "etcd-server (deploy/deps.sh)" % b)
    base = tempfile.mkdtemp(prefix="outboxd-patroni-")
    os.chmod(base, 0o755)
    etcd_port, peer_port = harness.free_port(), harness.free_port()
    etcd_log = open(os.path.join(base, "etcd.log"), "ab")
    etcd = subprocess.Popen(
        [ETCD, "--name", "t", "--data-dir", os.path.join(base, "etcd"),
         "--listen-client-urls", "http://127.0.0.1:%d" % etcd_port,
         "--advertise-client-urls", "http://127.0.0.1:%d" % etcd_port,
         "--listen-peer-urls", "http://127.0.0.1:%d" % peer_port,
         "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer_port,
         "--initial-cluster", "t=http://127.0.0.1:%d" % peer_port],
        stdout=etcd_log, stderr=subprocess.STDOUT)
    members = []
    try:
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres:postgres", base], check=True)
        for name in ("m1", "m2"):
            m = Member(base, name, etcd_port, slot_name)
            if os.geteuid() == 0:
                subprocess.run(["chown", "-R", "postgres:postgres", m.dir],
                               check=True)
            members.append(m)
        members[0].start()
        wait_until(lambda: members[0].role() == "primary", 60, 0.5,
                   "m1 leads")
        members[0].cluster().run_file(str(OUTBOX_SQL))
        members[1].start()
        wait_until(lambda: members[1].role() == "replica", 90, 0.5,
                   "m2 replicates")
        yield members
    finally:
        for m in members:
            m.stop()
        etcd.terminate()
        etcd.wait(10)
        etcd_log.close()
        shutil.rmtree(base, ignore_errors=True)


def test_patroni_leader_crash_loses_nothing(patroni_pair, broker, consumer,
                                            outboxd_factory, test_id,
                                            slot_name):
    """outboxd streams from the slot Patroni keeps as a permanent logical
    slot (on the replica too); the leader (Patroni and PostgreSQL) is
    killed under steady writes; Patroni promotes the replica, outboxd
    (multi-host conninfo) goes on from its copy of the slot in the same
    process: every row the new leader has is published."""
    m1, m2 = patroni_pair
    agg = "pat_%s" % test_id
    topic = make_topic(broker, agg)
    hosts = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres "
             "user=postgres target_session_attrs=read-write "
             "connect_timeout=2" % (m1.port, m2.port))
    wait_until(lambda: m1.cluster().slot(slot_name), 60, 0.5,
               "Patroni created slot %s" % slot_name)
    d = outboxd_factory({"postgres": {"conninfo": hosts,
                                      "standby_retry_ms": 500}})
    d.wait_log(r"streaming from slot", 40)
    writer = Writer(hosts, agg)
    writer.start()
    # Patroni copies the slot to the replica (restarting the replica to
    # load it, on PostgreSQL 15) and advances the copy.
    t0 = time.monotonic()
    wait_until(lambda: copy_follows(m1, m2, slot_name), 90, 0.5,
               "the replica's copy of the slot follows")
    print("patroni: the replica's copy followed after %.1f s"
          % (time.monotonic() - t0))
    time.sleep(1)
    wait_until(lambda: len(writer.committed) > 100, 60, 0.1,
               "more than 100 rows committed before the crash")
    m1.crash()
    wait_until(lambda: m2.role() == "primary", 60, 0.5, "m2 promoted")
    time.sleep(3)
    writer.halt()
    d.wait_log(r"timeline 2", 60)
    kept = set(r[0] for r in m2.cluster().sql(
        "SELECT id::text FROM public.outbox WHERE aggregate_type = %s",
        (agg,)))
    lost, dups, _, counts = count_delivery(
        consumer, topic, sorted(kept), writer.committed + writer.in_doubt)
    print("patroni pg15: %d committed, %d rows on the new leader, %d lost, "
          "%d duplicated, %d published but not on the new leader"
          % (len(writer.committed), len(kept), lost, dups,
             len(set(counts) - kept)))
    assert len(writer.committed) > 100
    assert lost == 0, d.log_tail()
