"""Test harness for outboxd's integration tests: real parts only.

- PgCluster: a throwaway PostgreSQL cluster (15, or the matrix's 16-18) (initdb in a temp dir,
  wal_level=logical, its own port and socket dir, trust auth), run as the
  `postgres` user when the tests run as root.
- MockBroker: tests/broker/ob-mockbroker, librdkafka's mock Kafka cluster in
  a process of its own, driven by line commands for fault injection.
- Outboxd: the daemon under test, started from an INI file written here.
- Consumer: reads whole topics from the beginning with confluent_kafka.
- murmur2_partition: the partition librdkafka's murmur2_random (and the
  Java client) picks for a key.

Only the standard library, psycopg2 and confluent_kafka are used. Missing
Postgres binaries or wal2json raise HarnessError: tests fail, never skip.

The server comes from $OUTBOXD_PG_BIN (default: Debian's PostgreSQL 15).
The version matrix (tests/versions.sh) points it at the PostgreSQL 16, 17
or 18 of deploy/pgversions.sh and sets:
- OUTBOXD_PG_MAJOR: the major version that server must be (checked);
- OUTBOXD_PG_LIB: its library directory, LD_LIBRARY_PATH of the server
  processes (by default <bin>/../lib when that holds a libpq of its own);
- OUTBOXD_TEST_DECODERS=pgoutput: such a server has no wal2json, so it is
  not required, and the tests run with pgoutput only (conftest.py).
Client tools (psql) come from $OUTBOXD_PG_CLIENT_BIN (default: Debian's
PostgreSQL 15), since those servers ship none.
"""

import os
import pwd
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2
import psycopg2.extras

DEBIAN_PG_BIN = "/usr/lib/postgresql/15/bin"
PG_BIN = os.environ.get("OUTBOXD_PG_BIN", DEBIAN_PG_BIN)
PG_CLIENT_BIN = os.environ.get("OUTBOXD_PG_CLIENT_BIN", DEBIAN_PG_BIN)
# The major version the server must be; None: whatever PG_BIN holds.
PG_MAJOR = os.environ.get("OUTBOXD_PG_MAJOR") or None


def _pg_lib():
    """The LD_LIBRARY_PATH for the server's processes, or None."""
    lib = os.environ.get("OUTBOXD_PG_LIB")
    if lib:
        return lib
    guess = os.path.normpath(os.path.join(PG_BIN, "..", "lib"))
    if os.path.exists(os.path.join(guess, "libpq.so.5")):
        return guess
    return None


PG_LIB = _pg_lib()


def decoders_under_test():
    """The decoders $OUTBOXD_TEST_DECODERS allows (a comma list), or None
    for all."""
    only = os.environ.get("OUTBOXD_TEST_DECODERS")
    if not only:
        return None
    return [d.strip() for d in only.split(",") if d.strip()]


def wal2json_required():
    """False only when $OUTBOXD_TEST_DECODERS leaves wal2json out (the
    matrix's servers without it)."""
    only = decoders_under_test()
    return only is None or "wal2json" in only


class HarnessError(RuntimeError):
    """A part of the test set-up is missing or misbehaved."""


# ---------------------------------------------------------------------------
# small helpers


def free_port():
    """Returns a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(fn, timeout=10.0, interval=0.1, message=None):
    """Calls fn until it returns something truthy and returns that; raises
    TimeoutError (with message and fn's last value) after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise TimeoutError(
                "%s (waited %.1fs, last value %r)"
                % (message or "condition not met", timeout, last))
        time.sleep(interval)


def lsn_to_int(lsn):
    """'X/Y' (pg_lsn text) -> int byte position; None stays None."""
    if lsn is None:
        return None
    hi, lo = str(lsn).split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(pos):
    """int byte position -> 'X/Y' pg_lsn text."""
    return "%X/%X" % (pos >> 32, pos & 0xFFFFFFFF)


def _is_root():
    return os.geteuid() == 0


