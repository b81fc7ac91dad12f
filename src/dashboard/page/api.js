// The API: every read and every change is a call to the same /api/v1 routes an API client uses. The session
// cookie (HttpOnly, set by POST /api/v1/dashboard/sessions) authenticates, and each state change carries the
// session's CSRF token in X-CSRF-Token.
import { flash } from './dom.js'

const API = '/api/v1'
export const PAGE_SIZE = 20
export const state = { csrf: null, account: null, expiresAt: null, page: null, endpoints: new Map() }

const idempotencyKey = () => (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2))

// Set by session.js: an API refusal for want of a session shows the sign-in form (this module cannot import
// it, session.js calls api()).
let sessionEnded = () => {}
export function whenSessionEnds(fn) {
  sessionEnded = fn
}

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
export async function api(path, { method = 'GET', body, idempotent } = {}) {
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
    sessionEnded(json?.error?.message || 'Your session has ended; sign in again.')
  }
  if (!res.ok) throw new ApiFailure(res.status, json)
  return json
}

/** Runs an action from a button or form: disables it meanwhile, reports the outcome in the status line. */
export async function act(control, fn) {
  if (control) control.disabled = true
  try {
    await fn()
  } catch (err) {
    if (err.status !== 401) flash(err.message, true)
  } finally {
    if (control) control.disabled = false
  }
}

export const query = (params) => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== '') q.set(k, v)
  return `?${q}`
}

export async function endpointNames() {
  const list = await api(`/endpoints${query({ limit: 100 })}`)
  state.endpoints = new Map(list.data.map((e) => [e.id, e]))
  return list.data
}
export const endpointLabel = (id) => state.endpoints.get(id)?.name || id

/** A form's submit runs `fn(form)` as an action of its first button (or `button`, a selector). */
export function onSubmit(id, fn, button = 'button') {
  document.getElementById(id).addEventListener('submit', (e) => {
    e.preventDefault()
    const form = e.currentTarget
    act(form.querySelector(button), () => fn(form))
  })
}
