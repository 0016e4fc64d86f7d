package credits

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
)

// MaxMessageBytes bounds an EIP-4361 message.
const MaxMessageBytes = 4096

// maxResources bounds the resources of a message.
const maxResources = 16

// ErrBadMessage: the text is not an EIP-4361 message as ParseMessage accepts
// it. Its wrapped detail names the line or field, never the message's text.
var ErrBadMessage = errors.New("credits: malformed sign-in message")

// Message is an EIP-4361 (Sign-In with Ethereum) message.
type Message struct {
	Scheme    string // optional: "https" or "http", empty when absent
	Domain    string // the authority (host[:port]) asking for the sign-in
	Address   common.Address
	Statement string // optional, empty when absent
	URI       string
	Version   string // always "1"
	ChainID   uint64
	Nonce     string
	IssuedAt  time.Time
	// ExpirationTime and NotBefore are zero when absent.
	ExpirationTime time.Time
	NotBefore      time.Time
	RequestID      string   // optional
	Resources      []string // optional
}

const siweHeader = " wants you to sign in with your Ethereum account:"

// ParseMessage parses an EIP-4361 message strictly: printable ASCII (the
// grammar's URIs, statement and fields are all ASCII), LF line ends and no
// trailing newline; the fields in the order of the standard, each once; an
// EIP-55 checksummed address; version 1; a decimal chain id; a nonce of at
// least 8 letters and digits; RFC 3339 times; absolute URIs. Anything else is
// ErrBadMessage.
func ParseMessage(text string) (*Message, error) {
	bad := func(format string, args ...any) (*Message, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
	}
	if len(text) > MaxMessageBytes {
		return bad("over %d bytes", MaxMessageBytes)
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; c != '\n' && (c < ' ' || c >= 0x7f) {
			return bad("control or non-ASCII character at byte %d", i)
		}
	}
	lines := strings.Split(text, "\n")
	var m Message
	i := 0
	next := func() (string, bool) {
		if i >= len(lines) {
			return "", false
		}
		i++
		return lines[i-1], true
	}

	// ${scheme://}${domain} wants you to sign in with your Ethereum account:
	l, _ := next()
	origin, ok := strings.CutSuffix(l, siweHeader)
	if !ok {
		return bad("line 1 is not the sign-in header")
	}
	if scheme, rest, found := strings.Cut(origin, "://"); found {
		if scheme != "https" && scheme != "http" {
			return bad("scheme is not http or https")
		}
		m.Scheme, origin = scheme, rest
	}
	if !validAuthority(origin) {
		return bad("domain is not a host[:port]")
	}
	m.Domain = origin

	l, _ = next()
	if len(l) != 42 || !strings.HasPrefix(l, "0x") || !common.IsHexAddress(l) {
		return bad("line 2 is not an address")
	}
	m.Address = common.HexToAddress(l)
	if m.Address.Hex() != l {
		return bad("address is not in its EIP-55 checksum form")
	}
	if l, ok := next(); !ok || l != "" {
		return bad("line 3 is not empty")
	}
	// An optional statement line, then an empty line.
	l, ok = next()
	if !ok {
		return bad("message ends after the address")
	}
	if l != "" {
		if strings.HasPrefix(l, "URI: ") {
			return bad("no empty line before URI")
		}
		m.Statement = l
		if l, ok := next(); !ok || l != "" {
			return bad("no empty line after the statement")
		}
	}

	field := func(name string, required bool) (string, bool, error) {
		if i < len(lines) {
			if v, ok := strings.CutPrefix(lines[i], name+": "); ok {
				i++
				if v == "" {
					return "", false, fmt.Errorf("%w: %s is empty", ErrBadMessage, name)
				}
				return v, true, nil
			}
		}
		if required {
			return "", false, fmt.Errorf("%w: no %s line where it belongs", ErrBadMessage, name)
		}
		return "", false, nil
	}
	var err error
	var v string
	if v, _, err = field("URI", true); err != nil {
		return nil, err
	}
	if !absoluteURI(v) {
		return bad("URI is not an absolute URI")
	}
	m.URI = v
	if v, _, err = field("Version", true); err != nil {
		return nil, err
	}
	if v != "1" {
		return bad("version is not 1")
	}
	m.Version = v
	if v, _, err = field("Chain ID", true); err != nil {
		return nil, err
	}
	if m.ChainID, err = parseChainID(v); err != nil {
		return bad("chain id is not a positive decimal")
	}
	if v, _, err = field("Nonce", true); err != nil {
		return nil, err
	}
	if !store.ValidNonce(v) {
		return bad("nonce is not 8 to 128 letters and digits")
	}
	m.Nonce = v
	if v, _, err = field("Issued At", true); err != nil {
		return nil, err
	}
	if m.IssuedAt, err = parseTime(v); err != nil {
		return bad("issued at is not an RFC 3339 time")
	}
	var present bool
	if v, present, err = field("Expiration Time", false); err != nil {
		return nil, err
	} else if present {
		if m.ExpirationTime, err = parseTime(v); err != nil {
			return bad("expiration time is not an RFC 3339 time")
		}
	}
	if v, present, err = field("Not Before", false); err != nil {
		return nil, err
	} else if present {
		if m.NotBefore, err = parseTime(v); err != nil {
			return bad("not before is not an RFC 3339 time")
		}
	}
	if v, present, err = field("Request ID", false); err != nil {
		return nil, err
	} else if present {
		if strings.ContainsAny(v, " ") {
			return bad("request id has a space")
		}
		m.RequestID = v
	}
	if i < len(lines) && lines[i] == "Resources:" {
		i++
		for i < len(lines) {
			r, ok := strings.CutPrefix(lines[i], "- ")
			if !ok || !absoluteURI(r) {
				return bad("resource %d is not \"- \" and an absolute URI", len(m.Resources)+1)
			}
			if len(m.Resources) == maxResources {
				return bad("more than %d resources", maxResources)
			}
			m.Resources = append(m.Resources, r)
			i++
		}
		if len(m.Resources) == 0 {
			return bad("Resources: without resources")
		}
	}
	if i != len(lines) {
		return bad("unexpected line %d", i+1)
	}
	return &m, nil
}

