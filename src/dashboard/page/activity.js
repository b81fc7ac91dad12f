// What came in and went out: the overview (balance, 30 days of revenue, top endpoints), the calls (filtered
// by endpoint, upstream status and UTC dates) and the payouts with their on-chain transactions.
import { api, endpointLabel, endpointNames, onSubmit, PAGE_SIZE, query } from './api.js'
import { bars } from './chart.js'
import { $, emptyRow, h, shortHex, shortUsd, statusBadge, td, usd, when } from './dom.js'
import { pager } from './pager.js'

export async function loadOverview() {
  const [account, report] = await Promise.all([api('/account'), api('/reports/revenue?days=30')])
  const b = account.balance
  $('stat-earned').textContent = usd(b.owner_share.amount)
  $('stat-unpaid').textContent = usd(b.pending.amount)
  $('stat-inflight').textContent = usd(b.in_flight.amount)
  $('stat-paidout').textContent = usd(b.paid_out.amount)
  bars($('revenue-chart'), report.days, shortUsd)
  const body = $('top-endpoints')
  if (report.top_endpoints.length === 0) return emptyRow(body, 3, 'No paid calls in the last 30 days.')
  body.replaceChildren(
    ...report.top_endpoints.map((e) =>
      h(
        'tr',
        {},
        td('Endpoint', e.name || e.endpoint_id),
        td('Calls', String(e.calls), 'num'),
        td('Revenue', usd(e.amount), 'num'),
      ),
    ),
  )
}

/** Who called an endpoint with identity rules: "acme · multiplier (rule 1)", "unsigned · endpoint price". */
function agentLabel(a) {
  if (!a) return '—'
  const rule = a.rule === null ? 'no rule' : `rule ${a.rule + 1}`
  return h('span', {
    title: a.failure ? `signature not verified: ${a.failure}` : a.keyid || '',
    text: `${a.signer} · ${a.action.replace('_', ' ')} (${rule})`,
  })
}

/** A WebSocket session's row: "session · 5.2 s · 1,003 messages · ended by client"; a top-up's names its session. */
function sessionLabel(c) {
  const s = c.session
  if (s.charge_atomic === null) return h('span', { title: s.call_id, text: 'session top-up' })
  const seconds = (s.duration_ms / 1000).toLocaleString('en-US', { maximumFractionDigits: 1 })
  const messages = c.usage?.quantities?.messages
  const parts = ['session', `${seconds} s`]
  if (messages !== undefined) parts.push(`${messages.toLocaleString('en-US')} messages`)
  parts.push(`ended by ${s.ended_by.replace('_', ' ')}`)
  return h('span', { title: c.id, text: parts.join(' · ') })
}

/** The session's whole charge on its row (its payments' shares together); a top-up's share in brackets. */
function amountCell(c) {
  const s = c.session
  if (!s) return usd(c.amount)
  if (s.charge_atomic === null)
    return h('span', { class: 'muted', title: 'counted in its session', text: `(${usd(c.amount)})` })
  return h('span', {
    title: `${s.payments} payment${s.payments === 1 ? '' : 's'}`,
    text: usd(s.charge),
  })
}

const callRow = (c) =>
  h(
    'tr',
    { dataset: { id: c.id } },
    td('Time', when(c.created_at)),
    td('Endpoint', endpointLabel(c.endpoint_id)),
    td('Payer', h('span', { class: 'mono', title: c.payer, text: shortHex(c.payer) })),
    // The protocol that paid (x402, mpp, tx-hash, …); the exact scheme on hover.
    td('Paid by', h('span', { title: c.scheme || '', text: c.protocol || '—' })),
    td(
      'Status',
      c.session ? sessionLabel(c) : h('span', { class: 'mono', text: `${c.method} ${c.upstream_status}` }),
    ),
    td('Agent', agentLabel(c.agent)),
    td('Amount', amountCell(c), 'num'),
  )

export const callsPager = pager('calls', async (cursor) => {
  if ($('calls-endpoint').options.length <= 1) {
    const list = await endpointNames()
    $('calls-endpoint').append(...list.map((e) => h('option', { value: e.id, text: e.name || e.id })))
  }
  const to = $('calls-to').value
  const list = await api(
    `/calls${query({
      limit: PAGE_SIZE,
      starting_after: cursor,
      endpoint_id: $('calls-endpoint').value,
      upstream_status: $('calls-status').value,
      created_gte: $('calls-from').value,
      // "To" includes its whole day.
      created_lt: to ? new Date(Date.parse(to) + 86_400_000).toISOString().slice(0, 10) : '',
    })}`,
  )
  const body = $('calls-body')
  if (list.data.length === 0) emptyRow(body, 7, 'No calls match.')
  else body.replaceChildren(...list.data.map(callRow))
  return list
})
onSubmit('calls-filter', () => callsPager.first())

const payoutRow = (p) =>
  h(
    'tr',
    { dataset: { id: p.id } },
    td('Created', when(p.created_at)),
    td('Kind', `${p.kind} · ${p.entries_count} ${p.entries_count === 1 ? 'entry' : 'entries'}`),
    td('Amount', usd(p.amount), 'num'),
    td('Status', statusBadge(p.status)),
    td(
      'Transaction',
      p.transaction
        ? h('span', { class: 'mono', title: p.transaction, text: shortHex(p.transaction) })
        : p.failure_reason || '–',
    ),
  )

export const payoutsPager = pager('payouts', async (cursor) => {
  const list = await api(`/payouts${query({ limit: PAGE_SIZE, starting_after: cursor })}`)
  const body = $('payouts-body')
  if (list.data.length === 0) emptyRow(body, 5, 'No payouts yet.')
  else body.replaceChildren(...list.data.map(payoutRow))
  return list
})
