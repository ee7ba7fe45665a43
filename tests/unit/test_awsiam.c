/*
 * test_awsiam.c: RDS and MSK IAM tokens and where their credentials and
 * region come from (awsiam.h).
 *
 * The RDS token without a session token is botocore's published example
 * (its test of generate_db_auth_token: akid/skid, us-east-1,
 * 2016-11-07T17:39:33Z). The others are what botocore 1.43 gives for the
 * same moment: generate_db_auth_token with a session token, and the MSK
 * signer's construction (aws-msk-iam-sasl-signer-python: SigV4QueryAuth of
 * a GET of https://kafka.REGION.amazonaws.com/ with
 * Action=kafka-cluster:Connect, 900 s), before its base64url encoding.
 * botocore writes X-Amz-SignedHeaders before X-Amz-Security-Token; outboxd
 * writes every parameter in the signed (sorted) order, which the server
 * sorts to check the signature all the same.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "outboxd/awsiam.h"
#include "outboxd/credcmd.h"

#define MOMENT ((time_t)1478540373) /* 2016-11-07T17:39:33Z */
/* A session token as long as STS gives (they run to 1,000 characters and
 * more): past the 199 characters inih reads of a line. */
#define TOKEN_97                                                                                   \
	"IQoJb3JpZ2luX2VjEJr//////////"                                                            \
	"wEaCXVzLWVhc3QtMSJHMEUCIQDx0123456789abcdefghijklmnopqrstuvwxyzABCDE"
#define LONG_TOKEN                                                                                 \
	TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97 TOKEN_97  \
	    TOKEN_97 TOKEN_97
#define RDS_HOST "prod-instance.us-east-1.rds.amazonaws.com"
#define CREDENTIAL(service)                                                                        \
	"X-Amz-Credential=akid%2F20161107%2Fus-east-1%2F" service "%2Faws4_request"

static ob_awscreds
creds(const char *token)
{
	ob_awscreds c = {"akid", "skid", (char *)token, "test"};

	return c;
}

static void
test_rds_token(void **state)
{
	ob_awscreds c = creds(NULL);
	char *t = ob_awsiam_rds_token(&c, "us-east-1", RDS_HOST, 3306, "someusername", MOMENT);

	(void)state;
	assert_string_equal(t, RDS_HOST
			    ":3306/?Action=connect&DBUser=someusername&X-Amz-"
			    "Algorithm=AWS4-HMAC-SHA256&" CREDENTIAL(
				"rds-db") "&X-Amz-Date=20161107T173933Z&X-Amz-Expires=900&"
					  "X-Amz-SignedHeaders=host&X-Amz-Signature="
					  "d1138cdbc0ca63eec012ec0fc6c2267e03642168f5884a7795"
					  "320d4c18374c61");
	ob_credcmd_free(t);

	c = creds("tok/en+1=");
	t = ob_awsiam_rds_token(&c, "us-east-1", RDS_HOST, 3306, "some user@x", MOMENT);
	assert_string_equal(
	    t, RDS_HOST
	    ":3306/?Action=connect&DBUser=some%20user%40x&X-Amz-Algorithm=AWS4-HMAC-"
	    "SHA256&" CREDENTIAL("rds-db") "&X-Amz-Date=20161107T173933Z&X-Amz-Expires=900&"
					   "X-Amz-Security-Token=tok%2Fen%2B1%3D&X-Amz-"
					   "SignedHeaders=host&X-Amz-Signature="
					   "49c62c93f93a45b2c778201f8231d194d06621bf9faa75e4"
					   "241e743ecfb567ae");
	ob_credcmd_free(t);
}

/* The host of the signed "host" header is lower case, as botocore (and
 * so `aws rds generate-db-auth-token`) signs it: urllib's hostname is
 * lower case; the token's prefix keeps the host as written. What botocore
 * 1.43 gives for Orders.ABC.eu-west-1.RDS.amazonaws.com at the moment. */
