// The dashboard's only script: the wallet sign-in. Everything else on the
// pages is plain HTML forms.
//
// The server writes the Sign-In with Ethereum message for the address the
// wallet names; the wallet signs it (personal_sign) and the server checks
// it and sets the session cookie.
"use strict";

function hexOf(text) {
  const bytes = new TextEncoder().encode(text);
  return "0x" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function postJSON(path, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    credentials: "same-origin",
    body: JSON.stringify(body),
  });
  if (res.status === 204) return {};
  let data = {};
  try { data = await res.json(); } catch (e) { /* not JSON: use the status */ }
  if (!res.ok) throw new Error(data.error || "the gateway answered " + res.status);
  return data;
}

async function signIn(status) {
  const wallet = window.ethereum;
  if (!wallet || typeof wallet.request !== "function") {
    throw new Error("no browser wallet found: install one (any EIP-1193 wallet), or use the command line below");
  }
  status.textContent = "Asking your wallet for its address…";
  const accounts = await wallet.request({ method: "eth_requestAccounts" });
  if (!accounts || accounts.length === 0) throw new Error("the wallet shared no address");
  const address = accounts[0];
  const { message } = await postJSON("/dashboard/nonce", { address });
  status.textContent = "Sign the message in your wallet…";
  const signature = await wallet.request({ method: "personal_sign", params: [hexOf(message), address] });
  status.textContent = "Checking the signature…";
  await postJSON("/dashboard/signin", { message, signature });
  status.textContent = "Signed in.";
  window.location.assign("/dashboard");
}

document.addEventListener("DOMContentLoaded", () => {
  const button = document.getElementById("signin");
  if (!button) return;
  const status = document.getElementById("signin-status");
  // The sign-in message names the gateway's configured origin, and the
  // session cookie belongs to the address the page was opened at: opened
  // at another (localhost for 127.0.0.1, say), a wallet sign-in would be
  // refused. Say where to go instead.
  const origin = document.body.dataset.origin;
  if (origin && window.location.origin !== origin) {
    status.textContent = "This gateway signs you in at " + origin + ": ";
    const link = document.createElement("a");
    link.href = origin + "/dashboard";
    link.textContent = "open the dashboard there";
    link.id = "origin-hint";
    status.appendChild(link);
  }
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await signIn(status);
    } catch (e) {
      status.textContent = "Sign-in failed: " + (e && e.message ? e.message : e);
    } finally {
      button.disabled = false;
    }
  });
});
