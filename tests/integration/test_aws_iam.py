"""Integration tests of the built-in AWS IAM authentication
(deploy/README.md, "AWS IAM"): postgres.auth = aws_iam and
kafka_auth.method = aws_msk_iam.

RDS cannot run here, so a cluster of this module checks tokens the way
RDS does: its pg_hba.conf sends the test role to PAM, and PAM's pam_exec
runs tests/integration/aws_iam_verifier.py on the password, which admits
only a valid RDS IAM token for this server's host and port, the role, a
region and an access key it lists, recomputing the SigV4 signature with
Python's own hmac. A key dropped from its list is a revoked key. Writing
the PAM service file needs root, as the rest of the suite does (it runs
the server as the postgres user).

The test broker takes no SASL, so the MSK token is checked where it is
handed to librdkafka: a test build writes every token its refresh
callback sets to OUTBOXD_TEST_TOKEN_FILE, and the verifier's MSK check
judges it."""

import json
import os
import re
import shutil
import tempfile
import time

import pytest

import aws_iam_verifier
import harness
from conftest import OUTBOX_SQL
from harness import free_port, wait_until
from test_credentials import count_lines, oauth_overrides, write_secret
from test_ops import check_lines, commit_events, failed_checks, wait_http

ROLE = "ob_iam"
REGION = "eu-west-1"
VERIFIER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "aws_iam_verifier.py")


