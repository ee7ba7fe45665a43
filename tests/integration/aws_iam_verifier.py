#!/usr/bin/python3
"""Stand-ins for AWS's side of IAM authentication, for the tests: the
checks RDS and MSK make of a token, with the signature recomputed here
with Python's hmac and hashlib from the published SigV4 algorithm,
independently of outboxd's C signer.

As a script it is RDS: PostgreSQL's `pam` authentication hands the
password to PAM, whose pam_exec (with expose_authtok) runs this script
with the password on standard input and the role in PAM_USER. The script accepts the password
only if it is an RDS IAM token that RDS would accept: a SigV4-presigned
`GET /?Action=connect&DBUser=ROLE` for this server's host:port, service
rds-db, in the configured region, signed with a key the configuration
lists (so a test can revoke a key), no older than its X-Amz-Expires (900
s) and not from the future.

Usage (as pam_exec's command): aws_iam_verifier.py CONFIG.json, where the
JSON holds host, port, region, keys ({access key id: secret}), tokens
({access key id: session token}, optional) and log (a file that gets a
JSON line per attempt: user, key, verdict; never the token). Exit 0
admits the role, 1 refuses it."""

import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import sys
import time
import urllib.parse

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def quote(s):
    return urllib.parse.quote(s, safe="-_.~")


def hmac256(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def parse_query(query):
    params = {}
    for item in query.split("&"):
        name, _, value = item.partition("=")
        params[urllib.parse.unquote(name)] = urllib.parse.unquote(value)
    return params


def check_presigned(host, service, region, params, keys, tokens):
    """'ok', or why the presigned GET of https://host/ with params (the
    signature among them) is refused: the checks AWS makes. Also the
    access key id."""
    params = dict(params)
    signature = params.pop("X-Amz-Signature", "")
    try:
        ak, day, scope_region, scope_service, term = \
            params["X-Amz-Credential"].split("/")
    except (KeyError, ValueError):
        return "no credential scope", None
    if (scope_service, term, params.get("X-Amz-Algorithm"),
            params.get("X-Amz-SignedHeaders")) != (
            service, "aws4_request", "AWS4-HMAC-SHA256", "host"):
        return "not a %s presigned GET signed on host" % service, ak
    if scope_region != region:
        return "signed for region %s" % scope_region, ak
    if ak not in keys:
        return "unknown or revoked access key", ak
    if tokens.get(ak) != params.get("X-Amz-Security-Token"):
        return "wrong session token", ak
    try:
        signed = datetime.datetime.strptime(
            params.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return "no signing date", ak
    if day != params["X-Amz-Date"][:8]:
        return "scope date is not the signing date", ak
    if params.get("X-Amz-Expires") != "900":
        return "X-Amz-Expires is not 900", ak
    if not signed - 60 <= time.time() <= signed + 900:
        return "expired or from the future", ak
    canonical_query = "&".join(
        "%s=%s" % kv for kv in sorted((quote(k), quote(v))
                                      for k, v in params.items()))
    canonical_request = "\n".join(
        ["GET", "/", canonical_query, "host:" + host, "", "host",
         EMPTY_SHA256])
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", params["X-Amz-Date"],
         "/".join([day, region, service, term]),
         hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = ("AWS4" + keys[ak]).encode()
    for part in (day, region, service, term):
        key = hmac256(key, part)
    want = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature):
        return "signature does not match", ak
    return "ok", ak


def check_rds(conf, token, user):
    """RDS's check of a password: an RDS IAM token for conf's host:port
    and the role user."""
    target = "%s:%d" % (conf["host"], conf["port"])
    if not token.startswith(target + "/?"):
        return "not a token for %s" % target, None
    params = parse_query(token[len(target) + 2:])
    if params.get("Action") != "connect":
        return "Action is not connect", None
    if params.get("DBUser") != user:
        return "DBUser %r is not the role %r" % (params.get("DBUser"),
                                                 user), None
    return check_presigned(target, "rds-db", conf["region"], params,
                           conf["keys"], conf.get("tokens", {}))


def check_msk(token, region, keys, tokens=None):
    """MSK's check of an OAUTHBEARER token: the unpadded base64url of a
    presigned https://kafka.REGION.amazonaws.com/?Action=
    kafka-cluster:Connect (with a User-Agent, which is not signed)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", token):
        return "not unpadded base64url", None
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    host = "kafka.%s.amazonaws.com" % region
    if not url.startswith("https://%s/?" % host):
        return "not a URL of %s" % host, None
    params = parse_query(url[len(host) + 10:])
    params.pop("User-Agent", None)
    if params.get("Action") != "kafka-cluster:Connect":
        return "Action is not kafka-cluster:Connect", None
    return check_presigned(host, "kafka-cluster", region, params, keys,
                           tokens or {})


def main():
    with open(sys.argv[1]) as f:
        conf = json.load(f)
    token = sys.stdin.buffer.read().split(b"\0")[0].decode("utf-8", "replace")
    user = os.environ.get("PAM_USER", "")
    verdict, ak = check_rds(conf, token, user)
    with open(conf["log"], "a") as f:
        f.write(json.dumps({"user": user, "key": ak, "verdict": verdict})
                + "\n")
    sys.exit(0 if verdict == "ok" else 1)


if __name__ == "__main__":
    main()
