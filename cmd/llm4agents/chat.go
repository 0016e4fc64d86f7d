package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/gateway"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

const (
	// maxChatLine bounds one line read from stdin, and one SSE line.
	maxChatLine = 1 << 20
	// maxChatAnswer bounds a non-streamed answer or an error body.
	maxChatAnswer = 8 << 20
)

// chatFlags is `llm4agents chat` checked and parsed.
type chatFlags struct {
	buyer     buyerFlags
	base      string
	model     string
	stream    bool
	system    string
	maxTokens int
	timeout   time.Duration
	verbose   bool
	// apiKeyFile names the sk-l4a- key that pays from prepaid credits
	// instead of the wallet; apiKey is it, loaded, "" for wallet payments.
	apiKeyFile string
	apiKey     client.Secret
	// rpc is a node whose chain's balances are read before each payment.
	rpc string

	completions *url.URL // BASE/chat/completions
	models      *url.URL // BASE/models
	spend       *spending
}

func parseChatFlags(args []string, e env) (*chatFlags, error) {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "usage: llm4agents chat --url BASE [flags]\n\nTalks to an OpenAI-compatible x402 endpoint from the terminal: each line on stdin is a turn,\nthe answer goes to stdout, and the cost of each turn and the running total to stderr.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var f chatFlags
	f.buyer.register(fs)
	fs.StringVar(&f.base, "url", "", "OpenAI base URL, such as http://127.0.0.1:8080/v1 (a bare origin means /v1; required)")
	fs.StringVar(&f.model, "model", "", "model to use (default: the first of BASE/models)")
	fs.BoolVar(&f.stream, "stream", false, "stream each answer as it is written")
	fs.StringVar(&f.system, "system", "", "a system message to start the conversation with")
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "max_tokens of each turn, which bounds its price (default: the server's)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "limit on each turn, its payment and its answer")
	fs.BoolVar(&f.verbose, "v", false, "log what the payment client does (never a key or a payment header)")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "pay from prepaid credits with the sk-l4a- API key in this file (or set "+apiKeyEnv+
		") instead of per turn with the wallet; each turn's signed receipt is verified; the key's caps bound the spending, not --budget")
	fs.StringVar(&f.rpc, "rpc", "", "JSON-RPC URL of a chain the offers may use: before each payment the wallet's balance there is read, and an offer on that chain it cannot cover (an upto one: its maximum, and the wallet's Permit2 approval) is passed over for the next one (offers on other chains are tried unread)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("chat: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	case f.base == "":
		return nil, errors.New("chat: --url is required")
	case f.maxTokens < 0:
		return nil, errors.New("chat: --max-tokens must not be negative")
	case f.timeout <= 0:
		return nil, errors.New("chat: --timeout must be positive")
	}
	base, err := parseTarget(f.base)
	if err != nil {
		return nil, fmt.Errorf("chat: --url: %w", err)
	}
	if base.RawQuery != "" || base.Fragment != "" {
		return nil, errors.New("chat: --url must not have a query or a fragment")
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	if base.Path == "" {
		base.Path = "/v1"
	}
	base.RawPath = ""
	f.completions = base.JoinPath("chat", "completions")
	f.models = base.JoinPath("models")
	if f.spend, err = f.buyer.parse(); err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	if f.apiKeyFile != "" || e.getenv(apiKeyEnv) != "" {
		if f.buyer.keyFile != "" {
			// D12: a key and a payment together are refused by the gateway.
			return nil, errors.New("chat: give either an API key (credits) or --key-file (per-turn payments), not both")
		}
		if f.apiKey, err = loadAPIKey(f.apiKeyFile, e.getenv); err != nil {
			return nil, fmt.Errorf("chat: %w", err)
		}
		if f.rpc != "" {
			return nil, errors.New("chat: --rpc reads the wallet's balances for per-turn payments; with an API key the turns are paid from credits")
		}
	}
	return &f, nil
}

