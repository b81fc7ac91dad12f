// The pricing fields of an endpoint's forms (fixed, rules or usage), their summary in the table, and the
// API's refusal shown beside a form.
import { amountInput, field, h, select, usd } from './dom.js'

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

/** The rules of a "by method and path" pricing: numbered rows, renumbered when one is removed. */
function ruleList(prefix) {
  const body = h('div', { class: 'rules' })
  const addButton = h('button', {
    type: 'button',
    class: 'small',
    text: 'Add rule',
    onclick: () => add().path.focus(),
  })
  const read = () =>
    [...body.children].map(({ ruleFields: r }) => ({
      method: r.method.value || null,
      path_prefix: r.path.value.trim(),
      price: r.price.value.trim(),
    }))
  function remove(i) {
    // Renumbered, so the labels and the API's field names stay in step.
    const rules = read().filter((_, j) => j !== i)
    body.replaceChildren()
    for (const r of rules) add(r)
    if (rules.length === 0) add()
    addButton.focus()
  }
  function add(rule) {
    const n = body.children.length + 1
    const i = n - 1
    const method = select(
      { '': 'Any', ...Object.fromEntries(METHODS.map((m) => [m, m])) },
      rule?.method || '',
    )
    const path = h('input', { autocomplete: 'off', placeholder: '/v1/' })
    path.value = rule?.path_prefix ?? ''
    const price = amountInput('0.01')
    price.value = rule?.price === undefined ? '' : String(rule.price)
    const id = (name) => `${prefix}-rule${n}-${name}`
    const row = h(
      'fieldset',
      { class: 'rule form-row' },
      h('legend', { text: `Rule ${n}` }),
      field(id('method'), `Rule ${n} method`, method, `pricing.rules.${i}.method`, 'narrow'),
      field(id('path'), `Rule ${n} path prefix`, path, `pricing.rules.${i}.path_prefix`),
      field(id('price'), `Rule ${n} price (USDC)`, price, `pricing.rules.${i}.price`, 'narrow'),
      h('button', {
        type: 'button',
        class: 'small',
        text: 'Remove',
        'aria-label': `Remove rule ${n}`,
        onclick: () => remove(i),
      }),
    )
    row.ruleFields = { method, path, price }
    body.append(row)
    return row.ruleFields
  }
  return { body, addButton, add, read }
}

/** The controls of the three models; `rates` by the API's field name. */
function pricingControls() {
  return {
    model: select({
      fixed: 'Fixed price per call',
      rules: 'By method and path',
      usage: 'By usage (metered)',
    }),
    price: amountInput('0.01'),
    defaultPrice: amountInput('0.01'),
    unit: select(UNITS),
    maxPrice: amountInput('0.05'),
    onMissing: select({
      max_price: 'Charge the ceiling',
      response_bytes: 'Charge per MB delivered',
      nothing: 'Charge nothing',
    }),
    rates: Object.fromEntries(Object.keys(RATE_LABELS).map((k) => [k, amountInput('0')])),
  }
}

/** One group of fields per model; the editor shows the chosen one. */
function pricingGroups(prefix, c, rules) {
  return {
    fixed: h(
      'div',
      { class: 'form-row' },
      field(`${prefix}-price`, 'Price (USDC)', c.price, 'pricing.price', 'narrow'),
    ),
    rules: h(
      'div',
      { class: 'form-row' },
      h('p', {
        class: 'muted full',
        text: 'The first rule whose method and path prefix match a request sets its price.',
      }),
      h('div', { class: 'full' }, rules.body),
      rules.addButton,
      field(`${prefix}-default`, 'Default price (USDC)', c.defaultPrice, 'pricing.default_price', 'narrow'),
    ),
    usage: h(
      'div',
      { class: 'form-row' },
      field(`${prefix}-unit`, 'Unit', c.unit, 'pricing.unit', 'narrow'),
      field(`${prefix}-max`, 'Ceiling per call (USDC)', c.maxPrice, 'pricing.max_price', 'narrow'),
      ...Object.entries(c.rates).map(([k, input]) =>
        field(`${prefix}-${k}`, RATE_LABELS[k], input, `pricing.${k}`, 'narrow'),
      ),
      field(`${prefix}-missing`, 'When the answer has no usage', c.onMissing, 'pricing.on_missing_usage'),
    ),
  }
}

