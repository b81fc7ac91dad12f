// The hosted checkout page: static markup, a few KB of inline CSS and JS, no framework. The page's data
// travels in a JSON block (never interpolated into script), and a CSP pins the inline style and script by
// hash, so nothing else can run on the page a customer pays from.
import { createHash } from 'node:crypto'

/** What the status route answers and the page starts from. */
export interface CheckoutStatus {
  id: string
  object: 'payment'
  status: 'pending' | 'paid' | 'expired' | 'canceled'
  business_name: string
  description: string
  amount: number
  amount_atomic: string
  amount_received: number
  amount_received_atomic: string
  amount_due: number
  amount_due_atomic: string
  currency: 'USDC'
  network: string
  chain_id: number
  recipient: string
  asset: string
  expires_at: string
  paid_at: string | null
  transaction: string | null
  transaction_url: string | null
  payer: string | null
  success_url: string | null
}

export interface PageInput {
  status: CheckoutStatus
  networkLabel: string
  /** Inline SVG of the EIP-681 transfer URI for the amount due (pending only). */
  qrSvg: string | null
  eip681: string | null
}

const STYLE = `
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;min-height:100vh;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#0f172a;background:#eef1f6;display:flex;flex-direction:column;align-items:center;padding:24px 16px}
main{width:100%;max-width:440px;background:#fff;border-radius:18px;box-shadow:0 1px 2px rgba(15,23,42,.06),0 8px 28px rgba(15,23,42,.08);overflow:hidden}
.head{padding:22px 24px 18px;border-bottom:1px solid #eef0f4}
.merchant{font-weight:650;font-size:17px;display:flex;align-items:center;gap:10px}
.logo{width:32px;height:32px;border-radius:9px;background:#1652f0;color:#fff;display:grid;place-items:center;font-weight:700;font-size:15px;flex:none}
.desc{margin:14px 0 20px;color:#475569;overflow-wrap:anywhere}
.amount{margin:6px 0 0;font-size:34px;font-weight:700;letter-spacing:-.02em;font-variant-numeric:tabular-nums}
.amount small{font-size:16px;font-weight:600;color:#64748b;margin-left:4px;letter-spacing:0}
.label{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:#64748b;font-weight:600}
.net{display:inline-flex;align-items:center;gap:6px;margin-top:10px;font-size:13px;color:#334155;background:#f1f5f9;border-radius:999px;padding:3px 10px}
.net:before{content:"";width:8px;height:8px;border-radius:50%;background:#1652f0}
.partial{margin:12px 0 0;padding:10px 12px;border-radius:10px;background:#fff7ed;color:#9a3412;font-size:14px}
.body{padding:20px 24px 24px}
button,.button{font:inherit;border:0;border-radius:12px;cursor:pointer}
.primary{display:block;width:100%;padding:14px 16px;border-radius:12px;background:#1652f0;color:#fff;font-weight:600;text-align:center;text-decoration:none}
.primary:hover{background:#0f45d4}
.primary:disabled{background:#94a3b8;cursor:progress}
.msg{min-height:1.45em;margin:10px 0 0;font-size:14px;color:#334155}
.msg.error{color:#b91c1c}
.msg.ok{color:#15803d}
.msg.warn{color:#9a3412}
.msg:empty{min-height:0;margin:0}
.or{display:flex;align-items:center;gap:12px;margin:20px 0 16px;color:#64748b;font-size:13px}
.or:before,.or:after{content:"";flex:1;height:1px;background:#e2e8f0}
.manual{display:grid;gap:14px}
.f dt,.f .dt{font-size:12px;color:#64748b;font-weight:600;text-transform:uppercase;letter-spacing:.05em}
.f dd{margin:2px 0 0}
.qr{width:212px;height:212px;margin:0 auto 4px;padding:6px;border:1px solid #e2e8f0;border-radius:12px;background:#fff}
.qr svg{display:block;width:100%;height:100%}
dl{margin:0;display:grid;gap:10px}
.f{margin:0;gap:2px}
dt{font-size:12px;color:#64748b;font-weight:600;text-transform:uppercase;letter-spacing:.05em}
dd{margin:2px 0 0}
.mono{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
.copyrow{display:flex;gap:8px;align-items:flex-start}
.copyrow .mono{flex:1;background:#f8fafc;border:1px solid #e2e8f0;border-radius:8px;padding:8px 10px}
.copy{padding:8px 12px;background:#e8eefe;color:#1652f0;font-weight:600;font-size:14px;flex:none}
form{margin-top:4px}
form label{display:block;font-size:14px;color:#334155;margin-bottom:6px}
.inrow{display:flex;gap:8px}
input{flex:1;min-width:0;font:14px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;padding:10px 12px;border:1px solid #cbd5e1;border-radius:10px}
input:focus{outline:2px solid #1652f0;outline-offset:-1px;border-color:#1652f0}
.secondary{padding:10px 14px;background:#0f172a;color:#fff;font-weight:600;font-size:14px}
.expires{margin:16px 0 0;font-size:13px;color:#64748b}
.how{display:none}
.receipt{text-align:center}
.check{width:56px;height:56px;border-radius:50%;background:#dcfce7;color:#15803d;display:grid;place-items:center;margin:4px auto 12px;font-size:30px;font-weight:700}
.receipt h2{margin:0 0 4px;font-size:20px}
.receipt dl{text-align:left;margin:18px 0 20px;background:#f8fafc;border-radius:12px;padding:14px}
.receipt a.mono{color:#1652f0}
.receipt a.mono:not([href]){color:inherit}
.gone h1{font-size:20px;margin:0 0 8px}
.gone p{margin:0;color:#475569}
footer{margin-top:18px;font-size:12px;color:#94a3b8}
[hidden]{display:none!important}
@media (min-width:860px){
  body{padding-top:64px}
  main{max-width:860px;display:grid;grid-template-columns:1fr 1.1fr}
  .head{border-bottom:0;border-right:1px solid #eef0f4;padding:36px 36px}
  .amount{font-size:42px}
  .body{padding:32px 36px}
  .how{display:block;margin:28px 0 0;font-size:14px;color:#64748b;max-width:30em}
  .manual{grid-template-columns:176px 1fr;grid-template-areas:"qr send" "qr net" "addr addr" "asset asset" "form form";column-gap:20px;align-items:start}
  .qr{grid-area:qr;width:176px;height:176px;margin:0}
  .f-send{grid-area:send;align-self:end}
  .f-net{grid-area:net}
  .f-addr{grid-area:addr}
  .f-asset{grid-area:asset}
  .manual form{grid-area:form}
}
`

