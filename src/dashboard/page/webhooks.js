// Webhooks: endpoints, rotate secret, recent deliveries, redeliver.
import { act, api, onSubmit, PAGE_SIZE, query } from './api.js'
import { showSecret } from './dialogs.js'
import { $, emptyRow, flash, h, rowButton, statusBadge, td, when } from './dom.js'

let deliveriesOf = null

function webhookRow(w) {
  const rotate = (ev) =>
    act(ev.currentTarget, async () => {
      const rotated = await api(`/webhooks/${w.id}/rotate-secret`, { method: 'POST' })
      showSecret(
        'New signing secret',
        `The previous secret keeps signing beside it until ${when(rotated.previous_secret_expires_at)}.`,
        rotated.secret,
      )
    })
  return h(
    'tr',
    { dataset: { id: w.id } },
    td('URL', h('span', { class: 'mono', text: w.url })),
    td('Events', w.events.join(', ')),
    td('Status', statusBadge(w.status)),
    td(
      'Actions',
      h(
        'div',
        { class: 'row-actions' },
        rowButton('Deliveries', `Recent deliveries to ${w.url}`, (ev) =>
          act(ev.currentTarget, () => loadDeliveries(w)),
        ),
        rowButton('Rotate secret', `Rotate signing secret of ${w.url}`, rotate),
      ),
      'actions-cell',
    ),
  )
}

export async function loadWebhooks() {
  const list = await api(`/webhooks${query({ limit: 100 })}`)
  const body = $('webhooks-body')
  if (list.data.length === 0) {
    emptyRow(body, 4, 'No webhook endpoints yet.')
    $('deliveries-card').hidden = true
    return
  }
  body.replaceChildren(...list.data.map(webhookRow))
  const shown = list.data.find((w) => w.id === deliveriesOf?.id) || list.data[0]
  await loadDeliveries(shown)
}

function deliveryRow(webhook, d) {
  const last = d.attempts[d.attempts.length - 1]
  const redeliver = (ev) =>
    act(ev.currentTarget, async () => {
      await api(`/events/${d.event_id}/redeliver`, { method: 'POST', body: { webhook_id: webhook.id } })
      await loadDeliveries(webhook)
      flash(`Event ${d.event_id} queued for redelivery`)
    })
  return h(
    'tr',
    { dataset: { id: d.id, event: d.event_id } },
    td('Time', when(d.created_at)),
    td('Event', h('span', {}, d.event_type, h('br'), h('span', { class: 'mono muted', text: d.event_id }))),
    td(
      'Status',
      h(
        'span',
        {},
        statusBadge(d.status),
        ` ${d.attempts_count} attempt${d.attempts_count === 1 ? '' : 's'}`,
      ),
    ),
    td('Last response', last ? (last.status_code ? `HTTP ${last.status_code}` : last.error || '–') : '–'),
    td(
      'Actions',
      rowButton('Redeliver', `Redeliver ${d.event_type} ${d.event_id}`, redeliver),
      'actions-cell',
    ),
  )
}

async function loadDeliveries(webhook) {
  deliveriesOf = webhook
  $('deliveries-card').hidden = false
  $('deliveries-of').textContent = webhook.url
  const list = await api(`/webhooks/${webhook.id}/deliveries${query({ limit: PAGE_SIZE })}`)
  const body = $('deliveries-body')
  if (list.data.length === 0) return emptyRow(body, 5, 'Nothing delivered yet.')
  body.replaceChildren(...list.data.map((d) => deliveryRow(webhook, d)))
}

onSubmit('webhook-form', async (form) => {
  const w = await api('/webhooks', {
    method: 'POST',
    body: { url: $('wh-url').value.trim() },
    idempotent: true,
  })
  form.reset()
  deliveriesOf = w
  await loadWebhooks()
  showSecret(
    'Webhook signing secret',
    'Verify each delivery with it (Standard Webhooks). It is shown once.',
    w.secret,
  )
})
