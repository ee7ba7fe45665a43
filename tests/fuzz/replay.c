/*
 * replay.c: runs corpus files through a fuzz target once each, without
 * libFuzzer, so any compiler can build it (the unit suite does).
 *
 *   replay_wal2json DIR|FILE...
 *
 * Every regular file named, or found directly in a directory named, is read
 * into a buffer of exactly its size and passed to LLVMFuzzerTestOneInput(),
 * in name order within a directory. A broken contract or a sanitizer
 * finding aborts; otherwise it prints how many inputs ran and exits 0, or
 * 1 when there were none (a corpus that is not there must not pass).
 */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Read path whole into a buffer of exactly its size (caller frees). */
static uint8_t *
read_whole(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0)
		goto fail;
	/* malloc(0) may return NULL; one byte more is never read. */
	buf = malloc(len > 0 ? (size_t)len : 1);
	if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len)
		goto fail;
	fclose(f);
	*size = (size_t)len;
	return buf;
fail:
	fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
	free(buf);
	if (f != NULL)
		fclose(f);
	exit(2);
}

static void
run_file(const char *path, size_t *count)
{
	size_t size;
	uint8_t *data = read_whole(path, &size);

	printf("replay: %s (%zu bytes)\n", path, size);
	fflush(stdout);
	(void)LLVMFuzzerTestOneInput(data, size);
	free(data);
	(*count)++;
}

static int
by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static void
run_dir(const char *dir, size_t *count)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, by_name);

	if (n < 0) {
		fprintf(stderr, "replay: cannot read directory %s: %s\n", dir, strerror(errno));
		exit(2);
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			run_file(path, count);
		free(names[i]);
	}
	free(names);
}

int
main(int argc, char **argv)
{
	size_t count = 0;
	struct stat st;

	(void)LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
			run_dir(argv[i], &count);
		else
			run_file(argv[i], &count);
	}
	printf("replay: %zu inputs ran\n", count);
	return count > 0 ? 0 : 1;
}
