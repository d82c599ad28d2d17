package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestABlockedWriteEndsWithTheSession: a client that stops reading a log
// blocks the relay's writes; the session's end (revocation, drain, its
// time limit) still ends them, so the session does not hold its slot for
// as long as the client keeps the connection. The handler writes without
// looking at the session, as logPrinter writes a batch of lines.
func TestABlockedWriteEndsWithTheSession(t *testing.T) {
	g := NewWithT(t)
	session, end := context.WithCancel(context.Background())
	defer end()
	var written atomic.Int64
	returned := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		defer unblockWritesAtEnd(session, w)()
		chunk := strings.Repeat("x", 64<<10)
		for range 1024 { // 64 MiB: far more than the connection buffers
			n, err := w.Write([]byte(chunk))
			written.Add(int64(n))
			if err != nil {
				returned <- err
				return
			}
		}
		returned <- nil
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL) // the body is never read
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Eventually(written.Load).WithTimeout(10 * time.Second).Should(BeNumerically(">", 1<<20))
	end()
	var got error
	g.Eventually(returned).WithTimeout(10*time.Second).Should(Receive(&got), "the handler's write is still blocked after the session ended")
	g.Expect(got).To(HaveOccurred(), "the handler wrote 64 MiB to a client that reads nothing")
}
