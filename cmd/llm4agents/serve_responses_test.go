package main

import (
	"bytes"
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/internal/upstream/upstreamtest"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// TestServeResponsesPassThrough: `serve` from YAML with an upstream that
// says `responses: true`: a Responses call the translation would refuse
// (include) is paid once and passed through to the upstream's
// /v1/responses; with the key absent, the same call is refused by name.
func TestServeResponsesPassThrough(t *testing.T) {
	tt := deployToken(t)
	up := upstreamtest.NewServer(t, upstreamtest.Config{APIKey: upstreamAPIKey})
	tr := &client.Transport{
		Signer: exact.NewKeySigner(testchain.DevKey(serveBuyer)),
		Policy: client.Policy{
			MaxPerRequest: big.NewInt(100_000), Budget: big.NewInt(1_000_000),
			Assets: []client.Asset{{Network: testNetwork, Address: tt.addr.Hex()}},
		},
	}
	buyer := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := `{"model":"demo","input":"Who answers?","include":["reasoning.encrypted_content"],"max_output_tokens":32}`
	for _, speaks := range []bool{true, false} {
		t.Run(fmt.Sprint("responses ", speaks), func(t *testing.T) {
			upstreamYAML := fmt.Sprintf("    base_url: %s\n    api_key_env: %s\n    timeout: 5s", up.URL(), serveAPIKeyEnv)
			if speaks {
				upstreamYAML += "\n    responses: true"
			}
			cfg := serveConfig{RPC: "rpc_url: " + tt.node.URL, Asset: tt.addr.Hex(), Upstream: upstreamYAML}
			proc := startCmd(t, []string{"serve", "--config", writeConfig(t, cfg.yaml(t))}, serveEnv(), "gateway listening on ")
			calls := up.Calls()
			resp := postJSON(t, buyer, proc.url+"/v1/responses", body)
			b := readBody(t, resp)
			if !speaks {
				if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte(`"param":"include"`)) || up.Calls() != calls {
					t.Fatalf("chat-only upstream: %d %s", resp.StatusCode, b)
				}
				return
			}
			if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"object":"response"`)) || !bytes.Contains(b, []byte(`"x_llm4agents":{"charged":"10000"`)) {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := up.LastRequest().Body; !bytes.Contains(got, []byte(`"include":["reasoning.encrypted_content"]`)) || !bytes.Contains(got, []byte(`"input":"Who answers?"`)) {
				t.Errorf("the upstream got %s", got)
			}
		})
	}
}
