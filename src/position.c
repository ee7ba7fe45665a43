/*
 * position.c: the naming rule of the units the stream hands over (see
 * position.h for the rule and the Postgres facts it rests on).
 */
#include "outboxd/position.h"

ob_pos
ob_pos_txn(ob_lsn commit_start)
{
	return (commit_start << 1) | 1;
}

ob_pos
ob_pos_message(ob_lsn record_end)
{
	return record_end << 1;
}

ob_pos
ob_pos_backlog(ob_lsn consistent)
{
	return consistent << 1;
}

ob_pos
ob_pos_bound(ob_lsn lsn)
{
	return lsn << 1;
}

ob_lsn
ob_pos_lsn(ob_pos pos)
{
	return pos >> 1;
}

ob_lsn
ob_pos_message_confirms(ob_lsn record_end)
{
	return record_end;
}
