/*
 * test_sigv4.c: the SigV4 signer (sigv4.h) against AWS's published
 * vectors: cases of the SigV4 test suite (aws-sig-v4-test-suite: key
 * AKIDEXAMPLE, 2015-08-30T12:36:00Z, us-east-1, service "service"), the
 * signing key of AWS's key derivation example, and the presigned URL of
 * the S3 documentation's query-string example ("GET Object").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/sigv4.h"

#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_DATE   "20150830T123600Z"
#define UNRESERVED   "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

typedef struct suite_case {
	const char *name;
	const char *method;
	ob_sigv4_pair query[3];
	ob_sigv4_pair headers[2]; /* besides Host and X-Amz-Date */
	const char *payload_hash; /* NULL: the empty payload's */
	const char *canonical_query;
	const char *sts_hash;  /* the string to sign's last line, when published */
	const char *signature; /* NULL: only sts_hash is published */
} suite_case;

static const suite_case suite[] = {
    {"get-vanilla",
     "GET",
     {{0}},
     {{0}},
     NULL,
     "",
     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
    {"get-vanilla-query-order-key-case",
     "GET",
     {{"Param2", "value2"}, {"Param1", "value1"}},
     {{0}},
     NULL,
     "Param1=value1&Param2=value2",
     "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
    {"get-vanilla-query-order-encoded",
     "GET",
     {{"Param-3", "Value3"}, {"Param", "Value2"}, {"\xe1\x88\xb4", "Value1"}},
     {{0}},
     NULL,
     "%E1%88%B4=Value1&Param=Value2&Param-3=Value3",
     "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
     NULL},
    {"get-vanilla-query-unreserved",
     "GET",
     {{UNRESERVED, UNRESERVED}},
     {{0}},
     NULL,
     UNRESERVED "=" UNRESERVED,
     "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
     "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
    {"get-vanilla-utf8-query",
     "GET",
     {{"\xe1\x88\xb4", "bar"}},
     {{0}},
     NULL,
     "%E1%88%B4=bar",
     NULL,
     "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
    {"get-header-value-trim",
     "GET",
     {{0}},
     {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}},
     NULL,
     "",
     "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
     "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
    {"post-vanilla",
     "POST",
     {{0}},
     {{0}},
     NULL,
     "",
     NULL,
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
    {"post-x-www-form-urlencoded",
     "POST",
     {{0}},
     {{"Content-Type", "application/x-www-form-urlencoded"}},
     "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
     "",
     NULL,
     "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
};

static size_t
count(const ob_sigv4_pair *p, size_t max)
{
	size_t n = 0;

	while (n < max && p[n].name != NULL)
		n++;
	return n;
}

static void
test_suite(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(suite) / sizeof(suite[0]); i++) {
		const suite_case *c = &suite[i];
		ob_sigv4_pair headers[4] = {{"Host", "example.amazonaws.com"},
					    {"X-Amz-Date", SUITE_DATE}};
		size_t nh = 2 + count(c->headers, 2);
		ob_sigv4_request req = {
		    .method = c->method,
		    .path = "/",
		    .query = c->query,
		    .query_len = count(c->query, 3),
		    .headers = headers,
		    .headers_len = nh,
		    .payload_hash = c->payload_hash ? c->payload_hash : OB_SIGV4_EMPTY_SHA256,
		    .secret_key = SUITE_SECRET,
		    .amz_date = SUITE_DATE,
		    .region = "us-east-1",
		    .service = "service",
		};
		ob_sigv4_result r;
		const char *last;

		memcpy(headers + 2, c->headers, (nh - 2) * sizeof(*headers));
		ob_sigv4_sign(&req, &r);
		if (strcmp(r.canonical_query, c->canonical_query) != 0)
			fail_msg("%s: canonical query %s", c->name, r.canonical_query);
		last = strrchr(r.string_to_sign, '\n') + 1;
		if (c->sts_hash != NULL && strcmp(last, c->sts_hash) != 0)
			fail_msg("%s: canonical request hashes to %s:\n%s", c->name, last,
				 r.canonical_request);
		if (c->signature != NULL && strcmp(r.signature, c->signature) != 0)
			fail_msg("%s: signature %s", c->name, r.signature);
		ob_sigv4_result_clear(&r);
	}
}

/* The whole canonical request and string to sign of get-header-value-trim:
 * names lower-cased and sorted, values trimmed, inner runs of spaces as
 * one (even inside quotes). */
static void
test_canonical_request_text(void **state)
{
	const ob_sigv4_pair headers[] = {{"X-Amz-Date", SUITE_DATE},
					 {"My-Header2", " \"a   b   c\""},
					 {"Host", "example.amazonaws.com"},
					 {"My-Header1", " value1"}};
	ob_sigv4_request req = {
	    "GET",        "/",        NULL,        0,        headers, 4, OB_SIGV4_EMPTY_SHA256,
	    SUITE_SECRET, SUITE_DATE, "us-east-1", "service"};
	ob_sigv4_result r;

	(void)state;
	ob_sigv4_sign(&req, &r);
	assert_string_equal(
	    r.canonical_request,
	    "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a "
	    "b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-"
	    "date\n" OB_SIGV4_EMPTY_SHA256);
	assert_string_equal(r.signed_headers, "host;my-header1;my-header2;x-amz-date");
	assert_string_equal(
	    r.string_to_sign,
	    "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/"
	    "aws4_request\na726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f2"
	    "8605c7");
	ob_sigv4_result_clear(&r);
}

/* AWS's example of deriving a signing key (IAM, 2012-02-15). */
static void
test_signing_key(void **state)
{
	static const unsigned char want[32] = {0xf4, 0x78, 0x0e, 0x2d, 0x9f, 0x65, 0xfa, 0x89,
					       0x5f, 0x9c, 0x67, 0xb3, 0x2c, 0xe1, 0xba, 0xf0,
					       0xb0, 0xd8, 0xa4, 0x35, 0x05, 0xa0, 0x00, 0xa1,
					       0xa9, 0xe0, 0x90, 0xd4, 0x14, 0xdb, 0x40, 0x4d};
	unsigned char key[32];

	(void)state;
	ob_sigv4_signing_key(SUITE_SECRET, "20120215", "us-east-1", "iam", key);
	assert_memory_equal(key, want, 32);
}

/* The S3 documentation's presigned GET of examplebucket/test.txt. */
static void
test_s3_presigned_example(void **state)
{
	const ob_sigv4_pair query[] = {
	    {"X-Amz-Algorithm", "AWS4-HMAC-SHA256"},
	    {"X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"},
	    {"X-Amz-Date", "20130524T000000Z"},
	    {"X-Amz-Expires", "86400"},
	    {"X-Amz-SignedHeaders", "host"},
	};
	const ob_sigv4_pair host = {"host", "examplebucket.s3.amazonaws.com"};
	ob_sigv4_request req = {"GET",
				"/test.txt",
				query,
				5,
				&host,
				1,
				"UNSIGNED-PAYLOAD",
				"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
				"20130524T000000Z",
				"us-east-1",
				"s3"};
	ob_sigv4_result r;

	(void)state;
	ob_sigv4_sign(&req, &r);
	assert_string_equal(
	    r.canonical_query,
	    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%"
	    "2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-"
	    "Amz-Expires=86400&X-Amz-SignedHeaders=host");
	assert_non_null(strstr(r.string_to_sign, "3bfa292879f6447bbcda7001decf97f4a54dc650c894217"
						 "4ae0a9121cf58ad04"));
	assert_string_equal(r.signature,
			    "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
	ob_sigv4_result_clear(&r);
}

static void
test_encode_and_date(void **state)
{
	char *e = ob_sigv4_encode("a b+c/d=e&f%~\x7f\xff");
	char date[17];

	(void)state;
	assert_string_equal(e, "a%20b%2Bc%2Fd%3De%26f%25~%7F%FF");
	free(e);
	ob_sigv4_amz_date(1478540373, date); /* botocore's RDS example moment */
	assert_string_equal(date, "20161107T173933Z");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_suite),           cmocka_unit_test(test_canonical_request_text),
	    cmocka_unit_test(test_signing_key),     cmocka_unit_test(test_s3_presigned_example),
	    cmocka_unit_test(test_encode_and_date),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
