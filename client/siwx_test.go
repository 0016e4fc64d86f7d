package client_test

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
)

// buyer is the address of dev key 0, the Transport's signer in these tests.
var buyer = strings.ToLower(testchain.DevAddress(0).Hex())

// siwxOffer is the official server's sign-in-with-x declaration for r, with edit applied to its info first.
func siwxOffer(edit func(info map[string]any, ext map[string]any)) func(*http.Request, string) json.RawMessage {
	return func(r *http.Request, nonce string) json.RawMessage {
		info := map[string]any{
			"domain": r.Host, "uri": "http://" + r.Host + r.URL.Path, "version": "1", "nonce": nonce,
			"issuedAt": "2027-01-15T08:00:00.000Z", "expirationTime": "2027-01-15T08:05:00.000Z",
			"statement": "Sign in to access the data you paid for", "resources": []string{"http://" + r.Host + r.URL.Path},
		}
		ext := map[string]any{
			"info": info,
			"supportedChains": []map[string]string{
				{"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"},
				{"chainId": network, "type": "eip191"},
			},
			"schema": map[string]any{"type": "object"},
		}
		if edit != nil {
			edit(info, ext)
		}
		b, err := json.Marshal(ext)
		if err != nil {
			panic(err)
		}
		return b
	}
}

func (s *server) snapshotRequests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.requests...)
}

// acceptSignIn checks a SIGN-IN-WITH-X proof as the official server does:
// domain and uri on this origin, a nonce it issued and not used, the EIP-4361 text rebuilt from the echo and signed by address.
func (s *server) acceptSignIn(r *http.Request, proof string) bool {
	s.mu.Lock()
	s.proofs = append(s.proofs, proof)
	s.mu.Unlock()
	addr, nonce, err := verifySIWX(proof, r.Host)
	if err != nil {
		s.tb.Errorf("server: the Transport sent a sign-in that does not verify: %v", err)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.issued[nonce] {
		s.tb.Errorf("server: sign-in with a nonce not issued or already used")
		return false
	}
	delete(s.issued, nonce)
	if !s.signedIn[strings.ToLower(addr.Hex())] {
		return false
	}
	s.grants++
	return true
}

// verifySIWX rebuilds the signed text from a proof, by the sign-in-with-x
// extension's layout, written out here independently of the client, and
// recovers who signed it.
func verifySIWX(proof, host string) (common.Address, string, error) {
	b, err := base64.StdEncoding.DecodeString(proof)
	if err != nil {
		return common.Address{}, "", err
	}
	var p struct {
		Domain, URI, Version, Nonce, IssuedAt, Statement, ExpirationTime, NotBefore, RequestID string
		Resources                                                                              []string
		Address, ChainID, Type, Signature                                                      string
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return common.Address{}, "", err
	}
	if p.Domain != host || !strings.HasPrefix(p.URI, "http://"+host+"/") || p.Type != "eip191" || p.ChainID != network {
		return common.Address{}, "", fmt.Errorf("proof for %s %s %s %s", p.Domain, p.URI, p.Type, p.ChainID)
	}
	text := p.Domain + " wants you to sign in with your Ethereum account:\n" + p.Address + "\n\n"
	if p.Statement != "" {
		text += p.Statement + "\n"
	}
	text += "\nURI: " + p.URI + "\nVersion: " + p.Version + "\nChain ID: 1337\nNonce: " + p.Nonce + "\nIssued At: " + p.IssuedAt
	if p.ExpirationTime != "" {
		text += "\nExpiration Time: " + p.ExpirationTime
	}
	if len(p.Resources) > 0 {
		text += "\nResources:"
		for _, r := range p.Resources {
			text += "\n- " + r
		}
	}
	sig, err := hex.DecodeString(strings.TrimPrefix(p.Signature, "0x"))
	if err != nil || len(sig) != 65 || sig[64] < 27 {
		return common.Address{}, "", errors.New("signature is not 65 bytes with v 27 or 28")
	}
	sig[64] -= 27
	pub, err := crypto.SigToPub(accounts.TextHash([]byte(text)), sig)
	if err != nil {
		return common.Address{}, "", err
	}
	got := crypto.PubkeyToAddress(*pub)
	if got.Hex() != p.Address {
		return common.Address{}, "", fmt.Errorf("signed by %s, proof says %s", got.Hex(), p.Address)
	}
	return got, p.Nonce, nil
}

// TestSIWXSignsInWithoutPaying: a 402 offering sign-in-with-x to a wallet
// that already paid is answered with a proof and nothing is paid; each
// request gets a proof of its own (a fresh nonce, never reused).
func TestSIWXSignsInWithoutPaying(t *testing.T) {
	srv := newServer(t, offer(price))
	srv.siwx, srv.signedIn = siwxOffer(nil), map[string]bool{buyer: true}
	tr, _ := newTransport(t, policy(10), srv)
	tr.SignInWithX = true
	for range 3 {
		got, err := send(t, tr, srv.URL("/report"), request{})
		checkErrorClean(t, err, srv)
		if err != nil {
			t.Fatal(err)
		}
		if got.resp.StatusCode != http.StatusOK || got.body != "signed in" {
			t.Fatalf("answer %d %q, want 200 signed in", got.resp.StatusCode, got.body)
		}
		if got.resp.Request.Header.Get(x402.HeaderSignInWithX) != "" {
			t.Error("the response's request carries the proof")
		}
	}
	reqs, paid := srv.snapshot()
	if len(paid) != 0 || srv.grants != 3 {
		t.Errorf("paid %v with %d grants, want nothing paid and 3 grants", paid, srv.grants)
	}
	seenProofs := map[string]bool{}
	for _, r := range reqs {
		if r.SignIn != "" {
			if seenProofs[r.SignIn] {
				t.Error("a proof was sent twice")
			}
			seenProofs[r.SignIn] = true
		}
	}
	if len(seenProofs) != 3 {
		t.Errorf("%d distinct proofs, want 3", len(seenProofs))
	}
	checkLedger(t, tr, 0, 10*price)
}

// TestSIWXThenPays: when the server still answers 402 to the proof (the
// wallet never paid), the Transport pays, and the paid request carries no
// proof. Without SignInWithX no proof is ever sent.
func TestSIWXThenPays(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("SignInWithX=%v", on), func(t *testing.T) {
			srv := newServer(t, offer(price))
			srv.siwx, srv.signedIn = siwxOffer(nil), map[string]bool{}
			tr, _ := newTransport(t, policy(10), srv)
			tr.SignInWithX = on
			got, err := send(t, tr, srv.URL("/report"), request{method: http.MethodPost, body: chatBody})
			if err != nil {
				t.Fatal(err)
			}
			if got.resp.StatusCode != http.StatusOK || got.body != "paid" {
				t.Fatalf("answer %d %q, want 200 paid", got.resp.StatusCode, got.body)
			}
			reqs, paid := srv.snapshot()
			if len(paid) != 1 {
				t.Errorf("%d payments, want 1", len(paid))
			}
			proofs := 0
			for _, r := range reqs {
				if r.SignIn != "" {
					proofs++
					if r.Body != chatBody {
						t.Errorf("the sign-in request had body %q", r.Body)
					}
				}
				if r.SignIn != "" && r.Payment != "" {
					t.Error("a paid request carries a proof")
				}
			}
			if want := map[bool]int{true: 1, false: 0}[on]; proofs != want {
				t.Errorf("%d proofs sent, want %d", proofs, want)
			}
			checkLedger(t, tr, price, 9*price)
		})
	}
}