// chatMessage is one message of the conversation, as the API takes it.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// runChat reads a line per turn from stdin and keeps the conversation, paying
// each turn within the spending flags: `llm4agents chat --url BASE`.
func runChat(ctx context.Context, args []string, e env, stdin io.Reader) error {
	f, err := parseChatFlags(args, e)
	if err != nil {
		return err
	}
	if f.apiKey != "" {
		return runCreditChat(ctx, f, e, stdin)
	}
	key, err := loadWallet(f.buyer.keyFile, e.getenv, e.stderr)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	journal, err := f.buyer.openJournal()
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	logOut := io.Discard
	if f.verbose {
		logOut = e.stderr
	}
	in := &inspector{next: http.DefaultTransport}
	tr := &client.Transport{
		Base:    in,
		Signer:  exact.NewKeySigner(key),
		Policy:  f.spend.policy,
		Journal: journal,
		Log:     slog.New(slog.NewTextHandler(logOut, nil)),
	}
	var balancesOn string // the chain whose balances are read, if any
	if f.rpc != "" {
		bal, closeNode, err := dialBalances(ctx, f.rpc)
		if err != nil {
			return fmt.Errorf("chat: --rpc: %w", err)
		}
		defer closeNode()
		tr.Policy.Balances, balancesOn = bal, bal.Network()
	}
	hc := &http.Client{Transport: tr, CheckRedirect: sameOriginRedirects}
	b := &buyer{in: in, tr: tr, spend: f.spend}
	tr.OnCharge = b.noteCharge

	model := f.model
	if model == "" {
		if model, err = firstModel(ctx, &http.Client{Transport: in, CheckRedirect: sameOriginRedirects}, f); err != nil {
			return err
		}
	}
	printf(e.stderr, "chat with %s at %s\npolicy: %s\n", model, displayURL(f.completions), f.spend.describe())
	if balancesOn != "" {
		printf(e.stderr, "balances: read on %s before each payment; an offer there the wallet cannot cover is passed over\n", balancesOn)
	}
	printf(e.stderr, "One line per turn; an empty line is skipped; /quit or end of input ends.\n")
	turns, failed, err := converse(ctx, f, e, stdin, func(history []chatMessage, n int) (string, error) {
		return chatTurn(ctx, hc, b, f, model, history, n, e)
	})
	if err != nil {
		return err
	}
	printf(e.stderr, "chat: %d turn(s); spent %s of %s\n", turns, f.spend.human(tr.Spent()), f.spend.human(f.spend.policy.Budget))
	return chatEnd(ctx, turns, failed)
}

// converse reads a line per turn from stdin, keeps the history and asks turn
// for each answer. It returns how many turns were asked and how many failed.
func converse(ctx context.Context, f *chatFlags, e env, stdin io.Reader, turn func(history []chatMessage, n int) (string, error)) (turns, failed int, err error) {
	var history []chatMessage
	if f.system != "" {
		history = append(history, chatMessage{Role: "system", Content: f.system})
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), maxChatLine)
	prompt := isTerminal(stdin)
	for {
		if prompt {
			printf(e.stderr, "> ")
		}
		if !sc.Scan() {
			break
		}
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if text == "/quit" || text == "/exit" {
			break
		}
		turns++
		history = append(history, chatMessage{Role: "user", Content: text})
		answer, err := turn(history, turns)
		if err != nil {
			failed++
			printf(e.stderr, "chat: turn %d: %v\n", turns, err)
			history = history[:len(history)-1] // the next line is asked afresh
			continue
		}
		history = append(history, chatMessage{Role: "assistant", Content: answer})
		if err := ctx.Err(); err != nil {
			return turns, failed, err
		}
	}
	if err := sc.Err(); err != nil {
		return turns, failed, fmt.Errorf("chat: read stdin: %w", err)
	}
	return turns, failed, nil
}

// chatEnd is the outcome of a conversation: an error if it was cut short or
// any turn failed.
func chatEnd(ctx context.Context, turns, failed int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("chat: %d of %d turn(s) failed", failed, turns)
	}
	return nil
}

// firstModel asks BASE/models, unpaid, for the first model id.
func firstModel(ctx context.Context, hc *http.Client, f *chatFlags) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.models.String(), nil) // #nosec G704 -- the user names the endpoint
	if err != nil {
		return "", errors.New("chat: cannot build the models request (URL not echoed)")
	}
	resp, err := hc.Do(req) // #nosec G704 -- the user names the endpoint
	if err != nil {
		return "", fmt.Errorf("chat: list the models at %s: %w; give --model", displayURL(f.models), withoutURL(err))
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	body, err := readBounded(resp.Body, maxChatAnswer)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("chat: list the models at %s: %s; give --model", displayURL(f.models), resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("chat: %s lists no model; give --model", displayURL(f.models))
	}
	return list.Data[0].ID, nil
}

