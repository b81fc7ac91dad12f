// Session: sign in with the API key (the cookie it sets is HttpOnly), sign out, and a session that ends.
import { act, api, state, whenSessionEnds } from './api.js'
import { $ } from './dom.js'

// Set by dashboard.js: what a signed-in page shows first (the page named by the URL's hash).
let opened = () => {}
export function whenSignedIn(fn) {
  opened = fn
}

export function signedIn(session) {
  state.csrf = session.csrf_token
  state.account = session.account
  state.expiresAt = session.expires_at
  $('business-name').textContent = session.account.business_name
  $('mode-badge').hidden = session.account.livemode
  document.body.dataset.state = 'app'
  $('signin').hidden = true
  $('app').hidden = false
  opened()
}

export function showSignIn(message) {
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
whenSessionEnds(showSignIn)

export async function signIn(apiKey) {
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
