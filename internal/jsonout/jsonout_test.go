package jsonout

import (
	"strings"
	"testing"
)

func TestWriteIndentsAndEndsInNewline(t *testing.T) {
	var b strings.Builder
	if err := Write(&b, map[string]any{"a": []int{1}}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"a\": [\n    1\n  ]\n}\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}
