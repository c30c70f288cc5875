package commhook

import "github.com/goddp/ddp/pg"

// Note [fp16 and bf16 compression]: torch's fp16_compress_hook is
//
//	c = bucket.buffer().to(torch.float16).div_(world_size)
//	allreduce(c)                      # SUM, in float16
//	bucket.buffer().copy_(c)          # back to the bucket's dtype
//
// Dividing before the sum keeps it from overflowing float16's 65504. Each
// step rounds to nearest even: the cast (float64 through float32), the
// division (computed in float32, rounded to float16), and the sum (the
// backends add float16 in float32; pg/local rounds once at the end, a
// ring rounds once per hop). The result is therefore within a few float16
// ulps of the average, and bit-identical on every rank.

// FP16Compress returns torch's fp16_compress_hook: convert the bucket to
// float16, divide by the world size, SUM-allreduce in float16, convert
// back. It is Compress(pg.Float16, Allreduce{}).
func FP16Compress() Hook {
	return &compressed{dtype: pg.Float16, inner: Allreduce{}, name: "fp16_compress"}
}

// BF16Compress returns torch's bf16_compress_hook: FP16Compress with
// bfloat16, which keeps float32's range and so cannot overflow.
func BF16Compress() Hook {
	return &compressed{dtype: pg.BFloat16, inner: Allreduce{}, name: "bf16_compress"}
}
