# torch.distributed all_reduce, world size 1 over NCCL, timed with CUDA
# events exactly as nccl.test's TestGPUAlgbw times goddp's call.
import os, torch, torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
torch.cuda.set_device(0)
print("TORCH-FACT torch", torch.__version__, "nccl", torch.cuda.nccl.version())
buf = torch.zeros(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
print("TORCH-ALGBW %12s %12s %12s" % ("bytes", "torch_us", "torch_GB/s"))
size = 1 << 10
while size <= 1 << 30:
    t = buf[: size // 4]
    iters = 10 if size >= 1 << 26 else 50
    for _ in range(3):
        dist.all_reduce(t)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        dist.all_reduce(t)
    e.record()
    e.synchronize()
    sec = s.elapsed_time(e) / 1e3 / iters
    print("TORCH-ALGBW %12d %12.1f %12.2f" % (size, sec * 1e6, size / sec / 1e9))
    size <<= 2
dist.destroy_process_group()
