package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A test binary that dies (go test's -timeout panic, a SIGKILL, an OOM
// kill) must not leave its control plane running: a second run on the same
// machine then shares two cores with an orphaned kube-apiserver and etcd.
// StartProcess's children get SIGKILL from the kernel when the test binary
// dies (Pdeathsig), but envtest starts etcd and kube-apiserver itself and
// offers no hook for that. So the first registered process also starts a
// reaper: a copy of the test binary, in a process group of its own, reading
// the PIDs to kill on a pipe whose only writer is the test binary. When the
// test binary ends, however it ends, the kernel closes the pipe; the reaper
// reads EOF and SIGKILLs each registered process group still held by the
// process that was registered (its start time is compared, so a PID reused
// since is left alone), then exits.

// reaperEnv, set to 1, makes a test binary that imports this package run as
// the reaper instead of running its tests.
const reaperEnv = "OPENSHELL_TEST_REAPER"

func init() {
	if os.Getenv(reaperEnv) == "1" {
		reap(os.Stdin)
		os.Exit(0)
	}
}

// reaper is the test binary's end of the pipe to its reaper.
var reaper struct {
	mu  sync.Mutex
	w   *os.File
	err error
}

// Reap registers the process group led by pid (or the process alone, if it
// leads none) to be SIGKILLed once this test binary has ended, whether it
// stopped the process itself or not.
func Reap(pid int) error {
	start, err := startTime(pid)
	if err != nil {
		return fmt.Errorf("register pid %d with the reaper: %w", pid, err)
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if reaper.w == nil && reaper.err == nil {
		reaper.w, reaper.err = startReaper()
	}
	if reaper.err != nil {
		return reaper.err
	}
	if _, err := fmt.Fprintf(reaper.w, "%d %d\n", pid, start); err != nil {
		return fmt.Errorf("register pid %d with the reaper: %w", pid, err)
	}
	return nil
}

// startReaper starts the reaper and returns the pipe's write end, which no
// other child inherits (os.Pipe opens it close-on-exec).
func startReaper() (*os.File, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start the reaper: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the reaper: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), reaperEnv+"=1")
	// Standard output stays unset (/dev/null): go test waits for every
	// holder of the test binary's output to close it.
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("start the reaper: %w", err)
	}
	_ = r.Close()
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// reap reads "pid start-time" lines until EOF, then kills what is still
// there.
func reap(in io.Reader) {
	type proc struct{ pid, start int }
	var procs []proc
	for sc := bufio.NewScanner(in); sc.Scan(); {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil && pid > 1 {
			procs = append(procs, proc{pid, start})
		}
	}
	for _, p := range procs {
		if s, err := startTime(p.pid); err != nil || s != p.start {
			continue
		}
		target := p.pid
		if pgid, err := syscall.Getpgid(p.pid); err == nil && pgid == p.pid {
			target = -p.pid
		}
		_ = syscall.Kill(target, syscall.SIGKILL)
	}
}

// startTime is the process's start time in clock ticks since boot
// (/proc/<pid>/stat field 22): with the PID, it names one process.
func startTime(pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[19])
}

// Alive reports whether pid is a running process (not gone, not a zombie
// waiting for its new parent to collect it).
func Alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}
