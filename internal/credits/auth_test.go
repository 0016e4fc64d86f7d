package credits

import (
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
)

// newAuth returns an Auth on a fresh store, on a clock at t0.
func newAuth(t *testing.T, logs *logBuffer) (*Auth, *testClock) {
	t.Helper()
	clk := &testClock{now: t0}
	a, err := NewAuth(openStore(t, clk), testOrigin, testChain, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	a.Now = clk.Now
	return a, clk
}

func TestNewAuthRejectsOrigin(t *testing.T) {
	for _, o := range []string{"", "gw.example.com", "ftp://gw.example.com", "https://gw.example.com/path", "https://u@gw.example.com",
		"https://gw.example.com?x=1", "https://", "https://gw.example.com:0"} {
		if _, err := NewAuth(nil, o, 1, nil); err == nil {
			t.Errorf("NewAuth(%q) succeeded", o)
		}
	}
	if _, err := NewAuth(nil, testOrigin, 0, nil); err == nil {
		t.Error("NewAuth(chain 0) succeeded")
	}
}

func TestSignIn(t *testing.T) {
	logs := &logBuffer{}
	a, _ := newAuth(t, logs)
	ctx := t.Context()
	wallet := newWallet(t)
	nonce, exp, err := a.IssueNonce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Equal(t0.Add(NonceTTL)) {
		t.Errorf("nonce expires %v, want %v", exp, t0.Add(NonceTTL))
	}
	text := message(wallet, nonce, t0.Add(-time.Minute)).String()
	sig := personalSign(t, wallet, text)
	token, s, err := a.SignIn(ctx, text, sig)
	if err != nil {
		t.Fatalf("SignIn(): %v", err)
	}
	owner := strings.ToLower(crypto.PubkeyToAddress(wallet.PublicKey).Hex())
	if s.Owner != owner || !s.ExpiresAt.Equal(t0.Add(SessionTTL)) || !strings.HasPrefix(token, SessionPrefix) {
		t.Errorf("SignIn() = %q, %+v", token[:len(SessionPrefix)], s)
	}
	got, err := a.Session(ctx, token)
	if err != nil || got.Owner != owner {
		t.Errorf("Session() = %+v, %v", got, err)
	}
	// The same message again: its nonce is spent.
	if _, _, err := a.SignIn(ctx, text, sig); reason(err) != ReasonNonce {
		t.Errorf("SignIn() replayed = %v, want %s", err, ReasonNonce)
	}
	if err := a.SignOut(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session(ctx, token); !errors.Is(err, ErrNoSession) {
		t.Errorf("Session() after sign-out = %v, want ErrNoSession", err)
	}
	assertNoSecret(t, "log", logs.String(), token, text, "0x"+string(sig))
	for _, bad := range []string{"", "sess-l4a-", token + "a", strings.ToUpper(token), "sk-l4a-" + token[len(SessionPrefix):]} {
		if _, err := a.Session(ctx, bad); !errors.Is(err, ErrNoSession) {
			t.Errorf("Session(%.16q) = %v, want ErrNoSession", bad, err)
		}
	}
}

func reason(err error) Reason {
	if se, ok := errors.AsType[*SignInError](err); ok {
		return se.Reason
	}
	return ""
}

func TestSignInRefuses(t *testing.T) {
	wallet, other := newWallet(t), newWallet(t)
	tests := []struct {
		name  string
		edit  func(m *Message)
		sign  func(t *testing.T, text string) []byte // nil: wallet's personal_sign
		nonce string                                 // "": a freshly issued one
		after time.Duration                          // clock advance before SignIn
		want  Reason
	}{
		{name: "other domain", edit: func(m *Message) { m.Domain = "evil.example.com" }, want: ReasonOrigin},
		{name: "domain with port", edit: func(m *Message) { m.Domain = testHost + ":8443" }, want: ReasonOrigin},
		{name: "other scheme", edit: func(m *Message) { m.Scheme = "http" }, want: ReasonOrigin},
		{name: "URI on other host", edit: func(m *Message) { m.URI = "https://evil.example.com/" }, want: ReasonOrigin},
		{name: "URI on other scheme", edit: func(m *Message) { m.URI = "http://gw.example.com/" }, want: ReasonOrigin},
		{name: "URI with user", edit: func(m *Message) { m.URI = "https://evil@gw.example.com/" }, want: ReasonOrigin},
		{name: "other chain", edit: func(m *Message) { m.ChainID = 1 }, want: ReasonChain},
		{name: "stale", edit: func(m *Message) { m.IssuedAt = t0.Add(-MaxMessageAge - time.Second) }, want: ReasonStale},
		{name: "future", edit: func(m *Message) { m.IssuedAt = t0.Add(MaxClockSkew + time.Second) }, want: ReasonStale},
		{name: "expired", edit: func(m *Message) { m.ExpirationTime = t0 }, want: ReasonExpired},
		{name: "not yet valid", edit: func(m *Message) { m.NotBefore = t0.Add(time.Second) }, want: ReasonExpired},
		{name: "foreign nonce", nonce: "abcdefgh12345678", want: ReasonNonce},
		{name: "nonce expired", after: NonceTTL, edit: func(m *Message) { m.IssuedAt = t0.Add(NonceTTL) }, want: ReasonNonce},
		{name: "wrong signer", sign: func(t *testing.T, text string) []byte { return personalSign(t, other, text) }, want: ReasonSignature},
		{name: "signed other text", sign: func(t *testing.T, text string) []byte { return personalSign(t, wallet, text+" ") }, want: ReasonSignature},
		{name: "raw hash signed, no EIP-191 prefix", sign: func(t *testing.T, text string) []byte {
			sig, err := crypto.Sign(crypto.Keccak256([]byte(text)), wallet)
			if err != nil {
				t.Fatal(err)
			}
			return sig
		}, want: ReasonSignature},
		{name: "short signature", sign: func(t *testing.T, text string) []byte { return personalSign(t, wallet, text)[:64] }, want: ReasonMalformed},
		{name: "high s", sign: func(t *testing.T, text string) []byte {
			sig := personalSign(t, wallet, text)
			n := crypto.S256().Params().N
			s := new(big.Int).SetBytes(sig[32:64])
			s.Sub(n, s).FillBytes(sig[32:64])
			sig[64] ^= 1
			return sig
		}, want: ReasonMalformed},
		{name: "v 29", sign: func(t *testing.T, text string) []byte {
			sig := personalSign(t, wallet, text)
			sig[64] = 29
			return sig
		}, want: ReasonMalformed},
		{name: "zero signature", sign: func(*testing.T, string) []byte { return make([]byte, 65) }, want: ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			a, clk := newAuth(t, logs)
			ctx := t.Context()
			nonce := tc.nonce
			if nonce == "" {
				var err error
				if nonce, _, err = a.IssueNonce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			m := message(wallet, nonce, t0)
			if tc.edit != nil {
				tc.edit(m)
			}
			text := m.String()
			sig := personalSign(t, wallet, text)
			if tc.sign != nil {
				sig = tc.sign(t, text)
			}
			clk.Advance(tc.after)
			token, _, err := a.SignIn(ctx, text, sig)
			if got := reason(err); got != tc.want || token != "" {
				t.Fatalf("SignIn() = %q, %v, want reason %s", token, err, tc.want)
			}
			assertNoSecret(t, "error", err.Error(), text, string(sig), nonce)
			assertNoSecret(t, "log", logs.String(), text, nonce)
			if tc.nonce == "" && tc.after == 0 && tc.want != ReasonNonce {
				// A refused sign-in does not burn the nonce.
				good := message(wallet, nonce, t0).String()
				if _, _, err := a.SignIn(ctx, good, personalSign(t, wallet, good)); err != nil {
					t.Errorf("SignIn() with the nonce after a refusal: %v", err)
				}
			}
		})
	}
	t.Run("malformed", func(t *testing.T) {
		a, _ := newAuth(t, &logBuffer{})
		if _, _, err := a.SignIn(t.Context(), "hello", make([]byte, 65)); reason(err) != ReasonMalformed {
			t.Errorf("SignIn(garbage) = %v, want %s", err, ReasonMalformed)
		}
	})
}

// TestSignInRace: many sign-ins quoting one nonce, concurrently; exactly one
// gets a session.
func TestSignInRace(t *testing.T) {
	a, _ := newAuth(t, &logBuffer{})
	ctx := t.Context()
	wallet := newWallet(t)
	nonce, _, err := a.IssueNonce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	text := message(wallet, nonce, t0).String()
	sig := personalSign(t, wallet, text)
	const n = 16
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, _, err := a.SignIn(ctx, text, sig)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case reason(err) != ReasonNonce:
			t.Errorf("SignIn() = %v, want success or %s", err, ReasonNonce)
		}
	}
	if won != 1 {
		t.Errorf("%d sign-ins succeeded with one nonce, want 1", won)
	}
}
