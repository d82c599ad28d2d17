package main

import "testing"

// TestDemo runs make demo's program to its end: a change that leaves the
// first half hour broken (a sample the 0.1 line no longer accepts, a step
// that hangs) fails here, not in front of a new user.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	t.Setenv("DEMO_EXIT", "1")
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
