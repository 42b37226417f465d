package sshkey_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/internal/sshkey"
)

func TestParse(t *testing.T) {
	t.Parallel()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	openssh, err := ssh.MarshalPrivateKey(key, "operator")
	if err != nil {
		t.Fatal(err)
	}
	encrypted, err := ssh.MarshalPrivateKeyWithPassphrase(key, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecBlock, err := ssh.MarshalPrivateKey(ec, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr error // nil: the key parses and equals key
		anyErr  bool
	}{
		{name: "openssh", data: pem.EncodeToMemory(openssh)},
		{name: "pkcs8", data: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})},
		{name: "encrypted", data: pem.EncodeToMemory(encrypted), wantErr: sshkey.ErrEncrypted},
		{name: "ecdsa", data: pem.EncodeToMemory(ecBlock), wantErr: sshkey.ErrNotEd25519},
		{name: "garbage", data: []byte("ssh-ed25519 AAAA not a private key\n"), anyErr: true},
		{name: "empty", data: nil, anyErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := sshkey.Parse(tc.data)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Parse: %v, want %v", err, tc.wantErr)
				}
			case tc.anyErr:
				if err == nil {
					t.Fatal("Parse accepted it")
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if !got.Equal(key) {
					t.Fatal("Parse returned another key")
				}
			}
		})
	}
}

func TestReadNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := sshkey.Read(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sshkey.Read(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Fatalf("error %v does not start with the file name", err)
	}
}