const SCRIPT = `
(() => {
  const boot = JSON.parse(document.getElementById('checkout-data').textContent);
  const $ = (id) => document.getElementById(id);
  let s = boot.status;
  let qrDue = s.amount_due_atomic;
  let busy = false;
  const fmt = (atomic) => {
    const n = BigInt(atomic), w = n / 1000000n, f = (n % 1000000n).toString().padStart(6, '0').replace(/0+$/, '');
    return w.toString().replace(/\\B(?=(\\d{3})+(?!\\d))/g, ',') + (f ? '.' + f : '');
  };
  const say = (text, kind) => { const m = $('msg'); m.textContent = text; m.className = 'msg' + (kind ? ' ' + kind : ''); };
  const REASONS = {
    invalid_proof: 'That is not a transaction hash (0x followed by 64 hex characters).',
    proof_already_used: 'That transaction has already been used for another payment.',
    wrong_recipient: 'That transaction did not send USDC to the address shown.',
    wrong_asset: 'That transaction sent a different token, not USDC.',
    no_transfer: 'That transaction contains no USDC transfer.',
    transaction_failed: 'That transaction failed on chain.',
    proof_too_old: 'That transaction is too old to be used.',
    unsupported_proof: 'This kind of payment proof is not accepted.',
  };

  function render(next) {
    s = next;
    if (s.status === 'paid') return showReceipt();
    if (s.status !== 'pending') return showGone();
    $('due').textContent = fmt(s.amount_due_atomic);
    $('due-copy').textContent = fmt(s.amount_due_atomic) + ' USDC';
    const received = BigInt(s.amount_received_atomic);
    if (received > 0n) {
      $('partial').hidden = false;
      $('partial').textContent = 'Received ' + fmt(received) + ' USDC. ' + fmt(s.amount_due_atomic) + ' USDC left to pay.';
      $('due-label').textContent = 'Left to pay';
    }
    if (s.amount_due_atomic !== qrDue) {
      qrDue = s.amount_due_atomic;
      fetch(boot.qr_url, { cache: 'no-store' }).then((r) => r.ok ? r.text() : null).then((svg) => { if (svg) $('qr').innerHTML = svg; });
    }
  }

  function showReceipt() {
    $('pay').hidden = true;
    $('partial').hidden = true;
    $('due-label').textContent = 'Paid';
    $('due').textContent = fmt(s.amount_received_atomic);
    $('r-amount').textContent = fmt(s.amount_received_atomic) + ' USDC';
    const tx = $('r-tx');
    tx.textContent = s.transaction || '';
    if (s.transaction_url) tx.setAttribute('href', s.transaction_url); else tx.removeAttribute('href');
    $('r-when').textContent = s.paid_at ? new Date(s.paid_at).toLocaleString() : '';
    $('receipt').hidden = false;
    stopTimers();
  }

  function showGone() {
    $('pay').hidden = true;
    $('gone-title').textContent = s.status === 'expired' ? 'This payment has expired' : 'This payment was canceled';
    $('gone').hidden = false;
    stopTimers();
  }

  let pollTimer = 0, tickTimer = 0;
  function stopTimers() { clearTimeout(pollTimer); clearInterval(tickTimer); if ($('expires')) $('expires').hidden = true; }
  async function refresh() {
    try {
      const r = await fetch(boot.status_url, { headers: { accept: 'application/json' }, cache: 'no-store' });
      if (r.ok) render(await r.json());
    } catch {}
  }
  function poll() {
    pollTimer = setTimeout(async () => { if (!document.hidden) await refresh(); if (s.status === 'pending') poll(); }, 3000);
  }
  function tick() {
    if (!$('expires')) return;
    const left = Math.max(0, Date.parse(s.expires_at) - Date.now());
    const m = Math.floor(left / 60000), sec = Math.floor(left / 1000) % 60;
    const h = Math.floor(m / 60);
    $('expires').textContent = left > 0
      ? 'Expires in ' + (h > 0 ? h + 'h ' + (m % 60) + 'm' : m + ':' + String(sec).padStart(2, '0'))
      : 'Expired';
    if (left === 0) refresh();
  }

  async function submit(hash, attempt = 0) {
    let r, body;
    try {
      r = await fetch(boot.pay_url, { method: 'POST', headers: { 'x-payment': hash, accept: 'application/json' } });
      body = await r.json();
    } catch {
      if (attempt < 5) { await new Promise((ok) => setTimeout(ok, 2000)); return submit(hash, attempt + 1); }
      return say('Could not reach the server. Check your connection and submit the transaction hash again.', 'error');
    }
    if (r.status === 200) { say(''); $('tx').value = ''; return render(body); }
    if (r.status === 402 && body.error === 'underpaid') {
      $('tx').value = '';
      say('Payment received, but it does not cover the full amount. Please pay the rest.', 'warn');
      return refresh();
    }
    if ((r.status === 402 && body.error === 'payment_pending') || r.status === 503) {
      if (attempt < 30) {
        say('Waiting for the transaction to be confirmed…');
        const wait = Number(r.headers.get('retry-after') || 2) * 1000;
        await new Promise((ok) => setTimeout(ok, wait));
        return submit(hash, attempt + 1);
      }
      return say('The transaction is not confirmed yet. Submit the hash again in a minute.', 'error');
    }
    if (r.status === 402) return say(REASONS[body.error] || 'The payment could not be verified (' + body.error + ').', 'error');
    say((body.error && body.error.message) || 'The payment could not be accepted.', 'error');
    refresh();
  }

  async function payWithWallet() {
    const eth = window.ethereum;
    if (!eth) return say('No browser wallet found. Scan the QR code with a mobile wallet, or send USDC to the address below and paste the transaction hash.', 'error');
    const button = $('wallet');
    button.disabled = true; busy = true;
    try {
      say('Connecting to your wallet…');
      const accounts = await eth.request({ method: 'eth_requestAccounts' });
      const from = accounts[0];
      const chainId = '0x' + s.chain_id.toString(16);
      if (parseInt(await eth.request({ method: 'eth_chainId' }), 16) !== s.chain_id) {
        say('Switching your wallet to ' + boot.network_label + '…');
        await eth.request({ method: 'wallet_switchEthereumChain', params: [{ chainId }] });
      }
      const due = BigInt(s.amount_due_atomic);
      const data = '0xa9059cbb' + s.recipient.slice(2).toLowerCase().padStart(64, '0') + due.toString(16).padStart(64, '0');
      say('Confirm the payment of ' + fmt(due) + ' USDC in your wallet…');
      const hash = await eth.request({ method: 'eth_sendTransaction', params: [{ from, to: s.asset, data }] });
      say('Payment sent. Waiting for confirmation…');
      await submit(hash);
    } catch (err) {
      const code = err && err.code;
      say(code === 4001 ? 'You rejected the request in your wallet.'
        : code === 4902 ? 'Your wallet does not know this network. Add ' + boot.network_label + ' to it, or pay by QR code.'
        : 'Wallet error: ' + ((err && err.message) || err), 'error');
    } finally { button.disabled = false; busy = false; }
  }

  $('wallet').addEventListener('click', payWithWallet);
  $('txform').addEventListener('submit', (e) => {
    e.preventDefault();
    const hash = $('tx').value.trim();
    if (!/^0x[0-9a-fA-F]{64}$/.test(hash)) return say(REASONS.invalid_proof, 'error');
    say('Checking the transaction…');
    submit(hash);
  });
  $('copy').addEventListener('click', async () => {
    const text = s.recipient;
    try { await navigator.clipboard.writeText(text); }
    catch {
      const range = document.createRange(); range.selectNodeContents($('recipient'));
      const sel = getSelection(); sel.removeAllRanges(); sel.addRange(range); document.execCommand('copy');
    }
    $('copy').textContent = 'Copied'; setTimeout(() => { $('copy').textContent = 'Copy'; }, 1500);
  });
  render(s);
  if (s.status === 'pending') { poll(); tick(); tickTimer = setInterval(tick, 1000); }
})();
`

