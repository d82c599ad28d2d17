package framework

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestReadUsage reads this test process: its resident set is at least the
// 64 MiB it has just touched, the peak is not below it, and CPU time grows
// with work done.
func TestReadUsage(t *testing.T) {
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	before, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS < int64(len(buf)) || before.PeakRSS < before.RSS || before.AnonRSS < int64(len(buf)) {
		t.Fatalf("RSS %d, peak %d, anonymous %d: want all ≥ %d", before.RSS, before.PeakRSS, before.AnonRSS, len(buf))
	}
	if before.FileRSS <= 0 || before.AnonRSS+before.FileRSS > before.RSS {
		t.Fatalf("anonymous %d + file %d must be positive parts of RSS %d", before.AnonRSS, before.FileRSS, before.RSS)
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.CPU <= before.CPU {
		t.Fatalf("CPU did not grow over a busy loop (%d iterations): %s then %s", x, before.CPU, after.CPU)
	}
	_ = buf[len(buf)-1]
	if _, err := ReadUsage(-1); err == nil {
		t.Fatal("no error for a process that cannot exist")
	}
}

// TestSetAffinity pins every thread of this process to one CPU and back.
func TestSetAffinity(t *testing.T) {
	allowed := func() string {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatal("no Cpus_allowed_list")
		return ""
	}
	before := allowed()
	if err := SetAffinity(os.Getpid(), 0); err != nil {
		t.Fatal(err)
	}
	if got := allowed(); got != "0" {
		t.Errorf("pinned to CPU 0, allowed %q", got)
	}
	if err := SetAffinity(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if got := allowed(); got != before {
		t.Errorf("restored: allowed %q, was %q", got, before)
	}
}

// TestChildren finds a child process by PID and command name, and reads
// its usage under that name.
func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	children, err := Children()
	if err != nil {
		t.Fatal(err)
	}
	if got := children[cmd.Process.Pid]; got != "sleep" {
		t.Fatalf("child %d: name %q, want sleep (children: %v)", cmd.Process.Pid, got, children)
	}
	usage, err := ChildrenUsage()
	if err != nil {
		t.Fatal(err)
	}
	if usage["sleep"].RSS <= 0 || usage["self"].RSS <= 0 {
		t.Fatalf("usage of sleep %+v and self %+v: want resident memory for both", usage["sleep"], usage["self"])
	}
}
