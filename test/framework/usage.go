package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Usage is what the kernel accounts to a process.
type Usage struct {
	// RSS is the resident set now, PeakRSS its high-water mark (VmHWM).
	RSS, PeakRSS int64
	// AnonRSS is the anonymous part of RSS (heap, stacks): what grows
	// with the objects a controller holds. FileRSS is the part mapped
	// from files, for a static Go binary the pages of its own executable.
	AnonRSS, FileRSS int64
	// CPU is user plus system time since the process started.
	CPU time.Duration
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ReadUsage reads /proc/<pid>/status and /proc/<pid>/stat.
func ReadUsage(pid int) (Usage, error) {
	var u Usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &u.RSS
		case "VmHWM":
			dst = &u.PeakRSS
		case "RssAnon":
			dst = &u.AnonRSS
		case "RssFile":
			dst = &u.FileRSS
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return u, fmt.Errorf("parse %s %q: %w", k, v, err)
		}
		*dst = kb << 10
	}
	_, fields, err := readStat(pid)
	if err != nil {
		return u, err
	}
	// utime and stime are fields 14 and 15 of the line, 12 and 13 after
	// the command name.
	if len(fields) < 13 {
		return u, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return u, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	u.CPU = time.Duration(ticks) * time.Second / clockTicks
	return u, nil
}

// readStat reads /proc/<pid>/stat: the command name (field 2, which may
// hold spaces and parentheses) and the fields after it, from field 3 on.
func readStat(pid int) (string, []string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", nil, err
	}
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	return string(stat[open+1 : end]), strings.Fields(string(stat[end+1:])), nil
}

// Children lists the direct children of this process by PID, with their
// command names.
func Children() (map[int]string, error) {
	self := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, fields, err := readStat(pid)
		if err != nil {
			continue // gone since the listing
		}
		if len(fields) >= 2 && fields[1] == self {
			out[pid] = name
		}
	}
	return out, nil
}

// ChildrenUsage reads every direct child of this process (the control
// plane, the controllers, an operator process) by command name, and this
// process itself as "self".
func ChildrenUsage() (map[string]Usage, error) {
	out := map[string]Usage{}
	u, err := ReadUsage(os.Getpid())
	if err != nil {
		return nil, err
	}
	out["self"] = u
	children, err := Children()
	if err != nil {
		return nil, err
	}
	for pid, name := range children {
		u, err := ReadUsage(pid)
		if err != nil {
			continue // exited since the listing
		}
		if prev, ok := out[name]; ok { // same name twice: add them up
			u.RSS += prev.RSS
			u.PeakRSS += prev.PeakRSS
			u.AnonRSS += prev.AnonRSS
			u.FileRSS += prev.FileRSS
			u.CPU += prev.CPU
		}
		out[name] = u
	}
	return out, nil
}

// SetAffinity restricts every thread of process pid to cpus (none: all
// CPUs of the machine). Benchmarks use it to give components a core of
// their own, as separate nodes would.
func SetAffinity(pid int, cpus ...int) error {
	var set unix.CPUSet
	if len(cpus) == 0 {
		for i := range runtime.NumCPU() {
			set.Set(i)
		}
	}
	for _, c := range cpus {
		set.Set(c)
	}
	return eachThread(pid, func(tid int) error {
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("set CPU affinity of %d/%d: %w", pid, tid, err)
		}
		return nil
	})
}

// SetNice sets the nice value of every thread of pid (threads it starts
// later inherit it from the thread that starts them).
func SetNice(pid, nice int) error {
	return eachThread(pid, func(tid int) error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && err != unix.ESRCH {
			return fmt.Errorf("set nice of %d/%d: %w", pid, tid, err)
		}
		return nil
	})
}

// RunQueueWait is how long the threads of pid have waited for a CPU while
// runnable, in total (the second field of each thread's schedstat).
func RunQueueWait(pid int) (time.Duration, error) {
	var total time.Duration
	err := eachThread(pid, func(tid int) error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			return nil // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return fmt.Errorf("schedstat of %d/%d: %q", pid, tid, b)
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return err
		}
		total += time.Duration(ns)
		return nil
	})
	return total, err
}

func eachThread(pid int, fn func(tid int) error) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := fn(tid); err != nil {
			return err
		}
	}
	return nil
}
