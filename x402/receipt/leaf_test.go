package receipt_test

import (
	"bytes"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/x402/receipt"
)

func TestLeaf(t *testing.T) {
	d := receipt.NewDomain(big.NewInt(8453))
	r := testReceipt()
	l, err := receipt.NewLeaf(d, r)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := receipt.Digest(d, r)
	if err != nil {
		t.Fatal(err)
	}
	want := "llm4agents receipt v1\nrail exact\nmodel gpt-4o-mini\ntokens 1234 567\namount 10000\nissued 1800000000\ncommitment " + digest.Hex() + "\n"
	if got := string(l.Marshal()); got != want {
		t.Errorf("leaf\n%s\nwant\n%s", got, want)
	}
	for _, s := range []string{"payer", "0xf39f", "0x8f3a0c1e", "eip155", "6a1f", "5a17"} {
		if strings.Contains(strings.ToLower(string(l.Marshal())), s) {
			t.Errorf("the public leaf shows %q", s)
		}
	}
	back, err := receipt.ParseLeaf(l.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Check(d, r); err != nil {
		t.Errorf("the parsed leaf is not the receipt's: %v", err)
	}
	tampered := *r
	tampered.Amount = big.NewInt(9999)
	if err := back.Check(d, &tampered); !errors.Is(err, receipt.ErrLeaf) {
		t.Errorf("a leaf checks against another amount: %v", err)
	}
	hidden := *r
	hidden.Salt[0] ^= 1 // the same public fields, another receipt
	if err := back.Check(d, &hidden); !errors.Is(err, receipt.ErrLeaf) {
		t.Errorf("a leaf checks against another receipt with the same public fields: %v", err)
	}
	if err := back.Check(receipt.NewDomain(big.NewInt(1)), r); !errors.Is(err, receipt.ErrLeaf) {
		t.Errorf("a leaf checks in another domain: %v", err)
	}
}

func TestParseLeafHostile(t *testing.T) {
	l, err := receipt.NewLeaf(receipt.NewDomain(big.NewInt(8453)), testReceipt())
	if err != nil {
		t.Fatal(err)
	}
	good := string(l.Marshal())
	swap := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("no %q in the leaf", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	for name, s := range map[string]string{
		"empty":               "",
		"other version":       swap("receipt v1", "receipt v2"),
		"no final newline":    strings.TrimSuffix(good, "\n"),
		"extra line":          good + "payer 0x00\n",
		"CRLF":                strings.ReplaceAll(good, "\n", "\r\n"),
		"unknown rail":        swap("rail exact", "rail card"),
		"lines swapped":       swap("rail exact\nmodel gpt-4o-mini", "model gpt-4o-mini\nrail exact"),
		"empty model":         swap("model gpt-4o-mini", "model "),
		"model with space":    swap("model gpt-4o-mini", "model gpt 4o"),
		"one token count":     swap("tokens 1234 567", "tokens 1234"),
		"leading zero":        swap("amount 10000", "amount 010000"),
		"negative amount":     swap("amount 10000", "amount -1"),
		"hex amount":          swap("amount 10000", "amount 0x2710"),
		"amount over uint256": swap("amount 10000", "amount 1"+strings.Repeat("0", 78)),
		"issued with plus":    swap("issued 1800000000", "issued +1800000000"),
		"uppercase hex":       swap("commitment 0x", "commitment 0X"),
		"short commitment":    good[:len(good)-3] + "\n",
		"two spaces":          swap("rail exact", "rail  exact"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := receipt.ParseLeaf([]byte(s)); !errors.Is(err, receipt.ErrLeaf) {
				t.Errorf("ParseLeaf = %v, want ErrLeaf", err)
			}
		})
	}
}

// FuzzParseLeaf: what ParseLeaf accepts, Marshal gives back byte for byte,
// so that one leaf has one encoding and one hash.
func FuzzParseLeaf(f *testing.F) {
	l, err := receipt.NewLeaf(receipt.NewDomain(big.NewInt(8453)), testReceipt())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(l.Marshal())
	f.Add([]byte("llm4agents receipt v1\nrail credits\nmodel m\ntokens 0 0\namount 0\nissued 0\ncommitment 0x" + strings.Repeat("0", 64) + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := receipt.ParseLeaf(b)
		if err != nil {
			if !errors.Is(err, receipt.ErrLeaf) {
				t.Fatalf("error %v is not ErrLeaf", err)
			}
			return
		}
		if got := l.Marshal(); !bytes.Equal(got, b) {
			t.Fatalf("ParseLeaf accepted %q, Marshal gives %q", b, got)
		}
	})
}