/** The API's `pricing` object from the controls, as typed. */
function readPricing(c, rules) {
  if (c.model.value === 'fixed') return { model: 'fixed', price: c.price.value.trim() }
  if (c.model.value === 'rules')
    return { model: 'rules', rules: rules.read(), default_price: c.defaultPrice.value.trim() }
  const out = { model: 'usage', unit: c.unit.value, max_price: c.maxPrice.value.trim() }
  // Only the unit's rates are sent, and an empty one is left out: the API names a missing required one.
  for (const [k, input] of Object.entries(c.rates))
    if (!input.parentElement.hidden && input.value.trim()) out[k] = input.value.trim()
  if (c.unit.value === 'tokens') out.on_missing_usage = c.onMissing.value
  return out
}

/**
 * The pricing fields of one form: the model, then the fields of that model. read() gives the API's
 * `pricing` object as typed (amounts stay decimal strings: the API parses and bounds them, so the page
 * holds no second copy of its rules); fill() shows an endpoint's pricing.
 */
export function pricingEditor(root, prefix) {
  const c = pricingControls()
  const rules = ruleList(prefix)
  const groups = pricingGroups(prefix, c, rules)
  function show() {
    for (const [k, g] of Object.entries(groups)) g.hidden = k !== c.model.value
    for (const [k, input] of Object.entries(c.rates))
      input.parentElement.hidden = !UNIT_FIELDS[c.unit.value].includes(k)
    // Tokens read a per-MB price only to charge an answer without usage by its size.
    if (c.unit.value === 'tokens')
      c.rates.price_per_mb.parentElement.hidden = c.onMissing.value !== 'response_bytes'
    c.onMissing.parentElement.hidden = c.unit.value !== 'tokens'
    if (c.model.value === 'rules' && rules.body.children.length === 0) rules.add()
  }
  for (const control of [c.model, c.unit, c.onMissing]) control.addEventListener('change', show)
  root.replaceChildren(
    h(
      'fieldset',
      { class: 'pricing' },
      h('legend', { text: 'Pricing' }),
      h('div', { class: 'form-row' }, field(`${prefix}-model`, 'Pricing model', c.model, 'pricing.model')),
      groups.fixed,
      groups.rules,
      groups.usage,
    ),
  )
  const str = (x) => (x === undefined || x === null ? '' : String(x))
  return {
    read: () => readPricing(c, rules),
    fill(p) {
      const pricing = p || { model: 'fixed' }
      c.model.value = pricing.model
      c.price.value = pricing.model === 'fixed' ? str(pricing.price) : ''
      rules.body.replaceChildren()
      for (const r of pricing.model === 'rules' ? pricing.rules : []) rules.add(r)
      c.defaultPrice.value = str(pricing.default_price)
      c.unit.value = pricing.unit || 'tokens'
      c.maxPrice.value = str(pricing.max_price)
      for (const [k, input] of Object.entries(c.rates)) input.value = str(pricing[k])
      c.onMissing.value = pricing.on_missing_usage || 'max_price'
      show()
    },
  }
}

/** Shows the API's refusal beside a form and marks the field it names; null clears it. */
export function formError(form, errorEl, err) {
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
export function pricingSummary(e) {
  const p = e.pricing || { model: 'fixed', price: e.price }
  if (p.model === 'rules')
    return `rules · ${p.rules.length} ${p.rules.length === 1 ? 'rule' : 'rules'} · default ${usd(p.default_price)}`
  if (p.model === 'usage') return `usage · ${UNITS[p.unit] || p.unit} · up to ${usd(p.max_price)}`
  return `fixed · ${usd(p.price ?? e.price)}`
}
