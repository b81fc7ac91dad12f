// The merchant dashboard. Every read and every change is a call to the same /api/v1 routes an API client
// uses: the session cookie (HttpOnly, set by POST /api/v1/dashboard/sessions) authenticates, and each state
// change carries the session's CSRF token in X-CSRF-Token. Data reaches the page only through textContent
// and attributes, never as HTML.
;(() => {
  const API = '/api/v1'
  const PAGE_SIZE = 20
  const state = { csrf: null, account: null, expiresAt: null, page: null, endpoints: new Map() }
  const $ = (id) => document.getElementById(id)

  // --- Small DOM and format helpers -------------------------------------------------------------------

  /** h('td', { class: 'num', dataset: {label: 'Price'} }, 'text', node…) */
  function h(tag, props, ...children) {
    const node = document.createElement(tag)
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue
      if (k === 'dataset') Object.assign(node.dataset, v)
      else if (k === 'onclick') node.addEventListener('click', v)
      else if (k === 'text') node.textContent = v
      else node.setAttribute(k, v === true ? '' : String(v))
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c)
    return node
  }

  const usd = (amount) =>
    `$${Number(amount).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`
  const shortUsd = (amount) =>
    amount >= 1000
      ? `$${(amount / 1000).toLocaleString('en-US', { maximumFractionDigits: 1 })}k`
      : usd(amount)
  const when = (iso) =>
    iso
      ? new Date(iso).toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' }) +
        ' UTC'
      : '–'
  const shortHex = (hex) => (hex && hex.length > 20 ? `${hex.slice(0, 10)}…${hex.slice(-6)}` : hex || '–')
  const idempotencyKey = () => (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2))

  function statusBadge(status) {
    const tone =
      { active: 'ok', enabled: 'ok', paid: 'ok', confirmed: 'ok', delivered: 'ok' }[status] ||
      { pending: 'warn', submitted: 'warn' }[status] ||
      { failed: 'bad', disabled: 'bad', expired: 'bad', canceled: 'bad' }[status] ||
      ''
    return h('span', { class: `status ${tone}`, text: status })
  }

  /** A table cell that names its column on a phone (dashboard.css shows data-label before the value). */
  const td = (label, content, cls) => h('td', { class: cls, dataset: { label } }, content)

  function emptyRow(tbody, columns, text) {
    tbody.replaceChildren(h('tr', {}, h('td', { class: 'empty', colspan: columns, text })))
  }

  function flash(text, bad) {
    const f = $('flash')
    f.textContent = text
    f.classList.toggle('bad', Boolean(bad))
  }

  async function copy(text, what) {
    try {
      await navigator.clipboard.writeText(text)
      flash(`${what} copied`)
    } catch {
      flash(`${what}: ${text}`)
    }
  }

  // --- The API --------------------------------------------------------------------------------------------

  class ApiFailure extends Error {
    constructor(status, body) {
      super(body?.error?.message || `request failed (${status})`)
      this.status = status
      this.code = body?.error?.code
    }
  }

  /** One call to /api/v1 with the session cookie; a state change sends the CSRF token (and an idempotency key when asked). */
  async function api(path, { method = 'GET', body, idempotent } = {}) {
    const headers = { accept: 'application/json' }
    if (body !== undefined) headers['content-type'] = 'application/json'
    if (method !== 'GET' && state.csrf) headers['x-csrf-token'] = state.csrf
    if (idempotent) headers['idempotency-key'] = idempotencyKey()
    const res = await fetch(API + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
    })
    const json = await res.json().catch(() => null)
    if (res.status === 401 && !path.startsWith('/dashboard/sessions')) {
      showSignIn(json?.error?.message || 'Your session has ended; sign in again.')
    }
    if (!res.ok) throw new ApiFailure(res.status, json)
    return json
  }

  /** Runs an action from a button or form: disables it meanwhile, reports the outcome in the status line. */
  async function act(control, fn) {
    if (control) control.disabled = true
    try {
      await fn()
    } catch (err) {
      if (err.status !== 401) flash(err.message, true)
    } finally {
      if (control) control.disabled = false
    }
  }

  // --- Session ----------------------------------------------------------------------------------------

  function signedIn(session) {
    state.csrf = session.csrf_token
    state.account = session.account
    state.expiresAt = session.expires_at
    $('business-name').textContent = session.account.business_name
    $('mode-badge').hidden = session.account.livemode
    document.body.dataset.state = 'app'
    $('signin').hidden = true
    $('app').hidden = false
    route()
  }

  function showSignIn(message) {
    state.csrf = null
    state.account = null
    document.body.dataset.state = 'signin'
    $('app').hidden = true
    $('signin').hidden = false
    const err = $('signin-error')
    err.textContent = message || ''
    err.hidden = !message
    $('signin-key').focus()
  }

  async function signIn(apiKey) {
    const session = await api('/dashboard/sessions', { method: 'POST', body: { api_key: apiKey } })
    signedIn(session)
    return session
  }

  $('signin-form').addEventListener('submit', (e) => {
    e.preventDefault()
    const input = $('signin-key')
    const button = e.target.querySelector('button')
    act(button, async () => {
      try {
        await signIn(input.value.trim())
        input.value = ''
      } catch (err) {
        showSignIn(err.message)
      }
    })
  })

  $('signout').addEventListener('click', (e) =>
    act(e.target, async () => {
      await api('/dashboard/session', { method: 'DELETE' })
      showSignIn('Signed out.')
    }),
  )

  // --- Pages --------------------------------------------------------------------------------------------

  const PAGES = {
    overview: loadOverview,
    endpoints: loadEndpoints,
    calls: () => callsPager.first(),
    payments: () => paymentsPager.first(),
    payouts: () => payoutsPager.first(),
    webhooks: loadWebhooks,
    keys: loadKeys,
  }

  function route() {
    if (!state.account) return
    const name = location.hash.slice(1) in PAGES ? location.hash.slice(1) : 'overview'
    state.page = name
    for (const p of Object.keys(PAGES)) $(`page-${p}`).hidden = p !== name
    for (const a of document.querySelectorAll('nav a')) {
      if (a.dataset.page === name) a.setAttribute('aria-current', 'page')
      else a.removeAttribute('aria-current')
    }
    document.title = `${$(`h-${name}`).textContent} · tollgate dashboard`
    flash('')
    PAGES[name]().catch((err) => {
      if (err.status !== 401) flash(err.message, true)
    })
  }
  window.addEventListener('hashchange', () => {
    route()
    $('main').focus()
  })

  /** Keyset pages over a list route: a stack of starting_after cursors, newest first. */
  function pager(prefix, load) {
    let cursors = [null]
    let index = 0
    const prev = $(`${prefix}-prev`)
    const next = $(`${prefix}-next`)
    async function show() {
      const list = await load(cursors[index])
      prev.disabled = index === 0
      next.disabled = !list.has_more
      if (list.has_more && list.data.length > 0) cursors[index + 1] = list.data[list.data.length - 1].id
    }
    prev.addEventListener('click', () => {
      if (index > 0) index--
      act(prev, show)
    })
    next.addEventListener('click', () => {
      index++
      act(next, show)
    })
    return {
      atFirst: () => index === 0,
      first() {
        cursors = [null]
        index = 0
        return show()
      },
      reload: show,
    }
  }

  const query = (params) => {
    const q = new URLSearchParams()
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== '') q.set(k, v)
    return `?${q}`
  }

  async function endpointNames() {
    const list = await api(`/endpoints${query({ limit: 100 })}`)
    state.endpoints = new Map(list.data.map((e) => [e.id, e]))
    return list.data
  }
  const endpointLabel = (id) => state.endpoints.get(id)?.name || id

  // Overview: the running balance, 30 days of revenue, the top endpoints.
  async function loadOverview() {
    const [account, report] = await Promise.all([api('/account'), api('/reports/revenue?days=30')])
    const b = account.balance
    $('stat-earned').textContent = usd(b.owner_share.amount)
    $('stat-unpaid').textContent = usd(b.pending.amount)
    $('stat-inflight').textContent = usd(b.in_flight.amount)
    $('stat-paidout').textContent = usd(b.paid_out.amount)
    window.tollgateChart.bars($('revenue-chart'), report.days, shortUsd)
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

  // Endpoints: create, edit price, disable / enable.
  async function loadEndpoints() {
    const list = await endpointNames()
    const body = $('endpoints-body')
    if (list.length === 0) return emptyRow(body, 5, 'No endpoints yet: create one above.')
    body.replaceChildren(
      ...list.map((e) => {
        const label = e.name || e.id
        const toggle = e.status === 'active' ? 'Disable' : 'Enable'
        return h(
          'tr',
          { dataset: { id: e.id } },
          td('Name', label),
          td(
            'Metered URL',
            h(
              'span',
              {},
              h('span', { class: 'mono', text: e.metered_url }),
              ' ',
              h('button', {
                type: 'button',
                class: 'small',
                text: 'Copy',
                'aria-label': `Copy metered URL of ${label}`,
                onclick: () => copy(e.metered_url, 'Metered URL'),
              }),
            ),
          ),
          td('Price', usd(e.price), 'num'),
          td('Status', statusBadge(e.status)),
          td(
            'Actions',
            h(
              'div',
              { class: 'row-actions' },
              h('button', {
                type: 'button',
                class: 'small',
                text: 'Edit price',
                'aria-label': `Edit price of ${label}`,
                onclick: () => editPrice(e),
              }),
              h('button', {
                type: 'button',
                class: e.status === 'active' ? 'small danger' : 'small',
                text: toggle,
                'aria-label': `${toggle} ${label}`,
                onclick: (ev) =>
                  act(ev.currentTarget, async () => {
                    const status = e.status === 'active' ? 'disabled' : 'active'
                    await api(`/endpoints/${e.id}`, { method: 'PATCH', body: { status } })
                    await loadEndpoints()
                    flash(`${label} is ${status}`)
                  }),
              }),
            ),
            'actions-cell',
          ),
        )
      }),
    )
  }

  $('endpoint-form').addEventListener('submit', (e) => {
    e.preventDefault()
    const form = e.target
    act(form.querySelector('button'), async () => {
      const body = { upstream_url: $('ep-upstream').value.trim(), price: $('ep-price').value.trim() }
      const name = $('ep-name').value.trim()
      if (name) body.name = name
      const created = await api('/endpoints', { method: 'POST', body, idempotent: true })
      form.reset()
      await loadEndpoints()
      flash(`Endpoint ${created.name || created.id} created: ${created.metered_url}`)
    })
  })

  let editing = null
  function editPrice(endpoint) {
    editing = endpoint
    $('price-endpoint').textContent = endpoint.name || endpoint.id
    $('price-value').value = String(endpoint.price)
    $('price-dialog').showModal()
  }
  $('price-dialog').addEventListener('close', () => {
    const dialog = $('price-dialog')
    if (dialog.returnValue !== 'save' || !editing) return
    const endpoint = editing
    editing = null
    act(null, async () => {
      await api(`/endpoints/${endpoint.id}`, {
        method: 'PATCH',
        body: { price: $('price-value').value.trim() },
      })
      await loadEndpoints()
      flash(`Price of ${endpoint.name || endpoint.id} saved`)
    })
  })

  // Calls: filtered by endpoint, upstream status and UTC dates; keyset pages.
  const callsPager = pager('calls', async (cursor) => {
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
    if (list.data.length === 0) emptyRow(body, 5, 'No calls match.')
    else
      body.replaceChildren(
        ...list.data.map((c) =>
          h(
            'tr',
            { dataset: { id: c.id } },
            td('Time', when(c.created_at)),
            td('Endpoint', endpointLabel(c.endpoint_id)),
            td('Payer', h('span', { class: 'mono', title: c.payer, text: shortHex(c.payer) })),
            td('Status', h('span', { class: 'mono', text: `${c.method} ${c.upstream_status}` })),
            td('Amount', usd(c.amount), 'num'),
          ),
        ),
      )
    return list
  })
  $('calls-filter').addEventListener('submit', (e) => {
    e.preventDefault()
    act(e.target.querySelector('button'), () => callsPager.first())
  })

  // Payments: create a link, copy payment_url, cancel a pending one, refund a paid one.
  const paymentsPager = pager('payments', async (cursor) => {
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
      h('button', {
        type: 'button',
        class: 'small',
        text: 'Copy link',
        'aria-label': `Copy payment link of ${p.description}`,
        onclick: () => copy(p.payment_url, 'Payment link'),
      }),
      h('a', { href: p.payment_url, target: '_blank', rel: 'noopener', class: 'small-link', text: 'Open' }),
    )
    if (p.status === 'pending')
      actions.append(
        h('button', {
          type: 'button',
          class: 'small',
          text: 'Cancel',
          'aria-label': `Cancel payment ${p.description}`,
          onclick: (ev) =>
            act(ev.currentTarget, async () => {
              await api(`/payments/${p.id}/cancel`, { method: 'POST' })
              await paymentsPager.reload()
              flash(`Payment ${p.id} canceled`)
            }),
        }),
      )
    if (p.status === 'paid')
      actions.append(
        h('button', {
          type: 'button',
          class: 'small danger',
          text: 'Refund',
          'aria-label': `Refund payment ${p.description}`,
          onclick: () => openRefund(p),
        }),
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

  $('payment-form').addEventListener('submit', (e) => {
    e.preventDefault()
    const form = e.target
    act(form.querySelector('button'), async () => {
      const p = await api('/payments', {
        method: 'POST',
        body: { amount: $('pay-amount').value.trim(), description: $('pay-description').value.trim() },
        idempotent: true,
      })
      form.reset()
      await paymentsPager.first()
      flash(`Payment link created: ${p.payment_url}`)
    })
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

  // Payouts with their on-chain transactions.
  const payoutsPager = pager('payouts', async (cursor) => {
    const list = await api(`/payouts${query({ limit: PAGE_SIZE, starting_after: cursor })}`)
    const body = $('payouts-body')
    if (list.data.length === 0) emptyRow(body, 5, 'No payouts yet.')
    else
      body.replaceChildren(
        ...list.data.map((p) =>
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
          ),
        ),
      )
    return list
  })

  // Webhooks: endpoints, rotate secret, recent deliveries, redeliver.
  let deliveriesOf = null
  async function loadWebhooks() {
    const list = await api(`/webhooks${query({ limit: 100 })}`)
    const body = $('webhooks-body')
    if (list.data.length === 0) {
      emptyRow(body, 4, 'No webhook endpoints yet.')
      $('deliveries-card').hidden = true
      return
    }
    body.replaceChildren(
      ...list.data.map((w) =>
        h(
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
              h('button', {
                type: 'button',
                class: 'small',
                text: 'Deliveries',
                'aria-label': `Recent deliveries to ${w.url}`,
                onclick: (ev) => act(ev.currentTarget, () => loadDeliveries(w)),
              }),
              h('button', {
                type: 'button',
                class: 'small',
                text: 'Rotate secret',
                'aria-label': `Rotate signing secret of ${w.url}`,
                onclick: (ev) =>
                  act(ev.currentTarget, async () => {
                    const rotated = await api(`/webhooks/${w.id}/rotate-secret`, { method: 'POST' })
                    showSecret(
                      'New signing secret',
                      `The previous secret keeps signing beside it until ${when(rotated.previous_secret_expires_at)}.`,
                      rotated.secret,
                    )
                  }),
              }),
            ),
            'actions-cell',
          ),
        ),
      ),
    )
    const shown = list.data.find((w) => w.id === deliveriesOf?.id) || list.data[0]
    await loadDeliveries(shown)
  }

  async function loadDeliveries(webhook) {
    deliveriesOf = webhook
    $('deliveries-card').hidden = false
    $('deliveries-of').textContent = webhook.url
    const list = await api(`/webhooks/${webhook.id}/deliveries${query({ limit: PAGE_SIZE })}`)
    const body = $('deliveries-body')
    if (list.data.length === 0) return emptyRow(body, 5, 'Nothing delivered yet.')
    body.replaceChildren(
      ...list.data.map((d) => {
        const last = d.attempts[d.attempts.length - 1]
        return h(
          'tr',
          { dataset: { id: d.id, event: d.event_id } },
          td('Time', when(d.created_at)),
          td(
            'Event',
            h('span', {}, d.event_type, h('br'), h('span', { class: 'mono muted', text: d.event_id })),
          ),
          td(
            'Status',
            h(
              'span',
              {},
              statusBadge(d.status),
              ` ${d.attempts_count} attempt${d.attempts_count === 1 ? '' : 's'}`,
            ),
          ),
          td(
            'Last response',
            last ? (last.status_code ? `HTTP ${last.status_code}` : last.error || '–') : '–',
          ),
          td(
            'Actions',
            h('button', {
              type: 'button',
              class: 'small',
              text: 'Redeliver',
              'aria-label': `Redeliver ${d.event_type} ${d.event_id}`,
              onclick: (ev) =>
                act(ev.currentTarget, async () => {
                  await api(`/events/${d.event_id}/redeliver`, {
                    method: 'POST',
                    body: { webhook_id: webhook.id },
                  })
                  await loadDeliveries(webhook)
                  flash(`Event ${d.event_id} queued for redelivery`)
                }),
            }),
            'actions-cell',
          ),
        )
      }),
    )
  }

  $('webhook-form').addEventListener('submit', (e) => {
    e.preventDefault()
    const form = e.target
    act(form.querySelector('button'), async () => {
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
  })

  // API keys: roll (the new key is shown once; the dashboard signs in again with it).
  async function loadKeys() {
    const a = state.account
    $('acct-id').textContent = a.id
    $('acct-wallet').textContent = a.wallet_address
    $('acct-network').textContent = `${a.network} (chain ${a.chain_id})`
    $('acct-session').textContent = when(state.expiresAt)
  }

  $('roll-form').addEventListener('submit', (e) => {
    e.preventDefault()
    act(e.target.querySelector('button'), async () => {
      const rolled = await api('/account/api-keys/roll', {
        method: 'POST',
        body: { grace_period_ms: Number($('roll-grace').value) },
      })
      // A session ends with the key it was opened with: continue on the new one.
      await signIn(rolled.api_key)
      showSecret(
        'Your new API key',
        `Previous keys stop working at ${when(rolled.previous_keys_expire_at)}. This is the only time the new key is shown.`,
        rolled.api_key,
      )
    })
  })

  // Cancel is a plain button (not the form's first submit button), so Enter in a field submits the action.
  for (const b of document.querySelectorAll('.dialog-cancel'))
    b.addEventListener('click', () => b.closest('dialog').close('cancel'))

  function showSecret(title, text, secret) {
    $('secret-title').textContent = title
    $('secret-text').textContent = text
    $('secret-value').value = secret
    $('secret-dialog').showModal()
    $('secret-value').select()
  }
  $('secret-copy').addEventListener('click', () => copy($('secret-value').value, 'Secret'))
  $('secret-dialog').addEventListener('close', () => {
    $('secret-value').value = ''
  })

  // The overview and the newest calls follow new activity by themselves (a paid call appears without a click).
  const LIVE_MS = 5000
  let refreshing = false
  setInterval(() => {
    if (!state.account || document.hidden || refreshing) return
    const live =
      state.page === 'overview'
        ? loadOverview
        : state.page === 'calls' && callsPager.atFirst()
          ? callsPager.reload
          : null
    if (!live) return
    refreshing = true
    live()
      .catch(() => {})
      .finally(() => {
        refreshing = false
      })
  }, LIVE_MS)

  // --- Start: an existing session (the cookie) or the sign-in form. -------------------------------------
  api('/dashboard/session').then(signedIn, () => showSignIn(''))
})()