// TestSIWXRefusesHostileOffers: an offer for another origin, or one whose
// fields would change the lines of the signed text, or one for no chain a
// key can sign on, gets no proof: the Transport pays as if it were absent.
func TestSIWXRefusesHostileOffers(t *testing.T) {
	tests := []struct {
		name string
		edit func(info, ext map[string]any)
	}{
		{"domain of another site", func(info, _ map[string]any) { info["domain"] = "bank.example" }},
		{"domain without the port", func(info, _ map[string]any) { info["domain"] = "127.0.0.1" }},
		{"uri on another origin", func(info, _ map[string]any) { info["uri"] = "https://bank.example/login" }},
		{"uri on another scheme", func(info, _ map[string]any) {
			info["uri"] = strings.Replace(info["uri"].(string), "http://", "https://", 1)
		}},
		{"a resource on another origin", func(info, _ map[string]any) { info["resources"] = []string{"https://bank.example/"} }},
		{"statement with a forged line", func(info, _ map[string]any) {
			info["statement"] = "hi\n\nURI: https://bank.example/\nVersion: 1"
		}},
		{"statement that reads as URI", func(info, _ map[string]any) { info["statement"] = "URI: https://bank.example/" }},
		{"nonce with a line break", func(info, _ map[string]any) { info["nonce"] = "abcdefgh\nChain ID: 1" }},
		{"short nonce", func(info, _ map[string]any) { info["nonce"] = "abc" }},
		{"version 2", func(info, _ map[string]any) { info["version"] = "2" }},
		{"issuedAt not a time", func(info, _ map[string]any) { info["issuedAt"] = "yesterday" }},
		{"non-ASCII statement", func(info, _ map[string]any) { info["statement"] = "sign\u2028in" }},
		{"no info", func(_, ext map[string]any) { delete(ext, "info") }},
		{"Info twin", func(info, ext map[string]any) { ext["Info"] = info; delete(ext, "info") }},
		{"only solana", func(_, ext map[string]any) {
			ext["supportedChains"] = []map[string]string{{"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"}}
		}},
		{"only a contract-wallet scheme", func(_, ext map[string]any) {
			ext["supportedChains"] = []map[string]string{{"chainId": network, "type": "eip191", "signatureScheme": "eip1271"}}
		}},
		{"not an object", func(_, ext map[string]any) { ext["supportedChains"] = "eip155:1337" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, offer(price))
			srv.siwx, srv.signedIn = siwxOffer(tc.edit), map[string]bool{buyer: true}
			tr, logs := newTransport(t, policy(10), srv)
			tr.SignInWithX = true
			got, err := send(t, tr, srv.URL("/report"), request{})
			if err != nil {
				t.Fatal(err)
			}
			if got.body != "paid" {
				t.Errorf("body %q, want paid", got.body)
			}
			for _, r := range srv.snapshotRequests() {
				if r.SignIn != "" {
					t.Fatalf("a proof was sent for a hostile offer")
				}
			}
			if !strings.Contains(logs.String(), "sign-in-with-x offer not signed") {
				t.Errorf("the log does not say why no sign-in:\n%s", logs)
			}
			if strings.Contains(logs.String(), "bank.example") {
				t.Errorf("the log quotes the offer")
			}
		})
	}
}

