/*
 * awsiam.c: AWS credentials from the environment and the shared files,
 * and the RDS and MSK IAM tokens signed with them (awsiam.h).
 */
#include "outboxd/awsiam.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ob_build.h"
#include "outboxd/credcmd.h"
#include "outboxd/inifile.h"
#include "outboxd/sigv4.h"

/* What one profile of one file holds. */
typedef struct profile_read {
	const char *section; /* the section that is the profile */
	bool config;         /* the config file, not the credentials file */
	bool found;
	char *access_key, *secret_key, *session_token, *region;
	char *security_token; /* the older name of aws_session_token */
	char remote[32];      /* a key that needs a call to AWS, "" when none */
} profile_read;

static void
profile_read_clear(profile_read *p)
{
	ob_credcmd_free(p->access_key);
	ob_credcmd_free(p->secret_key);
	ob_credcmd_free(p->session_token);
	ob_credcmd_free(p->security_token);
	free(p->region);
}

static void
keep(char **slot, const char *value)
{
	ob_credcmd_free(*slot);
	*slot = ob_xstrdup(value);
}

static int
on_profile_key(void *user, const char *section, const char *name, const char *value)
{
	static const char *const remote[] = {"role_arn",       "credential_process",
					     "sso_session",    "sso_start_url",
					     "sso_account_id", "web_identity_token_file"};
	profile_read *p = user;

	/* The config file's default profile is [default] or [profile default],
	 * as botocore reads it. */
	if (strcmp(section, p->section) != 0 && !(strcmp(p->section, "default") == 0 && p->config &&
						  strcmp(section, "profile default") == 0))
		return 1;
	p->found = true;
	/* Option names in any case, as botocore (configparser) reads them. */
	if (strcasecmp(name, "aws_access_key_id") == 0)
		keep(&p->access_key, value);
	else if (strcasecmp(name, "aws_secret_access_key") == 0)
		keep(&p->secret_key, value);
	else if (strcasecmp(name, "aws_session_token") == 0)
		keep(&p->session_token, value);
	else if (strcasecmp(name, "aws_security_token") == 0)
		keep(&p->security_token, value);
	else if (strcasecmp(name, "region") == 0)
		keep(&p->region, value);
	for (size_t i = 0; i < OB_ARRAY_LEN(remote); i++) {
		if (strcasecmp(name, remote[i]) == 0 && p->remote[0] == '\0')
			snprintf(p->remote, sizeof(p->remote), "%s", remote[i]);
	}
	return 1;
}

/* The path of one of the shared files: $env, else ~/.aws/name ("" when
 * neither is known). */
static void
shared_file(const char *env, const char *name, char *out, size_t len)
{
	const char *set = getenv(env), *home = getenv("HOME");

	if (set != NULL && set[0] != '\0')
		snprintf(out, len, "%s", set);
	else if (home != NULL && home[0] != '\0')
		snprintf(out, len, "%s/.aws/%s", home, name);
	else
		out[0] = '\0';
}

/* Read profile from the credentials file (config false) or the config
 * file into *p. A missing file reads as a file without the profile. */
static void
read_profile(const char *profile, bool config, profile_read *p, char *path, size_t path_len)
{
	char section[256];

	memset(p, 0, sizeof(*p));
	if (config && strcmp(profile, "default") != 0)
		snprintf(section, sizeof(section), "profile %s", profile);
	else
		snprintf(section, sizeof(section), "%s", profile);
	p->section = section;
	p->config = config;
	shared_file(config ? "AWS_CONFIG_FILE" : "AWS_SHARED_CREDENTIALS_FILE",
		    config ? "config" : "credentials", path, path_len);
	if (path[0] != '\0')
		(void)ob_ini_parse(path, on_profile_key, p); /* a line it cannot read is skipped */
	p->section = NULL;
}

