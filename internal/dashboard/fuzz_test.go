package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzSignIn: whatever body reaches the sign-in, the answer is a client
// error with no session cookie.
func FuzzSignIn(f *testing.F) {
	f.Add(`{"message":"x","signature":"0x00"}`)
	f.Add(`{"message":"` + strings.Repeat("a", 100) + `","signature":"0x` + strings.Repeat("11", 65) + `"}`)
	f.Add(`{"message":null}`)
	f.Add(`[]`)
	fx := newFixture(f, nil)
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, Path+"/signin", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", fx.origin)
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, req)
		if w.Code < 400 || w.Code >= 500 || len(w.Result().Cookies()) != 0 {
			t.Fatalf("body %q: %d, cookies %v", body, w.Code, w.Result().Cookies())
		}
	})
}

// FuzzKeyForm: the new-key form's fields either make a request the key
// check accepts or refuse it; amounts come out as atomic units.
func FuzzKeyForm(f *testing.F) {
	f.Add("agent", "2.5", "0.5", "30", "a,b", "60")
	f.Add("", "1e9", "-1", "0", " ", "x")
	f.Add("\x00", "99999999999999999999", ".5", "3651", strings.Repeat("m,", 100), "-5")
	h := &Handler{cfg: Config{Decimals: 6, AssetSymbol: "USDC", Now: time.Now}}
	f.Fuzz(func(t *testing.T, name, total, daily, days, models, rate string) {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.PostForm = url.Values{"name": {name}, "total_cap": {total}, "daily_cap": {daily}, "expires_days": {days}, "models": {models}, "rate": {rate}}
		req, err := h.keyRequest(r)
		if err != nil {
			return
		}
		for _, p := range []*string{req.TotalCap, req.PeriodCap} {
			if p != nil && strings.Trim(*p, "0123456789") != "" {
				t.Fatalf("amount %q is not atomic units", *p)
			}
		}
		if _, err := h.keyChange(r); err != nil && req.TotalCap != nil {
			t.Fatalf("the limits form refused what the new-key form took: %v", err)
		}
	})
}
