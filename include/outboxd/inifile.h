/*
 * inifile.h: INI files read with inih, lines of any length.
 *
 * inih, as Debian builds it, reads at most 199 characters of a line and
 * takes the rest of a longer line for a line of its own: a long value
 * (bootstrap.servers of six MSK brokers, a conninfo with certificate
 * paths, an AWS session token of 1,000 characters) came back cut short
 * or made a stray key. ob_ini_parse() hands inih the file with every long
 * `name = value` line's value stood in for by a short placeholder and
 * gives the handler the whole value back; a long comment line becomes an
 * empty one. What inih does to a value (trailing spaces gone, an inline
 * comment after " ;" gone) is done to a long value the same way. Line
 * numbers stay the file's.
 */
#ifndef OUTBOXD_INIFILE_H
#define OUTBOXD_INIFILE_H

#include <ini.h>

/* As ini_parse(): 0 when the whole file was read, the number of the first
 * line inih could not read (or of a line holding the byte 0x1E, which
 * outboxd keeps for its placeholders), -1 when the file could not be
 * opened or read (errno says why). */
int ob_ini_parse(const char *path, ini_handler handler, void *user);

#endif
