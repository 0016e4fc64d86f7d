package dashboard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/internal/credits"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"signin", "buyer", "operator", "error"}

var funcs = template.FuncMap{
	// short shortens a hex id or address to its ends; the full value goes
	// in a title beside it.
	"short": func(s string) string {
		if len(s) <= 14 || !strings.HasPrefix(s, "0x") {
			return s
		}
		return s[:8] + "…" + s[len(s)-4:]
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
}

func parsePages() (map[string]*template.Template, error) {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what every page gets: the layout's part, and the page's own Body.
type view struct {
	Title   string
	Account *account
	CSRF    string
	Origin  string
	ChainID uint64
	// Notice and Problem are a line of news and a line of trouble, shown
	// above the page.
	Notice, Problem string
	Body            any
}

type signInBody struct {
	Demo []string // labels of the demo's accounts, by index
}

func (h *Handler) signInBody() signInBody {
	var b signInBody
	for _, a := range h.cfg.DemoAccounts {
		b.Demo = append(b.Demo, a.Label)
	}
	return b
}

type errorPage struct {
	Title, Message string
}

// render writes the page name with data; a template failure is a 500
// without the half-written page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	if v.Account != nil {
		v.CSRF = csrf(v.Account.Token)
	}
	v.Origin, v.ChainID = h.cfg.Origin, h.cfg.ChainID
	if v.Title == "" {
		v.Title = "llm4agents"
	}
	var b bytes.Buffer
	if err := h.pages[name].Execute(&b, v); err != nil {
		h.log.ErrorContext(r.Context(), "render page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail answers an error that is not the user's: logged, and a page that
// says so without detail.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.log.ErrorContext(r.Context(), "dashboard request failed", "path", r.URL.Path, "err", err)
	h.render(w, r, http.StatusServiceUnavailable, "error", view{Title: "Unavailable",
		Body: errorPage{Title: "Unavailable", Message: "The gateway could not read its store just now. Try again in a moment."}})
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusNotFound, "error", view{Title: "Not found", Body: errorPage{Title: "Not found", Message: "There is no such page."}})
}

// errNotFound is what a view returns for what the account may not see: the
// same answer as for what does not exist.
var errNotFound = errors.New("dashboard: not found")

// page serves a view to a signed-in account, and the sign-in page to anyone
// else.
func (h *Handler) page(build func(ctx context.Context, a account) (string, view, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, ok, err := h.signedIn(r)
		switch {
		case err != nil:
			h.fail(w, r, err)
			return
		case !ok:
			h.render(w, r, http.StatusOK, "signin", view{Title: "Sign in", Body: h.signInBody()})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		defer cancel()
		name, v, err := build(ctx, a)
		switch {
		case errors.Is(err, errNotFound):
			h.notFound(w, r)
			return
		case err != nil:
			h.fail(w, r, err)
			return
		}
		v.Account = &a
		h.render(w, r, http.StatusOK, name, v)
	}
}

// maxFormBytes bounds a form's body.
const maxFormBytes = 16 << 10

// form serves a state-changing form post: only from a signed-in account,
// from the dashboard's own origin, with the session's CSRF token. act
// writes the answer (a page, or a redirect) when it succeeds; when it
// fails, a *credits.RequestError is the user's mistake, shown on the
// buyer's page with its status, and any other error a 503 page.
func (h *Handler) form(act func(w http.ResponseWriter, r *http.Request, a account) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, ok, err := h.signedIn(r)
		switch {
		case err != nil:
			h.fail(w, r, err)
			return
		case !ok:
			http.Redirect(w, r, Path, http.StatusSeeOther)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if !h.sameOrigin(r) || r.ParseForm() != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") ||
			!hmac.Equal([]byte(r.PostForm.Get(csrfField)), []byte(csrf(a.Token))) {
			h.log.InfoContext(r.Context(), "dashboard form refused: origin or CSRF token", "path", r.URL.Path, "account", a.Owner)
			h.render(w, r, http.StatusForbidden, "error", view{Title: "Refused", Account: &a, Body: errorPage{Title: "Refused",
				Message: "This form did not come from this dashboard, or its page is too old. Reload the page and try again."}})
			return
		}
		err = act(w, r, a)
		if re, ok := errors.AsType[*credits.RequestError](err); ok && re.Status < 500 {
			h.log.InfoContext(r.Context(), "dashboard form refused", "path", r.URL.Path, "account", a.Owner, "code", re.Code)
			h.showBuyer(w, r, a, re.Status, "", re.Message)
			return
		}
		if errors.Is(err, errNotFound) {
			h.notFound(w, r)
			return
		}
		if err != nil {
			h.fail(w, r, err)
		}
	}
}

// showBuyer renders the buyer's page with a notice or a problem.
func (h *Handler) showBuyer(w http.ResponseWriter, r *http.Request, a account, status int, notice, problem string) {
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	_, v, err := h.buyer(ctx, a)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v.Account, v.Notice, v.Problem = &a, notice, problem
	h.render(w, r, status, "buyer", v)
}
