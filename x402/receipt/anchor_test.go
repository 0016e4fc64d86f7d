package receipt_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/x402/receipt"
)

var (
	anchorContract = common.HexToAddress("0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512")
	anchorSender   = common.HexToAddress("0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f")
)

// anchoredLog is the log an Anchored(by, size, root) event leaves, as the
// EVM writes it.
func anchoredLog(by common.Address, size uint64, root [32]byte) *types.Log {
	var sizeTopic common.Hash
	for i := range 8 {
		sizeTopic[31-i] = byte(size >> (8 * i))
	}
	return &types.Log{Address: anchorContract, Topics: []common.Hash{receipt.AnchoredTopic, common.BytesToHash(by[:]), sizeTopic}, Data: root[:]}
}

func TestParseAnchored(t *testing.T) {
	root := [32]byte{1, 2, 3, 31: 0xff}
	l := anchoredLog(anchorSender, 1<<40+7, root)
	got, err := receipt.ParseAnchored(l)
	want := receipt.Anchored{Contract: anchorContract, By: anchorSender, Size: 1<<40 + 7, Root: root}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Fatalf("ParseAnchored: %v (-want +got):\n%s", err, diff)
	}
	// Other logs in the receipt are passed over, in order.
	other := &types.Log{Address: anchorContract, Topics: []common.Hash{{1}}}
	r := &types.Receipt{Logs: []*types.Log{other, l, anchoredLog(anchorContract, 2, [32]byte{})}}
	if got := receipt.AnchoredEvents(r); len(got) != 2 || got[0] != want || got[1].Size != 2 || got[1].By != anchorContract {
		t.Errorf("AnchoredEvents = %+v", got)
	}
	for name, mutate := range map[string]func(l *types.Log){
		"another event":        func(l *types.Log) { l.Topics[0] = common.Hash{1} },
		"no topics":            func(l *types.Log) { l.Topics = nil },
		"a topic missing":      func(l *types.Log) { l.Topics = l.Topics[:2] },
		"a topic more":         func(l *types.Log) { l.Topics = append(l.Topics, common.Hash{}) },
		"sender over 20 bytes": func(l *types.Log) { l.Topics[1][0] = 1 },
		"size over 64 bits":    func(l *types.Log) { l.Topics[2][23] = 1 },
		"no data":              func(l *types.Log) { l.Data = nil },
		"data too long":        func(l *types.Log) { l.Data = append(l.Data, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			bad := anchoredLog(anchorSender, 7, root)
			mutate(bad)
			if a, err := receipt.ParseAnchored(bad); !errors.Is(err, receipt.ErrAnchor) {
				t.Errorf("ParseAnchored = %+v, %v; want ErrAnchor", a, err)
			}
		})
	}
}

