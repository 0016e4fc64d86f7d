package client_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/llm4agents/llm4agents/client"
)

// BenchmarkPaidCall measures one paid call through the Transport against the
// fake server (402, sign, journal, paid answer), with each journal: the cost
// the retry safety adds is the journal's.
func BenchmarkPaidCall(b *testing.B) {
	for _, tc := range []struct {
		name    string
		journal func(b *testing.B) client.Journal
	}{
		{"memory", func(*testing.B) client.Journal { return nil }},
		{"file", func(b *testing.B) client.Journal { return openJournal(b, filepath.Join(b.TempDir(), "j")) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := newServer(b, offer(1))
			srv.extensions = declared
			tr, _ := newTransport(b, policy(1), srv)
			tr.Policy.Budget.SetInt64(1 << 62)
			tr.Journal = tc.journal(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := send(b, tr, srv.URL("/v1/chat/completions"), request{method: http.MethodPost, body: chatBody}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