static void
test_rds_token_host_in_upper_case(void **state)
{
	ob_awscreds c = creds(NULL);
	char *t = ob_awsiam_rds_token(&c, "us-east-1", "Orders.ABC.eu-west-1.RDS.amazonaws.com",
				      5432, "bob", MOMENT);

	(void)state;
	assert_string_equal(t, "Orders.ABC.eu-west-1.RDS.amazonaws.com:5432/?Action=connect&"
			       "DBUser=bob&X-Amz-Algorithm=AWS4-HMAC-SHA256&" CREDENTIAL(
				   "rds-db") "&X-Amz-Date=20161107T173933Z&X-Amz-Expires=900&"
					     "X-Amz-SignedHeaders=host&X-Amz-Signature="
					     "868950eab069dac36b230757f8d509a493c98a62195e814eb"
					     "63254ec4cc40e4a");
	ob_credcmd_free(t);
}

/* The MSK token decoded: only base64url characters, no padding. */
static char *
decode_msk(const char *token)
{
	size_t len = strlen(token), padded = (len + 3) / 4 * 4;
	char *b64 = calloc(padded + 1, 1), *out = calloc(padded, 1);

	assert_int_equal(
	    strspn(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"), len);
	memcpy(b64, token, len);
	memset(b64 + len, '=', padded - len);
	for (char *p = b64; *p; p++)
		*p = *p == '-' ? '+' : *p == '_' ? '/' : *p;
	assert_true(EVP_DecodeBlock((unsigned char *)out, (unsigned char *)b64, (int)padded) > 0);
	free(b64);
	return out;
}

static void
test_msk_token(void **state)
{
	static const char *const want[] = {
	    "https://kafka.us-east-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm="
	    "AWS4-HMAC-SHA256&" CREDENTIAL(
		"kafka-cluster") "&X-Amz-Date=20161107T173933Z&X-Amz-"
				 "Expires=900&X-Amz-SignedHeaders=host&X-"
				 "Amz-Signature="
				 "f96794207e6c5e753931e9221f7e81759d7d6819"
				 "2e8e9565a3efdeb2b54f541a&User-Agent="
				 "outboxd%2F",
	    "https://kafka.us-east-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm="
	    "AWS4-HMAC-SHA256&" CREDENTIAL(
		"kafka-cluster") "&X-Amz-Date=20161107T173933Z&X-Amz-"
				 "Expires=900&X-Amz-Security-Token=tok%2Fen%"
				 "2B1%3D&X-Amz-SignedHeaders=host&X-Amz-"
				 "Signature="
				 "d5b07a3cd1a5e234f0c470a3409425010dd816db"
				 "70d8034c04a0f5159444ce2b&User-Agent="
				 "outboxd%2F",
	};
	const char *tokens[] = {NULL, "tok/en+1="};

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		ob_awscreds c = creds(tokens[i]);
		char *t = ob_awsiam_msk_token(&c, "us-east-1", MOMENT), *url = decode_msk(t);

		if (strncmp(url, want[i], strlen(want[i])) != 0)
			fail_msg("token %zu is %s", i, url);
		free(url);
		ob_credcmd_free(t);
	}
}

/* A scratch HOME with .aws/credentials and .aws/config. */
static char home[64];

static void
write_file(const char *name, const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/.aws/%s", home, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int
setup_home(void **state)
{
	char dir[96];

	(void)state;
	snprintf(home, sizeof(home), "/tmp/test_awsiam.XXXXXX");
	assert_non_null(mkdtemp(home));
	snprintf(dir, sizeof(dir), "%s/.aws", home);
	assert_int_equal(mkdir(dir, 0700), 0);
	setenv("HOME", home, 1);
	for (const char *const *v =
		 (const char *const[]){"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
				       "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
				       "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE",
				       "AWS_SHARED_CREDENTIALS_FILE", NULL};
	     *v != NULL; v++)
		unsetenv(*v);
	write_file("credentials",
		   "[default]\naws_access_key_id = DEFKEY\n"
		   "aws_secret_access_key = defsecret\n"
		   "[prod]\naws_access_key_id=PRODKEY\naws_secret_access_key=prodsecret\n"
		   "aws_session_token = prodtoken\n"
		   "[long]\naws_access_key_id = LONGKEY\naws_secret_access_key = ls\n"
		   "aws_session_token = " LONG_TOKEN "\n"
		   "[rolekeys]\naws_access_key_id = BASEKEY\naws_secret_access_key = basesecret\n");
	write_file("config", "[default]\nregion = eu-west-1\n"
			     "[profile cfgonly]\naws_access_key_id = CFGKEY\n"
			     "aws_secret_access_key = cfgsecret\nregion = ap-south-1\n"
			     "[profile assumed]\nrole_arn = arn:aws:iam::1:role/x\n"
			     "source_profile = default\n"
			     "[profile prod]\nregion = us-west-2\n"
			     "[profile rolekeys]\nrole_arn = arn:aws:iam::1:role/y\n");
	return 0;
}

static int
teardown_home(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", home);
	return system(cmd);
}

/* Load profile's credentials: the access key, or NULL when refused with
 * an error containing error. */
static void
expect_creds(const char *profile, const char *key, const char *token, const char *error)
{
	ob_awscreds c;
	char err[1024] = "";
	bool ok = ob_awscreds_load(profile, &c, err, sizeof(err));

	if (key == NULL) {
		assert_false(ok);
		if (strstr(err, error) == NULL)
			fail_msg("profile \"%s\": \"%s\" lacks \"%s\"", profile, err, error);
		for (const char *const *v =
			 (const char *const[]){"defsecret", "prodsecret", "basesecret", "cfgsecret",
					       "prodtoken", NULL};
		     *v != NULL; v++)
			assert_null(strstr(err, *v));
		return;
	}
	if (!ok)
		fail_msg("profile \"%s\": %s", profile, err);
	assert_string_equal(c.access_key, key);
	if (token == NULL)
		assert_null(c.session_token);
	else
		assert_string_equal(c.session_token, token);
	ob_awscreds_clear(&c);
}

static void
test_credential_sources(void **state)
{
	(void)state;
	expect_creds("", "DEFKEY", NULL, NULL);
	expect_creds("prod", "PRODKEY", "prodtoken", NULL);
	expect_creds("long", "LONGKEY", LONG_TOKEN, NULL);
	expect_creds("cfgonly", "CFGKEY", NULL, NULL); /* [profile cfgonly] of config */
	expect_creds("assumed", NULL, NULL, "gets its credentials through role_arn");
	/* A role in the config file wins over keys in the credentials file,
	 * as in AWS's SDKs: never signed with the keys. */
	expect_creds("rolekeys", NULL, NULL, "gets its credentials through role_arn");
	expect_creds("nosuch", NULL, NULL, "profile nosuch has no aws_access_key_id");

	setenv("AWS_PROFILE", "prod", 1);
	expect_creds("", "PRODKEY", "prodtoken", NULL);
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	expect_creds("", "ENVKEY", NULL, NULL); /* the environment before AWS_PROFILE */
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	expect_creds("", "ENVKEY", "envtoken", NULL);
	expect_creds("cfgonly", "CFGKEY", NULL, NULL); /* aws_profile before the environment */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_PROFILE");

	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
	expect_creds("", NULL, NULL, "/nonexistent/credentials");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

static void expect_region(const char *configured, const char *profile, const char *want);

/* Files as botocore reads them: option names in any case (configparser
 * lower-cases them), the older aws_security_token for the session token
 * (written by saml2aws, gimme-aws-creds, aws-vault's older versions),
 * [profile default] in the config file, an empty aws_session_token, and
 * AWS_SECURITY_TOKEN in the environment. */
static void
test_credential_files_as_botocore_reads_them(void **state)
{
	char creds_path[128], config_path[128];

	(void)state;
	snprintf(creds_path, sizeof(creds_path), "%s/.aws/credentials2", home);
	snprintf(config_path, sizeof(config_path), "%s/.aws/config2", home);
	setenv("AWS_SHARED_CREDENTIALS_FILE", creds_path, 1);
	setenv("AWS_CONFIG_FILE", config_path, 1);
	write_file("credentials2", "[upper]\nAWS_ACCESS_KEY_ID = UPKEY\n"
				   "AWS_Secret_Access_Key = upsecret\n"
				   "[old]\naws_access_key_id = OLDKEY\n"
				   "aws_secret_access_key = oldsecret\n"
				   "aws_security_token = oldtoken\n"
				   "[emptytoken]\naws_access_key_id = ETKEY\n"
				   "aws_secret_access_key = etsecret\naws_session_token =\n");
	write_file("config2", "[profile default]\naws_access_key_id = CFGDEFKEY\n"
			      "aws_secret_access_key = cfgdefsecret\nregion = eu-central-1\n");
	expect_creds("upper", "UPKEY", NULL, NULL);
	expect_creds("old", "OLDKEY", "oldtoken", NULL);
	/* An empty session token is none (botocore adds no
	 * X-Amz-Security-Token then), not an empty parameter AWS refuses. */
	expect_creds("emptytoken", "ETKEY", NULL, NULL);
	expect_creds("", "CFGDEFKEY", NULL, NULL);
	expect_region("", "", "eu-central-1");

	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SECURITY_TOKEN", "envoldtoken", 1);
	expect_creds("", "ENVKEY", "envoldtoken", NULL);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	expect_creds("", "ENVKEY", "envtoken", NULL);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SECURITY_TOKEN");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
}

static void
expect_region(const char *configured, const char *profile, const char *want)
{
	char region[64], err[512] = "";
	bool ok = ob_aws_region(configured, profile, region, sizeof(region), err, sizeof(err));

	if (strncmp(want, "error:", 6) == 0) {
		assert_false(ok);
		if (strstr(err, want + 6) == NULL)
			fail_msg("\"%s\" lacks \"%s\"", err, want + 6);
		return;
	}
	if (!ok)
		fail_msg("%s", err);
	assert_string_equal(region, want);
}

static void
test_region(void **state)
{
	(void)state;
	expect_region("", "", "eu-west-1");
	expect_region("", "prod", "us-west-2");
	expect_region("", "cfgonly", "ap-south-1");
	expect_region("", "nosuch", "error:no AWS region");
	expect_region("sa-east-1", "prod", "sa-east-1");
	setenv("AWS_DEFAULT_REGION", "ca-central-1", 1);
	expect_region("", "prod", "ca-central-1");
	setenv("AWS_REGION", "me-south-1", 1);
	expect_region("", "prod", "me-south-1");
	expect_region("eu-north-1", "prod", "eu-north-1");
	expect_region("evil.example.com/x", "", "error:is not a region name");
	unsetenv("AWS_REGION");
	unsetenv("AWS_DEFAULT_REGION");
}

static void
test_combined_errors_name_the_setting(void **state)
{
	char *token, source[256], err[1024];

	(void)state;
	assert_false(ob_awsiam_rds_password("postgres.auth aws_iam", "", "assumed", RDS_HOST, 5432,
					    "u", MOMENT, &token, source, sizeof(source), err,
					    sizeof(err)));
	assert_null(token);
	assert_non_null(strstr(err, "postgres.auth aws_iam: AWS profile assumed"));
	assert_true(ob_awsiam_rds_password("postgres.auth aws_iam", "", "prod", RDS_HOST, 5432, "u",
					   MOMENT, &token, source, sizeof(source), err,
					   sizeof(err)));
	assert_non_null(strstr(source, "profile prod of "));
	assert_non_null(strstr(source, "region us-west-2"));
	assert_non_null(strstr(token, "X-Amz-Security-Token=prodtoken&"));
	ob_credcmd_free(token);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rds_token),
	    cmocka_unit_test(test_rds_token_host_in_upper_case),
	    cmocka_unit_test(test_msk_token),
	    cmocka_unit_test(test_credential_sources),
	    cmocka_unit_test(test_region),
	    cmocka_unit_test(test_combined_errors_name_the_setting),
	    /* Last: it points the files elsewhere. */
	    cmocka_unit_test(test_credential_files_as_botocore_reads_them),
	};

	return cmocka_run_group_tests(tests, setup_home, teardown_home);
}