class IamServer:
    """The verifier's configuration, which a test changes to rotate and
    revoke keys, and its log of attempts."""

    def __init__(self, cluster, workdir):
        self.cluster = cluster
        self.workdir = workdir
        self.conf_path = os.path.join(workdir, "verifier.json")
        self.log_path = os.path.join(workdir, "attempts.log")
        open(self.log_path, "w").close()
        os.chmod(self.log_path, 0o666)
        self.set_keys({})

    def set_keys(self, keys):
        conf = {"host": "127.0.0.1", "port": self.cluster.port,
                "region": REGION, "keys": keys, "log": self.log_path}
        write_secret(self.conf_path, json.dumps(conf))
        os.chmod(self.conf_path, 0o644)

    def attempts(self):
        with open(self.log_path) as f:
            return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def iam_pg(tmp_path_factory):
    assert os.geteuid() == 0, "the PAM service file needs root"
    assert os.path.exists("/usr/lib/x86_64-linux-gnu/security/pam_exec.so"), \
        "pam_exec (libpam-modules) is missing"
    workdir = tempfile.mkdtemp(prefix="outboxd-iam-")
    os.chmod(workdir, 0o755)
    script = os.path.join(workdir, "aws_iam_verifier.py")
    shutil.copy(VERIFIER, script)
    os.chmod(script, 0o755)
    service = "outboxd-test-iam-%d" % os.getpid()
    pam_file = "/etc/pam.d/" + service
    cluster = harness.PgCluster(str(tmp_path_factory.mktemp("iam-pg")))
    try:
        server = IamServer(cluster, workdir)
        with open(pam_file, "w") as f:
            f.write("auth required pam_exec.so expose_authtok quiet "
                    "/usr/bin/python3 %s %s\naccount required pam_permit.so\n"
                    % (script, server.conf_path))
        with open(os.path.join(cluster.datadir, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\n"
                    "host all postgres 127.0.0.1/32 trust\n"
                    "host all %s 127.0.0.1/32 pam pamservice=%s\n"
                    % (ROLE, service))
        cluster.start()
        cluster.run_file(str(OUTBOX_SQL))
        for stmt in ("CREATE ROLE %s LOGIN REPLICATION" % ROLE,
                     "GRANT SELECT ON public.outbox TO %s" % ROLE,
                     "GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots "
                     "TO %s" % ROLE):
            cluster.sql(stmt)
        yield server
    finally:
        cluster.destroy()
        if os.path.exists(pam_file):
            os.unlink(pam_file)
        shutil.rmtree(workdir, ignore_errors=True)


def write_credentials(path, key, secret):
    write_secret(path, "[default]\naws_access_key_id = %s\n"
                       "aws_secret_access_key = %s\n" % (key, secret))


def iam_env(tmp_path, credentials):
    """The environment of outboxd: the credentials file given, no AWS
    variables of the machine running the tests."""
    return {"HOME": str(tmp_path), "AWS_SHARED_CREDENTIALS_FILE": credentials,
            "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
            "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
            "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_REGION": "",
            "AWS_DEFAULT_REGION": ""}


def iam_overrides(cluster, port, test_id, **postgres):
    """outboxd as ROLE with postgres.auth = aws_iam, with the pgoutput
    publication made beforehand (ROLE may not make one)."""
    cluster.sql("DROP PUBLICATION IF EXISTS pub_%s" % test_id)
    cluster.sql("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH "
                "(publish = 'insert', publish_via_partition_root = true)"
                % test_id)
    settings = {"conninfo": "host=127.0.0.1 port=%d dbname=postgres user=%s"
                            % (cluster.port, ROLE),
                "auth": "aws_iam", "aws_region": REGION,
                "reconnect_max_backoff_ms": 500}
    settings.update(postgres)
    return {"http": {"listen": "127.0.0.1:%d" % port}, "postgres": settings}


def terminate_backends(cluster):
    return cluster.sql("SELECT count(pg_terminate_backend(pid)) FROM "
                       "pg_stat_activity WHERE usename = %s", (ROLE,))[0][0]


def test_rds_iam_tokens_admitted_and_keys_rotated_while_streaming(
        iam_pg, broker, consumer, outboxd_factory, slot_name, test_id,
        tmp_path):
    """outboxd signs a fresh RDS IAM token for every connection, which the
    verifying server admits; when the access key is rotated (the file
    rewritten, the old key revoked) the next connection signs with the new
    key, also after a refusal when the server revoked the key before the
    file changed; every event is published, and neither the secret keys
    nor a token reach the log. `check` says what was signed and that the
    server took it."""
    server, cluster = iam_pg, iam_pg.cluster
    creds = str(tmp_path / "credentials")
    keys = [("AKIDROTATE%d" % i, "secret-%d-%s" % (i, os.urandom(8).hex()))
            for i in range(3)]
    write_credentials(creds, *keys[0])
    server.set_keys(dict(keys[:1]))
    port = free_port()
    d = outboxd_factory(iam_overrides(cluster, port, test_id),
                        env=iam_env(tmp_path, creds))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    agg = "iam_%s" % test_id
    commit_events(cluster, "postgres", agg, 5)

    # Rotation as an agent does it: the file first, then the old key goes.
    before = len(server.attempts())
    write_credentials(creds, *keys[1])
    server.set_keys(dict(keys[:2]))
    assert terminate_backends(cluster) >= 1
    wait_until(lambda: any(a["key"] == keys[1][0] and a["verdict"] == "ok"
                           for a in server.attempts()[before:]), 30, 0.2,
               "a connection signed with the new key")
    server.set_keys(dict(keys[1:2]))
    wait_http(port, "/readyz", 200, "ready", timeout=30, daemon=d)
    commit_events(cluster, "postgres", agg, 5)

    # The key revoked before the file changes: refused, then admitted.
    since = d.log_size()
    server.set_keys(dict(keys[2:]))
    assert terminate_backends(cluster) >= 1
    d.wait_log(r"refused \(password\): the server rejected the RDS IAM "
               r"token outboxd signed for role \"%s\"" % ROLE, timeout=30,
               since=since)
    write_credentials(creds, *keys[2])
    wait_http(port, "/readyz", 200, "ready", timeout=30, daemon=d)
    commit_events(cluster, "postgres", agg, 5)

    got = consumer.collect("outbox.event.%s" % agg, min_count=15, timeout=60,
                           settle=0.5)
    assert len({harness.header(r, "id") for r in got}) == 15
    attempts = server.attempts()
    assert all(a["user"] == ROLE for a in attempts), attempts
    admitted = {a["key"] for a in attempts if a["verdict"] == "ok"}
    assert admitted == {k for k, _ in keys}, attempts
    assert any(a["verdict"] == "unknown or revoked access key"
               for a in attempts), attempts

    rc, out, err = d.run_cmd(["check"])
    auth = [r for r in check_lines(out)[0] if r[0] == "postgres auth"]
    assert len(auth) == 1 and auth[0][1], (out, err)
    assert re.match(r"postgres\.auth aws_iam signed an RDS IAM token for %s "
                    r"at 127\.0\.0\.1:%d from profile default of %s, region "
                    r"%s; the server accepted it$"
                    % (ROLE, cluster.port, re.escape(creds), REGION),
                    auth[0][2]), auth
    assert d.stop() == 0, d.log_tail()
    # The test server has no TLS: the conninfo leaves sslmode at prefer,
    # which RDS would not take for IAM; said once.
    assert len(re.findall(r"postgres\.auth aws_iam with sslmode=prefer: RDS and "
                          r"Aurora admit IAM logins over TLS only",
                          d.log_text())) == 1, d.log_tail()
    text = d.log_text() + out + err
    for _, secret in keys:
        assert secret not in text
    assert "X-Amz-Signature" not in text
    cluster.drop_slot(slot_name)


CANNOT_SIGN = [
    ("no-credentials", {}, None,
     r"postgres\.auth aws_iam: no AWS credentials: profile default has no "
     r"aws_access_key_id and aws_secret_access_key in \S+ nor in \S+, and "
     r"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set"),
    ("profile-needs-sts", {"aws_profile": "assumed"},
     "[profile assumed]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
     "source_profile = default\n",
     r"AWS profile assumed of \S+ gets its credentials through role_arn, "
     r"which needs a call to AWS"),
    ("no-region", {"aws_region": ""}, None,
     r"postgres\.auth aws_iam: no AWS region: set aws_region, AWS_REGION or "
     r"AWS_DEFAULT_REGION"),
    ("several-hosts", {"conninfo": "host=127.0.0.1,localhost dbname=postgres "
                                   "user=%s" % ROLE}, None,
     r"postgres\.auth aws_iam signs a token for one host and port, and the "
     r"connection names 127\.0\.0\.1,localhost"),
]


@pytest.mark.parametrize("case", CANNOT_SIGN, ids=[c[0] for c in CANNOT_SIGN])
def test_token_that_cannot_be_signed_is_an_error_retried(
        iam_pg, broker, outboxd_factory, test_id, tmp_path, case):
    """No credentials, a profile that needs AWS STS, no region, or a
    conninfo with several hosts: an error naming the cause, retried with
    the reconnect backoff (no connection is attempted without a token);
    `check` fails its postgres auth line with the same words."""
    _, postgres, config, said = case
    cluster = iam_pg.cluster
    creds = str(tmp_path / "credentials")
    env = iam_env(tmp_path, creds)
    if config is not None:
        write_secret(env["AWS_CONFIG_FILE"], config)
    if case[0] != "no-credentials":
        write_credentials(creds, "AKIDCASE", "secret-case")
    port = free_port()
    d = outboxd_factory(iam_overrides(cluster, port, test_id, **postgres),
                        env=env)
    before = count_lines(iam_pg.log_path)
    pat = r"could not get a password for postgres: .*" + said + r".*; retrying"
    wait_until(lambda: len(re.findall(pat, d.log_text())) >= 2, 30, 0.2,
               "outboxd retries")
    assert d.running(), d.log_tail()
    wait_http(port, "/readyz", 503, "connecting", daemon=d)
    assert count_lines(iam_pg.log_path) == before  # never asked the server

    t0 = time.monotonic()
    rc, out, err = d.run_cmd(["check"])
    assert rc != 0, (rc, out, err)
    auth = [r for r in failed_checks(out) if r[0] == "postgres auth"]
    assert len(auth) == 1 and re.search(said, auth[0][2]), (out, err)
    assert time.monotonic() - t0 < 30
    assert d.stop() == 0, d.log_tail()


def msk_env(tmp_path, **aws):
    env = iam_env(tmp_path, str(tmp_path / "no-credentials"))
    env["OUTBOXD_TEST_TOKEN_FILE"] = str(tmp_path / "tokens")
    env.update(aws)
    return env


def msk_overrides(port):
    out = oauth_overrides(port, "")
    out["kafka_auth"] = {"method": "aws_msk_iam"}
    return out


def test_msk_iam_token_handed_to_librdkafka(pg, broker, outboxd_factory,
                                            tmp_path):
    """kafka_auth.method = aws_msk_iam: when the producer's client starts,
    librdkafka's token refresh gets an MSK IAM token signed with the
    environment's temporary credentials, which MSK's check accepts, with
    the access key id as principal and an expiry 900 s after its signing;
    `check` prints the kafka auth line; no secret and no token is
    logged."""
    secret = "msk-secret-" + os.urandom(8).hex()
    session = "msk-session/" + os.urandom(8).hex() + "+="
    env = msk_env(tmp_path, AWS_ACCESS_KEY_ID="AKIDMSK",
                  AWS_SECRET_ACCESS_KEY=secret, AWS_SESSION_TOKEN=session,
                  AWS_REGION="eu-central-1")
    d = outboxd_factory(msk_overrides(free_port()), env=env)
    wait_until(lambda: count_lines(env["OUTBOXD_TEST_TOKEN_FILE"]) >= 1, 20,
               0.1, "a token is handed to librdkafka")
    t = time.time()
    with open(env["OUTBOXD_TEST_TOKEN_FILE"]) as f:
        expiry_ms, principal, token = f.readline().split()
    assert principal == "AKIDMSK"
    assert t + 900 - 30 <= int(expiry_ms) / 1000 <= t + 900, (expiry_ms, t)
    keys, tokens = {"AKIDMSK": secret}, {"AKIDMSK": session}
    assert aws_iam_verifier.check_msk(token, "eu-central-1", keys,
                                      tokens) == ("ok", "AKIDMSK")
    # The check is no rubber stamp: another region, another secret or no
    # session token is refused.
    assert aws_iam_verifier.check_msk(token, "eu-west-1", keys,
                                      tokens)[0] != "ok"
    assert aws_iam_verifier.check_msk(token, "eu-central-1",
                                      {"AKIDMSK": "other"}, tokens)[0] == \
        "signature does not match"
    assert aws_iam_verifier.check_msk(token, "eu-central-1", keys)[0] == \
        "wrong session token"

    rc, out, err = d.run_cmd(["check"])
    auth = [r for r in check_lines(out)[0] if r[0] == "kafka auth"]
    # The test broker takes no SASL: the token is made, never accepted.
    assert len(auth) == 1 and not auth[0][1], (out, err)
    assert re.match(r"kafka_auth\.method aws_msk_iam gave a token for AKIDMSK "
                    r"\(lifetime 900000 ms\) in \d+ ms from the environment "
                    r"\(AWS_ACCESS_KEY_ID\), region eu-central-1; no broker "
                    r"took it", auth[0][2]), auth
    assert d.running(), d.log_tail()
    assert "could not get a kafka token" not in d.log_text()
    assert d.stop() == 0, d.log_tail()
    text = d.log_text() + out + err
    for s in (secret, session, token, "X-Amz-Signature"):
        assert s not in text


def test_msk_iam_without_credentials_is_logged_and_asked_again(
        pg, broker, outboxd_factory, tmp_path):
    """No credentials for the MSK token: a warning naming the setting and
    what is missing, librdkafka asks again 10 s later, outboxd keeps
    running and hands librdkafka no token."""
    env = msk_env(tmp_path, AWS_REGION="eu-central-1")
    d = outboxd_factory(msk_overrides(free_port()), env=env)
    pat = (r"could not get a kafka token: kafka_auth\.method aws_msk_iam: no "
           r"AWS credentials: profile default has no aws_access_key_id")
    d.wait_log(pat, timeout=20)
    wait_until(lambda: len(re.findall(pat, d.log_text())) >= 2, 25, 0.2,
               "librdkafka asks again")
    assert d.running(), d.log_tail()
    assert count_lines(env["OUTBOXD_TEST_TOKEN_FILE"]) == 0
    assert d.stop() == 0, d.log_tail()


def test_service_file_conninfo_is_refused_not_signed_for_another_target(
        iam_pg, broker, outboxd_factory, test_id, tmp_path):
    """conninfo = service=NAME: libpq takes host, port and user from
    pg_service.conf, which PQconninfoParse() and PQconndefaults() do not
    read for a service named in the conninfo. outboxd must not sign a
    token for another target than libpq connects to (here the
    environment's PGHOST and the OS user, while libpq connects as the
    service's user): it says it cannot, naming the service, and asks the
    server nothing."""
    cluster = iam_pg.cluster
    creds = str(tmp_path / "credentials")
    env = iam_env(tmp_path, creds)
    write_credentials(creds, "AKIDSVC", "secret-svc")
    iam_pg.set_keys({"AKIDSVC": "secret-svc"})
    svc = str(tmp_path / "pg_service.conf")
    with open(svc, "w") as f:
        f.write("[iamsvc]\nhost=127.0.0.1\nport=%d\nuser=%s\n"
                % (cluster.port, ROLE))
    env.update({"PGSERVICEFILE": svc, "PGHOST": "127.0.0.1",
                "PGPORT": str(cluster.port)})
    port = free_port()
    d = outboxd_factory(iam_overrides(cluster, port, test_id,
                                      conninfo="service=iamsvc "
                                               "dbname=postgres"), env=env)
    before = count_lines(iam_pg.log_path)
    pat = (r"could not get a password for postgres: postgres\.auth aws_iam "
           r"[^;]*service=iamsvc[^;]*; retrying")
    wait_until(lambda: len(re.findall(pat, d.log_text())) >= 2, 30, 0.2,
               "outboxd says it cannot sign for a service:\n" + d.log_tail())
    assert count_lines(iam_pg.log_path) == before
    assert d.stop() == 0, d.log_tail()