// String returns m as EIP-4361 text, the form ParseMessage accepts and a
// wallet signs.
func (m *Message) String() string {
	var b strings.Builder
	if m.Scheme != "" {
		b.WriteString(m.Scheme + "://")
	}
	b.WriteString(m.Domain + siweHeader + "\n" + m.Address.Hex() + "\n\n")
	if m.Statement != "" {
		b.WriteString(m.Statement + "\n")
	}
	b.WriteString("\nURI: " + m.URI + "\nVersion: " + m.Version + "\nChain ID: " + strconv.FormatUint(m.ChainID, 10) +
		"\nNonce: " + m.Nonce + "\nIssued At: " + m.IssuedAt.UTC().Format(time.RFC3339Nano))
	if !m.ExpirationTime.IsZero() {
		b.WriteString("\nExpiration Time: " + m.ExpirationTime.UTC().Format(time.RFC3339Nano))
	}
	if !m.NotBefore.IsZero() {
		b.WriteString("\nNot Before: " + m.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	if m.RequestID != "" {
		b.WriteString("\nRequest ID: " + m.RequestID)
	}
	if len(m.Resources) > 0 {
		b.WriteString("\nResources:")
		for _, r := range m.Resources {
			b.WriteString("\n- " + r)
		}
	}
	return b.String()
}

// validAuthority reports whether s is host[:port] with a DNS name or an IP
// literal and, if present, a decimal port.
func validAuthority(s string) bool {
	if s == "" || strings.ContainsAny(s, "/?#@ \\") {
		return false
	}
	u, err := url.Parse("https://" + s)
	if err != nil || u.Host != s || u.Hostname() == "" {
		return false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 || p[0] == '0' {
			return false
		}
	} else if strings.HasSuffix(s, ":") {
		return false
	}
	return true
}

// absoluteURI reports whether s parses as an absolute URI with no spaces.
func absoluteURI(s string) bool {
	if strings.ContainsAny(s, " ") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != "")
}

func parseChainID(s string) (uint64, error) {
	if s == "" || s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not a positive decimal")
	}
	return strconv.ParseUint(s, 10, 64)
}

// parseTime parses an RFC 3339 date-time with an upper-case T and Z (or a
// numeric offset).
func parseTime(s string) (time.Time, error) {
	if strings.ContainsAny(s, "tz ") {
		return time.Time{}, errors.New("not RFC 3339")
	}
	return time.Parse(time.RFC3339Nano, s)
}