def _tail(path, nbytes=6000):
    """The last nbytes of a text file, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "<cannot read %s: %s>" % (path, e)


# ---------------------------------------------------------------------------
# murmur2 (Kafka's Java client hash, librdkafka's murmur2_random partitioner)


def murmur2(data):
    """Kafka's murmur2 of bytes as a signed 32-bit int (Utils.murmur2 in the
    Java client; rd_murmur2 in librdkafka), seed 0x9747b28c."""
    data = bytes(data)
    length = len(data)
    m = 0x5BD1E995
    r = 24
    mask = 0xFFFFFFFF
    h = (0x9747B28C ^ length) & mask
    nblocks = length // 4
    for i in range(nblocks):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[4 * nblocks:]
    rem = length & 3
    if rem == 3:
        h ^= tail[2] << 16
    if rem >= 2:
        h ^= tail[1] << 8
    if rem >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key_bytes, num_partitions):
    """The partition of a non-null key: (murmur2(key) & 0x7fffffff) % n, as
    librdkafka's murmur2_random and the Java default partitioner pick it."""
    if isinstance(key_bytes, str):
        key_bytes = key_bytes.encode("utf-8")
    return (murmur2(key_bytes) & 0x7FFFFFFF) % num_partitions


# ---------------------------------------------------------------------------
# PostgreSQL


def _pg_bin(name, bindir=None):
    path = os.path.join(bindir or PG_BIN, name)
    if not os.access(path, os.X_OK):
        if (bindir or PG_BIN) == DEBIAN_PG_BIN:
            hint = "install postgresql-15 (deploy/deps.sh)"
        else:
            hint = "fetch it with deploy/pgversions.sh"
        raise HarnessError("PostgreSQL binary %s is missing: %s"
                           % (path, hint))
    return path


def _pg_client_bin(name):
    """A client tool (psql): from PG_BIN when it has one, else from
    PG_CLIENT_BIN (the matrix's servers ship no client tools)."""
    path = os.path.join(PG_BIN, name)
    if os.access(path, os.X_OK):
        return path
    return _pg_bin(name, PG_CLIENT_BIN)


def _server_env():
    env = dict(os.environ)
    if PG_LIB:
        env["LD_LIBRARY_PATH"] = PG_LIB + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH")
            else "")
    return env


_checked = None


def server_major():
    """The major version of PG_BIN's postgres (an int)."""
    r = subprocess.run([_pg_bin("postgres"), "--version"],
                       capture_output=True, text=True, env=_server_env())
    m = re.search(r"\(PostgreSQL\) (\d+)", r.stdout)
    if r.returncode != 0 or not m:
        raise HarnessError("%s --version failed (%d): %s%s"
                           % (_pg_bin("postgres"), r.returncode, r.stdout,
                              r.stderr))
    return int(m.group(1))


def check_postgres_and_wal2json():
    """Raises HarnessError unless the server binaries are there (of major
    version $OUTBOXD_PG_MAJOR when set) and, unless the decoders under test
    leave it out, wal2json; returns the path of wal2json.so, or None when
    it is not required."""
    global _checked
    if _checked is not None:
        return _checked[0]
    for b in ("initdb", "pg_ctl", "postgres"):
        _pg_bin(b)
    _pg_client_bin("psql")
    major = server_major()
    if PG_MAJOR is not None and major != int(PG_MAJOR):
        raise HarnessError("%s is PostgreSQL %d, not %s (OUTBOXD_PG_MAJOR)"
                           % (_pg_bin("postgres"), major, PG_MAJOR))
    if not wal2json_required():
        # Said, not silent: the run is pgoutput only by the matrix's choice.
        print("harness: PostgreSQL %d from %s, decoders %s: wal2json not "
              "required" % (major, PG_BIN, ",".join(decoders_under_test())),
              file=sys.stderr)
        _checked = (None,)
        return None
    if not os.access(os.path.join(PG_BIN, "pg_config"), os.X_OK) and \
            PG_BIN != DEBIAN_PG_BIN:
        raise HarnessError(
            "%s has no pg_config, so no wal2json (the version matrix's "
            "servers): run it with OUTBOXD_TEST_DECODERS=pgoutput "
            "(tests/versions.sh)" % PG_BIN)
    pkglibdir = subprocess.run(
        [_pg_bin("pg_config"), "--pkglibdir"], check=True,
        capture_output=True, text=True).stdout.strip()
    so = os.path.join(pkglibdir, "wal2json.so")
    if not os.path.exists(so):
        raise HarnessError(
            "wal2json is not installed (%s missing): install "
            "postgresql-15-wal2json (deploy/deps.sh), or run this server "
            "with OUTBOXD_TEST_DECODERS=pgoutput" % so)
    _checked = (so,)
    return so


