package testgateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"

	"google.golang.org/grpc"

	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// SandboxRequest is what the HTTP service of a test sandbox (HTTPPort)
// answers: the request as it arrived inside the sandbox, so that a test
// sees what the agent's service would.
type SandboxRequest struct {
	Method  string      `json:"method"`
	URI     string      `json:"uri"`
	Host    string      `json:"host"`
	Header  http.Header `json:"header"`
	Body    string      `json:"body"`
	Version string      `json:"version"`
}

// UpgradeProtocol is the protocol the HTTP service switches to on an
// Upgrade request: an echo of whatever is sent after the 101.
const UpgradeProtocol = "echo"

// serveOverStream runs one connection to the sandbox's HTTP service over
// a ForwardTcp stream: frames in are the connection's bytes in, and the
// service's bytes go out as frames, until either side closes.
func serveOverStream(stream grpc.BidiStreamingServer[v01.TcpForwardFrame, v01.TcpForwardFrame]) error {
	service, gateway := net.Pipe()
	go func() {
		defer service.Close()
		sandboxHTTP(service)
	}()
	go func() {
		defer gateway.Close()
		for {
			f, err := stream.Recv()
			if err != nil {
				return
			}
			if d := f.GetData(); len(d) > 0 {
				if _, err := gateway.Write(d); err != nil {
					return
				}
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := gateway.Read(buf)
		if n > 0 {
			if serr := stream.Send(&v01.TcpForwardFrame{Payload: &v01.TcpForwardFrame_Data{Data: append([]byte(nil), buf[:n]...)}}); serr != nil {
				return serr
			}
		}
		if err != nil {
			return nil
		}
	}
}

// Paths the sandbox's HTTP service treats apart: HangPath is never
// answered, HintsPath is answered after a 103 Early Hints, TrailersPath
// with a trailer.
const (
	HangPath     = "/hang"
	HintsPath    = "/hints"
	TrailersPath = "/trailers"
)

// sandboxHTTP serves HTTP/1.1 on conn: every request is answered with a
// SandboxRequest (and a cookie, a CORS grant, a Clear-Site-Data and a
// Refresh, which no proxy in front should pass on to a browser), as a
// redirect to the query's redirect when it has one; an Upgrade request
// switches to an echo; HangPath is never answered.
func sandboxHTTP(conn net.Conn) {
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("Upgrade") == UpgradeProtocol {
			_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+UpgradeProtocol+"\r\n\r\n")
			_, _ = io.Copy(conn, br)
			return
		}
		if req.URL.Path == HangPath {
			// A service that never answers: held until the connection closes.
			_, _ = io.Copy(io.Discard, br)
			return
		}
		if req.URL.Path == HintsPath {
			// An informational answer first, as a 103 Early Hints.
			_, _ = io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </elsewhere>; rel=preload\r\n\r\n")
		}
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		out, _ := json.Marshal(SandboxRequest{Method: req.Method, URI: req.RequestURI, Host: req.Host, Header: req.Header, Body: string(body),
			Version: req.Proto})
		resp := &http.Response{StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1, ContentLength: int64(len(out)),
			Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"agent=1; Path=/"},
				"Access-Control-Allow-Origin": {"*"}, "Clear-Site-Data": {`"cookies"`}, "Refresh": {"0; url=/elsewhere"},
				"Content-Length": {strconv.Itoa(len(out))}},
			Body: io.NopCloser(bytes.NewReader(out))}
		if req.URL.Path == TrailersPath {
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
			resp.TransferEncoding = []string{"chunked"}
			resp.Trailer = http.Header{"X-Trailer": {"set"}}
		}
		if to := req.URL.Query().Get("redirect"); to != "" {
			resp.StatusCode = http.StatusFound
			resp.Header.Set("Location", to)
		}
		if err := resp.Write(conn); err != nil || req.Close {
			return
		}
	}
}