static bool
from_profile(const char *profile, ob_awscreds *out, char *err, size_t err_len)
{
	char paths[2][1024];
	profile_read p[2];
	bool ok = false;

	for (int config = 0; config < 2; config++)
		read_profile(profile, config, &p[config], paths[config], sizeof(paths[config]));
	/* As AWS's SDKs, a role or process named in either file wins over
	 * keys written in the other: refused, never signed with the keys. */
	for (int i = 0; i < 2 && !ok; i++) {
		if (p[i].found && p[i].remote[0] != '\0') {
			snprintf(err, err_len,
				 "AWS profile %s of %s gets its credentials through %s, which "
				 "needs a call to AWS: outboxd reads only keys written in the "
				 "files; use the command route (postgres.password_command, "
				 "kafka_auth.token_command) with the AWS CLI",
				 profile, paths[i], p[i].remote);
			profile_read_clear(&p[0]);
			profile_read_clear(&p[1]);
			return false;
		}
	}
	for (int i = 0; i < 2 && !ok; i++) {
		/* aws_session_token, else the older aws_security_token */
		const char *token =
		    p[i].session_token != NULL ? p[i].session_token : p[i].security_token;

		if (!p[i].found || p[i].access_key == NULL || p[i].access_key[0] == '\0' ||
		    p[i].secret_key == NULL || p[i].secret_key[0] == '\0')
			continue;
		out->access_key = ob_xstrdup(p[i].access_key);
		out->secret_key = ob_xstrdup(p[i].secret_key);
		out->session_token = token != NULL && token[0] != '\0' ? ob_xstrdup(token) : NULL;
		snprintf(out->source, sizeof(out->source), "profile %s of %s", profile, paths[i]);
		ok = true;
	}
	profile_read_clear(&p[0]);
	profile_read_clear(&p[1]);
	if (!ok)
		snprintf(err, err_len,
			 "no AWS credentials: profile %s has no aws_access_key_id and "
			 "aws_secret_access_key in %s nor in %s, and AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY are not both set",
			 profile, paths[0][0] ? paths[0] : "~/.aws/credentials (HOME unset)",
			 paths[1][0] ? paths[1] : "~/.aws/config (HOME unset)");
	return ok;
}

bool
ob_awscreds_load(const char *profile, ob_awscreds *out, char *err, size_t err_len)
{
	const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
	const char *token = getenv("AWS_SESSION_TOKEN"), *named = getenv("AWS_PROFILE");

	if (token == NULL || token[0] == '\0')
		token = getenv("AWS_SECURITY_TOKEN"); /* the older name */

	memset(out, 0, sizeof(*out));
	if (profile[0] != '\0')
		return from_profile(profile, out, err, err_len);
	if (id != NULL && id[0] != '\0' && secret != NULL && secret[0] != '\0') {
		out->access_key = ob_xstrdup(id);
		out->secret_key = ob_xstrdup(secret);
		out->session_token = token != NULL && token[0] != '\0' ? ob_xstrdup(token) : NULL;
		snprintf(out->source, sizeof(out->source), "the environment (AWS_ACCESS_KEY_ID)");
		return true;
	}
	return from_profile(named != NULL && named[0] != '\0' ? named : "default", out, err,
			    err_len);
}

void
ob_awscreds_clear(ob_awscreds *c)
{
	ob_credcmd_free(c->access_key);
	ob_credcmd_free(c->secret_key);
	ob_credcmd_free(c->session_token);
	memset(c, 0, sizeof(*c));
}

