// Package httpserve runs the HTTP servers of this module's programs
// (ddp-train's /metrics, probes and debug endpoints; the examples'
// /metrics) with limits no client can outlast: a deadline on reading the
// headers and the request, on writing the response and on idling between
// requests, a cap on the header's size, and a cap on the connections
// open at once. A client that trickles its headers (slowloris), never
// reads its response, or holds idle keep-alive connections is cut off,
// and however many connect, the server holds at most MaxConns file
// descriptors; the others wait in the kernel's accept queue.
//
//	srv, err := httpserve.Start(ctx, "127.0.0.1:9400", mux, httpserve.DefaultLimits())
//	if err != nil { ... }
//	defer srv.Close()
//
// It is internal because only this module's programs serve HTTP.
package httpserve
