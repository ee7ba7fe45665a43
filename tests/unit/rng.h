/*
 * rng.h: the small seeded generator the randomised unit tests share
 * (xorshift64*), so a failing iteration is reproduced by its seed.
 */
#ifndef OUTBOXD_TEST_RNG_H
#define OUTBOXD_TEST_RNG_H

#include <stdint.h>

/* The next number of the sequence whose state is *s (never zero). */
static inline uint64_t
test_random(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

/* A number below n (not zero) from the sequence whose state is *s. */
static inline uint64_t
test_below(uint64_t *s, uint64_t n)
{
	return test_random(s) % n;
}

#endif
