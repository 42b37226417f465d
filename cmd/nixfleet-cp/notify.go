package main

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/internal/cliapp"
)

// The [[notifications.webhook]] tables of the --config file (rfcs/0006
// §Notifications): operational settings, not the signed fleet's, so they
// live with the replica's other settings. Flags and environment
// variables have no counterpart.

// notificationsConfig is the notifications table.
type notificationsConfig struct {
	Webhook []webhookConfig `toml:"webhook"`
}

// webhookConfig is one [[notifications.webhook]].
type webhookConfig struct {
	Name       string        `toml:"name"`
	URL        string        `toml:"url"`
	Format     string        `toml:"format"`
	Events     []string      `toml:"events"`
	Channels   []string      `toml:"channels"`
	SecretFile string        `toml:"secret-file"`
	Timeout    time.Duration `toml:"timeout"`
	MinBackoff time.Duration `toml:"min-backoff"`
	MaxBackoff time.Duration `toml:"max-backoff"`
	CA         string        `toml:"ca"`
}

// credentialsDir in secret-file and ca is systemd's credentials directory
// ($CREDENTIALS_DIRECTORY), where the NixOS module hands the secrets
// over (LoadCredential).
const credentialsDir = "${CREDENTIALS_DIRECTORY}"

// readNotifications returns the reader of the notifications table: it
// checks every webhook (a mistake is a usage error naming its file and
// line), reads its secret and CA files, and appends the sinks to out.
func readNotifications(out *[]notify.Sink) func(*cliapp.Section) error {
	return func(sec *cliapp.Section) error {
		var nc notificationsConfig
		if err := sec.Decode(&nc); err != nil {
			return err
		}
		first := map[string]int{}
		for i, w := range nc.Webhook {
			s, err := w.sink(sec, fmt.Sprintf("webhook[%d]", i))
			if err != nil {
				return err
			}
			if j, ok := first[s.Name]; ok {
				return sec.Errorf(fmt.Sprintf("webhook[%d].name", i), "is %q, the name of notifications.webhook[%d] too: names must differ", s.Name, j)
			}
			first[s.Name] = i
			*out = append(*out, s)
		}
		return nil
	}
}

// sink checks a webhook's settings and makes its sink; key is its path
// in the table.
func (w webhookConfig) sink(sec *cliapp.Section, key string) (notify.Sink, error) {
	at := func(k string) string { return key + "." + k }
	s := notify.Sink{Name: w.Name, URL: w.URL, Channels: w.Channels, Timeout: w.Timeout, MinBackoff: w.MinBackoff, MaxBackoff: w.MaxBackoff}
	switch {
	case !sec.Has(at("name")):
		return s, sec.Errorf(key, `has no name (name = "ops": it names the sink in logs, metrics and X-Nixfleet-Delivery)`)
	case notify.CheckName(w.Name) != nil:
		return s, sec.Errorf(at("name"), "is %q; want 1 to 63 of a-z, 0-9, _ and -, starting with a letter or a digit", w.Name)
	case !sec.Has(at("url")):
		return s, sec.Errorf(key, "has no url (where its events are POSTed)")
	}
	if err := notify.CheckURL(w.URL); err != nil {
		return s, sec.Errorf(at("url"), "cannot be used: %v", err)
	}
	var err error
	if s.Format, err = notify.ParseFormat(w.Format); err != nil {
		return s, sec.Errorf(at("format"), "is %q; want json, slack or alertmanager", w.Format)
	}
	for i, e := range w.Events {
		c, err := notify.ParseCategory(e)
		if err != nil {
			names := make([]string, len(notify.Categories))
			for i, c := range notify.Categories {
				names[i] = string(c)
			}
			return s, sec.Errorf(at(fmt.Sprintf("events[%d]", i)), "is %q, not an event category (known: %s)", e, strings.Join(names, ", "))
		}
		s.Events = append(s.Events, c)
	}
	for i, ch := range w.Channels {
		if ch == "" {
			return s, sec.Errorf(at(fmt.Sprintf("channels[%d]", i)), "is empty; want a channel name")
		}
	}
	for _, d := range []struct {
		key   string
		value time.Duration
		most  time.Duration
	}{{"timeout", w.Timeout, notify.MaxTimeout}, {"min-backoff", w.MinBackoff, 0}, {"max-backoff", w.MaxBackoff, 0}} {
		if !sec.Has(at(d.key)) {
			continue
		}
		if d.value <= 0 || d.most > 0 && d.value > d.most {
			want := "more than 0"
			if d.most > 0 {
				want += " and at most " + d.most.String()
			}
			return s, sec.Errorf(at(d.key), "is %s; want %s", d.value, want)
		}
	}
	if sec.Has(at("min-backoff")) && sec.Has(at("max-backoff")) && w.MinBackoff > w.MaxBackoff {
		return s, sec.Errorf(at("max-backoff"), "is %s, less than min-backoff %s", w.MaxBackoff, w.MinBackoff)
	}
	if w.SecretFile != "" {
		b, err := readSetting(w.SecretFile)
		if err != nil {
			return s, sec.Errorf(at("secret-file"), "cannot be read: %v", err)
		}
		if s.Secret = []byte(strings.TrimSpace(string(b))); len(s.Secret) == 0 {
			return s, sec.Errorf(at("secret-file"), "names an empty file (%s); want the HMAC key", w.SecretFile)
		}
	}
	if w.CA != "" {
		if !strings.HasPrefix(w.URL, "https:") {
			return s, sec.Errorf(at("ca"), "is set for an http url; a CA verifies an https sink")
		}
		pem, err := readSetting(w.CA)
		if err != nil {
			return s, sec.Errorf(at("ca"), "cannot be read: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return s, sec.Errorf(at("ca"), "holds no PEM certificate (%s)", w.CA)
		}
		s.RootCAs = pool
	}
	if err := s.Check(); err != nil { // what the checks above missed
		return s, sec.Errorf(key, "%v", err)
	}
	return s, nil
}

// readSetting reads a file a setting names, with ${CREDENTIALS_DIRECTORY}
// in its name as that environment variable.
func readSetting(name string) ([]byte, error) {
	name, err := expandSetting(name)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(name)
}

// expandSetting returns the file name a setting gives, with
// ${CREDENTIALS_DIRECTORY} in it as that environment variable.
func expandSetting(name string) (string, error) {
	if strings.Contains(name, credentialsDir) {
		dir := os.Getenv("CREDENTIALS_DIRECTORY")
		if dir == "" {
			return "", fmt.Errorf("%s is not set (systemd sets it for a unit with LoadCredential)", credentialsDir)
		}
		name = strings.ReplaceAll(name, credentialsDir, dir)
	}
	return name, nil
}
