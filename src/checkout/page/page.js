// The hosted checkout's behaviour: live status (polling), the browser wallet (EIP-1193), the pasted hash.
// The page's data arrives as JSON in body[data-boot]; no value is ever interpolated into this script.
const boot = JSON.parse(document.body.dataset.boot)
const $ = (id) => document.getElementById(id)
let s = boot.status
let qrDue = s.amount_due_atomic
const fmt = (atomic) => {
  const n = BigInt(atomic),
    w = n / 1000000n,
    f = (n % 1000000n).toString().padStart(6, '0').replace(/0+$/, '')
  return w.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',') + (f ? '.' + f : '')
}
const say = (text, kind) => {
  const m = $('msg')
  m.textContent = text
  m.className = 'msg' + (kind ? ' ' + kind : '')
}
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms))
const REASONS = {
  invalid_proof: 'That is not a transaction hash (0x followed by 64 hex characters).',
  proof_already_used: 'That transaction has already been used for another payment.',
  wrong_recipient: 'That transaction did not send USDC to the address shown.',
  wrong_asset: 'That transaction sent a different token, not USDC.',
  no_transfer: 'That transaction contains no USDC transfer.',
  transaction_failed: 'That transaction failed on chain.',
  proof_too_old: 'That transaction is too old to be used.',
  own_settlement: 'That transaction is a settlement sent by this service, not a payment from you.',
  authorization_transfer:
    'That transfer was made by a signed authorization: pay with the authorization itself, not its transaction.',
  unsupported_proof: 'This kind of payment proof is not accepted here.',
  transaction_not_found:
    'No transaction with this hash was found on the network. Check that you copied the whole hash and sent the payment on this network.',
}

function render(next) {
  s = next
  document.body.dataset.status = s.status
  const received = BigInt(s.amount_received_atomic)
  document.body.dataset.partial = String(received > 0n)
  if (s.status === 'paid') return showReceipt()
  if (s.status !== 'pending') return showGone()
  $('due').textContent = fmt(s.amount_due_atomic)
  $('due-copy').textContent = fmt(s.amount_due_atomic) + ' USDC'
  $('received').textContent = fmt(s.amount_received_atomic)
  $('left').textContent = fmt(s.amount_due_atomic)
  $('due-label').textContent = received > 0n ? 'Left to pay' : 'Amount due'
  if (s.amount_due_atomic !== qrDue) {
    qrDue = s.amount_due_atomic
    fetch(boot.qr_url, { cache: 'no-store' })
      .then((r) => (r.ok ? r.text() : null))
      .then((svg) => {
        if (svg) $('qr').innerHTML = svg
      })
  }
}

function showReceipt() {
  $('due-label').textContent = 'Paid'
  $('due').textContent = fmt(s.amount_received_atomic)
  $('r-amount').textContent = fmt(s.amount_received_atomic) + ' USDC'
  const tx = $('r-tx')
  tx.textContent = s.transaction || ''
  if (s.transaction_url) tx.setAttribute('href', s.transaction_url)
  else tx.removeAttribute('href')
  $('r-when').textContent = s.paid_at ? new Date(s.paid_at).toLocaleString() : ''
  stopTimers()
}

function showGone() {
  $('due-label').textContent = s.status === 'expired' ? 'Expired' : 'Canceled'
  $('due').textContent = fmt(s.amount_atomic)
  $('gone-title').textContent =
    s.status === 'expired' ? 'This payment has expired' : 'This payment was canceled'
  stopTimers()
}

let pollTimer = 0,
  tickTimer = 0
function stopTimers() {
  clearTimeout(pollTimer)
  clearInterval(tickTimer)
}
async function refresh() {
  try {
    const r = await fetch(boot.status_url, { headers: { accept: 'application/json' }, cache: 'no-store' })
    if (r.ok) render(await r.json())
  } catch {}
}
// A plain transfer is matched on the server by its amount: polling is how the page learns it was paid.
function poll() {
  pollTimer = setTimeout(async () => {
    if (!document.hidden) await refresh()
    if (s.status === 'pending') poll()
  }, boot.poll_ms)
}
function tick() {
  const left = Math.max(0, Date.parse(s.expires_at) - Date.now())
  const m = Math.floor(left / 60000),
    sec = Math.floor(left / 1000) % 60,
    h = Math.floor(m / 60)
  $('expires').textContent =
    left > 0
      ? 'Expires in ' + (h > 0 ? h + 'h ' + (m % 60) + 'm' : m + ':' + String(sec).padStart(2, '0'))
      : 'Expired'
  if (left === 0) refresh()
}

