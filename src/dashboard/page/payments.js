// Payments: create a link, copy payment_url, cancel a pending one, refund a paid one.
import { act, api, onSubmit, PAGE_SIZE, query } from './api.js'
import { $, copy, emptyRow, flash, h, rowButton, statusBadge, td, usd, when } from './dom.js'
import { pager } from './pager.js'

export const paymentsPager = pager('payments', async (cursor) => {
  // The latest refunds, to show each payment's beside it (an older refund shows on its payment's own query).
  const [list, refunds] = await Promise.all([
    api(`/payments${query({ limit: PAGE_SIZE, starting_after: cursor })}`),
    api(`/refunds${query({ limit: 100 })}`).catch(() => ({ data: [] })),
  ])
  const byPayment = new Map()
  for (const r of refunds.data) {
    if (!r.payment_id) continue
    const list = byPayment.get(r.payment_id) || []
    list.push(r)
    byPayment.set(r.payment_id, list)
  }
  const body = $('payments-body')
  if (list.data.length === 0) emptyRow(body, 5, 'No payments yet: create a link above.')
  else body.replaceChildren(...list.data.map((p) => paymentRow(p, byPayment.get(p.id) || [])))
  return list
})

function refundNote(refunds) {
  if (refunds.length === 0) return null
  const live = refunds.filter((r) => r.status !== 'failed')
  const total = live.reduce((s, r) => s + r.amount, 0)
  const pending = live.some((r) => r.status === 'pending')
  return h('span', { class: 'note', text: `${usd(total)} refunded${pending ? ' (pending payout)' : ''}` })
}

function paymentRow(p, refunds) {
  const actions = h(
    'div',
    { class: 'row-actions' },
    rowButton('Copy link', `Copy payment link of ${p.description}`, () =>
      copy(p.payment_url, 'Payment link'),
    ),
    h('a', { href: p.payment_url, target: '_blank', rel: 'noopener', class: 'small-link', text: 'Open' }),
  )
  const cancel = (ev) =>
    act(ev.currentTarget, async () => {
      await api(`/payments/${p.id}/cancel`, { method: 'POST' })
      await paymentsPager.reload()
      flash(`Payment ${p.id} canceled`)
    })
  if (p.status === 'pending') actions.append(rowButton('Cancel', `Cancel payment ${p.description}`, cancel))
  if (p.status === 'paid')
    actions.append(
      rowButton('Refund', `Refund payment ${p.description}`, () => openRefund(p), 'small danger'),
    )
  return h(
    'tr',
    { dataset: { id: p.id } },
    td('Created', when(p.created_at)),
    td('Description', p.description),
    td('Amount', usd(p.amount), 'num'),
    td('Status', h('span', { class: 'stack' }, statusBadge(p.status), refundNote(refunds))),
    td('Actions', actions, 'actions-cell'),
  )
}

onSubmit('payment-form', async (form) => {
  const p = await api('/payments', {
    method: 'POST',
    body: { amount: $('pay-amount').value.trim(), description: $('pay-description').value.trim() },
    idempotent: true,
  })
  form.reset()
  await paymentsPager.first()
  flash(`Payment link created: ${p.payment_url}`)
})

let refunding = null
function openRefund(p) {
  refunding = p
  $('refund-payment').textContent = `${p.description} · ${usd(p.amount_received)} received`
  $('refund-amount').value = ''
  $('refund-reason').value = ''
  $('refund-dialog').showModal()
}
$('refund-dialog').addEventListener('close', () => {
  if ($('refund-dialog').returnValue !== 'refund' || !refunding) return
  const p = refunding
  refunding = null
  act(null, async () => {
    const body = { payment_id: p.id }
    const amount = $('refund-amount').value.trim()
    const reason = $('refund-reason').value.trim()
    if (amount) body.amount = amount
    if (reason) body.reason = reason
    const refund = await api('/refunds', { method: 'POST', body, idempotent: true })
    await paymentsPager.reload()
    flash(
      `Refund ${refund.id} of ${usd(refund.amount)} is ${refund.status}: it is sent in the next payout batch`,
    )
  })
})
