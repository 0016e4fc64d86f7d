package client_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
)

func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestSecretsNeverLeak: the Transport runs through success, every
// failure path, refusals, retries and journal faults with one debug-level
// log; no payment header, signature, payment-identifier id, SIGN-IN-WITH-X
// value (the caller's or one the Transport minted), API key (in a header or the URL's query) or private key appears in
// the log, nor in any error RoundTrip returns, printed with %v, %+v or %#v.
func TestSecretsNeverLeak(t *testing.T) {
	bearer := "sk-l4a-" + randomHex(t, 24)
	siwx := base64.StdEncoding.EncodeToString([]byte(`{"signature":"0x` + randomHex(t, 65) + `"}`))
	callerPayment := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"secret":"` + randomHex(t, 32) + `"}`))
	secretHeaders := map[string]string{"Authorization": "Bearer " + bearer, "Sign-In-With-X": siwx}

	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var servers []*server
	var errs []error
	var journalSecrets []string

	// call sends one request through a fresh Transport on a fresh server set
	// up by prep, and keeps the error.
	call := func(t *testing.T, prep func(srv *server, tr *client.Transport), r request) {
		t.Helper()
		srv := newServer(t, offer(price))
		srv.extensions = declared
		servers = append(servers, srv)
		tr, _ := newTransport(t, policy(10), srv)
		tr.Log = logger
		if prep != nil {
			prep(srv, tr)
		}
		if r.header == nil {
			r.header = map[string]string{}
		}
		maps.Copy(r.header, secretHeaders)
		if r.method == "" {
			r.method, r.body = http.MethodPost, chatBody
		}
		_, err := send(t, tr, srv.URL("/v1/chat/completions?key="+bearer), r)
		if err != nil {
			errs = append(errs, err)
		}
	}

	for _, after := range []afterPay{paidOK, paidNoSettleHeader, paidGarbageSettle, paid402Again, paidSettleFailed, paidSettlePending, paidHandler500, paidHangUp, paidInUse, paidConflict} {
		t.Run(fmt.Sprintf("after %d", after), func(t *testing.T) {
			call(t, func(srv *server, _ *client.Transport) { srv.after = after }, request{})
		})
	}
	t.Run("retries", func(t *testing.T) {
		call(t, func(srv *server, _ *client.Transport) {
			srv.script = []afterPay{paidHangUp, paidSettlePending, paidInUse, paidOK}
		}, request{})
	})
	t.Run("retry of a call, same payment", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.extensions = declared
		srv.script = []afterPay{paidHangUp, paidOK}
		servers = append(servers, srv)
		tr, _ := newTransport(t, policy(10), srv)
		tr.Log, tr.Retry.MaxAttempts = logger, 1
		for range 2 {
			if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody, header: secretHeaders}); err != nil {
				errs = append(errs, err)
			}
		}
	})
	t.Run("cancelled while waiting to retry", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.after = paidInUse
		servers = append(servers, srv)
		tr, _ := newTransport(t, policy(10), srv)
		tr.Log, tr.Retry = logger, client.RetryPolicy{MaxWait: time.Minute}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL("/paid"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+bearer)
		if resp, err := (&http.Client{Transport: tr}).Do(req); err != nil {
			errs = append(errs, err)
		} else {
			_ = resp.Body.Close()
		}
	})
	t.Run("refusals", func(t *testing.T) {
		garbage := "%%%" + bearer
		call(t, func(srv *server, _ *client.Transport) { srv.accepts = []x402.PaymentRequirements{offer(2 * price)} }, request{})
		call(t, func(srv *server, _ *client.Transport) { srv.required = &garbage }, request{})
		call(t, nil, request{header: map[string]string{"Payment-Signature": callerPayment}})
		call(t, func(_ *server, tr *client.Transport) { tr.Signer = nil }, request{})
		call(t, func(_ *server, tr *client.Transport) { tr.Policy = client.Policy{} }, request{})
		call(t, func(_ *server, tr *client.Transport) { tr.MaxReplayBody = 8 }, request{method: http.MethodPost, body: chatBody, noGetBod: true})
	})
	t.Run("idempotency key reused", func(t *testing.T) {
		srv := newServer(t, offer(price))
		srv.extensions = declared
		srv.script = []afterPay{paidHangUp}
		servers = append(servers, srv)
		tr, _ := newTransport(t, policy(10), srv)
		tr.Log, tr.Retry.MaxAttempts = logger, 1
		noReuse(t, tr)
		for _, body := range []string{chatBody, strings.Replace(chatBody, "hi", "bye", 1)} {
			h := map[string]string{"Idempotency-Key": "k", "Authorization": "Bearer " + bearer}
			if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: body, header: h}); err != nil {
				errs = append(errs, err)
			}
		}
	})
	t.Run("journal faults", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "j")
		var cj *crashJournal
		call(t, func(_ *server, tr *client.Transport) {
			cj = &crashJournal{Journal: openJournal(t, dir), at: "signed"}
			tr.Journal = cj
		}, request{})
		journalSecrets = append(journalSecrets, cj.header, cj.id)
		names, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil || len(names) != 1 {
			t.Fatalf("journal files %v, %v", names, err)
		}
		b, err := os.ReadFile(names[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(names[0], b[:len(b)-10], 0o600); err != nil {
			t.Fatal(err)
		}
		call(t, func(_ *server, tr *client.Transport) { tr.Journal = openJournal(t, dir) }, request{})
		call(t, func(_ *server, tr *client.Transport) { tr.Journal = &recordingJournal{fail: "begin"} }, request{})
		call(t, func(_ *server, tr *client.Transport) { tr.Journal = &recordingJournal{fail: "signed"} }, request{})
	})
	t.Run("sign-in-with-x", func(t *testing.T) {
		// Minted proofs: one let in, one refused and then paid, one answered
		// with a redirect to another origin, which must not see it.
		other := newServer(t)
		other.free = true
		servers = append(servers, other)
		for _, signedIn := range []bool{true, false, true} {
			srv := newServer(t, offer(price))
			srv.extensions = declared
			srv.siwx, srv.signedIn = siwxOffer(nil), map[string]bool{buyer: signedIn}
			if len(servers)%2 == 0 {
				srv.signInRedirect = other.URL("/landing")
			}
			servers = append(servers, srv)
			tr, _ := newTransport(t, policy(10), srv)
			tr.Log, tr.SignInWithX = logger, true
			h := map[string]string{"Authorization": "Bearer " + bearer}
			if _, err := send(t, tr, srv.URL("/v1/chat/completions?key="+bearer), request{method: http.MethodPost, body: chatBody, header: h}); err != nil {
				errs = append(errs, err)
			}
			if len(srv.proofs) != 1 {
				t.Errorf("%d proofs minted, want 1", len(srv.proofs))
			}
		}
		if r, _ := other.snapshot(); len(r) > 0 && r[0].SignIn != "" {
			t.Error("the other origin saw a sign-in")
		}
		if !strings.Contains(logs.String(), "signing in with the wallet") {
			t.Error("the log lacks the sign-in lines")
		}
	})
	t.Run("cross-origin redirect", func(t *testing.T) {
		other := newServer(t)
		other.free = true
		servers = append(servers, other)
		call(t, func(srv *server, _ *client.Transport) {
			srv.after, srv.redirectTo = paidRedirect, other.URL("/landing")
		}, request{})
		if r, _ := other.snapshot(); len(r) != 1 || r[0].SignIn != "" || r[0].Payment != "" {
			t.Errorf("the other origin saw %+v, want no sign-in or payment header", r)
		}
	})

	secrets := []string{bearer, siwx, callerPayment, hex.EncodeToString(crypto.FromECDSA(testchain.DevKey(0)))}
	secrets = append(secrets, journalSecrets...)
	for _, s := range servers {
		secrets = append(secrets, s.secrets()...)
	}
	ids := 0
	for _, s := range servers {
		ids += len(s.ids)
	}
	if ids < 10 || len(errs) < 10 {
		t.Fatalf("the scenarios produced %d ids and %d errors: too few to test anything", ids, len(errs))
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"paying"`) || !strings.Contains(out, "retrying") {
		t.Fatal("the log lacks the payment lines: nothing was logged")
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(out, s) {
			t.Errorf("log contains a secret: %.24s...", s)
		}
		for _, err := range errs {
			// net/http's *url.Error around ours quotes the whole URL, query
			// included (it is the caller's URL); what this package returns
			// is inside it.
			if ue, ok := errors.AsType[*url.Error](err); ok {
				err = ue.Err
			}
			for _, f := range []string{"%v", "%+v", "%#v"} {
				if strings.Contains(fmt.Sprintf(f, err), s) {
					t.Errorf("error printed with %s contains a secret %.24s...: %.200v", f, s, err)
				}
			}
		}
	}
}

// TestRedirectKeepsSignInOnOrigin: a SIGN-IN-WITH-X header
// reaches only the origin it was made for, on every hop of a redirect chain,
// whether the Transport pays or not.
func TestRedirectKeepsSignInOnOrigin(t *testing.T) {
	other := newServer(t)
	other.free = true
	srv := newServer(t, offer(price))
	srv.after, srv.redirectTo = paidRedirect, other.URL("/landing")
	tr, _ := newTransport(t, policy(10), srv, other)
	_, err := send(t, tr, srv.URL("/paid"), request{header: map[string]string{"Sign-In-With-X": "siwx-for-srv"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.paidRequests() {
		if r.SignIn != "siwx-for-srv" {
			t.Errorf("the origin lost its sign-in header: %+v", r)
		}
	}
	if r, _ := other.snapshot(); len(r) != 1 || r[0].SignIn != "" || r[0].Payment != "" {
		t.Errorf("the other origin saw %+v, want no sign-in or payment header", r)
	}
	checkLedger(t, tr, price, 9*price)
}
