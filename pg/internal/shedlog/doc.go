// Package shedlog logs the connections a server refuses or drops,
// rate-limited, for goddp's TCP store and the TCP process group's rank
// ports (Note [rate-limited refusals]): a flood of unauthenticated
// connections gives a handful of lines and a count, not a line each.
//
//	refusals := shedlog.New(logger, "store: ", 10*time.Second)
//	defer refusals.Close()
//	refusals.Note("it failed the shared-secret handshake", conn.RemoteAddr().String(), err)
//
// It is internal because only the store and the backends serve
// connections.
package shedlog