// chatTurn sends the conversation, pays for it, writes the answer to stdout as
// it comes, and reports the cost of the turn and the total to stderr.
func chatTurn(ctx context.Context, hc *http.Client, b *buyer, f *chatFlags, model string, history []chatMessage, n int, e env) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := chatRequest(ctx, f, model, history)
	if err != nil {
		return "", err
	}
	line := requestLine(http.MethodPost, f.completions)
	before := b.tr.Spent()
	mark := b.in.mark()
	b.takeCharge()
	resp, err := hc.Do(req) // #nosec G704 -- the user names the endpoint
	if err != nil {
		return "", b.failure(line, err, e.stderr, &payJSON{})
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned on error
	p := b.outcome(resp, mark)
	if resp.StatusCode != http.StatusOK {
		msg, _ := readBounded(resp.Body, maxChatAnswer)
		err := fmt.Errorf("%s: %s", resp.Status, apiErrorMessage(msg))
		if p.paid != nil {
			printf(e.stderr, "[turn %d: %s]\n", n, p.summary(b))
		}
		return "", err
	}
	a, err := readAnswer(resp.Body, f.stream, e.stdout)
	printf(e.stdout, "\n")
	printf(e.stderr, "[turn %d: %s; total %s of %s%s]\n", n, turnCost(p, new(big.Int).Sub(b.tr.Spent(), before), b.spend), b.spend.human(b.tr.Spent()), b.spend.human(b.spend.policy.Budget), a.usage.String())
	if err != nil {
		return "", fmt.Errorf("read the answer: %w", err)
	}
	return a.text, nil
}

// chatRequest builds the request of one turn: the whole conversation.
func chatRequest(ctx context.Context, f *chatFlags, model string, history []chatMessage) (*http.Request, error) {
	reqBody := map[string]any{"model": model, "messages": history}
	if f.maxTokens > 0 {
		reqBody["max_tokens"] = f.maxTokens
	}
	if f.stream {
		reqBody["stream"] = true
		reqBody["stream_options"] = map[string]any{"include_usage": true}
	}
	body, err := json.Marshal(reqBody)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.completions.String(), bytes.NewReader(body)) // #nosec G704 -- the user names the endpoint
	if err != nil {
		return nil, errors.New("cannot build the request (URL not echoed)")
	}
	req.Header.Set("Content-Type", "application/json")
	if f.stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	return req, nil
}

// turnCost says what a turn cost: the amount of the option paid, read from the
// 402, and the settlement the PAYMENT-RESPONSE names. An upto turn shows its
// maximum beside what it was charged.
func turnCost(p *payment, spent *big.Int, s *spending) string {
	if p.upto() {
		return uptoTurnCost(p, spent, s)
	}
	switch {
	case p.paid == nil:
		return "no payment asked"
	case p.sr != nil && p.sr.Success:
		return fmt.Sprintf("paid %s in transaction %s", s.human(spent), p.sr.Transaction)
	case p.sr != nil && p.sr.ErrorReason == x402.ReasonSettlementPending:
		return fmt.Sprintf("%s pending in transaction %s", formatRequirementAmount(p.paid, s.decimals), p.sr.Transaction)
	case p.srErr != nil:
		return fmt.Sprintf("paid %s; the PAYMENT-RESPONSE header does not decode (%v)", s.human(spent), p.srErr)
	default:
		return fmt.Sprintf("paid %s; no PAYMENT-RESPONSE names the transaction", s.human(spent))
	}
}

// uptoTurnCost is turnCost for an upto payment: the maximum it authorized,
// and what was charged of it.
func uptoTurnCost(p *payment, spent *big.Int, s *spending) string {
	maximum := formatRequirementAmount(p.paid, s.decimals)
	var out string
	switch {
	case p.sr != nil && p.sr.Success && p.sr.Amount == "":
		out = fmt.Sprintf("upto: counted %s of at most %s in transaction %s, which did not say the amount", s.human(spent), maximum, p.sr.Transaction)
	case p.sr != nil && p.sr.Success:
		out = fmt.Sprintf("upto: charged %s of at most %s in transaction %s", s.human(spent), maximum, p.sr.Transaction)
	case p.sr != nil && p.sr.ErrorReason == x402.ReasonSettlementPending:
		out = fmt.Sprintf("upto: at most %s pending in transaction %s", maximum, p.sr.Transaction)
	case p.srErr != nil:
		out = fmt.Sprintf("upto: counted %s of at most %s; the PAYMENT-RESPONSE header does not decode (%v)", s.human(spent), maximum, p.srErr)
	default:
		out = fmt.Sprintf("upto: counted %s of at most %s; no PAYMENT-RESPONSE says what was charged", s.human(spent), maximum)
	}
	if err := p.chargeErr(); err != nil {
		out += fmt.Sprintf("; WARNING: %v", err)
	}
	return out
}

