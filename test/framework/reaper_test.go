package framework

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// holdEnv makes TestHelperHoldsAControlPlane run: it is the test binary
// that TestAKilledTestBinaryLeavesNoProcess kills.
const holdEnv = "OPENSHELL_TEST_HOLD_CONTROL_PLANE"

// TestAKilledTestBinaryLeavesNoProcess SIGKILLs a test binary that holds a
// control plane (envtest's etcd and kube-apiserver) and a process started
// with StartProcess that has started a child of its own, as go test's
// -timeout or the OOM killer would, and requires every one of them to be
// gone soon after: nothing it started may go on using the machine.
func TestAKilledTestBinaryLeavesNoProcess(t *testing.T) {
	RequireControlPlane(t)
	g := NewWithT(t)
	grandchild := filepath.Join(t.TempDir(), "grandchild.pid")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsAControlPlane$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdEnv+"="+grandchild)
	out, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "holding: "); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				g.Expect(err).NotTo(HaveOccurred())
				pids = append(pids, pid)
			}
			break
		}
	}
	g.Expect(pids).To(HaveLen(4), "the helper did not say what it holds")
	for _, pid := range pids {
		g.Expect(Alive(pid)).To(BeTrue(), "pid %d not running before the kill", pid)
	}

	g.Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	_ = cmd.Wait()
	names := []string{"etcd", "kube-apiserver", "the started process", "its child"}
	g.Eventually(func(g Gomega) {
		for i, pid := range pids {
			g.Expect(Alive(pid)).To(BeFalse(), "%s (pid %d) outlived the killed test binary", names[i], pid)
		}
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// TestHelperHoldsAControlPlane starts a control plane and a process with a
// child, prints their PIDs and waits to be killed. It runs only as
// TestAKilledTestBinaryLeavesNoProcess's child.
func TestHelperHoldsAControlPlane(t *testing.T) {
	grandchild := os.Getenv(holdEnv)
	if grandchild == "" {
		t.Skip("run by TestAKilledTestBinaryLeavesNoProcess")
	}
	env, err := StartEnv(EnvOptions{})
	if err != nil {
		t.Fatal(err)
	}
	etcd := FindProcess("--data-dir=" + env.ControlPlane.Etcd.DataDir)
	apiserver := FindProcess("--cert-dir=" + env.ControlPlane.APIServer.CertDir)
	p, err := StartProcess(t.TempDir(), "holder", "/bin/sh", "-c", `sleep 600 & echo $! > "$0"; wait`, grandchild)
	if err != nil {
		t.Fatal(err)
	}
	var child []byte
	if err := WaitFor(t.Context(), 10*time.Millisecond, func(context.Context) (bool, error) {
		child, err = os.ReadFile(grandchild)
		return err == nil && strings.HasSuffix(string(child), "\n"), nil
	}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("holding: " + strconv.Itoa(etcd) + " " + strconv.Itoa(apiserver) + " " +
		strconv.Itoa(p.Pid()) + " " + strings.TrimSpace(string(child)) + "\n")
	<-t.Context().Done() // killed long before
}
