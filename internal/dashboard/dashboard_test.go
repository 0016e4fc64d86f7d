package dashboard

import (
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

func TestSignInShowsTheAccount(t *testing.T) {
	f := newFixture(t, nil)
	buyer, _ := crypto.GenerateKey()
	addr := crypto.PubkeyToAddress(buyer.PublicKey)
	if _, err := f.led.TopUp(t.Context(), ledger.SettlementRef(testNetwork, common.HexToHash("0x01"), 0), addr, big.NewInt(5_250_000)); err != nil {
		t.Fatal(err)
	}
	f.putReceipt(t, addr, "", "gpt-test", 1234, 0, uint64(time.Now().Unix()))

	b := f.browser(t)
	status, page := b.get(Path)
	if status != http.StatusOK || !strings.Contains(page, `id="signin"`) {
		t.Fatalf("signed out: %d, want the sign-in page:\n%s", status, page)
	}
	b.signIn(buyer)
	status, page = b.get(Path)
	if status != http.StatusOK {
		t.Fatalf("signed in: %d\n%s", status, page)
	}
	for _, want := range []string{strings.ToLower(addr.Hex()), "5.25 USDC", "gpt-test", "0.001234 USDC", "signed", `id="create-key"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the account page lacks %q", want)
		}
	}
	if strings.Contains(page, `id="nav-operator"`) {
		t.Error("a buyer's page links the operator view")
	}
}

func TestSessionCookie(t *testing.T) {
	for _, tc := range []struct {
		origin string
		secure bool
	}{{"http://127.0.0.1:1", false}, {"https://gw.example.com", true}} {
		h := &Handler{secure: strings.HasPrefix(tc.origin, "https")}
		w := httptestRecorder()
		h.setSession(w, "sess-l4a-x", time.Now().Add(time.Minute))
		c := w.Result().Cookies()
		if len(c) != 1 {
			t.Fatalf("%d cookies", len(c))
		}
		if !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode || c[0].Path != Path || c[0].Secure != tc.secure {
			t.Errorf("%s: cookie %+v: want HttpOnly, SameSite=Strict, Path=%s, Secure=%v", tc.origin, c[0], Path, tc.secure)
		}
	}
}

func TestKeysCreateShowOnceRevoke(t *testing.T) {
	f := newFixture(t, nil)
	b, owner, token := f.signedIn(t)

	status, page := b.postForm(Path+"/keys", url.Values{"csrf": {token}, "name": {"agent one"}, "total_cap": {"2.5"}, "daily_cap": {"0.5"},
		"expires_days": {"30"}, "models": {"gpt-test, demo"}, "rate": {"60"}})
	if status != http.StatusCreated {
		t.Fatalf("create: %d\n%s", status, page)
	}
	keys, err := f.db.KeysByOwner(t.Context(), owner)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys after create: %v, %v", keys, err)
	}
	k := keys[0]
	if k.Name != "agent one" || k.TotalCap != 2_500_000 || k.PeriodCap != 500_000 || k.Period != 24*time.Hour || k.RatePerMinute != 60 ||
		len(k.Models) != 2 || k.ExpiresAt.IsZero() {
		t.Errorf("stored key %+v does not match the form", k)
	}
	secret := between(page, `id="new-key-value" class="select">`, "<")
	if !credits.IsKey(secret) || credits.HashSecret(secret) != k.Hash {
		t.Fatalf("the page shows %q, not the key's secret", secret)
	}
	_, again := b.get(Path)
	if strings.Contains(again, secret) {
		t.Error("the secret is shown a second time")
	}
	if strings.Contains(f.logs.String(), secret) {
		t.Error("the secret reached the log")
	}

	status, page = b.postForm(Path+"/keys/"+k.ID+"/limits", url.Values{"csrf": {token}, "total_cap": {"1"}, "daily_cap": {""}, "rate": {""}})
	if status != http.StatusSeeOther {
		t.Fatalf("limits: %d\n%s", status, page)
	}
	keys, _ = f.db.KeysByOwner(t.Context(), owner)
	if k := keys[0]; k.TotalCap != 1_000_000 || k.PeriodCap != store.NoCap || k.RatePerMinute != 0 {
		t.Errorf("after the limits form: %+v", k)
	}

	if status, page := b.postForm(Path+"/keys/"+k.ID+"/revoke", url.Values{"csrf": {token}}); status != http.StatusSeeOther {
		t.Fatalf("revoke: %d\n%s", status, page)
	}
	keys, _ = f.db.KeysByOwner(t.Context(), owner)
	if !keys[0].Revoked() {
		t.Error("the key is not revoked")
	}
}

// TestAnotherAccountsKey: an account acting on a key of another account
// gets the answer of a key that does not exist, and the key is untouched.
func TestAnotherAccountsKey(t *testing.T) {
	f := newFixture(t, nil)
	alice, _ := crypto.GenerateKey()
	mallory, _ := crypto.GenerateKey()
	_, k, err := f.keys.CreateKey(t.Context(), strings.ToLower(crypto.PubkeyToAddress(alice.PublicKey).Hex()), credits.KeyRequest{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.signIn(mallory)
	_, page := b.get(Path)
	token := csrfToken(t, page)
	for _, path := range []string{"/keys/" + k.ID + "/revoke", "/keys/" + k.ID + "/limits"} {
		status, page := b.postForm(Path+path, url.Values{"csrf": {token}, "total_cap": {"0"}})
		if status != http.StatusNotFound {
			t.Errorf("%s on another account's key: %d, want 404\n%s", path, status, page)
		}
	}
	keys, _ := f.db.KeysByOwner(t.Context(), k.Owner)
	if keys[0].Revoked() || keys[0].TotalCap != store.NoCap {
		t.Errorf("another account changed alice's key: %+v", keys[0])
	}
}

// TestFormsNeedCSRFAndOrigin: a state change without the session's CSRF
// token, or from another origin, changes nothing.
func TestFormsNeedCSRFAndOrigin(t *testing.T) {
	f := newFixture(t, nil)
	buyer, _ := crypto.GenerateKey()
	owner := strings.ToLower(crypto.PubkeyToAddress(buyer.PublicKey).Hex())
	_, k, err := f.keys.CreateKey(t.Context(), owner, credits.KeyRequest{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.signIn(buyer)
	_, page := b.get(Path)
	token := csrfToken(t, page)
	other := f.browser(t)
	other.signIn(buyer)
	_, otherPage := other.get(Path)
	otherToken := csrfToken(t, otherPage)
	if otherToken == token {
		t.Fatal("two sessions share a CSRF token")
	}

	for _, tc := range []struct {
		name   string
		origin string
		csrf   string
	}{
		{"no token", f.origin, ""},
		{"wrong token", f.origin, strings.Repeat("0", 64)},
		{"another session's token", f.origin, otherToken},
		{"another origin", "https://evil.example", token},
		{"no origin", "", token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.origin = tc.origin
			defer func() { b.origin = f.origin }()
			v := url.Values{"name": {"x"}}
			if tc.csrf != "" {
				v.Set("csrf", tc.csrf)
			}
			for _, path := range []string{"/keys", "/keys/" + k.ID + "/revoke", "/logout"} {
				if status, _ := b.postForm(Path+path, v); status != http.StatusForbidden {
					t.Errorf("%s: %d, want 403", path, status)
				}
			}
		})
	}
	keys, _ := f.db.KeysByOwner(t.Context(), owner)
	if len(keys) != 1 || keys[0].Revoked() {
		t.Errorf("a refused form changed the keys: %+v", keys)
	}
	if status, page := b.get(Path); status != http.StatusOK || !strings.Contains(page, `id="logout"`) {
		t.Error("a refused logout signed the session out")
	}
}

// TestOutputEscaped: a key name and a model name with HTML in them are
// shown as text.
func TestOutputEscaped(t *testing.T) {
	f := newFixture(t, nil)
	buyer, _ := crypto.GenerateKey()
	addr := crypto.PubkeyToAddress(buyer.PublicKey)
	const name = `<script>alert(1)</script>`
	const model = `<img/src=x/onerror=alert(2)>`
	if _, _, err := f.keys.CreateKey(t.Context(), strings.ToLower(addr.Hex()), credits.KeyRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	f.putReceipt(t, addr, "", model, 10, 0, uint64(time.Now().Unix()))
	b := f.browser(t)
	b.signIn(buyer)
	_, page := b.get(Path)
	for _, raw := range []string{name, model, "<script>alert", "<img/src"} {
		if strings.Contains(page, raw) {
			t.Errorf("the page carries %q unescaped", raw)
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the key's name is not shown escaped")
	}
}

func TestLogout(t *testing.T) {
	f := newFixture(t, nil)
	buyer, _ := crypto.GenerateKey()
	b := f.browser(t)
	b.signIn(buyer)
	_, page := b.get(Path)
	u, _ := url.Parse(f.srv.URL + Path)
	cookie := b.c.Jar.Cookies(u)[0]
	status, _, resp := b.do(http.MethodPost, Path+"/logout", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"csrf": {csrfToken(t, page)}}.Encode()))
	if status != http.StatusSeeOther {
		t.Fatalf("logout: %d", status)
	}
	if c := resp.Cookies; len(c) != 1 || c[0].MaxAge >= 0 {
		t.Errorf("logout did not clear the cookie: %v", c)
	}
	// The old token no longer signs anyone in, even if a browser kept it.
	replay := f.browser(t)
	replay.c.Jar.SetCookies(u, []*http.Cookie{cookie})
	if _, page := replay.get(Path); !strings.Contains(page, `id="signin"`) {
		t.Error("the session still works after logout")
	}
}

func TestOperatorView(t *testing.T) {
	f := newFixture(t, nil)
	admin := f.browser(t)
	admin.signIn(f.admin)
	status, page := admin.get(Path + "/operator")
	if status != http.StatusOK || !strings.Contains(page, "Pending settlements") {
		t.Fatalf("admin: %d\n%s", status, page)
	}
	buyer, _ := crypto.GenerateKey()
	b := f.browser(t)
	b.signIn(buyer)
	if status, _ := b.get(Path + "/operator"); status != http.StatusNotFound {
		t.Errorf("a buyer on the operator view: %d, want 404", status)
	}
	if status, page := f.browser(t).get(Path + "/operator"); status != http.StatusOK || !strings.Contains(page, `id="signin"`) {
		t.Errorf("signed out on the operator view: %d, want the sign-in page", status)
	}
}

func TestSignInRateLimited(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.SignInsPerMinute = 3 })
	b := f.browser(t)
	addr := map[string]string{"address": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"}
	for i := range 3 {
		if status, body, _ := b.postJSON(Path+"/nonce", addr); status != http.StatusOK {
			t.Fatalf("nonce %d: %d %s", i, status, body)
		}
	}
	status, _, resp := b.postJSON(Path+"/nonce", addr)
	if status != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("the 4th nonce in a minute: %d, want 429 with Retry-After", status)
	}
}

// TestSignInRefusals: hostile or malformed sign-ins get a clear error and
// no session.
func TestSignInRefusals(t *testing.T) {
	f := newFixture(t, nil)
	key, _ := crypto.GenerateKey()
	b := f.browser(t)
	_, body, _ := b.postJSON(Path+"/nonce", map[string]string{"address": crypto.PubkeyToAddress(key.PublicKey).Hex()})
	msg := between(body, `"message":"`, `"}`)
	msg = strings.ReplaceAll(msg, `\n`, "\n")
	good := personalSign(t, key, msg)
	other, _ := crypto.GenerateKey()
	foreign := strings.Replace(msg, f.srv.Listener.Addr().String(), "evil.example", 1)

	for _, tc := range []struct {
		name        string
		contentType string
		origin      string
		body        string
		want        int
	}{
		{"form post", "application/x-www-form-urlencoded", f.origin, "message=x", http.StatusUnsupportedMediaType},
		{"cross-site", "application/json", "https://evil.example", `{"message":"x","signature":"0x00"}`, http.StatusForbidden},
		{"not json", "application/json", f.origin, `{"message":`, http.StatusBadRequest},
		{"unknown member", "application/json", f.origin, `{"message":"x","signature":"0x00","admin":true}`, http.StatusBadRequest},
		{"signature not hex", "application/json", f.origin, `{"message":"x","signature":"zz"}`, http.StatusBadRequest},
		{"empty signature", "application/json", f.origin, `{"message":"x","signature":"0x"}`, http.StatusBadRequest},
		{"not a message", "application/json", f.origin, `{"message":"hello","signature":"` + good + `"}`, http.StatusUnauthorized},
		{"another key's signature", "application/json", f.origin, jsonBody(msg, personalSign(t, other, msg)), http.StatusUnauthorized},
		{"another origin's message", "application/json", f.origin, jsonBody(foreign, personalSign(t, key, foreign)), http.StatusUnauthorized},
		{"too large", "application/json", f.origin, `{"message":"` + strings.Repeat("a", 1<<20) + `","signature":"0x00"}`, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.origin = tc.origin
			status, body, resp := b.do(http.MethodPost, Path+"/signin", tc.contentType, strings.NewReader(tc.body))
			if status != tc.want {
				t.Errorf("%d %s, want %d", status, body, tc.want)
			}
			if len(resp.Cookies) != 0 {
				t.Error("a refused sign-in set a cookie")
			}
		})
	}
	// The nonce survived every refusal: the real signature still works.
	b.origin = f.origin
	if status, body, _ := b.postJSON(Path+"/signin", map[string]string{"message": msg, "signature": good}); status != http.StatusNoContent {
		t.Errorf("the good sign-in after the refusals: %d %s", status, body)
	}
	if strings.Contains(f.logs.String(), good[2:20]) {
		t.Error("a signature reached the log")
	}
}

func TestFormInputRefused(t *testing.T) {
	f := newFixture(t, nil)
	b, owner, token := f.signedIn(t)
	for _, tc := range []struct {
		name string
		form url.Values
		want string
	}{
		{"negative cap", url.Values{"total_cap": {"-1"}}, "Total cap must be"},
		{"too many decimals", url.Values{"total_cap": {"0.0000001"}}, "Total cap must be"},
		{"float notation", url.Values{"daily_cap": {"1e3"}}, "Daily cap must be"},
		{"huge cap", url.Values{"total_cap": {"99999999999999999999999"}}, "Total cap must be"},
		{"expiry zero", url.Values{"expires_days": {"0"}}, "Expires in"},
		{"rate not a number", url.Values{"rate": {"ten"}}, "Calls per minute"},
		{"name not ascii", url.Values{"name": {"caf\u00e9"}}, "name must be"},
		{"bad model", url.Values{"models": {strings.Repeat("m", 300)}}, "model name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.form.Set("csrf", token)
			status, page := b.postForm(Path+"/keys", tc.form)
			if status != http.StatusBadRequest || !strings.Contains(page, tc.want) {
				t.Errorf("%d, want 400 saying %q:\n%s", status, tc.want, between(page, `id="problem">`, "<"))
			}
		})
	}
	if keys, _ := f.db.KeysByOwner(t.Context(), owner); len(keys) != 0 {
		t.Errorf("refused forms created %d keys", len(keys))
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	auth, err := credits.NewAuth(nil, "http://127.0.0.1:1", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no origin", Config{Sessions: auth, ChainID: 1}},
		{"origin not http", Config{Origin: "ftp://x", Sessions: auth, ChainID: 1}},
		{"no sign-in", Config{Origin: "http://127.0.0.1:1", ChainID: 1}},
		{"no chain", Config{Origin: "http://127.0.0.1:1", Sessions: auth}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	out, _, _ := strings.Cut(rest, to)
	return out
}

func jsonBody(message, sig string) string {
	return `{"message":` + strconvQuote(message) + `,"signature":"` + sig + `"}`
}

// TestDemoSignIn: the demo's accounts sign in without a wallet, only when
// configured, only from the dashboard's page.
func TestDemoSignIn(t *testing.T) {
	demoKey, _ := crypto.GenerateKey()
	f := newFixture(t, func(c *Config) { c.DemoAccounts = []DemoAccount{{Label: "the demo buyer", Key: demoKey}} })
	b := f.browser(t)
	if _, page := b.get(Path); !strings.Contains(page, `id="demo-signin-0"`) || !strings.Contains(page, "Sign in as the demo buyer") {
		t.Fatal("the sign-in page offers no demo account")
	}
	for _, tc := range []struct {
		name, origin, account string
		want                  int
	}{
		{"another origin", "https://evil.example", "0", http.StatusForbidden},
		{"no such account", f.origin, "1", http.StatusNotFound},
		{"not a number", f.origin, "x", http.StatusNotFound},
	} {
		b.origin = tc.origin
		if status, _ := b.postForm(Path+"/demo-signin", url.Values{"account": {tc.account}}); status != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, status, tc.want)
		}
	}
	b.origin = f.origin
	if status, _ := b.postForm(Path+"/demo-signin", url.Values{"account": {"0"}}); status != http.StatusSeeOther {
		t.Fatalf("demo sign-in: %d", status)
	}
	if _, page := b.get(Path); !strings.Contains(page, strings.ToLower(crypto.PubkeyToAddress(demoKey.PublicKey).Hex())) {
		t.Error("the demo sign-in did not sign in the demo account")
	}

	// A gateway that is not the demo has no such route.
	plain := newFixture(t, nil)
	pb := plain.browser(t)
	if _, page := pb.get(Path); strings.Contains(page, "demo-signin") {
		t.Error("a gateway without demo accounts offers them")
	}
	if status, _ := pb.postForm(Path+"/demo-signin", url.Values{"account": {"0"}}); status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
		t.Errorf("demo sign-in on a plain gateway: %d", status)
	}
}

// TestOperatorCharges: the operator sees every account's charges of the
// day by rail, top-ups apart, and tokens per model.
func TestOperatorCharges(t *testing.T) {
	f := newFixture(t, nil)
	alice, _ := crypto.GenerateKey()
	bob, _ := crypto.GenerateKey()
	now := uint64(time.Now().Unix())
	f.putReceipt(t, crypto.PubkeyToAddress(alice.PublicKey), "", "gpt-a", 1_000, 0, now)
	f.putReceipt(t, crypto.PubkeyToAddress(bob.PublicKey), "", "gpt-a", 2_000, 0, now)
	x402 := func(model, rail string, amount int64) receipt.Receipt {
		return receipt.Receipt{Model: model, InputTokens: big.NewInt(100), OutputTokens: big.NewInt(0), Amount: big.NewInt(amount),
			BalanceAfter: big.NewInt(0), LedgerSeq: big.NewInt(0), IssuedAt: now, Rail: rail, Network: testNetwork, Payment: common.HexToHash("0x01")}
	}
	f.putSigned(t, crypto.PubkeyToAddress(bob.PublicKey), "", 0, x402("gpt-b", receipt.RailExact, 10_000))
	f.putSigned(t, crypto.PubkeyToAddress(bob.PublicKey), "", 0, x402("gpt-b", receipt.RailUpto, 7_000))
	f.putSigned(t, crypto.PubkeyToAddress(alice.PublicKey), "", 0, x402(receipt.ModelTopUp, receipt.RailExact, 5_000_000))

	admin := f.browser(t)
	admin.signIn(f.admin)
	status, page := admin.get(Path + "/operator")
	if status != http.StatusOK {
		t.Fatalf("operator: %d", status)
	}
	rails := between(page, `id="rail-totals"`, "</table>")
	for _, want := range []string{"<td>credits</td><td>2</td><td>0.003 USDC</td>", "<td>exact</td><td>1</td><td>0.01 USDC</td>",
		"<td>upto</td><td>1</td><td>0.007 USDC</td>", "<td>top-ups</td><td>1</td><td>5.00 USDC</td>"} {
		if !strings.Contains(rails, want) {
			t.Errorf("rail totals lack %q:\n%s", want, rails)
		}
	}
	models := between(page, `id="model-usage"`, "</table>")
	for _, want := range []string{"<td>gpt-b</td><td>2</td><td>200</td><td>0</td>", "<td>gpt-a</td><td>2</td><td>24</td><td>68</td>"} {
		if !strings.Contains(models, want) {
			t.Errorf("model usage lacks %q:\n%s", want, models)
		}
	}
	if strings.Contains(models, receipt.ModelTopUp) {
		t.Error("a top-up counted as a model's call")
	}
}

// TestKeySpendFromLedger: a key's spend is the ledger's, the bookkeeping
// its caps are enforced by, not only the calls on the page.
func TestKeySpendFromLedger(t *testing.T) {
	f := newFixture(t, nil)
	buyer, _ := crypto.GenerateKey()
	addr := crypto.PubkeyToAddress(buyer.PublicKey)
	owner := strings.ToLower(addr.Hex())
	if _, err := f.led.TopUp(t.Context(), ledger.SettlementRef(testNetwork, common.HexToHash("0x02"), 0), addr, big.NewInt(10_000_000)); err != nil {
		t.Fatal(err)
	}
	daily := "1000000"
	day := int64(86400)
	_, k, err := f.keys.CreateKey(t.Context(), owner, credits.KeyRequest{Name: "agent", PeriodCap: &daily, PeriodSeconds: &day})
	if err != nil {
		t.Fatal(err)
	}
	hold, err := f.led.Reserve(t.Context(), ledger.Call{RequestID: "req-1", Payer: addr, Key: ledger.KeyOf(k), PromptTokens: 1000,
		OutputBound: 1000, Price: pricing.Price{Input: 1_000_000, Output: 2_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.led.Charge(t.Context(), hold.ID, chat.Usage{PromptTokens: 1000, CompletionTokens: 500}, pricing.Price{Input: 1_000_000, Output: 2_000_000}); err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	b.signIn(buyer)
	_, page := b.get(Path)
	row := between(page, `data-key-id="`+k.ID+`"`, "</tr>")
	if !strings.Contains(row, "0.002 USDC, 0.002 USDC this period") {
		t.Errorf("the key's row does not show the ledger's spend of 0.002 USDC:\n%s", row)
	}
}

// TestOperatorSignersEachShown: the operator view shows the gas of every
// facilitator signer, one per network, and warns of the low one even when
// another network's signer is funded.
func TestOperatorSignersEachShown(t *testing.T) {
	reg := prometheus.NewRegistry()
	for net, gwei := range map[string]float64{"eip155:8453": 10, "eip155:84532": 5e9} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llm4agents_signer_balance_gwei", Help: "signer gas",
			ConstLabels: prometheus.Labels{"network": net, "signer": "0x00000000000000000000000000000000000000aa"},
		}, func() float64 { return gwei }))
	}
	f := newFixture(t, func(c *Config) { c.Metrics = reg })
	admin := f.browser(t)
	admin.signIn(f.admin)
	status, page := admin.get(Path + "/operator")
	if status != http.StatusOK {
		t.Fatalf("operator view: %d", status)
	}
	for _, want := range []string{"Facilitator gas on eip155:8453", "Facilitator gas on eip155:84532", ">5 ETH<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the operator view lacks %q", want)
		}
	}
	if n := strings.Count(page, "Low: settlements stop"); n != 1 {
		t.Errorf("%d low-gas warnings, want 1 (the signer on eip155:8453)", n)
	}
}