func TestAnchorsWire(t *testing.T) {
	sent := time.Date(2026, 12, 2, 10, 0, 0, 123e6, time.UTC)
	as := []receipt.Anchor{
		{Size: 9, Root: [32]byte{0xab}, Network: "eip155:8453", Contract: anchorContract, Sender: anchorSender,
			Transaction: common.Hash{0xcd}, SentAt: sent, Block: 42},
		{Size: 3, Root: [32]byte{1}, Network: "eip155:8453", Contract: anchorContract, Sender: anchorSender,
			Transaction: common.Hash{2}, SentAt: sent.Add(-time.Minute)},
	}
	b, err := receipt.MarshalAnchors(as)
	if err != nil {
		t.Fatal(err)
	}
	const first = `{"anchors":[{"size":9,"root":"0xab00000000000000000000000000000000000000000000000000000000000000",` +
		`"network":"eip155:8453","contract":"0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512","sender":"0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",` +
		`"transaction":"0xcd00000000000000000000000000000000000000000000000000000000000000","sentAt":"2026-12-02T10:00:00.123Z","block":42},`
	if !strings.HasPrefix(string(b), first) || strings.Count(string(b), `"block"`) != 1 {
		t.Errorf("MarshalAnchors =\n%s\nwant it to start\n%s\nwith no block for the second", b, first)
	}
	got, err := receipt.ParseAnchors(b)
	if diff := cmp.Diff(as, got); err != nil || diff != "" {
		t.Errorf("ParseAnchors: %v (-want +got):\n%s", err, diff)
	}
	if got, err := receipt.ParseAnchors([]byte(`{"anchors":[]}`)); err != nil || len(got) != 0 {
		t.Errorf("ParseAnchors(no anchors) = %v, %v", got, err)
	}

	one := string(b[len(`{"anchors":[`) : strings.Index(string(b), `},{`)+1])
	doc := func(a string) string { return `{"anchors":[` + a + `]}` }
	hostile := map[string]string{
		"empty":                ``,
		"null":                 `null`,
		"no anchors":           `{}`,
		"anchors null":         `{"anchors":null}`,
		"unknown field":        doc(strings.Replace(one, `{"size"`, `{"x":1,"size"`, 1)),
		"unknown top field":    `{"anchors":[],"next":"x"}`,
		"duplicate field":      doc(strings.Replace(one, `{"size":9`, `{"size":9,"size":9`, 1)),
		"size zero":            doc(strings.Replace(one, `"size":9`, `"size":0`, 1)),
		"size negative":        doc(strings.Replace(one, `"size":9`, `"size":-9`, 1)),
		"size string":          doc(strings.Replace(one, `"size":9`, `"size":"9"`, 1)),
		"size float":           doc(strings.Replace(one, `"size":9`, `"size":9.5`, 1)),
		"root short":           doc(strings.Replace(one, `"0xab00`, `"0xab0`, 1)),
		"root uppercase":       doc(strings.Replace(one, `"0xab00`, `"0xAB00`, 1)),
		"root base64":          doc(strings.Replace(one, `"0xab00000000000000000000000000000000000000000000000000000000000000"`, `"qwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="`, 1)),
		"transaction no 0x":    doc(strings.Replace(one, `"0xcd00`, `"cd00`, 1)),
		"network not eip155":   doc(strings.Replace(one, `eip155:8453`, `solana:mainnet`, 1)),
		"contract zero":        doc(strings.Replace(one, anchorContract.Hex(), "0x0000000000000000000000000000000000000000", 1)),
		"sender bad checksum":  doc(strings.Replace(one, anchorSender.Hex(), "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8F", 1)),
		"block negative":       doc(strings.Replace(one, `"block":42`, `"block":-1`, 1)),
		"block over int64":     doc(strings.Replace(one, `"block":42`, `"block":18446744073709551615`, 1)),
		"sentAt not RFC 3339":  doc(strings.Replace(one, `2026-12-02T10:00:00.123Z`, `yesterday`, 1)),
		"no sentAt":            doc(strings.Replace(one, `"sentAt":"2026-12-02T10:00:00.123Z",`, ``, 1)),
		"too many":             doc(strings.TrimSuffix(strings.Repeat(one+",", receipt.MaxAnchors+1), ",")),
		"trailing data":        doc(one) + `x`,
		"non-UTF-8 network":    doc(strings.Replace(one, `eip155:8453`, "eip155:\xff", 1)),
		"anchors not an array": `{"anchors":{}}`,
	}
	for name, body := range hostile {
		t.Run(name, func(t *testing.T) {
			if got, err := receipt.ParseAnchors([]byte(body)); !errors.Is(err, receipt.ErrAnchor) {
				t.Errorf("ParseAnchors = %+v, %v; want ErrAnchor", got, err)
			}
		})
	}
}

