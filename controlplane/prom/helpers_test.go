package prom_test

import (
	"crypto/tls"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/nixfleet/nixfleet/internal/devcert"
)

func tlsClient(cert devcert.Files) *tls.Config {
	return &tls.Config{RootCAs: cert.Pool, MinVersion: tls.VersionTLS12}
}

// writePEM writes a TLS test server's certificate, for a client's CA file.
func writePEM(t *testing.T, path string, srv *httptest.Server) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
