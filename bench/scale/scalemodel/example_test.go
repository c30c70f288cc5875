package scalemodel_test

import (
	"fmt"

	"github.com/goddp/ddp/bench/scale/scalemodel"
)

// A 16 MiB model whose backward takes 100 ms, in two buckets, on hosts of
// 8 ranks joined at 25 Gbit/s: the step time and the share of
// communication hidden behind backward, for each hook.
func Example() {
	p := scalemodel.Profile{Forward: 0.05, Backward: 0.1, Other: 0.01, Buckets: []scalemodel.Bucket{
		{Ready: 0.02, Bytes: 1 << 20, Params: []scalemodel.Param{{Rows: 512, Cols: 512}, {Rows: 512}}},
		{Ready: 0.1, Bytes: 15 << 20, Params: []scalemodel.Param{{Rows: 2048, Cols: 1920}}},
	}}
	for _, hosts := range []int{1, 8, 128} {
		c := scalemodel.Cluster{Hosts: hosts, RanksPerHost: 8, SharedMemory: true,
			Inter: scalemodel.Link{Latency: 10e-6, Bandwidth: 25e9 / 8},
			Intra: scalemodel.Link{Latency: 2e-6, Bandwidth: 10e9}}
		for _, h := range []string{"allreduce", "fp16", "powersgd:4"} {
			hook, _ := scalemodel.ParseHook(h)
			pr := scalemodel.Predict(p, c, scalemodel.Auto, hook)
			fmt.Printf("%4d ranks %-10s step %5.1f ms  hidden %3.0f%%  efficiency %3.0f%%\n",
				c.Ranks(), h, pr.Step*1e3, pr.Hidden*100, pr.Efficiency*100)
		}
	}
	// Output:
	//    8 ranks allreduce  step 162.8 ms  hidden   7%  efficiency  98%
	//    8 ranks fp16       step 161.4 ms  hidden   8%  efficiency  99%
	//    8 ranks powersgd:4 step 160.0 ms  hidden  43%  efficiency 100%
	//   64 ranks allreduce  step 178.4 ms  hidden   7%  efficiency  90%
	//   64 ranks fp16       step 169.3 ms  hidden   8%  efficiency  95%
	//   64 ranks powersgd:4 step 160.2 ms  hidden  46%  efficiency 100%
	// 1024 ranks allreduce  step 182.0 ms  hidden  15%  efficiency  88%
	// 1024 ranks fp16       step 172.3 ms  hidden  21%  efficiency  93%
	// 1024 ranks powersgd:4 step 160.3 ms  hidden  46%  efficiency 100%
}

// DiLoCo against DDP for a 2.7 MB model (MNIST's MLP 784-512-512-10) on
// 2 hosts of 2 ranks at 100 Mbit/s: the step time, the bytes each host
// sends per step, and the speedup, as H grows.
func ExamplePredictDiLoCo() {
	p := scalemodel.Profile{Forward: 0.004, Backward: 0.008, Other: 0.002,
		Buckets: []scalemodel.Bucket{{Ready: 0.004, Bytes: 1 << 20}, {Ready: 0.008, Bytes: 1.63e6}}}
	c := scalemodel.Cluster{Hosts: 2, RanksPerHost: 2, SharedMemory: true,
		Inter: scalemodel.Link{Latency: 150e-6, Bandwidth: 12e6}, Intra: scalemodel.Link{Latency: 50e-6, Bandwidth: 3e9}}
	for _, d := range []scalemodel.DiLoCo{{SyncEvery: 20}, {SyncEvery: 100},
		{SyncEvery: 50, Fragments: 2, Delay: 1, QuantizeBytes: 2}} {
		pr := scalemodel.PredictDiLoCo(p, c, scalemodel.Auto, d)
		fmt.Printf("H %3d F %d τ %d: step %5.1f ms (DDP %5.1f), %6.0f bytes per step per host (DDP %7.0f), %4.1f× DDP\n",
			d.SyncEvery, max(d.Fragments, 1), d.Delay, pr.Step*1e3, pr.DDP.Step*1e3, pr.Traffic.HostSent,
			pr.DDPTraffic.HostSent, pr.Speedup)
	}
	// Output:
	// H  20 F 1 τ 0: step  25.3 ms (DDP 235.8), 133929 bytes per step per host (DDP 2678576),  9.3× DDP
	// H 100 F 1 τ 0: step  16.3 ms (DDP 235.8),  26786 bytes per step per host (DDP 2678576), 14.5× DDP
	// H  50 F 2 τ 1: step  15.7 ms (DDP 235.8),  26786 bytes per step per host (DDP 2678576), 15.0× DDP
}
