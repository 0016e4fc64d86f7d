// Command llm4agents is the one binary of the gateway: it runs the paid
// OpenAI-compatible gateway, a standalone x402 facilitator, the embedded demo,
// the buyer tools, and the set-up of a local dev node. Each subcommand parses its
// own flags, builds its configuration and runs until its context ends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode is the process's exit status for run's error, which it reports on
// stderr: 0 for none and for -h, whose usage is already printed (asking for
// help is not a failure), 2 for any other.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	printf(stderr, "llm4agents: %v\n", err)
	return 2
}

// env gives a subcommand what it may read from its surroundings.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

// printf writes a command's output to stdout or stderr. A failed write there
// has nowhere to be reported and changes nothing the command does, so its
// error is dropped, here and only here.
func printf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}

const usage = `usage: llm4agents <command> [flags]

commands:
  demo          run the embedded demo: a local chain, the gateway, and paid calls
  serve         run the paid gateway from a YAML config (--config FILE)
  facilitator   serve an x402 facilitator (POST /verify, POST /settle, GET /supported)
  pay           pay one x402 request within a budget (--dry-run shows the price, pays nothing)
  chat          chat with an OpenAI-compatible x402 endpoint, paying per turn
  keys          create, list or revoke the gateway's sk-l4a- API keys (signs in with the wallet)
  credits       top up credit with an x402 payment, show the balance, verify receipts
  receipts      verify your receipts against the gateway's public receipt log
  log           audit a gateway's receipt log; keygen and reconcile: the operator's tools
  wallet        wallet set-up: approve-permit2, once per token, for upto payments
  devnet        set up a dev node (anvil): Permit2, the upto proxy, the test token, mints
  version       print the version and VCS revision of this build (also --version)

Run 'llm4agents <command> -h' for the flags of a command.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := env{getenv: getenv, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		printf(stderr, "%s", usage)
		return errors.New("no command given")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "demo":
		return runDemo(ctx, rest, e)
	case "facilitator":
		return runFacilitator(ctx, rest, e)
	case "serve":
		return runServe(ctx, rest, e)
	case "pay":
		return runPay(ctx, rest, e, os.Stdin)
	case "chat":
		return runChat(ctx, rest, e, os.Stdin)
	case "keys":
		return runKeys(ctx, rest, e)
	case "receipts":
		return runReceipts(ctx, rest, e)
	case "log":
		return runLog(ctx, rest, e)
	case "credits":
		return runCredits(ctx, rest, e)
	case "wallet":
		return runWallet(ctx, rest, e, os.Stdin)
	case "devnet":
		return runDevnet(ctx, rest, e)
	case "-h", "-help", "--help", "help":
		printf(stdout, "%s", usage)
		return nil
	case "version", "-version", "--version":
		if len(rest) > 0 {
			return fmt.Errorf("%s takes no arguments", cmd)
		}
		printf(stdout, "%s\n", versionLine(debug.ReadBuildInfo()))
		return nil
	default:
		printf(stderr, "%s", usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// versionLine says which build this is: the module version, the VCS revision
// and whether the tree it was built from had changes, and the Go version.
// What the build did not record is named as such: "(devel)" for a build
// outside a module download, "unknown revision" for one without VCS stamping
// (go run, -buildvcs=false, a tree that is not a repository).
func versionLine(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "llm4agents (devel), unknown revision (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	line := "llm4agents " + version
	switch {
	case revision == "":
		line += ", unknown revision"
	case modified == "true":
		line += ", revision " + revision + " (modified)"
	default:
		line += ", revision " + revision
	}
	if bi.GoVersion != "" {
		line += ", " + bi.GoVersion
	}
	return line
}
