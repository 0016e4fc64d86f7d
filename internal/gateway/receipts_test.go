package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// receiptsRig is one owner (alice) with two keys that each made calls, and
// another owner (bob) with a key that made one, on one backend.
type receiptsRig struct {
	e                *creditEnv
	keyA, keyB, bobK string // secrets
	idA, idB, bobID  string // key ids
	a1, a2, b1, x1   string // request ids: A's two calls, B's, bob's
	session          string // alice's sign-in session
	bobSession       string
}

func newReceiptsRig(t *testing.T, b creditBackend) *receiptsRig {
	t.Helper()
	e := newCreditEnv(t, creditOpts{backend: b})
	e.topUp(t, alice, 1_000_000)
	e.topUp(t, bob, 1_000_000)
	g := &receiptsRig{e: e}
	g.keyA, g.idA = newKeyID(t, e, alice)
	g.keyB, g.idB = newKeyID(t, e, alice)
	g.bobK, g.bobID = newKeyID(t, e, bob)
	// In this order, so the ledger seqs (and the newest-first lists) are
	// a2 > b1 > a1 for alice.
	g.a1 = g.call(t, g.keyA)
	g.b1 = g.call(t, g.keyB)
	g.a2 = g.call(t, g.keyA)
	g.x1 = g.call(t, g.bobK)
	if g.a1 == g.a2 {
		t.Fatalf("two calls share the request id %s", g.a1)
	}
	g.session = e.newSession(t, alice)
	g.bobSession = e.newSession(t, bob)
	return g
}

func newKeyID(t *testing.T, e *creditEnv, a common.Address) (secret, id string) {
	t.Helper()
	secret, k := e.newKey(t, a, nil)
	return secret, k.ID
}

// call makes one credit-paid call with key and returns its request id.
func (g *receiptsRig) call(t *testing.T, key string) string {
	t.Helper()
	resp := g.e.chat(t, key, chatBody)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: status %d: %s", resp.StatusCode, b)
	}
	id := resp.Header.Get(gateway.HeaderRequestID)
	if id == "" {
		t.Fatal("no request id on a credit-paid answer")
	}
	return id
}

func (g *receiptsRig) get(t *testing.T, auth, path string) (int, []byte) {
	t.Helper()
	resp := g.e.do(t, t.Context(), http.MethodGet, path, auth, "", nil)
	return resp.StatusCode, readAll(t, resp)
}

// listed is a page of GET /v1/receipts: request ids and ledger seqs, newest
// first.
type listed struct {
	ids  []string
	seqs []int64
	next int64 // next_before: the next page's cursor
}

func (g *receiptsRig) list(t *testing.T, auth, query string) listed {
	t.Helper()
	status, body := g.get(t, auth, "/v1/receipts"+query)
	if status != http.StatusOK {
		t.Fatalf("list%s: status %d: %s", query, status, body)
	}
	var l struct {
		Object     string            `json:"object"`
		Data       []json.RawMessage `json:"data"`
		NextBefore int64             `json:"next_before"`
	}
	if err := json.Unmarshal(body, &l); err != nil || l.Object != "list" {
		t.Fatalf("list%s: %s", query, body)
	}
	out := listed{ids: []string{}}
	for _, env := range l.Data {
		r, _, err := receipt.ParseEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		out.ids = append(out.ids, r.RequestID.Hex())
		out.seqs = append(out.seqs, r.LedgerSeq.Int64())
	}
	out.next = l.NextBefore
	return out
}

// TestCreditReceiptsPerKey: an API key sees the receipts of its own calls
// only, listed or by id; the owner's session sees every key's, and one key's
// with ?key_id=.
func TestCreditReceiptsPerKey(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		g := newReceiptsRig(t, b)

		lists := []struct {
			name, auth, query string
			want              []string
		}{
			{"key A", g.keyA, "", []string{g.a2, g.a1}},
			{"key B", g.keyB, "", []string{g.b1}},
			{"key A naming itself", g.keyA, "?key_id=" + g.idA, []string{g.a2, g.a1}},
			{"key A, a page", g.keyA, "?limit=1", []string{g.a2}},
			{"session", g.session, "", []string{g.a2, g.b1, g.a1}},
			{"session, key A", g.session, "?key_id=" + g.idA, []string{g.a2, g.a1}},
			{"session, key B", g.session, "?key_id=" + g.idB, []string{g.b1}},
			{"session, key A, a page", g.session, "?limit=1&key_id=" + g.idA, []string{g.a2}},
			{"session, another owner's key", g.session, "?key_id=" + g.bobID, []string{}},
			{"another owner's session, key A", g.bobSession, "?key_id=" + g.idA, []string{}},
			{"session, an unknown key", g.session, "?key_id=0x" + strings.Repeat("ab", 32), []string{}},
			{"bob's key", g.bobK, "", []string{g.x1}},
		}
		for _, tc := range lists {
			t.Run("list/"+tc.name, func(t *testing.T) {
				if diff := cmp.Diff(tc.want, g.list(t, tc.auth, tc.query).ids); diff != "" {
					t.Errorf("GET /v1/receipts%s (-want +got):\n%s", tc.query, diff)
				}
			})
		}

		t.Run("list/pages of one key", func(t *testing.T) {
			for _, auth := range []string{g.keyA, g.session} {
				first := g.list(t, auth, "?limit=1&key_id="+g.idA)
				if len(first.seqs) != 1 {
					t.Fatalf("first page: %v", first.ids)
				}
				next := g.list(t, auth, "?limit=1&key_id="+g.idA+"&before="+strconv.FormatInt(first.next, 10))
				last := g.list(t, auth, "?limit=1&key_id="+g.idA+"&before="+strconv.FormatInt(next.next, 10))
				got := append(append(first.ids, next.ids...), last.ids...)
				if diff := cmp.Diff([]string{g.a2, g.a1}, got); diff != "" {
					t.Errorf("paging key A (-want +got):\n%s", diff)
				}
			}
		})

		_, missing := g.get(t, g.keyA, "/v1/receipts/0x"+strings.Repeat("cd", 32))
		gets := []struct {
			name, auth, id string
			status         int
		}{
			{"key A, its own", g.keyA, g.a1, 200},
			{"key A, key B's", g.keyA, g.b1, 404},
			{"key B, key A's", g.keyB, g.a2, 404},
			{"key A, another owner's", g.keyA, g.x1, 404},
			{"session, key A's", g.session, g.a1, 200},
			{"session, key B's", g.session, g.b1, 200},
			{"session, another owner's", g.session, g.x1, 404},
		}
		for _, tc := range gets {
			t.Run("get/"+tc.name, func(t *testing.T) {
				status, body := g.get(t, tc.auth, "/v1/receipts/"+tc.id)
				if status != tc.status {
					t.Fatalf("status %d: %s; want %d", status, body, tc.status)
				}
				if status == 404 && !bytes.Equal(body, missing) {
					// Another key's receipt must not be told from none.
					t.Errorf("a receipt out of view answers %s, a missing one %s", body, missing)
				}
				if status == 200 {
					r, _, err := receipt.ParseEnvelope(body)
					if err != nil || r.RequestID.Hex() != tc.id {
						t.Errorf("receipt %v, %v; want %s", r, err, tc.id)
					}
				}
			})
		}
	})
}

