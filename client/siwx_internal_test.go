package client

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// FuzzSIWXOffer feeds hostile sign-in-with-x offers to mintSignIn: it never
// panics, refuses with ErrSignInRefused or mints a proof, and a proof it
// mints is for the request's host only, on the lines the standard has: no
// field of the offer can add or change a line of the signed text.
func FuzzSIWXOffer(f *testing.F) {
	f.Add(`{"info":{"domain":"api.example.com","uri":"https://api.example.com/data","version":"1","nonce":"a1b2c3d4e5f67890","issuedAt":"2027-01-15T08:00:00.000Z"},"supportedChains":[{"chainId":"eip155:8453","type":"eip191"}]}`)
	f.Add(`{"info":{"domain":"api.example.com","uri":"https://api.example.com/","version":"1","nonce":"a1b2c3d4e5f67890","issuedAt":"2027-01-15T08:00:00Z","statement":"x\nURI: https://evil/","resources":["https://api.example.com/a"]},"supportedChains":[{"chainId":"eip155:1","type":"eip191"}]}`)
	f.Add(`{"info":{"domain":"evil.example","uri":"https://api.example.com/","version":"1","nonce":"a1b2c3d4e5f67890","issuedAt":"2027-01-15T08:00:00Z"},"supportedChains":[{"chainId":"eip155:1","type":"eip191"}]}`)
	f.Add(`{"Info":{},"info":null}`)
	key, err := crypto.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	s := exact.NewKeySigner(key)
	u := &url.URL{Scheme: "https", Host: "api.example.com", Path: "/data"}
	f.Fuzz(func(t *testing.T, offer string) {
		pr := &x402.PaymentRequired{Extensions: map[string]json.RawMessage{ExtensionSignInWithX: json.RawMessage(offer)}}
		if !json.Valid([]byte(offer)) {
			pr.Extensions[ExtensionSignInWithX] = nil
		}
		proof, err := mintSignIn(t.Context(), s, pr, u)
		if err != nil {
			if !errors.Is(err, ErrSignInRefused) {
				t.Fatalf("error %v is not ErrSignInRefused", err)
			}
			return
		}
		var p siwxProof
		if err := x402.DecodeHeader(proof.Reveal(), &p); err != nil {
			t.Fatalf("minted proof does not decode: %v", err)
		}
		// Hosts compare without case (RFC 3986): the proof signs the
		// offer's own spelling, which the server checks.
		pu, err := url.Parse(p.URI)
		if !strings.EqualFold(p.Domain, "api.example.com") || err != nil || !sameOrigin(pu, u) {
			t.Fatalf("proof for %q %q", p.Domain, p.URI)
		}
		for _, r := range p.Resources {
			ru, err := url.Parse(r)
			if err != nil || !sameOrigin(ru, u) {
				t.Fatalf("proof names resource %q", r)
			}
		}
		m := SignInMessage{Domain: p.Domain, Address: s.Address(), Statement: p.Statement, URI: p.URI, Version: p.Version,
			Nonce: p.Nonce, IssuedAt: p.IssuedAt, ExpirationTime: p.ExpirationTime, NotBefore: p.NotBefore,
			RequestID: p.RequestID, Resources: p.Resources}
		want := 9 // header, address, blank, (statement, blank | blank), URI, Version, Chain ID, Nonce, Issued At
		if p.Statement != "" {
			want++
		}
		for _, opt := range []string{p.ExpirationTime, p.NotBefore, p.RequestID} {
			if opt != "" {
				want++
			}
		}
		if len(p.Resources) > 0 {
			want += 1 + len(p.Resources)
		}
		if got := strings.Count(m.String(), "\n") + 1; got != want {
			t.Fatalf("signed text has %d lines, want %d:\n%s", got, want, m.String())
		}
	})
}