// Submits a hash; waits for it while the chain does not know it yet, but only for a bounded time.
async function submit(hash) {
  const started = Date.now()
  for (let failures = 0; ; ) {
    let r, body
    try {
      r = await fetch(boot.pay_url, {
        method: 'POST',
        headers: { 'x-payment': hash, accept: 'application/json' },
      })
      body = await r.json()
    } catch {
      if (++failures < 5) {
        await sleep(2000)
        continue
      }
      return say(
        'Could not reach the server. Check your connection and submit the transaction hash again.',
        'error',
      )
    }
    if (r.status === 200) {
      say('')
      $('tx').value = ''
      return render(body)
    }
    if (r.status === 402 && body.error === 'underpaid') {
      $('tx').value = ''
      say('Payment received, but it does not cover the full amount. Please pay the rest.', 'warn')
      return refresh()
    }
    if ((r.status === 402 && body.error === 'payment_pending') || r.status === 503) {
      const waited = Date.now() - started
      if (body.transaction_status === 'unknown' && waited >= boot.unknown_hash_after_ms) {
        return say(
          'No transaction with this hash was found on ' +
            boot.network_label +
            '. Check that you copied the whole hash and sent the payment on this network.',
          'error',
        )
      }
      if (waited >= boot.pending_hash_after_ms) {
        return say(
          'The transaction is not confirmed yet. This page will update by itself once it is.',
          'warn',
        )
      }
      say(
        body.transaction_status === 'unknown'
          ? 'Looking for the transaction…'
          : 'Waiting for the transaction to be confirmed…',
      )
      await sleep(Math.min(5000, Number(r.headers.get('retry-after') || 2) * 1000))
      continue
    }
    if (r.status === 402)
      return say(REASONS[body.error] || 'The payment could not be verified (' + body.error + ').', 'error')
    say(body.error?.message || 'The payment could not be accepted.', 'error')
    return refresh()
  }
}

async function payWithWallet() {
  const eth = window.ethereum
  if (!eth)
    return say(
      'No browser wallet found. Scan the QR code with a mobile wallet, or send exactly the amount shown to the address below.',
      'error',
    )
  const button = $('wallet')
  button.disabled = true
  try {
    say('Connecting to your wallet…')
    const accounts = await eth.request({ method: 'eth_requestAccounts' })
    const from = accounts[0]
    const chainId = '0x' + s.chain_id.toString(16)
    if (parseInt(await eth.request({ method: 'eth_chainId' }), 16) !== s.chain_id) {
      say('Switching your wallet to ' + boot.network_label + '…')
      await eth.request({ method: 'wallet_switchEthereumChain', params: [{ chainId }] })
    }
    const due = BigInt(s.amount_due_atomic)
    const data =
      '0xa9059cbb' + s.recipient.slice(2).toLowerCase().padStart(64, '0') + due.toString(16).padStart(64, '0')
    say('Confirm the payment of ' + fmt(due) + ' USDC in your wallet…')
    const hash = await eth.request({ method: 'eth_sendTransaction', params: [{ from, to: s.asset, data }] })
    say('Payment sent. Waiting for confirmation…')
    await submit(hash)
  } catch (err) {
    const code = err?.code
    say(
      code === 4001
        ? 'You rejected the request in your wallet.'
        : code === 4902
          ? 'Your wallet does not know this network. Add ' + boot.network_label + ' to it, or pay by QR code.'
          : 'Wallet error: ' + (err?.message || err),
      'error',
    )
  } finally {
    button.disabled = false
  }
}

$('wallet').addEventListener('click', payWithWallet)
$('txform').addEventListener('submit', (e) => {
  e.preventDefault()
  const hash = $('tx').value.trim()
  if (!/^0x[0-9a-fA-F]{64}$/.test(hash)) return say(REASONS.invalid_proof, 'error')
  say('Checking the transaction…')
  submit(hash)
})
$('copy').addEventListener('click', async () => {
  try {
    await navigator.clipboard.writeText(s.recipient)
  } catch {
    const range = document.createRange()
    range.selectNodeContents($('recipient'))
    const sel = getSelection()
    sel.removeAllRanges()
    sel.addRange(range)
    document.execCommand('copy')
  }
  $('copy').textContent = 'Copied'
  setTimeout(() => {
    $('copy').textContent = 'Copy'
  }, 1500)
})
render(s)
if (s.status === 'pending') {
  poll()
  tick()
  tickTimer = setInterval(tick, 1000)
}
