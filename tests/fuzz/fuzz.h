/*
 * fuzz.h: what the libFuzzer targets of tests/fuzz share.
 *
 * Each target (fuzz_wal2json.c, fuzz_jsontext.c, fuzz_config.c) defines
 * LLVMFuzzerInitialize() and LLVMFuzzerTestOneInput(). Built with
 * -Dfuzz=true they are linked with libFuzzer (clang -fsanitize=fuzzer) and
 * run under AddressSanitizer and UndefinedBehaviorSanitizer; in every build
 * they are also linked with replay.c, whose main() runs each file of a
 * corpus through the target once, so the corpus in the tree, and every
 * crash kept in it, is a regression test of the unit suite.
 *
 * Beyond memory errors, a target checks the contracts of the code it
 * drives with OB_FUZZ_CHECK: a broken contract prints the condition and
 * aborts, which libFuzzer and the replay both report as a crash.
 */
#ifndef OUTBOXD_FUZZ_H
#define OUTBOXD_FUZZ_H

#include "outboxd/common.h"
#include "outboxd/event.h"
#include "outboxd/outbox.h"
#include "outboxd/wal2json.h"

/* Abort with the failed condition when cond is false. */
#define OB_FUZZ_CHECK(cond)                                                                        \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ob_fuzz_fail(__FILE__, __LINE__, #cond);                                   \
	} while (0)

/* Print where a contract was broken and abort. */
_Noreturn void ob_fuzz_fail(const char *file, int line, const char *cond);

/* The libFuzzer entry points every target defines. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Check that every span of ev lies inside the written part of its buffer,
 * that at most OB_EVENT_MAX_HEADERS headers are set, and that every header
 * name is NUL-terminated in the buffer, as librdkafka reads it. */
void ob_fuzz_check_event(const ob_event *ev);

/*
 * Map a parsed record with m the way the relay does (an I record through
 * ob_mapper_map_insert(), an M record through ob_mapper_map_message(),
 * others not at all) and check the result: an event has a key and starts
 * with its "id" header; a dead-letter record goes to the configured
 * dead-letter topic, says why, and starts with "error" and "source-lsn";
 * mapping the same record again with the same mapper gives the same record
 * byte for byte. Then build from the result what the relay builds when a
 * record is refused: its dead-letter record, and the headers-only form of
 * that for small size limits, and check those too.
 */
void ob_fuzz_map_record(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms);

#endif