// chatUsage is the usage an answer reports.
type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

func (u *chatUsage) String() string {
	if u == nil {
		return ""
	}
	return fmt.Sprintf("; %d prompt + %d completion tokens", u.PromptTokens, u.CompletionTokens)
}

// chatAnswer is one turn's answer as read.
type chatAnswer struct {
	text  string
	usage *chatUsage
	// credit is the gateway's x_llm4agents note of a credit-paid answer
	// (the body, or a stream's final usage chunk); nil without one.
	credit *creditNote
}

// creditNote is what an llm4agents gateway says of a credit-paid answer.
type creditNote struct {
	Charged        string          `json:"charged"`
	ChargedDisplay string          `json:"charged_display"`
	Balance        string          `json:"balance"`
	BalanceDisplay string          `json:"balance_display"`
	RequestID      string          `json:"request_id"`
	Receipt        json.RawMessage `json:"receipt"`
}

// readAnswer reads a streamed or a whole answer, writing its text to out.
func readAnswer(r io.Reader, stream bool, out io.Writer) (chatAnswer, error) {
	if stream {
		return readStream(r, out)
	}
	return readCompletion(r, out)
}

// readCompletion reads a non-streamed answer and writes its text to out.
func readCompletion(r io.Reader, out io.Writer) (chatAnswer, error) {
	body, err := readBounded(r, maxChatAnswer)
	if err != nil {
		return chatAnswer{}, err
	}
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage  *chatUsage  `json:"usage"`
		Credit *creditNote `json:"x_llm4agents"`
	}
	if err := json.Unmarshal(body, &c); err != nil || len(c.Choices) == 0 {
		return chatAnswer{}, errors.New("the answer is not a chat completion")
	}
	text := c.Choices[0].Message.Content
	printf(out, "%s", text)
	return chatAnswer{text: text, usage: c.Usage, credit: c.Credit}, nil
}