bool
ob_aws_region(const char *configured, const char *profile, char *out, size_t len, char *err,
	      size_t err_len)
{
	const char *env[] = {configured, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION")};
	const char *named = getenv("AWS_PROFILE");
	char path[1024];
	profile_read p;

	out[0] = '\0';
	for (size_t i = 0; i < OB_ARRAY_LEN(env) && out[0] == '\0'; i++) {
		if (env[i] != NULL)
			snprintf(out, len, "%s", env[i]);
	}
	if (out[0] == '\0') {
		if (profile[0] == '\0')
			profile = named != NULL && named[0] != '\0' ? named : "default";
		read_profile(profile, true, &p, path, sizeof(path));
		snprintf(out, len, "%s", p.region != NULL ? p.region : "");
		profile_read_clear(&p);
		if (out[0] == '\0') {
			snprintf(err, err_len,
				 "no AWS region: set aws_region, AWS_REGION or AWS_DEFAULT_REGION, "
				 "or region in profile %s of %s",
				 profile, path[0] ? path : "~/.aws/config (HOME unset)");
			return false;
		}
	}
	/* It becomes part of a host name and of the signed scope. */
	if (strspn(out, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(out)) {
		snprintf(err, err_len,
			 "AWS region \"%s\" is not a region name (lower-case letters, digits and "
			 "'-', such as eu-west-1)",
			 out);
		return false;
	}
	return true;
}

/* "host/?QUERY&X-Amz-Signature=..." for a GET of "/" at host, presigned
 * with c for service in region at now; extra are the request's own
 * query parameters. */
static char *
presign(const ob_awscreds *c, const char *region, const char *service, const char *host,
	const ob_sigv4_pair *extra, size_t extra_len, time_t now)
{
	char date[17], *credential, *signed_host = ob_xstrdup(host);
	ob_sigv4_pair query[8], header = {"host", signed_host};
	size_t n = 0;
	ob_sigv4_result r;
	ob_sigv4_request req = {
	    .method = "GET",
	    .path = "/",
	    .query = query,
	    .headers = &header,
	    .headers_len = 1,
	    .payload_hash = OB_SIGV4_EMPTY_SHA256,
	    .secret_key = c->secret_key,
	    .amz_date = date,
	    .region = region,
	    .service = service,
	};
	char *url;

	/* The host header as AWS's SDKs sign it: a host name is lower case
	 * (botocore takes urllib's hostname); the URL keeps it as given. */
	for (char *h = signed_host; *h; h++)
		*h = (char)tolower((unsigned char)*h);
	ob_sigv4_amz_date(now, date);
	credential =
	    ob_xasprintf("%s/%.8s/%s/%s/aws4_request", c->access_key, date, region, service);
	for (; n < extra_len; n++)
		query[n] = extra[n];
	query[n++] = (ob_sigv4_pair){"X-Amz-Algorithm", "AWS4-HMAC-SHA256"};
	query[n++] = (ob_sigv4_pair){"X-Amz-Credential", credential};
	query[n++] = (ob_sigv4_pair){"X-Amz-Date", date};
	query[n++] = (ob_sigv4_pair){"X-Amz-Expires", OB_STRINGIFY(OB_AWSIAM_EXPIRES)};
	query[n++] = (ob_sigv4_pair){"X-Amz-SignedHeaders", "host"};
	if (c->session_token != NULL)
		query[n++] = (ob_sigv4_pair){"X-Amz-Security-Token", c->session_token};
	req.query_len = n;
	ob_sigv4_sign(&req, &r);
	url = ob_xasprintf("%s/?%s&X-Amz-Signature=%s", host, r.canonical_query, r.signature);
	explicit_bzero(r.canonical_query, strlen(r.canonical_query));
	explicit_bzero(r.canonical_request, strlen(r.canonical_request));
	ob_sigv4_result_clear(&r);
	free(credential);
	free(signed_host);
	return url;
}

char *
ob_awsiam_rds_token(const ob_awscreds *c, const char *region, const char *host, int port,
		    const char *user, time_t now)
{
	const ob_sigv4_pair query[] = {{"Action", "connect"}, {"DBUser", user}};
	char *target = ob_xasprintf("%s:%d", host, port);
	char *token = presign(c, region, "rds-db", target, query, OB_ARRAY_LEN(query), now);

	free(target);
	return token;
}

char *
ob_awsiam_msk_token(const ob_awscreds *c, const char *region, time_t now)
{
	const ob_sigv4_pair query[] = {{"Action", "kafka-cluster:Connect"}};
	char *host = ob_xasprintf("kafka.%s.amazonaws.com", region);
	char *signed_url = presign(c, region, "kafka-cluster", host, query, 1, now);
	/* The signer's name goes along unsigned, as AWS's own signers add it. */
	char *url = ob_xasprintf("https://%s&User-Agent=outboxd%%2F" OB_VERSION, signed_url);
	size_t len = strlen(url);
	char *b64 = ob_xmalloc(4 * ((len + 2) / 3) + 1);
	int n = EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)url, (int)len);

	while (n > 0 && b64[n - 1] == '=')
		n--;
	b64[n] = '\0';
	for (char *p = b64; *p; p++)
		*p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
	ob_credcmd_free(signed_url);
	ob_credcmd_free(url);
	free(host);
	return b64;
}

/* Credentials and region for a section's aws_region and aws_profile. */
static bool
load(const char *setting, const char *region_set, const char *profile, ob_awscreds *c, char *region,
     size_t region_len, char *err, size_t err_len)
{
	char why[768];

	if (!ob_awscreds_load(profile, c, why, sizeof(why)) ||
	    !ob_aws_region(region_set, profile, region, region_len, why, sizeof(why))) {
		snprintf(err, err_len, "%s: %s", setting, why);
		ob_awscreds_clear(c);
		return false;
	}
	return true;
}

bool
ob_awsiam_rds_password(const char *setting, const char *region_set, const char *profile,
		       const char *host, int port, const char *user, time_t now, char **token,
		       char *source, size_t source_len, char *err, size_t err_len)
{
	ob_awscreds c;
	char region[64];

	*token = NULL;
	if (!load(setting, region_set, profile, &c, region, sizeof(region), err, err_len))
		return false;
	*token = ob_awsiam_rds_token(&c, region, host, port, user, now);
	snprintf(source, source_len, "%s, region %s", c.source, region);
	ob_awscreds_clear(&c);
	return true;
}

bool
ob_awsiam_msk(const char *setting, const char *region_set, const char *profile, time_t now,
	      char **token, char *principal, size_t principal_len, char *source, size_t source_len,
	      char *err, size_t err_len)
{
	ob_awscreds c;
	char region[64];

	*token = NULL;
	if (!load(setting, region_set, profile, &c, region, sizeof(region), err, err_len))
		return false;
	*token = ob_awsiam_msk_token(&c, region, now);
	snprintf(principal, principal_len, "%s", c.access_key);
	snprintf(source, source_len, "%s, region %s", c.source, region);
	ob_awscreds_clear(&c);
	return true;
}
