package main

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/model"
)

// cardImages writes n side×side IDX images (plain) with labels i%10 in
// dir and returns their paths.
func cardImages(t *testing.T, dir string, n, side int) (images, labels string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(36, 1))
	pix := make([]byte, n*side*side)
	for i := range pix {
		pix[i] = byte(rng.IntN(256))
	}
	ys := make([]byte, n)
	for i := range ys {
		ys[i] = byte(i % 10)
	}
	images, labels = filepath.Join(dir, "images-idx3-ubyte"), filepath.Join(dir, "labels-idx1-ubyte")
	writeIDX(t, images, []int{n, side, side}, pix, false)
	writeIDX(t, labels, []int{n}, ys, false)
	return images, labels
}

// cardRun is ddpTrain that must exit 0.
func cardRun(t *testing.T, args ...string) result {
	t.Helper()
	r := ddpTrain(t, args...)
	if r.code != 0 {
		t.Fatalf("ddp-train %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// A CNN saved with a non-default activation and dtype, and checkpointed,
// loads with no architecture flag: --init, --resume and `ddp-train eval`
// take the card's, and give what the flags gave. A flag that disagrees
// is refused naming the field; a directory without a card loads with
// the flags, as before cards.
func TestCardLoadsWithoutFlags(t *testing.T) {
	dir := t.TempDir()
	images, labels := cardImages(t, dir, 40, 16)
	data := []string{"--data", images, "--labels", labels, "--batch-size", "8", "--log-format", "json", "--timeout",
		"30s"}
	arch := []string{"--model", "cnn", "--activation", "tanh", "--dtype", "float64"}
	run := func(extra ...string) []string { return append(append([]string(nil), data...), extra...) }
	save, ck, resumed := filepath.Join(dir, "save"), filepath.Join(dir, "ck"), filepath.Join(dir, "resumed")

	whole := digests(cardRun(t, run(append(arch, "--steps", "4", "--save", save)...)...).stderr)["0"]
	cardRun(t, run(append(arch, "--steps", "2", "--checkpoint", ck, "--checkpoint-every", "2")...)...)
	r := cardRun(t, run("--steps", "4", "--checkpoint", ck, "--checkpoint-every", "2", "--resume", "--save", resumed)...)
	if got := digests(r.stderr)["0"]; whole == "" || got != whole {
		t.Fatalf("resumed from the checkpoint's card: param_digest %s, the uninterrupted run %s", got, whole)
	}
	if got := digests(cardRun(t, run("--steps", "0", "--init", save)...).stderr)["0"]; got != whole {
		t.Errorf("--init with the card: param_digest %s, want %s", got, whole)
	}
	if _, err := model.ReadCard(filepath.Join(ck, "step-000000004")); err != nil {
		t.Errorf("the checkpoint's card: %v", err)
	}

	evalOf := func(init string, extra ...string) evalFigures {
		t.Helper()
		sum := filepath.Join(dir, "eval-"+strconv.Itoa(len(extra))+filepath.Base(init)+".json")
		cardRun(t, append(append([]string{"eval", "--init", init, "--summary", sum}, run()...), extra...)...)
		return readEvalSummary(t, sum)
	}
	want := evalOf(save)
	sameEval(t, "eval of the checkpoint", want, evalOf(ck))
	sameEval(t, "eval of the resumed save", want, evalOf(resumed))
	sameEval(t, "eval with the card's own flags", want, evalOf(save, arch...))

	for flag, c := range map[string]struct{ value, field string }{
		"--model":      {"mlp", "kind cnn"},
		"--activation": {"relu", "activation tanh"},
		"--dtype":      {"float32", "dtype float64"},
		"--hidden":     {"8", "no hidden"},
		"--classes":    {"12", "classes 10"},
	} {
		r := ddpTrain(t, append([]string{"eval", "--init", save, flag, c.value}, run()...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.field) || !strings.Contains(r.stderr, flag) {
			t.Errorf("eval %s %s against the card: exit %d, want 2 naming %q and %s:\n%s", flag, c.value, r.code, c.field,
				flag, r.stderr)
		}
	}
	r = ddpTrain(t, run("--steps", "1", "--checkpoint", ck, "--resume", "--activation", "relu")...)
	if r.code != 2 || !strings.Contains(r.stderr, "activation tanh") {
		t.Errorf("--resume --activation relu against the checkpoint's card: exit %d, want 2 naming it:\n%s", r.code,
			r.stderr)
	}

	bare := filepath.Join(dir, "bare") // .npy files alone, as another tool writes them
	if err := os.Mkdir(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range model.ParamNames("cnn", 0) {
		b, err := os.ReadFile(filepath.Join(save, p+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bare, p+".npy"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sameEval(t, "eval of the card-less copy with flags", want, evalOf(bare, arch...))
	if r := ddpTrain(t, append([]string{"eval", "--init", bare}, run()...)...); r.code != 2 {
		t.Errorf("a card-less directory without the flags loaded: exit %d, want 2\n%s", r.code, r.stderr)
	}
	// --resume-allow-changes model: the flags describe the model, as before cards.
	r = cardRun(t, run("--model", "cnn", "--dtype", "float64", "--activation", "relu", "--steps", "5", "--checkpoint", ck,
		"--resume", "--resume-allow-changes", "model")...)
	if !strings.Contains(r.stderr, "activation=relu") {
		t.Errorf("--resume-allow-changes model did not change the activation:\n%s", r.stderr)
	}
}

// A card that disagrees with the data's input shape is refused naming
// input_shape; an mlp's card applies its hidden sizes.
func TestCardInputShapeAndHidden(t *testing.T) {
	dir := t.TempDir()
	save := filepath.Join(dir, "save")
	r := cardRun(t, args("--backend", "local", "--steps", "2", "--hidden", "7,5", "--activation", "tanh", "--save",
		save)...)
	whole := digests(r.stderr)["0"]
	r = cardRun(t, "--backend", "local", "--samples", "512", "--batch-size", "16", "--log-format", "json", "--steps",
		"0", "--init", save)
	if got := digests(r.stderr)["0"]; got != whole {
		t.Errorf("--init without --hidden 7,5 --activation tanh: param_digest %s, want %s", got, whole)
	}
	x, y := heldOut(t, dir, 20, 30, 20)
	r = ddpTrain(t, "eval", "--init", save, "--data", x, "--labels", y, "--backend", "local")
	if r.code != 2 || !strings.Contains(r.stderr, "input_shape [32]") {
		t.Errorf("data of 30 features for a card of 32: exit %d, want 2 naming input_shape:\n%s", r.code, r.stderr)
	}
}

var evalLossRE = regexp.MustCompile(`eval_loss (\S+) eval_accuracy (\S+) samples (\d+)`)

// The Python code of docs/model-card.md builds, from the card alone, a
// torch module whose loss and accuracy on the training images are
// ddp-train eval's: the loss within 1e-9 in float64.
func TestCardLoadsInTorch(t *testing.T) {
	py := torchrunPython(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "model-card.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(string(doc), "```python\n")
	code, _, ok2 := strings.Cut(code, "```")
	if !ok || !ok2 {
		t.Fatal("docs/model-card.md has no python block")
	}
	dir := t.TempDir()
	images, labels := cardImages(t, dir, 30, 28)
	save := filepath.Join(dir, "save")
	common := []string{"--data", images, "--labels", labels, "--batch-size", "8", "--log-format", "json", "--timeout",
		"30s", "--backend", "local"}
	cardRun(t, append(common, "--model", "cnn", "--dtype", "float64", "--steps", "3", "--save", save)...)
	m := evalLossRE.FindStringSubmatch(cardRun(t, append([]string{"eval", "--init", save}, common...)...).stdout)
	if m == nil {
		t.Fatal("no eval line")
	}
	goLoss, _ := strconv.ParseFloat(m[1], 64)
	driver := code + `
import sys
import torch.nn.functional as F
net, card = load_goddp(sys.argv[1])
raw = np.fromfile(sys.argv[2], dtype=np.uint8, offset=16)
y = torch.from_numpy(np.fromfile(sys.argv[3], dtype=np.uint8, offset=8).astype(np.int64))
with torch.no_grad():
    logits = net(features(raw, card))
print(repr(F.cross_entropy(logits, y).item()), repr((logits.argmax(1) == y).double().mean().item()))
`
	out, err := exec.Command(py, "-c", driver, save, images, labels).CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("python printed %q", out)
	}
	torchLoss, _ := strconv.ParseFloat(f[0], 64)
	t.Logf("torch: loss %v accuracy %s; ddp-train eval: loss %v accuracy %s", torchLoss, f[1], goLoss, m[2])
	if math.Abs(torchLoss-goLoss) > 1e-9 || f[1] != m[2] && strings.TrimSuffix(f[1], ".0") != m[2] {
		t.Errorf("torch from the card: loss %v accuracy %s; ddp-train eval: loss %v accuracy %s", torchLoss, f[1], goLoss,
			m[2])
	}
}
