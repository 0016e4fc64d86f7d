package dashboard

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
)

// BenchmarkBuyerPage renders a signed-in account's page with a full page
// of receipts (receiptsShown, each signature checked) and ten keys, over
// HTTP on a SQLite store: what a buyer waits for when opening the
// dashboard.
func BenchmarkBuyerPage(b *testing.B) {
	f := newFixture(b, nil)
	buyer, _ := crypto.GenerateKey()
	addr := crypto.PubkeyToAddress(buyer.PublicKey)
	owner := strings.ToLower(addr.Hex())
	for i := range 10 {
		if _, _, err := f.keys.CreateKey(b.Context(), owner, keyRequestNamed("key "+string(rune('a'+i)))); err != nil {
			b.Fatal(err)
		}
	}
	now := uint64(time.Now().Unix())
	for i := range receiptsShown {
		f.putReceipt(b, addr, "", "model-"+string(rune('a'+i%7)), int64(1000+i), 0, now-uint64(i)*3600)
	}
	br := f.benchBrowser(b)
	br.signIn(buyer)
	b.ResetTimer()
	for b.Loop() {
		if status, _ := br.get(Path); status != http.StatusOK {
			b.Fatalf("status %d", status)
		}
	}
}
