package netbed_test

import (
	"fmt"

	"github.com/goddp/ddp/internal/netbed"
)

// Plan shows the hosts New would build: their hostnames, addresses and
// namespaces. New needs root; Plan does not.
func ExamplePlan() {
	for _, h := range netbed.Plan(netbed.Options{Hosts: 3}, "gdb42x0") {
		fmt.Println(h.Name, h.Addr, h.NS, h.Link)
	}
	// Output:
	// node0 10.98.0.1 gdb42x0h0 gdb42x0v0
	// node1 10.98.0.2 gdb42x0h1 gdb42x0v1
	// node2 10.98.0.3 gdb42x0h2 gdb42x0v2
}
