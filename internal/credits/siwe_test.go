package credits

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"
)

// full is a message with every optional field.
const full = `https://gw.example.com wants you to sign in with your Ethereum account:
0x857b06519E91e3A54538791bDbb0E22373e36b66

Sign in to manage your llm4agents API keys.

URI: https://gw.example.com/login
Version: 1
Chain ID: 84532
Nonce: abcdefgh12345678
Issued At: 2026-11-30T06:00:00.123Z
Expiration Time: 2026-11-30T06:10:00Z
Not Before: 2026-11-30T05:59:00+00:00
Request ID: req-1
Resources:
- https://gw.example.com/v1/keys
- ipfs://bafybeiemxf5abjwjbikoz4mc3a3dla6ual3jsgpdr4cjr3oz3evfyavhwq`

// minimal has only the required fields (no scheme, no statement).
const minimal = `gw.example.com wants you to sign in with your Ethereum account:
0x857b06519E91e3A54538791bDbb0E22373e36b66


URI: https://gw.example.com
Version: 1
Chain ID: 1
Nonce: abcdefgh
Issued At: 2026-11-30T06:00:00Z`

func TestParseMessage(t *testing.T) {
	addr := common.HexToAddress("0x857b06519E91e3A54538791bDbb0E22373e36b66")
	tests := []struct {
		name string
		text string
		want *Message
	}{
		{"full", full, &Message{
			Scheme: "https", Domain: "gw.example.com", Address: addr, Statement: "Sign in to manage your llm4agents API keys.",
			URI: "https://gw.example.com/login", Version: "1", ChainID: 84532, Nonce: "abcdefgh12345678",
			IssuedAt:       time.Date(2026, 11, 30, 6, 0, 0, 123_000_000, time.UTC),
			ExpirationTime: time.Date(2026, 11, 30, 6, 10, 0, 0, time.UTC),
			NotBefore:      time.Date(2026, 11, 30, 5, 59, 0, 0, time.UTC),
			RequestID:      "req-1",
			Resources:      []string{"https://gw.example.com/v1/keys", "ipfs://bafybeiemxf5abjwjbikoz4mc3a3dla6ual3jsgpdr4cjr3oz3evfyavhwq"},
		}},
		{"minimal", minimal, &Message{
			Domain: "gw.example.com", Address: addr, URI: "https://gw.example.com", Version: "1", ChainID: 1, Nonce: "abcdefgh",
			IssuedAt: time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC),
		}},
		{"port", strings.Replace(minimal, "gw.example.com wants", "localhost:8402 wants", 1), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMessage(tc.text)
			if err != nil {
				t.Fatalf("ParseMessage(): %v", err)
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
					t.Errorf("ParseMessage() mismatch (-want +got):\n%s", diff)
				}
			}
			// String writes what ParseMessage reads back.
			again, err := ParseMessage(got.String())
			if err != nil {
				t.Fatalf("ParseMessage(String()): %v\n%s", err, got.String())
			}
			if diff := cmp.Diff(got, again, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("round trip mismatch (-first +second):\n%s", diff)
			}
		})
	}
}

