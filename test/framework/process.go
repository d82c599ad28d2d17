package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a binary started by a test, logging to a file in its folder.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	env     []string
	done    chan struct{}
	err     error
}

// StartProcess runs bin with args, writing its output to dir/<name>.log. The
// child gets SIGKILL if the test binary dies, and its process group once the
// test binary has ended (Reap), so a crashed test leaves no process behind.
func StartProcess(dir, name, bin string, args ...string) (*Process, error) {
	return StartProcessEnv(dir, name, bin, nil, args...)
}

// StartProcessEnv is StartProcess with env added to this process's
// environment (later entries win).
func StartProcessEnv(dir, name, bin string, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	// Appended to, so a restarted component keeps its earlier log.
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := Reap(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = f.Close()
		return nil, err
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, env: env, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and its error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Terminate sends SIGTERM and returns at once, as the kubelet does to a
// pod being replaced: what the process does while it shuts down is what
// the test watches (Done, Exited).
func (p *Process) Terminate() error {
	if p == nil || p.cmd.Process == nil {
		return fmt.Errorf("no process")
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) error {
	if p == nil || p.cmd.Process == nil {
		return nil
	}
	if done, _ := p.Exited(); done {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	return p.Kill()
}

// Kill sends SIGKILL at once, as a node failure or an OOM kill would, and
// waits for the exit.
func (p *Process) Kill() error {
	if p == nil || p.cmd.Process == nil {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.cmd.Process.Pid)
	}
}

// Tail returns the last n bytes of the process log, for failure messages.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// WaitFor polls cond until it returns true, an error, or ctx ends. The
// harness uses it for start-up only; tests use gomega's Eventually.
func WaitFor(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-t.C:
		}
	}
}

// FindProcess returns the PID of a running process whose command line
// holds every one of parts (for the components envtest starts itself,
// kube-apiserver and etcd), or 0.
func FindProcess(parts ...string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(raw), "\x00", " ")
		match := true
		for _, p := range parts {
			if !strings.Contains(cmd, p) {
				match = false
				break
			}
		}
		if match {
			return pid
		}
	}
	return 0
}
