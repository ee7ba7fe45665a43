/*
 * fuzz_awsiam.c: libFuzzer target for the AWS IAM tokens (awsiam.h,
 * sigv4.h) and the reading of the AWS shared files.
 *
 * The input is up to five fields separated by NUL bytes: an AWS shared
 * credentials file, a profile name, a host, a database user and a region.
 * The file is read through ob_awscreds_load() from a memfd (as
 * AWS_SHARED_CREDENTIALS_FILE), with and without the profile; with
 * credentials found, the region is judged by ob_aws_region() and the RDS
 * and MSK tokens are signed.
 *
 * What must hold: credentials loaded have a non-empty key and secret, as
 * written in the file; an error never quotes the secret; a region
 * accepted is a region name; the RDS token is "host:port/?QUERY" whose
 * parameters, decoded, are exactly those signed (Action, DBUser as given,
 * the X-Amz-* set) ending with a 64-hex signature that signing the
 * decoded parameters again reproduces; the MSK token is unpadded
 * base64url of "https://kafka.REGION.amazonaws.com/?...".
 */
#include "fuzz.h"

#include "outboxd/awsiam.h"
#include "outboxd/credcmd.h"
#include "outboxd/sigv4.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MOMENT ((time_t)1478540373)

static int file_fd = -1;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char path[64];

	(void)argc;
	(void)argv;
	file_fd = memfd_create("outboxd-fuzz-aws", 0);
	OB_FUZZ_CHECK(file_fd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", file_fd);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	for (const char *const *v = (const char *const[]){"AWS_ACCESS_KEY_ID", "AWS_PROFILE",
							  "AWS_REGION", "AWS_DEFAULT_REGION", NULL};
	     *v != NULL; v++)
		unsetenv(*v);
	return 0;
}

static int
hex_value(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* s percent-decoded (upper-case hex only, as the signer writes it); NULL
 * when it holds anything the signer would have encoded. */
static char *
decode(const char *s, size_t n)
{
	char *out = ob_xmalloc(n + 1), *p = out;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%' && i + 2 < n && hex_value(s[i + 1]) >= 0 &&
		    hex_value(s[i + 2]) >= 0) {
			*p++ = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
			i += 2;
		} else if (strchr("-_.~", s[i]) != NULL || (s[i] >= '0' && s[i] <= '9') ||
			   (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) {
			*p++ = s[i];
		} else {
			free(out);
			return NULL;
		}
	}
	*p = '\0';
	return out;
}

/* Check the RDS token t for user at host:5432 signed with c in region. */
static void
check_rds(const char *t, const ob_awscreds *c, const char *region, const char *host,
	  const char *user)
{
	char *prefix = ob_xasprintf("%s:5432/?", host), *sig, *signed_url;
	ob_sigv4_pair params[8];
	size_t n = 0;
	const char *q;

	OB_FUZZ_CHECK(strncmp(t, prefix, strlen(prefix)) == 0);
	q = t + strlen(prefix);
	sig = strstr(q, "&X-Amz-Signature=");
	OB_FUZZ_CHECK(sig != NULL && strlen(sig + 17) == 64 &&
		      strspn(sig + 17, "0123456789abcdef") == 64);
	while (q < sig) {
		const char *amp = memchr(q, '&', (size_t)(sig - q)), *end = amp ? amp : sig;
		const char *eq = memchr(q, '=', (size_t)(end - q));

		OB_FUZZ_CHECK(eq != NULL && n < OB_ARRAY_LEN(params));
		params[n].name = decode(q, (size_t)(eq - q));
		params[n].value = decode(eq + 1, (size_t)(end - eq - 1));
		OB_FUZZ_CHECK(params[n].name != NULL && params[n].value != NULL);
		n++;
		q = end + (amp != NULL);
	}
	OB_FUZZ_CHECK(n == 7 + (c->session_token != NULL));
	OB_FUZZ_CHECK(strcmp(params[0].name, "Action") == 0 &&
		      strcmp(params[0].value, "connect") == 0);
	OB_FUZZ_CHECK(strcmp(params[1].name, "DBUser") == 0 && strcmp(params[1].value, user) == 0);
	/* Signing the parameters as decoded gives the same token back. */
	signed_url = ob_awsiam_rds_token(c, region, host, 5432, user, MOMENT);
	OB_FUZZ_CHECK(strcmp(signed_url, t) == 0);
	for (size_t i = 0; i < n; i++) {
		free((char *)params[i].name);
		free((char *)params[i].value);
	}
	ob_credcmd_free(signed_url);
	free(prefix);
}

static void
check_msk(const char *t, const char *region)
{
	size_t len = strlen(t), padded = (len + 3) / 4 * 4;
	char *b64 = calloc(padded + 1, 1), *url = calloc(padded + 1, 1);
	char *want = ob_xasprintf(
	    "https://kafka.%s.amazonaws.com/?Action=kafka-cluster%%3AConnect&", region);

	OB_FUZZ_CHECK(b64 != NULL && url != NULL);
	OB_FUZZ_CHECK(
	    strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == len);
	memcpy(b64, t, len);
	memset(b64 + len, '=', padded - len);
	for (char *p = b64; *p; p++)
		*p = *p == '-' ? '+' : *p == '_' ? '/' : *p;
	OB_FUZZ_CHECK(EVP_DecodeBlock((unsigned char *)url, (unsigned char *)b64, (int)padded) >=
		      0);
	OB_FUZZ_CHECK(strncmp(url, want, strlen(want)) == 0);
	free(want);
	free(b64);
	free(url);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *field[5] = {"", "", "db.example.com", "app", "eu-west-1"};
	char *copy = ob_xmalloc(size + 1), *p = copy, err[2048], region[64];
	ob_awscreds c;

	memcpy(copy, data, size);
	copy[size] = '\0';
	for (size_t i = 0; i < 5 && p <= copy + size; i++) {
		field[i] = p;
		p += strlen(p) + 1;
	}
	OB_FUZZ_CHECK(ftruncate(file_fd, 0) == 0);
	OB_FUZZ_CHECK(pwrite(file_fd, copy, strlen(copy), 0) == (ssize_t)strlen(copy));
	for (int with_profile = 0; with_profile < 2; with_profile++) {
		if (!ob_awscreds_load(with_profile ? field[1] : "", &c, err, sizeof(err))) {
			OB_FUZZ_CHECK(err[0] != '\0');
			continue;
		}
		OB_FUZZ_CHECK(c.access_key[0] != '\0' && c.secret_key[0] != '\0');
		OB_FUZZ_CHECK(strstr(copy, c.secret_key) != NULL);
		if (ob_aws_region(field[4], "", region, sizeof(region), err, sizeof(err))) {
			char *rds =
			    ob_awsiam_rds_token(&c, region, field[2], 5432, field[3], MOMENT);
			char *msk = ob_awsiam_msk_token(&c, region, MOMENT);

			OB_FUZZ_CHECK(region[0] != '\0' &&
				      strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") ==
					  strlen(region));
			check_rds(rds, &c, region, field[2], field[3]);
			check_msk(msk, region);
			ob_credcmd_free(rds);
			ob_credcmd_free(msk);
		} else {
			OB_FUZZ_CHECK(err[0] != '\0');
		}
		ob_awscreds_clear(&c);
	}
	free(copy);
	return 0;
}
