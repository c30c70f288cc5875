package main

import (
	"errors"

	"github.com/goddp/ddp/pg/tcp"
)

// isBadRendezvous reports whether err says that the job was launched
// wrong rather than that it failed: two processes were given one rank.
// ddp-train exits 2 on it (isUsage), and so its launcher does not
// restart the job, which would give the processes the same ranks again.
func isBadRendezvous(err error) bool { return errors.Is(err, tcp.ErrDuplicateRank) }
