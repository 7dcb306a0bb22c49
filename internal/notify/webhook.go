package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/outbox"
	"github.com/reconcile/reconcile/internal/provider"
)

// The body formats of a webhook.
const (
	// Standard sends a Standard Webhooks event: {"type", "timestamp",
	// "data"}.
	Standard = "standard"
	// Slack sends a Slack message: {"text", "blocks"}, which Slack's
	// incoming webhooks (and Mattermost's, and many chat bridges) accept.
	Slack = "slack"
)

// Webhook is one URL announcements are POSTed to.
type Webhook struct {
	url    string
	format string
	dest   outbox.Destination
}

// ParseWebhook checks a webhook URL (absolute http or https, with a host)
// and a format (standard or slack). The error never repeats the URL's path
// or query, which can hold a credential.
func ParseWebhook(rawURL, format string) (Webhook, error) {
	if format != Standard && format != Slack {
		return Webhook{}, fmt.Errorf("format %q: want standard or slack", format)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Webhook{}, fmt.Errorf("webhook %s: want an absolute http or https URL", Redact(rawURL))
	}
	if u.User != nil {
		return Webhook{}, fmt.Errorf("webhook %s: credentials in the URL are not sent; use RECONCILE_NOTIFY_SECRET to sign instead", Redact(rawURL))
	}
	sum := sha256.Sum256([]byte(rawURL))
	return Webhook{url: rawURL, format: format,
		dest: outbox.Destination{ID: hex.EncodeToString(sum[:8]), Target: Redact(rawURL), Format: format}}, nil
}

// Target is the webhook's URL with its path and query hidden.
func (w Webhook) Target() string { return w.dest.Target }

// Format is standard or slack.
func (w Webhook) Format() string { return w.format }

// Destination is the webhook as the outbox records it.
func (w Webhook) Destination() outbox.Destination { return w.dest }

// Redact returns a URL with everything after its host hidden
// (https://hooks.example.com/…): a webhook's path or query often is its
// credential. A string that is not a URL with a host is hidden whole.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.Scheme == "" {
		return "(a URL not shown)"
	}
	out := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		out += "/…"
	}
	return out
}

// secretPrefix starts a Standard Webhooks secret: whsec_ and the key in
// base64.
const secretPrefix = "whsec_"

// Key sizes a Standard Webhooks secret may have, in bytes.
const (
	minKey = 24
	maxKey = 64
)

// ParseSecret decodes a Standard Webhooks secret, whsec_ followed by the
// key in base64 (24 to 64 bytes; the prefix may be left out), into the key
// that signs. The error never repeats the secret.
func ParseSecret(s string) (provider.Secret, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(s), secretPrefix))
	if err != nil {
		return "", fmt.Errorf("want whsec_ followed by the key in base64, as the receiver shows it")
	}
	if len(key) < minKey || len(key) > maxKey {
		return "", fmt.Errorf("the key is %d bytes; want %d to %d", len(key), minKey, maxKey)
	}
	return provider.Secret(key), nil
}

// Sign returns the webhook-signature header of a message as Standard
// Webhooks define it: "v1," and the base64 HMAC-SHA256, keyed with key, of
// "{id}.{timestamp}.{body}", the timestamp in Unix seconds.
func Sign(key provider.Secret, id string, at time.Time, body []byte) string {
	mac := hmac.New(sha256.New, []byte(key.Reveal()))
	mac.Write([]byte(id + "." + strconv.FormatInt(at.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