func TestWellKnownLog(t *testing.T) {
	_, vkey, err := note.GenerateKey(rand.Reader, "gw.example/receipts")
	if err != nil {
		t.Fatal(err)
	}
	const receipts = `"receipts":{"signer":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","domain":{"name":"llm4agents","version":"1","chainId":1337}}`
	plain := `{"origin":"gw.example/receipts","key":"` + vkey + `","maxMergeDelayMs":2000}`
	anchored := strings.TrimSuffix(plain, "}") + `,"network":"eip155:8453","anchorContract":"` + anchorContract.Hex() + `","anchorSender":"` + anchorSender.Hex() + `"}`
	otherSender := common.HexToAddress("0x976EA74026E726554dB657fA54763abd0C3a0aa9")
	several := strings.TrimSuffix(anchored, "}") + `,"anchorSenders":["` + anchorSender.Hex() + `","` + otherSender.Hex() + `"]}`
	doc := func(log string) string { return `{` + receipts + `,"log":` + log + `}` }
	for _, tc := range []struct {
		name, log string
		want      receipt.WellKnownLog
	}{
		{"not anchored", plain, receipt.WellKnownLog{Origin: "gw.example/receipts", Key: vkey, MaxMergeDelayMs: 2000}},
		{"anchored", anchored, receipt.WellKnownLog{Origin: "gw.example/receipts", Key: vkey, MaxMergeDelayMs: 2000,
			Network: "eip155:8453", AnchorContract: anchorContract, AnchorSender: anchorSender}},
		{"anchored by several replicas", several, receipt.WellKnownLog{Origin: "gw.example/receipts", Key: vkey, MaxMergeDelayMs: 2000,
			Network: "eip155:8453", AnchorContract: anchorContract, AnchorSender: anchorSender, AnchorSenders: []common.Address{anchorSender, otherSender}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wk, err := receipt.ParseWellKnown([]byte(doc(tc.log)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tc.want, wk.Log); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
			if wk.Log.Anchored() != (tc.want.Network != "") {
				t.Errorf("Anchored() = %t", wk.Log.Anchored())
			}
			for _, a := range tc.want.Senders() {
				if tc.want.Anchored() && !wk.Log.IsAnchorSender(a) {
					t.Errorf("IsAnchorSender(%s) = false", a.Hex())
				}
			}
			if wk.Log.IsAnchorSender(anchorContract) {
				t.Error("IsAnchorSender(a stranger) = true")
			}
			b, err := json.Marshal(wk)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != doc(tc.log) {
				t.Errorf("encoding\n%s\nwant\n%s", got, doc(tc.log))
			}
		})
	}
	hostile := map[string]string{
		"unknown field":              strings.Replace(anchored, `"network"`, `"anchorBlock":1,"network"`, 1),
		"network alone":              strings.TrimSuffix(plain, "}") + `,"network":"eip155:8453"}`,
		"no sender":                  strings.Replace(anchored, `,"anchorSender":"`+anchorSender.Hex()+`"`, ``, 1),
		"no contract":                strings.Replace(anchored, `,"anchorContract":"`+anchorContract.Hex()+`"`, ``, 1),
		"empty network":              strings.Replace(anchored, `"eip155:8453"`, `""`, 1),
		"network not eip155":         strings.Replace(anchored, `eip155:8453`, `eip155:0`, 1),
		"contract zero":              strings.Replace(anchored, anchorContract.Hex(), "0x0000000000000000000000000000000000000000", 1),
		"sender bad checksum":        strings.Replace(anchored, anchorSender.Hex(), "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8F", 1),
		"contract not hex":           strings.Replace(anchored, anchorContract.Hex(), "0xg7f1725E7734CE288F8367e1Bb143E90bb3F0512", 1),
		"sender a number":            strings.Replace(anchored, `"`+anchorSender.Hex()+`"`, `1`, 1),
		"duplicate sender":           strings.Replace(anchored, `"anchorSender"`, `"anchorSender":"`+anchorContract.Hex()+`","anchorSender"`, 1),
		"no delay":                   strings.Replace(anchored, `"maxMergeDelayMs":2000`, `"maxMergeDelayMs":0`, 1),
		"key of another origin":      strings.Replace(anchored, `"origin":"gw.example/receipts"`, `"origin":"other.example/receipts"`, 1),
		"log not an object":          `[]`,
		"senders without the sender": strings.Replace(several, `["`+anchorSender.Hex()+`",`, `[`, 1),
		"a sender twice":             strings.Replace(several, `"`+otherSender.Hex()+`"]`, `"`+otherSender.Hex()+`","`+otherSender.Hex()+`"]`, 1),
		"a zero sender":              strings.Replace(several, otherSender.Hex(), "0x0000000000000000000000000000000000000000", 1),
		"a sender not hex":           strings.Replace(several, otherSender.Hex(), "0xnothex", 1),
		"senders not a list":         strings.Replace(several, `["`+anchorSender.Hex()+`","`+otherSender.Hex()+`"]`, `"`+otherSender.Hex()+`"`, 1),
		"too many senders":           strings.Replace(several, `"`+otherSender.Hex()+`"]`, strings.Repeat(`"`+otherSender.Hex()+`",`, 40)+`"`+otherSender.Hex()+`"]`, 1),
	}
	for name, log := range hostile {
		t.Run(name, func(t *testing.T) {
			if wk, err := receipt.ParseWellKnown([]byte(doc(log))); !errors.Is(err, receipt.ErrBadWellKnown) {
				t.Errorf("ParseWellKnown = %+v, %v; want ErrBadWellKnown", wk, err)
			}
		})
	}
}

// FuzzParseAnchors: the /log/anchors parser refuses with ErrAnchor or
// decodes, never panics; what it decodes encodes and decodes again to the
// same anchors.
func FuzzParseAnchors(f *testing.F) {
	f.Add([]byte(`{"anchors":[]}`))
	f.Add([]byte(`{"anchors":[{"size":3,"root":"0x` + strings.Repeat("ab", 32) + `","network":"eip155:1337",` +
		`"contract":"0x5FbDB2315678afecb367f032d93F642f64180aa3","sender":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",` +
		`"transaction":"0x` + strings.Repeat("cd", 32) + `","sentAt":"2026-12-03T10:00:00Z","block":7}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := receipt.ParseAnchors(b)
		if err != nil {
			if !errors.Is(err, receipt.ErrAnchor) {
				t.Fatalf("error %v is not ErrAnchor", err)
			}
			return
		}
		again, err := receipt.MarshalAnchors(as)
		if err != nil {
			t.Fatal(err)
		}
		back, err := receipt.ParseAnchors(again)
		if err != nil || len(back) != len(as) {
			t.Fatalf("re-encoded anchors %s: %v", again, err)
		}
		for i := range as {
			if back[i].Size != as[i].Size || back[i].Root != as[i].Root || back[i].Transaction != as[i].Transaction || !back[i].SentAt.Equal(as[i].SentAt) {
				t.Fatalf("anchor %d changed: %+v, then %+v", i, as[i], back[i])
			}
		}
	})
}
