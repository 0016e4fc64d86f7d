package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402"
)

// declared is a 402's extensions declaring payment-identifier, optional.
var declared = map[string]json.RawMessage{x402.ExtensionPaymentID: x402.PaymentIDDeclaration(false)}

// journals runs a test against each Journal implementation.
func journals(t *testing.T, f func(t *testing.T, newJournal func(now func() time.Time) client.Journal)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(now func() time.Time) client.Journal { return &client.MemoryJournal{Now: now} })
	})
	t.Run("file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "journal")
		f(t, func(now func() time.Time) client.Journal {
			j, err := client.NewFileJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			j.Now = now
			return j
		})
	})
}

// TestJournalSemantics: both journals claim, record and complete entries as
// the Journal interface says.
func TestJournalSemantics(t *testing.T) {
	journals(t, func(t *testing.T, newJournal func(func() time.Time) client.Journal) {
		ctx := t.Context()
		now := testNow
		j := newJournal(func() time.Time { return now })
		entry := func(key string) *client.JournalEntry {
			return &client.JournalEntry{Key: key, ID: client.Secret(x402.NewPaymentID()), Method: "POST", Resource: "http://x/y", Fingerprint: "fp-" + key}
		}
		sign := func(e *client.JournalEntry) {
			t.Helper()
			e.Header = client.Secret(signedHeader(t, e.ID.Reveal()))
			e.Requirements = offer(price)
			e.ValidBefore = now.Add(time.Minute)
			if err := j.Signed(ctx, e); err != nil {
				t.Fatalf("Signed: %v", err)
			}
		}

		// Two calls in flight with one key are two entries.
		a, b := entry("k"), entry("k")
		aID, bID := a.ID, b.ID
		for _, e := range []*client.JournalEntry{a, b} {
			if err := j.Begin(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if a.Slot != 0 || b.Slot != 1 || a.ID != aID || b.ID != bID || !a.Created.Equal(testNow) {
			t.Fatalf("slots %d, %d; ids kept %v, %v; created %v", a.Slot, b.Slot, a.ID == aID, b.ID == bID, a.Created)
		}
		sign(a)
		sign(b)
		// a's answer was lost: it stays open. b was paid: it is complete.
		a.Outcome, a.Sends = client.OutcomeUnknown, 1
		if err := j.Finish(ctx, a, client.OutcomeUnknown); err != nil {
			t.Fatal(err)
		}
		b.Sends = 1
		if err := j.Finish(ctx, b, client.OutcomePaid); err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(ctx, b, client.OutcomePaid); !errors.Is(err, client.ErrJournalNotHeld) {
			t.Errorf("second Finish = %v, want ErrJournalNotHeld", err)
		}

		// A retry with the key resumes a, whole.
		retry := entry("k")
		if err := j.Begin(ctx, retry); err != nil {
			t.Fatal(err)
		}
		want := *a
		opts := cmp.Options{cmp.Comparer(func(x, y time.Time) bool { return x.Equal(y) })}
		if diff := cmp.Diff(want, *retry, opts); diff != "" {
			t.Errorf("resumed entry (-want +got):\n%s", diff)
		}
		// While it is held, an identical call is a new entry in b's old slot.
		c := entry("k")
		if err := j.Begin(ctx, c); err != nil {
			t.Fatal(err)
		}
		if c.Slot != 1 || c.Header != "" {
			t.Errorf("new entry slot %d header %v, want slot 1 without header", c.Slot, c.Header != "")
		}
		// An unsigned entry is dropped at Finish: nothing was signed.
		if err := j.Finish(ctx, c, client.OutcomeNotPaid); err != nil {
			t.Fatal(err)
		}
		// Paid: complete; the next call with the key is new.
		if err := j.Finish(ctx, retry, client.OutcomePaid); err != nil {
			t.Fatal(err)
		}
		fresh := entry("k")
		if err := j.Begin(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		if fresh.Slot != 0 || fresh.Header != "" || fresh.ID == aID {
			t.Errorf("after completion: slot %d, header %v, same id %v; want a new call", fresh.Slot, fresh.Header != "", fresh.ID == aID)
		}
		if err := j.Finish(ctx, fresh, client.OutcomeUnknown); err != nil {
			t.Fatal(err)
		}

		// Signed or Finish without Begin.
		stray := entry("other")
		if err := j.Signed(ctx, stray); !errors.Is(err, client.ErrJournalNotHeld) {
			t.Errorf("Signed without Begin = %v", err)
		}

		// An open entry whose authorization expired long ago is forgotten.
		old := entry("old")
		if err := j.Begin(ctx, old); err != nil {
			t.Fatal(err)
		}
		sign(old)
		if err := j.Finish(ctx, old, client.OutcomeUnknown); err != nil {
			t.Fatal(err)
		}
		now = now.Add(client.DefaultJournalMaxAge - time.Hour)
		again := entry("old")
		if err := j.Begin(ctx, again); err != nil || again.Header == "" {
			t.Fatalf("before MaxAge: resumed %v, %v", again.Header != "", err)
		}
		if err := j.Finish(ctx, again, client.OutcomeUnknown); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2 * time.Hour)
		gone := entry("old")
		if err := j.Begin(ctx, gone); err != nil || gone.Header != "" {
			t.Fatalf("after MaxAge: resumed %v, %v; want a new entry", gone.Header != "", err)
		}
	})
}

// signedHeader is a PAYMENT-SIGNATURE value carrying id, signed for offer(price).
func signedHeader(tb testing.TB, id string) string {
	tb.Helper()
	srv := newServer(tb, offer(price))
	srv.extensions = declared
	tr, _ := newTransport(tb, policy(1), srv)
	if _, err := send(tb, tr, srv.URL("/paid"), request{}); err != nil {
		tb.Fatal(err)
	}
	paid := srv.paidRequests()
	if len(paid) != 1 {
		tb.Fatalf("%d paid requests", len(paid))
	}
	p, err := x402.DecodePaymentPayload(paid[0].Payment)
	if err != nil {
		tb.Fatal(err)
	}
	ext, err := x402.AppendPaymentID(declared, id)
	if err != nil {
		tb.Fatal(err)
	}
	if p.Extensions, err = x402.Marshal(ext); err != nil {
		tb.Fatal(err)
	}
	h, err := x402.EncodeHeader(p)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// crashJournal stands for a process that dies at a point of a payment: from
// the crash on, it records nothing more.
type crashJournal struct {
	client.Journal
	at      string // "signed": after the payment is recorded; "begin": before it is signed
	crashed bool
	header  string // the payment recorded before the crash
	id      string
}

var errCrash = errors.New("the process died here")

func (j *crashJournal) Begin(ctx context.Context, e *client.JournalEntry) error {
	if err := j.Journal.Begin(ctx, e); err != nil {
		return err
	}
	j.id = e.ID.Reveal()
	return nil
}

func (j *crashJournal) Signed(ctx context.Context, e *client.JournalEntry) error {
	if j.at == "begin" {
		j.crashed = true
		return errCrash // dies before the payment reaches the disk
	}
	if err := j.Journal.Signed(ctx, e); err != nil {
		return err
	}
	j.header, j.crashed = e.Header.Reveal(), true
	return errCrash // dies before sending
}

func (j *crashJournal) Finish(ctx context.Context, e *client.JournalEntry, o client.Outcome) error {
	if j.crashed {
		return nil // a dead process finishes nothing
	}
	return j.Journal.Finish(ctx, e, o)
}

// TestFileJournalCrash: a retry after a client crash, by a new Transport on the
// same directory, sends the payment recorded before the crash instead of
// signing another (D26).
func TestFileJournalCrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		// crash makes the first process die; it returns the header and id the
		// retry must send (header "" when nothing was signed yet).
		crash func(t *testing.T, srv *server, dir string) (header, id string)
	}{
		{
			name: "answer lost after sending",
			crash: func(t *testing.T, srv *server, dir string) (string, string) {
				srv.script = []afterPay{paidHangUp}
				tr, _ := newTransport(t, policy(10), srv)
				tr.Journal = openJournal(t, dir)
				tr.Retry.MaxAttempts = 1
				if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); err == nil {
					t.Fatal("first call succeeded")
				}
				paid := srv.paidRequests()
				if len(paid) == 0 {
					t.Fatal("nothing paid before the crash")
				}
				return paid[0].Payment, paid[0].ID
			},
		},
		{
			name: "crash after recording, before sending",
			crash: func(t *testing.T, srv *server, dir string) (string, string) {
				tr, _ := newTransport(t, policy(10), srv)
				cj := &crashJournal{Journal: openJournal(t, dir), at: "signed"}
				tr.Journal = cj
				if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); !errors.Is(err, errCrash) {
					t.Fatalf("first call: %v", err)
				}
				if paid := srv.paidRequests(); len(paid) != 0 {
					t.Fatalf("%d payments sent before the crash", len(paid))
				}
				return cj.header, cj.id
			},
		},
		{
			name: "crash before signing",
			crash: func(t *testing.T, srv *server, dir string) (string, string) {
				tr, _ := newTransport(t, policy(10), srv)
				cj := &crashJournal{Journal: openJournal(t, dir), at: "begin"}
				tr.Journal = cj
				if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); !errors.Is(err, errCrash) {
					t.Fatalf("first call: %v", err)
				}
				return "", cj.id
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			srv := newServer(t, offer(price))
			srv.extensions = declared
			header, id := tc.crash(t, srv, dir)
			if err := x402.ValidPaymentID(id); err != nil {
				t.Fatalf("id before the crash: %v", err)
			}

			// The restarted process: a new journal and Transport on the dir.
			tr, _ := newTransport(t, policy(10), srv)
			tr.Journal = openJournal(t, dir)
			rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			if err != nil || rep.resp.StatusCode != 200 {
				t.Fatalf("retry after the crash: %v", err)
			}
			paid := srv.paidRequests()
			last := paid[len(paid)-1]
			if header != "" && last.Payment != header {
				t.Error("the retry signed a new payment instead of sending the recorded one")
			}
			if last.ID != id {
				t.Errorf("the retry's payment id differs from the one recorded before the crash")
			}
			if _, nonces := srv.snapshot(); len(nonces) != 1 {
				t.Errorf("server received %d distinct payments, want 1", len(nonces))
			}
			checkLedger(t, tr, price, 9*price)
			if n := journalFiles(t, dir); n != 0 {
				t.Errorf("%d journal files after the call completed, want 0", n)
			}

			// Complete: the same request again is a new call, a new payment.
			if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); err != nil {
				t.Fatal(err)
			}
			paid = srv.paidRequests()
			if next := paid[len(paid)-1]; next.Nonce == last.Nonce || next.ID == last.ID {
				t.Error("a new call after completion reused the previous payment or id")
			}
		})
	}
}

