/*
 * sigv4.h: AWS Signature Version 4 (HMAC-SHA256 from OpenSSL), the
 * signing behind the IAM tokens of awsiam.h.
 *
 * The signer follows AWS's published algorithm and is checked against its
 * test suite and documented examples (tests/unit/test_sigv4.c): a
 * canonical request (method, path, sorted and URI-encoded query, sorted
 * lower-case headers with trimmed values, the signed header names, the
 * payload's hash), the string to sign (algorithm, date, scope, the
 * canonical request's SHA-256), and the signature, an HMAC chain from the
 * secret key through the date, region, service and "aws4_request".
 */
#ifndef OUTBOXD_SIGV4_H
#define OUTBOXD_SIGV4_H

#include "outboxd/common.h"

#include <time.h>

/* The SHA-256 of an empty payload, in hex. */
#define OB_SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct ob_sigv4_pair {
	const char *name;
	const char *value;
} ob_sigv4_pair;

typedef struct ob_sigv4_request {
	const char *method;
	const char *path;           /* the canonical URI, already encoded: "/" for tokens */
	const ob_sigv4_pair *query; /* raw names and values: the signer encodes and sorts */
	size_t query_len;
	const ob_sigv4_pair *headers; /* the signed headers: names in any case */
	size_t headers_len;
	const char *payload_hash; /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
	const char *secret_key;
	const char *amz_date; /* YYYYMMDDTHHMMSSZ; its first 8 characters are the scope's date */
	const char *region;
	const char *service;
} ob_sigv4_request;

/* What signing gave; every string is the caller's, released with
 * ob_sigv4_result_clear(). */
typedef struct ob_sigv4_result {
	char *canonical_query; /* as it goes into a presigned URL */
	char *canonical_request;
	char *signed_headers; /* "host;x-amz-date" */
	char *string_to_sign;
	char signature[65]; /* lower-case hex */
} ob_sigv4_result;

/* Sign req into *out. Cannot fail (out of memory aborts, as everywhere). */
void ob_sigv4_sign(const ob_sigv4_request *req, ob_sigv4_result *out);
void ob_sigv4_result_clear(ob_sigv4_result *r);

/* s URI-encoded as SigV4 wants: every byte but A-Z a-z 0-9 - _ . ~ as
 * %XX with upper-case hex. The caller frees. */
char *ob_sigv4_encode(const char *s);

/* The derived signing key of secret for date (YYYYMMDD), region and
 * service, into key. */
void ob_sigv4_signing_key(const char *secret, const char *date, const char *region,
			  const char *service, unsigned char key[32]);

/* t (UTC) as YYYYMMDDTHHMMSSZ. */
void ob_sigv4_amz_date(time_t t, char buf[17]);

#endif
