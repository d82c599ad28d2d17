package operator

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/openshell/openshell-operator/internal/pki"
)

// TestExternalCertificateIsReadOnceItIsThere: the service-ca may issue the
// external port listener's certificate after the relay started, and
// reissues it before it expires; each handshake serves what the files hold
// then, and none is served before they exist.
func TestExternalCertificateIsReadOnceItIsThere(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	kp := &fileKeyPair{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	_, err := kp.get(nil)
	g.Expect(err).To(MatchError(ContainSubstring("no serving certificate")))

	ca, err := pki.NewCA("service-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	write := func(cn string, at time.Time) {
		leaf, err := ca.Issue(pki.LeafRequest{CommonName: cn, DNSNames: []string{cn}, Server: true, Validity: time.Hour}, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(kp.keyFile, leaf.KeyPEM, 0o600)).To(Succeed())
		g.Expect(os.WriteFile(kp.certFile, leaf.CertPEM, 0o600)).To(Succeed())
		g.Expect(os.Chtimes(kp.certFile, at, at)).To(Succeed())
	}
	served := func() string {
		c, err := kp.get(nil)
		g.Expect(err).NotTo(HaveOccurred())
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		g.Expect(err).NotTo(HaveOccurred())
		return leaf.Subject.CommonName
	}
	t0 := time.Now().Add(-time.Minute)
	write("first", t0)
	g.Expect(served()).To(Equal("first"))
	write("second", t0.Add(time.Second))
	g.Expect(served()).To(Equal("second"), "a reissued certificate is served at the next handshake")
	// Mid-rotation, the key file of the next pair beside the last
	// certificate: the last good pair serves.
	g.Expect(os.WriteFile(kp.keyFile, []byte("not a key"), 0o600)).To(Succeed())
	g.Expect(os.Chtimes(kp.certFile, t0.Add(2*time.Second), t0.Add(2*time.Second))).To(Succeed())
	g.Expect(served()).To(Equal("second"))
}
