package paywall

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
)

// testSet is a Set of two networks, the second with two assets, offering
// upto on the second network's first asset.
func testSet() *Set {
	network := func(id string, asset common.Address, upto bool) *Paywall {
		c := Config{Network: id, Asset: asset.Hex(), AssetAddress: asset, PayTo: "0x00000000000000000000000000000000000000aa",
			Extra: []byte(`{"name":"USD Coin","version":"2"}`), MaxTimeoutSeconds: 300}
		if upto {
			c.UptoExtra = []byte(`{"facilitatorAddress":"0x00000000000000000000000000000000000000bb"}`)
		}
		return New(c, nil, nil, nil, nil)
	}
	return NewSet(
		network("eip155:8453", common.HexToAddress("0x01"), false),
		network("eip155:84532", common.HexToAddress("0x02"), true),
		network("eip155:84532", common.HexToAddress("0x03"), false),
	)
}

func TestSetOffer(t *testing.T) {
	s := testSet()
	var q Quote
	s.Offer(&q, big.NewInt(10_000), true)
	var got []string
	for _, a := range q.accepts() {
		got = append(got, a.Scheme+" "+a.Network+" "+a.Asset+" "+a.Amount)
	}
	want := []string{
		"exact eip155:8453 " + common.HexToAddress("0x01").Hex() + " 10000",
		"exact eip155:84532 " + common.HexToAddress("0x02").Hex() + " 10000",
		"upto eip155:84532 " + common.HexToAddress("0x02").Hex() + " 10000",
		"exact eip155:84532 " + common.HexToAddress("0x03").Hex() + " 10000",
	}
	if len(got) != len(want) {
		t.Fatalf("accepts %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("accepts[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	if q.Offer.Network != "eip155:8453" || q.Upto != nil {
		t.Errorf("the quote's own offers are not the primary's: %+v %+v", q.Offer, q.Upto)
	}
	s.Offer(&q, big.NewInt(10_000), false)
	if len(q.accepts()) != 3 {
		t.Errorf("without upto, %d offers, want 3", len(q.accepts()))
	}
}

func TestSetPick(t *testing.T) {
	s := testSet()
	header := func(network, asset string) string {
		h, err := x402.EncodeHeader(map[string]any{
			"x402Version": 2, "payload": map[string]any{},
			"accepted": map[string]any{"scheme": "exact", "network": network, "asset": asset, "amount": "10000",
				"payTo": "0x00000000000000000000000000000000000000aa", "maxTimeoutSeconds": 300},
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tc := range []struct {
		name, sig string
		want      int
	}{
		{"no payment", "", 0},
		{"second network, first asset", header("eip155:84532", common.HexToAddress("0x02").Hex()), 1},
		{"second network, second asset, lower case", header("eip155:84532", "0x0000000000000000000000000000000000000003"), 2},
		{"asset of another network", header("eip155:8453", common.HexToAddress("0x03").Hex()), 0},
		{"unknown network", header("eip155:1", common.HexToAddress("0x02").Hex()), 0},
		{"asset not an address", header("eip155:84532", "0x02"), 0},
		{"not base64", "%%%", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q Quote
			s.Offer(&q, big.NewInt(10_000), true)
			p := s.pick(&q, Presented{Signature: tc.sig})
			if p != s.all[tc.want] {
				t.Fatalf("picked %s %s, want paywall %d", p.cfg.Network, p.cfg.Asset, tc.want)
			}
			if q.Offer.Network != p.cfg.Network || q.Offer.Asset != p.cfg.Asset {
				t.Errorf("the quote's offer %s %s is not the picked paywall's", q.Offer.Network, q.Offer.Asset)
			}
			if (q.Upto != nil) != (p.cfg.UptoExtra != nil) {
				t.Errorf("the quote's upto offer %v, the picked paywall offers upto: %t", q.Upto, p.cfg.UptoExtra != nil)
			}
			if len(q.accepts()) != 4 {
				t.Errorf("the 402 would list %d offers, want all 4", len(q.accepts()))
			}
		})
	}
}

// FuzzSetPick: any PAYMENT-SIGNATURE picks one of the set's paywalls, the
// primary unless it names another's network and asset, and never panics.
func FuzzSetPick(f *testing.F) {
	f.Add("")
	f.Add("eyJ4NDAyVmVyc2lvbiI6Mn0=")
	f.Add("%%%")
	s := testSet()
	f.Fuzz(func(t *testing.T, sig string) {
		var q Quote
		s.Offer(&q, big.NewInt(10_000), true)
		p := s.pick(&q, Presented{Signature: sig})
		if p == nil || q.Offer.Network != p.cfg.Network {
			t.Fatalf("picked %v with offer %+v", p, q.Offer)
		}
	})
}
