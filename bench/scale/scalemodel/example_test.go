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
