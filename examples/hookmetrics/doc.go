// Command hookmetrics registers a comm hook of its own and serves
// Prometheus metrics while it trains: the DDP metrics the reducer records
// (ddp_bucket_*, ddp_backward_*, ddp_comm_*, on the Registerer given to
// ddp.Wrap) beside the hook's own counter.
//
//	go run ./examples/hookmetrics --metrics-addr 127.0.0.1:9400          # one process
//	go build -o hookmetrics ./examples/hookmetrics
//	ddp-train --nproc 2 ./hookmetrics --metrics-addr 127.0.0.1:9400       # rank r on port 9400+r
//	curl -s 127.0.0.1:9400/metrics | grep -E 'clipped|ddp_iterations'
//
// The hook clips each bucket's gradient to a norm of at most --clip before
// averaging it over the ranks (commhook.Allreduce does the averaging): a
// hook is any commhook.Hook, here a commhook.HookFunc, and it runs on every
// bucket as soon as the bucket's gradients are ready, while backward goes
// on. It joins its job with dist.InitProcessGroup, so it runs under any
// launcher, as examples/multiproc does.
package main
