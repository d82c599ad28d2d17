// Package diskroom tests hack/disk-room.sh, which `make test` runs first
// to keep room on disk for the test binaries.
package diskroom

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// run runs the script with the tools' cache at cache, needing need GiB,
// with the Go build cache and the temporary folder in dir.
func run(t *testing.T, dir, cache, need string) (stdout, stderr string) {
	t.Helper()
	script, err := filepath.Abs("../../hack/disk-room.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, cache, need)
	cmd.Env = append(os.Environ(), "GOCACHE="+filepath.Join(dir, "gocache"), "GOTMPDIR=", "TMPDIR="+dir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("disk-room.sh: %v\n%s%s", err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// toolsCache makes a tools' build cache with one file in it.
func toolsCache(t *testing.T, parent string) string {
	t.Helper()
	cache := filepath.Join(parent, "tools-cache")
	if err := os.MkdirAll(filepath.Join(cache, "00"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "00", "entry"), []byte("compiled"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cache
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestEnoughRoomKeepsTheCache: with room to spare the script says nothing
// and removes nothing.
func TestEnoughRoomKeepsTheCache(t *testing.T) {
	dir := t.TempDir()
	cache := toolsCache(t, dir)
	out, errOut := run(t, dir, cache, "0")
	if out != "" || errOut != "" || !exists(cache) {
		t.Fatalf("with room to spare: stdout %q, stderr %q, cache kept %v", out, errOut, exists(cache))
	}
}

// TestShortRoomRemovesTheCacheAndWarns: with less room than needed (no
// disk has a million GiB free) the tools' cache on the same filesystem
// goes, the script says so, and, still short, warns on stderr what a
// "no space left on device" will then mean; it does not fail the run.
func TestShortRoomRemovesTheCacheAndWarns(t *testing.T) {
	dir := t.TempDir()
	cache := toolsCache(t, dir)
	out, errOut := run(t, dir, cache, "1000000")
	if exists(cache) {
		t.Error("the tools' cache was kept")
	}
	if !strings.Contains(out, "removing the tools' build cache") || !strings.Contains(out, cache) {
		t.Errorf("stdout does not say what it removed: %q", out)
	}
	if !strings.Contains(errOut, "WARNING") || !strings.Contains(errOut, "no space left on device") {
		t.Errorf("stderr does not warn: %q", errOut)
	}
}

// TestCacheOnAnotherFilesystemStays: removing a cache on another
// filesystem makes no room where the tests build, so it stays (the warning
// still comes).
func TestCacheOnAnotherFilesystemStays(t *testing.T) {
	dir := t.TempDir()
	other := ""
	for _, candidate := range []string{"/dev/shm", "/run", "/sys/fs/cgroup"} {
		if otherFilesystem(candidate, dir) && writable(candidate) {
			other = candidate
			break
		}
	}
	if other == "" {
		t.Skip("no writable folder on another filesystem here")
	}
	parent, err := os.MkdirTemp(other, "diskroom")
	if err != nil {
		t.Skipf("%s: %v", other, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	cache := toolsCache(t, parent)
	out, errOut := run(t, dir, cache, "1000000")
	if !exists(cache) || strings.Contains(out, "removing") {
		t.Errorf("a cache on another filesystem was removed: %q", out)
	}
	if !strings.Contains(errOut, "WARNING") {
		t.Errorf("no warning: %q", errOut)
	}
}

// otherFilesystem reports whether a and b both exist, on different
// filesystems.
func otherFilesystem(a, b string) bool {
	var sa, sb syscall.Stat_t
	return syscall.Stat(a, &sa) == nil && syscall.Stat(b, &sb) == nil && sa.Dev != sb.Dev
}

func writable(dir string) bool {
	f, err := os.CreateTemp(dir, "diskroom-probe")
	if err != nil {
		return false
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return true
}
