#!/usr/bin/env bash
# gen.sh compiles the test contracts with the solc pinned in interop/package.json
# and regenerates their Go bindings (abigen v1) in this directory.
#
#   bash contracts/gen.sh           rewrite token.go and wallet.go
#   bash contracts/gen.sh -check    regenerate into a temporary directory and
#                                   exit 1 if the committed bindings differ
#
# Needs node and `npm ci --prefix interop` (for solcjs), and the abigen tool
# declared in go.mod.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
solcjs="$root/interop/node_modules/.bin/solcjs"
solc_version="0.8.28+commit.7893614a"

check=0
case "${1:-}" in
"") ;;
-check | --check) check=1 ;;
*)
	echo "usage: $0 [-check]" >&2
	exit 2
	;;
esac

if [[ ! -e "$solcjs" ]]; then
	echo "gen.sh: $solcjs not found; run: npm ci --prefix interop" >&2
	exit 1
fi
got_version="$(node "$solcjs" --version)"
if [[ "$got_version" != "$solc_version"* ]]; then
	echo "gen.sh: solcjs is $got_version, want $solc_version" >&2
	exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Compile from this directory with bare file names: the source unit names end
# up in the metadata hash appended to the bytecode, so absolute paths would
# make the output depend on where the repository is checked out.
cd "$here"
node "$solcjs" --bin --abi --optimize -o "$work/solc" EIP3009Token.sol ERC1271Wallet.sol

# abigen names the second of two overloads with a "0" suffix, in ABI order, and
# solc orders overloads by their parameter lists. Put each (v, r, s) form before
# its `bytes signature` form, so that in Go TransferWithAuthorization,
# ReceiveWithAuthorization and CancelAuthorization are the (v, r, s) forms and
# the bytes forms all end in 0.
order_overloads() { # order_overloads <abi file>
	node -e '
		const fs = require("fs");
		const file = process.argv[1];
		const abi = JSON.parse(fs.readFileSync(file, "utf8"));
		const key = (e) => e.type + " " + (e.name || "");
		const hasBytes = (e) => ((e.inputs || []).some((i) => i.type === "bytes") ? 1 : 0);
		const first = new Map();
		abi.forEach((e, i) => { if (!first.has(key(e))) first.set(key(e), i); });
		abi.sort((a, b) => first.get(key(a)) - first.get(key(b)) || hasBytes(a) - hasBytes(b));
		fs.writeFileSync(file, JSON.stringify(abi));
	' "$1"
}

bind() { # bind <contract> <Go type> <output file>
	order_overloads "$work/solc/$1_sol_$1.abi"
	go tool abigen \
		--abi "$work/solc/$1_sol_$1.abi" \
		--bin "$work/solc/$1_sol_$1.bin" \
		--pkg contracts \
		--type "$2" \
		--out "$work/$3"
}
bind EIP3009Token EIP3009Token token.go
bind ERC1271Wallet ERC1271Wallet wallet.go

if ((check)); then
	stale=0
	for f in token.go wallet.go; do
		if ! diff -u "$here/$f" "$work/$f" >&2; then
			stale=1
		fi
	done
	if ((stale)); then
		echo "gen.sh: generated bindings are stale; run: go generate ./contracts" >&2
		exit 1
	fi
	exit 0
fi

cp "$work/token.go" "$work/wallet.go" "$here/"
chmod 0644 "$here/token.go" "$here/wallet.go"
