"""Integration tests of outboxd's connections to Postgres: TLS with
sslmode=verify-full (and a wrong root certificate as a clear, retried
refusal), and refused connections (no REPLICATION, a wrong password, no
pg_hba.conf line) that say once what to grant, on /readyz, in
outboxd_postgres_refused{reason} and in `outboxd check`.

The tests share one Postgres cluster of this module, with TLS on and
pg_hba.conf lines of its own; its CA and certificates are made here with
the openssl command (a missing openssl fails the tests)."""

import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable

import pytest

import harness
from conftest import OUTBOX_SQL
from harness import free_port, wait_until
from test_cli import EXIT_USAGE, wait_slot_active
from test_ops import (assert_check_passes, commit_events, failed_checks,
                      http_overrides, scrape, wait_http)

REFUSAL_REASONS = ("pg_hba", "password", "privilege", "tls")


def refused_series(m):
    """{reason: value} of outboxd_postgres_refused."""
    return {r: m.value("outboxd_postgres_refused", reason=r)
            for r in REFUSAL_REASONS}


def postgres_reconnects(port):
    return scrape(port).value("outboxd_reconnects_total", target="postgres")


# ---------------------------------------------------------------------------
# a cluster with TLS and pg_hba.conf lines of its own


def openssl(args, cwd):
    """Runs the openssl command in cwd; fails the test when it is missing
    or fails."""
    exe = shutil.which("openssl")
    if exe is None:
        raise harness.HarnessError("the openssl command is missing: install "
                                   "openssl (deploy/deps.sh)")
    r = subprocess.run([exe] + list(args), cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise harness.HarnessError("openssl %s failed (%d): %s"
                                   % (" ".join(args), r.returncode, r.stderr))


def make_ca(name, cwd):
    """A throwaway CA: cwd/name.crt and cwd/name.key."""
    openssl(["req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-keyout", name + ".key", "-out",
             name + ".crt", "-days", "2", "-subj", "/CN=outboxd test " + name],
            cwd)
    return os.path.join(cwd, name + ".crt")


def make_server_cert(ca, cwd):
    """server.crt and server.key for localhost and 127.0.0.1, signed by
    the CA named ca (made by make_ca in cwd)."""
    openssl(["req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=localhost"], cwd)
    with open(os.path.join(cwd, "san.ext"), "w") as f:
        f.write("subjectAltName = DNS:localhost, IP:127.0.0.1\n")
    openssl(["x509", "-req", "-in", "server.csr", "-CA", ca + ".crt",
             "-CAkey", ca + ".key", "-CAcreateserial", "-out", "server.crt",
             "-days", "2", "-extfile", "san.ext"], cwd)


# Roles of the refusal tests: password logins; any other role but postgres
# has no pg_hba.conf line.
PG_HBA = """local all all trust
host all postgres 127.0.0.1/32 trust
host all ob_norepl 127.0.0.1/32 scram-sha-256
host all ob_pw 127.0.0.1/32 scram-sha-256
host all ob_nologin 127.0.0.1/32 scram-sha-256
"""


@dataclass
class EdgePg:
    cluster: harness.PgCluster
    ca: str        # the CA that signed the server's certificate
    other_ca: str  # a CA that did not

    def tls_conninfo(self, rootcert, **extra):
        """verify-full to localhost, the name in the server's certificate."""
        words = ["host=localhost", "port=%d" % self.cluster.port,
                 "dbname=postgres", "user=postgres", "sslmode=verify-full",
                 "sslrootcert=%s" % rootcert]
        words += ["%s=%s" % kv for kv in extra.items()]
        return " ".join(words)

    def add_hba_line(self, line):
        """Appends a pg_hba.conf line and has the server reload the file."""
        with open(os.path.join(self.cluster.datadir, "pg_hba.conf"),
                  "a") as f:
            f.write(line + "\n")
        self.cluster.sql("SELECT pg_reload_conf()")


@pytest.fixture(scope="module")
def edge_pg(tmp_path_factory):
    certs = str(tmp_path_factory.mktemp("certs"))
    ca = make_ca("ca", certs)
    other_ca = make_ca("other-ca", certs)
    make_server_cert("ca", certs)
    cluster = harness.PgCluster(
        str(tmp_path_factory.mktemp("edge-pg")),
        extra_conf={"ssl": "on", "ssl_cert_file": "'server.crt'",
                    "ssl_key_file": "'server.key'"})
    try:
        for name in ("server.crt", "server.key"):
            dst = os.path.join(cluster.datadir, name)
            shutil.copy(os.path.join(certs, name), dst)
            os.chmod(dst, 0o600)
            if os.geteuid() == 0:
                pw = pwd.getpwnam("postgres")
                os.chown(dst, pw.pw_uid, pw.pw_gid)
        with open(os.path.join(cluster.datadir, "pg_hba.conf"), "w") as f:
            f.write(PG_HBA)
        cluster.start()
        cluster.run_file(str(OUTBOX_SQL))
        yield EdgePg(cluster, ca, other_ca)
    finally:
        cluster.destroy()


# ---------------------------------------------------------------------------
# TLS to Postgres


def test_tls_verify_full_streams_and_checks(edge_pg, broker, consumer,
                                            outboxd_factory, slot_name,
                                            test_id):
    """sslmode=verify-full with the CA in sslrootcert: the replication
    stream runs over TLS and publishes; `check` passes with the same
    settings given as PGSSLMODE and PGSSLROOTCERT."""
    pg = edge_pg.cluster
    agg = "tls_%s" % test_id
    d = outboxd_factory({"postgres": {
        "conninfo": edge_pg.tls_conninfo(edge_pg.ca)}})
    wait_slot_active(pg, slot_name)
    ssl = pg.sql("SELECT s.ssl, s.version FROM pg_replication_slots r JOIN "
                 "pg_stat_ssl s ON s.pid = r.active_pid WHERE r.slot_name = "
                 "%s", (slot_name,))
    assert len(ssl) == 1 and ssl[0][0] is True, ssl
    commit_events(pg, "postgres", agg, 3)
    got = consumer.collect("outbox.event.%s" % agg, min_count=3, timeout=30,
                           settle=0.2)
    assert len(got) == 3, got

    env_only = outboxd_factory(
        {"postgres": {"conninfo": "host=localhost port=%d dbname=postgres "
                                  "user=postgres" % pg.port}},
        start=False, env={"PGSSLMODE": "verify-full",
                          "PGSSLROOTCERT": edge_pg.ca})
    out, err = assert_check_passes(env_only)
    assert "outbox table" in out and "wal2json" in out, out
    assert d.stop() == 0, d.log_tail()
    pg.drop_slot(slot_name)


def test_tls_wrong_root_certificate_is_a_clear_retried_refusal(
        edge_pg, broker, outboxd_factory, slot_name, tmp_path):
    """A root certificate of another CA: one error naming TLS and
    sslrootcert (not a silent retry), /readyz 503 postgres-refused,
    outboxd_postgres_refused{reason="tls"} 1, `check` prints the same fix;
    once the right CA is in the file, outboxd streams without a restart."""
    pg = edge_pg.cluster
    rootcert = str(tmp_path / "root.crt")
    shutil.copy(edge_pg.other_ca, rootcert)
    port = free_port()
    d = outboxd_factory(http_overrides(port, postgres={
        "conninfo": edge_pg.tls_conninfo(rootcert),
        "reconnect_max_backoff_ms": 300}))
    wait_http(port, "/readyz", 503, "postgres-refused", daemon=d)
    wait_until(lambda: postgres_reconnects(port) >= 4, 30, 0.2,
               "outboxd keeps retrying")
    m = scrape(port)
    assert refused_series(m) == {"pg_hba": 0, "password": 0, "privilege": 0,
                                 "tls": 1}, m.text
    assert m.value("outboxd_postgres_connected") == 0
    text = d.log_text()
    said = re.findall(r"error: could not connect to postgres: (.*?); "
                      r"refused \(tls\): (.*); retrying until this is fixed",
                      text)
    assert len(said) == 1, "the refusal is logged once:\n" + text
    libpq_message, fix = said[0]
    assert "certificate verify failed" in libpq_message, libpq_message
    assert fix.startswith("TLS "), fix
    assert "sslrootcert (now %s;" % rootcert in fix, fix

    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (rc, out, err)
    failed = failed_checks(out)
    assert ("postgres", False, "refused (tls): " + fix) in failed, (out, err)

    shutil.copy(edge_pg.ca, rootcert)
    wait_http(port, "/readyz", 200, "ready", timeout=30, daemon=d)
    assert set(refused_series(scrape(port)).values()) == {0}
    d.wait_log(r"postgres accepts the connection now \(it was refused: "
               r"tls\)")
    assert d.stop() == 0, d.log_tail()
    pg.drop_slot(slot_name)


# ---------------------------------------------------------------------------
# refused connections


@dataclass
class Refusal:
    id: str
    setup: tuple            # SQL run before outboxd starts
    login: str              # conninfo words naming the role (and password)
    reason: str             # outboxd_postgres_refused{reason}
    fix_text: str           # in the fix outboxd names
    apply_fix: Callable     # what the operator does: fn(EdgePg)


REFUSALS = [
    Refusal("role-without-replication",
            ("CREATE ROLE ob_norepl LOGIN PASSWORD 'norepl-pw'",
             "GRANT SELECT ON public.outbox TO ob_norepl",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO ob_norepl"),
            "user=ob_norepl password=norepl-pw", "privilege",
            'ALTER ROLE "ob_norepl" REPLICATION',
            lambda e: e.cluster.sql("ALTER ROLE ob_norepl REPLICATION")),
    Refusal("wrong-password",
            ("CREATE ROLE ob_pw LOGIN REPLICATION PASSWORD 'right-pw'",
             "GRANT SELECT ON public.outbox TO ob_pw",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO ob_pw"),
            "user=ob_pw password=wrong-pw", "password",
            'ALTER ROLE "ob_pw" PASSWORD',
            lambda e: e.cluster.sql("ALTER ROLE ob_pw PASSWORD 'wrong-pw'")),
    # The right password of a NOLOGIN role: the server refuses it with
    # 28000 after the password was checked; no password to fix.
    Refusal("role-without-login",
            ("CREATE ROLE ob_nologin NOLOGIN REPLICATION PASSWORD 'nl-pw'",
             "GRANT SELECT ON public.outbox TO ob_nologin",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO ob_nologin"),
            "user=ob_nologin password=nl-pw", "pg_hba",
            "or the role does not exist or may not log in",
            lambda e: e.cluster.sql("ALTER ROLE ob_nologin LOGIN")),
    Refusal("no-pg-hba-line",
            ("CREATE ROLE ob_nohba LOGIN REPLICATION",
             "GRANT SELECT ON public.outbox TO ob_nohba",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO ob_nohba"),
            "user=ob_nohba", "pg_hba",
            '"host postgres ob_nohba 127.0.0.1/32 scram-sha-256"',
            lambda e: e.add_hba_line("host all ob_nohba 127.0.0.1/32 trust")),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[c.id for c in REFUSALS])
def test_refused_connection_says_what_to_grant(edge_pg, broker, consumer,
                                               outboxd_factory, slot_name,
                                               test_id, case):
    """Postgres refuses the role: outboxd logs once what is missing and
    the statement or pg_hba.conf line that fixes it, answers /readyz 503
    postgres-refused, sets outboxd_postgres_refused{reason} and keeps
    retrying; `check` prints the same fix. Once the operator applies it,
    outboxd streams without a restart."""
    pg = edge_pg.cluster
    for stmt in case.setup:
        pg.sql(stmt)
    port = free_port()
    d = outboxd_factory(http_overrides(port, postgres={
        "conninfo": "host=127.0.0.1 port=%d dbname=postgres %s"
                    % (pg.port, case.login),
        "reconnect_max_backoff_ms": 300}))
    wait_http(port, "/readyz", 503, "postgres-refused", daemon=d)
    wait_until(lambda: postgres_reconnects(port) >= 4, 30, 0.2,
               "outboxd keeps retrying")
    want = {r: 0 for r in REFUSAL_REASONS}
    want[case.reason] = 1
    m = scrape(port)
    assert refused_series(m) == want, m.text

    text = d.log_text()
    said = re.findall(r"error: could not connect to postgres: .*?; refused "
                      r"\(%s\): (.*); retrying until this is fixed"
                      % case.reason, text)
    assert len(said) == 1, "the refusal is logged once:\n" + text
    fix = said[0]
    assert case.fix_text in fix, fix
    assert len(re.findall(r"refused \(", text)) == 1, text

    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (rc, out, err)
    failed = failed_checks(out)
    assert ("postgres", False, "refused (%s): %s" % (case.reason, fix)) in \
        failed, (out, err)

    case.apply_fix(edge_pg)
    wait_http(port, "/readyz", 200, "ready", timeout=30, daemon=d)
    assert set(refused_series(scrape(port)).values()) == {0}
    d.wait_log(r"postgres accepts the connection now \(it was refused: %s\)"
               % case.reason)
    agg = "refusal_%s" % test_id
    commit_events(pg, "postgres", agg, 2)
    got = consumer.collect("outbox.event.%s" % agg, min_count=2, timeout=30,
                           settle=0.2)
    assert len(got) == 2, got
    assert d.stop() == 0, d.log_tail()
    pg.drop_slot(slot_name)