class PgCluster:
    """A throwaway PostgreSQL cluster (15 unless $OUTBOXD_PG_BIN says
    otherwise) in a directory of its own.

    When the tests run as root, the cluster's files belong to `postgres` and
    every server-side command runs through `runuser -u postgres --`. Clients
    (psycopg2, psql) connect over TCP to 127.0.0.1 as user postgres, trust
    auth."""

    def __init__(self, tmpdir, wal_level="logical", port=None,
                 extra_conf=None, encoding="UTF8"):
        check_postgres_and_wal2json()
        self.port = port or free_port()
        self.wal_level = wal_level
        self._make_dirs(tmpdir)
        self._initdb(extra_conf or {}, encoding)
        self.running = False

    def _make_dirs(self, tmpdir):
        """The cluster's directories under tmpdir (its data directory not
        yet made), reachable by the server's user."""
        os.makedirs(tmpdir, exist_ok=True)
        # The postgres user must reach the data dir through every parent;
        # pytest's temp dirs (mode 700, root's) do not allow that.
        self._own_base = None
        base = os.path.abspath(tmpdir)
        if _is_root() and not self._postgres_can_enter(base):
            base = tempfile.mkdtemp(prefix="outboxd-pg-")
            self._own_base = base
        self.base = os.path.join(base, "pg-%d" % self.port)
        self.datadir = os.path.join(self.base, "data")
        self.sockdir = os.path.join(self.base, "sock")
        self.logfile = os.path.join(self.base, "postgres.log")
        os.makedirs(self.sockdir)
        if self._own_base:
            os.chmod(self._own_base, 0o755)
        os.chmod(self.base, 0o755)
        if _is_root():
            pw = pwd.getpwnam("postgres")
            for p in (self.base, self.sockdir):
                os.chown(p, pw.pw_uid, pw.pw_gid)

    @staticmethod
    def _postgres_can_enter(path):
        r = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x",
                            path], capture_output=True)
        return r.returncode == 0

    def _as_server_user(self, argv):
        if _is_root():
            return ["runuser", "-u", "postgres", "--"] + argv
        return argv

    def _run_server_cmd(self, argv, timeout=120):
        r = subprocess.run(self._as_server_user(argv), capture_output=True,
                           text=True, timeout=timeout, env=_server_env())
        if r.returncode != 0:
            raise HarnessError("%s failed (%d):\n%s\n%s\n--- server log:\n%s"
                               % (" ".join(argv), r.returncode, r.stdout,
                                  r.stderr, _tail(self.logfile)))
        return r

    def _initdb(self, extra_conf, encoding):
        self._run_server_cmd([_pg_bin("initdb"), "-D", self.datadir,
                              "-U", "postgres", "-A", "trust", "-E", encoding,
                              "--locale=C", "--no-sync", "--no-instructions"])
        conf = {
            "wal_level": self.wal_level,
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "'%s'" % self.sockdir,
            "fsync": "off",
            "logging_collector": "off",
            "log_min_messages": "info",
            "log_line_prefix": "'%m [%p] %q%a '",
            "log_replication_commands": "on",
        }
        conf.update({k: str(v) for k, v in extra_conf.items()})
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n# outboxd integration tests\n")
            for k, v in conf.items():
                f.write("%s = %s\n" % (k, v))
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\n"
                    "local replication all trust\n"
                    "host replication all 127.0.0.1/32 trust\n"
                    "host all all 127.0.0.1/32 trust\n")

    @classmethod
    def standby_of(cls, primary, tmpdir, slot="standby1", extra_conf=None):
        """A hot standby of primary, made as the version matrix's servers
        allow (they have no pg_basebackup): primary gets a physical slot,
        is stopped cleanly, and its data directory is copied; the copy
        gets standby.signal, primary_conninfo (with dbname, which slot
        sync needs), primary_slot_name and hot_standby_feedback = on, and
        extra_conf. The primary is started again; the standby is returned
        stopped (start() it)."""
        primary.sql("SELECT pg_create_physical_replication_slot(%s, true)",
                    (slot,))
        primary.stop("fast")
        self = cls.__new__(cls)
        self.port = free_port()
        self.wal_level = primary.wal_level
        self._make_dirs(tmpdir)
        self._run_server_cmd(["cp", "-a", primary.datadir, self.datadir])
        for f in ("postmaster.pid", "postmaster.opts"):
            try:
                os.unlink(os.path.join(self.datadir, f))
            except FileNotFoundError:
                pass
        conf = {
            "port": str(self.port),
            "unix_socket_directories": "'%s'" % self.sockdir,
            "primary_conninfo": "'host=127.0.0.1 port=%d user=postgres "
                                "dbname=postgres application_name=standby'"
                                % primary.port,
            "primary_slot_name": "'%s'" % slot,
            "hot_standby_feedback": "on",
        }
        conf.update({k: str(v) for k, v in (extra_conf or {}).items()})
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n# hot standby of port %d\n" % primary.port)
            for k, v in conf.items():
                f.write("%s = %s\n" % (k, v))
        self._run_server_cmd(["touch", os.path.join(self.datadir,
                                                    "standby.signal")])
        self.running = False
        primary.start()
        return self

    def kill9(self):
        """SIGKILL to the postmaster (a crash: its children exit when they
        notice), then waits until the port is free."""
        with open(os.path.join(self.datadir, "postmaster.pid")) as f:
            pid = int(f.readline())
        os.kill(pid, signal.SIGKILL)
        self.running = False

        def down():
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) != 0
        wait_until(down, 30, 0.1, "postgres on port %d gone" % self.port)
        time.sleep(0.5)  # the backends notice the postmaster's death

    def promote(self):
        """pg_ctl promote, waiting until the server accepts writes."""
        self._run_server_cmd([_pg_bin("pg_ctl"), "-D", self.datadir, "-w",
                              "-t", "60", "promote"])
        wait_until(lambda: not self.sql("SELECT pg_is_in_recovery()")[0][0],
                   30, 0.1, "promoted")

    # -- server control -----------------------------------------------------

    def start(self):
        """Starts the server and waits until it accepts connections. At
        the first start, a port taken since free_port() chose it (by
        another test's server, or a client connection's ephemeral port:
        seen when two test processes run side by side) is replaced by
        another, up to three times; later starts keep the port, which
        the tests' settings name."""
        for attempt in range(4):
            try:
                self._run_server_cmd([_pg_bin("pg_ctl"), "-D", self.datadir,
                                      "-l", self.logfile, "-w", "-t", "60", "start"])
                break
            except HarnessError as e:
                if (getattr(self, "_started", False) or attempt == 3
                        or "Address already in use" not in str(e)):
                    raise
                self.port = free_port()
                with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
                    f.write("port = %d  # the first port was taken\n" % self.port)
        self._started = True
        self.running = True
        wait_until(self._accepts, 30, 0.1, "postgres accepting connections")
        return self

    def _accepts(self):
        try:
            psycopg2.connect(self.conninfo(), connect_timeout=2).close()
            return True
        except psycopg2.OperationalError:
            return False

    def stop(self, mode="fast"):
        """Stops the server (pg_ctl stop -m mode) and waits for it."""
        if not self.running:
            return
        self._run_server_cmd([_pg_bin("pg_ctl"), "-D", self.datadir,
                              "-m", mode, "-w", "-t", "60", "stop"])
        self.running = False

    def restart(self, mode="fast"):
        """Stops (fast or immediate: a crash) and starts the server again."""
        self.stop(mode)
        self.start()

    def destroy(self):
        """Stops the server and removes its files."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self._own_base or self.base, ignore_errors=True)

    # -- clients ------------------------------------------------------------

    def conninfo(self, dbname="postgres", user="postgres"):
        """A libpq conninfo string for TCP on 127.0.0.1."""
        return "host=127.0.0.1 port=%d dbname=%s user=%s" % (
            self.port, dbname, user)

    def connect(self, dbname="postgres", user="postgres"):
        """A psycopg2 connection in autocommit mode."""
        conn = psycopg2.connect(self.conninfo(dbname, user), connect_timeout=10)
        conn.autocommit = True
        return conn

    def sql(self, query, params=None, dbname="postgres"):
        """Runs one statement in its own connection; returns all rows (a list
        of tuples; [] for statements without a result)."""
        conn = self.connect(dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []
        finally:
            conn.close()

    def wait_sync_standby_armed(self, timeout=20.0):
        """Waits until a commit with synchronous_commit = on waits for the
        synchronous standby that synchronous_standby_names now names. A
        commit reads the checkpointer's copy of that setting, which the
        checkpointer takes from a pg_reload_conf() on its own time (a
        commit made meanwhile returns at once: seen on a busy machine).
        A probe commit shows it; its wait is then cancelled, which commits
        it locally (it made a temporary table dropped at its commit: one
        kept to the session's end would wait again there)."""
        deadline = time.monotonic() + timeout
        while True:
            conn = self.connect()
            try:
                cur = conn.cursor()
                cur.execute("SET synchronous_commit = on")
                cur.execute("SELECT pg_backend_pid()")
                pid = cur.fetchone()[0]
                probe = threading.Thread(
                    target=cur.execute, args=("CREATE TEMP TABLE ob_sync_probe () ON COMMIT DROP",),
                    daemon=True)
                probe.start()
                try:
                    wait_until(lambda: not probe.is_alive() or self.sql(
                        "SELECT wait_event = 'SyncRep' FROM pg_stat_activity "
                        "WHERE pid = %s", (pid,)) == [(True,)],
                        5, 0.02, "a probe commit ended or waits")
                    armed = probe.is_alive()
                finally:
                    if probe.is_alive():
                        self.sql("SELECT pg_cancel_backend(%s)", (pid,))
                    probe.join(10)
            finally:
                conn.close()
            if armed:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("commits do not wait for the synchronous "
                                   "standby (waited %.1fs)" % timeout)
            time.sleep(0.1)

    def run_file(self, path, dbname="postgres"):
        """Runs an SQL file with psql -v ON_ERROR_STOP=1; raises on error."""
        r = subprocess.run([_pg_client_bin("psql"), "-X", "-q", "-v",
                            "ON_ERROR_STOP=1", "-d", self.conninfo(dbname),
                            "-f", path], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise HarnessError("psql -f %s failed (%d):\n%s\n%s"
                               % (path, r.returncode, r.stdout, r.stderr))
        return r.stdout

    def create_db(self, name):
        """Creates a database (no-op if it exists)."""
        if not self.sql("SELECT 1 FROM pg_database WHERE datname = %s",
                        (name,)):
            self.sql('CREATE DATABASE "%s"' % name.replace('"', '""'))

    def slot(self, name):
        """The pg_replication_slots row of slot name as a dict (plus
        *_int byte positions of its LSNs), or None if there is no such
        slot."""
        conn = self.connect()
        try:
            with conn.cursor(
                    cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute("SELECT * FROM pg_replication_slots "
                            "WHERE slot_name = %s", (name,))
                row = cur.fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        row = dict(row)
        for k in ("restart_lsn", "confirmed_flush_lsn"):
            row[k + "_int"] = lsn_to_int(row.get(k))
        return row

    def drop_slot(self, name, timeout=15):
        """Drops slot name once no process holds it; no-op if missing."""
        def inactive():
            s = self.slot(name)
            return s is None or not s["active"]
        wait_until(inactive, timeout, 0.2, "slot %s released" % name)
        self.sql("SELECT pg_drop_replication_slot(slot_name) "
                 "FROM pg_replication_slots WHERE slot_name = %s", (name,))

    def wal_lsn(self):
        """pg_current_wal_lsn() as an int byte position."""
        return int(self.sql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
                   [0][0])

    @staticmethod
    def lsn_to_int(lsn):
        return lsn_to_int(lsn)

    def log_text(self):
        return _tail(self.logfile, 200000)


class PgoutputCommitProbe:
    """Where transactions committed, read with pgoutput (for the servers
    without wal2json): a slot of its own and a publication of the same name
    for table. commits() peeks, never consumes. The probes of the tests
    (WalProbe, CommitProbe) use wal2json when it is required, this
    otherwise."""

    def __init__(self, pg, name, table="public.outbox"):
        self.pg = pg
        self.name = name[:63]
        self.table = table
        pg.sql('CREATE PUBLICATION "%s" FOR TABLE %s' % (self.name, table))
        pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
               (self.name,))

    def transactions(self, prefix="outbox"):
        """[(xid, commit lsn, end lsn, changed)] in commit order, changed:
        the transaction inserted into table or emitted a transactional
        message with prefix."""
        rows = self.pg.sql(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, "
            "NULL, 'proto_version', '1', 'publication_names', %s, "
            "'messages', 'true')", (self.name, '"%s"' % self.name))
        out, xid, changed = [], None, False
        for (data,) in rows:
            b = bytes(data)
            kind = b[:1]
            if kind == b"B":    # final lsn, timestamp, xid
                xid = int.from_bytes(b[17:21], "big")
                changed = False
            elif kind == b"I":
                changed = True
            elif kind == b"M":  # flags, lsn, prefix\0, length, content
                end = b.index(b"\0", 10)
                if b[1] & 1 and b[10:end].decode() == prefix:
                    changed = True
            elif kind == b"C":  # flags, commit lsn, end lsn, timestamp
                out.append((xid, int.from_bytes(b[2:10], "big"),
                            int.from_bytes(b[10:18], "big"), changed))
        return out

    def drop(self):
        self.pg.drop_slot(self.name)
        self.pg.sql('DROP PUBLICATION IF EXISTS "%s"' % self.name)


# ---------------------------------------------------------------------------
# Kafka: the mock broker


class MockBroker:
    """tests/broker/ob-mockbroker in a child process. Commands go to its
    stdin; each gets one reply line."""

    def __init__(self, binary, brokers=3, logfile=None, partitions=4):
        if not os.access(binary, os.X_OK):
            raise HarnessError("mock broker %s is missing: build it with "
                               "`meson setup build && ninja -C build`"
                               % binary)
        self.binary = binary
        self.logfile = logfile or tempfile.mktemp(prefix="ob-mockbroker-",
                                                  suffix=".log")
        self._log = open(self.logfile, "ab")
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [binary, "--brokers", str(brokers), "--partitions",
             str(partitions)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._buf = b""
        self.bootstraps = None
        deadline = time.monotonic() + 20
        while True:
            line = self._readline(deadline - time.monotonic())
            if line.startswith("BOOTSTRAP "):
                self.bootstraps = line.split(" ", 1)[1].strip()
            elif line == "READY":
                break
        if not self.bootstraps:
            raise HarnessError("mock broker printed READY without BOOTSTRAP")

    def _readline(self, timeout):
        """One line from the broker's stdout (without newline)."""
        deadline = time.monotonic() + max(timeout, 0)
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HarnessError("mock broker did not answer in time; "
                                   "stderr:\n" + _tail(self.logfile))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise HarnessError("mock broker exited (rc=%s); stderr:\n%s"
                                   % (self.proc.poll(), _tail(self.logfile)))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode("utf-8", "replace").rstrip("\r")

    def cmd(self, line, timeout=10):
        """Sends one command; returns the reply line; raises HarnessError
        when the broker answers `err ...`."""
        with self._lock:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            reply = self._readline(timeout)
        if reply.startswith("err"):
            raise HarnessError("mock broker: %r -> %s" % (line, reply))
        return reply

    def create_topic(self, name, partitions=4):
        return self.cmd("topic %s %d" % (name, partitions))

    def stop(self):
        """Asks the broker to quit; kills it if it does not."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# ---------------------------------------------------------------------------
# the daemon


def write_ini(path, config):
    """Writes {'section': {'key': value}} as an INI file; True/False become
    true/false, None becomes an empty value."""
    with open(path, "w") as f:
        for section, items in config.items():
            f.write("[%s]\n" % section)
            for k, v in items.items():
                if isinstance(v, bool):
                    v = "true" if v else "false"
                elif v is None:
                    v = ""
                f.write("%s = %s\n" % (k, v))
            f.write("\n")


class Outboxd:
    """One outboxd process: `outboxd COMMAND -c FILE` (command "run" unless
    told, e.g. "inbox"), output to a log file."""

    _seq = 0

    def __init__(self, binary, config, tmpdir, extra_args=(), start=True,
                 env=None, command="run"):
        if not os.access(binary, os.X_OK):
            raise HarnessError("outboxd binary %s is missing: build it with "
                               "`meson setup build && ninja -C build`"
                               % binary)
        Outboxd._seq += 1
        self.binary = binary
        self.config = config
        self.tmpdir = tmpdir
        os.makedirs(tmpdir, exist_ok=True)
        n = Outboxd._seq
        self.config_path = os.path.join(tmpdir, "outboxd-%d.ini" % n)
        self.logfile = os.path.join(tmpdir, "outboxd-%d.log" % n)
        self.extra_args = list(extra_args)
        self.env = env
        self.command = command
        self.proc = None
        write_ini(self.config_path, config)
        if start:
            self.start()

    def start(self):
        """Starts `outboxd COMMAND -c FILE` (appending to the log file)."""
        if self.proc is not None and self.proc.poll() is None:
            raise HarnessError("outboxd already running")
        env = dict(os.environ)
        env.update(self.env or {})
        with open(self.logfile, "ab") as log:
            log.write(b"=== start %s\n" % time.strftime("%H:%M:%S").encode())
            self.proc = subprocess.Popen(
                [self.binary, self.command, "-c", self.config_path]
                + self.extra_args,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.logfile, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, nbytes=6000):
        return _tail(self.logfile, nbytes)

    def wait_log(self, regex, timeout=15.0, since=0):
        """Waits until the log (from byte offset since) matches regex;
        returns the match. Raises with the log tail if it never does or the
        process exits first."""
        pat = re.compile(regex)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()[since:]
            m = pat.search(text)
            if m:
                return m
            if not self.running():
                raise HarnessError(
                    "outboxd exited (rc=%s) before logging /%s/; log:\n%s"
                    % (self.proc.returncode if self.proc else None, regex,
                       self.log_tail()))
            if time.monotonic() >= deadline:
                raise TimeoutError("outboxd did not log /%s/ in %.0fs; "
                                   "log:\n%s" % (regex, timeout,
                                                 self.log_tail()))
            time.sleep(0.1)

    def log_size(self):
        try:
            return os.path.getsize(self.logfile)
        except OSError:
            return 0

    def terminate(self):
        """Sends SIGTERM."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout=40.0):
        """Waits for the process to exit; returns its exit code."""
        return self.proc.wait(timeout)

    def kill9(self):
        """SIGKILL, then reap."""
        if self.running():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self, timeout=40.0):
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns
        the exit code."""
        if self.proc is None:
            return None
        if self.running():
            self.terminate()
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode

    def run_cmd(self, args, timeout=60.0, with_config=True):
        """Runs a one-shot subcommand (`check`, `slot status`, ...) with this
        instance's config file; returns (rc, stdout, stderr)."""
        argv = [self.binary] + list(args)
        if with_config:
            argv += ["-c", self.config_path]
        env = dict(os.environ)
        env.update(self.env or {})
        r = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout, env=env)
        return r.returncode, r.stdout, r.stderr


# ---------------------------------------------------------------------------
# Kafka: reading what was published


class Consumer:
    """Reads whole topics from the beginning: assign()s every partition at
    OFFSET_BEGINNING, no group membership, no commits."""

    def __init__(self, bootstraps, **conf):
        from confluent_kafka import Consumer as _KConsumer
        c = {
            "bootstrap.servers": bootstraps,
            "group.id": "outboxd-tests",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "allow.auto.create.topics": False,
            "topic.metadata.refresh.interval.ms": 1000,
            "fetch.wait.max.ms": 100,
            "log_level": 3,
        }
        c.update(conf)
        self._c = _KConsumer(c)

    def partitions(self, topic, timeout=30.0):
        """The partition ids of topic, once the cluster knows the topic."""
        def get():
            try:
                md = self._c.list_topics(topic, timeout=5)
            except Exception:  # KafkaException while brokers come up
                return None
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                return None
            return sorted(t.partitions)
        return wait_until(get, timeout, 0.2, "topic %s exists" % topic)

    def collect(self, topics, min_count=0, timeout=30.0, settle=1.5):
        """Reads topics from the beginning until at least min_count records
        arrived (or timeout), then keeps reading for settle seconds to catch
        extras (duplicates). Returns every record read as a dict: topic,
        partition, offset, key (str or None), value (bytes or None), headers
        (list of (str, bytes)), timestamp (ms)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition, KafkaError
        if isinstance(topics, str):
            topics = [topics]
        deadline = time.monotonic() + timeout
        tps = []
        for t in topics:
            for p in self.partitions(t, max(1.0, deadline - time.monotonic())):
                tps.append(TopicPartition(t, p, OFFSET_BEGINNING))
        self._c.assign(tps)
        out = []
        settle_end = None
        while True:
            now = time.monotonic()
            if settle_end is None and len(out) >= min_count:
                settle_end = now + settle
            if settle_end is not None and now >= settle_end:
                break
            if settle_end is None and now >= deadline:
                break
            msg = self._c.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    raise HarnessError("consumer: %s" % err)
                continue
            key = msg.key()
            out.append({
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": key.decode("utf-8") if key is not None else None,
                "value": msg.value(),
                "headers": list(msg.headers() or []),
                "timestamp": msg.timestamp()[1],
            })
        self._c.unassign()
        return out

    def close(self):
        self._c.close()


def header(record, name):
    """The first value (bytes) of header name in record, or None."""
    for k, v in record["headers"]:
        if k == name:
            return v
    return None