const hash = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`

/** default-src 'none': only the pinned inline style and script, fetches to this origin, and inline SVG. */
export const PAGE_CSP =
  `default-src 'none'; style-src ${hash(STYLE)}; script-src ${hash(SCRIPT)}; connect-src 'self'; ` +
  "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
export const MESSAGE_CSP = `default-src 'none'; style-src ${hash(STYLE)}; base-uri 'none'; frame-ancestors 'none'`

function esc(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  )
}

/** JSON inside <script type="application/json">: '<' escaped so no text can close the element. */
function jsonBlock(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029')
}

function formatUsdc(atomic: string): string {
  const n = BigInt(atomic)
  const whole = (n / 1_000_000n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',')
  const frac = (n % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '')
  return frac ? `${whole}.${frac}` : whole
}

function shell(title: string, body: string, script: string): string {
  return (
    `<!doctype html><html lang="en"><head><meta charset="utf-8">` +
    `<meta name="viewport" content="width=device-width,initial-scale=1">` +
    `<meta name="referrer" content="no-referrer"><meta name="robots" content="noindex"><link rel="icon" href="data:,">` +
    `<title>${esc(title)}</title><style>${STYLE}</style></head><body>${body}` +
    `<footer>Payments by tollgate · USDC</footer>${script}</body></html>`
  )
}

export function renderCheckoutPage(input: PageInput): string {
  const s = input.status
  const paid = s.status === 'paid'
  const pending = s.status === 'pending'
  const gone = !paid && !pending
  const received = BigInt(s.amount_received_atomic)
  const initial = (s.business_name.trim()[0] ?? '·').toUpperCase()
  const boot = {
    status: s,
    network_label: input.networkLabel,
    status_url: `/pay/${s.id}/status`,
    pay_url: `/pay/${s.id}`,
    qr_url: `/pay/${s.id}/qr.svg`,
  }
  const head =
    `<section class="head"><div class="merchant"><span class="logo" aria-hidden="true">${esc(initial)}</span>` +
    `<span id="merchant">${esc(s.business_name)}</span></div>` +
    `<p class="desc" id="description">${esc(s.description)}</p>` +
    `<div class="label" id="due-label">${paid ? 'Paid' : received > 0n ? 'Left to pay' : 'Amount due'}</div>` +
    `<div class="amount"><span id="due">${formatUsdc(paid ? s.amount_received_atomic : s.amount_due_atomic)}</span><small>USDC</small></div>` +
    `<div class="net" id="network">${esc(input.networkLabel)}</div>` +
    `<p class="partial" id="partial"${pending && received > 0n ? '' : ' hidden'}>Received ${formatUsdc(s.amount_received_atomic)} USDC. ${formatUsdc(s.amount_due_atomic)} USDC left to pay.</p>` +
    (pending
      ? `<p class="expires" id="expires"></p><p class="how">Pay with a browser wallet in one click, or scan the code with a mobile wallet. ` +
        `The page updates by itself once the payment is confirmed on chain.</p>`
      : '') +
    `</section>`
  const pay =
    `<div id="pay"${pending ? '' : ' hidden'}>` +
    `<button class="primary" id="wallet" type="button">Pay with browser wallet</button>` +
    `<p class="msg" id="msg" role="status" aria-live="polite"></p>` +
    `<div class="or">or send USDC from any wallet</div>` +
    `<div class="manual"><div class="qr" id="qr" title="${esc(input.eip681 ?? '')}">${input.qrSvg ?? ''}</div>` +
    `<dl class="f f-send"><dt>Send exactly</dt><dd id="due-copy">${formatUsdc(s.amount_due_atomic)} USDC</dd></dl>` +
    `<dl class="f f-net"><dt>Network</dt><dd>${esc(input.networkLabel)} · chain ${s.chain_id}</dd></dl>` +
    `<dl class="f f-addr"><dt>To address</dt><dd class="copyrow"><span class="mono" id="recipient">${esc(s.recipient)}</span>` +
    `<button class="copy" id="copy" type="button">Copy</button></dd></dl>` +
    `<dl class="f f-asset"><dt>USDC contract</dt><dd class="mono">${esc(s.asset)}</dd></dl>` +
    `<form id="txform"><label for="tx">Already sent it? Paste the transaction hash</label>` +
    `<div class="inrow"><input id="tx" name="tx" placeholder="0x…" autocomplete="off" spellcheck="false">` +
    `<button class="secondary" type="submit">Submit</button></div></form></div></div>`

  const txLink = s.transaction
    ? s.transaction_url
      ? `<a class="mono" id="r-tx" href="${esc(s.transaction_url)}" target="_blank" rel="noopener noreferrer">${esc(s.transaction)}</a>`
      : `<a class="mono" id="r-tx">${esc(s.transaction)}</a>`
    : `<a class="mono" id="r-tx" target="_blank" rel="noopener noreferrer"></a>`
  const receipt =
    `<div class="receipt" id="receipt"${paid ? '' : ' hidden'}><div class="check" aria-hidden="true">✓</div>` +
    `<h2>Payment received</h2><p class="msg">Thank you. ${esc(s.business_name)} has been paid.</p>` +
    `<dl><div><dt>Amount</dt><dd id="r-amount">${formatUsdc(s.amount_received_atomic)} USDC</dd></div>` +
    `<div><dt>Transaction</dt><dd>${txLink}</dd></div>` +
    `<div><dt>Paid at</dt><dd id="r-when">${s.paid_at ? esc(new Date(s.paid_at).toUTCString()) : ''}</dd></div></dl>` +
    (s.success_url
      ? `<a class="primary" id="success" href="${esc(s.success_url)}">Continue to ${esc(s.business_name)}</a>`
      : '') +
    `</div>`
  const goneBlock =
    `<div class="gone" id="gone"${gone ? '' : ' hidden'}><h1 id="gone-title">${s.status === 'canceled' ? 'This payment was canceled' : 'This payment has expired'}</h1>` +
    `<p>No payment can be made here any more. If you sent USDC anyway, it will be refunded to the sending address.</p></div>`
  const body = `<main>${head}<section class="body">${pay}${receipt}${goneBlock}</section></main>`
  const script = `<script type="application/json" id="checkout-data">${jsonBlock(boot)}</script><script>${SCRIPT}</script>`
  return shell(`Pay ${s.business_name}`, body, script)
}

/** Unknown, expired or canceled: a clear page, no scripts. */
export function renderMessagePage(m: { title: string; message: string; businessName?: string }): string {
  const body =
    `<main><section class="body gone">${m.businessName ? `<div class="merchant">${esc(m.businessName)}</div><br>` : ''}` +
    `<h1>${esc(m.title)}</h1><p>${esc(m.message)}</p></section></main>`
  return shell(m.title, body, '')
}
