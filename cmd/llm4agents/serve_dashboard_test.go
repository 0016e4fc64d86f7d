package main

import (
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"
)

// dashboardPage signs key in at base's dashboard over HTTP, as its script
// does, and returns the account page.
func dashboardPage(t *testing.T, base string, key *ecdsa.PrivateKey) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	post := func(path, body string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", base)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readBody(t, resp)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var m struct{ Message string }
	if err := json.Unmarshal([]byte(post("/dashboard/nonce", `{"address":"`+crypto.PubkeyToAddress(key.PublicKey).Hex()+`"}`)), &m); err != nil {
		t.Fatal(err)
	}
	sig, err := crypto.Sign(accounts.TextHash([]byte(m.Message)), key)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	msg, _ := json.Marshal(m.Message)
	post("/dashboard/signin", `{"message":`+string(msg)+`,"signature":"0x`+hex.EncodeToString(sig)+`"}`)
	resp, err := c.Get(base + "/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /dashboard signed in: %d %v", resp.StatusCode, err)
	}
	return string(b)
}
