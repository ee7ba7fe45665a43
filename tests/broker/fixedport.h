/*
 * fixedport.h: the test broker's listeners on ports known in advance
 * (ob-mockbroker --port), for a broker a person starts by hand.
 *
 * librdkafka's mock cluster binds every broker's listener to 127.0.0.1
 * port 0, a port the kernel picks, and has no option for another.
 * fixedport.c wraps bind in ob-mockbroker's process: with a base port set,
 * the n-th bind to port 0 (n from 0, brokers 1, 2, ... in order) binds
 * base + n instead. The mock cluster reads the port back and advertises it
 * in its Metadata, so a client reaches every broker at a fixed address.
 * A fixed port that cannot be bound (another process holds it) ends the
 * process with status 1 and one line naming the port.
 */

#ifndef OB_FIXEDPORT_H
#define OB_FIXEDPORT_H

/* Makes the listeners bound from now on take base, base + 1, ...; the
 * caller keeps the last one within 65535. 0 leaves them to the kernel, as
 * without this module. */
void ob_fixedport_set(int base);

#endif
