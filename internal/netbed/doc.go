// Package netbed builds hosts on one Linux machine for tests: each host is
// a network namespace with its own address, joined to the others by a veth
// pair on a bridge, and each command run on a host gets a UTS namespace of
// its own with the host's name. A link can be capped in rate with tc's
// token-bucket filter, taken down and brought back up. Two hosts of a bed
// look to our code like two machines, or two Kubernetes pods on one node:
// same boot id, same /dev/shm, separate network stacks (an abstract Unix
// socket reaches only its own namespace). What runs on a host resolves
// every host's name (node0, node1, ...) to its address, as a cluster's
// DNS would: each namespace gets its own hosts file under /etc/netns,
// which `ip netns exec` mounts over /etc/hosts for that process only; the
// machine's /etc/hosts is never changed.
//
// What it cannot do: add delay or loss. This kernel has no netem qdisc,
// so every link's latency is the veth's (a few microseconds); tbf's
// "latency" parameter bounds queueing, it adds none.
//
// It needs root and iproute2 (ip, tc) and util-linux (unshare). Available
// says why a machine cannot run a bed; tests skip with that line.
//
// Everything a bed creates carries its owner's process id in its name, so
// beds of tests that run at once do not collide, and New first sweeps
// what beds of dead processes left behind (a test killed with SIGKILL
// cannot clean up). Close kills every process still inside the bed's
// namespaces and deletes them, the veths and the bridge.
//
// Traffic stays inside: the bridge has no address, so the namespaces
// reach each other and nothing else, and the machine's own network cannot
// reach them.
package netbed
