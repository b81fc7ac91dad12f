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
      // The field at fault as the API names it; `pricing.rules[2].price` read as `pricing.rules.2.price`.
      this.param = body?.error?.param?.replace(/\[(\d+)\]/g, '.$1')
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

  // Endpoints: create, edit pricing (fixed, rules or usage), disable / enable.

  const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']
  const UNITS = { tokens: 'Tokens', response_bytes: 'Response bytes', duration_ms: 'Duration' }
  // The rates each unit reads (the API says which it requires).
  const UNIT_FIELDS = {
    tokens: [
      'input_price_per_million',
      'output_price_per_million',
      'cached_input_price_per_million',
      'price_per_mb',
    ],
    response_bytes: ['price_per_mb'],
    duration_ms: ['price_per_second'],
  }
  const RATE_LABELS = {
    input_price_per_million: 'Input, per million tokens (USDC)',
    output_price_per_million: 'Output, per million tokens (USDC)',
    cached_input_price_per_million: 'Cached input, per million tokens (USDC)',
    price_per_mb: 'Per MB (USDC)',
    price_per_second: 'Per second (USDC)',
  }

  /** A labelled field; `param` is the API's name for it, so an error naming that field can point at it. */
  function field(id, text, control, param, cls) {
    control.id = id
    if (param) control.dataset.param = param
    return h('div', { class: `field ${cls || ''}` }, h('label', { for: id, text }), control)
  }
  const amountInput = (placeholder) => h('input', { inputmode: 'decimal', autocomplete: 'off', placeholder })
  function select(options, value) {
    const s = h('select', {}, ...Object.entries(options).map(([v, t]) => h('option', { value: v, text: t })))
    if (value !== undefined) s.value = value
    return s
  }

  /**
   * The pricing fields of one form: the model, then the fields of that model. read() gives the API's
   * `pricing` object as typed (amounts stay decimal strings: the API parses and bounds them, so the page
   * holds no second copy of its rules); fill() shows an endpoint's pricing.
   */
  function pricingEditor(root, prefix) {
    const model = select({
      fixed: 'Fixed price per call',
      rules: 'By method and path',
      usage: 'By usage (metered)',
    })
    const price = amountInput('0.01')
    const defaultPrice = amountInput('0.01')
    const unit = select(UNITS)
    const maxPrice = amountInput('0.05')
    const onMissing = select({
      max_price: 'Charge the ceiling',
      response_bytes: 'Charge per MB delivered',
      nothing: 'Charge nothing',
    })
    const rates = Object.fromEntries(Object.keys(RATE_LABELS).map((k) => [k, amountInput('0')]))
    const rulesBody = h('div', { class: 'rules' })
    const addButton = h('button', {
      type: 'button',
      class: 'small',
      text: 'Add rule',
      onclick: () => addRule().path.focus(),
    })

    const groups = {
      fixed: h(
        'div',
        { class: 'form-row' },
        field(`${prefix}-price`, 'Price (USDC)', price, 'pricing.price', 'narrow'),
      ),
      rules: h(
        'div',
        { class: 'form-row' },
        h('p', {
          class: 'muted full',
          text: 'The first rule whose method and path prefix match a request sets its price.',
        }),
        h('div', { class: 'full' }, rulesBody),
        addButton,
        field(`${prefix}-default`, 'Default price (USDC)', defaultPrice, 'pricing.default_price', 'narrow'),
      ),
      usage: h(
        'div',
        { class: 'form-row' },
        field(`${prefix}-unit`, 'Unit', unit, 'pricing.unit', 'narrow'),
        field(`${prefix}-max`, 'Ceiling per call (USDC)', maxPrice, 'pricing.max_price', 'narrow'),
        ...Object.entries(rates).map(([k, input]) =>
          field(`${prefix}-${k}`, RATE_LABELS[k], input, `pricing.${k}`, 'narrow'),
        ),
        field(`${prefix}-missing`, 'When the answer has no usage', onMissing, 'pricing.on_missing_usage'),
      ),
    }

    function addRule(rule) {
      const n = rulesBody.children.length + 1
      const i = n - 1
      const method = select(
        { '': 'Any', ...Object.fromEntries(METHODS.map((m) => [m, m])) },
        rule?.method || '',
      )
      const path = h('input', { autocomplete: 'off', placeholder: '/v1/' })
      path.value = rule?.path_prefix ?? ''
      const rulePrice = amountInput('0.01')
      rulePrice.value = rule?.price === undefined ? '' : String(rule.price)
      const row = h(
        'fieldset',
        { class: 'rule form-row' },
        h('legend', { text: `Rule ${n}` }),
        field(`${prefix}-rule${n}-method`, `Rule ${n} method`, method, `pricing.rules.${i}.method`, 'narrow'),
        field(`${prefix}-rule${n}-path`, `Rule ${n} path prefix`, path, `pricing.rules.${i}.path_prefix`),
        field(
          `${prefix}-rule${n}-price`,
          `Rule ${n} price (USDC)`,
          rulePrice,
          `pricing.rules.${i}.price`,
          'narrow',
        ),
        h('button', {
          type: 'button',
          class: 'small',
          text: 'Remove',
          'aria-label': `Remove rule ${n}`,
          onclick: () => {
            // Renumbered, so the labels and the API's field names stay in step.
            const rules = readRules().filter((_, j) => j !== i)
            rulesBody.replaceChildren()
            for (const r of rules) addRule(r)
            if (rules.length === 0) addRule()
            addButton.focus()
          },
        }),
      )
      row.ruleFields = { method, path, price: rulePrice }
      rulesBody.append(row)
      return row.ruleFields
    }
    const readRules = () =>
      [...rulesBody.children].map(({ ruleFields: r }) => ({
        method: r.method.value || null,
        path_prefix: r.path.value.trim(),
        price: r.price.value.trim(),
      }))

    function show() {
      for (const [k, g] of Object.entries(groups)) g.hidden = k !== model.value
      for (const [k, input] of Object.entries(rates))
        input.parentElement.hidden = !UNIT_FIELDS[unit.value].includes(k)
      // Tokens read a per-MB price only to charge an answer without usage by its size.
      if (unit.value === 'tokens')
        rates.price_per_mb.parentElement.hidden = onMissing.value !== 'response_bytes'
      onMissing.parentElement.hidden = unit.value !== 'tokens'
      if (model.value === 'rules' && rulesBody.children.length === 0) addRule()
    }
    model.addEventListener('change', show)
    unit.addEventListener('change', show)
    onMissing.addEventListener('change', show)
    root.replaceChildren(
      h(
        'fieldset',
        { class: 'pricing' },
        h('legend', { text: 'Pricing' }),
        h('div', { class: 'form-row' }, field(`${prefix}-model`, 'Pricing model', model, 'pricing.model')),
        groups.fixed,
        groups.rules,
        groups.usage,
      ),
    )

    const str = (x) => (x === undefined || x === null ? '' : String(x))
    return {
      read() {
        if (model.value === 'fixed') return { model: 'fixed', price: price.value.trim() }
        if (model.value === 'rules')
          return { model: 'rules', rules: readRules(), default_price: defaultPrice.value.trim() }
        const out = { model: 'usage', unit: unit.value, max_price: maxPrice.value.trim() }
        // Only the unit's rates are sent, and an empty one is left out: the API names a missing required one.
        for (const [k, input] of Object.entries(rates))
          if (!input.parentElement.hidden && input.value.trim()) out[k] = input.value.trim()
        if (unit.value === 'tokens') out.on_missing_usage = onMissing.value
        return out
      },
      fill(p) {
        const pricing = p || { model: 'fixed' }
        model.value = pricing.model
        price.value = pricing.model === 'fixed' ? str(pricing.price) : ''
        rulesBody.replaceChildren()
        for (const r of pricing.model === 'rules' ? pricing.rules : []) addRule(r)
        defaultPrice.value = str(pricing.default_price)
        unit.value = pricing.unit || 'tokens'
        maxPrice.value = str(pricing.max_price)
        for (const [k, input] of Object.entries(rates)) input.value = str(pricing[k])
        onMissing.value = pricing.on_missing_usage || 'max_price'
        show()
      },
    }
  }

  /** Shows the API's refusal beside a form and marks the field it names; null clears it. */
  function formError(form, errorEl, err) {
    for (const el of form.querySelectorAll('[aria-invalid]')) {
      el.removeAttribute('aria-invalid')
      el.removeAttribute('aria-describedby')
    }
    errorEl.hidden = !err
    errorEl.textContent = err ? err.message : ''
    if (!err) return
    const at =
      err.param && [...form.querySelectorAll('[data-param]')].find((el) => el.dataset.param === err.param)
    if (at) {
      at.setAttribute('aria-invalid', 'true')
      at.setAttribute('aria-describedby', errorEl.id)
      if (!at.closest('[hidden]')) at.focus()
    }
  }

  /** "fixed · $0.50", "rules · 2 rules · default $0.10", "usage · Tokens · up to $0.05". */
  function pricingSummary(e) {
    const p = e.pricing || { model: 'fixed', price: e.price }
    if (p.model === 'rules')
      return `rules · ${p.rules.length} ${p.rules.length === 1 ? 'rule' : 'rules'} · default ${usd(p.default_price)}`
    if (p.model === 'usage') return `usage · ${UNITS[p.unit] || p.unit} · up to ${usd(p.max_price)}`
    return `fixed · ${usd(p.price ?? e.price)}`
  }

  const createPricing = pricingEditor($('ep-pricing'), 'ep')
  createPricing.fill({ model: 'fixed' })
  const editPricing = pricingEditor($('price-pricing'), 'edit')

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
          td('Pricing', pricingSummary(e)),
          td('Status', statusBadge(e.status)),
          td(
            'Actions',
            h(
              'div',
              { class: 'row-actions' },
              h('button', {
                type: 'button',
                class: 'small',
                text: 'Edit pricing',
                'aria-label': `Edit pricing of ${label}`,
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
    act(form.querySelector('button[type=submit]'), async () => {
      const body = { upstream_url: $('ep-upstream').value.trim(), pricing: createPricing.read() }
      const name = $('ep-name').value.trim()
      if (name) body.name = name
      let created
      try {
        created = await api('/endpoints', { method: 'POST', body, idempotent: true })
      } catch (err) {
        formError(form, $('ep-error'), err)
        throw err
      }
      formError(form, $('ep-error'), null)
      form.reset()
      createPricing.fill({ model: 'fixed' })
      await loadEndpoints()
      flash(`Endpoint ${created.name || created.id} created: ${created.metered_url}`)
    })
  })

  // The dialog stays open on a refusal, with the API's message beside the fields; it closes once saved.
  let editing = null
  function editPrice(endpoint) {
    editing = endpoint
    $('price-endpoint').textContent = endpoint.name || endpoint.id
    editPricing.fill(endpoint.pricing || { model: 'fixed', price: endpoint.price })
    formError($('price-form'), $('price-error'), null)
    $('price-dialog').showModal()
  }
  $('price-form').addEventListener('submit', (e) => {
    e.preventDefault()
    const endpoint = editing
    if (!endpoint) return
    const form = e.currentTarget
    act(form.querySelector('button[type=submit]'), async () => {
      try {
        await api(`/endpoints/${endpoint.id}`, { method: 'PATCH', body: { pricing: editPricing.read() } })
      } catch (err) {
        formError(form, $('price-error'), err)
        throw err
      }
      $('price-dialog').close('save')
      await loadEndpoints()
      flash(`Pricing of ${endpoint.name || endpoint.id} saved`)
    })
  })
  $('price-dialog').addEventListener('close', () => {
    editing = null
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
    if (list.data.length === 0) emptyRow(body, 6, 'No calls match.')
    else
      body.replaceChildren(
        ...list.data.map((c) =>
          h(
            'tr',
            { dataset: { id: c.id } },
            td('Time', when(c.created_at)),
            td('Endpoint', endpointLabel(c.endpoint_id)),
            td('Payer', h('span', { class: 'mono', title: c.payer, text: shortHex(c.payer) })),
            // The protocol that paid (x402, mpp, tx-hash, …); the exact scheme on hover.
            td('Paid by', h('span', { title: c.scheme || '', text: c.protocol || '—' })),
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
