// Package wire is the byte format shared by goddp's TCP store and TCP
// process group: a fixed frame header with a length cap, a payload codec
// that never decodes reflectively, and a mutual HMAC-SHA256 challenge that
// every connection passes before anything else is read from it.
//
// A connection starts with the handshake:
//
//	server -> client: magic "GDDP", version, 32-byte server nonce
//	client -> server: 32-byte client nonce, hello length, hello,
//	                  HMAC(secret, "client" | server nonce | client nonce | hello)
//	server -> client: status byte, HMAC(secret, "server" | client nonce | server nonce)
//
// The hello carries what the dialer claims to be (its rank, its purpose);
// it is trusted only after its MAC checks. Then frames follow, each a
// HeaderSize-byte header and Len payload bytes.
//
// The server speaks first, at once, so a dialer (DialHandshake) that gets
// no greeting within GreetingTimeout, or bytes that are not one, knows
// another program holds the address (pg.ErrForeignListener, Note [foreign
// listener]).
package wire
