/*
 * sigv4.c: AWS Signature Version 4 (sigv4.h).
 */
#include "outboxd/sigv4.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An encoded name and value, sorted by both. */
typedef struct pair {
	char *name;
	char *value;
} pair;

static void
to_hex(const unsigned char *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

static void
hmac(const unsigned char *key, size_t key_len, const char *data, unsigned char out[32])
{
	unsigned int len = 32;

	if (HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)data, strlen(data), out,
		 &len) == NULL)
		abort(); /* only on an unusable OpenSSL: nothing to sign with */
}

char *
ob_sigv4_encode(const char *s)
{
	static const char digits[] = "0123456789ABCDEF";
	char *out = ob_xmalloc(3 * strlen(s) + 1), *p = out;

	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (isalnum(*c) && *c < 0x80)
			*p++ = (char)*c;
		else if (*c == '-' || *c == '_' || *c == '.' || *c == '~')
			*p++ = (char)*c;
		else {
			*p++ = '%';
			*p++ = digits[*c >> 4];
			*p++ = digits[*c & 15];
		}
	}
	*p = '\0';
	return out;
}

void
ob_sigv4_signing_key(const char *secret, const char *date, const char *region, const char *service,
		     unsigned char key[32])
{
	char *first = ob_xasprintf("AWS4%s", secret);

	hmac((const unsigned char *)first, strlen(first), date, key);
	explicit_bzero(first, strlen(first));
	free(first);
	hmac(key, 32, region, key);
	hmac(key, 32, service, key);
	hmac(key, 32, "aws4_request", key);
}

void
ob_sigv4_amz_date(time_t t, char buf[17])
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static int
pair_cmp(const void *a, const void *b)
{
	const pair *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c != 0 ? c : strcmp(x->value, y->value);
}

/* Free n pairs, their values wiped (a session token is one). */
static void
pairs_free(pair *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		explicit_bzero(p[i].value, strlen(p[i].value));
		free(p[i].value);
	}
	free(p);
}

/* A header's value as signed: no spaces before or after, runs of spaces
 * inside as one. */
static char *
trim_value(const char *v)
{
	char *out = ob_xmalloc(strlen(v) + 1), *p = out;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if ((*v == ' ' || *v == '\t') && (p > out && p[-1] == ' '))
			continue;
		*p++ = *v == '\t' ? ' ' : *v;
	}
	while (p > out && p[-1] == ' ')
		p--;
	*p = '\0';
	return out;
}

/* The canonical query: encoded names and values, sorted, joined by '&'. */
static char *
canonical_query(const ob_sigv4_request *req)
{
	pair *q = ob_xcalloc(req->query_len + 1, sizeof(*q));
	char *out = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&out, &size);

	if (f == NULL)
		abort();
	for (size_t i = 0; i < req->query_len; i++) {
		q[i].name = ob_sigv4_encode(req->query[i].name);
		q[i].value = ob_sigv4_encode(req->query[i].value);
	}
	qsort(q, req->query_len, sizeof(*q), pair_cmp);
	for (size_t i = 0; i < req->query_len; i++)
		fprintf(f, "%s%s=%s", i > 0 ? "&" : "", q[i].name, q[i].value);
	fclose(f);
	pairs_free(q, req->query_len);
	return out;
}

/* The canonical headers block (each "name:value\n", a repeated name's
 * values joined by ',') into f, and the signed header names. */
static char *
canonical_headers(const ob_sigv4_request *req, FILE *f)
{
	pair *h = ob_xcalloc(req->headers_len + 1, sizeof(*h));
	char *names = NULL;
	size_t size = 0;
	FILE *n = open_memstream(&names, &size);

	if (n == NULL)
		abort();
	for (size_t i = 0; i < req->headers_len; i++) {
		h[i].name = ob_xstrdup(req->headers[i].name);
		for (char *c = h[i].name; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		h[i].value = trim_value(req->headers[i].value);
	}
	/* A stable order of a repeated name's values: the order given. */
	for (size_t i = 1; i < req->headers_len; i++) {
		for (size_t j = i; j > 0 && strcmp(h[j - 1].name, h[j].name) > 0; j--) {
			pair t = h[j];

			h[j] = h[j - 1];
			h[j - 1] = t;
		}
	}
	for (size_t i = 0; i < req->headers_len; i++) {
		bool same = i > 0 && strcmp(h[i - 1].name, h[i].name) == 0;

		if (same)
			fprintf(f, ",%s", h[i].value);
		else {
			fprintf(f, "%s%s:%s", i > 0 ? "\n" : "", h[i].name, h[i].value);
			fprintf(n, "%s%s", i > 0 ? ";" : "", h[i].name);
		}
	}
	if (req->headers_len > 0)
		fputc('\n', f);
	fclose(n);
	pairs_free(h, req->headers_len);
	return names;
}

void
ob_sigv4_sign(const ob_sigv4_request *req, ob_sigv4_result *out)
{
	unsigned char digest[SHA256_DIGEST_LENGTH], key[32], sig[32];
	char hash[65], date[9];
	size_t size = 0;
	FILE *f;

	memset(out, 0, sizeof(*out));
	out->canonical_query = canonical_query(req);
	f = open_memstream(&out->canonical_request, &size);
	if (f == NULL)
		abort();
	fprintf(f, "%s\n%s\n%s\n", req->method, req->path, out->canonical_query);
	out->signed_headers = canonical_headers(req, f);
	fprintf(f, "\n%s\n%s", out->signed_headers, req->payload_hash);
	fclose(f);

	SHA256((const unsigned char *)out->canonical_request, strlen(out->canonical_request),
	       digest);
	to_hex(digest, sizeof(digest), hash);
	snprintf(date, sizeof(date), "%.8s", req->amz_date);
	out->string_to_sign = ob_xasprintf("AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
					   req->amz_date, date, req->region, req->service, hash);
	ob_sigv4_signing_key(req->secret_key, date, req->region, req->service, key);
	hmac(key, sizeof(key), out->string_to_sign, sig);
	explicit_bzero(key, sizeof(key));
	to_hex(sig, sizeof(sig), out->signature);
}

void
ob_sigv4_result_clear(ob_sigv4_result *r)
{
	free(r->canonical_query);
	free(r->canonical_request);
	free(r->signed_headers);
	free(r->string_to_sign);
	memset(r, 0, sizeof(*r));
}
