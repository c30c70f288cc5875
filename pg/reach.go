package pg

import (
	"fmt"
	"net"
	"strings"
)

// Note [network or process]: when a peer stops answering, the question
// that matters first is whether the network to it or its process is at
// fault. A short TCP dial to the peer's listening address tells them
// apart without the peer's help:
//
//   - the connection is accepted: the peer's kernel answers on its port,
//     so the host and the network are up and the socket still open; a
//     peer that is silent all the same is stopped (SIGSTOP, a debugger)
//     or busy (the kernel completes handshakes for a stopped process);
//   - the connection is refused: the host answers, but nothing listens
//     there any more; the process is gone;
//   - no answer within the probe's timeout, or no route to the host: the
//     network to it is down or partitioned (or the host itself is).
//
// pg/backend's PeerProber is the ability a backend offers for this;
// pg/desync probes the ranks its diagnosis finds silent and puts the
// result in the *StallError (RankProgress.Reach, StallError.Unreachable).

// Reach is what a network probe of a rank's listening address found.
type Reach int

const (
	// ReachUnknown: not probed (no address, the backend cannot probe,
	// or the probe failed for a reason that says nothing of the peer).
	ReachUnknown Reach = iota
	// ReachAnswers: the peer's host accepted a connection on its port.
	ReachAnswers
	// ReachRefused: the peer's host refused the connection: its process
	// is gone.
	ReachRefused
	// ReachNoHost: the peer's host did not answer in time, or there is no
	// route to it: the network to it is down or partitioned.
	ReachNoHost
)

func (r Reach) String() string {
	switch r {
	case ReachAnswers:
		return "answers"
	case ReachRefused:
		return "refused"
	case ReachNoHost:
		return "no-host"
	}
	return "unknown"
}

// hostOf is the host part of a probe address ("10.0.0.2" of
// "10.0.0.2:41234"), or the address itself.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// reachDetail says, in the words of a StallError, what the probes of
// ranks that share reach found at addrs: "unreachable: its host 10.0.0.2
// does not answer: the network to it is down or partitioned". plural
// says there are several ranks.
func reachDetail(reach Reach, addrs []string, plural bool) string {
	var hosts []string
	for _, a := range addrs {
		if h := hostOf(a); h != "" && !containsString(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	its, one := "its host", len(hosts) <= 1
	if plural {
		its = "their host"
	}
	if !one {
		its += "s"
	}
	its += " " + strings.Join(hosts, ", ")
	verb := func(singular, many string) string {
		if one {
			return singular
		}
		return many
	}
	proc := func(singular, many string) string {
		if plural {
			return many
		}
		return singular
	}
	switch reach {
	case ReachNoHost:
		return fmt.Sprintf("unreachable: %s %s not answer: the network to %s down or partitioned", its, verb("does", "do"),
			verb("it is", "them is"))
	case ReachAnswers:
		return fmt.Sprintf("stopped or busy: %s %s, but %s", its, verb("answers", "answer"),
			proc("the process does not respond", "the processes do not respond"))
	case ReachRefused:
		return fmt.Sprintf("gone: %s refused the connection: %s", its, proc("the process is gone", "the processes are gone"))
	}
	return "stopped or dead"
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
