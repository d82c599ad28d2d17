package relay

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// lingerTimeout bounds how long a closed streaming connection waits for
// its peer to close after the relay has half-closed it.
const lingerTimeout = 2 * time.Second

// streamWriter hands the streaming libraries (k8s.io/cri-streaming) the
// client's connection, taken over for a session, as a lingerConn; when
// closeAt is set the connection is also closed when it ends, so that the
// client learns of a session's end at once (the port-forward server never
// looks at the request's context).
type streamWriter struct {
	http.ResponseWriter
	closeAt context.Context
}

func (s streamWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be taken over for streaming")
	}
	conn, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	lc := &lingerConn{Conn: conn}
	if s.closeAt != nil {
		context.AfterFunc(s.closeAt, func() { _ = lc.Close() })
	}
	return lc, rw, nil
}

// lingerConn closes gracefully: it half-closes (a TLS close_notify) and
// closes for good only once the peer has closed too, or after
// lingerTimeout. The streaming libraries write a command's exit status
// and close at once; the kube-apiserver's proxy in front of the relay
// closes both sides of a session as soon as either of its copies ends,
// and a client still sending (stdin, a ping) makes the copy towards the
// relay fail first against a closed socket. The client then lost the
// status still in flight, and client-go reads a missing status as exit
// code 0. With the half-close the proxy reads the relay's end of stream
// after the status and forwards both.
type lingerConn struct {
	net.Conn
	once sync.Once
}

func (c *lingerConn) Close() error {
	c.once.Do(func() {
		cw, ok := c.Conn.(interface{ CloseWrite() error })
		if !ok || cw.CloseWrite() != nil {
			_ = c.Conn.Close()
			return
		}
		// The caller (a session's last step) does not wait for the peer.
		go func() {
			_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
			_, _ = io.Copy(io.Discard, c.Conn)
			_ = c.Conn.Close()
		}()
	})
	return nil
}
