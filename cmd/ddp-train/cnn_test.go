package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goddp/ddp/npy"
)

// writeIDX writes an MNIST-style IDX file of unsigned bytes: magic
// 0x0000080N, the N dimensions as big-endian uint32, then the bytes;
// gzip-compressed if zip.
func writeIDX(t *testing.T, path string, dims []int, data []byte, zip bool) {
	t.Helper()
	var raw bytes.Buffer
	raw.Write([]byte{0, 0, 0x08, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&raw, binary.BigEndian, uint32(d))
	}
	raw.Write(data)
	out := raw.Bytes()
	if zip {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		if _, err := w.Write(out); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out = z.Bytes()
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The CNN trains on MNIST's IDX files (images gzip-compressed, labels
// plain) over 2 worker processes and ends bitwise equal on both ranks,
// saving conv1.weight.npy and the rest in PyTorch's Conv2d layout.
func TestCNNOnMNISTFiles(t *testing.T) {
	dir := t.TempDir()
	const n, side = 36, 28
	rng := rand.New(rand.NewPCG(3, 5))
	pix := make([]byte, n*side*side)
	labels := make([]byte, n)
	for i := range n {
		labels[i] = byte(i % 10)
		// A bright square whose place depends on the label, over noise.
		r0, c0 := 2+2*int(labels[i]), 4+int(labels[i])
		for r := range side {
			for c := range side {
				v := byte(rng.IntN(40))
				if r >= r0 && r < r0+8 && c >= c0 && c < c0+8 {
					v = 200 + byte(rng.IntN(56))
				}
				pix[i*side*side+r*side+c] = v
			}
		}
	}
	images := filepath.Join(dir, "train-images-idx3-ubyte.gz")
	labelsPath := filepath.Join(dir, "train-labels-idx1-ubyte")
	writeIDX(t, images, []int{n, side, side}, pix, true)
	writeIDX(t, labelsPath, []int{n}, labels, false)

	save := filepath.Join(dir, "out")
	r := ddpTrain(t, "--model", "cnn", "--data", images, "--labels", labelsPath,
		"--nproc", "2", "--steps", "3", "--batch-size", "4", "--save", save,
		"--log-format", "json", "--timeout", "30s")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	d := digests(r.stderr)
	if len(d) != 2 || d["0"] != d["1"] {
		t.Fatalf("want equal digests from ranks 0 and 1, got %v\n%s", d, r.stderr)
	}
	if got := doneSteps(r.stderr); got != "3" {
		t.Fatalf("ran %s steps, want 3\n%s", got, r.stderr)
	}
	for name, shape := range map[string][]int{
		"conv1.weight": {6, 1, 5, 5}, "conv1.bias": {6},
		"conv2.weight": {16, 6, 5, 5}, "conv2.bias": {16},
		"fc1.weight": {16 * 5 * 5, 120}, "fc2.weight": {120, 84},
		"fc3.weight": {84, 10}, "fc3.bias": {10},
	} {
		a, err := npy.ReadFile(filepath.Join(save, name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Shape, shape) || a.Descr != "<f4" {
			t.Errorf("%s.npy: shape %v dtype %s, want %v <f4", name, a.Shape, a.Descr, shape)
		}
	}
}