// TestCreditReceiptsKeyIDBadInput: a bad key_id is a 400 naming the
// parameter, with no more than a truncated value and never a secret.
func TestCreditReceiptsKeyIDBadInput(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		g := newReceiptsRig(t, b)
		long := "0x" + strings.Repeat("f", 5000)
		tests := []struct {
			name, auth, keyID string
			notInMessage      string // a part of the value the answer must not repeat
		}{
			{"empty", g.session, "", ""},
			{"a space", g.session, "0x12 34", ""},
			{"a newline", g.session, "0x12\n34", "\n"},
			{"long", g.session, long, long[:40]},
			{"an API key secret", g.session, g.keyA, g.keyA[len("sk-l4a-") : len("sk-l4a-")+8]},
			{"a session token", g.session, g.session, g.session[len("sess-l4a-") : len("sess-l4a-")+8]},
			{"an API key after a space", g.session, " " + g.keyA, g.keyA[len("sk-l4a-") : len("sk-l4a-")+6]},
			{"a bearer header pasted", g.session, "Bearer " + g.keyA, g.keyA[len("sk-l4a-") : len("sk-l4a-")+6]},
			{"a session token after a prefix", g.session, "0x" + g.session, g.session[len("sess-l4a-") : len("sess-l4a-")+6]},
			{"key A naming key B", g.keyA, g.idB, g.idB},
			{"key A naming another owner's key", g.keyA, g.bobID, g.bobID},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				status, body := g.get(t, tc.auth, "/v1/receipts?key_id="+url.QueryEscape(tc.keyID))
				var eb struct {
					Error struct {
						Message string `json:"message"`
						Code    string `json:"code"`
						Param   string `json:"param"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &eb); err != nil || status != http.StatusBadRequest ||
					eb.Error.Code != "invalid_request" || eb.Error.Param != "key_id" {
					t.Fatalf("status %d: %s; want 400 invalid_request on key_id", status, body)
				}
				// The message is also what the refusal's log line carries.
				if tc.notInMessage != "" && strings.Contains(eb.Error.Message, tc.notInMessage) {
					t.Errorf("the message repeats %q: %s", tc.notInMessage, eb.Error.Message)
				}
				if len(body) > 400 {
					t.Errorf("an answer of %d bytes: %s", len(body), body)
				}
			})
		}
	})
}

// TestCreditReceiptsRevokedKey: revoking a key ends its own reads, and
// leaves its receipts in the owner's view.
func TestCreditReceiptsRevokedKey(t *testing.T) {
	eachCreditBackend(t, func(t *testing.T, b creditBackend) {
		g := newReceiptsRig(t, b)
		if _, err := g.e.db.RevokeKey(t.Context(), ownerOf(alice), g.idB); err != nil {
			t.Fatal(err)
		}
		if status, body := g.get(t, g.keyB, "/v1/receipts"); status != http.StatusUnauthorized || errorCode(t, body) != "invalid_api_key" {
			t.Errorf("the revoked key lists: status %d: %s", status, body)
		}
		if diff := cmp.Diff([]string{g.b1}, g.list(t, g.session, "?key_id="+g.idB).ids); diff != "" {
			t.Errorf("session, the revoked key's receipts (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{g.a2, g.b1, g.a1}, g.list(t, g.session, "").ids); diff != "" {
			t.Errorf("session, every receipt (-want +got):\n%s", diff)
		}
		if status, body := g.get(t, g.session, "/v1/receipts/"+g.b1); status != http.StatusOK {
			t.Errorf("session, the revoked key's receipt: status %d: %s", status, body)
		}
	})
}
