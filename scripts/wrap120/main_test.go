package main

import (
	"go/format"
	"strings"
	"testing"
)

func TestFixFile(t *testing.T) {
	long := strings.TrimSpace(strings.Repeat("word ", 30))
	src := "package p\n\nimport \"fmt\"\n\n" +
		"// F does things. " + long + " end.\n" +
		"//\n" +
		"//\tcode block " + long + "\n" +
		"//\n" +
		"// A list:\n" +
		"//   - a list item " + long + "\n" +
		"//     continued.\n" +
		"func F(a, b int) error {\n" +
		"\tx := a + b // a trailing comment that is long enough " + long + "\n" +
		"\t_ = x\n" +
		"\treturn fmt.Errorf(\"a message " + long + " %d\", a, b)\n" +
		"}\n\n" +
		"type T struct {\n\tS string `json:\"" + strings.Repeat("s", 130) + "\"`\n}\n\n" +
		"// ExampleF's output is never touched.\n" +
		"func ExampleF() {\n\t// Output:\n\t// " + long + " " + long + "\n}\n"
	canon, err := format.Source([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := fixFile(canon)
	if err != nil {
		t.Fatal(err)
	}
	again, err := fixFile(out)
	if err != nil || string(again) != string(out) {
		t.Fatalf("not idempotent: %v\n%s\n---\n%s", err, out, again)
	}
	for i, l := range strings.Split(string(out), "\n") {
		frozen := strings.Contains(l, "code block") || strings.Contains(l, "json:") ||
			strings.HasPrefix(l, "\t// word")
		if isLong(l) && !frozen {
			t.Errorf("line %d still long: %q", i+1, l)
		}
	}
	for _, want := range []string{"\n//     word word", " continued.\n", "\t// a trailing comment", "\"+\n",
		"//\tcode block " + long + "\n", "\t// " + long + " " + long + "\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