func openJournal(tb testing.TB, dir string) *client.FileJournal {
	tb.Helper()
	j, err := client.NewFileJournal(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return j
}

// journalFiles counts the entry files in dir and checks their modes.
func journalFiles(tb testing.TB, dir string) int {
	tb.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		tb.Errorf("journal dir mode %#o, want 0700", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			tb.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			tb.Errorf("journal file %s mode %#o, want 0600", e.Name(), info.Mode().Perm())
		}
	}
	return len(entries)
}

// TestFileJournalCorrupt: a damaged entry stops its call with a clear error:
// no panic, nothing signed, nothing sent, no secret in the error.
func TestFileJournalCorrupt(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"one byte short", func(b []byte) []byte { return b[:len(b)-1] }},
		{"garbage", func([]byte) []byte { return []byte("\x00\xff garbage \xfe") }},
		{"not an object", func([]byte) []byte { return []byte(`[1,2,3]`) }},
		{"trailing data", func(b []byte) []byte { return append(b, []byte(` {}`)...) }},
		{"unknown field", func(b []byte) []byte { return []byte(strings.Replace(string(b), `{`, `{"extra":1,`, 1)) }},
		{"duplicate key", func(b []byte) []byte { return []byte(strings.Replace(string(b), `{`, `{"version":1,`, 1)) }},
		{"other version", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"version":1`, `"version":2`, 1)) }},
		{"other key", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"key":"`, `"key":"x`, 1)) }},
		{"other slot", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"slot":0`, `"slot":1`, 1)) }},
		{"bad id", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"id":"pay_`, `"id":"pay_é`, 1)) }},
		{"id of another call", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"id":"pay_`, `"id":"pay_0`, 1))
		}},
		{"header garbage", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"header":"`, `"header":"%%`, 1)) }},
		{"header without requirements", func(b []byte) []byte {
			s := string(b)
			i, j := strings.Index(s, `"requirements":`), strings.Index(s, `"header":`)
			return []byte(s[:i] + s[j:])
		}},
		{"outcome paid", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"outcome":"unknown"`, `"outcome":"paid"`, 1))
		}},
		{"deeply nested", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `{`, `{"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`,`, 1))
		}},
		{"huge", func(b []byte) []byte { return append(b, make([]byte, 1<<20)...) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			srv := newServer(t, offer(price))
			srv.extensions = declared
			// A first process records a payment and dies before sending it.
			tr, _ := newTransport(t, policy(10), srv)
			cj := &crashJournal{Journal: openJournal(t, dir), at: "signed"}
			tr.Journal = cj
			if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			names, err := filepath.Glob(filepath.Join(dir, "*.json"))
			if err != nil || len(names) != 1 {
				t.Fatalf("journal files %v, %v", names, err)
			}
			b, err := os.ReadFile(names[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(names[0], tc.corrupt(b), 0o600); err != nil {
				t.Fatal(err)
			}

			tr2, _ := newTransport(t, policy(10), srv)
			tr2.Journal = openJournal(t, dir)
			before := len(srv.paidRequests())
			_, err = send(t, tr2, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			if !errors.Is(err, client.ErrJournalCorrupt) {
				t.Fatalf("error = %v, want ErrJournalCorrupt", err)
			}
			if n := len(srv.paidRequests()); n != before {
				t.Errorf("%d payments sent despite the corrupt journal", n-before)
			}
			checkErrorClean(t, err, srv)
			for _, s := range []string{cj.header, cj.id} {
				if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v", err), s) {
					t.Errorf("error quotes the journal's secrets: %v", err)
				}
			}
			if !strings.Contains(err.Error(), names[0]) {
				t.Errorf("error %q does not name the file", err)
			}
			checkLedger(t, tr2, 0, 10*price)
		})
	}
}

// TestNewFileJournal: the directory is private; a shared one is refused.
func TestNewFileJournal(t *testing.T) {
	base := t.TempDir()
	if _, err := client.NewFileJournal(""); err == nil {
		t.Error("empty dir accepted")
	}
	dir := filepath.Join(base, "a", "b")
	if _, err := client.NewFileJournal(dir); err != nil {
		t.Fatal(err)
	}
	if n := journalFiles(t, dir); n != 0 {
		t.Errorf("%d files in a new journal", n)
	}
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if _, err := client.NewFileJournal(shared); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Errorf("NewFileJournal(0755 dir) = %v, want a refusal naming 0700", err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewFileJournal(file); err == nil {
		t.Error("a file accepted as journal directory")
	}
	// A temporary file left by a crashed write is removed.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewFileJournal(dir); err != nil {
		t.Fatal(err)
	}
	if n := journalFiles(t, dir); n != 0 {
		t.Errorf("%d files after reopening, want the temporary file gone", n)
	}
}

// TestFileJournalEmptyMethod: a request with Method "" (GET to net/http) is
// recorded as GET, so its entry reads back after a crash.
func TestFileJournalEmptyMethod(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	srv := newServer(t, offer(price))
	srv.script = []afterPay{paidHangUp, paidOK}
	for i := range 2 {
		tr, _ := newTransport(t, policy(10), srv)
		tr.Journal, tr.Retry.MaxAttempts = openJournal(t, dir), 1
		noReuse(t, tr)
		req, err := http.NewRequestWithContext(t.Context(), "", srv.URL("/paid"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Method = ""
		resp, err := tr.RoundTrip(req)
		if (err == nil) != (i == 1) {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp != nil {
			_ = resp.Body.Close()
		}
	}
	if paid := sameSends(t, srv, ""); len(paid) != 2 {
		t.Errorf("%d sends, want 2 of one payment", len(paid))
	}
}
