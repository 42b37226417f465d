// Package sshkey reads the ed25519 private keys nixfleet's clients identify
// themselves with: a host's SSH host key (the agent) and an operator's key
// (the nixfleet CLI). It accepts the OpenSSH private key format
// (ssh-keygen -t ed25519) and PKCS#8 PEM ("PRIVATE KEY", as nixfleet
// keygen writes), unencrypted only.
package sshkey

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"

	"golang.org/x/crypto/ssh"
)

// ErrNotEd25519 is returned by Parse and Read for a key of another type.
var ErrNotEd25519 = errors.New("sshkey: not an ed25519 private key")

// ErrEncrypted is returned by Parse and Read for a key protected by a
// passphrase: nixfleet's clients run unattended and take no passphrase.
var ErrEncrypted = errors.New("sshkey: the key is encrypted with a passphrase")

// Parse decodes an unencrypted ed25519 private key in OpenSSH or PKCS#8
// PEM form.
func Parse(data []byte) (ed25519.PrivateKey, error) {
	k, err := ssh.ParseRawPrivateKey(data)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, ErrEncrypted
		}
		return nil, fmt.Errorf("sshkey: %w", err)
	}
	switch k := k.(type) {
	case *ed25519.PrivateKey:
		return *k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("%w (a %T)", ErrNotEd25519, k)
}

// Read reads and parses the key file at path; errors name the file.
func Read(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}