func TestParseMessageRejects(t *testing.T) {
	r := func(old, new string) string { return strings.Replace(full, old, new, 1) }
	tests := map[string]string{
		"empty":                  "",
		"crlf":                   strings.ReplaceAll(full, "\n", "\r\n"),
		"trailing newline":       full + "\n",
		"leading space":          " " + full,
		"nul":                    r("Version: 1", "Version: 1\x00"),
		"tab":                    r("Sign in", "Sign\tin"),
		"ftp scheme":             r("https://gw.example.com wants", "ftp://gw.example.com wants"),
		"domain with path":       r("gw.example.com wants", "gw.example.com/x wants"),
		"domain with userinfo":   r("https://gw.example.com wants", "https://a@gw.example.com wants"),
		"domain empty":           r("https://gw.example.com wants", "https:// wants"),
		"bad port":               r("gw.example.com wants", "gw.example.com:99999 wants"),
		"empty port":             r("gw.example.com wants", "gw.example.com: wants"),
		"other header":           r("wants you to sign in with your Ethereum account:", "wants you to sign in:"),
		"lower-case address":     r("0x857b06519E91e3A54538791bDbb0E22373e36b66", "0x857b06519e91e3a54538791bdbb0e22373e36b66"),
		"bad checksum":           r("0x857b06519E91e3A54538791bDbb0E22373e36b66", "0x857b06519E91e3A54538791bDbb0E22373e36B66"),
		"short address":          r("0x857b06519E91e3A54538791bDbb0E22373e36b66", "0x857b06519E91e3A54538791bDbb0E22373e36b6"),
		"no blank after address": r("b66\n\nSign", "b66\nSign"),
		"two statement lines":    r("API keys.", "API keys.\nmore"),
		"no blank before URI":    r("keys.\n\nURI", "keys.\nURI"),
		"relative URI":           r("URI: https://gw.example.com/login", "URI: /login"),
		"URI with space":         r("URI: https://gw.example.com/login", "URI: https://gw.example.com/a b"),
		"version 2":              r("Version: 1", "Version: 2"),
		"chain id zero":          r("Chain ID: 84532", "Chain ID: 0"),
		"chain id leading zero":  r("Chain ID: 84532", "Chain ID: 084532"),
		"chain id hex":           r("Chain ID: 84532", "Chain ID: 0x14a34"),
		"chain id overflow":      r("Chain ID: 84532", "Chain ID: 184467440737095516160"),
		"chain id negative":      r("Chain ID: 84532", "Chain ID: -1"),
		"short nonce":            r("Nonce: abcdefgh12345678", "Nonce: abc"),
		"nonce with dash":        r("Nonce: abcdefgh12345678", "Nonce: abcd-efgh-1234"),
		"bad issued at":          r("Issued At: 2026-11-30T06:00:00.123Z", "Issued At: yesterday"),
		"lower-case z":           r("Issued At: 2026-11-30T06:00:00.123Z", "Issued At: 2026-11-30t06:00:00.123z"),
		"bad expiration":         r("Expiration Time: 2026-11-30T06:10:00Z", "Expiration Time: 2026-13-30T06:10:00Z"),
		"fields out of order":    r("Version: 1\nChain ID: 84532", "Chain ID: 84532\nVersion: 1"),
		"field twice":            r("Version: 1", "Version: 1\nVersion: 1"),
		"missing nonce":          r("Nonce: abcdefgh12345678\n", ""),
		"missing issued at":      r("Issued At: 2026-11-30T06:00:00.123Z\n", ""),
		"empty URI":              r("URI: https://gw.example.com/login", "URI: "),
		"unknown field":          r("Request ID: req-1", "Request ID: req-1\nColor: blue"),
		"request id with space":  r("Request ID: req-1", "Request ID: req 1"),
		"resources empty":        strings.Split(full, "\n- ")[0],
		"resource not a URI":     full + "\n- not a uri",
		"resource no dash":       full + "\nhttps://x.example",
		"over size":              full + "\n- https://x.example/" + strings.Repeat("a", MaxMessageBytes),
		"only header":            "gw.example.com wants you to sign in with your Ethereum account:",
		"utf-8 statement":        r("Sign in", "Sign\u2028in"),
	}
	tests["too many resources"] = full + strings.Repeat("\n- https://x.example", maxResources)
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := ParseMessage(text)
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("ParseMessage() = %+v, %v, want ErrBadMessage", m, err)
			}
			// The error never quotes the message.
			if strings.Contains(err.Error(), "gw.example.com") || strings.Contains(err.Error(), "0x857b") {
				t.Errorf("error quotes the message: %v", err)
			}
		})
	}
}

// FuzzParseMessage: whatever the input, ParseMessage does not panic, and
// what it accepts it writes back (String) to a text it parses to the same
// message.
func FuzzParseMessage(f *testing.F) {
	f.Add(full)
	f.Add(minimal)
	f.Add(strings.ReplaceAll(full, "\n", "\r\n"))
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := ParseMessage(text)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v is not ErrBadMessage", err)
			}
			return
		}
		again, err := ParseMessage(m.String())
		if err != nil {
			t.Fatalf("ParseMessage(String()) of an accepted message: %v\n%q", err, m.String())
		}
		if diff := cmp.Diff(m, again, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
	})
}
