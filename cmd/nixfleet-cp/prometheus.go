package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/cliapp"
	"github.com/nixfleet/nixfleet/proto"
)

// The [[prometheus.source]] tables of the --config file (rfcs/0006
// §Canary analysis): the named Prometheus sources an analysis may name
// (proto.Analysis.Source), each with the settings of the --prometheus-*
// flags, which configure the default source. How to reach a source and
// its credentials live here, never in the signed fleet. Flags and
// environment variables have no counterpart.

// prometheusConfig is the prometheus table.
type prometheusConfig struct {
	Source []promSourceConfig `toml:"source"`
}

// promSourceConfig is one [[prometheus.source]]: the keys are the
// --prometheus-* flags' names without their prefix.
type promSourceConfig struct {
	Name                  string        `toml:"name"`
	URL                   string        `toml:"url"`
	CA                    string        `toml:"ca"`
	Cert                  string        `toml:"cert"`
	Key                   string        `toml:"key"`
	BearerTokenFile       string        `toml:"bearer-token-file"`
	BasicAuthUser         string        `toml:"basic-auth-user"`
	BasicAuthPasswordFile string        `toml:"basic-auth-password-file"`
	Header                []string      `toml:"header"`
	ProxyURL              string        `toml:"proxy-url"`
	Timeout               time.Duration `toml:"timeout"`
}

// readPrometheus returns the reader of the prometheus table: it checks
// every source as the flags are checked (a mistake is a usage error
// naming its file and line), expands ${CREDENTIALS_DIRECTORY} in its file
// names, and appends the sources to out.
func readPrometheus(out *[]prom.Source) func(*cliapp.Section) error {
	return func(sec *cliapp.Section) error {
		var pc prometheusConfig
		if err := sec.Decode(&pc); err != nil {
			return err
		}
		first := map[string]int{}
		for i, c := range pc.Source {
			s, err := c.source(sec, fmt.Sprintf("source[%d]", i))
			if err != nil {
				return err
			}
			if j, ok := first[s.Name]; ok {
				return sec.Errorf(fmt.Sprintf("source[%d].name", i), "is %q, the name of prometheus.source[%d] too: names must differ", s.Name, j)
			}
			first[s.Name] = i
			*out = append(*out, s)
		}
		return nil
	}
}

// source checks a source's settings and makes its configuration; key is
// its path in the table.
func (c promSourceConfig) source(sec *cliapp.Section, key string) (prom.Source, error) {
	at := func(k string) string { return key + "." + k }
	s := prom.Source{Name: c.Name, Config: prom.Config{URL: c.URL, BasicAuthUser: c.BasicAuthUser, ProxyURL: c.ProxyURL, Timeout: c.Timeout}}
	switch {
	case !sec.Has(at("name")):
		return s, sec.Errorf(key, `has no name (name = "team-a": the analyses that query this Prometheus say source = "team-a")`)
	case c.Name == proto.DefaultSource:
		return s, sec.Errorf(at("name"), "is %q, which names the --prometheus-* source (analyses without a source): name this one otherwise", c.Name)
	case !proto.ValidSourceName(c.Name):
		return s, sec.Errorf(at("name"), "is %q; want 1 to %d of a-z, 0-9, _ and -, starting with a letter or a digit", c.Name, proto.MaxSourceNameLen)
	case c.URL == "":
		return s, sec.Errorf(key, `has no url (url = "https://prometheus.example.org")`)
	}
	for _, f := range []struct {
		key  string
		from string
		to   *string
	}{
		{"ca", c.CA, &s.CAFile}, {"cert", c.Cert, &s.CertFile}, {"key", c.Key, &s.KeyFile},
		{"bearer-token-file", c.BearerTokenFile, &s.BearerTokenFile},
		{"basic-auth-password-file", c.BasicAuthPasswordFile, &s.BasicAuthPasswordFile},
	} {
		name, err := expandSetting(f.from)
		if err != nil {
			return s, sec.Errorf(at(f.key), "cannot be used: %v", err)
		}
		*f.to = name
	}
	if sec.Has(at("timeout")) && c.Timeout <= 0 {
		return s, sec.Errorf(at("timeout"), "is %s; want more than 0", c.Timeout)
	}
	for i, v := range c.Header {
		name, value, err := promHeader(v)
		if err != nil {
			return s, sec.Errorf(at(fmt.Sprintf("header[%d]", i)), "is %q: %v", v, headerHint(err,
				"use bearer-token-file, or basic-auth-user and basic-auth-password-file"))
		}
		if s.Headers == nil {
			s.Headers = http.Header{}
		}
		s.Headers.Add(name, value)
	}
	if _, err := prom.New(s.Config); err != nil {
		return s, sec.Errorf(key, "cannot be used: %s", strings.TrimPrefix(err.Error(), "prom: "))
	}
	return s, nil
}

// Why a "Name: value" header is refused.
var (
	errNotHeader     = errors.New("want 'Name: value'")
	errAuthorization = errors.New("the authentication settings set the Authorization header")
)

// promHeader reads one "Name: value" header of the default source's
// --prometheus-header or a source's header. Authorization is refused
// (errAuthorization): the authentication settings set it, from files,
// and a secret belongs in neither a command line nor a config file.
func promHeader(v string) (name, value string, err error) {
	name, value, ok := strings.Cut(v, ":")
	if name = strings.TrimSpace(name); !ok || name == "" {
		return "", "", errNotHeader
	}
	if http.CanonicalHeaderKey(name) == "Authorization" {
		return "", "", errAuthorization
	}
	return name, strings.TrimSpace(value), nil
}

// headerHint is promHeader's error, with how to authenticate instead
// when it refused Authorization.
func headerHint(err error, how string) string {
	if errors.Is(err, errAuthorization) {
		return err.Error() + ": " + how
	}
	return err.Error()
}
