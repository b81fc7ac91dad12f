// Small DOM and format helpers. Data reaches the page only through textContent and attributes, never as HTML.

export const $ = (id) => document.getElementById(id)

/** h('td', { class: 'num', dataset: {label: 'Price'} }, 'text', node…) */
export function h(tag, props, ...children) {
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

export const usd = (amount) =>
  `$${Number(amount).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`
export const shortUsd = (amount) =>
  amount >= 1000 ? `$${(amount / 1000).toLocaleString('en-US', { maximumFractionDigits: 1 })}k` : usd(amount)
export const when = (iso) =>
  iso
    ? new Date(iso).toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' }) +
      ' UTC'
    : '–'
export const shortHex = (hex) =>
  hex && hex.length > 20 ? `${hex.slice(0, 10)}…${hex.slice(-6)}` : hex || '–'

export function statusBadge(status) {
  const tone =
    { active: 'ok', enabled: 'ok', paid: 'ok', confirmed: 'ok', delivered: 'ok' }[status] ||
    { pending: 'warn', submitted: 'warn' }[status] ||
    { failed: 'bad', disabled: 'bad', expired: 'bad', canceled: 'bad' }[status] ||
    ''
  return h('span', { class: `status ${tone}`, text: status })
}

/** A table cell that names its column on a phone (dashboard.css shows data-label before the value). */
export const td = (label, content, cls) => h('td', { class: cls, dataset: { label } }, content)

export function emptyRow(tbody, columns, text) {
  tbody.replaceChildren(h('tr', {}, h('td', { class: 'empty', colspan: columns, text })))
}

export function flash(text, bad) {
  const f = $('flash')
  f.textContent = text
  f.classList.toggle('bad', Boolean(bad))
}

export async function copy(text, what) {
  try {
    await navigator.clipboard.writeText(text)
    flash(`${what} copied`)
  } catch {
    flash(`${what}: ${text}`)
  }
}

/** A labelled field; `param` is the API's name for it, so an error naming that field can point at it. */
export function field(id, text, control, param, cls) {
  control.id = id
  if (param) control.dataset.param = param
  return h('div', { class: `field ${cls || ''}` }, h('label', { for: id, text }), control)
}
export const amountInput = (placeholder) =>
  h('input', { inputmode: 'decimal', autocomplete: 'off', placeholder })
export function select(options, value) {
  const s = h('select', {}, ...Object.entries(options).map(([v, t]) => h('option', { value: v, text: t })))
  if (value !== undefined) s.value = value
  return s
}

/** A small button in a table row; `label` is its accessible name. */
export const rowButton = (text, label, onclick, cls = 'small') =>
  h('button', { type: 'button', class: cls, text, 'aria-label': label, onclick })
