package framework

import (
	"fmt"
	"strings"
	"testing"
)

func TestLogRingKeepsTheMostRecent(t *testing.T) {
	r := &logRing{max: 100}
	for i := range 50 {
		fmt.Fprintf(r, "entry %02d ns-%d\n", i, i%2) // 15 bytes each
	}
	if r.size > r.max {
		t.Fatalf("holds %d bytes, bound %d", r.size, r.max)
	}
	got := r.grep(3, []string{"ns-1"})
	if want := "entry 45 ns-1\nentry 47 ns-1\nentry 49 ns-1\n"; got != want {
		t.Errorf("grep = %q, want %q", got, want)
	}
	if got := r.grep(10, []string{"entry 00"}); got != "" {
		t.Errorf("kept an entry past the bound: %q", got)
	}
	if got := r.grep(10, []string{"", "nowhere"}); got != "" {
		t.Errorf("an empty filter matched: %q", got)
	}
	if n := strings.Count(r.grep(100, []string{"ns-0", "ns-1"}), "\n"); n != len(r.entries) {
		t.Errorf("any-of filter returned %d entries of %d", n, len(r.entries))
	}
}