// TestSIWXStaysOnOrigin: a redirect answered to the signed-in request goes
// to another origin without the proof (it was never on the caller's
// request), and a 402 from an origin the Policy does not allow gets no
// sign-in.
func TestSIWXStaysOnOrigin(t *testing.T) {
	other := newServer(t)
	other.free = true
	srv := newServer(t, offer(price))
	srv.siwx, srv.signedIn = siwxOffer(nil), map[string]bool{buyer: true}
	srv.signInRedirect = other.URL("/landing")
	tr, _ := newTransport(t, policy(10), srv, other)
	tr.SignInWithX = true
	got, err := send(t, tr, srv.URL("/report"), request{})
	if err != nil {
		t.Fatal(err)
	}
	if got.body != "free" {
		t.Errorf("body %q, want the other origin's", got.body)
	}
	if r, _ := other.snapshot(); len(r) != 1 || r[0].SignIn != "" || r[0].Payment != "" {
		t.Errorf("the other origin saw %+v, want no sign-in or payment header", r)
	}
	if srv.grants != 1 {
		t.Errorf("%d grants, want 1", srv.grants)
	}

	closed := newServer(t, offer(price))
	closed.siwx, closed.signedIn = siwxOffer(nil), map[string]bool{buyer: true}
	pol := policy(10)
	pol.Origins = []string{"https://elsewhere.example"}
	tr2, _ := newTransport(t, pol, closed)
	tr2.SignInWithX = true
	_, err = send(t, tr2, closed.URL("/report"), request{})
	if np, ok := errors.AsType[*client.NoPayableOptionError](err); !ok || np.Options[0].RefusalError != client.RefusedOrigin {
		t.Fatalf("error %v, want origin refused", err)
	}
	for _, r := range closed.snapshotRequests() {
		if r.SignIn != "" {
			t.Error("signed in to an origin the policy does not allow")
		}
	}
}

// TestSignInMessage: the text has the sign-in-with-x extension's layout, and the
// gateway's own EIP-4361 parser reads it back field for field.
func TestSignInMessage(t *testing.T) {
	addr := testchain.DevAddress(0)
	m := client.SignInMessage{Domain: "api.example.com", Address: addr, URI: "https://api.example.com/premium-data",
		Version: "1", ChainID: 8453, Nonce: "a1b2c3d4e5f67890a1b2c3d4e5f67890", IssuedAt: "2024-01-15T10:30:00.000Z",
		ExpirationTime: "2024-01-15T10:35:00.000Z", Resources: []string{"https://api.example.com/premium-data"}}
	want := "api.example.com wants you to sign in with your Ethereum account:\n" + addr.Hex() + "\n\n\n" +
		"URI: https://api.example.com/premium-data\nVersion: 1\nChain ID: 8453\nNonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\n" +
		"Issued At: 2024-01-15T10:30:00.000Z\nExpiration Time: 2024-01-15T10:35:00.000Z\nResources:\n- https://api.example.com/premium-data"
	if diff := cmp.Diff(want, m.String()); diff != "" {
		t.Errorf("without statement (-want +got):\n%s", diff)
	}
	m.Statement = "Sign in to access premium data"
	parsed, err := credits.ParseMessage(m.String())
	if err != nil {
		t.Fatalf("the gateway's parser refuses the text: %v", err)
	}
	if parsed.Statement != m.Statement || parsed.Address != addr || parsed.ChainID != 8453 || parsed.Nonce != m.Nonce || len(parsed.Resources) != 1 {
		t.Errorf("parsed %+v", parsed)
	}
}