// readStream reads a server-sent event stream of chat.completion.chunk
// objects, writing each piece of content to out as it arrives.
func readStream(r io.Reader, out io.Writer) (chatAnswer, error) {
	var text strings.Builder
	var a chatAnswer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxChatLine)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			a.text = text.String()
			return a, nil
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage  *chatUsage  `json:"usage"`
			Credit *creditNote `json:"x_llm4agents"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			a.text = text.String()
			return a, errors.New("a stream event is not JSON")
		}
		if ch.Error != nil {
			a.text = text.String()
			return a, fmt.Errorf("the stream ended with an error: %s", ch.Error.Message)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			printf(out, "%s", c.Delta.Content)
		}
		if ch.Usage != nil {
			a.usage = ch.Usage
		}
		if ch.Credit != nil {
			a.credit = ch.Credit
		}
	}
	a.text = text.String()
	if err := sc.Err(); err != nil {
		return a, err
	}
	return a, errors.New("the stream ended without [DONE]")
}

// apiErrorMessage extracts the message of an OpenAI-style error body, or
// shows the start of any other body.
func apiErrorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// isTerminal reports whether r is a terminal, to show a prompt only there.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// runCreditChat holds the conversation paying from prepaid credits with an
// API key: no wallet signs anything, the gateway holds each turn's maximum
// cost and charges its usage, and each answer's signed receipt (DECISIONS
// D18) is verified against the signer the gateway publishes.
func runCreditChat(ctx context.Context, f *chatFlags, e env, stdin io.Reader) error {
	in := &inspector{next: http.DefaultTransport}
	hc := &http.Client{Transport: in, CheckRedirect: sameOriginRedirects}
	verifier := newReceiptVerifier(f.timeout)
	model := f.model
	if model == "" {
		var err error
		if model, err = firstModel(ctx, hc, f); err != nil {
			return err
		}
	}
	printf(e.stderr, "chat with %s at %s\npaying from prepaid credits with an API key; each receipt is verified\nOne line per turn; an empty line is skipped; /quit or end of input ends.\n",
		model, displayURL(f.completions))
	charged := new(big.Int)
	turns, failed, err := converse(ctx, f, e, stdin, func(history []chatMessage, n int) (string, error) {
		return creditTurn(ctx, hc, verifier, f, model, history, n, charged, e)
	})
	if err != nil {
		return err
	}
	printf(e.stderr, "chat: %d turn(s); charged %s atomic units from credits\n", turns, charged)
	return chatEnd(ctx, turns, failed)
}

// creditTurn sends the conversation with the API key, writes the answer to
// stdout as it comes, and reports the charge, the balance and the receipt
// check to stderr. A turn whose receipt is missing or does not verify fails:
// the charge cannot be checked.
func creditTurn(ctx context.Context, hc *http.Client, v *client.ReceiptVerifier, f *chatFlags, model string, history []chatMessage, n int, charged *big.Int, e env) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := chatRequest(ctx, f, model, history)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+f.apiKey.Reveal())
	resp, err := hc.Do(req) // #nosec G704 -- the user names the endpoint
	if err != nil {
		return "", fmt.Errorf("%s: %w", requestLine(http.MethodPost, f.completions), withoutURL(err))
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned on error
	if resp.StatusCode != http.StatusOK {
		msg, _ := readBounded(resp.Body, maxChatAnswer)
		return "", fmt.Errorf("%s: %s", resp.Status, apiErrorMessage(msg))
	}
	a, readErr := readAnswer(resp.Body, f.stream, e.stdout)
	printf(e.stdout, "\n")
	rc := creditReceipt(ctx, v, resp, a.credit)
	cost := "no charge reported"
	if c := a.credit; c != nil && c.Charged != "" {
		cost = fmt.Sprintf("charged %s, balance %s", oneLine(c.ChargedDisplay, 40), oneLine(c.BalanceDisplay, 40))
	}
	if rc.Verified {
		// Only what a verified receipt signs counts in the total.
		charged.Add(charged, rc.Receipt.Amount)
	}
	printf(e.stderr, "[turn %d: %s; %s%s]\n", n, cost, rc.line(), a.usage.String())
	switch {
	case readErr != nil:
		return "", fmt.Errorf("read the answer: %w", readErr)
	case !rc.Verified:
		return "", fmt.Errorf("the answer's receipt does not verify against %s%s: %s", client.OriginOf(resp.Request.URL), receipt.WellKnownPath, rc.Error)
	}
	return a.text, nil
}

// creditReceipt verifies a credit-paid answer's receipt: the
// X-Llm4agents-Receipt header of a whole answer, or the envelope in a
// stream's final usage chunk.
func creditReceipt(ctx context.Context, v *client.ReceiptVerifier, resp *http.Response, note *creditNote) *receiptCheck {
	rc := &receiptCheck{}
	var r *receipt.Receipt
	var sig []byte
	var err error
	switch {
	case resp.Header.Get(receipt.Header) != "":
		r, sig, err = receipt.DecodeHeader(resp.Header.Get(receipt.Header))
	case note != nil && len(note.Receipt) > 0:
		r, sig, err = receipt.ParseEnvelope(note.Receipt)
	default:
		err = errors.New("the answer carries no receipt")
	}
	if err != nil {
		rc.Error = err.Error()
		return rc
	}
	signer, err := v.VerifySigner(ctx, client.OriginOf(resp.Request.URL), r, sig)
	if err != nil {
		rc.Error = err.Error()
		return rc
	}
	rc.Receipt, rc.Signer = r, signer.Hex()
	// A genuine receipt of another call proves nothing about this one: it
	// must name the request id the answer carries (the response header, and
	// the body's note when there is one) and the charge the note states.
	ids := []string{resp.Header.Get(gateway.HeaderRequestID)}
	if note != nil {
		ids = append(ids, note.RequestID)
	}
	named := false
	for _, id := range ids {
		if id == "" {
			continue
		}
		named = true
		if !strings.EqualFold(id, r.RequestID.Hex()) {
			rc.Error = "the receipt is for request " + r.RequestID.Hex() + ", not this answer's " + oneLine(id, 80)
			return rc
		}
	}
	switch {
	case !named:
		rc.Error = "the answer names no request id to match the receipt with"
		return rc
	case r.Amount == nil:
		rc.Error = "the receipt states no amount"
		return rc
	case note != nil && note.Charged != "" && r.Amount.String() != note.Charged:
		rc.Error = "the receipt's amount differs from the charge the answer states"
		return rc
	}
	rc.Verified = true
	return rc
}
