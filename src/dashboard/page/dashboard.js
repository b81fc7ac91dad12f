// The merchant dashboard, as ES modules (served under the page's CSP with content-hashed names: see
// src/dashboard/route.ts). This one routes between the pages and starts: an existing session (the cookie)
// or the sign-in form. Every read and change goes through api.js to the /api/v1 routes an API client uses.

import { callsPager, loadOverview, payoutsPager } from './activity.js'
import { api, state } from './api.js'
import { $, flash } from './dom.js'
import { loadEndpoints } from './endpoints.js'
import { loadKeys } from './keys.js'
import { paymentsPager } from './payments.js'
import { showSignIn, signedIn, whenSignedIn } from './session.js'
import { loadWebhooks } from './webhooks.js'

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
whenSignedIn(route)
window.addEventListener('hashchange', () => {
  route()
  $('main').focus()
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

api('/dashboard/session').then(signedIn, () => showSignIn(''))
