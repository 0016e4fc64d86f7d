package main

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/devchain"
)

// screenshotsEnv names a directory the browser test writes its screenshots
// to (docs/img for the README's); by default they go to a temporary one.
const screenshotsEnv = "LLM4AGENTS_SCREENSHOTS"

// chromium returns the path of the Chromium the browser test drives: the
// test set-up installs Debian's (scripts/services.sh); without it the test
// is skipped, or fails when tools are required.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("LLM4AGENTS_TEST_REQUIRE_TOOLS") != "" {
		t.Fatal("chromium is not installed (scripts/test installs it)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// testWallet is an EIP-1193 provider injected into every page, backed by a
// key held in the test: the page's script asks it for accounts and
// signatures as it would ask a browser wallet, through a function the test
// exposes to the page.
type testWallet struct {
	key *ecdsa.PrivateKey
}

// walletScript defines window.ethereum over the exposed l4aWallet.
const walletScript = `window.ethereum = {
  isLlm4agentsTestWallet: true,
  request: ({ method, params }) => window.l4aWallet({ method, params: params || [] }),
};`

type walletRequest struct {
	Method string   `json:"method"`
	Params []string `json:"params"`
}

// answer serves one request of the page: eth_requestAccounts and
// personal_sign.
func (w *testWallet) answer(_ context.Context, req walletRequest) (any, error) {
	key := w.key
	addr := crypto.PubkeyToAddress(key.PublicKey)
	switch req.Method {
	case "eth_requestAccounts", "eth_accounts":
		return []string{addr.Hex()}, nil
	case "personal_sign":
		if len(req.Params) != 2 || !strings.EqualFold(req.Params[1], addr.Hex()) {
			return nil, fmt.Errorf("personal_sign for %v, the wallet holds %s", req.Params, addr.Hex())
		}
		msg, err := hex.DecodeString(strings.TrimPrefix(req.Params[0], "0x"))
		if err != nil {
			return nil, err
		}
		sig, err := crypto.Sign(accounts.TextHash(msg), key)
		if err != nil {
			return nil, err
		}
		sig[64] += 27
		return "0x" + hex.EncodeToString(sig), nil
	}
	return nil, fmt.Errorf("method %s is not supported", req.Method)
}

// install injects the wallet into ctx's pages.
func (w *testWallet) install(ctx context.Context) error {
	return chromedp.Do(ctx,
		chromedp.ExposeFunc("l4aWallet", w.answer),
		func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: walletScript})
			return chromedp.Void{}, err
		})
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// the demo's real gateway on the simulated chain: the buyer signs in with a
// wallet (through the page's own script), sees the demo's paid calls,
// creates a key, pays two calls with it, sees them appear, revokes the key
// and sees the next call refused; then the operator signs in with the
// demo's no-wallet button and sees the operator view. Each view is saved as a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo and a browser")
	}
	chrome := chromium(t)
	t.Setenv("TMPDIR", t.TempDir())
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	}
	addr := freeLoopbackAddr(t)
	base := "http://" + addr
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	startDemo(t, ctx, addr)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 1100),
		chromedp.Flag("disable-dev-shm-usage", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	wallet := &testWallet{key: devchain.Key(demoBuyer)}
	if err := wallet.install(bctx); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.FullScreenshot(100)(ctx, t)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name), png, 0o600)
		}
	}
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			text, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("%s: %v\npage text:\n%s", step, err, text)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	attr := func(sel, name string) string {
		t.Helper()
		a, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
		if err != nil {
			t.Fatalf("read %s's %s: %v", sel, name, err)
		}
		return a.Value
	}

	// Opened at another name of the same address, the page says where the
	// sign-in works.
	do("another origin",
		chromedp.Navigate(strings.Replace(base, "127.0.0.1", "localhost", 1)+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("origin-hint")),
	)
	if href := attr("#origin-hint", "href"); href != base+"/dashboard" {
		t.Errorf("the origin hint links %q, want %s/dashboard", href, base)
	}

	buyer := strings.ToLower(devchain.Address(demoBuyer).Hex())
	do("sign in",
		chromedp.Navigate(base+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("signin")),
		shot("dashboard-signin.png"),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("balance")),
	)
	if account := attr("#account", "title"); account != buyer {
		t.Fatalf("signed in as %q, want the demo buyer %s", account, buyer)
	}
	if receipts := text("#receipt-table"); !strings.Contains(receipts, "demo") || !strings.Contains(receipts, "exact") {
		t.Errorf("the demo's paid calls are not on the page:\n%s", receipts)
	}

	do("create a key",
		chromedp.SendKeys(chromedp.CSS(`#create-key input[name="name"]`), "browser agent"),
		chromedp.SendKeys(chromedp.CSS(`#create-key input[name="total_cap"]`), "1"),
		chromedp.Click(chromedp.ID("create-key-button")),
		chromedp.WaitVisible(chromedp.ID("new-key-value")),
	)
	secret := text("#new-key-value")
	if !strings.HasPrefix(secret, "sk-l4a-") {
		t.Fatalf("the new key shown is %q", secret)
	}
	for i := range 2 {
		if status, body := keyCall(t, ctx, base, secret); status != http.StatusOK {
			t.Fatalf("paid call %d with the new key: %d %s", i, status, body)
		}
	}
	do("see the calls",
		chromedp.Navigate(base+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("key-table")),
		chromedp.ScrollIntoView(chromedp.ID("spend-chart")),
		shot("dashboard-buyer.png"),
	)
	keyID := attr(`#key-table tr[data-key-id]`, "data-key-id")
	calls, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('#receipt-table tr[data-key-id=%q]').length`, keyID)))
	if err != nil || calls != 2 {
		t.Errorf("the receipts table shows %d calls of key %s (%v), want 2:\n%s", calls, keyID, err, text("#receipt-table"))
	}

	do("revoke the key",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-key-id=%q] button.revoke`, keyID))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr.revoked[data-key-id=%q]`, keyID))),
	)
	if status, body := keyCall(t, ctx, base, secret); status != http.StatusUnauthorized {
		t.Errorf("a call with the revoked key: %d %s, want 401", status, body)
	}

	// The operator signs in with the demo's own button (the server holds the
	// demo's dev keys), no wallet involved.
	do("the operator",
		chromedp.Click(chromedp.ID("logout")),
		chromedp.WaitVisible(chromedp.ID("signin")),
		chromedp.Click(chromedp.ID("demo-signin-1")),
		chromedp.WaitVisible(chromedp.ID("nav-operator")),
		chromedp.Click(chromedp.ID("nav-operator")),
		chromedp.WaitVisible(chromedp.ID("revenue")),
		shot("dashboard-operator.png"),
	)
	if account := attr("#account", "title"); account != strings.ToLower(devchain.Address(demoPayTo).Hex()) {
		t.Errorf("the demo's operator button signed in %q, want pay_to", account)
	}
	if revenue := text("#revenue"); !strings.HasSuffix(revenue, "USDC") || strings.HasPrefix(revenue, "0 ") {
		t.Errorf("the operator's revenue reads %q, want the demo's payments", revenue)
	}
	for _, name := range []string{"dashboard-signin.png", "dashboard-buyer.png", "dashboard-operator.png"} {
		if fi, err := os.Stat(filepath.Join(shots, name)); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
}

// keyCall makes one credit-paid chat call with an API key.
func keyCall(t *testing.T, ctx context.Context, base, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hi from the browser test"}],"max_tokens":16}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, resp.Status)
	return resp.StatusCode, b.String()
}
