package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

func canonicalizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "canonicalize",
		Usage:     "print the RFC 8785 (JCS) canonical form of a JSON document",
		ArgsUsage: "[FILE]",
		Description: "Reads FILE (or stdin) and writes its canonical bytes to stdout, without a\n" +
			"trailing newline. Invalid JSON, duplicate member names, invalid UTF-8,\n" +
			"unpaired surrogates, non-finite numbers and trailing data exit 1.",
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usage(c, "expected at most one FILE, got %d arguments", c.NArg())
			}
			in, err := readInput(c, c.Args().First())
			if err != nil {
				return ioError(c, err)
			}
			out, err := trust.Canonicalize(in)
			if err != nil {
				ce := failed(c, err, "")
				ce.rejected = true
				return ce
			}
			_, err = c.App.Writer.Write(out)
			return err
		},
	}
}

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "create a signing key pair for CI",
		Description: "Writes PREFIX.pem (unencrypted PKCS#8, mode 0600) and PREFIX.pub.json\n" +
			"({\"algorithm\":…,\"public\":…}, ready for trust.json). Existing files are\n" +
			"never overwritten.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "write `PREFIX`.pem and PREFIX.pub.json"},
			&cli.StringFlag{Name: "algorithm", Value: proto.AlgorithmEd25519, Usage: "ed25519 or ecdsa-p256"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage(c, "unexpected argument %q", c.Args().First())
			}
			if err := requireFlags(c, "out"); err != nil {
				return err
			}
			key, err := trust.GenerateKey(c.String("algorithm"))
			if err != nil {
				return usage(c, "--algorithm: %v", err)
			}
			pemBytes, err := key.MarshalPKCS8PEM()
			if err != nil {
				return failed(c, err, "")
			}
			pub := key.Public().Proto()
			pubJSON, err := json.Marshal(pub)
			if err != nil {
				return failed(c, err, "")
			}
			privPath, pubPath := c.String("out")+".pem", c.String("out")+".pub.json"
			if err := createFiles([]newFile{{privPath, pemBytes, 0o600}, {pubPath, append(pubJSON, '\n'), 0o644}}); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return failed(c, err, "keygen never overwrites a key; choose another --out")
				}
				return ioError(c, err)
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, map[string]any{"private": privPath, "public": pubPath, "key": pub})
			}
			fmt.Fprintf(c.App.Writer, "private key: %s (mode 0600; keep it secret)\npublic key:  %s\n%s\n", privPath, pubPath, pubJSON)
			return nil
		},
	}
}

type newFile struct {
	path string
	data []byte
	mode os.FileMode
}

// createFiles creates every file or none: each is written to a temporary
// file in its directory, synced, then hard-linked into place, which fails
// if the name exists. On error the files already placed are removed.
func createFiles(files []newFile) (err error) {
	var placed []string
	defer func() {
		if err != nil {
			for _, p := range placed {
				os.Remove(p)
			}
		}
	}()
	for _, f := range files {
		if _, err := os.Lstat(f.path); err == nil {
			return &fs.PathError{Op: "create", Path: f.path, Err: fs.ErrExist}
		}
	}
	for _, f := range files {
		tmp, err := os.CreateTemp(filepath.Dir(f.path), "."+filepath.Base(f.path)+".tmp-")
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return &fs.PathError{Op: "create", Path: f.path, Err: err}
		}
		name := tmp.Name()
		_, err = tmp.Write(f.data)
		if err == nil {
			err = tmp.Chmod(f.mode)
		}
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Link(name, f.path)
		}
		os.Remove(name)
		if err != nil {
			return err
		}
		placed = append(placed, f.path)
	}
	return nil
}
