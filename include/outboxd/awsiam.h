/*
 * awsiam.h: built-in AWS IAM authentication (deploy/README.md, "AWS IAM"):
 * the RDS/Aurora IAM token postgres.auth = aws_iam gives as the password,
 * and the MSK IAM token kafka_auth.method = aws_msk_iam gives librdkafka's
 * OAUTHBEARER.
 *
 * Credentials come only from sources that need no call over the network,
 * read again for every token (so a file an agent rewrites, or rotated
 * variables of a restarted process, take effect at the next connection):
 *
 *   - with aws_profile set: that profile of the shared credentials file
 *     ($AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials), else of the
 *     config file ($AWS_CONFIG_FILE, else ~/.aws/config, as
 *     [profile NAME]);
 *   - else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
 *     AWS_SESSION_TOKEN) when set;
 *   - else the profile $AWS_PROFILE, or "default", of those files.
 *
 * A profile that would need a call to AWS (role_arn, credential_process,
 * sso_*, web_identity_token_file) is refused with a pointer to the command
 * route (postgres.password_command, kafka_auth.token_command). The region
 * is aws_region, else AWS_REGION, else AWS_DEFAULT_REGION, else the
 * profile's region in the config file.
 *
 * Tokens live 15 minutes (X-Amz-Expires=900) from the moment they are
 * signed; neither holds a secret key, only the access key id and the
 * signature (and a session token, which is secret: tokens are never
 * logged).
 */
#ifndef OUTBOXD_AWSIAM_H
#define OUTBOXD_AWSIAM_H

#include "outboxd/common.h"

#include <time.h>

/* How long a token is good for, in seconds. */
#define OB_AWSIAM_EXPIRES 900

typedef struct ob_awscreds {
	char *access_key;
	char *secret_key;
	char *session_token; /* NULL when the credentials are not temporary */
	char source[160];    /* where they came from: "environment", "profile prod of FILE" */
} ob_awscreds;

/* Load credentials as above, profile being aws_profile ("" when unset).
 * False with err saying what was missing or refused (never a secret). */
bool ob_awscreds_load(const char *profile, ob_awscreds *out, char *err,
		      size_t err_len) OB_MUST_CHECK;
/* Wipe and free (a zeroed struct is fine). */
void ob_awscreds_clear(ob_awscreds *c);

/* The region as above, configured being aws_region ("" when unset), into
 * out. False with err when none is found or it is not a region name
 * (lower-case letters, digits, '-'). */
bool ob_aws_region(const char *configured, const char *profile, char *out, size_t len, char *err,
		   size_t err_len) OB_MUST_CHECK;

/* The RDS/Aurora IAM token for user at host:port signed at now: a
 * presigned URL without its scheme,
 * "host:port/?Action=connect&DBUser=user&X-Amz-...". The caller frees it
 * with ob_credcmd_free(). */
char *ob_awsiam_rds_token(const ob_awscreds *c, const char *region, const char *host, int port,
			  const char *user, time_t now);

/* The MSK IAM token for region signed at now: the unpadded base64url of
 * "https://kafka.REGION.amazonaws.com/?Action=kafka-cluster%3AConnect&...".
 * The caller frees it with ob_credcmd_free(). */
char *ob_awsiam_msk_token(const ob_awscreds *c, const char *region, time_t now);

/* Load the credentials and region of a section's aws_region and
 * aws_profile settings (region_set, profile), then sign one token at now:
 * the RDS token for user at host:port, or the MSK token, with principal
 * the access key id (librdkafka wants one; MSK takes the identity from the
 * signature). source gets where the credentials came from and the region.
 * False with err, which starts with setting (the key that asked for the
 * token), when credentials or region are missing or refused. */
bool ob_awsiam_rds_password(const char *setting, const char *region_set, const char *profile,
			    const char *host, int port, const char *user, time_t now, char **token,
			    char *source, size_t source_len, char *err,
			    size_t err_len) OB_MUST_CHECK;
bool ob_awsiam_msk(const char *setting, const char *region_set, const char *profile, time_t now,
		   char **token, char *principal, size_t principal_len, char *source,
		   size_t source_len, char *err, size_t err_len) OB_MUST_CHECK;

#endif
